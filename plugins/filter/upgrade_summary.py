# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
name: upgrade_summary
short_description: The lines a rollout prints after each batch (one per node, and why it stops)
version_added: 0.1.0
description:
  - One line per node with its state, phase, driver before and after and reason; C(pending) for a node not started yet.
  - A last line when the failed nodes of this batch exceed I(max_fail_percentage), saying that the rollout stops and where the results are.
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
options:
  _input:
    description: The nodes in play order (C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars), where each node's C(node_upgrade_result) is read (a node without one is C(pending)).
    type: dict
    required: true
  batch:
    description: The nodes of this batch.
    type: list
    elements: str
  fail_states:
    description: The states that count as failed.
    type: list
    elements: str
    default: [rolled_back, quarantined]
  max_fail_percentage:
    description: The play's C(max_fail_percentage).
    type: int
    default: 0
  results_dir:
    description: Where the result files are.
    type: str
  stats:
    description:
      - Return the rollout's summary for AWX instead of the lines (what C(set_stats) hands on as C(gpufleet_rollout_summary)),
        with C(run_id), C(status) (C(stopped), C(running) or C(finished)), C(counts) per state, C(nodes) (each node's C(state) and
        C(reason)), C(results_dir) and C(message).
    type: bool
    default: false
  run_id:
    description: The rollout's run id, for I(stats=true).
    type: str
'''

EXAMPLES = r'''
- name: Print every node's result
  ansible.builtin.debug:
    msg: "{{ ansible_play_hosts_all | gpufleet.lifecycle.upgrade_summary(hostvars=hostvars, batch=ansible_play_batch) }}"

- name: Hand AWX the summary
  ansible.builtin.set_stats:
    data:
      gpufleet_rollout_summary: "{{ ansible_play_hosts_all | gpufleet.lifecycle.upgrade_summary(hostvars=hostvars, batch=ansible_play_batch, stats=true) }}"
    aggregate: false
'''

RETURN = r'''
_value:
  description: The lines; with I(stats=true) the summary (a dict).
  type: raw
'''

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._upgrade import summary, summary_stats


def upgrade_summary(nodes, hostvars=None, batch=None, fail_states=('rolled_back', 'quarantined'), max_fail_percentage=0, results_dir='',
                    stats=False, run_id=''):
    rows = []
    for node in nodes or []:
        variables = (hostvars or {}).get(node) or {}
        result = variables.get('node_upgrade_result') if 'node_upgrade_result' in variables else None
        rows.append({'node': node, 'result': result if isinstance(result, dict) else None})
    if stats:
        return summary_stats(rows, batch=batch, fail_states=fail_states, max_fail_percentage=max_fail_percentage, results_dir=results_dir,
                             run_id=run_id)
    return summary(rows, batch=batch, fail_states=fail_states, max_fail_percentage=max_fail_percentage, results_dir=results_dir)


class FilterModule:
    """gpufleet.lifecycle.upgrade_summary"""

    def filters(self):
        return {'upgrade_summary': upgrade_summary}
