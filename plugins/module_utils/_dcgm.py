# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parsers and helpers for NVIDIA DCGM's ``dcgmi`` command line tool.

Pure functions, standard library only (no Ansible imports), Python 3.8+:

* ``parse_diag_json(text)`` reads a ``dcgmi diag -j`` document (DCGM 3.x and 4.x schemas);
* ``parse_diag_text(text)`` reads the ``dcgmi diag`` text table (DCGM 3.x and 4.x layouts);
* ``parse_version_banner(text)`` reads ``dcgmi -v`` / ``dcgmi --version`` output (from ``_dcgm_banner``);
* ``classify_failure(rc, stdout, stderr)`` names the reason a ``dcgmi diag`` run produced no document;
* ``build_diag_argv(...)`` builds a validated argument list for ``dcgmi diag -r <run> -j``;
* ``process_timeout(run, timeout, command_timeout)`` is how long that process may run before it is killed.

Schemas, as written by NVIDIA's ``dcgmi/Diag.cpp`` and the diagnostic (``nvvs``):

* DCGM 3.x: top key ``DCGM GPU Diagnostic`` holding ``test_categories[].tests[].results[]``; a result
  names its GPUs with ``gpu_ids`` or ``gpu_id`` given as a string (``"0"``, ``"0,1,2,3"``), an integer,
  or not at all (system-wide Deployment checks); ``warnings`` are strings or objects with ``warning``
  (``warnings`` in 3.x Deployment entries); ``info`` is a list or one joined string; ``version`` and
  ``Driver Version Detected`` sit at the top level or inside ``DCGM GPU Diagnostic``; arrays may
  contain ``null`` (jsoncpp index gaps).  Statuses are ``Pass``/``Fail``/``Warn``/``Skip`` (dcgmi) or
  ``PASS``/``FAIL``/``WARN``/``SKIP`` (nvvs).
* DCGM 4.x: top key ``DCGM Diagnostic``; one result per entity (``entity_group``, ``entity_group_id``,
  ``entity_id``) plus a per-test ``test_summary``; ``entity_groups`` and ``metadata``
  (``version``, ``Driver Version Detected``) at the top level.
* Both: a run that could not start prints ``{"<top key>": {"runtime_error": ..., "version": ...}}``;
  ``--iterations N`` wraps the documents as ``{"iterations": [...], "Overall Result": ...}``.

Every lookup is defensive: odd input raises ``DcgmParseError`` (a ``ValueError``) with a clear message,
never ``KeyError``/``TypeError``.
"""

import json
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._command import escape_controls
# The version banner reader is in its own small file: gpu_facts reads the banner on every node and need not ship (and compile) this one.
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._dcgm_banner import _to_text
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._dcgm_banner import parse_version_banner  # noqa: F401  pylint: disable=unused-import

SCHEMA_VERSION = 1

KEY_V3 = 'DCGM GPU Diagnostic'
KEY_V4 = 'DCGM Diagnostic'

STATUSES = ('pass', 'fail', 'warn', 'skip')
# Aggregation order: fail > warn > pass > skip.
_RANK = {'skip': 0, 'pass': 1, 'warn': 2, 'fail': 3}

_STATUS_WORDS = {
    'pass': 'pass', 'passed': 'pass', 'ok': 'pass', 'success': 'pass', 'succeeded': 'pass',
    'fail': 'fail', 'failed': 'fail', 'failure': 'fail', 'error': 'fail',
    'warn': 'warn', 'warning': 'warn', 'warnings': 'warn', 'warned': 'warn',
    'partial pass': 'warn', 'partially passed': 'warn', 'partial': 'warn',
    'skip': 'skip', 'skipped': 'skip', 'not run': 'skip', 'notrun': 'skip', 'not_run': 'skip',
    'not-run': 'skip', 'not applicable': 'skip', 'n/a': 'skip', 'na': 'skip', 'none': 'skip',
}

# DCGM entity group ids (dcgm_fields.h, dcgm_field_entity_group_t).
_ENTITY_GROUP_NAMES = {
    1: 'GPU', 2: 'VGPU', 3: 'Switch', 4: 'GPU_I', 5: 'GPU_CI', 6: 'Link', 7: 'CPU', 8: 'CPU_Core',
}

# Values DCGM prints instead of a real serial / id.
_PLACEHOLDERS = frozenset(('', '<<<not_supported>>>', '<<<null>>>', '<<<not_found>>>', '<<<blank>>>', 'n/a'))

_MESSAGE_KEYS = ('warning', 'warnings', 'message', 'msg', 'error', 'test_details', 'info', 'description')

_DIGITS_RE = re.compile(r'^[0-9]+$')
_GPU_TOKEN_RE = re.compile(r'^(?:gpu)?[:#]?([0-9]+)$', re.IGNORECASE)
_TEST_NAME_RE = re.compile(r'^[A-Za-z0-9_ .-]+$')
_PARAM_NAME_RE = re.compile(r'^[A-Za-z0-9_ .-]+$')
_PARAM_VALUE_RE = re.compile(r'^[A-Za-z0-9_ .,:/+@%-]*$')


class DcgmParseError(ValueError):
    """The text is not a usable ``dcgmi`` document (malformed, truncated, unknown schema...)."""


class DcgmRuntimeError(DcgmParseError):
    """A well-formed ``dcgmi diag -j`` document that says the diagnostic could not run.

    ``runtime_error`` holds DCGM's own message, ``dcgm_version`` the version printed beside it.
    """

    def __init__(self, message, runtime_error=None, dcgm_version=None):
        super(DcgmRuntimeError, self).__init__(message)
        self.runtime_error = runtime_error
        self.dcgm_version = dcgm_version


# --------------------------------------------------------------------------- small helpers

def _scalar_text(value):
    """Stripped text of a JSON scalar (str/int/float); None for empty, containers, bools and None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        value = value.strip()
        return value or None
    return None


def _as_list(value):
    """A JSON array as a list; a lone object as a one-element list; anything else as []."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return [value]
    return []


def _as_int(value):
    """Non-negative integer from an int or a digit string; None otherwise (bools excluded)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, str) and _DIGITS_RE.match(value.strip()):
        return int(value.strip())
    return None


