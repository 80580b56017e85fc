# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which packages a pin means, and what must change on a node to reach it (pure functions).

The one place that knows NVIDIA's package names.  For a pin (``{component: version}``) and a package
manager (``apt`` on Debian/Ubuntu with NVIDIA's CUDA repository, ``dnf`` on RHEL/Rocky 8 and 9 with its
module streams) :func:`target_packages` lists each package with the version it must have;
:func:`plan` compares that with what is installed (:func:`installed_from_dpkg`, :func:`installed_from_rpm`)
and returns the changes, the stray packages of other branches or families to remove, the packages the
repository does not have, the holds / version locks, and (dnf) the module stream to enable.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._packages import (
    PackageParseError,
    parse_dnf_module_list,
    parse_dnf_repoquery,
    parse_rpm_query,
)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._drift import MODULE_FLAVOR
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._components import DEFAULT_REVISIONS, INSTALLED, revision_problem, shown, type_name
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._versions import VersionError, matches_pin

__all__ = [
    'COMPONENTS',
    'DEFAULT_REVISIONS',
    'DRIVER_FLAVORS',
    'DRIVER_SOURCES',
    'PACKAGE_MANAGERS',
    'RUNFILE_UNINSTALLER',
    'RUNFILE_UNINSTALL_ARGS',
    'StackError',
    'driver_source_plan',
    'driver_stream',
    'takeover_plan',
    'installed_from_dpkg',
    'installed_from_rpm',
    'parse_apt_cache_madison',
    'parse_versionlock_list',
    'plan',
    'pin_from_installed',
    'target_packages',
    'validate_pin',
]

# Components the package roles install (in the order gpu_stack applies them) and NVIDIA's revisions: the one table.
COMPONENTS = INSTALLED
DRIVER_FLAVORS = ('server', 'open', 'cuda-drivers')
PACKAGE_MANAGERS = ('apt', 'dnf')
DRIVER_SOURCES = ('host_package', 'container', 'runfile', 'unowned')
# NVIDIA's runfile installer installs its uninstaller here (nvidia-installer --uninstall); a take-over runs it with these arguments.
RUNFILE_UNINSTALLER = '/usr/bin/nvidia-uninstall'
RUNFILE_UNINSTALL_ARGS = ('--silent',)

_VERSION_RE = {
    'kernel': re.compile(r'^[0-9][0-9A-Za-z.+_~-]*$'),
    'driver': re.compile(r'^[0-9]{3}\.[0-9]+(\.[0-9]+)?$'),
    'fabric_manager': re.compile(r'^[0-9]{3}\.[0-9]+(\.[0-9]+)?$'),
    'container_toolkit': re.compile(r'^[0-9]+\.[0-9]+\.[0-9]+([~.][0-9A-Za-z.]+)?$'),
    'dcgm': re.compile(r'^[0-9]+\.[0-9]+\.[0-9]+$'),
    'cuda_toolkit': re.compile(r'^[0-9]+\.[0-9]+$'),
}
_VERSION_EXAMPLE = {
    'kernel': '6.1.0-28-amd64 (Debian) or 5.14.0-427.13.1.el9_4.x86_64 (RHEL), as uname -r prints it',
    'driver': '580.65.06',
    'fabric_manager': '580.65.06',
    'container_toolkit': '1.17.0',
    'dcgm': '4.1.0',
    'cuda_toolkit': '13.0',
}
_PACKAGE_VERSION_RE = re.compile(r'^([0-9]+:)?[0-9][0-9A-Za-z.+~:_-]*$')

_CTK_NAMES = ('nvidia-container-toolkit', 'nvidia-container-toolkit-base', 'libnvidia-container-tools', 'libnvidia-container1')
_DCGM3 = 'datacenter-gpu-manager'
_DCGM4 = ('datacenter-gpu-manager-4-core', 'datacenter-gpu-manager-4-cuda11', 'datacenter-gpu-manager-4-cuda12',
          'datacenter-gpu-manager-4-cuda13', 'datacenter-gpu-manager-4-devel', 'datacenter-gpu-manager-4-proprietary',
          'datacenter-gpu-manager-4-proprietary-cuda12', 'datacenter-gpu-manager-4-proprietary-cuda13')
