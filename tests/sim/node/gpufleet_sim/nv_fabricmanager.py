# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fake ``nv-fabricmanager`` (NVIDIA Fabric Manager).

``--version`` prints ``Fabric Manager version is : <version>`` (the version of the owning package,
``nvidia-fabricmanager-<branch>`` or ``nvidia-fabricmanager``, RHEL's ``nvidia-fabric-manager``).  Started as the daemon (the unit
runs ``nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg``; it stays in the
foreground) it exits 1 with the real messages when the node has no NVSwitch (or no driver is
loaded, so no NVSwitch is visible), when the loaded driver is not exactly its own version, and for
the ``fm_fail`` fault (with ``mismatch=VERSION``: its own version reads as VERSION, the Fabric Manager of
another branch than the driver, so it fails with the real mismatch message unless that driver is loaded);
otherwise it writes ``run/gpufleet-sim/fabricmanager.pid`` (the GPUs'
fabric state becomes ``Completed``/``Success``) and runs until SIGTERM, which removes the file.
"""

import sys

from gpufleet_sim import daemon, state

# RHEL's package first (tests run the dnf path with a stand-in dnf that records its packages here too).
PACKAGES = ('nvidia-fabric-manager', r'nvidia-fabricmanager-[0-9]+', 'nvidia-fabricmanager')

NOTHING_TO_DO = ('request to query NVSwitch device information from NVSwitch driver failed with '
                 'error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]')
MISMATCH = ("fabric manager NVIDIA GPU driver interface version %s don't match with driver version %s. "
            "Please update with matching NVIDIA driver package.")
# Modelled on the driver-interface error format above (no real capture of this failure exists).
START_FAILED = ('request to initialize NVSwitch devices and train NVLinks failed with error:Failure: Generic Error '
                '[NV_ERR_GENERIC]')
CONNECTED = 'Connected to 1 node.'
CONFIGURED = ('Successfully configured all the available NVSwitches to route GPU NVLink traffic. NVLink Peer-to-Peer '
              'support will be enabled once the GPUs are successfully registered with the NVLink fabric.')

USAGE = """usage: nv-fabricmanager [options]
  -c, --config <file>   Fabric Manager configuration file
  -v, --version         Print the Fabric Manager version and exit
  -h, --help            Print this help and exit
"""


def version():
    return state.owner(PACKAGES)[1]


def run(argv, max_seconds=None):
    """Run nv-fabricmanager; returns the exit code."""
    options = {}
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if token in ('-v', '--version'):
            options['version'] = True
        elif token in ('-h', '--help'):
            options['help'] = True
        elif token in ('-c', '--config', '-g', '--fm-sm-mgmt-port-guid', '-l', '--log-file'):
            if index >= len(argv):
                sys.stderr.write('nv-fabricmanager: option %s requires an argument\n' % token)
                return 1
            options[token.lstrip('-')] = argv[index]
            index += 1
        elif token in ('-r', '--restart'):
            options['restart'] = True
        else:
            sys.stderr.write('nv-fabricmanager: unrecognized option \'%s\'\n%s' % (token, USAGE))
            return 1
    own = version()
    failing = state.fault('fm_fail')
    if failing is not None and failing.get('mismatch'):
        # fm_fail mismatch=VERSION: the Fabric Manager left on another branch than the driver (its package was not upgraded).
        own = str(failing['mismatch'])
    if options.get('help'):
        sys.stdout.write(USAGE)
        return 0
    if options.get('version'):
        sys.stdout.write('Fabric Manager version is : %s\n' % (own or 'unknown'))
        return 0
    hardware = state.load_hardware()
    driver = state.loaded_driver()
    if int(hardware.get('nvswitch_count', 0) or 0) <= 0 or driver is None:
        sys.stderr.write(NOTHING_TO_DO + '\n')
        return 1
    if driver != own:
        sys.stderr.write(MISMATCH % (own, driver) + '\n')
        return 1
    if failing is not None and not failing.get('mismatch'):
        sys.stderr.write(START_FAILED + '\n')
        return 1
    sys.stdout.write(CONNECTED + '\n' + CONFIGURED + '\n')
    sys.stdout.flush()
    return daemon.serve(state.FABRICMANAGER_PID, max_seconds=max_seconds)


def main(argv=None):
    """Entry point: ``python3 -m gpufleet_sim.nv_fabricmanager ARGS``."""
    return run(sys.argv[1:] if argv is None else list(argv))


if __name__ == '__main__':
    sys.exit(main())
