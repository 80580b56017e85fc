#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: driver_reload
short_description: Load a newly installed NVIDIA driver without a reboot, or say why a reboot is needed
version_added: 0.1.0
description:
  - Stops the GPU services that are running (DCGM, Fabric Manager, nvidia-persistenced), checks that no process holds an
    NVIDIA device (C(/dev/nvidia*)) open, unloads the nvidia kernel modules with C(modprobe -r) (dependants first), loads
    C(nvidia) again (the newly installed module) plus the dependants that were loaded, and starts the services again.
  - Refuses, changing nothing, when a reboot is pending for a new kernel (I(pending_reboot_file) exists); the new module is
    built for the new kernel, which only a reboot loads.
  - When a process holds the GPUs, or C(modprobe -r) answers that a module is in use, the services are started again and the
    module returns C(reloaded=false) with the reason and the holders, so the caller can fall back to a reboot.
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
attributes:
  check_mode:
    support: full
    details: In check mode nothing is stopped or unloaded; the module reports the holders and what it would do.
  diff_mode:
    support: none
  idempotent:
    support: none
    description: Every run reloads the driver (when it can).
options:
  services:
    description:
      - Systemd units to stop before the unload (in this order) and start again afterwards (in the reverse order). Units that are
        not active are not stopped; after the reload every enabled one is started, as after a boot.
    type: list
    elements: str
    default: [nvidia-dcgm, dcgm, nvidia-fabricmanager, nvidia-persistenced]
  modules:
    description:
      - Kernel modules to unload; C(nvidia) is unloaded last and loaded first. A module that is not loaded is skipped.
    type: list
    elements: str
    default: [nvidia_uvm, nvidia_drm, nvidia_modeset, nvidia_peermem, nvidia]
  pending_reboot_file:
    description:
      - A file whose presence means a reboot is pending for a new kernel (C(gpufleet.lifecycle.gpu_stack) writes it).
    type: path
    default: /etc/gpufleet/reboot-required
notes:
  - Run it as root on the node. C(gpufleet.lifecycle.node_upgrade) with C(node_upgrade_reboot_method=driver_reload) falls back to a
    reboot whenever C(reloaded) is false.
seealso:
  - module: gpufleet.lifecycle.gpu_facts
'''

EXAMPLES = r'''
- name: Load the new driver without a reboot when nothing holds the GPUs
  gpufleet.lifecycle.driver_reload:
  register: reload

- name: Reboot when the reload was not possible
  ansible.builtin.reboot:
  when: not reload.reloaded
'''

RETURN = r'''
reloaded:
  description: True when the modules were unloaded and the new C(nvidia) module loaded.
  type: bool
  returned: always
reason:
  description: Why the driver was not reloaded (empty when it was).
  type: str
  returned: always
  sample: "held by python3 (pid 4242: /dev/nvidia0 /dev/nvidiactl)"
holders:
  description: Processes holding an NVIDIA device open after the services stopped, each C(pid), C(comm), C(devices).
  type: list
  elements: dict
  returned: always
stopped:
  description: Units that were stopped, plus the enabled ones, all started again after the reload (in the reverse order).
  type: list
  elements: str
  returned: always
unloaded:
  description: Modules that were unloaded.
  type: list
  elements: str
  returned: always
loaded:
  description: Modules that were loaded.
  type: list
  elements: str
  returned: always
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _reload


def _proc_entries():
    entries = []
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        folder = os.path.join('/proc', name)
        try:
            with open(os.path.join(folder, 'comm'), encoding='utf-8', errors='replace') as handle:
                comm = handle.read().strip()
            fds = []
            for fd in os.listdir(os.path.join(folder, 'fd')):
                try:
                    fds.append(os.readlink(os.path.join(folder, 'fd', fd)))
                except OSError:
                    continue
        except OSError:
            continue
        entries.append({'pid': int(name), 'comm': comm, 'fds': fds})
    return entries