# Debian: driver packages that carry a branch number (Fabric Manager is its own component).
_APT_DRIVER_BRANCH_RE = re.compile(r'^(?:(?:lib)?nvidia-(?!fabricmanager)[a-z0-9-]*?-|cuda-drivers-)([0-9]{3})(?:-server|-open)?$')
_APT_FM_RE = re.compile(r'^(?:nvidia-fabricmanager|cuda-drivers-fabricmanager)-([0-9]{3})$')
# RHEL: the driver pieces of NVIDIA's nvidia-driver module (their version is the driver version, epoch 3).
_DNF_DRIVER_NAMES = ('nvidia-driver', 'nvidia-driver-libs', 'nvidia-driver-cuda', 'nvidia-driver-cuda-libs',
                     'nvidia-kmod-common', 'nvidia-persistenced', 'nvidia-modprobe')
_DNF_KMOD = {'open': 'kmod-nvidia-open-dkms', 'server': 'kmod-nvidia-latest-dkms', 'cuda-drivers': 'kmod-nvidia-latest-dkms'}
# RHEL packages of another driver source: the other kernel-module flavour, EL7's latest-dkms names,
# NVIDIA's precompiled kmods (kmod-nvidia-<version>-<kernel>).
_DNF_DRIVER_OTHER_RE = re.compile(r'^(?:kmod-nvidia-(?:open|latest)-dkms|nvidia-driver-latest(?:-dkms)?(?:-[a-z-]+)?'
                                  r'|kmod-nvidia-[0-9]{3}\.[0-9.]+-.+|cuda-drivers(?:-[0-9]{3})?)$')


class StackError(ValueError):
    """A pin or option that cannot be turned into packages; ``field`` names it (``pin.driver``)."""

    def __init__(self, field, message):
        super(StackError, self).__init__('%s: %s' % (field, message))
        self.field = field


def _branch(version):
    return version.split('.', 1)[0]


def validate_pin(pin, components=COMPONENTS):
    """Check a pin: a mapping of known components to versions, Fabric Manager on the driver's branch.

    Returns the pin as ``{component: str}`` in :data:`COMPONENTS` order (empty values dropped).
    Raises :class:`StackError` naming the first bad field.
    """
    if not isinstance(pin, dict):
        raise StackError('pin', 'must be a mapping of component to version, got %s' % type_name(pin))
    unknown = sorted(str(key) for key in pin if key not in components)
    if unknown:
        raise StackError('pin', 'unknown component(s) %s; valid components: %s' % (', '.join(unknown), ', '.join(components)))
    result = {}
    for component in COMPONENTS:
        value = pin.get(component)
        if value is None or value == '':
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise StackError('pin.%s' % component, '%r is not a version such as %s' % (value, _VERSION_EXAMPLE[component]))
        text = str(value).strip()
        if not _VERSION_RE[component].fullmatch(text):
            raise StackError('pin.%s' % component, '%r is not a version such as %s' % (text, _VERSION_EXAMPLE[component]))
        result[component] = text
    if 'fabric_manager' in result and 'driver' in result and _branch(result['fabric_manager']) != _branch(result['driver']):
        raise StackError('pin.fabric_manager', '%s is branch %s but pin.driver %s is branch %s; Fabric Manager must be '
                         'branch-matched to the driver' % (result['fabric_manager'], _branch(result['fabric_manager']),
                                                           result['driver'], _branch(result['driver'])))
    return result


def _revisions(revisions):
    result = dict(DEFAULT_REVISIONS)
    for key, value in (revisions or {}).items():
        if key not in DEFAULT_REVISIONS:
            raise StackError('revisions.%s' % key, 'unknown; valid keys: %s' % ', '.join(sorted(DEFAULT_REVISIONS)))
        if value is None or value == '':
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # YAML reads an unquoted -1 or epoch 1 as a number; digits lose nothing
        if not isinstance(value, str):
            raise StackError('revisions.%s' % key, '%s must be a string (quote it)' % shown(value))
        problem = revision_problem(key, value)
        if problem:
            raise StackError('revisions.%s' % key, '%s %s' % (shown(value), problem))
        result[key] = value
    return result


