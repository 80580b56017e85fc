# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fake ``nvidia-container-cli`` (libnvidia-container).

``-V``/``--version`` prints the form of libnvidia-container 1.4 and later (``cli-version:`` from
``libnvidia-container-tools``, ``lib-version:`` from ``libnvidia-container1``, then the build
lines); ``info`` prints the driver and GPUs, or the real NVML initialisation error.
"""

import hashlib
import sys

from gpufleet_sim import state

CLI_PACKAGES = ('libnvidia-container-tools',)
LIB_PACKAGES = ('libnvidia-container1',)

BUILD_FLAGS = ('-D_GNU_SOURCE -D_FORTIFY_SOURCE=2 -DNDEBUG -std=gnu11 -O2 -g -fdata-sections -ffunction-sections '
               '-fplan9-extensions -fstack-protector -fno-strict-aliasing -fvisibility=hidden -Wall -Wextra -Wcast-align '
               '-Wpointer-arith -Wmissing-prototypes -Wnonnull -Wwrite-strings -Wlogical-op -Wformat=2 '
               '-Wmissing-format-attribute -Winit-self -Wshadow -Wstrict-prototypes -Wunreachable-code -Wconversion '
               '-Wsign-conversion -Wno-unknown-warning-option -Wno-format-extra-args -Wno-gnu-alignof-expression '
               '-Wl,-zrelro -Wl,-znow -Wl,-zdefs -Wl,--gc-sections')

NVML_ERRORS = {
    'not_loaded': 'driver not loaded',
    'mismatch': 'driver/library version mismatch',
    'no_library': 'load library failed: libnvidia-ml.so.1: cannot open shared object file: no such file or directory',
}

_COMPUTE_CAPABILITY = {'Hopper': '9.0', 'Ampere': '8.0', 'Ada Lovelace': '8.9', 'Blackwell': '10.0'}


def versions():
    cli = state.owner(CLI_PACKAGES)[1]
    lib = state.owner(LIB_PACKAGES)[1] or cli
    return cli, lib


def banner(cli, lib):
    digest = hashlib.sha1(('libnvidia-container %s' % cli).encode('utf-8')).hexdigest()
    number = int(digest[:6], 16)
    return ('cli-version: %s\nlib-version: %s\nbuild date: 20%02d-%02d-%02dT%02d:%02d+00:00\nbuild revision: %s\n'
            'build compiler: x86_64-linux-gnu-gcc-7 7.5.0\nbuild platform: x86_64\nbuild flags: %s\n'
            % (cli, lib, 23 + number % 3, number % 12 + 1, number % 28 + 1, number % 24, number % 60, digest, BUILD_FLAGS))


def info():
    nvml = state.nvml_state()
    if nvml != 'ok':
        sys.stderr.write('nvidia-container-cli: initialization error: nvml error: %s\n' % NVML_ERRORS[nvml])
        return 1
    driver = state.loaded_driver()
    lines = ['NVRM version:   %s' % driver, 'CUDA version:   %s' % (state.cuda_version_for(driver) or 'N/A'), '']
    lost = state.lost_gpus()
    for index, gpu in enumerate(state.load_hardware().get('gpus') or []):
        if index in lost:
            sys.stderr.write('nvidia-container-cli: detection error: nvml error: unknown error\n')
            return 1
        lines += ['Device Index:   %d' % index, 'Device Minor:   %d' % index, 'Model:          %s' % gpu.get('model', ''),
                  'Brand:          NVIDIA', 'GPU UUID:       %s' % gpu.get('uuid', ''),
                  'Bus Location:   %s' % gpu.get('pci_bus_id', ''),
                  'Architecture:   %s' % _COMPUTE_CAPABILITY.get(gpu.get('architecture'), 'N/A'), '']
    sys.stdout.write('\n'.join(lines))
    return 0


def run(argv):
    """Run nvidia-container-cli; returns the exit code."""
    if argv and argv[0] in ('-V', '--version'):
        cli, lib = versions()
        sys.stdout.write(banner(cli, lib))
        return 0
    if argv and argv[0] == 'info':
        return info()
    sys.stderr.write('Usage: nvidia-container-cli [OPTION...] COMMAND [ARG...]\n'
                     "Try `nvidia-container-cli --help' or `nvidia-container-cli --usage' for more information.\n")
    return 64


def main(argv=None):
    """Entry point: ``python3 -m gpufleet_sim.nvidia_container_cli ARGS``."""
    return run(sys.argv[1:] if argv is None else list(argv))


if __name__ == '__main__':
    sys.exit(main())
