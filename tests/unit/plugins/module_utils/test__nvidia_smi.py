# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for plugins/module_utils/_nvidia_smi.py against real nvidia-smi and kernel outputs."""

import json

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._nvidia_smi import (
    SCHEMA_VERSION,
    NvidiaSmiParseError,
    classify_failure,
    find_kernel_gpu_errors,
    parse_kernel_module_flavor,
    parse_proc_driver_version,
    parse_xml,
)

from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import read_real_output

P100 = 'netdata_tesla-p100-pcie-16gb_510.47.03_v11.xml'
A100 = 'telegraf_a100-sxm4-80gb_535.54.03_v12.xml'
RTX2070X2 = 'telegraf_dual-rtx-2070_590.44.01_v13.xml'
RTX3080 = 'telegraf_rtx-3080_536.40_v12.xml'
T4 = 'telegraf_tesla-t4_515.105.01_v11.xml'
# Captured on a real H200 through the device tool (session 9): driver 580.159.04, the open kernel module, DTD v13.
H200 = 'device_h200_580.159.04_v13.xml'
XML_SAMPLES = (P100, A100, RTX2070X2, RTX3080, T4, H200)

GPU_KEYS = {
    'index', 'minor_number', 'id', 'name', 'brand', 'architecture', 'uuid', 'serial', 'pci_bus_id', 'pci_device_id',
    'vbios_version', 'gsp_firmware_version', 'board_part_number', 'board_id', 'persistence_mode', 'driver_model',
    'mig_mode', 'mig_device_count', 'ecc_mode', 'ecc_errors', 'retired_pages', 'remapped_rows', 'fabric',
    'temperature_c', 'power_limit_w', 'memory_total_mib',
}


def _read(category, name, mode='r'):
    return read_real_output(category, name, binary='b' in mode)


def _xml(name):
    return _read('nvidia-smi-xml', name, 'rb')


def _parsed(name):
    return parse_xml(_xml(name))


# --------------------------------------------------------------------------- parse_xml: document level

@pytest.mark.parametrize('name, timestamp, driver, cuda, attached, count', [
    (P100, 'Sat Sep 17 17:06:50 2022', '510.47.03', '11.6', 1, 1),
    # telegraf trimmed the file to one <gpu> although four are attached.
    (A100, 'Fri Aug  4 11:44:30 2023', '535.54.03', '12.2', 4, 1),
    (RTX2070X2, 'Tue Dec 30 09:49:47 2025', '590.44.01', '13.1', 2, 2),
    (RTX3080, 'Thu Jul 20 17:00:50 2023', '536.40', '12.2', 1, 1),
    (T4, 'Mon Apr 24 16:22:39 2023', '515.105.01', '11.7', 1, 1),
    (H200, 'Thu Nov 26 22:37:44 2026', '580.159.04', '13.0', 1, 1),
])
def test_document_fields(name, timestamp, driver, cuda, attached, count):
    doc = _parsed(name)
    assert doc['timestamp'] == timestamp
    assert doc['driver_version'] == driver
    assert doc['cuda_driver_version'] == cuda
    assert doc['attached_gpus'] == attached
    assert doc['gpu_count'] == count
    assert len(doc['gpus']) == count
    assert [gpu['index'] for gpu in doc['gpus']] == list(range(count))


@pytest.mark.parametrize('name', XML_SAMPLES)
def test_str_and_bytes_give_the_same_result(name):
    raw = _xml(name)
    assert parse_xml(raw.decode('utf-8')) == parse_xml(raw)


@pytest.mark.parametrize('name', XML_SAMPLES)
def test_every_gpu_has_every_key(name):
    for gpu in _parsed(name)['gpus']:
        assert set(gpu) == GPU_KEYS
        assert set(gpu['ecc_errors']) == {'volatile', 'aggregate'}
        for scope in gpu['ecc_errors'].values():
            assert set(scope) == {'corrected', 'uncorrected'}
        assert set(gpu['retired_pages']) == {'single_bit', 'double_bit', 'pending'}


def test_schema_version():
    assert SCHEMA_VERSION == 1


# --------------------------------------------------------------------------- parse_xml: identity

