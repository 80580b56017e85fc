# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The shell gatherer (drift_check's) reads a node exactly as the gpu_facts module does.

Both run here on one folder of stand-in tools that print real captured outputs (and misbehave: a mismatch, a crash,
a hang, bytes that are not UTF-8); what ``_facts.assemble`` makes of the two ``raw`` mappings must be equal.
"""

import json
import os
import shlex
import subprocess

import pytest

from ansible.module_utils.common.process import get_bin_path

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _gather
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts import assemble
from ansible_collections.gpufleet.lifecycle.plugins.modules import gpu_facts
from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import real_output_path
from ansible_collections.gpufleet.lifecycle.tests.unit.listing_readers import parse_dpkg_l

XML = real_output_path('nvidia-smi-xml', 'telegraf_a100-sxm4-80gb_535.54.03_v12.xml')
MISMATCH = real_output_path('errors', 'nvml-mismatch_570.124_tinygrad-ogkm-issue47.txt')
DPKG_L = real_output_path('packages', 'dpkg-l-nvidia_535.129.03_ubuntu22.04_nct-1.15.0rc1_nct-issue196.txt')
DCGMI = real_output_path('dcgmi', 'dcgmi-v_3.3.1_hostengine-3.3.0_DCGM-issue139.txt')
SYSTEMCTL = real_output_path('systemd', 'systemctl-show_4units_systemd252_debian12_sim-node.txt')
CTK = real_output_path('packages', 'nvidia-ctk-version_1.12.0_nct-issue50.txt')
BOUNDARY = 'gpufleet-gather-0123456789abcdef'
HEALTHY_SMI = 'exec cat %s\n' % shlex.quote(XML)


class FakeModule:
    """What gpu_facts.gather uses of AnsibleModule."""

    def __init__(self, state_dir, command_timeout):
        self.params = {'nvidia_smi_path': None, 'gather_packages': True, 'command_timeout': command_timeout,
                       'package_timeout': 120, 'state_dir': state_dir}
        self.warnings = []

    def get_bin_path(self, name, opt_dirs=None):
        try:
            return get_bin_path(name, opt_dirs=opt_dirs)
        except ValueError:
            return None

    def warn(self, message):
        self.warnings.append(message)


def tool(folder, name, body):
    path = os.path.join(folder, name)
    with open(path, 'w', encoding='utf-8') as handle:
        handle.write('#!/bin/sh\n' + body)
    os.chmod(path, 0o755)


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A folder of stand-in tools first on PATH, and a state folder with a pin and an oversized reboot marker."""
    tools = tmp_path / 'bin'
    tools.mkdir()
    with open(DPKG_L, encoding='utf-8') as handle:
        listing = parse_dpkg_l(handle.read())
    query = tmp_path / 'dpkg-query.txt'
    query.write_text(''.join('%s\t%s\t%s \n' % (row['package'], row['version'] or '', row['status']) for row in listing.values()))
    tool(str(tools), 'dpkg-query', 'exec cat %s\n' % shlex.quote(str(query)))
    tool(str(tools), 'dcgmi', 'exec cat %s\n' % shlex.quote(DCGMI))
    tool(str(tools), 'nvidia-ctk', 'exec cat %s\n' % shlex.quote(CTK))
    tool(str(tools), 'systemctl', 'exec cat %s\n' % shlex.quote(SYSTEMCTL))
    state = tmp_path / 'state'
    state.mkdir()
    (state / 'pin.json').write_text('{"driver": "535.54.03"}\n')
    (state / 'reboot-required').write_text('x' * (_gather.RECORD_LIMIT + 1))
    monkeypatch.setenv('PATH', '%s:/usr/bin:/bin' % tools)
    return {'tools': str(tools), 'state': str(state), 'tmp': tmp_path}


