#!/usr/bin/env python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Print the "Faults" table of tests/sim/README.md from the fault table (node/gpufleet_sim/fault_table.py).

    tests/sim/render_fault_table.py           # rewrite the table in the README (between its two markers)
    tests/sim/render_fault_table.py --check   # exit 1 when the README's table is not the fault table's

tests/unit/sim/test_fault_table.py runs the check, so a fault, setting or default changed on one side only fails there.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.join(HERE, 'node') not in sys.path:
    sys.path.insert(0, os.path.join(HERE, 'node'))

from gpufleet_sim import fault_table  # noqa: E402  pylint: disable=wrong-import-position

README = os.path.join(HERE, 'README.md')
BEGIN = '<!-- fault table: printed from node/gpufleet_sim/fault_table.py by render_fault_table.py; edit the table, not these lines -->'
END = '<!-- end of the fault table -->'


def render(text):
    """``text`` (the README) with the lines between the markers replaced by the fault table."""
    lines = text.split('\n')
    try:
        first, last = lines.index(BEGIN), lines.index(END)
    except ValueError:
        raise SystemExit('%s: the fault table markers are missing' % README)
    return '\n'.join(lines[:first + 1] + fault_table.markdown_rows() + lines[last:])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--check', action='store_true', help='only check that the README has the table')
    parser.add_argument('--readme', default=README)
    arguments = parser.parse_args(argv)
    with open(arguments.readme, encoding='utf-8') as handle:
        text = handle.read()
    wanted = render(text)
    if arguments.check:
        if wanted != text:
            sys.stderr.write('%s: the Faults table differs from node/gpufleet_sim/fault_table.py; run %s\n' % (arguments.readme, __file__))
            return 1
        return 0
    if wanted != text:
        with open(arguments.readme, 'w', encoding='utf-8') as handle:
            handle.write(wanted)
    return 0


if __name__ == '__main__':
    sys.exit(main())
