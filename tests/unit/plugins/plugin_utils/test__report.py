# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report: model (_report), formats (_report_render) and live progress (_report_progress).

Inputs come from the real producers: drift_check's ``_drift.compute_drift`` and node_upgrade's ``_upgrade.result``,
the ledger from ``_ledger.RunLedger``.  The formats are read back with the libraries a consumer uses: jsonschema,
junitparser, prometheus_client's text parser, an HTML parser.
"""

import copy
import datetime
import html.parser
import json
import os
from xml.etree import ElementTree

import jsonschema
import junitparser
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._drift import compute_drift
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _upgrade
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _report
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _report_render
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._report_progress import Progress

H100 = 'NVIDIA H100 80GB HBM3'
FACTS = {
    'health': 'ok', 'health_reason': None, 'health_message': None, 'driver_version': '550.127.05', 'cuda_driver_version': '12.4',
    'kernel': '6.1.0-26-amd64', 'gpu_count': 2, 'nvswitch_count': 4, 'package_manager': 'dpkg',
    'gpus': [{'index': 0, 'name': H100, 'uuid': 'GPU-aaaa', 'vbios_version': '96.00.99.00.01', 'gsp_firmware_version': '550.127.05'},
             {'index': 1, 'name': H100, 'uuid': 'GPU-bbbb', 'vbios_version': '96.00.99.00.01', 'gsp_firmware_version': '550.127.05'}],
    'packages': {'nvidia-driver-550-server': '550.127.05-0ubuntu1', 'nvidia-fabricmanager-550': '550.127.05-1',
                 'nvidia-container-toolkit': '1.16.2-1', 'nvidia-container-toolkit-base': '1.16.2-1'},
    'tools': {'dcgm': '3.3.9', 'nvidia_ctk': '1.16.2', 'fabric_manager': '550.127.05', 'nvcc': None},
    'driver_source': 'host_package', 'driver_source_evidence': 'package nvidia-driver-550-server 550.127.05-0ubuntu1 (dpkg)',
}
# The real H100's driver (tests/unit/plugins/module_utils/test__facts_h100.py): a mounted tree no package owns.
UNOWNED = {'driver_source': 'unowned', 'driver_source_evidence': (
    'nvidia-smi at /usr/local/nvidia/bin/nvidia-smi; loaded nvidia module 580.159.04 (/proc/driver/nvidia/version); '
    'driver tree /usr/local/nvidia (/usr/local/nvidia/version: 580.159.04); '
    'no driver package (dpkg), no GPU Operator root, no nvidia-installer log or nvidia-uninstall')}
RUNFILE = {'driver_source': 'runfile', 'driver_source_evidence': "/var/log/nvidia-installer.log (NVIDIA's runfile installer)"}
PIN = {'driver': '550.127.05', 'fabric_manager': '550.127.05', 'container_toolkit': '1.16.2', 'dcgm': '3.3.9'}
T0 = 1795000000.0


def drift_result(facts, pin=None):
    """What the drift_check action returns (its documented keys)."""
    pin = pin or PIN
    result = compute_drift(facts, pin)
    result.update(pin=pin, msg=result['message'], changed=result['status'] == 'drifted')
    return result


def fleet_facts():
    drifted = copy.deepcopy(FACTS)
    drifted['packages'].update({'nvidia-container-toolkit': '1.17.0-1', 'nvidia-container-toolkit-base': '1.17.0-1'})
    broken = dict(copy.deepcopy(FACTS), health='broken', health_reason='gpu_lost', driver_version=None, gpus=[],
                  health_message='Unable to determine the device handle for GPU0000:1B:00.0: Unknown Error')
    return {'gpu-01': FACTS, 'gpu-02': drifted, 'gpu-03': broken}


def drift_hosts():
    hosts = {}
    for index, (name, facts) in enumerate(sorted(fleet_facts().items())):
        hosts[name] = {'result': 'ok', 'errors': [], 'drift': drift_result(facts), 'batch': 1, 'start': T0 + index, 'end': T0 + index + 2}
    hosts['gpu-04'] = {'result': 'unreachable', 'errors': [{'task': 'Compare the stack with the pin', 'msg': 'ssh: connection refused'}],
                       'batch': 1, 'start': T0, 'end': T0 + 1}
    return hosts


RUN = {'id': 'nightly', 'playbooks': ['drift_report.yml'], 'started': T0, 'finished': T0 + 12, 'check_mode': True,
       'ansible_version': '2.19.14', 'collection_version': '0.1.0'}


@pytest.fixture
def drift_report():
    return _report.build(RUN, drift_hosts())


def diag_checks(levels):
    checks = [{'name': 'health', 'passed': True, 'message': 'ok'}]
    for level, verdict in levels:
        message = {'pass': 'dcgmi diag -r %s passed' % level, 'fail': 'dcgmi diag -r %s failed: GPU 2: memory' % level,
                   'not_run': 'not run: an earlier level of the ladder failed'}[verdict]
        checks.append({'name': 'dcgm_diag_r%s' % level, 'passed': verdict == 'pass', 'message': message})
    return {'passed': all(verdict == 'pass' for _level, verdict in levels), 'checks': checks}


def upgrade(state, phase, reason='', levels=(('1', 'pass'), ('3', 'pass')), start=T0):
    marks = [['precheck', start], ['drain', start + 5], ['converge', start + 20], ['reboot', start + 80], ['validate', start + 140]]
    if state in ('rolled_back', 'quarantined'):
        marks += [['rollback', start + 200]]
    return _upgrade.result(state, phase, reason, marks=marks, end=start + 260, facts_before=FACTS, facts_after=FACTS,
                           validation=diag_checks(levels), scheduler='none')


def rollout_hosts():
    return {
        'gpu-01': {'result': 'ok', 'upgrade': upgrade('done', 'uncordon'), 'batch': 1, 'rollout': True, 'start': T0, 'end': T0 + 260},
        'gpu-02': {'result': 'failed', 'batch': 2, 'rollout': True,
                   'upgrade': upgrade('rolled_back', 'rollback_validate', 'validation failed on the new pin', levels=(('1', 'pass'), ('3', 'fail')))},
        'gpu-03': {'result': 'failed', 'batch': 2, 'rollout': True,
                   'upgrade': upgrade('quarantined', 'rollback_validate', 'failed on the new and the previous pin',
                                      levels=(('1', 'fail'), ('3', 'not_run')))},
        'gpu-04': {'result': None, 'rollout': True},
    }


# ----------------------------------------------------------------------------------------------------------------
# The model.

def test_drift_report_lists_exactly_the_drifted_nodes_and_components(drift_report):
    nodes = dict((node['name'], node) for node in drift_report['nodes'])
    assert drift_report['kind'] == 'drift'
    assert [name for name, node in nodes.items() if node['state'] == 'drifted'] == ['gpu-02']
    assert [name for name, entry in nodes['gpu-02']['drift']['components'].items() if entry['status'] == 'drifted'] == ['container_toolkit']
    assert nodes['gpu-02']['drift']['components']['container_toolkit'] == {
        'status': 'drifted', 'expected': '1.16.2', 'actual': '1.17.0-1', 'source': 'nvidia-container-toolkit', 'gpus': {}}
    assert nodes['gpu-01']['drift']['components']['driver']['actual'] == '550.127.05'
    assert (nodes['gpu-03']['state'], nodes['gpu-03']['failure']['kind']) == ('broken', 'broken')
    assert 'gpu_lost' in nodes['gpu-03']['failure']['reason']
    assert (nodes['gpu-04']['state'], nodes['gpu-04']['failure']) == (
        'unreachable', {'kind': 'unreachable', 'reason': 'ssh: connection refused', 'phase': 'Compare the stack with the pin'})
    summary = drift_report['summary']
    assert summary['drift'] == {'in_sync': 1, 'drifted': 1, 'broken': 1, 'not_checked': 0}
    assert summary['drifted_components'] == {'container_toolkit': 1, 'dcgm': 0, 'driver': 0, 'fabric_manager': 0}
    assert summary['states']['unreachable'] == 1 and summary['failures'] == 3
    assert drift_report['pin'] == PIN


def test_a_broken_node_is_never_counted_drifted(drift_report):
    broken = [node for node in drift_report['nodes'] if node['name'] == 'gpu-03'][0]
    assert set(entry['status'] for entry in broken['drift']['components'].values()) == {'unverified'}
    assert drift_report['summary']['drifted_components']['container_toolkit'] == 1


def test_rollout_report_states_failures_validation_and_phases():
    report = _report.build(dict(RUN, playbooks=['rolling_restart.yml'], check_mode=False), rollout_hosts())
    nodes = dict((node['name'], node) for node in report['nodes'])
    assert report['kind'] == 'rollout'
    assert [nodes[name]['state'] for name in sorted(nodes)] == ['done', 'rolled_back', 'quarantined', 'pending']
    assert nodes['gpu-02']['failure']['kind'] == 'rolled_back' and nodes['gpu-02']['failure']['phase'] == 'rollback_validate'
    assert 'dcgm_diag_r3' in nodes['gpu-02']['failure']['reason']
    assert nodes['gpu-03']['validation'] == {'1': 'fail', '3': 'not_run'}
    assert nodes['gpu-01']['failure'] is None and nodes['gpu-04']['failure'] is None
    assert report['summary']['progress'] == {'in_progress': 0, 'done': 1, 'failed': 2, 'pending': 1}
    assert {'level': '3', 'batch': '2', 'slot': '', 'pass': 0, 'fail': 1, 'not_run': 1} in report['summary']['validation']
    assert report['summary']['phases']['converge'] == {'nodes': 3, 'total': 180.0, 'max': 60.0, 'mean': 60.0}
    assert [span['phase'] for span in nodes['gpu-01']['timeline']] == ['precheck', 'drain', 'converge', 'reboot', 'validate']


def make_ledger(tmp_path):
    clock = iter(datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=30 * step)
                 for step in range(100))
    ledger = _ledger.RunLedger.create(_ledger.FileBackend(str(tmp_path)), 'run1', inventory='inv', policy={'max_fail_percentage': 50},
                                      pin=PIN, nodes=dict((name, {'gpus': 8}) for name in ('gpu-01', 'gpu-02', 'gpu-03', 'gpu-04', 'gpu-05')),
                                      clock=lambda: next(clock))
    for state in ('admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'done'):
        ledger.transition('gpu-01', state, '')
    for state in ('admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'rolling_back'):
        ledger.transition('gpu-02', state, '')
    ledger.transition('gpu-02', 'rolled_back', 'validation failed on the new pin')
    for state in ('admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'rolling_back'):
        ledger.transition('gpu-03', state, '')
    ledger.transition('gpu-03', 'quarantined', 'failed on the new and the previous pin')
    ledger.transition('gpu-04', 'admitted', '')
    ledger.transition('gpu-04', 'cordoned', '')
    return os.path.join(str(tmp_path), 'run1')


def test_report_agrees_with_the_ledger(tmp_path):
    path = make_ledger(tmp_path)
    ledger = _report.read_ledger(os.path.join(path, 'ledger.jsonl'))
    hosts = rollout_hosts()
    del hosts['gpu-04']
    report = _report.build(RUN, hosts, ledger)
    states = dict((node['name'], node['state']) for node in report['nodes'])
    assert states == {'gpu-01': 'done', 'gpu-02': 'rolled_back', 'gpu-03': 'quarantined', 'gpu-04': 'cordoned', 'gpu-05': 'pending'}
    assert report['summary']['progress'] == {'in_progress': 1, 'done': 1, 'failed': 2, 'pending': 1}
    assert report['run']['ledger'] == os.path.join(path, 'ledger.jsonl') and report['pin'] == PIN
    gpu_02 = [node for node in report['nodes'] if node['name'] == 'gpu-02'][0]
    assert [span['phase'] for span in gpu_02['timeline']][-2:] == ['rolling_back', 'rolled_back']
    assert gpu_02['ledger']['reason'] == 'validation failed on the new pin'
    assert _report_render.validate(report) == []


def test_window_slots_replay_the_ledger_lowest_free_slot_first():
    events = [{'node': node, 'to': state} for node, state in [
        ('a', 'admitted'), ('b', 'admitted'), ('a', 'cordoned'), ('a', 'done'),      # a frees slot 1
        ('c', 'admitted'), ('b', 'rolling_back'), ('b', 'rolled_back'),              # c takes 1, b frees 2
        ('d', 'admitted'), ('c', 'deferred'), ('c', 'pending'), ('e', 'admitted'),   # d takes 2, e takes 1
        ('c', 'admitted'), ('x', 'pending')]]                                        # a retry of c takes 3
    assert _report.window_slots({'events': events}) == {'a': 1, 'b': 2, 'c': 3, 'd': 2, 'e': 1}
    assert _report.window_slots(None) == {} and _report.window_slots({'events': [{'to': 'admitted'}]}) == {}


def test_validation_metric_per_window_slot(tmp_path):
    path = make_ledger(tmp_path)
    ledger = _report.read_ledger(os.path.join(path, 'ledger.jsonl'))
    report = _report.build(dict(RUN, playbooks=['rolling_restart.yml']), rollout_hosts(), ledger)
    assert dict((node['name'], node['slot']) for node in report['nodes']) == {
        'gpu-01': 1, 'gpu-02': 1, 'gpu-03': 1, 'gpu-04': 1, 'gpu-05': None}
    assert _report_render.validate(report) == []
    found = samples(_report_render.metrics(report))
    label = ('playbook', 'rolling_restart')
    assert found[('gpufleet_validation_nodes', (('batch', '2'), ('level', '1'), label, ('result', 'fail'), ('slot', '1')))] == 1


def test_read_ledger_names_the_folder_without_one(tmp_path):
    with pytest.raises(_report.ReportError, match=str(tmp_path / 'nope')):
        _report.read_ledger(str(tmp_path / 'nope'))


def test_merge_of_shards_is_one_report(tmp_path):
    hosts = drift_hosts()
    first = _report.build(dict(RUN, id='a'), dict((name, hosts[name]) for name in ('gpu-01', 'gpu-02')))
    second = _report.build(dict(RUN, id='b', started=T0 + 5, finished=T0 + 40), dict((name, hosts[name]) for name in ('gpu-03', 'gpu-04')))
    (tmp_path / 'a').mkdir()
    (tmp_path / 'a' / 'report.json').write_text(json.dumps(first), encoding='utf-8')
    merged = _report.merge([_report.load(str(tmp_path / 'a')), second])
    assert [node['name'] for node in merged['nodes']] == ['gpu-01', 'gpu-02', 'gpu-03', 'gpu-04']
    assert merged['summary'] == _report.build(RUN, hosts)['summary']
    assert (merged['run']['shards'], merged['run']['id'], merged['run']['duration_seconds']) == (2, 'a+b', 40.0)
    assert _report_render.validate(merged) == []
    with pytest.raises(_report.ReportError, match='schema versions'):
        _report.merge([first, dict(second, schema_version='2.0')])


# ----------------------------------------------------------------------------------------------------------------
# The formats.

def test_report_json_validates_against_the_shipped_schema(drift_report):
    schema = _report.schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(json.loads(json.dumps(drift_report)), schema)
    rollout = _report.build(RUN, rollout_hosts())
    jsonschema.validate(json.loads(json.dumps(rollout)), schema)
    interrupted = _report.build(ROLLOUT_RUN, rollout_hosts(), interrupted_ledger())     # jobs interrupted, a node held (schema 1.3)
    assert interrupted['summary']['jobs'] and any(item['held_by'] for item in interrupted['nodes'])
    jsonschema.validate(json.loads(json.dumps(interrupted)), schema)
    broken = copy.deepcopy(drift_report)
    broken['nodes'][0]['state'] = 'sideways'
    assert any('sideways' in problem for problem in _report_render.validate(broken))


def test_schema_ships_beside_the_module():
    assert os.path.isfile(_report.SCHEMA_FILE) and _report.schema()['$id'] == _report.SCHEMA_ID


def test_junit_parses_with_a_junit_parser(tmp_path, drift_report):
    path = tmp_path / 'junit.xml'
    path.write_text(_report_render.junit(drift_report), encoding='utf-8')
    xml = junitparser.JUnitXml.fromfile(str(path))
    suite = list(xml)[0]
    cases = dict((case.name, case) for case in suite)
    assert sorted(cases) == ['gpu-01', 'gpu-02', 'gpu-03', 'gpu-04']
    assert cases['gpu-01'].is_passed
    (drifted,) = cases['gpu-02'].result
    assert isinstance(drifted, junitparser.Failure) and drifted.type == 'drift'
    assert 'container_toolkit 1.17.0-1 (pinned 1.16.2)' in drifted.message
    assert 'container_toolkit: actual 1.17.0-1, pinned 1.16.2' in drifted.text
    assert isinstance(cases['gpu-03'].result[0], junitparser.Failure) and cases['gpu-03'].result[0].type == 'broken'
    assert isinstance(cases['gpu-04'].result[0], junitparser.Error)
    assert (suite.tests, suite.failures, suite.errors) == (4, 2, 1)


def test_junit_rollback_and_quarantine_are_failures_pending_is_skipped():
    report = _report.build(RUN, rollout_hosts())
    suite = list(junitparser.JUnitXml.fromstring(_report_render.junit(report)))[0]
    cases = dict((case.name, case) for case in suite)
    assert cases['gpu-02'].result[0].type == 'rolled_back' and 'rollback_validate' in cases['gpu-02'].result[0].message
    assert cases['gpu-03'].result[0].type == 'quarantined'
    assert 'validation dcgm_diag_r1: dcgmi diag -r 1 failed' in cases['gpu-03'].result[0].text
    assert isinstance(cases['gpu-04'].result[0], junitparser.Skipped)
    assert float(cases['gpu-01'].time) == 260.0


def samples(text):
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_metrics_parse_with_prometheus_client(drift_report):
    found = samples(_report_render.metrics(drift_report))
    label = ('playbook', 'drift_report')
    assert found[('gpufleet_drift_nodes', (label, ('status', 'drifted')))] == 1
    assert found[('gpufleet_drift_nodes', (label, ('status', 'broken')))] == 1
    assert found[('gpufleet_drifted_nodes', (('component', 'container_toolkit'), label))] == 1
    assert found[('gpufleet_drifted_nodes', (('component', 'driver'), label))] == 0
    assert found[('gpufleet_nodes', (label, ('state', 'unreachable')))] == 1
    assert found[('gpufleet_report_last_run_timestamp_seconds', (label,))] == T0 + 12
    assert found[('gpufleet_report_last_run_duration_seconds', (label,))] == 12


def test_metrics_of_a_rollout_progress_and_validation_per_level_and_batch():
    found = samples(_report_render.metrics(_report.build(dict(RUN, playbooks=['rolling_restart.yml']), rollout_hosts())))
    label = ('playbook', 'rolling_restart')
    assert [found[('gpufleet_nodes_upgrades_%s' % key, (label,))] for key in ('in_progress', 'done', 'failed', 'pending')] == [0, 1, 2, 1]
    assert found[('gpufleet_validation_nodes', (('batch', '2'), ('level', '1'), label, ('result', 'fail'), ('slot', '')))] == 1
    assert found[('gpufleet_validation_nodes', (('batch', '1'), ('level', '3'), label, ('result', 'pass'), ('slot', '')))] == 1
    assert found[('gpufleet_phase_seconds', (('phase', 'reboot'), label, ('stat', 'mean')))] == 60


class Tables(html.parser.HTMLParser):
    """Text of each drift table's cells, by component (data-component), and whether anything is loaded from outside."""

    def __init__(self):
        super().__init__()
        self.tables, self.current, self.row, self.external, self.in_svg_rect = {}, None, None, [], 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == 'table' and 'data-component' in attrs:
            self.current = self.tables.setdefault(attrs['data-component'], [])
        elif tag == 'tr' and self.current is not None:
            self.row = []
            self.current.append(self.row)
        elif tag in ('script', 'link', 'img') and (attrs.get('src') or attrs.get('href')):
            self.external.append(tag)
        elif tag == 'rect':
            self.in_svg_rect += 1

    def handle_endtag(self, tag):
        if tag == 'table':
            self.current = None

    def handle_data(self, data):
        if self.row is not None and self.current is not None and data.strip():
            self.row.append(data.strip())


