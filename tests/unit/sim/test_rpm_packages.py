# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The dummy NVIDIA rpms of the rocky9 nodes (tests/sim/packages/rpm_catalog.py, build_rpm_repo.py), read back with real rpm.

The repository is built once per module into a temporary folder with rpmbuild, createrepo_c and modifyrepo_c.  Real dnf
runs against it on the simulated rocky9 node (tests/integration/test_gpu_stack.py, the rocky-01 cases).
"""

import gzip
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.lifecycle.tests.needs import require_tool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PACKAGES_DIR = os.path.join(ROOT, 'tests', 'sim', 'packages')
sys.path.insert(0, PACKAGES_DIR)


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(PACKAGES_DIR, name + '.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILD = _load('build_rpm_repo')
CATALOG = BUILD.rpm_catalog
RECORDS = CATALOG.packages()


@pytest.fixture(scope='module')
def repo(tmp_path_factory):
    for tool in ('rpmbuild', 'createrepo_c', 'modifyrepo_c'):
        require_tool(tool, 'apt-get install rpm createrepo-c (hacking/system_tools.sh does it as root)')
    return BUILD.build(str(tmp_path_factory.mktemp('rpm-repo')))


def query(repo, record, query_format):
    path = os.path.join(repo, CATALOG.rpm_filename(record))
    process = subprocess.run(['rpm', '-qp', '--qf', query_format, path], capture_output=True, text=True, check=False)
    assert process.returncode == 0, process.stderr
    return process.stdout


def find(name, version):
    return [record for record in RECORDS if record['name'] == name and record['version'] == version][0]


def test_every_rpm_built_with_its_nevra(repo):
    built = sorted(name for name in os.listdir(repo) if name.endswith('.rpm'))
    assert built == sorted(CATALOG.rpm_filename(record) for record in RECORDS)
    for record in RECORDS:
        assert query(repo, record, '%{NAME}-%{EPOCHNUM}:%{VERSION}-%{RELEASE}.%{ARCH}') == CATALOG.nevra(record)


@pytest.mark.parametrize('name, version, evr', [
    ('nvidia-driver', '580.65.06', '3:580.65.06-1.el9'),
    ('kmod-nvidia-open-dkms', '550.127.05', '3:550.127.05-1.el9'),
    ('nvidia-fabric-manager', '580.65.06', '580.65.06-1'),
    ('nvidia-container-toolkit', '1.17.0', '1.17.0-1'),
    ('datacenter-gpu-manager', '3.3.9', '1:3.3.9-1'),
    ('datacenter-gpu-manager-4-core', '4.1.0', '1:4.1.0-1'),
    ('cuda-toolkit-13-0', '13.0.2', '13.0.2-1'),
    ('kernel', '5.14.0', '5.14.0-427.13.1.el9_4'),
])
def test_nvidia_rhel_names_and_epochs(name, version, evr):
    assert CATALOG.evr(find(name, version)) == evr


def test_dependencies_as_nvidia_declares_them(repo):
    driver = query(repo, find('nvidia-driver', '580.65.06'), '[%{REQUIRENEVRS}\n]').splitlines()
    assert 'nvidia-kmod = 3:580.65.06-1.el9' in driver and 'nvidia-driver-libs = 3:580.65.06-1.el9' in driver
    kmod = find('kmod-nvidia-latest-dkms', '580.65.06')
    assert 'nvidia-kmod = 3:580.65.06-1.el9' in query(repo, kmod, '[%{PROVIDENEVRS}\n]').splitlines()
    assert query(repo, kmod, '[%{CONFLICTNAME}\n]').split() == ['kmod-nvidia-open-dkms']
    scripts = query(repo, kmod, '%{POSTIN}\n%{PREUN}')
    assert 'dkms install nvidia/580.65.06 -k "$kernel"' in scripts and 'dkms remove nvidia/580.65.06 --all' in scripts
    assert query(repo, find('datacenter-gpu-manager-4-core', '4.1.0'), '[%{CONFLICTNAME}\n]').split() == ['datacenter-gpu-manager']
    toolkit = query(repo, find('nvidia-container-toolkit', '1.17.0'), '[%{REQUIRENEVRS}\n]').splitlines()
    assert 'nvidia-container-toolkit-base = 1.17.0-1' in toolkit


def modules_documents(repo):
    repodata = os.path.join(repo, 'repodata')
    name = [item for item in os.listdir(repodata) if item.endswith('-modules.yaml.gz')]
    assert len(name) == 1, os.listdir(repodata)
    with gzip.open(os.path.join(repodata, name[0]), 'rt', encoding='utf-8') as handle:
        text = handle.read()
    with open(os.path.join(repodata, 'repomd.xml'), encoding='utf-8') as handle:
        assert '<data type="modules">' in handle.read()
    return text.split('\n---\n')


def test_module_streams_like_nvidias_repository(repo):
    documents = modules_documents(repo)
    streams = {}
    for document in documents:
        match = re.search(r'^  stream: "([^"]+)"$', document, re.MULTILINE)
        if 'document: modulemd\n' in document:
            streams.setdefault(match.group(1), []).append(re.findall(r'^    - (\S+)$', document.split('  artifacts:')[1], re.MULTILINE))
    assert sorted(streams) == ['550-dkms', '550-open', '580-dkms', '580-open', 'latest-dkms', 'open-dkms']
    # One module version per driver release; a -dkms stream carries the proprietary kmod, an -open stream the open one.
    assert len(streams['580-dkms']) == 2 and len(streams['550-open']) == 1
    assert 'kmod-nvidia-latest-dkms-3:580.65.06-1.el9.noarch' in streams['580-dkms'][0]
    assert not [item for item in streams['580-dkms'][0] if item.startswith('kmod-nvidia-open-dkms')]
    assert 'kmod-nvidia-open-dkms-3:550.127.05-1.el9.noarch' in streams['550-open'][0]
    assert 'nvidia-fabric-manager-0:580.65.06-1.x86_64' in streams['580-dkms'][0]
    assert all(item.endswith('.x86_64') or item.endswith('.noarch') for version in streams.values() for items in version for item in items)
    defaults = [document for document in documents if 'document: modulemd-defaults' in document]
    assert len(defaults) == 1 and 'stream: "open-dkms"' in defaults[0]


def test_build_is_cached_by_its_inputs(repo):
    stamp = os.path.join(repo, BUILD.STAMP)
    before = os.stat(stamp).st_mtime_ns
    assert BUILD.build(repo) == repo
    assert os.stat(stamp).st_mtime_ns == before
    with open(stamp, encoding='utf-8') as handle:
        assert handle.read().strip() == BUILD.source_hash()
