# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run real ansible-playbook processes against hosts whose NVIDIA tools are stand-ins.

Each test host is a local-connection host with its own folder of stand-in tools
first on PATH; the stand-ins print real captured outputs (tests/unit/fixtures/real-outputs).
"""

import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import threading

import pytest

from ansible_collections.gpufleet.lifecycle.tests import needs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REAL = os.path.join(ROOT, 'tests', 'unit', 'fixtures', 'real-outputs')
BIN = os.path.dirname(sys.executable)
SYSTEM_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'


def real(*parts):
    """Path of a real captured output."""
    path = os.path.join(REAL, *parts)
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    return path


def alive(pid):
    """True while process ``pid`` runs (a zombie does not count): what a killed stand-in must not be."""
    try:
        with open('/proc/%d/stat' % pid, encoding='utf-8') as handle:
            return handle.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


def pids_alive(pid_file):
    """The processes of a hung stand-in's ``pid_file`` (see stand_in.py) that still run."""
    with open(pid_file, encoding='utf-8') as handle:
        return [int(pid) for pid in handle.read().split() if alive(int(pid))]


class Host:
    """A test host: a name, a folder of stand-in tools, and its inventory variables."""

    def __init__(self, base, name):
        self.name = name
        self.bin = os.path.join(base, name, 'bin')
        os.makedirs(self.bin)
        # The module runs under this interpreter wrapper, which puts the host's stand-ins first on PATH.
        interpreter = os.path.join(base, name, 'python')
        with open(interpreter, 'w', encoding='utf-8') as handle:
            handle.write('#!/bin/sh\nPATH=%s\nexport PATH\nexec %s "$@"\n' % (
                shlex.quote(self.bin + ':' + SYSTEM_PATH), shlex.quote(sys.executable)))
        os.chmod(interpreter, 0o755)
        # So does its shell (commands without Python: drift_check reads a node with one shell command).
        shell = os.path.join(base, name, 'sh')
        with open(shell, 'w', encoding='utf-8') as handle:
            handle.write('#!/bin/sh\nPATH=%s\nexport PATH\nexec /bin/sh "$@"\n' % shlex.quote(self.bin + ':' + SYSTEM_PATH))
        os.chmod(shell, 0o755)
        self.vars = {'ansible_connection': 'local', 'ansible_python_interpreter': interpreter, 'ansible_shell_executable': shell}

    def tool(self, tool, *responses):
        """Install a stand-in ``tool`` answering with ``responses`` (dicts, see stand_in.py)."""
        spec = os.path.join(self.bin, '.' + tool + '.json')
        with open(spec, 'w', encoding='utf-8') as handle:
            json.dump({'tool': tool, 'responses': list(responses)}, handle)
        wrapper = os.path.join(self.bin, tool)
        with open(wrapper, 'w', encoding='utf-8') as handle:
            handle.write('#!/bin/sh\nexec %s %s %s "$@"\n' % (
                shlex.quote(sys.executable), shlex.quote(os.path.join(HERE, 'stand_in.py')), shlex.quote(spec)))
        os.chmod(wrapper, 0o755)
        return self

    def calls(self, tool):
        """Argument lists the stand-in ``tool`` was called with."""
        path = os.path.join(self.bin, '.' + tool + '.json.calls')
        if not os.path.exists(path):
            return []
        with open(path, encoding='utf-8') as handle:
            return [json.loads(line) for line in handle]


class Fleet:
    """Hosts plus an inventory file."""

    def __init__(self, base):
        self.base = base
        self.hosts = {}

    def host(self, name):
        self.hosts[name] = Host(self.base, name)
        return self.hosts[name]

    def inventory(self):
        path = os.path.join(self.base, 'inventory.json')
        with open(path, 'w', encoding='utf-8') as handle:
            json.dump({'all': {'hosts': dict((name, host.vars) for name, host in self.hosts.items())}}, handle)
        return path


