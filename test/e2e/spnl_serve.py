"""End-to-end test of spnl's endpoint, POST /v1/query/execute, over loopback.

Usage: spnl_serve.py SPANC TINY_MODEL, from the workspace root (the runfiles
root under Bazel). The requests are the ones spnl's client ("spnl" backend)
sends: the spnl JSON of a bulk (`{"Repeat": ...}`, `{"Map": ...}`) or any
query as a text/plain body, `?stream=true` (false when max_tokens is 1), no
API key; and the answers are read the ways spnl's clients read them:
server-sent event lines whose completion chunks carry `text` and `index`
(newer clients), each HTTP chunk one event whose chat chunk carries
`delta.content` (older clients), or one (chat) completion body.

TINY_MODEL is the synthetic random-weight llama the build generates: its
answers are gibberish but deterministic at temperature 0, so a stream is
compared with the whole answer. Every server this starts is killed at the
end, whatever happens.
"""

import json
import os
import shutil
import socket
import sys
import tempfile
import time

from serve_harness import Server, check, kill_servers, metric, run


class SpnlServer(Server):
    """A `spanc serve` spoken to as spnl's client speaks."""

    def post(self, path, body, content_type="text/plain"):
        """Posts as spnl's client (reqwest) does and returns (status,
        headers, the body's HTTP chunks: one item unless it is chunked)."""
        if not isinstance(body, str):
            body = json.dumps(body)
        data = body.encode()
        request = ("POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                   "content-type: %s\r\naccept: */*\r\n"
                   "content-length: %d\r\n\r\n" %
                   (path, self.port, content_type, len(data))).encode() + data
        with socket.create_connection(("127.0.0.1", self.port),
                                      timeout=120) as connection:
            connection.sendall(request)
            reader = connection.makefile("rb")
            status = int(reader.readline().split()[1])
            headers = {}
            while True:
                line = reader.readline().decode().rstrip("\r\n")
                if not line:
                    break
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
            chunks = []
            if headers.get("transfer-encoding") == "chunked":
                while True:
                    size = int(reader.readline().split(b";")[0], 16)
                    if size == 0:
                        reader.readline()
                        break
                    chunks.append(reader.read(size).decode())
                    reader.readline()
            else:
                length = int(headers.get("content-length", "0"))
                chunks.append(reader.read(length).decode())
            return status, headers, chunks

    def execute(self, query, stream):
        return self.post("/v1/query/execute?stream=" +
                         ("true" if stream else "false"), query)


def read_like_new_client(chunks):
    """spnl's newer client: SSE lines, `data: ` completion chunks, [DONE]
    skipped; returns ({index: text}, finish reasons by index)."""
    texts, reasons = {}, {}
    for line in "".join(chunks).split("\n"):
        line = line.rstrip("\r")
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[len("data: "):])
        check(chunk.get("object") == "text_completion" and "id" in chunk and
              "created" in chunk and "model" in chunk,
              "a completion chunk: %r" % chunk)
        for choice in chunk["choices"]:
            texts[choice["index"]] = texts.get(choice["index"], "") + \
                choice["text"]
            if choice.get("finish_reason"):
                reasons[choice["index"]] = choice["finish_reason"]
    return texts, reasons


def read_like_old_client(chunks):
    """spnl's older client: each HTTP chunk is one event whose `data: ` it
    strips and parses as a chat chunk (`delta.content`)."""
    texts = {}
    for chunk in chunks:
        if chunk.startswith("data: [DONE]"):
            continue
        check(chunk.startswith("data: ") and chunk.endswith("\n\n") and
              chunk.count("data: ") == 1,
              "one event per HTTP chunk: %r" % chunk)
        event = json.loads(chunk[len("data: "):])
        for choice in event["choices"]:
            content = choice["delta"].get("content")
            if content is not None:
                texts[choice["index"]] = texts.get(choice["index"], "") + \
                    content
    return texts


def generate(user, max_tokens, temperature=0.0, system=None):
    messages = ([{"system": system}] if system else []) + [{"user": user}]
    return {"model": "spnl/tiny", "input": {"seq": messages},
            "max_tokens": max_tokens, "temperature": temperature}


def check_repeat(server):
    query = {"Repeat": {"n": 3, "generate": generate(
        "Name three colours.", 8, system="Be brief.")}}
    status, headers, chunks = server.execute(query, stream=True)
    if not check(status == 200, "a streamed Repeat: 200 (got %d %r)" %
                 (status, chunks)):
        return
    check(headers.get("content-type", "").startswith("text/event-stream"),
          "a stream is text/event-stream: %r" % headers)
    check(chunks and chunks[-1] == "data: [DONE]\n\n",
          "the stream ends with [DONE]: %r" % chunks[-1:])
    texts, reasons = read_like_new_client(chunks)
    old = read_like_old_client(chunks)
    check(sorted(texts) == [0, 1, 2] and all(texts.values()),
          "a choice per sample: %r" % texts)
    check(old == texts, "old and new clients read the same: %r vs %r" %
          (old, texts))
    check(set(reasons.values()) <= {"stop", "length"} and len(reasons) == 3,
          "each choice ends with its finish reason: %r" % reasons)

    # max_tokens 1 is a warm-up that spnl sends with stream=false; the whole
    # answer of a Repeat is a chat completion.
    status, headers, chunks = server.execute(query, stream=False)
    whole = json.loads(chunks[0]) if status == 200 else {}
    check(status == 200 and whole.get("object") == "chat.completion" and
          headers.get("content-type", "").startswith("application/json"),
          "a whole Repeat is a chat completion: %d %r" % (status, whole))
    contents = [c["message"]["content"] for c in whole.get("choices", [])]
    check(contents == [texts.get(i) for i in range(3)],
          "temperature 0: stream and whole answers agree: %r vs %r" %
          (contents, texts))
    check(whole.get("usage", {}).get("prompt_tokens_details", {})
          .get("cached_tokens", 0) > 0,
          "the repeat finds the cache warm: %r" % whole.get("usage"))


def check_map(server):
    query = {"bulk": {"Map": {"metadata": {"model": "spnl/tiny",
                                           "max_tokens": 1,
                                           "temperature": 0.0},
                              "inputs": ["first input", "second input"]}}}
    status, _, chunks = server.execute(query, stream=False)
    whole = json.loads(chunks[0]) if status == 200 else {}
    check(status == 200 and whole.get("object") == "text_completion" and
          [c["index"] for c in whole["choices"]] == [0, 1] and
          all(isinstance(c["text"], str) for c in whole["choices"]),
          "a whole Map is a completion, a choice per input: %d %r" %
          (status, whole))
    query["bulk"]["Map"]["metadata"]["max_tokens"] = 6
    status, _, chunks = server.execute(query, stream=True)
    texts, _ = read_like_new_client(chunks)
    check(status == 200 and sorted(texts) == [0, 1],
          "a streamed Map: a choice per input: %r" % texts)


def check_judge(server):
    # spnl's email judge: g(seq[system, plus[repeat{g}], user]), max_tokens
    # 0 for the judge (the server's limit). Its seq is the judge's ordered
    # input, so the candidates' blocks are reused by the judge.
    judge = {"g": {"model": "spnl/tiny", "input": {"seq": [
        {"system": "You rank candidate emails."},
        {"print": "Generate 3 candidate emails in parallel"},
        {"plus": [{"repeat": {"n": 3, "generate": generate(
            "Write an introductory email.", 12, 0.7,
            system="You write short emails.")}}]},
        {"user": "Which email is best?"}]},
        "max_tokens": 0, "temperature": 0.0}}
    status, _, chunks = server.execute(judge, stream=True)
    texts, reasons = read_like_new_client(chunks)
    check(status == 200 and list(texts) == [0] and reasons.get(0),
          "the judge answers as one choice: %d %r" % (status, chunks[-3:]))
    # The same query through /v1/query shows its calls.
    status, _, chunks = server.post("/v1/query", judge, "application/json")
    document = json.loads(chunks[0])
    calls = document.get("calls", [])
    if check(status == 200 and len(calls) == 4,
             "/v1/query runs the judge: %d %r" % (status, document)):
        outer = calls[-1]
        candidates = sum(c["generated_tokens"] for c in calls[:3])
        check(outer["reused_tokens"] >= candidates,
              "the judge reuses its candidates' blocks (seq is spnl's "
              "ordered input): %r" % outer)
        check(outer["prompt_tokens"] - outer["reused_tokens"] <
              outer["prompt_tokens"] // 2,
              "the judge computes less than half its prompt: %r" % outer)


def check_augment(server):
    query = {"g": {"model": "spnl/tiny", "input": {"cross": [
        {"system": "Answer from the documents."},
        {"augment": {"embedding_model": "ollama/mxbai-embed-large:335m",
                     "body": {"user": "block pool eviction"},
                     "doc": ["kb", {"Text": "not read: spanc reads kb"}]}},
        {"user": "Please answer this question:"},
        {"user": "What does the pool evict?"}]},
        "max_tokens": 4, "temperature": 0.0}}
    status, _, chunks = server.execute(query, stream=False)
    check(status == 200, "augment from a --corpus name: %d %r" %
          (status, chunks))
    query["g"]["input"]["cross"][1]["augment"]["doc"][0] = "/etc"
    status, _, chunks = server.execute(query, stream=False)
    error = json.loads(chunks[0]).get("error", {}) if chunks else {}
    check(status == 400 and "corpus '/etc' is not served here" in
          error.get("message", "") and "query.json:1:" in
          error.get("message", ""),
          "any other corpus is refused, named, with its location: %d %r" %
          (status, error))


def check_disconnect(server):
    # A client that goes away mid-stream cancels the query's calls and
    # their blocks go back to the pool.
    query = {"Repeat": {"n": 3, "generate": generate(
        "Tell a long story about the sea.", 3000, 0.9)}}
    body = json.dumps(query).encode()
    with socket.create_connection(("127.0.0.1", server.port),
                                  timeout=60) as connection:
        connection.sendall((
            "POST /v1/query/execute?stream=true HTTP/1.1\r\n"
            "Host: x\r\ncontent-type: text/plain\r\n"
            "content-length: %d\r\n\r\n" % len(body)).encode() + body)
        received = b""
        while received.count(b"data: ") < 2:
            piece = connection.recv(4096)
            if not piece:
                break
            received += piece
    check(received.count(b"data: ") >= 2,
          "the stream started before the client left: %r" % received[:200])
    deadline = time.time() + 30
    running = usage = None
    while time.time() < deadline:
        _, values = server.metrics()
        running = metric(values, "vllm:num_requests_running")
        usage = metric(values, "vllm:kv_cache_usage_perc")
        if running == 0 and usage == 0:
            break
        time.sleep(0.2)
    check(running == 0 and usage == 0,
          "a dropped stream is cancelled and its blocks released "
          "(running %r, KV usage %r)" % (running, usage))
    _, values = server.metrics()
    aborted = metric(values, "vllm:request_success_total",
                     finished_reason="abort")
    check(aborted is not None and aborted >= 1,
          "the dropped request finished as aborted: %r" % aborted)
    status, _, _ = server.execute({"Repeat": {"n": 1, "generate": generate(
        "Still there?", 2)}}, stream=False)
    check(status == 200, "the server keeps serving after a dropped stream")


def check_errors(server):
    for body, what, needle in [
            ('{"g": {"model": "m", "input": {"user": "hi"}, }}',
             "malformed JSON", "query.json:1:47: error: invalid JSON"),
            ('{"g": {"model": "m", "input": {"usr": "hi"}}}',
             "an unknown node", "query.json:1:31: error: unknown key 'usr'"),
            ('query q { gen { user "x" } }', "a .span program",
             "query.json:1:1: error: invalid JSON"),
            ('{"zip": {"first": {"user": "a"}}}', "a zip without second",
             "'zip' needs 'second'")]:
        status, _, chunks = server.execute(body, stream=True)
        document = json.loads(chunks[0]) if chunks else {}
        check(status == 400 and needle in
              document.get("error", {}).get("message", ""),
              "%s: 400 saying where (got %d %r)" % (what, status, document))
    status, _, chunks = server.post("/v1/query/execute?stream=maybe",
                                    '{"user": "x"}')
    document = json.loads(chunks[0])
    check(status == 400 and document["error"]["param"] == "stream",
          "?stream=maybe: 400 naming stream (got %d %r)" % (status, document))


def main(spanc, model):
    scratch = tempfile.mkdtemp(prefix="spnl-serve-")
    try:
        corpus = os.path.join(scratch, "kb")
        os.makedirs(corpus)
        with open(os.path.join(corpus, "pool.md"), "w") as out:
            out.write("When the block pool is full it evicts the least "
                      "recently used block.\n")
        server = SpnlServer(spanc, model, "--corpus", "kb=" + corpus,
                            "--index-dir", os.path.join(scratch, "index"),
                            "--max-tokens-limit", "24", "--batch-invariant")
        check(any("corpus kb = " in line for line in server.stderr),
              "the corpus is indexed at start: %r" % server.stderr)
        check_repeat(server)
        check_map(server)
        check_judge(server)
        check_augment(server)
        check_errors(server)
        check(server.stop() == 0, "SIGTERM: exit 0")
        # Long answers, so that the client leaves before they end.
        check_disconnect(SpnlServer(spanc, model, "--max-tokens-limit",
                                    "3000"))
    finally:
        # The servers write in scratch: they go first.
        kill_servers()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run(main))
