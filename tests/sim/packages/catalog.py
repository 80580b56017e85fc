# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The dummy NVIDIA package set of the simulated GPU fleet, as data.

Every package has the real name and version string of NVIDIA's CUDA repository for
Ubuntu/Debian (Debian's own names for ``dkms`` and the kernel images) and the
relationships that matter to apt.  The packages hold no NVIDIA software: each tool is a
``#!/bin/sh`` wrapper that runs the matching fake in ``/usr/lib/gpufleet-sim/gpufleet_sim``
(bind-mounted into every node), and every package ships
``/usr/share/gpufleet-sim/versions/<package>`` holding its upstream version.

How branches exclude each other (as Ubuntu's ``nvidia-graphics-drivers-<branch>`` packages
do): each per-branch piece *Provides* a branch-independent virtual name and
*Conflicts*/*Replaces* that name - ``nvidia-kernel-common``, ``nvidia-dkms-kernel``,
``libnvidia-compute``, ``nvidia-utils``, ``nvidia-compute-utils`` and (NVIDIA's Fabric
Manager packages) ``nvidia-fabricmanager``.  So apt never keeps two branches of one piece:
installing the 580 driver on a 550 node removes every 550 piece, as on metal.  The real
packages allow no co-installation of two branches either, so none is allowed here; a node
with a stray, half-installed second branch is made the way it happens on metal, by dpkg
forced or interrupted, e.g.::

    dpkg --force-conflicts --force-depends --unpack nvidia-dkms-550_550.127.05-0ubuntu1_amd64.deb

which leaves ``nvidia-dkms-550`` unpacked but not configured (``iU``) beside the 580
driver (see :data:`STRAY_RECIPE`).  The two kernel images, the three container toolkit
versions (one package name each) and the two CUDA toolkits (``cuda-X.Y`` directories) are
co-installable like the real ones.  DCGM 4 (``datacenter-gpu-manager-4-core``)
Conflicts/Replaces DCGM 3 (``datacenter-gpu-manager``).

Where this set is simpler than NVIDIA's (documented so nobody mistakes it for the real
dependency graph):

* ``nvidia-driver-<B>-server``, ``-open`` and ``-server-open`` depend on the un-suffixed pieces
  (``nvidia-utils-<B>`` ...) as NVIDIA's CUDA repository builds them, not on Ubuntu
  archive ``-server`` pieces; firmware, GL, X11, ``nvidia-kernel-source`` and
  ``libnvidia-cfg1`` packages are left out.  The kernel module comes in Ubuntu's four
  DKMS flavours, ``nvidia-dkms-<B>`` and ``-server`` (proprietary), ``-open`` and
  ``-server-open`` (the open module, ``OPEN=yes``), which exclude each other; the
  ``-server`` meta keeps ``nvidia-dkms-<B>``, the ``-open`` meta ``nvidia-dkms-<B>-open``
  and the ``-server-open`` meta ``nvidia-dkms-<B>-server-open``.
* ``cuda-drivers-<B>`` depends on ``nvidia-driver-<B>-server (= V) | nvidia-driver-<B>-open (= V)``
  (apt picks the server driver unless the open one is installed or asked for).
* ``cuda-toolkit-X-Y`` ships ``nvcc`` itself instead of depending on ``cuda-nvcc-X-Y``.
* No package depends on ``python3`` (the node image has it) or on Debian's build tools.

Metas pin their pieces with ``(= V)`` as the real ones do, so -- exactly as with real apt --
``apt-get install nvidia-driver-580-server=580.65.06-0ubuntu1`` alone fails while a newer
580 point release is in the repository; :func:`exact_install` gives the full argument list
(the way NVIDIA's instructions install an older release).

Stdlib only; importable by Python 3.8+.
"""

import re

MAINTAINER = 'gpufleet.lifecycle simulated fleet <sim@gpufleet.invalid>'
HOMEPAGE = 'https://github.com/gpufleet/lifecycle'
SIM_LIB = '/usr/lib/gpufleet-sim'
VERSIONS_DIR = '/usr/share/gpufleet-sim/versions'
LIBDIR = '/usr/lib/x86_64-linux-gnu'
UNIT_DIR = '/lib/systemd/system'
REPO_LINE = 'deb [trusted=yes] file:/srv/gpufleet-repo ./'
FABRICMANAGER_CFG = '/usr/share/nvidia/nvswitch/fabricmanager.cfg'

# Driver releases: upstream version -> branch.  Ubuntu-style packages get '-0ubuntu1',
# NVIDIA's own metas and Fabric Manager '-1' (as in NVIDIA's CUDA repository).
DRIVERS = ('550.127.05', '580.65.06', '580.82.07')
KERNELS = (('6.1.0-26-amd64', '6.1.112-1'), ('6.1.0-28-amd64', '6.1.119-1'))
DKMS_VERSION = '3.0.10-8'
CONTAINER_TOOLKIT = ('1.16.2-1', '1.17.0-1', '1.17.8-1')
DCGM3 = ('1:3.3.9',)
DCGM4 = ('1:4.1.0-1', '1:4.2.3-1')
CUDA_TOOLKITS = (('12.4', '12.4.1-1'), ('13.0', '13.0.2-1'))

STRAY_RECIPE = ('dpkg --force-conflicts --force-depends --unpack '
                '/srv/gpufleet-repo/nvidia-dkms-550_550.127.05-0ubuntu1_amd64.deb')

_MAINT_GUARD = """\
# Injected dpkg failure (tests/sim/fleet fault NODE dpkg_fail); skipped where the simulation is not mounted.
if [ -e {lib}/gpufleet_sim/maint.py ] || [ -e {lib}/gpufleet_sim/maint/__init__.py ]; then
    PYTHONPATH={lib} python3 -m gpufleet_sim.maint preinst {package} || exit 1
fi
"""


def upstream_version(version):
    """The upstream part of a Debian version: no epoch, no Debian revision."""
    if ':' in version:
        version = version.split(':', 1)[1]
    if '-' in version:
        version = version.rsplit('-', 1)[0]
    return version


def deb_filename(package):
    """``name_version_arch.deb`` (the epoch is left out, as in Debian's pool)."""
    version = package['version'].split(':', 1)[-1]
    return '%s_%s_%s.deb' % (package['package'], version, package['architecture'])


def wrapper(package, module):
    """The text of a wrapper that runs the fake ``gpufleet_sim.<module>`` as ``package``'s tool."""
    return ('#!/bin/sh\n# %s: simulated tool (gpufleet.lifecycle test fleet); the code is bind-mounted from the host.\n'
            'GPUFLEET_SIM_PACKAGE=%s PYTHONPATH=%s exec python3 -m gpufleet_sim.%s "$@"\n' % (package, package, SIM_LIB, module))


def _script(body, nvidia=None):
    """A maintainer script: ``#!/bin/sh``, ``set -e``, the injected-failure hook for NVIDIA packages, body."""
    text = '#!/bin/sh\nset -e\n'
    if nvidia:
        text += _MAINT_GUARD.format(lib=SIM_LIB, package=nvidia)
    return text + body + 'exit 0\n'


def _file(path, content, mode=0o644):
    return {'path': path, 'content': content, 'mode': mode}


def _link(path, target):
    return {'path': path, 'symlink': target}


def _relations(*items):
    return [item for item in items if item]


def _package(name, version, summary, section, files=(), architecture='amd64', nvidia=True, **fields):
    """One package record; adds the versions file and the NVIDIA preinst hook."""
    raw = fields.pop('scripts', {})
    scripts = {}
    for key in ('preinst', 'postinst', 'prerm', 'postrm'):
        if key == 'preinst' and nvidia:
            scripts[key] = _script(raw.get(key, ''), nvidia=name)
        elif raw.get(key):
            scripts[key] = _script(raw[key])
    record = {
        'package': name,
        'version': version,
        'architecture': architecture,
        'section': section,
        'priority': 'optional',
        'maintainer': MAINTAINER,
        'summary': summary,
        'depends': [],
        'pre_depends': [],
        'conflicts': [],
        'breaks': [],
        'replaces': [],
        'provides': [],
        'conffiles': [],
        'files': list(files) + [_file('%s/%s' % (VERSIONS_DIR, name), upstream_version(version) + '\n')],
        'scripts': scripts,
    }
    for key, value in fields.items():
        if key not in record:
            raise KeyError('unknown package field %r for %s' % (key, name))
        record[key] = list(value)
    return record


# ---------------------------------------------------------------------------- services

def _unit(description, exec_start, unit_type='simple', restart='no'):
    return ('[Unit]\nDescription=%s (gpufleet.lifecycle simulation)\nAfter=gpufleet-sim-boot.service\n\n'
            '[Service]\nType=%s\nExecStart=%s\nRestart=%s\n\n[Install]\nWantedBy=multi-user.target\n'
            % (description, unit_type, exec_start, restart))


def _service_scripts(unit, enable):
    """dh_installsystemd-like snippets: enable on install only when ``enable``; never start."""
    postinst = ''
    if enable:
        postinst = ('if [ "$1" = configure ] || [ "$1" = abort-upgrade ]; then\n'
                    '    if command -v deb-systemd-helper >/dev/null 2>&1; then\n'
                    '        deb-systemd-helper unmask %(u)s >/dev/null || true\n'
                    '        if deb-systemd-helper --quiet was-enabled %(u)s; then\n'
                    '            deb-systemd-helper enable %(u)s >/dev/null || true\n'
                    '        else\n'
                    '            deb-systemd-helper update-state %(u)s >/dev/null || true\n'
                    '        fi\n'
                    '    fi\n'
                    'fi\n' % {'u': unit})
    postinst += ('if [ -d /run/systemd/system ]; then\n'
                 '    systemctl --system daemon-reload >/dev/null 2>&1 || true\n'
                 'fi\n')
    prerm = ('if [ "$1" = remove ] && [ -d /run/systemd/system ]; then\n'
             '    deb-systemd-invoke stop %s >/dev/null 2>&1 || systemctl stop %s >/dev/null 2>&1 || true\n'
             'fi\n' % (unit, unit))
    postrm = ('if [ "$1" = remove ] && [ -d /run/systemd/system ]; then\n'
              '    systemctl --system daemon-reload >/dev/null 2>&1 || true\n'
              'fi\n'
              'if [ "$1" = purge ] && command -v deb-systemd-helper >/dev/null 2>&1; then\n'
              '    deb-systemd-helper purge %s >/dev/null || true\n'
              'fi\n' % unit)
    return {'postinst': postinst, 'prerm': prerm, 'postrm': postrm}


def _merge_scripts(*parts):
    merged = {}
    for part in parts:
        for key, value in part.items():
            merged[key] = merged.get(key, '') + value
    return merged


# ---------------------------------------------------------------------------- driver

def _dkms_scripts(upstream):
    postinst = ('if [ "$1" = configure ]; then\n'
                '    # Build and install the module for every installed kernel (dkms_common.postinst does this\n'
                '    # for the running and the newest kernel; a container has no running kernel of its own).\n'
                '    for modules in /lib/modules/*/modules.order; do\n'
                '        [ -e "$modules" ] || continue\n'
                '        kernel=${modules#/lib/modules/}\n'
                '        kernel=${kernel%%/modules.order}\n'
                '        dkms install nvidia/%s -k "$kernel"\n'
                '    done\n'
                'fi\n' % upstream)
    prerm = ('case "$1" in\n'
             '    remove|upgrade|deconfigure)\n'
             '        dkms remove nvidia/%s --all || true\n'
             '        ;;\n'
             'esac\n' % upstream)
    return {'postinst': postinst, 'prerm': prerm}