def ansible_environment():
    """Environment for ansible-playbook: this checkout as gpufleet.lifecycle, JSON output."""
    link = os.path.join(ROOT, 'build', 'collections', 'ansible_collections', 'gpufleet', 'lifecycle')
    if not os.path.islink(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(os.path.relpath(ROOT, os.path.dirname(link)), link)
    environment = dict(os.environ)
    environment.update({
        # This checkout first, then whatever the caller already configured (other collections, another ansible-core's).
        'ANSIBLE_COLLECTIONS_PATH': ':'.join([os.path.join(ROOT, 'build', 'collections')] +
                                             [path for path in environment.get('ANSIBLE_COLLECTIONS_PATH', '').split(':') if path]),
        'ANSIBLE_STDOUT_CALLBACK': 'ansible.posix.json',
        'ANSIBLE_CALLBACK_RESULT_FORMAT': 'json',
        'ANSIBLE_HOST_KEY_CHECKING': 'False',
        'ANSIBLE_RETRY_FILES_ENABLED': 'False',
        'ANSIBLE_NOCOLOR': '1',
        'ANSIBLE_FORKS': '8',
        'ANSIBLE_LOCAL_TEMP': os.path.join(ROOT, 'build', 'ansible-tmp'),
        'PATH': BIN + ':' + environment.get('PATH', SYSTEM_PATH),
    })
    return environment


class PlayResult:
    """Parsed output of the ansible.posix.json callback."""

    def __init__(self, process):
        self.rc = process.returncode
        self.stderr = process.stderr
        try:
            self.document = json.loads(process.stdout)
        except ValueError:
            raise AssertionError('ansible-playbook printed no JSON (rc=%s)\nstdout:\n%s\nstderr:\n%s'
                                 % (process.returncode, process.stdout, process.stderr))

    def task(self, name):
        """{host: result} of the task called ``name`` (last play that has it)."""
        found = None
        for play in self.document['plays']:
            for task in play['tasks']:
                if task['task']['name'] == name:
                    found = task['hosts']
        if found is None:
            raise AssertionError('no task named %r' % name)
        return found

    @property
    def stats(self):
        return self.document['stats']

    def seconds(self, name):
        """How long the task called ``name`` ran, from its start to its last host's result (last play that has it)."""
        found = None
        for play in self.document['plays']:
            for task in play['tasks']:
                if task['task']['name'] == name:
                    found = task['task']['duration']
        if found is None:
            raise AssertionError('no task named %r' % name)
        start, end = (datetime.datetime.strptime(found[key], '%Y-%m-%dT%H:%M:%S.%fZ') for key in ('start', 'end'))
        return (end - start).total_seconds()


def drift_stand_ins(fleet, listing):
    """The drift report's three stand-in hosts: ``in-sync`` (A100, driver 535.54.03, ``listing`` as its packages),
    ``old-driver`` (T4, driver 515.105.01, the container toolkit 1.11.0 instead of 1.12.0) and ``mismatch`` (nvidia-smi
    prints the real NVML driver/library mismatch, exit 18)."""
    in_sync = fleet.host('in-sync')
    in_sync.tool('nvidia-smi', {'args': ['-q', '-x'], 'stdout_file': real('nvidia-smi-xml', 'telegraf_a100-sxm4-80gb_535.54.03_v12.xml')})
    in_sync.tool('dpkg-query', {'args': ['-W'], 'stdout': listing})
    old = fleet.host('old-driver')
    old.tool('nvidia-smi', {'args': ['-q', '-x'], 'stdout_file': real('nvidia-smi-xml', 'telegraf_tesla-t4_515.105.01_v11.xml')})
    old.tool('dpkg-query', {'args': ['-W'], 'stdout': listing.replace('1.12.0-1', '1.11.0-1')})
    fleet.host('mismatch').tool('nvidia-smi', {'args': [], 'stdout_file': real('errors', 'nvml-mismatch_570.124_tinygrad-ogkm-issue47.txt'),
                                               'rc': 18})


# A node's final states in a run's ledger (the rollout's FINAL).
FINAL_STATES = ('done', 'rolled_back', 'quarantined', 'deferred', 'left_alone')


def admissions(events):
    """The ledger's admission events, in order."""
    return [event for event in events if event['node'] and event['to'] == 'admitted']


class Sampler:
    """``sample()`` called every ``interval`` seconds in a thread while a ``with`` block runs (a rollout), and once more after
    it (the thread may have slept through its end); what to keep is the subclass's."""

    interval = 0.5

    def __init__(self):
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self):
        raise NotImplementedError

    def _loop(self):
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.interval)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)
        self.sample()


def in_flight_over_time(events):
    """[(event, set of nodes in flight after it)] in ledger order (the ledger is appended under its lock: its order is the truth)."""
    flying = set()
    timeline = []
    for event in events:
        node = event['node']
        if node is None:
            continue
        if event['to'] == 'admitted':
            flying.add(node)
        elif event['to'] in FINAL_STATES or event['to'] == 'pending':
            flying.discard(node)
        timeline.append((event, set(flying)))
    return timeline


def run_playbook(playbook, inventory, *arguments):
    """Run ansible-playbook and return its PlayResult."""
    process = subprocess.run(['ansible-playbook', '-i', inventory, playbook] + list(arguments),
                             env=ansible_environment(), cwd=ROOT, capture_output=True, text=True, check=False, timeout=600)
    return PlayResult(process)


