# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Assemble the ``gpufleet`` facts from what a node's tools printed.

Pure logic, no Ansible import.  ``gpu_facts`` runs the commands and reads the
files; ``assemble(raw)`` turns their outputs into the documented, versioned
facts schema and classifies the node's health:

* ``ok``      nvidia-smi ran and printed a readable document with GPUs;
* ``broken``  a driver is there but the stack does not work (driver/library
  version mismatch, cannot talk to the driver, no devices, GPU lost,
  nvidia-smi hung, unreadable output, nvidia-smi missing next to an installed driver);
* ``absent``  no NVIDIA driver at all.

and says where the driver came from (``driver_source``, with ``driver_source_evidence`` naming the files that decided):

* ``container``     the GPU Operator's driver root ``/run/nvidia/driver`` is populated;
* ``host_package``  a driver package is installed (dpkg or rpm);
* ``runfile``       NVIDIA's runfile installer left its uninstaller or its log;
* ``unowned``       a driver is there (the nvidia module loaded, its ``/proc/driver/nvidia/version``, or an nvidia-smi)
  but no package, operator root or installer claims it: a driver tree mounted into the machine, a hand copy;
* null              no NVIDIA driver and no claim of one.
"""

from __future__ import annotations

import json
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _command
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _dcgm_banner
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _nvidia_smi
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _packages

SCHEMA_VERSION = 1

# Package names that belong to the NVIDIA GPU stack (driver, libraries, Fabric Manager,
# container toolkit, DCGM, CUDA) in NVIDIA's Debian and RHEL repositories and in distributions.
NVIDIA_PACKAGE = re.compile(
    r'^(nvidia|libnvidia|xserver-xorg-video-nvidia|kmod-nvidia|cuda|libcuda|datacenter-gpu-manager|'
    r'libnccl|nccl|nvlsm|libnvsdm|nv-|imex|nsight)', re.IGNORECASE)
# Packages whose presence means a host driver is installed.
DRIVER_PACKAGE = re.compile(
    r'^(nvidia-driver|cuda-drivers|nvidia-kernel-(open|source|common)|nvidia-dkms|kmod-nvidia|'
    r'libnvidia-compute|libnvidia-gl|nvidia-open|nvidia-utils|nvidia-kernel-open-dkms|nvidia-headless)', re.IGNORECASE)
SERVICES = ('nvidia-fabricmanager', 'nvidia-persistenced', 'nvidia-dcgm', 'dcgm')
# Which driver package names the evidence of a host_package node: the driver's own package before its libraries.
_DRIVER_PACKAGE_RANK = ('nvidia-driver', 'cuda-drivers', 'nvidia-open', 'kmod-nvidia', 'nvidia-kernel-open-dkms', 'nvidia-dkms',
                        'nvidia-kernel', 'nvidia-headless', 'nvidia-utils', 'libnvidia-compute', 'libnvidia-gl')

# Where a driver's origin shows (the gatherers in _gather read these; the evidence names them).
GPU_OPERATOR_DRIVER_ROOT = '/run/nvidia/driver'
RUNFILE_UNINSTALLER = '/usr/bin/nvidia-uninstall'
RUNFILE_INSTALLER_LOG = '/var/log/nvidia-installer.log'
PROC_DRIVER_VERSION = '/proc/driver/nvidia/version'
DRIVER_SOURCES = ('container', 'host_package', 'runfile', 'unowned')
# A driver tree: ``<root>/bin/nvidia-smi`` beside ``<root>/version`` (a mounted tree such as /usr/local/nvidia).
DRIVER_TREE_SMI = '/bin/nvidia-smi'
DRIVER_TREE_VERSION_LIMIT = 4096
# What systemctl prints where systemd is not PID 1 (a container, a VM started by another init): the node has no systemd.
NO_SYSTEMD = ('System has not been booted with systemd as init system', 'Failed to connect to bus')

HEALTH_OK = 'ok'
HEALTH_BROKEN = 'broken'
HEALTH_ABSENT = 'absent'


def filter_packages(parsed):
    """Keep the NVIDIA stack's installed packages: ({name: version}, [held names])."""
    packages = {}
    held = []
    for name, info in sorted(parsed.items()):
        base = name.split(':', 1)[0]
        if not NVIDIA_PACKAGE.match(base):
            continue
        packages[base] = info.get('version')
        if info.get('held'):
            held.append(base)
    return packages, held


