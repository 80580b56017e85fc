# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.lifecycle.node_upgrade (with node_validate) and the rolling_restart playbook on the simulated fleet.

One fleet for the whole module (build/sim-node-upgrade: 8 nodes on the 550 branch, real Slurm, a Redfish BMC per node); the
Kubernetes cases run against a fake Kubernetes API started for the same nodes.  Each case works on its own
node(s), so the cases do not depend on each other's order:

gpu-01 happy path (Slurm)        gpu-05 driver_reload
gpu-07 admin-drained             gpu-08 long job, short timeout
gpu-02, gpu-05 Kubernetes happy path / quarantine (after their Slurm cases, reboot-only)
gpu-06, gpu-07, gpu-08 batch mode: serial [1, 2], max_fail_percentage 0, a failing canary.

The node faults during a real rollout (DCGM failing on the new pin or on both, a reboot that never returns, a hang
with a BMC power cycle, dpkg failing mid-install, a GPU lost) are in test_reliability_faults.py: one window-mode
rollout injects them all.
"""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._ledger import FileBackend, RunLedger
from conftest import ROOT, SIM, fleet_up

sys.path.insert(0, os.path.join(SIM, 'slurm'))
sys.path.insert(0, SIM)

import kube_fleet  # noqa: E402  pylint: disable=wrong-import-position,import-error
import slurm_sim  # noqa: E402  pylint: disable=wrong-import-position,import-error

FLEET_STATE = os.path.join(ROOT, 'build', 'sim-node-upgrade')
PLAYBOOK = os.path.join(os.path.dirname(__file__), 'playbooks', 'node_upgrade.yml')
ROLLING_RESTART = os.path.join(ROOT, 'playbooks', 'rolling_restart.yml')
PIN_580 = {'driver': '580.65.06', 'fabric_manager': '580.65.06', 'container_toolkit': '1.17.0', 'dcgm': '4.1.0'}
# The simulated nodes' boot time (PID 1) and Xid log; short timeouts.
SIM_VARS = {'gpufleet_boot_time_command': 'stat -c %Z /proc/1', 'gpufleet_reboot_timeout': 45, 'gpufleet_drain_timeout': 20,
            'node_upgrade_wait_sleep': 1,
            'node_validate_kernel_log_command': ['sh', '-c', 'cat /var/lib/gpufleet-sim/xid.log 2>/dev/null; true']}


@pytest.fixture(scope='module')
def fleet():
    yield from fleet_up(FLEET_STATE, 8, 'slurm', '--bmc')


def upgrade(fleet, node, *extra, **variables):
    """Run node_upgrade on ``node``; returns (PlayResult, node_upgrade_result)."""
    values = dict(SIM_VARS, target=node)
    values.update(variables)
    result = fleet.playbook(PLAYBOOK, '-e', json.dumps(values), *extra)
    shown = result.task('Show the result').get(node, {})
    assert 'node_upgrade_result' in shown, 'no result for %s (rc=%s):\n%s' % (node, result.rc, failures(result))
    return result, shown['node_upgrade_result']


def failures(result):
    found = ['%s %s: %s' % (host, task['task']['name'], outcome.get('msg', ''))
             for play in result.document['plays'] for task in play['tasks'] for host, outcome in task['hosts'].items()
             if outcome.get('failed') or outcome.get('unreachable')]
    return '\n'.join(found) + '\n' + result.stderr[-2000:]


def slurm(fleet, node):
    return slurm_sim.node_state(fleet.vars['gpufleet_slurm_environment'], node)


def weights_set(fleet, node):
    """The weights slurmctld's own log says were set on ``node`` (its ``_update_node_weight`` lines), in order."""
    path = os.path.join(slurm_sim.state_dir_of(fleet.vars['gpufleet_slurm_environment']), 'log', 'slurmctld.log')
    found = []
    with open(path, encoding='utf-8', errors='replace') as handle:
        for line in handle:
            if '_update_node_weight: nodes ' in line:
                names, weight = line.split('_update_node_weight: nodes ', 1)[1].split(' weight set to: ')
                if node in names.split(','):
                    found.append(weight.strip())
    return found


def loaded_driver(fleet, node):
    return json.loads(fleet.node_exec(node, 'cat', '/run/gpufleet-sim/boot.json').stdout)


def check(result, name):
    return [entry for entry in result['validation'] or [] if entry['name'] == name][0]


