# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Nodes as they really are (issue 27) on the simulated fleet: a runfile driver, a driver tree no package owns, the open
kernel module, no systemd.

One fleet for the module (build/sim-shapes: 3 H100 nodes on the 550 branch, no scheduler), shaped with ``tests/sim/fleet
shape`` (tests/sim/README.md, "Node shapes"); each case works on its own node:

gpu-01 runfile driver 550.127.05: left alone by node_upgrade, then taken over with gpufleet_driver_takeover=true
gpu-02 the H100's shape: a driver tree /usr/local/nvidia (550.127.05, open module), no driver package, no systemctl:
       facts, left alone (take-over refused: no uninstaller), validated on what it has
gpu-03 packaged 550 with the proprietary module: drifted against the open flavor, converged to it by gpu_stack
rocky-01 (added for its case) the same flavor switch with real dnf (nvidia-driver:550-dkms -> 550-open).
"""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, fleet_up

FLEET_STATE = os.path.join(ROOT, 'build', 'sim-shapes')
PLAYBOOKS = os.path.join(os.path.dirname(__file__), 'playbooks')
PIN_580 = {'driver': '580.65.06', 'fabric_manager': '580.65.06', 'container_toolkit': '1.17.0', 'dcgm': '4.1.0'}
DRIVER = '550.127.05'
SIM_VARS = {'gpufleet_boot_time_command': 'stat -c %Z /proc/1', 'gpufleet_reboot_timeout': 60, 'gpufleet_drain_timeout': 20,
            'node_upgrade_wait_sleep': 1,
            'node_validate_kernel_log_command': ['sh', '-c', 'cat /var/lib/gpufleet-sim/xid.log 2>/dev/null; true']}
DRIFT = """---
- name: Compare with the pin and the flavor
  hosts: "{{ target }}"
  gather_facts: false
  tasks:
    - name: Compare
      gpufleet.lifecycle.drift_check:
        pin: "{{ pin }}"
        driver_flavor: "{{ flavor }}"
      check_mode: true
"""
VALIDATE = """---
- name: Validate
  hosts: "{{ target }}"
  gather_facts: false
  tasks:
    - name: Check the node
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.node_validate
        tasks_from: check
      vars:
        node_validate_kernel_log_command: [sh, -c, "cat /var/lib/gpufleet-sim/xid.log 2>/dev/null; true"]

    - name: Show the result
      ansible.builtin.debug:
        var: node_validate_result
