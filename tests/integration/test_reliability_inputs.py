# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The bad-input half of the fault suite (issue 16): hostile input and secrets, through the real entry points.

Cheap by construction: stand-in hosts (local connection, stand-in tools first on PATH, see conftest.py) and one
``ansible-playbook`` run per group of scenarios, each host of the run one scenario:

* ``drift_report`` reads one malformed or hostile pin file per host (``gpufleet_pin_file`` as a host variable) and
  hostile ``nvidia-smi -q -x`` output on further hosts;
* ``gpu_stack`` gets hostile versions on hosts whose apt-get, apt-cache and dpkg are recording stand-ins;
* ``dcgm_diag`` gets deeply nested, huge and wrongly typed ``dcgmi diag -j`` documents, a hung and a crashing dcgmi;
* ``node_drain`` (Slurm) gets hostile node names with a recording ``scontrol``;
* the Kubernetes token of a kubeconfig goes through ``node_drain`` at ``-vvvv`` with the fleet report and a log file.

Every scenario records itself with the ``reliability`` fixture (tests/integration/reliability.py) and asserts: a clear
error naming the host, the file or variable and the field, no traceback, nothing changed (the tools that change a node
were never called) and no ``MARKER*`` file from a value a shell or an option parser would have interpreted.
"""

import base64
import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import Fleet, ROOT, ansible_environment, pids_alive, real, run_playbook

DRIFT_REPORT = os.path.join(ROOT, 'playbooks', 'drift_report.yml')
PLAYBOOKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'playbooks')
T4 = real('nvidia-smi-xml', 'telegraf_tesla-t4_515.105.01_v11.xml')
A100 = real('nvidia-smi-xml', 'telegraf_a100-sxm4-80gb_535.54.03_v12.xml')
GOOD_PIN = 'DRIVER_VERSION=535.54.03\n'
# A dpkg database listing in the dpkg-query -W -f '${Package}\t${Version}\t${db:Status-Abbrev}\n' form.
LISTING = ''.join('%s\t%s\t%s\n' % row for row in [
    ('bash', '5.2.15-2+b7', 'ii '),
    ('nvidia-driver-535', '535.129.03-0ubuntu0.22.04.1', 'hi '),
    ('libnvidia-compute-535', '535.129.03-0ubuntu0.22.04.1', 'hi '),
    ('nvidia-container-toolkit', '1.12.0-1', 'ii '),
])
# The hostile values: each would create a MARKER<n> file if a shell or an option parser ever interpreted it.  They are
# relative (a path would make the messages depend on the temporary folder): marker_folders() lists where they would land.
SUBSTITUTION = '$(touch MARKER1)'
SEMICOLON = '535.54.03;touch MARKER2'
BACKTICKS = '`touch MARKER4`'
OPTION = '--output=MARKER3'


def marker_folders(base, fleet):
    """Where a relative MARKER file would be created: the run's folder, each host's folders, the checkout (the
    ansible-playbook working directory), the home folder and ansible's temporary folder."""
    folders = [base, ROOT, os.path.expanduser('~'), os.path.join(ROOT, 'build', 'ansible-tmp')]
    for host in fleet.hosts.values():
        folders += [host.bin, os.path.dirname(host.bin)]
    return folders


def _read(path, mode='r'):
    with open(path, mode) as handle:  # pylint: disable=unspecified-encoding
        return handle.read()


def _output(result):
    """Everything a run printed: the JSON document and stderr."""
    return json.dumps(result.document) + result.stderr


# ---------------------------------------------------------------------------------------------------- pin files
# host -> (file name, content (str, bytes or a callable(path) that makes the file), the field the message names,
#          the text the message holds, the scenario's name)

def _huge(path):
    with open(path, 'wb') as handle:
        handle.truncate(50 * 1024 * 1024)


def _fifo(path):
    os.mkfifo(path)


def _directory(path):
    os.mkdir(path)


