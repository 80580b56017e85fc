# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.lifecycle.package_pin on a simulated node whose dpkg lock another process holds (issue #12).

The ``dpkg_lock`` fault (tests/sim/README.md) starts a process named ``unattended-upgr`` inside the node that
takes /var/lib/dpkg/lock-frontend and /var/lib/dpkg/lock with fcntl, as apt does, and holds them for a while.
One node of its own fleet (build/sim-package-lock, no scheduler), on the 550 images the other suites share;
the converge moves the container toolkit 1.16.2 -> 1.17.0 (held packages installed with apt's --allow-change-held-packages, held
again).
"""

import json
import os
import re
import sys
import time

import pytest

from conftest import ROOT, SIM, fleet_up

sys.path.insert(0, SIM)

import fleet_faults  # noqa: E402  pylint: disable=wrong-import-position,import-error

FLEET_STATE = os.path.join(ROOT, 'build', 'sim-package-lock')
NODE = 'gpu-01'
TOOLKIT = ('nvidia-container-toolkit', 'nvidia-container-toolkit-base', 'libnvidia-container-tools', 'libnvidia-container1')
PLAYBOOK = """---
- name: Pin the container toolkit
  hosts: gpu
  gather_facts: false
  tasks:
    - name: Apply the pin
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.package_pin
      vars:
        package_pin_package_manager: apt
        package_pin_components:
          container_toolkit: "{{ version }}"
"""


@pytest.fixture(scope='module')
def lock_fleet():
    yield from fleet_up(FLEET_STATE, 1, 'none')


@pytest.fixture(scope='module')
def playbook(tmp_path_factory):
    path = tmp_path_factory.mktemp('package_lock') / 'pin.yml'
    path.write_text(PLAYBOOK, encoding='utf-8')
    return str(path)


@pytest.fixture
def holder(lock_fleet):
    """Start the dpkg_lock fault for N seconds; returns the holder's pid. Ends it and clears the fault afterwards."""
    def start(seconds):
        lock_fleet.fleet('fault', NODE, 'dpkg_lock', 'seconds=%d' % seconds)
        # `fleet fault` records the fault and starts the holder inside the node; starting it again is a no-op that
        # prints the running holder's pid.
        started = lock_fleet.node_exec(NODE, *fleet_faults.node_command('dpkg_lock', {'seconds': seconds}))
        assert started.returncode == 0, started.stdout + started.stderr
        pid = json.loads(started.stdout.strip().splitlines()[-1])['pid']
        assert lock_fleet.node_exec(NODE, 'cat', '/proc/%d/comm' % pid).stdout.strip() == 'unattended-upgr'
        return pid
    yield start
    lock_fleet.node_exec(NODE, 'env', fleet_faults.NODE_PYTHONPATH, 'python3', '-m', 'gpufleet_sim.dpkg_lock', 'stop')
    lock_fleet.fleet('fault', NODE, 'clear')


def toolkit(fleet):
    """{package: (version, selection)} of the container toolkit's packages."""
    process = fleet.node_exec(NODE, 'dpkg-query', '-W', '-f', '${Package}|${Version}|${Status}\n', *TOOLKIT)
    rows = [line.split('|') for line in process.stdout.splitlines() if line.count('|') == 2]
    return dict((name, (version, status.split()[0])) for name, version, status in rows)


def converge(fleet, playbook, version, *arguments):
    started = time.monotonic()
    result = fleet.playbook(playbook, '-e', json.dumps({'version': version}), *arguments)
    return result, time.monotonic() - started


def outcomes(result, suffix):
    return [task['hosts'][NODE] for play in result.document['plays'] for task in play['tasks']
            if task['task']['name'].endswith(suffix) and NODE in task['hosts']]


def changed_tasks(result):
    return [task['task']['name'] for play in result.document['plays'] for task in play['tasks']
            if task['hosts'].get(NODE, {}).get('changed')]


def test_lock_held_past_the_timeout_fails_naming_lock_and_holder(lock_fleet, playbook, holder):
    before = toolkit(lock_fleet)
    assert before['nvidia-container-toolkit'] == ('1.16.2-1', 'hold'), before
    pid = holder(120)
    result, took = converge(lock_fleet, playbook, '1.17.0', '-e', '{"package_pin_lock_timeout": 5}')
    assert result.rc != 0
    failed = [outcome for play in result.document['plays'] for task in play['tasks']
              for host, outcome in task['hosts'].items() if host == NODE and outcome.get('failed')]
    assert len(failed) == 1, failed
    message = failed[0]['msg']
    assert 'after waiting 5s' in message, message
    assert '/var/lib/dpkg/lock-frontend held by pid %d (unattended-upgr)' % pid in message, message
    assert '/var/lib/dpkg/lock held by pid %d (unattended-upgr)' % pid in message, message
    assert failed[0]['waited'] >= 5
    # It gave up within the bound (plus start-up), and changed nothing: same versions, still held.
    assert took < 60, took
    # package_plan reports the node off the pin (changed, as in --check --diff); no task after it changed anything.
    assert changed_tasks(result) == ['gpufleet.lifecycle.package_pin : Work out the packages of the pin'], changed_tasks(result)
    assert toolkit(lock_fleet) == before


def test_lock_released_within_the_timeout_is_waited_for(lock_fleet, playbook, holder):
    # Held long enough that the play reaches its wait while it is held also on a loaded machine (a cold CI run found the
    # lock released before the wait began, after 10 s); released well within the 300 s the wait allows.
    pid = holder(30)
    result, took = converge(lock_fleet, playbook, '1.17.0')
    assert result.rc == 0, [outcome.get('msg') for play in result.document['plays'] for task in play['tasks']
                            for outcome in task['hosts'].values() if outcome.get('failed')]
    waits = outcomes(result, 'Wait for the dpkg and apt locks before changing packages')
    assert len(waits) == 1 and not waits[0].get('skipped'), waits
    assert waits[0]['waited'] > 0, waits[0]
    assert '/var/lib/dpkg/lock-frontend held by pid %d (unattended-upgr)' % pid in waits[0]['waited_for'], waits[0]
    assert took < 150, took
    after = toolkit(lock_fleet)
    for name in TOOLKIT:
        assert after[name] == ('1.17.0-1', 'hold'), (name, after)
    # Nothing holds the lock any more; a second converge has nothing to do and waits for nothing.
    again = converge(lock_fleet, playbook, '1.17.0')[0]
    assert again.rc == 0 and again.stats[NODE]['changed'] == 0, again.stats
    assert all(outcome.get('skipped') for outcome in outcomes(again, 'Wait for the dpkg and apt locks before changing packages'))
    assert re.match(r'^1\.17\.0', lock_fleet.node_exec(NODE, 'nvidia-ctk', '--version').stdout.split('version ')[-1])
