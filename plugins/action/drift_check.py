# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of gpufleet.lifecycle.drift_check (documentation in plugins/modules/drift_check.py)."""

from __future__ import annotations

import secrets
import shlex

from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _gather
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts import assemble
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._drift import STATUS_NOT_CHECKED, DriftError, compute_drift, render_diff, validate_facts
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._pin import PinError, load_pin

FACTS_MODULE = 'gpufleet.lifecycle.gpu_facts'
ARGUMENT_SPEC = dict(
    pin=dict(type='raw'),
    pin_file=dict(type='path'),
    facts=dict(type='dict'),
    fail_on_broken=dict(type='bool', default=False),
    fail_on_drift=dict(type='bool', default=False),
    driver_flavor=dict(type='str', choices=['server', 'open', 'cuda-drivers']),
)


class ActionModule(ActionBase):
    """Compare the host's gpufleet facts with the pin, on the controller."""

    TRANSFERS_FILES = False

    def _load_pin(self, args):
        return load_pin(pin=args['pin'], pin_file=args['pin_file'], source='pin', find=lambda name: self._find_needle('files', name))

    def _facts(self, args, task_vars, result):
        if args['facts'] is not None:
            return validate_facts(args['facts'])
        facts = (task_vars.get('ansible_facts') or {}).get('gpufleet')
        if facts:
            return facts
        try:
            facts, warnings = self._gather_by_script()
            result['facts_gathered_by'] = 'shell'
            if warnings:
                result.setdefault('warnings', []).extend(warnings)
        except _gather.GatherError as exc:
            # A node without timeout(1), a writable temporary folder or a POSIX sh: the gpu_facts module reads the same.
            result.setdefault('warnings', []).append('%s: GPU facts read by the gpu_facts module instead: %s' % (
                task_vars.get('inventory_hostname', '?'), to_native(exc)))
            gathered = self._execute_module(module_name=FACTS_MODULE, module_args={}, task_vars=task_vars)
            if gathered.get('failed'):
                raise DriftError('gathering GPU facts failed: %s' % gathered.get('msg'))
            facts = gathered['ansible_facts']['gpufleet']
            result['facts_gathered_by'] = 'module'
        result['ansible_facts'] = {'gpufleet': facts}
        return facts

    def _gather_by_script(self):
        """(gpufleet facts, warnings) from one shell command on the node (``_gather.script``), assembled here on the controller."""
        boundary = 'gpufleet-gather-%s' % secrets.token_hex(16)
        argv = _gather.argv(_gather.script(), boundary, _gather.COMMAND_TIMEOUT, _gather.PACKAGE_TIMEOUT, _gather.STATE_DIR)
        command = ' '.join(part for part in (self._compute_environment_string(), shlex.join(argv)) if part)
        output = self._low_level_execute_command(command, sudoable=True, encoding_errors='surrogateescape')
        data = to_bytes(output.get('stdout') or '', errors='surrogateescape')
        raw = _gather.parse(data, boundary, _gather.COMMAND_TIMEOUT, _gather.PACKAGE_TIMEOUT)
        return assemble(raw), raw['warnings']

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        validation, args = self.validate_argument_spec(
            argument_spec=ARGUMENT_SPEC,
            mutually_exclusive=[('pin', 'pin_file')],
            required_one_of=[('pin', 'pin_file')],
        )
        del validation
        host = task_vars.get('inventory_hostname', '?')
        try:
            pins = self._load_pin(args)
            facts = self._facts(args, task_vars, result)
            report = compute_drift(facts, pins['pin'], driver_flavor=args['driver_flavor'] or None)
        except (PinError, DriftError) as exc:
            result.update(failed=True, msg='%s: %s' % (host, to_native(exc)))
            return result

        result.update(report)
        result.update(pin=pins['pin'], previous_pin=pins['previous'], msg=report['message'])
        result['changed'] = report['status'] == 'drifted'
        if self._task.diff and result['changed']:
            before, after = render_diff(report)
            result['diff'] = {'before': before, 'after': after, 'before_header': '%s (actual)' % host, 'after_header': 'pin'}
        if report['status'] == 'broken':
            result.setdefault('warnings', []).append('%s is broken, not compared with the pin: %s' % (host, report['message']))
            result['failed'] = args['fail_on_broken']
        if report['status'] == STATUS_NOT_CHECKED:
            result.setdefault('warnings', []).append('%s: %s' % (host, report['message']))
        if report['status'] in ('drifted', STATUS_NOT_CHECKED) and args['fail_on_drift']:
            result['failed'] = True
        return result
