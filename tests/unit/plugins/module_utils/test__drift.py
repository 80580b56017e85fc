# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Drift between a node's facts and the pin."""

import copy

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _facts
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._drift import (
    COMPONENTS, DriftError, compute_drift, normalize_pin, render_diff)
from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import read_real_output

H100 = 'NVIDIA H100 80GB HBM3'
A100 = 'NVIDIA A100-SXM4-80GB'

FACTS = {
    'schema_version': 1,
    'health': 'ok',
    'health_reason': None,
    'health_message': None,
    'driver_version': '580.65.06',
    'cuda_driver_version': '13.0',
    'kernel': '6.8.0-45-generic',
    'gpu_count': 2,
    'gpus': [
        {'index': 0, 'name': H100, 'uuid': 'GPU-aaaa', 'vbios_version': '96.00.99.00.01', 'gsp_firmware_version': '580.65.06'},
        {'index': 1, 'name': H100, 'uuid': 'GPU-bbbb', 'vbios_version': '96.00.99.00.01', 'gsp_firmware_version': '580.65.06'},
    ],
    'nvswitch_count': 4,
    'package_manager': 'dpkg',
    'packages': {
        'nvidia-driver-580-server': '580.65.06-0ubuntu1',
        'nvidia-fabricmanager-580': '580.65.06-1',
        'nvidia-container-toolkit': '1.17.0-1',
        'nvidia-container-toolkit-base': '1.17.0-1',
        'datacenter-gpu-manager-4-core': '1:4.1.0-1',
        'cuda-toolkit-13-0': '13.0.2-1',
    },
    'tools': {'dcgm': '4.1.0', 'nvidia_ctk': '1.17.0', 'fabric_manager': '580.65.06', 'nvcc': None},
}

PIN = {
    'kernel': '6.8.0-45-generic',
    'driver': '580.65.06',
    'cuda_driver': '13.0',
    'gsp_firmware': '580.65.06',
    'vbios': {H100: '96.00.99.00.01'},
    'fabric_manager': '580.65.06',
    'container_toolkit': '1.17.0',
    'dcgm': '4.1.0',
    'cuda_toolkit': '13.0',
}


def facts(**changes):
    result = copy.deepcopy(FACTS)
    result.update(changes)
    return result


def test_in_sync_checks_every_pinned_component():
    report = compute_drift(facts(), PIN)
    assert report['status'] == 'in_sync'
    assert report['drift'] == {}
    assert report['checked'] == list(COMPONENTS)


def test_driver_and_packages_drift_with_sources():
    node = facts(driver_version='550.127.05', cuda_driver_version='12.4')
    node['packages']['datacenter-gpu-manager-4-core'] = '1:4.0.0-1'
    node['packages']['nvidia-fabricmanager-550'] = node['packages'].pop('nvidia-fabricmanager-580').replace('580.65.06', '550.127.05')
    report = compute_drift(node, PIN)
    assert report['status'] == 'drifted'
    assert report['drift']['driver'] == {'expected': '580.65.06', 'actual': '550.127.05', 'source': 'nvidia-smi'}
    assert report['drift']['cuda_driver']['actual'] == '12.4'
    assert report['drift']['dcgm'] == {'expected': '4.1.0', 'actual': '1:4.0.0-1', 'source': 'datacenter-gpu-manager-4-core'}
    assert report['drift']['fabric_manager'] == {'expected': '580.65.06', 'actual': '550.127.05-1', 'source': 'nvidia-fabricmanager-550'}
    assert 'container_toolkit' not in report['drift']


