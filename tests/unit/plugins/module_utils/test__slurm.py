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


# --------------------------------------------------------------------------- what the module reads

def raw_fixture(name):
    with open(os.path.join(FIXTURES, name), 'rb') as handle:
        return handle.read()


def test_a_latin1_reason_is_read_with_escapes_and_belongs_to_others():
    data = raw_fixture('show-node_idle-drain-latin1-reason.bin')
    with pytest.raises(UnicodeDecodeError):
        data.decode('utf-8')
    parsed = _slurm.parse_show_node(data, 'gpu-02')
    assert parsed['reason'] == 'Wartung L\\xfcfter' and parsed['reason_user'] == 'root'
    assert parsed['Reason'] == 'Wartung L\\xfcfter [root@2026-11-24T06:13:37]'
    assert parsed['state'] == 'IDLE+DRAIN' and _slurm.held_by_others(parsed)


def test_control_characters_in_a_reason_are_escaped():
    parsed = _slurm.parse_show_node('NodeName=n1 State=IDLE+DRAIN Reason=x\x1b[2Jy [bob@2026-01-02T03:04:05]')
    assert parsed['reason'] == 'x\\x1b[2Jy'


@pytest.mark.parametrize('asked', ['gpu-01', 'gpu-0', 'gpu-033', 'GPU-03'])
def test_an_answer_about_another_node_is_refused(asked):
    with pytest.raises(_slurm.SlurmWrongNodeError, match='scontrol show node %s answered about node gpu-03' % asked):
        _slurm.parse_show_node(fixture('show-node_idle.txt'), asked)
    assert _slurm.parse_show_node(fixture('show-node_idle.txt'), 'gpu-03')['name'] == 'gpu-03'


# --------------------------------------------------------------------------- the decision

OURS = 'gpufleet: drained maintenance'


@pytest.mark.parametrize('name', ['idle-drain-admin', 'down-drain', 'down-admin', 'idle-drain-latin1-reason'])
@pytest.mark.parametrize('state', ['drained', 'resumed', 'rebooted'])
def test_a_node_an_admin_set_down_or_drained_is_left_alone(name, state):
    parsed = _slurm.parse_show_node(raw_fixture('show-node_%s.%s' % (name, 'bin' if 'latin1' in name else 'txt')))
    decision = _slurm.decide(parsed, state, reason=OURS)
    # No update, nothing to wait for: the node stays as the admin left it.
    assert decision['update'] == [] and decision['wait'] is None
    assert decision['drained_by_others'] is True and decision['ours'] is False
    assert decision['msg'].startswith('%s is %s with reason ' % (parsed['name'], parsed['state']))
    assert decision['msg'].endswith(' set by others; left alone (force_reason=true acts anyway)')


def test_admin_down_without_drain_is_held():
    parsed = node('down-admin')
    assert parsed['state'] == 'DOWN' and parsed['flags'] == [] and parsed['reason'] == 'admin: PSU swap'
    assert _slurm.held_by_others(parsed)


def test_a_held_node_without_a_reason_is_not_ours_either():
    parsed = _slurm.parse_show_node('NodeName=n1 State=DOWN BootTime=None')
    assert _slurm.decide(parsed, 'resumed')['update'] == [] and _slurm.decide(parsed, 'resumed')['drained_by_others']


def test_force_reason_acts_on_a_node_held_by_others():
    admin = node('idle-drain-admin')
    assert _slurm.decide(admin, 'drained', reason=OURS, force_reason=True) == {
        'update': ['update', 'NodeName=gpu-03', 'State=DRAIN', 'Reason=' + OURS], 'wait': 'drained',
        'drained_by_others': False, 'ours': False, 'msg': None}
    assert _slurm.decide(admin, 'resumed', force_reason=True)['update'] == ['update', 'NodeName=gpu-03', 'State=RESUME']
    down = node('down-admin')
    assert _slurm.decide(down, 'rebooted', reason=OURS, force_reason=True, nextstate='down')['update'] == [
        'reboot', 'ASAP', 'nextstate=DOWN', 'reason=' + OURS, 'gpu-02']


def test_present_only_reads():
    assert _slurm.decide(node('idle-drain-admin'), 'present') == {'update': [], 'wait': None, 'drained_by_others': True, 'ours': False,
                                                                  'msg': None}
    assert _slurm.decide(node('mixed-drain'), 'present') == {'update': [], 'wait': None, 'drained_by_others': False, 'ours': True,
                                                             'msg': None}