"""


@pytest.fixture(scope='module')
def fleet():
    yield from fleet_up(FLEET_STATE, 3, 'none')


@pytest.fixture(scope='module')
def playbooks(tmp_path_factory):
    folder = tmp_path_factory.mktemp('shapes')
    found = {}
    for name, text in (('drift', DRIFT), ('validate', VALIDATE)):
        (folder / (name + '.yml')).write_text(text, encoding='utf-8')
        found[name] = str(folder / (name + '.yml'))
    found['stack'] = os.path.join(PLAYBOOKS, 'gpu_stack_converge.yml')
    return found


def shape(fleet, node, *arguments):
    """``fleet shape NODE ARGUMENTS``: {"steps", "node"} (what the node is afterwards, gpufleet_sim.shapes show)."""
    return json.loads(fleet.fleet('shape', node, *arguments).stdout)


def snapshot(fleet, node):
    """What must not change on a node left alone: its package list (dpkg, with hold flags) and the loaded driver."""
    listing = fleet.node_exec(node, 'dpkg-query', '-W', '-f', '${Package} ${Version} ${db:Status-Abbrev}\n').stdout
    boot = json.loads(fleet.node_exec(node, 'cat', '/run/gpufleet-sim/boot.json').stdout)
    return {'packages': sorted(listing.splitlines()), 'boot': dict((key, boot.get(key)) for key in ('boot_id', 'driver', 'open', 'module'))}


def facts(fleet, node):
    result = fleet.playbook(os.path.join(PLAYBOOKS, 'gpu_facts.yml'), '--limit', node)
    outcome = result.task('Read the GPU stack')[node]
    assert 'ansible_facts' in outcome, outcome
    return outcome['ansible_facts']['gpufleet']


def failures(result):
    found = ['%s %s: %s' % (host, task['task']['name'], outcome.get('msg', ''))
             for play in result.document['plays'] for task in play['tasks'] for host, outcome in task['hosts'].items()
             if outcome.get('failed') or outcome.get('unreachable')]
    return '\n'.join(found) + '\n' + result.stderr[-2000:]


def upgrade(fleet, node, **variables):
    values = dict(SIM_VARS, target=node, gpufleet_pin=PIN_580)
    values.update(variables)
    result = fleet.playbook(os.path.join(PLAYBOOKS, 'node_upgrade.yml'), '-e', json.dumps(values))
    shown = result.task('Show the result').get(node, {})
    assert 'node_upgrade_result' in shown, 'no result for %s (rc=%s):\n%s' % (node, result.rc, failures(result))
    return result, shown['node_upgrade_result']


# --------------------------------------------------------------------------- gpu-01: the runfile driver

def test_runfile_node_has_the_installers_files_and_facts(fleet):
    node = 'gpu-01'
    made = shape(fleet, node, 'runfile', '--driver', DRIVER)
    assert made['node']['driver_source'] == 'runfile' and made['node']['packages'] == [], made
    assert (made['node']['driver_loaded'], made['node']['module_source'], made['node']['open_loaded']) == (DRIVER, 'runfile', False)
    assert shape(fleet, node, 'runfile', '--driver', DRIVER)['steps'] == []      # idempotent
    log = fleet.node_exec(node, 'head', '-n', '3', '/var/log/nvidia-installer.log').stdout.splitlines()
    assert log[0] == "nvidia-installer log file '/var/log/nvidia-installer.log'" and log[2] == 'installer version: %s' % DRIVER
    assert fleet.node_exec(node, 'readlink', '/usr/bin/nvidia-uninstall').stdout.strip() == 'nvidia-installer'
    assert fleet.node_exec(node, 'systemctl', 'is-active', 'nvidia-persistenced').stdout.strip() == 'active'
    gpufleet = facts(fleet, node)
    assert gpufleet['driver_source'] == 'runfile', gpufleet
    assert '/usr/bin/nvidia-uninstall' in gpufleet['driver_source_evidence'], gpufleet['driver_source_evidence']
    assert gpufleet['driver_version'] == DRIVER and gpufleet['kernel_module_flavor'] == 'proprietary'


def test_runfile_node_is_left_alone_without_takeover(fleet):
    node = 'gpu-01'
    before = snapshot(fleet, node)
    run, result = upgrade(fleet, node)
    assert run.rc == 0, failures(run)
    assert result['state'] == 'left_alone', result
    assert 'runfile' in result['reason'] and 'gpufleet_driver_takeover' in result['reason'], result['reason']
    assert snapshot(fleet, node) == before


def test_runfile_node_taken_over(fleet):
    node = 'gpu-01'
    run, result = upgrade(fleet, node, gpufleet_driver_takeover=True)
    assert run.rc == 0, failures(run)
    assert result['state'] == 'done', result
    assert all(entry['passed'] for entry in result['validation']), result['validation']
    # NVIDIA's uninstaller ran (its log, its record gone), then the pinned packages, then a reboot into their module.
    uninstall_log = fleet.node_exec(node, 'tail', '-n', '1', '/var/log/nvidia-uninstall.log').stdout.strip()
    assert uninstall_log.startswith('-> Uninstallation of existing driver: NVIDIA Accelerated Graphics Driver for Linux-x86_64 (%s)'
                                    % DRIVER), uninstall_log
    assert fleet.node_exec(node, 'test', '-e', '/usr/bin/nvidia-uninstall').returncode == 1
    assert fleet.node_exec(node, 'test', '-e', '/var/lib/nvidia/log').returncode == 1
    after = shape(fleet, node)['node']
    assert (after['driver_source'], after['driver_loaded'], after['module_source']) == ('packaged', '580.65.06', 'dkms'), after
    assert 'nvidia-driver-580-server' in after['packages'] or 'libnvidia-compute-580' in after['packages'], after
    gpufleet = facts(fleet, node)
    assert gpufleet['driver_source'] == 'host_package' and gpufleet['driver_version'] == '580.65.06', gpufleet


# --------------------------------------------------------------------------- gpu-02: the H100's shape

@pytest.fixture(scope='module')
def tree_node(fleet):
    node = 'gpu-02'
    made = shape(fleet, node, 'unowned', '--driver', DRIVER, '--open')
    assert (made['node']['driver_source'], made['node']['module_source'], made['node']['open_loaded']) == ('unowned', 'tree', True), made
    shape(fleet, node, 'no-systemd')
    assert shape(fleet, node, 'unowned', '--driver', DRIVER, '--open')['steps'] == []
    return node


def test_tree_node_facts(fleet, tree_node):
    node = tree_node
    assert fleet.node_exec(node, 'test', '-e', '/usr/bin/systemctl').returncode == 1
    # As on the H100: nvidia-smi is on the PATH of an ssh session, and nvidia-persistenced runs without any systemctl.
    host = fleet.inventory_data['all']['children']['gpu']['hosts'][node]
    found = subprocess.run(['ssh', '-i', host['ansible_ssh_private_key_file'], '-p', str(host['ansible_port']), '-o', 'BatchMode=yes',
                            '-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-o', 'LogLevel=ERROR',
                            'root@127.0.0.1', 'command -v nvidia-smi; pgrep -f nvidia_persistenced >/dev/null && echo persistenced'],
                           capture_output=True, text=True, timeout=60, check=False)
    assert found.stdout.split() == ['/usr/local/nvidia/bin/nvidia-smi', 'persistenced'], found.stdout + found.stderr
    gpufleet = facts(fleet, node)
    assert gpufleet['driver_source'] == 'unowned', gpufleet
    assert '/usr/local/nvidia/bin/nvidia-smi' in gpufleet['driver_source_evidence'], gpufleet['driver_source_evidence']
    assert gpufleet['driver_tree'] == {'path': '/usr/local/nvidia', 'version': DRIVER}, gpufleet.get('driver_tree')
    assert gpufleet['kernel_module_flavor'] == 'open' and gpufleet['systemd'] is False, gpufleet
    assert [gpu['persistence_mode'] for gpu in gpufleet['gpus']] == ['Enabled'] * 8
    assert gpufleet['persistence_mode'] == 'Enabled'


def test_tree_node_is_left_alone_even_with_takeover(fleet, tree_node):
    node = tree_node
    before = snapshot(fleet, node)
    reasons = []
    for takeover in (False, True):
        run, result = upgrade(fleet, node, gpufleet_driver_takeover=takeover)
        assert run.rc == 0, failures(run)
        assert result['state'] == 'left_alone', result
        assert 'unowned' in result['reason'], result['reason']
        assert snapshot(fleet, node) == before
        reasons.append(result['reason'])
    # Without the opt-in the reason names it, as on a runfile node; with it, the take-over is refused (nothing to uninstall with).
    assert 'gpufleet_driver_takeover' in reasons[0], reasons[0]


def test_tree_node_without_systemd_validates_on_what_it_has(fleet, tree_node, playbooks):
    node = tree_node
    result = fleet.playbook(playbooks['validate'], '-e', json.dumps({'target': node}))
    outcome = result.task('Show the result')[node]['node_validate_result']
    assert outcome['passed'], outcome
    # Persistence read per GPU from nvidia-smi: one GPU without it fails the node, systemd or not.
    assert fleet.node_exec(node, '/usr/local/nvidia/bin/nvidia-smi', '-i', '2', '-pm', '0').returncode == 0
    try:
        result = fleet.playbook(playbooks['validate'], '-e', json.dumps({'target': node}))
        outcome = result.task('Show the result')[node]['node_validate_result']
    finally:
        fleet.node_exec(node, '/usr/local/nvidia/bin/nvidia-smi', '-i', '2', '-pm', '1')
    assert not outcome['passed'], outcome
    assert re.search(r'persistence', outcome['message'], re.IGNORECASE), outcome['message']


# --------------------------------------------------------------------------- gpu-03 and rocky-01: the flavor

def flavor_switch(fleet, playbooks, node):
    """A proprietary node is drifted against the open flavor; gpu_stack converges it; then it is in sync and loads the open module."""
    pin = {'driver': DRIVER}
    variables = {'target': node, 'pin': pin, 'flavor': 'open'}
    drift = fleet.playbook(playbooks['drift'], '-e', json.dumps(variables)).task('Compare')[node]
    assert drift['status'] == 'drifted' and 'driver_flavor' in drift['drift'], drift
    assert (drift['drift']['driver_flavor']['expected'], drift['drift']['driver_flavor']['actual']) == ('open', 'proprietary')
    converged = fleet.playbook(playbooks['stack'], '-e', json.dumps(variables))
    assert converged.rc == 0, failures(converged)
    boot = json.loads(fleet.node_exec(node, 'cat', '/run/gpufleet-sim/boot.json').stdout)
    assert (boot['driver'], boot['open']) == (DRIVER, True), boot
    assert facts(fleet, node)['kernel_module_flavor'] == 'open'
    drift = fleet.playbook(playbooks['drift'], '-e', json.dumps(variables)).task('Compare')[node]
    assert drift['status'] == 'in_sync', (drift.get('health_reason'), drift.get('message'), drift.get('drift'))


def test_wrong_flavor_is_drifted_and_converged_on_apt(fleet, playbooks):
    node = 'gpu-03'
    flavor_switch(fleet, playbooks, node)
    listing = fleet.node_exec(node, 'dpkg-query', '-W', '-f', '${Package}\n').stdout.split()
    assert 'nvidia-dkms-550-open' in listing and 'nvidia-dkms-550' not in listing, listing


def test_wrong_flavor_is_drifted_and_converged_on_dnf(fleet, playbooks):
    node = 'rocky-01'
    process = fleet.fleet('up', '--nodes', '1', '--prefix', 'rocky-', '--os', 'rocky9', '--scheduler', 'none')
    sys.stderr.write(process.stderr)
    flavor_switch(fleet, playbooks, node)
    streams = fleet.node_exec(node, 'dnf', '-q', 'module', 'list', '--enabled', 'nvidia-driver').stdout
    assert re.search(r'^nvidia-driver\s+550-open \[e\]', streams, re.MULTILINE), streams
    assert fleet.node_exec(node, 'rpm', '-q', 'kmod-nvidia-open-dkms').returncode == 0