def test_vbios_pinned_per_model_reports_each_gpu():
    node = facts()
    node['gpus'][1]['vbios_version'] = '96.00.74.00.0D'
    node['gpus'].append({'index': 2, 'name': A100, 'uuid': 'GPU-cccc', 'vbios_version': '92.00.45.00.03', 'gsp_firmware_version': '580.65.06'})
    report = compute_drift(node, dict(PIN, vbios={H100: '96.00.99.00.01', A100: '92.00.36.00.02'}))
    assert report['drift']['vbios'] == {
        '1': {'model': H100, 'uuid': 'GPU-bbbb', 'expected': '96.00.99.00.01', 'actual': '96.00.74.00.0D'},
        '2': {'model': A100, 'uuid': 'GPU-cccc', 'expected': '92.00.36.00.02', 'actual': '92.00.45.00.03'},
    }


def test_vbios_single_value_and_unpinned_model():
    node = facts()
    node['gpus'].append({'index': 2, 'name': A100, 'uuid': 'GPU-cccc', 'vbios_version': '92.00.45.00.03'})
    assert set(compute_drift(node, {'vbios': '96.00.99.00.01'})['drift']['vbios']) == {'2'}
    assert compute_drift(node, {'vbios': {H100: '96.00.99.00.01'}})['status'] == 'in_sync'


def test_gsp_firmware_per_gpu():
    node = facts()
    node['gpus'][0]['gsp_firmware_version'] = '550.127.05'
    report = compute_drift(node, {'gsp_firmware': '580.65.06'})
    assert report['drift']['gsp_firmware']['0']['actual'] == '550.127.05'


@pytest.mark.parametrize('reason', ['driver_library_mismatch', 'driver_unreachable', 'no_devices', 'gpu_lost'])
def test_broken_node_is_never_drifted(reason):
    node = facts(health='broken', health_reason=reason, health_message='Failed to initialize NVML', driver_version=None, gpus=[])
    report = compute_drift(node, PIN)
    assert report['status'] == 'broken'
    assert report['drift'] == {}
    assert report['unverified'] == list(COMPONENTS)
    assert reason in report['message']


def test_absent_driver_is_drift_and_firmware_not_applicable():
    node = facts(health='absent', driver_version=None, cuda_driver_version=None, gpus=[], gpu_count=0, packages={}, nvswitch_count=0,
                 tools={})
    report = compute_drift(node, PIN)
    assert report['status'] == 'drifted'
    assert report['drift']['driver'] == {'expected': '580.65.06', 'actual': None, 'source': 'nvidia-smi'}
    assert {'vbios', 'gsp_firmware', 'fabric_manager'} <= set(report['not_applicable'])


def test_fabric_manager_only_on_nvswitch_or_when_installed():
    pcie = facts(nvswitch_count=0, tools={'dcgm': '4.1.0'})
    del pcie['packages']['nvidia-fabricmanager-580']
    report = compute_drift(pcie, {'fabric_manager': '580.65.06'})
    # Nothing the pin names applies to a PCIe node: not checked, never "in sync".
    assert report['status'] == 'not_checked' and report['not_applicable'] == ['fabric_manager']
    assert 'nothing the pin names can be compared' in report['message']
    report = compute_drift(pcie, {'fabric_manager': '580.65.06', 'dcgm': '4.1.0'})
    assert report['status'] == 'in_sync' and report['checked'] == ['dcgm'] and report['not_applicable'] == ['fabric_manager']
    hgx = facts(tools={})
    del hgx['packages']['nvidia-fabricmanager-580']
    assert compute_drift(hgx, {'fabric_manager': '580.65.06'})['drift']['fabric_manager']['actual'] is None


@pytest.mark.parametrize('scheme, installed, pinned, drifted', [
    ('dpkg', '1.17.0-1', '1.17.0', False),
    ('dpkg', '1.17.0-1', '1.17.0-1', False),
    ('dpkg', '1.17.0-1', '1.17.0-2', True),
    ('dpkg', '1.15.0~rc.1-1', '1.15.0', True),
    ('dpkg', '1.15.0~rc.1-1', '1.15.0~rc.1', False),
    ('rpm', '1.17.0-1', '1.17.0', False),
    ('rpm', '1.16.2-1', '1.17.0', True),
])
def test_package_versions_compare_like_the_package_manager(scheme, installed, pinned, drifted):
    node = facts(package_manager=scheme)
    node['packages']['nvidia-container-toolkit'] = installed
    assert ('container_toolkit' in compute_drift(node, {'container_toolkit': pinned})['drift']) is drifted