def normalize_status(raw):
    """Map a DCGM status string to ``pass``/``fail``/``warn``/``skip``.

    Accepts every spelling DCGM uses (``Pass``, ``PASS``, ``pass``, ``Skip``, ``SKIPPED``, ``Not Run``,
    ``Warn``, ``Warning``, text-table forms such as ``Pass - All`` or ``Fail - GPU: 0``).  Returns None
    for a status that is not recognised.
    """
    text = _scalar_text(raw)
    if text is None:
        return None
    text = re.split(r'\s+-\s+|:', text, maxsplit=1)[0]
    text = re.sub(r'\s+', ' ', text.strip().lower())
    if text in _STATUS_WORDS:
        return _STATUS_WORDS[text]
    first = text.split(' ')[0] if text else ''
    if first in ('pass', 'passed', 'fail', 'failed', 'warn', 'warning', 'skip', 'skipped'):
        return _STATUS_WORDS[first]
    return None


def _status(raw):
    """(normalised status, note) - unknown statuses count as ``warn`` and produce a note."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return 'skip', None
    status = normalize_status(raw)
    if status is None:
        return 'warn', 'unrecognised DCGM status %r' % (raw,)
    return status, None


def _worst(statuses, default='skip'):
    result = None
    for status in statuses:
        if result is None or _RANK[status] > _RANK[result]:
            result = status
    return default if result is None else result


def _message_of(item):
    """Text of one warning/info/error entry (a string or an object such as ``{"warning": ...}``), control characters escaped."""
    if isinstance(item, dict):
        for key in _MESSAGE_KEYS:
            text = _scalar_text(item.get(key))
            if text is not None:
                return escape_controls(text)
        return None
    text = _scalar_text(item)
    return escape_controls(text) if text is not None else None


def _messages(value):
    """List of message strings from a string, an object, or an array of either (nulls skipped)."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, list):
            out.extend(_messages(item))
            continue
        text = _message_of(item)
        if text is not None:
            out.append(text)
    return out


def _dedupe(items):
    seen = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def _gpu_ids(value):
    """GPU indexes from ``"0,1,2"``, ``"0"``, ``0``, ``[0, "1"]``, ``"GPU0"``; [] when none are named."""
    if value is None or isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        number = _as_int(value)
        return [] if number is None else [number]
    if isinstance(value, (list, tuple)):
        out = []
        for item in value:
            out.extend(_gpu_ids(item))
        return _dedupe(out)
    if isinstance(value, str):
        out = []
        for token in re.split(r'[\s,;]+', value.strip()):
            match = _GPU_TOKEN_RE.match(token)
            if match:
                out.append(int(match.group(1)))
        return _dedupe(out)
    return []


def _entity_group_name(result):
    group = _scalar_text(result.get('entity_group'))
    if group is not None and not _DIGITS_RE.match(group):
        return group
    group_id = _as_int(result.get('entity_group_id'))
    if group_id is None and group is not None:
        group_id = _as_int(group)
    return _ENTITY_GROUP_NAMES.get(group_id)


def _placeholder_free(value):
    text = _scalar_text(value)
    if text is None or text.lower() in _PLACEHOLDERS:
        return None
    return text


# --------------------------------------------------------------------------- JSON loading

def _json_start(text):
    """Index of the document's opening brace: the first line starting with ``{`` (after blanks)."""
    match = re.search(r'^[ \t\ufeff]*\{', text, re.MULTILINE)
    if match:
        return match.end() - 1
    index = text.find('{')
    if index >= 0:
        return index
    stripped = text.lstrip(' \t\r\n\ufeff')
    if stripped.startswith('['):
        return len(text) - len(stripped)
    return None


def _unclosed(text, start):
    """True when ``text[start:]`` ends inside a string or with unclosed ``{``/``[`` (and no mismatch)."""
    stack = []
    in_string = False
    escaped = False
    for char in text[start:]:
        if in_string:
            if escaped:
                escaped = False
            elif char == '\\':
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in '{[':
            stack.append('}' if char == '{' else ']')
        elif char in '}]':
            if not stack or stack.pop() != char:
                return False
            if not stack:
                return False
    return in_string or bool(stack)


def _truncated(text, start, exc):
    """Whether a JSON decode error comes from the document being cut off (not from bad syntax)."""
    if not _unclosed(text, start):
        return False
    if exc.msg.startswith('Unterminated string'):
        return True
    remainder = text[exc.pos:].strip()
    # Nothing left, or only the beginning of a literal/number (``tru``, ``12.``) at the very end.
    return remainder == '' or re.match(r'^[A-Za-z0-9.+-]+$', remainder) is not None


def _looks_like_text_table(text):
    return bool(re.search(r'^\|\s*Diagnostic\s*\|\s*Result\s*\|', text, re.MULTILINE)) or \
        'Successfully ran diagnostic for group' in text


def _load_json(text):
    if isinstance(text, (dict, list)):
        return text
    if text is None:
        raise DcgmParseError('no input: expected the JSON document printed by "dcgmi diag -j", got None')
    if not isinstance(text, (str, bytes, bytearray)):
        raise DcgmParseError('expected the text printed by "dcgmi diag -j", got a %s' % type(text).__name__)
    text = _to_text(text)
    if not text.strip():
        raise DcgmParseError('empty input: "dcgmi diag -j" printed nothing (no JSON document)')
    start = _json_start(text)
    if start is None:
        if _looks_like_text_table(text):
            raise DcgmParseError('not a JSON document: this is the text table of "dcgmi diag" '
                                 '(run it with -j, or read it with parse_diag_text)')
        first = text.strip().splitlines()[0][:120]
        raise DcgmParseError('not a dcgmi diag document: no JSON object found in the output '
                             '(it starts with %r)' % first)
    try:
        data, _end = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as exc:
        if _truncated(text, start, exc):
            end = len(text.rstrip())
            line = text.count('\n', 0, end) + 1
            column = end - (text.rfind('\n', 0, end) + 1) + 1
            raise DcgmParseError('truncated dcgmi diag JSON: the document stops at line %d column %d (char %d) '
                                 'before every object, array and string is closed (%s at line %d column %d)'
                                 % (line, column, end, exc.msg, exc.lineno, exc.colno))
        raise DcgmParseError('malformed JSON in dcgmi diag output: %s at line %d column %d (char %d)'
                             % (exc.msg, exc.lineno, exc.colno, exc.pos))
    except RecursionError:
        raise DcgmParseError('malformed JSON in dcgmi diag output: nested too deeply')
    return data


