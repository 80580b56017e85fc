# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The state model of one simulated GPU node (the "node contract" of tests/sim/README.md).

All paths are relative to the node root: ``$GPUFLEET_SIM_ROOT`` (default ``/``), so that the
tools can run on a folder in unit tests.

========================================================  ===========================================
path                                                      meaning
========================================================  ===========================================
``etc/gpufleet-sim/hardware.json``                        the GPUs (written by ``fleet up``, see
                                                          :func:`make_hardware`)
``etc/gpufleet-sim/faults.json``                          injected faults, ``{name: {setting: value}}``
``run/gpufleet-sim/boot.json``                            written by the boot step: the loaded driver
``run/gpufleet-sim/kernel-release``                       the booted kernel's release, for the ``uname()`` shim
                                                          (``/etc/ld.so.preload``): what ``uname -r`` prints
``proc/driver/nvidia/version``                            the loaded module's banner, while one is loaded
                                                          (a tmpfs over ``/proc/driver`` in a node)
``usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1``            link to ``libnvidia-ml.so.<version>``: the
                                                          installed user-space driver (NVML)
``usr/share/gpufleet-sim/versions/<package>``             one file per installed dummy package, content
                                                          = the package's upstream version
``usr/src/nvidia-<version>/dkms.conf``                    a DKMS module source (``PACKAGE_VERSION``,
                                                          ``OPEN``)
``lib/modules/<kernel>/updates/dkms/nvidia.ko``           a built module: ``<version>`` [`` open``]
``lib/modules/<kernel>/kernel/drivers/video/nvidia.ko``   a module the runfile installer built (same content)
``usr/local/nvidia/``                                     a driver tree no package owns (``bin/``, ``lib64/``,
                                                          ``modules/nvidia.ko``, ``version``, ``kernel.release``)
``var/log/nvidia-installer.log``, ``var/lib/nvidia/log``  the runfile installer's log and its record of what it
                                                          installed (``runfile.py``)
``boot/vmlinuz-<kernel>``                                 an installed kernel
``run/gpufleet-sim/persistenced.pid``                     nvidia-persistenced runs (this boot)
``run/gpufleet-sim/fabricmanager.pid``                    nv-fabricmanager runs (this boot)
``run/gpufleet-sim/persistence_mode``                     legacy ``nvidia-smi -pm`` settings (this boot)
``run/gpufleet-sim/reboot_hang.json``                     what the boot step did for ``reboot_hang``
``var/lib/gpufleet-sim/xid.log``                          kernel-log Xid lines (written by ``fleet``)
``run/gpufleet-sim/dpkg-lock.pid``                        the ``dpkg_lock`` fault's holder (while it holds)
``run/gpufleet-sim/gpu-held.pid``                         the ``gpu_held`` fault's holder (while it holds)
``usr/local/bin/all_reduce_perf``                         nccl-tests, where installed (``nccl_tests install``)
========================================================  ===========================================

