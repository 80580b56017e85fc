# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fake ``nvidia-installer`` of a simulated node: a driver installed from NVIDIA's ``.run`` file, and its uninstaller.

What ``sh NVIDIA-Linux-x86_64-<version>.run --silent`` leaves on a node (without ``--dkms``), as nvidia-installer 580
writes it (NVIDIA/nvidia-installer: ``log.c`` ``log_init``, ``backup.c``, ``install-from-cwd.c``, ``misc.c``)::

    /usr/bin/nvidia-smi, /usr/bin/nvidia-persistenced           the tools (wrappers of the fakes, no package owns them)
    /usr/bin/nvidia-installer, /usr/bin/nvidia-uninstall        the installer, and the link to it that uninstalls
    /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.<v>, .so.1        NVML, where the node's tools look for the installed driver
    /lib/modules/<kernel>/kernel/drivers/video/nvidia*.ko       the modules, built for the running kernel only
    /var/log/nvidia-installer.log                               the installer's log (header of log_init, then its lines)
    /var/lib/nvidia/log, /var/lib/nvidia/dirs                   its record of what it installed (backup.c's format:
                                                                ``1.0-<digits> (<version>)``, the description, then
                                                                ``1: <file>`` + CRC and ``0: <link>`` + target entries)

Install: ``python3 -m gpufleet_sim.runfile [--silent] [--kernel-module-type=open|proprietary]
[--allow-installation-with-running-driver]`` with ``$GPUFLEET_SIM_RUNFILE_VERSION`` naming the ``.run`` file's release
(the real one knows it from its package) and ``$GPUFLEET_SIM_PROG`` the program name (``./nvidia-installer`` as the
``.run`` file runs it).  It refuses while a driver package is installed (the Ubuntu packages' ``alternate-install-present``
case) and, like the real one without ``--allow-installation-with-running-driver``, while a module is loaded.

