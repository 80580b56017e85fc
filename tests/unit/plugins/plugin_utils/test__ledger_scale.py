# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ledger's compact gate view, head and shards: the same decisions, the same state, on randomized runs (fixed seeds)."""

import datetime
import json
import os
import random

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate, _ledger, _policy
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._ledger import FileBackend, RunLedger

SIGNATURES = [('validate', (('dcgm_diag_r1', 'gpu #: failed'),)), ('reboot', 'unreachable'), ('converge', 'dpkg lock')]


class Clock:
    def __init__(self, rng):
        self.rng = rng
        self.now = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.timezone.utc)

    def __call__(self):
        self.now += datetime.timedelta(seconds=self.rng.choice([0, 1, 5, 30, 200]))
        return self.now


def random_policy(rng):
    domain = rng.choice([None, 'rack'])
    return _policy.load_policy({
        'gpufleet_window': rng.choice([1, 2, 3, 5, '20%', '50%']), 'gpufleet_canary': rng.choice([0, 1, 2, 3]),
        'gpufleet_soak_seconds': rng.choice([0, 60, 600]), 'gpufleet_domain_var': domain,
        'gpufleet_domain_max': rng.choice([1, 2]) if domain else None, 'gpufleet_capacity_floor': rng.choice([0, '50%', '90%']),
        'gpufleet_max_fail_percentage': rng.choice([None, 0, 10, 30]), 'gpufleet_pin_fault_threshold': rng.choice([None, 2, 3]),
        'gpufleet_pin_fault_early_nodes': rng.choice([1, 3, 5]), 'gpufleet_circuit_breaker_threshold': rng.choice([None, 2, 4]),
        'gpufleet_circuit_breaker_window': rng.choice([300, 3600])})


def moves(current):
    """Every legal (to, flags) from ``current``."""
    found = [(to, {}) for to in _ledger.TRANSITIONS.get(current, ())]
    found += [(to, {'operator': True}) for to in _ledger.OPERATOR_TRANSITIONS.get(current, ())]
    found += [(to, {'gate': True}) for to in _ledger.GATE_TRANSITIONS.get(current, ())]
    if current in _ledger.IN_FLIGHT:
        found.append(('admitted', {'resume': True}))
    return found


def step(rng, ledger, names):
    name = rng.choice(names)
    current = ledger.node(name)['state']
    options = moves(current)
    if current == 'pending' and rng.random() < 0.7:
        options = [('admitted', {})]
    elif current in _ledger.IN_FLIGHT and rng.random() < 0.6:
        options = [option for option in options if option[0] not in ('admitted', 'quarantined', 'deferred')] or options
    elif current in _ledger.FINAL and rng.random() < 0.8:
        return
    to, flags = rng.choice(options)
    details = None
    if to == 'admitted' and current == 'pending':
        details = {'canary': rng.random() < 0.2}
    elif to in _gate.FAILED:
        details = {'signature': json.loads(json.dumps(rng.choice(SIGNATURES))), 'rma_suspect': rng.random() < 0.2}
    ledger.transition(name, to, 'random %s' % to, details=details, **flags)


def compare(rng, ledger, policy, names, now):
    full = _ledger.node_view(_ledger.rebuild(ledger.backend, ledger.run_id))
    fresh = RunLedger.open(ledger.backend, ledger.run_id)
    for _attempt in range(4):
        node = rng.choice(names)
        unavailable = {other: 8 for other in rng.sample(names + ['outside-1'], 2)}
        scheduler = _gate.SchedulerView(total_gpus=rng.choice([None, 8 * len(names) + 16]), unavailable=unavailable,
                                        domains={'outside-1': 'rack-0'})
        moment = now + datetime.timedelta(seconds=rng.choice([0, 30, 700, 4000]))
        expected = _gate.admit(policy, full, scheduler, node, moment)
        for reader in (ledger, fresh):
            compact = reader.gate_view(node, extra=unavailable)
            assert compact.total == len(full.nodes)
            assert _gate.admit(policy, compact, scheduler, node, moment) == expected
            assert _gate.pause_decision(policy, compact, moment) == _gate.pause_decision(policy, full, moment)
    assert fresh.head['counts'] == _count(full)


def _count(view):
    counts = {}
    for node in view.nodes.values():
        counts[node.state] = counts.get(node.state, 0) + 1
    return counts


