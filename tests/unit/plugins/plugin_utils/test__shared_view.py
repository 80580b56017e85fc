# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The controller's shared view (one scheduler read per poll for every worker of a controller) and the gate's use of it
through RunContext.read_fleet: served while fresh, read again when stale, one read for many processes, corrupt files and
failing reads never kept, keys never mixed, the read statistics."""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
import time

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.action import rollout as action
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _run_context
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _shared_view

SCONTROL = ('NodeName=n1 State=IDLE Gres=gpu:h100:8\n'
            'NodeName=n2 State=IDLE+DRAIN Gres=gpu:h100:8\n'
            'NodeName=n3 State=MIXED Gres=gpu:h100:8\n')
SQUEUE = '101|n3|2026-11-24T13:00:00|gpufleet.io/checkpoint=2026-11-24T12:30:00\n'
KUBE = {'items': [{'metadata': {'name': 'k1'}, 'status': {'allocatable': {'nvidia.com/gpu': '4'}}},
                  {'metadata': {'name': 'k2'}, 'spec': {'unschedulable': True}, 'status': {'allocatable': {'nvidia.com/gpu': '4'}}}]}


class FakeClock:
    """A clock that moves only when told."""

    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


class Reader:
    """A reader that counts its calls and answers ``value`` (or raises ``error``)."""

    def __init__(self, value=None, error=None):
        self.value = {'answer': 1} if value is None else value
        self.error = error
        self.calls = 0

    def __call__(self):
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.value


@pytest.fixture(name='folder')
def folder_fixture(tmp_path):
    return str(tmp_path / 'view')


@pytest.fixture(autouse=True)
def no_stats(monkeypatch):
    monkeypatch.delenv(_shared_view.STATS_VARIABLE, raising=False)


def key(pid=None, what='scontrol'):
    pid = os.getpid() if pid is None else pid
    return _shared_view.view_key(pid, 12345, 'slurm', what)


# ---------------------------------------------------------------------------------------------------- fetch

def test_a_fresh_answer_is_served_without_reading(folder):
    clock, reader = FakeClock(), Reader()
    assert _shared_view.fetch(key(), 5, reader, folder=folder, clock=clock) == {'answer': 1}
    clock.now += 4.9
    assert _shared_view.fetch(key(), 5, reader, folder=folder, clock=clock) == {'answer': 1}
    assert reader.calls == 1


def test_an_expired_answer_is_read_again(folder):
    clock, reader = FakeClock(), Reader()
    _shared_view.fetch(key(), 5, reader, folder=folder, clock=clock)
    clock.now += 5
    reader.value = {'answer': 2}
    assert _shared_view.fetch(key(), 5, reader, folder=folder, clock=clock) == {'answer': 2}
    assert reader.calls == 2
    clock.now += 1
    assert _shared_view.fetch(key(), 5, reader, folder=folder, clock=clock) == {'answer': 2}
    assert reader.calls == 2


def test_an_answer_from_the_future_is_a_miss(folder):
    clock, reader = FakeClock(), Reader()
    _shared_view.fetch(key(), 5, reader, folder=folder, clock=clock)
    clock.now -= 10     # the clock stepped back: the cached answer is not trusted
    _shared_view.fetch(key(), 5, reader, folder=folder, clock=clock)
    assert reader.calls == 2


def _worker(folder, calls, barrier, results, index):
    """One forked process: wait for the others, then fetch the one key (the reader is slow, so the others queue on the lock)."""

    def reader():
        handle = os.open(calls, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(handle, b'%d\n' % os.getpid())
        os.close(handle)
        time.sleep(0.3)
        return {'read_by': os.getpid()}

    barrier.wait()
    value = _shared_view.fetch(_shared_view.view_key(1, 1, 'slurm', 'x'), 30, reader, folder=folder)
    results.put((index, value))


def test_many_processes_in_one_window_read_once(tmp_path, folder):
    context = multiprocessing.get_context('fork')
    count = 8
    calls = str(tmp_path / 'calls')
    barrier = context.Barrier(count)
    results = context.Queue()
    processes = [context.Process(target=_worker, args=(folder, calls, barrier, results, index)) for index in range(count)]
    for process in processes:
        process.start()
    answers = [results.get(timeout=60) for _process in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    with open(calls, encoding='utf-8') as handle:
        readers = handle.read().split()
    assert len(readers) == 1
    assert {json.dumps(value, sort_keys=True) for _index, value in answers} == {json.dumps({'read_by': int(readers[0])})}


@pytest.mark.parametrize('content', [
    b'', b'not json', b'[]', b'null', b'{"format": 1}', b'{"format": 2, "time": 1000, "done": 1000, "value": 1}',
    b'{"format": 1, "time": "1000", "done": 1000, "value": 1}', b'{"format": 1, "time": true, "done": 1000, "value": 1}',
    b'{"format": 1, "time": 1000, "done": 1000}', b'\xff\xfe\x00garbage', b'{"format": 1, "time": 1000, "done": 1000, "value": 1',
])
def test_a_corrupt_cache_file_is_a_miss(folder, content):
    clock, reader = FakeClock(), Reader()
    _shared_view.private_folder(folder)
    with open(os.path.join(folder, key().name + '.json'), 'wb') as handle:
        handle.write(content)
    assert _shared_view.fetch(key(), 5, reader, folder=folder, clock=clock) == {'answer': 1}
    assert reader.calls == 1
    assert _shared_view.fetch(key(), 5, reader, folder=folder, clock=clock) == {'answer': 1}
    assert reader.calls == 1


def test_a_cache_that_is_a_folder_is_a_miss(folder):
    reader = Reader()
    _shared_view.private_folder(folder)
    os.mkdir(os.path.join(folder, key().name + '.json'))
    assert _shared_view.fetch(key(), 5, reader, folder=folder, clock=FakeClock()) == {'answer': 1}
    assert _shared_view.fetch(key(), 5, reader, folder=folder, clock=FakeClock()) == {'answer': 1}
    assert reader.calls == 2


def test_a_failing_read_is_not_kept(folder):
    clock, reader = FakeClock(), Reader(error=RuntimeError('slurmctld is down'))
    for _try in range(3):
        with pytest.raises(RuntimeError, match='slurmctld is down'):
            _shared_view.fetch(key(), 5, reader, folder=folder, clock=clock)
    assert reader.calls == 3
    assert not os.path.exists(os.path.join(folder, key().name + '.json'))
    reader.error = None
    assert _shared_view.fetch(key(), 5, reader, folder=folder, clock=clock) == {'answer': 1}
    assert reader.calls == 4


def test_an_answer_that_is_not_json_is_returned_not_kept(folder):
    reader = Reader(value={'a': {1, 2}})
    assert _shared_view.fetch(key(), 5, reader, folder=folder, clock=FakeClock()) == {'a': {1, 2}}
    _shared_view.fetch(key(), 5, reader, folder=folder, clock=FakeClock())
    assert reader.calls == 2


def test_two_keys_never_mix(folder):
    clock = FakeClock()
    names = [key(pid=10), key(pid=11), key(pid=10, what='squeue'), _shared_view.view_key(10, 54321, 'slurm', 'scontrol'),
             _shared_view.view_key(10, None, 'slurm', 'scontrol'), _shared_view.view_key(10, 12345, 'kubernetes', 'scontrol'), 'plain-key']
    assert len({_shared_view.key_name(one) for one in names}) == len(names)
    me, parent = os.getpid(), os.getppid()
    mine, theirs = _ledger.process_start(me), _ledger.process_start(parent)
    keys = [_shared_view.view_key(me, mine, 'slurm', 'scontrol'), _shared_view.view_key(parent, theirs, 'slurm', 'scontrol'),
            _shared_view.view_key(me, mine, 'slurm', 'squeue'), _shared_view.view_key(me, mine, 'kubernetes', 'scontrol'), 'plain-key']
    for index, one in enumerate(keys):
        assert _shared_view.fetch(one, 5, Reader({'index': index}), folder=folder, clock=clock) == {'index': index}
    for index, one in enumerate(keys):
        assert _shared_view.fetch(one, 5, Reader({'other': True}), folder=folder, clock=clock) == {'index': index}


def test_a_key_text_becomes_a_safe_name():
    assert _shared_view.key_name('plain-key') == 'plain-key'
    for text in ('../escape', '.hidden', 'a/b', 'x' * 200, ''):
        name = _shared_view.key_name(text)
        assert '/' not in name and not name.startswith('.') and len(name) == 32


def test_a_waiter_takes_a_read_that_ended_after_it_asked():
    text = _shared_view.encode({'v': 1}, 100.0, 108.0)
    assert _shared_view.decode(text, 5, 104.0) == (True, {'v': 1})
    assert _shared_view.decode(text, 5, 109.0) == (False, None)
    assert _shared_view.decode(text, 5, 109.0, asked=107.0) == (True, {'v': 1})
    assert _shared_view.decode(text, 5, 109.0, asked=108.5) == (False, None)


def test_the_read_statistics(folder, tmp_path, monkeypatch):
    stats = tmp_path / 'stats.jsonl'
    clock, reader = FakeClock(), Reader()
    _shared_view.fetch(key(pid=77), 5, reader, folder=folder, clock=clock)
    assert not stats.exists()
    monkeypatch.setenv(_shared_view.STATS_VARIABLE, str(stats))
    clock.now += 10
    for _call in range(3):
        _shared_view.fetch(key(pid=77), 5, reader, folder=folder, clock=clock)
    lines = [json.loads(line) for line in stats.read_text().splitlines()]
    assert [line['served'] for line in lines] == [False, True, True]
    assert {(line['kind'], line['pid'], line['time']) for line in lines} == {('slurm', 77, 1010.0)}


def test_statistics_never_stop_a_read(folder, tmp_path, monkeypatch):
    monkeypatch.setenv(_shared_view.STATS_VARIABLE, str(tmp_path / 'missing' / 'stats.jsonl'))
    assert _shared_view.fetch(key(), 5, Reader(), folder=folder, clock=FakeClock()) == {'answer': 1}


# ---------------------------------------------------------------------------------------------------- the folder

def test_the_folder_is_created_private(folder):
    _shared_view.fetch(key(), 5, Reader(), folder=folder, clock=FakeClock())
    assert os.stat(folder).st_mode & 0o777 == 0o700


def test_a_folder_open_to_others_is_made_private(folder):
    os.mkdir(folder)
    os.chmod(folder, 0o777)
    _shared_view.private_folder(folder)
    assert os.stat(folder).st_mode & 0o777 == 0o700


def test_a_folder_of_another_user_is_refused(folder, monkeypatch):
    os.mkdir(folder, 0o700)
    monkeypatch.setattr(_shared_view.os, 'getuid', lambda: os.stat(folder).st_uid + 1)
    with pytest.raises(_shared_view.ViewError, match='belongs to uid'):
        _shared_view.fetch(key(), 5, Reader(), folder=folder, clock=FakeClock())


def test_a_link_or_a_file_is_refused(tmp_path):
    target = tmp_path / 'elsewhere'
    target.mkdir(mode=0o700)
    link = tmp_path / 'link'
    link.symlink_to(target)
    with pytest.raises(_shared_view.ViewError, match='not a folder'):
        _shared_view.private_folder(str(link))
    plain = tmp_path / 'plain'
    plain.write_text('x')
    with pytest.raises(_shared_view.ViewError, match='not a folder'):
        _shared_view.private_folder(str(plain))


def test_the_default_folder_is_per_user():
    assert _shared_view.default_folder().endswith('gpufleet-view-%d' % os.getuid())


def test_the_files_of_gone_controllers_are_cleaned(folder):
    _shared_view.private_folder(folder)
    names = {'10-5-0123456789abcdef0123456789abcdef.json': True, '10-5-0123456789abcdef0123456789abcdef.lock': True,
             '11-x-0123456789abcdef0123456789abcdef.json': False, '12-7-0123456789abcdef0123456789abcdef.json': False,
             '.12-7-0123456789abcdef0123456789abcdef.json.abc.tmp': True, 'notes.txt': False, 'plain-key.json': False}
    for name in names:
        with open(os.path.join(folder, name), 'w', encoding='utf-8') as handle:
            handle.write('{}')
    old = time.time() - 2 * _shared_view.TEMP_AGE
    os.utime(os.path.join(folder, '.12-7-0123456789abcdef0123456789abcdef.json.abc.tmp'), (old, old))
    removed = _shared_view.clean(folder, alive=lambda pid, start: pid != 10)
    assert sorted(removed) == sorted(name for name, gone in names.items() if gone)
    assert sorted(os.listdir(folder)) == sorted(name for name, gone in names.items() if not gone)


def test_a_new_controller_cleans_up_after_a_dead_one(folder):
    _shared_view.private_folder(folder)
    dead = _shared_view.view_key(2 ** 22 + 12345, 1, 'slurm', 'x')     # beyond pid_max's default: not running
    _shared_view.fetch(dead, 5, Reader(), folder=folder, clock=FakeClock())
    assert os.path.exists(os.path.join(folder, dead.name + '.json'))
    mine = _shared_view.view_key(os.getpid(), None, 'slurm', 'x')
    _shared_view.fetch(mine, 5, Reader(), folder=folder, clock=FakeClock())
    assert sorted(os.listdir(folder)) == sorted([mine.name + '.json', mine.name + '.lock'])


# ---------------------------------------------------------------------------------------------------- the gate's reads

class Clock(_run_context.Clock):
    """A clock that moves only when told; ``parent`` is the controller (this test process unless given)."""

    def __init__(self, parent=None):
        self.now = 1000.0
        self.pid = os.getpid() if parent is None else parent

    def time(self):
        return self.now

    def parent(self):
        return self.pid


class Answers:
    """An injected ``answer`` reader (what read_answer reads) that counts its calls."""

    def __init__(self, answer=None, error=None):
        self.answer = {'scontrol': SCONTROL, 'squeue': None} if answer is None else answer
        self.error = error
        self.calls = []

    def __call__(self, context, jobs=False):
        self.calls.append(jobs)
        if self.error is not None:
            raise self.error
        answer = dict(self.answer)
        if jobs and 'scontrol' in answer:
            answer['squeue'] = SQUEUE
        return answer


def make_context(folder, answers, clock=None, **given):
    """A gate poll's context (step admit, scheduler slurm, poll 5) with the shared view in ``folder``, unless ``given``."""
    args = {name: copy.deepcopy(spec.get('default')) for name, spec in action.ARGUMENT_SPEC.items()}
    args.update(step='admit', scheduler='slurm', poll=5.0)
    args.update(given)
    variables = {'inventory_hostname': 'n1', 'hostvars': {name: {'gpufleet_gpus': 8} for name in ('n1', 'n2', 'n3')}}
    return _run_context.RunContext(args, variables, {}, clock=clock or Clock(), answer=answers, shared_folder=folder)


