# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The HTTP plumbing: the request handler, the threaded server with its controller loop, start / stop, a kubeconfig."""

import copy
import json
import sys
import threading
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .api import Api, Response
from .common import ApiError, TICK_SECONDS
from .store import Store


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    # TCP_NODELAY, as Go's net/http sets it: without it a keep-alive client waits for the delayed ACK (40 ms a request).
    disable_nagle_algorithm = True
    server_version = 'gpufleet-fake-apiserver'
    sys_version = ''

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        if getattr(self.server, 'verbose', False):
            sys.stderr.write('%s - %s\n' % (self.address_string(), format % args))

    def _body(self):
        if 'chunked' in (self.headers.get('Transfer-Encoding') or '').lower():
            data = b''
            while True:
                size = int(self.rfile.readline().strip().split(b';')[0] or b'0', 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get('Content-Length') or 0)
        return self.rfile.read(length) if length else b''

    def _dispatch(self, method):
        body = self._body()
        try:
            response = self.server.api.handle(method, self.path, self.headers, body)
        except Exception as error:  # a bug here must still answer like an apiserver does
            response = Response(500, ApiError(500, 'InternalError', 'Internal error occurred: %s: %s' % (type(error).__name__, error), {}).status())
            if getattr(self.server, 'verbose', False):
                traceback.print_exc()
        entry = {'time': time.time(), 'method': method, 'path': self.path, 'contentType': self.headers.get('Content-Type'),
                 'accept': self.headers.get('Accept'), 'userAgent': self.headers.get('User-Agent'), 'code': response.code,
                 'warnings': list(response.headers.get('Warning') or [])}
        if body:
            try:
                entry['body'] = json.loads(body.decode('utf-8'))
            except ValueError:
                entry['body'] = body.decode('utf-8', 'replace')
        if not self.path.startswith('/_sim'):
            self.server.store.log_request(entry)
        if response.stream is not None:
            self._stream(response)
            return
        payload = response.body
        if isinstance(payload, (dict, list)):
            payload = (json.dumps(payload, separators=(',', ':')) + '\n').encode('utf-8')
        elif isinstance(payload, str):
            payload = payload.encode('utf-8')
        self.send_response(response.code)
        self.send_header('Content-Type', response.content_type)
        self.send_header('Content-Length', str(len(payload)))
        self.send_header('Cache-Control', 'no-cache, private')
        self.send_header('Audit-Id', str(uuid.uuid4()))
        for key, value in response.headers.items():
            for item in (value if isinstance(value, list) else [value]):
                self.send_header(key, item)
        self.end_headers()
        self.wfile.write(payload)

    def _stream(self, response):
        self.send_response(response.code)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Transfer-Encoding', 'chunked')
        self.send_header('Cache-Control', 'no-cache, private')
        self.end_headers()
        self.close_connection = True
        state = {'open': True}

        def write(data):
            try:
                self.wfile.write(('%x\r\n' % len(data)).encode('ascii') + data + b'\r\n')
                self.wfile.flush()
            except (OSError, ValueError):
                state['open'] = False

        def alive():
            return state['open'] and not getattr(self.server, 'stopping', False)

        response.stream(write, alive)
        if state['open']:
            try:
                self.wfile.write(b'0\r\n\r\n')
                self.wfile.flush()
            except (OSError, ValueError):
                pass

    def do_GET(self):
        self._dispatch('GET')

    def do_POST(self):
        self._dispatch('POST')

    def do_PUT(self):
        self._dispatch('PUT')

    def do_PATCH(self):
        self._dispatch('PATCH')

    def do_DELETE(self):
        self._dispatch('DELETE')


class FakeApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, store, port=0, verbose=False):
        ThreadingHTTPServer.__init__(self, ('127.0.0.1', port), Handler)
        self.store = store
        self.verbose = verbose
        self.stopping = False
        self.api = Api(store, '127.0.0.1:%d' % self.server_address[1])
        self.controllers = threading.Thread(target=self._run_controllers, name='fake-apiserver-controllers')
        self.controllers.daemon = True
        self._stop_controllers = threading.Event()

    @property
    def port(self):
        return self.server_address[1]

    @property
    def url(self):
        return 'http://127.0.0.1:%d' % self.port

    def _run_controllers(self):
        while not self._stop_controllers.wait(TICK_SECONDS):
            try:
                self.store.tick()
            except Exception:  # keep the controllers running; a bug shows on stderr
                traceback.print_exc()


def load_state(state):
    """A state document, a path to one, or None."""
    if state is None:
        return {}
    if isinstance(state, dict):
        return copy.deepcopy(state)
    with open(state, encoding='utf-8') as handle:
        return json.load(handle)


def start(state=None, port=0, verbose=False):
    """Start a server in this process: returns (server, thread, url)."""
    server = FakeApiServer(Store(load_state(state)), port, verbose)
    server.controllers.start()
    thread = threading.Thread(target=server.serve_forever, kwargs={'poll_interval': 0.1}, name='fake-apiserver')
    thread.daemon = True
    thread.start()
    return server, thread, server.url


def stop(server):
    """Stop a server from start()."""
    server.stopping = True
    server._stop_controllers.set()
    with server.store.lock:
        server.store.changed.notify_all()
    server.shutdown()
    server.server_close()


def write_kubeconfig(path, url, namespace='default'):
    """A kubeconfig for the server (plain HTTP, no credentials)."""
    config = {'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'gpufleet-sim',
              'clusters': [{'name': 'gpufleet-sim', 'cluster': {'server': url}}],
              'users': [{'name': 'gpufleet-sim', 'user': {}}],
              'contexts': [{'name': 'gpufleet-sim', 'context': {'cluster': 'gpufleet-sim', 'user': 'gpufleet-sim', 'namespace': namespace}}]}
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump(config, handle, indent=2)
    return path
