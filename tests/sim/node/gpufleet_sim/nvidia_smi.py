# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fake ``nvidia-smi``: the real output formats, printed from the node state.

Supported: ``-q``/``-a`` (text), ``-q -x`` (XML, DTD v12 below the 590 branch, v13 from it),
``--query-gpu=FIELDS --format=csv[,noheader][,nounits]``, ``-L``, ``-i ID[,ID]``, ``-f FILE``,
``-pm 0|1``, ``--version`` and the default table.  The driver is the one loaded at boot
(``boot.json``); NVML is the installed ``libnvidia-ml.so.1``.  Failures print the real texts and
exit with the real return codes: 9 (driver not loaded), 12 (no NVML library), 18 (driver/library
version mismatch), 15 (a GPU fell off the bus, fault ``xid`` with Xid 79), 6 (no such GPU), 2
(bad arguments or field), 4 (-pm without root).
"""

import os
import sys
import time
from xml.sax.saxutils import escape

from gpufleet_sim import state

RC_OK = 0
RC_INVALID_ARGUMENT = 2
RC_NO_PERMISSION = 4
RC_NOT_FOUND = 6
RC_DRIVER_NOT_LOADED = 9
RC_LIBRARY_NOT_FOUND = 12
RC_GPU_IS_LOST = 15
RC_LIB_RM_VERSION_MISMATCH = 18

MSG_INVALID = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
MSG_NOT_LOADED = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                  "Make sure that the latest NVIDIA driver is installed and running.")
MSG_NO_LIBRARY = ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA "
                  "Display Driver is properly installed and present in your system.\n"
                  "Please also try adding directory that contains libnvidia-ml.so to your system PATH.")
MSG_MISMATCH = 'Failed to initialize NVML: Driver/library version mismatch'
MSG_NO_DEVICES = 'No devices were found'

N_A = 'N/A'

# Per-model details not in hardware.json (values from real captures of these SKUs).
_MODELS = {
    'NVIDIA H100 80GB HBM3': {
        'gpu_part': '2330-885-A1', 'subsystem': '16C110DE', 'inforom': ('G520.0200.00.05', '2.1', '7.16'),
        'pcie_gen': 5, 'bar1': 131072, 'reserved': 454, 'min_power': 200, 'idle_power': 69.5,
        'clocks': (345, 2619, 765), 'max_clocks': (1980, 2619, 1545), 'voltage': '685.000 mV', 'mig': 'Disabled',
        'gsp': True, 'rows_max': 2560, 'compute_cap': '9.0', 'hbm': True, 'module_ids': (2, 4, 1, 3, 6, 8, 5, 7),
        'temps': ('92 C', '89 C', '87 C', '95 C'), 'fabric_probe': True,
    },
    'NVIDIA A100-SXM4-80GB': {
        'gpu_part': '20B2-895-A1', 'subsystem': '147F10DE', 'inforom': ('G506.0212.00.01', '2.0', '6.16'),
        'pcie_gen': 4, 'bar1': 131072, 'reserved': 869, 'min_power': 100, 'idle_power': 61.2,
        'clocks': (210, 1593, 585), 'max_clocks': (1410, 1593, 1290), 'voltage': '712.500 mV', 'mig': 'Disabled',
        'gsp': True, 'rows_max': 640, 'compute_cap': '8.0', 'hbm': True, 'module_ids': (1, 2, 3, 4, 5, 6, 7, 8),
        'temps': ('92 C', '89 C', '85 C', '95 C'), 'fabric_probe': False,
    },
    'NVIDIA L40S': {
        'gpu_part': '26B9-896-A1', 'subsystem': '185110DE', 'inforom': ('G133.0242.00.03', '2.1', '6.16'),
        'pcie_gen': 4, 'bar1': 65536, 'reserved': 479, 'min_power': 100, 'idle_power': 33.4,
        'clocks': (210, 405, 1185), 'max_clocks': (2520, 9001, 1965), 'voltage': '875.000 mV', 'mig': N_A,
        'gsp': False, 'rows_max': 192, 'compute_cap': '8.9', 'hbm': False, 'module_ids': (1, 1, 1, 1),
        'temps': ('98 C', '95 C', '88 C', N_A), 'fabric_probe': False,
    },
}
_GENERIC_MODEL = {
    'gpu_part': N_A, 'subsystem': '000010DE', 'inforom': (N_A, N_A, N_A), 'pcie_gen': 4, 'bar1': 65536, 'reserved': 500,
    'min_power': 100, 'idle_power': 40.0, 'clocks': (210, 405, 1000), 'max_clocks': (1500, 1500, 1500), 'voltage': N_A,
    'mig': N_A, 'gsp': False, 'rows_max': 192, 'compute_cap': N_A, 'hbm': False, 'module_ids': (1,),
    'temps': ('90 C', '87 C', '85 C', N_A), 'fabric_probe': False,
}


class Usage(Exception):
    """Bad command line."""


# --------------------------------------------------------------------------- arguments

_FLAGS = {
    '-q': 'query', '--query': 'query', '-a': 'query', '-x': 'xml', '--xml-format': 'xml', '-L': 'list',
    '--list-gpus': 'list', '-h': 'help', '--help': 'help', '--version': 'version', '-u': 'ignored', '--unit': 'ignored',
}
_VALUED = {
    '-i': 'id', '--id': 'id', '--query-gpu': 'query_gpu', '--format': 'format', '-f': 'filename', '--filename': 'filename',
    '-d': 'display', '--display': 'display', '-pm': 'persistence', '--persistence-mode': 'persistence',
    '-lms': 'ignored', '-l': 'ignored', '--loop': 'ignored',
}


def parse_args(argv):
    """Command line -> dict of options (raises Usage)."""
    options = {}
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        name, sep, value = token.partition('=')
        if token in _FLAGS:
            options[_FLAGS[token]] = True
            continue
        if name in _VALUED:
            if not sep:
                if index >= len(argv):
                    raise Usage(token)
                value = argv[index]
                index += 1
            options[_VALUED[name]] = value
            continue
        if token.startswith('-i') and len(token) > 2 and token[2:].replace(',', '').isdigit():
            options['id'] = token[2:]
            continue
        raise Usage(token)
    return options


# --------------------------------------------------------------------------- the GPUs

def _model(gpu):
    return _MODELS.get(gpu.get('model'), _GENERIC_MODEL)


def _fabric(hardware, gpu):
    """(state, status, clique, cluster) of the GPU's NVLink fabric registration.

    NVML reports fabric registration for Hopper and newer GPUs only (nvmlDeviceGetGpuFabricInfo); it
    completes once Fabric Manager runs on an NVSwitch system.
    """
    if hardware.get('nvswitch_count', 0) > 0 and _model(gpu).get('fabric_probe'):
        if state.fabricmanager_running():
            return 'Completed', 'Success', '0', '00000000-0000-0000-0000-000000000000'
        return 'In Progress', N_A, N_A, N_A
    return N_A, N_A, N_A, N_A


def describe(hardware, driver):
    """One dict per GPU with every value the renderers print."""
    daemon_running = state.persistenced_running()
    legacy = state.legacy_persistence_modes()
    gpus = []
    for index, gpu in enumerate(hardware.get('gpus') or []):
        model = _model(gpu)
        bus_id = gpu.get('pci_bus_id', '00000000:%02X:00.0' % index)
        domain, bus, rest = bus_id.split(':', 2)
        device = rest.split('.')[0]
        total = int(gpu.get('memory_mib', 0))
        used = 1
        reserved = min(model['reserved'], total)
        limit = float(gpu.get('power_limit_w', 0))
        temp = 28 + (index * 3) % 7
        fabric = _fabric(hardware, gpu)
        # Per GPU: an explicit ``nvidia-smi -i N -pm 0|1`` of this boot (which nvidia-smi forwards to the daemon while it
        # runs), else enabled while nvidia-persistenced runs.
        persistence = legacy[bus_id] if bus_id in legacy else daemon_running
        module_ids = model['module_ids']
        device_id = (gpu.get('pci_device_id') or '0x000010DE').upper().replace('0X', '')
        gpus.append({
            'index': index,
            'name': gpu.get('model', 'NVIDIA GPU'),
            'architecture': gpu.get('architecture', N_A),
            'uuid': gpu.get('uuid', N_A),
            'serial': gpu.get('serial', N_A),
            'vbios': gpu.get('vbios', N_A),
            'board_part_number': gpu.get('board_part_number', N_A),
            'gpu_part_number': model['gpu_part'],
            'module_id': module_ids[index % len(module_ids)],
            'bus_id': bus_id,
            'short_bus_id': '%s:%s:%s' % (domain[-4:], bus, rest),
            'domain': domain[-4:],
            'bus': bus,
            'device': device,
            'board_id': '0x%x00' % int(bus, 16),
            'device_id': device_id,
            'subsystem': model['subsystem'],
            'inforom': model['inforom'],
            'gsp': driver if model['gsp'] else N_A,
            'pcie_gen': model['pcie_gen'],
            'persistence': 'Enabled' if persistence else 'Disabled',
            'mig': model['mig'],
            'memory_total': total,
            'memory_reserved': reserved,
            'memory_used': used,
            'memory_free': max(total - reserved - used, 0),
            'bar1': model['bar1'],
            'temp': temp,
            'memory_temp': (temp + 6) if model['hbm'] else None,
            'temps': model['temps'],
            'power_draw': model['idle_power'] + (index * 37 % 100) / 100.0,
            'power_limit': limit,
            'min_power': float(model['min_power']),
            'clocks': model['clocks'],
            'max_clocks': model['max_clocks'],
            'voltage': model['voltage'],
            'rows_max': model['rows_max'],
            'compute_cap': model['compute_cap'],
            'fabric_state': fabric[0],
            'fabric_status': fabric[1],
            'clique': fabric[2],
            'cluster': fabric[3],
            'pstate': 'P0',
        })
    return gpus


def _select(gpus, selector):
    """GPUs named by ``-i`` (indexes, UUIDs or PCI bus ids, comma-separated); None when one is unknown."""
    if selector is None:
        return gpus
    chosen = []
    for token in selector.split(','):
        token = token.strip()
        match = None
        for gpu in gpus:
            if token.isdigit() and int(token) == gpu['index']:
                match = gpu
            elif token.upper() == gpu['uuid'].upper() or token.upper() in (gpu['bus_id'].upper(), gpu['short_bus_id'].upper()):
                match = gpu
        if match is None:
            return None
        if match not in chosen:
            chosen.append(match)
    return chosen


def _w(value):
    return '%.2f W' % value


def _mib(value):
    return '%d MiB' % value


def _mhz(value):
    return '%d MHz' % value


# --------------------------------------------------------------------------- the -q field table

# One table drives the three ``-q`` printers: XML DTD v12 (below the 590 branch), XML DTD v13 (590 and later)
# and the text report. A row is Field(xml tag, text label, value, children, on):
#   - ``xml``/``text``: the element tag and the text label (None: the row is not in that format);
#   - ``value``: a string, or a function (gpu, view) -> string, None (an empty element ``<tag />``), '\n' (an element
#     with an empty line), 'text\n' (the text on its own line) or a ready list of (tag, value) pairs;
#   - ``children``: rows of a section (a row has a value or children; neither means N/A);
#   - ``on``: a function (view) -> bool, where the row is printed (default: everywhere).
# ``view.fmt`` is 'x12', 'x13' or 'text'; ``view.branch`` the driver branch. A row that sits at different places
# in two formats (gsp_firmware_version moved in v13) appears once per place, each with its ``on``.

class Field(object):  # pylint: disable=too-few-public-methods
    """One row of the ``-q`` field table."""

    __slots__ = ('xml', 'text', 'value', 'children', 'on')

    def __init__(self, xml, text, value=N_A, children=None, on=None):
        self.xml = xml
        self.text = text
        self.value = value
        self.children = children
        self.on = on


class _View(object):  # pylint: disable=too-few-public-methods
    """The format being printed and the driver branch it imitates."""

    def __init__(self, fmt, branch):
        self.fmt = fmt
        self.branch = branch


def _on(*formats, **bounds):
    """Predicate: the view's format is one of ``formats`` (all when none) and ``since <= branch < before``."""
    since = bounds.get('since', 0)
    before = bounds.get('before', 10 ** 6)
    return lambda view: (not formats or view.fmt in formats) and since <= view.branch < before


