# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one place the unit tests find their fixture files (tests/unit/fixtures/...).

    from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import fixture_path, read_fixture, real_output_path

``real-outputs/`` holds real captured tool outputs, each with its ``.source.txt`` provenance sidecar
(tests/unit/test_fixture_files.py checks that every one has it). A missing file fails at once with its path.
"""

import os

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fixtures')
REAL_OUTPUTS = os.path.join(FIXTURES, 'real-outputs')


def fixture_path(*parts):
    """Path of a file or folder under tests/unit/fixtures; FileNotFoundError when it does not exist."""
    path = os.path.join(FIXTURES, *parts)
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    return path


def real_output_path(*parts):
    """Path of a real captured output (or a folder of them) under tests/unit/fixtures/real-outputs."""
    return fixture_path('real-outputs', *parts)


def read_fixture(*parts, binary=False):
    """Content of a fixture file: text (UTF-8) or, with ``binary``, the bytes as captured."""
    path = fixture_path(*parts)
    if binary:
        with open(path, 'rb') as handle:
            return handle.read()
    with open(path, encoding='utf-8') as handle:
        return handle.read()


def read_real_output(*parts, binary=False):
    """Content of a real captured output under tests/unit/fixtures/real-outputs."""
    return read_fixture('real-outputs', *parts, binary=binary)