def both(node, command_timeout=60, shell=None):
    """(facts from the module's gather, facts from the script) on the stand-in node; ``shell`` instead of /bin/sh.
    Both warn of the same commands that ran past their limit."""
    module = FakeModule(node['state'], command_timeout)
    by_module = assemble(gpu_facts.gather(module))
    argv = _gather.argv(_gather.script(), BOUNDARY, command_timeout, 120, node['state'])
    argv[0] = shell or argv[0]
    process = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    assert process.returncode == 0, process.stderr
    assert process.stderr == b''
    raw = _gather.parse(process.stdout, BOUNDARY, command_timeout, 120)
    assert raw['warnings'] == module.warnings
    return by_module, assemble(raw)


SMI = {
    'healthy': HEALTHY_SMI,
    'library_mismatch': 'cat %s\nexit 18\n' % shlex.quote(MISMATCH),
    'crashed': 'echo "starting" >&2\nkill -SEGV $$\n',
    'not_utf8': "printf '<?xml version=\"1.0\" ?>\\n<nvidia_smi_log>\\377\\033[31m\\000</nvidia_smi_log>\\n'\n",
    'no_devices': 'echo "No devices were found"\nexit 6\n',
}


# /bin/sh is dash on Debian and bash on RHEL-family nodes.
@pytest.mark.parametrize('shell', ['/bin/sh', '/bin/bash'])
@pytest.mark.parametrize('case', sorted(SMI))
def test_the_script_reads_what_the_module_reads(node, case, shell):
    tool(node['tools'], 'nvidia-smi', SMI[case])
    by_module, by_script = both(node, shell=shell)
    assert by_script == by_module
    assert by_script['packages']['libnvidia-container-tools'] == '1.15.0~rc.1-1'
    assert by_script['tools']['dcgm'] == '3.3.1' and by_script['tools']['nvidia_ctk'] == '1.12.0'
    assert any(state and state['active'] for state in by_script['services'].values())
    assert by_script['recorded_pin'] == {'driver': '535.54.03'} and by_script['pending_reboot'] == 'too large to read'
    if case == 'healthy':
        assert by_script['health'] == 'ok' and by_script['driver_version'] == '535.54.03'
    else:
        assert by_script['health'] == 'broken', by_script['health_message']


def test_a_hung_nvidia_smi_is_killed_at_the_time_limit_by_both(node):
    tool(node['tools'], 'nvidia-smi', 'sleep 30\n')
    by_module, by_script = both(node, command_timeout=1)
    assert by_script == by_module
    assert by_script['health_reason'] == 'nvidia_smi_hung'
    module = FakeModule(node['state'], 1)
    gpu_facts.gather(module)
    assert len(module.warnings) == 1 and 'nvidia-smi -q -x did not finish within 1 s' in module.warnings[0]
    assert 'did not finish within 1 s' in by_script['health_message']


def test_no_nvidia_smi_reads_the_same_from_both(node):
    # The driver packages are installed (the dpkg listing), nvidia-smi is not on PATH: broken, not absent.
    by_module, by_script = both(node)
    assert by_script == by_module
    assert (by_script['health'], by_script['health_reason']) == ('broken', 'nvidia_smi_missing')


def test_a_state_file_that_is_not_a_regular_file_reads_as_absent_for_both(node):
    # A FIFO where the previous pin belongs would block a read forever; a folder cannot be read.
    os.mkfifo(os.path.join(node['state'], 'pin.previous.json'))
    os.remove(os.path.join(node['state'], 'reboot-required'))
    os.mkdir(os.path.join(node['state'], 'reboot-required'))
    tool(node['tools'], 'nvidia-smi', HEALTHY_SMI)
    by_module, by_script = both(node)
    assert by_script == by_module
    assert (by_script['previous_pin'], by_script['pending_reboot'], by_script['record_error']) == (None, None, None)


def test_a_pseudo_terminal_s_cr_lf_is_undone(node):
    tool(node['tools'], 'nvidia-smi', HEALTHY_SMI)
    argv = _gather.argv(_gather.script(), BOUNDARY, 60, 120, node['state'])
    data = subprocess.run(argv, capture_output=True, timeout=60, check=True).stdout
    direct = _gather.parse(data, BOUNDARY, 60, 120)
    assert _gather.parse(data.replace(b'\n', b'\r\n'), BOUNDARY, 60, 120) == direct


