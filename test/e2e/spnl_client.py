"""spnl 0.22.1's `spnl/` backend as a Python test client: its requests to
/v1/query/execute byte for byte, the order its executor sends them in, and
its reading of the answers.

Written from reading spnl 0.22.1's source (the PyPI sdist: spnl-core's
ir/{query,bulk,generate,message}.rs and optimizer/simplify.rs, spnl-run's
execute/mod.rs and generate/backend/spnl.rs, async-openai 0.33's response
types); no code of it is copied. What that source does, and this module
does again:

- A `g` runs as a bulk repeat of n = 1 and a map as a bulk map; only
  those reach the server. Each is serialized by serde_json, compactly:
  `{"repeat":{"n":N,"g":{"model":M,"max_tokens":K,"temperature":T,
  "input":Q}}}` (Bulk is untagged in Query and lower-case inside; the
  generate's metadata is flattened before `input`) or
  `{"map":{"metadata":{"model":M,"max_tokens":K,"temperature":T},
  "inputs":[...]}}`; M is the model without its "spnl/" prefix, K and T
  are spnl's defaults (0 and 0.6) when the query gave none, and T is an
  f32 printed shortest (0.7, not 0.699999988079071).
- POST http://localhost:8000/v1/query/execute?stream=false when K is 1
  (a warm-up), else ?stream=true, with `content-type: text/plain`.
- Streamed, each `data: ` line is parsed as a completion
  (CreateCompletionResponse) whatever the query, and a line that does not
  parse is skipped in silence; whole, a map is read as a completion and a
  repeat as a chat completion. A choice's text goes to answer `index`.
- The answers become assistant messages (one: the message, several: a
  par), and the executor simplifies each result before the next call reads
  it (simplify.rs: singletons unwrap, nested seqs and pluses flatten, empty
  messages go).

Unlike spnl, this client fails loudly where spnl would drop an answer: a
field that async-openai's structs need and the server left out, or one of
the wrong type, is a ReadError.
"""

import json
import struct
from decimal import Decimal


class ReadError(Exception):
    """An answer async-openai 0.33 would not deserialize."""


# --- Queries, as spnl's IR holds them -----------------------------------------
#
# A query is a tuple: ("user"|"system"|"assistant", text),
# ("seq"|"par"|"cross"|"plus", [queries]), ("g", metadata, input),
# ("repeat", n, metadata, input), ("map", metadata, [texts]), where
# metadata is {"model", "max_tokens", "temperature"} (None: not sent).


def metadata(model, max_tokens=0, temperature=0.6):
    """spnl's GenerateMetadata as its deserializer fills it: max_tokens 0
    and temperature 0.6 when the query gives none."""
    return {"model": model, "max_tokens": max_tokens,
            "temperature": temperature}


def f32(value):
    """serde_json's text of an f32: the shortest decimal that reads back as
    the same f32, with a fractional part. Temperatures only: 0 or in
    [1e-4, 1e7), where serde prints no exponent."""
    exact = struct.unpack("f", struct.pack("f", value))[0]
    if exact == 0:
        return "0.0"
    if not 1e-4 <= abs(exact) < 1e7:
        raise ValueError("f32 %r is outside the range written here" % value)
    for digits in range(1, 10):
        text = "%.*g" % (digits, exact)
        if struct.unpack("f", struct.pack("f", float(text)))[0] == exact:
            break
    text = format(Decimal(text), "f")
    return text if "." in text else text + ".0"


def string(text):
    """serde_json's string: `"` and `\\` escaped, control characters as
    \\n, \\t, ... or \\u00xx (lower-case hex), everything else as it is."""
    return json.dumps(text, ensure_ascii=False)


def serialize(query):
    """The bytes serde_json::to_string writes for `query`."""
    kind = query[0]
    if kind in ("user", "system", "assistant"):
        return '{"%s":%s}' % (kind, string(query[1]))
    if kind in ("seq", "par", "cross", "plus"):
        return '{"%s":[%s]}' % (kind, ",".join(map(serialize, query[1])))
    if kind == "g":
        return '{"g":%s}' % generate_body(query[1], query[2])
    if kind == "repeat":
        return '{"repeat":{"n":%d,"g":%s}}' % (
            query[1], generate_body(query[2], query[3]))
    if kind == "map":
        return '{"map":{"metadata":%s,"inputs":[%s]}}' % (
            metadata_fields(query[1], braces=True),
            ",".join(map(string, query[2])))
    raise ValueError("not a query spnl's executor sends: %r" % (query,))


def metadata_fields(meta, braces=False):
    # Declaration order; an absent (None) field is skipped, as
    # skip_serializing_if says.
    fields = ['"model":' + string(meta["model"])]
    if meta.get("max_tokens") is not None:
        fields.append('"max_tokens":%d' % meta["max_tokens"])
    if meta.get("temperature") is not None:
        fields.append('"temperature":' + f32(meta["temperature"]))
    text = ",".join(fields)
    return "{" + text + "}" if braces else text


