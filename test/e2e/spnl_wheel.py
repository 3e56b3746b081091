"""IBM's spnl client (PyPI `spnl` 0.22.1, the real wheel) against `spanc
serve` on SmolLM2-135M, over loopback, as a new user runs it.

Usage: spnl_wheel.py SPANC TINY_MODEL, from the workspace root, under the
virtual environment tools/setup.sh builds (serve_client_test.sh picks it);
the model is $SPANC_ROOT/models' SmolLM2 (TINY_MODEL is not used). With
that environment there, set-up ran: a missing model or wheel fails.

The wheel routes a query by its model's prefix; it is built with the
openai/, ollama/ and gemini/ routes only (its `spnl/` route, which posts to
/v1/query/execute, is a build feature it lacks: "Model not found", nothing
sent), without `augment` and with no builtin queries (the email judge
below is spnl's, written out). So users reach spanc through `openai/NAME`
with OPENAI_API_BASE:
- the wheel's email judge (a repeat of candidates in a plus, judged by a
  g), a bulk map and a RAG query (documents in a plus) answer;
- NAME may be any served name, in any case, with or without .gguf;
- max_completion_tokens bounds each answer and reasoning_effort ("low",
  sent with every chat) changes nothing;
- what openai/ users get from the cache: the route flattens every query
  into chat messages, so the documents of a RAG query shuffled on a repeat
  find only the prefix before the first moved one; the same query sent as
  spnl's spnl/ backend sends it (spnl_client.py) reuses them as spans.
  The email judge is two requests through either route (the candidates
  come back to the second as text), so both reuse the same prefix. The
  figures are printed (README, "Serving").
Each wheel call runs in a child process with a time limit.
"""

import glob
import json
import os
import subprocess
import sys

from serve_harness import Server, check, metric, run
from spnl_client import ReadError, SpnlClient, metadata

SMOL = "SmolLM2-135M-Instruct.Q4_1"
HUB = "HuggingFaceTB/SmolLM2-135M-Instruct"


def wheel(server, query, timeout=180):
    """spnl.execute(query) with OPENAI_API_BASE at `server`, in a child
    process: (answer text or None, error text or None)."""
    environment = dict(os.environ,
                       OPENAI_API_BASE="http://127.0.0.1:%d/v1" % server.port)
    environment.pop("OPENAI_API_KEY", None)
    try:
        child = subprocess.run(
            [sys.executable, __file__, "--execute", json.dumps(query)],
            capture_output=True, text=True, timeout=timeout, env=environment)
    except subprocess.TimeoutExpired:
        return None, "no answer in %d s" % timeout
    for line in reversed(child.stdout.splitlines()):
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
            return result.get("data"), result.get("error")
    return None, "exit %d: %s" % (child.returncode, child.stderr[-500:])


def execute_here(query):
    """The child: runs the query through the wheel, prints one RESULT."""
    import asyncio

    import spnl
    try:
        answer = asyncio.run(spnl.execute(query))
        result = {"data": answer.data}
    except OSError as error:
        result = {"error": str(error)}
    # The wheel writes the answer to stdout too, coloured: a line of our own.
    print("\nRESULT " + json.dumps(result), flush=True)


def g(model, input_query, max_tokens, temperature):
    return {"g": {"model": model, "input": input_query,
                  "max_tokens": max_tokens, "temperature": temperature}}


def email_judge(model, n=3):
    """The wheel's email judge: n candidates as a repeat inside a plus (0.22
    spells a repeat {"repeat": {"n", "g"}}), judged by an outer g."""
    candidate = g(model, {"seq": [
        {"system": "You write a short introductory email for a job "
                   "application."},
        {"user": "My name is Shiloh. I am a data scientist applying at IBM "
                 "Research."}]}, 40, 0.7)["g"]
    return g(model, {"seq": [
        {"system": "You rank candidate introductory emails."},
        {"plus": [{"repeat": {"n": n, "g": candidate}}]},
        {"user": "Which email is best? Answer with its number."}]}, 24, 0.0)


DOCUMENTS = [
    "The block pool keeps every key-value block of the cache in one arena. "
    "When it is full it evicts the least recently used block whose "
    "reference count is zero, and a block that a running request holds is "
    "never evicted. Freed blocks go to the front of the free list, so the "
    "next allocation reuses memory that is still warm.",
    "A span is a run of tokens whose keys and values do not depend on what "
    "comes before it. The server caches each span under the hash of its "
    "tokens alone, so the same document found at another position in a "
    "later prompt is reused by rotating its keys to the new position "
    "instead of being computed again.",
    "The scheduler runs one step at a time. Each step takes the decode "
    "tokens of every running request first, then fills the rest of its "
    "token budget with prompt tokens of waiting requests, oldest first, "
    "so a long prompt never stalls the answers already being written.",
    "Requests arrive over HTTP on many threads but one engine thread owns "
    "the model and the cache. A request is parsed and tokenized on its "
    "HTTP thread, handed to the engine as calls, and its tokens flow back "
    "through a stream the HTTP thread reads until the answer ends.",
]


