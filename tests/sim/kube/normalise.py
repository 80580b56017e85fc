# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What kube-apiserver does to a document's values when it decodes one: the conversions the fake API server applies on write.

Pure (standard library only, Python 3.8+), unit-tested in tests/unit/sim/test_kube_normalise.py against real
``kubectl get -o json`` documents.  kube-apiserver decodes every write into Go types and encodes what it stores
from them, so what a client reads back is not what it sent:

- resource quantities (container requests and limits, pod overhead, emptyDir size limits, node capacity and
  allocatable, the same inside workload templates) become canonical strings: ``8`` -> ``"8"``,
  ``0.5`` -> ``"500m"``, ``"1000m"`` -> ``"1"``, ``"1024Mi"`` -> ``"1Gi"``, ``"1.5Gi"`` -> ``"1536Mi"``
  (k8s.io/apimachinery/pkg/api/resource: ``ParseQuantity`` then ``Quantity.String``, including its rule that
  keeps a string already in canonical form, its rounding up to 1n and its cap of binary ones at the largest int64);
- a value of the wrong JSON type where Go has a string (label and annotation values) is refused.

Errors are :class:`DecodeError` whose text is what kube-apiserver puts after
``<Kind> in version "<version>" cannot be handled as a <Kind>: ``.
"""

import fractions
import re

QUANTITY_PATTERN = "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
QUANTITY_ERROR = 'quantities must match the regular expression ' + QUANTITY_PATTERN

DECIMAL_SUFFIXES = {'n': -9, 'u': -6, 'm': -3, '': 0, 'k': 3, 'M': 6, 'G': 9, 'T': 12, 'P': 15, 'E': 18}
BINARY_SUFFIXES = {'Ki': 10, 'Mi': 20, 'Gi': 30, 'Ti': 40, 'Pi': 50, 'Ei': 60}
_DECIMAL_SUFFIX_OF = dict((exponent, suffix) for suffix, exponent in DECIMAL_SUFFIXES.items())
_BINARY_SUFFIX_OF = dict((exponent, suffix) for suffix, exponent in BINARY_SUFFIXES.items())
_DIGITS = '0123456789'
_SUFFIX_LETTERS = 'eEinumkKMGTP'
_NANO = 10 ** 9
_INT64_MAX = 2 ** 63 - 1


class DecodeError(ValueError):
    """A value kube-apiserver's decoder refuses; the text is the decoder's."""


class JsonNumber(float):
    """A JSON number with a fraction or exponent, remembering how it was written (``json.loads(parse_float=JsonNumber)``).

    kube-apiserver parses a quantity written as a bare number from its text: ``1e3`` stays ``"1e3"``.
    """

    def __new__(cls, text):
        number = float.__new__(cls, text)
        number.text = text
        return number


def _split(text):
    """apimachinery's parseQuantityString: (positive, numerator, denominator, suffix), or DecodeError."""
    positive, position, end = True, 0, len(text)
    if position < end and text[0] in '+-':
        positive = text[0] == '+'
        position += 1
    while position < end and text[position] == '0':
        position += 1
    if position >= end:
        return positive, '0', '', ''
    start = position
    while position < end and text[position] in _DIGITS:
        position += 1
    numerator = text[start:position] or '0'
    denominator = ''
    if position < end and text[position] == '.':
        position += 1
        start = position
        while position < end and text[position] in _DIGITS:
            position += 1
        denominator = text[start:position]
    suffix_start = position
    while position < end and text[position] in _SUFFIX_LETTERS:
        position += 1
    if position < end and text[position] in '+-':
        position += 1
    while position < end and text[position] in _DIGITS:
        position += 1
    if position < end:
        raise DecodeError(QUANTITY_ERROR)
    return positive, numerator, denominator, text[suffix_start:]


def _interpret(suffix):
    """(base, exponent, format) of a suffix, as apimachinery's suffixHandler.interpret."""
    if suffix in DECIMAL_SUFFIXES:
        return 10, DECIMAL_SUFFIXES[suffix], 'DecimalSI'
    if suffix in BINARY_SUFFIXES:
        return 2, BINARY_SUFFIXES[suffix], 'BinarySI'
    if len(suffix) > 1 and suffix[0] in 'eE' and re.match(r'^[+-]?[0-9]+$', suffix[1:]):
        return 10, int(suffix[1:]), 'DecimalExponent'
    raise DecodeError('unable to parse quantity\'s suffix')


