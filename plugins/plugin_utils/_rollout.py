# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout's decisions beside the gate's (controller-side, no Ansible import, no I/O but :func:`inventory_id`'s look at
the inventory's path).

The rollout gate's steps (:mod:`._rollout_start`, :mod:`._rollout_node`, :mod:`._rollout_run`, over a
:class:`._run_context.RunContext`) do the I/O: the scheduler's commands, the ledger's backend, sleeping at the gate, the
escalation hook. What they decide besides :func:`._gate.admit` and :func:`._gate.in_line` is here, each a function of
its inputs:

* the rollout's inputs (:func:`check_inputs`), checked on localhost before any node;
* the scheduler's answer read once (:func:`slurm_view`, :func:`kube_view`, :func:`static_view`): the fleet's GPU total,
  the nodes down or cordoned by anyone, each node's GPUs, and the jobs on each node (for the plan's order);
* the gate's view of a run (:func:`rollout_view`): the ledger's view (how each failed node failed is in its final event, the
  pin-fault detector compares these) plus the circuit breaker's memory of earlier runs (:func:`breaker_history`);
* a start: which run it opens (:func:`choose_run`), whether a resume is refused (:func:`resume_pin`,
  :func:`resume_refusal`) or sets the run running again (:func:`reopens`), the previous pin (:func:`previous_pin`) and
  the plan's order (:func:`plan_order`);
* a node: the walk to its final state (:func:`walk`), retries (:func:`retry_decision`), the quick check of a resume's done
  nodes (:func:`confirm_expectations`, :func:`confirm_decision`), an operator's release (:func:`release_decision`), the
  next try at a scheduler that does not answer (:func:`scheduler_retry`);
* the run: a batch's stop (:func:`batch_stop`), whether the finish ends it (:func:`finishes`), its summary
  (:func:`summary`), the escalation messages (:func:`escalation_payload`, :func:`quarantine_payload`) and the plan for
  people (:func:`plan_lines`).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import os
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _slurm
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._stack import DRIVER_FLAVORS
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _kube
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _phase
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _planner

SCHEDULERS = ('slurm', 'kubernetes', 'runai', 'none')
# The reboot methods a rollout accepts (node_upgrade's own 'none' is for a node that needs no reboot, not for a rollout).
REBOOT_METHODS = ('os', 'driver_reload', 'bmc')
# The inputs a rollout checks on localhost before any node is reached: (variable, the values it takes).
INPUTS = (('gpufleet_scheduler', SCHEDULERS), ('gpufleet_reboot_method', REBOOT_METHODS), ('gpufleet_driver_flavor', DRIVER_FLAVORS))
# Slurm base states and flags that make a node's GPUs unschedulable.
_SLURM_OUT_BASE = frozenset(('DOWN', 'FUTURE', 'UNKNOWN'))
_SLURM_OUT_FLAGS = frozenset(('DRAIN', 'NOT_RESPONDING', 'MAINTENANCE', 'RESERVED', 'POWERED_DOWN', 'POWERING_DOWN',
                              'POWER_DOWN', 'REBOOT_ISSUED', 'REBOOT_REQUESTED', 'FAIL'))
GPU_RESOURCE = 'nvidia.com/gpu'
# Taints that mirror what the node's own fields say (cordon, conditions): counted once, by those fields.
_MIRROR_TAINTS = frozenset(('node.kubernetes.io/unschedulable', 'node.kubernetes.io/not-ready', 'node.kubernetes.io/unreachable'))
# NoSchedule taints that dedicate a node to GPU work (the GPU workloads tolerate them): the node is in service. A key (any
# value) or a (key, value) pair: nvidia.com/gpu (the GPU Operator's and GKE's), sku=gpu (AKS GPU node pools).
DEDICATION_TAINTS = frozenset((GPU_RESOURCE, ('sku', 'gpu')))
# Labels by which another system holds a node: key -> (the actor, the values that do NOT hold it). Sources: NVSentinel's
# fault-quarantine (``k8saas.nvidia.com/cordon-by=NVSentinel``, the default label prefix) and state manager
# (``dgxc.nvidia.com/nvsentinel-state``: quarantined, draining, drain-*, remediating, remediation-failed), the GPU Operator's
# driver upgrade controller (``nvidia.com/gpu-driver-upgrade-state`` while it upgrades a node). docs/rollout-policy.md.
HOLDER_LABELS = {
    'k8saas.nvidia.com/cordon-by': ('NVSentinel quarantine', ()),
    'dgxc.nvidia.com/nvsentinel-state': ('NVSentinel', ('remediation-succeeded',)),
    'nvidia.com/gpu-driver-upgrade-state': ('the GPU Operator\'s driver upgrade', ('upgrade-done', 'upgrade-required', '')),
}


