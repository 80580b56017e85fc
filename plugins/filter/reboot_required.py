# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
name: reboot_required
short_description: Whether a node converged to a pin needs a reboot (the rule gpufleet.lifecycle.node_upgrade's procedure uses)
version_added: 0.1.0
description:
  - True when the driver or the kernel packages changed in this run, an earlier run installed a kernel the node did not boot
    yet (C(pending_reboot) in the facts), or the pin's driver is not the loaded one yet (the node reads a driver/library
    mismatch, no loaded driver, a loaded driver other than the pinned one, or with I(driver_flavor) a loaded kernel module of
    the other flavor).
  - The one home of this rule is C(module_utils/_procedure.py) (C(reboot_required)); C(gpufleet.lifecycle.gpu_stack) sets
    C(gpu_stack_reboot_required) with this filter, C(gpufleet.lifecycle.node_upgrade) decides with the same function.
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
options:
  _input:
    description: The node's C(gpufleet) facts read before the converge.
    type: dict
    required: true
  pin:
    description: The components the converge installs, component to version.
    type: dict
    required: true
  changed_components:
    description: The components whose packages moved in this run (C(package_pin_changed_components)).
    type: list
    elements: str
    default: []
  check_mode:
    description: A check-mode run (nothing was installed, so a loaded driver other than the pin's is not counted).
    type: bool
    default: false
  driver_flavor:
    description:
      - The driver flavor the converge installs (C(server), C(open), C(cuda-drivers)); a loaded module of the other flavor
        (the facts' C(kernel_module_flavor)) needs a reboot. Empty - the flavor is not considered.
    type: str
    default: ''
'''

EXAMPLES = r'''
- name: Record whether a reboot is required
  ansible.builtin.set_fact:
    reboot_required: >-
      {{ ansible_facts['gpufleet'] | gpufleet.lifecycle.reboot_required(pin={'driver': '580.65.06'},
           changed_components=package_pin_changed_components) }}
'''

RETURN = r'''
_value:
  description: Whether the node needs a reboot.
  type: bool
'''

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._procedure import reboot_required as _reboot_required


def reboot_required(facts, pin=None, changed_components=None, check_mode=False, driver_flavor=''):
    changed = list(changed_components or [])
    return _reboot_required(facts, pin, changed, check_mode=bool(check_mode), driver_flavor=driver_flavor or None)


class FilterModule:
    """gpufleet.lifecycle.reboot_required"""

    def filters(self):
        return {'reboot_required': reboot_required}