def _package(component, name, version, manager, hold=True):
    """One target package: ``version`` None means any version (the name carries it: kernel, cuda-toolkit-X-Y)."""
    if version is None:
        spec = name
    elif manager == 'apt':
        spec = '%s=%s' % (name, version)
    else:
        spec = '%s-%s' % (name, version)
    return {'component': component, 'name': name, 'version': version, 'spec': spec, 'hold': hold}


def _override(package_versions, component):
    value = (package_versions or {}).get(component)
    if value in (None, ''):
        return None
    value = str(value)
    if not _PACKAGE_VERSION_RE.fullmatch(value):
        raise StackError('package_versions.%s' % component, '%r is not a package version such as 580.65.06-0ubuntu1' % value)
    return value


def _driver_packages(version, manager, flavor, revisions, override):
    branch = _branch(version)
    if manager == 'dnf':
        names = list(_DNF_DRIVER_NAMES) + [_DNF_KMOD[flavor]]
        packages = [_package('driver', name, override or version, manager) for name in names]
        if flavor == 'cuda-drivers':
            packages.insert(0, _package('driver', 'cuda-drivers', override or version, manager))
        return packages
    deb_version = override or version + revisions['driver']
    meta = 'nvidia-driver-%s-%s' % (branch, 'open' if flavor == 'open' else 'server')
    dkms = 'nvidia-dkms-%s%s' % (branch, '-open' if flavor == 'open' else '')
    names = [meta, 'nvidia-kernel-common-%s' % branch, dkms, 'libnvidia-compute-%s' % branch,
             'nvidia-utils-%s' % branch, 'nvidia-compute-utils-%s' % branch]
    packages = [_package('driver', name, deb_version, manager) for name in names]
    if flavor == 'cuda-drivers':
        packages.insert(0, _package('driver', 'cuda-drivers-%s' % branch, version + revisions['driver_meta'], manager))
    return packages


def _kernel_package(version, manager):
    if manager == 'dnf':
        # uname -r of RHEL ends with the architecture; the package is kernel-VERSION-RELEASE.
        release = re.sub(r'\.(x86_64|aarch64|ppc64le|s390x)$', '', version)
        return [_package('kernel', 'kernel', release, manager, hold=False)]
    return [_package('kernel', 'linux-image-%s' % version, None, manager, hold=False)]


def target_packages(pin, manager, flavor='server', revisions=None, package_versions=None):
    """The packages a (validated) pin means for ``manager``: a list of dicts in install order.

    Each item: ``component``, ``name``, ``version`` (apt: the full Debian version; dnf: the upstream
    version, any release; None: any version), ``spec`` (``name=version`` for apt, ``name-version`` for
    dnf, the bare name when the version is in the name) and ``hold`` (hold / version-lock it).
    """
    if manager not in PACKAGE_MANAGERS:
        raise StackError('package_manager', '%r is not one of %s' % (manager, ', '.join(PACKAGE_MANAGERS)))
    if flavor not in DRIVER_FLAVORS:
        raise StackError('driver_flavor', '%r is not one of %s' % (flavor, ', '.join(DRIVER_FLAVORS)))
    revisions = _revisions(revisions)
    packages = []
    for component in COMPONENTS:
        version = pin.get(component)
        if not version:
            continue
        override = _override(package_versions, component)
        if component == 'kernel':
            packages.extend(_kernel_package(version, manager))
        elif component == 'driver':
            packages.extend(_driver_packages(version, manager, flavor, revisions, override))
        elif component == 'fabric_manager':
            if manager == 'dnf':
                packages.append(_package(component, 'nvidia-fabric-manager', override or version, manager))
            else:
                packages.append(_package(component, 'nvidia-fabricmanager-%s' % _branch(version),
                                         override or version + revisions['fabric_manager'], manager))
        elif component == 'container_toolkit':
            ctk_version = override or (version if manager == 'dnf' else version + revisions['container_toolkit'])
            packages.extend(_package(component, name, ctk_version, manager) for name in _CTK_NAMES)
        elif component == 'dcgm':
            major = int(version.split('.', 1)[0])
            name = _DCGM3 if major < 4 else _DCGM4[0]
            if manager == 'dnf':
                dcgm_version = override or version
            else:
                dcgm_version = override or '%s:%s%s' % (revisions['dcgm_epoch'], version, '' if major < 4 else revisions['dcgm'])
            packages.append(_package(component, name, dcgm_version, manager))
        elif component == 'cuda_toolkit':
            major, minor = version.split('.')
            packages.append(_package(component, 'cuda-toolkit-%s-%s' % (major, minor), None, manager, hold=False))
    return packages


