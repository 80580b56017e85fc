# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The run's context: what every step of the rollout gate (``gpufleet.lifecycle.rollout``) is handed.

A step (:mod:`._rollout_start`, :mod:`._rollout_admit`, :mod:`._rollout_steps`) is a function of one
:class:`RunContext`: the task's arguments, its variables (templated where they are read), the task's result (where the
step writes its answer and its warnings) and the I/O, injected so that a unit test replaces it:

* ``open_backend``: the ledger's backend from its specification (:func:`._ledger.open_backend`);
* ``read_scheduler``: the scheduler's answer now (:func:`read_scheduler`: ``scontrol``/``squeue``, the Kubernetes API,
  or each node's ``gpufleet_gpus``), and ``read_answer``, what it reads before it is understood (:func:`read_answer`);
  at the gate the workers of one controller share one read per poll interval (:func:`read_shared`, :mod:`._shared_view`);
* ``send``: the escalation hook (:func:`send_escalation`: a command or a URL);
* ``clock``: the wall clock, sleeping at the gate and the controller's process (:class:`Clock`).

The decisions are not here: :mod:`._policy`, :mod:`._gate`, :mod:`._planner`, :mod:`._rollout`, :mod:`._ledger`.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.urls import open_url

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _slurm
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _policy
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _predrain
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _shared_view

COMMAND_TIMEOUT = 60
# The schedulers read on the controller (their answers shared at the gate); the others are static views of host variables.
SHARED_SCHEDULERS = ('slurm', 'kubernetes', 'runai')


class GateError(Exception):
    """A failure of the gate that ends the task with this message."""


class Clock:
    """The wall clock (``time``, ``utcnow``), sleeping at the gate (``sleep``) and the controller's process (``parent``:
    the pid of ansible-playbook, whose worker runs the step)."""

    @staticmethod
    def time():
        return time.time()

    @staticmethod
    def sleep(seconds):
        time.sleep(seconds)

    @staticmethod
    def utcnow():
        return _ledger.utcnow()

    @staticmethod
    def parent():
        return os.getppid()


def command_environment(extra):
    """The environment of a scheduler command: the controller's, ``extra`` (I(slurm_environment)) and the C locale."""
    environment = dict(os.environ)
    environment.update({str(key): str(value) for key, value in (extra or {}).items()})
    environment.update(LC_ALL='C', LANG='C')
    return environment