class RolloutError(ValueError):
    """An answer or an argument the gate cannot use; the message names what."""


class InputError(RolloutError):
    """A rollout variable with a value the rollout does not take; the message starts with the variable's name."""


def check_inputs(variables, run_dir='.'):
    """Check the rollout's inputs where they enter (localhost, before any node): scheduler, reboot method, driver flavor, ledger
    backend.

    ``variables``: the ``gpufleet_*`` variables as set (missing or empty: the default).  Raises :class:`InputError` whose
    message starts with the variable's name, e.g. ``gpufleet_scheduler: 'slrum' is not a scheduler (...)``.
    """
    for name, choices in INPUTS:
        value = variables.get(name)
        if value is None or value == '':
            continue
        if not isinstance(value, str) or value not in choices:
            raise InputError('%s: %r is not one of %s; nothing was touched' % (name, value, ', '.join(choices)))
    try:
        _ledger.ledger_spec({name: variables.get(name) for name in _ledger.SPEC_VARIABLES if name in variables}, run_dir or '.')
    except _ledger.LedgerError as exc:
        raise InputError('%s; nothing was touched' % exc) from None


# ----------------------------------------------------------------------------------------------------------------
# The scheduler.

class Fleet:
    """What the scheduler says now: ``gpus`` per node, the nodes ``unavailable`` (out of service for whatever reason, whoever
    holds them), ``holders`` (node -> who holds it and how, one line, for every unavailable node), ``own`` (the unavailable
    nodes only gpufleet holds: its own cordon, drain, reboot or quarantine) and the jobs."""

    def __init__(self, gpus, unavailable, jobs=None, holders=None, own=(), held=None):
        self.gpus = dict(gpus)
        self.unavailable = set(unavailable)
        self.jobs = jobs or {}
        self.holders = dict(holders or {})
        self.own = set(own) & self.unavailable
        # The nodes another actor holds on purpose (an admin's drain or cordon, a NoExecute taint, another system's hold);
        # None: every unavailable node not only gpufleet's.
        self.held_names = (self.unavailable - self.own) if held is None else set(held) & self.unavailable

    def total(self):
        return sum(self.gpus.values()) if self.gpus else None

    def held(self):
        """The nodes another actor holds on purpose -> who and how (a pending one is left alone at the gate). Nodes out for a
        moment (Slurm NOT_RESPONDING, Kubernetes NotReady) or only kept from new work (a reservation, a NoSchedule taint)
        count against the floor but are not held: the procedure meets them as before."""
        return {name: self.holders.get(name) or 'unavailable' for name in self.held_names}

    def view(self, domains=None, job_aware=True):
        """The gate's :class:`~._gate.SchedulerView` (``domains``: inventory_hostname -> domain, for nodes outside the rollout;
        ``job_aware``: the job rules hold, gpufleet_job_aware)."""
        domains = domains or {}
        return _gate.SchedulerView(total_gpus=self.total(),
                                   unavailable={name: self.gpus.get(name, 0) for name in self.unavailable},
                                   domains={name: domains.get(name) for name in self.unavailable},
                                   held=self.held(), jobs={name: tuple(jobs) for name, jobs in self.jobs.items()},
                                   job_aware=job_aware)


def gres_gpus(gres):
    """GPUs in a Slurm ``Gres=`` value (``_slurm.gres_gpus``): ``gpu:8``, ``gpu:h100:8(S:0-1)``, ``gpu:a100:4,gpu:h100:4``; 0 when none."""
    return _slurm.gres_gpus(gres)


def node_records(text):
    """The node records of ``scontrol show node``: one line each with ``-o``, else a ``NodeName=`` line and its indented lines."""
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith('NodeName=') or not records:
            records.append(line.strip())
        else:
            records[-1] += ' ' + line.strip()
    return records


def slurm_holder(node):
    """Who holds a Slurm node (``_slurm.parse_show_node``) out of service and how, one line; None when it is in service."""
    base, flags = node['base_state'], set(node['flags'])
    out = sorted(_SLURM_OUT_FLAGS.intersection(flags))
    if base not in _SLURM_OUT_BASE and not out:
        return None
    words = ([base] if base in _SLURM_OUT_BASE else []) + out
    reason = node.get('reason') or ''
    return 'Slurm %s%s' % ('+'.join(words), (' (reason: %s)' % reason) if reason else ' (no reason set)')


