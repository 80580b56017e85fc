# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A stand-in for an NVIDIA tool: prints a captured real output and exits with its code.

Invoked by a generated wrapper as ``python stand_in.py SPEC_FILE ARGS...``.  The
spec (JSON) maps argument prefixes to responses::

    {"tool": "nvidia-smi",
     "responses": [{"args": ["-q", "-x"], "stdout_file": "/path/sample.xml", "rc": 0},
                   {"args": [], "stdout": "text", "stderr": "text", "rc": 9}]}

The first response whose ``args`` is a prefix of the arguments wins.  Every call
is appended to ``SPEC_FILE.calls`` (one JSON list per line) so tests can assert
what ran, and what did not.

Optional keys of a response, for odd and broken tools:

* ``stdout_hex`` / ``stderr_hex``: the output as hex-encoded bytes (bytes that are not UTF-8);
* ``hang``: seconds to sleep after printing, as a hung tool does; with ``hang_child`` it first
  starts a ``sleep`` in its process group that holds stdout and stderr open (only a kill of
  the whole group ends both), and ``pid_file`` receives both process ids.
"""

import json
import os
import signal
import subprocess
import sys
import time


def _bytes(response, key):
    if response.get(key + '_hex'):
        return bytes.fromhex(response[key + '_hex'])
    if response.get(key + '_file'):
        with open(response[key + '_file'], 'rb') as handle:
            return handle.read()
    return response.get(key, '').encode('utf-8', 'surrogateescape')


def _hang(response):
    pids = [os.getpid()]
    if response.get('hang_child'):
        pids.append(subprocess.Popen(['sleep', str(response['hang'])]).pid)
    if response.get('pid_file'):
        with open(response['pid_file'], 'w', encoding='utf-8') as handle:
            handle.write(' '.join(str(pid) for pid in pids))
    time.sleep(response['hang'])


def main():
    spec_path = sys.argv[1]
    arguments = sys.argv[2:]
    with open(spec_path, encoding='utf-8') as handle:
        spec = json.load(handle)
    with open(spec_path + '.calls', 'a', encoding='utf-8') as handle:
        handle.write(json.dumps(arguments) + '\n')
    for response in spec['responses']:
        if arguments[:len(response['args'])] == response['args']:
            sys.stdout.buffer.write(_bytes(response, 'stdout'))
            sys.stderr.buffer.write(_bytes(response, 'stderr'))
            sys.stdout.flush()
            sys.stderr.flush()
            if response.get('hang'):
                _hang(response)
            if response.get('signal'):
                if response['signal'] not in (signal.SIGKILL, signal.SIGSTOP):
                    signal.signal(response['signal'], signal.SIG_DFL)
                os.kill(os.getpid(), response['signal'])
            return response.get('rc', 0)
    sys.stderr.write('%s: stand-in has no response for %r\n' % (spec['tool'], arguments))
    return 2


if __name__ == '__main__':
    sys.exit(main())
