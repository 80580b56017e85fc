# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``dcgmi -v`` / ``dcgmi --version`` banner reader (re-exported by ``_dcgm``).

Pure, standard library only, Python 3.8+. Apart from the diag parsers of ``_dcgm`` so that ``gpu_facts``, which reads the
banner on every node, ships and compiles this small file only.
"""

from __future__ import annotations

import re


def _to_text(value):
    """Decode bytes, pass str through, everything else (None included) becomes ''."""
    if value is None:
        return ''
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode('utf-8', 'replace')
    if isinstance(value, str):
        return value
    return ''


_SECTION_HOSTENGINE_RE = re.compile(r'^host\s*engine\s+build\s+info\s*:?\s*$', re.IGNORECASE)
_SECTION_LOCAL_RE = re.compile(r'^(?:local|client|dcgmi)\s+build\s+info\s*:?\s*$', re.IGNORECASE)
_BANNER_KV_RE = re.compile(r'^([A-Za-z][A-Za-z0-9 _.-]*?)\s*:\s*(.*?)\s*$')
_VERSION_RE = re.compile(r'[0-9]+(?:\.[0-9]+)+(?:[-+~][0-9A-Za-z.]+)?')


def parse_version_banner(text):
    """Parse ``dcgmi -v`` / ``dcgmi --version`` output.

    Returns ``{'version', 'build_id', 'hostengine_version', 'hostengine_build_id', 'build_date',
    'commit_id', 'branch_name', 'client', 'hostengine'}``: the dcgmi (client) build and, when
    ``Hostengine build info:`` is printed, the host engine's.  ``client``/``hostengine`` hold every
    ``Key : Value`` line with lower-cased keys (``hostengine`` is None when no host engine answered).
    Values that are absent are None; nothing is raised for unexpected text.
    """
    text = _to_text(text)
    sections = {'client': {}, 'hostengine': None}
    current = 'client'
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line:
            continue
        if _SECTION_HOSTENGINE_RE.match(line):
            current = 'hostengine'
            sections['hostengine'] = {}
            continue
        if _SECTION_LOCAL_RE.match(line):
            current = 'client'
            continue
        match = _BANNER_KV_RE.match(line)
        if match:
            key = re.sub(r'\s+', ' ', match.group(1).strip().lower())
            value = match.group(2).strip()
            if not value:
                continue
            if key != 'version' and key.endswith(' version') and 'version' not in sections[current]:
                # TCLAP style: "dcgmi  version: 3.3.1"
                found = _VERSION_RE.search(value)
                if found and key.split(' ')[0] in ('dcgmi', 'dcgm', 'nv-hostengine', 'hostengine'):
                    sections[current]['version'] = found.group(0)
            sections[current].setdefault(key, value)
    client = sections['client']
    hostengine = sections['hostengine']
    engine = hostengine or {}
    return {
        'version': client.get('version'),
        'build_id': client.get('build id'),
        'hostengine_version': engine.get('version'),
        'hostengine_build_id': engine.get('build id'),
        'build_date': client.get('build date'),
        'commit_id': client.get('commit id'),
        'branch_name': client.get('branch name'),
        'client': client,
        'hostengine': hostengine,
    }
