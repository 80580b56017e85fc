# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.lifecycle.gpu_stack through molecule: the scenario extensions/molecule/gpu_stack runs create, check, converge,
idempotence, check, verify, destroy (550 -> 580) on one simulated node (build/sim-gpu-stack).

A module of its own (not in test_gpu_stack.py) so that pytest-xdist runs it beside the playbook-level cases.
"""

import os
import re

from conftest import ROOT, run_molecule

MOLECULE_STATE = os.path.join(ROOT, 'build', 'sim-gpu-stack')


def test_molecule_gpu_stack_scenario():
    output = run_molecule('gpu_stack', MOLECULE_STATE)
    assert re.search(r'^gpu_stack\s*: actions=8\s+successful=8\s.*failed=0', output, re.MULTILINE), output[-2000:]
