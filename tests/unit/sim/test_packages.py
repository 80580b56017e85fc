# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The dummy NVIDIA package set (tests/sim/packages): the built .debs, the flat repository and real apt against it.

The repository is built once per module into a temporary folder.  apt runs in simulation
mode (``apt-get -s``) against it with its own empty (or hand-written) dpkg status and no
configuration of the host.
"""

import gzip
import hashlib
import importlib.util
import io
import os
import re
import subprocess
import tarfile
import time

import pytest

from ansible_collections.gpufleet.lifecycle.tests.needs import refuse_inside_simulation, require_root, require_tool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PACKAGES_DIR = os.path.join(ROOT, 'tests', 'sim', 'packages')
SIM_LIB = '/usr/lib/gpufleet-sim'


def _load(name):
    spec = importlib.util.spec_from_file_location('gpufleet_sim_test_' + name, os.path.join(PACKAGES_DIR, name + '.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILD_REPO = _load('build_repo')
CATALOG = BUILD_REPO.CATALOG
RECORDS = CATALOG.packages()
NVIDIA = [record for record in RECORDS if record['package'] != 'dkms' and not record['package'].startswith('linux-image')]


@pytest.fixture(scope='module', autouse=True)
def _dpkg_deb():
    require_tool('dpkg-deb', 'apt-get install dpkg (the dummy packages are built with dpkg-deb)')


# (package, path, fake module) of every wrapper.
WRAPPERS = [('nvidia-utils-%s' % branch, '/usr/bin/nvidia-smi', 'nvidia_smi') for branch in ('550', '580')] + [
    ('nvidia-compute-utils-%s' % branch, '/usr/bin/nvidia-persistenced', 'nvidia_persistenced') for branch in ('550', '580')] + [
    ('nvidia-fabricmanager-%s' % branch, '/usr/bin/nv-fabricmanager', 'nv_fabricmanager') for branch in ('550', '580')] + [
    ('dkms', '/usr/sbin/dkms', 'dkms'),
    ('nvidia-container-toolkit-base', '/usr/bin/nvidia-ctk', 'nvidia_ctk'),
    ('libnvidia-container-tools', '/usr/bin/nvidia-container-cli', 'nvidia_container_cli'),
    ('datacenter-gpu-manager', '/usr/bin/dcgmi', 'dcgmi'),
    ('datacenter-gpu-manager-4-core', '/usr/bin/dcgmi', 'dcgmi'),
    ('cuda-toolkit-12-4', '/usr/local/cuda-12.4/bin/nvcc', 'nvcc'),
    ('cuda-toolkit-13-0', '/usr/local/cuda-13.0/bin/nvcc', 'nvcc'),
]

EXPECTED_VERSIONS = {
    'nvidia-driver-550-server': ['550.127.05-0ubuntu1'],
    'nvidia-driver-580-server': ['580.65.06-0ubuntu1', '580.82.07-0ubuntu1'],
    'nvidia-driver-580-open': ['580.65.06-0ubuntu1', '580.82.07-0ubuntu1'],
    'nvidia-dkms-550-open': ['550.127.05-0ubuntu1'],
    'cuda-drivers-550': ['550.127.05-1'],
    'cuda-drivers-580': ['580.65.06-1', '580.82.07-1'],
    'nvidia-fabricmanager-550': ['550.127.05-1'],
    'nvidia-fabricmanager-580': ['580.65.06-1', '580.82.07-1'],
    'cuda-drivers-fabricmanager-580': ['580.65.06-1', '580.82.07-1'],
    'dkms': ['3.0.10-8'],
    'linux-image-6.1.0-26-amd64': ['6.1.112-1'],
    'linux-image-6.1.0-28-amd64': ['6.1.119-1'],
    'nvidia-container-toolkit': ['1.16.2-1', '1.17.0-1', '1.17.8-1'],
    'libnvidia-container1': ['1.16.2-1', '1.17.0-1', '1.17.8-1'],
    'datacenter-gpu-manager': ['1:3.3.9'],
    'datacenter-gpu-manager-4-core': ['1:4.1.0-1', '1:4.2.3-1'],
    'datacenter-gpu-manager-4-cuda12': ['1:4.1.0-1', '1:4.2.3-1'],
    'cuda-toolkit-12-4': ['12.4.1-1'],
    'cuda-toolkit-13-0': ['13.0.2-1'],
}


# ---------------------------------------------------------------------------- helpers

def run(argv, **kwargs):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False, **kwargs)


def record(name, version=None):
    matches = [item for item in RECORDS if item['package'] == name and (version is None or item['version'] == version)]
    if not matches:
        raise KeyError('%s %s' % (name, version))
    return matches[-1]


def deb_path(repo, item):
    return os.path.join(repo, CATALOG.deb_filename(item))


def fields_of(repo, item):
    """The control fields of a built .deb (dpkg-deb --field)."""
    process = run(['dpkg-deb', '--field', deb_path(repo, item)])
    if process.returncode != 0:
        raise AssertionError(process.stderr)
    return parse_stanzas(process.stdout)[0]


def tar_members(data):
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        result = {}
        for member in archive.getmembers():
            content = archive.extractfile(member).read().decode('utf-8') if member.isfile() else None
            result[member.name[1:] if member.name.startswith('./') else member.name] = (member, content)
        return result


def data_of(repo, item):
    """{path: (TarInfo, text or None)} of a .deb's data (dpkg-deb --fsys-tarfile)."""
    process = subprocess.run(['dpkg-deb', '--fsys-tarfile', deb_path(repo, item)], stdout=subprocess.PIPE, check=True)
    return tar_members(process.stdout)


