#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r'''
module: slurm_node
short_description: Drain, resume or reboot a Slurm node and wait for it
version_added: 0.1.0
description:
  - Reads a node with C(scontrol show node -o NAME) and its jobs with C(squeue -h -w NAME), and with I(state) other than C(present)
    drains it (C(scontrol update NodeName=NAME State=DRAIN Reason=...)), resumes it (C(State=RESUME)) or asks Slurm to reboot it
    once its jobs are done (C(scontrol reboot ASAP nextstate=... reason=... NAME)), then waits for the result.
  - Runs where the Slurm clients are, usually the controller or a login node (C(delegate_to)), and talks to the cluster that
    C(slurm.conf) names; point it at a cluster with I(environment) C(SLURM_CONF), and give a token with I(environment) C(SLURM_JWT),
    as in the examples. I(environment) is never printed, also not at C(-vvv), unlike a task's C(environment).
  - Reasons set by this module start with C(gpufleet:) (it adds the prefix). A node drained or down with another reason belongs to
    somebody else (an admin's C(bad DIMM)); the module leaves it alone and returns C(drained_by_others=true) unless I(force_reason=true).
  - Reports C(changed) only when it issued an update. It never resumes a node on its own, also not when a drain times out.
  - An unknown node or an unreachable controller fails the task with C(scontrol)'s own words before anything is changed; so does an
    answer of C(scontrol show node) about another node than I(name) (C(wrong_node)).
  - Every C(scontrol) and C(squeue) call has a time limit, I(command_timeout); a client that hangs (a dead C(slurmctld), a stuck
    C(munged)) is killed with its process group and the task fails naming the command (C(command_timeout)).
author:
  - gpufleet.lifecycle maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.lifecycle.attributes
attributes:
  check_mode:
    support: full
    details: In check mode the module reads the node, reports what it would do and the command it would run, changes nothing and does not wait.
  diff_mode:
    support: none
  idempotent:
    support: partial
    description:
      - C(present), C(drained) and C(resumed) are idempotent. C(rebooted) requests a reboot every time, unless one is already pending.
options:
  name:
    description:
      - The Slurm node name (one name, not a host list), for example C(gpu-01).
      - Letters, digits, C(.), C(_) and C(-) only, starting with a letter or a digit, at most 63 characters.
    type: str
    required: true
  state:
    description:
      - C(present) only reads the node.
      - C(drained) sets the DRAIN flag and, with I(wait), waits until the node is DRAINED (no jobs left).
      - C(resumed) resumes a drained or down node and, with I(wait), waits until the DRAIN flag is gone and the node responds.
      - C(rebooted) asks Slurm to reboot the node once idle (C(scontrol reboot ASAP)) and, with I(wait), waits until the node
        booted again (C(BootTime) advanced, no C(REBOOT_REQUESTED)/C(REBOOT_ISSUED) flag, responding).
    type: str
    choices: [present, drained, resumed, rebooted]
    default: present
  reason:
    description:
      - Why; required with I(state=drained) and I(state=rebooted). The module prefixes it with C(gpufleet:) unless it starts with that.
      - One line. With I(state=drained) a node already drained by this collection keeps its reason.
    type: str
  force_reason:
    description:
      - Act on a node drained or down with a reason that does not start with C(gpufleet:) - replace that reason (C(drained)),
        resume the node (C(resumed)) or reboot it (C(rebooted)).
    type: bool
    default: false
  replace_reason:
    description:
      - With I(state=drained), replace the reason of a node this collection already drained (its reason starts with
        C(gpufleet:)), for example to say why it is quarantined. A node drained by others is still left alone unless I(force_reason).
    type: bool
    default: false
  on_timeout:
    description:
      - What a drain (I(state=drained), I(wait)) that is still DRAINING after I(timeout) does.
      - C(fail) fails the task naming the jobs still on the node; the node stays draining.
      - C(restore) puts the node back as it was (resumes it when this call set the DRAIN flag) and ends without failing,
        with I(outcome=deferred), the message naming the jobs.
    type: str
    choices: [fail, restore]
    default: fail
  wait:
    description:
      - Wait for the wanted state, up to I(timeout) seconds.
    type: bool
    default: true
  timeout:
    description:
      - Seconds to wait. A drain that is still DRAINING then fails the task, naming the jobs still on the node; the node stays draining.
    type: int
    default: 3600
  nextstate:
    description:
      - State of the node after the reboot (I(state=rebooted)), C(resume) (back to service) or C(down).
    type: str
    choices: [resume, down]
    default: resume
  scontrol_path:
    description:
      - Path of C(scontrol); looked up on C(PATH) when omitted.
    type: path
  squeue_path:
    description:
      - Path of C(squeue); looked up on C(PATH) when omitted. Without C(squeue) the module returns no jobs.
    type: path
  environment:
    description:
      - Variables set in the environment of C(scontrol) and C(squeue), for example C(SLURM_CONF) (which cluster) and C(SLURM_JWT)
        (a token for C(auth/jwt)).
      - Secret - the values are never printed or logged (C(no_log)); Ansible shows any of them that appears in the result as
        C(********). Pass tokens here, not in the task's C(environment), which is printed at C(-vvv).
      - C(LC_ALL) and C(LANG) are always C(C).
    type: dict
    default: {}
  command_timeout:
    description:
      - Seconds each C(scontrol) or C(squeue) call may run before it is killed with its process group and the task fails
        (C(error=command_timeout)). I(timeout) bounds the wait for the node's state, this one each call.
    type: int
    default: 30
  requeue:
    description:
      - With I(state=drained), once the node is draining, which of its running jobs are requeued (C(scontrol requeue JOBID)) so the
        drain need not wait for them to end.
      - C(checkpointed) requeues a job whose declared next checkpoint (C(gpufleet.io/checkpoint=<ISO time>) in its comment) is now
        or past - it restarts from that checkpoint, no work lost; a job that declares nothing, or a checkpoint still ahead, is
        waited for. C(never) waits for every job.
      - A job Slurm refuses to requeue (C(--no-requeue), C(JobRequeue=0)) is waited for; RV(requeue_refused) says why.
    type: str
    choices: [never, checkpointed]
    default: never
notes:
  - Commands run as argument lists with C(LC_ALL=C); the node name is checked before any command runs.
  - Output that is not UTF-8 (a Latin-1 reason) is read with C(\xNN) escapes for the invalid bytes; control characters in
    messages are escaped the same way.
  - Tested against Slurm 22.05. A drained node is C(IDLE+DRAIN) or C(DOWN+DRAIN); C(MIXED+DRAIN), C(ALLOCATED+DRAIN) and
    C(+COMPLETING) are still draining. Slurm shows C(IDLE+NOT_RESPONDING) for a moment after a resume.
  - A reboot that Slurm reports as issued is completed by the node's C(RebootProgram) and slurmd; when the node does not come back the
    wait ends with a failure after I(timeout).
seealso:
  - name: scontrol
    description: Slurm's node states, update and reboot.
    link: https://slurm.schedmd.com/scontrol.html
'''

EXAMPLES = r'''
- name: Drain the node and wait until its jobs are done
  gpufleet.lifecycle.slurm_node:
    name: "{{ inventory_hostname_short }}"
    state: drained
    reason: driver upgrade to 580
    timeout: 7200
    environment:
      SLURM_CONF: /etc/slurm/slurm.conf
      SLURM_JWT: "{{ slurm_jwt }}"
  delegate_to: "{{ slurm_controller }}"

- name: Read the node
  gpufleet.lifecycle.slurm_node:
    name: gpu-01
  register: node

- name: Reboot once idle and take the node back into service
  gpufleet.lifecycle.slurm_node:
    name: gpu-01
    state: rebooted
    reason: kernel update
    nextstate: resume
    timeout: 1800

- name: Back into service
  gpufleet.lifecycle.slurm_node:
    name: gpu-01
    state: resumed
'''

RETURN = r'''
node:
  description:
    - The node as C(scontrol show node -o) prints it now, every C(Key=value) field as printed (C(State), C(Reason) with its C([user@time]),
      C(BootTime), ...) plus the parsed keys below.
  type: dict
  returned: always, once the node was read
  contains:
    name:
      description: Node name.
      type: str
      sample: gpu-01
    state:
      description: Slurm's C(State=) as printed.
      type: str
      sample: MIXED+DRAIN
    base_state:
      description: C(IDLE), C(MIXED), C(ALLOCATED), C(DOWN), C(COMPLETING), C(FUTURE), C(UNKNOWN) ...
      type: str
      sample: MIXED
    flags:
      description: State flags, for example C(DRAIN), C(COMPLETING), C(REBOOT_REQUESTED), C(REBOOT_ISSUED), C(NOT_RESPONDING) (also for a C(*) suffix).
      type: list
      elements: str
      sample: [DRAIN]
    responding:
      description: False when Slurm marks the node not responding.
      type: bool
    drain_state:
      description: C(none), C(draining) (DRAIN flag, jobs left) or C(drained).
      type: str
      sample: draining
    reason:
      description: The reason without Slurm's C([user@time]) suffix, control characters escaped, null when none.
      type: str
      sample: "gpufleet: driver upgrade to 580"
    reason_user:
      description: Who set the reason.
      type: str
    reason_time:
      description: When the reason was set.
      type: str
    boot_time:
      description: C(BootTime), null while Slurm does not know it.
      type: str
      sample: "2026-11-21T19:57:36"
previous:
  description: The node before the module acted, same keys as RV(node).
  type: dict
  returned: always, once the node was read
jobs:
  description: Jobs on the node (C(squeue -w)) when the module ended, each C(id), C(user), C(state), C(name).
  type: list
  elements: dict
  returned: always
  sample: [{"id": "4711", "user": "alice", "state": "RUNNING", "name": "train-llm"}]
requeued:
  description:
    - The jobs the drain requeued (I(requeue)), each C(id), C(nodes) (Slurm's host list), C(gpus) (the job's GPUs, per-node gres
      times its nodes), C(checkpoint) and C(start) (ISO times, null when unknown) and C(at) (when it was requeued).
  type: list
  elements: dict
  returned: always
  sample: [{"id": "4711", "nodes": "gpu-[01-02]", "gpus": 16, "checkpoint": "2026-11-27T09:00:00+00:00", "at": "2026-11-27T09:00:04+00:00"}]
requeue_refused:
  description: Jobs Slurm refused to requeue, each C(id) and C(message) (Slurm's words); the drain waits for them.
  type: list
  elements: dict
  returned: always
outcome:
  description:
    - C(done) (the node reached the state, or was there already), C(left_alone) (drained or down by others, not touched),
      C(deferred) (the drain ran out of time and the node was put back as it was, I(on_timeout=restore)).
  type: str
  returned: always
  sample: done
drained_by_others:
  description:
    - The node is drained or down with a reason that does not start with C(gpufleet:) (or without a reason); unless
      I(force_reason=true) the module left it alone.
  type: bool
  returned: always
ours:
  description: The node's reason was set by this collection (it starts with C(gpufleet:)).
  type: bool
  returned: once the node was read
cmd:
  description: The update the module ran (or, in check mode, would run), an empty list when none.
  type: list
  elements: str
  returned: always
waited:
  description: Seconds spent waiting.
  type: float
  returned: always
error:
  description:
    - Why the node could not be read or changed - C(invalid_name), C(invalid_environment), C(node_not_found), C(wrong_node)
      (C(scontrol) answered about another node), C(controller_unreachable), C(authentication_failed), C(slurm_error), C(unreadable),
      C(command_timeout) (a Slurm client did not finish within I(command_timeout)), C(timeout) (the node did not reach the state
      within I(timeout)).
  type: str
  returned: on failure
'''

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _command
from ansible_collections.gpufleet.lifecycle.plugins.module_utils import _slurm

POLL_INTERVAL = 0.5
# Seconds a node put back after a drain timeout may take to respond again (Slurm shows +NOT_RESPONDING for a moment).
RESUME_SETTLE = 60


class SlurmNode:
    """The Slurm clients for one node."""

    def __init__(self, module, name):
        self.module = module
        self.name = name
        self.result = {'changed': False, 'jobs': [], 'drained_by_others': False, 'cmd': [], 'waited': 0.0, 'outcome': 'done',
                       'requeued': [], 'requeue_refused': []}
        scontrol = module.params['scontrol_path'] or module.get_bin_path('scontrol')
        if not scontrol:
            self.fail('scontrol was not found on PATH: the Slurm clients are not installed here (package slurm-client)', 'slurm_error')
        self.scontrol = scontrol
        self.squeue = module.params['squeue_path'] or module.get_bin_path('squeue')
        self.timeout = module.params['command_timeout']
        try:
            self.environment = _command.check_environment(module.params['environment'])
        except ValueError as exc:
            self.fail('environment: %s' % exc, 'invalid_environment')

    def fail(self, msg, error, **extra):
        self.result.update(extra)
        self.module.fail_json(msg=_command.escape_controls(msg), error=error, **self.result)

    def run(self, argv, what):
        """Run a Slurm client within command_timeout; fail the task naming it when it fails or hangs."""
        try:
            result = _command.run(argv, self.timeout, environment=self.environment)
        except _command.CommandError as exc:
            self.fail(str(exc), 'slurm_error')
        if result['timed_out']:
            self.fail('%s: %s' % (self.name, _command.describe_timeout(result)), 'command_timeout',
                      stdout=result['stdout'], stderr=result['stderr'])
        if result['rc'] != 0:
            failure = _slurm.classify_error(result['rc'], result['stdout'], result['stderr'])
            self.fail('%s failed (%s): %s' % (what, failure['error'], failure['message']), failure['error'],
                      stdout=result['stdout'], stderr=result['stderr'])
        return result['stdout']

    def show(self):
        stdout = self.run([self.scontrol, 'show', 'node', '-o', self.name], 'scontrol show node %s' % self.name)
        try:
            return _slurm.parse_show_node(stdout, self.name)
        except _slurm.SlurmWrongNodeError as exc:
            self.fail('%s; not acting on it' % exc, 'wrong_node', stdout=stdout)
        except _slurm.SlurmParseError as exc:
            self.fail('cannot read scontrol show node %s: %s' % (self.name, exc), 'unreadable', stdout=stdout)
        return None

    def jobs(self):
        if not self.squeue:
            return []
        stdout = self.run([self.squeue, '-h', '-w', self.name, '-o', _slurm.SQUEUE_FORMAT], 'squeue -w %s' % self.name)
        try:
            return _slurm.parse_squeue_jobs(stdout)
        except _slurm.SlurmParseError as exc:
            self.fail('cannot read squeue -w %s: %s' % (self.name, exc), 'unreadable', stdout=stdout)
        return []

    def requeue(self, mode):
        """Requeue the running jobs of the node that :func:`_slurm.requeue_choice` picks (their declared checkpoint passed)."""
        if mode == 'never' or not self.squeue:
            return
        stdout = self.run([self.squeue, '-h', '-w', self.name, '-t', 'RUNNING', '-o', _slurm.SQUEUE_REQUEUE_FORMAT],
                          'squeue -w %s' % self.name)
        try:
            jobs = _slurm.parse_requeue_jobs(stdout)
        except _slurm.SlurmParseError as exc:
            # Nothing is requeued then: the drain waits for the jobs as without a requeue (the node is already draining).
            self.result['requeue_refused'].append({'id': '', 'message': _command.escape_controls('cannot read squeue -w %s: %s' % (self.name, exc))})
            return
        now = time.time()
        for job in _slurm.requeue_choice(jobs, now, mode):
            try:
                result = _command.run([self.scontrol, 'requeue', job['id']], self.timeout, environment=self.environment)
            except _command.CommandError as exc:
                self.result['requeue_refused'].append({'id': job['id'], 'message': _command.escape_controls(str(exc))})
                continue
            if result['timed_out'] or result['rc'] != 0:
                message = _command.describe_timeout(result) if result['timed_out'] else (result['stderr'] or result['stdout']).strip()
                self.result['requeue_refused'].append({'id': job['id'], 'message': _command.escape_controls(message)[:300]})
                continue
            self.result['changed'] = True
            self.result['requeued'].append(_slurm.requeue_record(job, now))

    def update(self, arguments):
        argv = [self.scontrol] + arguments
        self.result['cmd'] = argv
        self.result['changed'] = True
        if not self.module.check_mode:
            self.run(argv, ' '.join(arguments))

    def settle_resume(self, previous):
        """After a RESUME, wait (at most RESUME_SETTLE seconds) until the node responds again as it did before."""
        deadline = time.monotonic() + RESUME_SETTLE
        node = self.show()
        while not _slurm.resume_done(node) and previous['responding'] and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL)
            node = self.show()
        return node

    def wait(self, wait, previous, timeout, restore=None):
        """Wait for the state; on time out fail, or with ``restore`` (scontrol arguments) put the node back and return None."""
        start = time.monotonic()
        node = self.show()
        while not _slurm.wait_done(wait, node, previous):
            if time.monotonic() - start >= timeout:
                self.result['waited'] = round(time.monotonic() - start, 1)
                self.result['node'] = node
                self.result['jobs'] = self.jobs()
                message = _slurm.describe_wait_timeout(wait, node, previous, timeout, self.result['jobs'])
                if restore is None:
                    self.fail(message, 'timeout')
                node = self.show()
                if restore:
                    self.run([self.scontrol] + restore, ' '.join(restore))
                    self.result['cmd'] = [self.scontrol] + restore
                    message = message.replace('the node is left as it is', 'the node was put back as it was (resumed)')
                    node = self.settle_resume(previous)
                self.result.update(outcome='deferred', msg=message, node=node)
                return None
            time.sleep(POLL_INTERVAL)
            node = self.show()
        self.result['waited'] = round(time.monotonic() - start, 1)
        return node


def _reason(module):
    try:
        return _slurm.gpufleet_reason(module.params['reason'])
    except ValueError as exc:
        module.fail_json(msg='reason: %s' % exc, error='invalid_reason', changed=False)
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type='str', required=True),
            state=dict(type='str', default='present', choices=list(_slurm.STATES)),
            reason=dict(type='str'),
            force_reason=dict(type='bool', default=False),
            replace_reason=dict(type='bool', default=False),
            on_timeout=dict(type='str', default='fail', choices=['fail', 'restore']),
            wait=dict(type='bool', default=True),
            timeout=dict(type='int', default=3600),
            nextstate=dict(type='str', default='resume', choices=['resume', 'down']),
            scontrol_path=dict(type='path'),
            squeue_path=dict(type='path'),
            environment=dict(type='dict', default={}, no_log=True),
            command_timeout=dict(type='int', default=30),
            requeue=dict(type='str', default='never', choices=list(_slurm.REQUEUE_MODES)),
        ),
        required_if=[('state', 'drained', ['reason']), ('state', 'rebooted', ['reason'])],
        supports_check_mode=True,
    )
    params = module.params
    try:
        name = _slurm.check_node_name(params['name'])
    except ValueError as exc:
        module.fail_json(msg=_command.escape_controls(str(exc)), error='invalid_name', changed=False, cmd=[], jobs=[],
                         drained_by_others=False, waited=0.0)
    if params['command_timeout'] < 1:
        module.fail_json(msg='command_timeout must be at least 1 second, got %s' % params['command_timeout'], error='invalid_timeout',
                         changed=False)
    state = params['state']
    reason = _reason(module) if state in ('drained', 'rebooted') else None
    slurm = SlurmNode(module, name)
    previous = slurm.show()
    slurm.result.update(previous=previous, node=previous, jobs=slurm.jobs())
    decision = _slurm.decide(previous, state, reason=reason, force_reason=params['force_reason'], nextstate=params['nextstate'],
                             replace_reason=params['replace_reason'])
    slurm.result.update(drained_by_others=decision['drained_by_others'], ours=decision['ours'])
    if decision['drained_by_others'] and state != 'present':
        slurm.result['outcome'] = 'left_alone'
    if decision['msg']:
        slurm.result['msg'] = decision['msg']
    if decision['update']:
        slurm.update(decision['update'])

    if module.check_mode:
        if slurm.result['changed']:
            slurm.result['msg'] = 'check mode: would run %s' % _command.render(slurm.result['cmd'][1:])
        module.exit_json(**slurm.result)
    if state == 'drained' and not decision['drained_by_others']:
        slurm.requeue(params['requeue'])
    if decision['wait'] and params['wait']:
        restore = _slurm.restore_after_timeout(previous, decision) if state == 'drained' and params['on_timeout'] == 'restore' else None
        node = slurm.wait(decision['wait'], previous, params['timeout'], restore=restore)
        if node is not None:
            slurm.result['node'] = node
    elif slurm.result['changed']:
        slurm.result['node'] = slurm.show()
    slurm.result['jobs'] = slurm.jobs()
    module.exit_json(**slurm.result)


if __name__ == '__main__':
    main()
