# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""node_drain's Kubernetes decisions on real node and pod documents (tests/unit/fixtures/real-outputs/kubernetes).

The samples are never edited: where a case needs a node or pod in another state (cordoned, marked by gpufleet,
owned by a DaemonSet), the test derives it from a deep copy of a real document and says what it changed.
"""

import copy
import json
import os

import pytest
import yaml

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _kube
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._kube import KubeError, node_plan, pod_plan

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'real-outputs', 'kubernetes')
NODES = 'kubectl_get_nodes_-o_json_k8s-v1.31.6+rke2r1_1xNVIDIA-A16-4Q-vGPU_gpu-operator-v24.9.2_edgexr-edge-cloud-platform.json'
NGINX = 'kubectl_get_pod_-o_json_unmanaged-nginx_minikube_kubectl-neat.json'
RESERVATION = 'kubectl_get_pod_-o_yaml_runai-2.17-reservation-pod_unmanaged_nvidia.com-gpu-1_fake-gpu-operator.yaml'
FRACTION = 'kubectl_get_pod_-o_yaml_runai-2.17-fractional-pod_RunaiJob_gpu-fraction-0.5_fake-gpu-operator.yaml'
VALIDATOR = 'pod-manifest_gpu-operator-plugin-workload-validation_initContainer-gpu.yaml'
NODE = 'nori'
RUNAI = {'key': 'runai', 'value': 'drain', 'effect': 'NoExecute'}


def load(name):
    path = os.path.join(FIXTURES, name)
    assert os.path.exists(path + '.source.txt'), 'every sample has its provenance sidecar'
    with open(path, encoding='utf-8') as handle:
        return json.load(handle) if name.endswith('.json') else yaml.safe_load(handle)


def nodes(change=None):
    """The real `kubectl get nodes -o json` List; ``change(node)`` edits a copy of its one Node."""
    document = copy.deepcopy(load(NODES))
    if change:
        change(document['items'][0])
    return document


def cordoned_by_someone(node):
    node['spec']['unschedulable'] = True


def held_by_gpufleet(state='drained', original='false', taints=None, run_id='run-1', unschedulable=True):
    def change(node):
        node['spec']['unschedulable'] = unschedulable
        node['metadata']['labels']['gpufleet.io/state'] = state
        node['metadata']['annotations'].update({'gpufleet.io/original-unschedulable': original, 'gpufleet.io/run-id': run_id,
                                                'gpufleet.io/reason': 'driver upgrade', 'gpufleet.io/added-taints': json.dumps(taints or [])})
    return change


def validator_pod():
    """The nvidia-device-plugin-validator pod as the GPU Operator creates it (cmd/nvidia-validator runWorkload, see the sidecar)."""
    pod = copy.deepcopy(load(VALIDATOR))
    pod['metadata'].update({'name': 'nvidia-device-plugin-validator-x7k2p', 'namespace': 'gpu-operator',
                            'ownerReferences': [{'apiVersion': 'nvidia.com/v1', 'kind': 'ClusterPolicy', 'name': 'cluster-policy',
                                                 'uid': '8d8a1c3e-0000-4000-8000-000000000001', 'controller': True, 'blockOwnerDeletion': True}]})
    pod['spec']['nodeName'] = NODE
    pod['spec']['initContainers'][0]['resources'] = {'limits': {'nvidia.com/gpu': '1'}, 'requests': {'nvidia.com/gpu': '1'}}
    return pod


def owned_by_daemonset(pod):
    pod = copy.deepcopy(pod)
    pod['metadata']['ownerReferences'] = [{'apiVersion': 'apps/v1', 'kind': 'DaemonSet', 'name': 'nvidia-dcgm-exporter', 'controller': True}]
    return pod


# ------------------------------------------------------------------ reading the node

def test_real_gpu_node_status():
    status = node_plan(nodes(), NODE)['status']
    assert status['node'] == 'nori' and status['uid'] == load(NODES)['items'][0]['metadata']['uid']
    assert status['unschedulable'] is False and status['taints'] == [] and status['state'] == ''
    assert status['ours'] is False and status['cordoned_by_others'] is False and status['skip'] is False
    assert status['labels']['nvidia.com/gpu.product'] == 'NVIDIA-A16-4Q'
    # Only gpufleet's own annotations are reported: the node's RKE2, flannel and GPU Operator annotations are not.
    assert 'nvidia.com/gpu-driver-upgrade-enabled' in load(NODES)['items'][0]['metadata']['annotations']
    assert status['annotations'] == {}
    assert status['original_unschedulable'] == '' and status['added_taints'] == []


def test_every_form_of_the_document_gives_the_same_status():
    listing = load(NODES)
    one = listing['items'][0]
    expected = node_plan(listing, NODE)['status']
    assert node_plan(one, NODE)['status'] == expected
    assert node_plan([one], NODE)['status'] == expected
    assert node_plan({'changed': False, 'api_found': True, 'resources': [one]}, NODE)['status'] == expected


def test_a_node_kubernetes_does_not_know_is_an_error_naming_it():
    with pytest.raises(KubeError, match='Kubernetes has no node named gpu-99'):
        node_plan(nodes(), 'gpu-99', action='drain')
    with pytest.raises(KubeError, match='no node named nori'):
        node_plan({'changed': False, 'resources': []}, NODE)


def test_unreadable_gpufleet_annotation_names_node_and_annotation():
    def broken(node):
        held_by_gpufleet()(node)
        node['metadata']['annotations']['gpufleet.io/added-taints'] = '[{"key": "runai"'
    with pytest.raises(KubeError, match='node nori: annotation gpufleet.io/added-taints is not JSON'):
        node_plan(nodes(broken), NODE)

    def not_taints(node):
        held_by_gpufleet()(node)
        node['metadata']['annotations']['gpufleet.io/added-taints'] = '[{"key": "runai", "effect": "Sometimes"}]'
    with pytest.raises(KubeError, match='not a list of taints'):
        node_plan(nodes(not_taints), NODE)


def test_someone_elses_annotations_are_not_read_when_gpufleet_does_not_hold_the_node():
    def stale(node):
        node['metadata']['labels']['gpufleet.io/state'] = 'done'  # left behind by an uncordon
        node['metadata']['annotations']['gpufleet.io/added-taints'] = 'not json'
    status = node_plan(nodes(stale), NODE)['status']
    assert status['ours'] is False and status['added_taints'] == [] and status['state'] == 'done'


@pytest.mark.parametrize('action, arguments', [('sideways', {}), ('drain', {'scheduler': 'slurm'})])
def test_unknown_action_or_scheduler_is_refused(action, arguments):
    with pytest.raises(KubeError, match='node nori: node_drain_'):
        node_plan(nodes(), NODE, action=action, **arguments)


# ------------------------------------------------------------------ what to do

def test_status_reports_and_changes_nothing():
    plan = node_plan(nodes(cordoned_by_someone), NODE, action='status')
    assert (plan['outcome'], plan['message']) == ('done', 'state none, unschedulable')
    assert plan['original'] == plan['status'] and 'cordon' not in plan and 'release' not in plan


@pytest.mark.parametrize('arguments, change', [({'skip': True}, None), ({'skip': 'True'}, None),
                                               ({}, lambda node: node['metadata']['labels'].update({'gpufleet.io/skip': 'TRUE'}))])
def test_skip_flag_and_label(arguments, change):
    plan = node_plan(nodes(change), NODE, action='drain', **arguments)
    assert plan['outcome'] == 'skipped' and 'cordon' not in plan


def test_a_node_cordoned_by_someone_else_is_left_alone():
    plan = node_plan(nodes(cordoned_by_someone), NODE, action='drain')
    assert plan['status']['cordoned_by_others'] is True
    assert plan['outcome'] == 'left_alone' and 'cordon' not in plan and 'restore' not in plan


def test_respect_existing_false_marks_it_but_records_it_was_cordoned():
    plan = node_plan(nodes(cordoned_by_someone), NODE, action='cordon', respect_existing='false')
    assert plan['outcome'] == 'pending'
    assert plan['cordon']['original'] == 'true' and plan['cordon']['cordon'] is False
    assert plan['original'] == {'unschedulable': True, 'state': '', 'taints': []}
    # A deferred drain of such a node never uncordons it.
    assert node_plan(nodes(cordoned_by_someone), NODE, action='drain', respect_existing=False)['restore']['uncordon'] is False


def test_someone_elses_cordon_is_never_uncordoned_even_without_respect_existing():
    plan = node_plan(nodes(cordoned_by_someone), NODE, action='uncordon', respect_existing=False)
    assert plan['outcome'] == 'left_alone' and 'release' not in plan


def test_uncordon_of_a_node_gpufleet_does_not_hold_does_nothing():
    plan = node_plan(nodes(), NODE, action='uncordon')
    assert (plan['outcome'], plan['message']) == ('done', 'node is not cordoned by gpufleet: nothing to uncordon')
    assert 'release' not in plan


@pytest.mark.parametrize('state', ['cordoned', 'draining', 'drained', 'quarantined'])
def test_every_active_state_is_gpufleets_cordon(state):
    plan = node_plan(nodes(held_by_gpufleet(state=state)), NODE, action='drain')
    assert plan['status']['ours'] is True and plan['status']['cordoned_by_others'] is False and plan['outcome'] == 'pending'


# ------------------------------------------------------------------ cordon: marker, original state, taints

def test_cordon_of_a_schedulable_node():
    plan = node_plan(nodes(), NODE, action='cordon', reason='driver upgrade 580', run='20260101T000000Z')
    cordon = plan['cordon']
    assert cordon['cordon'] is True and cordon['taints'] == [] and cordon['state'] == 'cordoned'
    assert cordon['labels'] == {'gpufleet.io/state': 'cordoned'}
    assert cordon['annotations'] == {'gpufleet.io/original-unschedulable': 'false', 'gpufleet.io/run-id': '20260101T000000Z',
                                     'gpufleet.io/reason': 'driver upgrade 580', 'gpufleet.io/added-taints': '[]'}
    assert cordon['message'] == 'node cordoned: driver upgrade 580'
    assert (cordon['event_reason'], cordon['event_message']) == (
        'GpufleetCordoned', 'Cordoned by gpufleet.lifecycle: driver upgrade 580 (run 20260101T000000Z)')
    assert plan['original'] == {'unschedulable': False, 'state': '', 'taints': []}


def test_the_original_state_is_recorded_once():
    # gpufleet cordoned the node (it is unschedulable now): it was schedulable before, and stays recorded so.
    plan = node_plan(nodes(held_by_gpufleet(state='cordoned', original='false')), NODE, action='drain')
    assert plan['cordon']['original'] == 'false' and plan['cordon']['cordon'] is False
    assert plan['original']['unschedulable'] is False
    assert plan['restore']['uncordon'] is False  # held before this run: a deferred drain leaves it cordoned


def test_drain_marks_draining_and_a_drained_node_stays_drained():
    assert node_plan(nodes(), NODE, action='drain')['cordon']['labels'] == {'gpufleet.io/state': 'draining'}
    assert node_plan(nodes(held_by_gpufleet(state='drained')), NODE, action='drain')['cordon']['state'] == 'drained'
    assert node_plan(nodes(), NODE, action='drain', reason='x')['cordon']['message'] == 'node drained: x'


def test_run_id_kept_while_held_unless_given():
    held = nodes(held_by_gpufleet(run_id='first-run'))
    assert node_plan(held, NODE, action='drain', run='second')['cordon']['annotations']['gpufleet.io/run-id'] == 'first-run'
    assert node_plan(held, NODE, action='drain', run='second', run_id_fixed=True)['cordon']['annotations']['gpufleet.io/run-id'] == 'second'
    assert node_plan(nodes(), NODE, action='drain', run='second')['cordon']['annotations']['gpufleet.io/run-id'] == 'second'


def test_runai_adds_the_drain_taint_and_records_it():
    plan = node_plan(nodes(), NODE, action='cordon', scheduler='runai', run='r')
    assert plan['cordon']['taints'] == [RUNAI]
    assert json.loads(plan['cordon']['annotations']['gpufleet.io/added-taints']) == [RUNAI]
    assert plan['cordon']['event_message'].endswith('(run r, taints runai)')
    assert node_plan(nodes(), NODE, action='cordon')['cordon']['taints'] == []


def test_a_taint_key_the_node_already_has_is_not_added_nor_recorded():
    # Someone else's runai taint: not ours to add, and never ours to remove.
    def tainted(node):
        node['spec']['taints'] = [{'key': 'runai', 'value': 'drain', 'effect': 'NoExecute'}]
    plan = node_plan(nodes(tainted), NODE, action='drain', scheduler='runai')
    assert plan['cordon']['taints'] == [] and plan['cordon']['annotations']['gpufleet.io/added-taints'] == '[]'
    assert plan['restore']['taints'] == []


def test_taints_recorded_earlier_are_kept_in_the_record():
    plan = node_plan(nodes(held_by_gpufleet(state='cordoned', taints=[RUNAI])), NODE, action='quarantine', scheduler='runai',
                     quarantine_taint=True, reason='xid 79')
    quarantine = {'key': 'gpufleet.io/quarantine', 'value': 'xid-79', 'effect': 'NoSchedule'}
    # The node does not carry the runai taint any more (someone removed it): added again, recorded once.
    assert plan['cordon']['taints'] == [RUNAI, quarantine]
    assert json.loads(plan['cordon']['annotations']['gpufleet.io/added-taints']) == [RUNAI, RUNAI, quarantine]
    # Undone once only.
    assert node_plan(nodes(held_by_gpufleet(taints=[RUNAI, RUNAI])), NODE, action='uncordon')['release']['taints'] == [RUNAI]


@pytest.mark.parametrize('reason, value', [
    ('XID 79 fell off the bus', 'XID-79-fell-off-the-bus'),
    ('  -- bad DIMM!! --', 'bad-DIMM'),
    ('x' * 62 + ' tail', 'x' * 62),
    ('über-heiß', 'ber-hei'),
    ('', ''),
])
def test_quarantine_taint_value_is_a_label_value(reason, value):
    assert _kube.quarantine_value(reason) == value
    plan = node_plan(nodes(), NODE, action='quarantine', quarantine_taint=True, reason=reason)
    assert plan['cordon']['taints'] == [{'key': 'gpufleet.io/quarantine', 'value': value, 'effect': 'NoSchedule'}]
    assert plan['cordon']['event_reason'] == 'GpufleetQuarantined' and plan['cordon']['state'] == 'quarantined'


def test_quarantine_without_the_taint_option_only_cordons():
    assert node_plan(nodes(), NODE, action='quarantine', reason='xid')['cordon']['taints'] == []


# ------------------------------------------------------------------ undo: uncordon and a deferred drain

def test_uncordon_takes_back_only_what_gpufleet_added():
    def held(node):
        held_by_gpufleet(taints=[RUNAI])(node)
        node['spec']['taints'] = [RUNAI, {'key': 'nvidia.com/gpu', 'effect': 'NoSchedule'}]
    plan = node_plan(nodes(held), NODE, action='uncordon', run='r2')
    release = plan['release']
    assert release['taints'] == [RUNAI] and release['uncordon'] is True and release['message'] == 'node uncordoned'
    assert release['labels'] == {'gpufleet.io/state': 'done'}
    assert release['annotations'] == {'gpufleet.io/original-unschedulable': None, 'gpufleet.io/reason': None,
                                      'gpufleet.io/added-taints': None, 'gpufleet.io/run-id': 'r2', 'gpufleet.io/handed-off': None}
    assert release['event_message'] == 'Released by gpufleet.lifecycle (run r2): uncordoned'
    assert plan['original'] == {'unschedulable': False, 'state': 'drained', 'taints': [RUNAI, {'key': 'nvidia.com/gpu', 'effect': 'NoSchedule'}]}


def test_uncordon_leaves_a_node_that_was_cordoned_before_gpufleet_cordoned():
    release = node_plan(nodes(held_by_gpufleet(original='true')), NODE, action='uncordon')['release']
    assert release['uncordon'] is False and release['message'] == 'marker removed, node stays cordoned as before'
    assert release['event_message'].endswith(': left unschedulable, it was cordoned before gpufleet')
    # No original recorded (a marker without it): not uncordoned either.
    assert node_plan(nodes(held_by_gpufleet(original='')), NODE, action='uncordon')['release']['uncordon'] is False


def test_a_deferred_drain_of_a_schedulable_node_puts_it_back():
    restore = node_plan(nodes(), NODE, action='drain', scheduler='runai', run='r')['restore']
    assert restore['taints'] == [RUNAI] and restore['uncordon'] is True
    assert restore['labels'] == {'gpufleet.io/state': None}
    assert restore['annotations'] == {'gpufleet.io/original-unschedulable': None, 'gpufleet.io/reason': None,
                                      'gpufleet.io/added-taints': None, 'gpufleet.io/run-id': None, 'gpufleet.io/handed-off': None}


def test_a_deferred_drain_of_a_node_gpufleet_held_restores_its_previous_marker():
    restore = node_plan(nodes(held_by_gpufleet(state='cordoned', taints=[])), NODE, action='drain', scheduler='runai')['restore']
    assert restore['uncordon'] is False and restore['taints'] == [RUNAI]
    assert restore['labels'] == {'gpufleet.io/state': 'cordoned'}
    assert restore['annotations'] == {'gpufleet.io/added-taints': '[]'}


# ------------------------------------------------------------------ the hand-off to the node's other owners

HANDOFF = ['nvsentinel', 'gpu_operator', 'nhc', 'nhc_pause']
HANDOFF_LABELS = {'nvsentinel.dgxc.nvidia.com/managed': 'false', 'k8saas.nvidia.com/ManagedByNVSentinel': 'false',
                  'nvidia.com/gpu-driver-upgrade.skip': 'true', 'remediation.medik8s.io/exclude-from-remediation': 'true'}


def test_a_cordon_hands_the_node_off_and_records_each_labels_value_before():
    def labelled(node):
        # An operator opted the node out of NVSentinel's new label before (a copy of the real node with that label).
        node['metadata']['labels']['nvsentinel.dgxc.nvidia.com/managed'] = 'false'
    cordon = node_plan(nodes(labelled), NODE, action='drain', run='r', handoff=HANDOFF)['cordon']
    assert cordon['labels'] == dict(HANDOFF_LABELS, **{'gpufleet.io/state': 'draining'})
    before = json.loads(cordon['annotations']['gpufleet.io/handed-off'])
    assert before == {'nvsentinel.dgxc.nvidia.com/managed': 'false', 'k8saas.nvidia.com/ManagedByNVSentinel': None,
                      'nvidia.com/gpu-driver-upgrade.skip': None, 'remediation.medik8s.io/exclude-from-remediation': None}
    # Only the owners asked for; none: no label and no record.
    assert node_plan(nodes(), NODE, action='cordon', handoff=['gpu_operator'])['cordon']['labels'] == {
        'gpufleet.io/state': 'cordoned', 'nvidia.com/gpu-driver-upgrade.skip': 'true'}
    assert 'gpufleet.io/handed-off' not in node_plan(nodes(), NODE, action='cordon')['cordon']['annotations']
    with pytest.raises(KubeError, match='node_drain_handoff: nvsentinal not one of'):
        node_plan(nodes(), NODE, action='cordon', handoff=['nvsentinal'])


def handed_off(before):
    def change(node):
        held_by_gpufleet()(node)
        node['metadata']['labels'].update(HANDOFF_LABELS)
        node['metadata']['annotations']['gpufleet.io/handed-off'] = json.dumps(before)
    return change


def test_the_release_puts_each_hand_off_label_back_as_it_was():
    before = {'nvsentinel.dgxc.nvidia.com/managed': 'false', 'nvidia.com/gpu-driver-upgrade.skip': None}
    release = node_plan(nodes(handed_off(before)), NODE, action='uncordon', run='r')['release']
    assert release['labels'] == {'gpufleet.io/state': 'done', 'nvsentinel.dgxc.nvidia.com/managed': 'false',
                                 'nvidia.com/gpu-driver-upgrade.skip': None}
    assert release['annotations']['gpufleet.io/handed-off'] is None
    assert release['handoff'] == {'undone': ['nvidia.com/gpu-driver-upgrade.skip', 'nvsentinel.dgxc.nvidia.com/managed']}


def test_a_quarantine_keeps_the_hand_off_recorded_at_the_cordon():
    before = {'remediation.medik8s.io/exclude-from-remediation': None}
    cordon = node_plan(nodes(handed_off(before)), NODE, action='quarantine', handoff=['nhc'])['cordon']
    assert json.loads(cordon['annotations']['gpufleet.io/handed-off']) == before
    assert cordon['labels']['remediation.medik8s.io/exclude-from-remediation'] == 'true'


def test_a_deferred_drain_hands_the_node_back():
    restore = node_plan(nodes(), NODE, action='drain', handoff=HANDOFF)['restore']
    assert restore['labels'] == dict({key: None for key in HANDOFF_LABELS}, **{'gpufleet.io/state': None})
    # A node gpufleet held before this run keeps its hand-off; what this run's cordon added goes back.
    restore = node_plan(nodes(handed_off({'nvidia.com/gpu-driver-upgrade.skip': None})), NODE, action='drain', handoff=HANDOFF)['restore']
    assert restore['handoff']['kept'] == ['nvidia.com/gpu-driver-upgrade.skip']
    assert restore['labels'] == {'gpufleet.io/state': 'drained', 'nvsentinel.dgxc.nvidia.com/managed': 'false',
                                 'k8saas.nvidia.com/ManagedByNVSentinel': 'false', 'remediation.medik8s.io/exclude-from-remediation': 'true'}


def test_an_unreadable_hand_off_record_names_the_node_and_annotation():
    def broken(node):
        handed_off({})(node)
        node['metadata']['annotations']['gpufleet.io/handed-off'] = '{"a": 1}'
    with pytest.raises(KubeError, match='node nori: annotation gpufleet.io/handed-off is not a mapping'):
        node_plan(nodes(broken), NODE, action='uncordon')


# ------------------------------------------------------------------ pods

def test_real_unmanaged_gpu_reservation_pod():
    pod = load(RESERVATION)
    assert _kube.gpu_containers(pod) == ['runai-reservation']
    assert _kube.controller_of(pod) is None
    plan = pod_plan(pod)
    assert plan['gpu_pods'] == [{'namespace': 'runai-reservation', 'name': 'runai-reservation-gpu-i-0b498db53280b86a6-fzdhl',
                                 'refused': 'not managed by a controller (set node_drain_force)'}]
    assert plan['refused'] == ('pod runai-reservation/runai-reservation-gpu-i-0b498db53280b86a6-fzdhl '
                               'not managed by a controller (set node_drain_force);')
    assert pod_plan(pod, force=True)['gpu_pods'][0]['refused'] == '' and pod_plan(pod, force='yes')['refused'] == ''


def test_real_pods_without_gpu_requests():
    fraction, nginx = load(FRACTION), load(NGINX)
    # Run:ai hands a fraction over through its reservation pod: the fractional pod itself requests no nvidia.com/gpu.
    assert fraction['metadata']['annotations']['gpu-fraction'] == '0.5'
    assert _kube.gpu_containers(fraction) == [] and _kube.gpu_containers(nginx) == []
    assert _kube.controller_of(fraction)['kind'] == 'RunaiJob' and _kube.controller_of(nginx) is None
    plan = pod_plan([fraction, nginx])
    assert plan['gpu_pods'] == [] and plan['refused'] == ''
    assert plan['blocking'] == ['runai-pa/frac-1-0-0', 'default/myapp']
    assert pod_plan([fraction, nginx], gpu_pods_only=True)['blocking'] == []


def test_gpu_requests_in_init_containers_count():
    """The bug of issue #10: blocking_pods.j2 looked at containers only, gpu_pods.j2 also at initContainers."""
    pod = validator_pod()
    assert _kube.gpu_containers(pod) == ['plugin-validation']
    assert pod['spec']['containers'][0].get('resources') is None, 'the main container requests nothing'
    plan = pod_plan([pod, load(NGINX)], gpu_pods_only=True)
    assert plan['gpu_pods'] == [{'namespace': 'gpu-operator', 'name': 'nvidia-device-plugin-validator-x7k2p', 'refused': ''}]
    # The same pods block a GPU-pods-only drain as are deleted by it.
    assert plan['blocking'] == ['gpu-operator/nvidia-device-plugin-validator-x7k2p']


