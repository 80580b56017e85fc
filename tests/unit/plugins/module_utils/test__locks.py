# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""plugins/module_utils/_locks.py: package-manager locks, on real /proc/locks captures and on locks held here.

The two captures (tests/unit/fixtures/real-outputs/locks/, see their .source.txt) were taken while libapt-pkg's
``apt_pkg.SystemLock()`` held lock-frontend (inode 2146330) and lock (inode 2146331) on device fe:00, the second
one also with a process blocked on lock-frontend.
"""

import os
import subprocess
import sys
import time

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _locks
from ansible_collections.gpufleet.lifecycle.tests.unit.fixture_files import read_real_output

HELD = 'proc-locks_apt-systemlock-frontend-and-lock_debian12_linux6.18.txt'
WAITER = 'proc-locks_apt-systemlock-with-blocked-waiter_debian12_linux6.18.txt'
FRONTEND = (0xfe, 0x00, 2146330)
DPKG_LOCK = (0xfe, 0x00, 2146331)
HOLDER = 26475

# A child that takes an fcntl write lock on argv[1] the way apt does, renames itself, says so, and waits.
_HOLDER_SCRIPT = '''
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o640)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
with open('/proc/self/comm', 'w') as handle:
    handle.write(sys.argv[2])
print('held', flush=True)
time.sleep(60)
'''


def test_real_capture_every_line_is_read():
    entries = _locks.parse_proc_locks(read_real_output('locks', HELD))
    assert len(entries) == 12
    assert [entry['id'] for entry in entries] == list(range(1, 13))
    assert all(entry['lock_class'] == 'POSIX' and entry['mode'] == 'ADVISORY' and entry['access'] == 'WRITE' for entry in entries)
    frontend = [entry for entry in entries if (entry['major'], entry['minor'], entry['inode']) == FRONTEND]
    assert frontend == [{'id': 8, 'waiting': False, 'lock_class': 'POSIX', 'mode': 'ADVISORY', 'access': 'WRITE', 'pid': HOLDER,
                         'major': 254, 'minor': 0, 'inode': 2146330, 'start': 0, 'end': None}]


def test_real_capture_apt_holds_frontend_and_lock():
    entries = _locks.parse_proc_locks(read_real_output('locks', HELD))
    assert _locks.fcntl_holders(entries, *FRONTEND) == [HOLDER]
    assert _locks.fcntl_holders(entries, *DPKG_LOCK) == [HOLDER]
    # Same inode on another device, another inode on the same device: not this file.
    assert _locks.fcntl_holders(entries, 0xfd, 0x00, 2146330) == []
    assert _locks.fcntl_holders(entries, 0xfe, 0x00, 2146332) == []


def test_real_capture_a_blocked_waiter_is_not_a_holder():
    entries = _locks.parse_proc_locks(read_real_output('locks', WAITER))
    waiting = [entry for entry in entries if entry['waiting']]
    assert [(entry['id'], entry['pid'], entry['inode']) for entry in waiting] == [(8, 26514, 2146330)]
    assert _locks.fcntl_holders(entries, *FRONTEND) == [HOLDER]


@pytest.mark.parametrize('line, expected', [
    ('3: OFDLCK ADVISORY  WRITE -1 00:2f:1234 0 EOF', ('OFDLCK', -1, 0, 0x2f, 1234, None)),
    ('4: FLOCK  ADVISORY  WRITE 812 103:02:55 0 EOF', ('FLOCK', 812, 0x103, 2, 55, None)),
    ('5: POSIX  ADVISORY  READ 77 fe:01:9 100 199', ('POSIX', 77, 0xfe, 1, 9, 199)),
], ids=['ofd-lock', 'flock-wide-major', 'byte-range'])
def test_other_lock_shapes(line, expected):
    entry = _locks.parse_proc_locks(line + '\n')[0]
    assert (entry['lock_class'], entry['pid'], entry['major'], entry['minor'], entry['inode'], entry['end']) == expected


def test_unknown_lines_are_skipped_not_guessed():
    assert _locks.parse_proc_locks('garbage\n1: POSIX ADVISORY WRITE x fe:00:1 0 EOF\n\n') == []


@pytest.mark.parametrize('text, pid', [('1234', 1234), ('1234\n', 1234), ('', None), (None, None), ('0', None), ('-5', None), ('12ab', None)])
def test_dnf_pid_file(text, pid):
    assert _locks.parse_pid_file(text) == pid


def test_command_names_are_printable():
    assert _locks.clean_command('unattended-upgr\n') == 'unattended-upgr'
    assert _locks.clean_command('python3\x00-m\x00x\x00') == 'python3 -m x'
    assert _locks.clean_command('evil\x1b[31m') == 'evil\\x1b[31m'
    assert len(_locks.clean_command('x' * 500)) == 64


def test_lock_files_of_each_manager():
    assert [path for path, kind in _locks.lock_files('apt')] == [
        '/var/lib/dpkg/lock-frontend', '/var/lib/dpkg/lock', '/var/lib/apt/lists/lock', '/var/cache/apt/archives/lock']
    assert ('/var/lib/rpm/.rpm.lock', 'fcntl') in _locks.lock_files('dnf')
    assert ('/var/lib/dnf/rpmdb_lock.pid', 'pidfile') in _locks.lock_files('dnf')
    with pytest.raises(_locks.LockError) as error:
        _locks.lock_files('zypper')
    assert 'package_manager' in str(error.value) and 'zypper' in str(error.value)


def _lock(path, held, pid=None, command=None):
    holders = [{'pid': pid, 'command': command, 'cmdline': None}] if held else []
    return {'path': path, 'kind': 'fcntl', 'held': held, 'holders': holders}


def test_decide():
    free = [_lock('/var/lib/dpkg/lock-frontend', False)]
    held = [_lock('/var/lib/dpkg/lock-frontend', True, 5123, 'unattended-upgr'), _lock('/var/lib/dpkg/lock', False)]
    assert _locks.decide(free, 0, 300) == ('free', None)
    assert _locks.decide(free, 999, 300) == ('free', None)
    assert _locks.decide(held, 299.9, 300) == ('wait', None)
    verdict, message = _locks.decide(held, 300.2, 300)
    assert verdict == 'fail'
    assert message == ('package manager lock still held after waiting 300s (timeout 300s): '
                       '/var/lib/dpkg/lock-frontend held by pid 5123 (unattended-upgr)')


def test_describe_a_holder_this_node_cannot_see():
    assert 'another pid namespace' in _locks.describe(_lock('/var/lib/rpm/.rpm.lock', True, 0))
    assert _locks.describe(_lock('/x', True, 12, None)) == '/x held by pid 12 (command unknown)'


class _Clock:
    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def test_wait_until_the_holder_lets_go():
    clock = _Clock()
    looks = iter([[_lock('/l', True, 7, 'apt-get')]] * 3 + [[_lock('/l', False)]])
    result = _locks.wait([('/l', 'fcntl')], 300, look=lambda files: next(looks), clock=clock, sleep=clock.sleep)
    assert result['free'] is True and result['msg'] is None
    assert result['waited'] == 3.0 and clock.sleeps == [1.0, 1.0, 1.0]
    assert result['waited_for'] == ['/l held by pid 7 (apt-get)']


def test_wait_gives_up_at_the_bound_naming_the_holder():
    clock = _Clock()
    result = _locks.wait([('/l', 'fcntl')], 5, look=lambda files: [_lock('/l', True, 7, 'apt-get')], clock=clock, sleep=clock.sleep)
    assert result['free'] is False and result['waited'] == 5.0
    assert result['msg'] == 'package manager lock still held after waiting 5s (timeout 5s): /l held by pid 7 (apt-get)'
    assert sum(clock.sleeps) == 5.0


def test_wait_with_no_time_looks_once():
    clock = _Clock()
    looks = []
    result = _locks.wait([('/l', 'fcntl')], 0, look=lambda files: looks.append(1) or [_lock('/l', True, 7, 'x')], clock=clock, sleep=clock.sleep)
    assert result['free'] is False and looks == [1] and clock.sleeps == []


def test_nothing_to_wait_for_when_free():
    clock = _Clock()
    result = _locks.wait([('/l', 'fcntl')], 300, look=lambda files: [_lock('/l', False)], clock=clock, sleep=clock.sleep)
    assert result == {'free': True, 'waited': 0.0, 'locks': [_lock('/l', False)], 'waited_for': [], 'msg': None}


# --------------------------------------------------------------------------- on this machine

@pytest.fixture
def held_lock(tmp_path):
    """A file locked by a child process named ``unattended-upgr``; yields (path, pid)."""
    path = str(tmp_path / 'lock-frontend')
    child = subprocess.Popen([sys.executable, '-c', _HOLDER_SCRIPT, path, 'unattended-upgr'], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == 'held'
        yield path, child.pid
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def test_observe_names_the_holder(held_lock):
    path, pid = held_lock
    lock = _locks.observe(path, 'fcntl')
    assert lock['held'] is True
    assert [(holder['pid'], holder['command']) for holder in lock['holders']] == [(pid, 'unattended-upgr')]
    assert lock['holders'][0]['cmdline'].startswith(sys.executable + ' -c ')


def test_observing_takes_no_lock(held_lock, tmp_path):
    """The rule "never take the lock": after looking, this process holds no lock on the files it looked at."""
    path, dummy = held_lock
    free = str(tmp_path / 'lock')
    open(free, 'w').close()
    assert _locks.observe_all([(path, 'fcntl'), (free, 'fcntl')])[1]['held'] is False
    status = os.stat(free)
    with open('/proc/locks', encoding='utf-8') as handle:
        entries = _locks.parse_proc_locks(handle.read())
    assert _locks.fcntl_holders(entries, os.major(status.st_dev), os.minor(status.st_dev), status.st_ino) == []
    assert os.getpid() not in [entry['pid'] for entry in entries]


def test_a_released_lock_is_free(tmp_path):
    path = str(tmp_path / 'lock')
    child = subprocess.Popen([sys.executable, '-c', _HOLDER_SCRIPT, path, 'apt-get'], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == 'held'
    assert _locks.observe(path, 'fcntl')['held'] is True
    child.kill()
    child.wait()
    child.stdout.close()
    assert _locks.observe(path, 'fcntl') == {'path': path, 'kind': 'fcntl', 'held': False, 'holders': []}


def test_wait_really_waits_for_a_real_holder(tmp_path):
    path = str(tmp_path / 'lock')
    script = _HOLDER_SCRIPT.replace('time.sleep(60)', 'time.sleep(1.5)')
    child = subprocess.Popen([sys.executable, '-c', script, path, 'unattended-upgr'], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == 'held'
        started = time.monotonic()
        result = _locks.wait([(path, 'fcntl')], 30, interval=0.1)
        assert result['free'] is True and 0.5 < time.monotonic() - started < 10
        assert result['waited_for'] == ['%s held by pid %d (unattended-upgr)' % (path, child.pid)]
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def test_missing_lock_file_is_free(tmp_path):
    assert _locks.observe(str(tmp_path / 'absent'), 'fcntl')['held'] is False
    assert _locks.observe(str(tmp_path / 'absent.pid'), 'pidfile')['held'] is False


def test_dnf_pid_file_of_a_live_and_a_dead_process(tmp_path):
    live = tmp_path / 'rpmdb_lock.pid'
    live.write_text(str(os.getpid()))
    lock = _locks.observe(str(live), 'pidfile')
    assert lock['held'] is True and lock['holders'][0]['pid'] == os.getpid() and lock['holders'][0]['command']
    dead = subprocess.Popen([sys.executable, '-c', 'pass'])
    dead.wait()
    live.write_text(str(dead.pid))
    assert _locks.observe(str(live), 'pidfile')['held'] is False
    with pytest.raises(_locks.LockError):
        _locks.observe(str(live), 'flock')
