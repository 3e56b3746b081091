"""spanc serve under hostile clients, over loopback (issue 25).

Usage: serve_hostile.py SPANC TINY_MODEL, from the workspace root (the
runfiles root under Bazel), on the synthetic random-weight llama. Each
case is bounded in count and time and measured with wide margins:

- JSON nested 20 000 to 100 000 deep on every JSON endpoint: 400 naming the
  limit, fast, the server's memory flat over repeats (it grew 2.3 GB a
  request);
- a chunked body past --max-body: 413 before the rest is sent, the
  server's memory flat (it buffered the whole body); an announced length
  past it or a negative one refused unread; a diagnostic about a long line
  is a few hundred bytes (it echoed the line);
- requests pipelined on one connection: every one answered, in order (all
  but the first vanished);
- /v1/query/execute?stream=true: the text streamed is the text whole
  (characters split across tokens became U+FFFD each);
- 64 clients trickling their headers with 4 HTTP threads: /health and a
  chat still answered at once, the tricklers answered 408 at
  --header-timeout, a body that stalls 408 at --body-timeout, one
  connection past --max-connections 503, and SIGTERM exits at once with
  clients still sending (it never exited).
"""

import json
import sys
import signal
import socket
import threading
import time

from serve_harness import Server, check, run


def rss_mib(server):
    with open("/proc/%d/status" % server.process.pid) as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def read_response(reader):
    """One HTTP/1.1 response from a file over a socket: (status, headers,
    body bytes), or None at end of file."""
    line = reader.readline()
    if not line:
        return None
    status = int(line.split()[1])
    headers = {}
    while True:
        line = reader.readline().decode("latin-1").rstrip("\r\n")
        if not line:
            break
        name, value = line.split(":", 1)
        headers[name.strip().lower()] = value.strip()
    body = b""
    if headers.get("transfer-encoding") == "chunked":
        while True:
            size = int(reader.readline().split(b";")[0], 16)
            if size == 0:
                reader.readline()
                break
            body += reader.read(size)
            reader.readline()
    else:
        body = reader.read(int(headers.get("content-length", "0")))
    return status, headers, body


def exchange(server, data, timeout=30):
    """Sends raw bytes on a new connection and reads one response."""
    with socket.create_connection(("127.0.0.1", server.port),
                                  timeout=timeout) as connection:
        connection.sendall(data)
        return read_response(connection.makefile("rb"))


def post_bytes(path, body, content_type="application/json"):
    return ("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\n"
            "Content-Length: %d\r\n\r\n" % (path, content_type, len(body))
            ).encode() + body


def message(body):
    try:
        return json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return body[:200]


def check_depth_bombs(server):
    # Whole documents: 20 000 levels of spnl (the importer's scan cost
    # 0.75 GB a request, kept by the HTTP thread), 100 000 of arrays.
    spnl = b'{"cross":[' * 10000 + b"]}" * 10000
    bombs = {
        "/v1/query": spnl,
        "/v1/query/execute": spnl,
        "/v1/chat/completions": b'{"messages": ' + b"[" * 100000 +
        b"]" * 100000 + b"}",
        "/v1/completions": b'{"prompt": ' + b"[" * 100000 + b"]" * 100000 +
        b"}",
    }
    before = rss_mib(server)
    slowest = 0.0
    for _ in range(4):
        for path, body in bombs.items():
            start = time.monotonic()
            status, _, answer = exchange(server, post_bytes(path, body))
            slowest = max(slowest, time.monotonic() - start)
            check(status == 400 and b"256 levels" in answer and
                  len(answer) < 2000,
                  "%s: %d KB nested past 256 levels is a short 400 naming "
                  "the limit (got %d, %d bytes: %r)" %
                  (path, len(body) // 1000, status, len(answer),
                   message(answer)))
    grown = rss_mib(server) - before
    print("depth bombs: slowest answer %.3f s, RSS %+.1f MiB over 16" %
          (slowest, grown))
    check(slowest < 5, "a depth bomb is refused fast (%.2f s)" % slowest)
    check(grown < 64, "16 depth bombs leave the memory flat (%+.0f MiB)" %
          grown)


