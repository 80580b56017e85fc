# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulated fleet behaves like metal, read through the collection's own modules.

One fleet per run (the ``sim_fleet`` fixture: 4 nodes, 550 branch, real Slurm). Each test works on its
own node so the tests do not depend on each other's order: gpu-01 read-only, gpu-02 driver upgrade,
gpu-03 faults, gpu-04 Slurm and a kernel update against a kernel pin.
"""

import json
import os
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim', 'packages'))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim', 'slurm'))

import catalog  # noqa: E402  pylint: disable=wrong-import-position,import-error
import slurm_sim  # noqa: E402  pylint: disable=wrong-import-position,import-error

PLAYBOOKS = os.path.join(os.path.dirname(__file__), 'playbooks')


def facts_of(result, task):
    return dict((host, outcome['ansible_facts']['gpufleet']) for host, outcome in result.task(task).items() if 'ansible_facts' in outcome)


def test_facts_read_back_each_nodes_hardware(sim_fleet):
    result = sim_fleet.playbook(os.path.join(PLAYBOOKS, 'gpu_facts.yml'))
    facts = facts_of(result, 'Read the GPU stack')
    assert sorted(facts) == sim_fleet.nodes
    for node in sim_fleet.nodes:
        hardware = sim_fleet.hardware(node)
        node_facts = facts[node]
        assert node_facts['health'] == 'ok', (node, node_facts['health_message'])
        assert node_facts['driver_version'] == '550.127.05' and node_facts['cuda_driver_version'] == '12.4'
        assert node_facts['gpu_count'] == len(hardware['gpus']) == 8
        assert node_facts['nvswitch_count'] == hardware['nvswitch_count'] == 4
        for gpu, expected in zip(node_facts['gpus'], hardware['gpus']):
            assert (gpu['uuid'], gpu['serial'], gpu['vbios_version'], gpu['name'], gpu['pci_bus_id']) == \
                (expected['uuid'], expected['serial'], expected['vbios'], expected['model'], expected['pci_bus_id'])
            assert gpu['fabric']['state'] == 'Completed'
        assert node_facts['packages']['nvidia-driver-550-server'] == '550.127.05-0ubuntu1'
        assert 'nvidia-driver-550-server' in node_facts['held_packages']
        assert node_facts['tools']['dcgm'] == '3.3.9' and node_facts['tools']['nvidia_ctk'] == '1.16.2'
        assert node_facts['services']['nvidia-fabricmanager']['active'] == 'active'
        assert node_facts['services']['nvidia-persistenced']['active'] == 'active'
    uuids = [gpu['uuid'] for node in facts.values() for gpu in node['gpus']]
    assert len(set(uuids)) == len(uuids) == 32


def test_new_driver_mismatches_until_reboot(sim_fleet):
    packages = catalog.exact_install('nvidia-driver-580-server', '580.65.06-0ubuntu1') + \
        catalog.exact_install('nvidia-fabricmanager-580', '580.65.06-1')
    result = sim_fleet.playbook(os.path.join(PLAYBOOKS, 'sim_driver_upgrade.yml'), '-e', 'target=gpu-02',
                                '-e', json.dumps({'new_packages': packages}))
    assert result.rc == 0, result.stderr
    before = result.task('Read the GPU stack before')['gpu-02']['ansible_facts']['gpufleet']
    installed = result.task('Read the GPU stack after the install')['gpu-02']['ansible_facts']['gpufleet']
    rebooted = result.task('Read the GPU stack after the reboot')['gpu-02']['ansible_facts']['gpufleet']
    assert (before['health'], before['driver_version']) == ('ok', '550.127.05')
    assert (installed['health'], installed['health_reason']) == ('broken', 'driver_library_mismatch')
    assert installed['health_message'] == ('Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.65\n'
                                           'loaded kernel module: 550.127.05')
    assert installed['packages']['nvidia-utils-580'] == '580.65.06-0ubuntu1' and 'nvidia-utils-550' not in installed['packages']
    assert (rebooted['health'], rebooted['driver_version'], rebooted['cuda_driver_version']) == ('ok', '580.65.06', '13.0')
    # /proc/driver/nvidia/version shows the loaded module, not the installed one, until the reboot.
    assert [facts['kernel_module_version'] for facts in (before, installed, rebooted)] == ['550.127.05', '550.127.05', '580.65.06']
    assert sim_fleet.node_exec('gpu-02', 'cat', '/proc/driver/nvidia/version').stdout.startswith(
        'NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  ')
    assert rebooted['services']['nvidia-fabricmanager']['active'] == 'active'
    assert all(gpu['gsp_firmware_version'] == '580.65.06' for gpu in rebooted['gpus'])


def test_slurm_drain_waits_for_the_running_job(sim_fleet):
    environment = sim_fleet.vars['gpufleet_slurm_environment']
    job = slurm_sim.submit_job(environment, 'gpu-04', 20)
    assert job
    slurm_sim.wait_for(environment, 'gpu-04', lambda state: 'ALLOCATED' in state or 'MIXED' in state, timeout=30)
    slurm_sim.scontrol(environment, 'update', 'NodeName=gpu-04', 'State=DRAIN', 'Reason=gpufleet: test drain')
    draining = slurm_sim.node_state(environment, 'gpu-04')
    assert 'DRAIN' in draining['State'] and ('ALLOCATED' in draining['State'] or 'MIXED' in draining['State']), draining
    drained = slurm_sim.wait_for(environment, 'gpu-04', lambda state: state.startswith('IDLE') and 'DRAIN' in state, timeout=60)
    assert drained['Reason'].startswith('gpufleet: test drain'), drained
    slurm_sim.scontrol(environment, 'update', 'NodeName=gpu-04', 'State=RESUME')
    # Slurm 22.05 shows IDLE+NOT_RESPONDING for a moment while it pings the node.
    assert slurm_sim.wait_for(environment, 'gpu-04', lambda state: state == 'IDLE', timeout=15).get('Reason') in ('', None, '(null)')


def test_the_shell_reads_every_node_as_the_gpu_facts_module_does(sim_fleet):
    """On the simulated nodes (systemd, the services, the sim's nvidia-smi and dcgmi, dpkg, the state folder), the facts
    drift_check assembles from its one shell command equal the gpu_facts module's, field for field."""
    result = sim_fleet.playbook(os.path.join(PLAYBOOKS, 'sim_facts_parity.yml'), '-e', 'target=gpu')
    assert result.rc == 0, result.stderr
    shell, module = result.task('Read by the shell'), result.task('Read by the module')
    assert sorted(shell) == sorted(module) == sim_fleet.nodes
    for node in sim_fleet.nodes:
        assert shell[node]['facts_gathered_by'] == 'shell', shell[node]
        by_shell, by_module = shell[node]['ansible_facts']['gpufleet'], module[node]['ansible_facts']['gpufleet']
        assert by_shell == by_module, dict((key, (by_shell.get(key), by_module.get(key))) for key in by_module
                                           if by_shell.get(key) != by_module.get(key))
        assert by_shell['health'] == 'ok' and by_shell['services']['nvidia-persistenced']['active'] == 'active', by_shell


def test_kernel_pin_drifts_until_the_node_booted_the_kernel(sim_fleet):
    old_kernel, new_kernel = catalog.KERNELS[0][0], catalog.KERNELS[1][0]
    pin = {'kernel': new_kernel, 'driver': '550.127.05'}

    def running(node):
        uname = sim_fleet.node_exec(node, 'uname', '-r').stdout.strip()
        python = sim_fleet.node_exec(node, 'python3', '-c', 'import os, platform; print(os.uname().release, platform.release())').stdout.split()
        booted = dict((row['node'], row['kernel']) for row in json.loads(sim_fleet.fleet('status').stdout)['nodes'])[node]
        return [uname] + python + [booted]

    assert running('gpu-04') == [old_kernel] * 4
    report = sim_fleet.playbook(os.path.join(ROOT, 'playbooks', 'drift_report.yml'), '-e', 'gpufleet_hosts=gpu-04',
                                '-e', json.dumps({'gpufleet_pin': pin}))
    drift = report.task('Compare the stack with the pin')['gpu-04']
    assert (drift['status'], drift['drift']) == ('drifted', {'kernel': {'expected': new_kernel, 'actual': old_kernel, 'source': 'uname'}})
    assert drift['components']['driver'] == {'status': 'in_sync', 'expected': '550.127.05', 'actual': '550.127.05',
                                             'source': '/proc/driver/nvidia/version'}

    result = sim_fleet.playbook(os.path.join(PLAYBOOKS, 'sim_kernel_pin.yml'), '-e', 'target=gpu-04',
                                '-e', json.dumps({'kernel_package': 'linux-image-' + new_kernel, 'pin': pin}))
    assert result.rc == 0, result.stderr
    # Installed, not booted: still drift, and Ansible's kernel fact is the running kernel.
    installed = result.task('Compare after the install')['gpu-04']
    assert (installed['status'], installed['drift']['kernel']['actual']) == ('drifted', old_kernel)
    assert result.task('Kernel fact after the install')['gpu-04']['ansible_facts']['ansible_kernel'] == old_kernel
    rebooted = result.task('Compare after the reboot')['gpu-04']
    assert (rebooted['status'], rebooted['drift']) == ('in_sync', {})
    assert rebooted['components']['kernel'] == {'status': 'in_sync', 'expected': new_kernel, 'actual': new_kernel, 'source': 'uname'}
    assert result.task('Kernel fact after the reboot')['gpu-04']['ansible_facts']['ansible_kernel'] == new_kernel
    facts = result.task('Read the GPU stack after the reboot')['gpu-04']['ansible_facts']['gpufleet']
    assert (facts['health'], facts['kernel'], facts['kernel_module_version']) == ('ok', new_kernel, '550.127.05')
    assert running('gpu-04') == [new_kernel] * 4


def test_fault_diag_fail_at_level(sim_fleet):
    sim_fleet.fleet('fault', 'gpu-03', 'diag_fail', 'level=3', 'test=memory', 'gpu=2')
    try:
        result = sim_fleet.playbook(os.path.join(PLAYBOOKS, 'sim_diag.yml'), '-e', 'target=gpu-03')
    finally:
        sim_fleet.fleet('fault', 'gpu-03', 'clear')
    level1 = result.task('Level 1')['gpu-03']
    level3 = result.task('Level 3')['gpu-03']
    assert level1['passed'] is True and level1['schema'] == '3' and level1['summary']['fail'] == 0
    assert level3['passed'] is False
    # DCGM 3.x prints display names ("GPU Memory"), 4.x plugin names ("memory").
    assert [(item['test'].lower().replace('gpu ', ''), item['gpu']) for item in level3['failures']] == [('memory', 2)]


def test_fault_xid_79_loses_the_gpu(sim_fleet):
    sim_fleet.fleet('fault', 'gpu-03', 'xid', 'gpu=5', 'xid=79')
    try:
        facts = facts_of(sim_fleet.playbook(os.path.join(PLAYBOOKS, 'gpu_facts.yml'), '--limit', 'gpu-03'), 'Read the GPU stack')['gpu-03']
        kernel_log = sim_fleet.node_exec('gpu-03', 'cat', '/var/lib/gpufleet-sim/xid.log').stdout
    finally:
        sim_fleet.fleet('fault', 'gpu-03', 'clear')
    bus = sim_fleet.hardware('gpu-03')['gpus'][5]['pci_bus_id']
    assert (facts['health'], facts['health_reason']) == ('broken', 'gpu_lost')
    # nvidia-smi's own words: "Unable to determine the device handle for GPU0000:AB:00.0: Unknown Error"
    assert 'device handle for GPU0000:%s: Unknown Error' % bus.split(':', 1)[1] in facts['health_message']
    assert 'NVRM: Xid (PCI:0000:%s): 79' % bus.split(':', 1)[1].rsplit('.', 1)[0] in kernel_log


def test_fault_dpkg_fail_stops_apt(sim_fleet):
    packages = catalog.exact_install('nvidia-container-toolkit', '1.17.0-1')
    sim_fleet.fleet('fault', 'gpu-03', 'dpkg_fail', 'package=nvidia-container-toolkit-base')
    try:
        result = sim_fleet.playbook(os.path.join(PLAYBOOKS, 'sim_apt_install.yml'), '-e', 'target=gpu-03', '-e',
                                    json.dumps({'new_packages': packages}))
    finally:
        sim_fleet.fleet('fault', 'gpu-03', 'clear')
    outcome = result.task('Install')['gpu-03']
    assert outcome['failed']
    assert 'injected dpkg failure in nvidia-container-toolkit-base preinst' in outcome.get('stdout', '') + outcome.get('stderr', '') + outcome['msg']
    state = sim_fleet.node_exec('gpu-03', 'dpkg-query', '-W', '-f', '${Version}', 'nvidia-container-toolkit-base').stdout
    assert state == '1.16.2-1'
    # With the fault gone, running the same install again converges the node.
    again = sim_fleet.playbook(os.path.join(PLAYBOOKS, 'sim_apt_install.yml'), '-e', 'target=gpu-03', '-e',
                               json.dumps({'new_packages': packages}))
    assert not again.task('Install')['gpu-03'].get('failed'), again.task('Install')['gpu-03'].get('msg')
    state = sim_fleet.node_exec('gpu-03', 'dpkg-query', '-W', '-f', '${Version} ${db:Status-Abbrev}', 'nvidia-container-toolkit-base').stdout
    assert state.strip() == '1.17.0-1 ii'


def test_fault_dkms_fail_kernel_update_comes_back_without_driver(sim_fleet):
    sim_fleet.fleet('fault', 'gpu-03', 'dkms_fail')
    try:
        result = sim_fleet.playbook(os.path.join(PLAYBOOKS, 'sim_kernel_update.yml'), '-e', 'target=gpu-03',
                                    '-e', 'kernel_package=linux-image-6.1.0-28-amd64')
    finally:
        sim_fleet.fleet('fault', 'gpu-03', 'clear')
    facts = result.task('Read the GPU stack after the reboot')['gpu-03']['ansible_facts']['gpufleet']
    assert (facts['health'], facts['health_reason']) == ('broken', 'driver_unreachable')
    assert "couldn't communicate with the NVIDIA driver" in facts['health_message']
    # The operator's fix: build the module for the new kernel, reboot.
    assert sim_fleet.node_exec('gpu-03', 'dkms', 'autoinstall', '-k', '6.1.0-28-amd64').returncode == 0
    facts = sim_fleet.playbook(os.path.join(PLAYBOOKS, 'sim_reboot.yml'), '-e', 'target=gpu-03').task(
        'Read the GPU stack after the reboot')['gpu-03']['ansible_facts']['gpufleet']
    assert (facts['health'], facts['driver_version']) == ('ok', '550.127.05')
    kernels = dict((row['node'], row['kernel']) for row in json.loads(sim_fleet.fleet('status').stdout)['nodes'])
    assert kernels['gpu-03'] == '6.1.0-28-amd64' and kernels['gpu-01'] == kernels['gpu-02'] == '6.1.0-26-amd64', kernels
    assert sim_fleet.node_exec('gpu-03', 'uname', '-r').stdout == '6.1.0-28-amd64\n'


def test_fault_fabric_manager_will_not_start(sim_fleet):
    sim_fleet.fleet('fault', 'gpu-03', 'fm_fail')
    try:
        restart = sim_fleet.node_exec('gpu-03', 'systemctl', 'restart', 'nvidia-fabricmanager')
        state = sim_fleet.node_exec('gpu-03', 'systemctl', 'is-active', 'nvidia-fabricmanager').stdout.strip()
    finally:
        sim_fleet.fleet('fault', 'gpu-03', 'clear')
    del restart
    assert state in ('failed', 'activating', 'inactive')
    assert sim_fleet.node_exec('gpu-03', 'systemctl', 'restart', 'nvidia-fabricmanager').returncode == 0
    assert sim_fleet.node_exec('gpu-03', 'systemctl', 'is-active', 'nvidia-fabricmanager').stdout.strip() == 'active'


def test_fault_reboot_hang_never_returns(sim_fleet):
    sim_fleet.fleet('fault', 'gpu-03', 'reboot_hang')
    try:
        result = sim_fleet.playbook(os.path.join(PLAYBOOKS, 'sim_reboot.yml'), '-e', 'target=gpu-03', '-e', 'reboot_timeout=25')
        outcome = result.task('Reboot')['gpu-03']
    finally:
        sim_fleet.fleet('fault', 'gpu-03', 'clear')
    assert outcome.get('failed') or outcome.get('unreachable')
    # Power-cycling the node once the fault is gone brings it back.
    sim_fleet.fleet('reboot-node', 'gpu-03')
    sim_fleet.fleet('up', '--nodes', '4', '--scheduler', 'slurm')
    facts = facts_of(sim_fleet.playbook(os.path.join(PLAYBOOKS, 'gpu_facts.yml'), '--limit', 'gpu-03'), 'Read the GPU stack')['gpu-03']
    assert facts['health'] == 'ok'
