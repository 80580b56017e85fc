# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node side of ``tests/sim/fleet shape``: the shapes real nodes come in besides a packaged driver.

``python3 -m gpufleet_sim.shapes COMMAND`` (``PYTHONPATH=/usr/lib/gpufleet-sim`` in a node; ``$GPUFLEET_SIM_ROOT`` in tests):

``show``
    JSON: ``driver_source`` as the simulation knows it (``packaged``, ``runfile``, ``unowned``, or null: no driver
    installed), the installed and the loaded driver and flavor, the loaded module's file, whether ``systemctl`` is
    hidden, the driver tree's version.
``tree install VERSION [--open]``
    A driver tree no package owns, as on the H100 of issue 27: ``/usr/local/nvidia/{bin/nvidia-smi,
    bin/nvidia-persistenced, lib64/libnvidia-ml.so.<v>, lib64/libnvidia-ml.so.1, modules/nvidia.ko, version,
    kernel.release}`` built for the running kernel, files read-only (mode 0444/0555: the H100 mounts its tree read-only;
    a container cannot take a new mount, so root could still write), ``/etc/ld.so.conf.d/000-nvidia-tree.conf``, a
    ``PATH`` line with ``/usr/local/nvidia/bin`` in ``/etc/environment`` (pam_env: ssh sessions find ``nvidia-smi``) and the
    operator's ``nvidia-persistenced.service`` in ``/etc/systemd/system`` running the tree's daemon.  The boot step
    loads ``modules/nvidia.ko`` when ``kernel.release`` is the booted kernel (``state.find_module``).
``tree remove``
    Takes all of it away again.
``persistenced install|remove``
    The systemd unit an operator adds next to a runfile driver (NVIDIA's sample ``nvidia-persistenced-init``, installed
    as its ``install.sh`` does to ``/usr/lib/systemd/system``, enabled), or its removal.
``systemd hide|restore``
    A node without systemd as far as tools see: ``systemctl`` and ``journalctl`` leave every folder of ``PATH`` (and
    the ``/sbin`` folders ``get_bin_path`` adds) for ``/usr/libexec/gpufleet-sim``.  systemd itself stays PID 1, so the
    daemons it started (nvidia-persistenced, Fabric Manager, the DCGM host engine) keep running; ``shutdown``,
    ``reboot``, ``halt`` and ``poweroff`` are pointed at the private ``systemctl`` so the node still reboots.
