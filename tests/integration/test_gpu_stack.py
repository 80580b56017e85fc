# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.lifecycle.gpu_stack (and the nvidia_driver, fabric_manager, container_toolkit, dcgm roles) on simulated nodes.

The molecule scenario extensions/molecule/gpu_stack runs create, check, converge, idempotence, check,
verify, destroy (550 -> 580).  The playbook-level cases use their own fleet (build/sim-gpu-stack-fleet,
3 nodes on the 550 branch, no scheduler): gpu-01 the quartet check -> apply -> apply -> check,
gpu-02 a stray second branch, gpu-03 bad pins that must fail before touching the node.
"""

import json
import os
import re
import sys

import pytest

from conftest import ROOT, fleet_up, run_molecule

sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim', 'packages'))

import catalog  # noqa: E402  pylint: disable=wrong-import-position,import-error

MOLECULE_STATE = os.path.join(ROOT, 'build', 'sim-gpu-stack')
FLEET_STATE = os.path.join(ROOT, 'build', 'sim-gpu-stack-fleet')
PIN_580 = {'driver': '580.65.06', 'fabric_manager': '580.65.06', 'container_toolkit': '1.17.0', 'dcgm': '4.1.0'}
PLAYBOOK = """---
- name: Converge to the pin
  hosts: "{{ target }}"
  gather_facts: true
  tasks:
    - name: Apply the pin
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.gpu_stack
      vars:
        gpu_stack_pin: "{{ pin }}"
        gpu_stack_reboot: "{{ reboot | default(true) }}"
        gpu_stack_reboot_boot_time_command: stat -c %Z /proc/1
