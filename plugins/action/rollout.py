# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of gpufleet.lifecycle.rollout, the rollout gate (documentation in plugins/modules/rollout.py).

I/O only: the scheduler's commands, the ledger's files, sleeping at the gate, the escalation hook. Every decision is in
plugin_utils (_policy, _gate, _ledger, _planner, _rollout).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.urls import open_url
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _slurm
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _phase
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _planner
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _policy
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout

STEPS = ('check', 'start', 'confirm', 'admit', 'settle', 'summary', 'finish', 'plan', 'control')
MODES = ('window', 'batch')
VERBS = ('pause', 'resume', 'skip', 'retry', 'release', 'released', 'reset_breaker')
ARGUMENT_SPEC = dict(
    step=dict(type='str', required=True, choices=list(STEPS)),
    mode=dict(type='str', default='window', choices=list(MODES)),
    kind=dict(type='str', default=''),
    fail_states=dict(type='list', elements='str', default=['rolled_back', 'quarantined']),
    failed_before=dict(type='int', default=0),
    batch=dict(type='list', elements='str', default=[]),
    max_fail_percentage=dict(type='float'),
    nodes=dict(type='list', elements='str', default=[]),
    run_dir=dict(type='path'),
    run_id=dict(type='str', default=''),
    ledger=dict(type='dict', default={}),
    fleet=dict(type='str', default=''),
    pin=dict(type='dict', default={}),
    pin_source=dict(type='str', default='gpufleet_pin_file'),
    policy=dict(type='dict'),
    scheduler=dict(type='str', default='none', choices=list(_rollout.SCHEDULERS)),
    slurm_environment=dict(type='dict', default={}),
    kubeconfig=dict(type='str', default=''),
    results_dir=dict(type='path', default=''),
    order=dict(type='list', elements='str', default=[]),
    poll=dict(type='float', default=5.0),
    admit_timeout=dict(type='float', default=0.0),
    scheduler_timeout=dict(type='float', default=300.0),
    result=dict(type='dict', default={}),
    verb=dict(type='str', choices=list(VERBS)),
    passed=dict(type='bool', default=False),
    reason=dict(type='str', default=''),
    history=dict(type='int', default=20),
    breaker=dict(type='dict', default={}),
    validation=dict(type='dict', default={}),
    unreachable=dict(type='bool', default=False),
)
COMMAND_TIMEOUT = 60
# The variables the check and start steps validate first (_rollout.check_inputs).
INPUT_VARIABLES = tuple(name for name, _choices in _rollout.INPUTS) + _ledger.SPEC_VARIABLES
# A host host_pinned is starting (never at the gate yet, a worker free) keeps its place in the plan for this many poll
# intervals (plus 3 s) of another host's wait.
ARRIVAL_GRACE_POLLS = 2
# A host counts as waiting at the gate while it polled within this many poll intervals.
WAITING_POLLS = 3
# The gate asks a scheduler that does not answer again after the poll interval, doubled each time up to this (seconds).
SCHEDULER_BACKOFF_MAX = 30.0


class GateError(Exception):
    """A failure of the gate that ends the task with this message."""


def _environment(extra):
    environment = dict(os.environ)
    environment.update({str(key): str(value) for key, value in (extra or {}).items()})
    environment.update(LC_ALL='C', LANG='C')
    return environment


