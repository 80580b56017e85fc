# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A controller-local, short-lived shared view: one read of an answer for all the workers of one controller.

The rollout gate runs one Ansible worker process per host waiting at the gate, and each reads the scheduler every poll.
:func:`fetch` lets them share one read per ``ttl`` seconds: the answer (JSON) is kept in a cache file of the key, in a
private per-user folder; when it is older than ``ttl`` one process reads again while the others wait on the key's lock
(``fcntl.flock``) and then take what it stored.  What is shared:

* the key (:func:`view_key`) names the controller (ansible-playbook's pid and its start time, so that two controllers, or a
  reused pid, never share) and what is read (a digest of, e.g., the scheduler's arguments);
* a failing read is never kept: the reader's exception reaches its caller, and the next caller reads again;
* an unreadable, odd or corrupt cache file is a miss, never a crash; the files of controllers that are gone are removed
  (best effort) when a controller writes its first answer.

For benchmarks, when ``GPUFLEET_READ_STATS`` names a file, each read (:func:`fetch` called its reader) and each answer
served from the cache appends one JSON line ``{"kind", "pid", "time", "served"}`` to it (:func:`count`).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import tempfile
import time

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger

STATS_VARIABLE = 'GPUFLEET_READ_STATS'
FORMAT = 1
# The files of one key: '<pid>-<start or x>-<digest>.json' (the answer) and '.lock'; a temporary file starts with '.'.
_NAME = re.compile(r'^([0-9]+)-([0-9]+|x)-([0-9a-f]{8,64})\.(json|lock)$')
_SAFE_KEY = re.compile(r'^[A-Za-z0-9_.-]{1,128}$')
# A temporary file older than this (seconds) was left by a writer that died: removed with the files of dead controllers.
TEMP_AGE = 3600


class ViewError(OSError):
    """The shared view cannot be used (its folder is not private, its lock cannot be opened); read directly instead."""


Key = collections.namedtuple('Key', 'name pid kind')
Key.__doc__ = """A cache key: ``name`` (the files' name), ``pid`` (the controller's, for the read statistics), ``kind`` (what is read)."""


def digest(what):
    """A short hex digest of a JSON-able value (sorted keys): the same value, the same digest."""
    text = json.dumps(what, sort_keys=True, separators=(',', ':'), default=str)
    return hashlib.sha256(text.encode('utf-8')).hexdigest()[:32]


def view_key(pid, start, kind, what):
    """The key of what a controller reads: its ``pid`` and ``start`` (:func:`._ledger.process_start`, None when unknown),
    ``kind`` (a word for the statistics: ``slurm``) and ``what`` (JSON-able: the arguments that change the answer)."""
    return Key('%d-%s-%s' % (pid, 'x' if start is None else int(start), digest([kind, what])), pid, kind)


def key_name(key):
    """The files' name of ``key``: a :class:`Key`'s name, a plain safe text as it is, any other text as its digest."""
    if isinstance(key, Key):
        return key.name
    text = str(key)
    return text if _SAFE_KEY.match(text) and not text.startswith('.') else digest(text)


def default_folder():
    """The private per-user folder of the shared views: ``<tempdir>/gpufleet-view-<uid>``."""
    return os.path.join(tempfile.gettempdir(), 'gpufleet-view-%d' % os.getuid())


def private_folder(folder):
    """``folder``, created (mode 0700) when missing; :class:`ViewError` when it is not a folder of this user (a link, another
    owner). A folder of this user open to others is made private."""
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ViewError(exc.errno, 'the shared view folder %s: %s' % (folder, exc.strerror)) from None
    try:
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode):
            raise ViewError(errno.ENOTDIR, 'the shared view folder %s is not a folder' % folder)
        if info.st_uid != os.getuid():
            raise ViewError(errno.EPERM, 'the shared view folder %s belongs to uid %d, not to this user' % (folder, info.st_uid))
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(folder, 0o700)
    except ViewError:
        raise
    except OSError as exc:
        raise ViewError(exc.errno, 'the shared view folder %s: %s' % (folder, exc.strerror)) from None
    return folder


def decode(text, ttl, now, asked=None):
    """(True, the value) when ``text`` (a cache file's content) is an answer younger than ``ttl`` seconds at ``now``, or one
    read after ``asked`` (a caller that waited on the lock takes a read that ended after it asked); else (False, None)."""
    try:
        entry = json.loads(text)
    except (TypeError, ValueError):
        return False, None
    if not isinstance(entry, dict) or entry.get('format') != FORMAT or 'value' not in entry:
        return False, None
    read, done = entry.get('time'), entry.get('done')
    if not all(isinstance(moment, (int, float)) and not isinstance(moment, bool) for moment in (read, done)):
        return False, None
    if 0 <= now - read < ttl or (asked is not None and read <= now and done >= asked):
        return True, entry['value']
    return False, None


def encode(value, read, done):
    """A cache file's content: ``value`` read from ``read`` to ``done`` (epoch seconds); TypeError/ValueError when not JSON."""
    return json.dumps({'format': FORMAT, 'time': read, 'done': done, 'value': value}, sort_keys=True, allow_nan=False)


