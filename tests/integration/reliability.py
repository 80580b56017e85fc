# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fault-injection and bad-input suite's bookkeeping: scenarios, the invariants every scenario asserts, and
docs/reliability.md, generated from what the suite observed.

A scenario test takes the ``reliability`` fixture (tests/integration/conftest.py) and records itself::

    def test_never_returns_from_reboot(reliability, ...):
        scenario = reliability.scenario('node fault', 'never returns from its reboot',
                                        injected='tests/sim/fleet fault gpu-03 no_boot')
        ...                                               # run the rollout, assert
        states = reliability.check_rollout(run_dir)       # the invariants (below)
        scenario.observed('gpu-03 quarantined (did not come back from its reboot); the other nodes done')

``observed`` must be deterministic (no times, run ids or temporary paths): docs/reliability.md is compared with
what the suite generates, and a scenario whose observation changes is a change a reviewer must see.

The files of the suite are ``tests/integration/test_reliability_*.py``.  When a pytest session ran all of them (no
``-k``/``-m``), every test passed and at least one scenario was recorded, the session generates the document into
``build/reliability.md`` and compares it with ``docs/reliability.md`` (everything but the ``Generated`` line): a
difference fails the session and prints the diff.  ``GPUFLEET_WRITE_RELIABILITY=1`` writes docs/reliability.md
instead (after a deliberate change).

