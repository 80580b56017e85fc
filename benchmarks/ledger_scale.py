# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Time the rollout ledger at 100, 1,000 and 10,000 nodes (a benchmark, not a test).

    python benchmarks/ledger_scale.py [--quick]

On the real backends: the file backend in a temporary folder, and the Kubernetes backend against the fake API server
of tests/sim/kube/fake_apiserver.py in this process.  A fixed window of 32 nodes in flight at every size (not 10 %:
the window is what a decision reads, and it is the same at every size here).  For each size and backend it prints the
cost of

* an event: a node's transition (append, fsync, and the amortized compaction of the head and the shards);
* an admission decision: the gate's compact view (``RunLedger.gate_view``) and ``_gate.admit`` for a pending node;
* a fresh reader: what a new process does to decide for one node - a new backend, ``RunLedger.open`` and the view
  (timed in this process: the interpreter's start and imports are left out);

then the ratio 10,000 : 100 of each (lines with ``ratio``), and a 10,000-node rollout's estimated ledger work (7 events
per node, one fresh reader and one admission per node, measured with 1,000 nodes in flight: the window 10 %) against 1 %
of its lower-bound makespan (25 min per node, window 10 %: 10 waves of 25 min = 250 min).  The Kubernetes backend at 10,000 nodes times fewer events.
"""

import datetime
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'build', 'collections'))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim', 'kube'))
LINK = os.path.join(ROOT, 'build', 'collections', 'ansible_collections', 'gpufleet', 'lifecycle')
if not os.path.islink(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink(os.path.relpath(ROOT, os.path.dirname(LINK)), LINK)

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate, _ledger, _policy  # noqa: E402

SIZES = (100, 1000, 10000)
WINDOW = 32
STEPS = ('admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'done')
NOW = datetime.datetime(2026, 11, 24, 22, 30, tzinfo=datetime.timezone.utc)


def fleet(count):
    return {'gpu%05d' % index: {'domain': 'rack%02d' % (index % 64), 'gpus': 8} for index in range(count)}


def policy(window=WINDOW):
    return _policy.load_policy({'gpufleet_window': window, 'gpufleet_canary': 2, 'gpufleet_domain_var': 'rack',
                                'gpufleet_domain_max': 4, 'gpufleet_capacity_floor': '50%', 'gpufleet_max_fail_percentage': 10})


def drive(ledger, names, events, window=WINDOW):
    """``events`` transitions with ``window`` nodes in flight, each walking STEPS; returns seconds per event."""
    flying = {}
    upcoming = iter(names)
    done = 0
    start = time.perf_counter()
    while done < events:
        while len(flying) < window:
            name = next(upcoming, None)
            if name is None:
                break
            flying[name] = 0
        if not flying:
            break
        for name in list(flying)[:4]:
            ledger.transition(name, STEPS[flying[name]], 'bench')
            done += 1
            flying[name] += 1
            if flying[name] == len(STEPS):
                del flying[name]
    return (time.perf_counter() - start) / done


def measure(make_backend, count, events, decisions, window=WINDOW):
    """(event, admission, fresh reader) seconds for a run of ``count`` nodes with ``window`` in flight."""
    nodes = fleet(count)
    names = sorted(nodes)
    rules = policy(window)
    backend = make_backend()
    ledger = _ledger.RunLedger.create(backend, 'bench-%d' % count, inventory='bench', policy=rules.to_dict(), nodes=nodes)
    event = drive(ledger, names, min(events, count * 5), window)
    scheduler = _gate.SchedulerView(total_gpus=count * 8, unavailable={names[-1]: 8})
    pending = list(reversed(names))[:decisions]
    start = time.perf_counter()
    for name in pending:
        view = ledger.gate_view(name, extra=scheduler.unavailable)
        _gate.admit(rules, view, scheduler, name, NOW)
    admission = (time.perf_counter() - start) / len(pending)
    start = time.perf_counter()
    for name in pending[:max(5, decisions // 4)]:
        fresh = _ledger.RunLedger.open(make_backend(), ledger.run_id)
        _gate.admit(rules, fresh.gate_view(name, extra=scheduler.unavailable), scheduler, name, NOW)
    reader = (time.perf_counter() - start) / max(5, decisions // 4)
    return event, admission, reader


def report(label, results):
    for count, (event, admission, reader) in sorted(results.items()):
        print('%-10s %6d nodes: event %7.3f ms  admission %7.3f ms  fresh reader %7.3f ms'
              % (label, count, event * 1e3, admission * 1e3, reader * 1e3))
    small, large = results[SIZES[0]], results[SIZES[-1]]
    for position, what in enumerate(('event', 'admission', 'fresh reader')):
        print('%-10s %s ratio 10000:100 = %.2f' % (label, what, large[position] / small[position]))


def main():
    quick = '--quick' in sys.argv
    folder = tempfile.mkdtemp(prefix='ledger-scale-')
    try:
        files = {}
        for count in SIZES:
            run_dir = os.path.join(folder, 'files-%d' % count)
            files[count] = measure(lambda run_dir=run_dir: _ledger.FileBackend(run_dir), count, 300 if quick else 1500, 40)
        report('file', files)
        # The makespan's window is 10 % (1,000 nodes in flight): what a decision reads grows with it, so measure it there.
        event, admission, reader = measure(lambda: _ledger.FileBackend(os.path.join(folder, 'files-10pct')), SIZES[-1],
                                           1000 if quick else 3000, 40, window=SIZES[-1] // 10)
        print('file       10000 nodes, window 1000 (10 %%): event %.3f ms  admission %.3f ms  fresh reader %.3f ms'
              % (event * 1e3, admission * 1e3, reader * 1e3))
        work = 10000 * (7 * event + admission + reader)
        budget = 0.01 * 10 * 25 * 60
        print('file       10000-node rollout, window 10 %%: estimated ledger work %.1f s (7 events + 1 admission + 1 fresh reader per '
              'node) vs 1 %% of the 250 min lower-bound makespan (%.0f s): %.1f %% of the makespan' % (work, budget, work / (10 * 25 * 60) * 100))
        import fake_apiserver  # pylint: disable=import-outside-toplevel,import-error
        running, _thread, url = fake_apiserver.start({'namespaces': [{'metadata': {'name': 'bench'}}]})
        try:
            kubeconfig = fake_apiserver.write_kubeconfig(os.path.join(folder, 'kubeconfig'), url)
            spec = {'backend': 'kubernetes', 'namespace': 'bench', 'kubeconfig': kubeconfig, 'lease_seconds': 30}
            kube = {}
            for count in SIZES:
                scratch = os.path.join(folder, 'kube-%d' % count)
                events = 150 if quick or count == SIZES[-1] else 400
                kube[count] = measure(lambda scratch=scratch: _ledger.open_backend(dict(spec, run_dir=scratch)), count, events, 40)
            report('kubernetes', kube)
        finally:
            fake_apiserver.stop(running)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == '__main__':
    main()
