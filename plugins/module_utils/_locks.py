# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Package-manager locks: which lock files apt/dpkg and dnf/rpm use, who holds them, and whether to wait.

No Ansible import. Nothing here takes a lock: a held fcntl lock is found in ``/proc/locks`` (matched on the
lock file's device and inode, as ``fuser``/``lslocks`` do), a dnf lock in its pid file. Everything that reads the
node takes the folder of ``/proc`` and the file system as arguments, so the unit tests run it on real captures
and on locks they hold themselves.
"""

from __future__ import annotations

import os
import re
import time

# Package manager -> lock files, in the order the tools take them, and how each is held.
#   fcntl:   a POSIX (fcntl F_SETLK/F_SETLKW) write lock on the whole file, listed in /proc/locks:
#            apt and dpkg (apt-pkg/deb/debsystem.cc, dpkg's lib/dpkg/dbmodify.c) and rpm (lib/rpmlock.c).
#   pidfile: dnf 4's ProcessLock (dnf/lock.py): the file holds the pid of the process that owns it while that
#            process lives; fcntl is used only for the instant of reading and writing the pid.
LOCK_FILES = {
    'apt': (
        ('/var/lib/dpkg/lock-frontend', 'fcntl'),
        ('/var/lib/dpkg/lock', 'fcntl'),
        ('/var/lib/apt/lists/lock', 'fcntl'),
        ('/var/cache/apt/archives/lock', 'fcntl'),
    ),
    'dnf': (
        ('/var/lib/rpm/.rpm.lock', 'fcntl'),
        ('/var/lib/dnf/rpmdb_lock.pid', 'pidfile'),
        ('/var/cache/dnf/metadata_lock.pid', 'pidfile'),
        ('/var/cache/dnf/download_lock.pid', 'pidfile'),
    ),
}

# "8: POSIX  ADVISORY  WRITE 26475 fe:00:2146330 0 EOF"; a process blocked on a lock is listed under it as "8: -> POSIX ...".
_PROC_LOCKS_LINE = re.compile(
    r'^\s*(?P<id>\d+):\s+(?P<waiting>->\s+)?(?P<class>[A-Z]+)\s+(?P<mode>\S+)\s+(?P<access>\S+)\s+(?P<pid>-?\d+)\s+'
    r'(?P<major>[0-9a-f]+):(?P<minor>[0-9a-f]+):(?P<inode>\d+)\s+(?P<start>\d+)\s+(?P<end>\d+|EOF)\s*$')
_COMM_MAX = 64
_CMDLINE_MAX = 256


class LockError(ValueError):
    """Input this module cannot read (an unknown package manager, a /proc/locks line it does not understand)."""


def lock_files(package_manager):
    """``[(path, kind), ...]`` of ``package_manager`` (``apt`` or ``dnf``)."""
    if package_manager not in LOCK_FILES:
        raise LockError('package_manager: %r is not one of %s' % (package_manager, ', '.join(sorted(LOCK_FILES))))
    return list(LOCK_FILES[package_manager])


def parse_proc_locks(text):
    """Lines of ``/proc/locks`` -> list of dicts (id, waiting, lock_class, mode, access, pid, major, minor, inode, start, end).

    ``pid`` is the holder's pid as the reading process's pid namespace sees it: -1 for OFD locks (no owning process),
    0 when the holder lives in a pid namespace the reader cannot see. Lines of unknown shape are skipped, not guessed at.
    """
    entries = []
    for line in text.splitlines():
        match = _PROC_LOCKS_LINE.match(line)
        if match is None:
            continue
        entries.append({
            'id': int(match.group('id')),
            'waiting': match.group('waiting') is not None,
            'lock_class': match.group('class'),
            'mode': match.group('mode'),
            'access': match.group('access'),
            'pid': int(match.group('pid')),
            'major': int(match.group('major'), 16),
            'minor': int(match.group('minor'), 16),
            'inode': int(match.group('inode')),
            'start': int(match.group('start')),
            'end': None if match.group('end') == 'EOF' else int(match.group('end')),
        })
    return entries


def fcntl_holders(entries, major, minor, inode):
    """Pids that hold (not wait for) a lock on the file with device ``major:minor`` and ``inode``, in /proc/locks order."""
    pids = []
    for entry in entries:
        if entry['waiting'] or (entry['major'], entry['minor'], entry['inode']) != (major, minor, inode):
            continue
        if entry['pid'] not in pids:
            pids.append(entry['pid'])
    return pids


def parse_pid_file(text):
    """The pid in a dnf lock file (``"1234"``), or None when the file holds no pid."""
    text = (text or '').strip()
    if not text.isdigit():
        return None
    pid = int(text)
    return pid if pid > 0 else None


def clean_command(text, limit=_COMM_MAX):
    """A process name from /proc/PID/comm (or cmdline with NULs) made safe to print: no control bytes, bounded."""
    text = (text or '').replace('\x00', ' ').strip()
    text = ''.join(character if character.isprintable() else '\\x%02x' % ord(character) for character in text)
    return text[:limit]


def describe(lock):
    """``/var/lib/dpkg/lock-frontend held by pid 1234 (unattended-upgr)`` for one observed lock."""
    holders = lock.get('holders') or []
    if not holders:
        return '%s held by a process this node does not show' % lock['path']
    named = []
    for holder in holders:
        if holder['pid'] is None or holder['pid'] <= 0:
            named.append('a process in another pid namespace or an open file description (pid %s)' % holder['pid'])
        else:
            named.append('pid %d (%s)' % (holder['pid'], holder.get('command') or 'command unknown'))
    return '%s held by %s' % (lock['path'], ', '.join(named))


def decide(locks, waited, timeout):
    """What to do after one look at the locks: ``('free', None)``, ``('wait', None)`` or ``('fail', message)``.

    ``locks`` are observations (path, kind, held, holders); ``waited`` the seconds spent so far, ``timeout`` the bound.
    """
    held = [lock for lock in locks if lock['held']]
    if not held:
        return 'free', None
    if waited < timeout:
        return 'wait', None
    return 'fail', 'package manager lock still held after waiting %ds (timeout %ds): %s' % (
        int(waited), timeout, '; '.join(describe(lock) for lock in held))


# --------------------------------------------------------------------------- reading a node (no lock is taken)

def _read(path, limit=65536):
    try:
        with open(path, 'rb') as handle:
            return handle.read(limit).decode('utf-8', 'replace')
    except (IOError, OSError):
        return None


def process_command(pid, proc='/proc'):
    """The holder's name (``/proc/PID/comm``) and command line, or Nones when the process is gone or invisible."""
    if pid is None or pid <= 0:
        return None, None
    comm = _read(os.path.join(proc, str(pid), 'comm'))
    cmdline = _read(os.path.join(proc, str(pid), 'cmdline'))
    return clean_command(comm) or None, clean_command(cmdline, _CMDLINE_MAX) or None


def _pid_alive(pid, proc):
    return os.path.exists(os.path.join(proc, str(pid)))


def observe(path, kind, proc='/proc', proc_locks=None):
    """One look at one lock file: ``{'path', 'kind', 'held', 'holders': [{'pid', 'command', 'cmdline'}]}``.

    ``proc_locks``: the parsed /proc/locks to use (read from ``proc`` when None). A missing file is not held.
    """
    result = {'path': path, 'kind': kind, 'held': False, 'holders': []}
    if kind == 'fcntl':
        try:
            status = os.stat(path)
        except OSError:
            return result
        if proc_locks is None:
            proc_locks = parse_proc_locks(_read(os.path.join(proc, 'locks'), limit=16 * 1024 * 1024) or '')
        pids = fcntl_holders(proc_locks, os.major(status.st_dev), os.minor(status.st_dev), status.st_ino)
    elif kind == 'pidfile':
        pid = parse_pid_file(_read(path, limit=64))
        pids = [pid] if pid is not None and _pid_alive(pid, proc) else []
    else:
        raise LockError('%s: unknown lock kind %r' % (path, kind))
    for pid in pids:
        command, cmdline = process_command(pid, proc)
        result['holders'].append({'pid': pid, 'command': command, 'cmdline': cmdline})
    result['held'] = bool(pids)
    return result


def observe_all(files, proc='/proc'):
    """``observe`` every ``(path, kind)`` with one read of /proc/locks."""
    proc_locks = parse_proc_locks(_read(os.path.join(proc, 'locks'), limit=16 * 1024 * 1024) or '')
    return [observe(path, kind, proc, proc_locks) for path, kind in files]


def wait(files, timeout, look=observe_all, clock=time.monotonic, sleep=time.sleep, interval=1.0):
    """Look at ``files`` until none is held or ``timeout`` seconds have passed; nothing is ever locked.

    Returns ``{'free', 'waited', 'locks', 'waited_for', 'msg'}``: ``waited_for`` describes every lock seen held
    on the way (empty when nothing had to be waited for), ``msg`` the failure when ``free`` is false.
    """
    start = clock()
    waited_for = []
    while True:
        locks = look(files)
        waited = clock() - start
        for lock in locks:
            if lock['held'] and describe(lock) not in waited_for:
                waited_for.append(describe(lock))
        verdict, message = decide(locks, waited, timeout)
        if verdict != 'wait':
            return {'free': verdict == 'free', 'waited': round(waited, 1), 'locks': locks, 'waited_for': waited_for, 'msg': message}
        sleep(max(0.05, min(interval, timeout - waited)))
