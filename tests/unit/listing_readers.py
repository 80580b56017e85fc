# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Readers of human package listings that no module runs, used by tests on captured real outputs.

Moved out of ``plugins/module_utils/_packages.py`` (nothing in the collection calls them):

* ``dpkg -l`` tables -> :func:`parse_dpkg_l` (columns may be truncated)
* ``rpm -qa`` NEVRA lines -> :func:`parse_rpm_qa`
* ``/var/log/apt/history.log`` -> :func:`parse_apt_history`
* ``apt-cache policy PKG...`` -> :func:`parse_apt_cache_policy` (run it with ``LC_ALL=C``)
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._packages import (  # noqa: F401  pylint: disable=unused-import
    PackageParseError,
    _error,
    _evr,
    _keep_highest,
    _parse_nevra,
    _strip_private,
    _text,
    _valid_dpkg_status,
)


# Debian architecture names as printed in the dpkg -l Architecture column.
DPKG_ARCHES = frozenset((
    '<none>', 'all', 'any', 'amd64', 'arm64', 'armel', 'armhf', 'i386', 'ia64', 'alpha', 'hppa', 'm68k',
    'loong64', 'mips', 'mipsel', 'mips64', 'mips64el', 'powerpc', 'powerpcspe', 'ppc64', 'ppc64el',
    'riscv64', 's390', 's390x', 'sh4', 'sparc', 'sparc64', 'x32', 'hurd-i386', 'hurd-amd64',
    'kfreebsd-amd64', 'kfreebsd-i386',
))


def parse_rpm_qa(text):
    """Parse ``rpm -qa`` NEVRA lines (parsed from the right).

    Returns ``{name: {'version', 'release', 'epoch', 'arch'}}``.  ``epoch`` is an
    int when the line shows one (``kmod-nvidia-latest-dkms-3:595.71.05-1.el9.x86_64``)
    and None when it does not (plain ``rpm -qa`` never prints it).  ``arch`` is
    None when the last dot-suffix is not a known rpm architecture (``gpg-pubkey``
    lines, ``%{NVR}`` output).  Duplicate names keep the highest version.
    """
    what = 'rpm -qa output'
    text = _text(text, what)
    result = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, entry = _parse_nevra(line.strip(), what, lineno, line)
        entry['_evr'] = _evr(entry['epoch'] or 0, entry['version'], entry['release'])
        _keep_highest(result, name, entry, entry['_evr'])
    return _strip_private(result)


def _ruler_widths(line):
    """Column widths from a dpkg -l ruler ``+++-====-====-...``."""
    groups = line[4:].rstrip().split('-')
    if len(groups) < 3 or any(not group or set(group) != {'='} for group in groups):
        return None
    return [len(group) for group in groups]


def _aligned_widths(rows, with_arch):
    """Infer dpkg -l column widths from the positions of the fields of aligned rows."""
    starts = None
    count = 3 if with_arch else 2  # fixed-width columns before the description
    for line in rows:
        # skip the status token; keep the starts of the columns and of the description
        positions = [match.start() for match in re.finditer(r'\S+', line)][1:count + 2]
        if len(positions) < count + 1:
            continue
        if starts is None:
            starts = positions
        elif starts != positions:
            return None
    if starts is None:
        return None
    return [starts[i + 1] - starts[i] - 1 for i in range(count)]


def _tty_layout(widths, with_arch):
    """True when the widths look like dpkg's terminal layout, which crops values.

    Terminal layout (dpkg 1.16-1.19): name 14 + w/2, version and arch 12 + w/4
    each; pre-multiarch dpkg used name = version = 14 + w.  Without a terminal
    dpkg sizes every column to its longest value, so nothing is cropped.
    """
    if not widths:
        return False
    if with_arch:
        name_w, ver_w, arch_w = widths[0], widths[1], widths[2]
        return ver_w == arch_w and ver_w >= 12 and (name_w - 14) in (2 * (ver_w - 12), 2 * (ver_w - 12) + 1)
    return widths[0] == widths[1] and widths[0] >= 14


