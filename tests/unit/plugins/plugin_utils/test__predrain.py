# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The soft pre-drain: Slurm weights read from real scontrol output, the Kubernetes taint patches, and the marks through the
rollout's steps (start, settle, finish, resume, rollout_control) with a fake scheduler I/O: set only while a node is pending,
recorded in the ledger before they are set, taken back after every outcome."""

import copy
import os

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.action import rollout as action
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _ledger
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _predrain
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout_node
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout_run
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _rollout_start
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _run_context

from test_multi_controller_model import Clock  # pylint: disable=import-error


SLURM = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'real-outputs', 'slurm')
FOUR_NODES = 'scontrol_show_node_slurm17.11_4nodes-gpu-m60x8-rtx2080x4-quadro_IDLE+DRAIN_irush-cs-slurm-scripts.txt'
NODES = ['n1', 'n2', 'n3']


def real(name):
    assert os.path.exists(os.path.join(SLURM, name + '.source.txt'))
    with open(os.path.join(SLURM, name), encoding='utf-8') as handle:
        return handle.read()


def test_weights_are_read_from_real_scontrol_output():
    assert _predrain.slurm_weights(_rollout.node_records(real(FOUR_NODES))) == {'cortex-01': 8, 'dumfries-002': 9, 'oxygen-04': 5, 'cricket': 3}


def test_the_mark_keeps_a_sites_weights_in_order_and_stays_a_weight():
    assert _predrain.weight_mark(8)['set'] == 1000008 and _predrain.weight_mark(3)['set'] == 1000003
    assert _predrain.weight_mark(4294967000)['set'] == _predrain.WEIGHT_MAX


@pytest.mark.parametrize('now, weight, why', [
    (1000008, 8, 'weight 1000008 back to 8'),
    (8, None, 'weight already 8 (slurmctld restarted or reconfigured)'),
    (50, None, 'weight 50 is not the 1000008 gpufleet set: left as it is'),
    (None, None, 'not in scontrol show node any more'),
])
def test_only_the_weight_gpufleet_set_is_taken_back(now, weight, why):
    assert _predrain.weight_undo(_predrain.weight_mark(8), now) == (weight, why)


def test_one_scontrol_call_per_weight_in_chunks():
    pairs = [('n%03d' % number, 1000001) for number in range(450)] + [('x', 1000005)]
    calls = _predrain.grouped(pairs)
    assert [(weight, len(names)) for weight, names in calls] == [(1000001, 200), (1000001, 200), (1000001, 50), (1000005, 1)]


def test_the_taint_patches():
    node = {'metadata': {'name': 'gpu-01'}, 'spec': {}}
    assert _predrain.taint_add(node, 'r1') == [{'op': 'add', 'path': '/spec/taints', 'value': [
        {'key': 'gpufleet.io/upgrade-pending', 'value': 'r1', 'effect': 'PreferNoSchedule'}]}]
    other = {'key': 'nvidia.com/gpu', 'effect': 'NoSchedule'}
    node['spec']['taints'] = [other, _predrain.taint('r1')]
    assert _predrain.taint_add(node, 'r2') is None
    assert _predrain.taint_remove(node) == [{'op': 'test', 'path': '/spec/taints/1', 'value': _predrain.taint('r1')},
                                            {'op': 'remove', 'path': '/spec/taints/1'}]
    assert _predrain.taint_remove({'spec': {'taints': [other]}}) is None
    assert _predrain.taint('awx-12:rolling restart')['value'] == 'awx-12-rolling-restart'


class FakeSlurm:
    """The scheduler I/O of a Slurm cluster whose nodes have weights (scontrol's, in memory)."""

    def __init__(self, weights):
        self.weights = dict(weights)
        self.calls = []
        self.reads = []

    def slurm_weights(self, names=None):
        self.reads.append(names)
        return dict(self.weights)

    def set_weights(self, calls):
        for weight, names in calls:
            self.calls.append((weight, tuple(names)))
            for name in names:
                self.weights[name] = weight


class FakeKube:
    """The scheduler I/O of a Kubernetes cluster: Node objects, JSON patches applied as the API would."""

    def __init__(self, names):
        self.nodes = {name: {'metadata': {'name': name}, 'spec': {}} for name in names}

    def kube_nodes(self, names):
        return {name: copy.deepcopy(self.nodes[name]) for name in names if name in self.nodes}

    def patch_node(self, name, operations):
        spec = self.nodes[name]['spec']
        for operation in operations:
            if operation['op'] == 'add' and operation['path'] == '/spec/taints':
                spec['taints'] = list(operation['value'])
            elif operation['op'] == 'add':
                spec['taints'].append(operation['value'])
            elif operation['op'] == 'test':
                assert spec['taints'][int(operation['path'].rsplit('/', 1)[1])] == operation['value']
            else:
                del spec['taints'][int(operation['path'].rsplit('/', 1)[1])]


def fleet(context, nodes, jobs=False):
    return _rollout.Fleet({name: 8 for name in NODES}, ())


def context_of(backend, io, scheduler='slurm', host='localhost', **given):
    args = {name: copy.deepcopy(spec.get('default')) for name, spec in action.ARGUMENT_SPEC.items()}
    args.update(run_dir=backend.run_dir, nodes=list(NODES), policy={'gpufleet_window': 1, 'gpufleet_canary': 0}, scheduler=scheduler)
    args.update(given)
    variables = {'inventory_hostname': host, 'ansible_inventory_sources': ['inv'], 'ansible_forks': 5}
    return _run_context.RunContext(args, variables, {}, clock=Clock(1000.0), open_backend=lambda spec: backend, scheduler=fleet,
                                   keep=lambda *arguments: None, marks=io)


@pytest.fixture
def backend(tmp_path):
    return _ledger.FileBackend(str(tmp_path))


def start(backend, io, scheduler='slurm', **given):
    context = context_of(backend, io, scheduler, run_id='r1', **given)
    _rollout_start.start(context)
    return context


def test_a_run_marks_its_pending_nodes_and_takes_each_mark_back_when_the_node_is_done(backend):
    io = FakeSlurm({'n1': 1, 'n2': 1, 'n3': 20, 'login': 1})
    context = start(backend, io)
    assert context.result['soft_marked'] == NODES and io.weights == {'n1': 1000001, 'n2': 1000001, 'n3': 1000020, 'login': 1}
    assert io.calls == [(1000001, ('n1', 'n2')), (1000020, ('n3',))]
    ledger = _ledger.RunLedger.open(backend, 'r1')
    assert {node: (mark['before'], mark['set']) for node, mark in ledger.soft_marks().items()} == {
        'n1': (1, 1000001), 'n2': (1, 1000001), 'n3': (20, 1000020)}
    spec = context.result['ansible_facts']['gpufleet_rollout']['ledger']
    for step in ['admitted', 'cordoned', 'drained', 'converging', 'rebooting', 'validating', 'done']:
        ledger.transition('n1', step, 'the procedure')
    settled = context_of(backend, io, host='n1', ledger=spec, result={'state': 'done'})
    _rollout_node.settle(settled)
    assert settled.result['soft_unmarked'] == {'n1': 'weight 1000001 back to 1'} and io.weights['n1'] == 1
    assert io.reads == [NODES, ['n1']]          # the start reads its nodes, a settle its own node
    assert sorted(ledger.soft_marks()) == ['n2', 'n3']
    # slurmctld restarted meanwhile: n2's weight is slurm.conf's again, and is left as it is; n3 goes back.
    io.weights['n2'] = 1
    finish = context_of(backend, io, ledger=spec, fleet=_rollout.fleet_name('inv'), member=context.result['member'])
    _rollout_run.finish(finish)
    assert io.weights == {'n1': 1, 'n2': 1, 'n3': 20, 'login': 1} and ledger.soft_marks() == {}


def test_a_crashed_run_leaves_marks_the_resume_and_rollout_control_take_back(backend):
    io = FakeSlurm({'n1': 1, 'n2': 1, 'n3': 1})
    context = start(backend, io)
    ledger = _ledger.RunLedger.open(backend, 'r1')
    for step in ['admitted', 'cordoned', 'drained', 'rebooting', 'quarantined']:
        ledger.transition('n2', step, 'the procedure')
    # kill -9: no settle, no finish. The resume takes back n2's mark (not pending) and keeps n1's and n3's.
    ledger.leave(context.result['member'], 1000.0)
    _ledger.FileBackend.release(backend, _rollout.fleet_name('inv'), 'r1')
    resumed = start(backend, io)
    assert resumed.result['resumed'] is True and resumed.result['soft_marked'] == []
    assert io.weights == {'n1': 1000001, 'n2': 1, 'n3': 1000001} and sorted(ledger.soft_marks()) == ['n1', 'n3']
    # Crashed again; an operator pauses the run: no controller runs it, every mark goes.
    ledger.leave(resumed.result['member'], 1000.0)
    control = context_of(backend, io, run_id='r1', verb='pause', nodes=[])
    _rollout_run.control(control)
    assert io.weights == {'n1': 1, 'n2': 1, 'n3': 1} and ledger.soft_marks() == {}
    assert sorted(control.result['soft_unmarked']) == ['n1', 'n3']


def test_kubernetes_marks_are_a_prefer_no_schedule_taint(backend):
    io = FakeKube(NODES)
    io.nodes['n2']['spec']['taints'] = [{'key': 'nvidia.com/gpu', 'effect': 'NoSchedule'}]
    context = start(backend, io, scheduler='kubernetes')
    assert context.result['soft_marked'] == NODES
    assert io.nodes['n2']['spec']['taints'] == [{'key': 'nvidia.com/gpu', 'effect': 'NoSchedule'}, _predrain.taint('r1')]
    ledger = _ledger.RunLedger.open(backend, 'r1')
    control = context_of(backend, io, run_id='r1', verb='skip', nodes=['n2'])
    _rollout_run.control(control)
    assert io.nodes['n2']['spec']['taints'] == [{'key': 'nvidia.com/gpu', 'effect': 'NoSchedule'}]
    assert sorted(ledger.soft_marks()) == ['n1', 'n3']


def test_off_marks_nothing_and_a_held_node_is_never_marked(backend):
    io = FakeSlurm({'n1': 1, 'n2': 1, 'n3': 1})
    context = start(backend, io, policy={'gpufleet_window': 1, 'gpufleet_canary': 0, 'gpufleet_predrain': False})
    assert context.result['soft_marked'] == [] and io.calls == []


def test_a_failure_to_mark_is_a_warning_not_a_stop(backend):
    class Broken(FakeSlurm):
        def set_weights(self, calls):
            raise _run_context.GateError('scontrol update exited 1: Invalid user')
    io = Broken({'n1': 1, 'n2': 1, 'n3': 1})
    context = start(backend, io)
    assert context.result['soft_marked'] == [] and 'scontrol update exited 1' in context.result['warnings'][-1]
    # Recorded before it was set: the finish tries to take it back (a weight it did not set is left as it is).
    assert sorted(_ledger.RunLedger.open(backend, 'r1').soft_marks()) == NODES
