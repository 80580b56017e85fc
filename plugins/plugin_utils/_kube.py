# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What node_drain decides about a Kubernetes node and the pods on it.

Controller-side, no Ansible import.  The role's YAML reads the node and the pods with
kubernetes.core and acts; every decision is made here, on the documents the API returns
(``kubectl get node/pods -o json``, or a ``kubernetes.core.k8s_info`` result):

* whose cordon it is (the ``gpufleet.io/state`` label), what the node was before gpufleet
  touched it (``gpufleet.io/original-unschedulable``) and which taints gpufleet added
  (``gpufleet.io/added-taints``);
* what to do: report, skip, leave a node cordoned by someone else alone, or act;
* the hand-off to the node's other owners while gpufleet holds it (:data:`HANDOFF_LABELS`: NVSentinel's opt-out labels,
  the GPU Operator's upgrade skip label, Medik8s NHC's exclusion label), their values before recorded in
  ``gpufleet.io/handed-off`` and put back by the release;
* the taint arithmetic of a cordon (Run:ai ``runai=drain:NoExecute``, the quarantine taint)
  and of its undo, and the marker patches;
* which pods hold GPUs (requests or limits of the GPU resource in ``containers`` *and*
  ``initContainers``), which of them may be deleted, and which pods block a drain.