def parse_dpkg_l(text):
    """Parse the human ``dpkg -l`` table (with or without its header).

    Returns ``{name: {'version': str|None, 'status': str, 'arch': str|None,
    'truncated': bool, 'package': str}}`` keyed by the name as printed (which
    carries ``:amd64``/``:i386`` for multi-arch packages; ``package`` is the name
    without that qualifier).  ``<none>`` becomes None.  ``truncated`` is True
    when the name or version may have been cropped to its column width: dpkg
    crops silently when it writes to a terminal (``440.82-0ubuntu0~0.18.04.``),
    old versions mark a cut with a trailing ``>``.  Only for reports: read
    versions with ``dpkg-query`` (:func:`parse_dpkg_query`).
    Pre-multiarch tables without an Architecture column give ``arch`` None.
    """
    what = 'dpkg -l output'
    text = _text(text, what)
    widths = None
    with_arch = None
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith(('Desired=', '| Status=', '|/ Err?=')):
            continue
        if line.startswith('||/'):
            with_arch = 'Architecture' in line
            continue
        if line.startswith('+++-'):
            widths = _ruler_widths(line)
            if widths is None:
                raise _error(what, lineno, line, 'malformed column ruler')
            with_arch = len(widths) >= 4
            continue
        abbrev = line.split(None, 1)[0]
        if line[0].isspace() or not _valid_dpkg_status(abbrev):
            raise _error(what, lineno, line, 'not a dpkg -l package row')
        rows.append((lineno, line, abbrev))
    if with_arch is None:
        with_arch = bool(rows) and all(
            len(line.split()) >= 4 and line.split()[3] in DPKG_ARCHES for dummy, line, dummy2 in rows)
    if widths is None:
        widths = _aligned_widths([line for dummy, line, dummy2 in rows], with_arch)
    cropping = _tty_layout(widths, with_arch)
    result = {}
    for lineno, line, abbrev in rows:
        fields = line[len(abbrev):].split(None, 3 if with_arch else 2)
        if len(fields) < (3 if with_arch else 2):
            raise _error(what, lineno, line, 'too few columns')
        name = fields[0]
        version = fields[1]
        arch = fields[2] if with_arch else None
        truncated = False
        if cropping and (len(name) >= widths[0] or len(version) >= widths[1]):
            truncated = True
        if name.endswith('>'):
            name = name[:-1]
            truncated = True
        if version.endswith('>') and version != '<none>':
            version = version[:-1]
            truncated = True
        if version == '<none>':
            version = None
        if arch == '<none>':
            arch = None
        if not name:
            raise _error(what, lineno, line, 'empty package name')
        if name in result:
            continue
        result[name] = {
            'version': version,
            'status': abbrev,
            'arch': arch,
            'truncated': truncated,
            'package': name.split(':', 1)[0],
        }
    return result


_APT_PKG_RE = re.compile(r'\s*([^\s,():]+)(?::([^\s,():]+))? \(([^()]*)\)\s*(,|$)')
_APT_LIST_KEYS = {
    'Install': 'install',
    'Reinstall': 'reinstall',
    'Upgrade': 'upgrade',
    'Downgrade': 'downgrade',
    'Remove': 'remove',
    'Purge': 'purge',
}
_APT_SCALAR_KEYS = {
    'Commandline': 'commandline',
    'Requested-By': 'requested_by',
    'Error': 'error',
    'End-Date': 'end',
}


def _apt_packages(value, kind, what, lineno, line):
    items = []
    pos = 0
    while pos < len(value):
        match = _APT_PKG_RE.match(value, pos)
        if not match:
            raise _error(what, lineno, line, 'cannot parse package list near %r' % value[pos:pos + 40])
        name, arch, body = match.group(1), match.group(2), match.group(3)
        parts = [part.strip() for part in body.split(',')]
        if kind in ('upgrade', 'downgrade'):
            if len(parts) != 2 or not all(parts):
                raise _error(what, lineno, line, '%s entry for %s needs (from, to) versions' % (kind, name))
            items.append({'name': name, 'arch': arch, 'from': parts[0], 'to': parts[1]})
        else:
            automatic = len(parts) == 2 and parts[1] == 'automatic'
            if not parts[0] or len(parts) > 2 or (len(parts) == 2 and not automatic):
                raise _error(what, lineno, line, '%s entry for %s has unexpected version field %r' % (kind, name, body))
            items.append({'name': name, 'arch': arch, 'version': parts[0], 'automatic': automatic})
        pos = match.end()
    return items


