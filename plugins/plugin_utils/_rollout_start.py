# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout gate's steps before the nodes, on localhost: ``check`` (the policy), ``plan`` (the dry run) and ``start``
(start, resume or join a run).

Each step is a function of a :class:`._run_context.RunContext`.  The start reads the earlier runs in the backend once
(:func:`read_earlier`): their states give the plan's durations, the previous pin and the circuit breaker's memory.

Several controllers run one rollout when they start it with the same run id (``gpufleet_run_id``; an AWX job's slices
share ``awx-<awx_workflow_job_id>``): the first creates the run for every node of its inventory's ``gpufleet_hosts``, the
others join it (their nodes added), each a member of the run (:mod:`._members`) whose keeper process keeps its heartbeat
in the ledger.  The fleet lock belongs to the run: a second, different rollout is refused while the run has a live member.
"""

from __future__ import annotations

import dataclasses
import json
import os

from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _members
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _planner
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _policy
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._run_context import GateError


def check(context):
    """The policy validated (and every node's domain variable), nothing else: a bad value fails before any node is read."""
    policy = context.policy()
    context.domains(policy, list(dict.fromkeys(context.args['nodes'])))
    context.result.update(changed=False, policy=policy.to_dict(), msg='policy: %s' % json.dumps(policy.to_dict(), sort_keys=True))


def plan(context):
    """The dry run: the order, each node's start and end, what blocks it now and the predicted duration (phase times from the
    last I(history) runs' events); changes nothing."""
    args = context.args
    nodes = list(dict.fromkeys(args['nodes']))
    policy = context.policy()
    domains = context.domains(policy, nodes)
    scheduler = context.fleet_or_empty(nodes, jobs=True)
    histories = []
    spec = context.ledger_spec() if args['run_dir'] else {}
    if spec and (spec['backend'] != 'file' or os.path.isdir(args['run_dir'])):
        backend = context.backend(spec)
        try:
            earlier = backend.run_ids()[-max(0, args['history']):] if args['history'] else []
        except _ledger.LedgerError as exc:
            context.warn(to_native(exc))
            earlier = []
        for run_id in earlier:
            try:
                events, _offset = backend.read_events(run_id, 0)
            except _ledger.LedgerError as exc:
                context.warn(to_native(exc))
                continue
            histories.append(_ledger.phase_times(events))
    estimates, samples = _planner.phase_estimates(histories)
    planned = _planner.plan(policy, _rollout.plan_nodes(nodes, scheduler, domains), scheduler.view(domains), context.clock.utcnow(),
                            estimates=estimates, converge=bool(args['pin']))
    planned['phase_samples'] = samples
    lines = _rollout.plan_lines(planned)
    context.result.update(changed=False, plan=planned, lines=lines, msg=lines[-1])


@dataclasses.dataclass
class Earlier:
    """What a start knows of the earlier runs: ``states`` of the last I(history) runs (oldest first: the nodes' durations,
    the previous pin) and the circuit breaker's memory (``breaker``, :func:`._rollout.breaker_history`)."""

    states: list
    breaker: dict


def read_earlier(context, backend, run_ids, run_id, policy):
    """The earlier runs (``run_ids``: the backend's listing, ``run_id`` left out), each read once.

    The last I(history) runs give :attr:`Earlier.states`; with a circuit breaker every other run feeds its memory (within
    ``policy``'s window). A run that cannot be read is a warning.
    """
    history = context.args['history']
    others = [name for name in run_ids if name != run_id]
    recent = others[-max(0, history):] if history else []
    breaker = policy.circuit_breaker_threshold is not None
    states = {}
    unread = {}
    for name in (others if breaker else recent):
        try:
            states[name] = _ledger.RunLedger.open(backend, name).state      # state.json lags mid-run: the reader's rule
        except (_ledger.LedgerError, OSError, ValueError) as exc:
            unread[name] = to_native(exc)
    for name in recent:
        if name in unread:
            context.warn(unread[name])
    memory = {'quarantines': [], 'reset': None}
    if breaker:
        for name in others:
            if name in unread:
                context.warn('circuit breaker: run %s cannot be read: %s' % (name, unread[name]))
        memory = _rollout.breaker_history([states[name] for name in others if name in states], context.clock.time(),
                                          policy.circuit_breaker_window)
    return Earlier([states[name] for name in recent if name in states], memory)


def live_others(context, ledger, spec, me):
    """The live members of the run other than ``me`` (the controllers running it with this one)."""
    living = _members.live(ledger.members(), context.clock.time(), _ledger.member_stale_seconds(spec), _ledger.socket.gethostname(),
                           _ledger.process_alive)
    return sorted(living - {me})


def _resume(context, backend, run_id, inventory, infos, policy, spec, me):
    """Resume or join run ``run_id``: refused (nothing written) for another pin, playbook or mode; the new nodes added, the
    run running again (unless another live controller runs it: its pause stands), in batch mode the nodes a crash caught in
    flight admitted again. (ledger, its policy, caught, the other live members)."""
    args = context.args
    ledger = _ledger.RunLedger.open(backend, run_id)
    state = ledger.state
    others = live_others(context, ledger, spec, me)
    if others and args['mode'] == 'batch':
        raise GateError(batch_refusal(run_id, others))
    # The run's pin and mode are the ones it recorded: another one refuses the resume before anything is written.
    _rollout.resume_pin(run_id, state.get('pin'), args['pin'], args['pin_source'])
    refusal = _rollout.resume_refusal(run_id, state, args['kind'], args['mode'])
    if refusal:
        raise GateError(refusal)
    if state.get('inventory') not in (None, inventory):
        context.warn('run %s was started from inventory %s' % (run_id, state.get('inventory')))
    ledger.add_nodes({node: info for node, info in infos.items() if node not in state['nodes']})
    if _rollout.reopens(state) and not others:
        ledger.set_status('running', 'resumed')
    caught = {}
    if args['mode'] == 'batch':
        # No gate re-admits a node a crash caught in flight: the start does, and its procedure starts again.
        for name, record in sorted(state['nodes'].items()):
            if record['state'] in _gate.IN_FLIGHT:
                caught[name] = record['state']
                ledger.transition(name, 'admitted', '%s was caught %s by a crash: the batch runs its procedure again'
                                  % (name, record['state']), resume=True)
    if _policy.load_policy(state['policy']) != policy:
        context.warn('run %s keeps the policy it started with (state.json policy); start a new run to change it' % run_id)
    return ledger, _policy.load_policy(state['policy']), caught, others


def batch_refusal(run_id, others):
    return ('run %s is running on controller(s) %s: several controllers share a run in window mode only (set gpufleet_window; batch '
            'mode has no gate to hold one budget)' % (run_id, ', '.join(others)))


def _hold_batch(context, ledger, state, policy, breaker):
    """Batch mode: no gate stands before a batch, so the run-level rules are checked here, before any node of the first batch
    is touched (an operator's pause, a tripped circuit breaker, a pin suspect, a spent budget)."""
    held = _gate.pause_decision(policy, _rollout.rollout_view(_ledger.node_view(state), breaker), context.clock.utcnow())
    if held is not None:
        if state['status'] != 'paused':
            ledger.set_status('paused', held.reason, details={'rule': held.rule, 'rules': list(held.rules or (held.rule,)), 'by': 'gate'})
        raise GateError('rollout paused (%s): %s; no batch starts' % (held.rule, held.reason))


@dataclasses.dataclass
class Opened:
    """The run a start opened: its ledger and policy, the scheduler's answer, the earlier runs, the nodes a crash caught
    (batch mode), whether it was resumed or joined (``resume``) and the other live controllers (``others``)."""

    ledger: object
    policy: object
    scheduler: object
    earlier: Earlier
    caught: dict
    resume: bool
    others: list


def _create(context, backend, run_id, inventory, infos, policy, scheduler, earlier):
    """A new run's ledger: one record per run (the pin, the previous pin, the policy, the mode, the order and the circuit
    breaker's memory of earlier runs, all in the ledger's first event); None when another controller created it first."""
    args = context.args
    order = _rollout.plan_order(infos, {node: info['domain'] for node, info in infos.items()}, scheduler, earlier.states)
    try:
        return _ledger.RunLedger.create(backend, run_id, inventory=inventory, policy=policy.to_dict(), pin=args['pin'], nodes=infos,
                                        mode=args['mode'], kind=args['kind'] or None,
                                        previous_pin=_rollout.previous_pin(earlier.states, inventory), order=order,
                                        breaker_history=earlier.breaker)
    except _ledger.LedgerError:
        if args['run_id'] and backend.exists(run_id):
            return None     # another controller of the same run id was first: join it
        raise


def _open_run(context, backend, run_ids, run_id, resume, inventory, nodes, policy, domains, spec, me):
    """The run's ledger, started, resumed or joined, under the fleet lock (:class:`Opened`)."""
    args = context.args
    scheduler = context.fleet_or_empty(nodes, jobs=True)
    infos = {node: {'domain': domains[node], 'gpus': scheduler.gpus.get(node, 0)} for node in nodes}
    caught, others = {}, []
    ledger = None
    if not resume:
        earlier = read_earlier(context, backend, run_ids, run_id, policy)
        ledger = _create(context, backend, run_id, inventory, infos, policy, scheduler, earlier)
        resume = ledger is None
    if resume:
        ledger, policy, caught, others = _resume(context, backend, run_id, inventory, infos, policy, spec, me)
        earlier = read_earlier(context, backend, run_ids, run_id, policy)
    if args['mode'] == 'batch':
        _hold_batch(context, ledger, ledger.state, policy, earlier.breaker)
    return Opened(ledger, policy, scheduler, earlier, caught, resume, others)


def start(context):
    """Start a run (or resume the given or the last unfinished one of this inventory) under the fleet lock; the hosts to go."""
    args = context.args
    nodes = list(dict.fromkeys(args['nodes']))
    if not nodes:
        raise GateError('nodes: the rollout has no nodes (check gpufleet_hosts)')
    policy = context.policy()
    domains = context.domains(policy, nodes)
    if not args['run_dir']:
        raise GateError('run_dir: gpufleet_run_dir must be a folder on the controller')
    spec = context.ledger_spec()
    backend = context.backend(spec)
    inventory = context.inventory()
    fleet = args['fleet'] or _rollout.fleet_name(inventory)
    if args['run_id']:
        _ledger.check_run_id(args['run_id'])
    run_ids = backend.run_ids()
    run_id, resume = _rollout.choose_run(args['run_id'], run_ids, None if args['run_id'] else _ledger.last_unfinished(backend, inventory))
    run_id = run_id or _ledger.new_run_id(context.clock.utcnow())
    holder = _ledger.holder_identity(run_id, pid=context.clock.parent())
    stale_seconds = _ledger.member_stale_seconds(spec)

    def alive(current):
        return _ledger.run_alive(backend, current['run_id'], stale_seconds, holder['host'])
    if resume and not args['run_id']:
        # The last unfinished run, found by itself, is resumed, never joined: only a run id given joins a run that another
        # controller runs now (a second ansible-playbook started by mistake is refused, as before).
        current = backend.holder(fleet)
        if current and current.get('run_id') == run_id and not _ledger.lock_stale(current, holder['host'], alive):
            raise _ledger.LockHeld(fleet, current, '%s; to run it from several controllers start each with -e gpufleet_run_id=%s'
                                   % (backend.lock_location(fleet), run_id))
    stale = backend.acquire(fleet, holder, alive=alive)
    if stale:
        context.warn('took over the fleet lock of run %s (host %s, pid %s is gone, no live controller)'
                     % (stale.get('run_id'), stale.get('host'), stale.get('pid')))
    job = context.var('awx_job_id')
    me = _members.member_id(holder['host'], holder['pid'], job=job)
    try:
        opened = _open_run(context, backend, run_ids, run_id, resume, inventory, nodes, policy, domains, spec, me)
        ledger, policy, scheduler, earlier = opened.ledger, opened.policy, opened.scheduler, opened.earlier
        caught, resume = opened.caught, opened.resume
        ledger.join(me, _members.record(holder, context.clock.time(), hosts=len(nodes), job=job))
        if args['mode'] == 'batch' and live_others(context, ledger, spec, me):
            # Two batch-mode controllers that started at once both see the other once joined: both leave, fail closed.
            ledger.leave(me, context.clock.time())
            raise GateError(batch_refusal(run_id, live_others(context, ledger, spec, me)))
        context.keep(spec, run_id, fleet, holder, me)
        state = ledger.state
    except BaseException:
        if not opened_by_others(context, backend, run_id, spec, me):
            backend.release(fleet, run_id)
        raise
    all_nodes = list(state['nodes'])
    ordered = _rollout.plan_order(all_nodes, {name: record.get('domain') for name, record in state['nodes'].items()}, scheduler, earlier.states)
    # A resumed run's done nodes are confirmed with a quick check before they are skipped: they go first (a few seconds each,
    # nothing cordoned); one that fails it goes back to pending and on through the gate.
    confirm = _rollout.confirm_expectations(state) if resume and args['mode'] == 'window' else {}
    if args['mode'] == 'batch':
        # Batch mode keeps what users know of serial: the inventory's order; a resume takes the nodes not final yet.
        hosts = [name for name in nodes + [name for name in all_nodes if name not in nodes] if state['nodes'][name]['state'] not in _gate.FINAL]
    else:
        hosts = [name for name in ordered if name in confirm] + [name for name in ordered if state['nodes'][name]['state'] not in _gate.FINAL]
    # This controller runs the nodes of its own inventory (an AWX slice knows only its own; a --limit shard's play runs its
    # limit of them): the run's other nodes are the other controllers'.
    mine = set(nodes)
    hosts = [name for name in hosts if name in mine]
    others = opened.others
    breaker = earlier.breaker
    window = policy.window_size(len(all_nodes))
    cap = policy.budget_cap(len(all_nodes), sum(1 for record in state['nodes'].values() if record['state'] in _gate.FAILED))
    shown = 'window %d' % window
    if cap is not None and cap < window:
        shown += ' (the failure budget lets %d fly at a time now: gpufleet_budget_window)' % cap
    forks = context.var('ansible_forks')
    if args['mode'] == 'window' and isinstance(forks, int) and forks < min(window, cap or window) + 1:
        context.warn('forks is %d: host_pinned runs at most that many hosts; the window is %d, set forks to at least %d'
                     % (forks, min(window, cap or window), min(window, cap or window) + 1))
    if args['mode'] == 'window' and policy.job_aware:
        for line in _rollout.group_warnings(scheduler.jobs, set(all_nodes), min(window, cap or window)):
            context.warn(line)
    # The soft pre-drain: a resumed run first takes back the marks of nodes no longer pending (a crash left them); then this
    # controller's pending nodes that no other actor holds get theirs.
    if resume:
        context.soft_undo(ledger, [name for name, record in state['nodes'].items() if record['state'] != _gate.PENDING])
    marked = []
    if policy.predrain:
        held = scheduler.held()
        marked = context.soft_mark(ledger, [name for name in hosts if state['nodes'][name]['state'] == _gate.PENDING and name not in held], me)
    how = ('joined (with %s)' % ', '.join(others)) if others else ('resumed' if resume else 'started')
    context.result.update(
        changed=not resume, run_id=run_id, resumed=resume, fleet=fleet, order=ordered, hosts=hosts, confirm=confirm, breaker=breaker,
        window=window, ledger_dir=backend.path(run_id), caught=caught, mode=args['mode'], member=me, members=others, soft_marked=marked,
        msg='%s %s-mode run %s as controller %s: %d node(s), %d of them here to go, %d done to confirm, %s; %d quarantine(s) of earlier '
            'runs count for the circuit breaker' % (how, args['mode'], run_id, me, len(all_nodes), len(hosts) - len(confirm), len(confirm),
                                                    shown if args['mode'] == 'window' else 'in batches (serial)',
                                                    len(breaker['quarantines'])))
    context.result['ansible_facts'] = {'gpufleet_rollout': {
        'run_id': run_id, 'run_dir': backend.run_dir, 'fleet': fleet, 'ledger': dict(spec, run_id=run_id), 'order': ordered, 'hosts': hosts,
        'resumed': resume, 'window': window, 'results_dir': args['results_dir'] or os.path.join(backend.path(run_id), 'results'),
        'policy': policy.to_dict(), 'confirm': confirm, 'breaker': breaker, 'pin': state.get('pin') or {}, 'mode': args['mode'],
        'caught': caught, 'member': me}}


def opened_by_others(context, backend, run_id, spec, me):
    """Whether run ``run_id`` has a live controller other than ``me`` (then a failed join leaves its fleet lock alone)."""
    try:
        return bool(backend.exists(run_id) and live_others(context, _ledger.RunLedger(backend, run_id), spec, me))
    except (_ledger.LedgerError, OSError, ValueError):
        return False