def ledger_of(tmp_path, *nodes):
    """A rollout ledger for ``nodes`` (what the rollout gate creates) and the gpufleet_ledger that points node_upgrade at it."""
    RunLedger.create(FileBackend(str(tmp_path)), 'run-1', inventory='sim', nodes=dict((node, {'gpus': 8}) for node in nodes))
    return {'backend': 'file', 'run_dir': str(tmp_path), 'run_id': 'run-1'}


def walked(tmp_path, node):
    """The node's ledger events (from, to) in order, and its state in state.json."""
    with open(os.path.join(str(tmp_path), 'run-1', 'ledger.jsonl'), encoding='utf-8') as handle:
        events = [json.loads(line) for line in handle]
    state = RunLedger.open(FileBackend(str(tmp_path)), 'run-1').state     # state.json and the events after it
    return [(event['from'], event['to']) for event in events if event['node'] == node], state['nodes'][node]


def test_happy_path_slurm(fleet, tmp_path):
    node = 'gpu-01'
    ledger = ledger_of(tmp_path, node)
    run, result = upgrade(fleet, node, gpufleet_pin=PIN_580, gpufleet_ledger=ledger)
    assert run.rc == 0, failures(run)
    assert result['state'] == 'done', result
    assert (result['versions_before']['driver'], result['versions_after']['driver']) == ('550.127.05', '580.65.06')
    assert all(entry['passed'] for entry in result['validation']), result['validation']
    assert {'precheck', 'drain', 'converge', 'reboot', 'validate', 'uncordon'} <= set(result['seconds'])
    state = slurm(fleet, node)
    assert 'DRAIN' not in state['State'], state
    assert loaded_driver(fleet, node)['driver'] == '580.65.06'
    # Every phase moved the node in the rollout ledger, along legal transitions, to done.
    events, record = walked(tmp_path, node)
    assert events == [('pending', 'admitted'), ('admitted', 'cordoned'), ('cordoned', 'drained'), ('drained', 'converging'),
                      ('converging', 'rebooting'), ('rebooting', 'validating'), ('validating', 'done')]
    assert record['state'] == 'done'


def test_driver_reload_changes_the_loaded_driver_without_a_reboot(fleet):
    node = 'gpu-05'
    before = loaded_driver(fleet, node)
    run, result = upgrade(fleet, node, gpufleet_pin=PIN_580, gpufleet_reboot_method='driver_reload')
    assert run.rc == 0, failures(run)
    assert result['state'] == 'done', result
    assert result['reboot']['reloaded'] and not result['reboot']['rebooted'], result['reboot']
    assert result['reboot']['used'] == 'driver_reload', result['reboot']
    after = loaded_driver(fleet, node)
    assert after['boot_id'] == before['boot_id'] and after['driver'] == '580.65.06' and 'reloaded_at' in after


def test_admin_drained_node_is_left_alone(fleet):
    node = 'gpu-07'
    environment = fleet.vars['gpufleet_slurm_environment']
    slurm_sim.scontrol(environment, 'update', 'NodeName=' + node, 'State=DRAIN', 'Reason=admin: fan replacement')
    try:
        run, result = upgrade(fleet, node, gpufleet_pin=PIN_580)
        assert run.rc == 0, failures(run)
        assert result['state'] == 'left_alone' and result['phase'] == 'drain', result
        state = slurm(fleet, node)
        assert 'DRAIN' in state['State'] and state['Reason'].startswith('admin: fan replacement'), state
        assert loaded_driver(fleet, node)['driver'] == '550.127.05'
    finally:
        slurm_sim.scontrol(environment, 'update', 'NodeName=' + node, 'State=RESUME')


def test_long_job_and_short_drain_timeout_defer(fleet):
    node = 'gpu-08'
    environment = fleet.vars['gpufleet_slurm_environment']
    job = slurm_sim.submit_job(environment, node, 600)
    try:
        slurm_sim.wait_for(environment, node, lambda state: 'ALLOCATED' in state or 'MIXED' in state, timeout=30)
        before = slurm(fleet, node)
        run, result = upgrade(fleet, node, gpufleet_pin=PIN_580, gpufleet_drain_timeout=3)
        assert run.rc == 0, failures(run)
        assert result['state'] == 'deferred' and result['phase'] == 'drain', result
        after = slurm(fleet, node)
        assert (after['State'], after.get('Reason')) == (before['State'], before.get('Reason')), (before, after)
        assert loaded_driver(fleet, node)['driver'] == '550.127.05'
    finally:
        subprocess.run(['scancel', job], env=dict(os.environ, **environment), check=False, capture_output=True)


