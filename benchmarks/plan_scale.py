# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Time the rollout planner on a large fleet (a benchmark, not a test).

    python benchmarks/plan_scale.py [NODES]        # default 10000

Builds NODES nodes (8 GPUs each, 64 racks, a quarter with running jobs: some with a declared checkpoint,
some with an end time, some with neither; 1 % cordoned by others), a policy with window 10 %, canary 2,
a domain limit and a capacity floor, and prints how long ``_planner.plan`` takes (best of 5).
"""

import datetime
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'build', 'collections'))
LINK = os.path.join(ROOT, 'build', 'collections', 'ansible_collections', 'gpufleet', 'lifecycle')
if not os.path.islink(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink(os.path.relpath(ROOT, os.path.dirname(LINK)), LINK)

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate, _planner, _policy  # noqa: E402


def fleet(count, now):
    nodes = []
    unavailable = {}
    for index in range(count):
        name = 'gpu%05d' % index
        jobs = ()
        if index % 4 == 1:
            jobs = (_planner.Job('job%d' % index, checkpoint=now + (index % 97) * 60),)
        elif index % 4 == 2 and index % 8 == 2:
            jobs = (_planner.Job('job%d' % index, end=now + (index % 13) * 600),)
        elif index % 16 == 3:
            jobs = (_planner.Job('job%d' % index),)
        nodes.append(_planner.PlanNode(name, gpus=8, domain='rack%02d' % (index % 64), jobs=jobs))
        if index % 100 == 99:
            unavailable[name] = 8
    return nodes, unavailable


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    now = datetime.datetime(2026, 11, 24, 22, 30, tzinfo=datetime.timezone.utc)
    nodes, unavailable = fleet(count, now.timestamp())
    policy = _policy.load_policy({'gpufleet_window': '10%', 'gpufleet_canary': 2, 'gpufleet_domain_var': 'rack',
                                  'gpufleet_domain_max': 2, 'gpufleet_capacity_floor': '80%'})
    scheduler = _gate.SchedulerView(total_gpus=count * 8, unavailable=unavailable)
    best = None
    for _attempt in range(5):
        start = time.perf_counter()
        result = _planner.plan(policy, nodes, scheduler, now)
        elapsed = time.perf_counter() - start
        best = elapsed if best is None else min(best, elapsed)
    print('planned %d nodes (window %d, canary %d) in %.3f s (best of 5); predicted makespan %d s'
          % (result['nodes_total'], result['window'], result['canary'], best, result['predicted_seconds']))


if __name__ == '__main__':
    main()
