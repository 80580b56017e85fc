# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a node's GPU facts are read from, and the same reading as one POSIX shell script (no Python on the node).

Pure, standard library only, Python 3.8+.  Two gatherers produce the ``raw`` mapping ``_facts.assemble`` reads:

* the ``gpu_facts`` module (Python on the node, ``_command.run`` per tool);
* ``SCRIPT``, run by ``drift_check``'s action in one command over the connection when a host has no facts yet: the
  nightly drift report then costs each node one ``/bin/sh`` and no AnsiballZ, interpreter discovery or temporary module
  file, which is what keeps ``drift_report`` cheap at fleet scale.  ``parse`` turns its output into the same ``raw``.

Both take the tools, their arguments, the search directories, the units and the state files from the constants
below, so they read the same things; ``tests/unit/plugins/module_utils/test__gather.py`` runs both on one set of
stand-in tools and compares what ``assemble`` makes of them.

The script's output is a series of sections ``\\n<boundary> <name>\\n<bytes>``; ``boundary`` is a random token the
controller passes as an argument (never inventory or user data), so tool output cannot forge a section.  Every tool
runs under ``timeout -k 2`` (GNU coreutils; the script refuses to run without it); exit status 124 or 137 from
``timeout`` reads as timed out, 128+N as killed by signal N (as ``subprocess`` reports it, -N).  Output that came
through a pseudo-terminal (``ssh -tt``, which Ansible uses for become) has its CR LF turned back into LF.