def test_the_gate_shares_one_read_per_poll(folder):
    answers, clock = Answers(), Clock()
    contexts = [make_context(folder, answers, clock=clock) for _host in range(5)]
    fleets = [context.read_fleet(['n1', 'n2', 'n3']) for context in contexts]
    assert len(answers.calls) == 1
    assert {fleet.total() for fleet in fleets} == {24}
    assert {frozenset(fleet.unavailable) for fleet in fleets} == {frozenset(['n2'])}
    assert fleets[0] is not fleets[1]       # each caller its own Fleet, rebuilt from the answer
    clock.now += 5
    for context in contexts:
        context.read_fleet(['n1'])
    assert len(answers.calls) == 2


def test_the_poll_is_the_ttl(folder):
    answers, clock = Answers(), Clock()
    context = make_context(folder, answers, clock=clock, poll=30.0)
    context.read_fleet([])
    clock.now += 29
    context.read_fleet([])
    assert len(answers.calls) == 1
    assert _run_context.shared_ttl({'step': 'admit', 'scheduler': 'slurm', 'poll': 0.05}) == 0.2
    assert _run_context.shared_ttl({'step': 'admit', 'scheduler': 'kubernetes', 'poll': 5}) == 5.0


@pytest.mark.parametrize('given', [{'step': 'start'}, {'step': 'settle'}, {'poll': 0.0}, {'poll': None}])
def test_not_a_gate_poll_reads_each_time(folder, given):
    answers = Answers()
    context = make_context(folder, answers, **given)
    context.read_fleet([])
    context.read_fleet([])
    assert len(answers.calls) == 2
    assert not os.path.exists(folder)