def _fabricmanager_cfg():
    return ('# NVIDIA Fabric Manager configuration (gpufleet.lifecycle simulation; keys as in the real file)\n'
            'LOG_LEVEL=4\nLOG_FILE_NAME=/var/log/fabricmanager.log\nLOG_APPEND_TO_LOG=1\nLOG_FILE_MAX_SIZE=1024\n'
            'LOG_USE_SYSLOG=0\nDAEMONIZE=0\nBIND_INTERFACE_IP=127.0.0.1\nSTARTING_TCP_PORT=16000\nFABRIC_MODE=0\n'
            'FABRIC_MODE_RESTART=0\nSTATE_FILE_NAME=/var/tmp/fabricmanager.state\nFM_CMD_BIND_INTERFACE=127.0.0.1\n'
            'FM_CMD_PORT_NUMBER=6666\nFM_STAY_RESIDENT_ON_FAILURES=0\nACCESS_LINK_FAILURE_MODE=0\nTRUNK_LINK_FAILURE_MODE=0\n'
            'NVSWITCH_FAILURE_MODE=0\nABORT_CUDA_JOBS_ON_FM_EXIT=1\nTOPOLOGY_FILE_PATH=/usr/share/nvidia/nvswitch\n'
            'DATABASE_PATH=/usr/share/nvidia/nvswitch\n')


