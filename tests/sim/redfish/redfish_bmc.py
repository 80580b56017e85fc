# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulated BMC of one node: a small Redfish service over HTTPS whose ComputerSystem.Reset power-cycles the node.

It speaks the part of the DMTF Redfish schema that community.general's ``redfish_info`` / ``redfish_command``
walk (tests/sim/redfish/README.md): the service root, the Systems, Chassis and Managers collections with one
member each (``/redfish/v1/Systems/1``), the SessionService, and ``Actions/#ComputerSystem.Reset`` with
``ResetType@Redfish.AllowableValues``.  The documents are modelled on the DMTF public mockup and real iDRAC /
Supermicro answers (tests/unit/fixtures/real-outputs/redfish/).  Every resource but the service root needs
HTTP basic auth or a session token (401 otherwise), as on a real BMC; the service speaks HTTPS only.

Power goes through a *power* object (``podman_power.PodmanPower`` for a simulated node, a stand-in in the
unit tests) with five primitives: ``state()`` ('On' or 'Off'), ``on()``, ``force_off()``,
``graceful_shutdown()`` and ``graceful_restart()``.  ``reset_plan()`` decides which primitives a ResetType
means for the current power state.

Run by ``tests/sim/fleet up --bmc`` (one process per node)::

    python3 redfish_bmc.py --node gpu-01 --port 22600 --cert cert.pem --key key.pem \\
        --credentials credentials.json --container NAME --containers-conf containers.conf --faults faults.json

The password is read from the credentials file (``{"user": ..., "password": ...}``), never from the command line.
Standard library only.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import http.server
import json
import os
import secrets
import signal
import socketserver
import ssl
import sys
import threading
import time
import uuid

SYSTEM_ID = '1'
CHASSIS_ID = '1'
MANAGER_ID = 'bmc'
SERVICE_ROOT = '/redfish/v1'
SYSTEM = SERVICE_ROOT + '/Systems/' + SYSTEM_ID
RESET_TARGET = SYSTEM + '/Actions/ComputerSystem.Reset'
SESSIONS = SERVICE_ROOT + '/SessionService/Sessions'
# What the Reset action accepts, in the order a real BMC lists them (tests/sim/redfish/README.md).
RESET_TYPES = ('On', 'ForceOff', 'GracefulShutdown', 'GracefulRestart', 'ForceRestart', 'PowerCycle')
REDFISH_VERSION = '1.15.0'
BASE = 'Base.1.15.0'
FIRMWARE_VERSION = '1.0.0-gpufleet-sim'
# Base message registry texts (DMTF Base.1.15.0), %1.. are the MessageArgs.
MESSAGES = {
    'Success': ('OK', 'The request completed successfully.', 'None'),
    'NoValidSession': ('Critical', 'There is no valid session established with the implementation.',
                       'Establish a session before attempting any operations.'),
    'ResourceNotFound': ('Critical', "The requested resource of type %1 named '%2' was not found.",
                         'Provide a valid resource identifier and resubmit the request.'),
    'ActionParameterMissing': ('Critical', 'The action %1 requires the parameter %2 to be present in the request body.',
                               'Supply the action with the required parameter in the request body when the request is resubmitted.'),
    'ActionParameterValueNotInList': ('Warning',
                                      "The value '%1' for the parameter %2 in the action %3 is not in the list of acceptable values.",
                                      'Choose a value from the enumeration list that the implementation can support and resubmit the request '
                                      'if the operation failed.'),
    'MalformedJSON': ('Critical', 'The request body submitted was malformed JSON and could not be parsed by the receiving service.',
                      'Ensure that the request body is valid JSON and resubmit the request.'),
    'OperationNotAllowed': ('Critical', 'The HTTP method is not allowed on this resource.', 'None.'),
    'ResourceInStandby': ('Critical', 'The request could not be performed because the resource is in standby.',
                          'Ensure that the resource is in the correct power state and resubmit the request.'),
    'InternalError': ('Critical', 'The request failed due to an internal service error.  The service is still operational.',
                      'Resubmit the request.  If the problem persists, consider resetting the service.'),
}