def control_of(repo, item):
    """{name: text} of a .deb's control members (dpkg-deb --ctrl-tarfile)."""
    process = subprocess.run(['dpkg-deb', '--ctrl-tarfile', deb_path(repo, item)], stdout=subprocess.PIPE, check=True)
    return {name.lstrip('/'): content for name, (_member, content) in tar_members(process.stdout).items() if content is not None}


def parse_stanzas(text):
    stanzas = []
    current = {}
    last = None
    for line in text.splitlines():
        if not line.strip():
            if current:
                stanzas.append(current)
            current, last = {}, None
        elif line[0] in ' \t':
            current[last] += '\n' + line
        else:
            last, value = line.split(':', 1)
            current[last] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


class Apt:
    """apt-get in simulation mode against the repository, isolated from the host's configuration."""

    def __init__(self, repo, folder):
        self.folder = folder
        for sub in ('lists/partial', 'cache/archives/partial', 'parts', 'prefs', 'sources', 'log'):
            os.makedirs(os.path.join(folder, sub), exist_ok=True)
        self.empty = os.path.join(folder, 'status-empty')
        with open(self.empty, 'w', encoding='utf-8'):
            pass
        sources = os.path.join(folder, 'sources.list')
        with open(sources, 'w', encoding='utf-8') as handle:
            handle.write('deb [trusted=yes] file:%s ./\n' % repo)
        self.config = os.path.join(folder, 'apt.conf')
        settings = {
            'Dir::Etc::Parts': os.path.join(folder, 'parts'), 'Dir::Etc::main': '/dev/null',
            'Dir::Etc::SourceList': sources, 'Dir::Etc::SourceParts': os.path.join(folder, 'sources'),
            'Dir::Etc::Preferences': '/dev/null', 'Dir::Etc::PreferencesParts': os.path.join(folder, 'prefs'),
            'Dir::State::Lists': os.path.join(folder, 'lists'), 'Dir::State::extended_states': os.path.join(folder, 'extended_states'),
            'Dir::Cache': os.path.join(folder, 'cache'), 'Dir::Log': os.path.join(folder, 'log'),
            'Debug::NoLocking': '1', 'APT::Sandbox::User': 'root' if os.geteuid() == 0 else '', 'APT::Architecture': 'amd64',
            'Acquire::Languages': 'none', 'APT::Get::Show-Versions': '0',
        }
        with open(self.config, 'w', encoding='utf-8') as handle:
            for key, value in settings.items():
                handle.write('%s "%s";\n' % (key, value))
            handle.write('APT::Architectures { "amd64"; };\n')

    def __call__(self, *arguments, status=None):
        env = dict(os.environ, APT_CONFIG=self.config, LC_ALL='C', DEBIAN_FRONTEND='noninteractive')
        simulate = [] if arguments[0] == 'update' else ['-s']
        return run(['apt-get'] + simulate + ['-o', 'Dir::State::status=' + (status or self.empty)] + list(arguments), env=env)

    def status(self, repo, installed, name='status'):
        """A dpkg status file with the given (package, version) pairs installed."""
        path = os.path.join(self.folder, name)
        with open(path, 'w', encoding='utf-8') as handle:
            for package, version in installed:
                fields = list(BUILD_REPO.control_fields(record(package, version)))
                fields.insert(1, ('Status', 'install ok installed'))
                handle.write(BUILD_REPO.format_stanza(fields) + '\n')
        return path


def simulated(process):
    """({package: version} installed, {package} removed) from apt-get -s output."""
    if process.returncode != 0:
        raise AssertionError('apt-get failed (rc=%d): %s%s' % (process.returncode, process.stdout, process.stderr))
    inst = dict(re.findall(r'^Inst (\S+) (?:\[\S+\] )?\((\S+) ', process.stdout, re.M))
    removed = set(re.findall(r'^Remv (\S+)', process.stdout, re.M))
    return inst, removed


