"""Two `spanc serve` replicas behind deploy/router/span_router.py (issue 27,
point 4), on loopback, on the synthetic tiny model.

- A document set cached as spans on replica 1 only (sent to it directly),
  while replica 0 holds the same system prompt: the same documents asked
  again through the router as a span query, in a shuffled order, go to
  replica 1 (the tie would go to replica 0) and reuse the span blocks
  there (the answer's reused_tokens, replica 1's
  spanc:span_tokens_reused_total); the router's stats credit replica 1.
  The router started after the replicas: it learned all that from the
  events' replay.
- A chat repeated with a new question lands where its first went and
  reuses its prefix (usage.prompt_tokens_details.cached_tokens); a
  streamed chat passes through as server-sent events ending in [DONE];
  /v1/query/execute and /v1/models pass through.
- Bounds and errors: a body past --max-body is 413, an unknown path 404,
  a method a path does not take 405, all JSON.
- A replica's POST /v1/query/plan lays a span query out as `spanc compile
  --emit=plan` does (the router plans with it); a router with --planner
  spanc (a compile process per request) routes alike.
- Killing one replica under load (router_harness.check_kill): only
  requests in flight on it fail, each with a JSON error; every request
  sent after it is served by the other; the router marks it down.

    span_router.py SPANC TINY_MODEL   (under .venv: pyzmq, msgpack)
"""

import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serve_harness  # noqa: E402
from router_harness import NAME, chat, check_kill, free_port  # noqa: E402
from serve_harness import (SAMPLE_DOCUMENTS, Server, check,  # noqa: E402
                           metric, run)

DOCUMENTS = SAMPLE_DOCUMENTS[:6]
SYSTEM = "Answer from the documents."


def router_script():
    """deploy/router/span_router.py in the runfiles, else the clone."""
    for root in (os.path.join(HERE, "..", ".."),
                 os.environ.get("SPANC_ROOT", "")):
        path = os.path.join(root, "deploy", "router", "span_router.py")
        if os.path.exists(path):
            return path
    raise RuntimeError("deploy/router/span_router.py not found")


def query_source(documents, question):
    fragments = " ".join('fragment "%s"' % DOCUMENTS[d] for d in documents)
    return """query q {
  gen(max_tokens = 4, temperature = 0) {
    system "%s"
    plus { %s }
    user "%s"
  }
}
""" % (SYSTEM, fragments, question)


def request(port, method, path, body=None, content_type="application/json",
            timeout=120):
    """(status, headers, parsed JSON or text)."""
    data = body if isinstance(body, (bytes, type(None))) else (
        json.dumps(body) if isinstance(body, dict) else body).encode()
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 data=data, method=method,
                                 headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            status, headers, raw = response.status, response.headers, \
                response.read()
    except urllib.error.HTTPError as error:
        status, headers, raw = error.code, error.headers, error.read()
    try:
        return status, headers, json.loads(raw)
    except ValueError:
        return status, headers, raw.decode("utf-8", "replace")