"""


def test_molecule_gpu_stack_scenario():
    output = run_molecule('gpu_stack', MOLECULE_STATE)
    assert re.search(r'^gpu_stack\s*: actions=8\s+successful=8\s.*failed=0', output, re.MULTILINE), output[-2000:]


@pytest.fixture(scope='module')
def stack_fleet():
    yield from fleet_up(FLEET_STATE, 3, 'none')


@pytest.fixture(scope='module')
def playbook(tmp_path_factory):
    path = tmp_path_factory.mktemp('gpu_stack') / 'converge.yml'
    path.write_text(PLAYBOOK, encoding='utf-8')
    return str(path)


def converge(fleet, playbook, node, pin, *arguments):
    return fleet.playbook(playbook, '-e', json.dumps({'target': node, 'pin': pin}), *arguments)


def task_results(result, name, node):
    """The loop results of the last task whose name ends with ``name`` (role tasks carry the role's name)."""
    found = None
    for play in result.document['plays']:
        for task in play['tasks']:
            if task['task']['name'].endswith(name) and node in task['hosts']:
                found = task['hosts'][node]
    assert found is not None, 'no task named %r' % name
    return [outcome['msg'] for outcome in found.get('results', []) if 'msg' in outcome]


def changed(result, node):
    return result.stats[node]['changed']


def installed(fleet, node):
    process = fleet.node_exec(node, 'dpkg-query', '-W', '-f', '${db:Status-Abbrev}|${Package}|${Version}|${Status}\n',
                              'nvidia-*', 'libnvidia-*', 'datacenter-gpu-manager*')
    rows = [line.split('|') for line in process.stdout.splitlines() if line.count('|') == 3]
    return dict((name, (version, abbrev.strip(), status)) for abbrev, name, version, status in rows if abbrev[1:2] not in ('n', 'c'))


def test_quartet_550_to_580(stack_fleet, playbook):
    node = 'gpu-01'
    before = installed(stack_fleet, node)
    check = converge(stack_fleet, playbook, node, PIN_580, '--check', '--diff')
    assert check.rc == 0, check.stderr
    assert changed(check, node) > 0
    assert installed(stack_fleet, node) == before, 'check mode changed the node'
    shown = task_results(check, 'Show the driver packages, current -> target', node)
    assert 'nvidia-utils-580: absent -> 580.65.06-0ubuntu1' in shown

    apply = converge(stack_fleet, playbook, node, PIN_580)
    assert apply.rc == 0, apply.stderr
    assert changed(apply, node) > 0
    after = installed(stack_fleet, node)
    assert after['nvidia-driver-580-server'][0] == '580.65.06-0ubuntu1'
    assert not [name for name in after if re.search(r'-550($|-)', name)], after
    # The held older packages were moved and are held again.
    for name, version in (('nvidia-container-toolkit', '1.17.0-1'), ('nvidia-fabricmanager-580', '580.65.06-1'),
                          ('datacenter-gpu-manager-4-core', '1:4.1.0-1'), ('nvidia-driver-580-server', '580.65.06-0ubuntu1')):
        assert after[name][0] == version and after[name][1].startswith('h'), (name, after[name])
    assert 'datacenter-gpu-manager' not in after
    previous = json.loads(stack_fleet.node_exec(node, 'cat', '/etc/gpufleet/pin.previous.json').stdout)
    assert previous['driver'] == '550.127.05' and previous['container_toolkit'] == '1.16.2'
    assert json.loads(stack_fleet.node_exec(node, 'cat', '/etc/gpufleet/pin.json').stdout) == PIN_580
    smi = stack_fleet.node_exec(node, 'nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader')
    assert set(smi.stdout.split()) == {'580.65.06'}, smi.stdout + smi.stderr

    again = converge(stack_fleet, playbook, node, PIN_580)
    assert again.rc == 0, again.stderr
    assert changed(again, node) == 0, again.document
    check_again = converge(stack_fleet, playbook, node, PIN_580, '--check', '--diff')
    assert check_again.rc == 0, check_again.stderr
    assert changed(check_again, node) == 0, check_again.document


def test_stray_second_branch_is_purged(stack_fleet, playbook):
    node = 'gpu-02'
    first = converge(stack_fleet, playbook, node, PIN_580, '-e', '{"reboot": false}')
    assert first.rc == 0, first.stderr
    stray = stack_fleet.node_exec(node, 'sh', '-c', catalog.STRAY_RECIPE)
    assert stray.returncode == 0, stray.stdout + stray.stderr
    assert 'nvidia-dkms-550' in installed(stack_fleet, node)
    result = converge(stack_fleet, playbook, node, PIN_580)
    assert result.rc == 0, result.stderr
    purged = task_results(result, 'Show the packages of other branches to purge', node)
    assert any(message.startswith('purging nvidia-dkms-550 ') for message in purged), purged
    after = installed(stack_fleet, node)
    assert not [name for name in after if re.search(r'-550($|-)', name)], after
    assert after['nvidia-dkms-580'][1] == 'hi', after['nvidia-dkms-580']


@pytest.mark.parametrize('pin, field', [
    (dict(PIN_580, driver='580.99.99', fabric_manager='580.99.99'), 'gpu_stack_pin.driver'),
    (dict(PIN_580, fabric_manager='550.127.05'), 'gpu_stack_pin.fabric_manager'),
    (dict(PIN_580, drivr='580.65.06'), 'drivr'),
], ids=['version-not-in-repository', 'fm-branch-mismatch', 'unknown-component'])
def test_bad_pin_fails_before_touching_the_node(stack_fleet, playbook, pin, field):
    node = 'gpu-03'
    before = installed(stack_fleet, node)
    result = converge(stack_fleet, playbook, node, pin)
    assert result.rc != 0
    failed = [outcome for play in result.document['plays'] for task in play['tasks']
              for host, outcome in task['hosts'].items() if host == node and outcome.get('failed')]
    assert failed, result.document
    message = failed[-1]['msg']
    assert node in message and field in message, message
    assert changed(result, node) == 0
    assert installed(stack_fleet, node) == before
    assert stack_fleet.node_exec(node, 'test', '-e', '/etc/gpufleet/pin.json').returncode != 0
