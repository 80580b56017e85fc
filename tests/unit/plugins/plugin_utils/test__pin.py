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


# --- load_pin: the one reader (issues #10 and #12) -------------------------------------------------------

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._pin import PIN_MAX_BYTES, load_pin, read_pin_file  # noqa: E402


def test_the_same_pin_from_yaml_env_and_a_variable_is_the_same(tmp_path):
    yaml_file = tmp_path / 'baseline.yml'
    yaml_file.write_text('driver: 580.65.06\ncuda_toolkit: 12.10\ndcgm: "4.1.0"\nprevious:\n  driver: 550.127.05\n')
    env_file = tmp_path / 'baseline.env'
    env_file.write_text('DRIVER_VERSION=580.65.06\nCUDA_TOOLKIT=12.10\nDCGM_VERSION="4.1.0"\nPREV_DRIVER_VERSION=550.127.05\n')
    variable = {'driver': '580.65.06', 'cuda_toolkit': '12.10', 'dcgm': '4.1.0', 'previous': {'driver': '550.127.05'}}
    loaded = [load_pin(pin_file=str(yaml_file)), load_pin(pin_file=str(env_file)), load_pin(pin=variable, source='gpu_stack_pin')]
    for pins in loaded:
        assert pins['pin']['cuda_toolkit'] == '12.10'
        assert pins['pinned_versions'] == {'driver': '580.65.06', 'cuda_toolkit': '12.10', 'dcgm': '4.1.0'}
        assert pins['installed'] == {'driver': '580.65.06', 'dcgm': '4.1.0', 'cuda_toolkit': '12.10'}
        assert pins['previous']['driver'] == '550.127.05'
    assert loaded[0]['pin'] == loaded[1]['pin'] == loaded[2]['pin']
    assert loaded[2]['source'] == 'gpu_stack_pin' and loaded[0]['source'] == str(yaml_file)


@pytest.mark.parametrize('value, written', [(12.1, '12.10'), (550.9, '550.90'), (580, '580'), (True, 'true')])
def test_a_number_in_a_pin_variable_is_refused_with_the_quoting_hint(value, written):
    del written
    with pytest.raises(PinError, match=r'^gpu_stack_pin\.cuda_toolkit: .* is a number, not a version; .*quote it'):
        load_pin(pin={'driver': '580.65.06', 'cuda_toolkit': value}, source='gpu_stack_pin')
    with pytest.raises(PinError, match=r'^gpu_stack_pin\.vbios\.NVIDIA H100: .* is a number'):
        load_pin(pin={'vbios': {'NVIDIA H100': value}}, source='gpu_stack_pin')


EMPTY_PINS = [('baseline.env', ''), ('baseline.env', '\n# nothing pinned\n'), ('baseline.env', 'DRIVER_VERSION=\nDCGM_VERSION=""\n'),
              ('baseline.yml', ''), ('baseline.yml', 'driver:\ndcgm: ~\n'), ('pin.json', '{}\n')]


@pytest.mark.parametrize('name, text', EMPTY_PINS)
def test_a_pin_that_pins_nothing_is_refused_naming_the_file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(PinError, match=r'^%s: pins nothing' % str(path)):
        load_pin(pin_file=str(path))


def test_an_empty_pin_variable_is_refused():
    with pytest.raises(PinError, match=r'^gpu_stack_pin: pins nothing'):
        load_pin(pin={'driver': '', 'dcgm': None}, source='gpu_stack_pin')
    with pytest.raises(PinError, match=r'^gpu_stack_pin: no pin given'):
        load_pin(pin={}, source='gpu_stack_pin')


@pytest.mark.parametrize('line, message', [
    ('DRIVER_VERSION="580.65.06;reboot"', 'is not a version'),
    ('DRIVER_VERSION=--allow-downgrades', 'starts with a dash'),
    ('DRIVER_VERSION="$(touch /tmp/x)"', 'is not a version'),
    ('DRIVER_VERSION="580\x1b[2J"', 'is not a version'),
])
def test_values_that_are_not_versions_are_refused_naming_the_field(tmp_path, line, message):
    path = tmp_path / 'baseline.env'
    path.write_text(line + '\n')
    with pytest.raises(PinError, match='baseline.env line 1: DRIVER_VERSION: .*' + message):
        load_pin(pin_file=str(path))
    yaml_path = tmp_path / 'baseline.yml'
    yaml_path.write_text('dcgm: 4.1.0\ndriver: %s\n' % line.split('=', 1)[1])
    # YAML itself refuses a raw control character; either way the file is refused naming it.
    yaml_message = 'not valid YAML: unacceptable character #x001b' if '\x1b' in line else 'line 2: driver: .*' + message
    with pytest.raises(PinError, match='baseline.yml.*' + yaml_message):
        load_pin(pin_file=str(yaml_path))


def test_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / 'pin.yml'
    os.mkfifo(str(fifo))
    with pytest.raises(PinError, match=r'pin.yml: is a FIFO, not a pin file'):
        read_pin_file(str(fifo))  # would block forever if it were opened for a plain read


def test_a_directory_and_a_device_are_refused(tmp_path):
    with pytest.raises(PinError, match=r': is a directory, not a pin file'):
        read_pin_file(str(tmp_path))
    with pytest.raises(PinError, match=r'/dev/null: is a character device, not a pin file'):
        read_pin_file('/dev/null')


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / 'huge.yml'
    with open(str(path), 'wb') as handle:
        handle.truncate(50 * 1024 * 1024)  # 50 MiB, sparse: refused from its size alone
    with pytest.raises(PinError, match=r'huge.yml: is 52428800 bytes; a pin file has at most %d' % PIN_MAX_BYTES):
        read_pin_file(str(path))


def test_bytes_that_are_not_utf8_are_refused_naming_the_line(tmp_path):
    path = tmp_path / 'baseline.env'
    path.write_bytes(b'DRIVER_VERSION=580.65.06\nDCGM_VERSION=4.1.0\xff\n')
    with pytest.raises(PinError, match=r"baseline.env line 2: not UTF-8 text \(byte b'\\xff' at offset 43\)"):
        read_pin_file(str(path))
    path.write_bytes(b'driver: 580.65.06\x00\n')
    with pytest.raises(PinError, match=r'line 1: contains a NUL byte'):
        read_pin_file(str(path))


@pytest.mark.parametrize('text', [
    'driver: ' + '[' * 5000 + ']' * 5000 + '\n',
    'driver: ' + '{a: ' * 3000 + '1' + '}' * 3000 + '\n',
], ids=['lists', 'mappings'])
def test_yaml_nested_too_deeply_is_a_pin_error_not_a_recursion_error(text):
    with pytest.raises(PinError, match=r'^pins/deep.yml: not valid YAML for a pin: collections nested too deeply'):
        parse_yaml(text, 'pins/deep.yml')


def test_a_shallow_nested_value_is_still_refused_naming_the_field():
    with pytest.raises(PinError, match='line 1: driver must be a version string'):
        parse_yaml('driver: [[[1]]]\n', 'pins/x.yml')
