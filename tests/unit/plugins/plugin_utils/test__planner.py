# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan: order (idle first, domains interleaved, checkpoint-aware), blockers now, predicted durations."""

import datetime

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._gate import SchedulerView
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._planner import (
    DEFAULT_PHASE_SECONDS, Job, PlanNode, node_seconds, order, phase_estimates, plan)
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._policy import load_policy

NOW = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.timezone.utc)
T = NOW.timestamp()
SCHEDULER = SchedulerView(total_gpus=64)


def policy(**overrides):
    values = {'gpufleet_window': 2, 'gpufleet_canary': 0, 'gpufleet_max_fail_percentage': None}
    values.update(overrides)
    return load_policy(values)


def names(items):
    return [item[0].name for item in items]


def test_idle_nodes_first_domains_interleaved():
    nodes = [PlanNode('a1', domain='a'), PlanNode('a2', domain='a'), PlanNode('a3', domain='a'),
             PlanNode('b1', domain='b'), PlanNode('b2', domain='b'), PlanNode('c1', domain='c'),
             PlanNode('busy', domain='a', jobs=(Job('7', end=T + 60),))]
    assert names(order(nodes)) == ['a1', 'b1', 'c1', 'a2', 'b2', 'a3', 'busy']


def test_checkpointed_nodes_by_checkpoint_then_undeclared_work_then_left_alone():
    nodes = [PlanNode('late', jobs=(Job('1', checkpoint=T + 900),)),
             PlanNode('early', jobs=(Job('2', checkpoint=T + 100),)),
             PlanNode('ends', jobs=(Job('3', end=T + 500),)),
             PlanNode('unknown', jobs=(Job('4'),)),
             PlanNode('idle'),
             PlanNode('cordoned')]
    assert names(order(nodes, unavailable={'cordoned': 8})) == ['idle', 'early', 'ends', 'late', 'unknown', 'cordoned']


def test_node_with_two_jobs_waits_for_the_later_checkpoint():
    nodes = [PlanNode('two', jobs=(Job('1', checkpoint=T + 100), Job('2', checkpoint=T + 800))),
             PlanNode('one', jobs=(Job('3', checkpoint=T + 500),))]
    assert names(order(nodes)) == ['one', 'two']


def test_checkpointed_node_drained_right_after_its_checkpoint():
    # window 1: idle nodes run back to back, but the checkpointed node takes the first slot after its checkpoint.
    seconds = node_seconds(DEFAULT_PHASE_SECONDS)
    nodes = [PlanNode('i%d' % index) for index in range(4)] + [PlanNode('ck', jobs=(Job('9', checkpoint=T + seconds + 1),))]
    result = plan(policy(gpufleet_window=1), nodes, SCHEDULER, NOW)
    by_name = {entry['node']: entry for entry in result['order']}
    assert by_name['ck']['start_in'] == 2 * seconds           # the first slot free after the checkpoint
    assert by_name['i2']['start_in'] == 3 * seconds            # an idle node waits one turn for it
    assert by_name['ck']['blocked_by'][0]['rule'] == 'running_job' and 'checkpoint at' in by_name['ck']['blocked_by'][0]['reason']


def test_sliding_window_prediction_and_canary():
    seconds = node_seconds(DEFAULT_PHASE_SECONDS)
    nodes = [PlanNode('n%d' % index) for index in range(5)]
    result = plan(policy(gpufleet_window=2, gpufleet_canary=1, gpufleet_soak_seconds=60), nodes, SCHEDULER, NOW)
    starts = [entry['start_in'] for entry in result['order']]
    assert starts == [0, seconds + 60, seconds + 60, 2 * seconds + 60, 2 * seconds + 60]
    assert result['predicted_seconds'] == 3 * seconds + 60
    assert [entry['canary'] for entry in result['order']] == [True, False, False, False, False]
    assert result['order'][1]['blocked_by'] == [{'rule': 'canary', 'reason': 'the window opens after 1 canary node(s) pass'}]


def test_window_blocker_beyond_the_window():
    result = plan(policy(gpufleet_window=2), [PlanNode('n%d' % index) for index in range(3)], SCHEDULER, NOW)
    assert [entry['blocked_by'] for entry in result['order']][:2] == [[], []]
    assert result['order'][2]['blocked_by'][0]['rule'] == 'window'


