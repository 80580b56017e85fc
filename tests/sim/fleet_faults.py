# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fault knobs of the simulated fleet: parsing ``fleet fault NODE NAME key=value ...`` and the Xid log.

The fault file format is described in tests/sim/README.md; the fake tools read it inside the node.
"""

from __future__ import annotations

import os
import time

# fault -> {setting: type}
FAULTS = {
    'diag_fail': {'level': int, 'test': str, 'gpu': int, 'branch': int},
    'reboot_hang': {},
    'fm_fail': {'mismatch': str},
    'dpkg_fail': {'package': str},
    'dkms_fail': {},
    'xid': {'gpu': int, 'xid': int},
    'long_job': {'seconds': int},
    'dpkg_lock': {'seconds': int},
    'gpu_lost': {'gpu': int},
    'nccl_slow': {'busbw': float, 'branch': int},
    'nccl_fail': {'error': str, 'branch': int},
    'gpu_held': {'gpu': int, 'seconds': int},
    'slow_boot': {'seconds': int},
}
DEFAULTS = {
    'diag_fail': {'level': 1, 'gpu': 0},
    'xid': {'gpu': 0, 'xid': 79},
    'long_job': {'seconds': 3600},
    'dpkg_lock': {'seconds': 30},
    'gpu_lost': {'gpu': 0},
    'nccl_fail': {'error': 'system'},
    'gpu_held': {'gpu': 0, 'seconds': 3600},
    'slow_boot': {'seconds': 30},
}
# nccl_fail errors (ncclResult_t names, see tests/sim/node/gpufleet_sim/nccl_tests.py NCCL_ERRORS).
NCCL_FAIL_ERRORS = ('cuda', 'system', 'internal', 'invalid_argument', 'invalid_usage', 'remote')
# Faults that need a process inside the node: the command ``fleet fault`` runs there (``podman exec``) after writing
# faults.json. Each returns at once (the process runs in the background) and does nothing when it already runs.
NODE_PYTHONPATH = 'PYTHONPATH=/usr/lib/gpufleet-sim'
XID_TEXT = {
    79: 'GPU has fallen off the bus.',
    48: 'DBE (Double Bit Error) ECC Error',
    63: 'Row remapping event: Row remapper: ECC error',
    13: 'Graphics Engine Exception',
}


class FaultError(ValueError):
    """A fault request that cannot be applied."""


def parse_fault_settings(name, settings):
    """``['level=3', 'gpu=2']`` -> {'level': 3, 'gpu': 2} for fault ``name``, defaults applied."""
    if name not in FAULTS:
        raise FaultError('unknown fault %s; faults: %s' % (name, ', '.join(sorted(FAULTS))))
    result = dict(DEFAULTS.get(name, {}))
    for setting in settings:
        key, separator, value = setting.partition('=')
        if not separator or key not in FAULTS[name]:
            raise FaultError('fault %s takes %s, got %r' % (name, ', '.join('%s=' % k for k in FAULTS[name]) or 'no settings', setting))
        try:
            result[key] = FAULTS[name][key](value)
        except ValueError:
            raise FaultError('fault %s: %s must be a %s, got %r' % (name, key, FAULTS[name][key].__name__, value))
    if name == 'nccl_fail' and result['error'] not in NCCL_FAIL_ERRORS:
        raise FaultError('fault nccl_fail: error must be one of %s, got %r' % (', '.join(NCCL_FAIL_ERRORS), result['error']))
    if name == 'nccl_slow' and 'busbw' in result and result['busbw'] <= 0:
        raise FaultError('fault nccl_slow: busbw must be above 0 GB/s, got %r' % result['busbw'])
    if name == 'diag_fail' and 'test' not in result:
        result['test'] = 'software' if result['level'] == 1 else 'memory'
    return result


def node_command(name, settings):
    """The argument list to run inside the node for fault ``name`` (None when the fault is only read from faults.json).

    ``dpkg_lock``: a process named ``unattended-upgr`` takes the dpkg locks as apt does and holds them
    ``seconds`` (tests/sim/node/gpufleet_sim/dpkg_lock.py).
    ``gpu_held``: a process opens ``/dev/nvidiactl`` and ``/dev/nvidia<gpu>`` and keeps them open ``seconds``, as a job
    using the GPU does (tests/sim/node/gpufleet_sim/gpu_hold.py).
    """
    if name == 'dpkg_lock':
        return ['env', NODE_PYTHONPATH, 'python3', '-m', 'gpufleet_sim.dpkg_lock', 'start', '--seconds', str(int(settings['seconds']))]
    if name == 'gpu_held':
        return ['env', NODE_PYTHONPATH, 'python3', '-m', 'gpufleet_sim.gpu_hold', 'start', '--gpu', str(int(settings['gpu'])),
                '--seconds', str(int(settings['seconds']))]
    return None


def stop_commands(faults):
    """Argument lists to run in the node when ``faults`` (the faults.json content being cleared) are cleared: the
    processes ``node_command`` started end (a ``gpu_held`` holder lets go of the GPUs)."""
    commands = []
    if 'gpu_held' in (faults or {}):
        commands.append(['env', NODE_PYTHONPATH, 'python3', '-m', 'gpufleet_sim.gpu_hold', 'stop'])
    return commands


def xid_line(hardware, settings, now=None):
    """A kernel-log line in the real NVRM format for the Xid fault."""
    gpus = hardware.get('gpus') or []
    index = settings.get('gpu', 0)
    if index >= len(gpus):
        raise FaultError('gpu %d does not exist (the node has %d GPUs)' % (index, len(gpus)))
    domain, rest = gpus[index]['pci_bus_id'].split(':', 1)   # "00000000:18:00.0" -> "0000:18:00" as NVRM prints it
    bus = '%s:%s' % (domain[-4:], rest.rsplit('.', 1)[0])
    xid = settings.get('xid', 79)
    stamp = time.strftime('%a %b %d %H:%M:%S %Y', time.localtime(now))
    return '[%s] NVRM: Xid (PCI:%s): %d, pid=\'<unknown>\', name=<unknown>, %s\n' % (stamp, bus, xid, XID_TEXT.get(xid, 'Xid event'))


def append_xid(var_dir, hardware, settings):
    """Append the Xid line to the node's kernel log (``/var/lib/gpufleet-sim/xid.log`` inside the node)."""
    os.makedirs(var_dir, exist_ok=True)
    with open(os.path.join(var_dir, 'xid.log'), 'a', encoding='utf-8') as handle:
        handle.write(xid_line(hardware, settings))
