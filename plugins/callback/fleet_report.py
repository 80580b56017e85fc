# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
name: fleet_report
type: notification
short_description: Fleet report (JSON, Markdown, HTML, JUnit, Prometheus textfile) and live rollout progress
version_added: 0.1.0
description:
  - Collects, per host, the results of M(gpufleet.lifecycle.drift_check) (its documented C(status) and C(components) keys,
    never the diff text), the C(node_upgrade_result) and C(node_validate_result) facts and the phases of
    C(gpufleet.lifecycle.node_upgrade), and reads the rollout ledger when it is known.
  - At the end of the run it writes into I(output_dir) C(report.json) (schema C(plugins/plugin_utils/fleet_report.schema.json)
    of the collection), C(report.md), a self-contained C(report.html), C(junit.xml) and C(metrics.prom) (node_exporter textfile
    collector). See docs/reporting.md.
  - During a rollout it prints one line per node state change (C(gpu-03 drained → converging (2m14s))) and, at most every
    I(progress_interval) seconds, a fleet line (done, in flight, pending, failed, budget used, time left).
  - Works under the C(linear) (with or without C(serial)) and C(host_pinned) strategies; results are kept per host.
  - Must be enabled explicitly (C(callbacks_enabled = gpufleet.lifecycle.fleet_report) or C(ANSIBLE_CALLBACKS_ENABLED)).
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
requirements:
  - prometheus_client (Python, on the controller) for C(metrics.prom); without it the other files are still written, with a warning.
  - jsonschema (optional) to check C(report.json) against its schema before writing it.
options:
  output_dir:
    description: Folder the report files are written into (created). A relative path is taken from the current directory.
    type: path
    default: gpufleet-report
    env:
      - name: GPUFLEET_REPORT_DIR
    ini:
      - section: gpufleet_report
        key: output_dir
  ledger:
    description:
      - The rollout ledger to read, C(<gpufleet_run_dir>/<run_id>) or its C(ledger.jsonl). The report's node states are then
        the ledger's, and nodes the ledger knows but this run did not touch are reported too (C(pending), C(deferred), ...).
      - When not set, the ledger is found from C(gpufleet_run_dir) and C(gpufleet_run_id) in the extra variables (with
        C(gpufleet_ledger_backend) and its C(gpufleet_ledger_*) variables), or from the C(ledger) argument of the procedure's
        C(gpufleet.lifecycle.upgrade_phase) tasks. Either way any ledger backend is read, the Kubernetes one (ConfigMaps) too.
    type: path
    env:
      - name: GPUFLEET_REPORT_LEDGER
    ini:
      - section: gpufleet_report
        key: ledger
  merge:
    description:
      - Reports (C(report.json) files or folders holding one) of other shards of the same fleet (C(--limit) runs, AWX slices)
        to merge with this run's into one report. A node in several keeps the entry of the shard that finished last.
    type: list
    elements: path
    default: []
    env:
      - name: GPUFLEET_REPORT_MERGE
    ini:
      - section: gpufleet_report
        key: merge
  textfile:
    description: A second path for C(metrics.prom), e.g. C(/var/lib/node_exporter/textfile/gpufleet_drift.prom), written atomically.
    type: path
    env:
      - name: GPUFLEET_REPORT_TEXTFILE
    ini:
      - section: gpufleet_report
        key: textfile
  progress:
    description: Print the live progress lines of a rollout.
    type: bool
    default: true
    env:
      - name: GPUFLEET_REPORT_PROGRESS
    ini:
      - section: gpufleet_report
        key: progress
  progress_interval:
    description: Seconds between two fleet lines (a fleet line is printed only when something changed).
    type: float
    default: 60
    env:
      - name: GPUFLEET_REPORT_PROGRESS_INTERVAL
    ini:
      - section: gpufleet_report
        key: progress_interval