@pytest.fixture
def fleet(tmp_path):
    return Fleet(str(tmp_path))


SIM = os.path.join(ROOT, 'tests', 'sim')
# Under pytest-xdist each worker is a session of its own: a session-scoped fleet gets a state folder per worker (the
# simulated fleet names its containers, ports and Slurm after the folder, so fleets of several workers run side by side).
# Module-scoped fleets keep one folder per module: ``--dist loadscope`` runs a module on one worker.
WORKER = os.environ.get('PYTEST_XDIST_WORKER', '')
SIM_STATE = os.path.join(ROOT, 'build', 'sim-test' + ('-' + WORKER if WORKER else ''))


class SimFleet:
    """The simulated fleet shared by the suites of one test run (tests/sim/fleet)."""

    def __init__(self, state_dir, inventory):
        self.state_dir = state_dir
        self.inventory = inventory
        with open(inventory, encoding='utf-8') as handle:
            self.inventory_data = json.load(handle)
        self.vars = self.inventory_data['all']['vars']
        self.nodes = sorted(self.inventory_data['all']['children']['gpu']['hosts'])

    def fleet(self, *arguments, check=True):
        """Run tests/sim/fleet with this fleet's state folder."""
        process = subprocess.run([os.path.join(SIM, 'fleet'), '--state-dir', self.state_dir] + list(arguments),
                                 capture_output=True, text=True, check=False, timeout=900)
        if check and process.returncode != 0:
            raise AssertionError('fleet %s failed (rc=%s):\n%s%s' % (' '.join(arguments), process.returncode, process.stdout, process.stderr))
        return process

    def node_exec(self, node, *command):
        """Run a command inside a node; returns the CompletedProcess."""
        return self.fleet('exec', node, '--', *command, check=False)

    def hardware(self, node):
        with open(os.path.join(self.state_dir, 'nodes', node, 'etc', 'hardware.json'), encoding='utf-8') as handle:
            return json.load(handle)

    def playbook(self, playbook, *arguments):
        return run_playbook(playbook, self.inventory, *arguments)


def fleet_up(state_dir, nodes, scheduler, *extra):
    """Bring a simulated fleet up (``extra``: more ``fleet up`` arguments such as ``--bmc``); yields its SimFleet and takes
    it down afterwards (use from a fixture)."""
    process = subprocess.run([os.path.join(SIM, 'fleet'), '--state-dir', state_dir, 'up', '--nodes', str(nodes), '--scheduler', scheduler]
                             + list(extra),
                             capture_output=True, text=True, check=False, timeout=1800)
    if process.returncode != 0:
        raise AssertionError('fleet up failed (rc=%s):\n%s%s' % (process.returncode, process.stdout, process.stderr))
    sys.stderr.write(process.stderr)
    running = SimFleet(state_dir, process.stdout.strip().splitlines()[-1])
    status = require_identities(state_dir)
    assert sorted(row['node'] for row in status['nodes']) == running.nodes
    yield running
    subprocess.run([os.path.join(SIM, 'fleet'), '--state-dir', state_dir, 'down'], capture_output=True, text=True, check=False, timeout=600)


def require_identities(state_dir):
    """``fleet status`` of the fleet in ``state_dir``; fails unless every host reaches its own node over SSH."""
    process = subprocess.run([os.path.join(SIM, 'fleet'), '--state-dir', state_dir, 'status'],
                             capture_output=True, text=True, check=False, timeout=300)
    try:
        status = json.loads(process.stdout)
    except ValueError:
        raise AssertionError('fleet status printed no JSON (rc=%s):\n%s' % (process.returncode, process.stderr)) from None
    wrong = [row for row in status['nodes'] if not row['identity_ok']]
    if process.returncode != 0 or wrong:
        raise AssertionError('inventory hosts that do not reach their own node: %s' % json.dumps(wrong))
    return status


@pytest.fixture(scope='session')
def sim_fleet():
    """Four simulated H100 nodes on the 550 branch with a real Slurm, up once per test run."""
    yield from fleet_up(SIM_STATE, 4, 'slurm')


