# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A background process that holds something for a while: the machinery of the ``dpkg_lock`` and ``gpu_held`` faults.

A holder runs in its own session, writes its pid to a pid file (node-root relative) once it holds what it holds,
keeps it ``seconds`` or until SIGTERM/SIGINT/SIGHUP, then releases it and removes its pid file.  ``start`` starts one
unless one runs and returns once it holds; ``stop`` ends it early.  It is an ordinary process of this boot: it does not
come back after a reboot.
"""

import os
import signal
import subprocess
import sys
import time

from gpufleet_sim import state


class _Stop(Exception):
    """Raised by the signal handler to leave the hold early."""


def _handler(signum, frame):
    del frame
    raise _Stop(signum)


def holder_pid(pid_file):
    """Pid of the running holder, None when none runs."""
    text = state.read_text(pid_file)
    if text is None or not text.strip().isdigit():
        return None
    pid = int(text.strip())
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    return pid


def hold(pid_file, seconds, acquire):
    """Call ``acquire(descriptors)`` (it appends what it opens; returns an exit status to give up, else None), write the
    pid file, wait ``seconds`` or for a signal, release; returns the exit status."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _handler)
    descriptors = []
    try:
        failed = acquire(descriptors)
        if failed is not None:
            return failed
        state.write_text(pid_file, '%d\n' % os.getpid())
        deadline = time.time() + seconds
        while time.time() < deadline:
            time.sleep(min(0.5, max(0.0, deadline - time.time())))
    except _Stop:
        pass
    finally:
        text = state.read_text(pid_file)
        if text is not None and text.strip() == str(os.getpid()):
            state.remove(pid_file)
        for descriptor in reversed(descriptors):
            os.close(descriptor)
    return 0


def start(pid_file, module, arguments, what, wait=10.0):
    """Start ``python3 -m <module> hold <arguments>`` in its own session unless a holder runs; wait until it holds
    (``what`` says what, for the error); returns its pid."""
    name = module.rsplit('.', 1)[-1]
    pid = holder_pid(pid_file)
    if pid is not None:
        return pid
    process = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, '-m', module, 'hold'] + list(arguments),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + wait
    while time.time() < deadline:
        if holder_pid(pid_file) == process.pid:
            process.stderr.close()
            return process.pid
        if process.poll() is not None:
            raise SystemExit('%s: the holder ended (rc=%s): %s' % (name, process.returncode, process.stderr.read().decode('utf-8', 'replace').strip()))
        time.sleep(0.05)
    process.kill()
    raise SystemExit('%s: the holder did not %s in %ds' % (name, what, wait))


def stop(pid_file, wait=10.0):
    """End a running holder (SIGTERM); returns its pid or None when none ran."""
    pid = holder_pid(pid_file)
    if pid is None:
        return None
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + wait
    while time.time() < deadline and holder_pid(pid_file) == pid:
        time.sleep(0.05)
    return pid
