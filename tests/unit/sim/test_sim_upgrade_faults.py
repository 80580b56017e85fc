# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulated fleet's pieces for the per-node upgrade: faults gpu_lost and diag_fail branch=, the fake modprobe."""

import json
import os
import sys

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _dcgm

from test_fake_tools import DCGM, DRIVER, KERNEL, Node  # pylint: disable=import-error

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'sim'))

import fleet_faults  # noqa: E402  pylint: disable=wrong-import-position,import-error
from gpufleet_sim import state  # noqa: E402  pylint: disable=wrong-import-position,import-error

NEW = '580.65.06'


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path / 'node').healthy()


def boot(node):
    process = node.run('boot')
    assert process.returncode == 0, process.stderr
    return json.loads(node.read(state.BOOT_FILE))


def test_fault_settings():
    assert fleet_faults.parse_fault_settings('gpu_lost', ['gpu=5']) == {'gpu': 5}
    assert fleet_faults.parse_fault_settings('diag_fail', ['branch=580'])['branch'] == 580
    with pytest.raises(fleet_faults.FaultError):
        fleet_faults.parse_fault_settings('gpu_lost', ['gpus=5'])


def test_gpu_lost_only_after_the_next_boot(node):
    node.faults({'gpu_lost': {'gpu': 5}})
    assert node.smi_xml()[1]['gpu_count'] == 8, 'the GPU is lost at the next boot, not before'
    record = boot(node)
    assert record['absent_gpus'] == [5]
    parsed = node.smi_xml()[1]
    assert parsed['gpu_count'] == 7
    assert node.hardware['gpus'][5]['uuid'] not in [gpu['uuid'] for gpu in parsed['gpus']]
    node.faults({})
    assert node.smi_xml()[1]['gpu_count'] == 7, 'still lost until a boot without the fault'
    assert 'absent_gpus' not in boot(node) and node.smi_xml()[1]['gpu_count'] == 8


@pytest.mark.parametrize('branch, fails', [(550, True), (580, False)])
def test_diag_fail_only_on_one_driver_branch(node, branch, fails):
    package, dummy = DCGM['4']
    node.package(package, DCGM['4'][1])
    node.faults({'diag_fail': {'level': 1, 'gpu': 2, 'branch': branch}})
    parsed = _dcgm.parse_diag_json(node.run('dcgmi', 'diag', '-r', '1', '-j').stdout)
    assert parsed['passed'] is (not fails)
    if fails:
        assert parsed['failures'][0]['gpu'] == 2


def test_modprobe_reloads_the_new_driver_without_a_boot(node):
    before = boot(node)
    assert before['driver'] == DRIVER
    # A new driver installed (its module built for the booted kernel): NVML mismatches until the module is reloaded.
    node.install_nvml(NEW)
    node.write(state.module_path(KERNEL), NEW + '\n')
    assert node.run('nvidia_smi').returncode != 0
    assert node.run('modprobe', '-r', 'nvidia_uvm').returncode == 0
    assert node.run('modprobe', '-r', 'nvidia').returncode == 0
    gone = node.run('modprobe', '-r', 'nvidia')
    assert (gone.returncode, gone.stderr) == (1, 'modprobe: FATAL: Module nvidia is not in kernel.\n')
    assert json.loads(node.read(state.BOOT_FILE))['driver'] is None
    assert node.run('modprobe', 'nvidia').returncode == 0
    after = json.loads(node.read(state.BOOT_FILE))
    assert (after['driver'], after['boot_id']) == (NEW, before['boot_id']) and 'reloaded_at' in after
    assert node.smi_xml()[1]['driver_version'] == NEW


def test_modprobe_without_a_built_module(node):
    boot(node)
    node.run('modprobe', '-r', 'nvidia')
    os.unlink(node.path(state.module_path(KERNEL)))
    missing = node.run('modprobe', 'nvidia')
    assert missing.returncode == 1 and 'not found in directory /lib/modules/%s' % KERNEL in missing.stderr


def test_boot_installs_the_fake_modprobe(node):
    boot(node)
    wrapper = node.read('usr/local/sbin/modprobe')
    assert 'gpufleet_sim.modprobe' in wrapper and os.access(node.path('usr/local/sbin/modprobe'), os.X_OK)
