"""Two `spanc serve` replicas behind sglang-router 0.3.2 --policy
cache_aware (issue 27), on loopback.

sglang-router needs nothing from the workers but OpenAI's endpoints: it
keeps an approximate radix tree of the request text it routed and sends a
request to the worker whose tree matches most of it (offline it cannot
fetch a tokenizer, says so, and still routes). The test checks that a
repeated document-heavy chat lands on the replica its first request went
to and reuses its blocks (usage.prompt_tokens_details.cached_tokens, the
replica's counters), for document sets spread over the replicas; then
that killing one replica under load loses no request that was not in
flight on it (the router's health checks mark it unhealthy; requests
sent after that all succeed).

Run under the router's environment (tools/setup.sh --with-sglang-router):
    sglang_router.py SPANC MODEL.gguf
"""

import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serve_harness  # noqa: E402
from router_harness import NAME, check_kill, check_repeats  # noqa: E402
from router_harness import free_port  # noqa: E402
from serve_harness import Server, check, run  # noqa: E402


def main(spanc, model):
    replicas = [Server(spanc, model, "--served-model-name", NAME,
                       "--max-tokens-limit", "64") for _ in range(2)]
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="spanc-sglang-") as work:
        log_path = os.path.join(work, "router.log")
        log = open(log_path, "w")
        router = subprocess.Popen(
            [sys.executable, "-m", "sglang_router.launch_router",
             "--host", "127.0.0.1", "--port", str(port),
             "--worker-urls"] +
            ["http://127.0.0.1:%d" % r.port for r in replicas] +
            ["--policy", "cache_aware", "--log-level", "warn",
             # Notice a dead worker within a few seconds.
             "--health-check-interval-secs", "1",
             "--health-failure-threshold", "2"],
            stdout=log, stderr=subprocess.STDOUT,
            env=dict(os.environ, HOME=work))
        try:
            deadline = time.time() + 120
            ready = False
            while time.time() < deadline and not ready:
                try:
                    with urllib.request.urlopen(
                            "http://127.0.0.1:%d/health" % port,
                            timeout=5) as response:
                        ready = response.status == 200
                except (urllib.error.URLError, OSError):
                    time.sleep(0.5)
            check(ready, "sglang-router answers /health")
            sets = {0: [0, 1, 2], 1: [3, 4, 5], 2: [1, 3, 5], 3: [0, 2, 4]}
            homes = check_repeats(port, replicas, sets, rounds=4)
            print("document sets per replica: %s" % [
                sorted(s for s, h in homes.items() if h == r)
                for r in range(2)])

            # The router marks the dead worker unhealthy after two failed
            # health checks (it stays listed in /workers); what matters is
            # that requests sent after that all succeed.
            check_kill(port, replicas)
        finally:
            if serve_harness.failures:
                log.flush()
                with open(log_path) as lines:
                    tail = lines.readlines()[-15:]
                sys.stdout.write("--- router.log\n" + "".join(tail))
            router.terminate()
            try:
                router.wait(20)
            except subprocess.TimeoutExpired:
                router.kill()
                router.wait()


if __name__ == "__main__":
    sys.exit(run(main))