Every error names the node (or pod) and the field.
"""

from __future__ import annotations

import json
import re

PREFIX = 'gpufleet.io/'
STATE_LABEL = PREFIX + 'state'
SKIP_LABEL = PREFIX + 'skip'
ORIGINAL = PREFIX + 'original-unschedulable'
ADDED_TAINTS = PREFIX + 'added-taints'
RUN_ID = PREFIX + 'run-id'
REASON = PREFIX + 'reason'
QUARANTINE_TAINT_KEY = PREFIX + 'quarantine'
# The hand-off: each other owner of a node's state and the node labels that make it stand aside while gpufleet holds the node
# (docs/scheduler.md#hand-off; sources in the comments). ``nhc_pause`` is not a label: the pause request gpufleet adds to each
# Medik8s NodeHealthCheck that selects the node (module gpufleet.lifecycle.nhc_pause).
HANDOFF_ANNOTATION = PREFIX + 'handed-off'
HANDOFF_LABELS = {
    # NVIDIA NVSentinel: "false" is the only opt-out value; the new label (commons/pkg/managed) and the legacy one the
    # fault-quarantine rulesets still check.
    'nvsentinel': (('nvsentinel.dgxc.nvidia.com/managed', 'false'), ('k8saas.nvidia.com/ManagedByNVSentinel', 'false')),
    # NVIDIA GPU Operator driver upgrade controller (k8s-operator-libs UpgradeSkipNodeLabelKeyFmt, driver name "gpu").
    'gpu_operator': (('nvidia.com/gpu-driver-upgrade.skip', 'true'),),
    # Medik8s NodeHealthCheck >= 0.8 (medik8s/common labels.ExcludeFromRemediation): only "true" excludes.
    'nhc': (('remediation.medik8s.io/exclude-from-remediation', 'true'),),
}
HANDOFFS = ('nvsentinel', 'gpu_operator', 'nhc', 'nhc_pause')
# Label values that mean "this node is cordoned by gpufleet"; uncordon leaves "done" behind.
ACTIVE_STATES = ('cordoned', 'draining', 'drained', 'quarantined')
# The state label value each changing action sets.
STATE_FOR_ACTION = {'cordon': 'cordoned', 'drain': 'drained', 'quarantine': 'quarantined'}
ACTIONS = ('status', 'cordon', 'drain', 'uncordon', 'quarantine')
SCHEDULERS = ('kubernetes', 'runai')
# Run:ai planned/unplanned downtime taint.
RUNAI_TAINT = {'key': 'runai', 'value': 'drain', 'effect': 'NoExecute'}
TAINT_EFFECTS = ('NoSchedule', 'PreferNoSchedule', 'NoExecute')
MIRROR_ANNOTATION = 'kubernetes.io/config.mirror'
# A pod named in a failure message: "Failed to delete pod ml/train-0 due to: ...", "pod ml/x uses emptyDir ...".
NAMED_POD = re.compile(r'[Pp]ods? ([a-z0-9][a-z0-9.-]*/[a-z0-9][a-z0-9.-]*)')
# A Node's name is a DNS subdomain (RFC 1123): dot-separated labels of lowercase letters, digits and "-", at most 253.
NODE_NAME_MAX = 253
NODE_NAME_LABEL = re.compile(r'^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\Z')
LABEL_VALUE_CHARS = re.compile(r'[^A-Za-z0-9_.-]+')
LABEL_VALUE_ENDS = re.compile(r'^[^A-Za-z0-9]+|[^A-Za-z0-9]+$')


class KubeError(ValueError):
    """A document that cannot be decided on; the message names the node or pod and the field."""


# ------------------------------------------------------------------ reading documents

def objects(document, what='document'):
    """The objects of a List document, a ``k8s_info`` result (``resources``), a list, or one object."""
    if document is None:
        return []
    if isinstance(document, list):
        items = document
    elif isinstance(document, dict) and 'resources' in document:
        items = document['resources'] or []
    elif isinstance(document, dict) and isinstance(document.get('items'), list):
        items = document['items']
    elif isinstance(document, dict) and 'metadata' in document:
        items = [document]
    elif isinstance(document, dict) and (not document or document.get('skipped') or 'changed' in document):
        items = []  # a skipped task's (or an empty) result: nothing listed
    else:
        raise KubeError('%s is not a Kubernetes object, a List or a k8s_info result' % what)
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get('metadata'), dict):
            raise KubeError('%s item %d has no metadata' % (what, index))
    return items


def flag(value):
    """A switch as Ansible may hand it over: a bool, or its text ("true", "False", "yes", "0")."""
    if isinstance(value, str):
        return value.strip().lower() in ('1', 'true', 'yes', 'on', 'y', 't')
    return bool(value)


def _mapping(value):
    return value if isinstance(value, dict) else {}


def _sequence(value):
    return value if isinstance(value, list) else []


def check_node_name(name, field='node_drain_node_name'):
    """``name`` when it can be a Kubernetes node's name; KubeError naming ``field`` otherwise.

    Checked before the name goes into an API path or a field selector (``spec.nodeName=NAME``), where a ``,``, ``/``,
    ``?`` or a newline would change what is asked for.
    """
    shown = repr(name) if len(repr(name)) <= 100 else repr(name)[:100] + '...'
    if not isinstance(name, str) or not name or len(name) > NODE_NAME_MAX or \
            not all(NODE_NAME_LABEL.match(label) for label in name.split('.')):
        raise KubeError('%s: %s is not a Kubernetes node name: a DNS subdomain of lowercase letters, digits, "-" and ".", each '
                        'dot-separated part starting and ending with a letter or digit, at most %d characters' % (field, shown, NODE_NAME_MAX))
    return name


def find_node(document, name):
    """The Node called ``name`` in ``document``; KubeError when Kubernetes has no such node."""
    for item in objects(document, 'node document'):
        if item['metadata'].get('name') == name:
            return item
    raise KubeError('Kubernetes has no node named %s' % name)


def _added_taints(name, annotations):
    text = annotations.get(ADDED_TAINTS)
    if text in (None, ''):
        return []
    try:
        taints = json.loads(text)
    except ValueError as error:
        raise KubeError('node %s: annotation %s is not JSON (%s): %r' % (name, ADDED_TAINTS, error, text[:200]))
    if not isinstance(taints, list) or not all(isinstance(t, dict) and t.get('key') and t.get('effect') in TAINT_EFFECTS for t in taints):
        raise KubeError('node %s: annotation %s is not a list of taints with key and effect: %r' % (name, ADDED_TAINTS, text[:200]))
    return taints


def _handed_off(name, annotations):
    text = annotations.get(HANDOFF_ANNOTATION)
    if text in (None, ''):
        return {}
    try:
        recorded = json.loads(text)
    except ValueError as error:
        raise KubeError('node %s: annotation %s is not JSON (%s): %r' % (name, HANDOFF_ANNOTATION, error, text[:200]))
    if not isinstance(recorded, dict) or not all(isinstance(value, (str, type(None))) for value in recorded.values()):
        raise KubeError('node %s: annotation %s is not a mapping of label to its value before (or null): %r' % (name, HANDOFF_ANNOTATION, text[:200]))
    return recorded


def handoff_labels(handoff):
    """{label: value} that make the owners in ``handoff`` (names of :data:`HANDOFFS`) stand aside."""
    unknown = [name for name in handoff or () if name not in HANDOFFS]
    if unknown:
        raise KubeError('node_drain_handoff: %s not one of %s' % (', '.join(map(str, unknown)), ', '.join(HANDOFFS)))
    return dict(pair for name in handoff or () for pair in HANDOFF_LABELS.get(name, ()))


def node_status(node, scheduler='kubernetes', skip=False):
    """``node_drain_status`` of a Node object: what it is and whose cordon it carries."""
    metadata = node['metadata']
    name = metadata.get('name', '')
    spec = _mapping(node.get('spec'))
    labels = _mapping(metadata.get('labels'))
    annotations = _mapping(metadata.get('annotations'))
    state = labels.get(STATE_LABEL, '')
    ours = state in ACTIVE_STATES
    unschedulable = spec.get('unschedulable') is True
    return {
        'node': name,
        'scheduler': scheduler,
        'uid': metadata.get('uid', ''),
        'unschedulable': unschedulable,
        'taints': _sequence(spec.get('taints')),
        'labels': labels,
        'annotations': dict((key, value) for key, value in annotations.items() if key.startswith(PREFIX)),
        'state': state,
        'ours': ours,
        'skip': bool(skip) or str(labels.get(SKIP_LABEL, '')).lower() == 'true',
        'cordoned_by_others': unschedulable and not ours,
        'original_unschedulable': annotations.get(ORIGINAL, '') if ours else '',
        'added_taints': _added_taints(name, annotations) if ours else [],
        'handed_off': _handed_off(name, annotations) if ours else {},
    }


# ------------------------------------------------------------------ deciding about the node

def quarantine_value(reason):
    """A taint value from free text: a label value (at most 63 of [A-Za-z0-9_.-], alphanumeric at both ends)."""
    return LABEL_VALUE_ENDS.sub('', LABEL_VALUE_CHARS.sub('-', reason or '')[:63])


def _unique(taints):
    seen, kept = set(), []
    for taint in taints:
        identity = (taint.get('key'), taint.get('value'), taint.get('effect'))
        if identity not in seen:
            seen.add(identity)
            kept.append(taint)
    return kept


def decide(status, action, respect_existing=True):
    """(outcome, message) before anything changes: done (status), skipped, left_alone, done (nothing to undo) or pending."""
    if action == 'status':
        return 'done', 'state %s, %s' % (status['state'] or 'none', 'unschedulable' if status['unschedulable'] else 'schedulable')
    if status['skip']:
        return 'skipped', 'skipped (node_drain_skip or label gpufleet.io/skip=true)'
    # Someone else's cordon is never undone, and by default never marked either.
    if status['cordoned_by_others'] and (respect_existing or action == 'uncordon'):
        return 'left_alone', 'node was cordoned by someone else; gpufleet leaves it as it is'
    if action == 'uncordon' and not status['ours']:
        return 'done', 'node is not cordoned by gpufleet: nothing to uncordon'
    return 'pending', ''


def cordon_plan(status, action, scheduler, reason, run, run_id_fixed, quarantine_taint, handoff=()):
    """The cordon (also the first step of a drain): marker patch, whether to cordon, the taints to add, the hand-off labels.

    A label's value before gpufleet is recorded once (``gpufleet.io/handed-off``), like the original cordon: a node gpufleet
    already holds keeps what it recorded, a quarantine keeps the hand-off.
    """
    # The original state is recorded once: a node gpufleet already holds keeps what it was before.
    original = status['original_unschedulable'] if status['ours'] else str(status['unschedulable']).lower()
    wanted = [dict(RUNAI_TAINT)] if scheduler == 'runai' else []
    if action == 'quarantine' and quarantine_taint:
        wanted.append({'key': QUARANTINE_TAINT_KEY, 'value': quarantine_value(reason), 'effect': 'NoSchedule'})
    present = set(taint.get('key') for taint in status['taints'])
    add = [taint for taint in wanted if taint['key'] not in present]
    if action == 'drain':
        # A node this collection drained before stays marked drained while it is checked again.
        state = 'drained' if status['state'] == 'drained' else 'draining'
    else:
        state = STATE_FOR_ACTION[action]
    run_id = status['annotations'].get(RUN_ID, run) if (status['ours'] and not run_id_fixed) else run
    verb = 'Quarantined' if action == 'quarantine' else 'Cordoned'
    labels = handoff_labels(handoff)
    before = dict(status['handed_off'])
    for key in labels:
        before.setdefault(key, status['labels'].get(key))
    annotations = {ORIGINAL: original, RUN_ID: run_id, REASON: reason, ADDED_TAINTS: json.dumps(status['added_taints'] + add, separators=(',', ':'))}
    if before:
        annotations[HANDOFF_ANNOTATION] = json.dumps(before, separators=(',', ':'), sort_keys=True)
    return {
        'original': original,
        'state': state,
        'cordon': not status['unschedulable'],
        'taints': add,
        'labels': dict(labels, **{STATE_LABEL: state}),
        'annotations': annotations,
        'handoff': {'labels': labels, 'before': before},
        'event_reason': 'GpufleetQuarantined' if action == 'quarantine' else 'GpufleetCordoned',
        'event_message': '%s by gpufleet.lifecycle: %s (run %s%s)' % (
            verb, reason, run, ', taints ' + ','.join(taint['key'] for taint in add) if add else ''),
    }


def _clear_marker(state, run, handed_off=None):
    """The marker's removal, and each hand-off label back to its value before gpufleet (None removes it)."""
    labels = dict(handed_off or {})
    labels[STATE_LABEL] = state
    return {'labels': labels,
            'annotations': {ORIGINAL: None, REASON: None, ADDED_TAINTS: None, RUN_ID: run if state else None, HANDOFF_ANNOTATION: None},
            'handoff': {'undone': sorted(handed_off or {})}}