X12, X13, TEXT = 'x12', 'x13', 'text'
_XML = (X12, X13)


def _g(key, position=None):
    """The GPU's ``key`` (item ``position`` of it) as printed."""
    if position is None:
        return lambda gpu, view: str(gpu[key])
    return lambda gpu, view: str(gpu[key][position])


def _hex(key):
    """PCI numbers: ``18`` in XML, ``0x18`` in the text report."""
    return lambda gpu, view: ('0x' if view.fmt == TEXT else '') + gpu[key]


def _watts(key, offset=0.0):
    return lambda gpu, view: _w(gpu[key] - offset)


def _mib_of(key, less=0):
    return lambda gpu, view: _mib(gpu[key] - less)


def _mhz_of(key, position, step=0):
    return lambda gpu, view: _mhz(gpu[key][position] - step)


def _pcie(gpu, view):
    return str(gpu['pcie_gen'])


_NEW_POWER = _on(since=580)
_OLD_POWER = _on(before=580)
_LIMITS = [
    Field('current_power_limit', 'Current Power Limit', _watts('power_limit')),
    Field('requested_power_limit', 'Requested Power Limit', _watts('power_limit')),
    Field('default_power_limit', 'Default Power Limit', _watts('power_limit')),
    Field('min_power_limit', 'Min Power Limit', _watts('min_power')),
    Field('max_power_limit', 'Max Power Limit', _watts('power_limit')),
]
_LIMITS_N_A = [Field(field.xml, field.text) for field in _LIMITS]
_ECC_COUNTERS = [
    Field('sram_correctable', 'SRAM Correctable', '0'),
    Field('sram_uncorrectable', None, '0'),
    Field(None, 'SRAM Uncorrectable Parity', '0'),
    Field(None, 'SRAM Uncorrectable SEC-DED', '0'),
    Field('dram_correctable', 'DRAM Correctable', '0'),
    Field('dram_uncorrectable', 'DRAM Uncorrectable', '0'),
]
_HEALTH_570 = _on(since=570)


