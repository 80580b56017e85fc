# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_slurm against lines captured from Debian's slurmctld 22.05.8 (tests/unit/fixtures/slurm, see the .source.txt files)."""

import os

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _slurm

from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import fixture_path, read_fixture

FIXTURES = fixture_path('slurm')


def fixture(name):
    return read_fixture('slurm', name)


def node(name):
    return _slurm.parse_show_node(fixture('show-node_%s.txt' % name))


def test_every_fixture_has_its_source():
    names = [name for name in os.listdir(FIXTURES) if not name.endswith('.source.txt')]
    assert len(names) >= 14
    for name in names:
        source = fixture(name[:-len('.txt')] + '.source.txt')
        assert source.startswith('captured from Debian slurmctld 22.05.8 on the simulated fleet'), name
        assert 'command: ' in source


def test_idle_node_keeps_every_field():
    parsed = node('idle')
    assert parsed['name'] == parsed['NodeName'] == 'gpu-03'
    assert parsed['state'] == 'IDLE' and parsed['base_state'] == 'IDLE' and parsed['flags'] == []
    assert parsed['responding'] is True and parsed['drain_state'] == 'none'
    assert parsed['reason'] is None and parsed['reason_user'] is None and parsed['reason_time'] is None
    assert parsed['boot_time'] == '2026-11-21T19:57:36'
    # Values with spaces and "=" inside, empty values.
    assert parsed['OS'] == 'Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0'
    assert parsed['CfgTRES'] == 'cpu=2,mem=1M,billing=2'
    assert parsed['AllocTRES'] == ''
    assert parsed['Gres'] == 'gpu:8' and parsed['Partitions'] == 'gpu' and parsed['Version'] == '22.05.8'
    assert parsed['ExtSensorsTemp'] == 'n/s' and parsed['MCS_label'] == 'N/A'
    assert 'Reason' not in parsed


def test_draining_node_with_a_running_job():
    parsed = node('mixed-drain')
    assert parsed['state'] == 'MIXED+DRAIN' and parsed['base_state'] == 'MIXED' and parsed['flags'] == ['DRAIN']
    assert parsed['drain_state'] == 'draining'
    assert parsed['reason'] == 'gpufleet: drained for upgrade'
    assert parsed['reason_user'] == 'root' and parsed['reason_time'] == '2026-11-21T21:04:40'
    assert parsed['Reason'] == 'gpufleet: drained for upgrade [root@2026-11-21T21:04:40]'
    assert parsed['AllocTRES'] == 'cpu=1' and parsed['ExtSensorsTemp'] == 'n/s'
    assert _slurm.is_gpufleet_reason(parsed['reason']) and not _slurm.held_by_others(parsed)
    assert not _slurm.drain_done(parsed)


@pytest.mark.parametrize('name, state, base, flags, drain', [
    ('allocated-drain-reboot-requested', 'ALLOCATED+DRAIN+REBOOT_REQUESTED', 'ALLOCATED', ['DRAIN', 'REBOOT_REQUESTED'], 'draining'),
    ('idle-completing-drain-reboot-requested', 'IDLE+COMPLETING+DRAIN+REBOOT_REQUESTED', 'IDLE', ['COMPLETING', 'DRAIN', 'REBOOT_REQUESTED'], 'draining'),
    ('idle-drain-reboot-requested', 'IDLE+DRAIN+REBOOT_REQUESTED', 'IDLE', ['DRAIN', 'REBOOT_REQUESTED'], 'drained'),
    ('down-drain-reboot-issued', 'DOWN+DRAIN+REBOOT_ISSUED', 'DOWN', ['DRAIN', 'REBOOT_ISSUED'], 'drained'),
    ('idle-rebooted', 'IDLE', 'IDLE', [], 'none'),
    ('idle-drain-admin', 'IDLE+DRAIN', 'IDLE', ['DRAIN'], 'drained'),
    ('down-drain', 'DOWN+DRAIN', 'DOWN', ['DRAIN'], 'drained'),
    ('idle-not-responding', 'IDLE+NOT_RESPONDING', 'IDLE', ['NOT_RESPONDING'], 'none'),
])
def test_compound_states_of_real_nodes(name, state, base, flags, drain):
    parsed = node(name)
    assert parsed['state'] == state and parsed['base_state'] == base and parsed['flags'] == flags
    assert parsed['drain_state'] == drain
    assert parsed['responding'] is ('NOT_RESPONDING' not in flags)


