# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.lifecycle.gpu_stack (and the nvidia_driver, fabric_manager, container_toolkit, dcgm roles) on simulated nodes.

The molecule scenario extensions/molecule/gpu_stack runs create, check, converge, idempotence, check,
verify, destroy (550 -> 580).  The playbook-level cases use their own fleet (build/sim-gpu-stack-fleet,
4 nodes on the 550 branch, no scheduler): gpu-01 the quartet check -> apply -> apply -> check,
gpu-02 a stray second branch, gpu-03 bad pins that must fail before touching the node, gpu-04 the RHEL
(dnf) path with a stand-in dnf and rpm.
"""

import base64
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
    yield from fleet_up(FLEET_STATE, 4, 'none')


@pytest.fixture(scope='module')
def playbook(tmp_path_factory):
    path = tmp_path_factory.mktemp('gpu_stack') / 'converge.yml'
    path.write_text(PLAYBOOK, encoding='utf-8')
    return str(path)


def converge(fleet, playbook, node, pin, *arguments):
    return fleet.playbook(playbook, '-e', json.dumps({'target': node, 'pin': pin}), *arguments)


def task_results(result, name, node):
    """The messages of every task whose name ends with ``name`` (role tasks carry the role's name), in order: a loop's
    messages, or the lines of a message that is a list."""
    found = [task['hosts'][node] for play in result.document['plays'] for task in play['tasks']
             if task['task']['name'].endswith(name) and node in task['hosts']]
    assert found, 'no task named %r' % name
    messages = []
    for host_result in found:
        if 'results' in host_result:
            messages += [outcome['msg'] for outcome in host_result['results'] if 'msg' in outcome]
        elif isinstance(host_result.get('msg'), list):
            messages += host_result['msg']
        elif 'msg' in host_result:
            messages.append(host_result['msg'])
    return messages


# package_pin's one task that shows what the package pass does.
SHOWN = 'Show the packages, current -> target, and the packages of other branches to purge'


class Changed(int):
    """A changed count whose repr names the tasks that changed (so a failing assertion says which)."""

    tasks = ()

    def __repr__(self):
        return '%d (changed: %s)' % (int(self), ', '.join(self.tasks) or 'none')


def failures(result):
    """The failed or unreachable task results of a run, with the stderr, for assertion messages."""
    found = ['%s %s: %s %s' % (host, task['task']['name'], outcome.get('msg', ''), outcome.get('stderr', ''))
             for play in result.document['plays'] for task in play['tasks'] for host, outcome in task['hosts'].items()
             if outcome.get('failed') or outcome.get('unreachable')]
    return '\n'.join(found) + '\n' + result.stderr[-2000:]


def changed(result, node):
    count = Changed(result.stats[node]['changed'])
    count.tasks = [task['task']['name'] for play in result.document['plays'] for task in play['tasks']
                   if task['hosts'].get(node, {}).get('changed')]
    return count


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
    shown = task_results(check, SHOWN, node)
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


def test_rollback_is_applying_the_previous_pin(stack_fleet, playbook, tmp_path):
    """gpu-01 is on PIN_580 (after the quartet test): applying the pin recorded in pin.previous.json (as a pin file)
    moves it back to 550 - driver downgrade, Fabric Manager branch, container toolkit, DCGM 4 -> 3 - held again."""
    node = 'gpu-01'
    previous = stack_fleet.node_exec(node, 'cat', '/etc/gpufleet/pin.previous.json').stdout
    pin_file = tmp_path / 'pin.previous.json'
    pin_file.write_text(previous, encoding='utf-8')
    result = converge(stack_fleet, playbook, node, {}, '-e', json.dumps({'gpu_stack_pin_file': str(pin_file)}))
    assert result.rc == 0, failures(result)
    after = installed(stack_fleet, node)
    for name, version in (('nvidia-driver-550-server', '550.127.05-0ubuntu1'), ('nvidia-fabricmanager-550', '550.127.05-1'),
                          ('nvidia-container-toolkit', '1.16.2-1'), ('datacenter-gpu-manager', '1:3.3.9')):
        assert after[name][0] == version and after[name][1].startswith('h'), (name, after.get(name))
    assert not [name for name in after if re.search(r'-580($|-)', name)], after
    assert 'datacenter-gpu-manager-4-core' not in after
    smi = stack_fleet.node_exec(node, 'nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader')
    assert set(smi.stdout.split()) == {'550.127.05'}, smi.stdout + smi.stderr
    # The pin it left is now the previous one: rolling forward again is applying pin.previous.json once more.
    assert json.loads(stack_fleet.node_exec(node, 'cat', '/etc/gpufleet/pin.json').stdout) == json.loads(previous)
    assert json.loads(stack_fleet.node_exec(node, 'cat', '/etc/gpufleet/pin.previous.json').stdout) == PIN_580


def test_stray_second_branch_is_purged(stack_fleet, playbook):
    node = 'gpu-02'
    first = converge(stack_fleet, playbook, node, PIN_580, '-e', '{"reboot": false}')
    assert first.rc == 0, first.stderr
    stray = stack_fleet.node_exec(node, 'sh', '-c', catalog.STRAY_RECIPE)
    assert stray.returncode == 0, stray.stdout + stray.stderr
    assert 'nvidia-dkms-550' in installed(stack_fleet, node)
    result = converge(stack_fleet, playbook, node, PIN_580)
    assert result.rc == 0, result.stderr
    purged = task_results(result, SHOWN, node)
    assert any(message.startswith('purging nvidia-dkms-550 ') for message in purged), purged
    after = installed(stack_fleet, node)
    assert not [name for name in after if re.search(r'-550($|-)', name)], after
    assert after['nvidia-dkms-580'][1] == 'hi', after['nvidia-dkms-580']


@pytest.mark.parametrize('pin, field', [
    (dict(PIN_580, driver='580.99.99', fabric_manager='580.99.99'), 'gpu_stack_pin.driver'),
    (dict(PIN_580, fabric_manager='550.127.05'), 'gpu_stack_pin.fabric_manager'),
    (dict(PIN_580, drivr='580.65.06'), 'drivr'),
    (dict(PIN_580, cuda_toolkit=12.1), 'gpu_stack_pin.cuda_toolkit: 12.1 is a number, not a version'),
    (dict(PIN_580, driver='580.65.06 --allow-downgrades'), 'gpu_stack_pin: pin component driver'),
    ({'driver': '', 'dcgm': None}, 'gpu_stack_pin: pins nothing'),
], ids=['version-not-in-repository', 'fm-branch-mismatch', 'unknown-component', 'yaml-number', 'not-a-version', 'pins-nothing'])
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


@pytest.mark.parametrize('name, text, message', [
    ('baseline.env', '', 'pins nothing'),
    ('baseline.env', 'DRIVER_VERSION=580.65.06\nFABRIC_MANAGER=580.65.06\nDCGM_VERSION=4.1.0\n', None),
    ('baseline.yml', 'driver: 580.65.06\nfabric_manager: 580.65.06\ndcgm: 4.1.0\n', None),
], ids=['empty-file', 'baseline-env', 'yaml'])
def test_pin_file_in_either_form_through_the_one_reader(stack_fleet, playbook, tmp_path, name, text, message):
    """gpu_stack_pin_file takes the runbook's baseline.env as well as YAML (check mode: nothing changes either way);
    an empty file (a truncated checkout) is refused naming the file."""
    node = 'gpu-03'
    path = tmp_path / name
    path.write_text(text, encoding='utf-8')
    before = installed(stack_fleet, node)
    result = stack_fleet.playbook(playbook, '-e', json.dumps({'target': node, 'pin': {}, 'gpu_stack_pin_file': str(path)}),
                                  '--check', '--diff')
    assert installed(stack_fleet, node) == before
    if message:
        assert result.rc != 0
        failed = [outcome['msg'] for play in result.document['plays'] for task in play['tasks']
                  for host, outcome in task['hosts'].items() if host == node and outcome.get('failed')]
        assert failed and node in failed[-1] and str(path) in failed[-1] and message in failed[-1], failed
        assert changed(result, node) == 0
        return
    assert result.rc == 0, failures(result)
    read = [task['hosts'][node] for play in result.document['plays'] for task in play['tasks']
            if task['task']['name'].endswith('Read the pin (the collection\'s one pin reader)')][0]
    assert read['source'] == str(path) and read['installed'] == {'driver': '580.65.06', 'fabric_manager': '580.65.06', 'dcgm': '4.1.0'}
    assert changed(result, node) > 0  # gpu-03 runs 550: the check previews the converge


def test_gpu_operator_driver_node_is_refused(stack_fleet, playbook):
    """A node whose driver comes from the GPU Operator's driver container (/run/nvidia/driver populated) is refused
    before anything changes: one driver source per node."""
    node = 'gpu-03'
    before = installed(stack_fleet, node)
    made = stack_fleet.node_exec(node, 'sh', '-c', 'mkdir -p /run/nvidia/driver/usr/bin && touch /run/nvidia/driver/usr/bin/nvidia-smi')
    assert made.returncode == 0, made.stderr
    try:
        result = converge(stack_fleet, playbook, node, PIN_580)
    finally:
        stack_fleet.node_exec(node, 'rm', '-rf', '/run/nvidia/driver')
    assert result.rc != 0
    failed = [outcome['msg'] for play in result.document['plays'] for task in play['tasks']
              for host, outcome in task['hosts'].items() if host == node and outcome.get('failed')]
    assert failed and node in failed[-1] and 'gpu_stack_pin.driver' in failed[-1] and 'GPU Operator' in failed[-1], failed
    assert changed(result, node) == 0
    assert installed(stack_fleet, node) == before


def test_open_flavour_through_a_configured_mirror(stack_fleet, playbook):
    """gpu-03 (550, server flavour) moves to 580 with the open kernel module and gets the pinned CUDA toolkit, reading
    the packages through a mirror the role configures (the simulation's repository as a flat deb822 source, trusted
    as an internal mirror)."""
    node = 'gpu-03'
    options = {'gpu_stack_driver_flavor': 'open', 'gpu_stack_repository_url': 'file:/srv/gpufleet-repo',
               'gpu_stack_repository_trusted': True}
    pin = dict(PIN_580, cuda_toolkit='13.0')
    result = converge(stack_fleet, playbook, node, pin, '-e', json.dumps(options))
    assert result.rc == 0, failures(result)
    sources = stack_fleet.node_exec(node, 'cat', '/etc/apt/sources.list.d/gpufleet-nvidia.sources').stdout
    assert 'URIs: file:/srv/gpufleet-repo' in sources and 'Suites: /' in sources and 'Trusted: yes' in sources, sources
    after = installed(stack_fleet, node)
    for name in ('nvidia-driver-580-open', 'nvidia-dkms-580-open', 'nvidia-utils-580'):
        assert after[name][0] == '580.65.06-0ubuntu1' and after[name][1].startswith('h'), (name, after.get(name))
    assert 'nvidia-driver-580-server' not in after and 'nvidia-dkms-580' not in after, after
    assert not [name for name in after if re.search(r'-550($|-)', name)], after
    assert booted(stack_fleet, node)['driver'] == '580.65.06' and booted(stack_fleet, node)['open'] is True
    # The CUDA toolkit of the pin: cuda-toolkit-13-0, whose nvcc reports 13.0.
    nvcc = stack_fleet.node_exec(node, '/usr/local/cuda-13.0/bin/nvcc', '--version')
    assert 'release 13.0' in nvcc.stdout, nvcc.stdout + nvcc.stderr
    again = converge(stack_fleet, playbook, node, pin, '-e', json.dumps(options))
    assert again.rc == 0, failures(again)
    assert changed(again, node) == 0, repr(changed(again, node))


# --- The RHEL (dnf) path ----------------------------------------------------------------------------
# No RHEL node can be started here: gpu-04 is a simulated node whose facts say Rocky Linux 9
# (tests/integration/rhel/library/rhel9_facts.py), with tests/integration/rhel/fake_dnf.py as its dnf and
# rpm.  The roles' dnf tasks run for real against it; the test asserts the commands they ran, in order.

RHEL_NODE = 'gpu-04'
RHEL_PLAYBOOK = os.path.join(ROOT, 'tests', 'integration', 'rhel', 'converge.yml')
FAKE_DNF = os.path.join(ROOT, 'tests', 'integration', 'rhel', 'fake_dnf.py')
RHEL_DRIVER = ('nvidia-driver', 'nvidia-driver-libs', 'nvidia-driver-cuda', 'nvidia-driver-cuda-libs', 'nvidia-kmod-common',
               'nvidia-persistenced', 'nvidia-modprobe', 'kmod-nvidia-latest-dkms')
RHEL_CTK = ('nvidia-container-toolkit', 'nvidia-container-toolkit-base', 'libnvidia-container-tools', 'libnvidia-container1')
MUTATING = ('install', 'remove', 'reset', 'enable', 'add', 'delete')


def rhel_repository():
    repo = {}
    for version in ('550.127.05', '580.65.06'):
        for name in RHEL_DRIVER + ('kmod-nvidia-open-dkms', 'cuda-drivers'):
            repo.setdefault(name, []).append('3:%s-1.el9' % version)
        repo.setdefault('nvidia-fabric-manager', []).append('%s-1' % version)
    for version in ('1.16.2-1', '1.17.0-1'):
        for name in RHEL_CTK:
            repo.setdefault(name, []).append(version)
    repo['datacenter-gpu-manager'] = ['1:3.3.9-1']
    repo['datacenter-gpu-manager-4-core'] = ['1:4.1.0-1']
    repo['cuda-toolkit-13-0'] = ['13.0.0-1']
    return repo


def rhel_550_state():
    """A RHEL 9 node on the 550 branch, everything locked, plus a stray open-kernel-module kmod of 550."""
    installed = dict((name, ['3:550.127.05-1.el9']) for name in RHEL_DRIVER)
    installed.update((name, ['1.16.2-1']) for name in RHEL_CTK)
    installed['nvidia-fabric-manager'] = ['550.127.05-1']
    installed['datacenter-gpu-manager'] = ['1:3.3.9-1']
    locks = dict((name, versions[0]) for name, versions in installed.items())
    installed['kmod-nvidia-open-dkms'] = ['3:550.127.05-1.el9']
    return {'repo': rhel_repository(), 'installed': installed, 'locks': locks, 'stream': '550-dkms'}


def node_write(fleet, node, path, data, mode='0644'):
    encoded = base64.b64encode(data.encode('utf-8')).decode('ascii')
    process = fleet.node_exec(node, 'python3', '-c', 'import base64, os, sys; os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True); '
                              'open(sys.argv[1], "wb").write(base64.b64decode(sys.argv[2])); os.chmod(sys.argv[1], int(sys.argv[3], 8))',
                              path, encoded, mode)
    assert process.returncode == 0, process.stdout + process.stderr


def rhel_state(fleet):
    return json.loads(fleet.node_exec(RHEL_NODE, 'cat', '/var/lib/gpufleet-fake-dnf/state.json').stdout)


def rhel_calls(fleet):
    """The dnf/rpm calls since the last call of this function (the log is emptied)."""
    process = fleet.node_exec(RHEL_NODE, 'sh', '-c', 'cat /var/lib/gpufleet-fake-dnf/calls.log; : > /var/lib/gpufleet-fake-dnf/calls.log')
    return [json.loads(line) for line in process.stdout.splitlines() if line.strip()]


def mutating(calls):
    return [call for call in calls if call[0] == 'dnf' and any(word in call for word in MUTATING)]


def rhel_converge(fleet, pin, *arguments):
    return fleet.playbook(RHEL_PLAYBOOK, '-e', json.dumps({'target': RHEL_NODE, 'pin': pin}), *arguments)


@pytest.fixture(scope='module')
def rhel_node(stack_fleet):
    with open(FAKE_DNF, encoding='utf-8') as handle:
        script = handle.read()
    for tool in ('dnf', 'rpm'):
        node_write(stack_fleet, RHEL_NODE, '/usr/local/bin/' + tool, '#!/usr/bin/python3\n' + script, '0755')
    node_write(stack_fleet, RHEL_NODE, '/var/lib/gpufleet-fake-dnf/state.json', json.dumps(rhel_550_state()))
    rhel_calls(stack_fleet)
    return stack_fleet


def test_rhel_quartet_550_to_580_with_dnf(rhel_node):
    fleet = rhel_node
    before = rhel_state(fleet)
    check = rhel_converge(fleet, PIN_580, '--check', '--diff')
    assert check.rc == 0, failures(check)
    assert changed(check, RHEL_NODE) > 0
    assert mutating(rhel_calls(fleet)) == [], 'check mode ran a dnf command that changes the node'
    assert rhel_state(fleet) == before
    shown = task_results(check, SHOWN, RHEL_NODE)
    assert 'nvidia-driver: 3:550.127.05-1.el9 -> 580.65.06' in shown, shown
    assert 'datacenter-gpu-manager-4-core: absent -> 4.1.0' in shown, shown

    apply = rhel_converge(fleet, PIN_580)
    assert apply.rc == 0, failures(apply)
    calls = mutating(rhel_calls(fleet))
    driver_specs = [name + '-580.65.06' for name in RHEL_DRIVER]
    specs = driver_specs + ['nvidia-fabric-manager-580.65.06'] + [name + '-1.17.0' for name in RHEL_CTK] + ['datacenter-gpu-manager-4-core-4.1.0']
    # One package pass for the whole pin (gpu_stack plans it once): the driver's module stream first (reset, then enable: dnf
    # refuses to switch an enabled stream), every lock to move released at once, the strays of every component removed
    # (the open kernel module, DCGM 3 before DCGM 4), one install with every exact version, every package locked again.
    assert calls == [
        ['dnf', '-y', 'module', 'reset', 'nvidia-driver'],
        ['dnf', '-y', 'module', 'enable', 'nvidia-driver:580-dkms'],
        ['dnf', '-q', 'versionlock', 'delete'] + sorted(RHEL_DRIVER + RHEL_CTK + ('nvidia-fabric-manager', 'datacenter-gpu-manager')),
        ['dnf', '-y', 'remove', 'datacenter-gpu-manager', 'kmod-nvidia-open-dkms'],
        ['dnf', '-y', 'install'] + specs,
        ['dnf', '-q', 'versionlock', 'add'] + specs,
    ], calls
    state = rhel_state(fleet)
    assert state['stream'] == '580-dkms'
    assert state['installed']['nvidia-driver'] == ['3:580.65.06-1.el9']
    assert 'kmod-nvidia-open-dkms' not in state['installed'] and 'datacenter-gpu-manager' not in state['installed']
    assert state['locks'] == dict([(name, '3:580.65.06-1.el9') for name in RHEL_DRIVER] + [(name, '1.17.0-1') for name in RHEL_CTK] + [
        ('nvidia-fabric-manager', '580.65.06-1'), ('datacenter-gpu-manager-4-core', '1:4.1.0-1')])
    # The kmod's scriptlet built the module with DKMS, the role verified it, and the reboot loaded it.
    smi = fleet.node_exec(RHEL_NODE, 'nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader')
    assert set(smi.stdout.split()) == {'580.65.06'}, smi.stdout + smi.stderr
    previous = json.loads(fleet.node_exec(RHEL_NODE, 'cat', '/etc/gpufleet/pin.previous.json').stdout)
    assert previous == {'driver': '550.127.05', 'fabric_manager': '550.127.05', 'container_toolkit': '1.16.2', 'dcgm': '3.3.9'}

    again = rhel_converge(fleet, PIN_580)
    assert again.rc == 0, failures(again)
    assert changed(again, RHEL_NODE) == 0, repr(changed(again, RHEL_NODE))
    assert mutating(rhel_calls(fleet)) == []
    check_again = rhel_converge(fleet, PIN_580, '--check', '--diff')
    assert check_again.rc == 0, failures(check_again)
    assert changed(check_again, RHEL_NODE) == 0, repr(changed(check_again, RHEL_NODE))


def test_rhel_version_not_in_repository_fails_before_dnf_changes_anything(rhel_node):
    fleet = rhel_node
    before = rhel_state(fleet)
    rhel_calls(fleet)
    result = rhel_converge(fleet, dict(PIN_580, container_toolkit='1.99.0'))
    assert result.rc != 0
    failed = [outcome for play in result.document['plays'] for task in play['tasks']
              for host, outcome in task['hosts'].items() if host == RHEL_NODE and outcome.get('failed')]
    message = failed[-1]['msg']
    assert RHEL_NODE in message and 'gpu_stack_pin.container_toolkit' in message and 'nvidia-container-toolkit-1.99.0' in message, message
    assert mutating(rhel_calls(fleet)) == []
    assert rhel_state(fleet) == before


def booted(fleet, node):
    return json.loads(fleet.node_exec(node, 'cat', '/run/gpufleet-sim/boot.json').stdout)


def test_kernel_pin_needs_the_driver_module_built_before_the_reboot(stack_fleet, playbook):
    """gpu-02 runs 580 on the older kernel (after the stray test).  A kernel pin whose DKMS build fails stops the play
    before the reboot, so the node keeps a working driver; once builds work, the module is built for the pinned kernel,
    verified, and the node reboots into that kernel with the driver loaded."""
    node = 'gpu-02'
    old_kernel, new_kernel = catalog.KERNELS[0][0], catalog.KERNELS[1][0]
    assert booted(stack_fleet, node) == dict(booted(stack_fleet, node), kernel=old_kernel, driver='580.65.06')
    pin = dict(PIN_580, kernel=new_kernel)
    stack_fleet.fleet('fault', node, 'dkms_fail')
    try:
        broken = converge(stack_fleet, playbook, node, pin)
    finally:
        stack_fleet.fleet('fault', node, 'clear')
    assert broken.rc != 0
    failed = [task['task']['name'] for play in broken.document['plays'] for task in play['tasks']
              if task['hosts'].get(node, {}).get('failed')]
    assert failed == ['gpufleet.lifecycle.nvidia_driver : Build the DKMS module for the boot kernel where it is missing'], failures(broken)
    assert 'Bad return status for module build on kernel: %s' % new_kernel in failures(broken)
    # Not rebooted: still the old kernel with its working driver.
    assert booted(stack_fleet, node)['kernel'] == old_kernel and booted(stack_fleet, node)['driver'] == '580.65.06'

    fixed = converge(stack_fleet, playbook, node, pin)
    assert fixed.rc == 0, failures(fixed)
    assert booted(stack_fleet, node)['kernel'] == new_kernel and booted(stack_fleet, node)['driver'] == '580.65.06'
    smi = stack_fleet.node_exec(node, 'nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader')
    assert set(smi.stdout.split()) == {'580.65.06'}, smi.stdout + smi.stderr
    again = converge(stack_fleet, playbook, node, pin)
    assert again.rc == 0, failures(again)
    assert changed(again, node) == 0, repr(changed(again, node))
