# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Nodes: defaults as kubelet registers them, taint validation, Ready, the node lifecycle and taint eviction controllers."""

import copy
import uuid

from .common import (BY_PATH, KUBE_VERSION, NOT_READY_TAINT, UNREACHABLE_TAINT, UNSCHEDULABLE_TAINT, dig, micro_time, node_ready, parse_time, rfc3339,
                     terminal, tolerates)


class NodesMixin:
    """The store's nodes."""

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

    @staticmethod
    def _validate_nodes(obj, causes):
        """Taints: a key, a known effect, unique by key and effect."""
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
