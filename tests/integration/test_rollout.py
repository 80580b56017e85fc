# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Window mode of rolling_restart through the rollout gate, one rule per test, asserted from ledger.jsonl and state.json.

One simulated fleet for the module (build/sim-rollout: 6 nodes, real Slurm, no BMC); reboot-only rolling restarts (no pin)
with short timeouts. Each rollout gets its own gpufleet_run_dir under pytest's tmp_path, so the runs do not see each other.

    run A (window 2, canary 1, one node per rack): window, canary, domain limit
    run B (gpu-06 drained by an admin, floor 65 %, window 3): capacity floor
    run C (the fleet lock held by another live run): a second rollout is refused, nothing touched
    run D (window 1): ansible-playbook and its workers killed with SIGKILL while a node is in flight; the re-run resumes
    run K (window 1, 2 nodes, the Kubernetes backend on the fake API): a second rollout refused by the Lease, the controller
          killed and its folder deleted (a fresh AWX execution environment), the run resumed from the cluster
"""

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, SIM, Sampler, admissions, ansible_environment, fleet_up, in_flight_over_time

sys.path.insert(0, os.path.join(SIM, 'slurm'))
sys.path.insert(0, os.path.join(SIM, 'kube'))

import fake_apiserver  # noqa: E402  pylint: disable=wrong-import-position,import-error
import slurm_sim  # noqa: E402  pylint: disable=wrong-import-position,import-error

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger, _report, _rollout  # noqa: E402

FLEET_STATE = os.path.join(ROOT, 'build', 'sim-rollout')
ROLLING_RESTART = os.path.join(ROOT, 'playbooks', 'rolling_restart.yml')
PLAN = os.path.join(ROOT, 'playbooks', 'plan.yml')
CONTROL = os.path.join(ROOT, 'playbooks', 'rollout_control.yml')
SIM_VARS = {'gpufleet_boot_time_command': 'stat -c %Z /proc/1', 'gpufleet_reboot_timeout': 45, 'gpufleet_drain_timeout': 20,
            'node_upgrade_wait_sleep': 1, 'gpufleet_gate_poll': 1,
            'node_validate_kernel_log_command': ['sh', '-c', 'cat /var/lib/gpufleet-sim/xid.log 2>/dev/null; true']}
RACKS = {'gpu-01': 'r1', 'gpu-02': 'r1', 'gpu-03': 'r2', 'gpu-04': 'r2', 'gpu-05': 'r3', 'gpu-06': 'r3'}
FINAL = ('done', 'rolled_back', 'quarantined', 'deferred', 'left_alone')


@pytest.fixture(scope='module')
def fleet():
    yield from fleet_up(FLEET_STATE, 6, 'slurm')


def rack_inventory(fleet, folder):
    """The fleet's inventory with a rack per node (two per rack)."""
    document = json.loads(json.dumps(fleet.inventory_data))
    for node, host in document['all']['children']['gpu']['hosts'].items():
        host['rack'] = RACKS[node]
    path = os.path.join(folder, 'inventory.json')
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump(document, handle)
    return path


def rollout(fleet, run_dir, inventory=None, **variables):
    values = dict(SIM_VARS, gpufleet_run_dir=run_dir)
    values.update(variables)
    return run(fleet, ROLLING_RESTART, inventory, values)


def run(fleet, playbook, inventory, values, report=None):
    """ansible-playbook with the JSON stdout callback; ``report``: a folder for the fleet_report callback's files too."""
    environment = ansible_environment()
    if report:
        environment.update({'ANSIBLE_CALLBACKS_ENABLED': 'gpufleet.lifecycle.fleet_report', 'GPUFLEET_REPORT_DIR': report})
    process = subprocess.run(['ansible-playbook', '-i', inventory or fleet.inventory, playbook, '-e', json.dumps(values)],
                             env=environment, cwd=ROOT, capture_output=True, text=True, check=False, timeout=600)
    return process


def only_run(run_dir):
    runs = [name for name in os.listdir(run_dir) if name != 'locks']
    assert len(runs) == 1, runs
    return runs[0]


def ledger(run_dir, run_id=None):
    """(events, state) of the run."""
    run_id = run_id or only_run(run_dir)
    with open(os.path.join(run_dir, run_id, 'ledger.jsonl'), encoding='utf-8') as handle:
        events = [json.loads(line) for line in handle]
    # The reader's rule: state.json (written at run events) and the snapshots, plus the events after them.
    state = _ledger.RunLedger.open(_ledger.FileBackend(run_dir), run_id).state
    return events, state


def failures(process):
    return '\nrc=%s\n%s\n%s' % (process.returncode, process.stdout[-6000:], process.stderr[-3000:])


def slurm_state(fleet, node):
    return slurm_sim.node_state(fleet.vars['gpufleet_slurm_environment'], node)


@pytest.fixture(scope='module')
def run_a(fleet, tmp_path_factory):
    """Window 2 after one canary, one node per rack out at a time, every node."""
    folder = str(tmp_path_factory.mktemp('run-a'))
    run_dir = os.path.join(folder, 'runs')
    process = rollout(fleet, run_dir, rack_inventory(fleet, folder), gpufleet_window=2, gpufleet_canary=1,
                      gpufleet_domain_var='rack', gpufleet_domain_max=1, gpufleet_max_fail_percentage=50)
    assert process.returncode == 0, failures(process)
    return ledger(run_dir)


def test_every_node_done_and_the_run_finished(run_a):
    events, state = run_a
    assert state['status'] == 'finished', state['status']
    assert {name: record['state'] for name, record in state['nodes'].items()} == {node: 'done' for node in RACKS}
    assert state['policy']['gpufleet_window'] == 2 and state['policy']['gpufleet_domain_var'] == 'rack'
    assert events[0]['to'] == 'running' and events[-1]['to'] == 'finished'
    assert all(set(event) >= {'time', 'node', 'from', 'to', 'reason'} for event in events)


def test_the_window_is_never_exceeded_and_used(run_a):
    events, _state = run_a
    sizes = [len(flying) for _event, flying in in_flight_over_time(events)]
    assert max(sizes) == 2, sizes      # never more than the window, and the window was used (not serialised)


def test_the_canary_goes_alone_and_gates_the_window(run_a):
    events, state = run_a
    admitted = admissions(events)
    canary = admitted[0]['node']
    assert state['nodes'][canary]['canary'] is True
    assert [event['node'] for event in admitted if state['nodes'][event['node']]['canary']] == [canary]
    canary_done = [index for index, event in enumerate(events) if event['node'] == canary and event['to'] == 'done'][0]
    second = events.index(admitted[1])
    assert canary_done < second, 'the window opened before the canary passed'


def test_the_domain_limit_holds(run_a):
    events, state = run_a
    for event, flying in in_flight_over_time(events):
        racks = [state['nodes'][node]['domain'] for node in flying]
        assert len(racks) == len(set(racks)), (event, flying, racks)
    # The plan interleaves the racks: the first three admitted are in three racks.
    assert len({RACKS[event['node']] for event in admissions(events)[:3]}) == 3