# --------------------------------------------------------------------------- diag documents

def _describe_keys(data):
    return '[%s]' % ', '.join(repr(str(key)) for key in sorted(data, key=str)) if data else '[] (an empty object)'


def _first_scalar(*candidates):
    for candidate in candidates:
        text = _scalar_text(candidate)
        if text is not None:
            return text
    return None


def _expand_result(result):
    """One DCGM result object -> list of parsed per-GPU/per-entity results."""
    status, note = _status(result.get('status', result.get('result')))
    warnings = _messages(result.get('warnings')) + _messages(result.get('warning')) + \
        _messages(result.get('errors')) + _messages(result.get('error'))
    info = _messages(result.get('info'))
    messages = _dedupe(warnings + info + ([note] if note else []))

    entries = []
    if any(key in result for key in ('entity_group', 'entity_group_id', 'entity_id')):
        group = _entity_group_name(result)
        entity_id = _as_int(result.get('entity_id'))
        is_gpu = group is not None and group.upper() == 'GPU'
        entries.append((entity_id if is_gpu else None, group, entity_id))
    elif 'gpu_ids' in result or 'gpu_id' in result:
        raw = result.get('gpu_ids') if 'gpu_ids' in result else result.get('gpu_id')
        ids = _gpu_ids(raw)
        for gpu in ids:
            entries.append((gpu, 'GPU', gpu))
        if not ids:
            entries.append((None, None, None))
    elif 'cpu_id' in result:
        entries.append((None, 'CPU', _as_int(result.get('cpu_id'))))
    else:
        entries.append((None, None, None))

    out = []
    for gpu, group, entity_id in entries:
        out.append({
            'gpu': gpu,
            'entity_group': group,
            'entity_id': entity_id,
            'status': status,
            'messages': list(messages),
            '_warnings': list(warnings),
        })
    return out


def _parse_test(test, category):
    if not isinstance(test, dict):
        return None
    name = _first_scalar(test.get('name'), test.get('test_name'), test.get('test')) or '(unnamed test)'
    results = []
    for result in _as_list(test.get('results')):
        if isinstance(result, dict):
            results.extend(_expand_result(result))

    summary = test.get('test_summary')
    summary_status = None
    summary_warnings = []
    summary_messages = []
    if isinstance(summary, dict):
        summary_status, note = _status(summary.get('status', summary.get('result')))
        if summary.get('status', summary.get('result')) is None:
            summary_status = None
        summary_warnings = _messages(summary.get('warnings')) + _messages(summary.get('errors'))
        summary_messages = _dedupe(summary_warnings + _messages(summary.get('info')) + ([note] if note else []))
    elif test.get('status') is not None:
        summary_status, note = _status(test.get('status'))
        summary_messages = [note] if note else []

    aggregate = _worst(result['status'] for result in results) if results else None
    if summary_status is not None and (aggregate is None or _RANK[summary_status] > _RANK[aggregate]):
        # The summary reports something no entity result shows (a system-wide finding, or no
        # per-entity results at all): record it as a result with no GPU.
        results.append({
            'gpu': None,
            'entity_group': None,
            'entity_id': None,
            'status': summary_status,
            'messages': list(summary_messages),
            '_warnings': list(summary_warnings),
        })

    return {
        'name': name,
        'category': category,
        'status': _worst(result['status'] for result in results),
        'results': results,
        'messages': summary_messages,
        '_summary_warnings': summary_warnings,
    }


def _finish(tests, schema, version, driver, runtime_error, entities):
    summary = dict((status, 0) for status in STATUSES)
    failures = []
    for test in tests:
        for result in test['results']:
            summary[result['status']] += 1
            if result['status'] == 'fail':
                text = '; '.join(result['_warnings']) or '; '.join(result['messages']) or \
                    '; '.join(test['_summary_warnings']) or '; '.join(test['messages']) or \
                    '%s failed' % test['name']
                failures.append({'test': test['name'], 'gpu': result['gpu'], 'message': text})
    for test in tests:
        test.pop('_summary_warnings', None)
        for result in test['results']:
            result.pop('_warnings', None)
    return {
        'schema': schema,
        'dcgm_version': version,
        'driver_version': driver,
        'passed': summary['fail'] == 0,
        'summary': summary,
        'tests': tests,
        'failures': failures,
        'runtime_error': runtime_error,
        'entities': entities,
    }


def _entities(data, root):
    out = []
    for group in _as_list(data.get('entity_groups')):
        if not isinstance(group, dict):
            continue
        name = _entity_group_name(group)
        for entity in _as_list(group.get('entities')):
            if isinstance(entity, dict):
                out.append({
                    'entity_group': name,
                    'entity_id': _as_int(entity.get('entity_id')),
                    'device_id': _placeholder_free(entity.get('device_id')),
                    'serial': _placeholder_free(entity.get('serial_num')),
                })
    if out:
        return out
    # DCGM 3.x: "GPU Device IDs": ["2330", ...] and "GPU Device Serials": {"0": "..."}
    for source in (data, root):
        ids = source.get('GPU Device IDs')
        serials = source.get('GPU Device Serials')
        serials = serials if isinstance(serials, dict) else {}
        if isinstance(ids, list):
            for index, device_id in enumerate(ids):
                out.append({
                    'entity_group': 'GPU',
                    'entity_id': index,
                    'device_id': _placeholder_free(device_id),
                    'serial': _placeholder_free(serials.get(str(index))),
                })
            return out
    return out