A file the node lacks gives no section (the /proc files, the state files, a driver tree's ``version``), and so does a
tool it lacks; ``parse`` reads a missing section, or a flag missing from ``flags``, as absent.  The script and ``parse``
ship together, but that rule also lets the output of an earlier script parse: the real H100 capture in
tests/unit/fixtures/real-outputs/h100-device predates the ``driver_tree_version`` section and the
``runfile_installer_log`` flag (issue 27) and reads with no driver tree and no installer log.  Only ``kernel``,
``flags`` and ``end`` must be there, and a tool's ``.path`` needs its ``.rc``: else ``GatherError``.
"""

from __future__ import annotations

import functools
import shlex

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _command
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _facts
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts import RECORDS, SERVICES, SYSTEMCTL_PROPERTIES, split_systemctl_show
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._packages import DPKG_QUERY_FORMAT, RPM_QUERY_FORMAT

# The node's paths both gatherers read (module attributes, read when gathering: the parity tests point them into a folder).
GPU_OPERATOR_DRIVER_ROOT = _facts.GPU_OPERATOR_DRIVER_ROOT
RUNFILE_UNINSTALLER = _facts.RUNFILE_UNINSTALLER
RUNFILE_INSTALLER_LOG = _facts.RUNFILE_INSTALLER_LOG
NVSWITCH_DEVICES = '/proc/driver/nvidia-nvswitch/devices'
CUDA_BIN = '/usr/local/cuda/bin'
# Version banners: tool -> arguments (looked up in CUDA_BIN first, then PATH, then the sbin folders).
BANNERS = {
    'dcgmi': ['--version'],
    'nvidia-ctk': ['--version'],
    'nvidia-container-cli': ['-V'],
    'nv-fabricmanager': ['--version'],
    'nvcc': ['--version'],
}
NVIDIA_SMI_ARGS = ['-q', '-x']
# One systemctl call for every unit (one process less per unit on every node); systemd prints a block per unit with its Id.
SYSTEMCTL_ARGS = ['show', SYSTEMCTL_PROPERTIES] + [unit + '.service' for unit in SERVICES]
# Looked up before PATH: the GPU Operator's driver root, then a driver tree mounted at /usr/local/nvidia (a node whose
# driver no package installed; a non-interactive PATH, as Ansible's, seldom has it).  A tree elsewhere is found on PATH.
NVIDIA_SMI_DIRS = [GPU_OPERATOR_DRIVER_ROOT + '/usr/bin', '/usr/local/nvidia/bin']
# Bytes read of a state file; more than this reads as False (too large to be a record).
RECORD_LIMIT = 65536
# gpu_facts' defaults: seconds per tool, seconds for the package listing, the folder gpu_stack records the pin in.
COMMAND_TIMEOUT = 60
PACKAGE_TIMEOUT = 120
STATE_DIR = '/etc/gpufleet'
# Seconds between SIGTERM and SIGKILL (``timeout -k``), as _command.KILL_GRACE.
KILL_GRACE = 2

PROC_FILES = (('proc_modules', '/proc/modules'), ('proc_driver_version', _facts.PROC_DRIVER_VERSION))
DRIVER_TREE_VERSION_LIMIT = _facts.DRIVER_TREE_VERSION_LIMIT


class GatherError(Exception):
    """The script's output is incomplete or the node cannot run it (the caller falls back to the module)."""


@functools.lru_cache(maxsize=1)
def script():
    """The gathering script (POSIX sh); arguments: boundary, command timeout, package timeout, state folder.

    Built from this file's, ``_facts``' and ``_packages``' constants only, never from inventory data; built once per process
    (``script.cache_clear()`` after changing a constant, as the tests do).
    """
    banners = '\n'.join('find_tool %s %s && run %s "$ct" "$found" %s' % (
        shlex.quote(tool), shlex.quote(CUDA_BIN), shlex.quote('banner:' + tool), shlex.join(arguments))
        for tool, arguments in BANNERS.items())
    return '\n'.join([
        'set -f',
        'LC_ALL=C; LANG=C; export LC_ALL LANG',
        'b=$1; ct=$2; pt=$3; sd=$4',
        's() { printf \'\\n%s %s\\n\' "$b" "$1"; }',
        'find_tool() {',
        '  found=; _n=$1; shift',
        '  _ifs=$IFS; IFS=:',
        '  set -- "$@" $PATH /sbin /usr/sbin /usr/local/sbin',
        '  IFS=$_ifs',
        '  for _d; do',
        '    [ -n "$_d" ] || continue',
        '    if [ -f "$_d/$_n" ] && [ -x "$_d/$_n" ]; then found=$_d/$_n; return 0; fi',
        '  done',
        '  return 1',
        '}',
        'find_tool timeout || { s "error timeout(1) not found"; exit 3; }',
        'tmp=$(mktemp -d 2>/dev/null) || { s "error mktemp -d failed"; exit 3; }',
        'trap \'rm -rf -- "$tmp"\' EXIT',
        'run() {',
        '  _k=$1; _t=$2; shift 2',
        '  s "$_k.path"; printf \'%s\' "$1"',
        # In the background and waited for: no shell prints "Segmentation fault" or the like into the tool's output.
        '  timeout -k %d "$_t" "$@" </dev/null >"$tmp/o" 2>"$tmp/e" & wait $! 2>/dev/null; _rc=$?' % KILL_GRACE,
        '  s "$_k.rc"; printf \'%s\' "$_rc"',
        '  s "$_k.out"; cat "$tmp/o"',
        '  s "$_k.err"; cat "$tmp/e"',
        '}',
        'readable() { [ -f "$2" ] && [ -r "$2" ] && { s "$1"; cat -- "$2"; }; }',
        's kernel; uname -r',
    ] + ['readable %s %s' % (key, shlex.quote(path)) for key, path in PROC_FILES] + [
        'root=0; [ -d %s ] && [ -n "$(ls -A %s 2>/dev/null)" ] && root=1' % ((shlex.quote(GPU_OPERATOR_DRIVER_ROOT),) * 2),
        'runfile=0; [ -e %s ] && runfile=1' % shlex.quote(RUNFILE_UNINSTALLER),
        'installer_log=0; [ -e %s ] && installer_log=1' % shlex.quote(RUNFILE_INSTALLER_LOG),
        'set +f; switches=0',
        'if [ -d %s ]; then for _f in %s/* %s/.[!.]*; do [ -e "$_f" ] && switches=$((switches+1)); done' % (
            (shlex.quote(NVSWITCH_DEVICES),) * 3),
        'elif [ -d /dev ]; then for _f in /dev/nvidia-nvswitch[0-9]*; do',
        '  case ${_f#/dev/nvidia-nvswitch} in *[!0-9]*|"") ;; *) switches=$((switches+1)) ;; esac; done',
        'fi; set -f',
        's flags; printf \'gpu_operator_driver_root=%s runfile_uninstaller=%s runfile_installer_log=%s nvswitch_count=%s\' '
        '"$root" "$runfile" "$installer_log" "$switches"',
    ] + ['[ -f "$sd"/%s ] && [ -r "$sd"/%s ] && { s %s; head -c %d -- "$sd"/%s; }' % (
        shlex.quote(name), shlex.quote(name), shlex.quote('record:' + name), RECORD_LIMIT + 1, shlex.quote(name))
        for name in RECORDS] + [
        'if find_tool nvidia-smi %s; then' % shlex.join(NVIDIA_SMI_DIRS),
        # A driver tree: <root>/bin/nvidia-smi beside <root>/version (_facts.driver_tree_root).
        '  case $found in *%s) _v=${found%%%s}; _v=${_v%%/}/version' % (_facts.DRIVER_TREE_SMI, _facts.DRIVER_TREE_SMI),
        '    [ -f "$_v" ] && [ -r "$_v" ] && { s driver_tree_version; head -c %d -- "$_v"; } ;; esac' % DRIVER_TREE_VERSION_LIMIT,
        '  run nvidia_smi "$ct" "$found" %s' % shlex.join(NVIDIA_SMI_ARGS),
        'fi',
        'if find_tool dpkg-query; then run packages:dpkg "$pt" "$found" -W -f %s' % shlex.quote(DPKG_QUERY_FORMAT),
        'elif find_tool rpm; then run packages:rpm "$pt" "$found" -qa --qf %s; fi' % shlex.quote(RPM_QUERY_FORMAT),
        banners,
        'find_tool systemctl && run services "$ct" "$found" %s' % shlex.join(SYSTEMCTL_ARGS),
        's end',
        '',
    ])


def systemctl_result(result):
    """What ``_facts.systemd_state`` reads of the ``systemctl show`` call's result (either gatherer's)."""
    return {'path': result['argv'][0], 'rc': result['rc'], 'stderr': result['stderr'], 'timed_out': result['timed_out']}


def argv(text, boundary, command_timeout, package_timeout, state_dir):
    """The argument list that runs the script: ``/bin/sh -c SCRIPT gpufleet-gather BOUNDARY CT PT STATE_DIR``."""
    return ['/bin/sh', '-c', text, 'gpufleet-gather', boundary, str(int(command_timeout)), str(int(package_timeout)), state_dir]


def _sections(data, boundary):
    token = boundary.encode('ascii')
    if b'\n' + token + b' kernel\r\n' in data:
        # A pseudo-terminal carried the output (ssh -tt for become): it turned every newline into CR LF; undo exactly that.
        data = data.replace(b'\r\n', b'\n')
    marker = b'\n' + token + b' '
    sections = {}
    for chunk in data.split(marker)[1:]:
        name, _newline, body = chunk.partition(b'\n')
        sections[name.decode('utf-8', 'replace')] = body
    return sections


def _read_text(data):
    """Like ``open(path, encoding='utf-8', errors='replace').read()`` (universal newlines)."""
    return data.decode('utf-8', 'replace').replace('\r\n', '\n').replace('\r', '\n')


def _run_result(sections, key, argv_tail, timeout, warnings):
    path = sections[key + '.path'].decode('utf-8', 'surrogateescape')
    command_argv = [path] + list(argv_tail)
    try:
        status = int(sections[key + '.rc'].strip() or b'-')
    except ValueError:
        raise GatherError('%s: exit status %r is not a number' % (key, sections[key + '.rc'][:20]))
    timed_out = status in (124, 137)
    rc = None if timed_out else -(status - 128) if 128 < status < 192 else status
    if timed_out:
        warnings.append(_command.describe_timeout({'command': _command.render(command_argv), 'timeout': timeout}))
    return {
        'argv': command_argv,
        'command': _command.render(command_argv),
        'rc': rc,
        'stdout': _command.to_text(sections.get(key + '.out', b'')),
        'stderr': _command.to_text(sections.get(key + '.err', b'')),
        'timed_out': timed_out,
        'timeout': timeout,
    }


def parse(data, boundary, command_timeout, package_timeout):
    """The ``raw`` mapping for ``_facts.assemble`` from the script's output (bytes).  Raises GatherError when incomplete.

    ``raw['warnings']`` (not read by ``assemble``) names each command that ran past its limit, as the module warns.
    """
    sections = _sections(data, boundary)
    errors = [name for name in sections if name.startswith('error ')]
    if errors:
        raise GatherError(errors[0][len('error '):])
    if 'end' not in sections or 'flags' not in sections or 'kernel' not in sections:
        raise GatherError('the gathering script stopped before its end (%d sections)' % len(sections))
    flags = dict(item.partition('=')[::2] for item in sections['flags'].decode('ascii', 'replace').split())
    raw = {
        'kernel': sections['kernel'].decode('utf-8', 'replace').strip('\n'),
        'gpu_operator_driver_root': flags.get('gpu_operator_driver_root') == '1',
        'runfile_uninstaller': flags.get('runfile_uninstaller') == '1',
        'runfile_installer_log': flags.get('runfile_installer_log') == '1',
        'nvswitch_count': int(flags['nvswitch_count']) if flags.get('nvswitch_count', '').isdigit() else 0,
        'banners': {},
        'services': {},
        'records': {},
        'nvidia_smi': None,
        'systemctl': None,
        'driver_tree_version': None,
        'warnings': [],
    }
    for key, _path in PROC_FILES:
        raw[key] = _read_text(sections[key]) if key in sections else None
    if 'driver_tree_version' in sections:
        raw['driver_tree_version'] = sections['driver_tree_version'].decode('utf-8', 'replace')
    for name in RECORDS:
        body = sections.get('record:' + name)
        raw['records'][name] = None if body is None else False if len(body) > RECORD_LIMIT else body.decode('utf-8', 'replace')
    try:
        if 'nvidia_smi.path' in sections:
            raw['nvidia_smi'] = _run_result(sections, 'nvidia_smi', NVIDIA_SMI_ARGS, command_timeout, raw['warnings'])
            raw['nvidia_smi']['path'] = raw['nvidia_smi']['argv'][0]
        for manager, arguments in (('dpkg', ['-W', '-f', DPKG_QUERY_FORMAT]), ('rpm', ['-qa', '--qf', RPM_QUERY_FORMAT])):
            if 'packages:%s.path' % manager in sections:
                raw['packages'] = dict(_run_result(sections, 'packages:' + manager, arguments, package_timeout, raw['warnings']), manager=manager)
        for tool, arguments in BANNERS.items():
            if 'banner:%s.path' % tool in sections:
                result = _run_result(sections, 'banner:' + tool, arguments, command_timeout, raw['warnings'])
                raw['banners'][tool] = None if result['timed_out'] else result['stdout'] + result['stderr']
        if 'services.path' in sections:
            result = _run_result(sections, 'services', SYSTEMCTL_ARGS, command_timeout, raw['warnings'])
            raw['systemctl'] = systemctl_result(result)
            blocks = split_systemctl_show(result['stdout']) if result['rc'] == 0 else {}
            raw['services'] = dict((unit, blocks.get(unit)) for unit in SERVICES)
    except KeyError as exc:
        raise GatherError('the gathering script printed no %s section' % exc)
    return raw
