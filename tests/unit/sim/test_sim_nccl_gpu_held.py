# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulated fleet's nccl-tests (fake all_reduce_perf, faults nccl_slow / nccl_fail) and the gpu_held fault.

The fake's output is read back with the collection's own parser (module_utils/_validate.py) and compared, line by
line where nothing depends on the run, with the real nccl-tests 2.17.6 run it copies.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _reload
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import evaluate, parse_nccl
from ansible_collections.gpufleet.lifecycle.plugins.modules import driver_reload
from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import read_real_output

from test_fake_tools import Node  # pylint: disable=import-error

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'sim'))

import fleet_faults  # noqa: E402  pylint: disable=wrong-import-position,import-error
from gpufleet_sim import nccl_tests, state  # noqa: E402  pylint: disable=wrong-import-position,import-error

REAL = 'all_reduce_perf_nccl2.25.1_nccl-tests2.17.6_1node-8xA100-SXM4-40GB-BM.GPU4.8_oci-ocitutorials-ol.txt'
COMMAND = ['-b', '8M', '-e', '1G', '-f', '2', '-g', '8']
NEW = '580.65.06'


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path / 'node').healthy()


def perf(node, *arguments, **environment):
    """Run the fake all_reduce_perf in the node root (``environment``: more variables, e.g. NCCL_TESTS_MIN_BW)."""
    return subprocess.run([sys.executable, '-m', 'gpufleet_sim.nccl_tests', 'run'] + list(arguments), env=node.env(**environment),
                          capture_output=True, text=True, timeout=60, check=False)


def facts():
    return {'health': 'ok', 'gpu_count': 8, 'driver_version': '550.127.05', 'gpus': [], 'services': {}}


def nccl_check(process, minimum=0):
    result = {'rc': process.returncode, 'stdout': process.stdout, 'stderr': process.stderr}
    return [check for check in evaluate(facts(), nccl=result, nccl_min_busbw=minimum, persistenced=False)['checks']
            if check['name'] == 'nccl'][0]


def test_the_real_command_line_prints_the_real_header(tmp_path):
    """One rank of the real sample's run (-b 10G -e 10G -t 1 -g 1 on an A100 node): the same header, the same layout."""
    real = read_real_output('nccl-tests', REAL).splitlines()
    process = perf(Node(tmp_path / 'a100', profile='a100-sxm-8').healthy(), '-b', '10G', '-e', '10G', '-t', '1', '-g', '1')
    lines = process.stdout.splitlines()
    assert process.returncode == 0 and lines[:5] == real[:5]
    assert lines[5].endswith('device  0 [0000:07:00] NVIDIA A100-SXM4-80GB') and lines[5][:20] == real[5][:20]
    assert lines[6:10] == real[13:17]
    # One rank: no bus traffic, as nccl-tests computes it (busbw = algbw * 2(n-1)/n).
    assert lines[10].split()[:5] == real[17].split()[:5] and lines[10].split()[7] == '0.00'


def test_a_run_reads_back_and_matches_the_real_layout(node):
    process = perf(node, *COMMAND)
    assert process.returncode == 0, process.stderr
    real = read_real_output('nccl-tests', REAL).splitlines()
    lines = process.stdout.splitlines()
    assert lines[:2] == real[:2]
    assert lines[2] == ('# nThread 1 nGpus 8 minBytes 8388608 maxBytes 1073741824 step: 2(factor) warmup iters: 1 iters: 20 '
                        'agg iters: 1 validation: 1 graph: 0')
    # The table header (three lines, trailing spaces included) and the footer are byte for byte the real ones.
    start = real.index('# Using devices') + 9
    assert lines[lines.index('# Using devices') + 9:][:4] == real[start:start + 4]
    assert lines[-5:-2] == ['# Out of bounds values : 0 OK', lines[-4], '#']
    assert lines[-4].startswith('# Avg bus bandwidth    : ') and lines[-4].endswith(' ') and real[-4].startswith('# Avg bus bandwidth    : ')
    assert real[-4].endswith(' ')
    assert lines[-2:] == real[-2:] == ['# Collective test concluded: all_reduce_perf', '']
    # One rank per GPU, the node's PCI addresses and model, in the real rank-line layout.
    ranks = [line for line in lines if line.startswith('#  Rank ')]
    assert len(ranks) == 8 and ranks[0].split()[1:5] == real[5].split()[1:5] == ['Rank', '0', 'Group', '0']
    assert ranks[0].endswith('device  0 [0000:18:00] NVIDIA H100 80GB HBM3') and len(set(line.split()[6] for line in ranks)) == 1
    parsed = parse_nccl(process.stdout)
    assert parsed['rows'] == 8 and parsed['wrong'] == 0 and parsed['out_of_bounds'] == 0 and parsed['error'] is None
    rows = [line.split() for line in lines if line and not line.startswith('#')]
    assert [int(row[0]) for row in rows] == [8388608 << step for step in range(8)]
    average = sum(float(row[7]) + float(row[11]) for row in rows) / 16
    assert abs(parsed['avg_busbw'] - average) < 0.01
    assert 250 < parsed['avg_busbw'] < 400, 'an H100 node all-reduces 8M..1G at a few hundred GB/s'
    assert perf(node, *COMMAND).stdout.split('# Avg bus bandwidth')[1] == process.stdout.split('# Avg bus bandwidth')[1]
    assert nccl_check(process, 100)['passed']