@pytest.mark.parametrize('seed', range(12))
def test_the_compact_view_decides_as_the_full_view(tmp_path, monkeypatch, seed):
    # Small shards and frequent compaction so that a few hundred events go through every path.
    monkeypatch.setattr(_ledger, 'SHARD_NODES', 4)
    monkeypatch.setattr(_ledger, 'HEAD_EVERY', 3)
    monkeypatch.setattr(_ledger, 'SHARD_EVERY', 7)
    monkeypatch.setattr(_ledger, 'RECENT_MAX', 6)
    rng = random.Random(seed)
    policy = random_policy(rng)
    names = ['gpu-%02d' % index for index in range(rng.choice([3, 12, 30]))]
    nodes = {name: {'domain': 'rack-%d' % (index % 3), 'gpus': 8} for index, name in enumerate(names)}
    clock = Clock(rng)
    ledger = RunLedger.create(FileBackend(str(tmp_path)), 'run1', inventory='inv', policy=policy.to_dict(), nodes=nodes, clock=clock)
    for number in range(300):
        step(rng, ledger, names)
        if number % 37 == 0:
            compare(rng, ledger, policy, names, clock.now)
        if number == 150:
            ledger.add_nodes({'gpu-new': {'domain': 'rack-1', 'gpus': 4}})
            names.append('gpu-new')
    compare(rng, ledger, policy, names, clock.now)
    rebuilt = _ledger.rebuild(ledger.backend, 'run1')
    for state in (RunLedger.open(ledger.backend, 'run1').state, ledger.state):
        assert {name: record for name, record in state['nodes'].items() if record != rebuilt['nodes'].get(name)} == {}
        assert state == rebuilt


def test_the_compact_view_of_a_randomized_state(monkeypatch):
    """Straight from a state (Index.of_nodes): the compact view's nodes decide as all of them."""
    for seed in range(200):
        rng = random.Random(1000 + seed)
        policy = random_policy(rng)
        state = _ledger.empty_state('r')
        base = 1764000000.0
        for index in range(rng.choice([1, 5, 20, 60])):
            record = _ledger._new_node({'domain': 'rack-%d' % (index % 4), 'gpus': rng.choice([4, 8]), 'canary': rng.random() < 0.1})
            record['state'] = rng.choice(_gate.STATES)
            if record['state'] in _gate.FINAL and rng.random() < 0.95:
                record['finished_at'] = _ledger.iso(datetime.datetime.fromtimestamp(base + rng.choice(range(0, 3000, 50)), datetime.timezone.utc))
            if record['state'] in _gate.FAILED:
                record['signature'] = list(rng.choice(SIGNATURES))
                record['rma_suspect'] = rng.random() < 0.2
            state['nodes']['n%03d' % index] = record
        index = _ledger.Index.of_nodes(state['nodes'], _ledger.early_size(policy.to_dict()))
        full = _ledger.node_view(state)
        for name in rng.sample(sorted(state['nodes']), min(3, len(state['nodes']))):
            unavailable = {other: 8 for other in rng.sample(sorted(state['nodes']), 1)}
            keep = index.names() | {name} | set(unavailable)
            compact = _gate.Rollout(nodes={key: full.nodes[key] for key in keep}, total=index.total)
            scheduler = _gate.SchedulerView(total_gpus=rng.choice([None, 400]), unavailable=unavailable)
            now = datetime.datetime.fromtimestamp(base + rng.choice([0, 1000, 3100, 9000]), datetime.timezone.utc)
            assert _gate.admit(policy, compact, scheduler, name, now) == _gate.admit(policy, full, scheduler, name, now)


def test_a_fresh_reader_reads_the_head_and_one_shard(tmp_path, monkeypatch):
    backend = FileBackend(str(tmp_path))
    nodes = {'gpu-%04d' % index: {'domain': 'r%d' % (index % 8), 'gpus': 8} for index in range(640)}
    ledger = RunLedger.create(backend, 'run1', inventory='inv', policy={'gpufleet_window': 32}, nodes=nodes)
    for name in sorted(nodes)[:40]:
        ledger.transition(name, 'admitted', 'window')
    reads = []
    real = FileBackend.read_doc

    def counting(self, run_id, name):
        reads.append(name)
        return real(self, run_id, name)
    monkeypatch.setattr(FileBackend, 'read_doc', counting)
    fresh = RunLedger.open(backend, 'run1')
    view = fresh.gate_view('gpu-0600')
    assert view.total == 640 and len(view.nodes) == 41 and view.nodes['gpu-0600'].state == 'pending'
    assert fresh.head['counts'] == {'pending': 600, 'admitted': 40} and fresh.head['total'] == 640
    assert reads[0] == 'head' and len(reads) <= 1 + 1 + _ledger.HEAD_EVERY
    fresh.transition('gpu-0600', 'admitted', 'window')
    assert len(reads) <= 2 + _ledger.HEAD_EVERY
    assert fresh.state == _ledger.rebuild(backend, 'run1')


