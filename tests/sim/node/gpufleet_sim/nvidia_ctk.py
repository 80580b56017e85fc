# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fake ``nvidia-ctk`` (NVIDIA Container Toolkit CLI).

``--version``/``-v`` prints the 1.12+ banner (``NVIDIA Container Toolkit CLI version X`` and a
``commit:`` line); the version is the owning package's (``nvidia-container-toolkit-base`` or
``nvidia-container-toolkit``).  ``runtime configure --runtime=docker|containerd|crio`` writes the
nvidia runtime into the runtime's configuration file (under the node root) like the real command.
"""

import hashlib
import json
import sys

from gpufleet_sim import state

PACKAGES = ('nvidia-container-toolkit-base', 'nvidia-container-toolkit')

CONFIGS = {
    'docker': 'etc/docker/daemon.json',
    'containerd': 'etc/containerd/config.toml',
    'crio': 'etc/crio/crio.conf.d/99-nvidia.toml',
}


def version():
    return state.owner(PACKAGES)[1]


def commit(own):
    return hashlib.sha1(('nvidia-container-toolkit %s' % own).encode('utf-8')).hexdigest()


def _log(message):
    sys.stderr.write('INFO[0000] %s\n' % message)


def _relative(path):
    return path.lstrip('/')


def configure(options):
    runtime = options.get('runtime', 'docker')
    if runtime not in CONFIGS:
        sys.stderr.write('ERRO[0000] unrecognized runtime \'%s\'\n' % runtime)
        return 1
    target = _relative(options.get('config') or CONFIGS[runtime])
    name = options.get('nvidia-runtime-name', 'nvidia')
    default = options.get('set-as-default', False)
    existing = state.read_text(target)
    if existing is None:
        _log('Config file does not exist; using empty config')
        existing = ''
    else:
        _log('Loading config from %s' % ('/' + target))
    if runtime == 'docker':
        try:
            config = json.loads(existing) if existing.strip() else {}
        except ValueError:
            sys.stderr.write('ERRO[0000] unable to load config: invalid JSON in %s\n' % ('/' + target))
            return 1
        config.setdefault('runtimes', {})[name] = {'args': [], 'path': 'nvidia-container-runtime'}
        if default:
            config['default-runtime'] = name
        text = json.dumps(config, indent=4, sort_keys=True) + '\n'
    elif runtime == 'containerd':
        block = ('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%s]\n'
                 '  privileged_without_host_devices = false\n  runtime_engine = ""\n  runtime_root = ""\n'
                 '  runtime_type = "io.containerd.runc.v2"\n\n'
                 '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%s.options]\n'
                 '    BinaryName = "/usr/bin/nvidia-container-runtime"\n' % (name, name))
        text = existing
        if 'runtimes.%s]' % name not in existing:
            text = (existing.rstrip('\n') + '\n\n' if existing.strip() else 'version = 2\n\n') + block
        if default and 'default_runtime_name' not in text:
            text += '\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "%s"\n' % name
    else:
        text = ('\n[crio]\n\n  [crio.runtime]\n\n    [crio.runtime.runtimes]\n\n      [crio.runtime.runtimes.%s]\n'
                '        runtime_path = "/usr/bin/nvidia-container-runtime"\n        runtime_type = "oci"\n' % name)
    state.write_text(target, text)
    _log('Wrote updated config to %s' % ('/' + target))
    _log('It is recommended that %s daemon be restarted.' % runtime)
    return 0


def run(argv):
    """Run nvidia-ctk; returns the exit code."""
    own = version()
    if not argv or argv[0] in ('-h', '--help'):
        sys.stdout.write('NAME:\n   NVIDIA Container Toolkit CLI - Tools to configure the NVIDIA Container Toolkit\n\n'
                         'USAGE:\n   NVIDIA Container Toolkit CLI [global options] command [command options] [arguments...]\n\n'
                         'VERSION:\n   %s\ncommit: %s\n' % (own, commit(own)))
        return 0
    if argv[0] in ('-v', '--version', 'version'):
        sys.stdout.write('NVIDIA Container Toolkit CLI version %s\ncommit: %s\n' % (own, commit(own)))
        return 0
    if argv[:2] == ['runtime', 'configure']:
        options = {}
        for token in argv[2:]:
            key, sep, value = token.lstrip('-').partition('=')
            options[key] = value if sep else True
        return configure(options)
    sys.stderr.write('Incorrect Usage. flag provided but not defined: -%s\n' % argv[0].lstrip('-'))
    return 1


def main(argv=None):
    """Entry point: ``python3 -m gpufleet_sim.nvidia_ctk ARGS``."""
    return run(sys.argv[1:] if argv is None else list(argv))


if __name__ == '__main__':
    sys.exit(main())