def test_reducing_max_bytes_to_the_memory_and_no_check(node):
    process = perf(node, '-b', '64G', '-e', '64G', '-g', '8', '-c', '0')
    assert '# Reducing maxBytes to ' in process.stdout and ' N/A' in process.stdout
    assert parse_nccl(process.stdout)['rows'] == 1


@pytest.mark.parametrize('branch, slow', [(None, True), (550, True), (580, False)])
def test_nccl_slow_caps_the_bus_bandwidth(node, branch, slow):
    settings = {'busbw': 40.0}
    if branch:
        settings['branch'] = branch
    node.faults({'nccl_slow': settings})
    process = perf(node, *COMMAND)
    average = parse_nccl(process.stdout)['avg_busbw']
    assert process.returncode == 0 and (average < 40) is slow, average
    check = nccl_check(process, 100)
    assert check['passed'] is not slow
    if slow:
        assert 'average bus bandwidth %.3f GB/s is below the threshold 100' % average in check['message'], check


def test_nccl_tests_min_bw_fails_the_run_as_nccl_tests_does(node):
    process = perf(node, *COMMAND, NCCL_TESTS_MIN_BW='1000')
    assert process.returncode == 6 and '# Avg bus bandwidth    : ' in process.stdout and process.stdout.rstrip().endswith('common.cu:1100')
    assert ' FAILED\n' in process.stdout


@pytest.mark.parametrize('error, words', [('system', 'unhandled system error (run with NCCL_DEBUG=INFO for details)'),
                                          ('remote', 'remote process exited or there was a network error')])
def test_nccl_fail_prints_nccl_tests_failure_and_validation_quotes_it(node, error, words):
    node.faults({'nccl_fail': {'error': error}})
    process = perf(node, *COMMAND)
    assert process.returncode == 3 and process.stderr == ''
    failure = "Test NCCL failure common.cu:1279 '%s / '" % words
    assert failure in process.stdout and ' Test failure common.cu:1100' in process.stdout.splitlines()[-1]
    assert parse_nccl(process.stdout)['error'].endswith(failure)
    check = nccl_check(process)
    # nccl-tests prints its failure on stdout: the check quotes it, not the empty stderr.
    assert not check['passed'] and check['message'].startswith('all_reduce_perf failed (rc 3): ') and failure in check['message'], check


def test_nccl_fail_only_on_its_branch(node):
    node.faults({'nccl_fail': {'error': 'system', 'branch': 580}})
    assert perf(node, *COMMAND).returncode == 0


def test_more_gpus_than_the_node_has(node):
    record = json.loads(node.read(state.BOOT_FILE))
    record['absent_gpus'] = [5]
    node.write_json(state.BOOT_FILE, record)
    process = perf(node, *COMMAND)
    assert process.returncode == 5
    assert process.stderr.splitlines()[0] == 'Invalid number of GPUs: 8 requested but only 7 were found.'
    assert not nccl_check(process)['passed'] and 'only 7 were found' in nccl_check(process)['message']


@pytest.mark.parametrize('loaded, words', [(None, 'no CUDA-capable device is detected'),
                                           (NEW, 'system has unsupported display driver / cuda driver combination')])
def test_no_usable_driver_is_a_cuda_failure(node, loaded, words):
    node.boot_json(loaded)
    process = perf(node, *COMMAND)
    assert process.returncode == 2 and "Test CUDA failure util.cu:553 '%s'" % words in process.stdout
    assert words in nccl_check(process)['message']


def test_bad_sizes_are_refused_as_nccl_tests_does(node):
    process = perf(node, '-b', '1G', '-e', '8M')
    assert process.returncode == 255 and "invalid sizes for 'minbytes' and 'maxbytes'" in process.stderr
    assert perf(node, '-b', '8Q').stderr == "invalid size specified for 'minbytes'\n"


