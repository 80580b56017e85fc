# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fake ``nvcc`` (CUDA compiler driver): ``--version``/``-V`` prints the real banner.

The version comes from the owning package's versions file (``cuda-toolkit-X-Y``, or
``cuda-nvcc-X-Y``): content ``13.0.88`` prints ``Cuda compilation tools, release 13.0, V13.0.88``.
"""

import hashlib
import sys

from gpufleet_sim import state

PACKAGES = (r'cuda-nvcc-[0-9]+-[0-9]+', r'cuda-toolkit-[0-9]+-[0-9]+', 'cuda-toolkit', r'cuda-compiler-[0-9]+-[0-9]+')

# Year of the first release of each CUDA minor version (the "Copyright (c) 2005-YEAR" line).
_YEARS = {(11, 8): 2022, (12, 0): 2022, (12, 1): 2023, (12, 2): 2023, (12, 3): 2023, (12, 4): 2024, (12, 5): 2024,
          (12, 6): 2024, (12, 8): 2025, (12, 9): 2025, (13, 0): 2025, (13, 1): 2025}


def version():
    package, text = state.owner(PACKAGES)
    if text is None:
        return None
    text = text.split(':', 1)[-1].split('-', 1)[0]
    parts = text.split('.')
    if len(parts) < 2 and package:
        # Only the package name knows the release (cuda-toolkit-13-0).
        tail = package.rsplit('-', 2)[-2:]
        parts = tail + parts[:1] if all(item.isdigit() for item in tail) else parts
    while len(parts) < 3:
        parts.append('0')
    return '.'.join(parts)


def banner(full):
    major, minor = (int(item) for item in full.split('.')[:2])
    release = '%d.%d' % (major, minor)
    year = _YEARS.get((major, minor), 2025)
    number = int(hashlib.sha1(('cuda %s' % full).encode('utf-8')).hexdigest()[:7], 16)
    return ('nvcc: NVIDIA (R) Cuda compiler driver\n'
            'Copyright (c) 2005-%d NVIDIA Corporation\n'
            'Built on Wed_Aug_20_01:58:59_PM_PDT_%d\n'
            'Cuda compilation tools, release %s, V%s\n'
            'Build cuda_%s.r%s/compiler.%d_0\n' % (year, year, release, full, release, release, 30000000 + number % 9000000))


def run(argv):
    """Run nvcc; returns the exit code."""
    if argv and argv[0] in ('--version', '-V'):
        full = version()
        if full is None:
            sys.stderr.write('nvcc: CUDA toolkit version unknown (no cuda-toolkit package installed)\n')
            return 1
        sys.stdout.write(banner(full))
        return 0
    sys.stderr.write('nvcc fatal   : No input files specified; use option --help for more information\n')
    return 1


def main(argv=None):
    """Entry point: ``python3 -m gpufleet_sim.nvcc ARGS``."""
    return run(sys.argv[1:] if argv is None else list(argv))


if __name__ == '__main__':
    sys.exit(main())
