# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every inventory host of a simulated fleet reaches its own node, even when a port of the range is busy.

The reproduction of the port collision: something holds the 4th node's default port while a 6-node fleet
comes up.  Before the fix nodes 4, 5 and 6 all got the next port and two of them were unreachable.
"""

import json
import os
import socket
import subprocess
import sys

from conftest import ROOT, SIM, require_identities

sys.path.insert(0, SIM)

from fleet import port_is_free  # noqa: E402  pylint: disable=wrong-import-position,import-error

STATE = os.path.join(ROOT, 'build', 'sim-ports')
BASE = 23200  # a range of its own, so the held port is the one the 4th node would get


def fleet(*arguments, check=True):
    process = subprocess.run([os.path.join(SIM, 'fleet'), '--state-dir', STATE] + list(arguments),
                             capture_output=True, text=True, check=False, timeout=900)
    if check and process.returncode != 0:
        raise AssertionError('fleet %s failed (rc=%s):\n%s%s' % (' '.join(arguments), process.returncode, process.stdout, process.stderr))
    return process


def test_a_held_port_gives_six_distinct_ports_and_six_identities():
    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.bind(('127.0.0.1', BASE + 3))
    held.listen(1)
    try:
        inventory = fleet('up', '--nodes', '6', '--scheduler', 'none', '--ssh-base-port', str(BASE)).stdout.strip().splitlines()[-1]
        with open(inventory, encoding='utf-8') as handle:
            hosts = json.load(handle)['all']['children']['gpu']['hosts']
        ports = dict((node, spec['ansible_port']) for node, spec in hosts.items())
        assert len(set(ports.values())) == 6, ports
        assert BASE + 3 not in ports.values()
        assert ports['gpu-04'] == BASE + 4 and ports['gpu-06'] == BASE + 6
        status = require_identities(STATE)
        assert [row['identity'] for row in status['nodes']] == ['gpu-%02d' % index for index in range(1, 7)]

        # down returns only when the containers are gone and the ports are free: up again at once is safe.
        fleet('down')
        assert all(port_is_free(port) for port in ports.values())
        fleet('up', '--nodes', '2', '--scheduler', 'none', '--ssh-base-port', str(BASE))
        assert require_identities(STATE)['all_reach_their_node']
    finally:
        held.close()
        fleet('down', check=False)


def test_status_names_a_host_that_reaches_another_node():
    # Two inventory hosts pointed at one container, as the old allocator produced: status says so and fails.
    fleet('up', '--nodes', '2', '--scheduler', 'none', '--ssh-base-port', str(BASE))
    try:
        config_path = os.path.join(STATE, 'fleet.json')
        with open(config_path, encoding='utf-8') as handle:
            config = json.load(handle)
        real_port = config['nodes']['gpu-02']['ssh_port']
        config['nodes']['gpu-02']['ssh_port'] = config['nodes']['gpu-01']['ssh_port']
        with open(config_path, 'w', encoding='utf-8') as handle:
            json.dump(config, handle)
        process = fleet('status', check=False)
        assert process.returncode == 3, process.stderr
        rows = dict((row['node'], row) for row in json.loads(process.stdout)['nodes'])
        assert rows['gpu-02']['identity'] == 'gpu-01' and not rows['gpu-02']['identity_ok']
        assert rows['gpu-01']['identity_ok']
        config['nodes']['gpu-02']['ssh_port'] = real_port
        with open(config_path, 'w', encoding='utf-8') as handle:
            json.dump(config, handle)
    finally:
        fleet('down', check=False)
