# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for plugins/module_utils/_dcgm.py against real dcgmi outputs.

Real samples live in tests/unit/fixtures/real-outputs/dcgmi/ (each with a ``.source.txt`` sidecar).
Inline documents whose name or comment says SYNTHETIC are hand-written for bad-input and edge cases;
their shapes follow NVIDIA's writers (dcgmi/Diag.cpp, nvvs JsonOutput, testing/python3/dcgm_diag_schema.json).
"""

import json

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._dcgm import (
    DcgmParseError,
    DcgmRuntimeError,
    build_diag_argv,
    classify_failure,
    normalize_status,
    parse_diag_json,
    parse_diag_text,
    parse_version_banner,
    process_timeout,
)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._command import to_text

from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import read_real_output

GB10_JSON = 'dcgmi-diag-r1-json_dcgm4.2.3_580.82.09_gb10-dgx-spark_software-fail.json'
NVVS31_JSON = 'dcgm-gpu-diagnostic-json_dcgm3.1.0_8gpu_pass_null-elements_NVIDIA-DCGM-JsonResultTests.txt'
TEXT_304 = 'dcgmi-diag-r3_text_dcgm3.0.4_no-metadata_EXCERPT_DCGM-issue55.txt'
TEXT_339_H200 = 'dcgmi-diag-r3_text_dcgm3.3.9_570.133.20_h200x8_ramble.txt'
TEXT_339_SRUN = 'dcgmi-diag-r3_text_dcgm3.3.9_570.172.08_2bb5x2_srun-2nodes-interleaved_gnosia93.txt'
TEXT_400 = 'dcgmi-diag-r3_text_dcgm4.0.0_550.90.07_25b6x4_nvidia-user-guide-example.txt'
BANNER_331 = 'dcgmi-v_3.3.1_hostengine-3.3.0_DCGM-issue139.txt'

DEPLOYMENT_3X = [
    'Denylist', 'NVML Library', 'CUDA Main Library', 'Permissions and OS Blocks', 'Persistence Mode',
    'Environment Variables', 'Page Retirement/Row Remap', 'Graphics Processes', 'Inforom',
]
GB10_WARNING = ('Persistence Mode: Persistence mode for GPU 0 is disabled. Enable persistence mode by running '
                '"nvidia-smi -i <gpuId> -pm 1 " as root.')
GB10_INFO = ('Error getting the SRAM Threshold Count for GPU 0. Status = 0. Value = 9223372036854775794. '
             'SRAM Threshold checking was skipped.')


def _read(name, mode='r'):
    return read_real_output('dcgmi', name, binary='b' in mode)


def _doc(obj):
    return json.dumps(obj, indent=1)


def _check_shape(result):
    """Every parse result has the documented keys and types."""
    assert set(result) >= {'schema', 'dcgm_version', 'driver_version', 'passed', 'summary', 'tests', 'failures'}
    assert result['schema'] in ('3', '4')
    assert set(result['summary']) == {'pass', 'fail', 'warn', 'skip'}
    count = 0
    for test in result['tests']:
        assert isinstance(test['name'], str)
        assert test['status'] in ('pass', 'fail', 'warn', 'skip')
        for res in test['results']:
            count += 1
            assert res['status'] in ('pass', 'fail', 'warn', 'skip')
            assert res['gpu'] is None or isinstance(res['gpu'], int)
            assert res['entity_group'] is None or isinstance(res['entity_group'], str)
            assert all(isinstance(message, str) for message in res['messages'])
    assert sum(result['summary'].values()) == count
    assert result['passed'] is (result['summary']['fail'] == 0)
    assert len(result['failures']) == result['summary']['fail']
    for failure in result['failures']:
        assert set(failure) == {'test', 'gpu', 'message'}
        assert failure['message']


# --------------------------------------------------------------------------- parse_diag_json: real documents

@pytest.mark.parametrize('as_bytes', [False, True])
def test_json_dcgm4_gb10_software_fail(as_bytes):
    result = parse_diag_json(_read(GB10_JSON, 'rb' if as_bytes else 'r'))
    _check_shape(result)
    assert result['schema'] == '4'
    assert result['dcgm_version'] == '4.2.3'
    assert result['driver_version'] == '580.82.09'
    assert result['passed'] is False
    assert result['summary'] == {'pass': 0, 'fail': 1, 'warn': 0, 'skip': 0}
    assert [(t['name'], t['category'], t['status']) for t in result['tests']] == [('software', 'Deployment', 'fail')]
    software = result['tests'][0]
    assert software['results'] == [{
        'gpu': 0, 'entity_group': 'GPU', 'entity_id': 0, 'status': 'fail', 'messages': [GB10_WARNING],
    }]
    # test_summary info is kept at test level; the summary (Fail) is no worse than the GPU result.
    assert software['messages'] == [GB10_INFO]
    assert result['failures'] == [{'test': 'software', 'gpu': 0, 'message': GB10_WARNING}]
    assert result['runtime_error'] is None
    # entity_groups: serial "<<<NOT_SUPPORTED>>>" is a placeholder, not a serial number.
    assert result['entities'] == [{'entity_group': 'GPU', 'entity_id': 0, 'device_id': '2e12', 'serial': None}]


def test_json_dcgm4_gb10_accepts_decoded_dict():
    assert parse_diag_json(json.loads(_read(GB10_JSON))) == parse_diag_json(_read(GB10_JSON))


def test_json_dcgm31_nvidia_real_output_nulls_and_leading_text():
    text = _read(NVVS31_JSON)
    assert text.lstrip().startswith('WARNING: THIS SHOULD NOT HAPPEN')
    result = parse_diag_json(text)
    _check_shape(result)
    assert result['schema'] == '3'
    assert result['dcgm_version'] == '3.1.0'
    assert result['driver_version'] is None
    assert result['passed'] is True
    assert result['failures'] == []
    names = [t['name'] for t in result['tests']]
    assert names == [
        'Denylist', 'NVML Library', 'CUDA Main Library', 'Permissions and OS-related Blocks', 'Persistence Mode',
        'Environmental Variables', 'Page Retirement/Row Remap', 'Graphics Processes', 'Inforom', 'software',
    ]
    assert {t['category'] for t in result['tests'][:9]} == {'Deployment'}
    assert result['tests'][9]['category'] == 'Custom'
    # "gpu_ids": "0,1,2,3,4,5,6,7" (one string) is expanded to one result per GPU ...
    assert [r['gpu'] for r in result['tests'][0]['results']] == list(range(8))
    # ... and "gpu_ids": 0 .. 7 (integers) give the same GPUs.
    assert [r['gpu'] for r in result['tests'][9]['results']] == list(range(8))
    assert {r['status'] for t in result['tests'] for r in t['results']} == {'pass'}
    assert result['summary'] == {'pass': 80, 'fail': 0, 'warn': 0, 'skip': 0}


def test_json_truncated_real_document_is_reported_as_truncated():
    text = _read(GB10_JSON)
    for cut in (len(text) // 3, len(text) // 2, len(text) - 3):
        with pytest.raises(DcgmParseError, match='truncated'):
            parse_diag_json(text[:cut])


# --------------------------------------------------------------------------- parse_diag_json: schema variants

# SYNTHETIC: DCGM 3.3 dcgmi layout (dcgmi/Diag.cpp HelperJsonBuildOutput): version, driver, device ids and
# serials at the top level, "gpu_id" strings, "info" as one string, Deployment results without a GPU,
# the Deployment warning entry keyed "warnings" (sic) with an integer gpu_id, and jsoncpp null gaps.
DCGM33_SYNTHETIC = {
    'DCGM GPU Diagnostic': {
        'test_categories': [
            {'category': 'Deployment', 'tests': [
                {'name': 'Denylist', 'results': [{'status': 'Pass'}]},
                {'name': 'Persistence Mode', 'results': [{
                    'gpu_id': 1, 'status': 'Fail',
                    'warnings': [None, {'warnings': 'Persistence mode for GPU 1 is disabled.', 'error_id': 29,
                                        'error_category': 8, 'error_severity': 5}]}]},
            ]},
            {'category': 'Integration', 'tests': [
                {'name': 'PCIe', 'results': [
                    {'gpu_id': '0', 'status': 'Pass', 'info': 'GPU 0 GPU to Host bandwidth:\t\t24.02 GB/s'},
                    {'gpu_id': '1', 'status': 'Warn', 'warnings': [{'warning': 'GPU 1 replay counter 12', 'error_id': 3}]},
                ]},
            ]},
            {'category': 'Hardware', 'tests': [
                {'name': 'GPU Memory', 'results': [
                    {'gpu_id': '0', 'status': 'Skip'}, None, {'gpu_id': '1', 'status': 'Not Run'}]},
            ]},
        ],
    },
    'version': '3.3.1',
    'Driver Version Detected': '535.129.03',
    'GPU Device IDs': ['1eb8', '1eb8'],
    'GPU Device Serials': {'0': '1321021000001', '1': '1321021000002'},
}


def test_json_dcgm33_layout_synthetic():
    result = parse_diag_json(_doc(DCGM33_SYNTHETIC))
    _check_shape(result)
    assert (result['schema'], result['dcgm_version'], result['driver_version']) == ('3', '3.3.1', '535.129.03')
    tests = dict((t['name'], t) for t in result['tests'])
    assert tests['Denylist']['results'] == [
        {'gpu': None, 'entity_group': None, 'entity_id': None, 'status': 'pass', 'messages': []}]
    assert tests['Persistence Mode']['results'][0]['gpu'] == 1
    assert tests['PCIe']['status'] == 'warn'
    assert tests['PCIe']['results'][0]['messages'] == ['GPU 0 GPU to Host bandwidth:\t\t24.02 GB/s']
    assert [r['status'] for r in tests['GPU Memory']['results']] == ['skip', 'skip']
    assert tests['GPU Memory']['status'] == 'skip'
    assert result['summary'] == {'pass': 2, 'fail': 1, 'warn': 1, 'skip': 2}
    assert result['failures'] == [
        {'test': 'Persistence Mode', 'gpu': 1, 'message': 'Persistence mode for GPU 1 is disabled.'}]
    assert result['entities'][1] == {'entity_group': 'GPU', 'entity_id': 1, 'device_id': '1eb8',
                                     'serial': '1321021000002'}


@pytest.mark.parametrize('gpu_ids, expected', [
    ('0,1,2', [0, 1, 2]),
    ('0, 1, 2', [0, 1, 2]),
    ('3', [3]),
    (3, [3]),
    ([0, '1', 1], [0, 1]),
    ('GPU0', [0]),
    ('', [None]),
    (None, [None]),
    (-1, [None]),
    (True, [None]),
    ({'id': 1}, [None]),
])
def test_json_gpu_id_forms(gpu_ids, expected):
    # SYNTHETIC: one 3.x result whose gpu_ids takes every form seen in DCGM writers (plus junk).
    doc = {'DCGM GPU Diagnostic': {'test_categories': [
        {'category': 'Hardware', 'tests': [{'name': 'memory', 'results': [{'gpu_ids': gpu_ids, 'status': 'FAIL'}]}]}]}}
    result = parse_diag_json(_doc(doc))
    _check_shape(result)
    assert [r['gpu'] for r in result['tests'][0]['results']] == expected
    assert [f['gpu'] for f in result['failures']] == expected
    assert all(f['message'] == 'memory failed' for f in result['failures'])


@pytest.mark.parametrize('key', ['gpu_ids', 'gpu_id'])
def test_json_both_gpu_keys(key):
    doc = {'DCGM GPU Diagnostic': {'test_categories': [
        {'category': 'Stress', 'tests': [{'name': 'SM Stress', 'results': [{key: '0,1', 'status': 'PASS'}]}]}]}}
    assert [r['gpu'] for r in parse_diag_json(_doc(doc))['tests'][0]['results']] == [0, 1]


@pytest.mark.parametrize('raw, expected', [
    ('Pass', 'pass'), ('PASS', 'pass'), ('pass', 'pass'), ('Passed', 'pass'),
    ('Fail', 'fail'), ('FAIL', 'fail'), ('failed', 'fail'),
    ('Warn', 'warn'), ('WARN', 'warn'), ('Warning', 'warn'), ('Partial Pass', 'warn'),
    ('Skip', 'skip'), ('SKIP', 'skip'), ('SKIPPED', 'skip'), ('Not Run', 'skip'), ('not_run', 'skip'),
    ('Pass - All', 'pass'), ('Fail - GPU: 0', 'fail'), ('Skip - All', 'skip'), ('  pass  ', 'pass'),
    ('Exploded', None), ('', None), (None, None), (3, None),
])
def test_normalize_status(raw, expected):
    assert normalize_status(raw) == expected


def test_json_unknown_status_counts_as_warn_with_note():
    doc = {'DCGM Diagnostic': {'test_categories': [
        {'category': 'Hardware', 'tests': [{'name': 'memory', 'results': [
            {'entity_group': 'GPU', 'entity_group_id': 1, 'entity_id': 0, 'status': 'Exploded'}]}]}]}}
    result = parse_diag_json(_doc(doc))
    assert result['tests'][0]['results'][0]['status'] == 'warn'
    assert "unrecognised DCGM status 'Exploded'" in result['tests'][0]['results'][0]['messages']
    assert result['passed'] is True


# SYNTHETIC: DCGM 4.x shapes from dcgmi/Diag.cpp (4.x) and testing/python3/dcgm_diag_schema.json.
def _v4(tests, category='Hardware', **extra):
    doc = {'DCGM Diagnostic': {'test_categories': [{'category': category, 'tests': tests}]},
           'metadata': {'version': '4.1.1', 'Driver Version Detected': '570.86.15'}}
    doc.update(extra)
    return _doc(doc)


def test_json_dcgm4_summary_only_test_becomes_system_wide_result():
    result = parse_diag_json(_v4([
        {'name': 'memtest', 'test_summary': {'status': 'Skip', 'info': ['not supported on this device']}},
        {'name': 'pcie', 'results': [{'entity_group': 'GPU', 'entity_group_id': 1, 'entity_id': 2, 'status': 'Pass'}],
         'test_summary': {'status': 'Pass'}},
    ]))
    _check_shape(result)
    memtest, pcie = result['tests']
    assert memtest['results'] == [{'gpu': None, 'entity_group': None, 'entity_id': None, 'status': 'skip',
                                   'messages': ['not supported on this device']}]
    assert [r['gpu'] for r in pcie['results']] == [2]
    assert result['summary'] == {'pass': 1, 'fail': 0, 'warn': 0, 'skip': 1}
    assert (result['dcgm_version'], result['driver_version']) == ('4.1.1', '570.86.15')


def test_json_dcgm4_failing_summary_with_passing_entities_fails_the_test():
    result = parse_diag_json(_v4([{
        'name': 'software',
        'results': [{'entity_group': 'GPU', 'entity_group_id': 1, 'entity_id': 0, 'status': 'Pass'}],
        'test_summary': {'status': 'Fail', 'warnings': [
            {'warning': 'Fabric Manager is not running', 'error_id': 101, 'error_category': 8, 'error_severity': 2}]},
    }], category='Deployment'))
    _check_shape(result)
    assert result['passed'] is False
    assert result['tests'][0]['status'] == 'fail'
    assert result['failures'] == [{'test': 'software', 'gpu': None, 'message': 'Fabric Manager is not running'}]


def test_json_dcgm4_cpu_entities_and_group_id_only():
    result = parse_diag_json(_v4([
        {'name': 'cpu_eud', 'results': [{'entity_group': 'CPU', 'entity_group_id': 7, 'entity_id': 0, 'status': 'Pass'}]},
        {'name': 'memory', 'results': [{'entity_group_id': 1, 'entity_id': '3', 'status': 'pass'}]},
        {'name': 'pulse_test', 'results': [{'entity_group': 'GPU', 'entity_id': None, 'status': 'PASS'}]},
    ]))
    _check_shape(result)
    cpu, memory, pulse = [t['results'][0] for t in result['tests']]
    assert (cpu['gpu'], cpu['entity_group'], cpu['entity_id']) == (None, 'CPU', 0)
    assert (memory['gpu'], memory['entity_group']) == (3, 'GPU')
    assert (pulse['gpu'], pulse['entity_group']) == (None, 'GPU')


def test_json_dcgm4_errors_with_message_key():
    # The brief's 4.x "errors" objects (error_id/message/category/severity) are read like warnings.
    result = parse_diag_json(_v4([{'name': 'diagnostic', 'results': [{
        'entity_group': 'GPU', 'entity_group_id': 1, 'entity_id': 1, 'status': 'FAIL',
        'errors': [{'error_id': 19, 'message': 'GPU 1 had an uncorrectable ECC error', 'category': 3, 'severity': 4}],
        'info': ['GPU 1 calculated at approximately 859.08 gigaflops during this test']}]}]))
    assert result['failures'] == [{'test': 'diagnostic', 'gpu': 1, 'message': 'GPU 1 had an uncorrectable ECC error'}]
    assert result['tests'][0]['results'][0]['messages'] == [
        'GPU 1 had an uncorrectable ECC error', 'GPU 1 calculated at approximately 859.08 gigaflops during this test']


def test_json_nulls_everywhere_are_skipped():
    doc = {'DCGM GPU Diagnostic': {'test_categories': [
        None,
        {'category': 'Deployment', 'tests': [None, {'name': 'Inforom', 'results': [None, {'status': 'Pass'}, 'junk', 7]}]},
        {'category': None, 'tests': None},
    ], 'version': None}}
    result = parse_diag_json(_doc(doc))
    _check_shape(result)
    assert [t['name'] for t in result['tests']] == ['Inforom', ]
    assert result['dcgm_version'] is None
    assert result['summary']['pass'] == 1


def test_json_iterations_wrapper():
    single = json.loads(_read(GB10_JSON))
    doc = {'iterations': [single, single], 'Overall Result': 'Fail', 'warning': 'DCGM GPU Diagnostic returned an error'}
    result = parse_diag_json(_doc(doc))
    _check_shape(result)
    assert result['iterations'] == 2
    assert [(t['name'], t['iteration']) for t in result['tests']] == [('software', 1), ('software', 2)]
    assert result['summary']['fail'] == 2


def test_json_iterations_overall_fail_without_test_failure():
    passing = {'DCGM Diagnostic': {'test_categories': [{'category': 'Deployment', 'tests': [
        {'name': 'software', 'results': [{'entity_group': 'GPU', 'entity_id': 0, 'status': 'Pass'}]}]}]}}
    result = parse_diag_json(_doc({'iterations': [passing, None], 'Overall Result': 'Fail', 'warning': 'Timeout'}))
    assert result['passed'] is False
    assert result['failures'] == [{'test': 'Overall Result', 'gpu': None, 'message': 'Timeout'}]


@pytest.mark.parametrize('iterations, error', [
    ([None, {}, 'x'], DcgmParseError),
    ([{'DCGM Diagnostic': {'runtime_error': 'Error: Diagnostic could not be run while DCGM is paused.'}}],
     DcgmRuntimeError),
])
def test_json_iterations_without_results(iterations, error):
    with pytest.raises(error, match='without any test result|paused'):
        parse_diag_json(_doc({'iterations': iterations, 'Overall Result': 'Fail', 'warning': 'Paused'}))


@pytest.mark.parametrize('key', ['DCGM Diagnostic', 'DCGM GPU Diagnostic'])
def test_json_runtime_error_document(key):
    # SYNTHETIC: the shape of Diag::HelperDisplayFailureMessage with DCGM's own message text.
    message = 'Error: Diagnostic could not be run because the Tesla recommended driver is not being used.'
    text = _doc({key: {'runtime_error': message, 'version': '4.2.3'}})
    with pytest.raises(DcgmRuntimeError) as info:
        parse_diag_json(text)
    assert isinstance(info.value, DcgmParseError)
    assert info.value.runtime_error == message
    assert info.value.dcgm_version == '4.2.3'
    assert message in str(info.value)


def test_json_runtime_error_beside_results_fails_the_run():
    doc = json.loads(_read(NVVS31_JSON)[_read(NVVS31_JSON).index('{'):])
    doc['DCGM GPU Diagnostic']['runtime_error'] = 'The NVVS process was killed by a signal'
    result = parse_diag_json(doc)
    assert result['passed'] is False
    assert result['runtime_error'] == 'The NVVS process was killed by a signal'
    assert result['failures'] == [{'test': 'runtime_error', 'gpu': None, 'message': 'The NVVS process was killed by a signal'}]


# --------------------------------------------------------------------------- parse_diag_json: bad input

@pytest.mark.parametrize('text, pattern', [
    ('{"DCGM Diagnostic": {"test_categories": [}', r'malformed JSON .* line 1 column 42'),
    ('{\n "DCGM GPU Diagnostic" :\n {\n  "test_categories" : [ ,\n', r'truncated|malformed'),
    ('{"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [{"name": "software"',
     r'truncated dcgmi diag JSON: the document stops at line 1'),
    ('{"DCGM Diagnostic": {"runtime_error": "unterminated', 'truncated'),
    ('{"hello": "world"}', r"not a dcgmi diag document.*top-level keys found: \['hello'\]"),
    ('{}', r'not a dcgmi diag document.*\[\] \(an empty object\)'),
    ('{"DCGM Diag": {"test_categories": []}, "metadata": {}}',
     r"unknown dcgmi diag JSON schema.*top-level keys found: \['DCGM Diag', 'metadata'\]"),
    ('{"DCGM Diagnostic": {"test_categories": {"category": "x"}}}', r'"test_categories" is a dict, not an array'),
    ('{"DCGM Diagnostic": ["x"]}', r"'DCGM Diagnostic' holds a list, not an object"),
    ('{"DCGM GPU Diagnostic": {"version": "4.2.3"}}', r'without any test result .*\'version\''),
    ('{"DCGM Diagnostic": {"test_categories": []}, "metadata": {"version": "4.2.3"}}', 'without any test result'),
    ('[1, 2, 3]', 'top-level JSON value is a list'),
    ('"DCGM Diagnostic"', 'no JSON object found'),
    ('', 'empty input'),
    ('   \n\t ', 'empty input'),
    ('Error: unable to establish a connection to the specified host: localhost', 'no JSON object found'),
])
def test_json_bad_input(text, pattern):
    with pytest.raises(DcgmParseError, match=pattern):
        parse_diag_json(text)


@pytest.mark.parametrize('value', [None, 42, 3.5, object()])
def test_json_wrong_python_types(value):
    with pytest.raises(DcgmParseError):
        parse_diag_json(value)


def test_json_text_table_is_refused_with_a_hint():
    with pytest.raises(DcgmParseError, match='text table .*parse_diag_text'):
        parse_diag_json(_read(TEXT_339_H200))


@pytest.mark.parametrize('doc', [
    {'DCGM Diagnostic': {'test_categories': [{'category': ['x'], 'tests': {'name': 'memory', 'results': {'status': 'Pass'}}}]}},
    {'DCGM Diagnostic': {'test_categories': [{'tests': [{'name': 5, 'results': [{'status': ['Pass']}]}]}]}},
    {'DCGM Diagnostic': {'test_categories': [{'tests': [{'results': [{'status': 'Fail', 'warnings': 'one string'}]}]}]}},
    {'DCGM Diagnostic': {'test_categories': [{'tests': [{'name': 'x', 'results': [
        {'status': 'Fail', 'warnings': [[{'warning': 'nested'}], {'error_id': 1}, 12, True]}]}]}]}},
    {'DCGM Diagnostic': {'test_categories': [{'tests': [{'name': 'x', 'test_summary': 'Pass', 'results': [
        {'status': 'Pass', 'entity_group': {'x': 1}, 'entity_id': 'zero'}]}]}]}, 'metadata': ['4.0']},
    {'DCGM GPU Diagnostic': {'test_categories': [{'tests': [{'name': 'x', 'results': [{'gpu_ids': [None, [1]], 'status': 1}]}]}]},
     'GPU Device IDs': 'not-a-list', 'GPU Device Serials': ['x']},
    {'DCGM Diagnostic': {'test_categories': [{'tests': [{'name': 'x', 'results': [{'status': 'Pass'}]}]}]},
     'entity_groups': [None, {'entities': [None, {'entity_id': 'a'}]}, 'x']},
])
def test_json_odd_shapes_never_raise_key_or_type_errors(doc):
    result = parse_diag_json(_doc(doc))
    _check_shape(result)


# --------------------------------------------------------------------------- parse_version_banner

def test_banner_real_dcgmi_v_with_hostengine():
    result = parse_version_banner(_read(BANNER_331))
    assert result['version'] == '3.3.1'
    assert result['build_id'] == '2'
    assert result['hostengine_version'] == '3.3.0'
    assert result['hostengine_build_id'] == '1'
    assert result['build_date'] == '2023-11-17'
    assert result['commit_id'] == 'bae0ca1b47cce26af80b9a79defb26b0d36239f8'
    assert result['branch_name'] == 'rel_dcgm_3_3'
    assert result['client']['crc'] == '84bced15c8f0835222021abf0f88ab83'
    assert result['hostengine']['commit id'] == 'c62077bb678b2fa7d84235f290371c84044d112f'
    assert result['hostengine']['build platform'].startswith('Linux 4.15.0-180-generic #189-Ubuntu')


def test_banner_real_client_block_only_when_no_hostengine_answers():
    # The first block of the real banner alone: what dcgmi -v prints when no host engine answers.
    text = _read(BANNER_331).split('\n\n')[0] + '\n'
    result = parse_version_banner(text.encode('utf-8'))
    assert (result['version'], result['build_id']) == ('3.3.1', '2')
    assert result['hostengine_version'] is None
    assert result['hostengine'] is None


@pytest.mark.parametrize('text, version, hostengine', [
    # SYNTHETIC variants of the same "Key : Value" banner
    ('\nLocal build info:\nVersion : 4.2.3\nBuild ID : 7\n\nHostengine build info:\nVersion : 4.2.3\n', '4.2.3', '4.2.3'),
    ('\ndcgmi  version: 3.3.1\n\n', '3.3.1', None),
    ('Version : 3.3.1\r\nBuild ID : 2\r\n\r\nHostengine build info:\r\nVersion : 3.3.0\r\n', '3.3.1', '3.3.0'),
])
def test_banner_variants(text, version, hostengine):
    result = parse_version_banner(text)
    assert result['version'] == version
    assert result['hostengine_version'] == hostengine


@pytest.mark.parametrize('text', [None, '', 'dcgmi: command not found', b'\xff\xfe', 12])
def test_banner_garbage_gives_none(text):
    result = parse_version_banner(text)
    assert result['version'] is None
    assert result['build_id'] is None
    assert result['hostengine_version'] is None


# --------------------------------------------------------------------------- classify_failure

CONNECT_FAILED = ('Error: unable to establish a connection to the specified host: localhost\n'
                  'Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n')


@pytest.mark.parametrize('rc, stdout, stderr, reason, words', [
    # dcgmi/Command.cpp Connect() + DoExecuteConnectionFailure() with errorString(DCGM_ST_CONNECTION_NOT_VALID)
    (235, CONNECT_FAILED, '', 'hostengine_unreachable', ['specified host: localhost', 'invalid/disconnected']),
    (1, '', 'Unable to establish a connection to the specified host nvidia-dcgm:5555', 'hostengine_unreachable',
     ['nvidia-dcgm:5555']),
    (235, '', '', 'hostengine_unreachable', ['Host engine connection invalid/disconnected']),
    (1, 'Error: Unable to start an embedded host engine. DCGM initialization error.', '', 'hostengine_unreachable',
     ['embedded host engine']),
    # Diag::RunDiagOnce error branch with errorString(DCGM_ST_IN_USE) / DIAG_ALREADY_RUNNING / PAUSED
    (222, 'Error: Unable to complete diagnostic for group 2147483647. Return: (-34) The requested operation could '
          'not be completed because the affected resource is in use.', '', 'gpus_busy', ['affected resource is in use']),
    (217, '', 'A diag instance is already running, cannot run a new diag until the current one finishes', 'gpus_busy',
     ['already running']),
    (202, 'Error: Diagnostic could not be run while DCGM is paused.', '', 'gpus_busy', ['paused']),
    (1, '', "GPU 0 API call cudaEventCreate failed for GPU0: 'CUDA-capable device(s) is/are busy or unavailable'",
     'gpus_busy', ['busy or unavailable']),
    (1, 'Error: The GPU is busy / in use by another process', '', 'gpus_busy', ['in use by another process']),
    (222, '', '', 'gpus_busy', ['affected resource is in use']),
    (250, 'Error: Diagnostic could not be run because the Tesla recommended driver is not being used.', '',
     'not_supported', ['Tesla recommended driver']),
    (233, 'Error: Diagnostic can only be performed on a homogeneous group of GPUs.', '', 'not_supported',
     ['homogeneous']),
    (1, 'Error: Unable to run diagnostic on unsupported GPU 0.', '', 'not_supported', ['unsupported GPU 0']),
    (215, 'Error: Unable to complete diagnostic for group 0. Return: (-41) Error while launching the GPU Diagnostic.',
     '', 'diag_failed', ['Return: (-41)']),
    (226, '', '', 'diag_failed', ['DCGM GPU Diagnostic returned an error']),
    (205, '', '', 'diag_failed', ['drain the GPU']),
    # TCLAP usage errors and a test name DCGM does not know (NVIDIA/DCGM issue #67)
    (254, '', 'PARSE ERROR: Argument: -r (--run)\n             Missing a value for this argument!', 'dcgmi_failed',
     ['PARSE ERROR']),
    (1, 'Error: requested test "memory bandwidth" was not found among possible test choices.', '', 'dcgmi_failed',
     ['was not found among possible test choices']),
    (127, '', 'sh: 1: dcgmi: not found', 'dcgmi_failed', ['dcgmi: not found']),
    (None, None, None, 'dcgmi_failed', ['printed nothing']),
    (-9, b'', b'', 'dcgmi_failed', ['status -9']),
])
def test_classify_failure(rc, stdout, stderr, reason, words):
    result = classify_failure(rc, stdout, stderr)
    assert result['reason'] == reason
    for word in words:
        assert word in result['message']


def test_classify_failure_decodes_dcgm_status():
    assert classify_failure(226, '', '')['dcgm_status'] == -30
    assert classify_failure(235, CONNECT_FAILED, '')['dcgm_status'] == -21
    assert classify_failure(1, CONNECT_FAILED, '')['dcgm_status'] is None
    assert classify_failure('junk', '', '')['dcgm_status'] is None


def test_classify_failure_message_is_the_tools_own_lines():
    result = classify_failure(235, CONNECT_FAILED.encode('utf-8'), b'')
    assert result['message'] == (
        'Error: unable to establish a connection to the specified host: localhost\n'
        'Error: Unable to connect to host engine. Host engine connection invalid/disconnected.')


def test_classify_failure_json_runtime_error_document():
    # SYNTHETIC: {"DCGM Diagnostic": {"runtime_error", "version"}} as printed by HelperDisplayFailureMessage.
    stdout = _doc({'DCGM Diagnostic': {
        'runtime_error': 'Error: Unable to complete diagnostic for group 0. Return: (-34) : The requested operation '
                         'could not be completed because the affected resource is in use\n',
        'version': '4.2.3'}})
    result = classify_failure(222, stdout, '')
    assert result['reason'] == 'gpus_busy'
    assert result['message'].startswith('Error: Unable to complete diagnostic for group 0. Return: (-34)')


def test_classify_failure_json_runtime_error_unknown_words_is_diag_failed():
    stdout = _doc({'DCGM GPU Diagnostic': {'runtime_error': 'Something odd happened in nvvs'}})
    assert classify_failure(1, stdout, '') == {
        'reason': 'diag_failed', 'message': 'Something odd happened in nvvs', 'dcgm_status': None}


def test_classify_failure_real_failed_document_lists_failures():
    # dcgmi diag -j exits 226 and still prints a valid document (the GB10 source comment).
    result = classify_failure(226, _read(GB10_JSON), '')
    assert result['reason'] == 'diag_failed'
    assert result['message'] == 'software (GPU 0): ' + GB10_WARNING
    assert result['dcgm_status'] == -30


def test_classify_failure_text_table_with_failures():
    result = classify_failure(226, TEXT_3X_FAIL_SYNTHETIC, '')
    assert result['reason'] == 'diag_failed'
    assert result['message'].splitlines()[0].startswith('GPU Memory (GPU 0): GPU 0 Error using CUDA API cuCtxCreate')


def test_classify_failure_passing_document_with_nonzero_exit():
    result = classify_failure(1, _read(NVVS31_JSON), 'Error: unable to close connection to specified host: localhost')
    assert result == {'reason': 'dcgmi_failed', 'dcgm_status': None,
                      'message': 'Error: unable to close connection to specified host: localhost'}


def test_classify_failure_truncated_document():
    text = _read(GB10_JSON)[:600]
    result = classify_failure(137, text, '')
    assert result['reason'] == 'dcgmi_failed'
    assert 'truncated dcgmi diag JSON' in result['message']


# --------------------------------------------------------------------------- build_diag_argv

@pytest.mark.parametrize('kwargs, expected', [
    ({'run': 1}, ['/usr/bin/dcgmi', 'diag', '-r', '1', '-j']),
    ({'run': 4}, ['/usr/bin/dcgmi', 'diag', '-r', '4', '-j']),
    ({'run': '3'}, ['/usr/bin/dcgmi', 'diag', '-r', '3', '-j']),
    ({'run': 'software'}, ['/usr/bin/dcgmi', 'diag', '-r', 'software', '-j']),
    ({'run': ['software', 'memory_bandwidth']}, ['/usr/bin/dcgmi', 'diag', '-r', 'software,memory_bandwidth', '-j']),
    ({'run': 'sm stress, diagnostic'}, ['/usr/bin/dcgmi', 'diag', '-r', 'sm stress,diagnostic', '-j']),
    ({'run': 2, 'gpus': [0, 1]}, ['/usr/bin/dcgmi', 'diag', '-r', '2', '-i', '0,1', '-j']),
    ({'run': 2, 'gpus': 3}, ['/usr/bin/dcgmi', 'diag', '-r', '2', '-i', '3', '-j']),
    ({'run': 2, 'gpus': []}, ['/usr/bin/dcgmi', 'diag', '-r', '2', '-j']),
    ({'run': 3, 'config': '/etc/dcgm/diag.yaml', 'gpus': [2, 3], 'timeout': 900,
      'parameters': {'targeted_stress.test_duration': 30, 'pcie.test_pinned': False, 'memory.is_allowed': True}},
     ['/usr/bin/dcgmi', 'diag', '-r', '3', '-c', '/etc/dcgm/diag.yaml', '-i', '2,3', '--timeout', '900', '-p',
      'memory.is_allowed=true;pcie.test_pinned=false;targeted_stress.test_duration=30', '-j']),
    ({'run': 1, 'timeout': '60'}, ['/usr/bin/dcgmi', 'diag', '-r', '1', '--timeout', '60', '-j']),
])
def test_build_diag_argv(kwargs, expected):
    assert build_diag_argv('/usr/bin/dcgmi', **kwargs) == expected


@pytest.mark.parametrize('kwargs, bad', [
    ({'run': 0}, '0'),
    ({'run': 5}, '5'),
    ({'run': -1}, '-1'),
    ({'run': '7'}, '7'),
    ({'run': True}, 'True'),
    ({'run': 1.5}, '1.5'),
    ({'run': None}, 'None'),
    ({'run': ''}, "''"),
    ({'run': []}, '[]'),
    ({'run': 'software; reboot'}, 'software; reboot'),
    ({'run': '$(reboot)'}, '$(reboot)'),
    ({'run': ['memory', 'pcie|sh']}, 'pcie|sh'),
    ({'run': ['memory', None]}, 'None'),
    ({'run': '3,memory'}, '3'),
    ({'run': '--help'}, '--help'),
    ({'run': 1, 'config': '--help'}, '--help'),
    ({'run': 1, 'gpus': ['a']}, "'a'"),
    ({'run': 1, 'gpus': [-1]}, '-1'),
    ({'run': 1, 'gpus': [True]}, 'True'),
    ({'run': 1, 'gpus': {'0': 1}}, "{'0': 1}"),
    ({'run': 1, 'timeout': 0}, '0'),
    ({'run': 1, 'timeout': -5}, '-5'),
    ({'run': 1, 'timeout': 'soon'}, 'soon'),
    ({'run': 1, 'config': ''}, "''"),
    ({'run': 1, 'config': 'a\nb'}, 'a\\nb'),
    ({'run': 1, 'parameters': {'x;y': 1}}, 'x;y'),
    ({'run': 1, 'parameters': {'pcie.test_pinned': 'false;memory.is_allowed=true'}}, 'false;memory.is_allowed=true'),
    ({'run': 1, 'parameters': ['pcie.test_pinned=false']}, 'pcie.test_pinned=false'),
])
def test_build_diag_argv_rejects(kwargs, bad):
    with pytest.raises(ValueError) as info:
        build_diag_argv('/usr/bin/dcgmi', **kwargs)
    assert bad in str(info.value)


@pytest.mark.parametrize('path', ['', None, 5])
def test_build_diag_argv_rejects_bad_path(path):
    with pytest.raises(ValueError, match='dcgmi_path'):
        build_diag_argv(path, 1)


# --------------------------------------------------------------------------- parse_diag_text

def test_text_dcgm304_without_metadata():
    result = parse_diag_text(_read(TEXT_304))
    _check_shape(result)
    assert result['schema'] == '3'
    assert (result['dcgm_version'], result['driver_version']) == (None, None)
    assert [t['name'] for t in result['tests']] == DEPLOYMENT_3X
    assert {t['category'] for t in result['tests']} == {'Deployment'}
    assert result['summary'] == {'pass': 9, 'fail': 0, 'warn': 0, 'skip': 0}
    assert result['passed'] is True


def test_text_dcgm339_h200():
    result = parse_diag_text(_read(TEXT_339_H200))
    _check_shape(result)
    assert (result['schema'], result['dcgm_version'], result['driver_version']) == ('3', '3.3.9', '570.133.20')
    assert [(t['name'], t['category'], t['status']) for t in result['tests'][9:]] == [
        ('PCIe', 'Integration', 'pass'),
        ('GPU Memory', 'Hardware', 'pass'),
        ('Diagnostic', 'Hardware', 'pass'),
        ('Targeted Stress', 'Stress', 'pass'),
        ('Targeted Power', 'Stress', 'pass'),
        ('Memory Bandwidth', 'Stress', 'pass'),
        ('EUD Test', 'Stress', 'skip'),
    ]
    # "Pass - All": the table does not say which GPUs, so one system-wide result.
    assert result['tests'][9]['results'] == [
        {'gpu': None, 'entity_group': None, 'entity_id': None, 'status': 'pass', 'messages': []}]
    assert result['summary'] == {'pass': 15, 'fail': 0, 'warn': 0, 'skip': 1}
    assert result['passed'] is True


def test_text_dcgm339_two_interleaved_tables():
    result = parse_diag_text(_read(TEXT_339_SRUN))
    _check_shape(result)
    assert result['tables'] == 2
    assert (result['dcgm_version'], result['driver_version']) == ('3.3.9', '570.172.08')
    assert len(result['tests']) == 30
    assert [t['table'] for t in result['tests']] == [1] * 15 + [2] * 15
    assert [t['name'] for t in result['tests'][:9]] == DEPLOYMENT_3X
    assert [(t['name'], t['status']) for t in result['tests'][9:15]] == [
        ('PCIe', 'skip'), ('GPU Memory', 'skip'), ('Targeted Stress', 'skip'), ('Targeted Power', 'skip'),
        ('Memory Bandwidth', 'skip'), ('EUD Test', 'skip')]
    assert result['summary'] == {'pass': 18, 'fail': 0, 'warn': 0, 'skip': 12}


def test_text_dcgm400_per_gpu_rows():
    result = parse_diag_text(_read(TEXT_400))
    _check_shape(result)
    assert (result['schema'], result['dcgm_version'], result['driver_version']) == ('4', '4.0.0', '550.90.07')
    assert [(t['name'], t['category']) for t in result['tests']] == [
        ('software', 'Deployment'), ('memory', 'Hardware'), ('diagnostic', 'Hardware'), ('pcie', 'Integration'),
        ('memory_bandwidth', 'Stress'), ('targeted_stress', 'Stress'), ('targeted_power', 'Stress')]
    for test in result['tests']:
        assert [(r['gpu'], r['entity_group'], r['status']) for r in test['results']] == [
            (0, 'GPU', 'pass'), (1, 'GPU', 'pass'), (2, 'GPU', 'pass'), (3, 'GPU', 'pass')]
    assert result['summary'] == {'pass': 28, 'fail': 0, 'warn': 0, 'skip': 0}


# SYNTHETIC 3.x table, laid out like the real one in NVIDIA/go-dcgm issue #52 (DCGM 3.3.1): per-GPU
# results and Warning/Info rows wrapped every 45 characters by dcgmi.
TEXT_3X_FAIL_SYNTHETIC = '''Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 3.3.1                                          |
| Driver Version Detected   | 535.129.03                                     |
| GPU Device IDs Detected   | 1eb8,1eb8                                      |
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Pass - GPU: 1                                  |
|                           | Fail - GPU: 0                                  |
| Warning                   | GPU 0 Error using CUDA API cuCtxCreate Check   |
|                           | DCGM and system logs for errors. Reset GPU. R  |
|                           | estart DCGM. Rerun diagnostics.                |
| Info                      | GPU 1 Allocated 15568304202 bytes (98.3%)      |
| Diagnostic                | Fail - All                                     |
| Warning                   | GPU 0 API call cuMemGetInfo failed: 'context   |
|                           | is destroyed'                                  |
+---------------------------+------------------------------------------------+
'''


def test_text_3x_failures_and_wrapped_warnings_synthetic():
    result = parse_diag_text(TEXT_3X_FAIL_SYNTHETIC)
    _check_shape(result)
    memory = result['tests'][1]
    assert [(r['gpu'], r['status']) for r in memory['results']] == [(1, 'pass'), (0, 'fail')]
    assert memory['results'][0]['messages'] == ['GPU 1 Allocated 15568304202 bytes (98.3%)']
    assert result['failures'] == [
        {'test': 'GPU Memory', 'gpu': 0, 'message': 'GPU 0 Error using CUDA API cuCtxCreate Check DCGM and system logs '
                                                    'for errors. Reset GPU. Restart DCGM. Rerun diagnostics.'},
        {'test': 'Diagnostic', 'gpu': None, 'message': "GPU 0 API call cuMemGetInfo failed: 'context is destroyed'"},
    ]
    assert result['passed'] is False


def test_text_3x_plural_gpu_lists_synthetic():
    # SYNTHETIC rows in the "Pass - GPUs: 0, 2" form of Diag::HelperDisplayGpuResults (3.x).
    table = TEXT_3X_FAIL_SYNTHETIC.replace(
        '| Diagnostic                | Fail - All                                     |',
        '| Targeted Power            | Fail - GPUs: 0, 2                              |\n'
        '|                           | Warn - GPU: 1                                  |\n'
        '|                           | Skip - GPUs: 3, 4                              |')
    result = parse_diag_text(table)
    _check_shape(result)
    power = [t for t in result['tests'] if t['name'] == 'Targeted Power'][0]
    assert [(r['gpu'], r['status']) for r in power['results']] == [
        (0, 'fail'), (2, 'fail'), (1, 'warn'), (3, 'skip'), (4, 'skip')]
    assert power['status'] == 'fail'


# SYNTHETIC 4.x table: overall row, per-GPU rows and "Warning: GPU1" rows as printed by Diag.cpp 4.x.
TEXT_4X_FAIL_SYNTHETIC = '''Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 4.2.3                                          |
| Driver Version Detected   | 570.148.08                                     |
| GPU Device IDs Detected   | 26b9, 26b9                                     |
+-----  Hardware  ----------+------------------------------------------------+
| memory                    | Fail                                           |
|                           | GPU0: Pass                                     |
|                           | GPU1: Fail                                     |
| Warning: GPU1             | Pending page retirements detected on GPU 1. D  |
|                           | rain the GPU and reset it.                     |
+---------------------------+------------------------------------------------+
'''


def test_text_4x_entity_warning_synthetic():
    result = parse_diag_text(TEXT_4X_FAIL_SYNTHETIC)
    _check_shape(result)
    assert (result['schema'], result['dcgm_version']) == ('4', '4.2.3')
    assert result['failures'] == [{'test': 'memory', 'gpu': 1,
                                   'message': 'Pending page retirements detected on GPU 1. Drain the GPU and reset it.'}]
    assert result['tests'][0]['results'][0]['messages'] == []


@pytest.mark.parametrize('text, pattern', [
    ('', 'no "| Diagnostic | Result |" header'),
    (None, 'no "| Diagnostic | Result |" header'),
    ('{"DCGM Diagnostic": {}}', 'looks like JSON'),
    ('Error: unable to establish a connection to the specified host: localhost', 'header'),
    ('+---+\n| Diagnostic                | Result                                         |\n+===+\n', 'without any test row'),
])
def test_text_bad_input(text, pattern):
    with pytest.raises(DcgmParseError, match=pattern):
        parse_diag_text(text)


# --------------------------------------------------------------------------- odd bytes and time limits

def test_a_document_with_an_invalid_byte_is_still_read():
    # dcgm_diag decodes dcgmi's output with U+FFFD (a backslash escape would break the JSON string).
    data = _read(GB10_JSON, 'rb').replace(b'Persistence mode for GPU 0 is disabled', b'Persistence mode for GPU 0 is dis\xffabled', 1)
    assert b'\xff' in data
    document = parse_diag_json(to_text(data, errors='replace'))
    assert 'Persistence mode for GPU 0 is dis\ufffdabled.' in document['failures'][0]['message']


def test_control_characters_in_diagnostic_messages_are_escaped():
    document = json.loads(_read(GB10_JSON))
    text = json.dumps(document).replace('Persistence mode for GPU 0 is disabled', 'Persistence mode \\u001b[2J for GPU 0 is disabled')
    parsed = parse_diag_json(text)
    assert 'Persistence mode \\x1b[2J for GPU 0 is disabled.' in parsed['failures'][0]['message']
    assert '\x1b' not in parsed['failures'][0]['message']


@pytest.mark.parametrize('run, timeout, command_timeout, expected', [
    (1, None, None, 600),
    (2, None, None, 1800),
    (3, None, None, 5400),
    (4, None, None, 10800),
    (['memory', 'pcie'], None, None, 5400),
    (3, 900, None, 1020),
    (3, 900, 30, 30),
    (1, None, 5, 5),
])
def test_process_timeout(run, timeout, command_timeout, expected):
    assert process_timeout(run, timeout=timeout, command_timeout=command_timeout) == expected


@pytest.mark.parametrize('timeout, command_timeout', [(0, None), (None, 0), (None, -5), (True, None), ('x', None)])
def test_process_timeout_refuses_bad_limits(timeout, command_timeout):
    with pytest.raises(ValueError, match='whole number of seconds'):
        process_timeout(1, timeout=timeout, command_timeout=command_timeout)
