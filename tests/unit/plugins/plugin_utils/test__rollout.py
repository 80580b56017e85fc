# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout gate's glue: scheduler answers (real captures), the run chosen, the order at the gate, walks, summaries."""

import dataclasses
import datetime
import json
import os

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._policy import load_policy
from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import read_fixture

NOW = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.timezone.utc)
FOUR_NODES = ('slurm', 'scontrol_show_node_slurm17.11_4nodes-gpu-m60x8-rtx2080x4-quadro_IDLE+DRAIN_irush-cs-slurm-scripts.txt')
H100_MPS = ('slurm', 'scontrol_show_node_slurm22.05.2_6xH100-PCIe-gres-mps_IDLE+DRAIN_Reason-Kill-task-failed_mseninc-blog.txt')
KUBE_NODES = ('kubernetes', 'kubectl_get_nodes_-o_json_k8s-v1.31.6+rke2r1_1xNVIDIA-A16-4Q-vGPU_gpu-operator-v24.9.2_edgexr-edge-cloud-platform.json')


# ------------------------------------------------------------------------------------------------ scheduler answers

def test_slurm_multiline_output_of_four_nodes():
    fleet = _rollout.slurm_view(read_fixture('real-outputs', *FOUR_NODES))
    assert fleet.gpus == {'cortex-01': 8, 'dumfries-002': 4, 'oxygen-04': 0, 'cricket': 1}
    assert fleet.unavailable == {'oxygen-04'}          # IDLE+DRAIN; ALLOCATED nodes are busy, not unavailable
    assert fleet.total() == 13


def test_slurm_gres_with_mps_counts_gpus_only():
    fleet = _rollout.slurm_view(read_fixture('real-outputs', *H100_MPS))
    assert fleet.gpus == {'localhost': 6} and fleet.unavailable == {'localhost'}


@pytest.mark.parametrize('name, unavailable', [
    ('show-node_idle.txt', False),
    ('show-node_mixed-drain.txt', True),
    ('show-node_down-admin.txt', True),
    ('show-node_idle-not-responding.txt', True),
    ('show-node_idle-drain-reboot-requested.txt', True),
    ('show-node_idle-rebooted.txt', False),
])
def test_slurm_one_line_output_of_the_simulated_slurm(name, unavailable):
    fleet = _rollout.slurm_view(read_fixture('slurm', name))
    (node,) = fleet.gpus
    assert fleet.gpus[node] == 8
    assert (node in fleet.unavailable) is unavailable


def test_slurm_several_one_line_records_and_the_view():
    text = read_fixture('slurm', 'show-node_idle.txt').strip() + '\n' + read_fixture('slurm', 'show-node_mixed-drain.txt').strip() + '\n'
    fleet = _rollout.slurm_view(text)
    assert len(fleet.gpus) == 2 and len(fleet.unavailable) == 1
    view = fleet.view({'gpu-01': 'r1'})
    assert view.total_gpus == 16 and sum(view.unavailable.values()) == 8


def test_slurm_nothing_listed_is_an_error():
    with pytest.raises(_rollout.RolloutError):
        _rollout.slurm_view('\n')


@pytest.mark.parametrize('gres, gpus', [
    ('gpu:8', 8), ('gpu:h100:8(S:0-1)', 8), ('gpu:a100:4,gpu:h100:4', 8), ('(null)', 0), ('', 0), ('mps:600', 0),
    ('gpu:nvidiah100pcie:6,mps:nvidiah100pcie:600', 6),
])
def test_gres_gpus(gres, gpus):
    assert _rollout.gres_gpus(gres) == gpus


def test_kubernetes_node_list():
    fleet = _rollout.kube_view(json.loads(read_fixture('real-outputs', *KUBE_NODES)))
    assert fleet.gpus == {'nori': 1} and fleet.unavailable == set()


