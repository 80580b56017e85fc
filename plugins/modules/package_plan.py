#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: package_plan
short_description: Work out which NVIDIA packages must change on a node to reach a pin
version_added: 0.1.0
description:
  - Turns a pin (component to version) into NVIDIA's package names and exact versions for the node's package manager
    (C(apt) with NVIDIA's CUDA repository on Debian/Ubuntu, C(dnf) with its C(nvidia-driver) module streams on RHEL/Rocky 8 and 9),
    reads what is installed, held or version-locked, and what the repository has, and returns the plan the
    P(gpufleet.lifecycle.package_pin#role) role carries out.
  - Changes nothing. Reports C(changed) when the node is off the pin, and with C(--diff) shows each package's current and
    target version, so C(--check --diff) previews a converge.
  - Reads with C(dpkg-query -W) and C(apt-cache madison) (apt), or C(rpm -qa), C(dnf repoquery), C(dnf module list nvidia-driver)
    and C(dnf versionlock list) (dnf); every command is an argument list with a time limit (I(command_timeout)).
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
attributes:
  check_mode:
    support: full
    details: The module changes nothing on the node, so it runs the same way in check mode.
  diff_mode:
    support: full
    details: Shows, per package, the installed version (or C(absent)) and the target, plus the module stream and stray packages.
  idempotent:
    support: full
    description: When run twice in a row on an unchanged node, the results are the same.
options:
  pin:
    description:
      - Component to version. Components C(kernel) (as C(uname -r) prints it), C(driver), C(fabric_manager) (same branch as the
        driver), C(container_toolkit), C(dcgm) (3.x or 4.x), C(cuda_toolkit) (C(major.minor)).
    type: dict
    required: true
  package_manager:
    description:
      - C(apt) or C(dnf); C(auto) picks C(dnf) where C(rpm) and C(dnf) exist, else C(apt).
    type: str
    choices: [auto, apt, dnf]
    default: auto
  driver_flavor:
    description:
      - C(server) (C(nvidia-driver-<branch>-server), RHEL stream C(<branch>-dkms)), C(open) (open kernel modules, RHEL stream
        C(<branch>-open)) or C(cuda-drivers) (also NVIDIA's C(cuda-drivers) meta package).
    type: str
    choices: [server, open, cuda-drivers]
    default: server
  revisions:
    description:
      - Debian revisions and the DCGM epoch NVIDIA's repository uses; keys C(driver) (C(-0ubuntu1)), C(driver_meta) (C(-1)),
        C(fabric_manager) (C(-1)), C(container_toolkit) (C(-1)), C(dcgm) (C(-1)), C(dcgm_epoch) (C(1)). Ignored by C(dnf), which
        installs the pinned upstream version with any release.
    type: dict
    default: {}
  package_versions:
    description:
      - Full package version per component, overriding version and revision (for example C(driver=580.65.06-0ubuntu1)).
    type: dict
    default: {}
  check_repository:
    description:
      - Ask the repository whether it has every target version and return the ones it lacks in RV(missing).
    type: bool
    default: true
  purge_other_branches:
    description:
      - List installed driver packages of other branches (and other driver sources on RHEL) in RV(strays).
    type: bool
    default: true
  name:
    description:
      - The variable the pin came from, named in every message about it (C(gpu_stack_pin.driver), not C(pin.driver)).
    type: str
    default: pin
  fail_on_missing:
    description:
      - Fail, naming the packages and the pin's fields, when the repository lacks a target version (RV(missing) not empty);
        the pre-flight of C(gpufleet.lifecycle.gpu_stack). Nothing on the node has changed then.
    type: bool
    default: false
  host:
    description:
      - The node's inventory name, named first in a refusal (a module does not know it); empty - not named.
    type: str
    default: ''
  driver_source:
    description:
      - Where the node's loaded driver comes from (C(driver_source) of C(gpufleet.lifecycle.gpu_facts)); one driver source per node.
      - C(container) (the GPU Operator's driver container) - a pin with a C(driver) is refused, never a host driver as well.
      - C(runfile) (NVIDIA's C(.run) installer) - a pin with a C(driver), or a C(kernel) the runfile's module was not built for, is
        refused unless I(driver_takeover); then RV(takeover) says how to remove it (NVIDIA's uninstaller) before the packages.
      - C(unowned) (a loaded driver no package, operator or installer log claims) - such a pin is refused, I(driver_takeover) or not -
        no uninstaller knows what that driver tree installed; remove it first.
      - C(host_package) or not given - nothing refused.
    type: str
  driver_source_evidence:
    description: The facts' C(driver_source_evidence) (the paths that decided the source), quoted in a refusal.
    type: str
    default: ''
  driver_takeover:
    description:
      - Take a C(runfile) node over - RV(takeover) gives the uninstaller's command, which C(gpufleet.lifecycle.package_pin) runs
        before the packages. Refused (naming I(takeover_name)) on a C(container) node and on an C(unowned) one; nothing to do on
        the others.
      - The uninstaller must be on the node (I(driver_uninstaller)), else the take-over is refused before anything changes.
    type: bool
    default: false
  takeover_name:
    description: The variable I(driver_takeover) came from, named in messages (C(gpu_stack_driver_takeover)).
    type: str
    default: driver_takeover
  driver_uninstaller:
    description: Where NVIDIA's runfile installer put its uninstaller.
    type: path
    default: /usr/bin/nvidia-uninstall
  command_timeout:
    description:
      - Seconds each package-manager query may run before it is killed with its process group and the task fails naming
        the command. C(dnf repoquery) may download repository metadata first; raise this for slow mirrors.
    type: int
    default: 120
notes:
  - On RHEL the repository check uses C(dnf repoquery --disableplugin=versionlock --disable-modular-filtering), so a version that
    is locked away or belongs to a stream that is not enabled yet is found.
  - The version lock list needs the dnf C(versionlock) plugin (C(python3-dnf-plugin-versionlock)).
seealso:
  - module: gpufleet.lifecycle.drift_check
'''

EXAMPLES = r'''
- name: Preview the packages of a pin
  gpufleet.lifecycle.package_plan:
    pin:
      driver: 580.65.06
      fabric_manager: 580.65.06
      container_toolkit: 1.17.0
      dcgm: 4.1.0
  register: plan

- name: Fail when the repository lacks a pinned version
  ansible.builtin.assert:
    that: plan.missing | length == 0
    fail_msg: "{{ inventory_hostname }}: the repository has no {{ plan.missing | map(attribute='spec') | join(', ') }}"
'''

RETURN = r'''
package_manager:
  description: C(apt) or C(dnf).
  returned: success
  type: str
packages:
  description: Every target package in install order.
  returned: success
  type: list
  elements: dict
  contains:
    component:
      description: The pin component it belongs to.
      type: str
    name:
      description: Package name.
      type: str
    version:
      description: Target version (apt the full Debian version, dnf the upstream version); null when the name carries it.
      type: str
    spec:
      description: What the package manager is given (C(name=version) for apt, C(name-version) for dnf).
      type: str
    current:
      description: The installed version, null when absent.
      type: str
    changed:
      description: Whether the installed version is off the target.
      type: bool
    hold:
      description: Whether the package is held (apt) or version-locked (dnf) at the target.
      type: bool
    held:
      description: Whether it is held / locked at the target now.
      type: bool
  sample:
    - {component: driver, name: nvidia-utils-580, version: 580.65.06-0ubuntu1, spec: nvidia-utils-580=580.65.06-0ubuntu1,
       current: null, changed: true, hold: true, held: false}
changes:
  description: Specs of the packages to install or move.
  returned: success
  type: list
  elements: str
strays:
  description: Installed packages to remove first (another driver or Fabric Manager branch, another driver source, the other DCGM family).
  returned: success
  type: list
  elements: dict
  sample: [{name: nvidia-dkms-550, version: 550.127.05-0ubuntu1, reason: driver branch 550, not 580, component: driver}]
changed_components:
  description:
    - The pin components whose packages are installed, moved or removed (a stray counts for the component whose branch
      or family it is). C(gpufleet.lifecycle.gpu_stack) converges every component in one pass and runs each component's
      follow-up steps (the driver's DKMS build, the kernel's pending reboot) from this.
  returned: success
  type: list
  elements: str
  sample: [dcgm, driver]
missing:
  description: Targets the repository does not have, with the pin field (empty when I(check_repository=false)).
  returned: success
  type: list
  elements: dict
  sample: [{field: pin.driver, spec: nvidia-driver-580-server=580.99.99-0ubuntu1}]
release:
  description: Held (apt) or version-locked (dnf) names to release before the install.
  returned: success
  type: list
  elements: str
hold:
  description: Names to hold / version-lock after the install.
  returned: success
  type: list
  elements: str
stream:
  description: The C(nvidia-driver) module stream (dnf with a driver pin, else null).
  returned: success
  type: dict
  sample: {name: nvidia-driver, enabled: 550-dkms, target: 580-dkms, change: true}
takeover:
  description:
    - With I(driver_takeover) on a C(runfile) node whose pin installs a driver - C(from), C(evidence), C(reason) and C(argv), the
      uninstaller's argument list (C(nvidia-uninstall --silent)) to run before the packages; null otherwise.
  returned: success
  type: dict
  sample: {from: runfile, evidence: /usr/bin/nvidia-uninstall, argv: [/usr/bin/nvidia-uninstall, --silent],
           reason: "taking the node over from NVIDIA's runfile driver ..."}
current_pin:
  description: The installed driver, Fabric Manager, container toolkit and DCGM versions as a pin (the rollback target of a node without a recorded pin).
  returned: success
  type: dict
  sample: {driver: 550.127.05, container_toolkit: 1.16.2, dcgm: 3.3.9}
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _command
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._packages import (
    DPKG_QUERY_FORMAT,
    RPM_QUERY_FORMAT,
    PackageParseError,
)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._stack import (
    RUNFILE_UNINSTALLER,
    StackError,
    available_from_repoquery,
    driver_source_plan,
    missing_problem,
    named,
    installed_from_dpkg,
    installed_from_rpm,
    parse_apt_cache_madison,
    parse_versionlock_list,
    plan,
    takeover_plan,
    target_packages,
    validate_pin,
)


def _run(module, argv, what, allowed=(0,)):
    try:
        result = _command.run(argv, module.params['command_timeout'])
    except _command.CommandError as exc:
        module.fail_json(msg='%s: %s' % (what, exc), cmd=argv)
    if result['timed_out']:
        module.fail_json(msg='%s: %s' % (what, _command.describe_timeout(result)), cmd=argv, stdout=result['stdout'], stderr=result['stderr'])
    rc, stdout, stderr = result['rc'], result['stdout'], result['stderr']
    if rc not in allowed:
        module.fail_json(msg=_command.escape_controls('%s failed (rc=%d): %s' % (what, rc, (stderr or stdout).strip())), cmd=argv, rc_of_command=rc)
    return stdout


def _manager(module):
    wanted = module.params['package_manager']
    if wanted != 'auto':
        return wanted
    if module.get_bin_path('rpm') and module.get_bin_path('dnf'):
        return 'dnf'
    return 'apt'


def _gather(module, manager, names):
    """Installed, held, locks, available, module list of the node."""
    gathered = {'held': set(), 'locks': {}, 'available': None, 'module_list': ''}
    if manager == 'apt':
        dpkg_query = module.get_bin_path('dpkg-query', required=True)
        text = _run(module, [dpkg_query, '-W', '-f', DPKG_QUERY_FORMAT], 'dpkg-query -W', allowed=(0, 1))
        gathered['installed'], gathered['held'] = installed_from_dpkg(text)
        if module.params['check_repository'] and names:
            apt_cache = module.get_bin_path('apt-cache', required=True)
            gathered['available'] = parse_apt_cache_madison(_run(module, [apt_cache, 'madison'] + names, 'apt-cache madison'))
        return gathered
    rpm = module.get_bin_path('rpm', required=True)
    dnf = module.get_bin_path('dnf', required=True)
    gathered['installed'] = installed_from_rpm(_run(module, [rpm, '-qa', '--qf', RPM_QUERY_FORMAT], 'rpm -qa'))
    gathered['locks'] = parse_versionlock_list(_run(module, [dnf, '-q', 'versionlock', 'list'],
                                                    'dnf versionlock list (is python3-dnf-plugin-versionlock installed?)'))
    if 'driver' in module.params['pin']:
        gathered['module_list'] = _run(module, [dnf, '-q', 'module', 'list', 'nvidia-driver'], 'dnf module list nvidia-driver',
                                       allowed=(0, 1))
    if module.params['check_repository'] and names:
        text = _run(module, [dnf, '-q', 'repoquery', '--disableplugin=versionlock', '--disable-modular-filtering', '--available'] + names, 'dnf repoquery')
        gathered['available'] = available_from_repoquery(text)
    return gathered


def _diff(result, takeover=None):
    before = []
    after = []
    if takeover:
        before.append('driver: NVIDIA runfile driver (%s)' % (takeover['evidence'] or 'driver_source=runfile'))
        after.append('driver: removed by %s' % ' '.join(takeover['argv']))
    if result['stream'] and result['stream']['change']:
        before.append('module nvidia-driver: %s' % (result['stream']['enabled'] or 'none'))
        after.append('module nvidia-driver: %s' % result['stream']['target'])
    for stray in result['strays']:
        before.append('%s: %s' % (stray['name'], stray['version']))
        after.append('%s: absent (%s)' % (stray['name'], stray['reason']))
    for package in result['packages']:
        if package['changed'] or (package['hold'] and not package['held']):
            mark = ' (held)' if package['held'] else ''
            before.append('%s: %s%s' % (package['name'], package['current'] or 'absent', mark))
            after.append('%s: %s%s' % (package['name'], package['version'] or 'any version',
                                       ' (held)' if package['hold'] else ''))
    return {'before': '\n'.join(before) + ('\n' if before else ''), 'after': '\n'.join(after) + ('\n' if after else '')}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            pin=dict(type='dict', required=True),
            package_manager=dict(type='str', default='auto', choices=['auto', 'apt', 'dnf']),
            driver_flavor=dict(type='str', default='server', choices=['server', 'open', 'cuda-drivers']),
            revisions=dict(type='dict', default={}),
            package_versions=dict(type='dict', default={}),
            check_repository=dict(type='bool', default=True),
            purge_other_branches=dict(type='bool', default=True),
            command_timeout=dict(type='int', default=120),
            name=dict(type='str', default='pin'),
            fail_on_missing=dict(type='bool', default=False),
            driver_source=dict(type='str'),
            driver_source_evidence=dict(type='str', default=''),
            driver_takeover=dict(type='bool', default=False),
            takeover_name=dict(type='str', default='driver_takeover'),
            driver_uninstaller=dict(type='path', default=RUNFILE_UNINSTALLER),
            host=dict(type='str', default=''),
        ),
        supports_check_mode=True,
    )
    params = module.params
    manager = _manager(module)

    def refuse(message, **extra):
        extra.pop('msg', None)
        module.fail_json(msg='%s: %s' % (params['host'], message) if params['host'] else message, **extra)

    source = driver_source_plan(params['pin'], params['driver_source'], evidence=params['driver_source_evidence'] or '',
                                takeover=params['driver_takeover'], name=params['name'], takeover_name=params['takeover_name'])
    if source['action'] == 'refuse':
        refuse(source['reason'], field=source['field'])
    uninstaller = params['driver_uninstaller']
    takeover, problem = takeover_plan(source, params['driver_source'], params['driver_source_evidence'] or '', uninstaller,
                                      os.path.isfile(uninstaller) and os.access(uninstaller, os.X_OK), params['takeover_name'])
    if problem:
        refuse(problem, field=params['takeover_name'])
    try:
        pin = validate_pin(params['pin'])
        targets = target_packages(pin, manager, params['driver_flavor'], params['revisions'], params['package_versions'])
    except StackError as error:
        refuse(named(str(error), params['name']), field=error.field)
    names = sorted(set(target['name'] for target in targets))
    try:
        gathered = _gather(module, manager, names)
        result = plan(pin, manager, gathered['installed'], flavor=params['driver_flavor'], revisions=params['revisions'],
                      package_versions=params['package_versions'], available=gathered['available'], held=gathered['held'],
                      locks=gathered['locks'], module_list=gathered['module_list'],
                      purge_other_branches=params['purge_other_branches'])
    except (PackageParseError, StackError) as error:
        module.fail_json(msg=str(error))
    result['takeover'] = takeover
    if takeover:
        result['changed'] = True
    result['diff'] = _diff(result, takeover)
    problem = missing_problem(result.get('missing'), params['name']) if params['fail_on_missing'] else ''
    if problem:
        refuse(problem, **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
