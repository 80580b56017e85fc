# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gpufleet.lifecycle.fleet_report callback through nested ansible-playbook runs, and drift_report.yml.

Local-connection hosts (stand-in tools, or results made by the collection's own filters) for the callback under
linear, serial and host_pinned and with a ledger; a simulated fleet (build/sim-report-fleet: 3 nodes, no scheduler)
for the drift report on real apt/dpkg: gpu-01 on the pin, gpu-02 with another container toolkit installed, gpu-03
with a GPU fallen off the bus (broken).
"""

import collections
import datetime
import html.parser
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib

import jsonschema
import junitparser
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import drift_stand_ins, ROOT, ansible_environment, fleet_up

sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim', 'packages'))

import catalog  # noqa: E402  pylint: disable=wrong-import-position,import-error

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.gpufleet.lifecycle.tests.needs import require_tool  # noqa: E402  pylint: disable=wrong-import-position

DRIFT_REPORT = os.path.join(ROOT, 'playbooks', 'drift_report.yml')
PLAYBOOKS = os.path.join(os.path.dirname(__file__), 'playbooks')
SCHEMA = os.path.join(ROOT, 'plugins', 'plugin_utils', 'fleet_report.schema.json')
FLEET_STATE = os.path.join(ROOT, 'build', 'sim-report-fleet')
SIM_PIN = {'driver': '550.127.05', 'fabric_manager': '550.127.05', 'container_toolkit': '1.16.2', 'dcgm': '3.3.9'}

FAKE_ROLLOUT = """---
- name: Drift before the rollout
  hosts: nodes
  gather_facts: false
  tasks:
    - name: Compare
      gpufleet.lifecycle.drift_check:
        pin: {driver: "580.65.06"}
        facts: {health: ok, driver_version: "{{ driver[inventory_hostname] }}", gpus: []}

- name: Fake rollout
  hosts: nodes
  gather_facts: false
  serial: "{{ batch | default(0) | int }}"
  tasks:
    - name: Drain
      ansible.builtin.set_fact:
        _node_upgrade: {next: drain, phase: drain, marks: "{{ [['drain', now().timestamp()]] }}"}
    - name: Converge
      ansible.builtin.set_fact:
        _node_upgrade: >-
          {{ _node_upgrade | combine({'next': 'converge', 'phase': 'converge', 'marks': _node_upgrade.marks + [['converge', now().timestamp()]]}) }}
    - name: Validate
      ansible.builtin.set_fact:
        _node_upgrade: >-
          {{ _node_upgrade | combine({'next': 'validate', 'phase': 'validate', 'marks': _node_upgrade.marks + [['validate', now().timestamp()]]}) }}
    - name: End
      ansible.builtin.set_fact:
        _node_upgrade: >-
          {{ _node_upgrade | combine({'next': 'end', 'state': outcome.get(inventory_hostname, 'done'), 'reason': reasons.get(inventory_hostname, ''),
               'phase': 'rollback_validate' if inventory_hostname in outcome else 'uncordon',
               'validation': {'passed': inventory_hostname not in outcome, 'checks': [
                 {'name': 'dcgm_diag_r1', 'passed': inventory_hostname not in outcome, 'message': 'dcgmi diag -r 1: memory'}]}}) }}
    - name: Result
      gpufleet.lifecycle.upgrade_phase:
        step: result
    - name: Fail the nodes that did not pass
      ansible.builtin.fail:
        msg: "{{ node_upgrade_result.state }}: {{ node_upgrade_result.reason }}"
      when: node_upgrade_result.state in ['rolled_back', 'quarantined']
"""
FAKE_VARS = {'driver': {'n1': '580.65.06', 'n2': '550.127.05', 'n3': '580.65.06', 'n4': '580.65.06'},
             'outcome': {'n2': 'rolled_back', 'n3': 'quarantined'},
             'reasons': {'n2': 'validation failed on the new pin', 'n3': 'failed on the new and the previous pin'}}


def run_with_report(playbook, inventory, out, *arguments, stdout_callback='ansible.posix.json', extra_env=None):
    environment = ansible_environment()
    environment.update({'ANSIBLE_CALLBACKS_ENABLED': 'gpufleet.lifecycle.fleet_report', 'GPUFLEET_REPORT_DIR': str(out),
                        'ANSIBLE_STDOUT_CALLBACK': stdout_callback})
    environment.update(extra_env or {})
    return subprocess.run(['ansible-playbook', '-i', inventory, playbook] + list(arguments), env=environment, cwd=ROOT,
                          capture_output=True, text=True, check=False, timeout=600)


def load_report(out):
    with open(os.path.join(str(out), 'report.json'), encoding='utf-8') as handle:
        report = json.load(handle)
    with open(SCHEMA, encoding='utf-8') as handle:
        jsonschema.validate(report, json.load(handle))
    return report


def junit_cases(out):
    suite = list(junitparser.JUnitXml.fromfile(os.path.join(str(out), 'junit.xml')))[0]
    return dict((case.name, [(type(item).__name__, item.type) for item in case.result]) for case in suite)


def metric_samples(out):
    with open(os.path.join(str(out), 'metrics.prom'), encoding='utf-8') as handle:
        text = handle.read()
    return dict(((sample.name, tuple(sorted((key, value) for key, value in sample.labels.items() if key != 'playbook'))), sample.value)
                for family in text_string_to_metric_families(text) for sample in family.samples)


def drifted(report):
    """{node: [drifted components]} of the nodes whose state is drifted."""
    return dict((node['name'], sorted(name for name, entry in node['drift']['components'].items() if entry['status'] == 'drifted'))
                for node in report['nodes'] if node['state'] == 'drifted')


def local_inventory(tmp_path, names):
    path = tmp_path / 'inventory.json'
    path.write_text(json.dumps({'nodes': {'hosts': dict((name, {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable})
                                                        for name in names)}}), encoding='utf-8')
    return str(path)


# ----------------------------------------------------------------------------------------------------------------
# Stand-in hosts: drift_report.yml with the callback.

DPKG_LISTING = ''.join('%s\t%s\t%s\n' % row for row in [
    ('nvidia-driver-535', '535.129.03-0ubuntu0.22.04.1', 'hi '),
    ('nvidia-container-toolkit', '1.12.0-1', 'ii '),
    ('nvidia-container-toolkit-base', '1.12.0-1', 'ii '),
    ('datacenter-gpu-manager', '1:3.3.1', 'ii '),
])


@pytest.fixture
def stand_in_fleet(fleet, tmp_path):
    drift_stand_ins(fleet, DPKG_LISTING)
    pin = tmp_path / 'baseline.env'
    pin.write_text('DRIVER_VERSION=535.54.03\nCONTAINER_TOOLKIT=1.12.0\nDCGM_VERSION=3.3.1\n', encoding='utf-8')
    return fleet.inventory(), str(pin)


def test_drift_report_callback_files(stand_in_fleet, tmp_path):
    inventory, pin = stand_in_fleet
    out = tmp_path / 'report'
    process = run_with_report(DRIFT_REPORT, inventory, out, '-e', 'gpufleet_pin_file=%s' % pin)
    assert process.returncode == 0, process.stderr
    json.loads(process.stdout)  # the callback prints nothing into the stdout callback's JSON
    report = load_report(out)
    assert report['kind'] == 'drift' and report['run']['check_mode'] is True and report['run']['playbooks'] == ['drift_report.yml']
    states = dict((node['name'], node['state']) for node in report['nodes'])
    assert states == {'in-sync': 'in_sync', 'old-driver': 'drifted', 'mismatch': 'broken'}
    assert drifted(report) == {'old-driver': ['container_toolkit', 'driver']}
    assert junit_cases(out) == {'in-sync': [], 'old-driver': [('Failure', 'drift')], 'mismatch': [('Failure', 'broken')]}
    samples = metric_samples(out)
    assert samples[('gpufleet_drift_nodes', (('status', 'broken'),))] == 1
    assert samples[('gpufleet_drifted_nodes', (('component', 'driver'),))] == 1
    assert samples[('gpufleet_drifted_nodes', (('component', 'dcgm'),))] == 0
    with open(os.path.join(str(out), 'report.html'), encoding='utf-8') as handle:
        page = handle.read()
    assert 'data-component="driver"' in page and '515.105.01' in page
    assert sorted(os.listdir(str(out))) == ['junit.xml', 'metrics.prom', 'report.html', 'report.json', 'report.md']


# ----------------------------------------------------------------------------------------------------------------
# report.html in headless Chromium (Debian's chromium package, installed by hacking/system_tools.sh).

# The screenshot and the DOM Chromium built are kept for a person to look at (make clean removes them).
HTML_ARTIFACTS = os.path.join(ROOT, 'tests', 'output', 'fleet_report')
WINDOW = (1280, 1600)
# The report's CSS backgrounds of a node's state (fleet_report.html.j2): each must be painted on the screenshot.
PAINTED = {'in_sync': b'\xe8\xf5\xe9', 'drifted': b'\xff\xf3\xe0', 'broken': b'\xff\xeb\xee'}


def chromium(page, profile, *arguments):
    """Run headless Chromium on ``page`` (a file); fails, never skips, when Chromium is not installed."""
    binary = require_tool('chromium', 'apt-get install chromium (Debian; make test does it as root, hacking/system_tools.sh)')
    # --no-sandbox: the tests run as root; its own profile folder, so parallel runs and a person's profile do not collide.
    command = [binary, '--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--hide-scrollbars', '--user-data-dir=' + profile,
               '--window-size=%d,%d' % WINDOW] + list(arguments) + ['file://' + page]
    process = subprocess.run(command, capture_output=True, text=True, check=False, timeout=90)
    assert process.returncode == 0, process.stderr[-3000:]
    return process


def png_colours(path):
    """((width, height), Counter of RGB pixels) of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes)."""
    with open(path, 'rb') as handle:
        data = handle.read()
    assert data[:8] == b'\x89PNG\r\n\x1a\n', '%s is not a PNG' % path
    position, compressed, header = 8, [], None
    while position < len(data):
        length, kind = struct.unpack('>I4s', data[position:position + 8])
        if kind == b'IHDR':
            header = struct.unpack('>IIBBBBB', data[position + 8:position + 8 + length])
        elif kind == b'IDAT':
            compressed.append(data[position + 8:position + 8 + length])
        position += 12 + length
    width, height, depth, colour_type, _compression, _filter, interlace = header
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, header
    channels = 3 if colour_type == 2 else 4
    raw = zlib.decompress(b''.join(compressed))
    stride = width * channels
    previous = bytearray(stride)
    colours = collections.Counter()
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if kind == 2:
            line = bytearray((value + above) & 255 for value, above in zip(line, previous))
        elif kind in (1, 3, 4):
            for index in range(stride):
                left = line[index - channels] if index >= channels else 0
                above = previous[index]
                if kind == 1:
                    predicted = left
                elif kind == 3:
                    predicted = (left + above) >> 1
                else:
                    corner = previous[index - channels] if index >= channels else 0
                    estimate = left + above - corner
                    distances = (abs(estimate - left), abs(estimate - above), abs(estimate - corner))
                    predicted = left if distances[0] <= distances[1] and distances[0] <= distances[2] else above if distances[1] <= distances[2] else corner
                line[index] = (line[index] + predicted) & 255
        colours.update(bytes(line[index:index + 3]) for index in range(0, stride, channels))
        previous = line
    return (width, height), colours


class ReportPage(html.parser.HTMLParser):
    """The summary cards and the drift tables of the DOM Chromium dumped."""

    def __init__(self):
        super().__init__()
        self.cards = {}
        self.drift = {}
        self._card = None
        self._table = None
        self._row = None
        self._cell = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == 'div' and 'card' in (attributes.get('class') or '').split():
            self._card = []
        elif tag == 'table' and attributes.get('class') == 'drift':
            self._table = self.drift.setdefault(attributes.get('data-component'), [])
        elif tag == 'tr' and self._table is not None:
            self._row = []
        elif tag == 'td' and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == 'div' and self._card is not None:
            words = ' '.join(self._card).split()
            self.cards[' '.join(words[:-1])] = words[-1]
            self._card = None
        elif tag == 'td' and self._cell is not None:
            self._row.append(''.join(self._cell).strip())
            self._cell = None
        elif tag == 'tr' and self._row is not None:
            if self._row:
                self._table.append(tuple(self._row[:4]))
            self._row = None
        elif tag == 'table':
            self._table = None

    def handle_data(self, data):
        for part in (self._card, self._cell):
            if part is not None:
                part.append(data)


def test_report_html_renders_in_headless_chromium(stand_in_fleet, tmp_path):
    """The drift report's report.html as a browser shows it: the DOM Chromium builds holds the summary and a drift table per
    component that match report.json, and the screenshot is a page of the window's size painted with the states' colours."""
    inventory, pin = stand_in_fleet
    out = tmp_path / 'report'
    process = run_with_report(DRIFT_REPORT, inventory, out, '-e', 'gpufleet_pin_file=%s' % pin)
    assert process.returncode == 0, process.stderr
    report = load_report(out)
    page = os.path.join(str(out), 'report.html')
    shutil.rmtree(HTML_ARTIFACTS, ignore_errors=True)
    os.makedirs(HTML_ARTIFACTS)
    screenshot = os.path.join(HTML_ARTIFACTS, 'report-html.png')
    chromium(page, str(tmp_path / 'profile'), '--screenshot=' + screenshot)
    dom = chromium(page, str(tmp_path / 'profile'), '--dump-dom').stdout
    with open(os.path.join(HTML_ARTIFACTS, 'report-html.dom.html'), 'w', encoding='utf-8') as handle:
        handle.write(dom)
    parsed = ReportPage()
    parsed.feed(dom)
    parsed.close()
    assert parsed.cards == {'nodes': '3', 'in_sync': '1', 'drifted': '1', 'broken': '1', 'failures': str(report['summary']['failures'])}
    expected = dict((component, sorted((node['name'], entry['status'], entry['actual'] if entry['actual'] is not None else 'not installed',
                                        entry['expected'] or '-')
                                       for node in report['nodes'] if (node['drift'] or {}).get('components')
                                       for name, entry in node['drift']['components'].items() if name == component))
                    for component in ('driver', 'container_toolkit', 'dcgm'))
    assert dict((component, sorted(rows)) for component, rows in parsed.drift.items() if component in expected) == expected
    assert ('old-driver', 'drifted', '515.105.01', '535.54.03') in parsed.drift['driver']
    assert ('old-driver', 'drifted', '1.11.0-1', '1.12.0') in parsed.drift['container_toolkit']
    size, colours = png_colours(screenshot)
    assert size == WINDOW
    white = colours.get(b'\xff\xff\xff', 0)
    assert white < 0.97 * size[0] * size[1], 'the screenshot is (nearly) blank'
    assert dict((state, colours.get(rgb, 0) > 400) for state, rgb in PAINTED.items()) == dict((state, True) for state in PAINTED), dict(
        (state, colours.get(rgb, 0)) for state, rgb in PAINTED.items())


def test_drift_report_fails_for_alerting_only_when_asked(stand_in_fleet, tmp_path):
    inventory, pin = stand_in_fleet
    out = tmp_path / 'report'
    process = run_with_report(DRIFT_REPORT, inventory, out, '-e', 'gpufleet_pin_file=%s' % pin, '-e', 'gpufleet_fail_on_drift=true')
    assert process.returncode == 2, process.stderr
    document = json.loads(process.stdout)
    verdict = [task['hosts']['localhost'] for play in document['plays'] for task in play['tasks']
               if task['task']['name'].startswith('Fail when nodes are drifted')][0]
    assert verdict['failed'] and verdict['msg'] == 'drift found: drifted old-driver; broken mismatch'
    # The failure is the controller's: no GPU node is charged with it.
    report = load_report(out)
    assert [node['result'] for node in report['nodes']] == ['ok', 'ok', 'ok'] and 'localhost' not in [node['name'] for node in report['nodes']]
    in_sync_only = tmp_path / 'in_sync_only'
    process = run_with_report(DRIFT_REPORT, inventory, in_sync_only, '-e', 'gpufleet_pin_file=%s' % pin, '-e', 'gpufleet_fail_on_drift=true',
                              '--limit', 'in-sync')
    assert process.returncode == 0, process.stdout[-3000:]


def test_limit_shards_merge_into_one_report(stand_in_fleet, tmp_path):
    inventory, pin = stand_in_fleet
    first, second = tmp_path / 'shard1', tmp_path / 'shard2'
    assert run_with_report(DRIFT_REPORT, inventory, first, '-e', 'gpufleet_pin_file=%s' % pin, '--limit', 'in-sync,old-driver').returncode == 0
    process = run_with_report(DRIFT_REPORT, inventory, second, '-e', 'gpufleet_pin_file=%s' % pin, '--limit', 'mismatch',
                              extra_env={'GPUFLEET_REPORT_MERGE': str(first)})
    assert process.returncode == 0, process.stderr
    merged = load_report(second)
    assert merged['run']['shards'] == 2
    assert dict((node['name'], node['state']) for node in merged['nodes']) == {'in-sync': 'in_sync', 'old-driver': 'drifted', 'mismatch': 'broken'}
    # The same merge afterwards, from the command line.
    third = tmp_path / 'merged'
    command = [sys.executable, '-m', 'ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._report_cli', 'merge', '--output', str(third),
               str(first), str(tmp_path / 'shard2_only')]
    run_with_report(DRIFT_REPORT, inventory, tmp_path / 'shard2_only', '-e', 'gpufleet_pin_file=%s' % pin, '--limit', 'mismatch')
    environment = ansible_environment()
    environment['PYTHONPATH'] = os.pathsep.join([os.path.join(ROOT, 'build', 'collections')] + [
        path for path in environment.get('PYTHONPATH', '').split(os.pathsep) if path])
    process = subprocess.run(command, env=environment, capture_output=True, text=True, check=False, timeout=120)
    assert process.returncode == 0, process.stderr
    assert load_report(third)['summary'] == merged['summary']
    assert junit_cases(third) == {'in-sync': [], 'old-driver': [('Failure', 'drift')], 'mismatch': [('Failure', 'broken')]}


# ----------------------------------------------------------------------------------------------------------------
# Strategies and the ledger, on results made by the collection's own filters.

@pytest.mark.parametrize('strategy, batch', [('linear', 0), ('linear', 2), ('ansible.builtin.host_pinned', 0)])
def test_callback_under_linear_serial_and_host_pinned(tmp_path, strategy, batch):
    playbook = tmp_path / 'rollout.yml'
    playbook.write_text(FAKE_ROLLOUT, encoding='utf-8')
    out = tmp_path / 'report'
    process = run_with_report(str(playbook), local_inventory(tmp_path, ['n1', 'n2', 'n3', 'n4']), out, '-e', json.dumps(dict(FAKE_VARS, batch=batch)),
                              stdout_callback='ansible.builtin.default', extra_env={'ANSIBLE_STRATEGY': strategy, 'ANSIBLE_FORKS': '4'})
    assert process.returncode == 2, process.stdout[-3000:] + process.stderr
    report = load_report(out)
    nodes = dict((node['name'], node) for node in report['nodes'])
    assert report['kind'] == 'rollout'
    assert dict((name, node['state']) for name, node in nodes.items()) == {'n1': 'done', 'n2': 'rolled_back', 'n3': 'quarantined', 'n4': 'done'}
    assert nodes['n2']['drift']['status'] == 'drifted' and nodes['n2']['failure']['kind'] == 'rolled_back'
    assert nodes['n3']['failure'] == {
        'kind': 'quarantined', 'reason': 'failed on the new and the previous pin (validation: dcgm_diag_r1: dcgmi diag -r 1: memory)',
        'phase': 'rollback_validate'}
    assert [span['phase'] for span in nodes['n1']['timeline']] == ['drain', 'converge', 'validate']
    assert [nodes[name]['batch'] for name in sorted(nodes)] == ([1, 1, 2, 2] if batch == 2 else [1, 1, 1, 1])
    assert junit_cases(out) == {'n1': [], 'n2': [('Failure', 'rolled_back')], 'n3': [('Failure', 'quarantined')], 'n4': []}
    samples = metric_samples(out)
    assert [samples[('gpufleet_nodes_upgrades_%s' % key, ())] for key in ('in_progress', 'done', 'failed', 'pending')] == [0, 2, 2, 0]
    # Live progress: a line per change of each node, a fleet line at the end.
    lines = process.stdout.splitlines()
    assert 'n1 drain' in lines and any(line.startswith('n1 drain \u2192 converge (') for line in lines)
    assert any(line.startswith('n2 validate \u2192 rolled_back (') and line.endswith('validation failed on the new pin') for line in lines)
    assert [line for line in lines if line.startswith('fleet: ')][-1].startswith('fleet: 2 done, 0 in flight, 0 pending, 2 failed')


def test_report_and_progress_follow_the_ledger(tmp_path):
    clock = iter(datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=30 * step)
                 for step in range(100))
    ledger = _ledger.RunLedger.create(_ledger.FileBackend(str(tmp_path / 'runs')), 'r1', inventory='inv', pin={'driver': '580.65.06'},
                                      nodes=dict((name, {'gpus': 8}) for name in ('n1', 'n2', 'n3', 'n4', 'n5')), clock=lambda: next(clock))
    for state in ('admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'done'):
        ledger.transition('n1', state, '')
    for state in ('admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'rolling_back', 'rolled_back'):
        ledger.transition('n2', state, 'validation failed on the new pin' if state == 'rolled_back' else '')
    for state in ('admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'rolling_back', 'quarantined'):
        ledger.transition('n3', state, 'failed on the new and the previous pin' if state == 'quarantined' else '')
    ledger.transition('n4', 'admitted', '')
    ledger.transition('n4', 'deferred', 'drain timed out')
    playbook = tmp_path / 'rollout.yml'
    playbook.write_text(FAKE_ROLLOUT, encoding='utf-8')
    out = tmp_path / 'report'
    process = run_with_report(str(playbook), local_inventory(tmp_path, ['n1', 'n2', 'n3']), out,
                              '-e', json.dumps(dict(FAKE_VARS, gpufleet_run_dir=str(tmp_path / 'runs'), gpufleet_run_id='r1')),
                              stdout_callback='ansible.builtin.default')
    assert process.returncode == 2, process.stderr
    report = load_report(out)
    assert report['run']['ledger'] == str(tmp_path / 'runs' / 'r1' / 'ledger.jsonl') and report['run']['id'] == 'r1'
    assert dict((node['name'], node['state']) for node in report['nodes']) == {
        'n1': 'done', 'n2': 'rolled_back', 'n3': 'quarantined', 'n4': 'deferred', 'n5': 'pending'}
    assert junit_cases(out)['n4'] == [('Skipped', None)] and junit_cases(out)['n3'] == [('Failure', 'quarantined')]
    samples = metric_samples(out)
    assert [samples[('gpufleet_nodes_upgrades_%s' % key, ())] for key in ('in_progress', 'done', 'failed', 'pending')] == [0, 1, 2, 2]
    assert samples[('gpufleet_nodes', (('state', 'deferred'),))] == 1
    lines = process.stdout.splitlines()
    assert 'n2 rolling_back \u2192 rolled_back (30s): validation failed on the new pin' in lines
    assert 'n4 admitted \u2192 deferred (30s): drain timed out' in lines
    # With a ledger the lines are the ledger's states, not the procedure's phases.
    assert 'n1 drained \u2192 converging (30s)' in lines
    assert not any(line.startswith(('n1 drain ', 'n1 validate ')) or line == 'n1 drain' for line in lines)


# ----------------------------------------------------------------------------------------------------------------
# The simulated fleet.

@pytest.fixture(scope='module')
def report_fleet():
    yield from fleet_up(FLEET_STATE, 3, 'none')


def node_state(fleet, node):
    """Installed packages with their selections and holds, and the boot (a reboot writes a new boot.json)."""
    packages = fleet.node_exec(node, 'dpkg-query', '-W', '-f', '${Package} ${Version} ${db:Status-Abbrev}\n').stdout
    return packages, fleet.node_exec(node, 'cat', '/run/gpufleet-sim/boot.json').stdout


def test_drift_report_on_a_seeded_simulated_fleet(report_fleet, tmp_path):
    packages = catalog.exact_install('nvidia-container-toolkit', '1.17.0-1')
    seeded = report_fleet.playbook(os.path.join(PLAYBOOKS, 'sim_apt_install.yml'), '-e', 'target=gpu-02', '-e',
                                   json.dumps({'new_packages': packages}))
    assert seeded.rc == 0, seeded.stderr
    report_fleet.fleet('fault', 'gpu-03', 'xid', 'gpu=5', 'xid=79')
    try:
        before = dict((node, node_state(report_fleet, node)) for node in report_fleet.nodes)
        out = tmp_path / 'report'
        # No --check on the command line: the playbook is read-only by construction.
        process = run_with_report(DRIFT_REPORT, report_fleet.inventory, out, '-e', json.dumps({'gpufleet_pin': SIM_PIN}))
        after = dict((node, node_state(report_fleet, node)) for node in report_fleet.nodes)
        alarm = run_with_report(DRIFT_REPORT, report_fleet.inventory, tmp_path / 'alarm', '-e',
                                json.dumps({'gpufleet_pin': SIM_PIN, 'gpufleet_fail_on_drift': True}))
    finally:
        report_fleet.fleet('fault', 'gpu-03', 'clear')
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr
    assert after == before
    assert 'nvidia-container-toolkit 1.17.0-1 ii ' in after['gpu-02'][0].splitlines()
    assert all(json.loads(after[node][1])['driver'] == '550.127.05' for node in after)
    report = load_report(out)
    assert dict((node['name'], node['state']) for node in report['nodes']) == {'gpu-01': 'in_sync', 'gpu-02': 'drifted', 'gpu-03': 'broken'}
    assert drifted(report) == {'gpu-02': ['container_toolkit']}
    gpu_02 = [node for node in report['nodes'] if node['name'] == 'gpu-02'][0]
    assert (gpu_02['drift']['components']['container_toolkit']['actual'], gpu_02['drift']['components']['container_toolkit']['expected']) == (
        '1.17.0-1', '1.16.2')
    assert [node['drift']['health_reason'] for node in report['nodes'] if node['state'] == 'broken'] == ['gpu_lost']
    assert junit_cases(out) == {'gpu-01': [], 'gpu-02': [('Failure', 'drift')], 'gpu-03': [('Failure', 'broken')]}
    samples = metric_samples(out)
    assert dict((labels[0][1], value) for (name, labels), value in samples.items() if name == 'gpufleet_drifted_nodes') == {
        'container_toolkit': 1, 'dcgm': 0, 'driver': 0, 'fabric_manager': 0}
    assert dict((labels[0][1], value) for (name, labels), value in samples.items() if name == 'gpufleet_drift_nodes') == {
        'in_sync': 1, 'drifted': 1, 'broken': 1, 'not_checked': 0}
    assert alarm.returncode == 2, alarm.stderr
    assert load_report(tmp_path / 'alarm')['summary']['drift'] == report['summary']['drift']


# ----------------------------------------------------------------------------------------------------------------
# ansible-runner, the engine AWX uses.

def test_drift_report_through_ansible_runner_leaves_artifacts_and_the_summary(stand_in_fleet, tmp_path):
    import ansible_runner  # pylint: disable=import-outside-toplevel

    inventory, pin = stand_in_fleet
    environment = ansible_environment()
    for name in ('ANSIBLE_STDOUT_CALLBACK', 'ANSIBLE_CALLBACK_RESULT_FORMAT'):
        environment.pop(name, None)
    environment.update({'ANSIBLE_CALLBACKS_ENABLED': 'gpufleet.lifecycle.fleet_report', 'GPUFLEET_REPORT_DIR': str(tmp_path / 'report')})
    (tmp_path / 'runner').mkdir()
    runner = ansible_runner.run(private_data_dir=str(tmp_path / 'runner'), playbook=DRIFT_REPORT, inventory=inventory, ident='nightly',
                                extravars={'gpufleet_pin_file': pin}, envvars=environment, quiet=True)
    assert (runner.status, runner.rc) == ('successful', 0), runner.stdout.read()[-3000:]
    stats = [event for event in runner.events if event['event'] == 'playbook_on_stats']
    assert stats[0]['event_data']['artifact_data']['gpufleet_drift_summary'] == {
        'in_sync': ['in-sync'], 'drifted': ['old-driver'], 'broken': ['mismatch'], 'not_checked': [], 'not_reported': []}
    artifacts = tmp_path / 'runner' / 'artifacts' / 'nightly'
    assert (artifacts / 'rc').read_text(encoding='utf-8') == '0' and (artifacts / 'job_events').is_dir()
    report = load_report(tmp_path / 'report')
    assert dict((node['name'], node['state']) for node in report['nodes']) == {'in-sync': 'in_sync', 'old-driver': 'drifted', 'mismatch': 'broken'}


BATCH_SUMMARY = """---
- name: The end of two batches of a rollout in batch mode
  hosts: nodes
  gather_facts: false
  serial: 2
  max_fail_percentage: 100
  vars:
    gpufleet_run_id: r-batch
    gpufleet_max_fail_percentage: 100
    gpufleet_results_dir: /results
  tasks:
    - name: A result per node
      ansible.builtin.set_fact:
        node_upgrade_result: {state: "{{ outcome[inventory_hostname] }}", phase: validate, reason: "{{ reasons.get(inventory_hostname, '') }}"}
    - name: Report the batch
      ansible.builtin.include_tasks: %s
