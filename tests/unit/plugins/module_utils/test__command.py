# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_command: the deadline, the process-group kill, the decoding and the escaping, with real processes."""

import json
import os
import sys
import time

import pytest

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _command

PY = sys.executable


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie waiting for its (killed) parent's reaper is gone for our purposes.
    try:
        with open('/proc/%d/stat' % pid, encoding='utf-8') as handle:
            return handle.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


def test_runs_an_argument_list_in_the_c_locale_with_extra_variables():
    result = _command.run([PY, '-c', 'import json, os; print(json.dumps([os.environ.get(k) for k in ("LC_ALL", "LANG", "SLURM_JWT")]))'],
                          10, environment={'SLURM_JWT': 'token', 'LC_ALL': 'de_DE.UTF-8'})
    assert result['rc'] == 0 and not result['timed_out'] and result['stderr'] == ''
    # LC_ALL/LANG are always C, also when the caller asks for another locale.
    assert json.loads(result['stdout']) == ['C', 'C', 'token']
    assert result['argv'][0] == PY and result['elapsed'] < 10


def test_the_command_runs_in_its_own_session():
    result = _command.run([PY, '-c', 'import os; print(os.getsid(0) == os.getpid(), os.getpgid(0) == os.getpid())'], 10)
    assert result['stdout'].split() == ['True', 'True']


def test_exit_status_and_stderr_are_returned():
    result = _command.run([PY, '-c', 'import sys; sys.stderr.write("Node gpu-99 not found\\n"); sys.exit(1)'], 10)
    assert result['rc'] == 1 and result['stderr'] == 'Node gpu-99 not found\n' and not result['timed_out']