def driver_stream(version, flavor):
    """The RHEL ``nvidia-driver`` module stream of a driver version: ``580-dkms`` or ``580-open``."""
    return '%s-%s' % (_branch(version), 'open' if flavor == 'open' else 'dkms')


def installed_from_dpkg(text):
    """``({name: [version]}, held_names)`` from ``dpkg-query -W -f DPKG_QUERY_FORMAT``.

    Every package dpkg has files of counts, half-installed and unpacked ones included (a stray branch
    left by a failed install must be seen); not-installed and config-files rows do not.
    """
    installed = {}
    held = set()
    for lineno, line in enumerate((text or '').splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split('\t')
        if len(fields) != 3 or not fields[0].strip() or len(fields[2].strip()) < 2:
            raise PackageParseError('dpkg-query output line %d: expected package, version and status: %r' % (lineno, line))
        name, version, abbrev = fields[0].strip(), fields[1].strip(), fields[2].strip()
        if abbrev[1] in ('n', 'c') or not version:
            continue
        installed[name] = [version]
        if abbrev[0] == 'h':
            held.add(name)
    return installed, held


def installed_from_rpm(text):
    """``{name: [E:V-R, ...]}`` from ``rpm -qa --qf '%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\t%{ARCH}\\n'``.

    Every installed instance is kept (RHEL keeps several kernels)."""
    installed = {}
    for line in (text or '').splitlines():
        if not line.strip():
            continue
        entry = parse_rpm_query(line + '\n')
        for name, row in entry.items():
            installed.setdefault(name, []).append(row['version'])
    return installed


def parse_apt_cache_madison(text):
    """``{name: [version, ...]}`` from ``apt-cache madison NAME...`` (``name | version | source`` rows)."""
    result = {}
    for lineno, line in enumerate((text or '').splitlines(), 1):
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split('|')]
        if len(fields) != 3 or not fields[0] or not fields[1]:
            raise PackageParseError('apt-cache madison output line %d: expected "name | version | source": %r' % (lineno, line))
        versions = result.setdefault(fields[0], [])
        if fields[1] not in versions:
            versions.append(fields[1])
    return result


def available_from_repoquery(text):
    """``{name: [E:V-R, ...]}`` from ``dnf repoquery`` NEVRA lines."""
    result = {}
    for item in parse_dnf_repoquery(text):
        evr = '%s%s-%s' % ('%d:' % item['epoch'] if item['epoch'] else '', item['version'], item['release'])
        versions = result.setdefault(item['name'], [])
        if evr not in versions:
            versions.append(evr)
    return result


_LOCK_RE = re.compile(r'^(!)?(.+?)-(?:([0-9]+):)?([^-:]+)-([^-]+?)(?:\.\*|\.[a-z0-9_]+)?$')


def parse_versionlock_list(text):
    """``{name: E:V-R}`` locked by ``dnf versionlock list`` (``name-E:V-R.*`` lines; ``!`` excludes skipped)."""
    result = {}
    for line in (text or '').splitlines():
        line = line.strip()
        if not line or line.startswith('#') or ' ' in line:
            continue
        match = _LOCK_RE.match(line)
        if not match or match.group(1):
            continue
        name, epoch, version, release = match.group(2), match.group(3), match.group(4), match.group(5)
        result[name] = '%s%s-%s' % (epoch + ':' if epoch and epoch != '0' else '', version, release)
    return result


def _scheme(manager):
    return 'dpkg' if manager == 'apt' else 'rpm'


def _matching(versions, wanted, scheme):
    """The first of ``versions`` that satisfies ``wanted`` (None: any), else None."""
    for version in versions or []:
        if wanted is None:
            return version
        try:
            if matches_pin(version, wanted, scheme):
                return version
        except VersionError:
            continue
    return None


