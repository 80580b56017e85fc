# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One policy for tests whose tool, right or machine is missing: they fail and say what to install or how to run.

No test skips itself (docs/development.md, "Missing tools"): a skipped suite reads as a passed one in a summary line.
``make test`` installs the Debian tools as root (hacking/system_tools.sh) and the Python ones into .venv.

    from ansible_collections.gpufleet.lifecycle.tests.needs import require_root, require_tool
"""

import os
import shutil
import sys

import pytest


def require_tool(name, install, path=None):
    """Path of the program ``name`` (on PATH, or exactly ``path``); fails the test saying how to install it."""
    found = (path if os.path.exists(path) else None) if path else shutil.which(name)
    if not found:
        pytest.fail('%s is not installed%s: %s' % (name, ' at %s' % path if path else '', install), pytrace=False)
    return found


def require_root(why):
    """Fails the test unless it runs as root on Linux; ``why`` says what needs root."""
    if not sys.platform.startswith('linux') or os.geteuid() != 0:
        pytest.fail('%s: run make test as root (CI does)' % why, pytrace=False)


def refuse_inside_simulation(path, why):
    """Fails the test when ``path`` (a file only a simulated node has) exists: it must run on the development machine."""
    if os.path.exists(path):
        pytest.fail('%s exists: this machine is a simulated node; %s, so run the unit tests on the development machine'
                    % (path, why), pytrace=False)