``$GPUFLEET_SIM_PACKAGE`` names the dummy package that owns the tool being run (set by the
package's wrapper script); a tool reads its own version from that package's versions file.
"""

import hashlib
import json
import os
import re
import subprocess
import tempfile
import time
import uuid

from gpufleet_sim import fault_table

ROOT_ENV = 'GPUFLEET_SIM_ROOT'
PACKAGE_ENV = 'GPUFLEET_SIM_PACKAGE'
# Set (to anything but "" or "0") to make the boot step only record the systemctl calls of reboot_hang.
NO_SYSTEMCTL_ENV = 'GPUFLEET_SIM_NO_SYSTEMCTL'

HARDWARE_FILE = 'etc/gpufleet-sim/hardware.json'
FAULTS_FILE = 'etc/gpufleet-sim/faults.json'
RUN_DIR = 'run/gpufleet-sim'
BOOT_FILE = 'run/gpufleet-sim/boot.json'
PERSISTENCED_PID = 'run/gpufleet-sim/persistenced.pid'
FABRICMANAGER_PID = 'run/gpufleet-sim/fabricmanager.pid'
PERSISTENCE_MODE_FILE = 'run/gpufleet-sim/persistence_mode'
REBOOT_HANG_FILE = 'run/gpufleet-sim/reboot_hang.json'
NVML_LINK = 'usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1'
VERSIONS_DIR = 'usr/share/gpufleet-sim/versions'
DKMS_SOURCE_DIR = 'usr/src'
MODULES_DIR = 'lib/modules'
KERNEL_DIR = 'boot'
XID_LOG = 'var/lib/gpufleet-sim/xid.log'
# Read by the uname() shim (node/shim/gpufleet_uname.c) that /etc/ld.so.preload loads into every process of a node.
KERNEL_RELEASE_FILE = 'run/gpufleet-sim/kernel-release'
# What the loaded nvidia module shows on metal; in a node /proc/driver is a tmpfs (fleet.py start_node).
PROC_DRIVER_DIR = 'proc/driver/nvidia'
PROC_DRIVER_VERSION = 'proc/driver/nvidia/version'
# The compiler the node's DKMS builds the module with (Debian bookworm's gcc, as `gcc -v` ends: with a space).
NODE_GCC = 'gcc version 12.2.0 (Debian 12.2.0-14) '
MODULE_SUBPATH = 'updates/dkms/nvidia.ko'
# Where NVIDIA's runfile installer (without --dkms) puts the module it built for the running kernel.
RUNFILE_MODULE_SUBPATH = 'kernel/drivers/video/nvidia.ko'
# A driver tree no package owns (the H100 of issue 27): tools, libraries, its own module, version and kernel.release.
DRIVER_TREE = 'usr/local/nvidia'
TREE_NVML_LINK = 'usr/local/nvidia/lib64/libnvidia-ml.so.1'
TREE_MODULE = 'usr/local/nvidia/modules/nvidia.ko'
TREE_VERSION = 'usr/local/nvidia/version'
TREE_KERNEL_RELEASE = 'usr/local/nvidia/kernel.release'
# Where the node's dynamic loader finds libnvidia-ml.so.1, in its search order: the distribution's library folder (packages,
# the runfile installer), then the driver tree's lib64 (listed in /etc/ld.so.conf.d by whoever mounted the tree).
NVML_LINKS = (NVML_LINK, TREE_NVML_LINK)

_NVML_RE = re.compile(r'^libnvidia-ml\.so\.([0-9]+(?:\.[0-9]+)+)$')
_VERSION_RE = re.compile(r'^([0-9]+)(?:\.|$)')

# CUDA driver API version of each driver branch (the "CUDA Version" nvidia-smi prints).
CUDA_BY_BRANCH = {
    525: '12.0', 530: '12.1', 535: '12.2', 545: '12.3', 550: '12.4', 555: '12.5', 560: '12.6',
    565: '12.7', 570: '12.8', 575: '12.9', 580: '13.0', 590: '13.1',
}

# --------------------------------------------------------------------------- hardware profiles

# Real HGX/PCIe bus numbers (HGX H100: thamada/nvidia-smi capture; DGX A100 layout).
_BUSES = {
    'h100-sxm-8': ('18', '2A', '3A', '5D', '9A', 'AB', 'BA', 'DB'),
    'a100-sxm-8': ('07', '0F', '47', '4E', '87', '90', 'B7', 'BD'),
    'l40s-pcie-4': ('17', '31', 'B1', 'CA'),
}

PROFILES = {
    'h100-sxm-8': {
        'gpu_count': 8, 'nvswitch_count': 4, 'model': 'NVIDIA H100 80GB HBM3', 'architecture': 'Hopper',
        'vbios': '96.00.99.00.01', 'board_part_number': '692-2G520-0200-000', 'memory_mib': 81559,
        'power_limit_w': 700, 'pci_device_id': '0x233010DE', 'serial_prefix': '1654',
    },
    'a100-sxm-8': {
        'gpu_count': 8, 'nvswitch_count': 6, 'model': 'NVIDIA A100-SXM4-80GB', 'architecture': 'Ampere',
        'vbios': '92.00.45.00.03', 'board_part_number': '692-2G506-0212-002', 'memory_mib': 81920,
        'power_limit_w': 400, 'pci_device_id': '0x20B210DE', 'serial_prefix': '1650',
    },
    'l40s-pcie-4': {
        'gpu_count': 4, 'nvswitch_count': 0, 'model': 'NVIDIA L40S', 'architecture': 'Ada Lovelace',
        'vbios': '95.02.66.00.02', 'board_part_number': '900-2G133-0080-000', 'memory_mib': 46068,
        'power_limit_w': 350, 'pci_device_id': '0x26B910DE', 'serial_prefix': '1323',
    },
}

_UUID_NAMESPACE = uuid.UUID('6c3f0b52-5a0e-4d57-9a43-0c6b2f7e1d90')


def _bus_numbers(profile, count):
    buses = list(_BUSES.get(profile, ()))
    number = 0xC0
    while len(buses) < count:
        candidate = '%02X' % number
        if candidate not in buses:
            buses.append(candidate)
        number = (number + 0x11) % 0x100
    return buses[:count]


def make_hardware(node, profile, gpu_count=None):
    """Deterministic ``hardware.json`` content for ``node`` with hardware ``profile``.

    Profiles: ``h100-sxm-8``, ``a100-sxm-8``, ``l40s-pcie-4``; ``gpu_count`` overrides the
    profile's number of GPUs.  UUIDs are ``GPU-`` + a UUID5 of node and index, serials 13 digits.
    """
    if profile not in PROFILES:
        raise ValueError('unknown hardware profile %r; profiles: %s' % (profile, ', '.join(sorted(PROFILES))))
    spec = PROFILES[profile]
    count = spec['gpu_count'] if gpu_count is None else int(gpu_count)
    if count < 1:
        raise ValueError('gpu_count must be at least 1, got %r' % (gpu_count,))
    gpus = []
    for index, bus in enumerate(_bus_numbers(profile, count)):
        name = '%s/%d' % (node, index)
        digest = int(hashlib.sha256(name.encode('utf-8')).hexdigest(), 16)
        gpus.append({
            'model': spec['model'],
            'uuid': 'GPU-%s' % uuid.uuid5(_UUID_NAMESPACE, name),
            'serial': '%s%09d' % (spec['serial_prefix'], digest % 1000000000),
            'pci_bus_id': '00000000:%s:00.0' % bus,
            'pci_device_id': spec['pci_device_id'],
            'vbios': spec['vbios'],
            'board_part_number': spec['board_part_number'],
            'memory_mib': spec['memory_mib'],
            'architecture': spec['architecture'],
            'power_limit_w': spec['power_limit_w'],
        })
    return {'node': node, 'profile': profile, 'nvswitch_count': spec['nvswitch_count'], 'gpus': gpus}


# --------------------------------------------------------------------------- versions

def dpkg_compare(left, right):
    """Compare two Debian versions with the node's own ``dpkg --compare-versions``: -1, 0 or 1.

    The simulated node boots the newest kernel and builds the newest registered module in dpkg's order,
    as its boot loader and dkms do; asking dpkg keeps that order exact without a second implementation.
    """
    for operator, result in (('lt', -1), ('gt', 1)):
        if subprocess.call(['dpkg', '--compare-versions', left, operator, right]) == 0:
            return result
    return 0


def newest(versions):
    """The highest of ``versions`` in dpkg order (None for an empty list)."""
    best = None
    for version in versions:
        if best is None or dpkg_compare(version, best) > 0:
            best = version
    return best


def branch_of(version):
    """Driver branch (major version) of ``550.127.05`` -> 550; None when not a version."""
    match = _VERSION_RE.match(version or '')
    return int(match.group(1)) if match else None


def cuda_version_for(driver):
    """CUDA driver API version printed for driver ``driver`` (None when the branch is unknown)."""
    return CUDA_BY_BRANCH.get(branch_of(driver))


def major_minor(version):
    """``570.124.04`` -> ``570.124`` (the form of "NVML library version")."""
    return '.'.join((version or '').split('.')[:2])


# --------------------------------------------------------------------------- files

def root():
    """The node root (``$GPUFLEET_SIM_ROOT``, default ``/``)."""
    return os.environ.get(ROOT_ENV) or '/'


def path(relative):
    """Absolute path of a node-contract path given relative to the node root."""
    return os.path.join(root(), relative.lstrip('/'))


def read_text(relative):
    """Content of a node file, None when it does not exist or cannot be read."""
    try:
        with open(path(relative), encoding='utf-8') as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def read_json(relative, default=None):
    """Parsed JSON of a node file; ``default`` when it is missing, empty or not JSON."""
    text = read_text(relative)
    if text is None or not text.strip():
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default


def write_text(relative, text):
    """Write a node file atomically (creating its folder)."""
    target = path(relative)
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix='.gpufleet-', dir=folder)
    try:
        with os.fdopen(handle, 'w', encoding='utf-8') as stream:
            stream.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def write_json(relative, data):
    """Write JSON to a node file atomically."""
    write_text(relative, json.dumps(data, indent=2, sort_keys=True) + '\n')


def remove(relative):
    """Remove a node file; True when it existed."""
    try:
        os.unlink(path(relative))
        return True
    except FileNotFoundError:
        return False


def exists(relative):
    return os.path.exists(path(relative))


# --------------------------------------------------------------------------- the node

def load_hardware():
    """``hardware.json`` (an empty GPU list when it is missing)."""
    data = read_json(HARDWARE_FILE, None)
    if not isinstance(data, dict):
        data = {}
    data.setdefault('gpus', [])
    data.setdefault('nvswitch_count', 0)
    # Fault gpu_lost: a GPU the boot step did not find is not there until the next boot (absent_gpus in boot.json).
    absent = (load_boot() or {}).get('absent_gpus') or []
    if absent:
        data['gpus'] = [gpu for index, gpu in enumerate(data['gpus']) if index not in absent]
    return data


def load_faults():
    """``faults.json`` as ``{name: settings}`` with the fault table's types and defaults applied (fault_table.py).

    The fleet writes ``{"diag_fail": {"level": 3, ...}, "xid": {...}}``; a single fault object
    (``{"name": "xid", ...}``) or a list of them is accepted too.
    """
    data = read_json(FAULTS_FILE, {})
    items = []
    if isinstance(data, dict):
        name = data.get('name', data.get('fault'))
        if isinstance(name, str):
            items.append((name, dict((k, v) for k, v in data.items() if k not in ('name', 'fault'))))
        else:
            items.extend((key, value) for key, value in data.items() if isinstance(key, str))
    elif isinstance(data, list):
        for entry in data:
            if isinstance(entry, dict) and isinstance(entry.get('name', entry.get('fault')), str):
                items.append((entry.get('name', entry.get('fault')),
                              dict((k, v) for k, v in entry.items() if k not in ('name', 'fault'))))
    faults = {}
    for name, settings in items:
        faults[name] = fault_table.apply_defaults(name, fault_table.coerce(settings) if isinstance(settings, dict) else {})
    return faults


def fault(name):
    """Settings of the injected fault ``name``, None when it is not set."""
    return load_faults().get(name)


def load_boot():
    """``boot.json`` of the current boot, None before the boot step ran."""
    data = read_json(BOOT_FILE, None)
    return data if isinstance(data, dict) else None


def loaded_driver():
    """Version of the kernel module loaded at boot, None when no driver is loaded."""
    boot = load_boot()
    driver = boot.get('driver') if boot else None
    return driver if isinstance(driver, str) and driver else None


def installed_nvml():
    """Version of the installed NVML (``libnvidia-ml.so.1`` -> ``libnvidia-ml.so.<version>``), or None.

    The first of :data:`NVML_LINKS` that is a link to an existing ``libnvidia-ml.so.<version>`` wins, as the dynamic
    loader takes the first ``libnvidia-ml.so.1`` on its search path.
    """
    for relative in NVML_LINKS:
        link = path(relative)
        try:
            target = os.readlink(link)
        except OSError:
            continue
        match = _NVML_RE.match(os.path.basename(target))
        if match and os.path.exists(link):   # a dangling link: the library itself is gone
            return match.group(1)
    return None


def nvml_state():
    """``ok``, ``no_library`` (NVML not installed), ``not_loaded`` (no kernel module) or ``mismatch``."""
    installed = installed_nvml()
    if installed is None:
        return 'no_library'
    loaded = loaded_driver()
    if loaded is None:
        return 'not_loaded'
    if loaded != installed:
        return 'mismatch'
    return 'ok'


def package_version(name):
    """Upstream version of installed dummy package ``name`` (its versions file), None when absent."""
    if not name or '/' in name or name.startswith('.'):
        return None
    text = read_text(os.path.join(VERSIONS_DIR, name))
    if text is None:
        return None
    text = text.strip().splitlines()[0].strip() if text.strip() else ''
    return text or None


def installed_packages():
    """``{package: version}`` of every installed dummy package."""
    folder = path(VERSIONS_DIR)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return {}
    result = {}
    for name in names:
        version = package_version(name)
        if version:
            result[name] = version
    return result


def owner(candidates):
    """``(package, version)`` of the package that owns the running tool.

    ``$GPUFLEET_SIM_PACKAGE`` decides when it names an installed package; otherwise the first of
    ``candidates`` (regular expressions matched against whole package names) that matches an
    installed package, the newest version winning.  ``(None, None)`` when nothing matches.
    """
    named = os.environ.get(PACKAGE_ENV, '').strip()
    if named:
        version = package_version(named)
        if version:
            return named, version
    packages = installed_packages()
    for candidate in candidates:
        pattern = re.compile(candidate + r'\Z')
        best = (None, None)
        for name, version in packages.items():
            if pattern.match(name) and (best[1] is None or dpkg_compare(version, best[1]) > 0):
                best = (name, version)
        if best[0] is not None:
            return best
    return None, None


def persistenced_running():
    return exists(PERSISTENCED_PID)


def fabricmanager_running():
    return exists(FABRICMANAGER_PID)


def legacy_persistence_modes():
    """``{pci_bus_id: enabled}`` set with ``nvidia-smi -pm`` during this boot."""
    data = read_json(PERSISTENCE_MODE_FILE, {})
    return dict((key, bool(value)) for key, value in data.items()) if isinstance(data, dict) else {}


def lost_gpus(faults=None):
    """Indexes of the GPUs that have fallen off the bus (fault ``xid`` with Xid 79)."""
    faults = load_faults() if faults is None else faults
    settings = faults.get('xid')
    if not settings:
        return set()
    settings = fault_table.apply_defaults('xid', settings)
    try:
        if int(settings['xid']) != fault_table.XID_FALLEN_OFF_BUS:
            return set()
        return {int(settings['gpu'])}
    except (TypeError, ValueError):
        return set()


def kernels():
    """Installed kernels (``boot/vmlinuz-<release>``), oldest first in dpkg order."""
    try:
        names = os.listdir(path(KERNEL_DIR))
    except OSError:
        return []
    releases = [name[len('vmlinuz-'):] for name in names if name.startswith('vmlinuz-') and len(name) > len('vmlinuz-')]
    releases = [release for release in releases if os.path.isfile(path(os.path.join(KERNEL_DIR, 'vmlinuz-' + release)))]
    result = []
    for release in releases:
        position = 0
        while position < len(result) and dpkg_compare(result[position], release) < 0:
            position += 1
        result.insert(position, release)
    return result


def module_path(kernel):
    return os.path.join(MODULES_DIR, kernel, MODULE_SUBPATH)


def read_module(kernel):
    """``(version, open)`` of the nvidia module DKMS built for ``kernel``; ``(None, False)`` when none."""
    return _module_file(module_path(kernel)) or (None, False)


def _module_file(relative):
    text = read_text(relative)
    if not text or not text.split():
        return None
    words = text.split()
    return words[0], 'open' in words[1:]


def find_module(kernel, modprobe=False):
    """The nvidia module that loads on ``kernel``: ``{"version", "open", "path", "source"}`` or None.

    In the order a node loads it: the DKMS build (``updates/dkms``, source ``dkms``: depmod searches ``updates`` first),
    the runfile installer's (``kernel/drivers/video``, source ``runfile``), then, unless ``modprobe`` (modprobe only knows
    ``/lib/modules``), the module of a driver tree no package owns (``usr/local/nvidia/modules/nvidia.ko``, source
    ``tree``), which its loader inserts only when the tree was built for that kernel (``usr/local/nvidia/kernel.release``).
    """
    if not kernel:
        return None
    candidates = [(module_path(kernel), 'dkms'), (os.path.join(MODULES_DIR, kernel, RUNFILE_MODULE_SUBPATH), 'runfile')]
    if not modprobe and (read_text(TREE_KERNEL_RELEASE) or '').strip() == kernel:
        candidates.append((TREE_MODULE, 'tree'))
    for relative, source in candidates:
        found = _module_file(relative)
        if found:
            return {'version': found[0], 'open': found[1], 'path': '/' + relative, 'source': source}
    return None


def module_built_at(kernel, relative=None):
    """Modification time of the module built for ``kernel`` (when the simulated DKMS built it), None when there is none.

    ``relative``: the module file that loaded (:func:`find_module`'s ``path``), the DKMS build by default.
    """
    try:
        return int(os.path.getmtime(path(relative or module_path(kernel))))
    except (OSError, TypeError):
        return None


def proc_driver_version(driver, is_open, built_at, hostname):
    """``/proc/driver/nvidia/version`` of a loaded module, in the kernel module's own format.

    NVIDIA's ``nv_procfs_read_version`` prints ``"NVRM version: %s\\n"`` with the module's id and ``"GCC version:  %s\\n"``
    with the compiler's ``-v`` last line.  The proprietary module's id is ``NVIDIA UNIX x86_64 Kernel Module  <version>
    <date>``; a module built from the open source is ``NVIDIA UNIX Open Kernel Module for x86_64  <version>  Release
    Build  (<user>@<host>)  <date>`` (real captures: tests/unit/fixtures/real-outputs/proc/).  The date here is when the
    simulated DKMS built the module (UTC, as ``date`` prints it in the C locale).
    """
    stamp = time.strftime('%a %b %e %H:%M:%S UTC %Y', time.gmtime(built_at or 0))
    if is_open:
        module_id = 'NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  (root@%s)  %s' % (driver, hostname or 'localhost', stamp)
    else:
        module_id = 'NVIDIA UNIX x86_64 Kernel Module  %s  %s' % (driver, stamp)
    return 'NVRM version: %s\nGCC version:  %s\n' % (module_id, NODE_GCC)


def publish(record):
    """Show the booted kernel and the loaded driver of ``record`` (boot.json) where tools read them on metal.

    ``run/gpufleet-sim/kernel-release`` (what ``uname -r`` prints through the node's uname() shim) holds the booted
    kernel; ``proc/driver/nvidia/version`` exists exactly while a module is loaded.  Where ``/proc/driver`` cannot be
    written (a container started without the tmpfs over it) the driver file is left alone: tools then see no module,
    as before.  Returns the paths written.
    """
    written = []
    kernel = (record or {}).get('kernel')
    if kernel:
        write_text(KERNEL_RELEASE_FILE, kernel + '\n')
        written.append(KERNEL_RELEASE_FILE)
    else:
        remove(KERNEL_RELEASE_FILE)
    driver = (record or {}).get('driver')
    try:
        if driver:
            built_at = module_built_at(kernel, record.get('module'))
            text = proc_driver_version(driver, record.get('open'), built_at, (load_hardware() or {}).get('node'))
            write_text(PROC_DRIVER_VERSION, text)
            os.chmod(path(PROC_DRIVER_VERSION), 0o444)
            written.append(PROC_DRIVER_VERSION)
        else:
            remove(PROC_DRIVER_VERSION)
            if os.path.isdir(path(PROC_DRIVER_DIR)):
                os.rmdir(path(PROC_DRIVER_DIR))
    except OSError:
        pass
    return written
