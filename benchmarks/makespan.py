#!/usr/bin/env python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Makespan of a rolling restart in window mode against serial batches of the same size, on an uneven fleet, in one run.

Not a test. Brings up a simulated Slurm fleet (default 20 nodes), gives the nodes uneven boot times with the sim's
``slow_boot`` fault (most nodes boot in 0 to 9 s more, a slow tail of a few in 40 s more: a large server's POST), then
runs the real ``gpufleet.lifecycle.rolling_restart`` playbook (reboot only: gate, ledger, node_upgrade) twice:

* window mode, ``gpufleet_window=W`` (forks W + 2), the gate refilling the window as each node finishes: a first run in
  a fresh run folder (no earlier timings: the plan's order is the inventory's), then a second run in the same run folder,
  whose plan puts the nodes the first run timed longest first (``_planner.node_durations``);
* batch mode, ``gpufleet_serial=W`` (forks W), Ansible waiting for the slowest node of every batch.

For each it prints the makespan (ansible-playbook's wall time) and its ratio to two lower bounds, both a sum of per-node
durations divided by W:

* the fixed lower bound, fixed and printed before any of those runs starts. Before the faults are set, ``--alone``
  nodes (default 2, spread over the fleet; ``--alone N`` for all N) are each restarted alone: the same playbook in window
  mode with a window of 1 and ``gpufleet_hosts`` that one node, no boot delay, one node per run, in a run folder of its
  own (so the first window run still has no earlier timings). A node's time alone is its admission to its final state
  in that run's ledger (``state.json`` ``admitted_at`` / ``finished_at``: the gate's answer, facts, the role, the settle
  step); a node not timed alone gets the mean of those that were (the sim's nodes are alike without the fault; the sum,
  and so the bound, is the same either way). A node's fixed duration is its injected boot delay (the ``slow_boot``
  seconds) plus its time alone; the fixed bound is their sum / W. It does not move with the contention the runs cause.
