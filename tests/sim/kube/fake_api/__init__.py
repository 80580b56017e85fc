# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fake Kubernetes API server of the simulated GPU fleet, one module per part (entry point: ../fake_apiserver.py).

``common``             version, simulation knobs, time, metav1.Status errors, the resources served, pod and node helpers
``selectors``          label and field selectors
``patch``              strategic merge, JSON merge and JSON patch
``schema``             unknown fields (fieldValidation)
``store``              the store: objects, resource versions, watch history, create / update / delete, the controllers' tick;
                       ``Store`` is the kinds' mixins below put together
``nodes``              Nodes: defaults, taint validation, Ready, node lifecycle and taint eviction controllers
``pods``               Pods: defaults and admission, kubelet's life cycle, the minimal scheduler
``disruption``         PodDisruptionBudgets (the disruption controller) and the eviction subresource
``workloads``          DaemonSets, ReplicaSets, StatefulSets: defaults and status
``events``             core/v1 Events (recording, validation) and their events.k8s.io/v1 form
``configmaps_leases``  ConfigMaps and Leases: decoding and validation
``tables``             server-side Table output (what kubectl get prints)
``discovery``          discovery documents and OpenAPI v3
``api``                the REST API: routing, the verbs, watch, the /_sim control endpoints
``server``             HTTP plumbing: the request handler, the threaded server and its controller loop, start / stop

Standard library only (and ``normalise`` beside the package); Python 3.8+.
"""