def slurm_view(text):
    """:class:`Fleet` from ``scontrol show node -o`` (every node; the multi-line form without ``-o`` is read too).

    Out of service: DOWN, FUTURE, UNKNOWN, or a flag such as DRAIN, FAIL, NOT_RESPONDING, MAINTENANCE, REBOOT_*, POWER*; a node
    whose reason gpufleet set (``gpufleet: ...``) is gpufleet's own; held by another actor: drained, down or failed with a
    reason gpufleet did not set (``_slurm.held_by_others``, FAIL)."""
    gpus = {}
    holders = {}
    own = set()
    held = set()
    for record in node_records(text):
        node = _slurm.parse_show_node(record)
        gpus[node['name']] = gres_gpus(node.get('Gres'))
        holder = slurm_holder(node)
        if holder:
            holders[node['name']] = holder
            if _slurm.is_gpufleet_reason(node.get('reason')):
                own.add(node['name'])
            elif _slurm.held_by_others(node) or 'FAIL' in node['flags']:
                held.add(node['name'])
    if not gpus:
        raise RolloutError('scontrol show node -o listed no node')
    return Fleet(gpus, set(holders), holders=holders, own=own, held=held)


def expand_hostlist(text):
    """A Slurm host list (``gpu-[01-03,07],login1``) to names (``_slurm.expand_hostlist``); RolloutError when unreadable."""
    try:
        return _slurm.expand_hostlist(text)
    except _slurm.SlurmParseError as exc:
        raise RolloutError(str(exc)) from None


def _timestamp(text):
    """An ISO time (Slurm's local ``2026-11-24T12:00:00``, or with a zone) to epoch seconds; None when not a time."""
    return _slurm.timestamp(text)


def checkpoint_of(comment):
    """The declared next checkpoint (``gpufleet.io/checkpoint=<ISO time>`` in a job comment or pod annotation) in epoch seconds."""
    return _slurm.declared_checkpoint(comment)


def slurm_jobs(text):
    """``squeue --noheader --format=%i|%N|%e|%S|%k`` (running jobs; the older ``%i|%N|%e|%k`` is read too) -> {node: [Job, ...]};
    each job names every node it runs on."""
    jobs = collections.defaultdict(list)
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split('|', 4)
        if len(fields) == 4:
            fields = fields[:3] + [''] + fields[3:]
        if len(fields) != 5:
            raise RolloutError('unreadable squeue line %r (expected id|nodes|end|start|comment)' % line[:200])
        job_id, nodelist, end, start, comment = fields
        names = expand_hostlist(nodelist)
        started, checkpoint = _timestamp(start), checkpoint_of(comment)
        if checkpoint is not None and started is not None and checkpoint < started:
            checkpoint = None       # declared before a requeue restarted it (Slurm keeps the comment): an old one
        job = _planner.Job(id=job_id.strip().split('+', 1)[0], checkpoint=checkpoint, end=_timestamp(end), nodes=tuple(names),
                           start=started)
        for name in names:
            jobs[name].append(job)
    return dict(jobs)


def kube_jobs(pods_document):
    """The running GPU workloads of a Kubernetes ``PodList`` (``status.phase=Running``) -> {node: [Job, ...]}: one Job per
    workload (``_kube.workload_of``) with every node its pods run on, its checkpoint (the latest ``gpufleet.io/checkpoint`` pod
    annotation) and its start (the earliest pod start)."""
    jobs = collections.defaultdict(list)
    found = _kube.workloads((pods_document or {}).get('items') or [])
    for workload, entry in sorted(found.items()):
        checkpoints = [stamp for stamp in (_timestamp(text) for text in entry['checkpoints']) if stamp is not None]
        starts = [stamp for stamp in (_timestamp(text) for text in entry['starts']) if stamp is not None]
        checkpoint = max(checkpoints) if checkpoints else None
        if checkpoint is not None and starts and checkpoint < max(starts):
            checkpoint = None       # declared before a pod of it (re)started: an old one
        job = _planner.Job(id=workload, checkpoint=checkpoint, nodes=tuple(entry['nodes']), start=min(starts) if starts else None)
        for name in entry['nodes']:
            jobs[name].append(job)
    return dict(jobs)


