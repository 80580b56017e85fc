# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/_upgrade.py: the decisions of node_upgrade."""

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._upgrade import (
    UpgradeInputError, drain_state, phase_seconds, precheck, reboot_method, rescue_plan, result, versions)

OK = {'health': 'ok', 'driver_source': 'host_package', 'driver_version': '550.127.05', 'packages': {}, 'tools': {}}
BROKEN = dict(OK, health='broken', health_reason='gpu_lost', health_message='Unable to determine the device handle for GPU0000:18:00.0: Unknown Error')
OLD = {'driver': '550.127.05'}
NEW = {'driver': '580.65.06'}


def test_precheck_proceeds_on_a_healthy_node():
    assert precheck(OK) == {'action': 'proceed', 'reason': ''}


@pytest.mark.parametrize('choice, action', [('quarantine', 'quarantine'), ('skip', 'left_alone'), ('upgrade', 'proceed')])
def test_a_broken_node_is_never_silently_upgraded(choice, action):
    decided = precheck(BROKEN, on_broken=choice)
    assert decided['action'] == action
    if action != 'proceed':
        assert decided['reason'] == 'broken before the upgrade (gpu_lost): Unable to determine the device handle for GPU0000:18:00.0: Unknown Error'


@pytest.mark.parametrize('caught', ['converging', 'rebooting', 'validating', 'rolling_back'])
def test_a_node_this_procedure_left_broken_goes_on_after_a_crash(caught):
    decided = precheck(BROKEN, resumed_from=caught)
    assert decided['action'] == 'proceed' and decided['reason'].startswith('caught %s by a crash, gpu_lost' % caught), decided


@pytest.mark.parametrize('caught', ['', 'admitted', 'cordoned', 'drained'])
def test_a_node_broken_before_this_procedure_changed_it_is_still_quarantined(caught):
    # Caught before the converge: nothing was changed yet, so broken is how the node came.
    assert precheck(BROKEN, resumed_from=caught)['action'] == 'quarantine'


def test_gpu_operator_driver_and_skip_are_left_alone():
    assert precheck(dict(OK, driver_source='container'))['action'] == 'left_alone'
    assert precheck(OK, skip=True)['action'] == 'left_alone'
    with pytest.raises(UpgradeInputError, match='node_upgrade_on_broken'):
        precheck(OK, on_broken='ignore')


@pytest.mark.parametrize('outcome, state', [('done', 'proceed'), ('none', 'proceed'), ('left_alone', 'left_alone'),
                                            ('skipped', 'left_alone'), ('deferred', 'deferred')])
def test_drain_state(outcome, state):
    assert drain_state({'outcome': outcome}) == state


def test_driver_reload_falls_back_when_the_kernel_changes():
    assert reboot_method('driver_reload', kernel_pending=True)['method'] == 'os'
    assert reboot_method('driver_reload')['method'] == 'driver_reload'
    assert reboot_method('bmc')['method'] == 'bmc'


def test_rescue_unreachable_is_quarantined():
    assert rescue_plan('reboot', unreachable=True, pin_before=OLD, pin_after=NEW, previous_pin=OLD, target_pin=NEW)['action'] == 'quarantine'


@pytest.mark.parametrize('phase', ['precheck', 'drain'])
def test_rescue_before_any_change_restores(phase):
    assert rescue_plan(phase)['action'] == 'restore'


@pytest.mark.parametrize('caught', ['converging', 'rebooting', 'validating', 'rolling_back'])
def test_rescue_after_a_crash_rolls_back_what_the_run_recorded_before_it(caught):
    # The killed controller had converged the node to NEW (recorded, previous OLD); the procedure started again on NEW.
    plan = rescue_plan('validate', pin_before=NEW, pin_after=NEW, previous_pin=OLD, target_pin=NEW, validation_failed=True, resumed_from=caught)
    assert plan == {'action': 'rollback', 'reason': '', 'rollback_pin': OLD}


def test_rescue_without_a_crash_does_not_roll_back_a_node_that_was_already_on_the_pin():
    plan = rescue_plan('validate', pin_before=NEW, pin_after=NEW, previous_pin=OLD, target_pin=NEW, validation_failed=True)
    assert plan['action'] == 'quarantine' and 'already on the pin' in plan['reason'], plan
    plan = rescue_plan('validate', pin_before=NEW, pin_after=NEW, previous_pin=OLD, target_pin=NEW, validation_failed=True, resumed_from='cordoned')
    assert plan['action'] == 'quarantine', plan


def test_rescue_rolls_back_what_this_run_recorded():
    plan = rescue_plan('validate', pin_before=OLD, pin_after=NEW, previous_pin=OLD, target_pin=NEW, validation_failed=True)
    assert plan == {'action': 'rollback', 'reason': '', 'rollback_pin': OLD}
    # First use of gpufleet on the node: no pin.json before, gpu_stack recorded the installed versions as previous.
    assert rescue_plan('converge', pin_before=None, pin_after=NEW, previous_pin=OLD, target_pin=NEW)['rollback_pin'] == OLD


