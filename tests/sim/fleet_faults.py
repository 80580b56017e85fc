# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fault knobs of the simulated fleet: parsing ``fleet fault NODE NAME key=value ...`` and the Xid log.

The faults, their settings and defaults are the table in tests/sim/node/gpufleet_sim/fault_table.py (the README's
"Faults" table is printed from it); the fake tools read faults.json inside the node through the same table.
"""

from __future__ import annotations

import os
import sys
import time

_NODE_CODE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'node')
if _NODE_CODE not in sys.path:
    sys.path.insert(0, _NODE_CODE)

# The fault table (names, settings, types, defaults) is the node's own: tests/sim/node/gpufleet_sim/fault_table.py.
from gpufleet_sim import fault_table  # noqa: E402  pylint: disable=wrong-import-position
from gpufleet_sim.fault_table import FAULTS, FaultError  # noqa: E402  pylint: disable=wrong-import-position

__all__ = ['FAULTS', 'FaultError', 'NODE_PYTHONPATH', 'XID_TEXT', 'append_xid', 'node_command', 'parse_fault_settings', 'stop_commands', 'xid_line']

# Faults that need a process inside the node: the command ``fleet fault`` runs there (``podman exec``) after writing
# faults.json. Each returns at once (the process runs in the background) and does nothing when it already runs.
NODE_PYTHONPATH = 'PYTHONPATH=/usr/lib/gpufleet-sim'
XID_TEXT = {
    fault_table.XID_FALLEN_OFF_BUS: 'GPU has fallen off the bus.',
    48: 'DBE (Double Bit Error) ECC Error',
    63: 'Row remapping event: Row remapper: ECC error',
    13: 'Graphics Engine Exception',
}


def parse_fault_settings(name, settings):
    """``['level=3', 'gpu=2']`` -> {'level': 3, 'gpu': 2, ...} for fault ``name``, checked, defaults applied (the table's)."""
    return fault_table.parse_settings(name, settings)


def node_command(name, settings):
    """The argument list to run inside the node for fault ``name`` (None when the fault is only read from faults.json).

    ``dpkg_lock``: a process named ``unattended-upgr`` takes the dpkg locks as apt does and holds them
    ``seconds`` (tests/sim/node/gpufleet_sim/dpkg_lock.py).
    ``gpu_held``: a process opens ``/dev/nvidiactl`` and ``/dev/nvidia<gpu>`` and keeps them open ``seconds``, as a job
    using the GPU does (tests/sim/node/gpufleet_sim/gpu_hold.py).
    """
    settings = fault_table.apply_defaults(name, settings)
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
    settings = fault_table.apply_defaults('xid', settings)
    gpus = hardware.get('gpus') or []
    index = settings['gpu']
    if index >= len(gpus):
        raise FaultError('gpu %d does not exist (the node has %d GPUs)' % (index, len(gpus)))
    domain, rest = gpus[index]['pci_bus_id'].split(':', 1)   # "00000000:18:00.0" -> "0000:18:00" as NVRM prints it
    bus = '%s:%s' % (domain[-4:], rest.rsplit('.', 1)[0])
    xid = settings['xid']
    stamp = time.strftime('%a %b %d %H:%M:%S %Y', time.localtime(now))
    return '[%s] NVRM: Xid (PCI:%s): %d, pid=\'<unknown>\', name=<unknown>, %s\n' % (stamp, bus, xid, XID_TEXT.get(xid, 'Xid event'))


def append_xid(var_dir, hardware, settings):
    """Append the Xid line to the node's kernel log (``/var/lib/gpufleet-sim/xid.log`` inside the node)."""
    os.makedirs(var_dir, exist_ok=True)
    with open(os.path.join(var_dir, 'xid.log'), 'a', encoding='utf-8') as handle:
        handle.write(xid_line(hardware, settings))
