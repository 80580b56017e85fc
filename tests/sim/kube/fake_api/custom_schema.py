# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Structural schemas of CustomResourceDefinitions: pruning, defaulting and validation, as apiextensions-apiserver does them.

``prune`` drops what the schema does not declare (k8s.io/apiextensions-apiserver pkg/apiserver/schema/pruning) and the
nulls of fields that are not ``nullable``; ``apply_defaults`` fills ``default`` values of absent properties
(schema/defaulting); ``validate`` checks the value validations of the OpenAPI v3 schema and reports field errors with the
paths, reasons and messages of kube-openapi's validator as ``validation.ValidateCustomResource`` turns them into
field errors: ``(cause reason, field, message)``, e.g.
``('FieldValueTypeInvalid', 'spec.pauseRequests[0]', 'Invalid value: "integer": spec.pauseRequests[0] in body must be of type string: "integer"')``.

Checked: type (object, array, string, integer, number, boolean), nullable, enum, required, properties, additionalProperties,
items, x-kubernetes-int-or-string, x-kubernetes-preserve-unknown-fields, x-kubernetes-embedded-resource, minItems, maxItems,
minLength, maxLength, pattern, minimum, maximum (and their exclusive forms), multipleOf, the formats date-time and date.
Not checked: anyOf / allOf / oneOf / not, CEL rules (x-kubernetes-validations), list-type map/set uniqueness,
minProperties / maxProperties, other formats.
"""

import copy
import json
import re

from .schema import OBJECT_META, prune_unknown

PRESERVE = 'x-kubernetes-preserve-unknown-fields'
INT_OR_STRING = 'x-kubernetes-int-or-string'
EMBEDDED = 'x-kubernetes-embedded-resource'
ROOT_KEPT = ('apiVersion', 'kind', 'metadata')
DATE_TIME = re.compile(r'^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$')
DATE = re.compile(r'^\d{4}-\d{2}-\d{2}$')
FORMATS = {'date-time': DATE_TIME, 'datetime': DATE_TIME, 'date': DATE}


def child(path, key):
    return path + '.' + key if path else key


def is_object_schema(schema):
    return schema.get('type') == 'object' or 'properties' in schema or 'additionalProperties' in schema


# --------------------------------------------------------------------------------------------
# Pruning and defaulting
# --------------------------------------------------------------------------------------------

def prune(value, schema, path, unknown, root=False):
    """``value`` without the fields ``schema`` does not declare; their paths go to ``unknown``."""
    if not isinstance(schema, dict) or schema.get(INT_OR_STRING):
        return value
    if isinstance(value, list):
        items = schema.get('items')
        if isinstance(items, dict):
            return [prune(item, items, '%s[%d]' % (path, index), unknown) for index, item in enumerate(value)]
        return value
    if not isinstance(value, dict) or not (is_object_schema(schema) or schema.get(PRESERVE) or root):
        return value
    properties = schema.get('properties') or {}
    extra = schema.get('additionalProperties')
    kept = {}
    for key, item in value.items():
        if root and key == 'metadata':
            kept[key] = prune_unknown(item, OBJECT_META, 'metadata', unknown) if isinstance(item, dict) else item
        elif (root or schema.get(EMBEDDED)) and key in ROOT_KEPT and key not in properties:
            kept[key] = item
        elif key in properties:
            if item is None and not properties[key].get('nullable'):
                continue
            kept[key] = prune(item, properties[key], child(path, key), unknown)
        elif isinstance(extra, dict):
            if item is None and not extra.get('nullable'):
                continue
            kept[key] = prune(item, extra, child(path, key), unknown)
        elif extra is True or schema.get(PRESERVE):
            kept[key] = item
        else:
            unknown.append(child(path, key))
    return kept


def apply_defaults(value, schema):
    """Fill the ``default`` of every absent property, in place, from the outside in."""
    if not isinstance(schema, dict):
        return value
    if isinstance(value, list) and isinstance(schema.get('items'), dict):
        for item in value:
            apply_defaults(item, schema['items'])
    elif isinstance(value, dict):
        properties = schema.get('properties') or {}
        for key, prop in properties.items():
            if key not in value and isinstance(prop, dict) and 'default' in prop:
                value[key] = copy.deepcopy(prop['default'])
        for key, item in value.items():
            if key in properties:
                apply_defaults(item, properties[key])
            elif isinstance(schema.get('additionalProperties'), dict):
                apply_defaults(item, schema['additionalProperties'])
    return value


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------

def json_type(value):
    """The JSON schema type kube-openapi infers for a decoded value."""
    if value is None:
        return 'null'
    if isinstance(value, bool):
        return 'boolean'
    if isinstance(value, int):
        return 'integer'
    if isinstance(value, float):
        return 'number'
    if isinstance(value, str):
        return 'string'
    if isinstance(value, list):
        return 'array'
    return 'object'


def go_value(value):
    """A bad value as a field error prints it (%q for strings, %v for numbers and booleans)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, float) and value == int(value) and abs(value) < 1e21:
        return str(int(value))
    if isinstance(value, (int, float)):
        return repr(value)
    if value is None:
        return 'null'
    return json.dumps(value, separators=(',', ':'), sort_keys=True)


def type_matches(wanted, value):
    actual = json_type(value)
    if wanted == actual:
        return True
    if wanted == 'number' and actual == 'integer':
        return True
    return wanted == 'integer' and actual == 'number' and float(value).is_integer()


