# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parsers for package listings and NVIDIA tool version banners.

Machine-readable listings (what the modules run):

* ``dpkg-query -W -f DPKG_QUERY_FORMAT`` -> :func:`parse_dpkg_query`
* ``rpm -q --qf RPM_QUERY_FORMAT`` -> :func:`parse_rpm_query`

Listings package_plan reads on RHEL:

* ``dnf repoquery`` NEVRA lines -> :func:`parse_dnf_repoquery`
* ``dnf module list`` tables -> :func:`parse_dnf_module_list`

(Readers of human listings that no module runs -- ``dpkg -l``, ``rpm -qa``, apt's history log, ``apt-cache
policy`` -- live with the tests that read captured real outputs: ``tests/unit/listing_readers.py``.)

Version banners: ``nvidia-ctk --version``, ``nvidia-container-cli --version``,
``nv-fabricmanager --version`` and ``nvcc --version``.

Malformed input raises :class:`PackageParseError` naming the line number and
line.  Stdlib only; no Ansible imports.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._versions import VersionError, rpm_compare

__all__ = [
    'DPKG_QUERY_FORMAT',
    'PackageParseError',
    'RPM_QUERY_FORMAT',
    'parse_dnf_module_list',
    'parse_dnf_repoquery',
    'parse_dpkg_query',
    'parse_fabricmanager_version',
    'parse_nvcc_version',
    'parse_nvidia_container_cli_version',
    'parse_nvidia_ctk_version',
    'parse_rpm_query',
]

DPKG_QUERY_FORMAT = '${Package}\t${Version}\t${db:Status-Abbrev}\n'
RPM_QUERY_FORMAT = '%{NAME}\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\t%{ARCH}\n'

# rpm architecture names that can end a NEVRA.
RPM_ARCHES = frozenset((
    'noarch', 'x86_64', 'i386', 'i486', 'i586', 'i686', 'athlon', 'geode', 'ia32e', 'amd64',
    'aarch64', 'armv7hl', 'armv7hnl', 'armv7l', 'armv6hl', 'armv6l', 'armv5tel', 'armhfp',
    'ppc', 'ppc64', 'ppc64le', 'ppc64p7', 's390', 's390x', 'riscv64', 'loongarch64', 'ia64',
    'sparc', 'sparcv9', 'sparc64', 'alpha', 'mips', 'mipsel', 'mips64', 'mips64el', 'src', 'nosrc',
))

# dpkg status abbreviations: desired / status / error flag (old and new letters).
_DPKG_WANT = 'uihrp'
_DPKG_STATUS = 'nicuUfFhHwWtT'
_DPKG_EFLAG = ' hHrRxX'

_RPM_NAME_RE = re.compile(r'^[A-Za-z0-9_.+-]+$')
_RPM_VERREL_RE = re.compile(r'^[A-Za-z0-9._+~^]+$')

# Chatter dnf/yum print around their real output.
_DNF_CHATTER = [re.compile(pattern) for pattern in (
    r'^Updating Subscription Management repositories\.?$',
    r'^Unable to read consumer identity',
    r'^This system is (not registered|receiving updates|registered)',
    r'^Last metadata expiration check:',
    r'^Repository \S+ is listed more than once',
    r'^Loaded plugins:',
    r'^Loading mirror speeds',
    r'^Determining fastest mirrors',
    r'^Waiting for process with pid',
    r'^Failed to set locale',
    r'^Updating and loading repositories:$',
    r'^Repositories loaded\.$',
    r'\|\s*[0-9.]+\s*[kMGT]?i?B\s*(\|\s*)?[0-9]+[:m][0-9]+s?\s*$',
)]


class PackageParseError(ValueError):
    """Raised when package-manager or tool output cannot be parsed."""


def _text(text, what):
    if isinstance(text, bytes):
        text = text.decode('utf-8', 'replace')
    if not isinstance(text, str):
        raise PackageParseError('%s: expected text output, got %s' % (what, type(text).__name__))
    return text


def _error(what, lineno, line, reason):
    return PackageParseError('%s: line %d: %s: %r' % (what, lineno, reason, line))


def _is_dnf_chatter(line):
    stripped = line.strip()
    return any(pattern.search(stripped) for pattern in _DNF_CHATTER)


