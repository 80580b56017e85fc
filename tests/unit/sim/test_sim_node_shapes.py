# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node shapes of the simulated fleet (issue 27) on a folder: the runfile installer and its uninstaller, a driver tree no
package owns, the boot step loading their modules, the open module's banner, systemctl out of sight, per-GPU persistence,
and the plan ``fleet shape`` follows (tests/sim/fleet_shapes.py).

The tools run as in a node, ``python3 -m gpufleet_sim.<tool>``, with ``GPUFLEET_SIM_ROOT`` pointing at the folder.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _nvidia_smi
from ansible_collections.gpufleet.lifecycle.tests.needs import require_root

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SIM = os.path.join(REPO, 'tests', 'sim')
SIM_NODE = os.path.join(SIM, 'node')
for _folder in (SIM_NODE, SIM, os.path.join(SIM, 'packages')):
    if _folder not in sys.path:
        sys.path.insert(0, _folder)

from gpufleet_sim import runfile, state  # noqa: E402  pylint: disable=wrong-import-position
import fleet_shapes  # noqa: E402  pylint: disable=wrong-import-position,import-error

KERNEL = '6.1.0-26-amd64'
NEWER = '6.1.0-28-amd64'
DRIVER = '580.65.06'
OLD = '550.127.05'
MODULE_FILES = ['lib/modules/%s/kernel/drivers/video/%s.ko' % (KERNEL, name) for name in runfile.MODULES]
# What the runfile installer puts on a node (relative to its root), links included.
RUNFILE_FILES = sorted(['usr/bin/nvidia-smi', 'usr/bin/nvidia-persistenced', 'usr/bin/nvidia-installer', 'usr/bin/nvidia-uninstall',
                        'usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%s' % DRIVER, 'usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1']
                       + MODULE_FILES)


class Node(object):
    """A simulated node root in a folder (the node contract of tests/sim/README.md) and its tools."""

    def __init__(self, root):
        self.root = str(root)
        self.write(state.HARDWARE_FILE, json.dumps(state.make_hardware('gpu-01', 'h100-sxm-8')))
        self.write(state.FAULTS_FILE, '{}')
        self.kernel(KERNEL)

    def path(self, relative):
        return os.path.join(self.root, relative)

    def write(self, relative, text):
        os.makedirs(os.path.dirname(self.path(relative)), exist_ok=True)
        with open(self.path(relative), 'w', encoding='utf-8') as handle:
            handle.write(text)

    def read(self, relative):
        with open(self.path(relative), encoding='utf-8') as handle:
            return handle.read()

    def exists(self, relative):
        return os.path.lexists(self.path(relative))

    def kernel(self, release):
        self.write('boot/vmlinuz-%s' % release, 'kernel\n')
        self.write('lib/modules/%s/modules.order' % release, '')

    def env(self, **extra):
        env = dict(os.environ, PYTHONPATH=SIM_NODE)
        env[state.ROOT_ENV] = self.root
        env[state.NO_SYSTEMCTL_ENV] = '1'
        for name in (state.PACKAGE_ENV, runfile.VERSION_ENV, runfile.PROGRAM_ENV):
            env.pop(name, None)
        env.update(extra)
        return env

    def run(self, tool, *args, **extra):
        return subprocess.run([sys.executable, '-m', 'gpufleet_sim.' + tool] + list(args), env=self.env(**extra),
                              capture_output=True, text=True, timeout=60, check=False)

    def boot(self):
        assert self.run('boot').returncode == 0
        return json.loads(self.read(state.BOOT_FILE))

    def files(self):
        """Every file and link under the root, relative, without the simulation's own state."""
        found = []
        for folder, _dirs, names in os.walk(self.root):
            for name in names:
                relative = os.path.relpath(os.path.join(folder, name), self.root)
                if not relative.startswith(('run/', 'etc/gpufleet-sim/', 'proc/', 'dev/', 'usr/local/sbin/')):
                    found.append(relative)
        return sorted(found)

    def install_runfile(self, version=DRIVER, *options, **extra):
        return self.run('runfile', '--silent', *options, **dict({runfile.VERSION_ENV: version, runfile.PROGRAM_ENV: './nvidia-installer'},
                                                                **extra))

    def package(self, name, version):
        self.write(os.path.join(state.VERSIONS_DIR, name), version + '\n')


@pytest.fixture
def node(tmp_path):
    node = Node(tmp_path / 'node')
    node.boot()             # no driver: the node booted KERNEL without a module
    return node


# --------------------------------------------------------------------------- the runfile installer

