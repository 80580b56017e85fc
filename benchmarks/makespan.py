#!/usr/bin/env python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Makespan of a rolling restart in window mode against serial batches of the same size, on an uneven fleet, in one run.

Not a test. Brings up a simulated Slurm fleet (default 20 nodes), gives the nodes uneven boot times with the sim's
``slow_boot`` fault (most nodes boot in 0 to 9 s more, a slow tail of a few in 40 s more: a large server's POST), then
runs the real ``gpufleet.lifecycle.rolling_restart`` playbook (reboot only: gate, ledger, node_upgrade) twice:

* window mode, ``gpufleet_window=W`` (forks W + 2), the gate refilling the window as each node finishes: a first run on
  a fleet the collection never rolled (the plan's order is the inventory's), then a second run in the same run folder,
  whose plan puts the nodes the first run timed longest first (``_planner.node_durations``);
* batch mode, ``gpufleet_serial=W`` (forks W), Ansible waiting for the slowest node of every batch.

For each it prints the makespan (ansible-playbook's wall time) and its ratio to the lower bound: the sum of the nodes' own
durations divided by W. A node's own duration is what it takes alone: from its admission to its final state in the window
run's ledger (``state.json`` ``admitted_at`` / ``finished_at``: the gate's answer, facts, the role, the settle step). The
batch run cannot give it: Ansible's serial strategy moves the hosts of a batch task by task together, so every node's
phase times there include waiting for the slowest node of its batch. Both modes run without a canary (serial has none).
Also printed: the task results per node and the controller CPU seconds per node. The order of the slow nodes is a seeded
shuffle (``--seed``), printed.

    PATH=$PWD/.venv/bin:$PATH python benchmarks/makespan.py [--nodes 20] [--window 4] [--seed 7] [--keep]
"""

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# The checkout's conftest makes it importable as ansible_collections.gpufleet.lifecycle.
import conftest as _root_conftest  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import

sys.path.remove(ROOT)
del sys.modules['conftest']
sys.path.insert(0, os.path.join(ROOT, 'tests', 'integration'))

from conftest import SIM, ansible_environment  # noqa: E402  pylint: disable=wrong-import-position,import-error

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger  # noqa: E402  pylint: disable=wrong-import-position

PLAYBOOK = os.path.join(ROOT, 'playbooks', 'rolling_restart.yml')
SIM_VARS = {'gpufleet_boot_time_command': 'stat -c %Z /proc/1', 'gpufleet_reboot_timeout': 150, 'gpufleet_drain_timeout': 30,
            'node_upgrade_wait_sleep': 1, 'gpufleet_gate_poll': 1, 'gpufleet_max_fail_percentage': 100,
            'node_validate_kernel_log_command': ['sh', '-c', 'cat /var/lib/gpufleet-sim/xid.log 2>/dev/null; true']}


def fleet(state_dir, *arguments):
    process = subprocess.run([os.path.join(SIM, 'fleet'), '--state-dir', state_dir] + list(arguments),
                             capture_output=True, text=True, check=False, timeout=3600)
    if process.returncode != 0:
        raise SystemExit('fleet %s failed (rc=%s):\n%s%s' % (' '.join(arguments), process.returncode, process.stdout, process.stderr))
    return process.stdout


def boot_delays(count, seed):
    """Seconds of extra boot time per node: most 0, 3, 6 or 9, a slow tail (one in five) of 40; a seeded shuffle."""
    delays = [40 if index % 5 == 4 else (index % 4) * 3 for index in range(count)]
    random.Random(seed).shuffle(delays)
    return delays


def task_results(document, nodes):
    """Task results per node (skipped ones included), summed over every play."""
    counts = dict((node, 0) for node in nodes)
    for play in document.get('plays', []):
        for task in play['tasks']:
            for host in task['hosts']:
                if host in counts:
                    counts[host] += 1
    return counts


def own_durations(run_dir):
    """Seconds from admission to the final state of every node, from the newest run's state.json (window mode)."""
    runs = sorted(name for name in os.listdir(run_dir) if os.path.isfile(os.path.join(run_dir, name, 'state.json')))
    if not runs:
        raise SystemExit('%s: no run' % run_dir)
    with open(os.path.join(run_dir, runs[-1], 'state.json'), encoding='utf-8') as handle:
        nodes = json.load(handle)['nodes']
    return dict((name, _ledger.epoch(record['finished_at']) - _ledger.epoch(record['admitted_at'])) for name, record in nodes.items())


def run_mode(inventory, run_dir, nodes, window, mode):
    """One rolling restart; returns (makespan, tasks per node, CPU seconds per node, states)."""
    variables = dict(SIM_VARS, gpufleet_run_dir=run_dir, gpufleet_results_dir=os.path.join(run_dir, 'results-%d' % time.time()))
    if mode.startswith('window'):
        variables.update(gpufleet_window=window, gpufleet_canary=0)
        forks = window + 2
    else:
        variables.update(gpufleet_serial=window)
        forks = window
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    process = subprocess.run(['ansible-playbook', '-i', inventory, PLAYBOOK, '-f', str(forks), '-e', json.dumps(variables)],
                             env=ansible_environment(), cwd=ROOT, capture_output=True, text=True, check=False, timeout=7200)
    makespan = time.time() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    results = {}
    folder = variables['gpufleet_results_dir']
    for node in nodes:
        path = os.path.join(folder, '%s.json' % node)
        if os.path.exists(path):
            with open(path, encoding='utf-8') as handle:
                results[node] = json.load(handle)
    missing = sorted(set(nodes) - set(results))
    if process.returncode != 0 or missing:
        raise SystemExit('%s mode: ansible-playbook rc=%s, no result for %s\n%s' % (mode, process.returncode, missing, process.stderr[-3000:]))
    try:
        counts = task_results(json.loads(process.stdout), nodes)
    except ValueError:
        counts = {}
    states = sorted(set(result['state'] for result in results.values()))
    tasks = sum(counts.values()) / float(len(nodes)) if counts else float('nan')
    return makespan, tasks, cpu / len(nodes), states


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--nodes', type=int, default=20)
    parser.add_argument('--window', type=int, default=4)
    parser.add_argument('--seed', type=int, default=7)
    parser.add_argument('--state-dir', default=os.path.join(ROOT, 'build', 'bench-makespan'))
    parser.add_argument('--keep', action='store_true', help='leave the fleet up')
    args = parser.parse_args()
    if args.nodes < 20 or args.window < 2:
        parser.error('at least 20 nodes and a window of 2')
    inventory = fleet(args.state_dir, 'up', '--nodes', str(args.nodes), '--scheduler', 'slurm').strip().splitlines()[-1]
    with open(inventory, encoding='utf-8') as handle:
        nodes = sorted(json.load(handle)['all']['children']['gpu']['hosts'])
    delays = boot_delays(len(nodes), args.seed)
    try:
        for node, seconds in zip(nodes, delays):
            if seconds:
                fleet(args.state_dir, 'fault', node, 'slow_boot', 'seconds=%d' % seconds)
        print('nodes %d, window %d, seed %d; extra boot seconds per node: %s' % (
            len(nodes), args.window, args.seed, ' '.join('%s=%d' % (node[-2:], seconds) for node, seconds in zip(nodes, delays))))
        rows = {}
        lower = None
        window_dir = os.path.join(args.state_dir, 'runs-window')
        shutil.rmtree(window_dir, ignore_errors=True)
        for mode in ('window (first run)', 'window (timed)', 'serial'):
            run_dir = window_dir if mode.startswith('window') else os.path.join(args.state_dir, 'runs-serial')
            if not mode.startswith('window'):
                shutil.rmtree(run_dir, ignore_errors=True)
            rows[mode] = run_mode(inventory, run_dir, nodes, args.window, mode)
            if mode.startswith('window'):
                durations = own_durations(run_dir)
                lower = sum(durations.values()) / float(args.window)
                print('node durations (admission to final state, %s): %s; lower bound %.1f s (sum / %d)' % (
                    mode, ' '.join('%s=%.0f' % (node[-2:], durations[node]) for node in nodes), lower, args.window))
            makespan, tasks, cpu, states = rows[mode]
            print('%-18s makespan %6.1f s: %.2f x the lower bound; tasks per node %.1f; controller CPU s per node %.2f; final states %s'
                  % (mode, makespan, makespan / lower, tasks, cpu, ', '.join(states)))
        print('window (timed) / serial makespan: %.2f' % (rows['window (timed)'][0] / rows['serial'][0]))
    finally:
        if not args.keep:
            fleet(args.state_dir, 'down')
    return 0


if __name__ == '__main__':
    sys.exit(main())