Uninstall: the same program run as ``nvidia-uninstall`` (the ``/usr/bin/nvidia-uninstall`` link) or with
``--uninstall``; ``--silent``/``-s`` as the real one.  It removes exactly the files and links of ``/var/lib/nvidia/log``
that still are what it installed (same CRC, same link target; a file someone replaced stays, with the real message),
the folders it created when empty, then ``/var/lib/nvidia``; writes ``/var/log/nvidia-uninstall.log``; exits 0.  It does
not unload the module: the loaded driver stays until the next boot (the simulation's rule; on metal the module is in use
by nvidia-persistenced, so its ``rmmod`` fails the same way).  ``/var/log/nvidia-installer.log`` stays, as on metal.
"""

import os
import shutil
import sys
import time

from gpufleet_sim import state

DESCRIPTION = 'NVIDIA Accelerated Graphics Driver for Linux-x86_64'
INSTALLER_LOG = 'var/log/nvidia-installer.log'
UNINSTALL_LOG = 'var/log/nvidia-uninstall.log'
BACKUP_DIR = 'var/lib/nvidia'
BACKUP_LOG = 'var/lib/nvidia/log'
BACKUP_DIRS = 'var/lib/nvidia/dirs'
INSTALLER = 'usr/bin/nvidia-installer'
UNINSTALLER = 'usr/bin/nvidia-uninstall'
LIBDIR = 'usr/lib/x86_64-linux-gnu'
MODULE_DIR = 'kernel/drivers/video'
MODULES = ('nvidia', 'nvidia-modeset', 'nvidia-drm', 'nvidia-uvm', 'nvidia-peermem')
VERSION_ENV = 'GPUFLEET_SIM_RUNFILE_VERSION'
PROGRAM_ENV = 'GPUFLEET_SIM_PROG'
INSTALLED_SYMLINK = 0
INSTALLED_FILE = 1
# misc.c: the concurrency level is the number of CPUs, at most 32.
MAX_CONCURRENCY = 32
# Packages whose files a runfile install would overwrite (Ubuntu's ship /usr/lib/nvidia/alternate-install-present).
DRIVER_PACKAGES = ('libnvidia-compute-', 'nvidia-utils-', 'nvidia-compute-utils-', 'nvidia-driver-cuda-libs', 'nvidia-driver-cuda')

ALTERNATE_INSTALL = ('The NVIDIA driver appears to have been installed previously using a different installer. To prevent '
                     'potential conflicts, it is recommended either to update the existing installation using the same '
                     'mechanism by which it was originally installed, or to uninstall the existing installation before '
                     'installing this driver.')
FAILED = ("Installation has failed.  Please see the file '/var/log/nvidia-installer.log' for details.  You may find "
          'suggestions on fixing installation problems in the README available on the Linux driver download page at '
          'www.nvidia.com.')
LOADED = ("An NVIDIA kernel module 'nvidia' appears to be already loaded in your kernel.  This may be because it is in use "
          '(for example, by an X server, a CUDA program, or the NVIDIA Persistence Daemon), but this may also happen if your '
          'kernel was configured without support for module unloading.  Some of the sanity checks that nvidia-installer '
          'performs to detect potential installation problems are not possible while an NVIDIA kernel module is running.')
LOADED_CHOICE = ('Would you like to continue installation and skip the sanity checks? If not, please abort the installation, '
                 'then close any programs which may be using the NVIDIA GPU(s), and attempt installation again.')
CONTINUING = ('Continuing installation despite the presence of a loaded NVIDIA kernel module.  Some sanity checks will not '
              'be performed.  It is strongly recommended that you reboot your computer after installation is complete.  If '
              'the installation is not successful after rebooting the computer, you can run `nvidia-uninstall` to attempt '
              'to remove the NVIDIA driver.')
REBOOT = ('It is strongly recommended that you reboot your computer after exiting the installer, due to the following '
          'condition(s) which the installer detected: \n\n  * Existing NVIDIA kernel modules were loaded during installation, '
          'and are likely still loaded.\n\nIf you continue to use the computer without rebooting, you may not be able to '
          'start new programs which use the NVIDIA GPU(s) until after you reboot or reload the NVIDIA kernel modules.')
XCONFIG_RESTORE = ('If you plan to no longer use the NVIDIA driver, you should make sure that no X screens are configured '
                   'to use the NVIDIA X driver in your X configuration file. If you used nvidia-xconfig to configure X, it may '
                   'have created a backup of your original configuration. Would you like to run `nvidia-xconfig '
                   '--restore-original-backup` to attempt restoration of the original X configuration file? (Answer: No)')
XCONFIG_RUN = ('Would you like to run the nvidia-xconfig utility to automatically update your X configuration file so that '
               'the NVIDIA X driver will be used when you restart X?  Any pre-existing X configuration file will be backed '
               'up. (Answer: No)')


class RunfileError(Exception):
    """The installer gives up: its ERROR line."""


# --------------------------------------------------------------------------- formats

def _crc_table():
    table = []
    for byte in range(256):
        value = byte << 24
        for _bit in range(8):
            value = ((value << 1) ^ 0x04C11DB7) if value & 0x80000000 else (value << 1)
            value &= 0xFFFFFFFF
        table.append(value)
    return table


_CRC_TABLE = _crc_table()


def crc(data):
    """nvidia-installer's file checksum (crc.c: CRC-32, MSB first, polynomial 0x04C11DB7, start ~0, no final xor; 0 when empty)."""
    if not data:
        return 0
    word = 0xFFFFFFFF
    for byte in bytearray(data):
        word = _CRC_TABLE[byte ^ (word >> 24)] ^ ((word << 8) & 0xFFFFFFFF)
    return word


def file_crc(relative):
    with open(state.path(relative), 'rb') as handle:
        return crc(handle.read())


