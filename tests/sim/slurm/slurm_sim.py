# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Real Debian Slurm for the simulated GPU fleet: one munged, one slurmctld and one slurmd per node.

Everything lives in a state directory (configuration, munge key and socket, spool, pid records,
logs); the daemons run on this host, one ``slurmd -N <node>`` per simulated node, each on its own
port of 127.0.0.1.  The API is importable (stdlib only) and the module is also a command::

    python3 tests/sim/slurm/slurm_sim.py up --state-dir DIR --nodes gpu-01,gpu-02 [--gpus 8]
        [--reboot-command '["tests/sim/fleet", "reboot-node"]']
    python3 tests/sim/slurm/slurm_sim.py env --state-dir DIR      # export lines for the clients
    python3 tests/sim/slurm/slurm_sim.py status --state-dir DIR
    python3 tests/sim/slurm/slurm_sim.py down --state-dir DIR

Every daemon (and so every process it starts, the RebootProgram included) carries
``GPUFLEET_SLURM_SIM_DAEMON=<state dir>`` in its environment; ``down`` stops the recorded daemons
and then sweeps whatever still carries that mark, and their descendants (job processes).
"""

from __future__ import absolute_import, division, print_function

import argparse
import contextlib
import errno
import fcntl
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time

__metaclass__ = type  # pylint: disable=invalid-name

HERE = os.path.dirname(os.path.abspath(__file__))
REBOOT_PROGRAM = os.path.join(HERE, 'reboot_program.py')
PACKAGES = ('slurmctld', 'slurmd', 'slurm-client', 'munge')
BINARIES = ('slurmctld', 'slurmd', 'sinfo', 'scontrol', 'sbatch', 'squeue', 'scancel', 'munged', 'munge')
SYSTEM_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
MARK = 'GPUFLEET_SLURM_SIM_DAEMON'
NODE_NAME = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z')
SAFE_PATH = re.compile(r'^/[A-Za-z0-9/._+-]*\Z')
# The longest unix socket path the kernel accepts (sun_path is 108 bytes, NUL included).
SOCKET_PATH_MAX = 107
UP_TIMEOUT = 90
STOP_TIMEOUT = 20
_CHILDREN = {}


class SlurmSimError(Exception):
    """Anything that keeps the simulated Slurm from coming up or answering."""


# ---------------------------------------------------------------------------------------------
# validation


def check_node_name(node):
    """Return ``node`` if it is a plain host name Slurm can take as one node name, else raise."""
    if not isinstance(node, str) or not NODE_NAME.match(node):
        raise ValueError('not a usable Slurm node name: %r' % (node,))
    return node


def check_nodes(nodes):
    """Node names from a list or a comma-separated string, validated and without duplicates."""
    if isinstance(nodes, str):
        nodes = [part.strip() for part in nodes.split(',') if part.strip()]
    nodes = [check_node_name(node) for node in nodes]
    if not nodes:
        raise ValueError('no nodes given')
    if len(set(nodes)) != len(nodes):
        raise ValueError('duplicate node names: %s' % ','.join(nodes))
    return nodes


def check_state_dir(state_dir):
    """Absolute state directory; it ends up in slurm.conf and a shell wrapper, so keep it plain."""
    state_dir = os.path.abspath(state_dir)
    if not SAFE_PATH.match(state_dir):
        raise ValueError('state directory must match %s: %r' % (SAFE_PATH.pattern, state_dir))
    if len(munge_socket(state_dir)) > SOCKET_PATH_MAX:
        raise ValueError('state directory too long for a unix socket path: %r' % state_dir)
    return state_dir


def check_reboot_command(command):
    """A JSON argv list (list of strings) or None."""
    if command is None:
        return None
    if isinstance(command, str):
        command = json.loads(command)
    if not isinstance(command, list) or not command or not all(isinstance(arg, str) for arg in command):
        raise ValueError('reboot command must be a non-empty list of strings: %r' % (command,))
    return command


# ---------------------------------------------------------------------------------------------
# paths


def munge_socket(state_dir):
    return os.path.join(state_dir, 'munge', 'munge.socket.2')


def conf_dir(state_dir):
    return os.path.join(state_dir, 'etc')


def slurm_conf(state_dir):
    return os.path.join(state_dir, 'etc', 'slurm.conf')


def log_dir(state_dir):
    return os.path.join(state_dir, 'log')


def record_path(state_dir):
    return os.path.join(state_dir, 'sim.json')


def reboot_wrapper(state_dir):
    return os.path.join(state_dir, 'reboot-program')


def reboot_command_path(state_dir):
    return os.path.join(state_dir, 'reboot-command.json')


def state_dir_of(env):
    """The state directory behind a client environment returned by :func:`up`."""
    return os.path.dirname(os.path.dirname(env['SLURM_CONF']))


# ---------------------------------------------------------------------------------------------
# packages


def _missing_binaries():
    missing = []
    for binary in BINARIES:
        if not any(os.access(os.path.join(folder, binary), os.X_OK) for folder in SYSTEM_PATH.split(':')):
            missing.append(binary)
    return missing


def ensure_packages():
    """Install Debian's Slurm and munge with apt-get when a binary is missing. Returns True if it installed."""
    if not _missing_binaries():
        return False
    env = dict(os.environ, DEBIAN_FRONTEND='noninteractive', PATH=SYSTEM_PATH)
    install = ['apt-get', 'install', '-y', '-q', '--no-install-recommends',
               '-o', 'DPkg::Lock::Timeout=600'] + list(PACKAGES)
    first = subprocess.run(install, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if first.returncode != 0:
        output = first.stdout + first.stderr
        if not re.search(r'Unable to locate package|has no installation candidate|Failed to fetch|404', output):
            raise SlurmSimError('apt-get install failed:\n%s' % output)
        update = subprocess.run(['apt-get', 'update', '-q', '-o', 'DPkg::Lock::Timeout=600'], env=env,
                                stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
        if update.returncode != 0:
            raise SlurmSimError('apt-get update failed:\n%s' % (update.stdout + update.stderr))
        second = subprocess.run(install, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                check=False)
        if second.returncode != 0:
            raise SlurmSimError('apt-get install failed:\n%s' % (second.stdout + second.stderr))
    missing = _missing_binaries()
    if missing:
        raise SlurmSimError('still missing after apt-get install: %s' % ', '.join(missing))
    return True


# ---------------------------------------------------------------------------------------------
# processes


def _proc_stat(pid):
    """(state letter, start time in clock ticks, ppid) of ``pid``, or None when it does not exist."""
    try:
        with open('/proc/%d/stat' % pid, 'rb') as handle:
            data = handle.read().decode('ascii', 'replace')
    except (IOError, OSError):
        return None
    fields = data[data.rfind(')') + 2:].split()
    return fields[0], int(fields[19]), int(fields[1])


def _cmdline(pid):
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as handle:
            data = handle.read()
    except (IOError, OSError):
        return []
    return [part.decode('utf-8', 'replace') for part in data.split(b'\0')[:-1]]


def _environ(pid):
    try:
        with open('/proc/%d/environ' % pid, 'rb') as handle:
            data = handle.read()
    except (IOError, OSError):
        return {}
    result = {}
    for item in data.split(b'\0'):
        key, sep, value = item.partition(b'=')
        if sep:
            result[key.decode('utf-8', 'replace')] = value.decode('utf-8', 'replace')
    return result


def _reap(pid):
    """Collect ``pid`` if it is our child and has exited; never blocks."""
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is not None:
            _CHILDREN.pop(pid, None)
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except OSError:
        pass


def proc_record(pid):
    """{'pid', 'start'} identifying a running process (start time guards against pid reuse)."""
    info = _proc_stat(pid)
    return {'pid': pid, 'start': info[1] if info else None}


def alive(record):
    """True if the process of a {'pid', 'start'} record still runs (zombies count as gone)."""
    if not record:
        return False
    pid = record['pid']
    _reap(pid)
    info = _proc_stat(pid)
    if info is None or info[0] in ('Z', 'X'):
        return False
    return record.get('start') is None or info[1] == record['start']


def _signal(record, signum):
    if alive(record):
        try:
            os.kill(record['pid'], signum)
        except OSError as error:
            if error.errno != errno.ESRCH:
                raise


def stop_process(record, timeout=STOP_TIMEOUT):
    """SIGTERM, wait up to ``timeout`` s, then SIGKILL; returns once the process is gone."""
    _signal(record, signal.SIGTERM)
    deadline = time.time() + timeout
    while alive(record) and time.time() < deadline:
        time.sleep(0.1)
    if alive(record):
        _signal(record, signal.SIGKILL)
        deadline = time.time() + 5
        while alive(record) and time.time() < deadline:
            time.sleep(0.05)


def daemon_env(state_dir):
    """Environment of every daemon: a plain PATH, the configuration, and the sweep mark."""
    return {
        'PATH': SYSTEM_PATH,
        'LANG': 'C.UTF-8',
        'HOME': '/root',
        'SLURM_CONF': slurm_conf(state_dir),
        MARK: state_dir,
    }


def spawn(state_dir, argv, log_name):
    """Start ``argv`` in its own session, output appended to ``log/<log_name>``; returns its record."""
    with open(os.path.join(log_dir(state_dir), log_name), 'ab') as log:
        child = subprocess.Popen(argv, env=daemon_env(state_dir), stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, close_fds=True, start_new_session=True,
                                 cwd=state_dir)
    _CHILDREN[child.pid] = child
    return proc_record(child.pid)


def marked_processes(state_dir):
    """Pids of processes carrying this state dir's mark, plus all their descendants."""
    marked = set()
    parents = {}
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == os.getpid():
            continue
        info = _proc_stat(pid)
        if info is None or info[0] in ('Z', 'X'):
            continue
        parents[pid] = info[2]
        if _environ(pid).get(MARK) == state_dir:
            marked.add(pid)
    changed = True
    while changed:
        changed = False
        for pid, ppid in parents.items():
            if ppid in marked and pid not in marked and pid != os.getpid():
                marked.add(pid)
                changed = True
    return sorted(marked)


# ---------------------------------------------------------------------------------------------
# records


@contextlib.contextmanager
def locked(state_dir, name='sim.lock'):
    """Exclusive lock: ``sim.lock`` guards the record (short holds, the RebootProgram takes it too),
    ``up.lock`` serialises whole up/down operations on one state dir."""
    with open(os.path.join(state_dir, name), 'a') as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_record(state_dir):
    try:
        with open(record_path(state_dir), encoding='utf-8') as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return None


def write_record(state_dir, record):
    temporary = record_path(state_dir) + '.tmp'
    with open(temporary, 'w', encoding='utf-8') as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
    os.rename(temporary, record_path(state_dir))


# ---------------------------------------------------------------------------------------------
# configuration


def free_ports(count):
    """``count`` distinct TCP ports free on 127.0.0.1 right now."""
    sockets = []
    try:
        for _index in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(('127.0.0.1', 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def render_slurm_conf(state_dir, nodes, gpus, ports, resume_timeout=300, cpus=None, controller=None):
    """The slurm.conf text. ``ports``: {'slurmctld': port, node: port, ...}."""
    controller = controller or socket.gethostname().split('.')[0] or 'localhost'
    cpus = cpus or os.cpu_count() or 1
    lines = [
        '# Generated by tests/sim/slurm/slurm_sim.py: the simulated GPU fleet, one slurmd per node on this host.',
        'ClusterName=gpufleet-sim',
        'SlurmctldHost=%s(127.0.0.1)' % controller,
        'SlurmctldPort=%d' % ports['slurmctld'],
        'SlurmUser=root',
        'SlurmdUser=root',
        'AuthType=auth/munge',
        'CredType=cred/munge',
        'AuthInfo=socket=%s' % munge_socket(state_dir),
        'StateSaveLocation=%s' % os.path.join(state_dir, 'spool', 'slurmctld'),
        'SlurmdSpoolDir=%s' % os.path.join(state_dir, 'spool', 'slurmd-%n'),
        'SlurmctldPidFile=%s' % os.path.join(state_dir, 'run', 'slurmctld.pid'),
        'SlurmdPidFile=%s' % os.path.join(state_dir, 'run', 'slurmd-%n.pid'),
        'SlurmctldLogFile=%s' % os.path.join(state_dir, 'log', 'slurmctld.log'),
        'SlurmdLogFile=%s' % os.path.join(state_dir, 'log', 'slurmd-%n.log'),
        'SlurmctldDebug=info',
        'SlurmdDebug=info',
        'ProctrackType=proctrack/linuxproc',
        'TaskPlugin=task/none',
        'JobAcctGatherType=jobacct_gather/none',
        'AccountingStorageType=accounting_storage/none',
        'JobCompType=jobcomp/none',
        'SwitchType=switch/none',
        'MpiDefault=none',
        'MailProg=/bin/true',
        'SchedulerType=sched/backfill',
        'SelectType=select/cons_tres',
        'SelectTypeParameters=CR_Core',
        'GresTypes=gpu',
        'ReturnToService=2',
        'RebootProgram=%s' % reboot_wrapper(state_dir),
        'ResumeTimeout=%d' % resume_timeout,
        'SlurmctldTimeout=120',
        'SlurmdTimeout=300',
        'MessageTimeout=10',
        'InactiveLimit=0',
        'KillWait=5',
        'MinJobAge=300',
        'Waittime=0',
    ]
    for node in nodes:
        lines.append('NodeName=%s NodeHostname=localhost NodeAddr=127.0.0.1 Port=%d CPUs=%d%s State=UNKNOWN'
                     % (node, ports[node], cpus, ' Gres=gpu:%d' % gpus if gpus else ''))
    lines.append('PartitionName=gpu Nodes=%s Default=YES MaxTime=INFINITE State=UP' % ','.join(nodes))
    return '\n'.join(lines) + '\n'


def gpu_device_dir(state_dir, node):
    return os.path.join(state_dir, 'dev', node)


def make_gpu_devices(state_dir, node, gpus):
    """``dev/<node>/nvidia0..N-1``: character devices 195:N like the real ones (gres/gpu drops GPUs
    without File=, and logs an error for each File= that is not a device); plain files if mknod fails."""
    folder = gpu_device_dir(state_dir, node)
    if not os.path.isdir(folder):
        os.makedirs(folder)
    for index in range(gpus):
        path = os.path.join(folder, 'nvidia%d' % index)
        if os.path.lexists(path):
            continue
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(195, index))
        except OSError:
            with open(path, 'w', encoding='utf-8'):
                pass


def render_gres_conf(state_dir, nodes, gpus):
    lines = ['# Generated by tests/sim/slurm/slurm_sim.py: no NVML, stand-in device nodes under dev/<node>/.',
             'AutoDetect=off']
    for node in nodes:
        if gpus:
            lines.append('NodeName=%s Name=gpu Count=%d File=%s' % (
                node, gpus, os.path.join(gpu_device_dir(state_dir, node), 'nvidia[0-%d]' % (gpus - 1))))
    return '\n'.join(lines) + '\n'


def render_cgroup_conf():
    return ('# Generated by tests/sim/slurm/slurm_sim.py: task/none and proctrack/linuxproc use no cgroups.\n'
            'CgroupPlugin=autodetect\nIgnoreSystemd=yes\nConstrainCores=no\nConstrainDevices=no\n'
            'ConstrainRAMSpace=no\nConstrainSwapSpace=no\n')


def render_reboot_wrapper(state_dir):
    """slurmd runs RebootProgram with system() after an access(X_OK) check on its first word."""
    return '#!/bin/sh\n# Generated by tests/sim/slurm/slurm_sim.py\nexec %s %s --state-dir %s "$@"\n' % (
        sys.executable, REBOOT_PROGRAM, state_dir)


def _write(path, text, mode=0o644):
    temporary = path + '.tmp'
    with open(temporary, 'w', encoding='utf-8') as handle:
        handle.write(text)
    os.chmod(temporary, mode)
    os.rename(temporary, path)


def set_reboot_command(state_dir, reboot_command):
    """Store the JSON argv the RebootProgram runs (the node name is appended); None removes it.

    A relative program path (``tests/sim/fleet``) is made absolute against the current directory; the
    RebootProgram also runs the command in the directory ``up`` was called from.
    """
    path = reboot_command_path(state_dir)
    if reboot_command is None:
        if os.path.exists(path):
            os.remove(path)
        return
    command = list(check_reboot_command(reboot_command))
    if os.sep in command[0] and not os.path.isabs(command[0]):
        command[0] = os.path.abspath(command[0])
    _write(path, json.dumps(command) + '\n')


def get_reboot_command(state_dir):
    try:
        with open(reboot_command_path(state_dir), encoding='utf-8') as handle:
            return check_reboot_command(json.load(handle))
    except (IOError, OSError):
        return None


# ---------------------------------------------------------------------------------------------
# clients


def client_env(state_dir):
    """What Slurm clients need: the configuration; it names the munge socket (AuthInfo=socket=...)."""
    return {'SLURM_CONF': slurm_conf(state_dir)}


def run_client(env, argv, timeout=30, check=True):
    """Run a Slurm client (argument list, no shell) with ``env`` over this process's environment."""
    environment = dict(os.environ)
    environment.update(env)
    environment['PATH'] = environment.get('PATH', SYSTEM_PATH) + ':' + SYSTEM_PATH
    process = subprocess.run(argv, env=environment, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=timeout, check=False)
    if check and process.returncode != 0:
        output = (process.stderr or process.stdout).strip()
        raise SlurmSimError('%s failed (rc=%d): %s' % (' '.join(argv), process.returncode, output))
    return process


def sinfo_states(env):
    """{node: state} as ``sinfo -N`` prints it in long form (``idle``, ``drained``, ``mixed``, ...)."""
    process = run_client(env, ['sinfo', '-h', '-N', '-o', '%N %T'], timeout=15, check=False)
    if process.returncode != 0:
        return {}
    states = {}
    for line in process.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1]
    return states


def parse_scontrol_oneliner(line):
    """``scontrol show ... -o`` line into a dict; values may hold spaces (Reason=, OS=)."""
    result = {}
    for match in re.finditer(r'(?:^|\s)([A-Za-z][A-Za-z0-9_./:]*)=(.*?)(?=\s+[A-Za-z][A-Za-z0-9_./:]*=|\s*$)',
                             line.strip()):
        result[match.group(1)] = match.group(2)
    return result


def node_info(env, node):
    """All fields of ``scontrol show node -o NODE`` as a dict."""
    process = run_client(env, ['scontrol', 'show', 'node', '-o', check_node_name(node)], timeout=15)
    return parse_scontrol_oneliner(process.stdout.strip().splitlines()[0])


def node_state(env, node):
    """``scontrol show node -o NODE`` as a dict: ``['State']`` is e.g. ``IDLE``, ``MIXED+DRAIN``,
    ``IDLE+DRAIN``; ``['Reason']`` keeps Slurm's ``[user@time]`` suffix (see :func:`node_reason`)."""
    return node_info(env, node)


def node_reason(env, node):
    """The node's Reason= without the ``[user@time]`` suffix Slurm adds, or None."""
    reason = node_info(env, node).get('Reason')
    if not reason or reason == '(null)':
        return None
    return re.sub(r'\s*\[[^\]]*@[^\]]*\]$', '', reason)


def submit_job(env, node, seconds, exclusive=False, name='gpufleet-sim', comment=None):
    """``sbatch --wrap "sleep N" -w NODE`` (``node``: one name, or a list for a job over several nodes, ``-N`` their count;
    ``comment``: ``--comment``, e.g. a declared checkpoint); returns the job id (str)."""
    nodes = [check_node_name(name_) for name_ in (node if isinstance(node, (list, tuple)) else [node])]
    seconds = int(seconds)
    if seconds < 0:
        raise ValueError('seconds must be >= 0')
    if not re.match(r'^[A-Za-z0-9_.-]+\Z', name):
        raise ValueError('bad job name: %r' % name)
    state_dir = state_dir_of(env)
    jobs = os.path.join(state_dir, 'jobs')
    if not os.path.isdir(jobs):
        os.makedirs(jobs)
    argv = ['sbatch', '--parsable', '-J', name, '-w', ','.join(nodes), '-N', str(len(nodes)), '-p', 'gpu',
            '--chdir', jobs, '-o', os.path.join(jobs, 'job-%j.out'), '--wrap', 'sleep %d' % seconds]
    if exclusive:
        argv.insert(1, '--exclusive')
    if comment is not None:
        argv[1:1] = ['--comment', str(comment)]
    process = run_client(env, argv, timeout=30)
    return process.stdout.strip().split(';')[0]


def job_state(env, job_id):
    """JobState= of ``scontrol show job -o ID`` (``PENDING``, ``RUNNING``, ``COMPLETED``, ...)."""
    process = run_client(env, ['scontrol', 'show', 'job', '-o', str(int(job_id))], timeout=15)
    return parse_scontrol_oneliner(process.stdout.strip().splitlines()[0]).get('JobState')


def job_info(env, job_id):
    """Every field of ``scontrol show job -o ID`` (``JobState``, ``Restarts``, ``NodeList``, ``Comment`` ...)."""
    process = run_client(env, ['scontrol', 'show', 'job', '-o', str(int(job_id))], timeout=15)
    return parse_scontrol_oneliner(process.stdout.strip().splitlines()[0])


def scontrol(env, *arguments):
    """Run ``scontrol ARGUMENTS...`` (an argument list, never a shell); raise on failure."""
    return run_client(env, ['scontrol'] + [str(argument) for argument in arguments])


def wait_for(env, node, predicate, timeout=60, interval=0.2):
    """Poll :func:`node_state` until ``predicate(State)`` is true; return that node_state dict."""
    seen = []

    def check():
        info = node_state(env, node)
        if not seen or seen[-1] != info.get('State'):
            seen.append(info.get('State'))
        return info if predicate(info.get('State', '')) else None

    try:
        return poll(check, timeout, interval=interval, what='a state of %s' % node)
    except SlurmSimError:
        raise SlurmSimError('%s: no wanted state within %ss; states seen: %s' % (node, timeout, ' -> '.join(seen))) from None


def poll(predicate, timeout, interval=0.5, what='condition'):
    """Poll ``predicate`` until it returns something true; return that, or raise after ``timeout`` s."""
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.time() >= deadline:
            raise SlurmSimError('timed out after %ss waiting for %s' % (timeout, what))
        time.sleep(interval)


# ---------------------------------------------------------------------------------------------
# daemons


def _prepare_dirs(state_dir, nodes):
    for folder in (state_dir, os.path.join(state_dir, 'etc'), os.path.join(state_dir, 'log'),
                   os.path.join(state_dir, 'run'), os.path.join(state_dir, 'jobs'),
                   os.path.join(state_dir, 'spool', 'slurmctld')):
        if not os.path.isdir(folder):
            os.makedirs(folder)
    for node in nodes:
        folder = os.path.join(state_dir, 'spool', 'slurmd-' + node)
        if not os.path.isdir(folder):
            os.makedirs(folder)
    # munged checks that nobody else can write where its socket and key live.
    munge = os.path.join(state_dir, 'munge')
    if not os.path.isdir(munge):
        os.makedirs(munge)
    os.chmod(munge, 0o755)
    os.chmod(state_dir, os.stat(state_dir).st_mode & ~0o022)


def _start_munged(state_dir):
    munge = os.path.join(state_dir, 'munge')
    key = os.path.join(munge, 'munge.key')
    if not os.path.exists(key):
        descriptor = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(descriptor, 'wb') as handle:
            handle.write(os.urandom(1024))
    os.chmod(key, 0o400)
    if os.path.exists(munge_socket(state_dir)):
        os.remove(munge_socket(state_dir))
    record = spawn(state_dir, ['munged', '--foreground', '--force', '--socket', munge_socket(state_dir),
                               '--key-file', key, '--pid-file', os.path.join(munge, 'munged.pid'),
                               '--seed-file', os.path.join(munge, 'munged.seed')], 'munged.out')

    def ready():
        if not alive(record):
            raise SlurmSimError('munged exited; see %s' % os.path.join(log_dir(state_dir), 'munged.out'))
        if not os.path.exists(munge_socket(state_dir)):
            return False
        probe = subprocess.run(['munge', '-n', '-S', munge_socket(state_dir)], env={'PATH': SYSTEM_PATH},
                               stdin=subprocess.DEVNULL, capture_output=True, check=False)
        return probe.returncode == 0

    poll(ready, 20, interval=0.1, what='munged')
    return record


def start_slurmd(state_dir, node, booted=False):
    """Start ``slurmd -D -N NODE`` (``-b``: report the node as just booted) and record its pid."""
    node = check_node_name(node)
    argv = ['slurmd', '-D', '-N', node, '-f', slurm_conf(state_dir)]
    if booted:
        argv.insert(1, '-b')
    record = spawn(state_dir, argv, 'slurmd-%s.out' % node)
    with locked(state_dir):
        sim = read_record(state_dir) or {}
        sim.setdefault('slurmd', {})[node] = record
        write_record(state_dir, sim)
    return record


def stop_slurmd(state_dir, node, record=None):
    """Stop the node's slurmd (the recorded one, or ``record``) and wait for it to exit."""
    node = check_node_name(node)
    if record is None:
        record = ((read_record(state_dir) or {}).get('slurmd') or {}).get(node)
    stop_process(record)


def _core_running(sim):
    return bool(sim) and alive(sim.get('munged')) and alive(sim.get('slurmctld'))


def _running(sim):
    return _core_running(sim) and all(alive((sim.get('slurmd') or {}).get(node)) for node in sim.get('nodes', []))


def up(state_dir, nodes, gpus=8, reboot_command=None, resume_timeout=300, timeout=UP_TIMEOUT):
    """Bring up munged, slurmctld and one slurmd per node; return the client environment.

    Idempotent: when munged and slurmctld of the same nodes already run, this only updates the stored
    reboot command (a node whose slurmd is gone, e.g. after a failed reboot, stays gone: use
    :func:`start_slurmd` to "power it on").  Anything else already there is stopped first, and a
    fresh start begins with no jobs and every node idle (slurmctld -c).
    """
    state_dir = check_state_dir(state_dir)
    nodes = check_nodes(nodes)
    gpus = int(gpus)
    if gpus < 0:
        raise ValueError('gpus must be >= 0')
    reboot_command = check_reboot_command(reboot_command)
    if not os.path.isdir(state_dir):
        os.makedirs(state_dir)
    with locked(state_dir, 'up.lock'):
        return _up(state_dir, nodes, gpus, reboot_command, resume_timeout, timeout)


def _up(state_dir, nodes, gpus, reboot_command, resume_timeout, timeout):
    sim = read_record(state_dir)
    if _core_running(sim) and sim.get('nodes') == nodes and sim.get('gpus') == gpus:
        if reboot_command is not None:
            set_reboot_command(state_dir, reboot_command)
            with locked(state_dir):
                sim = read_record(state_dir)
                sim['cwd'] = os.getcwd()
                write_record(state_dir, sim)
        return client_env(state_dir)
    if sim or marked_processes(state_dir):
        _down(state_dir)
    ensure_packages()
    _prepare_dirs(state_dir, nodes)
    set_reboot_command(state_dir, reboot_command)
    _write(reboot_wrapper(state_dir), render_reboot_wrapper(state_dir), 0o755)
    port_list = free_ports(len(nodes) + 1)
    ports = dict(zip(nodes, port_list[1:]))
    ports['slurmctld'] = port_list[0]
    _write(slurm_conf(state_dir), render_slurm_conf(state_dir, nodes, gpus, ports, resume_timeout))
    for node in nodes:
        make_gpu_devices(state_dir, node, gpus)
    _write(os.path.join(conf_dir(state_dir), 'gres.conf'), render_gres_conf(state_dir, nodes, gpus))
    _write(os.path.join(conf_dir(state_dir), 'cgroup.conf'), render_cgroup_conf())
    with locked(state_dir):
        write_record(state_dir, {'nodes': nodes, 'gpus': gpus, 'ports': ports, 'slurmd': {},
                                 'started_at': time.time(), 'cwd': os.getcwd()})
    env = client_env(state_dir)
    try:
        munged = _start_munged(state_dir)
        with locked(state_dir):
            sim = read_record(state_dir)
            sim['munged'] = munged
            write_record(state_dir, sim)
        # -c: a fresh cluster, no jobs or node states recovered from an earlier run.
        slurmctld = spawn(state_dir, ['slurmctld', '-D', '-c', '-f', slurm_conf(state_dir)], 'slurmctld.out')
        with locked(state_dir):
            sim = read_record(state_dir)
            sim['slurmctld'] = slurmctld
            write_record(state_dir, sim)
        for node in nodes:
            start_slurmd(state_dir, node)

        def all_idle():
            sim = read_record(state_dir)
            for name in ('munged', 'slurmctld'):
                if not alive(sim.get(name)):
                    raise SlurmSimError('%s exited; see %s' % (name, log_dir(state_dir)))
            states = sinfo_states(env)
            return all(states.get(node) == 'idle' for node in nodes)

        poll(all_idle, timeout, interval=0.5, what='every node idle in sinfo (logs: %s)' % log_dir(state_dir))
    except BaseException:
        _down(state_dir)
        raise
    return env


def down(state_dir):
    """Stop every slurmd, slurmctld and munged of ``state_dir`` and anything they started; keep the files."""
    state_dir = os.path.abspath(state_dir)
    if not os.path.isdir(state_dir):
        return
    with locked(state_dir, 'up.lock'):
        _down(state_dir)


def _down(state_dir):
    with locked(state_dir):
        sim = read_record(state_dir) or {}
        sim['stopping'] = True
        write_record(state_dir, sim)
    if alive(sim.get('slurmctld')) and alive(sim.get('munged')):
        env = client_env(state_dir)
        jobs = run_client(env, ['squeue', '-h', '-o', '%i'], timeout=15, check=False)
        ids = jobs.stdout.split() if jobs.returncode == 0 else []
        if ids:
            run_client(env, ['scancel'] + ids, timeout=15, check=False)
    for record in (sim.get('slurmd') or {}).values():
        _signal(record, signal.SIGTERM)
    for record in (sim.get('slurmd') or {}).values():
        stop_process(record)
    stop_process(sim.get('slurmctld'))
    stop_process(sim.get('munged'))
    # Whatever is left: job steps, a RebootProgram restarter, a reboot command.
    leftovers = []
    for _attempt in range(3):
        leftovers = marked_processes(state_dir)
        if not leftovers:
            break
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.3)
        for pid in leftovers:
            _reap(pid)
    leftovers = marked_processes(state_dir)
    with locked(state_dir):
        sim = read_record(state_dir) or {}
        sim['stopping'] = False
        sim['stopped_at'] = time.time()
        sim['slurmd'] = {}
        sim.pop('munged', None)
        sim.pop('slurmctld', None)
        write_record(state_dir, sim)
    if leftovers:
        raise SlurmSimError('processes survived down(): %s' % leftovers)


def status(state_dir):
    """What runs: {'running', 'nodes', 'processes': {name: bool}, 'sinfo': {node: state}, 'env'}."""
    state_dir = os.path.abspath(state_dir)
    sim = read_record(state_dir) or {}
    processes = {'munged': alive(sim.get('munged')), 'slurmctld': alive(sim.get('slurmctld'))}
    for node in sim.get('nodes', []):
        processes['slurmd ' + node] = alive((sim.get('slurmd') or {}).get(node))
    result = {'state_dir': state_dir, 'nodes': sim.get('nodes', []), 'running': _running(sim),
              'processes': processes, 'sinfo': {}, 'env': client_env(state_dir)}
    if processes['munged'] and processes['slurmctld']:
        result['sinfo'] = sinfo_states(client_env(state_dir))
    return result


# ---------------------------------------------------------------------------------------------
# command line


def main(argv=None):
    parser = argparse.ArgumentParser(prog='slurm_sim.py', description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest='command')
    command = commands.add_parser('up', help='start munged, slurmctld and one slurmd per node')
    command.add_argument('--state-dir', required=True)
    command.add_argument('--nodes', required=True, help='comma-separated node names (inventory host names)')
    command.add_argument('--gpus', type=int, default=8)
    command.add_argument('--reboot-command', help='JSON argv list; the RebootProgram appends the node name')
    command.add_argument('--resume-timeout', type=int, default=300)
    for name, text in (('down', 'stop everything of the state dir'), ('status', 'print what runs (JSON)'),
                       ('env', 'print export lines for the Slurm clients')):
        command = commands.add_parser(name, help=text)
        command.add_argument('--state-dir', required=True)
    commands.add_parser('install', help='apt-get install the Slurm and munge packages when missing')
    options = parser.parse_args(argv)
    try:
        if options.command == 'up':
            env = up(options.state_dir, options.nodes, gpus=options.gpus, reboot_command=options.reboot_command,
                     resume_timeout=options.resume_timeout)
            print(json.dumps(env, indent=2, sort_keys=True))
        elif options.command == 'down':
            down(options.state_dir)
        elif options.command == 'status':
            result = status(options.state_dir)
            print(json.dumps(result, indent=2, sort_keys=True))
            return 0 if result['running'] else 3
        elif options.command == 'env':
            for key, value in sorted(client_env(os.path.abspath(options.state_dir)).items()):
                print('export %s=%s' % (key, value))
        elif options.command == 'install':
            ensure_packages()
        else:
            parser.print_help()
            return 2
    except (SlurmSimError, ValueError) as error:
        sys.stderr.write('slurm_sim: %s\n' % error)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