def test_html_is_self_contained_and_has_the_drift_table(drift_report):
    page = _report_render.html(drift_report)
    parser = Tables()
    parser.feed(page)
    assert parser.external == []
    rows = parser.tables['container_toolkit']
    assert rows[0] == ['node', 'status', 'actual', 'pinned', 'read from']
    assert ['gpu-02', 'drifted', '1.17.0-1', '1.16.2', 'nvidia-container-toolkit'] in rows
    assert ['gpu-01', 'in_sync', '1.16.2-1', '1.16.2', 'nvidia-container-toolkit'] in rows
    assert 'id="summary"' in page and '<svg' in page and parser.in_svg_rect >= 3


def test_html_escapes_what_nodes_report():
    hosts = drift_hosts()
    hosts['gpu-04']['errors'][0]['msg'] = '<script>alert(1)</script>'
    page = _report_render.html(_report.build(RUN, hosts))
    assert '<script>alert' not in page and '&lt;script&gt;alert(1)' in page


def test_html_timeline_has_a_bar_per_phase():
    report = _report.build(RUN, rollout_hosts())
    chart = _report_render.timeline(report)
    bars = [(item['node'], item['phase']) for item in chart['bars']]
    assert bars[:5] == [('gpu-01', phase) for phase in ('precheck', 'drain', 'converge', 'reboot', 'validate')]
    assert ('gpu-02', 'rollback') in bars and all(item['width'] > 0 for item in chart['bars'])
    assert 'data-phase="rollback"' in _report_render.html(report)


