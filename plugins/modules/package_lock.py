#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: package_lock
short_description: Wait until no other process holds the package manager's locks
version_added: 0.1.0
description:
  - Waits, within O(timeout), until no process holds a lock of the node's package manager, so the next package step
    does not fail because unattended-upgrades, an apt timer or an operator's shell holds it.
  - C(apt) watches C(/var/lib/dpkg/lock-frontend), C(/var/lib/dpkg/lock), C(/var/lib/apt/lists/lock) and
    C(/var/cache/apt/archives/lock); C(dnf) watches rpm's C(/var/lib/rpm/.rpm.lock) and dnf's C(/var/lib/dnf/rpmdb_lock.pid),
    C(/var/cache/dnf/metadata_lock.pid) and C(/var/cache/dnf/download_lock.pid).
  - Never takes a lock itself. An fcntl lock (apt, dpkg, rpm) is found in C(/proc/locks) by the lock file's device and inode,
    a dnf lock by the live process its pid file names; the holder is named by its pid and C(/proc/PID/comm).
  - Fails after O(timeout) seconds naming each lock still held and its holder (pid and command). Runs no command.
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
  - gpufleet.lifecycle.attributes.READ_ONLY
options:
  package_manager:
    description:
      - Whose locks to wait for.
    type: str
    required: true
    choices: [apt, dnf]
  timeout:
    description:
      - Seconds to wait for the locks to be released before failing; C(0) only looks once.
    type: int
    default: 300
notes:
  - A lock can be taken again between this check and the next step; the P(gpufleet.lifecycle.package_pin#role) role therefore
    also passes its timeout to C(lock_timeout) of M(ansible.builtin.apt) and bounds every package task with a task C(timeout).
  - A holder in a pid namespace the module cannot see (a container on the same host with the same lock file) is reported as pid 0.
seealso:
  - module: gpufleet.lifecycle.package_plan
'''

EXAMPLES = r'''
- name: Wait up to five minutes for unattended-upgrades to release the dpkg lock
  gpufleet.lifecycle.package_lock:
    package_manager: apt
    timeout: 300

- name: Hold the packages once the lock is free
  ansible.builtin.dpkg_selections:
    name: nvidia-driver-580-server
    selection: hold
'''

RETURN = r'''
waited:
  description: Seconds spent waiting (0.0 when no lock was held).
  returned: always
  type: float
  sample: 9.1
waited_for:
  description: Each lock seen held while waiting, with its holder.
  returned: always
  type: list
  elements: str
  sample: ['/var/lib/dpkg/lock-frontend held by pid 5123 (unattended-upgr)']
locks:
  description: The last look at every lock file.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The lock file.
      type: str
    kind:
      description: C(fcntl) (a POSIX lock on the file) or C(pidfile) (dnf's pid file).
      type: str
    held:
      description: Whether a process holds it.
      type: bool
    holders:
      description: The processes that hold it (C(pid), C(command) from C(/proc/PID/comm), C(cmdline)).
      type: list
      elements: dict
  sample:
    - {path: /var/lib/dpkg/lock-frontend, kind: fcntl, held: false, holders: []}
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._locks import LockError, lock_files, wait


def main():
    module = AnsibleModule(
        argument_spec=dict(
            package_manager=dict(type='str', required=True, choices=['apt', 'dnf']),
            timeout=dict(type='int', default=300),
        ),
        supports_check_mode=True,
    )
    if module.params['timeout'] < 0:
        module.fail_json(msg='timeout: must be 0 or more seconds, got %d' % module.params['timeout'])
    try:
        result = wait(lock_files(module.params['package_manager']), module.params['timeout'])
    except LockError as error:
        module.fail_json(msg=str(error))
    report = dict(waited=result['waited'], waited_for=result['waited_for'], locks=result['locks'])
    if not result['free']:
        module.fail_json(msg=result['msg'], **report)
    module.exit_json(changed=False, **report)


if __name__ == '__main__':
    main()
