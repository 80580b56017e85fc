# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fixture helper, and the rule that every real captured output carries its provenance sidecar."""

import os

import pytest

from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import (
    REAL_OUTPUTS,
    fixture_path,
    read_fixture,
    read_real_output,
    real_output_path,
)


def test_every_real_output_has_its_source_sidecar():
    samples = []
    for folder, dummy, files in os.walk(REAL_OUTPUTS):
        for name in files:
            if name.endswith('.source.txt'):
                continue
            samples.append(name)
            path = os.path.join(folder, name)
            sidecars = [path + '.source.txt', os.path.splitext(path)[0] + '.source.txt']
            assert any(os.path.isfile(sidecar) and os.path.getsize(sidecar) > 0 for sidecar in sidecars), path
    assert len(samples) >= 30


def test_text_and_bytes_of_the_same_sample():
    name = ('locks', 'proc-locks_apt-systemlock-frontend-and-lock_debian12_linux6.18.txt')
    assert read_real_output(*name, binary=True).decode('utf-8') == read_real_output(*name)
    assert read_fixture('real-outputs', *name) == read_real_output(*name)
    assert real_output_path(*name) == fixture_path('real-outputs', *name)


def test_a_missing_fixture_fails_with_its_path():
    with pytest.raises(FileNotFoundError) as error:
        read_real_output('nvidia-smi-xml', 'no-such-sample.xml')
    assert 'no-such-sample.xml' in str(error.value)
