# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout's decisions beside the gate's: scheduler answers (real captures), the run chosen, a resume refused, walks, summaries."""

import datetime
import json
import os

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _validate
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _phase
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _planner
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


def test_slurm_names_who_holds_each_node_and_keeps_gpufleets_own_apart():
    # gpu-01 MIXED+DRAIN with gpufleet's reason, gpu-02 DOWN by an admin, gpu-03 IDLE+NOT_RESPONDING (captures of the sim).
    text = ''.join(read_fixture('slurm', 'show-node_%s.txt' % name).strip() + '\n'
                   for name in ('mixed-drain', 'down-admin', 'idle-not-responding'))
    fleet = _rollout.slurm_view(text)
    assert fleet.unavailable == {'gpu-01', 'gpu-02', 'gpu-03'} and fleet.own == {'gpu-01'}
    held = fleet.held()
    # gpu-03 not responding counts against the floor, but nobody holds it on purpose: the procedure meets it as before.
    assert set(held) == {'gpu-02'} and fleet.holders['gpu-03'].startswith('Slurm NOT_RESPONDING')
    assert held['gpu-02'] == 'Slurm DOWN (reason: admin: PSU swap)'
    view = fleet.view()
    assert set(view.unavailable) == fleet.unavailable and view.held == held


def kube_node(name, **spec):
    """A Ready node of the real node list's shape, with ``spec`` and ``labels``/``annotations`` changed."""
    document = json.loads(read_fixture('real-outputs', *KUBE_NODES))
    node = json.loads(json.dumps(document['items'][0]))
    node['metadata']['name'] = name
    node['metadata'].setdefault('labels', {}).update(spec.pop('labels', {}))
    node['metadata'].setdefault('annotations', {}).update(spec.pop('annotations', {}))
    node['spec'].update(spec)
    return node


def test_kubernetes_every_actor_that_holds_a_node_is_counted_and_named():
    gpu = {'key': 'nvidia.com/gpu', 'value': 'present', 'effect': 'NoSchedule'}
    soft = {'key': 'gpufleet.io/pending', 'value': 'r1', 'effect': 'PreferNoSchedule'}
    ours = {'gpufleet.io/state': 'cordoned'}
    items = [
        kube_node('dedicated', taints=[gpu, soft]),
        kube_node('tainted', taints=[gpu, {'key': 'example.com/maintenance', 'effect': 'NoExecute'}]),
        kube_node('admin-cordon', unschedulable=True, taints=[{'key': 'node.kubernetes.io/unschedulable', 'effect': 'NoSchedule'}]),
        kube_node('our-cordon', unschedulable=True, labels=ours),
        kube_node('our-quarantine', unschedulable=True, labels={'gpufleet.io/state': 'quarantined'},
                  taints=[{'key': 'gpufleet.io/quarantine', 'value': 'dcgm', 'effect': 'NoSchedule'}]),
        kube_node('our-cordon-and-theirs', unschedulable=True, labels=ours, taints=[{'key': 'example.com/broken', 'effect': 'NoExecute'}]),
        kube_node('aks-pool', taints=[{'key': 'sku', 'value': 'gpu', 'effect': 'NoSchedule'}]),
        kube_node('no-new-work', taints=[{'key': 'example.com/draining-soon', 'effect': 'NoSchedule'}]),
        # NVSentinel's fault-quarantine cordons and labels (its default label prefix); its state label alone holds it too.
        kube_node('nvsentinel', unschedulable=True, labels={'k8saas.nvidia.com/cordon-by': 'NVSentinel',
                                                            'k8saas.nvidia.com/cordon-reason': 'GpuXidError'}),
        kube_node('nvsentinel-draining', labels={'dgxc.nvidia.com/nvsentinel-state': 'draining'}),
        kube_node('gpu-operator', labels={'nvidia.com/gpu-driver-upgrade-state': 'drain-required'}),
        kube_node('gpu-operator-done', labels={'nvidia.com/gpu-driver-upgrade-state': 'upgrade-done',
                                               'dgxc.nvidia.com/nvsentinel-state': 'remediation-succeeded'}),
    ]
    fleet = _rollout.kube_view({'items': items})
    assert fleet.unavailable == {name['metadata']['name'] for name in items} - {'dedicated', 'gpu-operator-done', 'aks-pool'}
    assert fleet.own == {'our-cordon', 'our-quarantine'}
    held = fleet.held()
    # A NoSchedule taint counts against the floor only (no new work, nothing evicted): the node is not held.
    assert 'no-new-work' not in held and fleet.holders['no-new-work'] == 'taint example.com/draining-soon:NoSchedule'
    assert held['tainted'] == 'taint example.com/maintenance:NoExecute'
    assert held['admin-cordon'] == 'Kubernetes cordon by someone else'
    assert 'taint example.com/broken:NoExecute' in held['our-cordon-and-theirs'] and 'cordon (gpufleet)' in held['our-cordon-and-theirs']
    assert held['nvsentinel'] == ('Kubernetes cordon by someone else; NVSentinel quarantine (label k8saas.nvidia.com/cordon-by=NVSentinel)')
    assert held['nvsentinel-draining'] == 'NVSentinel (label dgxc.nvidia.com/nvsentinel-state=draining)'
    assert held['gpu-operator'] == "the GPU Operator's driver upgrade (label nvidia.com/gpu-driver-upgrade-state=drain-required)"


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