def _supported_clocks(gpu, view):
    return [('supported_mem_clock', [('value', _mhz(gpu['max_clocks'][1]))] + [
        ('supported_graphics_clock', _mhz(gpu['max_clocks'][0] - step * 15)) for step in range(0, 6)])]


GPU_FIELDS = [
    Field('product_name', 'Product Name', _g('name')),
    Field('product_brand', 'Product Brand', 'NVIDIA'),
    Field('product_architecture', 'Product Architecture', _g('architecture')),
    Field('display_mode', 'Display Mode', 'Enabled', on=_on(X12, TEXT)),
    Field('display_mode', None, 'Requested functionality has been deprecated', on=_on(X13)),
    Field('display_attached', None, 'No', on=_on(X13)),
    Field('display_active', 'Display Active', 'Disabled'),
    Field('persistence_mode', 'Persistence Mode', _g('persistence')),
    Field('addressing_mode', 'Addressing Mode', 'None'),
    Field('mig_mode', 'MIG Mode', children=[Field('current_mig', 'Current', _g('mig')), Field('pending_mig', 'Pending', _g('mig'))]),
    Field('mig_devices', None, 'None\n'),
    Field('accounting_mode', 'Accounting Mode', 'Disabled'),
    Field('accounting_mode_buffer_size', 'Accounting Mode Buffer Size', '4000'),
    Field('driver_model', 'Driver Model', children=[Field('current_dm', 'Current'), Field('pending_dm', 'Pending')]),
    Field('serial', 'Serial Number', _g('serial')),
    Field('uuid', 'GPU UUID', _g('uuid')),
    Field('pdi', None, lambda gpu, view: '0x%016x' % (int(gpu['serial'], 10) if gpu['serial'].isdigit() else 0), on=_on(X13)),
    Field('minor_number', 'Minor Number', _g('index')),
    Field('vbios_version', 'VBIOS Version', _g('vbios')),
    Field('multigpu_board', 'MultiGPU Board', 'No'),
    Field('board_id', 'Board ID', _g('board_id')),
    Field('board_part_number', 'Board Part Number', _g('board_part_number')),
    Field('gpu_part_number', 'GPU Part Number', _g('gpu_part_number')),
    Field('gpu_fru_part_number', 'FRU Part Number'),
    Field('gpu_module_id', None, _g('module_id'), on=_on(X12)),
    Field(None, 'Module ID', _g('module_id'), on=_on(TEXT, before=560)),
    Field('platformInfo', 'Platform Info', on=_on(X13, TEXT, since=560), children=[
        Field('chassis_serial_number', 'RACK Serial Number'),
        Field('slot_number', 'Chassis Physical Slot Number'),
        Field('tray_index', 'Compute Slot Index'),
        Field('host_id', 'Node Index'),
        Field('peer_type', 'Peer Type'),
        Field('module_id', 'Module Id', _g('module_id')),
        Field('gpu_fabric_guid', None),
    ]),
    Field('inforom_version', 'Inforom Version', children=[
        Field('img_version', 'Image Version', _g('inforom', 0)),
        Field('oem_object', 'OEM Object', _g('inforom', 1)),
        Field('ecc_object', 'ECC Object', _g('inforom', 2)),
        Field('pwr_object', 'Power Management Object'),
    ]),
    Field('inforom_bbx_flush', 'Inforom BBX Object Flush', on=_on(X13, TEXT), children=[
        Field('latest_timestamp', 'Latest Timestamp'), Field('latest_duration', 'Latest Duration')]),
    Field('gpu_operation_mode', 'GPU Operation Mode', children=[Field('current_gom', 'Current'), Field('pending_gom', 'Pending')]),
    Field('c2c_mode', 'GPU C2C Mode', 'Disabled', on=_on(X13, TEXT)),
    Field('gsp_firmware_version', None, _g('gsp'), on=_on(X12)),
    Field('gpu_virtualization_mode', 'GPU Virtualization Mode', children=[
        Field('virtualization_mode', 'Virtualization Mode', 'None'),
        Field('host_vgpu_mode', 'Host VGPU Mode'),
        Field('vgpu_heterogeneous_mode', 'vGPU Heterogeneous Mode', on=_on(X13, TEXT)),
    ]),
    Field('gpu_reset_status', 'GPU Reset Status', on=_on(X12, TEXT), children=[
        Field('reset_required', 'Reset Required', 'No'), Field('drain_and_reset_recommended', 'Drain and Reset Recommended', 'No')]),
    Field('gpu_recovery_action', None, 'None', on=_on(X13)),
    Field('gsp_firmware_version', 'GSP Firmware Version', _g('gsp'), on=_on(X13, TEXT)),
    Field('ibmnpu', 'IBMNPU', children=[Field('relaxed_ordering_mode', 'Relaxed Ordering Mode')]),
    Field('pci', 'PCI', children=[
        Field('pci_bus', 'Bus', _hex('bus')),
        Field('pci_device', 'Device', _hex('device')),
        Field('pci_domain', 'Domain', _hex('domain')),
        Field('pci_base_class', 'Base Classcode', lambda gpu, view: ('0x' if view.fmt == TEXT else '') + '3', on=_on(X13, TEXT)),
        Field('pci_sub_class', 'Sub Classcode', lambda gpu, view: ('0x' if view.fmt == TEXT else '') + '2', on=_on(X13, TEXT)),
        Field('pci_device_id', 'Device Id', _hex('device_id')),
        Field('pci_bus_id', 'Bus Id', _g('bus_id')),
        Field('pci_sub_system_id', 'Sub System Id', _hex('subsystem')),
        Field('pci_gpu_link_info', 'GPU Link Info', children=[
            Field('pcie_gen', 'PCIe Generation', children=[
                Field('max_link_gen', 'Max', _pcie), Field('current_link_gen', 'Current', _pcie),
                Field('device_current_link_gen', 'Device Current', _pcie), Field('max_device_link_gen', 'Device Max', _pcie),
                Field('max_host_link_gen', 'Host Max', _pcie),
            ]),
            Field('link_widths', 'Link Width', children=[Field('max_link_width', 'Max', '16x'), Field('current_link_width', 'Current', '16x')]),
        ]),
        Field('pci_bridge_chip', 'Bridge Chip', children=[Field('bridge_chip_type', 'Type'), Field('bridge_chip_fw', 'Firmware')]),
        Field('replay_counter', 'Replays Since Reset', '0'),
        Field('replay_rollover_counter', 'Replay Number Rollovers', '0'),
        Field('tx_util', 'Tx Throughput', '0 KB/s'),
        Field('rx_util', 'Rx Throughput', '0 KB/s'),
        Field('atomic_caps_inbound', 'Atomic Caps Inbound'),
        Field('atomic_caps_outbound', 'Atomic Caps Outbound'),
    ]),
    Field('fan_speed', 'Fan Speed'),
    Field('performance_state', 'Performance State', _g('pstate')),
    Field('clocks_event_reasons', 'Clocks Event Reasons', children=[
        Field('clocks_event_reason_gpu_idle', 'Idle', 'Active'),
        Field('clocks_event_reason_applications_clocks_setting', 'Applications Clocks Setting', 'Not Active'),
        Field('clocks_event_reason_sw_power_cap', 'SW Power Cap', 'Not Active'),
        Field('clocks_event_reason_hw_slowdown', 'HW Slowdown', 'Not Active'),
        Field('clocks_event_reason_hw_thermal_slowdown', '    HW Thermal Slowdown', 'Not Active'),
        Field('clocks_event_reason_hw_power_brake_slowdown', '    HW Power Brake Slowdown', 'Not Active'),
        Field('clocks_event_reason_sync_boost', 'Sync Boost', 'Not Active'),
        Field('clocks_event_reason_sw_thermal_slowdown', 'SW Thermal Slowdown', 'Not Active'),
        Field('clocks_event_reason_display_clocks_setting', 'Display Clock Setting', 'Not Active'),
    ]),
    Field('clocks_event_reasons_counters', None, on=_on(X13), children=[
        Field('clocks_event_reasons_counters_sw_power_cap', None, '0 us'),
        Field('clocks_event_reasons_counters_sync_boost', None, '0 us'),
        Field('clocks_event_reasons_counters_sw_therm_slowdown', None, '0 us'),
        Field('clocks_event_reasons_counters_hw_therm_slowdown', None, '0 us'),
        Field('clocks_event_reasons_counters_hw_power_brake', None, '0 us'),
    ]),
    Field('sparse_operation_mode', 'Sparse Operation Mode', 'Disabled', on=_on(X13, TEXT)),
    Field('fb_memory_usage', 'FB Memory Usage', children=[
        Field('total', 'Total', _mib_of('memory_total')), Field('reserved', 'Reserved', _mib_of('memory_reserved')),
        Field('used', 'Used', _mib_of('memory_used')), Field('free', 'Free', _mib_of('memory_free')),
    ]),
    Field('bar1_memory_usage', 'BAR1 Memory Usage', children=[
        Field('total', 'Total', _mib_of('bar1')), Field('used', 'Used', '1 MiB'), Field('free', 'Free', _mib_of('bar1', 1))]),
    Field('cc_protected_memory_usage', 'Conf Compute Protected Memory Usage', children=[
        Field('total', 'Total', '0 MiB'), Field('used', 'Used', '0 MiB'), Field('free', 'Free', '0 MiB')]),
    Field('compute_mode', 'Compute Mode', 'Default'),
    Field('utilization', 'Utilization', children=[
        Field('gpu_util', None, '0 %', on=_on(*_XML)),
        Field(None, 'Gpu', '0 %', on=_on(TEXT, before=580)),
        Field(None, 'GPU', '0 %', on=_on(TEXT, since=580)),
        Field('memory_util', 'Memory', '0 %'), Field('encoder_util', 'Encoder', '0 %'), Field('decoder_util', 'Decoder', '0 %'),
        Field('jpeg_util', 'JPEG', '0 %'), Field('ofa_util', 'OFA', '0 %'),
    ]),
    Field('encoder_stats', 'Encoder Stats', children=[
        Field('session_count', 'Active Sessions', '0'), Field('average_fps', 'Average FPS', '0'), Field('average_latency', 'Average Latency', '0')]),
    Field('fbc_stats', 'FBC Stats', children=[
        Field('session_count', 'Active Sessions', '0'), Field('average_fps', 'Average FPS', '0'), Field('average_latency', 'Average Latency', '0')]),
    Field('dram_encryption_mode', None, on=_on(X13), children=[Field('current_dram_encryption', None), Field('pending_dram_encryption', None)]),
    Field('ecc_mode', 'ECC Mode', children=[Field('current_ecc', 'Current', 'Enabled'), Field('pending_ecc', 'Pending', 'Enabled')]),
    Field('ecc_errors', 'ECC Errors', children=[
        Field('volatile', 'Volatile', children=_ECC_COUNTERS),
        Field('aggregate', 'Aggregate', children=_ECC_COUNTERS + [Field(None, 'SRAM Threshold Exceeded', 'No')]),
        Field(None, 'Aggregate Uncorrectable SRAM Sources', children=[
            Field(None, 'SRAM L2', '0'), Field(None, 'SRAM SM', '0'), Field(None, 'SRAM Microcontroller', '0'),
            Field(None, 'SRAM PCIE', '0'), Field(None, 'SRAM Other', '0')]),
    ]),
    Field('retired_pages', None, children=[
        Field('multiple_single_bit_retirement', None, children=[Field('retired_count', None), Field('retired_pagelist', None)]),
        Field('double_bit_retirement', None, children=[Field('retired_count', None), Field('retired_pagelist', None)]),
        Field('pending_blacklist', None),
        Field('pending_retirement', None),
    ]),
    Field(None, 'Retired Pages', children=[
        Field(None, 'Single Bit ECC'), Field(None, 'Double Bit ECC'), Field(None, 'Pending Page Blacklist')]),
    Field('remapped_rows', 'Remapped Rows', children=[
        Field('remapped_row_corr', 'Correctable Error', '0'),
        Field('remapped_row_unc', 'Uncorrectable Error', '0'),
        Field('remapped_row_pending', 'Pending', 'No'),
        Field('remapped_row_failure', 'Remapping Failure Occurred', 'No'),
        Field('row_remapper_histogram', 'Bank Remap Availability Histogram', children=[
            Field('row_remapper_histogram_max', 'Max', lambda gpu, view: '%d bank(s)' % gpu['rows_max']),
            Field('row_remapper_histogram_high', 'High', '0 bank(s)'),
            Field('row_remapper_histogram_partial', 'Partial', '0 bank(s)'),
            Field('row_remapper_histogram_low', 'Low', '0 bank(s)'),
            Field('row_remapper_histogram_none', 'None', '0 bank(s)'),
        ]),
    ]),
    Field('temperature', 'Temperature', children=[
        Field('gpu_temp', 'GPU Current Temp', lambda gpu, view: '%d C' % gpu['temp']),
        Field('gpu_temp_tlimit', 'GPU T.Limit Temp'),
        Field('gpu_temp_max_threshold', 'GPU Shutdown Temp', _g('temps', 0)),
        Field('gpu_temp_slow_threshold', 'GPU Slowdown Temp', _g('temps', 1)),
        Field('gpu_temp_max_gpu_threshold', 'GPU Max Operating Temp', _g('temps', 2)),
        Field('gpu_target_temperature', 'GPU Target Temperature'),
        Field('memory_temp', 'Memory Current Temp', lambda gpu, view: N_A if gpu['memory_temp'] is None else '%d C' % gpu['memory_temp']),
        Field('gpu_temp_max_mem_threshold', 'Memory Max Operating Temp', _g('temps', 3)),
    ]),
    Field('supported_gpu_target_temp', None, children=[Field('gpu_target_temp_min', None), Field('gpu_target_temp_max', None)]),
    Field('gpu_power_readings', 'GPU Power Readings', children=[
        Field('power_state', None, 'P0'),
        Field('power_draw', 'Power Draw', _watts('power_draw'), on=_OLD_POWER),
        Field('average_power_draw', 'Average Power Draw', _watts('power_draw'), on=_NEW_POWER),
        Field('instant_power_draw', 'Instantaneous Power Draw', _watts('power_draw', 0.4), on=_NEW_POWER),
    ] + _LIMITS),
    Field(None, 'GPU Memory Power Readings ', on=_on(TEXT, since=550), children=[
        Field(None, 'Power Draw', on=_OLD_POWER),
        Field(None, 'Average Power Draw', on=_NEW_POWER),
        Field(None, 'Instantaneous Power Draw', on=_NEW_POWER),
    ]),
    Field('gpu_memory_power_readings', None, on=_on(X13), children=[Field('average_power_draw', None), Field('instant_power_draw', None)]),
    Field('module_power_readings', 'Module Power Readings', children=[
        Field('power_state', None, 'P0'),
        Field('power_draw', 'Power Draw', on=_OLD_POWER),
        Field('average_power_draw', 'Average Power Draw', on=_NEW_POWER),
        Field('instant_power_draw', 'Instantaneous Power Draw', on=_NEW_POWER),
    ] + _LIMITS_N_A),
    Field('power_smoothing', None, on=_on(X13)),
    Field('power_profiles', None, on=_on(X13), children=[
        Field('power_profile_requested_profiles', None), Field('power_profile_enforced_profiles', None)]),
    Field('edpp_multiplier', None, on=_on(X13)),
    Field('clocks', 'Clocks', children=[
        Field('graphics_clock', 'Graphics', _mhz_of('clocks', 0)), Field('sm_clock', 'SM', _mhz_of('clocks', 0)),
        Field('mem_clock', 'Memory', _mhz_of('clocks', 1)), Field('video_clock', 'Video', _mhz_of('clocks', 2)),
    ]),
    Field('applications_clocks', 'Applications Clocks', children=[
        Field('graphics_clock', 'Graphics', _mhz_of('max_clocks', 0)), Field('mem_clock', 'Memory', _mhz_of('max_clocks', 1))]),
    Field('default_applications_clocks', 'Default Applications Clocks', children=[
        Field('graphics_clock', 'Graphics', _mhz_of('max_clocks', 0)), Field('mem_clock', 'Memory', _mhz_of('max_clocks', 1))]),
    Field('deferred_clocks', 'Deferred Clocks', children=[Field('mem_clock', 'Memory')]),
    Field('max_clocks', 'Max Clocks', children=[
        Field('graphics_clock', 'Graphics', _mhz_of('max_clocks', 0)), Field('sm_clock', 'SM', _mhz_of('max_clocks', 0)),
        Field('mem_clock', 'Memory', _mhz_of('max_clocks', 1)), Field('video_clock', 'Video', _mhz_of('max_clocks', 2)),
    ]),
    Field('max_customer_boost_clocks', 'Max Customer Boost Clocks', children=[Field('graphics_clock', 'Graphics', _mhz_of('max_clocks', 0))]),
    Field('clock_policy', 'Clock Policy', children=[Field('auto_boost', 'Auto Boost'), Field('auto_boost_default', 'Auto Boost Default')]),
    Field('voltage', 'Voltage', on=_on(X12, TEXT), children=[Field('graphics_volt', 'Graphics', _g('voltage'))]),
    Field('fabric', 'Fabric', children=[
        Field('state', 'State', _g('fabric_state')),
        Field('status', 'Status', _g('fabric_status')),
        Field('cliqueId', 'CliqueId', _g('clique'), on=_on(since=550)),
        Field('clusterUuid', 'ClusterUUID', _g('cluster'), on=_on(since=550)),
        Field('health', 'Health', on=_on(since=550), children=[
            Field('summary', 'Summary', on=_HEALTH_570),
            Field('bandwidth', 'Bandwidth'),
            Field('route_recovery_in_progress', 'Route Recovery in progress', on=_HEALTH_570),
            Field('route_unhealthy', 'Route Unhealthy', on=_HEALTH_570),
            Field('access_timeout_recovery', 'Access Timeout Recovery', on=_HEALTH_570),
            Field('incorrect_configuration', 'Incorrect Configuration', on=lambda view: view.fmt == X13 or (view.fmt == TEXT and view.branch >= 580)),
            Field(None, 'Partition Assigned', on=_on(TEXT, since=580)),
        ]),
    ]),
    Field('supported_clocks', None, _supported_clocks),
    Field('processes', 'Processes', lambda gpu, view: {X12: None, X13: '\n', TEXT: 'None'}[view.fmt]),
    Field('accounted_processes', None, lambda gpu, view: None if view.fmt == X12 else '\n'),
    Field('capabilities', None, on=_on(X13), children=[Field('egm', None, 'disabled')]),
]