class PowerError(RuntimeError):
    """A power primitive that failed; the message says why (shown in the Redfish error body).

    Power objects raise a RuntimeError (this class or their own subclass) or an OSError.
    """


POWER_ERRORS = (RuntimeError, OSError)


class ResetConflict(Exception):
    """A ResetType that cannot act in the current power state (GracefulRestart of a system that is off)."""


def reset_plan(reset_type, power_state):
    """The power primitives ``reset_type`` means when the system is ``power_state`` ('On' or 'Off'), in order.

    As on metal: On of a running system and ForceOff/GracefulShutdown of a system that is off do nothing;
    ForceRestart and PowerCycle cut the power and restore it (a system that is off is only powered on);
    GracefulRestart asks the OS to reboot, so it needs a running OS (ResetConflict otherwise).
    """
    if reset_type not in RESET_TYPES:
        raise ValueError('unknown ResetType %r' % (reset_type,))
    running = power_state == 'On'
    if reset_type == 'On':
        return [] if running else ['on']
    if reset_type in ('ForceOff', 'GracefulShutdown'):
        return ['force_off' if reset_type == 'ForceOff' else 'graceful_shutdown'] if running else []
    if reset_type == 'GracefulRestart':
        if not running:
            raise ResetConflict('GracefulRestart needs a running operating system; the system is powered off')
        return ['graceful_restart']
    return ['force_off', 'on'] if running else ['on']


def message(message_id, *arguments):
    """One ``@Message.ExtendedInfo`` entry of the Base registry."""
    severity, text, resolution = MESSAGES[message_id]
    for index, argument in enumerate(arguments, 1):
        text = text.replace('%%%d' % index, str(argument))
    return {'@odata.type': '#Message.v1_1_1.Message', 'MessageId': '%s.%s' % (BASE, message_id), 'Message': text,
            'MessageArgs': [str(argument) for argument in arguments], 'MessageSeverity': severity, 'Severity': severity,
            'Resolution': resolution}


def error_body(message_id, *arguments, **kwargs):
    """A Redfish error response body; ``detail`` (optional) replaces the registry text as the first message."""
    extended = message(message_id, *arguments)
    if kwargs.get('detail'):
        extended['Message'] = kwargs['detail']
    return {'error': {'code': '%s.GeneralError' % BASE,
                      'message': 'A general error has occurred. See ExtendedInfo for more information.',
                      '@Message.ExtendedInfo': [extended]}}


def link(path):
    return {'@odata.id': path}


def service_root(service_uuid):
    """GET /redfish/v1/ (unauthenticated), shaped as the DMTF public mockup's ServiceRoot.v1_15_0."""
    return {
        '@odata.type': '#ServiceRoot.v1_15_0.ServiceRoot',
        '@odata.id': SERVICE_ROOT + '/',
        'Id': 'RootService',
        'Name': 'Root Service',
        'RedfishVersion': REDFISH_VERSION,
        'UUID': service_uuid,
        'Vendor': 'gpufleet-sim',
        'Product': 'gpufleet simulated BMC',
        'ProtocolFeaturesSupported': {'ExpandQuery': {'ExpandAll': False, 'Levels': False, 'Links': False, 'NoLinks': False},
                                      'SelectQuery': False, 'FilterQuery': False, 'OnlyMemberQuery': False, 'ExcerptQuery': False},
        'Systems': link(SERVICE_ROOT + '/Systems'),
        'Chassis': link(SERVICE_ROOT + '/Chassis'),
        'Managers': link(SERVICE_ROOT + '/Managers'),
        'SessionService': link(SERVICE_ROOT + '/SessionService'),
        'Links': {'Sessions': link(SESSIONS)},
    }


def collection(kind, name, members):
    path = SERVICE_ROOT + '/' + kind
    return {
        '@odata.type': '#%s.%s' % (name, name),
        '@odata.id': path,
        'Name': name.replace('Collection', ' Collection').replace('ComputerSystem ', 'Computer System '),
        'Members@odata.count': len(members),
        'Members': [link(member) for member in members],
    }