Categories (the document's sections, in this order): CATEGORIES.
"""

import datetime
import difflib
import glob
import json
import os

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DOC = os.path.join(ROOT, 'docs', 'reliability.md')
GENERATED = os.path.join(ROOT, 'build', 'reliability.md')
SUITE_GLOB = os.path.join(HERE, 'test_reliability_*.py')
WRITE_ENV = 'GPUFLEET_WRITE_RELIABILITY'

FAULT_CATEGORIES = ('node fault', 'scheduler fault', 'controller fault')
INPUT_CATEGORIES = ('hostile input', 'secrets')
CATEGORIES = FAULT_CATEGORIES + INPUT_CATEGORIES

FINAL = ('done', 'rolled_back', 'quarantined', 'deferred', 'left_alone')
# A node is out of service from its admission until it ends done, rolled_back (validated on its previous pin, back
# in service), deferred or left_alone (never taken out by this run); a quarantined node stays out.
BACK_IN_SERVICE = ('done', 'rolled_back', 'deferred', 'left_alone')
# The only final states a node reaches after this run uncordoned it: each needs a passed validation first.
UNCORDONED = ('done', 'rolled_back')
IN_FLIGHT = ('admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'rolling_back')


class Scenario:
    """One scenario of the document: what was injected, what was observed."""

    def __init__(self, category, name, injected, test):
        if category not in CATEGORIES:
            raise ValueError('scenario %r: category %r is not one of %s' % (name, category, ', '.join(CATEGORIES)))
        self.category = category
        self.name = name
        self.injected = injected
        self.test = test
        self.observation = None

    def observed(self, text):
        self.observation = text


class Recorder:
    """The session's scenarios (one instance, conftest.py's ``reliability`` fixture hands it out per test)."""

    def __init__(self):
        self.scenarios = []
        self.current_test = None

    def scenario(self, category, name, injected):
        for other in self.scenarios:
            if (other.category, other.name) == (category, name):
                raise ValueError('scenario %r recorded twice (%s and %s)' % (name, other.test, self.current_test))
        scenario = Scenario(category, name, injected, self.current_test)
        self.scenarios.append(scenario)
        return scenario

    # The invariants (check_rollout, check_schedulable, check_no_markers, check_clear_error) are attached below, so that a
    # scenario test reaches them through its one fixture.


# --------------------------------------------------------------------------------------------------- invariants

def read_run(run_dir, run_id=None):
    """(events, state) of one run in ``run_dir``; ``run_id`` may be left out when the folder holds one run."""
    if run_id is None:
        runs = sorted(name for name in os.listdir(run_dir) if name != 'locks' and os.path.isdir(os.path.join(run_dir, name)))
        assert len(runs) == 1, 'expected one run in %s, found %s' % (run_dir, runs)
        run_id = runs[0]
    with open(os.path.join(run_dir, run_id, 'ledger.jsonl'), encoding='utf-8') as handle:
        events = [json.loads(line) for line in handle if line.strip()]
    with open(os.path.join(run_dir, run_id, 'state.json'), encoding='utf-8') as handle:
        state = json.load(handle)
    if isinstance(state.get('ledger_bytes'), int):
        # The reader's rule: state.json is written at run events (start, pause, finish); a run killed in between is
        # state.json plus the ledger's events after the offset it reflects.
        with open(os.path.join(run_dir, run_id, 'ledger.jsonl'), 'rb') as handle:
            handle.seek(state['ledger_bytes'])
            tail, consumed = _ledger.parse_events(handle.read(), 'ledger.jsonl')
        for event in tail:
            _ledger.apply_event(state, event)
        state['ledger_bytes'] += consumed
    return events, state


def check_rollout(run_dir, run_id=None, gpus_per_node=8, total_gpus=None, floor=None, out_by_others=0, stopped=False):
    """Assert what every fault scenario promises, from the run's ledger.jsonl and state.json; return {node: state}.

    - every node of state.json is in a final state, and its last ledger event says so (the ledger names it); with
      ``stopped`` (a run that stopped safely and is to be resumed) a node may also be ``pending``, never admitted;
    - no node ended ``done`` without a ``validating`` event after its last admission, nor ``rolled_back`` without a
      ``rolling_back`` one (the procedure validates the previous pin before it uncordons): nothing returns to service
      without passing validation;
    - the capacity floor (``floor``, a share such as 0.65, of ``total_gpus``), when given, was never broken: at every
      event the GPUs out (``out_by_others`` plus ``gpus_per_node`` per node of this run out of service) leave at least
      ``floor * total_gpus`` schedulable.
    """
    events, state = read_run(run_dir, run_id)
    nodes = state['nodes']
    known = FINAL + (('pending',) if stopped else ())
    not_final = dict((node, record['state']) for node, record in nodes.items() if record['state'] not in known)
    assert not not_final, 'nodes not in a final state: %s (run status %s)' % (not_final, state.get('status'))
    last = {}
    for event in events:
        if event.get('node'):
            last[event['node']] = event
    for node, record in nodes.items():
        if stopped and record['state'] == 'pending' and node not in last:
            continue
        assert node in last, '%s: %s in state.json but no ledger event names it' % (node, record['state'])
        assert last[node]['to'] == record['state'], '%s: state.json says %s, the last ledger event %s' % (node, record['state'], last[node])
    # Validation before returning to service, per admission.
    validated = {}
    for event in events:
        node, to = event.get('node'), event.get('to')
        if not node:
            continue
        if to in ('admitted', 'pending'):
            validated[node] = set()
        elif to in ('validating', 'rolling_back'):
            validated.setdefault(node, set()).add(to)
        elif to in UNCORDONED:
            needed = 'validating' if to == 'done' else 'rolling_back'
            assert needed in validated.get(node, ()), '%s: %s -> %s without %s since its admission (%s)' % (
                node, event.get('from'), to, needed, event)
    # The capacity floor, replayed over the ledger (its order is the truth: it is appended under its lock).
    if floor is not None:
        total = total_gpus if total_gpus is not None else gpus_per_node * len(nodes)
        out = set()
        for event in events:
            node, to = event.get('node'), event.get('to')
            if not node:
                continue
            if to == 'admitted':
                out.add(node)
            elif to in BACK_IN_SERVICE or to == 'pending':
                out.discard(node)
            schedulable = total - out_by_others - gpus_per_node * len(out)
            assert schedulable >= floor * total - 1e-9, 'capacity floor %s of %d GPUs broken at %s: %s out' % (floor, total, event, sorted(out))
    return dict((node, record['state']) for node, record in nodes.items())


def check_schedulable(states, schedulable):
    """Assert the scheduler agrees with the ledger: a node quarantined or still in flight takes no work (drained in Slurm,
    cordoned in Kubernetes); a node done or rolled back does.  ``states``: {node: ledger state} (check_rollout's answer);
    ``schedulable``: {node: whether the scheduler would place work on it now}, read by the test.  Nodes deferred or left
    alone are as their owners left them and are not asserted here."""
    for node, state in sorted(states.items()):
        if node not in schedulable:
            continue
        if state == 'quarantined' or state in IN_FLIGHT:
            assert not schedulable[node], '%s is %s in the ledger but the scheduler would place work on it' % (node, state)
        elif state in UNCORDONED:
            assert schedulable[node], '%s is %s in the ledger but the scheduler does not place work on it' % (node, state)


def check_no_markers(folder, what='a marker file'):
    """Assert that no command the input did not intend ran: the hostile values create files named ``MARKER*`` in
    ``folder`` when a shell or option parser ever interprets them."""
    found = sorted(glob.glob(os.path.join(folder, 'MARKER*')))
    assert not found, '%s exists: a hostile value was executed: %s' % (what, found)


def check_clear_error(output, host, *fields):
    """Assert that ``output`` (a failed run's stdout+stderr) names ``host`` and each of ``fields`` and carries no
    Python traceback; return the first line naming the host's error, for the observation."""
    assert 'Traceback (most recent call last)' not in output, 'a traceback reached the output:\n%s' % output[-4000:]
    assert host in output, 'the error does not name the host %r:\n%s' % (host, output[-4000:])
    for field in fields:
        assert field in output, 'the error does not name %r:\n%s' % (field, output[-4000:])
    return True


Recorder.check_rollout = staticmethod(check_rollout)
Recorder.check_schedulable = staticmethod(check_schedulable)
Recorder.check_no_markers = staticmethod(check_no_markers)
Recorder.check_clear_error = staticmethod(check_clear_error)


# --------------------------------------------------------------------------------------------------- the document

def collection_version():
    with open(os.path.join(ROOT, 'galaxy.yml'), encoding='utf-8') as handle:
        for line in handle:
            if line.startswith('version:'):
                return line.split(':', 1)[1].strip()
    raise AssertionError('galaxy.yml has no version')


def _cell(text):
    return ' '.join(str(text).split()).replace('|', '\\|')


def render(scenarios, today=None):
    """The markdown of docs/reliability.md for ``scenarios`` (their order does not matter)."""
    today = today or datetime.date.today().isoformat()
    faults = [s for s in scenarios if s.category in FAULT_CATEGORIES]
    inputs = [s for s in scenarios if s.category in INPUT_CATEGORIES]
    lines = [
        '# Reliability: fault injection and bad input',
        '',
        '<!-- Generated by the fault-injection suite (tests/integration/test_reliability_*.py); do not edit by hand. -->',
        '<!-- make test fails when this file differs from what the suite observed; regenerate it with -->',
        '<!-- GPUFLEET_WRITE_RELIABILITY=1 python -m pytest tests/integration/test_reliability_*.py -->',
        '',
        'Generated: %s' % today,
        '',
        'Collection version: %s' % collection_version(),
        '',
        'Every scenario below ran during `make test` on the simulated fleet (tests/sim) or against stand-in tools, and',
        'passed. For every rollout scenario the suite asserted, from the run\'s `ledger.jsonl` and `state.json`: every',
        'node ends in a final state the ledger names; no node returned to service without passing validation; the',
        'capacity floor, where one was set, was never broken. For every bad input: a clear error naming the host, the',
        'file or variable and the field, no Python traceback, nothing changed, and no marker file written by a command',
        'the input smuggled in.',
        '',
        '%d fault scenarios, %d bad inputs.' % (len(faults), len(inputs)),
        '',
    ]
    for category in CATEGORIES:
        chosen = sorted((s for s in scenarios if s.category == category), key=lambda s: s.name)
        if not chosen:
            continue
        lines += ['## %s' % category.capitalize(), '', '| scenario | injected | observed |', '|---|---|---|']
        for scenario in chosen:
            lines.append('| %s | %s | %s |' % (_cell(scenario.name), _cell(scenario.injected), _cell(scenario.observation)))
        lines.append('')
    return '\n'.join(lines)


def _comparable(text):
    return [line for line in text.splitlines() if not line.startswith('Generated: ')]


def compare(scenarios):
    """Write build/reliability.md; return (same, diff text) against docs/reliability.md."""
    missing = [s.name for s in scenarios if s.observation is None]
    if missing:
        return False, 'scenarios recorded no observation: %s' % ', '.join(missing)
    text = render(scenarios)
    os.makedirs(os.path.dirname(GENERATED), exist_ok=True)
    with open(GENERATED, 'w', encoding='utf-8') as handle:
        handle.write(text)
    if os.environ.get(WRITE_ENV) == '1':
        with open(DOC, 'w', encoding='utf-8') as handle:
            handle.write(text)
        return True, 'wrote %s' % DOC
    try:
        with open(DOC, encoding='utf-8') as handle:
            committed = handle.read()
    except OSError:
        committed = ''
    if _comparable(committed) == _comparable(text):
        return True, ''
    diff = difflib.unified_diff(_comparable(committed), _comparable(text), 'docs/reliability.md', 'generated', lineterm='')
    return False, '\n'.join(diff)


def suite_files():
    return sorted(glob.glob(SUITE_GLOB))