def _parse_single(data):
    """Parse one (non-iterated) diag document object."""
    if KEY_V4 in data:
        schema, key = '4', KEY_V4
    elif KEY_V3 in data:
        schema, key = '3', KEY_V3
    else:
        keys = _describe_keys(data)
        diag_like = any('diag' in str(k).lower() for k in data) or \
            any(k in data for k in ('test_categories', 'metadata', 'entity_groups', 'tests'))
        if diag_like:
            raise DcgmParseError('unknown dcgmi diag JSON schema: expected the top-level key %r (DCGM 4.x) or %r '
                                 '(DCGM 3.x); top-level keys found: %s' % (KEY_V4, KEY_V3, keys))
        raise DcgmParseError('not a dcgmi diag document: expected the top-level key %r (DCGM 4.x) or %r '
                             '(DCGM 3.x); top-level keys found: %s' % (KEY_V4, KEY_V3, keys))
    root = data.get(key)
    if root is None:
        root = {}
    if not isinstance(root, dict):
        raise DcgmParseError('unknown dcgmi diag JSON schema: %r holds a %s, not an object' % (key, type(root).__name__))

    metadata = data.get('metadata') if isinstance(data.get('metadata'), dict) else {}
    root_meta = root.get('metadata') if isinstance(root.get('metadata'), dict) else {}
    version = _first_scalar(metadata.get('version'), metadata.get('DCGM Version'), root_meta.get('version'),
                            data.get('version'), root.get('version'), data.get('DCGM Version'), root.get('DCGM Version'))
    driver = _first_scalar(metadata.get('Driver Version Detected'), metadata.get('driver_version'),
                           root_meta.get('Driver Version Detected'), data.get('Driver Version Detected'),
                           root.get('Driver Version Detected'), data.get('driver_version'), root.get('driver_version'))
    runtime_error = _first_scalar(root.get('runtime_error'), data.get('runtime_error'))

    categories = root.get('test_categories')
    if categories is None:
        hoisted = root.get('tests', data.get('tests'))
        categories = [{'category': None, 'tests': hoisted}] if hoisted is not None else []
    if not isinstance(categories, list):
        raise DcgmParseError('unknown dcgmi diag JSON schema: "test_categories" is a %s, not an array; keys inside %r: %s'
                             % (type(categories).__name__, key, _describe_keys(root)))

    tests = []
    for category in categories:
        if not isinstance(category, dict):
            continue
        name = _first_scalar(category.get('category'), category.get('name'))
        for test in _as_list(category.get('tests')):
            parsed = _parse_test(test, name)
            if parsed is not None:
                tests.append(parsed)

    if not any(test['results'] for test in tests):
        if runtime_error is not None:
            raise DcgmRuntimeError('dcgmi diag could not run the diagnostic: %s' % runtime_error,
                                   runtime_error=runtime_error, dcgm_version=version)
        raise DcgmParseError('dcgmi diag document without any test result (keys inside %r: %s)'
                             % (key, _describe_keys(root)))
    if runtime_error is not None:
        tests.append({
            'name': 'runtime_error', 'category': None, 'status': 'fail', 'messages': [runtime_error],
            '_summary_warnings': [runtime_error],
            'results': [{'gpu': None, 'entity_group': None, 'entity_id': None, 'status': 'fail',
                         'messages': [runtime_error], '_warnings': [runtime_error]}],
        })
    return schema, version, driver, runtime_error, tests, _entities(data, root)


def parse_diag_json(text):
    """Parse the JSON document printed by ``dcgmi diag -j`` (DCGM 3.x or 4.x).

    ``text`` may be str or bytes (or an already decoded dict); text printed before the document is
    skipped.  Returns::

        {'schema': '3'|'4', 'dcgm_version': str|None, 'driver_version': str|None,
         'passed': bool, 'summary': {'pass': n, 'fail': n, 'warn': n, 'skip': n},
         'tests': [{'name', 'category', 'status', 'results': [{'gpu', 'entity_group', 'entity_id',
                    'status', 'messages'}], 'messages'}],
         'failures': [{'test', 'gpu', 'message'}],
         'runtime_error': str|None, 'entities': [{'entity_group', 'entity_id', 'device_id', 'serial'}]}

    Statuses are normalised to ``pass``/``fail``/``warn``/``skip``; a 3.x result covering several GPUs
    (``"gpu_ids": "0,1,2"``) becomes one result per GPU; ``gpu`` is None for system-wide results.  A test
    whose ``test_summary`` is worse than all its entity results gets one extra system-wide result with
    the summary's status, so ``passed`` is True exactly when no result is ``fail`` and ``failures`` holds
    one entry per failed result.  ``summary`` counts results.

    Raises ``DcgmParseError`` for malformed, truncated or unknown input and ``DcgmRuntimeError`` (a
    ``DcgmParseError``) for a document that only reports that the diagnostic could not run.
    """
    data = _load_json(text)
    if not isinstance(data, dict):
        raise DcgmParseError('not a dcgmi diag document: the top-level JSON value is a %s, expected an object '
                             'with the key %r (DCGM 4.x) or %r (DCGM 3.x)' % (type(data).__name__, KEY_V4, KEY_V3))

    iterations = data.get('iterations')
    if isinstance(iterations, list) and KEY_V3 not in data and KEY_V4 not in data:
        return _parse_iterations(data, iterations)

    schema, version, driver, runtime_error, tests, entities = _parse_single(data)
    return _finish(tests, schema, version, driver, runtime_error, entities)


