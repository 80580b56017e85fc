# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``gpu_held`` fault: a process that keeps a GPU open, as a job (or a stray CUDA process) does.

    python3 -m gpufleet_sim.gpu_hold start [--gpu N] [--seconds S]   # start a holder in the background, once; prints JSON
    python3 -m gpufleet_sim.gpu_hold hold --gpu N --seconds S       # the holder itself (foreground)
    python3 -m gpufleet_sim.gpu_hold stop                           # end the holder early

The holder opens ``/dev/nvidiactl`` and ``/dev/nvidia<N>`` -- the device nodes a CUDA process keeps open -- and keeps
the descriptors until ``seconds`` pass, SIGTERM, or the node reboots (it is an ordinary process of this boot, so it
does not come back after a reboot, whatever faults.json says).  Every tool that looks for GPU users sees it the
way it sees one on metal: ``/proc/PID/fd/*`` links to ``/dev/nvidia0``, ``fuser -v /dev/nvidia0``, ``lsof /dev/nvidia0``.

The device nodes of a simulated node are character devices 195:N (or empty files where mknod is not allowed) with no
driver behind them on the host, so ``open(O_RDWR)`` can fail with ENXIO or EPERM; the holder then opens them with
``O_PATH``, which gives the same kind of descriptor-to-path link without calling a driver.  Its pid is in
``/run/gpufleet-sim/gpu-held.pid`` while it holds them; ``start`` returns once they are open.
"""

import argparse
import json
import os
import sys

from gpufleet_sim import fault_table, holder, state

PID_FILE = 'run/gpufleet-sim/gpu-held.pid'


def devices(gpu):
    """The device nodes the holder keeps open (node-root relative)."""
    return ['dev/nvidiactl', 'dev/nvidia%d' % int(gpu)]


def open_device(relative):
    """A descriptor of the device node: read-write as CUDA opens it, else ``O_PATH`` (no driver behind it here)."""
    target = state.path(relative)
    try:
        return os.open(target, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return os.open(target, getattr(os, 'O_PATH', os.O_RDONLY) | os.O_CLOEXEC)


def holder_pid():
    """Pid of the running holder, None when none runs."""
    return holder.holder_pid(PID_FILE)


def hold(gpu, seconds):
    """Open the GPU's device nodes, keep them open ``seconds`` (or until SIGTERM); returns the exit status."""
    def acquire(descriptors):
        for relative in devices(gpu):
            try:
                descriptors.append(open_device(relative))
            except OSError as exc:
                sys.stderr.write('gpu_hold: cannot open %s: %s\n' % (state.path(relative), exc.strerror))
                return 1
        return None
    return holder.hold(PID_FILE, seconds, acquire)


def start(gpu, seconds, wait=10.0):
    """Start a holder in its own session unless one runs; wait until it holds the devices; returns its pid."""
    return holder.start(PID_FILE, 'gpufleet_sim.gpu_hold', ['--gpu', str(gpu), '--seconds', str(seconds)], 'open the devices', wait)


def stop(wait=10.0):
    """End a running holder (SIGTERM); returns its pid or None when none ran."""
    return holder.stop(PID_FILE, wait)


def _target(gpu, seconds):
    """(gpu, seconds) to hold: the given ones, else the gpu_held fault's in faults.json, else the fault table's defaults."""
    settings = state.fault('gpu_held') or fault_table.apply_defaults('gpu_held', {})
    return (int(settings['gpu']) if gpu is None else gpu), (int(settings['seconds']) if seconds is None else seconds)


def main(argv=None):
    parser = argparse.ArgumentParser(prog='gpu_hold', description=__doc__.split('\n', 1)[0])
    parser.add_argument('action', choices=['start', 'hold', 'stop'])
    parser.add_argument('--gpu', type=int, default=None)
    parser.add_argument('--seconds', type=int, default=None)
    arguments = parser.parse_args(argv)
    gpu, seconds = _target(arguments.gpu, arguments.seconds)
    if arguments.action == 'hold':
        return hold(gpu, seconds)
    if arguments.action == 'start':
        pid = start(gpu, seconds)
        print(json.dumps({'pid': pid, 'seconds': seconds, 'devices': ['/' + relative for relative in devices(gpu)]}))
        return 0
    print(json.dumps({'stopped': stop()}))
    return 0


if __name__ == '__main__':
    sys.exit(main())
