# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The booted kernel and the loaded driver where tools read them on metal: the node's uname() shim file and
/proc/driver/nvidia/version, written by the boot step and the fake modprobe (tests/sim/README.md)."""

import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._nvidia_smi import parse_proc_driver_version
from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import read_fixture

from test_fake_tools import DRIVER, KERNEL, Node  # pylint: disable=import-error

from gpufleet_sim import state  # noqa: E402  pylint: disable=wrong-import-position,import-error

NEW_KERNEL = '6.1.0-28-amd64'
NEW = '580.65.06'
SHIM_SOURCE = os.path.join(os.path.dirname(__file__), '..', '..', 'sim', 'node', 'shim', 'gpufleet_uname.c')
REAL_PROPRIETARY = 'proc-driver-nvidia-version_580.173.02_nvml-mismatch_truenas-nvidia-drivers-issue19.txt'
REAL_OPEN = 'proc-driver-nvidia-version_open_565.57.01_ubuntu24.04_nixGL-issue186.txt'


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path / 'node').healthy()


def boot(node):
    process = node.run('boot')
    assert process.returncode == 0, process.stderr
    return json.loads(node.read(state.BOOT_FILE))


def shape(text):
    """A /proc/driver/nvidia/version text with its variable parts (version, date, builder, compiler) blanked."""
    text = re.sub(r'\d+(\.\d+)+', 'V', text)
    text = re.sub(r'  [A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [A-Z]{3,4} \d{4}', '  DATE', text)
    text = re.sub(r'\(\S+@\S+\)', '(BUILDER)', text)
    return re.sub(r'GCC version:  gcc version V \(.*\) ?\n', 'GCC version:  gcc version V (PACKAGE)\n', text)


@pytest.mark.parametrize('is_open, real', [(False, REAL_PROPRIETARY), (True, REAL_OPEN)])
def test_proc_driver_version_has_the_real_layout(is_open, real):
    text = state.proc_driver_version(NEW, is_open, 1753599278, 'gpu-01')
    sample = read_fixture('real-outputs', 'proc', real)
    assert shape(text) == shape(sample)
    assert parse_proc_driver_version(text) == NEW == parse_proc_driver_version(text.replace('\n', '\r\n'))
    assert text.endswith('GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n')
    assert ('Release Build  (root@gpu-01)' in text) is is_open


def test_boot_shows_the_booted_kernel_and_the_loaded_module(node):
    record = boot(node)
    assert node.read(state.KERNEL_RELEASE_FILE) == KERNEL + '\n'
    text = node.read(state.PROC_DRIVER_VERSION)
    assert text.startswith('NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  ' % DRIVER)
    assert parse_proc_driver_version(text) == record['driver'] == DRIVER
    assert oct(os.stat(node.path(state.PROC_DRIVER_VERSION)).st_mode & 0o777) == '0o444'


def test_the_loaded_module_stays_until_the_reboot(node):
    boot(node)
    # A new driver and a new kernel installed, the new module built for both kernels: nothing changes until the boot.
    node.install_nvml(NEW)
    node.kernel(NEW_KERNEL)
    for kernel in (KERNEL, NEW_KERNEL):
        node.write(state.module_path(kernel), NEW + ' open\n')
    assert node.read(state.KERNEL_RELEASE_FILE) == KERNEL + '\n'
    assert parse_proc_driver_version(node.read(state.PROC_DRIVER_VERSION)) == DRIVER
    record = boot(node)
    assert (record['kernel'], record['driver'], record['open']) == (NEW_KERNEL, NEW, True)
    assert node.read(state.KERNEL_RELEASE_FILE) == NEW_KERNEL + '\n'
    text = node.read(state.PROC_DRIVER_VERSION)
    assert text.startswith('NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  (root@gpu-01)  ' % NEW)


def test_no_module_no_proc_entry(node):
    boot(node)
    assert node.exists(state.PROC_DRIVER_VERSION)
    # A reboot into a kernel the module was not built for: the node comes back without /proc/driver/nvidia.
    node.kernel(NEW_KERNEL)
    record = boot(node)
    assert (record['kernel'], record['driver']) == (NEW_KERNEL, None)
    assert not node.exists(state.PROC_DRIVER_DIR)
    assert node.read(state.KERNEL_RELEASE_FILE) == NEW_KERNEL + '\n'


def test_modprobe_takes_the_proc_entry_away_and_back(node):
    boot(node)
    assert node.run('modprobe', '-r', 'nvidia').returncode == 0
    assert not node.exists(state.PROC_DRIVER_DIR)
    node.write(state.module_path(KERNEL), NEW + '\n')
    assert node.run('modprobe', 'nvidia').returncode == 0
    assert parse_proc_driver_version(node.read(state.PROC_DRIVER_VERSION)) == NEW
    assert node.read(state.KERNEL_RELEASE_FILE) == KERNEL + '\n'


def test_publish_leaves_an_unwritable_proc_alone(node, monkeypatch):
    # A container started without the tmpfs over /proc/driver (the image's provisioning container): no driver file.
    monkeypatch.setenv(state.ROOT_ENV, node.root)
    node.write('proc', 'procfs, not writable here\n')
    assert state.publish({'kernel': KERNEL, 'driver': DRIVER, 'open': False}) == [state.KERNEL_RELEASE_FILE]
    assert state.publish({'kernel': None, 'driver': None}) == [] and not node.exists(state.KERNEL_RELEASE_FILE)


def test_the_uname_shim_reports_the_release_file(tmp_path):
    # The shim reads a fixed path; build a copy reading a file of this test, and check what uname() returns through it.
    # gcc (and libc6-dev) are host packages of the simulated fleet (fleet.py HOST_PACKAGES): missing, this fails.
    release = tmp_path / 'kernel-release'
    source = tmp_path / 'shim.c'
    with open(SHIM_SOURCE, encoding='utf-8') as handle:
        text = handle.read()
    assert '#define GPUFLEET_KERNEL_RELEASE "/run/gpufleet-sim/kernel-release"' in text
    assert '"/%s"' % state.KERNEL_RELEASE_FILE in text
    source.write_text(text.replace('/run/gpufleet-sim/kernel-release', str(release)), encoding='utf-8')
    library = tmp_path / 'shim.so'
    subprocess.run(['gcc', '-shared', '-fPIC', '-O2', '-Wall', '-Wextra', '-Werror', '-o', str(library), str(source)], check=True)
    script = 'import os, platform; print(os.uname().release, platform.release(), os.uname().nodename == os.uname().nodename)'

    def released():
        environment = dict(os.environ, LD_PRELOAD=str(library))
        output = subprocess.run([sys.executable, '-c', script], env=environment, capture_output=True, text=True, check=True)
        uname = subprocess.run(['uname', '-r'], env=environment, capture_output=True, text=True, check=True)
        return output.stdout.split() + [uname.stdout.strip()]

    host = os.uname().release
    assert released() == [host, host, 'True', host], 'no file: the kernel\'s own release'
    release.write_text('', encoding='utf-8')
    assert released() == [host, host, 'True', host], 'an empty file: the kernel\'s own release'
    release.write_text(NEW_KERNEL + '\n', encoding='utf-8')
    assert released() == [NEW_KERNEL, NEW_KERNEL, 'True', NEW_KERNEL]