def computer_system(identity, power_state, last_reset_time=None):
    """GET /redfish/v1/Systems/1, shaped as the DMTF mockup's and iDRAC's ComputerSystem (power part)."""
    document = {
        '@odata.type': '#ComputerSystem.v1_20_0.ComputerSystem',
        '@odata.id': SYSTEM,
        'Id': SYSTEM_ID,
        'Name': 'System',
        'Description': 'Simulated GPU node %s' % identity['node'],
        'SystemType': 'Physical',
        'Manufacturer': 'gpufleet-sim',
        'Model': identity['model'],
        'SerialNumber': identity['serial'],
        'UUID': identity['uuid'],
        'HostName': identity['node'],
        'Status': {'State': 'Enabled' if power_state == 'On' else 'StandbyOffline', 'Health': 'OK', 'HealthRollup': 'OK'},
        'PowerState': power_state,
        'BiosVersion': FIRMWARE_VERSION,
        'Links': {'Chassis': [link(SERVICE_ROOT + '/Chassis/' + CHASSIS_ID)],
                  'ManagedBy': [link(SERVICE_ROOT + '/Managers/' + MANAGER_ID)]},
        'Actions': {'#ComputerSystem.Reset': {'target': RESET_TARGET, 'ResetType@Redfish.AllowableValues': list(RESET_TYPES)}},
    }
    if last_reset_time:
        document['LastResetTime'] = last_reset_time
    return document


def chassis(identity, power_state):
    return {
        '@odata.type': '#Chassis.v1_23_0.Chassis',
        '@odata.id': SERVICE_ROOT + '/Chassis/' + CHASSIS_ID,
        'Id': CHASSIS_ID,
        'Name': 'Chassis',
        'ChassisType': 'RackMount',
        'Manufacturer': 'gpufleet-sim',
        'Model': identity['model'],
        'SerialNumber': identity['serial'],
        'PowerState': power_state,
        'Status': {'State': 'Enabled', 'Health': 'OK'},
        'Links': {'ComputerSystems': [link(SYSTEM)], 'ManagedBy': [link(SERVICE_ROOT + '/Managers/' + MANAGER_ID)]},
    }


def manager(identity):
    return {
        '@odata.type': '#Manager.v1_17_0.Manager',
        '@odata.id': SERVICE_ROOT + '/Managers/' + MANAGER_ID,
        'Id': MANAGER_ID,
        'Name': 'Manager',
        'ManagerType': 'BMC',
        'Description': 'Simulated BMC of %s' % identity['node'],
        'FirmwareVersion': FIRMWARE_VERSION,
        'PowerState': 'On',
        'Status': {'State': 'Enabled', 'Health': 'OK'},
        'Links': {'ManagerForServers': [link(SYSTEM)], 'ManagerForChassis': [link(SERVICE_ROOT + '/Chassis/' + CHASSIS_ID)]},
    }


def session_service():
    return {
        '@odata.type': '#SessionService.v1_1_8.SessionService',
        '@odata.id': SERVICE_ROOT + '/SessionService',
        'Id': 'SessionService',
        'Name': 'Session Service',
        'ServiceEnabled': True,
        'SessionTimeout': 1800,
        'Status': {'State': 'Enabled', 'Health': 'OK'},
        'Sessions': link(SESSIONS),
    }


def session(session_id, user):
    return {
        '@odata.type': '#Session.v1_3_0.Session',
        '@odata.id': SESSIONS + '/' + session_id,
        'Id': session_id,
        'Name': 'User Session',
        'UserName': user,
    }


def identity_of(node, hardware=None, salt=''):
    """Model, serial and UUID of the simulated system, stable for a node of a fleet."""
    digest = hashlib.sha256(('%s/%s' % (salt, node)).encode('utf-8')).hexdigest()
    return {'node': node, 'model': (hardware or {}).get('profile') or 'gpufleet-sim',
            'serial': 'SIM' + digest[:9].upper(), 'uuid': str(uuid.UUID(digest[:32]))}


