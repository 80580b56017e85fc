# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Kubernetes half of the reliability suite (issues 16 and 28): real window-mode rollouts (playbooks/rolling_restart.yml,
reboot only) of a simulated fleet whose scheduler is the fake Kubernetes API server (tests/sim/kube), which also serves
Medik8s' published NodeHealthCheck CRD and one NodeHealthCheck over every node.

One fleet for the module (build/sim-faults-kube: 5 nodes, no Slurm), its own module so that it runs beside
test_reliability_faults.py (the Slurm faults) rather than after it. In this order:

    a JobSet over gpu-01 and gpu-02 (checkpoint ahead), the idle gpu-03: job-coherent admission, the hand-off to the node's
        other owners and the soft pre-drain watched on the API while the run goes
    ansible-playbook killed with gpu-04 in flight, gpu-05 waiting: what the ledger and the API hold at the kill, and after
        the resumed run
    a drain a PodDisruptionBudget blocks (gpu-01)
    the API server stopped mid-run (gpu-03, gpu-05), last: it takes the server away
"""

import datetime
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import ROOT, SIM, Sampler, fleet_up
from test_reliability_faults import GPUS, command, events_of, failures, inventory, poll, run, start, state_of

sys.path.insert(0, SIM)

import kube_fleet  # noqa: E402  pylint: disable=wrong-import-position,import-error

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger, _report  # noqa: E402

FLEET_STATE = os.path.join(ROOT, 'build', 'sim-faults-kube')
NHC_CRD = os.path.join(SIM, 'kube', 'crds', 'remediation.medik8s.io_nodehealthchecks.yaml')
NHC_PATH = '/apis/remediation.medik8s.io/v1alpha1/nodehealthchecks'
ADMIN_PAUSE = 'storage maintenance by @admin'
HANDOFF_LABELS = {'nvsentinel.dgxc.nvidia.com/managed': 'false', 'k8saas.nvidia.com/ManagedByNVSentinel': 'false',
                  'nvidia.com/gpu-driver-upgrade.skip': 'true', 'remediation.medik8s.io/exclude-from-remediation': 'true'}
PENDING_TAINT = 'gpufleet.io/upgrade-pending'
KILL_RUN = 'kube-kill-run'


@pytest.fixture(scope='module')
def fleet():
    yield from fleet_up(FLEET_STATE, 5, 'none')


@pytest.fixture(scope='module')
def kube(fleet):
    """The fake Kubernetes API server for the fleet's nodes, with the NodeHealthCheck CRD and a NodeHealthCheck over every
    node that an operator paused already; stopped at the end."""
    state_dir = os.path.join(FLEET_STATE, 'kube')
    kube_fleet.stop_fleet(state_dir)
    kubeconfig = kube_fleet.serve_fleet(state_dir, fleet.nodes)
    kubectl(kubeconfig, 'create', '-f', NHC_CRD)
    nhc = {'apiVersion': 'remediation.medik8s.io/v1alpha1', 'kind': 'NodeHealthCheck', 'metadata': {'name': 'nhc-gpu-workers'},
           'spec': {'selector': {'matchExpressions': [{'key': 'node-role.kubernetes.io/control-plane', 'operator': 'DoesNotExist'}]},
                    'remediationTemplate': {'apiVersion': 'self-node-remediation.medik8s.io/v1alpha1', 'kind': 'SelfNodeRemediationTemplate',
                                            'namespace': 'openshift-workload-availability',
                                            'name': 'self-node-remediation-automatic-strategy-template'},
                    'pauseRequests': [ADMIN_PAUSE]}}
    kubectl(kubeconfig, 'create', '-f', '-', stdin=json.dumps(nhc))
    yield state_dir, kubeconfig
    kube_fleet.stop_fleet(state_dir)


def kubectl(kubeconfig, *arguments, stdin=None):
    return subprocess.run(['kubectl'] + list(arguments), env=dict(os.environ, KUBECONFIG=kubeconfig), input=stdin,
                          capture_output=True, text=True, check=True, timeout=60)


def kube_schedulable(kubeconfig, nodes):
    listing = json.loads(kubectl(kubeconfig, 'get', 'nodes', '-o', 'json').stdout)
    return {item['metadata']['name']: not item['spec'].get('unschedulable') for item in listing['items'] if item['metadata']['name'] in nodes}


def api_get(state_dir, path):
    with urllib.request.urlopen(kube_fleet._url(state_dir) + path, timeout=10) as response:  # nosec - the loopback fake API
        return json.loads(response.read().decode('utf-8'))


def api_view(state_dir):
    """{node: (hand-off labels it carries, whether it has the pending taint, whether a gpufleet pause request names it)}
    and the NodeHealthCheck's pause requests, read from the API now."""
    requests = api_get(state_dir, NHC_PATH)['items'][0]['spec'].get('pauseRequests') or []
    view = {}
    for item in api_get(state_dir, '/api/v1/nodes')['items']:
        name = item['metadata']['name']
        labels = item['metadata'].get('labels') or {}
        view[name] = ({key: labels[key] for key in HANDOFF_LABELS if key in labels},
                      any(taint.get('key') == PENDING_TAINT for taint in item['spec'].get('taints') or []),
                      any(text.startswith('gpufleet.lifecycle: %s in flight' % name) for text in requests))
    return view, requests