def test_jobs_are_read_apart(folder):
    answers = Answers()
    context = make_context(folder, answers)
    assert context.read_fleet([]).jobs == {}
    assert set(context.read_fleet([], jobs=True).jobs) == {'n3'}
    assert set(context.read_fleet([], jobs=True).jobs) == {'n3'}
    assert answers.calls == [False, True]


def test_two_controllers_never_share(folder):
    answers = Answers()
    make_context(folder, answers, clock=Clock(parent=os.getpid())).read_fleet([])
    make_context(folder, answers, clock=Clock(parent=os.getppid())).read_fleet([])
    assert len(answers.calls) == 2


@pytest.mark.parametrize('given', [{'slurm_environment': {'SLURM_CONF': '/etc/slurm/other.conf'}}, {'kubeconfig': '/other'}])
def test_other_scheduler_arguments_never_share(folder, given):
    answers = Answers()
    make_context(folder, answers).read_fleet([])
    make_context(folder, answers, **given).read_fleet([])
    assert len(answers.calls) == 2


def test_the_key_names_the_controller_and_its_start():
    args = {'scheduler': 'slurm', 'slurm_environment': {}, 'kubeconfig': ''}
    key = _run_context.shared_key(args, os.getpid())
    assert key.name.startswith('%d-%d-' % (os.getpid(), _ledger.process_start(os.getpid())))
    assert key.kind == 'slurm' and _run_context.shared_key(args, os.getpid(), jobs=True).kind == 'slurm+jobs'