def driver_packages(upstream):
    """The packages of one driver release (``550.127.05`` ...)."""
    branch = upstream.split('.', 1)[0]
    ubuntu = upstream + '-0ubuntu1'
    nvidia = upstream + '-1'
    same = '(= %s)' % ubuntu
    packages = [
        _package('nvidia-kernel-common-%s' % branch, ubuntu, 'Shared files used with the kernel module', 'non-free/kernel',
                 provides=['nvidia-kernel-common'], conflicts=['nvidia-kernel-common'], replaces=['nvidia-kernel-common']),
    ]
    flavours = (('', False), ('-open', True), ('-server', False), ('-server-open', True))
    for flavour, is_open in flavours:
        name = 'nvidia-dkms-%s%s' % (branch, flavour)
        others = ['nvidia-dkms-%s%s' % (branch, suffix) for suffix, _open in flavours if suffix != flavour]
        conf = ('PACKAGE_NAME=nvidia\nPACKAGE_VERSION=%s\nOPEN=%s\nBUILT_MODULE_NAME[0]="nvidia"\n'
                'DEST_MODULE_LOCATION[0]="/updates/dkms"\nAUTOINSTALL="yes"\n' % (upstream, 'yes' if is_open else 'no'))
        packages.append(_package(
            name, ubuntu, 'NVIDIA DKMS package%s' % (' (open kernel module)' if is_open else ''), 'non-free/kernel',
            files=[_file('/usr/src/nvidia-%s/dkms.conf' % upstream, conf)],
            depends=['dkms', 'nvidia-kernel-common-%s %s' % (branch, same)],
            provides=['nvidia-dkms-kernel'], conflicts=['nvidia-dkms-kernel'] + others, replaces=['nvidia-dkms-kernel'] + others,
            scripts=_dkms_scripts(upstream)))
    library = '%s/libnvidia-ml.so.%s' % (LIBDIR, upstream)
    packages += [
        _package('libnvidia-compute-%s' % branch, ubuntu, 'NVIDIA libcompute package', 'non-free/libs',
                 files=[_file(library, upstream + '\n'), _link('%s/libnvidia-ml.so.1' % LIBDIR, 'libnvidia-ml.so.%s' % upstream)],
                 provides=['libnvidia-compute', 'libnvidia-ml.so.1 (= %s)' % upstream],
                 conflicts=['libnvidia-compute'], replaces=['libnvidia-compute']),
        _package('nvidia-utils-%s' % branch, ubuntu, 'NVIDIA driver support binaries', 'non-free/utils',
                 files=[_file('/usr/bin/nvidia-smi', wrapper('nvidia-utils-%s' % branch, 'nvidia_smi'), 0o755)],
                 depends=['libnvidia-compute-%s %s' % (branch, same)],
                 provides=['nvidia-utils'], conflicts=['nvidia-utils'], replaces=['nvidia-utils']),
        _package('nvidia-compute-utils-%s' % branch, ubuntu, 'NVIDIA compute utilities', 'non-free/utils',
                 files=[_file('/usr/bin/nvidia-persistenced', wrapper('nvidia-compute-utils-%s' % branch, 'nvidia_persistenced'), 0o755),
                        _file('%s/nvidia-persistenced.service' % UNIT_DIR,
                              _unit('NVIDIA Persistence Daemon', '/usr/bin/nvidia-persistenced --verbose'))],
                 depends=['libnvidia-compute-%s %s' % (branch, same)],
                 provides=['nvidia-compute-utils'], conflicts=['nvidia-compute-utils'], replaces=['nvidia-compute-utils'],
                 scripts=_service_scripts('nvidia-persistenced.service', enable=True)),
    ]
    for flavour, dkms in (('-server', 'nvidia-dkms-%s' % branch), ('-open', 'nvidia-dkms-%s-open' % branch),
                          ('-server-open', 'nvidia-dkms-%s-server-open' % branch)):
        packages.append(_package(
            'nvidia-driver-%s%s' % (branch, flavour), ubuntu, 'NVIDIA driver metapackage (%s)' % flavour[1:], 'non-free/metapackages',
            depends=['%s %s' % (piece, same) for piece in (
                'nvidia-kernel-common-%s' % branch, dkms, 'libnvidia-compute-%s' % branch,
                'nvidia-utils-%s' % branch, 'nvidia-compute-utils-%s' % branch)]))
    packages += [
        _package('cuda-drivers-%s' % branch, nvidia, 'CUDA Driver meta-package, branch-specific', 'non-free/metapackages',
                 depends=['nvidia-driver-%s-server %s | nvidia-driver-%s-open %s' % (branch, same, branch, same)]),
        _package('cuda-drivers', nvidia, 'CUDA Driver meta-package, latest branch', 'non-free/metapackages',
                 depends=['cuda-drivers-%s (= %s)' % (branch, nvidia)]),
        _package('nvidia-fabricmanager-%s' % branch, nvidia, 'Fabric Manager for NVSwitch based systems', 'non-free/utils',
                 files=[_file('/usr/bin/nv-fabricmanager', wrapper('nvidia-fabricmanager-%s' % branch, 'nv_fabricmanager'), 0o755),
                        _file(FABRICMANAGER_CFG, _fabricmanager_cfg()),
                        _file('%s/nvidia-fabricmanager.service' % UNIT_DIR,
                              _unit('NVIDIA fabric manager service', '/usr/bin/nv-fabricmanager -c %s' % FABRICMANAGER_CFG))],
                 provides=['nvidia-fabricmanager'], conflicts=['nvidia-fabricmanager'], replaces=['nvidia-fabricmanager'],
                 scripts=_service_scripts('nvidia-fabricmanager.service', enable=False)),
        _package('cuda-drivers-fabricmanager-%s' % branch, nvidia, 'Meta-package for FM and Driver, branch-specific', 'non-free/metapackages',
                 depends=['cuda-drivers-%s (= %s)' % (branch, nvidia), 'nvidia-fabricmanager-%s (= %s)' % (branch, nvidia)]),
        _package('cuda-drivers-fabricmanager', nvidia, 'Meta-package for FM and Driver, latest branch', 'non-free/metapackages',
                 depends=['cuda-drivers-fabricmanager-%s (= %s)' % (branch, nvidia)]),
    ]
    return packages


