# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run one external command with a deadline, and make tool output safe to return and to print.

Standard library only (no Ansible imports), Python 3.8+.  Every module of the collection runs its
commands through ``run`` (``AnsibleModule.run_command`` has no time limit):

* ``run(argv, timeout, environment=None)`` runs an argument list (never a shell string) with
  ``LC_ALL=C``/``LANG=C`` in its own session (process group).  When ``timeout`` seconds pass it
  sends SIGTERM to the whole group, then SIGKILL after ``KILL_GRACE`` seconds, and returns with
  ``timed_out`` set; a hung tool and whatever it started are gone when ``run`` returns.
* ``to_text(data)`` decodes output as UTF-8; bytes that are not UTF-8 become ``\\xNN`` escapes,
  so the raw evidence stays readable and the result is always a string ansible-core can serialise.
* ``escape_controls(text)`` escapes terminal control characters (ESC and the other C0 controls but
  newline and tab, DEL, C1) as ``\\xNN`` for messages built from tool output or files.
* ``render(argv)`` is the command as one safe, shell-quoted line for messages.
"""

import os
import re
import shlex
import signal
import subprocess
import time

# Seconds between SIGTERM and SIGKILL to the process group of a command that ran past its deadline.
KILL_GRACE = 2.0
# Seconds to wait for the pipes to close once the group is killed (a descendant that left the group may hold them).
DRAIN_GRACE = 2.0
LOCALE = {'LC_ALL': 'C', 'LANG': 'C'}

_CONTROL_RE = re.compile('[\x00-\x08\x0b-\x1f\x7f-\x9f]')
_CONTROL_LINE_RE = re.compile('[\x00-\x1f\x7f-\x9f]')
_NAME_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*\Z')


class CommandError(Exception):
    """The command could not be started (missing, not executable, bad argument list)."""

    def __init__(self, message, command=None):
        super(CommandError, self).__init__(message)
        self.command = command


def _escape(match):
    return '\\x%02x' % ord(match.group(0))


def _unsurrogate(text):
    """A str with lone surrogates (from ``surrogateescape`` decoding) as the escapes ``to_text`` gives bytes."""
    try:
        data = text.encode('utf-8', 'surrogateescape')
    except UnicodeEncodeError:
        data = text.encode('utf-8', 'surrogatepass')
    return data.decode('utf-8', 'backslashreplace')


def to_text(data, errors='backslashreplace'):
    """Text of tool output: bytes decoded as UTF-8 with ``\\xNN`` for invalid bytes; None becomes ''.

    ``errors='replace'`` gives U+FFFD instead, for output whose syntax a backslash would break (JSON).
    A str passes through, except that lone surrogates (which ansible-core cannot serialise) become
    the same ``\\xNN`` escapes.
    """
    if data is None:
        return ''
    if isinstance(data, (bytes, bytearray)):
        return bytes(data).decode('utf-8', errors)
    if not isinstance(data, str):
        data = str(data)
    try:
        data.encode('utf-8')
    except UnicodeEncodeError:
        return _unsurrogate(data)
    return data


def escape_controls(text, keep_newlines=True):
    """``text`` (str or bytes) with control characters escaped as ``\\xNN``.

    ESC, the other C0 controls, DEL and the C1 controls are escaped; newline and tab stay unless
    ``keep_newlines`` is false (one-line messages).  Invalid UTF-8 is escaped too (see ``to_text``).
    """
    text = to_text(text)
    pattern = _CONTROL_RE if keep_newlines else _CONTROL_LINE_RE
    return pattern.sub(_escape, text)


def render(argv):
    """The argument list as one shell-quoted line with control characters escaped (for messages only)."""
    return ' '.join(shlex.quote(escape_controls(argument, keep_newlines=False)) for argument in argv)


def check_environment(environment):
    """Validate extra environment variables; return them as {str: str}.  Raises ValueError naming the variable.

    Names are letters, digits and ``_`` (not starting with a digit); values are text without NUL.
    Error messages never contain a value (the values may be secret).
    """
    if environment is None:
        return {}
    if not isinstance(environment, dict):
        raise ValueError('the environment must be a mapping of variable names to values, not %s' % type(environment).__name__)
    checked = {}
    for name, value in environment.items():
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError('invalid environment variable name %s: use letters, digits and "_", not starting with a digit'
                             % escape_controls(repr(name), keep_newlines=False))
        if value is None or isinstance(value, (dict, list, tuple, set)):
            raise ValueError('environment variable %s must have a text value' % name)
        value = value if isinstance(value, str) else str(value)
        if '\x00' in value:
            raise ValueError('environment variable %s must not contain a NUL character' % name)
        checked[name] = value
    return checked


def _kill_group(process, signum):
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _finish(process, grace):
    """What is left of the output within ``grace`` seconds: (stdout, stderr) bytes, or None when the pipes stay open."""
    try:
        return process.communicate(timeout=grace)
    except subprocess.TimeoutExpired:
        return None


def run(argv, timeout, environment=None, data=None, cwd=None, errors='backslashreplace'):
    """Run ``argv`` with a deadline of ``timeout`` seconds; return a result dict.

    The result holds ``argv``, ``command`` (``render(argv)``), ``rc`` (None when killed), ``stdout`` and
    ``stderr`` (``to_text``), ``timed_out``, ``timeout`` and ``elapsed`` (seconds, rounded to 0.1).
    ``environment`` (checked with ``check_environment``) is added to this process's environment;
    ``LC_ALL`` and ``LANG`` are always ``C``.  ``errors`` is how ``to_text`` decodes invalid UTF-8.  Raises ``CommandError`` when the command cannot start.
    """
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)) or not argv:
        raise CommandError('a command is a non-empty argument list, not %s' % type(argv).__name__)
    argv = [to_text(argument) if isinstance(argument, bytes) else argument for argument in argv]
    if not all(isinstance(argument, str) for argument in argv):
        raise CommandError('every argument of a command must be text: %r' % (argv,))
    command = render(argv)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise CommandError('the time limit of %s must be a positive number of seconds, got %r' % (command, timeout), command)
    child_environment = dict(os.environ)
    child_environment.update(check_environment(environment))
    child_environment.update(LOCALE)
    start = time.monotonic()
    try:
        process = subprocess.Popen(argv, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_environment, cwd=cwd,
                                   start_new_session=True, close_fds=True)
    except (OSError, ValueError) as exc:
        raise CommandError('cannot run %s: %s' % (command, escape_controls(str(exc), keep_newlines=False)), command)
    timed_out = False
    try:
        stdout, stderr = process.communicate(input=data, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(process, signal.SIGTERM)
        output = _finish(process, KILL_GRACE)
        if output is None:
            _kill_group(process, signal.SIGKILL)
            output = _finish(process, DRAIN_GRACE)
        if output is None:
            # A descendant that left the process group still holds the pipes: stop reading.
            process.kill()
            for pipe in (process.stdout, process.stderr, process.stdin):
                if pipe is not None:
                    pipe.close()
            process.wait()
            output = (b'', b'')
        stdout, stderr = output
    except BaseException:
        _kill_group(process, signal.SIGKILL)
        process.wait()
        raise
    return {
        'argv': list(argv),
        'command': command,
        'rc': None if timed_out else process.returncode,
        'stdout': to_text(stdout, errors),
        'stderr': to_text(stderr, errors),
        'timed_out': timed_out,
        'timeout': timeout,
        'elapsed': round(time.monotonic() - start, 1),
    }


def signal_name(rc):
    """``signal 11 (SIGSEGV)`` when the return code ``rc`` says a signal killed the command (negative, as subprocess gives
    it); None otherwise."""
    if isinstance(rc, bool) or not isinstance(rc, int) or rc >= 0:
        return None
    try:
        name = signal.Signals(-rc).name
    except ValueError:
        return 'signal %d' % -rc
    return 'signal %d (%s)' % (-rc, name)


def describe_timeout(result):
    """``nvidia-smi -q -x did not finish within 60 s and was killed (with its process group)``."""
    return '%s did not finish within %s s and was killed (with its process group)' % (result['command'], _seconds(result['timeout']))


def _seconds(value):
    return int(value) if float(value).is_integer() else value
