# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The store: objects, resource versions, history for watches, create / update / delete, and the controllers' tick.

What is particular to a kind lives with it: nodes.py, pods.py, disruption.py (PodDisruptionBudgets and eviction),
workloads.py, events.py, configmaps_leases.py, custom.py (CustomResourceDefinitions and their objects); ``Store`` puts them
together."""

import copy
import random
import threading
import time
import uuid

import normalise  # pylint: disable=import-error

from .common import (HISTORY_LIMIT, NAME_CHARS, REQUEST_LOG_LIMIT, SHUTDOWN_SECONDS, STATE_KEYS, already_exists, bad_request, conflict,
                     dig, invalid, namespace_not_found, rfc3339, terminal)
from .configmaps_leases import ConfigMapsLeasesMixin, _decode_configmap, _decode_lease
from .custom import CRD_STORAGE, CustomResourcesMixin
from .disruption import DisruptionMixin
from .events import EventsMixin
from .nodes import NodesMixin
from .pods import PodsMixin
from .workloads import WorkloadsMixin


def decoded(resource, obj):
    """``obj`` as kube-apiserver's decoder leaves it (normalise.py: canonical quantities, ...), or 400 as it answers."""
    try:
        if resource.storage == 'configmaps':
            _decode_configmap(obj)
        elif resource.storage == 'leases':
            _decode_lease(obj)
        if getattr(resource, 'custom', False):
            resource.decode(obj)
        return normalise.normalise(resource.storage, obj)
    except normalise.DecodeError as error:
        raise bad_request('%s in version "%s" cannot be handled as a %s: %s' % (resource.kind, resource.version, resource.kind, error)) from None


# --------------------------------------------------------------------------------------------
# The store: objects, resource versions, history for watches, and the simulated controllers
# --------------------------------------------------------------------------------------------

class Store(NodesMixin, PodsMixin, DisruptionMixin, WorkloadsMixin, EventsMixin, ConfigMapsLeasesMixin, CustomResourcesMixin):
    """All objects, behind one lock.  Objects are stored as JSON-ready dicts with kind and apiVersion."""

    def __init__(self, state=None, clock=None):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.clock = clock or time.time
        self.revision = 0
        self.objects = dict((storage, {}) for _key, storage in STATE_KEYS)
        self._init_custom()
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
        key = (obj['metadata'].get('namespace', '') if self.resource_of(storage).namespaced else '', obj['metadata']['name'])
        self.objects[storage][key] = obj
        self._record('MODIFIED' if old is not None else 'ADDED', storage, old, copy.deepcopy(obj))
        if storage == CRD_STORAGE:
            self.sync_custom()
        return obj

    def remove(self, storage, obj):
        key = (obj['metadata'].get('namespace', '') if self.resource_of(storage).namespaced else '', obj['metadata']['name'])
        old = self.objects[storage].pop(key, None)
        if old is None:
            return None
        old = copy.deepcopy(old)
        self.next_revision()
        old['metadata']['resourceVersion'] = str(self.revision)
        self.private.pop(old['metadata'].get('uid'), None)
        self._record('DELETED', storage, old, old)
        if storage == CRD_STORAGE:
            self.sync_custom()
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
            self.load_custom(state)

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
            resource = self.resource_of(storage)
            if resource.namespaced:
                namespace = namespace or 'default'
                obj.setdefault('metadata', {})['namespace'] = namespace
                if self.get('namespaces', '', namespace) is None:
                    self.create('namespaces', {'metadata': {'name': namespace}}, admit=False)
            if storage == 'pods':
                self._link_owners(obj)
            existing = self.get(storage, namespace if resource.namespaced else '', dig(obj, 'metadata', 'name'))
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
            document['customresources'] = self.dump_custom()
            document['resourceVersion'] = str(self.revision)
            return document

    # ---------------------------------------------------------------- create with defaults

    def create(self, storage, obj, admit=True, dry_run=False):
        """Create an object: system fields, defaults, admission (when admit) and the first status."""
        resource = self.resource_of(storage, obj.get('apiVersion'))  # a custom resource is validated as the version it came in
        now = self.now()
        meta = obj.setdefault('metadata', {})
        obj['apiVersion'] = self.resource_of(storage).api_version
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
        if storage in ('daemonsets', 'replicasets', 'statefulsets', 'poddisruptionbudgets', 'pods', CRD_STORAGE) or getattr(resource, 'custom', False):
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

    # ---------------------------------------------------------------- validation (what the operations here can get wrong)

    def validate(self, resource, obj, old):
        storage = resource.storage
        name = obj['metadata']['name']
        causes = []
        if storage == 'nodes':
            self._validate_nodes(obj, causes)
        elif storage == 'pods':
            self._validate_pods(obj, old, causes)
        elif storage == 'poddisruptionbudgets':
            self._validate_poddisruptionbudgets(obj, causes)
        elif storage == 'events':
            self._validate_events(obj, causes)
        elif storage == 'configmaps':
            self._validate_configmap(obj, old, causes)
        elif storage == 'leases':
            self._validate_leases(obj, causes)
        elif storage == CRD_STORAGE:
            self._validate_customresourcedefinitions(obj, old, causes)
        elif getattr(resource, 'custom', False):
            causes.extend(resource.causes(obj))
        if old is not None:
            if obj['metadata'].get('uid') != old['metadata'].get('uid'):
                causes.append(('FieldValueInvalid', 'metadata.uid', 'Invalid value: "%s": field is immutable' % obj['metadata'].get('uid')))
        if causes:
            raise invalid(resource, name, causes)

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
        elif storage in ('nodes', 'pods', 'namespaces', 'daemonsets', 'replicasets', 'statefulsets', 'poddisruptionbudgets', CRD_STORAGE) or \
                (getattr(resource, 'custom', False) and 'status' in resource.subresources):
            if 'status' in old:
                new['status'] = copy.deepcopy(old['status'])
            else:
                new.pop('status', None)
        if storage in ('daemonsets', 'replicasets', 'statefulsets', 'poddisruptionbudgets', 'pods', CRD_STORAGE) and subresource != 'status':
            if new.get('spec') != old.get('spec'):
                meta['generation'] = old_meta.get('generation', 1) + 1
        if getattr(resource, 'custom', False) and subresource != 'status':
            if dict(new, metadata=None) != dict(old, metadata=None):  # any change but to metadata (customResourceStrategy)
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
        if storage == CRD_STORAGE:
            return self.delete_crd(obj, dry_run), False
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

    # ---------------------------------------------------------------- status the controllers maintain

    def with_status(self, storage, obj):
        """Objects whose status a controller derives from pods get it brought up to date before they are read."""
        if storage == 'poddisruptionbudgets':
            return self.sync_pdb(obj)
        if storage in ('daemonsets', 'replicasets', 'statefulsets'):
            return self.sync_workload(storage, obj)
        return obj

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