def test_squeue_jobs_name_every_node_and_the_start_and_a_comment_may_hold_the_separator():
    jobs = _rollout.slurm_jobs('12|gpu-[01-02]|2026-11-24T13:00:00|2026-11-24T11:00:00Z|ckpt|gpufleet.io/checkpoint=2026-11-24T12:30:00Z\n')
    job = jobs['gpu-01'][0]
    assert jobs['gpu-02'][0] is job and job.nodes == ('gpu-01', 'gpu-02') and job.start == NOW.timestamp() - 3600
    assert job.checkpoint == NOW.timestamp() + 1800


def test_squeue_a_checkpoint_declared_before_a_restart_is_an_old_one():
    jobs = _rollout.slurm_jobs('12|gpu-01|Unknown|2026-11-24T12:10:00Z|gpufleet.io/checkpoint=2026-11-24T12:05:00Z\n'
                               '13+1|gpu-02|Unknown|2026-11-24T11:00:00Z|gpufleet.io/checkpoint=2026-11-24T12:05:00Z\n')
    assert jobs['gpu-01'][0].checkpoint is None and jobs['gpu-02'][0].id == '13' and jobs['gpu-02'][0].checkpoint is not None


def test_a_scheduler_answer_with_bytes_that_are_not_utf8_is_read():
    from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _run_context  # pylint: disable=import-outside-toplevel
    text = _run_context.run_command(['printf', '12|gpu-01|Unknown|Unknown|caf\\351\\n'], _run_context.command_environment({}))
    assert text == '12|gpu-01|Unknown|Unknown|caf\ufffd\n' and _rollout.slurm_jobs(text)['gpu-01'][0].id == '12'


def pod(name, node, labels=None, annotations=None, gpus=1, owner='Job', start='2026-11-24T11:00:00Z'):
    return {'metadata': {'name': name, 'namespace': 'ml', 'labels': labels or {}, 'annotations': annotations or {},
                         'ownerReferences': [{'kind': owner, 'name': 'x', 'controller': True}]},
            'spec': {'nodeName': node, 'containers': [{'name': 'c', 'resources': {'limits': {'nvidia.com/gpu': gpus}}}]},
            'status': {'phase': 'Running', 'startTime': start}}


def test_kubernetes_workloads_group_the_pods_of_one_job_across_nodes():
    jobset = {'jobset.sigs.k8s.io/jobset-name': 'llm', 'batch.kubernetes.io/job-name': 'llm-workers-0'}
    pods = {'items': [
        pod('llm-0', 'gpu-01', jobset, {'gpufleet.io/checkpoint': '2026-11-24T12:30:00Z'}),
        pod('llm-1', 'gpu-02', jobset, start='2026-11-24T10:00:00Z'),
        pod('pt-master-0', 'gpu-03', {'training.kubeflow.org/job-name': 'bert', 'training.kubeflow.org/operator-name': 'pytorchjob-controller'}),
        pod('pt-worker-0', 'gpu-04', {'training.kubeflow.org/job-name': 'bert'}),
        pod('gang-a', 'gpu-05', annotations={'pod-group-name': 'pg-7'}),
        pod('gang-b', 'gpu-06', annotations={'pod-group-name': 'pg-7'}),
        pod('single', 'gpu-07', {'job-name': 'eval'}),
        pod('dcgm-exporter', 'gpu-07', owner='DaemonSet'),
        pod('cpu-only', 'gpu-08', {'job-name': 'etl'}, gpus=0),
    ]}
    jobs = _rollout.kube_jobs(pods)
    llm = jobs['gpu-01'][0]
    assert llm.id == 'JobSet ml/llm' and llm.nodes == ('gpu-01', 'gpu-02') and jobs['gpu-02'] == [llm]
    assert llm.checkpoint == NOW.timestamp() + 1800 and llm.start == NOW.timestamp() - 7200
    assert jobs['gpu-03'][0].id == 'TrainingJob ml/bert' and jobs['gpu-03'][0].nodes == ('gpu-03', 'gpu-04')
    assert jobs['gpu-05'][0].id == 'PodGroup ml/pg-7' and jobs['gpu-05'][0].nodes == ('gpu-05', 'gpu-06')
    assert [job.id for job in jobs['gpu-07']] == ['Job ml/eval'] and 'gpu-08' not in jobs


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


