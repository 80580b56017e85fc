# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the per-node upgrade procedure (gpufleet.lifecycle.node_upgrade) reports: its result and the batch summary.

Pure functions, standard library only (no Ansible imports), Python 3.8+.  The procedure's decisions are
module_utils/_procedure.py; these functions format what it found:

* ``versions(facts)``: the component versions a node runs, for the before/after of the result;
* ``result(...)``: the documented ``node_upgrade_result``;
* ``summary(...)`` / ``summary_stats(...)``: the lines a batch prints and the AWX summary of a batch.
"""

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _drift

STATES = ('done', 'rolled_back', 'quarantined', 'deferred', 'left_alone')
VERSION_COMPONENTS = ('driver', 'cuda_driver', 'fabric_manager', 'container_toolkit', 'dcgm', 'cuda_toolkit')


class UpgradeInputError(ValueError):
    """Input of the wrong shape or an unknown choice (names the variable)."""


def choice(value, choices, name, error=UpgradeInputError):
    """``value`` when it is one of ``choices``, else ``error`` naming the variable ``name`` (the procedure's and the result's check)."""
    if value not in choices:
        raise error('%s must be one of %s, got %r' % (name, ', '.join(choices), value))
    return value


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


def _takeover(takeover):
    """The take-over as the result shows it: from (the driver source taken over), evidence, and what the uninstaller did
    (command, rc, the last lines of its output; null when it did not run)."""
    if not isinstance(takeover, dict):
        return None
    ran = takeover.get('uninstaller') if isinstance(takeover.get('uninstaller'), dict) else None
    return {'from': takeover.get('from'), 'evidence': takeover.get('evidence') or '', 'uninstaller': ran}


def result(state, phase, reason='', marks=None, end=None, facts_before=None, facts_after=None, validation=None,
           rollback_validation=None, pin=None, rollback_pin=None, rma=False, scheduler=None, drain=None, reboot=None,
           versions_before=None, takeover=None):
    """The documented ``node_upgrade_result``; ``versions_before`` (what :func:`versions` read at the start) instead of
    ``facts_before``; ``takeover``: the procedure's take-over of a runfile driver (None when there was none).  ``driver_source``
    and ``driver_source_evidence``: where the node's driver comes from after the run (its facts then; null when not read)."""
    choice(state, STATES, 'state')
    seconds = phase_seconds(marks, end)
    return {
        'state': state,
        'phase': phase,
        'reason': reason or '',
        'passed': state in ('done', 'left_alone'),
        'versions_before': versions_before if versions_before is not None else versions(facts_before),
        'versions_after': versions(facts_after) if facts_after is not None else None,
        'pin': pin or None,
        'rollback_pin': rollback_pin or None,
        'validation': _checks(validation),
        'rollback_validation': _checks(rollback_validation),
        'rma_suspect': bool(rma),
        'scheduler': scheduler,
        'drain': drain,
        'reboot': reboot,
        'takeover': _takeover(takeover),
        'driver_source': facts_after.get('driver_source') if isinstance(facts_after, dict) else None,
        'driver_source_evidence': facts_after.get('driver_source_evidence') if isinstance(facts_after, dict) else None,
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
