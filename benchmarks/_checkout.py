# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What every benchmark imports first: this checkout importable as ``ansible_collections.gpufleet.lifecycle`` (through
the checkout's own conftest) and the integration tests' helpers importable as ``conftest`` (the simulated fleet, the
playbook environment). The benchmarks run as scripts (``python benchmarks/<name>.py``), so this folder is on sys.path."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# The checkout's conftest makes it importable as ansible_collections.gpufleet.lifecycle.
import conftest as _root_conftest  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import

sys.path.remove(ROOT)
del sys.modules['conftest']
sys.path.insert(0, os.path.join(ROOT, 'tests', 'integration'))
