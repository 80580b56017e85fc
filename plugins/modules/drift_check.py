#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: drift_check
short_description: Compare a node's GPU stack with the pinned versions
version_added: 0.1.0
description:
  - Compares the node's C(gpufleet) facts (from M(gpufleet.lifecycle.gpu_facts)) with the pin and reports, per component,
    the expected and the actual version.
  - "Components: C(kernel), C(driver), C(cuda_driver), C(gsp_firmware), C(vbios) (one version, or one per GPU model),
    C(fabric_manager), C(container_toolkit), C(dcgm), C(cuda_toolkit). An empty or missing value means not pinned."
  - Package versions compare the way the package manager does (epochs C(3:595.71.05-1.el9), revisions C(1.17.0-1),
    tildes C(1.15.0~rc.1-1)); a pin without a revision matches any revision of that upstream version.
  - The C(kernel) is the running one (C(uname -r)), so a kernel installed but not booted yet is drift until the reboot. The
    C(driver) is the loaded kernel module from C(/proc/driver/nvidia/version) (C(source) C(/proc/driver/nvidia/version)), else
    the version nvidia-smi reports (C(source) C(nvidia-smi)).
  - A node whose facts say C(broken) is reported C(broken), never drifted. A node with no driver at all (C(absent)) is drifted
    when a driver is pinned.
  - With I(driver_flavor), the loaded kernel module's flavor is a component of its own, C(driver_flavor) - C(open) expected for
    the C(open) flavor, C(proprietary) for C(server) and C(cuda-drivers) - read from the module's banner in
    C(/proc/driver/nvidia/version) (the facts' C(kernel_module_flavor)). A node on the pinned driver version with the other flavor is
    drifted; a converge with that flavor installs it and removes the other flavor's packages.
  - Every result names where the node's loaded driver comes from (RV(driver_source) and RV(driver_source_evidence), from the
    facts), so the nightly report shows the nodes a package converge leaves alone (C(runfile), C(unowned), C(container)).
  - A pin that pins nothing (an empty or truncated file, every value empty) is an error naming the file. When the pin names
    components but none of them applies to this node (only Fabric Manager on a node without NVSwitch), the status is
    C(not_checked) with a warning, never C(in_sync).
  - The comparison runs on the controller. When the host has no C(gpufleet) facts yet and I(facts) is not given, the node
    is read with one shell command (a fixed POSIX C(sh) script that runs the tools M(gpufleet.lifecycle.gpu_facts) runs,
    each under C(timeout), and reads the same files), and the facts are assembled on the controller by the same code as the module's and
    returned too. No Python, module file or interpreter discovery on the node, which keeps the nightly drift report cheap
    at fleet scale. A node without C(timeout) (coreutils) or a writable temporary folder is read by the
    M(gpufleet.lifecycle.gpu_facts) module instead, with a warning. The task's C(environment) and become apply to both.
  - Reports C(changed) when the node is drifted, so a C(--check --diff) run counts drifted nodes as changed in the recap
    and its diff shows the actual versions as before and the pinned ones as after. Nothing on the node is changed.
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
attributes:
  check_mode:
    support: full
    details: Read-only; the same comparison runs in check mode.
  diff_mode:
    support: full
    details: The diff shows each drifted component, actual before and pinned after.
  idempotent:
    support: full
    description: Nothing changes on the node; the same node and pin give the same result.
  action:
    support: full
    description: Implemented by an action plugin that runs on the controller.
options:
  pin:
    description:
      - The pin as a mapping of component to version. C(vbios) may be a mapping of GPU model (the facts' C(name)) to version.
      - Versions must be strings; a number (YAML reads an unquoted C(12.10) as C(12.1)) is refused with a hint to quote it.
      - Mutually exclusive with I(pin_file); one of them is required.
    type: raw
  pin_file:
    description:
      - Path on the controller of the pin, in YAML (a mapping like I(pin), optionally with a C(previous) mapping) or in the
        runbook's C(baseline.env) form (C(DRIVER_VERSION=580.65.06), comments, quotes, C(export), empty value = not pinned,
        C(PREV_) keys for the previous pin).
      - A relative path is searched like other files (the role's or playbook's C(files/) folder, then the playbook folder).
      - It must be a regular UTF-8 file of at most 256 KiB; a FIFO, device or directory is refused before it is read.
    type: path
  facts:
    description:
      - The node's C(gpufleet) facts. Defaults to the host's C(ansible_facts.gpufleet); gathered when absent.
      - A mapping of the wrong shape is refused naming the field (C(facts.gpus[2].vbios_version must be a string or null)).
    type: dict
  fail_on_broken:
    description:
      - Fail the task when the node is broken.
    type: bool
    default: false
  fail_on_drift:
    description:
      - Fail the task when the node is drifted, or when nothing pinned could be checked on it (for gates that must stop a play).
    type: bool
    default: false
  driver_flavor:
    description:
      - The driver flavor the node should run (the roles' C(gpu_stack_driver_flavor) / C(nvidia_driver_flavor); playbooks pass
        C(gpufleet_driver_flavor)); the pin has no flavor. C(open) expects the open kernel module, C(server) and C(cuda-drivers)
        the proprietary one (NVIDIA's C(cuda-drivers) meta package installs the proprietary module since R560, C(nvidia-open) the
        open one).
      - Not given (the default) - the flavor is not compared.
    type: str
    choices: [server, open, cuda-drivers]
