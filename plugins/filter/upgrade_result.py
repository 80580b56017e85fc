# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
name: upgrade_result
short_description: Build the documented node_upgrade_result of gpufleet.lifecycle.node_upgrade
version_added: 0.1.0
description:
  - Returns C(state), C(phase), C(reason), C(passed), C(versions_before), C(versions_after), C(pin), C(rollback_pin),
    C(validation), C(rollback_validation), C(rma_suspect), C(scheduler), C(drain), C(reboot), C(seconds) (per phase) and
    C(total_seconds). See docs/upgrade.md.
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
options:
  _input:
    description: The final state, one of C(done), C(rolled_back), C(quarantined), C(deferred), C(left_alone).
    type: str
    required: true
  phase:
    description: The phase the procedure stopped in.
    type: str
    required: true
  reason:
    description: Why (empty for C(done)).
    type: str
  marks:
    description: Phase start times, a list of C([phase, epoch seconds]) in order.
    type: list
    elements: list
  end:
    description: End time in epoch seconds.
    type: float
  facts_before:
    description: The C(gpufleet) facts before the upgrade.
    type: dict
  facts_after:
    description: The C(gpufleet) facts at the end (null when the node could not be read).
    type: dict
  validation:
    description: The C(node_validate_result) on the new pin.
    type: dict
  rollback_validation:
    description: The C(node_validate_result) after the rollback.
    type: dict
  pin:
    description: The pin this run converged to.
    type: dict
  rollback_pin:
    description: The pin the node was rolled back to.
    type: dict
  rma:
    description: The node failed on the new and on the previous pin (suspect hardware).
    type: bool
    default: false
  scheduler:
    description: The scheduler of the node.
    type: str
  drain:
    description: The C(node_drain_result) of the drain.
    type: dict
  reboot:
    description: How the node was rebooted (method, fallback reason, BMC power cycle).
    type: dict
'''

EXAMPLES = r'''
- name: Result
  ansible.builtin.set_fact:
    node_upgrade_result: "{{ 'done' | gpufleet.lifecycle.upgrade_result(phase='uncordon', marks=marks, end=now().timestamp()) }}"
'''

RETURN = r'''
_value:
  description: The result (docs/upgrade.md).
  type: dict
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._upgrade import UpgradeInputError, result


def upgrade_result(state, phase, reason='', marks=None, end=None, facts_before=None, facts_after=None, validation=None, rollback_validation=None,
                   pin=None, rollback_pin=None, rma=False, scheduler=None, drain=None, reboot=None):
    try:
        return result(state, phase, reason=reason, marks=marks, end=end, facts_before=facts_before, facts_after=facts_after,
                      validation=validation, rollback_validation=rollback_validation, pin=pin, rollback_pin=rollback_pin,
                      rma=bool(rma), scheduler=scheduler, drain=drain, reboot=reboot)
    except UpgradeInputError as exc:
        raise AnsibleFilterError('upgrade_result: %s' % exc)


class FilterModule:
    """gpufleet.lifecycle.upgrade_result"""

    def filters(self):
        return {'upgrade_result': upgrade_result}
