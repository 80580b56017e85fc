# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of gpufleet.lifecycle.upgrade_phase (documentation in plugins/modules/upgrade_phase.py).

Thin: the procedure's rules are module_utils/_procedure.py, the result module_utils/_upgrade.py, the ledger's walk
plugin_utils/_phase.py; this action carries the state between them and the role's YAML.
"""

from __future__ import annotations

import json
import os
import time

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _procedure
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _upgrade
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _phase
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _pin

ARGUMENT_SPEC = dict(
    step=dict(type='str', required=True, choices=['start', 'advance', 'fail', 'result']),
    options=dict(type='dict', default={}),
    converge=dict(type='bool', default=True),
    pin=dict(type='raw'),
    pin_file=dict(type='str', default=''),
    outcome=dict(type='raw'),
    message=dict(type='str', default=''),
    facts=dict(type='raw'),
    validation=dict(type='raw'),
    scheduler=dict(type='str'),
    results_dir=dict(type='path', default=''),
    ledger=dict(type='dict', default={}),
)
FACT = '_node_upgrade'


def _owner():
    """Who runs the procedure: this ansible-playbook process (the worker's parent), by its pid and its start time, so that
    a state a fact cache kept from another run is never taken for this run's."""
    parent = os.getppid()
    try:
        with open('/proc/%d/stat' % parent, encoding='utf-8') as handle:
            started = handle.read().rsplit(')', 1)[-1].split()[19]
    except (OSError, IndexError):
        started = ''
    return '%d:%s' % (parent, started)


def _write_result(folder, node, document):
    """<folder>/<node>.json, written atomically (the controller-side export of the node's result; an error names the file)."""
    os.makedirs(folder, mode=0o755, exist_ok=True)
    path = os.path.join(folder, '%s.json' % node)
    _ledger.write_atomic(path, (json.dumps(document, indent=4, sort_keys=True) + '\n').encode('utf-8'), mode=0o644)
    return path


class ActionModule(ActionBase):
    """Start, advance or fail the per-node procedure (its state in the fact _node_upgrade), or record its result."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def _pin(self, args, options, facts):
        """The pin this node converges to: node_upgrade_pin (or its file), or the node's own previous pin; None for none."""
        if not options['converge'] or options['skip']:
            return None
        try:
            if options['previous_pin']:
                recorded = (facts or {}).get('previous_pin')
                if not isinstance(recorded, dict) or not recorded:
                    return None
                return _pin.read_checked(pin=recorded, name='node_upgrade_previous_pin (the pin.previous.json on the node)')['pinned_versions']
            return _pin.read_checked(pin=args['pin'], pin_file=args['pin_file'], name='node_upgrade_pin',
                                     find=lambda name: self._find_needle('files', name))['pinned_versions']
        except _pin.PinError as exc:
            raise _procedure.ProcedureError(to_native(exc))

    def _decide(self, args, task_vars, node, now):
        """(state, error): the procedure's state after this step; error a StepFailed's message (the node failed the step)."""
        state = task_vars.get(FACT)
        options = dict(args['options'], node=node, converge=args['converge'])
        step = args['step']
        owner = _owner()
        if step == 'start':
            facts = (task_vars.get('ansible_facts') or {}).get('gpufleet')
            options = _procedure.checked_options(options)
            return _procedure.start(options, facts, self._pin(args, options, facts), now, owner=owner), ''
        if step == 'fail':
            return _procedure.fail(state, args['message'], facts_now=_procedure.facts_of(args['facts']), validation=args['validation'], now=now,
                                   options=options, owner=owner), ''
        if not _procedure.fresh(state, owner):
            raise _procedure.ProcedureError('no procedure in progress on %s: nothing to advance' % node)
        try:
            return _procedure.advance(state, args['outcome'], now), ''
        except _procedure.StepFailed as exc:
            return exc.state, to_native(exc)

    def _result(self, args, task_vars, node, now, result):
        """The node's result from the procedure's state (the last scheduler step's answer applied first)."""
        state = task_vars.get(FACT)
        owner = _owner()
        if isinstance(state, dict) and state.get('owner') not in (None, owner):
            state = None        # another run's (a fact cache): this run's procedure never started
        error = args['message']
        outcome = args['outcome']
        if _procedure.fresh(state, owner) and state['next'] in ('uncordon', 'quarantine') and isinstance(outcome, dict) \
                and outcome.get('action') == state['next']:
            try:
                state = _procedure.advance(state, outcome, now)
            except _procedure.ProcedureError as exc:
                # An answer of a step that did not finish (its scheduler call failed): no final state, the error says why.
                error = error or to_native(exc)
        fields = _procedure.result_fields(state, error)
        before = {'gpu_count': fields.pop('gpu_count_before')}
        # The one rule for a procedure that ended without a state (its recovery failed): quarantined, with why.
        fields['state'], fields['reason'] = _phase.final_state(fields['state'], fields['reason'])
        unreachable = isinstance(state, dict) and state.get('unreachable')
        facts_after = None if unreachable else (task_vars.get('ansible_facts') or {}).get('gpufleet')
        document = _upgrade.result(end=now, facts_after=facts_after, scheduler=args['scheduler'], **fields)
        details = _phase.final_details(document, node, before, facts_after)
        handoff = _phase.handoff_of(outcome) or _phase.handoff_of(document.get('drain'))
        if handoff is not None:
            details['handoff'] = handoff
        if args['results_dir']:
            result['results_file'] = _write_result(args['results_dir'], node, dict(document, node=node))
        ended = dict(state, next='end', state=document['state'], reason=document['reason']) if isinstance(state, dict) else None
        return document, details, ended

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        node = task_vars.get('inventory_hostname')
        now = time.time()
        before = task_vars.get(FACT) if args['step'] != 'start' and _procedure.fresh(task_vars.get(FACT), _owner()) else {}
        facts = {}
        details = None
        error = ''
        try:
            if args['step'] == 'result':
                document, details, ended = self._result(args, task_vars, node, now, result)
                facts['node_upgrade_result'] = document
                if ended is not None:
                    facts[FACT] = ended
                target = document['state']
                reason = document['reason']
            else:
                state, error = self._decide(args, task_vars, node, now)
                facts[FACT] = state
                # The ledger follows the phase; a node that ends here (left alone at the pre-check) is recorded by the result.
                target = _phase.target_of(state['phase']) if state['phase'] != (before or {}).get('phase') else None
                reason = ''
                # The hand-off the drain made (or undid) goes with the phase it leads to: the ledger names it while in flight.
                handoff = _phase.handoff_of(args['outcome']) if args['step'] == 'advance' else None
                details = {'handoff': handoff} if handoff is not None and target else None
        except (_procedure.ProcedureError, _phase.PhaseError, ValueError, TypeError, OSError) as exc:
            return dict(result, failed=True, msg='%s: upgrade_phase %s: %s' % (node, args['step'], to_native(exc)))
        result['ledger'] = []
        if args['ledger'] and target and not self._task.check_mode:
            try:
                ledger = _phase.open_ledger(args['ledger'])
                # The node's final event carries its result (signature, versions, phase times): the gate reads nothing else.
                result['ledger'] = _phase.record(ledger, node, target, reason, details=details, member=args['ledger'].get('member'))
            except (_phase.PhaseError, _ledger.LedgerError, OSError, ValueError) as exc:
                # The node's own result stands; the ledger keeps its last state, which a resume re-checks.
                result.setdefault('warnings', []).append('%s: the ledger did not take %s: %s' % (node, target, to_native(exc)))
        if error:
            # The node failed the step (not fit for service): the role's rescue recovers it (step fail).
            return dict(result, failed=True, msg=error, changed=False)
        result.update(changed=False, ansible_facts=facts)
        return result