def test_a_failing_read_reaches_every_caller(folder):
    answers = Answers(error=_run_context.GateError('scontrol exited 1: slurm_load_node: Unable to contact slurm controller'))
    for _host in range(3):
        with pytest.raises(_run_context.GateError, match='Unable to contact'):
            make_context(folder, answers).read_fleet([])
    assert len(answers.calls) == 3
    answers.error = None
    make_context(folder, answers).read_fleet([])
    make_context(folder, answers).read_fleet([])
    assert len(answers.calls) == 4


def test_an_answer_that_cannot_be_understood_is_not_kept(folder):
    answers = Answers(answer={'scontrol': '', 'squeue': None})
    for _host in range(2):
        with pytest.raises(_rollout.RolloutError, match='listed no node'):
            make_context(folder, answers).read_fleet([])
    assert len(answers.calls) == 2


def test_kubernetes_answers_are_shared(folder):
    answers = Answers(answer={'nodes': KUBE})
    fleets = [make_context(folder, answers, scheduler='kubernetes').read_fleet([]) for _host in range(3)]
    assert len(answers.calls) == 1
    assert {(fleet.total(), frozenset(fleet.unavailable)) for fleet in fleets} == {(8, frozenset(['k2']))}


def test_a_static_view_is_read_once_a_minute_by_the_gate(folder):
    """No scheduler: the gate's looks share the nodes' gpufleet_gpus host variables (templating every node's is what a look
    costs most at 10,000 nodes); no scheduler answer is asked for."""
    answers = Answers()
    context = make_context(folder, answers, scheduler='none')
    read = []
    hostvar = context.hostvar
    context.hostvar = lambda node, name: read.append(node) or hostvar(node, name)
    assert context.read_fleet(['n1', 'n2']).total() == 16 and not answers.calls
    assert context.read_fleet(['n1', 'n2']).total() == 16 and read == ['n1', 'n2']        # the second from the shared view
    context.clock.now += _run_context.STATIC_SECONDS + 1
    assert context.read_fleet(['n1', 'n2']).total() == 16 and read == ['n1', 'n2', 'n1', 'n2']