def test_rollout_view_takes_signatures_from_the_final_events(tmp_path):
    """How a node failed is in its final ledger event (written by upgrade_phase): the detector reads nothing else."""
    backend = _ledger.FileBackend(str(tmp_path))
    ledger = _ledger.RunLedger.create(backend, 'r', nodes={'n1': {}, 'n2': {}, 'n3': {}})
    for node, gpu in (('n1', 3), ('n2', 5)):
        result = _upgrade_result('quarantined', 'rollback_validate', [
            {'name': 'dcgm_diag_r1', 'passed': False, 'message': 'GPU %d failed the software test on %s' % (gpu, node)}])
        for step in ['admitted', 'cordoned', 'drained', 'converging', 'rolling_back']:
            ledger.transition(node, step, 'test')
        _phase.record(ledger, node, 'quarantined', 'failed', details=_phase.final_details(result, node))
    # A fresh reader (another controller) of the same ledger, no result file anywhere.
    fresh = _ledger.RunLedger.open(_ledger.FileBackend(str(tmp_path)), 'r')
    view = _rollout.rollout_view(_ledger.node_view(fresh.state))
    assert view.nodes['n1'].signature is not None
    assert view.nodes['n1'].signature == view.nodes['n2'].signature
    policy = load_policy({'gpufleet_window': 2, 'gpufleet_canary': 0, 'gpufleet_max_fail_percentage': None,
                          'gpufleet_circuit_breaker_threshold': None})
    decision = _gate.admit(policy, view, _gate.SchedulerView(), 'n3', NOW)
    assert (decision.action, decision.rule) == ('pause', 'pin_suspect') and 'roll back the pin' in decision.reason
    # Without the signatures in the events the detector has nothing to compare: the rule depends on them.
    plain = ledger_state(tmp_path / 'plain', {'n1': ['admitted', 'quarantined'], 'n2': ['admitted', 'quarantined'], 'n3': []})
    assert _gate.admit(policy, _rollout.rollout_view(_ledger.node_view(plain)), _gate.SchedulerView(), 'n3', NOW).action == 'admit'


def _upgrade_result(state, phase, validation):
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _upgrade  # pylint: disable=import-outside-toplevel
    return _upgrade.result(state, phase, reason='failed', validation={'checks': validation}, rma=False)


def test_final_details_carry_what_the_gate_and_the_report_need():
    result = _upgrade_result('rolled_back', 'validate', [{'name': 'pin', 'passed': False, 'message': 'off the pin: driver 550 on n1'}])
    details = _phase.final_details(result, 'n1', {'gpu_count': 8}, {'gpu_count': 7})
    assert details['signature'] == ['validate', [['pin', 'off the pin: driver # on <node>']]]
    assert details['gpu_count'] == 7 and details['rma_suspect'] is False and details['phase'] == 'validate'
    assert json.loads(json.dumps(details)) == details          # JSON as it is, for the ledger
    assert _phase.final_details(_upgrade_result('done', 'uncordon', []), 'n1', {'gpu_count': 8}, None)['signature'] is None
    assert _phase.final_details(_upgrade_result('done', 'uncordon', []), 'n1', {'gpu_count': 8}, None)['gpu_count'] == 8


@pytest.mark.parametrize('state, reason, expected', [
    ('done', 'ok', ('done', 'ok')),
    ('deferred', 'drain timed out', ('deferred', 'drain timed out')),
    ('', 'boom', ('quarantined', 'the recovery failed, the node stays cordoned: boom')),
    (None, None, ('quarantined', 'no result from node_upgrade; the node may be cordoned')),
    ('validating', 'x', ('quarantined', 'no result from node_upgrade; the node may be cordoned')),
])
def test_final_state_is_decided_in_one_place(state, reason, expected):
    assert _phase.final_state(state, reason) == expected


def test_a_final_event_has_one_writer(tmp_path):
    ledger = _ledger.RunLedger.create(_ledger.FileBackend(str(tmp_path)), 'r', nodes={'n1': {}})
    for step in ['admitted', 'cordoned', 'drained', 'rebooting', 'validating']:
        ledger.transition('n1', step, 'x')
    assert _phase.record(ledger, 'n1', 'done', 'ok') == ['done']
    assert _phase.record(ledger, 'n1', 'quarantined', 'the safety net, too late') == []
    finals = [event for event in ledger.backend.read_events('r', 0)[0] if event['node'] == 'n1' and event['to'] in _gate.FINAL]
    assert len(finals) == 1


