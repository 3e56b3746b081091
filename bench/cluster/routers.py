"""The replicas and routers `spanc bench cluster` measures (run.py): each
started fresh, on loopback, and stopped after its run.

  round-robin, span, prefix  deploy/router/span_router.py with that
                             --policy, under this interpreter (.venv:
                             pyzmq, msgpack); it forwards /v1/query, so
                             the workload goes as span queries;
  sglang                     sglang-router 0.3.2 --policy cache_aware
                             (.venv-sglang; tools/setup.sh
                             --with-sglang-router);
  dynamo                     NVIDIA Dynamo 1.6.1's frontend and stock KV
                             router, a deploy/dynamo/spanc_worker.py per
                             replica (.venv-dynamo; --with-dynamo).
Neither sglang-router nor Dynamo's frontend forwards /v1/query, so they
carry the same documents and questions as chats (the documents as user
messages in the same shuffled order): the reuse they can get is prefix
reuse. Each replica is `spanc serve -t 1 --fixed-threads` with KV events
and their replay socket.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

NAME = "smollm2"
SPAN_ROUTERS = ("round-robin", "span", "prefix")
CHAT_ROUTERS = ("sglang", "dynamo")


class Unavailable(Exception):
    """A router this machine does not have (a clear note, not a failure)."""


def get(port, path, timeout=5):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path),
                                timeout=timeout) as response:
        return response.status, response.read()


def wait_for(ready, what, timeout, processes=()):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if ready():
                return
        except (urllib.error.URLError, OSError, ValueError, KeyError):
            pass
        for process in processes:
            if process.poll() is not None:
                raise RuntimeError("%s exited while starting (status %s)"
                                   % (what, process.returncode))
        time.sleep(0.3)
    raise RuntimeError("%s not ready within %d s" % (what, timeout))


def stop_process(process, timeout=20):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class Replica:
    """A `spanc serve -t 1` with KV events, on a free loopback port."""

    def __init__(self, spanc, model, kv_cache):
        self.process = subprocess.Popen(
            [spanc, "serve", "--model", model, "--port", "0", "-t", "1",
             "--fixed-threads", "--kv-cache", str(kv_cache),
             "--served-model-name", NAME, "--max-tokens-limit", "64",
             "--kv-events", "tcp://127.0.0.1:0",
             "--kv-events-replay", "tcp://127.0.0.1:0"],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.events = self.replay = self.port = None
        lines = []
        while self.port is None:
            line = self.process.stderr.readline()
            if not line:
                raise RuntimeError("spanc serve did not start: " +
                                   "".join(lines[-10:]))
            lines.append(line)
            found = re.search(r"KV events on (\S+), replay on (\S+)", line)
            if found:
                self.events, self.replay = found.group(1), found.group(2)
            found = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
            if found:
                self.port = int(found.group(1))
        threading.Thread(target=lambda: [None for _ in self.process.stderr],
                         daemon=True).start()

    def spec(self):
        return "http://127.0.0.1:%d,%s,%s" % (self.port, self.events,
                                              self.replay)

    def counters(self):
        """(prompt tokens queried, tokens hit, requests finished)."""
        _, data = get(self.port, "/metrics")
        values = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                key = name.split("{", 1)[0]
                values[key] = values.get(key, 0.0) + float(value)
        return (values.get("vllm:prefix_cache_queries_total", 0.0),
                values.get("vllm:prefix_cache_hits_total", 0.0),
                values.get("vllm:request_success_total", 0.0))

    def stop(self):
        stop_process(self.process, 30)


def environment_python(root, link, flag):
    python = os.path.join(root, link, "bin", "python3")
    if not os.path.exists(os.path.join(root, link)):
        raise Unavailable("%s is not set up (tools/setup.sh %s)"
                          % (link, flag))
    if not os.access(python, os.X_OK):
        raise Unavailable("%s has no python3 (tools/setup.sh %s again)"
                          % (link, flag))
    return python


class SpanRouter:
    carries = "span queries"

    def __init__(self, policy, root, spanc, model, replicas, work):
        self.port = None
        script = os.path.join(root, "deploy", "router", "span_router.py")
        arguments = [sys.executable, script, "--port", "0", "--policy",
                     policy, "--spanc", spanc, "--model", model]
        for replica in replicas:
            arguments += ["--replica", replica.spec()]
        self.log = open(os.path.join(work, "span_router.log"), "w")
        self.process = subprocess.Popen(arguments, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True)
        line = self.process.stderr.readline()
        found = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
        if not found:
            raise RuntimeError("span_router did not start: %s%s" % (
                line, self.process.stderr.read()[-2000:]))
        self.port = int(found.group(1))
        threading.Thread(target=lambda: self.log.writelines(
            self.process.stderr), daemon=True).start()

    def stats(self):
        return json.loads(get(self.port, "/router/stats")[1])

    def stop(self):
        stop_process(self.process)


class SglangRouter:
    carries = "chats"

    def __init__(self, root, replicas, work, free_port):
        python = environment_python(root, ".venv-sglang",
                                    "--with-sglang-router")
        self.port = free_port()
        self.process = subprocess.Popen(
            [python, "-m", "sglang_router.launch_router", "--host",
             "127.0.0.1", "--port", str(self.port), "--worker-urls"] +
            ["http://127.0.0.1:%d" % r.port for r in replicas] +
            ["--policy", "cache_aware", "--log-level", "warn"],
            stdout=open(os.path.join(work, "sglang.log"), "w"),
            stderr=subprocess.STDOUT, env=dict(os.environ, HOME=work))
        wait_for(lambda: get(self.port, "/health")[0] == 200,
                 "sglang-router", 120, [self.process])

    def stop(self):
        stop_process(self.process)


class DynamoRouter:
    carries = "chats"

    def __init__(self, root, model, replicas, work, free_port):
        python = environment_python(root, ".venv-dynamo", "--with-dynamo")
        sys.path.insert(0, os.path.join(root, "deploy", "dynamo"))
        import launch
        self.port = free_port()
        self.processes = []
        try:
            # One model card for every run (the parent of each run's
            # folder).
            self.dynamo = launch.Deployment(
                python, model, [("http://127.0.0.1:%d" % r.port, r.events)
                                for r in replicas], work, self.port, NAME,
                card=os.path.join(os.path.dirname(work), "card"),
                on_spawn=self.processes.append)
            self.dynamo.wait_ready(len(replicas), timeout=240)
        except BaseException:
            for process in self.processes:
                stop_process(process)
            raise

    def stop(self):
        self.dynamo.stop()


def start_router(name, root, spanc, model, replicas, work, free_port):
    if name in SPAN_ROUTERS:
        return SpanRouter(name, root, spanc, model, replicas, work)
    if name == "sglang":
        return SglangRouter(root, replicas, work, free_port)
    if name == "dynamo":
        return DynamoRouter(root, model, replicas, work, free_port)
    raise ValueError("unknown router %r (%s)" % (
        name, ", ".join(SPAN_ROUTERS + CHAT_ROUTERS)))