def release_plan(status, run):
    """Uncordon: take back the taints gpufleet added and its cordon (only when the node was schedulable before); leave "done"."""
    uncordon = status['original_unschedulable'] == 'false'
    plan = {'taints': _unique(status['added_taints']), 'uncordon': uncordon,
            'message': 'node uncordoned' if uncordon else 'marker removed, node stays cordoned as before',
            'event_reason': 'GpufleetUncordoned',
            'event_message': 'Released by gpufleet.lifecycle (run %s)%s' % (
                run, ': uncordoned' if uncordon else ': left unschedulable, it was cordoned before gpufleet')}
    plan.update(_clear_marker('done', run, status['handed_off']))
    return plan


def restore_plan(status, cordon, run):
    """A deferred drain puts the node back as it was before this run: as gpufleet held it, or as before gpufleet."""
    if status['ours']:
        # Held by gpufleet before this run (e.g. cordoned for a checkpoint): stays cordoned, in its previous state.
        # Its hand-off stays as it was: the labels of this run's cordon that it did not have before are taken back.
        added = {key: status['labels'].get(key) for key in cordon['handoff']['labels'] if key not in status['handed_off']}
        annotations = {ADDED_TAINTS: json.dumps(status['added_taints'], separators=(',', ':'))}
        if added:
            annotations[HANDOFF_ANNOTATION] = json.dumps(status['handed_off'], separators=(',', ':'), sort_keys=True) if status['handed_off'] else None
        return {'taints': cordon['taints'], 'uncordon': False, 'labels': dict(added, **{STATE_LABEL: status['state']}),
                'annotations': annotations, 'handoff': {'undone': sorted(added), 'kept': sorted(status['handed_off'])}}
    plan = {'taints': _unique(cordon['taints']), 'uncordon': cordon['original'] == 'false'}
    plan.update(_clear_marker(None, run, cordon['handoff']['before']))
    return plan


