# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""plugin_utils/_report_render.py: the timeline's colours follow the procedure's one phase vocabulary."""

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _procedure
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _gate
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _report_render


def test_every_phase_of_the_procedure_and_every_ledger_state_in_flight_has_its_colour():
    known = set(_procedure.PHASES) | set(_gate.STATES) | {'run'}
    assert set(_procedure.PHASES) | set(_gate.IN_FLIGHT) <= set(_report_render.PHASE_COLOURS)
    assert set(_report_render.PHASE_COLOURS) <= known, set(_report_render.PHASE_COLOURS) - known