class Reload:
    """The I/O of one reload; the decisions are in module_utils/_reload.py."""

    def __init__(self, module):
        self.module = module
        self.systemctl = module.get_bin_path('systemctl', required=True)
        self.modprobe = module.get_bin_path('modprobe', required=True, opt_dirs=['/usr/sbin', '/sbin'])
        self.report = {'reloaded': False, 'reason': '', 'holders': [], 'stopped': [], 'unloaded': [], 'loaded': []}

    def run(self, argv):
        return self.module.run_command(argv, environ_update={'LC_ALL': 'C', 'LANG': 'C'})

    def active(self, unit):
        rc, stdout, dummy = self.run([self.systemctl, 'is-active', unit])
        return rc == 0 and stdout.strip() == 'active'

    def enabled(self, unit):
        rc, stdout, dummy = self.run([self.systemctl, 'is-enabled', unit])
        return rc == 0 and stdout.strip() == 'enabled'

    def fail(self, msg, **extra):
        self.report.update(extra)
        self.module.fail_json(msg=msg, changed=True, **self.report)

    def restart_services(self):
        for unit in _reload.start_order(self.report['stopped']):
            rc, dummy, stderr = self.run([self.systemctl, 'start', unit])
            if rc != 0:
                self.fail('could not start %s again: %s' % (unit, stderr.strip()), rc=rc, stderr=stderr)

    def give_up(self, reason):
        """Put the services back and report why a reboot is needed."""
        self.restart_services()
        self.report['reason'] = reason
        self.module.exit_json(changed=bool(self.report['stopped']), **self.report)

    def reload(self):
        params = self.module.params
        if os.path.exists(params['pending_reboot_file']):
            self.report['reason'] = 'a reboot is pending for a new kernel (%s exists)' % params['pending_reboot_file']
            self.module.exit_json(changed=False, **self.report)
        units = [unit for unit in params['services'] if self.active(unit)]
        if self.module.check_mode:
            holders = _reload.find_holders(_proc_entries(), own_pids=(os.getpid(), os.getppid()))
            self.report['holders'] = holders
            self.report['reason'] = 'check mode: would stop %s and reload the driver' % (', '.join(units) or 'no service')
            self.module.exit_json(changed=True, **self.report)
        for unit in units:
            rc, dummy, stderr = self.run([self.systemctl, 'stop', unit])
            if rc != 0:
                self.give_up('could not stop %s: %s' % (unit, stderr.strip()))
            self.report['stopped'].append(unit)
        holders = _reload.find_holders(_proc_entries(), own_pids=(os.getpid(), os.getppid()))
        if holders:
            self.report['holders'] = holders
            self.give_up('the GPUs are held by ' + _reload.describe_holders(holders))
        for module_name in _reload.unload_order(params['modules']):
            rc, dummy, stderr = self.run([self.modprobe, '-r', module_name])
            answer = _reload.classify_modprobe(rc, stderr)
            if answer == 'ok':
                self.report['unloaded'].append(module_name)
            elif answer != 'not_loaded':
                self.give_up('modprobe -r %s: %s' % (module_name, stderr.strip() or 'rc %s' % rc))
        wanted = _reload.load_order([name for name in params['modules'] if name.replace('-', '_') in self.report['unloaded']] or ['nvidia'])
        for module_name in wanted:
            rc, dummy, stderr = self.run([self.modprobe, module_name])
            if rc != 0:
                self.fail('modprobe %s failed, the node has no NVIDIA driver loaded now: %s' % (module_name, stderr.strip()), rc=rc, stderr=stderr)
            self.report['loaded'].append(module_name)
        # As after a boot: every enabled GPU unit starts (one that failed against the old module was not running).
        self.report['stopped'] = _reload.units_to_start(params['services'], self.report['stopped'],
                                                        [unit for unit in params['services'] if self.enabled(unit)])
        self.restart_services()
        self.report['reloaded'] = True
        self.module.exit_json(changed=True, **self.report)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            services=dict(type='list', elements='str', default=list(_reload.DEFAULT_SERVICES)),
            modules=dict(type='list', elements='str', default=list(_reload.DEFAULT_MODULES)),
            pending_reboot_file=dict(type='path', default='/etc/gpufleet/reboot-required'),
        ),
        supports_check_mode=True,
    )
    Reload(module).reload()


if __name__ == '__main__':
    main()
