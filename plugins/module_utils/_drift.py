# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Compare a node's GPU facts (``gpu_facts``) with the pinned stack.

Pure logic, no Ansible import.  The pin is a mapping of component name to the
pinned version; an empty value means "not pinned".  ``vbios`` may be a single
version for every GPU or a mapping of GPU model (``product_name``) to version.

The result always has ``status`` (``in_sync`` / ``drifted`` / ``broken``) and
``drift`` (component -> {expected, actual}, per GPU for VBIOS and GSP
firmware).  A node whose facts say ``broken`` is reported broken with an empty
``drift``: a failed ``nvidia-smi`` is not a version.

The driver flavor the operator chose (``server``, ``open``, ``cuda-drivers``: the roles' ``*_driver_flavor``; the pin
has none) is compared, when given, as a component of its own, ``driver_flavor``: the loaded kernel module's flavor
(``kernel_module_flavor`` of the facts, from ``/proc/driver/nvidia/version``) against the flavor that choice installs
(:data:`MODULE_FLAVOR`).  A node on the pinned version but the wrong flavor is drifted, and a converge fixes it.
"""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._components import COMPONENTS, shown, type_name, version_text_problem
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._versions import VersionError, compare, matches_pin

# Packages whose installed version stands for a component, most specific first.
# Debian names come from NVIDIA's CUDA repository; RHEL names from its dnf repository.
COMPONENT_PACKAGES = {
    'container_toolkit': ('nvidia-container-toolkit', 'nvidia-container-toolkit-base'),
    'dcgm': ('datacenter-gpu-manager-4-core', 'datacenter-gpu-manager-4', 'datacenter-gpu-manager'),
}
# When no package is installed (a tarball or container install), the tool's own banner: (tools key, source).
COMPONENT_BANNERS = {
    'container_toolkit': ('nvidia_ctk', 'nvidia-ctk --version'),
    'dcgm': ('dcgm', 'dcgmi --version'),
    'fabric_manager': ('fabric_manager', 'nv-fabricmanager --version'),
}
FABRIC_MANAGER_PREFIX = 'nvidia-fabricmanager'
PROC_DRIVER_VERSION = '/proc/driver/nvidia/version'

# The kernel module flavor each driver flavor installs.  NVIDIA's driver installation guide (kernel-modules.html, R560 and
# later, where the open flavor became the default): the open GPU kernel modules come with ``nvidia-open`` (apt
# ``nvidia-driver-<branch>-open``, dnf stream ``<branch>-open``), the proprietary ones with ``cuda-drivers`` (dnf stream
# ``<branch>-dkms``, ``kmod-nvidia-latest-dkms``); ``server`` is ``nvidia-driver-<branch>-server`` with ``nvidia-dkms-<branch>``,
# the proprietary module.
DRIVER_FLAVORS = ('server', 'open', 'cuda-drivers')
MODULE_FLAVOR = {'server': 'proprietary', 'open': 'open', 'cuda-drivers': 'proprietary'}
# Components a report lists, in order: the pin's, then the flavor (compared only when a driver flavor is given).
REPORTED = COMPONENTS + ('driver_flavor',)

STATUS_IN_SYNC = 'in_sync'
STATUS_DRIFTED = 'drifted'
STATUS_BROKEN = 'broken'
# The pin names components, but none of them can be compared on this node (for example only Fabric Manager
# on a node without NVSwitch): nothing was checked, so the node is not reported in sync.
STATUS_NOT_CHECKED = 'not_checked'


class DriftError(ValueError):
    """A pin or facts document that cannot be compared."""


def module_flavor(driver_flavor, field='driver_flavor'):
    """The kernel module flavor (``open`` / ``proprietary``) a driver flavor installs; None for None or ''.

    Raises DriftError naming ``field`` for a flavor that is not one of :data:`DRIVER_FLAVORS`."""
    if driver_flavor in (None, ''):
        return None
    if driver_flavor not in MODULE_FLAVOR:
        raise DriftError('%s must be one of %s, got %s' % (field, ', '.join(DRIVER_FLAVORS), shown(driver_flavor)))
    return MODULE_FLAVOR[driver_flavor]


def normalize_pin(pin):
    """Return the pin with every known component present (None = not pinned).

    Raises DriftError naming an unknown component (and listing the valid ones) or a value that is not a version.
    """
    if pin is None:
        pin = {}
    if not isinstance(pin, dict):
        raise DriftError('the pin must be a mapping of component to version, got %s' % type_name(pin))
    unknown = sorted(str(key) for key in pin if key not in COMPONENTS)
    if unknown:
        raise DriftError('unknown pin component(s) %s; valid components: %s' % (', '.join(unknown), ', '.join(COMPONENTS)))
    result = {}
    for component in COMPONENTS:
        value = pin.get(component)
        if component == 'vbios' and isinstance(value, dict):
            models = dict((str(model), _clean(version, 'vbios.%s' % model)) for model, version in value.items())
            result[component] = dict((model, version) for model, version in models.items() if version) or None
        elif isinstance(value, (dict, list)):
            raise DriftError('pin component %s must be a version string, got a %s' % (component, type_name(value)))
        else:
            result[component] = _clean(value, component)
    return result


def pinned_components(pin):
    """The components a normalized pin gives a value."""
    return [component for component in COMPONENTS if pin.get(component)]


def _clean(value, field):
    """A pinned value as a string, or None when empty; DriftError naming ``field`` when it is not a version."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise DriftError('pin component %s must be a version string, got %s' % (field, value))
    value = str(value).strip()
    if not value:
        return None
    problem = version_text_problem(value)
    if problem:
        raise DriftError('pin component %s: %s %s' % (field, shown(value), problem))
    return value


