# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout ledger in the Kubernetes cluster being upgraded: ConfigMaps for the ledger, a Lease for the fleet lock.

Controller-side, no Ansible import; the ``kubernetes`` Python library (kubernetes.core's dependency) is imported when a
backend first talks to the API.  For AWX, whose execution environments are thrown away after each job: the run outlives
the controller.  Same schema and same rules as :class:`~._ledger.FileBackend` (see ``_ledger``); in namespace ``N``:

``ConfigMap gpufleet-run-<run>`` (labels ``gpufleet.io/ledger=state``, ``gpufleet.io/run=<its name>``)
    key ``state.json``: the same ``state.json`` as the file backend (written at the run's creation and its run events;
    mid-run it lags, as the file backend's) (gzipped under ``binaryData`` ``state.json.gz`` when
    it is over :data:`SNAPSHOT_BYTES`; left out when even that is too big - readers then rebuild from the events).
    Annotations ``gpufleet.io/run-id`` (the run id as given) and ``gpufleet.io/ledger-bytes`` (the offset it reflects).
``ConfigMap gpufleet-run-<run>-00000``, ``-00001``, ... (label ``gpufleet.io/ledger=events``)
    key ``ledger.jsonl``: the events, the same lines as the file backend's ``ledger.jsonl``, in chunks: a ConfigMap holds
    at most 1 MiB of values, so a chunk takes events up to :data:`CHUNK_BYTES` and is then sealed (annotation
    ``gpufleet.io/sealed``) before the next one is created.  Annotation ``gpufleet.io/ledger-start``: the byte offset of the
    chunk's first event in the whole ledger (offsets are the file backend's).  A reader follows sealed chunks to the tail.
``ConfigMap gpufleet-doc-<run>-<name>-<hash>`` (label ``gpufleet.io/ledger=doc``, annotation ``gpufleet.io/doc``)
    key ``doc.json``: one document of the run (:meth:`KubernetesBackend.write_doc`): the ledger's ``head``, its shards
    ``nodes-NNNN`` and ``order`` (see ``_ledger``), and the gate's ``waiting`` and ``arrived``.  The head also keeps
    where the tail chunk is, so that a fresh reader reads only the chunks after it.
``Lease gpufleet-fleet-<fleet>`` (coordination.k8s.io/v1): the fleet lock
    ``holderIdentity`` the run id, ``leaseDurationSeconds``, ``acquireTime``, ``renewTime`` (renewed every third of the
    duration by a small process that lives as long as the ``ansible-playbook`` that took it), ``leaseTransitions``;
    annotation ``gpufleet.io/holder`` the holder (run id, host, pid, its start time, since).  A second rollout is refused
    naming the run; a lease not renewed for its duration is stale and taken over (as is one whose holder process on
    this host is gone).
``Lease gpufleet-run-<run>-writer``
    the run lock across controllers (an operator verb from another AWX job while the rollout runs): held for the few
    requests of one change, :data:`WRITER_SECONDS` at most when its holder died.  Forked workers on one controller first
    queue on a local ``flock`` in ``<run_dir>/<run_id>/.lock``.

Every write carries the ``resourceVersion`` it read (optimistic concurrency): a 409 Conflict is re-read and re-checked,
never overwritten blindly; a ledger that grew past what its writer saw (a writer outside the run lock) is refused.
Names are DNS labels made from the run id and fleet (lower case, a hash of the original keeps them unique).

The controller keeps only scratch files in ``run_dir`` (the run lock, ``results/``): a fresh controller loses them and
loses nothing of the run.  Connection: a kubeconfig (``gpufleet_kubeconfig``) and
context, else the environment AWX's Kubernetes credential sets (``K8S_AUTH_HOST``, ``K8S_AUTH_API_KEY``,
``K8S_AUTH_VERIFY_SSL``, ``K8S_AUTH_SSL_CA_CERT``, ``K8S_AUTH_KUBECONFIG``, ``K8S_AUTH_CONTEXT``), else
``KUBECONFIG``/``~/.kube/config``, else the pod's service account.  A token is read from the environment only, never
put in a specification, a message or a process's arguments.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import gzip
import hashlib
import json
import os
import re
import socket
import time

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger

MANAGED_BY = 'gpufleet.lifecycle'
LEDGER_LABEL = 'gpufleet.io/ledger'
RUN_LABEL = 'gpufleet.io/run'
RUN_ID = 'gpufleet.io/run-id'
START = 'gpufleet.io/ledger-start'
SEALED = 'gpufleet.io/sealed'
LEDGER_BYTES = 'gpufleet.io/ledger-bytes'
HOLDER = 'gpufleet.io/holder'
FLEET = 'gpufleet.io/fleet'
DOC = 'gpufleet.io/doc'
DOC_KEY = 'doc.json'
EVENTS_KEY = 'ledger.jsonl'
STATE_KEY = 'state.json'
STATE_GZ_KEY = 'state.json.gz'
DOC_GZ_KEY = 'doc.json.gz'
# A document over this many bytes of JSON is stored gzipped.
DOC_BYTES = 524288
# A ConfigMap holds at most 1 MiB (1048576 bytes) of data and binaryData values: room for the metadata and one more event.
MAX_VALUES = 1048576
# Small chunks: an event rewrites its chunk (a PUT of the whole ConfigMap), so its cost grows with the chunk, not the run.
CHUNK_BYTES = 131072
# One event alone in a chunk may be larger (the first event lists every node).
EVENT_BYTES = 786432
SNAPSHOT_BYTES = 786432
LEASE_SECONDS = 60
WRITER_SECONDS = 15
CONFLICT_RETRIES = 20
REQUEST_TIMEOUT = (10, 30)
NAMESPACE = re.compile(r'^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$')
NAME_CHARS = re.compile(r'[^a-z0-9]+')
AUTH_ENVIRONMENT = ('K8S_AUTH_HOST', 'K8S_AUTH_API_KEY', 'K8S_AUTH_VERIFY_SSL', 'K8S_AUTH_SSL_CA_CERT', 'K8S_AUTH_KUBECONFIG', 'K8S_AUTH_CONTEXT')


class ApiError(_ledger.LedgerError):
    """An answer of the API server other than success: ``code`` (404, 409, ...), ``reason`` (NotFound, Conflict, ...)."""

    def __init__(self, code, reason, message):
        self.code = code
        self.reason = reason
        super().__init__(message)


class LeaseHeld(_ledger.LockHeld):
    """The fleet's Lease is held by another rollout that still renews it."""

    def __init__(self, fleet, holder, where):
        self.holder = holder
        _ledger.LedgerError.__init__(  # pylint: disable=non-parent-init-called
            self, 'fleet %s is held by run %s (host %s, pid %s, since %s; %s): one rollout at a time'
            % (fleet, holder.get('run_id'), holder.get('host'), holder.get('pid'), holder.get('since'), where))


def kube_name(prefix, text, limit=63):
    """A DNS label ``<prefix>-<text in lower case>-<hash of text>`` of at most ``limit`` characters, unique per ``text``."""
    digest = hashlib.sha256(text.encode('utf-8')).hexdigest()[:8]
    room = limit - len(prefix) - len(digest) - 2
    clean = NAME_CHARS.sub('-', text.lower())[:max(room, 0)].strip('-')
    return '-'.join(part for part in (prefix, clean, digest) if part)