PINS = {
    'pin-bad-yaml': ('baseline.yml', 'driver: [535.54.03\ndcgm: 3.3.1\n', 'line 2', 'not valid YAML',
                     'pin file: YAML that does not parse'),
    'pin-binary': ('baseline.yml', b'\x7fELF\x02\x01\x01\x00' + bytes(range(256)), 'line 2', "not UTF-8 text (byte b'\\x80' at offset 136)",
                   'pin file: a binary file'),
    'pin-nul': ('baseline.env', 'DRIVER_VERSION=535.54.03\n\x00DCGM_VERSION=3.3.1\n', 'line 2', 'contains a NUL byte',
                'pin file: text with a NUL byte'),
    'pin-huge': ('baseline.env', _huge, 'baseline.env', 'is 52428800 bytes; a pin file has at most 262144',
                 'pin file: 50 MiB (refused before it is read)'),
    'pin-fifo': ('baseline.env', _fifo, 'baseline.env', 'is a FIFO, not a pin file', 'pin file: a FIFO (a plain read would block)'),
    'pin-directory': ('baseline.env', _directory, 'baseline.env', 'is a directory, not a pin file', 'pin file: a directory'),
    'pin-empty': ('baseline.env', '', 'baseline.env', 'pins nothing (no component has a version)',
                  'pin file: empty (a truncated checkout)'),
    'pin-duplicate-yaml': ('baseline.yml', 'driver: 535.54.03\ndcgm: 3.3.1\ndriver: 550.127.05\n', 'line 3',
                           'component driver appears twice', 'pin file: a YAML key twice'),
    'pin-duplicate-env': ('baseline.env', 'DRIVER_VERSION=535.54.03\nDCGM_VERSION=3.3.1\nDRIVER_VERSION=550.127.05\n', 'line 3',
                          'DRIVER_VERSION repeats line 1', 'pin file: a baseline.env key twice'),
    'pin-unknown-env': ('baseline.env', 'DRIVER_VERSION=535.54.03\nDRIVR_VERSION=535\n', 'line 2',
                        'unknown key DRIVR_VERSION; valid keys: KERNEL_VERSION, DRIVER_VERSION, CUDA_DRIVER_VERSION, GSP_FIRMWARE_VERSION, '
                        'VBIOS_VERSION, FABRIC_MANAGER_VERSION, CONTAINER_TOOLKIT_VERSION, DCGM_VERSION, CUDA_TOOLKIT_VERSION '
                        '(prefix PREV_ for the previous pin)', 'pin file: an unknown baseline.env key'),
    'pin-unknown-yaml': ('baseline.yml', 'driver: 535.54.03\nnccl: 2.21.5\n', 'line 2', 'unknown component nccl; valid components: kernel',
                         'pin file: an unknown YAML component'),
    'pin-substitution': ('baseline.env', 'DRIVER_VERSION="%s"\n' % SUBSTITUTION, 'line 1', 'DRIVER_VERSION: ',
                         'pin version: $(command substitution)'),
    'pin-semicolon': ('baseline.env', 'DRIVER_VERSION="%s"\n' % SEMICOLON, 'line 1', 'DRIVER_VERSION: ',
                      'pin version: ;a second command'),
    'pin-backticks': ('baseline.yml', 'driver: "%s"\n' % BACKTICKS, 'line 1', 'driver: ', 'pin version: `backticks`'),
    'pin-newline': ('baseline.yml', 'driver: "535.54.03\\n--allow-downgrades"\n', 'line 1', "driver: '535.54.03\\n--allow-downgrades' is not a version",
                    'pin version: a newline and an option'),
    'pin-dash-env': ('baseline.env', 'DRIVER_VERSION=--install-recommends\n', 'line 1',
                     "DRIVER_VERSION: '--install-recommends' starts with a dash (it would read as a command option)",
                     'pin version: --install-recommends'),
    'pin-dash-o': ('baseline.yml', 'dcgm: "-oAPT::Get::AllowUnauthenticated=true"\n', 'line 1',
                   "dcgm: '-oAPT::Get::AllowUnauthenticated=true' starts with a dash", 'pin version: -oAPT::... (an apt option)'),
    'pin-dash-output': ('baseline.yml', 'container_toolkit: "%s"\n' % OPTION, 'line 1', 'container_toolkit: ',
                        'pin version: --output=FILE'),
    'pin-deep-yaml': ('baseline.yml', 'driver: ' + '[' * 5000 + ']' * 5000 + '\n', 'baseline.yml',
                      'not valid YAML for a pin: collections nested too deeply', 'pin file: YAML nested 5000 deep'),
    'pin-alias-bomb': ('baseline.yml', 'a: &a ["x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n'
                       'c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ndriver: *d\n', 'line 1',
                       'unknown component a', 'pin file: YAML alias expansion ("billion laughs")'),
}


# ---------------------------------------------------------------------------------------------------- nvidia-smi output

BILLION_LAUGHS = ('<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [\n <!ENTITY lol "lol">\n'
                  ' <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">\n'
                  ' <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">\n'
                  ' <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">\n]>\n'
                  '<nvidia_smi_log><driver_version>&lol4;</driver_version></nvidia_smi_log>\n')


def _smi_with_doctype(doctype, entity_in=None):
    text = _read(A100)
    line = [each for each in text.splitlines() if each.startswith('<!DOCTYPE')][0]
    text = text.replace(line, doctype, 1)
    if entity_in:
        text = text.replace('<driver_version>535.54.03</driver_version>', '<driver_version>%s</driver_version>' % entity_in, 1)
    return text