# ------------------------------------------------------------------------------------------------ summary, escalation

def test_summary_and_escalation(tmp_path):
    state = ledger_state(tmp_path, {'n1': ['admitted', 'cordoned', 'drained', 'converging', 'validating', 'done'], 'n2': ['admitted']})
    report = _rollout.summary(state)
    assert report['counts'] == {'done': 1, 'admitted': 1, 'pending': 2}
    assert report['left'] == ['n2', 'n3', 'n4'] and 'not finished: n2, n3, n4' in report['message']
    assert report['nodes']['n1'] == {'state': 'done', 'reason': 'test'} and report['nodes']['n3'] == {'state': 'pending', 'reason': ''}
    assert sorted(report['nodes']) == ['n1', 'n2', 'n3', 'n4']
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
    policy = load_policy({'gpufleet_window': 2, 'gpufleet_canary': 1, 'gpufleet_max_fail_percentage': 50})
    nodes = [_rollout._planner.PlanNode(name=name, gpus=8) for name in ('n1', 'n2', 'n3')]
    plan = _rollout._planner.plan(policy, nodes, _gate.SchedulerView(total_gpus=24, unavailable={'n3': 8}, held={'n3': 'Slurm DOWN'}), NOW)
    lines = _rollout.plan_lines(plan)
    assert lines[0].split()[:3] == ['1', 'n1', 'canary'] and 'start +0s' in lines[0]
    assert 'canary: the window opens after 1 canary node(s) pass' in lines[1]
    assert lines[2].startswith('  - n3') and 'not planned; cordoned_by_others' in lines[2]
    assert lines[-1].startswith('predicted: %ss for 2 node(s), window 2, canary 1' % plan['predicted_seconds'])


# ------------------------------------------------------------------------------------------------ circuit breaker across runs

def run_state(tmp_path, run_id, states, clock=None, reset=False):
    """A run's state through the ledger: node -> the walk to its state."""
    ledger = _ledger.RunLedger.create(_ledger.FileBackend(str(tmp_path)), run_id, inventory='inv', policy={'gpufleet_window': 1},
                                      nodes={name: {'gpus': 8} for name in states}, clock=clock or _ledger.utcnow)
    for node, path in states.items():
        for step in path:
            ledger.transition(node, step, 'test')
    if reset:
        ledger.reset_breaker('checked by alice')
    return ledger.state


QUARANTINED = ['admitted', 'cordoned', 'drained', 'rebooting', 'quarantined']


def test_breaker_history_counts_earlier_quarantines_within_the_window(tmp_path):
    earlier = run_state(tmp_path, 'earlier', {'a': QUARANTINED, 'b': ['admitted', 'cordoned', 'drained', 'rebooting', 'validating', 'done']})
    now = _ledger.epoch(earlier['nodes']['a']['finished_at']) + 60
    history = _rollout.breaker_history([earlier], now, 3600)
    assert [(item['run_id'], item['node']) for item in history['quarantines']] == [('earlier', 'a')] and history['reset'] is None
    assert _rollout.breaker_history([earlier], now + 3600, 3600)['quarantines'] == []      # slid out of the window
    json.dumps(history)                                                                     # handed to every admission as a fact


def test_breaker_history_forgets_a_released_node_and_keeps_the_last_reset(tmp_path):
    run_state(tmp_path, 'released', {'a': QUARANTINED})
    ledger = _ledger.RunLedger.open(_ledger.FileBackend(str(tmp_path)), 'released')
    ledger.transition('a', 'validating', 'release', operator=True)
    ledger.transition('a', 'done', 'released: validation passed')
    reset = run_state(tmp_path, 'reset', {'b': QUARANTINED}, reset=True)
    now = _ledger.epoch(reset['breaker_reset']) + 1
    history = _rollout.breaker_history([ledger.state, reset], now, 3600)
    assert [item['node'] for item in history['quarantines']] == ['b']
    assert history['reset'] == _ledger.epoch(reset['breaker_reset'])