def test_reboot_sequence():
    requested = node('allocated-drain-reboot-requested')
    assert requested['NextState'] == 'RESUME' and requested['reason'] == 'gpufleet: driver update'
    assert _slurm.reboot_pending(requested) and not _slurm.reboot_done(requested, requested['boot_time'])
    issued = node('down-drain-reboot-issued')
    assert issued['reason'] == 'gpufleet: driver update : reboot issued' and issued['reason_time'] == '2026-11-21T21:04:44'
    assert not _slurm.reboot_done(issued, requested['boot_time'])
    back = node('idle-rebooted')
    assert back['boot_time'] == '2026-11-21T21:04:45' and back['reason'] is None
    assert _slurm.reboot_done(back, requested['boot_time'])
    assert not _slurm.reboot_done(back, back['boot_time'])
    assert _slurm.resume_done(back)


def test_not_responding_node_has_no_boot_time_and_is_not_resumed_yet():
    parsed = node('idle-not-responding')
    assert parsed['boot_time'] is None and parsed['BootTime'] == 'None'
    assert not _slurm.resume_done(parsed)
    assert not _slurm.reboot_done(parsed, '2026-11-21T19:57:36')


def test_reason_that_looks_like_fields_is_bounded_by_the_user_time_suffix():
    parsed = node('idle-drain-reason-with-keys')
    assert parsed['reason'] == 'admin: x=y [tick] Arch=z'
    assert parsed['Arch'] == 'x86_64' and 'x' not in parsed
    assert parsed['reason_user'] == 'root'


def test_admin_reasons_are_held_by_others():
    assert _slurm.held_by_others(node('idle-drain-admin'))
    assert _slurm.held_by_others(node('down-drain'))
    assert not _slurm.held_by_others(node('idle'))
    assert not _slurm.held_by_others(node('idle-drain-reboot-requested'))


def test_older_star_suffix_and_legacy_base_states():
    line = fixture('show-node_down-drain.txt').replace('State=DOWN+DRAIN ', 'State=DOWN*+DRAIN ')
    parsed = _slurm.parse_show_node(line)
    assert parsed['state'] == 'DOWN*+DRAIN' and parsed['base_state'] == 'DOWN'
    assert parsed['flags'] == ['DRAIN', 'NOT_RESPONDING'] and parsed['responding'] is False
    assert parsed['drain_state'] == 'drained'
    assert _slurm.parse_state('DRAINING') == ('MIXED', ['DRAIN'])
    assert _slurm.parse_state('DRAINED*') == ('IDLE', ['NOT_RESPONDING', 'DRAIN'])
    assert _slurm.parse_state('IDLE+MAINTENANCE+POWERED_DOWN') == ('IDLE', ['MAINTENANCE', 'POWERED_DOWN'])
    assert _slurm.drain_state('COMPLETING', ['DRAIN']) == 'draining'
    assert _slurm.drain_state('FUTURE', ['DRAIN']) == 'drained'


def test_reason_without_suffix_and_fields_after_the_reason():
    parsed = _slurm.parse_show_node('NodeName=n1 State=IDLE+DRAIN BootTime=None Reason=hand written Comment=x')
    assert parsed['reason'] == 'hand written' and parsed['reason_user'] is None and parsed['Comment'] == 'x'
    parsed = _slurm.parse_show_node('NodeName=n1 State=IDLE+DRAIN Reason=r a=b [bob@2026-01-02T03:04:05] Comment=later\n')
    assert parsed['reason'] == 'r a=b' and parsed['reason_user'] == 'bob' and parsed['Comment'] == 'later'
    assert parsed['reason_time'] == '2026-01-02T03:04:05' and parsed['boot_time'] is None
    assert _slurm.parse_show_node(b'NodeName=n1 State=IDLE Reason=(null)\n')['reason'] is None


