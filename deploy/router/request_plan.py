"""A request's KV blocks as the replicas will hash them, for the router
(deploy/router/span_router.py) to score replicas by.

A router that credits a span wherever it sits needs the request's blocks
exactly as spanc lays them out: the span query's segments (prefix, one
chain per span of a plus, the tail), each block's 128-bit hash, whose low
64 bits are the ids the replicas' KV events name. Nothing but spanc knows
that layout (its tokenizer, chat template, span rules and hash), so the
router asks spanc, in one of two ways:

  a replica  POST /v1/query/plan (spanc serve compiles the request on an
             HTTP thread, runs nothing, and answers the layout as `spanc
             compile --emit=plan` prints it, with the engine's own hasher,
             cache mode and span options): a loopback round trip and a
             compile, 20-50 ms on this host; the default;
  spanc      `spanc compile FILE --emit=plan --model GGUF` (no weights
             loaded): a process per request, 0.2 s of one idle core on
             this host for SmolLM2, most of it reading the GGUF, and 0.8 s
             beside two busy replicas; the fallback when no replica
             answers, and for replicas older than the route.

Plans are cached by the request's bytes (a repeated request costs a
dictionary lookup); at most `jobs` compile processes run at once.

What gets planned:
  /v1/query            the body as it is: a .span program, or spnl JSON
                       when it starts with "{";
  /v1/query/execute    spnl JSON;
  /v1/chat/completions the messages as spnl JSON, `g` over a cross of
                       {role: text} (a chat is token for token that query:
                       docs/SERVING.md);
  /v1/completions      not planned; a prompt of token ids is scored on
                       its tokens instead (span_scorer.ClusterIndex.reuse).
A body spanc cannot compile gets no plan (the replica answers its error).
"""

import collections
import hashlib
import http.client
import json
import os
import re
import subprocess
import tempfile
import threading
import time

BLOCK_LINE = re.compile(r"^\s+block \d+ @\d+.* tokens (\d+).* hash "
                        r"([0-9a-f]{32})")
SEGMENT_LINE = re.compile(r"^\s+(\w+) tokens \d+ .* parent ([0-9a-f]{32})")


def event_id(hex_hash):
    """The id KV events give a block: the low word of spanc's hash (the
    plan prints the high word first)."""
    return int(hex_hash[16:], 16)


def parse_plan(text):
    """Blocks of every call of `spanc compile --emit=plan` output, in
    prompt order, each once: [(tokens, id, parent id)]."""
    blocks, seen, parent = [], set(), None
    for line in text.splitlines():
        segment = SEGMENT_LINE.match(line)
        if segment:
            parent = event_id(segment.group(2))
            continue
        block = BLOCK_LINE.match(line)
        if block:
            own = event_id(block.group(2))
            if own not in seen:
                seen.add(own)
                blocks.append((int(block.group(1)), own, parent))
            parent = own
    return blocks


def message_text(content):
    """A chat message's text (a list of parts: their text, joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content
                       if isinstance(part, dict))
    return None


def chat_as_spnl(body):
    """The spnl JSON query a chat completion is token for token, or None."""
    try:
        request = json.loads(body)
    except ValueError:
        return None
    messages = request.get("messages") if isinstance(request, dict) else None
    if not isinstance(messages, list) or not messages:
        return None
    nodes = []
    for message in messages:
        if not isinstance(message, dict):
            return None
        role, text = message.get("role"), message_text(message.get("content"))
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant") or text is None:
            return None
        nodes.append({role: text})
    return json.dumps({"g": {"model": "router/plan",
                             "input": {"cross": nodes}}})


def source_of(path, body):
    """(suffix, source) spanc compiles for a request, or None."""
    if path == "/v1/chat/completions":
        spnl = chat_as_spnl(body)
        return None if spnl is None else (".json", spnl)
    if path == "/v1/query/execute":
        return ".json", body.decode("utf-8", "replace")
    if path == "/v1/query":
        text = body.decode("utf-8", "replace")
        return (".json" if text.lstrip().startswith("{") else ".span"), text
    return None


class Planner:
    """Plans requests, cached by their bytes: by a replica's POST
    /v1/query/plan when `replica()` gives one (host, port), else (or when
    the replica cannot answer) by `spanc compile --emit=plan` when `spanc`
    and `model` are given."""

    def __init__(self, replica=None, spanc=None, model=None, block_size=16,
                 extra_args=(), jobs=2, timeout=10.0, cache_size=1024):
        self.replica = replica
        self.command = None
        if spanc and model:
            self.command = [spanc, "compile", None, "--emit=plan", "--model",
                            model, "--block-size", str(block_size)] + \
                list(extra_args)
        self.timeout = timeout
        self.slots = threading.BoundedSemaphore(jobs)
        self.cache = collections.OrderedDict()
        self.cache_size = cache_size
        self.lock = threading.Lock()
        self.counts = collections.Counter()
        self.seconds = collections.deque(maxlen=256)

    def stats(self):
        recent = sorted(self.seconds)
        with self.lock:
            counts = dict(self.counts)
        return dict(counts, seconds_p50=recent[len(recent) // 2]
                    if recent else None,
                    seconds_max=recent[-1] if recent else None)

    def _count(self, what, seconds=None):
        with self.lock:
            self.counts[what] += 1
            if seconds is not None:
                self.seconds.append(seconds)

    def plan(self, path, body, authorization=None):
        """The request's blocks [(tokens, id, parent)], or None."""
        source = source_of(path, body)
        if source is None:
            return None
        key = hashlib.sha256(path.encode() + b"\0" +
                             source[1].encode()).digest()
        with self.lock:
            if key in self.cache:
                self.cache.move_to_end(key)
                self.counts["cache_hits"] += 1
                return self.cache[key]
        started = time.monotonic()
        text = self._ask_replica(source, authorization)
        if text is None and self.command is not None:
            text = self._compile(*source)
        blocks = parse_plan(text) or None if text else None
        self._count("planned" if blocks else "failed",
                    time.monotonic() - started)
        with self.lock:
            self.cache[key] = blocks
            while len(self.cache) > self.cache_size:
                self.cache.popitem(last=False)
        return blocks

    def _ask_replica(self, source, authorization):
        """The plan text a replica lays out, "" when the request does not
        compile (nothing to plan), None when no replica could answer."""
        where = self.replica() if self.replica else None
        if where is None:
            return None
        headers = {"Content-Type": "application/json" if source[0] == ".json"
                   else "text/plain"}
        if authorization:
            headers["Authorization"] = authorization
        connection = http.client.HTTPConnection(*where, timeout=self.timeout)
        try:
            connection.request("POST", "/v1/query/plan",
                               body=source[1].encode(), headers=headers)
            response = connection.getresponse()
            data = response.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException):
            self._count("replica_errors")
            return None
        finally:
            connection.close()
        if response.status == 200:
            self._count("by_replica")
            return data
        if response.status == 400:
            return ""  # the replica will answer the same error
        self._count("replica_errors")  # 404: a replica without the route
        return None

    def _compile(self, suffix, source):
        with self.slots, tempfile.TemporaryDirectory(
                prefix="span-router-") as folder:
            # The file's stem names the query; spanc reads it, nothing else.
            name = os.path.join(folder, "request" + suffix)
            with open(name, "w", encoding="utf-8") as file:
                file.write(source)
            command = list(self.command)
            command[2] = name
            try:
                done = subprocess.run(command, capture_output=True, text=True,
                                      timeout=self.timeout)
            except (OSError, subprocess.TimeoutExpired):
                return None
        self._count("by_spanc")
        return done.stdout if done.returncode == 0 else ""
