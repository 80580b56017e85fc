# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Build the dummy NVIDIA packages of catalog.py into a flat apt repository.

``python3 build_repo.py OUTDIR`` (or ``build(outdir)``) writes every ``.deb`` with
``dpkg-deb --build --root-owner-group`` and the flat-repository indexes ``Packages``,
``Packages.gz`` and ``Release`` (MD5Sum, SHA1, SHA256 and SHA512) into OUTDIR, for nodes
that use::

    deb [trusted=yes] file:/srv/gpufleet-repo ./

The indexes are written here in Python (no dpkg-dev or apt-utils needed).  Builds are
reproducible (fixed timestamps), and a stamp in OUTDIR holding a hash of catalog.py and
this file makes a second call with unchanged sources return at once.  A lock file in
OUTDIR serialises concurrent builds.  Stdlib only; needs ``dpkg-deb``.
"""

import argparse
import concurrent.futures
import fcntl
import gzip
import hashlib
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
STAMP = '.gpufleet-repo-stamp'
LOCK = '.gpufleet-repo-lock'
EPOCH = 1761955200  # 2025-11-01 00:00:00 UTC: file times inside the packages and the Release date
RELEASE_DATE = 'Sat, 01 Nov 2025 00:00:00 UTC'
INDEXES = ('Packages', 'Packages.gz', 'Release')
# Field order of control files and Packages stanzas (Filename ... SHA256 only in Packages).
FIELDS = (('Package', 'package'), ('Version', 'version'), ('Architecture', 'architecture'), ('Maintainer', 'maintainer'),
          ('Installed-Size', None), ('Pre-Depends', 'pre_depends'), ('Depends', 'depends'), ('Conflicts', 'conflicts'),
          ('Breaks', 'breaks'), ('Replaces', 'replaces'), ('Provides', 'provides'), ('Filename', None), ('Size', None),
          ('MD5sum', None), ('SHA1', None), ('SHA256', None), ('Section', 'section'), ('Priority', 'priority'),
          ('Homepage', None), ('Description', None))


class BuildError(Exception):
    """The repository could not be built; the message says why."""


def _load_catalog():
    spec = importlib.util.spec_from_file_location('gpufleet_sim_catalog', os.path.join(HERE, 'catalog.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CATALOG = _load_catalog()


def source_hash():
    """Hash of the sources that decide the repository's content."""
    digest = hashlib.sha256()
    for name in ('catalog.py', 'build_repo.py'):
        with open(os.path.join(HERE, name), 'rb') as handle:
            digest.update(name.encode('utf-8') + b'\0' + handle.read() + b'\0')
    return digest.hexdigest()


def _installed_size(record):
    """Installed-Size in KiB the way dpkg-gencontrol counts it: each file rounded up, 1 per link."""
    total = 0
    for item in record['files']:
        if 'symlink' in item:
            total += 1
        else:
            total += (len(item['content'].encode('utf-8')) + 1023) // 1024
    return max(total, 1)


def control_fields(record):
    """The control fields of a record as an ordered list of (name, value)."""
    values = {
        'Installed-Size': str(_installed_size(record)),
        'Homepage': CATALOG.HOMEPAGE,
        'Description': '%s (gpufleet simulation)\n This is a simulation package of the gpufleet.lifecycle test fleet: it has\n'
                       ' the name, version and relationships of the real package and holds no NVIDIA\n'
                       ' software; its tools run the fakes in %s.' % (record['summary'], CATALOG.SIM_LIB),
    }
    fields = []
    for name, key in FIELDS:
        if key is None:
            value = values.get(name)
        else:
            value = record[key]
            if isinstance(value, list):
                value = ', '.join(value)
        if value:
            fields.append((name, value))
    return fields


def format_stanza(fields):
    """``Name: value`` lines of one stanza (no trailing blank line)."""
    return ''.join('%s: %s\n' % (name, value) for name, value in fields)


def _write(path, data, mode=0o644):
    if isinstance(data, str):
        data = data.encode('utf-8')
    with open(path, 'wb') as handle:
        handle.write(data)
    os.chmod(path, mode)


def _stage(record, root):
    """Lay out one package's tree (files, DEBIAN/) under root, with fixed times."""
    debian = os.path.join(root, 'DEBIAN')
    os.makedirs(debian)
    for item in record['files']:
        path = os.path.join(root, item['path'].lstrip('/'))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if 'symlink' in item:
            os.symlink(item['symlink'], path)
        else:
            _write(path, item['content'], item.get('mode', 0o644))
    _write(os.path.join(debian, 'control'), format_stanza(control_fields(record)))
    if record['conffiles']:
        _write(os.path.join(debian, 'conffiles'), ''.join(path + '\n' for path in record['conffiles']))
    for name, text in sorted(record['scripts'].items()):
        _write(os.path.join(debian, name), text, 0o755)
    for folder, dirs, files in os.walk(root, topdown=False):
        for name in files + dirs:
            path = os.path.join(folder, name)
            if not os.path.islink(path) and os.path.isdir(path):
                os.chmod(path, 0o755)
            os.utime(path, (EPOCH, EPOCH), follow_symlinks=False)
    os.chmod(root, 0o755)
    os.utime(root, (EPOCH, EPOCH))