def kube_holders(item):
    """Who holds a Kubernetes Node out of service and how: [(actor text, gpufleet's own?, held on purpose by another actor?)],
    empty when it is in service. Held on purpose: another's cordon, a NoExecute taint, another system's hold label; NotReady and
    a NoSchedule taint count against the floor only.

    NotReady (a Ready condition that is not True), cordoned (``spec.unschedulable``), a ``NoSchedule``/``NoExecute`` taint
    (except the taints that mirror these two, the GPU dedication taints of :data:`DEDICATION_TAINTS` and gpufleet's soft
    ``PreferNoSchedule`` mark) and another system's hold (:data:`HOLDER_LABELS`).  gpufleet's own: its cordon (its state label
    says so), the taints it added and its quarantine taint."""
    metadata = item.get('metadata') or {}
    labels = metadata.get('labels') or {}
    spec = item.get('spec') or {}
    status = item.get('status') or {}
    ours = labels.get(_kube.STATE_LABEL) in _kube.ACTIVE_STATES
    found = []
    ready = [condition.get('status') for condition in status.get('conditions') or [] if isinstance(condition, dict)
             and condition.get('type') == 'Ready']
    if ready and ready[0] != 'True':
        found.append(('Kubernetes NotReady (Ready=%s)' % ready[0], False, False))
    if spec.get('unschedulable'):
        found.append(('Kubernetes cordon (gpufleet)' if ours else 'Kubernetes cordon by someone else', ours, not ours))
    added = set()
    if ours:
        try:
            added = {(taint.get('key'), taint.get('effect')) for taint in _kube.node_status(item)['added_taints']}
        except _kube.KubeError:
            added = set()
    for taint in spec.get('taints') or []:
        if not isinstance(taint, dict) or taint.get('effect') not in ('NoSchedule', 'NoExecute'):
            continue
        key = taint.get('key') or ''
        if key in _MIRROR_TAINTS or key in DEDICATION_TAINTS or (key, taint.get('value')) in DEDICATION_TAINTS:
            continue
        mine = key == _kube.QUARANTINE_TAINT_KEY or (key, taint.get('effect')) in added
        text = '%s%s:%s' % (key, ('=%s' % taint['value']) if taint.get('value') else '', taint.get('effect'))
        found.append(('taint %s%s' % (text, ' (gpufleet)' if mine else ''), mine, not mine and taint.get('effect') == 'NoExecute'))
    for key, (actor, free) in HOLDER_LABELS.items():
        if key in labels and str(labels[key]) not in free:
            found.append(('%s (label %s=%s)' % (actor, key, labels[key]), False, True))
    return found


def kube_view(nodes_document):
    """:class:`Fleet` from a Kubernetes ``NodeList`` (``kubectl get nodes -o json`` or the API's answer as a mapping); who holds
    each node out of service: :func:`kube_holders`."""
    gpus = {}
    holders = {}
    own = set()
    held = set()
    for item in (nodes_document or {}).get('items') or []:
        metadata = item.get('metadata') or {}
        name = metadata.get('name')
        if not name:
            continue
        status = item.get('status') or {}
        count = (status.get('allocatable') or {}).get(GPU_RESOURCE) or (status.get('capacity') or {}).get(GPU_RESOURCE) or 0
        try:
            gpus[name] = int(count)
        except (TypeError, ValueError):
            raise RolloutError('node %s: %s is %r, not a count' % (name, GPU_RESOURCE, count)) from None
        found = kube_holders(item)
        if found:
            holders[name] = '; '.join(text for text, _mine, _held in found)
            if all(mine for _text, mine, _held in found):
                own.add(name)
            if any(held_ for _text, _mine, held_ in found):
                held.add(name)
    if not gpus:
        raise RolloutError('the Kubernetes API listed no node')
    return Fleet(gpus, set(holders), holders=holders, own=own, held=held)


def static_view(gpus_by_node):
    """:class:`Fleet` without a scheduler: each node's ``gpufleet_gpus`` host variable; nothing is known to be unavailable."""
    gpus = {}
    for name, value in gpus_by_node.items():
        if value is None or value == '':
            return Fleet({}, ())
        try:
            gpus[name] = int(value)
        except (TypeError, ValueError):
            raise RolloutError('%s: gpufleet_gpus must be a whole number, got %r' % (name, value)) from None
    return Fleet(gpus, ())


# ----------------------------------------------------------------------------------------------------------------
# Runs.

def inventory_id(sources):
    """One text naming an inventory: its sources (``ansible_inventory_sources``), absolute, in order."""
    if isinstance(sources, str):
        sources = [sources]
    return ','.join(os.path.abspath(source) if '/' in source or os.path.exists(source) else source for source in sources or [])


def fleet_name(inventory):
    """The fleet lock's name for an inventory: its file name (made safe) and a short hash of the full id."""
    base = os.path.basename((inventory or 'inventory').split(',')[0].rstrip('/')) or 'inventory'
    base = re.sub(r'[^A-Za-z0-9._-]+', '-', base).strip('-.') or 'inventory'
    return '%s-%s' % (base[:60], hashlib.sha256((inventory or '').encode('utf-8')).hexdigest()[:8])


