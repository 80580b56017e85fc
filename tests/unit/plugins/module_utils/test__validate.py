# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/_validate.py: the node_validate verdict, on real nccl-tests, dcgmi and kernel-log outputs."""

import copy
import os

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _dcgm
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._validate import ValidationInputError, evaluate, parse_nccl

REAL = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'unit', 'fixtures', 'real-outputs')


def real(*parts):
    with open(os.path.join(REAL, *parts), encoding='utf-8') as handle:
        return handle.read()


NCCL = {
    'all_reduce_perf_nccl2.25.1_nccl-tests2.17.6_1node-8xA100-SXM4-40GB-BM.GPU4.8_oci-ocitutorials-ol.txt': 233.168,
    'all_reduce_perf_nccl2.26.5_1node-8xA100-SXM4-40GB-BM.GPU4.8_oci-ocitutorials-ubuntu.txt': 232.167,
    'all_reduce_perf_nccl2.21.5_2node-16xH100-BM.GPU.H100.8_oci-ocitutorials.txt': 458.452,
    'all_reduce_perf_nccl2.21.5_2node-16xA100-SXM4-40GB-BM.GPU4.8_oci-ocitutorials.txt': 220.921,
}


def gpus(count=8):
    return [{'index': index, 'name': 'NVIDIA H100 80GB HBM3', 'uuid': 'GPU-%d' % index, 'pci_bus_id': '00000000:%02X:00.0' % (0x18 + index),
             'fabric': {'state': 'Completed', 'status': 'Success'}} for index in range(count)]


FACTS = {
    'health': 'ok', 'health_reason': None, 'health_message': None, 'driver_version': '580.65.06', 'gpu_count': 8, 'attached_gpus': 8,
    'nvswitch_count': 4, 'gpus': gpus(),
    'services': {'nvidia-fabricmanager': {'active': 'active', 'sub': 'running'}, 'nvidia-persistenced': {'active': 'active', 'sub': 'running'}},
}
IN_SYNC = {'status': 'in_sync', 'drift': {}, 'checked': ['driver']}


def facts(**changes):
    value = copy.deepcopy(FACTS)
    value.update(changes)
    return value


def named(result, name):
    return [check for check in result['checks'] if check['name'] == name][0]


@pytest.mark.parametrize('name, average', sorted(NCCL.items()))
def test_parse_nccl_real_outputs(name, average):
    parsed = parse_nccl(real('nccl-tests', name))
    assert parsed['avg_busbw'] == average
    assert parsed['out_of_bounds'] == 0 and parsed['wrong'] == 0 and parsed['rows'] >= 1


def test_fit_node_passes_every_check():
    result = evaluate(facts(), drift=IN_SYNC, expected_gpu_count=8, kernel_log={'rc': 0, 'stdout': ''},
                      diag=[{'level': 1, 'result': {'passed': True, 'summary': {'pass': 8}}}],
                      nccl={'rc': 0, 'stdout': real('nccl-tests', sorted(NCCL)[2])}, nccl_min_busbw=200)
    assert result['passed'], result
    assert [check['name'] for check in result['checks']] == [
        'health', 'pin', 'gpu_count', 'xid', 'fabric_manager', 'fabric_state', 'persistenced', 'dcgm_diag_r1', 'nccl']


def test_broken_node_fails_with_the_tools_words():
    result = evaluate(facts(health='broken', health_reason='driver_library_mismatch', gpu_count=0, gpus=[],
                            health_message='Failed to initialize NVML: Driver/library version mismatch'))
    assert not result['passed']
    assert 'Driver/library version mismatch' in named(result, 'health')['message']
    assert not named(result, 'fabric_state')['passed']


def test_gpu_lost_across_the_reboot():
    result = evaluate(facts(gpu_count=7, attached_gpus=7, gpus=gpus(7)), expected_gpu_count=8)
    check = named(result, 'gpu_count')
    assert not check['passed'] and check['message'] == 'nvidia-smi lists 7 GPU(s), 8 before'


