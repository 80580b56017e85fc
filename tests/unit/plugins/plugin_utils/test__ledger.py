# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ledger: events and state.json, legal transitions, crash safety, the fleet lock, concurrent forked writers."""

import datetime
import json
import multiprocessing
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._ledger import FileBackend, LedgerError, LockHeld, RunLedger

HAPPY = ['admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'done']
NODES = {'n1': {'domain': 'r1', 'gpus': 8}, 'n2': {'domain': 'r2', 'gpus': 8}}


class Clock:
    def __init__(self):
        self.now = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.timezone.utc)

    def __call__(self):
        self.now += datetime.timedelta(seconds=10)
        return self.now


def new(tmp_path, run_id='run1', nodes=None, **kwargs):
    return RunLedger.create(FileBackend(str(tmp_path)), run_id, inventory='inv', policy={'gpufleet_window': 2},
                            pin={'driver': '580.65.06'}, nodes=nodes or NODES, clock=Clock(), **kwargs)


def events(tmp_path, run_id='run1'):
    with open(os.path.join(str(tmp_path), run_id, 'ledger.jsonl'), encoding='utf-8') as handle:
        return [json.loads(line) for line in handle]


def disk_state(tmp_path, run_id='run1'):
    """state.json caught up with the events after its ledger_bytes (the documented reader's rule: mid-run it lags)."""
    with open(os.path.join(str(tmp_path), run_id, 'state.json'), encoding='utf-8') as handle:
        state = json.load(handle)
    more, offset = FileBackend(str(tmp_path)).read_events(run_id, state['ledger_bytes'])
    for event in more:
        _ledger.apply_event(state, event)
    state['ledger_bytes'] = offset
    return state


def test_create_writes_both_files(tmp_path):
    new(tmp_path)
    state = disk_state(tmp_path)
    assert (state['run_id'], state['status'], state['inventory']) == ('run1', 'running', 'inv')
    assert state['policy'] == {'gpufleet_window': 2} and state['pin'] == {'driver': '580.65.06'}
    assert state['nodes']['n1']['state'] == 'pending' and state['nodes']['n1']['gpus'] == 8
    first = events(tmp_path)[0]
    assert first['node'] is None and first['to'] == 'running' and set(first) >= {'time', 'node', 'from', 'to', 'reason'}


def test_happy_path_events(tmp_path):
    ledger = new(tmp_path)
    for state in HAPPY:
        ledger.transition('n1', state, 'step %s' % state, details={'phase': state} if state == 'done' else None)
    lines = [event for event in events(tmp_path) if event['node'] == 'n1']
    assert [(event['from'], event['to']) for event in lines] == list(zip(['pending'] + HAPPY[:-1], HAPPY))
    assert all(set(event) >= {'time', 'node', 'from', 'to', 'reason'} for event in lines)
    record = disk_state(tmp_path)['nodes']['n1']
    assert record['state'] == 'done' and record['reason'] == 'step done' and record['phase'] == 'done'
    assert record['admitted_at'] and record['finished_at']