@pytest.mark.parametrize('text', [
    '',
    '\n\n',
    fixture('scontrol_node-not-found.txt'),
    fixture('scontrol_unreachable.txt'),
    'NodeName=gpu-01 Arch=x86_64',
    'NodeName=gpu-01 State=idle',
    'NodeName=gpu-01 State=IDLE++DRAIN',
    'NodeName= State=IDLE',
    fixture('show-node_idle.txt') + fixture('show-node_mixed-drain.txt'),
    'NodeName=gpu-01\n   Arch=x86_64 State=IDLE\n',
    None,
])
def test_bad_input_raises_parse_errors(text):
    with pytest.raises(_slurm.SlurmParseError):
        _slurm.parse_show_node(text)


def test_squeue_jobs():
    assert _slurm.parse_squeue_jobs(fixture('squeue_running.txt')) == [{'id': '1', 'user': 'root', 'state': 'RUNNING', 'name': 'train-llm'}]
    assert _slurm.parse_squeue_jobs('') == []
    jobs = _slurm.parse_squeue_jobs('12|alice|RUNNING|a|b\n13_4|bob|COMPLETING|\n')
    assert jobs == [{'id': '12', 'user': 'alice', 'state': 'RUNNING', 'name': 'a|b'},
                    {'id': '13_4', 'user': 'bob', 'state': 'COMPLETING', 'name': ''}]
    assert _slurm.describe_jobs(jobs) == '12 (alice, a|b, RUNNING), 13_4 (bob, , COMPLETING)'
    assert _slurm.describe_jobs([]) == 'none'
    for bad in ('12 alice RUNNING x', '|alice|RUNNING|x', fixture('show-node_idle.txt'), 3):
        with pytest.raises(_slurm.SlurmParseError):
            _slurm.parse_squeue_jobs(bad)


@pytest.mark.parametrize('name', ['gpu-01', 'GPU_7', 'node1.cluster', 'a', 'x' * 63, '0gpu'])
def test_plain_node_names_are_accepted(name):
    assert _slurm.check_node_name(name) == name


@pytest.mark.parametrize('name', ['gpu-01; touch /tmp/pwned', '$(id)', '`id`', 'gpu-[01-02]', 'gpu-01,gpu-02', 'a b', '', '-N', '--help',
                                  'gpu-01\n', 'gpu|x', 'gpu&', '../x', '.hidden', 'x' * 64, 'gpü', None, 7])
def test_names_with_metacharacters_are_rejected(name):
    with pytest.raises(ValueError, match='invalid Slurm node name'):
        _slurm.check_node_name(name)


def test_classify_real_errors():
    assert _slurm.classify_error(1, '', fixture('scontrol_node-not-found.txt')) == {'error': 'node_not_found', 'message': 'Node gpu-99 not found'}
    unreachable = _slurm.classify_error(1, '', fixture('scontrol_unreachable.txt'))
    assert unreachable == {'error': 'controller_unreachable',
                           'message': 'slurm_load_node error: Unable to contact slurm controller (connect failure)'}
    assert _slurm.classify_error(1, '', 'slurm_update error: Invalid node name specified')['error'] == 'node_not_found'
    assert _slurm.classify_error(1, '', 'Munge encode failed: Failed to access "/run/munge/munge.socket.2"')['error'] == 'authentication_failed'
    assert _slurm.classify_error(1, 'something else', '') == {'error': 'slurm_error', 'message': 'something else'}
    assert _slurm.classify_error(2, '', '')['message'] == 'exit status 2 and no output'


def test_reasons():
    assert _slurm.gpufleet_reason('driver upgrade') == 'gpufleet: driver upgrade'
    assert _slurm.gpufleet_reason(' gpufleet: kept ') == 'gpufleet: kept'
    for bad in ('', '   ', None, 'two\nlines'):
        with pytest.raises(ValueError):
            _slurm.gpufleet_reason(bad)
    assert not _slurm.is_gpufleet_reason(None) and not _slurm.is_gpufleet_reason('admin: gpufleet: no')
