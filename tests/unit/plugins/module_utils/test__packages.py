# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for plugins/module_utils/_packages.py and the readers in tests/unit/listing_readers.py.

Every real sample in tests/unit/fixtures/real-outputs/packages/ (byte-exact
copies of /work/shared/real-outputs/packages/, each with its ``.source.txt``
sidecar) is parsed and checked against values read from the sample.  Inputs
written inline are synthetic and follow the formats the tools document.
"""

import os
import re

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._packages import (
    DPKG_QUERY_FORMAT,
    RPM_QUERY_FORMAT,
    PackageParseError,
    parse_dnf_module_list,
    parse_dnf_repoquery,
    parse_dpkg_query,
    parse_fabricmanager_version,
    parse_nvcc_version,
    parse_nvidia_container_cli_version,
    parse_nvidia_ctk_version,
    parse_rpm_query,
)
from ansible_collections.gpufleet.lifecycle.plugins.module_utils._versions import compare, matches_pin
from ansible_collections.gpufleet.lifecycle.tests.unit.listing_readers import parse_apt_cache_policy, parse_apt_history, parse_dpkg_l, parse_rpm_qa

from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import read_real_output, real_output_path

FIXTURES = real_output_path('packages')

APT_HISTORY = 'apt-history_libnvidia-common-460_unattended-upgrade_shine-cluster.txt'
DNF_MODULE_LIST = 'dnf-module-list-nvidia-driver_rhel8.10_open-dkms-default_kmod-issue50.txt'
DNF_REPOQUERY = 'dnf-repoquery-kmod_rhel9_epoch3-595_kmod-issue68.txt'
DPKG_L_440 = 'dpkg-l-nvidia_440.82_ubuntu18.04_version-col-truncated_k8sdp-issue175.txt'
DPKG_L_525 = 'dpkg-l-nvidia_525.147.05_debian12-native_gpu-operator-issue662.txt'
DPKG_L_535 = 'dpkg-l-nvidia_535.129.03_ubuntu22.04_nct-1.15.0rc1_nct-issue196.txt'
DPKG_L_545 = 'dpkg-l-nvidia_545.23.08_debian-cuda-repo_nct-1.14.3_k8sdp-issue471.txt'
CONTAINER_CLI_V = 'nvidia-container-cli-V_1.0.7_nvidia-docker-issue1232.txt'
CTK_VERSION = 'nvidia-ctk-version_1.12.0_nct-issue50.txt'
RPM_QA = 'rpm-qa-cuda_el7_nvidia-driver-latest-dkms-465.19.01_az-hop-issue269.txt'

SAMPLES = (
    APT_HISTORY, DNF_MODULE_LIST, DNF_REPOQUERY, DPKG_L_440, DPKG_L_525, DPKG_L_535, DPKG_L_545,
    CONTAINER_CLI_V, CTK_VERSION, RPM_QA,
)


def _read(name):
    return read_real_output('packages', name)


# --------------------------------------------------------------------------- fixtures


def test_every_sample_in_the_folder_is_tested():
    on_disk = {name for name in os.listdir(FIXTURES) if not name.endswith('.source.txt')}
    assert on_disk == set(SAMPLES)


@pytest.mark.parametrize('name', SAMPLES)
def test_sample_matches_its_sidecar(name):
    sidecar = _read(name + '.source.txt')
    assert 'sample: %s\n' % name in sidecar
    size = re.search(r'^size: ([0-9]+) bytes$', sidecar, re.MULTILINE)
    assert size, 'sidecar of %s has no size line' % name
    assert os.path.getsize(os.path.join(FIXTURES, name)) == int(size.group(1))


# --------------------------------------------------------------------------- dpkg -l (real samples)


def test_dpkg_l_440_truncated_version_column():
    packages = parse_dpkg_l(_read(DPKG_L_440))
    assert sorted(packages) == [
        'libgldispatch0-nvidia', 'libnvidia-cfg1-440:amd64', 'libnvidia-cfg1-any', 'libnvidia-common', 'libnvidia-common-440',
    ]
    cfg = packages['libnvidia-cfg1-440:amd64']
    assert cfg == {
        'version': '440.82-0ubuntu0~0.18.04.', 'status': 'ii', 'arch': 'amd64', 'truncated': True, 'package': 'libnvidia-cfg1-440',
    }
    common = packages['libnvidia-common-440']
    assert common['version'] == '440.82-0ubuntu0~0.18.04.'
    assert common['arch'] == 'all'
    assert common['truncated'] is True
    assert packages['libgldispatch0-nvidia'] == {
        'version': None, 'status': 'un', 'arch': None, 'truncated': False, 'package': 'libgldispatch0-nvidia',
    }
    # the cropped text is not the installed version (440.82-0ubuntu0~0.18.04.1 or .2)
    assert compare(cfg['version'], '440.82-0ubuntu0~0.18.04.1', 'dpkg') == -1


def test_dpkg_l_440_rows_without_header_are_still_flagged():
    # as `dpkg -l | grep nvidia` would print them on the same terminal: widths come from the alignment
    rows = _read(DPKG_L_440).splitlines()[5:]
    assert rows[0].startswith('un  libgldispatch0-nvidia')
    packages = parse_dpkg_l('\n'.join(rows))
    assert packages['libnvidia-cfg1-440:amd64']['truncated'] is True
    assert packages['libnvidia-common-440']['truncated'] is True
    assert packages['libnvidia-common']['truncated'] is False


def test_dpkg_l_collapsed_whitespace_still_parses():
    text = (
        'ii libnvidia-compute-535:amd64 535.129.03-0ubuntu0.22.04.1 amd64 NVIDIA libcompute package\n'
        'un nvidia-current <none> <none> (no description available)\n'
    )
    packages = parse_dpkg_l(text)
    assert packages['libnvidia-compute-535:amd64']['version'] == '535.129.03-0ubuntu0.22.04.1'
    assert packages['libnvidia-compute-535:amd64']['truncated'] is False
    assert packages['nvidia-current']['version'] is None


def test_dpkg_l_525_debian_native_packages():
    packages = parse_dpkg_l(_read(DPKG_L_525))
    assert len(packages) == 10
    assert packages['firmware-nvidia-gsp'] == {
        'version': '525.147.05-4~deb12u1', 'status': 'ii', 'arch': 'amd64', 'truncated': False, 'package': 'firmware-nvidia-gsp',
    }
    assert packages['glx-alternative-nvidia']['version'] == '1.2.2'
    assert packages['libcuda1:amd64']['package'] == 'libcuda1'
    assert packages['libnvidia-allocator1:amd64']['version'] == '525.147.05-4~deb12u1'
    assert {entry['status'] for entry in packages.values()} == {'ii'}
    assert not any(entry['truncated'] for entry in packages.values())
    assert matches_pin(packages['libcuda1:amd64']['version'], '525.147.05', 'dpkg')


def test_dpkg_l_535_multiarch_and_tilde_prerelease():
    packages = parse_dpkg_l(_read(DPKG_L_535))
    assert len(packages) == 11
    assert packages['libnvidia-compute-535:amd64']['arch'] == 'amd64'
    assert packages['libnvidia-compute-535:i386']['arch'] == 'i386'
    assert packages['libnvidia-compute-535:i386']['version'] == '535.129.03-0ubuntu0.22.04.1'
    assert packages['libnvidia-common-535']['arch'] == 'all'
    tools = packages['libnvidia-container-tools']
    assert tools['version'] == '1.15.0~rc.1-1'
    # column sized to its longest value (not a terminal): nothing was cropped
    assert not any(entry['truncated'] for entry in packages.values())
    assert [name for name, entry in packages.items() if entry['status'] == 'un'] == [
        'libgldispatch0-nvidia', 'libnvidia-cfg1-any', 'libnvidia-common', 'libnvidia-compute',
        'libnvidia-compute-495', 'libnvidia-compute-495-server',
    ]
    assert matches_pin(tools['version'], '1.15.0~rc.1', 'dpkg')
    assert not matches_pin(tools['version'], '1.15.0', 'dpkg')
    assert compare(tools['version'], '1.15.0-1', 'dpkg') == -1


def test_dpkg_l_545_cuda_repo_and_container_toolkit():
    packages = parse_dpkg_l(_read(DPKG_L_545))
    assert len(packages) == 13
    assert packages['nvidia-container-toolkit']['version'] == '1.14.3-1'
    assert packages['nvidia-container-toolkit-base']['version'] == '1.14.3-1'
    assert packages['nvidia-driver']['version'] == '545.23.08-1'
    assert packages['nvidia-driver-libs:i386'] == {
        'version': '545.23.08-1', 'status': 'ii', 'arch': 'i386', 'truncated': False, 'package': 'nvidia-driver-libs',
    }
    assert packages['nvidia-driver-bin-545.23.08'] == {
        'version': None, 'status': 'un', 'arch': None, 'truncated': False, 'package': 'nvidia-driver-bin-545.23.08',
    }
    installed = sorted(name for name, entry in packages.items() if entry['status'] == 'ii')
    assert installed == [
        'nvidia-container-toolkit', 'nvidia-container-toolkit-base', 'nvidia-driver', 'nvidia-driver-bin',
        'nvidia-driver-libs:amd64', 'nvidia-driver-libs:i386',
    ]


# --------------------------------------------------------------------------- rpm -qa / dnf (real samples)


def test_rpm_qa_el7_cuda_listing():
    packages = parse_rpm_qa(_read(RPM_QA))
    assert len(packages) == 27
    assert packages['nvidia-driver-latest-dkms-cuda'] == {'version': '465.19.01', 'release': '1.el7', 'epoch': None, 'arch': 'x86_64'}
    assert packages['nvidia-driver-latest-dkms-cuda-libs'] == {'version': '465.19.01', 'release': '1.el7', 'epoch': None, 'arch': 'x86_64'}
    assert packages['cuda-drivers'] == {'version': '465.19.01', 'release': '1', 'epoch': None, 'arch': 'x86_64'}
    assert packages['cuda'] == {'version': '11.3.0', 'release': '1', 'epoch': None, 'arch': 'x86_64'}
    assert packages['cuda-11-3']['version'] == '11.3.0'
    assert packages['cuda-nvtx-11-3'] == {'version': '11.3.58', 'release': '1', 'epoch': None, 'arch': 'x86_64'}
    assert packages['cuda-toolkit-11-config-common'] == {'version': '11.3.58', 'release': '1', 'epoch': None, 'arch': 'noarch'}
    assert packages['cuda-toolkit-config-common']['arch'] == 'noarch'
    assert matches_pin('%s-%s' % (packages['cuda-11-3']['version'], packages['cuda-11-3']['release']), '11.3', 'rpm')


def test_dnf_repoquery_epoch3_kmod():
    items = parse_dnf_repoquery(_read(DNF_REPOQUERY))
    assert len(items) == 6
    assert items[0] == {'name': 'kmod-nvidia-open-dkms', 'epoch': 3, 'version': '595.45.04', 'release': '1.el9', 'arch': 'noarch'}
    assert items[5] == {'name': 'nvidia-kmod-common', 'epoch': 3, 'version': '595.71.05', 'release': '1.el9', 'arch': 'noarch'}
    assert [item['name'] for item in items] == ['kmod-nvidia-open-dkms'] * 3 + ['nvidia-kmod-common'] * 3
    assert {item['epoch'] for item in items} == {3}
    evrs = ['%d:%s-%s' % (item['epoch'], item['version'], item['release']) for item in items[:3]]
    assert evrs == ['3:595.45.04-1.el9', '3:595.58.03-1.el9', '3:595.71.05-1.el9']
    assert compare(evrs[2], evrs[1], 'rpm') == 1
    assert matches_pin(evrs[2], '595.71.05', 'rpm')
    assert matches_pin(evrs[2], '595', 'rpm')


def test_dnf_module_list_nvidia_driver_streams():
    modules = parse_dnf_module_list(_read(DNF_MODULE_LIST))
    assert [(module['name'], module['stream']) for module in modules] == [
        ('nvidia-driver', 'latest'), ('nvidia-driver', 'latest-dkms'), ('nvidia-driver', 'open-dkms'),
    ]
    latest, latest_dkms, open_dkms = modules
    assert latest['enabled'] is True and latest['default'] is False
    assert open_dkms['default'] is True and open_dkms['enabled'] is False
    assert latest_dkms['default'] is False and latest_dkms['enabled'] is False
    assert latest['profiles'] == ['default', 'fm', 'ks', 'src']
    assert latest_dkms['profiles'] == ['default', 'fm', 'ks']
    assert latest['default_profiles'] == ['default']
    assert open_dkms['summary'] == 'Nvidia driver for open-dkms branch'
    assert {module['repo'] for module in modules} == {'cuda-rhel8-x86_64'}
    assert not any(module['installed'] or module['disabled'] for module in modules)


# --------------------------------------------------------------------------- apt history (real sample)


def test_apt_history_unattended_upgrades():
    entries = parse_apt_history(_read(APT_HISTORY))
    assert len(entries) == 2
    first, second = entries
    assert first['start'] == '2021-04-24  06:50:54'
    assert first['end'] == '2021-04-24  06:50:54'
    assert first['commandline'] == '/usr/bin/unattended-upgrade'
    assert first['requested_by'] is None
    assert first['upgrade'] == [
        {'name': 'libnvidia-common-460', 'arch': 'amd64', 'from': '460.56-0ubuntu0.20.04.1', 'to': '460.73.01-0ubuntu0.20.04.1'},
    ]
    assert second['start'] == '2021-06-04  06:41:09'
    assert second['upgrade'][0]['from'] == '460.73.01-0ubuntu0.20.04.1'
    assert second['upgrade'][0]['to'] == '460.80-0ubuntu0.20.04.2'
    for entry in entries:
        assert entry['install'] == entry['remove'] == entry['purge'] == []
        assert compare(entry['upgrade'][0]['to'], entry['upgrade'][0]['from'], 'dpkg') == 1


# --------------------------------------------------------------------------- banners (real samples)


def test_nvidia_ctk_version_real():
    assert parse_nvidia_ctk_version(_read(CTK_VERSION)) == '1.12.0'


def test_nvidia_container_cli_version_real_old_format():
    assert parse_nvidia_container_cli_version(_read(CONTAINER_CLI_V)) == {'cli': '1.0.7', 'lib': None}


# --------------------------------------------------------------------------- dpkg-query (module path)


def test_query_formats():
    assert DPKG_QUERY_FORMAT == '${Package}\t${Version}\t${db:Status-Abbrev}\n'
    assert RPM_QUERY_FORMAT == '%{NAME}\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\t%{ARCH}\n'


DPKG_QUERY_OUTPUT = (
    'nvidia-driver-580-open\t580.65.06-0ubuntu1\tii \n'
    'nvidia-fabricmanager-580\t580.65.06-1\thi \n'
    'datacenter-gpu-manager\t1:3.3.9\tii \n'
    'nvidia-driver-535\t535.129.03-0ubuntu0.22.04.1\trc \n'
    'nvidia-driver-550\t\tun \n'
    'cuda-toolkit-13-0\t13.0.2-1\tiU \n'
    'libnvidia-compute-580\t580.65.06-0ubuntu1\tii \n'
    'libnvidia-compute-580\t580.65.06-0ubuntu1\tii \n'
    'nvidia-container-toolkit\t1.17.0-1\tiiR\n'
)


def test_parse_dpkg_query():
    packages = parse_dpkg_query(DPKG_QUERY_OUTPUT)
    assert packages == {
        'nvidia-driver-580-open': {'version': '580.65.06-0ubuntu1', 'held': False, 'status': 'ii'},
        'nvidia-fabricmanager-580': {'version': '580.65.06-1', 'held': True, 'status': 'hi'},
        'datacenter-gpu-manager': {'version': '1:3.3.9', 'held': False, 'status': 'ii'},
        'libnvidia-compute-580': {'version': '580.65.06-0ubuntu1', 'held': False, 'status': 'ii'},
        'nvidia-container-toolkit': {'version': '1.17.0-1', 'held': False, 'status': 'iiR'},
    }


def test_parse_dpkg_query_stripped_output_and_empty():
    assert parse_dpkg_query('nvidia-driver-580\t580.65.06-1\tii') == {'nvidia-driver-580': {'version': '580.65.06-1', 'held': False, 'status': 'ii'}}
    assert parse_dpkg_query('') == {}
    # An interrupted install's states only when asked (partial); config files only (rc) never.
    half = 'nvidia-dkms-580\t580.65.06-1\tiU \nnvidia-utils-580\t580.65.06-1\tiF \nnvidia-driver-550\t550.127.05-1\trc \n'
    assert parse_dpkg_query(half) == {}
    assert parse_dpkg_query(half, partial=True) == {'nvidia-dkms-580': {'version': '580.65.06-1', 'held': False, 'status': 'iU'},
                                                    'nvidia-utils-580': {'version': '580.65.06-1', 'held': False, 'status': 'iF'}}
    assert parse_dpkg_query('\n\n') == {}


@pytest.mark.parametrize('text, lineno', [
    ('nvidia-driver-580 580.65.06-1 ii \n', 1),
    ('a\t1.0\tii \nnvidia-driver-580\t580.65.06-1\n', 2),
    ('a\t1.0\tii \nb\t1.0\tii\textra\n', 2),
    ('a\t1.0\tzz \n', 1),
    ('a\t1.0\ti\n', 1),
    ('a\t\tii \n', 1),
    ('\t1.0\tii \n', 1),
    ('dpkg-query: no packages found matching foo\n', 1),
])
def test_parse_dpkg_query_errors_name_the_line(text, lineno):
    with pytest.raises(PackageParseError, match=r'line %d: ' % lineno):
        parse_dpkg_query(text)


# --------------------------------------------------------------------------- rpm -q --qf (module path)


def test_parse_rpm_query():
    text = (
        'nvidia-driver\t3:595.71.05-1.el9\tx86_64\n'
        'cuda-toolkit-13-0\t0:13.0.2-1\tx86_64\n'
        'package nvidia-fabricmanager is not installed\n'
        'gpg-pubkey\t0:d42d0685-62027e6b\t(none)\n'
        'kernel-core\t0:5.14.0-570.12.1.el9_6\tx86_64\n'
        'kernel-core\t0:5.14.0-611.41.1.el9_7\tx86_64\n'
        'kernel-core\t0:5.14.0-503.11.1.el9_5\tx86_64\n'
    )
    assert parse_rpm_query(text) == {
        'nvidia-driver': {'version': '3:595.71.05-1.el9', 'arch': 'x86_64'},
        'cuda-toolkit-13-0': {'version': '13.0.2-1', 'arch': 'x86_64'},
        'gpg-pubkey': {'version': 'd42d0685-62027e6b', 'arch': None},
        'kernel-core': {'version': '5.14.0-611.41.1.el9_7', 'arch': 'x86_64'},
    }
    assert parse_rpm_query('') == {}
    assert parse_rpm_query('package nvidia-driver is not installed\n') == {}


@pytest.mark.parametrize('text', [
    'nvidia-driver 3:595.71.05-1.el9 x86_64\n',
    'nvidia-driver\t595.71.05-1.el9\tx86_64\n',
    'nvidia-driver\t3:595.71.05\tx86_64\n',
    'nvidia-driver\t3:595.71.05-1.el9\t\n',
    'error: rpmdb open failed\n',
])
def test_parse_rpm_query_errors(text):
    with pytest.raises(PackageParseError, match=r'line 1: '):
        parse_rpm_query(text)


# --------------------------------------------------------------------------- rpm -qa / repoquery (synthetic)


def test_parse_rpm_qa_epoch_and_duplicates():
    text = (
        'kmod-nvidia-latest-dkms-3:595.71.05-1.el9.x86_64\n'
        'gpg-pubkey-d42d0685-62027e6b\n'
        'kernel-5.14.0-570.12.1.el9_6.x86_64\n'
        'kernel-5.14.0-611.41.1.el9_7.x86_64\n'
        '\n'
        '1:datacenter-gpu-manager-3.3.9-1.x86_64\n'
    )
    packages = parse_rpm_qa(text)
    assert packages['kmod-nvidia-latest-dkms'] == {'version': '595.71.05', 'release': '1.el9', 'epoch': 3, 'arch': 'x86_64'}
    assert packages['gpg-pubkey'] == {'version': 'd42d0685', 'release': '62027e6b', 'epoch': None, 'arch': None}
    assert packages['kernel']['release'] == '611.41.1.el9_7'
    assert packages['datacenter-gpu-manager']['epoch'] == 1
    assert parse_rpm_qa('') == {}


@pytest.mark.parametrize('text, lineno', [
    ('nvidia-driver\n', 1),
    ('cuda-11.3.0-1.x86_64\nnvidia driver 465.19.01-1.el7.x86_64\n', 2),
    ('nvidia-driver-x:1.0-1.x86_64\n', 1),
    ('nvidia-driver-1.0-.x86_64\n', 1),
    ('-1.0-1.x86_64\n', 1),
    ('foo-1.0/2-1.x86_64\n', 1),
])
def test_parse_rpm_qa_garbage(text, lineno):
    with pytest.raises(PackageParseError, match=r'line %d: ' % lineno):
        parse_rpm_qa(text)


def test_parse_dnf_repoquery_chatter_and_zero_epoch():
    text = (
        'Updating Subscription Management repositories.\n'
        'cuda-rhel9-x86_64                               120 kB/s | 3.5 kB     00:00\n'
        'Last metadata expiration check: 0:00:01 ago on Mon 01 Jan 2024 00:00:00 AM UTC.\n'
        'nvidia-driver-3:580.65.06-1.el9.x86_64\n'
        'cuda-toolkit-13-0-0:13.0.2-1.x86_64\n'
    )
    assert parse_dnf_repoquery(text) == [
        {'name': 'nvidia-driver', 'epoch': 3, 'version': '580.65.06', 'release': '1.el9', 'arch': 'x86_64'},
        {'name': 'cuda-toolkit-13-0', 'epoch': 0, 'version': '13.0.2', 'release': '1', 'arch': 'x86_64'},
    ]
    assert parse_dnf_repoquery('') == []


def test_parse_dnf_repoquery_garbage():
    with pytest.raises(PackageParseError, match=r'line 2: .*Error: Unknown repo'):
        parse_dnf_repoquery("nvidia-driver-3:580.65.06-1.el9.x86_64\nError: Unknown repo: 'cuda'\n")


# --------------------------------------------------------------------------- dpkg -l (synthetic)


def test_dpkg_l_old_dpkg_without_architecture_column_and_cut_marker():
    text = (
        'Desired=Unknown/Install/Remove/Purge/Hold\n'
        '| Status=Not/Installed/Config-files/Unpacked/Failed-config/Half-installed\n'
        '|/ Err?=(none)/Hold/Reinst-required/X=both-problems (Status,Err: uppercase=bad)\n'
        '||/ Name                 Version              Description\n'
        '+++-====================-====================-==================================\n'
        'ii  nvidia-current       195.36.24-4          NVIDIA binaries for Xorg\n'
        'rc  nvidia-kernel-dkms   190.53-4             NVIDIA binary kernel module source\n'
        'ii  nvidia-glx-legacy-17 173.14.25-0ubuntu3.> NVIDIA legacy binary driver\n'
    )
    packages = parse_dpkg_l(text)
    assert packages['nvidia-current'] == {'version': '195.36.24-4', 'status': 'ii', 'arch': None, 'truncated': False, 'package': 'nvidia-current'}
    assert packages['nvidia-kernel-dkms']['status'] == 'rc'
    legacy = packages['nvidia-glx-legacy-17']
    assert legacy['version'] == '173.14.25-0ubuntu3.'
    assert legacy['truncated'] is True


def test_dpkg_l_content_sized_header_is_not_truncated():
    text = (
        'Desired=Unknown/Install/Remove/Purge/Hold\n'
        '| Status=Not/Inst/Conf-files/Unpacked/halF-conf/Half-inst/trig-aWait/Trig-pend\n'
        '|/ Err?=(none)/Reinst-required (Status,Err: uppercase=bad)\n'
        '||/ Name                        Version                     Architecture Description\n'
        '+++-===========================-===========================-============-=================================\n'
        'hi  nvidia-driver-535           535.129.03-0ubuntu0.22.04.1 amd64        NVIDIA driver metapackage\n'
        'iHR nvidia-dkms-535             535.129.03-0ubuntu0.22.04.1 amd64        NVIDIA DKMS package\n'
    )
    packages = parse_dpkg_l(text)
    assert packages['nvidia-driver-535']['status'] == 'hi'
    assert packages['nvidia-driver-535']['truncated'] is False
    assert packages['nvidia-dkms-535']['status'] == 'iHR'
    assert packages['nvidia-dkms-535']['version'] == '535.129.03-0ubuntu0.22.04.1'


def test_dpkg_l_empty_and_header_only():
    assert parse_dpkg_l('') == {}
    assert parse_dpkg_l('Desired=Unknown/Install/Remove/Purge/Hold\n') == {}


@pytest.mark.parametrize('text, lineno', [
    ('ii  nvidia-driver 545.23.08-1 amd64 NVIDIA metapackage\nhello world\n', 2),
    ('dpkg-query: no packages found matching nvidia\n', 1),
    ('zz  nvidia-driver 545.23.08-1 amd64 NVIDIA metapackage\n', 1),
    ('+++-=====-\n', 1),
    ('ii  nvidia-driver\n', 1),
])
def test_dpkg_l_garbage(text, lineno):
    with pytest.raises(PackageParseError, match=r'line %d: ' % lineno):
        parse_dpkg_l(text)


# --------------------------------------------------------------------------- dnf module list (synthetic)


def test_dnf_module_list_markers_hint_and_sections():
    text = (
        'Last metadata expiration check: 0:10:00 ago on Mon 01 Jan 2024 00:00:00 AM UTC.\n'
        'cuda-rhel8-x86_64\n'
        'Name              Stream               Profiles                     Summary\n'
        'nvidia-driver     580-open [d][e]      default [d] [i], fm [i], ks  Nvidia driver for 580-open branch\n'
        'nvidia-driver     latest-dkms [x]      default [d], fm, ks          Nvidia driver for latest-dkms\n'
        '                                                                     branch\n'
        '\n'
        'AppStream\n'
        'Name    Stream  Profiles  Summary\n'
        'nodejs  18      common    Javascript runtime\n'
        '\n'
        'Hint: [d]efault, [e]nabled, [x]disabled, [i]nstalled\n'
    )
    modules = parse_dnf_module_list(text)
    assert len(modules) == 3
    first, second, third = modules
    assert first['stream'] == '580-open'
    assert first['default'] is True and first['enabled'] is True and first['installed'] is True
    assert first['profiles'] == ['default', 'fm', 'ks']
    assert first['default_profiles'] == ['default']
    assert first['installed_profiles'] == ['default', 'fm']
    assert first['repo'] == 'cuda-rhel8-x86_64'
    assert second['disabled'] is True and second['enabled'] is False
    assert second['summary'] == 'Nvidia driver for latest-dkms branch'
    assert third == {
        'name': 'nodejs', 'stream': '18', 'default': False, 'enabled': False, 'disabled': False, 'installed': False,
        'profiles': ['common'], 'default_profiles': [], 'installed_profiles': [], 'summary': 'Javascript runtime', 'repo': 'AppStream',
    }


def test_dnf_module_list_empty_and_chatter_only():
    assert parse_dnf_module_list('') == []
    assert parse_dnf_module_list('Updating Subscription Management repositories.\n') == []


@pytest.mark.parametrize('text, lineno', [
    ('Error: No matching Modules to list\n', 1),
    ('garbage\nmore garbage\nName   Stream  Profiles  Summary\n', 1),
    ('repo\nName          Stream      Profiles    Summary\nnvidia-driverlatest [e]  default     Nvidia\n', 3),
])
def test_dnf_module_list_garbage(text, lineno):
    with pytest.raises(PackageParseError, match=r'line %d: ' % lineno):
        parse_dnf_module_list(text)


# --------------------------------------------------------------------------- apt history (synthetic)


APT_HISTORY_FULL = """
Start-Date: 2025-08-12  10:01:02
Commandline: apt-get install -y nvidia-driver-580-open=580.65.06-0ubuntu1
Requested-By: admin (1000)
Install: nvidia-driver-580-open:amd64 (580.65.06-0ubuntu1), libnvidia-gl-580:amd64 (580.65.06-0ubuntu1, automatic)
Upgrade: nvidia-container-toolkit:amd64 (1.15.0~rc.1-1, 1.17.0-1), datacenter-gpu-manager:amd64 (1:3.3.9, 1:4.1.0-1)
Remove: nvidia-driver-535:amd64 (535.129.03-0ubuntu0.22.04.1)
Purge: nvidia-dkms-535:amd64 (535.129.03-0ubuntu0.22.04.1)
End-Date: 2025-08-12  10:03:40