def gpu_rows(gpu, fmt, branch, fields=None):
    """The (name, value) tree of one GPU in ``fmt`` ('x12', 'x13' or 'text') from :data:`GPU_FIELDS`."""
    view = _View(fmt, branch)
    rows = []
    for field in GPU_FIELDS if fields is None else fields:
        name = field.text if fmt == TEXT else field.xml
        if name is None or (field.on is not None and not field.on(view)):
            continue
        if field.children is not None:
            rows.append((name, gpu_rows(gpu, fmt, branch, field.children)))
        else:
            rows.append((name, field.value(gpu, view) if callable(field.value) else field.value))
    return rows


# --------------------------------------------------------------------------- XML

def _render_xml(lines, elements, level, unit):
    indent = unit * level
    for tag, value in elements:
        if value is None:
            lines.append('%s<%s />' % (indent, tag))
        elif isinstance(value, list):
            lines.append('%s<%s>' % (indent, tag))
            _render_xml(lines, value, level + 1, unit)
            lines.append('%s</%s>' % (indent, tag))
        elif value == '\n':
            lines.append('%s<%s>' % (indent, tag))
            lines.append('%s</%s>' % (indent, tag))
        elif value.endswith('\n'):
            lines.append('%s<%s>' % (indent, tag))
            lines.append('%s%s' % (indent + unit, escape(value.strip())))
            lines.append('%s</%s>' % (indent, tag))
        else:
            lines.append('%s<%s>%s</%s>' % (indent, tag, escape(value), tag))


