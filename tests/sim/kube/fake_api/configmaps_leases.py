# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""ConfigMaps (core/v1) and Leases (coordination.k8s.io/v1): their decoding and validation."""

import base64

import normalise  # pylint: disable=import-error

from .common import CONFIG_KEY, CONFIG_KEY_MESSAGE, CONFIG_MAP_MAX_BYTES, canonical_micro_time, parse_time


def _decode_configmap(obj):
    """ConfigMap.data is map[string]string, binaryData map[string][]byte (base64 in JSON), immutable *bool."""
    for field in ('data', 'binaryData'):
        values = obj.get(field)
        if values is None:
            continue
        if not isinstance(values, dict):
            raise normalise.DecodeError('json: cannot unmarshal %s into Go struct field ConfigMap.%s of type map[string]%s'
                                        % (_go_type(values), field, 'string' if field == 'data' else '[]uint8'))
        for key, value in values.items():
            if not isinstance(value, str):
                raise normalise.DecodeError('json: cannot unmarshal %s into Go struct field ConfigMap.%s of type %s'
                                            % (_go_type(value), field, 'string' if field == 'data' else '[]uint8'))
            if field == 'binaryData':
                try:
                    base64.b64decode(value.encode('ascii'), validate=True)
                except (ValueError, UnicodeEncodeError):
                    raise normalise.DecodeError('illegal base64 data at input byte 0') from None
    for field in ('data', 'binaryData'):
        if obj.get(field) == {}:
            del obj[field]  # omitempty: an empty map is not stored
    if obj.get('immutable') is not None and not isinstance(obj['immutable'], bool):
        raise normalise.DecodeError('json: cannot unmarshal %s into Go struct field ConfigMap.immutable of type bool' % _go_type(obj['immutable']))


def _decode_lease(obj):
    """LeaseSpec times are metav1.MicroTime (RFC 3339 with microseconds); the integers are int32."""
    spec = obj.get('spec')
    if not isinstance(spec, dict):
        return
    for field in ('acquireTime', 'renewTime'):
        value = spec.get(field)
        if value is not None and (not isinstance(value, str) or parse_time(value) is None):
            raise normalise.DecodeError('parsing time "%s" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "%s" as "2006"' % (value, value))
        if value is not None:
            spec[field] = canonical_micro_time(value)  # stored and returned in UTC with six digits, as metav1.MicroTime marshals
    for field in ('leaseDurationSeconds', 'leaseTransitions'):
        value = spec.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise normalise.DecodeError('json: cannot unmarshal %s into Go struct field LeaseSpec.spec.%s of type int32' % (_go_type(value), field))
    if spec.get('holderIdentity') is not None and not isinstance(spec['holderIdentity'], str):
        raise normalise.DecodeError('json: cannot unmarshal %s into Go struct field LeaseSpec.spec.holderIdentity of type string'
                                    % _go_type(spec['holderIdentity']))


def _go_type(value):
    if isinstance(value, bool):
        return 'bool'
    if isinstance(value, (int, float)):
        return 'number'
    if isinstance(value, str):
        return 'string'
    if isinstance(value, list):
        return 'array'
    return 'object'


class ConfigMapsLeasesMixin:
    """The store's ConfigMap and Lease rules."""

    @staticmethod
    def _validate_configmap(obj, old, causes):
        """ValidateConfigMap and ValidateConfigMapUpdate: key names, no key in both maps, at most 1 MiB of values, immutable."""
        data = obj.get('data') or {}
        binary = obj.get('binaryData') or {}
        total = 0
        for field, values in (('data', data), ('binaryData', binary)):
            for key, value in values.items():
                if not CONFIG_KEY.match(key) or len(key) > 253 or key in ('.', '..') or key.startswith('..'):
                    causes.append(('FieldValueInvalid', '%s[%s]' % (field, key), 'Invalid value: "%s": %s' % (key, CONFIG_KEY_MESSAGE)))
                if field == 'data' and key in binary:
                    causes.append(('FieldValueInvalid', 'data[%s]' % key, 'Invalid value: "%s": duplicate of key present in binaryData' % key))
                total += len(value.encode('utf-8')) if field == 'data' else len(base64.b64decode(value))
        if total > CONFIG_MAP_MAX_BYTES:
            causes.append(('FieldValueTooLong', '[]', 'Too long: may not be more than %d bytes' % CONFIG_MAP_MAX_BYTES))
        if old is not None and old.get('immutable'):
            if not obj.get('immutable'):
                causes.append(('FieldValueForbidden', 'immutable', 'Forbidden: field is immutable when `immutable` is set'))
            for field in ('data', 'binaryData'):
                if (obj.get(field) or {}) != (old.get(field) or {}):
                    causes.append(('FieldValueForbidden', field, 'Forbidden: field is immutable when `immutable` is set'))

    @staticmethod
    def _validate_leases(obj, causes):
        """Lease spec: a positive duration, no negative transitions."""
        spec = obj.get('spec') or {}
        if spec.get('leaseDurationSeconds') is not None and spec['leaseDurationSeconds'] <= 0:
            causes.append(('FieldValueInvalid', 'spec.leaseDurationSeconds', 'Invalid value: %d: must be greater than 0' % spec['leaseDurationSeconds']))
        if spec.get('leaseTransitions') is not None and spec['leaseTransitions'] < 0:
            causes.append(('FieldValueInvalid', 'spec.leaseTransitions',
                           'Invalid value: %d: must be greater than or equal to 0' % spec['leaseTransitions']))