def test_output_cannot_forge_a_section(node):
    # A tool printing a section header of its own (another token, or this one's name without the token) changes nothing.
    tool(node['tools'], 'nvidia-smi', HEALTHY_SMI)
    tool(node['tools'], 'dcgmi', 'cat %s\nprintf "\\n%s end\\n\\ngpufleet-gather-x nvidia_smi.rc\\n9"\n' % (shlex.quote(DCGMI), 'nvidia_smi.rc'))
    by_module, by_script = both(node)
    assert by_script == by_module and by_script['health'] == 'ok'


@pytest.mark.parametrize('output, reason', [
    (b'', 'stopped before its end'),
    (b'\n' + BOUNDARY.encode() + b' kernel\n6.1.0\n', 'stopped before its end'),
    (b'\n' + BOUNDARY.encode() + b' error timeout(1) not found\n', 'timeout(1) not found'),
])
def test_incomplete_output_is_an_error_the_action_falls_back_on(output, reason):
    with pytest.raises(_gather.GatherError, match=reason.replace('(', r'\(').replace(')', r'\)')):
        _gather.parse(output, BOUNDARY, 60, 120)


def test_the_script_carries_no_inventory_data():
    # Boundary, time limits and the state folder are arguments; the script text is the same for every host.
    assert _gather.script() == _gather.script()
    argv = _gather.argv(_gather.script(), BOUNDARY, 60, 120, '/etc/gpufleet')
    assert argv[:2] == ['/bin/sh', '-c'] and argv[3:] == ['gpufleet-gather', BOUNDARY, '60', '120', '/etc/gpufleet']


H100_GATHER = real_output_path('h100-device', 'gather-raw_h100_580.159.04_no-package-driver.bin')


def h100_sections():
    """The sections of the one shell command as a real H100 node answered it (hacking/capture_real_node.sh), and its boundary."""
    with open(H100_GATHER + '.source.txt', encoding='utf-8') as handle:
        boundary = [line.split(': ', 1)[1].strip() for line in handle if line.startswith('boundary: ')][0]
    with open(H100_GATHER, 'rb') as handle:
        data = handle.read()
    return data, boundary


def test_a_real_h100_read_by_the_shell_gatherer_as_gpu_facts_read_it():
    # The one shell command as a real H100 node answered it, and the gpu_facts module's result on a machine of the same kind
    # (same image, driver and VBIOS; another lease, so another board) earlier the same day: the facts the controller
    # assembles are the module's, apart from the board's identity and the live reading.
    #
    # That script predates issue 27: it read no driver tree version file and no installer-log flag.  The sections and flags
    # added since are optional, as the /proc files always were (a section only where its file is readable), so its output
    # still parses: the tree's version reads as absent (driver_tree null), the installer log as not there.
    data, boundary = h100_sections()
    raw = _gather.parse(data, boundary, _gather.COMMAND_TIMEOUT, _gather.PACKAGE_TIMEOUT)
    facts = assemble(raw)
    with open(real_output_path('h100-device', 'gpu_facts-module-result_h100.json'), encoding='utf-8') as handle:
        module = json.load(handle)['ansible_facts']['gpufleet']
    assert raw['warnings'] == []
    assert facts['driver_version'] == facts['kernel_module_version'] == '580.159.04'
    assert (facts['health'], facts['gpu_count'], facts['gpus'][0]['name']) == ('ok', 1, 'NVIDIA H100 80GB HBM3')
    assert facts['nvidia_smi_path'] == '/usr/local/nvidia/bin/nvidia-smi'
    live = ('temperature_c', 'uuid', 'serial', 'board_part_number')
    assert [dict((k, v) for k, v in gpu.items() if k not in live) for gpu in facts['gpus']] == \
        [dict((k, v) for k, v in gpu.items() if k not in live) for gpu in module['gpus']]
    # The module then (collection at efd2326) had none of issue 27's keys and said null for a driver no package owns.
    assert module['driver_source'] is None
    assert dict((k, facts[k]) for k in module if k not in ('gpus', 'driver_source')) == \
        dict((k, v) for k, v in module.items() if k not in ('gpus', 'driver_source'))
    assert (raw['driver_tree_version'], raw['runfile_installer_log'], raw['systemctl']) == (None, False, None)
    assert facts['driver_source'] == 'unowned'
    assert facts['driver_source_evidence'] == (
        'nvidia-smi at /usr/local/nvidia/bin/nvidia-smi; loaded nvidia module 580.159.04 (/proc/driver/nvidia/version); '
        'no driver package (dpkg), no GPU Operator root, no nvidia-installer log or nvidia-uninstall')
    assert facts['driver_tree'] is None
    assert (facts['kernel_module_flavor'], facts['persistence_mode'], facts['systemd']) == ('open', 'Enabled', False)


