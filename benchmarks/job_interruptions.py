#!/usr/bin/env python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How often a rolling upgrade interrupts each job, with the gate's job rules (``gpufleet_job_aware``) and without, in one run.

Not a test. A model of a busy GPU fleet driven by the real gate (``_gate.admit``, the real policy and the real plan order of
``_planner.order``), one decision per node per tick, for the same fleet, jobs and seed twice:

* the fleet: ``--nodes`` nodes of 8 GPUs, every node busy at the start with jobs of 1 to ``--max-size`` nodes, started up to
  an hour before, with 2 to 12 hours of work (seeded); ``--declare`` of the jobs declare a checkpoint every ``--interval`` seconds
  (``gpufleet.io/checkpoint``, the next one at any time), the others declare nothing; a job that ends frees its nodes;
* the rollout: window ``--window`` (a share of the nodes), no canary, every node ``--upgrade`` seconds in flight;
* a drain interrupts the jobs on the node (a Kubernetes eviction, a Slurm requeue): the job stops on all its nodes, loses
  the work since its last checkpoint (a job that declares nothing: since it started), keeps the rest, and goes back to the queue; a
  queued job starts again as soon as enough nodes are free, on the first free nodes by name (Slurm's default, no
  preference for upgraded nodes: the soft pre-drain is not modelled).

It prints per mode the jobs interrupted, the interruptions, the most interruptions of one job, the GPU-hours lost and
the rollout's makespan, then the ratios (off / on) measured in this one run.

    PATH=$PWD/.venv/bin:$PATH python benchmarks/job_interruptions.py [--nodes 128] [--window 0.1] [--seed 3]
