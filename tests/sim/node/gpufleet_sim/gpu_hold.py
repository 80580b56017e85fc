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
import signal
import subprocess
import sys
import time

from gpufleet_sim import state

PID_FILE = 'run/gpufleet-sim/gpu-held.pid'
DEFAULT_SECONDS = 3600


class _Stop(Exception):
    """Raised by the signal handler to leave the hold early."""


def _handler(signum, frame):
    del frame
    raise _Stop(signum)


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
    text = state.read_text(PID_FILE)
    if text is None or not text.strip().isdigit():
        return None
    pid = int(text.strip())
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    return pid


def hold(gpu, seconds):
    """Open the GPU's device nodes, keep them open ``seconds`` (or until SIGTERM); returns the exit status."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _handler)
    descriptors = []
    try:
        for relative in devices(gpu):
            try:
                descriptors.append(open_device(relative))
            except OSError as exc:
                sys.stderr.write('gpu_hold: cannot open %s: %s\n' % (state.path(relative), exc.strerror))
                return 1
        state.write_text(PID_FILE, '%d\n' % os.getpid())
        deadline = time.time() + seconds
        while time.time() < deadline:
            time.sleep(min(0.5, max(0.0, deadline - time.time())))
    except _Stop:
        pass
    finally:
        text = state.read_text(PID_FILE)
        if text is not None and text.strip() == str(os.getpid()):
            state.remove(PID_FILE)
        for descriptor in reversed(descriptors):
            os.close(descriptor)
    return 0


def start(gpu, seconds, wait=10.0):
    """Start a holder in its own session unless one runs; wait until it holds the devices; returns its pid."""
    pid = holder_pid()
    if pid is not None:
        return pid
    process = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, '-m', 'gpufleet_sim.gpu_hold', 'hold', '--gpu', str(gpu), '--seconds', str(seconds)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + wait
    while time.time() < deadline:
        if holder_pid() == process.pid:
            process.stderr.close()
            return process.pid
        if process.poll() is not None:
            raise SystemExit('gpu_hold: the holder ended (rc=%s): %s' % (process.returncode, process.stderr.read().decode('utf-8', 'replace').strip()))
        time.sleep(0.05)
    process.kill()
    raise SystemExit('gpu_hold: the holder did not open the devices in %ds' % wait)


def stop(wait=10.0):
    """End a running holder (SIGTERM); returns its pid or None when none ran."""
    pid = holder_pid()
    if pid is None:
        return None
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + wait
    while time.time() < deadline and holder_pid() == pid:
        time.sleep(0.05)
    return pid


def main(argv=None):
    parser = argparse.ArgumentParser(prog='gpu_hold', description=__doc__.split('\n', 1)[0])
    parser.add_argument('action', choices=['start', 'hold', 'stop'])
    parser.add_argument('--gpu', type=int, default=None)
    parser.add_argument('--seconds', type=int, default=None)
    arguments = parser.parse_args(argv)
    settings = state.fault('gpu_held') or {}
    gpu = arguments.gpu if arguments.gpu is not None else int(settings.get('gpu', 0))
    seconds = arguments.seconds if arguments.seconds is not None else int(settings.get('seconds', DEFAULT_SECONDS))
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
