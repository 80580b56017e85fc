# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_facts, drift_check and the drift_report playbook through ansible-playbook."""

import json
import os

from conftest import drift_stand_ins, ROOT, real, run_playbook

FACTS_PLAY = os.path.join(os.path.dirname(__file__), 'playbooks', 'gpu_facts.yml')
DRIFT_REPORT = os.path.join(ROOT, 'playbooks', 'drift_report.yml')

# sample file -> (driver version, CUDA driver version, GPU count, first GPU name) as printed in the sample
XML_SAMPLES = {
    'netdata_tesla-p100-pcie-16gb_510.47.03_v11.xml': ('510.47.03', '11.6', 1, 'Tesla P100-PCIE-16GB'),
    'telegraf_a100-sxm4-80gb_535.54.03_v12.xml': ('535.54.03', '12.2', 1, 'NVIDIA A100-SXM4-80GB'),
    'telegraf_dual-rtx-2070_590.44.01_v13.xml': ('590.44.01', '13.1', 2, 'NVIDIA GeForce RTX 2070'),
    'telegraf_rtx-3080_536.40_v12.xml': ('536.40', '12.2', 1, 'NVIDIA GeForce RTX 3080'),
    'telegraf_tesla-t4_515.105.01_v11.xml': ('515.105.01', '11.7', 1, 'Tesla T4'),
}
# sample file -> (exit code nvidia-smi gives for it, expected reason)
FAILURE_SAMPLES = {
    'nvml-mismatch_470-branch_popos-issue18.txt': (18, 'driver_library_mismatch'),
    'nvml-mismatch_570.124_tinygrad-ogkm-issue47.txt': (18, 'driver_library_mismatch'),
    'nvidia-smi-couldnt-communicate_shine-cluster-issue50.txt': (9, 'driver_unreachable'),
    'nvidia-smi-no-devices-found_rtx5090_ogkm-issue862.txt': (6, 'no_devices'),
}
# A dpkg database listing in the dpkg-query -W -f '${Package}\t${Version}\t${db:Status-Abbrev}\n' form.
DPKG_LISTING = ''.join('%s\t%s\t%s\n' % row for row in [
    ('bash', '5.2.15-2+b7', 'ii '),
    ('nvidia-driver-535', '535.129.03-0ubuntu0.22.04.1', 'hi '),
    ('libnvidia-compute-535', '535.129.03-0ubuntu0.22.04.1', 'hi '),
    ('nvidia-container-toolkit', '1.12.0-1', 'ii '),
    ('nvidia-container-toolkit-base', '1.12.0-1', 'ii '),
    ('datacenter-gpu-manager', '1:3.3.1', 'ii '),
    ('nvidia-fabricmanager-535', '535.129.03-1', 'rc '),
])


