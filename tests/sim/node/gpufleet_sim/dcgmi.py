# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fake ``dcgmi`` (DCGM command line): ``-v``/``--version``, ``diag`` and ``discovery -l``.

The DCGM version is the installed package's: ``datacenter-gpu-manager-4-core`` (4.x, JSON top key
``DCGM Diagnostic`` with per-entity results) or ``datacenter-gpu-manager`` (3.x, ``DCGM GPU
Diagnostic`` with ``test_categories[].tests[].results[].gpu_id``), as written by NVIDIA's
``dcgmi/Diag.cpp`` of those releases (jsoncpp styled output, TAB indentation).  Run levels follow
``NvidiaValidationSuite::FillTestVectors``: 1 software; 2 adds memory and pcie; 3 adds diagnostic,
memory bandwidth, targeted stress and targeted power (3.x: plus a skipped EUD test; 4.1 and later:
plus nvbandwidth on the GPUs it supports); 4 adds memtest and pulse test.

Fault ``diag_fail`` (``level``, ``test``, ``gpu``) makes that test fail on that GPU with the real
DCGM message of that kind of failure; dcgmi then exits 226 (``DCGM_ST_NVVS_ERROR``) or, for
errors DCGM ranks "isolate" (memory mismatch, faulty memory), 205 (``DCGM_ST_NVVS_ISOLATE_ERROR``).
Without a usable driver (none loaded, version mismatch) the host engine is not running: dcgmi
prints the real connection error and exits 235 (``DCGM_ST_CONNECTION_NOT_VALID``).
"""

import hashlib
import json
import os
import sys

from gpufleet_sim import daemon
from gpufleet_sim import fault_table
from gpufleet_sim import state

PACKAGES = ('datacenter-gpu-manager-4-core', 'datacenter-gpu-manager')

KEY_V3 = 'DCGM GPU Diagnostic'
KEY_V4 = 'DCGM Diagnostic'

DCGM_ST_OK = 0
DCGM_ST_NVVS_ERROR = -30
DCGM_ST_NVVS_ISOLATE_ERROR = -51
DCGM_ST_CONNECTION_NOT_VALID = -21
DCGM_ST_GPU_IS_LOST = -18
DCGM_ST_BADPARAM = -1

ERROR_STRINGS = {
    DCGM_ST_NVVS_ERROR: 'DCGM GPU Diagnostic returned an error',
    DCGM_ST_NVVS_ISOLATE_ERROR: 'The diagnostic returned an error that indicates the need to drain the GPU',
    DCGM_ST_GPU_IS_LOST: 'GPU is lost',
    DCGM_ST_BADPARAM: 'Bad parameter passed to function',
    DCGM_ST_CONNECTION_NOT_VALID: 'Host engine connection invalid/disconnected',
}

CONNECTION_ERROR = ('Error: unable to establish a connection to the specified host: localhost\n'
                    'Error: Unable to connect to host engine. Host engine connection invalid/disconnected.')

DEFAULT_GROUP = 2147483647  # DCGM_GROUP_ALL_GPUS

# Canonical (4.x) test names -> (3.x display name, category, level it joins).
TESTS = {
    'software': ('Deployment', 'Deployment', 1),
    'memory': ('GPU Memory', 'Hardware', 2),
    'pcie': ('PCIe', 'Integration', 2),
    'diagnostic': ('Diagnostic', 'Hardware', 3),
    'eud': ('EUD Test', 'Hardware', 3),
    'nvbandwidth': ('NVBandwidth', 'Hardware', 3),
    'memory_bandwidth': ('Memory Bandwidth', 'Stress', 3),
    'targeted_stress': ('Targeted Stress', 'Stress', 3),
    'targeted_power': ('Targeted Power', 'Stress', 3),
    'sm_stress': ('SM Stress', 'Stress', 0),
    'memtest': ('Memtest', 'Hardware', 4),
    'pulse_test': ('Pulse Test', 'Hardware', 4),
}
_SUITES = {'short': 1, 'quick': 1, 'medium': 2, 'long': 3, 'xlong': 4}
_ALIASES = {
    'gpu memory': 'memory', 'gpu_memory': 'memory', 'pci': 'pcie', 'targeted stress': 'targeted_stress',
    'targeted power': 'targeted_power', 'memory bandwidth': 'memory_bandwidth', 'memory stress': 'memtest',
    'pulse test': 'pulse_test', 'sm stress': 'sm_stress', 'eud test': 'eud', 'deployment': 'software',
    'input edpp': 'pulse_test',
}
# 3.x Deployment checks (Diag.cpp levelOneTests without the never-run CUDA toolkit check).
DEPLOYMENT_V3 = ('Denylist', 'NVML Library', 'CUDA Main Library', 'Permissions and OS Blocks', 'Persistence Mode',
                 'Environment Variables', 'Page Retirement/Row Remap', 'Graphics Processes', 'Inforom')
# GPUs the NVBandwidth plugin runs on by default (DCGM documentation, supported products).
NVBANDWIDTH_MODELS = ('NVIDIA H100 80GB HBM3', 'NVIDIA L40S', 'NVIDIA H200')

# test -> (error id, priority isolate?, category, severity, message format taking the GPU id)
FAILURES = {
    'software': (29, False, 8, 5, 'Persistence mode for GPU %d is disabled. Enable persistence mode by running '
                                  '"nvidia-smi -i <gpuId> -pm 1 " as root.'),
    'memory': (58, True, 10, 2, 'A memory mismatch was detected on GPU %d, but no error was reported by CUDA or NVML.'),
    'diagnostic': (52, True, 10, 2, 'Found 8 faulty memory elements on GPU %d'),
    'pcie': (30, False, 13, 1, 'Bandwidth of GPU %d in direction h2d of 2.17 did not exceed minimum required bandwidth of 18.00.'),
    'memory_bandwidth': (62, False, 1, 1, 'GPU %d only achieved a memory bandwidth of 1503.21 GB/s, failing to meet 2600.00 GB/s for test 0'),
    'targeted_stress': (50, False, 1, 1, 'Max stress level of 812.3 did not reach desired stress level of 2400.0 for GPU %d'),
    'sm_stress': (50, False, 1, 1, 'Max stress level of 812.3 did not reach desired stress level of 2400.0 for GPU %d'),
    'targeted_power': (63, False, 14, 1, 'Max power of 412.0 did not reach desired power minimum target_power_min_ratio of 665.0 '
                                         'for GPU %d'),
    'memtest': (58, True, 10, 2, 'A memory mismatch was detected on GPU %d, but no error was reported by CUDA or NVML.'),
    'pulse_test': (44, False, 16, 1, "There was an internal error during the test: 'pulse test failed on GPU %d'"),
    'nvbandwidth': (44, False, 16, 1, "There was an internal error during the test: 'nvbandwidth failed on GPU %d'"),
    'eud': (95, True, 7, 2, 'EUD test failed on GPU %d'),
}


class ParseError(Exception):
    """Bad command line (TCLAP style)."""


# --------------------------------------------------------------------------- version

def dcgm_version():
    """``(package, version)`` of the installed DCGM (version without epoch/revision)."""
    package, version = state.owner(PACKAGES)
    if version is None:
        return None, None
    version = version.split(':', 1)[-1].split('-', 1)[0]
    return package, version


def _major(version):
    try:
        return int(version.split('.')[0])
    except (ValueError, AttributeError):
        return 0


def _minor(version):
    try:
        return int(version.split('.')[1])
    except (ValueError, IndexError, AttributeError):
        return 0


def hostengine_available():
    return state.nvml_state() == 'ok'


def banner(version, hostengine):
    """``dcgmi -v`` output."""
    def block(flavour):
        digest = hashlib.sha1(('dcgm %s %s' % (flavour, version)).encode('utf-8')).hexdigest()
        number = int(digest[:6], 16)
        return ['Version : %s' % version,
                'Build ID : %d' % (number % 40 + 1),
                'Build Date : %d-%02d-%02d' % (2020 + _major(version), number % 12 + 1, number % 28 + 1),
                'Build Type : Release',
                'Commit ID : %s' % digest,
                'Branch Name : rel_dcgm_%d_%d' % (_major(version), _minor(version)),
                'CPU Arch : x86_64',
                'Build Platform : Linux 4.15.0-180-generic #189-Ubuntu SMP Wed May 18 14:13:57 UTC 2022 x86_64',
                'CRC : %s' % hashlib.md5(digest.encode('utf-8')).hexdigest()]
    lines = block('dcgmi')
    if hostengine:
        lines += ['', 'Hostengine build info:'] + block('nv-hostengine')
    return '\n'.join(lines) + '\n'


# --------------------------------------------------------------------------- jsoncpp styled writer

def _quote(text):
    return json.dumps(text, ensure_ascii=True)


def _scalar(value):
    if value is None:
        return 'null'
    if value is True:
        return 'true'
    if value is False:
        return 'false'
    if isinstance(value, str):
        return _quote(value)
    return str(value)


def _multiline(values):
    if len(values) * 3 >= 74:
        return True
    if any(isinstance(value, (dict, list)) and value for value in values):
        return True
    length = 4 + (len(values) - 1) * 2 + sum(len(_dump(value, '')) for value in values)
    return length >= 74


def _dump(value, indent):
    if isinstance(value, dict):
        if not value:
            return '{}'
        inner = indent + '\t'
        parts = []
        for key in sorted(value):
            child = value[key]
            if (isinstance(child, dict) and child) or (isinstance(child, list) and child and _multiline(child)):
                parts.append('%s%s :\n%s%s' % (inner, _quote(key), inner, _dump(child, inner)))
            else:
                parts.append('%s%s : %s' % (inner, _quote(key), _dump(child, inner)))
        return '{\n' + ',\n'.join(parts) + '\n' + indent + '}'
    if isinstance(value, list):
        if not value:
            return '[]'
        if _multiline(value):
            inner = indent + '\t'
            return '[\n' + ',\n'.join(inner + _dump(child, inner) for child in value) + '\n' + indent + ']'
        return '[ ' + ', '.join(_dump(child, indent) for child in value) + ' ]'
    return _scalar(value)


def styled(value):
    """``Json::Value::toStyledString()``."""
    return _dump(value, '') + '\n'


# --------------------------------------------------------------------------- text table

HEADER = ('+---------------------------+------------------------------------------------+\n'
          '| Diagnostic                | Result                                         |\n'
          '+===========================+================================================+\n')
FOOTER = '+---------------------------+------------------------------------------------+\n'
SECTIONS = {
    'Metadata': '|-----  Metadata  ----------+------------------------------------------------|\n',
    'Deployment': '|-----  Deployment  --------+------------------------------------------------|\n',
    'Hardware': '+-----  Hardware  ----------+------------------------------------------------+\n',
    'Integration': '+-----  Integration  -------+------------------------------------------------+\n',
    'Stress': '+-----  Stress  ------------+------------------------------------------------+\n',
}


def _row(name, info):
    return '| %-25s | %-46s |\n' % (name[:25], info[:46])


def _verbose(name, message):
    """DisplayVerboseInfo: the message in 45-character pieces, the label on the first one."""
    rows = []
    for start in range(0, len(message), 45):
        rows.append(_row(name if start == 0 else '', message[start:start + 45]))
    return ''.join(rows)


# --------------------------------------------------------------------------- the run

def _canonical_test(name):
    key = name.strip().lower()
    key = _ALIASES.get(key, key).replace(' ', '_')
    return key if key in TESTS else None


def plan(run, version, gpus_models):
    """Tests of a ``-r`` value as ``(level or None, [canonical test names])``; raises ParseError."""
    text = run.strip()
    lowered = text.lower()
    if lowered in _SUITES:
        text = str(_SUITES[lowered])
    major = _major(version)
    if text.isdigit():
        level = int(text)
        if not 1 <= level <= 4:
            raise ParseError('Argument: -r (--run)\n             Invalid run level %s. Valid levels are 1, 2, 3, or 4.' % text)
        tests = ['software']
        if level >= 2:
            tests += ['memory', 'pcie']
        if level >= 3:
            tests += ['diagnostic']
            if major < 4:
                tests += ['eud']
            elif _minor(version) >= 1 or major > 4:
                if all(model in NVBANDWIDTH_MODELS for model in gpus_models):
                    tests += ['nvbandwidth']
            tests += ['memory_bandwidth', 'targeted_stress', 'targeted_power']
        if level >= 4:
            tests += ['memtest', 'pulse_test']
        return level, tests
    tests = ['software']
    for name in text.split(','):
        canonical = _canonical_test(name)
        if canonical is None:
            return None, ['!' + name.strip()]
        if canonical not in tests:
            tests.append(canonical)
    return None, tests


def _fault_applies(fault, level, tests, gpu_indexes):
    """(test, gpu) that the diag_fail fault breaks in this run, or None."""
    if not fault:
        return None
    try:
        fault = fault_table.apply_defaults('diag_fail', fault)
        fault_level = int(fault['level'])
        gpu = int(fault['gpu'])
    except (TypeError, ValueError):
        return None
    test = _canonical_test(str(fault['test'])) or 'software'   # a test name dcgmi does not know: the software test
    if test not in tests or gpu not in gpu_indexes:
        return None
    # branch=N: the diagnostic fails only while a driver of that branch is loaded.
    if fault.get('branch') not in (None, '') and str(state.branch_of(state.loaded_driver())) != str(fault['branch']):
        return None
    if level is not None and level < fault_level:
        return None
    return test, gpu


def _device_id(gpu):
    text = (gpu.get('pci_device_id') or '0x000010DE').lower().replace('0x', '')
    return text[:4]


def _results(tests, gpu_indexes, failure):
    """{test: {gpu: (status, message or None)}} (EUD is skipped: its package is not installed)."""
    results = {}
    for test in tests:
        per_gpu = {}
        for gpu in gpu_indexes:
            status = 'Skip' if test == 'eud' else 'Pass'
            message = None
            if failure and failure == (test, gpu):
                status = 'Fail'
                message = FAILURES[test][4] % gpu
            per_gpu[gpu] = (status, message)
        results[test] = per_gpu
    return results


def _error_entry(test, message, key):
    code, _isolate, category, severity, _fmt = FAILURES[test]
    return {key: message, 'error_id': code, 'error_category': category, 'error_severity': severity}


def document_v4(version, driver, hardware, tests, gpu_indexes, results):
    categories = []
    for category in ('Deployment', 'Hardware', 'Integration', 'Stress'):
        entries = []
        for test in tests:
            if TESTS[test][1] != category:
                continue
            entity_results = []
            overall = 'Pass'
            for gpu in gpu_indexes:
                status, message = results[test][gpu]
                entry = {'entity_group': 'GPU', 'entity_group_id': 1, 'entity_id': gpu, 'status': status}
                if message:
                    text = ('Persistence Mode: ' + message) if test == 'software' else message
                    entry['warnings'] = [_error_entry(test, text, 'warning')]
                    overall = 'Fail'
                elif status == 'Skip' and overall == 'Pass':
                    overall = 'Skip'
                entity_results.append(entry)
            entries.append({'name': test, 'results': entity_results, 'test_summary': {'status': overall}})
        if entries:
            categories.append({'category': category, 'tests': entries})
    gpus = hardware.get('gpus') or []
    entities = [{'device_id': _device_id(gpus[gpu]), 'entity_id': gpu, 'serial_num': gpus[gpu].get('serial', '')}
                for gpu in gpu_indexes]
    return {
        KEY_V4: {'test_categories': categories},
        'entity_groups': [{'entities': entities, 'entity_group': 'GPU', 'entity_group_id': 1}],
        'metadata': {'Driver Version Detected': driver, 'version': version},
    }


def document_v3(version, driver, hardware, tests, gpu_indexes, results):
    categories = []
    if 'software' in tests:
        deployment = []
        for check in DEPLOYMENT_V3:
            result = {'status': 'Pass'}
            if check == 'Persistence Mode':
                for gpu in gpu_indexes:
                    status, message = results['software'][gpu]
                    if message:
                        result = {'gpu_id': gpu, 'status': status, 'warnings': [_error_entry('software', message, 'warnings')]}
            deployment.append({'name': check, 'results': [result]})
        categories.append({'category': 'Deployment', 'tests': deployment})
    # Diag.cpp: per-GPU tests in dcgm test-index order, categories Integration, Hardware, Stress.
    order = ('memory', 'diagnostic', 'pcie', 'sm_stress', 'targeted_stress', 'targeted_power', 'memory_bandwidth',
             'memtest', 'pulse_test', 'eud')
    buckets = {'Integration': [], 'Hardware': [], 'Stress': []}
    for test in order:
        if test not in tests:
            continue
        entries = []
        for gpu in gpu_indexes:
            status, message = results[test][gpu]
            entry = {'gpu_id': str(gpu), 'status': status}
            if message:
                entry['warnings'] = [_error_entry(test, message, 'warning')]
            entries.append(entry)
        bucket = 'Stress' if test == 'memtest' else TESTS[test][1]
        buckets[bucket].append({'name': TESTS[test][0], 'results': entries})
    for category in ('Integration', 'Hardware', 'Stress'):
        if buckets[category]:
            categories.append({'category': category, 'tests': buckets[category]})
    gpus = hardware.get('gpus') or []
    return {
        KEY_V3: {'test_categories': categories},
        'version': version,
        'Driver Version Detected': driver,
        'GPU Device IDs': [_device_id(gpus[gpu]) for gpu in gpu_indexes],
        'GPU Device Serials': dict((str(gpu), gpus[gpu].get('serial', '')) for gpu in gpu_indexes),
    }


def _group_cells(name, statuses):
    """3.x HelperDisplayGpuResults: ``Pass - All`` or per-status GPU lists."""
    gpu_count = len(statuses)
    for status in ('Pass', 'Skip', 'Fail', 'Warn'):
        if sum(1 for value in statuses.values() if value == status) == gpu_count:
            return [(name, '%s - All' % status)]
    rows = []
    for status in ('Pass', 'Fail', 'Warn', 'Skip'):
        ids = [gpu for gpu, value in sorted(statuses.items()) if value == status]
        if ids:
            label = 'GPU: ' if len(ids) == 1 else 'GPUs: '
            rows.append(('' if rows else name, '%s - %s%s   ' % (status, label, ', '.join(str(gpu) for gpu in ids))))
    return rows


def table_v3(version, driver, hardware, tests, gpu_indexes, results):
    gpus = hardware.get('gpus') or []
    out = ['Successfully ran diagnostic for group.\n', HEADER, SECTIONS['Metadata'],
           _row('DCGM Version', version), _row('Driver Version Detected', driver),
           _row('GPU Device IDs Detected', ','.join(_device_id(gpus[gpu]) for gpu in gpu_indexes))]
    if 'software' in tests:
        out.append(SECTIONS['Deployment'])
        for check in DEPLOYMENT_V3:
            messages = []
            if check == 'Persistence Mode':
                messages = [results['software'][gpu][1] for gpu in gpu_indexes if results['software'][gpu][1]]
            out.append(_row(check, 'Fail' if messages else 'Pass'))
            for message in messages:
                out.append(_verbose('Error', message))

    def display(test):
        statuses = dict((gpu, results[test][gpu][0]) for gpu in gpu_indexes)
        for name, info in _group_cells(TESTS[test][0], statuses):
            out.append(_row(name, info))
        if any(value != 'Pass' for value in statuses.values()):
            for gpu in gpu_indexes:
                if results[test][gpu][1]:
                    out.append(_verbose('Warning', results[test][gpu][1]))

    if gpu_indexes:
        out.append(SECTIONS['Integration'])
        for test in ('pcie',):
            if test in tests:
                display(test)
        out.append(SECTIONS['Hardware'])
        for test in ('memory', 'diagnostic', 'pulse_test'):
            if test in tests:
                display(test)
        out.append(SECTIONS['Stress'])
        for test in ('sm_stress', 'targeted_stress', 'targeted_power', 'memory_bandwidth', 'memtest', 'eud'):
            if test in tests:
                display(test)
    out.append(FOOTER)
    return ''.join(out)


def table_v4(version, driver, hardware, tests, gpu_indexes, results):
    gpus = hardware.get('gpus') or []
    out = ['Successfully ran diagnostic for group.\n', HEADER, SECTIONS['Metadata'],
           _row('DCGM Version', version), _row('Driver Version Detected', driver),
           _row('GPU Device IDs Detected', ', '.join(_device_id(gpus[gpu]) for gpu in gpu_indexes))]
    for category in ('Deployment', 'Hardware', 'Integration', 'Stress'):
        members = [test for test in tests if TESTS[test][1] == category]
        if not members:
            continue
        out.append(SECTIONS[category])
        for test in members:
            statuses = [results[test][gpu][0] for gpu in gpu_indexes]
            overall = 'Fail' if 'Fail' in statuses else ('Skip' if statuses and all(s == 'Skip' for s in statuses) else 'Pass')
            out.append(_row(test, overall))
            for gpu in gpu_indexes:
                status, message = results[test][gpu]
                out.append(_row('', 'GPU%d: %s' % (gpu, status)))
                if message:
                    text = ('Persistence Mode: ' + message) if test == 'software' else message
                    out.append(_verbose('Warning: GPU%d' % gpu, text))
    out.append(FOOTER)
    return ''.join(out)


# --------------------------------------------------------------------------- command line

def _parse_diag(argv):
    options = {'json': False, 'iterations': 1}
    valued = {'-r': 'run', '--run': 'run', '-i': 'gpus', '--gpuList': 'gpus', '--entity-id': 'gpus', '-g': 'group',
              '--group': 'group', '-c': 'config', '--configfile': 'config', '-p': 'parameters', '--parameters': 'parameters',
              '--timeout': 'timeout', '--iterations': 'iterations', '--host': 'host', '--fail-early': 'ignored',
              '--check-interval': 'ignored', '--throttle-mask': 'ignored', '--clocksevent-mask': 'ignored',
              '--debugLogFile': 'ignored', '-d': 'ignored', '--debugLevel': 'ignored', '--statspath': 'ignored',
              '--expectedNumEntities': 'ignored', '--ignoreErrorCodes': 'ignored'}
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        name, sep, value = token.partition('=')
        if token in ('-j', '--json'):
            options['json'] = True
        elif token in ('-v', '--verbose', '--fail-early', '--statsonfail'):
            options[token.lstrip('-')] = True
        elif name in valued:
            if not sep:
                if index >= len(argv):
                    raise ParseError('Argument: %s\n             Missing a value for this argument!' % token)
                value = argv[index]
                index += 1
            options[valued[name]] = value
        else:
            raise ParseError('Argument: %s\n             Couldn\'t find match for argument' % token)
    if 'run' not in options:
        raise ParseError('Required argument missing: run')
    return options


def _diag_failure(message, code, json_mode, version, major, out):
    if json_mode:
        key = KEY_V4 if major >= 4 else KEY_V3
        out.append(styled({key: {'runtime_error': message, 'version': version}}) + '\n')
    else:
        out.append(message + '\n')
    return code


def diag(argv, out):
    """``dcgmi diag``; appends the output to ``out`` and returns the dcgmReturn_t."""
    options = _parse_diag(argv)
    _package, version = dcgm_version()
    major = _major(version)
    if options.get('config') and not os.path.isfile(options['config']):
        raise ParseError("\n             Could not open configuration file: '%s'" % options['config'])
    parameters = options.get('parameters')
    if parameters:
        for item in parameters.split(';'):
            if '=' not in item:
                raise ParseError("\n             Improperly formatted parameters argument: '%s'. Argument must follow the format: "
                                 "test_name.attr_name=attr_value[;...]" % parameters)
    gpu_list = options.get('gpus')
    if gpu_list is not None and gpu_list != '*':
        tokens = [token.strip() for token in gpu_list.split(',') if token.strip()]
        if not tokens or not all(token.isdigit() for token in tokens):
            raise ParseError("\n             Gpu list '%s' must be a comma-separated list of numbers" % gpu_list)
    if not hostengine_available():
        out.append(CONNECTION_ERROR + '\n')
        return DCGM_ST_CONNECTION_NOT_VALID

    hardware = state.load_hardware()
    every = list(range(len(hardware.get('gpus') or [])))
    if gpu_list is None or gpu_list == '*':
        gpu_indexes = every
    else:
        gpu_indexes = sorted(set(int(token) for token in gpu_list.split(',') if token.strip()))
    if not gpu_indexes or any(gpu not in every for gpu in gpu_indexes):
        target = 'group %d' % DEFAULT_GROUP if gpu_list is None else 'entities %s' % gpu_list
        return _diag_failure('Error: Unable to complete diagnostic for %s. Return: (%d) %s.'
                             % (target, DCGM_ST_BADPARAM, ERROR_STRINGS[DCGM_ST_BADPARAM]),
                             DCGM_ST_BADPARAM, options['json'], version, major, out)
    lost = state.lost_gpus()
    if any(gpu in lost for gpu in gpu_indexes):
        target = 'group %d' % DEFAULT_GROUP if gpu_list is None else 'entities %s' % gpu_list
        return _diag_failure('Error: Unable to complete diagnostic for %s. Return: (%d) %s.'
                             % (target, DCGM_ST_GPU_IS_LOST, ERROR_STRINGS[DCGM_ST_GPU_IS_LOST]),
                             DCGM_ST_GPU_IS_LOST, options['json'], version, major, out)

    models = [(hardware['gpus'][gpu].get('model') or '') for gpu in gpu_indexes]
    level, tests = plan(options['run'], version, models)
    unknown = [name[1:] for name in tests if name.startswith('!')]
    if unknown:
        return _diag_failure('Error: requested test "%s" was not found among possible test choices.' % unknown[0],
                             DCGM_ST_NVVS_ERROR, options['json'], version, major, out)
    if major < 4 and 'nvbandwidth' in tests:
        tests.remove('nvbandwidth')
    if major >= 4:
        tests = [test for test in tests if test not in ('eud', 'sm_stress')]

    driver = state.loaded_driver()
    failure = _fault_applies(state.fault('diag_fail'), level, tests, gpu_indexes)
    code = DCGM_ST_OK
    if failure:
        code = DCGM_ST_NVVS_ISOLATE_ERROR if FAILURES[failure[0]][1] else DCGM_ST_NVVS_ERROR

    iterations = 1
    try:
        iterations = max(1, int(options.get('iterations', 1)))
    except ValueError:
        raise ParseError('Argument: --iterations\n             Couldn\'t read argument value from string \'%s\''
                         % options.get('iterations'))
    results = _results(tests, gpu_indexes, failure)
    build = document_v4 if major >= 4 else document_v3
    table = table_v4 if major >= 4 else table_v3
    if iterations <= 1:
        if options['json']:
            out.append(styled(build(version, driver, hardware, tests, gpu_indexes, results)))
        else:
            out.append(table(version, driver, hardware, tests, gpu_indexes, results))
        return code
    documents = []
    for number in range(iterations):
        if not options['json']:
            out.append('\nRunning iteration %d of %d...\n' % (number + 1, iterations))
            out.append(table(version, driver, hardware, tests, gpu_indexes, results))
        documents.append(build(version, driver, hardware, tests, gpu_indexes, results))
        if code != DCGM_ST_OK:
            break
    if options['json']:
        wrapper = {'iterations': documents}
        if code != DCGM_ST_OK:
            wrapper['Overall Result'] = 'Fail'
            wrapper['warning'] = ERROR_STRINGS[code]
        else:
            wrapper['Overall Result'] = 'Pass'
        out.append(styled(wrapper) + '\n')
    elif code == DCGM_ST_OK:
        out.append('Passed all %d runs of the diagnostic\n' % iterations)
    else:
        out.append('Aborting the iterative runs of the diagnostic due to failure: %s\n' % ERROR_STRINGS[code])
    return code


def discovery(argv, out):
    if not argv or argv[0] not in ('-l', '--list'):
        raise ParseError('Argument: %s\n             Couldn\'t find match for argument' % (argv[0] if argv else ''))
    if not hostengine_available():
        out.append(CONNECTION_ERROR + '\n')
        return DCGM_ST_CONNECTION_NOT_VALID
    gpus = state.load_hardware().get('gpus') or []
    rule = '+--------+----------------------------------------------------------------------+\n'
    lines = ['%d GPU%s found.\n' % (len(gpus), '' if len(gpus) == 1 else 's'), rule,
             '| GPU ID | Device Information                                                   |\n', rule]
    for index, gpu in enumerate(gpus):
        lines.append('| %-6d | %-68s |\n' % (index, 'Name: %s' % gpu.get('model', '')))
        lines.append('| %-6s | %-68s |\n' % ('', 'PCI Bus ID: %s' % gpu.get('pci_bus_id', '')))
        lines.append('| %-6s | %-68s |\n' % ('', 'Device UUID: %s' % gpu.get('uuid', '')))
        lines.append(rule)
    out.append(''.join(lines))
    return DCGM_ST_OK


def run(argv):
    """Run dcgmi with ``argv``; returns the exit status (dcgmReturn_t & 0xff)."""
    _package, version = dcgm_version()
    if version is None:
        sys.stderr.write('dcgmi: DCGM is not installed (no datacenter-gpu-manager package)\n')
        return 127
    if not argv or argv[0] in ('-h', '--help'):
        sys.stdout.write('Usage: dcgmi <subsystem>\n  Subsystems: diag, discovery\n  Use -v/--version for the version.\n')
        return 0 if argv else 255
    if argv[0] in ('-v', '--version'):
        sys.stdout.write(banner(version, hostengine_available()))
        return 0
    out = []
    try:
        if argv[0] == 'diag':
            code = diag(argv[1:], out)
        elif argv[0] == 'discovery':
            code = discovery(argv[1:], out)
        else:
            raise ParseError('Argument: %s\n             Couldn\'t find match for argument' % argv[0])
    except ParseError as exc:
        sys.stdout.write(''.join(out))
        sys.stderr.write('PARSE ERROR: %s\n\nBrief USAGE: \n   dcgmi diag -r <testName> [-j] [-i <gpuList>] [-c <configFile>]\n\n'
                         'For complete USAGE and HELP type: \n   dcgmi diag --help\n\n' % exc)
        return 255
    sys.stdout.write(''.join(out))
    return code & 0xff


HOSTENGINE_PID = 'run/gpufleet-sim/nv-hostengine.pid'


def hostengine(argv):
    """The fake ``nv-hostengine`` (the DCGM package's wrapper sets GPUFLEET_SIM_PROG=nv-hostengine).

    ``-n`` keeps it in the foreground as the nvidia-dcgm unit runs it; ``--version`` prints the banner.
    """
    if '--version' in argv or '-v' in argv:
        return run(['--version'])
    sys.stdout.write('Started host engine version %s using port number: 5555 \n' % (dcgm_version()[1] or 'unknown'))
    sys.stdout.flush()
    return daemon.serve(HOSTENGINE_PID)


def main(argv=None):
    """Entry point: ``python3 -m gpufleet_sim.dcgmi ARGS`` (or nv-hostengine, see ``hostengine``)."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    if os.environ.get('GPUFLEET_SIM_PROG') == 'nv-hostengine':
        return hostengine(arguments)
    return run(arguments)


if __name__ == '__main__':
    sys.exit(main())
