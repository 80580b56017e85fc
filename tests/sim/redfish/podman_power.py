# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Power of a simulated node: its podman container is the machine, ``podman stop``/``start`` the power switch.

The five primitives the Redfish service (redfish_bmc.py) drives:

===================== =========================================================================================
``state()``           'On' when the container runs, else 'Off' (also when it does not exist)
``on()``              ``podman start`` (a cold boot: systemd starts from scratch, ``/run`` is empty again);
                      clears the node's ``reboot_hang`` fault first (see below)
``force_off()``       ``podman stop -t 0``: the stop signal, then SIGKILL at once (pulling the plug);
                      podman marks the container stopped by the user, so ``--restart=always`` leaves it off
``graceful_shutdown`` ``podman stop -t 30``: systemd's clean halt (SIGRTMIN+3), SIGKILL after 30 s
``graceful_restart``  ``systemctl reboot`` inside the node: the OS reboots itself (the restart policy brings the
                      container back), exactly like ``fleet reboot-node``; a ``reboot_hang`` node hangs again
===================== =========================================================================================

``reboot_hang`` (tests/sim/fleet_faults.py) models a node that hangs on the way through an OS reboot: its next
boot never brings sshd back.  A cold boot through the BMC gets past that, as a power cycle does on metal, so
``on()`` removes ``reboot_hang`` from the node's faults.json (the other faults stay).  A GracefulRestart is the
OS's own reboot and leaves the fault in place.
"""

from __future__ import annotations

import json
import os
import subprocess

GRACEFUL_TIMEOUT = 30
HANG_FAULT = 'reboot_hang'


class PowerError(RuntimeError):
    """A podman call that failed (a RuntimeError, as the Redfish service expects of a power primitive)."""


def run_command(argv, env=None, timeout=120):
    """Run an argument list; returns (rc, output)."""
    try:
        process = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return process.returncode, (process.stdout or '') + (process.stderr or '')


def clear_hang(faults_path):
    """Remove ``reboot_hang`` from a faults.json; True when it was set.  Other faults are left as they are."""
    if not faults_path or not os.path.exists(faults_path):
        return False
    with open(faults_path, encoding='utf-8') as handle:
        try:
            faults = json.load(handle)
        except ValueError:
            return False
    if not isinstance(faults, dict) or HANG_FAULT not in faults:
        return False
    del faults[HANG_FAULT]
    temporary = faults_path + '.bmc.tmp'
    with open(temporary, 'w', encoding='utf-8') as handle:
        json.dump(faults, handle, indent=2, sort_keys=True)
        handle.write('\n')
    os.replace(temporary, faults_path)
    return True


class PodmanPower:
    """The power switch of one node container."""

    def __init__(self, container, containers_conf=None, faults_path=None, log=None, runner=run_command):
        self.container = container
        self.faults_path = faults_path
        self.log = log or (lambda text: None)
        self.runner = runner
        self.env = dict(os.environ)
        if containers_conf:
            self.env['CONTAINERS_CONF'] = containers_conf

    def podman(self, *arguments, **kwargs):
        return self.runner(['podman'] + list(arguments), env=self.env, **kwargs)

    def _checked(self, what, *arguments, **kwargs):
        rc, output = self.podman(*arguments, **kwargs)
        if rc != 0:
            raise PowerError('%s of container %s: podman %s exited %s: %s' % (what, self.container, arguments[0], rc, output.strip()))
        return output

    def state(self):
        rc, output = self.podman('container', 'inspect', '--format', '{{.State.Running}}', self.container, timeout=30)
        return 'On' if rc == 0 and output.strip() == 'true' else 'Off'

    def on(self):
        if clear_hang(self.faults_path):
            self.log('cold boot: fault %s cleared' % HANG_FAULT)
        self._checked('power on', 'start', self.container)

    def force_off(self):
        self._checked('force off', 'stop', '-t', '0', self.container)

    def graceful_shutdown(self):
        self._checked('graceful shutdown', 'stop', '-t', str(GRACEFUL_TIMEOUT), self.container, timeout=GRACEFUL_TIMEOUT + 60)

    def graceful_restart(self):
        # systemd drops the connection as it goes down, so the exit status says nothing; a refused exec does.
        rc, output = self.podman('exec', self.container, 'systemctl', 'reboot', timeout=60)
        if rc != 0 and 'reboot' not in output.lower():
            raise PowerError('graceful restart of container %s: podman exec exited %s: %s' % (self.container, rc, output.strip()))
