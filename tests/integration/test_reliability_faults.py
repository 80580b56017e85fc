# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fault half of the reliability suite (issue 16): node, scheduler and controller faults injected during real
rollouts (playbooks/rolling_restart.yml, window mode) on the simulated fleet, each a scenario of docs/reliability.md.

One fleet for the module (build/sim-faults: 10 nodes on the 550 branch, real Slurm, a Redfish BMC per node). The
simulation settings live in the fleet's inventory (group and host variables), so a host can differ (a shorter reboot
timeout, no BMC, a short drain timeout); the policy comes as extra variables.

    run N (pin 580, window 4, floor 30 %): one node fault per node, a long job, an admin's drain and a second rollout,
        all asserted from the same ledger
    runs K (gpu-02, pin 580, DCGM failing on 580): ansible-playbook killed with SIGKILL in each phase, re-run each time
    runs L (gpu-04, gpu-06, gpu-10, reboot only): the ledger's file system full, then read-only, mid-run
    run S (gpu-07..09, reboot only): slurmctld stopped mid-run

The Kubernetes scenarios (the fake API server as the scheduler) are test_reliability_kube.py, on a fleet of their own.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, SIM, ansible_environment, fleet_up

sys.path.insert(0, os.path.join(SIM, 'slurm'))

sys.path.insert(0, SIM)

import slurm_sim  # noqa: E402  pylint: disable=wrong-import-position,import-error

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger, _rollout  # noqa: E402

FLEET_STATE = os.path.join(ROOT, 'build', 'sim-faults')
ROLLING_RESTART = os.path.join(ROOT, 'playbooks', 'rolling_restart.yml')
PIN_580 = {'driver': '580.65.06', 'fabric_manager': '580.65.06', 'container_toolkit': '1.17.0', 'dcgm': '4.1.0'}
SIM_VARS = {'gpufleet_boot_time_command': 'stat -c %Z /proc/1', 'gpufleet_reboot_timeout': 45, 'gpufleet_drain_timeout': 20,
            'node_upgrade_wait_sleep': 1, 'gpufleet_gate_poll': 1,
            'node_validate_kernel_log_command': ['sh', '-c', 'cat /var/lib/gpufleet-sim/xid.log 2>/dev/null; true']}
# No pause rule but the capacity floor: every fault must reach its node's own final state.
NO_PAUSE = {'gpufleet_max_fail_percentage': None, 'gpufleet_pin_fault_threshold': None, 'gpufleet_circuit_breaker_threshold': None}
GPUS = 8


@pytest.fixture(scope='module')
def fleet():
    yield from fleet_up(FLEET_STATE, 10, 'slurm', '--bmc')


def inventory(fleet, folder, hosts=None):
    """The fleet's inventory with the simulation settings as group variables and ``hosts`` ({node: {var: value}}) merged in."""
    document = json.loads(json.dumps(fleet.inventory_data))
    document['all']['vars'].update(SIM_VARS)
    for node, values in (hosts or {}).items():
        document['all']['children']['gpu']['hosts'][node].update(values)
    path = os.path.join(folder, 'inventory.json')
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump(document, handle)
    os.chmod(path, 0o600)
    return path


def command(inventory_path, run_dir, nodes, **policy):
    values = dict(NO_PAUSE, gpufleet_run_dir=run_dir, gpufleet_hosts=','.join(nodes), gpufleet_canary=0)
    values.update(policy)
    return ['ansible-playbook', '-i', inventory_path, ROLLING_RESTART, '-e', json.dumps(values)]


