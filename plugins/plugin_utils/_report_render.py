# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Render a fleet report (``_report.build``) as Markdown, self-contained HTML (Jinja2), JUnit XML and a Prometheus textfile.

Controller-side, no Ansible import.  Libraries do the formats: Jinja2 (an ansible-core dependency) the HTML,
``xml.etree`` the JUnit XML, ``prometheus_client`` the text exposition (``requirements.txt``); the JSON Schema is
checked with ``jsonschema`` when it is installed.  :func:`write_all` writes every file atomically.
"""

from __future__ import annotations

import datetime
import io
import json
import os
from xml.etree import ElementTree

try:
    import jinja2
except ImportError:  # pragma: no cover - ansible-core depends on Jinja2
    jinja2 = None

try:
    from prometheus_client import CollectorRegistry, Gauge, generate_latest
except ImportError:
    CollectorRegistry = Gauge = generate_latest = None

try:
    import jsonschema
except ImportError:
    jsonschema = None

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _report

HERE = os.path.dirname(os.path.abspath(__file__))
HTML_TEMPLATE = os.path.join(HERE, 'fleet_report.html.j2')
FILES = ('report.json', 'report.md', 'report.html', 'junit.xml', 'metrics.prom')
# A colour for each phase of the procedure (module_utils/_procedure.PHASES, the one vocabulary) and each ledger state.
PHASE_COLOURS = {
    'precheck': '#9e9e9e', 'admitted': '#9e9e9e', 'cordoned': '#8d6e63',
    'drain': '#a1887f', 'drained': '#a1887f', 'converge': '#42a5f5', 'converging': '#42a5f5', 'reboot': '#7e57c2',
    'rebooting': '#7e57c2', 'validate': '#26a69a', 'validating': '#26a69a', 'uncordon': '#66bb6a', 'done': '#2e7d32',
    'rollback': '#ef6c00', 'rollback_reboot': '#ef6c00', 'rollback_validate': '#ffa726', 'rolling_back': '#ef6c00',
    'rolled_back': '#e65100', 'quarantine': '#c62828', 'quarantined': '#c62828', 'restore': '#bdbdbd', 'run': '#90a4ae',
}


class RenderError(RuntimeError):
    """A format that cannot be written (a missing library); the message says what to install."""


def _when(epoch):
    if epoch is None:
        return '-'
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime('%H:%M:%S')


def duration(seconds):
    """``2m14s``, ``1h03m``, ``45s``."""
    seconds = int(round(float(seconds or 0)))
    if seconds >= 3600:
        return '%dh%02dm' % (seconds // 3600, seconds % 3600 // 60)
    if seconds >= 60:
        return '%dm%02ds' % (seconds // 60, seconds % 60)
    return '%ds' % seconds


# ----------------------------------------------------------------------------------------------------------------
# Views shared by Markdown and HTML.

def drift_rows(report):
    """``{component: [{'node', 'status', 'actual', 'expected', 'source'}]}`` for every node that checked it."""
    rows = {}
    for node in report['nodes']:
        for component, entry in ((node['drift'] or {}).get('components') or {}).items():
            rows.setdefault(component, []).append(dict(entry, node=node['name']))
    return dict(sorted(rows.items()))


def driver_source_counts(report):
    """``[(source, nodes)]`` for the driver sources the report's nodes have (the summary's order), none when no node says."""
    counts = report['summary'].get('driver_sources') or {}
    return [(source, counts[source]) for source in _report.DRIVER_SOURCES if counts.get(source)]


def foreign_driver_rows(report):
    """The nodes whose driver no package or GPU Operator manages (``runfile``, ``unowned``), with what decided it."""
    return [{'node': node['name'], 'driver_source': node['driver_source'], 'evidence': node.get('driver_source_evidence')}
            for node in report['nodes'] if node.get('driver_source') in ('runfile', 'unowned')]


def job_rows(report):
    """The jobs the rollout interrupted (``summary.jobs``), each with ``lost``: its GPU-hours lost as the report shows them
    (``12.50``; ``+ unknown`` when an interruption's loss could not be counted); [] when none (or a report before 1.3)."""
    rows = []
    for job in report['summary'].get('jobs') or []:
        lost = '%.2f' % job['gpu_hours_lost']
        rows.append(dict(job, lost='%s + unknown' % lost if job.get('lost_unknown') else lost))
    return rows


def jobs_line(report):
    """``2 jobs interrupted, 3 interruptions, 12.50 GPU-hours lost since their last declared checkpoint.``, or None."""
    summary = report['summary']
    if not summary.get('jobs'):
        return None
    return '%d job%s interrupted, %d interruption%s, %.2f GPU-hours lost since their last declared checkpoint%s.' % (
        summary['jobs_interrupted'], '' if summary['jobs_interrupted'] == 1 else 's', summary['interruptions'],
        '' if summary['interruptions'] == 1 else 's', summary['gpu_hours_lost'],
        ' (and some not counted: no checkpoint or start known)' if any(job.get('lost_unknown') for job in summary['jobs']) else '')


def held_rows(report):
    """``[{'node', 'held_by'}]``: the nodes left alone at the gate because another actor holds them."""
    return [{'node': node['name'], 'held_by': node['held_by']} for node in report['nodes'] if node.get('held_by')]


def failure_rows(report):
    return [dict(node['failure'], node=node['name'], state=node['state']) for node in report['nodes'] if node['failure']]


def phase_columns(report):
    phases = []
    for node in report['nodes']:
        for phase in ((node['rollout'] or {}).get('seconds') or {}):
            if phase not in phases:
                phases.append(phase)
    return phases


def timeline(report, width=960, row=18, label=150):
    """Geometry of the timeline chart: one row per node, one bar per phase span (seconds since the first start)."""
    spans = [(node['name'], span) for node in report['nodes'] for span in node['timeline']]
    if not spans:
        return None
    start = min(span['start'] for _name, span in spans)
    end = max(span['end'] for _name, span in spans)
    total = max(end - start, 1.0)
    scale = (width - label - 10) / total
    names = [node['name'] for node in report['nodes'] if node['timeline']]
    bars = []
    for name, span in spans:
        y = names.index(name) * row + 20
        x = label + (span['start'] - start) * scale
        bars.append({'x': round(x, 1), 'y': y, 'width': round(max(2.0, (span['end'] - span['start']) * scale), 1), 'height': row - 4,
                     'colour': PHASE_COLOURS.get(span['phase'], '#78909c'), 'phase': span['phase'], 'node': name,
                     'title': '%s %s %s-%s (%s)' % (name, span['phase'], _when(span['start']), _when(span['end']),
                                                    duration(span['end'] - span['start']))})
    ticks = []
    for index in range(6):
        seconds = total * index / 5
        ticks.append({'x': round(label + seconds * scale, 1), 'text': '+%s' % duration(seconds)})
    legend = []
    for _name, span in spans:
        if span['phase'] not in [item['phase'] for item in legend]:
            legend.append({'phase': span['phase'], 'colour': PHASE_COLOURS.get(span['phase'], '#78909c')})
    rows = [{'name': name, 'y': index * row + 20 + row - 7} for index, name in enumerate(names)]
    return {'width': width, 'height': len(names) * row + 40, 'label': label, 'rows': rows,
            'bars': bars, 'ticks': ticks, 'axis_y': len(names) * row + 24, 'legend': legend, 'start': _report.iso(start)}


# ----------------------------------------------------------------------------------------------------------------
# Markdown.

def _cell(value):
    text = '-' if value is None or value == '' else str(value)
    return text.replace('|', '\\|').replace('\n', ' ')


def markdown(report):
    summary = report['summary']
    run = report['run']
    heading = '%s run `%s`, %s to %s (%s)%s%s.' % (
        report['kind'].capitalize(), run['id'] or '-', run['started'] or '-', run['finished'] or '-', duration(run['duration_seconds']),
        ', check mode' if run['check_mode'] else '', ', ledger `%s`' % run['ledger'] if run['ledger'] else '')
    lines = ['# Fleet report: %s' % ', '.join(run['playbooks'] or ['(no playbook)']), '', heading, '',
             '## Summary', '', '| state | nodes |', '| --- | --- |']
    lines.extend('| %s | %d |' % (state, count) for state, count in summary['states'].items() if count)
    lines.append('| **total** | **%d** |' % summary['nodes'])
    if report['kind'] == 'rollout':
        progress = summary['progress']
        lines += ['', 'Progress: %d done, %d in progress, %d failed, %d pending.' % (
            progress['done'], progress['in_progress'], progress['failed'], progress['pending'])]
    sources = driver_source_counts(report)
    if sources:
        lines += ['', 'Driver sources: %s.' % ', '.join('%d %s' % (count, source) for source, count in sources)]
    held = held_rows(report)
    if held:
        held_by = '; '.join('%s (%s)' % (_cell(row['node']), _cell(row['held_by'])) for row in held)
        lines += ['', 'Left alone, another actor holds them: %s.' % held_by]
    lines += ['', '## Nodes', '', '| node | state | Ansible | drift | driver source | rollout phase | reason |',
              '| --- | --- | --- | --- | --- | --- | --- |']
    for node in report['nodes']:
        lines.append('| %s | %s | %s | %s | %s | %s | %s |' % (
            _cell(node['name']), _cell(node['state']), _cell(node['result']), _cell((node['drift'] or {}).get('status')),
            _cell(node.get('driver_source')), _cell((node['rollout'] or {}).get('phase')), _cell((node['failure'] or {}).get('reason'))))
    rows = drift_rows(report)
    if rows:
        lines += ['', '## Drift by component']
        for component, entries in rows.items():
            lines += ['', '### %s' % component, '', '| node | status | actual | pinned |', '| --- | --- | --- | --- |']
            lines.extend('| %s | %s | %s | %s |' % (_cell(entry['node']), _cell(entry['status']), _cell(entry['actual']), _cell(entry['expected']))
                         for entry in entries)
    foreign = foreign_driver_rows(report)
    if foreign:
        lines += ['', '## Drivers no package manages', '', '| node | driver source | evidence |', '| --- | --- | --- |']
        lines.extend('| %s | %s | %s |' % (_cell(row['node']), _cell(row['driver_source']), _cell(row['evidence'])) for row in foreign)
    jobs = job_rows(report)
    if jobs:
        lines += ['', '## Jobs interrupted', '', jobs_line(report), '', '| job | interruptions | GPU-hours lost | nodes |', '| --- | --- | --- | --- |']
        lines.extend('| %s | %d | %s | %s |' % (_cell(row['job']), row['interruptions'], row['lost'], _cell(', '.join(row['nodes'])))
                     for row in jobs)
    failures = failure_rows(report)
    lines += ['', '## Failures', '']
    if failures:
        lines += ['| node | kind | phase | reason |', '| --- | --- | --- | --- |']
        lines.extend('| %s | %s | %s | %s |' % (_cell(row['node']), _cell(row['kind']), _cell(row['phase']), _cell(row['reason']))
                     for row in failures)
    else:
        lines.append('None.')
    phases = phase_columns(report)
    if phases:
        lines += ['', '## Time per phase', '', '| node | %s | total |' % ' | '.join(phases), '| --- |%s --- |' % (' --- |' * len(phases))]
        for node in report['nodes']:
            if node['rollout']:
                seconds = node['rollout']['seconds']
                cells = ' | '.join(duration(seconds[phase]) if phase in seconds else '-' for phase in phases)
                lines.append('| %s | %s | %s |' % (_cell(node['name']), cells, duration(node['rollout']['total_seconds'])))
    return '\n'.join(lines) + '\n'


# ----------------------------------------------------------------------------------------------------------------
# HTML.

def html(report):
    if jinja2 is None:  # pragma: no cover
        raise RenderError('report.html needs Jinja2')
    with open(HTML_TEMPLATE, encoding='utf-8') as handle:
        template = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                                      lstrip_blocks=True).from_string(handle.read())
    return template.render(report=report, summary=report['summary'], run=report['run'], drift=drift_rows(report), sources=driver_source_counts(report),
                           foreign=foreign_driver_rows(report), jobs=job_rows(report), jobs_line=jobs_line(report), held=held_rows(report),
                           failures=failure_rows(report), phases=phase_columns(report), chart=timeline(report), duration=duration)


