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
import subprocess
import sys
import tempfile
import time

from serve_harness import Server, check, kill_servers, metric, run
from spnl_client import ReadError, SpnlClient, f32, metadata, serialize


class SpnlServer(Server):
    """A `spanc serve` spoken to as spnl's client speaks."""

    def post(self, path, body, content_type="text/plain", raw=False):
        """Posts as spnl's client (reqwest) does and returns (status,
        headers, the body's HTTP chunks: one item unless it is chunked;
        bytes when raw, else text)."""
        if isinstance(body, bytes):
            data = body
        else:
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
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
                    chunks.append(reader.read(size))
                    reader.readline()
            else:
                length = int(headers.get("content-length", "0"))
                chunks.append(reader.read(length))
            if not raw:
                chunks = [chunk.decode() for chunk in chunks]
            return status, headers, chunks

    def spnl_post(self, path, body):
        """spnl_client.SpnlClient's transport: (status, headers, body)."""
        status, headers, chunks = self.post(path, body, raw=True)
        return status, headers, b"".join(chunks)

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


# --- spnl 0.22.1's spnl/ backend, replayed (spnl_client.py) -------------------

TINY = "spnl/tiny"


def check_client_bytes():
    """spnl_client writes what serde_json writes for spnl 0.22.1's IR: the
    bytes below are derived by hand from its derive attributes (Bulk
    untagged and lower-case, Repeat's `generate` renamed `g`, metadata
    flattened before `input`, f32 temperatures printed shortest)."""
    rag = ("repeat", 1, metadata("tiny", 16, 0.0), ("cross", [
        ("system", "S"), ("plus", [("user", "d1"), ("user", "d2")]),
        ("user", "q")]))
    expected = ('{"repeat":{"n":1,"g":{"model":"tiny","max_tokens":16,'
                '"temperature":0.0,"input":{"cross":[{"system":"S"},'
                '{"plus":[{"user":"d1"},{"user":"d2"}]},{"user":"q"}]}}}}')
    check(serialize(rag) == expected, "a repeat's bytes: %s" % serialize(rag))
    bulk_map = ("map", metadata("tiny", 1, 0.7), ["a", "b"])
    expected = ('{"map":{"metadata":{"model":"tiny","max_tokens":1,'
                '"temperature":0.7},"inputs":["a","b"]}}')
    check(serialize(bulk_map) == expected,
          "a map's bytes: %s" % serialize(bulk_map))
    check([f32(t) for t in (0, 0.1, 0.6, 0.7, 1, 1.5, 2)] ==
          ["0.0", "0.1", "0.6", "0.7", "1.0", "1.5", "2.0"],
          "f32 temperatures as serde prints them")
    text = serialize(("user", 'line\n"q"\t\x01\u00e9/'))
    check(text == '{"user":"line\\n\\"q\\"\\t\\u0001\u00e9/"}',
          "strings escaped as serde_json escapes them: %r" % text)


def replay(server, query, what):
    """Runs `query` as spnl's executor does; returns the client, or None
    (reported) when an answer could not be read as spnl reads it."""
    client = SpnlClient(server.spnl_post)
    try:
        client.result = client.execute(query)
    except ReadError as error:
        check(False, "%s: spnl would not read the answer: %s" % (what, error))
        return None
    check(all(call.status == 200 for call in client.calls),
          "%s: every call 200: %r" % (what, [c.status for c in client.calls]))
    return client


def check_replay_bulks(server):
    """Repeat and map, streamed and not (max_tokens 1): the choices spnl
    reads, a repeat's whole answer as a chat completion and a map's as a
    completion."""
    messages = ("seq", [("system", "Be brief."),
                        ("user", "Name three colours.")])
    for max_tokens, stream in ((8, True), (1, False)):
        what = "repeat, max_tokens %d" % max_tokens
        client = replay(server, ("repeat", 3, metadata(TINY, max_tokens, 0.0),
                                 messages), what)
        if not client:
            continue
        call = client.calls[0]
        check(call.stream == stream and call.body.startswith(
            b'{"repeat":{"n":3,"g":{"model":"tiny","max_tokens":%d,' %
            max_tokens), "%s: sent %r" % (what, call.body[:60]))
        check(len(call.answers) == 3 and all(call.answers) and
              sorted(call.reasons) == [0, 1, 2],
              "%s: three answers, each finished: %r %r" %
              (what, call.answers, call.reasons))
        check(client.result[0] == "par" and len(client.result[1]) == 3,
              "%s: the result is a par of three: %r" % (what, client.result))
        if not stream:
            check((call.usage or {}).get("prompt_tokens_details", {})
                  .get("cached_tokens", 0) > 0,
                  "%s: the warm cache is counted: %r" % (what, call.usage))
    for max_tokens, stream in ((6, True), (1, False)):
        what = "map, max_tokens %d" % max_tokens
        client = replay(server, ("map", metadata(TINY, max_tokens, 0.0),
                                 ["first input", "second input"]), what)
        if client:
            call = client.calls[0]
            check(call.stream == stream and len(call.answers) == 2 and
                  all(isinstance(a, str) for a in call.answers) and
                  call.answers[0],
                  "%s: an answer per input: %r" % (what, call.answers))


