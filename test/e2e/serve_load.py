"""Load and fault test of `spanc serve` on loopback.

Usage: serve_load.py SPANC TINY_MODEL, from the workspace root. On the
synthetic random-weight llama the build generates (2 layers, 256 wide), so
that hundreds of requests take seconds: the answers are gibberish but
deterministic at temperature 0, so each is compared with its own serial
run (with --batch-invariant, a row's numbers do not depend on its batch).

Load: 64 concurrent clients, each sending 4 requests one after the other
(256 in all): chats (whole and streamed) with documents as messages, and
span queries (POST /v1/query) over the same documents as the spans of a
plus, in shuffled order. Every response must arrive, equal the serial
run's answer, and /metrics must move by what the answers' usage reports.

Faults: streaming clients killed mid-stream (SIGKILL on client processes,
close and reset on sockets) and non-streaming clients (completions and span
queries) that disconnect while their calls run: every call is cancelled
(finished_reason "abort"), stops generating, and its blocks return to the
pool (vllm:kv_cache_usage_perc back to 0, nothing running or waiting).

Bounded: a fixed number of requests, socket timeouts, and a watchdog that
kills everything and fails after WATCHDOG_SECONDS.
"""

import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

from serve_harness import (KEY, SAMPLE_DOCUMENTS, Server, check,
                           kill_servers, metric, run, stream_text)

CLIENTS = 64
REQUESTS_PER_CLIENT = 4
MAX_TOKENS = 16
LONG_TOKENS = 2000
WATCHDOG_SECONDS = 600
MODEL = "tiny-llama-synthetic"

SYSTEM = "Answer from the documents below. Be brief and cite the document."
DOCUMENTS = SAMPLE_DOCUMENTS
QUESTIONS = [
    "Which document explains eviction?",
    "What moves when a span is reused?",
    "Who decides what runs in a step?",
    "Why are queries sorted?",
    "When do prefix blocks hit?",
    "What does a tail see?",
]


def spec(index):
    """The index-th distinct request: 3 of the documents, shuffled, and a
    question. 24 of them, so the 256 requests repeat some."""
    rng = random.Random(index)
    return tuple(rng.sample(range(len(DOCUMENTS)), 3)), \
        QUESTIONS[index % len(QUESTIONS)]


def chat_body(documents, question, **extra):
    messages = [{"role": "system", "content": SYSTEM}]
    messages += [{"role": "user", "content": DOCUMENTS[d]} for d in documents]
    messages.append({"role": "user", "content": question})
    body = {"model": MODEL, "messages": messages, "max_tokens": MAX_TOKENS,
            "temperature": 0}
    body.update(extra)
    return body


def query_source(documents, question, max_tokens=MAX_TOKENS):
    fragments = " ".join('fragment "%s"' % DOCUMENTS[d] for d in documents)
    return """query q {
  gen(max_tokens = %d, temperature = 0) {
    system "%s"
    plus { %s }
    user "%s"
  }
}
""" % (max_tokens, SYSTEM, fragments, question)


def send(server, kind, documents, question):
    """One request of the load; returns (status, text, usage)."""
    if kind == "query":
        status, _, result = server.json(
            "POST", "/v1/query", body=query_source(documents, question),
            headers={"Content-Type": "text/plain"}, timeout=120)
        if status != 200:
            return status, repr(result), None
        return status, result["queries"][0]["results"][0]["text"], \
            result["usage"]
    if kind == "stream":
        status, events = server.stream("/v1/chat/completions", chat_body(
            documents, question, stream=True,
            stream_options={"include_usage": True}))
        usage = [e["usage"] for e in events if e != "[DONE]" and
                 e.get("usage")]
        return status, stream_text(events), usage[0] if usage else None
    status, _, answer = server.json("POST", "/v1/chat/completions",
                                    chat_body(documents, question),
                                    timeout=120)
    if status != 200:
        return status, repr(answer), None
    return status, answer["choices"][0]["message"]["content"], \
        answer["usage"]


KINDS = ["chat", "stream", "query"]


def plan_load():
    """(client, kind, spec index) of every request, in each client's order."""
    work = []
    for client in range(CLIENTS):
        for step in range(REQUESTS_PER_CLIENT):
            number = client * REQUESTS_PER_CLIENT + step
            work.append((client, KINDS[number % 3], (number * 7) % 24))
    return work