def test_rpm_epoch_on_dcgm():
    node = facts(package_manager='rpm', packages={'datacenter-gpu-manager-4-core': '1:4.1.0-1'})
    assert compute_drift(node, {'dcgm': '4.1.0'})['status'] == 'in_sync'
    assert compute_drift(node, {'dcgm': '4.2.3'})['status'] == 'drifted'


def test_tool_banner_used_without_package():
    node = facts(packages={}, tools={'nvidia_ctk': '1.16.2', 'dcgm': '4.1.0'})
    report = compute_drift(node, {'container_toolkit': '1.17.0', 'dcgm': '4.1.0'})
    assert report['drift'] == {'container_toolkit': {'expected': '1.17.0', 'actual': '1.16.2', 'source': 'nvidia-ctk --version'}}


def test_cuda_toolkit_from_nvcc_then_packages():
    node = facts()
    node['packages']['cuda-toolkit-12-4'] = '12.4.1-1'
    assert compute_drift(node, {'cuda_toolkit': '13.0'})['status'] == 'in_sync'
    node['tools']['nvcc'] = '12.4.131'
    assert compute_drift(node, {'cuda_toolkit': '13.0'})['drift']['cuda_toolkit']['actual'] == '12.4.131'


def test_kernel_pin_may_omit_flavour():
    assert compute_drift(facts(), {'kernel': '6.8.0-45'})['status'] == 'in_sync'
    assert compute_drift(facts(), {'kernel': '6.8.0-4'})['status'] == 'drifted'


def test_unpinned_components_are_not_checked():
    report = compute_drift(facts(driver_version='1.0'), {'driver': '', 'dcgm': None, 'vbios': {}})
    # A pin that pins nothing checks nothing: `checked: []` is not "in sync".
    assert report['status'] == 'not_checked' and report['checked'] == []


@pytest.mark.parametrize('value, problem', [
    ('580.65.06; rm -rf /', 'is not a version'),
    ('580.65.06\nDCGM_VERSION=1', 'is not a version'),
    ('--force-yes', 'starts with a dash'),
    ('$(reboot)', 'is not a version'),
    ('5' * 65, 'is 65 characters long'),
    ('580.65.06 ', None),
])
def test_pinned_values_must_look_like_versions(value, problem):
    if problem is None:
        assert normalize_pin({'driver': value})['driver'] == '580.65.06'
        return
    with pytest.raises(DriftError, match='pin component driver: .*' + problem):
        normalize_pin({'driver': value})
    with pytest.raises(DriftError, match='pin component vbios.NVIDIA H100: .*' + problem):
        normalize_pin({'vbios': {'NVIDIA H100': value}})


@pytest.mark.parametrize('mangle, field', [
    (lambda f: f.update(gpus='GPU-0'), 'facts.gpus must be a list, got str'),
    (lambda f: f['gpus'].append(['x']), r'facts.gpus\[2\] must be a mapping, got list'),
    (lambda f: f['gpus'][1].update(vbios_version=96), r'facts.gpus\[1\].vbios_version must be a string or null, got int'),
    (lambda f: f.update(packages=['nvidia-driver']), 'facts.packages must be a mapping, got list'),
    (lambda f: f['packages'].update({'dcgm': {'v': 1}}), r"facts.packages\['dcgm'\] must be a version string or null, got dict"),
    (lambda f: f.update(health='fine'), "facts.health must be ok, broken or absent \\(got 'fine'\\)"),
    (lambda f: f.update(nvswitch_count='4'), 'facts.nvswitch_count must be an integer or null, got str'),
    (lambda f: f.update(driver_version=580.65), 'facts.driver_version must be a string or null, got float'),
])
def test_facts_of_the_wrong_shape_are_refused_naming_the_field(mangle, field):
    wrong = facts()
    mangle(wrong)
    with pytest.raises(DriftError, match=field):
        compute_drift(wrong, {'driver': '580.65.06'})