def render_xml(gpus, attached, driver, timestamp):
    """The ``nvidia-smi -q -x`` document."""
    branch = state.branch_of(driver) or 0
    cuda = state.cuda_version_for(driver) or N_A
    v13 = branch >= 590
    unit = '\t' if v13 else '    '
    if v13:
        lines = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">']
    else:
        lines = ['<?xml version="1.0" encoding="UTF-8"?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">']
    lines.append('<nvidia_smi_log>')
    _render_xml(lines, [('timestamp', timestamp), ('driver_version', driver), ('cuda_version', cuda),
                        ('attached_gpus', str(attached))], 1, unit)
    for gpu in gpus:
        lines.append('%s<gpu id="%s">' % (unit, gpu['bus_id']))
        _render_xml(lines, gpu_rows(gpu, X13 if v13 else X12, branch), 2, unit)
        lines.append('%s</gpu>' % unit)
        if v13:
            lines.append('')
    lines.append('</nvidia_smi_log>')
    return '\n'.join(lines) + '\n'


# --------------------------------------------------------------------------- -q text

def _render_text(lines, items, level, width):
    for label, value in items:
        prefix = '    ' * level + label
        if isinstance(value, list):
            lines.append(prefix)
            _render_text(lines, value, level + 1, width)
        else:
            lines.append('%s: %s' % (prefix.ljust(width), value))


