# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read the pinned stack (the baseline) from YAML or the runbook's ``baseline.env``.

Controller-side, no Ansible import.  Two forms are accepted:

* YAML, a mapping of component to version (``vbios`` may map GPU model to version)::

      driver: 580.65.06
      cuda_toolkit: "13.0"
      vbios:
        NVIDIA H100 80GB HBM3: 96.00.99.00.01

  Scalars are read as the text written in the file, so ``cuda_driver: 12.10``
  stays ``12.10`` (YAML would make it the float 12.1).

* ``baseline.env``, as in the image-drift runbook::

      # comments, blank lines, optional "export", quotes, inline "# comments"
      DRIVER_VERSION=580.65.06
      VBIOS_VERSION=                 # empty = not pinned

  Keys are the runbook's names (``DRIVER_VERSION``, ``CUDA_TOOLKIT``, ...) or a
  component's name in upper case, with or without ``_VERSION``.  ``PREV_``
  keys name the previous baseline (the rollback pin).

Every error names the file and line and changes nothing.  Whatever the source, a pin that pins nothing
is refused (a truncated checkout must never read as "in sync"), a pin file must be a regular file of at
most :data:`PIN_MAX_BYTES` (a FIFO, device or directory is refused before it is opened for reading), and a pin
given as an Ansible variable must hold strings: YAML has already turned an unquoted ``12.10`` into the number
``12.1`` there, so numbers are refused with a hint to quote them.  :func:`load_pin` is the one entry point
the action plugins (``drift_check``, ``read_pin``) use.
"""

from __future__ import annotations

import os
import re
import stat

import yaml

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._components import INSTALLED, shown, type_name, version_text_problem
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._drift import COMPONENTS, DriftError, normalize_pin, pinned_components
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._stack import StackError, validate_pin

# The runbook's variable names that do not follow COMPONENT[_VERSION].
ENV_ALIASES = {
    'DCGM_VERSION': 'dcgm',
    'KERNEL_RELEASE': 'kernel',
    'CUDA_VERSION': 'cuda_driver',
}
ENV_KEY = re.compile(r'^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)$')
PREVIOUS_PREFIX = 'PREV_'
# A pin is a handful of lines; anything much larger is not a pin (and must not cost seconds and memory to refuse).
PIN_MAX_BYTES = 256 * 1024


class PinError(ValueError):
    """A pin file or mapping that cannot be used; the message names file, line and field."""


def env_key_to_component(key):
    """Map a baseline.env key (without PREV_) to a component name, or None."""
    upper = key.upper()
    if upper in ENV_ALIASES:
        return ENV_ALIASES[upper]
    base = upper[:-len('_VERSION')] if upper.endswith('_VERSION') else upper
    component = base.lower()
    return component if component in COMPONENTS else None


def valid_env_keys():
    """The documented key of each component, for error messages."""
    return ['%s_VERSION' % component.upper() for component in COMPONENTS]


def _env_value(raw, source, lineno):
    """The value part of KEY=value: quotes removed, an unquoted inline comment dropped."""
    raw = raw.strip()
    if raw[:1] in ('"', "'"):
        quote = raw[0]
        end = raw.find(quote, 1)
        if end < 0:
            raise PinError('%s line %d: unterminated %s quote' % (source, lineno, quote))
        rest = raw[end + 1:].strip()
        if rest and not rest.startswith('#'):
            raise PinError('%s line %d: unexpected text after the quoted value: %s' % (source, lineno, rest))
        return raw[1:end]
    value = re.split(r'\s+#', raw, maxsplit=1)[0].strip()
    if value.startswith('#'):
        return ''
    if re.search(r'\s', value):
        raise PinError('%s line %d: a value with spaces must be quoted: %s' % (source, lineno, value))
    return value


def parse_env(text, source='baseline.env'):
    """Parse the baseline.env form; return {'pin': {...}, 'previous': {...}}."""
    pin = {}
    previous = {}
    seen = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith('#'):
            continue
        match = ENV_KEY.match(stripped)
        if not match:
            raise PinError('%s line %d: expected KEY=value, got: %s' % (source, lineno, stripped))
        key, raw = match.group(1), match.group(2)
        target = pin
        name = key
        if key.upper().startswith(PREVIOUS_PREFIX):
            target = previous
            name = key[len(PREVIOUS_PREFIX):]
        component = env_key_to_component(name)
        if component is None:
            raise PinError('%s line %d: unknown key %s; valid keys: %s (prefix PREV_ for the previous pin)'
                           % (source, lineno, key, ', '.join(valid_env_keys())))
        if (target is previous, component) in seen:
            raise PinError('%s line %d: %s repeats line %d' % (source, lineno, key, seen[(target is previous, component)]))
        seen[(target is previous, component)] = lineno
        target[component] = _checked(_env_value(raw, source, lineno), source, lineno, key)
    return _normalized(pin, previous, source)


def _checked(value, source, lineno, field):
    """A pinned value that must look like a version (None when empty); PinError naming file, line and field."""
    if not value:
        return None
    problem = version_text_problem(value.strip())
    if problem:
        raise PinError('%s line %d: %s: %s %s' % (source, lineno, field, shown(value), problem))
    return value


def _normalized(pin, previous, source):
    try:
        return {'pin': normalize_pin(pin), 'previous': normalize_pin(previous)}
    except DriftError as exc:
        raise PinError('%s: %s' % (source, exc))


def _scalar_text(node, source, field, version=False):
    if isinstance(node, yaml.ScalarNode):
        if node.tag == 'tag:yaml.org,2002:null' or node.value in ('', '~', 'null', 'Null', 'NULL'):
            return None
        return _checked(node.value, source, node.start_mark.line + 1, field) if version else node.value
    raise PinError('%s line %d: %s must be a version string' % (source, node.start_mark.line + 1, field))


def _yaml_mapping(node, source, field):
    if not isinstance(node, yaml.MappingNode):
        raise PinError('%s line %d: %s must be a mapping' % (source, node.start_mark.line + 1, field))
    for key_node, value_node in node.value:
        yield _scalar_text(key_node, source, field + ' key') or '', key_node, value_node


def _yaml_pin(node, source, field):
    pin = {}
    for key, key_node, value_node in _yaml_mapping(node, source, field):
        if key not in COMPONENTS:
            raise PinError('%s line %d: unknown component %s; valid components: %s'
                           % (source, key_node.start_mark.line + 1, key or '(empty)', ', '.join(COMPONENTS)))
        if key in pin:
            raise PinError('%s line %d: component %s appears twice' % (source, key_node.start_mark.line + 1, key))
        if key == 'vbios' and isinstance(value_node, yaml.MappingNode):
            pin[key] = dict((model, _scalar_text(version, source, 'vbios.' + model, version=True))
                            for model, dummy, version in _yaml_mapping(value_node, source, 'vbios'))
        else:
            pin[key] = _scalar_text(value_node, source, key, version=True)
    return pin


def parse_yaml(text, source='baseline.yml'):
    """Parse the YAML form; an optional top-level ``previous:`` mapping holds the rollback pin."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, 'problem_mark', None)
        where = ' line %d' % (mark.line + 1) if mark is not None else ''
        raise PinError('%s%s: not valid YAML: %s' % (source, where, getattr(exc, 'problem', None) or exc))
    except RecursionError:
        # PyYAML composes nested collections recursively: a pin is flat, so deep nesting is refused, not a crash.
        raise PinError('%s: not valid YAML for a pin: collections nested too deeply (a pin is a flat mapping of component '
                       'to version)' % source) from None
    if node is None:
        return _normalized({}, {}, source)
    previous_node = None
    if isinstance(node, yaml.MappingNode):
        kept = []
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == 'previous':
                previous_node = value_node
            else:
                kept.append((key_node, value_node))
        node.value = kept
    pin = _yaml_pin(node, source, 'the pin')
    previous = _yaml_pin(previous_node, source, 'previous') if previous_node is not None else {}
    return _normalized(pin, previous, source)


