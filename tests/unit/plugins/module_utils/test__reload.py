# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/_reload.py: the decisions of driver_reload."""

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._reload import (
    classify_modprobe, describe_holders, find_holders, load_order, start_order, units_to_start, unload_order)


def test_holders_are_processes_with_nvidia_devices_open():
    entries = [
        {'pid': 1, 'comm': 'systemd', 'fds': ['/dev/null', 'socket:[1]']},
        {'pid': 42, 'comm': 'python3', 'fds': ['/dev/nvidia0', '/dev/nvidiactl', '/dev/nvidia0', '/dev/nvidia-uvm']},
        {'pid': 43, 'comm': 'ansible', 'fds': ['/dev/nvidiactl']},
        {'pid': 44, 'comm': 'cat', 'fds': ['/dev/nvidia-something-else.txt']},
    ]
    holders = find_holders(entries, own_pids=(43,))
    assert holders == [{'pid': 42, 'comm': 'python3', 'devices': ['/dev/nvidia-uvm', '/dev/nvidia0', '/dev/nvidiactl']}]
    assert describe_holders(holders) == 'python3 (pid 42: /dev/nvidia-uvm /dev/nvidia0 /dev/nvidiactl)'


def test_kmod_answers():
    assert classify_modprobe(0, '') == 'ok'
    assert classify_modprobe(1, 'modprobe: FATAL: Module nvidia_drm is not in kernel.\n') == 'not_loaded'
    assert classify_modprobe(1, 'modprobe: FATAL: Module nvidia is in use.\n') == 'in_use'
    assert classify_modprobe(1, 'modprobe: FATAL: Module nvidia not found in directory /lib/modules/6.1.0-26-amd64\n') == 'not_found'
    assert classify_modprobe(1, 'modprobe: ERROR: could not insert') == 'failed'


def test_orders():
    assert unload_order(['nvidia', 'nvidia_uvm', 'nvidia-drm']) == ['nvidia_uvm', 'nvidia_drm', 'nvidia']
    assert load_order(['nvidia_uvm', 'nvidia']) == ['nvidia', 'nvidia_uvm']
    assert start_order(['nvidia-dcgm', 'nvidia-fabricmanager', 'nvidia-persistenced']) == ['nvidia-persistenced', 'nvidia-fabricmanager', 'nvidia-dcgm']


def test_enabled_units_start_after_the_reload_as_after_a_boot():
    services = ['nvidia-dcgm', 'dcgm', 'nvidia-fabricmanager', 'nvidia-persistenced']
    assert units_to_start(services, ['nvidia-dcgm'], ['nvidia-fabricmanager', 'nvidia-persistenced']) == [
        'nvidia-dcgm', 'nvidia-fabricmanager', 'nvidia-persistenced']
