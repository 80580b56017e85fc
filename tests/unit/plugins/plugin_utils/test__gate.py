# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate, one rule per test.

Each test starts from a rollout the gate admits (asserted in ``test_baseline_admits``) and changes one thing,
so a test fails when its rule is removed from ``admit``.
"""

import dataclasses
import datetime

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._gate import Node, Rollout, SchedulerView, admit, failure_signature
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._policy import load_policy
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._planner import Job

NOW = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.timezone.utc)
T = NOW.timestamp()
DCGM_FAIL = ('validate', (('dcgm_diag_r1', 'gpu #: test software failed: driver mismatch'),))


def policy(**overrides):
    values = {'gpufleet_window': 2, 'gpufleet_canary': 0, 'gpufleet_max_fail_percentage': None}
    values.update(overrides)
    return load_policy(values)


def rollout(**states):
    """Nodes n1..n6 pending (8 GPUs, domains a/b alternating) with ``states`` overriding some."""
    nodes = {}
    for index in range(1, 7):
        name = 'n%d' % index
        nodes[name] = Node(domain='a' if index % 2 else 'b', gpus=8)
    for name, changes in states.items():
        nodes[name] = dataclasses.replace(nodes[name], **changes)
    return Rollout(nodes=nodes)


SCHEDULER = SchedulerView(total_gpus=80, unavailable={})


def decide(pol=None, roll=None, scheduler=SCHEDULER, node='n6', now=NOW):
    return admit(pol or policy(), roll or rollout(), scheduler, node, now)


def test_baseline_admits():
    decision = decide(roll=rollout(n1={'state': 'converging'}, n2={'state': 'done', 'finished': T - 60}))
    assert (decision.action, decision.rule, decision.canary) == ('admit', 'admit', False)


def test_a_pending_node_another_actor_holds_is_left_alone_before_any_rule():
    # Even with the window full and the run paused by an operator: leaving it alone takes no slot and waits for nothing.
    held = SchedulerView(total_gpus=80, unavailable={'n6': 8}, held={'n6': 'Slurm DRAIN (reason: admin: bad DIMM)'})
    roll = dataclasses.replace(rollout(n1={'state': 'converging'}, n2={'state': 'validating'}), paused='alice')
    decision = decide(roll=roll, scheduler=held)
    assert (decision.action, decision.rule) == ('leave', 'held') and 'admin: bad DIMM' in decision.reason
    # Out of service by gpufleet only (not held): decided as any node, its GPUs counted out.
    own = SchedulerView(total_gpus=80, unavailable={'n6': 8}, held={})
    assert (decide(scheduler=own).action, decide(scheduler=own).rule) == ('admit', 'admit')
    # In flight (caught by a crash), a node out of service is ours: resumed, not left alone.
    assert decide(roll=rollout(n6={'state': 'rebooting'}), scheduler=held).rule == 'resume'


def test_the_queue_never_waits_for_a_held_node_ahead():
    held = SchedulerView(total_gpus=80, unavailable={'n1': 8}, held={'n1': 'Kubernetes NotReady (Ready=False)'})
    decision = _gate.in_line(policy(), rollout(), held, 'n2', ['n1', 'n2'], {'n1'}, NOW, decide(scheduler=held, node='n2'))
    assert (decision.action, decision.rule) == ('admit', 'admit')


def test_window_full():
    decision = decide(roll=rollout(n1={'state': 'converging'}, n2={'state': 'validating'}))
    assert (decision.action, decision.rule) == ('wait', 'window')
    assert '2 of 2' in decision.reason


def test_window_percent_of_rollout():
    decision = decide(pol=policy(gpufleet_window='20%'), roll=rollout(n1={'state': 'rebooting'}))
    assert (decision.action, decision.rule) == ('wait', 'window')   # 20 % of 6 nodes = 1


def test_quarantined_node_does_not_hold_a_window_slot():
    decision = decide(roll=rollout(n1={'state': 'quarantined', 'finished': T - 10}, n2={'state': 'admitted'}),
                      pol=policy(gpufleet_circuit_breaker_threshold=None))
    assert decision.action == 'admit'


def test_canary_goes_alone_first():
    decision = decide(pol=policy(gpufleet_canary=1))
    assert (decision.action, decision.rule, decision.canary) == ('admit', 'canary', True)


def test_canary_in_flight_blocks_the_window():
    decision = decide(pol=policy(gpufleet_canary=1), roll=rollout(n1={'state': 'rebooting', 'canary': True}))
    assert (decision.action, decision.rule) == ('wait', 'canary')
    assert 'n1 in flight' in decision.reason


def test_each_canary_must_pass_before_the_next():
    decision = decide(pol=policy(gpufleet_canary=2), roll=rollout(n1={'state': 'done', 'canary': True, 'finished': T - 5}))
    assert (decision.action, decision.rule, decision.canary) == ('admit', 'canary', True)
    decision = decide(pol=policy(gpufleet_canary=2), roll=rollout(n1={'state': 'done', 'canary': True, 'finished': T - 5},
                                                                  n2={'state': 'validating', 'canary': True}))
    assert (decision.action, decision.rule) == ('wait', 'canary')


def test_canary_soak():
    roll = rollout(n1={'state': 'done', 'canary': True, 'finished': T - 100})
    decision = decide(pol=policy(gpufleet_canary=1, gpufleet_soak_seconds=300), roll=roll)
    assert (decision.action, decision.rule) == ('wait', 'canary')
    assert decision.until == NOW + datetime.timedelta(seconds=200)
    assert decide(pol=policy(gpufleet_canary=1, gpufleet_soak_seconds=60), roll=roll).rule == 'admit'


def test_window_opens_after_canaries_pass():
    roll = rollout(n1={'state': 'done', 'canary': True, 'finished': T - 5}, n2={'state': 'converging'})
    decision = decide(pol=policy(gpufleet_canary=1), roll=roll)
    assert (decision.action, decision.rule) == ('admit', 'admit')


def test_deferred_canary_is_not_a_pass():
    roll = rollout(n1={'state': 'deferred', 'canary': True, 'finished': T - 5})
    decision = decide(pol=policy(gpufleet_canary=1), roll=roll)
    assert (decision.action, decision.canary) == ('admit', True)


def test_failed_canary_pauses():
    roll = rollout(n1={'state': 'quarantined', 'canary': True, 'finished': T - 5, 'signature': ('reboot', 'unreachable')})
    decision = decide(pol=policy(gpufleet_canary=1), roll=roll)
    assert (decision.action, decision.rule) == ('pause', 'canary_failed')


def test_domain_limit():
    roll = rollout(n2={'state': 'drained'})   # n2 and n6 are both in domain b
    decision = decide(pol=policy(gpufleet_domain_var='rack', gpufleet_domain_max=1), roll=roll)
    assert (decision.action, decision.rule) == ('wait', 'domain')
    assert decide(pol=policy(gpufleet_domain_var='rack', gpufleet_domain_max=2), roll=roll).action == 'admit'


def test_domain_counts_nodes_down_by_others():
    scheduler = SchedulerView(total_gpus=80, unavailable={'x9': 8}, domains={'x9': 'b'})
    decision = decide(pol=policy(gpufleet_domain_var='rack', gpufleet_domain_max=1), scheduler=scheduler)
    assert (decision.action, decision.rule) == ('wait', 'domain')


def test_capacity_floor():
    # 80 GPUs, 8 in flight, 8 more would leave 64 = 80 % schedulable.
    roll = rollout(n1={'state': 'cordoned'})
    assert decide(pol=policy(gpufleet_capacity_floor=0.8), roll=roll).action == 'admit'
    decision = decide(pol=policy(gpufleet_capacity_floor='81%'), roll=roll)
    assert (decision.action, decision.rule) == ('wait', 'capacity_floor')
    assert '80% of 80 GPUs' in decision.reason


def test_capacity_floor_counts_nodes_cordoned_by_others_once():
    scheduler = SchedulerView(total_gpus=80, unavailable={'x9': 8, 'n1': 8})
    roll = rollout(n1={'state': 'cordoned'})   # our in-flight node also shows as cordoned: counted once
    assert decide(pol=policy(gpufleet_capacity_floor=0.7), roll=roll, scheduler=scheduler).action == 'admit'
    decision = decide(pol=policy(gpufleet_capacity_floor=0.75), roll=roll, scheduler=scheduler)
    assert decision.rule == 'capacity_floor'


def test_capacity_floor_counts_our_quarantined_nodes():
    roll = rollout(n1={'state': 'quarantined', 'finished': T - 10})
    decision = decide(pol=policy(gpufleet_capacity_floor=0.81, gpufleet_circuit_breaker_threshold=None), roll=roll)
    assert decision.rule == 'capacity_floor'


def test_capacity_unknown_waits():
    decision = decide(pol=policy(gpufleet_capacity_floor=0.5), scheduler=SchedulerView(total_gpus=None))
    assert (decision.action, decision.rule) == ('wait', 'capacity_unknown')


def test_outside_maintenance_window():
    pol = policy(gpufleet_maintenance_window={'days': ['tue'], 'start': '22:00', 'end': '06:00', 'timezone': 'UTC'})
    decision = decide(pol=pol)
    assert (decision.action, decision.rule) == ('wait', 'maintenance_window')
    assert decision.until == datetime.datetime(2026, 11, 24, 22, 0, tzinfo=datetime.timezone.utc)
    assert decide(pol=pol, now=NOW.replace(hour=23)).action == 'admit'


def test_budget_pauses():
    roll = rollout(n1={'state': 'rolled_back', 'finished': T - 5}, n2={'state': 'converging'})
    decision = decide(pol=policy(gpufleet_max_fail_percentage=10), roll=roll)
    assert (decision.action, decision.rule) == ('pause', 'budget')
    assert '1 of 6' in decision.reason
    # 16.7 % is not over 20: no pause, but the budget (1 of 6) is spent and n2 is in flight: only one node may fly
    assert (decide(pol=policy(gpufleet_max_fail_percentage=20), roll=roll).rule) == 'budget_window'
    assert decide(pol=policy(gpufleet_max_fail_percentage=20, gpufleet_budget_window=False), roll=roll).action == 'admit'


def test_budget_pause_lets_in_flight_nodes_finish():
    roll = rollout(n1={'state': 'rolled_back', 'finished': T - 5}, n2={'state': 'converging'})
    decision = decide(pol=policy(gpufleet_max_fail_percentage=0), roll=roll, node='n2')
    assert (decision.action, decision.rule) == ('admit', 'resume')


def test_pin_suspect_from_early_nodes():
    roll = rollout(n1={'state': 'rolled_back', 'finished': T - 50, 'signature': DCGM_FAIL},
                   n2={'state': 'rolled_back', 'finished': T - 40, 'signature': DCGM_FAIL})
    decision = decide(pol=policy(), roll=roll)
    assert (decision.action, decision.rule) == ('pause', 'pin_suspect')
    assert 'roll back the pin' in decision.reason and 'n1, n2' in decision.reason and 'dcgm_diag_r1' in decision.reason


def test_pin_suspect_needs_the_same_failure():
    other = ('validate', (('gpu_count', 'nvidia-smi lists # gpu(s), # before'),))
    roll = rollout(n1={'state': 'rolled_back', 'finished': T - 50, 'signature': DCGM_FAIL},
                   n2={'state': 'rolled_back', 'finished': T - 40, 'signature': other})
    assert decide(pol=policy(), roll=roll).action == 'admit'


def test_pin_suspect_only_among_early_nodes():
    roll = rollout(n1={'state': 'done', 'finished': T - 90}, n2={'state': 'done', 'finished': T - 80},
                   n3={'state': 'rolled_back', 'finished': T - 50, 'signature': DCGM_FAIL},
                   n4={'state': 'rolled_back', 'finished': T - 40, 'signature': DCGM_FAIL})
    assert decide(pol=policy(gpufleet_pin_fault_early_nodes=3), roll=roll).action == 'admit'
    assert decide(pol=policy(gpufleet_pin_fault_early_nodes=4), roll=roll).rule == 'pin_suspect'


def test_hardware_failures_are_not_pin_faults():
    roll = rollout(n1={'state': 'quarantined', 'finished': T - 50, 'signature': DCGM_FAIL, 'rma_suspect': True},
                   n2={'state': 'quarantined', 'finished': T - 40, 'signature': DCGM_FAIL, 'rma_suspect': True})
    assert decide(pol=policy(gpufleet_circuit_breaker_threshold=None), roll=roll).action == 'admit'


def test_canary_validation_failure_is_a_pin_suspect():
    roll = rollout(n1={'state': 'rolled_back', 'canary': True, 'finished': T - 5, 'signature': DCGM_FAIL})
    decision = decide(pol=policy(gpufleet_canary=1), roll=roll)
    assert (decision.action, decision.rule) == ('pause', 'pin_suspect')
    assert 'roll back the pin' in decision.reason


def test_circuit_breaker():
    roll = rollout(n1={'state': 'quarantined', 'finished': T - 30}, n2={'state': 'quarantined', 'finished': T - 20})
    pol = policy(gpufleet_circuit_breaker_threshold=3, gpufleet_circuit_breaker_window=600)
    assert decide(pol=pol, roll=roll).action == 'admit'
    roll = dataclasses.replace(roll, quarantines=(T - 100,))     # one more from an earlier run of this collection
    decision = decide(pol=pol, roll=roll)
    assert (decision.action, decision.rule) == ('pause', 'circuit_breaker')
    assert 'operator resets' in decision.reason


def test_circuit_breaker_window_slides():
    roll = rollout(n1={'state': 'quarantined', 'finished': T - 30}, n2={'state': 'quarantined', 'finished': T - 20})
    roll = dataclasses.replace(roll, quarantines=(T - 700,))
    pol = policy(gpufleet_circuit_breaker_threshold=3, gpufleet_circuit_breaker_window=600)
    assert decide(pol=pol, roll=roll).action == 'admit'


def test_circuit_breaker_stays_open_until_reset():
    roll = rollout(n1={'state': 'quarantined', 'finished': T - 30}, n2={'state': 'quarantined', 'finished': T - 20})
    pol = policy(gpufleet_circuit_breaker_threshold=2, gpufleet_circuit_breaker_window=600)
    assert decide(pol=pol, roll=roll).rule == 'circuit_breaker'
    assert decide(pol=pol, roll=dataclasses.replace(roll, breaker_reset=T - 10)).action == 'admit'


def test_operator_pause():
    decision = decide(roll=dataclasses.replace(rollout(), paused='bad rack'))
    assert (decision.action, decision.rule) == ('pause', 'operator')
    assert 'bad rack' in decision.reason


def test_final_node_is_skipped():
    assert decide(roll=rollout(n6={'state': 'done', 'finished': T})).action == 'skip'


def test_node_caught_mid_way_resumes_even_when_paused():
    roll = dataclasses.replace(rollout(n6={'state': 'rebooting', 'canary': True}), paused='stop')
    decision = decide(roll=roll)
    assert (decision.action, decision.rule, decision.canary) == ('admit', 'resume', True)


def test_now_must_be_aware():
    with pytest.raises(ValueError):
        decide(now=NOW.replace(tzinfo=None))


def test_unknown_node():
    with pytest.raises(KeyError):
        decide(node='nope')


# ---- failure signatures from node_upgrade_result


def result(node, gpu, uuid):
    return {'state': 'rolled_back', 'phase': 'validate', 'reason': 'dcgm_diag_r1 failed',
            'validation': [{'name': 'health', 'passed': True, 'message': ''},
                           {'name': 'dcgm_diag_r1', 'passed': False,
                            'message': 'GPU %d (%s, 0000:%02x:00.0) on %s: software: Driver/library version mismatch'
                                       % (gpu, uuid, gpu + 0x18, node)}]}


def test_same_failure_on_two_nodes_reads_the_same():
    first = failure_signature(result('gpu-a01', 3, 'GPU-1b2c3d4e-0000-1111-2222-333344445555'), 'gpu-a01')
    second = failure_signature(result('gpu-b17', 5, 'GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff'), 'gpu-b17')
    assert first == second
    assert first[0] == 'validate' and first[1][0][0] == 'dcgm_diag_r1'
    assert '<uuid>' in first[1][0][1] and '<pci>' in first[1][0][1] and '<node>' in first[1][0][1]


def test_signature_without_validation_uses_phase():
    signature = failure_signature({'state': 'quarantined', 'phase': 'converge', 'reason': 'dpkg: error processing nvidia-driver-580'})
    assert signature == ('converge', 'dpkg: error processing nvidia-driver-#')


@pytest.mark.parametrize('state', ['done', 'deferred', 'left_alone'])
def test_no_signature_without_failure(state):
    assert failure_signature({'state': state, 'phase': 'drain', 'reason': 'x'}) is None


def test_states_cover_the_ledger():
    assert set(_gate.STATES) == {'pending', 'admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating',
                                 'rolling_back', 'done', 'rolled_back', 'quarantined', 'deferred', 'left_alone'}


# ------------------------------------------------------------------------------------------------ the queue at the gate
# One rule per test: who may hold a node back (queue_candidates), whether one does (in_line), the waiting list and the
# nodes that reached the gate as the backend keeps them (waiting, arrived).

ORDER = ['n1', 'n2', 'n3', 'n4', 'n5', 'n6']
POLL = 5.0
GRACE = _gate.ARRIVAL_GRACE_POLLS * POLL + 3       # 13 s with a 5 s poll


def candidates(node='n4', waiting=('n4',), arrived=('n4',), in_flight=0, forks=10, waited=GRACE + 1):
    """queue_candidates with a late look (after the grace), workers free, only ``node`` at the gate."""
    return _gate.queue_candidates(node, ORDER, set(waiting), set(arrived), in_flight, forks, waited, POLL)


def test_queue_alone_at_the_gate_after_the_grace_nobody_holds_the_node_back():
    assert candidates() == set()


def test_queue_a_node_waiting_at_the_gate_is_a_candidate():
    assert candidates(waiting=('n4', 'n6', 'n2')) == {'n2', 'n6'}     # in_line then keeps only those ahead


def test_queue_the_node_itself_is_never_a_candidate():
    assert 'n4' not in candidates(waiting=('n4',), arrived=(), waited=0)


def test_queue_during_the_arrival_grace_nodes_ahead_that_never_arrived_are_expected():
    assert candidates(arrived=('n4', 'n2'), waited=GRACE - 1) == {'n1', 'n3'}


def test_queue_the_arrival_grace_ends():
    assert candidates(arrived=('n4',), waited=GRACE) == set()


def test_queue_no_node_is_expected_while_every_worker_is_busy():
    # 1 waiting (n4) + 3 in flight = 4 forks: host_pinned starts nobody before a worker frees.
    assert candidates(arrived=('n4',), in_flight=3, forks=4, waited=0) == set()
    assert candidates(arrived=('n4',), in_flight=2, forks=4, waited=0) == {'n1', 'n2', 'n3'}


def test_queue_at_most_forks_nodes_ahead_are_expected():
    assert candidates(node='n6', waiting=('n6',), arrived=('n6',), forks=3, waited=0) == {'n1', 'n2', 'n3'}


def test_queue_nodes_behind_are_never_expected():
    assert candidates(node='n2', waiting=('n2',), arrived=('n2',), waited=0) == {'n1'}


def test_before_lists_the_nodes_ahead_that_never_arrived():
    order = ['a', 'b', 'c', 'd', 'e']
    assert _gate.before(order, 'd', {'b'}, 5) == ['a', 'c']
    assert _gate.before(order, 'e', set(), 2) == ['a', 'b']
    assert _gate.before(order, 'a', set(), 5) == []


def in_line(node='n4', waiting=('n1',), roll=None, pol=None, decision=None):
    """in_line for ``node``'s own admission (the gate's decision unless ``decision``), ``waiting`` the candidates."""
    pol, roll = pol or policy(), roll or rollout()
    decision = decision or admit(pol, roll, SCHEDULER, node, NOW)
    return _gate.in_line(pol, roll, SCHEDULER, node, ORDER, set(waiting), NOW, decision)


def test_in_line_an_earlier_candidate_the_gate_admits_goes_first():
    decision = in_line()
    assert (decision.action, decision.rule) == ('wait', 'order')
    assert decision.reason == 'n1 is ahead of n4 in the plan and may go now'


def test_in_line_a_candidate_behind_holds_nobody_back():
    assert in_line(node='n1', waiting=('n4',)).action == 'admit'


def test_in_line_a_node_that_is_no_candidate_holds_nobody_back():
    assert in_line(waiting=()).action == 'admit'


def test_in_line_an_earlier_candidate_that_may_not_go_holds_nobody_back():
    # n5 (domain a) is in flight: n1 and n3 (domain a) wait for their domain, n4 (domain b) may overtake them.
    pol = policy(gpufleet_domain_var='rack', gpufleet_domain_max=1)
    assert in_line(waiting=('n1', 'n3'), roll=rollout(n5={'state': 'cordoned'}), pol=pol).action == 'admit'
    assert in_line(waiting=('n2',), roll=rollout(n5={'state': 'cordoned'}), pol=pol).rule == 'order'


def test_in_line_an_earlier_candidate_not_pending_holds_nobody_back():
    assert in_line(roll=rollout(n1={'state': 'drained'})).action == 'admit'
    assert in_line(roll=rollout(n1={'state': 'done', 'finished': T - 60})).action == 'admit'


@pytest.mark.parametrize('decision', [
    _gate.Decision(_gate.WAIT, 'window', 'window full'),
    _gate.Decision(_gate.PAUSE, 'operator', 'paused'),
    _gate.Decision(_gate.SKIP, 'final', 'done'),
    _gate.Decision(_gate.ADMIT, 'resume', 'caught converging'),
])
def test_in_line_only_an_admission_waits_its_turn(decision):
    assert in_line(decision=decision) is decision


def test_waiting_a_poll_registers_the_node_at_its_time():
    assert _gate.waiting({'n1': T - 1}, 'n4', True, T, _gate.waiting_ttl(POLL)) == {'n1': T - 1, 'n4': T}


def test_waiting_a_node_that_leaves_the_gate_is_removed():
    assert _gate.waiting({'n1': T - 1, 'n4': T - 1}, 'n4', False, T, _gate.waiting_ttl(POLL)) == {'n1': T - 1}


def test_waiting_a_node_silent_longer_than_the_ttl_is_forgotten():
    ttl = _gate.waiting_ttl(POLL)
    assert ttl == POLL * _gate.WAITING_POLLS + 2
    assert _gate.waiting({'n1': T - ttl, 'n2': T - ttl - 0.1}, 'n4', True, T, ttl) == {'n1': T - ttl, 'n4': T}


def test_waiting_an_entry_that_is_not_a_time_is_dropped():
    assert _gate.waiting({'n1': True, 'n2': 'soon', 'n3': None}, 'n4', False, T, 17) == {}


def test_arrived_adds_the_node_once():
    assert _gate.arrived(['n1'], 'n4') == ({'n1', 'n4'}, True)
    assert _gate.arrived(['n1', 'n4'], 'n4') == ({'n1', 'n4'}, False)
    assert _gate.arrived(None, 'n4') == ({'n4'}, True)


def test_arrived_ignores_names_that_are_not_text():
    assert _gate.arrived([3, None, 'n1'], 'n4') == ({'n1', 'n4'}, True)


# -- the failure budget while nodes are in flight (gpufleet_budget_window)

def test_the_window_never_exceeds_what_the_budget_absorbs():
    # The case: 20 % of 6 nodes (1 failure allowed), window 3: at most 2 in flight before any failure.
    pol = policy(gpufleet_window=3, gpufleet_max_fail_percentage=20)
    assert decide(pol=pol, roll=rollout(n1={'state': 'converging'})).action == 'admit'
    held = decide(pol=pol, roll=rollout(n1={'state': 'converging'}, n2={'state': 'rebooting'}))
    assert (held.action, held.rule) == ('wait', 'budget_window')
    assert 'absorb 1 more failure' in held.reason and 'at most 2 node(s) in flight' in held.reason
    # One failed: the budget absorbs none more, one node at a time.
    spent = rollout(n1={'state': 'quarantined', 'finished': T - 5}, n2={'state': 'rebooting'})
    assert decide(pol=pol, roll=spent).rule == 'budget_window'
    assert decide(pol=pol, roll=rollout(n1={'state': 'quarantined', 'finished': T - 5})).action == 'admit'
    # Off: the plain window.
    assert decide(pol=policy(gpufleet_window=3, gpufleet_max_fail_percentage=20, gpufleet_budget_window=False),
                  roll=spent).action == 'admit'
    # No budget: no cap.
    assert decide(pol=policy(gpufleet_window=3), roll=spent).action == 'admit'


def test_a_zero_budget_flies_one_node_at_a_time():
    pol = policy(gpufleet_window=4, gpufleet_max_fail_percentage=0)
    assert decide(pol=pol, roll=rollout()).action == 'admit'
    assert decide(pol=pol, roll=rollout(n1={'state': 'drained'})).rule == 'budget_window'


def test_a_paused_run_names_every_rule_that_holds():
    roll = Rollout(nodes=rollout(n1={'state': 'quarantined', 'finished': T - 5, 'canary': True},
                                 n2={'state': 'quarantined', 'finished': T - 4},
                                 n3={'state': 'quarantined', 'finished': T - 3}).nodes, paused='change freeze')
    decision = decide(pol=policy(gpufleet_max_fail_percentage=20), roll=roll)
    assert decision.action == 'pause' and decision.rule == 'operator'
    assert decision.rules == ('operator', 'circuit_breaker', 'canary_failed', 'budget')
    assert 'change freeze' in decision.reason and 'circuit breaker open' in decision.reason and 'failure budget exceeded' in decision.reason
    assert decision.to_dict()['rules'] == ['operator', 'circuit_breaker', 'canary_failed', 'budget']
    single = decide(pol=policy(gpufleet_max_fail_percentage=None, gpufleet_circuit_breaker_threshold=None),
                    roll=Rollout(nodes=rollout().nodes, paused='freeze'))
    assert single.rules == ('operator',) and single.reason == 'paused by an operator: freeze'


# -- several controllers (members of one run)

def test_a_node_in_flight_on_a_live_member_waits_and_a_dead_members_node_is_resumed():
    nodes = rollout(n6={'state': 'rebooting', 'member': 'ctl-a'}).nodes
    waiting = admit(policy(), Rollout(nodes=nodes, live=frozenset({'ctl-a', 'ctl-b'})), SCHEDULER, 'n6', NOW, member='ctl-b')
    assert (waiting.action, waiting.rule) == ('wait', 'member') and 'ctl-a' in waiting.reason
    own = admit(policy(), Rollout(nodes=nodes, live=frozenset({'ctl-a'})), SCHEDULER, 'n6', NOW, member='ctl-a')
    assert (own.action, own.rule) == ('admit', 'resume')
    dead = admit(policy(), Rollout(nodes=nodes, live=frozenset({'ctl-b'})), SCHEDULER, 'n6', NOW, member='ctl-b')
    assert (dead.action, dead.rule) == ('admit', 'resume')
    unknown = admit(policy(), Rollout(nodes=nodes), SCHEDULER, 'n6', NOW, member='ctl-b')
    assert unknown.rule == 'resume'


# ------------------------------------------------------------------------------------------------ jobs (gpufleet_job_aware)

def jobs_view(*jobs, **given):
    """A scheduler view with ``jobs`` (Job objects) placed on their nodes."""
    placed = {}
    for job in jobs:
        for name in job.nodes:
            placed.setdefault(name, []).append(job)
    values = dict(total_gpus=80, unavailable={}, jobs={name: tuple(found) for name, found in placed.items()})
    values.update(given)
    return SchedulerView(**values)


def job(job_id, *nodes, checkpoint=None):
    return Job(id=job_id, nodes=tuple(nodes), checkpoint=checkpoint)


def test_a_declared_checkpoint_ahead_holds_the_node_until_it_passes():
    ahead = jobs_view(job('41', 'n6', checkpoint=T + 1200))
    decision = decide(scheduler=ahead)
    assert (decision.action, decision.rule) == ('wait', 'checkpoint') and decision.until.timestamp() == T + 1200
    assert '41' in decision.reason
    assert decide(scheduler=jobs_view(job('41', 'n6', checkpoint=T - 1))).action == 'admit'
    assert decide(scheduler=jobs_view(job('41', 'n6', checkpoint=T + 1200), job_aware=False)).action == 'admit'


def test_a_multi_node_job_takes_its_pending_nodes_together():
    view = jobs_view(job('7', 'n6', 'n4', 'other-node'), job('8', 'n5'))
    decision = decide(pol=policy(gpufleet_window=3), scheduler=view)
    assert (decision.action, decision.group, decision.jobs) == ('admit', ('n6', 'n4'), ('7',))
    # A node of the job already done is not taken again; a node alone is admitted alone.
    decision = decide(pol=policy(gpufleet_window=3), roll=rollout(n4={'state': 'done', 'finished': T - 60}), scheduler=view)
    assert (decision.action, decision.group) == ('admit', ())
    assert decide(pol=policy(gpufleet_window=3), scheduler=view, node='n5').group == ()
    # A node of the job another actor holds is left alone, never taken with the group.
    held = dataclasses.replace(view, unavailable={'n4': 8}, held={'n4': 'Slurm DRAIN (reason: admin)'})
    assert decide(pol=policy(gpufleet_window=3), scheduler=held).group == ()
    # Off: the node goes alone.
    assert decide(pol=policy(gpufleet_window=3), scheduler=dataclasses.replace(view, job_aware=False)).group == ()


def test_a_group_waits_for_room_for_all_of_it_and_a_group_larger_than_the_window_waits_for_its_job():
    view = jobs_view(job('7', 'n6', 'n4'))
    decision = decide(pol=policy(gpufleet_window=2), roll=rollout(n1={'state': 'converging'}), scheduler=view)
    assert (decision.action, decision.rule) == ('wait', 'job_group') and 'goes together' in decision.reason
    # A node alone still fits the window.
    assert decide(pol=policy(gpufleet_window=2), roll=rollout(n1={'state': 'converging'}), scheduler=view, node='n5').action == 'admit'
    decision = decide(pol=policy(gpufleet_window=2), scheduler=jobs_view(job('9', 'n6', 'n4', 'n2')))
    assert (decision.action, decision.rule) == ('wait', 'job_group') and 'never taken in pieces' in decision.reason
    # The failure budget's window counts too: 10 % of 6 nodes absorbs no failure, one node at a time.
    decision = decide(pol=policy(gpufleet_window=3, gpufleet_max_fail_percentage=10), scheduler=view)
    assert (decision.action, decision.rule) == ('wait', 'job_group')


def test_the_floor_and_the_domain_limit_hold_for_the_whole_group():
    view = jobs_view(job('7', 'n6', 'n4'), total_gpus=48)
    # 48 GPUs, 75 % floor: one node out leaves 83 %, the group of two 66 %.
    decision = decide(pol=policy(gpufleet_window=3, gpufleet_capacity_floor='75%'), scheduler=view)
    assert (decision.action, decision.rule) == ('wait', 'capacity_floor') and 'n4' in decision.reason
    # n6 and n4 are both in domain b: a limit of 1 per domain refuses the pair.
    decision = decide(pol=policy(gpufleet_window=3, gpufleet_domain_var='rack', gpufleet_domain_max=1), scheduler=view)
    assert (decision.action, decision.rule) == ('wait', 'domain')


def test_a_group_never_goes_as_a_canary():
    decision = decide(pol=policy(gpufleet_canary=1), scheduler=jobs_view(job('7', 'n6', 'n4')))
    assert (decision.action, decision.rule) == ('wait', 'job_group') and 'after the canaries' in decision.reason
    # A node alone goes as the canary meanwhile.
    assert decide(pol=policy(gpufleet_canary=1), scheduler=jobs_view(job('7', 'n6', 'n4')), node='n5').rule == 'canary'


def test_the_queue_never_waits_for_a_node_held_by_its_checkpoint():
    view = jobs_view(job('41', 'n1', checkpoint=T + 600))
    decision = _gate.in_line(policy(), rollout(), view, 'n2', ['n1', 'n2'], {'n1'}, NOW, decide(scheduler=view, node='n2'))
    assert (decision.action, decision.rule) == ('admit', 'admit')
    # Without a checkpoint n1 would go first.
    view = jobs_view(job('41', 'n1'))
    decision = _gate.in_line(policy(), rollout(), view, 'n2', ['n1', 'n2'], {'n1'}, NOW, decide(scheduler=view, node='n2'))
    assert (decision.action, decision.rule) == ('wait', 'order')


def test_the_queue_never_waits_for_a_group_whose_other_nodes_are_not_at_the_gate():
    view = jobs_view(job('7', 'n1', 'n4'))
    pol = policy(gpufleet_window=3)
    decision = _gate.in_line(pol, rollout(), view, 'n2', ['n1', 'n2', 'n4'], {'n1'}, NOW, decide(pol=pol, scheduler=view, node='n2'))
    assert (decision.action, decision.rule) == ('admit', 'admit')
    # With n4 waiting too, n1's group would go: n2 keeps its place behind it.
    decision = _gate.in_line(pol, rollout(), view, 'n2', ['n1', 'n2', 'n4'], {'n1', 'n4'}, NOW, decide(pol=pol, scheduler=view, node='n2'))
    assert (decision.action, decision.rule) == ('wait', 'order')
