# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout ledger: what happened to every node of one rollout, safe against crashes and concurrent writers.

Controller-side, no Ansible import.  One ledger per rollout, in ``<gpufleet_run_dir>/<run_id>/``:

``ledger.jsonl``
    append-only, one JSON event per line: ``{"time", "node", "from", "to", "reason"}`` plus ``details``
    (what the node's record gains, e.g. ``phase``, ``signature``).  ``node`` null is a run event: ``to`` is a
    run status (``running``, ``paused``, ``finished``) or ``breaker_reset``; the first event (``from`` null,
    ``to`` ``running``) carries ``run``: inventory, policy, pin and the nodes with their domain and GPUs.
``state.json``
    ``{"run_id", "status", "policy", "pin", "nodes": {"<inventory_hostname>": {"state", "reason", ...}}, ...}``,
    the fold of the ledger, written atomically (temporary file, fsync, rename, fsync of the folder) after
    every event.  It records how many bytes of the ledger it reflects (``ledger_bytes``): a reader replays the
    events after that offset, and rebuilds everything from ``ledger.jsonl`` when ``state.json`` is missing or
    torn.  A torn last line of the ledger (a crash mid-write) is ignored and cut before the next append.

Node states: ``pending`` (never admitted), in flight ``admitted``, ``cordoned``, ``drained``, ``converging``,
``rebooting``, ``validating``, ``rolling_back``; final ``done``, ``rolled_back``, ``quarantined``, ``deferred``,
``left_alone``.  :data:`TRANSITIONS` lists the legal moves; a final state is left only by an operator
(retry: back to ``pending``; release of a quarantined node: ``validating``) or by the gate itself
(:data:`GATE_TRANSITIONS`: an automatic retry of a ``deferred`` node, a ``done`` node confirmed or sent back on
resume), and a node caught in flight by a crash goes back to ``admitted`` only with ``resume=True``.  Anything else raises :class:`LedgerError` and
writes nothing, so the ledger never holds a state it cannot name.

Locks (``fcntl``):

* the fleet lock ``<run_dir>/locks/<fleet>.lock`` holds ``{"run_id", "host", "pid", ...}`` of the rollout that
  owns the fleet; a second rollout is refused naming that run (:class:`LockHeld`).  A holder whose host is this
  host and whose process is gone (pid not alive, or alive with another start time) is stale and taken over;
  a holder on another host is never taken over (it may be alive: release it by hand, see the docs).
* the run lock ``<run_dir>/<run_id>/.lock`` serialises writers of one ledger: Ansible's forked workers on the
  same controller each re-read what the others appended, check the transition, append and rewrite
  ``state.json`` under it.  :meth:`RunLedger.locked` lets a caller decide (the gate) and record in one step.

Storage sits behind :class:`Backend`: :class:`FileBackend` (a path on shared storage works with it) and
``_ledger_kube.KubernetesBackend`` (ConfigMaps holding the same ``state.json`` and events, a Lease as the fleet lock,
for AWX's throw-away execution environments).  :func:`ledger_spec` reads the ``gpufleet_ledger_*`` variables,
:func:`open_backend` opens the backend of a specification.
"""

from __future__ import annotations

import abc
import contextlib
import datetime
import fcntl
import json
import os
import re
import secrets
import socket

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate

PENDING = _gate.PENDING
IN_FLIGHT = _gate.IN_FLIGHT
FINAL = _gate.FINAL
STATES = _gate.STATES
RUN_STATUSES = ('running', 'paused', 'finished')
RUN_MARKERS = ('breaker_reset',)
UNFINISHED = ('running', 'paused')

TRANSITIONS = {
    'pending': ('admitted', 'left_alone'),
    'admitted': ('cordoned', 'left_alone', 'deferred', 'quarantined'),
    'cordoned': ('drained', 'left_alone', 'deferred', 'quarantined'),
    'drained': ('converging', 'rebooting', 'deferred', 'quarantined'),
    'converging': ('rebooting', 'validating', 'rolling_back', 'deferred', 'quarantined'),
    'rebooting': ('validating', 'rolling_back', 'quarantined'),
    'validating': ('done', 'rolling_back', 'deferred', 'quarantined'),
    'rolling_back': ('rolled_back', 'quarantined'),
}
# Only an operator: retry (back to the queue) and release (re-validate a quarantined node first).
OPERATOR_TRANSITIONS = {
    'rolled_back': ('pending',),
    'deferred': ('pending',),
    'left_alone': ('pending',),
    'quarantined': ('pending', 'validating'),
}
# Only the gate itself (``gate=True``), never a node's procedure: an automatic retry of a deferred node
# (gpufleet_retries), and on resume a done node confirmed by the quick check (done -> done) or sent back through the
# procedure because it failed it (done -> pending).
GATE_TRANSITIONS = {
    'deferred': ('pending',),
    'done': ('done', 'pending'),
}
LEDGER = 'ledger.jsonl'
STATE = 'state.json'
RUN_LOCK = '.lock'
RUN_ID = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$')
FLEET = RUN_ID


class LedgerError(RuntimeError):
    """A ledger that cannot be used or a transition that is not allowed; the message names file, node and state."""


class LedgerShorter(LedgerError):
    """The ledger is shorter than a reader saw (replaced or cut): the state is rebuilt from its start."""


class LockHeld(LedgerError):
    """The fleet is held by another rollout."""

    def __init__(self, fleet, holder, path):
        self.holder = holder
        super().__init__('fleet %s is held by run %s (host %s, pid %s, since %s; lock file %s): one rollout at a time'
                         % (fleet, holder.get('run_id'), holder.get('host'), holder.get('pid'), holder.get('since'), path))


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


def iso(moment):
    return moment.astimezone(datetime.timezone.utc).isoformat()


def epoch(text):
    return datetime.datetime.fromisoformat(text).timestamp() if text else None


def new_run_id(now=None):
    """``YYYYmmddTHHMMSSZ-xxxxxx``: sortable by start time, unique with the random tail."""
    return '%s-%s' % ((now or utcnow()).astimezone(datetime.timezone.utc).strftime('%Y%m%dT%H%M%SZ'), secrets.token_hex(3))


def check_run_id(run_id, what='gpufleet_run_id'):
    if not isinstance(run_id, str) or not RUN_ID.match(run_id) or run_id in ('.', '..', 'locks'):
        raise LedgerError('%s: %r is not a usable run id (letters, digits, ".", "_", "-"; at most 100)' % (what, run_id))
    return run_id


def check_transition(node, current, to, operator=False, resume=False, gate=False):
    """Raise :class:`LedgerError` unless ``current -> to`` is legal for ``node``."""
    if to not in STATES:
        raise LedgerError('%s: %r is not a node state (%s)' % (node, to, ', '.join(STATES)))
    if resume and current in IN_FLIGHT and to == 'admitted':
        return
    if gate and to in GATE_TRANSITIONS.get(current, ()):
        return
    if to in TRANSITIONS.get(current, ()):
        return
    if operator and to in OPERATOR_TRANSITIONS.get(current, ()):
        return
    if current in FINAL and to in OPERATOR_TRANSITIONS.get(current, ()):
        raise LedgerError('%s: %s is final; only an operator may move it to %s' % (node, current, to))
    raise LedgerError('%s: %s -> %s is not a legal transition (from %s: %s)'
                      % (node, current, to, current, ', '.join(TRANSITIONS.get(current, ())) or 'none without an operator'))


def _tuples(value):
    return tuple(_tuples(item) for item in value) if isinstance(value, list) else value


# ----------------------------------------------------------------------------------------------------------------
# The fold: events -> state (pure; the same for live updates and for a rebuild).

def empty_state(run_id):
    return {'run_id': run_id, 'status': None, 'inventory': None, 'policy': {}, 'pin': {}, 'started': None,
            'updated': None, 'pause': None, 'breaker_reset': None, 'nodes': {}, 'ledger_bytes': 0, 'events': 0}


def _new_node(info):
    record = {'state': PENDING, 'reason': '', 'since': None, 'domain': None, 'gpus': 0, 'canary': False,
              'admitted_at': None, 'finished_at': None}
    record.update(info or {})
    return record


def apply_event(state, event):
    """Fold one event into ``state`` (in place) and return it; legality is checked before appending, not here."""
    node = event.get('node')
    time = event.get('time')
    state['updated'] = time
    state['events'] = state.get('events', 0) + 1
    if node is None:
        to = event['to']
        if event.get('run'):
            run = event['run']
            state['inventory'] = run.get('inventory')
            state['policy'] = run.get('policy') or {}
            state['pin'] = run.get('pin') or {}
            state['started'] = time
            for name, info in (run.get('nodes') or {}).items():
                state['nodes'][name] = _new_node(info)
        if to == 'breaker_reset':
            state['breaker_reset'] = time
        else:
            state['status'] = to
            state['pause'] = ({'reason': event.get('reason'), **(event.get('details') or {})} if to == 'paused' else None)
        return state
    record = state['nodes'].get(node)
    if record is None:
        record = state['nodes'][node] = _new_node({})
    to = event['to']
    record['state'] = to
    record['reason'] = event.get('reason') or ''
    record['since'] = time
    record.update(event.get('details') or {})
    if to == 'admitted' and event.get('from') == PENDING:
        record['admitted_at'] = time
    if to in FINAL and event.get('from') != to:
        record['finished_at'] = time
    elif to == PENDING:
        record['finished_at'] = None
    return state


def parse_events(data, path, start_line=1):
    """Events from ledger bytes; a torn last line (no newline at the end) is left out.

    Returns (events, bytes consumed).  A line that is not an event in the middle of the file is an error.
    """
    end = data.rfind(b'\n') + 1
    events = []
    for number, line in enumerate(data[:end].splitlines(), start_line):
        if not line.strip():
            continue
        try:
            event = json.loads(line.decode('utf-8'))
        except ValueError as exc:
            raise LedgerError('%s line %d: not a JSON event (%s)' % (path, number, exc)) from None
        if not isinstance(event, dict) or 'to' not in event or 'node' not in event:
            raise LedgerError('%s line %d: not a ledger event (needs node and to): %.200s' % (path, number, line))
        events.append(event)
    return events, end


def node_view(state):
    """The gate's :class:`~._gate.Rollout` from a ledger state."""
    nodes = {}
    for name, record in state['nodes'].items():
        signature = record.get('signature')
        nodes[name] = _gate.Node(state=record['state'], domain=record.get('domain'), gpus=int(record.get('gpus') or 0),
                                 canary=bool(record.get('canary')), finished=epoch(record.get('finished_at')),
                                 signature=_tuples(signature) if signature else None,
                                 rma_suspect=bool(record.get('rma_suspect')))
    pause = state.get('pause') or {}
    return _gate.Rollout(nodes=nodes, paused=pause.get('reason') if pause.get('by') == 'operator' else None,
                         breaker_reset=epoch(state.get('breaker_reset')))


# ----------------------------------------------------------------------------------------------------------------
# Storage.

class Backend(abc.ABC):
    """Where ledgers and the fleet lock live: :class:`FileBackend`, or ConfigMaps and a Lease (``_ledger_kube``)."""

    def location(self, run_id=None, name=''):
        """Where the run's ``name`` (LEDGER, STATE) is kept, for people: a path, or the Kubernetes objects."""
        if run_id and hasattr(self, 'path'):
            return self.path(run_id, name)
        return getattr(self, 'run_dir', None) or repr(self)

    def hold(self, fleet, holder):
        """Keep the fleet lock held while the holder's process lives (a Lease must be renewed; a lock file needs nothing)."""
        del fleet, holder

    @abc.abstractmethod
    def exclusive(self, run_id):
        """A context manager: the one writer of this run's ledger while it is held."""

    @abc.abstractmethod
    def exists(self, run_id):
        """Whether the run has a ledger."""

    @abc.abstractmethod
    def read_events(self, run_id, offset):
        """(events after byte ``offset``, new offset); a torn last event is not returned."""

    @abc.abstractmethod
    def append_event(self, run_id, event, offset):
        """Append one event durably at ``offset`` (cutting a torn tail there); return the new offset."""

    @abc.abstractmethod
    def read_snapshot(self, run_id):
        """The last ``state.json``, or None when missing or unreadable."""

    @abc.abstractmethod
    def write_snapshot(self, run_id, state):
        """Replace ``state.json`` atomically."""

    @abc.abstractmethod
    def run_ids(self):
        """The run ids that have a ledger."""

    @abc.abstractmethod
    def acquire(self, fleet, holder):
        """Take the fleet lock for ``holder`` or raise :class:`LockHeld`; return the stale holder taken over, or None."""

    @abc.abstractmethod
    def release(self, fleet, run_id):
        """Give the fleet lock back if ``run_id`` holds it; return whether it did."""

    @abc.abstractmethod
    def holder(self, fleet):
        """The fleet lock's holder, or None."""


def process_start(pid):
    """The start time of a process in clock ticks after boot (Linux ``/proc``), or None when unknown."""
    try:
        with open('/proc/%d/stat' % pid, 'rb') as handle:
            data = handle.read().decode('ascii', 'replace')
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ')'.
    fields = data[data.rfind(')') + 2:].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def process_alive(pid, start=None):
    """Whether ``pid`` runs on this host (and, when ``start`` is known, is the same process, not a reused pid)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if start is not None:
        current = process_start(pid)
        if current is not None and current != start:
            return False
    return True


def holder_identity(run_id, pid=None, host=None, now=None):
    """The fleet lock's content for a rollout: run id, host, pid (the ansible-playbook process) and its start."""
    pid = os.getpid() if pid is None else pid
    return {'run_id': check_run_id(run_id), 'host': host or socket.gethostname(), 'pid': pid,
            'pid_start': process_start(pid), 'since': iso(now or utcnow())}


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | getattr(os, 'O_DIRECTORY', 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path, data):
    """Write ``data`` (bytes) to ``path`` atomically: temporary file, fsync, rename, fsync of the folder."""
    folder = os.path.dirname(path) or '.'
    temporary = '%s.tmp.%d' % (path, os.getpid())
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, path) from None
    try:
        with os.fdopen(fd, 'wb') as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            # A full or read-only file system: the error names the file it could not write.
            raise OSError(exc.errno, exc.strerror, path) from None
        raise
    _fsync_dir(folder)


class FileBackend(Backend):
    """Ledgers under ``run_dir`` on a local or shared file system."""

    def __init__(self, run_dir):
        if not isinstance(run_dir, str) or not run_dir:
            raise LedgerError('gpufleet_run_dir: must be a folder path, got %r' % (run_dir,))
        self.run_dir = os.path.abspath(run_dir)

    def path(self, run_id, name=''):
        return os.path.join(self.run_dir, check_run_id(run_id), name) if name else os.path.join(self.run_dir, check_run_id(run_id))

    def _lock_path(self, fleet):
        if not isinstance(fleet, str) or not FLEET.match(fleet):
            raise LedgerError('fleet name %r: letters, digits, ".", "_", "-"' % (fleet,))
        return os.path.join(self.run_dir, 'locks', fleet + '.lock')

    @contextlib.contextmanager
    def exclusive(self, run_id):
        folder = self.path(run_id)
        try:
            os.makedirs(folder, mode=0o750, exist_ok=True)
            fd = os.open(os.path.join(folder, RUN_LOCK), os.O_RDWR | os.O_CREAT, 0o640)
        except OSError as exc:
            raise LedgerError('%s: cannot open the run lock: %s' % (os.path.join(folder, RUN_LOCK), exc.strerror)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def exists(self, run_id):
        return os.path.exists(self.path(run_id, LEDGER))

    def read_events(self, run_id, offset):
        path = self.path(run_id, LEDGER)
        try:
            with open(path, 'rb') as handle:
                if os.fstat(handle.fileno()).st_size < offset:
                    raise LedgerShorter('%s: shorter than the %d bytes read before' % (path, offset))
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:
            if offset:
                raise LedgerShorter('%s: missing, %d bytes were read before' % (path, offset)) from None
            return [], offset
        except OSError as exc:
            raise LedgerError('%s: cannot read: %s' % (path, exc.strerror)) from None
        events, consumed = parse_events(data, path)
        return events, offset + consumed

    def append_event(self, run_id, event, offset):
        path = self.path(run_id, LEDGER)
        line = (json.dumps(event, sort_keys=True, separators=(',', ':')) + '\n').encode('utf-8')
        try:
            return self._append(path, line, offset)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None

    @staticmethod
    def _append(path, line, offset):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o640)
        try:
            size = os.fstat(fd).st_size
            if size != offset:
                if size < offset:
                    raise LedgerError('%s: shorter (%d bytes) than its readers saw (%d): the file was replaced or cut'
                                      % (path, size, offset))
                os.ftruncate(fd, offset)   # a torn tail from a crash mid-write
            os.lseek(fd, offset, os.SEEK_SET)
            view = memoryview(line)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        if offset == 0:
            _fsync_dir(os.path.dirname(path))
        return offset + len(line)

    def read_snapshot(self, run_id):
        try:
            with open(self.path(run_id, STATE), 'rb') as handle:
                state = json.loads(handle.read().decode('utf-8'))
        except (OSError, ValueError):
            return None
        if not isinstance(state, dict) or state.get('run_id') != run_id or not isinstance(state.get('nodes'), dict) \
                or not isinstance(state.get('ledger_bytes'), int):
            return None
        return state

    def write_snapshot(self, run_id, state):
        write_atomic(self.path(run_id, STATE), (json.dumps(state, indent=1, sort_keys=True) + '\n').encode('utf-8'))

    def run_ids(self):
        try:
            names = os.listdir(self.run_dir)
        except FileNotFoundError:
            return []
        return sorted(name for name in names if RUN_ID.match(name) and os.path.isfile(os.path.join(self.run_dir, name, LEDGER)))

    @contextlib.contextmanager
    def _fleet_file(self, fleet):
        path = self._lock_path(fleet)
        os.makedirs(os.path.dirname(path), mode=0o750, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd, path
        finally:
            os.close(fd)

    @staticmethod
    def _read_holder(fd):
        os.lseek(fd, 0, os.SEEK_SET)
        data = b''
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
        try:
            holder = json.loads(data.decode('utf-8')) if data.strip() else None
        except ValueError:
            return None
        return holder if isinstance(holder, dict) and holder.get('run_id') else None

    @staticmethod
    def _write_holder(fd, holder):
        data = (json.dumps(holder, sort_keys=True) + '\n').encode('utf-8') if holder else b''
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        if data:
            os.write(fd, data)
        os.fsync(fd)

    def acquire(self, fleet, holder):
        with self._fleet_file(fleet) as (fd, path):
            current = self._read_holder(fd)
            stale = None
            if current is not None:
                same = (current.get('run_id'), current.get('host'), current.get('pid')) == \
                    (holder['run_id'], holder['host'], holder['pid'])
                if not same:
                    if current.get('host') == holder['host'] and not process_alive(current.get('pid'), current.get('pid_start')):
                        stale = current
                    else:
                        raise LockHeld(fleet, current, path)
            self._write_holder(fd, holder)
            return stale

    def release(self, fleet, run_id):
        with self._fleet_file(fleet) as (fd, _path):
            current = self._read_holder(fd)
            if current is None or current.get('run_id') != run_id:
                return False
            self._write_holder(fd, None)
            return True

    def holder(self, fleet):
        with self._fleet_file(fleet) as (fd, _path):
            return self._read_holder(fd)


# ----------------------------------------------------------------------------------------------------------------
# One run's ledger.

class RunLedger:
    """The ledger of one rollout over a :class:`Backend`.

    Safe to share across ``fork``: every change re-reads what other writers appended, under the run lock.
    """

    def __init__(self, backend, run_id, clock=utcnow):
        self.backend = backend
        self.run_id = check_run_id(run_id)
        self.clock = clock
        self._state = None
        self._depth = 0
        self._owner = None

    # -- creation and loading
    @classmethod
    def create(cls, backend, run_id=None, inventory=None, policy=None, pin=None, nodes=None, clock=utcnow, reason='rollout started'):
        """Start a new run's ledger; ``nodes`` maps inventory_hostname to ``{domain, gpus}``."""
        ledger = cls(backend, run_id or new_run_id(clock()), clock)
        with ledger.locked():
            if ledger._state['events']:
                raise LedgerError('%s: run %s already has a ledger; resume it or choose another gpufleet_run_id'
                                  % (backend.location(), ledger.run_id))
            run = {'inventory': inventory, 'policy': policy or {}, 'pin': pin or {},
                   'nodes': {name: {'domain': (info or {}).get('domain'), 'gpus': int((info or {}).get('gpus') or 0)}
                             for name, info in (nodes or {}).items()}}
            ledger._record({'node': None, 'from': None, 'to': 'running', 'reason': reason, 'run': run})
        return ledger

    @classmethod
    def open(cls, backend, run_id, clock=utcnow):
        ledger = cls(backend, run_id, clock)
        if not backend.exists(ledger.run_id):
            raise LedgerError('run %s has no ledger in %s' % (run_id, backend.location()))
        ledger.refresh()
        return ledger

    def refresh(self):
        """Bring the in-memory state up to date: snapshot if usable, then the events after it."""
        state = self._state
        if state is None:
            state = self.backend.read_snapshot(self.run_id)
            if state is None:
                state = empty_state(self.run_id)
        try:
            events, offset = self.backend.read_events(self.run_id, state['ledger_bytes'])
        except LedgerShorter:
            state = empty_state(self.run_id)
            events, offset = self.backend.read_events(self.run_id, 0)
        for event in events:
            apply_event(state, event)
        state['ledger_bytes'] = offset
        self._state = state
        return state

    @property
    def state(self):
        if self._state is None:
            self.refresh()
        return self._state

    @contextlib.contextmanager
    def locked(self):
        """Hold the run lock (re-entrant within one process) and yield the fresh state."""
        if self._depth and self._owner == os.getpid():
            self._depth += 1
            try:
                yield self._state
            finally:
                self._depth -= 1
            return
        with self.backend.exclusive(self.run_id):
            self._depth, self._owner = 1, os.getpid()
            try:
                yield self.refresh()
            finally:
                self._depth, self._owner = 0, None

    def _record(self, event):
        """Append an event (under the lock) and rewrite state.json."""
        event = dict(event)
        event['time'] = iso(self.clock())
        event.setdefault('reason', '')
        for key in [key for key, value in event.items() if value is None and key in ('details', 'run')]:
            del event[key]
        state = self._state
        offset = self.backend.append_event(self.run_id, event, state['ledger_bytes'])
        apply_event(state, event)
        state['ledger_bytes'] = offset
        self.backend.write_snapshot(self.run_id, state)
        return event

    # -- changes
    def transition(self, node, to, reason, details=None, operator=False, resume=False, gate=False):
        """Move ``node`` to ``to``; raises :class:`LedgerError` (nothing written) when illegal.

        ``operator``: an operator's verb; ``resume``: a node caught in flight goes back to ``admitted``; ``gate``: a move
        of :data:`GATE_TRANSITIONS` (retry, resume confirmation).
        """
        if not isinstance(reason, str):
            raise LedgerError('%s: the reason must be a text, got %r' % (node, reason))
        if details is not None and not isinstance(details, dict):
            raise LedgerError('%s: details must be a mapping, got %r' % (node, details))
        with self.locked() as state:
            if node not in state['nodes']:
                raise LedgerError('%s is not a node of run %s' % (node, self.run_id))
            current = state['nodes'][node]['state']
            check_transition(node, current, to, operator=operator, resume=resume, gate=gate)
            return self._record({'node': node, 'from': current, 'to': to, 'reason': reason, 'details': details})

    def add_nodes(self, nodes):
        """Add nodes (inventory_hostname -> {domain, gpus}) as ``pending``, e.g. when the inventory grew on resume."""
        with self.locked() as state:
            for name, info in nodes.items():
                if name in state['nodes']:
                    continue
                self._record({'node': name, 'from': None, 'to': PENDING, 'reason': 'added to the rollout',
                              'details': {'domain': (info or {}).get('domain'), 'gpus': int((info or {}).get('gpus') or 0)}})

    def set_status(self, status, reason, details=None):
        """Change the run's status (running, paused, finished); ``details={'by': 'operator'}`` for an operator's pause."""
        if status not in RUN_STATUSES:
            raise LedgerError('run %s: %r is not a run status (%s)' % (self.run_id, status, ', '.join(RUN_STATUSES)))
        with self.locked() as state:
            if status == 'finished':
                open_nodes = sorted(name for name, record in state['nodes'].items() if record['state'] in IN_FLIGHT)
                if open_nodes:
                    raise LedgerError('run %s cannot finish: %s still in flight' % (self.run_id, ', '.join(open_nodes[:10])))
            return self._record({'node': None, 'from': state['status'], 'to': status, 'reason': reason, 'details': details})

    def reset_breaker(self, reason):
        """An operator's reset of the circuit breaker: quarantines before now no longer count."""
        with self.locked() as state:
            return self._record({'node': None, 'from': state['status'], 'to': 'breaker_reset', 'reason': reason})

    def gate_view(self):
        return node_view(self.state)


# ----------------------------------------------------------------------------------------------------------------
# Across runs.

def rebuild(backend, run_id):
    """The state of a run from its ledger alone (what :meth:`RunLedger.refresh` falls back to)."""
    state = empty_state(check_run_id(run_id))
    events, offset = backend.read_events(run_id, 0)
    for event in events:
        apply_event(state, event)
    state['ledger_bytes'] = offset
    return state


def last_unfinished(backend, inventory):
    """The run id of the most recently started unfinished (running or paused) run of ``inventory``, or None."""
    found = []
    for run_id in backend.run_ids():
        try:
            state = RunLedger.open(backend, run_id).state
        except LedgerError:
            continue
        if state.get('inventory') == inventory and state.get('status') in UNFINISHED:
            found.append((state.get('started') or '', run_id))
    return max(found)[1] if found else None


def phase_times(events):
    """Seconds each node spent in each in-flight state, from one ledger's events: {state: [seconds, ...]}.

    Only nodes that reached ``done`` count (a failed node's phases are not a prediction of a good one).
    """
    per_node = {}
    for event in events:
        if event.get('node') is None or not event.get('time'):
            continue
        per_node.setdefault(event['node'], []).append((epoch(event['time']), event.get('to')))
    times = {}
    for steps in per_node.values():
        if not steps or steps[-1][1] != 'done':
            continue
        for (start, state), (end, _next) in zip(steps, steps[1:]):
            if state in IN_FLIGHT and end >= start:
                times.setdefault(state, []).append(end - start)
    return times


# ----------------------------------------------------------------------------------------------------------------
# Backends by specification.

BACKENDS = ('file', 'kubernetes')
# The variables that choose and configure the backend (not part of the run's policy: a resume may come from elsewhere).
SPEC_VARIABLES = ('gpufleet_ledger_backend', 'gpufleet_ledger_namespace', 'gpufleet_ledger_context', 'gpufleet_ledger_lease_seconds',
                  'gpufleet_kubeconfig')
DEFAULT_NAMESPACE = 'default'
DEFAULT_LEASE_SECONDS = 60


def ledger_spec(variables, run_dir):
    """The ledger specification from the ``gpufleet_ledger_*`` variables (and ``gpufleet_kubeconfig``, the scheduler's).

    ``run_dir`` is the ledgers' folder (file) or the controller's scratch folder (kubernetes).  Raises :class:`LedgerError`
    naming the variable.
    """
    kind = variables.get('gpufleet_ledger_backend') or 'file'
    if kind not in BACKENDS:
        raise LedgerError('gpufleet_ledger_backend: %r is not a ledger backend (%s)' % (kind, ', '.join(BACKENDS)))
    if not isinstance(run_dir, str) or not run_dir:
        raise LedgerError('gpufleet_run_dir: must be a folder on the controller, got %r' % (run_dir,))
    if kind == 'file':
        return {'backend': 'file', 'run_dir': run_dir}
    spec = {'backend': 'kubernetes', 'run_dir': run_dir}
    for name, key, default in (('gpufleet_ledger_namespace', 'namespace', DEFAULT_NAMESPACE), ('gpufleet_kubeconfig', 'kubeconfig', ''),
                               ('gpufleet_ledger_context', 'context', '')):
        value = variables.get(name)
        value = default if value in (None, '') else value
        if not isinstance(value, str):
            raise LedgerError('%s: must be a text, got %r' % (name, value))
        spec[key] = value
    seconds = variables.get('gpufleet_ledger_lease_seconds')
    seconds = DEFAULT_LEASE_SECONDS if seconds in (None, '') else seconds
    try:
        if isinstance(seconds, bool) or int(str(seconds)) < 3:
            raise ValueError()
    except ValueError:
        raise LedgerError('gpufleet_ledger_lease_seconds: must be a whole number of seconds, at least 3, got %r' % (seconds,)) from None
    spec['lease_seconds'] = int(str(seconds))
    return spec


def open_backend(spec):
    """The :class:`Backend` of a ledger specification (``backend`` defaults to file).

    ``{backend: file, run_dir: <folder>}`` or ``{backend: kubernetes, run_dir: <scratch folder>, namespace, kubeconfig,
    context, lease_seconds}``: what the rollout gate hands to each host as ``gpufleet_ledger`` (it also carries ``run_id``,
    ignored here).  Raises :class:`LedgerError` naming the field for anything else.
    """
    if not isinstance(spec, dict):
        raise LedgerError('gpufleet_ledger: must be a mapping {backend, run_dir, run_id}, got %r' % (spec,))
    kind = spec.get('backend') or 'file'
    run_dir = spec.get('run_dir')
    if kind not in BACKENDS:
        raise LedgerError('gpufleet_ledger.backend: %r is not a ledger backend (%s)' % (kind, ', '.join(BACKENDS)))
    if not isinstance(run_dir, str) or not run_dir:
        raise LedgerError('gpufleet_ledger.run_dir: must be a folder path for the %s backend, got %r' % (kind, run_dir))
    if kind == 'file':
        return FileBackend(run_dir)
    from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger_kube  # pylint: disable=import-outside-toplevel
    return _ledger_kube.KubernetesBackend(spec.get('namespace') or DEFAULT_NAMESPACE, run_dir, kubeconfig=spec.get('kubeconfig') or '',
                                          context=spec.get('context') or '', lease_seconds=spec.get('lease_seconds') or DEFAULT_LEASE_SECONDS)
