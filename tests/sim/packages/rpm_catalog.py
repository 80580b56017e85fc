# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The dummy NVIDIA packages of the simulated RHEL/Rocky 9 node, as data (the rpm side of catalog.py).

Same releases as the apt catalog (catalog.py: drivers, container toolkit, DCGM, CUDA toolkits), with the
names, epochs, releases and relationships of NVIDIA's CUDA repository for RHEL 9 (``cuda-rhel9-x86_64``):

* the driver of one release: ``nvidia-driver``, ``-libs``, ``-cuda``, ``-cuda-libs``, ``nvidia-kmod-common``,
  ``nvidia-persistenced``, ``nvidia-modprobe``, the kernel module as ``kmod-nvidia-latest-dkms`` (proprietary)
  or ``kmod-nvidia-open-dkms`` (open), ``cuda-drivers``; all epoch 3, release ``1.el9``.  The two kmods
  both *Provide* ``nvidia-kmod = 3:V`` and *Conflict* with each other; ``nvidia-driver`` requires
  ``nvidia-kmod = 3:V`` and the other pieces at ``3:V``.
* ``nvidia-fabric-manager`` (no epoch, release ``1``), in the ``nvidia-driver`` module like the driver.
* ``nvidia-container-toolkit``, ``-base``, ``libnvidia-container-tools``, ``libnvidia-container1`` (release ``1``).
* ``datacenter-gpu-manager`` 3 (epoch 1) and ``datacenter-gpu-manager-4-core`` / ``-4-cuda12`` (epoch 1),
  DCGM 4 conflicting with DCGM 3.
