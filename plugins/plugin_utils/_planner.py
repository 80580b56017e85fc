# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout plan (the dry run behind ``plan.yml``): in which order, who goes when, what blocks each node now.

Controller-side, no Ansible import, no I/O.  :func:`order` puts the nodes in the order the rollout group is
built in (host_pinned starts hosts in that order):

1. nodes without running work, longest first where earlier runs timed them (:func:`node_durations`: a node's
   admission to its final state in the ledgers of earlier runs; a sliding window then ends with the short nodes, not
   a slow tail), their domains interleaved (one node of each domain in turn, the largest domains first), so a window
   rarely holds two nodes of one domain;
2. nodes whose work declares when it can stop: by the latest time over their jobs of the next checkpoint
   (a Slurm job comment ``gpufleet.io/checkpoint=<ISO time>``, a pod annotation of the same name) or, lacking
   one, the job's expected end; such a node is drained right after its checkpoint, so no GPU-hours are lost;
3. nodes with running work that declares nothing (they wait for the job at the gate's drain timeout);
4. nodes another actor holds out of service (down, NotReady, drained or cordoned by an admin, tainted, another system's
   hold; ``SchedulerView.held`` names who): listed with the actor, never admitted (the gate leaves them alone). Nodes only
   gpufleet holds (an earlier run's quarantine) are planned like the others; every out-of-service node counts against the
   capacity floor and the domain limit, whoever holds it.

:func:`plan` then plays the sliding window forward (canary nodes one by one, then ``window`` at a time, a
checkpointed node taking the first slot free after its checkpoint, admissions only inside the maintenance
window) with per-phase durations from earlier ledgers (:func:`phase_estimates`; defaults when there are none),
and lists for each node what blocks it now.  Domain limits and the capacity floor are shown as blockers now
and enforced live by the gate; the prediction does not model them.  10,000 nodes plan in well under a second
(``benchmarks/plan_scale.py``).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import heapq
import statistics

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _slurm
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._policy import next_opening

# Seconds per in-flight state when no earlier ledger says otherwise: the node_upgrade phases on a typical
# GPU node (pre-check, cordon and wait, drain, converge, reboot, validate with DCGM level 1).
DEFAULT_PHASE_SECONDS = {
    'admitted': 30,
    'cordoned': 120,
    'drained': 10,
    'converging': 300,
    'rebooting': 300,
    'validating': 180,
}
PHASES = tuple(DEFAULT_PHASE_SECONDS)
CHECKPOINT_KEY = _slurm.CHECKPOINT_KEY


@dataclasses.dataclass(frozen=True)
class Job:
    """A job running on a node: ``checkpoint`` (its next declared checkpoint), ``end`` and ``start`` in epoch seconds, ``nodes``
    every node it runs on (a multi-node job's nodes go together through the gate)."""

    id: str
    checkpoint: float | None = None
    end: float | None = None
    nodes: tuple = ()
    start: float | None = None

    @property
    def ready(self):
        """When the node may be drained without losing work: the checkpoint, else the end, else unknown."""
        return self.checkpoint if self.checkpoint is not None else self.end


@dataclasses.dataclass(frozen=True)
class PlanNode:
    name: str
    gpus: int = 0
    domain: str | None = None
    jobs: tuple = ()
    pdb_blocked: str | None = None      # a PodDisruptionBudget that refuses an eviction now: its name


def phase_estimates(histories):
    """Seconds per phase: the median over earlier ledgers' ``phase_times`` (see ``_ledger.phase_times``), else defaults.

    ``histories`` is an iterable of ``{state: [seconds, ...]}``.  Returns (estimates, number of samples).
    """
    pooled = collections.defaultdict(list)
    for times in histories:
        for state, values in times.items():
            pooled[state].extend(values)
    estimates = dict(DEFAULT_PHASE_SECONDS)
    samples = 0
    for state in PHASES:
        if pooled.get(state):
            estimates[state] = float(statistics.median(pooled[state]))
            samples = max(samples, len(pooled[state]))
    return estimates, samples


def node_seconds(estimates, converge=True):
    """The predicted time of one node from admission to its final state."""
    return sum(seconds for state, seconds in estimates.items() if converge or state != 'converging')


def _ready(node):
    """(kind, time): 0 idle, 1 ready at a known time, 2 busy without a known time."""
    if not node.jobs:
        return 0, None
    times = [job.ready for job in node.jobs]
    if any(time is None for time in times):
        return 2, None
    return 1, max(times)


def interleave(nodes):
    """One node of each domain in turn, the largest domains first (ties by name); input order kept within a domain."""
    groups = collections.OrderedDict()
    for node in nodes:
        groups.setdefault(node.domain, []).append(node)
    ranked = sorted(groups.values(), key=lambda group: (-len(group), str(group[0].domain)))
    result = []
    for index in range(len(ranked[0]) if ranked else 0):
        for group in ranked:
            if index < len(group):
                result.append(group[index])
            else:
                break
    return result


def node_durations(states):
    """Seconds from admission to the final state per node, from earlier runs' ``state.json`` (oldest first; the latest
    timing of a node wins). Nodes never admitted, still in flight, or left alone (no work done) are not timed."""
    durations = {}
    for state in states:
        for name, record in ((state or {}).get('nodes') or {}).items():
            if not isinstance(record, dict) or record.get('state') not in ('done', 'rolled_back', 'quarantined'):
                continue
            try:
                admitted = datetime.datetime.fromisoformat(record['admitted_at']).timestamp()
                finished = datetime.datetime.fromisoformat(record['finished_at']).timestamp()
            except (KeyError, TypeError, ValueError):
                continue
            if finished >= admitted:
                durations[name] = finished - admitted
    return durations


def order(nodes, unavailable=(), durations=None):
    """The rollout order (see the module docstring).  Returns a list of (PlanNode, kind, ready time).

    ``durations`` (:func:`node_durations`) puts the idle nodes longest first (untimed nodes after the timed ones, by name).
    """
    unavailable = set(unavailable)
    durations = durations or {}
    idle, timed, unknown, left = [], [], [], []
    for node in sorted(nodes, key=lambda item: item.name):
        if node.name in unavailable:
            left.append((node, 3, None))
            continue
        kind, ready = _ready(node)
        if kind == 0:
            idle.append(node)
        elif kind == 1:
            timed.append((node, kind, ready))
        else:
            unknown.append((node, kind, ready))
    timed.sort(key=lambda item: (item[2], _group_key(item[0]), item[0].name))
    unknown.sort(key=lambda item: (_group_key(item[0]), item[0].name))
    idle.sort(key=lambda node: (node.name not in durations, -durations.get(node.name, 0.0), node.name))
    return [(node, 0, None) for node in interleave(idle)] + timed + unknown + left


def _group_key(node):
    """The nodes of one multi-node job next to each other in the order (host_pinned starts them together, so the group's
    nodes reach the gate together): its smallest multi-node job id, '' for none."""
    return min([job.id for job in node.jobs if len(job.nodes) > 1] or [''])


def _iso(stamp):
    return datetime.datetime.fromtimestamp(stamp, tz=datetime.timezone.utc).isoformat()


def blockers(policy, scheduler, node, now_open, out_by_domain, out_gpus):
    """What keeps ``node`` from going now (besides its turn): a list of {rule, reason}."""
    found = []
    for job in node.jobs:
        if job.checkpoint is not None:
            reason = 'job %s runs; next checkpoint at %s' % (job.id, _iso(job.checkpoint))
        elif job.end is not None:
            reason = 'job %s runs until %s (no checkpoint declared)' % (job.id, _iso(job.end))
        else:
            reason = 'job %s runs (no checkpoint or end declared)' % job.id
        found.append({'rule': 'running_job', 'reason': reason})
    if node.pdb_blocked:
        found.append({'rule': 'pdb', 'reason': 'PodDisruptionBudget %s allows no eviction now' % node.pdb_blocked})
    if policy.domain_var is not None and out_by_domain.get(node.domain, 0) >= policy.domain_max:
        found.append({'rule': 'domain', 'reason': '%s %s has %d node(s) out (gpufleet_domain_max %d)'
                      % (policy.domain_var, node.domain, out_by_domain.get(node.domain, 0), policy.domain_max)})
    if policy.capacity_floor > 0:
        total = scheduler.total_gpus
        if not total:
            found.append({'rule': 'capacity_unknown', 'reason': 'the scheduler gave no GPU total'})
        elif (total - out_gpus - node.gpus) / float(total) < policy.capacity_floor - 1e-9:
            found.append({'rule': 'capacity_floor', 'reason': 'taking it out would leave %d of %d GPUs schedulable, below %s%%'
                          % (total - out_gpus - node.gpus, total, ('%.1f' % (policy.capacity_floor * 100)).rstrip('0').rstrip('.'))})
    if not now_open:
        found.append({'rule': 'maintenance_window', 'reason': 'outside the maintenance window now'})
    return found


def plan(policy, nodes, scheduler, now, estimates=None, converge=True):
    """The plan for ``nodes`` (PlanNode) under ``policy`` with the scheduler's view now; see the module docstring."""
    estimates = dict(estimates or DEFAULT_PHASE_SECONDS)
    duration = node_seconds(estimates, converge)
    start_stamp = now.timestamp()
    unavailable = scheduler.unavailable
    ordered = order(nodes, scheduler.held)
    candidates = [item for item in ordered if item[1] != 3]
    size = policy.window_size(len(candidates)) if candidates else 0
    cap = policy.budget_cap(len(nodes), 0) if candidates else None
    if cap is not None:
        size = min(size, cap)       # the window the failure budget can absorb, no failure assumed (gpufleet_budget_window)
    windows = policy.maintenance_window
    now_open = policy.in_maintenance_window(now)

    known = {node.name: node for node in nodes}
    out_by_domain = collections.Counter(known[name].domain if name in known else scheduler.domains.get(name)
                                        for name in unavailable)
    out_gpus = sum(unavailable.values())

    def opening(stamp):
        if not windows:
            return stamp
        moment = next_opening(windows, datetime.datetime.fromtimestamp(stamp, tz=datetime.timezone.utc))
        return moment.timestamp() if moment else None

    # Play the window forward: a heap of slot-free times; canaries run one by one first.
    slots = []
    free_at = start_stamp
    canaries = min(policy.canary, len(candidates))
    idle = collections.deque(item for item in candidates if item[1] == 0)
    timed = collections.deque(item for item in candidates if item[1] == 1)
    unknown = collections.deque(item for item in candidates if item[1] == 2)
    schedule = {}
    position = 0
    while idle or timed or unknown:
        if position < canaries:
            slot_time = free_at
        elif len(slots) < size:
            slot_time = free_at
        else:
            slot_time = heapq.heappop(slots)
        if timed and timed[0][2] <= slot_time:
            item = timed.popleft()
        elif idle:
            item = idle.popleft()
        elif timed:
            item = timed.popleft()
        else:
            item = unknown.popleft()
        ready = item[2] if item[2] is not None else slot_time
        begin = opening(max(slot_time, ready))
        if begin is None:
            begin = max(slot_time, ready)
        end = begin + duration
        schedule[item[0].name] = (position, begin, end, position < canaries)
        if position < canaries:
            free_at = end + policy.soak_seconds
            if position == canaries - 1:
                slots = []
        else:
            heapq.heappush(slots, end)
        position += 1

    entries = []
    makespan_end = start_stamp
    for node, kind, _ready_time in ordered:
        blocked = blockers(policy, scheduler, node, now_open, out_by_domain, out_gpus)
        entry = {'node': node.name, 'domain': node.domain, 'gpus': node.gpus}
        if kind == 3:
            entry.update({'position': None, 'canary': False, 'start_in': None, 'end_in': None, 'predicted_seconds': 0})
            entry['held_by'] = scheduler.held.get(node.name)
            blocked.insert(0, {'rule': 'cordoned_by_others', 'reason': 'held out of service by another actor (%s): left alone at the '
                               'gate' % entry['held_by']})
        else:
            index, begin, end, is_canary = schedule[node.name]
            makespan_end = max(makespan_end, end)
            entry.update({'position': index + 1, 'canary': is_canary, 'start_in': round(begin - start_stamp),
                          'end_in': round(end - start_stamp), 'predicted_seconds': round(end - begin)})
            if is_canary and index > 0:
                blocked.append({'rule': 'canary', 'reason': 'goes after canary %d of %d passed' % (index, canaries)})
            elif not is_canary and canaries:
                blocked.append({'rule': 'canary', 'reason': 'the window opens after %d canary node(s) pass' % canaries})
            elif index >= size:
                blocked.append({'rule': 'window', 'reason': 'position %d; the window holds %d' % (index + 1, size)})
        entry['blocked_by'] = blocked
        entries.append(entry)
    starts = {name: begin for name, (_index, begin, _end, _canary) in schedule.items()}
    jobs = predict_interruptions(nodes, starts, policy.job_aware)
    return {
        'generated': now.astimezone(datetime.timezone.utc).isoformat(),
        'nodes_total': len(ordered),
        'nodes_planned': len(candidates),
        'window': size,
        'canary': canaries,
        'phase_seconds': estimates,
        'node_seconds': duration,
        'predicted_seconds': round(makespan_end - start_stamp),
        'order': entries,
        'job_aware': policy.job_aware,
        'jobs': jobs,
        'interruptions': sum(job['interruptions'] for job in jobs),
        'gpu_hours_lost': round(sum(job['gpu_hours_lost'] or 0.0 for job in jobs), 2),
    }


# Drains of one job's nodes whose predicted starts lie within this many seconds interrupt it once.
SAME_INTERRUPTION_SECONDS = 60


def predict_interruptions(nodes, starts, job_aware=True):
    """Per running job, how many times the rollout is predicted to interrupt it and the GPU-hours it loses:
    [{job, nodes, interruptions, gpu_hours_lost (None when unknown), at (the predicted drains, ISO)}], by job.

    ``starts``: each planned node's predicted start (epoch seconds).  A job that ends before the first of its nodes starts is
    never interrupted.  Job-aware (the gate's job rules), its nodes go together at its declared checkpoint: once, nothing lost
    when it declares one, else the work since it started.  Without, every drain of its nodes at a different time (more than
    :data:`SAME_INTERRUPTION_SECONDS` apart) interrupts it again, each losing the work since its checkpoint when that passed,
    else since it started; the nodes it was moved to are not predicted."""
    by_job = {}
    gpus = {}
    for node in nodes:
        for job in node.jobs:
            by_job.setdefault(job.id, (job, []))[1].append(node.name)
            gpus[job.id] = gpus.get(job.id, 0) + node.gpus
    found = []
    for job_id in sorted(by_job):
        job, names = by_job[job_id]
        times = sorted(starts[name] for name in names if name in starts)
        if not times or (job.end is not None and job.end <= times[0]):
            continue
        if job_aware:
            drains = [max(times[0], job.checkpoint) if job.checkpoint is not None else times[0]]
        else:
            drains = []
            for moment in times:
                if not drains or moment - drains[-1] > SAME_INTERRUPTION_SECONDS:
                    drains.append(moment)
        lost = 0.0
        for moment in drains:
            if job_aware and job.checkpoint is not None:
                break       # the gate admits its nodes at a declared checkpoint only (this one, or the next it declares)
            base = job.checkpoint if job.checkpoint is not None and job.checkpoint <= moment else job.start
            if base is None:
                lost = None
                break
            lost += max(0.0, moment - base) / 3600.0 * gpus[job_id]
        found.append({'job': job_id, 'nodes': sorted(names), 'interruptions': len(drains),
                      'gpu_hours_lost': round(lost, 2) if lost is not None else None, 'at': [_iso(moment) for moment in drains]})
    return found
