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
        persistence = daemon_running or legacy.get(bus_id, False)
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


# --------------------------------------------------------------------------- XML

def _xml_gpu_v12(gpu, branch):
    clocks = gpu['clocks']
    max_clocks = gpu['max_clocks']
    fabric = [('state', gpu['fabric_state']), ('status', gpu['fabric_status'])]
    if branch >= 550:
        health = [('bandwidth', N_A)]
        if branch >= 570:
            health = [('summary', N_A), ('bandwidth', N_A), ('route_recovery_in_progress', N_A), ('route_unhealthy', N_A),
                      ('access_timeout_recovery', N_A)]
        fabric += [('cliqueId', gpu['clique']), ('clusterUuid', gpu['cluster']), ('health', health)]
    if branch >= 580:
        power = [('power_state', 'P0'), ('average_power_draw', _w(gpu['power_draw'])), ('instant_power_draw', _w(gpu['power_draw'] - 0.4))]
        module_power = [('power_state', 'P0'), ('average_power_draw', N_A), ('instant_power_draw', N_A)]
    else:
        power = [('power_state', 'P0'), ('power_draw', _w(gpu['power_draw']))]
        module_power = [('power_state', 'P0'), ('power_draw', N_A)]
    limits = [('current_power_limit', _w(gpu['power_limit'])), ('requested_power_limit', _w(gpu['power_limit'])),
              ('default_power_limit', _w(gpu['power_limit'])), ('min_power_limit', _w(gpu['min_power'])),
              ('max_power_limit', _w(gpu['power_limit']))]
    return [
        ('product_name', gpu['name']),
        ('product_brand', 'NVIDIA'),
        ('product_architecture', gpu['architecture']),
        ('display_mode', 'Enabled'),
        ('display_active', 'Disabled'),
        ('persistence_mode', gpu['persistence']),
        ('addressing_mode', 'None'),
        ('mig_mode', [('current_mig', gpu['mig']), ('pending_mig', gpu['mig'])]),
        ('mig_devices', 'None\n'),
        ('accounting_mode', 'Disabled'),
        ('accounting_mode_buffer_size', '4000'),
        ('driver_model', [('current_dm', N_A), ('pending_dm', N_A)]),
        ('serial', gpu['serial']),
        ('uuid', gpu['uuid']),
        ('minor_number', str(gpu['index'])),
        ('vbios_version', gpu['vbios']),
        ('multigpu_board', 'No'),
        ('board_id', gpu['board_id']),
        ('board_part_number', gpu['board_part_number']),
        ('gpu_part_number', gpu['gpu_part_number']),
        ('gpu_fru_part_number', N_A),
        ('gpu_module_id', str(gpu['module_id'])),
        ('inforom_version', [('img_version', gpu['inforom'][0]), ('oem_object', gpu['inforom'][1]),
                             ('ecc_object', gpu['inforom'][2]), ('pwr_object', N_A)]),
        ('gpu_operation_mode', [('current_gom', N_A), ('pending_gom', N_A)]),
        ('gsp_firmware_version', gpu['gsp']),
        ('gpu_virtualization_mode', [('virtualization_mode', 'None'), ('host_vgpu_mode', N_A)]),
        ('gpu_reset_status', [('reset_required', 'No'), ('drain_and_reset_recommended', 'No')]),
        ('ibmnpu', [('relaxed_ordering_mode', N_A)]),
        ('pci', [
            ('pci_bus', gpu['bus']), ('pci_device', gpu['device']), ('pci_domain', gpu['domain']),
            ('pci_device_id', gpu['device_id']), ('pci_bus_id', gpu['bus_id']), ('pci_sub_system_id', gpu['subsystem']),
            ('pci_gpu_link_info', [
                ('pcie_gen', [('max_link_gen', str(gpu['pcie_gen'])), ('current_link_gen', str(gpu['pcie_gen'])),
                              ('device_current_link_gen', str(gpu['pcie_gen'])), ('max_device_link_gen', str(gpu['pcie_gen'])),
                              ('max_host_link_gen', str(gpu['pcie_gen']))]),
                ('link_widths', [('max_link_width', '16x'), ('current_link_width', '16x')]),
            ]),
            ('pci_bridge_chip', [('bridge_chip_type', N_A), ('bridge_chip_fw', N_A)]),
            ('replay_counter', '0'), ('replay_rollover_counter', '0'), ('tx_util', '0 KB/s'), ('rx_util', '0 KB/s'),
            ('atomic_caps_inbound', N_A), ('atomic_caps_outbound', N_A),
        ]),
        ('fan_speed', N_A),
        ('performance_state', gpu['pstate']),
        ('clocks_event_reasons', [
            ('clocks_event_reason_gpu_idle', 'Active'), ('clocks_event_reason_applications_clocks_setting', 'Not Active'),
            ('clocks_event_reason_sw_power_cap', 'Not Active'), ('clocks_event_reason_hw_slowdown', 'Not Active'),
            ('clocks_event_reason_hw_thermal_slowdown', 'Not Active'), ('clocks_event_reason_hw_power_brake_slowdown', 'Not Active'),
            ('clocks_event_reason_sync_boost', 'Not Active'), ('clocks_event_reason_sw_thermal_slowdown', 'Not Active'),
            ('clocks_event_reason_display_clocks_setting', 'Not Active'),
        ]),
        ('fb_memory_usage', [('total', _mib(gpu['memory_total'])), ('reserved', _mib(gpu['memory_reserved'])),
                             ('used', _mib(gpu['memory_used'])), ('free', _mib(gpu['memory_free']))]),
        ('bar1_memory_usage', [('total', _mib(gpu['bar1'])), ('used', '1 MiB'), ('free', _mib(gpu['bar1'] - 1))]),
        ('cc_protected_memory_usage', [('total', '0 MiB'), ('used', '0 MiB'), ('free', '0 MiB')]),
        ('compute_mode', 'Default'),
        ('utilization', [('gpu_util', '0 %'), ('memory_util', '0 %'), ('encoder_util', '0 %'), ('decoder_util', '0 %'),
                         ('jpeg_util', '0 %'), ('ofa_util', '0 %')]),
        ('encoder_stats', [('session_count', '0'), ('average_fps', '0'), ('average_latency', '0')]),
        ('fbc_stats', [('session_count', '0'), ('average_fps', '0'), ('average_latency', '0')]),
        ('ecc_mode', [('current_ecc', 'Enabled'), ('pending_ecc', 'Enabled')]),
        ('ecc_errors', _xml_ecc()),
        ('retired_pages', _xml_retired()),
        ('remapped_rows', _xml_rows(gpu)),
        ('temperature', _xml_temperature(gpu)),
        ('supported_gpu_target_temp', [('gpu_target_temp_min', N_A), ('gpu_target_temp_max', N_A)]),
        ('gpu_power_readings', power + limits),
        ('module_power_readings', module_power + [(tag, N_A) for tag, _value in limits]),
        ('clocks', [('graphics_clock', _mhz(clocks[0])), ('sm_clock', _mhz(clocks[0])), ('mem_clock', _mhz(clocks[1])),
                    ('video_clock', _mhz(clocks[2]))]),
        ('applications_clocks', [('graphics_clock', _mhz(max_clocks[0])), ('mem_clock', _mhz(max_clocks[1]))]),
        ('default_applications_clocks', [('graphics_clock', _mhz(max_clocks[0])), ('mem_clock', _mhz(max_clocks[1]))]),
        ('deferred_clocks', [('mem_clock', N_A)]),
        ('max_clocks', [('graphics_clock', _mhz(max_clocks[0])), ('sm_clock', _mhz(max_clocks[0])),
                        ('mem_clock', _mhz(max_clocks[1])), ('video_clock', _mhz(max_clocks[2]))]),
        ('max_customer_boost_clocks', [('graphics_clock', _mhz(max_clocks[0]))]),
        ('clock_policy', [('auto_boost', N_A), ('auto_boost_default', N_A)]),
        ('voltage', [('graphics_volt', gpu['voltage'])]),
        ('fabric', fabric),
        ('supported_clocks', [('supported_mem_clock', [('value', _mhz(max_clocks[1]))] + [
            ('supported_graphics_clock', _mhz(max_clocks[0] - step * 15)) for step in range(0, 6)])]),
        ('processes', None),
        ('accounted_processes', None),
    ]


