# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of gpufleet.lifecycle.read_pin (documentation in plugins/modules/read_pin.py)."""

from __future__ import annotations

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._components import COMPONENTS, INSTALLED, READ_ONLY
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._pin import PinError, read_checked

ARGUMENT_SPEC = dict(
    pin=dict(type='raw'),
    pin_file=dict(type='path'),
    name=dict(type='str', default='pin'),
    component=dict(type='str'),
    version=dict(type='raw'),
)


class ActionModule(ActionBase):
    """Read and validate a pin on the controller; return it with the component table."""

    TRANSFERS_FILES = False

    @staticmethod
    def _named(message, args):
        """With component/version, the variable alone names the field (nvidia_driver_version, not nvidia_driver_version.driver)."""
        if args['component']:
            return message.replace('%s.%s' % (args['name'], args['component']), args['name'])
        return message

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        host = task_vars.get('inventory_hostname', '?')
        pin = args['pin']
        if args['component']:
            # One component's version from a role variable (nvidia_driver_version): the same reader, named by the variable.
            if pin not in (None, {}) or args['pin_file']:
                result.update(failed=True, msg='%s: give either component and version, or a pin' % host)
                return result
            pin = {args['component']: args['version']}
        try:
            pins = read_checked(pin=pin, pin_file=args['pin_file'], name=args['name'], find=lambda name: self._find_needle('files', name))
        except PinError as exc:
            result.update(failed=True, msg='%s: %s' % (host, self._named(to_native(exc), args)))
            return result
        result.update(pins)
        shown = ', '.join('%s %s' % (component, pins['pin'][component]) for component in pins['pinned'] if component != 'vbios')
        result.update(changed=False, components=list(COMPONENTS), installed_components=list(INSTALLED),
                      read_only_components=list(READ_ONLY), msg='pin from %s: %s' % (pins['source'], shown))
        return result