def micro_time(moment):
    """A metav1.MicroTime: RFC 3339 in UTC with microseconds."""
    return moment.astimezone(_ledger.datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%fZ')


def parse_time(text):
    """A metav1.Time or MicroTime as seconds since the epoch, or None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return _ledger.datetime.datetime.fromisoformat(text.replace('Z', '+00:00').replace('z', '+00:00')).timestamp()
    except ValueError:
        return None


def connect(kubeconfig='', context=''):
    """A ``kubernetes.client.ApiClient``: the kubeconfig given, else AWX's K8S_AUTH_* environment, else the defaults."""
    try:
        from kubernetes import client, config  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise _ledger.LedgerError('gpufleet_ledger_backend: kubernetes needs the kubernetes Python library on the controller '
                                  '(pip install kubernetes; it comes with kubernetes.core)') from None
    environment = os.environ
    kubeconfig = kubeconfig or environment.get('K8S_AUTH_KUBECONFIG') or ''
    context = context or environment.get('K8S_AUTH_CONTEXT') or ''
    try:
        if not kubeconfig and environment.get('K8S_AUTH_HOST'):
            configuration = client.Configuration()
            configuration.host = environment['K8S_AUTH_HOST']
            if environment.get('K8S_AUTH_API_KEY'):
                configuration.api_key = {'authorization': 'Bearer ' + environment['K8S_AUTH_API_KEY']}
            configuration.verify_ssl = environment.get('K8S_AUTH_VERIFY_SSL', 'true').strip().lower() not in ('0', 'false', 'no', 'off')
            if environment.get('K8S_AUTH_SSL_CA_CERT'):
                configuration.ssl_ca_cert = environment['K8S_AUTH_SSL_CA_CERT']
            return client.ApiClient(configuration)
        default = os.path.expanduser(environment.get('KUBECONFIG', '~/.kube/config').split(os.pathsep)[0])
        if not kubeconfig and not os.path.exists(default) and environment.get('KUBERNETES_SERVICE_HOST'):
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            return client.ApiClient(configuration)
        return config.new_client_from_config(config_file=kubeconfig or None, context=context or None)
    except Exception as exc:  # pylint: disable=broad-except
        # The library's own message names the file or the missing setting; it never carries a token.
        raise _ledger.LedgerError('gpufleet_kubeconfig %s: cannot configure the Kubernetes client: %s'
                                  % (kubeconfig or '(default)', exc)) from None


class Api:
    """The few calls the backend makes, on plain JSON documents (dicts), errors as :class:`ApiError`."""

    def __init__(self, api_client):
        from kubernetes import client  # pylint: disable=import-outside-toplevel
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.exception = client.exceptions.ApiException

    def _call(self, method, *args, **kwargs):
        try:
            response = method(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        except self.exception as exc:
            try:
                status = json.loads(exc.body or '{}')
            except (TypeError, ValueError):
                status = {}
            raise ApiError(exc.status, status.get('reason') or exc.reason, status.get('message') or str(exc.reason)) from None
        except Exception as exc:  # pylint: disable=broad-except
            raise ApiError(0, 'Unreachable', 'the Kubernetes API cannot be reached: %s' % exc) from None
        data = response.data
        return json.loads(data.decode('utf-8')) if data else {}

    def get(self, kind, namespace, name):
        """The object, or None when it does not exist."""
        method = self.core.read_namespaced_config_map if kind == 'ConfigMap' else self.coordination.read_namespaced_lease
        try:
            return self._call(method, name, namespace)
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise

    def create(self, kind, namespace, body):
        method = self.core.create_namespaced_config_map if kind == 'ConfigMap' else self.coordination.create_namespaced_lease
        return self._call(method, namespace, body)

    def replace(self, kind, namespace, body):
        """PUT with the body's metadata.resourceVersion: 409 Conflict when the object changed since it was read."""
        method = self.core.replace_namespaced_config_map if kind == 'ConfigMap' else self.coordination.replace_namespaced_lease
        return self._call(method, body['metadata']['name'], namespace, body)

    def list(self, namespace, selector):
        return self._call(self.core.list_namespaced_config_map, namespace, label_selector=selector).get('items') or []


def _meta(obj):
    return obj.setdefault('metadata', {})


def _annotations(obj):
    return _meta(obj).get('annotations') or {}


def _events_of(chunk):
    return ((chunk.get('data') or {}).get(EVENTS_KEY) or '').encode('utf-8')


def _start_of(chunk):
    try:
        return int(_annotations(chunk).get(START, ''))
    except ValueError:
        raise _ledger.LedgerError('ConfigMap %s: annotation %s is not a byte offset' % (_meta(chunk).get('name'), START)) from None


def _sealed(chunk):
    return _annotations(chunk).get(SEALED) == 'true'


class KubernetesBackend(_ledger.Backend):
    """Ledgers in ConfigMaps of ``namespace``, the fleet lock a Lease; ``run_dir`` is a local scratch folder."""

    def __init__(self, namespace, run_dir, kubeconfig='', context='', lease_seconds=LEASE_SECONDS, api=None,
                 chunk_bytes=CHUNK_BYTES, snapshot_bytes=SNAPSHOT_BYTES, event_bytes=EVENT_BYTES):
        if not isinstance(namespace, str) or not NAMESPACE.match(namespace):
            raise _ledger.LedgerError('gpufleet_ledger_namespace: %r is not a Kubernetes namespace name' % (namespace,))
        if not isinstance(run_dir, str) or not run_dir:
            raise _ledger.LedgerError('gpufleet_run_dir: must be a folder path (the controller\'s scratch folder), got %r' % (run_dir,))
        if isinstance(lease_seconds, bool) or not isinstance(lease_seconds, int) or lease_seconds < 3:
            raise _ledger.LedgerError('gpufleet_ledger_lease_seconds: must be a whole number of seconds, at least 3, got %r' % (lease_seconds,))
        self.namespace = namespace
        self.run_dir = os.path.abspath(run_dir)
        self.kubeconfig = kubeconfig or ''
        self.context = context or ''
        self.lease_seconds = lease_seconds
        self.chunk_bytes = min(chunk_bytes, MAX_VALUES)
        self.event_bytes = min(event_bytes, MAX_VALUES)
        self.snapshot_bytes = min(snapshot_bytes, MAX_VALUES)
        self._api = api
        self._api_pid = os.getpid() if api is not None else None
        self._sealed = {}   # run_id -> {index: (start, end)} of sealed chunks (they never change)
        self._tail = {}     # run_id -> (index, the tail chunk as last read or written)
        self._heads = {}    # run_id -> the head as last read or written
        self._docs = {}     # (run_id, name) -> a document's ConfigMap as last read or written
        self._hints = {}    # run_id -> (index, start) of a chunk from the ledger's head (checked before use)

    # -- plumbing
    @property
    def api(self):
        if self._api is None or self._api_pid != os.getpid():
            # A forked worker makes its own connections.
            self._api = Api(connect(self.kubeconfig, self.context))
            self._api_pid = os.getpid()
        return self._api

    def spec(self, run_id=None):
        """The ledger specification of this backend (``gpufleet_ledger``): no secret in it."""
        spec = {'backend': 'kubernetes', 'run_dir': self.run_dir, 'namespace': self.namespace, 'kubeconfig': self.kubeconfig,
                'context': self.context, 'lease_seconds': self.lease_seconds}
        if run_id:
            spec['run_id'] = run_id
        return spec

    def head_name(self, run_id):
        return kube_name('gpufleet-run', run_id, limit=56)

    def chunk_name(self, run_id, index):
        return '%s-%05d' % (self.head_name(run_id), index)

    def doc_name(self, run_id, name):
        """The ConfigMap of the run's document ``name``."""
        return kube_name('gpufleet-doc', '%s/%s' % (run_id, _ledger.check_doc_name(name)))

    def fleet_lease(self, fleet):
        return kube_name('gpufleet-fleet', fleet)

    def path(self, run_id, name=''):
        """A local scratch path of the run (the local run lock that queues this controller's workers, the results export)."""
        return os.path.join(self.run_dir, _ledger.check_run_id(run_id), name) if name else os.path.join(self.run_dir, _ledger.check_run_id(run_id))

    def location(self, run_id=None, name=''):
        if run_id is None:
            return 'Kubernetes namespace %s' % self.namespace
        if name == _ledger.STATE:
            return 'ConfigMap %s/%s key %s' % (self.namespace, self.head_name(run_id), STATE_KEY)
        if name and name != _ledger.LEDGER:
            return 'ConfigMap %s/%s key %s' % (self.namespace, self.doc_name(run_id, name), DOC_KEY)
        return 'ConfigMaps %s/%s-NNNNN key %s' % (self.namespace, self.head_name(run_id), EVENTS_KEY)

    def _labels(self, run_id, kind):
        return {'app.kubernetes.io/managed-by': MANAGED_BY, LEDGER_LABEL: kind, RUN_LABEL: self.head_name(run_id)}

    # -- the run lock
    @contextlib.contextmanager
    def exclusive(self, run_id):
        folder = self.path(run_id)
        try:
            os.makedirs(folder, mode=0o750, exist_ok=True)
            fd = os.open(os.path.join(folder, _ledger.RUN_LOCK), os.O_RDWR | os.O_CREAT, 0o640)
        except OSError as exc:
            raise _ledger.LedgerError('%s: cannot open the run lock: %s' % (os.path.join(folder, _ledger.RUN_LOCK), exc.strerror)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            lease = self._take_writer(run_id)
            try:
                yield
            finally:
                self._give_writer(lease)
        finally:
            os.close(fd)

    def _take_writer(self, run_id, wait=None):
        name = self.head_name(run_id) + '-writer'
        identity = '%s/%d/%s' % (socket.gethostname(), os.getpid(), _ledger.secrets.token_hex(4))
        deadline = time.time() + (WRITER_SECONDS * 2 if wait is None else wait)
        pause = 0.05
        while True:
            now = _ledger.utcnow()
            lease = self.api.get('Lease', self.namespace, name)
            spec = {'holderIdentity': identity, 'leaseDurationSeconds': WRITER_SECONDS, 'acquireTime': micro_time(now),
                    'renewTime': micro_time(now)}
            try:
                if lease is None:
                    return self.api.create('Lease', self.namespace, {'metadata': {
                        'name': name, 'labels': self._labels(run_id, 'writer'), 'annotations': {RUN_ID: run_id}}, 'spec': dict(spec, leaseTransitions=0)})
                current = lease.get('spec') or {}
                renewed = parse_time(current.get('renewTime')) or 0
                if not current.get('holderIdentity') or renewed + (current.get('leaseDurationSeconds') or WRITER_SECONDS) < now.timestamp():
                    lease['spec'] = dict(spec, leaseTransitions=(current.get('leaseTransitions') or 0) + 1)
                    return self.api.replace('Lease', self.namespace, lease)
            except ApiError as exc:
                if exc.code != 409:
                    raise
                continue    # created or taken by another writer meanwhile: read it again
            if time.time() > deadline:
                raise _ledger.LedgerError('run %s: the ledger\'s writer Lease %s/%s is held by %s (renewed %s): another controller is '
                                          'writing the ledger' % (run_id, self.namespace, name, current.get('holderIdentity'), current.get('renewTime')))
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    def _give_writer(self, lease):
        identity = lease['spec']['holderIdentity']
        for _attempt in range(CONFLICT_RETRIES):
            lease['spec'] = {key: value for key, value in lease['spec'].items() if key != 'holderIdentity'}
            try:
                self.api.replace('Lease', self.namespace, lease)
                return
            except ApiError as exc:
                if exc.code == 404:
                    return
                if exc.code != 409:
                    raise
            lease = self.api.get('Lease', self.namespace, lease['metadata']['name'])
            if lease is None or (lease.get('spec') or {}).get('holderIdentity') != identity:
                return

    # -- events
    def _chunk(self, run_id, index):
        return self.api.get('ConfigMap', self.namespace, self.chunk_name(run_id, index))

    def _first_index(self, run_id, offset):
        """(index, start) of the chunk to read first for ``offset``, from the sealed chunks seen before."""
        index, start = 0, 0
        hint = self._hints.get(run_id)
        if hint is not None and hint[1] <= offset:
            index, start = hint
        for number, (begin, end) in sorted(self._sealed.get(run_id, {}).items()):
            if begin <= offset and number >= index:
                index, start = number, begin
                if offset >= end:
                    index, start = number + 1, end
        return index, start

    def exists(self, run_id):
        return self._chunk(run_id, 0) is not None

    def read_events(self, run_id, offset):
        where = self.location(run_id, _ledger.LEDGER)
        index, _start = self._first_index(run_id, offset)
        first = index
        collected = b''
        seen_end = None
        while True:
            chunk = self._chunk(run_id, index)
            if index == first and index and (chunk is None or _start_of(chunk) > offset):
                # A hint or a cache that no longer holds (the ledger was replaced): from the first chunk.
                self._hints.pop(run_id, None)
                self._sealed.pop(run_id, None)
                index = first = 0
                continue
            if chunk is None:
                if index == 0:
                    if offset:
                        raise _ledger.LedgerShorter('%s: missing, %d bytes were read before' % (where, offset))
                    return [], offset
                break
            start, data = _start_of(chunk), _events_of(chunk)
            seen_end = start + len(data)
            if offset > start:
                collected += data[offset - start:]
            else:
                collected += data
            if not _sealed(chunk):
                self._tail[run_id] = (index, chunk)
                break
            self._sealed.setdefault(run_id, {})[index] = (start, seen_end)
            index += 1
        if seen_end is not None and seen_end < offset:
            raise _ledger.LedgerShorter('%s: shorter (%d bytes) than the %d bytes read before' % (where, seen_end, offset))
        events, consumed = _ledger.parse_events(collected, where)
        return events, offset + consumed

    def _tail_chunk(self, run_id, offset):
        """(index, tail chunk or None, its start): the chunk the next event goes to, re-read unless cached at ``offset``."""
        cached = self._tail.get(run_id)
        if cached is not None:
            index, chunk = cached
            if _start_of(chunk) + len(_events_of(chunk)) == offset and not _sealed(chunk):
                return index, chunk, _start_of(chunk)
        index, start = self._first_index(run_id, offset)
        while True:
            chunk = self._chunk(run_id, index)
            if chunk is None:
                return index, None, start
            start = _start_of(chunk)
            if not _sealed(chunk):
                return index, chunk, start
            self._sealed.setdefault(run_id, {})[index] = (start, start + len(_events_of(chunk)))
            start += len(_events_of(chunk))
            index += 1

    def _new_chunk(self, run_id, index, start, text):
        body = {'metadata': {'name': self.chunk_name(run_id, index), 'labels': self._labels(run_id, 'events'),
                             'annotations': {RUN_ID: run_id, START: str(start)}}, 'data': {EVENTS_KEY: text}}
        return self.api.create('ConfigMap', self.namespace, body)

    def append_event(self, run_id, event, offset):
        where = self.location(run_id, _ledger.LEDGER)
        line = json.dumps(event, sort_keys=True, separators=(',', ':')) + '\n'
        size = len(line.encode('utf-8'))
        if size > max(self.chunk_bytes, self.event_bytes):
            raise _ledger.LedgerError('%s: an event of %d bytes does not fit a ConfigMap chunk (%d bytes): node %s'
                                      % (where, size, max(self.chunk_bytes, self.event_bytes), event.get('node')))
        if offset == 0:
            self._ensure_head(run_id)
        for _attempt in range(CONFLICT_RETRIES):
            index, chunk, start = self._tail_chunk(run_id, offset)
            try:
                if chunk is None:
                    if start != offset:
                        raise _ledger.LedgerError('%s: holds %d bytes, its readers saw %d: the ledger was replaced, cut or written '
                                                  'outside the run lock' % (where, start, offset))
                    created = self._new_chunk(run_id, index, start, line)
                    self._tail[run_id] = (index, created)
                    return offset + size
                data = _events_of(chunk)
                if start + len(data) != offset:
                    raise _ledger.LedgerError('%s: holds %d bytes, its readers saw %d: the ledger was replaced, cut or written '
                                              'outside the run lock' % (where, start + len(data), offset))
                if data and len(data) + size > self.chunk_bytes:
                    # Full: seal it first (a reader then looks for the next one), then start the next chunk.
                    _meta(chunk).setdefault('annotations', {})[SEALED] = 'true'
                    sealed = self.api.replace('ConfigMap', self.namespace, chunk)
                    self._sealed.setdefault(run_id, {})[index] = (start, start + len(data))
                    self._tail[run_id] = (index, sealed)
                    created = self._new_chunk(run_id, index + 1, start + len(data), line)
                    self._tail[run_id] = (index + 1, created)
                    return offset + size
                chunk.setdefault('data', {})[EVENTS_KEY] = data.decode('utf-8') + line
                self._tail[run_id] = (index, self.api.replace('ConfigMap', self.namespace, chunk))
                return offset + size
            except ApiError as exc:
                if exc.code != 409:
                    raise _ledger.LedgerError('%s: %s' % (where, exc)) from None
                self._tail.pop(run_id, None)     # changed since read (or created meanwhile): read it again and re-check
        raise _ledger.LedgerError('%s: %d conflicting writes in a row; nothing written' % (where, CONFLICT_RETRIES))

    def position(self, run_id):
        """[index, start] of the tail chunk as last read or written, for the ledger's head."""
        cached = self._tail.get(run_id)
        return [cached[0], _start_of(cached[1])] if cached is not None else None

    def seek(self, run_id, hint):
        if isinstance(hint, list) and len(hint) == 2 and all(isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in hint):
            self._hints[run_id] = (hint[0], hint[1])

    # -- the run's documents
    def read_doc(self, run_id, name):
        obj = self.api.get('ConfigMap', self.namespace, self.doc_name(run_id, name))
        if obj is None or _annotations(obj).get(RUN_ID) != run_id:
            return None
        self._docs[(run_id, name)] = obj
        try:
            packed = (obj.get('binaryData') or {}).get(DOC_GZ_KEY)
            text = gzip.decompress(base64.b64decode(packed)).decode('utf-8') if packed else (obj.get('data') or {}).get(DOC_KEY)
            doc = json.loads(text or 'null')
        except (ValueError, OSError, EOFError):
            return None
        return doc if isinstance(doc, dict) else None

    def write_doc(self, run_id, name, doc):
        """Create or replace the document's ConfigMap with the resourceVersion last seen; a conflict is re-read and retried."""
        where = self.location(run_id, name)
        text = json.dumps(doc, sort_keys=True, separators=(',', ':'))
        values = {'data': {DOC_KEY: text}}
        if len(text.encode('utf-8')) > DOC_BYTES:
            # A large head (a wide window, many failed nodes): gzipped under binaryData, as the snapshot is.
            packed = base64.b64encode(gzip.compress(text.encode('utf-8'), mtime=0)).decode('ascii')
            if len(packed) > MAX_VALUES - 65536:
                raise _ledger.LedgerError('%s: a document of %d bytes (%d gzipped) does not fit a ConfigMap'
                                          % (where, len(text.encode('utf-8')), len(packed)))
            values = {'binaryData': {DOC_GZ_KEY: packed}}
        key = (run_id, name)
        for _attempt in range(CONFLICT_RETRIES):
            try:
                obj = self._docs.get(key) or self.api.get('ConfigMap', self.namespace, self.doc_name(run_id, name))
                if obj is None:
                    self._docs[key] = self.api.create('ConfigMap', self.namespace, {'metadata': {
                        'name': self.doc_name(run_id, name), 'labels': self._labels(run_id, 'doc'),
                        'annotations': {RUN_ID: run_id, DOC: name}}, **values})
                    return
                if _annotations(obj).get(RUN_ID) != run_id:
                    raise _ledger.LedgerError('%s belongs to run %s, not %s' % (where, _annotations(obj).get(RUN_ID), run_id))
                obj.pop('data', None)
                obj.pop('binaryData', None)
                obj.update(values)
                self._docs[key] = self.api.replace('ConfigMap', self.namespace, obj)
                return
            except ApiError as exc:
                if exc.code != 409:
                    raise _ledger.LedgerError('%s: %s' % (where, exc)) from None
                self._docs.pop(key, None)
        raise _ledger.LedgerError('%s: %d conflicting writes in a row' % (where, CONFLICT_RETRIES))

    # -- the snapshot
    def _ensure_head(self, run_id):
        head = self.api.get('ConfigMap', self.namespace, self.head_name(run_id))
        if head is None:
            try:
                head = self.api.create('ConfigMap', self.namespace, {'metadata': {
                    'name': self.head_name(run_id), 'labels': self._labels(run_id, 'state'), 'annotations': {RUN_ID: run_id, LEDGER_BYTES: '0'}}})
            except ApiError as exc:
                if exc.code != 409:
                    raise
                head = self.api.get('ConfigMap', self.namespace, self.head_name(run_id))
        if head is not None and _annotations(head).get(RUN_ID) != run_id:
            raise _ledger.LedgerError('ConfigMap %s/%s belongs to run %s, not %s'
                                      % (self.namespace, self.head_name(run_id), _annotations(head).get(RUN_ID), run_id))
        self._heads[run_id] = head
        return head

    def read_snapshot(self, run_id):
        try:
            head = self.api.get('ConfigMap', self.namespace, self.head_name(run_id))
        except ApiError:
            return None
        if head is None:
            return None
        self._heads[run_id] = head
        try:
            if STATE_KEY in (head.get('data') or {}):
                state = json.loads(head['data'][STATE_KEY])
            elif STATE_GZ_KEY in (head.get('binaryData') or {}):
                state = json.loads(gzip.decompress(base64.b64decode(head['binaryData'][STATE_GZ_KEY])).decode('utf-8'))
            else:
                return None
        except (ValueError, OSError, EOFError):
            return None
        if not isinstance(state, dict) or state.get('run_id') != run_id or not isinstance(state.get('nodes'), dict) \
                or not isinstance(state.get('ledger_bytes'), int):
            return None
        return state

    def snapshot_values(self, state):
        """(data, binaryData) of the head for ``state``: plain, gzipped when large, nothing when even that is too large."""
        text = json.dumps(state, indent=1, sort_keys=True) + '\n'
        if len(text.encode('utf-8')) <= self.snapshot_bytes:
            return {STATE_KEY: text}, None
        packed = gzip.compress(text.encode('utf-8'), mtime=0)
        if len(packed) <= self.snapshot_bytes:
            return None, {STATE_GZ_KEY: base64.b64encode(packed).decode('ascii')}
        return None, None

    def write_snapshot(self, run_id, state):
        data, binary = self.snapshot_values(state)
        for _attempt in range(CONFLICT_RETRIES):
            head = self._heads.get(run_id) or self._ensure_head(run_id)
            try:
                written = int(_annotations(head).get(LEDGER_BYTES) or 0)
            except ValueError:
                written = 0
            if written > state['ledger_bytes']:
                return      # a newer snapshot is there already: never replaced by an older one
            _meta(head).setdefault('annotations', {})[LEDGER_BYTES] = str(state['ledger_bytes'])
            head['data'], head['binaryData'] = data, binary
            try:
                self._heads[run_id] = self.api.replace('ConfigMap', self.namespace, head)
                return
            except ApiError as exc:
                if exc.code != 409:
                    raise _ledger.LedgerError('%s: %s' % (self.location(run_id, _ledger.STATE), exc)) from None
                self._heads.pop(run_id, None)
        raise _ledger.LedgerError('%s: %d conflicting writes in a row' % (self.location(run_id, _ledger.STATE), CONFLICT_RETRIES))

    def run_ids(self):
        found = []
        for head in self.api.list(self.namespace, '%s=state,app.kubernetes.io/managed-by=%s' % (LEDGER_LABEL, MANAGED_BY)):
            run_id = _annotations(head).get(RUN_ID)
            if isinstance(run_id, str) and _ledger.RUN_ID.match(run_id):
                found.append(run_id)
        return sorted(found)

    # -- the fleet lock
    def _holder_of(self, lease):
        spec = lease.get('spec') or {}
        if not spec.get('holderIdentity'):
            return None
        try:
            holder = json.loads(_annotations(lease).get(HOLDER) or '{}')
        except ValueError:
            holder = {}
        holder = holder if isinstance(holder, dict) else {}
        holder['run_id'] = spec['holderIdentity']
        holder['renewed'] = spec.get('renewTime')
        holder['lease_seconds'] = spec.get('leaseDurationSeconds')
        return holder

    def _lease_text(self, fleet, lease, now):
        spec = lease.get('spec') or {}
        renewed = parse_time(spec.get('renewTime')) or 0
        seconds = spec.get('leaseDurationSeconds') or 0
        return ('Lease %s/%s renewed %s, %ss ago; it is stale and may be taken over once its holder stops renewing it for %ss, '
                'after %s' % (self.namespace, self.fleet_lease(fleet), spec.get('renewTime'), int(now - renewed), seconds,
                              micro_time(_ledger.datetime.datetime.fromtimestamp(renewed + seconds, _ledger.datetime.timezone.utc))))

    def acquire(self, fleet, holder, alive=None):
        name = self.fleet_lease(fleet)
        for _attempt in range(CONFLICT_RETRIES):
            now = _ledger.utcnow()
            lease = self.api.get('Lease', self.namespace, name)
            annotations = {HOLDER: json.dumps(holder, sort_keys=True), FLEET: fleet}
            try:
                if lease is None:
                    self.api.create('Lease', self.namespace, {
                        'metadata': {'name': name, 'labels': {'app.kubernetes.io/managed-by': MANAGED_BY, LEDGER_LABEL: 'fleet'},
                                     'annotations': annotations},
                        'spec': {'holderIdentity': holder['run_id'], 'leaseDurationSeconds': self.lease_seconds, 'acquireTime': micro_time(now),
                                 'renewTime': micro_time(now), 'leaseTransitions': 0}})
                    return None
                current = self._holder_of(lease)
                spec = dict(lease.get('spec') or {})
                stale = None
                same = current is not None and current.get('run_id') == holder['run_id']
                if same:
                    if _ledger.holder_alive(current, holder['host']):
                        return None     # the same run: another controller joins it (the Lease belongs to the run)
                    stale = current     # the same run resumed after its holder died: taken over
                if current is not None and not same:
                    expired = (parse_time(spec.get('renewTime')) or 0) + (spec.get('leaseDurationSeconds') or 0) < now.timestamp()
                    if not (expired or _ledger.lock_stale(current, holder['host'], alive)):
                        raise LeaseHeld(fleet, current, self._lease_text(fleet, lease, now.timestamp()))
                    stale = current
                if not same:
                    spec['acquireTime'] = micro_time(now)
                    spec['leaseTransitions'] = (spec.get('leaseTransitions') or 0) + (1 if spec.get('holderIdentity') else 0)
                spec.update(holderIdentity=holder['run_id'], leaseDurationSeconds=self.lease_seconds, renewTime=micro_time(now))
                lease['spec'] = spec
                _meta(lease)['annotations'] = dict(_annotations(lease), **annotations)
                self.api.replace('Lease', self.namespace, lease)
                return stale
            except ApiError as exc:
                if exc.code != 409:
                    raise _ledger.LedgerError('Lease %s/%s: %s' % (self.namespace, name, exc)) from None
        raise _ledger.LedgerError('Lease %s/%s: %d conflicting writes in a row' % (self.namespace, name, CONFLICT_RETRIES))

    def _update_own(self, fleet, run_id, change, pid=None):
        """Apply ``change(spec)`` to the fleet Lease while ``run_id`` (and ``pid``) holds it; whether it did."""
        name = self.fleet_lease(fleet)
        for _attempt in range(CONFLICT_RETRIES):
            lease = self.api.get('Lease', self.namespace, name)
            current = self._holder_of(lease) if lease is not None else None
            if current is None or current.get('run_id') != run_id or (pid is not None and current.get('pid') != pid):
                return False
            lease['spec'] = change(dict(lease['spec']))
            if not lease['spec'].get('holderIdentity'):
                _meta(lease)['annotations'] = {key: value for key, value in _annotations(lease).items() if key != HOLDER}
            try:
                self.api.replace('Lease', self.namespace, lease)
                return True
            except ApiError as exc:
                if exc.code != 409:
                    raise _ledger.LedgerError('Lease %s/%s: %s' % (self.namespace, name, exc)) from None
        raise _ledger.LedgerError('Lease %s/%s: %d conflicting writes in a row' % (self.namespace, name, CONFLICT_RETRIES))

    def release(self, fleet, run_id):
        return self._update_own(fleet, run_id, lambda spec: {key: value for key, value in spec.items() if key != 'holderIdentity'})

    def lock_location(self, fleet):
        return 'Lease %s/%s' % (self.namespace, self.fleet_lease(fleet))

    def renew(self, fleet, holder):
        """Renew the fleet Lease for the run of ``holder`` (any of its controllers renews it); False when the run no longer
        holds it (released, or taken over as stale)."""
        return self._update_own(fleet, holder['run_id'], lambda spec: dict(spec, renewTime=micro_time(_ledger.utcnow())))

    def holder(self, fleet):
        lease = self.api.get('Lease', self.namespace, self.fleet_lease(fleet))
        return self._holder_of(lease) if lease is not None else None