def _xml_ecc():
    counters = [('sram_correctable', '0'), ('sram_uncorrectable', '0'), ('dram_correctable', '0'), ('dram_uncorrectable', '0')]
    return [('volatile', list(counters)), ('aggregate', list(counters))]


def _xml_retired():
    return [
        ('multiple_single_bit_retirement', [('retired_count', N_A), ('retired_pagelist', N_A)]),
        ('double_bit_retirement', [('retired_count', N_A), ('retired_pagelist', N_A)]),
        ('pending_blacklist', N_A),
        ('pending_retirement', N_A),
    ]


def _xml_rows(gpu):
    return [
        ('remapped_row_corr', '0'), ('remapped_row_unc', '0'), ('remapped_row_pending', 'No'), ('remapped_row_failure', 'No'),
        ('row_remapper_histogram', [('row_remapper_histogram_max', '%d bank(s)' % gpu['rows_max']),
                                    ('row_remapper_histogram_high', '0 bank(s)'), ('row_remapper_histogram_partial', '0 bank(s)'),
                                    ('row_remapper_histogram_low', '0 bank(s)'), ('row_remapper_histogram_none', '0 bank(s)')]),
    ]


def _xml_temperature(gpu):
    return [
        ('gpu_temp', '%d C' % gpu['temp']),
        ('gpu_temp_tlimit', N_A),
        ('gpu_temp_max_threshold', gpu['temps'][0]),
        ('gpu_temp_slow_threshold', gpu['temps'][1]),
        ('gpu_temp_max_gpu_threshold', gpu['temps'][2]),
        ('gpu_target_temperature', N_A),
        ('memory_temp', N_A if gpu['memory_temp'] is None else '%d C' % gpu['memory_temp']),
        ('gpu_temp_max_mem_threshold', gpu['temps'][3]),
    ]


