# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm_node through ansible-playbook against a real Slurm 22.05 (tests/sim/slurm).

One module-scoped cluster of four nodes in its own temporary state directory; every test uses its own
node, and the cluster is torn down at the end with nothing it started left running.
"""

import datetime
import json
import os
import re
import sys
import time

import pytest

from conftest import ROOT, Host, SlurmCluster, pids_alive, require_root, run_playbook, slurm_cluster_up

HERE = os.path.dirname(os.path.abspath(__file__))
# slurm_sim (tests/sim/slurm) is on sys.path through conftest.

import slurm_sim  # noqa: E402  pylint: disable=wrong-import-position,import-error

PLAYBOOKS = os.path.join(HERE, 'playbooks')
NODES = ['gpu-01', 'gpu-02', 'gpu-03', 'gpu-04']
# A real scontrol show node -o line about gpu-03 (tests/unit/fixtures/slurm, with its .source.txt).
SHOW_GPU_03 = os.path.join(ROOT, 'tests', 'unit', 'fixtures', 'slurm', 'show-node_idle.txt')


@pytest.fixture(autouse=True, scope='module')
def requires_root():
    require_root()


class Cluster(SlurmCluster):
    """The running cluster plus an inventory of localhost to run slurm_node from."""

    def __init__(self, base, state_dir, env, reboots):
        super(Cluster, self).__init__(base, state_dir, env, reboots)
        self.inventory = os.path.join(base, 'inventory.json')
        with open(self.inventory, 'w', encoding='utf-8') as handle:
            json.dump({'all': {'hosts': {'localhost': {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}}}}, handle)

    def play(self, playbook, node, **extra):
        extra.update(node=node, slurm_conf=self.env['SLURM_CONF'])
        return run_playbook(os.path.join(PLAYBOOKS, playbook), self.inventory, '-e', json.dumps(extra))


@pytest.fixture(scope='module')
def cluster(tmp_path_factory):
    running = slurm_cluster_up(str(tmp_path_factory.mktemp('slurm-node')), NODES, Cluster)
    yield running
    slurm_sim.down(running.state_dir)
    assert slurm_sim.marked_processes(running.state_dir) == []


def test_drain_waits_for_the_job_is_idempotent_and_resumes(cluster):
    job = slurm_sim.submit_job(cluster.env, 'gpu-01', 10, name='train-llm')
    cluster.wait_job(job, ('RUNNING',))
    result = cluster.play('slurm_node_drain.yml', 'gpu-01')
    assert result.rc == 0, result.document

    check = result.task('Drain in check mode')['localhost']
    assert check['changed'] is True and 'would run update NodeName=gpu-01 State=DRAIN' in check['msg']
    assert check['cmd'][1:] == ['update', 'NodeName=gpu-01', 'State=DRAIN', 'Reason=gpufleet: driver upgrade']
    assert check['node']['state'] == 'MIXED' and check['node']['drain_state'] == 'none'
    assert check['jobs'] == [{'id': job, 'user': 'root', 'state': 'RUNNING', 'name': 'train-llm'}]
    assert check['waited'] == 0.0

    drain = result.task('Drain')['localhost']
    assert drain['changed'] is True and drain['drained_by_others'] is False
    # The check-mode task changed nothing: the real drain still found the node undrained, with its job.
    assert drain['previous']['state'] == 'MIXED' and drain['previous']['drain_state'] == 'none'
    assert drain['node']['state'] == 'IDLE+DRAIN' and drain['node']['drain_state'] == 'drained'
    assert drain['node']['reason'] == 'gpufleet: driver upgrade' and drain['node']['reason_user'] == 'root'
    assert re.match(r'^gpufleet: driver upgrade \[root@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\]$', drain['node']['Reason'])
    # It returned only once DRAINED, after the job that still ran when it started.
    assert drain['previous']['drain_state'] == 'none' and drain['jobs'] == [] and drain['waited'] >= 0
    assert slurm_sim.job_state(cluster.env, job) == 'COMPLETED'

    again = result.task('Drain again')['localhost']
    assert again['changed'] is False and again['cmd'] == []
    assert again['node']['reason'] == 'gpufleet: driver upgrade'

    read = result.task('Read the node')['localhost']
    assert read['changed'] is False and read['node']['state'] == 'IDLE+DRAIN' and read['drained_by_others'] is False

    resume = result.task('Resume')['localhost']
    assert resume['changed'] is True and resume['cmd'][1:] == ['update', 'NodeName=gpu-01', 'State=RESUME']
    assert resume['node']['state'] == 'IDLE' and resume['node']['responding'] is True and resume['node']['reason'] is None
    assert result.task('Resume again')['localhost']['changed'] is False
    assert cluster.node('gpu-01')['State'] == 'IDLE'


def test_admin_drain_is_left_alone_and_bad_names_fail_first(cluster):
    slurm_sim.scontrol(cluster.env, 'update', 'NodeName=gpu-02', 'State=DRAIN', 'Reason=admin: bad DIMM')
    canary = os.path.join(cluster.base, 'pwned')
    calls = os.path.join(cluster.base, 'recorder-calls')
    recorder = os.path.join(cluster.base, 'recorder')
    with open(recorder, 'w', encoding='utf-8') as handle:
        handle.write('#!/bin/sh\necho "$@" >> %s\n' % calls)
    os.chmod(recorder, 0o755)
    result = cluster.play('slurm_node_others.yml', 'gpu-02', canary=canary, recorder=recorder)

    drain = result.task('Drain a node drained by an admin')['localhost']
    assert drain['changed'] is False and drain['drained_by_others'] is True and drain['cmd'] == []
    assert drain['node']['reason'] == 'admin: bad DIMM' and "'admin: bad DIMM' set by others" in drain['msg']
    resume = result.task('Resume a node drained by an admin')['localhost']
    assert resume['changed'] is False and resume['drained_by_others'] is True
    info = cluster.node('gpu-02')
    assert info['State'] == 'IDLE+DRAIN' and info['Reason'].startswith('admin: bad DIMM [root@')

    bad = result.task('Drain a name with a semicolon')['localhost']
    assert bad['failed'] and bad['error'] == 'invalid_name' and bad['changed'] is False
    assert "invalid Slurm node name 'gpu-02; touch " in bad['msg']
    assert not os.path.exists(calls) and not os.path.exists(canary)

    unknown = result.task('Drain an unknown node')['localhost']
    assert unknown['failed'] and unknown['error'] == 'node_not_found' and unknown['changed'] is False
    assert unknown['msg'].endswith('Node gpu-99 not found')
    assert 'previous' not in unknown
    slurm_sim.scontrol(cluster.env, 'update', 'NodeName=gpu-02', 'State=RESUME')


def test_reboot_asap_with_nextstate_resume_completes(cluster):
    before = cluster.node('gpu-03')
    result = cluster.play('slurm_node_reboot.yml', 'gpu-03')
    assert result.rc == 0, result.document
    check = result.task('Reboot in check mode')['localhost']
    assert check['changed'] is True
    assert check['cmd'][1:] == ['reboot', 'ASAP', 'nextstate=RESUME', 'reason=gpufleet: kernel update', 'gpu-03']

    reboot = result.task('Reboot')['localhost']
    assert reboot['changed'] is True and reboot['previous']['state'] == 'IDLE'
    assert reboot['node']['state'] == 'IDLE' and reboot['node']['flags'] == [] and reboot['node']['responding'] is True
    assert reboot['node']['boot_time'] > before['BootTime'] == reboot['previous']['boot_time']
    assert cluster.rebooted() == ['gpu-03']


def test_timeout_while_draining_names_the_job_and_leaves_the_node_draining(cluster):
    job = slurm_sim.submit_job(cluster.env, 'gpu-04', 120, name='long-run')
    cluster.wait_job(job, ('RUNNING',))
    dead = os.path.join(cluster.base, 'dead-slurm.conf')
    with open(cluster.env['SLURM_CONF'], encoding='utf-8') as handle:
        conf = handle.read()
    # A port nobody listens on: what the clients see when slurmctld is down.
    conf = re.sub(r'(?m)^SlurmctldPort=.*$', 'SlurmctldPort=9', conf)
    conf = re.sub(r'(?m)^MessageTimeout=.*$', 'MessageTimeout=2', conf)
    with open(dead, 'w', encoding='utf-8') as handle:
        handle.write(conf)
    try:
        result = cluster.play('slurm_node_timeout.yml', 'gpu-04', dead_slurm_conf=dead)
        timeout = result.task('Drain with a short timeout')['localhost']
        assert timeout['failed'] and timeout['error'] == 'timeout' and timeout['changed'] is True
        assert 'gpu-04: not DRAINED after 3 s' in timeout['msg']
        assert 'jobs still running: %s (root, long-run, RUNNING)' % job in timeout['msg']
        assert timeout['node']['drain_state'] == 'draining'
        assert timeout['jobs'] == [{'id': job, 'user': 'root', 'state': 'RUNNING', 'name': 'long-run'}]
        # The module does not resume: the node stays draining and the job keeps running.
        assert cluster.node('gpu-04')['State'] == 'MIXED+DRAIN'
        assert slurm_sim.job_state(cluster.env, job) == 'RUNNING'

        dead_result = result.task('Drain against a controller that does not answer')['localhost']
        assert dead_result['failed'] and dead_result['error'] == 'controller_unreachable'
        assert 'Unable to contact slurm controller' in dead_result['msg']
    finally:
        slurm_sim.run_client(cluster.env, ['scancel', job], check=False)


def test_latin1_reason_hung_client_and_an_answer_about_another_node(cluster):
    # An admin whose terminal sends Latin-1: the reason reaches Slurm as bytes that are not UTF-8.
    slurm_sim.run_client(cluster.env, [b'scontrol', b'update', b'NodeName=gpu-02', b'State=DRAIN', b'Reason=Wartung L\xfcfter'])
    tools = Host(cluster.base, 'tools')
    pids = os.path.join(cluster.base, 'scontrol.pids')
    tools.tool('scontrol', {'args': ['show'], 'hang': 300, 'hang_child': True, 'pid_file': pids})
    hung = os.path.join(tools.bin, 'scontrol')
    liar = Host(cluster.base, 'liar').tool('scontrol', {'args': ['show', 'node'], 'stdout_file': SHOW_GPU_03}, {'args': [], 'rc': 0})
    try:
        result = cluster.play('slurm_node_odd.yml', 'gpu-02', hung_scontrol=hung, other_scontrol=os.path.join(liar.bin, 'scontrol'))

        read = result.task('Read a node with a Latin-1 reason')['localhost']
        assert not read.get('failed') and read['node']['reason'] == 'Wartung L\\xfcfter' and read['node']['state'] == 'IDLE+DRAIN'
        assert read['drained_by_others'] is True and read['ours'] is False
        drain = result.task('Drain a node with a Latin-1 reason')['localhost']
        assert drain['changed'] is False and drain['cmd'] == [] and drain['drained_by_others'] is True
        assert drain['msg'] == "gpu-02 is IDLE+DRAIN with reason 'Wartung L\\\\xfcfter' set by others; left alone (force_reason=true acts anyway)"

        stuck = result.task('Read through an scontrol that hangs')['localhost']
        assert stuck['failed'] and stuck['error'] == 'command_timeout'
        assert stuck['msg'] == 'gpu-02: %s show node -o gpu-02 did not finish within 3 s and was killed (with its process group)' % hung
        assert result.seconds('Read through an scontrol that hangs') < 3 + 10
        assert pids_alive(pids) == []

        other = result.task('Drain through an scontrol that answers about another node')['localhost']
        assert other['failed'] and other['error'] == 'wrong_node' and other['changed'] is False
        assert other['msg'] == 'scontrol show node gpu-02 answered about node gpu-03; not acting on it'
        # It read, and did nothing else: no update, no squeue.
        assert liar.calls('scontrol') == [['show', 'node', '-o', 'gpu-02']]
    finally:
        slurm_sim.scontrol(cluster.env, 'update', 'NodeName=gpu-02', 'State=RESUME')
    assert slurm_sim.node_reason(cluster.env, 'gpu-02') is None


def test_a_drain_requeues_the_job_whose_checkpoint_passed_and_waits_for_the_one_ahead(cluster):
    """Two jobs on gpu-01: one declares its checkpoint a few seconds after it started, passed when the drain comes (requeued:
    it restarts from it, Slurm counts the restart), one declares it an hour ahead (waited for: the drain times out and the node
    is put back as it was, that job named)."""
    # gpu-01 as the first test left it (resumed), or drained when that test did not run: in service either way.
    slurm_sim.run_client(cluster.env, ['scontrol', 'update', 'NodeName=gpu-01', 'State=RESUME'], check=False)
    now = datetime.datetime.now(datetime.timezone.utc)
    soon = now + datetime.timedelta(seconds=5)
    passed = slurm_sim.submit_job(cluster.env, 'gpu-01', 300, name='ckpt-passed', comment='gpufleet.io/checkpoint=%s' % soon.isoformat())
    ahead = slurm_sim.submit_job(cluster.env, 'gpu-01', 300, name='ckpt-ahead',
                                 comment='step 400 gpufleet.io/checkpoint=%s' % (now + datetime.timedelta(hours=1)).isoformat())
    try:
        cluster.wait_job(passed, ('RUNNING',))
        cluster.wait_job(ahead, ('RUNNING',))
        time.sleep(max(0.0, (soon - datetime.datetime.now(datetime.timezone.utc)).total_seconds()) + 1)
        result = cluster.play('slurm_node_requeue.yml', 'gpu-01')
        assert result.rc == 0, result.document
        drain = result.task('Drain, requeueing checkpointed jobs')['localhost']
        assert [job['id'] for job in drain['requeued']] == [passed] and drain['requeue_refused'] == [], drain
        record = drain['requeued'][0]
        assert record['nodes'] == 'gpu-01' and record['gpus'] == 0 and record['checkpoint'] and record['at'] >= record['checkpoint']
        assert drain['outcome'] == 'deferred' and 'jobs still running: %s (root, ckpt-ahead, RUNNING))' % ahead in drain['msg'], drain
        assert slurm_sim.job_info(cluster.env, passed)['Restarts'] == '1'
        assert slurm_sim.job_info(cluster.env, ahead)['Restarts'] == '0' and slurm_sim.job_state(cluster.env, ahead) == 'RUNNING'
    finally:
        slurm_sim.run_client(cluster.env, ['scancel', passed, ahead], check=False)