Start-Date: 2025-08-13  09:00:00
Commandline: apt-get install nvidia-fabricmanager-580
Error: Sub-process /usr/bin/dpkg returned an error code (1)
"""


def test_apt_history_full_entry():
    first, second = parse_apt_history(APT_HISTORY_FULL)
    assert first['requested_by'] == 'admin (1000)'
    assert first['install'] == [
        {'name': 'nvidia-driver-580-open', 'arch': 'amd64', 'version': '580.65.06-0ubuntu1', 'automatic': False},
        {'name': 'libnvidia-gl-580', 'arch': 'amd64', 'version': '580.65.06-0ubuntu1', 'automatic': True},
    ]
    assert first['upgrade'][1] == {'name': 'datacenter-gpu-manager', 'arch': 'amd64', 'from': '1:3.3.9', 'to': '1:4.1.0-1'}
    assert first['remove'][0]['name'] == 'nvidia-driver-535'
    assert first['purge'][0]['version'] == '535.129.03-0ubuntu0.22.04.1'
    assert first['end'] == '2025-08-12  10:03:40'
    assert second['end'] is None
    assert second['error'] == 'Sub-process /usr/bin/dpkg returned an error code (1)'
    assert parse_apt_history('') == []


@pytest.mark.parametrize('text, lineno', [
    ('Commandline: apt-get upgrade\n', 1),
    ('Start-Date: 2025-08-12  10:01:02\nthis is not a history line\n', 2),
    ('Start-Date: 2025-08-12  10:01:02\nUpgrade: nvidia-driver:amd64 (580.65.06-1)\n', 2),
    ('Start-Date: 2025-08-12  10:01:02\nInstall: nvidia-driver:amd64 580.65.06-1\n', 2),
    ('Start-Date: 2025-08-12  10:01:02\nInstall: nvidia-driver:amd64 (580.65.06-1, manual)\n', 2),
])
def test_apt_history_garbage(text, lineno):
    with pytest.raises(PackageParseError, match=r'line %d: ' % lineno):
        parse_apt_history(text)


# --------------------------------------------------------------------------- apt-cache policy (synthetic: no real sample in the corpus)


APT_POLICY = """nvidia-driver-580-open:
  Installed: 580.65.06-0ubuntu0.24.04.1
  Candidate: 580.82.07-0ubuntu0.24.04.1
  Version table:
     580.82.07-0ubuntu0.24.04.1 500
        500 http://archive.ubuntu.com/ubuntu noble-updates/restricted amd64 Packages
 *** 580.65.06-0ubuntu0.24.04.1 100
        100 /var/lib/dpkg/status
