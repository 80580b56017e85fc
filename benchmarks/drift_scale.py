#!/usr/bin/env python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The nightly drift report at fleet scale against the runbook's way, on the same hosts, in one run.

Not a test. Builds HOSTS local-connection hosts (default 256), each with its own folder of stand-in NVIDIA tools that
print real captured outputs (tests/unit/fixtures/real-outputs: ``nvidia-smi -q -x``, ``nvidia-smi --query-gpu``,
``nvidia-smi -q``, ``dpkg -l``, ``dcgmi --version``; ``dpkg-query -W`` prints the same ``dpkg -l`` sample's packages in
the form gpu_facts asks for; ``nvcc --version`` prints NVIDIA's banner from tests/unit/plugins/module_utils/test__packages.py).
The stand-ins are ``cat``-like shell scripts, so the tools cost little and the controller's work dominates, as on metal.
Their folder is first on PATH for ansible and for the modules' interpreter alike, as the tools are on a node's PATH.

Then it times
  * the runbook's way: its five ad-hoc shell commands, one ``ansible all -m ansible.builtin.shell`` run each
    (``nvidia-smi --query-gpu``, ``nvidia-smi -q | grep``, ``dpkg -l | grep``, ``nvcc --version``, ``dcgmi --version``);
  * ``playbooks/drift_report.yml`` (one drift_check task per host, which reads the node with one shell command and
    assembles the facts on the controller: no Python on the node);
and prints wall time, the ratio (target: at most 0.20) and the controller CPU seconds per host (user + system of
ansible and all its children: with local connections that includes the modules, which run on the nodes on metal).

    PATH=$PWD/.venv/bin:$PATH python benchmarks/drift_scale.py [--hosts 256] [--forks 32]
"""

import argparse
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import time

from _checkout import ROOT  # noqa: E402  pylint: disable=wrong-import-position,import-error
sys.path.insert(0, os.path.join(ROOT, 'tests', 'unit'))

from conftest import SYSTEM_PATH, ansible_environment, real  # noqa: E402  pylint: disable=wrong-import-position,import-error
from listing_readers import parse_dpkg_l  # noqa: E402  pylint: disable=wrong-import-position,import-error

DRIFT_REPORT = os.path.join(ROOT, 'playbooks', 'drift_report.yml')
DPKG_L = real('packages', 'dpkg-l-nvidia_535.129.03_ubuntu22.04_nct-1.15.0rc1_nct-issue196.txt')
SAMPLES = {
    'xml': real('nvidia-smi-xml', 'telegraf_a100-sxm4-80gb_535.54.03_v12.xml'),
    'csv': real('nvidia-smi-csv', 'nvgpuexp_rtx2080super_465.27_query-gpu.csv'),
    'q': real('nvidia-smi-q', 'thamada_h100-sxm5-80gb-x8_565.57.01.txt'),
    'dpkg_l': DPKG_L,
    'dcgmi': real('dcgmi', 'dcgmi-v_3.3.1_hostengine-3.3.0_DCGM-issue139.txt'),
}
NVCC = ('nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2024 NVIDIA Corporation\nBuilt on Thu_Mar_28_02:18:24_PDT_2024\n'
        'Cuda compilation tools, release 12.4, V12.4.131\nBuild cuda_12.4.r12.4/compiler.34097967_0\n')
# The runbook's five ad-hoc commands (seeds: image-drift runbook, "inventory" step).
RUNBOOK = [
    'nvidia-smi --query-gpu=driver_version,vbios_version --format=csv,noheader',
    "nvidia-smi -q | grep -i -E 'driver version|cuda version|vbios|gsp firmware'",
    "dpkg -l | grep -E 'nvidia|cuda|datacenter-gpu-manager|libnvidia'",
    'nvcc --version',
    'dcgmi --version',
]
PIN = {'driver': '535.54.03', 'container_toolkit': '1.15.0', 'dcgm': '3.3.1'}


def script(path, body):
    with open(path, 'w', encoding='utf-8') as handle:
        handle.write('#!/bin/sh\n' + body)
    os.chmod(path, 0o755)


def make_fleet(base, count):
    """The inventory of ``count`` hosts sharing one folder of stand-ins (every host reads the same samples)."""
    shutil.rmtree(base, ignore_errors=True)
    tools = os.path.join(base, 'bin')
    os.makedirs(tools)
    samples = os.path.join(base, 'samples')
    os.makedirs(samples)
    for key, path in SAMPLES.items():
        shutil.copy(path, os.path.join(samples, key))
    with open(DPKG_L, encoding='utf-8') as handle:
        listing = parse_dpkg_l(handle.read())
    with open(os.path.join(samples, 'dpkg_query'), 'w', encoding='utf-8') as handle:
        for row in listing.values():
            handle.write('%s\t%s\t%s \n' % (row['package'], row['version'] or '', row['status']))
    with open(os.path.join(samples, 'nvcc'), 'w', encoding='utf-8') as handle:
        handle.write(NVCC)
    quoted = dict((key, shlex.quote(os.path.join(samples, key))) for key in list(SAMPLES) + ['dpkg_query', 'nvcc'])
    script(os.path.join(tools, 'nvidia-smi'), 'case " $* " in\n  *" -x "*) exec cat %s ;;\n  *--query-gpu*) exec cat %s ;;\n'
           '  *) exec cat %s ;;\nesac\n' % (quoted['xml'], quoted['csv'], quoted['q']))
    script(os.path.join(tools, 'dpkg-query'), 'exec cat %s\n' % quoted['dpkg_query'])
    script(os.path.join(tools, 'dpkg'), 'exec cat %s\n' % quoted['dpkg_l'])
    script(os.path.join(tools, 'dcgmi'), 'exec cat %s\n' % quoted['dcgmi'])
    script(os.path.join(tools, 'nvcc'), 'exec cat %s\n' % quoted['nvcc'])
    interpreter = os.path.join(base, 'python')
    script(interpreter, 'PATH=%s\nexport PATH\nexec %s "$@"\n' % (shlex.quote(tools + ':' + SYSTEM_PATH), shlex.quote(sys.executable)))
    hosts = dict(('gpu%04d' % index, {}) for index in range(count))
    inventory = os.path.join(base, 'inventory.json')
    with open(inventory, 'w', encoding='utf-8') as handle:
        json.dump({'gpu': {'hosts': hosts, 'vars': {'ansible_connection': 'local', 'ansible_python_interpreter': interpreter}}}, handle)
    return inventory


def timed(command, environment):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    process = subprocess.run(command, env=environment, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode != 0:
        raise SystemExit('%s failed (rc=%s):\n%s%s' % (' '.join(command[:3]), process.returncode, process.stdout[-3000:], process.stderr[-3000:]))
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), process


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--hosts', type=int, default=256)
    parser.add_argument('--forks', type=int, default=32)
    parser.add_argument('--base', default=os.path.join(ROOT, 'build', 'bench-drift-scale'))
    args = parser.parse_args()
    inventory = make_fleet(args.base, args.hosts)
    environment = ansible_environment()
    environment['PATH'] = os.path.join(args.base, 'bin') + ':' + environment['PATH']
    environment.update({'ANSIBLE_FORKS': str(args.forks), 'ANSIBLE_STDOUT_CALLBACK': 'ansible.builtin.default', 'ANSIBLE_LOAD_CALLBACK_PLUGINS': '1'})
    environment.pop('ANSIBLE_CALLBACK_RESULT_FORMAT', None)
    runbook_wall = runbook_cpu = 0.0
    for command in RUNBOOK:
        wall, cpu, process = timed(['ansible', '-i', inventory, 'gpu', '-m', 'ansible.builtin.shell', '-a', command, '-o'], environment)
        if process.stdout.count('CHANGED') + process.stdout.count('SUCCESS') < args.hosts:
            raise SystemExit('%r did not succeed on every host:\n%s' % (command, process.stdout[-2000:]))
        runbook_wall += wall
        runbook_cpu += cpu
        print('runbook  %-80s %7.1f s wall %7.1f s CPU' % (command[:80], wall, cpu))
    wall, cpu, process = timed(['ansible-playbook', '-i', inventory, DRIFT_REPORT, '-e', json.dumps({'gpufleet_pin': PIN})], environment)
    # Every stand-in node reads 1.15.0~rc.1 for the container toolkit pinned at 1.15.0: drifted, so changed=1 on each.
    if process.stdout.count('changed=1 ') != args.hosts:
        raise SystemExit('drift_report did not find every host drifted:\n%s' % process.stdout[-2000:])
    print('drift_report (one drift_check task per host)%s %7.1f s wall %7.1f s CPU' % (' ' * 46, wall, cpu))
    numbers = (args.hosts, args.forks, runbook_wall, wall, wall / runbook_wall, runbook_cpu / args.hosts, cpu / args.hosts)
    print('hosts %d, forks %d: runbook %.1f s, drift_report %.1f s, ratio %.2f (target <= 0.20); controller CPU per host: '
          'runbook %.3f s, drift_report %.3f s' % numbers)


if __name__ == '__main__':
    main()
