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

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger

# node_upgrade's phase -> the ledger state the node is in while that phase runs (None: no state of its own).
PHASE_STATES = {
    'precheck': None,
    'drain': 'cordoned',
    'converge': 'converging',
    'reboot': 'rebooting',
    'validate': 'validating',
    'uncordon': None,
    'rollback': 'rolling_back',
    'rollback_reboot': 'rolling_back',
    # A re-validation without a rollback (nothing had changed) validates; after a rollback the node stays rolling_back.
    'rollback_validate': 'validating',
    'restore': None,
    'quarantine': None,
}
PHASES = tuple(PHASE_STATES)


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


def record(ledger, node, target, reason):
    """Walk ``node`` to ``target`` in ``ledger``; returns the states recorded ([] when none)."""
    with ledger.locked() as state:
        if node not in state['nodes']:
            raise _ledger.LedgerError('%s is not a node of run %s' % (node, ledger.run_id))
        steps = walk(state['nodes'][node]['state'], target)
        for step in steps:
            ledger.transition(node, step, reason if step == target else '')
    return steps