# ---------------------------------------------------------------------------- dkms and kernels

def dkms_package():
    """Debian's ``dkms`` with the fake ``/usr/sbin/dkms`` and the real kernel hooks' behaviour."""
    postinst_hook = ('#!/bin/sh\n'
                     '# dkms kernel hook (gpufleet.lifecycle simulation): build every registered module for the new kernel.\n'
                     '# Like Debian\'s hook it never fails the kernel installation.\n'
                     'inst_kern=$1\n'
                     'if [ -x /usr/sbin/dkms ]; then\n'
                     '    /usr/sbin/dkms autoinstall -k "$inst_kern" || true\n'
                     'fi\n'
                     'exit 0\n')
    prerm_hook = ('#!/bin/sh\n'
                  '# dkms kernel hook (gpufleet.lifecycle simulation): remove the modules built for the kernel being removed.\n'
                  'inst_kern=$1\n'
                  'if [ -x /usr/sbin/dkms ]; then\n'
                  '    /usr/sbin/dkms status -k "$inst_kern" 2>/dev/null | sed -n \'s|^\\([^,]*\\), [^,]*, [^:]*: installed.*|\\1|p\' |\n'
                  '    while read -r module; do\n'
                  '        echo "dkms: removing: $module ($inst_kern)" >&2\n'
                  '        /usr/sbin/dkms remove "$module" -k "$inst_kern" || true\n'
                  '    done\n'
                  'fi\n'
                  'exit 0\n')
    return _package('dkms', DKMS_VERSION, 'Dynamic Kernel Module System (DKMS)', 'kernel', architecture='all', nvidia=False,
                    files=[_file('/usr/sbin/dkms', wrapper('dkms', 'dkms'), 0o755),
                           _file('/etc/kernel/postinst.d/dkms', postinst_hook, 0o755),
                           _file('/etc/kernel/prerm.d/dkms', prerm_hook, 0o755)],
                    conffiles=['/etc/kernel/postinst.d/dkms', '/etc/kernel/prerm.d/dkms'])


