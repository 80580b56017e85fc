# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/drift_report.yml is read-only by construction and pays one task per GPU node."""

import os

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(ROOT, 'playbooks', 'drift_report.yml')
# Every module the playbook may use: none of them changes a node.
READ_ONLY = {'gpufleet.lifecycle.drift_check', 'ansible.builtin.set_fact', 'ansible.builtin.debug', 'ansible.builtin.set_stats',
             'ansible.builtin.fail'}
TASK_KEYWORDS = {'name', 'register', 'run_once', 'delegate_to', 'delegate_facts', 'vars', 'when', 'block', 'check_mode'}


def plays():
    with open(PLAYBOOK, encoding='utf-8') as handle:
        return yaml.safe_load(handle)


def tasks(items):
    for task in items:
        if 'block' in task:
            yield from tasks(task['block'])
        else:
            yield task


def action(task):
    modules = [key for key in task if key not in TASK_KEYWORDS]
    assert len(modules) == 1, task
    return modules[0]


def test_every_play_runs_in_check_mode_and_uses_only_read_only_modules():
    for play in plays():
        assert play.get('check_mode') is True, play['name']
        assert not set(play) & {'roles', 'pre_tasks', 'post_tasks', 'handlers'}, play['name']
        for task in tasks(play['tasks']):
            assert task.get('check_mode', True) is True, task['name']
            assert action(task) in READ_ONLY, (task['name'], action(task))


def test_one_task_per_gpu_node_and_the_rest_once():
    nodes = plays()[0]
    per_host = [task['name'] for task in tasks(nodes['tasks']) if not task.get('run_once')]
    assert per_host == ['Compare the stack with the pin']
    assert nodes['gather_facts'] is False
    verdict = plays()[1]
    assert verdict['hosts'] == 'localhost'
    assert [action(task) for task in tasks(verdict['tasks'])] == ['ansible.builtin.debug', 'ansible.builtin.set_stats', 'ansible.builtin.fail']
