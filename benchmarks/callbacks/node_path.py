# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A callback for benchmarks/tasks_per_node.py --files (not part of the collection): each task result's host, task file and
line, and action, in run order, written as JSON to $GPUFLEET_NODE_PATH at the end of the run."""

from __future__ import annotations

import json
import os

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    """Records where each task result came from."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'node_path'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.rows = []

    def _record(self, result, status):
        task = result._task  # pylint: disable=protected-access
        self.rows.append({'host': result._host.get_name(), 'path': task.get_path() or '',  # pylint: disable=protected-access
                          'action': getattr(task, 'resolved_action', None) or task.action, 'name': task.get_name(), 'status': status})

    def v2_runner_on_ok(self, result):
        self._record(result, 'ok')

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, 'failed')

    def v2_runner_on_skipped(self, result):
        self._record(result, 'skipped')

    def v2_runner_on_unreachable(self, result):
        self._record(result, 'unreachable')

    def v2_playbook_on_stats(self, stats):
        target = os.environ.get('GPUFLEET_NODE_PATH')
        if target:
            with open(target, 'w', encoding='utf-8') as handle:
                json.dump(self.rows, handle, indent=1)