def choose_run(run_id, existing, last_unfinished):
    """(run_id, resume): the given run id (resumed when it has a ledger), else the last unfinished run, else a new one (None)."""
    if run_id:
        return run_id, run_id in existing
    if last_unfinished:
        return last_unfinished, True
    return None, False


def _pin_text(pin):
    return ', '.join('%s %s' % (name, pin[name]) for name in sorted(pin)) if pin else 'nothing (a rolling restart without a pin)'


def resume_pin(run_id, recorded, given, source='gpufleet_pin_file'):
    """The pin a resumed run converges to: the one it recorded at its start, never another.

    ``given``: the pin read from the variables of this invocation (``{}`` when none was given: the recorded pin is used).
    Raises :class:`InputError` (nothing is touched) when ``given`` differs from ``recorded``; the message names the variable
    (``source``), both pins and how to start a new run instead.
    """
    recorded = recorded or {}
    if not given or given == recorded:
        return recorded
    changed = sorted(name for name in set(recorded) | set(given) if recorded.get(name) != given.get(name))
    raise InputError('%s: pins %s, but run %s recorded %s when it started (differs in %s). A resumed run keeps its pin: two pins '
                     'in one fleet are refused, nothing was touched. Resume with the same pin (or without %s: the recorded pin '
                     'is used), or start a new run for the new pin with -e gpufleet_run_id=<a new id>'
                     % (source, _pin_text(given), run_id, _pin_text(recorded), ', '.join(changed), source))


def previous_pin(states, inventory):
    """The pin the fleet ran before this run: that of the newest earlier run of the same inventory that finished with a
    pin (``states``: earlier runs' states, oldest first), else ``{}``."""
    for state in reversed(list(states or [])):
        if state.get('inventory') == inventory and state.get('status') == 'finished' and state.get('pin'):
            return state['pin']
    return {}


def _checks(validation):
    return dict((str(check.get('name')), check) for check in (validation or {}).get('checks') or [] if isinstance(check, dict))


def pin_verified(pin, validation):
    """Whether ``validation`` (``node_validate_result``) shows the node on ``pin``: a passed ``pin`` check (needed when the
    run has a pin; a run without one has nothing to compare)."""
    if not pin:
        return True
    return bool(_checks(validation).get('pin', {}).get('passed') is True)


def release_decision(pin, validation, back_in_service):
    """(state, reason) for a quarantined node an operator released (rollout_control ``release``), after its validation.

    ``done`` only when the validation passed on the run's recorded ``pin`` (its ``pin`` check among them) and the node is back
    in service; otherwise it stays ``quarantined`` with the reason: a node that is healthy but not on the pin is refused with
    what to do (``retry`` puts it through the procedure), never marked done on its health alone.
    """
    if not isinstance(validation, dict) or not isinstance(validation.get('passed'), bool):
        return 'quarantined', 'release refused: no validation result'
    checks = _checks(validation)
    failed = sorted(name for name, check in checks.items() if check.get('passed') is not True)
    if not pin_verified(pin, validation):
        if 'pin' not in checks:
            return 'quarantined', 'release refused: the validation did not compare the node with the run\'s pin (%s)' % _pin_text(pin)
        if failed == ['pin']:
            return 'quarantined', ('release refused: healthy but not on the run\'s pin: %s; retry it (gpufleet_verb=retry) to put '
                                   'it through the procedure' % (checks['pin'].get('message') or 'off the pin'))
    if not validation['passed']:
        return 'quarantined', 'release refused: the validation failed: %s' % (validation.get('message') or ', '.join(failed) or 'failed')
    if not back_in_service:
        return 'quarantined', 'release refused: validated, but the scheduler did not put the node back in service'
    return 'done', 'released: validated on the run\'s pin (%s)' % ', '.join(sorted(checks))


def rollout_view(view, history=None):
    """The gate's :class:`~._gate.Rollout` from the ledger's view (:func:`_ledger.node_view` or ``RunLedger.gate_view``) and the
    circuit breaker's memory of earlier runs.

    Each failed node's ``signature`` and ``rma_suspect`` come from its final ledger event (written by the node's procedure,
    :func:`_phase.final_details`): nothing is read from result files, so a fresh controller sees what the first one saw.
    ``history`` (:func:`breaker_history`, recorded in the run at its start) feeds the circuit breaker: those quarantines count,
    and the newest operator reset of any run applies.
    """
    history = history or {}
    quarantines = tuple(sorted(float(item['time']) for item in history.get('quarantines') or ()))
    resets = [stamp for stamp in (view.breaker_reset, history.get('reset')) if stamp is not None]
    return dataclasses.replace(view, breaker_reset=max(resets) if resets else None, quarantines=view.quarantines + quarantines)