SYSTEMCTL_PROPERTIES = '--property=Id,LoadState,ActiveState,SubState,UnitFileState'


def split_systemctl_show(text):
    """``systemctl show --property=Id,... UNIT...`` (several units in one call) -> ``{unit name without .service: its block}``.

    systemd prints one block per unit, separated by an empty line, each with its ``Id``; a block without an Id is dropped."""
    blocks = {}
    for block in (text or '').split('\n\n'):
        unit = None
        for line in block.splitlines():
            if line.startswith('Id='):
                unit = line[len('Id='):].strip()
        if unit:
            blocks[unit[:-len('.service')] if unit.endswith('.service') else unit] = block.strip('\n') + '\n'
    return blocks


def parse_systemctl_show(text):
    """``systemctl show -p LoadState,ActiveState,SubState,UnitFileState UNIT`` -> state dict, None if no such unit."""
    if not text:
        return None
    values = {}
    for line in text.splitlines():
        if '=' in line:
            key, value = line.split('=', 1)
            values[key.strip()] = value.strip()
    if values.get('LoadState') in (None, '', 'not-found'):
        return None
    return {
        'active': values.get('ActiveState') or None,
        'sub': values.get('SubState') or None,
        'enabled': values.get('UnitFileState') or None,
    }


def module_loaded(proc_modules, name):
    """True when /proc/modules lists ``name``."""
    for line in (proc_modules or '').splitlines():
        if line.split(' ', 1)[0] == name:
            return True
    return False


def _package_facts(raw):
    """(manager, {installed package: version}, [held], error, {package an interrupted install left half-way: status})."""
    listing = raw.get('packages') or {}
    manager = listing.get('manager')
    if not manager:
        return None, {}, [], None, {}
    if listing.get('timed_out'):
        return manager, {}, [], 'package listing did not finish: %s' % _command.describe_timeout(listing), {}
    if listing.get('rc') not in (0, None):
        return manager, {}, [], 'package listing failed (rc=%s): %s' % (listing.get('rc'), (listing.get('stderr') or '').strip()), {}
    try:
        if manager == 'dpkg':
            parsed = _packages.parse_dpkg_query(listing.get('stdout') or '', partial=True)
        else:
            parsed = _packages.parse_rpm_query(listing.get('stdout') or '')
    except _packages.PackageParseError as exc:
        return manager, {}, [], 'package listing unreadable: %s' % exc, {}
    installed = dict((name, info) for name, info in parsed.items() if (info.get('status') or 'ii')[1:2] == 'i')
    packages, held = filter_packages(installed)
    partial = dict((name.split(':', 1)[0], info['status']) for name, info in parsed.items()
                   if name not in installed and NVIDIA_PACKAGE.match(name.split(':', 1)[0]))
    return manager, packages, held, None, partial


def _banner(raw, key, parser):
    text = (raw.get('banners') or {}).get(key)
    if not text:
        return None
    try:
        value = parser(_command.to_text(text))
    except ValueError:
        return None
    if isinstance(value, dict):
        return dict((key, _command.escape_controls(item) if isinstance(item, str) else item) for key, item in value.items())
    return _command.escape_controls(value) if isinstance(value, str) else value


def _tools(raw):
    dcgm = _banner(raw, 'dcgmi', _dcgm_banner.parse_version_banner) or {}
    cli = _banner(raw, 'nvidia-container-cli', _packages.parse_nvidia_container_cli_version) or {}
    return {
        'dcgm': dcgm.get('version'),
        'dcgm_hostengine': dcgm.get('hostengine_version'),
        'nvidia_ctk': _banner(raw, 'nvidia-ctk', _packages.parse_nvidia_ctk_version),
        'nvidia_container_cli': cli.get('cli'),
        'fabric_manager': _banner(raw, 'nv-fabricmanager', _packages.parse_fabricmanager_version),
        'nvcc': _banner(raw, 'nvcc', _packages.parse_nvcc_version),
    }


