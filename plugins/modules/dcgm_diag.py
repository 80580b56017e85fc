#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: dcgm_diag
short_description: Run a DCGM diagnostic and report each test per GPU
version_added: 0.1.0
description:
  - Runs C(dcgmi diag -r <level or tests> -j) and reads the JSON document of DCGM 3.x (C(DCGM GPU Diagnostic)) or
    DCGM 4.x (C(DCGM Diagnostic), per-entity results).
  - Returns per test and per GPU C(pass), C(fail), C(warn) or C(skip) with the diagnostic's messages, and C(passed).
  - Fails the task on any failed test unless I(fail_on_failure=false).
  - Distinct, clear errors when C(dcgmi) is not installed, when the DCGM host engine is not running, and when the GPUs are busy.
  - The active levels need exclusive use of the GPUs; drain the node first (see the C(node_drain) role).
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
attributes:
  check_mode:
    support: partial
    details: In check mode no diagnostic runs (they load the GPUs); the module returns C(skipped) and says so.
  diff_mode:
    support: none
  idempotent:
    support: full
    description: Running a diagnostic changes nothing on the node; C(changed) is always false.
options:
  level:
    description:
      - Run level C(1) (quick, software/deployment, seconds), C(2) (medium), C(3) (long hardware diagnostic) or C(4) (extra long).
      - Mutually exclusive with I(tests). When neither is given, level 1 runs.
    type: int
    choices: [1, 2, 3, 4]
  levels:
    description:
      - A ladder - run these levels in order (the runbook's is C([1, 3])); a level after one that failed or could not run is not
        run. Each level's result is in RV(ladder); the module passes when every level passed.
      - Mutually exclusive with I(level) and I(tests).
    type: list
    elements: int
  tests:
    description:
      - Names of the tests to run instead of a level, for example C(software), C(memory), C(pcie), C(targeted_stress).
    type: list
    elements: str
  config:
    description:
      - Path on the node of a diagnostic configuration file (C(dcgmi diag -c)).
      - Mutually exclusive with I(parameters); DCGM 3.x silently ignores the file when C(-p) is given too.
    type: path
  gpus:
    description:
      - Indexes of the GPUs to test (C(dcgmi diag -i)); all GPUs when omitted.
    type: list
    elements: int
  parameters:
    description:
      - Test parameters passed with C(dcgmi diag -p), as a mapping of C(test.parameter) to value.
      - Mutually exclusive with I(config).
    type: dict
  timeout:
    description:
      - Seconds the diagnostic may run (C(dcgmi diag --timeout)). Unless I(command_timeout) is given, the C(dcgmi) process is
        also killed 120 seconds after this.
    type: int
  command_timeout:
    description:
      - Seconds the C(dcgmi) process may run before it is killed with its process group and the task fails with
        RV(reason=dcgmi_hung).
      - Default - I(timeout) plus 120 seconds; without I(timeout) 600 (level 1), 1800 (level 2), 5400 (level 3 and test lists)
        or 10800 (level 4).
    type: int
  fail_on_failure:
    description:
      - Fail the task when any test fails.
    type: bool
    default: true
  fail_on_warning:
    description:
      - Also fail the task when a test warns.
    type: bool
    default: false
notes:
  - C(dcgmi diag -j) exits non-zero when a test fails and still prints the document; the document decides the result.
  - Output that is not UTF-8 is read with U+FFFD for the invalid bytes (the document stays JSON); control characters in
    messages are escaped as C(\xNN).
  - Killing C(dcgmi) does not stop a diagnostic the host engine (C(nv-hostengine)) already runs; the GPUs may stay busy until it ends.
seealso:
  - module: gpufleet.lifecycle.gpu_facts
  - name: DCGM diagnostics
    description: NVIDIA's description of the run levels and tests.
    link: https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html
'''

EXAMPLES = r'''
- name: Quick software/deployment validation after a driver change
  gpufleet.lifecycle.dcgm_diag:
    level: 1

- name: Long hardware diagnostic, report failures without failing the play
  gpufleet.lifecycle.dcgm_diag:
    level: 3
    fail_on_failure: false
  register: diag

- name: Two tests on two GPUs with a time limit
  gpufleet.lifecycle.dcgm_diag:
    tests: [memory, pcie]
    gpus: [0, 1]
    timeout: 900
'''

RETURN = r'''
passed:
  description: True when no test failed (and, with I(fail_on_warning), none warned).
  type: bool
  returned: when the diagnostic ran
  sample: true
schema:
  description: C(3) or C(4), the DCGM JSON schema that was read.
  type: str
  returned: when the diagnostic ran
dcgm_version:
  description: DCGM version from the document's metadata, null where the document has none.
  type: str
  returned: when the diagnostic ran
summary:
  description: Counts of per-GPU results, C(pass), C(fail), C(warn), C(skip).
  type: dict
  returned: when the diagnostic ran
  sample: {"pass": 14, "fail": 1, "warn": 0, "skip": 3}
tests:
  description: One entry per test, with C(name), C(category), aggregate C(status) and per-GPU C(results) (C(gpu), C(status), C(messages)).
  type: list
  elements: dict
  returned: when the diagnostic ran
failures:
  description: Every failed result as C(test), C(gpu), C(message).
  type: list
  elements: dict
  returned: when the diagnostic ran
ladder:
  description:
    - With I(levels), one entry per level in order, C(level) and C(result) - what the module returns for that level alone (a
      level that could not run has C(failed) and C(reason)), null for a level not run because an earlier one failed.
  type: list
  elements: dict
  returned: with I(levels)
cmd:
  description: The argument list that was run.
  type: list
  elements: str
  returned: always
reason:
  description:
    - Why the diagnostic could not run, when it could not - C(dcgmi_missing), C(hostengine_unreachable), C(gpus_busy),
      C(not_supported), C(diag_failed), C(dcgmi_failed), C(unreadable), C(dcgmi_hung) (C(dcgmi) did not finish within
      I(command_timeout) and was killed).
  type: str
  returned: on failure to run
dcgmi_rc:
  description:
    - Exit code of C(dcgmi). It is not named C(rc) because C(dcgmi diag -j) exits non-zero whenever a test fails, also when
      I(fail_on_failure=false) asks for a report only.
  type: int
  returned: when dcgmi ran
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _command
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _dcgm


def _selection(params):
    if params['tests']:
        return params['tests']
    return params['level'] or 1


def _verdict(document, fail_on_warning):
    result = dict(document)
    result['passed'] = document['passed'] and not (fail_on_warning and document['summary'].get('warn'))
    return result


class CouldNotRun(Exception):
    """The diagnostic could not run; ``result`` is what the task returns (msg, reason, cmd, ...)."""

    def __init__(self, **result):
        super().__init__(result.get('msg'))
        self.result = result


def _could_not_run(argv, rc, stdout, stderr):
    failure = _dcgm.classify_failure(rc, stdout, stderr)
    killed = _command.signal_name(rc)
    if killed:
        # subprocess gives a signal as a negative return code; dcgmi's own exit status is never negative.
        failure = dict(reason='dcgmi_failed', message='dcgmi was killed by %s' % killed)
    return CouldNotRun(msg=_command.escape_controls('dcgmi diag could not run (%s): %s' % (failure['reason'], failure['message'])),
                       reason=failure['reason'], cmd=argv, dcgmi_rc=rc, stdout=stdout, stderr=stderr)


def run_diag(module, dcgmi, selection):
    """Run one diagnostic (a level or a test list); the verdict, or :class:`CouldNotRun`."""
    params = module.params
    try:
        argv = _dcgm.build_diag_argv(dcgmi, selection, config=params['config'], gpus=params['gpus'],
                                     timeout=params['timeout'], parameters=params['parameters'])
        limit = _dcgm.process_timeout(selection, timeout=params['timeout'], command_timeout=params['command_timeout'])
    except ValueError as exc:
        raise CouldNotRun(msg='invalid diagnostic request: %s' % exc, reason='invalid_request', cmd=[])
    if module.check_mode:
        return dict(changed=False, skipped=True, cmd=argv, msg='check mode: no active diagnostic was run (it would run: %s)' % ' '.join(argv[1:]))
    try:
        ran = _command.run(argv, limit, errors='replace')
    except _command.CommandError as exc:
        raise CouldNotRun(msg=str(exc), reason='dcgmi_failed', cmd=argv)
    rc, stdout, stderr = ran['rc'], ran['stdout'], ran['stderr']
    if ran['timed_out']:
        raise CouldNotRun(msg=_command.describe_timeout(ran), reason='dcgmi_hung', cmd=argv, stdout=stdout, stderr=stderr)
    try:
        document = _dcgm.parse_diag_json(stdout)
    except _dcgm.DcgmRuntimeError:
        # The document only says the diagnostic could not run (host engine, GPUs in use, ...).
        raise _could_not_run(argv, rc, stdout, stderr)
    except _dcgm.DcgmParseError as exc:
        if rc == 0:
            raise CouldNotRun(msg=_command.escape_controls('dcgmi diag printed a document that cannot be read: %s' % exc), reason='unreadable',
                              cmd=argv, dcgmi_rc=rc, stdout=stdout, stderr=stderr)
        raise _could_not_run(argv, rc, stdout, stderr)
    result = _verdict(document, params['fail_on_warning'])
    result.update(changed=False, cmd=argv, dcgmi_rc=rc)
    return result


def _described(result):
    described = '; '.join('%s on GPU %s: %s' % (item['test'], item['gpu'], item['message']) for item in result['failures'])
    return described or 'warnings: %s' % result['summary'].get('warn')


def run_ladder(module, dcgmi, levels):
    """Run the levels in order; a level after one that failed or could not run is not run (its result is None)."""
    ladder = []
    for level in levels:
        if ladder and not (ladder[-1]['result'] or {}).get('passed'):
            ladder.append({'level': level, 'result': None})
            continue
        try:
            result = run_diag(module, dcgmi, level)
        except CouldNotRun as exc:
            result = dict(exc.result, failed=True)
        ladder.append({'level': level, 'result': result})
        if result.get('skipped'):
            break
    return ladder


def main():
    module = AnsibleModule(
        argument_spec=dict(
            level=dict(type='int', choices=[1, 2, 3, 4]),
            levels=dict(type='list', elements='int'),
            tests=dict(type='list', elements='str'),
            config=dict(type='path'),
            gpus=dict(type='list', elements='int'),
            parameters=dict(type='dict'),
            timeout=dict(type='int'),
            command_timeout=dict(type='int'),
            fail_on_failure=dict(type='bool', default=True),
            fail_on_warning=dict(type='bool', default=False),
        ),
        mutually_exclusive=[('level', 'tests', 'levels'), ('config', 'parameters')],
        supports_check_mode=True,
    )
    params = module.params
    dcgmi = module.get_bin_path('dcgmi')
    if not dcgmi:
        module.fail_json(msg='dcgmi was not found on PATH: DCGM is not installed on this node '
                             '(packages datacenter-gpu-manager-4-core or datacenter-gpu-manager)', reason='dcgmi_missing', cmd=[])
    if params['levels'] is not None:
        bad = [level for level in params['levels'] if level not in (1, 2, 3, 4)]
        if bad or not params['levels']:
            module.fail_json(msg='levels: a non-empty list of 1, 2, 3 and 4, got %s' % params['levels'], reason='invalid_request', cmd=[])
        ladder = run_ladder(module, dcgmi, params['levels'])
        passed = all((entry['result'] or {}).get('passed') for entry in ladder)
        if module.check_mode:
            module.exit_json(changed=False, skipped=True, ladder=ladder, msg=ladder[0]['result'].get('msg'))
        if not passed and params['fail_on_failure']:
            failing = [entry for entry in ladder if entry['result'] is not None][-1]
            what = failing['result'].get('msg') if 'passed' not in failing['result'] else 'DCGM diagnostic failed: %s' % _described(failing['result'])
            module.fail_json(msg=_command.escape_controls('level %s: %s' % (failing['level'], what)), ladder=ladder, passed=False)
        module.exit_json(changed=False, ladder=ladder, passed=passed)
    try:
        result = run_diag(module, dcgmi, _selection(params))
    except CouldNotRun as exc:
        module.fail_json(**exc.result)
    if result.get('skipped'):
        module.exit_json(**result)
    if not result['passed'] and params['fail_on_failure']:
        module.fail_json(msg=_command.escape_controls('DCGM diagnostic failed: %s' % _described(result)), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