# ---------------------------------------------------------------------------- fixtures

@pytest.fixture(scope='module')
def repo(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp('gpufleet-repo'))
    started = time.time()
    path = BUILD_REPO.build(folder)
    elapsed = time.time() - started
    if elapsed > 10:
        raise AssertionError('building the repository took %.1fs' % elapsed)
    return path


@pytest.fixture(scope='module')
def apt(repo, tmp_path_factory):
    require_tool('apt-get', 'apt-get comes with Debian/Ubuntu (package apt): run the unit tests there')
    tool = Apt(repo, str(tmp_path_factory.mktemp('apt')))
    process = tool('update')
    if process.returncode != 0:
        raise AssertionError('apt-get update failed: %s%s' % (process.stdout, process.stderr))
    return tool


# ---------------------------------------------------------------------------- catalog

def test_catalog_names_and_versions():
    versions = {}
    for item in CATALOG.check(RECORDS):
        versions.setdefault(item['package'], []).append(item['version'])
    for name, expected in EXPECTED_VERSIONS.items():
        assert versions[name] == expected, name
    assert len(set(CATALOG.deb_filename(item) for item in RECORDS)) == len(RECORDS)


def test_catalog_helpers():
    assert CATALOG.upstream_version('1:4.2.3-1') == '4.2.3'
    assert CATALOG.upstream_version('1:3.3.9') == '3.3.9'
    assert CATALOG.upstream_version('580.65.06-0ubuntu1') == '580.65.06'
    assert CATALOG.deb_filename(record('datacenter-gpu-manager-4-core', '1:4.2.3-1')) == 'datacenter-gpu-manager-4-core_4.2.3-1_amd64.deb'
    assert CATALOG.deb_filename(record('dkms')) == 'dkms_3.0.10-8_all.deb'
    with pytest.raises(ValueError):
        CATALOG.check([record('dkms'), record('dkms')])
    with pytest.raises(KeyError):
        CATALOG.exact_install('nvidia-driver-580-server', '1.0-1')
    assert CATALOG.exact_install('nvidia-container-toolkit', '1.16.2-1') == [
        'nvidia-container-toolkit=1.16.2-1', 'nvidia-container-toolkit-base=1.16.2-1',
        'libnvidia-container-tools=1.16.2-1', 'libnvidia-container1=1.16.2-1']


# ---------------------------------------------------------------------------- build

def test_build_is_idempotent_and_reproducible(repo, tmp_path):
    packages = os.path.join(repo, 'Packages')
    before = os.stat(packages).st_mtime_ns
    started = time.time()
    assert BUILD_REPO.build(repo) == repo
    assert time.time() - started < 1
    assert os.stat(packages).st_mtime_ns == before
    with open(os.path.join(repo, BUILD_REPO.STAMP), encoding='utf-8') as handle:
        assert handle.read().strip() == BUILD_REPO.source_hash()
    # A stale stamp rebuilds; the rebuild is byte-identical (fixed times, reproducible gzip).
    other = str(tmp_path / 'again')
    os.makedirs(other)
    with open(os.path.join(other, BUILD_REPO.STAMP), 'w', encoding='utf-8') as handle:
        handle.write('stale\n')
    with open(os.path.join(other, 'leftover_1_amd64.deb'), 'w', encoding='utf-8') as handle:
        handle.write('not a package')
    BUILD_REPO.build(other)
    assert not os.path.exists(os.path.join(other, 'leftover_1_amd64.deb'))
    for name in ('Packages', 'Release', CATALOG.deb_filename(record('nvidia-dkms-580'))):
        with open(os.path.join(repo, name), 'rb') as first, open(os.path.join(other, name), 'rb') as second:
            assert first.read() == second.read(), name


def test_command_line(repo):
    process = run(['python3', os.path.join(PACKAGES_DIR, 'build_repo.py'), repo])
    assert process.returncode == 0, process.stderr
    assert process.stdout.strip() == repo


def test_every_package_built(repo):
    built = sorted(name for name in os.listdir(repo) if name.endswith('.deb'))
    assert built == sorted(CATALOG.deb_filename(item) for item in RECORDS)
    for name in built + ['Packages', 'Packages.gz', 'Release']:
        assert os.stat(os.path.join(repo, name)).st_mode & 0o777 == 0o644


