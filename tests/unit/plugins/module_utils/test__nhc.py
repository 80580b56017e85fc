# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet's pause requests on Medik8s NodeHealthChecks: which objects select a node, and the JSON patches."""

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _nhc

WORKERS = {'matchExpressions': [{'key': 'node-role.kubernetes.io/worker', 'operator': 'Exists'},
                                {'key': 'node-role.kubernetes.io/control-plane', 'operator': 'DoesNotExist'}]}
GPU_WORKER = {'node-role.kubernetes.io/worker': '', 'nvidia.com/gpu.present': 'true'}


def nhc(name='nhc-workers', selector=None, requests=None, version='17'):
    spec = {'selector': WORKERS if selector is None else selector, 'minHealthy': '51%'}
    if requests is not None:
        spec['pauseRequests'] = requests
    return {'apiVersion': 'remediation.medik8s.io/v1alpha1', 'kind': 'NodeHealthCheck',
            'metadata': {'name': name, 'resourceVersion': version}, 'spec': spec}


@pytest.mark.parametrize('selector, labels, selected', [
    (WORKERS, GPU_WORKER, True),
    (WORKERS, {'node-role.kubernetes.io/control-plane': ''}, False),
    (WORKERS, dict(GPU_WORKER, **{'node-role.kubernetes.io/control-plane': ''}), False),
    ({'matchLabels': {'nvidia.com/gpu.present': 'true'}}, GPU_WORKER, True),
    ({'matchLabels': {'nvidia.com/gpu.present': 'false'}}, GPU_WORKER, False),
    ({'matchExpressions': [{'key': 'pool', 'operator': 'In', 'values': ['a', 'b']}]}, {'pool': 'b'}, True),
    ({'matchExpressions': [{'key': 'pool', 'operator': 'In', 'values': ['a', 'b']}]}, {}, False),
    ({'matchExpressions': [{'key': 'pool', 'operator': 'NotIn', 'values': ['a']}]}, {}, True),
    ({'matchExpressions': [{'key': 'pool', 'operator': 'NotIn', 'values': ['a']}]}, {'pool': 'a'}, False),
    ({}, GPU_WORKER, True),     # an old object's empty selector selects every node
])
def test_a_label_selector_selects_as_kubernetes_does(selector, labels, selected):
    assert _nhc.selects(nhc(selector=selector), labels) is selected


def test_an_unknown_operator_names_the_object():
    with pytest.raises(_nhc.NhcError, match="nhc-workers: spec.selector.matchExpressions: operator 'Gt'"):
        _nhc.selects(nhc(selector={'matchExpressions': [{'key': 'a', 'operator': 'Gt', 'values': ['1']}]}), {'a': '2'})


def test_the_first_pause_request_creates_the_list_and_tests_the_version():
    assert _nhc.patch(nhc(), 'gpu-01', 'r1', True) == [
        {'op': 'test', 'path': '/metadata/resourceVersion', 'value': '17'},
        {'op': 'add', 'path': '/spec/pauseRequests', 'value': ['gpufleet.lifecycle: gpu-01 in flight (run r1)']}]


def test_a_pause_request_is_appended_to_others_and_added_once():
    others = nhc(requests=['pause for cluster upgrade by @admin'])
    added = {'op': 'add', 'path': '/spec/pauseRequests/-', 'value': 'gpufleet.lifecycle: gpu-01 in flight (run r1)'}
    assert _nhc.patch(others, 'gpu-01', 'r1', True)[1] == added
    already = nhc(requests=['gpufleet.lifecycle: gpu-01 in flight (run r0)'])
    assert _nhc.patch(already, 'gpu-01', 'r1', True) is None


def test_only_gpufleets_requests_for_the_node_are_removed_from_the_end():
    requests = ['gpufleet.lifecycle: gpu-01 in flight (run r0)', 'upgrade by @admin', 'gpufleet.lifecycle: gpu-010 in flight (run r1)',
                'gpufleet.lifecycle: gpu-01 in flight (run r1)']
    assert _nhc.patch(nhc(requests=requests), 'gpu-01', 'r1', False) == [
        {'op': 'test', 'path': '/metadata/resourceVersion', 'value': '17'},
        {'op': 'remove', 'path': '/spec/pauseRequests/3'}, {'op': 'remove', 'path': '/spec/pauseRequests/0'}]
    assert _nhc.patch(nhc(requests=['upgrade by @admin']), 'gpu-01', 'r1', False) is None


def test_changes_pause_the_selecting_objects_and_release_from_all():
    objects = [nhc('workers'), nhc('control-plane', selector={'matchLabels': {'node-role.kubernetes.io/control-plane': ''}}),
               nhc('moved', selector={'matchLabels': {'pool': 'old'}}, requests=['gpufleet.lifecycle: gpu-01 in flight (run r1)'])]
    assert [name for name, _patch in _nhc.changes(objects, 'gpu-01', GPU_WORKER, 'r1', True)] == ['workers']
    # The node's labels changed while it was held: its request on 'moved' still goes.
    assert [name for name, _patch in _nhc.changes(objects, 'gpu-01', GPU_WORKER, 'r1', False)] == ['moved']


def test_pause_requests_that_are_not_a_list_are_refused_naming_the_object():
    with pytest.raises(_nhc.NhcError, match='nhc-workers: spec.pauseRequests must be a list'):
        _nhc.patch(nhc(requests='x'), 'gpu-01', 'r1', True)