# ----------------------------------------------------------------------------------------------------------------
# JUnit.

def _failure_text(node):
    lines = []
    for check in ((node['rollout'] or {}).get('validation') or []):
        if isinstance(check, dict) and not check.get('passed'):
            lines.append('validation %s: %s' % (check.get('name'), check.get('message')))
    for check in ((node['rollout'] or {}).get('rollback_validation') or []):
        if isinstance(check, dict) and not check.get('passed'):
            lines.append('after the rollback %s: %s' % (check.get('name'), check.get('message')))
    for component, entry in ((node['drift'] or {}).get('components') or {}).items():
        if entry['status'] == 'drifted':
            lines.append('%s: actual %s, pinned %s' % (component, entry['actual'], entry['expected']))
    return '\n'.join(lines)


def junit(report):
    """``junit.xml``: one test suite, one test case per node; drift, broken, validation failure, rollback and quarantine
    are failures, unreachable hosts and task errors are errors, pending/deferred/left-alone nodes are skipped."""
    name = 'gpufleet.%s' % (', '.join(os.path.splitext(os.path.basename(book))[0] for book in report['run']['playbooks']) or report['kind'])
    suite = ElementTree.Element('testsuite', name=name, timestamp=report['run']['started'] or '',
                                time='%.1f' % report['run']['duration_seconds'])
    counts = {'tests': 0, 'failures': 0, 'errors': 0, 'skipped': 0}
    for node in report['nodes']:
        seconds = (node['rollout'] or {}).get('total_seconds') or sum(span['end'] - span['start'] for span in node['timeline'])
        case = ElementTree.SubElement(suite, 'testcase', classname='gpufleet.%s' % report['kind'], name=node['name'], time='%.1f' % seconds)
        counts['tests'] += 1
        failure = node['failure']
        if failure and failure['kind'] in ('unreachable', 'error'):
            element = ElementTree.SubElement(case, 'error', type=failure['kind'], message=failure['reason'])
            element.text = failure['reason']
            counts['errors'] += 1
        elif failure:
            message = '%s%s: %s' % (failure['kind'], ' in %s' % failure['phase'] if failure['phase'] else '', failure['reason'])
            element = ElementTree.SubElement(case, 'failure', type=failure['kind'], message=message)
            element.text = _failure_text(node) or failure['reason']
            counts['failures'] += 1
        elif node['state'] in ('pending', 'deferred', 'left_alone', 'not_checked', 'not_reported'):
            ElementTree.SubElement(case, 'skipped', message='%s: %s' % (node['state'], (node['ledger'] or node['rollout'] or node['drift'] or {}).get(
                'reason') or (node['drift'] or {}).get('message') or node['state']))
            counts['skipped'] += 1
        properties = ElementTree.SubElement(case, 'properties')
        for key, value in (('state', node['state']), ('phase', (node['rollout'] or {}).get('phase')), ('batch', node['batch']),
                           ('driver_source', node.get('driver_source'))):
            if value is not None:
                ElementTree.SubElement(properties, 'property', name=key, value=str(value))
    for key, value in counts.items():
        suite.set(key, str(value))
    suites = ElementTree.Element('testsuites', name='gpufleet.lifecycle', **dict((key, str(value)) for key, value in counts.items()))
    suites.append(suite)
    buffer = io.BytesIO()
    ElementTree.ElementTree(suites).write(buffer, encoding='utf-8', xml_declaration=True)
    return buffer.getvalue().decode('utf-8') + '\n'


