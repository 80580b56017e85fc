# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters over plugin_utils/_kube.py: what node_drain decides about a Kubernetes node and its pods.

Documented beside this file: k8s_node_name.yml, k8s_node_plan.yml, k8s_pod_plan.yml.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._kube import KubeError, check_node_name, node_plan, pod_plan


def _decided(decide, *arguments, **settings):
    try:
        return decide(*arguments, **settings)
    except KubeError as error:
        raise AnsibleFilterError(str(error))


def k8s_node_name(name, field='node_drain_node_name'):
    """``name`` when it can be a Kubernetes node's name, else a failure naming ``field`` (see k8s_node_name.yml)."""
    return _decided(check_node_name, name, field)


def k8s_node_plan(document, name, **settings):
    """Everything node_drain decides about one node (see k8s_node_plan.yml)."""
    return _decided(node_plan, document, name, **settings)


def k8s_pod_plan(document, **settings):
    """GPU pods to delete, refusals and blocking pods (see k8s_pod_plan.yml)."""
    return _decided(pod_plan, document, **settings)


class FilterModule:
    """gpufleet.lifecycle Kubernetes filters."""

    def filters(self):
        return {'k8s_node_name': k8s_node_name, 'k8s_node_plan': k8s_node_plan, 'k8s_pod_plan': k8s_pod_plan}