def backwards_compatible_version(version):
    """backup.c: ``580.65.06`` -> ``1.0-5806506 (580.65.06)`` (the first line of /var/lib/nvidia/log)."""
    return '1.0-%s (%s)' % (''.join(char for char in version if char.isdigit()), version)


def log_header(log_name, version, argv, now, path_env):
    """log.c ``log_init``: the file's name, ``creation time: <ctime>``, ``installer version: <version>``, PATH, command line."""
    lines = ["nvidia-installer log file '%s'" % log_name, 'creation time: %s' % time.ctime(now),
             'installer version: %s' % version, '', 'PATH: %s' % (path_env or '(not specified)'), '',
             'nvidia-installer command line:']
    lines += ['    %s' % argument for argument in argv]
    return '\n'.join(lines) + '\n\n'


class Log(object):
    """What the stream user interface logs: ``-> `` lines (ui_log), ``WARNING: ``/``ERROR: `` lines (ui_warn, ui_error)."""

    def __init__(self, relative, version, argv, now):
        self.relative = relative
        self.text = log_header('/' + relative, version, argv, now, os.environ.get('PATH'))
        self.text += 'Using built-in stream user interface\n'
        cpus = os.cpu_count() or 1
        self.line('Detected %d CPUs online; setting concurrency level to %d.' % (cpus, min(cpus, MAX_CONCURRENCY)))

    def line(self, message, prefix='-> '):
        self.text += prefix + message + ('' if message.endswith('\n') else '\n')

    def warn(self, message):
        self.line(message, 'WARNING: ')

    def error(self, message):
        self.line(message, 'ERROR: ')

    def save(self):
        state.write_text(self.relative, self.text)


# --------------------------------------------------------------------------- the node

def booted_kernel():
    """The running kernel (what ``uname -r`` prints in the node), else the newest installed one."""
    release = (state.read_text(state.KERNEL_RELEASE_FILE) or '').strip()
    if release:
        return release
    kernels = state.kernels()
    return kernels[-1] if kernels else None


def driver_packages():
    """Installed dummy packages that own driver files a runfile install would overwrite."""
    return sorted(name for name in state.installed_packages() if name.startswith(DRIVER_PACKAGES))


def wrapper(module):
    return ('#!/bin/sh\n# Installed by nvidia-installer (simulated runfile driver); the code is bind-mounted from the host.\n'
            'PYTHONPATH=/usr/lib/gpufleet-sim exec python3 -m gpufleet_sim.%s "$@"\n' % module)


INSTALLER_WRAPPER = ('#!/bin/sh\n# nvidia-installer (simulated runfile driver): installs, or uninstalls when run as nvidia-uninstall.\n'
                     'GPUFLEET_SIM_PROG="$0" PYTHONPATH=/usr/lib/gpufleet-sim exec python3 -m gpufleet_sim.runfile "$@"\n')


def installed():
    """``{"version", "description", "entries": [{"kind", "path", "crc"|"target"}], "dirs": [...]}`` of the runfile
    driver on this node (/var/lib/nvidia/log), None when there is none."""
    text = state.read_text(BACKUP_LOG)
    if not text:
        return None
    lines = text.splitlines()
    if len(lines) < 2:
        return None
    version = lines[0].rsplit('(', 1)[-1].rstrip(')')
    entries = []
    index = 2
    while index + 1 < len(lines):
        kind, _sep, name = lines[index].partition(': ')
        value = lines[index + 1]
        index += 2
        if kind == str(INSTALLED_FILE):
            entries.append({'kind': 'file', 'path': name, 'crc': int(value)})
        elif kind == str(INSTALLED_SYMLINK):
            entries.append({'kind': 'link', 'path': name, 'target': value})
    dirs = [line for line in (state.read_text(BACKUP_DIRS) or '').splitlines() if line]
    return {'version': version, 'description': lines[1], 'entries': entries, 'dirs': dirs}