def _valid_dpkg_status(abbrev):
    if len(abbrev) not in (2, 3):
        return False
    if abbrev[0] not in _DPKG_WANT or abbrev[1] not in _DPKG_STATUS:
        return False
    return len(abbrev) == 2 or abbrev[2] in _DPKG_EFLAG


# dpkg's package states between not installed and installed (the second letter of the status abbreviation): unpacked,
# half-configured, half-installed, triggers awaited, triggers pending - what an interrupted install leaves.
DPKG_PARTIAL_STATES = 'UFHWt'


def parse_dpkg_query(text, partial=False):
    """Parse ``dpkg-query -W -f DPKG_QUERY_FORMAT`` output.

    Returns ``{name: {'version': str, 'held': bool, 'status': str}}`` for the
    packages whose status abbreviation has ``i`` (installed) as second
    character (``ii``, ``hi``, ``iiR`` ...); ``held`` is True when the selection
    is *hold* (first character ``h``).  ``status`` is the abbreviation without
    trailing blanks.  Packages that are not installed (``un``, ``rc``, ``iU``
    ...) are left out.  If the same name occurs twice (a Multi-Arch: same
    package installed for two architectures), the first installed line wins.
    Lines that do not split into three tab-separated fields raise
    :class:`PackageParseError`.  ``partial``: also the packages an interrupted
    install left between states (:data:`DPKG_PARTIAL_STATES`: ``iU``, ``iF`` ...).
    """
    what = 'dpkg-query output'
    text = _text(text, what)
    result = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split('\t')
        if len(fields) != 3:
            raise _error(what, lineno, line, 'expected 3 tab-separated fields (package, version, status), got %d' % len(fields))
        name = fields[0].strip()
        version = fields[1].strip()
        abbrev = fields[2].rstrip()
        if not name or any(ch.isspace() for ch in name):
            raise _error(what, lineno, line, 'invalid package name')
        if not _valid_dpkg_status(abbrev):
            raise _error(what, lineno, line, 'invalid status abbreviation %r' % abbrev)
        if abbrev[1] != 'i' and not (partial and abbrev[1] in DPKG_PARTIAL_STATES):
            continue
        if not version or any(ch.isspace() for ch in version):
            raise _error(what, lineno, line, 'installed package without a valid version')
        if name in result:
            continue
        result[name] = {'version': version, 'held': abbrev[0] == 'h', 'status': abbrev}
    return result


def _evr(epoch, version, release):
    prefix = '%d:' % epoch if epoch else ''
    return prefix + version + ('-' + release if release is not None else '')


def _keep_highest(result, name, entry, evr):
    """Store entry under name unless an entry with a higher or equal EVR is already there."""
    current = result.get(name)
    if current is None:
        result[name] = entry
        return
    try:
        newer = rpm_compare(evr, current['_evr']) > 0
    except VersionError:
        newer = False
    if newer:
        result[name] = entry


def _strip_private(result):
    for entry in result.values():
        entry.pop('_evr', None)
    return result


def parse_rpm_query(text):
    """Parse ``rpm -q --qf RPM_QUERY_FORMAT`` output.

    Returns ``{name: {'version': 'E:V-R' (epoch omitted when 0), 'arch': str|None}}``.
    ``package X is not installed`` lines are ignored; ``(none)`` arch (gpg-pubkey)
    becomes None.  When a name occurs more than once (several kernels, i686 and
    x86_64), the highest version is kept.
    """
    what = 'rpm query output'
    text = _text(text, what)
    result = {}
    evr_re = re.compile(r'^([0-9]+):([^:\s]+)-([^-\s]+)$')
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if re.match(r'^package \S+ is not installed$', line.strip()):
            continue
        fields = line.split('\t')
        if len(fields) != 3:
            raise _error(what, lineno, line, 'expected 3 tab-separated fields (name, epoch:version-release, arch), got %d' % len(fields))
        name, evr_text, arch = (field.strip() for field in fields)
        if not name or not _RPM_NAME_RE.match(name):
            raise _error(what, lineno, line, 'invalid package name')
        match = evr_re.match(evr_text)
        if not match or not _RPM_VERREL_RE.match(match.group(2)) or not _RPM_VERREL_RE.match(match.group(3)):
            raise _error(what, lineno, line, 'invalid EPOCH:VERSION-RELEASE %r' % evr_text)
        if not arch:
            raise _error(what, lineno, line, 'empty architecture')
        evr = _evr(int(match.group(1)), match.group(2), match.group(3))
        entry = {'version': evr, 'arch': None if arch == '(none)' else arch, '_evr': evr}
        _keep_highest(result, name, entry, evr)
    return _strip_private(result)


