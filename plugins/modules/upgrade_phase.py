#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: upgrade_phase
short_description: Mark a phase of the per-node procedure, or record its result (facts, rollout ledger, results file)
version_added: 0.1.0
description:
  - The bookkeeping of M(gpufleet.lifecycle.node_upgrade), in one controller-side task per phase; nothing runs on the node.
  - With I(phase), sets the facts C(_node_upgrade_phase) and C(_node_upgrade_marks) (phase start times, from which the result's
    seconds per phase come) plus any I(facts), and, when I(ledger) is given, walks the node in the rollout ledger along legal
    transitions to the state of that phase (C(drain) - C(cordoned), C(converge) - C(drained) then C(converging), C(reboot) -
    C(rebooting), C(validate) - C(validating), C(rollback) - C(rolling_back)); a node still C(pending) is admitted first.
  - With I(result), builds the documented C(node_upgrade_result) (docs/upgrade.md), writes it to
    C(<results_dir>/<inventory_hostname>.json) on the controller (atomically) and moves the node to its final state in the ledger.
  - A ledger that cannot take the change (not this node's run, an illegal transition) gives a warning, never a lost result; the
    node keeps its last ledger state, which a resumed rollout re-checks.
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
attributes:
  check_mode:
    support: full
    details: Sets the facts and writes the results file; the ledger is not changed in check mode.
  diff_mode:
    support: none
  idempotent:
    support: none
    description: Every call records a phase start or a result.
options:
  phase:
    description:
      - The phase that starts - C(precheck), C(drain), C(converge), C(reboot), C(validate), C(uncordon), C(rollback),
        C(rollback_reboot), C(rollback_validate), C(restore), C(quarantine). Exactly one of I(phase) and I(result).
    type: str
  start:
    description: With I(phase), the first phase - the procedure's facts are reset (nothing left from an earlier run in the play).
    type: bool
    default: false
  facts:
    description: More facts to set with the mark (what the phase before it found).
    type: dict
    default: {}
  result:
    description:
      - The node's outcome - C(state) (C(done), C(rolled_back), C(quarantined), C(deferred), C(left_alone)), C(phase), C(reason),
        C(marks), C(facts_before), C(facts_after), C(validation), C(rollback_validation), C(pin), C(rollback_pin), C(rma),
        C(scheduler), C(drain), C(reboot). Exactly one of I(phase) and I(result).
      - An empty C(state) with a C(reason) (the procedure's recovery failed with that error) ends C(quarantined).
      - With a ledger, the node's final event carries what the rollout gate and the report need - C(signature) (how it
        failed), C(rma_suspect), C(phase), C(versions_before), C(versions_after), C(phase_times), C(gpu_count); the results
        file is an export, never read back by the gate. A node already final is not written again.
    type: dict
  results_dir:
    description: Controller folder to write the result to (created when missing); empty - not written.
    type: path
    default: ''
  ledger:
    description:
      - The rollout's ledger, C({backend, run_dir, run_id}) as the rollout gate sets it in C(gpufleet_ledger); empty - no ledger.
    type: dict
    default: {}
  reason:
    description: The reason recorded with the ledger event (a result's own reason by default).
    type: str
    default: ''
notes:
  - An action plugin; runs on the controller only.
'''

EXAMPLES = r'''
- name: Mark the start of the converge phase
  gpufleet.lifecycle.upgrade_phase:
    phase: converge
    ledger: "{{ gpufleet_ledger | default({}) }}"

- name: Record the node's result
  gpufleet.lifecycle.upgrade_phase:
    result:
      state: done
      phase: uncordon
      marks: "{{ _node_upgrade_marks }}"
    results_dir: /var/log/gpufleet/run-1
'''

RETURN = r'''
ansible_facts:
  description: C(_node_upgrade_phase) and C(_node_upgrade_marks) (with I(phase)) or C(node_upgrade_result) (with I(result)), plus I(facts).
  returned: always
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