@pytest.fixture(scope='module')
def kube(fleet):
    return kube_fleet.serve_fleet(os.path.join(FLEET_STATE, 'kube'), fleet.nodes)


def kube_node(kubeconfig, node):
    process = subprocess.run(['kubectl', 'get', 'node', node, '-o', 'json'], env=dict(os.environ, KUBECONFIG=kubeconfig),
                             capture_output=True, text=True, check=True)
    return json.loads(process.stdout)


def test_happy_path_kubernetes(fleet, kube):
    node = 'gpu-02'   # on 550
    run, result = upgrade(fleet, node, gpufleet_pin=PIN_580, gpufleet_scheduler='kubernetes', gpufleet_kubeconfig=kube)
    assert run.rc == 0, failures(run)
    assert result['state'] == 'done' and result['versions_after']['driver'] == '580.65.06', result
    document = kube_node(kube, node)
    assert not document['spec'].get('unschedulable') and document['metadata']['labels'].get('gpufleet.io/state') == 'done'


def test_quarantine_on_kubernetes_taints_and_labels(fleet, kube):
    node = 'gpu-05'
    fleet.fleet('fault', node, 'diag_fail')
    try:
        run, result = upgrade(fleet, node, node_upgrade_converge=False, node_upgrade_reboot='always',
                              gpufleet_scheduler='kubernetes', gpufleet_kubeconfig=kube)
    finally:
        fleet.fleet('fault', node, 'clear')
    assert run.rc == 0, failures(run)
    assert result['state'] == 'quarantined', result
    document = kube_node(kube, node)
    assert document['spec'].get('unschedulable') and document['metadata']['labels']['gpufleet.io/state'] == 'quarantined'
    assert [taint for taint in document['spec'].get('taints', []) if taint['key'] == 'gpufleet.io/quarantine'], document['spec']
    assert 'dcgm_diag_r1' in document['metadata']['annotations']['gpufleet.io/reason']


def test_batch_mode_stops_at_a_failing_canary(fleet, tmp_path):
    nodes = ['gpu-06', 'gpu-07', 'gpu-08']
    fleet.fleet('fault', nodes[0], 'diag_fail')
    results = str(tmp_path / 'results')
    values = dict(SIM_VARS, gpufleet_hosts=','.join(nodes), gpufleet_serial=[1, 2], gpufleet_max_fail_percentage=0,
                  gpufleet_results_dir=results, gpufleet_run_dir=str(tmp_path / 'runs'))
    try:
        run = fleet.playbook(ROLLING_RESTART, '-e', json.dumps(values))
    finally:
        fleet.fleet('fault', nodes[0], 'clear')
    assert run.rc != 0
    printed = [outcome['msg'] for play in run.document['plays'] for task in play['tasks'] for outcome in task['hosts'].values()
               if task['task']['name'].endswith("Print every node's result")]
    assert len(printed) == 1, printed
    lines = printed[0]
    assert lines[0].split()[:2] == ['gpu-06', 'quarantined'], lines
    assert [line.split()[:2] for line in lines[1:3]] == [['gpu-07', 'pending'], ['gpu-08', 'pending']], lines
    assert lines[-1].startswith('rollout stops: 1 of 1 node(s)'), lines
    assert sorted(os.listdir(results)) == ['gpu-06.json']
    with open(os.path.join(results, 'gpu-06.json'), encoding='utf-8') as handle:
        assert json.load(handle)['state'] == 'quarantined'
    # The later batch never started: its nodes are untouched.
    assert all('DRAIN' not in slurm(fleet, node)['State'] for node in nodes[1:])
    # Batch mode on the rails of window mode: one run in the ledger, paused by the failure budget, the node's final event in it.
    events, state = run_ledger(str(tmp_path / 'runs'))
    assert (state['mode'], state['status'], state['pause']['rule']) == ('batch', 'paused', 'budget'), state['pause']
    assert {node: state['nodes'][node]['state'] for node in nodes} == {'gpu-06': 'quarantined', 'gpu-07': 'pending', 'gpu-08': 'pending'}
    finals = [event for event in events if event['node'] == 'gpu-06' and event['to'] == 'quarantined']
    assert len(finals) == 1 and finals[0]['details']['signature'][0] == 'validate', finals


