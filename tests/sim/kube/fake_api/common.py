# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What every part of the fake API server shares: version, knobs, time, metav1.Status errors, the resources served,
and the pod and node helpers of the store and the printers."""

import datetime
import math
import re


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
    Resource('apiextensions.k8s.io', 'v1', 'customresourcedefinitions', 'CustomResourceDefinition', False, ['crd', 'crds'], ['api-extensions'],
             subresources={'status': ('apiextensions.k8s.io', 'v1', 'CustomResourceDefinition', STATUS_VERBS)}),
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
              ('leases', 'leases'), ('configmaps', 'configmaps'), ('customresourcedefinitions', 'customresourcedefinitions')]
KIND_TO_STORAGE = dict((BY_STORAGE[storage].kind, storage) for _key, storage in STATE_KEYS)


VERSION_RE = re.compile(r'^v([1-9][0-9]*)(?:(alpha|beta)([1-9][0-9]*))?$')


def kube_version_key(version):
    """Sort key of apimachinery's CompareKubeAwareVersionStrings: v2, v1, v1beta2, v1beta1, v1alpha1, then others by name."""
    match = VERSION_RE.match(version)
    if not match:
        return (3, 0, 0, version)
    stage = {None: 0, 'beta': 1, 'alpha': 2}[match.group(2)]
    return (stage, -int(match.group(1)), -int(match.group(3) or 0), '')


def dig(obj, *path):
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def single(query, name, default=None):
    values = query.get(name)
    return values[-1] if values else default


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
