#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: read_pin
short_description: Read and validate the pinned GPU stack (a pin file or a variable), the one way every role takes a pin
version_added: 0.1.0
description:
  - Reads the pin from a file on the controller (YAML or the runbook's C(baseline.env)) or from a mapping, validates it, and
    returns it with every component present (null = not pinned), the previous (rollback) pin, and the component table.
  - "The same reader as M(gpufleet.lifecycle.drift_check), so a pin means the same to the drift report and to the roles
    that install it. YAML scalars in a file are read as written (C(cuda_toolkit: 12.10) stays C(12.10))."
  - "Refused, naming the file, line or field, before anything runs: unknown components, a value that is not a version
    (whitespace, control characters, shell metacharacters, a leading dash, over 64 characters), a pin that pins nothing,
    a number in a pin variable (YAML already turned C(12.10) into C(12.1): quote it), and a pin file that is not a
    regular UTF-8 file of at most 256 KiB (a FIFO, device or directory is refused before it is read)."
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
attributes:
  check_mode:
    support: full
    details: Reads only; the same in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
    description: The same pin gives the same result.
  action:
    support: full
    description: Implemented by an action plugin that runs on the controller; nothing runs on the node.
options:
  pin:
    description:
      - The pin as a mapping of component to version (C(vbios) may map GPU model to version); an optional C(previous)
        mapping is the rollback pin. Values must be strings.
      - Used when I(pin_file) is empty; giving both is an error.
    type: raw
  pin_file:
    description:
      - Path on the controller of a pin file (YAML or C(baseline.env)). A relative path is searched like other files.
    type: path
  component:
    description:
      - Read one component's I(version) instead of a pin (a role variable such as C(nvidia_driver_version)); messages
        then name I(name) alone.
    type: str
    choices: [kernel, driver, cuda_driver, gsp_firmware, vbios, fabric_manager, container_toolkit, dcgm, cuda_toolkit]
  version:
    description:
      - The version of I(component); a string.
    type: raw
  name:
    description:
      - "The variable the pin came from, used in messages (C(gpu_stack_pin.cuda_toolkit: 12.1 is a number ...))."
    type: str
    default: pin
seealso:
  - module: gpufleet.lifecycle.drift_check
'''

EXAMPLES = r'''
- name: Load the pin a role was given
  gpufleet.lifecycle.read_pin:
    pin: "{{ gpu_stack_pin }}"
    pin_file: "{{ gpu_stack_pin_file }}"
    name: gpu_stack_pin
  register: pin

- name: Check a component role's version variable the same way
  gpufleet.lifecycle.read_pin:
    component: driver
    version: "{{ nvidia_driver_version }}"
    name: nvidia_driver_version

- name: Install only what a package manager installs
  ansible.builtin.debug:
    msg: "{{ pin.installed }}"
'''

RETURN = r'''
pin:
  description: The pin, every component present (null = not pinned).
  type: dict
  returned: success
  sample: {"driver": "580.65.06", "cuda_toolkit": "12.10", "kernel": null}
previous:
  description: The previous (rollback) pin, every component present.
  type: dict
  returned: success
source:
  description: The file the pin was read from, or the variable name.
  type: str
  returned: success
pinned:
  description: The components the pin gives a version.
  type: list
  elements: str
  returned: success
pinned_versions:
  description: The pinned components with their versions, nothing else (what gpu_stack records as the node's pin).
  type: dict
  returned: success
installed:
  description: The pinned components a package manager installs, mapped to their versions.
  type: dict
  returned: success
  sample: {"driver": "580.65.06", "dcgm": "4.1.0"}
components:
  description: Every component name, in the order the stack is applied and reported.
  type: list
  elements: str
  returned: success
installed_components:
  description: The components a package manager installs.
  type: list
  elements: str
  returned: success
read_only_components:
  description: The components that come with the driver or the board (compared, never installed).
  type: list
  elements: str
  returned: success
'''