* ``cuda-toolkit-X-Y`` (``nvcc`` under ``/usr/local/cuda-X.Y``), ``kernel`` (RHEL 9 releases, installonly),
  ``dkms`` (EPEL's, with the fake ``/usr/sbin/dkms`` and its kernel hook).
* ``gpufleet-sim-base``: what the node's Debian base system gives rpm (``/bin/sh`` ...) and what
  ``rocky-release`` provides (``system-release(releasever) = 9``): the rpm database of the simulated node
  otherwise holds only what dnf installed.

The ``nvidia-driver`` module streams (:func:`module_streams`) are written into ``modules.yaml`` the way
NVIDIA's repository carries them: ``<branch>-dkms`` and ``<branch>-open`` per branch, ``latest-dkms`` and
``open-dkms`` for the newest release (``open-dkms`` the default stream), one module version per driver release.

Every tool is the same ``#!/bin/sh`` wrapper of the apt packages (catalog.wrapper) naming its rpm, and every
package ships ``/usr/share/gpufleet-sim/versions/<name>``.  Stdlib only.
"""

import catalog  # pylint: disable=import-error

# The apt catalog's helpers, shared so that both package sets write the same node files.
_catalog_file = catalog._file  # pylint: disable=protected-access
_unit = catalog._unit  # pylint: disable=protected-access
_fabricmanager_cfg = catalog._fabricmanager_cfg  # pylint: disable=protected-access

DRIVER_EPOCH = 3
EL = 'el9'
DIST_RELEASE = '1.' + EL
ARCH = 'x86_64'
# RHEL 9 kernels (uname -r without the architecture is the package's version-release).
KERNELS = (('5.14.0', '427.13.1.el9_4'), ('5.14.0', '503.14.1.el9_5'))
DKMS_VERSION = ('3.1.5', '1.el9')
# The module version of each driver release (as NVIDIA's builds carry a timestamp-like number).
MODULE_CONTEXT = 'b9f5c1d0'
DEFAULT_STREAM = 'open-dkms'
DRIVER_PIECES = ('nvidia-driver', 'nvidia-driver-libs', 'nvidia-driver-cuda', 'nvidia-driver-cuda-libs', 'nvidia-kmod-common',
                 'nvidia-persistenced', 'nvidia-modprobe')
KMODS = {'dkms': 'kmod-nvidia-latest-dkms', 'open': 'kmod-nvidia-open-dkms'}


def evr(package):
    return '%s%s-%s' % ('%d:' % package['epoch'] if package['epoch'] else '', package['version'], package['release'])


def nevra(package):
    return '%s-%s:%s-%s.%s' % (package['name'], package['epoch'] or 0, package['version'], package['release'], package['arch'])


def rpm_filename(package):
    return '%s-%s-%s.%s.rpm' % (package['name'], package['version'], package['release'], package['arch'])


def _package(name, version, release, summary, files=(), epoch=0, arch=ARCH, **fields):
    record = {'name': name, 'version': version, 'release': release, 'epoch': epoch, 'arch': arch, 'summary': summary,
              'requires': [], 'provides': [], 'conflicts': [], 'obsoletes': [],
              'files': list(files) + [_catalog_file('%s/%s' % (catalog.VERSIONS_DIR, name), version + '\n')],
              'scripts': {}}
    for key, value in fields.items():
        if key not in record:
            raise KeyError('unknown package field %r for %s' % (key, name))
        record[key] = value
    return record


def _file(path, content, mode=0o644):
    return _catalog_file(path, content, mode)


def _tool(path, package, module):
    return _file(path, catalog.wrapper(package, module), 0o755)


def _service(unit):
    """%systemd_post-like snippets: reload the units; the service is enabled by whoever installs (as on RHEL)."""
    reload = 'if [ -d /run/systemd/system ]; then systemctl --system daemon-reload >/dev/null 2>&1 || true; fi\n'
    preun = ('if [ "$1" -eq 0 ] && [ -d /run/systemd/system ]; then\n'
             '    systemctl --no-reload disable --now %s >/dev/null 2>&1 || true\nfi\n' % unit)
    return {'post': reload, 'preun': preun, 'postun': reload}


def driver_packages(upstream):
    """The rpms of one driver release."""
    same = '= %d:%s-%s' % (DRIVER_EPOCH, upstream, DIST_RELEASE)
    library = '%s/libnvidia-ml.so.%s' % ('/usr/lib64', upstream)
    lib64 = '/usr/lib64'

    def piece(name, summary, files=(), **fields):
        return _package(name, upstream, DIST_RELEASE, summary, files, epoch=DRIVER_EPOCH, **fields)

    packages = [
        piece('nvidia-driver', 'NVIDIA\'s proprietary display driver for NVIDIA graphic cards',
              requires=['nvidia-driver-libs %s' % same, 'nvidia-kmod-common %s' % same, 'nvidia-kmod %s' % same,
                        'nvidia-modprobe %s' % same],
              conflicts=['nvidia-driver-latest-dkms']),
        piece('nvidia-driver-libs', 'Libraries for NVIDIA\'s proprietary display driver',
              requires=['nvidia-driver-cuda-libs %s' % same]),
        piece('nvidia-driver-cuda', 'CUDA integration for NVIDIA\'s proprietary display driver',
              files=[_tool('/usr/bin/nvidia-smi', 'nvidia-driver-cuda', 'nvidia_smi')],
              requires=['nvidia-driver-cuda-libs %s' % same, 'nvidia-persistenced %s' % same, 'nvidia-kmod-common %s' % same]),
        # NVML (libnvidia-ml.so.1) and libcuda are in -cuda-libs.
        piece('nvidia-driver-cuda-libs', 'Libraries for NVIDIA\'s CUDA and NVML',
              files=[_file(library, upstream + '\n'), {'path': '%s/libnvidia-ml.so.1' % lib64, 'symlink': 'libnvidia-ml.so.%s' % upstream},
                     {'path': '/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1', 'symlink': library}]),
        piece('nvidia-kmod-common', 'Common file for NVIDIA\'s proprietary driver kernel modules', arch='noarch',
              files=[_file('/usr/lib/modprobe.d/nvidia.conf', 'options nvidia NVreg_DeviceFileMode=0660\n')],
              requires=['nvidia-kmod %s' % same]),
        piece('nvidia-persistenced', 'A daemon to maintain persistent software state in the NVIDIA driver',
              files=[_tool('/usr/bin/nvidia-persistenced', 'nvidia-persistenced', 'nvidia_persistenced'),
                     _file('/usr/lib/systemd/system/nvidia-persistenced.service',
                           _unit('NVIDIA Persistence Daemon', '/usr/bin/nvidia-persistenced --verbose'))],
              scripts=_service('nvidia-persistenced.service')),
        piece('nvidia-modprobe', 'Load the NVIDIA kernel driver and create device files'),
        piece('cuda-drivers', 'CUDA Driver meta-package',
              requires=['nvidia-driver %s' % same, 'nvidia-driver-cuda %s' % same, 'nvidia-driver-libs %s' % same]),
    ]
    for flavour, name in sorted(KMODS.items()):
        is_open = flavour == 'open'
        conf = ('PACKAGE_NAME=nvidia\nPACKAGE_VERSION=%s\nOPEN=%s\nBUILT_MODULE_NAME[0]="nvidia"\n'
                'DEST_MODULE_LOCATION[0]="/extra"\nAUTOINSTALL="yes"\n' % (upstream, 'yes' if is_open else 'no'))
        # NVIDIA's kmod-nvidia-*-dkms: %post dkms install for the kernels, %preun dkms remove of this version.
        post = ('for modules in /lib/modules/*/modules.order; do\n'
                '    [ -e "$modules" ] || continue\n'
                '    kernel=${modules#/lib/modules/}\n'
                '    kernel=${kernel%%/modules.order}\n'
                '    dkms install nvidia/%s -k "$kernel" || exit 1\n'
                'done\n' % upstream)
        preun = 'dkms remove nvidia/%s --all >/dev/null 2>&1 || :\n' % upstream
        packages.append(piece(
            name, 'NVIDIA display driver kernel module%s' % (' (open)' if is_open else ''), arch='noarch',
            files=[_file('/usr/src/nvidia-%s%s/dkms.conf' % (upstream, '-open' if is_open else ''), conf)],
            requires=['dkms', 'nvidia-kmod-common %s' % same],
            provides=['nvidia-kmod %s' % same],
            conflicts=[KMODS['dkms' if is_open else 'open']],
            scripts={'post': post, 'preun': preun}))
    packages.append(_package(
        'nvidia-fabric-manager', upstream, '1', 'Fabric Manager for NVSwitch based systems',
        files=[_tool('/usr/bin/nv-fabricmanager', 'nvidia-fabric-manager', 'nv_fabricmanager'),
               _file(catalog.FABRICMANAGER_CFG, _fabricmanager_cfg()),
               _file('/usr/lib/systemd/system/nvidia-fabricmanager.service',
                     _unit('NVIDIA fabric manager service', '/usr/bin/nv-fabricmanager -c %s' % catalog.FABRICMANAGER_CFG))],
        scripts=_service('nvidia-fabricmanager.service')))
    return packages


def container_toolkit_packages(version):
    upstream, release = version.rsplit('-', 1)
    lib64 = '/usr/lib64'

    def piece(name, summary, files=(), **fields):
        return _package(name, upstream, release, summary, files, **fields)

    return [
        piece('libnvidia-container1', 'NVIDIA container runtime library',
              files=[_file('%s/libnvidia-container.so.%s' % (lib64, upstream), upstream + '\n'),
                     {'path': '%s/libnvidia-container.so.1' % lib64, 'symlink': 'libnvidia-container.so.%s' % upstream}]),
        piece('libnvidia-container-tools', 'NVIDIA container runtime library (command-line tools)',
              files=[_tool('/usr/bin/nvidia-container-cli', 'libnvidia-container-tools', 'nvidia_container_cli')],
              requires=['libnvidia-container1 >= %s-%s' % (upstream, release), 'libnvidia-container1 < 2.0.0']),
        piece('nvidia-container-toolkit-base', 'NVIDIA Container Toolkit Base',
              files=[_tool('/usr/bin/nvidia-ctk', 'nvidia-container-toolkit-base', 'nvidia_ctk')]),
        piece('nvidia-container-toolkit', 'NVIDIA Container Toolkit',
              requires=['nvidia-container-toolkit-base = %s-%s' % (upstream, release),
                        'libnvidia-container-tools >= %s-%s' % (upstream, release), 'libnvidia-container-tools < 2.0.0'],
              obsoletes=['nvidia-container-runtime <= 3.5.0-1', 'nvidia-container-runtime-hook <= 1.4.0-2']),
    ]


def _dcgm_files(package):
    hostengine = catalog.wrapper(package, 'dcgmi').replace('GPUFLEET_SIM_PACKAGE=', 'GPUFLEET_SIM_PROG=nv-hostengine GPUFLEET_SIM_PACKAGE=')
    return [_tool('/usr/bin/dcgmi', package, 'dcgmi'), _file('/usr/bin/nv-hostengine', hostengine, 0o755),
            _file('/usr/lib/systemd/system/nvidia-dcgm.service',
                  _unit('NVIDIA DCGM service', '/usr/bin/nv-hostengine -n --service-account nvidia-dcgm', restart='on-abort'))]


def dcgm_packages():
    packages = []
    for version in catalog.DCGM3:
        epoch, upstream = version.split(':', 1)
        packages.append(_package('datacenter-gpu-manager', upstream, '1', 'NVIDIA Datacenter GPU Management Tools', _dcgm_files('datacenter-gpu-manager'),
                                 epoch=int(epoch), scripts=_service('nvidia-dcgm.service')))
    for version in catalog.DCGM4:
        epoch, rest = version.split(':', 1)
        upstream, release = rest.rsplit('-', 1)
        packages.append(_package('datacenter-gpu-manager-4-core', upstream, release, 'NVIDIA Datacenter GPU Management Tools (core)',
                                 _dcgm_files('datacenter-gpu-manager-4-core'), epoch=int(epoch),
                                 conflicts=['datacenter-gpu-manager'], scripts=_service('nvidia-dcgm.service')))
        packages.append(_package('datacenter-gpu-manager-4-cuda12', upstream, release, 'NVIDIA Datacenter GPU Management Tools (CUDA 12)',
                                 epoch=int(epoch), requires=['datacenter-gpu-manager-4-core = %s' % version]))
    return packages


def cuda_toolkit_packages():
    packages = []
    for release, version in catalog.CUDA_TOOLKITS:
        major, minor = release.split('.')
        name = 'cuda-toolkit-%s-%s' % (major, minor)
        prefix = '/usr/local/cuda-%s' % release
        upstream, rpm_release = version.rsplit('-', 1)
        priority = int(major) * 10 + int(minor)
        post = ('update-alternatives --install /usr/local/cuda cuda %s %d\n'
                'update-alternatives --install /usr/local/cuda-%s cuda-%s %s %d\n' % (prefix, priority, major, major, prefix, priority))
        preun = ('if [ "$1" -eq 0 ]; then\n    update-alternatives --remove cuda %s\n'
                 '    update-alternatives --remove cuda-%s %s\nfi\n' % (prefix, major, prefix))
        packages.append(_package(name, upstream, rpm_release, 'CUDA Toolkit %s meta-package' % release,
                                 [_tool('%s/bin/nvcc' % prefix, name, 'nvcc')], scripts={'post': post, 'preun': preun}))
    return packages


def kernel_packages():
    """``kernel`` (installonly): the image and modules.order; %posttrans runs the /etc/kernel/postinst.d hooks
    (EPEL's dkms builds the registered modules there), %preun the prerm.d hooks."""
    packages = []
    for version, release in KERNELS:
        kernel = '%s-%s.%s' % (version, release, ARCH)
        hooks = ('if [ -d /etc/kernel/%s.d ]; then\n'
                 '    for hook in /etc/kernel/%s.d/*; do [ -x "$hook" ] && "$hook" %s /boot/vmlinuz-%s; done\n'
                 'fi\n')
        packages.append(_package(
            'kernel', version, release, 'The Linux kernel (gpufleet simulation)',
            [_file('/boot/vmlinuz-%s' % kernel, 'gpufleet-sim kernel image %s\n' % kernel),
             _file('/lib/modules/%s/modules.order' % kernel, '')],
            scripts={'posttrans': hooks % ('postinst', 'postinst', kernel, kernel) + 'exit 0\n',
                     'preun': hooks % ('prerm', 'prerm', kernel, kernel) + 'exit 0\n'}))
    return packages


def dkms_package():
    deb = catalog.dkms_package()
    hooks = [item for item in deb['files'] if item['path'].startswith('/etc/kernel/')]
    return _package('dkms', DKMS_VERSION[0], DKMS_VERSION[1], 'Dynamic Kernel Module Support Framework', arch='noarch',
                    files=[_tool('/usr/sbin/dkms', 'dkms', 'dkms')] + hooks)


def base_package():
    return _package('gpufleet-sim-base', '9.4', '1.' + EL, 'What the simulated node\'s base system gives rpm', arch='noarch',
                    provides=['/bin/sh', '/bin/bash', '/usr/bin/sh', '/usr/bin/python3', 'systemd', 'coreutils', 'rocky-release = 9.4',
                              'system-release = 9.4', 'system-release(releasever) = 9', 'redhat-release = 9.4'])


def packages():
    """Every rpm of the repository, as records."""
    result = [base_package(), dkms_package()]
    for upstream in catalog.DRIVERS:
        result.extend(driver_packages(upstream))
    for version in catalog.CONTAINER_TOOLKIT:
        result.extend(container_toolkit_packages(version))
    result.extend(dcgm_packages())
    result.extend(cuda_toolkit_packages())
    result.extend(kernel_packages())
    return result


def _branch(upstream):
    return upstream.split('.', 1)[0]


def module_streams(records=None):
    """``[(stream, module version, driver release, [records])]`` of the ``nvidia-driver`` module."""
    records = packages() if records is None else records
    releases = sorted(catalog.DRIVERS, key=lambda item: [int(part) for part in item.split('.')])
    streams = []
    for index, upstream in enumerate(releases):
        in_release = [record for record in records if record['epoch'] == DRIVER_EPOCH and record['version'] == upstream] + [
            record for record in records if record['name'] == 'nvidia-fabric-manager' and record['version'] == upstream]
        names = [('%s-%s' % (_branch(upstream), flavour), flavour) for flavour in ('dkms', 'open')]
        if upstream == releases[-1]:
            names += [('latest-dkms', 'dkms'), ('open-dkms', 'open')]
        for stream, flavour in names:
            other = KMODS['open' if flavour == 'dkms' else 'dkms']
            streams.append((stream, 90000 + index, upstream, [record for record in in_release if record['name'] != other]))
    return streams


def modules_yaml(records=None):
    """The text of modules.yaml (modulemd v2 documents and the module's defaults) as NVIDIA's repository carries it."""
    documents = []
    for stream, version, upstream, members in module_streams(records):
        kmod = [record['name'] for record in members if record['name'].startswith('kmod-')][0]
        default = ['nvidia-driver', 'nvidia-driver-cuda', 'nvidia-driver-libs', kmod]
        lines = ['---', 'document: modulemd', 'version: 2', 'data:', '  name: nvidia-driver', '  stream: "%s"' % stream,
                 '  version: %d' % version, '  context: %s' % MODULE_CONTEXT, '  arch: %s' % ARCH,
                 '  summary: Nvidia driver for %s branch' % stream,
                 '  description: >-', '    The NVIDIA driver %s (gpufleet simulation).' % upstream,
                 '  license:', '    module:', '    - MIT', '  dependencies:', '  - buildrequires:', '      platform: [%s]' % EL,
                 '    requires:', '      platform: [%s]' % EL, '  profiles:']
        profiles = {'default': default, 'fm': default + ['nvidia-fabric-manager'], 'ks': default, 'src': default}
        for profile in sorted(profiles):
            lines += ['    %s:' % profile, '      rpms:'] + ['      - %s' % name for name in sorted(profiles[profile])]
        lines += ['  api:', '    rpms:'] + ['    - %s' % name for name in sorted(record['name'] for record in members)]
        lines += ['  artifacts:', '    rpms:'] + ['    - %s' % nevra(record) for record in sorted(members, key=nevra)]
        lines.append('...')
        documents.append('\n'.join(lines))
    documents.append('\n'.join(['---', 'document: modulemd-defaults', 'version: 1', 'data:', '  module: nvidia-driver',
                                '  stream: "%s"' % DEFAULT_STREAM, '  profiles:'] + [
                                    '    "%s": [default]' % stream for stream in sorted(set(item[0] for item in module_streams(records)))] + ['...']))
    return '\n'.join(documents) + '\n'