@pytest.mark.parametrize('name, position, expected', [
    (P100, 0, {
        'id': '00000000:00:04.0', 'minor_number': 0, 'name': 'Tesla P100-PCIE-16GB', 'brand': 'Tesla', 'architecture': 'Pascal',
        'uuid': 'GPU-d3da8716-eaab-75db-efc1-60e88e1cd55e', 'serial': '0324217145110', 'pci_bus_id': '00000000:00:04.0',
        'pci_device_id': '0x15F810DE', 'vbios_version': '86.00.52.00.02', 'gsp_firmware_version': None,
        'board_part_number': None, 'board_id': '0x4', 'persistence_mode': 'Disabled', 'driver_model': None,
    }),
    (A100, 0, {
        'id': '00000000:01:00.0', 'minor_number': 1, 'name': 'NVIDIA A100-SXM4-80GB', 'brand': 'NVIDIA', 'architecture': 'Ampere',
        'uuid': 'GPU-513536b6-7d19-9063-b049-1e69664bb298', 'serial': '1650522003820', 'pci_bus_id': '00000000:01:00.0',
        'pci_device_id': '0x20B210DE', 'vbios_version': '92.00.36.00.02', 'gsp_firmware_version': '535.54.03',
        'board_part_number': '692-2G506-0212-002', 'board_id': '0x100', 'persistence_mode': 'Disabled', 'driver_model': None,
    }),
    (RTX2070X2, 0, {
        'id': '00000000:01:00.0', 'minor_number': 0, 'name': 'NVIDIA GeForce RTX 2070', 'brand': 'GeForce', 'architecture': 'Turing',
        'uuid': 'GPU-12345678-aaaa-bbbb-cccc-0123456789ab', 'serial': None, 'pci_bus_id': '00000000:01:00.0',
        'pci_device_id': '0x1F0210DE', 'vbios_version': '90.06.18.00.3A', 'gsp_firmware_version': '590.44.01',
        'board_part_number': None, 'board_id': '0x100', 'persistence_mode': 'Enabled', 'driver_model': None,
    }),
    (RTX2070X2, 1, {
        'id': '00000000:02:00.0', 'minor_number': 1, 'name': 'NVIDIA GeForce RTX 2070', 'brand': 'GeForce', 'architecture': 'Turing',
        'uuid': 'GPU-12345678-aaaa-bbbb-cccc-0123456789cd', 'serial': None, 'pci_bus_id': '00000000:02:00.0',
        'pci_device_id': '0x1F0210DE', 'vbios_version': '90.06.18.00.3A', 'gsp_firmware_version': '590.44.01',
        'board_part_number': None, 'board_id': '0x200', 'persistence_mode': 'Enabled', 'driver_model': None,
    }),
    (RTX3080, 0, {
        # Windows-branch driver: WDDM driver model, minor number and persistence mode N/A.
        'id': '00000000:04:00.0', 'minor_number': None, 'name': 'NVIDIA GeForce RTX 3080', 'brand': 'GeForce', 'architecture': 'Ampere',
        'uuid': 'GPU-19d6d965-2acc-f646-00f8-4c76979aabb4', 'serial': None, 'pci_bus_id': '00000000:04:00.0',
        'pci_device_id': '0x221610DE', 'vbios_version': '94.02.71.40.72', 'gsp_firmware_version': None,
        'board_part_number': None, 'board_id': '0x400', 'persistence_mode': None,
        'driver_model': {'current': 'WDDM', 'pending': 'WDDM'},
    }),
    (T4, 0, {
        'id': '00000000:00:1E.0', 'minor_number': 0, 'name': 'Tesla T4', 'brand': 'NVIDIA', 'architecture': 'Turing',
        'uuid': 'GPU-d37e67a5-91dd-3774-a5cb-99096249601a', 'serial': '0000000000000', 'pci_bus_id': '00000000:00:1E.0',
        'pci_device_id': '0x1EB810DE', 'vbios_version': '90.04.84.00.06', 'gsp_firmware_version': '515.105.01',
        'board_part_number': None, 'board_id': '0x1e', 'persistence_mode': 'Disabled', 'driver_model': None,
    }),
    (H200, 0, {
        # Driver 580 prints the PCI device id without 0x (the parser writes it as older drivers do); persistence mode Enabled
        # with no systemd on the machine.
        'id': '00000000:00:06.0', 'minor_number': 0, 'name': 'NVIDIA H200', 'brand': 'NVIDIA', 'architecture': 'Hopper',
        'uuid': 'GPU-12a99233-a65a-6fa8-5127-e3cd7f334ce1', 'serial': '1654124046024', 'pci_bus_id': '00000000:00:06.0',
        'pci_device_id': '0x233510DE', 'vbios_version': '96.00.A5.00.1A', 'gsp_firmware_version': '580.159.04',
        'board_part_number': '692-2G520-0282-001', 'board_id': '0x6', 'persistence_mode': 'Enabled', 'driver_model': None,
    }),
])
def test_gpu_identity(name, position, expected):
    gpu = _parsed(name)['gpus'][position]
    assert gpu['index'] == position
    assert {key: gpu[key] for key in expected} == expected


# --------------------------------------------------------------------------- parse_xml: health and modes