def test_limits_alone_requests_alone_and_other_gpu_resources():
    pod = validator_pod()
    pod['spec']['initContainers'][0]['resources'] = {'limits': {'nvidia.com/mig-1g.10gb': '1'}}
    assert _kube.gpu_containers(pod) == []
    assert _kube.gpu_containers(pod, 'nvidia.com/mig-1g.10gb') == ['plugin-validation']
    assert pod_plan(pod, resource='nvidia.com/mig-1g.10gb')['gpu_pods'][0]['name'] == 'nvidia-device-plugin-validator-x7k2p'
    pod['spec']['initContainers'][0]['resources'] = {'requests': {'nvidia.com/gpu': 2}}
    assert _kube.gpu_containers(pod) == ['plugin-validation']


def test_a_zero_quantity_holds_no_gpu():
    pod = copy.deepcopy(load(RESERVATION))
    pod['spec']['containers'][0]['resources'] = {'limits': {'nvidia.com/gpu': '0'}, 'requests': {'nvidia.com/gpu': '0'}}
    assert _kube.gpu_containers(pod) == [] and pod_plan(pod)['gpu_pods'] == []


def test_daemonset_pods_are_never_deleted_and_never_block():
    pods = [owned_by_daemonset(load(RESERVATION)), owned_by_daemonset(load(FRACTION))]
    assert _kube.is_daemonset_pod(pods[0]) and not _kube.is_daemonset_pod(load(RESERVATION))
    plan = pod_plan(pods)
    assert plan['gpu_pods'] == [] and plan['blocking'] == []
    assert pod_plan(pods, gpu_pods_only=True)['blocking'] == []


