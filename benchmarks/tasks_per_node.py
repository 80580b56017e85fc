#!/usr/bin/env python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What one node's happy path costs the controller: tasks per node (per phase) and controller CPU seconds per node.

Not a test: brings up a 1-node simulated fleet (tests/sim/fleet, Slurm), runs gpufleet.lifecycle.node_upgrade on it
(550 -> 580, reboot, validate, uncordon; tests/integration/playbooks/node_upgrade.yml) with the ansible.posix.json
callback, and counts every task result of the node, skipped ones included (they cost the controller too), plus the
include_tasks/include_role results. The controller CPU is the user + system time of ansible-playbook and its children
(the SSH clients included). Needs root and podman, like the integration tests.

    PATH=$PWD/.venv/bin:$PATH python benchmarks/tasks_per_node.py [--keep] [--state-dir DIR] [--mode role|window|batch] [--files]

``--mode window`` / ``--mode batch`` run the whole ``playbooks/rolling_restart.yml`` on the node instead (window 1, canary
0; or one batch): the node's task results as above, plus the results on localhost (the start, the gate's steps run on
the node's worker count as the node's, the finish) reported apart, since a rollout pays them too.

``--files`` lists the files one node's path crosses, in the order a reader meets them: the YAML files its task results
came from, the collection's action plugins and modules they ran, and the module_utils / plugin_utils those import
(benchmarks/callbacks/node_path.py records each result's task file); and the hops (a move to another task file, or a
call of a collection plugin). Filters called from templates are not counted.
"""

import argparse
import collections
import json
import os
import re
import resource
import subprocess
import sys
import time

from _checkout import ROOT  # noqa: E402  pylint: disable=wrong-import-position,import-error

from conftest import SIM, ansible_environment  # noqa: E402  pylint: disable=wrong-import-position,import-error

sys.path.insert(0, SIM)
import kube_fleet  # noqa: E402  pylint: disable=wrong-import-position,import-error

PLAYBOOK = os.path.join(ROOT, 'tests', 'integration', 'playbooks', 'node_upgrade.yml')
ROLLING_RESTART = os.path.join(ROOT, 'playbooks', 'rolling_restart.yml')
PIN_580 = {'driver': '580.65.06', 'fabric_manager': '580.65.06', 'container_toolkit': '1.17.0', 'dcgm': '4.1.0'}
SIM_VARS = {'gpufleet_boot_time_command': 'stat -c %Z /proc/1', 'gpufleet_reboot_timeout': 45, 'gpufleet_drain_timeout': 20,
            'node_upgrade_wait_sleep': 1}
NODE = 'gpu-01'


def fleet(state_dir, *arguments):
    process = subprocess.run([os.path.join(SIM, 'fleet'), '--state-dir', state_dir] + list(arguments),
                             capture_output=True, text=True, check=False, timeout=1800)
    if process.returncode != 0:
        raise SystemExit('fleet %s failed (rc=%s):\n%s%s' % (' '.join(arguments), process.returncode, process.stdout, process.stderr))
    return process.stdout


def phases(document, node):
    """[(phase, task name, status)] of every result of ``node``, in run order; the phase from the role's own marks."""
    phase = 'precheck'
    rows = []
    for play in document['plays']:
        for task in play['tasks']:
            outcome = task['hosts'].get(node)
            if outcome is None:
                continue
            facts = outcome.get('ansible_facts') or {}
            if 'node_upgrade_result' in facts:
                phase = 'report'
            elif isinstance(facts.get('_node_upgrade'), dict) and facts['_node_upgrade'].get('phase'):
                phase = facts['_node_upgrade']['phase']
            elif facts.get('_node_upgrade_phase'):     # the procedure before issue 25 (a before/after run on an older checkout)
                phase = facts['_node_upgrade_phase']
            status = 'skipped' if outcome.get('skipped') else 'failed' if outcome.get('failed') else 'ok'
            rows.append((phase, task['task']['name'], status))
    return rows


PLUGIN_IMPORT = re.compile(r'^from ansible_collections\.gpufleet\.lifecycle\.plugins\.(module_utils|plugin_utils)(?:\.(_\w+))? import ([\w, ()]+)',
                           re.MULTILINE)


def _plugin_file(action):
    """The collection file a task's action runs: its action plugin, else its module."""
    short = action.split('.')[-1]
    for folder in ('action', 'modules'):
        path = os.path.join('plugins', folder, short + '.py')
        if os.path.exists(os.path.join(ROOT, path)):
            return path
    return None


def _imports(path, seen):
    """``path`` and the collection's Python files it imports, transitively (module_utils, plugin_utils)."""
    if path in seen:
        return
    seen.append(path)
    with open(os.path.join(ROOT, path), encoding='utf-8') as handle:
        text = handle.read()
    for folder, module, names in PLUGIN_IMPORT.findall(text):
        candidates = [module] if module else [name.strip() for name in names.strip('()').split(',')]
        for name in candidates:
            child = os.path.join('plugins', folder, name + '.py')
            if os.path.exists(os.path.join(ROOT, child)):
                _imports(child, seen)


def node_path(rows, node):
    """(files, hops, plugin calls) of ``node``'s task results: the YAML files its tasks came from and the collection's Python
    files they ran (with what those import), in the order a reader meets them; a hop is a move to another YAML file between
    two task results, or a task that runs a collection plugin (the reader opens it)."""
    files, hops, calls, current = [], 0, 0, None
    for row in rows:
        if row['host'] != node:
            continue
        path = row['path'].rsplit(':', 1)[0]
        if path:
            path = os.path.relpath(os.path.realpath(path), ROOT)
            if path != current:
                hops += 1 if current is not None else 0
                current = path
            if path not in files:
                files.append(path)
        action = row['action'] or ''
        if action.startswith('gpufleet.lifecycle.'):
            plugin = _plugin_file(action)
            if plugin:
                calls += 1
                hops += 1
                _imports(plugin, files)
    return files, hops, calls


