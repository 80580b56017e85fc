# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""DaemonSets, ReplicaSets and StatefulSets (apps/v1): defaults, and the status their controllers derive from the pods."""

import copy

from .common import dig, pod_ready, terminal


class WorkloadsMixin:
    """The store's workload controllers."""

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
