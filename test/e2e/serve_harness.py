"""What the `spanc serve` end-to-end tests share: checks, servers, /metrics.

serve.py, spnl_serve.py, serve_openai.py and serve_load.py import it from
their own directory (Bazel puts it in their runfiles). It runs on the system
python3 and on the .venv interpreter alike: the standard library only.
A test's main(spanc, model) runs under run(), which kills every server the
test started, whatever happens, and reports the failed checks.
"""

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

KEY = "test-key-123"
# Short documents the serving tests query, as spans or chat messages (one
# list, so the tests' prompts are comparable).
SAMPLE_DOCUMENTS = [
    "The block pool owns every KV block and evicts the least recently used.",
    "Rotary embeddings rotate each key by an angle proportional to position.",
    "A span is a child of a plus: cached on its own, reused in any order.",
    "Bulk ordering sorts the queries of a bulk so that shared prefixes meet.",
    "The scheduler admits calls, plans relocations and fills the step budget.",
    "Prefix caching reuses blocks only when everything before them matches.",
    "Continuous batching adds new requests to the next step of the engine.",
    "A tail follows a plus and attends to every segment before it in order.",
]
failures = []
servers = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL: " + message, flush=True)
    return condition


class Server:
    """A `spanc serve` on a free loopback port (it prints the port)."""

    def __init__(self, spanc, model, *options):
        command = [spanc, "serve", "--model", model, "--port", "0", "-t", "1",
                   "--fixed-threads"] + list(options)
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL, text=True)
        servers.append(self)
        self.stderr = []
        deadline = time.time() + 120
        self.port = None
        while time.time() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            self.stderr.append(line)
            found = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
            if found:
                self.port = int(found.group(1))
                break
        if self.port is None:
            raise RuntimeError("spanc serve did not start: " +
                               "".join(self.stderr))
        # Keep draining stderr so the server never blocks on it.
        self.drain = threading.Thread(target=self._drain, daemon=True)
        self.drain.start()

    def _drain(self):
        for line in self.process.stderr:
            self.stderr.append(line)

    def connection(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port,
                                          timeout=timeout)

    def request(self, method, path, body=None, key=KEY, headers=None,
                timeout=60):
        """Returns (status, headers, body bytes)."""
        all_headers = dict(headers or {})
        if key is not None:
            all_headers["Authorization"] = "Bearer " + key
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            all_headers.setdefault("Content-Type", "application/json")
        connection = self.connection(timeout)
        try:
            connection.request(method, path, body=body, headers=all_headers)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), \
                response.read()
        finally:
            connection.close()

    def json(self, method, path, body=None, **options):
        status, headers, data = self.request(method, path, body, **options)
        try:
            document = json.loads(data) if data else None
        except ValueError:
            document = {"unparsed": data.decode("utf-8", "replace")}
        return status, headers, document

    def stream(self, path, body, close_after=None):
        """Posts with stream: true; returns (status, events) where events are
        the parsed `data:` payloads ("[DONE]" as is). With close_after, the
        connection is dropped after that many events."""
        connection = self.connection()
        events = []
        try:
            connection.request("POST", path, body=json.dumps(body), headers={
                "Authorization": "Bearer " + KEY,
                "Content-Type": "application/json"})
            response = connection.getresponse()
            if response.status != 200:
                return response.status, [json.loads(response.read())]
            check(response.getheader("Content-Type", "").startswith(
                "text/event-stream"), "a stream is text/event-stream")
            for raw in response:
                line = raw.decode("utf-8").rstrip("\r\n")
                if not line:
                    continue
                check(line.startswith("data: "), "SSE line: %r" % line)
                payload = line[len("data: "):]
                events.append(payload if payload == "[DONE]"
                              else json.loads(payload))
                if close_after is not None and len(events) >= close_after:
                    break
            return response.status, events
        finally:
            connection.close()

    def metrics(self):
        """Returns (/metrics text, {sample with its labels: value}); a
        server without --api-key ignores the key sent."""
        status, _, data = self.request("GET", "/metrics")
        check(status == 200, "/metrics answers 200")
        values = {}
        for line in data.decode().splitlines():
            if line.startswith("#") or not line:
                continue
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
        return data.decode(), values

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Signals the server and returns its exit status."""
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return None


def metric(values, name, **labels):
    """A sample's value, matching the labels given (model_name aside)."""
    for key, value in values.items():
        if not key.startswith(name + "{"):
            continue
        if all('%s="%s"' % item in key for item in labels.items()):
            return value
    return None


def stream_text(events, index=0):
    """The content a chat or completions stream delivered for one choice."""
    text = ""
    for event in events:
        if event == "[DONE]" or "choices" not in event:
            continue
        for choice in event["choices"]:
            if choice["index"] == index:
                text += choice.get("delta", {}).get("content", "") or \
                    choice.get("text", "")
    return text


def kill_servers():
    """Kills every server still running (a test's own clean-up that needs
    them gone calls it first; run() calls it again)."""
    for each in servers:
        if each.process.poll() is None:
            each.process.kill()
            each.process.wait()


def run(main):
    """Runs main(SPANC, TINY_MODEL) from the command line, kills every
    server left and reports: each failed check was printed as it happened,
    then their count and each server's last stderr lines. Returns the exit
    status."""
    spanc, model = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    try:
        main(spanc, model)
    finally:
        kill_servers()
    if failures:
        print("%d check(s) failed" % len(failures))
        for each in servers:
            sys.stdout.write("".join(each.stderr[-20:]))
        return 1
    print("PASSED")
    return 0
