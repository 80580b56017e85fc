# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/_upgrade.py: what node_upgrade reports (its result, the batch summary)."""

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._upgrade import UpgradeInputError, phase_seconds, result, versions

OK = {'health': 'ok', 'driver_source': 'host_package', 'driver_version': '550.127.05', 'packages': {}, 'tools': {}}


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


def test_result_records_the_takeover_and_the_driver_source_after():
    uninstalled = {'argv': ['/usr/bin/nvidia-uninstall', '--silent'], 'rc': 0, 'stdout': ['done'], 'stderr': []}
    takeover = {'from': 'runfile', 'evidence': '/usr/bin/nvidia-uninstall', 'reason': 'taking the node over', 'uninstaller': uninstalled}
    built = result('done', 'uncordon', facts_after=OK, takeover=takeover)
    assert built['takeover'] == {'from': 'runfile', 'evidence': '/usr/bin/nvidia-uninstall', 'uninstaller': uninstalled}
    assert (built['driver_source'], built['driver_source_evidence']) == ('host_package', None)
    plain = result('left_alone', 'precheck')
    assert (plain['takeover'], plain['driver_source'], plain['driver_source_evidence']) == (None, None, None)


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
