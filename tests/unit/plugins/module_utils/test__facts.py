# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Facts assembly and health classification from raw tool outputs."""

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _facts
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts import assemble, filter_packages, module_loaded, parse_systemctl_show
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts import split_systemctl_show
from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import real_output_path

T4 = real_output_path('nvidia-smi-xml', 'telegraf_tesla-t4_515.105.01_v11.xml')
MISMATCH_570 = real_output_path('errors', 'nvml-mismatch_570.124_tinygrad-ogkm-issue47.txt')
PROC_VERSION_OPEN = ('NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build  (root@host)  '
                     'Thu Mar 13 15:20:41 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n')
MODULES = 'nvidia_uvm 1785856 0 - Live 0x0000000000000000 (PO)\nnvidia 60735488 2 nvidia_uvm, Live 0x0000000000000000 (PO)\n'


def read(path):
    with open(path, encoding='utf-8') as handle:
        return handle.read()


def smi(stdout, rc=0, stderr=''):
    return {'path': '/usr/bin/nvidia-smi', 'rc': rc, 'stdout': stdout, 'stderr': stderr}


def test_ok_node_from_real_xml():
    facts = assemble({'nvidia_smi': smi(read(T4)), 'kernel': '6.1.0-26-amd64', 'proc_modules': MODULES})
    assert facts['health'] == 'ok' and facts['health_reason'] is None
    assert facts['driver_version'] == '515.105.01'
    assert facts['gpu_count'] == 1 and facts['gpus'][0]['name'] == 'Tesla T4'
    assert facts['nvidia_module_loaded'] and not facts['nouveau_loaded']
    assert facts['kernel'] == '6.1.0-26-amd64'


def test_mismatch_names_the_loaded_module():
    facts = assemble({'nvidia_smi': smi(read(MISMATCH_570), rc=18), 'proc_driver_version': PROC_VERSION_OPEN, 'proc_modules': MODULES})
    assert facts['health'] == 'broken' and facts['health_reason'] == 'driver_library_mismatch'
    assert facts['health_message'].startswith('Failed to initialize NVML: Driver/library version mismatch')
    assert facts['kernel_module_version'] == '570.124.06'
    assert 'loaded kernel module: 570.124.06' in facts['health_message']
    assert facts['gpus'] == [] and facts['driver_version'] is None


