# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Decisions of a driver reload without a reboot (gpufleet.lifecycle.driver_reload).

Pure functions, standard library only (no Ansible imports), Python 3.8+:

* ``find_holders(entries, own_pids)``: which processes hold ``/dev/nvidia*`` open;
* ``classify_modprobe(rc, stderr)``: ``ok``, ``not_loaded``, ``in_use``, ``not_found`` or ``failed``, from kmod's own words;
* ``unload_order(modules)`` / ``load_order(modules)``: dependants first when unloading, ``nvidia`` first when loading;
* ``start_order(services)``: the reverse of the stop order (persistenced and Fabric Manager need the driver, DCGM needs both).
"""

import re

DEFAULT_MODULES = ('nvidia_uvm', 'nvidia_drm', 'nvidia_modeset', 'nvidia_peermem', 'nvidia')
DEFAULT_SERVICES = ('nvidia-dcgm', 'dcgm', 'nvidia-fabricmanager', 'nvidia-persistenced')
_DEVICE_RE = re.compile(r'^/dev/nvidia(ctl|-uvm|-uvm-tools|-modeset|-nvswitch\w*|-caps/\S+|\d+)?$')


def find_holders(entries, own_pids=()):
    """``entries``: ``[{'pid': int, 'comm': str, 'fds': [link targets]}]`` -> ``[{'pid', 'comm', 'devices'}]`` of the
    processes (other than ``own_pids``) that hold an NVIDIA device open."""
    holders = []
    for entry in entries or []:
        if entry.get('pid') in own_pids:
            continue
        devices = sorted(set(target for target in entry.get('fds') or [] if _DEVICE_RE.match(str(target))))
        if devices:
            holders.append({'pid': entry.get('pid'), 'comm': entry.get('comm') or '', 'devices': devices})
    return holders


def describe_holders(holders):
    return ', '.join('%s (pid %s: %s)' % (holder['comm'] or '?', holder['pid'], ' '.join(holder['devices'])) for holder in holders)


def classify_modprobe(rc, stderr):
    """kmod's answer: ``ok``, ``not_loaded`` (``Module X is not in kernel``), ``in_use``, ``not_found`` or ``failed``."""
    text = stderr or ''
    if rc == 0:
        return 'ok'
    if 'is not in kernel' in text:
        return 'not_loaded'
    if 'in use' in text:
        return 'in_use'
    if 'not found' in text:
        return 'not_found'
    return 'failed'


def unload_order(modules):
    """Dependants before ``nvidia`` (nvidia_uvm, nvidia_drm, nvidia_modeset and nvidia_peermem need it)."""
    modules = [module.replace('-', '_') for module in modules or DEFAULT_MODULES]
    return [module for module in modules if module != 'nvidia'] + (['nvidia'] if 'nvidia' in modules else [])


def load_order(modules):
    """``nvidia`` first, then its dependants in the given order."""
    order = unload_order(modules)
    return (['nvidia'] if 'nvidia' in order else []) + [module for module in order if module != 'nvidia']


def start_order(stopped):
    """Services are started again in the reverse of the order they were stopped in."""
    return list(reversed(list(stopped or [])))


def units_to_start(services, stopped, enabled):
    """The units to start after a reload, in the order of ``services`` (the stop order): the stopped ones and the
    enabled ones (a unit that failed against the old module was not running, but a boot would start it)."""
    wanted = set(stopped or []) | set(enabled or [])
    return [unit for unit in services or [] if unit in wanted]
