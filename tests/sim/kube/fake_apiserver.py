# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A small, faithful fake Kubernetes API server for the simulated GPU fleet.

It serves exactly what node drain, cordon, labelling and tainting use, with the real
JSON shapes, status codes and semantics of kube-apiserver and of the few controllers
those operations depend on (disruption, taint eviction, node lifecycle, kubelet pod
termination, a minimal scheduler):

- discovery: /version, /api, /apis (legacy and aggregated apidiscovery.k8s.io/v2),
  /api/v1 and /apis/GROUP/VERSION resource lists;
- core/v1 namespaces, nodes (+status), pods (+status, +eviction), events, configmaps;
  coordination.k8s.io/v1 leases; apps/v1 daemonsets, replicasets, statefulsets; policy/v1 poddisruptionbudgets;
  events.k8s.io/v1 events (the same objects as core/v1 events, converted);
- get, list (label and field selectors), watch, create, update, delete and patch
  (strategic merge, JSON merge and JSON patch), server-side Table output for kubectl;
- the pods/eviction subresource with PodDisruptionBudget checks as the real server does them.

Run it with ``python3 fake_apiserver.py --port 0 --state STATE.json --ready-file F`` or
import it and call ``start(state)``.  It listens on 127.0.0.1 only, plain HTTP, no auth.
This file is the entry point; the server itself is the package ``fake_api`` beside it, one module per
part (see tests/sim/kube/README.md, "Layout"), and the names below are re-exported from there.
Tests and the fleet script drive it through ``/_sim/...`` (see tests/sim/kube/README.md).
Only the standard library is used.
"""

import argparse
import json
import os
import signal
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The names tests, benchmarks and tests/sim use (and the server's building blocks), from the package.
# pylint: disable=wrong-import-position,import-error
from fake_api.api import Api, Response  # noqa: E402
from fake_api.common import (BY_PATH, BY_STORAGE, FINISH_AFTER, GROUPS, KUBE_VERSION, RESOURCES, SHUTDOWN_SECONDS, STATE_KEYS,  # noqa: E402
                             TICK_SECONDS, ApiError, Resource)
from fake_api.server import FakeApiServer, Handler, load_state, start, stop, write_kubeconfig  # noqa: E402
from fake_api.store import Store, decoded  # noqa: E402
# pylint: enable=wrong-import-position,import-error

__all__ = ['Api', 'ApiError', 'BY_PATH', 'BY_STORAGE', 'FINISH_AFTER', 'FakeApiServer', 'GROUPS', 'Handler', 'KUBE_VERSION', 'RESOURCES',
           'Resource', 'Response', 'SHUTDOWN_SECONDS', 'STATE_KEYS', 'Store', 'TICK_SECONDS', 'decoded', 'load_state', 'main', 'start', 'stop',
           'write_kubeconfig']


def main(argv=None):
    parser = argparse.ArgumentParser(description='Fake Kubernetes API server for the simulated GPU fleet (127.0.0.1, plain HTTP).')
    parser.add_argument('--port', type=int, default=0, help='port to listen on (0: any free port)')
    parser.add_argument('--state', help='initial state JSON: {"nodes": [...], "pods": [...], "daemonsets": [...], "poddisruptionbudgets": [...]}')
    parser.add_argument('--ready-file', help='write the port here once listening')
    parser.add_argument('--kubeconfig', help='also write a kubeconfig for the server here')
    parser.add_argument('--save-state', help='write the final state here on exit')
    parser.add_argument('--verbose', action='store_true', help='log every request on stderr')
    options = parser.parse_args(argv)
    server, thread, url = start(options.state, options.port, options.verbose)
    if options.kubeconfig:
        write_kubeconfig(options.kubeconfig, url)
    if options.ready_file:
        temporary = options.ready_file + '.tmp'
        with open(temporary, 'w', encoding='utf-8') as handle:
            handle.write('%d\n' % server.port)
        os.replace(temporary, options.ready_file)
    done = threading.Event()

    def finish(_signum, _frame):
        done.set()

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    while not done.wait(0.5) and thread.is_alive():
        pass
    if options.save_state:
        with open(options.save_state, 'w', encoding='utf-8') as handle:
            json.dump(server.store.dump(), handle, indent=2)
    stop(server)
    return 0


if __name__ == '__main__':
    sys.exit(main())
