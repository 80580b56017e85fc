# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulated fleet's one fault table (tests/sim/node/gpufleet_sim/fault_table.py) and everyone who reads it.

The fleet CLI (fleet_faults.py), the tools in the node (state.load_faults and the tools that read a fault) and the
README's Faults table must take the faults' settings and defaults from the table and carry none of their own: with the
table's defaults changed, every consumer must follow, and no consumer's source may write a setting's default.
"""

import ast
import glob
import io
import json
import os
import sys

import pytest

from test_fake_tools import Node  # pylint: disable=import-error

SIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'sim')
sys.path.insert(0, SIM)

import fleet_faults  # noqa: E402  pylint: disable=wrong-import-position,import-error
import render_fault_table  # noqa: E402  pylint: disable=wrong-import-position,import-error
from gpufleet_sim import boot, dcgmi, dpkg_lock, fault_table, gpu_hold, nccl_tests, state  # noqa: E402  pylint: disable=wrong-import-position,import-error


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A healthy node root that the in-process tools use (``GPUFLEET_SIM_ROOT``)."""
    made = Node(tmp_path / 'node').healthy()
    monkeypatch.setenv(state.ROOT_ENV, made.root)
    monkeypatch.setenv(state.NO_SYSTEMCTL_ENV, '1')
    return made


def _change_default(monkeypatch, name, key, value):
    """Make ``value`` the table's default of setting ``key`` of fault ``name`` (for this test)."""
    fault = fault_table.FAULTS[name]
    settings = tuple(setting._replace(default=value) if setting.name == key else setting for setting in fault.settings)
    assert settings != fault.settings, (name, key)
    monkeypatch.setitem(fault_table.FAULTS, name, fault._replace(settings=settings))


# --------------------------------------------------------------------------- the table itself

def test_the_table_is_well_formed():
    assert [fault.name for fault in fault_table.TABLE] == list(fault_table.FAULTS)
    kinds = {}
    for fault in fault_table.TABLE:
        assert fault.description and '\n' not in fault.description, fault.name
        names = [setting.name for setting in fault.settings]
        assert len(names) == len(set(names)), fault.name
        for setting in fault.settings:
            assert setting.kind in (int, float, str), (fault.name, setting.name)
            assert setting.default is None or isinstance(setting.default, setting.kind), (fault.name, setting.name)
            assert not setting.choices or setting.default in setting.choices, (fault.name, setting.name)
            # state.load_faults converts a hand-written faults.json by key: one key, one type, whichever fault has it.
            assert kinds.setdefault(setting.name, setting.kind) is setting.kind, setting.name


def test_the_readme_faults_table_is_printed_from_the_table():
    with open(render_fault_table.README, encoding='utf-8') as handle:
        text = handle.read()
    assert render_fault_table.render(text) == text, "tests/sim/README.md differs from fault_table.py: run tests/sim/render_fault_table.py"
    assert render_fault_table.main(['--check']) == 0
    for fault in fault_table.TABLE:
        row = [line for line in text.splitlines() if line.startswith('| `%s` |' % fault.name)]
        assert len(row) == 1, fault.name
        for key, value in fault_table.defaults(fault.name).items():
            assert '`%s` (%s, default %s' % (key, fault_table.KIND_NAMES[type(value)], fault_table.literal(value)) in row[0]


def test_the_readme_check_fails_on_a_drifted_default(tmp_path):
    with open(render_fault_table.README, encoding='utf-8') as handle:
        text = handle.read()
    drifted = tmp_path / 'README.md'
    drifted.write_text(text.replace('`seconds` (integer, default 30) | every boot', '`seconds` (integer, default 60) | every boot'), encoding='utf-8')
    assert drifted.read_text(encoding='utf-8') != text
    assert render_fault_table.main(['--check', '--readme', str(drifted)]) == 1
    assert render_fault_table.main(['--readme', str(drifted)]) == 0 and drifted.read_text(encoding='utf-8') == text


def test_nccl_fail_errors_are_the_ones_the_fake_prints():
    error = fault_table.settings_of('nccl_fail')['error']
    assert set(error.choices) == set(nccl_tests.NCCL_ERRORS)


# --------------------------------------------------------------------------- the consumers follow the table

def test_fleet_cli_writes_the_table_defaults():
    for name in fault_table.names():
        assert fleet_faults.parse_fault_settings(name, []) == fault_table.apply_defaults(name, {}), name
    assert sorted(fleet_faults.FAULTS) == fault_table.names()


def test_fleet_cli_follows_a_changed_default(monkeypatch):
    _change_default(monkeypatch, 'slow_boot', 'seconds', 7)
    _change_default(monkeypatch, 'dpkg_lock', 'seconds', 11)
    _change_default(monkeypatch, 'gpu_held', 'seconds', 13)
    _change_default(monkeypatch, 'long_job', 'seconds', 17)
    _change_default(monkeypatch, 'nccl_fail', 'error', 'remote')
    assert fleet_faults.parse_fault_settings('slow_boot', []) == {'seconds': 7}
    assert fleet_faults.parse_fault_settings('long_job', []) == {'seconds': 17}
    assert fleet_faults.parse_fault_settings('nccl_fail', []) == {'error': 'remote'}
    assert fleet_faults.node_command('dpkg_lock', {})[-2:] == ['--seconds', '11']
    assert fleet_faults.node_command('gpu_held', {'gpu': 1})[-4:] == ['--gpu', '1', '--seconds', '13']


def test_fleet_xid_line_follows_the_table(node, monkeypatch):
    _change_default(monkeypatch, 'xid', 'gpu', 3)
    _change_default(monkeypatch, 'xid', 'xid', 48)
    line = fleet_faults.xid_line(node.hardware, {}, now=0)
    bus = node.hardware['gpus'][3]['pci_bus_id']
    assert 'NVRM: Xid (PCI:%s:%s): 48,' % (bus.split(':', 1)[0][-4:], bus.split(':', 1)[1].rsplit('.', 1)[0]) in line
    assert fleet_faults.XID_TEXT[48] in line


