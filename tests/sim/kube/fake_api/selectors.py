# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Label and field selectors, as the real server parses and applies them."""

import re

from .common import bad_request, dig


def split_top_level(text):
    """Split a label selector on commas outside parentheses."""
    parts, depth, current = [], 0, ''
    for char in text:
        if char == '(':
            depth += 1
        elif char == ')':
            depth -= 1
        if char == ',' and depth == 0:
            parts.append(current)
            current = ''
        else:
            current += char
    parts.append(current)
    return [part.strip() for part in parts if part.strip()]


LABEL_KEY = r'[A-Za-z0-9][-A-Za-z0-9_./]*'
LABEL_VALUE = r'(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?'


def parse_label_selector(text):
    """A labelSelector query string to [(key, operator, values)]."""
    requirements = []
    for part in split_top_level(text or ''):
        match = re.match(r'^(!?)\s*(%s)$' % LABEL_KEY, part)
        if match:
            requirements.append((match.group(2), '!' if match.group(1) else 'exists', []))
            continue
        match = re.match(r'^(%s)\s+(in|notin)\s+\((.*)\)$' % LABEL_KEY, part)
        if match:
            values = [value.strip() for value in match.group(3).split(',')]
            requirements.append((match.group(1), match.group(2), values))
            continue
        match = re.match(r'^(%s)\s*(==|=|!=|>|<)\s*(%s)$' % (LABEL_KEY, LABEL_VALUE), part)
        if match:
            operator = '=' if match.group(2) == '==' else match.group(2)
            if operator in ('>', '<') and not re.match(r'^-?\d+$', match.group(3)):
                raise bad_request('unable to parse requirement: for \'Gt\', \'Lt\' operators, the value must be an integer')
            requirements.append((match.group(1), operator, [match.group(3)]))
            continue
        raise bad_request('unable to parse requirement: <nil>: Invalid value: "%s": invalid label selector' % part)
    return requirements


def labels_match(requirements, labels):
    labels = labels or {}
    for key, operator, values in requirements:
        present = key in labels
        value = labels.get(key)
        if operator == 'exists' and not present:
            return False
        if operator == '!' and present:
            return False
        if operator == '=' and (not present or value != values[0]):
            return False
        if operator == '!=' and present and value == values[0]:
            return False
        if operator == 'in' and (not present or value not in values):
            return False
        if operator == 'notin' and present and value in values:
            return False
        if operator in ('>', '<'):
            if not present or not re.match(r'^-?\d+$', value or ''):
                return False
            if operator == '>' and int(value) <= int(values[0]):
                return False
            if operator == '<' and int(value) >= int(values[0]):
                return False
    return True