"""

import argparse
import collections
import datetime
import random
import sys

from _checkout import ROOT  # noqa: F401,E402  pylint: disable=wrong-import-position,import-error,unused-import

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate, _planner  # noqa: E402
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._policy import load_policy  # noqa: E402

GPUS = 8
START = datetime.datetime(2026, 11, 28, 0, 0, tzinfo=datetime.timezone.utc).timestamp()


class Job:
    def __init__(self, job_id, size, interval, phase, work):
        self.id, self.size, self.interval, self.phase = job_id, size, interval, phase
        self.work = work            # seconds of work left when it (re)started
        self.nodes = ()
        self.started = None
        self.interruptions = 0
        self.lost = 0.0

    def ends(self):
        return self.started + self.work

    def next_checkpoint(self, now):
        if not self.interval:
            return None
        passed = int((now - self.phase) // self.interval)
        return self.phase + (passed + 1) * self.interval

    def last_checkpoint(self, now):
        if not self.interval:
            return self.started
        last = self.phase + int((now - self.phase) // self.interval) * self.interval
        return max(last, self.started)


def workload(names, seed, max_size, declare, interval):
    """Jobs that fill every node at START (sizes 1 .. max_size nodes, seeded)."""
    rng = random.Random(seed)
    jobs, free, number = [], list(names), 0
    while free:
        size = min(len(free), rng.choice([size for size in (1, 2, 4, 8, 16, 32) if size <= max_size]))
        number += 1
        job = Job('j%03d' % number, size, interval if rng.random() < declare else None, START - rng.uniform(0, interval),
                  rng.uniform(2, 12) * 3600)
        job.nodes, free = tuple(free[:size]), free[size:]
        job.started = START - rng.uniform(0, 3600)      # running for up to an hour already
        jobs.append(job)
    return jobs


def simulate(args, job_aware):
    names = ['n%04d' % index for index in range(1, args.nodes + 1)]
    jobs = workload(names, args.seed, args.max_size, args.declare, args.interval)
    policy = load_policy({'gpufleet_window': args.window, 'gpufleet_canary': 0, 'gpufleet_max_fail_percentage': None,
                          'gpufleet_job_aware': job_aware})
    running = {node: job for job in jobs for node in job.nodes}
    queue = collections.deque()
    state = {name: _gate.PENDING for name in names}
    finished = {}
    until = {}

    def planned(now):
        view = {name: tuple([_job(running[name], now)]) if name in running else () for name in names}
        order = _planner.order([_planner.PlanNode(name, gpus=GPUS, jobs=view[name]) for name in names])
        return [node.name for node, _kind, _ready in order]

    def _job(job, now):
        return _planner.Job(id=job.id, checkpoint=job.next_checkpoint(now), nodes=job.nodes)

    def interrupt(job, now):
        job.interruptions += 1
        kept = job.last_checkpoint(now)
        job.lost += (now - kept) / 3600.0 * GPUS * job.size
        job.work -= kept - job.started          # it restarts from its last checkpoint
        stop(job)
        queue.append(job)

    def stop(job):
        for node in job.nodes:
            running.pop(node, None)
        job.nodes = ()

    def schedule(now):
        while queue:
            free = [name for name in names if name not in running and state[name] not in _gate.IN_FLIGHT]
            job = queue[0]
            if len(free) < job.size:
                return
            queue.popleft()
            job.nodes, job.started = tuple(free[:job.size]), now
            for node in job.nodes:
                running[node] = job

    order = planned(START)
    now = START
    while any(value != 'done' for value in state.values()):
        for name in [name for name, end in until.items() if end <= now]:
            state[name] = 'done'
            finished[name] = now
            del until[name]
        for job in {id(job): job for job in running.values()}.values():
            if job.ends() <= now:
                stop(job)
        schedule(now)
        jobs_view = {name: (_job(running[name], now),) for name in names if name in running}
        nodes = {other: _gate.Node(state=state[other], gpus=GPUS, finished=finished.get(other)) for other in names}
        moment = datetime.datetime.fromtimestamp(now, tz=datetime.timezone.utc)
        for name in order:
            if state[name] != _gate.PENDING:
                continue
            scheduler = _gate.SchedulerView(total_gpus=GPUS * len(names), unavailable={}, jobs=jobs_view, job_aware=job_aware)
            decision = _gate.admit(policy, _gate.Rollout(nodes=nodes), scheduler, name, moment)
            if decision.action != _gate.ADMIT:
                if decision.rule in ('window', 'budget_window'):
                    break
                continue
            for node in decision.group or (name,):
                state[node] = 'admitted'
                nodes[node] = _gate.Node(state='admitted', gpus=GPUS)
                until[node] = now + args.upgrade
                if node in running:
                    interrupt(running[node], now)
            jobs_view = {node: (_job(running[node], now),) for node in names if node in running}
        now += args.tick
    touched = [job for job in jobs if job.interruptions]
    return {'jobs': len(jobs), 'interrupted': len(touched), 'interruptions': sum(job.interruptions for job in jobs),
            'most': max([job.interruptions for job in jobs] or [0]), 'gpu_hours_lost': sum(job.lost for job in jobs),
            'makespan': now - START}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--nodes', type=int, default=128)
    parser.add_argument('--window', default='10%', help='gpufleet_window: a count or "N%%"')
    parser.add_argument('--max-size', type=int, default=16)
    parser.add_argument('--declare', type=float, default=0.7, help='share of the jobs that declare checkpoints')
    parser.add_argument('--interval', type=float, default=1800, help='seconds between a job\'s checkpoints')
    parser.add_argument('--upgrade', type=float, default=900, help='seconds a node is in flight')
    parser.add_argument('--tick', type=float, default=30)
    parser.add_argument('--seed', type=int, default=3)
    args = parser.parse_args(argv)
    print('fleet: %d nodes of %d GPUs, jobs of 1..%d nodes (seed %d), %d%% declare a checkpoint every %ds; window %s, %ds per node'
          % (args.nodes, GPUS, args.max_size, args.seed, round(args.declare * 100), args.interval, args.window, args.upgrade))
    results = {}
    for job_aware in (False, True):
        result = results[job_aware] = simulate(args, job_aware)
        print('gpufleet_job_aware %-5s: %d of %d jobs interrupted, %d interruptions, at most %d of one job, %.1f GPU-hours lost, '
              'makespan %.0f s' % (str(job_aware).lower(), result['interrupted'], result['jobs'], result['interruptions'], result['most'],
                                   result['gpu_hours_lost'], result['makespan']))
    off, on = results[False], results[True]
    print('off / on: interruptions %s, most per job %s, GPU-hours lost %s, makespan %s'
          % (ratio(off['interruptions'], on['interruptions']), ratio(off['most'], on['most']),
             ratio(off['gpu_hours_lost'], on['gpu_hours_lost']), ratio(off['makespan'], on['makespan'])))
    return 0


def ratio(off, on):
    return '%.2fx' % (off / on) if on else ('%g vs 0' % round(off, 1))


if __name__ == '__main__':
    sys.exit(main())
