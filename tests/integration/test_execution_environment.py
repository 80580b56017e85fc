# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""execution-environment.yml: ansible-builder v3 creates its build context (no container runtime needed) and finds the
collection's Python requirements through meta/execution-environment.yml."""

import glob
import os
import shutil
import subprocess
import sys

import yaml

from conftest import ROOT


def builder(*arguments, cwd=ROOT):
    process = subprocess.run([sys.executable, '-m', 'ansible_builder'] + list(arguments), cwd=cwd, capture_output=True, text=True,
                             check=False, timeout=300)
    assert process.returncode == 0, process.stdout + process.stderr
    return process.stdout


def test_ansible_builder_creates_the_context_and_finds_the_requirements(tmp_path):
    dist = tmp_path / 'build' / 'dist'
    subprocess.run(['ansible-galaxy', 'collection', 'build', '--force', '--output-path', str(dist), ROOT], check=True, capture_output=True)
    (tarball,) = glob.glob(str(dist / 'gpufleet-lifecycle-*.tar.gz'))
    shutil.copy(tarball, str(dist / 'gpufleet-lifecycle.tar.gz'))
    shutil.copy(os.path.join(ROOT, 'execution-environment.yml'), str(tmp_path / 'execution-environment.yml'))
    builder('create', '-f', 'execution-environment.yml', '-c', 'context', cwd=str(tmp_path))
    context = tmp_path / 'context'
    containerfile = (context / 'Containerfile').read_text(encoding='utf-8')
    assert 'ARG EE_BASE_IMAGE="quay.io/centos/centos:stream9"' in containerfile
    galaxy_stage = containerfile.split('AS galaxy', 1)[1].split('FROM ', 1)[0]
    assert 'COPY _build/collections/ /tmp/gpufleet-collections/' in galaxy_stage
    assert galaxy_stage.index('COPY _build/collections/') < galaxy_stage.index('ansible-galaxy collection install')
    assert (context / '_build' / 'collections' / 'gpufleet-lifecycle.tar.gz').is_file()
    requirements = yaml.safe_load((context / '_build' / 'requirements.yml').read_text(encoding='utf-8'))
    assert {'name': '/tmp/gpufleet-collections/gpufleet-lifecycle.tar.gz', 'type': 'file'} in requirements['collections']
    # What the builder stage's introspection will find in the installed collection. --force: make test's
    # ANSIBLE_COLLECTIONS_PATH already holds this checkout as gpufleet.lifecycle, which would make the install a no-op.
    installed = tmp_path / 'installed'
    subprocess.run(['ansible-galaxy', 'collection', 'install', '--force', '-p', str(installed), tarball], check=True, capture_output=True)
    found = yaml.safe_load(builder('introspect', '--sanitize', str(installed)).split('\n', 1)[1])
    assert 'prometheus-client>=0.17  # from collection gpufleet.lifecycle' in found['python']
