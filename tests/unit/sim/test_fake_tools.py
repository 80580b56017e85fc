# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fake NVIDIA tools of the simulated fleet (tests/sim/node/gpufleet_sim), read back with the collection's parsers.

Every test builds a node root in a temporary folder (the node contract of tests/sim/README.md) and runs the
tools as the nodes do, ``python3 -m gpufleet_sim.<tool>``, with ``GPUFLEET_SIM_ROOT`` pointing at it.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _dcgm, _nvidia_smi, _packages
from ansible_collections.gpufleet.lifecycle.tests.needs import require_root
from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import read_real_output

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SIM_NODE = os.path.join(REPO, 'tests', 'sim', 'node')
if SIM_NODE not in sys.path:
    sys.path.insert(0, SIM_NODE)

from gpufleet_sim import dcgmi as fake_dcgmi  # noqa: E402  pylint: disable=wrong-import-position
from gpufleet_sim import state  # noqa: E402  pylint: disable=wrong-import-position

KERNEL = '6.1.0-26-amd64'
DRIVER = '550.127.05'


def _real(*parts):
    return read_real_output(*parts)


class Node(object):
    """A simulated node root in a folder, and a way to run its tools."""

    def __init__(self, root, profile='h100-sxm-8', name='gpu-01'):
        self.root = str(root)
        self.hardware = state.make_hardware(name, profile)
        self.write_json(state.HARDWARE_FILE, self.hardware)
        self.write_json(state.FAULTS_FILE, {})

    def path(self, relative):
        return os.path.join(self.root, relative)

    def write(self, relative, text):
        target = self.path(relative)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, 'w', encoding='utf-8') as handle:
            handle.write(text)

    def write_json(self, relative, data):
        self.write(relative, json.dumps(data))

    def read(self, relative):
        with open(self.path(relative), encoding='utf-8') as handle:
            return handle.read()

    def exists(self, relative):
        return os.path.exists(self.path(relative))

    def package(self, name, version):
        self.write(os.path.join(state.VERSIONS_DIR, name), version + '\n')

    def install_nvml(self, version):
        """What libnvidia-compute-<branch> installs: the library and the .so.1 link to it."""
        folder = self.path('usr/lib/x86_64-linux-gnu')
        os.makedirs(folder, exist_ok=True)
        self.write('usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%s' % version, '')
        link = self.path(state.NVML_LINK)
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink('libnvidia-ml.so.%s' % version, link)
        self.package('libnvidia-compute-%d' % state.branch_of(version), version)

    def boot_json(self, driver=DRIVER, kernel=KERNEL, is_open=False):
        self.write_json(state.BOOT_FILE, {'kernel': kernel, 'driver': driver, 'open': is_open, 'boot_id': 'test', 'booted_at': 0})

    def healthy(self, driver=DRIVER):
        """Driver installed and loaded, kernel with module, DCGM 4 and the other packages installed."""
        self.install_nvml(driver)
        self.kernel(KERNEL)
        self.write(state.module_path(KERNEL), driver + '\n')
        self.boot_json(driver)
        return self

    def kernel(self, release, image=True):
        os.makedirs(self.path(os.path.join(state.MODULES_DIR, release)), exist_ok=True)
        if image:
            self.write('boot/vmlinuz-%s' % release, 'kernel\n')

    def dkms_source(self, version, is_open=False):
        self.write('usr/src/nvidia-%s/dkms.conf' % version,
                   'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="%s"\nOPEN=%s\n' % (version, 'yes' if is_open else 'no'))

    def faults(self, data):
        self.write_json(state.FAULTS_FILE, data)

    def env(self, package=None, **extra):
        env = dict(os.environ)
        env[state.ROOT_ENV] = self.root
        env['PYTHONPATH'] = SIM_NODE
        env[state.NO_SYSTEMCTL_ENV] = '1'
        env.pop(state.PACKAGE_ENV, None)
        if package:
            env[state.PACKAGE_ENV] = package
        env.update(extra)
        return env

    def run(self, tool, *args, **kwargs):
        package = kwargs.pop('package', None)
        return subprocess.run([sys.executable, '-m', 'gpufleet_sim.' + tool] + list(args), env=self.env(package),
                              capture_output=True, text=True, timeout=60, check=False)

    def start(self, tool, *args, **kwargs):
        package = kwargs.pop('package', None)
        return subprocess.Popen([sys.executable, '-m', 'gpufleet_sim.' + tool] + list(args), env=self.env(package),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait_for(self, relative, present=True, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.exists(relative) == present:
                return True
            time.sleep(0.05)
        return False

    def smi_xml(self, *args):
        process = self.run('nvidia_smi', '-q', '-x', *args)
        return process, (_nvidia_smi.parse_xml(process.stdout) if process.returncode in (0, 15) else None)


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path / 'node').healthy()


def _stop(process):
    process.send_signal(signal.SIGTERM)
    return process.communicate(timeout=20)


# --------------------------------------------------------------------------- hardware and versions

def test_make_hardware_profiles():
    h100 = state.make_hardware('gpu-01', 'h100-sxm-8')
    assert h100 == state.make_hardware('gpu-01', 'h100-sxm-8')
    assert h100['node'] == 'gpu-01' and h100['profile'] == 'h100-sxm-8' and h100['nvswitch_count'] == 4
    assert [gpu['pci_bus_id'] for gpu in h100['gpus']] == ['00000000:%s:00.0' % bus for bus in
                                                           ('18', '2A', '3A', '5D', '9A', 'AB', 'BA', 'DB')]
    gpu = h100['gpus'][0]
    assert set(gpu) == {'model', 'uuid', 'serial', 'pci_bus_id', 'pci_device_id', 'vbios', 'board_part_number', 'memory_mib',
                        'architecture', 'power_limit_w'}
    assert (gpu['model'], gpu['architecture'], gpu['vbios'], gpu['board_part_number'], gpu['memory_mib'], gpu['power_limit_w']) == (
        'NVIDIA H100 80GB HBM3', 'Hopper', '96.00.99.00.01', '692-2G520-0200-000', 81559, 700)
    assert re.match(r'^GPU-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$', gpu['uuid'])
    assert all(re.match(r'^[0-9]{13}$', item['serial']) for item in h100['gpus'])
    assert len({item['uuid'] for item in h100['gpus']}) == 8
    other = state.make_hardware('gpu-02', 'h100-sxm-8')
    assert not {item['uuid'] for item in h100['gpus']} & {item['uuid'] for item in other['gpus']}
    a100 = state.make_hardware('gpu-01', 'a100-sxm-8')
    assert (a100['nvswitch_count'], a100['gpus'][0]['model'], a100['gpus'][0]['vbios']) == (6, 'NVIDIA A100-SXM4-80GB', '92.00.45.00.03')
    l40s = state.make_hardware('gpu-01', 'l40s-pcie-4')
    assert (l40s['nvswitch_count'], len(l40s['gpus']), l40s['gpus'][0]['architecture']) == (0, 4, 'Ada Lovelace')
    assert len(state.make_hardware('gpu-01', 'h100-sxm-8', gpu_count=2)['gpus']) == 2
    assert len(state.make_hardware('gpu-01', 'l40s-pcie-4', gpu_count=6)['gpus']) == 6
    with pytest.raises(ValueError):
        state.make_hardware('gpu-01', 'b200-sxm-8')


@pytest.mark.parametrize('left, right, expected', [
    ('6.1.0-9-amd64', '6.1.0-26-amd64', -1),
    ('6.1.0-26-amd64', '6.1.0-26-amd64', 0),
    ('6.12.0-1-amd64', '6.1.0-26-amd64', 1),
    ('1.0~rc1', '1.0', -1),
    ('1:1.0', '2.0', 1),
    ('550.127.05', '550.54.15', 1),
    ('1.0-1', '1.0-1+b1', -1),
    ('1.0a', '1.0+', -1),
])
def test_dpkg_compare(left, right, expected):
    result = state.dpkg_compare(left, right)
    assert (result > 0) - (result < 0) == expected


def test_cuda_version_by_branch():
    assert [state.cuda_version_for(version) for version in ('535.247.01', '550.127.05', '570.172.08', '580.65.06', '999.1')] == [
        '12.2', '12.4', '12.8', '13.0', None]


# --------------------------------------------------------------------------- nvidia-smi

@pytest.mark.parametrize('profile', ['h100-sxm-8', 'a100-sxm-8', 'l40s-pcie-4'])
@pytest.mark.parametrize('driver, cuda', [('535.247.01', '12.2'), ('550.127.05', '12.4'), ('570.172.08', '12.8'),
                                          ('580.65.06', '13.0'), ('590.44.01', '13.1')])
def test_xml_gives_back_the_hardware(tmp_path, profile, driver, cuda):
    node = Node(tmp_path / 'node', profile=profile).healthy(driver)
    process, parsed = node.smi_xml()
    assert process.returncode == 0, process.stdout + process.stderr
    assert (parsed['driver_version'], parsed['cuda_driver_version'], parsed['attached_gpus']) == (driver, cuda, len(node.hardware['gpus']))
    assert parsed['gpu_count'] == len(node.hardware['gpus'])
    hopper_or_ampere = profile != 'l40s-pcie-4'
    for index, (gpu, hardware) in enumerate(zip(parsed['gpus'], node.hardware['gpus'])):
        assert (gpu['index'], gpu['minor_number']) == (index, index)
        assert gpu['uuid'] == hardware['uuid']
        assert gpu['serial'] == hardware['serial']
        assert gpu['vbios_version'] == hardware['vbios']
        assert gpu['pci_bus_id'] == gpu['id'] == hardware['pci_bus_id']
        assert gpu['pci_device_id'] == hardware['pci_device_id']
        assert gpu['name'] == hardware['model']
        assert gpu['architecture'] == hardware['architecture']
        assert gpu['board_part_number'] == hardware['board_part_number']
        assert gpu['memory_total_mib'] == hardware['memory_mib']
        assert gpu['power_limit_w'] == float(hardware['power_limit_w'])
        assert gpu['gsp_firmware_version'] == (driver if hopper_or_ampere else None)
        assert gpu['persistence_mode'] == 'Disabled'
        assert gpu['mig_device_count'] == 0
        assert gpu['ecc_mode'] == {'current': 'Enabled', 'pending': 'Enabled'}
        assert gpu['ecc_errors']['aggregate'] == {'corrected': 0, 'uncorrected': 0}
        assert gpu['remapped_rows'] == {'correctable': 0, 'uncorrectable': 0, 'pending': False, 'failure': False}
        # Fabric registration exists on Hopper NVSwitch systems; Fabric Manager is not running here.
        assert gpu['fabric']['state'] == ('In Progress' if profile == 'h100-sxm-8' else None)
        assert gpu['fabric']['status'] is None


def test_xml_layout_follows_the_real_dtd_versions(tmp_path):
    v12 = Node(tmp_path / 'a').healthy('550.127.05').run('nvidia_smi', '-q', '-x').stdout
    real_v12 = _real('nvidia-smi-xml', 'telegraf_a100-sxm4-80gb_535.54.03_v12.xml')
    assert v12.splitlines()[:3] == real_v12.splitlines()[:3]
    assert '\n    <timestamp>' in v12 and '\t' not in v12
    tags = re.findall(r'^ {8}<([a-z_]+)[ >]', v12, re.MULTILINE)
    real_tags = re.findall(r'^ {8}<([a-z_]+)[ >]', real_v12, re.MULTILINE)
    assert tags[:len(real_tags)] == real_tags
    v13 = Node(tmp_path / 'b').healthy('590.44.01').run('nvidia_smi', '-q', '-x').stdout
    real_v13 = _real('nvidia-smi-xml', 'telegraf_dual-rtx-2070_590.44.01_v13.xml')
    assert v13.splitlines()[:3] == real_v13.splitlines()[:3]
    first_gpu = re.compile(r'^\t\t<([A-Za-z_]+)[ >]', re.MULTILINE)
    real_gpu = real_v13.split('\t</gpu>')[0]
    assert first_gpu.findall(v13.split('\t</gpu>')[0]) == first_gpu.findall(real_gpu)


def test_fabric_and_persistence_follow_the_daemons(node):
    node.package('nvidia-fabricmanager-550', DRIVER)
    node.package('nvidia-compute-utils-550', DRIVER)
    fabricmanager = node.start('nv_fabricmanager', '-c', '/usr/share/nvidia/nvswitch/fabricmanager.cfg', package='nvidia-fabricmanager-550')
    persistenced = node.start('nvidia_persistenced', '--user', 'nvidia-persistenced', package='nvidia-compute-utils-550')
    try:
        assert node.wait_for(state.FABRICMANAGER_PID) and node.wait_for(state.PERSISTENCED_PID)
        _process, parsed = node.smi_xml()
        for gpu in parsed['gpus']:
            assert gpu['persistence_mode'] == 'Enabled'
            assert (gpu['fabric']['state'], gpu['fabric']['status'], gpu['fabric']['clique_id']) == ('Completed', 'Success', '0')
    finally:
        out, _err = _stop(fabricmanager)
        _stop(persistenced)
    assert fabricmanager.returncode == 0 and 'Successfully configured all the available NVSwitches' in out
    assert not node.exists(state.FABRICMANAGER_PID) and not node.exists(state.PERSISTENCED_PID)
    _process, parsed = node.smi_xml()
    assert {(gpu['persistence_mode'], gpu['fabric']['state']) for gpu in parsed['gpus']} == {('Disabled', 'In Progress')}


def test_newer_nvml_without_reboot_is_a_version_mismatch(node):
    node.install_nvml('570.124.04')  # the driver package upgrade; boot.json still says 550.127.05
    process = node.run('nvidia_smi', '-q', '-x')
    assert process.returncode == 18
    assert process.stdout == _real('errors', 'nvml-mismatch_570.124_tinygrad-ogkm-issue47.txt').rstrip('\n') + '\n'
    failure = _nvidia_smi.classify_failure(process.returncode, process.stdout, process.stderr)
    assert failure['reason'] == 'driver_library_mismatch'
    assert failure['nvml_library_version'] == '570.124'
    for args in (['-L'], ['--query-gpu=uuid', '--format=csv'], ['-q'], []):
        assert node.run('nvidia_smi', *args).returncode == 18


def test_no_driver_loaded(node):
    node.boot_json(driver=None)
    process = node.run('nvidia_smi', '-q', '-x')
    assert process.returncode == 9
    assert process.stdout == _real('errors', 'nvidia-smi-couldnt-communicate_shine-cluster-issue50.txt').rstrip('\n') + '\n'
    assert _nvidia_smi.classify_failure(process.returncode, process.stdout, process.stderr)['reason'] == 'driver_unreachable'
    os.unlink(node.path(state.BOOT_FILE))  # before the boot step ran: nothing loaded either
    assert node.run('nvidia_smi').returncode == 9


def test_no_nvml_library(node):
    os.unlink(node.path(state.NVML_LINK))
    process = node.run('nvidia_smi', '-L')
    assert process.returncode == 12 and "couldn't find libnvidia-ml.so library" in process.stdout


def test_xid_79_loses_the_gpu(node):
    node.faults({'xid': {'gpu': 2, 'xid': 79}})
    process, parsed = node.smi_xml()
    assert process.returncode == 15
    assert process.stderr == 'Unable to determine the device handle for GPU0000:3A:00.0: Unknown Error\n'
    assert parsed['attached_gpus'] == 8 and parsed['gpu_count'] == 7
    assert node.hardware['gpus'][2]['uuid'] not in [gpu['uuid'] for gpu in parsed['gpus']]
    failure = _nvidia_smi.classify_failure(process.returncode, '', process.stderr)
    assert failure['reason'] == 'gpu_lost'
    listing = node.run('nvidia_smi', '-L')
    assert listing.returncode == 15 and len(listing.stdout.splitlines()) == 7
    node.faults({'xid': {'gpu': 2, 'xid': 48}})  # other Xids leave the GPU on the bus
    assert node.smi_xml()[1]['gpu_count'] == 8


def test_csv_query_in_the_real_header_style(node):
    fields = 'index,name,uuid,serial,driver_version,vbios_version,pci.bus_id,memory.total,persistence_mode,temperature.gpu,count'
    process = node.run('nvidia_smi', '--query-gpu=' + fields, '--format=csv')
    assert process.returncode == 0
    lines = process.stdout.splitlines()
    assert lines[0] == ('index, name, uuid, serial, driver_version, vbios_version, pci.bus_id, memory.total [MiB], '
                        'persistence_mode, temperature.gpu, count')
    assert len(lines) == 9
    gpu = node.hardware['gpus'][3]
    values = lines[4].split(', ')
    assert values[:8] == ['3', gpu['model'], gpu['uuid'], gpu['serial'], DRIVER, gpu['vbios'], gpu['pci_bus_id'], '81559 MiB']
    assert values[8] == 'Disabled' and re.match(r'^[0-9]+$', values[9]) and values[10] == '8'
    # Header names and units exactly as in the real captures (nvgpuexp H200 580.173.02, netdata P100 query-gpu).
    process = node.run('nvidia_smi', '--query-gpu=memory.total,memory.used,fan.speed,power.draw,power.limit,utilization.gpu,'
                       'clocks.current.graphics,temperature.gpu,pstate', '--format=csv')
    assert process.stdout.splitlines()[0] == ('memory.total [MiB], memory.used [MiB], fan.speed [%], power.draw [W], power.limit [W], '
                                              'utilization.gpu [%], clocks.current.graphics [MHz], temperature.gpu, pstate')
    assert re.match(r'^81559 MiB, 1 MiB, \[N/A\], [0-9.]+ W, 700\.00 W, 0 %, [0-9]+ MHz, [0-9]+, P0$', process.stdout.splitlines()[1])
    bare = node.run('nvidia_smi', '--query-gpu=memory.total,power.limit,fan.speed', '--format=csv,noheader,nounits', '-i', '0')
    assert bare.stdout == '81559, 700.00, [N/A]\n'


def test_csv_unknown_field(node):
    process = node.run('nvidia_smi', '--query-gpu=index,x', '--format=csv')
    assert process.returncode == 2
    assert process.stdout.splitlines()[0] == 'Field "x" is not a valid field to query.'


def test_list_and_id_filter(node):
    gpus = node.hardware['gpus']
    listing = node.run('nvidia_smi', '-L').stdout.splitlines()
    assert listing[1] == 'GPU 1: NVIDIA H100 80GB HBM3 (UUID: %s)' % gpus[1]['uuid']
    for selector in ('5', gpus[5]['uuid'], gpus[5]['pci_bus_id']):
        process, parsed = node.smi_xml('-i', selector)
        assert parsed['attached_gpus'] == 8 and [gpu['uuid'] for gpu in parsed['gpus']] == [gpus[5]['uuid']]
    _process, parsed = node.smi_xml('-i', '1,3')
    assert [gpu['pci_bus_id'] for gpu in parsed['gpus']] == [gpus[1]['pci_bus_id'], gpus[3]['pci_bus_id']]
    missing = node.run('nvidia_smi', '-q', '-x', '-i', '8')
    assert (missing.returncode, missing.stdout) == (6, 'No devices were found\n')
    assert _nvidia_smi.classify_failure(6, missing.stdout, '')['reason'] == 'no_devices'
    assert node.run('nvidia_smi', '--bogus').returncode == 2


def test_text_report_label_columns(tmp_path):
    text = Node(tmp_path / 'a').healthy('565.57.01').run('nvidia_smi', '-q').stdout
    real = [line for line in _real_q_565_head() if line]
    ours = text.splitlines()
    assert ours[:3] == ['', '==============NVSMI LOG==============', '']
    assert [line.split(':')[0] for line in ours[3:11] if line] == [line.split(':')[0] for line in real[1:]]
    assert 'Serial Number                         : ' in text and '    Fabric\n        State                             : In Progress' in text
    wide = Node(tmp_path / 'b').healthy('580.65.06').run('nvidia_smi', '-q').stdout
    assert 'Driver Version                                         : 580.65.06\n' in wide


def _real_q_565_head():
    # The first lines of the real 565.57.01 HGX H100 report (thamada/nvidia-smi capture, 38-column labels).
    return ['', '==============NVSMI LOG==============', '',
            'Timestamp                                 : Thu Nov 14 07:00:14 2024',
            'Driver Version                            : 565.57.01',
            'CUDA Version                              : 12.7', '',
            'Attached GPUs                             : 8',
            'GPU 00000000:18:00.0',
            '    Product Name                          : NVIDIA H100 80GB HBM3',
            '    Product Brand                         : NVIDIA']


def test_legacy_persistence_mode_per_gpu(node):
    require_root('nvidia-smi -pm needs root')
    process = node.run('nvidia_smi', '-pm', '1', '-i', '0')
    assert process.stdout == 'Enabled persistence mode for GPU 00000000:18:00.0.\nAll done.\n'
    modes = node.run('nvidia_smi', '--query-gpu=persistence_mode', '--format=csv,noheader').stdout.split()
    assert modes == ['Enabled'] + ['Disabled'] * 7
    node.run('boot')  # a reboot forgets it
    assert set(node.run('nvidia_smi', '--query-gpu=persistence_mode', '--format=csv,noheader').stdout.split()) == {'Disabled'}


def test_default_table(node):
    lines = node.run('nvidia_smi').stdout.splitlines()
    assert lines[2] == '| NVIDIA-SMI 550.127.05             Driver Version: 550.127.05     CUDA Version: 12.4     |'
    assert all(len(line) == 91 for line in lines[1:] if line.strip())


# --------------------------------------------------------------------------- dcgmi

DCGM = {'3': ('datacenter-gpu-manager', '3.3.9'), '4': ('datacenter-gpu-manager-4-core', '4.2.3')}


def _install_dcgm(node, major):
    package, version = DCGM[major]
    node.package(package, version)
    return version


@pytest.mark.parametrize('major', ['3', '4'])
def test_diag_passes_without_faults(node, major):
    version = _install_dcgm(node, major)
    process = node.run('dcgmi', 'diag', '-r', '3', '-j')
    assert process.returncode == 0, process.stdout + process.stderr
    parsed = _dcgm.parse_diag_json(process.stdout)
    assert (parsed['schema'], parsed['dcgm_version'], parsed['driver_version'], parsed['passed']) == (major, version, DRIVER, True)
    assert parsed['failures'] == []
    assert [entity['serial'] for entity in parsed['entities']] == [gpu['serial'] for gpu in node.hardware['gpus']]
    assert {entity['device_id'] for entity in parsed['entities']} == {'2330'}


@pytest.mark.parametrize('major', ['3', '4'])
@pytest.mark.parametrize('fault, run, expected_test, rc', [
    ({'level': 2, 'test': 'memory', 'gpu': 3}, '3', {'3': 'GPU Memory', '4': 'memory'}, 205),
    ({'level': 3, 'test': 'targeted_power', 'gpu': 0}, '3', {'3': 'Targeted Power', '4': 'targeted_power'}, 226),
    ({'level': 1, 'test': 'software', 'gpu': 1}, '1', {'3': 'Persistence Mode', '4': 'software'}, 226),
    ({'level': 2, 'test': 'pcie', 'gpu': 7}, 'pcie', {'3': 'PCIe', '4': 'pcie'}, 226),
])
def test_diag_fail_fault_reports_exactly_that_failure(node, major, fault, run, expected_test, rc):
    _install_dcgm(node, major)
    node.faults({'diag_fail': fault})
    process = node.run('dcgmi', 'diag', '-r', run, '-j')
    assert process.returncode == rc
    parsed = _dcgm.parse_diag_json(process.stdout)
    assert parsed['passed'] is False and parsed['summary']['fail'] == 1
    assert len(parsed['failures']) == 1
    failure = parsed['failures'][0]
    assert failure['test'] == expected_test[major]
    assert failure['gpu'] == fault['gpu']
    assert 'GPU %d' % fault['gpu'] in failure['message']
    assert _dcgm.classify_failure(process.returncode, process.stdout, process.stderr)['reason'] == 'diag_failed'


@pytest.mark.parametrize('major', ['3', '4'])
def test_diag_fault_below_its_level_or_on_another_gpu_does_nothing(node, major):
    _install_dcgm(node, major)
    node.faults({'diag_fail': {'level': 3, 'test': 'memory', 'gpu': 2}})
    assert node.run('dcgmi', 'diag', '-r', '2', '-j').returncode == 0
    assert node.run('dcgmi', 'diag', '-r', '3', '-j', '-i', '0,1').returncode == 0
    assert node.run('dcgmi', 'diag', '-r', '3', '-j', '-i', '2').returncode == 205


@pytest.mark.parametrize('major, expected', [
    ('3', {1: ['Denylist', 'NVML Library', 'CUDA Main Library', 'Permissions and OS Blocks', 'Persistence Mode',
               'Environment Variables', 'Page Retirement/Row Remap', 'Graphics Processes', 'Inforom'],
           2: ['PCIe', 'GPU Memory'],
           3: ['PCIe', 'GPU Memory', 'Diagnostic', 'EUD Test', 'Targeted Stress', 'Targeted Power', 'Memory Bandwidth'],
           4: ['PCIe', 'GPU Memory', 'Diagnostic', 'Pulse Test', 'EUD Test', 'Targeted Stress', 'Targeted Power',
               'Memory Bandwidth', 'Memtest']}),
    ('4', {1: ['software'], 2: ['software', 'memory', 'pcie'],
           3: ['software', 'memory', 'diagnostic', 'nvbandwidth', 'pcie', 'memory_bandwidth', 'targeted_stress', 'targeted_power'],
           4: ['software', 'memory', 'diagnostic', 'nvbandwidth', 'memtest', 'pulse_test', 'pcie', 'memory_bandwidth',
               'targeted_stress', 'targeted_power']}),
])
def test_diag_levels(node, major, expected):
    _install_dcgm(node, major)
    for level, tests in expected.items():
        parsed = _dcgm.parse_diag_json(node.run('dcgmi', 'diag', '-r', str(level), '-j').stdout)
        names = [test['name'] for test in parsed['tests']]
        if major == '3' and level > 1:
            names = names[len(expected[1]):]
        assert names == tests


@pytest.mark.parametrize('major', ['3', '4'])
def test_diag_text_table(node, major):
    version = _install_dcgm(node, major)
    node.faults({'diag_fail': {'level': 2, 'test': 'memory', 'gpu': 1}})
    process = node.run('dcgmi', 'diag', '-r', '3')
    assert process.returncode == 205
    lines = process.stdout.splitlines()
    assert lines[0] == 'Successfully ran diagnostic for group.'
    real = _real('dcgmi', 'dcgmi-diag-r3_text_dcgm3.3.9_570.133.20_h200x8_ramble.txt').splitlines()
    assert lines[1:5] == real[1:5]
    assert all(len(line) == 78 for line in lines[1:])
    parsed = _dcgm.parse_diag_text(process.stdout)
    assert (parsed['schema'], parsed['dcgm_version'], parsed['driver_version']) == (major, version, DRIVER)
    assert [(failure['test'], failure['gpu']) for failure in parsed['failures']] == [
        ({'3': 'GPU Memory', '4': 'memory'}[major], 1)]
    assert 'memory mismatch was detected on GPU 1' in parsed['failures'][0]['message']


def test_diag_json_is_jsoncpp_styled():
    real = _real('dcgmi', 'dcgmi-diag-r1-json_dcgm4.2.3_580.82.09_gb10-dgx-spark_software-fail.json')
    assert fake_dcgmi.styled(json.loads(real)) == real + '\n'


@pytest.mark.parametrize('major', ['3', '4'])
def test_diag_needs_the_host_engine(node, major):
    _install_dcgm(node, major)
    node.install_nvml('570.124.04')
    process = node.run('dcgmi', 'diag', '-r', '1', '-j')
    assert process.returncode == 235
    failure = _dcgm.classify_failure(process.returncode, process.stdout, process.stderr)
    assert failure['reason'] == 'hostengine_unreachable'
    node.boot_json(driver=None)
    assert node.run('dcgmi', 'diag', '-r', '1').returncode == 235


def test_diag_on_a_lost_gpu(node):
    _install_dcgm(node, '4')
    node.faults({'xid': {'gpu': 0}})
    process = node.run('dcgmi', 'diag', '-r', '1', '-j')
    assert process.returncode == 238
    with pytest.raises(_dcgm.DcgmRuntimeError):
        _dcgm.parse_diag_json(process.stdout)


def test_diag_bad_arguments(node):
    _install_dcgm(node, '4')
    assert node.run('dcgmi', 'diag', '-r', '3', '-c', node.path('missing.yaml')).returncode == 255
    assert node.run('dcgmi', 'diag', '-r', '9').returncode == 255
    argv = _dcgm.build_diag_argv('dcgmi', 2, config=None, gpus=[0, 1], timeout=600, parameters={'memory.is_allowed': True})
    process = node.run('dcgmi', *argv[1:])
    assert process.returncode == 0 and _dcgm.parse_diag_json(process.stdout)['passed']


# --------------------------------------------------------------------------- version banners

@pytest.mark.parametrize('major', ['3', '4'])
def test_dcgmi_version_banner(node, major):
    version = _install_dcgm(node, major)
    parsed = _dcgm.parse_version_banner(node.run('dcgmi', '-v').stdout)
    assert (parsed['version'], parsed['hostengine_version'], parsed['branch_name']) == (
        version, version, 'rel_dcgm_%s' % '_'.join(version.split('.')[:2]))
    real = _real('dcgmi', 'dcgmi-v_3.3.1_hostengine-3.3.0_DCGM-issue139.txt')
    ours = node.run('dcgmi', '--version').stdout
    assert [line.split(' : ')[0] for line in ours.splitlines()] == [line.split(' : ')[0] for line in real.splitlines()]
    node.boot_json(driver=None)
    assert _dcgm.parse_version_banner(node.run('dcgmi', '-v').stdout)['hostengine'] is None


def test_container_toolkit_banners(node):
    node.package('nvidia-container-toolkit-base', '1.17.8')
    node.package('libnvidia-container-tools', '1.17.8')
    node.package('libnvidia-container1', '1.17.7')
    ctk = node.run('nvidia_ctk', '--version').stdout
    assert _packages.parse_nvidia_ctk_version(ctk) == '1.17.8'
    assert re.match(r'^NVIDIA Container Toolkit CLI version 1\.17\.8\ncommit: [0-9a-f]{40}\n$', ctk)
    cli = node.run('nvidia_container_cli', '-V').stdout
    assert _packages.parse_nvidia_container_cli_version(cli) == {'cli': '1.17.8', 'lib': '1.17.7'}
    real = _real('packages', 'nvidia-container-cli-V_1.0.7_nvidia-docker-issue1232.txt').splitlines()
    assert [line.split(':')[0] for line in cli.splitlines()[2:]] == [line.split(':')[0] for line in real[1:]]
    info = node.run('nvidia_container_cli', 'info')
    assert info.returncode == 0 and 'NVRM version:   550.127.05' in info.stdout
    node.install_nvml('570.124.04')
    info = node.run('nvidia_container_cli', 'info')
    assert (info.returncode, info.stderr) == (1, 'nvidia-container-cli: initialization error: nvml error: driver/library version mismatch\n')


def test_nvidia_ctk_configures_containerd(node):
    process = node.run('nvidia_ctk', 'runtime', 'configure', '--runtime=containerd', '--set-as-default')
    assert process.returncode == 0
    config = node.read('etc/containerd/config.toml')
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in config and 'default_runtime_name = "nvidia"' in config
    assert node.run('nvidia_ctk', 'runtime', 'configure', '--runtime=containerd').returncode == 0
    assert node.read('etc/containerd/config.toml').count('runtimes.nvidia]') == 1


def test_fabricmanager_and_nvcc_banners(node):
    node.package('nvidia-fabricmanager-550', DRIVER)
    node.package('cuda-toolkit-13-0', '13.0.88')
    fm = node.run('nv_fabricmanager', '--version', package='nvidia-fabricmanager-550').stdout
    assert fm == 'Fabric Manager version is : 550.127.05\n'
    assert _packages.parse_fabricmanager_version(fm) == DRIVER
    nvcc = node.run('nvcc', '--version', package='cuda-toolkit-13-0').stdout
    assert 'Cuda compilation tools, release 13.0, V13.0.88\n' in nvcc
    assert nvcc.startswith('nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n')
    assert _packages.parse_nvcc_version(nvcc) == '13.0.88'
    assert _packages.parse_nvcc_version(node.run('nvcc', '--version').stdout) == '13.0.88'


def test_persistenced_version_and_failure(node):
    node.package('nvidia-compute-utils-550', DRIVER)
    assert 'nvidia-persistenced:  version 550.127.05\n' in node.run('nvidia_persistenced', '--version').stdout
    node.boot_json(driver=None)
    process = node.run('nvidia_persistenced', '--user', 'nvidia-persistenced')
    assert process.returncode == 1
    assert 'Failed to query NVIDIA devices' in process.stderr and 'failed to initialize' in process.stderr
    assert not node.exists(state.PERSISTENCED_PID)


# --------------------------------------------------------------------------- Fabric Manager daemon

def test_fabricmanager_refuses_a_mismatched_driver(node):
    node.package('nvidia-fabricmanager-570', '570.172.08')
    process = node.run('nv_fabricmanager', '-c', '/usr/share/nvidia/nvswitch/fabricmanager.cfg', package='nvidia-fabricmanager-570')
    assert process.returncode == 1
    # The real journal line (gpu-operator issue 544, akash-network PR 632) after the "nv-fabricmanager[pid]: " prefix.
    assert process.stderr == ("fabric manager NVIDIA GPU driver interface version 570.172.08 don't match with driver version "
                              "550.127.05. Please update with matching NVIDIA driver package.\n")
    assert not node.exists(state.FABRICMANAGER_PID)


def test_fabricmanager_without_nvswitch_or_with_fm_fail(tmp_path):
    pcie = Node(tmp_path / 'pcie', profile='l40s-pcie-4').healthy()
    pcie.package('nvidia-fabricmanager-550', DRIVER)
    process = pcie.run('nv_fabricmanager', '-c', 'fabricmanager.cfg')
    assert process.returncode == 1
    assert process.stderr == ('request to query NVSwitch device information from NVSwitch driver failed with '
                              'error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]\n')
    hgx = Node(tmp_path / 'hgx').healthy()
    hgx.package('nvidia-fabricmanager-550', DRIVER)
    hgx.faults({'fm_fail': {}})
    process = hgx.run('nv_fabricmanager', '-c', 'fabricmanager.cfg')
    assert process.returncode == 1 and process.stderr and not hgx.exists(state.FABRICMANAGER_PID)


def test_fabricmanager_left_on_another_branch_fails_with_the_mismatch_message(tmp_path):
    # The driver 550.127.05 is loaded: the Fabric Manager of the 535 branch refuses it; the fault's own branch works.
    hgx = Node(tmp_path / 'hgx').healthy()
    hgx.package('nvidia-fabricmanager-550', DRIVER)
    hgx.faults({'fm_fail': {'mismatch': '535.216.01'}})
    process = hgx.run('nv_fabricmanager', '-c', 'fabricmanager.cfg')
    assert process.returncode == 1 and not hgx.exists(state.FABRICMANAGER_PID)
    assert process.stderr == ("fabric manager NVIDIA GPU driver interface version 535.216.01 don't match with driver version "
                              "550.127.05. Please update with matching NVIDIA driver package.\n")
    hgx.faults({'fm_fail': {'mismatch': DRIVER}})
    assert hgx.run('nv_fabricmanager', '--version').stdout == 'Fabric Manager version is : %s\n' % DRIVER


# --------------------------------------------------------------------------- dkms and boot

def test_dkms_builds_only_for_installed_kernels(tmp_path):
    node = Node(tmp_path / 'node')
    node.install_nvml(DRIVER)
    node.kernel(KERNEL)
    node.kernel('6.1.0-27-amd64', image=False)  # leftover modules folder of a removed kernel
    node.dkms_source(DRIVER)
    assert node.run('dkms', 'status').stdout == 'nvidia/550.127.05: added\n'
    process = node.run('dkms', 'autoinstall')
    assert process.returncode == 0, process.stderr
    assert node.read(state.module_path(KERNEL)) == '550.127.05\n'
    assert not node.exists(state.module_path('6.1.0-27-amd64'))
    assert node.run('dkms', 'status').stdout == 'nvidia/550.127.05, 6.1.0-26-amd64, x86_64: installed\n'
    refused = node.run('dkms', 'install', 'nvidia/550.127.05', '-k', '6.1.0-27-amd64')
    assert refused.returncode == 1 and 'kernel headers for kernel 6.1.0-27-amd64 cannot be found' in refused.stderr


def test_dkms_newer_version_replaces_and_remove(tmp_path):
    node = Node(tmp_path / 'node')
    node.kernel(KERNEL)
    node.kernel('6.1.0-28-amd64')
    node.dkms_source('535.247.01')
    assert node.run('dkms', 'autoinstall').returncode == 0
    node.dkms_source('550.127.05', is_open=True)
    assert node.run('dkms', 'autoinstall', '-k', '6.1.0-28-amd64').returncode == 0
    assert node.read(state.module_path('6.1.0-28-amd64')) == '550.127.05 open\n'
    assert node.read(state.module_path(KERNEL)) == '535.247.01\n'
    assert node.run('dkms', 'autoinstall').returncode == 0
    assert node.run('dkms', 'status').stdout == ('nvidia/535.247.01: added\n'
                                                 'nvidia/550.127.05, 6.1.0-26-amd64, x86_64: installed\n'
                                                 'nvidia/550.127.05, 6.1.0-28-amd64, x86_64: installed\n')
    assert node.run('dkms', 'remove', 'nvidia/550.127.05', '--all').returncode == 0
    assert not node.exists(state.module_path(KERNEL)) and not node.exists(state.module_path('6.1.0-28-amd64'))
    assert node.run('dkms', '--version').stdout == 'dkms-3.0.10\n'


def test_dkms_fail_leaves_the_new_kernel_without_a_driver(node):
    node.dkms_source(DRIVER)
    node.faults({'dkms_fail': {}})
    new_kernel = '6.1.0-27-amd64'
    node.kernel(new_kernel)  # linux-image-6.1.0-27-amd64 installed; its postinst hook runs dkms autoinstall
    process = node.run('dkms', 'autoinstall', '-k', new_kernel)
    assert process.returncode == 11
    assert 'Error! Bad return status for module build on kernel: 6.1.0-27-amd64 (x86_64)' in process.stderr + process.stdout
    install = node.run('dkms', 'install', 'nvidia/' + DRIVER, '-k', new_kernel)
    assert install.returncode == 10
    assert install.stderr.startswith('Error! Bad return status for module build on kernel: 6.1.0-27-amd64 (x86_64)\n')
    assert not node.exists(state.module_path(new_kernel))
    boot = node.run('boot')
    assert boot.returncode == 0
    record = json.loads(node.read(state.BOOT_FILE))
    assert (record['kernel'], record['driver']) == (new_kernel, None)
    process = node.run('nvidia_smi', '-q', '-x')
    assert process.returncode == 9
    assert _nvidia_smi.classify_failure(process.returncode, process.stdout, process.stderr)['reason'] == 'driver_unreachable'


def test_boot_loads_the_newest_kernels_module(tmp_path):
    node = Node(tmp_path / 'node')
    node.install_nvml('580.65.06')
    for release, module in (('6.1.0-9-amd64', '550.127.05'), ('6.1.0-26-amd64', '580.65.06 open')):
        node.kernel(release)
        node.write(state.module_path(release), module + '\n')
    node.write(state.PERSISTENCED_PID, '1\n')
    node.write(state.FABRICMANAGER_PID, '1\n')
    assert node.run('boot').returncode == 0
    record = json.loads(node.read(state.BOOT_FILE))
    assert (record['kernel'], record['driver'], record['open']) == ('6.1.0-26-amd64', '580.65.06', True)
    assert set(record) == {'kernel', 'driver', 'open', 'module', 'module_source', 'boot_id', 'booted_at'}
    assert (record['module'], record['module_source']) == ('/lib/modules/6.1.0-26-amd64/updates/dkms/nvidia.ko', 'dkms')
    assert not node.exists(state.PERSISTENCED_PID) and not node.exists(state.FABRICMANAGER_PID)
    assert node.run('nvidia_smi', '-L').returncode == 0
    first_boot = record['boot_id']
    node.run('boot')
    assert json.loads(node.read(state.BOOT_FILE))['boot_id'] != first_boot


def test_reboot_hang_only_records_outside_systemd(node):
    node.faults({'reboot_hang': {}})
    assert node.run('boot').returncode == 0
    record = json.loads(node.read(state.REBOOT_HANG_FILE))
    assert record['executed'] is False
    assert record['commands'] == ['systemctl mask --runtime ssh.service ssh.socket', 'systemctl --no-block stop ssh.service ssh.socket']


def test_slow_boot_delays_the_boot_step(node):
    node.faults({'slow_boot': {'seconds': 1}})
    start = time.monotonic()
    booted = node.run('boot')
    assert booted.returncode == 0 and 'slow_boot: POST takes 1 s' in booted.stdout
    assert time.monotonic() - start >= 1
    node.faults({})
    assert 'slow_boot' not in node.run('boot').stdout


# --------------------------------------------------------------------------- maintainer scripts

def test_dpkg_fail(node):
    node.faults({'dpkg_fail': {}})
    failed = node.run('maint', 'preinst', 'nvidia-driver-550', 'install')
    assert (failed.returncode, failed.stderr) == (1, 'gpufleet-sim: injected dpkg failure in nvidia-driver-550 preinst\n')
    assert node.run('maint', 'preinst', 'datacenter-gpu-manager-4-core', 'upgrade', '1:4.2.3-1').returncode == 1
    assert node.run('maint', 'preinst', 'openssh-server', 'install').returncode == 0
    assert node.run('maint', 'postinst', 'nvidia-driver-550', 'configure').returncode == 0
    node.faults({'dpkg_fail': {'package': 'libnvidia-compute-550'}})
    assert node.run('maint', 'preinst', 'libnvidia-compute-550:amd64', 'install').returncode == 1
    assert node.run('maint', 'preinst', 'nvidia-driver-550', 'install').returncode == 0
    node.faults({})
    assert node.run('maint', 'preinst', 'nvidia-driver-550', 'install').returncode == 0


# --------------------------------------------------------------------------- the -q field table

@pytest.mark.parametrize('driver', ['550.127.05', '590.44.01'])
def test_one_field_table_drives_xml_and_text(node, monkeypatch, driver):
    """The XML (v12 / v13) and text printers read their rows from GPU_FIELDS: a changed row changes all three."""
    from gpufleet_sim import nvidia_smi  # pylint: disable=import-outside-toplevel
    gpus = nvidia_smi.describe(node.hardware, driver)
    row = [field for field in nvidia_smi.GPU_FIELDS if field.xml == 'vbios_version'][0]
    assert row.text == 'VBIOS Version'
    monkeypatch.setattr(row, 'value', 'TABLE-ROW')
    xml = nvidia_smi.render_xml(gpus, len(gpus), driver, 'now')
    text = nvidia_smi.render_text(gpus, len(gpus), driver, 'now')
    assert xml.count('<vbios_version>TABLE-ROW</vbios_version>') == len(gpus)
    assert len(re.findall(r'^    VBIOS Version\s+: TABLE-ROW$', text, re.MULTILINE)) == len(gpus)
    assert _nvidia_smi.parse_xml(xml.encode('utf-8'))['gpus'][0]['vbios_version'] == 'TABLE-ROW'


def test_every_table_row_is_printed_somewhere():
    from gpufleet_sim import nvidia_smi  # pylint: disable=import-outside-toplevel
    views = [nvidia_smi._View(fmt, branch) for fmt in ('x12', 'x13', 'text') for branch in (525, 550, 560, 570, 580, 590)]  # pylint: disable=protected-access

    def walk(fields):
        for field in fields:
            assert field.xml or field.text, vars(field)
            assert field.on is None or any(field.on(view) for view in views), (field.xml, field.text)
            walk(field.children or [])
    walk(nvidia_smi.GPU_FIELDS)


# --------------------------------------------------------------------------- dpkg_lock fault

def _dpkg_lock_holders(node):
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _locks  # pylint: disable=import-outside-toplevel
    files = [(node.path('var/lib/dpkg/lock-frontend'), 'fcntl'), (node.path('var/lib/dpkg/lock'), 'fcntl')]
    return [[(holder['pid'], holder['command']) for holder in lock['holders']] for lock in _locks.observe_all(files)]


def test_dpkg_lock_holds_both_locks_like_apt(node):
    node.faults({'dpkg_lock': {'seconds': 30}})
    started = node.run('dpkg_lock', 'start')
    assert started.returncode == 0, started.stderr
    report = json.loads(started.stdout)
    pid = report['pid']
    try:
        assert report['seconds'] == 30 and report['locks'] == ['/var/lib/dpkg/lock-frontend', '/var/lib/dpkg/lock']
        assert _dpkg_lock_holders(node) == [[(pid, 'unattended-upgr')], [(pid, 'unattended-upgr')]]
        # Started once: a second start reports the same holder.
        assert json.loads(node.run('dpkg_lock', 'start').stdout)['pid'] == pid
        # The real dpkg meets the lock as it meets unattended-upgrades'.
        dpkg = subprocess.run(['dpkg', '--admindir', node.path('var/lib/dpkg'), '--set-selections'], input='', capture_output=True,
                              text=True, timeout=30, check=False)
        assert dpkg.returncode == 2 and 'dpkg frontend lock was locked by another process with pid %d' % pid in dpkg.stderr, dpkg.stderr
    finally:
        stopped = node.run('dpkg_lock', 'stop')
    assert json.loads(stopped.stdout) == {'stopped': pid}
    assert _dpkg_lock_holders(node) == [[], []]
    assert not node.exists('run/gpufleet-sim/dpkg-lock.pid')


def test_dpkg_lock_lets_go_after_its_seconds(node):
    started = node.run('dpkg_lock', 'start', '--seconds', '1')
    pid = json.loads(started.stdout)['pid']
    assert _dpkg_lock_holders(node)[0] == [(pid, 'unattended-upgr')]
    deadline = time.time() + 20
    while time.time() < deadline and _dpkg_lock_holders(node)[0]:
        time.sleep(0.1)
    assert _dpkg_lock_holders(node) == [[], []]
    assert json.loads(node.run('dpkg_lock', 'stop').stdout) == {'stopped': None}


def test_dpkg_lock_fault_settings_and_node_command():
    sys.path.insert(0, os.path.join(REPO, 'tests', 'sim'))
    import fleet_faults  # pylint: disable=import-outside-toplevel,import-error
    assert fleet_faults.parse_fault_settings('dpkg_lock', []) == {'seconds': 30}
    settings = fleet_faults.parse_fault_settings('dpkg_lock', ['seconds=10'])
    assert settings == {'seconds': 10}
    assert fleet_faults.node_command('dpkg_lock', settings) == [
        'env', 'PYTHONPATH=/usr/lib/gpufleet-sim', 'python3', '-m', 'gpufleet_sim.dpkg_lock', 'start', '--seconds', '10']
    assert fleet_faults.node_command('xid', {'gpu': 0, 'xid': 79}) is None
    with pytest.raises(fleet_faults.FaultError):
        fleet_faults.parse_fault_settings('dpkg_lock', ['minutes=3'])
