# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""CustomResourceDefinitions (apiextensions.k8s.io/v1) and the custom resources they define.

``CustomResourcesMixin`` (part of ``Store``) keeps, per store, the resources the installed CRDs serve: one
``CustomResource`` per served version at /apis/GROUP/VERSION/[namespaces/NS/]PLURAL, with the CRD's name
(``PLURAL.GROUP``) as the storage of its objects.  A CRD is established at once (NamesAccepted, Established); deleting it
deletes its objects at once (the cleanup finalizer's work).  Custom resources are pruned, defaulted and validated against
the version's openAPIV3Schema (custom_schema.py); ``check_fields`` and ``to_table`` stand in front of the built-ins'
(unknown fields with fieldValidation, Table output from additionalPrinterColumns).

``load_crd_files(names)`` reads CRD YAML files (PyYAML, imported only then), by name from tests/sim/kube/crds/ or by path;
the state file's ``crd_files`` key installs them, ``customresourcedefinitions`` takes CRD objects and ``customresources``
objects of any installed kind (apiVersion and kind set).
"""

import copy
import json
import os
import re

from .common import (STATUS_VERBS, ApiError, BY_STORAGE, Resource, bad_request, dig, kube_version_key, rfc3339, since, single)
from .custom_schema import PRESERVE, apply_defaults, prune, validate
from .schema import check_fields as builtin_check_fields
from .tables import AGE_DESCRIPTION, NAME_COLUMN, partial_metadata
from .tables import to_table as builtin_to_table

CRD_STORAGE = 'customresourcedefinitions'
CRDS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'crds')
CR_VERBS = ['delete', 'deletecollection', 'get', 'list', 'patch', 'create', 'update', 'watch']
CLEANUP_FINALIZER = 'customresourcecleanup.apiextensions.k8s.io'
CR_PATCH_TYPES = ('application/json-patch+json', 'application/merge-patch+json', 'application/apply-patch+yaml', 'application/apply-patch+cbor')
SIMPLE_PATH = re.compile(r'^(\.[^.\[\]]+|\[\d+\])+$')
DNS_SUBDOMAIN = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')
DNS_SUBDOMAIN_MESSAGE = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and "
                         "end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
                         "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


# --------------------------------------------------------------------------------------------
# The resources a CRD defines
# --------------------------------------------------------------------------------------------

class CustomResource(Resource):
    """One version of a CRD's resource: where it is served, its schema, its printer columns."""

    custom = True

    def __init__(self, crd, version):
        spec = crd['spec']
        names = spec['names']
        subresources = {}
        if 'status' in (version.get('subresources') or {}):
            subresources['status'] = (spec['group'], version['name'], names['kind'], STATUS_VERBS)
        Resource.__init__(self, spec['group'], version['name'], names['plural'], names['kind'], spec.get('scope') == 'Namespaced',
                          names.get('shortNames') or (), names.get('categories') or (), subresources, crd['metadata']['name'], CR_VERBS)
        self.singular = names.get('singular') or names['kind'].lower()
        self.list_kind_name = names.get('listKind') or names['kind'] + 'List'
        self.served = bool(version.get('served'))
        self.schema = dig(version, 'schema', 'openAPIV3Schema') or {'type': 'object', PRESERVE: True}
        self.columns = version.get('additionalPrinterColumns') or [
            {'name': 'Age', 'type': 'date', 'description': AGE_DESCRIPTION, 'jsonPath': '.metadata.creationTimestamp'}]

    @property
    def list_kind(self):
        return self.list_kind_name

    def prune(self, obj, unknown):
        """The object without the fields the schema does not declare (their paths go to unknown)."""
        return prune(obj, self.schema, '', unknown, root=True)

    def decode(self, obj):
        """As the apiserver decodes a custom resource: pruned (silently here; check_fields warned), then defaulted; in place."""
        pruned = self.prune(obj, [])
        obj.clear()
        obj.update(pruned)
        apply_defaults(obj, self.schema)
        return obj

    def causes(self, obj):
        """Field errors: the name (a DNS subdomain, as for every custom resource) and the schema's value validations."""
        causes = []
        name = dig(obj, 'metadata', 'name') or ''
        if name and (len(name) > 253 or not DNS_SUBDOMAIN.match(name)):
            message = 'must be no more than 253 characters' if len(name) > 253 else DNS_SUBDOMAIN_MESSAGE
            causes.append(('FieldValueInvalid', 'metadata.name', 'Invalid value: "%s": %s' % (name, message)))
        return causes + validate(obj, self.schema, '', root=True)


def crd_resources(crd):
    """Every version of a CRD as a CustomResource (served or not)."""
    return [CustomResource(crd, version) for version in dig(crd, 'spec', 'versions') or []]


def storage_resource(crd):
    resources = crd_resources(crd)
    for resource, version in zip(resources, dig(crd, 'spec', 'versions') or []):
        if version.get('storage'):
            return resource
    return resources[0]


# --------------------------------------------------------------------------------------------
# CRD files
# --------------------------------------------------------------------------------------------

def crd_path(name):
    """A CRD file by name (tests/sim/kube/crds/NAME, ``.yaml`` optional) or by path."""
    for candidate in (os.path.join(CRDS_DIR, name), os.path.join(CRDS_DIR, name + '.yaml'), name):
        if os.path.isfile(candidate):
            return candidate
    raise bad_request('no CRD file %r (looked in %s)' % (name, CRDS_DIR))


def load_crd_files(names):
    """The CustomResourceDefinitions in the YAML files ``names`` (see crd_path), in order."""
    import yaml  # pylint: disable=import-outside-toplevel  # PyYAML: only CRD files need it
    crds = []
    for name in names:
        with open(crd_path(name), encoding='utf-8') as handle:
            for document in yaml.safe_load_all(handle):
                if isinstance(document, dict) and document.get('kind') == 'CustomResourceDefinition':
                    crds.append(document)
    return crds


# --------------------------------------------------------------------------------------------
# In front of the built-ins: unknown fields, Table output, patch types
# --------------------------------------------------------------------------------------------

def check_fields(resource, obj, query):
    """fieldValidation for a custom resource (structural pruning), else as for the built-ins; returns (object, Warning headers)."""
    if not getattr(resource, 'custom', False):
        return builtin_check_fields(resource, obj, query)
    unknown = []
    obj = resource.prune(obj, unknown) if isinstance(obj, dict) else obj
    mode = single(query, 'fieldValidation', 'Warn')
    if unknown and mode == 'Strict':
        raise bad_request('strict decoding error: ' + ', '.join('unknown field "%s"' % field for field in unknown))
    if unknown and mode != 'Ignore':
        return obj, ['299 - "unknown field \\"%s\\""' % field for field in unknown]
    return obj, []


def check_patch_type(resource, content_type):
    """Custom resources take JSON and merge patches only: a strategic merge patch is 415, as kube-apiserver answers."""
    if getattr(resource, 'custom', False) and content_type not in CR_PATCH_TYPES[:2]:
        raise ApiError(415, 'UnsupportedMediaType', 'the body of the request was in an unknown format - accepted media types include: '
                       + ', '.join(CR_PATCH_TYPES))


def json_path(obj, path):
    """A simple JSONPath (.a.b[0].c) of a printer column; None where it finds nothing or is not simple."""
    if not SIMPLE_PATH.match(path or ''):
        return None
    value = obj
    for name, index in re.findall(r'\.([^.\[\]]+)|\[(\d+)\]', path):
        if name and isinstance(value, dict) and name in value:
            value = value[name]
        elif index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            return None
    return value


def cell(column, value, now):
    """tableconvertor's cell for a printer column's value."""
    kind = column.get('type')
    if value is None:
        return None
    if kind == 'string':
        if isinstance(value, bool):
            return 'true' if value else 'false'
        if isinstance(value, (dict, list)):
            return json.dumps(value, separators=(',', ':'))
        return str(value)
    if kind == 'integer' and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if kind == 'number' and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == 'boolean' and isinstance(value, bool):
        return value
    if kind == 'date' and isinstance(value, str):
        text = since(value, now)
        return '<invalid>' if text == '<unknown>' else text
    return None


def to_table(resource, objects, include, now, list_meta=None):
    """Table output: NAME and the CRD's additionalPrinterColumns (default: Age) for custom resources, else the built-ins'."""
    if not getattr(resource, 'custom', False):
        return builtin_to_table(resource, objects, include, now, list_meta)
    columns = [NAME_COLUMN]
    for column in resource.columns:
        columns.append({'name': column['name'], 'type': column.get('type', 'string'), 'format': column.get('format', ''),
                        'description': column.get('description') or 'Custom resource definition column (in JSONPath format): %s'
                        % column.get('jsonPath'), 'priority': column.get('priority', 0)})
    rows = []
    for obj in objects:
        row = {'cells': [obj['metadata']['name']] + [cell(column, json_path(obj, column.get('jsonPath')), now) for column in resource.columns]}
        if include == 'Object':
            row['object'] = obj
        elif include != 'None':
            row['object'] = partial_metadata(obj)
        rows.append(row)
    return {'kind': 'Table', 'apiVersion': 'meta.k8s.io/v1', 'metadata': list_meta or {}, 'columnDefinitions': columns, 'rows': rows}


# --------------------------------------------------------------------------------------------
# The store's part
# --------------------------------------------------------------------------------------------

class CustomResourcesMixin:
    """CRDs and their objects in the store: the resources they serve, CRD defaults and validation, state-file keys."""

    def _init_custom(self):
        self.custom_storages = {}  # CRD name -> the storage version's CustomResource
        self.custom_served = {}  # (group, version, plural) -> CustomResource

    def resource_of(self, storage, api_version=None):
        """The Resource of a storage: a built-in's, or for a CRD's objects the version ``api_version`` names (else its storage version)."""
        resource = BY_STORAGE.get(storage)
        if resource is not None:
            return resource
        stored = self.custom_storages[storage]
        for served in self.custom_served.values():
            if served.storage == storage and served.api_version == api_version:
                return served
        return stored

    def resource_at(self, group, version, plural, builtin):
        """The resource served at /apis/GROUP/VERSION/PLURAL (``builtin``: the built-ins by path), or None."""
        return builtin.get((group, version, plural)) or self.custom_served.get((group, version, plural))

    def served_custom(self):
        return sorted(self.custom_served.values(), key=lambda r: (r.group, kube_version_key(r.version), r.plural))

    def custom_groups(self):
        """(group, version) the CRDs serve: groups by name, versions by Kubernetes' version priority."""
        pairs = []
        for resource in self.served_custom():
            if (resource.group, resource.version) not in pairs:
                pairs.append((resource.group, resource.version))
        return pairs

    def custom_storage_of(self, obj):
        """The storage of an object of an installed CRD's kind (apiVersion and kind), or None."""
        group = (obj.get('apiVersion') or '').rpartition('/')[0]
        for storage, resource in self.custom_storages.items():
            if resource.group == group and resource.kind == obj.get('kind'):
                return storage
        return None

    def sync_custom(self):
        """Serve what the CRDs now define; the objects of a CRD that is gone are deleted."""
        storages, served = {}, {}
        for crd in self.items(CRD_STORAGE):
            storages[crd['metadata']['name']] = storage_resource(crd)
            for resource in crd_resources(crd):
                if resource.served:
                    served[(resource.group, resource.version, resource.plural)] = resource
        for storage in [name for name in self.custom_storages if name not in storages]:
            for obj in self.items(storage):
                self.remove(storage, obj)
            del self.objects[storage]
        for storage in storages:
            self.objects.setdefault(storage, {})
        self.custom_storages = storages
        self.custom_served = served

    # ---------------------------------------------------------------- CRDs

    def _default_customresourcedefinitions(self, obj, admit, now):
        spec = obj.setdefault('spec', {})
        names = spec.setdefault('names', {})
        if names.get('kind'):
            names.setdefault('singular', names['kind'].lower())
            names.setdefault('listKind', names['kind'] + 'List')
        spec.setdefault('conversion', {'strategy': 'None'})
        when = rfc3339(now)
        stored = [version.get('name') for version in spec.get('versions') or [] if isinstance(version, dict) and version.get('storage')]
        obj['status'] = {'acceptedNames': copy.deepcopy(names), 'storedVersions': stored, 'conditions': [
            {'type': 'NamesAccepted', 'status': 'True', 'lastTransitionTime': when, 'reason': 'NoConflicts', 'message': 'no conflicts found'},
            {'type': 'Established', 'status': 'True', 'lastTransitionTime': when, 'reason': 'InitialNamesAccepted',
             'message': 'the initial names have been accepted'}]}

    def _validate_customresourcedefinitions(self, obj, old, causes):
        """The checks of apiextensions' ValidateCustomResourceDefinition that a hand-written CRD most often fails."""
        spec = obj.get('spec') or {}
        if old is not None and spec.get('scope') != dig(old, 'spec', 'scope'):
            causes.append(('FieldValueInvalid', 'spec.scope', 'Invalid value: "%s": field is immutable' % spec.get('scope')))
        names = spec.get('names') or {}
        group = spec.get('group') or ''
        for field, value in (('spec.group', group), ('spec.names.plural', names.get('plural')), ('spec.names.kind', names.get('kind'))):
            if not value:
                causes.append(('FieldValueRequired', field, 'Required value'))
        if group and '.' not in group:
            causes.append(('FieldValueInvalid', 'spec.group', 'Invalid value: "%s": should be a domain with at least one dot' % group))
        if obj['metadata']['name'] != '%s.%s' % (names.get('plural'), group):
            causes.append(('FieldValueInvalid', 'metadata.name', 'Invalid value: "%s": must be spec.names.plural+"."+spec.group'
                           % obj['metadata']['name']))
        if spec.get('scope') not in ('Cluster', 'Namespaced'):
            causes.append(('FieldValueNotSupported', 'spec.scope', 'Unsupported value: "%s": supported values: "Cluster", "Namespaced"'
                           % (spec.get('scope') or '')))
        self._validate_crd_versions(spec.get('versions'), causes)

    @staticmethod
    def _validate_crd_versions(versions, causes):
        if not isinstance(versions, list) or not versions:
            causes.append(('FieldValueRequired', 'spec.versions', 'Required value: must have exactly one version marked as storage version'))
            return
        if sum(1 for version in versions if isinstance(version, dict) and version.get('storage')) != 1:
            causes.append(('FieldValueInvalid', 'spec.versions', 'Invalid value: %d versions: must have exactly one version marked as storage '
                           'version' % len(versions)))
        for index, version in enumerate(versions):
            path = 'spec.versions[%d]' % index
            if not isinstance(version, dict) or not version.get('name'):
                causes.append(('FieldValueRequired', path + '.name', 'Required value'))
            elif not isinstance(dig(version, 'schema', 'openAPIV3Schema'), dict):
                causes.append(('FieldValueRequired', path + '.schema.openAPIV3Schema', 'Required value: schemas are required'))

    def delete_crd(self, crd, dry_run):
        """Deleting a CRD answers the CRD being deleted; its cleanup (the objects, then the CRD) happens at once here."""
        answer = copy.deepcopy(crd)
        answer['metadata']['deletionTimestamp'] = rfc3339(self.now())
        answer['metadata']['finalizers'] = [CLEANUP_FINALIZER]
        answer['metadata']['generation'] = answer['metadata'].get('generation', 1) + 1
        if not dry_run:
            self.remove(CRD_STORAGE, crd)
        return answer

    # ---------------------------------------------------------------- state file

    def load_custom(self, state):
        """The state file's ``crd_files`` (then the CRDs are there) and ``customresources``."""
        for crd in load_crd_files(state.get('crd_files') or []):
            self.add(CRD_STORAGE, crd)
        for obj in state.get('customresources') or []:
            obj = obj or {}
            storage = self.custom_storage_of(obj)
            if storage is None:
                raise bad_request('no CustomResourceDefinition serves apiVersion %r kind %r' % (obj.get('apiVersion'), obj.get('kind')))
            self.add(storage, copy.deepcopy(obj))

    def dump_custom(self):
        """Every custom resource, for the state file's ``customresources``."""
        objects = []
        for storage in sorted(self.custom_storages):
            objects.extend(copy.deepcopy(obj) for obj in self.items(storage))
        return objects
