# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""molecule's podman driver runs a scenario on a simulated GPU node (extensions/molecule/sim_node)."""

import json
import os
import re
import subprocess

from conftest import ROOT, SIM, ansible_environment

STATE = os.path.join(ROOT, 'build', 'sim-molecule')


def test_molecule_scenario_on_a_simulated_node():
    prepared = subprocess.run([os.path.join(SIM, 'fleet'), '--state-dir', STATE, 'molecule-env'],
                              capture_output=True, text=True, check=False, timeout=1800)
    assert prepared.returncode == 0, prepared.stderr
    environment = ansible_environment()
    environment.update(json.loads(prepared.stdout))
    for name in ('ANSIBLE_STDOUT_CALLBACK', 'ANSIBLE_CALLBACK_RESULT_FORMAT'):
        environment.pop(name, None)
    process = subprocess.run(['molecule', 'test', '-s', 'sim_node'], cwd=ROOT, env=environment,
                             capture_output=True, text=True, check=False, timeout=900)
    output = re.sub(r'\x1b\[[0-9;]*m', '', process.stdout + process.stderr)
    assert process.returncode == 0, output[-6000:]
    # The sequence ran: converge changed the node, idempotence found nothing to change, verify passed.
    for step in ('converge', 'idempotence', 'verify', 'destroy'):
        assert re.search(r'^.*sim_node\W+%s\W.*Executed: Successful' % step, output, re.MULTILINE), step
    assert re.search(r'^sim_node\s*: actions=8\s+successful=8\s.*failed=0', output, re.MULTILINE), output[-2000:]