def test_markdown_has_summary_drift_and_failures(drift_report):
    text = _report_render.markdown(drift_report)
    assert '| drifted | 1 |' in text
    assert '| gpu-02 | drifted | 1.17.0-1 | 1.16.2 |' in text
    assert '| gpu-03 | broken | - |' in text


def test_write_all_writes_every_file_and_a_textfile_copy(tmp_path, drift_report):
    written, problems = _report_render.write_all(drift_report, str(tmp_path / 'out'), textfile=str(tmp_path / 'textfile' / 'gpufleet.prom'))
    assert problems == []
    assert sorted(os.listdir(str(tmp_path / 'out'))) == sorted(_report_render.FILES)
    assert (tmp_path / 'textfile' / 'gpufleet.prom').read_text(encoding='utf-8') == (tmp_path / 'out' / 'metrics.prom').read_text(encoding='utf-8')
    assert len(written) == 6


def test_write_all_still_writes_the_rest_without_prometheus_client(tmp_path, drift_report, monkeypatch):
    monkeypatch.setattr(_report_render, 'CollectorRegistry', None)
    written, problems = _report_render.write_all(drift_report, str(tmp_path))
    assert len(problems) == 1 and 'prometheus_client' in problems[0]
    assert sorted(os.path.basename(path) for path in written) == ['junit.xml', 'report.html', 'report.json', 'report.md']