@pytest.mark.parametrize('item', RECORDS, ids=['%s_%s' % (item['package'], item['version']) for item in RECORDS])
def test_control_fields(repo, item):
    fields = fields_of(repo, item)
    assert fields['Package'] == item['package']
    assert fields['Version'] == item['version']
    assert fields['Architecture'] == item['architecture']
    assert fields['Maintainer'] == 'gpufleet.lifecycle simulated fleet <sim@gpufleet.invalid>'
    assert fields['Priority'] == 'optional'
    assert fields['Section']
    assert 'simulation package' in fields['Description']
    for name, key in (('Depends', 'depends'), ('Conflicts', 'conflicts'), ('Replaces', 'replaces'), ('Provides', 'provides'),
                      ('Breaks', 'breaks')):
        assert fields.get(name, '') == ', '.join(item[key])


@pytest.mark.parametrize('item', RECORDS, ids=['%s_%s' % (item['package'], item['version']) for item in RECORDS])
def test_files_and_scripts(repo, item):
    data = data_of(repo, item)
    listing = run(['dpkg-deb', '--contents', deb_path(repo, item)]).stdout
    for entry in item['files']:
        member, content = data[entry['path']]
        assert entry['path'] in listing
        assert member.uname == 'root' and member.gname == 'root'
        if 'symlink' in entry:
            assert member.issym() and member.linkname == entry['symlink']
        else:
            assert content == entry['content']
            assert member.mode == entry['mode']
    assert set(path for path, (member, _content) in data.items() if not member.isdir()) == set(entry['path'] for entry in item['files'])
    member, content = data['/usr/share/gpufleet-sim/versions/%s' % item['package']]
    assert content == CATALOG.upstream_version(item['version']) + '\n'
    control = control_of(repo, item)
    for name in ('preinst', 'postinst', 'prerm', 'postrm'):
        if name not in control:
            continue
        script = control[name]
        assert script.startswith('#!/bin/sh\nset -e\n'), name
        assert run(['sh', '-n', '-c', script]).returncode == 0, name
    maint = '    PYTHONPATH=%s python3 -m gpufleet_sim.maint preinst %s || exit 1\n' % (SIM_LIB, item['package'])
    if item in NVIDIA:
        commands = [line for line in control['preinst'].splitlines() if not line.startswith('#')]
        assert commands[:4] == ['set -e', 'if [ -e %s/gpufleet_sim/maint.py ] || [ -e %s/gpufleet_sim/maint/__init__.py ]; then' % (SIM_LIB, SIM_LIB),
                                maint.rstrip('\n'), 'fi']
    else:
        assert 'gpufleet_sim.maint' not in control.get('preinst', '')


@pytest.mark.parametrize('package,path,module', WRAPPERS)
def test_wrappers(repo, package, path, module):
    for item in [entry for entry in RECORDS if entry['package'] == package]:
        member, content = data_of(repo, item)[path]
        assert member.mode == 0o755
        lines = content.splitlines()
        assert lines[0] == '#!/bin/sh'
        assert lines[-1] == 'GPUFLEET_SIM_PACKAGE=%s PYTHONPATH=%s exec python3 -m gpufleet_sim.%s "$@"' % (package, SIM_LIB, module)


def test_nv_hostengine_wrapper(repo):
    content = data_of(repo, record('datacenter-gpu-manager-4-core'))['/usr/bin/nv-hostengine'][1]
    assert content.splitlines()[-1] == ('GPUFLEET_SIM_PROG=nv-hostengine GPUFLEET_SIM_PACKAGE=datacenter-gpu-manager-4-core '
                                        'PYTHONPATH=%s exec python3 -m gpufleet_sim.dcgmi "$@"' % SIM_LIB)


def test_wrapper_environment(tmp_path):
    """The wrapper's VAR=value prefix reaches python3 through sh's exec."""
    fake = tmp_path / 'bin'
    fake.mkdir()
    (fake / 'python3').write_text('#!/bin/sh\necho "$GPUFLEET_SIM_PACKAGE $PYTHONPATH $*"\n')
    (fake / 'python3').chmod(0o755)
    script = tmp_path / 'nvidia-smi'
    script.write_text(CATALOG.wrapper('nvidia-utils-580', 'nvidia_smi'))
    process = run(['sh', str(script), '-q', 'a b'], env=dict(os.environ, PATH='%s:%s' % (fake, os.environ['PATH'])))
    assert process.stdout == 'nvidia-utils-580 %s -m gpufleet_sim.nvidia_smi -q a b\n' % SIM_LIB