def check_replay_judge(server):
    """spnl's email judge with spnl/ models: the candidates as one repeat,
    then the judge as a repeat of 1 over seq[system, par[the candidates as
    assistant messages], user], byte for byte."""
    judge = ("g", metadata(TINY, 0, 0.0), ("seq", [
        ("system", "You rank candidate emails."),
        ("plus", [("repeat", 3, metadata(TINY, 12, 0.7), ("seq", [
            ("system", "You write short emails."),
            ("user", "Write an introductory email.")]))]),
        ("user", "Which email is best?")]))
    client = replay(server, judge, "the email judge")
    if not client or not check(len(client.calls) == 2,
                               "the judge makes two calls: %d" %
                               len(client.calls)):
        return
    candidates = [a for a in client.calls[0].answers if a]
    expected = ('{"repeat":{"n":1,"g":{"model":"tiny","max_tokens":0,'
                '"temperature":0.0,"input":{"seq":[{"system":"You rank '
                'candidate emails."},{"par":[%s]},{"user":"Which email is '
                'best?"}]}}}}' % ",".join('{"assistant":%s}' %
                                          json.dumps(c, ensure_ascii=False)
                                          for c in candidates))
    check(len(candidates) == 3 and
          client.calls[1].body.decode() == expected,
          "the judge's request: %r" % client.calls[1].body[:300])
    check(client.result[0] == "assistant" and client.result[1],
          "the judge answers: %r" % (client.result,))


RAG_DOCUMENTS = [
    "Document %d. " % i + " ".join(
        "The %s block pool holds %d pages for span %d of corpus %s." %
        (word, i * 7 + j, j, word) for j in range(6))
    for i, word in enumerate(["red", "green", "blue", "amber"])]


def rag_query(model, order, max_tokens=8):
    return ("g", metadata(model, max_tokens, 0.0), ("cross", [
        ("system", "Answer from the documents."),
        ("plus", [("user", RAG_DOCUMENTS[i]) for i in order]),
        ("user", "Which pool holds the most pages?")]))


def cached_tokens(server, run):
    """The prefix_cache_hits_total and prompt_tokens_total that `run()`
    added (span reuse is counted among the hits)."""
    def totals():
        _, values = server.metrics()
        return (metric(values, "vllm:prefix_cache_hits_total") or 0,
                metric(values, "vllm:prompt_tokens_total") or 0)
    hits, prompt = totals()
    run()
    after = totals()
    return int(after[0] - hits), int(after[1] - prompt)


def check_replay_rag(server):
    """A RAG query whose documents come back shuffled reuses them through
    /v1/query/execute: spans, not a prefix."""
    figures = []
    for order in ([0, 1, 2, 3], [0, 1, 2, 3], [3, 1, 0, 2]):
        figures.append(cached_tokens(server, lambda: replay(
            server, rag_query(TINY, order), "RAG %r" % order)))
    print("spnl/ replay, RAG cold, repeated, shuffled (cached, prompt "
          "tokens): %r" % figures, flush=True)
    cold, again, shuffled = figures
    check(again[0] >= again[1] * 3 // 4,
          "a repeated RAG query finds its prompt cached: %r" % (again,))
    check(shuffled[0] >= shuffled[1] // 2,
          "shuffled documents are reused as spans: %r" % (shuffled,))


# --- What spnl's openai/ route sends, raw ---------------------------------------


def openai_route_chat(model, **fields):
    """The chat spnl's openai/ route builds (async-openai 0.33): these
    fields in this order, reasoning_effort "low" and max_completion_tokens
    always."""
    body = {"messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "Name a colour."}],
            "model": model, "reasoning_effort": "low",
            "max_completion_tokens": 5, "stream": True, "n": 2,
            "temperature": 0.0}
    body.update(fields)
    return body