* the in-run lower bound (the old one): the same ledger durations, but measured in the window run itself, so they
  grow with the contention that run causes (W nodes restarting at once on one controller). A window run's is from its
  own ledger; the serial run's is the second window run's (Ansible's serial strategy moves the hosts of a batch task by
  task together, so every node's phase times there include waiting for the slowest node of its batch).

Both modes run without a canary (serial has none). Also printed: the task results per node and the controller CPU seconds
per node. The order of the slow nodes is a seeded shuffle (``--seed``), printed. Any fault left on a node of a kept
fleet (``--keep``) is cleared first.

    PATH=$PWD/.venv/bin:$PATH python benchmarks/makespan.py [--nodes 20] [--window 4] [--seed 7] [--alone 2] [--keep]
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

from _checkout import ROOT  # noqa: E402  pylint: disable=wrong-import-position,import-error

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


def failures(stdout):
    """The failed or unreachable task results in ansible-playbook's JSON output, one line each (task: host: message)."""
    try:
        document = json.loads(stdout)
    except ValueError:
        return [stdout[-3000:]]
    lines = []
    for play in document.get('plays', []):
        for task in play['tasks']:
            for host, result in task['hosts'].items():
                if result.get('failed') or result.get('unreachable'):
                    lines.append('%s: %s: %s' % (task['task']['name'], host, str(result.get('msg') or result.get('stderr') or '')[:600]))
    return lines


def own_durations(run_dir):
    """Seconds from admission to the final state of every node, from the newest run's state.json (window mode)."""
    runs = sorted(name for name in os.listdir(run_dir) if os.path.isfile(os.path.join(run_dir, name, 'state.json')))
    if not runs:
        raise SystemExit('%s: no run' % run_dir)
    with open(os.path.join(run_dir, runs[-1], 'state.json'), encoding='utf-8') as handle:
        nodes = json.load(handle)['nodes']
    return dict((name, _ledger.epoch(record['finished_at']) - _ledger.epoch(record['admitted_at'])) for name, record in nodes.items())


def spread(nodes, count):
    """``count`` of ``nodes`` spread evenly over the list (first and last included when count > 1)."""
    if count >= len(nodes):
        return list(nodes)
    if count == 1:
        return [nodes[0]]
    return [nodes[round(index * (len(nodes) - 1) / float(count - 1))] for index in range(count)]


def alone_times(inventory, state_dir, nodes):
    """Each of ``nodes`` restarted alone (window mode, window 1, that node only, a run folder of its own), one after the other;
    returns {node: (seconds from admission to final state in that run's ledger, the run's wall seconds)}."""
    base = os.path.join(state_dir, 'runs-alone')
    shutil.rmtree(base, ignore_errors=True)
    times = {}
    for node in nodes:
        run_dir = os.path.join(base, node)
        wall = run_mode(inventory, run_dir, [node], 1, 'window (alone)', hosts=node)[0]
        times[node] = (own_durations(run_dir)[node], wall)
    return times


def run_mode(inventory, run_dir, nodes, window, mode, hosts=None):
    """One rolling restart (of ``hosts``, a host pattern, when given); returns (makespan, tasks per node, CPU seconds per node, states)."""
    variables = dict(SIM_VARS, gpufleet_run_dir=run_dir, gpufleet_results_dir=os.path.join(run_dir, 'results-%d' % time.time()))
    if hosts:
        variables['gpufleet_hosts'] = hosts
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
        raise SystemExit('%s mode: ansible-playbook rc=%s, no result for %s\n%s\n%s' % (
            mode, process.returncode, missing, '\n'.join(failures(process.stdout)), process.stderr[-3000:]))
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
    parser.add_argument('--alone', type=int, default=2, help='nodes restarted alone, one at a time, for the fixed lower bound '
                        '(default 2, spread over the fleet; the number of nodes times every node)')
    parser.add_argument('--state-dir', default=os.path.join(ROOT, 'build', 'bench-makespan'))
    parser.add_argument('--keep', action='store_true', help='leave the fleet up')
    args = parser.parse_args()
    if args.nodes < 5 or args.window < 2 or args.window >= args.nodes:
        parser.error('at least 5 nodes (one in five is slow), a window of at least 2 and smaller than the fleet')
    if not 2 <= args.alone <= args.nodes:
        parser.error('--alone: at least 2 nodes, at most --nodes')
    inventory = fleet(args.state_dir, 'up', '--nodes', str(args.nodes), '--scheduler', 'slurm').strip().splitlines()[-1]
    with open(inventory, encoding='utf-8') as handle:
        nodes = sorted(json.load(handle)['all']['children']['gpu']['hosts'])
    delays = dict(zip(nodes, boot_delays(len(nodes), args.seed)))
    try:
        for node in nodes:
            fleet(args.state_dir, 'fault', node, 'clear')
        print('nodes %d, window %d, seed %d; extra boot seconds per node: %s' % (
            len(nodes), args.window, args.seed, ' '.join('%s=%d' % (node[-2:], delays[node]) for node in nodes)))
        # The fixed lower bound, before the faults and before any window or batch run.
        alone = alone_times(inventory, args.state_dir, spread(nodes, args.alone))
        mean = sum(seconds for seconds, dummy in alone.values()) / len(alone)
        print('time alone (no boot delay; window mode, window 1, one node per run; admission to final state in its ledger): %s; '
              'mean %.1f s%s' % (', '.join('%s=%.1f s (run wall %.1f s)' % (node[-2:], alone[node][0], alone[node][1]) for node in sorted(alone)),
                                 mean, ', used for the %d node(s) not timed alone' % (len(nodes) - len(alone)) if len(alone) < len(nodes) else ''))
        fixed = dict((node, delays[node] + (alone[node][0] if node in alone else mean)) for node in nodes)
        fixed_lower = sum(fixed.values()) / float(args.window)
        print('fixed node durations (extra boot seconds + time alone): %s; fixed lower bound %.1f s (sum %.1f / %d), set before the runs' % (
            ' '.join('%s=%.0f' % (node[-2:], fixed[node]) for node in nodes), fixed_lower, sum(fixed.values()), args.window))
        for node in nodes:
            if delays[node]:
                fleet(args.state_dir, 'fault', node, 'slow_boot', 'seconds=%d' % delays[node])
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
                source = 'this run\'s ledger'
                print('node durations (admission to final state, %s): %s; in-run lower bound %.1f s (sum / %d)' % (
                    mode, ' '.join('%s=%.0f' % (node[-2:], durations[node]) for node in nodes), lower, args.window))
            else:
                source = 'window (timed) run\'s ledger'
            makespan, tasks, cpu, states = rows[mode]
            print('%-18s makespan %6.1f s: %.2f x the fixed lower bound (%.1f s), %.2f x the in-run lower bound (%.1f s, %s); '
                  'tasks per node %.1f; controller CPU s per node %.2f; final states %s'
                  % (mode, makespan, makespan / fixed_lower, fixed_lower, makespan / lower, lower, source, tasks, cpu, ', '.join(states)))
        print('window (timed) / serial makespan: %.2f' % (rows['window (timed)'][0] / rows['serial'][0]))
    finally:
        if not args.keep:
            fleet(args.state_dir, 'down')
    return 0


if __name__ == '__main__':
    sys.exit(main())