def check_body_limits(server, max_body):
    # A chunked body sent as fast as loopback takes it: 413 as it passes
    # --max-body, the rest never read (the sender is cut off).
    before = rss_mib(server)
    connection = socket.create_connection(("127.0.0.1", server.port),
                                          timeout=20)
    connection.sendall(b"POST /v1/query HTTP/1.1\r\nHost: x\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\n")
    sent = [0]

    def send_chunks():
        chunk = b"%x\r\n" % 65536 + b"q" * 65536 + b"\r\n"
        try:
            while sent[0] < 256 << 20:
                connection.sendall(chunk)
                sent[0] += 65536
        except OSError:
            pass

    sender = threading.Thread(target=send_chunks, daemon=True)
    start = time.monotonic()
    sender.start()
    response = read_response(connection.makefile("rb"))
    elapsed = time.monotonic() - start
    sender.join(30)
    connection.close()
    grown = rss_mib(server) - before
    print("chunked body: %s after %.2f s, %d MiB sent, RSS %+.1f MiB" %
          (response and response[0], elapsed, sent[0] >> 20, grown))
    check(response is not None and response[0] == 413 and
          response[1].get("connection") == "close" and
          b"--max-body" in response[2],
          "a chunked body past --max-body: 413, Connection: close (got %r)" %
          (response and response[:2],))
    check(elapsed < 10, "the 413 comes at once (%.1f s)" % elapsed)
    check(sent[0] < 64 << 20,
          "the rest of the body is not read (%d MiB sent)" % (sent[0] >> 20))
    check(grown < 64, "a chunked body is not buffered (%+.0f MiB)" % grown)

    # A length past the limit, or no number at all: refused before any of
    # the body is sent (httplib read and dropped a gigabyte first).
    for length, status in [("1000000000", 413), ("-1", 400),
                           ("12abc", 400)]:
        start = time.monotonic()
        response = exchange(server, (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            "Content-Length: %s\r\n\r\n" % length).encode(), timeout=10)
        check(response is not None and response[0] == status and
              time.monotonic() - start < 5,
              "Content-Length %s: %d without the body (got %r)" %
              (length, status, response and response[:2]))

    # A chunked body within the limit is read whole, as one with a length.
    chat = json.dumps({"messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 4, "temperature": 0}).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(chat[i:i + 7]), chat[i:i + 7])
                       for i in range(0, len(chat), 7)) + b"0\r\n\r\n"
    first = exchange(server, b"POST /v1/chat/completions HTTP/1.1\r\n"
                     b"Host: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                     chunked)
    second = exchange(server, post_bytes("/v1/chat/completions", chat))
    check(first is not None and first[0] == 200 and second[0] == 200 and
          json.loads(first[2])["choices"] == json.loads(second[2])["choices"],
          "a chunked chat within --max-body is answered as one with a "
          "length (%r)" % (first and first[:2],))
    # What curl -d sends (form-encoded) past httplib's 8 KiB form limit.
    long_chat = json.dumps({"messages": [{"role": "user", "content": "hi"}],
                            "max_tokens": 2, "temperature": 0}).encode()
    long_chat = long_chat[:-1] + b" " * 15000 + b"}"
    response = exchange(server, (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
        "application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n" %
        len(long_chat)).encode() + long_chat)
    check(response is not None and response[0] == 200,
          "a 15 KB body sent as curl -d sends it: 200 (got %r)" %
          (response and (response[0], message(response[2])),))

    # A diagnostic about a 200 KB line shows a window of it.
    program = (b'query q { gen(max_tokens = 2) { user "' + b"a" * 200000 +
               b'" nosuch } }')
    status, _, answer = exchange(server, post_bytes("/v1/query", program,
                                                    "text/plain"))
    print("diagnostic on a 200 KB line: %d bytes" % len(answer))
    check(status == 400 and len(answer) < 4096 and
          b"query.span:1:200041: error: unknown name" in answer,
          "an error on a 200 KB line: a 400 of a few hundred bytes with "
          "the true column (got %d, %d bytes)" % (status, len(answer)))
    # One error per token on one 245 KB line: the first 64 are shown (it
    # was each of 35 000, 9 MB, every one scanning the line: 30 s).
    program = b"query q { " + b"user 1 " * 35000 + b"}"
    start = time.monotonic()
    status, _, answer = exchange(server, post_bytes("/v1/query", program,
                                                    "text/plain"))
    elapsed = time.monotonic() - start
    print("35 000 syntax errors on one line: %d bytes in %.2f s" %
          (len(answer), elapsed))
    check(status == 400 and len(answer) < 64 * 1024 and elapsed < 10 and
          b"too many errors" in answer,
          "35 000 errors: the first 64 and a note, fast (got %d, %d bytes, "
          "%.1f s)" % (status, len(answer), elapsed))
    check(server.request("GET", "/health")[0] == 200,
          "/health after the refused bodies")


def check_pipelining(server):
    chat = json.dumps({"messages": [{"role": "user", "content": "Hello"}],
                       "max_tokens": 6, "temperature": 0}).encode()
    spnl = json.dumps({"g": {"model": "m", "input": {"user": "Hi there"},
                             "max_tokens": 6, "temperature": 0}}).encode()
    requests = [
        b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
        post_bytes("/v1/chat/completions", chat),
        post_bytes("/v1/query/execute", spnl),
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /nosuch HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ]
    answers = []
    with socket.create_connection(("127.0.0.1", server.port),
                                  timeout=60) as connection:
        # Back to back in one write: the server reads past the first.
        connection.sendall(b"".join(requests))
        reader = connection.makefile("rb")
        while True:
            response = read_response(reader)
            if response is None:
                break
            answers.append(response)
    statuses = [answer[0] for answer in answers]
    check(statuses == [200, 200, 200, 200, 404, 200],
          "6 pipelined requests: 6 answers in order (got %r)" % statuses)
    if len(answers) >= 4:
        alone = server.request("POST", "/v1/chat/completions", chat)[2]
        check(json.loads(answers[1][2])["choices"] ==
              json.loads(alone)["choices"],
              "a pipelined chat answers as it does alone")
        alone = server.request("POST", "/v1/query/execute", spnl)[2]
        check(json.loads(answers[2][2])["choices"] ==
              json.loads(alone)["choices"],
              "a pipelined spnl query answers as it does alone")
        check(b"tiny-llama-synthetic" in answers[3][2],
              "the pipelined /v1/models")
    check(answers and answers[-1][1].get("connection") == "close",
          "the last pipelined answer closes as asked")

    # A GET with a body: answered, and the connection ends there (what
    # follows its head is its body, not a request).
    with socket.create_connection(("127.0.0.1", server.port),
                                  timeout=30) as connection:
        body = b"GET /v1/models HTTP/1.1\r\n\r\n"
        connection.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Length: %d\r\n\r\n" % len(body) + body)
        reader = connection.makefile("rb")
        first = read_response(reader)
        second = read_response(reader)
    check(first is not None and first[0] == 200 and
          first[1].get("connection") == "close" and second is None,
          "a GET with a body: answered with Connection: close, its body not "
          "read as a request (got %r, then %r)" %
          (first and first[:2], second and second[:2]))


def sse_text(body):
    """The texts of spnl's streamed completion chunks, by choice."""
    texts = {}
    for line in body.decode("utf-8").split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[len("data: "):])
        for choice in event.get("choices", []):
            texts[choice["index"]] = texts.get(choice["index"], "") + \
                (choice.get("text") or "")
    return texts


def check_spnl_stream_utf8(server):
    # The tiny model's byte-level tokens split characters; greedy, the
    # same text comes whole and streamed.
    words = ["Hello", "Paris", "colours", "x y z", "Tell me", "why",
             "blocks", "span", "cache", "the", "a b", "Rome", "1 2 3",
             "Bonjour", "question", "answer"]
    query = {"Map": {"metadata": {"model": "m", "max_tokens": 96,
                                  "temperature": 0},
                     "inputs": words}}
    body = json.dumps(query).encode()
    whole = exchange(server, post_bytes("/v1/query/execute?stream=false",
                                        body))
    streamed = exchange(server, post_bytes("/v1/query/execute?stream=true",
                                           body))
    if not check(whole and streamed and whole[0] == 200 and
                 streamed[0] == 200, "spnl map, whole and streamed: 200"):
        return
    whole_texts = [choice["text"] for choice in
                   json.loads(whole[2])["choices"]]
    streamed_texts = sse_text(streamed[2])
    characters = sum(1 for text in whole_texts for c in text
                     if ord(c) > 0x7F and c != "\ufffd")
    print("spnl stream: %d characters beyond ASCII in %d answers" %
          (characters, len(whole_texts)))
    for index, text in enumerate(whole_texts):
        check(streamed_texts.get(index) == text,
              "choice %d streamed is the text whole: %r vs %r" %
              (index, streamed_texts.get(index), text))


def check_slow_clients(spanc, model):
    server = Server(spanc, model, "--http-threads", "4", "--header-timeout",
                    "2", "--body-timeout", "2", "--max-connections", "128")
    tricklers = []
    stop = threading.Event()
    answers = [b""] * 64

    def trickle(index, connection):
        head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + \
            b"y" * 200
        for byte in head:
            if stop.is_set():
                break
            try:
                connection.sendall(bytes([byte]))
            except OSError:
                break
            connection.settimeout(0.2)
            try:
                data = connection.recv(4096)
                answers[index] += data
                if data == b"" or b"408" in answers[index]:
                    break
            except socket.timeout:
                pass
            except OSError:
                break

    for index in range(64):
        connection = socket.create_connection(("127.0.0.1", server.port),
                                              timeout=10)
        thread = threading.Thread(target=trickle, args=(index, connection),
                                  daemon=True)
        tricklers.append((thread, connection))
        thread.start()
    time.sleep(0.5)
    # 64 trickling clients, 4 HTTP threads: the others are still answered.
    worst = 0.0
    for _ in range(3):
        start = time.monotonic()
        status = server.request("GET", "/health", timeout=10)[0]
        worst = max(worst, time.monotonic() - start)
        check(status == 200, "/health beside 64 trickling clients")
    start = time.monotonic()
    status, _, _ = server.request("POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        timeout=10)
    chat_seconds = time.monotonic() - start
    print("beside 64 tricklers: /health worst %.3f s, a chat %.3f s" %
          (worst, chat_seconds))
    check(status == 200 and worst < 2 and chat_seconds < 5,
          "/health (%.2f s) and a chat (%.2f s, %d) answered at once" %
          (worst, chat_seconds, status))
    for thread, _ in tricklers:
        thread.join(10)
    timed_out = sum(1 for answer in answers if b" 408 " in answer)
    check(timed_out == 64,
          "every trickler is answered 408 at --header-timeout (%d of 64)" %
          timed_out)
    for _, connection in tricklers:
        connection.close()

    # A body that stalls: 408 at --body-timeout.
    start = time.monotonic()
    response = exchange(server, b"POST /v1/chat/completions HTTP/1.1\r\n"
                        b"Host: x\r\nContent-Length: 1000\r\n\r\n{\"mess",
                        timeout=10)
    elapsed = time.monotonic() - start
    check(response is not None and response[0] == 408 and 1 < elapsed < 6,
          "a stalled body: 408 after --body-timeout (got %r after %.1f s)" %
          (response and response[:2], elapsed))

    # Past --max-connections: 503 and closed, the others unharmed.
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10)
            for _ in range(128)]
    time.sleep(0.3)
    extra = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    refused = extra.recv(4096)
    check(b" 503 " in refused and b"--max-connections" in refused,
          "connection 129 of 128: 503 (got %r)" % refused[:60])
    extra.close()
    for connection in idle:
        connection.close()
    time.sleep(0.3)
    check(server.request("GET", "/health")[0] == 200,
          "/health once the idle connections closed")

    # SIGTERM while clients are still sending: exits at once.
    stop.clear()
    senders = []
    for index in range(8):
        connection = socket.create_connection(("127.0.0.1", server.port),
                                              timeout=10)
        connection.sendall(b"GET /heal")
        senders.append(connection)
    body_sender = socket.create_connection(("127.0.0.1", server.port),
                                           timeout=10)
    body_sender.sendall(b"POST /v1/query HTTP/1.1\r\nHost: x\r\n"
                        b"Content-Length: 100000\r\n\r\nquery")
    time.sleep(0.3)
    start = time.monotonic()
    code = server.stop(signal.SIGTERM, timeout=20)
    elapsed = time.monotonic() - start
    print("SIGTERM with 9 clients still sending: exit %r in %.2f s" %
          (code, elapsed))
    check(code == 0 and elapsed < 5,
          "SIGTERM with clients still sending: exit 0 at once (got %r after "
          "%.1f s)" % (code, elapsed))
    for connection in senders + [body_sender]:
        connection.close()


def main(spanc, model):
    max_body = 256 * 1024
    server = Server(spanc, model, "--max-body", str(max_body))
    check_depth_bombs(server)
    check_body_limits(server, max_body)
    check_pipelining(server)
    check_spnl_stream_utf8(server)
    check(server.stop() == 0, "SIGTERM: exit 0")
    check_slow_clients(spanc, model)


if __name__ == "__main__":
    sys.exit(run(main))
