# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Discovery documents: resource lists, API groups, aggregated discovery (apidiscovery.k8s.io/v2), OpenAPI v3.

Each takes the resources (``resources``) and the (group, version) pairs in priority order (``groups``) to describe:
the built-ins' by default; the API passes the store's, which add what the installed CustomResourceDefinitions serve.
"""

import uuid

from .common import GROUPS, KUBE_VERSION, RESOURCES


def resource_list(group, version, resources=None):
    entries = []
    for resource in RESOURCES if resources is None else resources:
        if resource.group != group or resource.version != version:
            continue
        entry = {'name': resource.plural, 'singularName': resource.singular, 'namespaced': resource.namespaced, 'kind': resource.kind,
                 'verbs': resource.verbs}
        if resource.short_names:
            entry['shortNames'] = resource.short_names
        if resource.categories:
            entry['categories'] = resource.categories
        entries.append(entry)
        for name, (sub_group, sub_version, sub_kind, verbs) in sorted(resource.subresources.items()):
            entry = {'name': resource.plural + '/' + name, 'singularName': '', 'namespaced': resource.namespaced}
            if (sub_group, sub_version) != (group, version):
                entry['group'] = sub_group
                entry['version'] = sub_version
            entry['kind'] = sub_kind
            entry['verbs'] = verbs
            entries.append(entry)
    return {'kind': 'APIResourceList', 'apiVersion': 'v1', 'groupVersion': group + '/' + version if group else version, 'resources': entries}


def api_group(group, groups=None):
    versions = [{'groupVersion': group + '/' + version, 'version': version} for name, version in groups or GROUPS if name == group]
    return {'kind': 'APIGroup', 'apiVersion': 'v1', 'name': group, 'versions': versions, 'preferredVersion': versions[0]}


def group_list(groups=None):
    groups = groups or GROUPS
    names = []
    for name, _version in groups:
        if name not in names:
            names.append(name)
    entries = [api_group(name, groups) for name in names]
    for entry in entries:
        entry.pop('kind')
        entry.pop('apiVersion')
    return {'kind': 'APIGroupList', 'apiVersion': 'v1', 'groups': entries}


def aggregated(legacy, groups=None, all_resources=None):
    """apidiscovery.k8s.io/v2 APIGroupDiscoveryList for /api (legacy) or /apis."""
    items = []
    groups = [('', 'v1')] if legacy else groups or GROUPS
    all_resources = RESOURCES if all_resources is None else all_resources
    names = []
    for name, _version in groups:
        if name not in names:
            names.append(name)
    for name in names:
        versions = []
        for group, version in groups:
            if group != name:
                continue
            resources = []
            for resource in all_resources:
                if resource.group != group or resource.version != version:
                    continue
                entry = {'resource': resource.plural, 'responseKind': {'group': group, 'version': version, 'kind': resource.kind},
                         'scope': 'Namespaced' if resource.namespaced else 'Cluster', 'singularResource': resource.singular, 'verbs': resource.verbs}
                if resource.short_names:
                    entry['shortNames'] = resource.short_names
                if resource.categories:
                    entry['categories'] = resource.categories
                subresources = []
                for sub, (sub_group, sub_version, sub_kind, verbs) in sorted(resource.subresources.items()):
                    subresources.append({'subresource': sub, 'responseKind': {'group': sub_group, 'version': sub_version, 'kind': sub_kind},
                                         'verbs': verbs})
                if subresources:
                    entry['subresources'] = subresources
                resources.append(entry)
            versions.append({'version': version, 'resources': resources, 'freshness': 'Current'})
        meta = {'creationTimestamp': None}
        if name:
            meta['name'] = name
        items.append({'metadata': meta, 'versions': versions})
    return {'kind': 'APIGroupDiscoveryList', 'apiVersion': 'apidiscovery.k8s.io/v2', 'metadata': {}, 'items': items}


def openapi_v3_document(group, version, resources=None):
    """A minimal OpenAPI v3 document for one group/version: the operations and their query parameters, no schemas.

    Enough for kubectl create/apply to see that the server validates fields itself (fieldValidation).
    """
    parameters = [{'name': name, 'in': 'query', 'schema': {'type': 'string', 'uniqueItems': True}}
                  for name in ('dryRun', 'fieldManager', 'fieldValidation', 'pretty')]
    paths = {}
    prefix = '/apis/%s/%s' % (group, version) if group else '/api/v1'
    for resource in RESOURCES if resources is None else resources:
        if resource.group != group or resource.version != version:
            continue
        gvk = {'group': group, 'version': version, 'kind': resource.kind}
        base = prefix + ('/namespaces/{namespace}/' if resource.namespaced else '/') + resource.plural
        operations = {}
        for method, action in (('get', 'list'), ('post', 'post')):
            operations[method] = {'operationId': method + resource.kind, 'parameters': parameters, 'x-kubernetes-action': action,
                                  'x-kubernetes-group-version-kind': gvk, 'responses': {}}
        paths[base] = operations
        operations = {}
        for method, action in (('get', 'get'), ('put', 'put'), ('patch', 'patch'), ('delete', 'delete')):
            operations[method] = {'operationId': method + resource.kind, 'parameters': parameters, 'x-kubernetes-action': action,
                                  'x-kubernetes-group-version-kind': gvk, 'responses': {}}
        paths[base + '/{name}'] = operations
    return {'openapi': '3.0.0', 'info': {'title': 'Kubernetes', 'version': KUBE_VERSION['gitVersion']}, 'paths': paths,
            'components': {'schemas': {}}}


def openapi_v3_root(groups=None):
    paths = {'api/v1': {'serverRelativeURL': '/openapi/v3/api/v1?hash=%s' % uuid.uuid5(uuid.NAMESPACE_URL, 'api/v1').hex.upper()}}
    for group, version in groups or GROUPS:
        key = 'apis/%s/%s' % (group, version)
        paths[key] = {'serverRelativeURL': '/openapi/v3/%s?hash=%s' % (key, uuid.uuid5(uuid.NAMESPACE_URL, key).hex.upper())}
    return {'paths': paths}


AGGREGATED_TYPE = 'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList'


def wants_aggregated(accept):
    for entry in (accept or '').split(','):
        params = dict(part.strip().split('=', 1) for part in entry.split(';')[1:] if '=' in part)
        if params.get('g') == 'apidiscovery.k8s.io' and params.get('v') == 'v2' and params.get('as') == 'APIGroupDiscoveryList':
            return True
    return False


def wants_table(accept):
    for entry in (accept or '').split(','):
        params = dict(part.strip().split('=', 1) for part in entry.split(';')[1:] if '=' in part)
        if params.get('as') == 'Table' and params.get('g') == 'meta.k8s.io' and params.get('v') in ('v1', 'v1beta1'):
            return True
    return False