def looks_like_env(text):
    """True when the first meaningful line is KEY=value (the baseline.env form)."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith('#'):
            return bool(ENV_KEY.match(stripped)) and ':' not in stripped.split('=', 1)[0]
    return False


def parse_pin_text(text, source):
    """Parse a pin file's text in whichever form it is written."""
    if source.endswith('.env') or looks_like_env(text):
        return parse_env(text, source)
    return parse_yaml(text, source)


def _refuse_numbers(mapping, source):
    """A pin variable's values must be strings: YAML turned an unquoted 12.10 into 12.1 before we see it."""
    for component, value in mapping.items():
        if component == 'vbios' and isinstance(value, dict):
            _refuse_numbers(dict(('vbios.%s' % model, version) for model, version in value.items()), source)
            continue
        if isinstance(value, bool) or isinstance(value, (int, float)):
            raise PinError('%s.%s: %s is a number, not a version; YAML reads an unquoted version as a number '
                           '(12.10 becomes 12.1, 550.90 becomes 550.9): quote it, as in %s: "%s"'
                           % (source, component, value, component.split('.')[-1], value))


def pin_from_mapping(mapping, source='pin'):
    """Validate a pin given inline as a mapping (task argument or inventory variable).

    An optional ``previous`` key holds the rollback pin, as in the YAML file form.  Returns {'pin', 'previous'}.
    """
    if not isinstance(mapping, dict):
        raise PinError('%s: must be a mapping of component to version, got %s' % (source, type_name(mapping)))
    mapping = dict(mapping)
    previous = mapping.pop('previous', None) or {}
    if not isinstance(previous, dict):
        raise PinError('%s.previous: must be a mapping of component to version, got %s' % (source, type_name(previous)))
    _refuse_numbers(mapping, source)
    _refuse_numbers(previous, source + '.previous')
    try:
        return {'pin': normalize_pin(mapping), 'previous': normalize_pin(previous)}
    except DriftError as exc:
        raise PinError('%s: %s' % (source, exc))


