# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The run is its ledger on the Kubernetes backend: a fresh controller (AWX's next job, nothing on its disk) sees how the
first controller's nodes failed, so the pin-fault detector and the circuit breaker decide as the first controller would."""

import datetime
import os
import sys

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _upgrade
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate, _ledger, _phase, _rollout
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._policy import load_policy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim', 'kube'))

import fake_apiserver  # noqa: E402  pylint: disable=wrong-import-position,import-error

NOW = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.timezone.utc)
POLICY = load_policy({'gpufleet_window': 1, 'gpufleet_canary': 0, 'gpufleet_max_fail_percentage': None,
                      'gpufleet_circuit_breaker_threshold': None, 'gpufleet_pin_fault_threshold': 2})


@pytest.fixture
def spec(tmp_path):
    running, _thread, url = fake_apiserver.start({'namespaces': [{'metadata': {'name': 'gpufleet'}}]})
    kubeconfig = fake_apiserver.write_kubeconfig(str(tmp_path / 'kubeconfig'), url)
    yield {'backend': 'kubernetes', 'namespace': 'gpufleet', 'kubeconfig': kubeconfig, 'lease_seconds': 30}
    fake_apiserver.stop(running)


def fail(ledger, node, gpu):
    """What node_upgrade's procedure writes for a node that failed DCGM on the new pin and was quarantined."""
    result = _upgrade.result('quarantined', 'validate', reason='validation failed', rma=False, validation={'checks': [
        {'name': 'dcgm_diag_r1', 'passed': False, 'message': 'GPU %d failed the memory test on %s' % (gpu, node)}]})
    for step in ('admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating'):
        ledger.transition(node, step, 'the procedure')
    return _phase.record(ledger, node, 'quarantined', result['reason'], details=_phase.final_details(result, node, {'gpu_count': 8}))


def decide(ledger, node):
    ledger.catch_up()
    state = ledger.state
    return _gate.admit(POLICY, _rollout.rollout_view(_ledger.node_view(state), state.get('breaker_history')), _gate.SchedulerView(), node, NOW)


def test_a_fresh_controller_pauses_on_the_second_node_failing_like_the_first(spec, tmp_path):
    first = _ledger.open_backend(dict(spec, run_dir=str(tmp_path / 'ee-1')))
    ledger = _ledger.RunLedger.create(first, 'kube-run', policy=POLICY.to_dict(), nodes={name: {'gpus': 8} for name in ('n1', 'n2', 'n3')})
    assert fail(ledger, 'n1', 3) == ['quarantined']
    assert decide(ledger, 'n2').action == _gate.ADMIT             # one failure is no pattern yet

    # The first controller is gone with its execution environment; the next one has nothing of the run on its disk.
    second = _ledger.open_backend(dict(spec, run_dir=str(tmp_path / 'ee-2')))
    fresh = _ledger.RunLedger.open(second, 'kube-run')
    assert fresh.state['nodes']['n1']['signature'] == ['validate', [['dcgm_diag_r1', 'gpu # failed the memory test on <node>']]]
    fail(fresh, 'n2', 5)
    decision = decide(_ledger.RunLedger.open(_ledger.open_backend(dict(spec, run_dir=str(tmp_path / 'ee-3'))), 'kube-run'), 'n3')
    assert (decision.action, decision.rule) == (_gate.PAUSE, 'pin_suspect'), decision
    assert 'n1, n2 failed the same way' in decision.reason and 'roll back the pin' in decision.reason
    assert not os.path.exists(tmp_path / 'ee-2' / 'kube-run' / 'results')