@pytest.mark.parametrize('name, position, mig_mode, mig_devices, ecc_mode, ecc_errors', [
    # Old ECC layout (single_bit/double_bit totals) with a non-zero aggregate single-bit count.
    (P100, 0, {'current': None, 'pending': None}, 0, {'current': 'Enabled', 'pending': 'Enabled'},
     {'volatile': {'corrected': 0, 'uncorrected': 0}, 'aggregate': {'corrected': 3, 'uncorrected': 0}}),
    (A100, 0, {'current': 'Enabled', 'pending': 'Enabled'}, 4, {'current': 'Enabled', 'pending': 'Enabled'},
     {'volatile': {'corrected': 0, 'uncorrected': 0}, 'aggregate': {'corrected': 0, 'uncorrected': 0}}),
    (RTX2070X2, 0, {'current': None, 'pending': None}, 0, {'current': None, 'pending': None},
     {'volatile': {'corrected': None, 'uncorrected': None}, 'aggregate': {'corrected': None, 'uncorrected': None}}),
    (RTX2070X2, 1, {'current': None, 'pending': None}, 0, {'current': None, 'pending': None},
     {'volatile': {'corrected': None, 'uncorrected': None}, 'aggregate': {'corrected': None, 'uncorrected': None}}),
    (RTX3080, 0, {'current': None, 'pending': None}, 0, {'current': None, 'pending': None},
     {'volatile': {'corrected': None, 'uncorrected': None}, 'aggregate': {'corrected': None, 'uncorrected': None}}),
    # New sram/dram layout already on Turing with a 515 driver.
    (T4, 0, {'current': None, 'pending': None}, 0, {'current': 'Enabled', 'pending': 'Enabled'},
     {'volatile': {'corrected': 0, 'uncorrected': 0}, 'aggregate': {'corrected': 0, 'uncorrected': 0}}),
    # Hopper, MIG available and off (<mig_devices>None</mig_devices>), ECC on, every sram/dram counter 0.
    (H200, 0, {'current': 'Disabled', 'pending': 'Disabled'}, 0, {'current': 'Enabled', 'pending': 'Enabled'},
     {'volatile': {'corrected': 0, 'uncorrected': 0}, 'aggregate': {'corrected': 0, 'uncorrected': 0}}),
])
def test_mig_and_ecc(name, position, mig_mode, mig_devices, ecc_mode, ecc_errors):
    gpu = _parsed(name)['gpus'][position]
    assert gpu['mig_mode'] == mig_mode
    assert gpu['mig_device_count'] == mig_devices
    assert gpu['ecc_mode'] == ecc_mode
    assert gpu['ecc_errors'] == ecc_errors


@pytest.mark.parametrize('name, position, retired_pages, remapped_rows', [
    (P100, 0, {'single_bit': 0, 'double_bit': 0, 'pending': False}, None),
    (A100, 0, {'single_bit': None, 'double_bit': None, 'pending': None}, None),
    (RTX2070X2, 0, {'single_bit': None, 'double_bit': None, 'pending': None}, None),
    (RTX2070X2, 1, {'single_bit': None, 'double_bit': None, 'pending': None}, None),
    (RTX3080, 0, {'single_bit': None, 'double_bit': None, 'pending': None}, None),
    (T4, 0, {'single_bit': 0, 'double_bit': 0, 'pending': False}, None),
    # Hopper retires no pages (every field N/A) and remaps rows: the first real <remapped_rows> of the samples.
    (H200, 0, {'single_bit': None, 'double_bit': None, 'pending': None}, {'correctable': 0, 'uncorrectable': 0, 'pending': False, 'failure': False}),
])
def test_retired_pages_and_remapped_rows(name, position, retired_pages, remapped_rows):
    gpu = _parsed(name)['gpus'][position]
    assert gpu['retired_pages'] == retired_pages
    assert gpu['remapped_rows'] == remapped_rows


V13_HEALTH = {
    'summary': None, 'bandwidth': None, 'route_recovery_in_progress': None, 'route_unhealthy': None,
    'access_timeout_recovery': None, 'incorrect_configuration': None,
}


@pytest.mark.parametrize('name, position, fabric', [
    (P100, 0, None),
    (T4, 0, None),
    (A100, 0, {'state': None, 'status': None, 'clique_id': None, 'cluster_uuid': None, 'health': None}),
    (RTX3080, 0, {'state': None, 'status': None, 'clique_id': None, 'cluster_uuid': None, 'health': None}),
    (RTX2070X2, 0, {'state': None, 'status': None, 'clique_id': None, 'cluster_uuid': None, 'health': V13_HEALTH}),
    (RTX2070X2, 1, {'state': None, 'status': None, 'clique_id': None, 'cluster_uuid': None, 'health': V13_HEALTH}),
])
def test_fabric(name, position, fabric):
    assert _parsed(name)['gpus'][position]['fabric'] == fabric


@pytest.mark.parametrize('name, position, temperature, power_limit, memory_total', [
    (P100, 0, 38, 250.0, 16384),       # power_readings/enforced_power_limit
    (T4, 0, 40, 70.0, 15360),          # power_readings/enforced_power_limit
    (A100, 0, 27, 500.0, 81920),       # gpu_power_readings/current_power_limit
    (RTX3080, 0, 31, 336.0, 10240),
    (RTX2070X2, 0, 14, 175.0, 8192),
    (RTX2070X2, 1, 13, 175.0, 8192),
    (H200, 0, 35, 700.0, 143771),      # gpu_power_readings/current_power_limit; the module's power limit N/A
])
def test_readings(name, position, temperature, power_limit, memory_total):
    gpu = _parsed(name)['gpus'][position]
    assert gpu['temperature_c'] == temperature
    assert gpu['power_limit_w'] == power_limit
    assert isinstance(gpu['power_limit_w'], float)
    assert gpu['memory_total_mib'] == memory_total


# --------------------------------------------------------------------------- parse_xml: layouts not in the samples