def test_truncated_xml_is_unparsable_not_drift():
    text = read(T4)
    facts = assemble({'nvidia_smi': smi(text[:len(text) // 2])})
    assert facts['health'] == 'broken' and facts['health_reason'] == 'unparsable'
    assert 'cannot be read' in facts['health_message']


def test_lost_gpu_on_stderr():
    stderr = 'Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error\n'
    facts = assemble({'nvidia_smi': smi(read(T4), stderr=stderr)})
    assert facts['health'] == 'broken' and facts['health_reason'] == 'gpu_lost'
    assert facts['health_message'] == stderr.strip()


def test_missing_nvidia_smi_next_to_driver_package_is_broken():
    listing = 'nvidia-driver-580-server\t580.65.06-0ubuntu1\tii \n'
    facts = assemble({'packages': {'manager': 'dpkg', 'rc': 0, 'stdout': listing}})
    assert facts['health'] == 'broken' and facts['health_reason'] == 'nvidia_smi_missing'
    assert facts['driver_source'] == 'host_package'


def test_no_driver_at_all_is_absent():
    facts = assemble({'packages': {'manager': 'dpkg', 'rc': 0, 'stdout': 'bash\t5.2.15-2+b7\tii \n'}, 'proc_modules': ''})
    assert facts['health'] == 'absent' and facts['packages'] == {} and facts['driver_source'] is None


def test_gpu_operator_driver_container():
    facts = assemble({'nvidia_smi': smi(read(T4)), 'gpu_operator_driver_root': True})
    assert facts['driver_source'] == 'container'


def test_package_listing_failure_is_reported_not_raised():
    facts = assemble({'nvidia_smi': smi(read(T4)), 'packages': {'manager': 'dpkg', 'rc': 2, 'stdout': '', 'stderr': 'dpkg-query: error'}})
    assert facts['packages'] == {} and 'rc=2' in facts['package_error'] and facts['health'] == 'ok'


def test_filter_keeps_nvidia_stack_and_holds():
    parsed = {
        'bash': {'version': '5.2', 'held': False},
        'nvidia-driver-580-open': {'version': '580.65.06-1', 'held': True},
        'libnvidia-compute-580:amd64': {'version': '580.65.06-1', 'held': True},
        'cuda-toolkit-13-0': {'version': '13.0.2-1', 'held': False},
        'datacenter-gpu-manager-4-core': {'version': '1:4.1.0-1', 'held': False},
        'linux-image-6.1.0-26-amd64': {'version': '6.1.112-1', 'held': False},
    }
    packages, held = filter_packages(parsed)
    assert packages == {'nvidia-driver-580-open': '580.65.06-1', 'libnvidia-compute-580': '580.65.06-1',
                        'cuda-toolkit-13-0': '13.0.2-1', 'datacenter-gpu-manager-4-core': '1:4.1.0-1'}
    assert held == ['libnvidia-compute-580', 'nvidia-driver-580-open']


@pytest.mark.parametrize('text, expected', [
    ('LoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\n',
     {'active': 'active', 'sub': 'running', 'enabled': 'enabled'}),
    ('LoadState=loaded\nActiveState=failed\nSubState=failed\nUnitFileState=enabled\n',
     {'active': 'failed', 'sub': 'failed', 'enabled': 'enabled'}),
    ('LoadState=not-found\nActiveState=inactive\nSubState=dead\nUnitFileState=\n', None),
    ('', None),
])
def test_systemctl_show(text, expected):
    assert parse_systemctl_show(text) == expected


def test_one_systemctl_call_for_every_unit_splits_into_each_units_state():
    with open(real_output_path('systemd', 'systemctl-show_4units_systemd252_debian12_sim-node.txt'), encoding='utf-8') as handle:
        blocks = split_systemctl_show(handle.read())
    assert sorted(blocks) == sorted(_facts.SERVICES)
    states = dict((unit, parse_systemctl_show(blocks[unit])) for unit in _facts.SERVICES)
    assert states == {'nvidia-fabricmanager': {'active': 'active', 'sub': 'running', 'enabled': 'enabled'},
                      'nvidia-persistenced': {'active': 'active', 'sub': 'running', 'enabled': 'enabled'},
                      'nvidia-dcgm': {'active': 'active', 'sub': 'running', 'enabled': 'enabled'},
                      'dcgm': None}
    # Each block is the unit's own: the not-found unit's lines do not leak into the unit before it.
    assert 'not-found' not in blocks['nvidia-dcgm'] and blocks['dcgm'].startswith('Id=dcgm.service\n')
    assert split_systemctl_show('') == {} and split_systemctl_show('LoadState=loaded\n') == {}


def test_module_loaded_matches_whole_name():
    assert module_loaded(MODULES, 'nvidia')
    assert not module_loaded(MODULES, 'nvidia_drm')
    assert not module_loaded(None, 'nouveau')


def hung(command, timeout, stdout='', stderr=''):
    """What _command.run returns for a command killed at its deadline."""
    return {'path': '/usr/bin/nvidia-smi', 'rc': None, 'stdout': stdout, 'stderr': stderr, 'timed_out': True,
            'command': command, 'timeout': timeout}


def test_a_hung_nvidia_smi_makes_the_node_broken_not_absent():
    facts = assemble({'nvidia_smi': hung('/usr/bin/nvidia-smi -q -x', 60), 'proc_modules': MODULES, 'proc_driver_version': PROC_VERSION_OPEN})
    assert facts['health'] == 'broken' and facts['health_reason'] == 'nvidia_smi_hung'
    assert facts['health_message'].startswith('/usr/bin/nvidia-smi -q -x did not finish within 60 s and was killed')
    assert facts['gpus'] == [] and facts['driver_version'] is None
    # The loaded module is still reported: the node has a driver, it just does not answer.
    assert facts['kernel_module_version'] == '570.124.06'


def test_a_hung_nvidia_smi_is_hung_even_with_partial_output():
    facts = assemble({'nvidia_smi': hung('/usr/bin/nvidia-smi -q -x', 5, stdout=read(T4)[:300])})
    assert facts['health_reason'] == 'nvidia_smi_hung'


def test_a_package_listing_that_hung_is_a_package_error():
    listing = dict(hung("/usr/bin/dpkg-query -W -f '${Package}'", 120), manager='dpkg')
    facts = assemble({'nvidia_smi': smi(read(T4)), 'packages': listing})
    assert facts['packages'] == {} and facts['package_manager'] == 'dpkg'
    assert facts['package_error'] == ("package listing did not finish: /usr/bin/dpkg-query -W -f '${Package}' did not finish within 120 s "
                                      "and was killed (with its process group)")
    assert facts['health'] == 'ok'


def test_invalid_bytes_in_a_package_name_do_not_lose_the_listing():
    # dpkg-query output as _command.run decodes it: the mangled byte kept as \xff.
    stdout = 'nvidia-driver-535\t535.129.03-0ubuntu1\tii \nnvidia-\\xffutils\t1.0\tii \nbash\t5.2\tii \n'
    facts = assemble({'nvidia_smi': smi(read(T4)), 'packages': {'manager': 'dpkg', 'rc': 0, 'stdout': stdout, 'stderr': ''}})
    assert facts['packages'] == {'nvidia-driver-535': '535.129.03-0ubuntu1', 'nvidia-\\xffutils': '1.0'}
    assert facts['package_error'] is None


def test_control_characters_of_a_tool_are_escaped_in_messages():
    facts = assemble({'nvidia_smi': smi('', rc=9, stderr='NVIDIA-SMI has failed\x1b[2J\x1b]0;pwned\x07 because it couldn\'t communicate '
                                        'with the NVIDIA driver\n')})
    assert facts['health_reason'] == 'driver_unreachable'
    assert '\x1b' not in facts['health_message'] and '\\x1b[2J\\x1b]0;pwned\\x07' in facts['health_message']
    listing = {'manager': 'rpm', 'rc': 1, 'stdout': '', 'stderr': 'error: rpmdb: \x1b[31mBDB0113\n'}
    assert assemble({'packages': listing})['package_error'] == 'package listing failed (rc=1): error: rpmdb: \\x1b[31mBDB0113'


def test_nvidia_smi_output_with_invalid_bytes_is_still_read():
    # A corrupted byte in a product name: nvidia-smi's XML as _command.run decodes it (backslash escape, still XML).
    document = read(T4).replace('Tesla T4', 'Tesla T4\\xff')
    facts = assemble({'nvidia_smi': smi(document)})
    assert facts['health'] == 'ok' and facts['gpus'][0]['name'] == 'Tesla T4\\xff'
    facts = assemble({'nvidia_smi': smi(read(T4).encode('utf-8').replace(b'Tesla T4', b'Tesla T4\xff'))})
    assert facts['health'] == 'ok' and facts['gpus'][0]['name'] == 'Tesla T4\\xff'


def test_records_read_the_pins_and_the_pending_reboot():
    recorded, previous, pending, error = _facts.parse_records({
        'pin.json': '{"driver": "580.65.06"}\n', 'pin.previous.json': '{"driver": "550.54.15"}\n',
        'reboot-required': 'kernel 6.8.0-45-generic\nmore\n'})
    assert recorded == {'driver': '580.65.06'}
    assert previous == {'driver': '550.54.15'}
    assert pending == 'kernel 6.8.0-45-generic'
    assert error is None


def test_records_absent_read_as_null():
    assert _facts.parse_records({'pin.json': None, 'pin.previous.json': None, 'reboot-required': None}) == (None, None, None, None)
    assert _facts.parse_records({'reboot-required': ''})[2] == ''


def test_a_torn_or_foreign_record_is_null_and_named_never_guessed():
    recorded, previous, pending, error = _facts.parse_records({'pin.json': '{"driver": "58', 'pin.previous.json': '["550"]',
                                                               'reboot-required': False})
    assert recorded is None and previous is None
    assert 'pin.json: not JSON' in error and 'pin.previous.json: not a mapping' in error
    assert pending == 'too large to read'
    assert 'too large' in _facts.parse_records({'pin.json': False})[3]


def test_assemble_carries_the_records():
    facts = _facts.assemble({'records': {'pin.json': '{"dcgm": "4.1.0"}'}})
    assert facts['recorded_pin'] == {'dcgm': '4.1.0'}
    assert facts['previous_pin'] is None and facts['pending_reboot'] is None and facts['record_error'] is None


# --------------------------------------------------------------------------- where the driver came from (issue 27)

PROC_VERSION_PROPRIETARY = ('NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024\n'
                            'GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n')
DRIVER_LISTING = {'manager': 'dpkg', 'rc': 0, 'stdout': 'libnvidia-compute-580-server\t580.65.06-0ubuntu1\tii \n'
                  'nvidia-driver-580-server\t580.65.06-0ubuntu1\thi \nnvidia-kernel-common-580-server\t580.65.06-0ubuntu1\tii \n'}
TOOLKIT_LISTING = {'manager': 'dpkg', 'rc': 0, 'stdout': 'cuda-toolkit-13-0\t13.0.2-1\tii \nlibnccl2\t2.28.3-1+cuda13.0\thi \n'}


def loaded(**raw):
    """A node with the nvidia module loaded and nvidia-smi answering, plus ``raw``."""
    return dict({'nvidia_smi': smi(read(T4)), 'proc_modules': MODULES, 'proc_driver_version': PROC_VERSION_OPEN,
                 'packages': TOOLKIT_LISTING}, **raw)


@pytest.mark.parametrize('raw, source, evidence', [
    (loaded(gpu_operator_driver_root=True, packages=DRIVER_LISTING, runfile_uninstaller=True),
     'container', "/run/nvidia/driver is populated (the GPU Operator's driver root)"),
    # The runfile's uninstaller beside a driver package: two drivers, named runfile (a converge must not add a third).
    (loaded(packages=DRIVER_LISTING, runfile_uninstaller=True, runfile_installer_log=True),
     'runfile', "/usr/bin/nvidia-uninstall, /var/log/nvidia-installer.log (NVIDIA's runfile installer); "
     "also package nvidia-driver-580-server 580.65.06-0ubuntu1 (dpkg)"),
    # The installer's log outlives nvidia-uninstall: beside a driver package it is history, not a second driver.
    (loaded(packages=DRIVER_LISTING, runfile_installer_log=True), 'host_package', 'package nvidia-driver-580-server 580.65.06-0ubuntu1 (dpkg)'),
    (loaded(runfile_uninstaller=True, runfile_installer_log=True),
     'runfile', "/usr/bin/nvidia-uninstall, /var/log/nvidia-installer.log (NVIDIA's runfile installer)"),
    (loaded(runfile_installer_log=True), 'runfile', "/var/log/nvidia-installer.log (NVIDIA's runfile installer; no nvidia-uninstall)"),
    (loaded(runfile_uninstaller=True), 'runfile', "/usr/bin/nvidia-uninstall (NVIDIA's runfile installer)"),
    (loaded(), 'unowned', 'nvidia-smi at /usr/bin/nvidia-smi; loaded nvidia module 570.124.06 (/proc/driver/nvidia/version); '
     'no driver package (dpkg), no GPU Operator root, no nvidia-installer log or nvidia-uninstall'),
])
def test_driver_source_in_precedence_with_its_evidence(raw, source, evidence):
    facts = assemble(raw)
    assert (facts['driver_source'], facts['driver_source_evidence']) == (source, evidence)
    assert facts['driver_source'] in _facts.DRIVER_SOURCES


@pytest.mark.parametrize('raw, evidence', [
    # Only the module loaded (nvidia-smi missing: broken), only its /proc banner, only an nvidia-smi: each is a driver.
    ({'proc_modules': MODULES}, 'nvidia module loaded (/proc/modules); '),
    ({'proc_driver_version': PROC_VERSION_PROPRIETARY}, 'loaded nvidia module 550.127.05 (/proc/driver/nvidia/version); '),
    ({'proc_driver_version': 'NVRM version: something else\n'}, '/proc/driver/nvidia/version present; '),
    ({'nvidia_smi': smi('', rc=9, stderr="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")},
     'nvidia-smi at /usr/bin/nvidia-smi; '),
])
def test_any_sign_of_a_driver_no_one_claims_is_unowned(raw, evidence):
    facts = assemble(raw)
    assert facts['driver_source'] == 'unowned'
    assert facts['driver_source_evidence'] == evidence + ('driver packages not read (no dpkg-query or rpm, or gather_packages=false), '
                                                          'no GPU Operator root, no nvidia-installer log or nvidia-uninstall')


def test_no_driver_and_no_claim_is_null_with_no_evidence():
    facts = assemble({'packages': TOOLKIT_LISTING, 'proc_modules': 'nvme 61440 3 - Live 0x0 \n', 'proc_driver_version': None})
    assert facts['health'] == 'absent'
    assert (facts['driver_source'], facts['driver_source_evidence'], facts['driver_tree']) == (None, None, None)
    assert (facts['kernel_module_flavor'], facts['persistence_mode']) == (None, None)


def test_a_claim_without_a_loaded_driver_still_names_the_source():
    # A package or a runfile installer left on a node whose module is not loaded: the source is the claim, not unowned.
    assert assemble({'packages': DRIVER_LISTING})['driver_source'] == 'host_package'
    assert assemble({'runfile_uninstaller': True})['driver_source'] == 'runfile'
    # The installer's log alone, no driver: what nvidia-uninstall leaves behind; nothing claims a driver any more.
    assert assemble({'runfile_installer_log': True})['driver_source'] is None
    assert assemble({'gpu_operator_driver_root': True})['driver_source'] == 'container'


def test_a_package_listing_that_failed_says_so_in_the_evidence():
    failed = {'manager': 'rpm', 'rc': 1, 'stdout': '', 'stderr': 'error: rpmdb open failed'}
    facts = assemble(loaded(packages=failed))
    assert facts['driver_source'] == 'unowned'
    assert 'driver packages unknown (the package listing could not be read)' in facts['driver_source_evidence']


def test_the_driver_package_named_is_the_driver_s_own_not_a_library():
    listing = {'manager': 'rpm', 'rc': 0, 'stdout': 'libnvidia-gl\t3:580.65.06-1.el9\tx86_64\nkmod-nvidia-open-dkms\t3:580.65.06-1.el9\tx86_64\n'
               'nvidia-driver\t3:580.65.06-1.el9\tx86_64\n'}
    assert assemble(loaded(packages=listing))['driver_source_evidence'] == 'package nvidia-driver 3:580.65.06-1.el9 (rpm)'


def test_evidence_escapes_control_characters():
    facts = assemble(loaded(nvidia_smi=dict(smi(read(T4)), path='/opt/\x1b[2Jnv/bin/nvidia-smi'), driver_tree_version='580\x1b]0;x\x07\n'))
    assert '\x1b' not in facts['driver_source_evidence'] and '/opt/\\x1b[2Jnv/bin/nvidia-smi' in facts['driver_source_evidence']
    assert facts['driver_tree'] == {'path': '/opt/\\x1b[2Jnv', 'version': '580\\x1b]0;x\\x07'}


@pytest.mark.parametrize('path, text, expected', [
    ('/usr/local/nvidia/bin/nvidia-smi', '580.159.04', {'path': '/usr/local/nvidia', 'version': '580.159.04'}),
    ('/usr/local/nvidia/bin/nvidia-smi', '580.159.04\nsecond line\n', {'path': '/usr/local/nvidia', 'version': '580.159.04'}),
    ('/usr/local/nvidia/bin/nvidia-smi', '', {'path': '/usr/local/nvidia', 'version': None}),
    ('/usr/local/nvidia/bin/nvidia-smi', None, None),           # no readable version file: not a driver tree
    ('/usr/local/nvidia/nvidia-smi', '580.159.04', None),       # not <root>/bin/nvidia-smi
])
def test_driver_tree(path, text, expected):
    facts = assemble(loaded(nvidia_smi=dict(smi(read(T4)), path=path), driver_tree_version=text))
    assert facts['driver_tree'] == expected
    if expected and expected['version']:
        assert 'driver tree /usr/local/nvidia (/usr/local/nvidia/version: 580.159.04)' in facts['driver_source_evidence']


def test_driver_tree_root():
    assert _facts.driver_tree_root('/usr/local/nvidia/bin/nvidia-smi') == '/usr/local/nvidia'
    assert _facts.driver_tree_root('/bin/nvidia-smi') == '/'
    assert _facts.driver_tree_version_path('/') == '/version'
    assert _facts.driver_tree_root('/usr/bin/nvidia-smi-wrapper') is None and _facts.driver_tree_root(None) is None


@pytest.mark.parametrize('banner, flavor', [(PROC_VERSION_OPEN, 'open'), (PROC_VERSION_PROPRIETARY, 'proprietary'),
                                            ('NVRM version: who knows\n', None), (None, None)])
def test_kernel_module_flavor_from_the_loaded_module_s_banner(banner, flavor):
    assert assemble(loaded(proc_driver_version=banner))['kernel_module_flavor'] == flavor


# --------------------------------------------------------------------------- systemd and persistence

SYSTEMCTL = {'path': '/usr/bin/systemctl', 'rc': 0, 'stderr': '', 'timed_out': False}


@pytest.mark.parametrize('systemctl, expected', [
    (None, False),
    (SYSTEMCTL, True),
    (dict(SYSTEMCTL, rc=1, stderr="System has not been booted with systemd as init system (PID 1). Can't operate.\n"
                                  'Failed to connect to bus: Host is down\n'), False),
    (dict(SYSTEMCTL, rc=1, stderr='Failed to connect to bus: No such file or directory\n'), False),
    (dict(SYSTEMCTL, rc=None, timed_out=True), None),
    (dict(SYSTEMCTL, rc=127, stderr='cannot run /usr/bin/systemctl: [Errno 13] Permission denied'), None),
])
def test_systemd(systemctl, expected):
    facts = assemble(loaded(systemctl=systemctl))
    assert facts['systemd'] is expected


def test_no_systemd_leaves_every_service_null():
    facts = assemble(loaded(systemctl=None, services={}))
    assert facts['systemd'] is False and set(facts['services'].values()) == {None}


def gpu_modes(*modes):
    return [{'index': index, 'persistence_mode': mode} for index, mode in enumerate(modes)]


@pytest.mark.parametrize('modes, expected', [
    (('Enabled',), 'Enabled'),
    (('Enabled',) * 8, 'Enabled'),
    (('Enabled', 'Enabled', 'Disabled', 'Enabled'), 'Disabled'),
    (('Disabled', None), 'Disabled'),
    (('Enabled', None), None),           # a GPU that does not say: not every GPU is known to be Enabled
    ((None,), None),
    ((), None),
])
def test_persistence_mode_of_the_node(modes, expected):
    assert _facts.persistence_mode(gpu_modes(*modes)) == expected


def test_persistence_mode_from_real_xml():
    # The T4 capture prints Persistence Mode Disabled; the H100 one Enabled (test__facts_h100.py).
    facts = assemble(loaded())
    assert facts['gpus'][0]['persistence_mode'] == 'Disabled' and facts['persistence_mode'] == 'Disabled'


def test_an_interrupted_install_still_claims_the_driver_for_the_package_manager():
    """A dpkg that failed mid-install (the sim's dpkg_fail: every package of the new pin unpacked, iU) leaves no driver package
    installed while the old module stays loaded: the driver is still the package manager's, never unowned (a rollback by
    packages must not be refused as a second driver)."""
    listing = {'manager': 'dpkg', 'rc': 0, 'stdout': 'libnvidia-compute-580\t580.65.06-0ubuntu1\tiU \n'
               'nvidia-driver-580-server\t580.65.06-0ubuntu1\tiU \nnvidia-dkms-580\t580.65.06-0ubuntu1\tiF \n'
               'nvidia-driver-550-server\t550.127.05-0ubuntu1\trc \n'}
    facts = assemble(loaded(packages=listing))
    assert facts['driver_source'] == 'host_package', facts['driver_source_evidence']
    assert facts['driver_source_evidence'] == 'package nvidia-driver-580-server (dpkg, iU: an install was interrupted)'
    assert facts['packages'] == {}          # the installed packages stay the installed ones
    # Only config files left (rc): removed, no claim.
    removed = {'manager': 'dpkg', 'rc': 0, 'stdout': 'nvidia-driver-550-server\t550.127.05-0ubuntu1\trc \n'}
    assert assemble(loaded(packages=removed))['driver_source'] == 'unowned'