def _planned_files(version, kernel, is_open):
    """(relative path, content or None for a link, link target, mode) of what the installer puts on the node, in order."""
    module = '%s%s\n' % (version, ' open' if is_open else '')
    files = [
        ('usr/bin/nvidia-smi', wrapper('nvidia_smi'), None, 0o755),
        ('usr/bin/nvidia-persistenced', wrapper('nvidia_persistenced'), None, 0o755),
        (INSTALLER, INSTALLER_WRAPPER, None, 0o755),
        (UNINSTALLER, None, 'nvidia-installer', None),
        ('%s/libnvidia-ml.so.%s' % (LIBDIR, version), version + '\n', None, 0o755),
        ('%s/libnvidia-ml.so.1' % LIBDIR, None, 'libnvidia-ml.so.%s' % version, None),
    ]
    for name in MODULES:
        files.append(('lib/modules/%s/%s/%s.ko' % (kernel, MODULE_DIR, name), module, None, 0o644))
    return files


def _make_dirs(relative, created):
    """Create the folders of ``relative`` that are missing, recording them (outermost first) in ``created``."""
    missing = []
    folder = os.path.dirname(relative)
    while folder and not os.path.isdir(state.path(folder)):
        missing.append(folder)
        folder = os.path.dirname(folder)
    for folder in reversed(missing):
        os.makedirs(state.path(folder), exist_ok=True)
        created.append('/' + folder)


def install(version, is_open, argv, now=None, allow_running=False, asked=False):
    """Install the runfile driver ``version``; returns the log text.  Raises RunfileError (the log is written either way).

    ``asked``: no ``--kernel-module-type`` was given, so the installer chose between the two types itself (its question
    and the answer are logged).
    """
    now = time.time() if now is None else now
    log = Log(INSTALLER_LOG, version, argv, now)
    try:
        return _install(log, version, is_open, allow_running, asked)
    finally:
        log.save()


def _install(log, version, is_open, allow_running, asked):
    # install-from-cwd.c's order: the manifest (the module type), the loaded module, the existing driver, the alternate
    # install, the kernel modules, the uninstallation of the existing driver, the files.
    if asked:
        log.line('Multiple kernel module types are available for this system. Which would you like to use? (Answer: %s)'
                 % ('MIT/GPL' if is_open else 'NVIDIA Proprietary'))
    loaded = state.loaded_driver()
    if loaded:
        log.warn(LOADED)
        if not allow_running:
            log.line(LOADED_CHOICE + ' (Answer: Abort installation)')
            log.error(FAILED)
            raise RunfileError(FAILED)
        log.line(LOADED_CHOICE + ' (Answer: Continue installation)')
        log.warn(CONTINUING)
        log.line('Kernel module load tests will be skipped.')
    log.line('Installing NVIDIA driver version %s.' % version)
    previous = installed()
    if previous:
        log.line('There appears to already be a driver installed on your system (version: %s).  As part of installing this '
                 'driver (version: %s), the existing driver will be uninstalled.  Are you sure you want to continue? '
                 '(Answer: Continue installation)' % (previous['version'], version))
    if driver_packages():
        log.warn(ALTERNATE_INSTALL)
        log.line('Installation aborted.')
        log.error(FAILED)
        raise RunfileError(FAILED)
    kernel = booted_kernel()
    if not kernel:
        log.error('Unable to determine the running kernel (no /boot/vmlinuz-*).')
        raise RunfileError(FAILED)
    log.line("Kernel source path: '/lib/modules/%s/source'\n" % kernel)
    log.line("Kernel output path: '/lib/modules/%s/build'\n" % kernel)
    log.line('Performing CC sanity check with CC="/usr/bin/cc".')
    log.line('Performing CC check.')
    log.line('Cleaning kernel module build directory.')
    log.line('Building kernel modules')
    log.line('done.')
    log.line('Kernel module compilation complete.')
    if previous:
        _uninstall(log, previous)
    log.line("Installing '%s' (%s):" % (DESCRIPTION, version))
    _write_files(version, kernel, is_open)
    log.line('done.')
    log.line('Driver file installation is complete.')
    log.line('Running post-install sanity check:')
    log.line('done.')
    log.line('Post-install sanity check passed.')
    log.line(XCONFIG_RUN)
    log.line('Installation of the %s (version: %s) is now complete.  Please update your xorg.conf file as appropriate; '
             'see the file /usr/share/doc/NVIDIA_GLX-1.0/README.txt for details.' % (DESCRIPTION, version))
    if loaded:
        log.warn(REBOOT)
    return log.text