def test_earlier_runs_feed_the_breaker_of_this_run(tmp_path):
    """One quarantine in an earlier run plus one in this run trip a breaker of threshold 2; without the earlier run they do not."""
    earlier = run_state(tmp_path / 'a', 'earlier', {'x': QUARANTINED})
    state = run_state(tmp_path / 'b', 'this', {'n1': QUARANTINED, 'n2': []})
    now = datetime.datetime.now(datetime.timezone.utc)
    policy = load_policy({'gpufleet_window': 1, 'gpufleet_canary': 0, 'gpufleet_max_fail_percentage': None,
                          'gpufleet_circuit_breaker_threshold': 2, 'gpufleet_pin_fault_threshold': None})
    alone = _rollout.rollout_view(_ledger.node_view(state))
    assert _gate.admit(policy, alone, _gate.SchedulerView(), 'n2', now).action == 'admit'
    history = _rollout.breaker_history([earlier], now.timestamp(), policy.circuit_breaker_window)
    fed = _rollout.rollout_view(_ledger.node_view(state), history)
    decision = _gate.admit(policy, fed, _gate.SchedulerView(), 'n2', now)
    assert (decision.action, decision.rule) == ('pause', 'circuit_breaker') and '2 node(s) quarantined' in decision.reason
    # An operator's reset in any run, after the quarantines, closes it again.
    reset = dict(history, reset=now.timestamp() - 0.001)
    assert _gate.admit(policy, _rollout.rollout_view(_ledger.node_view(state), reset), _gate.SchedulerView(), 'n2', now).action == 'admit'


# ------------------------------------------------------------------------------------------------ retries

@pytest.mark.parametrize('state, retries, allowed, expected', [
    ('deferred', 0, 1, True),
    ('deferred', 1, 2, True),
    ('deferred', 2, 2, False),          # used up: deferred stands
    ('deferred', 0, 0, False),          # gpufleet_retries 0 (the default): never
    ('rolled_back', 0, 3, False),       # a failed validation after the upgrade: rollback, not a retry
    ('quarantined', 0, 3, False),
    ('left_alone', 0, 3, False),        # someone else's node
    ('done', 0, 3, False),
])
def test_retry_decision(state, retries, allowed, expected):
    policy = load_policy({'gpufleet_retries': allowed})
    retry, reason = _rollout.retry_decision(policy, {'state': state, 'reason': 'drain: jobs still running after 300 s', 'retries': retries})
    assert retry is expected
    if expected:
        assert reason == 'retry %d of %d after deferred: drain: jobs still running after 300 s' % (retries + 1, allowed)


def test_a_retry_is_recorded_and_counted_in_the_ledger(tmp_path):
    ledger = _ledger.RunLedger.create(_ledger.FileBackend(str(tmp_path)), 'r', nodes={'n1': {'gpus': 8}})
    for step in ['admitted', 'cordoned', 'deferred']:
        ledger.transition('n1', step, 'drain timed out' if step == 'deferred' else 'x')
    with pytest.raises(_ledger.LedgerError, match='only an operator'):
        ledger.transition('n1', 'pending', 'retry')                      # not without gate=True
    retry, reason = _rollout.retry_decision(load_policy({'gpufleet_retries': 1}), ledger.state['nodes']['n1'])
    ledger.transition('n1', 'pending', reason, details={'retries': 1}, gate=True)
    record = ledger.state['nodes']['n1']
    assert retry and record['state'] == 'pending' and record['retries'] == 1 and record['finished_at'] is None
    for step in ['admitted', 'cordoned', 'deferred']:
        ledger.transition('n1', step, 'drain timed out')
    assert _rollout.retry_decision(load_policy({'gpufleet_retries': 1}), ledger.state['nodes']['n1']) == (False, '')


def test_quarantine_escalation_payload(tmp_path):
    state = ledger_state(tmp_path, {'n1': ['admitted', 'cordoned', 'drained', 'rebooting', 'quarantined']})
    payload = _rollout.quarantine_payload('r1', 'n1', state)
    assert payload['event'] == 'gpufleet.rollout.quarantined' and payload['node'] == 'n1' and payload['counts']['quarantined'] == 1


# ------------------------------------------------------------------------------------------------ resume: the quick check

def test_confirm_expectations_take_the_gpus_the_node_showed_when_it_passed(tmp_path):
    done = ['admitted', 'cordoned', 'drained', 'rebooting', 'validating', 'done']
    ledger = _ledger.RunLedger.create(_ledger.FileBackend(str(tmp_path)), 'r', nodes={'n1': {}, 'n2': {}, 'n3': {}})
    for node in ('n1', 'n2'):
        for step in done[:-1]:
            ledger.transition(node, step, 'x')
    ledger.transition('n3', 'admitted', 'x')
    _phase.record(ledger, 'n1', 'done', 'ok', details=_phase.final_details(_upgrade_result('done', 'uncordon', []), 'n1',
                                                                           {'gpu_count': 8}, {'gpu_count': 7}))
    _phase.record(ledger, 'n2', 'done', 'ok')
    # only done nodes; n2's final event says no GPU count
    assert _rollout.confirm_expectations(_ledger.RunLedger.open(ledger.backend, 'r').state) == {'n1': 7, 'n2': None}


