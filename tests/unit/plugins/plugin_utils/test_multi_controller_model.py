# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A model-based test of one rollout run by several controllers (issue 26), with Hypothesis' stateful testing.

Each example is one run of 6-9 nodes under a policy drawn for it (window 1-4 or 50%, canary 0-1, capacity floor, rack
limit, failure budget and budget window, circuit breaker, pin-fault detector, soak, retries, a maintenance window), shared
by 2-4 controllers (members of the run): each has its own member name, its own shard of the hosts (shards overlap in some
examples), its own file backend over the one run folder and its own ledger instance (or a fresh one per step), and its
workers look at the gate each for itself or share one look per poll (the shared gate).  Hypothesis interleaves at random:

* a controller's workers at the gate for one to three of its hosts in turn: the real step, ``_rollout_node.admit``
  (``admit_timeout`` tiny: it returns after one or two looks, the fake clock moving by the poll interval when the gate
  sleeps);
* a node's procedure on the controller that admitted it: on to a later phase along the legal walk (``_phase.record``, as
  upgrade_phase writes it), or its end (``_phase.record`` with ``_phase.final_details`` and then ``_rollout_node.settle``,
  or settle alone);
* an operator's verb through ``_rollout_run.control``: pause, resume, skip, retry, release, released (the illegal ones
  must be refused with nothing written);
* a controller's crash during one of its steps: before an event is appended, right after (the head, the shards,
  state.json and the waiting list not written), half-way through the event's line (a torn tail), or at the documents
  written after an event (all but the last of a batch written); the ledger compacts at the scale of a few nodes (2-3
  shards, the head every 3 events) in most examples so that crashes fall between the documents of one change;
* time passing (the running members' keepers renew their heartbeats), a node outside the rollout going down or up (the
  floor and its rack count it), a member's heartbeat going stale while its controller still acts (and coming back), a
  member leaving (``ledger.leave``) or finishing (``_rollout_run.finish``), a controller's shard restarted as a new member
  (its gate looks resume the nodes the dead member holds).

After every step the invariants replay ``ledger.jsonl``: every transition legal (``_ledger.check_transition``), every
admission made while the rules allowed it at that moment (window, failure-budget cap, capacity floor, rack limit, no pause
rule, inside the maintenance window, one canary at a time), a resume never taking a node in flight on another live member,
nothing ``done`` without ``validating`` since its last admission; the state rebuilt from the events alone
(``_ledger.rebuild``) equals what a fresh ``RunLedger.open`` reads (head, shards, state.json and the events after them),
and every live controller's own ledger instance, caught up, shows the same counts and gate view.  The oracle's rules are
restated here from the documentation, not taken from ``_gate``.

