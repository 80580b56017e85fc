# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Build the dummy NVIDIA rpms of rpm_catalog.py into a dnf repository with module streams.

``python3 build_rpm_repo.py OUTDIR`` (or ``build(outdir)``) writes every ``.rpm`` with ``rpmbuild -bb`` (one
generated spec per package, scriptlets included), indexes them with ``createrepo_c`` and adds the
``nvidia-driver`` module streams (``modules.yaml``) with ``modifyrepo_c``, for nodes that use::

    [gpufleet-sim]
    baseurl=file:///srv/gpufleet-rpm
    gpgcheck=0

A stamp in OUTDIR holding a hash of the catalogs and this file makes a second call with unchanged sources
return at once; a lock file serialises concurrent builds.  Needs ``rpmbuild`` (Debian package ``rpm``) and
``createrepo_c``/``modifyrepo_c`` (Debian package ``createrepo-c``).
"""

import argparse
import concurrent.futures
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import rpm_catalog  # noqa: E402  pylint: disable=wrong-import-position,import-error

STAMP = '.gpufleet-rpm-repo-stamp'
LOCK = '.gpufleet-rpm-repo-lock'
EPOCH = 1761955200  # 2025-11-01 00:00:00 UTC: build time and file times (SOURCE_DATE_EPOCH)
SCRIPTLETS = ('pre', 'post', 'preun', 'postun', 'posttrans')


class BuildError(Exception):
    """The repository could not be built; the message says why."""


def source_hash():
    digest = hashlib.sha256()
    for name in ('catalog.py', 'rpm_catalog.py', 'build_rpm_repo.py'):
        with open(os.path.join(HERE, name), 'rb') as handle:
            digest.update(name.encode('utf-8') + b'\0' + handle.read() + b'\0')
    return digest.hexdigest()


def spec_text(record, staged):
    """The spec of one record; %install copies the staged tree."""
    lines = ['Name: %s' % record['name'], 'Version: %s' % record['version'], 'Release: %s' % record['release']]
    if record['epoch']:
        lines.append('Epoch: %d' % record['epoch'])
    lines += ['Summary: %s (gpufleet simulation)' % record['summary'], 'License: GPL-3.0-or-later', 'URL: https://github.com/gpufleet/lifecycle',
              'BuildArch: %s' % record['arch'], 'AutoReqProv: no']
    for key, tag in (('requires', 'Requires'), ('provides', 'Provides'), ('conflicts', 'Conflicts'), ('obsoletes', 'Obsoletes')):
        lines += ['%s: %s' % (tag, value) for value in record[key]]
    lines += ['', '%description', 'A simulation package of the gpufleet.lifecycle test fleet: the name, version and relationships',
              'of the real package, no NVIDIA software.', '', '%install', 'cp -a %s/. %%{buildroot}/' % staged, '']
    for name in SCRIPTLETS:
        if record['scripts'].get(name):
            lines += ['%%%s' % name, record['scripts'][name].rstrip('\n').replace('%', '%%'), '']
    lines.append('%files')
    for item in record['files']:
        lines.append(item['path'])
    return '\n'.join(lines) + '\n'


def build_rpm(record, workdir, outdir):
    root = tempfile.mkdtemp(prefix=record['name'] + '.', dir=workdir)
    staged = os.path.join(root, 'staged')
    for item in record['files']:
        path = os.path.join(staged, item['path'].lstrip('/'))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if 'symlink' in item:
            os.symlink(item['symlink'], path)
        else:
            with open(path, 'w', encoding='utf-8') as handle:
                handle.write(item['content'])
            os.chmod(path, item.get('mode', 0o644))
    spec = os.path.join(root, 'package.spec')
    with open(spec, 'w', encoding='utf-8') as handle:
        handle.write(spec_text(record, staged))
    defines = ['_topdir %s' % root, '_rpmdir %s' % outdir, '_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm',
               '_binary_payload w9.gzdio', '__os_install_post %{nil}', '_build_id_links none', 'debug_package %{nil}',
               'use_source_date_epoch_as_buildtime 1', 'clamp_mtime_to_source_date_epoch 1', '_buildhost gpufleet-sim',
               '_dbpath %s' % os.path.join(root, 'rpmdb')]
    argv = ['rpmbuild', '-bb', '--quiet']
    for define in defines:
        argv += ['--define', define]
    environment = dict(os.environ, SOURCE_DATE_EPOCH=str(EPOCH), LC_ALL='C')
    process = subprocess.run(argv + [spec], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment, check=False)
    if process.returncode != 0:
        raise BuildError('rpmbuild %s failed (rc=%d): %s' % (record['name'], process.returncode, process.stdout.decode('utf-8', 'replace')))
    shutil.rmtree(root)
    return rpm_catalog.rpm_filename(record)


def _up_to_date(outdir, stamp):
    try:
        with open(os.path.join(outdir, STAMP), encoding='utf-8') as handle:
            return handle.read().strip() == stamp and os.path.exists(os.path.join(outdir, 'repodata', 'repomd.xml'))
    except OSError:
        return False


def build(outdir):
    """Build the repository into outdir unless its stamp is current; return its absolute path."""
    outdir = os.path.abspath(outdir)
    os.makedirs(outdir, exist_ok=True)
    os.chmod(outdir, 0o755)
    stamp = source_hash()
    if _up_to_date(outdir, stamp):
        return outdir
    missing = [tool for tool in ('rpmbuild', 'createrepo_c', 'modifyrepo_c') if shutil.which(tool) is None]
    if missing:
        raise BuildError('%s not installed (Debian packages rpm, createrepo-c)' % ', '.join(missing))
    with open(os.path.join(outdir, LOCK), 'a', encoding='utf-8') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not _up_to_date(outdir, stamp):
                _build_locked(outdir, stamp)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return outdir


def _run(argv):
    process = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    if process.returncode != 0:
        raise BuildError('%s failed (rc=%d): %s' % (' '.join(argv), process.returncode, process.stdout.decode('utf-8', 'replace')))


def _build_locked(outdir, stamp):
    records = rpm_catalog.packages()
    for name in os.listdir(outdir):
        if name.endswith('.rpm') or name == STAMP:
            os.unlink(os.path.join(outdir, name))
    shutil.rmtree(os.path.join(outdir, 'repodata'), ignore_errors=True)
    workdir = tempfile.mkdtemp(prefix='.staging-', dir=outdir)
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, (os.cpu_count() or 2) * 2)) as pool:
            list(pool.map(lambda record: build_rpm(record, workdir, outdir), records))
        modules = os.path.join(workdir, 'modules.yaml')
        with open(modules, 'w', encoding='utf-8') as handle:
            handle.write(rpm_catalog.modules_yaml(records))
        _run(['createrepo_c', '--quiet', '--no-database', '--set-timestamp-to-revision', '--revision', str(EPOCH), outdir])
        _run(['modifyrepo_c', '--mdtype=modules', modules, os.path.join(outdir, 'repodata')])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for folder, dirs, files in os.walk(outdir):
        for name in dirs:
            os.chmod(os.path.join(folder, name), 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    with open(os.path.join(outdir, STAMP), 'w', encoding='utf-8') as handle:
        handle.write(stamp + '\n')


def main(argv=None):
    parser = argparse.ArgumentParser(description='Build the dummy NVIDIA rpm repository (with module streams) of the simulated fleet.')
    parser.add_argument('outdir', help='folder of the repository (created if needed)')
    arguments = parser.parse_args(argv)
    try:
        path = build(arguments.outdir)
    except (BuildError, OSError, ValueError) as error:
        sys.stderr.write('build_rpm_repo: %s\n' % error)
        return 1
    sys.stdout.write(path + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