def test_a_daemonset_owner_counts_also_without_the_controller_flag():
    # kubernetes.core.k8s_drain skips such pods too, so they must not count as left behind.
    pod = owned_by_daemonset(load(FRACTION))
    del pod['metadata']['ownerReferences'][0]['controller']
    assert pod_plan(pod)['blocking'] == []


def test_mirror_pods_are_left_by_a_drain_and_do_not_block():
    pod = copy.deepcopy(load(NGINX))
    pod['metadata']['annotations'] = {'kubernetes.io/config.mirror': '3f2a'}
    assert _kube.is_mirror_pod(pod)
    assert pod_plan([pod, load(FRACTION)])['blocking'] == ['runai-pa/frac-1-0-0']
    gpu_mirror = copy.deepcopy(load(RESERVATION))
    gpu_mirror['metadata']['annotations']['kubernetes.io/config.mirror'] = '3f2a'
    assert pod_plan(gpu_mirror, force=True)['gpu_pods'] == []


def test_empty_dir_data_is_not_deleted_without_permission():
    pod = validator_pod()
    pod['spec']['volumes'] = [{'name': 'scratch', 'emptyDir': {}}]
    assert _kube.uses_empty_dir(pod) and not _kube.uses_empty_dir(load(FRACTION))  # the real one has hostPath, not emptyDir
    assert pod_plan(pod)['gpu_pods'][0]['refused'] == 'uses emptyDir data (set node_drain_delete_emptydir_data)'
    assert pod_plan(pod, delete_emptydir_data=True)['refused'] == ''
    unmanaged = copy.deepcopy(load(RESERVATION))
    unmanaged['spec']['volumes'].append({'name': 'scratch', 'emptyDir': {'medium': 'Memory'}})
    assert pod_plan(unmanaged)['gpu_pods'][0]['refused'] == ('not managed by a controller (set node_drain_force), '
                                                             'uses emptyDir data (set node_drain_delete_emptydir_data)')