"""

import json
import os
import shutil
import sys

from gpufleet_sim import runfile, state

TREE = state.DRIVER_TREE
LD_CONF = 'etc/ld.so.conf.d/000-nvidia-tree.conf'
ENVIRONMENT = 'etc/environment'
TREE_PATH = ('PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/nvidia/bin"\n')
ETC_UNITS = 'etc/systemd/system'
USR_UNITS = 'usr/lib/systemd/system'
PERSISTENCED_UNIT = 'nvidia-persistenced.service'
WANTS = 'etc/systemd/system/multi-user.target.wants'
PRIVATE = 'usr/libexec/gpufleet-sim'
HIDDEN_RECORD = 'usr/libexec/gpufleet-sim/no-systemd.json'
HIDDEN_TOOLS = ('systemctl', 'journalctl')
# ansible's get_bin_path looks in PATH and in these.
BIN_DIRS = ('usr/local/sbin', 'usr/local/bin', 'usr/sbin', 'usr/bin', 'sbin', 'bin')
SYSTEMCTL_LINKS = ('shutdown', 'reboot', 'halt', 'poweroff', 'telinit', 'runlevel')
TREE_MODULES = ('nvidia', 'nvidia-modeset', 'nvidia-drm', 'nvidia-uvm', 'nvidia-peermem')


def _unit(description, exec_start, extra=''):
    return ('[Unit]\nDescription=%s\nWants=syslog.target\nAfter=gpufleet-sim-boot.service\n%s\n[Service]\n'
            # The sample says Type=forking: the simulated daemon stays in the foreground.
            'Type=simple\nExecStart=%s\nExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n\n'
            '[Install]\nWantedBy=multi-user.target\n' % (description, extra, exec_start))


SAMPLE_UNIT = _unit('NVIDIA Persistence Daemon', '/usr/bin/nvidia-persistenced --user nvidia-persistenced', 'IgnoreOnIsolate=true\n')
TREE_UNIT = _unit('NVIDIA Persistence Daemon (driver tree /usr/local/nvidia)',
                  '/usr/local/nvidia/bin/nvidia-persistenced --user nvidia-persistenced')


def _wrapper(module):
    return ('#!/bin/sh\n# Driver tree /usr/local/nvidia (simulated; no package owns it); the code is bind-mounted from the host.\n'
            'PYTHONPATH=/usr/lib/gpufleet-sim exec python3 -m gpufleet_sim.%s "$@"\n' % module)


def _remove_path(relative):
    full = state.path(relative)
    if os.path.islink(full) or os.path.isfile(full):
        os.unlink(full)
        return True
    if os.path.isdir(full):
        for folder, _dirs, _files in os.walk(full):
            os.chmod(folder, 0o755)
        shutil.rmtree(full)
        return True
    return False


def _enable(unit_relative):
    link = os.path.join(WANTS, PERSISTENCED_UNIT)
    os.makedirs(state.path(WANTS), exist_ok=True)
    if os.path.lexists(state.path(link)):
        os.unlink(state.path(link))
    os.symlink('/' + unit_relative, state.path(link))


def _disable():
    link = state.path(os.path.join(WANTS, PERSISTENCED_UNIT))
    if os.path.islink(link):
        os.unlink(link)


# --------------------------------------------------------------------------- the driver tree

def tree_install(version, is_open):
    """Write the driver tree ``version`` for the running kernel; returns the files written (relative to the root)."""
    kernel = runfile.booted_kernel()
    if not kernel:
        raise ValueError('no running or installed kernel to build the tree for')
    tree_remove()
    module = '%s%s\n' % (version, ' open' if is_open else '')
    files = [('bin/nvidia-smi', _wrapper('nvidia_smi'), 0o555), ('bin/nvidia-persistenced', _wrapper('nvidia_persistenced'), 0o555),
             ('lib64/libnvidia-ml.so.%s' % version, version + '\n', 0o444), ('version', version + '\n', 0o444),
             ('kernel.release', kernel + '\n', 0o444)]
    files += [('modules/%s.ko' % name, module, 0o444) for name in TREE_MODULES]
    written = []
    for name, content, mode in files:
        relative = os.path.join(TREE, name)
        state.write_text(relative, content)
        os.chmod(state.path(relative), mode)
        written.append(relative)
    os.symlink('libnvidia-ml.so.%s' % version, state.path(os.path.join(TREE, 'lib64', 'libnvidia-ml.so.1')))
    written.append(os.path.join(TREE, 'lib64', 'libnvidia-ml.so.1'))
    for folder, _dirs, _files in os.walk(state.path(TREE)):
        os.chmod(folder, 0o555)
    state.write_text(LD_CONF, '/usr/local/nvidia/lib64\n')
    environment = state.read_text(ENVIRONMENT) or ''
    state.write_text(ENVIRONMENT, ''.join(line for line in environment.splitlines(True) if not line.startswith('PATH=')) + TREE_PATH)
    unit = os.path.join(ETC_UNITS, PERSISTENCED_UNIT)
    state.write_text(unit, TREE_UNIT)
    _enable(unit)
    return written + [LD_CONF, ENVIRONMENT, unit]


def tree_remove():
    """Take the driver tree and what goes with it away; returns what was removed."""
    removed = [relative for relative in (TREE, LD_CONF) if _remove_path(relative)]
    environment = state.read_text(ENVIRONMENT) or ''
    if TREE_PATH in environment:
        state.write_text(ENVIRONMENT, environment.replace(TREE_PATH, ''))
        removed.append(ENVIRONMENT)
    unit = os.path.join(ETC_UNITS, PERSISTENCED_UNIT)
    if state.read_text(unit) == TREE_UNIT:
        _disable()
        _remove_path(unit)
        removed.append(unit)
    return removed


def tree_version():
    text = state.read_text(state.TREE_VERSION)
    return text.strip() if text and text.strip() else None


# --------------------------------------------------------------------------- the runfile driver's persistenced unit

def persistenced_install():
    unit = os.path.join(USR_UNITS, PERSISTENCED_UNIT)
    state.write_text(unit, SAMPLE_UNIT)
    _enable(unit)
    return [unit]


def persistenced_remove():
    unit = os.path.join(USR_UNITS, PERSISTENCED_UNIT)
    if state.read_text(unit) != SAMPLE_UNIT:
        return []       # a package's unit (dpkg replaced the sample): not ours to remove
    _disable()
    _remove_path(unit)
    return [unit]


# --------------------------------------------------------------------------- systemctl out of sight

def _real_dirs():
    """BIN_DIRS without the ones that are links to others (merged /usr: /bin -> usr/bin)."""
    seen = set()
    folders = []
    for relative in BIN_DIRS:
        full = state.path(relative)
        if not os.path.isdir(full):
            continue
        real = os.path.realpath(full)
        if real not in seen:
            seen.add(real)
            folders.append(relative)
    return folders


def systemd_hidden():
    return state.read_json(HIDDEN_RECORD, None) is not None


def systemd_hide():
    """Move systemctl and journalctl out of every tool folder; returns the record (also kept in HIDDEN_RECORD)."""
    if systemd_hidden():
        return state.read_json(HIDDEN_RECORD)
    record = {'moved': {}, 'links': {}}
    os.makedirs(state.path(PRIVATE), exist_ok=True)
    for folder in _real_dirs():
        for tool in HIDDEN_TOOLS:
            relative = os.path.join(folder, tool)
            full = state.path(relative)
            if os.path.isfile(full) and not os.path.islink(full):
                private = os.path.join(PRIVATE, tool)
                shutil.move(full, state.path(private))
                record['moved'][relative] = private
            elif os.path.islink(full):
                record['links'][relative] = os.readlink(full)
                os.unlink(full)
    systemctl = '/' + os.path.join(PRIVATE, 'systemctl')
    for folder in _real_dirs():
        for name in SYSTEMCTL_LINKS:
            relative = os.path.join(folder, name)
            full = state.path(relative)
            if os.path.islink(full) and os.path.basename(os.readlink(full)) == 'systemctl':
                record['links'][relative] = os.readlink(full)
                os.unlink(full)
                os.symlink(systemctl, full)
    state.write_json(HIDDEN_RECORD, record)
    return record


def systemd_restore():
    """Undo :func:`systemd_hide`; returns the record it restored (None when nothing was hidden)."""
    record = state.read_json(HIDDEN_RECORD, None)
    if record is None:
        return None
    for relative, private in record.get('moved', {}).items():
        if os.path.exists(state.path(private)):
            shutil.move(state.path(private), state.path(relative))
    for relative, target in record.get('links', {}).items():
        full = state.path(relative)
        if os.path.lexists(full):
            os.unlink(full)
        os.symlink(target, full)
    state.remove(HIDDEN_RECORD)
    return record


# --------------------------------------------------------------------------- what the node is

def driver_source():
    """``packaged``, ``runfile``, ``unowned`` or None, as the simulation installed the driver (not what the collection decides)."""
    if runfile.driver_packages():
        return 'packaged'
    if runfile.installed():
        return 'runfile'
    if tree_version():
        return 'unowned'
    return None


def show():
    boot = state.load_boot() or {}
    return {
        'driver_source': driver_source(),
        'driver_installed': state.installed_nvml(),
        'driver_loaded': boot.get('driver'),
        'open_loaded': bool(boot.get('open')) if boot.get('driver') else None,
        'module': boot.get('module'),
        'module_source': boot.get('module_source'),
        'kernel': boot.get('kernel'),
        'boot_id': boot.get('boot_id'),
        'runfile': (runfile.installed() or {}).get('version'),
        'tree': tree_version(),
        'systemctl_hidden': systemd_hidden(),
        'packages': runfile.driver_packages(),
    }


def run(argv):
    words = list(argv)
    command = tuple(words[:2])
    if words[:1] == ['show']:
        result = show()
    elif command == ('tree', 'install') and len(words) >= 3:
        result = tree_install(words[2], '--open' in words[3:])
    elif command == ('tree', 'remove'):
        result = tree_remove()
    elif command == ('persistenced', 'install'):
        result = persistenced_install()
    elif command == ('persistenced', 'remove'):
        result = persistenced_remove()
    elif command == ('systemd', 'hide'):
        result = systemd_hide()
    elif command == ('systemd', 'restore'):
        result = systemd_restore()
    else:
        sys.stderr.write('usage: python3 -m gpufleet_sim.shapes show | tree install VERSION [--open] | tree remove | '
                         'persistenced install|remove | systemd hide|restore\n')
        return 2
    sys.stdout.write(json.dumps(result, sort_keys=True) + '\n')
    return 0


def main(argv=None):
    """Entry point: ``python3 -m gpufleet_sim.shapes ARGS``."""
    return run(sys.argv[1:] if argv is None else list(argv))


if __name__ == '__main__':
    sys.exit(main())