# ----------------------------------------------------------------------------------------------------------------
# Prometheus.

def metrics(report, playbook=None):
    """``metrics.prom`` for node_exporter's textfile collector; every series carries ``playbook`` so the files of the
    drift report and of a rollout can sit in one textfile folder without clashing."""
    if CollectorRegistry is None:
        raise RenderError('metrics.prom needs the Python package prometheus_client on the controller (pip install prometheus-client)')
    label = playbook or os.path.splitext(os.path.basename((report['run']['playbooks'] or ['unknown'])[-1]))[0]
    summary = report['summary']
    registry = CollectorRegistry()
    nodes = Gauge('gpufleet_nodes', 'Nodes per state at the end of the run (ledger state, rollout result or drift status).',
                  ['playbook', 'state'], registry=registry)
    for state, count in summary['states'].items():
        nodes.labels(label, state).set(count)
    drift = Gauge('gpufleet_drift_nodes', 'Nodes per drift status (drift_check).', ['playbook', 'status'], registry=registry)
    for status, count in summary['drift'].items():
        drift.labels(label, status).set(count)
    components = Gauge('gpufleet_drifted_nodes', 'Drifted nodes per pinned component.', ['playbook', 'component'], registry=registry)
    for component, count in summary['drifted_components'].items():
        components.labels(label, component).set(count)
    validation = Gauge('gpufleet_validation_nodes', 'Nodes per DCGM diag level, batch, window slot and result (pass, fail, not_run).',
                       ['playbook', 'level', 'batch', 'slot', 'result'], registry=registry)
    for row in summary['validation']:
        for result in ('pass', 'fail', 'not_run'):
            validation.labels(label, row['level'], row['batch'], row.get('slot') or '', result).set(row[result])
    for key, text in (('in_progress', 'in progress (cordoned .. validating, rolling back)'), ('done', 'done (done, left alone)'),
                      ('failed', 'failed (rolled back, quarantined)'), ('pending', 'pending (not admitted yet, deferred)')):
        Gauge('gpufleet_nodes_upgrades_%s' % key, 'Rollout nodes %s, as the GPU Operator counts its upgrades.' % text, ['playbook'],
              registry=registry).labels(label).set(summary['progress'][key])
    sources = Gauge('gpufleet_driver_source_nodes', 'Nodes per driver source (container, host_package, runfile, unowned) from their facts.',
                    ['playbook', 'source'], registry=registry)
    for source in _report.DRIVER_SOURCES:
        sources.labels(label, source).set((summary.get('driver_sources') or {}).get(source, 0))
    phases = Gauge('gpufleet_phase_seconds', 'Seconds nodes spent per node_upgrade phase (mean and max over the nodes).',
                   ['playbook', 'phase', 'stat'], registry=registry)
    for phase, entry in summary['phases'].items():
        phases.labels(label, phase, 'mean').set(entry['mean'])
        phases.labels(label, phase, 'max').set(entry['max'])
    # The jobs the rollout's drains interrupted (a Slurm requeue, a Kubernetes eviction): gauges of this run, like the rest.
    Gauge('gpufleet_interruptions', 'Interruptions of jobs by the rollout\'s drains (a drain that requeued or evicted a job), '
          'over all jobs.', ['playbook'], registry=registry).labels(label).set(summary.get('interruptions') or 0)
    Gauge('gpufleet_jobs_interrupted', 'Jobs the rollout\'s drains interrupted.', ['playbook'],
          registry=registry).labels(label).set(summary.get('jobs_interrupted') or 0)
    Gauge('gpufleet_gpu_hours_lost', 'GPU-hours of work lost to the rollout\'s drains since the jobs\' last declared checkpoint '
          '(else their start).', ['playbook'], registry=registry).labels(label).set(summary.get('gpu_hours_lost') or 0)
    per_job = Gauge('gpufleet_job_interruptions', 'Interruptions of one job by the rollout\'s drains.', ['playbook', 'job'], registry=registry)
    hours = Gauge('gpufleet_job_gpu_hours_lost', 'GPU-hours one job lost to the rollout\'s drains since its last declared checkpoint.',
                  ['playbook', 'job'], registry=registry)
    for job in summary.get('jobs') or []:
        per_job.labels(label, job['job']).set(job['interruptions'])
        hours.labels(label, job['job']).set(job['gpu_hours_lost'])
    finished = _report._epoch(report['run']['finished']) or 0
    Gauge('gpufleet_report_last_run_timestamp_seconds', 'When the run ended (Unix time).', ['playbook'],
          registry=registry).labels(label).set(finished)
    Gauge('gpufleet_report_last_run_duration_seconds', 'How long the run took.', ['playbook'],
          registry=registry).labels(label).set(report['run']['duration_seconds'])
    Gauge('gpufleet_report_failures', 'Nodes with a failure in the report (drift, broken, validation, rollback, quarantine, errors).',
          ['playbook'], registry=registry).labels(label).set(summary['failures'])
    return generate_latest(registry).decode('utf-8')