def rag_query(model, order):
    return g(model, {"cross": [
        {"system": "Answer the question from the documents."},
        {"plus": [{"user": DOCUMENTS[i]} for i in order]},
        {"user": "What does the block pool evict when it is full?"}]}, 16,
        0.0)


def totals(server):
    _, values = server.metrics()
    return {name: sum(v for key, v in values.items()
                      if key == name or key.startswith(name + "{"))
            for name in ("vllm:prefix_cache_hits_total",
                         "vllm:prompt_tokens_total",
                         "vllm:generation_tokens_total",
                         "vllm:request_success_total")}


def delta(server, before):
    after = totals(server)
    return {name: int(after[name] - before[name]) for name in after}


def check_names(server):
    for name in (SMOL.lower() + ".gguf", SMOL.upper(), HUB):
        answer, error = wheel(server, g("openai/" + name, {"seq": [
            {"system": "Be brief."}, {"user": "Name a colour."}]}, 8, 0.0))
        check(answer and not error,
              "openai/%s answers: %r %r" % (name, answer, error))
    answer, error = wheel(server, g("openai/SmolLM2-135M", {
        "user": "Name a colour."}, 8, 0.0))
    check(answer is None and error and "does not exist" in error,
          "openai/ with a name not served: the 404 reaches the user: %r" %
          error)
    answer, error = wheel(server, g("spnl/" + SMOL, {"user": "hi"}, 8, 0.0))
    check(answer is None and error == "Model not found",
          "the wheel has no spnl/ route: %r %r" % (answer, error))
    # No setting can turn it on: the route is a cargo feature, and its
    # fixed URL is not in the wheel's binary at all.
    import spnl
    binaries = glob.glob(os.path.join(os.path.dirname(spnl.__file__), "*.so"))
    holding = [path for path in binaries
               if b"/v1/query/execute" in open(path, "rb").read()]
    check(binaries and not holding,
          "the wheel's binary holds no /v1/query/execute (if it does, a "
          "newer wheel has the spnl/ route: revisit README's spnl part): "
          "%r" % holding)
    # Nor spnl's rag feature: a RAG query inlines its documents (a plus).
    answer, error = wheel(server, g("openai/" + SMOL, {"cross": [
        {"augment": {"embedding_model": "ollama/mxbai-embed-large:335m",
                     "body": {"user": "q"}, "doc": ["kb", {"Text": "t"}]}},
        {"user": "q"}]}, 8, 0.0))
    check(answer is None and "did not match any variant" in (error or ""),
          "the wheel has no augment: %r %r" % (answer, error))


def check_judge_and_map(server):
    before = totals(server)
    answer, error = wheel(server, email_judge("openai/" + SMOL))
    counts = delta(server, before)
    check(answer and not error, "the email judge answers: %r %r" %
          (answer, error))
    check(counts["vllm:request_success_total"] == 4,
          "the judge is one chat of n = 3 and the judge's chat (4 "
          "answers): %r" % counts)
    print("openai/ email judge: %r" % counts, flush=True)
    answer, error = wheel(server, {"map": {
        "metadata": {"model": "openai/" + SMOL, "max_tokens": 8,
                     "temperature": 0.0},
        "inputs": ["Name a colour.", "Name a river."]}})
    check(answer and not error, "a bulk map answers: %r %r" % (answer, error))


def check_max_completion_tokens(server):
    """The route sends max_completion_tokens (and reasoning_effort "low"):
    its answer is the one a plain chat with max_tokens gets."""
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Describe the sea."}]
    before = totals(server)
    answer, error = wheel(server, g("openai/" + SMOL, {"seq": [
        {"system": "Be brief."}, {"user": "Describe the sea."}]}, 3, 0.0))
    generated = delta(server, before)["vllm:generation_tokens_total"]
    status, _, raw = server.json("POST", "/v1/chat/completions", {
        "messages": messages, "max_tokens": 3, "temperature": 0.0})
    text = raw["choices"][0]["message"]["content"] if status == 200 else None
    check(answer == text and generated <= 3,
          "max_completion_tokens 3 honoured (%d generated), as max_tokens: "
          "%r vs %r (%r)" % (generated, answer, text, error))