def test_nvidia_crc_is_crc32_mpeg2():
    # crc.c: MSB first, polynomial 0x04C11DB7, start ~0, no final xor (the CRC-32/MPEG-2 check value); 0 for an empty file.
    assert runfile.crc(b'123456789') == 0x0376E6E7
    assert runfile.crc(b'') == 0


def test_installer_log_follows_log_init(node):
    process = node.install_runfile(DRIVER, '--kernel-module-type=open', PATH='/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin')
    assert process.returncode == 0, process.stderr
    lines = node.read(runfile.INSTALLER_LOG).splitlines()
    # log.c log_init(): the file, ctime(3) (no extra blank line: its newline ends the line), the version, PATH, the command line.
    assert lines[0] == "nvidia-installer log file '/var/log/nvidia-installer.log'"
    assert re.match(r'^creation time: (Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 123][0-9] '
                    r'[0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}$', lines[1]), lines[1]
    assert lines[2:10] == ['installer version: 580.65.06', '', 'PATH: /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', '',
                           'nvidia-installer command line:', '    ./nvidia-installer', '    --silent', '    --kernel-module-type=open']
    assert lines[10:12] == ['', 'Using built-in stream user interface']
    assert re.match(r'^-> Detected [0-9]+ CPUs online; setting concurrency level to [0-9]+\.$', lines[12])
    assert '-> Installing NVIDIA driver version 580.65.06.' in lines
    assert "-> Kernel source path: '/lib/modules/%s/source'" % KERNEL in lines
    assert lines[-1] == ('-> Installation of the NVIDIA Accelerated Graphics Driver for Linux-x86_64 (version: 580.65.06) is now complete.  '
                         'Please update your xorg.conf file as appropriate; see the file /usr/share/doc/NVIDIA_GLX-1.0/README.txt for details.')
    assert all(line == '' or line.startswith(('-> ', 'WARNING: ', 'ERROR: ', 'nvidia-installer', 'creation', 'installer', 'PATH',
                                              'Using', '    ')) for line in lines)


def test_runfile_install_places_the_runfile_layout(node):
    before = node.files()
    assert node.install_runfile(DRIVER, '--kernel-module-type=open').returncode == 0
    added = sorted(set(node.files()) - set(before))
    assert added == sorted(RUNFILE_FILES + ['var/log/nvidia-installer.log', 'var/lib/nvidia/log', 'var/lib/nvidia/dirs'])
    assert os.readlink(node.path('usr/bin/nvidia-uninstall')) == 'nvidia-installer'
    assert os.readlink(node.path(state.NVML_LINK)) == 'libnvidia-ml.so.580.65.06'
    assert node.read(MODULE_FILES[0]) == '580.65.06 open\n'
    # backup.c's record: the backwards-compatible version, the description, "1: file" + CRC, "0: link" + target.
    record = node.read(runfile.BACKUP_LOG).splitlines()
    assert record[:4] == ['1.0-5806506 (580.65.06)', 'NVIDIA Accelerated Graphics Driver for Linux-x86_64', '1: /usr/bin/nvidia-smi',
                          str(runfile.crc(node.read('usr/bin/nvidia-smi').encode()))]
    assert '0: /usr/bin/nvidia-uninstall' in record and record[record.index('0: /usr/bin/nvidia-uninstall') + 1] == 'nvidia-installer'
    assert 'GPUFLEET_SIM_PACKAGE' not in node.read('usr/bin/nvidia-smi')   # no package owns the runfile's tools
    shown = json.loads(node.run('shapes', 'show').stdout)
    assert (shown['driver_source'], shown['runfile'], shown['driver_installed'], shown['driver_loaded']) == ('runfile', DRIVER, DRIVER, None)


def test_boot_loads_the_runfile_module_and_shows_the_open_banner(node):
    assert node.install_runfile(DRIVER, '--kernel-module-type=open').returncode == 0
    record = node.boot()
    assert (record['driver'], record['open'], record['module_source']) == (DRIVER, True, 'runfile')
    assert record['module'] == '/lib/modules/%s/kernel/drivers/video/nvidia.ko' % KERNEL
    banner = node.read(state.PROC_DRIVER_VERSION)
    assert banner.startswith('NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (root@gpu-01)  ')
    process = node.run('nvidia_smi', '-q', '-x')
    assert process.returncode == 0, process.stdout
    assert _nvidia_smi.parse_xml(process.stdout)['driver_version'] == DRIVER
    # A kernel the runfile did not build for boots without a driver (no DKMS), as on metal.
    node.kernel(NEWER)
    assert node.boot()['driver'] is None


