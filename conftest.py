"""Make the checkout importable as ``ansible_collections.gpufleet.lifecycle`` for pytest.

The collection root is this folder; Python needs it under an
``ansible_collections/<namespace>/<name>`` path.  A symlink inside the ignored
``build/`` folder provides that path without asking anyone to clone into a
special location.
"""
import os
import resource
import sys

import pytest

_ROOT = os.path.dirname(os.path.abspath(__file__))
_COLLECTIONS = os.path.join(_ROOT, 'build', 'collections')
_LINK = os.path.join(_COLLECTIONS, 'ansible_collections', 'gpufleet', 'lifecycle')

if not os.path.islink(_LINK):
    os.makedirs(os.path.dirname(_LINK), exist_ok=True)
    os.symlink(os.path.relpath(_ROOT, os.path.dirname(_LINK)), _LINK)
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)

collect_ignore = ['build', 'tests/output', '.venv', '.venv-216']

# Where the time goes: with GPUFLEET_TEST_TIMES=FILE (hacking/run_tests.sh sets it per suite), the session writes each
# test's seconds (setup + call + teardown) and the CPU seconds its process and the processes it waited for (ansible-playbook
# and what that ran on the controller) used, to FILE as "seconds<TAB>cpu seconds<TAB>nodeid" lines, slowest first.  A
# module-scoped fixture counts in its first test.  Under pytest-xdist the controller writes it, from every worker's reports.
_TIMES = {}
_CPU = {}


def _cpu_seconds():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    item.gpufleet_cpu_start = _cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == 'teardown' and hasattr(item, 'gpufleet_cpu_start'):
        outcome.get_result().user_properties.append(('cpu_seconds', _cpu_seconds() - item.gpufleet_cpu_start))


def pytest_runtest_logreport(report):
    _TIMES[report.nodeid] = _TIMES.get(report.nodeid, 0.0) + report.duration
    for name, value in report.user_properties:
        if name == 'cpu_seconds':
            _CPU[report.nodeid] = value


def pytest_sessionfinish(session):
    path = os.environ.get('GPUFLEET_TEST_TIMES')
    if not path or hasattr(session.config, 'workerinput'):
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as handle:
        for nodeid, seconds in sorted(_TIMES.items(), key=lambda item: (-item[1], item[0])):
            handle.write('%.1f\t%.1f\t%s\n' % (seconds, _CPU.get(nodeid, 0.0), nodeid))