def _xml_gpu_v13(gpu):
    """DTD v13 (590 and later): the v12 elements plus the additions of the real 590 document."""
    elements = dict(_xml_gpu_v12(gpu, 580))
    clocks = gpu['clocks']
    fabric = [('state', gpu['fabric_state']), ('status', gpu['fabric_status']), ('cliqueId', gpu['clique']),
              ('clusterUuid', gpu['cluster']),
              ('health', [('summary', N_A), ('bandwidth', N_A), ('route_recovery_in_progress', N_A), ('route_unhealthy', N_A),
                          ('access_timeout_recovery', N_A), ('incorrect_configuration', N_A)])]
    return [
        ('product_name', gpu['name']),
        ('product_brand', 'NVIDIA'),
        ('product_architecture', gpu['architecture']),
        ('display_mode', 'Requested functionality has been deprecated'),
        ('display_attached', 'No'),
        ('display_active', 'Disabled'),
        ('persistence_mode', gpu['persistence']),
        ('addressing_mode', 'None'),
        ('mig_mode', elements['mig_mode']),
        ('mig_devices', 'None\n'),
        ('accounting_mode', 'Disabled'),
        ('accounting_mode_buffer_size', '4000'),
        ('driver_model', elements['driver_model']),
        ('serial', gpu['serial']),
        ('uuid', gpu['uuid']),
        ('pdi', '0x%016x' % (int(gpu['serial'], 10) if gpu['serial'].isdigit() else 0)),
        ('minor_number', str(gpu['index'])),
        ('vbios_version', gpu['vbios']),
        ('multigpu_board', 'No'),
        ('board_id', gpu['board_id']),
        ('board_part_number', gpu['board_part_number']),
        ('gpu_part_number', gpu['gpu_part_number']),
        ('gpu_fru_part_number', N_A),
        ('platformInfo', [('chassis_serial_number', N_A), ('slot_number', N_A), ('tray_index', N_A), ('host_id', N_A),
                          ('peer_type', N_A), ('module_id', str(gpu['module_id'])), ('gpu_fabric_guid', N_A)]),
        ('inforom_version', elements['inforom_version']),
        ('inforom_bbx_flush', [('latest_timestamp', N_A), ('latest_duration', N_A)]),
        ('gpu_operation_mode', elements['gpu_operation_mode']),
        ('c2c_mode', 'Disabled'),
        ('gpu_virtualization_mode', [('virtualization_mode', 'None'), ('host_vgpu_mode', N_A), ('vgpu_heterogeneous_mode', N_A)]),
        ('gpu_recovery_action', 'None'),
        ('gsp_firmware_version', gpu['gsp']),
        ('ibmnpu', elements['ibmnpu']),
        ('pci', [('pci_bus', gpu['bus']), ('pci_device', gpu['device']), ('pci_domain', gpu['domain']), ('pci_base_class', '3'),
                 ('pci_sub_class', '2'), ('pci_device_id', gpu['device_id']), ('pci_bus_id', gpu['bus_id']),
                 ('pci_sub_system_id', gpu['subsystem'])] + [item for item in elements['pci'] if item[0] not in (
                     'pci_bus', 'pci_device', 'pci_domain', 'pci_device_id', 'pci_bus_id', 'pci_sub_system_id')]),
        ('fan_speed', N_A),
        ('performance_state', gpu['pstate']),
        ('clocks_event_reasons', elements['clocks_event_reasons']),
        ('clocks_event_reasons_counters', [
            ('clocks_event_reasons_counters_sw_power_cap', '0 us'), ('clocks_event_reasons_counters_sync_boost', '0 us'),
            ('clocks_event_reasons_counters_sw_therm_slowdown', '0 us'), ('clocks_event_reasons_counters_hw_therm_slowdown', '0 us'),
            ('clocks_event_reasons_counters_hw_power_brake', '0 us')]),
        ('sparse_operation_mode', 'Disabled'),
        ('fb_memory_usage', elements['fb_memory_usage']),
        ('bar1_memory_usage', elements['bar1_memory_usage']),
        ('cc_protected_memory_usage', elements['cc_protected_memory_usage']),
        ('compute_mode', 'Default'),
        ('utilization', elements['utilization']),
        ('encoder_stats', elements['encoder_stats']),
        ('fbc_stats', elements['fbc_stats']),
        ('dram_encryption_mode', [('current_dram_encryption', N_A), ('pending_dram_encryption', N_A)]),
        ('ecc_mode', elements['ecc_mode']),
        ('ecc_errors', elements['ecc_errors']),
        ('retired_pages', elements['retired_pages']),
        ('remapped_rows', elements['remapped_rows']),
        ('temperature', elements['temperature']),
        ('supported_gpu_target_temp', elements['supported_gpu_target_temp']),
        ('gpu_power_readings', elements['gpu_power_readings']),
        ('gpu_memory_power_readings', [('average_power_draw', N_A), ('instant_power_draw', N_A)]),
        ('module_power_readings', elements['module_power_readings']),
        ('power_smoothing', N_A),
        ('power_profiles', [('power_profile_requested_profiles', N_A), ('power_profile_enforced_profiles', N_A)]),
        ('edpp_multiplier', N_A),
        ('clocks', [('graphics_clock', _mhz(clocks[0])), ('sm_clock', _mhz(clocks[0])), ('mem_clock', _mhz(clocks[1])),
                    ('video_clock', _mhz(clocks[2]))]),
        ('applications_clocks', elements['applications_clocks']),
        ('default_applications_clocks', elements['default_applications_clocks']),
        ('deferred_clocks', elements['deferred_clocks']),
        ('max_clocks', elements['max_clocks']),
        ('max_customer_boost_clocks', elements['max_customer_boost_clocks']),
        ('clock_policy', elements['clock_policy']),
        ('fabric', fabric),
        ('supported_clocks', elements['supported_clocks']),
        ('processes', '\n'),
        ('accounted_processes', '\n'),
        ('capabilities', [('egm', 'disabled')]),
    ]


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
        _render_xml(lines, _xml_gpu_v13(gpu) if v13 else _xml_gpu_v12(gpu, branch), 2, unit)
        lines.append('%s</gpu>' % unit)
        if v13:
            lines.append('')
    lines.append('</nvidia_smi_log>')
    return '\n'.join(lines) + '\n'