class Router:
    def __init__(self, spanc, model, replicas, *options):
        self.port = free_port()
        specs = []
        for replica in replicas:
            text = "".join(replica.stderr)
            found = re.search(r"KV events on (\S+), replay on (\S+)", text)
            check(found is not None, "a replica prints its event endpoints")
            specs += ["--replica", "http://127.0.0.1:%d,%s,%s" % (
                replica.port, found.group(1), found.group(2))]
        self.process = subprocess.Popen(
            [sys.executable, router_script(), "--port", str(self.port),
             "--spanc", spanc, "--model", model, "--health-interval", "0.5",
             "--max-body", "65536"] + specs + list(options),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        line = self.process.stderr.readline()
        check("span_router:" in line, "the router starts (%s)" % line.strip())
        self.log = [line]
        threading.Thread(target=lambda: self.log.extend(self.process.stderr),
                         daemon=True).start()

    def stats(self):
        return request(self.port, "GET", "/router/stats")[2]

    def settle(self, replicas):
        """Waits until the router holds as many blocks per replica as the
        replicas' caches (the events arrived)."""
        deadline = time.time() + 30
        while time.time() < deadline:
            stats = self.stats()
            held = [r["blocks_held"] for r in stats["replicas"]]
            cached = [metric(r.metrics()[1], "spanc:kv_cached_blocks")
                      for r in replicas]
            if held == cached:
                return held
            time.sleep(0.2)
        check(False, "the router's blocks match the caches: %s vs %s" % (
            held, cached))
        return held

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def check_spans_routed(router, replicas):
    """The documents cached as spans on replica 1 draw their shuffled
    repeat there, though replica 0 shares the system prompt."""
    status, _, _ = replicas[0].json(
        "POST", "/v1/query", body=query_source([4, 5], "Warm-up zero."),
        headers={"Content-Type": "text/plain"}, timeout=120)
    check(status == 200, "replica 0 answers its warm-up (%d)" % status)
    status, _, _ = replicas[1].json(
        "POST", "/v1/query", body=query_source([0, 1, 2], "Warm-up one."),
        headers={"Content-Type": "text/plain"}, timeout=120)
    check(status == 200, "replica 1 answers its warm-up (%d)" % status)
    held = router.settle(replicas)
    print("blocks the router learned from the events: %s" % held)
    before = metric(replicas[1].metrics()[1],
                    "spanc:span_tokens_reused_total") or 0
    status, headers, answer = request(
        router.port, "POST", "/v1/query", query_source([2, 0, 1], "Which?"),
        content_type="text/plain")
    check(status == 200, "the shuffled span query answers 200 (%s)"
          % str(answer)[:200])
    check(headers.get("X-Spanc-Replica") == "1", "it goes to replica 1, "
          "which holds its spans (went to %s)" % headers.get(
              "X-Spanc-Replica"))
    if status == 200:
        call = answer["calls"][0]
        check(call["reused_tokens"] >= call["prompt_tokens"] // 2,
              "it reuses the documents: %d of %d prompt tokens" % (
                  call["reused_tokens"], call["prompt_tokens"]))
    after = metric(replicas[1].metrics()[1], "spanc:span_tokens_reused_total")
    check(after - before > 0, "replica 1 counts span tokens reused (%s)"
          % (after - before))
    decision = [d for d in router.stats()["recent"]
                if d.get("path") == "/v1/query"][-1]
    print("decision: %s" % decision)
    check(decision["reused"].get("1", 0) > decision["reused"].get("0", 0),
          "the router credited replica 1 more than replica 0: %s"
          % decision["reused"])


def check_chats(router):
    """Chats are planned too: a repeat lands where the first went and
    reuses its prefix; a stream passes through; so do spnl and models."""
    rng = random.Random(7)
    body = chat([1, 3, 5], "When does the dishwasher run?")
    status, first, answer = request(router.port, "POST",
                                    "/v1/chat/completions", body)
    check(status == 200, "a chat answers 200 (%s)" % str(answer)[:200])
    body["messages"][-1]["content"] = "Where do visitors park? %d" % \
        rng.randrange(1000)
    status, second, answer = request(router.port, "POST",
                                     "/v1/chat/completions", body)
    check(status == 200 and first.get("X-Spanc-Replica") ==
          second.get("X-Spanc-Replica"),
          "a repeated chat lands where the first went (%s, %s)" % (
              first.get("X-Spanc-Replica"), second.get("X-Spanc-Replica")))
    if status == 200:
        cached = (answer["usage"].get("prompt_tokens_details") or
                  {}).get("cached_tokens", 0)
        check(cached >= answer["usage"]["prompt_tokens"] // 2,
              "the repeat reuses the chat's prefix (%d of %d)" % (
                  cached, answer["usage"]["prompt_tokens"]))
        # Not a tie broken the same way twice: the router's plan of the
        # chat has the replica's block ids (spanc's hash of the prompt).
        decision = [d for d in router.stats()["recent"]
                    if d.get("path") == "/v1/chat/completions"][-1]
        home = second.get("X-Spanc-Replica")
        check(decision["reused"].get(home, 0) >= cached - 16,
              "the router credited the repeat's home with its cached "
              "prefix (%s, %d cached)" % (decision["reused"], cached))
    body["stream"] = True
    status, headers, text = request(router.port, "POST",
                                    "/v1/chat/completions", body)
    check(status == 200 and "text/event-stream" in
          headers.get("Content-Type", ""), "a stream passes through")
    lines = [line for line in str(text).splitlines() if line]
    check(lines and lines[-1] == "data: [DONE]" and all(
        line.startswith("data: ") for line in lines),
        "the stream's events arrive whole, [DONE] last: %s" % lines[-2:])
    spnl = {"g": {"model": "spnl/" + NAME, "input": {"cross": [
        {"system": SYSTEM}, {"user": DOCUMENTS[0]}]}, "max_tokens": 2}}
    status, _, answer = request(router.port, "POST",
                                "/v1/query/execute?stream=false", spnl,
                                content_type="text/plain")
    check(status == 200 and "choices" in answer,
          "/v1/query/execute passes through (%d)" % status)
    status, _, answer = request(router.port, "GET", "/v1/models")
    check(status == 200 and answer["data"][0]["id"] == NAME,
          "/v1/models passes through")
    planner = router.stats()["planner"]
    print("planner: %s" % planner)
    check(planner.get("planned", 0) >= 3 and not planner.get("failed") and
          planner.get("by_replica", 0) >= 3 and not planner.get("by_spanc"),
          "the replicas planned the span query and the chats "
          "(/v1/query/plan), no plan failed: %s" % planner)


def check_plan_route(spanc, model, replica):
    """POST /v1/query/plan answers the layout `spanc compile --emit=plan`
    prints, hashes included; a program that does not compile is a 400."""
    source = query_source([3, 1], "Which one?")
    with tempfile.TemporaryDirectory(prefix="span-plan-") as folder:
        path = os.path.join(folder, "q.span")
        with open(path, "w") as file:
            file.write(source)
        local = subprocess.run([spanc, "compile", path, "--emit=plan",
                                "--model", model], capture_output=True,
                               text=True, timeout=120).stdout
    status, _, data = replica.request("POST", "/v1/query/plan", body=source,
                                      headers={"Content-Type": "text/plain"})
    layout = [line for line in data.decode().splitlines()
              if line.startswith("    ")]
    check(status == 200 and layout and layout == [
        line for line in local.splitlines() if line.startswith("    ")],
        "/v1/query/plan lays the query out as spanc compile does (%d)"
        % status)
    status, _, answer = replica.json("POST", "/v1/query/plan",
                                     body="query q {",
                                     headers={"Content-Type": "text/plain"})
    check(status == 400 and "error" in answer,
          "a program that does not compile is a 400 (%d)" % status)


def check_spanc_planner(spanc, model, replicas):
    """--planner spanc lays the request out with a spanc compile process
    and routes it as the replicas' own plan does."""
    other = Router(spanc, model, replicas, "--planner", "spanc")
    try:
        status, headers, _ = request(
            other.port, "POST", "/v1/query", query_source([1, 2, 0], "And?"),
            content_type="text/plain")
        planner = other.stats()["planner"]
        check(status == 200 and headers.get("X-Spanc-Replica") == "1" and
              planner.get("by_spanc") == 1 and not planner.get("by_replica"),
              "--planner spanc plans with spanc compile and routes to "
              "replica 1 (%d, %s, %s)" % (status, headers.get(
                  "X-Spanc-Replica"), planner))
    finally:
        other.stop()


def check_bounds(router):
    status, _, answer = request(router.port, "POST", "/v1/query",
                                b"x" * 70000, content_type="text/plain")
    check(status == 413 and "error" in answer,
          "a body past --max-body is 413 JSON (%d)" % status)
    status, _, answer = request(router.port, "POST", "/v1/nothing", {})
    check(status == 404 and "error" in answer, "an unknown path is 404 "
          "JSON (%d)" % status)
    status, headers, answer = request(router.port, "GET", "/v1/query")
    check(status == 405 and headers.get("Allow") == "POST" and
          "error" in answer, "GET /v1/query is 405 JSON, Allow: POST (%d)"
          % status)
    status, headers, answer = request(router.port, "DELETE", "/health")
    check(status == 405 and headers.get("Allow") == "GET" and
          "error" in answer, "DELETE /health is 405 JSON (%d)" % status)
    status, _, _ = request(router.port, "GET", "/health")
    check(status == 200, "/health answers 200 while a replica is up")
    status, _, text = request(router.port, "GET", "/metrics")
    check(status == 200 and "spanc_router_requests_total" in text,
          "/metrics has the router's counters")


def main(spanc, model):
    replicas = [Server(spanc, model, "--served-model-name", NAME,
                       "--kv-events", "tcp://127.0.0.1:0",
                       "--kv-events-replay", "tcp://127.0.0.1:0")
                for _ in range(2)]
    router = Router(spanc, model, replicas)
    try:
        check_plan_route(spanc, model, replicas[0])
        check_spans_routed(router, replicas)
        check_spanc_planner(spanc, model, replicas)
        check_chats(router)
        check_bounds(router)

        def gone():
            return not all(r["up"] for r in router.stats()["replicas"])
        check_kill(router.port, replicas, gone)
        stats = router.stats()
        print("router after the kill: %s" % json.dumps(
            [{k: r[k] for k in ("up", "requests", "failed", "refused")}
             for r in stats["replicas"]]))
    finally:
        router.stop()
        if serve_harness.failures:
            sys.stdout.write("--- router stderr\n" +
                             "".join(router.log[-30:]))


if __name__ == "__main__":
    sys.exit(run(main))
