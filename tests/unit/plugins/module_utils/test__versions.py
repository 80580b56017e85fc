# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for plugins/module_utils/_versions.py.

The expected results in DPKG_CASES were produced by ``dpkg --compare-versions``
(dpkg 1.21.22) and those in RPM_CASES by rpm 4.18.0 (``rpm --eval
'%{lua: print(rpm.vercmp(a, b))}'`` and ``rpm.labelCompare`` agreed on every
pair); the live tests below re-check them whenever the tools are on PATH.
"""

import shutil
import subprocess

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._versions import (
    VersionError,
    compare,
    dpkg_compare,
    matches_pin,
    rpm_compare,
    split_version,
)
from ansible_collections.gpufleet.lifecycle.tests.needs import require_tool

# (a, b, expected dpkg_compare(a, b)) -- expectations from `dpkg --compare-versions`.
DPKG_CASES = [
    ('580.65.06-1', '580.65.06-0ubuntu1', 1),
    ('580.65.06-1', '580.82.07-1', -1),
    ('580.65.06-0ubuntu0.24.04.2', '580.65.06-0ubuntu0.24.04.1', 1),
    ('1.17.0-1', '1.15.0~rc.1-1', 1),
    ('1.15.0~rc.1-1', '1.15.0-1', -1),
    ('1.15.0~rc.1-1', '1.15.0~rc.2-1', -1),
    ('1.15.0~rc.1-1', '1.14.3-1', 1),
    ('1:4.1.0-1', '4.1.0-1', 1),
    ('1:3.3.9', '1:4.1.0-1', -1),
    ('1:3.3.9', '3.3.9', 1),
    ('3.3.9', '3.3.10', -1),
    ('535.129.03-0ubuntu0.22.04.1', '535.129.03-0ubuntu1', -1),
    ('535.129.03', '535.129.03-0ubuntu0.22.04.1', -1),
    ('440.82-0ubuntu0~0.18.04.1', '440.82-0ubuntu0.18.04.1', -1),
    ('440.82-0ubuntu0~0.18.04.1', '440.82-0ubuntu0~0.18.04.2', -1),
    ('440.82-0ubuntu0~0.18.04.2', '440.82-0ubuntu0~0.18.04.', 1),
    ('460.56-0ubuntu0.20.04.1', '460.73.01-0ubuntu0.20.04.1', -1),
    ('460.73.01-0ubuntu0.20.04.1', '460.80-0ubuntu0.20.04.2', -1),
    ('510.47.03-0ubuntu1', '510.47.03-0ubuntu0.20.04.1', 1),
    ('510.54-1pop0~1645719405~21.10~10b5fec', '510.54-1pop0', -1),
    ('525.147.05-4~deb12u1', '525.147.05-4', -1),
    ('525.147.05-4~deb12u1', '525.147.05-3', 1),
    ('535.183.01-1~deb12u1', '535.183.01-1', -1),
    ('545.23.08-1', '545.23.06-1', 1),
    ('550.54.15-1', '550.54.14-1', 1),
    ('555.42.06-1', '560.28.03-1', -1),
    ('570.133.20-1', '570.172.08-0ubuntu1', -1),
    ('595.71.05-1', '595.58.03-1', 1),
    ('580.65.06-1', '580.65.6-1', 0),
    ('13.0.2-1', '13.0.0-1', 1),
    ('12.4.131-1', '12.4.99-1', 1),
    ('1.14.3-1', '1.14.3-1', 0),
    ('2.14.0-1', '2.13.0-1', 1),
    ('0.8.17.1', '0.8.17.2', -1),
    ('1.2.2', '1.2.2+b1', -1),
    ('1.0-1', '1.0-1ubuntu1', -1),
    ('7.0.1-1', '7.0.1', 1),
    ('1.0', '1.0-0', 0),
    ('0:1.0-1', '1.0-1', 0),
    ('2:1.0', '1:9.9', 1),
    ('1:0', '0:1', 1),
    ('1.01', '1.1', 0),
    ('1.001-1', '1.1-1', 0),
    ('10.1', '9.9', 1),
    ('1.0~', '1.0', -1),
    ('1.0~~', '1.0~', -1),
    ('1.0~~a', '1.0~~', 1),
    ('1.0a', '1.0', 1),
    ('1.0a', '1.0.', -1),
    ('1.0+b1', '1.0', 1),
    ('1.0+b1', '1.0a', 1),
    ('1.0-a', '1.0-1', 1),
    ('1.0.0~rc.10', '1.0.0~rc.9', 1),
    ('1.0.0~beta', '1.0.0~rc', -1),
    ('1.0.0+git20230101', '1.0.0', 1),
    ('1.0A', '1.0a', -1),
]

# (a, b, expected rpm_compare(a, b)) -- expectations from rpm 4.18 (lua rpm.vercmp == rpm.labelCompare).
RPM_CASES = [
    ('3:595.71.05-1.el9', '3:595.58.03-1.el9', 1),
    ('3:595.45.04-1.el9', '3:595.71.05-1.el9', -1),
    ('3:595.45.04-1.el9', '595.71.05-1.el9', 1),
    ('3:590.48.01-1.el9', '3:595.45.04-1.el9', -1),
    ('465.19.01-1.el7', '465.19.01-1', 1),
    ('465.19.01-1.el7', '465.19.01-2.el7', -1),
    ('11.3.58-1', '11.3.0-1', 1),
    ('11.3.0-1', '11.3.58-1', -1),
    ('535.129.03-1', '535.161.07-1', -1),
    ('565.57.01-1.el9', '565.57.01-1.el9', 0),
    ('515.65.01-1.el8_6', '515.65.01-1.el8', 1),
    ('2.0-1.el8', '2.0-1.el9', -1),
    ('5.14.0-611.41.1.el9_7', '5.14.0-570.12.1.el9_6', 1),
    ('1.17.0-1', '1.15.0~rc.1-1', 1),
    ('1.15.0~rc.1-1', '1.15.0-1', -1),
    ('1.15.0-0.1.rc.1', '1.15.0-1', -1),
    ('1.15.0-0.1.rc.1', '1.15.0-0.1.rc.2', -1),
    ('1:3.3.9-1', '3.3.9-1', 1),
    ('1:4.1.0-1', '1:3.3.9-1', 1),
    ('0:1.0-1', '1.0-1', 0),
    ('1.0^git1', '1.0', 1),
    ('1.0^git1', '1.0.1', -1),
    ('1.0^git1', '1.0^git2', -1),
    ('1.0~rc1', '1.0', -1),
    ('1.0~rc1', '1.0~rc2', -1),
    ('1.0~rc1^git1', '1.0~rc1', 1),
    ('1.0~rc1^git1', '1.0', -1),
    ('1.0a', '1.0', 1),
    ('1.0a', '1.0.1', -1),
    ('1.0a', '1.0b', -1),
    ('1.0', '1.0.0', -1),
    ('1.01', '1.1', 0),
    ('1_0', '1.0', 0),
    ('10.0', '9.9', 1),
    ('2.5.0beta', '2.5.0', 1),
    ('1.0', '1.0', 0),
    ('1.0+1', '1.0.1', 0),
    ('4.4.10-1.el9', '4.4.9-1.el9', 1),
]

# Exactly one side has a release.  rpm_compare then does not compare releases
# (rpm's dependency-range rule, checked with rpm.ds overlap: "= 1.0" overlaps
# "= 1.0-1"), whereas rpm.labelCompare / lua rpm.vercmp rank the side without
# a release lower.
RPM_HALF_RELEASE_CASES = [
    ('1.0-1', '1.0', 0),
    ('3:595.71.05', '3:595.71.05-1.el9', 0),
    ('595.71.05', '3:595.71.05-1.el9', -1),
    ('1.17.0', '1.17.0-1', 0),
    ('1.17.0', '1.17.1-1', -1),
]


def _ids(cases):
    return ['%s~%s' % (case[0], case[1]) for case in cases]


@pytest.mark.parametrize('first, second, expected', DPKG_CASES, ids=_ids(DPKG_CASES))
def test_dpkg_compare_table(first, second, expected):
    assert dpkg_compare(first, second) == expected
    assert dpkg_compare(second, first) == -expected
    assert compare(first, second, 'dpkg') == expected


@pytest.mark.parametrize('first, second, expected', RPM_CASES + RPM_HALF_RELEASE_CASES, ids=_ids(RPM_CASES + RPM_HALF_RELEASE_CASES))
def test_rpm_compare_table(first, second, expected):
    assert rpm_compare(first, second) == expected
    assert rpm_compare(second, first) == -expected
    assert compare(first, second, 'rpm') == expected


def test_tables_are_large_enough():
    assert len(DPKG_CASES) >= 40
    assert len(RPM_CASES) >= 30


def _dpkg_cli(a, b):
    for op, result in (('lt', -1), ('eq', 0)):
        proc = subprocess.run(['dpkg', '--compare-versions', a, op, b], stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        if proc.returncode == 0:
            return result
    return 1


def test_dpkg_table_against_real_dpkg():
    require_tool('dpkg', 'apt-get install dpkg (Debian/Ubuntu)')
    mismatches = [(a, b, expected, _dpkg_cli(a, b)) for a, b, expected in DPKG_CASES if _dpkg_cli(a, b) != expected]
    assert mismatches == []


def _rpm_vercmp(a, b):
    proc = subprocess.run(
        ['rpm', '--eval', '%%{lua: print(rpm.vercmp("%s", "%s"))}' % (a, b)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False, universal_newlines=True)
    return int(proc.stdout.strip())


def _rpm_lua_usable():
    if shutil.which('rpm') is None:
        return False
    try:
        # rpm >= 4.16 parses EVR in rpm.vercmp: the epoch decides here.
        return _rpm_vercmp('1:1.0', '2.0') == 1
    except (ValueError, OSError):
        return False


def test_rpm_table_against_real_rpm():
    require_tool('rpm', 'apt-get install rpm (Debian/Ubuntu; make test does it as root) or dnf install rpm')
    if not _rpm_lua_usable():
        pytest.fail('rpm is older than 4.16 (no Lua rpm.vercmp with epochs): install rpm >= 4.16', pytrace=False)
    mismatches = [(a, b, expected) for a, b, expected in RPM_CASES if _rpm_vercmp(a, b) != expected]
    assert mismatches == []
    for a, b, expected in RPM_HALF_RELEASE_CASES:
        real = _rpm_vercmp(a, b)
        if expected:
            assert real == expected, (a, b)
        else:
            # the documented divergence: rpmverCmp ranks the side with a release higher
            assert real == (1 if '-' in a else -1), (a, b)


@pytest.mark.parametrize('version, scheme, expected', [
    ('580.65.06-1', 'dpkg', {'epoch': 0, 'upstream': '580.65.06', 'revision': '1'}),
    ('580.65.06-0ubuntu1', 'dpkg', {'epoch': 0, 'upstream': '580.65.06', 'revision': '0ubuntu1'}),
    ('1:4.1.0-1', 'dpkg', {'epoch': 1, 'upstream': '4.1.0', 'revision': '1'}),
    ('1:3.3.9', 'dpkg', {'epoch': 1, 'upstream': '3.3.9', 'revision': None}),
    ('1.15.0~rc.1-1', 'dpkg', {'epoch': 0, 'upstream': '1.15.0~rc.1', 'revision': '1'}),
    ('440.82-0ubuntu0~0.18.04.1', 'dpkg', {'epoch': 0, 'upstream': '440.82', 'revision': '0ubuntu0~0.18.04.1'}),
    ('1.0-beta-2', 'dpkg', {'epoch': 0, 'upstream': '1.0-beta', 'revision': '2'}),
    ('3:595.71.05-1.el9', 'rpm', {'epoch': 3, 'upstream': '595.71.05', 'revision': '1.el9'}),
    ('595.71.05', 'rpm', {'epoch': 0, 'upstream': '595.71.05', 'revision': None}),
    ('1.15.0-0.1.rc.1', 'rpm', {'epoch': 0, 'upstream': '1.15.0', 'revision': '0.1.rc.1'}),
    (' 1.0-1 ', 'dpkg', {'epoch': 0, 'upstream': '1.0', 'revision': '1'}),
])
def test_split_version(version, scheme, expected):
    assert split_version(version, scheme) == expected


@pytest.mark.parametrize('actual, pinned, scheme, expected', [
    # upstream-only pins match any revision / epoch
    ('580.65.06-1', '580.65.06', 'dpkg', True),
    ('580.65.06-0ubuntu1', '580.65.06', 'dpkg', True),
    ('3:580.65.06-1.el9', '580.65.06', 'rpm', True),
    ('1:4.1.0-1', '4.1.0', 'dpkg', True),
    ('1.17.0-1', '1.17.0', 'dpkg', True),
    ('535.129.03-0ubuntu0.22.04.1', '535.129.03', 'dpkg', True),
    ('440.82-0ubuntu0~0.18.04.1', '440.82', 'dpkg', True),
    ('580.65.06-1', '580.65.07', 'dpkg', False),
    ('580.65.061-1', '580.65.06', 'dpkg', False),
    ('1.17.0-1', '1.17', 'dpkg', True),
    # revision pins are exact
    ('1.17.0-1', '1.17.0-1', 'dpkg', True),
    ('1.17.0-2', '1.17.0-1', 'dpkg', False),
    ('1.17.0-01', '1.17.0-1', 'dpkg', True),
    ('3:595.71.05-1.el9', '595.71.05-1.el9', 'rpm', True),
    ('3:595.71.05-1.el9', '3:595.71.05-1.el9', 'rpm', True),
    ('3:595.58.03-1.el9', '3:595.71.05-1.el9', 'rpm', False),
    ('595.71.05-1.el9', '595.71.05-1', 'rpm', False),
    ('1:4.1.0-1', '1:4.1.0-1', 'dpkg', True),
    ('1:4.1.0-1', '4.1.0-1', 'dpkg', True),
    # an explicit epoch must match
    ('1:4.1.0-1', '2:4.1.0', 'dpkg', False),
    ('4.1.0-1', '1:4.1.0-1', 'dpkg', False),
    ('1:3.3.9', '1:3.3.9', 'dpkg', True),
    ('3:595.71.05-1.el9', '3:595.71.05', 'rpm', True),
    ('595.71.05-1.el9', '3:595.71.05', 'rpm', False),
    # dot-boundary prefixes (toolkit 13.0, driver branch 580)
    ('13.0.2-1', '13.0', 'dpkg', True),
    ('13.0.2-1', '13', 'dpkg', True),
    ('13.1.0-1', '13.0', 'dpkg', False),
    ('130.0.2-1', '13', 'dpkg', False),
    ('580.65.06-1', '580', 'dpkg', True),
    ('3:580.65.06-1.el9', '580', 'rpm', True),
    ('3:595.71.05-1.el9', '580', 'rpm', False),
    ('5800.1-1', '580', 'dpkg', False),
    # tilde pre-releases
    ('1.15.0~rc.1-1', '1.15.0~rc.1', 'dpkg', True),
    ('1.15.0-1', '1.15.0~rc.1', 'dpkg', False),
    ('1.15.0~rc.1-1', '1.15.0', 'dpkg', False),
    ('1.15.0~rc.1-1', '1.15.0~rc.1-1', 'dpkg', True),
    ('1.15.0~rc.2-1', '1.15.0~rc.1', 'dpkg', False),
])
def test_matches_pin(actual, pinned, scheme, expected):
    assert matches_pin(actual, pinned, scheme) is expected


@pytest.mark.parametrize('value', [
    '', '   ', None, 5, '<none>', '1.0-', ':1.0', '1:', 'a:1.0', '1.0 1', '1.0-1_2', '1.0/2', '-1',
])
def test_dpkg_invalid_versions(value):
    with pytest.raises(VersionError):
        dpkg_compare(value, '1.0')
    with pytest.raises(VersionError):
        dpkg_compare('1.0', value)


@pytest.mark.parametrize('value', ['', None, '1.0-', ':1.0', '1:', 'x:1.0', '1.0 1', '1:2:3', '1.0-1/2', '-1'])
def test_rpm_invalid_versions(value):
    with pytest.raises(VersionError):
        rpm_compare(value, '1.0')
    with pytest.raises(VersionError):
        rpm_compare('1.0', value)


def test_error_message_names_the_value():
    with pytest.raises(VersionError, match=r"'1\.0-'"):
        dpkg_compare('1.0-', '1.0')
    with pytest.raises(VersionError, match='x:1.0'):
        rpm_compare('x:1.0', '1.0')


@pytest.mark.parametrize('scheme', ['deb', 'RPM', '', None, 'pip'])
def test_unknown_scheme(scheme):
    with pytest.raises(VersionError, match='unknown version scheme'):
        compare('1.0', '1.0', scheme)
    with pytest.raises(VersionError, match='unknown version scheme'):
        split_version('1.0', scheme)
    with pytest.raises(VersionError, match='unknown version scheme'):
        matches_pin('1.0', '1.0', scheme)


def test_matches_pin_rejects_bad_input():
    with pytest.raises(VersionError):
        matches_pin('', '1.0', 'dpkg')
    with pytest.raises(VersionError):
        matches_pin('1.0-1', '', 'rpm')


def test_version_error_is_value_error():
    assert issubclass(VersionError, ValueError)


def test_long_numeric_segments_do_not_overflow():
    assert dpkg_compare('1.99999999999999999999999', '1.99999999999999999999998') == 1
    assert rpm_compare('1.99999999999999999999999', '1.99999999999999999999998') == 1
