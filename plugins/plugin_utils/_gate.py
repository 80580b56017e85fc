# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout gate: may this node go now?

Controller-side, no Ansible import, no I/O, no clock: :func:`admit` decides from the policy
(:class:`~._policy.Policy`), the rollout's state (:class:`Rollout`, built from the ledger), what the scheduler
says now (:class:`SchedulerView`) and ``now`` (an aware datetime).  The answer (:class:`Decision`) is one of

* ``admit``: the node may start (``canary`` says whether it goes as a canary);
* ``wait``: not now; ``rule`` says why (``member``: in flight on another live controller of the run,
  ``maintenance_window``, ``canary``, ``window``, ``budget_window``, ``checkpoint`` and ``job_group`` (its running jobs,
  :func:`job_limits`), ``domain``, ``capacity_unknown``, ``capacity_floor``) and ``until`` when a time is known;
* ``pause``: no new admissions for anyone, in-flight nodes finish: ``operator``, ``circuit_breaker``
  (stays until an operator resets it), ``pin_suspect`` ("roll back the pin"), ``canary_failed``, ``budget``; its
  ``rules`` name every one of them that holds (the first is ``rule``);
* ``skip``: the node is already in a final state (a resumed run does not admit it again);
* ``leave``: a pending node another actor holds out of service now (an admin's drain or cordon, down, NotReady, a taint,
  another system's quarantine: ``SchedulerView.held``) is left alone (rule ``held``) before any other rule: it never takes a
  slot of the window and no phase is written for it.

A node caught mid-way by a crash (in an in-flight state) is admitted again with rule ``resume``: it already
holds its slot, and a pause does not stop it (in-flight nodes finish).  With several controllers (members of one run,
``_members``) a node in flight on another live member waits (rule ``member``) instead: only a dead member's node is
resumed.  The rules are checked in the order
above; docs/rollout-policy.md explains each.

The queue at the gate (:func:`queue_candidates`, :func:`in_line`): host_pinned starts hosts in the plan's order, but
which waiting worker polls first is chance, so an admission waits (rule ``order``) while an earlier node of the plan that
waits at the gate, or that host_pinned is starting right now (the arrival grace), would be admitted itself.  The gate's
waiting list (:func:`waiting`) and the nodes that ever reached it (:func:`arrived`) are kept by the ledger's backend; the
step hands them in, with the epoch seconds the clock said.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import re

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._policy import next_opening

PENDING = 'pending'
IN_FLIGHT = ('admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'rolling_back')
FINAL = ('done', 'rolled_back', 'quarantined', 'deferred', 'left_alone')
STATES = (PENDING,) + IN_FLIGHT + FINAL
# Final states that count against the failure budget.
FAILED = ('rolled_back', 'quarantined')

ADMIT, WAIT, PAUSE, SKIP, LEAVE = 'admit', 'wait', 'pause', 'skip', 'leave'

_UUID = re.compile(r'(?:gpu-|mig-)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', re.IGNORECASE)
_PCI = re.compile(r'\b[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\b', re.IGNORECASE)
_DIGITS = re.compile(r'[0-9]+')
_SPACE = re.compile(r'\s+')


@dataclasses.dataclass(frozen=True)
class Node:
    """One node of the rollout as the ledger knows it."""

    state: str = PENDING
    domain: str | None = None
    gpus: int = 0
    canary: bool = False
    finished: float | None = None      # epoch seconds of its final state
    signature: tuple | None = None     # failure_signature() of a failed node
    rma_suspect: bool = False          # failed on the new and the previous pin: hardware, not the pin
    member: str | None = None          # the controller (run member) that admitted it, while in flight


@dataclasses.dataclass(frozen=True)
class Rollout:
    """The rollout's nodes (inventory_hostname -> :class:`Node`) and its run-level flags.

    ``nodes`` may be a compact view (``total`` then gives the rollout's node count): every node in flight, every failed
    node (``rolled_back``, ``quarantined``), the earliest ``max(canary, pin_fault_early_nodes)`` nodes to finish (``done``
    by ``finished or 0``; ``done`` or failed by ``finished``), the node asked about and the rollout's nodes the scheduler
    lists as unavailable.  Every rule then decides as on the full view (``_ledger.RunLedger.gate_view`` builds it).
    """

    nodes: dict
    paused: str | None = None          # an operator's pause, with its reason
    breaker_reset: float | None = None  # epoch seconds of the last operator reset of the circuit breaker
    quarantines: tuple = ()            # epoch seconds of quarantines by gpufleet outside this rollout (earlier runs)
    total: int | None = None           # the rollout's node count (None: len(nodes), a full view)
    live: frozenset | None = None      # the run's live members (None: not known, a node in flight is always resumed)


@dataclasses.dataclass(frozen=True)
class SchedulerView:
    """What the scheduler says at admission time.

    ``total_gpus``: GPUs of the whole fleet the floor is a share of (None: could not be read).
    ``unavailable``: nodes out of service now, whoever holds them (down, NotReady, cordoned, drained, tainted, held by another
    system) -> their GPUs (nodes of this rollout may appear; they are counted once).  ``domains``: the domain of unavailable
    nodes outside the rollout.  ``held``: the unavailable nodes another actor holds (not only gpufleet) -> who and how; a
    pending node among them is left alone at the gate.
    """

    total_gpus: int | None = None
    unavailable: dict = dataclasses.field(default_factory=dict)
    domains: dict = dataclasses.field(default_factory=dict)
    held: dict = dataclasses.field(default_factory=dict)
    jobs: dict = dataclasses.field(default_factory=dict)    # node -> its running jobs (``_planner.Job``: id, nodes, checkpoint)
    job_aware: bool = True                                  # the job rules hold (gpufleet_job_aware)


@dataclasses.dataclass(frozen=True)
class Decision:
    action: str
    rule: str
    reason: str
    canary: bool = False
    until: datetime.datetime | None = None
    rules: tuple = ()                  # a pause: every rule that holds (``rule`` is the first)
    group: tuple = ()                  # an admission of a job's group: every pending node of it, taken together
    jobs: tuple = ()                   # the multi-node jobs that make the group

    def to_dict(self):
        return {'action': self.action, 'rule': self.rule, 'reason': self.reason, 'canary': self.canary,
                'until': self.until.isoformat() if self.until else None, 'rules': list(self.rules or (self.rule,)),
                'group': list(self.group), 'jobs': list(self.jobs)}


def normalize_message(message, node=None):
    """A failure message with what differs from node to node masked: node name, UUIDs, PCI addresses, numbers."""
    text = str(message or '')
    if node:
        text = text.replace(node, '<node>')
    text = _UUID.sub('<uuid>', text)
    text = _PCI.sub('<pci>', text)
    text = _DIGITS.sub('#', text)
    return _SPACE.sub(' ', text).strip().lower()


def failure_signature(result, node=None):
    """How a node failed, comparable across nodes, from its ``node_upgrade_result``; None when it did not fail.

    A failed validation on the new pin gives ``('validate', ((check, message), ...))`` with the failed checks;
    any other failure ``(phase, message)``.  Messages go through :func:`normalize_message` so that
    "GPU 3 ... GPU-uuid-a" on one node and "GPU 5 ... GPU-uuid-b" on another read the same.
    """
    if not isinstance(result, dict) or result.get('state') not in FAILED:
        return None
    checks = result.get('validation') or []
    failed = tuple(sorted((str(check.get('name')), normalize_message(check.get('message'), node))
                          for check in checks if isinstance(check, dict) and check.get('passed') is False))
    if failed:
        return ('validate', failed)
    return (str(result.get('phase') or 'unknown'), normalize_message(result.get('reason'), node))


def node_count(rollout):
    """The rollout's node count: ``total`` of a compact view, else the nodes it holds."""
    return len(rollout.nodes) if rollout.total is None else rollout.total


def in_flight(rollout):
    return [name for name, node in rollout.nodes.items() if node.state in IN_FLIGHT]


def out_of_service(rollout, scheduler):
    """Nodes whose GPUs are not schedulable now: down or cordoned by others, in flight, quarantined by us."""
    out = dict(scheduler.unavailable)
    for name, node in rollout.nodes.items():
        if node.state in IN_FLIGHT or node.state == 'quarantined':
            out[name] = node.gpus
    return out


def schedulable_share(rollout, scheduler, extra_gpus=0, out=None):
    """The share of the fleet's GPUs schedulable after ``extra_gpus`` more go out; None when unknown. ``out``: the
    :func:`out_of_service` nodes when already known."""
    total = scheduler.total_gpus
    if not total:
        return None
    out = sum((out_of_service(rollout, scheduler) if out is None else out).values()) + extra_gpus
    return max(0.0, (total - out) / float(total))


def domain_out(rollout, scheduler, domain, out=None):
    """How many nodes of ``domain`` are out now (in flight, quarantined by us, down or cordoned by others)."""
    count = 0
    for name in (out_of_service(rollout, scheduler) if out is None else out):
        node = rollout.nodes.get(name)
        node_domain = node.domain if node is not None else scheduler.domains.get(name)
        if node_domain == domain:
            count += 1
    return count


def node_limits(policy, rollout, scheduler, node, out=None, group=None):
    """The wait that ``node``'s own limits impose now (its domain's limit, the capacity floor with its GPUs out), or None.
    ``out``: the :func:`out_of_service` nodes when already known (the queue asks for many nodes against one view); ``group``:
    every node that goes with it (a job's group, ``node`` among them): the limits hold for all of them together."""
    members = list(group or (node,))
    out = out_of_service(rollout, scheduler) if out is None else out
    if policy.domain_var is not None:
        adding = collections.Counter(rollout.nodes[name].domain for name in members)
        for domain in sorted(adding, key=str):
            count = domain_out(rollout, scheduler, domain, out)
            if count + adding[domain] > policy.domain_max:
                taken = '' if len(members) == 1 else ' (its job\'s group takes %d of it)' % adding[domain]
                return Decision(WAIT, 'domain', '%s %s has %d node(s) out (gpufleet_domain_max %d)%s'
                                % (policy.domain_var, domain, count, policy.domain_max, taken))
    if policy.capacity_floor > 0:
        gpus = sum(rollout.nodes[name].gpus for name in members)
        after = schedulable_share(rollout, scheduler, gpus, out)
        if after is None:
            return Decision(WAIT, 'capacity_unknown', 'the scheduler gave no GPU total; the capacity floor cannot be checked')
        if after < policy.capacity_floor - 1e-9:
            what = node if len(members) == 1 else '%s with its job\'s group (%s)' % (node, ', '.join(members))
            return Decision(WAIT, 'capacity_floor', 'taking %s out (%d GPU(s)) would leave %s%% of %d GPUs schedulable, '
                            'below the floor of %s%%' % (what, gpus, _number(after * 100), scheduler.total_gpus,
                                                         _number(policy.capacity_floor * 100)))
    return None


# ----------------------------------------------------------------------------------------------------------------
# Jobs: a node's running work (``SchedulerView.jobs``, off with gpufleet_job_aware: false).

def job_peers(scheduler, node):
    """Every node linked to ``node`` through running multi-node jobs, transitively (``node`` among them); the jobs."""
    seen, jobs, queue = {node}, {}, [node]
    while queue:
        name = queue.pop()
        for job in scheduler.jobs.get(name, ()):
            if len(job.nodes) < 2 or job.id in jobs:
                continue
            jobs[job.id] = job
            for other in job.nodes:
                if other not in seen:
                    seen.add(other)
                    queue.append(other)
    return seen, jobs


def job_group(rollout, scheduler, node):
    """(the pending nodes of the rollout that must go with ``node``: those its running multi-node jobs link it to, ``node``
    first; those jobs by id). A job's nodes outside the rollout, in flight, final or held by another actor (left alone) are not
    taken. ``rollout`` must
    hold the peers (:func:`job_peers`; the step builds its compact view with them)."""
    if not scheduler.job_aware:
        return (node,), {}
    peers, jobs = job_peers(scheduler, node)
    group = [name for name in sorted(peers) if name != node and name in rollout.nodes and rollout.nodes[name].state == PENDING
             and name not in scheduler.held]
    return (node,) + tuple(group), jobs


def checkpoint_wait(scheduler, node, members, now):
    """A wait (rule ``checkpoint``) while a running job of ``members`` (a node and its job's group) declares its next checkpoint
    in the future: the group goes at the checkpoint, never before (the work since the last one would be lost); None else."""
    if not scheduler.job_aware:
        return None
    stamp = now.timestamp()
    future = {}
    for name in members:
        for job in scheduler.jobs.get(name, ()):
            if job.checkpoint is not None and job.checkpoint > stamp:
                future[job.id] = job.checkpoint
    if not future:
        return None
    until = max(future.values())
    return Decision(WAIT, 'checkpoint', '%s waits for the declared checkpoint of job %s at %s (gpufleet_job_aware)'
                    % (node, ', '.join('%s (%s)' % (job_id, datetime.datetime.fromtimestamp(moment, tz=datetime.timezone.utc).isoformat())
                                       for job_id, moment in sorted(future.items())),
                       datetime.datetime.fromtimestamp(until, tz=datetime.timezone.utc).isoformat()),
                    until=datetime.datetime.fromtimestamp(until, tz=datetime.timezone.utc))


def group_limit(policy, rollout):
    """How many nodes may be in flight at once: the window, or less when the failure budget caps it."""
    size = policy.window_size(node_count(rollout))
    cap = policy.budget_cap(node_count(rollout), failed_count(rollout))
    return size if cap is None else min(size, cap)


def group_wait(policy, rollout, node, members, jobs, flying):
    """The wait a job's group imposes besides the limits (rule ``job_group``; never a run-wide rule such as ``window``: a node
    alone may still fit): a group larger than the window waits until its job ends or is requeued (never taken in pieces while
    the job runs); one that fits waits for room for all of it; None for a node alone."""
    if len(members) < 2:
        return None
    limit = group_limit(policy, rollout)
    names = ', '.join(sorted(jobs))
    if len(members) > limit:
        return Decision(WAIT, 'job_group', 'job %s runs on %d pending node(s) of the rollout (%s), more than the %d that may be in '
                        'flight: they wait until the job ends or is requeued, never taken in pieces' % (names, len(members), ', '.join(members), limit))
    if len(flying) + len(members) > limit:
        return Decision(WAIT, 'job_group', 'job %s: its group of %d (%s) goes together when the window has room for all of it; %d of %d in flight'
                        % (names, len(members), ', '.join(members), len(flying), limit))
    return None


def job_limits(policy, rollout, scheduler, node, now, out=None, flying=None):
    """(the wait the node's jobs and limits impose now or None, its group): the checkpoint, the group's room in the window,
    then the domain limit and the floor for the whole group (:func:`node_limits`)."""
    members, jobs = job_group(rollout, scheduler, node)
    waiting = checkpoint_wait(scheduler, node, members, now)
    if waiting is None:
        waiting = group_wait(policy, rollout, node, members, jobs, in_flight(rollout) if flying is None else flying)
    if waiting is None:
        waiting = node_limits(policy, rollout, scheduler, node, out, group=members)
    return waiting, members, jobs


def quarantine_times(rollout):
    times = [node.finished for node in rollout.nodes.values() if node.state == 'quarantined' and node.finished is not None]
    return sorted(times + list(rollout.quarantines))


def breaker_tripped(policy, rollout, now):
    """The circuit breaker: quarantines within the sliding window, since the last reset, at or over the threshold."""
    if policy.circuit_breaker_threshold is None:
        return None
    stamp = now.timestamp()
    since = stamp - policy.circuit_breaker_window
    if rollout.breaker_reset is not None:
        since = max(since, rollout.breaker_reset)
    recent = [time for time in quarantine_times(rollout) if since < time <= stamp]
    if len(recent) >= policy.circuit_breaker_threshold:
        return len(recent)
    return None


def pin_suspect(policy, rollout):
    """The pin-fault detector: (signature, nodes) when the pin looks bad, else None.

    A canary that failed validation on the new pin, or at least ``pin_fault_threshold`` of the first
    ``pin_fault_early_nodes`` nodes to finish that failed the same way.  Nodes that failed on both pins
    (``rma_suspect``) are hardware and do not count.
    """
    if policy.pin_fault_threshold is None:
        return None
    candidates = [(name, node) for name, node in rollout.nodes.items()
                  if node.state in FAILED and node.signature is not None and not node.rma_suspect]
    for name, node in sorted(candidates):
        if node.canary and node.signature[0] == 'validate':
            return node.signature, [name]
    finished = sorted((node.finished, name) for name, node in rollout.nodes.items()
                      if node.state in ('done',) + FAILED and node.finished is not None)
    early = {name for _time, name in finished[:policy.pin_fault_early_nodes]}
    groups = {}
    for name, node in candidates:
        if name in early:
            groups.setdefault(node.signature, []).append(name)
    for signature, names in sorted(groups.items(), key=lambda item: (-len(item[1]), str(item[0]))):
        if len(names) >= policy.pin_fault_threshold:
            return signature, sorted(names)
    return None


def _signature_text(signature):
    phase, detail = signature
    if phase == 'validate':
        return 'validation ' + '; '.join('%s: %s' % check for check in detail)
    return '%s: %s' % (phase, detail)


def pause_decision(policy, rollout, now):
    """The run-level pause that applies to every pending node now, or None: the first rule that holds, with every rule that
    holds in ``rules`` and all their reasons in ``reason``."""
    holding = pause_rules(policy, rollout, now)
    if not holding:
        return None
    if len(holding) == 1:
        return dataclasses.replace(holding[0], rules=(holding[0].rule,))
    return Decision(PAUSE, holding[0].rule, '; '.join(decision.reason for decision in holding),
                    rules=tuple(decision.rule for decision in holding))


def pause_rules(policy, rollout, now):
    """Every run-level pause rule that holds now, in the order of the module docstring (a list of Decisions)."""
    return [decision for decision in (rule(policy, rollout, now) for rule in PAUSE_RULES) if decision is not None]


def _operator_pause(policy, rollout, now):
    del policy, now
    if rollout.paused:
        return Decision(PAUSE, 'operator', 'paused by an operator: %s' % rollout.paused)
    return None


def _breaker_pause(policy, rollout, now):
    tripped = breaker_tripped(policy, rollout, now)
    if tripped:
        return Decision(PAUSE, 'circuit_breaker',
                        'circuit breaker open: %d node(s) quarantined within %ss (threshold %d); '
                        'no admissions until an operator resets it'
                        % (tripped, _number(policy.circuit_breaker_window), policy.circuit_breaker_threshold))
    return None


def _pin_pause(policy, rollout, now):
    del now
    suspect = pin_suspect(policy, rollout)
    if suspect:
        signature, names = suspect
        return Decision(PAUSE, 'pin_suspect', 'pin suspect: %s failed the same way (%s); roll back the pin'
                        % (', '.join(names), _signature_text(signature)))
    return None


def _canary_pause(policy, rollout, now):
    del policy, now
    failed_canaries = sorted(name for name, node in rollout.nodes.items() if node.canary and node.state in FAILED)
    if failed_canaries:
        return Decision(PAUSE, 'canary_failed', 'canary %s ended %s; the window does not open'
                        % (', '.join(failed_canaries), ', '.join(rollout.nodes[name].state for name in failed_canaries)))
    return None


def failed_count(rollout):
    return sum(1 for node in rollout.nodes.values() if node.state in FAILED)


def _budget_pause(policy, rollout, now):
    del now
    total = node_count(rollout)
    if policy.max_fail_percentage is not None and total:
        failed = failed_count(rollout)
        if failed * 100.0 > policy.max_fail_percentage * total:
            return Decision(PAUSE, 'budget', 'failure budget exceeded: %d of %d node(s) failed (%s%%), '
                            'gpufleet_max_fail_percentage is %s; in-flight nodes finish, no new admissions'
                            % (failed, total, _number(failed * 100.0 / total), _number(policy.max_fail_percentage)))
    return None


# The run-level pause rules, in the order they are named.
PAUSE_RULES = (_operator_pause, _breaker_pause, _pin_pause, _canary_pause, _budget_pause)


def _number(value):
    return ('%.1f' % value).rstrip('0').rstrip('.') if isinstance(value, float) else str(value)


def canary_wait(policy, rollout, now):
    """While fewer than ``canary`` nodes have passed (done and soaked), nodes go one at a time.

    Returns (wait Decision or None, is_canary).
    """
    if policy.canary <= 0:
        return None, False
    stamp = now.timestamp()
    done = [(node.finished or 0.0, name) for name, node in rollout.nodes.items() if node.state == 'done']
    passed = [name for finished, name in done if finished + policy.soak_seconds <= stamp]
    if len(passed) >= policy.canary:
        return None, False
    flying = sorted(in_flight(rollout))
    if flying:
        return Decision(WAIT, 'canary', 'canary phase: %s in flight; %d of %d canary node(s) passed'
                        % (', '.join(flying), len(passed), policy.canary)), True
    soaking = sorted((finished + policy.soak_seconds, name) for finished, name in done if name not in passed)
    if soaking:
        until = datetime.datetime.fromtimestamp(soaking[0][0], tz=datetime.timezone.utc)
        return Decision(WAIT, 'canary', 'canary %s soaks until %s (gpufleet_soak_seconds %s)'
                        % (soaking[0][1], until.isoformat(), _number(policy.soak_seconds)), until=until), True
    return None, True


def admit(policy, rollout, scheduler, node, now, member=None):
    """Decide for ``node`` (an inventory_hostname of the rollout) at ``now``, asked by the run's ``member`` (the controller);
    see the module docstring."""
    if now.tzinfo is None:
        raise ValueError('now must be an aware datetime, got %r' % (now,))
    if node not in rollout.nodes:
        raise KeyError('%s is not a node of this rollout' % node)
    me = rollout.nodes[node]
    if me.state in FINAL:
        return Decision(SKIP, 'final', '%s is already %s' % (node, me.state))
    if me.state in IN_FLIGHT:
        if me.member and me.member != member and rollout.live is not None and me.member in rollout.live:
            return Decision(WAIT, 'member', '%s is %s on controller %s, which is alive: it finishes it' % (node, me.state, me.member))
        return Decision(ADMIT, 'resume', '%s was caught %s: re-check and continue' % (node, me.state), canary=me.canary)
    if me.state != PENDING:
        raise ValueError('%s: unknown state %r' % (node, me.state))
    if node in scheduler.held:
        return Decision(LEAVE, 'held', 'held out of service by another actor: %s; left alone (the rollout never takes over '
                        'another actor\'s node)' % scheduler.held[node])

    paused = pause_decision(policy, rollout, now)
    if paused:
        return paused

    if not policy.in_maintenance_window(now):
        until = next_opening(policy.maintenance_window, now)
        return Decision(WAIT, 'maintenance_window', 'outside the maintenance window; it opens at %s'
                        % (until.isoformat() if until else 'no known time'), until=until)

    waiting, is_canary = canary_wait(policy, rollout, now)
    if waiting:
        return waiting
    members, jobs = job_group(rollout, scheduler, node)
    if is_canary and len(members) > 1:
        return Decision(WAIT, 'job_group', 'canary phase: %s runs job %s with %s; a job\'s group goes together, after the canaries'
                        % (node, ', '.join(sorted(jobs)), ', '.join(members[1:])))

    flying = in_flight(rollout)
    size = policy.window_size(node_count(rollout))
    if len(flying) >= size:
        return Decision(WAIT, 'window', 'window full: %d of %d in flight' % (len(flying), size))
    failed = failed_count(rollout)
    cap = policy.budget_cap(node_count(rollout), failed)
    if cap is not None and len(flying) >= cap:
        return Decision(WAIT, 'budget_window', 'the failure budget (gpufleet_max_fail_percentage %s of %d nodes, %d failed) can absorb '
                        '%d more failure(s): at most %d node(s) in flight, %d are (gpufleet_budget_window)'
                        % (_number(policy.max_fail_percentage), node_count(rollout), failed, cap - 1, cap, len(flying)))

    limited, members, jobs = job_limits(policy, rollout, scheduler, node, now, flying=flying)
    if limited is not None:
        return limited

    if is_canary:
        return Decision(ADMIT, 'canary', '%s goes alone as a canary' % node, canary=True)
    if len(members) > 1:
        return Decision(ADMIT, 'admit', 'admitted with its job\'s group (job %s: %s): %d of %d in flight'
                        % (', '.join(sorted(jobs)), ', '.join(members), len(flying) + len(members), size),
                        group=members, jobs=tuple(sorted(jobs)))
    return Decision(ADMIT, 'admit', 'admitted: %d of %d in flight' % (len(flying) + 1, size))


# ----------------------------------------------------------------------------------------------------------------
# The queue at the gate.

# A node counts as waiting at the gate while it polled within this many poll intervals (plus 2 s).
WAITING_POLLS = 3
# A host host_pinned is starting (never at the gate yet, a worker free) keeps its place in the plan for this many poll
# intervals (plus 3 s) of another host's wait.
ARRIVAL_GRACE_POLLS = 2


def waiting_ttl(poll):
    """Seconds a node counts as waiting at the gate after its last poll (``poll``: the poll interval)."""
    return poll * WAITING_POLLS + 2


def waiting(seen, node, present, now, ttl):
    """The gate's waiting list after ``node`` polled (``present``) or left the gate: {node: epoch seconds of its last poll}.

    ``seen``: the list as kept; an entry older than ``ttl`` seconds at ``now`` (its host gave up or is gone) or not a time is
    dropped.
    """
    kept = {name: stamp for name, stamp in (seen or {}).items()
            if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) and now - stamp <= ttl}
    if present:
        kept[node] = now
    else:
        kept.pop(node, None)
    return kept


def arrived(names, node):
    """(every node that reached the gate in this run, ``node`` among them; whether ``node`` is new there), from ``names``:
    the list as kept."""
    known = set(name for name in names or [] if isinstance(name, str))
    return known | {node}, node not in known


def before(order, node, reached, limit):
    """The first ``limit`` nodes ahead of ``node`` in ``order`` that never reached the gate (not in ``reached``)."""
    found = []
    for name in order:
        if name == node or len(found) >= limit:
            break
        if name not in reached:
            found.append(name)
    return found


def queue_candidates(node, order, waiting_now, reached, in_flight_count, forks, waited, poll):
    """The nodes that may hold ``node`` back at the gate (:func:`in_line` asks which of them would go now):

    * every node waiting at the gate (``waiting_now``, ``node`` among them), never ``node`` itself;
    * during the arrival grace (``waited`` seconds at the gate, below ``ARRIVAL_GRACE_POLLS`` poll intervals plus 3 s) and
      while a worker is free (the nodes waiting plus ``in_flight_count`` below ``forks``), the first ``forks`` nodes ahead
      of ``node`` in ``order`` that never reached the gate (not in ``reached``): host_pinned is starting them.
    """
    expected = set()
    if waited < ARRIVAL_GRACE_POLLS * poll + 3 and len(waiting_now) + in_flight_count < forks:
        expected = set(before(order, node, reached, forks))
    return (set(waiting_now) | expected) - {node}


def first_in_line(policy, rollout, scheduler, node, order, candidates, now, canary=False):
    """The earlier node in ``order`` among ``candidates`` that is pending and would be admitted now, or None.

    Nodes not among the candidates (not at the gate, not expected there) never hold anyone back.  Asked once ``node`` is
    admitted: the run-level rules (pause, maintenance window, canary, window, budget window) then let every pending node
    go alike, so an earlier candidate would go when its own limits and its jobs (:func:`job_limits`) let it; during the canary
    phase (``canary``) a node with a job's group would not (a group never goes as a canary), nor would one whose group's other
    nodes are not among the candidates (a group goes only when all of it waits at the gate).
    """
    out = None
    flying = None
    for name in order:
        if name == node:
            return None
        if name not in candidates or name not in rollout.nodes or rollout.nodes[name].state != PENDING or name in scheduler.held:
            continue
        out = out_of_service(rollout, scheduler) if out is None else out
        flying = in_flight(rollout) if flying is None else flying
        limited, members, _jobs = job_limits(policy, rollout, scheduler, name, now, out, flying)
        if limited is None and not (canary and len(members) > 1) and set(members[1:]) <= set(candidates) | {node}:
            return name
    return None


def in_line(policy, rollout, scheduler, node, order, candidates, now, decision):
    """The gate's ``decision`` for ``node`` in the plan's order: a wait (rule ``order``) when an earlier node of
    ``candidates`` (:func:`queue_candidates`) would be admitted now; any other decision, a resume among them, is kept.

    ``rollout`` must hold the candidates (a compact view built with them).
    """
    if decision.action != ADMIT or decision.rule == 'resume':
        return decision
    ahead = first_in_line(policy, rollout, scheduler, node, order, candidates, now, canary=decision.canary)
    if ahead:
        return Decision(WAIT, 'order', '%s is ahead of %s in the plan and may go now' % (ahead, node))
    return decision
