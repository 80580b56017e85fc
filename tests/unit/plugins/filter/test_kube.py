# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The filters gpufleet.lifecycle.k8s_node_name, k8s_node_plan and k8s_pod_plan: thin wrappers over plugin_utils/_kube.py."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.lifecycle.plugins.filter.kube import FilterModule

NODE = {'metadata': {'name': 'gpu-01', 'labels': {'gpufleet.io/state': 'cordoned'},
                     'annotations': {'gpufleet.io/original-unschedulable': 'false', 'gpufleet.io/added-taints': '[]'}},
        'spec': {'unschedulable': True}}


def test_the_filters_are_exposed():
    filters = FilterModule().filters()
    assert sorted(filters) == ['k8s_node_name', 'k8s_node_plan', 'k8s_pod_plan']
    assert filters['k8s_node_name']('gpu-01') == 'gpu-01'
    plan = filters['k8s_node_plan']({'resources': [NODE]}, 'gpu-01', action='uncordon', run='r')
    assert plan['outcome'] == 'pending' and plan['release']['uncordon'] is True
    assert filters['k8s_pod_plan']({'resources': []}) == {'gpu_pods': [], 'refused': '', 'blocking': [], 'workloads': []}


def test_decision_errors_become_filter_errors_naming_the_node():
    with pytest.raises(AnsibleFilterError, match='Kubernetes has no node named gpu-02'):
        FilterModule().filters()['k8s_node_plan']({'resources': [NODE]}, 'gpu-02')
    with pytest.raises(AnsibleFilterError, match='pod document is not a Kubernetes object'):
        FilterModule().filters()['k8s_pod_plan'](42)


def test_a_name_that_is_not_a_node_name_is_a_filter_error_naming_the_variable():
    with pytest.raises(AnsibleFilterError, match=r"^inventory_hostname: 'gpu-01;x' is not a Kubernetes node name"):
        FilterModule().filters()['k8s_node_name']('gpu-01;x', field='inventory_hostname')