def _dotted_prefix(actual, pinned):
    """True when ``actual`` equals ``pinned`` or extends it at a dot or dash boundary."""
    if actual is None:
        return False
    return actual == pinned or actual.startswith(pinned + '.') or actual.startswith(pinned + '-')


def _package(facts, names):
    """(name, version) of the first installed package among ``names``."""
    packages = facts.get('packages') or {}
    for name in names:
        if name in packages and packages[name]:
            return name, packages[name]
    return None, None


def _fabric_manager_package(facts):
    """(name, version) of the installed Fabric Manager package (branch-suffixed on Debian)."""
    packages = facts.get('packages') or {}
    names = sorted(name for name in packages if name == FABRIC_MANAGER_PREFIX or name.startswith(FABRIC_MANAGER_PREFIX + '-'))
    names = [name for name in names if not name.startswith(FABRIC_MANAGER_PREFIX + '-dev')]
    if names:
        return names[-1], packages[names[-1]]
    return None, None


def _version_matches(actual, pinned, scheme):
    """Package-manager-exact match, falling back to the dotted prefix rule for tool banners."""
    if actual is None:
        return False
    try:
        return matches_pin(actual, pinned, scheme)
    except VersionError:
        return _dotted_prefix(actual, pinned)


def _scalar(expected, actual, matched, source=None):
    entry = {'expected': expected, 'actual': actual}
    if source:
        entry['source'] = source
    return None if matched else entry


def _per_gpu(facts, field, expected_for):
    """Per-GPU drift of ``field``; ``expected_for(gpu)`` returns the pinned value or None."""
    drift = {}
    for gpu in facts.get('gpus') or []:
        expected = expected_for(gpu)
        if expected is None:
            continue
        actual = gpu.get(field)
        if actual != expected:
            drift[str(gpu.get('index'))] = {
                'model': gpu.get('name'),
                'uuid': gpu.get('uuid'),
                'expected': expected,
                'actual': actual,
            }
    return drift


def _vbios_expected(pinned):
    if isinstance(pinned, dict):
        return lambda gpu: pinned.get(gpu.get('name') or '')
    return lambda gpu: pinned