FM_FACTS = {'health': 'ok', 'gpu_count': 8, 'nvswitch_count': 4, 'gpus': [],
            'services': {'nvidia-fabricmanager': {'active': 'active', 'sub': 'running'}, 'nvidia-persistenced': {'active': 'active'}}}


def test_confirm_decision_confirms_a_node_that_passes_the_quick_check():
    validation = _validate.evaluate(FM_FACTS, drift={'status': 'in_sync', 'checked': ['driver']}, expected_gpu_count=8)
    state, reason = _rollout.confirm_decision(validation)
    assert state == 'done' and reason.startswith('confirmed on resume') and 'fabric_manager' in reason and 'gpu_count' in reason


@pytest.mark.parametrize('facts, drift, expected, words', [
    (dict(FM_FACTS, services={'nvidia-fabricmanager': {'active': 'inactive', 'sub': 'dead'}, 'nvidia-persistenced': {'active': 'active'}}),
     None, 8, 'fabric_manager: nvidia-fabricmanager is inactive'),
    (dict(FM_FACTS, gpu_count=7), None, 8, 'gpu_count: nvidia-smi lists 7 GPU(s), 8 before'),
    (FM_FACTS, {'status': 'drifted', 'drift': {'driver': {'expected': '580.65.06', 'actual': '550.127.05'}}}, 8,
     'pin: off the pin: driver: expected 580.65.06, actual 550.127.05'),
])
def test_a_done_node_that_fails_the_quick_check_is_not_counted_done(facts, drift, expected, words):
    state, reason = _rollout.confirm_decision(_validate.evaluate(facts, drift=drift, expected_gpu_count=expected))
    assert state == 'pending' and words in reason and reason.endswith('back through the procedure')


@pytest.mark.parametrize('validation, unreachable', [({}, False), ({'passed': True}, True), (None, False), ({'passed': 'yes'}, False)])
def test_no_quick_check_result_is_never_a_confirmation(validation, unreachable):
    assert _rollout.confirm_decision(validation, unreachable)[0] == 'pending'


def test_the_gate_confirms_or_sends_back_a_done_node_only(tmp_path):
    ledger = _ledger.RunLedger.create(_ledger.FileBackend(str(tmp_path)), 'r', nodes={'n1': {'gpus': 8}, 'n2': {'gpus': 8}})
    for node in ('n1', 'n2'):
        for step in ['admitted', 'cordoned', 'drained', 'rebooting', 'validating', 'done']:
            ledger.transition(node, step, 'x')
    finished = ledger.state['nodes']['n1']['finished_at']
    ledger.transition('n1', 'done', 'confirmed on resume: ...', details={'confirmed_at': 'now'}, gate=True)
    ledger.transition('n2', 'pending', 'failed the quick check on resume: ...', gate=True)
    assert ledger.state['nodes']['n1']['finished_at'] == finished          # a confirmation is not a new finish
    assert ledger.state['nodes']['n2']['state'] == 'pending' and ledger.state['nodes']['n2']['finished_at'] is None
    with pytest.raises(_ledger.LedgerError):
        ledger.transition('n1', 'pending', 'no', gate=False)
    ledger.transition('n2', 'admitted', 'admitted')
    with pytest.raises(_ledger.LedgerError):
        ledger.transition('n2', 'pending', 'an in-flight node is never sent back', gate=True)


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


# ------------------------------------------------------------------------------------------------ inputs where they enter

@pytest.mark.parametrize('variables, start', [
    ({'gpufleet_scheduler': 'slrum'}, "gpufleet_scheduler: 'slrum' is not one of slurm, kubernetes, runai, none"),
    ({'gpufleet_scheduler': ['slurm']}, 'gpufleet_scheduler: '),
    ({'gpufleet_reboot_method': 'kexec'}, "gpufleet_reboot_method: 'kexec' is not one of os, driver_reload, bmc"),
    ({'gpufleet_reboot_method': 'none'}, "gpufleet_reboot_method: 'none' is not one of"),
    ({'gpufleet_driver_flavor': 'proprietary'}, "gpufleet_driver_flavor: 'proprietary' is not one of server, open, cuda-drivers"),
    ({'gpufleet_ledger_backend': 'etcd'}, "gpufleet_ledger_backend: 'etcd' is not a ledger backend"),
    ({'gpufleet_ledger_backend': 'kubernetes', 'gpufleet_ledger_lease_seconds': 1}, 'gpufleet_ledger_lease_seconds: must be'),
])
def test_a_bad_input_fails_naming_the_variable_first(variables, start):
    with pytest.raises(_rollout.InputError) as error:
        _rollout.check_inputs(variables)
    assert str(error.value).startswith(start) and 'nothing was touched' in str(error.value)


