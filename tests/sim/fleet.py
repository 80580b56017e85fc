# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Bring a simulated GPU fleet up and down: podman nodes, dummy NVIDIA packages, Slurm or a fake Kubernetes API.

Run it through ``tests/sim/fleet``::

    tests/sim/fleet up --nodes 8 --scheduler slurm      # idempotent; prints the inventory path
    tests/sim/fleet status
    tests/sim/fleet fault gpu-03 diag_fail level=3 test=memory gpu=2
    tests/sim/fleet fault gpu-03 clear
    tests/sim/fleet exec gpu-03 -- nvidia-smi -q -x
    tests/sim/fleet down                                 # stops every process and container it started
    tests/sim/fleet up --nodes 2 --bmc                   # plus a Redfish BMC per node (tests/sim/redfish/README.md)

Everything lives under the state folder (default ``build/sim`` of the checkout): the generated SSH key,
per-node files bind-mounted into the nodes, the inventory, Slurm's and the Kubernetes API's state.
Nodes are podman containers (systemd as PID 1, sshd on a loopback port of their own, host network),
started from an image built once with mmdebstrap and cached by a hash of its inputs; a second image,
provisioned with a driver branch, is cached the same way.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, 'node'))
sys.path.insert(0, os.path.join(HERE, 'packages'))
sys.path.insert(0, os.path.join(HERE, 'slurm'))

from gpufleet_sim import state as node_state  # noqa: E402  pylint: disable=wrong-import-position
import fleet_faults  # noqa: E402  pylint: disable=wrong-import-position
import fleet_shapes  # noqa: E402  pylint: disable=wrong-import-position
import kube_fleet  # noqa: E402  pylint: disable=wrong-import-position

NODE_NAME = re.compile(r'^[a-z][a-z0-9-]{0,40}$')
LABEL = 'io.gpufleet.sim'
IMAGE_REPO = 'localhost/gpufleet-sim-node'
HOST_PACKAGES = ('podman', 'runc', 'mmdebstrap', 'uidmap', 'openssh-client', 'openssl', 'rpm', 'createrepo-c', 'gcc', 'libc6-dev')
# What shows a host package is installed, where it is not a program of its name.
HOST_PACKAGE_PROBES = {'openssh-client': 'ssh', 'uidmap': 'newuidmap', 'rpm': 'rpmbuild', 'createrepo-c': 'createrepo_c',
                       'libc6-dev': '/usr/include/stdlib.h'}
# The nodes' uname() shim (node/shim/): compiled on the host when a provisioned image is built, loaded through
# /etc/ld.so.preload in every process of a node, so uname -r prints the kernel the simulated node booted.
UNAME_SHIM_SOURCE = os.path.join(HERE, 'node', 'shim', 'gpufleet_uname.c')
UNAME_SHIM = '/usr/lib/gpufleet-sim/libgpufleet-uname.so'
# A tmpfs over /proc/driver in every node: the boot step shows the loaded module's /proc/driver/nvidia/version there,
# as nvidia-container-cli shows the host's in a GPU container (runc refuses bind mounts under /proc, not a tmpfs).
PROC_DRIVER_MOUNT = 'type=tmpfs,destination=/proc/driver,tmpfs-mode=0555'
IMAGE_PACKAGES = ('python3', 'python3-apt', 'systemd', 'systemd-sysv', 'dbus', 'sudo', 'openssh-server', 'iproute2', 'procps')
# The node operating systems (up --os): debian12 (apt, the default) and rocky9, the same Debian base with real dnf 4, its
# versionlock plugin and rpm, saying it is Rocky Linux 9 (tests/sim/node/image/customize-rocky9.sh), on the rpm repository
# of tests/sim/packages/build_rpm_repo.py.
OPERATING_SYSTEMS = ('debian12', 'rocky9')
ROCKY9_PACKAGES = ('dnf', 'python3-dnf', 'dnf-plugins-core', 'rpm')
# fs.inotify.max_user_instances the host needs for several fleets of systemd nodes at once (ensure_inotify_instances).
INOTIFY_INSTANCES = 1024
CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""
SSH_BASE_PORT = 22200
SSH_PORT_SPAN = 400
# Every fleet on this machine (test, demo, benchmark fleets side by side) records the SSH ports it holds here,
# under a lock, so no port is handed out twice: {"<port>": "<state dir>"}.
PORT_REGISTRY = os.environ.get('GPUFLEET_SIM_PORT_REGISTRY') or os.path.join(
    tempfile.gettempdir(), 'gpufleet-sim-ports-%d.json' % os.getuid())
# One builder of host packages and node images at a time on this machine: fleets coming up side by side (pytest-xdist
# workers, make test's image prebuild, a demo) wait for each other instead of building the same image twice or running
# two apt-get at once.
BUILD_LOCK = os.environ.get('GPUFLEET_SIM_BUILD_LOCK') or os.path.join(tempfile.gettempdir(), 'gpufleet-sim-build-%d.lock' % os.getuid())
# What a provisioned node has installed, by driver branch: (package, version) of the dummy repository.
# Each expands to every versioned piece (catalog.exact_install), as NVIDIA's instructions name them.
PROVISION = {
    '550': [('nvidia-driver-550-server', '550.127.05-0ubuntu1'), ('nvidia-container-toolkit', '1.16.2-1'),
            ('datacenter-gpu-manager', '1:3.3.9')],
    '580': [('nvidia-driver-580-server', '580.65.06-0ubuntu1'), ('nvidia-container-toolkit', '1.17.0-1'),
            ('datacenter-gpu-manager-4-core', '1:4.1.0-1')],
}
FABRIC_MANAGER = {'550': ('nvidia-fabricmanager-550', '550.127.05-1'), '580': ('nvidia-fabricmanager-580', '580.65.06-1')}
KERNEL = 'linux-image-6.1.0-26-amd64'
# The simulated BMCs (``up --bmc``): one HTTPS Redfish service per node, ports from the same registry as SSH.
BMC_BASE_PORT = 22600
BMC_USER = 'admin'
BMC_SERVER = os.path.join(HERE, 'redfish', 'redfish_bmc.py')


class FleetError(Exception):
    """A fleet operation that cannot go on; the message says why."""


def log(message):
    """Progress on stderr; stdout carries results (the inventory path)."""
    sys.stderr.write('fleet: %s\n' % message)
    sys.stderr.flush()


def run(argv, check=True, capture=True, env=None, timeout=None, input_text=None):
    """Run an argument list; raise FleetError with its output when it fails and ``check``."""
    process = subprocess.run(argv, capture_output=capture, text=True, env=env, timeout=timeout, check=False, input=input_text)
    if check and process.returncode != 0:
        raise FleetError('%s failed (rc=%s): %s%s' % (' '.join(argv), process.returncode,
                                                      process.stdout or '', process.stderr or ''))
    return process


def port_is_free(port):
    """True when nothing holds ``port`` on 127.0.0.1 right now (a bind succeeds).

    SO_REUSEADDR, as sshd and the BMC set it: connections of a stopped server left in TIME_WAIT (up to a minute)
    do not make its port look busy, while a live listener still does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(('127.0.0.1', port))
        except OSError:
            return False
    return True


def port_listened(port):
    """True when something accepts connections on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(2)
        return probe.connect_ex(('127.0.0.1', port)) == 0