def node_plan(document, name, action='status', scheduler='kubernetes', reason='maintenance', run='', run_id_fixed=False,
              skip=False, respect_existing=True, quarantine_taint=False, handoff=()):
    """Everything node_drain decides about one node, from the node as the API returned it."""
    if action not in ACTIONS:
        raise KubeError('node %s: node_drain_action must be one of %s, not %r' % (name, ', '.join(ACTIONS), action))
    if scheduler not in SCHEDULERS:
        raise KubeError('node %s: node_drain_scheduler must be one of %s here, not %r' % (name, ', '.join(SCHEDULERS), scheduler))
    status = node_status(find_node(document, check_node_name(name)), scheduler, flag(skip))
    outcome, message = decide(status, action, flag(respect_existing))
    plan = {'status': status, 'outcome': outcome, 'message': message, 'original': status}
    if outcome != 'pending':
        return plan
    if action == 'uncordon':
        plan['release'] = release_plan(status, run)
        original = status['original_unschedulable']
    else:
        plan['cordon'] = cordon_plan(status, action, scheduler, reason, run, flag(run_id_fixed), flag(quarantine_taint), handoff)
        plan['restore'] = restore_plan(status, plan['cordon'], run)
        original = plan['cordon']['original']
        plan['cordon']['message'] = 'node %s: %s' % (STATE_FOR_ACTION[action], reason)
    # What node_drain_result.original reports once the node changed.
    plan['original'] = {'unschedulable': original == 'true', 'state': status['state'], 'taints': status['taints']}
    return plan