def _write_files(version, kernel, is_open):
    if os.path.isdir(state.path(BACKUP_DIR)):
        shutil.rmtree(state.path(BACKUP_DIR))
    os.makedirs(state.path(BACKUP_DIR), mode=0o700)
    record = [backwards_compatible_version(version), DESCRIPTION]
    created = []
    for relative, content, target, mode in _planned_files(version, kernel, is_open):
        _make_dirs(relative, created)
        full = state.path(relative)
        if os.path.lexists(full) and (target is not None or os.path.islink(full)):
            os.unlink(full)
        if target is not None:
            os.symlink(target, full)
            record += ['%d: /%s' % (INSTALLED_SYMLINK, relative), target]
        else:
            state.write_text(relative, content)
            os.chmod(full, mode)
            record += ['%d: /%s' % (INSTALLED_FILE, relative), '%d' % file_crc(relative)]
    state.write_text(BACKUP_LOG, '\n'.join(record) + '\n')
    os.chmod(state.path(BACKUP_LOG), 0o600)
    state.write_text(BACKUP_DIRS, ''.join(folder + '\n' for folder in created))


def uninstall(argv, now=None):
    """Uninstall the runfile driver (as ``nvidia-uninstall --silent``); returns the log text."""
    now = time.time() if now is None else now
    previous = installed()
    log = Log(UNINSTALL_LOG, previous['version'] if previous else 'unknown', argv, now)
    try:
        if previous is None:
            log.line('There is no NVIDIA driver currently installed.')
            return log.text
        log.line(XCONFIG_RESTORE)
        _uninstall(log, previous)
        return log.text
    finally:
        log.save()


def _uninstall(log, previous):
    """backup.c ``do_uninstall`` and ``uninstall_existing_driver``: check the record, remove what still matches it."""
    log.line('Parsing log file:')
    log.line('done.')
    log.line('Validating previous installation:')
    ok = {}
    for entry in previous['entries']:
        relative = entry['path'].lstrip('/')
        full = state.path(relative)
        if entry['kind'] == 'file':
            if not os.path.lexists(full):
                log.line("Unable to find installed file '%s' (No such file or directory)." % entry['path'])
                ok[entry['path']] = False
            elif os.path.islink(full) or not os.path.isfile(full):
                log.line("The installed file '%s' is not of the correct filetype." % entry['path'])
                ok[entry['path']] = False
            else:
                actual = file_crc(relative)
                ok[entry['path']] = actual == entry['crc']
                if not ok[entry['path']]:
                    log.line("The installed file '%s' has a different checksum (%dl) than when it was installed (%dl)."
                             % (entry['path'], actual, entry['crc']))
        else:
            if not os.path.lexists(full):
                log.line("Unable to access previously installed symlink '%s' (No such file or directory)." % entry['path'])
                ok[entry['path']] = False
            elif os.readlink(full) != entry['target']:
                log.line("The previously installed symlink '%s' has target '%s', but it was installed with target '%s'.  "
                         "%s will not be uninstalled." % (entry['path'], os.readlink(full), entry['target'], entry['path']))
                ok[entry['path']] = False
            else:
                ok[entry['path']] = True
    log.line('done.')
    if not all(ok.values()):
        log.warn("Your driver installation has been altered since it was initially installed; this may happen, for example, "
                 "if you have since installed the NVIDIA driver through a mechanism other than nvidia-installer (such as your "
                 "distribution's native package management system).  nvidia-installer will attempt to uninstall as best it "
                 "can.  Please see the file '/%s' for details." % log.relative)
    log.line('Uninstalling %s (%s):' % (previous['description'], backwards_compatible_version(previous['version'])))
    for entry in previous['entries']:
        if ok[entry['path']]:
            os.unlink(state.path(entry['path'].lstrip('/')))
    for folder in reversed(previous['dirs']):
        try:
            os.rmdir(state.path(folder.lstrip('/')))
        except OSError:
            log.line("Failed to delete the directory '%s' (Directory not empty)." % folder)
    shutil.rmtree(state.path(BACKUP_DIR), ignore_errors=True)
    log.line('done.')
    log.line('Running depmod and ldconfig:')
    log.line('done.')
    systemctl = shutil.which('systemctl')
    if systemctl:
        log.line('Running `%s daemon-reload`:' % systemctl)
        log.line('done.')
    log.line('Uninstallation of existing driver: %s (%s) is complete.' % (previous['description'], previous['version']))