CONVERGE = os.path.join(ROOT, 'playbooks', 'converge.yml')
ROLLBACK = os.path.join(ROOT, 'playbooks', 'rollback.yml')


def results_of(folder):
    found = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        with open(os.path.join(folder, name), encoding='utf-8') as handle:
            found[name[:-len('.json')]] = json.load(handle)
    return found


def run_ledger(run_dir):
    """(events, state) of the one run under ``run_dir`` (window mode's ledger)."""
    backend = FileBackend(run_dir)
    run_ids = backend.run_ids()
    assert len(run_ids) == 1, run_ids
    return backend.read_events(run_ids[0], 0)[0], RunLedger.open(backend, run_ids[0]).state


@pytest.mark.parametrize('mode', ['batch', 'window'])
def test_converge_only_the_drifted_then_roll_back(fleet, tmp_path, mode):
    """converge.yml upgrades a drifted node; run again it touches nothing (the node is in sync); rollback.yml takes the
    node back to the previous pin gpu_stack recorded. Batch mode (serial), and window mode (the rollout gate and its
    ledger, gpufleet_window as an extra variable)."""
    node = 'gpu-04'   # on 550, in service
    first, second, back = (str(tmp_path / name) for name in ('converge', 'again', 'rollback'))
    window = {'gpufleet_window': 1, 'gpufleet_canary': 0} if mode == 'window' else {}

    def play(playbook, results, name):
        values = dict(SIM_VARS, gpufleet_hosts=node, gpufleet_results_dir=results, **window)
        if playbook == CONVERGE:
            values['gpufleet_pin'] = PIN_580
        values['gpufleet_run_dir'] = str(tmp_path / ('runs-' + name))
        return fleet.playbook(playbook, '-e', json.dumps(values))

    run = play(CONVERGE, first, 'converge')
    assert run.rc == 0, failures(run)
    assert results_of(first)[node]['state'] == 'done', results_of(first)
    assert loaded_driver(fleet, node)['driver'] == '580.65.06'
    booted = loaded_driver(fleet, node)['boot_id']
    events, state = run_ledger(str(tmp_path / 'runs-converge'))
    assert (state['mode'], state['status'], state['nodes'][node]['state']) == (mode, 'finished', 'done'), state
    assert [event['to'] for event in events if event['node'] == node][:2] == ['admitted', 'cordoned']
    assert all(state['pin'][name] == version for name, version in PIN_580.items()), state['pin']     # the recorded pin
    # The soft pre-drain in either mode: weighed 1 + 1000000 while it waited, 1 again once done (slurmctld's own log), nothing
    # left recorded in the ledger.
    assert weights_set(fleet, node)[-2:] == ['1000001', '1'] and slurm(fleet, node)['Weight'] == '1', weights_set(fleet, node)
    assert RunLedger.open(FileBackend(str(tmp_path / 'runs-converge')), state['run_id']).soft_marks() == {}

    again = play(CONVERGE, second, 'again')
    assert again.rc == 0, failures(again)
    assert results_of(second) == {}
    assert loaded_driver(fleet, node)['boot_id'] == booted and 'DRAIN' not in slurm(fleet, node)['State']

    rolled = play(ROLLBACK, back, 'rollback')
    assert rolled.rc == 0, failures(rolled)
    assert results_of(back)[node]['state'] == 'done', results_of(back)
    assert loaded_driver(fleet, node)['driver'] == '550.127.05'
    assert 'DRAIN' not in slurm(fleet, node)['State']
    _events, state = run_ledger(str(tmp_path / 'runs-rollback'))
    assert (state['status'], state['nodes'][node]['state']) == ('finished', 'done'), state


# nccl-tests all_reduce_perf (installed per node with `fleet nccl-tests`) and the driver_reload fallback (fault gpu_held).
# These cases use nodes the cases above leave on 550 and in service (gpu-07, gpu-08, gpu-04), so they run in any order.
NCCL_COMMAND = ['all_reduce_perf', '-b', '8M', '-e', '1G', '-f', '2', '-g', '8']