def test_drift_names_the_gpu_for_per_gpu_components():
    drift = {'status': 'drifted', 'drift': {
        'driver': {'expected': '580.65.06', 'actual': '550.127.05', 'source': 'nvidia-smi'},
        'vbios': {'3': {'model': 'NVIDIA H100 80GB HBM3', 'uuid': 'GPU-3', 'expected': '96.00.99.00.02', 'actual': '96.00.99.00.01'}}}}
    message = named(evaluate(facts(), drift=drift), 'pin')['message']
    assert 'driver: expected 580.65.06, actual 550.127.05 (nvidia-smi)' in message
    assert 'GPU 3 (NVIDIA H100 80GB HBM3, GPU-3): vbios expected 96.00.99.00.02, actual 96.00.99.00.01' in message


def test_real_dcgm_failure_names_gpu_and_dcgms_words():
    document = _dcgm.parse_diag_json(real('dcgmi', 'dcgmi-diag-r1-json_dcgm4.2.3_580.82.09_gb10-dgx-spark_software-fail.json'))
    result = evaluate(facts(), diag=[{'level': 1, 'result': document}, {'level': 3, 'result': None}])
    first, second = named(result, 'dcgm_diag_r1'), named(result, 'dcgm_diag_r3')
    assert not first['passed'] and first['message'].startswith('dcgmi diag -r 1 failed: GPU 0 (00000000:18:00.0, GPU-0): software:')
    assert 'Persistence mode for GPU 0 is disabled' in first['message']
    assert not second['passed'] and 'earlier level' in second['message']


def test_diag_that_could_not_run():
    result = evaluate(facts(), diag=[{'level': 1, 'result': {'failed': False, 'reason': 'hostengine_unreachable', 'msg': 'Unable to connect'}}])
    assert named(result, 'dcgm_diag_r1')['message'] == 'dcgmi diag -r 1 could not run (hostengine_unreachable): Unable to connect'


def test_real_kernel_log_fallen_off_the_bus():
    text = real('errors', 'dmesg-gpu-fallen-off-bus_no-xid_l40_570.158.01_nvsentinel-issue155.txt')
    check = named(evaluate(facts(), kernel_log={'rc': 0, 'stdout': text}), 'xid')
    assert not check['passed'] and 'fallen off the bus' in check['message'] and '0000:b3:00.0' in check['message']


def test_xid_names_the_gpu():
    line = "[Mon Jan  6 10:00:00 2025] NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    check = named(evaluate(facts(), kernel_log={'rc': 0, 'stdout': line}), 'xid')
    assert check['message'].startswith('GPU 3 (00000000:1B:00.0, GPU-3): Xid 79:'), check


def test_unreadable_kernel_log_fails():
    check = named(evaluate(facts(), kernel_log={'rc': 1, 'stdout': '', 'stderr': 'No journal files were found.'}), 'xid')
    assert not check['passed'] and 'No journal files were found.' in check['message']


def test_fabric_manager_and_state_on_nvswitch_systems():
    broken = facts()
    broken['services']['nvidia-fabricmanager'] = {'active': 'failed', 'sub': 'failed'}
    broken['gpus'][2]['fabric'] = {'state': 'In Progress', 'status': 'N/A'}
    result = evaluate(broken)
    assert named(result, 'fabric_manager')['message'] == 'nvidia-fabricmanager is failed (failed) on an NVSwitch system (4 NVSwitch)'
    assert 'GPU 2 (00000000:1A:00.0, GPU-2): fabric state In Progress' in named(result, 'fabric_state')['message']
    pcie = evaluate(facts(nvswitch_count=0))
    assert 'fabric_manager' not in [check['name'] for check in pcie['checks']]


def test_persistenced():
    stopped = facts()
    stopped['services']['nvidia-persistenced'] = {'active': 'inactive', 'sub': 'dead'}
    assert not evaluate(stopped)['passed']
    assert evaluate(stopped, persistenced=False)['passed']