""" % os.path.join(ROOT, 'playbooks', 'tasks', 'rollout_summary.yml')


def test_batch_mode_hands_awx_the_rollout_summary(tmp_path):
    """The batch summary of the rollout plays (playbooks/tasks/rollout_summary.yml) hands on gpufleet_rollout_summary with set_stats; the last
    batch's wins, and it holds every node of the play."""
    playbook = tmp_path / 'batch.yml'
    playbook.write_text(BATCH_SUMMARY, encoding='utf-8')
    variables = {'outcome': {'n1': 'done', 'n2': 'rolled_back', 'n3': 'done'}, 'reasons': {'n2': 'validation failed on the new pin'}}
    environment = ansible_environment()
    environment['ANSIBLE_SHOW_CUSTOM_STATS'] = '1'
    process = subprocess.run(['ansible-playbook', '-i', local_inventory(tmp_path, ['n1', 'n2', 'n3']), str(playbook), '-e', json.dumps(variables)],
                             env=environment, cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)
    assert process.returncode == 2, process.stdout[-3000:] + process.stderr
    assert json.loads(process.stdout)['global_custom_stats']['gpufleet_rollout_summary'] == {
        'run_id': 'r-batch', 'status': 'finished', 'counts': {'done': 2, 'rolled_back': 1}, 'results_dir': '/results',
        'nodes': {'n1': {'state': 'done', 'reason': ''}, 'n2': {'state': 'rolled_back', 'reason': 'validation failed on the new pin'},
                  'n3': {'state': 'done', 'reason': ''}},
        'message': 'run r-batch finished: 2 done, 1 rolled_back'}