def _run(argv, environment):
    try:
        process = subprocess.run(argv, env=environment, capture_output=True, text=True, check=False, timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GateError('%s: %s' % (' '.join(argv), exc)) from None
    if process.returncode != 0:
        raise GateError('%s exited %d: %s' % (' '.join(argv), process.returncode, _slurm.escape_controls(process.stderr.strip())[:500]))
    return process.stdout


class ActionModule(ActionBase):
    """The rollout gate: start a run, admit a node, settle it, finish the run, plan, operator verbs."""

    TRANSFERS_FILES = False
    _requires_connection = False

    # ---------------------------------------------------------------------------------------------- helpers
    def _var(self, task_vars, name, default=None):
        if name not in task_vars:
            return default
        return self._templar.template(task_vars[name])

    def _policy_vars(self, args, task_vars):
        if args['policy'] is not None:
            return dict(args['policy'])
        return {name: self._var(task_vars, name) for name in _policy.VARIABLES if name in task_vars}

    def _hostvar(self, task_vars, node, name):
        hostvars = task_vars.get('hostvars') or {}
        try:
            return self._templar.template(hostvars[node].get(name)) if node in hostvars else None
        except Exception:  # pylint: disable=broad-except
            return None

    def _domains(self, task_vars, policy, nodes):
        return _policy.node_domains({node: {policy.domain_var: self._hostvar(task_vars, node, policy.domain_var)} if policy.domain_var else {}
                                     for node in nodes}, policy.domain_var)

    def _read_fleet(self, args, task_vars, nodes, jobs=False):
        """The scheduler's answer now (:class:`_rollout.Fleet`), read on the controller."""
        scheduler = args['scheduler']
        if scheduler == 'slurm':
            environment = _environment(args['slurm_environment'])
            fleet = _rollout.slurm_view(_run(['scontrol', 'show', 'node', '-o'], environment))
            if jobs:
                fleet.jobs = _rollout.slurm_jobs(_run(['squeue', '--noheader', '--states=RUNNING', '--format=%i|%N|%e|%k'], environment))
            return fleet
        if scheduler in ('kubernetes', 'runai'):
            try:
                from kubernetes import client as kube_client  # pylint: disable=import-outside-toplevel
                from kubernetes import config as kube_config  # pylint: disable=import-outside-toplevel
            except ImportError:
                raise GateError('the kubernetes Python library is needed to read the nodes (pip install kubernetes)') from None
            try:
                api = kube_config.new_client_from_config(config_file=args['kubeconfig'] or None)
                listing = kube_client.CoreV1Api(api).list_node()
                return _rollout.kube_view(api.sanitize_for_serialization(listing))
            except Exception as exc:  # pylint: disable=broad-except
                raise GateError('reading the Kubernetes nodes: %s' % to_native(exc)) from None
        return _rollout.static_view({node: self._hostvar(task_vars, node, 'gpufleet_gpus') for node in nodes})

    def _fleet_or_empty(self, args, task_vars, nodes, result, jobs=False):
        try:
            return self._read_fleet(args, task_vars, nodes, jobs=jobs)
        except (GateError, _rollout.RolloutError, _slurm.SlurmParseError) as exc:
            result.setdefault('warnings', []).append('the scheduler could not be read (%s); a capacity floor waits until it can' % exc)
            return _rollout.Fleet({}, ())

    def _fleet_or_stop(self, args, task_vars, ledger, node, result):
        """The scheduler's answer for the gate, asked again with a doubling pause while it does not answer (slurmctld or the
        Kubernetes API gone); after ``scheduler_timeout`` seconds the run is paused (rule ``scheduler``) and (None, why)
        returned: no node is admitted while the scheduler cannot be read, and the nodes in flight keep their own states."""
        started = time.time()
        pause = max(0.2, args['poll'])
        tries = 0
        error = ''
        while True:
            tries += 1
            try:
                return self._read_fleet(args, task_vars, list(args['order']) or list(ledger.state['nodes'])), None
            except (GateError, _rollout.RolloutError, _slurm.SlurmParseError) as exc:
                error = to_native(exc)
            if args['scheduler'] == 'none':
                raise GateError(error)
            retry = _rollout.scheduler_retry(time.time() - started, pause, args['scheduler_timeout'], SCHEDULER_BACKOFF_MAX)
            if retry is None or os.getppid() == 1:
                break
            sleep, pause = retry
            time.sleep(sleep)
        why = 'the scheduler (%s) did not answer %d tries over %ds: %s' % (args['scheduler'], tries, round(time.time() - started), error)
        with ledger.locked() as state:
            if state['status'] == 'running':
                ledger.set_status('paused', why, details={'rule': 'scheduler', 'by': 'gate'})
        result.setdefault('warnings', []).append('%s: %s; the run is paused and %s stays pending' % (node, why, node))
        return None, why

    @staticmethod
    def _backend(spec):
        return _ledger.open_backend(spec)

    def _ledger_spec(self, args, task_vars):
        """The ledger's backend from gpufleet_ledger_backend and friends (file: run_dir holds the ledgers; kubernetes: scratch)."""
        variables = {name: self._var(task_vars, name) for name in _ledger.SPEC_VARIABLES if name in task_vars}
        if not variables.get('gpufleet_kubeconfig') and args['kubeconfig']:
            variables['gpufleet_kubeconfig'] = args['kubeconfig']
        return _ledger.ledger_spec(variables, args['run_dir'])

    def _ledger(self, spec):
        if not spec.get('run_id'):
            raise GateError('ledger: run_id is missing (the start step returns the ledger to use)')
        return _ledger.RunLedger.open(self._backend(spec), spec['run_id'])

    @staticmethod
    def _results_dir(args, spec):
        return args['results_dir'] or os.path.join(spec['run_dir'], spec['run_id'], 'results')

    @staticmethod
    def _earlier_states(backend, run_id, history, result):
        """The state of the last ``history`` runs before ``run_id`` (oldest first), for the nodes' timings."""
        states = []
        for earlier in [name for name in backend.run_ids() if name != run_id][-max(0, history):] if history else []:
            try:
                states.append(_ledger.RunLedger.open(backend, earlier).state)      # state.json lags mid-run: the reader's rule
            except (_ledger.LedgerError, OSError, ValueError) as exc:
                result.setdefault('warnings', []).append(to_native(exc))
        return states

    @staticmethod
    def _arrived(backend, run_id, node):
        """Record that ``node`` reached the gate in this run; every node that ever did. Call under the run lock.

        Kept through the backend (``arrived``), not on this controller's disk: another controller of the run sees it.
        """
        document = backend.read_doc(run_id, 'arrived') or {}
        data = set(name for name in document.get('nodes') or [] if isinstance(name, str))
        if node not in data:
            data.add(node)
            backend.write_doc(run_id, 'arrived', {'nodes': sorted(data)})
        return data

    @staticmethod
    def _waiting(backend, run_id, node, present, ttl):
        """Register (or remove) ``node`` as waiting at the gate; the nodes waiting now. Call under the run lock.

        Kept through the backend (``waiting``: node -> when it last polled), not on this controller's disk.
        """
        now = time.time()
        document = backend.read_doc(run_id, 'waiting') or {}
        data = {name: seen for name, seen in (document.get('nodes') or {}).items()
                if isinstance(seen, (int, float)) and not isinstance(seen, bool) and now - seen <= ttl}
        if present:
            data[node] = now
        else:
            data.pop(node, None)
        if data != (document.get('nodes') or {}):
            backend.write_doc(run_id, 'waiting', {'nodes': data})
        return set(data)

    @staticmethod
    def _breaker_history(backend, run_id, policy, result):
        """The circuit breaker's memory of the other runs in the run folder (their quarantines within its window, the last reset)."""
        if policy.circuit_breaker_threshold is None:
            return {'quarantines': [], 'reset': None}
        states = []
        for other in backend.run_ids():
            if other == run_id:
                continue
            try:
                states.append(_ledger.RunLedger.open(backend, other).state)
            except (_ledger.LedgerError, OSError, ValueError) as exc:
                result.setdefault('warnings', []).append('circuit breaker: run %s cannot be read: %s' % (other, to_native(exc)))
        return _rollout.breaker_history(states, time.time(), policy.circuit_breaker_window)

    @staticmethod
    def _order(nodes, domains, scheduler, earlier):
        """The plan's order of ``nodes``: nodes without running work first, longest first (their last duration in ``earlier``)."""
        planned = _planner.order(_rollout.plan_nodes(list(nodes), scheduler, domains), scheduler.unavailable,
                                 durations=_planner.node_durations(earlier))
        return [item[0].name for item in planned]

    @staticmethod
    def _breaker(state, args):
        """What the circuit breaker remembers of earlier runs: recorded in the run at its start (the ledger), else what this
        controller's start step computed from the backend (I(breaker))."""
        return args['breaker'] or state.get('breaker_history') or {}

    def _escalate(self, escalation, payload, result):
        """Call the escalation hook: a command (the payload as JSON on its standard input) or a URL (POSTed)."""
        if not escalation:
            return
        body = json.dumps(payload, sort_keys=True)
        try:
            if isinstance(escalation, tuple):
                process = subprocess.run(list(escalation), input=body, capture_output=True, text=True, check=False, timeout=COMMAND_TIMEOUT)
                if process.returncode != 0:
                    raise GateError('exited %d: %s' % (process.returncode, process.stderr.strip()[:300]))
            else:
                open_url(escalation, data=body, method='POST', headers={'Content-Type': 'application/json'}, timeout=COMMAND_TIMEOUT)
            result['escalated'] = True
        except Exception as exc:  # pylint: disable=broad-except
            result.setdefault('warnings', []).append('gpufleet_escalation failed: %s' % to_native(exc))

    # ---------------------------------------------------------------------------------------------- steps
    def _check(self, args, task_vars, result):
        """The policy validated (and every node's domain variable), nothing else: a bad value fails before any node is read."""
        policy = _policy.load_policy(self._policy_vars(args, task_vars))
        self._domains(task_vars, policy, list(dict.fromkeys(args['nodes'])))
        result.update(changed=False, policy=policy.to_dict(), msg='policy: %s' % json.dumps(policy.to_dict(), sort_keys=True))

    def _start(self, args, task_vars, result):
        nodes = list(dict.fromkeys(args['nodes']))
        if not nodes:
            raise GateError('nodes: the rollout has no nodes (check gpufleet_hosts)')
        policy = _policy.load_policy(self._policy_vars(args, task_vars))
        domains = self._domains(task_vars, policy, nodes)
        if not args['run_dir']:
            raise GateError('run_dir: gpufleet_run_dir must be a folder on the controller')
        spec = self._ledger_spec(args, task_vars)
        backend = self._backend(spec)
        inventory = _rollout.inventory_id(task_vars.get('ansible_inventory_sources') or [])
        fleet = args['fleet'] or _rollout.fleet_name(inventory)
        if args['run_id']:
            _ledger.check_run_id(args['run_id'])
        run_id, resume = _rollout.choose_run(args['run_id'], backend.run_ids(),
                                             None if args['run_id'] else _ledger.last_unfinished(backend, inventory))
        run_id = run_id or _ledger.new_run_id()
        holder = _ledger.holder_identity(run_id, pid=os.getppid())
        stale = backend.acquire(fleet, holder)
        if stale:
            result.setdefault('warnings', []).append('took over the fleet lock of run %s (host %s, pid %s is gone)'
                                                     % (stale.get('run_id'), stale.get('host'), stale.get('pid')))
        caught = {}
        try:
            backend.hold(fleet, holder)
            scheduler = self._fleet_or_empty(args, task_vars, nodes, result, jobs=True)
            infos = {node: {'domain': domains[node], 'gpus': scheduler.gpus.get(node, 0)} for node in nodes}
            if resume:
                ledger = _ledger.RunLedger.open(backend, run_id)
                state = ledger.state
                # The run's pin and mode are the ones it recorded: another one refuses the resume before anything is written.
                _rollout.resume_pin(run_id, state.get('pin'), args['pin'], args['pin_source'])
                if args['kind'] and state.get('kind') not in (None, args['kind']):
                    raise GateError('run %s is a %s run, this is %s: it is not resumed by another playbook (its nodes converge to '
                                    'its own pin). Finish it with %s, or start a new run with -e gpufleet_run_id=<a new id>'
                                    % (run_id, state.get('kind'), args['kind'], state.get('kind')))
                if state.get('mode') not in (None, args['mode']):
                    raise GateError('run %s is a %s-mode run: resume it in %s mode (gpufleet_window %s), or start a new run with '
                                    '-e gpufleet_run_id=<a new id>' % (run_id, state.get('mode'), state.get('mode'),
                                                                       'set' if state.get('mode') == 'window' else 'unset'))
                if state.get('inventory') not in (None, inventory):
                    result.setdefault('warnings', []).append('run %s was started from inventory %s' % (run_id, state.get('inventory')))
                ledger.add_nodes({node: info for node, info in infos.items() if node not in state['nodes']})
                if (state.get('pause') or {}).get('by') != 'operator' and state['status'] != 'running' \
                        and any(record['state'] not in _gate.FINAL for record in state['nodes'].values()):
                    ledger.set_status('running', 'resumed')
                if args['mode'] == 'batch':
                    # No gate re-admits a node a crash caught in flight: the start does, and its procedure starts again.
                    for name, record in sorted(state['nodes'].items()):
                        if record['state'] in _gate.IN_FLIGHT:
                            caught[name] = record['state']
                            ledger.transition(name, 'admitted', '%s was caught %s by a crash: the batch runs its procedure again'
                                              % (name, record['state']), resume=True)
                if _policy.load_policy(state['policy']) != policy:
                    result.setdefault('warnings', []).append('run %s keeps the policy it started with (state.json policy); '
                                                             'start a new run to change it' % run_id)
                policy = _policy.load_policy(state['policy'])
                earlier = self._earlier_states(backend, run_id, args['history'], result)
            else:
                # One record per run: the pin, the previous pin, the policy, the mode, the order and the circuit breaker's
                # memory of earlier runs, all in the ledger's first event.
                earlier = self._earlier_states(backend, run_id, args['history'], result)
                order = self._order(infos, {node: info['domain'] for node, info in infos.items()}, scheduler, earlier)
                ledger = _ledger.RunLedger.create(backend, run_id, inventory=inventory, policy=policy.to_dict(), pin=args['pin'], nodes=infos,
                                                  mode=args['mode'], kind=args['kind'] or None,
                                                  previous_pin=_rollout.previous_pin(earlier, inventory), order=order,
                                                  breaker_history=self._breaker_history(backend, run_id, policy, result))
            state = ledger.state
            if args['mode'] == 'batch':
                # No gate stands before a batch: the run-level rules are checked here, before any node of the first batch is
                # touched (an operator's pause, a tripped circuit breaker, a pin suspect, a spent budget).
                held = _gate.pause_decision(policy, _rollout.rollout_view(_ledger.node_view(state), self._breaker_history(backend, run_id, policy, result)),
                                            _ledger.utcnow())
                if held is not None:
                    if state['status'] != 'paused':
                        ledger.set_status('paused', held.reason, details={'rule': held.rule, 'by': 'gate'})
                    raise GateError('rollout paused (%s): %s; no batch starts' % (held.rule, held.reason))
        except BaseException:
            backend.release(fleet, run_id)
            raise
        all_nodes = list(state['nodes'])
        ordered = self._order(all_nodes, {name: record.get('domain') for name, record in state['nodes'].items()}, scheduler, earlier)
        # A resumed run's done nodes are confirmed with a quick check before they are skipped: they go first (a few
        # seconds each, nothing cordoned); one that fails it goes back to pending and on through the gate.
        confirm = _rollout.confirm_expectations(state) if resume and args['mode'] == 'window' else {}
        if args['mode'] == 'batch':
            # Batch mode keeps what users know of serial: the inventory's order; a resume takes the nodes not final yet.
            hosts = [name for name in nodes + [name for name in all_nodes if name not in nodes] if state['nodes'][name]['state'] not in _gate.FINAL]
        else:
            hosts = [name for name in ordered if name in confirm] + [name for name in ordered if state['nodes'][name]['state'] not in _gate.FINAL]
        breaker = state.get('breaker_history') if not resume and state.get('breaker_history') else \
            self._breaker_history(backend, run_id, policy, result)
        window = policy.window_size(len(all_nodes))
        forks = self._var(task_vars, 'ansible_forks')
        if args['mode'] == 'window' and isinstance(forks, int) and forks < window + 1:
            result.setdefault('warnings', []).append('forks is %d: host_pinned runs at most that many hosts; the window is %d, '
                                                     'set forks to at least %d' % (forks, window, window + 1))
        ledger_spec = dict(spec, run_id=run_id)
        result.update(changed=not resume, run_id=run_id, resumed=resume, fleet=fleet, order=ordered, hosts=hosts, confirm=confirm,
                      breaker=breaker, window=window, ledger_dir=backend.path(run_id),
                      caught=caught, mode=args['mode'],
                      msg='%s %s-mode run %s: %d node(s), %d to go, %d done to confirm, %s; %d quarantine(s) of earlier runs count '
                          'for the circuit breaker' % ('resumed' if resume else 'started', args['mode'], run_id, len(all_nodes),
                                                       len(hosts) - len(confirm), len(confirm),
                                                       'window %d' % window if args['mode'] == 'window' else 'in batches (serial)',
                                                       len(breaker['quarantines'])))
        result['ansible_facts'] = {'gpufleet_rollout': {
            'run_id': run_id, 'run_dir': backend.run_dir, 'fleet': fleet, 'ledger': ledger_spec, 'order': ordered, 'hosts': hosts,
            'resumed': resume, 'window': window, 'results_dir': args['results_dir'] or os.path.join(backend.path(run_id), 'results'),
            'policy': policy.to_dict(), 'confirm': confirm, 'breaker': breaker, 'pin': state.get('pin') or {}, 'mode': args['mode'],
            'caught': caught}}

    def _confirm(self, args, task_vars, result):
        """A resumed run's done node after its quick check (I(validation), I(unreachable)): confirmed done, or back to pending."""
        node = task_vars.get('inventory_hostname')
        ledger = self._ledger(args['ledger'])
        with ledger.locked(full=False) as state:
            record = ledger.node(node)
            if record is None:
                raise GateError('%s is not a node of run %s' % (node, ledger.run_id))
            current = record['state']
            if current != 'done':
                result.update(changed=False, state=current, confirmed=False, msg='%s: %s, nothing to confirm' % (node, current))
                return
            to, reason = _rollout.confirm_decision(args['validation'], args['unreachable'], pin=state.get('pin'))
            details = {'confirmed_at': _ledger.iso(_ledger.utcnow())} if to == 'done' else {'recheck': True}
            ledger.transition(node, to, reason, details=details, gate=True)
        result.update(changed=True, state=to, confirmed=to == 'done', reason=reason, msg='%s: %s' % (node, reason))

    def _admit(self, args, task_vars, result):
        node = task_vars.get('inventory_hostname')
        spec = args['ledger']
        ledger = self._ledger(spec)
        backend = ledger.backend
        results_dir = self._results_dir(args, spec)
        poll = max(0.2, args['poll'])
        ttl = poll * WAITING_POLLS + 2
        started = time.time()
        domains = {}
        hostvars = task_vars.get('hostvars') or {}
        parent = os.getppid()
        caught = ''
        while True:
            if os.getppid() != parent:
                # ansible-playbook is gone (killed): an orphaned worker must not admit anyone.
                raise GateError('ansible-playbook (pid %d) is gone; %s stays pending' % (parent, node))
            ledger.catch_up()
            state = ledger.head      # run-level fields only: a poll never reads every node's record
            policy = _policy.load_policy(state['policy'])
            if policy.domain_var and not domains:
                domains = {name: self._hostvar(task_vars, name, policy.domain_var) for name in hostvars}
            if state['status'] == 'paused' and (state.get('pause') or {}).get('rule') == 'scheduler':
                decision = _gate.Decision('pending', 'scheduler', 'the run is paused: %s' % state['pause'].get('reason'))
                waited = round(time.time() - started, 1)
                break
            scheduler, why = self._fleet_or_stop(args, task_vars, ledger, node, result)
            if scheduler is None:
                decision = _gate.Decision('pending', 'scheduler', why)
                waited = round(time.time() - started, 1)
                break
            scheduler = scheduler.view(domains)
            scheduler_out = set(scheduler.unavailable)
            now = _ledger.utcnow()
            pause_set = None
            with ledger.locked(full=False) as state:
                # The gate's compact view: the nodes in flight, failed or early, this node and the unavailable ones.
                rollout = _rollout.rollout_view(ledger.gate_view(node, extra=scheduler_out), self._breaker(state, args))
                decision = _gate.admit(policy, rollout, scheduler, node, now)
                if decision.action == _gate.ADMIT and decision.rule != 'resume':
                    waiting = self._waiting(backend, ledger.run_id, node, True, ttl)
                    arrived = self._arrived(backend, ledger.run_id, node)
                    # Hosts host_pinned is starting right now (a free worker, never at the gate yet) keep their place in the
                    # plan for a moment: the first worker to poll is chance, not the plan. Only nodes before this one in the
                    # plan can hold it back, and host_pinned starts at most forks of them.
                    forks = int(task_vars.get('ansible_forks') or 5)
                    expected = set()
                    busy = len(waiting) + sum(state['counts'].get(name, 0) for name in _ledger.IN_FLIGHT)
                    if time.time() - started < ARRIVAL_GRACE_POLLS * poll + 3 and busy < forks:
                        expected = set(_rollout.before(args['order'], node, arrived, forks))
                    candidates = (waiting | expected) - {node}
                    if candidates:
                        rollout = _rollout.rollout_view(ledger.gate_view(node, extra=set(scheduler_out) | candidates), self._breaker(state, args))
                    ahead = _rollout.first_in_line(policy, rollout, scheduler, node, args['order'], candidates, now)
                    if ahead:
                        decision = _gate.Decision(_gate.WAIT, 'order', '%s is ahead of %s in the plan and may go now' % (ahead, node))
                if decision.action == _gate.ADMIT:
                    details = {'canary': True} if decision.canary else None
                    caught = ledger.node(node)['state'] if decision.rule == 'resume' else ''
                    ledger.transition(node, 'admitted', decision.reason, details=details, resume=decision.rule == 'resume')
                    self._waiting(backend, ledger.run_id, node, False, ttl)
                elif decision.action in (_gate.SKIP, _gate.PAUSE):
                    self._waiting(backend, ledger.run_id, node, False, ttl)
                    if decision.action == _gate.PAUSE and state['status'] != 'paused':
                        ledger.set_status('paused', decision.reason, details={'rule': decision.rule, 'by': 'gate'})
                        pause_set = state
                else:
                    self._waiting(backend, ledger.run_id, node, True, ttl)
            if pause_set is not None:
                self._escalate(policy.escalation, _rollout.escalation_payload(ledger.run_id, decision.to_dict(), pause_set), result)
            waited = round(time.time() - started, 1)
            if decision.action != _gate.WAIT:
                break
            if args['admit_timeout'] and waited >= args['admit_timeout']:
                decision = _gate.Decision('pending', decision.rule, 'waited %ss at the gate (admit_timeout): %s' % (waited, decision.reason))
                break
            pause = poll
            if decision.until is not None:
                pause = max(0.2, min(poll, decision.until.timestamp() - time.time()))
            time.sleep(pause)
        verdict = decision.action
        result.update(changed=verdict == _gate.ADMIT, verdict=verdict, admitted=verdict == _gate.ADMIT, rule=decision.rule,
                      reason=decision.reason, canary=decision.canary, waited=waited, msg='%s: %s (%s): %s' % (node, verdict, decision.rule, decision.reason))
        if verdict == _gate.ADMIT:
            result['caught'] = caught
            result['ansible_facts'] = {'gpufleet_ledger': dict(spec, results_dir=results_dir)}

    def _settle(self, args, task_vars, result):
        """After the role: the node's final state in the ledger (a safety net: upgrade_phase records it when the role has a ledger),
        then a retry (gpufleet_retries) of a node the procedure put back as it was, and the escalation of a quarantine."""
        node = task_vars.get('inventory_hostname')
        ledger = self._ledger(args['ledger'])
        policy = _policy.load_policy(ledger.head['policy'])
        target = (args['result'] or {}).get('state')
        recorded = []
        retry = False
        with ledger.locked(full=False):
            record = ledger.node(node)      # this node's record only, not the run's every node
            if record is None:
                raise GateError('%s is not a node of run %s' % (node, ledger.run_id))
            current = record['state']
            if current not in _gate.FINAL:
                # The safety net when node_upgrade could not record its final event (the ledger did not take it): the same
                # rule and the same details as upgrade_phase, written once.
                target, reason = _phase.final_state(target, (args['result'] or {}).get('reason') if target else None)
                given = args['result'] or {}
                details = _phase.final_details(given, node, given.get('facts_before'), given.get('facts_after'))
                for step in _rollout.walk(current, target):
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
            self._escalate(policy.escalation, payload, result)
        result.update(changed=bool(recorded), recorded=recorded, state=final, retry=retry,
                      msg='%s: %s%s' % (node, final, ('; %s' % why) if retry else ''))

    def _summary(self, args, task_vars, result):
        """Batch mode, the end of a batch: the run's summary from the ledger (the one summary builder, as at the finish) and
        the run's pause when a rule holds - the gate's own run-level rules (failure budget over the run, pin-fault detector,
        circuit breaker, operator) or this batch's failures over I(max_fail_percentage) of the batch (Ansible stops the
        rollout then). I(batch): the hosts of this batch."""
        spec = args['ledger']
        ledger = self._ledger(spec)
        policy = _policy.load_policy(ledger.head['policy'])
        pause_set = None
        with ledger.locked() as state:
            rollout = _rollout.rollout_view(_ledger.node_view(state), self._breaker(state, args))
            decision = _gate.pause_decision(policy, rollout, _ledger.utcnow()) or \
                _rollout.batch_stop(state, args['batch'], args['max_fail_percentage'], args['fail_states'], args['failed_before'])
            if decision is not None and state['status'] != 'paused':
                ledger.set_status('paused', decision.reason, details={'rule': decision.rule, 'by': 'gate'})
                pause_set = decision
            report = _rollout.summary(state)
        if pause_set is not None:
            self._escalate(policy.escalation, _rollout.escalation_payload(ledger.run_id, pause_set.to_dict(), ledger.head), result)
        report.update(ledger_file=ledger.backend.location(ledger.run_id, _ledger.LEDGER), state_file=ledger.backend.location(ledger.run_id, _ledger.STATE),
                      results_dir=self._results_dir(args, spec))
        report['summary'] = dict(report)
        result.update(report, changed=pause_set is not None, paused=report['status'] == 'paused', msg=report['message'])

    def _finish(self, args, task_vars, result):
        spec = args['ledger']
        ledger = self._ledger(spec)
        policy = _policy.load_policy(ledger.state['policy'])
        results_dir = self._results_dir(args, spec)
        pause_set = None
        with ledger.locked() as state:
            rollout = _rollout.rollout_view(_ledger.node_view(state), self._breaker(state, args))
            decision = _gate.pause_decision(policy, rollout, _ledger.utcnow())
            if decision is not None and state['status'] != 'paused':
                ledger.set_status('paused', decision.reason, details={'rule': decision.rule, 'by': 'gate'})
                pause_set = decision
            elif decision is None and (state['status'] == 'running' or (state.get('pause') or {}).get('rule') == 'batch_budget') \
                    and all(record['state'] in _gate.FINAL for record in state['nodes'].values()):
                # Every node is final: nothing is left for a resume; a batch's own stop (Ansible's rule) does not outlive it.
                counts = _rollout.summary(state)['counts']
                ledger.set_status('finished', 'every node is final: %s' % ', '.join('%d %s' % (counts[name], name) for name in sorted(counts)))
            report = _rollout.summary(state)
        if pause_set is not None:
            self._escalate(policy.escalation, _rollout.escalation_payload(ledger.run_id, pause_set.to_dict(), ledger.state), result)
        if args['fleet']:
            ledger.backend.release(args['fleet'], ledger.run_id)
        report.update(ledger_file=ledger.backend.location(ledger.run_id, _ledger.LEDGER), state_file=ledger.backend.location(ledger.run_id, _ledger.STATE),
                      results_dir=results_dir)
        report['summary'] = dict(report)   # what the playbooks hand AWX (set_stats gpufleet_rollout_summary)
        result.update(report, changed=False, msg='%s; ledger %s, state %s' % (report['message'], report['ledger_file'], report['state_file']))
        if report['status'] == 'paused':
            result['failed'] = True
            result['msg'] = 'rollout paused: %s' % result['msg']

    def _plan(self, args, task_vars, result):
        nodes = list(dict.fromkeys(args['nodes']))
        policy = _policy.load_policy(self._policy_vars(args, task_vars))
        domains = self._domains(task_vars, policy, nodes)
        scheduler = self._fleet_or_empty(args, task_vars, nodes, result, jobs=True)
        histories = []
        spec = self._ledger_spec(args, task_vars) if args['run_dir'] else {}
        if spec and (spec['backend'] != 'file' or os.path.isdir(args['run_dir'])):
            backend = self._backend(spec)
            try:
                earlier = backend.run_ids()[-max(0, args['history']):] if args['history'] else []
            except _ledger.LedgerError as exc:
                result.setdefault('warnings', []).append(to_native(exc))
                earlier = []
            for run_id in earlier:
                try:
                    events, _offset = backend.read_events(run_id, 0)
                except _ledger.LedgerError as exc:
                    result.setdefault('warnings', []).append(to_native(exc))
                    continue
                histories.append(_ledger.phase_times(events))
        estimates, samples = _planner.phase_estimates(histories)
        plan = _planner.plan(policy, _rollout.plan_nodes(nodes, scheduler, domains), scheduler.view(domains), _ledger.utcnow(),
                             estimates=estimates, converge=bool(args['pin']))
        plan['phase_samples'] = samples
        lines = _rollout.plan_lines(plan)
        result.update(changed=False, plan=plan, lines=lines, msg=lines[-1])

    def _control(self, args, task_vars, result):
        verb = args['verb']
        if not verb:
            raise GateError('verb: one of %s is required' % ', '.join(VERBS))
        if not args['run_dir']:
            raise GateError('run_dir: gpufleet_run_dir must be the folder of the ledgers')
        backend = self._backend(self._ledger_spec(args, task_vars))
        run_id = args['run_id']
        if not run_id:
            inventory = _rollout.inventory_id(task_vars.get('ansible_inventory_sources') or [])
            run_id = _ledger.last_unfinished(backend, inventory)
            if not run_id:
                raise GateError('run_id: no unfinished run of inventory %s in %s; give gpufleet_run_id' % (inventory, backend.location()))
        ledger = _ledger.RunLedger.open(backend, run_id)
        reason = args['reason'] or 'by an operator'
        nodes = list(dict.fromkeys(args['nodes']))
        if verb in ('skip', 'retry', 'release', 'released') and not nodes:
            raise GateError('nodes: %s needs the nodes (gpufleet_nodes)' % verb)
        done = []
        with ledger.locked() as state:
            for node in nodes:
                if node not in state['nodes']:
                    raise GateError('%s is not a node of run %s' % (node, run_id))
            if verb == 'pause':
                ledger.set_status('paused', reason, details={'rule': 'operator', 'by': 'operator'})
            elif verb == 'resume':
                ledger.set_status('running', reason)
            elif verb == 'reset_breaker':
                ledger.reset_breaker(reason)
            for node in nodes:
                if verb == 'skip':
                    ledger.transition(node, 'left_alone', 'skipped: %s' % reason)
                elif verb == 'retry':
                    ledger.transition(node, _gate.PENDING, 'retry: %s' % reason, operator=True)
                elif verb == 'release':
                    if state['nodes'][node]['state'] != 'quarantined':
                        raise GateError('%s is %s, not quarantined: only a quarantined node is released' % (node, state['nodes'][node]['state']))
                    ledger.transition(node, 'validating', 'release: re-validating: %s' % reason, operator=True)
                elif verb == 'released':
                    to, why = _rollout.release_decision(state.get('pin'), args['validation'], args['passed'])
                    ledger.transition(node, to, why)
                done.append(node)
            report = _rollout.summary(state)
        result.update(report, changed=True, verb=verb, nodes=done, pin=state.get('pin') or {},
                      msg='%s %s: %s' % (verb, ', '.join(done) or 'run ' + run_id, report['message']))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        if self._task.args.get('step') in ('check', 'start'):
            # The rollout's inputs where they enter, before the arguments (which name the argument, not the variable).
            try:
                _rollout.check_inputs({name: self._var(task_vars, name) for name in INPUT_VARIABLES if name in task_vars})
            except _rollout.InputError as exc:
                result.update(failed=True, msg=to_native(exc))
                return result
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        del dummy
        host = task_vars.get('inventory_hostname', '?')
        step = args['step']
        if self._task.check_mode and step not in ('check', 'plan'):
            result.update(changed=False, skipped=True, msg='%s: the rollout gate does not run in check mode (use plan.yml)' % host)
            return result
        try:
            getattr(self, '_' + step)(args, task_vars, result)
        except _policy.PolicyError as exc:
            result.update(failed=True, msg='%s: policy: %s' % (host, to_native(exc)))
        except _rollout.InputError as exc:
            result.update(failed=True, msg=to_native(exc))
        except _ledger.LockHeld as exc:
            result.update(failed=True, msg='%s: a second rollout is refused: %s' % (host, to_native(exc)), holder=exc.holder)
        except (GateError, _ledger.LedgerError, _rollout.RolloutError, _slurm.SlurmParseError, OSError) as exc:
            result.update(failed=True, msg='%s: rollout %s: %s' % (host, step, to_native(exc)))
        return result