def test_the_node_applies_the_table_defaults(node):
    node.faults(dict((name, {}) for name in fault_table.names()))
    loaded = state.load_faults()
    assert loaded == dict((name, fault_table.apply_defaults(name, {})) for name in fault_table.names())
    assert loaded['diag_fail']['test'] == 'software'
    node.faults({'diag_fail': {'level': '3'}, 'nccl_slow': {'busbw': '40.5'}})
    assert state.load_faults() == {'diag_fail': {'level': 3, 'gpu': 0, 'test': 'memory'}, 'nccl_slow': {'busbw': 40.5}}


def test_the_node_follows_a_changed_default(node, monkeypatch):
    for name, key, value in (('dpkg_lock', 'seconds', 5), ('gpu_held', 'gpu', 2), ('gpu_held', 'seconds', 9),
                             ('gpu_lost', 'gpu', 4), ('xid', 'gpu', 6), ('slow_boot', 'seconds', 3)):
        _change_default(monkeypatch, name, key, value)
    # dpkg_lock and gpu_hold: without the fault set, and with it set without settings
    assert dpkg_lock._seconds(None) == 5  # pylint: disable=protected-access
    assert gpu_hold._target(None, None) == (2, 9)  # pylint: disable=protected-access
    node.faults({'dpkg_lock': {}, 'gpu_held': {}, 'xid': {}})
    assert dpkg_lock._seconds(None) == 5 and dpkg_lock._seconds(1) == 1  # pylint: disable=protected-access
    assert gpu_hold._target(None, None) == (2, 9) and gpu_hold._target(1, 2) == (1, 2)  # pylint: disable=protected-access
    assert state.lost_gpus() == {6}
    assert state.lost_gpus({'xid': {'gpu': 1}}) == {1}
    # the boot step: slow_boot's seconds and gpu_lost's GPU
    slept = []
    monkeypatch.setattr(boot.time, 'sleep', slept.append)
    node.faults({'slow_boot': {}, 'gpu_lost': {}})
    record = boot.boot(now=0)
    assert slept == [3] and record['absent_gpus'] == [4]


def test_dcgmi_follows_the_table(node, monkeypatch):
    del node
    _change_default(monkeypatch, 'diag_fail', 'level', 3)
    _change_default(monkeypatch, 'diag_fail', 'gpu', 5)
    tests = ['software', 'memory']
    applies = dcgmi._fault_applies  # pylint: disable=protected-access
    assert applies({'test': 'memory'}, 3, tests, range(8)) == ('memory', 5)
    assert applies({'test': 'memory'}, 2, tests, range(8)) is None
    # the derived default test follows the changed level: memory from level 2 on
    assert applies({'branch': None}, 3, tests, range(8)) == ('memory', 5)


def test_nccl_tests_follow_the_table(node, monkeypatch):
    _change_default(monkeypatch, 'nccl_fail', 'error', 'remote')
    node.faults({'nccl_fail': {'error': ''}})
    out, err = io.StringIO(), io.StringIO()
    assert nccl_tests.run(['-b', '8M', '-e', '16M', '-g', '8'], out, err, environ={}) == 3
    assert nccl_tests.NCCL_ERRORS['remote'] in out.getvalue()


# --------------------------------------------------------------------------- no consumer writes a default of its own

def _consumer_sources():
    """Every Python file of the simulation but the table itself."""
    paths = glob.glob(os.path.join(SIM, '**', '*.py'), recursive=True)
    return sorted(path for path in paths if os.path.basename(path) != 'fault_table.py')


def _own_defaults(source):
    """(line, text) of each place in ``source`` that writes a fault setting's default or a copy of the fault table:
    ``x.get('<setting>', <anything but None>)`` (also ``setdefault``/``pop``) and a dict literal keyed by fault names."""
    keys = set(setting.name for fault in fault_table.TABLE for setting in fault.settings)
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ('get', 'setdefault', 'pop') \
                and len(node.args) == 2 and isinstance(node.args[0], ast.Constant) and node.args[0].value in keys \
                and not (isinstance(node.args[1], ast.Constant) and node.args[1].value is None):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Dict) and any(isinstance(key, ast.Constant) and key.value in fault_table.FAULTS
                                                and isinstance(value, ast.Dict) for key, value in zip(node.keys, node.values)):
            found.append((node.lineno, ast.unparse(node)[:80]))
    return found


def test_no_consumer_carries_its_own_default():
    assert len(_consumer_sources()) > 20
    offenders = []
    for path in _consumer_sources():
        with open(path, encoding='utf-8') as handle:
            offenders.extend('%s:%d: %s' % (os.path.relpath(path, SIM), line, text) for line, text in _own_defaults(handle.read()))
    assert not offenders, 'fault defaults outside tests/sim/node/gpufleet_sim/fault_table.py:\n' + '\n'.join(offenders)


@pytest.mark.parametrize('source', [
    "seconds = int(slow.get('seconds', 30))\n",
    "gpu = settings.get('gpu', DEFAULT_GPU)\n",
    "DEFAULTS = {'slow_boot': {'seconds': 30}}\n",
])
def test_the_scan_finds_a_consumer_default(source):
    assert _own_defaults(source)


def test_the_scan_leaves_reads_without_default_alone():
    assert not _own_defaults("seconds = int(slow['seconds'])\nbranch = settings.get('branch')\nx = options.get('other', 3)\n")
    assert json.dumps(fault_table.defaults('slow_boot')) == '{"seconds": 30}'