def _parse_nevra(token, what, lineno, line):
    """Split ``name-[epoch:]version-release[.arch]`` (or ``epoch:name-version-release.arch``)."""
    if not token or any(ch.isspace() for ch in token):
        raise _error(what, lineno, line, 'not a NEVRA')
    parts = token.rsplit('-', 2)
    if len(parts) != 3:
        raise _error(what, lineno, line, 'not a NEVRA (need name-version-release)')
    name, version, rel_arch = parts
    arch = None
    release = rel_arch
    if '.' in rel_arch:
        head, tail = rel_arch.rsplit('.', 1)
        if tail in RPM_ARCHES:
            release, arch = head, tail
    epoch = None
    if ':' in version:
        epoch_text, version = version.split(':', 1)
        if not epoch_text.isdigit():
            raise _error(what, lineno, line, 'invalid epoch %r' % epoch_text)
        epoch = int(epoch_text)
    lead = re.match(r'^([0-9]+):(.+)$', name)
    if lead:
        if epoch is not None:
            raise _error(what, lineno, line, 'two epochs')
        epoch = int(lead.group(1))
        name = lead.group(2)
    if not name or not _RPM_NAME_RE.match(name):
        raise _error(what, lineno, line, 'invalid package name %r' % name)
    if not _RPM_VERREL_RE.match(version):
        raise _error(what, lineno, line, 'invalid version %r' % version)
    if not release or not _RPM_VERREL_RE.match(release):
        raise _error(what, lineno, line, 'invalid release %r' % release)
    return name, {'version': version, 'release': release, 'epoch': epoch, 'arch': arch}


def parse_dnf_repoquery(text):
    """Parse ``dnf repoquery`` output: a list of NEVRA dicts in output order.

    Each item is ``{'name', 'epoch', 'version', 'release', 'arch'}`` (as
    the ``rpm -qa`` reader's values plus ``name``).  dnf/subscription-manager chatter
    (``Updating Subscription Management repositories.``, ``Last metadata
    expiration check: ...``, download progress lines) is skipped.
    """
    what = 'dnf repoquery output'
    text = _text(text, what)
    result = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or _is_dnf_chatter(line):
            continue
        name, entry = _parse_nevra(line.strip(), what, lineno, line)
        item = {'name': name}
        item.update(entry)
        result.append(item)
    return result


_MODULE_HEADER_RE = re.compile(r'^Name(\s+)Stream(\s+)Profiles(\s+)Summary\s*$')
_MARKER_RE = re.compile(r'\s*\[([a-z])\]')


def _markers(value):
    return _MARKER_RE.findall(value), _MARKER_RE.sub('', value).strip()


