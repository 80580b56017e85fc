# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A small, faithful fake Kubernetes API server for the simulated GPU fleet.

It serves exactly what node drain, cordon, labelling and tainting use, with the real
JSON shapes, status codes and semantics of kube-apiserver and of the few controllers
those operations depend on (disruption, taint eviction, node lifecycle, kubelet pod
termination, a minimal scheduler):

- discovery: /version, /api, /apis (legacy and aggregated apidiscovery.k8s.io/v2),
  /api/v1 and /apis/GROUP/VERSION resource lists;
- core/v1 namespaces, nodes (+status), pods (+status, +eviction), events, configmaps;
  coordination.k8s.io/v1 leases; apps/v1 daemonsets, replicasets, statefulsets; policy/v1 poddisruptionbudgets;
  events.k8s.io/v1 events (the same objects as core/v1 events, converted);
- get, list (label and field selectors), watch, create, update, delete and patch
  (strategic merge, JSON merge and JSON patch), server-side Table output for kubectl;
- the pods/eviction subresource with PodDisruptionBudget checks as the real server does them.

Run it with ``python3 fake_apiserver.py --port 0 --state STATE.json --ready-file F`` or
import it and call ``start(state)``.  It listens on 127.0.0.1 only, plain HTTP, no auth.
Tests and the fleet script drive it through ``/_sim/...`` (see tests/sim/kube/README.md).
Only the standard library is used.
"""

import argparse
import base64
import copy
import datetime
import json
import math
import os
import random
import re
import signal
import sys
import threading
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import normalise  # noqa: E402  pylint: disable=wrong-import-position,import-error

KUBE_VERSION = {
    'major': '1',
    'minor': '37',
    'emulationMajor': '1',
    'emulationMinor': '37',
    'minCompatibilityMajor': '1',
    'minCompatibilityMinor': '36',
    'gitVersion': 'v1.37.1',
    'gitCommit': '3e1a2b6d7c5f4e8a9b0c1d2e3f4a5b6c7d8e9f00',
    'gitTreeState': 'clean',
    'buildDate': '2026-10-15T12:00:00Z',
    'goVersion': 'go1.26.2',
    'compiler': 'gc',
    'platform': 'linux/amd64',
}

# Simulation knobs, as pod annotations.
FINISH_AFTER = 'sim.gpufleet.io/finish-after-seconds'  # the pod's containers exit 0 this long after it started
SHUTDOWN_SECONDS = 'sim.gpufleet.io/shutdown-seconds'  # how long the containers take to stop after SIGTERM (default 0)

TICK_SECONDS = 0.1
DISRUPTED_POD_TIMEOUT = 120  # the disruption controller's DeletionTimeout
HISTORY_LIMIT = 10000
REQUEST_LOG_LIMIT = 10000

TABLE_ACCEPT = re.compile(r'as=Table', re.IGNORECASE)
NAME_CHARS = 'bcdfghjklmnpqrstvwxz2456789'

UNSCHEDULABLE_TAINT = 'node.kubernetes.io/unschedulable'
# ConfigMap limits (k8s.io/kubernetes pkg/apis/core: MaxSecretSize; apimachinery validation.IsConfigMapKey).
CONFIG_MAP_MAX_BYTES = 1024 * 1024
CONFIG_KEY = re.compile(r'^[-._a-zA-Z0-9]+$')
CONFIG_KEY_MESSAGE = ("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  "
                      "or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')")
NOT_READY_TAINT = 'node.kubernetes.io/not-ready'
UNREACHABLE_TAINT = 'node.kubernetes.io/unreachable'


# --------------------------------------------------------------------------------------------
# Time
# --------------------------------------------------------------------------------------------

def rfc3339(when):
    """Seconds since the epoch as a Kubernetes metav1.Time string."""
    return datetime.datetime.fromtimestamp(int(when), datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


def micro_time(when):
    """Seconds since the epoch as a Kubernetes metav1.MicroTime string."""
    return datetime.datetime.fromtimestamp(when, datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%fZ')


TIME_RE = re.compile(r'^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:?\d{2})?$')


def parse_time(text):
    """A metav1.Time or MicroTime string to seconds since the epoch, or None."""
    if not isinstance(text, str):
        return None
    match = TIME_RE.match(text.strip())
    if not match:
        return None
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    fraction = float(match.group(7)) if match.group(7) else 0.0
    zone = match.group(8) or 'Z'
    offset = 0
    if zone not in ('Z', 'z'):
        sign = -1 if zone[0] == '-' else 1
        digits = zone[1:].replace(':', '')
        offset = sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    moment = datetime.datetime(year, month, day, hour, minute, second, tzinfo=datetime.timezone.utc)
    return moment.timestamp() - offset + fraction


def canonical_micro_time(text):
    """A valid MicroTime string as kube-apiserver writes it back: UTC, six fractional digits, 'Z'."""
    match = TIME_RE.match(text.strip())
    fraction = match.group(7) or '.0'
    micro = int((fraction[1:] + '000000')[:6])
    whole = round(parse_time(text) - float(fraction))
    return datetime.datetime.fromtimestamp(whole, datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%S') + '.%06dZ' % micro


def human_duration(seconds):
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    if seconds < -1:
        return '<invalid>'
    if seconds < 0:
        return '0s'
    total = int(seconds)
    if total < 120:
        return '%ds' % total
    minutes = total // 60
    if minutes < 10:
        rest = total % 60
        return '%dm' % minutes if rest == 0 else '%dm%ds' % (minutes, rest)
    if minutes < 180:
        return '%dm' % minutes
    hours = total // 3600
    if hours < 8:
        rest = minutes % 60
        return '%dh' % hours if rest == 0 else '%dh%dm' % (hours, rest)
    if hours < 48:
        return '%dh' % hours
    if hours < 24 * 8:
        rest = hours % 24
        return '%dd' % (hours // 24) if rest == 0 else '%dd%dh' % (hours // 24, rest)
    if hours < 24 * 365 * 2:
        return '%dd' % (hours // 24)
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return '%dy' % (hours // 24 // 365) if days == 0 else '%dy%dd' % (hours // 24 // 365, days)
    return '%dy' % (hours // 24 // 365)


def since(text, now):
    """translateTimestampSince: '<unknown>' for a missing time."""
    when = parse_time(text)
    if when is None:
        return '<unknown>'
    return human_duration(now - when)


# --------------------------------------------------------------------------------------------
# Errors: real metav1.Status objects
# --------------------------------------------------------------------------------------------

class ApiError(Exception):
    """An error answered with a metav1.Status."""

    def __init__(self, code, reason, message, details=None, headers=None):
        super(ApiError, self).__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self):
        status = {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure', 'message': self.message}
        if self.reason:
            status['reason'] = self.reason
        if self.details is not None:
            status['details'] = self.details
        status['code'] = self.code
        return status


def qualified(resource):
    """'pods' or 'daemonsets.apps': how errors name a resource."""
    return resource.plural + ('.' + resource.group if resource.group else '')


def details_for(resource, name, **extra):
    details = {'name': name}
    if resource.group:
        details['group'] = resource.group
    details['kind'] = resource.plural
    details.update(extra)
    return details


def not_found(resource, name):
    return ApiError(404, 'NotFound', '%s "%s" not found' % (qualified(resource), name), details_for(resource, name))


def namespace_not_found(name):
    return ApiError(404, 'NotFound', 'namespaces "%s" not found' % name, {'name': name, 'kind': 'namespaces'})


def already_exists(resource, name):
    return ApiError(409, 'AlreadyExists', '%s "%s" already exists' % (qualified(resource), name), details_for(resource, name))


def conflict(resource, name, why='the object has been modified; please apply your changes to the latest version and try again'):
    return ApiError(409, 'Conflict', 'Operation cannot be fulfilled on %s "%s": %s' % (qualified(resource), name, why),
                    details_for(resource, name))


def bad_request(message):
    return ApiError(400, 'BadRequest', message)


def invalid(resource, name, causes):
    """422 Invalid; causes: [(cause reason, field, message)]."""
    text = '; '.join('%s: %s' % (field, message) for _reason, field, message in causes)
    if len(causes) > 1:
        text = '[' + ', '.join('%s: %s' % (field, message) for _reason, field, message in causes) + ']'
    details = {'name': name}
    if resource.group:
        details['group'] = resource.group
    details['kind'] = resource.kind
    details['causes'] = [{'reason': reason, 'message': message, 'field': field} for reason, field, message in causes]
    kind = resource.kind + ('.' + resource.group if resource.group else '')
    return ApiError(422, 'Invalid', '%s "%s" is invalid: %s' % (kind, name, text), details)


def decoded(resource, obj):
    """``obj`` as kube-apiserver's decoder leaves it (normalise.py: canonical quantities, ...), or 400 as it answers."""
    try:
        if resource.storage == 'configmaps':
            _decode_configmap(obj)
        elif resource.storage == 'leases':
            _decode_lease(obj)
        return normalise.normalise(resource.storage, obj)
    except normalise.DecodeError as error:
        raise bad_request('%s in version "%s" cannot be handled as a %s: %s' % (resource.kind, resource.version, resource.kind, error)) from None


def _decode_configmap(obj):
    """ConfigMap.data is map[string]string, binaryData map[string][]byte (base64 in JSON), immutable *bool."""
    for field in ('data', 'binaryData'):
        values = obj.get(field)
        if values is None:
            continue
        if not isinstance(values, dict):
            raise normalise.DecodeError('json: cannot unmarshal %s into Go struct field ConfigMap.%s of type map[string]%s'
                                        % (_go_type(values), field, 'string' if field == 'data' else '[]uint8'))
        for key, value in values.items():
            if not isinstance(value, str):
                raise normalise.DecodeError('json: cannot unmarshal %s into Go struct field ConfigMap.%s of type %s'
                                            % (_go_type(value), field, 'string' if field == 'data' else '[]uint8'))
            if field == 'binaryData':
                try:
                    base64.b64decode(value.encode('ascii'), validate=True)
                except (ValueError, UnicodeEncodeError):
                    raise normalise.DecodeError('illegal base64 data at input byte 0') from None
    for field in ('data', 'binaryData'):
        if obj.get(field) == {}:
            del obj[field]  # omitempty: an empty map is not stored
    if obj.get('immutable') is not None and not isinstance(obj['immutable'], bool):
        raise normalise.DecodeError('json: cannot unmarshal %s into Go struct field ConfigMap.immutable of type bool' % _go_type(obj['immutable']))


def _decode_lease(obj):
    """LeaseSpec times are metav1.MicroTime (RFC 3339 with microseconds); the integers are int32."""
    spec = obj.get('spec')
    if not isinstance(spec, dict):
        return
    for field in ('acquireTime', 'renewTime'):
        value = spec.get(field)
        if value is not None and (not isinstance(value, str) or parse_time(value) is None):
            raise normalise.DecodeError('parsing time "%s" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "%s" as "2006"' % (value, value))
        if value is not None:
            spec[field] = canonical_micro_time(value)  # stored and returned in UTC with six digits, as metav1.MicroTime marshals
    for field in ('leaseDurationSeconds', 'leaseTransitions'):
        value = spec.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise normalise.DecodeError('json: cannot unmarshal %s into Go struct field LeaseSpec.spec.%s of type int32' % (_go_type(value), field))
    if spec.get('holderIdentity') is not None and not isinstance(spec['holderIdentity'], str):
        raise normalise.DecodeError('json: cannot unmarshal %s into Go struct field LeaseSpec.spec.holderIdentity of type string'
                                    % _go_type(spec['holderIdentity']))


def _go_type(value):
    if isinstance(value, bool):
        return 'bool'
    if isinstance(value, (int, float)):
        return 'number'
    if isinstance(value, str):
        return 'string'
    if isinstance(value, list):
        return 'array'
    return 'object'


def method_not_allowed():
    return ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource', {})


def path_not_found():
    return ApiError(404, 'NotFound', 'the server could not find the requested resource', {})


# --------------------------------------------------------------------------------------------
# Resources served
# --------------------------------------------------------------------------------------------

ALL_VERBS = ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch']
STATUS_VERBS = ['get', 'patch', 'update']


class Resource:
    """One REST resource: where it is served and how discovery describes it."""

    def __init__(self, group, version, plural, kind, namespaced, short_names=(), categories=(), subresources=None, storage=None,
                 verbs=None):
        self.group = group
        self.version = version
        self.plural = plural
        self.kind = kind
        self.singular = kind.lower()
        self.namespaced = namespaced
        self.short_names = list(short_names)
        self.categories = list(categories)
        self.verbs = list(verbs or ALL_VERBS)
        # name -> (group, version, kind, verbs)
        self.subresources = subresources or {}
        self.storage = storage or plural

    @property
    def api_version(self):
        return self.group + '/' + self.version if self.group else self.version

    @property
    def list_kind(self):
        return self.kind + 'List'


