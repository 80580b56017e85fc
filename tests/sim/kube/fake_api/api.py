# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The REST API: routing, get / list / watch / create / update / patch / delete, and the /_sim control endpoints."""

import copy
import json
import time
from urllib.parse import parse_qs, unquote, urlsplit

import normalise  # pylint: disable=import-error

from .common import (ApiError, BY_PATH, GROUPS, KIND_TO_STORAGE, KUBE_VERSION, RESOURCES, STATE_KEYS, bad_request, details_for, dig, invalid,
                     method_not_allowed, namespace_not_found, not_found, path_not_found, single)
from .custom import check_fields, check_patch_type, to_table
from .discovery import (AGGREGATED_TYPE, aggregated, api_group, group_list, openapi_v3_document, openapi_v3_root, resource_list, wants_aggregated,
                        wants_table)
from .events import event_from_v1, event_to_v1, validate_events_v1
from .patch import PATCH_TYPES, json_merge, strategic_merge
from .selectors import fields_match, labels_match, parse_field_selector, parse_label_selector


class Response:
    def __init__(self, code, body, content_type='application/json', headers=None, stream=None):
        self.code = code
        self.body = body
        self.content_type = content_type
        self.headers = headers or {}
        self.stream = stream


class Api:
    """Routes requests to the store; returns Response objects.  HTTP plumbing lives in Handler."""

    def __init__(self, store, address='127.0.0.1:0'):
        self.store = store
        self.address = address

    def handle(self, method, target, headers, body):
        parts = urlsplit(target)
        path = unquote(parts.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        try:
            if path.startswith('/_sim/') or path == '/_sim':
                return self.control(method, path, query, body)
            return self.route(method, path, query, headers, body)
        except ApiError as error:
            return Response(error.code, error.status(), headers=error.headers)

    # ---------------------------------------------------------------- routing

    def groups(self):
        """(group, version) served, in priority order: the built-ins', then the installed CRDs'."""
        return GROUPS + self.store.custom_groups()

    def resources(self):
        return RESOURCES + self.store.served_custom()

    def route(self, method, path, query, headers, body):
        accept = headers.get('Accept', '')
        if path in ('/healthz', '/livez', '/readyz'):
            return Response(200, 'ok', 'text/plain; charset=utf-8')
        if path == '/version':
            return Response(200, dict(KUBE_VERSION))
        if path == '/openapi/v3':
            return Response(200, openapi_v3_root(self.groups()))
        if path.startswith('/openapi/v3/'):
            parts = path[len('/openapi/v3/'):].strip('/').split('/')
            if parts == ['api', 'v1']:
                return Response(200, openapi_v3_document('', 'v1'))
            if len(parts) == 3 and parts[0] == 'apis' and (parts[1], parts[2]) in self.groups():
                return Response(200, openapi_v3_document(parts[1], parts[2], self.resources()))
            return Response(404, '404 page not found\n', 'text/plain; charset=utf-8')
        if path in ('/api', '/api/'):
            if wants_aggregated(accept):
                return Response(200, aggregated(True), AGGREGATED_TYPE)
            return Response(200, {'kind': 'APIVersions', 'versions': ['v1'],
                                  'serverAddressByClientCIDRs': [{'clientCIDR': '0.0.0.0/0', 'serverAddress': self.address}]})
        if path in ('/apis', '/apis/'):
            if wants_aggregated(accept):
                return Response(200, aggregated(False, self.groups(), self.resources()), AGGREGATED_TYPE)
            return Response(200, group_list(self.groups()))
        segments = [segment for segment in path.split('/') if segment]
        if not segments or segments[0] not in ('api', 'apis'):
            return Response(404, '404 page not found\n', 'text/plain; charset=utf-8')
        if segments[0] == 'api':
            if len(segments) < 2 or segments[1] != 'v1':
                raise path_not_found()
            group, version, rest = '', 'v1', segments[2:]
        else:
            groups = self.groups()
            if len(segments) == 2 and any(g == segments[1] for g, _v in groups):
                return Response(200, api_group(segments[1], groups))
            if len(segments) < 3 or (segments[1], segments[2]) not in groups:
                raise path_not_found()
            group, version, rest = segments[1], segments[2], segments[3:]
        if not rest:
            if method != 'GET':
                raise method_not_allowed()
            return Response(200, resource_list(group, version, self.resources()))
        namespace = None
        if rest[0] == 'namespaces' and len(rest) >= 3 and getattr(self.store.resource_at(group, version, rest[2], BY_PATH), 'namespaced', False):
            namespace, rest = rest[1], rest[2:]
        resource = self.store.resource_at(group, version, rest[0], BY_PATH)
        if resource is None or len(rest) > 3:
            raise path_not_found()
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        if subresource is not None and subresource not in resource.subresources:
            raise path_not_found()
        if namespace is not None and self.store.get('namespaces', '', namespace) is None and method in ('POST', 'PUT', 'PATCH'):
            raise namespace_not_found(namespace)
        return self.serve(method, resource, namespace, name, subresource, query, headers, body)

    def serve(self, method, resource, namespace, name, subresource, query, headers, body):
        store = self.store
        accept = headers.get('Accept', '')
        table = wants_table(accept)
        dry_run = bool(query.get('dryRun'))
        with store.lock:
            if method == 'GET' and name is None:
                if single(query, 'watch') in ('1', 'true', 'True'):
                    return self.watch(resource, namespace, query, table)
                return self.list(resource, namespace, query, table)
            if method == 'GET':
                obj = self.find(resource, namespace, name)
                if subresource not in (None, 'status'):
                    raise method_not_allowed()
                if table:
                    return Response(200, to_table(resource, [obj], single(query, 'includeObject', 'Metadata'), store.now(),
                                                  {'resourceVersion': obj['metadata']['resourceVersion']}))
                return Response(200, obj)
            if method == 'POST':
                document = self.decode(body, headers)
                if subresource == 'eviction':
                    code, status = store.evict(namespace or 'default', name, document, dry_run)
                    return Response(code, status)
                if name is not None:
                    raise method_not_allowed()
                return self.create(resource, namespace, document, dry_run, query)
            if method == 'PUT':
                if name is None or subresource == 'eviction':
                    raise method_not_allowed()
                document, warnings = check_fields(resource, self.decode(body, headers), query)
                old = self.find(resource, namespace, name, raw=True)
                if resource.group == 'events.k8s.io':
                    validate_events_v1(resource, document)
                    document = event_from_v1(document)
                new = store.update(resource, old, document, subresource, dry_run)
                return Response(200, self.present(resource, new), headers={'Warning': warnings})
            if method == 'PATCH':
                if name is None or subresource == 'eviction':
                    raise method_not_allowed()
                return self.patch(resource, namespace, name, subresource, headers, body, dry_run, query)
            if method == 'DELETE':
                if name is None:
                    return self.delete_collection(resource, namespace, query, body, headers, dry_run)
                if subresource is not None:
                    raise method_not_allowed()
                return self.delete(resource, namespace, name, query, body, headers, dry_run)
        raise method_not_allowed()

    # ---------------------------------------------------------------- helpers

    @staticmethod
    def decode(body, headers):
        content_type = (headers.get('Content-Type') or 'application/json').split(';')[0].strip().lower()
        if content_type not in ('application/json', 'application/yaml', '') and not content_type.endswith('+json'):
            raise ApiError(415, 'UnsupportedMediaType', 'the body of the request was in an unknown format - accepted media types include: '
                           'application/json, application/yaml, application/vnd.kubernetes.protobuf, application/cbor', {})
        try:
            # Numbers keep their text: kube-apiserver parses a quantity written as 1e3 from it.
            return json.loads(body.decode('utf-8') or 'null', parse_float=normalise.JsonNumber) if body else None
        except ValueError as error:
            raise bad_request('the object provided is unrecognized (must be of type ...): couldn\'t get version/kind; json parse error: %s' % error)

    def find(self, resource, namespace, name, raw=False):
        obj = self.store.get(resource.storage, namespace if resource.namespaced else '', name)
        if obj is None:
            raise not_found(resource, name)
        if raw:
            return obj
        return self.present(resource, self.store.with_status(resource.storage, obj))

    @staticmethod
    def present(resource, obj):
        """The object as this resource's group/version shows it."""
        if resource.group == 'events.k8s.io':
            return event_to_v1(obj)
        if getattr(resource, 'custom', False) and obj.get('apiVersion') != resource.api_version:
            return dict(obj, apiVersion=resource.api_version)  # conversion strategy None: only the apiVersion changes
        return obj

    def list(self, resource, namespace, query, table):
        store = self.store
        labels = parse_label_selector(single(query, 'labelSelector', ''))
        fields = parse_field_selector(single(query, 'fieldSelector', ''))
        found = []
        for obj in store.items(resource.storage, namespace if resource.namespaced else None):
            obj = store.with_status(resource.storage, obj)
            if labels_match(labels, dig(obj, 'metadata', 'labels')) and fields_match(resource, fields, obj):
                found.append(self.present(resource, obj))
        meta = {'resourceVersion': str(store.revision)}
        if table:
            return Response(200, to_table(resource, found, single(query, 'includeObject', 'Metadata'), store.now(), meta))
        items = []
        for obj in found:
            item = copy.deepcopy(obj)
            if not getattr(resource, 'custom', False):  # unstructured lists keep them
                item.pop('kind', None)
                item.pop('apiVersion', None)
            items.append(item)
        return Response(200, {'kind': resource.list_kind, 'apiVersion': resource.api_version, 'metadata': meta, 'items': items})

    def create(self, resource, namespace, document, dry_run, query):
        if not isinstance(document, dict):
            raise bad_request('the object provided is unrecognized')
        document, warnings = check_fields(resource, document, query)
        if document.get('kind') not in (None, '', resource.kind) or document.get('apiVersion') not in (None, '', resource.api_version):
            raise bad_request('the API version in the data (%s) does not match the expected API version (%s)'
                              % (document.get('apiVersion'), resource.api_version))
        meta = document.setdefault('metadata', {})
        if resource.namespaced:
            if meta.get('namespace') and meta['namespace'] != namespace:
                raise bad_request('the namespace of the provided object does not match the namespace sent on the request')
            meta['namespace'] = namespace or 'default'
        if resource.group == 'events.k8s.io':
            validate_events_v1(resource, document)
            document = event_from_v1(document)
        for key in ('uid', 'resourceVersion', 'creationTimestamp', 'deletionTimestamp', 'deletionGracePeriodSeconds', 'generation'):
            meta = document['metadata']
            if key in ('resourceVersion',) and meta.get(key):
                raise bad_request('resourceVersion should not be set on objects to be created')
            meta.pop(key, None)
        custom = getattr(resource, 'custom', False)
        if resource.storage in ('pods', 'daemonsets', 'replicasets', 'statefulsets', 'poddisruptionbudgets') or (custom and 'status' in resource.subresources):
            document.pop('status', None)  # PrepareForCreate resets the status (nodes register with theirs)
        if custom:
            document['apiVersion'] = resource.api_version  # the version whose schema validates it
        obj = self.store.create(resource.storage, document, admit=True, dry_run=dry_run)
        return Response(201, self.present(resource, obj), headers={'Warning': warnings})

    def patch(self, resource, namespace, name, subresource, headers, body, dry_run, query):
        content_type = (headers.get('Content-Type') or '').split(';')[0].strip().lower()
        check_patch_type(resource, content_type)
        function = PATCH_TYPES.get(content_type)
        if function is None:
            raise ApiError(415, 'UnsupportedMediaType', 'the body of the request was in an unknown format - accepted media types include: '
                           'application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, '
                           'application/strategic-merge-patch+json, application/apply-patch+cbor', {})
        try:
            patch = json.loads(body.decode('utf-8')) if body else None
        except ValueError as error:
            raise bad_request('error decoding patch: %s' % error)
        if patch is None:
            raise bad_request('the server rejected our request due to an error in our request')
        old = self.find(resource, namespace, name, raw=True)
        current = self.present(resource, old)
        if function is strategic_merge and resource.group == 'events.k8s.io':
            function = json_merge
        patched = function(current, patch)
        if not isinstance(patched, dict):
            raise bad_request('the server rejected our request due to an error in our request')
        if patched.get('kind') not in (None, current.get('kind')) or patched.get('apiVersion') not in (None, current.get('apiVersion')):
            raise bad_request('the API version in the data (%s) does not match the expected API version (%s)'
                              % (patched.get('apiVersion'), resource.api_version))
        patched, warnings = check_fields(resource, patched, query)
        if resource.group == 'events.k8s.io':
            patched = event_from_v1(patched)
        new = self.store.update(resource, old, patched, subresource, dry_run)
        return Response(200, self.present(resource, new), headers={'Warning': warnings})

    @staticmethod
    def delete_options(query, body, headers):
        options = {}
        if body:
            try:
                options = json.loads(body.decode('utf-8')) or {}
            except ValueError:
                raise bad_request('invalid DeleteOptions')
        grace = options.get('gracePeriodSeconds')
        if single(query, 'gracePeriodSeconds') is not None:
            try:
                grace = int(single(query, 'gracePeriodSeconds'))
            except ValueError:
                raise bad_request('invalid gracePeriodSeconds')
        if grace is not None and grace < 0:
            grace = 1
        return grace, options.get('preconditions'), bool(options.get('dryRun'))

    def delete(self, resource, namespace, name, query, body, headers, dry_run):
        grace, preconditions, body_dry_run = self.delete_options(query, body, headers)
        obj = self.find(resource, namespace, name, raw=True)
        result, deleted = self.store.delete(resource, obj, grace, preconditions, dry_run or body_dry_run)
        if resource.storage == 'pods' or not deleted:
            return Response(200, self.present(resource, result))
        details = details_for(resource, name, uid=result['metadata'].get('uid'))
        return Response(200, {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Success', 'details': details})

    def delete_collection(self, resource, namespace, query, body, headers, dry_run):
        grace, _preconditions, body_dry_run = self.delete_options(query, body, headers)
        labels = parse_label_selector(single(query, 'labelSelector', ''))
        fields = parse_field_selector(single(query, 'fieldSelector', ''))
        deleted = []
        for obj in self.store.items(resource.storage, namespace if resource.namespaced else None):
            if labels_match(labels, dig(obj, 'metadata', 'labels')) and fields_match(resource, fields, obj):
                result, _gone = self.store.delete(resource, obj, grace, None, dry_run or body_dry_run)
                item = copy.deepcopy(self.present(resource, result))
                item.pop('kind', None)
                item.pop('apiVersion', None)
                deleted.append(item)
        return Response(200, {'kind': resource.list_kind, 'apiVersion': resource.api_version, 'metadata': {'resourceVersion': str(self.store.revision)},
                              'items': deleted})

    # ---------------------------------------------------------------- watch

    def watch(self, resource, namespace, query, table):
        store = self.store
        labels = parse_label_selector(single(query, 'labelSelector', ''))
        fields = parse_field_selector(single(query, 'fieldSelector', ''))
        try:
            timeout = min(float(single(query, 'timeoutSeconds', 1800)), 3600)
        except ValueError:
            timeout = 1800
        start = single(query, 'resourceVersion', '')
        send_initial = single(query, 'sendInitialEvents') == 'true'
        if send_initial and single(query, 'resourceVersionMatch') != 'NotOlderThan':
            raise invalid(resource, '', [('FieldValueForbidden', 'resourceVersionMatch',
                                          'Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan')])
        initial = []
        if start in ('', '0') or send_initial:
            for obj in store.items(resource.storage, namespace if resource.namespaced else None):
                if labels_match(labels, dig(obj, 'metadata', 'labels')) and fields_match(resource, fields, obj):
                    initial.append(('ADDED', self.present(resource, obj)))
            since_revision = store.revision
            if send_initial:
                # The WatchList protocol: the initial state ends with a bookmark carrying this annotation.
                initial.append(('BOOKMARK', {'kind': resource.kind, 'apiVersion': resource.api_version, 'metadata': {
                    'resourceVersion': str(since_revision), 'creationTimestamp': None,
                    'annotations': {'k8s.io/initial-events-end': 'true'}}}))
        else:
            try:
                since_revision = int(start)
            except ValueError:
                raise bad_request('invalid resource version: %s' % start)
            if store.history and since_revision < store.history[0][0] - 1 and since_revision < store.revision:
                raise ApiError(410, 'Expired', 'too old resource version: %s (%d)' % (start, store.history[0][0]), {})

        def matches(obj):
            if obj is None:
                return False
            if namespace is not None and resource.namespaced and dig(obj, 'metadata', 'namespace') != namespace:
                return False
            return labels_match(labels, dig(obj, 'metadata', 'labels')) and fields_match(resource, fields, obj)

        def frame(kind, obj):
            if kind == 'BOOKMARK':
                return (json.dumps({'type': kind, 'object': obj}, separators=(',', ':')) + '\n').encode('utf-8')
            obj = self.present(resource, obj)
            if table:
                obj = to_table(resource, [obj], single(query, 'includeObject', 'Metadata'), store.now(),
                               {'resourceVersion': obj['metadata'].get('resourceVersion')})
            return (json.dumps({'type': kind, 'object': obj}, separators=(',', ':')) + '\n').encode('utf-8')

        def stream(write, alive):
            deadline = time.time() + timeout
            position = since_revision
            for kind, obj in initial:
                write(frame(kind, obj))
            while time.time() < deadline and alive():
                frames = []
                with store.lock:
                    for revision, kind, storage, old, new in store.history:
                        if revision <= position or storage != resource.storage:
                            continue
                        was = matches(old) if kind != 'ADDED' else False
                        matching = matches(new)
                        if kind == 'DELETED':
                            if was:
                                frames.append(frame('DELETED', new))
                        elif matching and was:
                            frames.append(frame('MODIFIED', new))
                        elif matching:
                            frames.append(frame('ADDED', new))
                        elif was:
                            frames.append(frame('DELETED', new))
                    position = store.revision
                    if not frames:
                        store.changed.wait(min(1.0, max(deadline - time.time(), 0.01)))
                for data in frames:
                    write(data)
        return Response(200, None, stream=stream)

    # ---------------------------------------------------------------- control API

    def control(self, method, path, query, body):
        store = self.store
        segments = [segment for segment in path.split('/') if segment][1:]
        document = None
        if body:
            try:
                document = json.loads(body.decode('utf-8'))
            except ValueError:
                raise bad_request('body is not JSON')
        with store.lock:
            if method == 'GET' and segments == ['state']:
                return Response(200, store.dump())
            if method == 'GET' and segments == ['requests']:
                return Response(200, {'requests': list(store.requests)})
            if method == 'DELETE' and segments == ['requests']:
                del store.requests[:]
                return Response(200, {'requests': []})
            if method == 'POST' and segments == ['tick']:
                store.tick()
                return Response(200, {'resourceVersion': str(store.revision)})
            if method == 'POST' and segments == ['reset']:
                for _key, storage in STATE_KEYS:
                    for obj in store.items(storage):
                        if storage != 'namespaces' or obj['metadata']['name'] not in ('default', 'kube-system', 'kube-public', 'kube-node-lease'):
                            store.remove(storage, obj)
                store.load(document or {})
                return Response(200, store.dump())
            if method == 'POST' and len(segments) == 1 and segments[0] in dict(STATE_KEYS):
                objects = document if isinstance(document, list) else [document]
                added = [store.add(dict(STATE_KEYS)[segments[0]], copy.deepcopy(obj)) for obj in objects]
                return Response(201, {'items': added})
            if method == 'POST' and segments == ['objects']:
                added = []
                for obj in (document if isinstance(document, list) else [document]):
                    storage = KIND_TO_STORAGE.get((obj or {}).get('kind')) or store.custom_storage_of(obj or {})
                    if storage is None:
                        raise bad_request('unknown kind %r' % (obj or {}).get('kind'))
                    added.append(store.add(storage, copy.deepcopy(obj)))
                return Response(201, {'items': added})
            if method == 'POST' and len(segments) == 4 and segments[0] == 'pods':
                pod = store.get('pods', segments[1], segments[2])
                if pod is None:
                    raise not_found(BY_PATH[('', 'v1', 'pods')], segments[2])
                document = document or {}
                if segments[3] == 'finish':
                    return Response(200, store.finish_pod(pod, document.get('phase', 'Succeeded'), document.get('exitCode'), document.get('reason')))
                if segments[3] == 'ready':
                    return Response(200, store.set_pod_ready(pod, document.get('ready', True)))
                if segments[3] == 'delete':
                    result, _gone = store.delete(BY_PATH[('', 'v1', 'pods')], pod, document.get('gracePeriodSeconds'))
                    return Response(200, result)
            if method == 'POST' and len(segments) == 3 and segments[0] == 'nodes' and segments[2] == 'ready':
                node = store.get('nodes', '', segments[1])
                if node is None:
                    raise not_found(BY_PATH[('', 'v1', 'nodes')], segments[1])
                state = (document or {}).get('status', 'True' if (document or {}).get('ready', True) else 'False')
                if state not in ('True', 'False', 'Unknown'):
                    raise bad_request('status must be True, False or Unknown')
                return Response(200, store.set_node_ready(node, state, (document or {}).get('reason'), (document or {}).get('message')))
        raise ApiError(404, 'NotFound', 'no such control endpoint: %s %s' % (method, path), {})