def test_an_injected_scheduler_is_called_as_before(folder):
    calls = []

    def scheduler(context, nodes, jobs=False):
        calls.append(nodes)
        return _rollout.Fleet({'n1': 8}, ())

    args = {name: copy.deepcopy(spec.get('default')) for name, spec in action.ARGUMENT_SPEC.items()}
    args.update(step='admit', scheduler='slurm', poll=5.0)
    context = _run_context.RunContext(args, {}, {}, clock=Clock(), scheduler=scheduler, shared_folder=folder)
    context.read_fleet(['n1'])
    context.read_fleet(['n1'])
    assert calls == [['n1'], ['n1']]
    assert not os.path.exists(folder)


def test_an_unusable_folder_reads_directly_with_one_warning(tmp_path):
    plain = tmp_path / 'plain'
    plain.write_text('x')
    answers = Answers()
    context = make_context(str(plain), answers)
    context.read_fleet([])
    context.read_fleet([])
    assert len(answers.calls) == 2
    assert len(context.result['warnings']) == 1 and 'not a folder' in context.result['warnings'][0]


def test_the_gate_reads_are_counted(folder, tmp_path, monkeypatch):
    stats = tmp_path / 'stats.jsonl'
    monkeypatch.setenv(_shared_view.STATS_VARIABLE, str(stats))
    answers = Answers()
    for _host in range(4):
        make_context(folder, answers).read_fleet([])
    make_context(folder, answers, step='start').read_fleet([], jobs=True)
    lines = [json.loads(line) for line in stats.read_text().splitlines()]
    assert [(line['kind'], line['served']) for line in lines] == [('slurm', False), ('slurm', True), ('slurm', True), ('slurm', True),
                                                                  ('slurm+jobs', False)]
    assert {line['pid'] for line in lines} == {os.getpid()}


