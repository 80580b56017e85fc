# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fake ``dkms`` (Dynamic Kernel Module Support, dkms 3.x output) for the nvidia module.

A module source is registered by ``usr/src/nvidia-<version>/dkms.conf`` (``PACKAGE_VERSION=``,
``OPEN=yes|no``), written by the ``nvidia-dkms-<branch>`` package.  "Building" for a kernel writes
``lib/modules/<kernel>/updates/dkms/nvidia.ko`` containing ``<version>`` (plus `` open``); there is
one nvidia module per kernel, so building another version replaces it.  Only kernels with
``boot/vmlinuz-<kernel>`` can be built for (elsewhere the headers are "missing").

Commands: ``status``, ``add``, ``build``, ``install``, ``autoinstall [-k KERNEL]``,
``remove nvidia/VERSION (--all | -k KERNEL)``, ``--version``.  Module and version are given as
``nvidia/VERSION`` or ``-m nvidia -v VERSION``; kernels as ``-k KERNEL[/ARCH]``, ``--kernelver``
or ``--all``; without a kernel ``install``/``build`` use the running kernel (``boot.json``).
The ``dkms_fail`` fault makes every build fail like a compiler error: "Error! Bad return status
for module build on kernel: K (x86_64)", exit 10 (``autoinstall``: 11, as dkms 3.x), nothing
written, so the kernel is left without an nvidia module.
"""

import functools
import os
import re
import sys

from gpufleet_sim import state

DKMS_VERSION = '3.0.10'
ARCH = 'x86_64'
MODULE = 'nvidia'

_VERSION_ORDER = functools.cmp_to_key(state.dpkg_compare)
_CONF_RE = re.compile(r'^\s*([A-Z_]+)\s*=\s*"?([^"\n]*)"?\s*$', re.MULTILINE)


class DkmsError(Exception):
    """A dkms error: message and exit code."""

    def __init__(self, message, code):
        super(DkmsError, self).__init__(message)
        self.code = code


def sources():
    """``{version: open}`` of every registered nvidia module source."""
    folder = state.path(state.DKMS_SOURCE_DIR)
    try:
        names = os.listdir(folder)
    except OSError:
        return {}
    found = {}
    for name in names:
        if not name.startswith(MODULE + '-'):
            continue
        text = state.read_text(os.path.join(state.DKMS_SOURCE_DIR, name, 'dkms.conf'))
        if text is None:
            continue
        values = dict(_CONF_RE.findall(text))
        if values.get('PACKAGE_NAME', MODULE) != MODULE:
            continue
        version = values.get('PACKAGE_VERSION') or name[len(MODULE) + 1:]
        found[version] = values.get('OPEN', 'no').strip().lower() in ('yes', 'y', 'true', '1')
    return found


def built_kernels():
    """Kernel release -> (version, open) of the nvidia module built for it."""
    folder = state.path(state.MODULES_DIR)
    try:
        kernels = sorted(os.listdir(folder))
    except OSError:
        return {}
    result = {}
    for kernel in kernels:
        version, is_open = state.read_module(kernel)
        if version:
            result[kernel] = (version, is_open)
    return result


def _running_kernel():
    boot = state.load_boot() or {}
    kernel = boot.get('kernel')
    installed = state.kernels()
    if kernel in installed:
        return kernel
    return installed[-1] if installed else None


def build(version, kernel, out):
    """Build and install ``version`` for ``kernel``; raises DkmsError."""
    registered = sources()
    if version not in registered:
        raise DkmsError('Error! Could not find module source directory.\nDirectory: /usr/src/%s-%s does not exist.'
                        % (MODULE, version), 2)
    if kernel not in state.kernels():
        raise DkmsError("Error! Your kernel headers for kernel %s cannot be found at /lib/modules/%s/build or "
                        "/lib/modules/%s/source.\nPlease install the linux-headers-%s package or use the "
                        "--kernelsourcedir option to tell DKMS where it's located." % (kernel, kernel, kernel, kernel), 1)
    make = "env NV_VERBOSE=1 'make' -j16 modules KERNEL_UNAME=%s" % kernel
    out.append('Sign command: /usr/lib/linux-kbuild-%s/scripts/sign-file\n' % '.'.join(kernel.split('.')[:2]))
    out.append('Signing key: /var/lib/dkms/mok.key\nPublic certificate (MOK): /var/lib/dkms/mok.pub\n\n')
    out.append('Building module:\nCleaning build area...\n')
    if state.fault('dkms_fail') is not None:
        out.append('%s.....(bad exit status: 2)\n' % make)
        raise DkmsError('Error! Bad return status for module build on kernel: %s (%s)\n'
                        'Consult /var/lib/dkms/%s/%s/build/make.log for more information.' % (kernel, ARCH, MODULE, version), 10)
    out.append('%s.................\n' % make)
    for name in ('nvidia', 'nvidia-modeset', 'nvidia-drm', 'nvidia-uvm', 'nvidia-peermem'):
        out.append('Signing module /var/lib/dkms/%s/%s/build/%s.ko\n' % (MODULE, version, name))
    out.append('Cleaning build area...\n\n')
    for name in ('nvidia', 'nvidia-modeset', 'nvidia-drm', 'nvidia-uvm', 'nvidia-peermem'):
        out.append('%s.ko:\nRunning module version sanity check.\n - Original module\n'
                   '   - No original module exists within this kernel\n'
                   ' - Installation\n   - Installing to /lib/modules/%s/updates/dkms/\n' % (name, kernel))
    state.write_text(state.module_path(kernel), version + (' open' if registered[version] else '') + '\n')
    out.append('depmod....\n')


def _module_version(spec, options):
    """Version from ``nvidia/VERSION`` or ``-v``."""
    if spec:
        module, _sep, version = spec.partition('/')
        if module != MODULE:
            raise DkmsError('Error! Could not find module source directory.\nDirectory: /usr/src/%s does not exist.'
                            % spec.replace('/', '-'), 2)
        if version:
            return version
    if options.get('module', MODULE) != MODULE:
        raise DkmsError('Error! Could not find module source directory.\nDirectory: /usr/src/%s-%s does not exist.'
                        % (options.get('module'), options.get('version', '')), 2)
    if options.get('version'):
        return options['version']
    raise DkmsError('Error! Invalid number of arguments passed.\nUsage: install <module>/<module-version> or '
                    'install -m <module>/<module-version> or install -m <module> -v <module-version>', 1)


def parse(argv):
    command = None
    spec = None
    options = {'kernels': []}
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        name, sep, value = token.partition('=')
        if name in ('-k', '--kernelver', '-m', '--module', '-v', '--version-number', '-a', '--arch', '--kernelsourcedir'):
            if not sep:
                if index >= len(argv):
                    raise DkmsError('Error! Option %s requires an argument.' % name, 1)
                value = argv[index]
                index += 1
            if name in ('-k', '--kernelver'):
                options['kernels'].append(value.split('/')[0])
            elif name in ('-m', '--module'):
                module, _sep, version = value.partition('/')
                options['module'] = module
                if version:
                    options['version'] = version
            elif name in ('-v', '--version-number'):
                options['version'] = value
        elif token == '--all':
            options['all'] = True
        elif token in ('--force', '-q', '--quiet', '--verbose', '--no-depmod', '--no-initrd', '--no-prepare-kernel',
                       '--no-clean-kernel'):
            options[token.lstrip('-')] = True
        elif token == '--version' and command is None:
            command = 'version'
        elif command is None:
            command = token
        elif spec is None:
            spec = token
        else:
            raise DkmsError('Error! Invalid number of arguments passed.', 1)
    return command, spec, options


def status(spec, options, out):
    registered = sources()
    built = built_kernels()
    wanted_version = None
    if spec:
        wanted_version = spec.partition('/')[2] or None
    wanted_version = options.get('version', wanted_version)
    for version in sorted(registered, key=_VERSION_ORDER):
        if wanted_version and version != wanted_version:
            continue
        kernels = [kernel for kernel, (built_version, _open) in sorted(built.items(), key=lambda item: _VERSION_ORDER(item[0]))
                   if built_version == version and (not options['kernels'] or kernel in options['kernels'])]
        if kernels:
            for kernel in kernels:
                out.append('%s/%s, %s, %s: installed\n' % (MODULE, version, kernel, ARCH))
        elif not options['kernels']:
            out.append('%s/%s: added\n' % (MODULE, version))
    return 0


def _target_kernels(options, default_running):
    if options.get('all'):
        return state.kernels()
    if options['kernels']:
        return list(options['kernels'])
    if default_running:
        kernel = _running_kernel()
        return [kernel] if kernel else []
    return state.kernels()


def install(spec, options, out):
    version = _module_version(spec, options)
    kernels = _target_kernels(options, True)
    if not kernels:
        raise DkmsError('Error! No kernel found to build for (no /boot/vmlinuz-*).', 1)
    for kernel in kernels:
        current, _open = state.read_module(kernel)
        if current == version and not options.get('force'):
            out.append('Module %s/%s already installed on kernel %s (%s), skip. You may override by specifying --force.\n'
                       % (MODULE, version, kernel, ARCH))
            continue
        build(version, kernel, out)
    return 0


def autoinstall(options, out):
    registered = sources()
    if not registered:
        return 0
    version = state.newest(registered)
    failed = []
    for kernel in _target_kernels(options, False):
        current, is_open = state.read_module(kernel)
        if current == version and is_open == registered[version]:
            continue
        try:
            build(version, kernel, out)
        except DkmsError as exc:
            out.append(str(exc) + '\n')
            out.append('dkms autoinstall on %s/%s failed for %s(%d)\n' % (kernel, ARCH, MODULE, exc.code))
            failed.append(kernel)
    if failed:
        raise DkmsError('Error! One or more modules failed to install during autoinstall.\n'
                        'Refer to previous errors for more information.', 11)
    return 0


def remove(spec, options, out):
    version = _module_version(spec, options)
    built = built_kernels()
    registered = sources()
    if options.get('all') or not options['kernels']:
        kernels = [kernel for kernel, (built_version, _open) in built.items() if built_version == version]
    else:
        kernels = [kernel for kernel in options['kernels'] if built.get(kernel, (None,))[0] == version]
    if version not in registered and not kernels:
        raise DkmsError('Error! There are no instances of module: %s\n%s located in the DKMS tree.' % (MODULE, version), 3)
    for kernel in kernels:
        out.append('Module %s-%s for kernel %s (%s).\nBefore uninstall, this module version was ACTIVE on this kernel.\n'
                   % (MODULE, version, kernel, ARCH))
        for name in ('nvidia', 'nvidia-modeset', 'nvidia-drm', 'nvidia-uvm', 'nvidia-peermem'):
            out.append('\n%s.ko:\n - Uninstallation\n   - Deleting from: /lib/modules/%s/updates/dkms/\n'
                       ' - Original module\n   - No original module was found for this module on this kernel.\n'
                       '   - Use the dkms install command to reinstall any previous module version.\n' % (name, kernel))
        state.remove(state.module_path(kernel))
        out.append('depmod...\n')
    out.append('Deleting module %s-%s completely from the DKMS tree.\n' % (MODULE, version))
    return 0


def run(argv):
    """Run dkms; returns the exit code."""
    out = []
    try:
        command, spec, options = parse(argv)
        if command == 'version':
            out.append('dkms-%s\n' % DKMS_VERSION)
            code = 0
        elif command == 'status':
            code = status(spec, options, out)
        elif command == 'add':
            version = _module_version(spec, options)
            if version not in sources():
                raise DkmsError('Error! Could not find module source directory.\nDirectory: /usr/src/%s-%s does not exist.'
                                % (MODULE, version), 2)
            out.append('Creating symlink /var/lib/dkms/%s/%s/source -> /usr/src/%s-%s\n' % (MODULE, version, MODULE, version))
            code = 0
        elif command in ('install', 'build'):
            code = install(spec, options, out)
        elif command == 'autoinstall':
            code = autoinstall(options, out)
        elif command in ('remove', 'uninstall', 'unbuild'):
            code = remove(spec, options, out)
        else:
            raise DkmsError('Error! Unknown action specified: "%s"' % (command or ''), 1)
    except DkmsError as exc:
        sys.stdout.write(''.join(out))
        sys.stderr.write(str(exc) + '\n')
        return exc.code
    sys.stdout.write(''.join(out))
    return code


def main(argv=None):
    """Entry point: ``python3 -m gpufleet_sim.dkms ARGS``."""
    return run(sys.argv[1:] if argv is None else list(argv))


if __name__ == '__main__':
    sys.exit(main())