def _parse_iterations(data, iterations):
    """``dcgmi diag --iterations N -j``: ``{"iterations": [doc, ...], "Overall Result": ...}``."""
    schema = version = driver = runtime_error = None
    entities = []
    tests = []
    errors = []
    runtime_failure = None
    for number, item in enumerate(iterations, 1):
        if not isinstance(item, dict) or not item:
            continue
        try:
            parsed = _parse_single(item)
        except DcgmRuntimeError as exc:
            runtime_failure = runtime_failure or exc
            errors.append('iteration %d: %s' % (number, exc))
            continue
        except DcgmParseError as exc:
            errors.append('iteration %d: %s' % (number, exc))
            continue
        schema = schema or parsed[0]
        version = version or parsed[1]
        driver = driver or parsed[2]
        runtime_error = runtime_error or parsed[3]
        entities = entities or parsed[5]
        for test in parsed[4]:
            test['iteration'] = number
            tests.append(test)
    overall, _note = _status(data.get('Overall Result'))
    warning = _first_scalar(data.get('warning'), data.get('Warning'))
    if not tests:
        if runtime_failure is not None:
            raise runtime_failure
        detail = '; '.join(errors) or warning or 'no iteration holds test results'
        raise DcgmParseError('dcgmi diag --iterations document without any test result: %s' % detail)
    if data.get('Overall Result') is not None and overall == 'fail' and \
            not any(r['status'] == 'fail' for t in tests for r in t['results']):
        message = warning or 'dcgmi reported "Overall Result": %s' % data.get('Overall Result')
        tests.append({
            'name': 'Overall Result', 'category': None, 'status': 'fail', 'messages': [message],
            '_summary_warnings': [message],
            'results': [{'gpu': None, 'entity_group': None, 'entity_id': None, 'status': 'fail',
                         'messages': [message], '_warnings': [message]}],
        })
    result = _finish(tests, schema, version, driver, runtime_error, entities)
    result['iterations'] = len(iterations)
    return result


# --------------------------------------------------------------------------- text tables

# dcgmi's table: "| " + 25-char name + " | " + 47-char cell + "|", 78 characters; verbose messages are
# wrapped every 45 characters (DATA_INFO_TAG_LEN), so a wrapped chunk is line[30:75].
_TABLE_WIDTH = 78
_WRAP_START = 30
_WRAP_END = 75
_ROW_RE = re.compile(r'^\|(.*?)\|(.*)\|\s*$')
_SECTION_RE = re.compile(r'^[|+]-+\s+([A-Za-z][A-Za-z0-9 /_-]*?)\s+-+\+')
_HEADER_RE = re.compile(r'^\|\s*Diagnostic\s*\|\s*Result\s*\|\s*$', re.MULTILINE)
_ENTITY_LINE_RE = re.compile(r'^(GPU|CPU|GPU_I|GPU_CI|Switch|Link|CPU_Core)\s*([0-9]+)\s*:\s*(\S.*)$', re.IGNORECASE)
_GROUP_LINE_RE = re.compile(r'^(Pass|Fail|Warn|Skip)\s*-\s*GPUs?\s*:\s*([0-9,\s]+)$', re.IGNORECASE)
_DETAIL_LABEL_RE = re.compile(r'^(Warning|Error|Info)(?:\s*:\s*([A-Za-z_]+?)\s*([0-9]+))?$', re.IGNORECASE)
_MESSAGE_GPU_RE = re.compile(r'^GPU\s*([0-9]+)\b')


def _cells(line):
    """(name, value, wrap_chunk) of a table row; None for borders and other lines."""
    line = line.rstrip('\r\n')
    if len(line) >= _TABLE_WIDTH and line[0] == '|' and line[28] == '|' and line[_TABLE_WIDTH - 1] == '|':
        return line[1:28].strip(), line[29:_TABLE_WIDTH - 1].strip(), line[_WRAP_START:_WRAP_END]
    match = _ROW_RE.match(line.rstrip())
    if match is None:
        return None
    value = match.group(2).strip()
    return match.group(1).strip(), value, value + ' '


def _split_tables(text):
    """Lines of each table in ``text`` (a table starts at its ``| Diagnostic | Result |`` header)."""
    tables = []
    for line in text.splitlines():
        if _HEADER_RE.match(line.rstrip()):
            tables.append([])
        elif tables:
            tables[-1].append(line)
    return tables


def _new_text_test(name, value, category):
    test = {'name': name, 'category': category, 'raw': value, 'status': normalize_status(value),
            'entities': [], 'details': []}
    group = _GROUP_LINE_RE.match(value)
    if group:
        status = normalize_status(group.group(1))
        test['entities'].extend((int(gpu), status, 'GPU', int(gpu)) for gpu in re.findall(r'[0-9]+', group.group(2)))
    return test


def _text_table(lines):
    """Parse the lines of one table -> (version, driver, tests, layout)."""
    version = driver = None
    category = None
    tests = []
    test = None
    detail = None  # [kind, entity_id or None, raw text] of the Warning/Info row being continued
    layout = None
    for line in lines:
        section = _SECTION_RE.match(line)
        if section:
            category = section.group(1).strip()
            test = detail = None
            continue
        cells = _cells(line)
        if cells is None:
            continue
        name, value, chunk = cells
        if category is not None and category.lower() == 'metadata':
            if name.lower() == 'dcgm version':
                version = value or None
            elif name.lower() == 'driver version detected':
                driver = value or None
            continue
        label = _DETAIL_LABEL_RE.match(name) if name else None
        if label and test is not None:
            entity_id = int(label.group(3)) if label.group(3) else None
            detail = [label.group(1).lower(), entity_id, chunk]
            test['details'].append(detail)
            continue
        if name:
            test = _new_text_test(name, value, category)
            tests.append(test)
            detail = None
            continue
        if test is None:
            continue
        entity = _ENTITY_LINE_RE.match(value)
        group = _GROUP_LINE_RE.match(value)
        if entity:
            layout = '4'
            kind = entity.group(1).upper()
            number = int(entity.group(2))
            status = normalize_status(entity.group(3))
            test['entities'].append((number if kind == 'GPU' else None, status, kind, number))
            detail = None
        elif group:
            layout = layout or '3'
            status = normalize_status(group.group(1))
            test['entities'].extend((int(gpu), status, 'GPU', int(gpu)) for gpu in re.findall(r'[0-9]+', group.group(2)))
            detail = None
        elif detail is not None:
            detail[2] += chunk
    return version, driver, tests, layout


def _detail_messages(test):
    """[(kind, entity_id or None, message)] with 3.x "GPU n ..." prefixes mapped to entity ids."""
    out = []
    for kind, entity_id, raw in test['details']:
        message = raw.strip()
        if not message:
            continue
        if entity_id is None:
            prefix = _MESSAGE_GPU_RE.match(message)
            if prefix:
                entity_id = int(prefix.group(1))
        out.append((kind, entity_id, message))
    return out