RESOURCES = [
    Resource('', 'v1', 'namespaces', 'Namespace', False, ['ns'], subresources={
        'status': ('', 'v1', 'Namespace', STATUS_VERBS), 'finalize': ('', 'v1', 'Namespace', ['update'])},
        verbs=['create', 'delete', 'get', 'list', 'patch', 'update', 'watch']),
    Resource('', 'v1', 'nodes', 'Node', False, ['no'], subresources={'status': ('', 'v1', 'Node', STATUS_VERBS)}),
    Resource('', 'v1', 'pods', 'Pod', True, ['po'], ['all'], subresources={
        'eviction': ('policy', 'v1', 'Eviction', ['create']), 'status': ('', 'v1', 'Pod', STATUS_VERBS)}),
    Resource('', 'v1', 'events', 'Event', True, ['ev']),
    Resource('', 'v1', 'configmaps', 'ConfigMap', True, ['cm']),
    Resource('apps', 'v1', 'daemonsets', 'DaemonSet', True, ['ds'], ['all'], subresources={'status': ('apps', 'v1', 'DaemonSet', STATUS_VERBS)}),
    Resource('apps', 'v1', 'replicasets', 'ReplicaSet', True, ['rs'], ['all'], subresources={'status': ('apps', 'v1', 'ReplicaSet', STATUS_VERBS)}),
    Resource('apps', 'v1', 'statefulsets', 'StatefulSet', True, ['sts'], ['all'], subresources={
        'status': ('apps', 'v1', 'StatefulSet', STATUS_VERBS)}),
    Resource('coordination.k8s.io', 'v1', 'leases', 'Lease', True),
    Resource('events.k8s.io', 'v1', 'events', 'Event', True, ['ev'], storage='events'),
    Resource('policy', 'v1', 'poddisruptionbudgets', 'PodDisruptionBudget', True, ['pdb'], subresources={
        'status': ('policy', 'v1', 'PodDisruptionBudget', STATUS_VERBS)}),
]

BY_PATH = dict(((r.group, r.version, r.plural), r) for r in RESOURCES)
BY_STORAGE = {}
for _resource in RESOURCES:
    BY_STORAGE.setdefault(_resource.storage, _resource)
GROUPS = []  # (group, version) in priority order
for _resource in RESOURCES:
    if _resource.group and (_resource.group, _resource.version) not in GROUPS:
        GROUPS.append((_resource.group, _resource.version))

# State file / control API keys -> storage.
STATE_KEYS = [('namespaces', 'namespaces'), ('nodes', 'nodes'), ('daemonsets', 'daemonsets'), ('replicasets', 'replicasets'),
              ('statefulsets', 'statefulsets'), ('poddisruptionbudgets', 'poddisruptionbudgets'), ('pods', 'pods'), ('events', 'events'),
              ('leases', 'leases'), ('configmaps', 'configmaps')]
KIND_TO_STORAGE = dict((BY_STORAGE[storage].kind, storage) for _key, storage in STATE_KEYS)


# --------------------------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------------------------

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


def dig(obj, *path):
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


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


# --------------------------------------------------------------------------------------------
# Patches
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Pods and nodes: helpers shared by the store and the printers
# --------------------------------------------------------------------------------------------

def pod_ready(pod):
    for condition in dig(pod, 'status', 'conditions') or []:
        if condition.get('type') == 'Ready':
            return condition.get('status') == 'True'
    return False


def node_ready(node):
    for condition in dig(node, 'status', 'conditions') or []:
        if condition.get('type') == 'Ready':
            return condition.get('status')
    return 'Unknown'


def terminal(pod):
    return dig(pod, 'status', 'phase') in ('Succeeded', 'Failed')


def controller_of(obj):
    for reference in dig(obj, 'metadata', 'ownerReferences') or []:
        if reference.get('controller'):
            return reference
    return None


def tolerates(toleration, taint):
    """v1.Toleration.ToleratesTaint."""
    if toleration.get('effect') and toleration.get('effect') != taint.get('effect'):
        return False
    if toleration.get('key') and toleration.get('key') != taint.get('key'):
        return False
    operator = toleration.get('operator') or 'Equal'
    if operator == 'Exists':
        return True
    if operator == 'Equal':
        return (toleration.get('value') or '') == (taint.get('value') or '')
    return False


def quantity(text):
    """A resource.Quantity string to a float (enough for counts and comparisons)."""
    if text is None:
        return 0.0
    if isinstance(text, (int, float)):
        return float(text)
    match = re.match(r'^([+-]?[0-9.]+(?:[eE][+-]?\d+)?)([A-Za-z]*)$', str(text).strip())
    if not match:
        return 0.0
    number, suffix = float(match.group(1)), match.group(2)
    factors = {'': 1, 'm': 1e-3, 'k': 1e3, 'M': 1e6, 'G': 1e9, 'T': 1e12, 'P': 1e15, 'E': 1e18,
               'Ki': 2 ** 10, 'Mi': 2 ** 20, 'Gi': 2 ** 30, 'Ti': 2 ** 40, 'Pi': 2 ** 50, 'Ei': 2 ** 60}
    return number * factors.get(suffix, 1)


def pod_requests(pod, name):
    total = 0.0
    for container in dig(pod, 'spec', 'containers') or []:
        resources = container.get('resources') or {}
        total += quantity((resources.get('requests') or {}).get(name, (resources.get('limits') or {}).get(name)))
    return total


