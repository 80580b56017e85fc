# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet's pause requests on Medik8s NodeHealthCheck objects (pure; module gpufleet.lifecycle.nhc_pause carries them out).

A NodeHealthCheck (``remediation.medik8s.io/v1alpha1``, cluster-scoped) starts no new remediation while its
``spec.pauseRequests`` (free-form strings) is not empty; the pause is of the whole object, not of one node (NHC's
``nodehealthcheck_controller.go``). gpufleet adds one entry per node it holds, to each NodeHealthCheck whose ``spec.selector``
selects the node, and removes exactly its entries: :func:`entry` names the node, :func:`is_ours` finds them again (any run's:
a node is in one run at a time). Each change is a JSON patch that first tests the object's ``resourceVersion``, so an entry
another party added or removed meanwhile is never lost: the API refuses the patch and the module reads again.
"""

from __future__ import annotations

GROUP = 'remediation.medik8s.io'
VERSION = 'v1alpha1'
PLURAL = 'nodehealthchecks'
ENTRY_PREFIX = 'gpufleet.lifecycle: '
ENTRY_FORMAT = ENTRY_PREFIX + '%s in flight (run %s)'


class NhcError(ValueError):
    """A NodeHealthCheck or a selector that cannot be read; the message names the object and the field."""


def entry(node, run):
    """The pause request gpufleet adds for ``node`` while it is in flight."""
    return ENTRY_FORMAT % (node, run or 'none')


def is_ours(text, node):
    return isinstance(text, str) and text.startswith(ENTRY_PREFIX + node + ' in flight')


def _requirement(name, expression, labels):
    if not isinstance(expression, dict):
        raise NhcError('%s: spec.selector.matchExpressions: each entry must be a mapping, got %r' % (name, expression))
    key, operator, values = expression.get('key'), expression.get('operator'), expression.get('values') or []
    if operator == 'In':
        return key in labels and labels[key] in values
    if operator == 'NotIn':
        return key not in labels or labels[key] not in values
    if operator == 'Exists':
        return key in labels
    if operator == 'DoesNotExist':
        return key not in labels
    raise NhcError('%s: spec.selector.matchExpressions: operator %r is not In, NotIn, Exists or DoesNotExist' % (name, operator))


def selects(nhc, labels):
    """Whether the NodeHealthCheck ``nhc`` looks after a node with ``labels`` (a label selector; an empty one selects every node,
    as NHC still honours for old objects)."""
    name = ((nhc or {}).get('metadata') or {}).get('name', '?')
    selector = ((nhc or {}).get('spec') or {}).get('selector') or {}
    if not isinstance(selector, dict):
        raise NhcError('%s: spec.selector must be a label selector, got %r' % (name, selector))
    labels = labels or {}
    match = selector.get('matchLabels') or {}
    if any(labels.get(key) != value for key, value in match.items()):
        return False
    return all(_requirement(name, expression, labels) for expression in selector.get('matchExpressions') or [])


def patch(nhc, node, run, present):
    """The JSON patch that adds (``present``) or removes gpufleet's pause request for ``node`` on ``nhc``; None when there is
    nothing to change. Its first operation tests the object's resourceVersion."""
    metadata = nhc.get('metadata') or {}
    requests = (nhc.get('spec') or {}).get('pauseRequests')
    if requests is not None and not isinstance(requests, list):
        raise NhcError('%s: spec.pauseRequests must be a list, got %r' % (metadata.get('name', '?'), requests))
    requests = requests or []
    ours = [index for index, text in enumerate(requests) if is_ours(text, node)]
    guard = [{'op': 'test', 'path': '/metadata/resourceVersion', 'value': metadata.get('resourceVersion')}]
    if present:
        if ours:
            return None
        if not requests:
            return guard + [{'op': 'add', 'path': '/spec/pauseRequests', 'value': [entry(node, run)]}]
        return guard + [{'op': 'add', 'path': '/spec/pauseRequests/-', 'value': entry(node, run)}]
    if not ours:
        return None
    # From the end, so that each index still names the entry it tested.
    return guard + [{'op': 'remove', 'path': '/spec/pauseRequests/%d' % index} for index in reversed(ours)]


def changes(nhcs, node, labels, run, present):
    """[(name, patch)] for every NodeHealthCheck in ``nhcs``: a pause request added to those that select the node (``present``),
    gpufleet's requests for the node removed from all of them (not ``present``: its labels may have changed since)."""
    found = []
    for nhc in nhcs or []:
        if not isinstance(nhc, dict):
            raise NhcError('a NodeHealthCheck must be an object, got %r' % (nhc,))
        if present and not selects(nhc, labels):
            continue
        operations = patch(nhc, node, run, present)
        if operations:
            found.append((nhc['metadata']['name'], operations))
    return found
