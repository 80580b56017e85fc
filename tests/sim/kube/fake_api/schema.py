# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unknown fields: dropped with a warning, or refused under fieldValidation=Strict."""

from .common import bad_request, single


ANY = None
OBJECT_META = {'name': ANY, 'generateName': ANY, 'namespace': ANY, 'selfLink': ANY, 'uid': ANY, 'resourceVersion': ANY, 'generation': ANY,
               'creationTimestamp': ANY, 'deletionTimestamp': ANY, 'deletionGracePeriodSeconds': ANY, 'labels': ANY, 'annotations': ANY,
               'ownerReferences': [{'apiVersion': ANY, 'kind': ANY, 'name': ANY, 'uid': ANY, 'controller': ANY, 'blockOwnerDeletion': ANY}],
               'finalizers': ANY, 'managedFields': ANY}
TOP_LEVEL = {'apiVersion': ANY, 'kind': ANY, 'metadata': OBJECT_META, 'spec': ANY, 'status': ANY}
SCHEMAS = {
    'configmaps': {'apiVersion': ANY, 'kind': ANY, 'metadata': OBJECT_META, 'data': ANY, 'binaryData': ANY, 'immutable': ANY},
    'leases': {'apiVersion': ANY, 'kind': ANY, 'metadata': OBJECT_META,
               'spec': {'holderIdentity': ANY, 'leaseDurationSeconds': ANY, 'acquireTime': ANY, 'renewTime': ANY, 'leaseTransitions': ANY,
                        'strategy': ANY, 'preferredHolder': ANY}},
    'nodes': dict(TOP_LEVEL, spec={'podCIDR': ANY, 'podCIDRs': ANY, 'providerID': ANY, 'unschedulable': ANY, 'configSource': ANY, 'externalID': ANY,
                                   'taints': [{'key': ANY, 'value': ANY, 'effect': ANY, 'timeAdded': ANY}]}),
    'events': {'apiVersion': ANY, 'kind': ANY, 'metadata': OBJECT_META, 'involvedObject': ANY, 'reason': ANY, 'message': ANY, 'source': ANY,
               'firstTimestamp': ANY, 'lastTimestamp': ANY, 'count': ANY, 'type': ANY, 'eventTime': ANY, 'series': ANY, 'action': ANY,
               'related': ANY, 'reportingComponent': ANY, 'reportingInstance': ANY},
    'events.k8s.io': {'apiVersion': ANY, 'kind': ANY, 'metadata': OBJECT_META, 'eventTime': ANY, 'series': ANY, 'reportingController': ANY,
                      'reportingInstance': ANY, 'action': ANY, 'reason': ANY, 'regarding': ANY, 'related': ANY, 'note': ANY, 'type': ANY,
                      'deprecatedSource': ANY, 'deprecatedFirstTimestamp': ANY, 'deprecatedLastTimestamp': ANY, 'deprecatedCount': ANY},
}


def prune_unknown(value, schema, path, unknown):
    """Drop the fields the schema does not declare; their paths go to unknown."""
    if schema is ANY:
        return value
    if isinstance(schema, list):
        if isinstance(value, list):
            return [prune_unknown(item, schema[0], '%s[%d]' % (path, index), unknown) for index, item in enumerate(value)]
        return value
    if not isinstance(value, dict):
        return value
    kept = {}
    for key, item in value.items():
        if key not in schema:
            unknown.append(path + '.' + key if path else key)
            continue
        kept[key] = prune_unknown(item, schema[key], path + '.' + key if path else key, unknown)
    return kept


def check_fields(resource, obj, query):
    """Apply fieldValidation (Ignore, Warn: the default, Strict) to a decoded object; returns (object, Warning headers)."""
    schema = SCHEMAS.get('events.k8s.io' if resource.group == 'events.k8s.io' else resource.storage, TOP_LEVEL)
    unknown = []
    obj = prune_unknown(obj, schema, '', unknown)
    mode = single(query, 'fieldValidation', 'Warn')
    if unknown and mode == 'Strict':
        raise bad_request('strict decoding error: ' + ', '.join('unknown field "%s"' % field for field in unknown))
    if unknown and mode != 'Ignore':
        return obj, ['299 - "unknown field \\"%s\\""' % field for field in unknown]
    return obj, []