def breaker_history(states, now, window):
    """What the circuit breaker remembers of earlier runs (their ``state.json``, same run folder) at ``now`` (epoch seconds).

    ``{'quarantines': [{'run_id', 'node', 'time'}, ...], 'reset': epoch or None}``: the nodes those runs left
    ``quarantined`` (a node released or retried since no longer counts) within the breaker's ``window`` seconds before
    ``now``, and the newest operator reset of the breaker in any of them (a reset applies to every run after it).
    JSON-safe: the start step hands it to every node's admission.
    """
    quarantines = []
    reset = None
    for state in states:
        stamp = _ledger.epoch(state.get('breaker_reset'))
        if stamp is not None and (reset is None or stamp > reset):
            reset = stamp
        for name, record in (state.get('nodes') or {}).items():
            if record.get('state') != 'quarantined':
                continue
            finished = _ledger.epoch(record.get('finished_at'))
            if finished is not None and now - window < finished <= now:
                quarantines.append({'run_id': state.get('run_id'), 'node': name, 'time': finished})
    quarantines.sort(key=lambda item: (item['time'], str(item['run_id']), item['node']))
    return {'quarantines': quarantines, 'reset': reset}


# Final states a retry (gpufleet_retries) takes back to the queue: the procedure put the node back in service as it was
# (its drain timed out or a disruption budget refused it, or the converge failed before it changed the node, such as a dpkg
# lock held by unattended-upgrades). A failed validation after the upgrade (rolled_back, quarantined) is not retried: that
# is the pin's or the hardware's verdict, for the rollback, the pin-fault detector and the breaker. done and left_alone are
# never retried.
RETRYABLE = ('deferred',)


def retry_decision(policy, record):
    """(retry, reason) for a node that just reached a final state: back to ``pending`` for another attempt?

    ``record`` is the node's ledger record; ``record['retries']`` counts the retries it already had in this run.
    """
    state = record.get('state')
    done = int(record.get('retries') or 0)
    if state not in RETRYABLE or done >= policy.retries:
        return False, ''
    return True, 'retry %d of %d after %s: %s' % (done + 1, policy.retries, state, record.get('reason') or 'no reason recorded')


# ----------------------------------------------------------------------------------------------------------------
# Resume: the done nodes are confirmed with a quick check before they are skipped.

def confirm_expectations(state):
    """{node: GPU count it must show or None} for the ``done`` nodes of a resumed run.

    The count is the one the node showed when it passed in this run (``gpu_count`` of its final ledger event); None when the
    ledger does not say (the GPU check is then not made).
    """
    expected = {}
    for name, record in state['nodes'].items():
        if record.get('state') != 'done':
            continue
        count = record.get('gpu_count')
        expected[name] = count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None
    return expected


def confirm_decision(validation, unreachable=False, pin=None):
    """(state, reason) for a ``done`` node after the quick check of a resume.

    ``done`` when ``validation`` (``node_validate_result``: health, the pin, the GPU count, Fabric Manager,
    nvidia-persistenced, Xid; no dcgmi diag, no NCCL) passed. Otherwise ``pending``: the node is not counted as done, it
    goes back through the whole procedure under the policy (drain, converge, reboot, full validation), and ends ``done``
    again only when that validation passes (or ``rolled_back`` / ``quarantined`` like any node).
    """
    if unreachable:
        return _gate.PENDING, 'failed the quick check on resume: unreachable; back through the procedure'
    if not isinstance(validation, dict) or not isinstance(validation.get('passed'), bool):
        return _gate.PENDING, 'failed the quick check on resume: no validation result; back through the procedure'
    if validation['passed'] and not pin_verified(pin, validation):
        return _gate.PENDING, 'failed the quick check on resume: the node was not compared with the run\'s pin; back through the procedure'
    if validation['passed']:
        checks = [str(check.get('name')) for check in validation.get('checks') or [] if isinstance(check, dict)]
        return 'done', 'confirmed on resume: the quick check passed (%s)' % ', '.join(checks)
    return _gate.PENDING, 'failed the quick check on resume: %s; back through the procedure' % (validation.get('message') or 'failed')


def plan_order(nodes, domains, fleet, earlier):
    """The plan's order of ``nodes``: nodes without running work first, longest first (their last duration in ``earlier``,
    the states of earlier runs, oldest first)."""
    planned = _planner.order(plan_nodes(list(nodes), fleet, domains), fleet.held(), durations=_planner.node_durations(earlier))
    return [item[0].name for item in planned]