def test_blockers_now():
    scheduler = SchedulerView(total_gpus=32, unavailable={'down': 8}, domains={'down': 'r1'})
    nodes = [PlanNode('pdb', gpus=8, domain='r2', pdb_blocked='training/pdb-1'),
             PlanNode('same-rack', gpus=8, domain='r1'),
             PlanNode('floor', gpus=16, domain='r3')]
    result = plan(policy(gpufleet_domain_var='rack', gpufleet_capacity_floor=0.5, gpufleet_window=3), nodes, scheduler, NOW)
    rules = {entry['node']: [blocker['rule'] for blocker in entry['blocked_by']] for entry in result['order']}
    assert rules['pdb'] == ['pdb']
    assert rules['same-rack'] == ['domain']
    assert rules['floor'] == ['capacity_floor']     # 32 - 8 down - 16 = 8 of 32 < 50 %


def test_nodes_cordoned_by_others_listed_never_planned():
    held = {'b': 'Slurm DRAIN (reason: bad fan)'}
    result = plan(policy(), [PlanNode('a'), PlanNode('b')], SchedulerView(total_gpus=16, unavailable={'b': 8}, held=held), NOW)
    entry = result['order'][-1]
    assert entry['node'] == 'b' and entry['position'] is None and entry['blocked_by'][0]['rule'] == 'cordoned_by_others'
    assert entry['held_by'] == 'Slurm DRAIN (reason: bad fan)' and 'bad fan' in entry['blocked_by'][0]['reason']
    assert result['nodes_planned'] == 1


def test_a_node_only_gpufleet_holds_is_planned_and_counted_out():
    # b is out (an earlier run's quarantine, gpufleet's own): planned like the others, its GPUs count against the floor.
    pol = policy(gpufleet_capacity_floor='50%')
    view = SchedulerView(total_gpus=24, unavailable={'b': 8}, held={})
    result = plan(pol, [PlanNode('a', gpus=8), PlanNode('b', gpus=8), PlanNode('c', gpus=8)], view, NOW)
    entries = {entry['node']: entry for entry in result['order']}
    assert result['nodes_planned'] == 3 and entries['b']['position'] is not None and 'held_by' not in entries['b']
    # 24 - 8 out - 8 = 8 of 24 < 50 %: the floor blocks every node now.
    assert all('capacity_floor' in [blocker['rule'] for blocker in entry['blocked_by']] for entry in entries.values())


def test_maintenance_window_delays_and_blocks():
    pol = policy(gpufleet_maintenance_window={'start': '22:00', 'end': '02:00', 'timezone': 'UTC'})
    result = plan(pol, [PlanNode('a')], SCHEDULER, NOW)
    assert result['order'][0]['start_in'] == 10 * 3600
    assert result['order'][0]['blocked_by'] == [{'rule': 'maintenance_window', 'reason': 'outside the maintenance window now'}]


def test_phase_estimates_from_earlier_ledgers():
    estimates, samples = phase_estimates([{'rebooting': [100.0, 140.0]}, {'rebooting': [120.0], 'converging': [50.0]}])
    assert estimates['rebooting'] == 120.0 and estimates['converging'] == 50.0
    assert estimates['validating'] == DEFAULT_PHASE_SECONDS['validating'] and samples == 3
    assert phase_estimates([]) == (DEFAULT_PHASE_SECONDS, 0)


def test_reboot_only_rollout_skips_converge_time():
    assert node_seconds(DEFAULT_PHASE_SECONDS, converge=False) == node_seconds(DEFAULT_PHASE_SECONDS) - DEFAULT_PHASE_SECONDS['converging']


def test_ten_thousand_nodes_plan():
    nodes = [PlanNode('n%05d' % index, gpus=8, domain='r%d' % (index % 50)) for index in range(10000)]
    result = plan(policy(gpufleet_window='10%'), nodes, SchedulerView(total_gpus=80000), NOW)
    assert result['nodes_planned'] == 10000 and result['window'] == 1000
    assert len({entry['node'] for entry in result['order']}) == 10000
    assert [entry['domain'] for entry in result['order'][:3]] == ['r0', 'r1', 'r10']


