# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One rollout over several controllers (issue 26): ``ansible-playbook`` processes started with the same gpufleet_run_id,
each a ``--limit`` shard of the fleet (plus localhost, where the start and the finish run), join one run and share its gate.

One simulated fleet for the module (build/sim-multi: 9 nodes of 8 GPUs, real Slurm, no BMC); reboot-only rolling restarts
(no pin) in window mode with short timeouts. Three controllers, each -f 6, over the shards SHARDS (the plan's order is
gpu-01..09, so the first window takes one node of each shard). Each run has its own gpufleet_run_dir under pytest's tmp_path.

    run F (window 3, floor 60 % with gpu-09 drained by an admin, budget 34 %): the three finish one run; the window, the
          floor and the budget hold fleet-wide; a second rollout (another run id, or none) tried while they run is refused
    run B (every node fails DCGM, budget 12 %: one failure allowed): the budget (and the pin-fault detector) pause all three
    run O (window 3): an operator's pause (rollout_control.yml) stops the admissions of all three; the operator resumes it
    run D (window 3): controller 2 killed with SIGKILL (its process group) right after its first admission; the two others
          finish theirs, its node stays held by the dead controller, a rerun of shard 2 resumes it and finishes the run
    run K (window 3, the Kubernetes ledger backend on the fake API server, the Slurm scheduler): three ansible-runner jobs at
          once as AWX runs a sliced job (each a pared inventory of its 3 nodes, awx_workflow_job_id shared, awx_job_id its
          own, no gpufleet_run_id) join run awx-<workflow>-rolling_restart and finish it
"""

import datetime
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, SIM, admissions, ansible_environment, fleet_up, in_flight_over_time, require_root

sys.path.insert(0, os.path.join(SIM, 'slurm'))
sys.path.insert(0, os.path.join(SIM, 'kube'))

import fake_apiserver  # noqa: E402  pylint: disable=wrong-import-position,import-error
import slurm_sim  # noqa: E402  pylint: disable=wrong-import-position,import-error

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger, _members, _rollout  # noqa: E402

FLEET_STATE = os.path.join(ROOT, 'build', 'sim-multi')
ROLLING_RESTART = os.path.join(ROOT, 'playbooks', 'rolling_restart.yml')
CONTROL = os.path.join(ROOT, 'playbooks', 'rollout_control.yml')
SIM_VARS = {'gpufleet_boot_time_command': 'stat -c %Z /proc/1', 'gpufleet_reboot_timeout': 45, 'gpufleet_drain_timeout': 20,
            'node_upgrade_wait_sleep': 1, 'gpufleet_gate_poll': 1,
            'node_validate_kernel_log_command': ['sh', '-c', 'cat /var/lib/gpufleet-sim/xid.log 2>/dev/null; true']}
NODES = ['gpu-%02d' % number for number in range(1, 10)]
GPUS = 8
# Three controllers; a shard takes every third node, so that each has a node in the first window.
SHARDS = (('gpu-01', 'gpu-04', 'gpu-07'), ('gpu-02', 'gpu-05', 'gpu-08'), ('gpu-03', 'gpu-06', 'gpu-09'))
# Window 3 and no canary; a budget of 34 % of 9 nodes allows 3 failures: gpufleet_budget_window caps the window at 4, not 3.
WINDOW = dict(SIM_VARS, gpufleet_window=3, gpufleet_canary=0, gpufleet_max_fail_percentage=34)
FINAL = ('done', 'rolled_back', 'quarantined', 'deferred', 'left_alone')
IN_FLIGHT = ('admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'rolling_back')
# How long a controller may take (a run of 9 nodes takes a few minutes on a 2-core machine).
RUN_TIMEOUT = 900


@pytest.fixture(scope='module')
def fleet():
    require_root()
    yield from fleet_up(FLEET_STATE, len(NODES), 'slurm')


# ---------------------------------------------------------------------------------------------------------------- helpers

class Controller:
    """One ``ansible-playbook`` of a run (JSON callback), in its own session so that a SIGKILL of its process group reaches its
    workers; stdout and stderr go to files in ``folder``. ``limit``: its shard (localhost is added: the start and the finish
    play run there)."""

    def __init__(self, folder, name, values, limit=None, inventory=None, playbook=ROLLING_RESTART, forks=6):
        self.name = name
        self.out = os.path.join(folder, name + '.json')
        self.err = os.path.join(folder, name + '.stderr')
        argv = ['ansible-playbook', '-i', inventory, playbook, '-f', str(forks), '-e', json.dumps(values)]
        if limit is not None:
            argv += ['--limit', ','.join(list(limit) + ['localhost'])]
        with open(self.out, 'w', encoding='utf-8') as out, open(self.err, 'w', encoding='utf-8') as err:
            self.process = subprocess.Popen(argv, env=ansible_environment(), cwd=ROOT, stdout=out, stderr=err,  # pylint: disable=consider-using-with
                                            start_new_session=True)
        # The member name the start gives it: <host>:<ansible-playbook pid>.
        self.member = _members.member_id(_ledger.socket.gethostname(), self.process.pid)

    def wait(self, timeout=RUN_TIMEOUT):
        try:
            self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.kill()
        return self.process.returncode

    def kill(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()

    @property
    def rc(self):
        return self.process.returncode

    @property
    def stdout(self):
        with open(self.out, encoding='utf-8') as handle:
            return handle.read()

    def failures(self):
        with open(self.err, encoding='utf-8') as handle:
            stderr = handle.read()
        return '\n%s rc=%s\n%s\n%s' % (self.name, self.rc, self.stdout[-6000:], stderr[-3000:])

    def task(self, name):
        """{host: result} of the task called ``name`` (last play that has it)."""
        try:
            document = json.loads(self.stdout)
        except ValueError:
            raise AssertionError('ansible-playbook printed no JSON' + self.failures()) from None
        found = None
        for play in document['plays']:
            for task in play['tasks']:
                if task['task']['name'] == name:
                    found = task['hosts']
        if found is None:
            raise AssertionError('no task named %r' % name + self.failures())
        return found

    def hosts(self):
        """Every host this controller ran a task on."""
        document = json.loads(self.stdout)
        return {host for play in document['plays'] for task in play['tasks'] for host in task['hosts']}

    def finish(self):
        """The result of its finish step (task "Finish the run" on localhost)."""
        return self.task('Finish the run')['localhost']


def start_shards(folder, values, inventory, shards=SHARDS, prefix='c'):
    """The controllers of one run, one per shard, started at once."""
    return [Controller(folder, '%s%d' % (prefix, index), values, limit=shard, inventory=inventory) for index, shard in enumerate(shards, 1)]


def stop_all(controllers):
    for controller in controllers:
        if controller.process.poll() is None:
            controller.kill()


def events_of(run_dir, run_id):
    """The run's ledger events ([] while there is none yet; a line being written is left out)."""
    try:
        with open(os.path.join(run_dir, run_id, 'ledger.jsonl'), encoding='utf-8') as handle:
            return [json.loads(line) for line in handle if line.endswith('\n')]
    except (OSError, ValueError):
        return []


