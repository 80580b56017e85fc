# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The boot step of a simulated node (``gpufleet-sim-boot.service``, first unit of every boot).

It "boots" the newest installed kernel (``boot/vmlinuz-*``, ``dpkg --compare-versions`` order),
"loads" the nvidia module built for it or none: the DKMS build (``lib/modules/<kernel>/updates/dkms/nvidia.ko``), else
the runfile installer's (``lib/modules/<kernel>/kernel/drivers/video/nvidia.ko``), else the module of a driver tree no
package owns (``usr/local/nvidia/modules/nvidia.ko``, only when its ``kernel.release`` is the booted kernel; see
:func:`state.find_module`),
forgets the daemons of the previous boot (pid files under ``run/gpufleet-sim/``, the legacy
``nvidia-smi -pm`` setting), shows the kernel and the module where tools read them on metal
(``run/gpufleet-sim/kernel-release`` for the node's ``uname()`` shim, ``proc/driver/nvidia/version`` while a
module is loaded: :func:`state.publish`) and writes ``run/gpufleet-sim/boot.json``::

    {"kernel": "6.1.0-26-amd64", "driver": "550.127.05" or null, "open": false,
     "module": "/lib/modules/6.1.0-26-amd64/updates/dkms/nvidia.ko" or null, "module_source": "dkms", "runfile", "tree" or null,
     "boot_id": "<uuid4>", "booted_at": 1732200000}

With the ``reboot_hang`` fault it masks (``--runtime``, so only for this boot) and stops sshd, so
the node never comes back.  The systemctl calls are made only when this really runs as a unit of
the node's systemd (PID 1 is systemd, the node root is ``/``, ``$INVOCATION_ID`` set) and
``$GPUFLEET_SIM_NO_SYSTEMCTL`` is not set; otherwise they are only recorded.  Either way
``run/gpufleet-sim/reboot_hang.json`` records them.  The Xid log is not written here: ``fleet
fault NODE xid`` appends it (tests/sim/fleet_faults.py).
"""

import os
import shutil
import stat
import subprocess
import sys
import time
import uuid

from gpufleet_sim import state

HANG_COMMANDS = (
    ['systemctl', 'mask', '--runtime', 'ssh.service', 'ssh.socket'],
    ['systemctl', '--no-block', 'stop', 'ssh.service', 'ssh.socket'],
)
# Where ``fleet shape NODE no-systemd`` keeps the node's systemctl out of sight (gpufleet_sim/shapes.py).
PRIVATE_SYSTEMCTL = '/usr/libexec/gpufleet-sim/systemctl'
PER_BOOT_FILES = (state.PERSISTENCED_PID, state.FABRICMANAGER_PID, state.PERSISTENCE_MODE_FILE, state.REBOOT_HANG_FILE)


def _systemctl(command):
    """``command`` with systemctl resolved: from PATH, else the private copy of a node without systemctl."""
    if shutil.which(command[0]) is None and os.path.exists(PRIVATE_SYSTEMCTL):
        return [PRIVATE_SYSTEMCTL] + command[1:]
    return command


def under_systemd():
    """True when this process is a unit started by the node's systemd (never in unit tests)."""
    if os.environ.get(state.NO_SYSTEMCTL_ENV, '') not in ('', '0'):
        return False
    if os.path.realpath(state.root()) != '/' or not os.environ.get('INVOCATION_ID'):
        return False
    try:
        with open('/proc/1/comm', encoding='utf-8') as handle:
            return handle.read().strip() == 'systemd'
    except OSError:
        return False


def hang_ssh():
    """Mask and stop sshd for this boot (fault ``reboot_hang``); returns the record written."""
    execute = under_systemd()
    results = []
    if execute:
        for command in HANG_COMMANDS:
            try:
                results.append(subprocess.call(_systemctl(command)))
            except OSError:
                results.append(127)
    record = {'commands': [' '.join(command) for command in HANG_COMMANDS], 'executed': execute, 'results': results}
    state.write_json(state.REBOOT_HANG_FILE, record)
    return record