def build_deb(record, workdir, outdir):
    """Build one record into outdir; return the .deb's file name."""
    filename = CATALOG.deb_filename(record)
    root = tempfile.mkdtemp(prefix=filename + '.', dir=workdir)
    _stage(record, root)
    environment = dict(os.environ, SOURCE_DATE_EPOCH=str(EPOCH), LC_ALL='C')
    process = subprocess.run(['dpkg-deb', '--build', '--root-owner-group', '-Zgzip', root, os.path.join(outdir, filename)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment, check=False)
    if process.returncode != 0:
        raise BuildError('dpkg-deb --build %s failed (rc=%d): %s' % (filename, process.returncode, process.stdout.decode('utf-8', 'replace')))
    shutil.rmtree(root)
    return filename


def _digests(data):
    return {name: hashlib.new(name, data).hexdigest() for name in ('md5', 'sha1', 'sha256', 'sha512')}


def packages_index(records, outdir):
    """The text of the Packages index for the built records (sorted by name, then version as built)."""
    stanzas = []
    for record in sorted(records, key=lambda item: (item['package'], CATALOG.deb_filename(item))):
        filename = CATALOG.deb_filename(record)
        with open(os.path.join(outdir, filename), 'rb') as handle:
            data = handle.read()
        digests = _digests(data)
        extra = {'Filename': './' + filename, 'Size': str(len(data)), 'MD5sum': digests['md5'], 'SHA1': digests['sha1'],
                 'SHA256': digests['sha256']}
        fields = control_fields(record)
        position = [name for name, _value in fields].index('Section')
        fields[position:position] = [(name, extra[name]) for name in ('Filename', 'Size', 'MD5sum', 'SHA1', 'SHA256')]
        stanzas.append(format_stanza(fields))
    return '\n'.join(stanzas)


def release_file(files):
    """The Release text for {name: bytes} index files."""
    lines = ['Origin: gpufleet-sim', 'Label: gpufleet-sim', 'Suite: gpufleet-sim', 'Codename: gpufleet-sim',
             'Date: ' + RELEASE_DATE, 'Architectures: amd64 all',
             'Description: dummy NVIDIA packages of the gpufleet.lifecycle simulated fleet']
    for title, algorithm in (('MD5Sum', 'md5'), ('SHA1', 'sha1'), ('SHA256', 'sha256'), ('SHA512', 'sha512')):
        lines.append(title + ':')
        for name in sorted(files):
            lines.append(' %s %d %s' % (_digests(files[name])[algorithm], len(files[name]), name))
    return '\n'.join(lines) + '\n'


def _gzip(data):
    buffer = io.BytesIO()
    with gzip.GzipFile(filename='', mode='wb', fileobj=buffer, mtime=0, compresslevel=9) as handle:
        handle.write(data)
    return buffer.getvalue()


def _clean(outdir):
    for name in os.listdir(outdir):
        if name.endswith('.deb') or name in INDEXES or name == STAMP:
            os.unlink(os.path.join(outdir, name))


def _up_to_date(outdir, stamp):
    try:
        with open(os.path.join(outdir, STAMP), encoding='utf-8') as handle:
            current = handle.read().strip()
    except OSError:
        return False
    return current == stamp and all(os.path.exists(os.path.join(outdir, name)) for name in INDEXES)


def build(outdir):
    """Build the repository into outdir (created if needed) unless its stamp is current; return its absolute path."""
    outdir = os.path.abspath(outdir)
    os.makedirs(outdir, exist_ok=True)
    os.chmod(outdir, 0o755)
    stamp = source_hash()
    if _up_to_date(outdir, stamp):
        return outdir
    if shutil.which('dpkg-deb') is None:
        raise BuildError('dpkg-deb is not installed (Debian package dpkg)')
    with open(os.path.join(outdir, LOCK), 'a', encoding='utf-8') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not _up_to_date(outdir, stamp):
                _build_locked(outdir, stamp)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return outdir


def _build_locked(outdir, stamp):
    records = CATALOG.check(CATALOG.packages())
    _clean(outdir)
    workdir = tempfile.mkdtemp(prefix='.staging-', dir=outdir)
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, (os.cpu_count() or 2) * 2)) as pool:
            list(pool.map(lambda record: build_deb(record, workdir, outdir), records))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    packages = packages_index(records, outdir).encode('utf-8')
    indexes = {'Packages': packages, 'Packages.gz': _gzip(packages)}
    for name, data in indexes.items():
        _write(os.path.join(outdir, name), data)
    _write(os.path.join(outdir, 'Release'), release_file(indexes))
    for name in os.listdir(outdir):
        if name.endswith('.deb'):
            os.chmod(os.path.join(outdir, name), 0o644)
    _write(os.path.join(outdir, STAMP), stamp + '\n')


def main(argv=None):
    """Command line: build OUTDIR and print its path."""
    parser = argparse.ArgumentParser(description='Build the dummy NVIDIA apt repository of the simulated fleet.')
    parser.add_argument('outdir', help='folder of the flat repository (created if needed)')
    arguments = parser.parse_args(argv)
    try:
        path = build(arguments.outdir)
    except (BuildError, OSError, ValueError) as error:
        sys.stderr.write('build_repo: %s\n' % error)
        return 1
    sys.stdout.write(path + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
