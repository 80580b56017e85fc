# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stand-in ``dnf`` and ``rpm`` (one script, installed under both names) for the RHEL path of the package roles.

No RHEL node can be started here, so the dnf path runs on a simulated (Debian) node whose facts say
RHEL 9, with this script as its ``dnf`` and ``rpm``.  It keeps an rpm database, the CUDA repository's
package list, the enabled ``nvidia-driver`` module stream and the version locks in
``/var/lib/gpufleet-fake-dnf/state.json`` and logs every call (``calls.log``, one JSON list a line).

It behaves as dnf 4 does where the roles depend on it, and says so in dnf's words where it refuses:

* module streams filter the driver packages: only the enabled stream's branch can be installed, and
  ``module enable`` of another stream while one is enabled fails (dnf needs ``module reset`` first);
* a version lock hides every other version of the package (``No match for argument``);
* ``install NAME-VERSION`` installs that version whatever is installed, downgrades included;
* the kmod ``-dkms`` packages run their scriptlets (``dkms install`` for the running kernel, ``dkms remove``
  of the old version) and ``nvidia-driver-libs`` replaces ``libnvidia-ml.so.1``, so the simulated node
  loads the new driver at the next boot exactly as with the Debian packages.

Output formats: ``rpm -qa --qf`` as the query format asks, ``dnf repoquery`` NEVRA lines, the
``dnf module list`` table with ``[e]``/``[d]`` markers and its ``Hint:`` legend, ``versionlock list``
``name-E:V-R.*`` lines (the real samples these follow are in tests/unit/fixtures/real-outputs/packages/).
"""

import json
import os
import re
import subprocess
import sys

STATE_DIR = os.environ.get('FAKE_DNF_STATE', '/var/lib/gpufleet-fake-dnf')
STATE = os.path.join(STATE_DIR, 'state.json')
CALLS = os.path.join(STATE_DIR, 'calls.log')
LIBDIR = '/usr/lib/x86_64-linux-gnu'
# Where the simulated node's tools read the version of the package that owns them (tests/sim/node/gpufleet_sim/state.py).
SIM_VERSIONS = '/usr/share/gpufleet-sim/versions'
# Tools an rpm ships (replacing the simulated deb's wrapper, which names the owning package for the fake tool).
TOOLS = {'nvidia-fabric-manager': ('/usr/bin/nv-fabricmanager',)}
DRIVER_MODULE = ('nvidia-driver', 'nvidia-driver-libs', 'nvidia-driver-cuda', 'nvidia-driver-cuda-libs', 'nvidia-kmod-common',
                 'nvidia-persistenced', 'nvidia-modprobe', 'kmod-nvidia-latest-dkms', 'kmod-nvidia-open-dkms',
                 'nvidia-fabric-manager', 'cuda-drivers')


def load():
    with open(STATE, encoding='utf-8') as handle:
        return json.load(handle)


def save(state):
    with open(STATE + '.tmp', 'w', encoding='utf-8') as handle:
        json.dump(state, handle, indent=1, sort_keys=True)
    os.replace(STATE + '.tmp', STATE)


def split_evr(evr):
    epoch = '0'
    if ':' in evr:
        epoch, evr = evr.split(':', 1)
    version, release = evr.rsplit('-', 1)
    return epoch, version, release


def branch_of(version):
    return version.split('.', 1)[0]


def streams_of(name, version):
    """The nvidia-driver streams a package version belongs to (empty: not modular)."""
    if name not in DRIVER_MODULE:
        return []
    branch = branch_of(version)
    if name == 'kmod-nvidia-open-dkms':
        return ['%s-open' % branch]
    if name == 'kmod-nvidia-latest-dkms':
        return ['%s-dkms' % branch]
    return ['%s-dkms' % branch, '%s-open' % branch]


def visible(state, name, evr, modular_filtering=True, locks=True):
    """Whether dnf would offer this repository package (module filtering, version locks)."""
    version = split_evr(evr)[1]
    streams = streams_of(name, version)
    if modular_filtering and streams and state['stream'] not in streams:
        return False
    lock = state['locks'].get(name) if locks else None
    return lock is None or lock == evr


def fail(*lines):
    sys.stderr.write('\n'.join(lines) + '\n')
    return 1


# ------------------------------------------------------------------------------------------------- rpm

def rpm(state, args):
    if args[:2] == ['-qa', '--qf']:
        out = []
        for name in sorted(state['installed']):
            for evr in state['installed'][name]:
                epoch, version, release = split_evr(evr)
                out.append(args[2].replace('%{NAME}', name).replace('%{EPOCHNUM}', epoch).replace('%{VERSION}', version)
                           .replace('%{RELEASE}', release).replace('%{ARCH}', 'x86_64').replace('\\n', '\n').replace('\\t', '\t'))
        sys.stdout.write(''.join(out))
        return 0
    return fail('rpm: stand-in knows only -qa --qf')


# ------------------------------------------------------------------------------------------------- dnf

def module_list(state, names):
    if names and names != ['nvidia-driver']:
        return fail('Error: No matching Modules to list')
    streams = set()
    for name, evrs in state['repo'].items():
        for evr in evrs:
            streams.update(streams_of(name, split_evr(evr)[1]))
    rows = [('Name', 'Stream', 'Profiles', 'Summary')]
    for stream in sorted(streams):
        rows.append(('nvidia-driver', stream + (' [e]' if stream == state['stream'] else ''), 'default [d], fm, ks, src',
                     'Nvidia driver for %s branch' % stream))
    widths = [max(len(row[column]) for row in rows) + 1 for column in range(3)]
    sys.stdout.write('cuda-rhel9-x86_64\n')
    for row in rows:
        sys.stdout.write(''.join(row[column].ljust(widths[column]) for column in range(3)) + row[3] + '\n')
    sys.stdout.write('\nHint: [d]efault, [e]nabled, [x]disabled, [i]nstalled\n')
    return 0


def module(state, args):
    action, rest = args[0], args[1:]
    if action == 'list':
        return module_list(state, rest)
    if action == 'reset' and rest == ['nvidia-driver']:
        state['stream'] = None
        save(state)
        return 0
    if action == 'enable' and len(rest) == 1 and rest[0].startswith('nvidia-driver:'):
        stream = rest[0].split(':', 1)[1]
        if state['stream'] not in (None, stream):
            return fail("The operation would result in switching of module 'nvidia-driver' stream '%s' to stream '%s'" % (state['stream'], stream),
                        'Error: It is not possible to switch enabled streams of a module unless explicitly enabled via '
                        'configuration option module_stream_switch.',
                        'It is recommended to rather remove all installed content from the module, and reset the module using '
                        "'dnf module reset <module_name>' command. After you reset the module, you can install the other stream.")
        state['stream'] = stream
        save(state)
        return 0
    return fail('dnf module: stand-in does not know %r' % args)


def repoquery(state, args):
    filtering = '--disable-modular-filtering' not in args
    locks = '--disableplugin=versionlock' not in args
    names = [arg for arg in args if not arg.startswith('-')]
    for name in names:
        for evr in state['repo'].get(name, []):
            if not visible(state, name, evr, filtering, locks):
                continue
            epoch, version, release = split_evr(evr)
            sys.stdout.write('%s-%s:%s-%s.x86_64\n' % (name, epoch, version, release))
    return 0


def versionlock(state, args):
    action, rest = (args[0], args[1:]) if args else ('list', [])
    if action == 'list':
        for name in sorted(state['locks']):
            epoch, version, release = split_evr(state['locks'][name])
            sys.stdout.write('%s-%s:%s-%s.*\n' % (name, epoch, version, release))
        return 0
    if action == 'delete':
        for name in rest:
            if name in state['locks']:
                epoch, version, release = split_evr(state['locks'].pop(name))
                sys.stdout.write('Deleting versionlock for: %s-%s:%s-%s.*\n' % (name, epoch, version, release))
        save(state)
        return 0
    if action == 'add':
        for spec in rest:
            name, evr = resolve_installed(state, spec)
            if name is None:
                return fail('Error: No package found for: %s' % spec)
            state['locks'][name] = evr
            epoch, version, release = split_evr(evr)
            sys.stdout.write('Adding versionlock on: %s-%s:%s-%s.*\n' % (name, epoch, version, release))
        save(state)
        return 0
    return fail('dnf versionlock: stand-in does not know %r' % args)


def _split_spec(spec, known):
    """name and version of ``name-version`` (or a bare name) among ``known`` names."""
    if spec in known:
        return spec, None
    match = re.match(r'^(.+)-((?:[0-9]+:)?[0-9][^-]*)$', spec)
    if match and match.group(1) in known:
        return match.group(1), match.group(2)
    return None, None


def _matches(evr, wanted):
    if wanted is None:
        return True
    epoch, version, release = split_evr(evr)
    if ':' in wanted:
        wanted_epoch, wanted = wanted.split(':', 1)
        if wanted_epoch != epoch:
            return False
    return wanted in (version, '%s-%s' % (version, release))


def resolve_installed(state, spec):
    name, wanted = _split_spec(spec, state['installed'])
    if name is None:
        return None, None
    for evr in state['installed'][name]:
        if _matches(evr, wanted):
            return name, evr
    return None, None


def scriptlets_remove(name, evr):
    version = split_evr(evr)[1]
    try:
        os.remove(os.path.join(SIM_VERSIONS, name))
    except OSError:
        pass
    if name in ('kmod-nvidia-latest-dkms', 'kmod-nvidia-open-dkms'):
        subprocess.call(['dkms', 'remove', 'nvidia/%s' % version, '--all'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            os.remove('/usr/src/nvidia-%s/dkms.conf' % version)
        except OSError:
            pass


def scriptlets_install(name, evr):
    version = split_evr(evr)[1]
    os.makedirs(SIM_VERSIONS, exist_ok=True)
    with open(os.path.join(SIM_VERSIONS, name), 'w', encoding='utf-8') as handle:
        handle.write(version + '\n')
    for tool in TOOLS.get(name, ()):
        if os.path.exists(tool):
            with open(tool, encoding='utf-8') as handle:
                text = re.sub(r'GPUFLEET_SIM_PACKAGE=\S*', 'GPUFLEET_SIM_PACKAGE=' + name, handle.read())
            with open(tool, 'w', encoding='utf-8') as handle:
                handle.write(text)
    if name in ('kmod-nvidia-latest-dkms', 'kmod-nvidia-open-dkms'):
        os.makedirs('/usr/src/nvidia-%s' % version, exist_ok=True)
        with open('/usr/src/nvidia-%s/dkms.conf' % version, 'w', encoding='utf-8') as handle:
            handle.write('PACKAGE_NAME=nvidia\nPACKAGE_VERSION=%s\nOPEN=%s\nBUILT_MODULE_NAME[0]="nvidia"\n'
                         % (version, 'yes' if 'open' in name else 'no'))
        return subprocess.call(['dkms', 'install', 'nvidia/%s' % version])
    if name == 'nvidia-driver-libs':
        library = os.path.join(LIBDIR, 'libnvidia-ml.so.%s' % version)
        os.makedirs(LIBDIR, exist_ok=True)
        with open(library, 'w', encoding='utf-8') as handle:
            handle.write(version + '\n')
        link = os.path.join(LIBDIR, 'libnvidia-ml.so.1')
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(os.path.basename(library), link)
    return 0


def install(state, specs):
    chosen = []
    for spec in specs:
        name, wanted = _split_spec(spec, state['repo'])
        candidates = [evr for evr in state['repo'].get(name, []) if _matches(evr, wanted) and visible(state, name, evr)] if name else []
        if not candidates:
            return fail('No match for argument: %s' % spec, 'Error: Unable to find a match: %s' % spec)
        chosen.append((name, candidates[-1]))
    for name, evr in chosen:
        old = state['installed'].get(name, [])
        if evr in old:
            continue
        if name.startswith('kernel'):
            state['installed'][name] = old + [evr]
        else:
            for previous in old:
                scriptlets_remove(name, previous)
            state['installed'][name] = [evr]
        rc = scriptlets_install(name, evr)
        if rc:
            save(state)
            return fail('warning: %%post(%s) scriptlet failed, exit status %d' % (name, rc))
        sys.stdout.write('Installed: %s-%s.x86_64\n' % (name, evr))
    save(state)
    return 0


def remove(state, names):
    missing = [name for name in names if name not in state['installed']]
    if missing:
        return fail(*(['No match for argument: %s' % name for name in missing] + ['Error: No packages marked for removal.']))
    for name in names:
        for evr in state['installed'].pop(name):
            scriptlets_remove(name, evr)
            sys.stdout.write('Removed: %s-%s.x86_64\n' % (name, evr))
    save(state)
    return 0


def dnf(state, args):
    args = [arg for arg in args if arg not in ('-q', '-y', '--quiet', '--assumeyes')]
    if not args:
        return fail('dnf: no command')
    command, rest = args[0], args[1:]
    if command == 'module' and rest:
        return module(state, rest)
    if command == 'repoquery':
        return repoquery(state, rest)
    if command == 'versionlock':
        return versionlock(state, rest)
    if command == 'install' and rest:
        return install(state, rest)
    if command == 'remove' and rest:
        return remove(state, rest)
    return fail('dnf: stand-in does not know %r' % args)


def main():
    tool = os.path.basename(sys.argv[0])
    args = sys.argv[1:]
    with open(CALLS, 'a', encoding='utf-8') as handle:
        handle.write(json.dumps([tool] + args) + '\n')
    state = load()
    return rpm(state, args) if tool == 'rpm' else dnf(state, args)


if __name__ == '__main__':
    sys.exit(main())