def run_molecule(scenario, state_dir):
    """``molecule test -s SCENARIO`` on a simulated node prepared in ``state_dir``; returns the output without colours.

    Fails when molecule fails, or when a step of the sequence did not run successfully.
    """
    prepared = subprocess.run([os.path.join(SIM, 'fleet'), '--state-dir', state_dir, 'molecule-env'],
                              capture_output=True, text=True, check=False, timeout=1800)
    if prepared.returncode != 0:
        raise AssertionError('fleet molecule-env failed:\n%s' % prepared.stderr)
    environment = ansible_environment()
    environment.update(json.loads(prepared.stdout))
    for name in ('ANSIBLE_STDOUT_CALLBACK', 'ANSIBLE_CALLBACK_RESULT_FORMAT'):
        environment.pop(name, None)
    process = subprocess.run(['molecule', 'test', '-s', scenario], cwd=ROOT, env=environment,
                             capture_output=True, text=True, check=False, timeout=1800)
    output = re.sub(r'\x1b\[[0-9;]*m', '', process.stdout + process.stderr)
    if process.returncode != 0:
        raise AssertionError('molecule test -s %s failed (rc=%s):\n%s' % (scenario, process.returncode, output[-6000:]))
    for step in ('converge', 'idempotence', 'check', 'verify', 'destroy'):
        if not re.search(r'^.*%s\W+%s\W.*Executed: Successful' % (scenario, step), output, re.MULTILINE):
            raise AssertionError('molecule step %s did not run successfully:\n%s' % (step, output[-4000:]))
    return output


# --- Parallel runs (pytest-xdist, hacking/run_tests.sh) ------------------------------------------------------------

# The modules that take longest (build/test-times.txt of a run lists them) are collected first, in this order, and
# hacking/run_tests.sh runs xdist with --dist loadscope --no-loadscope-reorder: a worker runs a module at a time, and
# xdist hands the first modules out two per worker before the rest go to whichever worker is free: worker i starts with
# modules i and i + N (N workers, 4 by default). So the four longest come first and the 5th to 8th are the next ones
# that pair with them to about the same sum (a cold run of issue 27: node_upgrade 1,272 s + node_drain 172, reliability_faults
# 1,105 + node_shapes 327, rollout 1,048 + multi_controller 388, gpu_stack 1,117 + its molecule scenario 306); a long module
# started last would run alone at the end, the short ones after them fill the workers evenly. The Kubernetes faults
# (test_reliability_kube.py, about 3 minutes) are the first module the first free worker takes, beside the Slurm faults.
FIRST = ('test_node_upgrade.py', 'test_reliability_faults.py', 'test_rollout.py', 'test_gpu_stack.py',
         'test_node_drain.py', 'test_node_shapes.py', 'test_multi_controller.py', 'test_gpu_stack_molecule.py',
         'test_reliability_kube.py', 'test_sim_fleet.py', 'test_sim_molecule.py')


def pytest_collection_modifyitems(session, config, items):
    """Heavy modules first (FIRST, in that order), the others after them as collected; each module's tests keep their
    order.  Every worker collects the same order, as xdist requires."""
    del session, config
    rank = dict((name, index) for index, name in enumerate(FIRST))
    items.sort(key=lambda item: rank.get(os.path.basename(str(item.fspath)), len(FIRST)))


# --- A real Slurm cluster (tests/sim/slurm) for the Slurm suites -------------------------------------

sys.path.insert(0, os.path.join(SIM, 'slurm'))

import slurm_sim  # noqa: E402  pylint: disable=wrong-import-position,import-error


def require_root():
    """The simulated Slurm runs its daemons as root on Linux; anywhere else a Slurm suite fails, it does not skip."""
    needs.require_root('the simulated Slurm runs its daemons as root on Linux')


class SlurmCluster:
    """A running simulated Slurm: its state dir, the client environment, and the file its reboot command writes."""

    def __init__(self, base, state_dir, env, reboots):
        self.base = base
        self.state_dir = state_dir
        self.env = env
        self.reboots = reboots

    def scontrol(self, *arguments):
        return slurm_sim.scontrol(self.env, *arguments)

    def node(self, node):
        return slurm_sim.node_state(self.env, node)

    def state(self, node):
        return self.node(node)['State']

    def wait_state(self, node, wanted, timeout=30):
        """Poll until State= is one of ``wanted``; return the states seen on the way, in order."""
        seen = []

        def reached(state):
            if not seen or seen[-1] != state:
                seen.append(state)
            return state in wanted

        try:
            slurm_sim.wait_for(self.env, node, reached, timeout=timeout)
        except slurm_sim.SlurmSimError as error:
            raise AssertionError(str(error)) from None
        return seen

    def wait_job(self, job_id, wanted, timeout=30):
        slurm_sim.poll(lambda: slurm_sim.job_state(self.env, job_id) in wanted, timeout, interval=0.2,
                       what='job %s in %s' % (job_id, wanted))

    def rebooted(self):
        if not os.path.exists(self.reboots):
            return []
        with open(self.reboots, encoding='utf-8') as handle:
            return handle.read().split()