def driver_tree_root(nvidia_smi_path):
    """The driver tree an nvidia-smi at ``<root>/bin/nvidia-smi`` belongs to (``<root>``; ``/`` for ``/bin/nvidia-smi``), else None.

    The gatherers read ``<root>/version`` (at most DRIVER_TREE_VERSION_LIMIT bytes) when it is a readable file.
    """
    if not nvidia_smi_path or not nvidia_smi_path.endswith(DRIVER_TREE_SMI):
        return None
    return nvidia_smi_path[:-len(DRIVER_TREE_SMI)] or '/'


def driver_tree_version_path(root):
    return root.rstrip('/') + '/version'


def _driver_tree(raw):
    """``{'path', 'version'}`` when nvidia-smi lives in a driver tree whose ``version`` file was read, else None."""
    text = raw.get('driver_tree_version')
    root = driver_tree_root((raw.get('nvidia_smi') or {}).get('path'))
    if text is None or root is None:
        return None
    lines = _command.to_text(text).splitlines()
    first = lines[0].strip() if lines else ''
    return {'path': _command.escape_controls(root, keep_newlines=False),
            'version': _command.escape_controls(first, keep_newlines=False) if first else None}


def _driver_package(packages):
    """The (name, version) of the driver package that names a host_package node's evidence, None when there is none."""
    names = [name for name in packages if DRIVER_PACKAGE.match(name)]
    if not names:
        return None

    def rank(name):
        lowered = name.lower()
        return (next((index for index, prefix in enumerate(_DRIVER_PACKAGE_RANK) if lowered.startswith(prefix)), len(_DRIVER_PACKAGE_RANK)), name)

    name = min(names, key=rank)
    return name, packages[name]


def _driver_source(raw, packages, manager, package_error, kernel_module_loaded, kernel_module_version, tree, partial=None):
    """``(driver_source, evidence)``: where the node's driver came from, in precedence order, and what decided it."""
    if raw.get('gpu_operator_driver_root'):
        return 'container', "%s is populated (the GPU Operator's driver root)" % GPU_OPERATOR_DRIVER_ROOT
    package = _driver_package(packages)
    named = 'package %s%s (%s)' % (package[0], ' %s' % package[1] if package[1] else '', manager) if package else ''
    if not package:
        # An interrupted install (dpkg's iU, iF ...) still claims the driver: the package manager's, half-way.
        half = _driver_package(dict((name, None) for name in partial or {}))
        if half:
            package = half
            named = 'package %s (%s, %s: an install was interrupted)' % (half[0], manager, partial[half[0]])
    # The runfile's uninstaller is there until nvidia-uninstall ran: a runfile driver, whatever packages there are too
    # (a library or a stray driver package beside it is the two-driver node the runbook warns about, never host_package).
    log = [RUNFILE_INSTALLER_LOG] if raw.get('runfile_installer_log') else []
    if raw.get('runfile_uninstaller'):
        return 'runfile', "%s (NVIDIA's runfile installer)%s" % (', '.join([RUNFILE_UNINSTALLER] + log), '; also %s' % named if named else '')
    if package:
        return 'host_package', named
    present = kernel_module_loaded or raw.get('proc_driver_version') or raw.get('nvidia_smi') is not None
    if not present:
        return None, None
    # The installer's log outlives nvidia-uninstall: it names the runfile only while a driver no package claims is there.
    if log:
        return 'runfile', "%s (NVIDIA's runfile installer; no nvidia-uninstall)" % RUNFILE_INSTALLER_LOG
    smi = (raw.get('nvidia_smi') or {}).get('path')
    found = []
    if smi:
        found.append('nvidia-smi at %s' % smi)
    if kernel_module_version:
        found.append('loaded nvidia module %s (%s)' % (kernel_module_version, PROC_DRIVER_VERSION))
    elif raw.get('proc_driver_version'):
        found.append('%s present' % PROC_DRIVER_VERSION)
    elif kernel_module_loaded:
        found.append('nvidia module loaded (/proc/modules)')
    if tree:
        found.append('driver tree %s (%s: %s)' % (tree['path'], driver_tree_version_path(tree['path']), tree['version'] or 'empty'))
    if package_error:
        packages_read = 'driver packages unknown (the package listing could not be read)'
    elif manager:
        packages_read = 'no driver package (%s)' % manager
    else:
        packages_read = 'driver packages not read (no dpkg-query or rpm, or gather_packages=false)'
    found.append('%s, no GPU Operator root, no nvidia-installer log or nvidia-uninstall' % packages_read)
    return 'unowned', '; '.join(found)