def printed_busbw(text):
    """The "# Avg bus bandwidth" all_reduce_perf printed, as node_validate reports it (three decimals)."""
    found = [line.split(':', 1)[1] for line in text.splitlines() if line.startswith('# Avg bus bandwidth')]
    assert found, text
    return '%.3f' % float(found[0])


def reported_busbw(message):
    """The average bus bandwidth in a nccl check's message ("... average bus bandwidth 26.123 GB/s ...")."""
    assert 'average bus bandwidth ' in message, message
    return message.split('average bus bandwidth ', 1)[1].split()[0]


def test_nccl_validation_passes_and_reports_the_bus_bandwidth(fleet):
    node = 'gpu-07'
    fleet.fleet('nccl-tests', node)
    run, result = upgrade(fleet, node, gpufleet_pin=PIN_580, node_validate_nccl_command=NCCL_COMMAND, node_validate_nccl_min_busbw=100)
    assert run.rc == 0, failures(run)
    assert result['state'] == 'done' and result['versions_after']['driver'] == '580.65.06', result
    nccl = check(result, 'nccl')
    # The same run in the node prints the same average (the fake is deterministic per node and size).
    busbw = printed_busbw(fleet.node_exec(node, *NCCL_COMMAND).stdout)
    assert nccl['passed'] and 'average bus bandwidth %s GB/s (threshold 100' % busbw in nccl['message'], (nccl, busbw)
    assert 'DRAIN' not in slurm(fleet, node)['State']


def test_nccl_slow_on_the_new_pin_rolls_back_naming_the_bus_bandwidth(fleet):
    node = 'gpu-08'
    fleet.fleet('nccl-tests', node)
    fleet.fleet('fault', node, 'nccl_slow', 'busbw=40', 'branch=580')
    try:
        run, result = upgrade(fleet, node, gpufleet_pin=PIN_580, node_validate_nccl_command=NCCL_COMMAND, node_validate_nccl_min_busbw=100)
    finally:
        fleet.fleet('fault', node, 'clear')
    assert run.rc == 0, failures(run)
    assert result['state'] == 'rolled_back', result
    nccl = check(result, 'nccl')
    assert not nccl['passed'] and 'below the threshold 100' in nccl['message'], nccl
    measured = reported_busbw(nccl['message'])
    assert float(measured) < 40, nccl
    assert 'nccl' in result['reason'] and measured in result['reason'], result['reason']
    assert check({'validation': result['rollback_validation']}, 'nccl')['passed'], result['rollback_validation']
    assert result['versions_after']['driver'] == '550.127.05' and loaded_driver(fleet, node)['driver'] == '550.127.05'
    assert 'DRAIN' not in slurm(fleet, node)['State']


def test_driver_reload_falls_back_to_a_reboot_when_a_process_holds_the_gpus(fleet):
    node = 'gpu-04'
    before = loaded_driver(fleet, node)
    fleet.fleet('fault', node, 'gpu_held', 'gpu=0')
    try:
        holder = fleet.node_exec(node, 'cat', '/run/gpufleet-sim/gpu-held.pid').stdout.strip()
        assert holder.isdigit(), 'no gpu_held holder in %s' % node
        # What driver_reload reads: the holder's descriptors link to the GPU's device nodes.
        links = fleet.node_exec(node, 'sh', '-c', 'readlink /proc/%s/fd/*' % holder).stdout.split()
        assert '/dev/nvidia0' in links and '/dev/nvidiactl' in links, links
        run, result = upgrade(fleet, node, gpufleet_pin=PIN_580, gpufleet_reboot_method='driver_reload')
    finally:
        fleet.fleet('fault', node, 'clear')
    assert run.rc == 0, failures(run)
    assert result['state'] == 'done', result
    report = result['reboot']
    assert report['method'] == 'driver_reload' and not report['reloaded'] and report['rebooted'], report
    assert report['used'] == 'os', report
    assert 'held by' in report['fallback'] and 'pid %s:' % holder in report['fallback'] and '/dev/nvidia0' in report['fallback'], report
    after = loaded_driver(fleet, node)
    assert after['boot_id'] != before['boot_id'] and after['driver'] == '580.65.06' and 'reloaded_at' not in after, after
    # nccl-tests was never installed on this node: the check is skipped, not run.
    assert check(result, 'nccl')['message'].startswith('skipped: nccl-tests all_reduce_perf is not installed'), check(result, 'nccl')
    assert 'DRAIN' not in slurm(fleet, node)['State']