def _kernel_scripts(kernel):
    """Debian's linux-image maintainer scripts, less depmod and the /vmlinuz symlinks: the /etc/kernel hooks run."""
    def hooks(folder):
        return ('if [ -d /etc/kernel/%s.d ]; then\n'
                '    DEB_MAINT_PARAMS="$*" run-parts --report --exit-on-error --arg=%s --arg=/boot/vmlinuz-%s /etc/kernel/%s.d\n'
                'fi\n' % (folder, kernel, kernel, folder))
    purge = ('if [ "$1" = purge ]; then\n'
             '    rm -f /lib/modules/%(k)s/modules.*\n'
             '    rmdir /lib/modules/%(k)s/updates/dkms /lib/modules/%(k)s/updates /lib/modules/%(k)s 2>/dev/null || true\n'
             'fi\n' % {'k': kernel})
    return {
        'postinst': 'if [ "$1" != configure ]; then\n    exit 0\nfi\n' + hooks('postinst'),
        'prerm': 'if [ "$1" != remove ]; then\n    exit 0\nfi\n' + hooks('prerm'),
        'postrm': hooks('postrm') + purge,
    }


def kernel_packages():
    """The kernel images and Debian's ``linux-image-amd64`` meta (one version per image)."""
    packages = []
    for kernel, version in KERNELS:
        packages.append(_package(
            'linux-image-%s' % kernel, version, 'Linux %s for 64-bit PCs (signed)' % version.rsplit('-', 1)[0], 'kernel', nvidia=False,
            files=[_file('/boot/vmlinuz-%s' % kernel, 'gpufleet-sim kernel image %s\n' % kernel),
                   _file('/lib/modules/%s/modules.order' % kernel, '')],
            scripts=_kernel_scripts(kernel)))
        packages.append(_package('linux-image-amd64', version, 'Linux for 64-bit PCs (meta-package)', 'kernel', nvidia=False,
                                 depends=['linux-image-%s (= %s)' % (kernel, version)]))
    return packages


