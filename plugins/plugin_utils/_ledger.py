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
    the fold of the ledger, written atomically (temporary file, fsync, rename, fsync of the folder) when the run is
    created and at every run event (running, paused, finished, breaker_reset): after a run's finish or pause it is the
    full state.  Mid-run it lags the ledger: it records how many bytes of the ledger it reflects (``ledger_bytes``), a
    reader replays the events after that offset, and rebuilds everything from ``ledger.jsonl`` when ``state.json`` is
    missing or torn.  A torn last line of the ledger (a crash mid-write) is ignored and cut before the next append.
``head.json``, ``nodes-NNNN.json``, ``order.json`` (documents of the run, :meth:`Backend.write_doc`)
    what makes an event and a decision cost the same at 100 and at 10,000 nodes.  ``head.json``: the run-level fields,
    per-state counts, the node count, the gate's indexes (nodes in flight, failed, the earliest to finish) with their
    records, the records of the nodes changed since the shards were written, and the ``ledger_bytes`` it reflects; it
    is rewritten every :data:`HEAD_EVERY` events and at every run event.  ``nodes-NNNN.json``: the node records by shard
    (``crc32(name) % shards``, about :data:`SHARD_NODES` nodes each), rewritten (only those changed) every
    :data:`SHARD_EVERY` events, before the head.  ``order.json``: the run's planned order.  A reader takes the head,
    replays the events after its ``ledger_bytes`` and reads a node's shard when it needs that node; applying an event
    twice gives the same record, so a shard newer than the head (a crash between the two writes) is still right, and a
    missing or torn document falls back to ``state.json`` and the events, or a rebuild from the events alone.

Node states: ``pending`` (never admitted), in flight ``admitted``, ``cordoned``, ``drained``, ``converging``,
``rebooting``, ``validating``, ``rolling_back``; final ``done``, ``rolled_back``, ``quarantined``, ``deferred``,
``left_alone``.  :data:`TRANSITIONS` lists the legal moves; a final state is left only by an operator
(retry: back to ``pending``; release of a quarantined node: ``validating``) or by the gate itself
(:data:`GATE_TRANSITIONS`: an automatic retry of a ``deferred`` node, a ``done`` node confirmed or sent back on
resume), and a node caught in flight by a crash goes back to ``admitted`` only with ``resume=True``.  Anything else raises :class:`LedgerError` and
writes nothing, so the ledger never holds a state it cannot name.

Locks (``fcntl``):

* the fleet lock ``<run_dir>/locks/<fleet>.lock`` holds ``{"run_id", "host", "pid", ...}`` of the rollout that
  owns the fleet: it belongs to the run, not to a process.  Another controller of the same run joins it (a member,
  ``_members``); a second, different rollout is refused naming that run (:class:`LockHeld`) while the run has a live
  member.  Without members (a run of an older collection) a holder whose host is this host and whose process is gone
  (pid not alive, or alive with another start time) is stale and taken over; a holder on another host is never taken
  over (it may be alive: release it by hand, see the docs).
* the run lock ``<run_dir>/<run_id>/.lock`` serialises writers of one ledger: Ansible's forked workers on the
  same controller each re-read what the others appended, check the transition, append (and compact the head and
  the shards when due) under it.  :meth:`RunLedger.locked` lets a caller decide (the gate) and record in one step.