def start(argv, output):
    """ansible-playbook in its own session (so that a SIGKILL reaches it and its workers), output to a file."""
    handle = open(output, 'w', encoding='utf-8')  # pylint: disable=consider-using-with
    try:
        return subprocess.Popen(argv, env=ansible_environment(), cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        handle.close()


def run(argv):
    return subprocess.run(argv, env=ansible_environment(), cwd=ROOT, capture_output=True, text=True, check=False, timeout=1800)


def failures(process):
    return '\nrc=%s\n%s\n%s' % (process.returncode, process.stdout[-6000:], process.stderr[-3000:])


def events_of(run_dir, run_id=None):
    """The run's ledger events ([] while there is none yet)."""
    try:
        runs = [run_id] if run_id else [name for name in os.listdir(run_dir) if name != 'locks']
        if len(runs) != 1:
            return []
        with open(os.path.join(run_dir, runs[0], 'ledger.jsonl'), encoding='utf-8') as handle:
            return [json.loads(line) for line in handle if line.endswith('\n')]
    except (OSError, ValueError):
        return []


def state_of(run_dir, run_id=None):
    runs = [run_id] if run_id else [name for name in os.listdir(run_dir) if name != 'locks']
    # The reader's rule: state.json (written at run events) and the snapshots, plus the events after them.
    return _ledger.RunLedger.open(_ledger.FileBackend(run_dir), runs[0]).state


def poll(condition, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError('timed out after %ss waiting for %s' % (timeout, what))


def slurm(fleet, node):
    return slurm_sim.node_state(fleet.vars['gpufleet_slurm_environment'], node)


def schedulable(fleet, nodes):
    """{node: whether Slurm would start a job on it now}."""
    return {node: not any(flag in slurm(fleet, node)['State'] for flag in ('DRAIN', 'DOWN', 'FAIL')) for node in nodes}


def resume(fleet, node):
    """Put a node back in service for the next scenario (the fault cleared, booted, resumed in Slurm)."""
    fleet.fleet('fault', node, 'clear')
    if 'DRAIN' in slurm(fleet, node)['State'] or 'DOWN' in slurm(fleet, node)['State']:
        slurm_sim.scontrol(fleet.vars['gpufleet_slurm_environment'], 'update', 'NodeName=' + node, 'State=RESUME')


def loaded_driver(fleet, node):
    return json.loads(fleet.node_exec(node, 'cat', '/run/gpufleet-sim/boot.json').stdout)['driver']


def result_of(run_dir, run_id, node):
    with open(os.path.join(run_dir, run_id, 'results', node + '.json'), encoding='utf-8') as handle:
        return json.load(handle)


def check_of(result, name, key='validation'):
    return [entry for entry in result.get(key) or [] if entry['name'] == name][0]


# ------------------------------------------------------------------------------------------------ node faults

# node -> (scenario, fault command arguments after the node, host variables)
NODE_FAULTS = {
    'gpu-01': ('never returns from its reboot (no BMC)', ['reboot_hang'], {'gpufleet_bmc_address': '', 'gpufleet_reboot_timeout': 20}),
    'gpu-02': ('DCGM fails on the new driver only', ['diag_fail', 'branch=580', 'gpu=3'], {}),
    'gpu-03': ('DCGM fails on both pins', ['diag_fail'], {}),
    'gpu-04': ('dpkg fails mid-install', ['dpkg_fail', 'package=nvidia-kernel-common-580'], {}),
    'gpu-05': ('the driver module cannot be built (DKMS)', ['dkms_fail'], {}),
    'gpu-06': ('Fabric Manager left on the old branch', ['fm_fail', 'mismatch=550.127.05'], {}),
    'gpu-07': ('a GPU lost across the reboot', ['gpu_lost', 'gpu=5'], {}),
    'gpu-08': ('hangs on the way down, the BMC power-cycles it', ['reboot_hang'], {}),
}


@pytest.fixture(scope='module')
def run_n(fleet, tmp_path_factory):
    """One window-mode rollout to the 580 pin over the 10 nodes, a fault on each of gpu-01..08, a long job on gpu-09 (drain
    timeout 3 s there), gpu-10 drained by an admin once the run started; a second rollout tried while it runs."""
    folder = str(tmp_path_factory.mktemp('run-n'))
    run_dir = os.path.join(folder, 'runs')
    environment = fleet.vars['gpufleet_slurm_environment']
    hosts = {node: variables for node, (_name, _fault, variables) in NODE_FAULTS.items()}
    hosts['gpu-09'] = {'gpufleet_drain_timeout': 3}
    path = inventory(fleet, folder, hosts)
    for node, (_name, fault, _variables) in NODE_FAULTS.items():
        fleet.fleet('fault', node, *fault)
    job = slurm_sim.submit_job(environment, 'gpu-09', 3600)
    argv = command(path, run_dir, fleet.nodes, gpufleet_pin=PIN_580, gpufleet_window=4, gpufleet_capacity_floor='30%')
    try:
        slurm_sim.wait_for(environment, 'gpu-09', lambda state: 'ALLOCATED' in state or 'MIXED' in state, timeout=30)
        gpu09 = slurm(fleet, 'gpu-09')
        output = os.path.join(folder, 'run.log')
        process = start(argv, output)
        try:
            poll(lambda: any(event['to'] == 'admitted' for event in events_of(run_dir)), 600, 'the first admission')
            admitted_before = sorted(event['node'] for event in events_of(run_dir) if event['to'] == 'admitted')
            slurm_sim.scontrol(environment, 'update', 'NodeName=gpu-10', 'State=DRAIN', 'Reason=admin: PSU swap')
            second = run(command(path, run_dir, fleet.nodes, gpufleet_window=2))
            process.wait(timeout=1800)
        finally:
            if process.poll() is None:      # never leave the rollout running with its faults cleared below
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        with open(output, encoding='utf-8') as handle:
            stdout = handle.read()
        events, state = events_of(run_dir), state_of(run_dir)
        now = schedulable(fleet, fleet.nodes)
        scheduler = {node: slurm(fleet, node) for node in fleet.nodes}
        drivers = {node: loaded_driver(fleet, node) for node in fleet.nodes if node != 'gpu-01'}
    finally:
        subprocess.run(['scancel', job], env=dict(os.environ, **environment), check=False, capture_output=True)
        for node in NODE_FAULTS:
            fleet.fleet('fault', node, 'clear')
        # gpu-01 hangs at boot: a power cycle of its own brings it back for the later runs.
        fleet.fleet('reboot-node', 'gpu-01')
        for node in fleet.nodes:
            resume(fleet, node)
    return {'run_dir': run_dir, 'process': process, 'stdout': stdout, 'events': events, 'state': state, 'second': second,
            'schedulable': now, 'slurm': scheduler, 'gpu09': gpu09, 'admitted_before': admitted_before, 'drivers': drivers,
            'nodes': {name: record['state'] for name, record in state['nodes'].items()}}


def node_scenario(reliability, run_n, node, expected):
    name, fault, _variables = NODE_FAULTS[node]
    scenario = reliability.scenario('node fault', name, injected='tests/sim/fleet fault %s %s during a rollout to the 580 pin'
                                    % (node, ' '.join(fault)))
    states = reliability.check_rollout(run_n['run_dir'], gpus_per_node=GPUS, floor=0.3)
    reliability.check_schedulable(states, run_n['schedulable'])
    assert states[node] == expected, (node, states[node], run_n['state']['nodes'][node]['reason'], run_n['stdout'][-3000:])
    return scenario, run_n['state']['nodes'][node], result_of(run_n['run_dir'], run_n['state']['run_id'], node)


def test_never_returns_from_its_reboot(reliability, run_n):
    scenario, record, result = node_scenario(reliability, run_n, 'gpu-01', 'quarantined')
    assert 'unreachable' in record['reason'] and 'no BMC' in record['reason'], record
    assert not result['reboot']['power_cycled'], result['reboot']
    assert not run_n['schedulable']['gpu-01'] and 'unreachable' in run_n['slurm']['gpu-01']['Reason'], run_n['slurm']['gpu-01']
    scenario.observed('quarantined, unreachable after its reboot timeout with no BMC to power-cycle it; stays drained; '
                      'the other nodes went on')


def test_dcgm_fails_on_the_new_driver_only(reliability, run_n):
    scenario, record, result = node_scenario(reliability, run_n, 'gpu-02', 'rolled_back')
    diag = check_of(result, 'dcgm_diag_r1')
    assert not diag['passed'] and 'GPU 3' in diag['message'], diag
    assert all(entry['passed'] for entry in result['rollback_validation'])
    assert run_n['drivers']['gpu-02'] == '550.127.05' and run_n['schedulable']['gpu-02']
    assert result['versions_after']['driver'] == '550.127.05' and result['rollback_pin']['driver'] == '550.127.05', result
    assert 'dcgm_diag_r1' in record['reason']
    walked = [(event['from'], event['to']) for event in run_n['events'] if event['node'] == 'gpu-02']
    assert walked[-3:] == [('rebooting', 'validating'), ('validating', 'rolling_back'), ('rolling_back', 'rolled_back')], walked
    scenario.observed('rolled back to the 550 pin, which passed its validation; back in service on 550')


def test_dcgm_fails_on_both_pins(reliability, run_n):
    scenario, record, result = node_scenario(reliability, run_n, 'gpu-03', 'quarantined')
    assert result['rma_suspect'] and 'suspect hardware (RMA)' in record['reason'], record
    assert not run_n['schedulable']['gpu-03']
    assert run_n['slurm']['gpu-03']['Reason'].startswith('gpufleet: quarantined: suspect hardware (RMA)'), run_n['slurm']['gpu-03']
    scenario.observed('quarantined as suspect hardware (RMA): the diagnostic failed on the new pin and on the previous one; stays drained')


def test_dpkg_fails_mid_install(reliability, run_n):
    scenario, record, result = node_scenario(reliability, run_n, 'gpu-04', 'rolled_back')
    assert 'converge' in record['reason'], record
    assert run_n['drivers']['gpu-04'] == '550.127.05' and run_n['schedulable']['gpu-04']
    assert result['versions_after']['driver'] == '550.127.05', result['versions_after']
    scenario.observed('rolled back to the 550 pin after the failed install, validated, back in service on 550')


def test_the_driver_module_cannot_be_built(reliability, run_n):
    scenario, record, result = node_scenario(reliability, run_n, 'gpu-05', 'quarantined')
    assert record['reason'].startswith('rollback: '), record
    assert not run_n['schedulable']['gpu-05']
    scenario.observed('the 580 install failed building the module; the rollback to 550 failed the same way: quarantined before any '
                      'reboot into a kernel without a driver module; stays drained')


def test_fabric_manager_left_on_the_old_branch(reliability, run_n):
    scenario, record, result = node_scenario(reliability, run_n, 'gpu-06', 'rolled_back')
    fabric = check_of(result, 'fabric_manager')
    assert not fabric['passed'], fabric
    assert run_n['drivers']['gpu-06'] == '550.127.05' and run_n['schedulable']['gpu-06']
    scenario.observed('nvidia-fabricmanager failed on the 580 driver: rolled back to 550 (where it runs), validated, back in service')


def test_a_gpu_lost_across_the_reboot(reliability, run_n):
    scenario, record, result = node_scenario(reliability, run_n, 'gpu-07', 'quarantined')
    count = check_of(result, 'gpu_count')
    assert not count['passed'] and 'lists 7 GPU(s), 8 before' in count['message'], count
    assert not run_n['schedulable']['gpu-07']
    scenario.observed('quarantined: gpu_count found 7 GPUs where 8 were before, on the new pin and after the rollback; stays drained')


def test_hangs_on_the_way_down_and_the_bmc_power_cycles_it(reliability, run_n):
    scenario, record, result = node_scenario(reliability, run_n, 'gpu-08', 'done')
    assert result['reboot']['power_cycled'] and result['reboot']['used'] == 'bmc', result['reboot']
    assert run_n['drivers']['gpu-08'] == '580.65.06' and run_n['schedulable']['gpu-08']
    # The BMC password never reaches the output.
    with open(os.path.join(FLEET_STATE, 'inventory.json'), encoding='utf-8') as handle:
        password = json.load(handle)['all']['children']['gpu']['hosts']['gpu-08']['gpufleet_bmc_password']
    assert password and password not in run_n['stdout']
    scenario.observed('one BMC power cycle brought it back; validated on 580, done, back in service')


def test_a_drain_blocked_by_a_long_slurm_job(reliability, run_n):
    scenario = reliability.scenario('scheduler fault', 'a drain blocked by a long Slurm job',
                                    injected='sbatch -w gpu-09 (an hour) before the rollout; gpufleet_drain_timeout 3 on gpu-09')
    states = reliability.check_rollout(run_n['run_dir'], gpus_per_node=GPUS, floor=0.3)
    assert states['gpu-09'] == 'deferred', run_n['state']['nodes']['gpu-09']
    assert 'job' in run_n['state']['nodes']['gpu-09']['reason'], run_n['state']['nodes']['gpu-09']
    after = run_n['slurm']['gpu-09']
    assert (after['State'], after.get('Reason')) == (run_n['gpu09']['State'], run_n['gpu09'].get('Reason')), (run_n['gpu09'], after)
    assert run_n['schedulable']['gpu-09'] and run_n['drivers']['gpu-09'] == '550.127.05'     # put back as it was, not upgraded
    scenario.observed('deferred when the drain timed out, the job named, the node resumed as it was; the job kept running')


def test_a_node_drained_by_an_admin_during_the_rollout(reliability, run_n):
    scenario = reliability.scenario('scheduler fault', 'a node drained by an admin during the rollout',
                                    injected='scontrol update NodeName=gpu-10 State=DRAIN Reason="admin: PSU swap" after the first admission')
    states = reliability.check_rollout(run_n['run_dir'], gpus_per_node=GPUS, floor=0.3)
    assert 'gpu-10' not in run_n['admitted_before']
    assert states['gpu-10'] == 'left_alone', run_n['state']['nodes']['gpu-10']
    gpu10 = run_n['slurm']['gpu-10']
    assert 'DRAIN' in gpu10['State'] and gpu10['Reason'].startswith('admin: PSU swap'), gpu10
    assert run_n['drivers']['gpu-10'] == '550.127.05'
    scenario.observed('left_alone: never admitted, its admin drain and reason kept')


def test_two_rollouts_at_once(reliability, run_n):
    scenario = reliability.scenario('controller fault', 'two rollouts started at once on one fleet',
                                    injected='a second rolling_restart.yml on the same inventory while the first runs')
    second = run_n['second']
    run_id = run_n['state']['run_id']
    assert second.returncode != 0
    assert 'a second rollout is refused' in second.stdout and 'held by run %s' % run_id in second.stdout, failures(second)
    assert [name for name in os.listdir(run_n['run_dir']) if name != 'locks'] == [run_id]
    reliability.check_rollout(run_n['run_dir'], gpus_per_node=GPUS, floor=0.3)
    scenario.observed('the second is refused naming the run that holds the fleet lock (run id, host, pid); it writes no ledger '
                      'and touches no node; the first finishes')


# ------------------------------------------------------------------------------------------------ controller faults

KILL_RUN = 'kill-9'
PHASES = ('admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'rolling_back')


def kill_when(argv, output, run_dir, run_id, node, phase, timeout=900):
    """Start ansible-playbook; SIGKILL it and its workers as soon as the ledger shows ``node`` entering ``phase`` (after the
    events there were at the start); return the state.json at the kill."""
    offset = len(events_of(run_dir, run_id))
    process = start(argv, output)
    try:
        deadline = time.time() + timeout
        while time.time() < deadline and process.poll() is None:
            if any(event['node'] == node and event['to'] == phase for event in events_of(run_dir, run_id)[offset:]):
                break
            time.sleep(0.05)
        else:
            with open(output, encoding='utf-8') as handle:
                raise AssertionError('%s never entered %s (rc %s):\n%s' % (node, phase, process.poll(), handle.read()[-4000:]))
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return state_of(run_dir, run_id)


@pytest.fixture(scope='module')
def runs_k(fleet, tmp_path_factory):
    """gpu-02 (on 550, back in service after run N's rollback) to the 580 pin with DCGM failing on 580, so that it passes through every phase, rolling
    back included. First the fleet lock: held by a live process (refused), then by a dead one (taken over). Then
    ansible-playbook is killed with SIGKILL when the ledger first shows each phase, and started again with the same run id;
    a last run without a kill finishes."""
    node = 'gpu-02'
    resume(fleet, node)
    folder = str(tmp_path_factory.mktemp('run-k'))
    run_dir = os.path.join(folder, 'runs')
    path = inventory(fleet, folder)
    argv = command(path, run_dir, [node], gpufleet_pin=PIN_580, gpufleet_window=1, gpufleet_run_id=KILL_RUN)
    backend = _ledger.FileBackend(run_dir)
    fleet_lock = _rollout.fleet_name(_rollout.inventory_id([path]))
    found = {}
    # A controller that is alive holds the lock: refused, nothing written.
    holder = subprocess.Popen(['sleep', '300'])  # pylint: disable=consider-using-with
    try:
        backend.acquire(fleet_lock, _ledger.holder_identity('live-controller', pid=holder.pid))
        found['live'] = run(argv)
        found['live_runs'] = backend.run_ids()
    finally:
        holder.kill()
        holder.wait()
    # The same holder, now gone (its pid no longer runs): stale.
    found['stale_holder'] = backend.holder(fleet_lock)
    fleet.fleet('fault', node, 'diag_fail', 'branch=580')
    caught = {}
    try:
        for phase in PHASES:
            state = kill_when(argv, os.path.join(folder, '%s.log' % phase), run_dir, KILL_RUN, node, phase)
            if phase == PHASES[0]:
                found['after_first'] = backend.holder(fleet_lock)
            last = [event for event in events_of(run_dir, KILL_RUN) if event['node'] == node][-1]
            caught[phase] = {'state': last['to'], 'status': state['status'],
                             'schedulable': schedulable(fleet, [node])[node], 'events': len(events_of(run_dir, KILL_RUN)),
                             'weight': slurm(fleet, node).get('Weight'),
                             'marks': _ledger.RunLedger.open(backend, KILL_RUN).soft_marks()}
        time.sleep(1)      # the orphaned workers notice their parent is gone
        found['final'] = run(argv)
    finally:
        fleet.fleet('fault', node, 'clear')
    found.update(run_dir=run_dir, caught=caught, events=events_of(run_dir, KILL_RUN), state=state_of(run_dir, KILL_RUN),
                 schedulable=schedulable(fleet, [node]), driver=loaded_driver(fleet, node), lock=backend.holder(fleet_lock),
                 weight=slurm(fleet, node).get('Weight'), marks=_ledger.RunLedger.open(backend, KILL_RUN).soft_marks())
    resume(fleet, node)
    return found


@pytest.mark.parametrize('phase', PHASES)
def test_the_controller_killed_in_each_phase(reliability, runs_k, phase):
    node = 'gpu-02'
    scenario = reliability.scenario('controller fault', 'ansible-playbook killed with SIGKILL in phase %s' % phase,
                                    injected='kill -9 of ansible-playbook and its workers when the ledger first shows %s entering %s; '
                                             'the same command run again (gpufleet_run_id %s)' % (node, phase, KILL_RUN))
    caught = runs_k['caught'][phase]
    assert caught['status'] == 'running' and caught['state'] in _ledger.IN_FLIGHT, caught
    # The ledger is written ahead: admitted and cordoned may be killed before the cordon reached the scheduler (nothing on
    # the node changed yet); from drained on the node was drained first.
    if phase not in ('admitted', 'cordoned'):
        assert not caught['schedulable'], 'caught %s, the scheduler would place work on it' % caught
    final = runs_k['final']
    assert final.returncode == 0, failures(final)
    states = reliability.check_rollout(runs_k['run_dir'], KILL_RUN, gpus_per_node=GPUS)
    reliability.check_schedulable(states, runs_k['schedulable'])
    assert states == {node: 'rolled_back'}, runs_k['state']['nodes']
    # The run after this kill re-admitted the node as caught (rule resume), not from pending.
    later = [event for event in runs_k['events'][caught['events']:] if event['node'] == node and event['to'] == 'admitted']
    assert later and later[0]['from'] == caught['state'] and 'caught' in later[0]['reason'], later[:1]
    assert runs_k['driver'] == '550.127.05' and runs_k['state']['status'] == 'finished'
    assert runs_k['lock'] is None, runs_k['lock']         # released at the end
    # The soft pre-drain: the mark set while gpu-02 was pending (Slurm Weight 1 + 1000000), recorded in the ledger, outlives
    # the kill (the node is caught in flight, the ledger names it) and is taken back by the resumed run: weight 1 again.
    if phase == PHASES[0]:
        assert (caught['marks'][node]['before'], caught['marks'][node]['set']) == (1, 1000001), caught['marks']
        assert caught['weight'] == '1000001', caught
    assert runs_k['weight'] == '1' and runs_k['marks'] == {}, (runs_k['weight'], runs_k['marks'])
    scenario.observed('%s; the re-run resumed the same run, re-admitted the node as caught and ran its procedure again: '
                      'rolled_back after the last kill (DCGM fails on 580), validated on 550 before it was uncordoned'
                      % ('caught in flight, the ledger written ahead of the cordon' if phase in ('admitted', 'cordoned')
                         else 'caught in flight, drained in Slurm'))


def test_a_stale_lock_from_a_dead_controller(reliability, runs_k):
    scenario = reliability.scenario('controller fault', 'a stale fleet lock from a dead controller',
                                    injected='the fleet lock written for a running `sleep` (same host), then that process killed')
    live = runs_k['live']
    assert live.returncode != 0 and 'held by run live-controller' in live.stdout, failures(live)
    assert runs_k['live_runs'] == []          # refused before any ledger
    assert runs_k['stale_holder']['run_id'] == 'live-controller'
    assert runs_k['after_first']['run_id'] == KILL_RUN, runs_k['after_first']     # taken over once its pid was gone
    # Every re-run after a kill found the lock of the killed controller and took it over, saying so.
    assert 'took over the fleet lock of run %s' % KILL_RUN in runs_k['final'].stdout + runs_k['final'].stderr, failures(runs_k['final'])
    reliability.check_rollout(runs_k['run_dir'], KILL_RUN, gpus_per_node=GPUS)
    scenario.observed('refused while the holder runs (naming its run, host and pid); taken over with a warning naming the '
                      'dead holder once its pid is gone, and after each SIGKILL of the controller')


@pytest.fixture(scope='module')
def runs_l(fleet, tmp_path_factory):
    """gpu-04, gpu-06, gpu-10 (healthy after run N: gpu-05 is left broken by its failed rollback), reboot only, window 1,
    the run folder on a 512 KiB tmpfs: full while the first node reboots, freed and run again; read-only while the second
    node reboots, made writable and run again."""
    nodes = ['gpu-04', 'gpu-06', 'gpu-10']
    for node in nodes:
        resume(fleet, node)
    folder = str(tmp_path_factory.mktemp('run-l'))
    mount = os.path.join(folder, 'ledger-fs')
    run_dir = os.path.join(mount, 'runs')
    os.makedirs(mount)
    subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=512k,mode=0750', 'gpufleet-ledger', mount], check=True)
    filler = os.path.join(mount, 'filler')
    found = {'run_dir': run_dir}
    try:
        argv = command(inventory(fleet, folder), run_dir, nodes, gpufleet_window=1)
        boots = {node: fleet.node_exec(node, 'cat', '/proc/sys/kernel/random/boot_id').stdout for node in nodes}

        def stop_when_rebooting(kind, fault):
            before = [event['node'] for event in events_of(run_dir) if event['to'] == 'admitted']
            output = os.path.join(folder, kind + '.log')
            process = start(argv, output)
            node = poll(lambda: [event['node'] for event in events_of(run_dir) if event['to'] == 'rebooting' and event['node'] not in before],
                        300, 'a node rebooting')[0]
            fault()
            process.wait(timeout=1800)
            with open(output, encoding='utf-8') as handle:
                text = handle.read()
            found[kind] = {'node': node, 'rc': process.returncode, 'stdout': text, 'state': state_of(run_dir),
                           'boots': {other: fleet.node_exec(other, 'cat', '/proc/sys/kernel/random/boot_id').stdout for other in nodes},
                           'schedulable': schedulable(fleet, nodes)}

        def fill():
            with open(filler, 'wb') as handle:
                try:
                    while True:
                        handle.write(b'\0' * 65536)
                        handle.flush()
                except OSError:
                    pass

        stop_when_rebooting('full', fill)
        os.unlink(filler)
        stop_when_rebooting('read-only', lambda: subprocess.run(['mount', '-o', 'remount,ro', mount], check=True))
        subprocess.run(['mount', '-o', 'remount,rw', mount], check=True)
        found['final'] = run(argv)
        found['boots_before'] = boots
        found['schedulable'] = schedulable(fleet, nodes)
        # check_rollout reads the ledger from a copy: the tmpfs goes at the end of the fixture.
        copy = os.path.join(folder, 'copy')
        subprocess.run(['cp', '-a', run_dir, copy], check=True)
        found['copy'] = copy
    finally:
        subprocess.run(['umount', '-l', mount], check=False)
    return found


def storage_scenario(reliability, runs_l, kind, error, injected):
    scenario = reliability.scenario('controller fault', 'the ledger folder %s mid-run' % kind, injected=injected)
    stopped = runs_l[kind]
    node = stopped['node']
    others = [other for other in ('gpu-04', 'gpu-06', 'gpu-10') if stopped['state']['nodes'][other]['state'] == 'pending']
    assert stopped['rc'] != 0 and error in stopped['stdout'], stopped['stdout'][-4000:]
    # Nothing after the fault: the nodes still pending were not admitted, cordoned or rebooted.
    assert others, stopped['state']['nodes']
    for other in others:
        assert stopped['schedulable'][other], (other, stopped['schedulable'])
        assert stopped['boots'][other] == runs_l['boots_before'][other], other
    final = runs_l['final']
    assert final.returncode == 0, failures(final)
    states = reliability.check_rollout(runs_l['copy'], gpus_per_node=GPUS)
    reliability.check_schedulable(states, runs_l['schedulable'])
    assert set(states.values()) == {'done'}, states
    return scenario, node, others


def test_the_ledger_folder_full(reliability, runs_l):
    scenario, node, others = storage_scenario(reliability, runs_l, 'full', 'No space left on device',
                                              'the run folder on a 512 KiB tmpfs, filled while the first node reboots')
    scenario.observed('the node in flight finished its procedure; the gate could not write the next admission and stopped the run '
                      '(No space left on device); %d node(s) never touched; once space was freed the re-run resumed the node '
                      'caught in flight and finished every node done' % len(others))


def test_the_ledger_folder_read_only(reliability, runs_l):
    scenario, node, others = storage_scenario(reliability, runs_l, 'read-only', 'Read-only file system',
                                              'the run folder remounted read-only while the next node reboots')
    scenario.observed('the node in flight finished its procedure; the gate could not write the next admission and stopped the run '
                      '(Read-only file system); %d node(s) never touched; once writable the re-run resumed the node '
                      'caught in flight and finished every node done' % len(others))


# ------------------------------------------------------------------------------------------------ the scheduler gone

@pytest.fixture(scope='module')
def run_s(fleet, tmp_path_factory):
    """gpu-07, gpu-08, gpu-09, reboot only, window 1, gpufleet_scheduler_timeout 5: slurmctld stopped (SIGSTOP: it takes
    connections and never answers) while the first node reboots, until the playbook ends."""
    nodes = ['gpu-07', 'gpu-08', 'gpu-09']
    for node in nodes:
        resume(fleet, node)
    folder = str(tmp_path_factory.mktemp('run-s'))
    run_dir = os.path.join(folder, 'runs')
    environment = fleet.vars['gpufleet_slurm_environment']
    controller = slurm_sim.read_record(slurm_sim.state_dir_of(environment))['slurmctld']
    argv = command(inventory(fleet, folder), run_dir, nodes, gpufleet_window=1, gpufleet_scheduler_timeout=5)
    output = os.path.join(folder, 'run.log')
    process = start(argv, output)
    stopped = False
    try:
        node = poll(lambda: [event['node'] for event in events_of(run_dir) if event['to'] == 'rebooting'], 900, 'a node rebooting')[0]
        os.kill(controller['pid'], signal.SIGSTOP)
        stopped = True
        process.wait(timeout=1800)
    finally:
        if stopped:
            os.kill(controller['pid'], signal.SIGCONT)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    with open(output, encoding='utf-8') as handle:
        stdout = handle.read()
    found = {'run_dir': run_dir, 'node': node, 'rc': process.returncode, 'stdout': stdout, 'state': state_of(run_dir),
             'schedulable': schedulable(fleet, nodes)}
    for other in nodes:
        resume(fleet, other)
    return found


def test_slurmctld_gone_mid_run(reliability, run_s):
    scenario = reliability.scenario('scheduler fault', 'slurmctld gone mid-run',
                                    injected='kill -STOP slurmctld while the first node reboots (it never answers again during the run); '
                                             'gpufleet_scheduler_timeout 5')
    node, state = run_s['node'], run_s['state']
    assert run_s['rc'] != 0 and 'rollout paused' in run_s['stdout'] and 'did not answer' in run_s['stdout'], run_s['stdout'][-4000:]
    assert state['status'] == 'paused' and state['pause']['rule'] == 'scheduler', state['pause']
    states = reliability.check_rollout(run_s['run_dir'], gpus_per_node=GPUS, stopped=True)
    reliability.check_schedulable(states, run_s['schedulable'])
    waiting = sorted(other for other in states if other != node)
    assert {other: states[other] for other in waiting} == {other: 'pending' for other in waiting}, states
    assert all(run_s['schedulable'][other] for other in waiting), run_s['schedulable']
    assert states[node] == 'quarantined' and not run_s['schedulable'][node], (states, state['nodes'][node]['reason'])
    scenario.observed('the gate asked again with a doubling pause, then paused the run (rule scheduler) and admitted nothing more: '
                      'the waiting nodes stay pending, untouched; the node in flight could not be uncordoned and is quarantined, '
                      'still drained; the run ends paused and a re-run resumes it')
