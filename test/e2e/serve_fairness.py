"""spanc serve's fairness across clients, over loopback (issue 25, point 7).

Usage: serve_fairness.py SPANC MODEL [--measure [--samples N]]
[--timeout S] [--max-tokens M], from the workspace root (the runfiles root
under Bazel).

A short streamed chat (max_tokens 8) is timed to its first token on an
idle server, then beside each of two hogs:

- query: one POST /v1/query of repeat(256) gens of max_tokens M, within
  every limit (it ran 15 calls and queued 238 in front of everyone else);
- chat-n: four clients each asking a chat of n = 16, max_tokens M.

The test (no --measure) checks that the short chat's time to first token
beside a hog stays within a bound of the idle one's (it got no answer in
45 s), that the hogs' clients leaving returns the server to idle, and
that a request past --max-queued-calls gets 429 naming the option.
Every wait is bounded; the hogs are cut off (their sockets closed, so the
server cancels them) as soon as the samples are taken. --measure prints
the figures (TTFT p50/p99 idle and beside each hog) without checking
them, with only the server's default options, so an older spanc can be
measured the same way.
"""

import argparse
import http.client
import json
import socket
import sys
import time

from serve_harness import Server, check, metric, run

SHORT_TOKENS = 8


def quantile(values, q):
    """Linear interpolation between order statistics (as Report.cpp)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def model_id(server):
    status, _, document = server.json("GET", "/v1/models")
    check(status == 200, "/v1/models answers 200")
    return document["data"][0]["id"]


def short_ttft(server, model, timeout):
    """Seconds from sending a short streamed chat to its first content, or
    None when none came within `timeout` (the connection is then closed,
    which cancels the request)."""
    body = {"model": model, "max_tokens": SHORT_TOKENS, "temperature": 0,
            "stream": True,
            "messages": [{"role": "user", "content": "Say hello."}]}
    connection = http.client.HTTPConnection("127.0.0.1", server.port,
                                            timeout=timeout)
    begin = time.monotonic()
    try:
        connection.request("POST", "/v1/chat/completions",
                           body=json.dumps(body),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        if not check(response.status == 200, "the short chat: 200 (got %d)"
                     % response.status):
            return None
        for raw in response:
            if time.monotonic() - begin > timeout:
                return None
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: "):
                continue
            payload = line[len("data: "):]
            if payload == "[DONE]":
                return time.monotonic() - begin
            event = json.loads(payload)
            for choice in event.get("choices", []):
                if choice.get("delta", {}).get("content") or \
                        choice.get("finish_reason"):
                    return time.monotonic() - begin
        return time.monotonic() - begin
    except (socket.timeout, OSError):
        return None
    finally:
        connection.close()


def open_request(server, path, body):
    """Sends a request on a raw socket and leaves it waiting for its
    answer; closing the socket cancels it."""
    data = json.dumps(body) if isinstance(body, dict) else body
    payload = data.encode()
    head = ("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\n"
            "Content-Length: %d\r\n\r\n" %
            (path, "application/json" if isinstance(body, dict)
             else "text/plain", len(payload))).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(head + payload)
    return sock


def hog_query(max_tokens):
    # Sampled (a greedy repeat is one call) from the top token only: the
    # random-weight model then runs every call to max_tokens.
    return ("query hog {\n  repeat(256) { gen(max_tokens = %d, temperature ="
            " 0.8, top_k = 1, seed = 1) { user \"Tell me a long story.\" } "
            "}\n}\n" % max_tokens)


def start_hog(server, model, kind, max_tokens):
    if kind == "query":
        return [open_request(server, "/v1/query", hog_query(max_tokens))]
    body = {"model": model, "n": 16, "max_tokens": max_tokens,
            "temperature": 0,
            "messages": [{"role": "user", "content": "Tell me a long story."}]}
    return [open_request(server, "/v1/chat/completions", body)
            for _ in range(4)]


def load(server):
    _, values = server.metrics()
    return (metric(values, "vllm:num_requests_running") or 0,
            metric(values, "vllm:num_requests_waiting") or 0,
            metric(values, "vllm:kv_cache_usage_perc") or 0)


def wait_for(condition, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def measure(server, model, kind, samples, timeout, max_tokens):
    """The short chat's TTFTs beside a hog of `kind` (none: idle); None
    for a sample that timed out."""
    hogs = []
    if kind != "idle":
        hogs = start_hog(server, model, kind, max_tokens)
        check(wait_for(lambda: load(server)[0] >= 1, 30),
              "%s: the hog runs" % kind)
        time.sleep(0.5)
        running, waiting, usage = load(server)
        print("%s: %d calls running, %d waiting, KV usage %.3f" %
              (kind, running, waiting, usage), flush=True)
    ttfts = [short_ttft(server, model, timeout) for _ in range(samples)]
    for sock in hogs:
        sock.close()
    if hogs:
        check(wait_for(lambda: load(server)[:2] == (0, 0), 60),
              "%s: the hog's clients left and the server is idle again" %
              kind)
    return ttfts


def describe(kind, ttfts, timeout):
    answered = [t for t in ttfts if t is not None]
    missing = len(ttfts) - len(answered)
    # A sample that timed out counts as the timeout (a lower bound).
    counted = answered + [timeout] * missing
    text = "%-7s TTFT p50 %7.1f ms  p99 %7.1f ms  (%d samples" % (
        kind, 1000 * quantile(counted, 0.5), 1000 * quantile(counted, 0.99),
        len(ttfts))
    if missing:
        text += ", %d without a first token in %.0f s" % (missing, timeout)
    return text + ")"


def check_queue_bound(server):
    """A request whose calls would pass --max-queued-calls: 429 naming it."""
    hog = open_request(server, "/v1/query", hog_query(2048))
    try:
        check(wait_for(lambda: load(server)[0] >= 1, 30), "the hog runs")
        status, headers, document = server.json(
            "POST", "/v1/query", body=hog_query(8),
            headers={"Content-Type": "text/plain"})
        message = (document or {}).get("error", {}).get("message", "")
        check(status == 429 and "--max-queued-calls" in message,
              "past --max-queued-calls: 429 naming it (got %d %r)" %
              (status, document))
        check("Retry-After" in headers, "429 says Retry-After")
        # A small request still fits beside the hog.
        check(short_ttft(server, model_id(server), 30) is not None,
              "a short chat within the bound is answered")
    finally:
        hog.close()
    check(wait_for(lambda: load(server)[:2] == (0, 0), 60),
          "the hog left and the server is idle again")


def main(spanc, model):
    parser = argparse.ArgumentParser()
    parser.add_argument("spanc")
    parser.add_argument("model")
    parser.add_argument("--measure", action="store_true")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--max-tokens", type=int, default=2048)
    args = parser.parse_args()
    options = ["--max-queue", "64"] if args.measure else [
        "--max-queued-calls", "300"]
    server = Server(spanc, model, *options)
    name = model_id(server)
    short_ttft(server, name, args.timeout)  # warm-up
    figures = {}
    for kind in ["idle", "query", "chat-n"]:
        figures[kind] = measure(server, name, kind, args.samples,
                                args.timeout, args.max_tokens)
        print(describe(kind, figures[kind], args.timeout), flush=True)
    if args.measure:
        print(json.dumps(figures))
        return
    idle = [t for t in figures["idle"] if t is not None]
    check(len(idle) == len(figures["idle"]), "idle: every short chat answered")
    # On a shared 2-core machine: generous, and far below the hog's length
    # (256 calls of 2048 tokens: minutes).
    bound = max(20 * quantile(idle, 0.5), quantile(idle, 0.5) + 2.0)
    for kind in ["query", "chat-n"]:
        ttfts = figures[kind]
        check(all(t is not None for t in ttfts),
              "%s: every short chat has its first token within %.0f s" %
              (kind, args.timeout))
        answered = [t for t in ttfts if t is not None]
        check(answered and quantile(answered, 0.5) <= bound,
              "%s: the short chat's TTFT p50 %.3f s is within %.3f s (idle "
              "p50 %.3f s)" % (kind, quantile(answered, 0.5), bound,
                               quantile(idle, 0.5)))
    check_queue_bound(server)
    check(server.stop() == 0, "SIGTERM: exit 0")


if __name__ == "__main__":
    sys.exit(run(main))
