# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fake Kubernetes API server's layout: ``fake_apiserver.py`` the entry point, the package ``fake_api`` the server.

Everything that imports ``fake_apiserver`` (tests, benchmarks, hacking) finds the names it uses there, the command line
runs as before (the fleet starts it by path), and no module of the package grows past 600 lines again.
"""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
KUBE = os.path.join(REPO, 'tests', 'sim', 'kube')
SERVER = os.path.join(KUBE, 'fake_apiserver.py')
sys.path.insert(0, KUBE)

import fake_apiserver  # noqa: E402  pylint: disable=wrong-import-position,import-error


def _users():
    """Python files of the checkout outside the server that import it."""
    paths = []
    for folder in ('tests', 'benchmarks', 'hacking'):
        paths += glob.glob(os.path.join(REPO, folder, '**', '*.py'), recursive=True)
    return [path for path in paths if not path.startswith(KUBE + os.sep)]


def test_every_name_used_from_fake_apiserver_is_there():
    used = set()
    for path in _users():
        with open(path, encoding='utf-8') as handle:
            used.update(re.findall(r'\bfake_apiserver\.([A-Za-z_][A-Za-z0-9_]*)', handle.read()))
    used.discard('py')
    assert {'start', 'stop', 'write_kubeconfig', 'Store', 'ApiError', 'BY_STORAGE', 'FINISH_AFTER', 'SHUTDOWN_SECONDS'} <= used
    missing = sorted(name for name in used if not hasattr(fake_apiserver, name))
    assert not missing, missing
    assert sorted(fake_apiserver.__all__) == sorted(set(fake_apiserver.__all__))
    assert all(hasattr(fake_apiserver, name) for name in fake_apiserver.__all__)


def test_the_package_modules_stay_small():
    sizes = {}
    for path in glob.glob(os.path.join(KUBE, 'fake_api', '*.py')):
        with open(path, encoding='utf-8') as handle:
            sizes[os.path.basename(path)] = len(handle.read().splitlines())
    assert {'api.py', 'server.py', 'store.py', 'nodes.py', 'pods.py', 'disruption.py', 'configmaps_leases.py'} <= set(sizes)
    assert max(sizes.values()) < 600, sizes


def test_the_store_is_put_together_from_the_kinds():
    store = fake_apiserver.Store({'nodes': [{'metadata': {'name': 'gpu-01'}}],
                                  'pods': [{'metadata': {'name': 'p', 'namespace': 'ml'}, 'spec': {'nodeName': 'gpu-01'}}]})
    assert store.get('pods', 'ml', 'p')['status']['phase'] == 'Running'
    assert store.get('leases', 'kube-node-lease', 'gpu-01') is not None
    for method in ('_default_nodes', '_default_pods', 'sync_pdb', 'evict', 'sync_workload', 'emit', '_validate_configmap', 'schedule'):
        assert callable(getattr(store, method)), method


def test_the_command_line_runs_as_before(tmp_path):
    ready = tmp_path / 'port'
    saved = tmp_path / 'final.json'
    state = tmp_path / 'state.json'
    state.write_text(json.dumps({'nodes': [{'metadata': {'name': 'gpu-01'}}]}), encoding='utf-8')
    process = subprocess.Popen([sys.executable, SERVER, '--port', '0', '--state', str(state), '--ready-file', str(ready),
                                '--kubeconfig', str(tmp_path / 'kubeconfig'), '--save-state', str(saved)], cwd=str(tmp_path))
    try:
        deadline = time.time() + 30
        while not ready.exists() and time.time() < deadline and process.poll() is None:
            time.sleep(0.05)
        port = int(ready.read_text(encoding='utf-8'))
        with urllib.request.urlopen('http://127.0.0.1:%d/api/v1/nodes/gpu-01' % port, timeout=10) as response:
            assert json.load(response)['metadata']['name'] == 'gpu-01'
        assert json.loads((tmp_path / 'kubeconfig').read_text(encoding='utf-8'))['clusters'][0]['cluster']['server'] == 'http://127.0.0.1:%d' % port
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    assert [node['metadata']['name'] for node in json.loads(saved.read_text(encoding='utf-8'))['nodes']] == ['gpu-01']