def test_driver_files(repo):
    for upstream in CATALOG.DRIVERS:
        branch = upstream.split('.')[0]
        version = upstream + '-0ubuntu1'
        library = data_of(repo, record('libnvidia-compute-%s' % branch, version))
        assert library['/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%s' % upstream][1] == upstream + '\n'
        assert library['/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1'][0].linkname == 'libnvidia-ml.so.%s' % upstream
        for flavour, is_open in (('', 'no'), ('-open', 'yes')):
            item = record('nvidia-dkms-%s%s' % (branch, flavour), version)
            conf = data_of(repo, item)['/usr/src/nvidia-%s/dkms.conf' % upstream][1]
            assert 'PACKAGE_NAME=nvidia\n' in conf and 'PACKAGE_VERSION=%s\n' % upstream in conf and 'OPEN=%s\n' % is_open in conf
            assert item['depends'] == ['dkms', 'nvidia-kernel-common-%s (= %s)' % (branch, version)]
            assert 'nvidia-dkms-kernel' in item['provides']
            control = control_of(repo, item)
            assert 'dkms install nvidia/%s -k "$kernel"' % upstream in control['postinst']
            assert 'dkms remove nvidia/%s --all' % upstream in control['prerm']
        unit = data_of(repo, record('nvidia-compute-utils-%s' % branch, version))['/lib/systemd/system/nvidia-persistenced.service'][1]
        assert 'Type=simple\n' in unit and 'ExecStart=/usr/bin/nvidia-persistenced' in unit and 'After=gpufleet-sim-boot.service\n' in unit
        fabric = data_of(repo, record('nvidia-fabricmanager-%s' % branch, upstream + '-1'))
        unit = fabric['/lib/systemd/system/nvidia-fabricmanager.service'][1]
        assert 'ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\n' in unit
        assert 'After=gpufleet-sim-boot.service\n' in unit
        assert 'FABRIC_MODE=0\n' in fabric['/usr/share/nvidia/nvswitch/fabricmanager.cfg'][1]
        assert record('cuda-drivers-%s' % branch, upstream + '-1')['depends'] == [
            'nvidia-driver-%s-server (= %s) | nvidia-driver-%s-open (= %s)' % (branch, version, branch, version)]


def test_dkms_and_kernel_scripts(repo):
    item = record('dkms')
    assert control_of(repo, item)['conffiles'] == '/etc/kernel/postinst.d/dkms\n/etc/kernel/prerm.d/dkms\n'
    hook = data_of(repo, item)['/etc/kernel/postinst.d/dkms'][1]
    assert '/usr/sbin/dkms autoinstall -k "$inst_kern" || true' in hook and hook.endswith('exit 0\n')
    for kernel, version in CATALOG.KERNELS:
        image = record('linux-image-' + kernel, version)
        data = data_of(repo, image)
        assert '/boot/vmlinuz-%s' % kernel in data and '/lib/modules/%s/modules.order' % kernel in data
        postinst = control_of(repo, image)['postinst']
        assert ('run-parts --report --exit-on-error --arg=%s --arg=/boot/vmlinuz-%s /etc/kernel/postinst.d' % (kernel, kernel)) in postinst
        assert 'if [ -d /etc/kernel/postinst.d ]; then' in postinst
        scripts = control_of(repo, image)
        assert '/etc/kernel/prerm.d' in scripts['prerm'] and '/etc/kernel/postrm.d' in scripts['postrm']
        assert 'rmdir /lib/modules/%s/updates/dkms /lib/modules/%s/updates /lib/modules/%s ' % (kernel, kernel, kernel) in scripts['postrm']


def _fake_dkms(tmp_path, status_output=''):
    log = tmp_path / 'dkms.log'
    fake = tmp_path / 'dkms'
    fake.write_text('#!/bin/sh\necho "$*" >> %s\nif [ "$1" = status ]; then printf "%%b" "%s"; fi\n' % (log, status_output))
    fake.chmod(0o755)
    return fake, log


def test_dkms_prerm_hook_removes_installed_modules(repo, tmp_path):
    status = 'nvidia/580.65.06, 6.1.0-26-amd64, x86_64: installed\\nnvidia/550.127.05, 6.1.0-26-amd64, x86_64: built\\n'
    fake, log = _fake_dkms(tmp_path, status)
    hook = data_of(repo, record('dkms'))['/etc/kernel/prerm.d/dkms'][1].replace('/usr/sbin/dkms', str(fake))
    process = run(['sh', '-c', hook, 'prerm', '6.1.0-26-amd64'])
    assert process.returncode == 0, process.stderr
    assert log.read_text() == 'status -k 6.1.0-26-amd64\nremove nvidia/580.65.06 -k 6.1.0-26-amd64\n'