@pytest.mark.parametrize('seconds, text', [(0, '0s'), (45, '45s'), (134, '2m14s'), (3780, '1h03m')])
def test_duration(seconds, text):
    assert _report_render.duration(seconds) == text


# ----------------------------------------------------------------------------------------------------------------
# Live progress.

def test_progress_line_per_state_change_with_time_in_the_previous_state():
    progress = Progress(interval=60)
    assert progress.change('gpu-03', 'drained', 100.0) == 'gpu-03 drained'
    assert progress.change('gpu-03', 'converging', 234.0) == 'gpu-03 drained \u2192 converging (2m14s)'
    assert progress.change('gpu-03', 'converging', 240.0) is None
    assert progress.change('gpu-03', 'rolled_back', 300.0, 'validation failed:\n dcgm_diag_r3') == \
        'gpu-03 converging \u2192 rolled_back (1m06s): validation failed: dcgm_diag_r3'


def test_fleet_line_is_periodic_and_only_after_a_change():
    progress = Progress(interval=60, max_fail_percentage=50)
    progress.expect(['n1', 'n2', 'n3', 'n4'])
    progress.change('n1', 'admitted', 0.0)
    progress.change('n2', 'admitted', 0.0)
    assert progress.fleet_line(1.0) == 'fleet: 0 done, 2 in flight, 2 pending, 0 failed; budget 0/2; time left unknown until a node finishes'
    assert progress.fleet_line(30.0) is None
    progress.change('n1', 'done', 100.0)
    assert progress.fleet_line(40.0) is None
    progress.change('n2', 'quarantined', 100.0)
    # Mean node time 100 s, window of 2: the 2 pending nodes are one more wave.
    assert progress.fleet_line(100.0) == 'fleet: 1 done, 0 in flight, 2 pending, 1 failed; budget 1/2; about 1m40s left'
    assert progress.fleet_line(500.0) is None
    assert progress.fleet_line(500.0, force=True).startswith('fleet: 1 done')