cuda-drivers-fabricmanager-580:
  Installed: (none)
  Candidate: (none)
  Version table:
     580.65.06-1 -1
        600 https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64  Packages
N: Unable to locate package nvidia-driver-999
datacenter-gpu-manager:
  Installed: 1:3.3.9
  Candidate: 1:4.1.0-1
  Package pin: 1:3.3.9
  Version table:
     1:4.1.0-1 600
        600 https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64  Packages
 *** 1:3.3.9 1001
        100 /var/lib/dpkg/status
"""


def test_apt_cache_policy():
    policy = parse_apt_cache_policy(APT_POLICY)
    assert policy == {
        'nvidia-driver-580-open': {
            'installed': '580.65.06-0ubuntu0.24.04.1',
            'candidate': '580.82.07-0ubuntu0.24.04.1',
            'versions': ['580.82.07-0ubuntu0.24.04.1', '580.65.06-0ubuntu0.24.04.1'],
        },
        'cuda-drivers-fabricmanager-580': {'installed': None, 'candidate': None, 'versions': ['580.65.06-1']},
        'datacenter-gpu-manager': {'installed': '1:3.3.9', 'candidate': '1:4.1.0-1', 'versions': ['1:4.1.0-1', '1:3.3.9']},
    }
    assert parse_apt_cache_policy('') == {}
    assert parse_apt_cache_policy('N: Unable to locate package foo\n') == {}


def test_apt_cache_policy_installed_from_marker():
    text = 'nvidia-driver:\n  Version table:\n *** 555.42.06-1 1001\n        100 /var/lib/dpkg/status\n'
    assert parse_apt_cache_policy(text) == {'nvidia-driver': {'installed': '555.42.06-1', 'candidate': None, 'versions': ['555.42.06-1']}}


@pytest.mark.parametrize('text, lineno', [
    ('  Installed: 1.0\n', 1),
    ('nvidia-driver:\n  Installed: 1.0\nrandom garbage line\n', 3),
    ('nvidia-driver:\n      ??? broken\n', 2),
])
def test_apt_cache_policy_garbage(text, lineno):
    with pytest.raises(PackageParseError, match=r'line %d: ' % lineno):
        parse_apt_cache_policy(text)


# --------------------------------------------------------------------------- version banners (synthetic, documented formats)


@pytest.mark.parametrize('text, expected', [
    ('NVIDIA Container Toolkit CLI version 1.17.8\ncommit: f202b80a9b9d0db00d9b1d73c0128c8962c55f4d\n', '1.17.8'),
    ('NVIDIA Container Toolkit CLI version 1.19.0\n', '1.19.0'),
    ('', None),
    ('nvidia-ctk: command not found\n', None),
])
def test_nvidia_ctk_version(text, expected):
    assert parse_nvidia_ctk_version(text) == expected


@pytest.mark.parametrize('text, expected', [
    ('cli-version: 1.14.3\nlib-version: 1.14.3\nbuild date: 2023-10-19T11:32+00:00\n', {'cli': '1.14.3', 'lib': '1.14.3'}),
    ('cli-version: 1.17.8\nlib-version: 1.17.7\n', {'cli': '1.17.8', 'lib': '1.17.7'}),
    ('version: 1.3.0\nbuild date: 2020-09-16T12:32+00:00\n', {'cli': '1.3.0', 'lib': None}),
    ('', {'cli': None, 'lib': None}),
    ('garbage\n', {'cli': None, 'lib': None}),
])
def test_nvidia_container_cli_version(text, expected):
    assert parse_nvidia_container_cli_version(text) == expected


@pytest.mark.parametrize('text, expected', [
    ('Fabric Manager version is : 550.127.05\n', '550.127.05'),
    ('\n\n\tFabric Manager version is : 535.161.08\n\n', '535.161.08'),
    ('Fabric Manager version is : 610.57.04\nBuild Info - Branch: rel/gpu_drv/r610/r610_85-4, Changelist: 0', '610.57.04'),
    ('', None),
    ('nv-fabricmanager: command not found', None),
])
def test_fabricmanager_version(text, expected):
    assert parse_fabricmanager_version(text) == expected


NVCC_12_4 = (
    'nvcc: NVIDIA (R) Cuda compiler driver\n'
    'Copyright (c) 2005-2024 NVIDIA Corporation\n'
    'Built on Thu_Mar_28_02:18:24_PDT_2024\n'
    'Cuda compilation tools, release 12.4, V12.4.131\n'
    'Build cuda_12.4.r12.4/compiler.34097967_0\n'
)


@pytest.mark.parametrize('text, expected', [
    (NVCC_12_4, '12.4.131'),
    ('Cuda compilation tools, release 13.0, V13.0.48\n', '13.0.48'),
    ('Cuda compilation tools, release 5.0, V0.2.1221\n', '5.0'),
    ('Cuda compilation tools, release 11.8\n', '11.8'),
    ('', None),
    ('bash: nvcc: command not found\n', None),
])
def test_nvcc_version(text, expected):
    assert parse_nvcc_version(text) == expected


# --------------------------------------------------------------------------- input types


@pytest.mark.parametrize('parser', [
    parse_dpkg_query, parse_rpm_query, parse_dpkg_l, parse_rpm_qa, parse_dnf_repoquery, parse_dnf_module_list,
    parse_apt_history, parse_apt_cache_policy, parse_nvidia_ctk_version, parse_nvidia_container_cli_version,
    parse_fabricmanager_version, parse_nvcc_version,
])
def test_non_text_input_raises(parser):
    with pytest.raises(PackageParseError):
        parser(None)
    with pytest.raises(PackageParseError):
        parser(['nvidia-driver'])


def test_bytes_input_is_decoded():
    assert parse_nvidia_ctk_version(b'NVIDIA Container Toolkit CLI version 1.12.0\n') == '1.12.0'
    assert parse_dpkg_query(b'a\t1.0-1\tii \n') == {'a': {'version': '1.0-1', 'held': False, 'status': 'ii'}}


def test_package_parse_error_is_value_error():
    assert issubclass(PackageParseError, ValueError)