def systemd_state(systemctl):
    """Whether the node runs systemd, from the one ``systemctl show`` call (``raw['systemctl']``: None when not found).

    True when it answered (rc 0); False without systemctl, or when it says systemd is not PID 1 / there is no bus
    (NO_SYSTEMD, a container); None when it could not tell (timed out, another failure): never guessed.
    """
    if not systemctl:
        return False
    if systemctl.get('timed_out'):
        return None
    if systemctl.get('rc') == 0:
        return True
    stderr = _command.to_text(systemctl.get('stderr'))
    if any(text in stderr for text in NO_SYSTEMD):
        return False
    return None


def persistence_mode(gpus):
    """``Disabled`` when any GPU reports Persistence Mode Disabled, ``Enabled`` when every GPU reports Enabled, else None
    (no GPU, or a GPU that does not report it: never guessed).  ``gpus[].persistence_mode`` stays the per-GPU source."""
    modes = [gpu.get('persistence_mode') for gpu in gpus or []]
    if 'Disabled' in modes:
        return 'Disabled'
    if modes and all(mode == 'Enabled' for mode in modes):
        return 'Enabled'
    return None


def _health(raw, packages, kernel_module_loaded):
    """(health, reason, message, parsed document or None)."""
    smi = raw.get('nvidia_smi')
    if smi is None:
        if kernel_module_loaded or any(DRIVER_PACKAGE.match(name) for name in packages) or raw.get('gpu_operator_driver_root'):
            return HEALTH_BROKEN, 'nvidia_smi_missing', 'nvidia-smi was not found on PATH although an NVIDIA driver is installed', None
        return HEALTH_ABSENT, None, 'no NVIDIA driver is installed (no nvidia-smi, no driver package, no nvidia kernel module)', None
    if smi.get('timed_out'):
        message = '%s; NVML did not answer (a GPU stuck in a bad state or lost)' % _command.describe_timeout(smi)
        return HEALTH_BROKEN, 'nvidia_smi_hung', message, None
    rc, stdout, stderr = smi.get('rc'), _command.to_text(smi.get('stdout')), _command.to_text(smi.get('stderr'))
    if rc != 0 or not stdout.strip():
        failure = _nvidia_smi.classify_failure(rc, stdout, stderr)
        return HEALTH_BROKEN, failure['reason'], failure['message'], None
    try:
        document = _nvidia_smi.parse_xml(stdout)
    except _nvidia_smi.NvidiaSmiParseError as exc:
        return HEALTH_BROKEN, 'unparsable', 'nvidia-smi -q -x printed a document that cannot be read: %s' % exc, None
    if not document['gpu_count']:
        return HEALTH_BROKEN, 'no_devices', 'nvidia-smi -q -x lists no GPU', document
    lost = _lost_gpu_lines(stderr)
    if lost:
        return HEALTH_BROKEN, 'gpu_lost', lost, document
    return HEALTH_OK, None, None, document


def _lost_gpu_lines(stderr):
    lines = [line.strip() for line in stderr.splitlines() if 'Unable to determine the device handle' in line or 'GPU is lost' in line]
    return '\n'.join(lines) or None


RECORDS = ('pin.json', 'pin.previous.json', 'reboot-required')