@pytest.mark.parametrize('variables', [{}, {'gpufleet_scheduler': 'slurm', 'gpufleet_reboot_method': 'bmc', 'gpufleet_driver_flavor': 'open'},
                                       {'gpufleet_scheduler': '', 'gpufleet_reboot_method': None, 'gpufleet_ledger_backend': 'kubernetes'}])
def test_good_inputs_pass(variables):
    _rollout.check_inputs(variables)


# ------------------------------------------------------------------------------------------------ the run's recorded pin

PIN_580 = {'driver': '580.65.06', 'fabricmanager': '580.65.06'}


def test_a_resume_keeps_the_recorded_pin():
    assert _rollout.resume_pin('r1', PIN_580, {}) == PIN_580               # no pin given: the recorded one
    assert _rollout.resume_pin('r1', PIN_580, dict(PIN_580)) == PIN_580     # the same pin
    assert _rollout.resume_pin('r1', {}, {}) == {}


def test_a_resume_with_another_pin_is_refused_naming_both():
    with pytest.raises(_rollout.InputError) as error:
        _rollout.resume_pin('r1', PIN_580, dict(PIN_580, driver='580.82.07'), 'gpufleet_pin_file')
    message = str(error.value)
    assert message.startswith('gpufleet_pin_file: pins driver 580.82.07')
    assert 'run r1 recorded driver 580.65.06' in message and 'differs in driver' in message and 'gpufleet_run_id' in message
    with pytest.raises(_rollout.InputError):
        _rollout.resume_pin('r1', {}, PIN_580)            # a restart without a pin is not resumed onto a pin


def _validation(pin=True, health=True, pin_message='every pinned component reads the pin (driver)'):
    checks = [{'name': 'health', 'passed': health, 'message': 'x'}]
    if pin is not None:
        checks.append({'name': 'pin', 'passed': pin, 'message': pin_message})
    return {'passed': all(check['passed'] for check in checks), 'checks': checks, 'message': 'failed checks'}


def test_a_release_is_done_only_on_the_runs_pin():
    assert _rollout.release_decision(PIN_580, _validation(), True)[0] == 'done'
    state, reason = _rollout.release_decision(PIN_580, _validation(pin=False, pin_message='off the pin: driver: expected 580.65.06, '
                                                                   'actual 550.127.05'), False)
    assert state == 'quarantined' and 'healthy but not on the run\'s pin' in reason and 'actual 550.127.05' in reason and 'retry' in reason
    # Validated without the pin (it passed on its health alone): refused, never done.
    state, reason = _rollout.release_decision(PIN_580, _validation(pin=None), True)
    assert state == 'quarantined' and 'did not compare the node with the run\'s pin' in reason
    assert _rollout.release_decision(PIN_580, _validation(health=False), False)[0] == 'quarantined'
    assert _rollout.release_decision(PIN_580, _validation(), False)[0] == 'quarantined'       # not back in service
    assert _rollout.release_decision({}, _validation(pin=None), True)[0] == 'done'            # a run without a pin
    assert _rollout.release_decision(PIN_580, {}, True)[0] == 'quarantined'


def test_the_quick_check_of_a_pinned_run_needs_the_pin_check():
    assert _rollout.confirm_decision(_validation(pin=None), pin=PIN_580)[0] == 'pending'
    assert _rollout.confirm_decision(_validation(), pin=PIN_580)[0] == 'done'


# ------------------------------------------------------------------------------------------------ batch mode on the same rails

def test_a_batch_over_its_failure_share_pauses_the_run_as_ansible_would_stop_it(tmp_path):
    state = ledger_state(tmp_path, {'n1': ['admitted', 'quarantined'], 'n2': ['admitted', 'cordoned', 'drained', 'rebooting', 'validating', 'done'],
                                    'n3': ['admitted', 'cordoned', 'drained', 'converging', 'rolling_back', 'rolled_back'], 'n4': []})
    decision = _rollout.batch_stop(state, ['n1', 'n2'], 0)
    assert (decision.action, decision.rule) == ('pause', 'batch_budget') and '1 of 2 node(s) of this batch failed (n1)' in decision.reason
    assert _rollout.batch_stop(state, ['n1', 'n2'], 50) is None          # 50 % may fail, 50 % did
    assert _rollout.batch_stop(state, ['n2'], 0) is None                 # this batch passed
    # Ansible counts the hosts failed in earlier batches against this batch's size.
    assert _rollout.batch_stop(state, ['n1', 'n2'], 50, failed_before=1).rule == 'batch_budget'
    # A whole batch failed stops the play whatever the percentage; a state the user does not count as failed is not one.
    assert _rollout.batch_stop(state, ['n1', 'n3'], 100).rule == 'batch_budget'
    assert _rollout.batch_stop(state, ['n1', 'n3'], None).rule == 'batch_budget'
    assert _rollout.batch_stop(state, ['n2', 'n3'], 0, fail_states=['quarantined']) is None