# ---------------------------------------------------------------------------- container toolkit, DCGM, CUDA

def container_toolkit_packages(version):
    """libnvidia-container1, libnvidia-container-tools, nvidia-container-toolkit-base and -toolkit of one release."""
    upstream = upstream_version(version)
    return [
        _package('libnvidia-container1', version, 'NVIDIA container runtime library', 'libs',
                 files=[_file('%s/libnvidia-container.so.%s' % (LIBDIR, upstream), upstream + '\n'),
                        _link('%s/libnvidia-container.so.1' % LIBDIR, 'libnvidia-container.so.%s' % upstream)]),
        _package('libnvidia-container-tools', version, 'NVIDIA container runtime library (command-line tools)', 'utils',
                 files=[_file('/usr/bin/nvidia-container-cli', wrapper('libnvidia-container-tools', 'nvidia_container_cli'), 0o755)],
                 depends=['libnvidia-container1 (>= %s)' % version, 'libnvidia-container1 (<< 2.0.0)']),
        _package('nvidia-container-toolkit-base', version, 'NVIDIA Container Toolkit Base', 'utils',
                 files=[_file('/usr/bin/nvidia-ctk', wrapper('nvidia-container-toolkit-base', 'nvidia_ctk'), 0o755)],
                 breaks=['nvidia-container-runtime (<= 3.5.0-1)'], replaces=['nvidia-container-runtime (<= 3.5.0-1)']),
        _package('nvidia-container-toolkit', version, 'NVIDIA Container toolkit', 'utils',
                 depends=['nvidia-container-toolkit-base (= %s)' % version, 'libnvidia-container-tools (>= %s)' % version,
                          'libnvidia-container-tools (<< 2.0.0)'],
                 breaks=['nvidia-container-runtime (<= 3.5.0-1)', 'nvidia-container-runtime-hook'],
                 replaces=['nvidia-container-runtime (<= 3.5.0-1)', 'nvidia-container-runtime-hook']),
    ]