def check_served_names(spanc, model):
    """--served-model-name as vLLM takes it, the matching rule, and the
    fields spnl's openai/ route sends (max_completion_tokens honoured,
    streamed or not, over max_tokens; reasoning_effort ignored)."""
    failed = subprocess.run(
        [spanc, "serve", "--model", model, "--port", "0",
         "--served-model-name", "a,,b"], capture_output=True, text=True,
        timeout=60)
    check(failed.returncode == 1 and "a name is empty" in failed.stderr,
          "an empty served name is refused at start: %d %r" %
          (failed.returncode, failed.stderr))
    server = Server(spanc, model, "--served-model-name", "tiny-llama",
                    "Org/Tiny", "--served-model-name", "tiny2")
    _, _, listed = server.json("GET", "/v1/models")
    ids = [entry["id"] for entry in (listed or {}).get("data", [])]
    check(ids == ["tiny-llama", "Org/Tiny", "tiny2"],
          "/v1/models lists every served name in order: %r" % ids)
    status, events = server.stream("/v1/chat/completions",
                                   openai_route_chat("ORG/TINY"))
    chunks = [e for e in events if e != "[DONE]"]
    counts = {}
    for chunk in chunks:
        for choice in chunk.get("choices", []):
            if choice.get("delta", {}).get("content"):
                counts[choice["index"]] = counts.get(choice["index"], 0) + 1
    check(status == 200 and chunks and
          all(c.get("model") == "Org/Tiny" for c in chunks) and
          sorted(counts) == [0, 1] and max(counts.values()) <= 5,
          "spnl's openai/ chat, another case: 200, answered as the name it "
          "matched, max_completion_tokens 5 bounds each choice: %d %r" %
          (status, counts))
    for name in ("TINY-LLAMA", "tiny-llama.gguf", "Tiny2.GGUF"):
        status, _, answer = server.json(
            "POST", "/v1/completions",
            {"model": name, "prompt": ["a", "b"], "max_tokens": 3,
             "temperature": 0.0})
        check(status == 200 and answer.get("model") in ("tiny-llama",
                                                         "tiny2"),
              "%s names a served model: %d %r" % (name, status, answer))
    status, _, answer = server.json(
        "POST", "/v1/completions",
        {"model": "tiny-lla", "prompt": "a", "max_tokens": 3})
    check(status == 404 and "'tiny-llama', 'Org/Tiny', 'tiny2'" in
          answer.get("error", {}).get("message", ""),
          "another name: 404 listing the served ones: %d %r" %
          (status, answer))
    # max_completion_tokens over max_tokens, streamed and not, counted.
    body = openai_route_chat("tiny2", max_tokens=50, max_completion_tokens=3,
                             n=1, stream_options={"include_usage": True})
    status, events = server.stream("/v1/chat/completions", body)
    usage = [e["usage"] for e in events if e != "[DONE]" and e.get("usage")]
    reasons = [c.get("finish_reason") for e in events if e != "[DONE]"
               for c in e.get("choices", []) if c.get("finish_reason")]
    check(status == 200 and usage and
          usage[-1]["completion_tokens"] <= 3 and
          (usage[-1]["completion_tokens"] == 3) == (reasons == ["length"]),
          "streamed: max_completion_tokens 3 wins over max_tokens 50: "
          "%r %r" % (usage, reasons))
    body.update(stream=False)
    status, _, answer = server.json("POST", "/v1/chat/completions", body)
    check(status == 200 and
          answer["usage"]["completion_tokens"] <= 3,
          "whole: max_completion_tokens 3 wins: %d %r" %
          (status, answer.get("usage")))
    for fields, param in (({"max_completion_tokens": 100000},
                           "max_completion_tokens"),
                          ({"reasoning_effort": "extreme"},
                           "reasoning_effort")):
        status, _, answer = server.json(
            "POST", "/v1/chat/completions",
            openai_route_chat("tiny2", stream=False, **fields))
        check(status == 400 and
              answer.get("error", {}).get("param") == param,
              "%r: 400 naming %s: %d %r" % (fields, param, status, answer))
    server.stop()


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
        check_client_bytes()
        check_replay_bulks(server)
        check_replay_judge(server)
        check_replay_rag(server)
        check(server.stop() == 0, "SIGTERM: exit 0")
        # Long answers, so that the client leaves before they end.
        check_disconnect(SpnlServer(spanc, model, "--max-tokens-limit",
                                    "3000"))
        check_served_names(spanc, model)
    finally:
        # The servers write in scratch: they go first.
        kill_servers()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run(main))
