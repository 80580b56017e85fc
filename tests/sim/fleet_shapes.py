# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``fleet shape NODE SHAPE``: give a simulated node one of the shapes real nodes come in (tests/sim/README.md, "Node shapes").

Shapes of the driver (Debian nodes): ``packaged`` (the normal node: NVIDIA's packages, held, DKMS module),
``runfile`` (no driver package; NVIDIA's ``.run`` installer's files, log and uninstaller; ``node/gpufleet_sim/runfile.py``)
and ``unowned`` (no driver package, no installer: a driver tree at ``/usr/local/nvidia``; ``node/gpufleet_sim/shapes.py``),
each with ``--driver VERSION`` (default: the node's driver) and ``--open`` (the open kernel module; default proprietary).
Shapes of the init tools (any node): ``no-systemd`` (``systemctl`` and ``journalctl`` out of sight) and ``systemd``.

:func:`plan` decides the steps from what the node is (``gpufleet_sim.shapes show``), purely; :func:`apply` runs them in the
node and reboots it when the driver changed, so the node comes back with the shape's module loaded.  A node already in the
shape gets no step: the command is idempotent.
"""

from __future__ import annotations

import json
import os
import re
import time

import catalog  # pylint: disable=import-error

DRIVER_SHAPES = ('packaged', 'runfile', 'unowned')
SHAPES = DRIVER_SHAPES + ('no-systemd', 'systemd')
APT = ['env', 'DEBIAN_FRONTEND=noninteractive']
# The driver pieces a packaged node has (Fabric Manager, DCGM and the container toolkit are packages of their own and stay).
DRIVER_PACKAGE = re.compile(r'^(nvidia-driver-[0-9]|nvidia-dkms-[0-9]|nvidia-kernel-common-|libnvidia-compute-|nvidia-utils-|'
                            r'nvidia-compute-utils-|cuda-drivers)')
VERSION = re.compile(r'^[0-9]{3}\.[0-9]{1,3}(\.[0-9]{1,3})?$')
PRIVATE_SYSTEMCTL = '/usr/libexec/gpufleet-sim/systemctl'


class ShapeError(Exception):
    """A shape that cannot be made; the message says why."""


def wanted_version(current, driver, default):
    """The driver release the shape installs: ``driver``, else the node's (installed, loaded, runfile, tree), else ``default``."""
    version = driver or current.get('driver_installed') or current.get('driver_loaded') or current.get('runfile') \
        or current.get('tree') or default
    if not VERSION.match(version or ''):
        raise ShapeError('%r is not a driver release such as 580.65.06' % (version,))
    return version


def in_shape(current, shape, version, is_open):
    """True when the node already is ``shape`` with ``version`` installed and loaded in that flavor."""
    if shape == 'no-systemd':
        return bool(current.get('systemctl_hidden'))
    if shape == 'systemd':
        return not current.get('systemctl_hidden')
    return (current.get('driver_source') == shape and current.get('driver_installed') == version
            and current.get('driver_loaded') == version and bool(current.get('open_loaded')) == bool(is_open)
            and (shape != 'packaged' or not current.get('systemctl_hidden')))


def plan(current, shape, version, is_open, packages=()):
    """The steps that turn a node that is ``current`` (``gpufleet_sim.shapes show``) into ``shape``; [] when it already is.

    ``packages``: the node's installed driver packages (:data:`DRIVER_PACKAGE`).  Steps, in order, are tuples:
    ``("systemd", "hide"|"restore")``, ``("uninstall",)`` (nvidia-uninstall --silent), ``("persistenced", "remove"|"install")``,
    ``("tree", "remove")``, ``("purge", names)``, ``("unload",)`` (modprobe -r nvidia), ``("runfile", version, open)``,
    ``("tree", "install", version, open)``, ``("packages", version, open)``, ``("reboot",)``.
    """
    if shape not in SHAPES:
        raise ShapeError('unknown shape %s; shapes: %s' % (shape, ', '.join(SHAPES)))
    if in_shape(current, shape, version, is_open):
        return []
    if shape == 'no-systemd':
        return [('systemd', 'hide')]
    if shape == 'systemd':
        return [('systemd', 'restore')]
    steps = []
    if shape == 'packaged' and current.get('systemctl_hidden'):
        steps.append(('systemd', 'restore'))
    if current.get('runfile') and shape != 'runfile':
        steps.append(('uninstall',))
    if shape != 'runfile':
        steps.append(('persistenced', 'remove'))
    if current.get('tree') and shape != 'unowned':
        steps.append(('tree', 'remove'))
    if packages and shape != 'packaged':
        steps.append(('purge', sorted(packages)))
    if shape == 'runfile':
        steps += [('unload',), ('runfile', version, bool(is_open)), ('persistenced', 'install')]
    elif shape == 'unowned':
        steps.append(('tree', 'install', version, bool(is_open)))
    else:
        steps.append(('packages', version, bool(is_open)))
    steps.append(('reboot',))
    return steps


def package_arguments(version, is_open):
    """``apt-get install`` arguments of the packaged driver ``version`` (every piece pinned, catalog.exact_install) and the
    names to hold, as ``fleet up`` provisions it."""
    if version not in catalog.DRIVERS:
        raise ShapeError('no packages of driver %s in the simulated repository (%s)' % (version, ', '.join(catalog.DRIVERS)))
    meta = 'nvidia-driver-%s-%s' % (version.split('.')[0], 'open' if is_open else 'server')
    arguments = catalog.exact_install(meta, version + '-0ubuntu1')
    return arguments, [argument.split('=')[0] for argument in arguments]


class Shaper(object):
    """Runs a plan in one node of a fleet (tests/sim/fleet.py ``Fleet``)."""

    def __init__(self, fleet, node):
        self.fleet = fleet
        self.node = node
        self.container = fleet.container(node)

    def exec(self, *command, check=True):
        return self.fleet.podman('exec', self.container, *command, check=check)

    def python(self, module, *arguments, env=()):
        return self.exec('env', 'PYTHONPATH=/usr/lib/gpufleet-sim', *env, 'python3', '-m', 'gpufleet_sim.' + module, *arguments)

    def show(self):
        current = json.loads(self.python('shapes', 'show').stdout)
        listing = self.exec('dpkg-query', '-W', '-f', '${Package}\t${db:Status-Abbrev}\n', check=False).stdout
        current['driver_packages'] = sorted(line.split('\t')[0] for line in listing.splitlines()
                                            if '\t' in line and DRIVER_PACKAGE.match(line.split('\t')[0])
                                            and line.split('\t')[1][1:2] not in ('n', 'c'))
        return current

    def step(self, step):
        kind = step[0]
        if kind in ('systemd', 'persistenced') or step[:2] == ('tree', 'remove'):
            self.python('shapes', *step)
        elif kind == 'tree':
            self.python('shapes', 'tree', 'install', step[2], *(['--open'] if step[3] else []))
        elif kind == 'uninstall':
            self.python('runfile', '--silent', env=('GPUFLEET_SIM_PROG=/usr/bin/nvidia-uninstall',))
        elif kind == 'purge':
            self.exec('apt-mark', 'unhold', *step[1])
            self.exec(*APT, 'apt-get', 'purge', '-y', '-q', *step[1])
        elif kind == 'unload':
            self.exec('/usr/local/sbin/modprobe', '-r', 'nvidia', check=False)
        elif kind == 'runfile':
            # As `sh NVIDIA-Linux-x86_64-<version>.run --silent --kernel-module-type=...` runs its nvidia-installer.
            self.python('runfile', '--silent', '--kernel-module-type=%s' % ('open' if step[2] else 'proprietary'),
                        env=('GPUFLEET_SIM_RUNFILE_VERSION=%s' % step[1], 'GPUFLEET_SIM_PROG=./nvidia-installer'))
        elif kind == 'packages':
            arguments, names = package_arguments(step[1], step[2])
            self.exec(*APT, 'apt-get', 'update', '-q')
            self.exec('sh', '-c', 'apt-mark showhold | grep -E "^(nvidia-|libnvidia-compute|cuda-drivers)" | xargs -r apt-mark unhold')
            self.exec(*APT, 'apt-get', 'install', '-y', '-q', '--allow-downgrades', '--allow-change-held-packages', *arguments)
            self.exec('apt-mark', 'hold', *names)
        elif kind == 'reboot':
            self.reboot()

    def reboot(self, timeout=180):
        """Reboot the node through its own systemd (its private systemctl on a no-systemd node) and wait for the new boot."""
        before = json.loads(self.exec('cat', '/run/gpufleet-sim/boot.json').stdout).get('boot_id')
        self.fleet.reboot_node(self.node)
        deadline = time.time() + timeout
        while time.time() < deadline:
            process = self.exec('cat', '/run/gpufleet-sim/boot.json', check=False)
            if process.returncode == 0 and process.stdout.strip():
                try:
                    if json.loads(process.stdout).get('boot_id') != before:
                        break
                except ValueError:
                    pass
            time.sleep(1)
        else:
            raise ShapeError('%s did not come back from its reboot in %ds' % (self.node, timeout))
        spec = (self.fleet.load() or {'nodes': {}})['nodes'][self.node]
        self.fleet.wait_for_ssh(self.node, spec['ssh_port'], os.path.join(self.fleet.state_dir, 'ssh', 'id_ed25519'))


def apply(fleet, node, shape=None, driver=None, is_open=False, default_version=None, operating_system='debian12'):
    """Make ``node`` ``shape`` (None: only show it); returns ``{"steps": [...], "node": what it is afterwards}``."""
    shaper = Shaper(fleet, node)
    current = shaper.show()
    if shape is None:
        return {'steps': [], 'node': current}
    if shape in DRIVER_SHAPES and operating_system != 'debian12':
        raise ShapeError('shape %s: %s is a %s node; the driver shapes are made on debian12 nodes' % (shape, node, operating_system))
    version = wanted_version(current, driver, default_version) if shape in DRIVER_SHAPES else None
    if shape == 'packaged':
        package_arguments(version, is_open)     # a release the repository has, before anything changes
    steps = plan(current, shape, version, is_open, current['driver_packages'])
    for step in steps:
        shaper.step(step)
    return {'steps': [list(step) for step in steps], 'node': shaper.show() if steps else current}
