# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulated BMC (``fleet up --bmc``, tests/sim/redfish) driven by community.general's Redfish modules.

One 1-node fleet of its own (``build/sim-bmc-test``).  The tests run in file order on the one node and each
leaves it powered on and reachable; the last one takes the fleet down and checks the BMC went with it.
"""

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from conftest import ROOT, SIM, SimFleet, require_identities

STATE = os.path.join(ROOT, 'build', 'sim-bmc-test')
PLAYBOOK = os.path.join(os.path.dirname(__file__), 'playbooks', 'sim_bmc.yml')
NODE = 'gpu-01'


@pytest.fixture(scope='module')
def bmc_fleet():
    process = subprocess.run([os.path.join(SIM, 'fleet'), '--state-dir', STATE, 'up', '--nodes', '1', '--scheduler', 'none', '--bmc'],
                             capture_output=True, text=True, check=False, timeout=1800)
    if process.returncode != 0:
        raise AssertionError('fleet up --bmc failed (rc=%s):\n%s%s' % (process.returncode, process.stdout, process.stderr))
    sys.stderr.write(process.stderr)
    running = SimFleet(STATE, process.stdout.strip().splitlines()[-1])
    running.up_output = process.stdout + process.stderr
    require_identities(STATE)
    yield running
    subprocess.run([os.path.join(SIM, 'fleet'), '--state-dir', STATE, 'down'], capture_output=True, text=True, check=False, timeout=600)


def host_vars(fleet):
    return fleet.inventory_data['all']['children']['gpu']['hosts'][NODE]


def reset(fleet, command, wait=0, *extra):
    """Run the sim_bmc playbook: read the system, reset it with ``command``, read it again, wait for the node.

    Without an SSH ControlPersist master: a master still connected when ``fleet down`` kills the node's sshd leaves
    the node's SSH port in TIME_WAIT on the sshd side, and down waits the minute out before it returns.
    """
    no_master = json.dumps({'ansible_ssh_args': '-C -o ControlMaster=no'})
    return fleet.playbook(PLAYBOOK, '-e', 'target=' + NODE, '-e', 'bmc_command=' + command, '-e', 'bmc_wait=%d' % wait, '-e', no_master, *extra)


def power_state(result, task):
    return result.task(task)[NODE]['redfish_facts']['system']['entries'][0][1]['PowerState']


def boot_marks(fleet):
    """(boot id of the simulated boot, start time of the node's PID 1 in clock ticks) read inside the node."""
    boot = fleet.node_exec(NODE, 'cat', '/run/gpufleet-sim/boot.json')
    stat = fleet.node_exec(NODE, 'cat', '/proc/1/stat')
    assert boot.returncode == 0 and stat.returncode == 0, boot.stderr + stat.stderr
    return json.loads(boot.stdout)['boot_id'], stat.stdout.rsplit(')', 1)[1].split()[19]


def status_row(fleet, check=True):
    process = fleet.fleet('status', check=False)
    if check:
        assert process.returncode == 0, process.stderr
    assert host_vars(fleet)['gpufleet_bmc_password'] not in process.stdout + process.stderr
    return json.loads(process.stdout)['nodes'][0], process.returncode


def https_get(address, path, user=None, password=None, context=None):
    headers = {}
    if user is not None:
        headers['Authorization'] = 'Basic ' + base64.b64encode(('%s:%s' % (user, password)).encode()).decode()
    if context is None:
        context = ssl.create_default_context(cafile=os.path.join(STATE, 'bmc', 'cert.pem'))
    request = urllib.request.Request('https://%s%s' % (address, path), headers=headers)
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_each_node_gets_a_bmc_and_the_password_stays_secret(bmc_fleet):
    variables = host_vars(bmc_fleet)
    host, port = variables['gpufleet_bmc_address'].split(':')
    assert host == '127.0.0.1' and int(port) != variables['ansible_port']
    assert variables['gpufleet_bmc_user'] == 'admin' and len(variables['gpufleet_bmc_password']) >= 20
    assert variables['gpufleet_bmc_password'] not in bmc_fleet.up_output
    assert os.stat(bmc_fleet.inventory).st_mode & 0o077 == 0
    row, dummy = status_row(bmc_fleet)
    assert (row['bmc_address'], row['power_state'], row['identity_ok']) == (variables['gpufleet_bmc_address'], 'On', True)
    # HTTPS with the fleet's own certificate; the service root is open, the system needs the account.
    address = variables['gpufleet_bmc_address']
    assert https_get(address, '/redfish/v1/')[0] == 200
    assert https_get(address, '/redfish/v1/Systems/1')[0] == 401
    assert https_get(address, '/redfish/v1/Systems/1', 'admin', 'wrong')[0] == 401
    status, system = https_get(address, '/redfish/v1/Systems/1', 'admin', variables['gpufleet_bmc_password'])
    assert (status, system['HostName'], system['PowerState']) == (200, NODE, 'On')
    with pytest.raises(OSError):
        with socket.create_connection(('127.0.0.1', int(port)), timeout=5) as plain:
            plain.sendall(b'GET /redfish/v1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n')
            if not plain.recv(100).startswith(b'HTTP/'):
                raise OSError('no HTTP answer over plain HTTP')


def test_force_restart_power_cycles_the_container(bmc_fleet):
    before = boot_marks(bmc_fleet)
    result = reset(bmc_fleet, 'PowerForceRestart', 60)
    assert result.rc == 0, result.stderr
    assert result.task('Reset')[NODE]['changed'] is True
    assert power_state(result, 'Read the system before') == power_state(result, 'Read the system after') == 'On'
    booted = json.loads(base64.b64decode(result.task('Read the boot record')[NODE]['content']))
    after = boot_marks(bmc_fleet)
    assert booted['boot_id'] == after[0] != before[0]
    assert after[1] != before[1]


def test_force_off_stops_the_container_and_on_starts_it(bmc_fleet):
    before = boot_marks(bmc_fleet)
    result = reset(bmc_fleet, 'PowerForceOff')
    assert result.rc == 0, result.stderr
    assert (power_state(result, 'Read the system before'), power_state(result, 'Read the system after')) == ('On', 'Off')
    row, returncode = status_row(bmc_fleet, check=False)
    assert (row['power_state'], row['running'], row['identity'], returncode) == ('Off', False, None, 3)
    result = reset(bmc_fleet, 'PowerOn', 60)
    assert result.rc == 0, result.stderr
    assert (power_state(result, 'Read the system before'), power_state(result, 'Read the system after')) == ('Off', 'On')
    assert boot_marks(bmc_fleet)[0] != before[0]
    row, dummy = status_row(bmc_fleet)
    assert (row['power_state'], row['running'], row['identity_ok']) == ('On', True, True)


def test_a_node_hung_on_reboot_comes_back_after_a_force_restart(bmc_fleet):
    faults = os.path.join(STATE, 'nodes', NODE, 'etc', 'faults.json')
    bmc_fleet.fleet('fault', NODE, 'reboot_hang')
    try:
        # The OS's own reboot (GracefulRestart) hangs: the node comes back without sshd.
        result = reset(bmc_fleet, 'PowerGracefulRestart')
        assert result.rc == 0, result.stderr
        deadline = time.time() + 30
        while bmc_fleet.node_exec(NODE, 'cat', '/run/gpufleet-sim/reboot_hang.json').returncode != 0 and time.time() < deadline:
            time.sleep(0.5)
        row, returncode = status_row(bmc_fleet, check=False)
        assert (row['power_state'], row['identity'], returncode) == ('On', None, 3)
        # A power cycle through the BMC gets past the hang.
        result = reset(bmc_fleet, 'PowerForceRestart', 60)
        assert result.rc == 0, result.stderr
        assert 'failed' not in result.task('Wait for the node')[NODE]
    finally:
        bmc_fleet.fleet('fault', NODE, 'clear')
    with open(faults, encoding='utf-8') as handle:
        assert 'reboot_hang' not in json.load(handle)
    assert status_row(bmc_fleet)[0]['identity_ok']


def test_a_wrong_password_gets_401_and_the_module_fails(bmc_fleet):
    before = boot_marks(bmc_fleet)
    result = reset(bmc_fleet, 'PowerForceOff', 0, '-e', 'bmc_password=not-the-password', '-e', 'bmc_read=false')
    assert result.rc != 0
    outcome = result.task('Reset')[NODE]
    assert outcome['failed'] is True and 'HTTP Error 401' in outcome['msg']
    assert boot_marks(bmc_fleet) == before
    assert status_row(bmc_fleet)[0]['power_state'] == 'On'


def test_down_stops_the_bmc(bmc_fleet):
    port = int(host_vars(bmc_fleet)['gpufleet_bmc_address'].split(':')[1])
    with open(os.path.join(STATE, 'bmc', NODE + '.pid'), encoding='utf-8') as handle:
        pid = int(handle.read())
    bmc_fleet.fleet('down')
    assert not os.path.exists('/proc/%d' % pid) or 'redfish_bmc.py' not in open('/proc/%d/cmdline' % pid, encoding='utf-8').read()
    with socket.socket() as probe:
        assert probe.connect_ex(('127.0.0.1', port)) != 0
    assert not os.path.exists(os.path.join(STATE, 'bmc'))