def selector_matches(selector, labels):
    """metav1.LabelSelector semantics: None matches nothing, {} matches everything."""
    if selector is None:
        return False
    labels = labels or {}
    for key, value in (selector.get('matchLabels') or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get('matchExpressions') or []:
        key, operator, values = expression.get('key'), expression.get('operator'), expression.get('values') or []
        if operator == 'In' and labels.get(key) not in values:
            return False
        if operator == 'NotIn' and key in labels and labels[key] in values:
            return False
        if operator == 'Exists' and key not in labels:
            return False
        if operator == 'DoesNotExist' and key in labels:
            return False
    return True


def selector_string(selector):
    """metav1.FormatLabelSelector."""
    if selector is None:
        return '<none>'
    parts = ['%s=%s' % (key, value) for key, value in sorted((selector.get('matchLabels') or {}).items())]
    for expression in selector.get('matchExpressions') or []:
        operator = expression.get('operator')
        if operator in ('In', 'NotIn'):
            parts.append('%s %s (%s)' % (expression.get('key'), operator.lower(), ','.join(expression.get('values') or [])))
        elif operator == 'Exists':
            parts.append(expression.get('key'))
        else:
            parts.append('!' + expression.get('key'))
    return ','.join(parts) if parts else '<none>'


def parse_field_selector(text):
    """A fieldSelector query string to [(field, operator, value)]."""
    terms, current, escaped = [], '', False
    for char in text or '':
        if escaped:
            current += '\\' + char
            escaped = False
        elif char == '\\':
            escaped = True
        elif char == ',':
            terms.append(current)
            current = ''
        else:
            current += char
    terms.append(current)
    requirements = []
    for term in terms:
        if not term:
            continue
        for operator in ('!=', '==', '='):
            index = _unescaped_index(term, operator)
            if index >= 0:
                field, value = term[:index], term[index + len(operator):]
                requirements.append((field, '!=' if operator == '!=' else '=', re.sub(r'\\(.)', r'\1', value)))
                break
        else:
            raise bad_request('invalid selector: \'%s\'; can\'t understand \'%s\'' % (text, term))
    return requirements


def _unescaped_index(term, operator):
    index = 0
    while index < len(term):
        if term[index] == '\\':
            index += 2
            continue
        if term.startswith(operator, index):
            return index
        index += 1
    return -1


def _string(value):
    if value is None:
        return ''
    if isinstance(value, bool):
        return 'true' if value else 'false'
    return str(value)


EVENT_FIELDS = {
    'involvedObject.kind': ('involvedObject', 'kind'), 'involvedObject.namespace': ('involvedObject', 'namespace'),
    'involvedObject.name': ('involvedObject', 'name'), 'involvedObject.uid': ('involvedObject', 'uid'),
    'involvedObject.apiVersion': ('involvedObject', 'apiVersion'), 'involvedObject.resourceVersion': ('involvedObject', 'resourceVersion'),
    'involvedObject.fieldPath': ('involvedObject', 'fieldPath'), 'reason': ('reason',), 'reportingComponent': ('reportingComponent',),
    'source': ('source', 'component'), 'type': ('type',),
}
# events.k8s.io/v1 field labels, converted to the core/v1 ones.
EVENTS_V1_FIELDS = {
    'regarding.kind': 'involvedObject.kind', 'regarding.namespace': 'involvedObject.namespace', 'regarding.name': 'involvedObject.name',
    'regarding.uid': 'involvedObject.uid', 'regarding.apiVersion': 'involvedObject.apiVersion',
    'regarding.resourceVersion': 'involvedObject.resourceVersion', 'regarding.fieldPath': 'involvedObject.fieldPath',
    'reportingController': 'reportingComponent', 'deprecatedSource': 'source', 'reason': 'reason', 'type': 'type',
}


def field_value(resource, obj, field):
    """The value a field selector compares, exactly the fields the real server supports."""
    if resource.group == 'events.k8s.io' and field in EVENTS_V1_FIELDS:
        field = EVENTS_V1_FIELDS[field]
    if field == 'metadata.name':
        return dig(obj, 'metadata', 'name') or ''
    if field == 'metadata.namespace' and resource.namespaced:
        return dig(obj, 'metadata', 'namespace') or ''
    storage = resource.storage
    if storage == 'pods':
        simple = {'spec.nodeName': ('spec', 'nodeName'), 'spec.restartPolicy': ('spec', 'restartPolicy'),
                  'spec.schedulerName': ('spec', 'schedulerName'), 'spec.serviceAccountName': ('spec', 'serviceAccountName'),
                  'spec.hostNetwork': ('spec', 'hostNetwork'), 'status.phase': ('status', 'phase'), 'status.podIP': ('status', 'podIP'),
                  'status.nominatedNodeName': ('status', 'nominatedNodeName')}
        if field in simple:
            value = dig(obj, *simple[field])
            if field == 'spec.hostNetwork':
                return 'true' if value else 'false'
            return _string(value)
        if field == 'status.podIPs':
            return ','.join(ip.get('ip', '') for ip in dig(obj, 'status', 'podIPs') or [])
    elif storage == 'nodes':
        if field == 'spec.unschedulable':
            return 'true' if dig(obj, 'spec', 'unschedulable') else 'false'
    elif storage == 'namespaces':
        if field == 'status.phase':
            return _string(dig(obj, 'status', 'phase'))
    elif storage == 'events':
        if field in EVENT_FIELDS:
            return _string(dig(obj, *EVENT_FIELDS[field]))
    elif storage == 'replicasets' and field == 'status.replicas':
        return _string(dig(obj, 'status', 'replicas') or 0)
    raise bad_request('field label not supported: %s' % field)


def fields_match(resource, requirements, obj):
    for field, operator, value in requirements:
        actual = field_value(resource, obj, field)
        if (operator == '=') != (actual == value):
            return False
    return True