def _current(versions):
    return versions[-1] if versions else None


# The packages of each kernel-module flavor of one driver branch (``%s``: the branch), NVIDIA's and Ubuntu's names: a converge
# to one flavor removes the other's, so that one driver remains (their DKMS packages both build a module named nvidia).
_APT_FLAVOR_PACKAGES = {
    'proprietary': ('nvidia-dkms-%s', 'nvidia-dkms-%s-server', 'nvidia-kernel-source-%s', 'nvidia-kernel-source-%s-server',
                    'nvidia-driver-%s', 'nvidia-driver-%s-server', 'cuda-drivers-%s'),
    'open': ('nvidia-dkms-%s-open', 'nvidia-dkms-%s-server-open', 'nvidia-kernel-source-%s-open', 'nvidia-kernel-source-%s-server-open',
             'nvidia-driver-%s-open', 'nvidia-driver-%s-server-open', 'nvidia-open-%s', 'nvidia-open'),
}
_DNF_FLAVOR_PACKAGES = {
    'proprietary': ('kmod-nvidia-latest-dkms', 'cuda-drivers', 'cuda-drivers-%s'),
    'open': ('kmod-nvidia-open-dkms', 'nvidia-open', 'nvidia-open-%s'),
}


def other_flavor_packages(branch, manager, flavor):
    """The package names of the other kernel-module flavor than the one driver ``flavor`` installs (``_drift.MODULE_FLAVOR``:
    ``cuda-drivers`` is NVIDIA's proprietary meta package since R560, ``nvidia-open`` the open one), on driver ``branch``."""
    other = 'proprietary' if MODULE_FLAVOR[flavor] == 'open' else 'open'
    table = _APT_FLAVOR_PACKAGES if manager == 'apt' else _DNF_FLAVOR_PACKAGES
    return set((pattern % branch) if '%s' in pattern else pattern for pattern in table[other])


def _strays(pin, manager, installed, targets, purge_other_branches, flavor='server'):
    """Installed packages that must go: other driver / Fabric Manager branches, the other kernel-module flavor of the pinned
    branch (whatever ``purge_other_branches`` says: two flavors are two drivers), the other DCGM family."""
    names = set(target['name'] for target in targets)
    strays = []
    driver = pin.get('driver')
    fabric_manager = pin.get('fabric_manager')
    other_flavor = other_flavor_packages(_branch(driver), manager, flavor) if driver else set()
    for name in sorted(installed):
        if name in names:
            continue
        reason = component = None
        if manager == 'apt':
            match = _APT_DRIVER_BRANCH_RE.match(name)
            fm_match = _APT_FM_RE.match(name)
            if driver and purge_other_branches and match and not fm_match and match.group(1) != _branch(driver):
                reason, component = 'driver branch %s, not %s' % (match.group(1), _branch(driver)), 'driver'
            elif fabric_manager and fm_match and fm_match.group(1) != _branch(fabric_manager):
                reason, component = 'Fabric Manager branch %s, not %s' % (fm_match.group(1), _branch(fabric_manager)), 'fabric_manager'
        elif driver and purge_other_branches and _DNF_DRIVER_OTHER_RE.match(name):
            reason, component = 'another driver source than branch %s' % _branch(driver), 'driver'
        if reason is None and name in other_flavor:
            reason, component = 'the %s kernel module, not the %s one of driver flavor %s' % (
                'open' if MODULE_FLAVOR[flavor] == 'proprietary' else 'proprietary', MODULE_FLAVOR[flavor], flavor), 'driver'
        if pin.get('dcgm') and reason is None:
            major = int(pin['dcgm'].split('.', 1)[0])
            if (major < 4 and name in _DCGM4) or (major >= 4 and name == _DCGM3):
                reason, component = 'DCGM %s family, not %s' % ('4' if major < 4 else '3', major), 'dcgm'
        if reason:
            strays.append({'name': name, 'version': _current(installed[name]), 'reason': reason, 'component': component})
    return strays