def test_rescue_never_rolls_back_to_a_stale_previous_pin():
    # The node was already on the pin: pin.previous.json is from an older run, not this one.
    plan = rescue_plan('validate', pin_before=NEW, pin_after=NEW, previous_pin=OLD, target_pin=NEW, validation_failed=True)
    assert plan['action'] == 'quarantine' and 'already on the pin' in plan['reason']


def test_rescue_revalidates_a_converge_that_changed_nothing():
    assert rescue_plan('converge', pin_before=OLD, pin_after=OLD, previous_pin=None, target_pin=NEW)['action'] == 'revalidate'


def test_rescue_reboot_only_run_quarantines():
    plan = rescue_plan('validate', pin_before=OLD, pin_after=OLD, previous_pin=None, target_pin=None, validation_failed=True)
    assert plan['action'] == 'quarantine' and 'no pin in this run' in plan['reason']


def test_phase_seconds_add_up_and_end_at_the_end():
    marks = [['precheck', 10], ['drain', 12], ['converge', 15], ['drain', 40]]
    assert phase_seconds(marks, 41) == {'precheck': 2.0, 'drain': 4.0, 'converge': 25.0}


def test_versions_and_result():
    facts = dict(OK, cuda_driver_version='12.4', packages={'nvidia-fabricmanager-550': '550.127.05-1'}, nvswitch_count=4)
    assert versions(facts)['driver'] == '550.127.05' and versions(facts)['fabric_manager'] == '550.127.05-1'
    built = result('done', 'uncordon', marks=[['precheck', 0]], end=3, facts_before=facts, facts_after=facts,
                   validation={'passed': True, 'checks': [{'name': 'health', 'passed': True, 'message': 'ok', 'extra': 1}]})
    assert built['state'] == 'done' and built['passed'] and built['total_seconds'] == 3.0
    assert built['validation'] == [{'name': 'health', 'passed': True, 'message': 'ok'}]
    assert result('quarantined', 'quarantine', facts_before=facts)['versions_after'] is None
    with pytest.raises(UpgradeInputError, match='state'):
        result('failed', 'validate')


def test_summary_lists_every_node_and_says_why_the_rollout_stops():
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils._upgrade import summary
    canary = {'state': 'quarantined', 'phase': 'quarantine', 'reason': 'validate: dcgm_diag_r1 failed',
              'versions_before': {'driver': '550.127.05'}, 'versions_after': {'driver': '550.127.05'}}
    lines = summary([{'node': 'gpu-01', 'result': canary}, {'node': 'gpu-02', 'result': None}], batch=['gpu-01'], results_dir='/r')
    assert lines[0].split()[:3] == ['gpu-01', 'quarantined', 'quarantine'] and lines[0].endswith(': validate: dcgm_diag_r1 failed')
    assert lines[1].split() == ['gpu-02', 'pending', '-', '-', '->', '-']
    assert lines[2] == 'rollout stops: 1 of 1 node(s) of this batch failed (max_fail_percentage 0); results in /r'
    assert len(summary([{'node': 'gpu-01', 'result': canary}], batch=['gpu-01', 'gpu-02', 'gpu-03'], max_fail_percentage=50)) == 1


def test_summary_stats_for_awx_counts_states_and_says_whether_the_rollout_stopped():
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils._upgrade import summary_stats
    canary = {'state': 'quarantined', 'phase': 'quarantine', 'reason': 'validate: dcgm_diag_r1 failed'}
    rows = [{'node': 'gpu-01', 'result': canary}, {'node': 'gpu-02', 'result': None}]
    stats = summary_stats(rows, batch=['gpu-01'], results_dir='/r', run_id='r1')
    assert stats == {'run_id': 'r1', 'status': 'stopped', 'counts': {'quarantined': 1, 'pending': 1}, 'results_dir': '/r',
                     'nodes': {'gpu-01': {'state': 'quarantined', 'reason': 'validate: dcgm_diag_r1 failed'},
                               'gpu-02': {'state': 'pending', 'reason': ''}},
                     'message': 'rollout stops: 1 of 1 node(s) of this batch failed (max_fail_percentage 0); results in /r'}
    # Within the budget: running while a node is pending, finished when none is.
    assert summary_stats(rows, batch=['gpu-01'], max_fail_percentage=100)['status'] == 'running'
    done = {'state': 'done', 'phase': 'uncordon', 'reason': ''}
    finished = summary_stats([{'node': 'gpu-01', 'result': canary}, {'node': 'gpu-02', 'result': done}], batch=['gpu-02'], run_id='r1')
    assert (finished['status'], finished['counts'], finished['message']) == ('finished', {'quarantined': 1, 'done': 1},
                                                                             'run r1 finished: 1 done, 1 quarantined')