def _dcgm_files(package):
    return [_file('/usr/bin/dcgmi', wrapper(package, 'dcgmi'), 0o755),
            _file('/usr/bin/nv-hostengine', wrapper(package, 'dcgmi').replace(
                'GPUFLEET_SIM_PACKAGE=', 'GPUFLEET_SIM_PROG=nv-hostengine GPUFLEET_SIM_PACKAGE='), 0o755),
            _file('%s/nvidia-dcgm.service' % UNIT_DIR, _unit('NVIDIA DCGM service', '/usr/bin/nv-hostengine -n --service-account nvidia-dcgm',
                                                             restart='on-abort'))]


def dcgm_packages():
    """DCGM 3 (``datacenter-gpu-manager``) and DCGM 4 (``-4-core`` and ``-4-cuda12``)."""
    packages = []
    for version in DCGM3:
        packages.append(_package('datacenter-gpu-manager', version, 'NVIDIA Datacenter GPU Management Tools', 'utils',
                                 files=_dcgm_files('datacenter-gpu-manager'),
                                 scripts=_service_scripts('nvidia-dcgm.service', enable=False)))
    for version in DCGM4:
        packages.append(_package('datacenter-gpu-manager-4-core', version, 'NVIDIA Datacenter GPU Management Tools (core)', 'utils',
                                 files=_dcgm_files('datacenter-gpu-manager-4-core'),
                                 conflicts=['datacenter-gpu-manager'], replaces=['datacenter-gpu-manager'],
                                 scripts=_service_scripts('nvidia-dcgm.service', enable=False)))
        packages.append(_package('datacenter-gpu-manager-4-cuda12', version, 'NVIDIA Datacenter GPU Management Tools (CUDA 12 support)',
                                 'utils', depends=['datacenter-gpu-manager-4-core (= %s)' % version]))
    return packages