def parse_quantity(text):
    """ParseQuantity: (value as a Fraction, format, the text when Go keeps it as the canonical form, else None)."""
    if not isinstance(text, str) or not text.strip():
        raise DecodeError(QUANTITY_ERROR)
    text = text.strip()
    if text == '0':
        return fractions.Fraction(0), 'DecimalSI', text
    positive, numerator, denominator, suffix = _split(text)
    base, exponent, form = _interpret(suffix)
    shifted = numerator + denominator
    if base == 10:
        value = fractions.Fraction(int(shifted)) * fractions.Fraction(10) ** (exponent - len(denominator))
    else:
        value = fractions.Fraction(int(shifted) * 2 ** exponent, 10 ** len(denominator))
    if not positive:
        value = -value
    kept = None
    # Go's int64 fast path keeps a string that is already canonical.
    if base == 10:
        scale = exponent - len(denominator)
        if 18 - len(shifted) >= 0 and scale >= -9 and int(shifted) <= _INT64_MAX:
            if scale % 3 == 0 and not shifted.endswith('000') and shifted[0] != '0':
                kept = text
    elif exponent >= 0 and not denominator and 15 - len(numerator) - int(exponent * 3 / 10) - 1 >= 0:
        if int(shifted) * 2 ** exponent <= _INT64_MAX and exponent % 10 == 0 and int(shifted) & 7:
            kept = text
    # Finer than 1n rounds up, away from zero.
    scaled = value * _NANO
    if scaled.denominator != 1:
        magnitude = -(-abs(scaled.numerator) // scaled.denominator)
        value = fractions.Fraction(magnitude if value > 0 else -magnitude, _NANO)
    if form == 'BinarySI' and value > _INT64_MAX:
        value = fractions.Fraction(_INT64_MAX)  # binary quantities are capped at the largest int64
    if form == 'BinarySI' and 0 < abs(value) < 1:
        form = 'DecimalSI'
    return value, form, kept


def format_quantity(value, form):
    """Quantity.String (CanonicalizeBytes) of a value (a Fraction of whole nanos) in a format."""
    if value == 0:
        return '0'
    if form == 'BinarySI' and (-1024 < value < 1024 or value.denominator != 1):
        form = 'DecimalSI'
    if form == 'BinarySI':
        number, times = int(value), 0
        while abs(number) >= 1024 and number % 1024 == 0:
            number //= 1024
            times += 1
        return '%d%s' % (number, _BINARY_SUFFIX_OF.get(times * 10, ''))
    mantissa, exponent = int(value * _NANO), -9
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    while exponent % 3 != 0:
        mantissa *= 10
        exponent -= 1
    if form == 'DecimalExponent' or exponent not in _DECIMAL_SUFFIX_OF:  # past E (10^18) DecimalSI falls back to e<N>
        return '%d%s' % (mantissa, 'e%d' % exponent if exponent else '')
    return '%d%s' % (mantissa, _DECIMAL_SUFFIX_OF[exponent])


def canonical_quantity(value):
    """The string kube-apiserver stores and returns for a quantity written as ``value`` (a JSON string, number or null)."""
    if value is None:
        return '0'  # null decodes to the zero Quantity
    if isinstance(value, bool):
        raise DecodeError(QUANTITY_ERROR)
    if isinstance(value, float):
        value = getattr(value, 'text', None) or repr(value)
    elif isinstance(value, int):
        value = str(value)
    number, form, kept = parse_quantity(value)
    return kept if kept is not None else format_quantity(number, form)


def _quantities(mapping):
    if isinstance(mapping, dict):
        for key in list(mapping):
            mapping[key] = canonical_quantity(mapping[key])


def _resources(resources):
    if isinstance(resources, dict):
        _quantities(resources.get('limits'))
        _quantities(resources.get('requests'))


def _strings(mapping, field):
    """Label and annotation values are Go strings: anything else fails the decoder."""
    if not isinstance(mapping, dict):
        return
    for value in mapping.values():
        if not isinstance(value, str) and value is not None:
            kind = {bool: 'bool', dict: 'object', list: 'array'}.get(type(value), 'number')
            raise DecodeError('json: cannot unmarshal %s into Go struct field ObjectMeta.%s of type string' % (kind, field))


def normalise_pod_spec(spec):
    """Quantities in a pod spec (a pod's, or a workload template's)."""
    if not isinstance(spec, dict):
        return
    for key in ('containers', 'initContainers', 'ephemeralContainers'):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                _resources(container.get('resources'))
    _quantities(spec.get('overhead'))
    _resources(spec.get('resources'))
    for volume in spec.get('volumes') or []:
        empty_dir = volume.get('emptyDir') if isinstance(volume, dict) else None
        if isinstance(empty_dir, dict) and 'sizeLimit' in empty_dir:
            empty_dir['sizeLimit'] = canonical_quantity(empty_dir['sizeLimit'])


def normalise(storage, obj):
    """Apply the decoder's conversions to ``obj`` (an object of the fake's ``storage``: pods, nodes, ...) in place; returns it."""
    meta = obj.get('metadata')
    if isinstance(meta, dict):
        _strings(meta.get('labels'), 'metadata.labels')
        _strings(meta.get('annotations'), 'metadata.annotations')
    spec = obj.get('spec') if isinstance(obj.get('spec'), dict) else {}
    status = obj.get('status') if isinstance(obj.get('status'), dict) else {}
    if storage == 'pods':
        normalise_pod_spec(spec)
        for entry in (status.get('containerStatuses') or []) + (status.get('initContainerStatuses') or []):
            if isinstance(entry, dict):
                _quantities(entry.get('allocatedResources'))
                _resources(entry.get('resources'))
    elif storage == 'nodes':
        _quantities(status.get('capacity'))
        _quantities(status.get('allocatable'))
    elif storage in ('daemonsets', 'replicasets', 'statefulsets'):
        template = spec.get('template')
        if isinstance(template, dict):
            normalise_pod_spec(template.get('spec'))
        for claim in spec.get('volumeClaimTemplates') or []:
            if isinstance(claim, dict) and isinstance(claim.get('spec'), dict):
                _resources(claim['spec'].get('resources'))
    return obj
