# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of gpufleet.lifecycle.upgrade_phase (documentation in plugins/modules/upgrade_phase.py)."""

from __future__ import annotations

import json
import os
import time

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _upgrade
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _phase

ARGUMENT_SPEC = dict(
    phase=dict(type='str'),
    start=dict(type='bool', default=False),
    facts=dict(type='dict', default={}),
    result=dict(type='dict'),
    results_dir=dict(type='path', default=''),
    ledger=dict(type='dict', default={}),
    reason=dict(type='str', default=''),
)
# The procedure's facts at its start (start=true): nothing left over from an earlier run of the role in the same play.
START_FACTS = {
    '_node_upgrade_state': '', '_node_upgrade_reason': '', '_node_upgrade_unreachable': False, '_node_upgrade_validation': None,
    '_node_upgrade_rollback_validation': None, '_node_upgrade_rollback_pin': None, '_node_upgrade_rollback_failure': None,
    '_node_upgrade_converge_pin': None, '_node_upgrade_pin_recorded': None, '_node_upgrade_rma': False,
    '_node_upgrade_reboot_report': {}, '_node_upgrade_drain': None, '_node_upgrade_facts_before': {}, '_node_upgrade_target': None,
}
RESULT_KEYS = ('state', 'phase', 'reason', 'marks', 'facts_before', 'facts_after', 'validation', 'rollback_validation', 'pin',
               'rollback_pin', 'rma', 'scheduler', 'drain', 'reboot')


def _write_result(folder, node, document):
    """<folder>/<node>.json, written atomically (the controller-side export of the node's result; an error names the file)."""
    os.makedirs(folder, mode=0o755, exist_ok=True)
    path = os.path.join(folder, '%s.json' % node)
    _ledger.write_atomic(path, (json.dumps(document, indent=4, sort_keys=True) + '\n').encode('utf-8'), mode=0o644)
    return path


class ActionModule(ActionBase):
    """Mark a phase of gpufleet.lifecycle.node_upgrade (facts, ledger), or build, record and return its result."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        node = task_vars.get('inventory_hostname')
        if bool(args['phase']) == bool(args['result']):
            return dict(result, failed=True, msg='%s: upgrade_phase takes a phase or a result, exactly one' % node)
        now = time.time()
        facts = {}
        details = None
        try:
            if args['phase']:
                target = _phase.target_of(args['phase'])
                marks = [] if args['start'] else list(task_vars.get('_node_upgrade_marks') or [])
                if args['start']:
                    facts.update(START_FACTS)
                facts.update(args['facts'])
                facts.update(_node_upgrade_phase=args['phase'], _node_upgrade_marks=marks + [[args['phase'], now]])
            else:
                given = args['result']
                unknown = sorted(set(given) - set(RESULT_KEYS))
                if unknown:
                    raise _phase.PhaseError('result: unknown keys %s (known: %s)' % (', '.join(unknown), ', '.join(RESULT_KEYS)))
                # The one rule for a procedure that ended without a state (its recovery failed): quarantined, with why.
                given['state'], given['reason'] = _phase.final_state(given.get('state'), given.get('reason'))
                document = _upgrade.result(end=now, **given)
                facts['node_upgrade_result'] = document
                target = document['state']
                details = _phase.final_details(document, node, given.get('facts_before'), given.get('facts_after'))
                if args['results_dir']:
                    result['results_file'] = _write_result(args['results_dir'], node, dict(document, node=node))
        except (_phase.PhaseError, ValueError, TypeError, OSError) as exc:
            return dict(result, failed=True, msg='%s: upgrade_phase: %s' % (node, to_native(exc)))
        result['ledger'] = []
        if args['ledger'] and target and not self._task.check_mode:
            reason = args['reason'] or (facts.get('node_upgrade_result') or {}).get('reason') or ''
            try:
                ledger = _phase.open_ledger(args['ledger'])
                # The node's final event carries its result (signature, versions, phase times): the gate reads nothing else.
                result['ledger'] = _phase.record(ledger, node, target, reason, details=details)
            except (_phase.PhaseError, _ledger.LedgerError, OSError, ValueError) as exc:
                # The node's own result stands; the ledger keeps its last state, which a resume re-checks.
                result.setdefault('warnings', []).append('%s: the ledger did not take %s: %s' % (node, target, to_native(exc)))
        result.update(changed=False, ansible_facts=facts)
        return result