def test_install_and_remove(node):
    assert node.run('nccl_tests', 'install').stdout.strip() == 'installed'
    assert node.run('nccl_tests', 'install').stdout.strip() == 'already installed'
    wrapper = node.path(nccl_tests.INSTALL_PATH)
    assert os.access(wrapper, os.X_OK) and 'gpufleet_sim.nccl_tests run "$@"' in node.read(nccl_tests.INSTALL_PATH)
    assert node.run('nccl_tests', 'remove').stdout.strip() == 'removed' and not os.path.exists(wrapper)


@pytest.mark.parametrize('size, expected', [('8M', 8388608), ('1G', 1073741824), ('512k', 524288), ('64', 64), ('1.5K', 1536),
                                            ('x', None)])
def test_parse_size(size, expected):
    assert nccl_tests.parse_size(size) == expected


@pytest.mark.parametrize('value, width, text', [(80646.8, 7, '80646.8'), (233.0, 6, '233.00'), (4511.2, 7, '4511.20'),
                                                (1234.5, 6, '1234.5'), (123456.0, 6, '123456'), (0.5, 6, '  0.50')])
def test_float_str_is_get_float_str(value, width, text):
    assert nccl_tests.float_str(value, width) == text


def test_fault_settings():
    assert fleet_faults.parse_fault_settings('nccl_slow', ['busbw=40.5', 'branch=580']) == {'busbw': 40.5, 'branch': 580}
    assert fleet_faults.parse_fault_settings('nccl_fail', []) == {'error': 'system'}
    assert fleet_faults.parse_fault_settings('gpu_held', ['gpu=3']) == {'gpu': 3, 'seconds': 3600}
    with pytest.raises(fleet_faults.FaultError, match='error must be one of'):
        fleet_faults.parse_fault_settings('nccl_fail', ['error=bogus'])
    with pytest.raises(fleet_faults.FaultError, match='busbw must be above 0'):
        fleet_faults.parse_fault_settings('nccl_slow', ['busbw=0'])
    command = fleet_faults.node_command('gpu_held', {'gpu': 3, 'seconds': 60})
    assert command[-6:] == ['gpufleet_sim.gpu_hold', 'start', '--gpu', '3', '--seconds', '60']
    assert fleet_faults.stop_commands({'gpu_held': {}})[0][-2:] == ['gpufleet_sim.gpu_hold', 'stop']
    assert fleet_faults.stop_commands({'xid': {}}) == []


def held(node):
    """driver_reload's view of the node: the processes holding its device nodes.  The node root is a folder here, so its
    device nodes are <root>/dev/...; in a node the root is / itself."""
    prefix = node.root
    entries = [dict(entry, fds=[target[len(prefix):] for target in entry['fds'] if target.startswith(prefix + '/dev/')])
               for entry in driver_reload._proc_entries()]  # pylint: disable=protected-access
    return _reload.find_holders(entries, own_pids=(os.getpid(),))


def test_gpu_held_is_seen_by_driver_reload(node):
    """The holder is a real process with real descriptors: driver_reload's /proc scan names it, and stop lets go."""
    for name in ('nvidiactl', 'nvidia0', 'nvidia1'):
        node.write('dev/' + name, '')
    started = node.run('gpu_hold', 'start', '--gpu', '1', '--seconds', '60')
    assert started.returncode == 0, started.stderr
    pid = json.loads(started.stdout)['pid']
    try:
        holders = held(node)
        assert [(holder['pid'], holder['devices']) for holder in holders] == [(pid, ['/dev/nvidia1', '/dev/nvidiactl'])]
        assert 'pid %d: /dev/nvidia1 /dev/nvidiactl' % pid in _reload.describe_holders(holders)
        assert json.loads(node.run('gpu_hold', 'start').stdout)['pid'] == pid, 'a second start does nothing'
    finally:
        stopped = node.run('gpu_hold', 'stop')
    assert json.loads(stopped.stdout)['stopped'] == pid
    assert not node.exists('run/gpufleet-sim/gpu-held.pid')
    deadline = time.time() + 10
    while held(node) and time.time() < deadline:
        time.sleep(0.05)
    assert held(node) == []


def test_gpu_held_without_the_device_fails_loudly(node):
    started = node.run('gpu_hold', 'start', '--gpu', '7', '--seconds', '5')
    assert started.returncode != 0 and 'cannot open' in started.stderr and 'nvidia' in started.stderr