def test_facts_from_real_samples(fleet):
    for name in XML_SAMPLES:
        fleet.host('xml-' + name.split('_')[1]).tool('nvidia-smi', {'args': ['-q', '-x'], 'stdout_file': real('nvidia-smi-xml', name)})
    for name, (rc, dummy) in FAILURE_SAMPLES.items():
        fleet.host('fail-' + name.split('_', maxsplit=1)[0] + '-' + str(len(fleet.hosts))).tool(
            'nvidia-smi', {'args': [], 'stdout_file': real('errors', name), 'rc': rc})
    fleet.host('no-driver')
    with open(real('nvidia-smi-xml', 'telegraf_tesla-t4_515.105.01_v11.xml'), encoding='utf-8') as handle:
        whole = handle.read()
    fleet.host('truncated').tool('nvidia-smi', {'args': ['-q', '-x'], 'stdout': whole[:len(whole) // 2]})
    packaged = fleet.host('packaged')
    packaged.tool('nvidia-smi', {'args': ['-q', '-x'], 'stdout_file': real('nvidia-smi-xml', 'telegraf_a100-sxm4-80gb_535.54.03_v12.xml')})
    packaged.tool('dpkg-query', {'args': ['-W'], 'stdout': DPKG_LISTING})
    packaged.tool('nvidia-ctk', {'args': ['--version'], 'stdout_file': real('packages', 'nvidia-ctk-version_1.12.0_nct-issue50.txt')})
    packaged.tool('dcgmi', {'args': ['--version'], 'stdout_file': real('dcgmi', 'dcgmi-v_3.3.1_hostengine-3.3.0_DCGM-issue139.txt')})

    result = run_playbook(FACTS_PLAY, fleet.inventory())
    facts = dict((host, outcome['ansible_facts']['gpufleet']) for host, outcome in result.task('Read the GPU stack').items())

    for name, (driver, cuda, count, gpu_name) in XML_SAMPLES.items():
        node = facts['xml-' + name.split('_')[1]]
        assert (node['health'], node['driver_version'], node['cuda_driver_version'], node['gpu_count']) == ('ok', driver, cuda, count), name
        assert node['gpus'][0]['name'] == gpu_name
        assert node['schema_version'] == 1
    for host, node in facts.items():
        if host.startswith('fail-'):
            sample = [name for name in FAILURE_SAMPLES if host.startswith('fail-' + name.split('_', maxsplit=1)[0])]
            assert node['health'] == 'broken', host
            assert node['health_reason'] in [FAILURE_SAMPLES[name][1] for name in sample], host
            assert node['driver_version'] is None and node['gpus'] == []
    mismatch = [node for host, node in facts.items() if node['health_reason'] == 'driver_library_mismatch']
    assert len(mismatch) == 2 and all('Driver/library version mismatch' in node['health_message'] for node in mismatch)

    assert (facts['truncated']['health'], facts['truncated']['health_reason']) == ('broken', 'unparsable')
    assert 'cannot be read' in facts['truncated']['health_message']
    assert facts['no-driver']['health'] == 'absent'
    assert facts['no-driver']['driver_source'] is None

    node = facts['packaged']
    assert node['package_manager'] == 'dpkg'
    assert node['packages'] == {
        'nvidia-driver-535': '535.129.03-0ubuntu0.22.04.1',
        'libnvidia-compute-535': '535.129.03-0ubuntu0.22.04.1',
        'nvidia-container-toolkit': '1.12.0-1',
        'nvidia-container-toolkit-base': '1.12.0-1',
        'datacenter-gpu-manager': '1:3.3.1',
    }
    assert sorted(node['held_packages']) == ['libnvidia-compute-535', 'nvidia-driver-535']
    assert node['driver_source'] == 'host_package'
    assert node['tools']['nvidia_ctk'] == '1.12.0'
    assert node['tools']['dcgm'] == '3.3.1'
    assert node['tools']['fabric_manager'] is None
    assert packaged.calls('nvidia-smi') == [['-q', '-x']]


def test_drift_report_check_diff(fleet, tmp_path):
    drift_stand_ins(fleet, DPKG_LISTING)
    pin = tmp_path / 'baseline.env'
    pin.write_text('# the pin\nDRIVER_VERSION=535.54.03\nCONTAINER_TOOLKIT=1.12.0   # nvidia-container-toolkit\n'
                   'DCGM_VERSION=3.3.1\nVBIOS_VERSION=\n', encoding='utf-8')

    result = run_playbook(DRIFT_REPORT, fleet.inventory(), '--check', '--diff', '-e', 'gpufleet_pin_file=%s' % pin)
    assert result.rc == 0, result.stderr
    drift = result.task('Compare the stack with the pin')
    assert drift['in-sync']['status'] == 'in_sync' and not drift['in-sync']['changed']
    # One shell command per node read it (no Python there); the facts it assembled are the node's facts now.
    assert all(drift[host]['facts_gathered_by'] == 'shell' for host in drift), drift
    assert drift['in-sync']['ansible_facts']['gpufleet']['driver_version'] == '535.54.03'
    assert drift['old-driver']['status'] == 'drifted' and drift['old-driver']['changed']
    assert drift['old-driver']['drift']['driver'] == {'expected': '535.54.03', 'actual': '515.105.01', 'source': 'nvidia-smi'}
    assert drift['old-driver']['drift']['container_toolkit']['actual'] == '1.11.0-1'
    diff = drift['old-driver']['diff']
    assert 'driver: 515.105.01' in diff['before'] and 'driver: 535.54.03' in diff['after']
    assert drift['mismatch']['status'] == 'broken' and drift['mismatch']['drift'] == {} and not drift['mismatch']['changed']
    assert drift['mismatch']['warnings'][0].startswith('mismatch is broken, not compared with the pin: node is broken (driver_library_mismatch)')
    assert not drift['mismatch'].get('failed')
    assert result.stats['old-driver']['changed'] == 1
    assert result.stats['in-sync']['changed'] == 0
    assert result.stats['mismatch']['changed'] == 0
    summary = result.task('Print the summary')
    assert list(summary) == ['localhost']
    message = summary['localhost']['msg']
    assert message == {'in_sync': ['in-sync'], 'drifted': ['old-driver'], 'broken': ['mismatch'], 'not_checked': [], 'not_reported': []}


# Bad pin files (unknown key, empty, FIFO, huge, directory, not a version, ...): test_reliability_inputs.py.


def test_a_node_the_shell_way_cannot_read_is_read_by_the_module(fleet, tmp_path):
    # No temporary folder for the script (mktemp fails): gpu_facts reads the node instead, and says so.
    drift_stand_ins(fleet, DPKG_LISTING)
    fleet.hosts['in-sync'].tool('mktemp', {'args': [], 'rc': 1, 'stderr': 'mktemp: failed to create directory: Read-only file system\n'})
    result = run_playbook(DRIFT_REPORT, fleet.inventory(), '--check', '-e', json.dumps({'gpufleet_pin': {'driver': '535.54.03'}}))
    assert result.rc == 0, result.stderr
    drift = result.task('Compare the stack with the pin')
    assert drift['in-sync']['facts_gathered_by'] == 'module' and drift['in-sync']['status'] == 'in_sync'
    assert drift['in-sync']['warnings'] == ['in-sync: GPU facts read by the gpu_facts module instead: mktemp -d failed']
    assert drift['old-driver']['facts_gathered_by'] == 'shell' and drift['old-driver']['status'] == 'drifted'
    assert drift['mismatch']['status'] == 'broken'


def test_a_number_in_the_pin_variable_is_refused_with_the_quoting_hint(fleet):
    fleet.host('node-a').tool('nvidia-smi', {'args': ['-q', '-x'], 'stdout_file': real('nvidia-smi-xml', 'telegraf_tesla-t4_515.105.01_v11.xml')})
    result = run_playbook(DRIFT_REPORT, fleet.inventory(), '--check', '-e', json.dumps({'gpufleet_pin': {'driver': 535.54, 'cuda_driver': '12.2'}}))
    outcome = result.task('Compare the stack with the pin')['node-a']
    assert outcome['failed'] and outcome['msg'].startswith('node-a: pin.driver: 535.54 is a number, not a version'), outcome['msg']
    assert 'quote it' in outcome['msg']


def test_wrong_shaped_facts_are_refused_naming_the_field(fleet, tmp_path):
    fleet.host('node-a')
    playbook = tmp_path / 'facts.yml'
    playbook.write_text("""---
- name: Compare hand-made facts
  hosts: all
  gather_facts: false
  tasks:
    - name: Compare the stack with the pin
      gpufleet.lifecycle.drift_check:
        pin: {driver: "580.65.06"}
        facts: {health: ok, gpus: [{index: 0, vbios_version: 96}]}
""", encoding='utf-8')
    result = run_playbook(str(playbook), fleet.inventory())
    outcome = result.task('Compare the stack with the pin')['node-a']
    assert outcome['failed'] and outcome['msg'] == 'node-a: facts.gpus[0].vbios_version must be a string or null, got int', outcome['msg']
    assert 'Traceback' not in result.stderr


# Hung tools and bytes that are not UTF-8 (gpu_facts with short limits): test_reliability_inputs.py.
