# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pods: defaults and admission, kubelet's life cycle (start, ready, finish, graceful deletion), the minimal scheduler."""

import copy
import uuid

from .common import (FINISH_AFTER, NOT_READY_TAINT, UNREACHABLE_TAINT, UNSCHEDULABLE_TAINT, controller_of, dig, node_ready, parse_time, pod_ready,
                     pod_requests, quantity, rfc3339, terminal, tolerates)


class PodsMixin:
    """The store's pods."""

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

    def _validate_pods(self, obj, old, causes):
        """Containers with a name and an image; the update rules."""
        if not dig(obj, 'spec', 'containers'):
            causes.append(('FieldValueRequired', 'spec.containers', 'Required value'))
        for index, container in enumerate(dig(obj, 'spec', 'containers') or []):
            if not container.get('name'):
                causes.append(('FieldValueRequired', 'spec.containers[%d].name' % index, 'Required value'))
            if not container.get('image'):
                causes.append(('FieldValueRequired', 'spec.containers[%d].image' % index, 'Required value'))
        if old is not None:
            self._validate_pod_update(obj, old, causes)

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