@pytest.mark.parametrize('nccl, minimum, passed, words', [
    ({'rc': 127, 'stdout': '', 'stderr': ''}, 0, True, 'not installed'),
    ({'rc': 0, 'stdout': real('nccl-tests', sorted(NCCL)[2])}, 300, False, 'below the threshold 300'),
    ({'rc': 1, 'stdout': '', 'stderr': 'NCCL WARN Cuda failure'}, 0, False, 'NCCL WARN Cuda failure'),
    # nccl-tests prints CUDACHECK / NCCLCHECK failures on stdout (src/common.h), stderr stays empty: the check quotes stdout.
    ({'rc': 3, 'msg': 'non-zero return code', 'stderr': '',
      'stdout': "# Using devices\nnode1: Test NCCL failure common.cu:1279 'unhandled system error (run with NCCL_DEBUG=INFO for details) / '\n"
                " .. node1 pid 42: Test failure common.cu:1100\n"}, 0, False,
     "(rc 3): node1: Test NCCL failure common.cu:1279 'unhandled system error"),
    ({'rc': 0, 'stdout': '# nothing'}, 0, False, 'no "Avg bus bandwidth"'),
])
def test_nccl(nccl, minimum, passed, words):
    check = named(evaluate(facts(), nccl=nccl, nccl_min_busbw=minimum), 'nccl')
    assert check['passed'] is passed and words in check['message'], check


def test_wrong_results_fail_nccl():
    text = real('nccl-tests', sorted(NCCL)[2]).replace('       0  80528.8', '       3  80528.8')
    assert 'wrong results' in named(evaluate(facts(), nccl={'rc': 0, 'stdout': text}), 'nccl')['message']


def test_bad_input_names_the_field():
    with pytest.raises(ValidationInputError, match='expected_gpu_count'):
        evaluate(facts(), expected_gpu_count='eight')
    with pytest.raises(ValidationInputError, match='facts'):
        evaluate(None)


def test_a_ladder_result_of_dcgm_diag_levels_is_read_as_its_ladder():
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _validate
    passed = {'passed': True, 'summary': {'pass': 3}}
    assert _validate.ladder_entries({'ladder': [{'level': 1, 'result': passed}], 'passed': True}, [1]) == [{'level': 1, 'result': passed}]
    # dcgmi missing: the module could not start the ladder; the first level carries its answer, the next ones were not run.
    missing = {'failed': True, 'reason': 'dcgmi_missing', 'msg': 'dcgmi was not found on PATH'}
    assert _validate.ladder_entries(missing, [1, 3]) == [{'level': 1, 'result': missing}, {'level': 3, 'result': None}]


# ---- persistence and nodes without systemd (issue 27)

# The real H100 node (tests/unit/fixtures/real-outputs/h100-device, issue 27): one GPU, persistence mode Enabled (nvidia-smi -q -x),
# nvidia-persistenced running from the driver tree but no systemd (every unit reads null), no NVSwitch, no Fabric Manager.
H100 = {
    'health': 'ok', 'health_reason': None, 'health_message': None, 'driver_version': '580.159.04', 'gpu_count': 1, 'attached_gpus': 1,
    'nvswitch_count': 0, 'systemd': False, 'persistence_mode': 'Enabled',
    'gpus': [{'index': 0, 'name': 'NVIDIA H100 80GB HBM3', 'uuid': 'GPU-b76bcbb4-5a3d-f209-2823-57b9c3c452ba', 'pci_bus_id': '00000000:00:06.0',
              'persistence_mode': 'Enabled', 'fabric': {'state': None, 'status': None}}],
    'services': {'dcgm': None, 'nvidia-dcgm': None, 'nvidia-fabricmanager': None, 'nvidia-persistenced': None},
}


def h100(**changes):
    value = copy.deepcopy(H100)
    value.update(changes)
    return value