BASELINE = """---
- name: The fixed cost of a play on the node
  hosts: "{{ target }}"
  gather_facts: true
  gather_subset: [min]
  tasks:
    - name: One task
      ansible.builtin.debug:
        msg: baseline
"""


def baseline_cpu(inventory, state_dir):
    """Controller CPU seconds of the same kind of play with a single task (what every playbook run costs anyway)."""
    path = os.path.join(state_dir, 'baseline.yml')
    with open(path, 'w', encoding='utf-8') as handle:
        handle.write(BASELINE)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    process = subprocess.run(['ansible-playbook', '-i', inventory, path, '-e', json.dumps({'target': NODE})],
                             env=ansible_environment(), cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode != 0:
        raise SystemExit('the baseline play failed:\n%s%s' % (process.stdout[-2000:], process.stderr[-2000:]))
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--state-dir', default=os.path.join(ROOT, 'build', 'bench-tasks-per-node'))
    parser.add_argument('--keep', action='store_true', help='leave the fleet up (a second run reuses it, on 580 then)')
    parser.add_argument('--list', action='store_true', help='print every task result')
    parser.add_argument('--mode', choices=['role', 'window', 'batch'], default='role',
                        help='role: node_upgrade alone; window, batch: playbooks/rolling_restart.yml in that mode')
    parser.add_argument('--scheduler', choices=['slurm', 'kubernetes'], default='slurm',
                        help='kubernetes: the node is drained through the fake Kubernetes API of tests/sim/kube')
    parser.add_argument('--files', action='store_true',
                        help="list the files a node's path crosses (YAML task files, the collection's plugins and what they import)")
    args = parser.parse_args()
    inventory = fleet(args.state_dir, 'up', '--nodes', '1', '--scheduler', 'slurm').strip().splitlines()[-1]
    try:
        variables = dict(SIM_VARS, target=NODE, gpufleet_pin=PIN_580)
        if args.scheduler == 'kubernetes':
            kubeconfig = kube_fleet.serve_fleet(os.path.join(args.state_dir, 'kube'), [NODE])
            variables.update(gpufleet_scheduler='kubernetes', gpufleet_kubeconfig=kubeconfig)
        playbook = PLAYBOOK
        if args.mode != 'role':
            playbook = ROLLING_RESTART
            variables.update(gpufleet_hosts=NODE, gpufleet_run_dir=os.path.join(args.state_dir, 'runs'), gpufleet_gate_poll=1)
            if args.mode == 'window':
                variables.update(gpufleet_window=1, gpufleet_canary=0)
        environment = ansible_environment()
        path_file = os.path.join(args.state_dir, 'node-path.json')
        if args.files:
            environment.update(ANSIBLE_CALLBACK_PLUGINS=os.path.join(ROOT, 'benchmarks', 'callbacks'), ANSIBLE_CALLBACKS_ENABLED='node_path',
                               GPUFLEET_NODE_PATH=path_file)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.time()
        process = subprocess.run(['ansible-playbook', '-i', inventory, playbook, '-e', json.dumps(variables)],
                                 env=environment, cwd=ROOT, capture_output=True, text=True, check=False, timeout=900)
        wall = time.time() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        document = json.loads(process.stdout)
        rows = phases(document, NODE)
        results = [task['hosts'][NODE]['ansible_facts']['node_upgrade_result'] for play in document['plays'] for task in play['tasks']
                   if 'node_upgrade_result' in ((task['hosts'].get(NODE) or {}).get('ansible_facts') or {})]
        result = results[-1] if results else {}
        controller = phases(document, 'localhost') if args.mode != 'role' else []
        if args.list:
            for row in rows:
                print('%-10s %-8s %s' % (row[0], row[2], row[1]))
        per_phase = collections.OrderedDict()
        for phase, _name, _status in rows:
            per_phase[phase] = per_phase.get(phase, 0) + 1
        print('state: %s (ansible-playbook rc=%s, %.1f s wall)' % (result.get('state'), process.returncode, wall))
        print('mode: %s; tasks per node: %d (%d skipped)' % (args.mode, len(rows), sum(1 for row in rows if row[2] == 'skipped')))
        if controller:
            print('task results on localhost (the run\'s start and finish, once per run): %d' % len(controller))
        print('per phase: ' + ', '.join('%s %d' % item for item in per_phase.items()))
        print('controller CPU seconds per node: %.2f' % cpu)
        if args.files:
            with open(path_file, encoding='utf-8') as handle:
                crossed, hops, calls = node_path(json.load(handle), NODE)
            print('files a node crosses: %d, hops: %d (of them %d calls of the collection\'s plugins)' % (len(crossed), hops, calls))
            for path in crossed:
                print('  ' + path)
        fixed = baseline_cpu(inventory, args.state_dir)
        print('of which the play\'s fixed cost (ansible-playbook start, inventory, facts; the same play with one debug task): %.2f;'
              ' the procedure itself: %.2f' % (fixed, cpu - fixed))
        return 0 if result.get('state') == 'done' and process.returncode == 0 else 1
    finally:
        if args.scheduler == 'kubernetes':
            kube_fleet.stop_fleet(os.path.join(args.state_dir, 'kube'))
        if not args.keep:
            fleet(args.state_dir, 'down')


if __name__ == '__main__':
    sys.exit(main())
