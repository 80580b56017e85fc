#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: rollout
short_description: The rollout gate - start a run, admit each node under the policy, record it, finish, plan, operator verbs
version_added: 0.1.0
description:
  - The controller side of the C(rolling_restart), C(converge) and C(rollback) playbooks (the start, the summary and the
    finish of a run in both modes; the gate of window mode, C(gpufleet_window)), and of C(plan.yml) and C(rollout_control.yml).
    Every decision is pure Python in the collection's C(plugin_utils)
    (C(_policy), C(_gate), C(_ledger), C(_planner), C(_rollout)); docs/rollout-policy.md describes the rules.
  - "I(step=check) - validates the rollout's inputs (C(gpufleet_scheduler), C(gpufleet_reboot_method), C(gpufleet_ledger_backend)
    and its settings; a bad value fails with a message that starts with the variable's name), the policy variables and each
    node's I(gpufleet_domain_var); nothing else. I(step=start) checks the same inputs first."
  - "I(step=start) (on localhost): validates the C(gpufleet_*) policy variables (a bad value fails naming the variable,
    before any node is touched), takes the fleet lock (a second rollout is refused naming the run that holds it), creates
    C(<run_dir>/<run_id>/ledger.jsonl) and C(state.json) with every node C(pending) (the first event records the pin, the
    previous pin, the policy, the mode, the playbook (I(kind)), the planned order and the circuit breaker's memory; batch
    mode runs its nodes in the inventory's order), or resumes the run I(run_id) or, when
    I(run_id) is empty, the last unfinished run of this inventory; returns the fact C(gpufleet_rollout) with the nodes still
    to go in the plan's order (idle nodes first, domains interleaved, checkpoint-aware), a resumed run's C(done) nodes to
    confirm first (C(confirm), with the GPU count each showed when it passed) and what the circuit breaker remembers of the
    earlier runs in I(run_dir) (C(breaker): their quarantines within its window, the newest operator reset)."
  - "I(step=confirm) (per node, a resumed run's C(done) node after the quick check of C(node_validate)): records C(done) again
    when I(validation) passed (ledger C(done -> done), reason C(confirmed on resume)), else C(pending) (C(done -> pending), the
    failed checks in the reason; also when I(unreachable)): the node is not counted as done and goes through the gate and the
    whole procedure again."
  - "I(step=admit) (per node, the first task of the window play): blocks, polling the ledger under its lock every I(poll)
    seconds, until the gate admits the node (maintenance window, canary, window, failure domain, capacity floor read from the
    scheduler now, and the order of the plan among the nodes waiting) and records C(admitted); returns the fact
    C(gpufleet_ledger) for M(gpufleet.lifecycle.node_upgrade). A node already final is skipped, a node caught in flight by a
    crash is admitted again (resume). A pause (operator, circuit breaker, pin suspect, failed canary, failure budget) ends the
    wait with I(verdict=pause) and marks the run paused (once, calling C(gpufleet_escalation)). The circuit breaker also counts
    the earlier runs' quarantines in I(breaker)."
  - "I(step=summary) (batch mode, the end of each batch, once): the run's summary from the ledger (the builder I(step=finish)
    uses); pauses the run (once, calling C(gpufleet_escalation)) when a run-level rule of the gate holds (operator, circuit
    breaker, pin suspect, failed canary, failure budget over the run) or the batch's failures exceed I(max_fail_percentage)
    of I(batch); returns C(paused) (the playbooks then start no further batch). I(step=start) in batch mode checks the same
    run-level rules before the first batch and fails, touching no node, when one holds."
  - "I(step=settle) (per node, after the role): makes sure the ledger holds the node's final state from I(result)
    (C(node_upgrade_result)); a no-op when the role recorded it. A C(deferred) node (put back as it was: drain timeout,
    disruption budget, a converge that failed before changing the node) goes back to C(pending) for another attempt while it
    had fewer than C(gpufleet_retries) retries (I(retry=true); the reason says which retry and why). A node that ends
    C(quarantined) calls C(gpufleet_escalation)."
  - "I(step=finish) (on localhost): the run's summary; C(finished) when every node is final, C(paused) (and the task fails
    with the reason) when a pause rule holds; releases the fleet lock I(fleet)."
  - "I(step=plan): the dry run (order, start and end of each node, what blocks it now, predicted duration from earlier
    ledgers' phase times); changes nothing. I(step=control): an operator verb (I(verb)) on a run."
  - The scheduler is read on the controller - Slurm with C(scontrol show node -o) and C(squeue) under I(slurm_environment),
    Kubernetes with the C(kubernetes) Python library, without a scheduler from each node's C(gpufleet_gpus) host variable.
  - "The ledger's backend comes from the variables C(gpufleet_ledger_backend) (C(file), the default: the ledgers in
    I(run_dir); C(kubernetes): ConfigMaps and a Lease in the cluster being upgraded, through the C(kubernetes) Python library,
    I(run_dir) then only a scratch folder), C(gpufleet_ledger_namespace) (default C(default)), C(gpufleet_kubeconfig) (or
    I(kubeconfig)), C(gpufleet_ledger_context) and C(gpufleet_ledger_lease_seconds) (default 60); see docs/rollout-policy.md.
    A token comes only from the environment (C(K8S_AUTH_API_KEY), as AWX's Kubernetes credential sets it), never from a
    variable, and is never returned."
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
attributes:
  check_mode:
    support: none
    details: Only I(step=check) and I(step=plan) run in check mode; the other steps return skipped.
  diff_mode:
    support: none
  idempotent:
    support: none
    description: Each step records events in the ledger.
  action:
    support: full
    description: Implemented by an action plugin that runs on the controller; nothing runs on the node.
options:
  step:
    description: What to do (see the description).
    type: str
    required: true
    choices: [check, start, confirm, admit, settle, summary, finish, plan, control]
  mode:
    description:
      - I(step=start) - C(window) (the gate admits every node) or C(batch) (Ansible's C(serial) takes the nodes, in the
        inventory's order). Both start the same run in the ledger (the mode is recorded; a resume in the other mode is
        refused). A batch-mode resume puts a node a crash caught in flight back to C(admitted) (returned in C(caught)).
    type: str
    default: window
    choices: [window, batch]
  kind:
    description:
      - I(step=start) - which playbook runs the run (C(rolling_restart), C(converge), C(rollback)), recorded; a resume by
        another playbook is refused naming the run. Empty - not recorded, not checked.
    type: str
    default: ''
  fail_states:
    description: I(step=summary) - the node states that count as failed hosts for Ansible's rule (C(gpufleet_fail_states)).
    type: list
    elements: str
    default: [rolled_back, quarantined]
  failed_before:
    description: I(step=summary) - hosts failed in the play's earlier batches (Ansible counts them against this batch).
    type: int
    default: 0
  batch:
    description: I(step=summary) - the hosts of the batch that just ended (C(ansible_play_batch)).
    type: list
    elements: str
    default: []
  max_fail_percentage:
    description:
      - I(step=summary) - C(gpufleet_max_fail_percentage); Ansible's rule for a serial play pauses the run (rule C(batch_budget))
        when the hosts failed so far (I(failed_before) plus this batch's nodes in I(fail_states)) exceed this share of the
        batch's size, or when the whole batch failed. Unset - only a batch that failed whole pauses it.
    type: float
  nodes:
    description:
      - I(step=start), I(step=plan) - the inventory hostnames of the rollout (also the node names in the scheduler).
      - I(step=control) - the nodes of a node verb.
    type: list
    elements: str
    default: []
  run_dir:
    description: The folder of the ledgers (C(gpufleet_run_dir)); one per controller, or a path on shared storage.
    type: path
  run_id:
    description: The run to start or resume (C(gpufleet_run_id)); empty - the last unfinished run of this inventory, else a new id.
    type: str
    default: ''
  ledger:
    description: The run's ledger C({backend, run_dir, run_id}) as I(step=start) returned it (C(gpufleet_rollout.ledger)).
    type: dict
    default: {}
  fleet:
    description: The fleet lock's name; empty - derived from the inventory (C(ansible_inventory_sources)).
    type: str
    default: ''
  pin:
    description:
      - The pin of the run (from C(gpufleet.lifecycle.read_pin)), recorded in the ledger at the start; every node converges
        to the recorded pin. On a resume, a different pin is refused before anything is written (message starting with
        I(pin_source)); empty - the recorded pin is used.
    type: dict
    default: {}
  pin_source:
    description: I(step=start) - the variable the pin came from, named in the refusal of a resume with another pin.
    type: str
    default: gpufleet_pin_file
  policy:
    description: The C(gpufleet_*) policy variables as a mapping; default - the task's variables of those names.
    type: dict
  scheduler:
    description: Where the GPUs and unavailable nodes are read.
    type: str
    default: none
    choices: [slurm, kubernetes, runai, none]
  slurm_environment:
    description: Environment of the Slurm clients (C(SLURM_CONF)).
    type: dict
    default: {}
  kubeconfig:
    description: Kubeconfig for Kubernetes and Run:ai; empty - the client's default.
    type: str
    default: ''
  results_dir:
    description: Folder of the C(<node>.json) results; empty - C(<run_dir>/<run_id>/results). The pin-fault detector reads it.
    type: path
    default: ''
  order:
    description: I(step=admit) - the plan's order (C(gpufleet_rollout.order)); a node does not overtake an earlier waiting one.
    type: list
    elements: str
    default: []
  member:
    description:
      - I(step=admit) - the controller (the run's member, C(gpufleet_rollout.member)) that asks; recorded with the node it admits.
      - A node in flight on another live member of the run waits for it; a dead member's node is resumed here.
    type: str
    default: ''
  poll:
    description: I(step=admit) - seconds between looks at the ledger while waiting.
    type: float
    default: 5.0
  admit_timeout:
    description: I(step=admit) - seconds a node waits at the gate before it gives its worker up and stays C(pending); 0 - no limit.
    type: float
    default: 0.0
  scheduler_timeout:
    description:
      - I(step=admit) - seconds the gate keeps asking a scheduler that does not answer (slurmctld or the Kubernetes API gone),
        the pause between tries doubling from I(poll) up to 30 seconds; then it pauses the run (rule C(scheduler)), admits
        nothing more and the node stays C(pending). Running the playbook again resumes the run.
    type: float
    default: 300.0
  result:
    description: I(step=settle) - the node's C(node_upgrade_result).
    type: dict
    default: {}
  verb:
    description:
      - I(step=control) - C(pause), C(resume) (the run), C(reset_breaker) (the circuit breaker), C(skip) (a pending node is
        left alone), C(retry) (a final node goes back to pending), C(release) (a quarantined node goes to validating) and
        C(released) (after the validation, with I(validation) and I(passed) - done only when it passed on the run's
        recorded pin, else quarantined again with the reason).
    type: str
    choices: [pause, resume, skip, retry, release, released, reset_breaker]
  passed:
    description: I(verb=released) - whether the node is back in service after its validation (the scheduler's answer).
    type: bool
    default: false
  reason:
    description: I(step=control) - why, recorded in the ledger.
    type: str
    default: ''
  history:
    description:
      - How many earlier runs in I(run_dir) (the newest) are read. I(step=plan) - their phase times predict the duration.
        I(step=start) - each node's last admission-to-final time orders the nodes without running work longest first, so a
        sliding window does not end on a slow tail.
    type: int
    default: 20
  breaker:
    description:
      - I(step=admit), I(step=finish) - what the circuit breaker remembers of earlier runs (C(gpufleet_rollout.breaker) from
        I(step=start)); empty - only this run's quarantines count.
    type: dict
    default: {}
  validation:
    description:
      - I(step=confirm) - the quick check's C(node_validate_result); empty - no result, the node is not confirmed.
      - I(verb=released) - the release's C(node_validate_result) (against the run's recorded pin).
    type: dict
    default: {}
  unreachable:
    description: I(step=confirm) - the node could not be reached for the quick check (it is not confirmed).
    type: bool
    default: false
seealso:
  - module: gpufleet.lifecycle.read_pin
'''

EXAMPLES = r'''
- name: Start or resume the run
  gpufleet.lifecycle.rollout:
    step: start
    nodes: "{{ query('ansible.builtin.inventory_hostnames', 'gpu') }}"
    run_dir: /var/lib/gpufleet/runs
    scheduler: slurm
    slurm_environment: {SLURM_CONF: /etc/slurm/slurm.conf}

- name: Wait at the gate (first task of a host_pinned play)
  gpufleet.lifecycle.rollout:
    step: admit
    ledger: "{{ hostvars['localhost']['gpufleet_rollout']['ledger'] }}"
    order: "{{ hostvars['localhost']['gpufleet_rollout']['order'] }}"
    scheduler: slurm
  register: gate

- name: Pause the running rollout
  gpufleet.lifecycle.rollout:
    step: control
    verb: pause
    run_dir: /var/lib/gpufleet/runs
    reason: bad news from the canary's users
'''

RETURN = r'''
ansible_facts:
  description: I(step=start) - C(gpufleet_rollout) (run_id, run_dir, fleet, ledger, order, hosts, resumed, window, results_dir,
    policy, confirm, breaker, pin); I(step=admit) when admitted - C(gpufleet_ledger) ({backend, run_dir, run_id, results_dir}) for
    node_upgrade.
  type: dict
  returned: success
run_id:
  description: The run (I(step=start)).
  type: str
  returned: step=start
resumed:
  description: Whether an existing run was resumed (I(step=start)).
  type: bool
  returned: step=start
order:
  description: Every node of the run in the plan's order (I(step=start)).
  type: list
  elements: str
  returned: step=start
hosts:
  description: The nodes still to go, in order, after a resumed run's done nodes to confirm (I(step=start)).
  type: list
  elements: str
  returned: step=start
confirm:
  description: I(step=start) - a resumed run's C(done) nodes, each with the GPU count it must show (null - not checked).
  type: dict
  returned: step=start
breaker:
  description: I(step=start) - C(quarantines) (run_id, node, time) of earlier runs within the breaker's window and C(reset).
  type: dict
  returned: step=start
state:
  description: I(step=confirm), I(step=settle) - the node's state now (I(step=settle) - its final state before a retry).
  type: str
  returned: step=confirm or step=settle
confirmed:
  description: I(step=confirm) - whether the done node passed the quick check.
  type: bool
  returned: step=confirm
retry:
  description: I(step=settle) - the node went back to C(pending) for a retry (C(gpufleet_retries)).
  type: bool
  returned: step=settle
escalated:
  description: The escalation hook was called (a pause, or a node that ended quarantined).
  type: bool
  returned: when called
verdict:
  description:
    - I(step=admit) - C(admit), C(skip) (already final), C(pause) (the run is paused) or C(pending) (I(admit_timeout), or
      the scheduler did not answer within I(scheduler_timeout)).
  type: str
  returned: step=admit
admitted:
  description: I(step=admit) - whether the node may start.
  type: bool
  returned: step=admit
caught:
  description:
    - I(step=admit) - the ledger state a crash caught the node in when it is admitted again to finish (rule C(resume)),
      C("") otherwise; the playbooks pass it to C(node_upgrade) as C(node_upgrade_resumed_from).
    - I(step=start), batch mode - a mapping node -> that state for every node a crash caught in flight (put back to C(admitted)).
  type: raw
  returned: step=admit and the node is admitted, or step=start
rule:
  description: I(step=admit) - the rule that decided (canary, admit, resume, final, operator, budget, pin_suspect, window, ...).
  type: str
  returned: step=admit
reason:
  description: I(step=admit), I(step=confirm) - why, in words.
  type: str
  returned: step=admit or step=confirm
status:
  description: I(step=finish), I(step=summary), I(step=control) - the run's status (running, paused, finished).
  type: str
  returned: step=finish or step=summary or step=control
counts:
  description: I(step=finish), I(step=summary), I(step=control) - nodes per state.
  type: dict
  returned: step=finish or step=summary or step=control
nodes:
  description: I(step=finish), I(step=summary), I(step=control) - each node's C(state) and C(reason) (the ledger's).
  type: dict
  returned: step=finish or step=summary or step=control
summary:
  description:
    - I(step=finish), I(step=summary) - the run's summary the rollout playbooks hand AWX with C(set_stats) as
      C(gpufleet_rollout_summary), with C(run_id), C(status), C(counts), C(nodes), C(left), C(pause), C(message), C(ledger_file),
      C(state_file), C(results_dir).
  type: dict
  returned: step=finish or step=summary
paused:
  description: I(step=summary) - whether the run is paused (the playbooks start no further batch).
  type: bool
  returned: step=summary
mode:
  description: I(step=start) - C(window) or C(batch).
  type: str
  returned: step=start
ledger_file:
  description: I(step=finish) - the path of C(ledger.jsonl).
  type: str
  returned: step=finish
state_file:
  description: I(step=finish) - the path of C(state.json).
  type: str
  returned: step=finish
policy:
  description: I(step=check) - the validated policy with the variables' names.
  type: dict
  returned: step=check
plan:
  description: I(step=plan) - the plan (order with position, canary, start_in, end_in, blocked_by; predicted_seconds).
  type: dict
  returned: step=plan
lines:
  description: I(step=plan) - the plan, one line per node, and the prediction.
  type: list
  elements: str
  returned: step=plan
'''