_FILE_KINDS = ((stat.S_ISDIR, 'a directory'), (stat.S_ISFIFO, 'a FIFO'), (stat.S_ISCHR, 'a character device'),
               (stat.S_ISBLK, 'a block device'), (stat.S_ISSOCK, 'a socket'))


def read_pin_file(path, max_bytes=PIN_MAX_BYTES):
    """Read and parse the pin file ``path``: a regular file of at most ``max_bytes``, UTF-8, in either form.

    The file is opened without blocking and checked with fstat before anything is read, so a FIFO, a device,
    a directory or a huge file is refused at once, naming the file.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, 'O_NOCTTY', 0))
    except OSError as exc:
        raise PinError('%s: cannot be read: %s' % (path, exc.strerror or exc))
    try:
        info = os.fstat(descriptor)
        for test, kind in _FILE_KINDS:
            if test(info.st_mode):
                raise PinError('%s: is %s, not a pin file' % (path, kind))
        if not stat.S_ISREG(info.st_mode):
            raise PinError('%s: is not a regular file' % path)
        if info.st_size > max_bytes:
            raise PinError('%s: is %d bytes; a pin file has at most %d' % (path, info.st_size, max_bytes))
        chunks = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(descriptor, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise PinError('%s: is over %d bytes; a pin file has at most %d' % (path, max_bytes, max_bytes))
    finally:
        os.close(descriptor)
    data = b''.join(chunks)
    try:
        text = data.decode('utf-8')
    except UnicodeDecodeError as exc:
        offset = int(exc.start)
        line = data[:offset].count(b'\n') + 1
        raise PinError('%s line %d: not UTF-8 text (byte %s at offset %d)' % (path, line, shown(data[offset:offset + 1]), offset))
    if '\x00' in text:
        raise PinError('%s line %d: contains a NUL byte; a pin file is text' % (path, text[:text.index('\x00')].count('\n') + 1))
    return parse_pin_text(text, path)


def require_pinned(pins, source):
    """Refuse a pin that pins nothing (an empty or truncated file, every value empty), naming its source."""
    if not pinned_components(pins['pin']):
        raise PinError('%s: pins nothing (no component has a version); an empty pin is never "in sync". Pin at least one '
                       'of: %s' % (source, ', '.join(COMPONENTS)))
    return pins


def load_pin(pin=None, pin_file=None, source='pin', find=None):
    """The one way to take a pin: from ``pin_file`` (resolved through ``find(path)`` when given) or the mapping ``pin``.

    ``source`` names the variable the mapping came from in messages (``gpu_stack_pin``).  Returns
    {'pin', 'previous', 'source', 'pinned', 'pinned_versions', 'installed'}: the normalized pin (every
    component, None = not pinned), the previous (rollback) pin, where it came from, the pinned components,
    the pinned components with their versions only, and those of them a package manager installs.
    """
    if pin_file:
        try:
            path = find(pin_file) if find else pin_file
        except Exception as exc:  # pylint: disable=broad-exception-caught  # the caller's file search: any failure means "not found"
            raise PinError('%s: not found (%s)' % (pin_file, exc))
        pins = read_pin_file(path)
        origin = path
    elif pin is not None and pin != {}:
        pins = pin_from_mapping(pin, source)
        origin = source
    else:
        raise PinError('%s: no pin given (set %s or a pin file)' % (source, source))
    require_pinned(pins, origin)
    pins['source'] = origin
    pins['pinned'] = pinned_components(pins['pin'])
    pins['pinned_versions'] = dict((component, pins['pin'][component]) for component in pins['pinned'])
    pins['installed'] = dict((component, pins['pin'][component]) for component in INSTALLED if pins['pin'][component])
    return pins


def read_checked(pin=None, pin_file=None, name='pin', find=None):
    """:func:`load_pin`, then the package rules for the installed components (Fabric Manager on the driver's branch, a
    driver as NNN.NN.NN, ...): the pin a task may converge a node to.  Every error names ``name`` (the variable) or the
    file, before any task touches a node."""
    if pin_file and pin not in (None, {}):
        raise PinError('%s and a pin file are both set; give one' % name)
    pins = load_pin(pin=pin, pin_file=pin_file, source=name, find=find)
    try:
        validate_pin(pins['installed'])
    except StackError as exc:
        raise PinError('%s%s (from %s)' % (name, str(exc)[len('pin'):], pins['source']))
    return pins
