# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Custom resources on the fake Kubernetes API, through the real ``kubernetes`` client, as kube-apiserver serves them.

The vendored, published NodeHealthCheck CRD of medik8s (tests/sim/kube/crds/) is installed by name; NodeHealthChecks are
created, read, listed and patched with ``CustomObjectsApi`` and the ``DynamicClient`` that kubernetes.core uses, and the
answers are the real server's: 415 for a strategic merge patch, 422 with the field path for a schema violation, 409 for a
stale resourceVersion, unknown fields pruned (with a Warning, or 400 under Strict), status only through /status,
discovery that shows the group while the CRD is installed and not after it is deleted.
"""

import hashlib
import json
import os
import sys
import urllib.error
import urllib.request

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
KUBE = os.path.join(ROOT, 'tests', 'sim', 'kube')
sys.path.insert(0, KUBE)

import fake_apiserver  # noqa: E402  pylint: disable=wrong-import-position,import-error
from fake_api import custom_schema  # noqa: E402  pylint: disable=wrong-import-position,import-error

NHC_FILE = 'remediation.medik8s.io_nodehealthchecks.yaml'
MR_FILE = 'nvsentinel.dgxc.nvidia.com_maintenancerequests.yaml'
GROUP, VERSION, PLURAL = 'remediation.medik8s.io', 'v1alpha1', 'nodehealthchecks'
CRD_NAME = PLURAL + '.' + GROUP
NHC_PATH = '/apis/%s/%s/%s' % (GROUP, VERSION, PLURAL)
AGGREGATED = 'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList'
TABLE = 'application/json;as=Table;v=v1;g=meta.k8s.io'


def nhc(name='nhc-workers', **spec):
    body = {'apiVersion': GROUP + '/' + VERSION, 'kind': 'NodeHealthCheck', 'metadata': {'name': name, 'labels': {'fleet': 'gpu'}},
            'spec': {'selector': {'matchExpressions': [{'key': 'node-role.kubernetes.io/worker', 'operator': 'Exists'}]},
                     'remediationTemplate': {'apiVersion': 'self-node-remediation.medik8s.io/v1alpha1', 'kind': 'SelfNodeRemediationTemplate',
                                             'namespace': 'openshift-workload-availability', 'name': 'self-node-remediation-automatic-strategy-template'},
                     'minHealthy': '51%', 'pauseRequests': ['x', 'gpufleet-rollout']}}
    body['spec'].update(spec)
    return body


@pytest.fixture
def cluster():
    server, _thread, url = fake_apiserver.start({'crd_files': [NHC_FILE, MR_FILE]})
    configuration = client.Configuration()
    configuration.host = url
    api_client = client.ApiClient(configuration)
    yield url, api_client, server
    api_client.close()
    fake_apiserver.stop(server)


def call(url, method, path, body=None, content_type='application/json', accept='application/json'):
    """(code, JSON body, Warning headers) of one request."""
    data = None if body is None else json.dumps(body).encode('utf-8')
    request = urllib.request.Request(url + path, method=method, data=data, headers={'Content-Type': content_type, 'Accept': accept})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read().decode('utf-8')), response.headers.get_all('Warning') or []
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read().decode('utf-8')), error.headers.get_all('Warning') or []


def api_error(function, *args, **kwargs):
    with pytest.raises(ApiException) as caught:
        function(*args, **kwargs)
    return caught.value.status, json.loads(caught.value.body)


def objects(api_client):
    return client.CustomObjectsApi(api_client)


# ------------------------------------------------------------------------------------------------
# The vendored CRDs
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('name', [NHC_FILE, MR_FILE])
def test_the_vendored_crds_carry_their_provenance(name):
    with open(os.path.join(KUBE, 'crds', name + '.source.txt'), encoding='utf-8') as handle:
        source = handle.read()
    assert 'https://github.com/' in source and 'Apache-2.0' in source and 'commit:' in source
    with open(os.path.join(KUBE, 'crds', name), 'rb') as handle:
        data = handle.read()
    if name == NHC_FILE:  # byte for byte the published file: git's blob id of it is in the note
        blob = hashlib.sha1(b'blob %d\0' % len(data) + data).hexdigest()
        assert blob == '1147320772012d97ab4d8a0353acbd6985ab9a21' and blob in source
    crd = fake_apiserver.Store({'crd_files': [name]}).items('customresourcedefinitions')[0]
    assert crd['metadata']['name'] == crd['spec']['names']['plural'] + '.' + crd['spec']['group']


def test_the_crd_is_served_and_established(cluster):
    url, api_client, _server = cluster
    crd = client.ApiextensionsV1Api(api_client).read_custom_resource_definition(CRD_NAME)
    assert crd.spec.scope == 'Cluster' and crd.spec.names.short_names == ['nhc']
    assert {(c.type, c.status) for c in crd.status.conditions} == {('NamesAccepted', 'True'), ('Established', 'True')}
    assert crd.status.stored_versions == ['v1alpha1']
    names = [item.metadata.name for item in client.ApiextensionsV1Api(api_client).list_custom_resource_definition().items]
    assert names == ['maintenancerequests.nvsentinel.dgxc.nvidia.com', CRD_NAME]
    wrong = json.loads(json.dumps(api_client.sanitize_for_serialization(crd)))
    wrong['metadata'] = {'name': 'nhc.remediation.medik8s.io'}
    wrong.pop('status')
    code, status, _warnings = call(url, 'POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', wrong)
    assert code == 422 and status['details']['causes'] == [{
        'reason': 'FieldValueInvalid', 'field': 'metadata.name',
        'message': 'Invalid value: "nhc.remediation.medik8s.io": must be spec.names.plural+"."+spec.group'}]
    wrong['metadata']['name'] = CRD_NAME
    code, status, _warnings = call(url, 'POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', wrong)
    assert code == 409 and status['reason'] == 'AlreadyExists'


# ------------------------------------------------------------------------------------------------
# Create, get, list: CustomObjectsApi and the DynamicClient
# ------------------------------------------------------------------------------------------------

def test_create_get_and_list_with_custom_objects_api(cluster):
    _url, api_client, _server = cluster
    api = objects(api_client)
    created = api.create_cluster_custom_object(GROUP, VERSION, PLURAL, dict(nhc(), status={'phase': 'Enabled'}))
    assert created['apiVersion'] == 'remediation.medik8s.io/v1alpha1' and created['kind'] == 'NodeHealthCheck'
    assert created['metadata']['generation'] == 1 and created['metadata']['uid'] and created['metadata']['resourceVersion']
    assert 'status' not in created  # the status subresource: create cannot set it
    # The schema's default for an absent unhealthyConditions, as the real server fills it.
    assert created['spec']['unhealthyConditions'] == [{'duration': '300s', 'status': 'False', 'type': 'Ready'},
                                                      {'duration': '300s', 'status': 'Unknown', 'type': 'Ready'}]
    got = api.get_cluster_custom_object(GROUP, VERSION, PLURAL, 'nhc-workers')
    assert got == created
    api.create_cluster_custom_object(GROUP, VERSION, PLURAL, nhc('nhc-control-plane', selector={'matchLabels': {
        'node-role.kubernetes.io/control-plane': ''}}))
    listed = api.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert listed['kind'] == 'NodeHealthCheckList' and listed['apiVersion'] == 'remediation.medik8s.io/v1alpha1'
    assert [item['metadata']['name'] for item in listed['items']] == ['nhc-control-plane', 'nhc-workers']
    assert all(item['kind'] == 'NodeHealthCheck' for item in listed['items'])  # unstructured lists keep kind and apiVersion
    selected = api.list_cluster_custom_object(GROUP, VERSION, PLURAL, label_selector='fleet in (gpu),!missing')
    assert len(selected['items']) == 2
    assert api.list_cluster_custom_object(GROUP, VERSION, PLURAL, label_selector='fleet=cpu')['items'] == []
    assert api.list_cluster_custom_object(GROUP, VERSION, PLURAL, field_selector='metadata.name=nhc-workers')['items'][0]['metadata']['name'] == \
        'nhc-workers'
    code, status = api_error(api.get_cluster_custom_object, GROUP, VERSION, PLURAL, 'absent')
    assert code == 404 and status['message'] == 'nodehealthchecks.remediation.medik8s.io "absent" not found'
    code, status = api_error(api.create_cluster_custom_object, GROUP, VERSION, PLURAL, nhc())
    assert code == 409 and status['reason'] == 'AlreadyExists' and status['message'] == 'nodehealthchecks.remediation.medik8s.io "nhc-workers" already exists'
    api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, 'nhc-control-plane')
    assert [item['metadata']['name'] for item in api.list_cluster_custom_object(GROUP, VERSION, PLURAL)['items']] == ['nhc-workers']


def test_the_dynamic_client_finds_and_reads_nodehealthchecks(cluster, tmp_path):
    _url, api_client, _server = cluster
    objects(api_client).create_cluster_custom_object(GROUP, VERSION, PLURAL, nhc())
    dynamic = DynamicClient(api_client, cache_file=str(tmp_path / 'discovery.json'))
    resource = dynamic.resources.get(api_version='remediation.medik8s.io/v1alpha1', kind='NodeHealthCheck')
    assert resource.name == 'nodehealthchecks' and resource.namespaced is False and resource.short_names == ['nhc']
    assert resource.singular_name == 'nodehealthcheck'
    assert set(resource.verbs) == {'create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'}
    assert resource.subresources['status'].verbs == ['get', 'patch', 'update']
    assert dynamic.resources.get(api_version='remediation.medik8s.io/v1alpha1', short_names=['nhc']).kind == 'NodeHealthCheck'
    got = resource.get(name='nhc-workers')
    assert got.spec.pauseRequests == ['x', 'gpufleet-rollout'] and got.spec.selector.matchExpressions[0].operator == 'Exists'
    assert [item.metadata.name for item in resource.get(label_selector='fleet=gpu').items] == ['nhc-workers']
    patched = resource.patch(body=[{'op': 'add', 'path': '/spec/pauseRequests/-', 'value': 'y'}], name='nhc-workers',
                             content_type='application/json-patch+json')
    assert patched.spec.pauseRequests == ['x', 'gpufleet-rollout', 'y']


# ------------------------------------------------------------------------------------------------
# Patches
# ------------------------------------------------------------------------------------------------

def test_json_patch_with_test_operations(cluster):
    _url, api_client, _server = cluster
    api = objects(api_client)
    api.create_cluster_custom_object(GROUP, VERSION, PLURAL, nhc())
    patch = [{'op': 'test', 'path': '/spec/pauseRequests/0', 'value': 'x'}, {'op': 'remove', 'path': '/spec/pauseRequests/0'}]
    patched = api.patch_cluster_custom_object(GROUP, VERSION, PLURAL, 'nhc-workers', patch, _content_type='application/json-patch+json')
    assert patched['spec']['pauseRequests'] == ['gpufleet-rollout']
    # The same patch again: /spec/pauseRequests/0 is no longer "x", so the test fails and nothing changes.
    code, status = api_error(api.patch_cluster_custom_object, GROUP, VERSION, PLURAL, 'nhc-workers', patch,
                             _content_type='application/json-patch+json')
    assert code == 422 and status['reason'] == 'Invalid'
    assert api.get_cluster_custom_object(GROUP, VERSION, PLURAL, 'nhc-workers')['spec']['pauseRequests'] == ['gpufleet-rollout']


def test_merge_patch_applies_and_strategic_merge_patch_is_415(cluster, tmp_path):
    _url, api_client, _server = cluster
    api = objects(api_client)
    created = api.create_cluster_custom_object(GROUP, VERSION, PLURAL, nhc())
    patched = api.patch_cluster_custom_object(GROUP, VERSION, PLURAL, 'nhc-workers', {'spec': {'pauseRequests': None, 'minHealthy': 2}})
    assert 'pauseRequests' not in patched['spec'] and patched['spec']['minHealthy'] == 2
    assert patched['metadata']['generation'] == 2 and int(patched['metadata']['resourceVersion']) > int(created['metadata']['resourceVersion'])
    code, status = api_error(api.patch_cluster_custom_object, GROUP, VERSION, PLURAL, 'nhc-workers', {'spec': {'pauseRequests': ['z']}},
                             _content_type='application/strategic-merge-patch+json')
    assert code == 415 and status['reason'] == 'UnsupportedMediaType'
    assert status['message'] == ('the body of the request was in an unknown format - accepted media types include: application/json-patch+json, '
                                 'application/merge-patch+json, application/apply-patch+yaml, application/apply-patch+cbor')
    dynamic = DynamicClient(api_client, cache_file=str(tmp_path / 'discovery.json'))
    resource = dynamic.resources.get(api_version=GROUP + '/' + VERSION, kind='NodeHealthCheck')
    with pytest.raises(ApiException) as caught:
        resource.patch(body={'spec': {'pauseRequests': ['z']}}, name='nhc-workers', content_type='application/strategic-merge-patch+json')
    assert caught.value.status == 415
    assert 'pauseRequests' not in api.get_cluster_custom_object(GROUP, VERSION, PLURAL, 'nhc-workers')['spec']
    # Built-in kinds still take strategic merge patches.
    client.CoreV1Api(api_client).create_node({'metadata': {'name': 'gpu-01'}})
    node = client.CoreV1Api(api_client).patch_node('gpu-01', {'metadata': {'labels': {'a': 'b'}}}, _content_type='application/strategic-merge-patch+json')
    assert node.metadata.labels['a'] == 'b'


# ------------------------------------------------------------------------------------------------
# Validation, pruning, conflicts
# ------------------------------------------------------------------------------------------------

def test_a_wrong_type_is_422_with_the_field_path(cluster):
    _url, api_client, _server = cluster
    api = objects(api_client)
    code, status = api_error(api.create_cluster_custom_object, GROUP, VERSION, PLURAL, nhc(pauseRequests=[7]))
    assert code == 422 and status['reason'] == 'Invalid'
    assert status['message'] == ('NodeHealthCheck.remediation.medik8s.io "nhc-workers" is invalid: spec.pauseRequests[0]: Invalid value: '
                                 '"integer": spec.pauseRequests[0] in body must be of type string: "integer"')
    assert status['details'] == {'name': 'nhc-workers', 'group': 'remediation.medik8s.io', 'kind': 'NodeHealthCheck', 'causes': [
        {'reason': 'FieldValueTypeInvalid', 'field': 'spec.pauseRequests[0]',
         'message': 'Invalid value: "integer": spec.pauseRequests[0] in body must be of type string: "integer"'}]}
    api.create_cluster_custom_object(GROUP, VERSION, PLURAL, nhc())
    code, status = api_error(api.patch_cluster_custom_object, GROUP, VERSION, PLURAL, 'nhc-workers', {'spec': {
        'healthyDelay': 'soon', 'selector': {'matchExpressions': [{'key': 'node-role.kubernetes.io/worker'}]}, 'minHealthy': True}})
    assert code == 422
    assert sorted((cause['field'], cause['reason']) for cause in status['details']['causes']) == [
        ('spec.healthyDelay', 'FieldValueInvalid'), ('spec.minHealthy', 'FieldValueTypeInvalid'),
        ('spec.selector.matchExpressions[0].operator', 'FieldValueRequired')]
    assert 'spec.selector.matchExpressions[0].operator: Required value' in status['message']
    assert "spec.healthyDelay in body should match '^-?([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$'" in status['message']
    assert 'spec.minHealthy in body must be of type integer,string: "boolean"' in status['message']
    assert api.get_cluster_custom_object(GROUP, VERSION, PLURAL, 'nhc-workers')['metadata']['generation'] == 1
    code, status = api_error(api.create_cluster_custom_object, GROUP, VERSION, PLURAL, nhc('Not_A_Name'))
    assert code == 422 and status['details']['causes'][0]['field'] == 'metadata.name'


def test_unknown_fields_are_pruned_with_a_warning_or_refused_under_strict(cluster):
    url, api_client, _server = cluster
    body = nhc(bogus={'nested': 1})
    body['spec']['selector']['extra'] = 'x'
    body['surplus'] = True
    code, created, warnings = call(url, 'POST', NHC_PATH, body)
    assert code == 201 and 'bogus' not in created['spec'] and 'extra' not in created['spec']['selector'] and 'surplus' not in created
    assert sorted(warnings) == ['299 - "unknown field \\"spec.bogus\\""', '299 - "unknown field \\"spec.selector.extra\\""',
                                '299 - "unknown field \\"surplus\\""']
    stored = objects(api_client).get_cluster_custom_object(GROUP, VERSION, PLURAL, 'nhc-workers')
    assert 'bogus' not in stored['spec'] and stored['spec']['pauseRequests'] == ['x', 'gpufleet-rollout']
    code, status, _warnings = call(url, 'POST', NHC_PATH + '?fieldValidation=Strict', dict(nhc('strict'), surplus=1))
    assert code == 400 and status['message'] == 'strict decoding error: unknown field "surplus"'
    code, status, _warnings = call(url, 'GET', NHC_PATH + '/strict')
    assert code == 404
    code, patched, warnings = call(url, 'PATCH', NHC_PATH + '/nhc-workers', {'spec': {'unknownKnob': 3}}, 'application/merge-patch+json')
    assert code == 200 and 'unknownKnob' not in patched['spec'] and warnings == ['299 - "unknown field \\"spec.unknownKnob\\""']


def test_a_stale_resource_version_is_a_conflict(cluster):
    _url, api_client, _server = cluster
    api = objects(api_client)
    created = api.create_cluster_custom_object(GROUP, VERSION, PLURAL, nhc())
    stale = json.loads(json.dumps(created))
    created['spec']['pauseRequests'] = []
    updated = api.replace_cluster_custom_object(GROUP, VERSION, PLURAL, 'nhc-workers', created)
    assert updated['spec']['pauseRequests'] == [] and updated['metadata']['generation'] == 2
    stale['spec']['minHealthy'] = 1
    code, status = api_error(api.replace_cluster_custom_object, GROUP, VERSION, PLURAL, 'nhc-workers', stale)
    assert code == 409 and status['reason'] == 'Conflict'
    assert status['message'] == ('Operation cannot be fulfilled on nodehealthchecks.remediation.medik8s.io "nhc-workers": the object has been '
                                 'modified; please apply your changes to the latest version and try again')
    code, status = api_error(api.patch_cluster_custom_object, GROUP, VERSION, PLURAL, 'nhc-workers', {
        'metadata': {'resourceVersion': stale['metadata']['resourceVersion']}, 'spec': {'minHealthy': 1}})
    assert code == 409
    assert api.get_cluster_custom_object(GROUP, VERSION, PLURAL, 'nhc-workers')['spec']['minHealthy'] == '51%'


def test_the_status_subresource(cluster):
    _url, api_client, _server = cluster
    api = objects(api_client)
    api.create_cluster_custom_object(GROUP, VERSION, PLURAL, nhc())
    status = {'phase': 'Paused', 'reason': 'pause requested', 'observedNodes': 3, 'healthyNodes': 3,
              'conditions': [{'type': 'Disabled', 'status': 'False', 'reason': 'NodeHealthCheckEnabled', 'message': '',
                              'lastTransitionTime': '2026-11-27T10:00:00Z'}]}
    # Through /status: the status changes, the spec change is ignored, the generation stays.
    written = api.patch_cluster_custom_object_status(GROUP, VERSION, PLURAL, 'nhc-workers', {'status': status, 'spec': {'minHealthy': 1}})
    assert written['status'] == status and written['spec']['minHealthy'] == '51%' and written['metadata']['generation'] == 1
    assert api.get_cluster_custom_object_status(GROUP, VERSION, PLURAL, 'nhc-workers')['status']['phase'] == 'Paused'
    # Through the main resource: the status change is ignored, the spec change bumps the generation.
    written = api.patch_cluster_custom_object(GROUP, VERSION, PLURAL, 'nhc-workers', {'status': {'phase': 'Enabled'}, 'spec': {'minHealthy': 1}})
    assert written['status']['phase'] == 'Paused' and written['spec']['minHealthy'] == 1 and written['metadata']['generation'] == 2
    # A metadata change alone leaves the generation.
    written = api.patch_cluster_custom_object(GROUP, VERSION, PLURAL, 'nhc-workers', {'metadata': {'annotations': {'a': 'b'}}})
    assert written['metadata']['generation'] == 2 and written['metadata']['annotations'] == {'a': 'b'}
    # The status is validated too.
    code, error = api_error(api.patch_cluster_custom_object_status, GROUP, VERSION, PLURAL, 'nhc-workers', {'status': {
        'lastUpdateTime': 'yesterday', 'conditions': [dict(status['conditions'][0], status='Maybe')]}})
    assert code == 422 and sorted(cause['field'] for cause in error['details']['causes']) == ['status.conditions[0].status', 'status.lastUpdateTime']
    assert ('status.conditions[0].status: Unsupported value: "Maybe": supported values: "True", "False", "Unknown"' in error['message'])
    assert 'status.lastUpdateTime: Invalid value: "yesterday": status.lastUpdateTime in body must be of type date-time: "yesterday"' in error['message']


def test_a_crd_without_status_subresource_serves_no_status(cluster):
    url, _api_client, _server = cluster
    crd = fake_apiserver.Store({'crd_files': [NHC_FILE]}).items('customresourcedefinitions')[0]
    crd = {'apiVersion': crd['apiVersion'], 'kind': crd['kind'], 'metadata': {'name': 'widgets.example.gpufleet.io'}, 'spec': {
        'group': 'example.gpufleet.io', 'scope': 'Namespaced', 'names': {'plural': 'widgets', 'kind': 'Widget'},
        'versions': [{'name': 'v1', 'served': True, 'storage': True, 'schema': {'openAPIV3Schema': {'type': 'object', 'properties': {
            'spec': {'type': 'object', 'properties': {'size': {'type': 'integer', 'minimum': 1, 'maximum': 8}}},
            'status': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}}}}}]}}
    code, _crd, _warnings = call(url, 'POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', crd)
    assert code == 201
    path = '/apis/example.gpufleet.io/v1/namespaces/ml/widgets'
    code, status, _warnings = call(url, 'POST', path, {'metadata': {'name': 'w'}, 'spec': {'size': 2}})
    assert code == 404 and status['message'] == 'namespaces "ml" not found'
    code, created, _warnings = call(url, 'POST', '/apis/example.gpufleet.io/v1/namespaces/default/widgets',
                                    {'metadata': {'name': 'w'}, 'spec': {'size': 2}, 'status': {'anything': [1]}})
    assert code == 201 and created['status'] == {'anything': [1]} and created['metadata']['namespace'] == 'default'
    code, _status, _warnings = call(url, 'GET', '/apis/example.gpufleet.io/v1/namespaces/default/widgets/w/status')
    assert code == 404
    code, status, _warnings = call(url, 'PATCH', '/apis/example.gpufleet.io/v1/namespaces/default/widgets/w', {'spec': {'size': 9}},
                                   'application/merge-patch+json')
    assert code == 422 and status['details']['causes'] == [{'reason': 'FieldValueInvalid', 'field': 'spec.size',
                                                            'message': 'Invalid value: 9: spec.size in body should be less than or equal to 8'}]
    code, patched, _warnings = call(url, 'PATCH', '/apis/example.gpufleet.io/v1/namespaces/default/widgets/w', {'status': {'anything': 2}},
                                    'application/merge-patch+json')
    assert code == 200 and patched['status'] == {'anything': 2} and patched['metadata']['generation'] == 2
    code, listed, _warnings = call(url, 'GET', '/apis/example.gpufleet.io/v1/widgets')
    assert code == 200 and [item['metadata']['name'] for item in listed['items']] == ['w']


# ------------------------------------------------------------------------------------------------
# Discovery, tables, state
# ------------------------------------------------------------------------------------------------

def test_discovery_shows_the_group_while_the_crd_is_installed(cluster, tmp_path):
    url, api_client, _server = cluster
    objects(api_client).create_cluster_custom_object(GROUP, VERSION, PLURAL, nhc())
    _code, groups, _warnings = call(url, 'GET', '/apis')
    assert {'name': GROUP, 'versions': [{'groupVersion': GROUP + '/v1alpha1', 'version': 'v1alpha1'}],
            'preferredVersion': {'groupVersion': GROUP + '/v1alpha1', 'version': 'v1alpha1'}} in groups['groups']
    _code, aggregated, _warnings = call(url, 'GET', '/apis', accept=AGGREGATED)
    entry = next(item for item in aggregated['items'] if item['metadata'].get('name') == GROUP)
    assert entry['versions'][0]['version'] == 'v1alpha1' and entry['versions'][0]['resources'][0] == {
        'resource': 'nodehealthchecks', 'responseKind': {'group': GROUP, 'version': 'v1alpha1', 'kind': 'NodeHealthCheck'}, 'scope': 'Cluster',
        'singularResource': 'nodehealthcheck', 'verbs': ['delete', 'deletecollection', 'get', 'list', 'patch', 'create', 'update', 'watch'],
        'shortNames': ['nhc'], 'subresources': [{
            'subresource': 'status', 'responseKind': {'group': GROUP, 'version': 'v1alpha1', 'kind': 'NodeHealthCheck'},
            'verbs': ['get', 'patch', 'update']}]}
    _code, listed, _warnings = call(url, 'GET', '/apis/nvsentinel.dgxc.nvidia.com/v1')
    assert [(r['name'], r.get('categories')) for r in listed['resources']] == [('maintenancerequests', ['nvsentinel']), ('maintenancerequests/status', None)]
    code, _openapi, _warnings = call(url, 'GET', '/openapi/v3/apis/remediation.medik8s.io/v1alpha1')
    assert code == 200
    client.ApiextensionsV1Api(api_client).delete_custom_resource_definition(CRD_NAME)
    _code, groups, _warnings = call(url, 'GET', '/apis')
    assert GROUP not in [group['name'] for group in groups['groups']] and 'nvsentinel.dgxc.nvidia.com' in [g['name'] for g in groups['groups']]
    _code, aggregated, _warnings = call(url, 'GET', '/apis', accept=AGGREGATED)
    assert GROUP not in [item['metadata'].get('name') for item in aggregated['items']]
    code, _status, _warnings = call(url, 'GET', NHC_PATH)
    assert code == 404
    with pytest.raises(ResourceNotFoundError):
        DynamicClient(api_client, cache_file=str(tmp_path / 'after.json')).resources.get(api_version=GROUP + '/' + VERSION, kind='NodeHealthCheck')
    # Re-installing the CRD does not bring back the objects deleted with it.
    _code, _crd, _warnings = call(url, 'POST', '/_sim/objects', fake_apiserver.Store({'crd_files': [NHC_FILE]}).items('customresourcedefinitions'))
    code, listed, _warnings = call(url, 'GET', NHC_PATH)
    assert code == 200 and listed['items'] == []


def test_table_output_uses_the_printer_columns(cluster):
    url, _api_client, _server = cluster
    call(url, 'POST', NHC_PATH, nhc())
    _code, table, _warnings = call(url, 'GET', NHC_PATH, accept=TABLE)
    assert [column['name'] for column in table['columnDefinitions']] == ['Name', 'Age']
    assert table['rows'][0]['cells'][0] == 'nhc-workers' and table['rows'][0]['cells'][1].endswith('s')
    path = '/apis/nvsentinel.dgxc.nvidia.com/v1/maintenancerequests'
    code, created, _warnings = call(url, 'POST', path, {'metadata': {'name': 'mr-gpu-01'}, 'spec': {
        'startTime': '2026-12-01T00:00:00Z', 'healthEvent': {'nodeName': 'gpu-01', 'recommendedAction': 'RESTART_BM', 'isFatal': True}}})
    assert code == 201 and created['spec']['healthEvent']['recommendedAction'] == 'RESTART_BM'
    _code, table, _warnings = call(url, 'GET', path, accept=TABLE)
    assert [column['name'] for column in table['columnDefinitions']] == ['Name', 'Node', 'StartTime']
    assert table['rows'][0]['cells'] == ['mr-gpu-01', 'gpu-01', '2026-12-01T00:00:00Z']
    code, status, _warnings = call(url, 'POST', path, {'metadata': {'name': 'mr-bad'}, 'spec': {'healthEvent': {'recommendedAction': 3}}})
    assert code == 422 and status['details']['causes'][0]['field'] == 'spec.healthEvent.recommendedAction'
    assert status['details']['causes'][0]['message'].startswith('Unsupported value: 3: supported values: "0", "NONE", "2", "COMPONENT_RESET"')


def test_state_file_keys_and_control_endpoints(tmp_path):
    state = {'crd_files': [NHC_FILE], 'customresources': [dict(nhc(), status={'phase': 'Enabled'})]}
    server, _thread, url = fake_apiserver.start(state)
    try:
        code, got, _warnings = call(url, 'GET', NHC_PATH + '/nhc-workers')
        assert code == 200 and got['status'] == {'phase': 'Enabled'}  # as the cluster already has it
        code, _added, _warnings = call(url, 'POST', '/_sim/objects', [nhc('nhc-two')])
        assert code == 201
        _code, dumped, _warnings = call(url, 'GET', '/_sim/state')
        assert [crd['metadata']['name'] for crd in dumped['customresourcedefinitions']] == [CRD_NAME]
        assert [obj['metadata']['name'] for obj in dumped['customresources']] == ['nhc-two', 'nhc-workers']
        restarted = fake_apiserver.Store(dumped)
        assert restarted.get(CRD_NAME, '', 'nhc-workers')['status'] == {'phase': 'Enabled'}
        code, _state, _warnings = call(url, 'POST', '/_sim/reset', {})
        code, _status, _warnings = call(url, 'GET', NHC_PATH)
        assert code == 404
    finally:
        fake_apiserver.stop(server)
    with pytest.raises(fake_apiserver.ApiError):
        fake_apiserver.Store({'customresources': [nhc()]})


def test_watch_sees_custom_resources(cluster):
    url, _api_client, _server = cluster
    call(url, 'POST', NHC_PATH, nhc())
    request = urllib.request.Request(url + NHC_PATH + '?watch=1&timeoutSeconds=1', headers={'Accept': 'application/json'})
    with urllib.request.urlopen(request, timeout=10) as response:
        events = [json.loads(line) for line in response.read().decode('utf-8').splitlines() if line.strip()]
    assert [(event['type'], event['object']['metadata']['name'], event['object']['kind']) for event in events] == [
        ('ADDED', 'nhc-workers', 'NodeHealthCheck')]


# ------------------------------------------------------------------------------------------------
# The schema checks themselves
# ------------------------------------------------------------------------------------------------

def test_schema_checks():
    schema = {'type': 'object', 'required': ['name'], 'properties': {
        'name': {'type': 'string', 'maxLength': 3}, 'tags': {'type': 'array', 'maxItems': 1, 'minItems': 1, 'items': {'type': 'string'}},
        'labels': {'type': 'object', 'additionalProperties': {'type': 'string'}}, 'ratio': {'type': 'number', 'minimum': 0, 'exclusiveMinimum': True},
        'count': {'type': 'integer'}, 'free': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True},
        'maybe': {'type': 'string', 'nullable': True}}}
    assert custom_schema.validate({'name': 'abc', 'count': 2.0, 'ratio': 0.5, 'maybe': None}, schema) == []
    causes = custom_schema.validate({'tags': ['a', 'b'], 'labels': {'k': 1}, 'ratio': 0, 'count': 1.5, 'name': 'abcd'}, schema)
    assert sorted(causes) == sorted([
        ('FieldValueTooLong', 'name', 'Too long: may not be more than 3 bytes'),
        ('FieldValueTooMany', 'tags', 'Too many: 2: must have at most 1 item'),
        ('FieldValueTypeInvalid', 'labels.k', 'Invalid value: "integer": labels.k in body must be of type string: "integer"'),
        ('FieldValueInvalid', 'ratio', 'Invalid value: 0: ratio in body should be greater than 0'),
        ('FieldValueTypeInvalid', 'count', 'Invalid value: "number": count in body must be of type integer: "number"')])
    assert custom_schema.validate({'tags': []}, schema) == [
        ('FieldValueRequired', 'name', 'Required value'), ('FieldValueInvalid', 'tags', 'Invalid value: 0: tags in body should have at least 1 items')]
    unknown = []
    pruned = custom_schema.prune({'name': 'a', 'maybe': None, 'count': None, 'free': {'x': {'y': 1}}, 'other': 1, 'labels': {'k': 'v'}},
                                 schema, '', unknown)
    assert pruned == {'name': 'a', 'maybe': None, 'free': {'x': {'y': 1}}, 'labels': {'k': 'v'}} and unknown == ['other']
