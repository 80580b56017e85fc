# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The soft pre-drain: a "going soon" mark on the nodes a run has still to upgrade, so that new and requeued work goes to
the nodes already upgraded, without evicting anything (docs/rollout-policy.md#soft-pre-drain).

* Kubernetes and Run:ai: the taint ``gpufleet.io/upgrade-pending=<run>:PreferNoSchedule`` (the scheduler avoids the node when
  another fits; it never evicts, and the capacity floor does not count it out).
* Slurm: a higher ``Weight`` (Slurm allocates the lowest weight that satisfies a job first; features only filter jobs that
  ask for them and cannot be negated, so a weight is the one preference real Slurm has). The weight before plus
  :data:`WEIGHT_OFFSET`, so a site's own weights keep their order. ``scontrol update`` weights are lost at a restart of
  slurmctld without ``-R`` and at ``scontrol reconfig``: the mark is then gone by itself, and the undo finds the weight it
  set no more and leaves the node's weight as it is.

Every mark is recorded in the run's ledger (the document :data:`DOC`, ``{node: mark}``) **before** it is set, and forgotten
only **after** it is undone, so a controller killed at any point leaves nothing the ledger cannot name; the start of a
resumed run, the finish and ``rollout_control`` undo what is recorded. An undo only takes back what is still gpufleet's: the
weight it set, its taint.

Pure: the scheduler is read and written through an ``io`` object (:class:`._run_context.SchedulerMarks`).
"""

from __future__ import annotations

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _slurm
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _kube

DOC = 'soft_marks'
TAINT_KEY = 'gpufleet.io/upgrade-pending'
TAINT_EFFECT = 'PreferNoSchedule'
WEIGHT_OFFSET = 1000000
# Slurm's node weight is a 32-bit number; INFINITE (0xffffffff) is not a weight to set.
WEIGHT_MAX = 4294967294
SCHEDULERS = ('slurm', 'kubernetes', 'runai')
CHUNK = 200


class PredrainError(ValueError):
    """A mark that cannot be read or set; the message names the node."""


# ------------------------------------------------------------------ Slurm

def slurm_weights(records):
    """{node: weight} from ``scontrol show node -o`` records (:func:`._rollout.node_records`); a node without a readable
    ``Weight`` is left out."""
    weights = {}
    for record in records:
        node = _slurm.parse_show_node(record)
        try:
            weights[node['name']] = int(node.get('Weight'))
        except (TypeError, ValueError):
            continue
    return weights


def weight_mark(before):
    return {'scheduler': 'slurm', 'kind': 'weight', 'before': before, 'set': min(before + WEIGHT_OFFSET, WEIGHT_MAX)}


def grouped(pairs):
    """[(value, [nodes])] from (node, value) pairs: one ``scontrol update`` per value, at most :data:`CHUNK` nodes each."""
    by_value = {}
    for node, value in pairs:
        by_value.setdefault(value, []).append(node)
    calls = []
    for value in sorted(by_value):
        names = sorted(by_value[value])
        calls.extend((value, names[start:start + CHUNK]) for start in range(0, len(names), CHUNK))
    return calls


def weight_undo(mark, now):
    """(weight to set or None, why): the weight gpufleet set goes back; one that is not (slurmctld restarted, someone changed
    it) is left as it is."""
    if now == mark.get('set'):
        return mark.get('before'), 'weight %s back to %s' % (now, mark.get('before'))
    if now is None:
        return None, 'not in scontrol show node any more'
    if now == mark.get('before'):
        return None, 'weight already %s (slurmctld restarted or reconfigured)' % now
    return None, 'weight %s is not the %s gpufleet set: left as it is' % (now, mark.get('set'))


# ------------------------------------------------------------------ Kubernetes

def taint(run_id):
    return {'key': TAINT_KEY, 'value': _kube.quarantine_value(run_id) or 'run', 'effect': TAINT_EFFECT}


def _taints(node):
    taints = ((node or {}).get('spec') or {}).get('taints')
    return taints if isinstance(taints, list) else []


def taint_add(node, run_id):
    """The JSON patch that adds the mark to ``node`` (a Node object), None when it carries the key already."""
    taints = _taints(node)
    if any(isinstance(item, dict) and item.get('key') == TAINT_KEY for item in taints):
        return None
    if not ((node or {}).get('spec') or {}).get('taints'):
        return [{'op': 'add', 'path': '/spec/taints', 'value': [taint(run_id)]}]
    return [{'op': 'add', 'path': '/spec/taints/-', 'value': taint(run_id)}]


def taint_remove(node):
    """The JSON patch that takes the mark off ``node``, each removal after a test of the taint it removes; None when none."""
    taints = _taints(node)
    found = [index for index, item in enumerate(taints) if isinstance(item, dict) and item.get('key') == TAINT_KEY]
    operations = []
    for index in reversed(found):
        operations += [{'op': 'test', 'path': '/spec/taints/%d' % index, 'value': taints[index]},
                       {'op': 'remove', 'path': '/spec/taints/%d' % index}]
    return operations or None


def taint_mark(run_id):
    return {'scheduler': 'kubernetes', 'kind': 'taint', 'taint': taint(run_id)}


# ------------------------------------------------------------------ marking and undoing (through io)

def mark(io, scheduler, marks, nodes, run_id, member, at, record):
    """Mark ``nodes`` (not marked yet in ``marks``); ``record(new_marks)`` writes them in the ledger before any is set.

    Returns the nodes marked. A node the scheduler does not know is left out."""
    wanted = [node for node in nodes if node not in marks]
    if scheduler not in SCHEDULERS or not wanted:
        return []
    if scheduler == 'slurm':
        weights = io.slurm_weights(wanted)
        new = {node: dict(weight_mark(weights[node]), member=member, at=at) for node in wanted if node in weights}
        record(new)
        io.set_weights(grouped((node, mark['set']) for node, mark in new.items()))
        return sorted(new)
    documents = io.kube_nodes(wanted)
    new = {node: dict(taint_mark(run_id), member=member, at=at) for node in wanted if node in documents}
    record(new)
    for node in sorted(new):
        operations = taint_add(documents[node], run_id)
        if operations:
            io.patch_node(node, operations)
    return sorted(new)


def undo(io, marks, nodes):
    """Take the marks of ``nodes`` (recorded in ``marks``) back; returns {node: why} for each undone (the caller then
    forgets them in the ledger)."""
    chosen = {node: marks[node] for node in nodes if node in marks}
    if not chosen:
        return {}
    done = {}
    slurm = {node: mark for node, mark in chosen.items() if mark.get('scheduler') == 'slurm'}
    if slurm:
        weights = io.slurm_weights(sorted(slurm))
        back = []
        for node, mark in slurm.items():
            weight, why = weight_undo(mark, weights.get(node))
            if weight is not None:
                back.append((node, weight))
            done[node] = why
        io.set_weights(grouped(back))
    kube = sorted(node for node, mark in chosen.items() if mark.get('scheduler') == 'kubernetes')
    if kube:
        documents = io.kube_nodes(kube)
        for node in kube:
            operations = taint_remove(documents.get(node))
            if operations:
                io.patch_node(node, operations)
            done[node] = 'taint %s removed' % TAINT_KEY if operations else 'no taint %s any more' % TAINT_KEY
    for node in chosen:
        done.setdefault(node, 'unknown mark: forgotten')
    return done