def test_nvidia_dkms_postinst_builds_for_every_kernel(repo, tmp_path):
    fake, log = _fake_dkms(tmp_path)
    modules = tmp_path / 'modules'
    for kernel in ('6.1.0-26-amd64', '6.1.0-28-amd64'):
        (modules / kernel).mkdir(parents=True)
        (modules / kernel / 'modules.order').write_text('')
    (modules / 'not-a-kernel').mkdir()
    script = control_of(repo, record('nvidia-dkms-580-open', '580.82.07-0ubuntu1'))['postinst']
    script = script.replace('/lib/modules/', str(modules) + '/').replace('/usr/lib/gpufleet-sim', str(tmp_path / 'absent'))
    process = run(['sh', '-c', script, 'postinst', 'configure'], env=dict(os.environ, PATH='%s:%s' % (tmp_path, os.environ['PATH'])))
    assert process.returncode == 0, process.stderr
    assert log.read_text() == 'install nvidia/580.82.07 -k 6.1.0-26-amd64\ninstall nvidia/580.82.07 -k 6.1.0-28-amd64\n'


def test_preinst_without_simulation(repo):
    refuse_inside_simulation(SIM_LIB, 'the preinst would see the simulation installed')
    for name in ('nvidia-dkms-580', 'nvidia-fabricmanager-550', 'datacenter-gpu-manager-4-core'):
        script = control_of(repo, record(name))['preinst']
        process = run(['sh', '-c', script, 'preinst', 'install'])
        assert process.returncode == 0, process.stderr


def test_cuda_toolkit_alternatives(repo):
    for release, version, priority in (('12.4', '12.4.1-1', 124), ('13.0', '13.0.2-1', 130)):
        item = record('cuda-toolkit-%s' % release.replace('.', '-'), version)
        postinst = control_of(repo, item)['postinst']
        assert 'update-alternatives --install /usr/local/cuda cuda /usr/local/cuda-%s %d\n' % (release, priority) in postinst


# ---------------------------------------------------------------------------- repository indexes

def test_packages_index(repo):
    with open(os.path.join(repo, 'Packages'), encoding='utf-8') as handle:
        text = handle.read()
    with gzip.open(os.path.join(repo, 'Packages.gz'), 'rt') as handle:
        assert handle.read() == text
    stanzas = parse_stanzas(text)
    assert len(stanzas) == len(RECORDS)
    listed = {stanza['Filename']: stanza for stanza in stanzas}
    for item in RECORDS:
        stanza = listed['./' + CATALOG.deb_filename(item)]
        with open(deb_path(repo, item), 'rb') as handle:
            data = handle.read()
        assert stanza['Package'] == item['package'] and stanza['Version'] == item['version']
        assert stanza['Size'] == str(len(data))
        assert stanza['SHA256'] == hashlib.sha256(data).hexdigest()
        assert stanza['MD5sum'] == hashlib.md5(data).hexdigest()
        assert stanza['Depends' if item['depends'] else 'Package'] == (', '.join(item['depends']) or item['package'])


def test_release_hashes(repo):
    with open(os.path.join(repo, 'Release'), encoding='utf-8') as handle:
        release = parse_stanzas(handle.read())[0]
    assert release['Architectures'] == 'amd64 all'
    for title, algorithm in (('MD5Sum', 'md5'), ('SHA1', 'sha1'), ('SHA256', 'sha256'), ('SHA512', 'sha512')):
        entries = [line.split() for line in release[title].splitlines() if line.strip()]
        assert sorted(entry[2] for entry in entries) == ['Packages', 'Packages.gz']
        for digest, size, name in entries:
            with open(os.path.join(repo, name), 'rb') as handle:
                data = handle.read()
            assert digest == hashlib.new(algorithm, data).hexdigest() and int(size) == len(data)


# ---------------------------------------------------------------------------- apt

def test_apt_sees_every_package(apt):
    process = apt('install', '--print-uris', '-q', 'dkms')
    assert process.returncode == 0, process.stderr
    env = dict(os.environ, APT_CONFIG=apt.config)
    policy = run(['apt-cache', '-o', 'Dir::State::status=' + apt.empty, 'madison', 'nvidia-driver-580-server', 'datacenter-gpu-manager-4-core'],
                 env=env).stdout
    assert re.search(r'nvidia-driver-580-server \| 580\.82\.07-0ubuntu1 \|', policy)
    assert re.search(r'datacenter-gpu-manager-4-core \| +1:4\.1\.0-1 \|', policy)


def test_apt_driver_580_latest(apt):
    inst, removed = simulated(apt('install', 'nvidia-driver-580-server'))
    assert not removed
    expected = dict((name, '580.82.07-0ubuntu1') for name in (
        'nvidia-driver-580-server', 'nvidia-kernel-common-580', 'nvidia-dkms-580', 'libnvidia-compute-580',
        'nvidia-utils-580', 'nvidia-compute-utils-580'))
    expected['dkms'] = '3.0.10-8'
    assert inst == expected