def _text_results(test):
    details = _detail_messages(test)
    all_warnings = [m for kind, _e, m in details if kind in ('warning', 'error')]
    all_messages = [m for _k, _e, m in details]
    results = []
    for gpu, status, group, entity_id in test['entities']:
        mine = [(kind, m) for kind, e, m in details if e == entity_id]
        warnings = [m for kind, m in mine if kind in ('warning', 'error')]
        results.append({'gpu': gpu, 'entity_group': group, 'entity_id': entity_id, 'status': status or 'warn',
                        'messages': [m for _k, m in mine], '_warnings': warnings})
    if not results:
        status = test['status'] or ('skip' if not test['raw'] else 'warn')
        results.append({'gpu': None, 'entity_group': None, 'entity_id': None, 'status': status,
                        'messages': all_messages, '_warnings': all_warnings})
    elif test['status'] is not None and _RANK[test['status']] > _RANK[_worst(r['status'] for r in results)]:
        results.append({'gpu': None, 'entity_group': None, 'entity_id': None, 'status': test['status'],
                        'messages': all_messages, '_warnings': all_warnings})
    return results, all_warnings, [m for _k, e, m in details if e is None]


def parse_diag_text(text):
    """Parse the text table printed by ``dcgmi diag`` (without ``-j``), DCGM 3.x or 4.x layout.

    Returns the structure of :func:`parse_diag_json` (``entities`` empty, ``runtime_error`` None).
    3.x rows aggregate GPUs: ``Pass - All``/``Skip - All`` and the Deployment rows give one
    system-wide result (gpu None, the table does not say which GPUs ran), ``Pass - GPU: 1`` /
    ``Fail - GPUs: 0, 2`` give one result per GPU.  4.x rows list one ``GPUn: Status`` line per GPU.
    Wrapped ``Warning``/``Info`` rows are re-joined and attached to their GPU (``Warning: GPU0`` in
    4.x, a leading ``GPU 0`` in 3.x).  Several tables (``--iterations``, ``srun``/``pdsh`` output) are
    all read; each test then carries a ``table`` index.  Raises ``DcgmParseError`` when no table is found.
    """
    text = _to_text(text)
    tables = _split_tables(text)
    if not tables:
        if text.lstrip().startswith('{'):
            raise DcgmParseError('not a dcgmi diag text table: this looks like JSON, use parse_diag_json')
        raise DcgmParseError('not a dcgmi diag text table: no "| Diagnostic | Result |" header found')
    version = driver = layout = None
    tests = []
    for number, lines in enumerate(tables, 1):
        t_version, t_driver, t_tests, t_layout = _text_table(lines)
        version = version or t_version
        driver = driver or t_driver
        layout = layout or t_layout
        for raw in t_tests:
            results, warnings, general = _text_results(raw)
            test = {'name': raw['name'], 'category': raw['category'],
                    'status': _worst(r['status'] for r in results), 'results': results,
                    'messages': general, '_summary_warnings': warnings}
            if len(tables) > 1:
                test['table'] = number
            tests.append(test)
    if not tests:
        raise DcgmParseError('dcgmi diag text table without any test row')
    schema = layout or '3'
    major = (version or '').split('.')[0]
    if _DIGITS_RE.match(major):
        schema = '4' if int(major) >= 4 else '3'
    result = _finish(tests, schema, version, driver, None, [])
    if len(tables) > 1:
        result['tables'] = len(tables)
    return result


# --------------------------------------------------------------------------- failures

# dcgmReturn_t values (dcgm_structs.h) that dcgmi returns as its exit status (value & 0xff).
_RC_REASONS = {
    -21: 'hostengine_unreachable',  # DCGM_ST_CONNECTION_NOT_VALID
    -34: 'gpus_busy',  # DCGM_ST_IN_USE
    -39: 'gpus_busy',  # DCGM_ST_DIAG_ALREADY_RUNNING
    -54: 'gpus_busy',  # DCGM_ST_PAUSED
    -6: 'not_supported',  # DCGM_ST_NOT_SUPPORTED
    -22: 'not_supported',  # DCGM_ST_GPU_NOT_SUPPORTED
    -23: 'not_supported',  # DCGM_ST_GROUP_INCOMPATIBLE
    -44: 'not_supported',  # DCGM_ST_INSUFFICIENT_DRIVER_VERSION
    -11: 'diag_failed',  # DCGM_ST_TIMEOUT
    -30: 'diag_failed',  # DCGM_ST_NVVS_ERROR
    -40: 'diag_failed',  # DCGM_ST_DIAG_BAD_JSON
    -41: 'diag_failed',  # DCGM_ST_DIAG_BAD_LAUNCH
    -43: 'diag_failed',  # DCGM_ST_DIAG_THRESHOLD_EXCEEDED
    -50: 'diag_failed',  # DCGM_ST_PLUGIN_EXCEPTION
    -51: 'diag_failed',  # DCGM_ST_NVVS_ISOLATE_ERROR
    -53: 'diag_failed',  # DCGM_ST_NVVS_KILLED
}

# errorString() texts (dcgmlib) for the codes above, used when dcgmi printed nothing.
_RC_TEXT = {
    -6: 'Feature not supported',
    -11: 'Timeout',
    -21: 'Host engine connection invalid/disconnected',
    -22: 'This GPU is not supported by DCGM',
    -23: 'The GPUs of this group are incompatible with each other for the requested operation',
    -30: 'DCGM GPU Diagnostic returned an error',
    -34: 'The requested operation could not be completed because the affected resource is in use',
    -39: 'A diag instance is already running, cannot run a new diag until the current one finishes',
    -40: 'The GPU Diagnostic returned Json that cannot be parsed.',
    -41: 'Error while launching the GPU Diagnostic.',
    -43: 'A field value met or exceeded the error threshold.',
    -44: 'The installed driver version is insufficient for this API',
    -50: 'Exception thrown from a diagnostic plugin',
    -51: 'The diagnostic returned an error that indicates the need to drain the GPU',
    -53: 'The NVVS process was killed by a signal',
    -54: 'The hostengine and all modules are paused',
}