'''

import json
import os
import time

from ansible import context
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.callback import CallbackBase
from ansible.release import __version__ as ANSIBLE_VERSION

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _report
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _report_render
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._report_progress import Progress

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _collection_version():
    try:
        with open(os.path.join(COLLECTION_ROOT, 'MANIFEST.json'), encoding='utf-8') as handle:
            return json.load(handle)['collection_info']['version']
    except (OSError, ValueError, KeyError):
        pass
    try:
        with open(os.path.join(COLLECTION_ROOT, 'galaxy.yml'), encoding='utf-8') as handle:
            for line in handle:
                if line.startswith('version:'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return None


def _is_drift(data):
    return isinstance(data.get('drift'), dict) and data.get('status') in _report.DRIFT_STATUSES and isinstance(data.get('checked'), list)


class CallbackModule(CallbackBase):
    """gpufleet.lifecycle.fleet_report"""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'notification'
    CALLBACK_NAME = 'gpufleet.lifecycle.fleet_report'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display=None):
        super().__init__(display=display)
        self.hosts = {}
        self.playbooks = []
        self.started = time.time()
        self.check_mode = False
        self.play_uuid = None
        self.batches = {}
        self.play_hosts = {}
        self.play_kinds = {}
        self.ledger = None          # a path (file backend) or the gate's ledger specification (any backend)
        self.ledger_backend = None
        self.ledger_offset = 0
        self.ledger_checked = 0.0
        self.extra_vars = {}
        self.progress = None
        self.output_dir = 'gpufleet-report'
        self.merge = []
        self.textfile = None

    def set_options(self, task_keys=None, var_options=None, direct=None):
        super().set_options(task_keys=task_keys, var_options=var_options, direct=direct)
        self.output_dir = os.path.abspath(self.get_option('output_dir'))
        self.ledger = self.get_option('ledger') or None
        self.merge = list(self.get_option('merge') or [])
        self.textfile = self.get_option('textfile') or None
        if self.get_option('progress'):
            self.progress = Progress(interval=self.get_option('progress_interval'))

    # -- bookkeeping
    def _host(self, name):
        host = self.hosts.get(name)
        if host is None:
            host = self.hosts[name] = {'result': None, 'errors': [], 'drift': None, 'upgrade': None, 'validation': None, 'marks': None,
                                       'batch': self.batches.get(self.play_uuid), 'start': None, 'end': None, 'rollout': False,
                                       'play': self.play_uuid}
        return host

    def _say(self, line):
        if line:
            self._display.display(line)

    def _find_ledger(self, spec):
        """The ledger specification the rollout gate hands the procedure (``upgrade_phase``'s ``ledger``), any backend."""
        if self.ledger or not isinstance(spec, dict) or not spec.get('run_id') or not spec.get('run_dir'):
            return
        self.ledger = dict((key, to_text(value) if isinstance(value, (str, bytes)) else value) for key, value in spec.items())

    def _follow_ledger(self, now, force=False):
        """Print the ledger's new events (the node states of the rollout), at most once a second unless ``force``."""
        if not self.progress or not self.ledger or (now - self.ledger_checked < 1.0 and not force):
            return
        self.ledger_checked = now
        spec = _report.ledger_of(self.ledger)
        try:
            if self.ledger_backend is None:
                self.ledger_backend = _ledger.open_backend(spec)
            if not self.ledger_backend.exists(spec['run_id']):
                return
            events, self.ledger_offset = self.ledger_backend.read_events(spec['run_id'], self.ledger_offset)
        except (_ledger.LedgerError, OSError):
            return
        for event in events:
            if event.get('node') is None:
                self.progress.expect((event.get('run') or {}).get('nodes') or {})
                max_fail = ((event.get('run') or {}).get('policy') or {}).get('max_fail_percentage')
                if max_fail is not None:
                    self.progress.max_fail_percentage = max_fail
                continue
            self._say(self.progress.change(event['node'], event.get('to'), _report._epoch(event.get('time')) or now, event.get('reason') or ''))

    def _tick(self, now=None):
        now = now or time.time()
        if self.progress:
            self._follow_ledger(now)
            self._say(self.progress.fleet_line(now))

    def _record(self, result, outcome):
        now = time.time()
        name = result._host.get_name()
        host = self._host(name)
        host['end'] = now
        if host['start'] is None:
            host['start'] = now
        data = result._result if isinstance(result._result, dict) else {}
        if outcome == 'unreachable' or host['result'] in (None, 'skipped', 'ok'):
            host['result'] = outcome if outcome != 'ignored' else (host['result'] or 'ok')
        if outcome in ('failed', 'unreachable'):
            host['errors'] = host['errors'][-4:] + [{'task': result._task.get_name(), 'msg': to_text(data.get('msg') or data.get('reason') or '')[:2000]}]
        fields = getattr(result, '_task_fields', None) or {}
        self._find_ledger((fields.get('args') or {}).get('ledger'))
        if _is_drift(data):
            host['drift'] = dict((key, data.get(key)) for key in ('status', 'drift', 'components', 'checked', 'not_applicable', 'unverified',
                                                                  'health', 'health_reason', 'message', 'msg', 'pin', 'driver_source',
                                                                  'driver_source_evidence'))
            self.play_kinds.setdefault(self.play_uuid, set()).add('drift')
        facts = data.get('ansible_facts') if isinstance(data.get('ansible_facts'), dict) else {}
        if isinstance(facts.get('node_validate_result'), dict):
            host['validation'] = facts['node_validate_result']
        # The per-node procedure's state (gpufleet.lifecycle.upgrade_phase): its phase and the phases' start times.
        procedure = facts.get('_node_upgrade') if isinstance(facts.get('_node_upgrade'), dict) else {}
        if isinstance(procedure.get('marks'), list):
            host['marks'] = procedure['marks']
        phase = procedure.get('phase') if procedure.get('next') != 'end' else None
        upgrade = facts.get('node_upgrade_result')
        if phase or isinstance(upgrade, dict):
            self._rollout_play(host)
        if self.progress and not self.ledger:
            if isinstance(data.get('ledger'), list) and data['ledger']:
                for step in data['ledger']:
                    self._say(self.progress.change(name, step, now))
            elif phase:
                self._say(self.progress.change(name, to_text(phase), now))
        if isinstance(upgrade, dict):
            host['upgrade'] = upgrade
            if self.progress and not self.ledger:
                self._say(self.progress.change(name, to_text(upgrade.get('state')), now, to_text(upgrade.get('reason') or '')))
        self._tick(now)

    def _rollout_play(self, host):
        host['rollout'] = True
        kinds = self.play_kinds.setdefault(self.play_uuid, set())
        if 'rollout' not in kinds:
            kinds.add('rollout')
            if self.progress:
                self.progress.expect(self.play_hosts.get(self.play_uuid) or [])

    # -- events
    def v2_playbook_on_start(self, playbook):
        self.playbooks.append(os.path.basename(to_text(getattr(playbook, '_file_name', '') or 'playbook')))

    def v2_playbook_on_play_start(self, play):
        uuid = getattr(play, '_uuid', None) or id(play)
        self.play_uuid = uuid
        self.batches[uuid] = self.batches.get(uuid, 0) + 1
        if getattr(play, 'check_mode', False) or (context.CLIARGS or {}).get('check'):
            self.check_mode = True
        manager = play.get_variable_manager() if hasattr(play, 'get_variable_manager') else None
        try:
            self.extra_vars = dict(manager.extra_vars) if manager is not None else {}
        except Exception:  # pylint: disable=broad-except
            self.extra_vars = {}
        if not self.ledger and self.extra_vars.get('gpufleet_run_dir') and self.extra_vars.get('gpufleet_run_id'):
            try:
                self.ledger = dict(_ledger.ledger_spec(self.extra_vars, to_text(self.extra_vars['gpufleet_run_dir'])),
                                   run_id=to_text(self.extra_vars['gpufleet_run_id']))
            except _ledger.LedgerError as exc:
                self._display.warning('fleet_report: the ledger variables cannot be used: %s' % exc)
        if self.progress and self.progress.max_fail_percentage is None and self.extra_vars.get('gpufleet_max_fail_percentage') is not None:
            self.progress.max_fail_percentage = self.extra_vars['gpufleet_max_fail_percentage']
        if uuid not in self.play_hosts:
            # Every host of the play, also those of later serial batches (the inventory is restricted to the batch now).
            try:
                inventory = getattr(manager, '_inventory', None)
                self.play_hosts[uuid] = [host.get_name() for host in inventory.get_hosts(play.hosts, ignore_restrictions=True)]
            except Exception:  # pylint: disable=broad-except
                self.play_hosts[uuid] = []
        self._tick()

    def v2_runner_on_start(self, host, task):
        entry = self._host(host.get_name())
        if entry['start'] is None:
            entry['start'] = time.time()
        if entry['batch'] is None or entry['play'] != self.play_uuid:
            entry['batch'], entry['play'] = self.batches.get(self.play_uuid), self.play_uuid

    def v2_runner_on_ok(self, result):
        self._record(result, 'ok')

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, 'ignored' if ignore_errors else 'failed')

    def v2_runner_on_unreachable(self, result):
        self._record(result, 'unreachable')

    def v2_runner_on_skipped(self, result):
        self._record(result, 'skipped')

    def v2_runner_retry(self, result):
        self._tick()

    def v2_playbook_on_stats(self, stats):
        finished = time.time()
        # The last moves (the run's final states) may have come within the second since the ledger was last read.
        self._follow_ledger(finished, force=True)
        for uuid, kinds in self.play_kinds.items():
            for name in self.play_hosts.get(uuid) or []:
                host = self._host(name)
                host['rollout'] = host['rollout'] or 'rollout' in kinds
        for name, host in self.hosts.items():
            summary = stats.summarize(name)
            if summary.get('unreachable'):
                host['result'] = 'unreachable'
            elif summary.get('failures'):
                host['result'] = 'failed'
            elif host['result'] in ('failed', 'unreachable'):
                host['result'] = 'ok'   # rescued or ignored: the recap has no failure for it
        hosts = dict((name, host) for name, host in self.hosts.items()
                     if host['drift'] or host['upgrade'] or host['rollout'] or any(name in (self.play_hosts.get(uuid) or [])
                                                                                   for uuid in self.play_kinds))
        ledger = None
        if self.ledger:
            try:
                ledger = _report.read_ledger(self.ledger)
            except _report.ReportError as exc:
                self._display.warning('fleet_report: the ledger was not read, the report is built from the task results alone: %s' % exc)
        run = {'id': (ledger or {}).get('state', {}).get('run_id') or self.extra_vars.get('gpufleet_run_id') or
               time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(self.started)), 'playbooks': self.playbooks, 'started': self.started,
               'finished': finished, 'check_mode': self.check_mode, 'ansible_version': ANSIBLE_VERSION,
               'collection_version': _collection_version()}
        try:
            report = _report.build(run, hosts, ledger)
            if self.merge:
                report = _report.merge([_report.load(path) for path in self.merge] + [report])
            written, problems = _report_render.write_all(report, self.output_dir, textfile=self.textfile)
        except (_report.ReportError, _report_render.RenderError, OSError, ValueError) as exc:
            self._display.warning('fleet_report: no report written to %s: %s' % (self.output_dir, exc))
            return
        for problem in problems:
            self._display.warning('fleet_report: %s' % problem)
        if self.progress and self.progress.nodes:
            self._say(self.progress.fleet_line(finished, force=True))
        states = ', '.join('%d %s' % (count, state) for state, count in report['summary']['states'].items() if count)
        self._display.v('fleet_report: %d node(s) (%s) -> %s (%s)' % (
            report['summary']['nodes'], states or 'none', self.output_dir, ', '.join(os.path.basename(path) for path in written)))