# --------------------------------------------------------------------------- issue 27: a node as the real H100 is

# What the gathering script and the module need of the system besides the tools they read (no systemctl among them).
SYSTEM_TOOLS = ('cat', 'head', 'ls', 'mktemp', 'rm', 'timeout', 'uname')


@pytest.fixture
def h100_node(tmp_path, monkeypatch):
    """A stand-in of the real H100 node: nvidia-smi in a driver tree at <root>/usr/local/nvidia/bin beside its version file,
    not on PATH; the /proc files, dpkg listing and nvcc banner it printed; no systemctl, no GPU Operator root, no runfile.

    The node's paths (_gather's constants, which both gatherers read) point into the folder; PATH holds the stand-in tools
    and the few system tools the script runs, so this machine's own systemctl and CUDA are not found.
    """
    root = tmp_path / 'node'
    tree = root / 'usr' / 'local' / 'nvidia'
    (tree / 'bin').mkdir(parents=True)
    tool(str(tree / 'bin'), 'nvidia-smi', 'exec cat %s\n' % shlex.quote(real_output_path(
        'h100-device', 'nvidia-smi-q-x_h100-80gb-hbm3_580.159.04_open.xml')))
    # The tree's version file as the node printed it (driver-evidence_h100: "580.159.04", no newline).
    (tree / 'version').write_bytes(b'580.159.04')
    (tree / 'kernel.release').write_bytes(b'6.18.44-fc-v657-gpu')
    proc = root / 'proc'
    proc.mkdir()
    data, boundary = h100_sections()
    (proc / 'modules').write_bytes(_gather._sections(data, boundary)['proc_modules'])
    with open(real_output_path('h100-device', 'proc-driver-nvidia-version_580.159.04_open.txt'), 'rb') as handle:
        (proc / 'version').write_bytes(handle.read())
    tools = tmp_path / 'bin'
    tools.mkdir()
    tool(str(tools), 'dpkg-query', 'exec cat %s\n' % shlex.quote(real_output_path(
        'h100-device', 'dpkg-query-cuda-nccl_ubuntu24.04_no-driver-package.txt')))
    tool(str(tools), 'nvcc', 'exec cat %s\n' % shlex.quote(real_output_path('h100-device', 'nvcc-version_13.0.88.txt')))
    system = tmp_path / 'system'
    system.mkdir()
    for name in SYSTEM_TOOLS:
        os.symlink(get_bin_path(name), str(system / name))
    state = tmp_path / 'state'
    state.mkdir()
    monkeypatch.setenv('PATH', '%s:%s' % (tools, system))
    operator = root / 'run' / 'nvidia' / 'driver'
    monkeypatch.setattr(_gather, 'GPU_OPERATOR_DRIVER_ROOT', str(operator))
    monkeypatch.setattr(_gather, 'NVIDIA_SMI_DIRS', [str(operator / 'usr' / 'bin'), str(tree / 'bin')])
    monkeypatch.setattr(_gather, 'CUDA_BIN', str(root / 'usr' / 'local' / 'cuda' / 'bin'))
    monkeypatch.setattr(_gather, 'RUNFILE_UNINSTALLER', str(root / 'usr' / 'bin' / 'nvidia-uninstall'))
    monkeypatch.setattr(_gather, 'RUNFILE_INSTALLER_LOG', str(root / 'var' / 'log' / 'nvidia-installer.log'))
    monkeypatch.setattr(_gather, 'PROC_FILES', (('proc_modules', str(proc / 'modules')), ('proc_driver_version', str(proc / 'version'))))
    _gather.script.cache_clear()
    yield {'tools': str(tools), 'state': str(state), 'tmp': tmp_path, 'root': root, 'tree': tree, 'operator': operator}
    _gather.script.cache_clear()


