# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fake ``nvidia-persistenced`` (NVIDIA Persistence Daemon).

``--version`` prints the real banner with the version of the owning package (else the installed
NVML).  As a daemon (foreground; ``--user``, ``--verbose``, ``--no-persistence-mode`` and the like
are accepted) it fails with the real syslog messages when no driver is loaded or the installed
user-space driver does not match the loaded module; otherwise it writes
``run/gpufleet-sim/persistenced.pid`` (nvidia-smi then reports persistence mode Enabled) and runs
until SIGTERM, which removes the file.
"""

import os
import sys

from gpufleet_sim import daemon, state

PACKAGES = (r'nvidia-compute-utils-[0-9]+', 'nvidia-persistenced', r'nvidia-utils-[0-9]+')

QUERY_FAILED = ('nvidia-persistenced: Failed to query NVIDIA devices. Please ensure that the NVIDIA device files '
                '(/dev/nvidia*) exist, and that user %d has read and write permissions for those files.')
INIT_FAILED = 'nvidia-persistenced failed to initialize. Check syslog for more details.'


def version():
    return state.owner(PACKAGES)[1] or state.installed_nvml()


def banner(own):
    return ('\nnvidia-persistenced:  version %s\n\n'
            '  The NVIDIA Persistence Daemon.\n\n'
            '  Copyright (C) 2013-2018 NVIDIA Corporation.\n\n' % (own or 'unknown'))


def run(argv, max_seconds=None):
    """Run nvidia-persistenced; returns the exit code."""
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if token in ('-v', '--version'):
            sys.stdout.write(banner(version()))
            return 0
        if token in ('-h', '--help'):
            sys.stdout.write(banner(version()) + '  nvidia-persistenced [options]\n')
            return 0
        if token in ('-u', '--user', '-g', '--group'):
            index += 1
        elif token.startswith(('--user=', '--group=')) or token in (
                '-V', '--verbose', '--persistence-mode', '--no-persistence-mode', '--nvidia-cfg-path', '-f', '--foreground'):
            continue
        else:
            sys.stderr.write('nvidia-persistenced: Invalid commandline, please run `nvidia-persistenced --help` for usage '
                             'information.\n')
            return 1
    nvml = state.nvml_state()
    if nvml != 'ok':
        # No module loaded, or a user-space driver the loaded module refuses (RM API mismatch).
        sys.stderr.write(QUERY_FAILED % os.geteuid() + '\n' + INIT_FAILED + '\n')
        return 1
    sys.stdout.write('nvidia-persistenced: Started (%d)\n' % os.getpid())
    sys.stdout.flush()
    return daemon.serve(state.PERSISTENCED_PID, max_seconds=max_seconds)


def main(argv=None):
    """Entry point: ``python3 -m gpufleet_sim.nvidia_persistenced ARGS``."""
    return run(sys.argv[1:] if argv is None else list(argv))


if __name__ == '__main__':
    sys.exit(main())