def state_of(run_dir, run_id):
    # The reader's rule: state.json (written at run events) and the snapshots, plus the events after them.
    return _ledger.RunLedger.open(_ledger.FileBackend(run_dir), run_id).state


def members_of(run_dir, run_id):
    with open(os.path.join(run_dir, run_id, 'members.json'), encoding='utf-8') as handle:
        document = json.load(handle)
    assert document['run_id'] == run_id, document
    return document['members']


def run_events(events, to):
    """The indexes of the run-level events (node None) that moved the run to ``to``."""
    return [index for index, event in enumerate(events) if event['node'] is None and event['to'] == to]


def poll(condition, timeout, what, interval=0.3):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError('timed out after %ss waiting for %s' % (timeout, what))


def slurm_state(fleet, node):
    return slurm_sim.node_state(fleet.vars['gpufleet_slurm_environment'], node)


def drained(fleet, node):
    return 'DRAIN' in slurm_state(fleet, node)['State']


def restore(fleet):
    """The fleet as the next run needs it: no fault, every node back in service in Slurm."""
    environment = fleet.vars['gpufleet_slurm_environment']
    for node in fleet.nodes:
        fleet.fleet('fault', node, 'clear')
        state = slurm_state(fleet, node)['State']
        if 'DRAIN' in state or 'DOWN' in state:
            slurm_sim.scontrol(environment, 'update', 'NodeName=' + node, 'State=RESUME')


def validated_before_done(events, node):
    """Whether ``node``'s last ``done`` came after a ``validating`` that followed its last admission."""
    moves = [event['to'] for event in events if event['node'] == node]
    last_admission = len(moves) - 1 - moves[::-1].index('admitted')
    after = moves[last_admission:]
    return 'done' in after and 'validating' in after[:after.index('done')]


# ---------------------------------------------------------------------------------------------------------------- run F