def cuda_toolkit_packages():
    """``cuda-toolkit-X-Y``: ``nvcc`` under ``/usr/local/cuda-X.Y``; ``/usr/local/cuda`` follows the newest (update-alternatives)."""
    packages = []
    for release, version in CUDA_TOOLKITS:
        major, minor = release.split('.')
        name = 'cuda-toolkit-%s-%s' % (major, minor)
        prefix = '/usr/local/cuda-%s' % release
        priority = int(major) * 10 + int(minor)
        postinst = ('if [ "$1" = configure ]; then\n'
                    '    update-alternatives --install /usr/local/cuda cuda %s %d\n'
                    '    update-alternatives --install /usr/local/cuda-%s cuda-%s %s %d\n'
                    'fi\n' % (prefix, priority, major, major, prefix, priority))
        prerm = ('if [ "$1" = remove ] || [ "$1" = deconfigure ]; then\n'
                 '    update-alternatives --remove cuda %s\n'
                 '    update-alternatives --remove cuda-%s %s\n'
                 'fi\n' % (prefix, major, prefix))
        packages.append(_package(name, version, 'CUDA Toolkit %s meta-package' % release, 'devel',
                                 files=[_file('%s/bin/nvcc' % prefix, wrapper(name, 'nvcc'), 0o755)],
                                 scripts={'postinst': postinst, 'prerm': prerm}))
    return packages


def packages():
    """Every package of the repository, as records (dicts); see :func:`_package` for the keys."""
    result = []
    for upstream in DRIVERS:
        result.extend(driver_packages(upstream))
    result.append(dkms_package())
    result.extend(kernel_packages())
    for version in CONTAINER_TOOLKIT:
        result.extend(container_toolkit_packages(version))
    result.extend(dcgm_packages())
    result.extend(cuda_toolkit_packages())
    return result


_NAME = re.compile(r'^[a-z0-9][a-z0-9.+-]+$')
_EXACT = re.compile(r'^(?P<name>[a-z0-9][a-z0-9.+-]+) \((?P<op>=|>=) (?P<version>[^)\s]+)\)$')


def exact_install(name, version, records=None):
    """``apt-get install`` arguments for ``name=version`` and, recursively, its versioned dependencies.

    apt (as on metal) cannot install an older meta-package by itself when a newer release of
    its pieces is in the repository: ``apt-get install nvidia-driver-580-server=580.65.06-0ubuntu1``
    fails with ``Depends: nvidia-utils-580 (= 580.65.06-0ubuntu1) but 580.82.07-0ubuntu1 is to be
    installed``.  As NVIDIA's instructions do, name every piece with its version (or pin them
    with apt preferences); this returns that list, the requested package first: every
    ``(= V)`` dependency, and every ``(>= V)`` one whose version V is in the catalog (the
    container toolkit's four packages of one release).  Alternatives (``a | b``) follow their
    first member.
    """
    records = packages() if records is None else records
    index = {(record['package'], record['version']): record for record in records}
    result = []
    pending = [(name, version)]
    while pending:
        key = pending.pop(0)
        if key not in index:
            raise KeyError('no package %s=%s in the catalog' % key)
        argument = '%s=%s' % key
        if argument in result:
            continue
        result.append(argument)
        for relation in index[key]['depends']:
            match = _EXACT.match(relation.split('|')[0].strip())
            if match and (match.group('op') == '=' or (match.group('name'), match.group('version')) in index):
                pending.append((match.group('name'), match.group('version')))
    return result


def check(records):
    """Raise ValueError if two records share name and version or a name is not a valid Debian package name."""
    seen = set()
    for record in records:
        if not _NAME.match(record['package']):
            raise ValueError('invalid package name %r' % record['package'])
        key = (record['package'], record['version'])
        if key in seen:
            raise ValueError('duplicate package %s %s' % key)
        seen.add(key)
    return records
