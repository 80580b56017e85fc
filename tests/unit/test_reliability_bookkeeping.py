# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fault suite's invariants (tests/integration/reliability.py) fail on the ledgers they must refuse."""

import json

import pytest

from ansible_collections.gpufleet.lifecycle.tests.integration import reliability


def write_run(tmp_path, events, nodes, status='finished'):
    run = tmp_path / 'runs' / 'r1'
    run.mkdir(parents=True)
    with open(str(run / 'ledger.jsonl'), 'w', encoding='utf-8') as handle:
        for event in events:
            handle.write(json.dumps(event) + '\n')
    (run / 'state.json').write_text(json.dumps({'run_id': 'r1', 'status': status,
                                                'nodes': dict((node, {'state': state}) for node, state in nodes.items())}))
    return str(tmp_path / 'runs')


def walk(node, *states):
    previous = 'pending'
    events = []
    for state in states:
        events.append({'time': '2026-11-24T00:00:00Z', 'node': node, 'from': previous, 'to': state, 'reason': 'r'})
        previous = state
    return events


GOOD = walk('a', 'admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'done')
ROLLED = walk('b', 'admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'rolling_back', 'rolled_back')


def test_a_clean_run_passes_and_names_the_final_states(tmp_path):
    run_dir = write_run(tmp_path, GOOD + ROLLED, {'a': 'done', 'b': 'rolled_back'})
    assert reliability.check_rollout(run_dir) == {'a': 'done', 'b': 'rolled_back'}


def test_done_without_validation_fails(tmp_path):
    events = walk('a', 'admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'done')
    with pytest.raises(AssertionError, match='without validating'):
        reliability.check_rollout(write_run(tmp_path, events, {'a': 'done'}))


def test_a_validation_of_an_earlier_admission_does_not_count(tmp_path):
    events = GOOD + [{'time': 't', 'node': 'a', 'from': 'done', 'to': 'pending', 'reason': 'retry'}] + \
        walk('a', 'admitted', 'cordoned', 'done')[0:2] + [{'time': 't', 'node': 'a', 'from': 'cordoned', 'to': 'done', 'reason': 'r'}]
    with pytest.raises(AssertionError, match='without validating'):
        reliability.check_rollout(write_run(tmp_path, events, {'a': 'done'}))


def test_a_node_not_final_fails(tmp_path):
    events = walk('a', 'admitted', 'cordoned', 'drained')
    with pytest.raises(AssertionError, match='not in a final state'):
        reliability.check_rollout(write_run(tmp_path, events, {'a': 'drained'}, status='paused'))


def test_state_and_ledger_disagreeing_fails(tmp_path):
    with pytest.raises(AssertionError, match='the last ledger event'):
        reliability.check_rollout(write_run(tmp_path, GOOD, {'a': 'quarantined'}))


def test_a_node_the_ledger_never_names_fails(tmp_path):
    with pytest.raises(AssertionError, match='no ledger event names it'):
        reliability.check_rollout(write_run(tmp_path, GOOD, {'a': 'done', 'c': 'left_alone'}))


def test_the_capacity_floor_is_replayed(tmp_path):
    # Both nodes out at once: 0 of 16 GPUs schedulable.
    events = walk('a', 'admitted') + walk('b', 'admitted') + GOOD[1:] + ROLLED[1:]
    run_dir = write_run(tmp_path, events, {'a': 'done', 'b': 'rolled_back'})
    assert reliability.check_rollout(run_dir, floor=0.0)
    with pytest.raises(AssertionError, match='capacity floor'):
        reliability.check_rollout(run_dir, floor=0.5)


def test_the_document_lists_every_scenario_and_ignores_only_the_date():
    first = reliability.Scenario('node fault', 'b | pipe', 'x', 't')
    first.observed('seen')
    second = reliability.Scenario('hostile input', 'a', 'y', 't')
    second.observed('refused')
    text = reliability.render([first, second], today='2026-01-01')
    assert '| b \\| pipe | x | seen |' in text and '| a | y | refused |' in text
    assert '1 fault scenarios, 1 bad inputs.' in text
    assert reliability._comparable(text) == reliability._comparable(reliability.render([second, first], today='2030-12-31'))
    second.observed('crashed')
    assert reliability._comparable(text) != reliability._comparable(reliability.render([first, second], today='2026-01-01'))


def test_an_unknown_category_is_refused():
    with pytest.raises(ValueError, match='category'):
        reliability.Scenario('weather', 'rain', 'x', 't')