RUN_F = 'multi-floor'
FLOOR = 0.60
ADMIN_NODE = 'gpu-09'


@pytest.fixture(scope='module')
def run_f(fleet, tmp_path_factory):
    """Three shards, window 3, floor 60 % of the 72 GPUs with gpu-09 (8 GPUs) drained by an admin: the floor lets 2 nodes out
    beside it (48 of 72 schedulable, 66.7 %), not 3 (40, 55.6 %); a budget of 34 % caps the window at 4. While they run, two
    second rollouts are tried: one with another run id, one with none (it would find the run as the last unfinished one)."""
    folder = str(tmp_path_factory.mktemp('run-f'))
    run_dir = os.path.join(folder, 'runs')
    environment = fleet.vars['gpufleet_slurm_environment']
    slurm_sim.scontrol(environment, 'update', 'NodeName=' + ADMIN_NODE, 'State=DRAIN', 'Reason=admin: fan replacement')
    values = dict(WINDOW, gpufleet_run_dir=run_dir, gpufleet_run_id=RUN_F, gpufleet_capacity_floor='%d%%' % (FLOOR * 100))
    try:
        controllers = start_shards(folder, values, fleet.inventory)
        intruders = []
        try:
            poll(lambda: admissions(events_of(run_dir, RUN_F)), 300, 'the first admission')
            for name, run_id in (('intruder', 'multi-intruder'), ('no-run-id', None)):
                second = dict(values)
                del second['gpufleet_run_id']
                if run_id:
                    second['gpufleet_run_id'] = run_id
                intruder = Controller(folder, name, second, inventory=fleet.inventory)
                intruders.append(intruder)
                intruder.wait(300)
            running_then = [controller.process.poll() is None for controller in controllers]
            holder = _ledger.FileBackend(run_dir).holder(_rollout.fleet_name(_rollout.inventory_id([fleet.inventory])))
            for controller in controllers:
                controller.wait()
        finally:
            stop_all(controllers + intruders)
        admin = slurm_state(fleet, ADMIN_NODE)
        in_service = {node: not drained(fleet, node) for node in fleet.nodes}
    finally:
        restore(fleet)
    return {'run_dir': run_dir, 'controllers': controllers, 'intruders': intruders, 'running_then': running_then, 'holder': holder,
            'events': events_of(run_dir, RUN_F), 'state': state_of(run_dir, RUN_F), 'members': members_of(run_dir, RUN_F),
            'admin': admin, 'in_service': in_service}


def test_three_controllers_finish_one_run(run_f):
    controllers, state, members = run_f['controllers'], run_f['state'], run_f['members']
    for controller in controllers:
        assert controller.rc == 0, controller.failures()
    assert state['status'] == 'finished', state['status']
    expected = dict((node, 'done') for node in NODES)
    expected[ADMIN_NODE] = 'left_alone'
    assert {node: record['state'] for node, record in state['nodes'].items()} == expected
    assert run_f['admin']['Reason'].startswith('admin: fan replacement')     # the admin's drain is the admin's
    assert all(run_f['in_service'][node] for node in NODES if node != ADMIN_NODE), run_f['in_service']
    # One member per controller, each left at its finish; the finish of the last one saw every node final and every member left.
    assert sorted(members) == sorted(controller.member for controller in controllers), members
    assert all(record['left'] is not None and record['left'] >= record['joined'] for record in members.values()), members
    finishes = {controller.member: controller.finish() for controller in controllers}
    last = max(members, key=lambda name: members[name]['left'])
    assert finishes[last]['status'] == 'finished', finishes[last]
    assert finishes[last]['members'] == {controller.member: 'left' for controller in controllers} and finishes[last]['held'] == {}, finishes[last]
    # Each controller ran its own shard's nodes only (and localhost).
    for controller, shard in zip(controllers, SHARDS):
        assert controller.hosts() == set(shard) | {'localhost'}, (controller.name, controller.hosts())


def test_the_window_and_the_floor_hold_fleet_wide(run_f):
    """Replaying the ledger: never more than the window in flight across the three, never below the floor (gpu-09's 8 GPUs
    out all along); and the floor did bind: the window would take 3 of the nodes in service, it took 2. gpu-09, drained by an
    admin, is left alone at the gate: never in flight, no slot taken."""
    sizes = []
    for event, flying in in_flight_over_time(run_f['events']):
        assert ADMIN_NODE not in flying, (event, flying)
        sizes.append(len(flying))
        out = GPUS * len(flying | {ADMIN_NODE})
        assert (len(NODES) * GPUS - out) >= FLOOR * len(NODES) * GPUS, (event, flying)
        assert len(flying) <= 3, (event, flying)
    assert max(sizes) == 2, sizes


