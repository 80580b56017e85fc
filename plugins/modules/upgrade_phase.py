#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: upgrade_phase
short_description: Start, advance or recover the per-node procedure of node_upgrade, or record its result
version_added: 0.1.0
description:
  - The controller-side half of M(gpufleet.lifecycle.node_upgrade); nothing runs on the node. The procedure's state is one fact,
    C(_node_upgrade); every decision is C(module_utils/_procedure.py), and its C(next) names the step the role's YAML runs next
    (C(drain), C(converge), C(reboot), C(power_cycle), C(validate), C(uncordon), C(quarantine), C(end)).
  - I(step=start) reads the pin (I(pin) or I(pin_file), with the collection's one pin reader, or with I(options.previous_pin) the
    node's own previous pin from its C(gpufleet) facts) and decides, from the node's C(gpufleet) facts, whether to go ahead - one
    driver source per node (a converge on a C(runfile) or C(unowned) driver, or any run on a GPU Operator node, ends
    C(left_alone) with the reason; with I(options.driver_takeover) a C(runfile) node is taken over).
  - I(step=advance) takes what the step C(next) named returned (I(outcome)) and decides the next one; a node that failed the
    validation fails the task (not fit for service), which the role's rescue recovers.
  - I(step=fail) decides the recovery after a failed step (I(message), the node's facts read again I(facts), the I(validation));
    a state that is not in progress starts a new procedure, in the pre-check, that puts the node back.
  - I(step=result) applies the last scheduler step's answer (I(outcome)), builds the documented C(node_upgrade_result)
    (docs/upgrade.md), writes it to C(<results_dir>/<inventory_hostname>.json) on the controller (atomically) and moves the
    node to its final state in the ledger; a procedure that never reached a final state ends C(quarantined) with I(message).
  - With I(ledger), each new phase walks the node in the rollout ledger along legal transitions to the state of that phase
    (C(drain) - C(cordoned), C(converge) - C(drained) then C(converging), C(reboot) - C(rebooting), C(validate) - C(validating),
    C(rollback) - C(rolling_back)); a node still C(pending) is admitted first. A ledger that cannot take the change gives a
    warning, never a lost result; the node keeps its last ledger state, which a resumed rollout re-checks.
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
attributes:
  check_mode:
    support: full
    details: Decides and sets the facts and writes the results file; the ledger is not changed in check mode.
  diff_mode:
    support: none
  idempotent:
    support: none
    description: Every call moves the procedure on or records a result.
options:
  step:
    description: C(start), C(advance), C(fail) or C(result).
    type: str
    required: true
    choices: [start, advance, fail, result]
  options:
    description:
      - With I(step=start) (and I(step=fail) before a start) - the role's choices, C(previous_pin), C(on_broken), C(skip),
        C(resumed_from), C(reboot), C(reboot_method), C(power_cycle_on_hang), C(bmc) (a BMC is configured), C(reason),
        C(reboot_timeout), C(driver_takeover) (take a C(runfile) driver over), C(driver_flavor) (the flavor the converge
        installs) (C(roles/node_upgrade/vars/main.yml)). A choice it does not know fails naming the variable.
    type: dict
    default: {}
  converge:
    description: With I(step=start), converge to a pin; false - a reboot-only run.
    type: bool
    default: true
  pin:
    description: With I(step=start), the pin (component to version).
    type: raw
  pin_file:
    description: With I(step=start), a pin file on the controller instead of I(pin).
    type: str
    default: ''
  outcome:
    description:
      - With I(step=advance), what the step returned - C(node_drain_result) after the drain; C(facts), C(changed_components),
        C(check_mode), C(takeover) (C(package_pin_takeover), what NVIDIA's uninstaller did) after the converge; C(reload) and
        C(os) (the registered results) after the reboot; C(back) after the
        power cycle; C(node_validate_result) after the validation.
      - With I(step=result), C(node_drain_result) of the last step (the uncordon or the quarantine); ignored when its C(action)
        is not the step the procedure is at.
    type: raw
  message:
    description: With I(step=fail), the failed task's message; with I(step=result), the error of a procedure that ended without a state.
    type: str
    default: ''
  facts:
    description: With I(step=fail), the registered result of C(gpufleet.lifecycle.gpu_facts) run after the failure (skipped, failed or unreachable - not read).
    type: raw
  validation:
    description: With I(step=fail), C(node_validate_result) (used when the validation failed).
    type: raw
  scheduler:
    description: With I(step=result), the scheduler, for the result.
    type: str
  results_dir:
    description: With I(step=result), the controller folder to write the result to (created when missing); empty - not written.
    type: path
    default: ''
  ledger:
    description:
      - The rollout's ledger, C({backend, run_dir, run_id}) as the rollout gate sets it in C(gpufleet_ledger); empty - no ledger.
    type: dict
    default: {}
notes:
  - An action plugin; runs on the controller only.
'''

EXAMPLES = r'''
- name: Start the procedure
  gpufleet.lifecycle.upgrade_phase:
    step: start
    pin: {driver: 580.65.06}
    options: {reason: gpufleet upgrade}
    ledger: "{{ gpufleet_ledger | default({}) }}"

- name: Follow the drain's answer
  gpufleet.lifecycle.upgrade_phase:
    step: advance
    outcome: "{{ node_drain_result }}"

- name: Record the node's result
  gpufleet.lifecycle.upgrade_phase:
    step: result
    outcome: "{{ node_drain_result | default(none) }}"
    results_dir: /var/log/gpufleet/run-1
'''

RETURN = r'''
ansible_facts:
  description: C(_node_upgrade) (the procedure's state), and with I(step=result) C(node_upgrade_result).
  returned: success
  type: dict
ledger:
  description: The ledger states recorded for the node by this call, in order.
  returned: always
  type: list
  elements: str
  sample: [drained, converging]
results_file:
  description: The results file written.
  returned: when I(results_dir) is set
  type: str
'''
