# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout gate's steps over a RunContext with the I/O injected: a counting file backend, a fake clock, a fake scheduler.

The start reads each earlier run once (its durations, the previous pin and the circuit breaker's memory come from that one
read); the action plugin only dispatches.
"""

import collections
import copy
import datetime
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.action import rollout as action
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _phase
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _policy
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout_node
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout_run
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout_start
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _run_context
from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import read_fixture

NODES = ['n1', 'n2', 'n3']
POLICY = {'gpufleet_window': 1, 'gpufleet_canary': 0, 'gpufleet_max_fail_percentage': None}
QUARANTINED = ['admitted', 'cordoned', 'drained', 'rebooting', 'quarantined']
DONE = ['admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'done']


class CountingBackend(_ledger.FileBackend):
    """A file backend that counts, per run, the ledger opens (``exists``) and the full reads (node shards, state.json), and
    the listings of the runs."""

    def __init__(self, run_dir):
        super().__init__(run_dir)
        self.reset()

    def reset(self):
        self.opens = collections.Counter()
        self.full_reads = collections.Counter()
        self.listings = 0

    def run_ids(self):
        self.listings += 1
        return super().run_ids()

    def exists(self, run_id):
        self.opens[run_id] += 1
        return super().exists(run_id)

    def read_doc(self, run_id, name):
        if name.startswith('nodes-'):
            self.full_reads[run_id] += 1
        return super().read_doc(run_id, name)

    def read_snapshot(self, run_id):
        self.full_reads[run_id] += 1
        return super().read_snapshot(run_id)


# The keepers the start steps asked for (spec, run_id, fleet, holder, member): none is started in a unit test.
KEPT = []


class Clock(_run_context.Clock):
    """A clock that moves only when the gate sleeps."""

    def __init__(self, start=None):
        self.now = time.time() if start is None else start
        self.slept = []

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds

    def utcnow(self):
        return datetime.datetime.fromtimestamp(self.now, tz=datetime.timezone.utc)

    def parent(self):
        return os.getpid()


def scheduler(context, nodes, jobs=False):
    return _rollout.Fleet({name: 8 for name in NODES}, ())


def make_context(backend, host='localhost', clock=None, task_vars=None, **given):
    """A step's context: every argument at the action's default but ``given``, the backend, the clock and the scheduler fake."""
    args = {name: copy.deepcopy(spec.get('default')) for name, spec in action.ARGUMENT_SPEC.items()}
    args.update(run_dir=backend.run_dir, nodes=list(NODES), policy=dict(POLICY))
    args.update(given)
    variables = {'inventory_hostname': host, 'ansible_inventory_sources': ['inv'], 'ansible_forks': 5,
                 'hostvars': {name: {'gpufleet_gpus': 8} for name in NODES}}
    variables.update(task_vars or {})
    return _run_context.RunContext(args, variables, {}, clock=clock or Clock(), open_backend=lambda spec: backend, scheduler=scheduler,
                                   keep=lambda *arguments: KEPT.append(arguments))


def earlier_run(backend, run_id, walks, status=None, pin=None):
    """An earlier run of inventory ``inv`` whose nodes walked ``walks`` ({node: [state, ...]})."""
    ledger = _ledger.RunLedger.create(backend, run_id, inventory='inv', policy=POLICY, pin=pin or {},
                                      nodes={name: {'gpus': 8} for name in walks})
    for name, steps in walks.items():
        for step in steps:
            ledger.transition(name, step, 'earlier')
    if status:
        ledger.set_status(status, 'earlier')
    return ledger


@pytest.fixture
def backend(tmp_path):
    backend = CountingBackend(str(tmp_path))
    earlier_run(backend, 'r1', {'n1': DONE}, status='finished', pin={'driver': '570'})
    earlier_run(backend, 'r2', {'n1': QUARANTINED, 'n2': DONE}, status='finished', pin={'driver': '575'})
    earlier_run(backend, 'r3', {'n3': DONE}, status='paused')
    backend.reset()
    return backend


def test_the_action_dispatches_every_step():
    assert list(action.STEPS) == action.ARGUMENT_SPEC['step']['choices']
    assert list(action.STEPS) == ['check', 'start', 'confirm', 'admit', 'settle', 'summary', 'finish', 'plan', 'control']


@pytest.mark.parametrize('mode', ['window', 'batch'])
def test_a_start_reads_each_earlier_run_once(backend, mode):
    """Durations, previous pin and the circuit breaker's memory from one read of each earlier run (they were read two or,
    in batch mode, three times), and one listing of the runs."""
    context = make_context(backend, run_id='r9', mode=mode)
    _rollout_start.start(context)
    assert dict(backend.opens) == {'r1': 1, 'r2': 1, 'r3': 1}                  # the new run r9 is created, not opened
    assert {name: backend.full_reads[name] for name in ('r1', 'r2', 'r3')} == {'r1': 1, 'r2': 1, 'r3': 1}
    assert backend.listings == 1
    facts = context.result['ansible_facts']['gpufleet_rollout']
    assert [(item['run_id'], item['node']) for item in facts['breaker']['quarantines']] == [('r2', 'n1')]
    assert context.result['breaker'] == facts['breaker']
    state = _ledger.RunLedger.open(backend, 'r9').state
    assert state['breaker_history'] == facts['breaker'] and state['previous_pin'] == {'driver': '575'}
    assert 'warnings' not in context.result


def test_a_resume_reads_each_earlier_run_once(backend):
    _rollout_start.start(make_context(backend, run_id='r9'))
    backend.release(_rollout.fleet_name('inv'), 'r9')
    backend.reset()
    context = make_context(backend, run_id='r9', mode='window')
    _rollout_start.start(context)
    assert context.result['resumed'] is True
    assert dict(backend.opens) == {'r1': 1, 'r2': 1, 'r3': 1, 'r9': 1}
    assert backend.full_reads['r1'] == backend.full_reads['r2'] == backend.full_reads['r3'] == 1
    assert [item['node'] for item in context.result['breaker']['quarantines']] == ['n1']


def test_without_a_run_id_only_the_heads_are_read_again_to_find_the_last_unfinished_run(backend):
    context = make_context(backend)
    _rollout_start.start(context)
    assert context.result['resumed'] is True and context.result['run_id'] == 'r3'      # r3 is paused, of this inventory
    # _ledger.last_unfinished opens each run's head (its own rule); the start's read of the earlier runs is the only full one.
    assert dict(backend.opens) == {'r1': 2, 'r2': 2, 'r3': 2}
    assert {name: backend.full_reads[name] for name in ('r1', 'r2', 'r3')} == {'r1': 1, 'r2': 1, 'r3': 1}


def test_without_a_breaker_only_the_last_history_runs_are_read(backend):
    context = make_context(backend, run_id='r9', history=1, policy=dict(POLICY, gpufleet_circuit_breaker_threshold=None))
    _rollout_start.start(context)
    assert dict(backend.opens) == {'r3': 1}
    assert context.result['breaker'] == {'quarantines': [], 'reset': None}


def test_an_unreadable_earlier_run_is_a_warning_once_per_use(backend):
    folder = os.path.join(backend.run_dir, 'r2')
    for name in os.listdir(folder):
        os.unlink(os.path.join(folder, name))
    with open(os.path.join(folder, _ledger.LEDGER), 'w') as handle:      # listed, but its ledger cannot be read
        handle.write('not json\n')
    context = make_context(backend, run_id='r9')
    _rollout_start.start(context)
    assert dict(backend.opens) == {'r1': 1, 'r2': 1, 'r3': 1}
    warnings = context.result['warnings']
    assert len(warnings) == 2 and warnings[1].startswith('circuit breaker: run r2 cannot be read: ')


def test_a_batch_start_checks_the_breaker_from_the_same_read(backend):
    for run_id in ('r4', 'r5'):
        earlier_run(backend, run_id, {'n2': QUARANTINED}, status='finished')
    backend.reset()
    context = make_context(backend, run_id='r9', mode='batch')
    with pytest.raises(_run_context.GateError, match=r'rollout paused \(circuit_breaker\)'):
        _rollout_start.start(context)
    assert max(backend.opens.values()) == 1
    assert _ledger.RunLedger.open(backend, 'r9').state['status'] == 'paused'
    assert backend.holder(_rollout.fleet_name('inv')) is None                  # the fleet lock is given back


def test_a_resume_by_another_playbook_is_refused_before_anything_is_written(backend):
    _rollout_start.start(make_context(backend, run_id='r9', kind='converge'))
    backend.release(_rollout.fleet_name('inv'), 'r9')
    events = len(_ledger.RunLedger.open(backend, 'r9').backend.read_events('r9', 0)[0])
    with pytest.raises(_run_context.GateError, match='run r9 is a converge run, this is rollback'):
        _rollout_start.start(make_context(backend, run_id='r9', kind='rollback'))
    assert len(backend.read_events('r9', 0)[0]) == events


def test_check_and_plan_touch_no_ledger(backend):
    context = make_context(backend)
    _rollout_start.check(context)
    assert context.result['policy']['gpufleet_window'] == 1
    context = make_context(backend, history=2)
    _rollout_start.plan(context)
    assert [entry['node'] for entry in context.result['plan']['order']] == NODES and context.result['lines'][-1].startswith('predicted:')
    assert not backend.opens


# ------------------------------------------------------------------------------------------------ the node's steps

def started(backend, **given):
    """A window-mode run r9 of NODES, started: the ledger spec the nodes get."""
    context = make_context(backend, run_id='r9', **given)
    _rollout_start.start(context)
    return context.result['ansible_facts']['gpufleet_rollout']['ledger']


def admit(backend, node, spec, clock, **given):
    context = make_context(backend, host=node, clock=clock, ledger=spec, order=list(NODES), poll=5.0, **given)
    _rollout_node.admit(context)
    return context.result


def test_admit_keeps_the_place_of_a_node_host_pinned_is_starting(backend):
    """n2 reaches the gate first; n1, ahead in the plan, never did: n2 waits (rule order) for the arrival grace, then goes."""
    spec = started(backend)
    clock = Clock()
    result = admit(backend, 'n2', spec, clock)
    assert (result['verdict'], result['rule'], result['caught']) == ('admit', 'admit', '')
    assert result['waited'] == 15.0 and clock.slept == [5.0, 5.0, 5.0]       # the grace: 2 polls + 3 s
    assert result['ansible_facts']['gpufleet_ledger']['results_dir'] == os.path.join(backend.run_dir, 'r9', 'results')
    assert backend.read_doc('r9', 'arrived') == {'nodes': ['n2']} and backend.read_doc('r9', 'waiting') == {'nodes': {}}


def test_admit_lets_an_earlier_node_waiting_at_the_gate_go_first(backend):
    spec = started(backend)
    clock = Clock()
    backend.write_doc('r9', 'waiting', {'nodes': {'n1': clock.time()}})
    result = admit(backend, 'n2', spec, clock, admit_timeout=4.0)
    assert (result['verdict'], result['rule']) == ('pending', 'order')
    assert result['reason'] == 'waited 5.0s at the gate (admit_timeout): n1 is ahead of n2 in the plan and may go now'
    assert set(backend.read_doc('r9', 'waiting')['nodes']) == {'n1', 'n2'}


def test_admit_skips_a_final_node_and_settle_retries_a_deferred_one(backend):
    spec = started(backend, policy=dict(POLICY, gpufleet_retries=1))
    result = admit(backend, 'n1', spec, Clock(0.0))
    assert result['admitted'] is True
    context = make_context(backend, host='n1', ledger=spec, result={'state': 'deferred', 'reason': 'drain timed out'})
    _rollout_node.settle(context)
    assert (context.result['state'], context.result['retry'], context.result['recorded'][-2:]) == ('deferred', True, ['deferred', 'pending'])
    _ledger.RunLedger.open(backend, 'r9').transition('n3', 'left_alone', 'skipped')
    assert (admit(backend, 'n3', spec, Clock(0.0))['verdict']) == 'skip'


def test_confirm_sends_a_done_node_that_fails_the_quick_check_back(backend):
    spec = started(backend)
    ledger = _ledger.RunLedger.open(backend, 'r9')
    for step in DONE:
        ledger.transition('n1', step, 'the procedure')
    context = make_context(backend, host='n1', ledger=spec, unreachable=True)
    _rollout_node.confirm(context)
    assert (context.result['state'], context.result['confirmed']) == ('pending', False)
    context = make_context(backend, host='n2', ledger=spec)
    _rollout_node.confirm(context)
    assert (context.result['changed'], context.result['state']) == (False, 'pending')


# ------------------------------------------------------------------------------------------------ the run's steps

def test_control_verbs_and_the_finish(backend):
    spec = started(backend)
    fleet = _rollout.fleet_name('inv')
    context = make_context(backend, run_id='r9', verb='pause', reason='bad news', nodes=[])
    _rollout_run.control(context)
    assert (context.result['status'], context.result['nodes']) == ('paused', [])
    context = make_context(backend, run_id='r9', verb='release', nodes=['n1'])
    with pytest.raises(_run_context.GateError, match='n1 is pending, not quarantined'):
        _rollout_run.control(context)
    context = make_context(backend, run_id='r9', verb='skip', nodes=[])
    with pytest.raises(_run_context.GateError, match='nodes: skip needs the nodes'):
        _rollout_run.control(context)
    for verb, nodes in (('resume', []), ('skip', NODES)):
        context = make_context(backend, run_id='r9', verb=verb, nodes=nodes)
        _rollout_run.control(context)
    assert context.result['counts'] == {'left_alone': 3} and context.result['nodes'] == NODES        # the verb's nodes
    assert context.result['msg'].startswith('skip n1, n2, n3: run r9 running: 3 left_alone')
    context = make_context(backend, ledger=spec, fleet=fleet)
    _rollout_run.finish(context)
    assert context.result['status'] == 'finished' and 'failed' not in context.result
    assert context.result['summary']['ledger_file'] == os.path.join(backend.run_dir, 'r9', _ledger.LEDGER)
    assert backend.holder(fleet) is None


def test_the_summary_of_a_batch_pauses_the_run_as_ansible_would_stop_it(backend):
    spec = started(backend, mode='batch')
    ledger = _ledger.RunLedger.open(backend, 'r9')
    for step in QUARANTINED:
        ledger.transition('n1', step, 'the procedure')
    sent = []
    context = make_context(backend, ledger=spec, batch=['n1'], policy=None)
    context.send = lambda escalation, payload: sent.append(payload)
    _rollout_run.summary(context)
    assert (context.result['paused'], context.result['changed']) == (True, True)
    assert context.result['pause']['rule'] == 'batch_budget' and sent == []        # no escalation hook in the policy


# ------------------------------------------------------------------------------------------------ several controllers

class ControllerClock(Clock):
    """The clock of another controller: its ansible-playbook is process ``pid``."""

    def __init__(self, pid, start=None):
        super().__init__(start)
        self.pid = pid

    def parent(self):
        return self.pid


def dead_pid():
    process = subprocess.Popen([sys.executable, '-c', 'pass'])
    process.wait()
    return process.pid


def start_as(backend, pid, **given):
    context = make_context(backend, clock=ControllerClock(pid), **given)
    _rollout_start.start(context)
    return context.result


def test_controllers_with_the_same_run_id_join_one_run_and_a_different_run_is_refused(backend):
    KEPT.clear()
    first = start_as(backend, os.getpid(), run_id='r9', policy=dict(POLICY, gpufleet_window=2))
    second = start_as(backend, os.getppid(), run_id='r9', nodes=['n2', 'n3', 'n4'])
    assert first['resumed'] is False and second['resumed'] is True and second['msg'].startswith('joined (with %s)' % first['member'])
    assert second['members'] == [first['member']] and first['member'] != second['member']
    ledger = _ledger.RunLedger.open(backend, 'r9')
    assert sorted(ledger.members()) == sorted([first['member'], second['member']])
    assert sorted(ledger.state['nodes']) == ['n1', 'n2', 'n3', 'n4']          # the joiner's own node added
    assert sorted(second['hosts']) == ['n2', 'n3', 'n4']     # it runs its own inventory's nodes only
    assert [kept[4] for kept in KEPT] == [first['member'], second['member']]          # each a keeper of its own
    with pytest.raises(_ledger.LockHeld, match='held by run r9'):
        start_as(backend, os.getppid(), run_id='r10')
    assert not backend.exists('r10')


def test_a_different_run_takes_over_the_lock_only_when_no_member_lives(backend):
    start_as(backend, dead_pid(), run_id='r9')
    second = make_context(backend, clock=ControllerClock(os.getpid()), run_id='r10')
    _rollout_start.start(second)
    assert 'took over the fleet lock of run r9' in ' '.join(second.result['warnings'])


def test_a_joining_controller_never_reopens_a_run_another_live_one_paused_and_batch_mode_refuses_it(backend):
    start_as(backend, os.getpid(), run_id='r9')
    _ledger.RunLedger.open(backend, 'r9').set_status('paused', 'failure budget exceeded', details={'rule': 'budget', 'by': 'gate'})
    start_as(backend, os.getppid(), run_id='r9')
    assert _ledger.RunLedger.open(backend, 'r9').head['status'] == 'paused'
    with pytest.raises(_run_context.GateError, match='several controllers share a run in window mode only'):
        start_as(backend, os.getppid(), run_id='r9', mode='batch')


def test_one_look_decides_for_every_waiting_node_of_the_controller_in_the_plans_order(backend):
    spec = started(backend, policy=dict(POLICY, gpufleet_window=2))
    context = make_context(backend, ledger=spec, order=list(NODES), poll=5.0, member='ctl-a')
    ledger = _ledger.RunLedger.open(backend, 'r9')
    verdicts = _rollout_node.look(context, ledger, _policy.load_policy(dict(POLICY, gpufleet_window=2)), {},
                                  {'n3': context.clock.time(), 'n2': context.clock.time(), 'n1': context.clock.time()}, 5.0)
    assert {node: verdict['decision']['action'] for node, verdict in verdicts.items()} == {'n1': 'admit', 'n2': 'admit', 'n3': 'wait'}
    assert verdicts['n3']['decision']['rule'] == 'window'
    state = _ledger.RunLedger.open(backend, 'r9').state
    assert state['nodes']['n1']['member'] == 'ctl-a' and state['nodes']['n1']['resumed_from'] == ''
    # A later look of the same controller (n1's worker has not taken its verdict yet) keeps the admission: no second event.
    events = len(backend.read_events('r9', 0)[0])
    again = _rollout_node.look(context, _ledger.RunLedger.open(backend, 'r9'), _policy.load_policy(dict(POLICY, gpufleet_window=2)), {},
                               {'n1': context.clock.time()}, 5.0)
    assert again['n1']['decision']['action'] == 'admit' and len(backend.read_events('r9', 0)[0]) == events


def test_a_look_reads_the_ledger_the_same_number_of_times_for_3_and_for_30_waiting_nodes(tmp_path):
    reads = {}
    for count in (3, 30):
        backend = CountingBackend(str(tmp_path / str(count)))
        names = ['n%02d' % index for index in range(count)]
        context = make_context(backend, run_id='r9', nodes=names, policy=dict(POLICY, gpufleet_window=2))
        context.task_vars['hostvars'] = {name: {'gpufleet_gpus': 8} for name in names}
        _rollout_start.start(context)
        spec = context.result['ansible_facts']['gpufleet_rollout']['ledger']
        ledger = _ledger.RunLedger.open(backend, 'r9')
        calls = collections.Counter()
        for method in ('read_events', 'read_doc', 'write_doc'):
            original = getattr(backend, method)

            def counted(*arguments, _original=original, _method=method):
                calls[_method] += 1
                return _original(*arguments)
            setattr(backend, method, counted)
        look = make_context(backend, ledger=spec, order=names, poll=5.0, member='ctl-a')
        _rollout_node.look(look, ledger, _policy.load_policy(dict(POLICY, gpufleet_window=2)), {}, {name: look.clock.time() for name in names}, 5.0)
        reads[count] = calls['read_events'] + calls['read_doc']
    assert reads[3] == reads[30] and reads[3] < 12, reads


def test_a_node_in_flight_on_a_live_controller_waits_and_a_dead_ones_is_resumed(backend):
    spec = started(backend)
    ledger = _ledger.RunLedger.open(backend, 'r9')
    ledger.join('ctl-a', {'host': _ledger.socket.gethostname(), 'pid': os.getppid(), 'pid_start': _ledger.process_start(os.getppid()),
                          'heartbeat': time.time(), 'left': None})
    ledger.transition('n1', 'admitted', 'admitted', details={'member': 'ctl-a'})
    ledger.transition('n1', 'cordoned', 'cordoned')
    result = admit(backend, 'n1', spec, Clock(), member='ctl-b', admit_timeout=1.0)
    assert (result['verdict'], result['rule']) == ('pending', 'member') and 'ctl-a' in result['reason']
    ledger.join('ctl-a', {'host': _ledger.socket.gethostname(), 'pid': dead_pid(), 'pid_start': None, 'heartbeat': time.time(), 'left': None})
    result = admit(backend, 'n1', spec, Clock(), member='ctl-b')
    assert (result['verdict'], result['rule'], result['caught']) == ('admit', 'resume', 'cordoned')
    record = _ledger.RunLedger.open(backend, 'r9').node('n1')
    assert (record['member'], record['resumed_from']) == ('ctl-b', 'cordoned')


def test_the_finish_of_one_controller_leaves_the_run_and_keeps_the_lock_while_another_lives(backend):
    fleet = _rollout.fleet_name('inv')
    first = start_as(backend, os.getpid(), run_id='r9')
    second = start_as(backend, os.getppid(), run_id='r9')
    spec = first['ansible_facts']['gpufleet_rollout']['ledger']
    context = make_context(backend, ledger=spec, fleet=fleet, member=first['member'])
    _rollout_run.finish(context)
    assert context.result['status'] == 'running' and context.result['members'][first['member']] == 'left'
    assert context.result['members'][second['member']] == 'alive' and backend.holder(fleet)['run_id'] == 'r9'
    ledger = _ledger.RunLedger.open(backend, 'r9')
    for node in NODES:
        ledger.transition(node, 'left_alone', 'skipped')
    context = make_context(backend, ledger=spec, fleet=fleet, member=second['member'])
    _rollout_run.finish(context)
    assert context.result['status'] == 'finished' and backend.holder(fleet) is None


def test_the_summary_names_the_nodes_a_dead_controller_holds(backend):
    spec = started(backend)
    ledger = _ledger.RunLedger.open(backend, 'r9')
    ledger.join('ctl-dead', {'host': 'elsewhere', 'pid': 1, 'pid_start': None, 'heartbeat': time.time() - 600, 'left': None})
    ledger.transition('n2', 'admitted', 'admitted', details={'member': 'ctl-dead'})
    context = make_context(backend, ledger=spec, fleet='')
    _rollout_run.finish(context)
    assert context.result['held'] == {'n2': 'ctl-dead'} and context.result['members']['ctl-dead'] == 'dead'
    assert 'held by a dead controller (rerun its slice to resume them): ctl-dead: n2' in context.result['message']


def test_the_arrival_grace_never_waits_for_a_node_only_another_controller_runs(backend):
    """n1 is ahead in the plan but another controller's: this controller (its play: n2, n3) does not keep n1's place."""
    spec = started(backend)
    clock = Clock()
    context = make_context(backend, host='n2', clock=clock, ledger=spec, order=list(NODES), poll=5.0,
                           task_vars={'ansible_play_hosts_all': ['n2', 'n3']})
    _rollout_node.admit(context)
    assert (context.result['verdict'], context.result['waited'], clock.slept) == ('admit', 0.0, [])


def test_a_second_controller_without_the_run_id_is_refused_not_joined(backend):
    first = start_as(backend, os.getpid())
    with pytest.raises(_ledger.LockHeld, match='held by run %s.*start each with -e gpufleet_run_id=%s' % (first['run_id'], first['run_id'])):
        start_as(backend, os.getppid())
    assert list(_ledger.RunLedger.open(backend, first['run_id']).members()) == [first['member']]


def test_a_worker_deep_in_the_queue_looks_less_often():
    assert [_rollout_node.backoff(1.0, rank, 10) for rank in (0, 9, 10, 25, 39, 500)] == [1.0, 1.0, 2.0, 3.0, 4.0, 4.0]
    assert _rollout_node.backoff(5.0, None, 10) == 5.0 and _rollout_node.backoff(5.0, True, 10) == 5.0


def test_the_waiting_room_keeps_a_sleeping_worker_until_its_next_poll_and_drops_a_gone_one(backend, tmp_path):
    spec = started(backend)
    clock = Clock()
    context = make_context(backend, host='n1', clock=clock, ledger=spec, order=list(NODES), poll=1.0)
    context.shared_folder = str(tmp_path / 'view')
    gate = _rollout_node.SharedGate(context, _ledger.RunLedger.open(backend, 'r9'), 1.0)
    gate.enter('n1', clock.time(), sleep=4.0)
    gate.enter('n2', clock.time())
    clock.now += 6.5                    # past n2's poll and waiting time (1 + 5 s), within n1's (4 + 5 s)
    assert set(gate.enter('n3', clock.time())) == {'n1', 'n3'}
    assert set(gate.enter('n3', clock.time(), present=False)) == {'n1'}


def test_a_controller_counted_dead_records_nothing_more_on_a_node_taken_over(backend):
    spec = started(backend)
    ledger = _ledger.RunLedger.open(backend, 'r9')
    ledger.transition('n1', 'admitted', 'admitted', details={'member': 'ctl-b'})      # ctl-b resumed it from ctl-a
    with pytest.raises(_ledger.LedgerError, match='n1 was taken over by controller ctl-b'):
        _phase.record(ledger, 'n1', 'cordoned', '', member='ctl-a')
    context = make_context(backend, host='n1', ledger=spec, member='ctl-a', result={'state': 'done', 'reason': 'ok'})
    with pytest.raises(_run_context.GateError, match='taken over by controller ctl-b'):
        _rollout_node.settle(context)
    assert _phase.record(ledger, 'n1', 'cordoned', '', member='ctl-b') == ['cordoned']


def test_settle_never_leaves_a_node_in_flight_and_skip_refuses_a_node_in_flight(backend):
    spec = started(backend)
    ledger = _ledger.RunLedger.open(backend, 'r9')
    for step in ('admitted', 'cordoned', 'drained'):
        ledger.transition('n1', step, 'the procedure')
    context = make_context(backend, host='n1', ledger=spec, result={'state': 'left_alone', 'reason': 'an admin drained it'})
    _rollout_node.settle(context)
    assert context.result['state'] == 'quarantined'
    assert 'left_alone could not be recorded from drained (an admin drained it)' in _ledger.RunLedger.open(backend, 'r9').node('n1')['reason']
    ledger.transition('n2', 'admitted', 'admitted')
    with pytest.raises(_run_context.GateError, match='n2 is admitted, not pending'):
        _rollout_run.control(make_context(backend, run_id='r9', verb='skip', nodes=['n2']))


def test_an_orphaned_worker_never_looks_at_the_gate(backend):
    spec = started(backend)
    for parent, member in ((1, ''), (os.getpid(), 'vm:%d' % (os.getpid() + 100000))):
        context = make_context(backend, host='n1', clock=ControllerClock(parent), ledger=spec, order=list(NODES), member=member)
        with pytest.raises(_run_context.GateError, match='is gone'):
            _rollout_node.admit(context)
    assert _ledger.RunLedger.open(backend, 'r9').node('n1')['state'] == 'pending'


def test_a_retried_node_never_takes_the_verdict_of_its_earlier_visit_at_the_gate(backend, tmp_path):
    """The model test's finding: n1 admitted by a look, deferred and put back for a retry within one poll; its second visit
    must not take the first visit's cached admission (the node is pending again)."""
    spec = started(backend, policy=dict(POLICY, gpufleet_retries=1))
    clock = Clock()
    context = make_context(backend, host='n1', clock=clock, ledger=spec, order=list(NODES), poll=5.0, member='ctl-a')
    context.shared_folder = str(tmp_path / 'view')
    gate = _rollout_node.SharedGate(context, _ledger.RunLedger.open(backend, 'r9'), 5.0)
    first = clock.time()
    gate.enter('n1', first)
    assert gate.verdict('n1', _policy.load_policy(POLICY), None, first)['decision']['action'] == 'admit'
    ledger = _ledger.RunLedger.open(backend, 'r9')
    ledger.transition('n1', 'deferred', 'drain timed out')
    ledger.transition('n1', 'pending', 'retry', gate=True)
    clock.now += 1.0
    gate.enter('n1', clock.time())
    assert gate.verdict('n1', _policy.load_policy(POLICY), None, clock.time()) is None        # the cached look saw the first visit