_FAILURE_PATTERNS = (
    ('hostengine_unreachable', re.compile(
        r'unable to establish a connection to the specified host'
        r'|unable to connect to host ?engine'
        r'|host ?engine connection (?:is )?invalid'
        r'|connection to the host ?engine is not valid'
        r'|unable to start an embedded host ?engine'
        r'|error connecting to nv-hostengine'
        r'|DCGM_ST_CONNECTION_NOT_VALID', re.IGNORECASE)),
    ('gpus_busy', re.compile(
        r'affected resource is in use'
        r'|resource (?:is )?in use'
        r'|a diag instance is already running'
        r'|diag(?:nostic)? (?:is )?already running'
        r'|in use by another (?:process|client|user)'
        r'|\bGPUs? (?:is|are) (?:busy|in use)'
        r'|busy or unavailable'
        r'|could not be run while DCGM is paused'
        r'|modules are paused'
        r'|DCGM_ST_IN_USE|DCGM_ST_DIAG_ALREADY_RUNNING|DCGM_ST_PAUSED', re.IGNORECASE)),
    ('not_supported', re.compile(
        r'recommended driver is not being used'
        r'|feature not supported'
        r'|not supported by DCGM'
        r'|unsupported GPU'
        r'|homogeneous group of GPUs'
        r'|incompatible with each other'
        r'|driver version is insufficient'
        r'|not supported on this (?:device|GPU|platform|system)'
        r'|DCGM_ST_NOT_SUPPORTED|DCGM_ST_GPU_NOT_SUPPORTED|DCGM_ST_GROUP_INCOMPATIBLE', re.IGNORECASE)),
    ('diag_failed', re.compile(
        r'unable to complete diagnostic'
        r'|DCGM GPU Diagnostic returned an error'
        r'|indicates the need (?:to drain|for isolation)'
        r'|error while launching the (?:DCGM )?GPU Diagnostic'
        r'|returned JSON that cannot be parsed'
        r'|NVVS (?:process )?was killed'
        r'|could not stop the launched diagnostic'
        r'|exception thrown from a diagnostic plugin'
        r'|met or exceeded the error threshold'
        r'|DCGM_ST_NVVS_ERROR|DCGM_ST_NVVS_ISOLATE_ERROR|DCGM_ST_DIAG_BAD_LAUNCH|DCGM_ST_TIMEOUT', re.IGNORECASE)),
)


def _dcgm_code(rc):
    """dcgmReturn_t from a process exit status (dcgmi exits with the negative code & 0xff)."""
    if isinstance(rc, bool) or not isinstance(rc, int):
        try:
            rc = int(str(rc).strip())
        except (TypeError, ValueError):
            return None
    if rc < 0:
        return rc
    if 128 < rc < 256:
        return rc - 256
    return None


def _output_lines(*texts):
    lines = []
    for text in texts:
        for line in _to_text(text).splitlines():
            line = line.strip()
            if line and line not in lines:
                lines.append(line)
    return lines


def classify_failure(rc, stdout, stderr):
    """Classify a ``dcgmi diag`` run whose output is not a usable diag document.

    Returns ``{'reason', 'message', 'dcgm_status'}``; ``reason`` is one of ``hostengine_unreachable``,
    ``gpus_busy``, ``not_supported``, ``diag_failed`` or ``dcgmi_failed`` and ``message`` is the tool's
    own lines that led to it (the ``runtime_error`` of a JSON error document included).  ``dcgm_status``
    is the DCGM return code decoded from the exit status (dcgmi exits with ``dcgmReturn_t & 0xff``,
    e.g. 226 = -30 ``DCGM_ST_NVVS_ERROR``), or None; it decides the reason when no text matches.
    A parseable document with failed tests gives ``diag_failed`` listing the failures.
    """
    out = _to_text(stdout)
    err = _to_text(stderr)
    code = _dcgm_code(rc)
    runtime_lines = []
    parse_problem = None
    document = None
    if '{' in out:
        try:
            document = parse_diag_json(out)
        except DcgmRuntimeError as exc:
            runtime_lines = _output_lines(exc.runtime_error)
        except DcgmParseError as exc:
            if _json_start(out) is not None and out.strip().startswith(('{', '[')):
                parse_problem = str(exc)
    elif _HEADER_RE.search(out):
        try:
            document = parse_diag_text(out)
        except DcgmParseError:
            document = None
    if document is not None and document['failures']:
        message = '\n'.join('%s%s: %s' % (f['test'], '' if f['gpu'] is None else ' (GPU %s)' % f['gpu'], f['message'])
                            for f in document['failures'])
        return {'reason': 'diag_failed', 'message': message, 'dcgm_status': code}

    use_stdout = document is None and not runtime_lines and parse_problem is None
    lines = runtime_lines + _output_lines(err, out if use_stdout else '')
    for reason, pattern in _FAILURE_PATTERNS:
        matched = [line for line in lines if pattern.search(line)]
        if matched:
            return {'reason': reason, 'message': '\n'.join(matched), 'dcgm_status': code}
    if runtime_lines:
        return {'reason': 'diag_failed', 'message': '\n'.join(runtime_lines), 'dcgm_status': code}

    reason = _RC_REASONS.get(code, 'dcgmi_failed')
    error_lines = [line for line in lines if re.search(r'(?i)\berr(?:or)?\b', line)]
    if error_lines:
        message = '\n'.join(error_lines)
    elif lines:
        message = '\n'.join(lines[-5:])
    elif parse_problem is not None:
        message = parse_problem
    elif document is not None:
        message = 'dcgmi exited with status %s although its diag document reports no failed test' % (rc,)
    elif code in _RC_TEXT:
        message = 'dcgmi exited with status %s (%s) and printed nothing' % (rc, _RC_TEXT[code])
    else:
        message = 'dcgmi exited with status %s and printed nothing' % (rc,)
    if parse_problem is not None and message != parse_problem:
        message = '%s\n%s' % (message, parse_problem)
    return {'reason': reason, 'message': message, 'dcgm_status': code}


# --------------------------------------------------------------------------- argv

