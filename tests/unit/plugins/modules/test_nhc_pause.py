# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nhc_pause against a fake Kubernetes client: the JSON patch it sends, a read again after another party's change, a
cluster without the API, and an API error in one line."""

import copy
import json

from ansible_collections.gpufleet.lifecycle.plugins.modules import nhc_pause


class ApiError(nhc_pause.ApiException):
    """The client's ApiException as the API answers it (status, reason, body)."""

    def __init__(self, status, reason='', body=''):  # pylint: disable=super-init-not-called
        Exception.__init__(self, '(%s)\nReason: %s\nHTTP response headers: {...}\nHTTP response body: %s' % (status, reason, body))
        self.status, self.reason, self.body = status, reason, body


class Node:
    def __init__(self, labels):
        self.metadata = type('Metadata', (), {'labels': labels})()


class Core:
    def read_node(self, name, _request_timeout=None):
        return Node({'node-role.kubernetes.io/worker': ''})


class Custom:
    """NodeHealthChecks in memory; ``interfere``: another party's request added before the first patch lands."""

    def __init__(self, objects, served=True, interfere=False):
        self.objects, self.served, self.interfere, self.patches = objects, served, interfere, []

    def list_cluster_custom_object(self, group, version, plural, _request_timeout=None):
        if not self.served:
            raise ApiError(404, 'Not Found')
        return {'items': copy.deepcopy(self.objects)}

    def patch_cluster_custom_object(self, group, version, plural, name, body, _request_timeout=None, _content_type=None):
        assert _content_type == 'application/json-patch+json'
        self.patches.append(body)
        target = [item for item in self.objects if item['metadata']['name'] == name][0]
        if self.interfere:
            self.interfere = False
            target['spec'].setdefault('pauseRequests', []).append('upgrade by @admin')
            target['metadata']['resourceVersion'] = str(int(target['metadata']['resourceVersion']) + 1)
        if body[0]['value'] != target['metadata']['resourceVersion']:
            raise ApiError(422, 'Unprocessable Entity', json.dumps({'message': 'the test operation failed'}))
        for operation in body[1:]:
            if operation['path'] == '/spec/pauseRequests':
                target['spec']['pauseRequests'] = list(operation['value'])
            elif operation['op'] == 'add':
                target['spec']['pauseRequests'].append(operation['value'])
            else:
                del target['spec']['pauseRequests'][int(operation['path'].rsplit('/', 1)[1])]
        target['metadata']['resourceVersion'] = str(int(target['metadata']['resourceVersion']) + 1)
        return target


class Module:
    def __init__(self, **params):
        self.params = dict(dict(node='gpu-01', state='present', run='r1', timeout=60), **params)
        self.check_mode = False


def nhc(name='workers'):
    return {'metadata': {'name': name, 'resourceVersion': '5'},
            'spec': {'selector': {'matchExpressions': [{'key': 'node-role.kubernetes.io/worker', 'operator': 'Exists'}]}}}


def test_a_change_meanwhile_is_read_again_and_kept():
    custom = Custom([nhc()], interfere=True)
    result = nhc_pause.run(Module(), custom, Core())
    assert result['changed'] is True and result['paused'] == ['workers'] and len(custom.patches) == 2
    assert custom.objects[0]['spec']['pauseRequests'] == ['upgrade by @admin', 'gpufleet.lifecycle: gpu-01 in flight (run r1)']
    again = nhc_pause.run(Module(state='absent'), custom, Core())
    assert again['released'] == ['workers'] and custom.objects[0]['spec']['pauseRequests'] == ['upgrade by @admin']


def test_no_nodehealthcheck_api_changes_nothing():
    assert nhc_pause.run(Module(), Custom([], served=False), Core()) == dict(changed=False, api_found=False, paused=[], released=[], selecting=[])


def test_an_api_error_is_one_line_without_headers():
    text = nhc_pause.failure_text(ApiError(403, 'Forbidden', json.dumps({'message': 'nodehealthchecks is forbidden: User "gpufleet"'})))
    assert text == '403 Forbidden: nodehealthchecks is forbidden: User "gpufleet"'


def test_a_client_without_content_type_gets_a_list_body():
    calls = []

    def old_client(name, body, _request_timeout=None):
        calls.append(body)
    nhc_pause.json_patch(old_client, 'gpu-01', [{'op': 'test'}], _request_timeout=5)
    assert calls == [[{'op': 'test'}]]
