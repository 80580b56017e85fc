#!/usr/bin/env python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the controller costs in window mode, one controller and several, at 1,000 nodes and at 100 (a benchmark, not a test).

Runs the real ``gpufleet.lifecycle.rolling_restart`` playbook (window mode: the start play, the window play with strategy
host_pinned, the gate, the settle step, the finish play) on a fleet of local-connection hosts whose per-node procedure
is replaced by a stand-in (``-e gpufleet_benchmark_stand_in=true``: playbooks/tasks/benchmark_stand_in.yml, a few tasks
and a sleep of the host variable ``gpufleet_benchmark_seconds``), so that what is measured is the controller: the
strategy, the forks, the gate's polls, the ledger. Each run: ``-e gpufleet_window=W`` (``--window-percent`` of the
nodes, default 10 %), ``gpufleet_canary=0``, ``gpufleet_max_fail_percentage=100``, ``gpufleet_gate_poll=1``,
``gpufleet_scheduler=none`` (the static view: each host's ``gpufleet_gpus``, 8), a fresh ``gpufleet_run_dir`` and a
``gpufleet_run_id`` of its own. Configurations, all in one invocation (``--only`` picks some):

* (a) one controller, ``--nodes`` N hosts (default 1,000), forks W + 2;
* (b) the same fleet and the same seconds as ``--controllers`` C controllers (default 4): C ansible-playbook processes
  started together with the same ``-e gpufleet_run_id`` (they join one run), each ``--limit 'bench_controller_<i>,localhost'``
  (its share of the hosts, host i going to controller i mod C; localhost runs the start and the finish plays), each with
  forks W + 2: the window is the fleet's, and any controller may hold all of it;
* (c) a small fleet (``--small``, default 100) on one controller, forks W' + 2 with W' its window: the per-node cost to
  compare with.

The stand-in's seconds are a seeded draw (``--seed``): most nodes 10 to 30 s, a slow tail (15 %) 60 to 90 s, the order of
the hosts as drawn; ``--time-scale`` multiplies them (a quick run). The small fleet takes the first ``--small`` draws.

For each configuration it prints, first (before any run) the lower bound of the makespan: the sum of the stand-in's
seconds / W (no schedule of W slots can do better); then, after the run:

* the makespan (wall time from the first ansible-playbook's start to the last one's exit), its ratio to the lower bound
  (target: within 1.15 x, (a) and (b)) and to the ideal schedule (the window refilled the moment a node ends, at no cost,
  in the plan's order read from the ledger: what a controller that costs nothing would do); where the rest went: the
  time before the first ledger event (ansible-playbook's start, the start play), the ramp to a full window, the mean
  gap from a node's end to the admission that refilled its slot, the mean per-node overhead (admission to final state,
  less the stand-in's seconds), the time after the last final state (the finish play, exit), and the window's mean fill;
* the controller's CPU seconds per node and per in-flight node (W). The total is exact: the user + system time of each
  ansible-playbook process and everything it waited for (``os.wait4``). With local connections the modules (the
  stand-in's ``command`` task) run on the controller too, where on a real fleet they run on the node: every host's
  interpreter is a small wrapper (``node-python`` in the work folder) that runs the real one and appends its rusage to a
  file, so the node-side part is printed apart and left out of the controller's (the ``/bin/sh`` Ansible starts for a
  local module stays in: it stands for the SSH client);
* peak memory: ``ru_maxrss`` (the largest single process of each controller's tree, from ``os.wait4``), and the total
  RSS of the ansible-playbook process trees sampled every second through /proc (controller processes apart from the
  node-side ones; every 5th sample also the proportional set size, PSS, which counts the pages the forked workers share
  once), per node and per in-flight node;
* the most nodes in flight at once, from a replay of the run's ledger (``<run_dir>/<run_id>/ledger.jsonl``, in the order
  the run lock wrote it; in flight: ``_gate.IN_FLIGHT``), against the window: PASS/FAIL "never more in flight than the
  window" (target for (b): exactly the window, never more, the window reached); the final states;
* the gate's polls, estimated from the same replay: a host that holds a worker and is not admitted polls every
  ``gpufleet_gate_poll`` (1 s); per controller that is as many hosts as it has nodes not final (at most its forks) less its
  nodes in flight, integrated over the run, plus one poll per admission;
* the reads per gate poll, when ``GPUFLEET_READ_STATS`` (set to a file of the work folder for every run) got lines
  (``{"kind", "pid", "time", "served"}``: one per answer a poll asked for, ``served`` from the controller's shared view;
  the scheduler's kinds, and any other the checkout records, e.g. the gate's shared look), by kind: reads (not served),
  answers, reads per answer, per node and per second; else that it was not available (the static view reads nothing).

Then the per-node controller CPU at N against the small fleet and the ratio (target: within 1.5 x); the controller CPU of
the configurations split, by least squares, into a cost per node and a cost per gate poll (the (forks - window) hosts that
wait at the gate poll whatever the fleet's size, so their share of the per-node cost falls as the fleet grows, and with C
controllers C x (W + 2) - W hosts wait); and a projection to 10,000 nodes at the same window share, forks W + 2 per
controller: the CPU (the split's cost per node and per poll, the polls of the hosts waiting at the gate over the projected
makespan; the measured cost per node when the split is not available) and the cores it keeps busy, the memory (per
controller, a straight line against its forks through the small fleet's peak and this configuration's), and the makespan
(the lower bound, the same at every size for a fixed share, times the measured ratio; at least the CPU / this machine's
cores when that is longer). A benchmark prints: nothing here fails on a missed target. ansible-playbook's output goes
to files in the work folder (``--work-dir``, default build/bench-controller-scale), removed at the end unless ``--keep``
or a run failed.

    PATH=$PWD/.venv/bin:$PATH python benchmarks/controller_scale.py [--nodes 1000] [--small 100] [--window-percent 10]
        [--controllers 4] [--seed 7] [--time-scale 1] [--only a,b,c] [--keep]
"""

import argparse
import heapq
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

from _checkout import ROOT  # noqa: E402  pylint: disable=wrong-import-position,import-error

from conftest import ansible_environment  # noqa: E402  pylint: disable=wrong-import-position,import-error

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate, _ledger  # noqa: E402  pylint: disable=wrong-import-position

PLAYBOOK = os.path.join(ROOT, 'playbooks', 'rolling_restart.yml')
SHORT, TAIL, TAIL_SHARE = (10.0, 30.0), (60.0, 90.0), 0.15
GROUP = 'bench_controller_%d'
NODE_STATS = 'GPUFLEET_BENCH_NODE_STATS'
PAGE = os.sysconf('SC_PAGE_SIZE')
TARGET_MAKESPAN, TARGET_PER_NODE = 1.15, 1.5
BIG = 10000
POLL = 1
LABELS = {'a': '(a) 1 controller', 'b': '(b) %d controllers', 'c': '(c) small fleet'}

# The hosts' interpreter: runs the real one, then appends what it (the module and what it ran) cost to $GPUFLEET_BENCH_NODE_STATS.
WRAPPER = '''#!%(python)s -S
import json, os, resource, sys, time
started = time.time()
child = os.fork()
if child == 0:
    os.execv(%(python)r, [%(python)r] + sys.argv[1:])
_pid, status, usage = os.wait4(child, 0)
own = resource.getrusage(resource.RUSAGE_SELF)
target = os.environ.get(%(variable)r)
if target:
    line = json.dumps({"cpu": usage.ru_utime + usage.ru_stime, "wrapper_cpu": own.ru_utime + own.ru_stime,
                       "maxrss_kb": usage.ru_maxrss, "start": started, "end": time.time()}) + "\\n"
    handle = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(handle, line.encode())
    os.close(handle)
sys.exit(os.waitstatus_to_exitcode(status))
'''


def stand_in_seconds(count, seed, scale):
    """Seconds of the stand-in per node: most SHORT, a slow tail (TAIL_SHARE) TAIL; seeded, so a prefix of a longer draw."""
    rng = random.Random(seed)
    seconds = []
    for _index in range(count):
        low, high = TAIL if rng.random() < TAIL_SHARE else SHORT
        seconds.append(round(rng.uniform(low, high) * scale, 1))
    return seconds


def window_of(count, percent):
    return max(1, int(round(count * percent / 100.0)))


def write_inventory(path, nodes, seconds, controllers, interpreter):
    """An inventory: group gpu (the rollout's hosts), group bench_controller_<i> per controller, localhost apart."""
    local = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}
    children = {'gpu': {'hosts': dict((node, {'gpufleet_benchmark_seconds': seconds[node]}) for node in nodes),
                        'vars': {'ansible_connection': 'local', 'ansible_python_interpreter': interpreter, 'gpufleet_gpus': 8}}}
    for index in range(controllers):
        children[GROUP % (index + 1)] = {'hosts': dict((node, {}) for node in nodes[index::controllers])}
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump({'all': {'hosts': {'localhost': local}, 'children': children}}, handle)


# ---------------------------------------------------------------------------------------------- /proc sampling

def _stat(pid):
    """(ppid, utime + stime in clock ticks) of a process, None when it is gone."""
    try:
        with open('/proc/%d/stat' % pid, 'rb') as handle:
            fields = handle.read().rsplit(b')', 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[11]) + int(fields[12])


def _read(path, mode='rb'):
    try:
        with open(path, mode) as handle:
            return handle.read()
    except OSError:
        return None


class TreeSampler(threading.Thread):
    """Every ``interval`` seconds, the total RSS of the process trees under ``roots``: the controller's processes
    (ansible-playbook and its workers, the shells they start) apart from the node-side ones (the host interpreter
    ``marker`` and what it runs); every ``pss_every`` samples also their PSS. Peaks kept."""

    def __init__(self, roots, marker, interval=1.0, pss_every=5):
        super().__init__(daemon=True)
        self.roots, self.marker, self.interval, self.pss_every = set(roots), marker.encode(), interval, pss_every
        self.stop_event = threading.Event()
        self.peak = {'controller_rss': 0, 'node_rss': 0, 'controller_pss': 0, 'processes': 0, 'controller_processes': 0}
        self.samples = 0

    def run(self):
        while not self.stop_event.is_set():
            self.sample()
            self.stop_event.wait(self.interval)

    def stop(self):
        self.stop_event.set()
        self.join()

    def tree(self):
        """{pid: node-side?} of every process under the roots."""
        children = {}
        for name in os.listdir('/proc'):
            if name.isdigit():
                stat = _stat(int(name))
                if stat is not None:
                    children.setdefault(stat[0], []).append(int(name))
        found = {}
        stack = [(pid, False) for pid in self.roots if os.path.exists('/proc/%d' % pid)]
        while stack:
            pid, node_side = stack.pop()
            if not node_side:
                node_side = self.marker in (_read('/proc/%d/cmdline' % pid) or b'')
            found[pid] = node_side
            stack.extend((child, node_side) for child in children.get(pid, ()))
        return found

    def sample(self):
        found = self.tree()
        self.samples += 1
        rss = {False: 0, True: 0}
        pss = 0
        with_pss = self.samples % self.pss_every == 1
        for pid, node_side in found.items():
            statm = _read('/proc/%d/statm' % pid)
            if statm:
                rss[node_side] += int(statm.split()[1]) * PAGE
            if with_pss and not node_side:
                rollup = _read('/proc/%d/smaps_rollup' % pid, 'r')
                for line in (rollup or '').splitlines():
                    if line.startswith('Pss:'):
                        pss += int(line.split()[1]) * 1024
                        break
        values = {'controller_rss': rss[False], 'node_rss': rss[True], 'controller_pss': pss, 'processes': len(found),
                  'controller_processes': sum(1 for node_side in found.values() if not node_side)}
        for key, value in values.items():
            self.peak[key] = max(self.peak[key], value)


# ---------------------------------------------------------------------------------------------- one configuration

def run_configuration(work, key, nodes, seconds, window, controllers, args):
    """Run one configuration; returns a dict of what was measured (``error`` set when a controller failed)."""
    folder = os.path.join(work, key)
    os.makedirs(folder)
    inventory = os.path.join(folder, 'inventory.json')
    write_inventory(inventory, nodes, seconds, controllers, os.path.join(work, 'node-python'))
    run_dir = os.path.join(folder, 'runs')
    run_id = _ledger.new_run_id()
    forks = window + 2
    variables = {'gpufleet_benchmark_stand_in': True, 'gpufleet_window': window, 'gpufleet_canary': 0, 'gpufleet_max_fail_percentage': 100,
                 'gpufleet_gate_poll': POLL, 'gpufleet_scheduler': 'none', 'gpufleet_run_dir': run_dir, 'gpufleet_run_id': run_id}
    environment = ansible_environment()
    environment.update({'ANSIBLE_STDOUT_CALLBACK': 'ansible.builtin.default', 'ANSIBLE_DISPLAY_SKIPPED_HOSTS': 'False',
                        'ANSIBLE_PIPELINING': 'False' if args.no_pipelining else 'True',
                        'GPUFLEET_READ_STATS': os.path.join(folder, 'read-stats.jsonl'), NODE_STATS: os.path.join(folder, 'node-stats.jsonl')})
    bound = sum(seconds.values()) / float(window)
    timeout = args.timeout or max(1800.0, 4 * bound + 900)
    processes = []
    start = time.time()
    for index in range(controllers):
        command = ['ansible-playbook', '-i', inventory, PLAYBOOK, '-f', str(forks), '-e', json.dumps(variables)]
        if controllers > 1:
            command += ['--limit', '%s,localhost' % (GROUP % (index + 1))]
        log = open(os.path.join(folder, 'controller-%d.log' % (index + 1)), 'w', encoding='utf-8')  # pylint: disable=consider-using-with
        processes.append((subprocess.Popen(command, env=environment, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,  # pylint: disable=consider-using-with
                                           start_new_session=True), log))
    sampler = TreeSampler([process.pid for process, _log in processes], os.path.join(work, 'node-python'))
    sampler.start()
    finished = {}
    timed_out = False
    while len(finished) < len(processes):
        for process, log in processes:
            if process.pid in finished:
                continue
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                process.returncode = os.waitstatus_to_exitcode(status)
                log.close()
                finished[process.pid] = {'rc': process.returncode, 'end': time.time(), 'cpu': usage.ru_utime + usage.ru_stime,
                                         'maxrss': usage.ru_maxrss * 1024}
        if len(finished) < len(processes) and time.time() - start > timeout and not timed_out:
            timed_out = True
            for process, _log in processes:
                if process.pid not in finished:
                    os.killpg(process.pid, signal.SIGKILL)
        time.sleep(0.2)
    makespan = max(item['end'] for item in finished.values()) - start
    sampler.stop()
    result = {'key': key, 'nodes': len(nodes), 'window': window, 'forks': forks, 'controllers': controllers, 'bound': bound,
              'makespan': makespan, 'run_id': run_id, 'folder': folder, 'sampler': sampler.peak, 'timed_out': timed_out,
              'per_controller': [finished[process.pid] for process, _log in processes], 'start': start}
    result['cpu_total'] = sum(item['cpu'] for item in result['per_controller'])
    result['maxrss'] = max(item['maxrss'] for item in result['per_controller'])
    result['node_side'] = node_side_cost(os.path.join(folder, 'node-stats.jsonl'))
    result['cpu'] = result['cpu_total'] - result['node_side']['cpu']
    shares = dict((node, index % controllers) for index, node in enumerate(nodes))
    result['ledger'] = replay(os.path.join(run_dir, run_id, _ledger.LEDGER), window, shares, forks)
    result['reads'] = read_stats(os.path.join(folder, 'read-stats.jsonl'))
    failures = [(index + 1, item['rc']) for index, item in enumerate(result['per_controller']) if item['rc'] != 0]
    if failures or timed_out:
        result['error'] = '; '.join('controller %d exited %s: %s' % (index, rc, failure_lines(os.path.join(folder, 'controller-%d.log' % index)))
                                    for index, rc in failures) + (' (killed after %.0f s)' % timeout if timed_out else '')
    return result


def failure_lines(log):
    """The first failure ansible-playbook printed (a line with fatal: or ERROR!, and the next one), shortened."""
    lines = (_read(log, 'r') or '').splitlines()
    for index, line in enumerate(lines):
        if line.startswith(('fatal:', 'ERROR!', '[ERROR]')) or ': FAILED!' in line:
            return ' '.join(part.strip() for part in lines[index:index + 2])[:600]
    return 'no failure printed; see %s' % log


def node_side_cost(path):
    """CPU seconds of the node-side processes (the modules the hosts' interpreter wrapper ran, and the wrapper itself)."""
    cpu, runs, maxrss = 0.0, 0, 0
    for line in (_read(path, 'r') or '').splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        cpu += entry['cpu'] + entry['wrapper_cpu']
        maxrss = max(maxrss, entry['maxrss_kb'] * 1024)
        runs += 1
    return {'cpu': cpu, 'runs': runs, 'maxrss': maxrss}


def replay(path, window, shares, forks):
    """The run's ledger replayed in the order it was written: the most nodes in flight at once, the final states, when the
    window filled, the refill gaps (a node's end to the admission that took its slot), each node's admission and end, and
    the host-seconds spent waiting at the gate: per controller (``shares``: {node: controller}), the hosts holding one of
    its ``forks`` workers (as many as it has nodes not final, at most ``forks``) less its nodes in flight, over time."""
    text = _read(path, 'r')
    if text is None:
        return None
    total = len(shares)
    states, admitted, ended, counts = {}, {}, {}, {}
    flying = peak = admissions = 0
    own_flying, own_left = {}, {}
    for controller in shares.values():
        own_flying[controller] = 0
        own_left[controller] = own_left.get(controller, 0) + 1
    first = last = full = previous = None
    order, free, gaps = [], [], []
    area = waiting = 0.0
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        moment = _ledger.epoch(event.get('time'))
        if previous is not None and moment is not None:
            elapsed = max(0.0, moment - previous)
            area += flying * elapsed
            waiting += elapsed * sum(max(0, min(forks, own_left[key]) - own_flying[key]) for key in own_left)
        previous = moment if moment is not None else previous
        node = event.get('node')
        if node is None:
            if event.get('run'):
                order = list(event['run'].get('order') or order)
                first = moment if first is None else first
            continue
        before, after = states.get(node, _gate.PENDING), event['to']
        states[node] = after
        controller = shares.get(node)
        if before not in _gate.IN_FLIGHT and after in _gate.IN_FLIGHT:
            flying += 1
            if controller is not None:
                own_flying[controller] += 1
            if before == _gate.PENDING and node not in admitted:
                admitted[node] = moment
                admissions += 1
                if free:
                    gaps.append(moment - heapq.heappop(free))
        elif before in _gate.IN_FLIGHT and after not in _gate.IN_FLIGHT:
            flying -= 1
            if controller is not None:
                own_flying[controller] -= 1
            if after in _gate.FINAL:
                ended[node] = moment
                last = moment
                if controller is not None:
                    own_left[controller] -= 1
                if admissions < total:
                    heapq.heappush(free, moment)
        peak = max(peak, flying)
        if full is None and flying >= window:
            full = moment
    for state in states.values():
        counts[state] = counts.get(state, 0) + 1
    counts[_gate.PENDING] = counts.get(_gate.PENDING, 0) + total - len(states)
    span = (last - first) if first is not None and last is not None else None
    return {'peak': peak, 'counts': dict((name, count) for name, count in counts.items() if count), 'first': first, 'last': last,
            'full': full, 'gaps': gaps, 'admitted': admitted, 'ended': ended, 'order': order, 'waiting': waiting,
            'polls': waiting / POLL + len(admitted), 'fill': area / (window * span) if span else None}


def ideal_makespan(order, seconds, window):
    """The schedule of a controller that costs nothing: ``window`` slots, each node (in ``order``) in the first free one."""
    slots = [0.0] * window
    for node in order:
        heapq.heappush(slots, heapq.heappop(slots) + seconds[node])
    return max(slots)


def read_stats(path):
    """The reads GPUFLEET_READ_STATS recorded, by kind: None when there are none; else {kind: {reads, answers, controllers,
    span}} (``reads``: the lines not served from the shared view; ``answers``: every line, one per poll that asked)."""
    kinds = {}
    for line in (_read(path, 'r') or '').splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        kind = kinds.setdefault(str(entry.get('kind')), {'reads': 0, 'answers': 0, 'pids': set(), 'times': []})
        kind['answers'] += 1
        kind['reads'] += 0 if entry.get('served') else 1
        kind['pids'].add(entry.get('pid'))
        if isinstance(entry.get('time'), (int, float)):
            kind['times'].append(entry['time'])
    if not kinds:
        return None
    return dict((name, {'reads': kind['reads'], 'answers': kind['answers'], 'controllers': len(kind['pids']),
                        'span': (max(kind['times']) - min(kind['times'])) if kind['times'] else 0.0}) for name, kind in sorted(kinds.items()))


# ---------------------------------------------------------------------------------------------- printing

def mib(value):
    return value / 1048576.0


def mean(values):
    values = list(values)
    return sum(values) / len(values) if values else float('nan')


def percentile(values, share):
    values = sorted(values)
    return values[min(len(values) - 1, int(share * len(values)))] if values else float('nan')


def report(result, seconds, label):
    """Print what one configuration measured."""
    nodes, window = result['nodes'], result['window']
    print('%s: %d nodes, window %d, forks %d per controller, run %s' % (label, nodes, window, result['forks'], result['run_id']))
    if result.get('error'):
        print('  FAILED: %s' % result['error'])
        print('  logs: %s' % result['folder'])
    ledger = result['ledger']
    ratio = result['makespan'] / result['bound']
    print('  makespan %.1f s vs lower bound %.1f s: %.3f x (target <= %.2f x: %s)'
          % (result['makespan'], result['bound'], ratio, TARGET_MAKESPAN, 'met' if ratio <= TARGET_MAKESPAN and not result.get('error') else 'missed'))
    if ledger and ledger['order']:
        ideal = ideal_makespan([node for node in ledger['order'] if node in seconds], seconds, window)
        print('  ideal schedule (the window refilled at once, at no cost, in the plan\'s order) %.1f s: makespan / ideal %.3f x'
              % (ideal, result['makespan'] / ideal))
    if ledger and ledger['first'] is not None and ledger['last'] is not None:
        overheads = [ledger['ended'][node] - ledger['admitted'][node] - seconds[node] for node in ledger['ended'] if node in ledger['admitted']]
        print('  where it went: %.1f s to the first ledger event (ansible-playbook start, start play); window full after %s; refill gap '
              '(a node\'s end to the next admission) mean %.2f s, p95 %.2f s, %d refills; per-node overhead (admission to final state '
              'less the stand-in\'s seconds) mean %.2f s, p95 %.2f s; %.1f s after the last final state (finish play, exit); window '
              'mean fill %.0f %%' % (
                  ledger['first'] - result['start'], '%.1f s' % (ledger['full'] - ledger['first']) if ledger['full'] else 'never',
                  mean(ledger['gaps']), percentile(ledger['gaps'], 0.95), len(ledger['gaps']), mean(overheads), percentile(overheads, 0.95),
                  result['start'] + result['makespan'] - ledger['last'], 100 * (ledger['fill'] or 0)))
    side = result['node_side']
    print('  controller CPU %.1f s: %.3f s per node, %.2f s per in-flight node (window %d); ansible-playbook trees in all %.1f s, of '
          'which node-side %.1f s (%d module runs through the hosts\' interpreter: on a real fleet they run on the nodes)'
          % (result['cpu'], result['cpu'] / nodes, result['cpu'] / window, window, result['cpu_total'], side['cpu'], side['runs']))
    peak = result['sampler']
    print('  memory: ru_maxrss %.1f MiB (the largest single process); sampled peak total RSS of the controller processes %.1f MiB '
          '(%d processes at most): %.3f MiB per node, %.2f MiB per in-flight node; PSS (shared pages counted once) %.1f MiB: %.3f MiB '
          'per node, %.2f MiB per in-flight node; node-side processes peak RSS %.1f MiB, not counted'
          % (mib(result['maxrss']), mib(peak['controller_rss']), peak['controller_processes'], mib(peak['controller_rss']) / nodes,
             mib(peak['controller_rss']) / window, mib(peak['controller_pss']), mib(peak['controller_pss']) / nodes,
             mib(peak['controller_pss']) / window, mib(peak['node_rss'])))
    if result['controllers'] > 1:
        for index, item in enumerate(result['per_controller']):
            print('    controller %d: rc %s, exited after %.1f s, CPU %.1f s (node-side included), ru_maxrss %.1f MiB'
                  % (index + 1, item['rc'], item['end'] - result['start'], item['cpu'], mib(item['maxrss'])))
    if ledger is None:
        print('  ledger: none (the run did not start)')
    else:
        verdict = 'PASS' if ledger['peak'] <= window else 'FAIL'
        exact = ' (the window reached: %s)' % ('yes' if ledger['peak'] == window else 'no') if result['controllers'] > 1 else ''
        print('  most nodes in flight at once (ledger replay): %d, window %d: %s never more in flight than the window%s; final states %s'
              % (ledger['peak'], window, verdict, exact, ', '.join('%d %s' % (count, name) for name, count in sorted(ledger['counts'].items()))))
    if ledger is not None:
        print('  gate polls (estimated from the ledger: the host-seconds waiting at the gate, hosts holding a worker but not admitted, '
              '/ gpufleet_gate_poll %s s, plus one per admission): %.0f, %.2f per node' % (POLL, ledger['polls'], ledger['polls'] / nodes))
    reads = result['reads']
    if reads is None:
        print('  reads per poll: not available (GPUFLEET_READ_STATS got no line: gpufleet_scheduler none reads no scheduler, '
              'and this checkout recorded no other read)')
    else:
        for kind, counts in reads.items():
            print('  reads per poll (GPUFLEET_READ_STATS, kind %s): %d reads for %d answers (polls that asked): %.3f reads per poll, '
                  '%.2f reads per node, %.2f reads per second, %d controller(s)' % (
                      kind, counts['reads'], counts['answers'], counts['reads'] / float(counts['answers']), counts['reads'] / float(nodes),
                      counts['reads'] / max(1.0, counts['span']), counts['controllers']))


def decompose(results):
    """The controller CPU of the configurations as p per node + q per gate poll (least squares over them, no constant): the
    per-node cost without the gate's waiting polls, which (forks - window) hosts make whatever the fleet's size."""
    rows = [(result['nodes'], result['ledger']['polls'], result['cpu']) for result in results.values() if result.get('ledger')]
    if len(rows) < 2:
        return None
    nn = sum(n * n for n, _m, _c in rows)
    nm = sum(n * m for n, m, _c in rows)
    mm = sum(m * m for _n, m, _c in rows)
    determinant = nn * mm - nm * nm
    if determinant <= 1e-6 * nn * mm:
        print('controller CPU per node and per gate poll: not separable from these configurations')
        return None
    per_node = (mm * sum(n * c for n, _m, c in rows) - nm * sum(m * c for _n, m, c in rows)) / determinant
    per_poll = (nn * sum(m * c for _n, m, c in rows) - nm * sum(n * c for n, _m, c in rows)) / determinant
    print('controller CPU = %.3f s per node + %.4f s per gate poll (least squares over %s; residuals %s s)' % (
        per_node, per_poll, ', '.join(result['key'] for result in results.values() if result.get('ledger')),
        ', '.join('%+.1f' % (c - per_node * n - per_poll * m) for n, m, c in rows)))
    return (per_node, per_poll) if per_node > 0 and per_poll >= 0 else None


def compare_and_project(results, seconds, percent, controllers):
    """The per-node cost at N against the small fleet, and a projection to 10,000 nodes."""
    small = results.get('c')
    for key in ('a', 'b'):
        large = results.get(key)
        if large is None or small is None:
            continue
        ratio = (large['cpu'] / large['nodes']) / (small['cpu'] / small['nodes'])
        print('per-node controller CPU %s at %d nodes %.3f s vs (c) at %d nodes %.3f s: %.2f x (target <= %.1f x: %s); per in-flight node '
              'peak RSS %.2f vs %.2f MiB: %.2f x' % (
                  LABELS[key] % controllers if key == 'b' else LABELS[key], large['nodes'], large['cpu'] / large['nodes'], small['nodes'],
                  small['cpu'] / small['nodes'], ratio, TARGET_PER_NODE, 'met' if ratio <= TARGET_PER_NODE else 'missed',
                  mib(large['sampler']['controller_rss']) / large['window'], mib(small['sampler']['controller_rss']) / small['window'],
                  (large['sampler']['controller_rss'] / large['window']) / (small['sampler']['controller_rss'] / small['window'])))
    split = decompose(results)
    window = window_of(BIG, percent)
    forks = window + 2
    per_node_seconds = mean(seconds.values())
    bound = BIG * per_node_seconds / window
    cores = os.cpu_count() or 1
    for key in ('a', 'b'):
        large = results.get(key)
        if large is None:
            continue
        count = large['controllers']
        label = LABELS[key] % controllers if key == 'b' else LABELS[key]
        makespan = bound * large['makespan'] / large['bound']
        # The hosts waiting at the gate while the window is full: every controller's forks hold hosts, W of them in flight.
        waiting = max(0, min(count * forks, BIG) - window)
        if split is not None:
            polls = waiting * makespan / POLL + BIG
            cpu = split[0] * BIG + split[1] * polls
            how = '%.3f s x %d nodes + %.4f s x %.0f gate polls (%d hosts waiting at the gate for %.0f s)' % (
                split[0], BIG, split[1], polls, waiting, makespan)
        else:
            cpu = large['cpu'] / large['nodes'] * BIG
            how = 'the measured %.3f s per node' % (large['cpu'] / large['nodes'])
        busy = cpu / makespan
        memory = {}
        for kind in ('controller_rss', 'controller_pss'):
            # Per controller, a straight line against its forks (the worker processes) through (c) and this configuration.
            own = large['sampler'][kind] / float(count)
            if small is not None and small['forks'] != large['forks']:
                slope = (own - small['sampler'][kind]) / float(large['forks'] - small['forks'])
                memory[kind] = count * (own + slope * (forks - large['forks']))
            else:
                memory[kind] = count * own / large['forks'] * forks
        print('projection to %d nodes, window %d (%s %%), %s, forks %d each: controller CPU %.0f s (%s), %.3f s per node, keeping %.1f '
              'core(s) busy over the makespan (this machine has %d)%s; peak memory %.0f MiB RSS, %.0f MiB PSS (%s); makespan %.0f s = the '
              'lower bound %.0f s (mean stand-in %.1f s x %d nodes / %d) x the measured %.3f%s' % (
                  BIG, window, percent, label, forks, cpu, how, cpu / BIG, busy, cores,
                  '' if count == 1 else ', %.1f per controller' % (busy / count),
                  mib(memory['controller_rss']), mib(memory['controller_pss']),
                  'per controller a line through (c) and this configuration against the forks' if small is not None and small['forks'] != large['forks']
                  else 'per controller, per fork x the forks', makespan, bound, per_node_seconds, BIG, window, large['makespan'] / large['bound'],
                  '; CPU-bound on this machine: at least %.0f s' % (cpu / cores) if busy > cores else ''))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--nodes', type=int, default=1000, help='the fleet of (a) and (b) (default 1000)')
    parser.add_argument('--small', type=int, default=100, help='the small fleet of (c) (default 100)')
    parser.add_argument('--window-percent', type=float, default=10.0, help='the window as a share of the nodes (default 10)')
    parser.add_argument('--controllers', type=int, default=4, help='the controllers of (b) (default 4)')
    parser.add_argument('--seed', type=int, default=7)
    parser.add_argument('--time-scale', type=float, default=1.0, help='multiply the stand-in\'s seconds (a quick run: 0.5)')
    parser.add_argument('--only', default='a,b,c', help='the configurations to run, of a, b, c (default all)')
    parser.add_argument('--no-pipelining', action='store_true', help='run without ANSIBLE_PIPELINING (default: pipelining on)')
    parser.add_argument('--timeout', type=float, default=0, help='seconds before a configuration is killed (default: 4 x its bound + 900)')
    parser.add_argument('--work-dir', default=os.path.join(ROOT, 'build', 'bench-controller-scale'))
    parser.add_argument('--keep', action='store_true', help='keep the work folder (logs, inventories, ledgers)')
    args = parser.parse_args()
    only = [key.strip() for key in args.only.split(',') if key.strip()]
    if not only or set(only) - set('abc'):
        parser.error('--only: a comma-separated subset of a, b, c')
    if args.nodes < 2 or args.small < 2 or args.controllers < 1 or not 0 < args.window_percent <= 100 or args.time_scale <= 0:
        parser.error('at least 2 nodes in each fleet, 1 controller, a window share in (0, 100] and a positive time scale')
    drawn = stand_in_seconds(max(args.nodes, args.small), args.seed, args.time_scale)
    fleets = {}
    for key in ('a', 'b', 'c'):
        count = args.small if key == 'c' else args.nodes
        names = ['node%05d' % index for index in range(count)]
        fleets[key] = (names, dict(zip(names, drawn[:count])), window_of(count, args.window_percent))
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    wrapper = os.path.join(args.work_dir, 'node-python')
    with open(wrapper, 'w', encoding='utf-8') as handle:
        handle.write(WRAPPER % {'python': sys.executable, 'variable': NODE_STATS})
    os.chmod(wrapper, 0o755)
    print('stand-in seconds: seed %d, time scale %g, %d%% %.0f-%.0f s, %d%% %.0f-%.0f s; pipelining %s; %d CPU(s)' % (
        args.seed, args.time_scale, round(100 * (1 - TAIL_SHARE)), SHORT[0] * args.time_scale, SHORT[1] * args.time_scale,
        round(100 * TAIL_SHARE), TAIL[0] * args.time_scale, TAIL[1] * args.time_scale, 'off' if args.no_pipelining else 'on',
        os.cpu_count() or 1))
    for key in only:
        names, seconds, window = fleets[key]
        label = LABELS[key] % args.controllers if key == 'b' else LABELS[key]
        print('%s: %d nodes, stand-in seconds sum %.0f s, mean %.1f s, max %.0f s, window %d: lower bound %.1f s (sum / window)' % (
            label, len(names), sum(seconds.values()), mean(seconds.values()), max(seconds.values()), window, sum(seconds.values()) / window))
    sys.stdout.flush()
    results = {}
    failed = False
    for key in only:
        names, seconds, window = fleets[key]
        controllers = args.controllers if key == 'b' else 1
        results[key] = run_configuration(args.work_dir, key, names, seconds, window, controllers, args)
        report(results[key], seconds, LABELS[key] % args.controllers if key == 'b' else LABELS[key])
        sys.stdout.flush()
        failed = failed or bool(results[key].get('error'))
    compare_and_project(dict((key, value) for key, value in results.items() if not value.get('error')), fleets['a'][1],
                        args.window_percent, args.controllers)
    if args.keep or failed:
        print('work folder kept: %s' % args.work_dir)
    else:
        shutil.rmtree(args.work_dir, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
