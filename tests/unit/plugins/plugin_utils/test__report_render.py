# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""plugin_utils/_report_render.py: the timeline's colours follow the procedure's one phase vocabulary; the jobs a
rollout's drains interrupted show in every format (issue 28)."""

import datetime

from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _procedure
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _report
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _report_render


def test_every_phase_of_the_procedure_and_every_ledger_state_in_flight_has_its_colour():
    known = set(_procedure.PHASES) | set(_gate.STATES) | {'run'}
    assert set(_procedure.PHASES) | set(_gate.IN_FLIGHT) <= set(_report_render.PHASE_COLOURS)
    assert set(_report_render.PHASE_COLOURS) <= known, set(_report_render.PHASE_COLOURS) - known


NOON = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.timezone.utc)
HELD = 'Slurm DRAIN (reason: admin: bad DIMM)'


def at(minutes):
    return (NOON + datetime.timedelta(minutes=minutes)).isoformat()


def hit(job, kind, gpus, when, checkpoint=None, start=None):
    return {'job': job, 'kind': kind, 'gpus': gpus, 'checkpoint': checkpoint, 'start': start, 'at': when, 'nodes': None}


def interrupted_report(held=True, interrupted=True):
    """A rollout whose drains requeued Slurm job 77 twice (16 GPUs, 60 and 70 min since its start), evicted a JobSet
    from a job group (8 + 4 GPUs, 30 min after its checkpoint) and requeued job 80 (no checkpoint, no start); gpu-06
    left alone, Slurm holds it."""
    group = {'group': ['gpu-04', 'gpu-05'], 'jobs': ['JobSet ml/llm']}
    hits = {
        'gpu-01': [hit('77', 'requeued', 16, at(0), start=at(-60))],
        'gpu-03': [hit('77', 'requeued', 16, at(10), start=at(-60))],
        'gpu-04': [hit('JobSet ml/llm', 'evicted', 8, at(0), checkpoint=at(-30))],
        'gpu-05': [hit('JobSet ml/llm', 'evicted', 4, at(5), checkpoint=at(-30))],
        'gpu-07': [hit('80', 'requeued', 8, at(20))],
    } if interrupted else {}
    nodes = {}
    for name in ('gpu-01', 'gpu-03', 'gpu-04', 'gpu-05', 'gpu-07'):
        nodes[name] = dict({'state': 'done', 'reason': '', 'interrupted': hits.get(name, [])}, **(group if name in ('gpu-04', 'gpu-05') else {}))
    if held:
        nodes['gpu-06'] = {'state': 'left_alone', 'reason': 'held by another actor', 'held_by': HELD}
    ledger = {'path': '/runs/r28/ledger.jsonl', 'state': {'run_id': 'r28', 'status': 'finished', 'nodes': nodes}, 'events': []}
    run = {'id': 'r28', 'playbooks': ['rolling_restart.yml'], 'started': 1795000000.0, 'finished': 1795003600.0}
    return _report.build(run, {}, ledger)


def test_markdown_lists_the_jobs_interrupted_and_the_nodes_held_by_others():
    report = interrupted_report()
    assert (report['summary']['interruptions'], report['summary']['gpu_hours_lost']) == (4, 40.67)
    text = _report_render.markdown(report)
    assert '## Jobs interrupted' in text
    assert '3 jobs interrupted, 4 interruptions, 40.67 GPU-hours lost since their last declared checkpoint' in text
    assert '| job | interruptions | GPU-hours lost | nodes |' in text
    assert '| 77 | 2 | 34.67 | gpu-01, gpu-03 |' in text
    assert '| JobSet ml/llm | 1 | 6.00 | gpu-04, gpu-05 |' in text
    assert '| 80 | 1 | 0.00 + unknown | gpu-07 |' in text
    assert 'Left alone, another actor holds them: gpu-06 (%s).' % HELD in text
    quiet = _report_render.markdown(interrupted_report(held=False, interrupted=False))
    assert '## Jobs interrupted' not in quiet and 'another actor holds' not in quiet


def test_html_lists_the_jobs_interrupted_and_the_nodes_held_by_others():
    page = _report_render.html(interrupted_report())
    assert '<h2 id="jobs">Jobs interrupted</h2>' in page
    assert '<tr data-job="77"><td>77</td><td>2</td><td title="interrupted at %s, %s">34.67</td><td>gpu-01, gpu-03</td></tr>' % (at(0), at(10)) in page
    assert '<td>JobSet ml/llm</td><td>1</td>' in page and '>6.00</td><td>gpu-04, gpu-05</td>' in page
    assert '>0.00 + unknown</td>' in page
    assert 'gpu-06 (Slurm DRAIN (reason: admin: bad DIMM))' in page
    quiet = _report_render.html(interrupted_report(held=False, interrupted=False))
    assert 'id="jobs"' not in quiet and 'class="held"' not in quiet


def test_metrics_count_the_interruptions_and_the_gpu_hours_lost():
    found = {}
    for family in text_string_to_metric_families(_report_render.metrics(interrupted_report())):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    label = ('playbook', 'rolling_restart')
    assert found[('gpufleet_interruptions', (label,))] == 4
    assert found[('gpufleet_jobs_interrupted', (label,))] == 3
    assert found[('gpufleet_gpu_hours_lost', (label,))] == 40.67
    assert found[('gpufleet_job_interruptions', (('job', '77'), label))] == 2
    assert found[('gpufleet_job_interruptions', (('job', 'JobSet ml/llm'), label))] == 1
    assert found[('gpufleet_job_gpu_hours_lost', (('job', 'JobSet ml/llm'), label))] == 6.0
    none = text_string_to_metric_families(_report_render.metrics(interrupted_report(interrupted=False)))
    samples = dict((sample.name, sample.value) for family in none for sample in family.samples if 'job' not in sample.labels)
    assert (samples['gpufleet_interruptions'], samples['gpufleet_jobs_interrupted'], samples['gpufleet_gpu_hours_lost']) == (0, 0, 0)
