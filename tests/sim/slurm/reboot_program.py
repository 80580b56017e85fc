# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Slurm RebootProgram of the simulated fleet: "reboot" the node whose slurmd runs this.

slurmd runs ``RebootProgram`` (the ``reboot-program`` wrapper slurm_sim.py writes into the state
dir, which execs this file with ``--state-dir``) through system(), as root, with no arguments, when
``scontrol reboot`` asks for it.  This program:

1. finds its node from the nearest ``slurmd`` ancestor's command line (``-N <node>``);
2. detaches (double fork, new session) so that slurmd gets its answer at once, as from ``/sbin/reboot``;
3. in the detached restarter: stops that slurmd (the node "goes down") and waits for it to exit,
   runs the stored reboot command (``reboot-command.json`` in the state dir, a JSON argv list) with
   the node name appended, and, when it exits 0, starts the node's slurmd again with ``-b`` so that
   it registers as just booted and slurmctld completes the reboot (``nextstate=`` applies).
   A non-zero exit leaves slurmd stopped: a node that never comes back, which slurmctld marks DOWN
   after ``ResumeTimeout``.

Everything is logged to ``log/reboot-<node>.log`` in the state dir.
"""

from __future__ import absolute_import, division, print_function

import argparse
import os
import subprocess
import sys
import time

__metaclass__ = type  # pylint: disable=invalid-name

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import slurm_sim  # noqa: E402  pylint: disable=wrong-import-position

REBOOT_COMMAND_TIMEOUT = 1800


def node_from_cmdline(argv):
    """The node name of a ``slurmd ... -N NODE`` (or ``-NNODE``) argument list, or None."""
    if not argv or os.path.basename(argv[0]) != 'slurmd':
        return None
    for index, arg in enumerate(argv[1:], 1):
        if arg == '-N' and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith('-N') and len(arg) > 2:
            return arg[2:]
    return None


def find_slurmd(pid=None):
    """(pid, node) of the nearest slurmd ancestor started with ``-N``; (None, None) if there is none."""
    pid = os.getppid() if pid is None else pid
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        node = node_from_cmdline(slurm_sim._cmdline(pid))  # pylint: disable=protected-access
        if node:
            return pid, node
        info = slurm_sim._proc_stat(pid)  # pylint: disable=protected-access
        if info is None:
            break
        pid = info[2]
    return None, None


def log(handle, message):
    handle.write('%s %s\n' % (time.strftime('%Y-%m-%dT%H:%M:%S'), message))
    handle.flush()


def restart(state_dir, node, slurmd_pid, handle):
    """Stop the node's slurmd, run the reboot command, start slurmd -b when it succeeded."""
    record = slurm_sim.proc_record(slurmd_pid)
    log(handle, 'stopping slurmd pid %d of %s' % (slurmd_pid, node))
    slurm_sim.stop_process(record)
    log(handle, 'slurmd of %s stopped' % node)
    command = slurm_sim.get_reboot_command(state_dir)
    if command:
        argv = command + [node]
        log(handle, 'running %s' % ' '.join(argv))
        # Without the sweep mark: what the command leaves running (a container's conmon) is not ours.
        env = dict((key, value) for key, value in os.environ.items() if key != slurm_sim.MARK)
        cwd = (slurm_sim.read_record(state_dir) or {}).get('cwd') or state_dir
        try:
            result = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
                                    env=env, cwd=cwd if os.path.isdir(cwd) else state_dir,
                                    timeout=REBOOT_COMMAND_TIMEOUT, check=False).returncode
        except (OSError, subprocess.TimeoutExpired) as error:
            log(handle, 'reboot command failed: %s' % error)
            result = -1
        log(handle, 'reboot command exited %s' % result)
        if result != 0:
            log(handle, 'leaving slurmd of %s stopped: the node does not come back' % node)
            return 1
    else:
        log(handle, 'no reboot command stored')
    sim = slurm_sim.read_record(state_dir) or {}
    if sim.get('stopping') or node not in sim.get('nodes', []):
        log(handle, 'the cluster is going down; not starting slurmd of %s' % node)
        return 1
    new = slurm_sim.start_slurmd(state_dir, node, booted=True)
    log(handle, 'started slurmd -b for %s: pid %d' % (node, new['pid']))
    return 0


def detach():
    """Double fork: returns True in the detached grandchild, exits in the others (parent returns False)."""
    first = os.fork()
    if first:
        os.waitpid(first, 0)
        return False
    os.setsid()
    if os.fork():
        os._exit(0)  # pylint: disable=protected-access
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--state-dir', required=True)
    parser.add_argument('--node', help='node name (default: from the parent slurmd -N)')
    parser.add_argument('--slurmd-pid', type=int, help='pid of the slurmd to replace (default: the parent slurmd)')
    parser.add_argument('--foreground', action='store_true', help='do not detach (for debugging)')
    parser.add_argument('features', nargs='*', help='node features slurmd may append (ignored)')
    options = parser.parse_args(argv)
    state_dir = os.path.abspath(options.state_dir)
    pid, node = find_slurmd()
    if options.node:
        node = options.node
    if options.slurmd_pid:
        pid = options.slurmd_pid
    if not node or not pid:
        sys.stderr.write('reboot_program: no parent slurmd -N <node> found\n')
        return 1
    try:
        slurm_sim.check_node_name(node)
    except ValueError as error:
        sys.stderr.write('reboot_program: %s\n' % error)
        return 1
    if not options.foreground and not detach():
        return 0
    descriptor = os.open(os.devnull, os.O_RDONLY)
    os.dup2(descriptor, 0)
    os.close(descriptor)
    with open(os.path.join(slurm_sim.log_dir(state_dir), 'reboot-%s.log' % node), 'a', encoding='utf-8') as handle:
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
        log(handle, 'reboot requested for %s (slurmd pid %d)' % (node, pid))
        try:
            code = restart(state_dir, node, pid, handle)
        except Exception as error:  # pylint: disable=broad-except
            log(handle, 'restart failed: %r' % (error,))
            code = 1
    if not options.foreground:
        os._exit(code)  # pylint: disable=protected-access
    return code


if __name__ == '__main__':
    sys.exit(main())
