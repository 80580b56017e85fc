# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""ConfigMaps and Leases on the fake Kubernetes API, as kube-apiserver answers them (over HTTP).

What the rollout ledger's Kubernetes backend relies on: resourceVersion preconditions (409 Conflict with the real Status),
409 AlreadyExists, the 1 MiB ConfigMap limit and key rules (pkg/apis/core/validation ValidateConfigMap), immutable
ConfigMaps, Lease validation (pkg/apis/coordination/validation: leaseDurationSeconds > 0, leaseTransitions >= 0) and
MicroTime written back in UTC with six digits.
"""

import base64
import json
import os
import sys
import urllib.error
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim', 'kube'))

import fake_apiserver  # noqa: E402  pylint: disable=wrong-import-position,import-error

CM = '/api/v1/namespaces/default/configmaps'
LEASES = '/apis/coordination.k8s.io/v1/namespaces/default/leases'


@pytest.fixture(scope='module')
def url():
    server, _thread, address = fake_apiserver.start({})
    yield address
    fake_apiserver.stop(server)


def call(url, method, path, body=None, content_type='application/json'):
    request = urllib.request.Request(url + path, method=method, data=None if body is None else json.dumps(body).encode('utf-8'),
                                     headers={'Content-Type': content_type, 'Accept': 'application/json'})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read().decode('utf-8'))
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read().decode('utf-8'))


def test_configmap_update_with_a_stale_resource_version_is_a_conflict(url):
    code, created = call(url, 'POST', CM, {'metadata': {'name': 'ledger'}, 'data': {'ledger.jsonl': 'a\n'}})
    assert code == 201 and created['kind'] == 'ConfigMap' and created['apiVersion'] == 'v1'
    stale = json.loads(json.dumps(created))
    created['data']['ledger.jsonl'] += 'b\n'
    code, updated = call(url, 'PUT', CM + '/ledger', created)
    assert code == 200 and int(updated['metadata']['resourceVersion']) > int(stale['metadata']['resourceVersion'])
    stale['data']['ledger.jsonl'] += 'c\n'
    code, status = call(url, 'PUT', CM + '/ledger', stale)
    assert code == 409 and status['reason'] == 'Conflict' and status['details'] == {'name': 'ledger', 'kind': 'configmaps'}
    assert status['message'] == ('Operation cannot be fulfilled on configmaps "ledger": the object has been modified; '
                                 'please apply your changes to the latest version and try again')
    # A merge patch carrying the old resourceVersion is refused the same way; without one it applies.
    code, _status = call(url, 'PATCH', CM + '/ledger', {'metadata': {'resourceVersion': stale['metadata']['resourceVersion']},
                                                        'data': {'x': 'y'}}, 'application/merge-patch+json')
    assert code == 409
    code, _status = call(url, 'GET', CM + '/ledger')
    assert _status['data'] == {'ledger.jsonl': 'a\nb\n'}
    code, status = call(url, 'POST', CM, {'metadata': {'name': 'ledger'}})
    assert code == 409 and status['reason'] == 'AlreadyExists' and status['message'] == 'configmaps "ledger" already exists'


def test_configmap_values_over_one_mebibyte_are_invalid(url):
    code, _created = call(url, 'POST', CM, {'metadata': {'name': 'full'}, 'data': {'a': 'x' * 524288, 'b': 'y' * 524288}})
    assert code == 201
    code, status = call(url, 'POST', CM, {'metadata': {'name': 'over'}, 'data': {'a': 'x' * 524288},
                                          'binaryData': {'b': base64.b64encode(b'y' * 524289).decode('ascii')}})
    assert code == 422 and status['reason'] == 'Invalid'
    assert status['message'] == 'ConfigMap "over" is invalid: []: Too long: may not be more than 1048576 bytes'
    assert status['details']['causes'] == [{'reason': 'FieldValueTooLong', 'message': 'Too long: may not be more than 1048576 bytes', 'field': '[]'}]


def test_configmap_keys_data_types_and_immutability(url):
    code, status = call(url, 'POST', CM, {'metadata': {'name': 'keys'}, 'data': {'state/json': '{}'}})
    assert code == 422 and status['details']['causes'][0]['field'] == 'data[state/json]'
    assert "a valid config key must consist of alphanumeric characters, '-', '_' or '.'" in status['message']
    code, status = call(url, 'POST', CM, {'metadata': {'name': 'both'}, 'data': {'k': 'v'}, 'binaryData': {'k': 'dg=='}})
    assert code == 422 and 'duplicate of key present in binaryData' in status['message']
    code, status = call(url, 'POST', CM, {'metadata': {'name': 'number'}, 'data': {'k': 1}})
    assert code == 400 and 'cannot unmarshal number into Go struct field ConfigMap.data of type string' in status['message']
    code, frozen = call(url, 'POST', CM, {'metadata': {'name': 'frozen'}, 'data': {'k': 'v'}, 'immutable': True})
    assert code == 201
    frozen['data']['k'] = 'w'
    code, status = call(url, 'PUT', CM + '/frozen', frozen)
    assert code == 422 and status['details']['causes'] == [{'reason': 'FieldValueForbidden', 'field': 'data',
                                                            'message': 'Forbidden: field is immutable when `immutable` is set'}]
    code, listed = call(url, 'GET', CM)
    assert listed['kind'] == 'ConfigMapList' and 'frozen' in [item['metadata']['name'] for item in listed['items']]


def test_lease_validation_times_and_conflicts(url):
    code, status = call(url, 'POST', LEASES, {'metadata': {'name': 'zero'}, 'spec': {'leaseDurationSeconds': 0}})
    assert code == 422
    assert status['message'] == 'Lease.coordination.k8s.io "zero" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0'
    code, status = call(url, 'POST', LEASES, {'metadata': {'name': 'back'}, 'spec': {'leaseTransitions': -1}})
    assert code == 422 and 'spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0' in status['message']
    code, status = call(url, 'POST', LEASES, {'metadata': {'name': 'when'}, 'spec': {'renewTime': 'yesterday'}})
    assert code == 400 and 'cannot be handled as a Lease: parsing time "yesterday"' in status['message']
    code, lease = call(url, 'POST', LEASES, {'metadata': {'name': 'fleet'}, 'spec': {
        'holderIdentity': 'run-1', 'leaseDurationSeconds': 60, 'renewTime': '2026-11-24T14:00:00.5+01:00', 'leaseTransitions': 0,
        'unknownField': 1}})
    assert code == 201 and lease['apiVersion'] == 'coordination.k8s.io/v1'
    assert lease['spec'] == {'holderIdentity': 'run-1', 'leaseDurationSeconds': 60, 'renewTime': '2026-11-24T13:00:00.500000Z',
                             'leaseTransitions': 0}
    stale = json.loads(json.dumps(lease))
    lease['spec']['holderIdentity'] = 'run-2'
    assert call(url, 'PUT', LEASES + '/fleet', lease)[0] == 200
    stale['spec']['holderIdentity'] = 'run-3'
    code, status = call(url, 'PUT', LEASES + '/fleet', stale)
    assert code == 409 and status['message'].startswith('Operation cannot be fulfilled on leases.coordination.k8s.io "fleet"')
    assert call(url, 'GET', LEASES + '/fleet')[1]['spec']['holderIdentity'] == 'run-2'