@pytest.mark.parametrize('pin, words', [
    ({'drivr': '580'}, ['drivr', 'valid components', 'cuda_toolkit']),
    ({'driver': ['580']}, ['driver', 'version string']),
    (['driver'], ['mapping']),
])
def test_bad_pin(pin, words):
    with pytest.raises(DriftError) as caught:
        normalize_pin(pin)
    for word in words:
        assert word in str(caught.value)


def test_facts_without_health_are_refused():
    with pytest.raises(DriftError, match='gpu_facts'):
        compute_drift({'driver_version': '580'}, PIN)


def test_diff_shows_actual_before_and_pin_after():
    node = facts(driver_version='550.127.05')
    node['gpus'][1]['vbios_version'] = '96.00.74.00.0D'
    del node['packages']['nvidia-container-toolkit']
    del node['packages']['nvidia-container-toolkit-base']
    node['tools']['nvidia_ctk'] = None
    before, after = render_diff(compute_drift(node, PIN))
    assert before == ('driver: 550.127.05\n'
                      'vbios[gpu 1 NVIDIA H100 80GB HBM3]: 96.00.74.00.0D\n'
                      'container_toolkit: not installed\n')
    assert after == ('driver: 580.65.06\n'
                     'vbios[gpu 1 NVIDIA H100 80GB HBM3]: 96.00.99.00.01\n'
                     'container_toolkit: 1.17.0\n')


def test_components_show_in_sync_and_drifted_with_actual_and_pinned():
    node = facts(driver_version='550.127.05')
    node['gpus'][1]['vbios_version'] = '96.00.74.00.0D'
    report = compute_drift(node, PIN)
    components = report['components']
    assert sorted(components) == sorted(report['checked'] + report['not_applicable'])
    assert components['driver'] == {'status': 'drifted', 'expected': '580.65.06', 'actual': '550.127.05', 'source': 'nvidia-smi'}
    assert components['dcgm']['status'] == 'in_sync' and components['dcgm']['actual'] and components['dcgm']['expected'] == PIN['dcgm']
    assert components['vbios']['status'] == 'drifted'
    assert components['vbios']['actual'] == sorted({'96.00.74.00.0D', FACTS['gpus'][0]['vbios_version']})
    assert set(components['vbios']['gpus']) == {'1'}
    assert [name for name, entry in components.items() if entry['status'] == 'drifted'] == sorted(report['drift'], key=list(COMPONENTS).index)


def test_components_of_a_broken_node_are_unverified():
    node = facts(health='broken', health_reason='gpu_lost', health_message='GPU lost', driver_version=None, gpus=[])
    report = compute_drift(node, PIN)
    assert set(entry['status'] for entry in report['components'].values()) == {'unverified'}
    assert report['components']['driver'] == {'status': 'unverified', 'expected': PIN['driver'], 'actual': None}


def test_components_not_applicable_fabric_manager():
    node = facts(nvswitch_count=0)
    node['packages'] = dict((name, version) for name, version in node['packages'].items() if 'fabricmanager' not in name)
    node['tools'] = dict(node['tools'], fabric_manager=None)
    report = compute_drift(node, PIN)
    assert report['components']['fabric_manager'] == {'status': 'not_applicable', 'expected': PIN['fabric_manager'], 'actual': None}


# --------------------------------------------------------------------------- the running kernel and the loaded driver

def _assembled(proc_name, smi_stdout, rc=0):
    """gpufleet facts as gpu_facts assembles them from a real /proc/driver/nvidia/version and nvidia-smi's answer."""
    return _facts.assemble({'kernel': '6.1.0-26-amd64', 'proc_driver_version': read_real_output('proc', proc_name),
                            'nvidia_smi': {'path': '/usr/bin/nvidia-smi', 'rc': rc, 'stdout': smi_stdout, 'stderr': ''}})


