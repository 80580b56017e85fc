# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.lifecycle.gpu_stack (and the nvidia_driver, fabric_manager, container_toolkit, dcgm roles) on simulated nodes.

The molecule scenario (extensions/molecule/gpu_stack) is in test_gpu_stack_molecule.py.  The playbook-level cases use
their own fleet (build/sim-gpu-stack-fleet, 3 Debian nodes on the 550 branch, no scheduler): gpu-01 the quartet
check -> apply -> apply -> check, gpu-02 a stray second branch, gpu-03 bad pins that must fail before touching the node; rocky-01, a rocky9 node added
to the same fleet, the RHEL path on real dnf and rpm.
"""

import json
import os
import re
import sys

import pytest

from conftest import ROOT, fleet_up

sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim', 'packages'))

import catalog  # noqa: E402  pylint: disable=wrong-import-position,import-error

FLEET_STATE = os.path.join(ROOT, 'build', 'sim-gpu-stack-fleet')
PIN_580 = {'driver': '580.65.06', 'fabric_manager': '580.65.06', 'container_toolkit': '1.17.0', 'dcgm': '4.1.0'}


@pytest.fixture(scope='module')
def stack_fleet():
    yield from fleet_up(FLEET_STATE, 3, 'none')


@pytest.fixture(scope='module')
def playbook():
    return os.path.join(os.path.dirname(__file__), 'playbooks', 'gpu_stack_converge.yml')


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
# rocky-01 joins the same fleet as a rocky9 node (tests/sim/fleet up --os rocky9): the Debian base with real dnf 4, its
# versionlock plugin and rpm, whose os-release says Rocky Linux 9, so Ansible's own facts take the roles' dnf path. Its
# packages are dummy rpms with NVIDIA's RHEL names and epochs in a createrepo_c repository whose modules.yaml carries the
# nvidia-driver streams (tests/sim/packages/build_rpm_repo.py); it starts on the 550-dkms stream, every package locked.
# Every assertion reads the node back with real rpm and dnf.

ROCKY_NODE = 'rocky-01'
RHEL_DRIVER = ('nvidia-driver', 'nvidia-driver-libs', 'nvidia-driver-cuda', 'nvidia-driver-cuda-libs', 'nvidia-kmod-common',
               'nvidia-persistenced', 'nvidia-modprobe', 'kmod-nvidia-latest-dkms')
RHEL_CTK = ('nvidia-container-toolkit', 'nvidia-container-toolkit-base', 'libnvidia-container-tools', 'libnvidia-container1')
# A stray open kernel module of the old branch beside the proprietary one, the way rpm leaves it when forced.
RHEL_STRAY = ['rpm', '-i', '--nodeps', '--noscripts', '/srv/gpufleet-rpm/kmod-nvidia-open-dkms-550.127.05-1.el9.noarch.rpm']


def rpm_database(fleet):
    """{name: [E:V-R, ...]} of the NVIDIA stack in the node's rpm database (rpm -qa, real rpm)."""
    process = fleet.node_exec(ROCKY_NODE, 'rpm', '-qa', '--qf', r'%{NAME}|%{EPOCHNUM}:%{VERSION}-%{RELEASE}\n')
    assert process.returncode == 0, process.stderr
    found = {}
    for line in process.stdout.splitlines():
        name, evr = line.split('|')
        if re.match(r'^(nvidia-|kmod-nvidia|libnvidia-|datacenter-gpu-manager|cuda-|kernel$)', name):
            found.setdefault(name, []).append(re.sub(r'^0:', '', evr))
    return dict((name, sorted(versions)) for name, versions in found.items())


def enabled_stream(fleet):
    """The enabled nvidia-driver stream, as real dnf lists it (dnf module list --enabled)."""
    process = fleet.node_exec(ROCKY_NODE, 'dnf', '-q', 'module', 'list', '--enabled', 'nvidia-driver')
    streams = re.findall(r'^nvidia-driver\s+(\S+) \[e\]', process.stdout, re.MULTILINE)
    assert process.returncode in (0, 1) and len(streams) <= 1, process.stdout + process.stderr
    return streams[0] if streams else None