def check_load(server):
    work = plan_load()
    # The serial answers: each distinct (kind, spec) once, one at a time.
    serial = {}
    for _, kind, index in work:
        if (kind, index) in serial:
            continue
        status, text, _ = send(server, kind, *spec(index))
        check(status == 200, "serial %s %d: %d %s" % (kind, index, status,
                                                      text))
        serial[(kind, index)] = text

    _, before = server.metrics()
    results = {}
    lock = threading.Lock()
    start_gate = threading.Barrier(CLIENTS + 1)
    peaks = {"running": 0, "waiting": 0}
    done = threading.Event()

    def client(number):
        start_gate.wait()
        for step in range(REQUESTS_PER_CLIENT):
            _, kind, index = work[number * REQUESTS_PER_CLIENT + step]
            try:
                outcome = send(server, kind, *spec(index))
            except Exception as error:  # reported as a missing answer
                print("client %d: %r" % (number, error), flush=True)
                continue
            with lock:
                results[(number, step)] = (kind, index) + outcome

    def watch():
        while not done.is_set():
            _, values = server.metrics()
            for gauge in peaks:
                peaks[gauge] = max(peaks[gauge], metric(
                    values, "vllm:num_requests_" + gauge) or 0)
            time.sleep(0.02)

    threads = [threading.Thread(target=client, args=(number,), daemon=True)
               for number in range(CLIENTS)]
    for thread in threads:
        thread.start()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    start_gate.wait()
    started = time.time()
    for thread in threads:
        thread.join(max(1, 300 - (time.time() - started)))
    wall = time.time() - started
    done.set()
    watcher.join(5)

    total = CLIENTS * REQUESTS_PER_CLIENT
    check(len(results) == total, "every response arrived (%d of %d)" %
          (len(results), total))
    unequal = 0
    for (number, step), (kind, index, status, text, _) in \
            sorted(results.items()):
        if not check(status == 200 and text == serial[(kind, index)],
                     "client %d request %d (%s %d) equals the serial run: "
                     "%d %r vs %r" % (number, step, kind, index, status,
                                      text, serial[(kind, index)])):
            unequal += 1
    check(peaks["running"] >= 8, "requests ran together (peak %d calls "
          "running)" % peaks["running"])

    _, after = server.metrics()

    def delta(name, **labels):
        return (metric(after, name, **labels) or 0) - \
            (metric(before, name, **labels) or 0)
    usages = [usage for (_, _, _, _, usage) in results.values() if usage]
    prompt = sum(u["prompt_tokens"] for u in usages)
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
    sums = [("vllm:prompt_tokens_total", prompt),
            ("vllm:generation_tokens_total",
             sum(u["completion_tokens"] for u in usages)),
            ("vllm:prefix_cache_queries_total", prompt),
            ("vllm:prefix_cache_hits_total", cached),
            ("vllm:e2e_request_latency_seconds_count", total),
            ("vllm:time_to_first_token_seconds_count", total)]
    for name, expected in sums:
        check(delta(name) == expected, "%s moved by %r, the answers say %r" %
              (name, delta(name), expected))
    finished = delta("vllm:request_success_total", finished_reason="stop") + \
        delta("vllm:request_success_total", finished_reason="length")
    check(finished == total, "request_success_total moved by %r" % finished)
    check(delta("vllm:request_success_total", finished_reason="abort") == 0,
          "nothing was aborted")
    span_reused = delta("spanc:span_tokens_reused_total")
    check(0 < span_reused <= cached, "span queries reused span tokens (%r, "
          "of %r cached)" % (span_reused, cached))
    check(metric(after, "vllm:num_requests_running") == 0 and
          metric(after, "vllm:num_requests_waiting") == 0 and
          metric(after, "vllm:kv_cache_usage_perc") == 0,
          "idle afterwards: nothing running or waiting, every block free")
    print("load: %d clients, %d requests (%s), %.1f s wall, peak %d calls "
          "running and %d waiting, %d of %d equal to their serial run, "
          "%d of %d prompt tokens cached (%d of them span tokens)" %
          (CLIENTS, total, ", ".join("%d %s" % (sum(
              1 for r in results.values() if r[0] == kind), kind)
              for kind in KINDS), wall, peaks["running"], peaks["waiting"],
           total - unequal if len(results) == total else len(results) -
           unequal, total, cached, prompt, span_reused), flush=True)
    return serial