def ledger_states(run_dir, run_id=None):
    states = {}
    for event in events_of(run_dir, run_id):
        if event.get('node'):
            states[event['node']] = event['to']
    return states


class Watch(Sampler):
    """Samples (ledger states before, what the API holds, ledger states after) every half second while a rollout runs (a
    node is in flight and waits for many seconds each)."""

    def __init__(self, state_dir, run_dir, run_id=None):
        super().__init__()
        self.state_dir, self.run_dir, self.run_id = state_dir, run_dir, run_id
        self.samples = []

    def sample(self):
        before = ledger_states(self.run_dir, self.run_id)
        view, _requests = api_view(self.state_dir)
        self.samples.append((before, view, ledger_states(self.run_dir, self.run_id)))

    def check(self, nodes, preset=None):
        """The hand-off (labels, pause request) only on a node in flight, in every sample; each node seen handed off, and
        seen marked going soon while the run had it waiting or in flight, at least once. ``preset``: {node: labels an operator
        set before}."""
        handed, marked = set(), set()
        for before, view, after in self.samples:
            for node in nodes:
                labels, tainted, paused = view[node]
                flying = [state for state in (before.get(node), after.get(node)) if state in _ledger.IN_FLIGHT]
                if (labels and labels != (preset or {}).get(node)) or paused:
                    assert flying, ('hand-off outside flight', node, before.get(node), after.get(node), view[node])
                if labels == HANDOFF_LABELS and paused:
                    handed.add(node)
                if tainted and before.get(node) in ('pending',) + tuple(_ledger.IN_FLIGHT):
                    marked.add(node)      # marked from the start of the run until its settle
        assert handed == set(nodes), ('nodes never seen handed off', set(nodes) - handed)
        assert marked == set(nodes), ('nodes never seen marked going soon', set(nodes) - marked)


