# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout gate's steps for one node (the host the task runs for): ``confirm``, ``admit`` and ``settle``.

Each step is a function of a :class:`._run_context.RunContext`.  ``admit`` waits at the gate: it reads the ledger's head
and the scheduler each poll, asks :func:`._gate.admit` and, for an admission, :func:`._gate.in_line` (the plan's order,
the arrival grace), and records the answer under the run lock, with the controller (the run's member, I(member)) that
admitted the node.  With several controllers the gate decides from the whole run: the window, the floor, the budget and
every other rule count every controller's nodes; the arrival grace waits only for this controller's own hosts.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime

from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _slurm
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _members
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _phase
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _policy
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _shared_view
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._run_context import GateError

# The gate asks a scheduler that does not answer again after the poll interval, doubled each time up to this (seconds).
SCHEDULER_BACKOFF_MAX = 30.0


def confirm(context):
    """A resumed run's done node after its quick check (I(validation), I(unreachable)): confirmed done, or back to pending."""
    args, node = context.args, context.host
    ledger = context.ledger(args['ledger'])
    with ledger.locked(full=False) as state:
        record = ledger.node(node)
        if record is None:
            raise GateError('%s is not a node of run %s' % (node, ledger.run_id))
        current = record['state']
        if current != 'done':
            context.result.update(changed=False, state=current, confirmed=False, msg='%s: %s, nothing to confirm' % (node, current))
            return
        to, reason = _rollout.confirm_decision(args['validation'], args['unreachable'], pin=state.get('pin'))
        details = {'confirmed_at': _ledger.iso(context.clock.utcnow())} if to == 'done' else {'recheck': True}
        ledger.transition(node, to, reason, details=details, gate=True)
    context.result.update(changed=True, state=to, confirmed=to == 'done', reason=reason, msg='%s: %s' % (node, reason))


# ---------------------------------------------------------------------------------------------- admit

def _fleet_or_stop(context, ledger, node, jobs=False):
    """The scheduler's answer for the gate, asked again with a doubling pause while it does not answer (slurmctld or the
    Kubernetes API gone); after I(scheduler_timeout) seconds the run is paused (rule ``scheduler``) and (None, why)
    returned: no node is admitted while the scheduler cannot be read, and the nodes in flight keep their own states."""
    args, clock = context.args, context.clock
    started = clock.time()
    pause = max(0.2, args['poll'])
    tries = 0
    error = ''
    while True:
        tries += 1
        try:
            return context.read_fleet(list(args['order']) or list(ledger.state['nodes']), jobs=jobs), None
        except (GateError, _rollout.RolloutError, _slurm.SlurmParseError) as exc:
            error = to_native(exc)
        if args['scheduler'] == 'none':
            raise GateError(error)
        retry = _rollout.scheduler_retry(clock.time() - started, pause, args['scheduler_timeout'], SCHEDULER_BACKOFF_MAX)
        if retry is None or clock.parent() == 1:
            break
        sleep, pause = retry
        clock.sleep(sleep)
    why = 'the scheduler (%s) did not answer %d tries over %ds: %s' % (args['scheduler'], tries, round(clock.time() - started), error)
    with ledger.locked() as state:
        if state['status'] == 'running':
            ledger.set_status('paused', why, details={'rule': 'scheduler', 'rules': ['scheduler'], 'by': 'gate'})
    context.warn('%s: %s; the run is paused and %s stays pending' % (node, why, node))
    return None, why


def _waiting(backend, run_id, node, present, ttl, now):
    """Register (or remove) ``node`` in the gate's waiting list, kept through the backend (another controller of the run
    sees it): the nodes waiting now. Call under the run lock."""
    document = backend.read_doc(run_id, 'waiting') or {}
    data = _gate.waiting(document.get('nodes') or {}, node, present, now, ttl)
    if data != (document.get('nodes') or {}):
        backend.write_doc(run_id, 'waiting', {'nodes': data})
    return set(data)


def _arrived(backend, run_id, node):
    """Record that ``node`` reached the gate in this run, through the backend: every node that ever did. Call under the run
    lock."""
    document = backend.read_doc(run_id, 'arrived') or {}
    data, new = _gate.arrived(document.get('nodes'), node)
    if new:
        backend.write_doc(run_id, 'arrived', {'nodes': sorted(data)})
    return data


def _live(context, ledger):
    """The run's live members now (read only when a node in flight on another member asks)."""
    spec = context.args['ledger'] or {}
    return frozenset(_members.live(ledger.members(), context.clock.time(), _ledger.member_stale_seconds(spec), _ledger.socket.gethostname(),
                                   _ledger.process_alive))


def _decide(context, ledger, policy, scheduler, node, started, poll, docs=None, present=None):
    """One look at the gate under the run lock: the decision for ``node`` (in the plan's order when it is an admission),
    recorded. (decision, the state a crash caught the node in, the head when this look paused the run). ``docs``: where the
    gate's waiting and arrival lists are read and written (a pass's :class:`PassDocs`; else the ledger's backend);
    ``present``: the nodes whose workers wait at this controller's gate now (a job's group is admitted only when all of its
    nodes this controller runs are among them: a node admitted without a worker would hold its slot for nothing)."""
    args, clock = context.args, context.clock
    backend = docs or ledger.backend
    ttl = _gate.waiting_ttl(poll)
    scheduler_out = set(scheduler.unavailable)
    now = clock.utcnow()
    caught = ''
    pause_set = None
    me = args['member'] or None
    mine = context.task_vars.get('ansible_play_hosts_all')
    own = set(mine) if isinstance(mine, list) and mine else None
    peers = _gate.job_peers(scheduler, node)[0] if scheduler.job_aware else set()
    with ledger.locked(full=False) as state:
        # The gate's compact view: the nodes in flight, failed or early, this node, the unavailable ones and its job's peers.
        rollout = _rollout.rollout_view(ledger.gate_view(node, extra=scheduler_out | peers), context.breaker(state))
        holder = rollout.nodes[node].member
        if rollout.nodes[node].state in _gate.IN_FLIGHT and holder and holder != me:
            # In flight on another controller of the run: resumed here only once that one is dead.
            rollout = dataclasses.replace(rollout, live=_live(context, ledger))
        decision = _gate.admit(policy, rollout, scheduler, node, now, member=me)
        if decision.rule == 'resume' and me and holder == me:
            # Admitted by an earlier look of this controller; its worker has not taken that verdict yet: it stands.
            record = ledger.node(node)
            return (_gate.Decision(_gate.ADMIT, 'canary' if record.get('canary') else 'admit', record.get('reason') or 'admitted',
                                   canary=bool(record.get('canary'))), record.get('resumed_from') or '', None)
        if decision.action == _gate.ADMIT and decision.rule != 'resume':
            waiting = _waiting(backend, ledger.run_id, node, True, ttl, clock.time())
            arrived = _arrived(backend, ledger.run_id, node)
            forks = int(context.task_vars.get('ansible_forks') or 5)
            in_flight = sum(state['counts'].get(name, 0) for name in _ledger.IN_FLIGHT)
            # The queue holds a node back only for this controller's own hosts: another controller's node (waiting at its own
            # gate, or never to arrive here) is that controller's to admit, in the same plan's order.
            order = [name for name in args['order'] if name in own] if own else args['order']
            candidates = _gate.queue_candidates(node, order, waiting & own if own else waiting, arrived, in_flight, forks,
                                                clock.time() - started, poll)
            if candidates:
                for name in list(candidates) if scheduler.job_aware else ():
                    peers |= _gate.job_peers(scheduler, name)[0]
                rollout = _rollout.rollout_view(ledger.gate_view(node, extra=scheduler_out | candidates | peers), context.breaker(state))
            decision = _gate.in_line(policy, rollout, scheduler, node, args['order'], candidates, now, decision)
        if decision.action == _gate.ADMIT and decision.group:
            absent = [other for other in decision.group[1:] if (not own or other in own) and other not in (present or ())]
            if absent:
                # Its workers are not at the gate (host_pinned has not started them, forks are short, or they gave up): the
                # group waits for them; a group that never gathers waits for its job to end.
                decision = _gate.Decision(_gate.WAIT, 'job_group', 'job %s: its group goes when each of its nodes waits at the gate; '
                                          'not yet: %s' % (', '.join(decision.jobs), ', '.join(absent)))
        if decision.action == _gate.ADMIT:
            pause = state.get('pause') or {}
            if decision.rule != 'resume' and state['status'] == 'paused' and pause.get('by') == 'gate' and pause.get('rule') != 'scheduler':
                # The gate paused the run, and no pause rule holds any more (an operator retried or released the failed nodes):
                # the run is running again, whichever controller sees it first.
                ledger.set_status('running', 'no pause rule holds any more (was: %s)' % (pause.get('rule') or 'paused'))
            details = {'canary': True} if decision.canary else {}
            caught = ledger.node(node)['state'] if decision.rule == 'resume' else ''
            if me:
                details.update(member=me, resumed_from=caught)
            if decision.group:
                details.update(group=list(decision.group), jobs=list(decision.jobs))
            ledger.transition(node, 'admitted', decision.reason, details=details or None, resume=decision.rule == 'resume')
            _waiting(backend, ledger.run_id, node, False, ttl, clock.time())
            for other in decision.group[1:]:
                # A job's group goes together: its other nodes are admitted now, under the same lock (their workers, waiting at
                # the gate, take the admission at their next look). Only this controller's hosts: another controller admits its own.
                if own and other not in own:
                    continue
                ledger.transition(other, 'admitted', 'admitted with %s, its job\'s group (job %s)' % (node, ', '.join(decision.jobs)),
                                  details=dict({'member': me, 'resumed_from': ''} if me else {}, group=list(decision.group),
                                               jobs=list(decision.jobs)))
        elif decision.action == _gate.LEAVE:
            # Another actor holds the node: left alone from pending, no slot taken, no phase written.
            ledger.transition(node, 'left_alone', decision.reason, details={'held_by': scheduler.held.get(node), 'by': 'gate'})
            _waiting(backend, ledger.run_id, node, False, ttl, clock.time())
        elif decision.action in (_gate.SKIP, _gate.PAUSE):
            _waiting(backend, ledger.run_id, node, False, ttl, clock.time())
            if decision.action == _gate.PAUSE and state['status'] != 'paused':
                ledger.set_status('paused', decision.reason, details={'rule': decision.rule, 'rules': list(decision.rules or (decision.rule,)),
                                                                      'by': 'gate'})
                pause_set = state
        else:
            _waiting(backend, ledger.run_id, node, True, ttl, clock.time())
    return decision, caught, pause_set


# The gate's waits that hold every pending node alike (the node's own domain, GPUs or place in the plan play no part).
RUN_WAITS = ('maintenance_window', 'canary', 'window', 'budget_window')


class PassDocs:
    """The gate's waiting and arrival lists during one pass: each read once from the backend, changed in memory, written back
    once (:meth:`flush`, under the run lock)."""

    NAMES = ('waiting', 'arrived')

    def __init__(self, backend):
        self.backend = backend
        self.docs = {}
        self.dirty = set()

    def read_doc(self, run_id, name):
        if name not in self.NAMES:
            return self.backend.read_doc(run_id, name)
        if name not in self.docs:
            self.docs[name] = self.backend.read_doc(run_id, name)
        return copy.deepcopy(self.docs[name])

    def write_doc(self, run_id, name, doc):
        if name not in self.NAMES:
            self.backend.write_doc(run_id, name, doc)
            return
        self.docs[name] = copy.deepcopy(doc)
        self.dirty.add(name)

    def flush(self, run_id):
        for name in sorted(self.dirty):
            self.backend.write_doc(run_id, name, self.docs[name])
        self.dirty = set()


def look(context, ledger, policy, domains, waiting, poll):
    """One look at the gate for every node of ``waiting`` ({node: when it reached the gate}, this controller's), in the
    plan's order, under one run lock: {node: {decision, caught}} and the run's pause when this look paused it.

    One read of the ledger (its tail, the gate's view, the waiting and arrival lists once) and of the scheduler (the shared
    view) per look, whatever the number of nodes: with the shared view, one look per poll serves every worker of the
    controller (:func:`admit`)."""
    ledger.catch_up()
    state = ledger.head      # run-level fields only: a look never reads every node's record
    verdicts = {}
    if state['status'] == 'paused' and (state.get('pause') or {}).get('rule') == 'scheduler':
        decision = _gate.Decision('pending', 'scheduler', 'the run is paused: %s' % state['pause'].get('reason'))
        return {node: {'decision': decision.to_dict(), 'caught': '', 'arrived': waiting[node]} for node in waiting}
    first = min(waiting, key=lambda name: waiting[name])
    fleet, why = _fleet_or_stop(context, ledger, first, jobs=policy.job_aware)
    if fleet is None:
        decision = _gate.Decision('pending', 'scheduler', why)
        return {node: {'decision': decision.to_dict(), 'caught': '', 'arrived': waiting[node]} for node in waiting}
    if domains is None:
        # The domains of the nodes the scheduler lists as unavailable (the rollout's own nodes carry theirs in the ledger).
        domains = {name: context.hostvar(name, policy.domain_var) for name in fleet.unavailable} if policy.domain_var else {}
    scheduler = fleet.view(domains, job_aware=policy.job_aware)
    rank = {name: index for index, name in enumerate(context.args['order'])}
    docs = PassDocs(ledger.backend)
    paused = None
    same = None
    ttl = _gate.waiting_ttl(poll)
    with ledger.locked(full=False):
        for node in sorted(waiting, key=lambda name: (rank.get(name, len(rank)), name)):
            record = ledger.node(node)
            if same is not None and record is not None and record['state'] == _gate.PENDING and node not in scheduler.held:
                # A rule that holds for every pending node (the window or the budget's window full, the maintenance window, the
                # canary, a pause) held the node before: it holds this one too, nothing else to decide.
                _waiting(docs, ledger.run_id, node, same.action == _gate.WAIT, ttl, context.clock.time())
                verdicts[node] = {'decision': same.to_dict(), 'caught': '', 'arrived': waiting[node]}
                continue
            decision, caught, pause_set = _decide(context, ledger, policy, scheduler, node, waiting[node], poll, docs=docs,
                                                  present=set(waiting))
            verdicts[node] = {'decision': decision.to_dict(), 'caught': caught, 'arrived': waiting[node]}
            if pause_set is not None:
                paused = (decision, pause_set)
            if record is not None and record['state'] == _gate.PENDING and (
                    decision.action == _gate.PAUSE or (decision.action == _gate.WAIT and decision.rule in RUN_WAITS)):
                same = decision
        docs.flush(ledger.run_id)
    behind = [node for node in sorted(waiting, key=lambda name: (rank.get(name, len(rank)), name)) if verdicts[node]['decision']['action'] == _gate.WAIT]
    for place, node in enumerate(behind):
        verdicts[node]['rank'] = place
    if paused is not None:
        context.escalate(policy.escalation, _rollout.escalation_payload(ledger.run_id, paused[0].to_dict(), paused[1]))
    return verdicts


def _decision(data):
    until = data.get('until')
    return _gate.Decision(data['action'], data['rule'], data['reason'], canary=bool(data.get('canary')),
                          until=datetime.datetime.fromisoformat(until) if until else None, rules=tuple(data.get('rules') or ()))


class SharedGate:
    """The gate shared by the workers of one controller: each registers its node in the controller's waiting room (a local
    file) and takes its verdict from the controller's last look (:func:`look`), made by one of them per poll interval."""

    def __init__(self, context, ledger, poll):
        self.context, self.ledger, self.poll = context, ledger, poll
        pid = self.parent = context.clock.parent()
        start = _ledger.process_start(pid)
        what = {'run_id': ledger.run_id, 'ledger': {key: value for key, value in (context.args['ledger'] or {}).items() if key != 'results_dir'}}
        self.room = _shared_view.view_key(pid, start, 'gate-waiting', what)
        self.look_key = _shared_view.view_key(pid, start, 'gate', what)
        self.folder = getattr(context, 'shared_folder', None)

    def _kept(self, room, now):
        """The room's entries whose worker still waits: {node: [last poll, arrival, until]} with ``until`` not passed."""
        def usable(entry):
            return isinstance(entry, list) and len(entry) == 3 and all(isinstance(item, (int, float)) and not isinstance(item, bool)
                                                                       for item in entry)
        return {name: entry for name, entry in room.items() if usable(entry) and now <= entry[2]}

    def enter(self, node, started, present=True, sleep=None):
        """Register (or remove) ``node`` in the waiting room until its worker's next poll (``sleep`` seconds, the poll by
        default) plus the gate's waiting time: entries past theirs are dropped (their worker is gone)."""
        now = self.context.clock.time()
        until = now + (sleep or self.poll) + _gate.waiting_ttl(self.poll)

        def change(room):
            kept = self._kept(room, now)
            if present:
                kept[node] = [now, started, until]
            else:
                kept.pop(node, None)
            return kept
        return _shared_view.update(self.room, change, folder=self.folder)

    def verdict(self, node, policy, domains, started=None):
        """This node's verdict from the controller's last look (one look per poll for every worker), or None: also when that
        look saw another visit of the node at the gate (``started``: when this one arrived; a retried node comes again)."""
        def reader():
            if self.context.clock.parent() != self.parent:
                raise GateError('ansible-playbook (pid %d) is gone; no look at the gate for its nodes' % self.parent)
            room = self._kept(_shared_view.update(self.room, lambda room: room, folder=self.folder), self.context.clock.time())
            waiting = {name: entry[1] for name, entry in room.items()}
            return look(self.context, self.ledger, policy, domains, waiting, self.poll) if waiting else {}
        verdicts = _shared_view.fetch(self.look_key, self.poll, reader, folder=self.folder, clock=self.context.clock.time)
        verdict = (verdicts or {}).get(node)
        if verdict is not None and started is not None and verdict.get('arrived') != started:
            return None
        return verdict


# A worker whose node waits behind others at the gate (its place among the controller's waiting nodes, ``rank``, a window
# or more back) looks every (1 + rank // window) poll intervals, at most this many: a node deep in the queue cannot be
# admitted before the nodes ahead of it are, and with several controllers hundreds of workers wait at once.
GATE_BACKOFF_MAX = 4


def _admitted(ledger, node, member):
    """Whether the ledger shows ``node`` admitted (by ``member`` when given): a shared look's admit verdict is taken only then."""
    ledger.catch_up()
    record = ledger.node(node) or {}
    return record.get('state') == 'admitted' and (not member or record.get('member') in (None, member))


def backoff(poll, rank, window):
    """Seconds until a waiting worker's next look: the poll interval, times ``1 + rank // window`` up to :data:`GATE_BACKOFF_MAX`."""
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        return poll
    return poll * min(GATE_BACKOFF_MAX, 1 + rank // max(1, window))


def orphaned(parent, member, node):
    """Fail when this worker's ansible-playbook is gone before the gate even starts: its parent is init (ansible-core's
    workers run in a session of their own, so a kill of the controller's process group leaves them orphaned), or not the
    controller the run knows (the pid in I(member))."""
    pid = (member or '').rsplit(':', 1)[-1] if member else ''
    if parent == 1 or (pid.isdigit() and int(pid) != parent):
        raise GateError('ansible-playbook%s is gone (this worker\'s parent is pid %d); %s stays pending'
                        % (' (pid %s)' % pid if pid.isdigit() else '', parent, node))


def admit(context):
    """Wait at the gate until the node is admitted (or skipped, the run paused, I(admit_timeout) spent, the scheduler gone).

    With the shared view (the default of a real run) the workers of this controller wait in one waiting room and one of
    them looks at the gate for all of them per poll interval (:class:`SharedGate`); else (a unit test's injected
    scheduler) each looks for its own node."""
    args, clock, node = context.args, context.clock, context.host
    spec = args['ledger']
    ledger = context.ledger(spec)
    results_dir = context.results_dir(spec)
    poll = max(0.2, args['poll'])
    started = clock.time()
    parent = clock.parent()
    orphaned(parent, args['member'], node)
    policy = _policy.load_policy(ledger.head['policy'])      # a run keeps the policy it started with
    window = policy.window_size(ledger.head['total'])
    sleep = poll
    shared = SharedGate(context, ledger, poll) if getattr(context, 'shared', False) else None
    caught = ''
    try:
        if shared is not None:
            shared.enter(node, started)
    except _shared_view.ViewError as exc:
        context.warn('the gate\'s shared waiting room is not used (%s); %s looks at the gate for itself' % (to_native(exc), node))
        shared = None
    while True:
        if clock.parent() != parent:
            # ansible-playbook is gone (killed): an orphaned worker must not admit anyone.
            if shared is not None:
                shared.enter(node, started, present=False)
            raise GateError('ansible-playbook (pid %d) is gone; %s stays pending' % (parent, node))
        if shared is not None:
            shared.enter(node, started, sleep=sleep)
            verdict = shared.verdict(node, policy, None, started)
            if verdict is not None and verdict['decision']['action'] == _gate.ADMIT and not _admitted(ledger, node, args['member']):
                verdict = None      # a look's admission the ledger does not show (an earlier visit's): wait for the next look
        else:
            verdict = look(context, ledger, policy, None, {node: started}, poll).get(node)
        decision = _decision(verdict['decision']) if verdict else _gate.Decision(_gate.WAIT, 'queue', 'waiting for the next look at the gate')
        waited = round(clock.time() - started, 1)
        if decision.action == _gate.WAIT and args['admit_timeout'] and waited >= args['admit_timeout']:
            if shared is not None:
                # Leave the room first, then take the look that may have admitted this node meanwhile (never lose an admission).
                shared.enter(node, started, present=False)
                verdict = shared.verdict(node, policy, None, started)
                if verdict and verdict['decision']['action'] != _gate.WAIT:
                    decision = _decision(verdict['decision'])
            if decision.action == _gate.WAIT:
                decision = _gate.Decision('pending', decision.rule, 'waited %ss at the gate (admit_timeout): %s' % (waited, decision.reason))
                break
        if decision.action != _gate.WAIT:
            caught = (verdict or {}).get('caught') or ''
            break
        sleep = backoff(poll, (verdict or {}).get('rank'), window) if shared is not None else poll
        if decision.until is not None:
            sleep = max(0.2, min(poll, decision.until.timestamp() - clock.time()))
        clock.sleep(sleep)
    if shared is not None:
        shared.enter(node, started, present=False)
    verdict = decision.action
    context.result.update(changed=verdict == _gate.ADMIT, verdict=verdict, admitted=verdict == _gate.ADMIT, rule=decision.rule,
                          reason=decision.reason, canary=decision.canary, waited=waited,
                          msg='%s: %s (%s): %s' % (node, verdict, decision.rule, decision.reason))
    if verdict == _gate.ADMIT:
        context.result['caught'] = caught
        handed = dict(spec, results_dir=results_dir)
        if args['member']:
            handed['member'] = args['member']      # the controller that admitted it: its phases are this controller's to write
        context.result['ansible_facts'] = {'gpufleet_ledger': handed}


# ---------------------------------------------------------------------------------------------- settle

def settle(context):
    """After the role: the node's final state in the ledger (a safety net: upgrade_phase records it when the role has a ledger),
    then a retry (gpufleet_retries) of a node the procedure put back as it was, and the escalation of a quarantine."""
    args, node = context.args, context.host
    ledger = context.ledger(args['ledger'])
    policy = _policy.load_policy(ledger.head['policy'])
    given = args['result'] or {}
    target = given.get('state')
    recorded = []
    retry = False
    with ledger.locked(full=False):
        record = ledger.node(node)      # this node's record only, not the run's every node
        if record is None:
            raise GateError('%s is not a node of run %s' % (node, ledger.run_id))
        holder = _phase.taken_over(record, args['member'])
        if holder:
            raise GateError('%s was taken over by controller %s (this controller, %s, was counted dead): its result is that '
                            'controller\'s to record' % (node, holder, args['member']))
        current = record['state']
        if current not in _gate.FINAL:
            # The safety net when node_upgrade could not record its final event (the ledger did not take it): the same rule
            # and the same details as upgrade_phase, written once.
            target, reason = _phase.final_state(target, given.get('reason') if target else None)
            details = _phase.final_details(given, node, given.get('facts_before'), given.get('facts_after'))
            steps = _rollout.walk(current, target)
            if not steps:
                # No legal way from where the node is to the result (left alone after its drain): never left in flight.
                reason = 'quarantined: %s could not be recorded from %s (%s)' % (target, current, reason or 'no reason given')
                target = 'quarantined'
                steps = _rollout.walk(current, target)
            for step in steps:
                ledger.transition(node, step, reason if step == target else 'recorded by the gate after node_upgrade',
                                  details=details if step == target else None)
                recorded.append(step)
        record = ledger.node(node)
        final = record['state']
        retry, why = _rollout.retry_decision(policy, record)
        if retry:
            ledger.transition(node, _gate.PENDING, why, details={'retries': int(record.get('retries') or 0) + 1}, gate=True)
            recorded.append(_gate.PENDING)
        payload = _rollout.quarantine_payload(ledger.run_id, node, dict(ledger.head, nodes={node: record})) if final == 'quarantined' else None
    if payload is not None:
        context.escalate(policy.escalation, payload)
    # Out of the queue (final, not sent back for a retry): its "going soon" mark goes.
    unmarked = context.soft_undo(ledger, [node]) if not retry else {}
    context.result.update(changed=bool(recorded), recorded=recorded, state=final, retry=retry, soft_unmarked=unmarked,
                          msg='%s: %s%s' % (node, final, ('; %s' % why) if retry else ''))
