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
"""

import json
import sys


def _text(response, key):
    if response.get(key + '_file'):
        with open(response[key + '_file'], encoding='utf-8', errors='surrogateescape') as handle:
            return handle.read()
    return response.get(key, '')


def main():
    spec_path = sys.argv[1]
    arguments = sys.argv[2:]
    with open(spec_path, encoding='utf-8') as handle:
        spec = json.load(handle)
    with open(spec_path + '.calls', 'a', encoding='utf-8') as handle:
        handle.write(json.dumps(arguments) + '\n')
    for response in spec['responses']:
        if arguments[:len(response['args'])] == response['args']:
            sys.stdout.write(_text(response, 'stdout'))
            sys.stderr.write(_text(response, 'stderr'))
            return response.get('rc', 0)
    sys.stderr.write('%s: stand-in has no response for %r\n' % (spec['tool'], arguments))
    return 2


if __name__ == '__main__':
    sys.exit(main())