def resume_refusal(run_id, state, kind, mode):
    """Why run ``run_id`` (its ``state``) is not resumed by this start (``kind``: the playbook, ``mode``), or None.

    A run is resumed only by the playbook that started it (its nodes converge to its own pin) and in its own mode.
    """
    if kind and state.get('kind') not in (None, kind):
        return ('run %s is a %s run, this is %s: it is not resumed by another playbook (its nodes converge to its own pin). '
                'Finish it with %s, or start a new run with -e gpufleet_run_id=<a new id>' % (run_id, state.get('kind'), kind, state.get('kind')))
    if state.get('mode') not in (None, mode):
        return ('run %s is a %s-mode run: resume it in %s mode (gpufleet_window %s), or start a new run with -e gpufleet_run_id=<a new id>'
                % (run_id, state.get('mode'), state.get('mode'), 'set' if state.get('mode') == 'window' else 'unset'))
    return None


def reopens(state):
    """Whether a resume sets the run ``running`` again: a node is left and nobody but an operator paused it."""
    return (state.get('pause') or {}).get('by') != 'operator' and state['status'] != 'running' \
        and any(record['state'] not in _gate.FINAL for record in state['nodes'].values())


def finishes(state, paused):
    """Whether the finish step marks the run ``finished``: no pause rule holds now (``paused`` false), the run is running (or
    stopped only by its batch's failure share, Ansible's rule, which does not outlive the batch) and every node is final."""
    return not paused and (state['status'] == 'running' or (state.get('pause') or {}).get('rule') == 'batch_budget') \
        and all(record['state'] in _gate.FINAL for record in state['nodes'].values())


def walk(current, target):
    """The states from ``current`` to ``target`` along the ledger's legal transitions (one home: :func:`_phase.walk`)."""
    return _phase.walk(current, target)


def summary(state, members=None, held=None):
    """The run in numbers and one line: counts per state, each node's state and reason, the pause and what is left; with
    several controllers, ``members`` ({name: alive | left | dead}) and the nodes ``held`` by a dead one ({node: member})."""
    counts = collections.Counter(record['state'] for record in state['nodes'].values())
    left = sorted(name for name, record in state['nodes'].items() if record['state'] not in _gate.FINAL)
    pause = state.get('pause') or {}
    shown = ', '.join('%d %s' % (counts[name], name) for name in _gate.STATES if counts.get(name))
    line = 'run %s %s: %s' % (state['run_id'], state.get('status'), shown or 'no nodes')
    if state.get('status') == 'paused':
        line += '; paused (%s): %s' % (pause.get('rule') or pause.get('by') or 'paused', pause.get('reason') or '')
    if left:
        line += '; not finished: %s' % ', '.join(left[:20]) + (' and %d more' % (len(left) - 20) if len(left) > 20 else '')
    by_member = {}
    for name, member in sorted((held or {}).items()):
        by_member.setdefault(member, []).append(name)
    if by_member:
        line += '; held by a dead controller (rerun its slice to resume them): %s' % '; '.join(
            '%s: %s' % (member, ', '.join(names)) for member, names in sorted(by_member.items()))
    nodes = dict((name, {'state': record['state'], 'reason': record.get('reason') or ''}) for name, record in sorted(state['nodes'].items()))
    report = {'run_id': state['run_id'], 'status': state.get('status'), 'counts': dict(counts), 'left': left,
              'pause': state.get('pause'), 'message': line, 'nodes': nodes}
    if members:
        report.update(members=dict(members), held=dict(held or {}))
    return report


def _counts(state):
    """Nodes per state: the ledger head's ``counts`` (no node record read) or counted from a full state's nodes."""
    if isinstance(state.get('counts'), dict):
        return {name: count for name, count in state['counts'].items() if count}
    return summary(state)['counts']


def batch_stop(state, batch, max_fail_percentage, fail_states=_gate.FAILED, failed_before=0):
    """Batch mode: the pause Ansible's own rule would stop the play with after this batch, else None.

    Ansible's linear strategy stops a serial play when the hosts failed so far in the play (``failed_before``, the batches
    before this one, plus this batch's nodes in ``fail_states``: ``gpufleet_fail_states``) exceed ``max_fail_percentage`` %
    of this batch's size, and the play stops when every host of a batch failed. The same rule here lets the run pause (rule
    ``batch_budget``) before the nodes are failed, so the playbook ends its play itself and still finishes the run.
    ``None`` percentage: only a batch that failed whole stops.
    """
    if not batch:
        return None
    failed = sorted(name for name in batch if (state['nodes'].get(name) or {}).get('state') in tuple(fail_states))
    total = int(failed_before) + len(failed)
    whole = len(failed) == len(batch)
    over = max_fail_percentage is not None and total * 100.0 > float(max_fail_percentage) * len(batch)
    if not failed or not (whole or over):
        return None
    return _gate.Decision(_gate.PAUSE, 'batch_budget', 'batch failure budget exceeded: %d of %d node(s) of this batch failed (%s)%s, '
                          'gpufleet_max_fail_percentage %s%%: the rollout stops (Ansible\'s max_fail_percentage of a batch)'
                          % (len(failed), len(batch), ', '.join(failed),
                             (', %d in earlier batches' % int(failed_before)) if failed_before else '',
                             ('%g' % float(max_fail_percentage)) if max_fail_percentage is not None else 'unset'))