def plan(pin, manager, installed, flavor='server', revisions=None, package_versions=None, available=None,
         held=None, locks=None, module_list=None, purge_other_branches=True):
    """What must change on a node to reach ``pin``.

    ``installed``: ``{name: [version, ...]}``; ``available``: the same for the repository (None: not
    checked); ``held``: names apt holds; ``locks``: ``{name: E:V-R}`` from ``dnf versionlock list``;
    ``module_list``: ``dnf module list nvidia-driver`` output (dnf only).

    Returns ``packages`` (every target with ``current`` and ``changed``), ``changes`` (the specs to
    install), ``strays`` (``name``/``version``/``reason``/``component`` to remove), ``missing`` (targets the repository
    lacks, with the pin field), ``release`` (held / locked names that must be released first), ``hold``
    (names to hold / lock after the install), ``stream`` (dnf: ``enabled``, ``target``, ``change``),
    ``current_pin`` (the installed versions as a pin), ``changed`` and ``changed_components`` (the pin
    components whose packages are installed or removed).
    """
    pin = validate_pin(pin)
    targets = target_packages(pin, manager, flavor, revisions, package_versions)
    scheme = _scheme(manager)
    held = set(held or ())
    locks = dict(locks or {})
    packages = []
    for target in targets:
        versions = installed.get(target['name'])
        match = _matching(versions, target['version'], scheme)
        item = dict(target)
        item['current'] = match or _current(versions)
        item['changed'] = match is None
        item['held'] = target['name'] in held or (target['name'] in locks and (
            target['version'] is None or _matching([locks[target['name']]], target['version'], scheme) is not None))
        packages.append(item)
    strays = _strays(pin, manager, installed, targets, purge_other_branches, flavor)
    missing = []
    if available is not None:
        for target in targets:
            if _matching(available.get(target['name']), target['version'], scheme) is None:
                missing.append({'field': 'pin.%s' % target['component'], 'spec': target['spec']})
    stream = None
    if manager == 'dnf' and 'driver' in pin:
        enabled = None
        for row in parse_dnf_module_list(module_list or ''):
            if row['name'] == 'nvidia-driver' and row['enabled']:
                enabled = row['stream']
        target = driver_stream(pin['driver'], flavor)
        stream = {'name': 'nvidia-driver', 'enabled': enabled, 'target': target, 'change': enabled != target}
    changed_names = set(item['name'] for item in packages if item['changed'])
    stray_names = [stray['name'] for stray in strays]
    if manager == 'apt':
        release = sorted(name for name in held if name in changed_names or name in stray_names)
    else:
        # A lock hides every other version from dnf: release those of packages that move, go, or are locked elsewhere.
        locked_elsewhere = set(item['name'] for item in packages if not item['held'])
        release = sorted(name for name in locks if name in changed_names or name in stray_names or name in locked_elsewhere)
    hold = [item['name'] for item in packages if item['hold'] and (item['changed'] or not item['held'])]
    return {
        'package_manager': manager,
        'packages': packages,
        'changes': [item['spec'] for item in packages if item['changed']],
        'strays': strays,
        'missing': missing,
        'release': release,
        'hold': hold,
        'stream': stream,
        'current_pin': pin_from_installed(installed, manager),
        'changed': bool(changed_names or strays or hold or (stream and stream['change'])),
        # The components whose packages the run installs or removes (a caller converging several at once, gpu_stack,
        # tells each component's follow-up steps from this: the DKMS build, the reboot).
        'changed_components': sorted(set(item['component'] for item in packages if item['changed'])
                                     | set(stray['component'] for stray in strays)),
    }


def _upstream(version):
    version = re.sub(r'^[0-9]+:', '', version or '')
    return re.sub(r'-[^-]*$', '', version)