def version_locks(fleet):
    """{name: E:V-R} of dnf versionlock list (real dnf and its versionlock plugin)."""
    process = fleet.node_exec(ROCKY_NODE, 'dnf', '-q', 'versionlock', 'list')
    assert process.returncode == 0, process.stderr
    locks = {}
    for line in process.stdout.splitlines():
        match = re.match(r'^(.+)-([0-9]+):([^-]+)-([^-]+)\.\*$', line.strip())
        if match:
            locks[match.group(1)] = '%s%s-%s' % ('' if match.group(2) == '0' else match.group(2) + ':', match.group(3), match.group(4))
    return locks


def rocky_state(fleet):
    return {'rpm': rpm_database(fleet), 'stream': enabled_stream(fleet), 'locks': version_locks(fleet)}


def stack_locks(driver, toolkit, dcgm):
    """The version locks of a whole stack: the driver (epoch 3) and Fabric Manager, the container toolkit, DCGM (epoch 1)."""
    locks = dict((name, '3:%s-1.el9' % driver) for name in RHEL_DRIVER)
    locks.update((name, '%s-1' % toolkit) for name in RHEL_CTK)
    locks['nvidia-fabric-manager'] = '%s-1' % driver
    locks['datacenter-gpu-manager' if dcgm.startswith('3.') else 'datacenter-gpu-manager-4-core'] = '1:%s-1' % dcgm
    return locks


@pytest.fixture(scope='module')
def rocky_node(stack_fleet):
    """rocky-01 added to the gpu_stack fleet (its inventory file now lists it too)."""
    process = stack_fleet.fleet('up', '--nodes', '1', '--prefix', 'rocky-', '--os', 'rocky9', '--scheduler', 'none')
    sys.stderr.write(process.stderr)
    facts = stack_fleet.node_exec(ROCKY_NODE, 'cat', '/etc/os-release')
    assert 'ID="rocky"' in facts.stdout, facts.stdout
    return stack_fleet


def test_rocky_node_facts_say_dnf(rocky_node, tmp_path):
    """Ansible's own fact gathering (no override) says RedHat / Rocky 9 / dnf on the rocky9 node."""
    path = tmp_path / 'facts.yml'
    path.write_text('---\n- name: Facts\n  hosts: "{{ target }}"\n  gather_facts: true\n  tasks:\n'
                    '    - name: Show\n      ansible.builtin.debug:\n        msg: "{{ [ansible_facts[\'os_family\'], ansible_facts[\'distribution\'], '
                    'ansible_facts[\'distribution_major_version\'], ansible_facts[\'pkg_mgr\']] }}"\n', encoding='utf-8')
    result = rocky_node.playbook(str(path), '-e', json.dumps({'target': ROCKY_NODE}))
    assert result.rc == 0, failures(result)
    assert task_results(result, 'Show', ROCKY_NODE) == ['RedHat', 'Rocky', '9', 'dnf']


def test_rocky_version_not_in_repository_fails_before_dnf_changes_anything(rocky_node, playbook):
    fleet = rocky_node
    before = rocky_state(fleet)
    assert before['stream'] == '550-dkms' and before['locks'] == stack_locks('550.127.05', '1.16.2', '3.3.9'), before
    result = converge(fleet, playbook, ROCKY_NODE, dict(PIN_580, container_toolkit='1.99.0'))
    assert result.rc != 0
    failed = [outcome for play in result.document['plays'] for task in play['tasks']
              for host, outcome in task['hosts'].items() if host == ROCKY_NODE and outcome.get('failed')]
    message = failed[-1]['msg']
    assert ROCKY_NODE in message and 'gpu_stack_pin.container_toolkit' in message and 'nvidia-container-toolkit-1.99.0' in message, message
    assert changed(result, ROCKY_NODE) == 0
    assert rocky_state(fleet) == before