def pick_ports(count, base, taken, is_free, span=SSH_PORT_SPAN):
    """``count`` distinct ports from ``base`` on that are neither in ``taken`` nor busy (``is_free(port)`` false).

    Pure apart from ``is_free``: a port goes out at most once, whatever ``taken`` holds and whatever is busy.
    """
    chosen = []
    for port in range(base, base + span):
        if len(chosen) == count:
            break
        if port in taken or port in chosen or not is_free(port):
            continue
        chosen.append(port)
    if len(chosen) < count:
        raise FleetError('only %d free loopback port(s) in %d-%d, %d needed' % (len(chosen), base, base + span - 1, count))
    return chosen


@contextlib.contextmanager
def port_registry(path=None):
    """The machine-wide port registry, locked for the duration; yields the mapping, saved on exit.

    Entries whose fleet no longer lists the port (a fleet taken down, a state folder removed) are dropped first.
    """
    path = path or PORT_REGISTRY
    with open(path + '.lock', 'a', encoding='utf-8') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            try:
                with open(path, encoding='utf-8') as handle:
                    registry = json.load(handle)
            except (OSError, ValueError):
                registry = {}
            registry = dict((port, owner) for port, owner in registry.items() if int(port) in fleet_ports(owner))
            yield registry
            temporary = path + '.tmp'
            with open(temporary, 'w', encoding='utf-8') as handle:
                json.dump(registry, handle, indent=2, sort_keys=True)
            os.replace(temporary, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_lock(path=None):
    """The machine-wide lock of host package installs and image builds (BUILD_LOCK), held for the duration (a context
    manager: the simulated Slurm's flock helper)."""
    import slurm_sim  # pylint: disable=import-outside-toplevel,import-error
    path = path or BUILD_LOCK
    return slurm_sim.locked(os.path.dirname(path), os.path.basename(path))


def image_kind(reference):
    """What an image reference is an image of, without its inputs' hash: ``base``, ``base-rocky9``, ``550-fm``,
    ``rocky9-550``; None for a reference that is not a node image tag."""
    match = re.match(r'^%s:(.+)-[0-9a-f]{16}$' % re.escape(IMAGE_REPO), reference)
    return match.group(1) if match else None


def fleet_ports(state_dir):
    """The SSH (and BMC) ports the fleet in ``state_dir`` has handed to its nodes (empty when there is no such fleet)."""
    try:
        with open(os.path.join(state_dir, 'fleet.json'), encoding='utf-8') as handle:
            nodes = json.load(handle).get('nodes', {}).values()
            return set(spec['ssh_port'] for spec in nodes) | set(spec['bmc_port'] for spec in nodes if spec.get('bmc_port'))
    except (OSError, ValueError, KeyError, TypeError):
        return set()


class Fleet:
    """One fleet, described by its state folder."""

    def __init__(self, state_dir):
        self.state_dir = os.path.abspath(state_dir)
        self.config_path = os.path.join(self.state_dir, 'fleet.json')
        self.containers_conf = os.path.join(self.state_dir, 'containers.conf')

    # ------------------------------------------------------------------ environment

    def podman_env(self):
        environment = dict(os.environ)
        environment['CONTAINERS_CONF'] = self.containers_conf
        return environment

    def podman(self, *arguments, **kwargs):
        return run(['podman'] + list(arguments), env=self.podman_env(), **kwargs)

    def load(self):
        if not os.path.exists(self.config_path):
            return None
        with open(self.config_path, encoding='utf-8') as handle:
            return json.load(handle)

    def save(self, config):
        os.makedirs(self.state_dir, exist_ok=True)
        temporary = self.config_path + '.tmp'
        with open(temporary, 'w', encoding='utf-8') as handle:
            json.dump(config, handle, indent=2, sort_keys=True)
        os.replace(temporary, self.config_path)

    @staticmethod
    def ensure_host_packages():
        def present(package):
            probe = HOST_PACKAGE_PROBES.get(package, package)
            return os.path.exists(probe) if probe.startswith('/') else bool(shutil.which(probe))

        missing = [package for package in HOST_PACKAGES if not present(package)]
        if not missing:
            return
        if os.geteuid() != 0:
            raise FleetError('missing %s; install them (needs root): apt-get install %s' % (', '.join(missing), ' '.join(missing)))
        log('installing %s' % ', '.join(missing))
        environment = dict(os.environ, DEBIAN_FRONTEND='noninteractive')
        install = ['apt-get', '-o', 'DPkg::Lock::Timeout=600', 'install', '-y', '-qq', '--no-install-recommends'] + missing
        if run(install, check=False, env=environment).returncode != 0:
            run(['apt-get', 'update', '-qq'], env=environment)
            run(install, env=environment)

    @staticmethod
    def ensure_inotify_instances(wanted=INOTIFY_INSTANCES):
        """Raise the host's fs.inotify.max_user_instances to ``wanted`` when lower: every node's systemd takes inotify
        instances of the one root user, and Debian's default 128 runs out with a few fleets up ("Failed to create
        inotify object: Too many open files" in a node's journal, its units never start)."""
        path = '/proc/sys/fs/inotify/max_user_instances'
        try:
            with open(path, encoding='ascii') as handle:
                current = int(handle.read().strip())
        except (OSError, ValueError):
            return
        if current >= wanted:
            return
        if os.geteuid() != 0:
            log('warning: fs.inotify.max_user_instances is %d; nodes may fail to start (as root: sysctl -w '
                'fs.inotify.max_user_instances=%d)' % (current, wanted))
            return
        log('raising fs.inotify.max_user_instances from %d to %d' % (current, wanted))
        with open(path, 'w', encoding='ascii') as handle:
            handle.write('%d\n' % wanted)

    def prepare(self):
        os.makedirs(self.state_dir, exist_ok=True)
        with open(self.containers_conf, 'w', encoding='utf-8') as handle:
            handle.write(CONTAINERS_CONF)
        key = os.path.join(self.state_dir, 'ssh', 'id_ed25519')
        if not os.path.exists(key):
            os.makedirs(os.path.dirname(key), mode=0o700, exist_ok=True)
            run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-C', 'gpufleet-sim', '-f', key])
        return key

    # ------------------------------------------------------------------ images

    @staticmethod
    def _hash(paths, extra):
        digest = hashlib.sha256(extra.encode('utf-8'))
        for path in paths:
            for folder, dummy, files in sorted(os.walk(path)) if os.path.isdir(path) else [(os.path.dirname(path), None, [os.path.basename(path)])]:
                for name in sorted(files):
                    if name.endswith('.pyc'):
                        continue
                    with open(os.path.join(folder, name), 'rb') as handle:
                        digest.update(name.encode('utf-8') + handle.read())
        return digest.hexdigest()[:16]

    def image_exists(self, reference):
        return self.podman('image', 'exists', reference, check=False).returncode == 0

    @staticmethod
    def debian_mirror():
        """The Debian mirror of this machine's apt sources."""
        candidates = ['/etc/apt/sources.list'] + sorted(
            os.path.join('/etc/apt/sources.list.d', name) for name in os.listdir('/etc/apt/sources.list.d')) \
            if os.path.isdir('/etc/apt/sources.list.d') else ['/etc/apt/sources.list']
        for path in candidates:
            if not os.path.exists(path):
                continue
            with open(path, encoding='utf-8') as handle:
                for match in re.finditer(r'(https?://\S+?/debian)/?(?:\s|$)', handle.read()):
                    if 'security' not in match.group(1):
                        return match.group(1)
        return 'http://deb.debian.org/debian'

    def base_image(self, operating_system='debian12'):
        """The node base image (Debian bookworm minbase + systemd + sshd; rocky9: plus dnf and rpm, saying Rocky 9), built once."""
        image_dir = os.path.join(HERE, 'node', 'image')
        packages = IMAGE_PACKAGES + (ROCKY9_PACKAGES if operating_system == 'rocky9' else ())
        hooks = ['customize.sh'] + (['customize-rocky9.sh'] if operating_system == 'rocky9' else [])
        # The debian12 inputs hash as before the rocky9 variant existed (its cached image stays valid).
        inputs = [os.path.join(image_dir, name) for name in sorted(hooks) + ['gpufleet-sim-boot.service']]
        tag = '%s:base-%s%s' % (IMAGE_REPO, '' if operating_system == 'debian12' else operating_system + '-',
                                self._hash(inputs, ' '.join(packages)))
        if self.image_exists(tag):
            return tag
        log('building the node base image %s with mmdebstrap (about 1-2 minutes)' % tag)
        tarball = os.path.join(self.state_dir, 'base-%s.tar' % operating_system)
        run(['mmdebstrap', '--variant=minbase', '--include=' + ','.join(packages)]
            + ['--customize-hook=%s "$1"' % os.path.join(image_dir, hook) for hook in hooks]
            + ['bookworm', tarball, self.debian_mirror()], timeout=1200)
        self.podman('import', '--change', 'CMD ["/sbin/init"]', tarball, tag, timeout=600)
        os.unlink(tarball)
        return tag

    def repository(self):
        """Build (or reuse) the local apt repository of dummy NVIDIA packages."""
        import build_repo  # pylint: disable=import-outside-toplevel,import-error
        return build_repo.build(os.path.join(self.state_dir, 'repo'))

    def provisioned_image(self, base, branch, fabric_manager):
        """The base image with one driver branch installed and its module built, cached."""
        import catalog  # pylint: disable=import-outside-toplevel,import-error
        wanted = PROVISION[branch] + ([FABRIC_MANAGER[branch]] if fabric_manager else [])
        packages = [KERNEL]
        for name, version in wanted:
            packages.extend(argument for argument in catalog.exact_install(name, version) if argument not in packages)
        # The apt repository's sources only (the rpm side has its own images).
        sources = [os.path.join(HERE, 'packages', name) for name in ('build_repo.py', 'catalog.py')]
        tag = '%s:%s-%s' % (IMAGE_REPO, branch + ('-fm' if fabric_manager else ''),
                            self._hash(sources + [os.path.join(HERE, 'node', 'gpufleet_sim'), os.path.dirname(UNAME_SHIM_SOURCE)],
                                       base + ' '.join(packages)))
        if self.image_exists(tag):
            return tag
        log('provisioning image %s (%s)' % (tag, ' '.join(packages)))
        name = 'gpufleet-sim-provision-%d' % os.getpid()
        hardware_dir = os.path.join(self.state_dir, 'provision-etc')
        os.makedirs(hardware_dir, exist_ok=True)
        self._write_json(os.path.join(hardware_dir, 'hardware.json'), node_state.make_hardware('provision', 'h100-sxm-8'))
        self._write_json(os.path.join(hardware_dir, 'faults.json'), {})
        self.podman('run', '-d', '--name', name, '--network', 'none', '--systemd=always',
                    '-v', '%s:/usr/lib/gpufleet-sim/gpufleet_sim:ro' % os.path.join(HERE, 'node', 'gpufleet_sim'),
                    '-v', '%s:/srv/gpufleet-repo:ro' % self.repository(),
                    '-v', '%s:/etc/gpufleet-sim' % hardware_dir, base, '/sbin/init')
        try:
            self.wait_for_systemd(name)
            self.podman('exec', name, 'apt-get', 'update', '-qq')
            self.podman('exec', '-e', 'DEBIAN_FRONTEND=noninteractive', name, 'apt-get', 'install', '-y', '-qq',
                        '--no-install-recommends', *packages, timeout=600)
            self.podman('exec', name, 'apt-mark', 'hold', *[package.split('=', maxsplit=1)[0] for package in packages if '=' in package])
            # As NVIDIA's install guides do: the DCGM host engine, and Fabric Manager on NVSwitch systems.
            self.podman('exec', name, 'systemctl', 'enable', 'nvidia-dcgm.service', *(['nvidia-fabricmanager.service'] if fabric_manager else []))
            self.install_uname_shim(name)
            self.podman('stop', '-t', '10', name)
            self.podman('commit', '--quiet', '--change', 'CMD ["/sbin/init"]', name, tag, timeout=600)
        finally:
            self.podman('rm', '-f', name, check=False)
        return tag

    def rpm_repository(self):
        """Build (or reuse) the local dnf repository of dummy NVIDIA rpms with its module streams (rocky9 nodes)."""
        import build_rpm_repo  # pylint: disable=import-outside-toplevel,import-error
        return build_rpm_repo.build(os.path.join(self.state_dir, 'rpm-repo'))

    @staticmethod
    def rocky9_provision(branch, fabric_manager):
        """(module stream, dnf install specs, specs to version-lock) of a rocky9 node on ``branch``: the PROVISION releases
        under NVIDIA's RHEL names, as its install guide does it (enable the stream, install, lock)."""
        import catalog  # pylint: disable=import-outside-toplevel,import-error
        import rpm_catalog  # pylint: disable=import-outside-toplevel,import-error
        (dummy, driver), (dummy, toolkit), (dcgm, dcgm_version) = PROVISION[branch]
        driver, toolkit = catalog.upstream_version(driver), catalog.upstream_version(toolkit)
        locked = ['%s-%s' % (name, driver) for name in rpm_catalog.DRIVER_PIECES + (rpm_catalog.KMODS['dkms'],)]
        locked += ['nvidia-fabric-manager-%s' % driver] if fabric_manager else []
        locked += ['%s-%s' % (name, toolkit) for name in ('nvidia-container-toolkit', 'nvidia-container-toolkit-base',
                                                          'libnvidia-container-tools', 'libnvidia-container1')]
        locked.append('%s-%s' % (dcgm, catalog.upstream_version(dcgm_version)))
        return '%s-dkms' % branch, ['gpufleet-sim-base', 'kernel-%s-%s' % rpm_catalog.KERNELS[0]] + locked, locked

    def provisioned_rocky9_image(self, base, branch, fabric_manager):
        """The rocky9 base image with one driver branch installed by real dnf from the rpm repository, version-locked, cached."""
        stream, install, locked = self.rocky9_provision(branch, fabric_manager)
        tag = '%s:rocky9-%s-%s' % (IMAGE_REPO, branch + ('-fm' if fabric_manager else ''),
                                   self._hash([os.path.join(HERE, 'packages'), os.path.join(HERE, 'node', 'gpufleet_sim')],
                                              base + stream + ' '.join(install)))
        if self.image_exists(tag):
            return tag
        log('provisioning image %s (dnf: nvidia-driver:%s, %s)' % (tag, stream, ' '.join(install)))
        name = 'gpufleet-sim-provision-%d' % os.getpid()
        hardware_dir = os.path.join(self.state_dir, 'provision-etc')
        os.makedirs(hardware_dir, exist_ok=True)
        self._write_json(os.path.join(hardware_dir, 'hardware.json'), node_state.make_hardware('provision', 'h100-sxm-8'))
        self._write_json(os.path.join(hardware_dir, 'faults.json'), {})
        self.podman('run', '-d', '--name', name, '--network', 'none', '--systemd=always',
                    '-v', '%s:/usr/lib/gpufleet-sim/gpufleet_sim:ro' % os.path.join(HERE, 'node', 'gpufleet_sim'),
                    '-v', '%s:/srv/gpufleet-rpm:ro' % self.rpm_repository(),
                    '-v', '%s:/etc/gpufleet-sim' % hardware_dir, base, '/sbin/init')
        try:
            self.wait_for_systemd(name)
            self.podman('exec', name, 'dnf', '-y', '-q', 'module', 'enable', 'nvidia-driver:' + stream, timeout=300)
            self.podman('exec', name, 'dnf', '-y', '-q', 'install', *install, timeout=600)
            self.podman('exec', name, 'dnf', '-q', 'versionlock', 'add', *locked, timeout=300)
            self.podman('exec', name, 'dnf', 'clean', 'all', timeout=300)
            self.podman('exec', name, 'systemctl', 'enable', 'nvidia-dcgm.service', *(['nvidia-fabricmanager.service'] if fabric_manager else []))
            self.podman('stop', '-t', '10', name)
            self.podman('commit', '--quiet', '--change', 'CMD ["/sbin/init"]', name, tag, timeout=600)
        finally:
            self.podman('rm', '-f', name, check=False)
        return tag

    @staticmethod
    def image_os(reference):
        """The node operating system of an image reference (rocky9 images are tagged base-rocky9-... and rocky9-...)."""
        return 'rocky9' if re.search(r':(?:base-)?rocky9-', reference) else 'debian12'

    def install_uname_shim(self, container):
        """Compile the uname() shim on the host and install it in ``container`` with its /etc/ld.so.preload line."""
        folder = os.path.join(self.state_dir, 'shim')
        os.makedirs(folder, exist_ok=True)
        library = os.path.join(folder, os.path.basename(UNAME_SHIM))
        run(['gcc', '-shared', '-fPIC', '-O2', '-Wall', '-Wextra', '-Werror', '-o', library, UNAME_SHIM_SOURCE])
        preload = os.path.join(folder, 'ld.so.preload')
        with open(preload, 'w', encoding='utf-8') as handle:
            handle.write(UNAME_SHIM + '\n')
        self.podman('cp', library, '%s:%s' % (container, UNAME_SHIM))
        self.podman('cp', preload, '%s:/etc/ld.so.preload' % container)
        self.podman('exec', container, 'chmod', '0644', UNAME_SHIM, '/etc/ld.so.preload')

    def images(self, operating_system, branch, fabric_manager, keep=()):
        """(base image, provisioned image) of a node, built when missing, with the host packages, under the machine-wide
        build lock (the host packages first: prepare() needs ssh-keygen); stale images of the same kinds are pruned."""
        with build_lock():
            self.ensure_host_packages()
            self.ensure_inotify_instances()
            self.prepare()
            base = self.base_image(operating_system)
            if operating_system == 'rocky9':
                image = self.provisioned_rocky9_image(base, branch, fabric_manager)
            else:
                image = self.provisioned_image(base, branch, fabric_manager)
            self.prune_images({base, image} | set(keep), operating_system)
        return base, image

    def prune_images(self, keep, operating_system='debian12'):
        """Remove node images built from earlier inputs: an image of the same kind as one in ``keep`` (``base``,
        ``550-fm``, ...; image_kind) and the same node operating system, with another hash. Images of other kinds (another
        driver branch a fleet beside this one runs, the other operating system) stay; images a container still uses are
        refused by podman and stay."""
        kinds = set(image_kind(reference) for reference in keep) - {None}
        listed = self.podman('images', '--format', '{{.Repository}}:{{.Tag}}', IMAGE_REPO, check=False)
        for reference in listed.stdout.split():
            if reference not in keep and image_kind(reference) in kinds and self.image_os(reference) == operating_system:
                self.podman('rmi', reference, check=False)

    def prebuild(self, operating_systems, branch='550', profile='h100-sxm-8'):
        """Install the host packages (Slurm's too) and build the node images of ``up``'s defaults for each of
        ``operating_systems``, so that the fleets of a test run find them (make test starts this beside its first
        suites)."""
        import slurm_sim  # pylint: disable=import-outside-toplevel,import-error
        started = time.time()
        fabric_manager = node_state.make_hardware('x', profile).get('nvswitch_count', 0) > 0
        built = []
        for operating_system in operating_systems:
            if operating_system not in OPERATING_SYSTEMS:
                raise FleetError('unknown node operating system %s; known: %s' % (operating_system, ', '.join(OPERATING_SYSTEMS)))
            built.extend(self.images(operating_system, branch, fabric_manager))
        with build_lock():
            slurm_sim.ensure_packages()
        log('host packages and node images ready in %.0fs' % (time.time() - started))
        return built

    def wait_for_systemd(self, container, timeout=90):
        deadline = time.time() + timeout
        while time.time() < deadline:
            process = self.podman('exec', container, 'systemctl', 'is-system-running', check=False)
            if process.stdout.strip() in ('running', 'degraded'):
                return process.stdout.strip()
            time.sleep(0.5)
        raise FleetError('%s: systemd did not finish booting in %ds' % (container, timeout))

    # ------------------------------------------------------------------ nodes

    @staticmethod
    def _write_json(path, data):
        temporary = path + '.tmp'
        with open(temporary, 'w', encoding='utf-8') as handle:
            json.dump(data, handle, indent=2, sort_keys=True)
            handle.write('\n')
        os.replace(temporary, path)

    def container(self, node):
        """Container name: the node name behind a short hash of the state folder, so two fleets can coexist."""
        return 'gpufleet-sim-%s-%s' % (hashlib.sha256(self.state_dir.encode('utf-8')).hexdigest()[:6], node)

    def node_dir(self, node):
        return os.path.join(self.state_dir, 'nodes', node)

    def start_node(self, node, spec, image, key):
        folder = self.node_dir(node)
        etc = os.path.join(folder, 'etc')
        os.makedirs(etc, exist_ok=True)
        os.makedirs(os.path.join(folder, 'var'), exist_ok=True)
        hardware = os.path.join(etc, 'hardware.json')
        if not os.path.exists(hardware):
            self._write_json(hardware, node_state.make_hardware(node, spec['profile']))
        if not os.path.exists(os.path.join(etc, 'faults.json')):
            self._write_json(os.path.join(etc, 'faults.json'), {})
        sshd = os.path.join(folder, 'sshd.conf')
        with open(sshd, 'w', encoding='utf-8') as handle:
            handle.write('# gpufleet simulated node %s\nPort %d\nListenAddress 127.0.0.1\nPermitRootLogin prohibit-password\n'
                         'PasswordAuthentication no\nUseDNS no\n' % (node, spec['ssh_port']))
        authorized = os.path.join(folder, 'authorized_keys')
        shutil.copyfile(key + '.pub', authorized)
        os.chmod(authorized, 0o600)
        self.podman('run', '-d', '--name', self.container(node), '--hostname', node, '--network', 'host',
                    '--systemd=always', '--restart=always', '--label', LABEL + '=' + self.state_dir, '--mount', PROC_DRIVER_MOUNT,
                    '-v', '%s:/usr/lib/gpufleet-sim/gpufleet_sim:ro' % os.path.join(HERE, 'node', 'gpufleet_sim'),
                    '-v', '%s:/srv/gpufleet-repo:ro' % spec['repo'],
                    *(['-v', '%s:/srv/gpufleet-rpm:ro' % spec['rpm_repo']] if spec.get('rpm_repo') else []),
                    '-v', '%s:/etc/gpufleet-sim' % etc,
                    '-v', '%s:/var/lib/gpufleet-sim' % os.path.join(folder, 'var'),
                    '-v', '%s:/etc/ssh/sshd_config.d/gpufleet-node.conf:ro' % sshd,
                    '-v', '%s:/root/.ssh/authorized_keys:ro' % authorized,
                    image, '/sbin/init')

    def running(self, node):
        process = self.podman('container', 'inspect', '--format', '{{.State.Running}}', self.container(node), check=False)
        return process.returncode == 0 and process.stdout.strip() == 'true'

    def wait_for_ssh(self, node, port, key, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.ssh(node, port, key, ['true'], check=False).returncode == 0:
                return
            time.sleep(0.5)
        raise FleetError('%s: sshd on 127.0.0.1:%d did not answer in %ds' % (node, port, timeout))

    @staticmethod
    def ssh_options(key):
        return ['-i', key, '-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-o', 'LogLevel=ERROR',
                '-o', 'BatchMode=yes', '-o', 'ConnectTimeout=5']

    def ssh(self, node, port, key, command, check=True):
        del node
        return run(['ssh'] + self.ssh_options(key) + ['-p', str(port), 'root@127.0.0.1', '--'] + command, check=check, timeout=60)

    # ------------------------------------------------------------------ commands

    def up(self, count, scheduler, branch, profile, prefix, fabric_manager=None, base_port=SSH_BASE_PORT, bmc=False,
           bmc_base_port=BMC_BASE_PORT, operating_system='debian12'):
        if count < 1 or count > 64:
            raise FleetError('--nodes must be between 1 and 64')
        if not NODE_NAME.match(prefix + '01'):
            raise FleetError('invalid node name prefix %r' % prefix)
        if branch not in PROVISION:
            raise FleetError('unknown driver branch %s; known: %s' % (branch, ', '.join(sorted(PROVISION))))
        started = time.time()
        if operating_system not in OPERATING_SYSTEMS:
            raise FleetError('unknown node operating system %s; known: %s' % (operating_system, ', '.join(OPERATING_SYSTEMS)))
        if fabric_manager is None:
            fabric_manager = node_state.make_hardware('x', profile).get('nvswitch_count', 0) > 0
        config = self.load() or {'nodes': {}, 'scheduler': None}
        dummy, image = self.images(operating_system, branch, fabric_manager, keep=set(spec['image'] for spec in config['nodes'].values()))
        key = self.prepare()
        repo = self.repository()
        rpm_repo = self.rpm_repository() if operating_system == 'rocky9' else None
        wanted = ['%s%02d' % (prefix, index) for index in range(1, count + 1)]
        for node in wanted:
            config['nodes'].setdefault(node, {'ssh_port': None, 'profile': profile, 'branch': branch, 'image': image, 'repo': repo,
                                              'os': operating_system, 'rpm_repo': rpm_repo})
        self.assign_ports(config, [node for node in wanted if not self.running(node)], base_port)

        def bring_up(node):
            spec = config['nodes'][node]
            if not self.running(node):
                self.podman('rm', '-f', self.container(node), check=False)
                self.start_node(node, spec, spec['image'], key)
            self.wait_for_ssh(node, spec['ssh_port'], key)
            return node

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(bring_up, wanted))
        wrong = [row for row in self.identities(config, key) if not row['identity_ok']]
        if wrong:
            raise FleetError('inventory hosts do not reach their own node: %s' % '; '.join(
                '%s on 127.0.0.1:%s answers as %r' % (row['node'], row['ssh_port'], row['identity']) for row in wrong))
        config['scheduler'] = scheduler
        self.save(config)
        if scheduler == 'slurm':
            self.slurm_up(config)
        elif scheduler in ('kubernetes', 'runai'):
            self.kube_up(config)
        if bmc or config.get('bmc'):
            self.bmc_up(config, bmc_base_port)
        inventory = self.write_inventory(config, key)
        log('fleet of %d node(s) up in %.0fs; inventory: %s' % (len(config['nodes']), time.time() - started, inventory))
        return inventory

    def assign_ports(self, config, nodes, base_port, kind='ssh_port'):
        """Give each of ``nodes`` (whose sshd, or BMC for ``kind='bmc_port'``, is not running) a port no other node of
        any fleet on this machine holds.

        A node keeps the port it had when that port is still free; otherwise it gets a new one.  The choice is
        recorded in fleet.json and in the machine-wide registry under one lock, so fleets coming up side by side
        never share a port, and a node's SSH and BMC ports never collide.
        """
        other = 'bmc_port' if kind == 'ssh_port' else 'ssh_port'
        with port_registry() as registry:
            taken = set(int(port) for port, owner in registry.items() if owner != self.state_dir)
            taken |= set(spec[other] for spec in config['nodes'].values() if spec.get(other))
            taken |= set(spec[kind] for node, spec in config['nodes'].items() if node not in nodes and spec.get(kind))
            fresh = []
            for node in nodes:
                port = config['nodes'][node].get(kind)
                if port and port not in taken and port_is_free(port):
                    taken.add(port)
                else:
                    fresh.append(node)
            for node, port in zip(fresh, pick_ports(len(fresh), base_port, taken, port_is_free)):
                config['nodes'][node][kind] = port
            ports = [spec[key] for spec in config['nodes'].values() for key in ('ssh_port', 'bmc_port') if spec.get(key)]
            if len(set(ports)) != len(ports):
                raise FleetError('internal error: two nodes share a port: %s' % ports)
            self.save(config)
            for spec in config['nodes'].values():
                if spec.get(kind):
                    registry[str(spec[kind])] = self.state_dir

    def identities(self, config, key):
        """For every node: which node answers on its SSH port (``uname -n`` over real SSH, as Ansible connects)."""
        def ask(item):
            node, spec = item
            process = self.ssh(node, spec['ssh_port'], key, ['uname', '-n'], check=False)
            answer = process.stdout.strip() if process.returncode == 0 else None
            return {'node': node, 'ssh_port': spec['ssh_port'], 'identity': answer, 'identity_ok': answer == node}

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            return list(pool.map(ask, sorted(config['nodes'].items())))

    def slurm_up(self, config):
        import slurm_sim  # pylint: disable=import-outside-toplevel,import-error
        slurm_sim.ensure_packages()
        reboot = [sys.executable, os.path.join(HERE, 'fleet.py'), '--state-dir', self.state_dir, 'reboot-node']
        config['slurm_env'] = slurm_sim.up(os.path.join(self.state_dir, 'slurm'), sorted(config['nodes']), gpus=8, reboot_command=reboot)
        self.save(config)

    def kube_up(self, config):
        config['kubeconfig'] = kube_fleet.serve_fleet(os.path.join(self.state_dir, 'kube'), sorted(config['nodes']))
        self.save(config)

    # ------------------------------------------------------------------ BMCs (up --bmc)

    def bmc_dir(self):
        return os.path.join(self.state_dir, 'bmc')

    def bmc_credentials(self):
        """(path, {"user", "password"}) of the fleet's BMC account, generated once per fleet (mode 0600; a secret)."""
        path = os.path.join(self.bmc_dir(), 'credentials.json')
        if not os.path.exists(path):
            os.makedirs(self.bmc_dir(), mode=0o700, exist_ok=True)
            descriptor = os.open(path + '.tmp', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, 'w', encoding='utf-8') as handle:
                json.dump({'user': BMC_USER, 'password': secrets.token_urlsafe(18)}, handle)
            os.replace(path + '.tmp', path)
        with open(path, encoding='utf-8') as handle:
            return path, json.load(handle)

    def bmc_certificate(self):
        """(cert, key) of the BMCs' self-signed certificate for 127.0.0.1, generated once per fleet with openssl."""
        cert, key = os.path.join(self.bmc_dir(), 'cert.pem'), os.path.join(self.bmc_dir(), 'key.pem')
        if not (os.path.exists(cert) and os.path.exists(key)):
            os.makedirs(self.bmc_dir(), mode=0o700, exist_ok=True)
            run(['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '825',
                 '-subj', '/CN=gpufleet-sim-bmc', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost',
                 '-keyout', key, '-out', cert])
            os.chmod(key, 0o600)
        return cert, key

    def bmc_pid(self, node, port=None):
        """Pid of the running BMC of ``node`` of this fleet (on ``port`` when given), or None."""
        try:
            with open(os.path.join(self.bmc_dir(), node + '.pid'), encoding='utf-8') as handle:
                pid = int(handle.read().strip())
            with open('/proc/%d/cmdline' % pid, 'rb') as handle:
                argv = handle.read().decode('utf-8', 'replace').split('\0')
        except (OSError, ValueError):
            return None
        options = dict(zip(argv, argv[1:]))
        if BMC_SERVER not in argv or options.get('--fleet') != self.state_dir or options.get('--node') != node:
            return None
        if port is not None and options.get('--port') != str(port):
            return None
        return pid

    def bmc_up(self, config, base_port=BMC_BASE_PORT, timeout=30):
        """One HTTPS Redfish BMC per node (tests/sim/redfish/), started where none runs; waits until each answers."""
        credentials, dummy = self.bmc_credentials()
        cert, key = self.bmc_certificate()
        nodes = sorted(config['nodes'])
        stopped = [node for node in nodes if not self.bmc_pid(node, config['nodes'][node].get('bmc_port'))]
        self.assign_ports(config, stopped, base_port, kind='bmc_port')
        for node in stopped:
            folder = self.node_dir(node)
            argv = [sys.executable, BMC_SERVER, '--node', node, '--port', str(config['nodes'][node]['bmc_port']),
                    '--cert', cert, '--key', key, '--credentials', credentials, '--container', self.container(node),
                    '--containers-conf', self.containers_conf, '--faults', os.path.join(folder, 'etc', 'faults.json'),
                    '--hardware', os.path.join(folder, 'etc', 'hardware.json'), '--fleet', self.state_dir]
            with open(os.path.join(self.bmc_dir(), node + '.log'), 'a', encoding='utf-8') as output:
                process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,  # pylint: disable=consider-using-with
                                           start_new_session=True, close_fds=True)
            with open(os.path.join(self.bmc_dir(), node + '.pid'), 'w', encoding='utf-8') as handle:
                handle.write('%d\n' % process.pid)
        config['bmc'] = True
        self.save(config)
        deadline = time.time() + timeout
        for node in nodes:
            port = config['nodes'][node]['bmc_port']
            while True:
                try:
                    self.bmc_request(port, '/redfish/v1/', cert)
                    break
                except (OSError, ValueError) as exc:
                    if not self.bmc_pid(node) or time.time() > deadline:
                        with open(os.path.join(self.bmc_dir(), node + '.log'), encoding='utf-8') as handle:
                            tail = handle.read()[-2000:]
                        raise FleetError('%s: BMC on 127.0.0.1:%d did not answer (%s); its log %s:\n%s' % (
                            node, port, exc, os.path.join(self.bmc_dir(), node + '.log'), tail)) from None
                    time.sleep(0.2)
        log('BMCs of %d node(s) on %s' % (len(nodes), ', '.join('127.0.0.1:%d' % config['nodes'][node]['bmc_port'] for node in nodes)))

    @staticmethod
    def bmc_request(port, path, cert, credentials=None, timeout=10):
        """GET a BMC document over HTTPS, verifying the fleet's own certificate; basic auth when ``credentials``."""
        headers = {'Accept': 'application/json', 'OData-Version': '4.0'}
        if credentials:
            token = base64.b64encode(('%s:%s' % (credentials['user'], credentials['password'])).encode('utf-8')).decode('ascii')
            headers['Authorization'] = 'Basic ' + token
        context = ssl.create_default_context(cafile=cert)
        request = urllib.request.Request('https://127.0.0.1:%d%s' % (port, path), headers=headers)
        with urllib.request.urlopen(request, context=context, timeout=timeout) as response:
            return json.load(response)

    def bmc_power_states(self, config):
        """{node: (power state or None, error or None)} read from each node's BMC (Systems/1 PowerState)."""
        dummy, credentials = self.bmc_credentials()
        cert = os.path.join(self.bmc_dir(), 'cert.pem')

        def ask(node):
            try:
                return node, (self.bmc_request(config['nodes'][node]['bmc_port'], '/redfish/v1/Systems/1', cert, credentials)['PowerState'], None)
            except (OSError, ValueError, KeyError) as exc:
                return node, (None, str(exc))

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            return dict(pool.map(ask, sorted(node for node, spec in config['nodes'].items() if spec.get('bmc_port'))))

    def bmc_down(self, timeout=15):
        """Stop the fleet's BMC processes; return when they are gone and their ports free; forget their files."""
        if not os.path.isdir(self.bmc_dir()):
            return
        running = {}
        for name in os.listdir(self.bmc_dir()):
            if name.endswith('.pid'):
                pid = self.bmc_pid(name[:-len('.pid')])
                if pid:
                    running[name[:-len('.pid')]] = pid
                    os.kill(pid, signal.SIGTERM)
        deadline = time.time() + timeout
        while any(self.bmc_pid(node) for node in running) and time.time() < deadline:
            time.sleep(0.1)
        for node in running:
            pid = self.bmc_pid(node)
            if pid:
                os.kill(pid, signal.SIGKILL)
        # Listening is what counts: the server closes its connections first, so its side lingers in TIME_WAIT for a
        # minute, which a plain bind (port_is_free) reports as busy; pick_ports skips such a port at the next up.
        ports = [spec['bmc_port'] for spec in (self.load() or {'nodes': {}})['nodes'].values() if spec.get('bmc_port')]
        while [port for port in ports if port_listened(port)] and time.time() < deadline + 5:
            time.sleep(0.1)
        busy = [port for port in ports if port_listened(port)]
        if busy:
            raise FleetError('BMC port(s) %s still listened on after their BMCs were stopped' % busy)
        shutil.rmtree(self.bmc_dir(), ignore_errors=True)

    def write_inventory(self, config, key):
        path = os.path.join(self.state_dir, 'inventory.json')
        hosts = {}
        for node, spec in sorted(config['nodes'].items()):
            hosts[node] = {
                'ansible_host': '127.0.0.1',
                'ansible_port': spec['ssh_port'],
                'ansible_user': 'root',
                'ansible_ssh_private_key_file': key,
                'ansible_ssh_common_args': '-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null',
                'ansible_python_interpreter': '/usr/bin/python3',
            }
            if config.get('bmc') and spec.get('bmc_port'):
                credentials = self.bmc_credentials()[1]
                hosts[node].update({'gpufleet_bmc_address': '127.0.0.1:%d' % spec['bmc_port'],
                                    'gpufleet_bmc_user': credentials['user'], 'gpufleet_bmc_password': credentials['password']})
        group_vars = {'gpufleet_sim_state_dir': self.state_dir, 'gpufleet_scheduler': config.get('scheduler') or 'none'}
        if config.get('slurm_env'):
            group_vars['gpufleet_slurm_environment'] = config['slurm_env']
        if config.get('kubeconfig'):
            group_vars['gpufleet_kubeconfig'] = config['kubeconfig']
        self._write_json(path, {'all': {'children': {'gpu': {'hosts': hosts}}, 'vars': group_vars}})
        if config.get('bmc'):
            os.chmod(path, 0o600)   # it holds the BMC password
        return path

    def down(self, timeout=120):
        """Stop everything; return only when the containers are gone and their SSH ports are free again."""
        config = self.load() or {'nodes': {}}
        ports = [spec['ssh_port'] for spec in config['nodes'].values() if spec.get('ssh_port')]
        self.bmc_down()
        if os.path.isdir(os.path.join(self.state_dir, 'slurm')):
            import slurm_sim  # pylint: disable=import-outside-toplevel,import-error
            slurm_sim.down(os.path.join(self.state_dir, 'slurm'))
        if os.path.isdir(os.path.join(self.state_dir, 'kube')):
            kube_fleet.stop_fleet(os.path.join(self.state_dir, 'kube'))
        deadline = time.time() + timeout
        if os.path.exists(self.containers_conf):
            while True:
                names = self.containers()
                if not names:
                    break
                if time.time() > deadline:
                    raise FleetError('containers still present after %ds: %s' % (timeout, ', '.join(names)))
                self.podman('rm', '-f', '-t', '5', *names, timeout=300, check=False)
        busy = ports
        while True:
            busy = [port for port in ports if not port_is_free(port)]
            if not busy or time.time() > deadline:
                break
            time.sleep(0.2)
        if busy:
            raise FleetError('SSH port(s) %s still held %ds after the containers were removed' % (busy, timeout))
        config['nodes'] = {}
        config['scheduler'] = None
        config.pop('bmc', None)
        self.save(config)
        with port_registry() as registry:
            for port in [port for port, owner in registry.items() if owner == self.state_dir]:
                del registry[port]
        shutil.rmtree(os.path.join(self.state_dir, 'nodes'), ignore_errors=True)
        log('fleet down')

    def containers(self):
        """Names of this fleet's containers, running or not."""
        listed = self.podman('ps', '-a', '--filter', 'label=%s=%s' % (LABEL, self.state_dir), '--format', '{{.Names}}')
        return [name for name in listed.stdout.split() if name]

    def status(self):
        """Each node: running, SSH port, who answers on it (identity check), booted kernel and loaded driver."""
        config = self.load() or {'nodes': {}}
        key = os.path.join(self.state_dir, 'ssh', 'id_ed25519')
        identities = dict((row['node'], row) for row in self.identities(config, key)) if config['nodes'] else {}
        power = self.bmc_power_states(config) if config.get('bmc') else {}
        rows = []
        for node, spec in sorted(config['nodes'].items()):
            boot = None
            if self.running(node):
                process = self.podman('exec', self.container(node), 'cat', '/run/gpufleet-sim/boot.json', check=False)
                boot = json.loads(process.stdout) if process.returncode == 0 else None
            rows.append({'node': node, 'running': boot is not None or self.running(node), 'ssh_port': spec['ssh_port'],
                         'identity': identities[node]['identity'], 'identity_ok': identities[node]['identity_ok'],
                         'kernel': (boot or {}).get('kernel'), 'driver_loaded': (boot or {}).get('driver')})
            if node in power:
                rows[-1].update({'bmc_address': '127.0.0.1:%d' % spec['bmc_port'], 'power_state': power[node][0]})
                if power[node][1]:
                    rows[-1]['bmc_error'] = power[node][1]
        return {'scheduler': config.get('scheduler'), 'nodes': rows, 'all_reach_their_node': all(row['identity_ok'] for row in rows)}

    def set_fault(self, node, name, settings):
        config = self.load() or {'nodes': {}}
        if node not in config['nodes']:
            raise FleetError('unknown node %s; nodes: %s' % (node, ', '.join(sorted(config['nodes'])) or 'none'))
        path = os.path.join(self.node_dir(node), 'etc', 'faults.json')
        previous = {}
        if os.path.exists(path):
            with open(path, encoding='utf-8') as handle:
                previous = json.load(handle)
        faults = {}
        if name != 'clear':
            faults = dict(previous)
            faults[name] = fleet_faults.parse_fault_settings(name, settings)
        self._write_json(path, faults)
        if name == 'clear':
            for command in fleet_faults.stop_commands(previous):
                self.podman('exec', self.container(node), *command, check=False)
        if name == 'xid':
            fleet_faults.append_xid(os.path.join(self.node_dir(node), 'var'), self.hardware(node), faults['xid'])
        if name == 'long_job':
            self.start_long_job(config, node, faults['long_job'])
        command = fleet_faults.node_command(name, faults.get(name, {})) if name != 'clear' else None
        if command:
            self.podman('exec', self.container(node), *command)
        return faults

    def nccl_tests(self, nodes, remove=False):
        """Install nccl-tests' all_reduce_perf on ``nodes`` (``/usr/local/bin``, as an operator copies a build onto a node),
        or remove it; returns ``{node: what the node answered}``."""
        config = self.load() or {'nodes': {}}
        unknown = [node for node in nodes if node not in config['nodes']]
        if unknown:
            raise FleetError('unknown node(s) %s; nodes: %s' % (', '.join(unknown), ', '.join(sorted(config['nodes'])) or 'none'))
        done = {}
        for node in nodes:
            process = self.podman('exec', self.container(node), 'env', fleet_faults.NODE_PYTHONPATH, 'python3', '-m',
                                  'gpufleet_sim.nccl_tests', 'remove' if remove else 'install')
            done[node] = process.stdout.strip()
        return done

    def hardware(self, node):
        with open(os.path.join(self.node_dir(node), 'etc', 'hardware.json'), encoding='utf-8') as handle:
            return json.load(handle)

    def start_long_job(self, config, node, settings):
        seconds = int(settings['seconds'])   # parse_fault_settings applied the fault table's default
        if config.get('scheduler') == 'slurm':
            import slurm_sim  # pylint: disable=import-outside-toplevel,import-error
            settings['job_id'] = slurm_sim.submit_job(config['slurm_env'], node, seconds)
        elif config.get('scheduler') in ('kubernetes', 'runai'):
            settings['pod'] = kube_fleet.add_long_pod(os.path.join(self.state_dir, 'kube'), node, seconds)

    def reboot_node(self, node):
        """Reboot a node the way its OS would (systemd inside the container), used by Slurm's RebootProgram.

        A node shaped ``no-systemd`` keeps its systemctl out of sight (fleet_shapes.py): the private copy reboots it.
        """
        for systemctl in ('systemctl', fleet_shapes.PRIVATE_SYSTEMCTL):
            if self.podman('exec', self.container(node), systemctl, 'reboot', check=False).returncode == 0:
                return
        self.podman('restart', '-t', '5', self.container(node))

    def shape(self, node, shape=None, driver=None, is_open=False):
        """Give ``node`` a shape real nodes come in (fleet_shapes.py); returns the steps taken and what the node is now."""
        config = self.load() or {'nodes': {}}
        if node not in config['nodes']:
            raise FleetError('unknown node %s; nodes: %s' % (node, ', '.join(sorted(config['nodes'])) or 'none'))
        spec = config['nodes'][node]
        default = PROVISION[spec['branch']][0][1].split('-')[0]
        try:
            return fleet_shapes.apply(self, node, shape, driver, is_open, default_version=default,
                                      operating_system=spec.get('os', 'debian12'))
        except fleet_shapes.ShapeError as exc:
            raise FleetError(str(exc)) from None

    def molecule_env(self, branch, profile, instance):
        """Build what a molecule scenario needs for one node from the simulated image; return its variables.

        molecule's podman driver starts the container; this prepares the image, the package repository,
        the fake tools' path and a hardware/fault folder for ``instance``.
        """
        fabric_manager = node_state.make_hardware('x', profile).get('nvswitch_count', 0) > 0
        dummy, image = self.images('debian12', branch, fabric_manager)
        etc = os.path.join(self.state_dir, 'molecule', instance, 'etc')
        os.makedirs(etc, exist_ok=True)
        self._write_json(os.path.join(etc, 'hardware.json'), node_state.make_hardware(instance, profile))
        self._write_json(os.path.join(etc, 'faults.json'), {})
        return {
            'CONTAINERS_CONF': self.containers_conf,
            'GPUFLEET_SIM_IMAGE': image,
            'GPUFLEET_SIM_REPO': self.repository(),
            'GPUFLEET_SIM_CODE': os.path.join(HERE, 'node', 'gpufleet_sim'),
            'GPUFLEET_SIM_NODE_ETC': etc,
            # The container's name behind the state folder's hash, as the fleet's nodes: two checkouts' scenarios coexist.
            'GPUFLEET_MOLECULE_NODE': 'gpufleet-molecule-%s-%s' % (hashlib.sha256(self.state_dir.encode('utf-8')).hexdigest()[:6], instance),
        }

    def exec_node(self, node, command):
        process = subprocess.run(['podman', 'exec', self.container(node)] + command, env=self.podman_env(), check=False)
        return process.returncode