def test_every_controller_admitted_its_own_nodes(run_f):
    by_node = {event['node']: event['details']['member'] for event in admissions(run_f['events'])}
    owner = {node: controller.member for controller, shard in zip(run_f['controllers'], SHARDS) for node in shard if node != ADMIN_NODE}
    assert sorted(by_node) == sorted(set(NODES) - {ADMIN_NODE}) and by_node == owner, by_node      # gpu-09: left alone at the gate
    assert {node: record.get('member') for node, record in run_f['state']['nodes'].items()} == dict(by_node, **{ADMIN_NODE: None})


def test_a_second_rollout_is_refused_while_the_run_lives(run_f):
    """Another run id, or none (the run is then the last unfinished one of the inventory: resumed, never joined, while it has a
    live controller): refused at the start naming the run, no ledger of its own, not a member, no node touched."""
    run_dir = run_f['run_dir']
    assert all(run_f['running_then']), 'the three were not running any more when the second rollouts were tried'
    for intruder in run_f['intruders']:
        assert intruder.rc != 0
        assert 'a second rollout is refused' in intruder.stdout and 'held by run %s' % RUN_F in intruder.stdout, intruder.failures()
        assert intruder.member not in run_f['members']
        assert not [event for event in run_f['events'] if (event.get('details') or {}).get('member') == intruder.member]
        assert intruder.hosts() == {'localhost'}, intruder.hosts()     # no node touched
    assert sorted(os.listdir(run_dir)) == ['locks', RUN_F]        # no ledger of their own
    assert run_f['holder']['run_id'] == RUN_F                    # the fleet lock stayed the run's


# ---------------------------------------------------------------------------------------------------------------- run B

RUN_B = 'multi-budget'
# 12 % of 9 nodes allows one failure (1.08): the budget window lets 2 nodes fly, then 1 after the first failure.
BUDGET = 12
ALLOWED = 1


@pytest.fixture(scope='module')
def run_b(fleet, tmp_path_factory):
    """Every node fails DCGM (diag_fail): the second failure spends the budget (and, the same failure twice among the first
    nodes, trips the pin-fault detector): the run pauses for all three controllers."""
    folder = str(tmp_path_factory.mktemp('run-b'))
    run_dir = os.path.join(folder, 'runs')
    values = dict(WINDOW, gpufleet_run_dir=run_dir, gpufleet_run_id=RUN_B, gpufleet_max_fail_percentage=BUDGET)
    try:
        for node in fleet.nodes:
            fleet.fleet('fault', node, 'diag_fail')
        controllers = start_shards(folder, values, fleet.inventory)
        try:
            for controller in controllers:
                controller.wait()
        finally:
            stop_all(controllers)
        cordoned = {node: drained(fleet, node) for node in fleet.nodes}
    finally:
        restore(fleet)
    return {'controllers': controllers, 'events': events_of(run_dir, RUN_B), 'state': state_of(run_dir, RUN_B), 'cordoned': cordoned}


def test_the_budget_pauses_every_controller(run_b):
    state, events = run_b['state'], run_b['events']
    for controller in run_b['controllers']:
        assert controller.rc != 0, controller.failures()
        finish = controller.finish()
        assert finish['failed'] and finish['msg'].startswith('rollout paused: ') and finish['status'] == 'paused', finish
    assert state['status'] == 'paused' and 'budget' in state['pause']['rules'], state['pause']
    failed = sorted(node for node, record in state['nodes'].items() if record['state'] in ('rolled_back', 'quarantined'))
    assert 1 <= len(failed) <= ALLOWED + 1, state['nodes']
    assert all(record['state'] == 'pending' for node, record in state['nodes'].items() if node not in failed), state['nodes']
    assert all(run_b['cordoned'][node] for node in failed)      # a failed node stays out of service
    paused = run_events(events, 'paused')
    assert len(paused) == 1, [events[index] for index in paused]
    assert not list(admissions(events[paused[0]:]))        # nobody admitted after the pause


def test_the_budget_window_held_the_failures_to_one_over_the_budget(run_b):
    failed = 0
    for event, flying in in_flight_over_time(run_b['events']):
        if event['to'] in ('rolled_back', 'quarantined'):
            failed += 1
        if event['to'] == 'admitted':
            assert len(flying) <= max(0, ALLOWED - failed) + 1, (event, flying, failed)