def test_kubernetes_cordoned_or_not_ready_nodes_are_unavailable():
    document = json.loads(read_fixture('real-outputs', *KUBE_NODES))
    node = document['items'][0]
    cordoned = json.loads(json.dumps(node))
    cordoned['metadata']['name'] = 'cordoned'
    cordoned['spec']['unschedulable'] = True
    not_ready = json.loads(json.dumps(node))
    not_ready['metadata']['name'] = 'not-ready'
    for condition in not_ready['status']['conditions']:
        if condition['type'] == 'Ready':
            condition['status'] = 'False'
    fleet = _rollout.kube_view({'items': [node, cordoned, not_ready]})
    assert fleet.unavailable == {'cordoned', 'not-ready'} and fleet.total() == 3


def test_static_view_needs_every_count():
    assert _rollout.static_view({'a': 8, 'b': '4'}).total() == 12
    assert _rollout.static_view({'a': 8, 'b': None}).total() is None
    with pytest.raises(_rollout.RolloutError, match='b: gpufleet_gpus'):
        _rollout.static_view({'a': 8, 'b': 'eight'})


@pytest.mark.parametrize('text, names', [
    ('gpu-[01-03,07]', ['gpu-01', 'gpu-02', 'gpu-03', 'gpu-07']),
    ('gpu-01,login1', ['gpu-01', 'login1']),
    ('gpu-[08-10],cpu-[1-2]', ['gpu-08', 'gpu-09', 'gpu-10', 'cpu-1', 'cpu-2']),
    ('', []),
])
def test_expand_hostlist(text, names):
    assert _rollout.expand_hostlist(text) == names


def test_squeue_jobs_with_a_checkpoint_comment():
    jobs = _rollout.slurm_jobs('12|gpu-[01-02]|2026-11-24T13:00:00|gpufleet.io/checkpoint=2026-11-24T12:30:00Z\n'
                               '13|gpu-03|Unknown|\n')
    assert [job.id for job in jobs['gpu-01']] == ['12'] and jobs['gpu-02'][0].checkpoint == NOW.timestamp() + 1800
    assert jobs['gpu-03'][0].ready is None
    with pytest.raises(_rollout.RolloutError):
        _rollout.slurm_jobs('garbage\n')


# ------------------------------------------------------------------------------------------------ runs

def test_choose_run():
    assert _rollout.choose_run('r1', ['r1'], None) == ('r1', True)
    assert _rollout.choose_run('r2', ['r1'], 'r1') == ('r2', False)      # a given id is never swapped for another run
    assert _rollout.choose_run('', ['r1'], 'r1') == ('r1', True)         # the last unfinished run of this inventory
    assert _rollout.choose_run('', ['r1'], None) == (None, False)


def test_fleet_name_is_a_lock_name_per_inventory():
    first = _rollout.fleet_name('/srv/fleet/inventory.yml')
    assert first.startswith('inventory.yml-') and _ledger.FLEET.match(first)
    assert first != _rollout.fleet_name('/srv/other/inventory.yml')
    assert _ledger.FLEET.match(_rollout.fleet_name('host one, host two'))


@pytest.mark.parametrize('current, target, path', [
    ('admitted', 'done', ['cordoned', 'drained', 'converging', 'validating', 'done']),
    ('validating', 'done', ['done']),
    ('admitted', 'left_alone', ['left_alone']),
    ('converging', 'rolled_back', ['rolling_back', 'rolled_back']),
    ('done', 'done', []),
    ('done', 'quarantined', []),                       # never out of a final state
])
def test_walk_follows_legal_transitions(current, target, path):
    steps = _rollout.walk(current, target)
    assert steps == path
    state = current
    for step in steps:
        _ledger.check_transition('n', state, step)
        state = step


# ------------------------------------------------------------------------------------------------ the gate's view

def ledger_state(tmp_path, states):
    ledger = _ledger.RunLedger.create(_ledger.FileBackend(str(tmp_path)), 'r1', inventory='inv', policy={'gpufleet_window': 2},
                                      nodes={name: {'domain': None, 'gpus': 8} for name in ('n1', 'n2', 'n3', 'n4')})
    for node, path in states.items():
        for step in path:
            ledger.transition(node, step, 'test')
    return ledger.state