def test_installer_default_module_type_and_proprietary_banner(node):
    assert node.install_runfile(OLD).returncode == 0
    assert '(Answer: NVIDIA Proprietary)' in node.read(runfile.INSTALLER_LOG)
    assert node.boot()['open'] is False
    assert node.read(state.PROC_DRIVER_VERSION).startswith('NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  ')
    # 560 and newer: the open module by default; over the loaded 550 driver only when allowed.
    assert node.install_runfile(DRIVER, '--allow-installation-with-running-driver').returncode == 0
    assert 'There appears to already be a driver installed on your system (version: 550.127.05).' in node.read(runfile.INSTALLER_LOG)
    assert '(Answer: MIT/GPL)' in node.read(runfile.INSTALLER_LOG)


def test_installer_refuses_a_packaged_driver_and_a_loaded_module(node):
    node.package('libnvidia-compute-550', OLD)
    failed = node.install_runfile(DRIVER)
    assert failed.returncode == 1 and 'Installation has failed' in failed.stderr
    assert 'WARNING: The NVIDIA driver appears to have been installed previously using a different installer.' in node.read(runfile.INSTALLER_LOG)
    assert not node.exists('usr/bin/nvidia-uninstall')
    os.unlink(node.path(os.path.join(state.VERSIONS_DIR, 'libnvidia-compute-550')))
    node.write(state.module_path(KERNEL), OLD + '\n')
    assert node.boot()['driver'] == OLD
    assert node.install_runfile(DRIVER).returncode == 1
    assert "(Answer: Abort installation)" in node.read(runfile.INSTALLER_LOG)
    allowed = node.install_runfile(DRIVER, '--allow-installation-with-running-driver')
    assert allowed.returncode == 0
    tail = node.read(runfile.INSTALLER_LOG).splitlines()[-5:]
    assert tail[0].startswith('WARNING: It is strongly recommended that you reboot') and tail[2] == (
        '  * Existing NVIDIA kernel modules were loaded during installation, and are likely still loaded.')
    assert node.boot()['module_source'] == 'dkms'    # depmod's order: a DKMS build in updates/ wins over kernel/drivers/video


def test_nvidia_uninstall_removes_exactly_what_was_installed(node):
    before = node.files()
    assert node.install_runfile(DRIVER).returncode == 0
    assert node.boot()['driver'] == DRIVER
    smi = node.read('usr/bin/nvidia-smi')
    for flag in ('--silent', '-s'):
        process = node.run('runfile', flag, GPUFLEET_SIM_PROG='/usr/bin/nvidia-uninstall')
        assert process.returncode == 0, process.stderr
        if flag == '--silent':
            # Everything it installed is gone; its install log stays and the uninstall log is new, as on metal.
            assert sorted(set(node.files()) - set(before)) == ['var/log/nvidia-installer.log', 'var/log/nvidia-uninstall.log']
            assert sorted(set(before) - set(node.files())) == []
            assert not os.path.isdir(node.path('lib/modules/%s/kernel' % KERNEL))
            assert node.install_runfile(DRIVER).returncode == 1        # the module is still loaded
            assert node.install_runfile(DRIVER, '--allow-installation-with-running-driver').returncode == 0
            node.write('usr/bin/nvidia-smi', smi + '# changed\n')   # a file someone replaced since
    log = node.read(runfile.UNINSTALL_LOG).splitlines()
    assert log[0] == "nvidia-installer log file '/var/log/nvidia-uninstall.log'" and log[2] == 'installer version: 580.65.06'
    assert log[6:9] == ['nvidia-installer command line:', '    /usr/bin/nvidia-uninstall', '    -s']
    assert '-> Uninstalling NVIDIA Accelerated Graphics Driver for Linux-x86_64 (1.0-5806506 (580.65.06)):' in log
    assert log[-1] == '-> Uninstallation of existing driver: NVIDIA Accelerated Graphics Driver for Linux-x86_64 (580.65.06) is complete.'
    assert any(line.startswith("-> The installed file '/usr/bin/nvidia-smi' has a different checksum (") for line in log)
    assert node.files() == sorted(before + ['usr/bin/nvidia-smi', 'var/log/nvidia-installer.log', 'var/log/nvidia-uninstall.log'])
    # The loaded driver stays until the next boot; then there is none.
    assert json.loads(node.read(state.BOOT_FILE))['driver'] == DRIVER
    assert node.boot()['driver'] is None
    again = node.run('runfile', '--silent', GPUFLEET_SIM_PROG='/usr/bin/nvidia-uninstall')
    assert again.returncode == 0 and '-> There is no NVIDIA driver currently installed.' in node.read(runfile.UNINSTALL_LOG)


