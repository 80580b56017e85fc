#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: nhc_pause
short_description: Pause Medik8s NodeHealthCheck remediation while gpufleet holds a node
version_added: 0.1.0
description:
  - "With O(state=present), adds a pause request for O(node) (C(gpufleet.lifecycle: NODE in flight (run RUN))) to
    C(spec.pauseRequests) of every Medik8s C(NodeHealthCheck) (C(remediation.medik8s.io/v1alpha1)) whose C(spec.selector)
    selects the node; NodeHealthCheck starts no new remediation while it has a pause request (remediations in progress go on)."
  - With O(state=absent), removes gpufleet's pause requests for O(node) from every NodeHealthCheck, whichever run added them;
    the requests of others are never touched.
  - A pause request pauses the whole NodeHealthCheck, not only this node (NodeHealthCheck's own design); the per-node
    alternative is the label C(remediation.medik8s.io/exclude-from-remediation=true) (NodeHealthCheck 0.8 and later), which
    P(gpufleet.lifecycle.node_drain#role) sets with the hand-off C(nhc).
  - Each change is a JSON patch that tests the object's C(resourceVersion) first; when another party changed the object
    meanwhile the module reads it again (at most five times).
  - A cluster without the NodeHealthCheck API is not an error - RV(api_found=false), nothing changed.
  - Runs where the Kubernetes API is reachable (the role delegates it, like its other Kubernetes tasks).
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
    description: A node's pause request is added once and removed once; run again, nothing changes.
options:
  node:
    description: The Kubernetes node's name.
    type: str
    required: true
  state:
    description: C(present) pauses the NodeHealthChecks that select the node, C(absent) takes gpufleet's pause requests back.
    type: str
    choices: [present, absent]
    default: present
  run:
    description: The run id named in the pause request.
    type: str
    default: ''
  kubeconfig:
    description: The kubeconfig file; the client's default (C(KUBECONFIG), C(~/.kube/config)) when empty.
    type: path
  context:
    description: The kubeconfig context; its current context when empty.
    type: str
  timeout:
    description: Seconds each API request may take.
    type: int
    default: 60
requirements:
  - kubernetes (the Python client)
seealso:
  - module: gpufleet.lifecycle.slurm_node
    description: The Slurm side of node_drain (Slurm has no such owners; its drain reason is the mark).
'''

EXAMPLES = r'''
- name: Pause NodeHealthCheck remediation while gpu-01 is upgraded
  gpufleet.lifecycle.nhc_pause:
    node: gpu-01
    run: 20261127T100000Z

- name: Take the pause back
  gpufleet.lifecycle.nhc_pause:
    node: gpu-01
    state: absent
'''

RETURN = r'''
api_found:
  description: Whether the cluster serves the NodeHealthCheck API.
  returned: always
  type: bool
paused:
  description: The NodeHealthChecks a pause request for the node was added to.
  returned: always
  type: list
  elements: str
  sample: [nhc-worker-default]
released:
  description: The NodeHealthChecks gpufleet's pause requests for the node were removed from.
  returned: always
  type: list
  elements: str
selecting:
  description: The NodeHealthChecks whose selector selects the node (O(state=present)).
  returned: always
  type: list
  elements: str
'''

import json
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _nhc

try:
    from kubernetes import client as kube_client
    from kubernetes import config as kube_config
    from kubernetes.client.rest import ApiException
except ImportError:
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()
    ApiException = Exception
else:
    KUBERNETES_IMPORT_ERROR = None

ATTEMPTS = 5
JSON_PATCH = 'application/json-patch+json'


def json_patch(call, *arguments, **settings):
    """``call`` (a client's patch method) with a JSON patch: the client generated since version 33 sends a merge patch
    unless told (``_content_type``); the earlier ones choose the JSON patch for a list body themselves."""
    try:
        return call(*arguments, _content_type=JSON_PATCH, **settings)
    except TypeError:
        return call(*arguments, **settings)


def failure_text(exc):
    """An API error in one line: its status, reason and the Status message (no response headers)."""
    status, reason, body = getattr(exc, 'status', None), getattr(exc, 'reason', None), getattr(exc, 'body', None)
    if status is None:
        return to_native(exc)
    message = body
    try:
        message = json.loads(body).get('message') or body
    except (TypeError, ValueError, AttributeError):
        pass
    return '%s %s: %s' % (status, reason or '', to_native(message or ''))


def _items(custom, timeout):
    """The NodeHealthChecks, or None when the API does not serve them."""
    try:
        answer = custom.list_cluster_custom_object(_nhc.GROUP, _nhc.VERSION, _nhc.PLURAL, _request_timeout=timeout)
    except ApiException as exc:
        if getattr(exc, 'status', None) == 404:
            return None
        raise
    return answer.get('items') or []


def _labels(core, node, timeout, present):
    try:
        return core.read_node(node, _request_timeout=timeout).metadata.labels or {}
    except ApiException as exc:
        if getattr(exc, 'status', None) == 404 and not present:
            return {}
        raise


def run(module, custom, core):
    params = module.params
    node, present, timeout = params['node'], params['state'] == 'present', params['timeout']
    result = dict(changed=False, api_found=True, paused=[], released=[], selecting=[])
    labels = _labels(core, node, timeout, present)
    for _attempt in range(ATTEMPTS):
        items = _items(custom, timeout)
        if items is None:
            return dict(result, api_found=False)
        result['selecting'] = sorted(item['metadata']['name'] for item in items if present and _nhc.selects(item, labels))
        todo = _nhc.changes(items, node, labels, params['run'], present)
        if not todo:
            return result
        moved = False
        for name, operations in todo:
            if not module.check_mode:
                try:
                    json_patch(custom.patch_cluster_custom_object, _nhc.GROUP, _nhc.VERSION, _nhc.PLURAL, name, operations, _request_timeout=timeout)
                except ApiException as exc:
                    # 422: the resourceVersion test failed (changed meanwhile), 409: a conflict; read again.
                    if getattr(exc, 'status', None) in (409, 422):
                        moved = True
                        continue
                    raise
            result['paused' if present else 'released'].append(name)
            result['changed'] = True
        if not moved or module.check_mode:
            return result
    module.fail_json(msg='node %s: the NodeHealthChecks kept changing; gpufleet\'s pause requests are not all %s after %d reads'
                     % (node, 'added' if present else 'removed', ATTEMPTS), **result)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type='str', required=True),
            state=dict(type='str', default='present', choices=['present', 'absent']),
            run=dict(type='str', default=''),
            kubeconfig=dict(type='path'),
            context=dict(type='str'),
            timeout=dict(type='int', default=60),
        ),
        supports_check_mode=True,
    )
    if KUBERNETES_IMPORT_ERROR:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=KUBERNETES_IMPORT_ERROR)
    try:
        api = kube_config.new_client_from_config(config_file=module.params['kubeconfig'] or None, context=module.params['context'] or None)
        result = run(module, kube_client.CustomObjectsApi(api), kube_client.CoreV1Api(api))
    except Exception as exc:  # pylint: disable=broad-except
        # The client's configuration errors, the API's answers, an unreadable NodeHealthCheck: one failure naming the node.
        module.fail_json(msg='node %s: NodeHealthCheck pause: %s' % (module.params['node'], failure_text(exc)[:1000]))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