def parse_records(records):
    """The pins gpu_stack recorded on the node and a pending reboot, from the files' texts (None: no such file; False: too large).

    Returns ``(recorded_pin, previous_pin, pending_reboot, record_error)``: each pin a mapping or None; ``pending_reboot``
    the marker's first line ('' when the file is empty) or None; ``record_error`` names a file that is not a JSON mapping
    (that pin then reads as None: never guessed).
    """
    records = records or {}
    pins, errors = [], []
    for name in RECORDS[:2]:
        text = records.get(name)
        value = None
        if text is False:
            errors.append('%s: too large to be a pin' % name)
        elif text is not None:
            try:
                value = json.loads(text)
            except ValueError as exc:
                errors.append('%s: not JSON (%s)' % (name, exc))
            else:
                if not isinstance(value, dict):
                    errors.append('%s: not a mapping of component to version' % name)
                    value = None
        pins.append(value)
    marker = records.get(RECORDS[2])
    pending = None if marker is None else 'too large to read' if marker is False else (marker.strip().splitlines() or [''])[0]
    return pins[0], pins[1], pending, ('; '.join(errors) or None)


def assemble(raw):
    """Build the ``gpufleet`` facts from the raw outputs gathered on the node.

    ``raw`` keys (all optional): nvidia_smi {path, rc, stdout, stderr, timed_out, command, timeout} (``_command.run``)
    or None when not found; packages {manager: dpkg|rpm, rc, stdout, stderr, timed_out, command, timeout};
    banners {tool: text or None}; services {unit: systemctl show text}; systemctl {path, rc, stderr, timed_out} of the
    ``systemctl show`` call or None when there is no systemctl; kernel; proc_modules; proc_driver_version;
    gpu_operator_driver_root; runfile_uninstaller; runfile_installer_log; driver_tree_version (the text of
    ``<root>/version`` beside an nvidia-smi at ``<root>/bin/nvidia-smi``, None when not a readable file); nvswitch_count;
    records {file name: text or None} (the state folder).
    """
    manager, packages, held, package_error, partial = _package_facts(raw)
    kernel_module_loaded = module_loaded(raw.get('proc_modules'), 'nvidia')
    health, reason, message, document = _health(raw, packages, kernel_module_loaded)
    kernel_module_version = None
    if raw.get('proc_driver_version'):
        kernel_module_version = _nvidia_smi.parse_proc_driver_version(raw['proc_driver_version'])
    if reason == 'driver_library_mismatch' and kernel_module_version and kernel_module_version not in (message or ''):
        message = '%s\nloaded kernel module: %s' % (message, kernel_module_version)
    services = dict((unit, parse_systemctl_show((raw.get('services') or {}).get(unit))) for unit in SERVICES)
    tree = _driver_tree(raw)
    source, evidence = _driver_source(raw, packages, manager, package_error, kernel_module_loaded, kernel_module_version, tree, partial)
    facts = {
        'schema_version': SCHEMA_VERSION,
        'health': health,
        'health_reason': reason,
        'health_message': _command.escape_controls(message) if message is not None else None,
        'nvidia_smi_path': (raw.get('nvidia_smi') or {}).get('path'),
        'driver_version': document.get('driver_version') if document else None,
        'cuda_driver_version': document.get('cuda_driver_version') if document else None,
        'kernel_module_version': kernel_module_version,
        'gpu_count': document['gpu_count'] if document else 0,
        'attached_gpus': document.get('attached_gpus') if document else None,
        'gpus': document['gpus'] if document else [],
        'nvswitch_count': raw.get('nvswitch_count') or 0,
        'package_manager': manager,
        'packages': packages,
        'held_packages': held,
        'package_error': _command.escape_controls(package_error) if package_error is not None else None,
        'driver_source': source,
        'driver_source_evidence': _command.escape_controls(evidence, keep_newlines=False) if evidence is not None else None,
        'driver_tree': tree,
        'kernel_module_flavor': _nvidia_smi.parse_kernel_module_flavor(raw.get('proc_driver_version')),
        'persistence_mode': persistence_mode(document['gpus'] if document else []),
        'tools': _tools(raw),
        'services': services,
        'systemd': systemd_state(raw.get('systemctl')),
        'kernel': raw.get('kernel'),
        'nvidia_module_loaded': kernel_module_loaded,
        'nouveau_loaded': module_loaded(raw.get('proc_modules'), 'nouveau'),
    }
    recorded, previous, pending, error = parse_records(raw.get('records'))
    facts.update(recorded_pin=recorded, previous_pin=previous, pending_reboot=pending,
                 record_error=_command.escape_controls(error) if error else None)
    return facts