def generate_body(meta, input_query):
    # The metadata is flattened into the generate, before its input.
    return "{%s,\"input\":%s}" % (metadata_fields(meta), serialize(input_query))


# --- The executor's simplification of results (simplify.rs) -------------------


def simplify(query):
    items = simplify_items(query)
    # From<Vec<Query>>: one item is itself, any other count a seq.
    return items[0] if len(items) == 1 else ("seq", items)


def simplify_items(query):
    kind = query[0]
    if kind in ("user", "system", "assistant"):
        return [] if query[1] == "" else [query]
    children = query[1] if kind in ("seq", "par", "cross", "plus") else None
    if kind == "seq":
        if len(children) == 1:
            return simplify_items(children[0])
        items = []
        for item in flat(children):
            items.extend(item[1] if item[0] == "seq" else [item])
        return [("seq", items)] if children else []
    if kind == "par":
        if len(children) == 1:
            return simplify_items(children[0])
        if all(child[0] == "plus" for child in children):
            return [("plus", [grand for child in children
                              for grand in child[1]])]
        return [("par", flat(children))]
    if kind == "plus":
        if not children:
            return []
        # bulk_mapify needs generates: results hold none.
        if all(child[0] == "plus" for child in children):
            return [("plus", [grand for child in children
                              for grand in child[1]])]
        if children[0][0] in ("seq", "plus"):
            return [("plus", flat(children[0][1] + children[1:]))]
        items = []
        for item in flat(children):
            items.extend(item[1] if item[0] == "plus" else [item])
        return [("plus", items)]
    if kind == "cross":
        if children and children[-1][0] == "cross":
            return [("cross", flat(children[:-1] + children[-1][1]))]
        return [("cross", flat(children))]
    raise ValueError("not a result spnl's executor simplifies: %r" % (query,))


def flat(children):
    return [item for child in children for item in simplify_items(child)]


# --- Reading the answers as async-openai 0.33's structs --------------------------

U32 = 2 ** 32


def need(document, field, kinds, what, optional=False):
    """document[field] if it has one of `kinds` (None allowed when
    optional: serde's Option takes null or absence)."""
    value = document.get(field)
    if value is None and optional:
        return None
    if field not in document or not isinstance(value, kinds) or \
            isinstance(value, bool) and bool not in kinds:
        raise ReadError("%s: '%s' must be %s, got %r" %
                        (what, field, "/".join(k.__name__ for k in kinds),
                         value))
    return value


def need_u32(document, field, what, optional=False):
    value = need(document, field, (int,), what, optional)
    if value is not None and not 0 <= value < U32:
        raise ReadError("%s: '%s' is not a u32: %r" % (what, field, value))
    return value


def need_enum(document, field, allowed, what):
    value = need(document, field, (str,), what, optional=True)
    if value is not None and value not in allowed:
        raise ReadError("%s: '%s' is %r, none of %s" %
                        (what, field, value, sorted(allowed)))
    return value


def read_usage(document, what):
    usage = need(document, "usage", (dict,), what, optional=True)
    if usage is None:
        return None
    for field in ("prompt_tokens", "completion_tokens", "total_tokens"):
        need_u32(usage, field, what + ".usage")
    for details, fields in (("prompt_tokens_details",
                             ("audio_tokens", "cached_tokens")),
                            ("completion_tokens_details",
                             ("accepted_prediction_tokens", "audio_tokens",
                              "reasoning_tokens",
                              "rejected_prediction_tokens"))):
        inner = need(usage, details, (dict,), what + ".usage", optional=True)
        for field in fields if inner is not None else ():
            need_u32(inner, field, what + ".usage." + details, optional=True)
    return usage


def read_envelope(document, what):
    if not isinstance(document, dict):
        raise ReadError("%s: not an object: %r" % (what, document))
    need(document, "id", (str,), what)
    need_u32(document, "created", what)
    need(document, "model", (str,), what)
    need(document, "object", (str,), what)
    need(document, "system_fingerprint", (str,), what, optional=True)
    return need(document, "choices", (list,), what)


def read_completion(document, what="a completion"):
    """CreateCompletionResponse: [(index, text, finish_reason)], usage."""
    choices = []
    for choice in read_envelope(document, what):
        where = what + ".choices[]"
        if not isinstance(choice, dict):
            raise ReadError("%s: not an object: %r" % (where, choice))
        text = need(choice, "text", (str,), where)
        index = need_u32(choice, "index", where)
        need(choice, "logprobs", (dict,), where, optional=True)
        reason = need_enum(choice, "finish_reason",
                           {"stop", "length", "content_filter"}, where)
        choices.append((index, text, reason))
    return choices, read_usage(document, what)