# ----------------------------------------------------------------------------------------------------------------
# Where each node's driver came from (issue 27).

def source_hosts():
    hosts = drift_hosts()
    facts = fleet_facts()
    hosts['gpu-02']['drift'] = drift_result(dict(facts['gpu-02'], **UNOWNED))
    hosts['gpu-03']['drift'] = drift_result(dict(facts['gpu-03'], **RUNFILE))
    return hosts


def test_driver_source_per_node_and_counted():
    # drift_check's result carries the facts' driver_source and its evidence (compute_drift), the report each node's.
    assert drift_result(dict(FACTS, **UNOWNED))['driver_source'] == 'unowned'
    report = _report.build(RUN, source_hosts())
    nodes = dict((node['name'], node) for node in report['nodes'])
    assert [(name, nodes[name]['driver_source']) for name in sorted(nodes)] == [
        ('gpu-01', 'host_package'), ('gpu-02', 'unowned'), ('gpu-03', 'runfile'), ('gpu-04', None)]
    assert nodes['gpu-02']['driver_source_evidence'] == UNOWNED['driver_source_evidence']
    assert nodes['gpu-04']['driver_source_evidence'] is None
    assert report['summary']['driver_sources'] == {'container': 0, 'host_package': 1, 'runfile': 1, 'unowned': 1}
    assert tuple(int(part) for part in report['schema_version'].split('.')) >= (1, 2)
    jsonschema.validate(json.loads(json.dumps(report)), _report.schema())


