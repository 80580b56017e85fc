# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Events: core/v1 Events the simulated components record, and their events.k8s.io/v1 form."""

import copy
import random

from .common import dig, invalid, rfc3339


class EventsMixin:
    """The store's events: defaults, validation, and recording them as client-go's EventRecorder does."""

    def _default_events(self, obj, admit, now):
        obj.setdefault('involvedObject', {})
        obj.setdefault('reportingComponent', '')
        obj.setdefault('reportingInstance', '')
        obj.setdefault('source', {})
        if 'eventTime' not in obj:
            obj['eventTime'] = None
        if 'firstTimestamp' not in obj:
            obj['firstTimestamp'] = None
        if 'lastTimestamp' not in obj:
            obj['lastTimestamp'] = None

    @staticmethod
    def _validate_events(obj, causes):
        """involvedObject.namespace matches the event's, a known type."""
        involved = obj.get('involvedObject') or {}
        namespace = obj['metadata'].get('namespace')
        if not involved.get('namespace'):
            if namespace not in ('', 'default'):
                causes.append(('FieldValueInvalid', 'involvedObject.namespace', 'Invalid value: "": does not match event.namespace'))
        elif involved.get('namespace') != namespace:
            causes.append(('FieldValueInvalid', 'involvedObject.namespace',
                           'Invalid value: "%s": does not match event.namespace' % involved.get('namespace')))
        if obj.get('type') not in (None, '', 'Normal', 'Warning'):
            causes.append(('FieldValueNotSupported', 'type', 'Unsupported value: "%s": supported values: "Normal", "Warning"' % obj.get('type')))

    # ---------------------------------------------------------------- events

    def emit(self, involved, reason, message, kind='Normal', component='kubelet', host=None, field_path=None):
        """Record a core/v1 Event the way client-go's EventRecorder does."""
        now = self.now()
        meta = involved['metadata']
        namespace = meta.get('namespace') or 'default'
        reference = {'kind': involved.get('kind'), 'name': meta['name'], 'uid': meta.get('uid'), 'apiVersion': involved.get('apiVersion'),
                     'resourceVersion': meta.get('resourceVersion')}
        if meta.get('namespace'):
            reference['namespace'] = meta['namespace']
        if involved.get('kind') == 'Node' and component == 'kubelet':
            reference = {'kind': 'Node', 'name': meta['name'], 'uid': meta['name']}  # kubelet's nodeRef uses the name as UID
        if field_path:
            reference['fieldPath'] = field_path
        source = {'component': component}
        if host:
            source['host'] = host
        event = {'metadata': {'name': '%s.%x' % (meta['name'], int(now * 1e9) + random.randint(0, 999)), 'namespace': namespace},
                 'involvedObject': reference, 'reason': reason, 'message': message, 'source': source,
                 'firstTimestamp': rfc3339(now), 'lastTimestamp': rfc3339(now), 'count': 1, 'type': kind,
                 'eventTime': None, 'reportingComponent': component, 'reportingInstance': host or ''}
        if self.get('namespaces', '', namespace) is None:
            return None
        return self.create('events', event, admit=False)


# --------------------------------------------------------------------------------------------
# Events: core/v1 <-> events.k8s.io/v1
# --------------------------------------------------------------------------------------------

def event_to_v1(event):
    """A stored core/v1 Event as events.k8s.io/v1."""
    out = {'kind': 'Event', 'apiVersion': 'events.k8s.io/v1', 'metadata': copy.deepcopy(event['metadata']),
           'eventTime': event.get('eventTime')}
    for source, target in (('series', 'series'), ('reportingComponent', 'reportingController'), ('reportingInstance', 'reportingInstance'),
                           ('action', 'action'), ('reason', 'reason'), ('involvedObject', 'regarding'), ('related', 'related'),
                           ('message', 'note'), ('type', 'type'), ('source', 'deprecatedSource'), ('firstTimestamp', 'deprecatedFirstTimestamp'),
                           ('lastTimestamp', 'deprecatedLastTimestamp'), ('count', 'deprecatedCount')):
        value = event.get(source)
        if value not in (None, '', {}, 0) or target in ('regarding', 'deprecatedSource'):
            out[target] = copy.deepcopy(value)
    if 'series' in out and isinstance(out['series'], dict):
        out['series'] = {'count': out['series'].get('count', 0), 'lastObservedTime': out['series'].get('lastObservedTime')}
    if 'deprecatedFirstTimestamp' not in out:
        out['deprecatedFirstTimestamp'] = None
    if 'deprecatedLastTimestamp' not in out:
        out['deprecatedLastTimestamp'] = None
    return out


def event_from_v1(event):
    """An events.k8s.io/v1 Event as core/v1, for storage."""
    out = {'kind': 'Event', 'apiVersion': 'v1', 'metadata': copy.deepcopy(event.get('metadata') or {})}
    for source, target in (('series', 'series'), ('reportingController', 'reportingComponent'), ('reportingInstance', 'reportingInstance'),
                           ('action', 'action'), ('reason', 'reason'), ('regarding', 'involvedObject'), ('related', 'related'),
                           ('note', 'message'), ('type', 'type'), ('deprecatedSource', 'source'), ('deprecatedFirstTimestamp', 'firstTimestamp'),
                           ('deprecatedLastTimestamp', 'lastTimestamp'), ('deprecatedCount', 'count'), ('eventTime', 'eventTime')):
        if source in event:
            out[target] = copy.deepcopy(event[source])
    return out


def validate_events_v1(resource, event):
    causes = []
    name = dig(event, 'metadata', 'name') or ''
    for field in ('eventTime', 'reportingController', 'reportingInstance', 'action', 'reason'):
        if not event.get(field):
            causes.append(('FieldValueRequired', field, 'Required value'))
    if event.get('type') not in ('Normal', 'Warning'):
        causes.append(('FieldValueNotSupported', 'type', 'Unsupported value: "%s": supported values: "Normal", "Warning"' % (event.get('type') or '')))
    if len(event.get('note') or '') > 1024:
        causes.append(('FieldValueTooLong', 'note', 'Too long: may not be more than 1024 bytes'))
    if causes:
        raise invalid(resource, name, causes)
