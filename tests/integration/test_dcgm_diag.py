# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""dcgm_diag through ansible-playbook, dcgmi stand-ins printing real DCGM documents."""

import os

from conftest import real, run_playbook

PLAY = os.path.join(os.path.dirname(__file__), 'playbooks', 'dcgm_diag.yml')
DCGM4_FAIL = 'dcgmi-diag-r1-json_dcgm4.2.3_580.82.09_gb10-dgx-spark_software-fail.json'
DCGM3_PASS = 'dcgm-gpu-diagnostic-json_dcgm3.1.0_8gpu_pass_null-elements_NVIDIA-DCGM-JsonResultTests.txt'


def test_dcgm_diag(fleet):
    # dcgmi exits 226 with the DCGM 4.2.3 document of a failed software test (per the sample's provenance).
    fleet.host('dcgm4-fail').tool('dcgmi', {'args': ['diag'], 'stdout_file': real('dcgmi', DCGM4_FAIL), 'rc': 226})
    fleet.host('dcgm3-pass').tool('dcgmi', {'args': ['diag'], 'stdout_file': real('dcgmi', DCGM3_PASS)})
    fleet.host('no-hostengine').tool('dcgmi', {'args': ['diag'], 'rc': 255,
                                               'stdout': 'Error: unable to establish a connection to the specified host: localhost\n'
                                                         'Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n'})
    fleet.host('no-dcgm')
    # DCGM_ST_IN_USE (-34, exit status 222) with DCGM's errorString() text for it.
    fleet.host('gpus-busy').tool('dcgmi', {'args': ['diag'], 'rc': 222, 'stdout':
                                           'Error: Unable to complete diagnostic for group 2147483647. Return: (-34) '
                                           'The requested operation could not be completed because the affected resource is in use.\n'})
    fleet.host('unknown-document').tool('dcgmi', {'args': ['diag'], 'stdout': '{"DCGM Something New": {"tests": []}}\n'})
    result = run_playbook(PLAY, fleet.inventory())

    level1 = result.task('Level 1 diagnostic')
    failed = level1['dcgm4-fail']
    assert failed['failed'] and failed['passed'] is False
    assert failed['schema'] == '4' and failed['dcgm_version'] == '4.2.3'
    assert failed['msg'].startswith('DCGM diagnostic failed: software on GPU 0: Persistence Mode: Persistence mode for GPU 0 is disabled.')
    assert failed['failures'][0]['test'] == 'software' and failed['failures'][0]['gpu'] == 0
    assert failed['cmd'][1:] == ['diag', '-r', '1', '-j']
    assert failed['dcgmi_rc'] == 226

    passed = level1['dcgm3-pass']
    assert not passed.get('failed') and passed['passed'] is True and passed['schema'] == '3'
    assert passed['summary']['fail'] == 0 and passed['summary']['pass'] > 0
    assert not passed['changed']

    unreachable = level1['no-hostengine']
    assert unreachable['failed'] and unreachable['reason'] == 'hostengine_unreachable'
    assert 'host engine' in unreachable['msg'].lower()

    missing = level1['no-dcgm']
    assert missing['failed'] and missing['reason'] == 'dcgmi_missing' and 'dcgmi was not found' in missing['msg']

    busy = level1['gpus-busy']
    assert busy['failed'] and busy['reason'] == 'gpus_busy' and 'resource is in use' in busy['msg']

    unknown = level1['unknown-document']
    assert unknown['failed'] and unknown['reason'] == 'unreadable' and 'DCGM Something New' in unknown['msg']

    reporting = result.task('Level 1 diagnostic, reporting only')['dcgm4-fail']
    assert not reporting.get('failed') and reporting['passed'] is False and reporting['summary']['fail'] == 1

    check = result.task('Tests on two GPUs in check mode')['dcgm3-pass']
    assert check['skipped'] and 'check mode: no active diagnostic was run' in check['msg']
    assert check['cmd'][1:] == ['diag', '-r', 'memory,pcie', '-i', '0,1', '--timeout', '900', '-j']
    # Two real runs per host, none in check mode.
    assert fleet.hosts['dcgm3-pass'].calls('dcgmi') == [['diag', '-r', '1', '-j'], ['diag', '-r', '1', '-j']]
