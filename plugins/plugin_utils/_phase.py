# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The per-node procedure's phases as the rollout ledger names them (controller-side, no Ansible import).

gpufleet.lifecycle.node_upgrade marks each phase with gpufleet.lifecycle.upgrade_phase; when a ledger is configured, the
node walks the ledger's legal transitions to the state of that phase (:data:`PHASE_STATES`), and at the end to its final
state. A phase whose state cannot be reached from where the node is (a rollback's validation while ``rolling_back``)
leaves the ledger as it is.
"""

from __future__ import annotations

import collections

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _procedure
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger

# node_upgrade's phase -> the ledger state the node is in while that phase runs: the procedure's one vocabulary.
PHASE_STATES = _procedure.PHASE_STATES
PHASES = _procedure.PHASES


class PhaseError(ValueError):
    """A phase or a ledger specification this module does not know."""


def walk(current, target):
    """The states from ``current`` to ``target`` along legal transitions, ``current`` excluded; [] when already there or unreachable.

    In-flight states only in between (a final state is never passed through); the shortest walk, so ``cordoned`` to
    ``converging`` goes through ``drained``.
    """
    if current == target or target not in _ledger.STATES:
        return []
    queue = collections.deque([(current, [])])
    seen = {current}
    while queue:
        state, path = queue.popleft()
        for following in _ledger.TRANSITIONS.get(state, ()):
            if following in seen:
                continue
            if following == target:
                return path + [following]
            seen.add(following)
            if following in _ledger.IN_FLIGHT:
                queue.append((following, path + [following]))
    return []


def target_of(phase):
    if phase not in PHASE_STATES:
        raise PhaseError('phase: %r is not a phase of node_upgrade (%s)' % (phase, ', '.join(PHASES)))
    return PHASE_STATES[phase]


def open_ledger(spec):
    """The :class:`_ledger.RunLedger` of ``spec`` (``{backend: file, run_dir, run_id}``), None when ``spec`` is empty."""
    if not spec:
        return None
    if not isinstance(spec, dict) or not spec.get('run_id'):
        raise PhaseError('ledger: must be a mapping with run_id (and run_dir for the file backend), got %r' % (spec,))
    opener = getattr(_ledger, 'open_backend', None)
    if opener is not None:
        backend = opener(spec)
    elif spec.get('backend', 'file') == 'file':
        backend = _ledger.FileBackend(spec.get('run_dir'))
    else:
        raise PhaseError('ledger.backend: %r is not a ledger backend (file)' % (spec.get('backend'),))
    return _ledger.RunLedger.open(backend, spec['run_id'])


# What a node's procedure ends in when it gave no final state: the one home of "no result means quarantined".
NO_RESULT = 'no result from node_upgrade; the node may be cordoned'
RECOVERY_FAILED = 'the recovery failed, the node stays cordoned: '


def final_state(state, reason):
    """(state, reason) a node's procedure ends in: its own final state, else ``quarantined`` with why.

    ``state`` empty with a ``reason``: the procedure's recovery failed with that error (``node_upgrade`` always records a
    result); ``state`` missing altogether: no result came back (the rollout gate's safety net after the role).
    """
    if state in _gate.FINAL:
        return state, reason or ''
    if state == '' and reason:
        return 'quarantined', RECOVERY_FAILED + str(reason)
    return 'quarantined', NO_RESULT


def _count(facts):
    count = facts.get('gpu_count') if isinstance(facts, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None


def final_details(result, node, facts_before=None, facts_after=None):
    """What a node's final ledger event carries, from its ``node_upgrade_result``: what the gate and the report need.

    ``signature`` (:func:`_gate.failure_signature`, lists for JSON; None when it did not fail), ``rma_suspect``, ``phase``,
    ``versions_before``/``versions_after``, ``phase_times`` (seconds per phase), ``gpu_count`` (after, else before) and
    ``interrupted`` (the jobs its drain interrupted, :func:`interrupted`).
    """
    result = result if isinstance(result, dict) else {}
    signature = _gate.failure_signature(result, node)
    return {
        'signature': _lists(signature) if signature else None,
        'rma_suspect': bool(result.get('rma_suspect')),
        'phase': result.get('phase'),
        'versions_before': result.get('versions_before') or {},
        'versions_after': result.get('versions_after'),
        'phase_times': result.get('seconds') or {},
        'gpu_count': _count(facts_after) or _count(facts_before),
        'interrupted': interrupted(result.get('drain')),
    }


def interrupted(drain):
    """The jobs a node's drain interrupted (``node_drain_result.interrupted``: Slurm jobs requeued, Kubernetes workloads
    evicted), each {job, kind, gpus, checkpoint, start, at, nodes}; [] when none or unreadable."""
    found = (drain or {}).get('interrupted') if isinstance(drain, dict) else None
    if not isinstance(found, list):
        return []
    keys = ('job', 'kind', 'gpus', 'checkpoint', 'start', 'at', 'nodes')
    return [{key: entry.get(key) for key in keys} for entry in found if isinstance(entry, dict) and entry.get('job')]


HANDOFF_KEYS = ('labels', 'nhc_paused', 'nhc_released', 'undone', 'kept')


def handoff_of(answer):
    """The hand-off a scheduler step's answer reports (``node_drain_result.handoff``: the labels set and the NodeHealthChecks
    paused by a cordon or drain; the labels put back, kept and the pauses taken back by an uncordon, a deferred drain or a
    quarantine), or None when it reports none (Slurm, no scheduler)."""
    found = answer.get('handoff') if isinstance(answer, dict) else None
    if not isinstance(found, dict):
        return None
    return {key: found[key] for key in HANDOFF_KEYS if key in found}


def _lists(value):
    return [_lists(item) for item in value] if isinstance(value, (list, tuple)) else value


def taken_over(record, member):
    """The controller that took ``record`` (a node in flight) over from ``member`` (this controller), or None."""
    holder = (record or {}).get('member')
    if member and holder and holder != member and record.get('state') in _gate.IN_FLIGHT:
        return holder
    return None


def record(ledger, node, target, reason, details=None, member=None):
    """Walk ``node`` to ``target`` in ``ledger``; the last step carries ``details``; returns the states recorded ([] when none).

    Nothing is written when ``node`` is already in a final state and ``target`` is final too: a final event has one writer.
    ``member``: the controller writing; a node another controller of the run took over (this one's heartbeat went stale) is
    refused (:class:`._ledger.LedgerError`): its new controller writes its phases.
    """
    with ledger.locked(full=False):
        record = ledger.node(node)      # this node's record only: a phase never reads the run's every node
        if record is None:
            raise _ledger.LedgerError('%s is not a node of run %s' % (node, ledger.run_id))
        holder = taken_over(record, member)
        if holder:
            raise _ledger.LedgerError('%s was taken over by controller %s (this controller, %s, was counted dead): it records nothing more'
                                      % (node, holder, member))
        current = record['state']
        if current in _gate.FINAL and target in _gate.FINAL:
            return []
        steps = walk(current, target)
        for step in steps:
            ledger.transition(node, step, reason if step == target else '', details=details if step == target else None)
    return steps