NEW_ECC_GPU = '''<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
    <timestamp>Mon Jan  6 10:00:00 2025</timestamp>
    <driver_version>550.127.05</driver_version>
    <cuda_version>Not Found</cuda_version>
    <attached_gpus>8</attached_gpus>
    <gpu id="00000000:19:00.0">
        <product_name>NVIDIA H100 80GB HBM3</product_name>
        <mig_devices>
            None
        </mig_devices>
        <pci>
            <pci_device_id>0x233010DE</pci_device_id>
        </pci>
        <ecc_errors>
            <volatile>
                <sram_correctable>2</sram_correctable>
                <sram_uncorrectable_parity>1</sram_uncorrectable_parity>
                <sram_uncorrectable_secded>3</sram_uncorrectable_secded>
                <dram_correctable>5</dram_correctable>
                <dram_uncorrectable>N/A</dram_uncorrectable>
            </volatile>
            <aggregate>
                <sram_correctable>7</sram_correctable>
                <sram_uncorrectable_parity>0</sram_uncorrectable_parity>
                <sram_uncorrectable_secded>0</sram_uncorrectable_secded>
                <dram_correctable>11</dram_correctable>
                <dram_uncorrectable>1</dram_uncorrectable>
                <sram_threshold_exceeded>No</sram_threshold_exceeded>
            </aggregate>
            <aggregate_uncorrectable_sram_sources>
                <sram_l2>0</sram_l2>
            </aggregate_uncorrectable_sram_sources>
        </ecc_errors>
        <retired_pages>
            <pending_blacklist>Yes</pending_blacklist>
        </retired_pages>
        <remapped_rows>
            <remapped_row_corr>4</remapped_row_corr>
            <remapped_row_unc>1</remapped_row_unc>
            <remapped_row_pending>Yes</remapped_row_pending>
            <remapped_row_failure>No</remapped_row_failure>
            <row_remapper_histogram>
                <row_remapper_histogram_max>64 bank(s)</row_remapper_histogram_max>
            </row_remapper_histogram>
        </remapped_rows>
        <gpu_power_readings>
            <current_power_limit>N/A</current_power_limit>
        </gpu_power_readings>
        <power_readings>
            <power_limit>700.00 W</power_limit>
        </power_readings>
        <fabric>
            <state>Completed</state>
            <status>Success</status>
            <cliqueId>32766</cliqueId>
            <clusterUuid>5cd30dc8-0000-4000-8000-000000000388</clusterUuid>
            <health>
                <bandwidth>Full</bandwidth>
                <route_unhealthy>False</route_unhealthy>
            </health>
        </fabric>
        <some_future_element><child>1</child></some_future_element>
    </gpu>
</nvidia_smi_log>
'''


def test_layouts_missing_from_the_samples():
    """parity/secded split, remapped_rows sub-tree, populated fabric, fallback power limit, Not Found CUDA."""
    doc = parse_xml(NEW_ECC_GPU)
    assert doc['cuda_driver_version'] is None
    assert doc['attached_gpus'] == 8
    gpu = doc['gpus'][0]
    assert gpu['ecc_errors'] == {
        'volatile': {'corrected': 7, 'uncorrected': 4},
        'aggregate': {'corrected': 18, 'uncorrected': 1},
    }
    assert gpu['retired_pages'] == {'single_bit': None, 'double_bit': None, 'pending': True}
    assert gpu['remapped_rows'] == {'correctable': 4, 'uncorrectable': 1, 'pending': True, 'failure': False}
    assert gpu['fabric'] == {
        'state': 'Completed', 'status': 'Success', 'clique_id': '32766',
        'cluster_uuid': '5cd30dc8-0000-4000-8000-000000000388',
        'health': {'bandwidth': 'Full', 'route_unhealthy': 'False'},
    }
    assert gpu['power_limit_w'] == 700.0
    assert gpu['pci_device_id'] == '0x233010DE'
    assert gpu['mig_device_count'] == 0
    # Missing elements read as None, never KeyError.
    assert gpu['uuid'] is None
    assert gpu['temperature_c'] is None
    assert gpu['memory_total_mib'] is None
    assert gpu['mig_mode'] == {'current': None, 'pending': None}
    assert gpu['ecc_mode'] == {'current': None, 'pending': None}
    assert gpu['pci_bus_id'] == '00000000:19:00.0'   # falls back to the id attribute


def test_minimal_document_without_gpus():
    doc = parse_xml('<nvidia_smi_log><attached_gpus>0</attached_gpus></nvidia_smi_log>')
    assert doc == {
        'timestamp': None, 'driver_version': None, 'cuda_driver_version': None,
        'attached_gpus': 0, 'gpu_count': 0, 'gpus': [],
    }


def test_combined_sram_uncorrectable_is_not_added_twice():
    doc = parse_xml(
        '<nvidia_smi_log><gpu id="0"><ecc_errors><volatile>'
        '<sram_uncorrectable>2</sram_uncorrectable><sram_uncorrectable_parity>1</sram_uncorrectable_parity>'
        '<sram_uncorrectable_secded>1</sram_uncorrectable_secded><dram_uncorrectable>[N/A]</dram_uncorrectable>'
        '</volatile></ecc_errors></gpu></nvidia_smi_log>')
    assert doc['gpus'][0]['ecc_errors']['volatile'] == {'corrected': None, 'uncorrected': 2}
    assert doc['gpus'][0]['ecc_errors']['aggregate'] == {'corrected': None, 'uncorrected': None}