def loaded_driver(facts):
    """The loaded driver as (version, source): the kernel module's own banner in ``/proc/driver/nvidia/version`` (the
    facts' ``kernel_module_version``), else the version nvidia-smi reports (which NVML takes from that module).

    The module is what runs until the next reboot or driver reload, whatever packages are installed; a container that
    shows the host's module (the GPU Operator's driver container) shows the same file.
    """
    if facts.get('kernel_module_version'):
        return facts['kernel_module_version'], PROC_DRIVER_VERSION
    return facts.get('driver_version'), 'nvidia-smi'


def component_actual(facts, component):
    """The actual value of a scalar component as (value, source)."""
    tools = facts.get('tools') or {}
    if component == 'kernel':
        return facts.get('kernel'), 'uname'
    if component == 'driver':
        return loaded_driver(facts)
    if component == 'cuda_driver':
        return facts.get('cuda_driver_version'), 'nvidia-smi'
    if component == 'cuda_toolkit':
        if tools.get('nvcc'):
            return tools['nvcc'], 'nvcc --version'
        return _cuda_toolkit_from_packages(facts.get('packages') or {}, facts.get('package_manager') or 'dpkg'), 'cuda-toolkit package'
    if component == 'fabric_manager':
        name, version = _fabric_manager_package(facts)
    elif component in COMPONENT_PACKAGES:
        name, version = _package(facts, COMPONENT_PACKAGES[component])
    else:
        raise DriftError('component %s has no scalar value' % component)
    if name:
        return version, name
    key, source = COMPONENT_BANNERS[component]
    return tools.get(key), source


def _cuda_toolkit_from_packages(packages, scheme):
    """Newest cuda-toolkit-X-Y package as "X.Y" (its package version is X.Y.Z-R)."""
    best = None
    for name, version in packages.items():
        parts = name.split('-')
        if len(parts) == 4 and parts[:2] == ['cuda', 'toolkit'] and parts[2].isdigit() and parts[3].isdigit():
            candidate = version or '%s.%s' % (parts[2], parts[3])
            if best is None or _compare_or_zero(candidate, best, scheme) > 0:
                best = candidate
    return best


def _compare_or_zero(left, right, scheme):
    try:
        return compare(left, right, scheme)
    except VersionError:
        return 0


def _fabric_manager_applies(facts):
    """Fabric Manager is needed on NVSwitch systems, and checked wherever it is installed."""
    if facts.get('nvswitch_count'):
        return True
    name, dummy = _fabric_manager_package(facts)
    return bool(name) or bool((facts.get('tools') or {}).get('fabric_manager'))


_FACT_STRINGS = ('health_reason', 'health_message', 'package_manager', 'kernel', 'driver_version', 'kernel_module_version',
                 'cuda_driver_version', 'kernel_module_flavor', 'driver_source', 'driver_source_evidence')
_GPU_STRINGS = ('name', 'uuid', 'vbios_version', 'gsp_firmware_version')