def test_the_previous_pin_is_that_of_the_newest_finished_run_of_the_inventory():
    states = [{'inventory': 'inv', 'status': 'finished', 'pin': {'driver': '550'}},
              {'inventory': 'inv', 'status': 'finished', 'pin': {'driver': '570'}},
              {'inventory': 'other', 'status': 'finished', 'pin': {'driver': '580'}},
              {'inventory': 'inv', 'status': 'paused', 'pin': {'driver': '575'}},
              {'inventory': 'inv', 'status': 'finished', 'pin': {}}]
    assert _rollout.previous_pin(states, 'inv') == {'driver': '570'}
    assert _rollout.previous_pin(states, 'none') == {}


def test_a_resume_by_another_playbook_or_in_another_mode_is_refused():
    state = {'kind': 'converge', 'mode': 'window'}
    assert _rollout.resume_refusal('r1', state, 'converge', 'window') is None
    assert _rollout.resume_refusal('r1', state, '', 'window') is None                   # no kind given: not checked
    assert _rollout.resume_refusal('r1', {}, 'rollback', 'batch') is None                # recorded nothing: an older run
    assert _rollout.resume_refusal('r1', state, 'rollback', 'window').startswith('run r1 is a converge run, this is rollback')
    assert 'resume it in window mode (gpufleet_window set)' in _rollout.resume_refusal('r1', state, 'converge', 'batch')


def test_a_resume_sets_the_run_running_unless_an_operator_paused_it_or_nothing_is_left():
    left = {'n1': {'state': 'done'}, 'n2': {'state': 'pending'}}
    assert _rollout.reopens({'status': 'paused', 'pause': {'by': 'gate', 'rule': 'budget'}, 'nodes': left})
    assert not _rollout.reopens({'status': 'paused', 'pause': {'by': 'operator'}, 'nodes': left})
    assert not _rollout.reopens({'status': 'running', 'nodes': left})
    assert not _rollout.reopens({'status': 'finished', 'nodes': {'n1': {'state': 'done'}}})


def test_the_finish_ends_a_run_whose_nodes_are_final_unless_a_pause_rule_holds():
    final = {'n1': {'state': 'done'}, 'n2': {'state': 'rolled_back'}}
    assert _rollout.finishes({'status': 'running', 'nodes': final}, paused=False)
    assert _rollout.finishes({'status': 'paused', 'pause': {'rule': 'batch_budget'}, 'nodes': final}, paused=False)
    assert not _rollout.finishes({'status': 'paused', 'pause': {'rule': 'operator'}, 'nodes': final}, paused=False)
    assert not _rollout.finishes({'status': 'running', 'nodes': final}, paused=True)
    assert not _rollout.finishes({'status': 'running', 'nodes': dict(final, n3={'state': 'drained'})}, paused=False)


def test_the_plan_order_puts_idle_nodes_first_longest_first():
    fleet = _rollout.Fleet({'a': 8, 'b': 8, 'c': 8}, ())
    fleet.jobs = {'a': [_planner.Job(id='1', checkpoint=None, end=None)]}
    earlier = [{'nodes': {'b': {'state': 'done', 'admitted_at': '2026-11-24T12:00:00+00:00', 'finished_at': '2026-11-24T12:01:00+00:00'},
                          'c': {'state': 'done', 'admitted_at': '2026-11-24T12:00:00+00:00', 'finished_at': '2026-11-24T12:09:00+00:00'}}}]
    order = _rollout.plan_order(['a', 'b', 'c'], {}, fleet, earlier)
    assert order == ['c', 'b', 'a']            # c took 9 min last time, b 1 min; a runs a job


def test_a_start_warns_of_the_jobs_whose_nodes_outnumber_what_may_fly():
    jobs = _rollout.slurm_jobs('7|gpu-[01-03]|Unknown|Unknown|\n8|gpu-04|Unknown|Unknown|\n9|gpu-[05-06],cpu-1|Unknown|Unknown|\n')
    nodes = {'gpu-01', 'gpu-02', 'gpu-03', 'gpu-04', 'gpu-05', 'gpu-06'}
    lines = _rollout.group_warnings(jobs, nodes, 1)
    assert len(lines) == 2 and lines[0].startswith('job 7 runs on 3 node(s) of the rollout (gpu-01, gpu-02, gpu-03)')
    assert lines[1].startswith('job 9 runs on 2 node(s)')
    assert _rollout.group_warnings(jobs, nodes, 3) == [] and len(_rollout.group_warnings(jobs, nodes, 1, shown=1)) == 2