def _new_history_entry(start):
    entry = {'start': start, 'end': None, 'commandline': None, 'requested_by': None, 'error': None}
    for key in _APT_LIST_KEYS.values():
        entry[key] = []
    return entry


def parse_apt_history(text):
    """Parse ``/var/log/apt/history.log`` into a list of transactions.

    Each item: ``{'start', 'end', 'commandline', 'requested_by', 'error',
    'install', 'reinstall', 'upgrade', 'downgrade', 'remove', 'purge'}``.
    ``upgrade``/``downgrade`` items are ``{'name', 'arch', 'from', 'to'}``; the
    other lists hold ``{'name', 'arch', 'version', 'automatic'}``.  Dates are
    kept verbatim (apt writes two spaces between date and time).  Unknown
    ``Key: value`` lines are ignored; any other line raises
    :class:`PackageParseError`.
    """
    what = 'apt history'
    text = _text(text, what)
    entries = []
    current = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = re.match(r'^([A-Za-z][A-Za-z-]*): ?(.*)$', line)
        if not match:
            raise _error(what, lineno, line, 'not a "Key: value" line')
        key, value = match.group(1), match.group(2).strip()
        if key == 'Start-Date':
            current = _new_history_entry(value)
            entries.append(current)
            continue
        if current is None:
            raise _error(what, lineno, line, 'line outside a Start-Date stanza')
        if key in _APT_LIST_KEYS:
            kind = _APT_LIST_KEYS[key]
            current[kind].extend(_apt_packages(value, kind, what, lineno, line))
        elif key in _APT_SCALAR_KEYS:
            current[_APT_SCALAR_KEYS[key]] = value
    return entries


_POLICY_VERSION_RE = re.compile(r'^ (\*\*\*| {3}) (\S+) (-?[0-9]+)\s*$')
_POLICY_SOURCE_RE = re.compile(r'^ {6,}-?[0-9]+ \S')


def parse_apt_cache_policy(text):
    """Parse ``apt-cache policy PKG...`` (run with ``LC_ALL=C``).

    Returns ``{pkg: {'installed': str|None, 'candidate': str|None, 'versions': [str, ...]}}``
    with ``(none)`` as None and the version table in apt's order.  When the
    ``Installed:`` line is absent the version marked ``***`` is used.  apt's
    ``N:``/``W:``/``E:`` notices (``Unable to locate package``) are skipped.
    """
    what = 'apt-cache policy output'
    text = _text(text, what)
    result = {}
    current = None
    marked = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if re.match(r'^[NWE]: ', line):
            continue
        if not line[0].isspace():
            if not line.rstrip().endswith(':') or ' ' in line.strip():
                raise _error(what, lineno, line, 'expected "package:" header')
            name = line.strip()[:-1]
            current = {'installed': None, 'candidate': None, 'versions': []}
            marked = None
            result[name] = current
            continue
        if current is None:
            raise _error(what, lineno, line, 'line before any "package:" header')
        version_match = _POLICY_VERSION_RE.match(line)
        if version_match:
            current['versions'].append(version_match.group(2))
            if version_match.group(1) == '***':
                marked = version_match.group(2)
                if current['installed'] is None:
                    current['installed'] = marked
            continue
        if _POLICY_SOURCE_RE.match(line):
            continue
        key_match = re.match(r'^  ([A-Za-z][A-Za-z ]*):(.*)$', line)
        if not key_match:
            raise _error(what, lineno, line, 'unrecognised apt-cache policy line')
        key, value = key_match.group(1), key_match.group(2).strip()
        value = None if value in ('', '(none)') else value
        if key == 'Installed':
            current['installed'] = value if value is not None else marked
        elif key == 'Candidate':
            current['candidate'] = value
    return result
