# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Live rollout progress: one line per node state change and a periodic fleet line.

Controller-side, no Ansible import, no clock of its own (every call takes ``now``, epoch seconds).  The callback feeds
:meth:`Progress.change` with what it sees (the ledger's events, or the procedure's phases and final result) and prints
what comes back:

    gpu-03 drained → converging (2m14s)
    fleet: 3 done, 2 in flight, 10 pending, 1 failed; budget 1/2; about 14m left

The time in brackets is how long the node was in the state it left.  The fleet line comes at most every
``interval`` seconds and only while something changed since the last one.
"""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._report_render import duration

ARROW = '\u2192'
DONE = ('done', 'left_alone')
FAILED = _gate.FAILED


class Progress:
    """The nodes' states as the progress lines know them."""

    def __init__(self, interval=60.0, max_fail_percentage=None):
        self.interval = float(interval)
        self.max_fail_percentage = max_fail_percentage
        self.nodes = {}          # name -> [state, since, started]
        self.expected = set()    # nodes of the rollout (pending until seen)
        self.durations = []      # seconds from start to a final state of finished nodes
        self.peak = 0
        self.last_line = None
        self.dirty = False

    def expect(self, names):
        """Nodes of the rollout that have not started yet count as pending."""
        self.expected.update(names)

    def change(self, node, state, now, reason=''):
        """Record ``node`` entering ``state``; the line to print, or None when the state is not new."""
        entry = self.nodes.get(node)
        if entry is not None and entry[0] == state:
            return None
        self.expected.add(node)
        if entry is None:
            entry = self.nodes[node] = [None, now, now]
        previous, since = entry[0], entry[1]
        entry[0], entry[1] = state, now
        if state == _gate.PENDING:
            entry[2] = now
        if state in _gate.FINAL and previous not in _gate.FINAL:
            self.durations.append(max(0.0, now - entry[2]))
        self.peak = max(self.peak, self.counts()['in_flight'])
        self.dirty = True
        if previous is None:
            line = '%s %s' % (node, state)
        else:
            line = '%s %s %s %s (%s)' % (node, previous, ARROW, state, duration(now - since))
        if reason and (state in FAILED or state in ('deferred', 'left_alone', 'quarantined')):
            line += ': %s' % ' '.join(reason.split())[:160]
        return line

    def counts(self):
        counts = {'done': 0, 'in_flight': 0, 'pending': 0, 'failed': 0, 'other': 0}
        for state, _since, _started in self.nodes.values():
            if state in DONE:
                counts['done'] += 1
            elif state in FAILED:
                counts['failed'] += 1
            elif state == 'deferred' or state == _gate.PENDING or state is None:
                counts['pending'] += 1
            elif state in _gate.IN_FLIGHT or state not in _gate.STATES:
                counts['in_flight'] += 1
        counts['pending'] += len(self.expected - set(self.nodes))
        return counts

    def eta(self, now):
        """Seconds left, or None until a node finished: the mean node time over the widest window seen so far."""
        if not self.durations:
            return None
        counts = self.counts()
        mean = sum(self.durations) / len(self.durations)
        slots = max(1, self.peak)
        flying = [now - started for state, _since, started in self.nodes.values() if state in _gate.IN_FLIGHT or
                  (state not in _gate.STATES and state is not None)]
        remaining = max([max(0.0, mean - elapsed) for elapsed in flying] or [0.0])
        waves = -(-counts['pending'] // slots)
        return remaining + waves * mean

    def fleet_line(self, now, force=False):
        """The fleet line when it is due (``interval`` passed and something changed) or ``force``; else None."""
        if not force and (not self.dirty or (self.last_line is not None and now - self.last_line < self.interval)):
            return None
        if not self.nodes and not self.expected:
            return None
        self.last_line, self.dirty = now, False
        counts = self.counts()
        line = 'fleet: %d done, %d in flight, %d pending, %d failed' % (counts['done'], counts['in_flight'], counts['pending'],
                                                                        counts['failed'])
        total = len(self.expected | set(self.nodes))
        if self.max_fail_percentage is not None and total:
            allowed = int(float(self.max_fail_percentage) * total // 100)
            line += '; budget %d/%d' % (counts['failed'], allowed)
        eta = self.eta(now)
        if counts['in_flight'] or counts['pending']:
            line += '; about %s left' % duration(eta) if eta is not None else '; time left unknown until a node finishes'
        return line
