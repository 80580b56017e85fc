# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""dcgm_diag through ansible-playbook, dcgmi stand-ins printing real DCGM documents."""

import os

from conftest import pids_alive, real, run_playbook

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

    ladder = result.task('Ladder of levels 1 and 3')
    both = ladder['dcgm3-pass']
    assert not both.get('failed') and both['passed'] is True
    assert [entry['level'] for entry in both['ladder']] == [1, 3]
    assert [entry['result']['cmd'][1:4] for entry in both['ladder']] == [['diag', '-r', '1'], ['diag', '-r', '3']]
    assert all(entry['result']['passed'] for entry in both['ladder'])
    # A failed level stops the ladder: level 3 is not run (null), the task fails naming level 1 and DCGM's words.
    stopped = ladder['dcgm4-fail']
    assert stopped['failed'] and stopped['passed'] is False and stopped['ladder'][1] == {'level': 3, 'result': None}
    assert stopped['msg'].startswith('level 1: DCGM diagnostic failed: software on GPU 0: Persistence Mode')
    assert stopped['ladder'][0]['result']['failures'][0]['test'] == 'software'
    # A level that could not run is in the ladder with DCGM's reason, never a crash.
    cannot = ladder['no-hostengine']
    assert cannot['failed'] and cannot['ladder'][0]['result']['reason'] == 'hostengine_unreachable'
    assert cannot['ladder'][1]['result'] is None and cannot['msg'].startswith('level 1: dcgmi diag could not run (hostengine_unreachable)')

    reporting = result.task('Level 1 diagnostic, reporting only')['dcgm4-fail']
    assert not reporting.get('failed') and reporting['passed'] is False and reporting['summary']['fail'] == 1

    check = result.task('Tests on two GPUs in check mode')['dcgm3-pass']
    assert check['skipped'] and 'check mode: no active diagnostic was run' in check['msg']
    assert check['cmd'][1:] == ['diag', '-r', 'memory,pcie', '-i', '0,1', '--timeout', '900', '-j']
    # Real runs only (level 1, the ladder's 1 and 3, level 1 again), none in check mode.
    assert fleet.hosts['dcgm3-pass'].calls('dcgmi') == [['diag', '-r', '1', '-j'], ['diag', '-r', '1', '-j'], ['diag', '-r', '3', '-j'],
                                                        ['diag', '-r', '1', '-j']]


LIMITS_PLAY = os.path.join(os.path.dirname(__file__), 'playbooks', 'dcgm_diag_limits.yml')


def test_a_hung_dcgmi_is_killed_and_odd_bytes_are_a_result(fleet, tmp_path):
    pids = str(tmp_path / 'dcgmi.pids')
    fleet.host('hung').tool('dcgmi', {'args': ['diag'], 'stdout': 'Successfully ran diagnostic for group.\n', 'hang': 300,
                                      'hang_child': True, 'pid_file': pids})
    with open(real('dcgmi', DCGM4_FAIL), 'rb') as handle:
        document = handle.read()
    # A byte that is not UTF-8 and a terminal escape inside the diagnostic's message.
    odd = document.replace(b'Persistence mode for GPU 0 is disabled', b'Persistence mode for GPU 0 is dis\xffabled\\u001b[2J', 1)
    assert odd != document
    fleet.host('odd-bytes').tool('dcgmi', {'args': ['diag'], 'stdout_hex': odd.hex(), 'rc': 226})
    result = run_playbook(LIMITS_PLAY, fleet.inventory())
    assert result.seconds('Level 1 diagnostic with a short process limit') < 3 + 12
    outcome = result.task('Level 1 diagnostic with a short process limit')

    hung = outcome['hung']
    assert hung['failed'] and hung['reason'] == 'dcgmi_hung'
    assert hung['msg'] == '%s/dcgmi diag -r 1 -j did not finish within 3 s and was killed (with its process group)' % fleet.hosts['hung'].bin
    assert hung['stdout'] == 'Successfully ran diagnostic for group.\n'
    assert pids_alive(pids) == []

    failed = outcome['odd-bytes']
    assert failed['failed'] and failed['passed'] is False and failed['schema'] == '4'
    assert 'Persistence mode for GPU 0 is dis\ufffdabled\\x1b[2J' in failed['failures'][0]['message']
    assert '\x1b' not in failed['msg'] and 'dis\ufffdabled\\x1b[2J' in failed['msg']
