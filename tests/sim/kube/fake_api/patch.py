# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Patches: strategic merge, JSON merge (RFC 7386) and JSON patch (RFC 6902)."""

import copy

from .common import ApiError, bad_request


# Strategic merge: lists merged by key (patchStrategy=merge); '' merges primitives; absent: atomic, replaced.
MERGE_KEYS = {
    'containers': 'name', 'initContainers': 'name', 'ephemeralContainers': 'name', 'volumes': 'name', 'env': 'name',
    'volumeMounts': 'mountPath', 'ports': 'containerPort', 'imagePullSecrets': 'name', 'hostAliases': 'ip',
    'conditions': 'type', 'addresses': 'type', 'ownerReferences': 'uid', 'finalizers': '', 'podCIDRs': '',
    'volumeDevices': 'devicePath', 'resourceClaims': 'name', 'schedulingGates': 'name',
}


class _Delete:
    """Marker: a $patch: delete directive removed the value."""


DELETE = _Delete()


def strip_directives(value):
    if isinstance(value, dict):
        return dict((key, strip_directives(item)) for key, item in value.items()
                    if not key.startswith('$') and item is not None)
    if isinstance(value, list):
        return [strip_directives(item) for item in value]
    return value


def strategic_merge(original, patch):
    """Apply a strategic merge patch (the subset of directives kubectl and kubernetes.core send)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    patch = dict(patch)
    directive = patch.pop('$patch', None)
    if directive == 'replace':
        return strip_directives(patch)
    if directive == 'delete':
        return DELETE
    retain = patch.pop('$retainKeys', None)
    orders, deletions = {}, {}
    for key in list(patch):
        if key.startswith('$setElementOrder/'):
            orders[key.split('/', 1)[1]] = patch.pop(key)
        elif key.startswith('$deleteFromPrimitiveList/'):
            deletions[key.split('/', 1)[1]] = patch.pop(key)
    result = copy.deepcopy(original) if isinstance(original, dict) else {}
    if retain is not None:
        result = dict((key, value) for key, value in result.items() if key in retain or key in patch)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge(result.get(key) if isinstance(result.get(key), dict) else {}, value)
            if merged is DELETE:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key) if isinstance(result.get(key), list) else [], value)
        else:
            result[key] = value
    for key, values in deletions.items():
        if isinstance(result.get(key), list):
            result[key] = [item for item in result[key] if item not in values]
    for key, order in orders.items():
        merge_key = MERGE_KEYS.get(key)
        if isinstance(result.get(key), list) and merge_key is not None:
            result[key] = _reorder(result[key], order, merge_key)
    return result


def _merge_list(key, current, patch):
    merge_key = MERGE_KEYS.get(key)
    if merge_key is None:
        return strip_directives(patch)
    if merge_key == '':
        merged = list(current)
        for item in patch:
            if item not in merged:
                merged.append(item)
        return merged
    if any(isinstance(item, dict) and item.get('$patch') == 'replace' for item in patch):
        return [strip_directives(item) for item in patch if not (isinstance(item, dict) and item.get('$patch') == 'replace')]
    merged = copy.deepcopy(current)
    for item in patch:
        if not isinstance(item, dict):
            merged.append(item)
            continue
        wanted = item.get(merge_key)
        index = next((i for i, existing in enumerate(merged) if isinstance(existing, dict) and existing.get(merge_key) == wanted), None)
        if item.get('$patch') == 'delete':
            if index is not None:
                del merged[index]
            continue
        if index is None:
            merged.append(strip_directives(item))
        else:
            merged[index] = strategic_merge(merged[index], item)
    return merged


def _reorder(items, order, merge_key):
    def position(item):
        wanted = item.get(merge_key) if isinstance(item, dict) else item
        for index, entry in enumerate(order):
            if (entry.get(merge_key) if isinstance(entry, dict) else entry) == wanted:
                return index
        return len(order)
    return sorted(items, key=position)


def json_merge(original, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge(result.get(key), value)
    return result


def _pointer(path):
    if path == '':
        return []
    if not path.startswith('/'):
        raise bad_request('the server rejected our request due to an error in our request')
    return [part.replace('~1', '/').replace('~0', '~') for part in path[1:].split('/')]


def _resolve(document, parts):
    for part in parts:
        if isinstance(document, list):
            document = document[int(part)]
        elif isinstance(document, dict):
            document = document[part]
        else:
            raise KeyError(part)
    return document


def json_patch(original, operations):
    """RFC 6902 JSON patch."""
    if not isinstance(operations, list):
        raise bad_request('json: cannot unmarshal object into Go value of type jsonpatch.Patch')
    document = copy.deepcopy(original)
    for operation in operations:
        op = operation.get('op')
        try:
            parts = _pointer(operation.get('path', ''))
            if op in ('move', 'copy'):
                source = _pointer(operation.get('from', ''))
                value = copy.deepcopy(_resolve(document, source))
                if op == 'move':
                    document = _patch_remove(document, source)
                document = _patch_add(document, parts, value)
            elif op == 'add':
                document = _patch_add(document, parts, copy.deepcopy(operation.get('value')))
            elif op == 'remove':
                document = _patch_remove(document, parts)
            elif op == 'replace':
                _resolve(document, parts)
                document = _patch_remove(document, parts)
                document = _patch_add(document, parts, copy.deepcopy(operation.get('value')))
            elif op == 'test':
                if _resolve(document, parts) != operation.get('value'):
                    raise ApiError(422, 'Invalid', 'the server rejected our request due to an error in our request')
            else:
                raise ApiError(500, 'InternalError', 'Unexpected kind: %s' % op)
        except (KeyError, IndexError, ValueError, TypeError):
            raise ApiError(422, 'Invalid', 'the server rejected our request due to an error in our request')
    return document


def _patch_add(document, parts, value):
    if not parts:
        return value
    parent = _resolve(document, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        if last == '-':
            parent.append(value)
        else:
            index = int(last)
            if index > len(parent) or index < 0:
                raise IndexError(last)
            parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise KeyError(last)
    return document


def _patch_remove(document, parts):
    if not parts:
        raise KeyError('')
    parent = _resolve(document, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        del parent[int(last)]
    else:
        del parent[last]
    return document


PATCH_TYPES = {
    'application/strategic-merge-patch+json': strategic_merge,
    'application/merge-patch+json': json_merge,
    'application/json-patch+json': json_patch,
}
