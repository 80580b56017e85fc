# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
name: node_validation
short_description: Decide whether a GPU node is fit for service from the checks gpufleet.lifecycle.node_validate gathered
version_added: 0.1.0
description:
  - Takes the node's C(gpufleet) facts and what C(gpufleet.lifecycle.node_validate) gathered (drift_check result, kernel log of
    this boot, the C(dcgmi diag) ladder, an optional NCCL C(all_reduce_perf) run) and returns the verdict with one entry per check.
  - Each failed check's message names the check, the GPU (index, PCI address, UUID) and the tool's own words.
  - A check that could not be verified fails.
  - On a node without systemd (the facts' C(systemd) false) the service checks go by what nvidia-smi reports (persistence mode
    per GPU, the per-GPU fabric state for Fabric Manager on NVSwitch systems), never failed only because systemctl is missing.
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
options:
  _input:
    description: The node's C(gpufleet) facts (C(ansible_facts.gpufleet) after C(gpufleet.lifecycle.gpu_facts)).
    type: dict
    required: true
  drift:
    description: The registered result of C(gpufleet.lifecycle.drift_check); omit to skip the pin check.
    type: dict
  expected_gpu_count:
    description: The number of GPUs the node had before (a GPU lost across a reboot fails); omit to skip.
    type: int
  kernel_log:
    description: The registered result of the command that printed the kernel log of this boot (C(rc), C(stdout), C(stderr)); omit to skip.
    type: dict
  diag:
    description:
      - The C(dcgmi diag) ladder, a list of C(level) and C(result) (the registered C(gpufleet.lifecycle.dcgm_diag) result, null when
        not run), or the registered result of C(gpufleet.lifecycle.dcgm_diag) with I(levels) (its C(ladder)).
    type: raw
  diag_levels:
    description: With I(diag) a C(dcgm_diag levels=...) result that could not start the ladder, the levels it was asked for.
    type: list
    elements: int
  nccl:
    description: The registered result of the C(all_reduce_perf) command; omit to skip.
    type: dict
  nccl_min_busbw:
    description: Minimum average bus bandwidth in GB/s; 0 only requires a run without wrong results.
    type: float
    default: 0
  persistenced:
    description:
      - Require persistence mode - every GPU reports it Enabled (nvidia-smi, the facts' C(gpus[].persistence_mode)), or the
        C(nvidia-persistenced) unit is active and no GPU reports it Disabled. Fails naming the GPUs that report Disabled, and when
        neither answers; a node without systemd (the facts' C(systemd) false) is judged on what nvidia-smi reports.
    type: bool
    default: true
'''

EXAMPLES = r'''
- name: Decide
  ansible.builtin.set_fact:
    node_validate_result: >-
      {{ ansible_facts['gpufleet'] | gpufleet.lifecycle.node_validation(drift=drift, expected_gpu_count=8, diag=[{'level': 1, 'result': diag}]) }}
'''

RETURN = r'''
_value:
  description: C(passed), C(checks) (each C(name), C(passed), C(message)), C(failed) (names) and C(message) (the failures in one line).
  type: dict
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import ValidationInputError, evaluate


def node_validation(facts, drift=None, expected_gpu_count=None, kernel_log=None, diag=None, nccl=None, nccl_min_busbw=0, persistenced=True,
                    diag_levels=None):
    try:
        return evaluate(facts, drift=drift, expected_gpu_count=expected_gpu_count, kernel_log=kernel_log, diag=diag, diag_levels=diag_levels, nccl=nccl,
                        nccl_min_busbw=nccl_min_busbw, persistenced=persistenced)
    except ValidationInputError as exc:
        raise AnsibleFilterError('node_validation: %s' % exc)


class FilterModule:
    """gpufleet.lifecycle.node_validation"""

    def filters(self):
        return {'node_validation': node_validation}