@pytest.mark.parametrize('paused_before', [False, True])
def test_a_scheduler_that_never_answers_ends_every_waiting_worker_pending(backend, tmp_path, paused_before):
    """slurmctld or the Kubernetes API gone: through the shared gate (a real run's), the worker whose look gave up pauses the
    run (rule scheduler) and every waiting worker - this look's or a later one's after the pause - ends pending, none waits
    on (CI found the verdicts of these looks unusable by the shared gate: both workers waited 30 minutes)."""
    spec = started(backend)
    if paused_before:
        _ledger.RunLedger.open(backend, 'r9').set_status('paused', 'the scheduler (slurm) did not answer', details={'rule': 'scheduler', 'by': 'gate'})

    def gone(context, *rest):
        raise _run_context.GateError('scontrol show node -o exited 1: slurm_load_node error: Socket timed out on send/recv operation')

    clock = Clock()
    folder = str(tmp_path / 'view')
    for node in ('n1', 'n2'):
        args = {name: copy.deepcopy(value.get('default')) for name, value in action.ARGUMENT_SPEC.items()}
        args.update(run_dir=backend.run_dir, nodes=list(NODES), policy=dict(POLICY), host=node, ledger=spec, order=list(NODES), poll=1.0,
                    scheduler='slurm', scheduler_timeout=5, step='admit', admit_timeout=600)
        variables = {'inventory_hostname': node, 'ansible_inventory_sources': ['inv'], 'ansible_forks': 5,
                     'hostvars': {name: {'gpufleet_gpus': 8} for name in NODES}}
        context = _run_context.RunContext(args, variables, {}, clock=clock, open_backend=lambda given: backend, answer=gone,
                                          shared=True, shared_folder=folder, keep=lambda *arguments: None)
        _rollout_node.admit(context)
        assert (context.result['verdict'], context.result['rule']) == ('pending', 'scheduler'), context.result
        assert 'did not answer' in context.result['reason'] and context.result['waited'] < 30, context.result
    state = _ledger.RunLedger.open(backend, 'r9').state
    assert state['status'] == 'paused' and state['pause']['rule'] == 'scheduler'
    assert {node: state['nodes'][node]['state'] for node in ('n1', 'n2')} == {'n1': 'pending', 'n2': 'pending'}


