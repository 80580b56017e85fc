# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
name: upgrade_rescue
short_description: Decide what gpufleet.lifecycle.node_upgrade does after a failure
version_added: 0.1.0
description:
  - Returns C(action) C(restore) (nothing changed yet, put the node back), C(rollback) (this run recorded a new pin on the node,
    converge to the previous one), C(revalidate) (the converge failed before it changed the node) or C(quarantine) (unreachable,
    or nothing to roll back to), with C(reason) and C(rollback_pin).
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
options:
  _input:
    description: The phase that failed.
    type: str
    required: true
  unreachable:
    description: The node did not come back from its reboot.
    type: bool
    default: false
  pin_before:
    description: The node's recorded pin (C(/etc/gpufleet/pin.json)) before this run; null when none.
    type: dict
  pin_after:
    description: The node's recorded pin after the failure.
    type: dict
  previous_pin:
    description: The node's C(/etc/gpufleet/pin.previous.json) after the failure.
    type: dict
  target_pin:
    description: The pin this run converges to; null for a reboot-only run.
    type: dict
  validation_failed:
    description: The validation ran and failed.
    type: bool
    default: false
  resumed_from:
    description:
      - The rollout ledger state a controller crash caught the node in (C(node_upgrade_resumed_from)), C("") when not resumed.
      - From C(converging), C(rebooting), C(validating) or C(rolling_back) the pin recorded on the node before the crash
        counts as this run's, so a failure rolls back to I(previous_pin) instead of quarantining the node as
        "already on the pin".
    type: str
    default: ""
'''

EXAMPLES = r'''
- name: Decide
  ansible.builtin.set_fact:
    plan: "{{ 'validate' | gpufleet.lifecycle.upgrade_rescue(pin_before=before, pin_after=after, previous_pin=previous, target_pin=pin) }}"
'''

RETURN = r'''
_value:
  description: C(action), C(reason), C(rollback_pin).
  type: dict
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._upgrade import UpgradeInputError, rescue_plan


def upgrade_rescue(phase, unreachable=False, pin_before=None, pin_after=None, previous_pin=None, target_pin=None, validation_failed=False,
                   resumed_from=''):
    try:
        return rescue_plan(phase, unreachable=bool(unreachable), pin_before=pin_before, pin_after=pin_after, previous_pin=previous_pin,
                           target_pin=target_pin, validation_failed=bool(validation_failed), resumed_from=resumed_from or '')
    except UpgradeInputError as exc:
        raise AnsibleFilterError('upgrade_rescue: %s' % exc)


class FilterModule:
    """gpufleet.lifecycle.upgrade_rescue"""

    def filters(self):
        return {'upgrade_rescue': upgrade_rescue}
