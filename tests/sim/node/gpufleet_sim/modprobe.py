# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fake ``modprobe`` of a simulated node, for the nvidia modules only (a driver reload without a reboot).

``modprobe -r nvidia`` unloads the simulated module (``boot.json`` ``driver`` becomes null, as after
``rmmod``); ``modprobe nvidia`` (or ``nvidia_uvm``, ``nvidia_drm``, ``nvidia_modeset``, ``nvidia_peermem``,
which depend on it) loads the module built for the booted kernel, as the boot step does, and records
``reloaded_at``; the boot id does not change.  Like kmod it finds modules under ``/lib/modules/<kernel>`` only: the DKMS
build, else the runfile installer's (``kernel/drivers/video``); a driver tree's own module is not its business.
``/proc/driver/nvidia/version`` goes and comes with the module, as on metal (:func:`state.publish`).  The kmod messages
and exit codes are the real ones: ``modprobe: FATAL: Module nvidia is not in kernel.`` (rc 1) for an unload of a module
that is not loaded, ``modprobe: FATAL: Module nvidia not found in directory /lib/modules/<kernel>`` (rc 1) when none is built.
Any other module goes to the real ``/usr/sbin/modprobe`` or ``/sbin/modprobe`` when the node has one.
"""

import os
import sys
import time

from gpufleet_sim import boot as boot_step
from gpufleet_sim import state

NVIDIA_MODULES = ('nvidia', 'nvidia_uvm', 'nvidia_drm', 'nvidia_modeset', 'nvidia_peermem')
REAL = ('/usr/sbin/modprobe', '/sbin/modprobe')


def _name(module):
    return module.replace('-', '_')


def _unload(module, quiet):
    record = state.load_boot() or {}
    if not record.get('driver'):
        if not quiet:
            sys.stderr.write('modprobe: FATAL: Module %s is not in kernel.\n' % module)
        return 1
    if _name(module) == 'nvidia':
        record.update({'driver': None, 'open': False, 'module': None, 'module_source': None})
        record['unloaded_at'] = int(time.time())
        state.write_json(state.BOOT_FILE, record)
        state.publish(record)
    return 0


def _load(module, quiet):
    record = state.load_boot() or {}
    if record.get('driver'):
        return 0
    kernel = record.get('kernel')
    found = state.find_module(kernel, modprobe=True)
    if not found:
        if not quiet:
            sys.stderr.write('modprobe: FATAL: Module %s not found in directory /lib/modules/%s\n' % (module, kernel or ''))
        return 1
    record.update({'driver': found['version'], 'open': bool(found['open']), 'module': found['path'], 'module_source': found['source'],
                   'reloaded_at': int(time.time())})
    state.write_json(state.BOOT_FILE, record)
    state.publish(record)
    boot_step.make_device_nodes(state.load_hardware())
    return 0


def run(argv):
    remove = False
    quiet = False
    modules = []
    for argument in argv:
        if argument in ('-r', '--remove'):
            remove = True
        elif argument in ('-q', '--quiet'):
            quiet = True
        elif argument in ('-a', '--all', '-v', '--verbose', '-b', '--use-blacklist'):
            continue
        elif argument.startswith('-'):
            return _real(argv)
        else:
            modules.append(argument)
    if not modules or any(_name(module) not in NVIDIA_MODULES for module in modules):
        return _real(argv)
    if not remove:
        # modprobe without -a loads the first name only (the rest are module parameters)
        return _load(modules[0], quiet)
    rc = 0
    for module in modules:
        rc = _unload(module, quiet) or rc
    return rc


def _real(argv):
    for candidate in REAL:
        if os.path.exists(candidate):
            os.execv(candidate, [candidate] + list(argv))
    sys.stderr.write('modprobe: FATAL: Module %s not found.\n' % (argv[-1] if argv else ''))
    return 1


def main(argv=None):
    """Entry point: ``python3 -m gpufleet_sim.modprobe ARGS``."""
    return run(sys.argv[1:] if argv is None else list(argv))


if __name__ == '__main__':
    sys.exit(main())