def make_device_nodes(hardware):
    """The device nodes a loaded driver creates: /dev/nvidiactl, /dev/nvidiaN and, on NVSwitch systems,
    /dev/nvidia-nvswitchctl and /dev/nvidia-nvswitchN (character devices, major 195 as on metal).

    Where the process may not create device nodes, empty files stand in; tools only look at the names.
    """
    names = [('nvidiactl', 255)] + [('nvidia%d' % index, index) for index in range(len((hardware or {}).get('gpus') or []))]
    switches = int((hardware or {}).get('nvswitch_count') or 0)
    if switches:
        names += [('nvidia-nvswitchctl', 255)] + [('nvidia-nvswitch%d' % index, index) for index in range(switches)]
    for name, minor in names:
        target = state.path('dev/' + name)
        if os.path.exists(target):
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(195, minor))
        except (OSError, AttributeError):
            with open(target, 'w', encoding='utf-8'):
                pass


MODPROBE = 'usr/local/sbin/modprobe'
MODPROBE_WRAPPER = '#!/bin/sh\n# gpufleet-sim: the simulated nvidia modules (see gpufleet_sim/modprobe.py)\n' \
    'PYTHONPATH=/usr/lib/gpufleet-sim exec python3 -m gpufleet_sim.modprobe "$@"\n'


def install_modprobe():
    """Put the fake modprobe first on root's PATH (``/usr/local/sbin``): it loads and unloads the simulated
    nvidia module the way a boot does (driver reload); other modules go to the real modprobe when there is one."""
    if state.read_text(MODPROBE) == MODPROBE_WRAPPER:
        return
    state.write_text(MODPROBE, MODPROBE_WRAPPER)
    os.chmod(state.path(MODPROBE), 0o755)


def boot(now=None):
    """Perform the boot step; returns the boot.json content."""
    for relative in PER_BOOT_FILES:
        state.remove(relative)
    kernels = state.kernels()
    kernel = kernels[-1] if kernels else None
    module = state.find_module(kernel)
    driver = module['version'] if module else None
    is_open = bool(module and module['open'])
    record = {
        'kernel': kernel,
        'driver': driver,
        'open': is_open,
        'module': module['path'] if module else None,
        'module_source': module['source'] if module else None,
        'boot_id': str(uuid.uuid4()),
        'booted_at': int(time.time() if now is None else now),
    }
    slow = state.fault('slow_boot')
    if slow is not None:
        # Fault slow_boot: the firmware's POST and memory training of a large server; sshd starts after this step.
        seconds = max(0, int(slow['seconds']))
        print('gpufleet-sim: slow_boot: POST takes %d s' % seconds)
        time.sleep(seconds)
    lost = state.fault('gpu_lost')
    if lost is not None:
        # Fault gpu_lost: this boot does not find the GPU (it is missing from nvidia-smi and dcgmi until a boot without the fault).
        record['absent_gpus'] = [int(lost['gpu'])]
    state.write_json(state.BOOT_FILE, record)
    state.publish(record)
    install_modprobe()
    if driver:
        make_device_nodes(state.load_hardware())
    if kernel is None:
        print('gpufleet-sim: no kernel installed (/boot/vmlinuz-*); booted without an NVIDIA driver')
    elif driver:
        print('gpufleet-sim: booted %s; loaded NVIDIA %skernel module %s' % (kernel, 'open ' if is_open else '', driver))
    else:
        print('gpufleet-sim: booted %s; no NVIDIA kernel module built for it' % kernel)
    if state.fault('reboot_hang') is not None:
        record_hang = hang_ssh()
        print('gpufleet-sim: reboot_hang: sshd %s' % ('masked and stopped' if record_hang['executed'] else 'hang recorded only'))
    return record


def main(argv=None):
    """Entry point: ``python3 -m gpufleet_sim.boot``."""
    del argv
    boot()
    return 0


if __name__ == '__main__':
    sys.exit(main())