def test_finished_pods_do_not_count():
    pod = copy.deepcopy(load(RESERVATION))
    pod['status']['phase'] = 'Succeeded'
    failed = validator_pod()
    failed['status'] = {'phase': 'Failed'}
    plan = pod_plan([pod, failed, load(FRACTION)])
    assert plan['gpu_pods'] == [] and plan['blocking'] == ['runai-pa/frac-1-0-0']


def test_what_blocked_a_failed_drain():
    left = [load(RESERVATION), load(FRACTION)]
    waited = {'changed': False, 'resources': [load(FRACTION)]}
    message = "Failed to delete pod runai-pa/frac-1-0-0 due to: Cannot evict pod as it would violate the pod's disruption budget."
    assert pod_plan(left, failure=message, waited=waited)['blocking'] == ['runai-pa/frac-1-0-0']
    assert pod_plan(left, failure='pod ml/a-1 and pods ml/b-2; pod ml/a-1')['blocking'] == ['ml/a-1', 'ml/b-2']
    # No pod named in the message: the pods a wait for completion was still waiting for.
    assert pod_plan(left, failure='Failed: timeout', waited=waited)['blocking'] == ['runai-pa/frac-1-0-0']
    # Nothing waited for (the wait was skipped): the pods still on the node.
    skipped = {'changed': False, 'skipped': True, 'skip_reason': 'Conditional result was False'}
    assert pod_plan(left, failure='pods still on the node after the drain: x', waited=skipped)['blocking'] == [
        'runai-reservation/runai-reservation-gpu-i-0b498db53280b86a6-fzdhl', 'runai-pa/frac-1-0-0']