def escalation_payload(run_id, decision, state):
    """What the escalation hook receives (JSON POST body, or the command's standard input); ``state``: the full state or the
    ledger's head."""
    return {'event': 'gpufleet.rollout.paused', 'run_id': run_id, 'rule': decision.get('rule'), 'reason': decision.get('reason'),
            'inventory': state.get('inventory'), 'counts': _counts(state)}


def quarantine_payload(run_id, node, state):
    """What the escalation hook receives when a node of the run ends ``quarantined`` (``state``: the full state, or the head
    with ``nodes`` holding this node's record)."""
    record = state['nodes'].get(node) or {}
    return {'event': 'gpufleet.rollout.quarantined', 'run_id': run_id, 'node': node, 'reason': record.get('reason') or '',
            'phase': record.get('phase'), 'inventory': state.get('inventory'), 'counts': _counts(state)}


def group_warnings(jobs, nodes, limit, shown=5):
    """What a start tells the operator about the running multi-node jobs whose nodes of the rollout (``nodes``) outnumber what
    may be in flight (``limit``): their nodes wait until the job ends (gpufleet_job_aware). One line per job, the first
    ``shown``, then a count."""
    found = {}
    for entries in jobs.values():
        for job in entries:
            inside = sorted(set(job.nodes) & nodes)
            if len(inside) > limit and job.id not in found:
                found[job.id] = inside
    lines = ['job %s runs on %d node(s) of the rollout (%s%s) and at most %d may be in flight (gpufleet_window, the failure '
             'budget): its nodes wait until it ends or is requeued (gpufleet_job_aware)'
             % (job_id, len(inside), ', '.join(inside[:8]), ' ...' if len(inside) > 8 else '', limit)
             for job_id, inside in sorted(found.items())[:shown]]
    if len(found) > shown:
        lines.append('%d more job(s) wait like this' % (len(found) - shown))
    return lines


def plan_nodes(nodes, fleet, domains):
    """The planner's :class:`~._planner.PlanNode` list for ``nodes`` from the scheduler's answer."""
    return [_planner.PlanNode(name=name, gpus=fleet.gpus.get(name, 0), domain=domains.get(name), jobs=tuple(fleet.jobs.get(name, ())))
            for name in nodes]


def plan_lines(plan):
    """The plan for people: one line per node (position, canary, start and end from now, what blocks it now), then the prediction."""
    lines = []
    for entry in plan['order']:
        blocked = ''.join('; %s: %s' % (block['rule'], block['reason']) for block in entry['blocked_by'])
        if entry['position'] is None:
            lines.append('  - %-20s not planned%s' % (entry['node'], blocked))
            continue
        mark = 'canary' if entry['canary'] else ''
        lines.append('%3d %-20s %-6s start +%ss end +%ss%s' % (entry['position'], entry['node'], mark, entry['start_in'], entry['end_in'], blocked))
    for job in plan.get('jobs') or []:
        lost = job['gpu_hours_lost']
        lines.append('  job %s on %s: interrupted %d time(s), %s GPU-hour(s) lost' % (
            job['job'], ', '.join(job['nodes']), job['interruptions'], 'unknown' if lost is None else lost))
    lines.append('predicted: %ss for %d node(s), window %d, canary %d (phase times from %d earlier sample(s))'
                 % (plan['predicted_seconds'], plan['nodes_planned'], plan['window'], plan['canary'], plan.get('phase_samples', 0)))
    return lines


def scheduler_retry(waited, pause, timeout, cap=30.0):
    """The gate's next try at a scheduler that did not answer: (seconds to sleep, the pause after that), or None to give up.

    ``waited``: seconds since the first try; ``pause``: this pause (the poll interval at first). The pause doubles up to
    ``cap``; the last sleep ends at ``timeout``, so the gate gives up after about ``timeout`` seconds.
    """
    if waited >= timeout:
        return None
    return max(0.2, min(pause, timeout - waited)), min(pause * 2, cap)
