# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The components of the pinned GPU stack: the one table every reader of a pin uses (pure, no Ansible import).

``_drift`` compares them, ``_stack`` turns the installed ones into packages, the pin readers
(``plugin_utils/_pin.py``) accept exactly these names, and the roles get the lists from the
``gpufleet.lifecycle.read_pin`` action instead of keeping their own.
"""

from __future__ import annotations

import re

# Every component, in the order the stack is applied and reported.
COMPONENTS = (
    'kernel',
    'driver',
    'cuda_driver',
    'gsp_firmware',
    'vbios',
    'fabric_manager',
    'container_toolkit',
    'dcgm',
    'cuda_toolkit',
)
# Components a package manager installs (gpu_stack converges them), in the order gpu_stack applies them.
INSTALLED = ('kernel', 'driver', 'fabric_manager', 'container_toolkit', 'dcgm', 'cuda_toolkit')
# Components that come with the driver or the board: read and compared, never installed.
READ_ONLY = tuple(component for component in COMPONENTS if component not in INSTALLED)

# Debian revisions / epochs of NVIDIA's repository, appended to a pinned upstream version
# (the component roles' *_package_revision variables override them; empty means this default).
DEFAULT_REVISIONS = {
    'driver': '-0ubuntu1',
    'driver_meta': '-1',
    'fabric_manager': '-1',
    'container_toolkit': '-1',
    'dcgm_epoch': '1',
    'dcgm': '-1',
}

# What any pinned value must look like before a finer, per-component check: it starts with a letter or digit
# (never an option-like dash), has no whitespace, control character, quote or shell metacharacter, and is short.
VERSION_MAX_LENGTH = 64
_VERSION_TEXT = re.compile(r'^[0-9A-Za-z][0-9A-Za-z.+~:_-]{0,%d}$' % (VERSION_MAX_LENGTH - 1))
_REVISION_TEXT = re.compile(r'^-[0-9A-Za-z][0-9A-Za-z.+~_]{0,31}$')
_EPOCH_TEXT = re.compile(r'^[0-9]{1,4}$')


def shown(value, limit=80):
    """``value`` for an error message: repr-escaped (control bytes visible) and cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + '...(%d characters)' % len(text)


def type_name(value):
    """The plain type of ``value`` for messages (ansible-core 2.19 wraps YAML values in tagged subclasses of the builtins)."""
    if value is None:
        return 'null'
    for kind in (bool, int, float, str, list, dict):
        if isinstance(value, kind):
            return kind.__name__
    return type(value).__name__


def version_text_problem(value):
    """None when ``value`` (a string) looks like a version; otherwise what is wrong with it."""
    if len(value) > VERSION_MAX_LENGTH:
        return 'is %d characters long; a version has at most %d' % (len(value), VERSION_MAX_LENGTH)
    if _VERSION_TEXT.fullmatch(value):
        return None
    if value.startswith('-'):
        return 'starts with a dash (it would read as a command option)'
    return 'is not a version: only letters, digits and . + ~ : _ - are allowed, starting with a letter or digit'


def revision_problem(key, value):
    """None when a revision (``-0ubuntu1``) or, for ``dcgm_epoch``, an epoch (``1``) is well formed."""
    if key == 'dcgm_epoch':
        return None if _EPOCH_TEXT.fullmatch(value) else 'is not an epoch (digits only, such as 1)'
    return None if _REVISION_TEXT.fullmatch(value) else 'is not a package revision such as -0ubuntu1 or -1 (a dash, then letters, digits, . + ~ _)'
