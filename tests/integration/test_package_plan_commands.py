# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""package_plan's package-manager queries through ansible-playbook: a hung dpkg-query, a listing with odd bytes."""

import os

from conftest import pids_alive, run_playbook

PLAY = os.path.join(os.path.dirname(__file__), 'playbooks', 'package_plan_limits.yml')
TASK = 'Plan the driver packages with a short time limit'


def test_a_hung_query_fails_naming_it_and_odd_bytes_are_a_plan(fleet, tmp_path):
    pids = str(tmp_path / 'dpkg-query.pids')
    # A dpkg-query that never ends (a stuck database lock or file system), with a child holding its output.
    fleet.host('hung').tool('dpkg-query', {'args': ['-W'], 'hang': 300, 'hang_child': True, 'pid_file': pids})
    # A package name with bytes that are not UTF-8 next to the installed 550 driver.
    listing = (b'libnvidia-compute-550\t550.127.05-0ubuntu1\tii \n'
               b'libnvidia-\xe9\xff-550\t550.127.05-0ubuntu1\tii \n'
               b'bash\t5.2.15-2+b7\tii \n')
    fleet.host('odd-bytes').tool('dpkg-query', {'args': ['-W'], 'stdout_hex': listing.hex()})
    result = run_playbook(PLAY, fleet.inventory())
    assert result.seconds(TASK) < 3 + 12
    outcome = result.task(TASK)

    hung = outcome['hung']
    assert hung['failed'] and hung['cmd'][1:3] == ['-W', '-f']
    assert hung['msg'].startswith('dpkg-query -W: %s/dpkg-query -W -f ' % fleet.hosts['hung'].bin)
    assert hung['msg'].endswith(' did not finish within 3 s and was killed (with its process group)')
    assert pids_alive(pids) == []

    plan = outcome['odd-bytes']
    assert not plan.get('failed'), plan
    assert plan['changed'] and plan['package_manager'] == 'apt'
    assert plan['current_pin']['driver'] == '550.127.05'
    assert any(package['name'] == 'nvidia-driver-580-server' and package['current'] is None for package in plan['packages'])