def validate_facts(facts):
    """Refuse a facts mapping of the wrong shape, naming the field (``facts.gpus[2].vbios_version``).

    Checks what :func:`compute_drift` reads: the gpufleet facts of ``gpu_facts`` pass; a hand-made or
    corrupted mapping fails here with a DriftError instead of a Python exception further down.
    """
    def fail(field, expected, value):
        raise DriftError('facts.%s must be %s, got %s' % (field, expected, type_name(value)))

    if not isinstance(facts, dict):
        fail('', 'a mapping (the gpufleet facts from gpufleet.lifecycle.gpu_facts)', facts)
    if facts.get('health') not in ('ok', 'broken', 'absent'):
        raise DriftError('facts.health must be ok, broken or absent (got %s): gather the facts with gpufleet.lifecycle.gpu_facts'
                         % shown(facts.get('health')))
    for key in _FACT_STRINGS:
        if facts.get(key) is not None and not isinstance(facts[key], str):
            fail(key, 'a string or null', facts[key])
    if facts.get('nvswitch_count') is not None and (isinstance(facts['nvswitch_count'], bool) or not isinstance(facts['nvswitch_count'], int)):
        fail('nvswitch_count', 'an integer or null', facts['nvswitch_count'])
    for key in ('packages', 'tools'):
        value = facts.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            fail(key, 'a mapping', value)
        for name, version in value.items():
            if version is not None and not isinstance(version, str):
                fail('%s[%s]' % (key, shown(name)), 'a version string or null', version)
    gpus = facts.get('gpus')
    if gpus is None:
        return facts
    if not isinstance(gpus, list):
        fail('gpus', 'a list', gpus)
    for position, gpu in enumerate(gpus):
        if not isinstance(gpu, dict):
            fail('gpus[%d]' % position, 'a mapping', gpu)
        for key in _GPU_STRINGS:
            if gpu.get(key) is not None and not isinstance(gpu[key], str):
                fail('gpus[%d].%s' % (position, key), 'a string or null', gpu[key])
    return facts


def _flavor_component(facts, driver_flavor, result):
    """Compare the loaded kernel module's flavor with the one ``driver_flavor`` installs (a node without a loaded driver, or
    whose facts cannot tell the flavor, is drifted: actual null)."""
    expected = module_flavor(driver_flavor)
    actual = facts.get('kernel_module_flavor') if facts['health'] == 'ok' else None
    entry = _scalar(expected, actual, actual == expected, PROC_DRIVER_VERSION)
    result['checked'].append('driver_flavor')
    if entry:
        entry['driver_flavor'] = driver_flavor
        result['drift']['driver_flavor'] = entry
    result['components']['driver_flavor'] = {'status': STATUS_DRIFTED if entry else STATUS_IN_SYNC, 'expected': expected,
                                             'actual': actual, 'source': PROC_DRIVER_VERSION, 'driver_flavor': driver_flavor}