def test_node_durations_from_earlier_runs_latest_wins_and_untimed_are_skipped():
    from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _planner
    older = {'nodes': {'n1': {'state': 'done', 'admitted_at': '2026-01-01T00:00:00+00:00', 'finished_at': '2026-01-01T00:01:00+00:00'},
                       'n2': {'state': 'left_alone', 'admitted_at': '2026-01-01T00:00:00+00:00', 'finished_at': '2026-01-01T00:00:01+00:00'}}}
    newer = {'nodes': {'n1': {'state': 'rolled_back', 'admitted_at': '2026-01-02T00:00:00+00:00', 'finished_at': '2026-01-02T00:00:30+00:00'},
                       'n3': {'state': 'converging', 'admitted_at': '2026-01-02T00:00:00+00:00', 'finished_at': None}}}
    assert _planner.node_durations([older, newer]) == {'n1': 30.0}


def test_idle_nodes_go_longest_first_when_timed_so_the_window_does_not_end_on_a_slow_tail():
    from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _planner
    nodes = [_planner.PlanNode(name=name, gpus=8, domain=None, jobs=()) for name in ('n1', 'n2', 'n3', 'n4')]
    assert [item[0].name for item in _planner.order(nodes)] == ['n1', 'n2', 'n3', 'n4']
    ordered = _planner.order(nodes, durations={'n2': 10.0, 'n4': 50.0, 'n1': 20.0})
    # Timed longest first, then the untimed by name.
    assert [item[0].name for item in ordered] == ['n4', 'n1', 'n2', 'n3']


def test_the_plan_shrinks_the_window_to_what_the_failure_budget_absorbs():
    nodes = [PlanNode('n%d' % index, gpus=8) for index in range(10)]
    capped = plan(policy(gpufleet_window=5, gpufleet_max_fail_percentage=20), nodes, SchedulerView(total_gpus=80), NOW)
    assert capped['window'] == 3        # 20 % of 10 nodes: 2 failures absorbed, a third shows the budget is spent
    assert plan(policy(gpufleet_window=5, gpufleet_max_fail_percentage=0), nodes, SchedulerView(total_gpus=80), NOW)['window'] == 1
    off = plan(policy(gpufleet_window=5, gpufleet_max_fail_percentage=0, gpufleet_budget_window=False), nodes, SchedulerView(total_gpus=80), NOW)
    assert off['window'] == 5


def test_the_plan_predicts_each_jobs_interruptions_with_and_without_the_job_rules():
    # Job 7 runs on a and b (no checkpoint, started an hour ago); job 8 on c declares its checkpoint in 10 minutes.
    seven = Job('7', nodes=('a', 'b'), start=NOW.timestamp() - 3600)
    eight = Job('8', nodes=('c',), checkpoint=NOW.timestamp() + 600)
    nodes = [PlanNode('a', gpus=8, jobs=(seven,)), PlanNode('b', gpus=8, jobs=(seven,)), PlanNode('c', gpus=8, jobs=(eight,)),
             PlanNode('d', gpus=8)]
    aware = plan(policy(gpufleet_window=1), nodes, SchedulerView(total_gpus=32, unavailable={}), NOW)
    jobs = {job['job']: job for job in aware['jobs']}
    assert jobs['7']['interruptions'] == 1 and jobs['8'] == dict(jobs['8'], interruptions=1, gpu_hours_lost=0.0)
    unaware = plan(policy(gpufleet_window=1, gpufleet_job_aware=False), nodes, SchedulerView(total_gpus=32, unavailable={}), NOW)
    jobs = {job['job']: job for job in unaware['jobs']}
    # One node at a time: a and b drain at different times, job 7 is interrupted twice, each losing the work since it started.
    assert jobs['7']['interruptions'] == 2 and jobs['7']['gpu_hours_lost'] > 2 * 16 * 1.0
    assert unaware['interruptions'] == 3 and aware['interruptions'] == 2 and unaware['job_aware'] is False
    # A job that ends before its node's turn is never interrupted.
    short = Job('9', nodes=('d',), end=NOW.timestamp() - 1)
    assert plan(policy(), [PlanNode('d', gpus=8, jobs=(short,))], SchedulerView(total_gpus=8, unavailable={}), NOW)['jobs'] == []


def test_the_nodes_of_one_multi_node_job_are_next_to_each_other_in_the_order():
    big = Job('7', nodes=('a', 'd'))
    nodes = [PlanNode('a', jobs=(big,)), PlanNode('b', jobs=(Job('8', nodes=('b',)),)), PlanNode('c', jobs=(Job('9', nodes=('c',)),)),
             PlanNode('d', jobs=(big,))]
    names = [node.name for node, _kind, _ready in order(nodes)]
    assert abs(names.index('a') - names.index('d')) == 1, names
