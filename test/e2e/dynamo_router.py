"""Two `spanc serve` replicas behind NVIDIA Dynamo's frontend and KV router
(issue 27, deploy/dynamo/), on loopback with file discovery.

Each replica publishes --kv-events; its adapter (deploy/dynamo/
spanc_worker.py) registers it and points Dynamo's subscriber at them. The
test checks that a repeated document-heavy chat lands on the replica that
holds its blocks (the replica whose counters move, usage.prompt_tokens_
details.cached_tokens covering the documents, and that replica's
vllm:prefix_cache_hits_total), for several document sets spread over both
replicas; then that killing one replica mid-load loses no request that was
not in flight on it: every request ends (none hangs), each failure is a
clean JSON error, at most the requests in flight on the killed replica
fail, and every request after its adapter left is answered by the other.

Run under the Dynamo environment (tools/setup.sh --with-dynamo):
    dynamo_router.py SPANC MODEL.gguf
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serve_harness  # noqa: E402
from router_harness import (NAME, QUESTIONS, chat, check_kill,  # noqa: E402
                            check_repeats, free_port, system_prompt)
from serve_harness import Server, check, run  # noqa: E402

class Deployment:
    """The frontend, two replicas and their adapters."""

    def __init__(self, spanc, model, work):
        self.work = work
        self.python = sys.executable
        self.env = dict(os.environ, DYN_FILE_KV=os.path.join(work, "kv"),
                        HF_HUB_OFFLINE="1", DYN_LOG="warn",
                        # Dynamo keeps model cards under $HOME/.cache (Bazel
                        # sets no HOME): the test's own folder.
                        HOME=work,
                        DYN_SELF_HOST_METADATA="0")
        self.card = os.path.join(work, "card")
        subprocess.run([self.python, os.path.join(DEPLOY, "model_card.py"),
                        model, self.card], check=True, timeout=120)
        self.replicas, self.adapters, self.logs = [], [], []
        for index in range(2):
            replica = Server(spanc, model, "--kv-events", "tcp://127.0.0.1:0",
                             "--served-model-name", NAME,
                             "--max-tokens-limit", "64")
            events = [line.split("KV events on ")[1].strip()
                      for line in replica.stderr if "KV events on" in line]
            check(events, "replica %d prints its KV event address" % index)
            self.replicas.append(replica)
            self.adapters.append(self.start_adapter(index, events[0]))
        self.port = free_port()
        self.frontend = self.spawn("frontend", [
            "-m", "dynamo.frontend", "--http-host", "127.0.0.1",
            "--http-port", str(self.port), "--router-mode", "kv",
            "--discovery-backend", "file", "--request-plane", "tcp",
            "--event-plane", "zmq", "--migration-limit", "3"])
        self.wait_ready(2)

    def spawn(self, name, arguments):
        log = open(os.path.join(self.work, name + ".log"), "w")
        self.logs.append(log.name)
        process = subprocess.Popen([self.python] + arguments, env=self.env,
                                   stdout=log, stderr=subprocess.STDOUT)
        PROCESSES.append(process)
        return process

    def start_adapter(self, index, events):
        return self.spawn("adapter%d" % index, [
            os.path.join(DEPLOY, "spanc_worker.py"),
            "--spanc", "http://127.0.0.1:%d" % self.replicas[index].port,
            "--kv-events", events, "--model-dir", self.card,
            "--served-model-name", NAME])

    def instances(self):
        folder = os.path.join(self.work, "kv", "v1", "instances")
        names = os.listdir(folder) if os.path.isdir(folder) else []
        return [n for n in names if "generate" in n]

    def wait_ready(self, count, timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if len(self.instances()) == count:
                try:
                    with urllib.request.urlopen(
                            "http://127.0.0.1:%d/v1/models" % self.port,
                            timeout=5) as response:
                        if json.loads(response.read())["data"]:
                            return True
                except (urllib.error.URLError, OSError, ValueError):
                    pass
            dead = [p for p in [self.frontend] + self.adapters
                    if p.poll() is not None]
            if dead:
                check(False, "a Dynamo process exited while starting")
                return False
            time.sleep(0.5)
        check(False, "Dynamo registered %d workers within %ds (%d)" % (
            count, timeout, len(self.instances())))
        return False

    def stop(self):
        for process in self.adapters + [self.frontend]:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.adapters + [self.frontend]:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def tail(self):
        for name in self.logs:
            with open(name) as log:
                lines = [line for line in log if "http-request" not in line]
            sys.stdout.write("--- %s\n%s" % (name, "".join(lines[:25] +
                                                            lines[-8:])))


def direct(replica, body):
    """Sends `body` to one replica itself, past Dynamo."""
    status, _, _ = replica.json("POST", "/v1/chat/completions", body,
                                timeout=180)
    check(status == 200, "a direct request answers 200")


def check_routing(deployment):
    """Document sets warmed on each replica directly (Dynamo routed none
    of them: it knows them from the KV events alone), then sent through
    the frontend: each lands on the replica that holds it."""
    sets = {0: [0, 1, 2], 1: [3, 4, 5]}
    for index, documents in sets.items():
        direct(deployment.replicas[index],
               system_prompt(chat(documents, QUESTIONS[0]), index))
    time.sleep(1)  # the events reach the router
    check_repeats(deployment.port, deployment.replicas, sets,
                  homes={0: 0, 1: 1})


DEPLOY = None
# Every Dynamo process started, so that none outlives the test, whatever
# fails (serve_harness.run kills the replicas).
PROCESSES = []


def main(spanc, model):
    global DEPLOY
    # Bazel's runfiles hold deploy/dynamo; by hand, the clone does.
    DEPLOY = os.path.abspath("deploy/dynamo")
    if not os.path.isdir(DEPLOY):
        DEPLOY = os.path.join(HERE, "..", "..", "deploy", "dynamo")
    with tempfile.TemporaryDirectory(prefix="spanc-dynamo-") as work:
        deployment = None
        try:
            deployment = Deployment(spanc, model, work)
            check_routing(deployment)
            check_kill(deployment.port, deployment.replicas,
                       gone=lambda: len(deployment.instances()) == 1)
        finally:
            if deployment is not None:
                if serve_harness.failures:
                    deployment.tail()
                deployment.stop()
            for process in PROCESSES:
                if process.poll() is None:
                    process.kill()
                    process.wait()


if __name__ == "__main__":
    sys.exit(run(main))
