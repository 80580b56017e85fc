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

Every error names the file and line and changes nothing.
"""

from __future__ import annotations

import re

import yaml

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._drift import COMPONENTS, DriftError, normalize_pin

# The runbook's variable names that do not follow COMPONENT[_VERSION].
ENV_ALIASES = {
    'DCGM_VERSION': 'dcgm',
    'KERNEL_RELEASE': 'kernel',
    'CUDA_VERSION': 'cuda_driver',
}
ENV_KEY = re.compile(r'^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)$')
PREVIOUS_PREFIX = 'PREV_'


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
        target[component] = _env_value(raw, source, lineno) or None
    return {'pin': normalize_pin(pin), 'previous': normalize_pin(previous)}


def _scalar_text(node, source, field):
    if isinstance(node, yaml.ScalarNode):
        if node.tag == 'tag:yaml.org,2002:null' or node.value in ('', '~', 'null', 'Null', 'NULL'):
            return None
        return node.value
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
            pin[key] = dict((model, _scalar_text(version, source, 'vbios.' + model))
                            for model, dummy, version in _yaml_mapping(value_node, source, 'vbios'))
        else:
            pin[key] = _scalar_text(value_node, source, key)
    return pin


def parse_yaml(text, source='baseline.yml'):
    """Parse the YAML form; an optional top-level ``previous:`` mapping holds the rollback pin."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, 'problem_mark', None)
        where = ' line %d' % (mark.line + 1) if mark is not None else ''
        raise PinError('%s%s: not valid YAML: %s' % (source, where, getattr(exc, 'problem', None) or exc))
    if node is None:
        return {'pin': normalize_pin({}), 'previous': normalize_pin({})}
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
    return {'pin': normalize_pin(pin), 'previous': normalize_pin(previous)}


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


def pin_from_mapping(mapping, source='pin'):
    """Validate a pin given inline as a mapping (task argument or inventory variable)."""
    try:
        return normalize_pin(mapping)
    except DriftError as exc:
        raise PinError('%s: %s' % (source, exc))