def test_driver_is_the_loaded_module_from_proc():
    # The module's banner is the authoritative loaded driver; nvidia-smi's answer (from the same module) is the fallback.
    node = facts(driver_version='565.57.01', kernel_module_version='565.57.01')
    report = compute_drift(node, {'driver': '580.65.06'})
    assert report['drift']['driver'] == {'expected': '580.65.06', 'actual': '565.57.01', 'source': '/proc/driver/nvidia/version'}
    assert compute_drift(node, {'driver': '565'})['components']['driver']['source'] == '/proc/driver/nvidia/version'
    assert compute_drift(facts(kernel_module_version=None), {'driver': '580'})['components']['driver']['source'] == 'nvidia-smi'


def test_real_mismatch_is_broken_and_names_the_loaded_module():
    # truenas-nvidia-drivers#19: 580.178 installed, 580.173.02 still loaded; nvidia-smi refuses, the node is not compared.
    node = _assembled('proc-driver-nvidia-version_580.173.02_nvml-mismatch_truenas-nvidia-drivers-issue19.txt',
                      read_real_output('proc', 'nvidia-smi_nvml-mismatch_580.178-vs-580.173.02_truenas-nvidia-drivers-issue19.txt'), rc=18)
    assert (node['health_reason'], node['kernel_module_version']) == ('driver_library_mismatch', '580.173.02')
    assert node['health_message'].endswith('loaded kernel module: 580.173.02')
    report = compute_drift(node, {'driver': '580.178', 'kernel': '6.1.0-26-amd64'})
    assert report['status'] == 'broken' and report['drift'] == {}


def test_kernel_pin_compares_the_running_kernel():
    # A kernel installed but not booted is drift: the running kernel (uname -r) is what counts.
    report = compute_drift(facts(kernel='6.1.0-26-amd64'), {'kernel': '6.1.0-28-amd64'})
    assert report['drift']['kernel'] == {'expected': '6.1.0-28-amd64', 'actual': '6.1.0-26-amd64', 'source': 'uname'}
    assert compute_drift(facts(kernel='6.1.0-28-amd64'), {'kernel': '6.1.0-28-amd64'})['status'] == 'in_sync'


def test_kernel_module_version_must_be_a_string():
    with pytest.raises(DriftError, match=r'facts\.kernel_module_version must be a string or null, got int'):
        compute_drift(facts(kernel_module_version=580), {'driver': '580'})


# --------------------------------------------------------------------------- the driver flavor and the driver source (issue 27)

# The real H100 node's facts, as gpu_facts reads them now (issue 27): one GPU, the open kernel module 580.159.04 from a driver
# tree no package owns (/usr/local/nvidia), no systemd.
H100_NODE = dict(FACTS, driver_version='580.159.04', kernel_module_version='580.159.04', kernel_module_flavor='open',
                 driver_source='unowned', driver_source_evidence='/usr/local/nvidia/bin/nvidia-smi, /usr/local/nvidia/version',
                 systemd=False, nvswitch_count=0, gpu_count=1, packages={}, tools={},
                 gpus=[{'index': 0, 'name': H100, 'uuid': 'GPU-b76bcbb4-5a3d-f209-2823-57b9c3c452ba', 'vbios_version': '96.00.DA.00.0C',
                        'gsp_firmware_version': '580.159.04', 'persistence_mode': 'Enabled'}])


