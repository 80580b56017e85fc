#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: gpu_facts
short_description: Read a node's NVIDIA GPU stack and classify its health
version_added: 0.1.0
description:
  - Reads the GPUs from one C(nvidia-smi -q -x) call (the XML schema is NVIDIA's stable machine interface, DTD v11 to v13 and later).
  - Reads the installed NVIDIA packages with C(dpkg-query -W) (Debian family) or C(rpm -qa) (RHEL family), the version banners of
    C(dcgmi), C(nvidia-ctk), C(nvidia-container-cli), C(nv-fabricmanager) and C(nvcc), the state of the C(nvidia-fabricmanager),
    C(nvidia-persistenced) and DCGM services, the kernel release, and whether the C(nvidia) and C(nouveau) kernel modules are loaded.
  - Says where the driver came from (C(driver_source)) and what decided it (C(driver_source_evidence)), the loaded kernel module's
    flavor (C(kernel_module_flavor)), a driver tree C(nvidia-smi) lives in (C(driver_tree)), whether the node runs systemd
    (C(systemd)) and the GPUs' Persistence Mode (C(persistence_mode)).
  - A missing optional tool gives a null fact, never a failure.
  - Classifies the node as C(ok), C(broken) (driver/library version mismatch, cannot communicate with the driver, no devices found,
    GPU lost, unreadable output) with the reason and the tool's own words, or C(absent) (no NVIDIA driver installed).
    A broken node is a fact, not a task failure.
  - Returns the facts under C(ansible_facts.gpufleet); the schema is versioned by C(schema_version).
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
  - gpufleet.lifecycle.attributes.READ_ONLY
attributes:
  facts:
    support: full
    description: The module returns facts in C(ansible_facts.gpufleet).
options:
  nvidia_smi_path:
    description:
      - Path of C(nvidia-smi). By default it is looked up in the GPU Operator's driver root C(/run/nvidia/driver/usr/bin), then in
        the driver tree C(/usr/local/nvidia/bin), then on C(PATH), then in the C(sbin) folders.
    type: path
  gather_packages:
    description:
      - Read the installed NVIDIA packages from the package manager.
    type: bool
    default: true
  command_timeout:
    description:
      - Seconds C(nvidia-smi) and each other tool (version banners, C(systemctl show)) may run before it is killed with its
        process group.
      - A C(nvidia-smi) that does not finish in time makes the node C(broken) with reason C(nvidia_smi_hung) (a GPU stuck in a bad
        state or lost keeps NVML waiting); another tool that does not gives a null fact and a warning.
    type: int
    default: 60
  state_dir:
    description:
      - The folder where M(gpufleet.lifecycle.gpu_stack) records the node's pins (C(pin.json), C(pin.previous.json)) and a
        pending reboot (C(reboot-required)); read into C(recorded_pin), C(previous_pin) and C(pending_reboot). Nothing there
        reads as null.
    type: path
    default: /etc/gpufleet
  package_timeout:
    description:
      - Seconds the package listing (C(dpkg-query -W), C(rpm -qa)) may run before it is killed; then C(package_error)
        says so and the packages are empty.
    type: int
    default: 120
notes:
  - Commands run with C(LC_ALL=C) and argument lists only, each with a time limit; nothing is written on the node.
  - Output that is not UTF-8 is read with C(\xNN) escapes for the invalid bytes; control characters in C(health_message) and
    C(package_error) are escaped the same way.
  - Nothing the node lacks fails the module; a node without systemd (a container, a VM with another init) has C(systemd=false)
    and every service null.
  - C(nvswitch_count) counts the entries of C(/proc/driver/nvidia-nvswitch/devices), present on NVSwitch (HGX/DGX) systems,
    else the C(/dev/nvidia-nvswitchN) device nodes the driver creates.
seealso:
  - module: gpufleet.lifecycle.drift_check
  - module: gpufleet.lifecycle.dcgm_diag
'''

EXAMPLES = r'''
- name: Read the GPU stack
  gpufleet.lifecycle.gpu_facts:

- name: Stop when the node's driver stack is broken
  ansible.builtin.assert:
    that: ansible_facts['gpufleet']['health'] != 'broken'
    fail_msg: "{{ ansible_facts['gpufleet']['health_reason'] }}: {{ ansible_facts['gpufleet']['health_message'] }}"

- name: Show the driver of every node
  ansible.builtin.debug:
    msg: "{{ ansible_facts['gpufleet']['driver_version'] }} on {{ ansible_facts['gpufleet']['gpu_count'] }} GPUs"
'''

RETURN = r'''
ansible_facts:
  description: Facts to add to C(ansible_facts).
  returned: always
  type: complex
  contains:
    gpufleet:
      description: The node's GPU stack.
      returned: always
      type: complex
      contains:
        schema_version:
          description: Version of this facts schema; it grows only when a key changes meaning or disappears.
          type: int
          returned: always
          sample: 1
        health:
          description: C(ok), C(broken) or C(absent).
          type: str
          returned: always
          sample: ok
        health_reason:
          description:
            - Why the node is broken, null when C(ok).
            - One of C(driver_library_mismatch), C(driver_unreachable), C(no_devices), C(gpu_lost), C(nvidia_smi_hung)
              (C(nvidia-smi) did not finish within I(command_timeout) and was killed), C(nvidia_smi_failed), C(nvidia_smi_missing),
              C(unparsable).
          type: str
          returned: always
          sample: driver_library_mismatch
        health_message:
          description: The tool's own words for a broken or absent node (control characters escaped), null when C(ok).
          type: str
          returned: always
          sample: "Failed to initialize NVML: Driver/library version mismatch"
        nvidia_smi_path:
          description: The C(nvidia-smi) that was run, null when none was found.
          type: str
          returned: always
        driver_version:
          description: Driver version reported by the loaded driver, null unless C(ok).
          type: str
          returned: always
          sample: 580.65.06
        cuda_driver_version:
          description: CUDA version the driver supports (C(libcuda)), null unless C(ok).
          type: str
          returned: always
          sample: '13.0'
        kernel_module_version:
          description: Version of the loaded C(nvidia) kernel module from C(/proc/driver/nvidia/version), null when not loaded.
          type: str
          returned: always
        gpu_count:
          description: Number of GPUs described by C(nvidia-smi).
          type: int
          returned: always
          sample: 8
        attached_gpus:
          description:
            - The C(attached_gpus) count printed by C(nvidia-smi); it can exceed I(gpu_count) when the driver describes fewer GPUs.
          type: int
          returned: always
        gpus:
          description:
            - One entry per GPU, in C(nvidia-smi) order. Values the driver does not report are null.
          type: list
          elements: dict
          returned: always
          contains:
            index:
              description: Position of the GPU in the document (0-based).
              type: int
            name:
              description: Product name, the key of per-model pins such as VBIOS.
              type: str
              sample: NVIDIA H100 80GB HBM3
            uuid:
              description: GPU UUID.
              type: str
            serial:
              description: Board serial number.
              type: str
            pci_bus_id:
              description: PCI bus id.
              type: str
              sample: 00000000:18:00.0
            vbios_version:
              description: VBIOS version.
              type: str
            gsp_firmware_version:
              description: GSP firmware version, null where the GPU runs without GSP firmware.
              type: str
            board_part_number:
              description: Board part number.
              type: str
            persistence_mode:
              description: C(Enabled) or C(Disabled).
              type: str
            mig_mode:
              description: MIG mode, C(current) and C(pending).
              type: dict
            ecc_mode:
              description: ECC mode, C(current) and C(pending).
              type: dict
            ecc_errors:
              description: ECC error counts, C(volatile) and C(aggregate), each with C(corrected) and C(uncorrected).
              type: dict
            retired_pages:
              description: Retired page counts C(single_bit), C(double_bit) and C(pending).
              type: dict
            remapped_rows:
              description: Row remapping C(correctable), C(uncorrectable), C(pending), C(failure); null where the GPU does not remap rows.
              type: dict
            fabric:
              description: NVLink fabric C(state), C(status), C(clique_id), C(cluster_uuid), C(health); null where not reported.
              type: dict
        nvswitch_count:
          description: Number of NVSwitch devices the driver sees (0 on PCIe systems).
          type: int
          returned: always
        package_manager:
          description: C(dpkg) or C(rpm), null when neither is present or I(gather_packages=false).
          type: str
          returned: always
        packages:
          description: Installed NVIDIA stack packages, name to version as the package manager prints it.
          type: dict
          returned: always
          sample: {"nvidia-driver-580-server": "580.65.06-0ubuntu1", "datacenter-gpu-manager-4-core": "1:4.1.0-1"}
        held_packages:
          description: Names of the packages held by C(apt-mark hold).
          type: list
          elements: str
          returned: always
        package_error:
          description: Why the package listing could not be read (failed, unreadable, did not finish within I(package_timeout)), null when it could.
          type: str
          returned: always
        driver_source:
          description:
            - Where the node's NVIDIA driver came from, the first that applies.
            - C(container) - the GPU Operator's driver root C(/run/nvidia/driver) is populated.
            - C(runfile) - NVIDIA's runfile installer's C(/usr/bin/nvidia-uninstall) is there, whatever packages there are too.
            - C(host_package) - a driver package is installed (C(nvidia-driver-*), C(cuda-drivers), C(nvidia-open), C(kmod-nvidia*),
              ...).
            - C(runfile) also when C(/var/log/nvidia-installer.log) is there with a driver and no driver package (the log
              outlives C(nvidia-uninstall)).
            - C(unowned) - a driver is there (the C(nvidia) module loaded, C(/proc/driver/nvidia/version), or an C(nvidia-smi))
              but no package, GPU Operator root or installer claims it, such as a driver tree mounted at C(/usr/local/nvidia).
            - Null only when there is no NVIDIA driver and nothing claims one.
          type: str
          returned: always
          choices: [container, host_package, runfile, unowned]
          sample: host_package
        driver_source_evidence:
          description:
            - One line naming what decided I(driver_source), with the paths (control characters escaped); null when
              I(driver_source) is null.
          type: str
          returned: always
          sample: package nvidia-driver-580-server 580.65.06-0ubuntu1 (dpkg)
        driver_tree:
          description:
            - The driver tree C(nvidia-smi) was found in, when it is C(<path>/bin/nvidia-smi) beside a readable file
              C(<path>/version); null otherwise.
          type: dict
          returned: always
          sample: {"path": "/usr/local/nvidia", "version": "580.159.04"}
          contains:
            path:
              description: The tree's root.
              type: str
            version:
              description: The first line of its C(version) file, null when that file is empty.
              type: str
        kernel_module_flavor:
          description:
            - C(open) or C(proprietary), the flavor of the loaded C(nvidia) kernel module, from the first line of
              C(/proc/driver/nvidia/version) (C(NVIDIA UNIX Open Kernel Module for x86_64) is the open module,
              C(NVIDIA UNIX x86_64 Kernel Module) the proprietary one; likewise for aarch64 and ppc64le).
            - Null when no module is loaded or its banner reads otherwise.
          type: str
          returned: always
          sample: open
        persistence_mode:
          description:
            - C(Disabled) when any GPU reports Persistence Mode Disabled, C(Enabled) when every GPU reports it Enabled, else null
              (no GPU, or a GPU that does not report it). Per GPU in I(gpus[].persistence_mode).
          type: str
          returned: always
          sample: Enabled
        tools:
          description: Versions from the tools' own banners (null when a tool is missing) - C(dcgm), C(dcgm_hostengine), C(nvidia_ctk),
            C(nvidia_container_cli), C(fabric_manager), C(nvcc).
          type: dict
          returned: always
        services:
          description: State of C(nvidia-fabricmanager), C(nvidia-persistenced), C(nvidia-dcgm) and C(dcgm) as
            C(active)/C(sub)/C(enabled), null for a unit that does not exist.
          type: dict
          returned: always
        systemd:
          description:
            - Whether the node runs systemd. True when C(systemctl show) answered; false without C(systemctl), or when it says
              systemd is not PID 1 or it cannot connect to the bus (a container); null when it could not tell (it timed out or
              failed otherwise).
            - Without systemd every service in I(services) is null.
          type: bool
          returned: always
        kernel:
          description: Running kernel release.
          type: str
          returned: always
        nvidia_module_loaded:
          description: Whether the C(nvidia) kernel module is loaded.
          type: bool
          returned: always
        nouveau_loaded:
          description: Whether the C(nouveau) kernel module is loaded.
          type: bool
          returned: always
        recorded_pin:
          description: The pin M(gpufleet.lifecycle.gpu_stack) last converged the node to (C(<state_dir>/pin.json)), null when none.
          type: dict
          returned: always
        previous_pin:
          description: The pin before it (C(<state_dir>/pin.previous.json)), the rollback target; null when none.
          type: dict
          returned: always
        pending_reboot:
          description:
            - The first line of C(<state_dir>/reboot-required) (what was installed that needs a reboot, e.g. C(kernel 6.8.0-45)),
              null when no reboot is pending.
          type: str
          returned: always
        record_error:
          description: Why a recorded pin could not be read (not JSON, not a mapping, too large); that pin then reads as null.
          type: str
          returned: always
'''

import os
import platform
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _command
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _gather
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts import (
    RECORDS, SERVICES, assemble, driver_tree_root, driver_tree_version_path, split_systemctl_show)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._gather import (
    BANNERS, COMMAND_TIMEOUT, NVIDIA_SMI_ARGS, PACKAGE_TIMEOUT, RECORD_LIMIT, STATE_DIR, SYSTEMCTL_ARGS)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._packages import DPKG_QUERY_FORMAT, RPM_QUERY_FORMAT


def _read(path):
    try:
        with open(path, encoding='utf-8', errors='replace') as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def _nvswitch_count():
    """NVSwitch devices the driver sees: /proc/driver/nvidia-nvswitch/devices, else the /dev/nvidia-nvswitchN nodes."""
    if os.path.isdir(_gather.NVSWITCH_DEVICES):
        return len(os.listdir(_gather.NVSWITCH_DEVICES))
    return len([name for name in os.listdir('/dev') if re.match(r'^nvidia-nvswitch[0-9]+$', name)]) if os.path.isdir('/dev') else 0


def _run(module, argv, timeout):
    """Run one command within ``timeout`` seconds; a command that cannot start reads as rc 127 with the reason."""
    try:
        result = _command.run(argv, timeout)
    except _command.CommandError as exc:
        return {'argv': list(argv), 'rc': 127, 'stdout': '', 'stderr': str(exc), 'timed_out': False, 'command': _command.render(argv),
                'timeout': timeout}
    if result['timed_out']:
        module.warn(_command.describe_timeout(result))
    return result


def _nvidia_smi_path(module):
    if module.params['nvidia_smi_path']:
        path = module.params['nvidia_smi_path']
        return path if os.path.exists(path) else None
    return module.get_bin_path('nvidia-smi', opt_dirs=_gather.NVIDIA_SMI_DIRS)


def _read_record(path):
    """The text of a small state file (invalid UTF-8 replaced); None when absent, unreadable or not a regular file (a FIFO would
    block the read), False when over RECORD_LIMIT bytes."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, 'rb') as handle:
            data = handle.read(RECORD_LIMIT + 1)
    except (IOError, OSError):
        return None
    if len(data) > RECORD_LIMIT:
        return False
    return data.decode('utf-8', errors='replace')


def _read_head(path, limit):
    """The first ``limit`` bytes of a regular, readable file as text (invalid UTF-8 replaced), else None."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, 'rb') as handle:
            return handle.read(limit).decode('utf-8', errors='replace')
    except (IOError, OSError):
        return None


def gather(module):
    """Run the node's tools and read its files; return the raw outputs for ``assemble``."""
    operator_root = _gather.GPU_OPERATOR_DRIVER_ROOT
    raw = {
        'kernel': platform.release(),
        'gpu_operator_driver_root': os.path.isdir(operator_root) and bool(os.listdir(operator_root)),
        'runfile_uninstaller': os.path.exists(_gather.RUNFILE_UNINSTALLER),
        'runfile_installer_log': os.path.exists(_gather.RUNFILE_INSTALLER_LOG),
        'nvswitch_count': _nvswitch_count(),
        'banners': {},
        'services': {},
        'systemctl': None,
        'driver_tree_version': None,
        'records': dict((name, _read_record(os.path.join(module.params['state_dir'], name))) for name in RECORDS),
    }
    for key, path in _gather.PROC_FILES:
        raw[key] = _read(path)
    timeout = module.params['command_timeout']
    smi = _nvidia_smi_path(module)
    raw['nvidia_smi'] = None
    if smi:
        root = driver_tree_root(smi)
        if root is not None:
            raw['driver_tree_version'] = _read_head(driver_tree_version_path(root), _gather.DRIVER_TREE_VERSION_LIMIT)
        raw['nvidia_smi'] = _run(module, [smi] + NVIDIA_SMI_ARGS, timeout)
        raw['nvidia_smi']['path'] = smi
    if module.params['gather_packages']:
        dpkg_query = module.get_bin_path('dpkg-query')
        rpm = module.get_bin_path('rpm')
        if dpkg_query:
            raw['packages'] = dict(_run(module, [dpkg_query, '-W', '-f', DPKG_QUERY_FORMAT], module.params['package_timeout']), manager='dpkg')
        elif rpm:
            raw['packages'] = dict(_run(module, [rpm, '-qa', '--qf', RPM_QUERY_FORMAT], module.params['package_timeout']), manager='rpm')
    for tool, arguments in BANNERS.items():
        path = module.get_bin_path(tool, opt_dirs=[_gather.CUDA_BIN])
        if path:
            result = _run(module, [path] + arguments, timeout)
            raw['banners'][tool] = None if result['timed_out'] else result['stdout'] + result['stderr']
    systemctl = module.get_bin_path('systemctl')
    if systemctl:
        result = _run(module, [systemctl] + SYSTEMCTL_ARGS, timeout)
        raw['systemctl'] = _gather.systemctl_result(result)
        blocks = split_systemctl_show(result['stdout']) if result['rc'] == 0 else {}
        for unit in SERVICES:
            raw['services'][unit] = blocks.get(unit)
    return raw


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi_path=dict(type='path'),
            gather_packages=dict(type='bool', default=True),
            command_timeout=dict(type='int', default=COMMAND_TIMEOUT),
            package_timeout=dict(type='int', default=PACKAGE_TIMEOUT),
            state_dir=dict(type='path', default=STATE_DIR),
        ),
        supports_check_mode=True,
    )
    for option in ('command_timeout', 'package_timeout'):
        if module.params[option] < 1:
            module.fail_json(msg='%s must be at least 1 second, got %s' % (option, module.params[option]))
    module.exit_json(changed=False, ansible_facts={'gpufleet': assemble(gather(module))})


if __name__ == '__main__':
    main()
