# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SSH port allocation of the simulated fleet (tests/sim/fleet.py): a port is never handed out twice."""

import importlib.util
import json
import os
import socket

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
_SPEC = importlib.util.spec_from_file_location('gpufleet_sim_test_fleet', os.path.join(ROOT, 'tests', 'sim', 'fleet.py'))
FLEET = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(FLEET)


def test_a_busy_port_is_skipped_and_no_port_is_given_twice():
    # The reproduction of the bug: the 4th default port is busy; nodes 4, 5 and 6 all got the next one.
    ports = FLEET.pick_ports(6, 22200, set(), lambda port: port != 22203)
    assert ports == [22200, 22201, 22202, 22204, 22205, 22206]


def test_ports_of_other_fleets_are_not_handed_out():
    ports = FLEET.pick_ports(3, 22200, {22200, 22202}, lambda port: True)
    assert ports == [22201, 22203, 22204]


def test_running_out_of_ports_is_an_error():
    with pytest.raises(FLEET.FleetError, match='only 1 free loopback port'):
        FLEET.pick_ports(2, 22200, set(), lambda port: port == 22210, span=20)


def test_port_is_free_sees_a_listener():
    with socket.socket() as held:
        held.bind(('127.0.0.1', 0))
        held.listen(1)
        assert not FLEET.port_is_free(held.getsockname()[1])


def test_registry_keeps_only_ports_their_fleet_still_lists(tmp_path):
    live, gone = tmp_path / 'live', tmp_path / 'gone'
    live.mkdir()
    (live / 'fleet.json').write_text(json.dumps({'nodes': {'gpu-01': {'ssh_port': 22200}}}))
    registry_path = str(tmp_path / 'ports.json')
    with FLEET.port_registry(registry_path) as registry:
        registry.update({'22200': str(live), '22201': str(live), '22300': str(gone)})
    with FLEET.port_registry(registry_path) as registry:
        assert registry == {'22200': str(live)}