def test_a_multi_node_workload_goes_together_at_its_checkpoint_and_is_evicted_once(fleet, kube, tmp_path):
    """A JobSet's two pods on gpu-01 and gpu-02 (its labels, a checkpoint annotation ahead), the idle gpu-03 beside them, window
    2: gpu-03 goes first, then gpu-01 and gpu-02 together in one look, not before the checkpoint; each drain evicts its pod and
    records the JobSet (one interruption, the report's rule). Watched on the API all along: each node carries the hand-off
    labels and a pause request of the NodeHealthCheck exactly while it is in flight, the "going soon" taint while it waits;
    afterwards nothing of it is left, an operator's own label and pause request are as they were."""
    state_dir, kubeconfig = kube
    kubectl(kubeconfig, 'label', 'node', 'gpu-02', 'nvsentinel.dgxc.nvidia.com/managed=false')     # an operator's opt-out before
    checkpoint = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=20)
    labels = {'jobset.sigs.k8s.io/jobset-name': 'llm', 'batch.kubernetes.io/job-name': 'llm-workers-0'}
    owner = {'apiVersion': 'batch/v1', 'kind': 'Job', 'name': 'llm-workers-0'}
    pods = [kube_fleet.add_long_pod(state_dir, node, 3600, labels=labels, owner=owner,
                                    annotations={'gpufleet.io/checkpoint': checkpoint.isoformat()}) for node in ('gpu-01', 'gpu-02')]
    run_dir = str(tmp_path / 'runs')
    nodes = ['gpu-01', 'gpu-02', 'gpu-03']
    with Watch(state_dir, run_dir) as watch:
        process = run(command(inventory(fleet, str(tmp_path)), run_dir, nodes, gpufleet_window=2,
                              gpufleet_scheduler='kubernetes', gpufleet_kubeconfig=kubeconfig))
    assert process.returncode == 0, failures(process)
    state = state_of(run_dir)
    assert {node: record['state'] for node, record in state['nodes'].items()} == dict.fromkeys(nodes, 'done')
    at = {node: datetime.datetime.fromisoformat(record['admitted_at']) for node, record in state['nodes'].items()}
    assert min(at['gpu-01'], at['gpu-02']) >= checkpoint and at['gpu-03'] < min(at['gpu-01'], at['gpu-02']), (at, checkpoint)
    assert state['nodes']['gpu-01']['group'] == state['nodes']['gpu-02']['group'] == ['gpu-01', 'gpu-02']
    for node in ('gpu-01', 'gpu-02'):
        assert [(entry['job'], entry['kind'], entry['gpus']) for entry in state['nodes'][node]['interrupted']] == [
            ('JobSet ml/llm', 'evicted', 8)], state['nodes'][node]
    assert state['nodes']['gpu-03'].get('interrupted') == []
    run_id = [name for name in os.listdir(run_dir) if name != 'locks'][0]
    jobs = _report.build({'id': run_id}, {}, _report.read_ledger(os.path.join(run_dir, run_id)))['summary']['jobs']
    assert [(job['job'], job['interruptions'], job['nodes']) for job in jobs] == [('JobSet ml/llm', 1, ['gpu-01', 'gpu-02'])], jobs
    listing = json.loads(kubectl(kubeconfig, 'get', 'pods', '-n', 'ml', '-o', 'json').stdout)
    assert not [pod for pod in listing['items'] if 'ml/' + pod['metadata']['name'] in pods]      # both evicted by the drains
    # The hand-off and the soft pre-drain, while it ran and after.
    watch.check(nodes, preset={'gpu-02': {'nvsentinel.dgxc.nvidia.com/managed': 'false'}})
    view, requests = api_view(state_dir)
    assert {node: view[node] for node in nodes} == {'gpu-01': ({}, False, False), 'gpu-03': ({}, False, False),
                                                    'gpu-02': ({'nvsentinel.dgxc.nvidia.com/managed': 'false'}, False, False)}, view
    assert requests == [ADMIN_PAUSE]
    assert _ledger.RunLedger.open(_ledger.FileBackend(run_dir), run_id).soft_marks() == {}
    for node in nodes:
        # The ledger names what each node handed off (its drain's event) and what its release put back (its final event).
        handed = [event['details']['handoff'] for event in events_of(run_dir) if event.get('node') == node and (event.get('details') or {}).get('handoff')]
        assert handed[0]['labels'] == HANDOFF_LABELS and handed[0]['nhc_paused'] == ['nhc-gpu-workers'], handed
        assert sorted(handed[-1]['undone']) == sorted(HANDOFF_LABELS) and handed[-1]['nhc_released'] == ['nhc-gpu-workers'], handed


