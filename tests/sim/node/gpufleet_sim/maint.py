# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Helper for the maintainer scripts of the dummy NVIDIA packages.

``python3 -m gpufleet_sim.maint preinst PACKAGE [dpkg arguments...]`` exits 1 with
``gpufleet-sim: injected dpkg failure in PACKAGE preinst`` when the ``dpkg_fail`` fault names
``PACKAGE`` (``package=`` setting, an architecture suffix ``:amd64`` is ignored) or, without a
package setting, when ``PACKAGE`` is an NVIDIA package; otherwise (and for every other action) 0.
"""

import re
import sys

from gpufleet_sim import state

_NVIDIA_RE = re.compile(r'nvidia|^cuda|^libcuda|^libnv|^datacenter-gpu-manager|^dcgm|^nsight|^libxnvctrl', re.IGNORECASE)


def is_nvidia_package(name):
    return bool(_NVIDIA_RE.search(name))


def _bare(name):
    return name.split(':', 1)[0].strip()


def should_fail(action, package):
    if action != 'preinst':
        return False
    settings = state.fault('dpkg_fail')
    if settings is None:
        return False
    wanted = settings.get('package')
    if wanted:
        return _bare(str(wanted)) == _bare(package)
    return is_nvidia_package(_bare(package))


def run(argv):
    if len(argv) < 2:
        sys.stderr.write('usage: python3 -m gpufleet_sim.maint ACTION PACKAGE [ARGS...]\n')
        return 2
    action, package = argv[0], argv[1]
    if should_fail(action, package):
        sys.stderr.write('gpufleet-sim: injected dpkg failure in %s %s\n' % (_bare(package), action))
        return 1
    return 0


def main(argv=None):
    """Entry point: ``python3 -m gpufleet_sim.maint ACTION PACKAGE``."""
    return run(sys.argv[1:] if argv is None else list(argv))


if __name__ == '__main__':
    sys.exit(main())