def test_apt_driver_580_exact_version(apt):
    # Like real apt: the meta alone at an older point release cannot resolve its (= V) pieces ...
    process = apt('install', 'nvidia-driver-580-server=580.65.06-0ubuntu1')
    assert process.returncode == 100
    assert 'Depends: nvidia-utils-580 (= 580.65.06-0ubuntu1) but 580.82.07-0ubuntu1 is to be installed' in process.stdout
    # ... and with every piece named (catalog.exact_install) it pulls exactly that release, no 550.
    inst, removed = simulated(apt('install', *CATALOG.exact_install('nvidia-driver-580-server', '580.65.06-0ubuntu1')))
    assert not removed
    assert 'nvidia-dkms-580-open' not in inst and not [name for name in inst if '550' in name]
    assert set(inst) == {'dkms', 'nvidia-driver-580-server', 'nvidia-kernel-common-580', 'nvidia-dkms-580', 'libnvidia-compute-580',
                         'nvidia-utils-580', 'nvidia-compute-utils-580'}
    assert all(version == '580.65.06-0ubuntu1' for name, version in inst.items() if name != 'dkms')


def test_apt_open_driver(apt):
    inst, _removed = simulated(apt('install', 'nvidia-driver-550-open'))
    assert inst['nvidia-dkms-550-open'] == '550.127.05-0ubuntu1' and 'nvidia-dkms-550' not in inst
    process = apt('install', 'nvidia-dkms-580', 'nvidia-dkms-580-open')
    assert process.returncode == 100


def test_apt_open_flavours_as_ubuntu_names_them(apt, repo):
    """Ubuntu's four DKMS flavours of a branch (nvidia-dkms-580, -server, -open, -server-open) exclude each other."""
    inst, _removed = simulated(apt('install', 'nvidia-driver-580-server-open'))
    assert inst['nvidia-dkms-580-server-open'] == '580.82.07-0ubuntu1'
    assert not [name for name in inst if name.startswith('nvidia-dkms-') and name != 'nvidia-dkms-580-server-open']
    conf = data_of(repo, record('nvidia-dkms-580-server-open', '580.65.06-0ubuntu1'))['/usr/src/nvidia-580.65.06/dkms.conf'][1]
    assert 'OPEN=yes\n' in conf
    conf = data_of(repo, record('nvidia-dkms-580-server', '580.65.06-0ubuntu1'))['/usr/src/nvidia-580.65.06/dkms.conf'][1]
    assert 'OPEN=no\n' in conf
    for pair in (('nvidia-dkms-580-server', 'nvidia-dkms-580-server-open'), ('nvidia-dkms-580', 'nvidia-dkms-580-server')):
        assert apt('install', *pair).returncode == 100, pair


def test_apt_cuda_drivers(apt):
    inst, _removed = simulated(apt('install', 'cuda-drivers-fabricmanager-550'))
    assert inst['nvidia-driver-550-server'] == '550.127.05-0ubuntu1'
    assert inst['nvidia-fabricmanager-550'] == '550.127.05-1' and inst['cuda-drivers-550'] == '550.127.05-1'
    assert not [name for name in inst if '580' in name]
    inst, _removed = simulated(apt('install', 'cuda-drivers'))
    assert inst['cuda-drivers'] == '580.82.07-1' and inst['nvidia-driver-580-server'] == '580.82.07-0ubuntu1'


def test_apt_branch_switch_removes_the_old_branch(apt, repo):
    installed = [(item.split('=')[0], item.split('=')[1]) for item in CATALOG.exact_install('nvidia-driver-550-server', '550.127.05-0ubuntu1')]
    installed += [('dkms', '3.0.10-8'), ('nvidia-fabricmanager-550', '550.127.05-1')]
    status = apt.status(repo, installed, 'status-550')
    inst, removed = simulated(apt('install', *CATALOG.exact_install('nvidia-driver-580-server', '580.65.06-0ubuntu1'),
                                  'nvidia-fabricmanager-580=580.65.06-1', status=status))
    assert removed == {name for name, _version in installed if name != 'dkms'}
    assert inst['libnvidia-compute-580'] == '580.65.06-0ubuntu1' and inst['nvidia-fabricmanager-580'] == '580.65.06-1'


def test_apt_minor_upgrade(apt, repo):
    installed = [(item.split('=')[0], item.split('=')[1]) for item in CATALOG.exact_install('nvidia-driver-580-server', '580.65.06-0ubuntu1')]
    status = apt.status(repo, installed + [('dkms', '3.0.10-8')], 'status-580')
    inst, removed = simulated(apt('install', 'nvidia-driver-580-server', status=status))
    assert not removed
    assert inst == {name: '580.82.07-0ubuntu1' for name, _version in installed}