def pin_from_installed(installed, manager):
    """The installed stack as a pin (driver, fabric_manager, container_toolkit, dcgm): the rollback target
    of a node that has no recorded pin yet."""
    result = {}

    def first(pattern):
        for name in sorted(installed):
            if re.match(pattern, name) and installed[name]:
                return _upstream(_current(installed[name]))
        return None

    if manager == 'apt':
        candidates = (('driver', r'^libnvidia-compute-[0-9]+$'), ('fabric_manager', r'^nvidia-fabricmanager-[0-9]+$'))
    else:
        candidates = (('driver', r'^nvidia-driver-libs$'), ('fabric_manager', r'^nvidia-fabric-manager$'))
    candidates += (('container_toolkit', r'^nvidia-container-toolkit$'), ('dcgm', r'^datacenter-gpu-manager(-4-core)?$'))
    for component, pattern in candidates:
        version = first(pattern)
        if version:
            result[component] = version
    return result


def named(message, name):
    """A message about the pin (``pin.driver: ...``) naming the variable it came from (``gpu_stack_pin.driver: ...``)."""
    return re.sub(r'^pin\b', name, message) if name and name != 'pin' else message


def _touches_driver(pin, driver_source):
    """The pin field that would install a driver (or, beside a driver no package manages, a kernel it was not built for)."""
    pin = pin if isinstance(pin, dict) else {}
    if pin.get('driver'):
        return 'driver'
    if driver_source in ('runfile', 'unowned') and pin.get('kernel'):
        return 'kernel'
    return ''


def driver_source_plan(pin, driver_source, evidence='', takeover=False, name='pin', takeover_name='driver_takeover'):
    """What a converge to ``pin`` may do on a node whose loaded driver comes from ``driver_source`` (the facts' value, its
    ``evidence`` the paths that decided it): ``{'action': 'proceed'|'takeover'|'refuse', 'reason': str, 'field': str}``.

    One driver source per node, the one rule for ``gpu_stack``, ``nvidia_driver``, ``package_pin`` (through ``package_plan``)
    and ``node_upgrade``'s pre-check:

    * ``container`` (the GPU Operator's driver container): a pinned driver is refused; ``takeover`` asked on such a node is
      a bad combination, refused naming ``takeover_name`` (a take-over removes a runfile driver, never the operator's);
    * ``runfile`` (NVIDIA's ``.run`` installer): a pinned driver, or a pinned kernel the runfile's module was not built for,
      is refused, unless ``takeover`` and the pin has a driver: then ``takeover`` (remove it with :data:`RUNFILE_UNINSTALLER`,
      then the packages);
    * ``unowned`` (a loaded driver no package, operator or installer log claims): refused, ``takeover`` or not (no
      uninstaller knows what that tree installed: remove it first);
    * ``host_package`` or none (no driver loaded): proceed (``takeover`` has nothing to take over).

    Pins that install no driver (and no kernel beside a foreign driver) proceed on every source but the bad combination.
    """
    takeover = bool(takeover)
    source = driver_source if driver_source not in ('', None) else None
    field = _touches_driver(pin, source)
    where = '%s=%s%s' % ('driver_source', source, (': %s' % evidence) if evidence else '')
    label = '%s.%s: ' % (name, field) if field else ''
    if source == 'container':
        if takeover:
            return {'action': 'refuse', 'field': takeover_name, 'reason': (
                "%s=true on a node whose driver the GPU Operator's driver container manages (%s): a take-over removes a runfile "
                "driver only; converge this node through the GPU Operator and leave %s false for it" % (takeover_name, where, takeover_name))}
        if field == 'driver':
            return {'action': 'refuse', 'field': '%s.driver' % name, 'reason': (
                "%s.driver: this node's driver comes from the GPU Operator's driver container (driver_source=container); "
                "converge it through the GPU Operator, never a host driver as well" % name)}
        return {'action': 'proceed', 'field': '', 'reason': ''}
    if not field or source in (None, 'host_package'):
        return {'action': 'proceed', 'field': '', 'reason': ''}
    what = ('installing the pinned driver packages would put a second driver on the node' if field == 'driver'
            else 'the pinned kernel would boot without a driver (the loaded one was not installed by a package that builds it for a new kernel)')
    if source == 'runfile':
        if takeover and field == 'kernel':
            return {'action': 'refuse', 'field': '%s.driver' % name, 'reason': (
                "%s.driver: %s=true needs a pinned driver to install in place of NVIDIA's runfile driver (%s); this pin has a kernel "
                "and no driver: add the driver to the pin, or leave %s false" % (name, takeover_name, where, takeover_name))}
        if takeover and RUNFILE_UNINSTALLER not in (evidence or ''):
            return {'action': 'refuse', 'field': takeover_name, 'reason': (
                "%s%s=true cannot take this node over: NVIDIA's runfile driver is there (%s) but its uninstaller %s is not "
                "(an earlier nvidia-uninstall or a hand removal left the rest); remove what is left of the runfile driver by hand, "
                "then converge" % (label, takeover_name, where, RUNFILE_UNINSTALLER))}
        if takeover:
            return {'action': 'takeover', 'field': field, 'reason': (
                "taking the node over from NVIDIA's runfile driver (%s): %s --silent removes it, then the pinned packages are "
                "installed" % (where, RUNFILE_UNINSTALLER))}
        return {'action': 'refuse', 'field': '%s.%s' % (name, field), 'reason': (
            "%sthe driver came from NVIDIA's runfile installer (%s): %s; upgrade it with the runfile, or set %s=true to remove "
            "it with nvidia-uninstall and install the packages" % (label, where, what, takeover_name))}
    if source == 'unowned':
        if takeover:
            return {'action': 'refuse', 'field': takeover_name, 'reason': (
                "%s%s=true cannot take this node over: its loaded driver is one no package, GPU Operator or installer log claims "
                "(%s), and no uninstaller knows what that driver tree installed; remove the tree (and whatever mounts it) "
                "first, then converge" % (label, takeover_name, where))}
        return {'action': 'refuse', 'field': '%s.%s' % (name, field), 'reason': (
            "%sthe loaded driver is one no package, GPU Operator or installer log claims (%s): %s; remove that driver tree "
            "(and whatever mounts it) first, or keep this node off the package pin (%s=true does not apply: no uninstaller knows what "
            "that tree installed)" % (label, where, what, takeover_name))}
    return {'action': 'refuse', 'field': '%s.%s' % (name, field), 'reason': (
        '%sdriver_source=%s is not a driver source this collection knows (host_package, container, runfile, unowned): '
        'refused, never a guess' % (label, shown(source)))}