# ----------------------------------------------------------------------------------------------------------------
# Files.

def validate(report):
    """Problems of ``report`` against the shipped schema (``[]`` when valid or when jsonschema is not installed)."""
    if jsonschema is None:
        return []
    validator = jsonschema.Draft202012Validator(_report.schema())
    return ['%s: %s' % ('/'.join(str(part) for part in error.absolute_path) or '(top)', error.message)
            for error in sorted(validator.iter_errors(report), key=lambda error: list(error.absolute_path))]


def _write(folder, name, text):
    """``<folder>/<name>``, written atomically and readable by others (a textfile collector, a web server)."""
    path = os.path.join(folder, name)
    _ledger.write_atomic(path, text.encode('utf-8'), mode=0o644)
    return path


def write_all(report, folder, playbook=None, textfile=None):
    """Write every format into ``folder`` (created); returns ``(written paths, problems)``.

    A format that cannot be written (no prometheus_client) is a problem, not an exception: the others are still written.
    ``textfile``: a second path for ``metrics.prom`` (a node_exporter textfile folder's ``*.prom``), written atomically.
    """
    os.makedirs(folder, exist_ok=True)
    written, problems = [], []
    problems.extend('report.json does not match %s: %s' % (os.path.basename(_report.SCHEMA_FILE), problem) for problem in validate(report))
    written.append(_write(folder, 'report.json', json.dumps(report, indent=2, sort_keys=True) + '\n'))
    for name, render in (('report.md', markdown), ('report.html', html), ('junit.xml', junit)):
        written.append(_write(folder, name, render(report)))
    try:
        text = metrics(report, playbook)
    except RenderError as exc:
        problems.append(str(exc))
    else:
        written.append(_write(folder, 'metrics.prom', text))
        if textfile:
            os.makedirs(os.path.dirname(os.path.abspath(textfile)), exist_ok=True)
            written.append(_write(os.path.dirname(os.path.abspath(textfile)), os.path.basename(textfile), text))
    return written, problems
