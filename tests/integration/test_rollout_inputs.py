# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A rollout's inputs are checked where they enter: a mistyped scheduler, reboot method or ledger backend fails on
localhost before any node is reached, in batch and in window mode, with a message that starts with the variable's name.

Cheap: no simulated fleet. The inventory's nodes sit on a documentation address (TEST-NET-1) that no connection reaches;
a node the playbook went on to would show up in the run's stats (unreachable), so "no node but localhost in the stats" is
the proof that nothing went past the start.
"""

import json
import os
import subprocess

import pytest

from conftest import ROOT, ansible_environment

ROLLING_RESTART = os.path.join(ROOT, 'playbooks', 'rolling_restart.yml')
INVENTORY = """
gpu:
  hosts:
    gpu-x1: {ansible_host: 192.0.2.10}
    gpu-x2: {ansible_host: 192.0.2.11}
  vars:
    ansible_ssh_common_args: -o ConnectTimeout=2
"""


@pytest.fixture(scope='module')
def inventory(tmp_path_factory):
    path = tmp_path_factory.mktemp('inputs') / 'inventory.yml'
    path.write_text(INVENTORY)
    return str(path)


@pytest.mark.parametrize('mode', ['batch', 'window'])
@pytest.mark.parametrize('variable, value, words', [
    ('gpufleet_scheduler', 'slrum', "gpufleet_scheduler: 'slrum' is not one of slurm, kubernetes, runai, none"),
    ('gpufleet_reboot_method', 'kexec', "gpufleet_reboot_method: 'kexec' is not one of os, driver_reload, bmc"),
    ('gpufleet_ledger_backend', 'etcd', "gpufleet_ledger_backend: 'etcd' is not a ledger backend"),
])
def test_a_bad_input_fails_on_localhost_before_any_node(inventory, tmp_path, mode, variable, value, words):
    values = {variable: value, 'gpufleet_run_dir': str(tmp_path / 'runs')}
    if mode == 'window':
        values['gpufleet_window'] = 1
    process = subprocess.run(['ansible-playbook', '-i', inventory, ROLLING_RESTART, '-e', json.dumps(values)], env=ansible_environment(),
                             cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)
    assert process.returncode != 0
    document = json.loads(process.stdout)
    failed = [result for play in document['plays'] for task in play['tasks'] for host, result in task['hosts'].items()
              if result.get('failed')]
    assert [result['msg'] for result in failed] and all(result['msg'].startswith(words) for result in failed), failed
    assert set(document['stats']) == {'localhost'}, document['stats']         # no node was reached, not even tried
    assert not os.path.exists(tmp_path / 'runs') or os.listdir(tmp_path / 'runs') in ([], ['locks'])
