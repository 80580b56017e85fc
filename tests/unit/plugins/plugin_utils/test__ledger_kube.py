# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Kubernetes ledger backend against the fake API server in this process (tests/sim/kube/fake_apiserver.py).

Same schema as the file backend (byte for byte), chunks under the 1 MiB ConfigMap limit, resourceVersion conflicts re-read
and never overwritten, the fleet Lease (refusal naming the run, stale take-over, renewal by a detached process), the
writer Lease across controllers, and no token anywhere but the environment.
"""

import base64
import datetime
import gzip
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger, _ledger_kube, _members
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._ledger import FileBackend, LedgerError, LockHeld, RunLedger

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim', 'kube'))

import fake_apiserver  # noqa: E402  pylint: disable=wrong-import-position,import-error

NODES = {'n1': {'domain': 'r1', 'gpus': 8}, 'n2': {'domain': 'r2', 'gpus': 8}}
HAPPY = ['admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'done']


class Clock:
    def __init__(self):
        self.now = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.timezone.utc)

    def __call__(self):
        self.now += datetime.timedelta(seconds=10)
        return self.now


@pytest.fixture(scope='module')
def server(tmp_path_factory):
    running, _thread, url = fake_apiserver.start({'namespaces': [{'metadata': {'name': 'gpufleet'}}]})
    kubeconfig = fake_apiserver.write_kubeconfig(str(tmp_path_factory.mktemp('kube') / 'kubeconfig'), url)
    yield running, kubeconfig, url
    fake_apiserver.stop(running)


@pytest.fixture
def kube(server, tmp_path, request):
    """A backend in a namespace of its own (the test's name), and the fake's store."""
    running, kubeconfig, _url = server
    namespace = request.node.name.lower().replace('_', '-')[-50:].strip('-')
    running.store.create('namespaces', {'metadata': {'name': namespace}}, admit=False)
    backend = _ledger.open_backend({'backend': 'kubernetes', 'run_dir': str(tmp_path / 'scratch'), 'namespace': namespace,
                                    'kubeconfig': kubeconfig, 'lease_seconds': 30})
    return backend, running.store


def configmaps(store, namespace):
    return {obj['metadata']['name']: obj for obj in store.items('configmaps', namespace)}


def lease(store, backend, fleet='fleet-a'):
    return store.get('leases', backend.namespace, backend.fleet_lease(fleet))


def happy_run(backend, run_id='run1'):
    ledger = RunLedger.create(backend, run_id, inventory='inv', policy={'gpufleet_window': 2}, pin={'driver': '580.65.06'},
                              nodes=NODES, clock=Clock())
    for state in HAPPY:
        ledger.transition('n1', state, 'step %s' % state)
    ledger.transition('n2', 'admitted', 'window')
    ledger.transition('n2', 'quarantined', 'unreachable after reboot', details={'phase': 'reboot'})
    ledger.set_status('finished', 'every node is final')
    return ledger


# ------------------------------------------------------------------------------------------------ the schema

def test_the_same_events_and_state_json_as_the_file_backend(kube, tmp_path):
    backend, store = kube
    happy_run(backend)
    happy_run(FileBackend(str(tmp_path / 'files')))
    with open(str(tmp_path / 'files' / 'run1' / 'ledger.jsonl'), encoding='utf-8') as handle:
        file_events = handle.read()
    with open(str(tmp_path / 'files' / 'run1' / 'state.json'), encoding='utf-8') as handle:
        file_state = handle.read()
    objects = configmaps(store, backend.namespace)
    head = objects[backend.head_name('run1')]
    chunk = objects[backend.chunk_name('run1', 0)]
    assert chunk['data']['ledger.jsonl'] == file_events
    assert head['data']['state.json'] == file_state
    assert head['metadata']['annotations'] == {'gpufleet.io/run-id': 'run1', 'gpufleet.io/ledger-bytes': str(len(file_events))}
    assert head['metadata']['labels'] == {'app.kubernetes.io/managed-by': 'gpufleet.lifecycle', 'gpufleet.io/ledger': 'state',
                                          'gpufleet.io/run': backend.head_name('run1')}
    assert sorted(name for name in objects if not name.startswith('gpufleet-doc-')) == [backend.head_name('run1'), backend.chunk_name('run1', 0)]
    # The ledger's documents: its head, its one shard and the order.
    assert backend.read_doc('run1', 'head')['status'] == 'finished' and backend.read_doc('run1', 'order') == {'run_id': 'run1', 'order': []}
    assert set(backend.read_doc('run1', 'nodes-0000')['nodes']) == {'n1', 'n2'}


def test_the_fleet_report_reads_a_kubernetes_ledger_as_a_file_one(kube, tmp_path):
    # The fleet_report callback gets the gate's specification (upgrade_phase's ledger argument, or the extra variables).
    from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _report  # pylint: disable=import-outside-toplevel
    backend, _store = kube
    happy_run(backend)
    happy_run(FileBackend(str(tmp_path / 'files')))
    from_kube = _report.read_ledger(dict(backend.spec(), run_dir=str(tmp_path / 'fresh-controller'), run_id='run1'))
    from_files = _report.read_ledger(str(tmp_path / 'files' / 'run1'))
    assert (from_kube['state'], from_kube['events']) == (from_files['state'], from_files['events'])
    assert from_kube['path'] == 'ConfigMaps %s/%s-NNNNN key ledger.jsonl' % (backend.namespace, backend.head_name('run1'))
    assert _report.window_slots(from_kube) == {'n1': 1, 'n2': 1}
    with pytest.raises(_report.ReportError, match=r'ConfigMaps %s/gpufleet-run-run2-.* no ledger' % backend.namespace):
        _report.read_ledger(dict(backend.spec(), run_dir=str(tmp_path / 'fresh-controller'), run_id='run2'))


def test_a_fresh_controller_finds_the_run_and_continues_it(kube, tmp_path):
    backend, _store = kube
    ledger = RunLedger.create(backend, '20261124T120000Z-abc123', inventory='inv', nodes=NODES)
    ledger.transition('n1', 'admitted', 'window')
    ledger.transition('n1', 'cordoned', '')
    # A new execution environment: nothing local, a new client.
    fresh = _ledger.open_backend(dict(backend.spec(), run_dir=str(tmp_path / 'elsewhere')))
    assert fresh.run_ids() == ['20261124T120000Z-abc123']
    assert _ledger.last_unfinished(fresh, 'inv') == '20261124T120000Z-abc123'
    again = RunLedger.open(fresh, '20261124T120000Z-abc123')
    assert again.state['nodes']['n1']['state'] == 'cordoned' and again.state['status'] == 'running'
    again.transition('n1', 'admitted', 'caught cordoned: re-check and continue', resume=True)
    assert RunLedger.open(backend, '20261124T120000Z-abc123').state['nodes']['n1']['reason'].startswith('caught cordoned')
    with pytest.raises(LedgerError, match='already has a ledger'):
        RunLedger.create(fresh, '20261124T120000Z-abc123', nodes=NODES)


def test_names_are_dns_labels_unique_per_run_id(kube):
    backend, _store = kube
    names = {backend.head_name(run_id) for run_id in ('Run_1', 'run-1', 'RUN.1', 'x' * 100)}
    assert len(names) == 4
    for name in names | {backend.chunk_name('x' * 100, 99999), backend.head_name('x' * 100) + '-writer', backend.fleet_lease('Fleet_Of.GPUs')}:
        assert len(name) <= 63 and _ledger_kube.NAMESPACE.match(name), name


def test_a_missing_snapshot_is_rebuilt_from_the_events(kube, tmp_path):
    backend, store = kube
    happy_run(backend)
    name = backend.head_name('run1')
    head = store.get('configmaps', backend.namespace, name)
    store.put('configmaps', dict(head, data={'state.json': '{"torn'}), old=head)
    state = RunLedger.open(_ledger.open_backend(dict(backend.spec(), run_dir=str(tmp_path / 'x'))), 'run1').state
    assert state['nodes']['n1']['state'] == 'done' and state['nodes']['n2']['state'] == 'quarantined' and state['status'] == 'finished'


# ------------------------------------------------------------------------------------------------ the 1 MiB limit

def test_events_go_to_sealed_chunks_a_reader_follows(kube, tmp_path):
    backend, store = kube
    backend.chunk_bytes = 450
    backend.event_bytes = 0
    happy_run(backend)
    objects = configmaps(store, backend.namespace)
    chunks = [objects[name] for name in sorted(objects) if name.startswith(backend.head_name('run1') + '-')]
    assert len(chunks) >= 3
    assert all(chunk['metadata']['annotations'].get('gpufleet.io/sealed') == 'true' for chunk in chunks[:-1])
    assert 'gpufleet.io/sealed' not in chunks[-1]['metadata']['annotations']
    text = ''.join(chunk['data']['ledger.jsonl'] for chunk in chunks)
    starts = [int(chunk['metadata']['annotations']['gpufleet.io/ledger-start']) for chunk in chunks]
    assert starts == [sum(len(c['data']['ledger.jsonl']) for c in chunks[:i]) for i in range(len(chunks))]
    assert all(len(chunk['data']['ledger.jsonl']) <= 450 for chunk in chunks)
    # A reader that starts over, and one that reads from the middle of the second chunk.
    fresh = _ledger.open_backend(dict(backend.spec(), run_dir=str(tmp_path / 'x')))
    events, offset = fresh.read_events('run1', 0)
    assert offset == len(text) and [event['to'] for event in events][-1] == 'finished'
    middle = text.index('\n', starts[1] + 1) + 1
    later, _offset = fresh.read_events('run1', middle)
    assert later == [json.loads(line) for line in text[middle:].splitlines()]
    assert RunLedger.open(fresh, 'run1').state == _ledger.rebuild(fresh, 'run1')


def test_a_large_snapshot_is_gzipped_and_a_too_large_one_left_out(kube, tmp_path):
    backend, store = kube
    backend.snapshot_bytes = 4000
    nodes = {'node-%04d' % number: {'domain': 'rack-%d' % (number % 10), 'gpus': 8} for number in range(60)}
    ledger = RunLedger.create(backend, 'big', inventory='inv', nodes=nodes)
    head = store.get('configmaps', backend.namespace, backend.head_name('big'))
    assert 'data' not in head and set(head['binaryData']) == {'state.json.gz'}
    fresh = _ledger.open_backend(dict(backend.spec(), run_dir=str(tmp_path / 'x')))
    assert fresh.read_snapshot('big') == ledger.state
    backend.snapshot_bytes = 100
    ledger.transition('node-0001', 'admitted', 'window')
    ledger.set_status('paused', 'checking')     # state.json is written at run events
    head = store.get('configmaps', backend.namespace, backend.head_name('big'))
    assert 'data' not in head and 'binaryData' not in head
    assert fresh.read_snapshot('big') is None
    assert RunLedger.open(fresh, 'big').state['nodes']['node-0001']['state'] == 'admitted'


def test_an_event_too_large_for_a_chunk_is_refused(kube):
    backend, _store = kube
    backend.chunk_bytes = backend.event_bytes = 300
    ledger = RunLedger.create(backend, 'run1', nodes={'n1': {}})
    with pytest.raises(LedgerError, match='does not fit a ConfigMap chunk'):
        ledger.transition('n1', 'admitted', 'x' * 400)
    assert RunLedger.open(backend, 'run1').state['nodes']['n1']['state'] == 'pending'


# ------------------------------------------------------------------------------------------------ optimistic concurrency

def test_a_conflict_is_re_read_and_what_others_wrote_is_kept(kube):
    backend, store = kube
    ledger = RunLedger.create(backend, 'run1', nodes=NODES)
    api = backend.api
    replace = api.replace
    labelled = []

    def meddle(kind, namespace, body):
        # Someone labels the object between our read and our write: its resourceVersion moves on.
        name = body['metadata']['name']
        if kind == 'ConfigMap' and name not in labelled and not name.startswith('gpufleet-doc-'):
            labelled.append(name)
            current = store.get('configmaps', namespace, name)
            changed = json.loads(json.dumps(current))
            changed['metadata']['labels']['team'] = 'ops'
            store.put('configmaps', changed, old=current)
        return replace(kind, namespace, body)
    api.replace = meddle
    ledger.transition('n1', 'admitted', 'window')
    ledger.set_status('paused', 'checking')     # state.json is written at run events
    chunk = store.get('configmaps', backend.namespace, backend.chunk_name('run1', 0))
    head = store.get('configmaps', backend.namespace, backend.head_name('run1'))
    assert sorted(labelled) == sorted([backend.chunk_name('run1', 0), backend.head_name('run1')])
    assert chunk['metadata']['labels']['team'] == 'ops' and head['metadata']['labels']['team'] == 'ops'
    assert [json.loads(line)['to'] for line in chunk['data']['ledger.jsonl'].splitlines()] == ['running', 'admitted', 'paused']
    assert json.loads(head['data']['state.json'])['nodes']['n1']['state'] == 'admitted'
    conflicts = [entry['path'].rsplit('/', 1)[1] for entry in store.requests if entry['method'] == 'PUT' and entry['code'] == 409
                 and 'gpufleet-doc-' not in entry['path']]
    assert sorted(conflicts) == sorted(labelled)


def test_a_write_from_outside_the_run_lock_is_refused_not_overwritten(kube, tmp_path):
    backend, store = kube
    RunLedger.create(backend, 'run1', nodes=NODES)
    stale = RunLedger.open(_ledger.open_backend(dict(backend.spec(), run_dir=str(tmp_path / 'other'))), 'run1')
    RunLedger.open(backend, 'run1').transition('n1', 'admitted', 'the other writer')
    # The stale reader appends at the offset it saw, bypassing the run lock.
    event = {'node': 'n2', 'from': 'pending', 'to': 'admitted', 'reason': 'stale', 'time': 'x'}
    with pytest.raises(LedgerError, match='written outside the run lock'):
        stale.backend.append_event('run1', event, stale.state['ledger_bytes'])
    lines = store.get('configmaps', backend.namespace, backend.chunk_name('run1', 0))['data']['ledger.jsonl'].splitlines()
    assert [json.loads(line)['reason'] for line in lines][1:] == ['the other writer']


def test_an_older_snapshot_never_replaces_a_newer_one(kube):
    backend, store = kube
    ledger = RunLedger.create(backend, 'run1', nodes=NODES)
    old_state = json.loads(json.dumps(ledger.state))
    ledger.transition('n1', 'admitted', 'window')
    ledger.set_status('paused', 'checking')
    backend.write_snapshot('run1', old_state)
    head = store.get('configmaps', backend.namespace, backend.head_name('run1'))
    assert json.loads(head['data']['state.json'])['nodes']['n1']['state'] == 'admitted'


def test_the_writer_lease_serialises_controllers(kube):
    backend, store = kube
    RunLedger.create(backend, 'run1', nodes=NODES)
    name = backend.head_name('run1') + '-writer'
    now = _ledger_kube.micro_time(_ledger.utcnow())
    current = store.get('leases', backend.namespace, name)
    held = json.loads(json.dumps(current))
    held['spec'].update(holderIdentity='awx-job-7/1/abcd', renewTime=now, acquireTime=now)
    store.put('leases', held, old=current)

    def release():
        time.sleep(0.6)
        with store.lock:
            taken = store.get('leases', backend.namespace, name)
            freed = json.loads(json.dumps(taken))
            del freed['spec']['holderIdentity']
            store.put('leases', freed, old=taken)
    releaser = threading.Thread(target=release)
    started = time.time()
    releaser.start()
    RunLedger.open(backend, 'run1').transition('n1', 'admitted', 'after the other controller')
    releaser.join()
    assert time.time() - started >= 0.5
    after = store.get('leases', backend.namespace, name)['spec']
    assert 'holderIdentity' not in after and after['leaseTransitions'] == 1
    # A writer that died holding it: its lease expires after WRITER_SECONDS and is taken over at once.
    current = store.get('leases', backend.namespace, name)
    dead = json.loads(json.dumps(current))
    dead['spec'].update(holderIdentity='dead/1/x', renewTime='2026-01-01T00:00:00.000000Z')
    store.put('leases', dead, old=current)
    started = time.time()
    RunLedger.open(backend, 'run1').transition('n2', 'admitted', 'took over a dead writer')
    assert time.time() - started < 5


def _worker(spec, names, queue):
    try:
        ledger = RunLedger.open(_ledger.open_backend(spec), 'race')
        for state in HAPPY:
            for name in names:
                ledger.transition(name, state, 'worker %d' % os.getpid())
        queue.put(None)
    except Exception as exc:  # pylint: disable=broad-except
        queue.put(repr(exc))


def _admit_once(spec, queue):
    try:
        RunLedger.open(_ledger.open_backend(spec), 'race').transition('contested', 'admitted', 'worker %d' % os.getpid())
        queue.put('won')
    except LedgerError:
        queue.put('refused')


def _run_workers(target, arguments):
    context = multiprocessing.get_context('fork')
    queue = context.Queue()
    workers = [context.Process(target=target, args=args + (queue,)) for args in arguments]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=120) for _worker_ in workers]
    for worker in workers:
        worker.join(60)
    return results


def test_forked_workers_on_two_controllers_serialise_their_appends(kube, tmp_path):
    """Two controllers (their own scratch folders, so their own local locks), two forked workers each: nothing lost."""
    backend, _store = kube
    names = ['n%02d' % index for index in range(8)]
    RunLedger.create(backend, 'race', inventory='inv', nodes={name: {} for name in names})
    specs = [dict(backend.spec(), run_dir=str(tmp_path / ('controller-%d' % (index % 2)))) for index in range(4)]
    assert _run_workers(_worker, [(specs[index], names[index::4]) for index in range(4)]) == [None] * 4
    events, _offset = backend.read_events('race', 0)
    assert len(events) == 1 + len(names) * len(HAPPY)
    for name in names:
        assert [event['to'] for event in events if event['node'] == name] == HAPPY
    state = RunLedger.open(backend, 'race').state
    assert all(record['state'] == 'done' for record in state['nodes'].values())
    # state.json lags mid-run; with the events after its ledger_bytes it is the state.
    snapshot = backend.read_snapshot('race')
    more, offset = backend.read_events('race', snapshot['ledger_bytes'])
    for event in more:
        _ledger.apply_event(snapshot, event)
    snapshot['ledger_bytes'] = offset
    assert snapshot == _ledger.rebuild(backend, 'race') == state


def test_only_one_controller_admits_a_node(kube, tmp_path):
    backend, _store = kube
    RunLedger.create(backend, 'race', inventory='inv', nodes={'contested': {}})
    results = _run_workers(_admit_once, [(dict(backend.spec(), run_dir=str(tmp_path / ('c%d' % index))),) for index in range(4)])
    assert sorted(results) == ['refused', 'refused', 'refused', 'won']
    assert [event['to'] for event in backend.read_events('race', 0)[0]] == ['running', 'admitted']


# ------------------------------------------------------------------------------------------------ the fleet Lease

def test_a_second_rollout_is_refused_naming_the_run_and_when_the_lease_goes_stale(kube):
    backend, store = kube
    first = _ledger.holder_identity('run-a')
    assert backend.acquire('fleet-a', first) is None
    spec = lease(store, backend)['spec']
    assert spec['holderIdentity'] == 'run-a' and spec['leaseDurationSeconds'] == 30 and spec['leaseTransitions'] == 0
    assert spec['renewTime'].endswith('Z') and spec['acquireTime'] == spec['renewTime']
    with pytest.raises(LockHeld) as refused:
        backend.acquire('fleet-a', dict(_ledger.holder_identity('run-b'), host='awx-job-2'))
    message = str(refused.value)
    assert 'held by run run-a' in message and 'host %s' % first['host'] in message
    assert 'Lease %s/%s' % (backend.namespace, backend.fleet_lease('fleet-a')) in message
    assert 'stale and may be taken over once its holder stops renewing it for 30s' in message
    assert refused.value.holder['run_id'] == 'run-a' and refused.value.holder['pid'] == first['pid']
    assert backend.holder('fleet-a')['run_id'] == 'run-a'
    # The holder itself re-acquires (a resume by the same process), and other fleets are independent.
    assert backend.acquire('fleet-a', first) is None
    assert backend.acquire('fleet-b', _ledger.holder_identity('run-b')) is None


def test_a_lease_not_renewed_for_its_duration_is_taken_over(kube):
    backend, store = kube
    backend.acquire('fleet-a', dict(_ledger.holder_identity('run-a'), host='awx-job-1'))
    current = lease(store, backend)
    old = json.loads(json.dumps(current))
    old['spec']['renewTime'] = _ledger_kube.micro_time(_ledger.utcnow() - datetime.timedelta(seconds=31))
    store.put('leases', old, old=current)
    taker = dict(_ledger.holder_identity('run-b'), host='awx-job-2')
    stale = backend.acquire('fleet-a', taker)
    assert stale['run_id'] == 'run-a' and stale['host'] == 'awx-job-1'
    spec = lease(store, backend)['spec']
    assert spec['holderIdentity'] == 'run-b' and spec['leaseTransitions'] == 1
    assert json.loads(lease(store, backend)['metadata']['annotations']['gpufleet.io/holder'])['host'] == 'awx-job-2'
    # The old holder no longer renews it, nor releases it.
    assert backend.renew('fleet-a', dict(taker, run_id='run-a', host='awx-job-1')) is False
    assert backend.release('fleet-a', 'run-a') is False
    assert backend.release('fleet-a', 'run-b') is True
    assert 'holderIdentity' not in lease(store, backend)['spec'] and backend.holder('fleet-a') is None
    assert 'gpufleet.io/holder' not in lease(store, backend)['metadata']['annotations']


def test_a_lease_of_a_dead_process_on_this_host_is_taken_over_at_once(kube):
    backend, _store = kube
    process = subprocess.Popen([sys.executable, '-c', 'pass'])
    process.wait()
    backend.acquire('fleet-a', _ledger.holder_identity('run-a', pid=process.pid))
    assert backend.acquire('fleet-a', _ledger.holder_identity('run-b'))['run_id'] == 'run-a'


def heartbeat(backend, run_id, member):
    return RunLedger(backend, run_id).members()[member]['heartbeat']


def test_keep_loop_renews_the_lease_and_the_heartbeat_until_the_member_leaves(kube):
    backend, store = kube
    ledger = RunLedger.create(backend, 'run-a', inventory='inv', policy={}, nodes={'n1': {'gpus': 8}})
    holder = _ledger.holder_identity('run-a')
    backend.acquire('fleet-a', holder)
    ledger.join('ctl-1', _members.record(holder, 0.0))
    renewed = []

    def sleep(_seconds):
        renewed.append((lease(store, backend)['spec']['renewTime'], heartbeat(backend, 'run-a', 'ctl-1')))
        if len(renewed) == 2:
            ledger.leave('ctl-1')
    assert _ledger.keep_loop(backend.spec(), 'run-a', 'fleet-a', holder, 'ctl-1', interval=1, sleep=sleep) == 'left'
    assert len(renewed) == 2 and renewed[0][0] < renewed[1][0] and 0 < renewed[0][1] <= renewed[1][1]
    gone = subprocess.Popen([sys.executable, '-c', 'pass'])
    gone.wait()
    assert _ledger.keep_loop(backend.spec(), 'run-a', 'fleet-a', dict(holder, pid=gone.pid), 'ctl-1', sleep=sleep) == 'holder gone'


def test_keep_starts_a_process_that_renews_until_the_holder_is_gone(kube):
    backend, store = kube
    backend.lease_seconds = 3
    sleeper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
    try:
        holder = _ledger.holder_identity('run-a', pid=sleeper.pid)
        ledger = RunLedger.create(backend, 'run-a', inventory='inv', policy={}, nodes={'n1': {'gpus': 8}})
        backend.acquire('fleet-a', holder)
        ledger.join('ctl-1', _members.record(holder, 0.0))
        first = lease(store, backend)['spec']['renewTime']
        keeper = _ledger.keep(backend.spec(), 'run-a', 'fleet-a', holder, 'ctl-1')
        deadline = time.time() + 10
        while time.time() < deadline and (lease(store, backend)['spec']['renewTime'] == first or heartbeat(backend, 'run-a', 'ctl-1') == 0.0):
            time.sleep(0.2)
        assert lease(store, backend)['spec']['renewTime'] > first and heartbeat(backend, 'run-a', 'ctl-1') > 0
    finally:
        sleeper.kill()
        sleeper.wait()
    # The holder is gone: the keeper ends (within a second or two) and the lease and the heartbeat are left to go stale.
    deadline = time.time() + 10
    while time.time() < deadline and os.waitpid(keeper, os.WNOHANG) == (0, 0):
        time.sleep(0.2)
    assert time.time() < deadline
    assert lease(store, backend)['spec']['holderIdentity'] == 'run-a'


# ------------------------------------------------------------------------------------------------ configuration

def test_ledger_spec_from_the_variables_naming_the_bad_one(tmp_path):
    assert _ledger.ledger_spec({}, '/runs') == {'backend': 'file', 'run_dir': '/runs'}
    assert _ledger.ledger_spec({'gpufleet_ledger_backend': 'kubernetes', 'gpufleet_kubeconfig': '/k', 'gpufleet_ledger_lease_seconds': '90'},
                               '/scratch') == {'backend': 'kubernetes', 'run_dir': '/scratch', 'namespace': 'default', 'kubeconfig': '/k',
                                               'context': '', 'lease_seconds': 90}
    for variables, name in (({'gpufleet_ledger_backend': 'etcd'}, 'gpufleet_ledger_backend'),
                            ({'gpufleet_ledger_backend': 'kubernetes', 'gpufleet_ledger_lease_seconds': 2}, 'gpufleet_ledger_lease_seconds'),
                            ({'gpufleet_ledger_backend': 'kubernetes', 'gpufleet_ledger_lease_seconds': 'soon'}, 'gpufleet_ledger_lease_seconds'),
                            ({'gpufleet_ledger_backend': 'kubernetes', 'gpufleet_ledger_namespace': ['a']}, 'gpufleet_ledger_namespace')):
        with pytest.raises(LedgerError, match='^%s: ' % name):
            _ledger.ledger_spec(variables, '/runs')
    with pytest.raises(LedgerError, match='^gpufleet_ledger_namespace: '):
        _ledger.open_backend({'backend': 'kubernetes', 'run_dir': str(tmp_path), 'namespace': 'Not_A_Namespace'})
    with pytest.raises(LedgerError, match='^gpufleet_ledger.backend: '):
        _ledger.open_backend({'backend': 'etcd', 'run_dir': str(tmp_path)})


def test_awx_credential_environment_and_no_token_in_spec_or_messages(server, tmp_path, monkeypatch):
    running, _kubeconfig, url = server
    monkeypatch.setenv('K8S_AUTH_HOST', url)
    monkeypatch.setenv('K8S_AUTH_API_KEY', 's3cr3t-token')
    monkeypatch.setenv('K8S_AUTH_VERIFY_SSL', 'false')
    monkeypatch.delenv('K8S_AUTH_KUBECONFIG', raising=False)
    backend = _ledger.open_backend({'backend': 'kubernetes', 'run_dir': str(tmp_path), 'namespace': 'gpufleet'})
    RunLedger.create(backend, 'awx-run', nodes=NODES)
    assert backend.run_ids() == ['awx-run']
    assert 's3cr3t' not in json.dumps(backend.spec())
    missing = _ledger.open_backend({'backend': 'kubernetes', 'run_dir': str(tmp_path), 'namespace': 'absent'})
    with pytest.raises(LedgerError) as failed:
        RunLedger.create(missing, 'x', nodes=NODES)
    assert 'namespaces "absent" not found' in str(failed.value) and 's3cr3t' not in str(failed.value)
    assert all('s3cr3t' not in json.dumps(entry) for entry in running.store.requests)


def test_an_unreachable_api_is_a_ledger_error_naming_it(tmp_path):
    kubeconfig = fake_apiserver.write_kubeconfig(str(tmp_path / 'kubeconfig'), 'http://127.0.0.1:9')
    backend = _ledger.open_backend({'backend': 'kubernetes', 'run_dir': str(tmp_path), 'kubeconfig': kubeconfig})
    with pytest.raises(LedgerError, match='the Kubernetes API cannot be reached'):
        backend.run_ids()


def test_binary_snapshot_round_trip_is_plain_gzip_of_state_json(kube):
    backend, store = kube
    backend.snapshot_bytes = 600
    ledger = RunLedger.create(backend, 'run1', nodes=NODES)
    packed = store.get('configmaps', backend.namespace, backend.head_name('run1'))['binaryData']['state.json.gz']
    assert json.loads(gzip.decompress(base64.b64decode(packed))) == ledger.state


# ------------------------------------------------------------------------------------------------ run documents, head and shards

def test_run_documents_are_configmaps_of_the_run(kube, tmp_path):
    backend, store = kube
    assert backend.read_doc('run1', 'waiting') is None
    with backend.exclusive('run1'):
        backend.write_doc('run1', 'waiting', {'nodes': ['a', 'b']})
    obj = store.get('configmaps', backend.namespace, backend.doc_name('run1', 'waiting'))
    assert obj['metadata']['annotations'] == {'gpufleet.io/run-id': 'run1', 'gpufleet.io/doc': 'waiting'}
    assert obj['metadata']['labels']['gpufleet.io/ledger'] == 'doc' and len(backend.doc_name('run1', 'waiting')) <= 63
    # Another controller reads it, and a write by someone else in between is re-read, not refused.
    other = _ledger.open_backend(dict(backend.spec(), run_dir=str(tmp_path / 'other')))
    assert other.read_doc('run1', 'waiting') == {'nodes': ['a', 'b']}
    backend.write_doc('run1', 'waiting', {'nodes': []})
    other.write_doc('run1', 'waiting', {'nodes': ['c']})
    assert backend.read_doc('run1', 'waiting') == {'nodes': ['c']} and backend.run_ids() == []
    with pytest.raises(LedgerError, match='run document name'):
        backend.write_doc('run1', 'state', {})


def test_a_fresh_controller_reads_the_head_and_the_tail_chunk_only(kube, tmp_path):
    backend, store = kube
    backend.chunk_bytes = 2000
    nodes = {'gpu-%03d' % index: {'domain': 'r%d' % (index % 4), 'gpus': 8} for index in range(150)}
    ledger = RunLedger.create(backend, 'big', inventory='inv', policy={'gpufleet_window': 8}, nodes=nodes)
    for name in sorted(nodes)[:60]:
        ledger.transition(name, 'admitted', 'window')
        ledger.transition(name, 'cordoned', 'x')
    fresh = _ledger.open_backend(dict(backend.spec(), run_dir=str(tmp_path / 'fresh')))
    before = len(store.requests)
    reader = RunLedger.open(fresh, 'big')
    view = reader.gate_view('gpu-140')
    gets = [entry['path'].rsplit('/', 1)[1] for entry in store.requests[before:] if entry['method'] == 'GET']
    chunks = [name for name in gets if name.startswith(backend.head_name('big') + '-0')]
    assert len(chunks) <= 2, gets      # not every chunk from the first
    assert view.total == 150 and len(view.nodes) == 61 and reader.head['counts'] == {'pending': 90, 'cordoned': 60}
    reader.transition('gpu-140', 'admitted', 'window')
    assert RunLedger.open(backend, 'big').state == _ledger.rebuild(backend, 'big')