def test_drain_an_undrained_node_then_wait_until_drained():
    idle = node('idle')
    decision = _slurm.decide(idle, 'drained', reason=OURS)
    assert decision['update'] == ['update', 'NodeName=gpu-03', 'State=DRAIN', 'Reason=' + OURS] and decision['wait'] == 'drained'
    assert not decision['drained_by_others'] and not decision['ours']
    assert not _slurm.wait_done('drained', node('mixed-drain'), idle)
    assert _slurm.wait_done('drained', node('idle-drain-reboot-requested'), idle)


def test_a_node_drained_by_gpufleet_keeps_its_reason_and_is_not_updated_again():
    draining = node('mixed-drain')
    decision = _slurm.decide(draining, 'drained', reason='gpufleet: quarantined xid 79')
    assert decision['update'] == [] and decision['wait'] == 'drained' and decision['ours']
    # force_reason replaces a different reason of ours.
    assert _slurm.decide(draining, 'drained', reason='gpufleet: quarantined xid 79', force_reason=True)['update'][-1] == \
        'Reason=gpufleet: quarantined xid 79'


def test_resume_only_what_is_drained_or_down():
    assert _slurm.decide(node('mixed-drain'), 'resumed')['update'] == ['update', 'NodeName=gpu-01', 'State=RESUME']
    assert _slurm.decide(node('down-drain-reboot-issued'), 'resumed')['update'][2] == 'State=RESUME'
    idle = _slurm.decide(node('idle'), 'resumed')
    assert idle['update'] == [] and idle['wait'] == 'resumed'
    # Not responding yet (just resumed): no second RESUME, wait until it responds.
    waking = _slurm.decide(node('idle-not-responding'), 'resumed')
    assert waking['update'] == [] and not _slurm.wait_done('resumed', node('idle-not-responding'), node('idle'))
    assert _slurm.wait_done('resumed', node('idle'), node('mixed-drain'))


def test_reboot_once_and_wait_for_the_new_boot_time():
    idle = node('idle')
    decision = _slurm.decide(idle, 'rebooted', reason='gpufleet: kernel update')
    assert decision['update'] == ['reboot', 'ASAP', 'nextstate=RESUME', 'reason=gpufleet: kernel update', 'gpu-03']
    assert decision['wait'] == 'rebooted'
    requested = node('allocated-drain-reboot-requested')
    assert _slurm.decide(requested, 'rebooted', reason='gpufleet: kernel update')['update'] == []
    assert not _slurm.wait_done('rebooted', node('down-drain-reboot-issued'), requested)
    assert _slurm.wait_done('rebooted', node('idle-rebooted'), requested)
    assert _slurm.describe_wait('rebooted', requested) == 'rebooted (BootTime after %s, no REBOOT_* flag)' % requested['boot_time']


def test_decide_refuses_what_the_module_never_asks():
    with pytest.raises(ValueError, match='unknown state'):
        _slurm.decide(node('idle'), 'absent')
    with pytest.raises(ValueError, match='reason is required'):
        _slurm.decide(node('idle'), 'drained')
    with pytest.raises(ValueError, match='nothing to wait for'):
        _slurm.wait_done(None, node('idle'), node('idle'))


def test_a_wait_that_ran_out_names_the_jobs_with_control_characters_escaped():
    jobs = [{'id': '7', 'user': 'alice', 'state': 'RUNNING', 'name': 'evil\x1b]0;x\x07'}]
    message = _slurm.describe_wait_timeout('drained', node('mixed-drain'), node('idle'), 3, jobs)
    assert message == ('gpu-01: not DRAINED after 3 s; state MIXED+DRAIN (DRAINING, jobs still running: 7 (alice, evil\\x1b]0;x\\x07, '
                       'RUNNING)); the node is left as it is')


def test_replace_reason_replaces_only_a_reason_of_ours():
    quarantine = 'gpufleet: quarantined: dcgmi diag r1 failed'
    draining = node('mixed-drain')
    assert _slurm.decide(draining, 'drained', reason=quarantine, replace_reason=True)['update'][-1] == 'Reason=' + quarantine
    # The same reason: nothing to change.
    assert _slurm.decide(dict(draining, reason=quarantine), 'drained', reason=quarantine, replace_reason=True)['update'] == []
    # An admin's drain is never replaced by replace_reason alone.
    admin = _slurm.decide(node('idle-drain-admin'), 'drained', reason=quarantine, replace_reason=True)
    assert admin['update'] == [] and admin['drained_by_others']