def load(path, ttl, now, asked=None):
    """:func:`decode` of the cache file ``path``; a missing or unreadable file is a miss."""
    try:
        with open(path, 'r', encoding='utf-8') as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return False, None
    return decode(text, ttl, now, asked)


def store(path, text):
    """Write ``text`` to ``path`` atomically (a temporary file beside it, then ``os.replace``); False when it could not."""
    folder, name = os.path.split(path)
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix='.%s.' % name, suffix='.tmp')
    except OSError:
        return False
    try:
        with os.fdopen(handle, 'w', encoding='utf-8') as stream:
            stream.write(text)
        os.replace(temporary, path)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return False


@contextlib.contextmanager
def locked(path):
    """Hold the exclusive ``fcntl.flock`` of the lock file ``path`` (created 0600); :class:`ViewError` when it cannot be opened."""
    try:
        handle = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, 'O_NOFOLLOW', 0) | getattr(os, 'O_CLOEXEC', 0), 0o600)
    except OSError as exc:
        raise ViewError(exc.errno, 'the shared view lock %s: %s' % (path, exc.strerror)) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def stale(name, alive, now, modified, keep=None):
    """Whether the folder's entry ``name`` (last modified at ``modified``) is left over: a key's file of a controller that is
    gone (``alive(pid, start)`` false), or an old temporary file. The files of the key ``keep`` and other names are never
    touched."""
    if name.startswith('.') and name.endswith('.tmp'):
        return now - modified > TEMP_AGE
    match = _NAME.match(name)
    if not match or name.rsplit('.', 1)[0] == keep:
        return False
    pid, start = int(match.group(1)), match.group(2)
    return not alive(pid, None if start == 'x' else int(start))


def clean(folder, alive=_ledger.process_alive, now=None, keep=None):
    """Remove (best effort) the files of the controllers that are gone (but the key ``keep``'s, being written) and old
    temporary files; the names removed."""
    now = time.time() if now is None else now
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        path = os.path.join(folder, name)
        try:
            if stale(name, alive, now, os.lstat(path).st_mtime, keep):
                os.unlink(path)
                removed.append(name)
        except OSError:
            continue
    return removed


def count(kind, pid, served, now, environ=None):
    """Append one line ``{"kind", "pid", "time", "served"}`` to the file ``GPUFLEET_READ_STATS`` names (one ``O_APPEND``
    write); nothing when it is not set. A failure is ignored: statistics never stop a read."""
    target = (os.environ if environ is None else environ).get(STATS_VARIABLE)
    if not target:
        return
    line = json.dumps({'kind': kind, 'pid': pid, 'time': now, 'served': bool(served)}, sort_keys=True) + '\n'
    try:
        handle = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError:
        return
    try:
        os.write(handle, line.encode('utf-8'))
    except OSError:
        pass
    finally:
        os.close(handle)


def update(key, change, folder=None):
    """A small shared document of this controller (``key``'s file, JSON), changed under the key's lock: ``change(old)``
    returns the new content (``old``: {} when missing or unreadable), stored atomically and returned."""
    folder = private_folder(folder or default_folder())
    name = key_name(key)
    path = os.path.join(folder, name + '.json')
    with locked(os.path.join(folder, name + '.lock')):
        try:
            with open(path, 'r', encoding='utf-8') as handle:
                old = json.loads(handle.read())
        except (OSError, UnicodeDecodeError, ValueError):
            old = {}
        new = change(old if isinstance(old, dict) else {})
        store(path, json.dumps(new, sort_keys=True))
    return new


def fetch(key, ttl, reader, folder=None, clock=time.time):
    """What ``reader()`` returns (JSON-able), shared by the processes that fetch ``key`` within ``ttl`` seconds.

    Served from the key's cache file while it is younger than ``ttl`` (``clock()`` seconds); else under the key's lock: a
    caller that waited takes the answer read meanwhile, the first one calls ``reader()`` once and stores its answer
    atomically. The reader's exceptions reach the caller and nothing is stored. ``key``: a :class:`Key`
    (:func:`view_key`) or a text. ``folder``: :func:`default_folder` when None (created private). Raises
    :class:`ViewError` when the folder or the lock cannot be used."""
    folder = private_folder(folder or default_folder())
    name = key_name(key)
    kind, pid = (key.kind, key.pid) if isinstance(key, Key) else (name, None)
    path = os.path.join(folder, name + '.json')
    asked = clock()
    hit, value = load(path, ttl, asked)
    if hit:
        count(kind, pid, True, asked)
        return value
    with locked(os.path.join(folder, name + '.lock')):
        hit, value = load(path, ttl, clock(), asked)
        if hit:
            count(kind, pid, True, clock())
            return value
        first = not os.path.exists(path)
        read = clock()
        count(kind, pid, False, read)       # a read that fails asked the scheduler too
        value = reader()
        try:
            text = encode(value, read, clock())
        except (TypeError, ValueError):
            text = None
        if text is not None:
            store(path, text)
    if first:
        clean(folder, keep=name)
    return value