def test_rollout_view_takes_signatures_from_the_results(tmp_path):
    failed = ['admitted', 'cordoned', 'drained', 'converging', 'rolling_back', 'quarantined']
    state = ledger_state(tmp_path, {'n1': failed, 'n2': failed})
    result = {'state': 'quarantined', 'phase': 'rollback_validate', 'validation': [
        {'name': 'dcgm_diag_r1', 'passed': False, 'message': 'GPU 3 failed the software test on n1'}]}
    other = [{'name': 'dcgm_diag_r1', 'passed': False, 'message': 'GPU 5 failed the software test on n2'}]
    results = {'n1': result, 'n2': dict(result, validation=other)}
    view = _rollout.rollout_view(state, results)
    assert view.nodes['n1'].signature is not None
    assert view.nodes['n1'].signature == view.nodes['n2'].signature
    policy = load_policy({'gpufleet_window': 2, 'gpufleet_canary': 0, 'gpufleet_max_fail_percentage': None,
                          'gpufleet_circuit_breaker_threshold': None})
    decision = _gate.admit(policy, view, _gate.SchedulerView(), 'n3', NOW)
    assert (decision.action, decision.rule) == ('pause', 'pin_suspect') and 'roll back the pin' in decision.reason
    # Without the results the detector has nothing to compare: the rule depends on them.
    plain = _rollout.rollout_view(state, {})
    assert _gate.admit(policy, plain, _gate.SchedulerView(), 'n3', NOW).action == 'admit'


def test_rollout_view_ignores_a_result_of_another_state(tmp_path):
    state = ledger_state(tmp_path, {'n1': ['admitted', 'cordoned', 'drained', 'converging', 'rolling_back', 'rolled_back']})
    view = _rollout.rollout_view(state, {'n1': {'state': 'done'}})
    assert view.nodes['n1'].signature is None


def test_node_results_reads_files(tmp_path):
    (tmp_path / 'n1.json').write_text(json.dumps({'state': 'done'}))
    (tmp_path / 'n2.json').write_text('{torn')
    assert _rollout.node_results(str(tmp_path), ['n1', 'n2', 'n3']) == {'n1': {'state': 'done'}}
    assert _rollout.node_results('', ['n1']) == {}


# ------------------------------------------------------------------------------------------------ order at the gate

def gate_rollout(**states):
    nodes = {name: _gate.Node(domain='a' if name in ('n1', 'n3') else 'b', gpus=8) for name in ('n1', 'n2', 'n3', 'n4')}
    for name, changes in states.items():
        nodes[name] = dataclasses.replace(nodes[name], **changes)
    return _gate.Rollout(nodes=nodes)


ORDER = ['n1', 'n2', 'n3', 'n4']
WINDOW = load_policy({'gpufleet_window': 1, 'gpufleet_canary': 0, 'gpufleet_max_fail_percentage': None})


def test_an_earlier_waiting_node_goes_first():
    rollout = gate_rollout()
    assert _rollout.first_in_line(WINDOW, rollout, _gate.SchedulerView(), 'n3', ORDER, {'n1', 'n3'}, NOW) == 'n1'
    assert _rollout.first_in_line(WINDOW, rollout, _gate.SchedulerView(), 'n1', ORDER, {'n1', 'n3'}, NOW) is None


def test_a_node_not_at_the_gate_holds_nobody_back():
    rollout = gate_rollout()
    assert _rollout.first_in_line(WINDOW, rollout, _gate.SchedulerView(), 'n3', ORDER, {'n3'}, NOW) is None


def test_an_earlier_node_that_may_not_go_holds_nobody_back():
    policy = load_policy({'gpufleet_window': 2, 'gpufleet_canary': 0, 'gpufleet_max_fail_percentage': None,
                          'gpufleet_domain_var': 'rack', 'gpufleet_domain_max': 1})
    rollout = gate_rollout(n1=dict(state='cordoned'))
    # n3 (domain a, like n1 in flight) waits for its domain; n2 (domain b) may overtake it.
    assert _rollout.first_in_line(policy, rollout, _gate.SchedulerView(), 'n2', ORDER, {'n2', 'n3'}, NOW) is None
    assert _rollout.first_in_line(policy, rollout, _gate.SchedulerView(), 'n4', ORDER, {'n2', 'n4'}, NOW) == 'n2'