def test_a_torn_or_missing_document_falls_back_to_the_events(tmp_path):
    backend = FileBackend(str(tmp_path))
    nodes = {'gpu-%03d' % index: {} for index in range(200)}
    ledger = RunLedger.create(backend, 'run1', inventory='inv', nodes=nodes)
    for name in sorted(nodes)[:30]:
        ledger.transition(name, 'admitted', 'window')
    expected = _ledger.rebuild(backend, 'run1')
    os.unlink(str(tmp_path / 'run1' / 'nodes-0001.json'))
    assert RunLedger.open(backend, 'run1').state == expected
    with open(str(tmp_path / 'run1' / 'head.json'), 'w', encoding='utf-8') as handle:
        handle.write('{"torn')
    assert RunLedger.open(backend, 'run1').state == expected
    fresh = RunLedger.open(backend, 'run1')
    fresh.transition('gpu-150', 'admitted', 'window')     # writes every shard and the head again
    assert RunLedger.open(backend, 'run1').node('gpu-150')['state'] == 'admitted'
    assert backend.read_doc('run1', 'nodes-0001') is not None


def test_a_crash_between_the_shards_and_the_head_gives_the_right_state(tmp_path, monkeypatch):
    backend = FileBackend(str(tmp_path))
    nodes = {'gpu-%03d' % index: {} for index in range(100)}
    ledger = RunLedger.create(backend, 'run1', inventory='inv', nodes=nodes)
    real = FileBackend.write_doc

    def crash(self, run_id, name, doc):
        if name == 'head':
            raise OSError(5, 'Input/output error')
        return real(self, run_id, name, doc)
    monkeypatch.setattr(FileBackend, 'write_doc', crash)
    monkeypatch.setattr(_ledger, 'SHARD_EVERY', 5)
    for name in sorted(nodes)[:10]:
        try:
            ledger.transition(name, 'admitted', 'window')
        except OSError:
            pass
    monkeypatch.setattr(FileBackend, 'write_doc', real)
    fresh = RunLedger.open(backend, 'run1')
    assert fresh.state == _ledger.rebuild(backend, 'run1')
    assert fresh.head['counts'] == {'pending': 90, 'admitted': 10}


def test_run_fields_of_the_first_event_and_the_breaker_history():
    state = _ledger.empty_state('r')
    assert (state['mode'], state['previous_pin'], state['order'], state['breaker_history']) == (None, {}, [], None)
    run = {'inventory': 'inv', 'nodes': {'a': {}}, 'mode': 'rollback', 'previous_pin': {'driver': '570'}, 'order': ['a'],
           'breaker_history': {'quarantines': [], 'reset': None}}
    _ledger.apply_event(state, {'node': None, 'from': None, 'to': 'running', 'time': 't0', 'run': run})
    assert (state['mode'], state['previous_pin'], state['order']) == ('rollback', {'driver': '570'}, ['a'])
    assert state['breaker_history'] == {'quarantines': [], 'reset': None}
    history = {'quarantines': [{'run_id': 'x', 'node': 'b', 'time': 5.0}], 'reset': None}
    _ledger.apply_event(state, {'node': None, 'from': 'running', 'to': 'running', 'time': 't1', 'details': {'breaker_history': history}})
    assert state['breaker_history'] == history


def test_create_carries_the_run_fields_and_the_head_has_them(tmp_path):
    backend = FileBackend(str(tmp_path))
    RunLedger.create(backend, 'run1', inventory='inv', nodes={'a': {}, 'b': {}}, mode='rollback', previous_pin={'driver': '570'},
                     order=['b', 'a'], breaker_history={'quarantines': [], 'reset': 3.0})
    fresh = RunLedger.open(backend, 'run1')
    head = fresh.head
    assert (head['mode'], head['previous_pin'], head['breaker_history']) == ('rollback', {'driver': '570'}, {'quarantines': [], 'reset': 3.0})
    assert head['counts'] == {'pending': 2} and head['total'] == 2 and 'nodes' not in head and 'order' not in head
    assert fresh.state['order'] == ['b', 'a'] == _ledger.rebuild(backend, 'run1')['order']


def test_run_documents_of_the_file_backend(tmp_path):
    backend = FileBackend(str(tmp_path))
    assert backend.read_doc('run1', 'waiting') is None
    with backend.exclusive('run1'):
        backend.write_doc('run1', 'waiting', {'nodes': ['a', 'b']})
    assert backend.read_doc('run1', 'waiting') == {'nodes': ['a', 'b']}
    assert os.path.isfile(str(tmp_path / 'run1' / 'waiting.json'))
    backend.write_doc('run1', 'waiting', {'nodes': []})
    assert backend.read_doc('run1', 'waiting') == {'nodes': []}
    assert not [name for name in os.listdir(str(tmp_path / 'run1')) if '.tmp.' in name]
    for bad in ('state', 'ledger', '../x', 'Waiting', ''):
        with pytest.raises(_ledger.LedgerError, match='run document name'):
            backend.write_doc('run1', bad, {})
