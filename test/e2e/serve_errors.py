"""spanc serve's errors say what is wrong, and no field is silently
ignored (issue 25, points 8 to 10), over loopback.

Usage: serve_errors.py SPANC TINY_MODEL, from the workspace root (the
runfiles root under Bazel), on the synthetic random-weight llama (greedy,
so answers repeat). Each check names what the server answered before:

- OPTIONS on an endpoint: 200 with Allow, no key needed (was 401 or 405);
  OPTIONS * the server's methods; another method 405 with Allow; an
  unknown path 404; `Authorization: bearer KEY` (any case, more spaces)
  accepted (was 401), another scheme named;
- a prompt past the context without --max-prompt-tokens names the context
  (it cited --max-prompt-tokens);
- tools, tool_choice "required", response_format json_object, penalties,
  echo, suffix, best_of: 400 naming the field (were 200, ignored);
  logit_bias steers the answer and logprobs come back in OpenAI's chat and
  completions shapes (were ignored and null);
- a .span gen naming another model: 404 as a chat naming it (it ran on the
  served model); spnl JSON keeps its client's model names;
- --kv-cache 1024: a longer prompt is a 400 naming both sizes at once (was
  500 "KV cache cannot hold"); one that fits with max_tokens that does not
  ends with "length" and its text (was 500 "KV cache is full", text lost).
"""

import json
import math
import socket
import sys
import time

from serve_harness import KEY, Server, check, run

MODEL = "tiny-llama-synthetic"


def chat(content, **fields):
    body = {"messages": [{"role": "user", "content": content}],
            "max_tokens": 4, "temperature": 0}
    body.update(fields)
    return body


def completion(prompt, **fields):
    body = {"prompt": prompt, "max_tokens": 4, "temperature": 0}
    body.update(fields)
    return body


def error_of(document):
    try:
        return document["error"]
    except (KeyError, TypeError):
        return {}


def raw(server, data, timeout=10):
    """Sends raw bytes on a new connection; returns the response head."""
    with socket.create_connection(("127.0.0.1", server.port),
                                  timeout=timeout) as connection:
        connection.sendall(data)
        answer = b""
        while b"\r\n\r\n" not in answer:
            piece = connection.recv(4096)
            if not piece:
                break
            answer += piece
        return answer.decode("latin-1")