def _gate_worker(folder, barrier, calls, results):
    """One forked worker of one controller (this test process): a gate poll through RunContext.read_fleet."""

    def answer(context, jobs=False):
        handle = os.open(calls, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(handle, b'x\n')
        os.close(handle)
        time.sleep(0.2)
        return {'scontrol': SCONTROL, 'squeue': None}

    args = {name: copy.deepcopy(spec.get('default')) for name, spec in action.ARGUMENT_SPEC.items()}
    args.update(step='admit', scheduler='slurm', poll=30.0)
    context = _run_context.RunContext(args, {}, {}, answer=answer, shared_folder=folder)
    barrier.wait()
    results.put(context.read_fleet([]).total())


def test_the_workers_of_one_controller_read_once(tmp_path, folder):
    context = multiprocessing.get_context('fork')
    count = 8
    calls = str(tmp_path / 'calls')
    barrier, results = context.Barrier(count), context.Queue()
    processes = [context.Process(target=_gate_worker, args=(folder, barrier, calls, results)) for _index in range(count)]
    for process in processes:
        process.start()
    totals = [results.get(timeout=60) for _process in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert totals == [24] * count
    with open(calls, encoding='utf-8') as handle:
        assert handle.read().split() == ['x']


def test_a_failing_read_is_counted_as_a_read(folder, tmp_path, monkeypatch):
    stats = tmp_path / 'stats.jsonl'
    monkeypatch.setenv(_shared_view.STATS_VARIABLE, str(stats))
    with pytest.raises(RuntimeError):
        _shared_view.fetch(key(pid=5), 5, Reader(error=RuntimeError('down')), folder=folder, clock=FakeClock())
    assert [json.loads(line)['served'] for line in stats.read_text().splitlines()] == [False]
