# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The facts of a real NVIDIA H100 node, field by field, from what it printed (tests/unit/fixtures/real-outputs/h100-device).

The node (issue 27): driver 580.159.04 from a squashfs driver tree mounted at /usr/local/nvidia that no package owns,
the open kernel module, CUDA 13.0, dpkg holding only CUDA toolkit and NCCL packages, no systemd, Persistence Mode
Enabled.  ``raw`` is what gpu_facts reads there, each input taken from a capture of that node: nvidia-smi -q -x, the
/proc/driver/nvidia/version banner, the dpkg-query listing, nvcc --version, and /proc/modules, the tree's version file, the missing
systemctl and runfile installer from the driver evidence (each command's own output).
"""

import json
import re

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts import assemble
from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import read_real_output

SMI = '/usr/local/nvidia/bin/nvidia-smi'


def evidence():
    """``{command: its output}`` of the driver evidence capture (``### COMMAND``, its output, ``### rc=N``)."""
    text = read_real_output('h100-device', 'driver-evidence_h100_580.159.04_open.txt')
    return dict((match.group(1), match.group(2)) for match in re.finditer(r'^### (?!rc=)([^\n]*)\n(.*?)### rc=\d+\n', text, re.S | re.M))


def h100_raw():
    found = evidence()
    commands = found['sh -c command -v nvidia-smi nvidia-persistenced nvidia-uninstall nvidia-installer dkms modinfo lsmod systemctl']
    tree = found['sh -c for f in /usr/local/nvidia/version /usr/local/nvidia/kernel.release; do echo "== $f"; cat "$f"; done']
    version = tree.split('== /usr/local/nvidia/version\n', 1)[1].split('== /usr/local/nvidia/kernel.release', 1)[0]
    missing = found['ls -la /var/log/nvidia-installer.log /usr/lib/nvidia /usr/share/doc/NVIDIA_GLX-1.0 /etc/modprobe.d']
    assert commands == SMI + '\n'             # nothing else: no nvidia-uninstall, no systemctl
    assert "cannot access '/var/log/nvidia-installer.log'" in missing
    return {
        'kernel': '6.18.44-fc-v657-gpu',
        'nvidia_smi': {'path': SMI, 'rc': 0, 'stderr': '', 'timed_out': False,
                       'stdout': read_real_output('h100-device', 'nvidia-smi-q-x_h100-80gb-hbm3_580.159.04_open.xml')},
        'packages': {'manager': 'dpkg', 'rc': 0, 'stderr': '', 'timed_out': False,
                     'stdout': read_real_output('h100-device', 'dpkg-query-cuda-nccl_ubuntu24.04_no-driver-package.txt')},
        'proc_driver_version': read_real_output('h100-device', 'proc-driver-nvidia-version_580.159.04_open.txt'),
        'proc_modules': found['sh -c grep -i nvidia /proc/modules'],
        'driver_tree_version': version,
        'gpu_operator_driver_root': False,
        'runfile_uninstaller': 'nvidia-uninstall' in commands,
        'runfile_installer_log': "cannot access '/var/log/nvidia-installer.log'" not in missing,
        'systemctl': None,
        'services': {},
        'banners': {'nvcc': read_real_output('h100-device', 'nvcc-version_13.0.88.txt')},
        'records': {},
    }


@pytest.fixture(scope='module')
def facts():
    return assemble(h100_raw())


def test_the_driver_and_its_gpu(facts):
    assert (facts['health'], facts['health_reason'], facts['health_message']) == ('ok', None, None)
    assert facts['driver_version'] == facts['kernel_module_version'] == '580.159.04'
    assert facts['cuda_driver_version'] == '13.0'
    assert (facts['gpu_count'], facts['attached_gpus']) == (1, 1)
    gpu = facts['gpus'][0]
    assert (gpu['name'], gpu['uuid'], gpu['pci_bus_id']) == ('NVIDIA H100 80GB HBM3', 'GPU-b76bcbb4-5a3d-f209-2823-57b9c3c452ba',
                                                             '00000000:00:06.0')
    assert (gpu['vbios_version'], gpu['gsp_firmware_version'], gpu['architecture']) == ('96.00.DA.00.0C', '580.159.04', 'Hopper')
    assert gpu['ecc_mode'] == {'current': 'Enabled', 'pending': 'Enabled'} and gpu['mig_mode'] == {'current': 'Disabled', 'pending': 'Disabled'}
    assert facts['nvidia_smi_path'] == SMI
    assert facts['nvidia_module_loaded'] and not facts['nouveau_loaded']


def test_a_driver_no_package_owns_is_unowned_with_its_evidence(facts):
    assert facts['driver_source'] == 'unowned'
    assert facts['driver_source_evidence'] == (
        'nvidia-smi at /usr/local/nvidia/bin/nvidia-smi; loaded nvidia module 580.159.04 (/proc/driver/nvidia/version); '
        'driver tree /usr/local/nvidia (/usr/local/nvidia/version: 580.159.04); '
        'no driver package (dpkg), no GPU Operator root, no nvidia-installer log or nvidia-uninstall')
    assert facts['driver_tree'] == {'path': '/usr/local/nvidia', 'version': '580.159.04'}
    # dpkg holds the CUDA toolkit (cuda-compat and cuda-driver-dev among it) and NCCL, none of them a driver.
    assert facts['package_manager'] == 'dpkg' and facts['package_error'] is None
    assert 'cuda-compat-13-0' in facts['packages'] and 'cuda-driver-dev-13-0' in facts['packages']
    assert facts['held_packages'] == ['libnccl-dev', 'libnccl2']


def test_the_open_kernel_module(facts):
    assert facts['kernel_module_flavor'] == 'open'


def test_persistence_from_nvidia_smi_and_no_systemd(facts):
    # Persistence Mode Enabled on the GPU (the XML, as nvidia-smi -q prints it) while the node has no systemctl at all.
    assert 'Persistence Mode                                   : Enabled' in read_real_output(
        'h100-device', 'nvidia-smi-q_h100-80gb-hbm3_580.159.04.txt')
    assert facts['gpus'][0]['persistence_mode'] == 'Enabled' and facts['persistence_mode'] == 'Enabled'
    assert facts['systemd'] is False
    assert facts['services'] == {'nvidia-fabricmanager': None, 'nvidia-persistenced': None, 'nvidia-dcgm': None, 'dcgm': None}


def test_what_the_module_read_on_that_node_is_what_assemble_makes_of_its_captures(facts):
    # gpu_facts' own result there (collection at efd2326, before issue 27: no driver_source for an unowned driver, none of
    # the new keys); the dpkg listing captured is grep-filtered, so it lacks nsight-compute, which the module listed.
    module = json.loads(read_real_output('h100-device', 'gpu_facts-module-result_h100.json'))['ansible_facts']['gpufleet']
    assert module['driver_source'] is None
    moving = ('temperature_c',)
    assert [dict((k, v) for k, v in gpu.items() if k not in moving) for gpu in facts['gpus']] == \
        [dict((k, v) for k, v in gpu.items() if k not in moving) for gpu in module['gpus']]
    packages = dict(module['packages'])
    del packages['nsight-compute-2025.3.1']
    assert facts['packages'] == packages
    assert facts['tools']['nvcc'] == '13.0.88'
    same = set(module) - {'gpus', 'packages', 'driver_source'}
    assert dict((key, facts[key]) for key in same) == dict((key, module[key]) for key in same)