def test_the_pause_names_every_rule_that_holds(run_b):
    """Two nodes failed the same way among the first to finish: the pin-fault detector (threshold 2) holds with the budget."""
    state, events = run_b['state'], run_b['events']
    pause = state['pause']
    assert pause['rules'] == ['pin_suspect', 'budget'] and pause['rule'] == 'pin_suspect', pause
    assert 'pin suspect' in pause['reason'] and 'failure budget exceeded: 2 of 9 node(s) failed' in pause['reason'], pause
    event = events[run_events(events, 'paused')[0]]
    assert event['details']['rules'] == pause['rules'] and event['reason'] == pause['reason'], event


# ---------------------------------------------------------------------------------------------------------------- run O

RUN_O = 'multi-operator'


@pytest.fixture(scope='module')
def run_o(fleet, tmp_path_factory):
    """Three shards, window 3; once the first node is admitted an operator pauses the run (rollout_control.yml); when the three
    have ended, the operator resumes it."""
    folder = str(tmp_path_factory.mktemp('run-o'))
    run_dir = os.path.join(folder, 'runs')
    values = dict(WINDOW, gpufleet_run_dir=run_dir, gpufleet_run_id=RUN_O)
    control = dict(gpufleet_run_dir=run_dir, gpufleet_run_id=RUN_O)
    controllers = []
    try:
        controllers = start_shards(folder, values, fleet.inventory)
        try:
            poll(lambda: admissions(events_of(run_dir, RUN_O)), 300, 'the first admission')
            pause = Controller(folder, 'pause', dict(control, gpufleet_verb='pause', gpufleet_reason='vendor advisory'),
                               inventory=fleet.inventory, playbook=CONTROL)
            pause.wait(300)
            for controller in controllers:
                controller.wait()
        finally:
            stop_all(controllers)
        paused_events, paused_state = events_of(run_dir, RUN_O), state_of(run_dir, RUN_O)
        cordoned = {node: drained(fleet, node) for node in fleet.nodes}
        resume = Controller(folder, 'resume', dict(control, gpufleet_verb='resume', gpufleet_reason='advisory withdrawn'),
                            inventory=fleet.inventory, playbook=CONTROL)
        resume.wait(300)
    finally:
        restore(fleet)
    return {'controllers': controllers, 'pause': pause, 'events': paused_events, 'state': paused_state, 'cordoned': cordoned,
            'resume': resume, 'resumed_events': events_of(run_dir, RUN_O), 'resumed_state': state_of(run_dir, RUN_O)}


def test_an_operator_pause_stops_every_controller(run_o):
    state, events = run_o['state'], run_o['events']
    assert run_o['pause'].rc == 0, run_o['pause'].failures()
    for controller in run_o['controllers']:
        assert controller.rc != 0, controller.failures()
        assert controller.finish()['msg'].startswith('rollout paused: '), controller.finish()
    assert state['status'] == 'paused' and state['pause']['rule'] == 'operator' and state['pause']['reason'] == 'vendor advisory', state['pause']
    paused = run_events(events, 'paused')
    assert len(paused) == 1
    before, after = admissions(events[:paused[0]]), admissions(events[paused[0]:])
    assert before and after == [], after                   # admissions began, none by any controller after the pause
    # The nodes in flight at the pause finished (their slots freed, nobody took them); the others wait, untouched.
    assert {node for node, record in state['nodes'].items() if record['state'] == 'done'} == {event['node'] for event in before}, state['nodes']
    assert all(record['state'] == 'pending' for node, record in state['nodes'].items() if record['state'] != 'done'), state['nodes']
    assert not any(run_o['cordoned'].values()), run_o['cordoned']
    # The pause names every rule that holds (state.json pause.rules, the pause event's details.rules), an operator's too.
    assert state['pause'].get('rules') == ['operator'], state['pause']
    assert events[paused[0]]['details'].get('rules') == ['operator'], events[paused[0]]


def test_the_operator_resumes_the_run_of_every_controller(run_o):
    """The paused run left by the three is resumed by the operator: running again, its nodes as they were."""
    state, events = run_o['resumed_state'], run_o['resumed_events']
    assert run_o['resume'].rc == 0, run_o['resume'].failures()
    assert state['status'] == 'running' and not state.get('pause'), state.get('pause')
    assert events[:len(run_o['events'])] == run_o['events'] and [(event['to'], event['reason']) for event in events[len(run_o['events']):]] == \
        [('running', 'advisory withdrawn')]
    assert {node: record['state'] for node, record in state['nodes'].items()} == \
        {node: record['state'] for node, record in run_o['state']['nodes'].items()}