# host -> (response of the stand-in nvidia-smi, the text the message holds, the scenario's name)
SMI = {
    'smi-truncated': (lambda base: {'args': ['-q', '-x'], 'stdout': _read(T4)[:len(_read(T4)) // 2]},
                      'malformed or truncated nvidia-smi XML', 'nvidia-smi: XML cut in half'),
    'smi-oversized': (lambda base: {'args': ['-q', '-x'], 'stdout_file': _oversized(base)},
                      'characters long; an nvidia-smi -q -x document has at most 16777216', 'nvidia-smi: 24 MiB of XML'),
    'smi-utf16': (lambda base: {'args': ['-q', '-x'], 'stdout_hex': _read(T4).encode('utf-16').hex()},
                  'not an nvidia-smi XML document', 'nvidia-smi: output not UTF-8 (UTF-16)'),
    'smi-billion-laughs': (lambda base: {'args': ['-q', '-x'], 'stdout': BILLION_LAUGHS},
                           'declares XML entities (<!ENTITY>)', 'nvidia-smi: XML entity expansion ("billion laughs")'),
    'smi-external-dtd': (lambda base: {'args': ['-q', '-x'], 'stdout': _smi_with_doctype('<!DOCTYPE nvidia_smi_log SYSTEM "file:///etc/passwd">')},
                         "document type declaration '<!DOCTYPE nvidia_smi_log SYSTEM \"file:///etc/passwd\"' is not nvidia-smi's",
                         'nvidia-smi: DOCTYPE SYSTEM "file:///etc/passwd"'),
    'smi-external-entity': (lambda base: {'args': ['-q', '-x'], 'stdout': _smi_with_doctype(
        '<!DOCTYPE nvidia_smi_log [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>', '&xxe;')},
        'declares XML entities (<!ENTITY>)', 'nvidia-smi: external entity (XXE) reading /etc/passwd'),
    'smi-signal': (lambda base: {'args': ['-q', '-x'], 'stdout': '<?xml version="1.0" ?>\n', 'signal': int(signal.SIGSEGV)},
                   'nvidia-smi was killed by signal 11 (SIGSEGV): <?xml version="1.0" ?>', 'nvidia-smi: dies by a signal (SIGSEGV)'),
}


def _oversized(base):
    path = os.path.join(base, 'oversized.xml')
    gpu = _read(A100).split('<gpu ', 1)[1].split('</gpu>', 1)[0]
    copies = 24 * 1024 * 1024 // len(gpu) + 1
    with open(path, 'w', encoding='utf-8') as handle:
        handle.write('<?xml version="1.0" ?>\n<nvidia_smi_log>\n')
        for dummy in range(copies):
            handle.write('<gpu ' + gpu + '</gpu>\n')
        handle.write('</nvidia_smi_log>\n')
    return path


@pytest.fixture(scope='module')
def drift_run(tmp_path_factory):
    """One drift_report run: a hostile pin file per pin-* host, hostile nvidia-smi output per smi-* host (good pin)."""
    base = str(tmp_path_factory.mktemp('hostile-drift'))
    fleet = Fleet(os.path.join(base, 'hosts'))
    os.makedirs(fleet.base)
    pins = os.path.join(base, 'pins')
    os.makedirs(pins)
    good = os.path.join(pins, 'good.env')
    with open(good, 'w', encoding='utf-8') as handle:
        handle.write(GOOD_PIN)
    files = {}
    for host, (name, content, dummy, dummy, dummy) in PINS.items():
        os.makedirs(os.path.join(pins, host))
        path = os.path.join(pins, host, name)
        if callable(content):
            content(path)
        else:
            with open(path, 'wb') as handle:
                handle.write(content.encode('utf-8').replace(b'{dir}', base.encode()) if isinstance(content, str) else content)
        files[host] = path
        fleet.host(host).tool('nvidia-smi', {'args': ['-q', '-x'], 'stdout_file': T4})
        fleet.hosts[host].vars['gpufleet_pin_file'] = path
    for host, (response, dummy, dummy) in SMI.items():
        fleet.host(host).tool('nvidia-smi', response(base))
        fleet.hosts[host].vars['gpufleet_pin_file'] = good
    result = run_playbook(DRIFT_REPORT, fleet.inventory(), '--check', '--diff')
    return {'base': base, 'fleet': fleet, 'files': files, 'result': result, 'outcome': result.task('Compare the stack with the pin')}


@pytest.mark.parametrize('host', sorted(PINS))
def test_a_hostile_pin_file_is_refused_naming_host_file_and_line(drift_run, reliability, host):
    name, dummy, field, text, scenario_name = PINS[host]
    scenario = reliability.scenario('hostile input', scenario_name, injected='drift_report, gpufleet_pin_file %s' % name)
    outcome = drift_run['outcome'][host]
    path = drift_run['files'][host]
    assert outcome['failed'], outcome
    message = outcome['msg']
    assert message.startswith('%s: %s' % (host, path)), message
    assert text.replace('{dir}', drift_run['base']) in message, message
    reliability.check_clear_error(message + drift_run['result'].stderr, host, path, field)
    for folder in marker_folders(drift_run['base'], drift_run['fleet']):
        reliability.check_no_markers(folder)
    assert drift_run['result'].rc != 0
    assert 'ansible_facts' not in outcome  # refused before the node was even read
    assert drift_run['fleet'].hosts[host].calls('nvidia-smi') == []
    scenario.observed('refused before the node is read: %s' % message.split(': ', 2)[2].replace(drift_run['base'], 'DIR')[:160])


@pytest.mark.parametrize('host', sorted(SMI))
def test_hostile_nvidia_smi_output_makes_the_node_broken_not_a_reading(drift_run, reliability, host):
    dummy, text, scenario_name = SMI[host]
    scenario = reliability.scenario('hostile input', scenario_name, injected='drift_report, stand-in nvidia-smi -q -x')
    outcome = drift_run['outcome'][host]
    assert outcome['status'] == 'broken' and not outcome['changed'], outcome
    facts = outcome['ansible_facts']['gpufleet']
    assert facts['driver_version'] is None and facts['gpus'] == []
    warning = outcome['warnings'][0]
    assert warning.startswith('%s is broken, not compared with the pin: node is broken (' % host), warning
    assert text in warning, warning
    reliability.check_clear_error(warning + drift_run['result'].stderr, host, 'nvidia-smi')
    everything = _output(drift_run['result'])
    assert 'root:x:0:0' not in everything and 'lollollol' not in everything
    assert len(everything) < 4 * 1024 * 1024  # the oversized output is not carried into the results
    summary = drift_run['result'].task('Print the summary')['localhost']['msg']
    assert host in summary['broken'] and sorted(summary['not_reported']) == sorted(PINS)
    scenario.observed('node reported broken (%s), not compared: %s' % (facts['health_reason'], facts['health_message'][:160]))


# ---------------------------------------------------------------------------------------------------- gpu_stack: versions that reach apt

STACK_PLAY = """---
- name: Converge to the pin
  hosts: all
  gather_facts: false
  tasks:
    - name: Apply the pin
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.gpu_stack
"""
# host -> (gpu_stack_pin, the field the message names, the text it holds, the scenario's name)
STACK = {
    'stack-dash': ({'driver': '--install-recommends', 'dcgm': '4.1.0'}, 'gpu_stack_pin',
                   "'--install-recommends' starts with a dash", 'gpu_stack_pin: driver --install-recommends (apt option)'),
    'stack-dash-o': ({'driver': '580.65.06', 'fabric_manager': '580.65.06', 'dcgm': '-oDpkg::Options::=--force-confnew'}, 'gpu_stack_pin',
                     "'-oDpkg::Options::=--force-confnew' starts with a dash", 'gpu_stack_pin: dcgm -oDpkg::Options::=... (apt option)'),
    'stack-substitution': ({'driver': '580.65.06 ' + SUBSTITUTION}, 'gpu_stack_pin', 'is not a version',
                           'gpu_stack_pin: driver with a space and $(command substitution)'),
    'stack-newline': ({'container_toolkit': '1.17.0\n' + OPTION}, 'gpu_stack_pin', 'is not a version',
                      'gpu_stack_pin: container_toolkit with a newline and --output=FILE'),
}
NODE_CHANGING_TOOLS = ('apt-get', 'apt-cache', 'apt-mark', 'dpkg', 'dpkg-query', 'nvidia-smi', 'modprobe', 'systemctl')


@pytest.fixture(scope='module')
def stack_run(tmp_path_factory):
    base = str(tmp_path_factory.mktemp('hostile-stack'))
    fleet = Fleet(os.path.join(base, 'hosts'))
    os.makedirs(fleet.base)
    for host, (pin, dummy, dummy, dummy) in STACK.items():
        node = fleet.host(host)
        for tool in NODE_CHANGING_TOOLS:
            node.tool(tool, {'args': [], 'stdout': ''})
        node.vars['gpu_stack_pin'] = json.loads(json.dumps(pin).replace('{dir}', base))
    playbook = os.path.join(base, 'stack.yml')
    with open(playbook, 'w', encoding='utf-8') as handle:
        handle.write(STACK_PLAY)
    result = run_playbook(playbook, fleet.inventory())
    return {'base': base, 'fleet': fleet, 'result': result}


@pytest.mark.parametrize('host', sorted(STACK))
def test_a_hostile_version_never_reaches_the_package_manager(stack_run, reliability, host):
    pin, field, text, scenario_name = STACK[host]
    scenario = reliability.scenario('hostile input', scenario_name, injected='gpu_stack role, gpu_stack_pin %s' % json.dumps(pin))
    result = stack_run['result']
    failed = [outcome for play in result.document['plays'] for task in play['tasks']
              for name, outcome in task['hosts'].items() if name == host and outcome.get('failed')]
    assert len(failed) == 1, result.document
    message = failed[0]['msg']
    assert message.startswith('%s: %s: pin component ' % (host, field)) and text in message, message
    reliability.check_clear_error(message + result.stderr, host, field)
    assert result.stats[host]['changed'] == 0
    node = stack_run['fleet'].hosts[host]
    assert dict((tool, node.calls(tool)) for tool in NODE_CHANGING_TOOLS) == dict((tool, []) for tool in NODE_CHANGING_TOOLS)
    for folder in marker_folders(stack_run['base'], stack_run['fleet']):
        reliability.check_no_markers(folder)
    scenario.observed('refused by the pin reader before any task reached the node (no apt, dpkg or nvidia-smi call): %s'
                      % message.split(': ', 1)[1].replace(stack_run['base'], 'DIR')[:160])


# ---------------------------------------------------------------------------------------------------- dcgmi diag -j

DCGM4_FAIL = 'dcgmi-diag-r1-json_dcgm4.2.3_580.82.09_gb10-dgx-spark_software-fail.json'
DCGM_LIMITS = os.path.join(PLAYBOOKS, 'dcgm_diag_limits.yml')


def _dcgm_wrong_types():
    document = json.loads(_read(real('dcgmi', DCGM4_FAIL)))
    document['DCGM Diagnostic']['test_categories'] = 'Deployment'
    return json.dumps(document)


def _dcgm_huge(base):
    path = os.path.join(base, 'huge.json')
    document = json.loads(_read(real('dcgmi', DCGM4_FAIL)))
    document['padding'] = ['x' * 1000] * 40000
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump(document, handle)
    return path


# host -> (response of the stand-in dcgmi, the reason, the text its message holds, the scenario's name)
DCGM = {
    'dcgm-deep': (lambda base: {'args': ['diag'], 'stdout': '{"DCGM Diagnostic": ' + '[' * 100000 + ']' * 100000 + '}', 'rc': 0},
                  'unreadable', 'nested too deeply', 'dcgmi: JSON nested 100000 deep'),
    'dcgm-huge': (lambda base: {'args': ['diag'], 'stdout_file': _dcgm_huge(base), 'rc': 226},
                  None, 'Persistence mode for GPU 0 is disabled', 'dcgmi: a 40 MB document'),
    'dcgm-wrong-types': (lambda base: {'args': ['diag'], 'stdout': _dcgm_wrong_types(), 'rc': 226},
                         'diag_failed', 'test_categories', 'dcgmi: JSON of the wrong types'),
    'dcgm-signal': (lambda base: {'args': ['diag'], 'stdout': '{"DCGM Diagnostic": {', 'signal': int(signal.SIGKILL)},
                    'dcgmi_failed', 'killed by signal 9 (SIGKILL)', 'dcgmi: dies by a signal (SIGKILL)'),
}


@pytest.fixture(scope='module')
def dcgm_run(tmp_path_factory):
    base = str(tmp_path_factory.mktemp('hostile-dcgm'))
    fleet = Fleet(os.path.join(base, 'hosts'))
    os.makedirs(fleet.base)
    for host, (response, dummy, dummy, dummy) in DCGM.items():
        fleet.host(host).tool('dcgmi', response(base))
    result = run_playbook(DCGM_LIMITS, fleet.inventory())
    return {'base': base, 'fleet': fleet, 'result': result, 'outcome': result.task('Level 1 diagnostic with a short process limit')}


@pytest.mark.parametrize('host', sorted(DCGM))
def test_hostile_dcgmi_output_is_a_failed_diagnostic_not_a_pass(dcgm_run, reliability, host):
    dummy, reason, text, scenario_name = DCGM[host]
    scenario = reliability.scenario('hostile input', scenario_name, injected='dcgm_diag level 1, stand-in dcgmi diag -r 1 -j')
    outcome = dcgm_run['outcome'][host]
    assert outcome['failed'] and outcome.get('passed') is not True, outcome
    assert outcome.get('reason') == reason and text in outcome['msg'], outcome['msg']
    reliability.check_clear_error(json.dumps({host: outcome['msg']}) + dcgm_run['result'].stderr, host, 'diag')
    assert len(json.dumps(outcome)) < 4 * 1024 * 1024
    scenario.observed('diagnostic failed (%s): %s' % (reason or 'a failed test', outcome['msg'].replace(dcgm_run['fleet'].hosts[host].bin, 'BIN')[:160]))


# ---------------------------------------------------------------------------------------------------- node names that reach scontrol

DRAIN_PLAY = os.path.join(PLAYBOOKS, 'node_drain_run.yml')
# host -> (node name, the scenario's name)
NAMES = {
    'name-semicolon': ('gpu-01;touch MARKER2', 'Slurm node name: ;a second command'),
    'name-substitution': (SUBSTITUTION, 'Slurm node name: $(command substitution)'),
    'name-dash': (OPTION, 'Slurm node name: --output=FILE (an option)'),
    'name-backticks': (BACKTICKS, 'Slurm node name: `backticks`'),
    'name-newline': ('gpu-01\nState=DOWN', 'Slurm node name: a newline and a second assignment'),
    'name-hostlist': ('gpu-[01-64]', 'Slurm node name: a host list expression'),
}


@pytest.fixture(scope='module')
def names_run(tmp_path_factory):
    base = str(tmp_path_factory.mktemp('hostile-names'))
    fleet = Fleet(os.path.join(base, 'hosts'))
    os.makedirs(fleet.base)
    controller = fleet.host('slurm-ctl')
    controller.tool('scontrol', {'args': [], 'stdout': ''})
    for host, (name, dummy) in NAMES.items():
        fleet.host(host).vars.update(node_drain_node_name=name.replace('{dir}', base), node_drain_action='drain',
                                     node_drain_scheduler='slurm', node_drain_delegate_to='slurm-ctl')
    controller.vars.update(node_drain_action='status', node_drain_scheduler='none')
    result = run_playbook(DRAIN_PLAY, fleet.inventory(), '--limit', ','.join(NAMES))
    return {'base': base, 'fleet': fleet, 'result': result}


@pytest.mark.parametrize('host', sorted(NAMES))
def test_a_hostile_node_name_never_reaches_scontrol(names_run, reliability, host):
    name, scenario_name = NAMES[host]
    scenario = reliability.scenario('hostile input', scenario_name, injected='node_drain (Slurm, drain), node_drain_node_name %r' % name)
    result = names_run['result']
    failed = [outcome for play in result.document['plays'] for task in play['tasks']
              for each, outcome in task['hosts'].items() if each == host and outcome.get('failed')]
    assert len(failed) == 1, result.document
    outcome = failed[0]
    assert outcome['error'] == 'invalid_name' and outcome['cmd'] == [], outcome
    assert outcome['msg'].startswith('invalid Slurm node name'), outcome['msg']
    reliability.check_clear_error(json.dumps({host: outcome['msg']}) + result.stderr, host, 'Slurm node name')
    assert names_run['fleet'].hosts['slurm-ctl'].calls('scontrol') == []
    for folder in marker_folders(names_run['base'], names_run['fleet']):
        reliability.check_no_markers(folder)
    scenario.observed('refused before any scontrol call: %s' % outcome['msg'].replace(names_run['base'], 'DIR')[:160])


# ---------------------------------------------------------------------------------------------------- secrets

def _kube_cluster(base):
    """A fake Kubernetes API (tests/sim/kube) with two GPU nodes, and a kubeconfig whose user has a bearer token."""
    sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim', 'kube'))
    import fake_apiserver  # pylint: disable=import-outside-toplevel,import-error
    nodes = [{'metadata': {'name': name, 'labels': {'nvidia.com/gpu.present': 'true'}}, 'status': {'capacity': {'nvidia.com/gpu': '8'}}}
             for name in ('gpu-02', 'gpu-10')]
    server, dummy, url = fake_apiserver.start({'nodes': nodes, 'pods': [], 'daemonsets': [], 'poddisruptionbudgets': []})
    kubeconfig = fake_apiserver.write_kubeconfig(os.path.join(base, 'kubeconfig'), url)
    return fake_apiserver, server, kubeconfig


def _record_requests(server, requests):
    """Append (path, Authorization header) of every request ``server`` answers to ``requests``; None restores the handler."""
    handler = server.RequestHandlerClass
    if requests is None:
        if '_gpufleet_original' in handler.__dict__:
            handler.parse_request = handler._gpufleet_original  # pylint: disable=protected-access
            del handler._gpufleet_original
        return
    original = handler.__dict__.get('_gpufleet_original') or handler.parse_request
    handler._gpufleet_original = original  # pylint: disable=protected-access

    def parse_request(self):
        parsed = original(self)
        requests.append((getattr(self, 'path', ''), self.headers.get('Authorization', '') if self.headers else ''))
        return parsed

    handler.parse_request = parse_request


def _every_artifact(*folders):
    """{path: text} of every file under ``folders``."""
    found = {}
    for folder in folders:
        for top, dummy, names in os.walk(folder):
            for name in names:
                path = os.path.join(top, name)
                with open(path, 'rb') as handle:
                    found[path] = handle.read().decode('utf-8', 'replace')
    return found


def test_a_kubeconfig_token_appears_in_no_artifact_at_vvvv(tmp_path, reliability):
    """Moved from test_node_drain.py and extended: node_drain cordons a node with a kubeconfig whose user holds a bearer
    token; the token reaches the API (the server saw it) and appears nowhere: -vvvv output, the fleet report, the ansible
    log, the node's events and annotations."""
    scenario = reliability.scenario('secrets', 'kubeconfig bearer token (node_drain at -vvvv)',
                                    injected='node_drain cordon, kubeconfig users[0].user.token, fleet_report, ANSIBLE_LOG_PATH')
    token = 'gpufleet-test-token-' + base64.b64encode(b'secret-value-%d' % os.getpid()).decode()
    base = str(tmp_path)
    fake_apiserver, server, kubeconfig = _kube_cluster(base)
    requests = []
    try:
        _record_requests(server, requests)
        with open(kubeconfig, encoding='utf-8') as handle:
            config = json.load(handle)
        config['users'][0]['user'] = {'token': token}
        with open(kubeconfig, 'w', encoding='utf-8') as handle:
            json.dump(config, handle)
        inventory = os.path.join(base, 'inventory.json')
        common = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable, 'node_drain_delegate_to': 'gpu-10',
                  'node_drain_kubeconfig': kubeconfig, 'node_drain_run_id': 'secret-run', 'node_drain_timeout': 3}
        with open(inventory, 'w', encoding='utf-8') as handle:
            json.dump({'all': {'vars': common, 'hosts': {'gpu-02': {}, 'gpu-10': {'node_drain_action': 'status'}}}}, handle)
        report, log = os.path.join(base, 'report'), os.path.join(base, 'log', 'ansible.log')
        os.makedirs(os.path.dirname(log))
        environment = dict(ansible_environment(), ANSIBLE_STDOUT_CALLBACK='ansible.builtin.default', ANSIBLE_LOG_PATH=log,
                           ANSIBLE_CALLBACKS_ENABLED='gpufleet.lifecycle.fleet_report', GPUFLEET_REPORT_DIR=report)
        process = subprocess.run(['ansible-playbook', '-vvvv', '-i', inventory, DRAIN_PLAY, '--limit', 'gpu-02,gpu-10',
                                  '-e', 'node_drain_action=cordon'], env=environment, cwd=ROOT, capture_output=True, text=True,
                                 check=False, timeout=600)
        assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
        outputs = [process.stdout, process.stderr]
        assert '"outcome": "done"' in outputs[0] and 'EXEC' in outputs[0]  # the -vvvv output is there
        seen = [authorization for dummy, authorization in requests]
        assert 'Bearer ' + token in seen  # the token did reach the API
        with server.store.lock:
            stored = json.dumps(server.store.items('events')) + json.dumps(server.store.items('nodes'))
        assert 'GpufleetCordoned' in stored and 'secret-run' in stored  # the event and the run-id annotation were written
        artifacts = _every_artifact(report, os.path.dirname(log))
        assert os.path.join(report, 'report.json') in artifacts and log in artifacts
        where = ['stdout/stderr'] * any(token in text for text in outputs) + [path for path, text in artifacts.items() if token in text]
        where += ['events and nodes'] * (token in stored)
        assert not where, 'the token appears in %s' % where
    finally:
        _record_requests(server, None)
        fake_apiserver.stop(server)
    files = ', '.join(sorted(os.path.basename(path) for path in artifacts if path.startswith(report)))
    scenario.observed('the token reached the API; it is in none of: -vvvv stdout and stderr, the fleet report (%s), the ansible log, '
                      'the node\'s events and annotations' % files)


# ---------------------------------------------------------------------------------------------------- hung tools, odd bytes

LIMITS_PLAY = os.path.join(PLAYBOOKS, 'gpu_facts_limits.yml')


def test_hung_tools_and_odd_bytes_give_facts_within_the_limit(fleet, tmp_path, reliability):
    """Moved from test_gpu_facts.py: a hung nvidia-smi (and a child holding its output) and a hung dpkg-query are killed at
    their limit with their process group; bytes that are not UTF-8 and terminal escapes are escaped, never printed raw."""
    hung_scenario = reliability.scenario('hostile input', 'nvidia-smi and dpkg-query that hang', injected='gpu_facts command_timeout 3, '
                                         'stand-ins that print part of their output and sleep 300 s (nvidia-smi with a child)')
    bytes_scenario = reliability.scenario('hostile input', 'bytes that are not UTF-8 and terminal escapes in tool output',
                                          injected='gpu_facts, \\xff in the GPU name and a package name, ESC ] in a driver message')
    a100 = real('nvidia-smi-xml', 'telegraf_a100-sxm4-80gb_535.54.03_v12.xml')
    with open(a100, 'rb') as handle:
        xml = handle.read()
    smi_pids = str(tmp_path / 'nvidia-smi.pids')
    # nvidia-smi stuck on a GPU (it and a child holding its output), nothing printed after the XML declaration.
    fleet.host('hung-smi').tool('nvidia-smi', {'args': ['-q', '-x'], 'stdout': '<?xml version="1.0" ?>\n', 'hang': 300,
                                               'hang_child': True, 'pid_file': smi_pids})
    # A dpkg lock or a stuck NFS mount: the listing never ends.
    hung_dpkg = fleet.host('hung-dpkg')
    hung_dpkg.tool('nvidia-smi', {'args': ['-q', '-x'], 'stdout_file': a100})
    hung_dpkg.tool('dpkg-query', {'args': ['-W'], 'stdout': LISTING[:40], 'hang': 300})
    # Bytes that are not UTF-8 in the GPU name, in a package name and in a banner.
    odd = fleet.host('odd-bytes')
    odd.tool('nvidia-smi', {'args': ['-q', '-x'], 'stdout_hex': xml.replace(b'NVIDIA A100-SXM4-80GB', b'NVIDIA A100-SXM4-80GB\xff', 1).hex()})
    odd.tool('dpkg-query', {'args': ['-W'], 'stdout_hex': (LISTING.encode('utf-8') + b'nvidia-\xfe\xffutils-535\t535.129.03-0ubuntu1\tii \n').hex()})
    odd.tool('nvidia-ctk', {'args': ['--version'], 'stdout_hex': b'NVIDIA Container Toolkit CLI version 1.12.0\ncommit: 1c4a2e1\x1b[2J\xff\n'.hex()})
    # A driver that cannot be reached, with a terminal escape in its message.
    fleet.host('escape').tool('nvidia-smi', {'args': [], 'rc': 9, 'stdout_hex': (
        b"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\x1b]0;owned\x07 Make sure that the latest "
        b"NVIDIA driver is installed and running.\n").hex()})

    result = run_playbook(LIMITS_PLAY, fleet.inventory())
    assert result.rc == 0, result.document
    # Each host returns within its limit plus a few seconds (they run in parallel).
    assert result.seconds('Read the GPU stack with short time limits') < 3 + 12
    outcome = result.task('Read the GPU stack with short time limits')
    facts = dict((host, item['ansible_facts']['gpufleet']) for host, item in outcome.items())

    hung = facts['hung-smi']
    assert (hung['health'], hung['health_reason']) == ('broken', 'nvidia_smi_hung')
    assert hung['health_message'].startswith('%s/nvidia-smi -q -x did not finish within 3 s and was killed' % fleet.hosts['hung-smi'].bin)
    assert hung['gpus'] == [] and hung['driver_version'] is None
    with open(smi_pids, encoding='utf-8') as handle:
        assert len(handle.read().split()) == 2
    assert pids_alive(smi_pids) == []

    listing = facts['hung-dpkg']
    assert listing['health'] == 'ok' and listing['packages'] == {}
    assert 'dpkg-query -W -f' in listing['package_error']
    assert listing['package_error'].endswith('did not finish within 3 s and was killed (with its process group)')
    assert any('dpkg-query -W -f' in warning for warning in outcome['hung-dpkg']['warnings'])

    node = facts['odd-bytes']
    assert node['health'] == 'ok' and node['gpus'][0]['name'] == 'NVIDIA A100-SXM4-80GB\\xff'
    assert node['packages']['nvidia-\\xfe\\xffutils-535'] == '535.129.03-0ubuntu1'
    assert node['packages']['nvidia-driver-535'] == '535.129.03-0ubuntu0.22.04.1'
    assert node['tools']['nvidia_ctk'] == '1.12.0'

    escaped = facts['escape']
    assert escaped['health_reason'] == 'driver_unreachable' and '\x1b' not in escaped['health_message']
    assert "communicate with the NVIDIA driver.\\x1b]0;owned\\x07 Make sure" in escaped['health_message']
    hung_scenario.observed('both killed with their process group within the 3 s limit: node broken (nvidia_smi_hung); the package '
                           'listing empty with package_error and a warning')
    bytes_scenario.observed('facts read; the bytes kept as \\\\xNN escapes, the terminal escape as \\\\x1b, nothing raw in the output')


# ---------------------------------------------------------------------------------------------------- node names that reach the Kubernetes API

# host -> (node name, the scenario's name)
KUBE_NAMES = {
    'kube-selector': ('gpu-02,metadata.name!=x', 'Kubernetes node name: a field selector (,metadata.name!=x)'),
    'kube-traversal': ('../../api/v1/namespaces', 'Kubernetes node name: an API path (../../api/v1/namespaces)'),
    'kube-query': ('gpu-02?watch=true', 'Kubernetes node name: a query string (?watch=true)'),
    'kube-newline': ('gpu-02\nx', 'Kubernetes node name: a newline'),
    'kube-substitution': (SUBSTITUTION, 'Kubernetes node name: $(command substitution)'),
    'kube-dash': (OPTION, 'Kubernetes node name: --output=FILE (an option)'),
}


def test_a_hostile_kubernetes_node_name_never_reaches_the_api(tmp_path, reliability):
    scenarios = dict((host, reliability.scenario('hostile input', scenario_name, injected='node_drain (Kubernetes, cordon), '
                                                 'node_drain_node_name %r' % name))
                     for host, (name, scenario_name) in KUBE_NAMES.items())
    base = str(tmp_path)
    fake_apiserver, server, kubeconfig = _kube_cluster(base)
    requests = []
    try:
        with server.store.lock:
            before = json.dumps(server.store.items('nodes'), sort_keys=True)
        _record_requests(server, requests)
        inventory = os.path.join(base, 'inventory.json')
        hosts = dict((host, {'node_drain_node_name': name, 'node_drain_action': 'cordon'}) for host, (name, dummy) in KUBE_NAMES.items())
        hosts['gpu-10'] = {'node_drain_action': 'status'}
        common = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable, 'node_drain_delegate_to': 'gpu-10',
                  'node_drain_kubeconfig': kubeconfig, 'node_drain_run_id': 'hostile-names', 'node_drain_timeout': 3}
        with open(inventory, 'w', encoding='utf-8') as handle:
            json.dump({'all': {'vars': common, 'hosts': hosts}}, handle)
        result = run_playbook(DRAIN_PLAY, inventory, '--limit', ','.join(KUBE_NAMES))
        with server.store.lock:
            after = json.dumps(server.store.items('nodes'), sort_keys=True)
            events = server.store.items('events')
    finally:
        _record_requests(server, None)
        fake_apiserver.stop(server)
    assert requests == [], requests  # not one request: the names were refused before the first
    assert after == before and events == []
    fleet = Fleet(base)
    for host, (name, dummy) in KUBE_NAMES.items():
        failed = [outcome for play in result.document['plays'] for task in play['tasks']
                  for each, outcome in task['hosts'].items() if each == host and outcome.get('failed')]
        assert len(failed) == 1, result.document
        message = failed[0]['msg']
        assert 'node_drain_node_name: %r is not a Kubernetes node name' % name in message, message
        reliability.check_clear_error(json.dumps({host: message}) + result.stderr, host, 'node_drain_node_name')
        for folder in marker_folders(base, fleet):
            reliability.check_no_markers(folder)
        scenarios[host].observed('refused before any API request (the API saw none, no node or event changed): %s'
                                 % message[message.index('node_drain_node_name: '):][:160])


