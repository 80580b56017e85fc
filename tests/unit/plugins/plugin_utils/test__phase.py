# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The per-node procedure's phases in the rollout ledger."""

import json
import os

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger, _phase
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._ledger import FileBackend, RunLedger


@pytest.mark.parametrize('current, target, steps', [
    ('pending', 'cordoned', ['admitted', 'cordoned']),
    ('admitted', 'cordoned', ['cordoned']),
    ('cordoned', 'converging', ['drained', 'converging']),
    ('cordoned', 'rebooting', ['drained', 'rebooting']),
    ('converging', 'rebooting', ['rebooting']),
    ('converging', 'validating', ['validating']),
    ('validating', 'done', ['done']),
    ('validating', 'rolling_back', ['rolling_back']),
    ('rolling_back', 'rolled_back', ['rolled_back']),
    ('cordoned', 'left_alone', ['left_alone']),
    ('pending', 'left_alone', ['left_alone']),
    ('converging', 'rolled_back', ['rolling_back', 'rolled_back']),
])
def test_walk_follows_legal_transitions(current, target, steps):
    assert _phase.walk(current, target) == steps
    # Every step is legal from the one before.
    for before, after in zip([current] + steps, steps):
        _ledger.check_transition('n1', before, after)


@pytest.mark.parametrize('current, target', [
    ('rolling_back', 'validating'),  # a rollback's validation: the node stays rolling_back
    ('done', 'cordoned'),            # a final state is never left without an operator
    ('validating', 'validating'),
    ('pending', 'no-such-state'),
])
def test_walk_is_empty_when_there_or_unreachable(current, target):
    assert _phase.walk(current, target) == []


def test_every_phase_names_a_ledger_state_or_none():
    for phase in _phase.PHASES:
        assert _phase.target_of(phase) in _ledger.STATES + (None,)
    with pytest.raises(_phase.PhaseError, match="'reboots' is not a phase"):
        _phase.target_of('reboots')


def test_open_ledger_refuses_a_spec_without_a_run(tmp_path):
    assert _phase.open_ledger({}) is None
    with pytest.raises(_phase.PhaseError, match='run_id'):
        _phase.open_ledger({'run_dir': str(tmp_path)})


def test_record_walks_a_node_through_a_whole_procedure(tmp_path):
    RunLedger.create(FileBackend(str(tmp_path)), 'run1', inventory='inv', nodes={'gpu-01': {'gpus': 8}, 'gpu-02': {'gpus': 8}})
    ledger = _phase.open_ledger({'backend': 'file', 'run_dir': str(tmp_path), 'run_id': 'run1'})
    for phase in ('precheck', 'drain', 'converge', 'reboot', 'validate', 'uncordon'):
        target = _phase.target_of(phase)
        if target:
            _phase.record(ledger, 'gpu-01', target, '')
    assert _phase.record(ledger, 'gpu-01', 'done', 'validated') == ['done']
    events = [json.loads(line) for line in open(os.path.join(str(tmp_path), 'run1', 'ledger.jsonl'), encoding='utf-8')]
    walked = [(event['from'], event['to']) for event in events if event['node'] == 'gpu-01']
    assert walked == [('pending', 'admitted'), ('admitted', 'cordoned'), ('cordoned', 'drained'), ('drained', 'converging'),
                      ('converging', 'rebooting'), ('rebooting', 'validating'), ('validating', 'done')]
    assert events[-1]['reason'] == 'validated'
    state = RunLedger.open(FileBackend(str(tmp_path)), 'run1').state      # state.json and the events after it
    assert state['nodes']['gpu-01']['state'] == 'done' and state['nodes']['gpu-02']['state'] == 'pending'


def test_record_refuses_a_node_of_another_run(tmp_path):
    RunLedger.create(FileBackend(str(tmp_path)), 'run1', inventory='inv', nodes={'gpu-01': {}})
    ledger = _phase.open_ledger({'run_dir': str(tmp_path), 'run_id': 'run1'})
    with pytest.raises(_ledger.LedgerError, match='gpu-09 is not a node of run run1'):
        _phase.record(ledger, 'gpu-09', 'cordoned', '')


def test_the_final_event_carries_the_jobs_the_drain_interrupted():
    requeued = {'job': '77', 'kind': 'requeued', 'gpus': 16, 'checkpoint': '2026-11-27T09:00:00+00:00', 'start': None,
                'at': '2026-11-27T09:00:05+00:00', 'nodes': 'gpu-[01-02]', 'extra': 'dropped'}
    result = {'state': 'done', 'drain': {'outcome': 'done', 'interrupted': [requeued, 'odd', {'kind': 'no job'}]}}
    details = _phase.final_details(result, 'gpu-01')
    assert details['interrupted'] == [{key: value for key, value in requeued.items() if key != 'extra'}]
    assert _phase.final_details({'state': 'done', 'drain': None}, 'gpu-01')['interrupted'] == []
    assert _phase.interrupted({'interrupted': 'not a list'}) == []