def test_a_node_an_admin_drained_is_left_alone_at_the_gate_without_a_slot_or_a_phase(backend, tmp_path):
    """n1 drained by an admin (Slurm's own answer, read through the shared gate): left alone from pending, with who holds it;
    it never took the window's one slot, so n2 is admitted in the same run without waiting for it."""
    spec = started(backend)
    idle = read_fixture('slurm', 'show-node_idle.txt').strip()
    drained = read_fixture('slurm', 'show-node_idle-drain-admin.txt').strip()
    text = '\n'.join([drained.replace('NodeName=gpu-03', 'NodeName=n1'), idle.replace('NodeName=gpu-03', 'NodeName=n2'),
                      idle.replace('NodeName=gpu-03', 'NodeName=n3')]) + '\n'

    def answer(context, jobs=False):
        return {'scontrol': text, 'squeue': '' if jobs else None}

    clock = Clock()
    results = {}
    for node in ('n1', 'n2'):
        args = {name: copy.deepcopy(value.get('default')) for name, value in action.ARGUMENT_SPEC.items()}
        args.update(run_dir=backend.run_dir, nodes=list(NODES), policy=dict(POLICY), host=node, ledger=spec, order=list(NODES), poll=1.0,
                    scheduler='slurm', step='admit', admit_timeout=600)
        variables = {'inventory_hostname': node, 'ansible_inventory_sources': ['inv'], 'ansible_forks': 5,
                     'hostvars': {name: {'gpufleet_gpus': 8} for name in NODES}}
        context = _run_context.RunContext(args, variables, {}, clock=clock, open_backend=lambda given: backend, answer=answer,
                                          shared=True, shared_folder=str(tmp_path / 'view'), keep=lambda *arguments: None)
        _rollout_node.admit(context)
        results[node] = context.result
    assert (results['n1']['verdict'], results['n1']['rule'], results['n1']['admitted']) == ('leave', 'held', False)
    assert 'Slurm DRAIN (reason: admin: bad DIMM)' in results['n1']['reason']
    assert (results['n2']['verdict'], results['n2']['rule']) == ('admit', 'admit')
    ledger = _ledger.RunLedger.open(backend, 'r9')
    record = ledger.state['nodes']['n1']
    assert record['state'] == 'left_alone' and record['held_by'] == 'Slurm DRAIN (reason: admin: bad DIMM)'
    events, _offset = backend.read_events('r9', 0)
    assert [(event['from'], event['to']) for event in events if event.get('node') == 'n1'] == [('pending', 'left_alone')]


