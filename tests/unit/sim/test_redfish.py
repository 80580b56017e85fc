# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulated BMC (tests/sim/redfish): its documents against real Redfish answers, its Reset action against a
stand-in power switch, its HTTPS front through community.general's own Redfish client code, the podman power
switch's commands, and the fleet's ``--bmc`` pieces (ports, inventory)."""

import base64
import http.client
import importlib.util
import json
import os
import socket
import ssl
import subprocess
import sys
import threading

import pytest

from ansible_collections.community.general.plugins.module_utils.redfish_utils import RedfishUtils

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
REDFISH_DIR = os.path.join(ROOT, 'tests', 'sim', 'redfish')
REAL = os.path.join(ROOT, 'tests', 'unit', 'fixtures', 'real-outputs', 'redfish')
sys.path.insert(0, REDFISH_DIR)

import podman_power  # noqa: E402  pylint: disable=wrong-import-position,import-error
import redfish_bmc  # noqa: E402  pylint: disable=wrong-import-position,import-error

_SPEC = importlib.util.spec_from_file_location('gpufleet_sim_test_fleet_bmc', os.path.join(ROOT, 'tests', 'sim', 'fleet.py'))
FLEET = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(FLEET)

USER, PASSWORD = 'admin', 's3cret-Pass'
REAL_SYSTEMS = ['redfish_ComputerSystem_v1_20_0_DMTF-public-rackmount1-2022.3_Redfish-Mockup-Server.json',
                'redfish_ComputerSystem_v1_10_0_Dell-PowerEdge-R6515-iDRAC_bmclib-fixture.json']
REAL_ROOTS = ['redfish_ServiceRoot_v1_15_0_DMTF-public-rackmount1-2022.3_Redfish-Mockup-Server.json',
              'redfish_ServiceRoot_v1_14_0_Supermicro-RedfishVersion1.14.0_bmclib-fixture.json',
              'redfish_ServiceRoot_v1_6_0_Dell-iDRAC-RedfishVersion1.9.0_bmclib-fixture.json']


def real(name):
    assert os.path.exists(os.path.join(REAL, name + '.source.txt')), 'a real sample needs its provenance sidecar'
    with open(os.path.join(REAL, name), encoding='utf-8') as handle:
        return json.load(handle)


class StandInPower:
    """The power switch of a node that is a dict: records the primitives called, in order."""

    def __init__(self, state='On', fail=None, block=None):
        self.current = state
        self.calls = []
        self.fail = fail
        self.block = block

    def state(self):
        return self.current

    def _do(self, name, state):
        self.calls.append(name)
        if self.block:
            self.block.wait(5)
        if self.fail == name:
            raise redfish_bmc.PowerError('podman start exited 125: no such container')
        self.current = state

    def on(self):
        self._do('on', 'On')

    def force_off(self):
        self._do('force_off', 'Off')

    def graceful_shutdown(self):
        self._do('graceful_shutdown', 'Off')

    def graceful_restart(self):
        self._do('graceful_restart', 'On')


def basic(user=USER, password=PASSWORD):
    return {'authorization': 'Basic ' + base64.b64encode(('%s:%s' % (user, password)).encode()).decode()}


def make_bmc(power=None):
    return redfish_bmc.Bmc('gpu-01', USER, PASSWORD, power or StandInPower(), hardware={'profile': 'h100-sxm-8'}, salt='/fleet')


def get(bmc, path, headers=None):
    return bmc.handle('GET', path, basic() if headers is None else headers)


def reset(bmc, reset_type, headers=None):
    return bmc.handle('POST', redfish_bmc.RESET_TARGET, basic() if headers is None else headers,
                      json.dumps({'ResetType': reset_type}).encode())


# ---------------------------------------------------------------------- documents against real BMCs


def walked(document):
    """What community.general's redfish_utils reads of a ComputerSystem to power it: (PowerState type, Reset target
    suffix, allowable values key present, Reset action keys)."""
    action = document['Actions']['#ComputerSystem.Reset']
    return (type(document['PowerState']), action['target'].rsplit('/', 2)[-2:], isinstance(action['ResetType@Redfish.AllowableValues'], list),
            document['Actions']['#ComputerSystem.Reset']['target'].startswith(document['@odata.id']))


@pytest.mark.parametrize('sample', REAL_SYSTEMS)
def test_system_has_the_shape_of_a_real_bmcs(sample):
    ours = get(make_bmc(), redfish_bmc.SYSTEM).body
    theirs = real(sample)
    assert walked(ours) == walked(theirs) == (str, ['Actions', 'ComputerSystem.Reset'], True, True)
    assert ours['@odata.type'].rsplit('.', 1)[-1] == theirs['@odata.type'].rsplit('.', 1)[-1] == 'ComputerSystem'
    assert ours['PowerState'] in ('On', 'Off') and theirs['PowerState'] == 'On'
    for key in ('Id', 'Name', 'SystemType', 'Manufacturer', 'Model', 'SerialNumber', 'UUID', 'HostName', 'Status', 'Links'):
        assert type(ours[key]) is type(theirs[key]), key  # pylint: disable=unidiomatic-typecheck
    assert sorted(ours['Status']) == sorted(theirs['Status'])
    assert ours['Links']['ManagedBy'][0]['@odata.id'].startswith('/redfish/v1/Managers/')


def test_reset_types_are_ones_real_bmcs_offer():
    offered = set()
    for sample in REAL_SYSTEMS:
        offered |= set(real(sample)['Actions']['#ComputerSystem.Reset']['ResetType@Redfish.AllowableValues'])
    ours = get(make_bmc(), redfish_bmc.SYSTEM).body['Actions']['#ComputerSystem.Reset']['ResetType@Redfish.AllowableValues']
    assert ours == ['On', 'ForceOff', 'GracefulShutdown', 'GracefulRestart', 'ForceRestart', 'PowerCycle']
    assert set(ours) <= offered


@pytest.mark.parametrize('sample', REAL_ROOTS)
def test_service_root_has_what_the_modules_follow(sample):
    ours = make_bmc().handle('GET', '/redfish/v1/', {}).body
    theirs = real(sample)
    for key in ('Systems', 'Chassis', 'Managers', 'SessionService'):
        assert ours[key]['@odata.id'] == theirs[key]['@odata.id'], key
    assert ours['Links']['Sessions'] == theirs['Links']['Sessions'] == {'@odata.id': '/redfish/v1/SessionService/Sessions'}
    assert ours['@odata.type'].split('.')[0] == theirs['@odata.type'].split('.')[0] == '#ServiceRoot'
    assert 'RedfishVersion' in ours and 'UUID' in ours and 'Vendor' in ours


def test_collections_lead_to_the_one_member():
    bmc = make_bmc()
    for kind, member in (('Systems', '/redfish/v1/Systems/1'), ('Chassis', '/redfish/v1/Chassis/1'), ('Managers', '/redfish/v1/Managers/bmc')):
        listed = get(bmc, '/redfish/v1/' + kind).body
        assert listed['Members'] == [{'@odata.id': member}] and listed['Members@odata.count'] == 1
        assert get(bmc, member).body['@odata.id'] == member
    system = get(bmc, '/redfish/v1/Systems/1').body
    assert (system['HostName'], system['Model']) == ('gpu-01', 'h100-sxm-8')
    assert get(bmc, '/redfish/v1/Managers/bmc').body['ManagerType'] == 'BMC'


def test_identity_differs_per_node_and_fleet_but_is_stable():
    one = redfish_bmc.identity_of('gpu-01', salt='/a')
    assert one == redfish_bmc.identity_of('gpu-01', salt='/a')
    assert one['uuid'] != redfish_bmc.identity_of('gpu-02', salt='/a')['uuid'] != redfish_bmc.identity_of('gpu-02', salt='/b')['uuid']


# ---------------------------------------------------------------------- authentication


def test_service_root_is_open_everything_else_needs_credentials():
    bmc = make_bmc()
    assert bmc.handle('GET', '/redfish/v1/', {}).status == 200
    assert bmc.handle('GET', '/redfish/v1', {}).status == 200
    assert bmc.handle('GET', '/redfish', {}).body == {'v1': '/redfish/v1/'}
    for headers in ({}, basic(password='wrong'), basic(user='root'), {'authorization': 'Basic !!!'},
                    {'authorization': 'Bearer ' + PASSWORD}, {'x-auth-token': 'made-up'}):
        answer = get(bmc, '/redfish/v1/Systems/1', headers)
        assert answer.status == 401, headers
        assert answer.headers['WWW-Authenticate'].startswith('Basic realm=')
        assert answer.body['error']['@Message.ExtendedInfo'][0]['MessageId'] == 'Base.1.15.0.NoValidSession'
    assert get(bmc, '/redfish/v1/Systems/1').status == 200


def test_reset_without_credentials_does_not_touch_the_power():
    power = StandInPower()
    bmc = make_bmc(power)
    assert reset(bmc, 'ForceOff', headers=basic(password='wrong')).status == 401
    assert reset(bmc, 'ForceOff', headers={}).status == 401
    assert power.calls == [] and power.current == 'On'


def test_a_session_token_works_until_the_session_is_deleted():
    bmc = make_bmc()
    refused = bmc.handle('POST', redfish_bmc.SESSIONS, {}, json.dumps({'UserName': USER, 'Password': 'nope'}).encode())
    assert refused.status == 401 and 'X-Auth-Token' not in refused.headers
    created = bmc.handle('POST', redfish_bmc.SESSIONS, {}, json.dumps({'UserName': USER, 'Password': PASSWORD}).encode())
    assert created.status == 201 and created.headers['Location'] == created.body['@odata.id']
    token = {'x-auth-token': created.headers['X-Auth-Token']}
    assert get(bmc, '/redfish/v1/Systems/1', token).status == 200
    assert get(bmc, redfish_bmc.SESSIONS, token).body['Members'] == [{'@odata.id': created.headers['Location']}]
    assert bmc.handle('DELETE', created.headers['Location'], token).status == 204
    assert get(bmc, '/redfish/v1/Systems/1', token).status == 401


# ---------------------------------------------------------------------- the Reset action


@pytest.mark.parametrize('reset_type, state, plan', [
    ('On', 'Off', ['on']),
    ('On', 'On', []),
    ('ForceOff', 'On', ['force_off']),
    ('ForceOff', 'Off', []),
    ('GracefulShutdown', 'On', ['graceful_shutdown']),
    ('GracefulShutdown', 'Off', []),
    ('GracefulRestart', 'On', ['graceful_restart']),
    ('ForceRestart', 'On', ['force_off', 'on']),
    ('ForceRestart', 'Off', ['on']),
    ('PowerCycle', 'On', ['force_off', 'on']),
    ('PowerCycle', 'Off', ['on']),
])
def test_reset_plan(reset_type, state, plan):
    assert redfish_bmc.reset_plan(reset_type, state) == plan


def test_graceful_restart_of_a_system_that_is_off_is_refused():
    with pytest.raises(redfish_bmc.ResetConflict):
        redfish_bmc.reset_plan('GracefulRestart', 'Off')
    power = StandInPower('Off')
    answer = reset(make_bmc(power), 'GracefulRestart')
    assert answer.status == 409 and 'powered off' in answer.body['error']['@Message.ExtendedInfo'][0]['Message']
    assert power.calls == []


@pytest.mark.parametrize('reset_type, calls, after', [
    ('ForceOff', ['force_off'], 'Off'),
    ('GracefulShutdown', ['graceful_shutdown'], 'Off'),
    ('ForceRestart', ['force_off', 'on'], 'On'),
    ('PowerCycle', ['force_off', 'on'], 'On'),
    ('GracefulRestart', ['graceful_restart'], 'On'),
])
def test_reset_drives_the_power_switch(reset_type, calls, after):
    power = StandInPower('On')
    bmc = make_bmc(power)
    assert 'LastResetTime' not in get(bmc, redfish_bmc.SYSTEM).body
    answer = reset(bmc, reset_type)
    assert (answer.status, answer.body) == (204, None)
    assert power.calls == calls
    system = get(bmc, redfish_bmc.SYSTEM).body
    assert system['PowerState'] == after and 'LastResetTime' in system


def test_power_on_then_off_round_trip():
    power = StandInPower('Off')
    bmc = make_bmc(power)
    assert get(bmc, redfish_bmc.SYSTEM).body['PowerState'] == 'Off'
    assert reset(bmc, 'On').status == 204
    assert get(bmc, redfish_bmc.SYSTEM).body['PowerState'] == 'On'
    assert reset(bmc, 'On').status == 204          # already on: nothing happens
    assert power.calls == ['on']


@pytest.mark.parametrize('body, status, message_id', [
    (b'{"ResetType": "Nmi"}', 400, 'ActionParameterValueNotInList'),
    (b'{"ResetType": "forceoff"}', 400, 'ActionParameterValueNotInList'),
    (b'{}', 400, 'ActionParameterMissing'),
    (b'{"ResetType": ', 400, 'MalformedJSON'),
    (b'["ForceOff"]', 400, 'MalformedJSON'),
])
def test_bad_reset_requests_are_refused_in_the_base_registrys_words(body, status, message_id):
    power = StandInPower()
    answer = make_bmc(power).handle('POST', redfish_bmc.RESET_TARGET, basic(), body)
    assert answer.status == status
    info = answer.body['error']['@Message.ExtendedInfo'][0]
    assert info['MessageId'] == 'Base.1.15.0.' + message_id
    assert '%1' not in info['Message']
    assert power.calls == []


def test_not_in_list_names_the_value():
    info = reset(make_bmc(), 'Nmi').body['error']['@Message.ExtendedInfo'][0]
    assert info['Message'] == "The value 'Nmi' for the parameter ResetType in the action ComputerSystem.Reset is not in the list of acceptable values."


def test_a_failing_power_switch_is_a_500_that_says_why():
    power = StandInPower('On', fail='on')
    answer = reset(make_bmc(power), 'ForceRestart')
    assert answer.status == 500
    assert 'ForceRestart failed: podman start exited 125: no such container' in answer.body['error']['@Message.ExtendedInfo'][0]['Message']
    assert power.calls == ['force_off', 'on']


def test_power_state_shows_the_transition_while_an_action_runs():
    release = threading.Event()
    power = StandInPower('On', block=release)
    bmc = make_bmc(power)
    worker = threading.Thread(target=reset, args=(bmc, 'ForceOff'))
    worker.start()
    try:
        for dummy in range(100):
            if power.calls:
                break
            threading.Event().wait(0.01)
        assert get(bmc, redfish_bmc.SYSTEM).body['PowerState'] == 'PoweringOff'
    finally:
        release.set()
        worker.join(5)
    assert get(bmc, redfish_bmc.SYSTEM).body['PowerState'] == 'Off'


def test_unknown_paths_and_methods():
    bmc = make_bmc()
    assert get(bmc, '/redfish/v1/Systems/2').status == 404
    assert bmc.handle('GET', redfish_bmc.RESET_TARGET, basic()).status == 405
    assert bmc.handle('PATCH', redfish_bmc.SYSTEM, basic(), b'{}').status == 405
    assert get(bmc, '/redfish/v1/Systems/1/').status == 200
    assert get(bmc, '/redfish/v1/Systems/1?$expand=.').status == 200


# ---------------------------------------------------------------------- over HTTPS, through community.general's client


@pytest.fixture(scope='module')
def certificate(tmp_path_factory):
    folder = tmp_path_factory.mktemp('bmc-cert')
    cert, key = str(folder / 'cert.pem'), str(folder / 'key.pem')
    subprocess.run(['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
                    '-subj', '/CN=test', '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', key, '-out', cert],
                   check=True, capture_output=True)
    return cert, key


@pytest.fixture
def served(certificate):
    power = StandInPower('On')
    bmc = make_bmc(power)
    server = redfish_bmc.serve(bmc, 0, *certificate)
    yield server.server_address[1], power, bmc
    server.shutdown()
    server.server_close()


class ModuleStandIn:
    """What RedfishUtils reads of an AnsibleModule (validate_certs false, as the integration playbooks pass it)."""

    params = {'validate_certs': False, 'ca_path': None, 'ciphers': None}

    @staticmethod
    def fail_json(**kwargs):
        raise AssertionError(kwargs)


def utils(port, password=PASSWORD):
    return RedfishUtils({'user': USER, 'pswd': password, 'token': None}, 'https://127.0.0.1:%d' % port, 10, ModuleStandIn(),
                        data_modification=True)


def test_community_general_reads_the_inventory(served):
    port = served[0]
    client = utils(port)
    assert client._find_systems_resource() == {'ret': True}  # pylint: disable=protected-access
    inventory = client.get_multi_system_inventory()
    assert inventory['ret'] is True
    entry = inventory['entries'][0][1]
    assert (entry['PowerState'], entry['HostName'], entry['Id']) == ('On', 'gpu-01', '1')


def test_community_general_power_commands_reach_the_switch(served):
    port, power = served[0], served[1]
    client = utils(port)
    client._find_systems_resource()  # pylint: disable=protected-access
    assert client.manage_system_power('PowerForceRestart') == {'ret': True, 'changed': True}
    assert power.calls == ['force_off', 'on']
    assert client.manage_system_power('PowerForceOff') == {'ret': True, 'changed': True}
    assert client.manage_system_power('PowerForceOff') == {'ret': True, 'changed': False}   # already off: no POST
    assert client.manage_system_power('PowerOn') == {'ret': True, 'changed': True}
    assert client.manage_system_power('PowerCycle') == {'ret': True, 'changed': True}
    assert power.calls == ['force_off', 'on', 'force_off', 'on', 'force_off', 'on']


def test_community_general_with_a_wrong_password_gets_401(served):
    port, power = served[0], served[1]
    result = utils(port, 'wrong')._find_systems_resource()  # pylint: disable=protected-access
    assert result['ret'] is False and result['status'] == 401
    assert 'HTTP Error 401' in result['msg'] and 'There is no valid session' in result['msg']
    assert power.calls == []


def test_community_general_session_login(served):
    port = served[0]
    client = utils(port)
    client._find_sessionservice_resource()  # pylint: disable=protected-access
    created = client.create_session()
    assert created['ret'] is True and created['session']['token']
    token_client = RedfishUtils({'token': created['session']['token']}, 'https://127.0.0.1:%d' % port, 10, ModuleStandIn())
    assert token_client._find_systems_resource() == {'ret': True}  # pylint: disable=protected-access


def test_https_only(served, certificate):
    port = served[0]
    plain = http.client.HTTPConnection('127.0.0.1', port, timeout=5)
    with pytest.raises((http.client.HTTPException, ConnectionError, socket.timeout, OSError)):
        plain.request('GET', '/redfish/v1/')
        plain.getresponse()
    plain.close()
    # ... while HTTPS answers, with the certificate it was given.
    context = ssl.create_default_context(cafile=certificate[0])
    secure = http.client.HTTPSConnection('127.0.0.1', port, timeout=5, context=context)
    secure.request('GET', '/redfish/v1/')
    answer = secure.getresponse()
    assert answer.status == 200 and answer.getheader('OData-Version') == '4.0'
    assert json.loads(answer.read())['Links']['Sessions']['@odata.id'] == '/redfish/v1/SessionService/Sessions'
    secure.close()


# ---------------------------------------------------------------------- the podman power switch


class Podman:
    """A stand-in for the podman command: answers per subcommand, records the argument lists."""

    def __init__(self, answers=None):
        self.calls = []
        self.answers = answers or {}

    def __call__(self, argv, env=None, timeout=None):
        del timeout
        self.calls.append(argv)
        assert env['CONTAINERS_CONF'] == '/state/containers.conf'
        return self.answers.get(argv[1], (0, ''))


def faults_file(tmp_path, faults):
    path = tmp_path / 'faults.json'
    path.write_text(json.dumps(faults))
    return str(path)


def power_switch(tmp_path, faults, answers=None):
    podman = Podman(answers)
    return podman_power.PodmanPower('sim-gpu-01', '/state/containers.conf', faults_file(tmp_path, faults), runner=podman), podman


def test_podman_commands(tmp_path):
    power, podman = power_switch(tmp_path, {}, {'container': (0, 'true\n')})
    assert power.state() == 'On'
    power.force_off()
    power.on()
    power.graceful_shutdown()
    power.graceful_restart()
    assert podman.calls == [
        ['podman', 'container', 'inspect', '--format', '{{.State.Running}}', 'sim-gpu-01'],
        ['podman', 'stop', '-t', '0', 'sim-gpu-01'],
        ['podman', 'start', 'sim-gpu-01'],
        ['podman', 'stop', '-t', '30', 'sim-gpu-01'],
        ['podman', 'exec', 'sim-gpu-01', 'systemctl', 'reboot'],
    ]


@pytest.mark.parametrize('answer, state', [((0, 'false\n'), 'Off'), ((125, 'Error: no such container'), 'Off'), ((0, 'true\n'), 'On')])
def test_podman_power_state(tmp_path, answer, state):
    assert power_switch(tmp_path, {}, {'container': answer})[0].state() == state


def test_a_cold_boot_clears_reboot_hang_and_leaves_the_other_faults(tmp_path):
    power = power_switch(tmp_path, {'reboot_hang': {}, 'diag_fail': {'level': 3, 'gpu': 2, 'test': 'memory'}})[0]
    power.force_off()
    assert 'reboot_hang' in json.loads((tmp_path / 'faults.json').read_text())
    power.on()
    assert json.loads((tmp_path / 'faults.json').read_text()) == {'diag_fail': {'level': 3, 'gpu': 2, 'test': 'memory'}}


def test_a_graceful_restart_is_the_oss_reboot_and_keeps_reboot_hang(tmp_path):
    power = power_switch(tmp_path, {'reboot_hang': {}}, {'exec': (1, 'Call to Reboot failed: Connection reset by peer')})[0]
    power.graceful_restart()
    power.graceful_shutdown()
    assert json.loads((tmp_path / 'faults.json').read_text()) == {'reboot_hang': {}}


def test_podman_failures_name_the_container(tmp_path):
    power = power_switch(tmp_path, {}, {'start': (125, 'Error: no container with name or ID "sim-gpu-01" found'),
                                        'exec': (125, 'Error: container sim-gpu-01 is not running')})[0]
    with pytest.raises(podman_power.PowerError, match='power on of container sim-gpu-01: podman start exited 125: Error: no container'):
        power.on()
    with pytest.raises(podman_power.PowerError, match='graceful restart of container sim-gpu-01: podman exec exited 125'):
        power.graceful_restart()
    assert isinstance(podman_power.PowerError('x'), redfish_bmc.POWER_ERRORS)


# ---------------------------------------------------------------------- fleet --bmc: ports and inventory


def fleet_config(**bmc_ports):
    nodes = {}
    for index, node in enumerate(['gpu-01', 'gpu-02']):
        nodes[node] = {'ssh_port': 22600 + index, 'profile': 'h100-sxm-8'}
        if node in bmc_ports:
            nodes[node]['bmc_port'] = bmc_ports[node]
    return {'nodes': nodes, 'scheduler': None}


def test_bmc_ports_skip_ssh_ports_and_other_fleets_and_stay_registered(tmp_path, monkeypatch):
    monkeypatch.setattr(FLEET, 'PORT_REGISTRY', str(tmp_path / 'ports.json'))
    other = tmp_path / 'other'
    other.mkdir()
    (other / 'fleet.json').write_text(json.dumps({'nodes': {'n': {'ssh_port': 22602, 'bmc_port': 22603}}}))
    with FLEET.port_registry() as registry:
        registry.update({'22602': str(other), '22603': str(other)})
    fleet = FLEET.Fleet(str(tmp_path / 'mine'))
    config = fleet_config()
    fleet.save(config)
    monkeypatch.setattr(FLEET, 'port_is_free', lambda port: port != 22604)
    fleet.assign_ports(config, ['gpu-01', 'gpu-02'], 22600, kind='bmc_port')
    assert [config['nodes'][node]['bmc_port'] for node in ('gpu-01', 'gpu-02')] == [22605, 22606]
    assert FLEET.fleet_ports(fleet.state_dir) == {22600, 22601, 22605, 22606}
    with FLEET.port_registry() as registry:
        assert registry == {'22602': str(other), '22603': str(other), '22605': fleet.state_dir, '22606': fleet.state_dir}


def test_ssh_ports_skip_this_fleets_bmc_ports(tmp_path, monkeypatch):
    monkeypatch.setattr(FLEET, 'PORT_REGISTRY', str(tmp_path / 'ports.json'))
    monkeypatch.setattr(FLEET, 'port_is_free', lambda port: True)
    fleet = FLEET.Fleet(str(tmp_path / 'mine'))
    config = fleet_config(**{'gpu-01': 22200})
    config['nodes']['gpu-02']['ssh_port'] = None
    fleet.save(config)
    fleet.assign_ports(config, ['gpu-02'], 22200)
    assert config['nodes']['gpu-02']['ssh_port'] == 22201


def test_inventory_carries_the_bmc_only_with_bmc(tmp_path):
    fleet = FLEET.Fleet(str(tmp_path / 'fleet'))
    os.makedirs(fleet.state_dir)
    config = fleet_config(**{'gpu-01': 22610, 'gpu-02': 22611})
    plain = json.loads(open(fleet.write_inventory(config, '/key'), encoding='utf-8').read())
    assert not [key for host in plain['all']['children']['gpu']['hosts'].values() for key in host if key.startswith('gpufleet_bmc')]
    config['bmc'] = True
    path = fleet.write_inventory(config, '/key')
    hosts = json.loads(open(path, encoding='utf-8').read())['all']['children']['gpu']['hosts']
    password = fleet.bmc_credentials()[1]['password']
    assert hosts['gpu-02']['gpufleet_bmc_address'] == '127.0.0.1:22611'
    assert (hosts['gpu-01']['gpufleet_bmc_user'], hosts['gpu-01']['gpufleet_bmc_password']) == ('admin', password)
    assert len(password) >= 20
    assert os.stat(path).st_mode & 0o077 == 0
    assert os.stat(os.path.join(fleet.bmc_dir(), 'credentials.json')).st_mode & 0o077 == 0
    other = FLEET.Fleet(str(tmp_path / 'other-fleet'))
    assert other.bmc_credentials()[1]['password'] != password


def test_bmc_pid_only_names_this_fleets_server(tmp_path):
    fleet = FLEET.Fleet(str(tmp_path / 'fleet'))
    os.makedirs(fleet.bmc_dir())
    with open(os.path.join(fleet.bmc_dir(), 'gpu-01.pid'), 'w', encoding='utf-8') as handle:
        handle.write('%d\n' % os.getpid())   # a live process that is not a BMC
    assert fleet.bmc_pid('gpu-01') is None
    assert fleet.bmc_pid('gpu-02') is None