def test_rocky_quartet_550_to_580_with_dnf(rocky_node, playbook):
    """Check, converge (module stream switch, locks released and set again, a stray kmod and DCGM 3 removed), converge
    again, check again - on real dnf and rpm."""
    fleet = rocky_node
    stray = fleet.node_exec(ROCKY_NODE, *RHEL_STRAY)
    assert stray.returncode == 0, stray.stdout + stray.stderr
    before = rocky_state(fleet)
    assert before['rpm']['kmod-nvidia-open-dkms'] == ['3:550.127.05-1.el9'] and before['rpm']['nvidia-driver'] == ['3:550.127.05-1.el9']

    check = converge(fleet, playbook, ROCKY_NODE, PIN_580, '--check', '--diff')
    assert check.rc == 0, failures(check)
    assert changed(check, ROCKY_NODE) > 0
    assert rocky_state(fleet) == before, 'check mode changed the node'
    shown = task_results(check, SHOWN, ROCKY_NODE)
    assert 'nvidia-driver: 3:550.127.05-1.el9 -> 580.65.06' in shown, shown
    assert 'datacenter-gpu-manager-4-core: absent -> 4.1.0' in shown, shown
    assert any(line.startswith('purging kmod-nvidia-open-dkms 3:550.127.05-1.el9 ') for line in shown), shown
    assert any(line.startswith('purging datacenter-gpu-manager 1:3.3.9-1 ') for line in shown), shown

    apply = converge(fleet, playbook, ROCKY_NODE, PIN_580)
    assert apply.rc == 0, failures(apply)
    assert changed(apply, ROCKY_NODE) > 0
    after = rocky_state(fleet)
    assert after['stream'] == '580-dkms'
    assert after['locks'] == stack_locks('580.65.06', '1.17.0', '4.1.0'), after['locks']
    for name, version in after['locks'].items():
        assert after['rpm'][name] == [version], (name, after['rpm'].get(name))
    assert 'kmod-nvidia-open-dkms' not in after['rpm'] and 'datacenter-gpu-manager' not in after['rpm'], after['rpm']
    # The kmod's %post built the module with DKMS, the role verified it, and the reboot loaded it.
    smi = fleet.node_exec(ROCKY_NODE, 'nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader')
    assert set(smi.stdout.split()) == {'580.65.06'}, smi.stdout + smi.stderr
    previous = json.loads(fleet.node_exec(ROCKY_NODE, 'cat', '/etc/gpufleet/pin.previous.json').stdout)
    assert previous == {'driver': '550.127.05', 'fabric_manager': '550.127.05', 'container_toolkit': '1.16.2', 'dcgm': '3.3.9'}

    again = converge(fleet, playbook, ROCKY_NODE, PIN_580)
    assert again.rc == 0, failures(again)
    assert changed(again, ROCKY_NODE) == 0, repr(changed(again, ROCKY_NODE))
    check_again = converge(fleet, playbook, ROCKY_NODE, PIN_580, '--check', '--diff')
    assert check_again.rc == 0, failures(check_again)
    assert changed(check_again, ROCKY_NODE) == 0, repr(changed(check_again, ROCKY_NODE))
    assert rocky_state(fleet) == after


def test_rocky_rollback_is_applying_the_previous_pin(rocky_node, playbook, tmp_path):
    """rocky-01 is on PIN_580: applying pin.previous.json moves it back to 550 with dnf - the 550-dkms stream again,
    downgrades, DCGM 4 -> 3 - locked again."""
    fleet = rocky_node
    previous = fleet.node_exec(ROCKY_NODE, 'cat', '/etc/gpufleet/pin.previous.json').stdout
    pin_file = tmp_path / 'pin.previous.json'
    pin_file.write_text(previous, encoding='utf-8')
    result = converge(fleet, playbook, ROCKY_NODE, {}, '-e', json.dumps({'gpu_stack_pin_file': str(pin_file)}))
    assert result.rc == 0, failures(result)
    after = rocky_state(fleet)
    assert after['stream'] == '550-dkms'
    assert after['locks'] == stack_locks('550.127.05', '1.16.2', '3.3.9'), after['locks']
    for name, version in after['locks'].items():
        assert after['rpm'][name] == [version], (name, after['rpm'].get(name))
    assert 'datacenter-gpu-manager-4-core' not in after['rpm'], after['rpm']
    smi = fleet.node_exec(ROCKY_NODE, 'nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader')
    assert set(smi.stdout.split()) == {'550.127.05'}, smi.stdout + smi.stderr
    assert json.loads(fleet.node_exec(ROCKY_NODE, 'cat', '/etc/gpufleet/pin.previous.json').stdout) == PIN_580


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