def test_a_controller_killed_with_a_node_in_flight_leaves_nothing_the_ledger_cannot_name(reliability, fleet, kube, tmp_path):
    scenario = reliability.scenario('controller fault', 'ansible-playbook killed with a Kubernetes node in flight',
                                    injected='kill -9 of ansible-playbook and its workers once the ledger shows gpu-04 drained, gpu-05 '
                                             'waiting (window 1, a NodeHealthCheck over both); the same command run again')
    state_dir, kubeconfig = kube
    run_dir = str(tmp_path / 'runs')
    argv = command(inventory(fleet, str(tmp_path)), run_dir, ['gpu-04', 'gpu-05'], gpufleet_window=1, gpufleet_scheduler='kubernetes',
                   gpufleet_kubeconfig=kubeconfig, gpufleet_run_id=KILL_RUN)
    process = start(argv, str(tmp_path / 'killed.log'))
    try:
        # The first event that says gpu-04 is drained (with nothing to install it reboots at once: a poll may miss the state).
        poll(lambda: any(event.get('node') == 'gpu-04' and event['to'] == 'drained' for event in events_of(run_dir, KILL_RUN)), 600,
             'gpu-04 drained')
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    time.sleep(1)       # the orphaned workers notice their parent is gone
    killed, requests = api_view(state_dir)
    marks = _ledger.RunLedger.open(_ledger.FileBackend(run_dir), KILL_RUN).soft_marks()
    # In flight at the kill (drained or rebooting): handed off (labels, the pause request), its mark recorded; gpu-05 waits
    # marked, not handed off.
    at_kill = {node: record['state'] for node, record in state_of(run_dir, KILL_RUN)['nodes'].items()}
    assert at_kill['gpu-04'] in _ledger.IN_FLIGHT and at_kill['gpu-05'] == 'pending', at_kill
    assert killed['gpu-04'] == (HANDOFF_LABELS, True, True) and killed['gpu-05'] == ({}, True, False), killed
    assert sorted(marks) == ['gpu-04', 'gpu-05'] and requests[0] == ADMIN_PAUSE, (marks, requests)
    again = run(argv)
    assert again.returncode == 0, failures(again)
    states = reliability.check_rollout(run_dir, KILL_RUN, gpus_per_node=GPUS)
    assert states == {'gpu-04': 'done', 'gpu-05': 'done'}, states
    after, requests = api_view(state_dir)
    assert {node: after[node] for node in ('gpu-04', 'gpu-05')} == dict.fromkeys(('gpu-04', 'gpu-05'), ({}, False, False)), after
    assert requests == [ADMIN_PAUSE] and _ledger.RunLedger.open(_ledger.FileBackend(run_dir), KILL_RUN).soft_marks() == {}
    assert kube_schedulable(kubeconfig, ['gpu-04', 'gpu-05']) == {'gpu-04': True, 'gpu-05': True}
    scenario.observed('at the kill the node in flight carried the hand-off (NVSentinel, GPU Operator and NodeHealthCheck labels, '
                      'a pause request of the NodeHealthCheck) and the waiting node the going-soon taint, both recorded in the '
                      'ledger; the re-run resumed the run, finished both nodes done and took every mark back: the labels as they '
                      'were, the pause request gone (the operator\'s kept), no taint, nothing left in the ledger')