def test_the_h100_without_systemd_passes_on_what_nvidia_smi_reports():
    result = evaluate(h100(), expected_gpu_count=1)
    assert result['passed'], result
    assert named(result, 'persistenced')['message'] == ('persistence mode Enabled on every GPU (1, nvidia-smi); '
                                                        'no systemd to ask about nvidia-persistenced')
    # No NVSwitch: no Fabric Manager check, whatever systemd says.
    assert [check['name'] for check in result['checks']] == ['health', 'gpu_count', 'persistenced']


def test_persistence_disabled_on_a_gpu_fails_naming_it_whatever_the_unit_says():
    for services in (H100['services'], {'nvidia-persistenced': {'active': 'active', 'sub': 'running'}}):
        node = h100(services=services, systemd=services is not H100['services'], persistence_mode='Disabled')
        node['gpus'][0]['persistence_mode'] = 'Disabled'
        check = named(evaluate(node), 'persistenced')
        assert not check['passed']
        assert check['message'].startswith('persistence mode is Disabled on GPU 0 (00000000:00:06.0, GPU-b76bcbb4-5a3d-f209-2823-57b9c3c452ba)')


def test_no_systemd_and_no_answer_from_nvidia_smi_fails_never_passes_blindly():
    node = h100(persistence_mode=None)
    node['gpus'][0]['persistence_mode'] = None
    check = named(evaluate(node), 'persistenced')
    assert not check['passed']
    assert check['message'] == ('cannot confirm persistence mode: nvidia-smi reports no persistence mode for GPU 0 (00000000:00:06.0, '
                                'GPU-b76bcbb4-5a3d-f209-2823-57b9c3c452ba) and no systemd to ask about nvidia-persistenced')
    assert not named(evaluate(h100(gpus=[], gpu_count=0, persistence_mode=None)), 'persistenced')['passed']


def test_the_unit_is_one_source_among_others():
    # Enabled on every GPU passes with the unit inactive (kept by nvidia-smi -pm 1, or a daemon systemd does not run).
    stopped = facts()
    stopped['services']['nvidia-persistenced'] = {'active': 'inactive', 'sub': 'dead'}
    for gpu in stopped['gpus']:
        gpu['persistence_mode'] = 'Enabled'
    check = named(evaluate(stopped), 'persistenced')
    assert check['passed'] and check['message'] == 'persistence mode Enabled on every GPU (8, nvidia-smi); nvidia-persistenced is inactive (dead)'
    # The unit active and nvidia-smi silent: passes, and says so.
    assert named(evaluate(facts()), 'persistenced')['message'] == 'nvidia-persistenced is active; nvidia-smi reports no persistence mode for 8 GPU(s)'
    # Only the node-wide value: it stands for every GPU.
    assert named(evaluate(h100(gpus=[dict(H100['gpus'][0], persistence_mode=None)])), 'persistenced')['passed']


def test_fabric_manager_without_systemd_goes_by_the_fabric_state():
    node = facts(systemd=False, services={'nvidia-fabricmanager': None, 'nvidia-persistenced': None})
    for gpu in node['gpus']:
        gpu['persistence_mode'] = 'Enabled'
    result = evaluate(node)
    assert result['passed'], result
    assert named(result, 'fabric_manager')['message'] == ('no systemd to ask about nvidia-fabricmanager; nvidia-smi reports fabric state '
                                                          'Completed on every GPU (4 NVSwitch)')
    training = copy.deepcopy(node)
    training['gpus'][5]['fabric'] = {'state': 'In Progress', 'status': None}
    assert not named(evaluate(training), 'fabric_manager')['passed'] and not named(evaluate(training), 'fabric_state')['passed']
    silent = copy.deepcopy(node)
    for gpu in silent['gpus']:
        gpu['fabric'] = {'state': None, 'status': None}
    check = named(evaluate(silent), 'fabric_manager')
    assert not check['passed'] and 'nvidia-smi reports no fabric state' in check['message']
    # With systemd, a unit that is not active still fails, as before.
    assert not named(evaluate(facts(services={'nvidia-fabricmanager': None})), 'fabric_manager')['passed']