def main(argv=None):
    parser = argparse.ArgumentParser(prog='tests/sim/fleet', description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--state-dir', default=os.environ.get('GPUFLEET_SIM_STATE', os.path.join(ROOT, 'build', 'sim')))
    commands = parser.add_subparsers(dest='command', required=True)
    up = commands.add_parser('up', help='bring the fleet up (idempotent); prints the inventory path')
    up.add_argument('--nodes', type=int, default=4)
    up.add_argument('--scheduler', choices=['slurm', 'kubernetes', 'runai', 'none'], default='none')
    up.add_argument('--driver', default='550', help='driver branch the nodes start on (%s)' % ', '.join(sorted(PROVISION)))
    up.add_argument('--profile', default='h100-sxm-8', help='GPU profile: %s' % ', '.join(node_state.PROFILES))
    up.add_argument('--os', default='debian12', choices=OPERATING_SYSTEMS, dest='operating_system',
                    help='node operating system: debian12 (apt) or rocky9 (real dnf and rpm, Rocky Linux 9 facts); nodes already in the '
                         'fleet keep theirs, so "up --nodes 1 --prefix rocky- --os rocky9" adds a Rocky node to a Debian fleet')
    up.add_argument('--prefix', default='gpu-', help='node name prefix (nodes are PREFIX01, PREFIX02, ...)')
    up.add_argument('--ssh-base-port', type=int, default=SSH_BASE_PORT,
                    help='first loopback port to try for the nodes\' sshd (default %(default)s; ports of every fleet on '
                         'this machine are recorded in ' + PORT_REGISTRY.replace('%', '%%') + ' and never handed out twice)')
    up.add_argument('--bmc', action='store_true',
                    help='also start one HTTPS Redfish BMC per node (tests/sim/redfish/README.md); kept until down')
    up.add_argument('--bmc-base-port', type=int, default=BMC_BASE_PORT,
                    help='first loopback port to try for the BMCs (default %(default)s; same registry as the SSH ports)')
    commands.add_parser('down', help='stop every container and process of the fleet')
    commands.add_parser('status', help='nodes, booted kernel and loaded driver, power state from the BMC with --bmc (JSON)')
    commands.add_parser('inventory', help='print the inventory path')
    fault = commands.add_parser('fault', help='set a fault on a node (see tests/sim/README.md), or "clear"')
    fault.add_argument('node')
    fault.add_argument('name', choices=sorted(fleet_faults.FAULTS) + ['clear'])
    fault.add_argument('settings', nargs='*', help='key=value')
    nccl = commands.add_parser('nccl-tests', help='install nccl-tests all_reduce_perf on nodes (or --remove it)')
    nccl.add_argument('nodes', nargs='+')
    nccl.add_argument('--remove', action='store_true')
    shape = commands.add_parser('shape', help='give a node a shape real nodes come in: %s (tests/sim/README.md); '
                                              'without SHAPE print what the node is (JSON)' % ', '.join(fleet_shapes.SHAPES))
    shape.add_argument('node')
    shape.add_argument('shape', nargs='?', choices=fleet_shapes.SHAPES)
    shape.add_argument('--driver', help='driver release of the driver shapes (default: the node\'s driver)')
    shape.add_argument('--open', action='store_true', help='the open kernel module (default: proprietary)')
    reboot = commands.add_parser('reboot-node', help='reboot one node (Slurm RebootProgram)')
    reboot.add_argument('node')
    molecule = commands.add_parser('molecule-env', help='prepare image and files for a molecule scenario; print its environment (JSON)')
    molecule.add_argument('--driver', default='550')
    molecule.add_argument('--profile', default='h100-sxm-8')
    molecule.add_argument('--instance', default='gpu-01')
    prebuild = commands.add_parser('prebuild', help='install the host packages and build the node images (of --driver and --profile) '
                                                    'for each --os; prints the images')
    prebuild.add_argument('--os', action='append', choices=OPERATING_SYSTEMS, dest='operating_systems')
    prebuild.add_argument('--driver', default='550')
    prebuild.add_argument('--profile', default='h100-sxm-8')
    execute = commands.add_parser('exec', help='run a command in a node')
    execute.add_argument('node')
    execute.add_argument('cmd', nargs=argparse.REMAINDER)
    arguments = parser.parse_args(argv)
    fleet = Fleet(arguments.state_dir)
    try:
        if arguments.command == 'up':
            print(fleet.up(arguments.nodes, arguments.scheduler, arguments.driver, arguments.profile, arguments.prefix,
                           base_port=arguments.ssh_base_port, bmc=arguments.bmc, bmc_base_port=arguments.bmc_base_port,
                           operating_system=arguments.operating_system))
        elif arguments.command == 'down':
            fleet.down()
        elif arguments.command == 'status':
            status = fleet.status()
            print(json.dumps(status, indent=2))
            return 0 if status['all_reach_their_node'] else 3
        elif arguments.command == 'inventory':
            print(os.path.join(fleet.state_dir, 'inventory.json'))
        elif arguments.command == 'fault':
            print(json.dumps(fleet.set_fault(arguments.node, arguments.name, arguments.settings)))
        elif arguments.command == 'nccl-tests':
            print(json.dumps(fleet.nccl_tests(arguments.nodes, remove=arguments.remove)))
        elif arguments.command == 'shape':
            print(json.dumps(fleet.shape(arguments.node, arguments.shape, arguments.driver, arguments.open), indent=2, sort_keys=True))
        elif arguments.command == 'reboot-node':
            fleet.reboot_node(arguments.node)
        elif arguments.command == 'molecule-env':
            print(json.dumps(fleet.molecule_env(arguments.driver, arguments.profile, arguments.instance)))
        elif arguments.command == 'prebuild':
            print('\n'.join(fleet.prebuild(arguments.operating_systems or ['debian12'], arguments.driver, arguments.profile)))
        elif arguments.command == 'exec':
            command = arguments.cmd[1:] if arguments.cmd[:1] == ['--'] else arguments.cmd
            return fleet.exec_node(arguments.node, command)
    except (FleetError, fleet_faults.FaultError) as exc:
        sys.stderr.write('fleet: error: %s\n' % exc)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