def test_a_value_that_is_not_a_driver_source_is_not_reported():
    hosts = source_hosts()
    hosts['gpu-02']['drift']['driver_source'] = 'sideways'
    node = [node for node in _report.build(RUN, hosts)['nodes'] if node['name'] == 'gpu-02'][0]
    assert (node['driver_source'], node['driver_source_evidence']) == (None, None)


def test_markdown_and_html_show_the_driver_source_and_what_decided_it():
    report = _report.build(RUN, source_hosts())
    text = _report_render.markdown(report)
    assert 'Driver sources: 1 host_package, 1 runfile, 1 unowned.' in text
    assert '| node | state | Ansible | drift | driver source | rollout phase | reason |' in text
    assert '| gpu-02 | drifted | ok | drifted | unowned |' in text and '| gpu-01 | in_sync | ok | in_sync | host_package |' in text
    assert '## Drivers no package manages' in text
    assert '| gpu-02 | unowned | nvidia-smi at /usr/local/nvidia/bin/nvidia-smi; ' in text
    assert "| gpu-03 | runfile | /var/log/nvidia-installer.log (NVIDIA's runfile installer) |" in text
    assert '| gpu-01 | host_package |' not in text
    page = _report_render.html(report)
    assert '<td class="driver-source unowned" title="nvidia-smi at /usr/local/nvidia/bin/nvidia-smi; ' in page
    assert '<h2 id="driver-sources">' in page and '<span class="runfile">1 runfile</span>' in page


def test_junit_and_metrics_carry_the_driver_source():
    report = _report.build(RUN, source_hosts())
    cases = ElementTree.fromstring(_report_render.junit(report).encode('utf-8')).iter('testcase')
    properties = dict((case.get('name'), dict((item.get('name'), item.get('value')) for item in case.iter('property'))) for case in cases)
    assert properties['gpu-02']['driver_source'] == 'unowned' and 'driver_source' not in properties['gpu-04']
    found = samples(_report_render.metrics(report))
    label = ('playbook', 'drift_report')
    assert [found[('gpufleet_driver_source_nodes', (label, ('source', source)))] for source in _report.DRIVER_SOURCES] == [0, 1, 1, 1]


def test_a_report_before_schema_1_2_merges_and_renders():
    # A shard written before the driver source was reported: its nodes have no driver_source, its summary no count.
    older = json.loads(json.dumps(_report.build(dict(RUN, id='a'), drift_hosts())))
    older['schema_version'] = '1.1'
    for key in ('driver_sources', 'jobs', 'jobs_interrupted', 'interruptions', 'gpu_hours_lost'):
        del older['summary'][key]
    for node in older['nodes']:
        del node['driver_source'], node['driver_source_evidence'], node['interrupted'], node['job_group'], node['held_by']
    newer = _report.build(dict(RUN, id='b', started=T0 + 20, finished=T0 + 30), {'gpu-05': source_hosts()['gpu-02']})
    merged = _report.merge([older, newer])
    assert merged['summary']['driver_sources'] == {'container': 0, 'host_package': 0, 'runfile': 0, 'unowned': 1}
    assert (merged['summary']['jobs'], merged['summary']['interruptions'], merged['summary']['gpu_hours_lost']) == ([], 0, 0)
    assert _report_render.validate(merged) == []
    assert '| gpu-01 | in_sync | ok | in_sync | - |' in _report_render.markdown(merged)
    assert 'gpu-05' in _report_render.html(merged)
    assert _report_render.markdown(older) and _report_render.html(older)


# ----------------------------------------------------------------------------------------------------------------
# The jobs a rollout's drains interrupted (issue 28).

NOON = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.timezone.utc)


def at(minutes):
    """ISO text ``minutes`` after 12:00 UTC, as node_drain_result writes its times."""
    return (NOON + datetime.timedelta(minutes=minutes)).isoformat()


def hit(job, kind, gpus, when, checkpoint=None, start=None, nodes=None):
    """One record of ``interrupted`` (``_phase.interrupted``): what a node's drain did to one job."""
    return {'job': job, 'kind': kind, 'gpus': gpus, 'checkpoint': checkpoint, 'start': start, 'at': when, 'nodes': nodes}


def node(name, *hits, group=None):
    return {'name': name, 'interrupted': list(hits), 'job_group': group}


def test_a_job_group_evicted_on_two_nodes_is_one_interruption_its_gpus_summed():
    group = ['gpu-04', 'gpu-05']
    # Five minutes apart: the group alone makes them one interruption; each node's pods held its own GPUs (8 + 4).
    jobs = _report.job_interruptions([
        node('gpu-05', hit('JobSet ml/llm', 'evicted', 4, at(5), checkpoint=at(-30), nodes='gpu-05'), group=group),
        node('gpu-04', hit('JobSet ml/llm', 'evicted', 8, at(0), checkpoint=at(-30), nodes='gpu-04'), group=group)])
    assert jobs == [{'job': 'JobSet ml/llm', 'interruptions': 1, 'gpu_hours_lost': 6.0, 'lost_unknown': False,
                     'nodes': ['gpu-04', 'gpu-05'], 'at': [at(0)]}]
    # Without a group, drains within 60 s of each other are one interruption too (concurrent drains).
    jobs = _report.job_interruptions([
        node('gpu-04', hit('JobSet ml/llm', 'evicted', 8, at(0), checkpoint=at(-30))),
        node('gpu-05', hit('JobSet ml/llm', 'evicted', 4, at(0.5), checkpoint=at(-30)))])
    assert (jobs[0]['interruptions'], jobs[0]['gpu_hours_lost']) == (1, 6.0)


