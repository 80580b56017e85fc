# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``dpkg_lock`` fault: a process that holds the dpkg locks for a while, as unattended-upgrades does.

    python3 -m gpufleet_sim.dpkg_lock start [--seconds N]   # start a holder in the background, once; prints JSON
    python3 -m gpufleet_sim.dpkg_lock hold --seconds N      # the holder itself (foreground)
    python3 -m gpufleet_sim.dpkg_lock stop                  # end the holder early

The holder takes the locks the way apt does (apt-pkg/deb/debsystem.cc ``debSystem::Lock`` and
apt-pkg/contrib/fileutl.cc ``GetLock``): ``open(O_RDWR | O_CREAT | O_NOFOLLOW, 0640)`` then an fcntl
``F_SETLK`` write lock on the whole file, first ``/var/lib/dpkg/lock-frontend``, then ``/var/lib/dpkg/lock``.
Its process name (``/proc/PID/comm``) is ``unattended-upgr``, the name the kernel gives unattended-upgrades,
so ``dpkg`` and ``apt-get`` print "locked by another process with pid N" / "held by process N (unattended-upgr)".
It releases the locks after ``seconds`` (from ``--seconds``, else the ``dpkg_lock`` fault in faults.json, else the
fault table's default, fault_table.py)
or on SIGTERM. ``start`` returns once the locks are held, and does nothing when a holder already runs.
"""

import argparse
import fcntl
import json
import os
import sys

from gpufleet_sim import fault_table, holder, state

LOCKS = ('var/lib/dpkg/lock-frontend', 'var/lib/dpkg/lock')
PID_FILE = 'run/gpufleet-sim/dpkg-lock.pid'
COMM = 'unattended-upgr'


def _set_name(name):
    try:
        with open('/proc/self/comm', 'w', encoding='ascii') as handle:
            handle.write(name)
    except OSError:
        pass


def holder_pid():
    """Pid of the running holder, None when none runs."""
    return holder.holder_pid(PID_FILE)


def _take_locks(descriptors):
    _set_name(COMM)
    for relative in LOCKS:
        target = state.path(relative)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        descriptor = os.open(target, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
        descriptors.append(descriptor)
        try:
            fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            sys.stderr.write('E: Could not get lock %s. It is held by another process\n' % target)
            return 100
    return None


def hold(seconds):
    """Take the locks as apt does, hold them ``seconds`` (or until SIGTERM), release them; returns the exit status."""
    return holder.hold(PID_FILE, seconds, _take_locks)


def start(seconds, wait=10.0):
    """Start a holder in its own session unless one runs; wait until it holds the locks; returns its pid."""
    return holder.start(PID_FILE, 'gpufleet_sim.dpkg_lock', ['--seconds', str(seconds)], 'take the locks', wait)


def stop(wait=10.0):
    """End a running holder (SIGTERM); returns its pid or None when none ran."""
    return holder.stop(PID_FILE, wait)


def _seconds(given):
    if given is not None:
        return given
    settings = state.fault('dpkg_lock') or fault_table.apply_defaults('dpkg_lock', {})
    return int(settings['seconds'])


def main(argv=None):
    parser = argparse.ArgumentParser(prog='dpkg_lock', description=__doc__.split('\n', 1)[0])
    parser.add_argument('action', choices=['start', 'hold', 'stop'])
    parser.add_argument('--seconds', type=int, default=None)
    arguments = parser.parse_args(argv)
    if arguments.action == 'hold':
        return hold(_seconds(arguments.seconds))
    if arguments.action == 'start':
        seconds = _seconds(arguments.seconds)
        pid = start(seconds)
        print(json.dumps({'pid': pid, 'seconds': seconds, 'locks': ['/' + relative for relative in LOCKS]}))
        return 0
    print(json.dumps({'stopped': stop()}))
    return 0


if __name__ == '__main__':
    sys.exit(main())