def _invalid(path, value, message):
    return ('FieldValueInvalid', path, 'Invalid value: %s: %s' % (go_value(value), message))


def _type_invalid(path, wanted, value):
    actual = json_type(value)
    return ('FieldValueTypeInvalid', path, 'Invalid value: "%s": %s in body must be of type %s: "%s"' % (actual, path, wanted, actual))


def _check_type(value, schema, path):
    """The type error for ``value``, or None."""
    if value is None:
        if schema.get('nullable'):
            return None
        return _type_invalid(path, 'integer,string' if schema.get(INT_OR_STRING) else schema.get('type') or 'object', value)
    if schema.get(INT_OR_STRING):
        if json_type(value) in ('integer', 'string'):
            return None
        return _type_invalid(path, 'integer,string', value)
    wanted = schema.get('type')
    if wanted and not type_matches(wanted, value):
        return _type_invalid(path, wanted, value)
    return None


def same_value(first, second):
    """Equal as JSON values: a string never equals a number, a boolean never equals 0 or 1."""
    kinds = {json_type(first), json_type(second)}
    if kinds <= {'integer', 'number'}:
        return first == second
    return len(kinds) == 1 and first == second


def _enum(value, schema, path):
    allowed = schema.get('enum')
    if allowed is None or any(same_value(entry, value) for entry in allowed):
        return []
    quoted = [json.dumps(entry if isinstance(entry, str) else json.dumps(entry, separators=(',', ':'))) for entry in allowed]
    return [('FieldValueNotSupported', path, 'Unsupported value: %s: supported values: %s' % (go_value(value), ', '.join(quoted)))]


def _string(value, schema, path):
    causes = []
    length = len(value)
    if 'maxLength' in schema and length > schema['maxLength']:
        unit = 'byte' if schema['maxLength'] == 1 else 'bytes'
        causes.append(('FieldValueTooLong', path, 'Too long: may not be more than %d %s' % (schema['maxLength'], unit)))
    if 'minLength' in schema and length < schema['minLength']:
        causes.append(_invalid(path, value, '%s in body should be at least %d chars long' % (path, schema['minLength'])))
    if 'pattern' in schema and not re.search(schema['pattern'], value):
        causes.append(_invalid(path, value, "%s in body should match '%s'" % (path, schema['pattern'])))
    regex = FORMATS.get(schema.get('format'))
    if regex is not None and not regex.match(value):
        causes.append(('FieldValueTypeInvalid', path, 'Invalid value: %s: %s in body must be of type %s: %s'
                       % (go_value(value), path, schema['format'], go_value(value))))
    return causes


def _number(value, schema, path):
    causes = []
    if 'maximum' in schema:
        if schema.get('exclusiveMaximum') and value >= schema['maximum']:
            causes.append(_invalid(path, value, '%s in body should be less than %s' % (path, go_value(schema['maximum']))))
        elif value > schema['maximum']:
            causes.append(_invalid(path, value, '%s in body should be less than or equal to %s' % (path, go_value(schema['maximum']))))
    if 'minimum' in schema:
        if schema.get('exclusiveMinimum') and value <= schema['minimum']:
            causes.append(_invalid(path, value, '%s in body should be greater than %s' % (path, go_value(schema['minimum']))))
        elif value < schema['minimum']:
            causes.append(_invalid(path, value, '%s in body should be greater than or equal to %s' % (path, go_value(schema['minimum']))))
    if schema.get('multipleOf') and (value / schema['multipleOf']) != int(value / schema['multipleOf']):
        causes.append(_invalid(path, value, '%s in body should be a multiple of %s' % (path, go_value(schema['multipleOf']))))
    return causes


def _array(value, schema, path):
    causes = []
    if 'maxItems' in schema and len(value) > schema['maxItems']:
        unit = 'item' if schema['maxItems'] == 1 else 'items'
        causes.append(('FieldValueTooMany', path, 'Too many: %d: must have at most %d %s' % (len(value), schema['maxItems'], unit)))
    if 'minItems' in schema and len(value) < schema['minItems']:
        causes.append(_invalid(path, len(value), '%s in body should have at least %d items' % (path, schema['minItems'])))
    items = schema.get('items')
    if isinstance(items, dict):
        for index, item in enumerate(value):
            causes.extend(validate(item, items, '%s[%d]' % (path, index)))
    return causes


def _object(value, schema, path, root):
    causes = []
    properties = schema.get('properties') or {}
    for key in schema.get('required') or []:
        if key not in value:
            causes.append(('FieldValueRequired', child(path, key), 'Required value'))
    extra = schema.get('additionalProperties')
    for key, item in value.items():
        if root and key == 'metadata':
            continue
        if key in properties:
            causes.extend(validate(item, properties[key], child(path, key)))
        elif isinstance(extra, dict):
            causes.extend(validate(item, extra, child(path, key)))
    return causes


def validate(value, schema, path='', root=False):
    """Field errors of ``value`` against ``schema``: [(cause reason, field, message)]."""
    if not isinstance(schema, dict):
        return []
    wrong = _check_type(value, schema, path or '<root>')
    if wrong is not None:
        return [wrong]
    if value is None:
        return []
    causes = _enum(value, schema, path)
    if isinstance(value, str):
        causes.extend(_string(value, schema, path))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        causes.extend(_number(value, schema, path))
    elif isinstance(value, list):
        causes.extend(_array(value, schema, path))
    elif isinstance(value, dict):
        causes.extend(_object(value, schema, path, root))
    return causes