# ------------------------------------------------------------------ deciding about pods

def pod_name(pod):
    metadata = pod['metadata']
    return '%s/%s' % (metadata.get('namespace', ''), metadata.get('name', ''))


def _quantity_is_zero(value):
    return str(value).strip() in ('0', '0.0', '')


def gpu_containers(pod, resource='nvidia.com/gpu'):
    """Names of the containers, init containers included, that request or limit ``resource`` (a quantity above zero)."""
    spec = _mapping(pod.get('spec'))
    found = []
    for container in _sequence(spec.get('initContainers')) + _sequence(spec.get('containers')):
        resources = _mapping(_mapping(container).get('resources'))
        for kind in ('limits', 'requests'):
            value = _mapping(resources.get(kind)).get(resource)
            if value is not None and not _quantity_is_zero(value):
                found.append(container.get('name', ''))
                break
    return found


def is_daemonset_pod(pod):
    """Owned by a DaemonSet: never evicted by a drain (it would come straight back), never blocks one."""
    return any(_mapping(owner).get('kind') == 'DaemonSet' for owner in _sequence(pod['metadata'].get('ownerReferences')))


def is_mirror_pod(pod):
    """A static pod's mirror: the API server cannot delete it, and a drain leaves it (as kubectl and k8s_drain do)."""
    return MIRROR_ANNOTATION in _mapping(pod['metadata'].get('annotations'))


def controller_of(pod):
    """The owner reference with controller: true, or None (an unmanaged pod)."""
    for owner in _sequence(pod['metadata'].get('ownerReferences')):
        if _mapping(owner).get('controller') is True:
            return owner
    return None


def uses_empty_dir(pod):
    return any('emptyDir' in _mapping(volume) and _mapping(volume).get('emptyDir') is not None
               for volume in _sequence(_mapping(pod.get('spec')).get('volumes')))


def gpu_pods(pods, resource='nvidia.com/gpu', force=False, delete_emptydir_data=False):
    """GPU pods to delete (GPU Operator gpuPodDeletion): [{namespace, name, refused}], ``refused`` empty when it may go."""
    found = []
    for pod in pods:
        if is_daemonset_pod(pod) or is_mirror_pod(pod) or not gpu_containers(pod, resource):
            continue
        refused = []
        if controller_of(pod) is None and not force:
            refused.append('not managed by a controller (set node_drain_force)')
        if uses_empty_dir(pod) and not delete_emptydir_data:
            refused.append('uses emptyDir data (set node_drain_delete_emptydir_data)')
        found.append({'namespace': pod['metadata'].get('namespace', ''), 'name': pod['metadata'].get('name', ''),
                      'refused': ', '.join(refused)})
    return found


def blocking(pods, resource='nvidia.com/gpu', gpu_pods_only=False):
    """Pods whose presence means the drain has not finished: not DaemonSet or mirror pods (GPU-pods-only: GPU pods only)."""
    return [pod_name(pod) for pod in pods
            if not is_daemonset_pod(pod) and not is_mirror_pod(pod) and (not gpu_pods_only or gpu_containers(pod, resource))]


def pod_plan(document, resource='nvidia.com/gpu', gpu_pods_only=False, force=False, delete_emptydir_data=False,
             failure=None, waited=None):
    """Pod decisions for a drain, from the pods on the node as the API returned them.

    With ``failure`` (the message of a failed drain step) and ``waited`` (the pods a wait for completion was still
    waiting for), ``blocking`` names what blocked the drain: the pods the message names, else the waited pods,
    else the pods still on the node.
    """
    pods = [pod for pod in objects(document, 'pod document') if _mapping(pod.get('status')).get('phase') not in ('Succeeded', 'Failed')]
    picked = gpu_pods(pods, resource, flag(force), flag(delete_emptydir_data))
    left = blocking(pods, resource, flag(gpu_pods_only))
    named = []
    if failure is not None:
        for name in NAMED_POD.findall(str(failure)):
            if name not in named:
                named.append(name)
        waited_names = [pod_name(pod) for pod in objects(waited, 'waited pods')]
        left = named or waited_names or left
    return {
        'gpu_pods': picked,
        'refused': ' '.join('pod %s/%s %s;' % (pod['namespace'], pod['name'], pod['refused']) for pod in picked if pod['refused']),
        'blocking': left,
        'workloads': node_workloads(pods, resource),
    }