def run_command(argv, environment):
    """A scheduler command's standard output; :class:`GateError` when it cannot run or fails."""
    try:
        # Job comments and reasons are anyone's text: bytes that are not UTF-8 read as U+FFFD, never a crash of the gate.
        process = subprocess.run(argv, env=environment, capture_output=True, text=True, encoding='utf-8', errors='replace', check=False,
                                 timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GateError('%s: %s' % (' '.join(argv), exc)) from None
    if process.returncode != 0:
        raise GateError('%s exited %d: %s' % (' '.join(argv), process.returncode, _slurm.escape_controls(process.stderr.strip())[:500]))
    return process.stdout


def kube_api(kubeconfig):
    """(ApiClient, CoreV1Api) of ``kubeconfig`` (the client's default when empty); GateError without the library."""
    try:
        from kubernetes import client as kube_client  # pylint: disable=import-outside-toplevel
        from kubernetes import config as kube_config  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise GateError('the kubernetes Python library is needed (pip install kubernetes)') from None
    api = kube_config.new_client_from_config(config_file=kubeconfig or None)
    return api, kube_client.CoreV1Api(api)


def read_answer(context, jobs=False):
    """The scheduler's answer now as read, before it is understood (JSON, kept by the shared view): Slurm ``{'scontrol':
    text, 'squeue': text or None}`` (``squeue`` with ``jobs``), Kubernetes or Run:ai ``{'nodes': the node list, 'pods': the running
    pods}`` (``pods`` with ``jobs``)."""
    args = context.args
    scheduler = args['scheduler']
    if scheduler == 'slurm':
        environment = command_environment(args['slurm_environment'])
        nodes = run_command(['scontrol', 'show', 'node', '-o'], environment)
        squeue = run_command(['squeue', '--noheader', '--states=RUNNING', '--format=%i|%N|%e|%S|%k'], environment) if jobs else None
        return {'scontrol': nodes, 'squeue': squeue}
    if scheduler in ('kubernetes', 'runai'):
        try:
            api, core = kube_api(args['kubeconfig'])
            answer = {'nodes': api.sanitize_for_serialization(core.list_node(_request_timeout=COMMAND_TIMEOUT))}
            if jobs:
                # The running pods, every namespace, once per look (the shared view): the workloads and their checkpoints.
                answer['pods'] = api.sanitize_for_serialization(core.list_pod_for_all_namespaces(
                    field_selector='status.phase=Running', _request_timeout=COMMAND_TIMEOUT))
            return answer
        except GateError:
            raise
        except Exception as exc:  # pylint: disable=broad-except
            raise GateError('reading the Kubernetes nodes: %s' % to_native(exc)) from None
    raise GateError('scheduler %r has no answer to read' % scheduler)


class SchedulerMarks:
    """The soft pre-drain's reads and writes of the scheduler (:mod:`._predrain`), on the controller like the gate's reads;
    every command and request has a time limit, no command goes through a shell. A few nodes are read one by one (a settle
    reads its own node), more with one listing."""

    FEW = 20

    def __init__(self, context):
        self.args = context.args
        self._api = None

    def slurm_weights(self, names=None):
        argv = ['scontrol', 'show', 'node', '-o']
        if names is not None and len(names) <= self.FEW:
            argv.append(','.join(_slurm.check_node_name(name) for name in names))
        text = run_command(argv, command_environment(self.args['slurm_environment']))
        return _predrain.slurm_weights(_rollout.node_records(text))

    def set_weights(self, calls):
        environment = command_environment(self.args['slurm_environment'])
        for weight, names in calls:
            for name in names:
                _slurm.check_node_name(name)
            run_command(['scontrol', 'update', 'NodeName=%s' % ','.join(names), 'Weight=%d' % int(weight)], environment)

    def _core(self):
        """(ApiClient, CoreV1Api), made once per step."""
        if self._api is None:
            try:
                self._api = kube_api(self.args['kubeconfig'])
            except GateError:
                raise
            except Exception as exc:  # pylint: disable=broad-except
                raise GateError('the Kubernetes client: %s' % to_native(exc)) from None
        return self._api

    def kube_nodes(self, names):
        api, core = self._core()
        found = {}
        try:
            if len(names) <= self.FEW:
                for name in names:
                    try:
                        found[name] = api.sanitize_for_serialization(core.read_node(name, _request_timeout=COMMAND_TIMEOUT))
                    except Exception as exc:  # pylint: disable=broad-except
                        if getattr(exc, 'status', None) != 404:
                            raise
                return found
            items = api.sanitize_for_serialization(core.list_node(_request_timeout=COMMAND_TIMEOUT)).get('items') or []
        except Exception as exc:  # pylint: disable=broad-except
            raise GateError('reading the Kubernetes nodes: %s' % to_native(exc)) from None
        wanted = set(names)
        return {item['metadata']['name']: item for item in items if item.get('metadata', {}).get('name') in wanted}

    def patch_node(self, name, operations):
        dummy, core = self._core()
        del dummy
        try:
            try:
                core.patch_node(name, operations, _request_timeout=COMMAND_TIMEOUT, _content_type='application/json-patch+json')
            except TypeError:
                # A client before version 33 has no _content_type: it sends a list body as a JSON patch itself.
                core.patch_node(name, operations, _request_timeout=COMMAND_TIMEOUT)
        except Exception as exc:  # pylint: disable=broad-except
            raise GateError('node %s: the soft pre-drain taint: %s' % (name, to_native(exc)[:500])) from None


def fleet_of(scheduler, raw):
    """:class:`._rollout.Fleet` from :func:`read_answer`'s answer (the one place it is understood)."""
    if not isinstance(raw, dict):
        raise GateError('the %s answer is unreadable' % scheduler)
    if scheduler == 'slurm':
        fleet = _rollout.slurm_view(raw.get('scontrol') or '')
        if raw.get('squeue') is not None:
            fleet.jobs = _rollout.slurm_jobs(raw['squeue'])
        return fleet
    fleet = _rollout.kube_view(raw.get('nodes'))
    if raw.get('pods') is not None:
        fleet.jobs = _rollout.kube_jobs(raw['pods'])
    return fleet


def read_scheduler(context, nodes, jobs=False):
    """The scheduler's answer now (:class:`._rollout.Fleet`), read on the controller: Slurm (``scontrol``, and with ``jobs``
    ``squeue``), Kubernetes or Run:ai (the API), else each of ``nodes``' ``gpufleet_gpus`` host variable."""
    scheduler = context.args['scheduler']
    if scheduler not in SHARED_SCHEDULERS:
        return _rollout.static_view({node: context.hostvar(node, 'gpufleet_gpus') for node in nodes})
    _shared_view.count(view_kind(scheduler, jobs), context.clock.parent(), False, context.clock.time())
    return fleet_of(scheduler, context.read_answer(context, jobs))


def view_kind(scheduler, jobs):
    """The word for what is read (the key's and the statistics' ``kind``): ``slurm``, ``slurm+jobs``, ``kubernetes``."""
    return scheduler + ('+jobs' if jobs and scheduler == 'slurm' else '')


def shared_ttl(args):
    """How long a scheduler answer is shared (seconds) by this controller's workers: at the gate (step ``admit``) the poll
    interval (as the gate waits it, at least 0.2); None (each read its own) for another step, no poll or a static view."""
    poll = args.get('poll')
    if args.get('step') != 'admit' or args.get('scheduler') not in SHARED_SCHEDULERS or not poll or poll <= 0:
        return None
    return max(0.2, float(poll))


def shared_key(args, pid, jobs=False):
    """The shared view's key of this controller's scheduler reads: ansible-playbook's ``pid`` and its start time, the
    scheduler, its arguments (``slurm_environment``, ``kubeconfig``) and ``jobs``. Two controllers never share."""
    scheduler = args['scheduler']
    what = {'scheduler': scheduler, 'slurm_environment': args.get('slurm_environment') or {}, 'kubeconfig': args.get('kubeconfig') or '',
            'jobs': bool(jobs)}
    return _shared_view.view_key(pid, _ledger.process_start(pid), view_kind(scheduler, jobs), what)


def read_shared(context, nodes, jobs=False, folder=None):
    """The scheduler's answer through the shared view (:func:`._shared_view.fetch`): one read per :func:`shared_ttl` for
    every worker of this controller; :func:`fleet_of` rebuilds the fleet from the read each time. An answer that cannot be
    understood is not kept (the reader checks it). Without a TTL, or when the view cannot be used, a read of its own."""
    ttl = shared_ttl(context.args)
    if ttl is None:
        return read_scheduler(context, nodes, jobs)
    scheduler = context.args['scheduler']

    def reader():
        raw = context.read_answer(context, jobs)
        fleet_of(scheduler, raw)
        return raw

    try:
        raw = _shared_view.fetch(shared_key(context.args, context.clock.parent(), jobs), ttl, reader, folder=folder, clock=context.clock.time)
    except _shared_view.ViewError as exc:
        message = 'the shared scheduler view is not used (%s); each worker reads the scheduler' % to_native(exc)
        if message not in context.result.get('warnings', []):
            context.warn(message)
        return read_scheduler(context, nodes, jobs)
    return fleet_of(scheduler, raw)


# The static view (each node's gpufleet_gpus host variable) does not change during a run: the gate's looks share it this long.
STATIC_SECONDS = 60.0


def read_static(context, nodes, folder=None):
    """The static view (no scheduler) at the gate: the nodes' ``gpufleet_gpus`` host variables, read for all of them once
    per :data:`STATIC_SECONDS` by this controller (templating a host variable of every node is what a look would cost most at
    10,000 nodes); read directly when the shared view cannot be used."""
    pid = context.clock.parent()
    key = _shared_view.view_key(pid, _ledger.process_start(pid), 'static', {'nodes': _shared_view.digest(list(nodes))})
    try:
        gpus = _shared_view.fetch(key, STATIC_SECONDS, lambda: {node: context.hostvar(node, 'gpufleet_gpus') for node in nodes},
                                  folder=folder, clock=context.clock.time)
    except _shared_view.ViewError:
        return read_scheduler(context, nodes)
    return _rollout.static_view(gpus)


def send_escalation(escalation, payload):
    """Call the escalation hook: a command (``escalation`` a tuple; the payload as JSON on its standard input) or a URL
    (POSTed). Raises on failure."""
    body = json.dumps(payload, sort_keys=True)
    if isinstance(escalation, tuple):
        process = subprocess.run(list(escalation), input=body, capture_output=True, text=True, check=False, timeout=COMMAND_TIMEOUT)
        if process.returncode != 0:
            raise GateError('exited %d: %s' % (process.returncode, process.stderr.strip()[:300]))
    else:
        open_url(escalation, data=body, method='POST', headers={'Content-Type': 'application/json'}, timeout=COMMAND_TIMEOUT)


class RunContext:
    """One step's arguments (``args``, checked against the action's argument spec), the task's variables, its result and
    the injected I/O (see the module docstring)."""

    def __init__(self, args, task_vars, result=None, template=None, clock=None, open_backend=None, scheduler=None, send=None,
                 answer=None, shared=None, shared_folder=None, keep=None, marks=None):
        self.args = args
        self.task_vars = task_vars or {}
        self.result = {} if result is None else result
        self.template = template or (lambda value: value)
        self.clock = clock or Clock()
        self.open_backend = open_backend or _ledger.open_backend
        self.read_scheduler = scheduler or read_scheduler
        self.read_answer = answer or read_answer
        # The shared view at the gate: on unless a scheduler reader is injected (a unit test's fake is called as it is).
        self.shared = scheduler is None if shared is None else bool(shared)
        self.shared_folder = shared_folder
        self.send = send or send_escalation
        # The member's keeper (its heartbeat in the ledger and the fleet Lease's renewal), started by the start step.
        self.keep = keep or _ledger.keep
        # The soft pre-drain's scheduler I/O: none when a scheduler reader or answer is injected (a unit test's fake is not
        # written to) unless a fake I/O is injected too.
        self.marks_io = marks or (SchedulerMarks(self) if scheduler is None and answer is None else None)

    @property
    def host(self):
        """The host the task runs for (``inventory_hostname``)."""
        return self.task_vars.get('inventory_hostname')

    def warn(self, message):
        self.result.setdefault('warnings', []).append(message)

    # -- the task's variables
    def var(self, name, default=None):
        """A task variable, templated; ``default`` when it is not set."""
        if name not in self.task_vars:
            return default
        return self.template(self.task_vars[name])

    def hostvar(self, node, name):
        """Another host's variable, templated; None when the host, the variable or its template is missing."""
        hostvars = self.task_vars.get('hostvars') or {}
        try:
            return self.template(hostvars[node].get(name)) if node in hostvars else None
        except Exception:  # pylint: disable=broad-except
            return None

    def policy(self):
        """The policy (:class:`._policy.Policy`) of I(policy), else of the task's ``gpufleet_*`` policy variables."""
        if self.args['policy'] is not None:
            return _policy.load_policy(dict(self.args['policy']))
        return _policy.load_policy({name: self.var(name) for name in _policy.VARIABLES if name in self.task_vars})

    def domains(self, policy, nodes):
        """{node: its failure domain} from each node's ``gpufleet_domain_var`` variable (an error names a node without)."""
        return _policy.node_domains({node: {policy.domain_var: self.hostvar(node, policy.domain_var)} if policy.domain_var else {}
                                     for node in nodes}, policy.domain_var)

    def inventory(self):
        """The inventory's id (``ansible_inventory_sources``, :func:`._rollout.inventory_id`)."""
        return _rollout.inventory_id(self.task_vars.get('ansible_inventory_sources') or [])

    # -- the ledger
    def ledger_spec(self):
        """The ledger's backend from gpufleet_ledger_backend and friends (file: run_dir holds the ledgers; kubernetes: scratch)."""
        variables = {name: self.var(name) for name in _ledger.SPEC_VARIABLES if name in self.task_vars}
        if not variables.get('gpufleet_kubeconfig') and self.args['kubeconfig']:
            variables['gpufleet_kubeconfig'] = self.args['kubeconfig']
        return _ledger.ledger_spec(variables, self.args['run_dir'])

    def backend(self, spec):
        return self.open_backend(spec)

    def ledger(self, spec):
        """The run's ledger from I(ledger) (the start step's ``gpufleet_rollout.ledger``)."""
        if not spec.get('run_id'):
            raise GateError('ledger: run_id is missing (the start step returns the ledger to use)')
        return _ledger.RunLedger.open(self.backend(spec), spec['run_id'])

    def results_dir(self, spec):
        return self.args['results_dir'] or os.path.join(spec['run_dir'], spec['run_id'], 'results')

    def breaker(self, state):
        """What the circuit breaker remembers of earlier runs: recorded in the run at its start (the ledger), else what this
        controller's start step computed from the backend (I(breaker))."""
        return self.args['breaker'] or state.get('breaker_history') or {}

    # -- the scheduler
    def read_fleet(self, nodes, jobs=False):
        """The scheduler's answer (:class:`._rollout.Fleet`): at the gate (a poll, :func:`shared_ttl`) through the shared view,
        one read per poll interval for every worker of this controller (:func:`read_shared`); else read now."""
        if self.shared and shared_ttl(self.args) is not None:
            return read_shared(self, nodes, jobs, folder=self.shared_folder)
        if self.shared and self.args.get('step') == 'admit' and self.args.get('scheduler') == 'none' and self.read_scheduler is read_scheduler:
            return read_static(self, nodes, folder=self.shared_folder)
        return self.read_scheduler(self, nodes, jobs)

    def fleet_or_empty(self, nodes, jobs=False):
        """The scheduler's answer, or an empty one with a warning (a capacity floor then waits until it can be read)."""
        try:
            return self.read_fleet(nodes, jobs=jobs)
        except (GateError, _rollout.RolloutError, _slurm.SlurmParseError) as exc:
            self.warn('the scheduler could not be read (%s); a capacity floor waits until it can' % exc)
            return _rollout.Fleet({}, ())

    # -- the soft pre-drain (:mod:`._predrain`)
    def soft_mark(self, ledger, nodes, member=''):
        """Mark ``nodes`` "going soon" (recorded in the ledger first); the nodes marked. Off with gpufleet_predrain false or
        a scheduler without marks; a failure is a warning (a preference, never a reason to stop a rollout)."""
        scheduler = self.args['scheduler']
        if scheduler not in _predrain.SCHEDULERS or not nodes or self.marks_io is None:
            return []
        try:
            return _predrain.mark(self.marks_io, 'slurm' if scheduler == 'slurm' else 'kubernetes', ledger.soft_marks(), nodes,
                                  ledger.run_id, member, _ledger.iso(self.clock.utcnow()), lambda new: ledger.change_marks(add=new))
        except (GateError, _slurm.SlurmParseError, _ledger.LedgerError, OSError, ValueError) as exc:
            self.warn('the soft pre-drain marks were not all set: %s' % to_native(exc))
            return []

    def soft_undo(self, ledger, nodes=None, member=None):
        """Take back the recorded marks of ``nodes`` (all when None; with ``member``, only that controller's); {node: why}."""
        if self.marks_io is None:
            return {}
        try:
            marks = ledger.soft_marks()
            chosen = [node for node, mark in marks.items() if (nodes is None or node in nodes) and (member is None or mark.get('member') == member)]
            if not chosen:
                return {}
            done = _predrain.undo(self.marks_io, marks, chosen)
            ledger.change_marks(forget=list(done))
            return done
        except (GateError, _slurm.SlurmParseError, _ledger.LedgerError, OSError, ValueError) as exc:
            self.warn('the soft pre-drain marks were not all taken back (the ledger keeps them for the next try): %s' % to_native(exc))
            return {}

    # -- the escalation hook
    def escalate(self, escalation, payload):
        """Call the escalation hook (C(escalated) in the result); a failure is a warning."""
        if not escalation:
            return
        try:
            self.send(escalation, payload)
            self.result['escalated'] = True
        except Exception as exc:  # pylint: disable=broad-except
            self.warn('gpufleet_escalation failed: %s' % to_native(exc))