def scaled_value(value, total, round_up):
    """intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(value, bool) or value is None:
        raise ValueError('invalid value for IntOrString: invalid type: neither int nor percentage')
    if isinstance(value, int):
        return value
    text = str(value)
    if not text.endswith('%') or not re.match(r'^\d+$', text[:-1]):
        raise ValueError('invalid value for IntOrString: invalid value "%s": must be an integer or percentage (e.g "5%%")' % text)
    percent = int(text[:-1])
    if round_up:
        return int(math.ceil(percent * total / 100.0))
    return int(math.floor(percent * total / 100.0))


# --------------------------------------------------------------------------------------------
# The store: objects, resource versions, history for watches, and the simulated controllers
# --------------------------------------------------------------------------------------------

class Store:
    """All objects, behind one lock.  Objects are stored as JSON-ready dicts with kind and apiVersion."""

    def __init__(self, state=None, clock=None):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.clock = clock or time.time
        self.revision = 0
        self.objects = dict((storage, {}) for _key, storage in STATE_KEYS)
        self.private = {}  # uid -> simulation bookkeeping that is not part of the object
        self.history = []  # (revision, type, storage, old, new)
        self.requests = []
        self.taints_seen = {}
        self.node_schedulable = {}
        self.addresses = 0
        for name in ('default', 'kube-system', 'kube-public', 'kube-node-lease'):
            self.create('namespaces', {'metadata': {'name': name}}, admit=False)
        if state:
            self.load(state)

    # ---------------------------------------------------------------- basics

    def now(self):
        return self.clock()

    def next_revision(self):
        self.revision += 1
        return str(self.revision)

    def _record(self, kind, storage, old, new):
        self.history.append((self.revision, kind, storage, old, new))
        if len(self.history) > HISTORY_LIMIT:
            del self.history[:len(self.history) - HISTORY_LIMIT]
        with self.lock:
            self.changed.notify_all()

    def get(self, storage, namespace, name):
        return self.objects[storage].get((namespace or '', name))

    def items(self, storage, namespace=None):
        found = [obj for (ns, _name), obj in self.objects[storage].items() if namespace is None or ns == namespace]
        return sorted(found, key=lambda obj: (dig(obj, 'metadata', 'namespace') or '', dig(obj, 'metadata', 'name')))

    def put(self, storage, obj, old=None):
        """Store a new version of an existing object (or a new one) and record the change."""
        obj['metadata']['resourceVersion'] = self.next_revision()
        key = (obj['metadata'].get('namespace', '') if BY_STORAGE[storage].namespaced else '', obj['metadata']['name'])
        self.objects[storage][key] = obj
        self._record('MODIFIED' if old is not None else 'ADDED', storage, old, copy.deepcopy(obj))
        return obj

    def remove(self, storage, obj):
        key = (obj['metadata'].get('namespace', '') if BY_STORAGE[storage].namespaced else '', obj['metadata']['name'])
        old = self.objects[storage].pop(key, None)
        if old is None:
            return None
        old = copy.deepcopy(old)
        self.next_revision()
        old['metadata']['resourceVersion'] = str(self.revision)
        self.private.pop(old['metadata'].get('uid'), None)
        self._record('DELETED', storage, old, old)
        return old

    def log_request(self, entry):
        with self.lock:
            self.requests.append(entry)
            if len(self.requests) > REQUEST_LOG_LIMIT:
                del self.requests[:len(self.requests) - REQUEST_LOG_LIMIT]

    # ---------------------------------------------------------------- state file

    def load(self, state):
        """Add the objects of a state document: {"nodes": [...], "pods": [...], ...}."""
        with self.lock:
            for key, storage in STATE_KEYS:
                objects = state.get(key) or state.get({'poddisruptionbudgets': 'pdbs'}.get(key, key)) or []
                if storage == 'pods':
                    self._implied_controllers(objects)
                for obj in objects:
                    self.add(storage, copy.deepcopy(obj))

    def _implied_controllers(self, pods):
        """ReplicaSets and StatefulSets that pods of a state document name but that it does not list: as many replicas as pods."""
        counts = {}
        for obj in pods:
            namespace = dig(obj, 'metadata', 'namespace') or 'default'
            for reference in dig(obj, 'metadata', 'ownerReferences') or []:
                if reference.get('kind') in ('ReplicaSet', 'StatefulSet') and reference.get('controller'):
                    key = (namespace, reference['kind'], reference.get('name'))
                    counts.setdefault(key, [0, obj, reference.get('uid')])[0] += 1
        for (namespace, kind, name), (replicas, example, uid) in counts.items():
            storage = 'replicasets' if kind == 'ReplicaSet' else 'statefulsets'
            if self.get(storage, namespace, name) is not None:
                continue
            if self.get('namespaces', '', namespace) is None:
                self.create('namespaces', {'metadata': {'name': namespace}}, admit=False)
            self._implied_controller(storage, namespace, name, uid, replicas, example)

    def _implied_controller(self, storage, namespace, name, uid, replicas, example):
        labels = dict(dig(example, 'metadata', 'labels') or {})
        meta = {'name': name, 'namespace': namespace, 'labels': labels}
        if uid:
            meta['uid'] = uid
        template_spec = copy.deepcopy(example.get('spec') or {})
        template_spec.pop('nodeName', None)
        return self.create(storage, {'metadata': meta, 'spec': {
            'replicas': replicas, 'selector': {'matchLabels': labels}, 'template': {'metadata': {'labels': labels}, 'spec': template_spec}}},
            admit=False)

    def add(self, storage, obj):
        """Add an object as the cluster already has it (no admission checks; defaults filled like the real components)."""
        with self.lock:
            namespace = dig(obj, 'metadata', 'namespace')
            if BY_STORAGE[storage].namespaced:
                namespace = namespace or 'default'
                obj.setdefault('metadata', {})['namespace'] = namespace
                if self.get('namespaces', '', namespace) is None:
                    self.create('namespaces', {'metadata': {'name': namespace}}, admit=False)
            if storage == 'pods':
                self._link_owners(obj)
            existing = self.get(storage, namespace if BY_STORAGE[storage].namespaced else '', dig(obj, 'metadata', 'name'))
            if existing is not None:
                self.remove(storage, existing)
            return self.create(storage, obj, admit=False)

    def _link_owners(self, pod):
        """Fill the uid of owner references by name, and create the ReplicaSets and StatefulSets that pods imply."""
        namespace = pod['metadata']['namespace']
        for reference in dig(pod, 'metadata', 'ownerReferences') or []:
            storage = {'DaemonSet': 'daemonsets', 'ReplicaSet': 'replicasets', 'StatefulSet': 'statefulsets'}.get(reference.get('kind'))
            reference.setdefault('apiVersion', 'apps/v1' if storage else 'v1')
            if storage is None:
                reference.setdefault('uid', str(uuid.uuid4()))
                continue
            owner = self.get(storage, namespace, reference.get('name'))
            if owner is None and storage != 'daemonsets':
                replicas = 1 + sum(1 for other in self.items('pods', namespace)
                                   if any(ref.get('kind') == reference.get('kind') and ref.get('name') == reference.get('name')
                                          for ref in dig(other, 'metadata', 'ownerReferences') or []))
                owner = self._implied_controller(storage, namespace, reference.get('name'), reference.get('uid'), replicas, pod)
            if owner is not None:
                reference.setdefault('uid', owner['metadata']['uid'])
            else:
                reference.setdefault('uid', str(uuid.uuid4()))

    def dump(self):
        with self.lock:
            document = {}
            for key, storage in STATE_KEYS:
                document[key] = [copy.deepcopy(self.with_status(storage, obj)) for obj in self.items(storage)]
            document['resourceVersion'] = str(self.revision)
            return document

    # ---------------------------------------------------------------- create with defaults

    def create(self, storage, obj, admit=True, dry_run=False):
        """Create an object: system fields, defaults, admission (when admit) and the first status."""
        resource = BY_STORAGE[storage]
        now = self.now()
        meta = obj.setdefault('metadata', {})
        obj['apiVersion'] = resource.api_version
        obj['kind'] = resource.kind
        if not meta.get('name') and meta.get('generateName'):
            meta['name'] = meta['generateName'] + ''.join(random.choice(NAME_CHARS) for dummy in range(5))
        name = meta.get('name')
        if not name:
            raise invalid(resource, '', [('FieldValueRequired', 'metadata.name', 'Required value: name or generateName is required')])
        namespace = ''
        if resource.namespaced:
            namespace = meta.get('namespace') or 'default'
            meta['namespace'] = namespace
            if self.get('namespaces', '', namespace) is None:
                raise namespace_not_found(namespace)
        else:
            meta.pop('namespace', None)
        if self.get(storage, namespace, name) is not None:
            raise already_exists(resource, name)
        meta['uid'] = meta.get('uid') or str(uuid.uuid4())
        meta['creationTimestamp'] = meta.get('creationTimestamp') or rfc3339(now)
        meta.pop('resourceVersion', None)
        meta.pop('selfLink', None)
        if storage in ('daemonsets', 'replicasets', 'statefulsets', 'poddisruptionbudgets', 'pods'):
            meta['generation'] = meta.get('generation') or 1
        decoded(resource, obj)
        getattr(self, '_default_' + storage, lambda obj, admit, now: None)(obj, admit, now)
        self.validate(resource, obj, None)
        if dry_run:
            obj['metadata']['resourceVersion'] = str(self.revision)
            return obj
        self.put(storage, obj)
        if storage == 'pods':
            self.private[meta['uid']] = {}
        return obj

    def _default_namespaces(self, obj, admit, now):
        obj.setdefault('spec', {}).setdefault('finalizers', ['kubernetes'])
        obj.setdefault('status', {}).setdefault('phase', 'Active')
        labels = obj['metadata'].setdefault('labels', {})
        labels['kubernetes.io/metadata.name'] = obj['metadata']['name']

    def _default_nodes(self, obj, admit, now):
        meta = obj['metadata']
        name = meta['name']
        labels = meta.setdefault('labels', {})
        for key, value in (('beta.kubernetes.io/arch', 'amd64'), ('beta.kubernetes.io/os', 'linux'), ('kubernetes.io/arch', 'amd64'),
                           ('kubernetes.io/hostname', name), ('kubernetes.io/os', 'linux')):
            labels.setdefault(key, value)
        annotations = meta.setdefault('annotations', {})
        annotations.setdefault('node.alpha.kubernetes.io/ttl', '0')
        annotations.setdefault('volumes.kubernetes.io/controller-managed-attach-detach', 'true')
        spec = obj.setdefault('spec', {})
        if not spec.get('unschedulable'):
            spec.pop('unschedulable', None)
        self.addresses += 1
        status = obj.setdefault('status', {})
        capacity = status.setdefault('capacity', {})
        for key, value in (('cpu', '96'), ('ephemeral-storage', '1843199996Ki'), ('hugepages-1Gi', '0'), ('hugepages-2Mi', '0'),
                           ('memory', '2113224328Ki'), ('pods', '110')):
            capacity.setdefault(key, value)
        status.setdefault('allocatable', dict(capacity))
        stamp = meta['creationTimestamp']
        conditions = status.setdefault('conditions', [])
        present = set(condition.get('type') for condition in conditions)
        for kind, state, reason, message in (
                ('MemoryPressure', 'False', 'KubeletHasSufficientMemory', 'kubelet has sufficient memory available'),
                ('DiskPressure', 'False', 'KubeletHasNoDiskPressure', 'kubelet has no disk pressure'),
                ('PIDPressure', 'False', 'KubeletHasSufficientPID', 'kubelet has sufficient PID available'),
                ('Ready', 'True', 'KubeletReady', 'kubelet is posting ready status')):
            if kind not in present:
                conditions.append({'type': kind, 'status': state, 'lastHeartbeatTime': stamp, 'lastTransitionTime': stamp,
                                   'reason': reason, 'message': message})
        status.setdefault('addresses', [{'type': 'InternalIP', 'address': '10.0.0.%d' % (10 + self.addresses)},
                                        {'type': 'Hostname', 'address': name}])
        status.setdefault('daemonEndpoints', {'kubeletEndpoint': {'Port': 10250}})
        info = status.setdefault('nodeInfo', {})
        for key, value in (('machineID', uuid.uuid5(uuid.NAMESPACE_DNS, name).hex), ('systemUUID', str(uuid.uuid5(uuid.NAMESPACE_URL, name))),
                           ('bootID', str(uuid.uuid4())), ('kernelVersion', '6.1.0-26-amd64'), ('osImage', 'Debian GNU/Linux 12 (bookworm)'),
                           ('containerRuntimeVersion', 'containerd://2.1.4'), ('kubeletVersion', KUBE_VERSION['gitVersion']),
                           ('kubeProxyVersion', ''), ('operatingSystem', 'linux'), ('architecture', 'amd64')):
            info.setdefault(key, value)
        self.node_schedulable[name] = not spec.get('unschedulable')
        self._controller_taints(obj, now)
        if self.get('leases', 'kube-node-lease', name) is None and self.get('namespaces', '', 'kube-node-lease') is not None:
            # kubelet's node lease, renewed every 10 seconds while the node is Ready
            self.create('leases', {'metadata': {'name': name, 'namespace': 'kube-node-lease', 'ownerReferences': [
                {'apiVersion': 'v1', 'kind': 'Node', 'name': name, 'uid': obj['metadata']['uid']}]},
                'spec': {'holderIdentity': name, 'leaseDurationSeconds': 40, 'renewTime': micro_time(now)}}, admit=False)

    def _default_pods(self, obj, admit, now):
        meta = obj['metadata']
        spec = obj.setdefault('spec', {})
        if not admit and not spec.get('containers'):
            spec['containers'] = [{'name': 'main', 'image': 'registry.k8s.io/pause:3.10'}]
        for container in (spec.get('initContainers') or []) + (spec.get('containers') or []):
            image = container.get('image') or ''
            tag = image.rsplit('/', 1)[-1]
            container.setdefault('imagePullPolicy', 'Always' if (':' not in tag or tag.endswith(':latest')) and '@' not in tag else 'IfNotPresent')
            container.setdefault('terminationMessagePath', '/dev/termination-log')
            container.setdefault('terminationMessagePolicy', 'File')
            resources = container.setdefault('resources', {})
            limits = resources.get('limits') or {}
            if limits:
                requests = resources.setdefault('requests', {})
                for key, value in limits.items():
                    requests.setdefault(key, value)
        for key, value in (('restartPolicy', 'Always'), ('terminationGracePeriodSeconds', 30), ('dnsPolicy', 'ClusterFirst'),
                           ('schedulerName', 'default-scheduler'), ('serviceAccountName', 'default'), ('securityContext', {}),
                           ('enableServiceLinks', True), ('preemptionPolicy', 'PreemptLowerPriority'), ('priority', 0)):
            spec.setdefault(key, value)
        spec.setdefault('serviceAccount', spec['serviceAccountName'])
        for volume in spec.get('volumes') or []:
            if 'emptyDir' in volume and volume['emptyDir'] is None:
                volume['emptyDir'] = {}
        tolerations = spec.setdefault('tolerations', [])
        owner = controller_of(obj)
        if owner is not None and owner.get('kind') == 'DaemonSet':
            for key, effect in ((NOT_READY_TAINT, 'NoExecute'), (UNREACHABLE_TAINT, 'NoExecute'), ('node.kubernetes.io/disk-pressure', 'NoSchedule'),
                                ('node.kubernetes.io/memory-pressure', 'NoSchedule'), ('node.kubernetes.io/pid-pressure', 'NoSchedule'),
                                (UNSCHEDULABLE_TAINT, 'NoSchedule')):
                if not any(t.get('key') == key and t.get('effect') == effect for t in tolerations):
                    tolerations.append({'key': key, 'operator': 'Exists', 'effect': effect})
        else:
            # The DefaultTolerationSeconds admission plugin.
            for key in (NOT_READY_TAINT, UNREACHABLE_TAINT):
                if not any((t.get('key') in (key, '', None)) and t.get('effect') in ('NoExecute', '', None) for t in tolerations):
                    tolerations.append({'key': key, 'operator': 'Exists', 'effect': 'NoExecute', 'tolerationSeconds': 300})
        status = obj.setdefault('status', {})
        status.setdefault('qosClass', self._qos(obj))
        if spec.get('nodeName'):
            self._start_pod(obj, parse_time(meta['creationTimestamp']) or now)
        else:
            status.setdefault('phase', 'Pending')

    @staticmethod
    def _qos(pod):
        containers = dig(pod, 'spec', 'containers') or []
        requests, limits, guaranteed = False, False, True
        for container in containers:
            resources = container.get('resources') or {}
            req = dict((k, v) for k, v in (resources.get('requests') or {}).items() if k in ('cpu', 'memory'))
            lim = dict((k, v) for k, v in (resources.get('limits') or {}).items() if k in ('cpu', 'memory'))
            requests = requests or bool(req)
            limits = limits or bool(lim)
            if set(lim) != {'cpu', 'memory'} or any(quantity(req.get(k, lim[k])) != quantity(lim[k]) for k in lim):
                guaranteed = False
        if not requests and not limits:
            return 'BestEffort'
        return 'Guaranteed' if guaranteed else 'Burstable'

    def _start_pod(self, pod, started):
        """What kubelet reports once the pod's containers run (or have finished, for a terminal phase in a state file)."""
        status = pod.setdefault('status', {})
        phase = status.setdefault('phase', 'Running')
        stamp = rfc3339(started)
        node = self.get('nodes', '', pod['spec']['nodeName'])
        host_ip = '10.0.0.1'
        if node is not None:
            host_ip = next((a.get('address') for a in dig(node, 'status', 'addresses') or [] if a.get('type') == 'InternalIP'), host_ip)
        status.setdefault('hostIP', host_ip)
        status.setdefault('hostIPs', [{'ip': status['hostIP']}])
        if not dig(pod, 'spec', 'hostNetwork'):
            self.addresses += 1
            status.setdefault('podIP', '10.244.%d.%d' % (self.addresses // 250, 2 + self.addresses % 250))
        else:
            status.setdefault('podIP', status['hostIP'])
        status.setdefault('podIPs', [{'ip': status['podIP']}])
        status.setdefault('startTime', stamp)
        running = phase == 'Running'
        conditions = status.setdefault('conditions', [])
        present = set(condition.get('type') for condition in conditions)
        ready = 'True' if running else 'False'
        if running and 'Ready' in present:
            ready = 'True' if pod_ready(pod) else 'False'
        for kind, state in (('PodReadyToStartContainers', 'True' if running else 'False'), ('Initialized', 'True'), ('Ready', ready),
                            ('ContainersReady', ready), ('PodScheduled', 'True')):
            if kind not in present:
                condition = {'type': kind, 'status': state, 'lastProbeTime': None, 'lastTransitionTime': stamp}
                if state == 'False' and phase in ('Succeeded', 'Failed'):
                    condition['reason'] = 'PodCompleted'
                conditions.append(condition)
        if 'containerStatuses' not in status:
            statuses = []
            for container in pod['spec'].get('containers') or []:
                image = container.get('image', '')
                entry = {'name': container['name'], 'image': image,
                         'imageID': '%s@sha256:%s' % (image.split(':')[0], uuid.uuid5(uuid.NAMESPACE_URL, image).hex * 2),
                         'containerID': 'containerd://' + uuid.uuid4().hex + uuid.uuid4().hex, 'restartCount': 0,
                         'ready': ready == 'True', 'started': running, 'lastState': {}}
                if running:
                    entry['state'] = {'running': {'startedAt': stamp}}
                else:
                    failed = phase == 'Failed'
                    entry['state'] = {'terminated': {'exitCode': 1 if failed else 0, 'reason': 'Error' if failed else 'Completed',
                                                     'startedAt': stamp, 'finishedAt': stamp, 'containerID': entry['containerID']}}
                statuses.append(entry)
            status['containerStatuses'] = statuses

    def _default_daemonsets(self, obj, admit, now):
        spec = obj.setdefault('spec', {})
        labels = dig(spec, 'template', 'metadata', 'labels') or dig(obj, 'metadata', 'labels') or {'app': obj['metadata']['name']}
        spec.setdefault('selector', {'matchLabels': dict(labels)})
        template = spec.setdefault('template', {})
        template.setdefault('metadata', {}).setdefault('labels', dict(labels))
        template.setdefault('spec', {}).setdefault('containers', [{'name': obj['metadata']['name'], 'image': 'registry.k8s.io/pause:3.10'}])
        spec.setdefault('updateStrategy', {'type': 'RollingUpdate', 'rollingUpdate': {'maxUnavailable': 1, 'maxSurge': 0}})
        spec.setdefault('revisionHistoryLimit', 10)

    def _default_replicasets(self, obj, admit, now):
        spec = obj.setdefault('spec', {})
        spec.setdefault('replicas', 1)
        spec.setdefault('selector', {'matchLabels': dict(dig(spec, 'template', 'metadata', 'labels') or {})})

    def _default_statefulsets(self, obj, admit, now):
        self._default_replicasets(obj, admit, now)
        spec = obj['spec']
        spec.setdefault('podManagementPolicy', 'OrderedReady')
        spec.setdefault('updateStrategy', {'type': 'RollingUpdate', 'rollingUpdate': {'partition': 0}})

    def _default_events(self, obj, admit, now):
        obj.setdefault('involvedObject', {})
        obj.setdefault('reportingComponent', '')
        obj.setdefault('reportingInstance', '')
        obj.setdefault('source', {})
        if 'eventTime' not in obj:
            obj['eventTime'] = None
        if 'firstTimestamp' not in obj:
            obj['firstTimestamp'] = None
        if 'lastTimestamp' not in obj:
            obj['lastTimestamp'] = None

    # ---------------------------------------------------------------- validation (what the operations here can get wrong)

    def validate(self, resource, obj, old):
        storage = resource.storage
        name = obj['metadata']['name']
        causes = []
        if storage == 'nodes':
            seen = set()
            for index, taint in enumerate(dig(obj, 'spec', 'taints') or []):
                field = 'spec.taints[%d]' % index
                if not taint.get('key'):
                    causes.append(('FieldValueRequired', field + '.key', 'Required value'))
                if taint.get('effect') not in ('NoSchedule', 'PreferNoSchedule', 'NoExecute'):
                    if not taint.get('effect'):
                        causes.append(('FieldValueRequired', field + '.effect', 'Required value'))
                    else:
                        causes.append(('FieldValueNotSupported', field + '.effect', 'Unsupported value: "%s": supported values: '
                                       '"NoSchedule", "PreferNoSchedule", "NoExecute"' % taint.get('effect')))
                pair = (taint.get('key'), taint.get('effect'))
                if pair in seen:
                    causes.append(('FieldValueDuplicate', 'spec.taints', 'Duplicate value: core.Taint{Key:"%s", Value:"%s", Effect:"%s", '
                                   'TimeAdded:<nil>}: taints must be unique by key and effect pair' % (pair[0], taint.get('value', ''), pair[1])))
                seen.add(pair)
        elif storage == 'pods':
            if not dig(obj, 'spec', 'containers'):
                causes.append(('FieldValueRequired', 'spec.containers', 'Required value'))
            for index, container in enumerate(dig(obj, 'spec', 'containers') or []):
                if not container.get('name'):
                    causes.append(('FieldValueRequired', 'spec.containers[%d].name' % index, 'Required value'))
                if not container.get('image'):
                    causes.append(('FieldValueRequired', 'spec.containers[%d].image' % index, 'Required value'))
            if old is not None:
                self._validate_pod_update(obj, old, causes)
        elif storage == 'poddisruptionbudgets':
            spec = obj.get('spec') or {}
            if spec.get('minAvailable') is not None and spec.get('maxUnavailable') is not None:
                causes.append(('FieldValueInvalid', 'spec', 'Invalid value: ...: minAvailable and maxUnavailable cannot be both set'))
            for field in ('minAvailable', 'maxUnavailable'):
                if spec.get(field) is not None:
                    try:
                        scaled_value(spec[field], 100, True)
                    except ValueError as error:
                        causes.append(('FieldValueInvalid', 'spec.' + field, str(error)))
        elif storage == 'events':
            involved = obj.get('involvedObject') or {}
            namespace = obj['metadata'].get('namespace')
            if not involved.get('namespace'):
                if namespace not in ('', 'default'):
                    causes.append(('FieldValueInvalid', 'involvedObject.namespace', 'Invalid value: "": does not match event.namespace'))
            elif involved.get('namespace') != namespace:
                causes.append(('FieldValueInvalid', 'involvedObject.namespace',
                               'Invalid value: "%s": does not match event.namespace' % involved.get('namespace')))
            if obj.get('type') not in (None, '', 'Normal', 'Warning'):
                causes.append(('FieldValueNotSupported', 'type', 'Unsupported value: "%s": supported values: "Normal", "Warning"' % obj.get('type')))
        elif storage == 'configmaps':
            self._validate_configmap(obj, old, causes)
        elif storage == 'leases':
            spec = obj.get('spec') or {}
            if spec.get('leaseDurationSeconds') is not None and spec['leaseDurationSeconds'] <= 0:
                causes.append(('FieldValueInvalid', 'spec.leaseDurationSeconds', 'Invalid value: %d: must be greater than 0' % spec['leaseDurationSeconds']))
            if spec.get('leaseTransitions') is not None and spec['leaseTransitions'] < 0:
                causes.append(('FieldValueInvalid', 'spec.leaseTransitions',
                               'Invalid value: %d: must be greater than or equal to 0' % spec['leaseTransitions']))
        if old is not None:
            if obj['metadata'].get('uid') != old['metadata'].get('uid'):
                causes.append(('FieldValueInvalid', 'metadata.uid', 'Invalid value: "%s": field is immutable' % obj['metadata'].get('uid')))
        if causes:
            raise invalid(resource, name, causes)

    @staticmethod
    def _validate_configmap(obj, old, causes):
        """ValidateConfigMap and ValidateConfigMapUpdate: key names, no key in both maps, at most 1 MiB of values, immutable."""
        data = obj.get('data') or {}
        binary = obj.get('binaryData') or {}
        total = 0
        for field, values in (('data', data), ('binaryData', binary)):
            for key, value in values.items():
                if not CONFIG_KEY.match(key) or len(key) > 253 or key in ('.', '..') or key.startswith('..'):
                    causes.append(('FieldValueInvalid', '%s[%s]' % (field, key), 'Invalid value: "%s": %s' % (key, CONFIG_KEY_MESSAGE)))
                if field == 'data' and key in binary:
                    causes.append(('FieldValueInvalid', 'data[%s]' % key, 'Invalid value: "%s": duplicate of key present in binaryData' % key))
                total += len(value.encode('utf-8')) if field == 'data' else len(base64.b64decode(value))
        if total > CONFIG_MAP_MAX_BYTES:
            causes.append(('FieldValueTooLong', '[]', 'Too long: may not be more than %d bytes' % CONFIG_MAP_MAX_BYTES))
        if old is not None and old.get('immutable'):
            if not obj.get('immutable'):
                causes.append(('FieldValueForbidden', 'immutable', 'Forbidden: field is immutable when `immutable` is set'))
            for field in ('data', 'binaryData'):
                if (obj.get(field) or {}) != (old.get(field) or {}):
                    causes.append(('FieldValueForbidden', field, 'Forbidden: field is immutable when `immutable` is set'))

    @staticmethod
    def _validate_pod_update(new, old, causes):
        """Pods are immutable but for images, activeDeadlineSeconds, added tolerations and a few more."""
        def comparable(pod):
            spec = copy.deepcopy(pod.get('spec') or {})
            for container in (spec.get('containers') or []) + (spec.get('initContainers') or []):
                container.pop('image', None)
            spec.pop('activeDeadlineSeconds', None)
            spec.pop('tolerations', None)
            spec.pop('terminationGracePeriodSeconds', None)
            spec.pop('schedulingGates', None)
            return spec
        if comparable(new) != comparable(old):
            causes.append(('FieldValueForbidden', 'spec', 'Forbidden: pod updates may not change fields other than `spec.containers[*].image`,'
                           '`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),'
                           '`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)'))

    # ---------------------------------------------------------------- update

    def update(self, resource, old, new, subresource=None, dry_run=False):
        """Store a full new version of an existing object: the real BeforeUpdate rules, then validation."""
        storage = resource.storage
        new = decoded(resource, copy.deepcopy(new))
        meta = new.setdefault('metadata', {})
        old_meta = old['metadata']
        if meta.get('name') != old_meta['name']:
            raise bad_request('the name of the object (%s) does not match the name on the URL (%s)' % (meta.get('name'), old_meta['name']))
        if resource.namespaced and meta.get('namespace') not in (None, '', old_meta.get('namespace')):
            raise bad_request('the namespace of the provided object does not match the namespace sent on the request')
        if meta.get('resourceVersion') and meta['resourceVersion'] != old_meta.get('resourceVersion'):
            raise conflict(resource, old_meta['name'])
        new['apiVersion'] = old['apiVersion']
        new['kind'] = old['kind']
        if resource.namespaced:
            meta['namespace'] = old_meta.get('namespace')
        meta['uid'] = meta.get('uid') or old_meta.get('uid')
        meta['creationTimestamp'] = old_meta.get('creationTimestamp')
        for key in ('deletionTimestamp', 'deletionGracePeriodSeconds', 'generation'):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        if subresource == 'status':
            kept = copy.deepcopy(old)
            if 'status' in new:
                kept['status'] = new['status']
            else:
                kept.pop('status', None)
            new = kept
        elif storage in ('nodes', 'pods', 'namespaces', 'daemonsets', 'replicasets', 'statefulsets', 'poddisruptionbudgets'):
            if 'status' in old:
                new['status'] = copy.deepcopy(old['status'])
            else:
                new.pop('status', None)
        if storage in ('daemonsets', 'replicasets', 'statefulsets', 'poddisruptionbudgets', 'pods') and subresource != 'status':
            if new.get('spec') != old.get('spec'):
                meta['generation'] = old_meta.get('generation', 1) + 1
        if storage == 'nodes':
            spec = new.setdefault('spec', {})
            if not spec.get('unschedulable'):
                spec.pop('unschedulable', None)
            if 'taints' in spec and not spec['taints']:
                spec.pop('taints')
        for key in ('labels', 'annotations'):
            if key in meta and not meta[key]:
                meta.pop(key)
        self.validate(resource, new, old)
        if dry_run:
            new['metadata']['resourceVersion'] = old_meta.get('resourceVersion')
            return new
        if new == old:
            return old  # a no-op update does not change the resourceVersion
        return self.put(storage, new, old=copy.deepcopy(old))

    # ---------------------------------------------------------------- delete

    def delete(self, resource, obj, grace=None, preconditions=None, dry_run=False):
        """Delete; pods are deleted gracefully.  Returns (object, deleted now)."""
        storage = resource.storage
        meta = obj['metadata']
        preconditions = preconditions or {}
        if preconditions.get('uid') and preconditions['uid'] != meta.get('uid'):
            raise conflict(resource, meta['name'], 'Precondition failed: UID in precondition: %s, UID in object meta: %s'
                           % (preconditions['uid'], meta.get('uid')))
        if preconditions.get('resourceVersion') and preconditions['resourceVersion'] != meta.get('resourceVersion'):
            raise conflict(resource, meta['name'], 'Precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s'
                           % (preconditions['resourceVersion'], meta.get('resourceVersion')))
        if storage != 'pods':
            if dry_run:
                return obj, True
            return self.remove(storage, obj), True
        if grace is None:
            grace = dig(obj, 'spec', 'terminationGracePeriodSeconds')
            grace = 30 if grace is None else grace
        if not dig(obj, 'spec', 'nodeName') or terminal(obj):
            grace = 0
        now = self.now()
        private = self.private.setdefault(meta['uid'], {})
        if meta.get('deletionTimestamp'):
            current = meta.get('deletionGracePeriodSeconds', 0)
            if grace >= current or dry_run:
                return obj, False
        if dry_run:
            return obj, grace == 0
        if grace == 0 and not meta.get('finalizers'):
            return self.remove(storage, obj), True
        old = copy.deepcopy(obj)
        new = copy.deepcopy(obj)
        new['metadata']['deletionTimestamp'] = rfc3339(now + grace)
        new['metadata']['deletionGracePeriodSeconds'] = grace
        new['metadata']['generation'] = new['metadata'].get('generation', 1) + 1
        if 'started_deleting' not in private:
            private['started_deleting'] = now
            for container in dig(new, 'spec', 'containers') or []:
                self.emit(new, 'Killing', 'Stopping container %s' % container.get('name'), component='kubelet',
                          host=dig(new, 'spec', 'nodeName'), field_path='spec.containers{%s}' % container.get('name'))
        try:
            shutdown = float((dig(new, 'metadata', 'annotations') or {}).get(SHUTDOWN_SECONDS, 0))
        except ValueError:
            shutdown = 0.0
        private['gone_at'] = min(private.get('gone_at', now + grace), now + min(grace, max(shutdown, 0.0)))
        return self.put(storage, new, old=old), False

    # ---------------------------------------------------------------- events

    def emit(self, involved, reason, message, kind='Normal', component='kubelet', host=None, field_path=None):
        """Record a core/v1 Event the way client-go's EventRecorder does."""
        now = self.now()
        meta = involved['metadata']
        namespace = meta.get('namespace') or 'default'
        reference = {'kind': involved.get('kind'), 'name': meta['name'], 'uid': meta.get('uid'), 'apiVersion': involved.get('apiVersion'),
                     'resourceVersion': meta.get('resourceVersion')}
        if meta.get('namespace'):
            reference['namespace'] = meta['namespace']
        if involved.get('kind') == 'Node' and component == 'kubelet':
            reference = {'kind': 'Node', 'name': meta['name'], 'uid': meta['name']}  # kubelet's nodeRef uses the name as UID
        if field_path:
            reference['fieldPath'] = field_path
        source = {'component': component}
        if host:
            source['host'] = host
        event = {'metadata': {'name': '%s.%x' % (meta['name'], int(now * 1e9) + random.randint(0, 999)), 'namespace': namespace},
                 'involvedObject': reference, 'reason': reason, 'message': message, 'source': source,
                 'firstTimestamp': rfc3339(now), 'lastTimestamp': rfc3339(now), 'count': 1, 'type': kind,
                 'eventTime': None, 'reportingComponent': component, 'reportingInstance': host or ''}
        if self.get('namespaces', '', namespace) is None:
            return None
        return self.create('events', event, admit=False)

    # ---------------------------------------------------------------- status the controllers maintain

    def with_status(self, storage, obj):
        """Objects whose status a controller derives from pods get it brought up to date before they are read."""
        if storage == 'poddisruptionbudgets':
            return self.sync_pdb(obj)
        if storage in ('daemonsets', 'replicasets', 'statefulsets'):
            return self.sync_workload(storage, obj)
        return obj

    def owned_pods(self, owner):
        uid = owner['metadata'].get('uid')
        return [pod for pod in self.items('pods', owner['metadata'].get('namespace'))
                if any(ref.get('uid') == uid and ref.get('controller') for ref in dig(pod, 'metadata', 'ownerReferences') or [])]

    def sync_workload(self, storage, obj):
        pods = [pod for pod in self.owned_pods(obj) if not terminal(pod)]
        active = [pod for pod in pods if not dig(pod, 'metadata', 'deletionTimestamp')]
        ready = [pod for pod in active if pod_ready(pod)]
        generation = obj['metadata'].get('generation', 1)
        if storage == 'daemonsets':
            status = {'currentNumberScheduled': len(active), 'numberMisscheduled': 0, 'desiredNumberScheduled': len(active),
                      'numberReady': len(ready), 'observedGeneration': generation, 'updatedNumberScheduled': len(active),
                      'numberAvailable': len(ready)}
            if len(active) > len(ready):
                status['numberUnavailable'] = len(active) - len(ready)
        else:
            status = {'replicas': len(active), 'fullyLabeledReplicas': len(active), 'readyReplicas': len(ready),
                      'availableReplicas': len(ready), 'observedGeneration': generation}
            if storage == 'statefulsets':
                status = {'replicas': len(active), 'readyReplicas': len(ready), 'currentReplicas': len(active), 'updatedReplicas': len(active),
                          'availableReplicas': len(ready), 'observedGeneration': generation, 'collisionCount': 0}
            for key in ('fullyLabeledReplicas', 'readyReplicas', 'availableReplicas'):
                if not status.get(key):
                    status.pop(key, None)
        if obj.get('status') != status:
            new = copy.deepcopy(obj)
            new['status'] = status
            return self.put(storage, new, old=copy.deepcopy(obj))
        return obj

    def expected_scale(self, pods):
        """The disruption controller's getExpectedScale."""
        scales = {}
        for pod in pods:
            reference = controller_of(pod)
            if reference is None:
                continue
            if reference.get('uid') in scales:
                continue
            storage = {'ReplicaSet': 'replicasets', 'StatefulSet': 'statefulsets'}.get(reference.get('kind'))
            owner = self.get(storage, pod['metadata']['namespace'], reference.get('name')) if storage else None
            if owner is None or owner['metadata'].get('uid') != reference.get('uid'):
                raise ValueError('found no controllers for pod "%s"' % pod['metadata']['name'])
            scales[reference['uid']] = dig(owner, 'spec', 'replicas') or 0
        return sum(scales.values())

    def pdb_pods(self, pdb):
        selector = dig(pdb, 'spec', 'selector')
        return [pod for pod in self.items('pods', pdb['metadata']['namespace']) if selector_matches(selector, dig(pod, 'metadata', 'labels'))]

    def sync_pdb(self, pdb):
        """The disruption controller: status.currentHealthy, desiredHealthy, expectedPods, disruptionsAllowed."""
        now = self.now()
        spec = pdb.get('spec') or {}
        pods = self.pdb_pods(pdb)
        old_status = pdb.get('status') or {}
        generation = pdb['metadata'].get('generation', 1)
        error = None
        expected, desired = 0, 0
        try:
            if spec.get('maxUnavailable') is not None:
                expected = self.expected_scale(pods)
                desired = max(expected - scaled_value(spec['maxUnavailable'], expected, True), 0)
            elif spec.get('minAvailable') is not None:
                if isinstance(spec['minAvailable'], int) and not isinstance(spec['minAvailable'], bool):
                    desired = spec['minAvailable']
                    expected = len(pods)
                else:
                    expected = self.expected_scale(pods)
                    desired = scaled_value(spec['minAvailable'], expected, True)
        except ValueError as exc:
            error = str(exc)
        if error is not None:
            status = copy.deepcopy(old_status)
            status['disruptionsAllowed'] = 0
            status.setdefault('currentHealthy', 0)
            status.setdefault('desiredHealthy', 0)
            status.setdefault('expectedPods', 0)
            self._set_condition(status, 'False', 'SyncFailed', error, generation, now)
        else:
            live = dict((pod['metadata']['name'], pod) for pod in pods if not dig(pod, 'metadata', 'deletionTimestamp'))
            disrupted = {}
            for name, stamp in (old_status.get('disruptedPods') or {}).items():
                when = parse_time(stamp) or 0
                if name in live and when + DISRUPTED_POD_TIMEOUT > now:
                    disrupted[name] = stamp
            healthy = sum(1 for name, pod in live.items() if name not in disrupted and pod_ready(pod))
            allowed = healthy - desired
            if expected <= 0 or allowed <= 0:
                allowed = 0
            status = {'observedGeneration': generation, 'disruptionsAllowed': allowed, 'currentHealthy': healthy,
                      'desiredHealthy': desired, 'expectedPods': expected}
            if disrupted:
                status['disruptedPods'] = disrupted
            status['conditions'] = copy.deepcopy(old_status.get('conditions') or [])
            if allowed > 0:
                self._set_condition(status, 'True', 'SufficientPods', '', generation, now)
            else:
                self._set_condition(status, 'False', 'InsufficientPods', '', generation, now)
        if status != old_status:
            new = copy.deepcopy(pdb)
            new['status'] = status
            return self.put('poddisruptionbudgets', new, old=copy.deepcopy(pdb))
        return pdb

    @staticmethod
    def _set_condition(status, state, reason, message, generation, now):
        conditions = status.setdefault('conditions', [])
        for condition in conditions:
            if condition.get('type') == 'DisruptionAllowed':
                if condition.get('status') != state:
                    condition['lastTransitionTime'] = rfc3339(now)
                condition.update({'status': state, 'reason': reason, 'message': message, 'observedGeneration': generation})
                return
        conditions.append({'type': 'DisruptionAllowed', 'status': state, 'observedGeneration': generation,
                           'lastTransitionTime': rfc3339(now), 'reason': reason, 'message': message})

    # ---------------------------------------------------------------- eviction (pkg/registry/core/pod/storage/eviction.go)

    def evict(self, namespace, name, eviction, dry_run=False):
        resource = BY_PATH[('', 'v1', 'pods')]
        if not isinstance(eviction, dict) or eviction.get('kind') not in (None, 'Eviction'):
            raise bad_request('not an Eviction')
        if dig(eviction, 'metadata', 'name') != name:
            raise bad_request('name in URL does not match name in Eviction object')
        options = eviction.get('deleteOptions') or {}
        dry_run = dry_run or bool(options.get('dryRun'))
        pod = self.get('pods', namespace, name)
        if pod is None:
            raise not_found(resource, name)
        preconditions = options.get('preconditions') or {}
        if preconditions.get('uid') and preconditions['uid'] != pod['metadata'].get('uid'):
            raise conflict(resource, name, 'Precondition failed: UID in precondition: %s, UID in object meta: %s'
                           % (preconditions['uid'], pod['metadata'].get('uid')))
        if preconditions.get('resourceVersion') and preconditions['resourceVersion'] != pod['metadata'].get('resourceVersion'):
            raise conflict(resource, name, 'Precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s'
                           % (preconditions['resourceVersion'], pod['metadata'].get('resourceVersion')))
        grace = options.get('gracePeriodSeconds')
        phase = dig(pod, 'status', 'phase')
        # canIgnorePDB: terminal, pending, or already terminating pods are deleted without looking at budgets.
        if phase in ('Succeeded', 'Failed', 'Pending') or dig(pod, 'metadata', 'deletionTimestamp'):
            if not dry_run and not dig(pod, 'metadata', 'deletionTimestamp'):
                self.delete(resource, pod, grace)
            return self._evicted()
        pdbs = [pdb for pdb in self.items('poddisruptionbudgets', namespace) if selector_matches(dig(pdb, 'spec', 'selector'), dig(pod, 'metadata', 'labels'))]
        if len(pdbs) > 1:
            return 500, {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure',
                         'message': 'This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.', 'code': 500}
        if pdbs:
            pdb = self.sync_pdb(pdbs[0])
            status = pdb.get('status') or {}
            policy = dig(pdb, 'spec', 'unhealthyPodEvictionPolicy') or 'IfHealthyBudget'
            skip_budget = False
            if not pod_ready(pod):
                if policy == 'AlwaysAllow':
                    skip_budget = True
                elif status.get('currentHealthy', 0) >= status.get('desiredHealthy', 0) and status.get('desiredHealthy', 0) > 0:
                    skip_budget = True
            if not skip_budget:
                self._check_and_decrement(pdb, name, dry_run)
        if not dry_run:
            self._disruption_target(pod, 'EvictionByEvictionAPI', 'Eviction API: evicting')
            self.delete(resource, self.get('pods', namespace, name), grace)
        return self._evicted()

    @staticmethod
    def _evicted():
        return 201, {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Success', 'code': 201}

    def _check_and_decrement(self, pdb, pod_name, dry_run):
        status = pdb.get('status') or {}
        pdb_name = pdb['metadata']['name']
        pdb_resource = BY_PATH[('policy', 'v1', 'poddisruptionbudgets')]
        if status.get('observedGeneration', 0) < pdb['metadata'].get('generation', 1):
            raise ApiError(429, 'TooManyRequests', "Cannot evict pod as it would violate the pod's disruption budget.",
                           {'causes': [{'reason': 'DisruptionBudget', 'message': 'The disruption budget %s is still being processed by the server.'
                                        % pdb_name}], 'retryAfterSeconds': 10}, headers={'Retry-After': '10'})
        if status.get('disruptionsAllowed', 0) < 0:
            raise ApiError(403, 'Forbidden', 'poddisruptionbudgets.policy "%s" is forbidden: pdb disruptions allowed is negative' % pdb_name,
                           details_for(pdb_resource, pdb_name))
        if len(status.get('disruptedPods') or {}) > 2000:
            raise ApiError(403, 'Forbidden', 'poddisruptionbudgets.policy "%s" is forbidden: DisruptedPods map too big - too many evictions not '
                           'confirmed by PDB controller' % pdb_name, details_for(pdb_resource, pdb_name))
        if status.get('disruptionsAllowed', 0) == 0:
            raise ApiError(429, 'TooManyRequests', "Cannot evict pod as it would violate the pod's disruption budget.",
                           {'causes': [{'reason': 'DisruptionBudget', 'message': 'The disruption budget %s needs %d healthy pods and has %d currently'
                                        % (pdb_name, status.get('desiredHealthy', 0), status.get('currentHealthy', 0))}]})
        if dry_run:
            return
        new = copy.deepcopy(pdb)
        new_status = new.setdefault('status', {})
        new_status['disruptionsAllowed'] = new_status.get('disruptionsAllowed', 0) - 1
        if new_status['disruptionsAllowed'] == 0:
            self._set_condition(new_status, 'False', 'InsufficientPods', '', new_status.get('observedGeneration', 1), self.now())
        new_status.setdefault('disruptedPods', {})[pod_name] = rfc3339(self.now())
        self.put('poddisruptionbudgets', new, old=copy.deepcopy(pdb))

    def _disruption_target(self, pod, reason, message):
        new = copy.deepcopy(pod)
        conditions = new.setdefault('status', {}).setdefault('conditions', [])
        conditions[:] = [c for c in conditions if c.get('type') != 'DisruptionTarget']
        conditions.append({'type': 'DisruptionTarget', 'status': 'True', 'lastProbeTime': None,
                           'lastTransitionTime': rfc3339(self.now()), 'reason': reason, 'message': message})
        self.put('pods', new, old=copy.deepcopy(pod))

    # ---------------------------------------------------------------- pod life cycle (kubelet)

    def finish_pod(self, pod, phase='Succeeded', exit_code=None, reason=None):
        """The pod's containers exit: the pod becomes Succeeded or Failed, as kubelet reports it."""
        now = rfc3339(self.now())
        new = copy.deepcopy(pod)
        status = new.setdefault('status', {})
        status['phase'] = phase
        exit_code = (0 if phase == 'Succeeded' else 1) if exit_code is None else exit_code
        reason = reason or ('Completed' if exit_code == 0 else 'Error')
        for entry in status.get('containerStatuses') or []:
            started = dig(entry, 'state', 'running', 'startedAt') or status.get('startTime') or now
            entry['state'] = {'terminated': {'exitCode': exit_code, 'reason': reason, 'startedAt': started, 'finishedAt': now,
                                             'containerID': entry.get('containerID', '')}}
            entry['ready'] = False
            entry['started'] = False
        for condition in status.get('conditions') or []:
            if condition.get('type') in ('Ready', 'ContainersReady', 'PodReadyToStartContainers') and condition.get('status') != 'False':
                condition['status'] = 'False'
                condition['lastTransitionTime'] = now
                if condition['type'] != 'PodReadyToStartContainers':
                    condition['reason'] = 'PodCompleted'
        return self.put('pods', new, old=copy.deepcopy(pod))

    def set_pod_ready(self, pod, ready):
        new = copy.deepcopy(pod)
        now = rfc3339(self.now())
        for condition in dig(new, 'status', 'conditions') or []:
            if condition.get('type') in ('Ready', 'ContainersReady'):
                wanted = 'True' if ready else 'False'
                if condition.get('status') != wanted:
                    condition['status'] = wanted
                    condition['lastTransitionTime'] = now
                    if ready:
                        condition.pop('reason', None)
                    else:
                        condition['reason'] = 'ContainersNotReady'
        for entry in dig(new, 'status', 'containerStatuses') or []:
            if 'running' in (entry.get('state') or {}):
                entry['ready'] = bool(ready)
        return self.put('pods', new, old=copy.deepcopy(pod))

    def set_node_ready(self, node, state, reason=None, message=None):
        """Ready condition 'True', 'False' or 'Unknown' (kubelet stopped posting)."""
        new = copy.deepcopy(node)
        now = rfc3339(self.now())
        defaults = {'True': ('KubeletReady', 'kubelet is posting ready status'),
                    'False': ('KubeletNotReady', 'container runtime network not ready: NetworkReady=false'),
                    'Unknown': ('NodeStatusUnknown', 'Kubelet stopped posting node status.')}[state]
        for condition in dig(new, 'status', 'conditions') or []:
            if condition.get('type') == 'Ready':
                if condition.get('status') != state:
                    condition['lastTransitionTime'] = now
                condition.update({'status': state, 'reason': reason or defaults[0], 'message': message or defaults[1], 'lastHeartbeatTime': now})
        self._controller_taints(new, self.now())
        result = self.put('nodes', new, old=copy.deepcopy(node))
        self.emit(result, 'NodeReady' if state == 'True' else 'NodeNotReady', 'Node %s status is now: %s'
                  % (node['metadata']['name'], 'NodeReady' if state == 'True' else 'NodeNotReady'),
                  component='kubelet' if state == 'True' else 'node-controller', host=node['metadata']['name'] if state == 'True' else None)
        return result

    # ---------------------------------------------------------------- controllers

    def _controller_taints(self, node, now):
        """The node lifecycle controller's unschedulable / not-ready / unreachable taints (with timeAdded). True if changed."""
        spec = node.setdefault('spec', {})
        taints = list(spec.get('taints') or [])
        wanted = []
        if spec.get('unschedulable'):
            wanted.append((UNSCHEDULABLE_TAINT, 'NoSchedule'))
        ready = node_ready(node)
        if ready == 'False':
            wanted += [(NOT_READY_TAINT, 'NoSchedule'), (NOT_READY_TAINT, 'NoExecute')]
        elif ready == 'Unknown':
            wanted += [(UNREACHABLE_TAINT, 'NoSchedule'), (UNREACHABLE_TAINT, 'NoExecute')]
        managed = {UNSCHEDULABLE_TAINT, NOT_READY_TAINT, UNREACHABLE_TAINT}
        kept = [t for t in taints if t.get('key') not in managed or (t.get('key'), t.get('effect')) in wanted]
        for key, effect in wanted:
            if not any(t.get('key') == key and t.get('effect') == effect for t in kept):
                kept.append({'key': key, 'effect': effect, 'timeAdded': rfc3339(now)})
        if kept == taints:
            return False
        if kept:
            spec['taints'] = kept
        else:
            spec.pop('taints', None)
        return True

    def tick(self):
        """One pass of the simulated controllers and kubelets."""
        with self.lock:
            now = self.now()
            for node in self.items('nodes'):
                self._node_pass(node, now)
            for pod in self.items('pods'):
                self._pod_pass(pod, now)
            for pod in self.items('pods'):
                if not dig(pod, 'spec', 'nodeName') and not dig(pod, 'metadata', 'deletionTimestamp'):
                    self.schedule(pod)
            for storage in ('poddisruptionbudgets', 'daemonsets', 'replicasets', 'statefulsets'):
                for obj in self.items(storage):
                    self.with_status(storage, obj)

    def _node_pass(self, node, now):
        name = node['metadata']['name']
        lease = self.get('leases', 'kube-node-lease', name)
        if lease is not None and node_ready(node) == 'True' and now - (parse_time(dig(lease, 'spec', 'renewTime')) or 0) >= 10:
            renewed = copy.deepcopy(lease)
            renewed['spec']['renewTime'] = micro_time(now)
            self.put('leases', renewed, old=copy.deepcopy(lease))
        schedulable = not dig(node, 'spec', 'unschedulable')
        if self.node_schedulable.get(name, True) != schedulable:
            self.node_schedulable[name] = schedulable
            self.emit(node, 'NodeSchedulable' if schedulable else 'NodeNotSchedulable', 'Node %s status is now: %s'
                      % (name, 'NodeSchedulable' if schedulable else 'NodeNotSchedulable'), component='kubelet', host=name)
            node = self.get('nodes', '', name)
        new = copy.deepcopy(node)
        if self._controller_taints(new, now):
            node = self.put('nodes', new, old=copy.deepcopy(node))
        # The taint eviction controller: pods that do not tolerate a NoExecute taint are deleted.
        taints = [t for t in dig(node, 'spec', 'taints') or [] if t.get('effect') == 'NoExecute']
        for taint in taints:
            self.taints_seen.setdefault((name, taint.get('key'), taint.get('value'), taint.get('effect')), now)
        if not taints:
            return
        for pod in self.items('pods'):
            if dig(pod, 'spec', 'nodeName') != name or dig(pod, 'metadata', 'deletionTimestamp') or terminal(pod):
                continue
            tolerations = dig(pod, 'spec', 'tolerations') or []
            deadline = None
            evict = False
            for taint in taints:
                matching = [t for t in tolerations if tolerates(t, taint)]
                if not matching:
                    evict = True
                    break
                seconds = [t.get('tolerationSeconds') for t in matching]
                if any(value is None for value in seconds):
                    continue
                added = parse_time(taint.get('timeAdded')) or self.taints_seen[(name, taint.get('key'), taint.get('value'), taint.get('effect'))]
                limit = added + max(min(seconds), 0)
                deadline = limit if deadline is None else min(deadline, limit)
            if evict or (deadline is not None and now >= deadline):
                self.emit(pod, 'TaintManagerEviction', 'Marking for deletion Pod %s/%s' % (pod['metadata']['namespace'], pod['metadata']['name']),
                          component='taint-eviction-controller')
                self._disruption_target(pod, 'DeletionByTaintManager', 'Taint manager: deleting due to NoExecute taint')
                self.delete(BY_PATH[('', 'v1', 'pods')], self.get('pods', pod['metadata']['namespace'], pod['metadata']['name']))

    def _pod_pass(self, pod, now):
        meta = pod['metadata']
        private = self.private.setdefault(meta.get('uid'), {})
        if meta.get('deletionTimestamp'):
            if now >= private.get('gone_at', parse_time(meta['deletionTimestamp']) or now):
                if not meta.get('finalizers'):
                    self.remove('pods', pod)  # kubelet confirmed the containers stopped
                elif not terminal(pod):
                    self.finish_pod(pod, 'Failed', exit_code=143, reason='Error')  # stopped, but kept for its finalizers
            return
        if dig(pod, 'status', 'phase') != 'Running':
            return
        annotation = (meta.get('annotations') or {}).get(FINISH_AFTER)
        if annotation is None:
            return
        try:
            seconds = float(annotation)
        except ValueError:
            return
        started = parse_time(dig(pod, 'status', 'startTime')) or parse_time(meta.get('creationTimestamp')) or now
        if now >= started + seconds:
            self.finish_pod(pod)

    def schedule(self, pod):
        """A minimal default-scheduler: ready, schedulable nodes whose taints the pod tolerates, nodeSelector, and GPUs that fit."""
        now = self.now()
        feasible = []
        nodes = self.items('nodes')
        for node in nodes:
            if node_ready(node) != 'True' or dig(node, 'spec', 'unschedulable'):
                continue
            tolerations = dig(pod, 'spec', 'tolerations') or []
            if any(t.get('effect') in ('NoSchedule', 'NoExecute') and not any(tolerates(tol, t) for tol in tolerations)
                   for t in dig(node, 'spec', 'taints') or []):
                continue
            labels = dig(node, 'metadata', 'labels') or {}
            if any(labels.get(key) != value for key, value in (dig(pod, 'spec', 'nodeSelector') or {}).items()):
                continue
            wanted = pod_requests(pod, 'nvidia.com/gpu')
            if wanted:
                allocatable = quantity((dig(node, 'status', 'allocatable') or {}).get('nvidia.com/gpu'))
                used = sum(pod_requests(other, 'nvidia.com/gpu') for other in self.items('pods')
                           if dig(other, 'spec', 'nodeName') == node['metadata']['name'] and not terminal(other))
                if used + wanted > allocatable:
                    continue
            feasible.append(node)
        if not feasible:
            new = copy.deepcopy(pod)
            conditions = new.setdefault('status', {}).setdefault('conditions', [])
            message = '0/%d nodes are available: %d node(s) did not match the pod\'s requirements.' % (len(nodes), len(nodes))
            if not any(c.get('type') == 'PodScheduled' and c.get('message') == message for c in conditions):
                conditions[:] = [c for c in conditions if c.get('type') != 'PodScheduled']
                conditions.append({'type': 'PodScheduled', 'status': 'False', 'lastProbeTime': None, 'lastTransitionTime': rfc3339(now),
                                   'reason': 'Unschedulable', 'message': message})
                self.put('pods', new, old=copy.deepcopy(pod))
                self.emit(new, 'FailedScheduling', message, kind='Warning', component='default-scheduler')
            return None
        counts = dict((node['metadata']['name'], 0) for node in feasible)
        for other in self.items('pods'):
            if dig(other, 'spec', 'nodeName') in counts and not terminal(other):
                counts[dig(other, 'spec', 'nodeName')] += 1
        chosen = min(feasible, key=lambda node: (counts[node['metadata']['name']], node['metadata']['name']))
        new = copy.deepcopy(pod)
        new['spec']['nodeName'] = chosen['metadata']['name']
        new['status'] = {'phase': 'Running', 'qosClass': dig(pod, 'status', 'qosClass') or self._qos(pod)}
        self._start_pod(new, now)
        result = self.put('pods', new, old=copy.deepcopy(pod))
        message = 'Successfully assigned %s/%s to %s' % (new['metadata']['namespace'], new['metadata']['name'], chosen['metadata']['name'])
        self.emit(result, 'Scheduled', message, component='default-scheduler')
        return result


# --------------------------------------------------------------------------------------------
# Events: core/v1 <-> events.k8s.io/v1
# --------------------------------------------------------------------------------------------

def event_to_v1(event):
    """A stored core/v1 Event as events.k8s.io/v1."""
    out = {'kind': 'Event', 'apiVersion': 'events.k8s.io/v1', 'metadata': copy.deepcopy(event['metadata']),
           'eventTime': event.get('eventTime')}
    for source, target in (('series', 'series'), ('reportingComponent', 'reportingController'), ('reportingInstance', 'reportingInstance'),
                           ('action', 'action'), ('reason', 'reason'), ('involvedObject', 'regarding'), ('related', 'related'),
                           ('message', 'note'), ('type', 'type'), ('source', 'deprecatedSource'), ('firstTimestamp', 'deprecatedFirstTimestamp'),
                           ('lastTimestamp', 'deprecatedLastTimestamp'), ('count', 'deprecatedCount')):
        value = event.get(source)
        if value not in (None, '', {}, 0) or target in ('regarding', 'deprecatedSource'):
            out[target] = copy.deepcopy(value)
    if 'series' in out and isinstance(out['series'], dict):
        out['series'] = {'count': out['series'].get('count', 0), 'lastObservedTime': out['series'].get('lastObservedTime')}
    if 'deprecatedFirstTimestamp' not in out:
        out['deprecatedFirstTimestamp'] = None
    if 'deprecatedLastTimestamp' not in out:
        out['deprecatedLastTimestamp'] = None
    return out


def event_from_v1(event):
    """An events.k8s.io/v1 Event as core/v1, for storage."""
    out = {'kind': 'Event', 'apiVersion': 'v1', 'metadata': copy.deepcopy(event.get('metadata') or {})}
    for source, target in (('series', 'series'), ('reportingController', 'reportingComponent'), ('reportingInstance', 'reportingInstance'),
                           ('action', 'action'), ('reason', 'reason'), ('regarding', 'involvedObject'), ('related', 'related'),
                           ('note', 'message'), ('type', 'type'), ('deprecatedSource', 'source'), ('deprecatedFirstTimestamp', 'firstTimestamp'),
                           ('deprecatedLastTimestamp', 'lastTimestamp'), ('deprecatedCount', 'count'), ('eventTime', 'eventTime')):
        if source in event:
            out[target] = copy.deepcopy(event[source])
    return out


def validate_events_v1(resource, event):
    causes = []
    name = dig(event, 'metadata', 'name') or ''
    for field in ('eventTime', 'reportingController', 'reportingInstance', 'action', 'reason'):
        if not event.get(field):
            causes.append(('FieldValueRequired', field, 'Required value'))
    if event.get('type') not in ('Normal', 'Warning'):
        causes.append(('FieldValueNotSupported', 'type', 'Unsupported value: "%s": supported values: "Normal", "Warning"' % (event.get('type') or '')))
    if len(event.get('note') or '') > 1024:
        causes.append(('FieldValueTooLong', 'note', 'Too long: may not be more than 1024 bytes'))
    if causes:
        raise invalid(resource, name, causes)


# --------------------------------------------------------------------------------------------
# Unknown fields: dropped with a warning, or refused under fieldValidation=Strict
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Table output (server-side printing, what kubectl get shows)
# --------------------------------------------------------------------------------------------

NAME_COLUMN = {'name': 'Name', 'type': 'string', 'format': 'name', 'description': 'Name must be unique within a namespace. '
               'Is required when creating resources, although some resources may allow a client to request the generation of an appropriate '
               'name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. '
               'More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names', 'priority': 0}
AGE_DESCRIPTION = ('CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed '
                   'to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 '
                   'form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: '
                   'https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata')


def column(name, description='', priority=0, kind='string'):
    return {'name': name, 'type': kind, 'format': '', 'description': description, 'priority': priority}


def _pod_row(pod, now):
    status = pod.get('status') or {}
    phase = status.get('phase') or ''
    reason = status.get('reason') or phase
    restarts, ready, total, running = 0, 0, len(dig(pod, 'spec', 'containers') or []), False
    for entry in reversed(status.get('containerStatuses') or []):
        restarts += entry.get('restartCount', 0)
        state = entry.get('state') or {}
        if (state.get('waiting') or {}).get('reason'):
            reason = state['waiting']['reason']
        elif (state.get('terminated') or {}).get('reason'):
            reason = state['terminated']['reason']
        elif 'terminated' in state:
            reason = 'ExitCode:%d' % state['terminated'].get('exitCode', 0)
        elif entry.get('ready') and 'running' in state:
            running = True
            ready += 1
    if reason == 'Completed' and running:
        reason = 'Running' if pod_ready(pod) else 'NotReady'
    if dig(pod, 'metadata', 'deletionTimestamp') and not terminal(pod):
        reason = 'Terminating'
    nominated = status.get('nominatedNodeName') or '<none>'
    gates = dig(pod, 'spec', 'readinessGates') or []
    return [pod['metadata']['name'], '%d/%d' % (ready, total), reason, str(restarts), since(dig(pod, 'metadata', 'creationTimestamp'), now),
            status.get('podIP') or '<none>', dig(pod, 'spec', 'nodeName') or '<none>', nominated,
            '<none>' if not gates else '%d/%d' % (0, len(gates))]


def _node_row(node, now):
    ready = None
    for condition in dig(node, 'status', 'conditions') or []:
        if condition.get('type') == 'Ready':
            ready = 'Ready' if condition.get('status') == 'True' else 'NotReady'
    states = [ready or 'Unknown']
    if dig(node, 'spec', 'unschedulable'):
        states.append('SchedulingDisabled')
    roles = set()
    for key, value in (dig(node, 'metadata', 'labels') or {}).items():
        if key.startswith('node-role.kubernetes.io/'):
            roles.add(key[len('node-role.kubernetes.io/'):])
        elif key == 'kubernetes.io/role' and value:
            roles.add(value)
    addresses = dig(node, 'status', 'addresses') or []
    info = dig(node, 'status', 'nodeInfo') or {}
    return [node['metadata']['name'], ','.join(states), ','.join(sorted(roles)) or '<none>', since(dig(node, 'metadata', 'creationTimestamp'), now),
            info.get('kubeletVersion', ''),
            next((a['address'] for a in addresses if a.get('type') == 'InternalIP'), '<none>'),
            next((a['address'] for a in addresses if a.get('type') == 'ExternalIP'), '<none>'),
            info.get('osImage') or '<unknown>', info.get('kernelVersion') or '<unknown>', info.get('containerRuntimeVersion') or '<unknown>']


def _event_row(event, now):
    last = event.get('lastTimestamp') or event.get('eventTime')
    first = event.get('firstTimestamp') or event.get('eventTime')
    last_seen = since(last, now)
    series = event.get('series')
    if series:
        last_seen = '%s (x%d over %s)' % (since(series.get('lastObservedTime'), now), series.get('count', 0), since(event.get('eventTime'), now))
    elif (event.get('count') or 0) > 1:
        last_seen = '%s (x%d over %s)' % (since(last, now), event['count'], since(first, now))
    involved = event.get('involvedObject') or {}
    source = event.get('source') or {}
    component = source.get('component') or event.get('reportingComponent') or ''
    host = source.get('host') or event.get('reportingInstance') or ''
    source_text = '%s, %s' % (component, host) if host else component
    return [last_seen, event.get('type') or '', event.get('reason') or '', '%s/%s' % ((involved.get('kind') or '').lower(), involved.get('name') or ''),
            involved.get('fieldPath') or '', source_text, (event.get('message') or '').strip(), since(first, now),
            str(event.get('count') or 1) if event.get('count') else '1', event['metadata']['name']]


def _containers(template):
    containers = dig(template, 'spec', 'containers') or []
    return ','.join(c.get('name', '') for c in containers), ','.join(c.get('image', '') for c in containers)


def _daemonset_row(obj, now):
    status = obj.get('status') or {}
    names, images = _containers(dig(obj, 'spec', 'template'))
    selector = dig(obj, 'spec', 'template', 'spec', 'nodeSelector') or {}
    return [obj['metadata']['name'], status.get('desiredNumberScheduled', 0), status.get('currentNumberScheduled', 0), status.get('numberReady', 0),
            status.get('updatedNumberScheduled', 0), status.get('numberAvailable', 0),
            ','.join('%s=%s' % item for item in sorted(selector.items())) or '<none>', since(dig(obj, 'metadata', 'creationTimestamp'), now),
            names, images, selector_string(dig(obj, 'spec', 'selector'))]


def _replicaset_row(obj, now):
    status = obj.get('status') or {}
    names, images = _containers(dig(obj, 'spec', 'template'))
    return [obj['metadata']['name'], dig(obj, 'spec', 'replicas') or 0, status.get('replicas', 0), status.get('readyReplicas', 0),
            since(dig(obj, 'metadata', 'creationTimestamp'), now), names, images, selector_string(dig(obj, 'spec', 'selector'))]


def _statefulset_row(obj, now):
    status = obj.get('status') or {}
    names, images = _containers(dig(obj, 'spec', 'template'))
    return [obj['metadata']['name'], '%d/%d' % (status.get('readyReplicas', 0), dig(obj, 'spec', 'replicas') or 0),
            since(dig(obj, 'metadata', 'creationTimestamp'), now), names, images]


def _pdb_row(obj, now):
    spec = obj.get('spec') or {}
    return [obj['metadata']['name'], 'N/A' if spec.get('minAvailable') is None else str(spec['minAvailable']),
            'N/A' if spec.get('maxUnavailable') is None else str(spec['maxUnavailable']),
            dig(obj, 'status', 'disruptionsAllowed') or 0, since(dig(obj, 'metadata', 'creationTimestamp'), now)]


def _namespace_row(obj, now):
    return [obj['metadata']['name'], dig(obj, 'status', 'phase') or '', since(dig(obj, 'metadata', 'creationTimestamp'), now)]


def _events_v1_row(event, now):
    return _event_row(event_from_v1(event), now)


def _configmap_row(obj, now):
    return [obj['metadata']['name'], len(obj.get('data') or {}) + len(obj.get('binaryData') or {}),
            since(dig(obj, 'metadata', 'creationTimestamp'), now)]


def _lease_row(obj, now):
    return [obj['metadata']['name'], dig(obj, 'spec', 'holderIdentity') or '', since(dig(obj, 'metadata', 'creationTimestamp'), now)]


TABLES = {
    'pods': ([NAME_COLUMN, column('Ready', 'The aggregate readiness state of this pod for accepting traffic.'),
              column('Status', 'The aggregate status of the containers in this pod.'),
              column('Restarts', 'The number of times the containers in this pod have been restarted and when the last container in this pod '
                                 'has restarted.'),
              column('Age', AGE_DESCRIPTION), column('IP', 'IP address allocated to the pod. Routable at least within the cluster. Empty if not '
                                                           'yet allocated.', 1),
              column('Node', 'NodeName indicates in which node this pod is scheduled.', 1),
              column('Nominated Node', 'nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled '
                                       'right away as preemption victims receive their graceful termination periods.', 1),
              column('Readiness Gates', 'If specified, all readiness gates will be evaluated for pod readiness.', 1)], _pod_row),
    'nodes': ([NAME_COLUMN, column('Status', 'The status of the node'), column('Roles', 'The roles of the node'), column('Age', AGE_DESCRIPTION),
               column('Version', 'Kubelet Version reported by the node.'), column('Internal-IP', 'List of addresses reachable to the node.', 1),
               column('External-IP', 'List of addresses reachable to the node.', 1), column('OS-Image', 'OS Image reported by the node.', 1),
               column('Kernel-Version', 'Kernel Version reported by the node.', 1),
               column('Container-Runtime', 'ContainerRuntime Version reported by the node.', 1)], _node_row),
    'events': ([column('Last Seen', 'The time at which the most recent occurrence of this event was recorded.'),
                column('Type', 'Type of this event (Normal, Warning), new types could be added in the future'),
                column('Reason', 'This should be a short, machine understandable string that gives the reason for the transition into the '
                                 'object\'s current status.'),
                column('Object', 'The object that this event is about.'), column('Subobject', 'The subobject this event is about.', 1),
                column('Source', 'The component reporting this event. Should be a short machine understandable string.', 1),
                column('Message', 'A human-readable description of the status of this operation.'),
                column('First Seen', 'The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)', 1),
                column('Count', 'The number of times this event has occurred.', 1), dict(NAME_COLUMN, priority=1)], _event_row),
    'daemonsets': ([NAME_COLUMN, column('Desired', 'The total number of nodes that should be running the daemon pod (including nodes correctly '
                                                   'running the daemon pod).', kind='integer'),
                    column('Current', 'The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.',
                           kind='integer'),
                    column('Ready', 'numberReady is the number of nodes that should be running the daemon pod and have one or more of the daemon '
                                    'pod running with a Ready Condition.', kind='integer'),
                    column('Up-to-date', 'The total number of nodes that are running updated daemon pod', kind='integer'),
                    column('Available', 'The number of nodes that should be running the daemon pod and have one or more of the daemon pod running '
                                        'and available (ready for at least spec.minReadySeconds)', kind='integer'),
                    column('Node Selector', 'NodeSelector is a selector which must be true for the pod to fit on a node.'),
                    column('Age', AGE_DESCRIPTION), column('Containers', 'Names of each container in the template.', 1),
                    column('Images', 'Images referenced by each container in the template.', 1),
                    column('Selector', 'A label query over pods that are managed by the daemon set.', 1)], _daemonset_row),
    'replicasets': ([NAME_COLUMN, column('Desired', 'Number of desired pods.', kind='integer'),
                     column('Current', 'Replicas is the most recently observed number of replicas.', kind='integer'),
                     column('Ready', 'The number of ready replicas for this replica set.', kind='integer'), column('Age', AGE_DESCRIPTION),
                     column('Containers', 'Names of each container in the template.', 1),
                     column('Images', 'Images referenced by each container in the template.', 1),
                     column('Selector', 'Selector is a label query over pods that should match the replica count.', 1)], _replicaset_row),
    'statefulsets': ([NAME_COLUMN, column('Ready', 'Number of the pod with ready state'), column('Age', AGE_DESCRIPTION),
                      column('Containers', 'Names of each container in the template.', 1),
                      column('Images', 'Images referenced by each container in the template.', 1)], _statefulset_row),
    'poddisruptionbudgets': ([NAME_COLUMN, column('Min Available', 'The minimum number of pods that must be available simultaneously.'),
                              column('Max Unavailable', 'The maximum number of pods that may be unavailable simultaneously.'),
                              column('Allowed Disruptions', 'Calculated number of pods that may be disrupted at this time.', kind='integer'),
                              column('Age', AGE_DESCRIPTION)], _pdb_row),
    'namespaces': ([NAME_COLUMN, column('Status', 'The status of the namespace'), column('Age', AGE_DESCRIPTION)], _namespace_row),
    'configmaps': ([NAME_COLUMN, column('Data', 'Number of data in configmap', kind='integer'), column('Age', AGE_DESCRIPTION)], _configmap_row),
    'leases': ([NAME_COLUMN, column('Holder', 'Name of the holder'), column('Age', AGE_DESCRIPTION)], _lease_row),
}


def partial_metadata(obj):
    return {'kind': 'PartialObjectMetadata', 'apiVersion': 'meta.k8s.io/v1', 'metadata': copy.deepcopy(obj['metadata'])}


def to_table(resource, objects, include, now, list_meta=None):
    columns, row_function = TABLES.get(resource.storage if resource.group != 'events.k8s.io' else 'events', (None, None))
    if resource.group == 'events.k8s.io':
        row_function = _events_v1_row
    rows = []
    for obj in objects:
        if columns is None:
            cells = [obj['metadata']['name'], dig(obj, 'metadata', 'creationTimestamp')]
        else:
            cells = row_function(obj, now)
        row = {'cells': cells}
        if resource.storage == 'pods' and terminal(obj):
            row['conditions'] = [{'type': 'Completed', 'status': 'True', 'reason': dig(obj, 'status', 'phase'), 'message': 'The pod has completed '
                                  'successfully.' if dig(obj, 'status', 'phase') == 'Succeeded' else 'The pod failed.'}]
        if include == 'Object':
            row['object'] = obj
        elif include != 'None':
            row['object'] = partial_metadata(obj)
        rows.append(row)
    if columns is None:
        columns = [NAME_COLUMN, column('Created At', AGE_DESCRIPTION, kind='date')]
    return {'kind': 'Table', 'apiVersion': 'meta.k8s.io/v1', 'metadata': list_meta or {}, 'columnDefinitions': columns, 'rows': rows}


# --------------------------------------------------------------------------------------------
# Discovery documents
# --------------------------------------------------------------------------------------------

def resource_list(group, version):
    resources = []
    for resource in RESOURCES:
        if resource.group != group or resource.version != version:
            continue
        entry = {'name': resource.plural, 'singularName': resource.singular, 'namespaced': resource.namespaced, 'kind': resource.kind,
                 'verbs': resource.verbs}
        if resource.short_names:
            entry['shortNames'] = resource.short_names
        if resource.categories:
            entry['categories'] = resource.categories
        resources.append(entry)
        for name, (sub_group, sub_version, sub_kind, verbs) in sorted(resource.subresources.items()):
            entry = {'name': resource.plural + '/' + name, 'singularName': '', 'namespaced': resource.namespaced}
            if (sub_group, sub_version) != (group, version):
                entry['group'] = sub_group
                entry['version'] = sub_version
            entry['kind'] = sub_kind
            entry['verbs'] = verbs
            resources.append(entry)
    return {'kind': 'APIResourceList', 'apiVersion': 'v1', 'groupVersion': group + '/' + version if group else version, 'resources': resources}


def api_group(group):
    versions = [{'groupVersion': group + '/' + version, 'version': version} for name, version in GROUPS if name == group]
    return {'kind': 'APIGroup', 'apiVersion': 'v1', 'name': group, 'versions': versions, 'preferredVersion': versions[0]}


def group_list():
    names = []
    for name, _version in GROUPS:
        if name not in names:
            names.append(name)
    groups = [api_group(name) for name in names]
    for group in groups:
        group.pop('kind')
        group.pop('apiVersion')
    return {'kind': 'APIGroupList', 'apiVersion': 'v1', 'groups': groups}


def aggregated(legacy):
    """apidiscovery.k8s.io/v2 APIGroupDiscoveryList for /api (legacy) or /apis."""
    items = []
    groups = [('', 'v1')] if legacy else GROUPS
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
            for resource in RESOURCES:
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


def openapi_v3_document(group, version):
    """A minimal OpenAPI v3 document for one group/version: the operations and their query parameters, no schemas.

    Enough for kubectl create/apply to see that the server validates fields itself (fieldValidation).
    """
    parameters = [{'name': name, 'in': 'query', 'schema': {'type': 'string', 'uniqueItems': True}}
                  for name in ('dryRun', 'fieldManager', 'fieldValidation', 'pretty')]
    paths = {}
    prefix = '/apis/%s/%s' % (group, version) if group else '/api/v1'
    for resource in RESOURCES:
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


def openapi_v3_root():
    paths = {'api/v1': {'serverRelativeURL': '/openapi/v3/api/v1?hash=%s' % uuid.uuid5(uuid.NAMESPACE_URL, 'api/v1').hex.upper()}}
    for group, version in GROUPS:
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


# --------------------------------------------------------------------------------------------
# The REST API
# --------------------------------------------------------------------------------------------

class Response:
    def __init__(self, code, body, content_type='application/json', headers=None, stream=None):
        self.code = code
        self.body = body
        self.content_type = content_type
        self.headers = headers or {}
        self.stream = stream


def single(query, name, default=None):
    values = query.get(name)
    return values[-1] if values else default


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

    def route(self, method, path, query, headers, body):
        accept = headers.get('Accept', '')
        if path in ('/healthz', '/livez', '/readyz'):
            return Response(200, 'ok', 'text/plain; charset=utf-8')
        if path == '/version':
            return Response(200, dict(KUBE_VERSION))
        if path == '/openapi/v3':
            return Response(200, openapi_v3_root())
        if path.startswith('/openapi/v3/'):
            parts = path[len('/openapi/v3/'):].strip('/').split('/')
            if parts == ['api', 'v1']:
                return Response(200, openapi_v3_document('', 'v1'))
            if len(parts) == 3 and parts[0] == 'apis' and (parts[1], parts[2]) in GROUPS:
                return Response(200, openapi_v3_document(parts[1], parts[2]))
            return Response(404, '404 page not found\n', 'text/plain; charset=utf-8')
        if path in ('/api', '/api/'):
            if wants_aggregated(accept):
                return Response(200, aggregated(True), AGGREGATED_TYPE)
            return Response(200, {'kind': 'APIVersions', 'versions': ['v1'],
                                  'serverAddressByClientCIDRs': [{'clientCIDR': '0.0.0.0/0', 'serverAddress': self.address}]})
        if path in ('/apis', '/apis/'):
            if wants_aggregated(accept):
                return Response(200, aggregated(False), AGGREGATED_TYPE)
            return Response(200, group_list())
        segments = [segment for segment in path.split('/') if segment]
        if not segments or segments[0] not in ('api', 'apis'):
            return Response(404, '404 page not found\n', 'text/plain; charset=utf-8')
        if segments[0] == 'api':
            if len(segments) < 2 or segments[1] != 'v1':
                raise path_not_found()
            group, version, rest = '', 'v1', segments[2:]
        else:
            if len(segments) == 2 and any(g == segments[1] for g, _v in GROUPS):
                return Response(200, api_group(segments[1]))
            if len(segments) < 3 or (segments[1], segments[2]) not in GROUPS:
                raise path_not_found()
            group, version, rest = segments[1], segments[2], segments[3:]
        if not rest:
            if method != 'GET':
                raise method_not_allowed()
            return Response(200, resource_list(group, version))
        namespace = None
        if rest[0] == 'namespaces' and len(rest) >= 3 and (group, version, rest[2]) in BY_PATH and BY_PATH[(group, version, rest[2])].namespaced:
            namespace, rest = rest[1], rest[2:]
        resource = BY_PATH.get((group, version, rest[0]))
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
        if resource.storage in ('pods', 'daemonsets', 'replicasets', 'statefulsets', 'poddisruptionbudgets'):
            document.pop('status', None)  # PrepareForCreate resets the status (nodes register with theirs)
        obj = self.store.create(resource.storage, document, admit=True, dry_run=dry_run)
        return Response(201, self.present(resource, obj), headers={'Warning': warnings})

    def patch(self, resource, namespace, name, subresource, headers, body, dry_run, query):
        content_type = (headers.get('Content-Type') or '').split(';')[0].strip().lower()
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
                    storage = KIND_TO_STORAGE.get((obj or {}).get('kind'))
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


# --------------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------------

class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    # TCP_NODELAY, as Go's net/http sets it: without it a keep-alive client waits for the delayed ACK (40 ms a request).
    disable_nagle_algorithm = True
    server_version = 'gpufleet-fake-apiserver'
    sys_version = ''

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        if getattr(self.server, 'verbose', False):
            sys.stderr.write('%s - %s\n' % (self.address_string(), format % args))

    def _body(self):
        if 'chunked' in (self.headers.get('Transfer-Encoding') or '').lower():
            data = b''
            while True:
                size = int(self.rfile.readline().strip().split(b';')[0] or b'0', 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get('Content-Length') or 0)
        return self.rfile.read(length) if length else b''

    def _dispatch(self, method):
        body = self._body()
        try:
            response = self.server.api.handle(method, self.path, self.headers, body)
        except Exception as error:  # a bug here must still answer like an apiserver does
            response = Response(500, ApiError(500, 'InternalError', 'Internal error occurred: %s: %s' % (type(error).__name__, error), {}).status())
            if getattr(self.server, 'verbose', False):
                traceback.print_exc()
        entry = {'time': time.time(), 'method': method, 'path': self.path, 'contentType': self.headers.get('Content-Type'),
                 'accept': self.headers.get('Accept'), 'userAgent': self.headers.get('User-Agent'), 'code': response.code,
                 'warnings': list(response.headers.get('Warning') or [])}
        if body:
            try:
                entry['body'] = json.loads(body.decode('utf-8'))
            except ValueError:
                entry['body'] = body.decode('utf-8', 'replace')
        if not self.path.startswith('/_sim'):
            self.server.store.log_request(entry)
        if response.stream is not None:
            self._stream(response)
            return
        payload = response.body
        if isinstance(payload, (dict, list)):
            payload = (json.dumps(payload, separators=(',', ':')) + '\n').encode('utf-8')
        elif isinstance(payload, str):
            payload = payload.encode('utf-8')
        self.send_response(response.code)
        self.send_header('Content-Type', response.content_type)
        self.send_header('Content-Length', str(len(payload)))
        self.send_header('Cache-Control', 'no-cache, private')
        self.send_header('Audit-Id', str(uuid.uuid4()))
        for key, value in response.headers.items():
            for item in (value if isinstance(value, list) else [value]):
                self.send_header(key, item)
        self.end_headers()
        self.wfile.write(payload)

    def _stream(self, response):
        self.send_response(response.code)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Transfer-Encoding', 'chunked')
        self.send_header('Cache-Control', 'no-cache, private')
        self.end_headers()
        self.close_connection = True
        state = {'open': True}

        def write(data):
            try:
                self.wfile.write(('%x\r\n' % len(data)).encode('ascii') + data + b'\r\n')
                self.wfile.flush()
            except (OSError, ValueError):
                state['open'] = False

        def alive():
            return state['open'] and not getattr(self.server, 'stopping', False)

        response.stream(write, alive)
        if state['open']:
            try:
                self.wfile.write(b'0\r\n\r\n')
                self.wfile.flush()
            except (OSError, ValueError):
                pass

    def do_GET(self):
        self._dispatch('GET')

    def do_POST(self):
        self._dispatch('POST')

    def do_PUT(self):
        self._dispatch('PUT')

    def do_PATCH(self):
        self._dispatch('PATCH')

    def do_DELETE(self):
        self._dispatch('DELETE')


class FakeApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, store, port=0, verbose=False):
        ThreadingHTTPServer.__init__(self, ('127.0.0.1', port), Handler)
        self.store = store
        self.verbose = verbose
        self.stopping = False
        self.api = Api(store, '127.0.0.1:%d' % self.server_address[1])
        self.controllers = threading.Thread(target=self._run_controllers, name='fake-apiserver-controllers')
        self.controllers.daemon = True
        self._stop_controllers = threading.Event()

    @property
    def port(self):
        return self.server_address[1]

    @property
    def url(self):
        return 'http://127.0.0.1:%d' % self.port

    def _run_controllers(self):
        while not self._stop_controllers.wait(TICK_SECONDS):
            try:
                self.store.tick()
            except Exception:  # keep the controllers running; a bug shows on stderr
                traceback.print_exc()


def load_state(state):
    """A state document, a path to one, or None."""
    if state is None:
        return {}
    if isinstance(state, dict):
        return copy.deepcopy(state)
    with open(state, encoding='utf-8') as handle:
        return json.load(handle)


def start(state=None, port=0, verbose=False):
    """Start a server in this process: returns (server, thread, url)."""
    server = FakeApiServer(Store(load_state(state)), port, verbose)
    server.controllers.start()
    thread = threading.Thread(target=server.serve_forever, kwargs={'poll_interval': 0.1}, name='fake-apiserver')
    thread.daemon = True
    thread.start()
    return server, thread, server.url


def stop(server):
    """Stop a server from start()."""
    server.stopping = True
    server._stop_controllers.set()
    with server.store.lock:
        server.store.changed.notify_all()
    server.shutdown()
    server.server_close()


def write_kubeconfig(path, url, namespace='default'):
    """A kubeconfig for the server (plain HTTP, no credentials)."""
    config = {'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'gpufleet-sim',
              'clusters': [{'name': 'gpufleet-sim', 'cluster': {'server': url}}],
              'users': [{'name': 'gpufleet-sim', 'user': {}}],
              'contexts': [{'name': 'gpufleet-sim', 'context': {'cluster': 'gpufleet-sim', 'user': 'gpufleet-sim', 'namespace': namespace}}]}
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump(config, handle, indent=2)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description='Fake Kubernetes API server for the simulated GPU fleet (127.0.0.1, plain HTTP).')
    parser.add_argument('--port', type=int, default=0, help='port to listen on (0: any free port)')
    parser.add_argument('--state', help='initial state JSON: {"nodes": [...], "pods": [...], "daemonsets": [...], "poddisruptionbudgets": [...]}')
    parser.add_argument('--ready-file', help='write the port here once listening')
    parser.add_argument('--kubeconfig', help='also write a kubeconfig for the server here')
    parser.add_argument('--save-state', help='write the final state here on exit')
    parser.add_argument('--verbose', action='store_true', help='log every request on stderr')
    options = parser.parse_args(argv)
    server, thread, url = start(options.state, options.port, options.verbose)
    if options.kubeconfig:
        write_kubeconfig(options.kubeconfig, url)
    if options.ready_file:
        temporary = options.ready_file + '.tmp'
        with open(temporary, 'w', encoding='utf-8') as handle:
            handle.write('%d\n' % server.port)
        os.replace(temporary, options.ready_file)
    done = threading.Event()

    def finish(_signum, _frame):
        done.set()

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    while not done.wait(0.5) and thread.is_alive():
        pass
    if options.save_state:
        with open(options.save_state, 'w', encoding='utf-8') as handle:
            json.dump(server.store.dump(), handle, indent=2)
    stop(server)
    return 0


if __name__ == '__main__':
    sys.exit(main())