def render_text(gpus, attached, driver, timestamp):
    """The ``nvidia-smi -q`` report (label column of 42 characters, 55 from the 580 branch)."""
    branch = state.branch_of(driver) or 0
    width = 55 if branch >= 580 else 42
    lines = ['', '==============NVSMI LOG==============', '']
    _render_text(lines, [('Timestamp', timestamp), ('Driver Version', driver),
                         ('CUDA Version', state.cuda_version_for(driver) or N_A)], 0, width)
    lines.append('')
    _render_text(lines, [('Attached GPUs', str(attached))], 0, width)
    for gpu in gpus:
        lines.append('GPU %s' % gpu['bus_id'])
        _render_text(lines, gpu_rows(gpu, TEXT, branch), 1, width)
        lines.append('')
    return '\n'.join(lines) + '\n'


# --------------------------------------------------------------------------- CSV

# field -> (header unit or None, function(gpu, context) -> (value, value without unit))
def _fields():
    def plain(key):
        return lambda gpu, context: (str(gpu[key]),) * 2

    def unit(key, suffix):
        return lambda gpu, context: ('%s %s' % (gpu[key], suffix), str(gpu[key]))

    def const(value):
        return lambda gpu, context: (value, value)

    def watts(key):
        return lambda gpu, context: (_w(gpu[key]), '%.2f' % gpu[key])

    def mhz(key, position):
        return lambda gpu, context: ('%d MHz' % gpu[key][position], str(gpu[key][position]))

    return {
        'timestamp': (None, lambda gpu, context: (context['csv_timestamp'],) * 2),
        'driver_version': (None, lambda gpu, context: (context['driver'],) * 2),
        'count': (None, lambda gpu, context: (str(context['count']),) * 2),
        'name': (None, plain('name')),
        'serial': (None, plain('serial')),
        'uuid': (None, plain('uuid')),
        'pci.bus_id': (None, plain('bus_id')),
        'pci.domain': (None, lambda gpu, context: ('0x' + gpu['domain'],) * 2),
        'pci.bus': (None, lambda gpu, context: ('0x' + gpu['bus'],) * 2),
        'pci.device': (None, lambda gpu, context: ('0x' + gpu['device'],) * 2),
        'pci.device_id': (None, lambda gpu, context: ('0x' + gpu['device_id'],) * 2),
        'pci.sub_device_id': (None, lambda gpu, context: ('0x' + gpu['subsystem'],) * 2),
        'pcie.link.gen.current': (None, plain('pcie_gen')),
        'pcie.link.gen.max': (None, plain('pcie_gen')),
        'pcie.link.width.current': (None, const('16')),
        'pcie.link.width.max': (None, const('16')),
        'index': (None, plain('index')),
        'display_mode': (None, const('Enabled')),
        'display_active': (None, const('Disabled')),
        'persistence_mode': (None, plain('persistence')),
        'accounting.mode': (None, const('Disabled')),
        'driver_model.current': (None, const('[N/A]')),
        'driver_model.pending': (None, const('[N/A]')),
        'vbios_version': (None, plain('vbios')),
        'inforom.img': (None, lambda gpu, context: (gpu['inforom'][0],) * 2),
        'inforom.oem': (None, lambda gpu, context: (gpu['inforom'][1],) * 2),
        'inforom.ecc': (None, lambda gpu, context: (gpu['inforom'][2],) * 2),
        'inforom.pwr': (None, const('[N/A]')),
        'gom.current': (None, const('[N/A]')),
        'gom.pending': (None, const('[N/A]')),
        'fan.speed': ('%', const('[N/A]')),
        'pstate': (None, plain('pstate')),
        'memory.total': ('MiB', unit('memory_total', 'MiB')),
        'memory.reserved': ('MiB', unit('memory_reserved', 'MiB')),
        'memory.used': ('MiB', unit('memory_used', 'MiB')),
        'memory.free': ('MiB', unit('memory_free', 'MiB')),
        'compute_mode': (None, const('Default')),
        'compute_cap': (None, plain('compute_cap')),
        'utilization.gpu': ('%', lambda gpu, context: ('0 %', '0')),
        'utilization.memory': ('%', lambda gpu, context: ('0 %', '0')),
        'ecc.mode.current': (None, const('Enabled')),
        'ecc.mode.pending': (None, const('Enabled')),
        'ecc.errors.corrected.volatile.total': (None, const('0')),
        'ecc.errors.uncorrected.volatile.total': (None, const('0')),
        'ecc.errors.corrected.aggregate.total': (None, const('0')),
        'ecc.errors.uncorrected.aggregate.total': (None, const('0')),
        'retired_pages.single_bit_ecc.count': (None, const('[N/A]')),
        'retired_pages.double_bit.count': (None, const('[N/A]')),
        'retired_pages.pending': (None, const('[N/A]')),
        'remapped_rows.correctable': (None, const('0')),
        'remapped_rows.uncorrectable': (None, const('0')),
        'remapped_rows.pending': (None, const('No')),
        'remapped_rows.failure': (None, const('No')),
        'temperature.gpu': (None, plain('temp')),
        'temperature.memory': (None, lambda gpu, context: (('N/A',) * 2) if gpu['memory_temp'] is None else (str(gpu['memory_temp']),) * 2),
        'power.management': (None, const('Enabled')),
        'power.draw': ('W', watts('power_draw')),
        'power.limit': ('W', watts('power_limit')),
        'enforced.power.limit': ('W', watts('power_limit')),
        'power.default_limit': ('W', watts('power_limit')),
        'power.min_limit': ('W', watts('min_power')),
        'power.max_limit': ('W', watts('power_limit')),
        'clocks.current.graphics': ('MHz', mhz('clocks', 0)),
        'clocks.current.sm': ('MHz', mhz('clocks', 0)),
        'clocks.current.memory': ('MHz', mhz('clocks', 1)),
        'clocks.current.video': ('MHz', mhz('clocks', 2)),
        'clocks.max.graphics': ('MHz', mhz('max_clocks', 0)),
        'clocks.max.sm': ('MHz', mhz('max_clocks', 0)),
        'clocks.max.memory': ('MHz', mhz('max_clocks', 1)),
        'mig.mode.current': (None, lambda gpu, context: ('[N/A]',) * 2 if gpu['mig'] == N_A else (gpu['mig'],) * 2),
        'mig.mode.pending': (None, lambda gpu, context: ('[N/A]',) * 2 if gpu['mig'] == N_A else (gpu['mig'],) * 2),
        'fabric.state': (None, lambda gpu, context: (gpu['fabric_state'],) * 2),
        'fabric.status': (None, lambda gpu, context: (gpu['fabric_status'],) * 2),
    }


