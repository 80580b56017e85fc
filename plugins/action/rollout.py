# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of gpufleet.lifecycle.rollout, the rollout gate (documentation in plugins/modules/rollout.py).

A dispatcher: the arguments checked against :data:`ARGUMENT_SPEC`, then one step of plugin_utils, handed a
:class:`~._run_context.RunContext` (the arguments, the task's variables, the result): ``check``, ``plan`` and ``start``
in _rollout_start, ``confirm``, ``admit`` and ``settle`` in _rollout_node, ``summary``, ``finish`` and ``control`` (the
verbs) in _rollout_run.
"""

from __future__ import annotations

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _slurm
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _policy
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout_node
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout_run
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout_start
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._run_context import GateError, RunContext

STEPS = {
    'check': _rollout_start.check, 'start': _rollout_start.start, 'confirm': _rollout_node.confirm, 'admit': _rollout_node.admit,
    'settle': _rollout_node.settle, 'summary': _rollout_run.summary, 'finish': _rollout_run.finish, 'plan': _rollout_start.plan,
    'control': _rollout_run.control,
}
MODES = ('window', 'batch')
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
    member=dict(type='str', default=''),
    poll=dict(type='float', default=5.0),
    admit_timeout=dict(type='float', default=0.0),
    scheduler_timeout=dict(type='float', default=300.0),
    result=dict(type='dict', default={}),
    verb=dict(type='str', choices=list(_rollout_run.VERBS)),
    passed=dict(type='bool', default=False),
    reason=dict(type='str', default=''),
    history=dict(type='int', default=20),
    breaker=dict(type='dict', default={}),
    validation=dict(type='dict', default={}),
    unreachable=dict(type='bool', default=False),
)
# The variables the check and start steps validate first (_rollout.check_inputs).
INPUT_VARIABLES = tuple(name for name, _choices in _rollout.INPUTS) + _ledger.SPEC_VARIABLES


class ActionModule(ActionBase):
    """The rollout gate: start a run, admit a node, settle it, finish the run, plan, operator verbs."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        if self._task.args.get('step') in ('check', 'start'):
            # The rollout's inputs where they enter, before the arguments (which name the argument, not the variable).
            try:
                _rollout.check_inputs({name: self._templar.template(task_vars[name]) for name in INPUT_VARIABLES if name in task_vars})
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
            STEPS[step](RunContext(args, task_vars, result, template=self._templar.template))
        except _policy.PolicyError as exc:
            result.update(failed=True, msg='%s: policy: %s' % (host, to_native(exc)))
        except _rollout.InputError as exc:
            result.update(failed=True, msg=to_native(exc))
        except _ledger.LockHeld as exc:
            result.update(failed=True, msg='%s: a second rollout is refused: %s' % (host, to_native(exc)), holder=exc.holder)
        except (GateError, _ledger.LedgerError, _rollout.RolloutError, _slurm.SlurmParseError, OSError) as exc:
            result.update(failed=True, msg='%s: rollout %s: %s' % (host, step, to_native(exc)))
        return result