def test_documents_that_are_not_kubernetes_objects_are_refused():
    with pytest.raises(KubeError, match='pod document is not a Kubernetes object'):
        pod_plan('nginx')
    with pytest.raises(KubeError, match='pod document item 1 has no metadata'):
        pod_plan([load(NGINX), {'spec': {}}])
    assert pod_plan({'changed': False, 'skipped': True})['blocking'] == []


# ------------------------------------------------------------------ node names (checked before any API request)

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._kube import check_node_name  # noqa: E402  pylint: disable=wrong-import-position


@pytest.mark.parametrize('name', ['gpu-01', 'a', 'dgx-h100-07.rack3.example.com', 'x' * 63, '.'.join(['a' * 63] * 3) + '.' + 'b' * 61])
def test_real_node_names_pass_unchanged(name):
    assert check_node_name(name) == name


@pytest.mark.parametrize('name', [
    'gpu-02,metadata.name!=x', '../../api/v1/namespaces', 'gpu-02?watch=true', '$(touch MARKER1)', '--output=MARKER3',
    '-gpu', 'gpu-', 'gpu-02\nx', 'GPU-02', 'gpu 02', 'gpu..02', '.gpu', 'gpu.', 'x' * 64, '.'.join(['a' * 63] * 4), '', None, 7,
])
def test_names_that_would_change_the_request_are_refused_naming_the_variable(name):
    with pytest.raises(KubeError, match=r'^node_drain_node_name: .* is not a Kubernetes node name: a DNS subdomain'):
        check_node_name(name)