def test_two_drains_ten_minutes_apart_are_two_interruptions():
    # Slurm requeued job 77 twice: its gpus are the whole job's each time (not summed over the nodes).
    jobs = _report.job_interruptions([
        node('gpu-03', hit('77', 'requeued', 16, at(10), start=at(-60), nodes='gpu-[01,03]')),
        node('gpu-01', hit('77', 'requeued', 16, at(0), start=at(-60), nodes='gpu-[01,03]'))])
    # No checkpoint declared: lost since the start, 60 min then 70 min, 16 GPUs each time.
    assert jobs == [{'job': '77', 'interruptions': 2, 'gpu_hours_lost': round(16 + 16 * 70 / 60.0, 2), 'lost_unknown': False,
                     'nodes': ['gpu-01', 'gpu-03'], 'at': [at(0), at(10)]}]
    assert jobs[0]['gpu_hours_lost'] == 34.67
    # One requeue seen by two nodes' drains at once: one interruption of the whole job's 16 GPUs, never 32.
    jobs = _report.job_interruptions([
        node('gpu-01', hit('77', 'requeued', 16, at(0), start=at(-60))), node('gpu-03', hit('77', 'requeued', 16, at(0.5), start=at(-60)))])
    assert (jobs[0]['interruptions'], jobs[0]['gpu_hours_lost'], jobs[0]['at']) == (1, 16.0, [at(0)])


def test_a_requeue_after_the_checkpoint_loses_the_work_since_it():
    (job,) = _report.job_interruptions([node('gpu-02', hit('78', 'requeued', 16, at(15), checkpoint=at(-15), start=at(-180)))])
    assert (job['interruptions'], job['gpu_hours_lost'], job['lost_unknown']) == (1, 8.0, False)   # 30 min x 16 GPUs


def test_a_checkpoint_still_ahead_falls_back_to_the_start():
    (job,) = _report.job_interruptions([node('gpu-02', hit('79', 'requeued', 4, at(15), checkpoint=at(60), start=at(-105)))])
    assert (job['gpu_hours_lost'], job['lost_unknown']) == (8.0, False)     # 2 h since the start x 4 GPUs
    (job,) = _report.job_interruptions([node('gpu-02', hit('79', 'requeued', 4, at(15), checkpoint=at(60)))])
    assert (job['gpu_hours_lost'], job['lost_unknown']) == (0.0, True)


def test_no_start_and_no_checkpoint_is_a_loss_not_known():
    jobs = _report.job_interruptions([node('gpu-07', hit('80', 'requeued', 8, at(20))),
                                      node('gpu-02', hit('78', 'requeued', 16, at(15), checkpoint=at(-15)))])
    assert [(job['job'], job['interruptions'], job['gpu_hours_lost'], job['lost_unknown']) for job in jobs] == [
        ('78', 1, 8.0, False), ('80', 1, 0.0, True)]
    assert _report.job_interruptions([node('gpu-01'), {'name': 'gpu-09'}]) == []


def interrupted_ledger():
    """A finished rollout's ledger state (what ``read_ledger`` returns) whose drains interrupted five jobs."""
    def record(state, **details):
        return dict({'state': state, 'reason': '', 'since': at(30), 'admitted_at': at(-1), 'finished_at': at(30)}, **details)
    group = {'group': ['gpu-04', 'gpu-05'], 'jobs': ['JobSet ml/llm']}
    nodes = {
        'gpu-01': record('done', interrupted=[hit('77', 'requeued', 16, at(0), start=at(-60), nodes='gpu-[01,03]')]),
        'gpu-02': record('done', interrupted=[hit('78', 'requeued', 16, at(15), checkpoint=at(-15), start=at(-180), nodes='gpu-02'),
                                              hit('79', 'requeued', 4, at(15), checkpoint=at(60), start=at(-105), nodes='gpu-02')]),
        'gpu-03': record('done', interrupted=[hit('77', 'requeued', 16, at(10), start=at(-60), nodes='gpu-[01,03]')]),
        'gpu-04': record('done', interrupted=[hit('JobSet ml/llm', 'evicted', 8, at(0), checkpoint=at(-30), nodes='gpu-04')], **group),
        'gpu-05': record('done', interrupted=[hit('JobSet ml/llm', 'evicted', 4, at(5), checkpoint=at(-30), nodes='gpu-05')], **group),
        'gpu-06': record('left_alone', reason='Slurm DRAIN (reason: admin: bad DIMM) holds it', held_by='Slurm DRAIN (reason: admin: bad DIMM)'),
        'gpu-07': record('done', interrupted=[hit('80', 'requeued', 8, at(20), nodes='gpu-07')]),
        'gpu-08': record('done'),
    }
    return {'path': '/srv/gpufleet/runs/r28/ledger.jsonl', 'state': {'run_id': 'r28', 'status': 'finished', 'pin': PIN, 'nodes': nodes},
            'events': []}


ROLLOUT_RUN = dict(RUN, id='r28', playbooks=['rolling_restart.yml'], check_mode=False)
JOBS = [('77', 2, 34.67, False), ('78', 1, 8.0, False), ('79', 1, 8.0, False), ('80', 1, 0.0, True), ('JobSet ml/llm', 1, 6.0, False)]