def takeover_plan(decided, driver_source, evidence='', uninstaller=RUNFILE_UNINSTALLER, executable=True, takeover_name='driver_takeover'):
    """The take-over :func:`driver_source_plan` decided (``decided``), as the converge carries it out: ``(takeover, refusal)``.

    ``takeover``: ``{'from', 'evidence', 'reason', 'argv'}`` (NVIDIA's uninstaller with :data:`RUNFILE_UNINSTALL_ARGS`, an
    argument list) or None when there is nothing to take over; ``refusal``: why it cannot start ('' when it can): the
    uninstaller is not an ``executable`` file on the node."""
    if decided.get('action') != 'takeover':
        return None, ''
    if not executable:
        return None, ('%s=true: the take-over needs NVIDIA\'s uninstaller, and %s is not an executable file on the node '
                      '(driver_source=%s%s); remove the runfile driver by hand, or leave %s false' % (
                          takeover_name, uninstaller, driver_source, (': %s' % evidence) if evidence else '', takeover_name))
    return {'from': driver_source, 'evidence': evidence or '', 'reason': decided['reason'],
            'argv': [uninstaller] + list(RUNFILE_UNINSTALL_ARGS)}, ''


def driver_source_problem(pin, driver_source, name='pin', evidence='', takeover=False, takeover_name='driver_takeover'):
    """Why a pin cannot go to a node whose driver comes from ``driver_source`` ('' when it can): :func:`driver_source_plan`'s
    refusal, in one line."""
    decided = driver_source_plan(pin, driver_source, evidence=evidence, takeover=takeover, name=name, takeover_name=takeover_name)
    return decided['reason'] if decided['action'] == 'refuse' else ''


def missing_problem(missing, name='pin'):
    """The message for the target versions the repository lacks (``missing`` of :func:`plan`), '' when none."""
    if not missing:
        return ''
    fields = []
    for entry in missing:
        field = named(str(entry.get('field') or ''), name)
        if field not in fields:
            fields.append(field)
    return 'the repository has no %s (fields: %s)' % (', no '.join(str(entry.get('spec')) for entry in missing), ', '.join(fields))