def raw_request(port, path, body, content_type="application/json"):
    """Sends a request on a socket of its own; returns the socket."""
    data = body.encode() if isinstance(body, str) else json.dumps(body)\
        .encode()
    head = ("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
            "%s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" %
            (path, KEY, content_type, len(data))).encode()
    connection = socket.create_connection(("127.0.0.1", port), timeout=60)
    connection.sendall(head + data)
    return connection


def read_first_event(connection):
    """Reads until the first server-sent event; False if the server closed."""
    received = b""
    while b"\ndata: " not in received and not received.startswith(b"data: "):
        chunk = connection.recv(4096)
        if not chunk:
            return False
        received += chunk
    return True


def stream_client(port, path, body):
    """A client process: starts a stream, says so, then waits to be
    killed."""
    connection = raw_request(int(port), path, json.loads(body))
    if read_first_event(connection):
        print("streaming", flush=True)
    time.sleep(600)


def wait_for(server, condition, what, timeout=120):
    """Polls /metrics until condition(values) holds; bounded."""
    deadline = time.time() + timeout
    while True:
        _, values = server.metrics()
        if condition(values) or time.time() > deadline:
            check(condition(values), what)
            return values
        time.sleep(0.05)


def long_requests(server):
    """Requests whose greedy answers run to LONG_TOKENS, by kind.

    A random-weight model ends some answers early (it samples the end of
    turn), and an answer that ended before its client left was not cut
    short. Greedy answers are deterministic, so candidates are run once,
    all at once, and those that reach max_tokens are the ones to cut."""
    candidates = []
    for number in range(16):
        documents = (number % 8, (number + 3) % 8)
        question = QUESTIONS[number % len(QUESTIONS)] + " Go on."
        candidates.append(("/v1/chat/completions", dict(
            chat_body(documents, question), max_tokens=LONG_TOKENS)))
        candidates.append(("/v1/completions", {
            "model": MODEL, "prompt": DOCUMENTS[number % 8] + " In detail, "
            "part %d:" % number, "max_tokens": LONG_TOKENS,
            "temperature": 0}))
    for number in range(10):
        candidates.append(("/v1/query", query_source(
            (number % 8, (number + 5) % 8),
            QUESTIONS[number % len(QUESTIONS)] + " Go on.", LONG_TOKENS)))
    answers = [None] * len(candidates)

    def run(index):
        path, body = candidates[index]
        if path == "/v1/query":
            _, _, result = server.json("POST", path, body=body, timeout=300)
            answers[index] = result["calls"][0]["finish_reason"]
        else:
            _, _, result = server.json("POST", path, body, timeout=300)
            answers[index] = result["choices"][0]["finish_reason"]
    threads = [threading.Thread(target=run, args=(index,), daemon=True)
               for index in range(len(candidates))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    found = {}
    for (path, body), reason in zip(candidates, answers):
        if reason == "length":
            found.setdefault(path, []).append(body)
    print("faults: %d of %d candidates run to max_tokens (%s)" % (
        answers.count("length"), len(candidates), ", ".join(
            "%d %s" % (len(bodies), path) for path, bodies in
            sorted(found.items()))), flush=True)
    return found


def check_aborted(server, before, count, what):
    """Waits until `count` calls cut short since the `before` metrics have
    finished as aborted and nothing runs; checks that they stopped
    generating and that every block is back in the pool. Returns (aborted,
    tokens generated, KV usage) for the report."""
    def moved(values, name, **labels):
        return (metric(values, name, **labels) or 0) - \
            (metric(before, name, **labels) or 0)
    values = wait_for(server, lambda values: moved(
        values, "vllm:request_success_total", finished_reason="abort") >=
        count and metric(values, "vllm:num_requests_running") == 0,
        "%d %s are aborted" % (count, what))
    aborted = moved(values, "vllm:request_success_total",
                    finished_reason="abort")
    generated = moved(values, "vllm:generation_tokens_total")
    check(aborted == count, "%d aborted, got %r" % (count, aborted))
    check(generated < count * LONG_TOKENS / 2, "they stopped generating "
          "(%r tokens of %d asked)" % (generated, count * LONG_TOKENS))
    usage = metric(values, "vllm:kv_cache_usage_perc")
    check(metric(values, "vllm:num_requests_waiting") == 0 and usage == 0,
          "after %s every block is back in the pool" % what)
    return aborted, generated, usage


STREAMS_KILLED, STREAMS_CLOSED = 6, 6
WHOLE_COMPLETIONS, WHOLE_QUERIES = 4, 2


def check_faults(server, serial):
    found = long_requests(server)
    streams = [("/v1/chat/completions", body) for body in
               found.get("/v1/chat/completions", [])] + \
        [("/v1/completions", body) for body in found.get("/v1/completions",
                                                          [])]
    streams.sort(key=lambda each: json.dumps(each[1]))
    num_streams = STREAMS_KILLED + STREAMS_CLOSED
    if not check(len(streams) >= num_streams and
                 len(found.get("/v1/completions", [])) >= WHOLE_COMPLETIONS
                 and len(found.get("/v1/query", [])) >= WHOLE_QUERIES,
                 "enough requests run to max_tokens to cut short: %r" %
                 {path: len(bodies) for path, bodies in found.items()}):
        return
    _, before = server.metrics()

    # Streams cut short: client processes killed, sockets closed, sockets
    # reset (SO_LINGER 0 sends RST instead of FIN).
    processes = [subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--stream-client",
         str(server.port), path, json.dumps(dict(body, stream=True))],
        stdout=subprocess.PIPE, text=True)
        for path, body in streams[:STREAMS_KILLED]]
    sockets = []
    for path, body in streams[STREAMS_KILLED:num_streams]:
        connection = raw_request(server.port, path, dict(body, stream=True))
        check(read_first_event(connection), "a stream started")
        sockets.append(connection)
    for process in processes:
        check(process.stdout.readline().strip() == "streaming",
              "a client process streams")
    for process in processes:
        process.send_signal(signal.SIGKILL)
        process.wait()
    for number, connection in enumerate(sockets):
        if number % 2:
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                  struct.pack("ii", 1, 0))
        connection.close()
    aborted, generated, usage = check_aborted(server, before, num_streams,
                                              "streams cut short")
    print("faults: %d streams cut short (%d client processes killed, %d "
          "sockets closed, %d reset): %d aborted, %d tokens generated of %d "
          "asked, KV usage %r" % (
              num_streams, STREAMS_KILLED, (STREAMS_CLOSED + 1) // 2,
              STREAMS_CLOSED // 2, aborted, generated,
              num_streams * LONG_TOKENS, usage), flush=True)

    # Whole answers whose clients leave while their calls run: completions
    # and span queries.
    _, before = server.metrics()
    num_whole = WHOLE_COMPLETIONS + WHOLE_QUERIES
    sockets = [raw_request(server.port, "/v1/completions", body)
               for body in found["/v1/completions"][:WHOLE_COMPLETIONS]]
    sockets += [raw_request(server.port, "/v1/query", body, "text/plain")
                for body in found["/v1/query"][:WHOLE_QUERIES]]
    wait_for(server, lambda values:
             (metric(values, "vllm:num_requests_running") or 0) >= num_whole,
             "%d whole answers run" % num_whole)
    for connection in sockets:
        connection.close()
    aborted, generated, usage = check_aborted(
        server, before, num_whole, "whole answers whose clients left")
    print("faults: %d whole answers disconnected (%d completions, %d span "
          "queries): %d aborted, %d tokens generated of %d asked, KV usage "
          "%r" % (num_whole, WHOLE_COMPLETIONS, WHOLE_QUERIES, aborted,
                  generated, num_whole * LONG_TOKENS, usage), flush=True)

    # And it serves as before.
    for kind in KINDS:
        status, text, _ = send(server, kind, *spec(0))
        check(status == 200 and text == serial.get((kind, 0), text),
              "after the faults a %s answers as before: %r" % (kind, text))


def main(spanc, model):
    def watchdog():
        print("FAIL: the test ran past %d s; killing it" % WATCHDOG_SECONDS,
              flush=True)
        kill_servers()
        os._exit(1)
    timer = threading.Timer(WATCHDOG_SECONDS, watchdog)
    timer.daemon = True
    timer.start()
    try:
        # One HTTP thread per client, and a few for /metrics.
        server = Server(spanc, model, "--api-key", KEY, "--http-threads",
                        "96", "--max-queue", "256", "--max-tokens-limit",
                        str(LONG_TOKENS), "--batch-invariant")
        serial = check_load(server)
        check_faults(server, serial)
        check(server.stop() == 0, "SIGTERM: exit 0")
    finally:
        timer.cancel()


if __name__ == "__main__":
    if sys.argv[1] == "--stream-client":
        stream_client(*sys.argv[2:5])
        sys.exit(0)
    sys.exit(run(main))
