# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report's data model: what the ``gpufleet.lifecycle.fleet_report`` callback collected -> ``report.json``.

Controller-side, no Ansible import.  The callback records per host the module results it saw (``drift_check``'s
documented keys, ``node_upgrade_result``, ``node_validate_result``, phase marks) and the Ansible outcome; :func:`build`
turns them, and the rollout ledger when there is one (:func:`read_ledger`), into the report, whose shape is
``fleet_report.schema.json`` (beside this file, :data:`SCHEMA_VERSION`).  :func:`merge` joins the reports of several
``--limit`` shards or AWX slices into one.  Renderers (Markdown, HTML, JUnit, Prometheus) are in ``_report_render``.

A node's ``driver_source`` (``container``, ``host_package``, ``runfile``, ``unowned``; null when not reported) and its
``driver_source_evidence`` are the ones its drift_check (or node_upgrade) result carries from the node's facts (schema 1.2).

A node's ``interrupted`` (the jobs its drain interrupted, as the ledger's record carries them), ``job_group`` (the
nodes admitted with it as one job's group) and ``held_by`` (who holds a node left alone at the gate) come from the ledger
(schema 1.3); :func:`job_interruptions` counts per job the distinct interruptions and the GPU-hours lost since the last
declared checkpoint (``summary.jobs``).

A node's ``state`` is the ledger's state when the ledger knows the node (the report agrees with the ledger), else
its ``node_upgrade_result`` state, else its drift status (``in_sync``, ``drifted``, ``broken``, ``not_checked``),
else what Ansible says (``unreachable``, ``failed``), else ``not_reported`` (or ``pending`` in a rollout).
"""

from __future__ import annotations

import datetime
import json
import os
import re

from ansible_collections.gpufleet.lifecycle.plugins.module_utils._facts import DRIVER_SOURCES
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger

SCHEMA_VERSION = '1.3'
SCHEMA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fleet_report.schema.json')
SCHEMA_ID = 'https://gpufleet.invalid/lifecycle/fleet_report.schema.json'
DRIFT_STATUSES = ('in_sync', 'drifted', 'broken', 'not_checked')
RESULTS = ('ok', 'failed', 'unreachable', 'skipped', 'not_run')
OTHER_STATES = ('unreachable', 'failed', 'not_reported')
ROLLOUT_STATES = _gate.STATES
# The GPU Operator's upgrade metrics count nodes in progress / done / failed / pending; this is how ledger states map.
PROGRESS = {
    'in_progress': _gate.IN_FLIGHT,
    'done': ('done', 'left_alone'),
    'failed': _gate.FAILED,
    'pending': (_gate.PENDING, 'deferred'),
}
FAILURE_KINDS = ('rolled_back', 'quarantined', 'validation', 'drift', 'broken', 'unreachable', 'error')
_DIAG = re.compile(r'^dcgm_diag_r(\d+)$')
# What a drain did to a job: Slurm requeued it (``gpus``: the whole job's), Kubernetes evicted its pods (``gpus``: this node's).
INTERRUPTION_KINDS = ('requeued', 'evicted')
INTERRUPTION_KEYS = ('job', 'kind', 'gpus', 'checkpoint', 'start', 'at', 'nodes')
# Records of one job whose drains began within this many seconds of an interruption's first are that interruption.
CONCURRENT_SECONDS = 60


class ReportError(ValueError):
    """A report or ledger that cannot be read; the message names the file."""


def iso(epoch):
    if epoch is None:
        return None
    return datetime.datetime.fromtimestamp(float(epoch), datetime.timezone.utc).isoformat()


def _epoch(text):
    try:
        return _ledger.epoch(text)
    except (TypeError, ValueError):
        return None


# ----------------------------------------------------------------------------------------------------------------
# The ledger.

def ledger_location(path):
    """(run_dir, run_id) of a ledger given as ``<run_dir>/<run_id>`` or ``<run_dir>/<run_id>/ledger.jsonl``."""
    path = os.path.abspath(path)
    if os.path.basename(path) in (_ledger.LEDGER, _ledger.STATE):
        path = os.path.dirname(path)
    return os.path.dirname(path), os.path.basename(path)


def ledger_of(where):
    """The ledger specification ``{backend, run_dir, run_id, ...}`` of a path (``<run_dir>/<run_id>[/ledger.jsonl]``, the
    file backend) or of a specification as the rollout gate hands it to the hosts (``gpufleet_ledger``: any backend)."""
    if isinstance(where, dict):
        return dict(where)
    run_dir, run_id = ledger_location(where)
    return {'backend': 'file', 'run_dir': run_dir, 'run_id': run_id}


def read_ledger(where):
    """``{'path', 'state', 'events'}`` of a ledger (a path or a specification, :func:`ledger_of`), rebuilt from its events
    (the authority) through ``_ledger.open_backend``, so a Kubernetes ledger reads as a file one; ``path`` says where it is."""
    spec = ledger_of(where)
    run_id = spec.get('run_id')
    label = '%s' % (spec.get('run_dir'),)
    try:
        backend = _ledger.open_backend(spec)
        label = backend.location(_ledger.check_run_id(run_id), _ledger.LEDGER)
        if not backend.exists(run_id):
            raise ReportError('%s: no ledger (%s) there' % (backend.location(run_id), _ledger.LEDGER))
        events = backend.read_events(run_id, 0)[0]
        state = _ledger.rebuild(backend, run_id)
    except _ledger.LedgerError as exc:
        raise ReportError('%s: %s' % (label, exc)) from None
    return {'path': label, 'state': state, 'events': events}


# ----------------------------------------------------------------------------------------------------------------
# One node.

def _text(value):
    """A version as the report shows it: a list of GPU versions joined, a per-model pin as ``model: version``."""
    if value is None:
        return None
    if isinstance(value, dict):
        return '; '.join('%s: %s' % (key, value[key]) for key in sorted(value))
    if isinstance(value, (list, tuple)):
        return ', '.join(str(item) for item in value) or None
    return str(value)


def _components(drift):
    """``components`` of a drift_check result, with display strings; falls back to ``drift`` (older results)."""
    found = {}
    for name, entry in (drift.get('components') or {}).items():
        if not isinstance(entry, dict):
            continue
        found[name] = {'status': entry.get('status') or 'unknown', 'expected': _text(entry.get('expected')),
                       'actual': _text(entry.get('actual')), 'source': entry.get('source'), 'gpus': entry.get('gpus') or {}}
    for name, entry in (drift.get('drift') or {}).items():
        if name in found or not isinstance(entry, dict):
            continue
        if 'expected' in entry:
            found[name] = {'status': 'drifted', 'expected': _text(entry.get('expected')), 'actual': _text(entry.get('actual')),
                           'source': entry.get('source'), 'gpus': {}}
        else:
            found[name] = {'status': 'drifted', 'expected': _text(sorted(set(str(gpu.get('expected')) for gpu in entry.values()))),
                           'actual': _text(sorted(set(str(gpu.get('actual')) for gpu in entry.values()))), 'source': None, 'gpus': entry}
    return found


def _drift_section(drift):
    if not isinstance(drift, dict) or drift.get('status') not in DRIFT_STATUSES:
        return None
    return {'status': drift['status'], 'message': drift.get('message') or drift.get('msg') or '', 'health': drift.get('health'),
            'health_reason': drift.get('health_reason'), 'components': _components(drift)}


def _levels(checks):
    levels = {}
    for check in checks or []:
        if not isinstance(check, dict):
            continue
        match = _DIAG.match(str(check.get('name') or ''))
        if not match:
            continue
        if check.get('passed'):
            levels[match.group(1)] = 'pass'
        elif str(check.get('message') or '').startswith('not run'):
            levels[match.group(1)] = 'not_run'
        else:
            levels[match.group(1)] = 'fail'
    return levels


def _rollout_section(result):
    if not isinstance(result, dict) or not result.get('state'):
        return None
    keys = ('state', 'phase', 'reason', 'passed', 'rma_suspect', 'seconds', 'total_seconds', 'versions_before', 'versions_after',
            'validation', 'rollback_validation')
    section = dict((key, result.get(key)) for key in keys)
    section['reason'] = section['reason'] or ''
    section['seconds'] = dict((str(phase), float(seconds)) for phase, seconds in (section['seconds'] or {}).items()
                              if isinstance(seconds, (int, float)))
    section['total_seconds'] = float(section['total_seconds'] or sum(section['seconds'].values()))
    section['passed'] = bool(section['passed'])
    section['rma_suspect'] = bool(section['rma_suspect'])
    return section


def _ledger_section(record):
    if not isinstance(record, dict):
        return None
    return dict((key, record.get(key)) for key in ('state', 'reason', 'since', 'admitted_at', 'finished_at'))


def _optional_text(value):
    return None if value is None or value == '' else str(value)


def _interrupted(record):
    """The jobs a node's drain interrupted, from its ledger record (``_phase.interrupted``), normalised: each
    ``{job, kind, gpus, checkpoint, start, at, nodes}`` with text ids and times, ``kind`` one of :data:`INTERRUPTION_KINDS`
    or null, ``gpus`` a count or null; [] when none or unreadable."""
    found = record.get('interrupted') if isinstance(record, dict) else None
    entries = []
    for entry in found if isinstance(found, list) else []:
        if not isinstance(entry, dict) or entry.get('job') in (None, ''):
            continue
        gpus = entry.get('gpus')
        nodes = entry.get('nodes')
        if isinstance(nodes, (list, tuple)):
            nodes = ','.join(str(item) for item in nodes)
        entries.append({
            'job': str(entry['job']),
            'kind': entry.get('kind') if entry.get('kind') in INTERRUPTION_KINDS else None,
            'gpus': gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus >= 0 else None,
            'checkpoint': _optional_text(entry.get('checkpoint')),
            'start': _optional_text(entry.get('start')),
            'at': _optional_text(entry.get('at')),
            'nodes': _optional_text(nodes),
        })
    return entries


def _names(value):
    """A list of node names (a job's group) or None."""
    if not isinstance(value, (list, tuple)) or not value:
        return None
    return [str(item) for item in value]


def _timeline(name, host, ledger, end):
    """``[{'phase', 'start', 'end'}]``: the ledger's states over time, else the procedure's phase marks, else the tasks."""
    steps = [(_epoch(event.get('time')), event.get('to')) for event in (ledger or {}).get('events') or []
             if event.get('node') == name and event.get('time')]
    if steps:
        spans = []
        for index, (start, state) in enumerate(steps):
            stop = steps[index + 1][0] if index + 1 < len(steps) else (start if state in _gate.FINAL or state == _gate.PENDING else end)
            if start is not None and state not in (_gate.PENDING,):
                spans.append({'phase': state, 'start': start, 'end': max(start, stop or start)})
        return spans
    marks = [mark for mark in host.get('marks') or [] if isinstance(mark, (list, tuple)) and len(mark) == 2]
    if marks:
        stop_all = host.get('end') or end
        spans = []
        for index, (phase, start) in enumerate(marks):
            try:
                start = float(start)
                stop = float(marks[index + 1][1]) if index + 1 < len(marks) else float(stop_all or start)
            except (TypeError, ValueError):
                continue
            spans.append({'phase': str(phase), 'start': start, 'end': max(start, stop)})
        return spans
    seconds = (host.get('upgrade') or {}).get('seconds') if isinstance(host.get('upgrade'), dict) else None
    stop_all = host.get('end') or end
    if seconds and stop_all is not None:
        # Only the phase times are known: lay them end to end, ending when the host's last task ended.
        spans, clock = [], float(stop_all) - sum(float(value) for value in seconds.values() if isinstance(value, (int, float)))
        for phase, value in seconds.items():
            if isinstance(value, (int, float)):
                spans.append({'phase': str(phase), 'start': clock, 'end': clock + float(value)})
                clock += float(value)
        return spans
    if host.get('start') is not None:
        return [{'phase': 'run', 'start': float(host['start']), 'end': float(host.get('end') or host['start'])}]
    return []


def _drift_reason(drift):
    parts = []
    for name, entry in drift['components'].items():
        if entry['status'] == 'drifted':
            parts.append('%s %s (pinned %s)' % (name, entry['actual'] if entry['actual'] is not None else 'not installed', entry['expected']))
    return 'drifted: %s' % ', '.join(parts)


def _failure(node, errors):
    rollout, drift, state = node['rollout'], node['drift'], node['state']
    phase = (rollout or {}).get('phase')
    reason = (rollout or {}).get('reason') or (node['ledger'] or {}).get('reason') or ''
    if state in ('rolled_back', 'quarantined'):
        failed = [check for check in (rollout or {}).get('validation') or [] if isinstance(check, dict) and not check.get('passed')]
        detail = '; '.join('%s: %s' % (check.get('name'), check.get('message')) for check in failed)
        if detail and detail not in reason:
            reason = '%s (validation: %s)' % (reason, detail) if reason else 'validation: %s' % detail
        return {'kind': state, 'reason': reason, 'phase': phase}
    if rollout and not rollout['passed'] and rollout['state'] not in ('deferred',):
        return {'kind': 'validation', 'reason': reason, 'phase': phase}
    if drift and drift['status'] == 'drifted':
        return {'kind': 'drift', 'reason': _drift_reason(drift), 'phase': None}
    if drift and drift['status'] == 'broken':
        return {'kind': 'broken', 'reason': drift['message'], 'phase': None}
    last = errors[-1] if errors else {}
    if node['result'] == 'unreachable':
        return {'kind': 'unreachable', 'reason': last.get('msg') or 'unreachable', 'phase': last.get('task')}
    if node['result'] == 'failed':
        return {'kind': 'error', 'reason': last.get('msg') or 'a task failed', 'phase': last.get('task')}
    return None


def window_slots(ledger):
    """``{node: slot}``: the slot of the rollout window (1, 2, ...) each node's last admission took in the ledger.

    Replays the ledger's events: an admission takes the lowest slot free at that moment, a node leaving flight
    (a final state, or back to pending) frees its slot; a node caught in flight by a crash keeps its slot on resume.
    """
    taken, slots = {}, {}
    for event in (ledger or {}).get('events') or []:
        name, state = event.get('node'), event.get('to')
        if not isinstance(name, str):
            continue
        if state in _gate.IN_FLIGHT and name not in taken:
            used = set(taken.values())
            taken[name] = slots[name] = next(slot for slot in range(1, len(used) + 2) if slot not in used)
        elif state in _gate.FINAL or state == _gate.PENDING:
            taken.pop(name, None)
    return slots


def _driver_source(host):
    """``(driver_source, evidence)`` from the node's drift_check result, else its node_upgrade result; (None, None) when neither says."""
    for key in ('drift', 'upgrade'):
        result = host.get(key)
        if isinstance(result, dict) and result.get('driver_source') in DRIVER_SOURCES:
            evidence = result.get('driver_source_evidence')
            return result['driver_source'], evidence if isinstance(evidence, str) else None
    return None, None


def build_node(name, host, ledger=None, rollout_run=False, end=None, slot=None):
    """The report's entry for one node from what the callback recorded (``host``) and the ledger (``slot``: window_slots)."""
    host = host or {}
    record = ((ledger or {}).get('state') or {}).get('nodes', {}).get(name)
    node = {
        'name': name,
        'result': host.get('result') if host.get('result') in RESULTS else 'not_run',
        'batch': host.get('batch'),
        'slot': slot,
        'drift': _drift_section(host.get('drift')),
        'rollout': _rollout_section(host.get('upgrade')),
        'ledger': _ledger_section(record),
    }
    node['driver_source'], node['driver_source_evidence'] = _driver_source(host)
    node['interrupted'] = _interrupted(record)
    node['job_group'] = _names((record or {}).get('group'))
    node['held_by'] = _optional_text((record or {}).get('held_by'))
    if node['ledger']:
        node['state'] = node['ledger']['state']
    elif node['rollout']:
        node['state'] = node['rollout']['state']
    elif node['drift'] and not rollout_run:
        node['state'] = node['drift']['status']
    elif node['result'] in ('unreachable', 'failed'):
        node['state'] = node['result']
    else:
        node['state'] = _gate.PENDING if rollout_run else 'not_reported'
    checks = (node['rollout'] or {}).get('validation')
    if checks is None and isinstance(host.get('validation'), dict):
        checks = host['validation'].get('checks')
    node['validation'] = _levels(checks)
    node['failure'] = _failure(node, host.get('errors') or [])
    node['timeline'] = _timeline(name, host, ledger, end)
    return node


# ----------------------------------------------------------------------------------------------------------------
# The jobs a rollout interrupted.

def _interruption_gpus(records):
    """The GPUs an interruption took from its job: a Slurm requeue's record has the whole job's GPUs (the most any record
    says), a Kubernetes eviction's the GPUs its pods held on one node (summed, one count per node); None when none says."""
    per_node = {}
    for name, entry in records:
        if entry['gpus'] is not None:
            per_node[name] = max(per_node.get(name, 0), entry['gpus'])
    if not per_node:
        return None
    if all(entry['kind'] == 'evicted' for _name, entry in records):
        return sum(per_node.values())
    return max(per_node.values())


def _lost_since(records, at):
    """Epoch seconds since which an interruption's work is lost: the job's declared checkpoint when it is at or before
    ``at`` (the latest such, never before the job's latest (re)start: an old comment kept across a requeue), else the job's
    start (the last checkpoint is unknown), else None."""
    if at is None:
        return None
    starts = [stamp for stamp in (_epoch(entry['start']) for _name, entry in records) if stamp is not None]
    start = max(starts) if starts else None       # the job's latest (re)start: nothing before it is lost again
    checkpoints = [stamp for stamp in (_epoch(entry['checkpoint']) for _name, entry in records) if stamp is not None and stamp <= at]
    if checkpoints:
        return max(checkpoints + ([start] if start is not None and start <= at else []))
    return start


def job_interruptions(nodes):
    """Per job, what the rollout's drains did to it: ``[{job, interruptions, gpu_hours_lost, lost_unknown, nodes, at}]``
    sorted by job, from the nodes' ``interrupted`` records.

    Records of one job are one interruption when their nodes share a ``job_group`` (admitted together as the job's group)
    or when their ``at`` is within :data:`CONCURRENT_SECONDS` of the interruption's first ``at`` (concurrent drains); else
    they are a new one.  An interruption loses ``(at - base) / 3600`` hours (never negative) times its GPUs
    (:func:`_interruption_gpus`), ``base`` being :func:`_lost_since`; ``lost_unknown`` when an interruption has no base
    (no checkpoint at or before ``at`` and no start) or no GPU count, its loss then not counted.  ``at``: the first ``at``
    of each interruption, in order.
    """
    records = {}
    for node in nodes:
        group = tuple(sorted(_names(node.get('job_group')) or ()))
        for entry in _interrupted(node):
            records.setdefault(entry['job'], []).append((node['name'], group, entry))
    jobs = []
    for job in sorted(records):
        found = []     # [{'at': epoch or None, 'text': first at, 'groups': set, 'records': [(node, entry)]}]
        ordered = sorted(records[job], key=lambda item: (_epoch(item[2]['at']) is None, _epoch(item[2]['at']) or 0.0, item[0]))
        for name, group, entry in ordered:
            at = _epoch(entry['at'])
            interruption = next((item for item in found if (group and group in item['groups']) or (
                at is not None and item['at'] is not None and abs(at - item['at']) <= CONCURRENT_SECONDS)), None)
            if interruption is None:
                interruption = {'at': at, 'text': entry['at'], 'groups': set(), 'records': []}
                found.append(interruption)
            if group:
                interruption['groups'].add(group)
            interruption['records'].append((name, entry))
        hours, unknown = 0.0, False
        for interruption in found:
            base = _lost_since(interruption['records'], interruption['at'])
            gpus = _interruption_gpus(interruption['records'])
            if base is None or gpus is None:
                unknown = True
                continue
            hours += max(0.0, interruption['at'] - base) / 3600.0 * gpus
        jobs.append({'job': job, 'interruptions': len(found), 'gpu_hours_lost': round(hours, 2), 'lost_unknown': unknown,
                     'nodes': sorted(set(name for name, _group, _entry in records[job])), 'at': [item['text'] for item in found]})
    return jobs


# ----------------------------------------------------------------------------------------------------------------
# The fleet.

def summarize(nodes, kind):
    """The ``summary`` of a report from its nodes (also what :func:`merge` recomputes)."""
    states = dict((state, 0) for state in (ROLLOUT_STATES if kind == 'rollout' else DRIFT_STATUSES + OTHER_STATES))
    drift = dict((status, 0) for status in DRIFT_STATUSES)
    components = {}
    progress = dict((key, 0) for key in PROGRESS)
    validation = {}
    phases = {}
    sources = dict((source, 0) for source in DRIVER_SOURCES)
    for node in nodes:
        states[node['state']] = states.get(node['state'], 0) + 1
        if node.get('driver_source') in sources:
            sources[node['driver_source']] += 1
        if node['drift']:
            drift[node['drift']['status']] += 1
            for name, entry in node['drift']['components'].items():
                components.setdefault(name, 0)
                if entry['status'] == 'drifted':
                    components[name] += 1
        for key, members in PROGRESS.items():
            if node['state'] in members:
                progress[key] += 1
        for level, verdict in node['validation'].items():
            key = (level, str(node['batch'] or 1), str(node.get('slot') or ''))
            row = validation.setdefault(key, {'pass': 0, 'fail': 0, 'not_run': 0})
            row[verdict] += 1
        for phase, seconds in ((node['rollout'] or {}).get('seconds') or {}).items():
            entry = phases.setdefault(phase, {'nodes': 0, 'total': 0.0, 'max': 0.0})
            entry['nodes'] += 1
            entry['total'] = round(entry['total'] + seconds, 1)
            entry['max'] = max(entry['max'], seconds)
    jobs = job_interruptions(nodes)
    return {
        'nodes': len(nodes),
        'states': states,
        'drift': drift,
        'drifted_components': dict(sorted(components.items())),
        'progress': progress,
        'validation': [dict(level=level, batch=batch, slot=slot, **counts) for (level, batch, slot), counts in sorted(validation.items())],
        'phases': dict((phase, dict(entry, mean=round(entry['total'] / entry['nodes'], 1))) for phase, entry in sorted(phases.items())),
        'failures': len([node for node in nodes if node['failure']]),
        'driver_sources': sources,
        'jobs': jobs,
        'jobs_interrupted': len(jobs),
        'interruptions': sum(job['interruptions'] for job in jobs),
        'gpu_hours_lost': round(sum(job['gpu_hours_lost'] for job in jobs), 2),
    }


def build(run, hosts, ledger=None, pin=None):
    """The report.

    ``run``: ``{'id', 'playbooks', 'started', 'finished' (epoch), 'check_mode', 'ansible_version', 'collection_version'}``.
    ``hosts``: ``{name: {'result', 'errors': [{'task', 'msg'}], 'drift', 'upgrade', 'validation', 'marks', 'batch',
    'start', 'end', 'rollout'}}``; ``rollout`` true for a host of a rollout play.  ``ledger``: :func:`read_ledger`.
    """
    state = (ledger or {}).get('state') or {}
    rollout_run = bool(ledger) or any((host or {}).get('upgrade') or (host or {}).get('rollout') for host in hosts.values())
    kind = 'rollout' if rollout_run else 'drift'
    names = set(hosts) | set(state.get('nodes') or {})
    end = run.get('finished')
    slots = window_slots(ledger)
    nodes = [build_node(name, hosts.get(name), ledger, rollout_run, end, slots.get(name)) for name in sorted(names)]
    if pin is None:
        pin = state.get('pin') or next((host['drift'].get('pin') for host in hosts.values()
                                        if isinstance((host or {}).get('drift'), dict) and host['drift'].get('pin')), None) or {}
    started, finished = run.get('started'), run.get('finished')
    report = {
        'schema': SCHEMA_ID,
        'schema_version': SCHEMA_VERSION,
        'kind': kind,
        'run': {
            'id': str(run.get('id') or state.get('run_id') or ''),
            'playbooks': list(run.get('playbooks') or []),
            'started': iso(started),
            'finished': iso(finished),
            'duration_seconds': round(max(0.0, (finished or 0) - (started or 0)), 1) if started and finished else 0.0,
            'check_mode': bool(run.get('check_mode')),
            'ansible_version': run.get('ansible_version'),
            'collection_version': run.get('collection_version'),
            'ledger': (ledger or {}).get('path'),
            'ledger_status': state.get('status'),
            'shards': 1,
        },
        'pin': dict((key, _text(value)) for key, value in (pin or {}).items()),
        'summary': summarize(nodes, kind),
        'nodes': nodes,
    }
    return report


def merge(reports):
    """One report from the reports of several shards (``--limit`` runs, AWX slices) of the same fleet.

    A node reported by more than one shard keeps the entry of the shard that finished last.
    """
    reports = [report for report in reports if report]
    if not reports:
        raise ReportError('nothing to merge')
    versions = set(report.get('schema_version') for report in reports)
    # 1.x only adds fields: reports of every 1.x merge (a node of an older one has no slot, one before 1.2 no driver_source,
    # one before 1.3 no interrupted, job_group or held_by).
    major = SCHEMA_VERSION.split('.', maxsplit=1)[0]
    if not all(str(version).split('.', maxsplit=1)[0] == major for version in versions):
        raise ReportError('cannot merge report schema versions %s (this collection writes %s)' % (
            ', '.join(sorted(str(version) for version in versions)), SCHEMA_VERSION))
    ordered = sorted(reports, key=lambda report: report['run'].get('finished') or '')
    nodes = {}
    for report in ordered:
        for node in report['nodes']:
            nodes[node['name']] = node
    kind = 'rollout' if any(report['kind'] == 'rollout' for report in reports) else 'drift'
    starts = [report['run']['started'] for report in reports if report['run'].get('started')]
    ends = [report['run']['finished'] for report in reports if report['run'].get('finished')]
    started, finished = (min(starts) if starts else None), (max(ends) if ends else None)
    duration = (_epoch(finished) - _epoch(started)) if started and finished else 0.0
    playbooks = []
    for report in ordered:
        playbooks.extend(item for item in report['run']['playbooks'] if item not in playbooks)
    pin = {}
    for report in ordered:
        pin.update(report.get('pin') or {})
    merged_nodes = [nodes[name] for name in sorted(nodes)]
    last = ordered[-1]['run']
    return {
        'schema': SCHEMA_ID,
        'schema_version': SCHEMA_VERSION,
        'kind': kind,
        'run': dict(last, id='+'.join(sorted(set(report['run']['id'] for report in reports if report['run'].get('id')))),
                    playbooks=playbooks, started=started, finished=finished, duration_seconds=round(max(0.0, duration), 1),
                    check_mode=all(report['run'].get('check_mode') for report in reports),
                    shards=sum(int(report['run'].get('shards') or 1) for report in reports)),
        'pin': pin,
        'summary': summarize(merged_nodes, kind),
        'nodes': merged_nodes,
    }


def load(path):
    """A ``report.json`` (a file, or a folder holding one)."""
    if os.path.isdir(path):
        path = os.path.join(path, 'report.json')
    try:
        with open(path, encoding='utf-8') as handle:
            report = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ReportError('%s: not a readable report.json (%s)' % (path, exc)) from None
    if not isinstance(report, dict) or 'nodes' not in report or 'run' not in report:
        raise ReportError('%s: not a fleet report (no run and nodes)' % path)
    return report


def schema():
    with open(SCHEMA_FILE, encoding='utf-8') as handle:
        return json.load(handle)