def test_uninstall_then_packages_give_a_packaged_node(node):
    assert node.install_runfile(DRIVER).returncode == 0
    node.boot()
    assert node.run('runfile', '--silent', GPUFLEET_SIM_PROG='/usr/bin/nvidia-uninstall').returncode == 0
    # What libnvidia-compute-580 and nvidia-dkms-580 then install.
    node.write('usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%s' % DRIVER, DRIVER + '\n')
    os.symlink('libnvidia-ml.so.%s' % DRIVER, node.path(state.NVML_LINK))
    node.package('libnvidia-compute-580', DRIVER)
    node.write(state.module_path(KERNEL), DRIVER + '\n')
    record = node.boot()
    assert (record['driver'], record['module_source'], record['open']) == (DRIVER, 'dkms', False)
    assert json.loads(node.run('shapes', 'show').stdout)['driver_source'] == 'packaged'


# --------------------------------------------------------------------------- a driver tree no package owns

def test_driver_tree_loads_its_module_for_its_kernel_only(node):
    process = node.run('shapes', 'tree', 'install', DRIVER, '--open')
    assert process.returncode == 0, process.stderr
    assert node.read('usr/local/nvidia/version') == DRIVER + '\n' and node.read('usr/local/nvidia/kernel.release') == KERNEL + '\n'
    assert os.readlink(node.path(state.TREE_NVML_LINK)) == 'libnvidia-ml.so.%s' % DRIVER
    assert oct(os.stat(node.path('usr/local/nvidia/bin')).st_mode & 0o777) == '0o555'
    assert '/usr/local/nvidia/bin' in node.read('etc/environment')
    assert node.read('etc/systemd/system/nvidia-persistenced.service').count('ExecStart=/usr/local/nvidia/bin/nvidia-persistenced') == 1
    record = node.boot()
    assert (record['driver'], record['open'], record['module_source'], record['module']) == (DRIVER, True, 'tree',
                                                                                             '/usr/local/nvidia/modules/nvidia.ko')
    assert 'Open Kernel Module for x86_64  580.65.06' in node.read(state.PROC_DRIVER_VERSION)
    process = node.run('nvidia_smi', '--query-gpu=driver_version', '--format=csv,noheader')
    assert process.returncode == 0 and set(process.stdout.split()) == {DRIVER}
    # modprobe knows /lib/modules only: after an unload, the tree's module does not come back that way.
    assert node.run('modprobe', '-r', 'nvidia').returncode == 0
    failed = node.run('modprobe', 'nvidia')
    assert failed.returncode == 1 and 'not found in directory /lib/modules/%s' % KERNEL in failed.stderr
    node.kernel(NEWER)
    assert node.boot()['driver'] is None     # the tree was built for KERNEL
    shown = json.loads(node.run('shapes', 'show').stdout)
    assert (shown['driver_source'], shown['tree'], shown['packages']) == ('unowned', DRIVER, [])
    assert node.run('shapes', 'tree', 'remove').returncode == 0
    assert not node.exists('usr/local/nvidia') and not node.exists('etc/systemd/system/nvidia-persistenced.service')


# --------------------------------------------------------------------------- no systemctl, persistence per GPU

def test_systemctl_out_of_sight_and_back(node):
    node.write('usr/bin/systemctl', '#!/bin/sh\n')
    node.write('usr/bin/journalctl', '#!/bin/sh\n')
    os.makedirs(node.path('usr/sbin'))
    os.symlink('../bin/systemctl', node.path('usr/sbin/shutdown'))
    os.symlink('/bin/systemctl', node.path('usr/sbin/reboot'))
    assert node.run('shapes', 'systemd', 'hide').returncode == 0
    assert not node.exists('usr/bin/systemctl') and not node.exists('usr/bin/journalctl')
    assert node.exists('usr/libexec/gpufleet-sim/systemctl')
    assert os.readlink(node.path('usr/sbin/shutdown')) == '/usr/libexec/gpufleet-sim/systemctl'
    assert json.loads(node.run('shapes', 'show').stdout)['systemctl_hidden'] is True
    assert node.run('shapes', 'systemd', 'hide').returncode == 0      # idempotent
    assert node.run('shapes', 'systemd', 'restore').returncode == 0
    assert node.exists('usr/bin/systemctl') and os.readlink(node.path('usr/sbin/shutdown')) == '../bin/systemctl'
    assert os.readlink(node.path('usr/sbin/reboot')) == '/bin/systemctl'
    assert json.loads(node.run('shapes', 'show').stdout)['systemctl_hidden'] is False