def test_a_drain_that_runs_out_of_time_undoes_only_what_it_did():
    idle = node('idle')
    decision = _slurm.decide(idle, 'drained', reason=OURS)
    assert _slurm.restore_after_timeout(idle, decision) == ['update', 'NodeName=gpu-03', 'State=RESUME']
    # Already drained by an earlier run of ours: this call changed nothing, so nothing is undone.
    draining = node('mixed-drain')
    assert _slurm.restore_after_timeout(draining, _slurm.decide(draining, 'drained', reason=OURS)) == []


# ------------------------------------------------------------------ requeue at a declared checkpoint

def test_a_declared_checkpoint_is_read_from_a_job_comment():
    assert _slurm.declared_checkpoint('step 400 gpufleet.io/checkpoint=2026-11-27T09:00:00Z rest') == 1795770000.0
    assert _slurm.declared_checkpoint('gpufleet.io/checkpoint=2026-11-27T10:00:00+01:00') == 1795770000.0
    for comment in (None, '', 'no declaration', 'gpufleet.io/checkpoint=soon', 'gpufleet.io/checkpoint='):
        assert _slurm.declared_checkpoint(comment) is None


@pytest.mark.parametrize('gres, gpus', [('gres/gpu:8', 8), ('gres:gpu:4', 4), ('gpu:h100:4', 4), ('gres/gpu:a100:2,gres/nic:1', 2),
                                        ('N/A', 0), ('', 0), (None, 0)])
def test_gres_gpus_of_a_job(gres, gpus):
    assert _slurm.gres_gpus(gres) == gpus


def test_the_jobs_a_drain_requeues_are_those_whose_checkpoint_passed():
    text = ('77|gpu-[01-02]|gres/gpu:8|2026-11-27T08:00:00Z|a|b gpufleet.io/checkpoint=2026-11-27T09:00:00Z\n'
            '78|gpu-01|N/A|2026-11-27T08:30:00Z|gpufleet.io/checkpoint=2026-11-27T10:00:00Z\n'
            '79_3|gpu-01|gres:gpu:1|Unknown|\n')
    jobs = _slurm.parse_requeue_jobs(text)
    assert [(job['id'], job['gpus_per_node'], job['checkpoint']) for job in jobs] == [
        ('77', 8, 1795770000.0), ('78', 0, 1795773600.0), ('79_3', 1, None)]
    at_nine = 1795770000.0
    assert [job['id'] for job in _slurm.requeue_choice(jobs, at_nine, 'checkpointed')] == ['77']
    assert [job['id'] for job in _slurm.requeue_choice(jobs, at_nine + 3600, 'checkpointed')] == ['77', '78']
    assert _slurm.requeue_choice(jobs, at_nine + 3600, 'never') == []
    with pytest.raises(ValueError, match='requeue must be one of never, checkpointed'):
        _slurm.requeue_choice(jobs, at_nine, 'always')
    record = _slurm.requeue_record(jobs[0], at_nine + 5)
    assert record == {'id': '77', 'nodes': 'gpu-[01-02]', 'gpus': 16, 'checkpoint': '2026-11-27T09:00:00+00:00',
                      'start': '2026-11-27T08:00:00+00:00', 'at': '2026-11-27T09:00:05+00:00'}


@pytest.mark.parametrize('line', ['77|gpu-01|N/A|Unknown', '7;7|gpu-01|N/A|Unknown|', '|gpu-01|N/A|Unknown|'])
def test_a_squeue_line_that_is_not_the_requeue_format_is_refused(line):
    with pytest.raises(_slurm.SlurmParseError, match='not a line of squeue'):
        _slurm.parse_requeue_jobs(line + '\n')


def test_a_heterogeneous_job_is_requeued_once_and_an_old_checkpoint_is_no_declaration():
    text = ('90+0|gpu-01|gres/gpu:8|2026-11-27T08:00:00Z|gpufleet.io/checkpoint=2026-11-27T08:30:00Z\n'
            '90+1|gpu-01|gres/gpu:8|2026-11-27T08:00:00Z|gpufleet.io/checkpoint=2026-11-27T08:30:00Z\n'
            # Restarted at 08:45 after a requeue, its comment still names 08:30: it declares nothing now.
            '91|gpu-01|N/A|2026-11-27T08:45:00Z|gpufleet.io/checkpoint=2026-11-27T08:30:00Z\n')
    jobs = _slurm.parse_requeue_jobs(text)
    assert [(job['id'], job['checkpoint'] is not None) for job in jobs] == [('90', True), ('91', False)]
    assert [job['id'] for job in _slurm.requeue_choice(jobs, 1795770000.0, 'checkpointed')] == ['90']
