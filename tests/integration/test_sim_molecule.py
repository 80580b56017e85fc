# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""molecule's podman driver runs a scenario on a simulated GPU node (extensions/molecule/sim_node)."""

import hashlib
import os
import re

from conftest import ROOT, run_molecule

STATE = os.path.join(ROOT, 'build', 'sim-molecule')


def test_molecule_scenario_on_a_simulated_node():
    output = run_molecule('sim_node', STATE)
    # check, converge (changes the node), idempotence (changes nothing), check, verify, destroy.
    assert re.search(r'^sim_node\s*: actions=8\s+successful=8\s.*failed=0', output, re.MULTILINE), output[-2000:]
    # The container is named after this state folder (GPUFLEET_MOLECULE_NODE), so another checkout's run never collides.
    assert '[gpufleet-molecule-%s-gpu-01]' % hashlib.sha256(STATE.encode('utf-8')).hexdigest()[:6] in output, output[-2000:]
