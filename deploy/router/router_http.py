"""span_router.py's HTTP side: reads a client's request within bounds,
asks router_core.Router for a replica, forwards the request there and
the answer back (streams as they come), and turns a replica's failure
into a clean JSON error. Standard library only (http.server, one thread
per connection, at most --max-connections of them).
"""

import http.client
import http.server
import json
import socket
import threading
import time

ROUTED = ("/v1/query", "/v1/query/execute", "/v1/chat/completions",
          "/v1/completions")
# Headers that belong to one connection, not to the request (RFC 9110).
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate",
              "proxy-authorization", "te", "trailer", "transfer-encoding",
              "upgrade", "host", "content-length"}


class ClientError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class ReplicaFailed(Exception):
    """The replica failed after the request reached it."""


def error_body(status, message):
    kind = {404: "not_found_error", 503: "service_unavailable_error"}.get(
        status, "server_error" if status >= 500 else "invalid_request_error")
    return json.dumps({"error": {"message": message, "type": kind,
                                 "param": None, "code": status}}).encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "span_router"
    router = None   # set by make_server
    args = None

    def log_message(self, *_):
        pass  # quiet: /router/stats says what happened

    # --- Replies ---------------------------------------------------------------

    def reply(self, status, body, content_type="application/json",
              replica=None, close=False):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if replica is not None:
            self.send_header("X-Spanc-Replica", str(replica))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def fail(self, status, message, close=False):
        self.reply(status, error_body(status, message), close=close)

    # --- GET ---------------------------------------------------------------------

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path == "/health":
            up = self.router.any_up()
            self.reply(200 if up else 503, json.dumps(
                {"status": "ok" if up else "no replica is up"}).encode())
        elif path == "/router/stats":
            self.reply(200, json.dumps(self.router.stats(), indent=1).encode())
        elif path == "/metrics":
            self.reply(200, self.router.metrics().encode(),
                       "text/plain; version=0.0.4")
        elif path == "/v1/models":
            self.forward(path, b"", None, None)
        elif path in ROUTED:
            self.refuse_method()
        else:
            self.fail(404, "no route for GET %s" % path)

    def refuse_method(self):
        """Any other method: 405 JSON naming the one the path takes."""
        path = self.path.split("?", 1)[0]
        allowed = "POST" if path in ROUTED else "GET"
        self.close_connection = True
        self.send_response(405)
        body = error_body(405, "%s takes %s, not %s" % (path, allowed,
                                                        self.command))
        self.send_header("Allow", allowed)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = refuse_method

    # --- POST --------------------------------------------------------------------

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        try:
            body = self.read_body()
        except ClientError as error:
            self.drain()
            self.fail(error.status, str(error), close=True)
            return
        except (socket.timeout, OSError):
            self.close_connection = True
            return
        if path not in ROUTED:
            if path in ("/health", "/router/stats", "/metrics",
                        "/v1/models"):
                self.refuse_method()
            else:
                self.fail(404, "no route for POST %s" % path)
            return
        blocks, tokens = self.router.plan(
            path, body, self.headers.get("Authorization"))
        self.forward(path, body, blocks, tokens)

    def drain(self):
        """Reads and drops what the client still sends (at most 1 MiB, for
        at most 1 s), so that it reads the error instead of a reset."""
        deadline = time.monotonic() + 1.0
        try:
            left = 1 << 20
            while left > 0 and time.monotonic() < deadline:
                self.connection.settimeout(max(0.001, deadline - time.monotonic()))
                data = self.rfile.read1(min(left, 65536))
                if not data:
                    break
                left -= len(data)
        except OSError:
            pass

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self.read_chunked()
        length = self.headers.get("Content-Length", "0").strip() or "0"
        if not length.isdigit():
            raise ClientError(400, "Content-Length is not a number")
        if int(length) > self.args.max_body:
            raise ClientError(413, "the body has %s bytes, past --max-body "
                              "%d" % (length, self.args.max_body))
        body = self.rfile.read(int(length))
        if len(body) < int(length):
            raise ClientError(400, "the body ended early")
        return body

    def read_chunked(self):
        body = bytearray()
        while True:
            line = self.rfile.readline(64)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ClientError(400, "a malformed chunk size") from None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(body)
            if len(body) + size > self.args.max_body:
                raise ClientError(413, "the body passes --max-body %d"
                                  % self.args.max_body)
            body += self.rfile.read(size)
            self.rfile.readline(8)

    # --- Forwarding --------------------------------------------------------------

    def forward(self, path, body, blocks, tokens):
        """Sends the request to the best replica that takes it; a replica
        that refuses the connection is marked down and the next one
        tried."""
        self.headers_sent = False
        tried = set()
        while True:
            decision = self.router.choose(path, blocks, tokens, tried)
            if decision is None:
                self.fail(503, "no replica is up" if not tried else
                          "no replica took the request (tried %s)"
                          % sorted(tried))
                return
            replica = decision.replica
            connection = replica.connection(self.args.connect_timeout)
            try:
                connection.connect()
            except OSError as error:
                connection.close()
                self.router.finished(decision, refused=True)
                self.router.mark_down(replica, "connection: %s" % error)
                tried.add(replica.index)
                continue
            try:
                self.relay(connection, decision, body)
            except ReplicaFailed as error:
                self.router.finished(decision, failed=True)
                self.try_fail(502, "replica %d (%s) failed while the request "
                              "was in flight: %s" % (replica.index,
                                                     replica.url, error))
            except OSError:
                self.router.finished(decision)  # the client went away
                self.close_connection = True
            else:
                self.router.finished(decision)
            finally:
                connection.close()
            return

    def try_fail(self, status, message):
        if self.headers_sent:
            return
        try:
            self.fail(status, message, close=True)
        except OSError:
            self.close_connection = True

    def relay(self, connection, decision, body):
        connection.sock.settimeout(self.args.replica_timeout)
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in HOP_BY_HOP}
        headers["Content-Length"] = str(len(body))
        headers["Host"] = "%s:%d" % (decision.replica.host,
                                     decision.replica.port)
        try:
            connection.request(self.command, self.path, body=body or None,
                               headers=headers)
            response = connection.getresponse()
        except (OSError, http.client.HTTPException) as error:
            raise ReplicaFailed(str(error) or type(error).__name__) from None
        streamed = "text/event-stream" in response.getheader(
            "Content-Type", "") or response.getheader("Content-Length") is None
        if not streamed:
            try:
                data = response.read()
            except (OSError, http.client.HTTPException) as error:
                raise ReplicaFailed(str(error) or type(error).__name__) \
                    from None
        self.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header("X-Spanc-Replica", str(decision.replica.index))
        if not streamed:
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.headers_sent = True
            self.wfile.write(data)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.headers_sent = True
        self.relay_stream(response, decision)

    def relay_stream(self, response, decision):
        while True:
            try:
                data = response.read1(65536)
            except (OSError, http.client.HTTPException) as error:
                # In flight on a replica that failed: the client gets an
                # error event and the stream's end, not a cut connection.
                message = "replica %d failed mid-stream: %s" % (
                    decision.replica.index, str(error) or
                    type(error).__name__)
                self.write_chunk(b"data: " + json.dumps({"error": {
                    "message": message, "type": "server_error",
                    "code": 502}}).encode() + b"\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.close_connection = True
                raise ReplicaFailed(message) from None
            if not data:
                self.wfile.write(b"0\r\n\r\n")
                return
            self.write_chunk(data)

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address, handler, max_connections):
        self.slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            try:
                body = error_body(503, "the router is at --max-connections")
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\n"
                                b"Content-Type: application/json\r\n"
                                b"Connection: close\r\nContent-Length: %d\r\n"
                                b"\r\n%s" % (len(body), body))
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def make_server(router, args):
    handler = type("RouterHandler", (Handler,), {
        "router": router, "args": args, "timeout": args.client_timeout})
    return Server((args.host, args.port), handler, args.max_connections)