def test_the_capacity_floor_counts_a_node_drained_by_an_admin(fleet, tmp_path):
    """48 GPUs, gpu-06 drained by an admin (8 out): a floor of 65 % leaves room for one more node out, not the window of 3."""
    environment = fleet.vars['gpufleet_slurm_environment']
    slurm_sim.scontrol(environment, 'update', 'NodeName=gpu-06', 'State=DRAIN', 'Reason=admin: fan replacement')
    run_dir = str(tmp_path / 'runs')
    try:
        process = rollout(fleet, run_dir, gpufleet_hosts='gpu-01,gpu-02,gpu-03,gpu-06', gpufleet_window=3, gpufleet_canary=0,
                          gpufleet_capacity_floor='65%')
        assert process.returncode == 0, failures(process)
        events, state = ledger(run_dir)
        assert slurm_state(fleet, 'gpu-06')['Reason'].startswith('admin: fan replacement')
    finally:
        slurm_sim.scontrol(environment, 'update', 'NodeName=gpu-06', 'State=RESUME')
    assert state['nodes']['gpu-06']['state'] == 'left_alone', state['nodes']['gpu-06']
    # Left alone at the gate: no slot taken, no phase written, the actor named.
    assert [(event['from'], event['to']) for event in events if event['node'] == 'gpu-06'] == [('pending', 'left_alone')], events
    assert state['nodes']['gpu-06']['held_by'].startswith('Slurm DRAIN (reason: admin: fan replacement'), state['nodes']['gpu-06']
    assert all(state['nodes'][node]['state'] == 'done' for node in ('gpu-01', 'gpu-02', 'gpu-03')), state['nodes']
    sizes = [len(flying) for _event, flying in in_flight_over_time(events)]
    assert max(sizes) == 1, sizes
    # 8 GPUs of gpu-06 plus one node in flight: never more than 16 of 48 out (65 % of 48 = 31.2 must stay).
    for _event, flying in in_flight_over_time(events):
        assert 'gpu-06' not in flying and 8 + 8 * len(flying) <= 48 - 31.2


def test_a_second_rollout_is_refused_naming_the_run(fleet, tmp_path):
    run_dir = str(tmp_path / 'runs')
    backend = _ledger.FileBackend(run_dir)
    fleet_lock = _rollout.fleet_name(_rollout.inventory_id([fleet.inventory]))
    backend.acquire(fleet_lock, _ledger.holder_identity('the-other-run'))     # this test process: alive
    process = rollout(fleet, run_dir, gpufleet_window=2)
    assert process.returncode != 0
    assert 'held by run the-other-run' in process.stdout, failures(process)
    assert [name for name in os.listdir(run_dir) if name != 'locks'] == []     # no ledger, no node admitted
    assert backend.holder(fleet_lock)['run_id'] == 'the-other-run'
    assert all('DRAIN' not in slurm_state(fleet, node)['State'] for node in fleet.nodes)


def test_a_bad_policy_value_fails_before_anything_naming_the_variable(fleet, tmp_path):
    run_dir = str(tmp_path / 'runs')
    process = rollout(fleet, run_dir, gpufleet_window=2, gpufleet_capacity_floor='120%')
    assert process.returncode != 0
    assert 'gpufleet_capacity_floor: must be a share' in process.stdout, failures(process)
    assert not os.path.exists(run_dir) or [name for name in os.listdir(run_dir) if name != 'locks'] == []


