# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Decisions of the per-node upgrade procedure (gpufleet.lifecycle.node_upgrade), in one place.

Pure functions, standard library only (no Ansible imports), Python 3.8+.  The role's YAML runs the
steps; these functions decide:

* ``precheck(facts, drain_outcome, ...)``: go ahead, leave the node alone, or quarantine it before anything changes;
* ``reboot_method(...)``: which reboot a node gets (``driver_reload`` falls back to ``os`` when the kernel changes);
* ``rescue_plan(...)``: after a failure, roll back to the previous pin, restore the node, re-validate it, or quarantine it;
* ``versions(facts)``: the component versions a node runs, for the before/after of the result;
* ``result(...)``: the documented ``node_upgrade_result``.

States (``STATES``): ``done``, ``rolled_back``, ``quarantined``, ``deferred``, ``left_alone``.
"""

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _drift

STATES = ('done', 'rolled_back', 'quarantined', 'deferred', 'left_alone')
PHASES = ('precheck', 'cordon', 'wait', 'drain', 'converge', 'reboot', 'validate', 'uncordon',
          'rollback', 'rollback_reboot', 'rollback_validate', 'quarantine', 'restore')
# Phases before anything on the node changes: a failure there puts the node back as it was.
BEFORE_CHANGE = ('precheck', 'cordon', 'wait', 'drain')
ON_BROKEN = ('quarantine', 'skip', 'upgrade')
REBOOT_METHODS = ('os', 'driver_reload', 'bmc', 'none')
VERSION_COMPONENTS = ('driver', 'cuda_driver', 'fabric_manager', 'container_toolkit', 'dcgm', 'cuda_toolkit')


class UpgradeInputError(ValueError):
    """Input of the wrong shape or an unknown choice (names the variable)."""


def _choice(value, choices, name):
    if value not in choices:
        raise UpgradeInputError('%s must be one of %s, got %r' % (name, ', '.join(choices), value))
    return value


# Rollout ledger states a node caught by a crash may be in once this procedure may have changed its packages: broken
# there is how the procedure left it (NVML newer than the loaded driver until the reboot), not how it came.
CHANGED_BY_US = ('converging', 'rebooting', 'validating', 'rolling_back')


def precheck(facts, on_broken='quarantine', skip=False, resumed_from=''):
    """Before the cordon: ``{'action': 'proceed'|'left_alone'|'quarantine', 'reason': str}``.

    A node whose driver the GPU Operator manages (``driver_source: container``) is left alone: a host
    pin must not fight the operator.  A node that is already ``broken`` is never upgraded as if it were
    merely drifted: ``on_broken`` decides (``quarantine``: cordon it with the reason, ``skip``: leave it
    alone and report it, ``upgrade``: go ahead, the validation decides).  ``resumed_from``: the ledger state
    a crash caught the node in (the rollout gate's ``caught``); from :data:`CHANGED_BY_US` a broken node goes
    ahead whatever ``on_broken`` says: this procedure broke it half-way, the procedure finishes and validates.
    """
    _choice(on_broken, ON_BROKEN, 'node_upgrade_on_broken')
    if not isinstance(facts, dict):
        raise UpgradeInputError('facts must be the gpufleet facts (a mapping)')
    if skip:
        return {'action': 'left_alone', 'reason': 'skipped (node_upgrade_skip)'}
    if facts.get('driver_source') == 'container':
        return {'action': 'left_alone', 'reason': "the GPU Operator's driver container manages this node's driver (driver_source=container)"}
    if facts.get('health') == 'broken':
        words = (facts.get('health_message') or '').strip().splitlines()
        if resumed_from in CHANGED_BY_US:
            return {'action': 'proceed', 'reason': 'caught %s by a crash, %s as the upgrade left it: the procedure goes on and '
                                                   'the validation decides' % (resumed_from, facts.get('health_reason'))}
        reason = 'broken before the upgrade (%s): %s' % (facts.get('health_reason'), words[0] if words else 'no message')
        if on_broken == 'quarantine':
            return {'action': 'quarantine', 'reason': reason}
        if on_broken == 'skip':
            return {'action': 'left_alone', 'reason': reason}
    return {'action': 'proceed', 'reason': ''}


def drain_state(drain_result):
    """Map node_drain's outcome to what the procedure does next: ``proceed``, ``left_alone`` or ``deferred``."""
    outcome = (drain_result or {}).get('outcome')
    if outcome in ('done', 'none'):
        return 'proceed'
    if outcome in ('left_alone', 'skipped'):
        return 'left_alone'
    if outcome == 'deferred':
        return 'deferred'
    raise UpgradeInputError('node_drain_result.outcome %r is not one the procedure knows' % (outcome,))


def reboot_method(method, kernel_pending=False, reboot_required=True):
    """``{'method': 'os'|'driver_reload'|'bmc'|'none', 'reason': str}`` for this node.

    ``none`` when nothing needs a reboot and the caller did not ask for one (``reboot_required`` false
    with method ``none``).  ``driver_reload`` is only possible when the kernel does not change.
    """
    _choice(method, REBOOT_METHODS, 'node_upgrade_reboot_method')
    if method == 'driver_reload' and kernel_pending:
        return {'method': 'os', 'reason': 'a new kernel is installed and not booted yet: a driver reload cannot load it'}
    if method == 'none' and reboot_required:
        return {'method': 'os', 'reason': 'the converge needs a reboot (node_upgrade_reboot_method none is only for nodes that need none)'}
    return {'method': method, 'reason': ''}


def _pin_of(value):
    return value if isinstance(value, dict) and value else None


def rescue_plan(phase, unreachable=False, pin_before=None, pin_after=None, previous_pin=None, target_pin=None,
                validation_failed=False, resumed_from=''):
    """After a failure in ``phase``: ``{'action', 'reason', 'rollback_pin'}``.

    ``action``:
      * ``quarantine``: the node is unreachable, or it failed and there is nothing to roll back to
        (a reboot-only run, or a node that was already on the pin);
      * ``restore``: nothing on the node changed yet (pre-check, cordon, wait, drain): put it back as it was;
      * ``rollback``: this run recorded a new pin on the node (``pin.json`` went from ``pin_before`` to
        ``pin_after``): converge to ``previous_pin`` (gpu_stack's ``pin.previous.json``), reboot, validate;
      * ``revalidate``: the converge failed before it recorded or changed anything: validate the node as it is.

    ``resumed_from``: the ledger state a controller crash caught the node in; from :data:`CHANGED_BY_US` the pin the
    node had when this procedure started again (``pin_before``) may already be this rollout's, recorded before the
    crash, so the target pin recorded on the node counts as this run's and ``previous_pin`` is what it rolls back to.
    """
    _choice(phase, PHASES, 'phase')
    before, after, previous, target = _pin_of(pin_before), _pin_of(pin_after), _pin_of(previous_pin), _pin_of(target_pin)
    if unreachable:
        return {'action': 'quarantine', 'reason': 'unreachable after the reboot', 'rollback_pin': None}
    if phase in BEFORE_CHANGE:
        return {'action': 'restore', 'reason': '', 'rollback_pin': None}
    recorded_now = after is not None and (after != before or resumed_from in CHANGED_BY_US) and (target is None or after == target)
    if recorded_now and previous is not None and previous != after:
        return {'action': 'rollback', 'reason': '', 'rollback_pin': previous}
    if recorded_now:
        return {'action': 'quarantine', 'reason': 'no previous pin recorded on the node to roll back to', 'rollback_pin': None}
    if phase == 'converge' and target is not None and before != target and not validation_failed:
        return {'action': 'revalidate', 'reason': 'the converge failed before it changed the node', 'rollback_pin': None}
    if target is None:
        return {'action': 'quarantine', 'reason': 'nothing to roll back (no pin in this run)', 'rollback_pin': None}
    return {'action': 'quarantine', 'reason': 'nothing to roll back (the node was already on the pin)', 'rollback_pin': None}


def versions(facts):
    """``{component: version}`` a node runs (None where unreadable, e.g. while broken)."""
    if not isinstance(facts, dict):
        return {}
    found = {}
    for component in VERSION_COMPONENTS:
        try:
            found[component] = _drift.component_actual(facts, component)[0]
        except Exception:  # pylint: disable=broad-except
            found[component] = None
    return found


def phase_seconds(marks, end):
    """``[[phase, epoch], ...]`` (in order) and the end time -> ``{phase: seconds}`` (a phase entered twice adds up)."""
    seconds = {}
    marks = [mark for mark in (marks or []) if isinstance(mark, (list, tuple)) and len(mark) == 2]
    for index, (phase, start) in enumerate(marks):
        stop = marks[index + 1][1] if index + 1 < len(marks) else end
        try:
            spent = max(0.0, float(stop) - float(start))
        except (TypeError, ValueError):
            continue
        seconds[phase] = round(seconds.get(phase, 0.0) + spent, 1)
    return seconds


def _checks(validation):
    if not isinstance(validation, dict):
        return None
    return [{'name': check.get('name'), 'passed': check.get('passed'), 'message': check.get('message')}
            for check in validation.get('checks') or []]


def result(state, phase, reason='', marks=None, end=None, facts_before=None, facts_after=None, validation=None,
           rollback_validation=None, pin=None, rollback_pin=None, rma=False, scheduler=None, drain=None, reboot=None):
    """The documented ``node_upgrade_result``."""
    _choice(state, STATES, 'state')
    seconds = phase_seconds(marks, end)
    return {
        'state': state,
        'phase': phase,
        'reason': reason or '',
        'passed': state in ('done', 'left_alone'),
        'versions_before': versions(facts_before),
        'versions_after': versions(facts_after) if facts_after is not None else None,
        'pin': pin or None,
        'rollback_pin': rollback_pin or None,
        'validation': _checks(validation),
        'rollback_validation': _checks(rollback_validation),
        'rma_suspect': bool(rma),
        'scheduler': scheduler,
        'drain': drain,
        'reboot': reboot,
        'seconds': seconds,
        'total_seconds': round(sum(seconds.values()), 1),
    }


def summary_stats(rows, batch=None, fail_states=('rolled_back', 'quarantined'), max_fail_percentage=0, results_dir='', run_id=''):
    """The rollout's summary for AWX (set_stats ``gpufleet_rollout_summary``), batch mode: the keys of the window mode's
    (``rollout`` step=finish) ``run_id``, ``status`` (``stopped`` when this batch's failures stop the rollout, ``finished``
    when no node is pending, else ``running``), ``counts`` per state, ``nodes`` (state and reason of each), ``message``."""
    rows = list(rows or [])
    nodes = {}
    for row in rows:
        result = row.get('result') or {}
        nodes[row.get('node')] = {'state': result.get('state', 'pending'), 'reason': result.get('reason') or ''}
    counts = {}
    for entry in nodes.values():
        counts[entry['state']] = counts.get(entry['state'], 0) + 1
    lines = summary(rows, batch=batch, fail_states=fail_states, max_fail_percentage=max_fail_percentage, results_dir=results_dir)
    stops = len(lines) > len(rows)
    status = 'stopped' if stops else 'running' if counts.get('pending') else 'finished'
    shown = ', '.join('%d %s' % (counts[state], state) for state in sorted(counts))
    return {'run_id': run_id, 'status': status, 'counts': counts, 'nodes': nodes, 'results_dir': results_dir,
            'message': lines[-1] if stops else 'run %s %s: %s' % (run_id or '-', status, shown or 'no nodes')}


def summary(rows, batch=None, fail_states=('rolled_back', 'quarantined'), max_fail_percentage=0, results_dir=''):
    """The lines a rollout prints after each batch: one per node (``pending`` when not started yet), and a last
    line when this batch's failures stop the rollout.  ``rows``: ``[{'node', 'result' or None}]`` in play order."""
    rows = list(rows or [])
    lines = []
    for row in rows or []:
        result = row.get('result') or {}
        before = (result.get('versions_before') or {}).get('driver') or '-'
        after = (result.get('versions_after') or {}).get('driver') or '-'
        reason = result.get('reason') or ''
        lines.append('%-12s %-12s %-18s %s -> %s%s' % (
            row.get('node'), result.get('state', 'pending'), result.get('phase', '-'), before, after, (': ' + reason) if reason else ''))
    batch = list(batch or [])
    states = dict((row.get('node'), (row.get('result') or {}).get('state')) for row in rows or [])
    failed = len([node for node in batch if states.get(node) in fail_states])
    if batch and failed * 100 > int(max_fail_percentage or 0) * len(batch):
        lines.append('rollout stops: %d of %d node(s) of this batch failed (max_fail_percentage %s); results in %s' % (
            failed, len(batch), max_fail_percentage or 0, results_dir or '(not written)'))
    return lines