notes:
  - Errors in the pin (unknown component, malformed file, unterminated quote, a value that is not a version) name the file
    and line or the field and change nothing.
seealso:
  - module: gpufleet.lifecycle.gpu_facts
  - module: gpufleet.lifecycle.read_pin
'''

EXAMPLES = r'''
- name: Nightly drift report against the pin kept in git (run with --check --diff)
  gpufleet.lifecycle.drift_check:
    pin_file: baseline.env

- name: Compare with an inline pin, VBIOS per GPU model
  gpufleet.lifecycle.drift_check:
    pin:
      driver: 580.65.06
      fabric_manager: 580.65.06
      container_toolkit: 1.17.0
      dcgm: 4.1.0
      vbios:
        NVIDIA H100 80GB HBM3: 96.00.99.00.01
  register: drift

- name: Compare the driver and its kernel module flavor (Hopper nodes on the open module)
  gpufleet.lifecycle.drift_check:
    pin:
      driver: 580.65.06
    driver_flavor: open
  register: drift

- name: Stop before touching a broken node
  gpufleet.lifecycle.drift_check:
    pin_file: baseline.yml
    fail_on_broken: true
'''

RETURN = r'''
facts_gathered_by:
  description: How the node was read when its facts were gathered by this task; absent when they were given or already known.
    C(shell) (one shell command) or C(module) (the M(gpufleet.lifecycle.gpu_facts) module, where the shell way cannot run).
  type: str
  returned: when facts were gathered
  sample: shell
status:
  description: C(in_sync), C(drifted), C(broken), or C(not_checked) (nothing the pin names applies to this node).
  type: str
  returned: always
  sample: drifted
drift:
  description:
    - Component to C(expected), C(actual) and C(source) (where the actual value was read) for every drifted component.
    - For C(vbios) and C(gsp_firmware), GPU index to C(model), C(uuid), C(expected), C(actual).
    - Empty when in sync or broken.
  type: dict
  returned: always
  sample: {"driver": {"expected": "580.65.06", "actual": "550.127.05", "source": "/proc/driver/nvidia/version"}}
components:
  description:
    - Every pinned component, also the ones in sync, for reports (the fleet_report callback reads this key, never the diff).
    - With I(driver_flavor), C(driver_flavor) too - C(expected) C(open) or C(proprietary), C(actual) the loaded module's flavor
      (null without a loaded driver), C(driver_flavor) the flavor asked for.
    - C(status) is C(in_sync), C(drifted), C(not_applicable), or C(unverified) (the node is broken); C(expected) is the pin;
      C(actual) the version read (null when not installed or unreadable), for C(vbios) and C(gsp_firmware) the sorted list of
      the distinct versions of the node's GPUs, with C(gpus) holding the drifted GPUs as in I(drift); C(source) where a
      scalar version was read.
  type: dict
  returned: always
  sample: {"driver": {"status": "in_sync", "expected": "550.127.05", "actual": "550.127.05", "source": "/proc/driver/nvidia/version"}}
checked:
  description: Components that were pinned and compared.
  type: list
  elements: str
  returned: always
not_applicable:
  description: Pinned components that do not apply to this node (Fabric Manager without NVSwitch, firmware with no driver).
  type: list
  elements: str
  returned: always
unverified:
  description: Pinned components that could not be read because the node is broken.
  type: list
  elements: str
  returned: when status is broken
driver_source:
  description:
    - Where the node's loaded driver comes from, from its facts - C(host_package), C(container) (the GPU Operator's driver
      container), C(runfile) (NVIDIA's C(.run) installer), C(unowned) (a loaded driver no package, operator or installer log
      claims), or null (no driver loaded). A package converge leaves C(container), C(runfile) and C(unowned) nodes alone.
  type: str
  returned: always
  sample: unowned
driver_source_evidence:
  description: The paths that decided RV(driver_source), one line (null when the facts give none).
  type: str
  returned: always
  sample: /usr/local/nvidia/bin/nvidia-smi, /usr/local/nvidia/version
health:
  description: The node's health from its facts, C(ok), C(broken) or C(absent).
  type: str
  returned: always
health_reason:
  description: Why the node is broken, from its facts.
  type: str
  returned: always
pin:
  description: The pin that was applied, every component present (null = not pinned).
  type: dict
  returned: always
previous_pin:
  description: The previous pin from the pin file (C(previous) mapping or C(PREV_) keys), every component present.
  type: dict
  returned: always
msg:
  description: One line saying the result.
  type: str
  returned: always
'''