def test_report_counts_the_interruptions_per_job_from_the_ledger():
    report = _report.build(ROLLOUT_RUN, {}, interrupted_ledger())
    nodes = dict((item['name'], item) for item in report['nodes'])
    assert nodes['gpu-04']['interrupted'] == [hit('JobSet ml/llm', 'evicted', 8, at(0), checkpoint=at(-30), nodes='gpu-04')]
    assert (nodes['gpu-04']['job_group'], nodes['gpu-01']['job_group']) == (['gpu-04', 'gpu-05'], None)
    assert (nodes['gpu-06']['held_by'], nodes['gpu-06']['interrupted'], nodes['gpu-08']['held_by']) == (
        'Slurm DRAIN (reason: admin: bad DIMM)', [], None)
    summary = report['summary']
    assert [(job['job'], job['interruptions'], job['gpu_hours_lost'], job['lost_unknown']) for job in summary['jobs']] == JOBS
    assert (summary['jobs_interrupted'], summary['interruptions'], summary['gpu_hours_lost']) == (5, 6, 56.67)
    assert report['schema_version'] == '1.3'


def test_interrupted_records_are_normalised():
    ledger = interrupted_ledger()
    ledger['state']['nodes']['gpu-08']['interrupted'] = [
        {'job': 81, 'kind': 'sideways', 'gpus': -2, 'at': at(25), 'extra': 'dropped'}, {'job': ''}, 'not a record']
    ledger['state']['nodes']['gpu-07']['interrupted'] = 'not a list'
    nodes = dict((item['name'], item) for item in _report.build(ROLLOUT_RUN, {}, ledger)['nodes'])
    assert nodes['gpu-08']['interrupted'] == [hit('81', None, None, at(25))]
    assert nodes['gpu-07']['interrupted'] == []


def test_the_ledger_carries_what_the_report_reads(tmp_path):
    # The rollout writes them as event details: the group at admission, held_by when left alone, interrupted on the final event.
    ledger = _ledger.RunLedger.create(_ledger.FileBackend(str(tmp_path)), 'run28', inventory='inv', policy={}, pin=PIN,
                                      nodes=dict((name, {'gpus': 8}) for name in ('gpu-04', 'gpu-05', 'gpu-06')))
    records = interrupted_ledger()['state']['nodes']
    for name in ('gpu-04', 'gpu-05'):
        ledger.transition(name, 'admitted', 'admitted with its job\'s group', details={'group': ['gpu-04', 'gpu-05'], 'jobs': ['JobSet ml/llm']})
        for state in ('cordoned', 'drained', 'converging', 'rebooting', 'validating'):
            ledger.transition(name, state, '')
        ledger.transition(name, 'done', '', details={'interrupted': records[name]['interrupted'], 'gpu_count': 8})
    ledger.transition('gpu-06', 'left_alone', 'held', details={'held_by': records['gpu-06']['held_by'], 'by': 'gate'})
    report = _report.build(ROLLOUT_RUN, {}, _report.read_ledger(str(tmp_path / 'run28')))
    nodes = dict((item['name'], item) for item in report['nodes'])
    assert nodes['gpu-05']['job_group'] == ['gpu-04', 'gpu-05'] and nodes['gpu-06']['held_by'] == records['gpu-06']['held_by']
    assert report['summary']['jobs'] == [{'job': 'JobSet ml/llm', 'interruptions': 1, 'gpu_hours_lost': 6.0, 'lost_unknown': False,
                                          'nodes': ['gpu-04', 'gpu-05'], 'at': [at(0)]}]
    assert _report_render.validate(report) == []


def test_merge_of_shards_recounts_the_interruptions():
    full = _report.build(ROLLOUT_RUN, {}, interrupted_ledger())
    shards = []
    for index, names in enumerate((('gpu-01', 'gpu-02', 'gpu-04'), ('gpu-03', 'gpu-05', 'gpu-06', 'gpu-07', 'gpu-08'))):
        nodes = [copy.deepcopy(item) for item in full['nodes'] if item['name'] in names]
        run = dict(full['run'], id='shard%d' % index, finished=_report.iso(T0 + 12 + index))
        shards.append(dict(copy.deepcopy(full), run=run, nodes=nodes, summary=_report.summarize(nodes, 'rollout')))
    # Each shard alone sees one of 77's drains and half of the group's eviction.
    assert [(job['job'], job['interruptions'], job['gpu_hours_lost']) for job in shards[0]['summary']['jobs']] == [
        ('77', 1, 16.0), ('78', 1, 8.0), ('79', 1, 8.0), ('JobSet ml/llm', 1, 4.0)]
    merged = _report.merge([json.loads(json.dumps(shard)) for shard in shards])
    assert merged['summary'] == full['summary']
    assert (merged['summary']['jobs_interrupted'], merged['summary']['interruptions'], merged['summary']['gpu_hours_lost']) == (5, 6, 56.67)
    assert _report_render.validate(merged) == []


def test_report_with_interruptions_validates_against_the_schema():
    report = json.loads(json.dumps(_report.build(ROLLOUT_RUN, {}, interrupted_ledger())))
    jsonschema.validate(report, _report.schema())
    broken = copy.deepcopy(report)
    broken['nodes'][0]['interrupted'][0]['kind'] = 'cancelled'
    broken['summary']['jobs'][0]['gpu_hours_lost'] = -1
    problems = _report_render.validate(broken)
    assert any('cancelled' in problem for problem in problems) and any('-1' in problem for problem in problems)
