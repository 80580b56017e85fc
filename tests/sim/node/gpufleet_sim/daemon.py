# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Shared daemon loop of the fake nv-fabricmanager and nvidia-persistenced.

The daemons stay in the foreground (run them from ``Type=simple`` units): they write their pid
file under ``run/gpufleet-sim/``, sleep until SIGTERM/SIGINT/SIGHUP and remove the pid file.
"""

import os
import signal
import time

from gpufleet_sim import state


class _Stop(Exception):
    """Raised by the signal handler to leave the sleep loop."""


def _handler(signum, frame):
    del frame
    raise _Stop(signum)


def serve(pid_file, max_seconds=None):
    """Write ``pid_file``, wait for a stop signal (or ``max_seconds``), remove it; returns 0."""
    previous = {}
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        previous[signum] = signal.signal(signum, _handler)
    state.write_text(pid_file, '%d\n' % os.getpid())
    deadline = None if max_seconds is None else time.time() + max_seconds
    try:
        while deadline is None or time.time() < deadline:
            time.sleep(1 if deadline is None else min(1.0, max(0.0, deadline - time.time())))
    except _Stop:
        pass
    finally:
        text = state.read_text(pid_file)
        if text is not None and text.strip() == str(os.getpid()):
            state.remove(pid_file)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0
