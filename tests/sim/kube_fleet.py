# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run the fake Kubernetes API (kube/fake_apiserver.py) for a simulated fleet.

``serve_fleet`` starts it as a background process on a loopback port with one Node per simulated node
(GPU capacity, NVIDIA GPU Operator labels) and the GPU Operator's DaemonSet pods on each, writes a
kubeconfig and returns its path; ``stop_fleet`` stops it; ``add_long_pod`` puts a GPU job on a node.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, 'kube', 'fake_apiserver.py')
OPERATOR_NAMESPACE = 'gpu-operator'
DAEMONSETS = ('nvidia-device-plugin-daemonset', 'nvidia-dcgm-exporter')


class KubeFleetError(Exception):
    """The fake API could not be started or reached."""


def initial_state(nodes, gpus=8):
    """Nodes with GPU capacity and the GPU Operator's DaemonSet pods on each."""
    state = {'namespaces': [{'metadata': {'name': name}} for name in ('default', OPERATOR_NAMESPACE, 'ml')],
             'nodes': [], 'daemonsets': [], 'pods': []}
    for name in DAEMONSETS:
        state['daemonsets'].append({'metadata': {'name': name, 'namespace': OPERATOR_NAMESPACE},
                                    'spec': {'selector': {'matchLabels': {'app': name}},
                                             'template': {'metadata': {'labels': {'app': name}},
                                                          'spec': {'containers': [{'name': name, 'image': 'nvcr.io/nvidia/' + name + ':sim'}]}}}})
    for node in nodes:
        state['nodes'].append({
            'metadata': {'name': node, 'labels': {'kubernetes.io/hostname': node, 'nvidia.com/gpu.present': 'true',
                                                  'nvidia.com/gpu.product': 'NVIDIA-H100-80GB-HBM3', 'nvidia.com/gpu.count': str(gpus)}},
            'status': {'capacity': {'cpu': '96', 'memory': '2048Gi', 'pods': '110', 'nvidia.com/gpu': str(gpus)},
                       'allocatable': {'cpu': '96', 'memory': '2048Gi', 'pods': '110', 'nvidia.com/gpu': str(gpus)}},
        })
        for name in DAEMONSETS:
            state['pods'].append({
                'metadata': {'name': '%s-%s' % (name, node), 'namespace': OPERATOR_NAMESPACE, 'labels': {'app': name},
                             'ownerReferences': [{'apiVersion': 'apps/v1', 'kind': 'DaemonSet', 'name': name, 'controller': True}]},
                'spec': {'nodeName': node, 'containers': [{'name': name, 'image': 'nvcr.io/nvidia/' + name + ':sim'}]},
            })
    return state


def _paths(state_dir):
    return {name: os.path.join(state_dir, name) for name in ('state.json', 'ready', 'kubeconfig', 'pid', 'server.log', 'saved.json')}


def _url(state_dir):
    with open(_paths(state_dir)['ready'], encoding='utf-8') as handle:
        return 'http://127.0.0.1:%s' % handle.read().strip()


def running(state_dir):
    """True when the recorded server process is alive."""
    try:
        with open(_paths(state_dir)['pid'], encoding='utf-8') as handle:
            os.kill(int(handle.read().strip()), 0)
        return True
    except (OSError, ValueError):
        return False


def serve_fleet(state_dir, nodes, timeout=30):
    """Start the fake API for ``nodes`` (idempotent) and return the kubeconfig path."""
    paths = _paths(state_dir)
    if running(state_dir):
        return paths['kubeconfig']
    os.makedirs(state_dir, exist_ok=True)
    with open(paths['state.json'], 'w', encoding='utf-8') as handle:
        json.dump(initial_state(nodes), handle, indent=2)
    if os.path.exists(paths['ready']):
        os.unlink(paths['ready'])
    with open(paths['server.log'], 'ab') as log:
        process = subprocess.Popen([sys.executable, SERVER, '--port', '0', '--state', paths['state.json'], '--ready-file', paths['ready'],
                                    '--kubeconfig', paths['kubeconfig'], '--save-state', paths['saved.json']],
                                   stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    with open(paths['pid'], 'w', encoding='utf-8') as handle:
        handle.write('%d\n' % process.pid)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise KubeFleetError('the fake Kubernetes API exited (rc=%s); see %s' % (process.returncode, paths['server.log']))
        if os.path.exists(paths['ready']) and os.path.exists(paths['kubeconfig']):
            return paths['kubeconfig']
        time.sleep(0.1)
    raise KubeFleetError('the fake Kubernetes API did not start in %ds; see %s' % (timeout, paths['server.log']))


def stop_fleet(state_dir, timeout=10):
    """Stop the server (it saves its state to saved.json)."""
    paths = _paths(state_dir)
    try:
        with open(paths['pid'], encoding='utf-8') as handle:
            pid = int(handle.read().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return
    deadline = time.time() + timeout
    while time.time() < deadline and running(state_dir):
        time.sleep(0.1)
    if running(state_dir):
        os.kill(pid, signal.SIGKILL)
    os.unlink(paths['pid'])


def add_long_pod(state_dir, node, seconds, labels=None, annotations=None, owner=None):
    """A GPU training pod on ``node`` that finishes after ``seconds``; returns 'namespace/name'. ``labels`` and ``annotations``
    are added to its own (a workload's labels, a declared checkpoint), ``owner`` is its controller's owner reference (e.g. the
    Job of a JobSet's replicated job: then a drain may evict it)."""
    name = 'train-%s-%d' % (node, int(time.time()))
    pod = {'metadata': {'name': name, 'namespace': 'ml', 'labels': dict({'app': 'train'}, **(labels or {})),
                        'annotations': dict({'sim.gpufleet.io/finish-after-seconds': str(seconds)}, **(annotations or {}))},
           'spec': {'nodeName': node, 'containers': [{'name': 'train', 'image': 'nvcr.io/nvidia/pytorch:24.08-py3',
                                                      'resources': {'limits': {'nvidia.com/gpu': '8'}}}]}}
    if owner:
        pod['metadata']['ownerReferences'] = [dict(owner, controller=True)]
    request = urllib.request.Request(_url(state_dir) + '/_sim/pods', data=json.dumps(pod).encode('utf-8'),
                                     headers={'Content-Type': 'application/json'}, method='POST')
    with urllib.request.urlopen(request, timeout=10) as response:  # nosec - loopback fake API only
        response.read()
    return 'ml/' + name
