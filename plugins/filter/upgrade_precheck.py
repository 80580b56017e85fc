# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
name: upgrade_precheck
short_description: Decide, before anything changes, whether gpufleet.lifecycle.node_upgrade goes ahead with a node
version_added: 0.1.0
description:
  - Returns C(action) C(proceed), C(left_alone) (skip flag, or the GPU Operator's driver container manages the driver) or
    C(quarantine) (the node is already broken and I(on_broken) is C(quarantine)), with the reason.
  - A broken node is never upgraded as if it were drifted unless I(on_broken) is C(upgrade).
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
options:
  _input:
    description: The node's C(gpufleet) facts.
    type: dict
    required: true
  on_broken:
    description: What to do with a node that is broken before the upgrade.
    type: str
    choices: [quarantine, skip, upgrade]
    default: quarantine
  skip:
    description: Leave the node alone.
    type: bool
    default: false
  resumed_from:
    description:
      - The rollout ledger state a crash caught the node in (the rollout gate's C(caught)), C("") when not resumed.
      - From C(converging), C(rebooting), C(validating) or C(rolling_back) a broken node goes ahead whatever I(on_broken)
        says (the procedure itself left it half-way, for example NVML newer than the loaded driver before the reboot);
        the validation decides.
    type: str
    default: ""
'''

EXAMPLES = r'''
- name: Decide
  ansible.builtin.set_fact:
    precheck: "{{ ansible_facts['gpufleet'] | gpufleet.lifecycle.upgrade_precheck(on_broken='quarantine') }}"
'''

RETURN = r'''
_value:
  description: C(action) and C(reason).
  type: dict
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._upgrade import UpgradeInputError, precheck


def upgrade_precheck(facts, on_broken='quarantine', skip=False, resumed_from=''):
    try:
        return precheck(facts, on_broken=on_broken, skip=bool(skip), resumed_from=resumed_from or '')
    except UpgradeInputError as exc:
        raise AnsibleFilterError('upgrade_precheck: %s' % exc)


class FilterModule:
    """gpufleet.lifecycle.upgrade_precheck"""

    def filters(self):
        return {'upgrade_precheck': upgrade_precheck}