@pytest.mark.parametrize('shell', ['/bin/sh', '/bin/bash'])
def test_the_h100_read_by_both_gatherers(h100_node, shell):
    by_module, by_script = both(h100_node, shell=shell)
    assert by_script == by_module
    tree = str(h100_node['tree'])
    assert by_script['nvidia_smi_path'] == tree + '/bin/nvidia-smi'
    assert (by_script['health'], by_script['driver_version'], by_script['cuda_driver_version']) == ('ok', '580.159.04', '13.0')
    assert (by_script['gpu_count'], by_script['gpus'][0]['name']) == (1, 'NVIDIA H100 80GB HBM3')
    assert by_script['driver_source'] == 'unowned'
    assert by_script['driver_source_evidence'] == (
        'nvidia-smi at %s/bin/nvidia-smi; loaded nvidia module 580.159.04 (/proc/driver/nvidia/version); '
        'driver tree %s (%s/version: 580.159.04); '
        'no driver package (dpkg), no GPU Operator root, no nvidia-installer log or nvidia-uninstall' % (tree, tree, tree))
    assert by_script['driver_tree'] == {'path': tree, 'version': '580.159.04'}
    assert (by_script['kernel_module_flavor'], by_script['persistence_mode'], by_script['systemd']) == ('open', 'Enabled', False)
    assert set(by_script['services'].values()) == {None}
    assert by_script['tools']['nvcc'] == '13.0.88' and by_script['held_packages'] == ['libnccl-dev', 'libnccl2']


def test_a_tree_without_a_version_file_is_no_driver_tree_for_both(h100_node):
    os.remove(str(h100_node['tree'] / 'version'))
    os.mkdir(str(h100_node['tree'] / 'version'))          # a folder is not a version file
    by_module, by_script = both(h100_node)
    assert by_script == by_module
    assert by_script['driver_tree'] is None and by_script['driver_source'] == 'unowned'
    assert 'driver tree' not in by_script['driver_source_evidence']


def test_a_systemctl_without_systemd_reads_as_no_systemd_for_both(h100_node):
    # systemctl installed in a container whose PID 1 is not systemd: what systemctl says there, exit status 1.
    tool(h100_node['tools'], 'systemctl', "echo \"System has not been booted with systemd as init system (PID 1). Can't operate.\" >&2\n"
         'echo "Failed to connect to bus: Host is down" >&2\nexit 1\n')
    by_module, by_script = both(h100_node)
    assert by_script == by_module
    assert by_script['systemd'] is False and set(by_script['services'].values()) == {None}


def test_a_systemctl_that_answers_is_systemd_for_both(h100_node):
    tool(h100_node['tools'], 'systemctl', 'exec cat %s\n' % shlex.quote(SYSTEMCTL))
    by_module, by_script = both(h100_node)
    assert by_script == by_module
    assert by_script['systemd'] is True and by_script['services']['nvidia-persistenced']['active'] == 'active'


@pytest.mark.parametrize('claims, source', [
    (('installer_log',), 'runfile'),
    (('uninstaller', 'installer_log'), 'runfile'),
    (('operator', 'installer_log'), 'container'),
])
def test_a_driver_s_claims_read_the_same_by_both(h100_node, claims, source):
    root = h100_node['root']
    if 'installer_log' in claims:
        (root / 'var' / 'log').mkdir(parents=True)
        (root / 'var' / 'log' / 'nvidia-installer.log').write_text('nvidia-installer log file\n')
    if 'uninstaller' in claims:
        (root / 'usr' / 'bin').mkdir(parents=True)
        tool(str(root / 'usr' / 'bin'), 'nvidia-uninstall', 'exit 0\n')
    if 'operator' in claims:
        h100_node['operator'].mkdir(parents=True)
        (h100_node['operator'] / 'lib').mkdir()
    by_module, by_script = both(h100_node)
    assert by_script == by_module
    assert by_script['driver_source'] == source
