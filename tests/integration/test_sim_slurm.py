# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulated fleet's real Slurm (tests/sim/slurm): drain, resume and reboot as on metal.

One module-scoped cluster of three nodes (munged, slurmctld, three slurmd) in a temporary state
directory; it is torn down at the end and nothing it started may survive.
"""

import os
import time

import pytest

from conftest import require_root, slurm_cluster_up

# slurm_sim (tests/sim/slurm) is on sys.path through conftest.

import slurm_sim  # noqa: E402  pylint: disable=wrong-import-position,import-error
import reboot_program  # noqa: E402  pylint: disable=wrong-import-position,import-error

NODES = ['gpu-01', 'gpu-02', 'gpu-03']


@pytest.fixture(autouse=True, scope='module')
def requires_root():
    require_root()


@pytest.fixture(scope='module')
def cluster(tmp_path_factory):
    running = slurm_cluster_up(str(tmp_path_factory.mktemp('slurm')), NODES)
    state_dir = running.state_dir
    yield running
    record = slurm_sim.read_record(state_dir)
    daemons = [record['munged'], record['slurmctld']] + list(record['slurmd'].values())
    slurm_sim.down(state_dir)
    assert slurm_sim.marked_processes(state_dir) == []
    assert [daemon for daemon in daemons if slurm_sim.alive(daemon)] == []
    assert os.path.exists(os.path.join(state_dir, 'log', 'slurmctld.log'))


def test_every_node_idle_with_eight_gpus(cluster):
    states = slurm_sim.sinfo_states(cluster.env)
    assert states == dict((node, 'idle') for node in NODES)
    for node in NODES:
        info = slurm_sim.node_state(cluster.env, node)
        assert info['State'] == 'IDLE'
        assert info['Gres'] == 'gpu:8'
        assert info['Partitions'] == 'gpu'


def test_up_again_changes_nothing(cluster):
    before = slurm_sim.read_record(cluster.state_dir)
    start = time.time()
    env = slurm_sim.up(cluster.state_dir, NODES, gpus=8)
    assert time.time() - start < 2
    assert env == cluster.env
    after = slurm_sim.read_record(cluster.state_dir)
    for name in ('munged', 'slurmctld', 'slurmd', 'ports'):
        assert after[name] == before[name]


def test_drain_waits_for_the_job_and_resume_returns_to_idle(cluster):
    job = slurm_sim.submit_job(cluster.env, 'gpu-01', 4)
    cluster.wait_job(job, ('RUNNING',))
    assert cluster.state('gpu-01') in ('MIXED', 'ALLOCATED')
    cluster.scontrol('update', 'NodeName=gpu-01', 'State=DRAIN', 'Reason=gpufleet: test')
    # DRAINING: the job keeps running, nothing new is scheduled there.
    assert cluster.state('gpu-01') in ('MIXED+DRAIN', 'ALLOCATED+DRAIN')
    assert slurm_sim.sinfo_states(cluster.env)['gpu-01'] == 'draining'
    assert slurm_sim.node_reason(cluster.env, 'gpu-01') == 'gpufleet: test'
    assert slurm_sim.job_state(cluster.env, job) == 'RUNNING'
    # DRAINED once the job is done; the reason stays.
    cluster.wait_state('gpu-01', ('IDLE+DRAIN',), timeout=20)
    assert slurm_sim.job_state(cluster.env, job) == 'COMPLETED'
    assert slurm_sim.sinfo_states(cluster.env)['gpu-01'] == 'drained'
    assert slurm_sim.node_reason(cluster.env, 'gpu-01') == 'gpufleet: test'
    # RESUME (Slurm briefly shows IDLE+NOT_RESPONDING while it pings the node).
    cluster.scontrol('update', 'NodeName=gpu-01', 'State=RESUME')
    cluster.wait_state('gpu-01', ('IDLE',), timeout=15)
    assert slurm_sim.node_reason(cluster.env, 'gpu-01') is None
    assert slurm_sim.sinfo_states(cluster.env)['gpu-01'] == 'idle'


def test_reboot_asap_runs_the_reboot_program_after_the_job_and_resumes(cluster):
    slurmd_before = slurm_sim.read_record(cluster.state_dir)['slurmd']['gpu-02']
    boot_before = slurm_sim.node_state(cluster.env, 'gpu-02')['BootTime']
    job = slurm_sim.submit_job(cluster.env, 'gpu-02', 3, exclusive=True)
    cluster.wait_job(job, ('RUNNING',))
    cluster.scontrol('reboot', 'ASAP', 'nextstate=RESUME', 'reason=gpufleet: driver update', 'gpu-02')
    assert cluster.state('gpu-02') == 'ALLOCATED+DRAIN+REBOOT_REQUESTED'
    assert slurm_sim.node_reason(cluster.env, 'gpu-02') == 'gpufleet: driver update'
    assert cluster.rebooted() == []
    seen = cluster.wait_state('gpu-02', ('IDLE',), timeout=40)
    assert slurm_sim.job_state(cluster.env, job) == 'COMPLETED'
    # While the node "reboots" its slurmd is gone: DOWN+DRAIN+REBOOT_ISSUED (sinfo: reboot^).
    assert 'DOWN+DRAIN+REBOOT_ISSUED' in seen, seen
    assert slurm_sim.node_state(cluster.env, 'gpu-02')['BootTime'] > boot_before
    assert cluster.rebooted() == ['gpu-02']
    slurmd_after = slurm_sim.read_record(cluster.state_dir)['slurmd']['gpu-02']
    assert slurmd_after['pid'] != slurmd_before['pid']
    assert not slurm_sim.alive(slurmd_before)
    assert slurm_sim.alive(slurmd_after)
    assert '-b' in slurm_sim._cmdline(slurmd_after['pid'])  # pylint: disable=protected-access
    assert slurm_sim.node_reason(cluster.env, 'gpu-02') is None
    # The rebooted node takes work again; the others never noticed.
    job = slurm_sim.submit_job(cluster.env, 'gpu-02', 0)
    cluster.wait_job(job, ('COMPLETED',))
    assert slurm_sim.sinfo_states(cluster.env)['gpu-03'] == 'idle'
    with open(os.path.join(cluster.state_dir, 'log', 'reboot-gpu-02.log'), encoding='utf-8') as handle:
        assert 'started slurmd -b for gpu-02' in handle.read()


@pytest.mark.parametrize('name', ['gpu-01; touch /tmp/pwned', '$(id)', 'gpu-[01-02]', 'a b', '', '-N', 'gpu-01\n'])
def test_node_names_with_metacharacters_are_rejected(cluster, tmp_path, name):
    with pytest.raises(ValueError):
        slurm_sim.submit_job(cluster.env, name, 1)
    with pytest.raises(ValueError):
        slurm_sim.node_state(cluster.env, name)
    state_dir = str(tmp_path / 'never')
    with pytest.raises(ValueError):
        slurm_sim.up(state_dir, ['gpu-01', name])
    assert not os.path.exists(state_dir)
    assert not os.path.exists('/tmp/pwned')


def test_reboot_program_reads_the_node_from_the_slurmd_command_line():
    assert reboot_program.node_from_cmdline(['/usr/sbin/slurmd', '-D', '-N', 'gpu-07', '-f', 'x']) == 'gpu-07'
    assert reboot_program.node_from_cmdline(['slurmd', '-b', '-Ngpu-08']) == 'gpu-08'
    assert reboot_program.node_from_cmdline(['slurmctld', '-N', 'gpu-07']) is None
    assert reboot_program.node_from_cmdline(['slurmd', '-D']) is None


def test_scontrol_one_line_output_keeps_values_with_spaces():
    line = ('NodeName=gpu-01 Arch=x86_64 Gres=gpu:8 OS=Linux 6.1.0-26-amd64 #1 SMP PREEMPT_DYNAMIC Debian  '
            'RealMemory=1 State=IDLE+DRAIN Partitions=gpu Reason=gpufleet: test [root@2024-11-21T20:21:37]')
    parsed = slurm_sim.parse_scontrol_oneliner(line)
    assert parsed['OS'] == 'Linux 6.1.0-26-amd64 #1 SMP PREEMPT_DYNAMIC Debian'
    assert parsed['State'] == 'IDLE+DRAIN'
    assert parsed['Reason'] == 'gpufleet: test [root@2024-11-21T20:21:37]'