class Response:
    """What the service answers: status, headers, a JSON body or None."""

    def __init__(self, status, body=None, headers=None):
        self.status = status
        self.body = body
        self.headers = dict(headers or {})

    def __repr__(self):
        return 'Response(%r, %r)' % (self.status, self.body)


class Bmc:
    """The Redfish service of one node, without HTTP: ``handle(method, path, headers, body)`` -> Response."""

    def __init__(self, node, user, password, power, hardware=None, salt='', log=None, clock=time.time):
        self.identity = identity_of(node, hardware, salt)
        self.user = user
        self.password = password
        self.power = power
        self.log = log or (lambda text: None)
        self.clock = clock
        self.sessions = {}   # token -> (session id, user)
        self.next_session = 1
        self.last_reset_time = None
        self.action_lock = threading.Lock()     # one power action at a time
        self.state_lock = threading.Lock()      # sessions and the transition below
        self.transition = None                  # 'PoweringOn' / 'PoweringOff' while an action runs

    # ------------------------------------------------------------------ authentication

    def credentials_ok(self, user, password):
        return hmac.compare_digest(str(user).encode('utf-8'), self.user.encode('utf-8')) and \
            hmac.compare_digest(str(password).encode('utf-8'), self.password.encode('utf-8'))

    def authenticated(self, headers):
        """The user of a valid basic-auth header or session token, else None."""
        token = headers.get('x-auth-token')
        if token:
            with self.state_lock:
                found = self.sessions.get(token)
            return found[1] if found else None
        authorization = headers.get('authorization', '')
        scheme, dummy, encoded = authorization.partition(' ')
        if scheme.lower() != 'basic':
            return None
        try:
            user, separator, password = base64.b64decode(encoded.strip(), validate=True).decode('utf-8').partition(':')
        except (ValueError, UnicodeDecodeError):
            return None
        return user if separator and self.credentials_ok(user, password) else None

    # ------------------------------------------------------------------ power

    def power_state(self):
        with self.state_lock:
            if self.transition:
                return self.transition
        try:
            return self.power.state()
        except POWER_ERRORS as exc:
            self.log('power state unknown: %s' % exc)
            return 'Off'

    def reset(self, reset_type):
        """Carry out one ResetType; returns the primitives run."""
        with self.action_lock:
            plan = reset_plan(reset_type, self.power.state())
            self.log('ComputerSystem.Reset %s: %s' % (reset_type, ' then '.join(plan) or 'nothing to do'))
            try:
                for step in plan:
                    with self.state_lock:
                        self.transition = 'PoweringOn' if step == 'on' else 'PoweringOff'
                    getattr(self.power, step)()
            finally:
                with self.state_lock:
                    self.transition = None
            if plan:
                self.last_reset_time = time.strftime('%Y-%m-%dT%H:%M:%S+00:00', time.gmtime(self.clock()))
            return plan

    # ------------------------------------------------------------------ requests

    def handle(self, method, path, headers, body=b''):
        """Answer one request; ``headers`` keys are lower case."""
        path = path.split('?', 1)[0].split('#', 1)[0]
        if len(path) > 1:
            path = path.rstrip('/')
        if path == '/redfish' and method in ('GET', 'HEAD'):
            return Response(200, {'v1': SERVICE_ROOT + '/'})
        if path == SERVICE_ROOT and method in ('GET', 'HEAD'):
            return Response(200, service_root(self.identity['uuid']))
        if path == SESSIONS and method == 'POST':
            return self.create_session(body)
        user = self.authenticated(headers)
        if user is None:
            return Response(401, error_body('NoValidSession'), {'WWW-Authenticate': 'Basic realm="gpufleet-sim BMC"'})
        documents = self.documents()
        if path == RESET_TARGET:
            if method != 'POST':
                return Response(405, error_body('OperationNotAllowed'), {'Allow': 'POST'})
            return self.reset_action(body)
        if path.startswith(SESSIONS + '/') and method == 'DELETE':
            return self.delete_session(path[len(SESSIONS) + 1:])
        if path not in documents:
            return Response(404, error_body('ResourceNotFound', 'Resource', path))
        if method not in ('GET', 'HEAD'):
            return Response(405, error_body('OperationNotAllowed'), {'Allow': 'GET, HEAD' + (', POST' if path == SESSIONS else '')})
        return Response(200, documents[path]())

    def documents(self):
        """Path -> function building the document (authenticated resources)."""
        state = self.power_state
        with self.state_lock:
            sessions = dict((entry[0], entry[1]) for entry in self.sessions.values())
        result = {
            SERVICE_ROOT + '/Systems': lambda: collection('Systems', 'ComputerSystemCollection', [SYSTEM]),
            SYSTEM: lambda: computer_system(self.identity, state(), self.last_reset_time),
            SERVICE_ROOT + '/Chassis': lambda: collection('Chassis', 'ChassisCollection', [SERVICE_ROOT + '/Chassis/' + CHASSIS_ID]),
            SERVICE_ROOT + '/Chassis/' + CHASSIS_ID: lambda: chassis(self.identity, state()),
            SERVICE_ROOT + '/Managers': lambda: collection('Managers', 'ManagerCollection', [SERVICE_ROOT + '/Managers/' + MANAGER_ID]),
            SERVICE_ROOT + '/Managers/' + MANAGER_ID: lambda: manager(self.identity),
            SERVICE_ROOT + '/SessionService': session_service,
            SESSIONS: lambda: dict(collection('SessionService/Sessions', 'SessionCollection', [SESSIONS + '/' + key for key in sorted(sessions)]),
                                   Name='Session Collection'),
        }
        for session_id, user in sessions.items():
            result[SESSIONS + '/' + session_id] = (lambda session_id=session_id, user=user: session(session_id, user))
        return result

    @staticmethod
    def parse_body(body):
        try:
            data = json.loads((body or b'{}').decode('utf-8') or '{}')
        except (ValueError, UnicodeDecodeError):
            return None
        return data if isinstance(data, dict) else None

    def reset_action(self, body):
        data = self.parse_body(body)
        if data is None:
            return Response(400, error_body('MalformedJSON'))
        if 'ResetType' not in data:
            return Response(400, error_body('ActionParameterMissing', 'ComputerSystem.Reset', 'ResetType'))
        reset_type = data['ResetType']
        if reset_type not in RESET_TYPES:
            return Response(400, error_body('ActionParameterValueNotInList', reset_type, 'ResetType', 'ComputerSystem.Reset'))
        try:
            self.reset(reset_type)
        except ResetConflict as exc:
            return Response(409, error_body('ResourceInStandby', detail=str(exc)))
        except POWER_ERRORS as exc:
            self.log('ComputerSystem.Reset %s failed: %s' % (reset_type, exc))
            return Response(500, error_body('InternalError', detail='%s failed: %s' % (reset_type, exc)))
        return Response(204)

    def create_session(self, body):
        data = self.parse_body(body)
        if data is None:
            return Response(400, error_body('MalformedJSON'))
        if not self.credentials_ok(data.get('UserName', ''), data.get('Password', '')):
            return Response(401, error_body('NoValidSession'))
        token = secrets.token_hex(16)
        with self.state_lock:
            session_id = str(self.next_session)
            self.next_session += 1
            self.sessions[token] = (session_id, data['UserName'])
        return Response(201, session(session_id, data['UserName']), {'X-Auth-Token': token, 'Location': SESSIONS + '/' + session_id})

    def delete_session(self, session_id):
        with self.state_lock:
            for token, entry in list(self.sessions.items()):
                if entry[0] == session_id:
                    del self.sessions[token]
                    return Response(204)
        return Response(404, error_body('ResourceNotFound', 'Session', session_id))


