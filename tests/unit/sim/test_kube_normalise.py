# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fake Kubernetes API (tests/sim/kube) stores what kube-apiserver stores: checked against real documents.

tests/sim/kube/normalise.py against Kubernetes' own quantity table and documentation, and the fake's create
against real ``kubectl get -o json|yaml`` documents (tests/unit/fixtures/real-outputs/kubernetes).
"""

import copy
import json
import os
import sys

import pytest
import yaml

from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import read_fixture, read_real_output

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim', 'kube'))

import fake_apiserver  # noqa: E402  pylint: disable=wrong-import-position,import-error
import normalise  # noqa: E402  pylint: disable=wrong-import-position,import-error

FORMS = json.loads(read_fixture('kubernetes', 'quantity-canonical-forms.json'))
NODES = 'kubectl_get_nodes_-o_json_k8s-v1.31.6+rke2r1_1xNVIDIA-A16-4Q-vGPU_gpu-operator-v24.9.2_edgexr-edge-cloud-platform.json'
PODS = {
    'nginx': 'kubectl_get_pod_-o_json_unmanaged-nginx_minikube_kubectl-neat.json',
    'reservation': 'kubectl_get_pod_-o_yaml_runai-2.17-reservation-pod_unmanaged_nvidia.com-gpu-1_fake-gpu-operator.yaml',
    'fractional': 'kubectl_get_pod_-o_yaml_runai-2.17-fractional-pod_RunaiJob_gpu-fraction-0.5_fake-gpu-operator.yaml',
}


def real_node():
    return json.loads(read_real_output('kubernetes', NODES))['items'][0]


def real_pod(name):
    return yaml.safe_load(read_real_output('kubernetes', PODS[name]))


def quantity_maps(storage, obj):
    """Every map of quantities in a real document: (path, mapping)."""
    if storage == 'nodes':
        return [('status.' + key, obj['status'][key]) for key in ('capacity', 'allocatable')]
    found = []
    for key in ('containers', 'initContainers'):
        for index, container in enumerate(obj['spec'].get(key) or []):
            for kind, mapping in sorted((container.get('resources') or {}).items()):
                found.append(('spec.%s[%d].resources.%s' % (key, index, kind), mapping))
    return found


def as_written(value):
    """A quantity string as people write it in YAML when they can write it as a number: unquoted (100m as 0.1, 100M as 100000000)."""
    for kind in (int, float):
        try:
            number = kind(value)
        except ValueError:
            continue
        if str(number) == value:
            return number
    if value[:-1].isdigit() and value[-1] in ('m', 'M'):
        return int(value[:-1]) / 1000.0 if value[-1] == 'm' else int(value[:-1]) * 10 ** 6
    return value


# ---------------------------------------------------------------- quantities


@pytest.mark.parametrize('text, canonical', FORMS['parse_emit'] + FORMS['alternates'])
def test_quantity_strings_become_what_apimachinery_emits(text, canonical):
    assert normalise.canonical_quantity(text) == canonical


@pytest.mark.parametrize('text, canonical', FORMS['parse_emit'])
def test_negative_quantities_keep_the_sign(text, canonical):
    assert normalise.canonical_quantity('-' + text) == '-' + canonical


@pytest.mark.parametrize('text', FORMS['canonical'])
def test_canonical_strings_are_kept(text):
    assert normalise.canonical_quantity(text) == text


@pytest.mark.parametrize('literal, canonical', FORMS['json_whitespace'])
def test_json_numbers_and_padded_strings(literal, canonical):
    assert normalise.canonical_quantity(json.loads(literal, parse_float=normalise.JsonNumber)) == canonical


@pytest.mark.parametrize('text', FORMS['invalid'] + [True, 'K', '', '1K'])
def test_what_apimachinery_refuses_is_refused(text):
    with pytest.raises(normalise.DecodeError, match='quantities must match the regular expression|suffix'):
        normalise.canonical_quantity(text)


def test_a_json_number_keeps_its_text():
    """1e3 unquoted is "1e3" on a real server (the decoder parses the number's text), not "1k"."""
    document = json.loads('{"a": 1e3, "b": 0.5, "c": 8, "d": 1000}', parse_float=normalise.JsonNumber)
    assert dict((key, normalise.canonical_quantity(value)) for key, value in document.items()) == {
        'a': '1e3', 'b': '500m', 'c': '8', 'd': '1k'}


def test_null_is_the_zero_quantity():
    assert normalise.canonical_quantity(None) == '0'


def test_the_kubernetes_docs_cpu_demo():
    """kubectl apply of requests cpu "0.5" reads back as 500m (the Kubernetes documentation's own output)."""
    demo = FORMS['kubernetes_docs_cpu_demo']
    container = {'name': 'cpu-demo-ctr', 'image': 'vish/stress', 'resources': copy.deepcopy(demo['manifest'])}
    normalise.normalise('pods', {'spec': {'containers': [container]}})
    assert container['resources'] == demo['kubectl_get_pod_output']


# ---------------------------------------------------------------- real documents


@pytest.mark.parametrize('storage, name', [('nodes', None)] + [('pods', name) for name in sorted(PODS)])
def test_real_documents_come_back_unchanged(storage, name):
    document = real_node() if storage == 'nodes' else real_pod(name)
    assert normalise.normalise(storage, copy.deepcopy(document)) == document


@pytest.mark.parametrize('storage, name', [('nodes', None), ('pods', 'reservation'), ('pods', 'fractional')])
def test_unquoted_numbers_come_back_as_the_real_strings(storage, name):
    """The issue's case: nvidia.com/gpu: 8 written unquoted is stored and returned as the string a real server returns."""
    document = real_node() if storage == 'nodes' else real_pod(name)
    written = copy.deepcopy(document)
    numbers = 0
    for _path, mapping in quantity_maps(storage, written):
        for key, value in mapping.items():
            mapping[key] = as_written(value)
            numbers += not isinstance(mapping[key], str)
    assert numbers >= 1
    assert normalise.normalise(storage, written) == document
    assert all(isinstance(value, str) for _path, mapping in quantity_maps(storage, written) for value in mapping.values())


def test_quantities_in_workload_templates_and_volumes():
    statefulset = {'spec': {'template': {'spec': {
        'containers': [{'name': 'c', 'resources': {'limits': {'nvidia.com/gpu': 8, 'memory': 2147483648}}}],
        'volumes': [{'name': 'scratch', 'emptyDir': {'sizeLimit': 1073741824}}], 'overhead': {'cpu': 0.25}}},
        'volumeClaimTemplates': [{'spec': {'resources': {'requests': {'storage': '1024Gi'}}}}]}}
    normalise.normalise('statefulsets', statefulset)
    template = statefulset['spec']['template']['spec']
    assert template['containers'][0]['resources']['limits'] == {'nvidia.com/gpu': '8', 'memory': '2147483648'}
    assert template['volumes'][0]['emptyDir']['sizeLimit'] == '1073741824' and template['overhead'] == {'cpu': '250m'}
    assert statefulset['spec']['volumeClaimTemplates'][0]['spec']['resources']['requests'] == {'storage': '1Ti'}


@pytest.mark.parametrize('value, kind', [(8, 'number'), (True, 'bool'), ({'a': 'b'}, 'object')])
def test_label_values_must_be_strings(value, kind):
    with pytest.raises(normalise.DecodeError, match='cannot unmarshal %s into Go struct field ObjectMeta.metadata.labels of type string' % kind):
        normalise.normalise('pods', {'metadata': {'labels': {'app': value}}})


# ---------------------------------------------------------------- the fake's writes against real documents


def fresh_store():
    store = fake_apiserver.Store()
    store.create('namespaces', {'metadata': {'name': 'ml'}}, admit=False)
    return store


def manifest_of(pod):
    """What a user writes for a real pod: name, labels and the containers' name, image and resources (numbers unquoted)."""
    containers = []
    for container in pod['spec']['containers']:
        resources = dict((kind, dict((key, as_written(value)) for key, value in mapping.items()))
                         for kind, mapping in (container.get('resources') or {}).items() if kind == 'limits')
        containers.append({'name': container['name'], 'image': container['image'], 'resources': resources})
    return {'metadata': {'name': pod['metadata']['name'], 'namespace': 'ml'}, 'spec': {'containers': containers}}


DEFAULTED_SPEC = ('dnsPolicy', 'enableServiceLinks', 'priority', 'securityContext', 'terminationGracePeriodSeconds')
DEFAULTED_CONTAINER = ('imagePullPolicy', 'terminationMessagePath', 'terminationMessagePolicy', 'resources')


@pytest.mark.parametrize('name', ['nginx', 'reservation'])
def test_a_created_pod_has_the_defaults_of_the_real_one(name):
    real = real_pod(name)
    store = fresh_store()
    created = store.create('pods', manifest_of(real), admit=True)
    for key in DEFAULTED_SPEC:
        assert created['spec'][key] == real['spec'][key], key
    if name == 'nginx':  # set by the Run:ai scheduler and controller in the other sample
        for key in ('restartPolicy', 'schedulerName', 'serviceAccount', 'serviceAccountName'):
            assert created['spec'][key] == real['spec'][key], key
    for mine, theirs in zip(created['spec']['containers'], real['spec']['containers']):
        for key in DEFAULTED_CONTAINER:
            assert mine[key] == theirs[key], key
    assert [t for t in created['spec']['tolerations'] if t.get('tolerationSeconds') == 300] == sorted(
        (t for t in real['spec'].get('tolerations') or [] if t.get('tolerationSeconds') == 300), key=lambda t: t['key'])
    # the system fields of metadata, as strings where the real ones are strings
    for key in ('uid', 'creationTimestamp', 'resourceVersion'):
        assert isinstance(created['metadata'][key], str) and isinstance(real['metadata'][key], str), key
    assert created['metadata']['generation'] == 1
    assert created['status']['phase'] == 'Pending' and created['status']['qosClass'] == real['status']['qosClass']


def test_a_node_with_unquoted_capacity_reads_back_as_the_real_one():
    real = real_node()
    store = fake_apiserver.Store()
    written = {'metadata': {'name': real['metadata']['name']},
               'status': dict((key, dict((name, as_written(value)) for name, value in real['status'][key].items()))
                              for key in ('capacity', 'allocatable'))}
    created = store.create('nodes', written, admit=False)
    for key in ('capacity', 'allocatable'):
        # the fake's kubelet reports hugepages-1Gi too, which this node has not
        assert dict((name, created['status'][key][name]) for name in real['status'][key]) == real['status'][key], key


def test_the_fakes_own_defaults_are_canonical():
    """Capacity, allocatable and requests the fake fills in are what a real server would store."""
    store = fresh_store()
    node = store.create('nodes', {'metadata': {'name': 'gpu-01'}}, admit=False)
    pod = store.create('pods', {'metadata': {'name': 'p', 'namespace': 'ml'}, 'spec': {'containers': [
        {'name': 'c', 'image': 'nvcr.io/nvidia/cuda:12.6.2-base-ubuntu24.04', 'resources': {'limits': {'cpu': 0.5, 'nvidia.com/gpu': 8}}}]}})
    quantities = list(node['status']['capacity'].values()) + list(node['status']['allocatable'].values())
    quantities += list(pod['spec']['containers'][0]['resources']['requests'].values())
    assert quantities and all(normalise.canonical_quantity(value) == value for value in quantities)
    assert pod['spec']['containers'][0]['resources']['requests'] == {'cpu': '500m', 'nvidia.com/gpu': '8'}


def test_a_bad_quantity_is_a_400_as_the_real_server_answers():
    store = fresh_store()
    with pytest.raises(fake_apiserver.ApiError) as raised:
        store.create('pods', {'metadata': {'name': 'p', 'namespace': 'ml'}, 'spec': {'containers': [
            {'name': 'c', 'image': 'busybox:1', 'resources': {'limits': {'nvidia.com/gpu': 'eight'}}}]}})
    status = raised.value.status()
    assert status['code'] == 400 and status['reason'] == 'BadRequest'
    assert status['message'] == ('Pod in version "v1" cannot be handled as a Pod: quantities must match the regular expression '
                                 "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    assert store.get('pods', 'ml', 'p') is None


def test_an_update_is_normalised_too():
    store = fresh_store()
    node = store.create('nodes', {'metadata': {'name': 'gpu-01'}}, admit=False)
    changed = copy.deepcopy(node)
    changed['status']['capacity']['nvidia.com/gpu'] = 8
    updated = store.update(fake_apiserver.BY_STORAGE['nodes'], node, changed, subresource='status')
    assert updated['status']['capacity']['nvidia.com/gpu'] == '8'