def test_apt_fabricmanager_exact_version(apt):
    inst, removed = simulated(apt('install', 'nvidia-fabricmanager-550=550.127.05-1'))
    assert inst == {'nvidia-fabricmanager-550': '550.127.05-1'} and not removed
    assert apt('install', 'nvidia-fabricmanager-550', 'nvidia-fabricmanager-580').returncode == 100


def test_apt_dcgm_3_and_4_exclusive(apt, repo):
    process = apt('install', 'datacenter-gpu-manager', 'datacenter-gpu-manager-4-core')
    assert process.returncode == 100
    assert 'Conflicts: datacenter-gpu-manager' in process.stdout
    status = apt.status(repo, [('datacenter-gpu-manager', '1:3.3.9')], 'status-dcgm3')
    inst, removed = simulated(apt('install', *CATALOG.exact_install('datacenter-gpu-manager-4-cuda12', '1:4.1.0-1'), status=status))
    assert removed == {'datacenter-gpu-manager'}
    assert inst == {'datacenter-gpu-manager-4-core': '1:4.1.0-1', 'datacenter-gpu-manager-4-cuda12': '1:4.1.0-1'}


def test_apt_container_toolkit(apt):
    inst, _removed = simulated(apt('install', *CATALOG.exact_install('nvidia-container-toolkit', '1.16.2-1')))
    names = ('nvidia-container-toolkit', 'nvidia-container-toolkit-base', 'libnvidia-container-tools', 'libnvidia-container1')
    assert inst == {name: '1.16.2-1' for name in names}
    inst, _removed = simulated(apt('install', 'nvidia-container-toolkit'))
    assert set(inst.values()) == {'1.17.8-1'}


def test_apt_kernels_and_toolkits_coinstall(apt):
    inst, removed = simulated(apt('install', 'linux-image-6.1.0-26-amd64', 'linux-image-6.1.0-28-amd64', 'cuda-toolkit-12-4',
                                  'cuda-toolkit-13-0'))
    assert not removed and len(inst) == 4
    inst, _removed = simulated(apt('install', 'linux-image-amd64'))
    assert inst == {'linux-image-amd64': '6.1.119-1', 'linux-image-6.1.0-28-amd64': '6.1.119-1'}


# ---------------------------------------------------------------------------- a stray second branch

def test_stray_second_branch_recipe(repo, tmp_path):
    """The documented way to a half-installed second branch, with dpkg on a scratch root (scripts run with a fake dkms)."""
    require_root('dpkg --root with maintainer scripts needs root')
    refuse_inside_simulation(SIM_LIB, 'the maintainer scripts would run the simulation hooks of this machine')
    root = tmp_path / 'root'
    for sub in ('var/lib/dpkg/info', 'var/lib/dpkg/updates', 'var/lib/dpkg/triggers'):
        (root / sub).mkdir(parents=True)
    (root / 'var/lib/dpkg/status').write_text('')
    (root / 'var/lib/dpkg/available').write_text('')
    fake, _log = _fake_dkms(tmp_path)
    env = dict(os.environ, PATH='%s:%s' % (fake.parent, os.environ['PATH']))
    dpkg = ['dpkg', '--root=%s' % root, '--force-script-chrootless', '--log=/dev/null']

    def deb(name, version):
        return deb_path(repo, record(name, version))

    base = [deb('dkms', '3.0.10-8')] + [deb(name, '580.65.06-0ubuntu1') for name in ('nvidia-kernel-common-580', 'nvidia-dkms-580', 'libnvidia-compute-580')]
    process = run(dpkg + ['-i'] + base, env=env)
    assert process.returncode == 0, process.stderr
    process = run(dpkg + ['--unpack', deb('nvidia-dkms-550', '550.127.05-0ubuntu1')], env=env)
    assert process.returncode != 0 and 'conflicting packages' in process.stderr
    stray = CATALOG.STRAY_RECIPE.split()
    stray[-1] = deb('nvidia-dkms-550', '550.127.05-0ubuntu1')
    process = run(dpkg + stray[1:], env=env)
    assert process.returncode == 0, process.stderr
    query = run(['dpkg-query', '--root=%s' % root, '-W', '-f', '${Package} ${db:Status-Abbrev}\n'], env=env).stdout
    assert 'nvidia-dkms-550 iU \n' in query and 'nvidia-dkms-580 ii \n' in query
    assert (root / 'usr/src/nvidia-550.127.05/dkms.conf').exists()
    process = run(dpkg + ['--purge', 'nvidia-dkms-550'], env=env)
    assert process.returncode == 0, process.stderr
    assert not (root / 'usr/src/nvidia-550.127.05').exists()
