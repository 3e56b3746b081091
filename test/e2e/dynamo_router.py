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

import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serve_harness  # noqa: E402
from router_harness import (NAME, QUESTIONS, chat, check_kill,  # noqa: E402
                            check_repeats, free_port, system_prompt)
from serve_harness import Server, check, run  # noqa: E402

class Deployment:
    """Two replicas, their adapters and the frontend
    (deploy/dynamo/launch.py)."""

    def __init__(self, spanc, model, work):
        sys.path.insert(0, DEPLOY)
        import launch
        self.replicas = []
        endpoints = []
        for index in range(2):
            replica = Server(spanc, model, "--kv-events", "tcp://127.0.0.1:0",
                             "--served-model-name", NAME,
                             "--max-tokens-limit", "64")
            events = [line.split("KV events on ")[1].strip()
                      for line in replica.stderr if "KV events on" in line]
            check(events, "replica %d prints its KV event address" % index)
            self.replicas.append(replica)
            endpoints.append(("http://127.0.0.1:%d" % replica.port,
                              events[0]))
        self.port = free_port()
        self.dynamo = launch.Deployment(
            sys.executable, model, endpoints, work, self.port, NAME,
            migration_limit=3, on_spawn=PROCESSES.append)
        try:
            self.dynamo.wait_ready(2)
        except RuntimeError as error:
            check(False, str(error))

    def instances(self):
        return self.dynamo.instances()

    def stop(self):
        self.dynamo.stop()

    def tail(self):
        for name in self.dynamo.logs:
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