# ---------------------------------------------------------------------------------------------------------------- run D

RUN_D = 'multi-killed'


def cordoned_without_passing(events, in_service):
    """The nodes in service (``in_service``: node -> bool) that were cordoned by the run and were not validated before their
    last done (or were left alone or deferred: put back as they were)."""
    wrong = []
    for node, serving in sorted(in_service.items()):
        moves = [event['to'] for event in events if event['node'] == node]
        if not serving or 'cordoned' not in moves:
            continue
        if moves[-1] in ('left_alone', 'deferred'):
            continue
        if moves[-1] != 'done' or not validated_before_done(events, node):
            wrong.append((node, moves))
    return wrong


@pytest.fixture(scope='module')
def run_d(fleet, tmp_path_factory):
    """Three shards, window 3; controller 2 is killed (SIGKILL to its process group) as soon as it has admitted a node, the
    two others finish their shards (gpufleet_admit_timeout as a safety net: the dead controller's node holds a slot until it
    is resolved); then shard 2 is run again alone with the same run id."""
    folder = str(tmp_path_factory.mktemp('run-d'))
    run_dir = os.path.join(folder, 'runs')
    values = dict(WINDOW, gpufleet_run_dir=run_dir, gpufleet_run_id=RUN_D, gpufleet_admit_timeout=240)
    controllers = []
    try:
        controllers = start_shards(folder, values, fleet.inventory)
        killed = controllers[1]
        survivors = [controllers[0], controllers[2]]
        try:
            poll(lambda: [event for event in admissions(events_of(run_dir, RUN_D)) if event['details'].get('member') == killed.member], 300,
                 'an admission by controller 2', interval=0.1)
            killed.kill()
            killed_at = time.time()
            for controller in survivors:
                controller.wait()
        finally:
            stop_all(controllers)
        events, state, members = events_of(run_dir, RUN_D), state_of(run_dir, RUN_D), members_of(run_dir, RUN_D)
        in_service = {node: not drained(fleet, node) for node in fleet.nodes}
        rerun = Controller(folder, 'rerun', values, limit=SHARDS[1], inventory=fleet.inventory)
        rerun.wait()
        final_in_service = {node: not drained(fleet, node) for node in fleet.nodes}
    finally:
        restore(fleet)
    return {'killed': killed, 'killed_at': killed_at, 'survivors': survivors, 'events': events, 'state': state, 'members': members,
            'in_service': in_service,
            'rerun': rerun, 'final_events': events_of(run_dir, RUN_D), 'final_state': state_of(run_dir, RUN_D),
            'final_members': members_of(run_dir, RUN_D), 'final_in_service': final_in_service}


def held_nodes(run_d):
    """The nodes controller 2 admitted before it was killed."""
    return sorted(event['node'] for event in admissions(run_d['events']) if event['details'].get('member') == run_d['killed'].member)


def test_the_survivors_finish_theirs_and_the_killed_ones_stay_held(run_d):
    killed, state, members = run_d['killed'], run_d['state'], run_d['members']
    held = held_nodes(run_d)
    assert held and set(held) <= set(SHARDS[1]) and len(held) < 3, held
    for controller in run_d['survivors']:
        assert controller.rc == 0, controller.failures()
    assert state['status'] == 'running', state['status']          # not finished: the held node is not final
    nodes = {node: record['state'] for node, record in state['nodes'].items()}
    assert all(nodes[node] == 'done' for node in SHARDS[0] + SHARDS[2]), nodes
    assert all(nodes[node] in IN_FLIGHT and state['nodes'][node]['member'] == killed.member for node in held), state['nodes']
    assert all(nodes[node] == 'pending' for node in SHARDS[1] if node not in held), nodes
    # The dead member never left; the survivors did.
    assert members[killed.member]['left'] is None and all(members[controller.member]['left'] for controller in run_d['survivors']), members
    # The window counted the held node until the end: never more than 3 in flight with it.
    assert max(len(flying) for _event, flying in in_flight_over_time(run_d['events'])) <= 3