# ---------------------------------------------------------------------- HTTPS


class Handler(http.server.BaseHTTPRequestHandler):
    """HTTP/1.1 front of a Bmc (``self.server.bmc``)."""

    protocol_version = 'HTTP/1.1'
    server_version = 'gpufleet-sim-bmc/1.0'

    def answer(self):
        length = int(self.headers.get('Content-Length') or 0)
        body = self.rfile.read(length) if length else b''
        headers = dict((key.lower(), value) for key, value in self.headers.items())
        response = self.server.bmc.handle(self.command, self.path, headers, body)
        payload = b'' if response.body is None else json.dumps(response.body, indent=2).encode('utf-8')
        self.send_response(response.status)
        if response.body is not None:
            self.send_header('Content-Type', 'application/json; charset=utf-8')
        self.send_header('OData-Version', '4.0')
        self.send_header('Cache-Control', 'no-cache')
        for key, value in response.headers.items():
            self.send_header(key, value)
        self.send_header('Content-Length', str(len(payload)))
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(payload)

    do_GET = do_HEAD = do_POST = do_PATCH = do_PUT = do_DELETE = answer

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        self.server.bmc.log('%s %s' % (self.address_string(), format % args))


class HttpsServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """Threaded HTTPS server; the TLS handshake runs in the request's thread, so a stalled client blocks no one."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, bmc, context):
        self.bmc = bmc
        self.context = context
        http.server.HTTPServer.__init__(self, address, Handler)

    def finish_request(self, request, client_address):
        request.settimeout(30)
        try:
            connection = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            self.bmc.log('%s TLS handshake failed (HTTPS only): %s' % (client_address[0], exc))
            return
        try:
            http.server.HTTPServer.finish_request(self, connection, client_address)
        finally:
            try:
                connection.close()
            except OSError:
                pass


def tls_context(cert, key):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


def serve(bmc, port, cert, key, address='127.0.0.1'):
    """Start the HTTPS server in a thread; returns the server (``shutdown()`` stops it, ``server_address`` names the port)."""
    server = HttpsServer((address, port), bmc, tls_context(cert, key))
    threading.Thread(target=server.serve_forever, name='bmc-https', daemon=True).start()
    return server


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--node', required=True)
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument('--address', default='127.0.0.1')
    parser.add_argument('--cert', required=True)
    parser.add_argument('--key', required=True)
    parser.add_argument('--credentials', required=True, help='JSON file {"user": ..., "password": ...}')
    parser.add_argument('--container', required=True, help='the podman container that is the node')
    parser.add_argument('--containers-conf', help='CONTAINERS_CONF for podman')
    parser.add_argument('--faults', help="the node's faults.json on the host (a power cycle clears reboot_hang)")
    parser.add_argument('--hardware', help="the node's hardware.json on the host (model)")
    parser.add_argument('--fleet', default='', help='fleet state folder (makes serial and UUID unique per fleet)')
    arguments = parser.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import podman_power  # pylint: disable=import-outside-toplevel,import-error

    def log(text):
        sys.stderr.write('%s bmc %s: %s\n' % (time.strftime('%Y-%m-%dT%H:%M:%S'), arguments.node, text))
        sys.stderr.flush()

    with open(arguments.credentials, encoding='utf-8') as handle:
        credentials = json.load(handle)
    hardware = None
    if arguments.hardware and os.path.exists(arguments.hardware):
        with open(arguments.hardware, encoding='utf-8') as handle:
            hardware = json.load(handle)
    power = podman_power.PodmanPower(arguments.container, containers_conf=arguments.containers_conf,
                                     faults_path=arguments.faults, log=log)
    bmc = Bmc(arguments.node, credentials['user'], credentials['password'], power, hardware=hardware, salt=arguments.fleet, log=log)
    server = serve(bmc, arguments.port, arguments.cert, arguments.key, arguments.address)
    log('Redfish service on https://%s:%d/redfish/v1/ for container %s' % (arguments.address, arguments.port, arguments.container))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    while not stop.wait(3600):
        pass
    server.shutdown()
    server.server_close()
    log('stopped')
    return 0


if __name__ == '__main__':
    sys.exit(main())