_ALIASES = {
    'gpu_name': 'name', 'gpu_serial': 'serial', 'gpu_uuid': 'uuid', 'gpu_bus_id': 'pci.bus_id', 'pstate': 'pstate',
    'persistence-mode': 'persistence_mode', 'clocks.gr': 'clocks.current.graphics', 'clocks.sm': 'clocks.current.sm',
    'clocks.mem': 'clocks.current.memory', 'clocks.video': 'clocks.current.video', 'clocks.max.gr': 'clocks.max.graphics',
    'clocks.max.mem': 'clocks.max.memory', 'ecc.mode.cur': 'ecc.mode.current', 'mig.mode.cur': 'mig.mode.current',
    'enforced.power.limit': 'enforced.power.limit', 'power.default.limit': 'power.default_limit',
    'power.min.limit': 'power.min_limit', 'power.max.limit': 'power.max_limit', 'performance_state': 'pstate',
    'memory.total': 'memory.total',
}


def render_csv(gpus, fields, fmt, context):
    """``--query-gpu`` output; raises Usage(field) for an unknown field."""
    table = _fields()
    names = []
    for field in fields:
        field = field.strip()
        canonical = _ALIASES.get(field, field)
        if canonical not in table:
            raise KeyError(field)
        names.append(canonical)
    header = ', '.join('%s [%s]' % (name, table[name][0]) if table[name][0] else name for name in names)
    lines = [] if 'noheader' in fmt else [header]
    for gpu in gpus:
        values = [table[name][1](gpu, context) for name in names]
        lines.append(', '.join(value[1] if 'nounits' in fmt else value[0] for value in values))
    return '\n'.join(lines) + '\n'


# --------------------------------------------------------------------------- table, -L, --version

def render_table(gpus, driver, now):
    cuda = state.cuda_version_for(driver) or N_A
    rule = '+' + '-' * 89 + '+'
    cells = '+' + '-' * 41 + '+' + '-' * 24 + '+' + '-' * 22 + '+'
    lines = [time.strftime('%a %b %d %H:%M:%S %Y', time.localtime(now)) + '       ', rule,
             '| NVIDIA-SMI %-23sDriver Version: %-15sCUDA Version: %-9s|' % (driver, driver, cuda),
             '|' + '-' * 41 + '+' + '-' * 24 + '+' + '-' * 22 + '+',
             '| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |',
             '| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |',
             '|                                         |                        |               MIG M. |',
             '|' + '=' * 41 + '+' + '=' * 24 + '+' + '=' * 22 + '|']
    for gpu in gpus:
        name = gpu['name'] if len(gpu['name']) <= 28 else gpu['name'][:25] + '...'
        persistence = 'On' if gpu['persistence'] == 'Enabled' else 'Off'
        lines.append('|%4d  %-30s%3s  |   %-16s %3s |%21s |' % (gpu['index'], name, persistence, gpu['bus_id'], 'Off', '0'))
        lines.append('|%4s   %2dC    %-2s%16s / %5s |%11s / %9s |%8s%13s |' % (
            N_A, gpu['temp'], gpu['pstate'], '%dW' % gpu['power_draw'], '%dW' % gpu['power_limit'],
            '%dMiB' % gpu['memory_used'], '%dMiB' % gpu['memory_total'], '0%', 'Default'))
        lines.append('|%41s|%24s|%21s |' % ('', '', gpu['mig'] if gpu['mig'] != N_A else N_A))
        lines.append(cells)
    lines += [' ' * 89, rule,
              '| %-88s|' % 'Processes:',
              '|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |',
              '|        ID   ID                                                               Usage      |',
              '|' + '=' * 89 + '|',
              '|  %-87s|' % 'No running processes found',
              rule]
    return '\n'.join(lines) + '\n'


