# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The run's members (controllers): liveness, the nodes a dead one holds."""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _members

IN_FLIGHT = ('admitted', 'rebooting')


def member(host='ctl-1', pid=10, beat=1000.0, left=None):
    return {'host': host, 'pid': pid, 'pid_start': 1, 'joined': 900.0, 'heartbeat': beat, 'left': left, 'hosts': 3, 'job': None}


def test_member_id_names_the_awx_job():
    assert _members.member_id('ee-7', 42) == 'ee-7:42'
    assert _members.member_id('ee-7', 42, job=311) == 'awx-job-311@ee-7:42'


def test_alive_by_heartbeat_left_and_local_process():
    assert _members.alive(member(), 1050, 60)
    assert not _members.alive(member(), 1061, 60)                    # stale heartbeat
    assert not _members.alive(member(left=1010), 1011, 60)           # left
    assert not _members.alive(member(), 1001, 60, here='ctl-1', alive_pid=lambda pid, start: False)    # its process is gone
    assert _members.alive(member(), 1001, 60, here='ctl-2', alive_pid=lambda pid, start: False)        # another host: heartbeat
    assert not _members.alive({'heartbeat': 'soon'}, 1000, 60) and not _members.alive(None, 1000, 60)


def test_held_names_in_flight_nodes_of_dead_members():
    members = {'a': member(beat=1000), 'b': member(host='ctl-2', beat=900)}
    nodes = {'n1': {'state': 'rebooting', 'member': 'a'}, 'n2': {'state': 'admitted', 'member': 'b'},
             'n3': {'state': 'done', 'member': 'b'}, 'n4': {'state': 'rebooting'}}
    assert _members.held(nodes, members, 1010, 60, in_flight=IN_FLIGHT) == {'n2': 'b'}
    assert _members.holder_of(nodes['n1'], 'b', {'a', 'b'}) == 'a'
    assert _members.holder_of(nodes['n1'], 'a', {'a', 'b'}) is None
    assert _members.holder_of(nodes['n2'], 'a', {'a'}) is None


def test_beat_and_leave():
    members = {'a': member(beat=1000)}
    assert _members.beat(members, 'a', 1020)['a']['heartbeat'] == 1020
    assert _members.beat(members, 'x', 1020) is None
    gone = _members.leave(members, 'a', 1030)
    assert _members.beat(gone, 'a', 1040) is None
    assert _members.summary(dict(gone, b=member(beat=1035), c=member(beat=100)), 1040, 60) == {'a': 'left', 'b': 'alive', 'c': 'dead'}