def test_a_multi_node_job_is_admitted_as_one_group_and_its_other_node_takes_that_admission(backend, tmp_path):
    """Job 77 runs on n1 and n2 (squeue's own node list), window 2, through the shared gate: while only n1's worker waits, the
    group waits for n2 (rule job_group: a node admitted without a worker would hold its slot for nothing); once n2's worker
    waits too, one look admits both (the group recorded on both) and n2 takes that admission; n3 waits for the window."""
    spec = started(backend, policy=dict(POLICY, gpufleet_window=2))
    idle = read_fixture('slurm', 'show-node_idle.txt').strip()
    text = '\n'.join(idle.replace('NodeName=gpu-03', 'NodeName=' + name) for name in NODES) + '\n'

    def answer(context, jobs=False):
        return {'scontrol': text, 'squeue': '77|n[1-2]|Unknown|2026-11-24T11:00:00|\n' if jobs else None}

    clock = Clock()
    folder = str(tmp_path / 'view')
    member = 'ctl:%d' % os.getpid()

    def context_of(node, timeout):
        args = {name: copy.deepcopy(value.get('default')) for name, value in action.ARGUMENT_SPEC.items()}
        args.update(run_dir=backend.run_dir, nodes=list(NODES), policy=dict(POLICY, gpufleet_window=2), host=node, ledger=spec,
                    order=list(NODES), poll=1.0, scheduler='slurm', step='admit', admit_timeout=timeout, member=member)
        variables = {'inventory_hostname': node, 'ansible_inventory_sources': ['inv'], 'ansible_forks': 5,
                     'ansible_play_hosts_all': list(NODES), 'hostvars': {name: {'gpufleet_gpus': 8} for name in NODES}}
        return _run_context.RunContext(args, variables, {}, clock=clock, open_backend=lambda given: backend, answer=answer,
                                       shared=True, shared_folder=folder, keep=lambda *arguments: None)

    alone = context_of('n1', 3)
    _rollout_node.admit(alone)
    assert (alone.result['verdict'], alone.result['rule']) == ('pending', 'job_group') and 'not yet: n2' in alone.result['reason']
    # n1's worker waits at the gate again (in the controller's waiting room) when n2's arrives.
    ledger = _ledger.RunLedger.open(backend, 'r9')
    _rollout_node.SharedGate(context_of('n1', 600), ledger, 1.0).enter('n1', clock.time())
    results = {}
    for node in ('n2', 'n1', 'n3'):
        context = context_of(node, 3)
        _rollout_node.admit(context)
        results[node] = context.result
    assert (results['n1']['verdict'], results['n2']['verdict']) == ('admit', 'admit'), results
    assert 'job\'s group (job 77: n1, n2)' in results['n1']['reason'] or 'job 77' in results['n2']['reason'], results
    assert (results['n3']['verdict'], results['n3']['rule']) == ('pending', 'window'), results['n3']
    nodes = _ledger.RunLedger.open(backend, 'r9').state['nodes']
    assert nodes['n1']['group'] == nodes['n2']['group'] == ['n1', 'n2'] and nodes['n2']['jobs'] == ['77']
    assert nodes['n1']['member'] == nodes['n2']['member'] == member