# --------------------------------------------------------------------------- command line

def parse(argv):
    """``{"uninstall", "open", "allow_running", "version"}`` from nvidia-installer's options (the ones the simulation knows)."""
    options = {'uninstall': False, 'open': None, 'allow_running': False, 'version': False}
    for argument in argv:
        name, _sep, value = argument.partition('=')
        if argument in ('-s', '--silent', '--ui=none', '-q', '--no-questions', '-a', '--accept-license', '--no-x-check',
                        '--no-nouveau-check', '--disable-nouveau', '--no-cc-version-check', '--install-libglvnd'):
            continue
        if argument == '--uninstall':
            options['uninstall'] = True
        elif argument == '--allow-installation-with-running-driver':
            options['allow_running'] = True
        elif argument in ('-v', '--version'):
            options['version'] = True
        elif name in ('--kernel-module-type', '-M') and value in ('open', 'proprietary'):
            options['open'] = value == 'open'
        elif name in ('--kernel-module-build-directory', '-m') and value in ('kernel-open', 'kernel'):
            options['open'] = value == 'kernel-open'
        else:
            raise RunfileError("Unrecognized or unsupported option: '%s'" % argument)
    return options


def run(argv, program=None):
    """Run nvidia-installer (or nvidia-uninstall); returns the exit code."""
    program = program or os.environ.get(PROGRAM_ENV) or './nvidia-installer'
    try:
        options = parse(argv)
    except RunfileError as exc:
        sys.stderr.write('nvidia-installer: %s\n' % exc)
        return 1
    record = installed()
    own = os.environ.get(VERSION_ENV) or (record or {}).get('version')
    if options['version']:
        sys.stdout.write('\nnvidia-installer:  version %s\n  The NVIDIA Software Installer for Unix/Linux.\n\n'
                         '  This program is used to install, upgrade and uninstall The NVIDIA Accelerated Graphics Driver Set '
                         'for Linux-x86_64.\n\n' % (own or 'unknown'))
        return 0
    if options['uninstall'] or os.path.basename(program) == 'nvidia-uninstall':
        uninstall([program] + list(argv))
        return 0
    if not os.environ.get(VERSION_ENV):
        sys.stderr.write('nvidia-installer: no driver package to install ($%s names the .run file\'s release)\n' % VERSION_ENV)
        return 1
    is_open = options['open'] if options['open'] is not None else (state.branch_of(own) or 0) >= 560
    try:
        install(own, is_open, [program] + list(argv), allow_running=options['allow_running'], asked=options['open'] is None)
    except RunfileError as exc:
        sys.stderr.write('ERROR: %s\n' % exc)
        return 1
    return 0


def main(argv=None):
    """Entry point: ``python3 -m gpufleet_sim.runfile ARGS``."""
    return run(sys.argv[1:] if argv is None else list(argv))


if __name__ == '__main__':
    sys.exit(main())
