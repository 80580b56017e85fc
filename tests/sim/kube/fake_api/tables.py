# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Table output (server-side printing, what kubectl get shows)."""

import copy

from .common import dig, pod_ready, since, terminal
from .events import event_from_v1
from .selectors import selector_string


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