@pytest.mark.parametrize('flavor, loaded, drifted', [
    ('open', 'open', False), ('server', 'open', True), ('cuda-drivers', 'open', True),
    ('server', 'proprietary', False), ('cuda-drivers', 'proprietary', False), ('open', 'proprietary', True),
])
def test_driver_flavor_is_a_component_of_its_own(flavor, loaded, drifted):
    report = compute_drift(facts(kernel_module_version='580.65.06', kernel_module_flavor=loaded), {'driver': '580.65.06'},
                           driver_flavor=flavor)
    expected = 'open' if flavor == 'open' else 'proprietary'
    # The right version on the wrong flavor is drifted, and named as the flavor (the driver itself is in sync).
    assert report['components']['driver']['status'] == 'in_sync'
    assert report['components']['driver_flavor'] == {'status': 'drifted' if drifted else 'in_sync', 'expected': expected,
                                                     'actual': loaded, 'source': '/proc/driver/nvidia/version', 'driver_flavor': flavor}
    assert report['status'] == ('drifted' if drifted else 'in_sync') and ('driver_flavor' in report['drift']) is drifted
    assert report['checked'] == ['driver', 'driver_flavor']
    if drifted:
        assert report['message'] == 'drifted from the pin: driver_flavor'
        before, after = render_diff(report)
        assert (before, after) == ('driver_flavor: %s\n' % loaded, 'driver_flavor: %s\n' % expected)


def test_driver_flavor_not_given_is_not_compared():
    report = compute_drift(facts(kernel_module_flavor='open'), {'driver': '580.65.06'})
    assert 'driver_flavor' not in report['components'] and report['status'] == 'in_sync'


def test_driver_flavor_is_compared_only_with_a_pinned_driver():
    # A DCGM-only pin says nothing of the kernel module: an open node is not drifted for it (the nightly converge would pick
    # it every night and change nothing).
    report = compute_drift(facts(kernel_module_flavor='open', tools={'dcgm': '4.1.0'}), {'dcgm': '4.1.0'}, driver_flavor='server')
    assert 'driver_flavor' not in report['components'] and report['status'] != 'drifted', report


def test_driver_flavor_of_a_node_without_a_driver_or_a_broken_one():
    absent = compute_drift(facts(health='absent', driver_version=None, gpus=[], kernel_module_flavor=None), {'driver': '580.65.06'},
                           driver_flavor='open')
    assert absent['drift']['driver_flavor']['actual'] is None and absent['status'] == 'drifted'
    broken = compute_drift(facts(health='broken', health_reason='gpu_lost', health_message='GPU lost', kernel_module_flavor='open'),
                           {'driver': '580.65.06'}, driver_flavor='open')
    assert broken['components']['driver_flavor']['status'] == 'unverified' and 'driver_flavor' in broken['unverified']


def test_driver_flavor_must_be_one_the_roles_know():
    with pytest.raises(DriftError, match=r'driver_flavor must be one of server, open, cuda-drivers'):
        compute_drift(facts(), {'driver': '580.65.06'}, driver_flavor='proprietary')
    with pytest.raises(DriftError, match=r'facts\.kernel_module_flavor must be a string or null'):
        compute_drift(facts(kernel_module_flavor=True), {'driver': '580.65.06'})


def test_the_h100_node_in_sync_on_its_open_driver_and_its_source_reported():
    report = compute_drift(H100_NODE, {'driver': '580.159.04'}, driver_flavor='open')
    assert report['status'] == 'in_sync'
    assert (report['driver_source'], report['driver_source_evidence']) == ('unowned', H100_NODE['driver_source_evidence'])
    drifted = compute_drift(H100_NODE, {'driver': '580.65.06'}, driver_flavor='server')
    assert sorted(drifted['drift']) == ['driver', 'driver_flavor'] and drifted['driver_source'] == 'unowned'


@pytest.mark.parametrize('source', ['host_package', 'container', 'runfile', 'unowned', None])
def test_every_report_names_the_driver_source(source):
    node = facts(driver_source=source, driver_source_evidence='/x' if source else None)
    report = compute_drift(node, {'driver': '580.65.06'})
    assert (report['driver_source'], report['driver_source_evidence']) == (source, '/x' if source else None)
    broken = compute_drift(dict(node, health='broken', health_reason='gpu_lost', health_message='lost'), {'driver': '580.65.06'})
    assert broken['driver_source'] == source