def test_persistence_mode_per_gpu_follows_the_daemon_and_nvidia_smi(node):
    require_root('nvidia-smi -pm needs root')
    assert node.run('shapes', 'tree', 'install', DRIVER).returncode == 0
    node.boot()
    node.write(state.PERSISTENCED_PID, '1\n')      # nvidia-persistenced runs (the tools look at its pid file)
    assert node.run('nvidia_smi', '-i', '2', '-pm', '0').returncode == 0
    modes = node.run('nvidia_smi', '--query-gpu=index,persistence_mode', '--format=csv,noheader').stdout.splitlines()
    assert modes[1:4] == ['1, Enabled', '2, Disabled', '3, Enabled']
    parsed = _nvidia_smi.parse_xml(node.run('nvidia_smi', '-q', '-x').stdout)
    assert [gpu['persistence_mode'] for gpu in parsed['gpus']][:3] == ['Enabled', 'Enabled', 'Disabled']


# --------------------------------------------------------------------------- fleet shape's plan

PACKAGED = {'driver_source': 'packaged', 'driver_installed': OLD, 'driver_loaded': OLD, 'open_loaded': False, 'runfile': None,
            'tree': None, 'systemctl_hidden': False}


def test_plan_is_empty_for_a_node_in_shape():
    assert fleet_shapes.plan(PACKAGED, 'packaged', OLD, False, ['libnvidia-compute-550']) == []
    assert fleet_shapes.plan(PACKAGED, 'systemd', None, False) == []
    runfile_node = dict(PACKAGED, driver_source='runfile', runfile=DRIVER, driver_installed=DRIVER, driver_loaded=DRIVER, open_loaded=True)
    assert fleet_shapes.plan(runfile_node, 'runfile', DRIVER, True) == []
    assert fleet_shapes.plan(runfile_node, 'runfile', DRIVER, False)[-1] == ('reboot',)


def test_plan_from_packaged_to_runfile_and_unowned():
    packages = ['libnvidia-compute-550', 'nvidia-driver-550-server']
    # (the package's persistenced unit goes with its package; the runfile node gets the sample unit an operator installs)
    assert fleet_shapes.plan(PACKAGED, 'runfile', DRIVER, True, packages) == [
        ('purge', packages), ('unload',), ('runfile', DRIVER, True), ('persistenced', 'install'), ('reboot',)]
    assert fleet_shapes.plan(PACKAGED, 'unowned', DRIVER, False, packages) == [
        ('persistenced', 'remove'), ('purge', packages), ('tree', 'install', DRIVER, False), ('reboot',)]
    assert fleet_shapes.plan(PACKAGED, 'no-systemd', None, False) == [('systemd', 'hide')]


def test_plan_back_to_packaged():
    runfile_node = dict(PACKAGED, driver_source='runfile', runfile=DRIVER, systemctl_hidden=True)
    assert fleet_shapes.plan(runfile_node, 'packaged', DRIVER, True) == [
        ('systemd', 'restore'), ('uninstall',), ('persistenced', 'remove'), ('packages', DRIVER, True), ('reboot',)]
    tree_node = dict(PACKAGED, driver_source='unowned', tree=DRIVER)
    assert fleet_shapes.plan(tree_node, 'packaged', OLD, False) == [
        ('persistenced', 'remove'), ('tree', 'remove'), ('packages', OLD, False), ('reboot',)]


def test_shape_versions_and_packages():
    assert fleet_shapes.wanted_version(PACKAGED, None, '550.127.05') == OLD
    assert fleet_shapes.wanted_version({}, None, '550.127.05') == '550.127.05'
    with pytest.raises(fleet_shapes.ShapeError):
        fleet_shapes.wanted_version(PACKAGED, '580', None)
    arguments, names = fleet_shapes.package_arguments(DRIVER, True)
    assert arguments[0] == 'nvidia-driver-580-open=580.65.06-0ubuntu1' and 'nvidia-dkms-580-open' in names
    with pytest.raises(fleet_shapes.ShapeError):
        fleet_shapes.package_arguments('580.159.04', False)
    with pytest.raises(fleet_shapes.ShapeError):
        fleet_shapes.plan(PACKAGED, 'square', None, False)