def _check_text_arg(value, what):
    if not isinstance(value, str) or not value.strip():
        raise ValueError('%s must be a non-empty string, got %r' % (what, value))
    if any(char in value for char in '\x00\n\r'):
        raise ValueError('%s must not contain NUL or newline characters: %r' % (what, value))
    return value


def _run_value(run):
    if isinstance(run, bool):
        raise ValueError('run must be a level 1-4 or test name(s), got %r' % (run,))
    if isinstance(run, int):
        if not 1 <= run <= 4:
            raise ValueError('run level must be between 1 and 4, got %r' % (run,))
        return str(run)
    if isinstance(run, str):
        names = run.split(',')
    elif isinstance(run, (list, tuple)):
        names = []
        for item in run:
            if isinstance(item, bool) or not isinstance(item, (str, int)):
                raise ValueError('invalid test name %r in run %r' % (item, run))
            names.extend(str(item).split(','))
    else:
        raise ValueError('run must be a level 1-4, a test name, or a list of test names, got %r' % (run,))
    names = [name.strip() for name in names]
    if not names or not any(names):
        raise ValueError('run must name at least one test or a level 1-4, got %r' % (run,))
    for name in names:
        if not name or not _TEST_NAME_RE.match(name) or name.startswith('-'):
            raise ValueError('invalid test name %r in run %r (allowed: letters, digits, "_", " ", ".", "-")' % (name, run))
    if len(names) == 1 and _DIGITS_RE.match(names[0]):
        level = int(names[0])
        if not 1 <= level <= 4:
            raise ValueError('run level must be between 1 and 4, got %r' % (run,))
        return str(level)
    for name in names:
        if _DIGITS_RE.match(name):
            raise ValueError('run level %r cannot be combined with test names in %r' % (name, run))
    return ','.join(names)


def _gpu_list(gpus):
    if isinstance(gpus, bool):
        raise ValueError('gpus must be a list of GPU indexes, got %r' % (gpus,))
    if isinstance(gpus, int):
        gpus = [gpus]
    elif isinstance(gpus, str):
        gpus = [item.strip() for item in gpus.split(',') if item.strip()]
    elif not isinstance(gpus, (list, tuple)):
        raise ValueError('gpus must be a list of GPU indexes, got %r' % (gpus,))
    out = []
    for gpu in gpus:
        number = None if isinstance(gpu, bool) else _as_int(gpu)
        if number is None:
            raise ValueError('invalid GPU index %r in gpus %r (expected integers >= 0)' % (gpu, gpus))
        if number not in out:
            out.append(number)
    return ','.join(str(number) for number in out)


def _param_value(value, name):
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str) and _PARAM_VALUE_RE.match(value):
        return value
    raise ValueError('invalid value %r for parameter %r (allowed: letters, digits, " _.,:/+@%%-"; no ";" or "=")'
                     % (value, name))


def build_diag_argv(dcgmi_path, run, config=None, gpus=None, timeout=None, parameters=None):
    """Argument list for ``dcgmi diag -r <run> [...] -j`` (never a shell string).

    ``run``: level 1-4 (int or digit string) or test names (comma-separated string or list, each
    matching ``^[A-Za-z0-9_ .-]+$``); ``config`` -> ``-c FILE``; ``gpus`` (list of ints) -> ``-i 0,1``;
    ``timeout`` (seconds, int >= 1) -> ``--timeout N``; ``parameters`` (dict) -> ``-p name=value;...``.
    Raises ``ValueError`` naming the bad value.
    """
    argv = [_check_text_arg(dcgmi_path, 'dcgmi_path'), 'diag', '-r', _run_value(run)]
    if config is not None:
        if isinstance(config, str) and config.startswith('-'):
            raise ValueError('config must be a file path, not an option: %r' % (config,))
        argv.extend(['-c', _check_text_arg(config, 'config')])
    if gpus is not None:
        gpu_list = _gpu_list(gpus)
        if gpu_list:
            argv.extend(['-i', gpu_list])
    if timeout is not None:
        seconds = None if isinstance(timeout, bool) else _as_int(timeout)
        if seconds is None or seconds < 1:
            raise ValueError('timeout must be a whole number of seconds >= 1, got %r' % (timeout,))
        argv.extend(['--timeout', str(seconds)])
    if parameters:
        if not isinstance(parameters, dict):
            raise ValueError('parameters must be a dict of name: value, got %r' % (parameters,))
        pairs = []
        for name in sorted(parameters, key=str):
            if not isinstance(name, str) or not _PARAM_NAME_RE.match(name):
                raise ValueError('invalid parameter name %r (allowed: letters, digits, "_", " ", ".", "-")' % (name,))
            pairs.append('%s=%s' % (name, _param_value(parameters[name], name)))
        argv.extend(['-p', ';'.join(pairs)])
    argv.append('-j')
    return argv


# Seconds dcgmi diag may run by level when no limit is given (NVIDIA: level 1 seconds, 2 about two minutes,
# 3 about 30 minutes, 4 one to two hours); a list of tests gets the level-3 limit.
PROCESS_TIMEOUTS = {'1': 600, '2': 1800, '3': 5400, '4': 10800}
# Seconds beyond dcgmi's own --timeout before the process is killed (the diagnostic stops and reports).
PROCESS_MARGIN = 120


def process_timeout(run, timeout=None, command_timeout=None):
    """Seconds the ``dcgmi diag`` process may run: ``command_timeout`` when given, else ``timeout`` (dcgmi's own
    ``--timeout``) plus ``PROCESS_MARGIN``, else the limit of the run level (``PROCESS_TIMEOUTS``).
    Raises ValueError for a limit below one second."""
    for name, value in (('command_timeout', command_timeout), ('timeout', timeout)):
        if value is None:
            continue
        seconds = None if isinstance(value, bool) else _as_int(value)
        if seconds is None or seconds < 1:
            raise ValueError('%s must be a whole number of seconds >= 1, got %r' % (name, value))
        return seconds if name == 'command_timeout' else seconds + PROCESS_MARGIN
    return PROCESS_TIMEOUTS.get(_run_value(run), PROCESS_TIMEOUTS['3'])