def compute_drift(facts, pin, driver_flavor=None):
    """Compare ``facts`` (the ``ansible_facts.gpufleet`` mapping) with ``pin``; with ``driver_flavor`` (``server``, ``open``,
    ``cuda-drivers``) also the loaded kernel module's flavor (component ``driver_flavor``: ``open`` or ``proprietary``).

    Returns {'status', 'drift', 'checked', 'not_applicable', 'components', 'health', 'health_reason', 'driver_source',
    'driver_source_evidence', 'message'}; ``driver_source`` and its evidence are the facts' (where the loaded driver comes
    from: ``host_package``, ``container``, ``runfile``, ``unowned``, or null without a driver).
    ``components`` has every pinned component: ``status`` (``in_sync``, ``drifted``, ``not_applicable``, ``unverified``
    on a broken node), ``expected``, ``actual`` (for ``vbios``/``gsp_firmware`` the distinct versions of the GPUs, and
    ``gpus``: the drifted GPUs) and ``source``: what a report shows for in-sync components too.
    """
    validate_facts(facts)
    pin = normalize_pin(pin)
    module_flavor(driver_flavor)
    health = facts['health']
    result = {
        'health': health,
        'health_reason': facts.get('health_reason'),
        'driver_source': facts.get('driver_source'),
        'driver_source_evidence': facts.get('driver_source_evidence'),
        'drift': {},
        'checked': [],
        'not_applicable': [],
        'components': {},
    }
    pinned = pinned_components(pin)
    if health == 'broken':
        result['status'] = STATUS_BROKEN
        result['message'] = 'node is broken (%s): %s' % (facts.get('health_reason'), facts.get('health_message'))
        result['unverified'] = pinned
        for component in pinned:
            result['components'][component] = {'status': 'unverified', 'expected': pin[component], 'actual': None}
        if driver_flavor:
            result['unverified'].append('driver_flavor')
            result['components']['driver_flavor'] = {'status': 'unverified', 'expected': module_flavor(driver_flavor), 'actual': None,
                                                     'driver_flavor': driver_flavor}
        return result

    scheme = facts.get('package_manager') or 'dpkg'
    for component in pinned:
        expected = pin[component]
        if component in ('vbios', 'gsp_firmware'):
            if health == 'absent':
                result['not_applicable'].append(component)
                result['components'][component] = {'status': 'not_applicable', 'expected': expected, 'actual': None}
                continue
            field = 'vbios_version' if component == 'vbios' else 'gsp_firmware_version'
            expected_for = _vbios_expected(expected) if component == 'vbios' else (lambda gpu, value=expected: value)
            per_gpu = _per_gpu(facts, field, expected_for)
            result['checked'].append(component)
            if per_gpu:
                result['drift'][component] = per_gpu
            result['components'][component] = {
                'status': STATUS_DRIFTED if per_gpu else STATUS_IN_SYNC, 'expected': expected,
                'actual': sorted(set(gpu.get(field) or '' for gpu in facts.get('gpus') or [])), 'gpus': per_gpu}
            continue
        if component == 'fabric_manager' and not _fabric_manager_applies(facts):
            result['not_applicable'].append(component)
            result['components'][component] = {'status': 'not_applicable', 'expected': expected, 'actual': None}
            continue
        actual, source = component_actual(facts, component)
        if component == 'kernel':
            matched = _dotted_prefix(actual, expected)
        elif component in ('driver', 'cuda_driver', 'cuda_toolkit'):
            matched = _dotted_prefix(actual, expected) or _version_matches(actual, expected, scheme)
        else:
            matched = _version_matches(actual, expected, scheme)
        result['checked'].append(component)
        entry = _scalar(expected, actual, matched, source)
        if entry:
            result['drift'][component] = entry
        result['components'][component] = {'status': STATUS_DRIFTED if entry else STATUS_IN_SYNC, 'expected': expected,
                                           'actual': actual, 'source': source}
    if driver_flavor and 'driver' in pinned:
        # The flavor is the pinned driver's: a pin without a driver (DCGM, the toolkit) says nothing of the kernel module.
        _flavor_component(facts, driver_flavor, result)
    result['status'] = STATUS_DRIFTED if result['drift'] else STATUS_IN_SYNC
    if result['drift']:
        result['message'] = 'drifted from the pin: %s' % ', '.join(component for component in REPORTED if component in result['drift'])
    elif not result['checked']:
        result['status'] = STATUS_NOT_CHECKED
        result['message'] = 'nothing the pin names can be compared on this node (pinned: %s; not applicable here: %s)' % (
            ', '.join(pinned) or 'nothing', ', '.join(result['not_applicable']) or 'none')
    else:
        result['message'] = 'in sync with the pin (%d component(s) checked)' % len(result['checked'])
    return result


def render_diff(result):
    """Before/after texts for Ansible's --diff: actual values before, pinned values after."""
    before = []
    after = []
    for component in REPORTED:
        entry = result['drift'].get(component)
        if entry is None:
            continue
        if 'expected' in entry:
            before.append('%s: %s' % (component, _shown(entry['actual'])))
            after.append('%s: %s' % (component, _shown(entry['expected'])))
            continue
        for index in sorted(entry, key=_index_key):
            gpu = entry[index]
            label = '%s[gpu %s %s]' % (component, index, gpu.get('model') or '')
            before.append('%s: %s' % (label.replace(' ]', ']'), _shown(gpu['actual'])))
            after.append('%s: %s' % (label.replace(' ]', ']'), _shown(gpu['expected'])))
    return '\n'.join(before) + ('\n' if before else ''), '\n'.join(after) + ('\n' if after else '')


def _index_key(index):
    return (0, int(index)) if str(index).isdigit() else (1, str(index))


def _shown(value):
    return 'not installed' if value is None else value