def check_methods_and_key(server):
    for path, allow in [("/v1/chat/completions", "POST, OPTIONS"),
                        ("/v1/query", "POST, OPTIONS"),
                        ("/v1/models", "GET, HEAD, OPTIONS")]:
        # As a browser's preflight sends it: no key.
        status, headers, body = server.request(
            "OPTIONS", path, key=None,
            headers={"Origin": "http://example.com",
                     "Access-Control-Request-Method": "POST"})
        check(status == 200 and headers.get("Allow") == allow and not body,
              "OPTIONS %s: 200, Allow: %s, no key needed (got %d, %r)" %
              (path, allow, status, headers.get("Allow")))
        check("Access-Control-Allow-Origin" not in headers,
              "OPTIONS %s: no CORS header" % path)
    head = raw(server, b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n")
    check(head.startswith("HTTP/1.1 200") and
          "Allow: GET, HEAD, POST, OPTIONS" in head,
          "OPTIONS *: the server's methods (got %r)" % head[:120])
    for method, path, allow in [("PUT", "/v1/chat/completions",
                                 "POST, OPTIONS"),
                                ("DELETE", "/v1/models", "GET, HEAD, OPTIONS"),
                                ("PATCH", "/v1/query", "POST, OPTIONS")]:
        status, headers, _ = server.request(method, path)
        check(status == 405 and headers.get("Allow") == allow,
              "%s %s: 405 with Allow: %s (got %d, %r)" %
              (method, path, allow, status, headers.get("Allow")))
    for method in ["OPTIONS", "GET", "PUT"]:
        status, _, _ = server.request(method, "/v1/nosuch")
        check(status == 404, "%s on an unknown path: 404 (got %d)" %
              (method, status))

    for value in ["bearer " + KEY, "BEARER " + KEY, "Bearer   " + KEY,
                  "bEaReR " + KEY]:
        status, _, _ = server.request(
            "GET", "/v1/models", key=None, headers={"Authorization": value})
        check(status == 200, "Authorization: %r: 200 (got %d)" %
              (value.replace(KEY, "KEY"), status))
    for value, words in [("Bearer wrong", "invalid API key"),
                         ("bearer " + KEY.upper(), "invalid API key"),
                         ("Basic dXNlcjpwYXNz", "scheme 'Basic'"),
                         ("Token " + KEY, "scheme 'Token'"),
                         (KEY, "no scheme")]:
        status, headers, document = server.json(
            "GET", "/v1/models", key=None, headers={"Authorization": value})
        message = error_of(document).get("message", "")
        check(status == 401 and words in message and
              headers.get("WWW-Authenticate") == "Bearer" and
              KEY not in message,
              "Authorization: %r: 401 saying %r (got %d, %r)" %
              (value.replace(KEY, "KEY"), words, status, message))
    status, _, _ = server.request(
        "POST", "/v1/query", body="query q { gen(max_tokens = 2) "
        "{ user \"hi\" } }", headers={"Content-Type": "Application/JSON"})
    check(status == 400, "a Content-Type of any case is JSON (got %d)" %
          status)


def check_prompt_limit_names(server):
    status, _, document = server.json(
        "POST", "/v1/chat/completions", chat("hello world " * 600))
    message = error_of(document).get("message", "")
    check(status == 400 and "the model's context of 4096 tokens" in message
          and "--max-prompt-tokens" not in message,
          "a prompt past the context without --max-prompt-tokens names the "
          "context (got %d, %r)" % (status, message))


def check_unsupported_fields(server):
    cases = [
        ("chat", {"tools": [{"type": "function",
                             "function": {"name": "f", "parameters": {}}}]},
         "tools"),
        ("chat", {"tool_choice": "required"}, "tool_choice"),
        ("chat", {"response_format": {"type": "json_object"}},
         "response_format"),
        ("chat", {"response_format": {"type": "json_schema",
                                      "json_schema": {"name": "x"}}},
         "response_format"),
        ("chat", {"presence_penalty": 1.0}, "presence_penalty"),
        ("chat", {"frequency_penalty": 0.5}, "frequency_penalty"),
        ("chat", {"logit_bias": {"nope": 5}}, "logit_bias"),
        ("chat", {"logit_bias": {"7": 500}}, "logit_bias"),
        ("chat", {"logprobs": True, "stream": True}, "logprobs"),
        ("completions", {"echo": True}, "echo"),
        ("completions", {"suffix": "tail"}, "suffix"),
        ("completions", {"best_of": 4}, "best_of"),
    ]
    for endpoint, fields, param in cases:
        body = chat("hi", **fields) if endpoint == "chat" else \
            completion("hi", **fields)
        path = "/v1/chat/completions" if endpoint == "chat" else \
            "/v1/completions"
        status, _, document = server.json("POST", path, body)
        error = error_of(document)
        check(status == 400 and error.get("param") == param and
              param in error.get("message", ""),
              "%s %s: 400 naming %s (got %d, %r)" %
              (endpoint, json.dumps(fields), param, status, error))
    # Asking for what the server does anyway is fine.
    status, _, _ = server.json("POST", "/v1/chat/completions", chat(
        "hi", response_format={"type": "text"}, presence_penalty=0,
        tool_choice="none", tools=[]))
    check(status == 200, "defaults of unhonoured fields: 200 (got %d)" %
          status)


def check_logit_bias_and_logprobs(server):
    status, _, plain = server.json("POST", "/v1/chat/completions",
                                   chat("hi", max_tokens=6))
    check(status == 200, "a plain chat: 200")
    # +100 on one token makes it the answer, every time.
    status, _, document = server.json(
        "POST", "/v1/completions",
        completion("hi", max_tokens=5, logit_bias={"300": 100},
                   logprobs=0))
    if check(status == 200, "logit_bias: 200 (got %d, %r)" %
             (status, error_of(document))):
        logprobs = document["choices"][0]["logprobs"]
        tokens = logprobs["tokens"]
        # The figures are the model's own, before the bias (vLLM's raw
        # logprobs): the forced token is not its likeliest.
        check(len(tokens) == 5 and len(set(tokens)) == 1 and
              all(value < -0.01 for value in logprobs["token_logprobs"]),
              "logit_bias +100: one token, five times, its logprobs the "
              "model's own (got %r)" % logprobs)
    status, _, document = server.json(
        "POST", "/v1/chat/completions",
        chat("hi", max_tokens=6, logprobs=True, top_logprobs=3))
    if check(status == 200, "chat logprobs: 200 (got %d)" % status):
        choice = document["choices"][0]
        content = (choice.get("logprobs") or {}).get("content") or []
        check(choice["message"]["content"] ==
              plain["choices"][0]["message"]["content"],
              "asking for logprobs changes no token")
        check(len(content) == 6, "a logprob per token (got %d)" %
              len(content))
        joined = b"".join(bytes(entry["bytes"]) for entry in content)
        check(joined.decode("utf-8", "replace") ==
              choice["message"]["content"],
              "the tokens' bytes are the answer")
        for entry in content:
            top = entry["top_logprobs"]
            # Greedy: the token sampled is the likeliest.
            check(len(top) == 3 and top[0]["token"] == entry["token"] and
                  abs(top[0]["logprob"] - entry["logprob"]) < 1e-6 and
                  top[0]["logprob"] >= top[1]["logprob"] >=
                  top[2]["logprob"] and entry["logprob"] <= 0,
                  "top_logprobs: 3, likeliest first, the greedy token "
                  "first (got %r)" % entry)
        mass = sum(math.exp(each["logprob"]) for each in content[0]
                   ["top_logprobs"])
        check(0 < mass <= 1.0001, "probabilities, not scores (%f)" % mass)
    status, _, document = server.json(
        "POST", "/v1/completions", completion("hi", max_tokens=4, logprobs=2))
    if check(status == 200, "completions logprobs: 200 (got %d)" % status):
        logprobs = document["choices"][0]["logprobs"]
        check(set(logprobs) == {"tokens", "token_logprobs", "top_logprobs",
                                "text_offset"} and
              len(logprobs["tokens"]) == 4 and
              logprobs["text_offset"][0] == 0 and
              all(2 <= len(top) <= 3 for top in logprobs["top_logprobs"]),
              "completions logprobs: OpenAI's parallel lists (got %r)" %
              logprobs)


def check_span_query_model(server):
    status, _, document = server.json(
        "POST", "/v1/query", body='query q { gen(model = "/etc/passwd", '
        'max_tokens = 2) { user "hi" } }',
        headers={"Content-Type": "text/plain"})
    error = error_of(document)
    check(status == 404 and error.get("param") == "model" and
          "'/etc/passwd' does not exist" in error.get("message", "") and
          "query.span:1:11" in error.get("message", ""),
          "a .span gen naming another model: 404 at the gen (got %d, %r)" %
          (status, error))
    status, _, chat_answer = server.json(
        "POST", "/v1/chat/completions", chat("hi", model="/etc/passwd"))
    check(status == 404 and error_of(chat_answer).get("code") ==
          error.get("code"), "as a chat naming it (got %d)" % status)
    status, _, _ = server.json(
        "POST", "/v1/query", body='query q { gen(model = "%s", '
        'max_tokens = 2) { user "hi" } }' % MODEL,
        headers={"Content-Type": "text/plain"})
    check(status == 200, "a .span gen naming the served model: 200")
    # spnl JSON's model is required and routes spnl's client: taken as it
    # is on both endpoints.
    spnl = {"g": {"model": "spnl/tiny", "input": {"user": "hi"},
                  "max_tokens": 2}}
    for path in ["/v1/query", "/v1/query/execute?stream=false"]:
        status, _, _ = server.json("POST", path, spnl)
        check(status == 200, "spnl JSON on %s keeps its client's model "
              "names (got %d)" % (path, status))


def check_kv_cache(spanc, model):
    server = Server(spanc, model, "--api-key", KEY, "--kv-cache", "1024")
    start = time.monotonic()
    status, _, document = server.json(
        "POST", "/v1/chat/completions", chat("hello world " * 200))
    elapsed = time.monotonic() - start
    message = error_of(document).get("message", "")
    check(status == 400 and "whole KV cache of 1024 tokens" in message and
          "the prompt has 18" in message and elapsed < 5,
          "a prompt past --kv-cache: 400 at once naming both sizes (got %d, "
          "%r, %.1f s)" % (status, message, elapsed))
    status, _, document = server.json(
        "POST", "/v1/query", body='query q { gen(max_tokens = 2) { user "' +
        "hello world " * 200 + '" } }', headers={"Content-Type": "text/plain"})
    message = error_of(document).get("message", "")
    check(status == 400 and "whole KV cache of 1024 tokens" in message,
          "a span query's prompt past --kv-cache: 400 (got %d, %r)" %
          (status, message))
    # The prompt fits, prompt + max_tokens does not: the answer ends with
    # "length" where the cache ends, its text kept.
    status, _, document = server.json(
        "POST", "/v1/chat/completions",
        chat("hello world " * 60, max_tokens=900))
    ok = check(status == 200, "prompt fits, max_tokens does not: 200 (got "
               "%d, %r)" % (status, error_of(document)))
    if ok:
        choice = document["choices"][0]
        usage = document["usage"]
        check(choice["finish_reason"] == "length" and
              usage["completion_tokens"] > 0 and
              usage["prompt_tokens"] + usage["completion_tokens"] <= 1024 and
              choice["message"]["content"],
              "it ends with length inside the cache, text kept (got %r, %r)"
              % (choice["finish_reason"], usage))
    status, _, document = server.json(
        "POST", "/v1/query", body='query q { gen(max_tokens = 900, '
        'temperature = 0) { user "' + "hello world " * 60 + '" } }',
        headers={"Content-Type": "text/plain"})
    if check(status == 200, "a span query that fits, its max_tokens not: "
             "200 (got %d, %r)" % (status, error_of(document))):
        call = document["calls"][0]
        check(call["succeeded"] and call["finish_reason"] == "length" and
              call["prompt_tokens"] + call["generated_tokens"] <= 1024 and
              document["queries"][0]["results"][0]["text"],
              "it ends with length inside the cache, text kept (got %r)" %
              call)
    check(server.request("GET", "/health")[0] == 200, "serving after")
    check(server.stop() == 0, "SIGTERM: exit 0")


def main(spanc, model):
    server = Server(spanc, model, "--api-key", KEY)
    check_methods_and_key(server)
    check_prompt_limit_names(server)
    check_unsupported_fields(server)
    check_logit_bias_and_logprobs(server)
    check_span_query_model(server)
    check(server.stop() == 0, "SIGTERM: exit 0")
    check_kv_cache(spanc, model)


if __name__ == "__main__":
    sys.exit(run(main))