def parse_dnf_module_list(text):
    """Parse ``dnf module list [NAME]`` tables.

    Returns a list (output order) of ``{'name', 'stream', 'default', 'enabled',
    'disabled', 'installed', 'profiles', 'default_profiles', 'installed_profiles',
    'summary', 'repo'}``.  Markers: ``[d]`` default, ``[e]`` enabled, ``[x]``
    disabled, ``[i]`` installed (a stream counts as installed when it or one of
    its profiles carries ``[i]``).  ``repo`` is the line printed above the
    table header.  dnf chatter and the ``Hint:`` legend are skipped.
    """
    what = 'dnf module list output'
    text = _text(text, what)
    result = []
    columns = None
    repo = None
    pending = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            columns = None
            continue
        if line.startswith('Hint:'):
            columns = None
            continue
        header = _MODULE_HEADER_RE.match(line)
        if header:
            for pend_lineno, pend_line in pending[:-1]:
                if not _is_dnf_chatter(pend_line):
                    raise _error(what, pend_lineno, pend_line, 'unexpected line before the module table')
            repo = pending[-1][1].strip() if pending and not _is_dnf_chatter(pending[-1][1]) else None
            pending = []
            columns = (line.index('Stream'), line.index('Profiles'), line.index('Summary'))
            continue
        if columns is None:
            pending.append((lineno, line))
            continue
        stream_at, profiles_at, summary_at = columns
        if not line[:summary_at].strip() and result:
            result[-1]['summary'] = (result[-1]['summary'] + ' ' + line.strip()).strip()
            continue
        for boundary in columns:
            if len(line) > boundary and line[boundary - 1] != ' ':
                raise _error(what, lineno, line, 'row does not line up with the table header')
        name = line[:stream_at].strip()
        stream_text = line[stream_at:profiles_at].strip()
        profiles_text = line[profiles_at:summary_at].strip()
        summary = line[summary_at:].strip()
        if not name or ' ' in name or not stream_text:
            raise _error(what, lineno, line, 'module row without name or stream')
        stream_marks, stream = _markers(stream_text)
        if not stream or ' ' in stream:
            raise _error(what, lineno, line, 'invalid stream %r' % stream_text)
        profiles = []
        default_profiles = []
        installed_profiles = []
        for item in profiles_text.split(','):
            if not item.strip():
                continue
            marks, profile = _markers(item)
            if not profile or ' ' in profile:
                raise _error(what, lineno, line, 'invalid profile %r' % item.strip())
            profiles.append(profile)
            if 'd' in marks:
                default_profiles.append(profile)
            if 'i' in marks:
                installed_profiles.append(profile)
        result.append({
            'name': name,
            'stream': stream,
            'default': 'd' in stream_marks,
            'enabled': 'e' in stream_marks,
            'disabled': 'x' in stream_marks,
            'installed': 'i' in stream_marks or bool(installed_profiles),
            'profiles': profiles,
            'default_profiles': default_profiles,
            'installed_profiles': installed_profiles,
            'summary': summary,
            'repo': repo,
        })
    for pend_lineno, pend_line in pending:
        if not _is_dnf_chatter(pend_line):
            raise _error(what, pend_lineno, pend_line, 'no module table header found for this line')
    return result


def parse_nvidia_ctk_version(text):
    """``nvidia-ctk --version`` -> ``'1.12.0'`` (None when the banner is absent)."""
    text = _text(text, 'nvidia-ctk --version output')
    match = re.search(r'NVIDIA Container Toolkit CLI version\s+(\S+)', text)
    return match.group(1) if match else None


def parse_nvidia_container_cli_version(text):
    """``nvidia-container-cli --version`` -> ``{'cli': str|None, 'lib': str|None}``.

    Releases since 1.4 print ``cli-version:`` and ``lib-version:``; older ones
    print a single ``version:`` line, which is the CLI's own (compiled-in)
    version -- the run-time library version is then unknown (``lib`` None).
    """
    text = _text(text, 'nvidia-container-cli --version output')
    found = {}
    for match in re.finditer(r'^\s*(cli-version|lib-version|version):\s*(\S+)\s*$', text, re.MULTILINE):
        found.setdefault(match.group(1), match.group(2))
    return {'cli': found.get('cli-version', found.get('version')), 'lib': found.get('lib-version')}


def parse_fabricmanager_version(text):
    """``nv-fabricmanager --version`` (``Fabric Manager version is : 550.127.05``) -> ``'550.127.05'``."""
    text = _text(text, 'nv-fabricmanager --version output')
    match = re.search(r'Fabric Manager version is\s*:\s*([0-9][0-9A-Za-z.+~-]*)', text)
    return match.group(1) if match else None


def parse_nvcc_version(text):
    """``nvcc --version`` -> the full toolkit version (``12.4.131``), else the release (``12.4``).

    CUDA 5.0 printed ``release 5.0, V0.2.1221``; a ``V`` number that does not
    start with the release is ignored and the release is returned.
    """
    text = _text(text, 'nvcc --version output')
    match = re.search(r'release\s+([0-9]+(?:\.[0-9]+)*)\s*(?:,\s*V([0-9]+(?:\.[0-9]+)*))?', text)
    if not match:
        return None
    release, full = match.group(1), match.group(2)
    if full and (full == release or full.startswith(release + '.')):
        return full
    return release