def test_resume_after_the_controller_is_killed(fleet, tmp_path):
    run_dir = str(tmp_path / 'runs')
    nodes = 'gpu-04,gpu-05,gpu-06'
    values = dict(SIM_VARS, gpufleet_run_dir=run_dir, gpufleet_hosts=nodes, gpufleet_window=1, gpufleet_canary=0)
    process = subprocess.Popen(['ansible-playbook', '-i', fleet.inventory, ROLLING_RESTART, '-e', json.dumps(values)],
                               env=ansible_environment(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        deadline = time.time() + 120
        caught = None
        while time.time() < deadline and caught is None:
            time.sleep(0.5)
            try:
                events, _state = ledger(run_dir)
            except (AssertionError, OSError, ValueError):
                continue
            # Kill while the first node is in flight and cordoned by the role (the drain has begun).
            if admissions(events):
                node = admissions(events)[0]['node']
                if 'DRAIN' in slurm_state(fleet, node)['State']:
                    caught = node
        assert caught, 'no node went in flight'
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    events, state = ledger(run_dir)
    run_id = state['run_id']
    assert state['status'] == 'running' and state['nodes'][caught]['state'] not in FINAL, state['nodes'][caught]
    time.sleep(2)      # orphaned workers notice their parent is gone
    events_after_kill = len(ledger(run_dir)[0])

    again = subprocess.run(['ansible-playbook', '-i', fleet.inventory, ROLLING_RESTART, '-e', json.dumps(values)],
                           env=ansible_environment(), cwd=ROOT, capture_output=True, text=True, check=False, timeout=600)
    assert again.returncode == 0, failures(again)
    assert only_run(run_dir) == run_id        # the last unfinished run of this inventory, resumed, not a new one
    events, state = ledger(run_dir)
    assert len(events) > events_after_kill
    assert state['status'] == 'finished'
    assert {node: state['nodes'][node]['state'] for node in nodes.split(',')} == {node: 'done' for node in nodes.split(',')}
    resumed = [event for event in events[events_after_kill:] if event['node'] == caught and event['to'] == 'admitted']
    assert resumed and resumed[0]['from'] != 'pending' and 'caught' in resumed[0]['reason'], resumed
    # Every node's final event is written once (one writer: the node's procedure), with what the gate needs in it.
    finals = [event for event in events if event['node'] and event['to'] in FINAL and event['from'] not in FINAL]
    assert sorted(event['node'] for event in finals) == sorted(nodes.split(',')), finals
    assert all(event['details']['gpu_count'] == 8 and 'phase_times' in event['details'] for event in finals), finals
    # The node caught mid-way was validated before it was put back in service.
    assert 'DRAIN' not in slurm_state(fleet, caught)['State']
    with open(os.path.join(run_dir, run_id, 'results', caught + '.json'), encoding='utf-8') as handle:
        result = json.load(handle)
    assert result['state'] == 'done' and all(check['passed'] for check in result['validation'])


def test_the_kubernetes_backend_survives_a_fresh_controller(fleet, tmp_path):
    """The ledger in ConfigMaps and the fleet lock a Lease: refused while held, renewed while the run lives, resumed from the
    cluster by a controller that has nothing of the run (its execution environment's folder deleted)."""
    server, _thread, url = fake_apiserver.start({'namespaces': [{'metadata': {'name': 'gpufleet'}}]})
    try:
        kubeconfig = fake_apiserver.write_kubeconfig(str(tmp_path / 'kubeconfig'), url)
        kube = dict(gpufleet_ledger_backend='kubernetes', gpufleet_ledger_namespace='gpufleet', gpufleet_kubeconfig=kubeconfig,
                    gpufleet_ledger_lease_seconds=6)
        values = dict(SIM_VARS, gpufleet_hosts='gpu-01,gpu-02', gpufleet_window=1, gpufleet_canary=0, **kube)
        first_ee = str(tmp_path / 'ee-1')
        backend = _ledger.open_backend(dict(backend='kubernetes', run_dir=str(tmp_path / 'reader'), namespace='gpufleet', kubeconfig=kubeconfig))
        fleet_lock = _rollout.fleet_name(_rollout.inventory_id([fleet.inventory]))
        process = subprocess.Popen(['ansible-playbook', '-i', fleet.inventory, ROLLING_RESTART, '-e',
                                    json.dumps(dict(values, gpufleet_run_dir=os.path.join(first_ee, 'runs')))],
                                   env=ansible_environment(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        try:
            deadline = time.time() + 120
            caught = run_id = None
            while time.time() < deadline and caught is None:
                time.sleep(0.5)
                run_ids = backend.run_ids()
                if not run_ids:
                    continue
                run_id = run_ids[0]
                events = admissions(backend.read_events(run_id, 0)[0])
                if events and 'DRAIN' in slurm_state(fleet, events[0]['node'])['State']:
                    caught = events[0]['node']
            assert caught, 'no node went in flight'
            second = rollout(fleet, str(tmp_path / 'ee-2' / 'runs'), gpufleet_hosts='gpu-01,gpu-02', gpufleet_window=1,
                             gpufleet_run_id='intruder', **kube)
            assert second.returncode != 0 and 'a second rollout is refused: fleet %s is held by run %s' % (fleet_lock, run_id) in second.stdout, \
                failures(second)
            assert 'Lease gpufleet/%s renewed' % backend.fleet_lease(fleet_lock) in second.stdout
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        time.sleep(2)      # orphaned workers notice their parent is gone
        shutil.rmtree(first_ee)       # a fresh execution environment: nothing of the run on the controller
        assert backend.run_ids() == [run_id]        # the intruder wrote no ledger
        state = _ledger.RunLedger.open(backend, run_id).state
        assert state['status'] == 'running' and state['nodes'][caught]['state'] not in FINAL, state['nodes'][caught]
        renewals = {new['spec'].get('renewTime') for _revision, _kind, storage, _old, new in server.store.history
                    if storage == 'leases' and new['metadata']['name'] == backend.fleet_lease(fleet_lock)
                    and new['spec'].get('holderIdentity') == run_id}
        assert len(renewals) >= 3, renewals       # acquired, then renewed every 2 s while ansible-playbook lived

        # The resume with the fleet_report callback: it reads the ledger from the cluster (the gate's specification).
        again = run(fleet, ROLLING_RESTART, None, dict(values, gpufleet_run_dir=str(tmp_path / 'ee-3' / 'runs')), report=str(tmp_path / 'report'))
        assert again.returncode == 0, failures(again)
        assert 'took over the fleet lock of run %s' % run_id in again.stdout
        events = backend.read_events(run_id, 0)[0]
        state = _ledger.RunLedger.open(backend, run_id).state
        assert backend.run_ids() == [run_id] and state['status'] == 'finished'
        assert {node: state['nodes'][node]['state'] for node in ('gpu-01', 'gpu-02')} == {'gpu-01': 'done', 'gpu-02': 'done'}
        resumed = [event for event in events if event['node'] == caught and event['to'] == 'admitted' and event['from'] != 'pending']
        assert resumed and 'caught' in resumed[0]['reason'], resumed
        assert 'DRAIN' not in slurm_state(fleet, caught)['State']
        assert backend.holder(fleet_lock) is None       # released by the run's finish
        assert not os.path.exists(os.path.join(str(tmp_path / 'ee-3' / 'runs'), run_id, 'ledger.jsonl'))
        report = report_agrees_with_ledger(tmp_path / 'report', events, state)
        assert report['run']['ledger'] == 'ConfigMaps gpufleet/%s-NNNNN key ledger.jsonl' % backend.head_name(run_id)
        assert sorted(node['slot'] for node in report['nodes']) == [1, 1]      # window 1
    finally:
        fake_apiserver.stop(server)


def test_plan_and_operator_verbs(fleet, tmp_path):
    """plan.yml changes nothing; pause stops admissions (the rollout ends paused), skip and resume let it finish."""
    run_dir = str(tmp_path / 'runs')
    plan_file = str(tmp_path / 'plan.json')
    planned = run(fleet, PLAN, None, dict(SIM_VARS, gpufleet_run_dir=run_dir, gpufleet_window=2, gpufleet_canary=1, gpufleet_plan_file=plan_file,
                                          gpufleet_max_fail_percentage=50))
    assert planned.returncode == 0, failures(planned)
    with open(plan_file, encoding='utf-8') as handle:
        plan = json.load(handle)
    assert [entry['node'] for entry in plan['order']] == fleet.nodes and plan['order'][0]['canary'] and plan['window'] == 2
    assert not os.path.exists(run_dir)

    # A run of two nodes, paused by the operator before its nodes go: nothing is admitted, the run ends failed "paused".
    backend = _ledger.FileBackend(run_dir)
    inventory = _rollout.inventory_id([fleet.inventory])
    _ledger.RunLedger.create(backend, 'operator-run', inventory=inventory, policy={'gpufleet_window': 1, 'gpufleet_canary': 0},
                             nodes={'gpu-01': {'gpus': 8}, 'gpu-02': {'gpus': 8}})
    control = dict(gpufleet_run_dir=run_dir)
    paused = run(fleet, CONTROL, None, dict(control, gpufleet_verb='pause', gpufleet_reason='waiting for the vendor'))
    assert paused.returncode == 0, failures(paused)
    stopped = rollout(fleet, run_dir, gpufleet_hosts='gpu-01,gpu-02', gpufleet_window=1, gpufleet_canary=0)
    assert stopped.returncode != 0 and 'rollout paused' in stopped.stdout and 'waiting for the vendor' in stopped.stdout, failures(stopped)
    events, state = ledger(run_dir)
    assert state['run_id'] == 'operator-run' and admissions(events) == [] and state['status'] == 'paused'

    skipped = run(fleet, CONTROL, None, dict(control, gpufleet_verb='skip', gpufleet_nodes='gpu-02'))
    resumed = run(fleet, CONTROL, None, dict(control, gpufleet_verb='resume'))
    assert skipped.returncode == 0 and resumed.returncode == 0, failures(skipped) + failures(resumed)
    finished = rollout(fleet, run_dir, gpufleet_hosts='gpu-01,gpu-02', gpufleet_window=1, gpufleet_canary=0)
    assert finished.returncode == 0, failures(finished)
    events, state = ledger(run_dir)
    assert {node: record['state'] for node, record in state['nodes'].items()} == {'gpu-01': 'done', 'gpu-02': 'left_alone'}
    assert state['status'] == 'finished' and [event['node'] for event in admissions(events)] == ['gpu-01']


def quarantine_cleanup(fleet, nodes):
    environment = fleet.vars['gpufleet_slurm_environment']
    for node in nodes:
        fleet.fleet('fault', node, 'clear')
        if 'DRAIN' in slurm_state(fleet, node)['State']:
            slurm_sim.scontrol(environment, 'update', 'NodeName=' + node, 'State=RESUME')


def test_the_failure_budget_pauses_and_in_flight_nodes_finish(fleet, tmp_path):
    """With gpufleet_budget_window off (a second node may fly while the budget of 0 can absorb nothing): gpu-01 fails its
    validation while a second node is in flight, held by a job until the test sees gpu-01 final: the third
    is never admitted, the second finishes done, the run ends failed with a paused summary naming the budget."""
    environment = fleet.vars['gpufleet_slurm_environment']
    run_dir = str(tmp_path / 'runs')
    fleet.fleet('fault', 'gpu-01', 'diag_fail')
    # Jobs order gpu-02 and gpu-03 after the idle gpu-01; the job of the one admitted holds it in its drain.
    jobs = {node: slurm_sim.submit_job(environment, node, 300) for node in ('gpu-02', 'gpu-03')}
    values = dict(SIM_VARS, gpufleet_run_dir=run_dir, gpufleet_hosts='gpu-01,gpu-02,gpu-03', gpufleet_window=2, gpufleet_canary=0,
                  gpufleet_max_fail_percentage=0, gpufleet_drain_timeout=240,
                  gpufleet_budget_window=False)   # the budget as it was before gpufleet_budget_window: checked at admission only
    try:
        for node in jobs:
            slurm_sim.wait_for(environment, node, lambda state: 'ALLOCATED' in state or 'MIXED' in state, timeout=30)
        process = subprocess.Popen(['ansible-playbook', '-i', fleet.inventory, ROLLING_RESTART, '-e', json.dumps(values)],
                                   env=ansible_environment(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 240
        while time.time() < deadline:
            time.sleep(1)
            try:
                if ledger(run_dir)[1]['nodes']['gpu-01']['state'] in FINAL:
                    break
            except (AssertionError, OSError, ValueError):
                continue
        # Both jobs declare the same end: the plan orders gpu-02 and gpu-03 either way; the one admitted second is held.
        held = admissions(ledger(run_dir)[0])[1]['node']
        subprocess.run(['scancel', jobs[held]], env=dict(os.environ, **environment), check=False, capture_output=True)
        stdout, _stderr = process.communicate(timeout=300)
        events, state = ledger(run_dir)
    finally:
        for job in jobs.values():
            subprocess.run(['scancel', job], env=dict(os.environ, **environment), check=False, capture_output=True)
        quarantine_cleanup(fleet, ['gpu-01'])
    assert process.returncode != 0
    assert 'rollout paused' in stdout and 'failure budget exceeded' in stdout, stdout[-4000:]
    assert state['status'] == 'paused' and state['pause']['rule'] == 'budget', state['pause']
    waiting = ({'gpu-02', 'gpu-03'} - {held}).pop()
    nodes = {node: record['state'] for node, record in state['nodes'].items()}
    assert nodes == {'gpu-01': 'quarantined', held: 'done', waiting: 'pending'}, nodes
    paused_at = [index for index, event in enumerate(events) if event['node'] is None and event['to'] == 'paused'][0]
    held_done = [index for index, event in enumerate(events) if event['node'] == held and event['to'] == 'done'][0]
    assert paused_at < held_done, '%s was not in flight when the rollout paused' % held
    assert [event['node'] for event in admissions(events)] == ['gpu-01', held]


def test_the_pin_fault_detector_pauses_on_a_failing_canary(fleet, tmp_path):
    run_dir = str(tmp_path / 'runs')
    fleet.fleet('fault', 'gpu-04', 'diag_fail')
    try:
        process = rollout(fleet, run_dir, gpufleet_hosts='gpu-04,gpu-05,gpu-06', gpufleet_window=2, gpufleet_canary=1,
                          gpufleet_max_fail_percentage=None)
        events, state = ledger(run_dir)
        assert process.returncode != 0 and 'roll back the pin' in process.stdout, failures(process)
        assert state['status'] == 'paused' and state['pause']['rule'] == 'pin_suspect', state['pause']
        assert 'dcgm_diag_r1' in state['pause']['reason']
        assert [event['node'] for event in admissions(events)] == ['gpu-04']
        assert state['nodes']['gpu-05']['state'] == state['nodes']['gpu-06']['state'] == 'pending'
        assert state['nodes']['gpu-04']['state'] == 'quarantined' and 'DRAIN' in slurm_state(fleet, 'gpu-04')['State']

        # Release re-validates first: still failing, the node stays quarantined and cordoned; fixed, it is done and in service.
        release = dict(SIM_VARS, gpufleet_run_dir=run_dir, gpufleet_verb='release', gpufleet_nodes='gpu-04')
        refused = run(fleet, CONTROL, None, release)
        assert refused.returncode == 0, failures(refused)
        assert ledger(run_dir)[1]['nodes']['gpu-04']['state'] == 'quarantined'
        assert 'DRAIN' in slurm_state(fleet, 'gpu-04')['State']
        fleet.fleet('fault', 'gpu-04', 'clear')
        released = run(fleet, CONTROL, None, release)
        assert released.returncode == 0, failures(released)
        events, state = ledger(run_dir)
        assert state['nodes']['gpu-04']['state'] == 'done', state['nodes']['gpu-04']
        moves = [(event['from'], event['to']) for event in events if event['node'] == 'gpu-04'][-4:]
        assert moves == [('quarantined', 'validating'), ('validating', 'quarantined'), ('quarantined', 'validating'), ('validating', 'done')]
        assert 'DRAIN' not in slurm_state(fleet, 'gpu-04')['State']
    finally:
        quarantine_cleanup(fleet, ['gpu-04'])


def test_nothing_is_admitted_outside_the_maintenance_window(fleet, tmp_path):
    run_dir = str(tmp_path / 'runs')
    later = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=3)).strftime('%a').lower()
    process = rollout(fleet, run_dir, gpufleet_hosts='gpu-01,gpu-02', gpufleet_window=2, gpufleet_canary=0, gpufleet_admit_timeout=3,
                      gpufleet_maintenance_window={'days': [later], 'start': '00:00', 'end': '01:00', 'timezone': 'UTC'})
    assert process.returncode == 0, failures(process)
    events, state = ledger(run_dir)
    assert admissions(events) == [] and state['status'] == 'running'
    assert {record['state'] for record in state['nodes'].values()} == {'pending'}
    assert 'outside the maintenance window' in process.stdout


def finished_run(run_dir, run_id, nodes, final, inventory, finish=True, pin=None, details=None, **record):
    """A run's ledger written through _ledger as the gate and node_upgrade write it: ``nodes`` walked to their ``final`` state
    (pending when not in it; ``details``: node -> what its final event carries), the run finished when every node is final
    and ``finish``, else running; ``pin``: the run's recorded pin."""
    backend = _ledger.FileBackend(run_dir)
    ledger_ = _ledger.RunLedger.create(backend, run_id, inventory=inventory, policy={'gpufleet_window': 1, 'gpufleet_canary': 0},
                                       nodes={node: {'gpus': 8} for node in nodes}, pin=pin, **record)
    for node, state in final.items():
        ledger_.transition(node, 'admitted', 'admitted: 1 of 1 in flight')
        for step in _rollout.walk('admitted', state):
            ledger_.transition(node, step, 'recorded by the test as node_upgrade records it',
                               details=(details or {}).get(node) if step == state else None)
    if finish and set(final) == set(nodes):
        ledger_.set_status('finished', 'every node is final')
    return ledger_


def test_the_escalation_hook_may_be_a_url(fleet, tmp_path):
    """gpufleet_escalation as an http URL: the pause is POSTed to it as JSON. Two quarantines of an earlier run in this run
    folder trip the circuit breaker at the first admission, so the run pauses before any node is touched."""
    import http.server  # pylint: disable=import-outside-toplevel
    import threading  # pylint: disable=import-outside-toplevel

    heard = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # pylint: disable=invalid-name
            body = self.rfile.read(int(self.headers['Content-Length']))
            heard.append((self.path, self.headers['Content-Type'], json.loads(body)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):  # pylint: disable=arguments-differ
            pass

    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        run_dir = str(tmp_path / 'runs')
        finished_run(run_dir, 'earlier-run', ['gpu-06', 'gpu-07'], {'gpu-06': 'quarantined', 'gpu-07': 'quarantined'}, 'another-inventory')
        url = 'http://127.0.0.1:%d/gpufleet/hook' % server.server_address[1]
        paused = rollout(fleet, run_dir, gpufleet_hosts='gpu-05', gpufleet_window=1, gpufleet_canary=0, gpufleet_max_fail_percentage=None,
                         gpufleet_pin_fault_threshold=None, gpufleet_circuit_breaker_threshold=2, gpufleet_escalation=url)
    finally:
        server.shutdown()
        thread.join()
    assert paused.returncode != 0 and 'circuit breaker open' in paused.stdout, failures(paused)
    run_id = [name for name in os.listdir(run_dir) if name not in ('locks', 'earlier-run')][0]
    events, state = ledger(run_dir, run_id)
    assert state['status'] == 'paused' and state['nodes']['gpu-05']['state'] == 'pending' and not admissions(events)
    assert [(path, kind, call['event'], call.get('rule'), call.get('run_id')) for path, kind, call in heard] == \
        [('/gpufleet/hook', 'application/json', 'gpufleet.rollout.paused', 'circuit_breaker', run_id)], heard
    assert 'DRAIN' not in slurm_state(fleet, 'gpu-05')['State']


def test_resume_confirms_done_nodes_and_sends_a_failing_one_back(fleet, tmp_path):
    """The controller died after both nodes were done, before the run finished. The resumed run re-checks its done nodes
    (versions, GPUs, Fabric Manager) before it skips them: gpu-01 passes and is confirmed, never admitted again; gpu-02, whose
    Fabric Manager stopped since, is not counted as done: it goes back through the procedure (the reboot brings Fabric Manager
    back, the full validation passes) and ends done again."""
    run_dir = str(tmp_path / 'runs')
    inventory = _rollout.inventory_id([fleet.inventory])
    # The GPUs gpu-01 showed when it passed: in its final event.
    finished_run(run_dir, 'resumed-run', ['gpu-01', 'gpu-02'], {'gpu-01': 'done', 'gpu-02': 'done'}, inventory, finish=False,
                 details={'gpu-01': {'gpu_count': 8}})
    results = os.path.join(run_dir, 'resumed-run', 'results')
    events_before = len(ledger(run_dir)[0])
    stopped = fleet.node_exec('gpu-02', 'systemctl', 'stop', 'nvidia-fabricmanager')
    assert stopped.returncode == 0, stopped.stderr
    process = rollout(fleet, run_dir, gpufleet_hosts='gpu-01,gpu-02', gpufleet_window=1, gpufleet_canary=0)
    assert process.returncode == 0, failures(process)
    events, state = ledger(run_dir)
    assert state['status'] == 'finished'
    assert {node: record['state'] for node, record in state['nodes'].items()} == {'gpu-01': 'done', 'gpu-02': 'done'}
    new = events[events_before:]
    first = [event for event in new if event['node'] == 'gpu-01']
    assert [(event['from'], event['to']) for event in first] == [('done', 'done')], first
    assert first[0]['reason'].startswith('confirmed on resume') and 'gpu_count' in first[0]['reason'] and 'fabric_manager' in first[0]['reason']
    second = [event for event in new if event['node'] == 'gpu-02']
    assert (second[0]['from'], second[0]['to']) == ('done', 'pending'), second
    assert 'fabric_manager' in second[0]['reason'] and 'back through the procedure' in second[0]['reason']
    assert [event['to'] for event in second][1:3] == ['admitted', 'cordoned'] and second[-1]['to'] == 'done'
    with open(os.path.join(results, 'gpu-02.json'), encoding='utf-8') as handle:
        result = json.load(handle)
    assert {check['name']: check['passed'] for check in result['validation']}['fabric_manager'] is True
    assert [event['node'] for event in admissions(new)].count('gpu-01') == 0


PIN_OTHER = {'driver': '580.65.06', 'fabric_manager': '580.65.06'}


def test_a_resume_with_a_changed_pin_is_refused_and_nothing_is_touched(fleet, tmp_path):
    """A run recorded its pin at the start; the pin file changed since. The resume is refused on localhost before any node
    (no event written, no node drained), naming both pins and how to start a new run."""
    run_dir = str(tmp_path / 'runs')
    inventory = _rollout.inventory_id([fleet.inventory])
    finished_run(run_dir, 'pinned-run', ['gpu-01', 'gpu-02'], {'gpu-01': 'done'}, inventory, finish=False, pin=PIN_OTHER)
    events_before = ledger(run_dir)[0]
    pin_file = tmp_path / 'baseline.yml'
    pin_file.write_text('driver: 580.82.07\nfabric_manager: 580.82.07\n')
    process = rollout(fleet, run_dir, gpufleet_hosts='gpu-01,gpu-02', gpufleet_window=1, gpufleet_canary=0, gpufleet_pin_file=str(pin_file))
    assert process.returncode != 0
    assert 'gpufleet_pin_file: pins driver 580.82.07' in process.stdout and 'run pinned-run recorded driver 580.65.06' in process.stdout, \
        failures(process)
    assert 'gpufleet_run_id=<a new id>' in process.stdout
    assert ledger(run_dir)[0] == events_before                     # nothing written
    assert 'DRAIN' not in slurm_state(fleet, 'gpu-02')['State']      # nothing touched


def test_an_unfinished_run_is_resumed_only_by_its_own_playbook_and_a_paused_one_starts_no_batch(fleet, tmp_path):
    """A converge run left unfinished is not resumed by rolling_restart (nothing written, no node touched); a batch-mode run
    an operator paused starts no batch when it is run again: the start checks the run-level rules before any node."""
    run_dir = str(tmp_path / 'runs')
    inventory = _rollout.inventory_id([fleet.inventory])
    finished_run(run_dir, 'converge-run', ['gpu-01', 'gpu-02'], {'gpu-01': 'done'}, inventory, finish=False, pin=PIN_OTHER,
                 kind='converge', mode='window')
    before = ledger(run_dir)[0]
    other = rollout(fleet, run_dir, gpufleet_hosts='gpu-01,gpu-02', gpufleet_window=1, gpufleet_canary=0)
    assert other.returncode != 0 and 'run converge-run is a converge run, this is rolling_restart' in other.stdout, failures(other)
    assert ledger(run_dir)[0] == before

    paused_dir = str(tmp_path / 'paused')
    paused = finished_run(paused_dir, 'batch-run', ['gpu-02'], {}, inventory, finish=False, kind='rolling_restart', mode='batch')
    paused.set_status('paused', 'vendor advisory', details={'rule': 'operator', 'by': 'operator'})
    again = rollout(fleet, paused_dir, gpufleet_hosts='gpu-02')
    assert again.returncode != 0 and 'rollout paused (operator): paused by an operator: vendor advisory; no batch starts' in again.stdout, \
        failures(again)
    assert [event['to'] for event in ledger(paused_dir)[0] if event['node'] == 'gpu-02'] == []
    assert 'DRAIN' not in slurm_state(fleet, 'gpu-02')['State']


def test_a_node_released_while_off_the_runs_pin_is_not_done(fleet, tmp_path):
    """A node quarantined in a run on another pin, healthy now: the release validates it against the run's recorded pin (not
    the operator's variables), refuses it with the reason and leaves it quarantined and drained; never done on its health alone."""
    run_dir = str(tmp_path / 'runs')
    inventory = _rollout.inventory_id([fleet.inventory])
    finished_run(run_dir, 'release-run', ['gpu-03'], {'gpu-03': 'quarantined'}, inventory, finish=False,
                 pin=dict(PIN_OTHER, driver='580.0.1'))
    environment = fleet.vars['gpufleet_slurm_environment']
    slurm_sim.scontrol(environment, 'update', 'NodeName=gpu-03', 'State=DRAIN', 'Reason=gpufleet quarantine test')
    try:
        release = dict(SIM_VARS, gpufleet_run_dir=run_dir, gpufleet_run_id='release-run', gpufleet_verb='release', gpufleet_nodes='gpu-03',
                       gpufleet_scheduler='slurm', gpufleet_slurm_environment=environment, node_validate_diag_levels=[])
        process = run(fleet, CONTROL, None, release)
        assert process.returncode == 0, failures(process)
        events, state = ledger(run_dir)
        assert state['nodes']['gpu-03']['state'] == 'quarantined', state['nodes']['gpu-03']
        reason = state['nodes']['gpu-03']['reason']
        assert reason.startswith("release refused: healthy but not on the run's pin") and 'expected 580.0.1' in reason, reason
        assert [(event['from'], event['to']) for event in events if event['node'] == 'gpu-03'][-2:] == [('quarantined', 'validating'),
                                                                                                        ('validating', 'quarantined')]
        assert 'DRAIN' in slurm_state(fleet, 'gpu-03')['State']
    finally:
        quarantine_cleanup(fleet, ['gpu-03'])


def test_a_deferred_node_is_retried_up_to_gpufleet_retries(fleet, tmp_path):
    """gpu-05 runs a job longer than the drain timeout: each attempt is put back as it was (deferred); with gpufleet_retries 1
    it goes through the gate once more, the retry recorded with its reason, then deferred stands (the job is never killed)."""
    environment = fleet.vars['gpufleet_slurm_environment']
    run_dir = str(tmp_path / 'runs')
    job = slurm_sim.submit_job(environment, 'gpu-05', 300)
    try:
        slurm_sim.wait_for(environment, 'gpu-05', lambda state: 'ALLOCATED' in state or 'MIXED' in state, timeout=30)
        process = rollout(fleet, run_dir, gpufleet_hosts='gpu-05', gpufleet_window=1, gpufleet_canary=0, gpufleet_retries=1,
                          gpufleet_drain_timeout=2)
        assert process.returncode == 0, failures(process)
        events, state = ledger(run_dir)
        assert 'DRAIN' not in slurm_state(fleet, 'gpu-05')['State']
        assert 'ALLOCATED' in slurm_state(fleet, 'gpu-05')['State'] or 'MIXED' in slurm_state(fleet, 'gpu-05')['State']
    finally:
        subprocess.run(['scancel', job], env=dict(os.environ, **environment), check=False, capture_output=True)
    moves = [(event['from'], event['to']) for event in events if event['node'] == 'gpu-05']
    assert moves.count(('pending', 'admitted')) == 2 and moves.count(('deferred', 'pending')) == 1, moves
    assert moves[-1][1] == 'deferred' and state['nodes']['gpu-05']['state'] == 'deferred' and state['nodes']['gpu-05']['retries'] == 1
    retry = [event for event in events if event['node'] == 'gpu-05' and event['to'] == 'pending'][0]
    deferred = [event for event in events if event['node'] == 'gpu-05' and event['to'] == 'deferred'][0]
    assert retry['reason'] == 'retry 1 of 1 after deferred: ' + deferred['reason'], (retry, deferred)
    assert state['status'] == 'finished'


class WeightWatch(Sampler):
    """Slurm's Weight of ``nodes`` read every half second while a rollout runs: {node: [weights seen, in order]}."""

    def __init__(self, environment, nodes):
        super().__init__()
        self.environment, self.nodes, self.seen = environment, nodes, {node: [] for node in nodes}

    def sample(self):
        # One scontrol call for all of them (a call per node per look was most of this watcher's cost).
        listing = slurm_sim.run_client(self.environment, ['scontrol', 'show', 'node', '-o', ','.join(self.nodes)], timeout=15).stdout
        weights = {fields.get('NodeName'): fields.get('Weight') for fields in map(slurm_sim.parse_scontrol_oneliner, listing.splitlines())}
        for node in self.nodes:
            if self.seen[node][-1:] != [weights.get(node)]:
                self.seen[node].append(weights.get(node))


def test_a_multi_node_job_goes_together_at_its_checkpoint_and_is_interrupted_once(fleet, tmp_path):
    """A job on gpu-01 and gpu-02 (sbatch -N 2) declares its next checkpoint ahead: gpu-03 and gpu-04 go first, then
    gpu-01 and gpu-02 together in one look, not before the checkpoint; the drain requeues the job there, once (Slurm's own
    restart count), and the ledger records that interruption with the group's nodes. A short job on gpu-03 and gpu-04 that
    declares nothing: its pair goes together and the drains wait for it to end, never interrupted (Restarts=0)."""
    environment = fleet.vars['gpufleet_slurm_environment']
    run_dir = str(tmp_path / 'runs')
    checkpoint = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=25)
    job = slurm_sim.submit_job(environment, ['gpu-01', 'gpu-02'], 900, name='llm', comment='gpufleet.io/checkpoint=' + checkpoint.isoformat())
    short = slurm_sim.submit_job(environment, ['gpu-03', 'gpu-04'], 12, name='eval')
    try:
        for each in (job, short):
            slurm_sim.poll(lambda each=each: slurm_sim.job_state(environment, each) == 'RUNNING', 30, interval=0.2, what='job %s running' % each)
        # A failure budget that lets 2 fly (with the default of 0 one node at a time: the job's pair would wait for its end).
        with WeightWatch(environment, ['gpu-01', 'gpu-02', 'gpu-03', 'gpu-04', 'gpu-05']) as weights:
            process = rollout(fleet, run_dir, gpufleet_hosts='gpu-01,gpu-02,gpu-03,gpu-04', gpufleet_window=2, gpufleet_canary=0,
                              gpufleet_max_fail_percentage=50)
        assert process.returncode == 0, failures(process)
        events, state = ledger(run_dir)
        info = slurm_sim.job_info(environment, job)
        short_info = slurm_sim.job_info(environment, short)
    finally:
        slurm_sim.run_client(environment, ['scancel', job, short], check=False)
    assert {node: record['state'] for node, record in state['nodes'].items()} == dict.fromkeys(('gpu-01', 'gpu-02', 'gpu-03', 'gpu-04'), 'done')
    admitted = {event['node']: event for event in admissions(events)}
    at = {node: datetime.datetime.fromisoformat(event['time']) for node, event in admitted.items()}
    assert min(at['gpu-01'], at['gpu-02']) >= checkpoint, (at, checkpoint)
    assert abs((at['gpu-01'] - at['gpu-02']).total_seconds()) < 2, at           # one look admitted both
    assert max(at['gpu-03'], at['gpu-04']) < min(at['gpu-01'], at['gpu-02']), at
    assert state['nodes']['gpu-01']['group'] == state['nodes']['gpu-02']['group'] == ['gpu-01', 'gpu-02']
    # The job that declares nothing: its nodes together, waited for by the drains, ended by itself.
    assert state['nodes']['gpu-03']['group'] == state['nodes']['gpu-04']['group'] == ['gpu-03', 'gpu-04']
    assert abs((at['gpu-03'] - at['gpu-04']).total_seconds()) < 2, at
    assert (short_info['JobState'], short_info['Restarts']) == ('COMPLETED', '0'), short_info
    assert state['nodes']['gpu-02']['jobs'] == [job]
    assert max(len(flying) for _event, flying in in_flight_over_time(events)) <= 2
    # Interrupted once: requeued by one drain of the group (Slurm counts one restart), recorded on that node's final event.
    assert info['Restarts'] == '1', info
    interrupted = [entry for node in ('gpu-01', 'gpu-02') for entry in state['nodes'][node].get('interrupted') or []]
    assert [(entry['job'], entry['kind']) for entry in interrupted] == [(job, 'requeued')], interrupted
    assert datetime.datetime.fromisoformat(interrupted[0]['at']) >= checkpoint
    # The fleet report: one interruption, nothing lost after a checkpoint that just passed (the sim's jobs hold no GPUs).
    jobs = _report.build({'id': state['run_id']}, {}, _report.read_ledger(os.path.join(run_dir, state['run_id'])))['summary']['jobs']
    assert [(entry['job'], entry['interruptions'], entry['lost_unknown']) for entry in jobs] == [(job, 1, False)], jobs
    # The soft pre-drain: each node of the run weighed 1 + 1000000 while it waited (new and requeued work prefers the nodes
    # already upgraded and those outside the run), 1 again once done; gpu-05 (not in the run) never changed; nothing recorded
    # is left in the ledger.
    for node in ('gpu-01', 'gpu-02', 'gpu-03', 'gpu-04'):
        assert weights.seen[node][-2:] == ['1000001', '1'], (node, weights.seen)
    assert weights.seen['gpu-05'] == ['1'], weights.seen
    assert _ledger.RunLedger.open(_ledger.FileBackend(run_dir), state['run_id']).soft_marks() == {}


def test_the_circuit_breaker_counts_earlier_runs_until_an_operator_resets_it(fleet, tmp_path):
    """An earlier run in the same run folder quarantined gpu-06; this run quarantines gpu-04 (its validation fails): two within
    the breaker's window trip it, gpu-05 is not admitted, the escalation hook hears of the quarantine and the pause, and a
    re-run stays paused until rollout_control.yml resets the breaker; then gpu-05 goes and the run finishes."""
    run_dir = str(tmp_path / 'runs')
    calls = str(tmp_path / 'escalations.jsonl')
    hook = [sys.executable, '-c', 'import sys; open(sys.argv[1], "a").write(sys.stdin.read().strip() + "\\n")', calls]
    finished_run(run_dir, 'earlier-run', ['gpu-06'], {'gpu-06': 'quarantined'}, 'another-inventory')
    values = dict(gpufleet_hosts='gpu-04,gpu-05', gpufleet_window=1, gpufleet_canary=0, gpufleet_max_fail_percentage=None,
                  gpufleet_pin_fault_threshold=None, gpufleet_circuit_breaker_threshold=2, gpufleet_escalation=hook)
    fleet.fleet('fault', 'gpu-04', 'diag_fail')
    try:
        tripped = rollout(fleet, run_dir, **values)
        assert tripped.returncode != 0 and 'rollout paused' in tripped.stdout and 'circuit breaker open' in tripped.stdout, failures(tripped)
        run_id = [name for name in os.listdir(run_dir) if name not in ('locks', 'earlier-run')][0]
        events, state = ledger(run_dir, run_id)
        assert state['status'] == 'paused' and state['pause']['rule'] == 'circuit_breaker', state['pause']
        assert {node: record['state'] for node, record in state['nodes'].items()} == {'gpu-04': 'quarantined', 'gpu-05': 'pending'}
        with open(calls, encoding='utf-8') as handle:
            heard = [json.loads(line) for line in handle]
        # Sent by different steps (gpu-04's settle, gpu-05's gate), so in either order (docs/rollout-policy.md).
        assert sorted((call['event'], call.get('node') or call.get('rule')) for call in heard) == \
            [('gpufleet.rollout.paused', 'circuit_breaker'), ('gpufleet.rollout.quarantined', 'gpu-04')], heard

        again = rollout(fleet, run_dir, **values)
        assert again.returncode != 0 and 'circuit breaker open' in again.stdout, failures(again)
        assert admissions(ledger(run_dir, run_id)[0]) == admissions(events)      # nobody admitted while it is open

        reset = run(fleet, CONTROL, None, dict(gpufleet_run_dir=run_dir, gpufleet_verb='reset_breaker', gpufleet_reason='hardware checked'))
        assert reset.returncode == 0, failures(reset)
        resumed = rollout(fleet, run_dir, **values)
        assert resumed.returncode == 0, failures(resumed)
        events, state = ledger(run_dir, run_id)
        assert state['status'] == 'finished' and state['nodes']['gpu-05']['state'] == 'done', state['nodes']
        assert [event['node'] for event in admissions(events)] == ['gpu-04', 'gpu-05']
        assert [event['to'] for event in events if event['node'] is None][-3:] == ['breaker_reset', 'running', 'finished']
    finally:
        quarantine_cleanup(fleet, ['gpu-04'])


# ----------------------------------------------------------------------------------------------------------------
# The fleet report of a rollout with a rollback and a quarantine, through ansible-runner (the engine AWX uses).

PIN_580 = {'driver': '580.65.06', 'fabric_manager': '580.65.06', 'container_toolkit': '1.17.0', 'dcgm': '4.1.0'}


def report_agrees_with_ledger(out, events, state):
    """report.json, junit.xml and metrics.prom of the fleet_report callback in ``out`` tell what the ledger tells: the same
    nodes, final states and reasons, and the same count of nodes per state."""
    import collections  # pylint: disable=import-outside-toplevel
    from test_fleet_report import junit_cases, load_report, metric_samples  # pylint: disable=import-outside-toplevel,import-error

    report = load_report(out)
    ledger_nodes = dict((name, (record['state'], record['reason'])) for name, record in state['nodes'].items())
    assert report['run']['id'] == state['run_id'] and report['run']['ledger_status'] == state['status']
    assert dict((node['name'], (node['state'], node['ledger']['reason'])) for node in report['nodes']) == ledger_nodes
    for node in report['nodes']:
        final, reason = ledger_nodes[node['name']]
        if final in ('rolled_back', 'quarantined'):
            assert reason and node['failure']['kind'] == final and node['failure']['reason'].startswith(reason), (node['failure'], reason)
        else:
            assert node['failure'] is None, node['failure']
    # Every move of a node in the ledger is a bar of its timeline (the ledger's states over time).
    for node in report['nodes']:
        moves = [event['to'] for event in events if event['node'] == node['name']]
        assert [span['phase'] for span in node['timeline']] == [move for move in moves if move != 'pending'], node['name']
    cases = junit_cases(out)
    assert sorted(cases) == sorted(ledger_nodes)
    expected_cases = dict((name, [('Failure', final)] if final in ('rolled_back', 'quarantined') else
                           [('Skipped', None)] if final in ('left_alone', 'deferred', 'pending') else [])
                          for name, (final, _reason) in ledger_nodes.items())
    assert cases == expected_cases
    import junitparser  # pylint: disable=import-outside-toplevel
    for case in list(junitparser.JUnitXml.fromfile(os.path.join(str(out), 'junit.xml')))[0]:
        final, reason = ledger_nodes[case.name]
        assert all(reason in (item.message or '') for item in case.result), (case.name, [item.message for item in case.result], reason)
    samples = metric_samples(out)
    counted = dict((dict(labels)['state'], value) for (name, labels), value in samples.items() if name == 'gpufleet_nodes')
    ledger_counts = collections.Counter(final for final, _reason in ledger_nodes.values())
    assert dict((name, count) for name, count in counted.items() if count) == dict(ledger_counts)
    assert all(counted.get(name) == 0 for name in counted if name not in ledger_counts)
    return report


def test_a_rollout_through_ansible_runner_reports_what_its_ledger_says(fleet, tmp_path):
    """Window mode with the pin, through ansible-runner with the fleet_report callback: gpu-04 drained by an admin (left alone),
    gpu-05 fails DCGM on the new driver only (rolled back), gpu-06 has lost a GPU (Xid 79) before it starts (quarantined at the
    precheck, nothing converged: the cheap quarantine). The runner's artifacts hold the
    rollout summary the playbook hands on with set_stats, and report.json, junit.xml and metrics.prom agree with the ledger."""
    import ansible_runner  # pylint: disable=import-outside-toplevel

    environment = fleet.vars['gpufleet_slurm_environment']
    run_dir = str(tmp_path / 'runs')
    values = dict(SIM_VARS, gpufleet_run_dir=run_dir, gpufleet_hosts='gpu-04,gpu-05,gpu-06', gpufleet_window=2, gpufleet_canary=0,
                  gpufleet_max_fail_percentage=100, gpufleet_pin=PIN_580, gpufleet_results_dir=str(tmp_path / 'results'))
    runner_env = ansible_environment()
    for name in ('ANSIBLE_STDOUT_CALLBACK', 'ANSIBLE_CALLBACK_RESULT_FORMAT'):
        runner_env.pop(name, None)
    runner_env.update({'ANSIBLE_CALLBACKS_ENABLED': 'gpufleet.lifecycle.fleet_report', 'GPUFLEET_REPORT_DIR': str(tmp_path / 'report')})
    (tmp_path / 'runner').mkdir()
    slurm_sim.scontrol(environment, 'update', 'NodeName=gpu-04', 'State=DRAIN', 'Reason=admin: fan replacement')
    fleet.fleet('fault', 'gpu-05', 'diag_fail', 'branch=580', 'gpu=2')
    fleet.fleet('fault', 'gpu-06', 'xid', 'gpu=5', 'xid=79')
    try:
        runner = ansible_runner.run(private_data_dir=str(tmp_path / 'runner'), playbook=ROLLING_RESTART, inventory=fleet.inventory,
                                    ident='rollout', extravars=values, envvars=runner_env, quiet=True)
        events, state = ledger(run_dir)
    finally:
        slurm_sim.scontrol(environment, 'update', 'NodeName=gpu-04', 'State=RESUME')
        quarantine_cleanup(fleet, ['gpu-05', 'gpu-06'])
    output = runner.stdout.read()
    assert (runner.status, runner.rc) == ('successful', 0), output[-6000:]
    assert {node: record['state'] for node, record in state['nodes'].items()} == {
        'gpu-04': 'left_alone', 'gpu-05': 'rolled_back', 'gpu-06': 'quarantined'}, state['nodes']
    assert state['status'] == 'finished'
    # AWX's artifacts: the job's rc and events, and the summary set_stats handed on (the ledger's words).
    artifacts = tmp_path / 'runner' / 'artifacts' / 'rollout'
    assert (artifacts / 'rc').read_text(encoding='utf-8') == '0' and (artifacts / 'job_events').is_dir()
    stats = [event for event in runner.events if event['event'] == 'playbook_on_stats'][0]['event_data']['artifact_data']
    summary = stats['gpufleet_rollout_summary']
    assert (summary['run_id'], summary['status']) == (state['run_id'], 'finished')
    assert summary['counts'] == {'left_alone': 1, 'rolled_back': 1, 'quarantined': 1}
    assert summary['nodes'] == dict((name, {'state': record['state'], 'reason': record['reason']}) for name, record in state['nodes'].items())
    assert summary['ledger_file'] == os.path.join(run_dir, state['run_id'], 'ledger.jsonl')
    # The live progress lines are in the job output, from the ledger.
    assert 'gpu-05 rolling_back \u2192 rolled_back (' in output and 'gpu-06 admitted \u2192 quarantined (' in output, output[-4000:]
    report = report_agrees_with_ledger(tmp_path / 'report', events, state)
    assert 'dcgm_diag_r1' in [node for node in report['nodes'] if node['name'] == 'gpu-05'][0]['failure']['reason']