@pytest.mark.parametrize('value', ['N/A', 'Not Available', 'Unknown Error', '[N/A]', 'Requested functionality has been deprecated',
                                   'Not Supported', '[Not Supported]', '', '   '])
def test_not_available_values_become_none(value):
    doc = parse_xml('<nvidia_smi_log><driver_version>%s</driver_version><gpu id="x"><uuid>%s</uuid>'
                    '<temperature><gpu_temp>%s</gpu_temp></temperature></gpu></nvidia_smi_log>' % (value, value, value))
    assert doc['driver_version'] is None
    assert doc['gpus'][0]['uuid'] is None
    assert doc['gpus'][0]['temperature_c'] is None


def test_warning_line_before_the_document_is_tolerated():
    raw = _xml(T4).decode('utf-8')
    doc = parse_xml('WARNING: infoROM is corrupted at gpu 0000:00:1E.0\n' + raw + '\n')
    assert doc['gpus'][0]['uuid'] == 'GPU-d37e67a5-91dd-3774-a5cb-99096249601a'


# --------------------------------------------------------------------------- parse_xml: bad input

class _Truncated:
    """A real sample cut in half, read when the test runs (not at collection)."""

    def __init__(self, name, as_text=False):
        self.name = name
        self.as_text = as_text

    def __repr__(self):
        return 'truncated(%s)' % self.name

    def read(self):
        raw = _xml(self.name)
        raw = raw[:len(raw) // 2]
        return raw.decode('utf-8') if self.as_text else raw


@pytest.mark.parametrize('text, message', [
    ('', 'empty'),
    (b'', 'empty'),
    ('  \n\t\n', 'empty'),
    ('<nvidia_smi_log><gpu id="x"><uuid>GPU-1</gpu></nvidia_smi_log>', 'malformed or truncated'),
    ('<nvidia_smi_log><gpu id="x">', 'malformed or truncated'),
    (_Truncated(A100), 'malformed or truncated'),
    (_Truncated(RTX2070X2, as_text=True), 'malformed or truncated'),
    (_Truncated(P100), 'malformed or truncated'),
    ('<?xml version="1.0" ?>\n<nvidia_smi_unit_log><timestamp>x</timestamp></nvidia_smi_unit_log>', 'root element is <nvidia_smi_unit_log>'),
    ('<html><body>nvidia</body></html>', 'root element is <html>'),
    ('No devices were found\n', 'not an nvidia-smi XML document'),
    ('Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.124\n', 'not an nvidia-smi XML document'),
    ('<!DOCTYPE nvidia_smi_log [<!ENTITY x SYSTEM "file:///etc/passwd">]><nvidia_smi_log>&x;</nvidia_smi_log>', 'entities'),
    (None, 'must be str or bytes'),
    (42, 'must be str or bytes'),
])
def test_bad_input_raises_parse_error(text, message):
    if isinstance(text, _Truncated):
        text = text.read()
    with pytest.raises(NvidiaSmiParseError, match=message) as info:
        parse_xml(text)
    assert isinstance(info.value, ValueError)


BILLION_LAUGHS = ('<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [\n <!ENTITY lol "lol">\n'
                  ' <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">\n'
                  ' <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">\n]>\n'
                  '<nvidia_smi_log><driver_version>&lol3;</driver_version></nvidia_smi_log>\n')


def _with_doctype(name, doctype):
    """A real sample whose nvidia-smi DOCTYPE line is replaced by ``doctype``."""
    text = _xml(name).decode('utf-8')
    real = [line for line in text.splitlines() if line.startswith('<!DOCTYPE')][0]
    return text.replace(real, doctype, 1)


@pytest.mark.parametrize('doctype, message', [
    ('<!DOCTYPE nvidia_smi_log SYSTEM "file:///etc/passwd">', 'is not nvidia-smi\'s'),
    ('<!DOCTYPE nvidia_smi_log SYSTEM "http://203.0.113.7/nvsmi_device_v12.dtd">', 'is not nvidia-smi\'s'),
    ('<!DOCTYPE nvidia_smi_log PUBLIC "-//x//EN" "nvsmi_device_v12.dtd">', 'is not nvidia-smi\'s'),
    ('<!DOCTYPE nvidia_smi_log SYSTEM "../../etc/nvsmi_device_v12.dtd">', 'is not nvidia-smi\'s'),
    ('<!DOCTYPE nvidia_smi_log [<!ATTLIST gpu id CDATA "x">]>', 'is not nvidia-smi\'s'),
    ('<!DOCTYPE nvidia_smi_log [<!ENTITY % remote SYSTEM "file:///etc/passwd"> %remote;]>', 'declares XML entities'),
    ('<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
     'more than one document type declaration'),
], ids=['external-file', 'external-url', 'public-id', 'relative-path', 'internal-subset', 'parameter-entity', 'two-doctypes'])
def test_a_dtd_that_is_not_nvidia_smis_is_refused_before_parsing(doctype, message):
    with pytest.raises(NvidiaSmiParseError, match=message):
        parse_xml(_with_doctype(A100, doctype))


def test_billion_laughs_is_refused_before_any_expansion():
    with pytest.raises(NvidiaSmiParseError, match='declares XML entities'):
        parse_xml(BILLION_LAUGHS)
    with pytest.raises(NvidiaSmiParseError, match='declares XML entities'):
        parse_xml(BILLION_LAUGHS.encode('utf-8'))


@pytest.mark.parametrize('name', XML_SAMPLES)
def test_every_real_doctype_is_accepted(name):
    """The refusal is not a refusal of every DOCTYPE: each real sample carries nvidia-smi's own and parses."""
    assert '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v' in _xml(name).decode('utf-8')
    assert _parsed(name)['gpu_count'] >= 1


def test_an_oversized_document_is_refused_without_parsing(monkeypatch):
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _nvidia_smi  # pylint: disable=import-outside-toplevel
    text = _xml(A100).decode('utf-8')
    monkeypatch.setattr(_nvidia_smi, 'XML_MAX_CHARS', len(text) - 1)
    with pytest.raises(NvidiaSmiParseError, match='characters long; an nvidia-smi -q -x document has at most %d' % (len(text) - 1)):
        parse_xml(text)
    monkeypatch.setattr(_nvidia_smi, 'XML_MAX_CHARS', len(text))
    assert parse_xml(text)['gpu_count'] == 1


def test_the_limit_leaves_room_for_a_large_real_node():
    """16 GPUs of the largest real sample's size (two GPUs with every section) fit far below the limit."""
    from ansible_collections.gpufleet.lifecycle.plugins.module_utils._nvidia_smi import XML_MAX_CHARS  # pylint: disable=import-outside-toplevel
    assert len(_xml(RTX2070X2)) * 8 * 4 < XML_MAX_CHARS


@pytest.mark.parametrize('rc, printed, message', [
    (-11, '', 'nvidia-smi was killed by signal 11 (SIGSEGV) and printed nothing'),
    (-9, 'Timestamp : Tue\n', 'nvidia-smi was killed by signal 9 (SIGKILL): Timestamp : Tue'),
    (139, '', 'nvidia-smi exited with return code 139 and printed nothing'),
])
def test_a_tool_killed_by_a_signal_is_named_so(rc, printed, message):
    failure = classify_failure(rc, printed, '')
    assert failure['reason'] == 'nvidia_smi_failed' and failure['message'] == message


# --------------------------------------------------------------------------- classify_failure

@pytest.mark.parametrize('name, reason, message, nvml_version', [
    ('nvml-mismatch_470-branch_popos-issue18.txt', 'driver_library_mismatch',
     'Failed to initialize NVML: Driver/library version mismatch', None),
    ('nvml-mismatch_570.124_tinygrad-ogkm-issue47.txt', 'driver_library_mismatch',
     'Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.124', '570.124'),
    ('nvidia-smi-couldnt-communicate_shine-cluster-issue50.txt', 'driver_unreachable',
     "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
     "Make sure that the latest NVIDIA driver is installed and running.", None),
    ('nvidia-smi-no-devices-found_rtx5090_ogkm-issue862.txt', 'no_devices', 'No devices were found', None),
])
@pytest.mark.parametrize('stream', ['stdout', 'stderr'])
def test_classify_real_failures(name, reason, message, nvml_version, stream):
    text = _read('errors', name)
    if stream == 'stdout':
        result = classify_failure(9, text, '')
    else:
        result = classify_failure(9, None, text.encode('utf-8'))
    assert result == {'reason': reason, 'message': message, 'nvml_library_version': nvml_version}


@pytest.mark.parametrize('stdout, stderr, reason, message', [
    ('', 'Unable to determine the device handle for GPU0000:08:00.0: Unknown Error\n', 'gpu_lost',
     'Unable to determine the device handle for GPU0000:08:00.0: Unknown Error'),
    ('Unable to determine the device handle for GPU0: 0000:01:00.0: Unknown Error\nNo devices were found\n', '', 'gpu_lost',
     'Unable to determine the device handle for GPU0: 0000:01:00.0: Unknown Error'),
    ('', 'Unable to determine the device handle for GPU 0000:04:00.0: GPU is lost.  Reboot the system to recover this GPU\n',
     'gpu_lost', 'Unable to determine the device handle for GPU 0000:04:00.0: GPU is lost.  Reboot the system to recover this GPU'),
    ('GPU 00000000:3B:00.0: GPU has fallen off the bus.\n', '', 'gpu_lost', 'GPU 00000000:3B:00.0: GPU has fallen off the bus.'),
    # Typographic apostrophe, as issue trackers often re-type the message.
    ('NVIDIA-SMI has failed because it couldn\u2019t communicate with the NVIDIA driver.\n', '', 'driver_unreachable',
     'NVIDIA-SMI has failed because it couldn\u2019t communicate with the NVIDIA driver.'),
    # "Unknown Error" alone (containers that lost device access) is not a lost GPU.
    ('Failed to initialize NVML: Unknown Error\n', '', 'nvidia_smi_failed', 'Failed to initialize NVML: Unknown Error'),
    ('', 'bash: nvidia-smi: command not found\n', 'nvidia_smi_failed', 'bash: nvidia-smi: command not found'),
    ('partial\n\n', '  second line  \n', 'nvidia_smi_failed', 'partial\nsecond line'),
])
def test_classify_other_failures(stdout, stderr, reason, message):
    result = classify_failure(255, stdout, stderr)
    assert result == {'reason': reason, 'message': message, 'nvml_library_version': None}


def test_classify_without_output_names_the_return_code():
    result = classify_failure(127, None, None)
    assert result['reason'] == 'nvidia_smi_failed'
    assert '127' in result['message']
    assert result['nvml_library_version'] is None


# --------------------------------------------------------------------------- find_kernel_gpu_errors

KERNEL_SAMPLES = [
    ('dmesg-gpu-fallen-off-bus_no-xid_l40_570.158.01_nvsentinel-issue155.txt', [
        ('fallen_off_bus', '0000:b3:00.0', None),
    ]),
    ('dmesg-nvrm-gpu-not-supported_h100_550.90.07_nvtrust-issue55.txt', [
        ('gpu_not_supported', '0000:01:00.0', None),
        ('gpu_not_supported', '0000:01:00.0', None),
    ]),
    ('syslog-rminitadapter-failed_rtx5090_ogkm-issue862.txt', [
        ('rm_init_adapter_failed', '0000:01:00.0', None),
        ('rm_init_adapter_failed', '0000:01:00.0', None),
    ]),
    ('xid_dmesg-ctime_13-109_gpud-pr46.txt', [
        ('xid', '0000:cb:00', 13),
        ('xid', '0000:cb:00', 13),
        ('xid', '0000:cb:00', 13),
        ('xid', '0000:cb:00', 109),
    ]),
    ('xid_nvlink5_144-145-149_kmsg_gpud-prs1160-1174.txt', [
        ('xid', '0019:01:00', 149),
        ('xid', '0000:00:00', 149),
        ('xid', '0018:01:00', 145),
        ('xid', '0000:9b:00', 94),
        ('xid', '0000:01:00', 144),
        ('xid', '0000:00:00', 149),
    ]),
]


@pytest.mark.parametrize('name, expected', KERNEL_SAMPLES)
def test_kernel_errors_in_real_logs(name, expected):
    found = find_kernel_gpu_errors(_read('errors', name))
    assert [(item['kind'], item['pci'], item['xid']) for item in found] == expected
    for item in found:
        assert item['line'] and item['line'] == item['line'].strip()


def test_kernel_multi_line_report_keeps_all_its_lines():
    found = find_kernel_gpu_errors(_read('errors', 'dmesg-gpu-fallen-off-bus_no-xid_l40_570.158.01_nvsentinel-issue155.txt'))
    assert found[0]['line'] == (
        '[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n'
        'NVRM: (PCI ID: 10de:26b5) installed in this system has\n'
        'NVRM: fallen off the bus and is not responding to commands.')


def test_kernel_not_supported_report_without_timestamp_on_first_line():
    found = find_kernel_gpu_errors(_read('errors', 'dmesg-nvrm-gpu-not-supported_h100_550.90.07_nvtrust-issue55.txt'))
    assert found[0]['line'] == (
        'The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:2330)\n'
        '[   38.034696] NVRM: installed in this system is not supported by the\n'
        '[   38.034696] NVRM: NVIDIA 550.90.07 driver release.')


def test_kernel_rm_init_adapter_line():
    found = find_kernel_gpu_errors(_read('errors', 'syslog-rminitadapter-failed_rtx5090_ogkm-issue862.txt').encode('utf-8'))
    assert found[1]['line'] == 'Jul 01 22:55:07 gpu kernel: NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:884)'


@pytest.mark.parametrize('text, expected', [
    ('NVRM: Xid (PCI:0000:44:00): 79, pid=0, GPU has fallen off the bus.', [('xid', '0000:44:00', 79)]),
    ('NVRM: Xid (0000:03:00): 31, Ch 00000001, engmask 00000101', [('xid', '0000:03:00', 31)]),
    ('NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.', [('fallen_off_bus', '0000:3b:00.0', None)]),
    ('', []),
    (None, []),
    ('[    5.1] nvidia: loading out-of-tree module taints kernel.\n[    5.2] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05', []),
])
def test_kernel_errors_other_forms(text, expected):
    assert [(item['kind'], item['pci'], item['xid']) for item in find_kernel_gpu_errors(text)] == expected


# --------------------------------------------------------------------------- parse_proc_driver_version

@pytest.mark.parametrize('text, expected', [
    ('NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024\n'
     'GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n', '550.127.05'),
    ('NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build  (dvs-builder@U16-I3-B03-4-3)  '
     'Wed Feb 26 01:53:18 UTC 2025\nGCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)\n', '570.124.06'),
    ('NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  540.4.0  Release Build  (buildbrain@mobile-u64-6336-d8000)', '540.4.0'),
    ('NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.81  Wed Aug 17 22:24:07 PDT 2016', '384.81'),
    (b'NVRM version: NVIDIA UNIX x86_64 Kernel Module  515.65.01  Wed Mar 16 11:24:05 UTC 2022\n', '515.65.01'),
    ('GCC version:  gcc version 12.2.0 (GCC)\n', None),
    ('', None),
    (None, None),
])
def test_parse_proc_driver_version(text, expected):
    assert parse_proc_driver_version(text) == expected


def test_a_corrupted_kernel_log_line_is_read_with_escapes():
    # A real Xid report with a flipped byte and a terminal escape spliced in (what a torn /dev/kmsg read gives).
    data = _read('errors', 'xid_dmesg-ctime_13-109_gpud-pr46.txt', 'rb')
    lines = data.splitlines()
    index = next(i for i, line in enumerate(lines) if b'NVRM: Xid' in line)
    lines[index] = lines[index].replace(b'NVRM: Xid', b'\xff\x1b[2J NVRM: Xid', 1)
    found = find_kernel_gpu_errors(b'\n'.join(lines))
    assert [(item['kind'], item['xid']) for item in found] == [('xid', 13), ('xid', 13), ('xid', 13), ('xid', 109)]
    assert '\\xff\\x1b[2J NVRM: Xid' in found[0]['line'] and '\x1b' not in found[0]['line']


@pytest.mark.parametrize('name, expected', [
    ('proc-driver-nvidia-version_580.173.02_nvml-mismatch_truenas-nvidia-drivers-issue19.txt', '580.173.02'),
    ('proc-driver-nvidia-version_open_565.57.01_ubuntu24.04_nixGL-issue186.txt', '565.57.01'),
    ('proc-driver-nvidia-version_384.98_ubuntu_neofetch-issue876.txt', '384.98'),
    ('proc-driver-nvidia-version_open_580.159.04_h200-device.txt', '580.159.04'),
])
def test_parse_proc_driver_version_real_files(name, expected):
    # The module's own banner, never the compiler's version on the next line.
    assert parse_proc_driver_version(read_real_output('proc', name)) == expected


@pytest.mark.parametrize('category, name, expected', [
    ('proc', 'proc-driver-nvidia-version_580.173.02_nvml-mismatch_truenas-nvidia-drivers-issue19.txt', 'proprietary'),
    ('proc', 'proc-driver-nvidia-version_384.98_ubuntu_neofetch-issue876.txt', 'proprietary'),
    ('proc', 'proc-driver-nvidia-version_open_565.57.01_ubuntu24.04_nixGL-issue186.txt', 'open'),
    ('proc', 'proc-driver-nvidia-version_open_580.159.04_h200-device.txt', 'open'),
    ('h100-device', 'proc-driver-nvidia-version_580.159.04_open.txt', 'open'),
])
def test_kernel_module_flavor_real_banners(category, name, expected):
    assert parse_kernel_module_flavor(read_real_output(category, name)) == expected


@pytest.mark.parametrize('text, expected', [
    ('NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  540.4.0  Release Build  (buildbrain@mobile-u64-6336-d8000)', 'open'),
    ('NVRM version: NVIDIA UNIX aarch64 Kernel Module  580.173.02  Wed Sep  3 10:00:00 UTC 2025\n', 'proprietary'),
    (b'NVRM version: NVIDIA UNIX x86_64 Kernel Module  515.65.01  Wed Mar 16 11:24:05 UTC 2022\n', 'proprietary'),
    # Not the banner's first line, another module, no module: not recognised, never guessed.
    ('GCC version:  gcc version 12.2.0 (GCC)\nNVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05\n', None),
    ('NVRM version: NVIDIA UNIX Kernel Module for sparc64  550.127.05\n', None),
    ('NVRM version: NVIDIA UNIX x86_64 Kernel Module\n', None),
    ('', None),
    (None, None),
])
def test_kernel_module_flavor_forms(text, expected):
    assert parse_kernel_module_flavor(text) == expected


def test_the_facts_module_on_the_real_h200_read_what_its_nvidia_smi_printed():
    # gpu_facts ran on the H200 seconds after the XML capture (tests/unit/fixtures/real-outputs/h200-device): the module's
    # record of the GPU matches this parser's reading of the captured XML, field by field (readings that move are left out).
    text = read_real_output('h200-device', 'gpu_facts-module-result_h200.txt')
    facts = json.loads(text[text.index('{'):])['ansible_facts']['gpufleet']
    document = _parsed(H200)
    assert (facts['driver_version'], facts['cuda_driver_version'], facts['gpu_count']) == ('580.159.04', '13.0', 1)
    # The module then (before issue 27) said null for a driver no package owns; it now says unowned (test__facts_h100.py).
    assert facts['health'] == 'ok' and facts['driver_source'] is None
    moving = {'temperature_c'}
    assert {key: value for key, value in facts['gpus'][0].items() if key not in moving} == \
        {key: value for key, value in document['gpus'][0].items() if key not in moving}