# ------------------------------------------------------------------ the workloads running on nodes

# The labels (and the one annotation) that name the workload a pod belongs to, most specific first: JobSet, the Kubeflow
# training operator (PyTorchJob, MPIJob, TFJob ...; the older PyTorch operator's label last), a Run:ai / KAI gang (its pod
# group annotation), a batch Job (the current label, then the legacy one). docs/scheduler.md#jobs.
WORKLOAD_KEYS = (
    ('label', 'jobset.sigs.k8s.io/jobset-name', 'JobSet'),
    ('label', 'training.kubeflow.org/job-name', 'TrainingJob'),
    ('annotation', 'pod-group-name', 'PodGroup'),
    ('label', 'batch.kubernetes.io/job-name', 'Job'),
    ('label', 'job-name', 'Job'),
    ('label', 'pytorch-job-name', 'PyTorchJob'),
)


def workload_of(pod):
    """The workload a pod belongs to: ``Kind namespace/name`` by :data:`WORKLOAD_KEYS`, else the pod itself (``Pod ns/name``)."""
    metadata = _mapping(pod.get('metadata'))
    namespace = metadata.get('namespace') or 'default'
    for where, key, kind in WORKLOAD_KEYS:
        value = _mapping(metadata.get('labels' if where == 'label' else 'annotations')).get(key)
        if isinstance(value, str) and value:
            return '%s %s/%s' % (kind, namespace, value)
    return 'Pod %s/%s' % (namespace, metadata.get('name') or '?')


def workloads(pods, resource='nvidia.com/gpu'):
    """The GPU workloads of running pods over every node (:func:`node_workloads` of each node's pods): {workload: {'nodes':
    sorted node names, 'checkpoints': each node's declared checkpoint text or None, 'starts': each node's earliest pod start}}."""
    by_node = {}
    for pod in pods:
        node = _mapping(_mapping(pod).get('spec')).get('nodeName')
        if node:
            by_node.setdefault(node, []).append(_mapping(pod))
    found = {}
    for node in sorted(by_node):
        for entry in node_workloads(by_node[node], resource):
            merged = found.setdefault(entry['job'], {'nodes': [], 'checkpoints': [], 'starts': []})
            merged['nodes'].append(node)
            merged['checkpoints'].append(entry['checkpoint'])
            merged['starts'].append(entry['start'])
    return found


def pod_gpus(pod, resource='nvidia.com/gpu'):
    """The GPUs a pod holds: the largest request or limit of ``resource`` over its containers, summed (whole numbers only)."""
    total = 0
    for container in _sequence(_mapping(pod.get('spec')).get('containers')):
        resources = _mapping(_mapping(container).get('resources'))
        values = [_mapping(resources.get(kind)).get(resource) for kind in ('limits', 'requests')]
        counts = [int(value) for value in values if str(value).strip().isdigit()]
        total += max(counts) if counts else 0
    return total


def node_workloads(pods, resource='nvidia.com/gpu'):
    """The GPU workloads the pods on one node belong to (what a drain interrupts): [{job, gpus (on this node), checkpoint
    (the latest ``gpufleet.io/checkpoint`` annotation as given), start (the earliest pod start)}], by job."""
    found = {}
    for pod in pods:
        metadata = _mapping(pod.get('metadata'))
        if is_daemonset_pod({'metadata': metadata}) or is_mirror_pod({'metadata': metadata}) or not gpu_containers(pod, resource):
            continue
        entry = found.setdefault(workload_of(pod), {'job': workload_of(pod), 'gpus': 0, 'checkpoint': None, 'start': None})
        entry['gpus'] += pod_gpus(pod, resource)
        checkpoint = _mapping(metadata.get('annotations')).get(PREFIX + 'checkpoint')
        if isinstance(checkpoint, str) and checkpoint and (entry['checkpoint'] is None or checkpoint > entry['checkpoint']):
            entry['checkpoint'] = checkpoint
        start = _mapping(pod.get('status')).get('startTime')
        if isinstance(start, str) and start and (entry['start'] is None or start < entry['start']):
            entry['start'] = start
    return [found[key] for key in sorted(found)]