Storage sits behind :class:`Backend`: :class:`FileBackend` (a path on shared storage works with it) and
``_ledger_kube.KubernetesBackend`` (ConfigMaps holding the same ``state.json`` and events, a Lease as the fleet lock,
for AWX's throw-away execution environments).  :func:`ledger_spec` reads the ``gpufleet_ledger_*`` variables,
:func:`open_backend` opens the backend of a specification.
"""

from __future__ import annotations

import abc
import bisect
import contextlib
import datetime
import fcntl
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import zlib

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _members

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
HEAD_DOC = 'head'
ORDER_DOC = 'order'
SHARD_DOC = 'nodes-%04d'
HEAD_FORMAT = 1
# Nodes per shard, events between two writes of the head and of the changed shards, and at most this many changed
# nodes carried by the head before the shards are written.
SHARD_NODES = 64
HEAD_EVERY = 16
SHARD_EVERY = 512
RECENT_MAX = 256
# Run-level fields: what :attr:`RunLedger.head` gives (with ``counts`` and ``total``).
HEAD_FIELDS = ('run_id', 'status', 'inventory', 'policy', 'pin', 'previous_pin', 'mode', 'kind', 'started', 'updated', 'pause',
               'breaker_reset', 'breaker_history', 'ledger_bytes', 'events')
DOC_NAME = re.compile(r'^[a-z0-9][a-z0-9_.-]{0,59}$')
RESERVED_DOCS = ('state', 'ledger')
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
            'updated': None, 'pause': None, 'breaker_reset': None, 'nodes': {}, 'ledger_bytes': 0, 'events': 0,
            'mode': None, 'kind': None, 'previous_pin': {}, 'order': [], 'breaker_history': None}


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
            state['mode'] = run.get('mode')
            state['kind'] = run.get('kind')
            state['previous_pin'] = run.get('previous_pin') or {}
            state['order'] = list(run.get('order') or [])
            state['breaker_history'] = run.get('breaker_history')
            state['started'] = time
            for name, info in (run.get('nodes') or {}).items():
                state['nodes'][name] = _new_node(info)
        if 'breaker_history' in (event.get('details') or {}):
            state['breaker_history'] = event['details']['breaker_history']
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


def gate_node(record):
    """The gate's :class:`~._gate.Node` of one node record."""
    signature = record.get('signature')
    return _gate.Node(state=record['state'], domain=record.get('domain'), gpus=int(record.get('gpus') or 0),
                      canary=bool(record.get('canary')), finished=epoch(record.get('finished_at')),
                      signature=_tuples(signature) if signature else None, rma_suspect=bool(record.get('rma_suspect')),
                      member=record.get('member') if record['state'] in IN_FLIGHT else None)


def _rollout(state, nodes, total):
    pause = state.get('pause') or {}
    return _gate.Rollout(nodes=nodes, paused=pause.get('reason') if pause.get('by') == 'operator' else None,
                         breaker_reset=epoch(state.get('breaker_reset')), total=total)


def node_view(state):
    """The gate's :class:`~._gate.Rollout` from a ledger state (every node: the full view)."""
    return _rollout(state, {name: gate_node(record) for name, record in state['nodes'].items()}, len(state['nodes']))


# ----------------------------------------------------------------------------------------------------------------
# The gate's indexes: kept up to date event by event, so that a decision reads O(window + failures) records.

def early_size(policy):
    """How many of the earliest finished nodes the gate may look at: max(canary, pin_fault_early_nodes) of ``policy``."""
    sizes = [1, 10]
    for position, name in enumerate(('gpufleet_canary', 'gpufleet_pin_fault_early_nodes')):
        try:
            sizes[position] = int(str((policy or {}).get(name, sizes[position])))
        except ValueError:
            pass
    return max(1, *sizes)


def index_keys(record):
    """(state, key among the earliest finished (done or failed), key among the earliest done) of a record; None: not a member."""
    state = record.get('state')
    finished = epoch(record.get('finished_at'))
    early = finished if state in ('done',) + _gate.FAILED and finished is not None else None
    done = (finished or 0.0) if state == 'done' else None
    return state, early, done


class Index:
    """Per-state counts, node count, nodes in flight, failed nodes and the ``size`` earliest to finish.

    ``early``: ``(finished, name)`` of done or failed nodes (the pin-fault detector's first nodes); ``early_done``:
    ``(finished or 0, name)`` of done nodes (the canary phase).  Each holds every member while shorter than ``size``;
    when a member of a full one leaves (a retry, a resume that sends a done node back), ``stale`` asks for a rescan.
    """

    def __init__(self, size):
        self.size = size
        self.counts = {}
        self.total = 0
        self.flying = set()
        self.failed = set()
        self.early = []
        self.early_done = []
        self.stale = False

    @classmethod
    def of_nodes(cls, nodes, size):
        index = cls(size)
        for name, record in nodes.items():
            index.move(name, None, index_keys(record))
        index.stale = False
        return index

    @classmethod
    def from_doc(cls, doc):
        index = cls(int(doc['size']))
        index.counts = {str(state): int(count) for state, count in doc['counts'].items()}
        index.total = int(doc['total'])
        index.flying, index.failed = set(doc['flying']), set(doc['failed'])
        index.early = [(float(key), str(name)) for key, name in doc['early']]
        index.early_done = [(float(key), str(name)) for key, name in doc['early_done']]
        index.stale = bool(doc.get('stale'))
        return index

    def to_doc(self):
        return {'size': self.size, 'counts': dict(self.counts), 'total': self.total, 'flying': sorted(self.flying),
                'failed': sorted(self.failed), 'early': [list(item) for item in self.early],
                'early_done': [list(item) for item in self.early_done], 'stale': self.stale}

    def names(self):
        """The nodes the gate needs besides the one it decides for."""
        return self.flying | self.failed | {name for _key, name in self.early} | {name for _key, name in self.early_done}

    def move(self, name, before, after):
        """Account for ``name`` going from state ``before`` (None: a new node) to ``after`` (:func:`index_keys`).

        Only the state before is needed (an event's ``from``): a record read from a shard newer than the index still
        gives the right indexes once the events after the index are applied to it.
        """
        if before is None:
            self.total += 1
        else:
            self.counts[before] = self.counts.get(before, 0) - 1
            if self.counts[before] <= 0:
                del self.counts[before]
        self.counts[after[0]] = self.counts.get(after[0], 0) + 1
        self.flying.discard(name)
        self.failed.discard(name)
        if after[0] in _gate.IN_FLIGHT:
            self.flying.add(name)
        elif after[0] in _gate.FAILED:
            self.failed.add(name)
        self._rank(self.early, name, after[1])
        self._rank(self.early_done, name, after[2])

    def _rank(self, ranked, name, new):
        position = next((number for number, (_key, member) in enumerate(ranked) if member == name), None)
        if position is not None:
            if ranked[position][0] == new:
                return
            if len(ranked) >= self.size:
                self.stale = True
            del ranked[position]
        if new is not None and (len(ranked) < self.size or (new, name) < ranked[-1]):
            bisect.insort(ranked, (new, name))
            del ranked[self.size:]


def shard_count(nodes):
    return max(1, -(-nodes // SHARD_NODES))


def shard_of(name, shards):
    return zlib.crc32(name.encode('utf-8')) % shards


SOFT_MARKS_DOC = 'soft_marks'


def check_doc_name(name):
    """A run document's name (``waiting``, ``arrived``): lower-case letters, digits, ``.``, ``_``, ``-``; not state or ledger."""
    if not isinstance(name, str) or not DOC_NAME.match(name) or name in RESERVED_DOCS:
        raise LedgerError('run document name %r: lower-case letters, digits, ".", "_", "-" (at most 60), not %s'
                          % (name, ' or '.join(RESERVED_DOCS)))
    return name


def _usable_head(head, run_id):
    try:
        return isinstance(head, dict) and head.get('format') == HEAD_FORMAT and head.get('run_id') == run_id \
            and isinstance(head.get('ledger_bytes'), int) and isinstance(head.get('events'), int) \
            and isinstance(head.get('records'), dict) and isinstance(head.get('recent'), list) \
            and isinstance(head.get('shards'), int) and head['shards'] >= 1 and isinstance(head.get('shard_events'), int) \
            and Index.from_doc(head['index']) is not None
    except (KeyError, TypeError, ValueError, AttributeError):
        return False


# ----------------------------------------------------------------------------------------------------------------
# Storage.

class Backend(abc.ABC):
    """Where ledgers and the fleet lock live: :class:`FileBackend`, or ConfigMaps and a Lease (``_ledger_kube``)."""

    def location(self, run_id=None, name=''):
        """Where the run's ``name`` (LEDGER, STATE) is kept, for people: a path, or the Kubernetes objects."""
        if run_id and hasattr(self, 'path'):
            return self.path(run_id, name)
        return getattr(self, 'run_dir', None) or repr(self)

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
        """The last ``state.json``, or None when missing or unreadable; mid-run it may lag: replay the events after its ``ledger_bytes``."""

    @abc.abstractmethod
    def write_snapshot(self, run_id, state):
        """Replace ``state.json`` atomically."""

    @abc.abstractmethod
    def read_doc(self, run_id, name):
        """The run's document ``name`` (a dict), or None when missing or unreadable."""

    @abc.abstractmethod
    def write_doc(self, run_id, name, doc):
        """Replace the run's document ``name`` (a JSON-able dict) atomically; call it under :meth:`exclusive`."""

    def write_docs(self, run_id, docs):
        """Replace several documents ({name: doc}); each atomically, not all at once."""
        for name, doc in docs.items():
            self.write_doc(run_id, name, doc)

    def position(self, run_id):
        """A hint (JSON) where the ledger's tail is, kept in the head for the next reader; None when it needs none."""
        del run_id

    def seek(self, run_id, hint):
        """Take a :meth:`position` hint read from the head (it may be stale: only a shortcut, checked before use)."""
        del run_id, hint

    @abc.abstractmethod
    def run_ids(self):
        """The run ids that have a ledger."""

    @abc.abstractmethod
    def acquire(self, fleet, holder, alive=None):
        """Take the fleet lock for ``holder`` (its run: the same run's other controllers join it) or raise :class:`LockHeld`;
        return the stale holder taken over, or None.  ``alive(current)``: whether the run holding the lock has a live member
        (:func:`run_alive`); without it, :func:`holder_alive` decides."""

    def lock_location(self, fleet):
        """Where the fleet lock ``fleet`` is kept, for people: the lock file's path, or the Lease."""
        return 'fleet lock %s in %s' % (fleet, self.location())

    def renew(self, fleet, holder):
        """Renew the fleet lock for the run of ``holder`` (a Lease); False when the run no longer holds it."""
        del fleet, holder
        return True

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


def holder_alive(holder, here):
    """Whether a fleet-lock holder may be alive: on another host always (it cannot be checked from here), on this host while
    its process runs."""
    return holder.get('host') != here or process_alive(holder.get('pid'), holder.get('pid_start'))


def lock_stale(current, here, alive=None):
    """Whether the fleet lock's ``current`` holder (another run) may be taken over: its run has no live member
    (``alive(current)`` false), else - without members - its process on this host is gone."""
    if alive is not None:
        verdict = alive(current)
        if verdict is not None:
            return not verdict
    return not holder_alive(current, here)


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


def write_atomic(path, data, mode=0o640):
    """Write ``data`` (bytes) to ``path`` atomically: temporary file, fsync, rename, fsync of the folder.

    The collection's one atomic writer (the ledger's files, the results export, the fleet report's files); ``mode``: the
    file's permissions (an export others read: 0o644).
    """
    write_atomic_files({path: data}, mode)


def write_atomic_files(files, mode=0o640):
    """Write each ``{path: bytes}`` of ``files`` atomically, as :func:`write_atomic` does one: every file to a temporary file
    with fsync, then the renames, then one fsync per folder (a batch of a run's documents costs one folder fsync)."""
    moves = []
    path = None
    try:
        for path, data in files.items():
            temporary = '%s.tmp.%d' % (path, os.getpid())
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            moves.append((temporary, path))
            os.fchmod(fd, mode)      # the umask does not narrow it
            with os.fdopen(fd, 'wb') as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        for temporary, path in moves:
            os.replace(temporary, path)
    except BaseException as exc:
        for temporary, _path in moves:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        if isinstance(exc, OSError):
            # A full or read-only file system: the error names the file it could not write.
            raise OSError(exc.errno, exc.strerror, path) from None
        raise
    for folder in sorted(set(os.path.dirname(name) or '.' for name in files)):
        _fsync_dir(folder)


class FileBackend(Backend):
    """Ledgers under ``run_dir`` on a local or shared file system."""

    def __init__(self, run_dir):
        if not isinstance(run_dir, str) or not run_dir:
            raise LedgerError('gpufleet_run_dir: must be a folder path, got %r' % (run_dir,))
        self.run_dir = os.path.abspath(run_dir)

    def path(self, run_id, name=''):
        return os.path.join(self.run_dir, check_run_id(run_id), name) if name else os.path.join(self.run_dir, check_run_id(run_id))

    def lock_location(self, fleet):
        return self._lock_path(fleet)

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

    def doc_path(self, run_id, name):
        """``<run_dir>/<run_id>/<name>.json``."""
        return self.path(run_id, check_doc_name(name) + '.json')

    def read_doc(self, run_id, name):
        try:
            with open(self.doc_path(run_id, name), 'rb') as handle:
                doc = json.loads(handle.read().decode('utf-8'))
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def write_doc(self, run_id, name, doc):
        self.write_docs(run_id, {name: doc})

    def write_docs(self, run_id, docs):
        """Every document atomically (:func:`write_atomic_files`: the temporary files, the renames, one fsync of the folder)."""
        os.makedirs(self.path(run_id), mode=0o750, exist_ok=True)
        write_atomic_files(dict((self.doc_path(run_id, name), (json.dumps(doc, sort_keys=True, separators=(',', ':')) + '\n').encode('utf-8'))
                                for name, doc in docs.items()))

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

    def acquire(self, fleet, holder, alive=None):
        with self._fleet_file(fleet) as (fd, path):
            current = self._read_holder(fd)
            stale = None
            if current is not None:
                if current.get('run_id') == holder['run_id']:
                    # The same run: another controller joins it (the lock belongs to the run); the holder is kept while it lives.
                    if holder_alive(current, holder['host']):
                        return None
                    stale = current
                elif not lock_stale(current, holder['host'], alive):
                    raise LockHeld(fleet, current, path)
                else:
                    stale = current
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

    Safe to share across ``fork``: every change re-reads what other writers appended, under the run lock.  In memory:
    the run-level fields, the gate's :class:`Index` and the node records read so far (the head's, a shard's when a node
    of it is needed); :attr:`state` reads every shard (the full state), :attr:`head`, :meth:`node`, :meth:`gate_view`
    and :meth:`transition` do not.
    """

    def __init__(self, backend, run_id, clock=utcnow):
        self.backend = backend
        self.run_id = check_run_id(run_id)
        self.clock = clock
        self._s = None          # run-level fields and the node records read so far ('nodes')
        self._index = None
        self._all = False       # every node record is in memory
        self._loaded = set()    # shards read
        self._recent = set()    # nodes changed since the shards were written
        self._shards = 1
        self._head_events = 0   # events when the head was last written (or read)
        self._shard_events = 0  # events when the shards were last written
        self._must_write = False
        self._ahead = 0         # the newest ledger_bytes of a shard read (a concurrent writer's, maybe past ours)
        self._depth = 0
        self._owner = None

    # -- creation and loading
    @classmethod
    def create(cls, backend, run_id=None, inventory=None, policy=None, pin=None, nodes=None, clock=utcnow, reason='rollout started',
               mode=None, previous_pin=None, order=None, breaker_history=None, kind=None):
        """Start a new run's ledger; ``nodes`` maps inventory_hostname to ``{domain, gpus}``.

        ``mode``, ``previous_pin``, ``order`` and ``breaker_history`` go to the first event's ``run`` when given.
        """
        ledger = cls(backend, run_id or new_run_id(clock()), clock)
        with ledger.locked(full=False) as head:
            if head['events']:
                raise LedgerError('%s: run %s already has a ledger; resume it or choose another gpufleet_run_id'
                                  % (backend.location(), ledger.run_id))
            run = {'inventory': inventory, 'policy': policy or {}, 'pin': pin or {},
                   'nodes': {name: {'domain': (info or {}).get('domain'), 'gpus': int((info or {}).get('gpus') or 0)}
                             for name, info in (nodes or {}).items()}}
            for key, value in (('mode', mode), ('kind', kind), ('previous_pin', previous_pin), ('order', order),
                               ('breaker_history', breaker_history)):
                if value is not None:
                    run[key] = list(value) if key == 'order' else value
            ledger._record({'node': None, 'from': None, 'to': 'running', 'reason': reason, 'run': run})
        return ledger

    @classmethod
    def open(cls, backend, run_id, clock=utcnow):
        """The ledger of an existing run: its head and the events after it (no node record read yet)."""
        ledger = cls(backend, run_id, clock)
        if not backend.exists(ledger.run_id):
            raise LedgerError('run %s has no ledger in %s' % (run_id, backend.location()))
        ledger.catch_up()
        return ledger

    def _load(self):
        """The head into memory; without a usable one, ``state.json`` (or nothing) and every node in memory."""
        head = self.backend.read_doc(self.run_id, HEAD_DOC)
        if not _usable_head(head, self.run_id):
            self._load_full(self.backend.read_snapshot(self.run_id))
            return
        self._s = {key: head.get(key, default) for key, default in empty_state(self.run_id).items() if key not in ('nodes', 'order')}
        self._s['nodes'] = {name: dict(record) for name, record in head['records'].items()}
        self._index = Index.from_doc(head['index'])
        self._all, self._loaded, self._recent = False, set(), set(head['recent'])
        self._shards, self._head_events, self._shard_events = head['shards'], head['events'], head['shard_events']
        self._must_write = False
        self.backend.seek(self.run_id, head.get('position'))

    def _load_full(self, state):
        """A full state in memory (``state.json``, or empty before a rebuild); the next write writes every shard and the head."""
        if state is None:
            state = empty_state(self.run_id)
        for key, value in empty_state(self.run_id).items():
            state.setdefault(key, value)
        self._s = state
        self._index = Index.of_nodes(state['nodes'], early_size(state.get('policy')))
        self._all, self._recent = True, set(state['nodes'])
        self._shards = shard_count(len(state['nodes']))
        self._must_write = True

    def _rebuild(self):
        """Everything from the events alone (a shard or the head is missing or torn, or the ledger is shorter)."""
        self._load_full(None)
        events, offset = self.backend.read_events(self.run_id, 0)
        for event in events:
            self._apply(event)
        self._s['ledger_bytes'] = offset

    def catch_up(self):
        """Bring the run-level fields and the indexes up to date: the head if not read yet, then the events after it.

        Again while a shard read is newer than the events applied (a writer outside this process's lock wrote it).
        """
        for _round in range(10):
            self._catch_up()
            if self._ahead <= self._s['ledger_bytes']:
                return

    def _catch_up(self):
        if self._s is None:
            self._load()
        try:
            events, offset = self.backend.read_events(self.run_id, self._s['ledger_bytes'])
        except LedgerShorter:
            self._rebuild()
            return
        if not self._ensure({event['node'] for event in events if event.get('node') is not None}):
            return      # rebuilt from the events, these included
        for event in events:
            self._apply(event)
        self._s['ledger_bytes'] = offset

    def _ensure(self, names):
        """Read the shards of ``names`` not in memory yet; False when a shard was unusable and everything was rebuilt."""
        if self._all:
            return True
        nodes = self._s['nodes']
        return self._read_shards({shard_of(name, self._shards) for name in names if name not in nodes})

    def _read_shards(self, numbers):
        nodes = self._s['nodes']
        for number in sorted(set(numbers) - self._loaded):
            doc = self.backend.read_doc(self.run_id, SHARD_DOC % number)
            if not isinstance(doc, dict) or not isinstance(doc.get('nodes'), dict):
                self._rebuild()
                return False
            for name, record in doc['nodes'].items():
                nodes.setdefault(name, record)
            self._loaded.add(number)
            if isinstance(doc.get('ledger_bytes'), int):
                self._ahead = max(self._ahead, doc['ledger_bytes'])
        if len(self._loaded) >= self._shards:
            self._all = True
        return True

    def _load_all(self):
        if not self._all:
            self._read_shards(range(self._shards))
        if 'order' not in self._s:
            doc = self.backend.read_doc(self.run_id, ORDER_DOC)
            self._s['order'] = list(doc.get('order') or []) if isinstance(doc, dict) else []
            if not isinstance(doc, dict) and self._s.get('events'):
                events, _offset = self.backend.read_events(self.run_id, 0)
                first = events[0] if events else {}
                self._s['order'] = list((first.get('run') or {}).get('order') or [])

    def _apply(self, event):
        """Fold one event (its node's record in memory) into the state and the indexes."""
        name = event.get('node')
        if name is None:
            apply_event(self._s, event)
            if event.get('run'):
                self._index = Index.of_nodes(self._s['nodes'], early_size(self._s['policy']))
                self._recent = set(self._s['nodes'])
                self._shards = shard_count(len(self._s['nodes']))
                self._all, self._loaded = True, set(range(self._shards))
            return
        record = self._s['nodes'].get(name)
        before = None if record is None else (event.get('from') or record['state'])
        apply_event(self._s, event)
        self._index.move(name, before, index_keys(self._s['nodes'][name]))
        self._recent.add(name)

    @property
    def state(self):
        """The full state (every node record; read on first use)."""
        if self._s is None:
            self.catch_up()
        self._load_all()
        return self._s

    @property
    def head(self):
        """The run-level fields (:data:`HEAD_FIELDS`), ``counts`` per node state and ``total`` nodes: no node record read."""
        if self._s is None:
            self.catch_up()
        head = {key: self._s.get(key) for key in HEAD_FIELDS}
        head.update(counts=dict(self._index.counts), total=self._index.total)
        return head

    def node(self, name):
        """A copy of ``name``'s record, or None when it is not a node of the run (reads its shard at most)."""
        if self._s is None:
            self.catch_up()
        self._ensure([name])
        if self._ahead > self._s['ledger_bytes']:
            self.catch_up()
        record = self._s['nodes'].get(name)
        return dict(record) if record is not None else None

    def gate_view(self, node=None, extra=()):
        """The gate's compact :class:`~._gate.Rollout` for deciding about ``node`` (see ``_gate.Rollout``).

        ``extra``: more nodes the decision needs, the scheduler's unavailable ones (the domain limit counts the rollout's
        nodes by their domain).  Reads the records of the indexed nodes, ``node`` and ``extra`` only.
        """
        if self._s is None:
            self.catch_up()
        if self._index.stale:
            self._rescan()
        for _round in range(10):
            wanted = self._index.names() | set(extra) | ({node} if node is not None else set())
            if self._ensure(wanted) and self._ahead <= self._s['ledger_bytes']:
                break
            self.catch_up()
            if self._index.stale:
                self._rescan()
        nodes = self._s['nodes']
        return _rollout(self._s, {name: gate_node(nodes[name]) for name in wanted if name in nodes}, self._index.total)

    def _rescan(self):
        self._load_all()
        self._index = Index.of_nodes(self._s['nodes'], self._index.size)
        self._must_write = True

    @contextlib.contextmanager
    def locked(self, full=True):
        """Hold the run lock (re-entrant within one process) and yield the fresh state (``full=False``: :attr:`head`)."""
        if self._depth and self._owner == os.getpid():
            self._depth += 1
            try:
                yield self.state if full else self.head
            finally:
                self._depth -= 1
            return
        with self.backend.exclusive(self.run_id):
            self._depth, self._owner = 1, os.getpid()
            try:
                self.catch_up()
                yield self.state if full else self.head
            finally:
                self._depth, self._owner = 0, None

    def _record(self, event):
        """Append an event (under the lock, its node's record in memory) and compact when due."""
        event = dict(event)
        event['time'] = iso(self.clock())
        event.setdefault('reason', '')
        for key in [key for key, value in event.items() if value is None and key in ('details', 'run')]:
            del event[key]
        offset = self.backend.append_event(self.run_id, event, self._s['ledger_bytes'])
        self._apply(event)
        self._s['ledger_bytes'] = offset
        self._compact(event)
        return event

    def _compact(self, event):
        """Write the changed shards, then the head, when due; at a run event also ``state.json`` (the full state).

        Due: the head every :data:`HEAD_EVERY` events, the shards every :data:`SHARD_EVERY` events or :data:`RECENT_MAX`
        changed nodes, both at every run event and after a rescan of the indexes.
        """
        if self._index.stale:
            self._rescan()
        events = self._s['events']
        whole = event.get('node') is None
        shards = whole or self._must_write or events - self._shard_events >= SHARD_EVERY or len(self._recent) >= RECENT_MAX
        if not (shards or events - self._head_events >= HEAD_EVERY):
            return
        if event.get('run'):
            self.backend.write_doc(self.run_id, ORDER_DOC, {'run_id': self.run_id, 'order': self._s.get('order') or []})
        if shards:
            self._write_shards(every=bool(event.get('run')) or self._must_write)
        self._write_head()
        if whole:
            self.backend.write_snapshot(self.run_id, self.state)

    def _write_shards(self, every=False):
        numbers = set(range(self._shards)) if every else {shard_of(name, self._shards) for name in self._recent}
        self._read_shards(numbers)
        docs = {number: {} for number in numbers}
        for name, record in self._s['nodes'].items():
            number = shard_of(name, self._shards)
            if number in docs:
                docs[number][name] = record
        self.backend.write_docs(self.run_id, {SHARD_DOC % number: {'run_id': self.run_id, 'ledger_bytes': self._s['ledger_bytes'], 'nodes': nodes}
                                              for number, nodes in sorted(docs.items())})
        self._recent = set()
        self._shard_events = self._s['events']

    def _write_head(self):
        nodes = self._s['nodes']
        head = {key: self._s.get(key) for key in HEAD_FIELDS}
        head.update(format=HEAD_FORMAT, index=self._index.to_doc(), shards=self._shards, shard_events=self._shard_events,
                    recent=sorted(self._recent), position=self.backend.position(self.run_id),
                    records={name: nodes[name] for name in sorted(self._index.names() | self._recent) if name in nodes})
        self.backend.write_doc(self.run_id, HEAD_DOC, head)
        self._head_events = self._s['events']
        self._must_write = False

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
        with self.locked(full=False):
            record = self.node(node)
            if record is None:
                raise LedgerError('%s is not a node of run %s' % (node, self.run_id))
            current = record['state']
            check_transition(node, current, to, operator=operator, resume=resume, gate=gate)
            return self._record({'node': node, 'from': current, 'to': to, 'reason': reason, 'details': details})

    def add_nodes(self, nodes):
        """Add nodes (inventory_hostname -> {domain, gpus}) as ``pending``, e.g. when the inventory grew on resume."""
        with self.locked(full=False):
            self._ensure(list(nodes))
            for name, info in nodes.items():
                if self.node(name) is not None:
                    continue
                self._record({'node': name, 'from': None, 'to': PENDING, 'reason': 'added to the rollout',
                              'details': {'domain': (info or {}).get('domain'), 'gpus': int((info or {}).get('gpus') or 0)}})

    def set_status(self, status, reason, details=None):
        """Change the run's status (running, paused, finished); ``details={'by': 'operator'}`` for an operator's pause."""
        if status not in RUN_STATUSES:
            raise LedgerError('run %s: %r is not a run status (%s)' % (self.run_id, status, ', '.join(RUN_STATUSES)))
        with self.locked(full=False) as head:
            if status == 'finished':
                open_nodes = sorted(self._index.flying)
                if open_nodes:
                    raise LedgerError('run %s cannot finish: %s still in flight' % (self.run_id, ', '.join(open_nodes[:10])))
            return self._record({'node': None, 'from': head['status'], 'to': status, 'reason': reason, 'details': details})

    def reset_breaker(self, reason):
        """An operator's reset of the circuit breaker: quarantines before now no longer count."""
        with self.locked(full=False) as head:
            return self._record({'node': None, 'from': head['status'], 'to': 'breaker_reset', 'reason': reason})

    # -- the soft pre-drain's marks (:mod:`._predrain`): a document {node: mark}, written before a mark is set and after it is undone
    def soft_marks(self):
        """{node: mark} of the marks set on the scheduler for this run and not undone yet."""
        doc = self.backend.read_doc(self.run_id, SOFT_MARKS_DOC) or {}
        marks = doc.get('marks') if isinstance(doc, dict) else None
        return dict(marks) if isinstance(marks, dict) else {}

    def change_marks(self, add=None, forget=()):
        """Record the marks ``add`` ({node: mark}) and forget those of ``forget``, under the run lock; the marks now."""
        with self.locked(full=False):
            marks = self.soft_marks()
            marks.update(add or {})
            for node in forget:
                marks.pop(node, None)
            self.backend.write_doc(self.run_id, SOFT_MARKS_DOC, {'run_id': self.run_id, 'marks': marks})
        return marks

    # -- the run's controllers (members, :mod:`._members`): a document, not events (a heartbeat is not a change of the run)
    def members(self):
        """{member name: record} of the run's controllers (the ``members`` document; empty before the first joined)."""
        doc = self.backend.read_doc(self.run_id, _members.MEMBERS_DOC) or {}
        members = doc.get('members') if isinstance(doc, dict) else None
        return dict(members) if isinstance(members, dict) else {}

    def _write_members(self, members):
        self.backend.write_doc(self.run_id, _members.MEMBERS_DOC, {'run_id': self.run_id, 'members': members})

    def join(self, name, record):
        """Add (or renew) the member ``name``; the members before it ({name: record})."""
        with self.locked(full=False):
            members = self.members()
            self._write_members(dict(members, **{name: record}))
        return members

    def heartbeat(self, name, now=None):
        """Renew ``name``'s heartbeat; False when it is no member, has left or the run is finished (its keeper then stops)."""
        with self.locked(full=False) as head:
            if head['status'] == 'finished':
                return False
            members = _members.beat(self.members(), name, time.time() if now is None else now)
            if members is None:
                return False
            self._write_members(members)
            return True

    def leave(self, name, now=None):
        """Mark ``name`` as gone (its controller finished its part); the members after it."""
        with self.locked(full=False):
            members = _members.leave(self.members(), name, time.time() if now is None else now)
            self._write_members(members)
        return members


# ----------------------------------------------------------------------------------------------------------------
# Across runs.

def rebuild(backend, run_id):
    """The state of a run from its ledger alone (what a reader falls back to when the snapshot and the documents cannot be used)."""
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
            state = RunLedger.open(backend, run_id).head
        except LedgerError:
            continue
        if state.get('inventory') == inventory and state.get('status') in UNFINISHED:
            found.append((state.get('started') or '', run_id))
    return max(found)[1] if found else None


def member_stale_seconds(spec):
    """After how many seconds without a heartbeat a member is dead: I(gpufleet_ledger_lease_seconds) (default 60)."""
    return int((spec or {}).get('lease_seconds') or DEFAULT_LEASE_SECONDS)


def run_alive(backend, run_id, stale, here=None, now=None):
    """Whether run ``run_id`` has a live member (None when it keeps no members: the caller falls back to the holder's pid)."""
    try:
        ledger = RunLedger(backend, run_id)
        members = ledger.members()
    except (LedgerError, OSError, ValueError):
        return None
    if not members:
        return None
    return bool(_members.live(members, time.time() if now is None else now, stale, here or socket.gethostname(), process_alive))


def spawn_python(code, payload, what):
    """Start a detached Python process running ``code`` (the collection importable, ``payload`` as JSON on its standard
    input); its pid.  ``what`` names it in an error."""
    # Where this module was imported from: the folders holding ansible_collections (Ansible's loader knows them all).
    roots = [os.path.abspath(os.path.join(os.path.dirname(__file__), *(['..'] * 5)))]
    roots += [os.path.dirname(path) for path in getattr(sys.modules.get('ansible_collections'), '__path__', None) or []]
    prelude = 'import json, sys; sys.path[:0] = json.loads(sys.argv[1]); '
    try:
        argv = [sys.executable, '-c', prelude + code, json.dumps(list(dict.fromkeys(roots)))]
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,  # pylint: disable=consider-using-with
                                   stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True, cwd='/')
        process.stdin.write(json.dumps(payload).encode('utf-8'))
        process.stdin.close()
    except OSError as exc:
        raise LedgerError('cannot start the process that %s: %s' % (what, exc.strerror)) from None
    return process.pid


def keep(spec, run_id, fleet, holder, member):
    """Start the member's keeper (:func:`keep_loop`): the heartbeat of ``member`` in run ``run_id`` and the renewal of the
    fleet lock (a Lease) while the controller's process (``holder['pid']``) lives."""
    code = ('from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger; '
            '_ledger.keep_loop(**json.loads(sys.stdin.read()))')
    payload = {'spec': {key: value for key, value in spec.items() if key != 'run_id'}, 'run_id': run_id, 'fleet': fleet,
               'holder': holder, 'member': member}
    return spawn_python(code, payload, 'keeps member %s of run %s alive' % (member, run_id))


def keep_loop(spec, run_id, fleet, holder, member, interval=None, sleep=time.sleep, alive=process_alive):
    """Renew ``member``'s heartbeat (and the fleet Lease) every third of the stale time while the controller's process
    lives; it looks at the process every second.  Returns why it stopped: ``left`` (the member left, or the run finished)
    or ``holder gone`` (the heartbeat then goes stale: the member is dead for the others).  A failed write (the backend
    briefly unreachable) is tried again next round."""
    backend = open_backend(spec)
    ledger = RunLedger(backend, run_id)
    interval = interval or max(1.0, member_stale_seconds(spec) / 3.0)
    waited = interval
    while alive(holder.get('pid'), holder.get('pid_start')):
        if waited >= interval:
            waited = 0.0
            try:
                backend.renew(fleet, holder)
                if not ledger.heartbeat(member):
                    return 'left'
            except (LedgerError, OSError, ValueError):
                pass
        sleep(1.0)
        waited += 1.0
    return 'holder gone'


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
        spec = {'backend': 'file', 'run_dir': run_dir}
        if variables.get('gpufleet_ledger_lease_seconds') not in (None, ''):
            spec['lease_seconds'] = _lease_seconds(variables)
        return spec
    spec = {'backend': 'kubernetes', 'run_dir': run_dir}
    for name, key, default in (('gpufleet_ledger_namespace', 'namespace', DEFAULT_NAMESPACE), ('gpufleet_kubeconfig', 'kubeconfig', ''),
                               ('gpufleet_ledger_context', 'context', '')):
        value = variables.get(name)
        value = default if value in (None, '') else value
        if not isinstance(value, str):
            raise LedgerError('%s: must be a text, got %r' % (name, value))
        spec[key] = value
    spec['lease_seconds'] = _lease_seconds(variables)
    return spec


def _lease_seconds(variables):
    seconds = variables.get('gpufleet_ledger_lease_seconds')
    seconds = DEFAULT_LEASE_SECONDS if seconds in (None, '') else seconds
    try:
        if isinstance(seconds, bool) or int(str(seconds)) < 3:
            raise ValueError()
    except ValueError:
        raise LedgerError('gpufleet_ledger_lease_seconds: must be a whole number of seconds, at least 3, got %r' % (seconds,)) from None
    return int(str(seconds))


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