def test_a_killed_controller_admits_nothing_after_its_death(run_d):
    """ansible's workers run in sessions of their own (the SIGKILL of ansible-playbook's group does not reach them): each must
    see that its ansible-playbook is gone, also one forked just before the kill. A decision under way at the kill may still be
    written (a second of grace)."""
    killed = run_d['killed']
    late = [(event['node'], round(_ledger.epoch(event['time']) - run_d['killed_at'], 1)) for event in admissions(run_d['final_events'])
            if event['details'].get('member') == killed.member and _ledger.epoch(event['time']) > run_d['killed_at'] + 1]
    assert late == [], 'admitted by controller 2 (node, seconds after the kill at %s): %s' % (
        _ledger.iso(datetime.datetime.fromtimestamp(run_d['killed_at'], datetime.timezone.utc)), late)


def test_the_last_survivor_names_the_nodes_held_by_the_dead_controller(run_d):
    killed, members = run_d['killed'], run_d['members']
    last = max(run_d['survivors'], key=lambda controller: members[controller.member]['left'])
    finish = last.finish()
    held = held_nodes(run_d)
    assert finish['status'] == 'running' and finish['held'] == {node: killed.member for node in held}, finish
    assert finish['members'] == dict([(killed.member, 'dead')] + [(controller.member, 'left') for controller in run_d['survivors']]), finish
    assert 'held by a dead controller (rerun its slice to resume them): %s: %s' % (killed.member, ', '.join(held)) in finish['msg'], finish['msg']


def test_no_node_went_back_to_service_without_passing_validation(run_d):
    assert cordoned_without_passing(run_d['events'], run_d['in_service']) == []
    # A held node the dead controller had cordoned is still out of service.
    for node in held_nodes(run_d):
        if 'cordoned' in [event['to'] for event in run_d['events'] if event['node'] == node]:
            assert not run_d['in_service'][node], node
    assert cordoned_without_passing(run_d['final_events'], run_d['final_in_service']) == []


def test_a_rerun_of_the_killed_shard_resumes_its_nodes_and_finishes_the_run(run_d):
    rerun, state, events = run_d['rerun'], run_d['final_state'], run_d['final_events']
    assert rerun.rc == 0, rerun.failures()
    new = events[len(run_d['events']):]
    for node in held_nodes(run_d):
        resumed = [event for event in new if event['node'] == node and event['to'] == 'admitted']
        assert resumed and resumed[0]['from'] != 'pending' and 'caught' in resumed[0]['reason'], resumed
        assert resumed[0]['details']['member'] == rerun.member, resumed
    assert state['status'] == 'finished', state['status']
    assert {node: record['state'] for node, record in state['nodes'].items()} == {node: 'done' for node in NODES}
    assert all(validated_before_done(events, node) for node in NODES)
    assert all(run_d['final_in_service'].values()), run_d['final_in_service']
    members = run_d['final_members']
    assert members[rerun.member]['left'] and members[run_d['killed'].member]['left'] is None, members
    finish = rerun.finish()
    assert finish['held'] == {} and finish['members'][run_d['killed'].member] == 'dead', finish


# ---------------------------------------------------------------------------------------------------------------- run K

WORKFLOW = 4242
RUN_K = 'awx-%d-rolling_restart' % WORKFLOW
JOBS = (101, 102, 103)


def pared_inventory(fleet, path, nodes):
    """The fleet's inventory with only ``nodes`` in it (what AWX gives a job slice)."""
    document = json.loads(json.dumps(fleet.inventory_data))
    hosts = document['all']['children']['gpu']['hosts']
    document['all']['children']['gpu']['hosts'] = {node: hosts[node] for node in nodes}
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump(document, handle)
    return path