# ---------------------------------------------------------------------------------------------------- the BMC password

BMC_PLAY = """---
- name: Power-cycle the node through its BMC
  hosts: all
  gather_facts: false
  tasks:
    - name: Run the BMC power cycle of node_upgrade
      ansible.builtin.include_role:
        name: gpufleet.lifecycle.node_upgrade
        tasks_from: bmc
"""


class _Power:
    """The power switch of a stand-in node: records what the BMC did."""

    def __init__(self):
        self.current, self.calls = 'On', []

    def state(self):
        return self.current

    def _do(self, name, state):
        self.calls.append(name)
        self.current = state

    def on(self):
        self._do('on', 'On')

    def force_off(self):
        self._do('force_off', 'Off')

    def graceful_shutdown(self):
        self._do('graceful_shutdown', 'Off')

    def graceful_restart(self):
        self._do('graceful_restart', 'On')


def test_a_bmc_password_appears_in_no_artifact_at_vvvv(tmp_path, reliability):
    """node_upgrade's BMC power cycle (community.general.redfish_command against tests/sim/redfish's Redfish service) with the
    right password on one host and a wrong one on another: neither password appears in -vvvv output, the fleet report or
    the ansible log; the right one did reach the BMC (the node was power-cycled), the wrong one was refused."""
    scenario = reliability.scenario('secrets', 'BMC password (node_upgrade power cycle at -vvvv)',
                                    injected='node_upgrade tasks_from bmc, node_upgrade_bmc_password right on bmc-ok, wrong on bmc-wrong, '
                                             'fleet_report, ANSIBLE_LOG_PATH')
    sys.path.insert(0, os.path.join(ROOT, 'tests', 'sim', 'redfish'))
    import redfish_bmc  # pylint: disable=import-outside-toplevel,import-error
    base = str(tmp_path)
    password, wrong = 'gpufleet-bmc-pass-%d' % os.getpid(), 'gpufleet-wrong-pass-%d' % os.getpid()
    cert, key = os.path.join(base, 'cert.pem'), os.path.join(base, 'key.pem')
    subprocess.run(['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
                    '-subj', '/CN=test', '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', key, '-out', cert],
                   check=True, capture_output=True, timeout=60)
    power = _Power()
    server = redfish_bmc.serve(redfish_bmc.Bmc('bmc-ok', 'admin', password, power), 0, cert, key)
    try:
        address = '127.0.0.1:%d' % server.server_address[1]
        common = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable, 'node_upgrade_bmc_address': address,
                  'node_upgrade_bmc_user': 'admin', 'node_upgrade_reboot_timeout': 10, 'node_upgrade_boot_time_command': 'date +%s%N'}
        inventory = os.path.join(base, 'inventory.json')
        with open(inventory, 'w', encoding='utf-8') as handle:
            json.dump({'all': {'vars': common, 'hosts': {'bmc-ok': {'node_upgrade_bmc_password': password},
                                                         'bmc-wrong': {'node_upgrade_bmc_password': wrong}}}}, handle)
        playbook = os.path.join(base, 'bmc.yml')
        with open(playbook, 'w', encoding='utf-8') as handle:
            handle.write(BMC_PLAY)
        report, log = os.path.join(base, 'report'), os.path.join(base, 'log', 'ansible.log')
        os.makedirs(os.path.dirname(log))
        environment = dict(ansible_environment(), ANSIBLE_STDOUT_CALLBACK='ansible.builtin.default', ANSIBLE_LOG_PATH=log,
                           ANSIBLE_CALLBACKS_ENABLED='gpufleet.lifecycle.fleet_report', GPUFLEET_REPORT_DIR=report)
        process = subprocess.run(['ansible-playbook', '-vvvv', '-i', inventory, playbook], env=environment, cwd=ROOT,
                                 capture_output=True, text=True, check=False, timeout=600)
    finally:
        server.shutdown()
        server.server_close()
    output = process.stdout + process.stderr
    assert power.calls == ['force_off', 'on'], (power.calls, output[-3000:])  # the right password got there: one power cycle
    assert 'fatal: [bmc-wrong -> localhost]' in output and 'censored' in output, output[-3000:]
    assert 'EXEC' in output  # the -vvvv output is there
    artifacts = _every_artifact(report, os.path.dirname(log))
    assert os.path.join(report, 'report.json') in artifacts and log in artifacts
    for secret in (password, wrong):
        where = ['stdout/stderr'] * (secret in output) + [path for path, text in artifacts.items() if secret in text]
        assert not where, 'a BMC password appears in %s' % where
    scenario.observed('the right password power-cycled bmc-ok, the wrong one failed bmc-wrong (output censored); neither is in '
                      '-vvvv stdout and stderr, the fleet report (%s) or the ansible log'
                      % ', '.join(sorted(os.path.basename(path) for path in artifacts if path.startswith(report))))