def test_a_hung_command_is_killed_with_its_whole_process_group(tmp_path):
    pids = tmp_path / 'pids'
    # The tool starts a grandchild that holds the pipes open and sleeps; killing only the direct child would hang here.
    script = ('import os, subprocess, sys, time\n'
              'child = subprocess.Popen(["sleep", "300"])\n'
              'open(sys.argv[1], "w").write("%d %d" % (os.getpid(), child.pid))\n'
              'print("partial output", flush=True)\n'
              'time.sleep(300)\n')
    start = time.monotonic()
    result = _command.run([PY, '-c', script, str(pids)], 1.5)
    took = time.monotonic() - start
    assert result['timed_out'] and result['rc'] is None
    assert took < 1.5 + _command.KILL_GRACE + 1
    assert result['stdout'] == 'partial output\n'
    assert _command.describe_timeout(result).startswith('%s -c ' % PY)
    assert _command.describe_timeout(result).endswith(' did not finish within 1.5 s and was killed (with its process group)')
    tool, grandchild = [int(pid) for pid in pids.read_text(encoding='utf-8').split()]
    deadline = time.monotonic() + 5
    while (alive(tool) or alive(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(tool) and not alive(grandchild)


def test_a_command_that_ignores_sigterm_is_killed():
    script = 'import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint("up", flush=True)\ntime.sleep(300)\n'
    start = time.monotonic()
    result = _command.run([PY, '-c', script], 1)
    assert result['timed_out'] and time.monotonic() - start < 1 + _command.KILL_GRACE + 2


def test_a_descendant_that_left_the_group_does_not_block_the_return(tmp_path):
    # setsid: the grandchild has its own session, so the group kill does not reach it; it keeps stdout open.
    script = ('import subprocess, sys, time\n'
              'child = subprocess.Popen(["sleep", "30"], start_new_session=True)\n'
              'open(sys.argv[1], "w").write(str(child.pid))\n'
              'time.sleep(300)\n')
    pid_file = tmp_path / 'pid'
    start = time.monotonic()
    result = _command.run([PY, '-c', script, str(pid_file)], 1)
    assert result['timed_out'] and time.monotonic() - start < 1 + _command.KILL_GRACE + _command.DRAIN_GRACE + 2
    os.kill(int(pid_file.read_text(encoding='utf-8')), 9)


def test_invalid_utf8_is_escaped_never_a_crash():
    # A Latin-1 reason, a broken byte in a package name: kept readable as \xNN, always valid UTF-8 text.
    result = _command.run([PY, '-c', 'import sys; sys.stdout.buffer.write(b"Reason=Wartung L\\xfcfter\\nnvidia-\\xff\\xfe\\n")'], 10)
    assert result['stdout'] == 'Reason=Wartung L\\xfcfter\nnvidia-\\xff\\xfe\n'
    result['stdout'].encode('utf-8')
    json.dumps(result)
    replaced = _command.run([PY, '-c', 'import sys; sys.stdout.buffer.write(b"{\\"a\\": \\"L\\xfcfter\\"}")'], 10, errors='replace')
    assert json.loads(replaced['stdout']) == {'a': 'L\ufffdfter'}


@pytest.mark.parametrize('data, expected', [
    (b'ok \xe2\x9c\x93', 'ok \u2713'),
    (b'bad \xff', 'bad \\xff'),
    ('surrogate \udcff', 'surrogate \\xff'),
    ('lone \ud800', 'lone \\xed\\xa0\\x80'),
    (None, ''),
    (18, '18'),
])
def test_to_text(data, expected):
    assert _command.to_text(data) == expected
    _command.to_text(data).encode('utf-8')


def test_escape_controls_keeps_newlines_and_tabs_only():
    text = 'GPU 0\x1b[31m lost\x07\r\n\tnext\x7f\x9b end \u2713'
    assert _command.escape_controls(text) == 'GPU 0\\x1b[31m lost\\x07\\x0d\n\tnext\\x7f\\x9b end \u2713'
    assert _command.escape_controls('a\nb\tc', keep_newlines=False) == 'a\\x0ab\\x09c'
    assert _command.escape_controls(b'\x1b]0;title\x07\xff') == '\\x1b]0;title\\x07\\xff'


def test_render_quotes_and_escapes():
    assert _command.render(['/usr/bin/scontrol', 'update', 'Reason=gpufleet: drained x', 'a\x1bb', "it's"]) == (
        "/usr/bin/scontrol update 'Reason=gpufleet: drained x' 'a\\x1bb' 'it'\"'\"'s'")


@pytest.mark.parametrize('argv', ['nvidia-smi -q -x', b'ls', [], None, ['ls', 3]])
def test_only_argument_lists_run(argv):
    with pytest.raises(_command.CommandError):
        _command.run(argv, 10)


@pytest.mark.parametrize('timeout', [0, -1, None, True, '10'])
def test_a_time_limit_is_required(timeout):
    with pytest.raises(_command.CommandError, match='time limit'):
        _command.run(['true'], timeout)


def test_a_missing_command_is_an_error_naming_it(tmp_path):
    with pytest.raises(_command.CommandError, match='cannot run .*/no-such-tool'):
        _command.run([str(tmp_path / 'no-such-tool'), '--version'], 10)


@pytest.mark.parametrize('environment, message', [
    ({'SLURM JWT': 'x'}, "invalid environment variable name 'SLURM JWT'"),
    ({'1X': 'x'}, "invalid environment variable name '1X'"),
    ({'SLURM_JWT': 'se\x00cret'}, 'SLURM_JWT must not contain a NUL'),
    ({'SLURM_JWT': ['secret']}, 'SLURM_JWT must have a text value'),
    ('SLURM_JWT=secret', 'must be a mapping'),
])
def test_bad_environment_is_refused_without_showing_the_value(environment, message):
    with pytest.raises(ValueError, match=message) as error:
        _command.check_environment(environment)
    assert 'cret' not in str(error.value)


def test_environment_values_become_text():
    assert _command.check_environment({'SLURM_CONF': '/etc/slurm/slurm.conf', 'N': 3}) == {'SLURM_CONF': '/etc/slurm/slurm.conf', 'N': '3'}
    assert _command.check_environment(None) == {}


@pytest.mark.parametrize('rc, expected', [
    (-11, 'signal 11 (SIGSEGV)'), (-9, 'signal 9 (SIGKILL)'), (-15, 'signal 15 (SIGTERM)'), (-200, 'signal 200'),
    (0, None), (1, None), (139, None), (None, None), (True, None), ('-9', None),
])
def test_signal_name(rc, expected):
    assert _command.signal_name(rc) == expected


def test_signal_name_of_a_real_kill():
    result = _command.run([sys.executable, '-c', 'import os, signal; os.kill(os.getpid(), signal.SIGSEGV)'], timeout=30)
    assert _command.signal_name(result['rc']) == 'signal 11 (SIGSEGV)'