@pytest.mark.parametrize('path', [
    ['done'],                                        # never admitted
    ['admitted', 'converging'],                      # skipped the drain
    ['admitted', 'cordoned', 'drained', 'done'],     # not validated
    ['admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'done', 'admitted'],   # final is final
    ['admitted', 'left_alone', 'cordoned'],
    ['admitted', 'cordoned', 'drained', 'converging', 'rolling_back', 'done'],   # a rollback ends rolled_back
    ['admitted', 'nonsense'],
])
def test_illegal_transitions_refused_and_not_written(tmp_path, path):
    ledger = new(tmp_path)
    for state in path[:-1]:
        ledger.transition('n1', state, 'ok')
    before = events(tmp_path)
    with pytest.raises(LedgerError, match=r'^n1: '):
        ledger.transition('n1', path[-1], 'bad')
    assert events(tmp_path) == before
    assert disk_state(tmp_path)['nodes']['n1']['state'] == (path[-2] if len(path) > 1 else 'pending')


def test_operator_retry_and_release(tmp_path):
    ledger = new(tmp_path)
    for state in ['admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'quarantined']:
        ledger.transition('n1', state, 'x')
    with pytest.raises(LedgerError, match='only an operator'):
        ledger.transition('n1', 'validating', 'release')
    ledger.transition('n1', 'validating', 'released by alice: re-validate', operator=True)
    ledger.transition('n1', 'quarantined', 'still fails dcgm')       # a node that fails stays quarantined
    ledger.transition('n1', 'pending', 'retry by alice', operator=True)
    assert ledger.state['nodes']['n1']['state'] == 'pending' and ledger.state['nodes']['n1']['finished_at'] is None


def test_resume_of_a_node_caught_mid_way(tmp_path):
    ledger = new(tmp_path)
    for state in ['admitted', 'cordoned', 'drained', 'converging']:
        ledger.transition('n1', state, 'x')
    with pytest.raises(LedgerError):
        ledger.transition('n1', 'admitted', 'resume')
    ledger.transition('n1', 'admitted', 'resumed: caught converging', resume=True)
    assert ledger.state['nodes']['n1']['state'] == 'admitted'


def test_unknown_node_refused(tmp_path):
    with pytest.raises(LedgerError, match='ghost is not a node of run run1'):
        new(tmp_path).transition('ghost', 'admitted', 'x')


def test_second_create_of_the_same_run_refused(tmp_path):
    new(tmp_path)
    with pytest.raises(LedgerError, match='already has a ledger'):
        new(tmp_path)


def test_run_id_generated_and_checked(tmp_path):
    ledger = RunLedger.create(FileBackend(str(tmp_path)), None, inventory='inv', nodes=NODES)
    assert _ledger.RUN_ID.match(ledger.run_id) and len(ledger.run_id.split('-')[0]) == 16
    for bad in ['../x', '', 'a/b', 'locks']:
        with pytest.raises(LedgerError, match='gpufleet_run_id'):
            RunLedger(FileBackend(str(tmp_path)), bad)


def test_state_rebuilt_when_state_json_missing_or_torn(tmp_path):
    ledger = new(tmp_path)
    for state in HAPPY[:4]:
        ledger.transition('n1', state, 'x')
    expected = disk_state(tmp_path)
    path = os.path.join(str(tmp_path), 'run1', 'state.json')
    with open(path, 'r+b') as handle:
        handle.truncate(40)                          # torn
    assert RunLedger.open(FileBackend(str(tmp_path)), 'run1').state == expected
    os.unlink(path)                                  # missing
    assert RunLedger.open(FileBackend(str(tmp_path)), 'run1').state == expected
    assert _ledger.rebuild(FileBackend(str(tmp_path)), 'run1') == expected


def test_stale_state_json_caught_up_from_the_ledger(tmp_path):
    ledger = new(tmp_path)
    ledger.transition('n1', 'admitted', 'x')
    old = disk_state(tmp_path)
    ledger.transition('n1', 'cordoned', 'y')         # crash between the append and the state write:
    _ledger.write_atomic(os.path.join(str(tmp_path), 'run1', 'state.json'), json.dumps(old).encode())
    assert RunLedger.open(FileBackend(str(tmp_path)), 'run1').state['nodes']['n1']['state'] == 'cordoned'


def test_torn_last_line_ignored_and_cut_before_the_next_append(tmp_path):
    ledger = new(tmp_path)
    ledger.transition('n1', 'admitted', 'x')
    path = os.path.join(str(tmp_path), 'run1', 'ledger.jsonl')
    with open(path, 'ab') as handle:
        handle.write(b'{"time": "2026-11-24T12:00:00+00:00", "node": "n1", "fr')   # crash mid-write
    os.unlink(os.path.join(str(tmp_path), 'run1', 'state.json'))
    reopened = RunLedger.open(FileBackend(str(tmp_path)), 'run1')
    assert reopened.state['nodes']['n1']['state'] == 'admitted'
    reopened.transition('n1', 'cordoned', 'y')
    assert [event['to'] for event in events(tmp_path)][-2:] == ['admitted', 'cordoned']


def test_corrupt_line_in_the_middle_named(tmp_path):
    ledger = new(tmp_path)
    ledger.transition('n1', 'admitted', 'x')
    path = os.path.join(str(tmp_path), 'run1', 'ledger.jsonl')
    lines = open(path, 'rb').read().splitlines(True)
    lines.insert(1, b'garbage\n')
    open(path, 'wb').write(b''.join(lines))
    with pytest.raises(LedgerError, match=r'ledger\.jsonl line 2: not a JSON event'):
        _ledger.rebuild(FileBackend(str(tmp_path)), 'run1')


def test_state_json_replaced_atomically(tmp_path, monkeypatch):
    ledger = new(tmp_path)
    before = open(os.path.join(str(tmp_path), 'run1', 'state.json'), 'rb').read()
    calls = []
    real_replace = os.replace

    def failing_replace(source, target):
        calls.append((source, target))
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(os, 'replace', failing_replace)
    with pytest.raises(OSError):
        ledger.set_status('paused', 'x')     # a run event: the shards, the head and state.json are written
    monkeypatch.setattr(os, 'replace', real_replace)
    assert open(os.path.join(str(tmp_path), 'run1', 'state.json'), 'rb').read() == before
    assert calls and calls[0][0].startswith(calls[0][1] + '.tmp.')
    assert not [name for name in os.listdir(os.path.join(str(tmp_path), 'run1')) if '.tmp.' in name]


def test_status_pause_breaker_and_gate_view(tmp_path):
    ledger = new(tmp_path)
    ledger.transition('n1', 'admitted', 'x', details={'canary': True})
    ledger.set_status('paused', 'checking rack r1', details={'by': 'operator'})
    view = ledger.gate_view()
    assert view.paused == 'checking rack r1' and view.nodes['n1'].canary and view.nodes['n1'].state == 'admitted'
    with pytest.raises(LedgerError, match='cannot finish: n1 still in flight'):
        ledger.set_status('finished', 'all done')
    ledger.set_status('running', 'resumed')
    ledger.reset_breaker('alice checked the quarantined nodes')
    view = ledger.gate_view()
    assert view.paused is None and view.breaker_reset is not None
    assert ledger.state['status'] == 'running'


def test_signature_survives_json(tmp_path):
    ledger = new(tmp_path)
    for state in ['admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'rolling_back']:
        ledger.transition('n1', state, 'x')
    signature = ('validate', (('dcgm_diag_r1', 'gpu #: failed'),))
    ledger.transition('n1', 'rolled_back', 'dcgm', details={'signature': signature})
    view = RunLedger.open(FileBackend(str(tmp_path)), 'run1').gate_view()
    assert view.nodes['n1'].signature == signature and view.nodes['n1'].finished is not None


def test_last_unfinished_run_of_this_inventory(tmp_path):
    backend = FileBackend(str(tmp_path))
    new(tmp_path, 'r-a', nodes={'n1': {}})
    new(tmp_path, 'r-b', nodes={'n1': {}})
    RunLedger.create(backend, 'r-c', inventory='other', nodes={'n1': {}}, clock=Clock())
    finished = RunLedger.create(backend, 'r-d', inventory='inv', nodes={'n1': {}}, clock=Clock())
    finished.transition('n1', 'left_alone', 'skip label')
    finished.set_status('finished', 'done')
    times = {'r-a': '2026-11-24T10:00:00+00:00', 'r-b': '2026-11-24T11:00:00+00:00', 'r-d': '2026-11-24T12:00:00+00:00'}
    for run_id, started in times.items():          # start times as a real run would have them
        path = os.path.join(str(tmp_path), run_id, 'ledger.jsonl')
        lines = open(path).read().splitlines()
        first = json.loads(lines[0])
        first['time'] = started
        open(path, 'w').write('\n'.join([json.dumps(first)] + lines[1:]) + '\n')
        os.unlink(os.path.join(str(tmp_path), run_id, 'state.json'))
        os.unlink(os.path.join(str(tmp_path), run_id, 'head.json'))     # a cache of the ledger, rewritten above
    assert _ledger.last_unfinished(backend, 'inv') == 'r-b'
    assert _ledger.last_unfinished(backend, 'other') == 'r-c'
    assert _ledger.last_unfinished(backend, 'none') is None


def test_phase_times(tmp_path):
    ledger = new(tmp_path)
    for state in HAPPY:
        ledger.transition('n1', state, 'x')
    for state in ['admitted', 'cordoned', 'deferred']:
        ledger.transition('n2', state, 'x')
    times = _ledger.phase_times(events(tmp_path))
    assert times == {state: [10.0] for state in HAPPY[:-1]}


# ---- the fleet lock


def test_second_rollout_refused_naming_the_holder(tmp_path):
    backend = FileBackend(str(tmp_path))
    assert backend.acquire('fleet', _ledger.holder_identity('run1')) is None
    with pytest.raises(LockHeld) as caught:
        backend.acquire('fleet', _ledger.holder_identity('run2', pid=os.getppid()))
    assert 'fleet fleet is held by run run1' in str(caught.value) and 'pid %d' % os.getpid() in str(caught.value)
    assert backend.acquire('fleet', _ledger.holder_identity('run1')) is None     # the holder again: fine
    assert backend.release('fleet', 'run2') is False
    assert backend.release('fleet', 'run1') is True
    assert backend.acquire('fleet', _ledger.holder_identity('run2')) is None


def test_other_fleets_are_independent(tmp_path):
    backend = FileBackend(str(tmp_path))
    backend.acquire('east', _ledger.holder_identity('run1'))
    assert backend.acquire('west', _ledger.holder_identity('run2', pid=os.getppid())) is None


def dead_pid():
    process = subprocess.Popen([sys.executable, '-c', 'pass'])
    process.wait()
    return process.pid


def test_stale_lock_of_a_dead_holder_taken_over(tmp_path):
    backend = FileBackend(str(tmp_path))
    gone = dead_pid()
    backend.acquire('fleet', _ledger.holder_identity('crashed', pid=gone))
    stale = backend.acquire('fleet', _ledger.holder_identity('run2'))
    assert stale['run_id'] == 'crashed' and stale['pid'] == gone
    assert backend.holder('fleet')['run_id'] == 'run2'


def test_lock_of_a_reused_pid_is_stale(tmp_path):
    backend = FileBackend(str(tmp_path))
    holder = _ledger.holder_identity('old', pid=os.getppid())
    holder['pid_start'] = (holder['pid_start'] or 0) + 1      # same pid, another process start: reused
    backend.acquire('fleet', holder)
    assert backend.acquire('fleet', _ledger.holder_identity('run2'))['run_id'] == 'old'


def test_lock_of_another_host_never_taken_over(tmp_path):
    backend = FileBackend(str(tmp_path))
    backend.acquire('fleet', _ledger.holder_identity('remote', pid=dead_pid(), host='controller-2'))
    with pytest.raises(LockHeld, match='run remote .host controller-2'):
        backend.acquire('fleet', _ledger.holder_identity('run2'))


# ---- concurrent forked writers

def _worker(run_dir, nodes, queue):
    try:
        ledger = RunLedger.open(FileBackend(run_dir), 'race')
        for node in nodes:
            for state in HAPPY:
                ledger.transition(node, state, 'worker %d' % os.getpid())
        queue.put(None)
    except Exception as exc:  # pragma: no cover - reported to the parent
        queue.put(repr(exc))


def _admit_once(run_dir, queue):
    ledger = RunLedger.open(FileBackend(run_dir), 'race')
    try:
        ledger.transition('contested', 'admitted', 'worker %d' % os.getpid())
        queue.put('won')
    except LedgerError:
        queue.put('refused')


def test_forked_workers_serialise_their_appends(tmp_path):
    names = ['n%02d' % index for index in range(24)]
    RunLedger.create(FileBackend(str(tmp_path)), 'race', inventory='inv', nodes={name: {} for name in names})
    context = multiprocessing.get_context('fork')
    queue = context.Queue()
    workers = [context.Process(target=_worker, args=(str(tmp_path), names[index::6], queue)) for index in range(6)]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=60) for _worker_ in workers]
    for worker in workers:
        worker.join(60)
    assert results == [None] * 6
    lines = events(tmp_path, 'race')
    assert len(lines) == 1 + len(names) * len(HAPPY)
    for name in names:
        assert [event['to'] for event in lines if event['node'] == name] == HAPPY
    state = disk_state(tmp_path, 'race')
    assert all(record['state'] == 'done' for record in state['nodes'].values())
    assert state == _ledger.rebuild(FileBackend(str(tmp_path)), 'race')


def test_only_one_worker_admits_a_node(tmp_path):
    RunLedger.create(FileBackend(str(tmp_path)), 'race', inventory='inv', nodes={'contested': {}})
    context = multiprocessing.get_context('fork')
    queue = context.Queue()
    workers = [context.Process(target=_admit_once, args=(str(tmp_path), queue)) for _index in range(5)]
    for worker in workers:
        worker.start()
    results = sorted(queue.get(timeout=60) for _worker_ in workers)
    for worker in workers:
        worker.join(60)
    assert results == ['refused'] * 4 + ['won']
    assert [event['to'] for event in events(tmp_path, 'race') if event['node'] == 'contested'] == ['admitted']


def test_a_write_that_fails_names_the_file(tmp_path, monkeypatch):
    """A full or read-only ledger folder: the error names the file the ledger could not write (and leaves no temporary)."""
    ledger = RunLedger.create(FileBackend(str(tmp_path)), 'run1', nodes={'gpu-01': {'gpus': 8}})

    def full(fd, data):
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(_ledger.os, 'write', full)
    with pytest.raises(OSError, match=r"No space left on device: '.*run1/ledger\.jsonl'"):
        ledger.transition('gpu-01', 'admitted', 'test')
    monkeypatch.undo()

    def read_only(*args, **kwargs):
        raise OSError(30, 'Read-only file system')
    monkeypatch.setattr(_ledger.os, 'replace', read_only)
    with pytest.raises(OSError, match=r"Read-only file system: '.*run1/state\.json'"):
        _ledger.write_atomic(str(tmp_path / 'run1' / 'state.json'), b'{}')
    monkeypatch.undo()
    assert sorted(name for name in os.listdir(str(tmp_path / 'run1')) if '.tmp.' in name) == []