# --------------------------------------------------------------------------- -q text

def _text_gpu(gpu, branch):
    clocks = gpu['clocks']
    max_clocks = gpu['max_clocks']
    pcie = str(gpu['pcie_gen'])
    power_limits = [('Current Power Limit', _w(gpu['power_limit'])), ('Requested Power Limit', _w(gpu['power_limit'])),
                    ('Default Power Limit', _w(gpu['power_limit'])), ('Min Power Limit', _w(gpu['min_power'])),
                    ('Max Power Limit', _w(gpu['power_limit']))]
    if branch >= 580:
        draw = [('Average Power Draw', _w(gpu['power_draw'])), ('Instantaneous Power Draw', _w(gpu['power_draw'] - 0.4))]
        memory_draw = [('Average Power Draw', N_A), ('Instantaneous Power Draw', N_A)]
        module_draw = [('Average Power Draw', N_A), ('Instantaneous Power Draw', N_A)]
    else:
        draw = [('Power Draw', _w(gpu['power_draw']))]
        memory_draw = [('Power Draw', N_A)]
        module_draw = [('Power Draw', N_A)]
    fabric = [('State', gpu['fabric_state']), ('Status', gpu['fabric_status'])]
    if branch >= 550:
        health = [('Bandwidth', N_A)]
        if branch >= 580:
            health = [('Summary', N_A), ('Bandwidth', N_A), ('Route Recovery in progress', N_A), ('Route Unhealthy', N_A),
                      ('Access Timeout Recovery', N_A), ('Incorrect Configuration', N_A), ('Partition Assigned', N_A)]
        elif branch >= 570:
            health = [('Summary', N_A), ('Bandwidth', N_A), ('Route Recovery in progress', N_A), ('Route Unhealthy', N_A),
                      ('Access Timeout Recovery', N_A)]
        fabric += [('CliqueId', gpu['clique']), ('ClusterUUID', gpu['cluster']), ('Health', health)]
    if branch >= 560:
        module = [('Platform Info', [('RACK Serial Number', N_A), ('Chassis Physical Slot Number', N_A),
                                     ('Compute Slot Index', N_A), ('Node Index', N_A), ('Peer Type', N_A),
                                     ('Module Id', str(gpu['module_id']))])]
    else:
        module = [('Module ID', str(gpu['module_id']))]
    ecc = [('SRAM Correctable', '0'), ('SRAM Uncorrectable Parity', '0'), ('SRAM Uncorrectable SEC-DED', '0'),
           ('DRAM Correctable', '0'), ('DRAM Uncorrectable', '0')]
    body = [
        ('Product Name', gpu['name']),
        ('Product Brand', 'NVIDIA'),
        ('Product Architecture', gpu['architecture']),
        ('Display Mode', 'Enabled'),
        ('Display Active', 'Disabled'),
        ('Persistence Mode', gpu['persistence']),
        ('Addressing Mode', 'None'),
        ('MIG Mode', [('Current', gpu['mig']), ('Pending', gpu['mig'])]),
        ('Accounting Mode', 'Disabled'),
        ('Accounting Mode Buffer Size', '4000'),
        ('Driver Model', [('Current', N_A), ('Pending', N_A)]),
        ('Serial Number', gpu['serial']),
        ('GPU UUID', gpu['uuid']),
        ('Minor Number', str(gpu['index'])),
        ('VBIOS Version', gpu['vbios']),
        ('MultiGPU Board', 'No'),
        ('Board ID', gpu['board_id']),
        ('Board Part Number', gpu['board_part_number']),
        ('GPU Part Number', gpu['gpu_part_number']),
        ('FRU Part Number', N_A),
    ] + module + [
        ('Inforom Version', [('Image Version', gpu['inforom'][0]), ('OEM Object', gpu['inforom'][1]),
                             ('ECC Object', gpu['inforom'][2]), ('Power Management Object', N_A)]),
        ('Inforom BBX Object Flush', [('Latest Timestamp', N_A), ('Latest Duration', N_A)]),
        ('GPU Operation Mode', [('Current', N_A), ('Pending', N_A)]),
        ('GPU C2C Mode', 'Disabled'),
        ('GPU Virtualization Mode', [('Virtualization Mode', 'None'), ('Host VGPU Mode', N_A), ('vGPU Heterogeneous Mode', N_A)]),
        ('GPU Reset Status', [('Reset Required', 'No'), ('Drain and Reset Recommended', 'No')]),
        ('GSP Firmware Version', gpu['gsp']),
        ('IBMNPU', [('Relaxed Ordering Mode', N_A)]),
        ('PCI', [
            ('Bus', '0x' + gpu['bus']), ('Device', '0x' + gpu['device']), ('Domain', '0x' + gpu['domain']),
            ('Base Classcode', '0x3'), ('Sub Classcode', '0x2'), ('Device Id', '0x' + gpu['device_id']),
            ('Bus Id', gpu['bus_id']), ('Sub System Id', '0x' + gpu['subsystem']),
            ('GPU Link Info', [
                ('PCIe Generation', [('Max', pcie), ('Current', pcie), ('Device Current', pcie), ('Device Max', pcie),
                                     ('Host Max', pcie)]),
                ('Link Width', [('Max', '16x'), ('Current', '16x')]),
            ]),
            ('Bridge Chip', [('Type', N_A), ('Firmware', N_A)]),
            ('Replays Since Reset', '0'), ('Replay Number Rollovers', '0'), ('Tx Throughput', '0 KB/s'),
            ('Rx Throughput', '0 KB/s'), ('Atomic Caps Inbound', N_A), ('Atomic Caps Outbound', N_A),
        ]),
        ('Fan Speed', N_A),
        ('Performance State', gpu['pstate']),
        ('Clocks Event Reasons', [
            ('Idle', 'Active'), ('Applications Clocks Setting', 'Not Active'), ('SW Power Cap', 'Not Active'),
            ('HW Slowdown', 'Not Active'), ('    HW Thermal Slowdown', 'Not Active'), ('    HW Power Brake Slowdown', 'Not Active'),
            ('Sync Boost', 'Not Active'), ('SW Thermal Slowdown', 'Not Active'), ('Display Clock Setting', 'Not Active'),
        ]),
        ('Sparse Operation Mode', 'Disabled'),
        ('FB Memory Usage', [('Total', _mib(gpu['memory_total'])), ('Reserved', _mib(gpu['memory_reserved'])),
                             ('Used', _mib(gpu['memory_used'])), ('Free', _mib(gpu['memory_free']))]),
        ('BAR1 Memory Usage', [('Total', _mib(gpu['bar1'])), ('Used', '1 MiB'), ('Free', _mib(gpu['bar1'] - 1))]),
        ('Conf Compute Protected Memory Usage', [('Total', '0 MiB'), ('Used', '0 MiB'), ('Free', '0 MiB')]),
        ('Compute Mode', 'Default'),
        ('Utilization', [('GPU' if branch >= 580 else 'Gpu', '0 %'), ('Memory', '0 %'), ('Encoder', '0 %'),
                         ('Decoder', '0 %'), ('JPEG', '0 %'), ('OFA', '0 %')]),
        ('Encoder Stats', [('Active Sessions', '0'), ('Average FPS', '0'), ('Average Latency', '0')]),
        ('FBC Stats', [('Active Sessions', '0'), ('Average FPS', '0'), ('Average Latency', '0')]),
        ('ECC Mode', [('Current', 'Enabled'), ('Pending', 'Enabled')]),
        ('ECC Errors', [('Volatile', list(ecc)), ('Aggregate', ecc + [('SRAM Threshold Exceeded', 'No')]),
                        ('Aggregate Uncorrectable SRAM Sources', [('SRAM L2', '0'), ('SRAM SM', '0'), ('SRAM Microcontroller', '0'),
                                                                  ('SRAM PCIE', '0'), ('SRAM Other', '0')])]),
        ('Retired Pages', [('Single Bit ECC', N_A), ('Double Bit ECC', N_A), ('Pending Page Blacklist', N_A)]),
        ('Remapped Rows', [('Correctable Error', '0'), ('Uncorrectable Error', '0'), ('Pending', 'No'),
                           ('Remapping Failure Occurred', 'No'),
                           ('Bank Remap Availability Histogram', [('Max', '%d bank(s)' % gpu['rows_max']), ('High', '0 bank(s)'),
                                                                  ('Partial', '0 bank(s)'), ('Low', '0 bank(s)'),
                                                                  ('None', '0 bank(s)')])]),
        ('Temperature', [('GPU Current Temp', '%d C' % gpu['temp']), ('GPU T.Limit Temp', N_A),
                         ('GPU Shutdown Temp', gpu['temps'][0]), ('GPU Slowdown Temp', gpu['temps'][1]),
                         ('GPU Max Operating Temp', gpu['temps'][2]), ('GPU Target Temperature', N_A),
                         ('Memory Current Temp', N_A if gpu['memory_temp'] is None else '%d C' % gpu['memory_temp']),
                         ('Memory Max Operating Temp', gpu['temps'][3])]),
        ('GPU Power Readings', draw + power_limits),
    ]
    if branch >= 550:
        body.append(('GPU Memory Power Readings ', memory_draw))
    body += [
        ('Module Power Readings', module_draw + [(label, N_A) for label, _value in power_limits]),
        ('Clocks', [('Graphics', _mhz(clocks[0])), ('SM', _mhz(clocks[0])), ('Memory', _mhz(clocks[1])), ('Video', _mhz(clocks[2]))]),
        ('Applications Clocks', [('Graphics', _mhz(max_clocks[0])), ('Memory', _mhz(max_clocks[1]))]),
        ('Default Applications Clocks', [('Graphics', _mhz(max_clocks[0])), ('Memory', _mhz(max_clocks[1]))]),
        ('Deferred Clocks', [('Memory', N_A)]),
        ('Max Clocks', [('Graphics', _mhz(max_clocks[0])), ('SM', _mhz(max_clocks[0])), ('Memory', _mhz(max_clocks[1])),
                        ('Video', _mhz(max_clocks[2]))]),
        ('Max Customer Boost Clocks', [('Graphics', _mhz(max_clocks[0]))]),
        ('Clock Policy', [('Auto Boost', N_A), ('Auto Boost Default', N_A)]),
        ('Voltage', [('Graphics', gpu['voltage'])]),
        ('Fabric', fabric),
        ('Processes', 'None'),
    ]
    return body


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
        _render_text(lines, _text_gpu(gpu, branch), 1, width)
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