def render_list(gpus):
    return ''.join('GPU %d: %s (UUID: %s)\n' % (gpu['index'], gpu['name'], gpu['uuid']) for gpu in gpus)


def _usage_text():
    return ('NVIDIA System Management Interface -- v%s\n\n'
            'NVSMI provides monitoring information for Tesla and select Quadro devices.\n'
            'The data is presented in either a plain text or an XML format, via stdout or a file.\n'
            'NVSMI also provides several management operations for changing the device state.\n\n'
            '    -h,   --help                Print usage information and exit.\n'
            '    -L,   --list-gpus           Display a list of GPUs connected to the system.\n'
            '    -q,   --query               Display GPU or Unit info.\n'
            '    -i,   --id=                 Target a specific GPU or Unit.\n'
            '    -f,   --filename=           Log to a specified file, rather than to stdout.\n'
            '    -x,   --xml-format          Produce XML output.\n'
            '    -pm,  --persistence-mode=   Set persistence mode: 0/DISABLED, 1/ENABLED\n'
            '    --query-gpu                 Information about GPU.\n'
            '    --format=                   Comma separated list of format options: csv, noheader, nounits\n'
            % (state.installed_nvml() or N_A))


# --------------------------------------------------------------------------- main

def _out(text, options):
    filename = options.get('filename')
    if filename:
        with open(filename, 'w', encoding='utf-8') as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)


def _init_failure(installed):
    """(message, rc) when NVML cannot initialise, None when it can."""
    nvml = state.nvml_state()
    if nvml == 'no_library':
        return MSG_NO_LIBRARY, RC_LIBRARY_NOT_FOUND
    if nvml == 'not_loaded':
        return MSG_NOT_LOADED, RC_DRIVER_NOT_LOADED
    if nvml == 'mismatch':
        message = MSG_MISMATCH
        if (state.branch_of(installed) or 0) >= 535:
            message += '\nNVML library version: %s' % state.major_minor(installed)
        return message, RC_LIB_RM_VERSION_MISMATCH
    return None


def _set_persistence(value, gpus):
    value = value.strip().upper()
    if value not in ('0', '1', 'DISABLED', 'ENABLED'):
        print(MSG_INVALID)
        return RC_INVALID_ARGUMENT
    enable = value in ('1', 'ENABLED')
    if os.geteuid() != 0:
        for gpu in gpus[:1]:
            print('Unable to set persistence mode for GPU %s: Insufficient Permissions' % gpu['bus_id'])
        print('Terminating early due to previous errors.')
        return RC_NO_PERMISSION
    settings = state.legacy_persistence_modes()
    for gpu in gpus:
        current = gpu['persistence'] == 'Enabled'
        if current == enable:
            print('Persistence mode is already %s for GPU %s.' % ('Enabled' if enable else 'Disabled', gpu['bus_id']))
        else:
            print('%s persistence mode for GPU %s.' % ('Enabled' if enable else 'Disabled', gpu['bus_id']))
        settings[gpu['bus_id']] = enable
    state.write_json(state.PERSISTENCE_MODE_FILE, settings)
    print('All done.')
    return RC_OK


def run(argv):
    """Run nvidia-smi with ``argv``; returns the exit code."""
    try:
        options = parse_args(argv)
    except Usage:
        print(MSG_INVALID)
        return RC_INVALID_ARGUMENT
    if options.get('help'):
        sys.stdout.write(_usage_text())
        return RC_OK
    if options.get('xml') and not options.get('query'):
        print(MSG_INVALID)
        return RC_INVALID_ARGUMENT
    if options.get('query_gpu') is not None and 'format' not in options:
        print('"--format" is mandatory for --query-gpu. Please run \'nvidia-smi -h\' for help.')
        return RC_INVALID_ARGUMENT

    installed = state.installed_nvml()
    if options.get('version'):
        sys.stdout.write('NVIDIA-SMI version  : %s\n' % (installed or N_A))
        failure = _init_failure(installed)
        if failure:
            print(failure[0])
            return failure[1]
        driver = state.loaded_driver()
        sys.stdout.write('NVML version        : %s\nDRIVER version      : %s\nCUDA Version        : %s\n'
                         % (state.major_minor(installed), driver, state.cuda_version_for(driver) or N_A))
        return RC_OK

    failure = _init_failure(installed)
    if failure:
        print(failure[0])
        return failure[1]

    driver = state.loaded_driver()
    hardware = state.load_hardware()
    everything = describe(hardware, driver)
    if not everything:
        print(MSG_NO_DEVICES)
        return RC_NOT_FOUND
    selected = _select(everything, options.get('id'))
    if selected is None or not selected:
        print(MSG_NO_DEVICES)
        return RC_NOT_FOUND
    lost = state.lost_gpus()
    gpus = [gpu for gpu in selected if gpu['index'] not in lost]
    lost_selected = [gpu for gpu in selected if gpu['index'] in lost]

    if options.get('persistence') is not None:
        return _set_persistence(options['persistence'], gpus)

    now = time.time()
    timestamp = time.strftime('%a %b %d %H:%M:%S %Y', time.localtime(now))
    try:
        if options.get('query_gpu') is not None:
            fmt = [item.strip() for item in options['format'].split(',')]
            if 'csv' not in fmt:
                print(MSG_INVALID)
                return RC_INVALID_ARGUMENT
            context = {'driver': driver, 'count': len(everything),
                       'csv_timestamp': time.strftime('%Y/%m/%d %H:%M:%S', time.localtime(now)) + '.%03d' % (int(now * 1000) % 1000)}
            try:
                text = render_csv(gpus, options['query_gpu'].split(','), fmt, context)
            except KeyError as exc:
                print('Field "%s" is not a valid field to query.\n' % exc.args[0])
                return RC_INVALID_ARGUMENT
        elif options.get('query'):
            if options.get('xml'):
                text = render_xml(gpus, len(everything), driver, timestamp)
            else:
                text = render_text(gpus, len(everything), driver, timestamp)
        elif options.get('list'):
            text = render_list(gpus)
        else:
            if lost_selected:
                text = ''
            else:
                text = render_table(gpus, driver, now)
        _out(text, options)
    finally:
        for gpu in lost_selected:
            sys.stderr.write('Unable to determine the device handle for GPU%s: Unknown Error\n' % gpu['short_bus_id'])
    if lost_selected:
        return RC_GPU_IS_LOST
    return RC_OK


def main(argv=None):
    """Entry point: ``python3 -m gpufleet_sim.nvidia_smi ARGS``."""
    return run(sys.argv[1:] if argv is None else list(argv))


if __name__ == '__main__':
    sys.exit(main())
