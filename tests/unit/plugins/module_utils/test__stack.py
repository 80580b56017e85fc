# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for plugins/module_utils/_stack.py: package names, versions and plans for apt and dnf.

The dnf inputs that have real captured samples use them (tests/unit/fixtures/real-outputs/packages/:
``dnf module list nvidia-driver`` on RHEL 8.10, ``dnf repoquery`` with epoch 3 on RHEL 9, EL7 ``rpm -qa``).
Inline inputs are synthetic and follow the formats the tools print.
"""

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._packages import PackageParseError
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._stack import (
    StackError,
    available_from_repoquery,
    driver_source_plan,
    driver_source_problem,
    driver_stream,
    installed_from_dpkg,
    installed_from_rpm,
    parse_apt_cache_madison,
    parse_versionlock_list,
    pin_from_installed,
    plan,
    takeover_plan,
    target_packages,
    validate_pin,
)
from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import read_real_output
from ansible_collections.gpufleet.lifecycle.tests.unit.listing_readers import parse_rpm_qa

PIN = {'driver': '580.65.06', 'fabric_manager': '580.65.06', 'container_toolkit': '1.17.0', 'dcgm': '4.1.0'}


def sample(name):
    return read_real_output('packages', name)


def specs(packages):
    return [package['spec'] for package in packages]


# --- validate_pin -----------------------------------------------------------------------------------

def test_validate_pin_orders_and_stringifies():
    assert validate_pin({'dcgm': '4.1.0', 'cuda_toolkit': 13.0, 'driver': '580.65.06', 'kernel': ''}) == {
        'driver': '580.65.06', 'dcgm': '4.1.0', 'cuda_toolkit': '13.0'}


@pytest.mark.parametrize('pin, field, words', [
    ({'drivr': '580.65.06'}, 'pin', 'unknown component(s) drivr'),
    ({'driver': '580'}, 'pin.driver', "'580' is not a version such as 580.65.06"),
    ({'driver': '580.65.06; rm -rf /'}, 'pin.driver', 'is not a version'),
    ({'dcgm': True}, 'pin.dcgm', 'is not a version'),
    ({'cuda_toolkit': '13'}, 'pin.cuda_toolkit', 'such as 13.0'),
    ({'driver': '580.65.06', 'fabric_manager': '550.127.05'}, 'pin.fabric_manager', 'branch 550 but pin.driver 580.65.06 is branch 580'),
], ids=['unknown', 'short-driver', 'shell', 'bool', 'cuda-major-only', 'fm-branch'])
def test_validate_pin_names_the_field(pin, field, words):
    with pytest.raises(StackError) as error:
        validate_pin(pin)
    assert error.value.field == field
    assert words in str(error.value)


def test_validate_pin_rejects_a_list():
    with pytest.raises(StackError, match='must be a mapping'):
        validate_pin(['driver'])


# --- target_packages: apt ---------------------------------------------------------------------------

def test_apt_quartet_names_and_versions():
    packages = target_packages(validate_pin(PIN), 'apt')
    assert specs(packages) == [
        'nvidia-driver-580-server=580.65.06-0ubuntu1', 'nvidia-kernel-common-580=580.65.06-0ubuntu1',
        'nvidia-dkms-580=580.65.06-0ubuntu1', 'libnvidia-compute-580=580.65.06-0ubuntu1',
        'nvidia-utils-580=580.65.06-0ubuntu1', 'nvidia-compute-utils-580=580.65.06-0ubuntu1',
        'nvidia-fabricmanager-580=580.65.06-1',
        'nvidia-container-toolkit=1.17.0-1', 'nvidia-container-toolkit-base=1.17.0-1',
        'libnvidia-container-tools=1.17.0-1', 'libnvidia-container1=1.17.0-1',
        'datacenter-gpu-manager-4-core=1:4.1.0-1',
    ]
    assert all(package['hold'] for package in packages)


def test_apt_open_and_cuda_drivers_flavours():
    open_specs = specs(target_packages({'driver': '580.65.06'}, 'apt', flavor='open'))
    assert open_specs[0] == 'nvidia-driver-580-open=580.65.06-0ubuntu1'
    assert 'nvidia-dkms-580-open=580.65.06-0ubuntu1' in open_specs
    cuda = specs(target_packages({'driver': '580.65.06'}, 'apt', flavor='cuda-drivers'))
    assert cuda[0] == 'cuda-drivers-580=580.65.06-1' and cuda[1] == 'nvidia-driver-580-server=580.65.06-0ubuntu1'


def test_apt_dcgm3_kernel_cuda_and_overrides():
    packages = target_packages({'kernel': '6.1.0-28-amd64', 'dcgm': '3.3.9', 'cuda_toolkit': '13.0'}, 'apt')
    assert specs(packages) == ['linux-image-6.1.0-28-amd64', 'datacenter-gpu-manager=1:3.3.9', 'cuda-toolkit-13-0']
    assert [package['hold'] for package in packages] == [False, True, False]
    revised = target_packages({'driver': '580.65.06', 'container_toolkit': '1.17.0'}, 'apt',
                              revisions={'driver': '-1'}, package_versions={'container_toolkit': '1.17.0-2'})
    assert 'nvidia-utils-580=580.65.06-1' in specs(revised) and 'nvidia-container-toolkit=1.17.0-2' in specs(revised)


@pytest.mark.parametrize('kwargs, field', [
    ({'revisions': {'drvier': '-1'}}, 'revisions.drvier'),
    ({'package_versions': {'driver': '580 65'}}, 'package_versions.driver'),
    ({'flavor': 'proprietary'}, 'driver_flavor'),
])
def test_bad_options_name_the_field(kwargs, field):
    with pytest.raises(StackError) as error:
        target_packages({'driver': '580.65.06'}, 'apt', **kwargs)
    assert error.value.field == field


# --- target_packages: dnf ---------------------------------------------------------------------------

def test_dnf_quartet_names_and_versions():
    packages = target_packages(validate_pin(PIN), 'dnf')
    assert specs(packages) == [
        'nvidia-driver-580.65.06', 'nvidia-driver-libs-580.65.06', 'nvidia-driver-cuda-580.65.06',
        'nvidia-driver-cuda-libs-580.65.06', 'nvidia-kmod-common-580.65.06', 'nvidia-persistenced-580.65.06',
        'nvidia-modprobe-580.65.06', 'kmod-nvidia-latest-dkms-580.65.06',
        'nvidia-fabric-manager-580.65.06',
        'nvidia-container-toolkit-1.17.0', 'nvidia-container-toolkit-base-1.17.0',
        'libnvidia-container-tools-1.17.0', 'libnvidia-container1-1.17.0',
        'datacenter-gpu-manager-4-core-4.1.0',
    ]


def test_dnf_flavours_streams_and_kernel():
    assert specs(target_packages({'driver': '580.65.06'}, 'dnf', flavor='open'))[-1] == 'kmod-nvidia-open-dkms-580.65.06'
    assert specs(target_packages({'driver': '580.65.06'}, 'dnf', flavor='cuda-drivers'))[0] == 'cuda-drivers-580.65.06'
    assert driver_stream('580.65.06', 'server') == '580-dkms'
    assert driver_stream('580.65.06', 'cuda-drivers') == '580-dkms'
    assert driver_stream('550.127.05', 'open') == '550-open'
    assert specs(target_packages({'kernel': '5.14.0-427.13.1.el9_4.x86_64', 'dcgm': '3.3.9'}, 'dnf')) == [
        'kernel-5.14.0-427.13.1.el9_4', 'datacenter-gpu-manager-3.3.9']


# --- readers ----------------------------------------------------------------------------------------

def test_installed_from_dpkg_keeps_half_installed_and_holds():
    text = ('nvidia-utils-580\t580.65.06-0ubuntu1\thi \n'
            'nvidia-dkms-550\t550.127.05-0ubuntu1\tiU \n'
            'nvidia-utils-550\t550.127.05-0ubuntu1\trc \n'
            'libnvidia-compute-580\t\tun \n')
    installed, held = installed_from_dpkg(text)
    assert installed == {'nvidia-utils-580': ['580.65.06-0ubuntu1'], 'nvidia-dkms-550': ['550.127.05-0ubuntu1']}
    assert held == {'nvidia-utils-580'}
    with pytest.raises(PackageParseError, match='line 1'):
        installed_from_dpkg('garbage\n')


def test_installed_from_rpm_keeps_every_kernel():
    text = ('kernel\t0:5.14.0-427.13.1.el9_4\tx86_64\n'
            'kernel\t0:5.14.0-503.11.1.el9_5\tx86_64\n'
            'nvidia-driver\t3:580.65.06-1.el9\tx86_64\n')
    assert installed_from_rpm(text) == {'kernel': ['5.14.0-427.13.1.el9_4', '5.14.0-503.11.1.el9_5'],
                                        'nvidia-driver': ['3:580.65.06-1.el9']}


def test_apt_cache_madison():
    text = (' nvidia-utils-580 | 580.82.07-0ubuntu1 | file:/srv/gpufleet-repo ./ Packages\n'
            ' nvidia-utils-580 | 580.65.06-0ubuntu1 | file:/srv/gpufleet-repo ./ Packages\n'
            'datacenter-gpu-manager-4-core | 1:4.1.0-1 | https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64  Packages\n')
    assert parse_apt_cache_madison(text) == {'nvidia-utils-580': ['580.82.07-0ubuntu1', '580.65.06-0ubuntu1'],
                                             'datacenter-gpu-manager-4-core': ['1:4.1.0-1']}
    with pytest.raises(PackageParseError, match='line 1'):
        parse_apt_cache_madison('N: Unable to locate package\n')


def test_available_from_real_repoquery():
    available = available_from_repoquery(sample('dnf-repoquery-kmod_rhel9_epoch3-595_kmod-issue68.txt'))
    assert available['kmod-nvidia-open-dkms'] == ['3:595.45.04-1.el9', '3:595.58.03-1.el9', '3:595.71.05-1.el9']
    assert available['nvidia-kmod-common'][-1] == '3:595.71.05-1.el9'


def test_versionlock_list():
    text = ('# Added lock on Thu Nov 20 10:00:00 2026\n'
            'nvidia-driver-3:580.65.06-1.el9.*\n'
            'datacenter-gpu-manager-4-core-1:4.1.0-1.*\n'
            'nvidia-container-toolkit-0:1.17.0-1.*\n'
            '!kernel-0:5.14.0-1.el9.*\n')
    assert parse_versionlock_list(text) == {'nvidia-driver': '3:580.65.06-1.el9',
                                            'datacenter-gpu-manager-4-core': '1:4.1.0-1',
                                            'nvidia-container-toolkit': '1.17.0-1'}


# --- plan: apt --------------------------------------------------------------------------------------

APT_550 = {
    'nvidia-driver-550-server': ['550.127.05-0ubuntu1'], 'nvidia-kernel-common-550': ['550.127.05-0ubuntu1'],
    'nvidia-dkms-550': ['550.127.05-0ubuntu1'], 'libnvidia-compute-550': ['550.127.05-0ubuntu1'],
    'nvidia-utils-550': ['550.127.05-0ubuntu1'], 'nvidia-compute-utils-550': ['550.127.05-0ubuntu1'],
    'nvidia-fabricmanager-550': ['550.127.05-1'], 'nvidia-container-toolkit': ['1.16.2-1'],
    'nvidia-container-toolkit-base': ['1.16.2-1'], 'libnvidia-container-tools': ['1.16.2-1'],
    'libnvidia-container1': ['1.16.2-1'], 'datacenter-gpu-manager': ['1:3.3.9'], 'linux-image-6.1.0-28-amd64': ['6.1.0-28'],
}


def test_apt_plan_550_to_580():
    held = {'nvidia-utils-550', 'nvidia-container-toolkit', 'datacenter-gpu-manager'}
    result = plan(PIN, 'apt', APT_550, held=held)
    assert result['changed']
    assert len(result['changes']) == 12
    assert [(stray['name'], stray['reason']) for stray in result['strays']] == [
        ('datacenter-gpu-manager', 'DCGM 3 family, not 4'),
        ('libnvidia-compute-550', 'driver branch 550, not 580'),
        ('nvidia-compute-utils-550', 'driver branch 550, not 580'),
        ('nvidia-dkms-550', 'driver branch 550, not 580'),
        ('nvidia-driver-550-server', 'driver branch 550, not 580'),
        ('nvidia-fabricmanager-550', 'Fabric Manager branch 550, not 580'),
        ('nvidia-kernel-common-550', 'driver branch 550, not 580'),
        ('nvidia-utils-550', 'driver branch 550, not 580'),
    ]
    ctk = [package for package in result['packages'] if package['name'] == 'nvidia-container-toolkit'][0]
    assert (ctk['current'], ctk['version'], ctk['changed']) == ('1.16.2-1', '1.17.0-1', True)
    assert result['release'] == sorted(held)
    assert len(result['hold']) == 12
    assert result['current_pin'] == {'driver': '550.127.05', 'fabric_manager': '550.127.05', 'container_toolkit': '1.16.2',
                                     'dcgm': '3.3.9'}
    assert result['stream'] is None
    assert [stray['component'] for stray in result['strays']] == [
        'dcgm', 'driver', 'driver', 'driver', 'driver', 'fabric_manager', 'driver', 'driver']
    assert result['changed_components'] == ['container_toolkit', 'dcgm', 'driver', 'fabric_manager']


def test_apt_plan_names_only_the_components_that_move():
    # Only the container toolkit is off the pin: the driver's follow-up steps (DKMS, reboot) must not run for it.
    installed = dict((package['name'], [package['version']]) for package in target_packages(PIN, 'apt'))
    installed.update({'nvidia-container-toolkit': ['1.16.2-1'], 'nvidia-container-toolkit-base': ['1.16.2-1']})
    result = plan(PIN, 'apt', installed, held=set(installed))
    assert result['changed_components'] == ['container_toolkit']
    assert plan(PIN, 'apt', dict((package['name'], [package['version']]) for package in target_packages(PIN, 'apt')),
                held=set())['changed_components'] == []


def test_apt_plan_at_the_pin_changes_nothing():
    installed = dict((package['name'], [package['version']]) for package in target_packages(PIN, 'apt'))
    result = plan(PIN, 'apt', installed, held=set(installed))
    assert (result['changed'], result['changes'], result['strays'], result['release'], result['hold']) == (False, [], [], [], [])
    # The same packages not held: only the holds change.
    unheld = plan(PIN, 'apt', installed, held=set())
    assert unheld['changed'] and unheld['changes'] == [] and len(unheld['hold']) == 12


def test_apt_plan_keeps_other_branches_when_asked_and_names_missing_versions():
    kept = plan({'driver': '580.65.06'}, 'apt', APT_550, purge_other_branches=False)
    assert kept['strays'] == []
    available = {'nvidia-driver-580-server': ['580.65.06-0ubuntu1'], 'nvidia-utils-580': ['580.82.07-0ubuntu1']}
    missing = plan({'driver': '580.65.06'}, 'apt', {}, available=available)['missing']
    assert {'field': 'pin.driver', 'spec': 'nvidia-utils-580=580.65.06-0ubuntu1'} in missing
    assert {'field': 'pin.driver', 'spec': 'nvidia-driver-580-server=580.65.06-0ubuntu1'} not in missing
    assert len(missing) == 5


# --- plan: dnf --------------------------------------------------------------------------------------

def test_dnf_plan_switches_the_real_enabled_stream_and_releases_locks():
    module_list = sample('dnf-module-list-nvidia-driver_rhel8.10_open-dkms-default_kmod-issue50.txt')
    installed = {'nvidia-driver': ['3:550.127.05-1.el8'], 'kmod-nvidia-latest-dkms': ['3:550.127.05-1.el8'],
                 'kmod-nvidia-open-dkms': ['3:550.127.05-1.el8'], 'nvidia-container-toolkit': ['1.17.0-1']}
    locks = {'nvidia-driver': '3:550.127.05-1.el8', 'nvidia-container-toolkit': '1.17.0-1'}
    result = plan({'driver': '580.65.06', 'container_toolkit': '1.17.0'}, 'dnf', installed, locks=locks, module_list=module_list)
    assert result['stream'] == {'name': 'nvidia-driver', 'enabled': 'latest', 'target': '580-dkms', 'change': True}
    assert result['strays'] == [{'name': 'kmod-nvidia-open-dkms', 'version': '3:550.127.05-1.el8',
                                 'reason': 'another driver source than branch 580', 'component': 'driver'}]
    assert result['changed_components'] == ['container_toolkit', 'driver']  # nvidia-container-toolkit-base is not installed
    assert result['release'] == ['nvidia-driver']
    assert 'nvidia-driver-580.65.06' in result['changes'] and 'nvidia-container-toolkit-1.17.0' not in result['changes']
    assert 'nvidia-container-toolkit' not in result['hold'] and 'nvidia-driver' in result['hold']
    assert result['current_pin'] == {'container_toolkit': '1.17.0'}


def test_dnf_plan_at_the_pin_changes_nothing():
    targets = target_packages({'driver': '580.65.06'}, 'dnf', flavor='open')
    installed = dict((package['name'], ['3:580.65.06-1.el9']) for package in targets)
    locks = dict((package['name'], '3:580.65.06-1.el9') for package in targets)
    module_list = ('%-15s%-15s%-28s%s\n' % ('Name', 'Stream', 'Profiles', 'Summary')
                   + '%-15s%-15s%-28s%s\n' % ('nvidia-driver', '580-open [e]', 'default [d], fm, ks, src', 'Nvidia driver for 580-open branch'))
    result = plan({'driver': '580.65.06'}, 'dnf', installed, flavor='open', locks=locks, module_list=module_list)
    assert not result['changed'], result
    assert result['stream']['change'] is False
    assert result['current_pin'] == {'driver': '580.65.06'}


def test_dnf_plan_sees_real_el7_driver_as_another_source():
    installed = installed_from_rpm(''.join(
        '%s\t0:%s\t%s\n' % (name, '-'.join([row['version'], row['release']]), row['arch'] or 'noarch')
        for name, row in parse_rpm_qa(sample('rpm-qa-cuda_el7_nvidia-driver-latest-dkms-465.19.01_az-hop-issue269.txt')).items()))
    strays = [stray['name'] for stray in plan({'driver': '580.65.06'}, 'dnf', installed)['strays']]
    assert strays == ['cuda-drivers', 'nvidia-driver-latest-dkms-cuda', 'nvidia-driver-latest-dkms-cuda-libs']


def test_pin_from_installed_rpm():
    assert pin_from_installed({'nvidia-driver-libs': ['3:580.65.06-1.el9'], 'nvidia-fabric-manager': ['580.65.06-1'],
                               'datacenter-gpu-manager-4-core': ['1:4.1.0-1']}, 'dnf') == {
        'driver': '580.65.06', 'fabric_manager': '580.65.06', 'dcgm': '4.1.0'}


@pytest.mark.parametrize('key, value, message', [
    ('driver', '-0ubuntu1; touch /tmp/x', 'is not a package revision'),
    ('driver', '0ubuntu1', 'is not a package revision'),
    ('container_toolkit', '-1\n', 'is not a package revision'),
    ('dcgm_epoch', '1a', 'is not an epoch'),
    ('dcgm', 1.5, 'must be a string'),
    ('nope', '-1', 'unknown; valid keys'),
])
def test_revisions_are_validated_like_versions(key, value, message):
    with pytest.raises(StackError, match=r'^revisions\.%s: .*%s' % (key, message)):
        target_packages({'driver': '580.65.06', 'dcgm': '4.1.0', 'container_toolkit': '1.17.0'}, 'apt', revisions={key: value})


def test_empty_or_numeric_revisions_take_the_default_or_their_digits():
    packages = target_packages({'dcgm': '3.3.9'}, 'apt', revisions={'dcgm': '', 'dcgm_epoch': 2})
    assert [package['spec'] for package in packages] == ['datacenter-gpu-manager=2:3.3.9']


# --- the driver flavor: one kernel-module flavor per node (issue 27) --------------------------------

def _at(pin, manager, flavor):
    """A node with every package of ``pin`` in ``flavor`` installed and held."""
    return dict((package['name'], [package['version'] or '1']) for package in target_packages(pin, manager, flavor=flavor))


@pytest.mark.parametrize('before, after', [('server', 'open'), ('cuda-drivers', 'open'), ('open', 'server'), ('open', 'cuda-drivers')])
def test_apt_flavor_switch_on_one_branch_removes_the_other_flavor(before, after):
    installed = _at({'driver': '580.65.06'}, 'apt', before)
    result = plan({'driver': '580.65.06'}, 'apt', installed, flavor=after, held=set(installed))
    strays = [stray['name'] for stray in result['strays']]
    other = ['nvidia-dkms-580', 'nvidia-driver-580-server'] if after == 'open' else ['nvidia-dkms-580-open', 'nvidia-driver-580-open']
    if before == 'cuda-drivers':
        other = ['cuda-drivers-580'] + other
    assert strays == other, result['strays']
    assert all(stray['component'] == 'driver' and 'kernel module' in stray['reason'] for stray in result['strays'])
    # The one change is the flavor: gpu_stack's plan says changed, the driver moved (so the procedure reboots), the holds move.
    assert result['changed'] and result['changed_components'] == ['driver']
    assert set(result['release']) == set(strays)
    names = set(package['name'] for package in result['packages'] if package['changed'])
    assert ('nvidia-dkms-580-open' in names) is (after == 'open') and ('nvidia-dkms-580' in names) is (after != 'open')


def test_apt_flavor_switch_removes_the_other_flavor_even_when_other_branches_are_kept():
    installed = _at({'driver': '580.65.06'}, 'apt', 'server')
    kept = plan({'driver': '580.65.06'}, 'apt', installed, flavor='open', purge_other_branches=False)
    assert [stray['name'] for stray in kept['strays']] == ['nvidia-dkms-580', 'nvidia-driver-580-server']


def test_apt_flavor_strays_name_the_ubuntu_server_open_packages_too():
    installed = dict(_at({'driver': '580.65.06'}, 'apt', 'server'), **{
        'nvidia-dkms-580-server-open': ['580.65.06-0ubuntu1'], 'nvidia-kernel-source-580-open': ['580.65.06-0ubuntu1'],
        'nvidia-kernel-source-580': ['580.65.06-0ubuntu1']})
    strays = [stray['name'] for stray in plan({'driver': '580.65.06'}, 'apt', installed, flavor='server')['strays']]
    assert strays == ['nvidia-dkms-580-server-open', 'nvidia-kernel-source-580-open']


def test_apt_same_flavor_changes_nothing_and_the_unpinned_driver_keeps_every_flavor():
    installed = _at({'driver': '580.65.06'}, 'apt', 'open')
    assert not plan({'driver': '580.65.06'}, 'apt', installed, flavor='open', held=set(installed))['changed']
    # No driver in the pin: nothing about the driver is decided.
    assert plan({'dcgm': '4.1.0'}, 'apt', installed, flavor='server')['strays'] == []


@pytest.mark.parametrize('before, after, stray, stream', [
    ('server', 'open', 'kmod-nvidia-latest-dkms', '580-open'),
    ('open', 'server', 'kmod-nvidia-open-dkms', '580-dkms'),
    ('open', 'cuda-drivers', 'kmod-nvidia-open-dkms', '580-dkms'),
])
def test_dnf_flavor_switch_moves_the_stream_and_removes_the_other_kmod(before, after, stray, stream):
    installed = dict((name, ['3:580.65.06-1.el9']) for name in _at({'driver': '580.65.06'}, 'dnf', before))
    enabled = '580-open' if before == 'open' else '580-dkms'
    module_list = ('%-15s%-15s%-28s%s\n' % ('Name', 'Stream', 'Profiles', 'Summary')
                   + '%-15s%-15s%-28s%s\n' % ('nvidia-driver', enabled + ' [e]', 'default [d], fm, ks, src', 'Nvidia driver'))
    locks = dict((name, '3:580.65.06-1.el9') for name in installed)
    result = plan({'driver': '580.65.06'}, 'dnf', installed, flavor=after, locks=locks, module_list=module_list,
                  purge_other_branches=False)
    assert [item['name'] for item in result['strays']] == [stray]
    assert result['stream'] == {'name': 'nvidia-driver', 'enabled': enabled, 'target': stream, 'change': True}
    assert result['changed'] and result['changed_components'] == ['driver'] and stray in result['release']


# --- one driver source per node (issue 27) ----------------------------------------------------------

RUNFILE_EVIDENCE = '/usr/bin/nvidia-uninstall, /var/log/nvidia-installer.log'
TREE_EVIDENCE = '/usr/local/nvidia/bin/nvidia-smi, /usr/local/nvidia/version'


def test_a_runfile_driver_is_refused_naming_the_source_its_evidence_and_what_to_do():
    decided = driver_source_plan({'driver': '580.65.06'}, 'runfile', RUNFILE_EVIDENCE, name='gpu_stack_pin',
                                 takeover_name='gpu_stack_driver_takeover')
    assert decided['action'] == 'refuse' and decided['field'] == 'gpu_stack_pin.driver'
    assert decided['reason'] == (
        "gpu_stack_pin.driver: the driver came from NVIDIA's runfile installer (driver_source=runfile: %s): installing the pinned "
        "driver packages would put a second driver on the node; upgrade it with the runfile, or set gpu_stack_driver_takeover=true "
        "to remove it with nvidia-uninstall and install the packages" % RUNFILE_EVIDENCE)
    assert driver_source_problem({'driver': '580.65.06'}, 'runfile', evidence=RUNFILE_EVIDENCE) == driver_source_plan(
        {'driver': '580.65.06'}, 'runfile', RUNFILE_EVIDENCE)['reason']


def test_a_runfile_driver_is_taken_over_only_when_asked():
    decided = driver_source_plan({'driver': '580.65.06'}, 'runfile', RUNFILE_EVIDENCE, takeover=True)
    assert decided['action'] == 'takeover' and '/usr/bin/nvidia-uninstall --silent' in decided['reason']
    takeover, problem = takeover_plan(decided, 'runfile', RUNFILE_EVIDENCE)
    assert problem == '' and takeover == {'from': 'runfile', 'evidence': RUNFILE_EVIDENCE, 'reason': decided['reason'],
                                          'argv': ['/usr/bin/nvidia-uninstall', '--silent']}
    missing, problem = takeover_plan(decided, 'runfile', RUNFILE_EVIDENCE, executable=False, takeover_name='gpu_stack_driver_takeover')
    assert missing is None and problem.startswith('gpu_stack_driver_takeover=true: the take-over needs NVIDIA')
    assert takeover_plan(driver_source_plan({'driver': '580.65.06'}, 'host_package', takeover=True), 'host_package') == (None, '')
    # Never a take-over that would leave the node without a driver: a kernel-only pin has none to install.
    kernel_only = driver_source_plan({'kernel': '6.8.0-50-generic'}, 'runfile', RUNFILE_EVIDENCE, takeover=True)
    assert kernel_only['action'] == 'refuse' and 'needs a pinned driver' in kernel_only['reason']
    # Only the installer's log left (nvidia-uninstall ran, or the rest was removed by hand): nothing to take over with.
    log_only = "/var/log/nvidia-installer.log (NVIDIA's runfile installer; no nvidia-uninstall)"
    refused = driver_source_plan({'driver': '580.65.06'}, 'runfile', log_only, takeover=True, takeover_name='gpufleet_driver_takeover')
    assert refused['action'] == 'refuse' and refused['field'] == 'gpufleet_driver_takeover', refused
    assert 'its uninstaller /usr/bin/nvidia-uninstall is not' in refused['reason'], refused


@pytest.mark.parametrize('takeover', [False, True])
def test_an_unowned_driver_is_refused_even_when_a_takeover_is_asked(takeover):
    decided = driver_source_plan({'driver': '580.65.06'}, 'unowned', TREE_EVIDENCE, takeover=takeover, name='node_upgrade_pin',
                                 takeover_name='gpufleet_driver_takeover')
    assert decided['action'] == 'refuse' and TREE_EVIDENCE in decided['reason'] and 'driver_source=unowned' in decided['reason']
    assert 'remove' in decided['reason'] and ('gpufleet_driver_takeover=true cannot take this node over' in decided['reason']) is takeover


def test_a_takeover_asked_on_a_gpu_operator_node_is_a_bad_combination_naming_the_variable():
    for pin in ({'driver': '580.65.06'}, {'dcgm': '4.1.0'}):
        decided = driver_source_plan(pin, 'container', '/run/nvidia/driver', takeover=True, takeover_name='gpu_stack_driver_takeover')
        assert decided['action'] == 'refuse' and decided['field'] == 'gpu_stack_driver_takeover'
        assert decided['reason'].startswith("gpu_stack_driver_takeover=true on a node whose driver the GPU Operator's driver container")
    # Without the take-over: the pinned driver is refused as before, a pin without one goes ahead.
    assert 'GPU Operator' in driver_source_problem({'driver': '580.65.06'}, 'container', 'gpu_stack_pin')
    assert driver_source_problem({'dcgm': '4.1.0'}, 'container') == ''


@pytest.mark.parametrize('source, pin, action', [
    ('runfile', {'kernel': '6.8.0-50-generic'}, 'refuse'),           # a new kernel the runfile module was not built for
    ('unowned', {'kernel': '6.8.0-50-generic'}, 'refuse'),
    ('runfile', {'dcgm': '4.1.0', 'container_toolkit': '1.17.0'}, 'proceed'),  # no driver piece: nothing to fight over
    ('unowned', {'cuda_toolkit': '13.0'}, 'proceed'),
    ('host_package', {'driver': '580.65.06', 'kernel': '6.8.0-50-generic'}, 'proceed'),
    (None, {'driver': '580.65.06'}, 'proceed'),                       # no driver loaded at all
    ('container', {'kernel': '6.8.0-50-generic'}, 'proceed'),         # the operator builds for the new kernel
    ('something-new', {'driver': '580.65.06'}, 'refuse'),             # never a guess
])
def test_driver_source_rules(source, pin, action):
    assert driver_source_plan(pin, source)['action'] == action