def replay_rag(server, order):
    client = SpnlClient(spnl_post(server))
    try:
        client.execute(("g", metadata("spnl/" + SMOL, 16, 0.0), ("cross", [
            ("system", "Answer the question from the documents."),
            ("plus", [("user", DOCUMENTS[i]) for i in order]),
            ("user", "What does the block pool evict when it is full?")])))
    except ReadError as error:
        check(False, "the spnl/ replay's answer: %s" % error)
        return ""
    return client.calls[-1].answers[0]


def spnl_post(server):
    def post(path, body):
        status, headers, data = server.request(
            "POST", path, body, key=None,
            headers={"content-type": "text/plain", "accept": "*/*"},
            timeout=180)
        return status, headers, data
    return post


def replay_judge(server):
    """The wheel's email judge as spnl's spnl/ backend runs it: the
    candidates' repeat, then the judge over them (two requests)."""
    model = "spnl/" + SMOL
    client = SpnlClient(spnl_post(server))
    try:
        client.execute(("g", metadata(model, 24, 0.0), ("seq", [
            ("system", "You rank candidate introductory emails."),
            ("plus", [("repeat", 3, metadata(model, 40, 0.7), ("seq", [
                ("system", "You write a short introductory email for a job "
                           "application."),
                ("user", "My name is Shiloh. I am a data scientist applying "
                         "at IBM Research.")]))]),
            ("user", "Which email is best? Answer with its number.")])))
    except ReadError as error:
        check(False, "the spnl/ replay's judge: %s" % error)
        return False
    return len(client.calls) == 2 and bool(client.calls[1].answers[0])


def check_cache_reuse(spanc, smol):
    """The figures of README's "Serving": cached tokens of a RAG query
    cold, repeated and with its documents shuffled, and of the email
    judge, through each route, on a fresh server each."""
    orders = ([0, 1, 2, 3], [0, 1, 2, 3], [2, 0, 3, 1])
    rows, judges = {}, {}
    for route in ("openai/", "spnl/ replay"):
        server = Server(spanc, smol)
        before = totals(server)
        if route == "openai/":
            answer, error = wheel(server, email_judge("openai/" + SMOL))
            check(answer and not error, "openai/ judge: %r" % error)
        else:
            check(replay_judge(server), "the spnl/ replay's judge answers")
        counts = delta(server, before)
        judges[route] = (counts["vllm:prefix_cache_hits_total"],
                         counts["vllm:prompt_tokens_total"])
        rows[route] = []
        for order in orders:
            before = totals(server)
            if route == "openai/":
                answer, error = wheel(server, rag_query("openai/" + SMOL,
                                                        order))
                check(answer and not error,
                      "openai/ RAG %r: %r %r" % (order, answer, error))
            else:
                check(replay_rag(server, order),
                      "spnl/ replay RAG %r answers" % order)
            counts = delta(server, before)
            rows[route].append((counts["vllm:prefix_cache_hits_total"],
                                counts["vllm:prompt_tokens_total"]))
        server.stop()
    for route, figures in rows.items():
        print("RAG through %-13s cold, repeated, shuffled (cached/prompt "
              "tokens): %s; the email judge: %d/%d" %
              (route, ", ".join("%d/%d" % f for f in figures),
               judges[route][0], judges[route][1]), flush=True)
    openai_shuffled = rows["openai/"][2]
    spans_shuffled = rows["spnl/ replay"][2]
    check(rows["openai/"][1][0] >= rows["openai/"][1][1] * 3 // 4,
          "openai/: a repeat finds its prefix: %r" % rows["openai/"])
    check(openai_shuffled[0] < openai_shuffled[1] // 3,
          "openai/: shuffled documents are not reused (flattened chat, "
          "prefix only): %r" % (openai_shuffled,))
    check(spans_shuffled[0] >= spans_shuffled[1] * 2 // 3,
          "/v1/query/execute: shuffled documents are reused as spans: %r" %
          (spans_shuffled,))


def main(spanc, _tiny):
    root = os.environ.get("SPANC_ROOT", "")
    smol = os.path.join(root, "models", SMOL + ".gguf")
    try:
        import spnl  # noqa: F401
    except ImportError:
        check(False, "no spnl wheel in %s: run tools/setup.sh" %
              sys.executable)
        return
    # This runs under the environment setup.sh built, so set-up ran.
    if not check(os.path.exists(smol), "no model at %s although "
                 "tools/setup.sh ran; run it again" % smol):
        return
    server = Server(spanc, smol, "--served-model-name",
                    SMOL + "," + HUB)
    check_names(server)
    check_judge_and_map(server)
    check_max_completion_tokens(server)
    server.stop()
    check_cache_reuse(spanc, smol)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--execute"]:
        execute_here(sys.argv[2])
        sys.exit(0)
    sys.exit(run(main))