@pytest.fixture(scope='module')
def run_k(fleet, tmp_path_factory):
    """Three ansible-runner jobs at once, as AWX runs a job with 3 slices: each its own private data folder (its execution
    environment: gpufleet_run_dir there is only scratch), a pared inventory of its 3 nodes, awx_workflow_job_id shared and
    awx_job_id its own, no gpufleet_run_id; the ledger in ConfigMaps of the fake API server, Slurm the scheduler.

    AWX mounts every slice's inventory at the same path (/runner/inventory/hosts), so the slices' fleet lock has one name;
    here each runner folder has its own path, so gpufleet_fleet names the fleet for all three."""
    import ansible_runner  # pylint: disable=import-outside-toplevel

    folder = tmp_path_factory.mktemp('run-k')
    server, _thread, url = fake_apiserver.start({'namespaces': [{'metadata': {'name': 'gpufleet'}}]})
    try:
        kubeconfig = fake_apiserver.write_kubeconfig(str(folder / 'kubeconfig'), url)
        fleet_lock = _rollout.fleet_name(_rollout.inventory_id([fleet.inventory]))
        environment = ansible_environment()
        for name in ('ANSIBLE_STDOUT_CALLBACK', 'ANSIBLE_CALLBACK_RESULT_FORMAT'):
            environment.pop(name, None)
        jobs = []
        cancel = threading.Event()
        for job, shard in zip(JOBS, SHARDS):
            private = folder / ('job-%d' % job)
            private.mkdir()
            values = dict(WINDOW, gpufleet_run_dir=str(private / 'runs'), gpufleet_ledger_backend='kubernetes', gpufleet_ledger_namespace='gpufleet',
                          gpufleet_kubeconfig=kubeconfig, gpufleet_fleet=fleet_lock, awx_workflow_job_id=WORKFLOW, awx_job_id=job)
            thread, runner = ansible_runner.run_async(private_data_dir=str(private), playbook=ROLLING_RESTART, ident='job',
                                                      inventory=pared_inventory(fleet, str(folder / ('inventory-%d.json' % job)), shard),
                                                      extravars=values, envvars=environment, forks=6, quiet=True,
                                                      cancel_callback=cancel.is_set)
            jobs.append((job, shard, thread, runner))
        for _job, _shard, thread, _runner in jobs:
            thread.join(RUN_TIMEOUT)
        if any(thread.is_alive() for _job, _shard, thread, _runner in jobs):
            cancel.set()
            for _job, _shard, thread, _runner in jobs:
                thread.join(60)
        backend = _ledger.open_backend(dict(backend='kubernetes', run_dir=str(folder / 'reader'), namespace='gpufleet', kubeconfig=kubeconfig))
        run_ids = backend.run_ids()
        ledger = _ledger.RunLedger.open(backend, RUN_K) if RUN_K in run_ids else None
        result = {'jobs': jobs, 'run_ids': run_ids, 'holder': backend.holder(fleet_lock),
                  'events': backend.read_events(RUN_K, 0)[0] if ledger else [], 'state': ledger.state if ledger else None,
                  'members': ledger.members() if ledger else {},
                  'local': [os.path.exists(str(folder / ('job-%d' % job) / 'runs' / RUN_K / 'ledger.jsonl')) for job in JOBS],
                  'in_service': {node: not drained(fleet, node) for node in fleet.nodes}}
    finally:
        fake_apiserver.stop(server)
        restore(fleet)
    return result


def test_awx_slices_join_one_run_in_the_cluster(run_k):
    for job, _shard, _thread, runner in run_k['jobs']:
        assert (runner.status, runner.rc) == ('successful', 0), (job, runner.stdout.read()[-6000:])
    assert run_k['run_ids'] == [RUN_K]
    members = run_k['members']
    assert sorted(members) == sorted(_members.member_id(_ledger.socket.gethostname(), record['pid'], job=job)
                                     for job in JOBS for record in members.values() if record['job'] == str(job)), members
    assert sorted(record['job'] for record in members.values()) == [str(job) for job in JOBS], members
    assert all(record['left'] is not None for record in members.values()), members
    state = run_k['state']
    assert state['status'] == 'finished', state['status']
    assert {node: record['state'] for node, record in state['nodes'].items()} == {node: 'done' for node in NODES}
    assert all(run_k['in_service'].values()), run_k['in_service']
    assert run_k['holder'] is None                # the fleet Lease released by the run's finish


def test_awx_slices_share_the_window_and_admit_their_own_nodes(run_k):
    events = run_k['events']
    sizes = [len(flying) for _event, flying in in_flight_over_time(events)]
    assert max(sizes) == 3, sizes          # the window, fleet-wide: used, never exceeded
    job_of = {name: record['job'] for name, record in run_k['members'].items()}
    by_node = {event['node']: job_of[event['details']['member']] for event in admissions(events)}
    assert by_node == {node: str(job) for job, shard in zip(JOBS, SHARDS) for node in shard}, by_node
    # Each slice hands AWX the summary of its finish (set_stats); the last one saw the run finished.
    summaries = []
    for _job, _shard, _thread, runner in run_k['jobs']:
        stats = [event for event in runner.events if event['event'] == 'playbook_on_stats'][0]['event_data']['artifact_data']
        summaries.append(stats['gpufleet_rollout_summary'])
    assert [summary['run_id'] for summary in summaries] == [RUN_K] * 3
    assert 'finished' in [summary['status'] for summary in summaries], summaries
    assert run_k['local'] == [False, False, False]     # no ledger in any execution environment: the run is in the cluster
