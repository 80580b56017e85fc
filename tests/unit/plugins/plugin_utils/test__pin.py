# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pin (baseline) parsing: the runbook's baseline.env and YAML."""

import os

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._pin import PinError, parse_env, parse_pin_text, parse_yaml, pin_from_mapping

from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import fixture_path

FIXTURES = fixture_path('pins')


def test_runbook_baseline_env_verbatim():
    """The baseline.env block of the image-drift runbook, as printed there."""
    path = os.path.join(FIXTURES, 'baseline.env')
    with open(path, encoding='utf-8') as handle:
        parsed = parse_pin_text(handle.read(), path)
    pin = parsed['pin']
    assert pin['driver'] == '580.65.06'
    assert pin['cuda_toolkit'] == '13.0'
    assert pin['container_toolkit'] == '1.17.0'
    assert pin['dcgm'] == '4.1.0'
    assert pin['fabric_manager'] == '580.65.06'
    assert pin['vbios'] is None
    assert pin['kernel'] is None
    assert all(value is None for value in parsed['previous'].values())


@pytest.mark.parametrize('line, component, value', [
    ('export DRIVER_VERSION="580.65.06"', 'driver', '580.65.06'),
    ("DRIVER_VERSION='550.127.05'  # quoted", 'driver', '550.127.05'),
    ('KERNEL_VERSION=6.8.0-45-generic', 'kernel', '6.8.0-45-generic'),
    ('KERNEL=6.1.0-26-amd64', 'kernel', '6.1.0-26-amd64'),
    ('CUDA_DRIVER_VERSION=13.0', 'cuda_driver', '13.0'),
    ('GSP_FIRMWARE_VERSION=580.65.06', 'gsp_firmware', '580.65.06'),
    ('cuda_toolkit=12.4', 'cuda_toolkit', '12.4'),
    ('DCGM=1:4.1.0-1', 'dcgm', '1:4.1.0-1'),
    ('CONTAINER_TOOLKIT=1.15.0~rc.1-1', 'container_toolkit', '1.15.0~rc.1-1'),
    ('DRIVER_VERSION=', 'driver', None),
    ('DRIVER_VERSION=   # not pinned yet', 'driver', None),
    ('DRIVER_VERSION=""', 'driver', None),
])
def test_env_lines(line, component, value):
    assert parse_env(line + '\n')['pin'][component] == value


def test_env_previous_pin():
    parsed = parse_env('DRIVER_VERSION=580.65.06\nPREV_DRIVER_VERSION=550.127.05\nPREV_FABRIC_MANAGER=550.127.05\n')
    assert parsed['pin']['driver'] == '580.65.06'
    assert parsed['previous']['driver'] == '550.127.05'
    assert parsed['previous']['fabric_manager'] == '550.127.05'
    assert parsed['pin']['fabric_manager'] is None


@pytest.mark.parametrize('text, words', [
    ('DRIVER_VERSION=580\nDRIVR_VERSION=580\n', ['baseline.env line 2', 'DRIVR_VERSION', 'DRIVER_VERSION', 'VBIOS_VERSION']),
    ('# c\n\nthis is not a pin\n', ['line 3', 'expected KEY=value']),
    ('DRIVER_VERSION="580.65.06\n', ['line 1', 'unterminated']),
    ('DRIVER_VERSION=580 65\n', ['line 1', 'quoted']),
    ('DRIVER_VERSION=580\nDRIVER_VERSION=550\n', ['line 2', 'repeats line 1']),
    ('DRIVER_VERSION="580" extra\n', ['line 1', 'unexpected text']),
])
def test_env_errors_name_file_and_line(text, words):
    with pytest.raises(PinError) as caught:
        parse_env(text, 'baseline.env')
    for word in words:
        assert word in str(caught.value)


def test_yaml_keeps_version_text_and_vbios_per_model():
    parsed = parse_yaml(
        'driver: 580.65.06\n'
        'cuda_driver: 12.10\n'
        'cuda_toolkit: 13.0\n'
        'kernel: ""\n'
        'vbios:\n'
        '  NVIDIA H100 80GB HBM3: 96.00.99.00.01\n'
        '  NVIDIA A100-SXM4-80GB: 92.00.45.00.03\n'
        'previous:\n'
        '  driver: 550.127.05\n', 'pins/baseline.yml')
    pin = parsed['pin']
    assert pin['cuda_driver'] == '12.10'
    assert pin['cuda_toolkit'] == '13.0'
    assert pin['kernel'] is None
    assert pin['vbios'] == {'NVIDIA H100 80GB HBM3': '96.00.99.00.01', 'NVIDIA A100-SXM4-80GB': '92.00.45.00.03'}
    assert parsed['previous']['driver'] == '550.127.05'


@pytest.mark.parametrize('text, words', [
    ('driver: 580\nfabricmanager: 580\n', ['pins/x.yml line 2', 'fabricmanager', 'fabric_manager', 'container_toolkit']),
    ('driver: [580, 550]\n', ['line 1', 'driver must be a version string']),
    ('driver: 580\n  bad: indent\n', ['pins/x.yml line 2', 'not valid YAML']),
    ('- driver\n', ['line 1', 'must be a mapping']),
    ('driver: 580\ndriver: 550\n', ['line 2', 'appears twice']),
])
def test_yaml_errors_name_file_and_line(text, words):
    with pytest.raises(PinError) as caught:
        parse_yaml(text, 'pins/x.yml')
    for word in words:
        assert word in str(caught.value)


def test_form_is_detected_from_content():
    assert parse_pin_text('DRIVER_VERSION=580.65.06\n', 'pin.txt')['pin']['driver'] == '580.65.06'
    assert parse_pin_text('driver: 580.65.06\n', 'pin.txt')['pin']['driver'] == '580.65.06'


def test_mapping_errors_list_valid_components():
    with pytest.raises(PinError) as caught:
        pin_from_mapping({'drivr': '580'}, 'pin argument')
    assert 'pin argument' in str(caught.value) and 'drivr' in str(caught.value) and 'cuda_toolkit' in str(caught.value)
