# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Merge fleet reports of several shards, or render a report.json again, outside a playbook run.

    PYTHONPATH=<collections path> python -m ansible_collections.gpufleet.lifecycle.plugins.plugin_utils._report_cli \\
        merge --output merged/ shard1/ shard2/report.json ...
    ... _report_cli render --output out/ report.json

Writes report.json, report.md, report.html, junit.xml and metrics.prom like the callback (docs/reporting.md).
"""

from __future__ import annotations

import argparse
import sys

from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _report
from ansible_collections.gpufleet.lifecycle.plugins.plugin_utils import _report_render


def main(argv=None):
    parser = argparse.ArgumentParser(prog='gpufleet-report', description=__doc__.split('\n', 1)[0])
    commands = parser.add_subparsers(dest='command', required=True)
    for name, text in (('merge', 'merge the reports of several shards into one'), ('render', 'write every format of one report.json again')):
        command = commands.add_parser(name, help=text)
        command.add_argument('--output', required=True, help='folder to write into')
        command.add_argument('--textfile', help='a second path for metrics.prom')
        command.add_argument('reports', nargs='+' if name == 'merge' else 1, help='report.json files or folders holding one')
    arguments = parser.parse_args(argv)
    try:
        reports = [_report.load(path) for path in arguments.reports]
        report = _report.merge(reports) if arguments.command == 'merge' else reports[0]
        written, problems = _report_render.write_all(report, arguments.output, textfile=arguments.textfile)
    except (_report.ReportError, _report_render.RenderError, OSError) as exc:
        sys.stderr.write('gpufleet-report: %s\n' % exc)
        return 1
    for problem in problems:
        sys.stderr.write('gpufleet-report: warning: %s\n' % problem)
    summary = report['summary']
    sys.stdout.write('%d node(s) from %d shard(s): %s -> %s\n' % (
        summary['nodes'], report['run']['shards'], ', '.join('%d %s' % (count, state) for state, count in summary['states'].items() if count) or 'none',
        ', '.join(written)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
