# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PodDisruptionBudgets and the eviction subresource: the disruption controller and pkg/registry/core/pod/storage/eviction.go."""

import copy

from .common import (ApiError, BY_PATH, DISRUPTED_POD_TIMEOUT, bad_request, conflict, controller_of, details_for, dig, not_found, parse_time,
                     pod_ready, rfc3339, scaled_value)
from .selectors import selector_matches


class DisruptionMixin:
    """The store's budgets and evictions."""

    @staticmethod
    def _validate_poddisruptionbudgets(obj, causes):
        """minAvailable or maxUnavailable, each an int or a percentage."""
        spec = obj.get('spec') or {}
        if spec.get('minAvailable') is not None and spec.get('maxUnavailable') is not None:
            causes.append(('FieldValueInvalid', 'spec', 'Invalid value: ...: minAvailable and maxUnavailable cannot be both set'))
        for field in ('minAvailable', 'maxUnavailable'):
            if spec.get(field) is not None:
                try:
                    scaled_value(spec[field], 100, True)
                except ValueError as error:
                    causes.append(('FieldValueInvalid', 'spec.' + field, str(error)))

    def expected_scale(self, pods):
        """The disruption controller's getExpectedScale."""
        scales = {}
        for pod in pods:
            reference = controller_of(pod)
            if reference is None:
                continue
            if reference.get('uid') in scales:
                continue
            storage = {'ReplicaSet': 'replicasets', 'StatefulSet': 'statefulsets'}.get(reference.get('kind'))
            owner = self.get(storage, pod['metadata']['namespace'], reference.get('name')) if storage else None
            if owner is None or owner['metadata'].get('uid') != reference.get('uid'):
                raise ValueError('found no controllers for pod "%s"' % pod['metadata']['name'])
            scales[reference['uid']] = dig(owner, 'spec', 'replicas') or 0
        return sum(scales.values())

    def pdb_pods(self, pdb):
        selector = dig(pdb, 'spec', 'selector')
        return [pod for pod in self.items('pods', pdb['metadata']['namespace']) if selector_matches(selector, dig(pod, 'metadata', 'labels'))]

    def sync_pdb(self, pdb):
        """The disruption controller: status.currentHealthy, desiredHealthy, expectedPods, disruptionsAllowed."""
        now = self.now()
        spec = pdb.get('spec') or {}
        pods = self.pdb_pods(pdb)
        old_status = pdb.get('status') or {}
        generation = pdb['metadata'].get('generation', 1)
        error = None
        expected, desired = 0, 0
        try:
            if spec.get('maxUnavailable') is not None:
                expected = self.expected_scale(pods)
                desired = max(expected - scaled_value(spec['maxUnavailable'], expected, True), 0)
            elif spec.get('minAvailable') is not None:
                if isinstance(spec['minAvailable'], int) and not isinstance(spec['minAvailable'], bool):
                    desired = spec['minAvailable']
                    expected = len(pods)
                else:
                    expected = self.expected_scale(pods)
                    desired = scaled_value(spec['minAvailable'], expected, True)
        except ValueError as exc:
            error = str(exc)
        if error is not None:
            status = copy.deepcopy(old_status)
            status['disruptionsAllowed'] = 0
            status.setdefault('currentHealthy', 0)
            status.setdefault('desiredHealthy', 0)
            status.setdefault('expectedPods', 0)
            self._set_condition(status, 'False', 'SyncFailed', error, generation, now)
        else:
            live = dict((pod['metadata']['name'], pod) for pod in pods if not dig(pod, 'metadata', 'deletionTimestamp'))
            disrupted = {}
            for name, stamp in (old_status.get('disruptedPods') or {}).items():
                when = parse_time(stamp) or 0
                if name in live and when + DISRUPTED_POD_TIMEOUT > now:
                    disrupted[name] = stamp
            healthy = sum(1 for name, pod in live.items() if name not in disrupted and pod_ready(pod))
            allowed = healthy - desired
            if expected <= 0 or allowed <= 0:
                allowed = 0
            status = {'observedGeneration': generation, 'disruptionsAllowed': allowed, 'currentHealthy': healthy,
                      'desiredHealthy': desired, 'expectedPods': expected}
            if disrupted:
                status['disruptedPods'] = disrupted
            status['conditions'] = copy.deepcopy(old_status.get('conditions') or [])
            if allowed > 0:
                self._set_condition(status, 'True', 'SufficientPods', '', generation, now)
            else:
                self._set_condition(status, 'False', 'InsufficientPods', '', generation, now)
        if status != old_status:
            new = copy.deepcopy(pdb)
            new['status'] = status
            return self.put('poddisruptionbudgets', new, old=copy.deepcopy(pdb))
        return pdb

    @staticmethod
    def _set_condition(status, state, reason, message, generation, now):
        conditions = status.setdefault('conditions', [])
        for condition in conditions:
            if condition.get('type') == 'DisruptionAllowed':
                if condition.get('status') != state:
                    condition['lastTransitionTime'] = rfc3339(now)
                condition.update({'status': state, 'reason': reason, 'message': message, 'observedGeneration': generation})
                return
        conditions.append({'type': 'DisruptionAllowed', 'status': state, 'observedGeneration': generation,
                           'lastTransitionTime': rfc3339(now), 'reason': reason, 'message': message})

    # ---------------------------------------------------------------- eviction (pkg/registry/core/pod/storage/eviction.go)

    def evict(self, namespace, name, eviction, dry_run=False):
        resource = BY_PATH[('', 'v1', 'pods')]
        if not isinstance(eviction, dict) or eviction.get('kind') not in (None, 'Eviction'):
            raise bad_request('not an Eviction')
        if dig(eviction, 'metadata', 'name') != name:
            raise bad_request('name in URL does not match name in Eviction object')
        options = eviction.get('deleteOptions') or {}
        dry_run = dry_run or bool(options.get('dryRun'))
        pod = self.get('pods', namespace, name)
        if pod is None:
            raise not_found(resource, name)
        preconditions = options.get('preconditions') or {}
        if preconditions.get('uid') and preconditions['uid'] != pod['metadata'].get('uid'):
            raise conflict(resource, name, 'Precondition failed: UID in precondition: %s, UID in object meta: %s'
                           % (preconditions['uid'], pod['metadata'].get('uid')))
        if preconditions.get('resourceVersion') and preconditions['resourceVersion'] != pod['metadata'].get('resourceVersion'):
            raise conflict(resource, name, 'Precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s'
                           % (preconditions['resourceVersion'], pod['metadata'].get('resourceVersion')))
        grace = options.get('gracePeriodSeconds')
        phase = dig(pod, 'status', 'phase')
        # canIgnorePDB: terminal, pending, or already terminating pods are deleted without looking at budgets.
        if phase in ('Succeeded', 'Failed', 'Pending') or dig(pod, 'metadata', 'deletionTimestamp'):
            if not dry_run and not dig(pod, 'metadata', 'deletionTimestamp'):
                self.delete(resource, pod, grace)
            return self._evicted()
        pdbs = [pdb for pdb in self.items('poddisruptionbudgets', namespace) if selector_matches(dig(pdb, 'spec', 'selector'), dig(pod, 'metadata', 'labels'))]
        if len(pdbs) > 1:
            return 500, {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure',
                         'message': 'This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.', 'code': 500}
        if pdbs:
            pdb = self.sync_pdb(pdbs[0])
            status = pdb.get('status') or {}
            policy = dig(pdb, 'spec', 'unhealthyPodEvictionPolicy') or 'IfHealthyBudget'
            skip_budget = False
            if not pod_ready(pod):
                if policy == 'AlwaysAllow':
                    skip_budget = True
                elif status.get('currentHealthy', 0) >= status.get('desiredHealthy', 0) and status.get('desiredHealthy', 0) > 0:
                    skip_budget = True
            if not skip_budget:
                self._check_and_decrement(pdb, name, dry_run)
        if not dry_run:
            self._disruption_target(pod, 'EvictionByEvictionAPI', 'Eviction API: evicting')
            self.delete(resource, self.get('pods', namespace, name), grace)
        return self._evicted()

    @staticmethod
    def _evicted():
        return 201, {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Success', 'code': 201}

    def _check_and_decrement(self, pdb, pod_name, dry_run):
        status = pdb.get('status') or {}
        pdb_name = pdb['metadata']['name']
        pdb_resource = BY_PATH[('policy', 'v1', 'poddisruptionbudgets')]
        if status.get('observedGeneration', 0) < pdb['metadata'].get('generation', 1):
            raise ApiError(429, 'TooManyRequests', "Cannot evict pod as it would violate the pod's disruption budget.",
                           {'causes': [{'reason': 'DisruptionBudget', 'message': 'The disruption budget %s is still being processed by the server.'
                                        % pdb_name}], 'retryAfterSeconds': 10}, headers={'Retry-After': '10'})
        if status.get('disruptionsAllowed', 0) < 0:
            raise ApiError(403, 'Forbidden', 'poddisruptionbudgets.policy "%s" is forbidden: pdb disruptions allowed is negative' % pdb_name,
                           details_for(pdb_resource, pdb_name))
        if len(status.get('disruptedPods') or {}) > 2000:
            raise ApiError(403, 'Forbidden', 'poddisruptionbudgets.policy "%s" is forbidden: DisruptedPods map too big - too many evictions not '
                           'confirmed by PDB controller' % pdb_name, details_for(pdb_resource, pdb_name))
        if status.get('disruptionsAllowed', 0) == 0:
            raise ApiError(429, 'TooManyRequests', "Cannot evict pod as it would violate the pod's disruption budget.",
                           {'causes': [{'reason': 'DisruptionBudget', 'message': 'The disruption budget %s needs %d healthy pods and has %d currently'
                                        % (pdb_name, status.get('desiredHealthy', 0), status.get('currentHealthy', 0))}]})
        if dry_run:
            return
        new = copy.deepcopy(pdb)
        new_status = new.setdefault('status', {})
        new_status['disruptionsAllowed'] = new_status.get('disruptionsAllowed', 0) - 1
        if new_status['disruptionsAllowed'] == 0:
            self._set_condition(new_status, 'False', 'InsufficientPods', '', new_status.get('observedGeneration', 1), self.now())
        new_status.setdefault('disruptedPods', {})[pod_name] = rfc3339(self.now())
        self.put('poddisruptionbudgets', new, old=copy.deepcopy(pdb))

    def _disruption_target(self, pod, reason, message):
        new = copy.deepcopy(pod)
        conditions = new.setdefault('status', {}).setdefault('conditions', [])
        conditions[:] = [c for c in conditions if c.get('type') != 'DisruptionTarget']
        conditions.append({'type': 'DisruptionTarget', 'status': 'True', 'lastProbeTime': None,
                           'lastTransitionTime': rfc3339(self.now()), 'reason': reason, 'message': message})
        self.put('pods', new, old=copy.deepcopy(pod))