def test_a_drain_blocked_by_a_pod_disruption_budget(reliability, fleet, kube, tmp_path):
    scenario = reliability.scenario('scheduler fault', 'a drain blocked by a PodDisruptionBudget',
                                    injected='a training pod on gpu-01 and a PodDisruptionBudget minAvailable 1 over it '
                                             '(Kubernetes, fake API server); gpufleet_drain_timeout 5')
    state_dir, kubeconfig = kube
    pod = kube_fleet.add_long_pod(state_dir, 'gpu-01', 3600)
    budget = {'apiVersion': 'policy/v1', 'kind': 'PodDisruptionBudget', 'metadata': {'name': 'train-gpu-01', 'namespace': 'ml'},
              'spec': {'minAvailable': 1, 'selector': {'matchLabels': {'app': 'train'}}}}
    kubectl(kubeconfig, 'apply', '-f', '-', stdin=json.dumps(budget))
    run_dir = str(tmp_path / 'runs')
    process = run(command(inventory(fleet, str(tmp_path), {'gpu-01': {'gpufleet_drain_timeout': 5}}), run_dir, ['gpu-01'],
                          gpufleet_window=1, gpufleet_scheduler='kubernetes', gpufleet_kubeconfig=kubeconfig))
    assert process.returncode == 0, failures(process)
    states = reliability.check_rollout(run_dir, gpus_per_node=GPUS)
    record = state_of(run_dir)['nodes']['gpu-01']
    assert states == {'gpu-01': 'deferred'}, record
    assert 'disruption budget' in record['reason'] or pod.split('/')[1] in record['reason'], record
    assert kube_schedulable(kubeconfig, ['gpu-01']) == {'gpu-01': True}       # uncordoned: put back as it was
    kubectl(kubeconfig, 'get', 'pod', '-n', 'ml', pod.split('/')[1])         # the pod was never evicted
    # Put back as it was includes the hand-off: no label, no pause request left by the deferred drain.
    view, requests = api_view(state_dir)
    assert view['gpu-01'] == ({}, False, False) and requests == [ADMIN_PAUSE], (view['gpu-01'], requests)
    kubectl(kubeconfig, 'delete', 'pdb', '-n', 'ml', 'train-gpu-01')
    scenario.observed('deferred when the drain timed out, the pod named; the node uncordoned as it was and the pod kept running')


def test_the_kubernetes_api_gone_mid_run(reliability, fleet, kube, tmp_path):
    scenario = reliability.scenario('scheduler fault', 'the Kubernetes API gone mid-run',
                                    injected='the fake API server stopped while the first of gpu-03, gpu-05 reboots (window 1); '
                                             'gpufleet_scheduler_timeout 5')
    state_dir, kubeconfig = kube
    run_dir = str(tmp_path / 'runs')
    output = str(tmp_path / 'run.log')
    process = start(command(inventory(fleet, str(tmp_path)), run_dir, ['gpu-03', 'gpu-05'], gpufleet_window=1, gpufleet_scheduler='kubernetes',
                            gpufleet_kubeconfig=kubeconfig, gpufleet_scheduler_timeout=5), output)
    try:
        node = poll(lambda: [event['node'] for event in events_of(run_dir) if event['to'] == 'rebooting'], 900, 'a node rebooting')[0]
        kube_fleet.stop_fleet(state_dir)
        process.wait(timeout=1800)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    with open(output, encoding='utf-8') as handle:
        stdout = handle.read()
    with open(os.path.join(state_dir, 'saved.json'), encoding='utf-8') as handle:
        saved = json.load(handle)
    cordoned = {item['metadata']['name']: bool(item['spec'].get('unschedulable')) for item in saved['nodes']}
    state = state_of(run_dir)
    other = ({'gpu-03', 'gpu-05'} - {node}).pop()
    assert process.returncode != 0 and 'rollout paused' in stdout and 'did not answer' in stdout, stdout[-4000:]
    assert state['status'] == 'paused' and state['pause']['rule'] == 'scheduler', state['pause']
    states = reliability.check_rollout(run_dir, gpus_per_node=GPUS, stopped=True)
    reliability.check_schedulable(states, {name: not cordoned[name] for name in states})
    assert states == {node: 'quarantined', other: 'pending'}, (states, state['nodes'][node]['reason'])
    scenario.observed('the gate asked again with a doubling pause, then paused the run (rule scheduler) and admitted nothing more: '
                      'the waiting node stays pending, not cordoned; the node in flight could not be uncordoned and is quarantined, '
                      'still cordoned; the run ends paused and a re-run resumes it')