Simplifications: the keepers are not processes (the model renews the heartbeats when time passes); the operator's events
carry the wall clock (``control`` opens its own ledger), the controllers' the fake clock, so no check compares an
operator event's time; a crashed controller's instance is dropped and a restarted one has a new name; a node taken over by
another member is driven by that member only (nothing in the ledger fences the old member's phase writes); the skip verb
is asked for pending nodes and for nodes past ``cordoned`` (the code also lets it take an ``admitted`` or ``cordoned``
node, which the documentation does not).  The run folders live in ``/dev/shm`` where there is one and ``os.fsync`` is a
no-op during the test: the crashes are a process's, not the machine's.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import math
import os
import shutil
import tempfile
from unittest import mock

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ansible_collections.gpufleet.lifecycle.plugins.action import rollout as action
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _members
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _phase
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _policy
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout_node
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout_run
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _run_context

RUN = 'model-run'
STALE = _ledger.DEFAULT_LEASE_SECONDS      # the ledger spec sets no lease_seconds: a member is dead 60 s after its heartbeat
POLL = 0.2
# A Monday, 09:00 UTC: the maintenance windows below are open then or open later that day.
START = datetime.datetime(2030, 6, 3, 9, 0, tzinfo=datetime.timezone.utc).timestamp()
HAPPY = ('admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'done')
OUTSIDE = {'x1': 'r1', 'x2': 'r2'}          # nodes of the fleet outside the rollout, with their rack
WINDOWS = {'day': {'start': '06:00', 'end': '18:00'}, 'night': {'start': '20:00', 'end': '12:00'}}
CRASH_POINTS = ('before', 'append', 'torn', 'docs')
NO_CRASH = (None,) * 9
# An operator's verbs, resume more often than pause (a pause stops every admission until then); the first is the simplest.
VERBS = ('resume', 'retry', 'skip', 'release', 'released', 'retry', 'resume', 'pause')
MAX_CONTROLLERS = 8
# The ledger's compaction at the scale of a few nodes (as test__ledger_scale does): 2-3 shards, the head every 3 events, so
# that the crashes fall between the documents of one change.  {}: the ledger's own.
SMALL = {'SHARD_NODES': 4, 'HEAD_EVERY': 3, 'SHARD_EVERY': 7, 'RECENT_MAX': 6}
# What befalls a member while time passes (None: nothing; the first is the simplest for Hypothesis).
MEMBER_CHANGES = (None, None, None, 'restart', 'restart', 'recover', 'stale', 'leave', 'finish')
# The run folders: in memory where the machine has one (the thousands of runs write small files; a process crash keeps them).
SCRATCH = '/dev/shm' if os.path.isdir('/dev/shm') and os.access('/dev/shm', os.W_OK) else None
DEFAULT_ARGS = {name: spec.get('default') for name, spec in action.ARGUMENT_SPEC.items()}


class Crash(Exception):
    """The controller's process died here (an injected crash)."""


class CrashingBackend(_ledger.FileBackend):
    """One controller's file backend; ``armed`` crashes it once at its next write of that kind.

    ``before``: before an event is appended (nothing of it written); ``append``: right after the event's line is appended
    (the head, the shards, state.json and the waiting list not written); ``torn``: half of the event's line written, no
    newline; ``docs``: at the first document written after an event, with all but the last of a batch of documents written
    (each is replaced atomically, not the batch).
    """

    def __init__(self, run_dir):
        super().__init__(run_dir)
        self.armed = None
        self.appended = False

    def disarm(self):
        self.armed, self.appended = None, False

    def _fire(self, where):
        self.disarm()
        raise Crash(where)

    def append_event(self, run_id, event, offset):
        if self.armed == 'before':
            self._fire('before an event was appended')
        if self.armed == 'torn':
            line = (json.dumps(event, sort_keys=True, separators=(',', ':')) + '\n').encode('utf-8')
            self._append(self.path(run_id, _ledger.LEDGER), line[:len(line) // 2], offset)
            self._fire('half of an event written')
        offset = super().append_event(run_id, event, offset)
        if self.armed == 'append':
            self._fire('after an event was appended')
        self.appended = self.armed == 'docs'
        return offset

    def write_docs(self, run_id, docs):
        if self.armed == 'docs' and self.appended:
            first = dict(list(docs.items())[:-1])
            if first:
                super().write_docs(run_id, first)
            self._fire('writing the documents after an event')
        super().write_docs(run_id, docs)

    def write_snapshot(self, run_id, state):
        if self.armed == 'docs' and self.appended:
            self._fire('writing state.json after an event')
        super().write_snapshot(run_id, state)


class Clock(_run_context.Clock):
    """A clock that moves when the gate sleeps and when the model says so."""

    def __init__(self, start):
        self.now = start

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds

    def utcnow(self):
        return datetime.datetime.fromtimestamp(self.now, tz=datetime.timezone.utc)

    def parent(self):
        return os.getpid()


class Context(_run_context.RunContext):
    """A step's context whose run ledger is the controller's (its fake clock stamps the events)."""

    def __init__(self, args, task_vars, opener, **given):
        super().__init__(args, task_vars, {}, **given)
        self.opener = opener

    def ledger(self, spec):
        return self.opener()


@dataclasses.dataclass
class Controller:
    """One controller of the run (a member): its hosts, backend and ledger instance, and what became of its process."""

    name: str
    hosts: tuple
    backend: CrashingBackend
    ledger: object
    persistent: bool            # its steps share one ledger instance (else each opens the run afresh)
    views: str | None           # its workers share one look at the gate per poll (the shared view's folder), else each looks
    status: str = 'running'     # running, hung (heartbeat stale, still acting), crashed, left, replaced

    @property
    def active(self):
        return self.status in ('running', 'hung')


@dataclasses.dataclass(frozen=True)
class Setup:
    """What one example runs: the nodes, the policy, the controllers' shards and how they look at the gate."""

    gpus: dict
    racks: dict
    variables: dict
    shards: tuple
    persistent: tuple
    shared: tuple
    unavailable: frozenset
    forks: int
    ordered: bool
    start: float
    compaction: dict


@st.composite
def setups(draw):
    count = draw(st.integers(6, 9))
    nodes = ['n%d' % number for number in range(1, count + 1)]
    gpus = {name: draw(st.sampled_from((4, 8))) for name in nodes}
    racks = {name: draw(st.sampled_from(('r1', 'r2', 'r3'))) for name in nodes}
    variables = {
        'gpufleet_window': draw(st.sampled_from((1, 2, 3, 4, '50%'))),
        'gpufleet_canary': draw(st.sampled_from((0, 0, 1))),
        'gpufleet_capacity_floor': draw(st.sampled_from((0, 0, 0, 0.5, 0.7, 0.8))),
        'gpufleet_max_fail_percentage': draw(st.sampled_from((None, 0, 20, 50))),
        'gpufleet_budget_window': draw(st.booleans()),
        'gpufleet_circuit_breaker_threshold': draw(st.sampled_from((None, 1, 2, 3))),
        'gpufleet_circuit_breaker_window': draw(st.sampled_from((600, 3600))),
        'gpufleet_pin_fault_threshold': draw(st.sampled_from((None, 2))),
        'gpufleet_soak_seconds': draw(st.sampled_from((0, 30))),
        'gpufleet_retries': draw(st.integers(0, 1)),
    }
    if draw(st.booleans()):
        variables.update(gpufleet_domain_var='rack', gpufleet_domain_max=draw(st.integers(1, 2)))
    window = draw(st.sampled_from((None, None, 'day', 'night')))
    if window:
        variables['gpufleet_maintenance_window'] = dict(WINDOWS[window])
    members = draw(st.integers(2, 4))
    shards = [[] for _member in range(members)]
    for name in nodes:
        shards[draw(st.integers(0, members - 1))].append(name)
    if draw(st.booleans()):     # overlapping shards: some hosts in two controllers' inventories
        for name in draw(st.sets(st.sampled_from(nodes), max_size=3)):
            other = next(number for number in range(members) if name not in shards[number])
            shards[other].append(name)
    return Setup(gpus=gpus, racks=racks, variables=variables, shards=tuple(tuple(shard) for shard in shards),
                 persistent=tuple(draw(st.booleans()) for _member in range(members)),
                 shared=tuple(draw(st.booleans()) for _member in range(members)),
                 unavailable=frozenset(draw(st.sets(st.sampled_from(sorted(OUTSIDE))))), forks=draw(st.sampled_from((1, 5))),
                 ordered=draw(st.booleans()), start=START + 3600 * draw(st.sampled_from((0, 0, 0, 10))),
                 compaction=draw(st.sampled_from((SMALL, SMALL, SMALL, {}))))


def outcome(node, target, rma=False):
    """A node_upgrade_result ending in ``target``."""
    results = {
        'done': {'state': 'done', 'phase': 'validate', 'reason': 'validated on the pin', 'facts_after': {'gpu_count': 8}},
        'deferred': {'state': 'deferred', 'phase': 'drain', 'reason': 'drain of %s timed out after 600 s' % node},
        'rolled_back': {'state': 'rolled_back', 'phase': 'converge', 'reason': 'dkms build failed on %s' % node},
        'quarantined': {'state': 'quarantined', 'phase': 'validate', 'reason': 'validation failed', 'rma_suspect': rma,
                        'validation': [{'name': 'dcgm', 'passed': False, 'message': 'GPU 3 Xid 79 on %s' % node}]},
        'left_alone': {'state': 'left_alone', 'phase': 'precheck', 'reason': 'not a node of this fleet'},
    }
    return results[target]


def legal(node, current, to):
    """Whether ``current -> to`` is legal for some writer (a node's procedure, an operator, a resume, the gate)."""
    for flags in ({}, {'operator': True}, {'resume': True}, {'gate': True}):
        try:
            _ledger.check_transition(node, current, to, **flags)
            return True
        except _ledger.LedgerError:
            pass
    return False


def alive(member, now):
    """The members' rule, restated: not left, heartbeat within STALE seconds."""
    return isinstance(member, dict) and member.get('left') is None and isinstance(member.get('heartbeat'), (int, float)) \
        and now - member['heartbeat'] <= STALE


def signature_key(signature):
    return json.dumps(signature)


class MultiControllerRun(RuleBasedStateMachine):
    """Several controllers, one run, one ledger folder (see the module docstring)."""

    def __init__(self):
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix='gpufleet-model-', dir=SCRATCH)
        self.plain = _ledger.FileBackend(self.folder)
        self.spec = {'backend': 'file', 'run_dir': self.folder, 'run_id': RUN}
        self.setup = None
        self.policy = None
        self.clock = None
        self.keeper = None
        self.controllers = []
        self.unavailable = frozenset()
        self.members_log = []
        self.scheduler_log = []
        self.released = set()
        self.hostvars = {}
        self.checked = None
        self.cache = (None, None)
        self.restore = {}

    def teardown(self):
        for name, value in self.restore.items():
            setattr(_ledger, name, value)
        shutil.rmtree(self.folder, ignore_errors=True)

    # ------------------------------------------------------------------------------------------------ the run

    @initialize(setup=setups())
    def start(self, setup):
        self.setup = setup
        for name, value in setup.compaction.items():
            self.restore[name] = getattr(_ledger, name)
            setattr(_ledger, name, value)
        self.policy = _policy.load_policy(setup.variables)
        self.clock = Clock(setup.start)
        self.unavailable = setup.unavailable
        nodes = {name: {'domain': setup.racks[name], 'gpus': setup.gpus[name]} for name in setup.gpus}
        self.hostvars = {name: {'gpufleet_gpus': info['gpus'], 'rack': info['domain']} for name, info in nodes.items()}
        self.hostvars.update({name: {'gpufleet_gpus': 8, 'rack': rack} for name, rack in OUTSIDE.items()})
        self.keeper = _ledger.RunLedger.create(self.plain, RUN, inventory='inv', policy=self.policy.to_dict(), pin={'driver': '580'},
                                               nodes=nodes, mode='window', order=sorted(nodes), clock=self.clock.utcnow)
        for number, shard in enumerate(setup.shards):
            self._join(shard, setup.persistent[number], setup.shared[number])
        self.scheduler_log.append((self._event_count(), self.unavailable))

    def _join(self, hosts, persistent, shared):
        number = len(self.controllers)
        # Every model controller is this process (its workers' parent, as the gate checks), told apart by its host.
        holder = {'host': 'model-ctl-%d.invalid' % number, 'pid': os.getpid(), 'pid_start': 1}
        name = _members.member_id(holder['host'], holder['pid'])
        backend = CrashingBackend(self.folder)
        self.keeper.join(name, _members.record(holder, self.clock.time(), hosts=len(hosts)))
        self.controllers.append(Controller(name, tuple(hosts), backend, _ledger.RunLedger.open(backend, RUN, clock=self.clock.utcnow),
                                           persistent, os.path.join(self.folder, 'views-%d' % number) if shared else None))
        self._log_members()

    def _event_count(self):
        return len(self._events())

    def _events(self):
        """The ledger's events (re-read when the file changed)."""
        stat = os.stat(self.plain.path(RUN, _ledger.LEDGER))
        key = (stat.st_size, stat.st_mtime_ns)
        if self.cache[0] != key:
            self.cache = (key, self.plain.read_events(RUN, 0)[0])
        return self.cache[1]

    def _state(self):
        return _ledger.rebuild(self.plain, RUN)

    def _log_members(self):
        self.members_log.append((self._event_count(), copy.deepcopy(self.keeper.members())))

    def _opener(self, controller):
        if controller.persistent:
            return lambda: controller.ledger
        return lambda: _ledger.RunLedger.open(controller.backend, RUN, clock=self.clock.utcnow)

    def _context(self, controller, host, **given):
        args = copy.deepcopy(DEFAULT_ARGS)
        args.update(run_dir=self.folder, run_id=RUN, ledger=dict(self.spec), order=sorted(self.setup.gpus) if self.setup.ordered else [],
                    poll=POLL, admit_timeout=0.001, member=controller.name if controller else '')
        args.update(given)
        task_vars = {'inventory_hostname': host, 'ansible_inventory_sources': ['inv'], 'ansible_forks': self.setup.forks,
                     'ansible_play_hosts_all': list(controller.hosts) if controller else [host], 'hostvars': self.hostvars}
        opener = self._opener(controller) if controller else (lambda: _ledger.RunLedger.open(self.plain, RUN))
        views = controller.views if controller else None
        return Context(args, task_vars, opener, clock=self.clock, open_backend=lambda spec: self.plain, scheduler=self._scheduler,
                       keep=lambda *arguments: None, shared=views is not None, shared_folder=views)

    def _scheduler(self, context, nodes, jobs=False):
        del context, nodes, jobs
        gpus = dict(self.setup.gpus, **{name: 8 for name in OUTSIDE})
        return _rollout.Fleet(gpus, self.unavailable)

    def _crashes(self, controller, step):
        """Run ``step()`` as ``controller``'s process: an injected crash ends that process."""
        try:
            step()
        except Crash:
            controller.status = 'crashed'
            return True
        return False

    # ------------------------------------------------------------------------------------------------ the rules

    def _lookable(self, state):
        """(controller, node) pairs a gate look may be for: a controller's pending host, or its host in flight on another
        member (resumed once that one is dead)."""
        pairs = []
        for controller in self.controllers:
            if not controller.active:
                continue
            for node in controller.hosts:
                record = state['nodes'][node]
                if record['state'] == 'pending' or (record['state'] in _gate.IN_FLIGHT and record.get('member') != controller.name):
                    pairs.append((controller.name, node))
        return pairs

    @rule(data=st.data())
    def at_the_gate(self, data):
        """A controller's workers at the gate for some of its hosts, one after the other: the real step."""
        pairs = self._lookable(self._state())
        if not pairs:
            return
        name = data.draw(st.sampled_from(sorted(set(name for name, _node in pairs))), label='controller')
        controller = next(item for item in self.controllers if item.name == name)
        nodes = data.draw(st.lists(st.sampled_from([node for owner, node in pairs if owner == name]), min_size=1, max_size=3, unique=True),
                          label='nodes')
        controller.backend.armed = data.draw(st.sampled_from(NO_CRASH + CRASH_POINTS), label='crash point')
        for node in nodes:
            if not self._look(controller, node):
                break
        controller.backend.disarm()

    def _look(self, controller, node):
        """One gate step of ``controller`` for ``node``; False when the controller crashed."""
        state = self._state()
        record = state['nodes'][node]
        holder = record.get('member') if record['state'] in _gate.IN_FLIGHT else None
        if record['state'] in _gate.IN_FLIGHT and holder == controller.name:
            return True         # admitted by an earlier look of this step: its procedure runs
        members = self.keeper.members()
        now = self.clock.time()
        resumable = record['state'] in _gate.IN_FLIGHT and not alive(members.get(holder), now)
        before = self._event_count()
        context = self._context(controller, node)
        if self._crashes(controller, lambda: _rollout_node.admit(context)):
            return False
        result = context.result
        if resumable and not (controller.views and result['rule'] == 'queue'):
            # A node in flight on a dead member is resumed at its first look (in-flight nodes finish, even when paused); with
            # the shared gate this worker may only have seen the controller's last look, made before it arrived.
            assert (result['verdict'], result['rule']) == ('admit', 'resume'), result
        if result['rule'] == 'member':
            assert record['state'] in _gate.IN_FLIGHT and alive(members.get(holder), now), result
        after = self._state()['nodes'][node]
        if result['verdict'] == 'admit':
            assert (after['state'], after.get('member')) == ('admitted', controller.name), (result, after)
            self.released.discard(node)
        else:
            assert after['state'] == record['state'], (result, after)
        new = self._events()[before:]
        assert all(event['to'] != 'admitted' or event['node'] == node for event in new), new
        return True

    def _flying_on(self, state):
        return [(controller.name, node) for controller in self.controllers if controller.active
                for node, record in sorted(state['nodes'].items())
                if record['state'] in _gate.IN_FLIGHT and record.get('member') == controller.name and node not in self.released]

    @rule(data=st.data())
    def node_procedure(self, data):
        """The node's procedure on its controller: on to a later phase (the phases between recorded too), or its end
        (upgrade_phase's record, then settle; or settle alone, the safety net)."""
        state = self._state()
        flying = self._flying_on(state)
        if not flying:
            return
        name, node = data.draw(st.sampled_from(flying), label='controller, node')
        controller = next(item for item in self.controllers if item.name == name)
        current = state['nodes'][node]['state']
        # Done first (the simplest for Hypothesis: nodes finish and the window moves), then a failure, then a later phase.
        choices = [target for target in ('done', 'deferred', 'quarantined', 'rolled_back', 'left_alone') if _phase.walk(current, target)]
        choices += list(HAPPY[HAPPY.index(current) + 1:-1]) if current in HAPPY else []
        target = data.draw(st.sampled_from(choices), label='to')
        controller.backend.armed = data.draw(st.sampled_from(NO_CRASH + CRASH_POINTS), label='crash point')
        self._procedure(controller, node, target, data)
        controller.backend.disarm()

    def _procedure(self, controller, node, target, data):
        ledger = self._opener(controller)()
        if target in _gate.IN_FLIGHT:
            self._crashes(controller, lambda: _phase.record(ledger, node, target, 'phase %s' % target))
            return
        result = outcome(node, target, rma=data.draw(st.booleans(), label='rma_suspect') if target == 'quarantined' else False)
        if data.draw(st.booleans(), label='upgrade_phase records it'):
            details = _phase.final_details(result, node)
            if self._crashes(controller, lambda: _phase.record(ledger, node, target, result['reason'], details=details)):
                return
        context = self._context(controller, node, result=result)
        if self._crashes(controller, lambda: _rollout_node.settle(context)):
            return
        record = self._state()['nodes'][node]
        assert context.result['state'] == target, (target, context.result)
        assert record['state'] == ('pending' if context.result['retry'] else target), (context.result, record)

    @rule(data=st.data())
    def operator_verb(self, data):
        """An operator's verb (rollout_control.yml): legal ones are recorded, the others refused with nothing written."""
        state = self._state()
        verb = data.draw(st.sampled_from(VERBS), label='verb')
        nodes = []
        given = {}
        expected = None
        if verb in _rollout_run.NODE_VERBS:
            names = sorted(self.released) if verb == 'released' else sorted(state['nodes'])
            if not names:
                return
            node = data.draw(st.sampled_from(names), label='node')
            nodes = [node]
            current = state['nodes'][node]['state']
            if verb == 'skip' and current != 'pending':
                expected = _run_context.GateError      # only a node not started yet is skipped
            elif verb == 'retry' and current not in _ledger.OPERATOR_TRANSITIONS:
                expected = _ledger.LedgerError
            elif verb == 'release' and current != 'quarantined':
                expected = _run_context.GateError
            elif verb == 'released':
                if current != 'validating':
                    self.released.discard(node)
                    return
                passed = data.draw(st.booleans(), label='passed')
                given = {'passed': passed, 'validation': {'passed': passed, 'checks': [{'name': 'pin', 'passed': True}]}}
        before = self._event_count()
        context = self._context(None, 'localhost', verb=verb, nodes=nodes, reason='model operator', **given)
        if expected is not None:
            try:
                _rollout_run.control(context)
            except expected:
                assert self._event_count() == before
                return
            raise AssertionError('%s of %s (%s) was not refused' % (verb, nodes, state['nodes'][nodes[0]]['state']))
        _rollout_run.control(context)
        assert self._event_count() == before + 1
        if verb == 'release':
            self.released.add(nodes[0])
        elif verb == 'released':
            self.released.discard(nodes[0])

    @rule(seconds=st.sampled_from((0, 1, 20, 61, 300, 3600, 4 * 3600)), down=st.sampled_from((None, None, None) + tuple(sorted(OUTSIDE))),
          data=st.data())
    def meanwhile(self, seconds, down, data):
        """Time passes (the keepers of the running controllers renew their heartbeats); a node outside the rollout goes down or
        comes back (the floor and its rack count it); a member's heartbeat goes stale or comes back, a member leaves or
        finishes, a controller's shard restarts as a new member."""
        self.clock.now += seconds
        members = self.keeper.members()
        for controller in self.controllers:
            # A keeper renews every third of the stale time.
            if controller.status == 'running' and self.clock.now - members[controller.name]['heartbeat'] >= STALE / 3.0:
                self.keeper.heartbeat(controller.name, now=self.clock.now)
        if down:
            self.unavailable = self.unavailable ^ {down}
            self.scheduler_log.append((self._event_count(), self.unavailable))
        self._member_change(data)
        self._log_members()

    def _member_change(self, data):
        now = self.clock.time()
        options = []
        for controller in self.controllers:
            if controller.status == 'running':
                options += [('stale', controller.name), ('leave', controller.name), ('finish', controller.name)]
            elif controller.status == 'hung':
                options += [('recover', controller.name), ('leave', controller.name)]
            if controller.status not in ('running', 'replaced') and len(self.controllers) < MAX_CONTROLLERS:
                options.append(('restart', controller.name))
        kinds = [kind for kind in MEMBER_CHANGES if kind is None or kind in set(option for option, _name in options)]
        kind = data.draw(st.sampled_from(kinds), label='member change')
        if kind is None:
            return
        name = data.draw(st.sampled_from([name for option, name in options if option == kind]), label='controller')
        controller = next(item for item in self.controllers if item.name == name)
        if kind == 'stale':
            self.keeper.heartbeat(name, now=now - STALE - 1)
            controller.status = 'hung'
        elif kind == 'recover':
            self.keeper.heartbeat(name, now=now)
            controller.status = 'running'
        elif kind == 'leave':
            self.keeper.leave(name, now=now)
            controller.status = 'left'
        elif kind == 'finish':
            context = self._context(controller, 'localhost')
            if not self._crashes(controller, lambda: _rollout_run.finish(context)):
                controller.status = 'left'
        else:
            controller.status = 'replaced'
            controller.backend.disarm()
            self._join(controller.hosts, data.draw(st.booleans(), label='persistent'), data.draw(st.booleans(), label='shared gate'))

    # ------------------------------------------------------------------------------------------------ the invariants

    def _at(self, log, index):
        """The entry of ``log`` ((event count, value), in order) in force when event ``index`` was appended."""
        found = log[0][1]
        for count, value in log:
            if count > index:
                break
            found = value
        return found

    def _window(self, total):
        window = self.setup.variables['gpufleet_window']
        if isinstance(window, str):
            return max(1, int(math.floor(total * float(window.rstrip('%')) / 100.0 + 1e-9)))
        return window

    def _paused(self, state, now):
        """The pause rules that hold in ``state`` at ``now`` (documentation's rules, restated)."""
        variables, nodes = self.setup.variables, state['nodes']
        holding = []
        if state['status'] == 'paused' and (state.get('pause') or {}).get('by') == 'operator':
            holding.append('operator')
        threshold = variables['gpufleet_circuit_breaker_threshold']
        if threshold is not None:
            since = now - variables['gpufleet_circuit_breaker_window']
            if state.get('breaker_reset'):
                since = max(since, _ledger.epoch(state['breaker_reset']))
            recent = [name for name, record in nodes.items() if record['state'] == 'quarantined'
                      and since < _ledger.epoch(record['finished_at']) <= now]
            if len(recent) >= threshold:
                holding.append('circuit_breaker')
        failed = {name: record for name, record in nodes.items() if record['state'] in _gate.FAILED}
        if variables['gpufleet_pin_fault_threshold'] is not None:
            suspects = {name: record for name, record in failed.items() if record.get('signature') and not record.get('rma_suspect')}
            early = sorted((_ledger.epoch(record['finished_at']), name) for name, record in nodes.items()
                           if record['state'] in ('done',) + _gate.FAILED and record.get('finished_at'))[:10]
            groups = {}
            for _time, name in early:
                if name in suspects:
                    groups.setdefault(signature_key(suspects[name]['signature']), []).append(name)
            if any(record.get('canary') and record['signature'][0] == 'validate' for record in suspects.values()) \
                    or any(len(names) >= variables['gpufleet_pin_fault_threshold'] for names in groups.values()):
                holding.append('pin_suspect')
        if any(record.get('canary') for record in failed.values()):
            holding.append('canary_failed')
        percentage = variables['gpufleet_max_fail_percentage']
        if percentage is not None and len(failed) * 100.0 > percentage * len(nodes):
            holding.append('budget')
        return holding

    def _in_maintenance(self, now):
        window = self.setup.variables.get('gpufleet_maintenance_window')
        if not window:
            return True
        hour = datetime.datetime.fromtimestamp(now, tz=datetime.timezone.utc).hour
        start, end = int(window['start'][:2]), int(window['end'][:2])
        return start <= hour < end if start < end else (hour >= start or hour < end)

    def _check_admission(self, state, event, index):
        """An admission (``to`` admitted) against the rules in force when it was appended."""
        variables, nodes = self.setup.variables, state['nodes']
        node, came_from = event['node'], event['from']
        record = nodes[node]
        now = _ledger.epoch(event['time'])
        member = (event.get('details') or {}).get('member')
        assert member, 'admission of %s without its member: %s' % (node, event)
        if came_from in _gate.IN_FLIGHT:
            holder = record.get('member')
            if holder and holder != member:
                members = self._at(self.members_log, index)
                assert not alive(members.get(holder), now), '%s resumed by %s while %s, which holds it, is alive' % (node, member, holder)
            return
        assert came_from == _gate.PENDING, event
        flying = [name for name, item in nodes.items() if item['state'] in _gate.IN_FLIGHT]
        failed = [name for name, item in nodes.items() if item['state'] in _gate.FAILED]
        total = len(nodes)
        why = '%s admitted by %s at event %d with %s in flight, %s failed' % (node, member, index, flying, failed)
        assert len(flying) < self._window(total), 'window: ' + why
        percentage = variables['gpufleet_max_fail_percentage']
        if variables['gpufleet_budget_window'] and percentage is not None:
            cap = max(0, int(math.floor(percentage * total / 100.0 + 1e-9)) - len(failed)) + 1
            assert len(flying) < cap, 'budget window (cap %d): %s' % (cap, why)
        holding = self._paused(state, now)
        assert not holding, 'paused (%s): %s' % (', '.join(holding), why)
        assert self._in_maintenance(now), 'outside the maintenance window: ' + why
        if variables['gpufleet_canary']:
            done = [(_ledger.epoch(item['finished_at']) or 0.0) for item in nodes.values() if item['state'] == 'done']
            passed = [finished for finished in done if finished + variables['gpufleet_soak_seconds'] <= now]
            if len(passed) < variables['gpufleet_canary']:
                assert not flying and len(passed) == len(done), 'canary phase: ' + why
                assert event['details'].get('canary') is True, 'canary phase, not a canary: ' + why
        unavailable = self._at(self.scheduler_log, index)
        out = flying + [name for name in failed if nodes[name]['state'] == 'quarantined']
        if variables.get('gpufleet_domain_var'):
            rack = record['domain']
            count = sum(1 for name in out if nodes[name]['domain'] == rack) + sum(1 for name in unavailable if OUTSIDE[name] == rack)
            assert count < variables['gpufleet_domain_max'], 'domain %s has %d out: %s' % (rack, count, why)
        floor = variables['gpufleet_capacity_floor']
        if floor:
            total_gpus = sum(self.setup.gpus.values()) + 8 * len(OUTSIDE)
            out_gpus = sum(nodes[name]['gpus'] for name in out) + 8 * len(unavailable) + record['gpus']
            assert (total_gpus - out_gpus) / float(total_gpus) >= floor - 1e-9, 'capacity floor %s: %s' % (floor, why)

    @invariant()
    def history_is_legal(self):
        """Replay ledger.jsonl: legal transitions, admissions by the rules of their moment, done only after validating."""
        events = self._events()
        if self.checked == len(events) or not events:
            return
        state = _ledger.empty_state(RUN)
        validated = {}
        for index, event in enumerate(events):
            node = event.get('node')
            if node is not None:
                record = state['nodes'].get(node)
                if event.get('from') is None:
                    assert record is None and event['to'] == _gate.PENDING, event
                else:
                    assert record is not None and event['from'] == record['state'], 'event %d: %s, the node was %s' % (
                        index, event, record and record['state'])
                    assert legal(node, event['from'], event['to']), 'event %d is not a legal transition: %s' % (index, event)
                if event['to'] == 'admitted':
                    self._check_admission(state, event, index)
                    validated[node] = False
                elif event['to'] == 'validating':
                    validated[node] = True
                elif event['to'] == 'done' and event['from'] != 'done':
                    assert validated.get(node), 'event %d: %s done without validating since its admission' % (index, node)
            _ledger.apply_event(state, event)
        self.checked = len(events)

    @invariant()
    def rebuild_equals_open(self):
        """The state from the events alone equals what a reader gets from the head, the shards, state.json and the events."""
        rebuilt = self._state()
        opened = _ledger.RunLedger.open(self.plain, RUN)
        assert opened.head['counts'] == dict(collections_count(rebuilt)), (opened.head['counts'], collections_count(rebuilt))
        assert opened.head['total'] == len(rebuilt['nodes'])
        assert opened.state == rebuilt, diff(opened.state, rebuilt)

    @invariant()
    def controllers_agree(self):
        """Every live controller's own ledger instance, caught up (on a copy: the controller keeps its lag), sees the run as
        the events say: its counts and its gate view."""
        rebuilt = self._state()
        counts = collections_count(rebuilt)
        for controller in self.controllers:
            if not controller.active or not controller.persistent:
                continue
            ledger = _ledger.RunLedger(self.plain, RUN)
            ledger.__dict__.update(copy.deepcopy({key: value for key, value in controller.ledger.__dict__.items()
                                                  if key not in ('backend', 'clock')}))
            ledger.catch_up()
            assert ledger.head['counts'] == counts, (controller.name, ledger.head['counts'], counts)
            view = ledger.gate_view()
            flying_failed = {name for name, record in rebuilt['nodes'].items() if record['state'] in _gate.IN_FLIGHT + _gate.FAILED}
            assert flying_failed <= set(view.nodes), (controller.name, sorted(flying_failed - set(view.nodes)))
            for name, node in view.nodes.items():
                assert node == _ledger.gate_node(rebuilt['nodes'][name]), (controller.name, name, node)


def collections_count(state):
    counts = {}
    for record in state['nodes'].values():
        counts[record['state']] = counts.get(record['state'], 0) + 1
    return counts


def diff(left, right):
    """Where two states differ, for the failure message."""
    keys = sorted(set(left) | set(right))
    shown = {key: (left.get(key), right.get(key)) for key in keys if key != 'nodes' and left.get(key) != right.get(key)}
    nodes = sorted(set(left.get('nodes', {})) | set(right.get('nodes', {})))
    shown.update({'node ' + name: (left['nodes'].get(name), right['nodes'].get(name)) for name in nodes
                  if left['nodes'].get(name) != right['nodes'].get(name)})
    return shown


# 1,000 runs of up to 25 steps (about half of them run 20 or more), derandomized: the same histories every time.
SETTINGS = settings(max_examples=1000, stateful_step_count=25, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


class TestMultiControllerRun(MultiControllerRun.TestCase):
    """The model's examples (:data:`SETTINGS`)."""

    settings = SETTINGS

    def setUp(self):
        # The crashes here are a process's, not the machine's: what was written stays, fsync is no part of the model
        # (and costs much of the run time).
        patcher = mock.patch.object(os, 'fsync', lambda fd: None)
        patcher.start()
        self.addCleanup(patcher.stop)