# ------------------------------------------------------------------------------------------------ summary, escalation

def test_summary_and_escalation(tmp_path):
    state = ledger_state(tmp_path, {'n1': ['admitted', 'cordoned', 'drained', 'converging', 'validating', 'done'], 'n2': ['admitted']})
    report = _rollout.summary(state)
    assert report['counts'] == {'done': 1, 'admitted': 1, 'pending': 2}
    assert report['left'] == ['n2', 'n3', 'n4'] and 'not finished: n2, n3, n4' in report['message']
    payload = _rollout.escalation_payload('r1', {'rule': 'budget', 'reason': 'too many'}, state)
    assert payload['rule'] == 'budget' and payload['counts']['done'] == 1 and payload['run_id'] == 'r1'


def test_plan_nodes_carry_gpus_domains_and_jobs():
    fleet = _rollout.Fleet({'n1': 8}, (), jobs={'n1': [_rollout._planner.Job(id='1')]})
    (node,) = _rollout.plan_nodes(['n1'], fleet, {'n1': 'r1'})
    assert (node.gpus, node.domain, len(node.jobs)) == (8, 'r1', 1)


# ------------------------------------------------------------------------------------------------ open_backend

def test_open_backend_file(tmp_path):
    backend = _ledger.open_backend({'backend': 'file', 'run_dir': str(tmp_path), 'run_id': 'ignored'})
    assert isinstance(backend, _ledger.FileBackend) and backend.run_dir == os.path.abspath(str(tmp_path))
    assert isinstance(_ledger.open_backend({'run_dir': str(tmp_path)}), _ledger.FileBackend)


@pytest.mark.parametrize('spec, field', [
    ({'backend': 'etcd', 'run_dir': '/x'}, 'gpufleet_ledger.backend'),
    ({'backend': 'file'}, 'gpufleet_ledger.run_dir'),
    (['file'], 'gpufleet_ledger'),
])
def test_open_backend_refuses(spec, field):
    with pytest.raises(_ledger.LedgerError, match='^' + field.replace('.', r'\.')):
        _ledger.open_backend(spec)


def test_plan_lines():
    policy = load_policy({'gpufleet_window': 2, 'gpufleet_canary': 1})
    nodes = [_rollout._planner.PlanNode(name=name, gpus=8) for name in ('n1', 'n2', 'n3')]
    plan = _rollout._planner.plan(policy, nodes, _gate.SchedulerView(total_gpus=24, unavailable={'n3': 8}), NOW)
    lines = _rollout.plan_lines(plan)
    assert lines[0].split()[:3] == ['1', 'n1', 'canary'] and 'start +0s' in lines[0]
    assert 'canary: the window opens after 1 canary node(s) pass' in lines[1]
    assert lines[2].startswith('  - n3') and 'not planned; cordoned_by_others' in lines[2]
    assert lines[-1].startswith('predicted: %ss for 2 node(s), window 2, canary 1' % plan['predicted_seconds'])


def test_scheduler_retry_doubles_the_pause_up_to_the_cap_and_gives_up_at_the_timeout():
    waited, pause, sleeps = 0.0, 1.0, []
    while True:
        retry = _rollout.scheduler_retry(waited, pause, 100, cap=30)
        if retry is None:
            break
        sleep, pause = retry
        sleeps.append(sleep)
        waited += sleep
    assert sleeps == [1, 2, 4, 8, 16, 30, 30, 9]
    assert waited == 100
    assert _rollout.scheduler_retry(5, 1, 5) is None          # timed out: no more tries
    assert _rollout.scheduler_retry(0, 0.01, 5) == (0.2, 0.02)  # never a busy loop