def slurm_cluster_up(base, nodes, cluster_class=SlurmCluster):
    """Start a cluster of ``nodes`` (8 GPUs each) under ``base`` whose RebootProgram records the node and takes a moment
    (long enough to see REBOOT_ISSUED); returns ``cluster_class(base, state_dir, env, reboots)``.  Stop it with
    ``slurm_sim.down(cluster.state_dir)``."""
    state_dir = os.path.join(base, 'state')
    reboots = os.path.join(base, 'rebooted.txt')
    recorder = os.path.join(base, 'record-reboot')
    with open(recorder, 'w', encoding='utf-8') as handle:
        handle.write('#!/bin/sh\necho "$1" >> %s\nsleep 1\n' % reboots)
    os.chmod(recorder, 0o755)
    try:
        env = slurm_sim.up(state_dir, nodes, gpus=8, reboot_command=[recorder])
    except BaseException:
        slurm_sim.down(state_dir)
        raise
    return cluster_class(base, state_dir, env, reboots)


# --- The fault-injection and bad-input suite (tests/integration/reliability.py) --------------------------------------

_RELIABILITY = None


def _recorder():
    global _RELIABILITY
    if _RELIABILITY is None:
        import reliability as module  # pylint: disable=import-error
        _RELIABILITY = module.Recorder()
    return _RELIABILITY


@pytest.fixture
def reliability(request):
    """The session's scenario recorder, bound to the calling test (see tests/integration/reliability.py)."""
    recorder = _recorder()
    recorder.current_test = request.node.nodeid
    return recorder


# Under pytest-xdist the scenarios are recorded in the workers; each hands its own to the controller (workeroutput),
# which generates and compares the document once, from all of them.
_WORKER_SCENARIOS = 'gpufleet_reliability'


def _suite_collected(session):
    import reliability as module  # pylint: disable=import-error
    if session.config.getoption('keyword', '') or session.config.getoption('markexpr', ''):
        return False
    collected = set(os.path.realpath(str(item.fspath)) for item in session.items)
    return all(os.path.realpath(path) in collected for path in module.suite_files())


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist controller: take a finished worker's scenarios (and whether it collected the whole fault suite)."""
    data = getattr(node, 'workeroutput', {}).get(_WORKER_SCENARIOS)
    if not data:
        return
    import reliability as module  # pylint: disable=import-error
    recorder = _recorder()
    payload = json.loads(data)
    recorder.worker_collected = getattr(recorder, 'worker_collected', True) and payload['collected']
    for item in payload['scenarios']:
        scenario = module.Scenario(item['category'], item['name'], item['injected'], item['test'])
        scenario.observed(item['observation'])
        recorder.scenarios.append(scenario)


def pytest_sessionfinish(session, exitstatus):
    """After a run of the whole fault suite that passed: generate docs/reliability.md and fail when it differs."""
    import reliability as module  # pylint: disable=import-error
    workeroutput = getattr(session.config, 'workeroutput', None)
    if workeroutput is not None:
        if _RELIABILITY is not None and _RELIABILITY.scenarios:
            workeroutput[_WORKER_SCENARIOS] = json.dumps({
                'collected': _suite_collected(session),
                'scenarios': [dict(category=s.category, name=s.name, injected=s.injected, test=s.test, observation=s.observation)
                              for s in _RELIABILITY.scenarios]})
        return
    if _RELIABILITY is None or not _RELIABILITY.scenarios or exitstatus != 0:
        return
    if hasattr(_RELIABILITY, 'worker_collected'):
        if not _RELIABILITY.worker_collected:
            return
        names = [(s.category, s.name) for s in _RELIABILITY.scenarios]
        twice = sorted(set(name for name in names if names.count(name) > 1))
        if twice:
            session.config.pluginmanager.get_plugin('terminalreporter').write_line(
                'reliability: scenarios recorded twice across workers: %s' % twice)
            session.exitstatus = 1
            return
    elif not _suite_collected(session):
        return
    same, diff = module.compare(_RELIABILITY.scenarios)
    reporter = session.config.pluginmanager.get_plugin('terminalreporter')
    if same:
        if reporter:
            reporter.write_line('reliability: %d scenarios; docs/reliability.md matches (%s)' % (len(_RELIABILITY.scenarios), diff or module.GENERATED))
        return
    if reporter:
        reporter.write_line('reliability: docs/reliability.md differs from what the suite observed (%s); '
                            'if the change is intended, regenerate it with %s=1' % (module.GENERATED, module.WRITE_ENV))
        reporter.write_line(diff)
    session.exitstatus = 1