def read_chat_completion(document, what="a chat completion"):
    """CreateChatCompletionResponse: [(index, content, finish_reason)],
    usage."""
    need_enum(document, "service_tier",
              {"auto", "default", "flex", "scale", "priority"}, what)
    choices = []
    for choice in read_envelope(document, what):
        where = what + ".choices[]"
        if not isinstance(choice, dict):
            raise ReadError("%s: not an object: %r" % (where, choice))
        index = need_u32(choice, "index", where)
        message = need(choice, "message", (dict,), where)
        need_enum(message, "role",
                  {"system", "user", "assistant", "tool", "function"},
                  where + ".message")
        if message.get("role") is None:
            raise ReadError("%s.message: 'role' is required" % where)
        content = need(message, "content", (str,), where + ".message",
                       optional=True)
        for field in ("refusal",):
            need(message, field, (str,), where + ".message", optional=True)
        for field in ("tool_calls", "annotations"):
            need(message, field, (list,), where + ".message", optional=True)
        for field in ("function_call", "audio"):
            need(message, field, (dict,), where + ".message", optional=True)
        need(choice, "logprobs", (dict,), where, optional=True)
        reason = need_enum(choice, "finish_reason",
                           {"stop", "length", "tool_calls", "content_filter",
                            "function_call"}, where)
        choices.append((index, content, reason))
    return choices, read_usage(document, what)


def read_stream(body):
    """spnl's streaming loop over the body's bytes: complete lines, `data: `
    ones, [DONE] skipped, each a completion. Returns ({index: text},
    {index: finish_reason}, [usage of chunks that had one])."""
    texts, reasons, usages = {}, {}, []
    buffer = bytes(body)
    while b"\n" in buffer:
        line, buffer = buffer.split(b"\n", 1)
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line or not line.startswith(b"data: "):
            continue
        payload = line[len(b"data: "):]
        if payload == b"[DONE]":
            continue
        try:
            document = json.loads(payload)
        except ValueError as error:
            raise ReadError("a data line is not JSON (%s): %r" %
                            (error, payload[:200]))
        choices, usage = read_completion(document, "a streamed chunk")
        if usage is not None:
            usages.append(usage)
        for index, text, reason in choices:
            texts[index] = texts.get(index, "") + text
            if reason is not None:
                reasons[index] = reason
    return texts, reasons, usages


# --- The client: what spnl's executor sends, in order ---------------------------


class Call:
    """One request spnl's backend made and what it read back."""

    def __init__(self, body, stream, status, answers, reasons, usage):
        self.body, self.stream, self.status = body, stream, status
        self.answers, self.reasons, self.usage = answers, reasons, usage


class SpnlClient:
    """Runs a query as spnl 0.22.1's executor does with `spnl/` models,
    sending each bulk through `post(path, body bytes) -> (status, headers,
    body bytes)`; `calls` records every request in order."""

    def __init__(self, post):
        self.post = post
        self.calls = []

    def execute(self, query):
        return simplify(self.run(query))

    def run(self, query):
        kind = query[0]
        if kind in ("user", "system", "assistant"):
            return query
        if kind in ("seq", "cross"):
            return (kind, [simplify(self.run(child)) for child in query[1]])
        if kind in ("par", "plus"):
            results = [simplify(self.run(child)) for child in query[1]]
            return results[0] if len(results) == 1 else (kind, results)
        if kind == "g":
            inner = simplify(self.run(query[2]))
            return self.bulk(("repeat", 1, query[1], inner))
        if kind in ("repeat", "map"):
            return self.bulk(query)
        raise ValueError("not a query this client runs: %r" % (query,))

    def bulk(self, query):
        meta = query[2] if query[0] == "repeat" else query[1]
        provider, _, model = meta["model"].partition("/")
        if provider != "spnl" or not model:
            raise ValueError("only spnl/ models go to /v1/query/execute")
        # with_model: the "spnl/" prefix is not sent.
        sent = dict(meta, model=model)
        query = (("repeat", query[1], sent, query[3]) if query[0] == "repeat"
                 else ("map", sent, query[2]))
        count = query[1] if query[0] == "repeat" else len(query[2])
        body = serialize(query).encode()
        stream = sent.get("max_tokens") != 1
        status, _, data = self.post(
            "/v1/query/execute?stream=" + ("true" if stream else "false"),
            body)
        answers, reasons, usage = [""] * count, {}, None
        if stream:
            # error_for_status(): a streamed answer must be a 2xx.
            if not 200 <= status < 300:
                raise ReadError("the stream was answered %d: %r" %
                                (status, data[:300]))
            texts, reasons, usages = read_stream(data)
            for index, text in texts.items():
                if index < count:
                    answers[index] = text
            usage = usages[-1] if usages else None
        else:
            try:
                document = json.loads(data)
            except ValueError:
                raise ReadError("the answer (%d) is not JSON: %r" %
                                (status, data[:300]))
            read = read_completion if query[0] == "map" \
                else read_chat_completion
            choices, usage = read(document)
            # A map's choices are taken in order; a repeat's contents
            # likewise, those without content dropped.
            answers = [text for _, text, _ in choices if text is not None]
            reasons = {index: reason for index, _, reason in choices}
        self.calls.append(Call(body, stream, status, answers, reasons, usage))
        messages = [("assistant", text) for text in answers]
        return messages[0] if len(messages) == 1 else ("par", messages)