def test_node_plan_checks_the_name_before_looking_for_the_node():
    with pytest.raises(KubeError, match=r"^node_drain_node_name: 'gpu-01,x' is not a Kubernetes node name"):
        node_plan({'items': [{'metadata': {'name': 'gpu-01,x'}}]}, 'gpu-01,x')


def test_the_workloads_a_drain_interrupts_are_the_gpu_pods_jobs():
    def pod(name, labels=None, annotations=None, gpus=2, owner='Job', start='2026-11-27T08:00:00Z', phase='Running'):
        return {'metadata': {'name': name, 'namespace': 'ml', 'labels': labels or {}, 'annotations': annotations or {},
                             'ownerReferences': [{'kind': owner, 'name': 'o', 'controller': True}]},
                'spec': {'nodeName': 'gpu-01',
                         'containers': [{'name': 'c', 'resources': {'limits': {'nvidia.com/gpu': gpus}, 'requests': {'nvidia.com/gpu': gpus}}}]},
                'status': {'phase': phase, 'startTime': start}}
    jobset = {'jobset.sigs.k8s.io/jobset-name': 'llm'}
    pods = [pod('llm-0', jobset, {'gpufleet.io/checkpoint': '2026-11-27T09:00:00Z'}),
            pod('llm-1', jobset, start='2026-11-27T07:00:00Z'),
            pod('notebook'), pod('exporter', owner='DaemonSet'), pod('etl', {'job-name': 'etl'}, gpus=0),
            pod('old', {'job-name': 'done'}, phase='Succeeded')]
    plan = pod_plan({'resources': pods})
    assert plan['workloads'] == [
        {'job': 'JobSet ml/llm', 'gpus': 4, 'checkpoint': '2026-11-27T09:00:00Z', 'start': '2026-11-27T07:00:00Z'},
        {'job': 'Pod ml/notebook', 'gpus': 2, 'checkpoint': None, 'start': '2026-11-27T08:00:00Z'}]
