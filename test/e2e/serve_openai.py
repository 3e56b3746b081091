"""`spanc serve` driven by the official `openai` Python client (PyPI).

Usage: serve_openai.py SPANC TINY_MODEL, from the workspace root, run by
the virtual environment's python that tools/setup.sh builds from
tools/python-requirements.txt (serve_client_test.sh picks it). What real
users' code does: chat, streaming with stream_options.include_usage,
completions with a list of prompts, n, stop and seed, the model list, and
the client's own error classes for our error statuses. The answers are
checked against serve.py's requests sent as raw HTTP (serve_harness.py's
client): the OpenAI client must read exactly what the server wrote.
"""

import sys

import openai

from serve import SYSTEM, chat_body
from serve_harness import KEY, Server, check, run

MODEL = "tiny-llama-synthetic"


def messages(question):
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": question}]


def check_models(client):
    listed = [model.id for model in client.models.list()]
    check(listed == [MODEL], "models.list(): %r" % listed)


def check_chat(client, server):
    answer = client.chat.completions.create(
        model=MODEL, messages=messages("What does the block pool do?"),
        max_tokens=12, temperature=0)
    _, _, raw = server.json("POST", "/v1/chat/completions",
                            chat_body("What does the block pool do?"))
    text = answer.choices[0].message.content
    check(text == raw["choices"][0]["message"]["content"],
          "the client reads the raw answer: %r vs %r" %
          (text, raw["choices"][0]["message"]["content"]))
    check(answer.object == "chat.completion" and
          answer.choices[0].message.role == "assistant" and
          answer.choices[0].finish_reason in ("stop", "length"),
          "chat completion fields: %r" % answer)
    usage = answer.usage
    check(usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
          and 0 < usage.completion_tokens <= 12, "usage: %r" % usage)
    # The raw request ran second: it found the system message and question
    # in the cache.
    check(raw["usage"]["prompt_tokens_details"]["cached_tokens"] >= 16,
          "cached_tokens: %r" % raw["usage"])
    again = client.chat.completions.create(
        model=MODEL, messages=messages("What does the block pool do?"),
        max_tokens=12, temperature=0)
    check(again.usage.prompt_tokens_details.cached_tokens >= 16,
          "the client reads cached_tokens: %r" % again.usage)
    return text, answer.choices[0].finish_reason, usage


def check_chat_stream(client, whole, reason, usage):
    stream = client.chat.completions.create(
        model=MODEL, messages=messages("What does the block pool do?"),
        max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True})
    text, roles, reasons, usages, chunks = "", [], [], [], 0
    for chunk in stream:
        chunks += 1
        check(chunk.object == "chat.completion.chunk", "chunk object")
        if chunk.usage is not None:
            usages.append(chunk.usage)
            check(chunk.choices == [], "the usage chunk has no choices")
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            text += choice.delta.content or ""
            if choice.finish_reason:
                reasons.append(choice.finish_reason)
    check(chunks >= 3, "a stream of several chunks (%d)" % chunks)
    check(text == whole, "the stream's text is the whole answer: %r vs %r" %
          (text, whole))
    check(roles == ["assistant"], "one role delta: %r" % roles)
    check(reasons == [reason], "one finish_reason: %r" % reasons)
    check(len(usages) == 1 and
          usages[0].completion_tokens == usage.completion_tokens and
          usages[0].prompt_tokens == usage.prompt_tokens,
          "include_usage: one usage chunk equal to the whole answer's: %r"
          % usages)


def check_completions(client, server):
    prompts = ["The block pool", "Rotary embeddings"]
    batch = client.completions.create(model=MODEL, prompt=prompts, n=2,
                                      max_tokens=6, temperature=0)
    check(batch.object == "text_completion", "completion object")
    check([choice.index for choice in batch.choices] == [0, 1, 2, 3],
          "n=2 over two prompts: choices 0-3 prompt-major: %r" %
          [choice.index for choice in batch.choices])
    texts = [choice.text for choice in batch.choices]
    prompt_tokens = 0
    for index, prompt in enumerate(prompts):
        _, _, raw = server.json("POST", "/v1/completions", {
            "prompt": prompt, "max_tokens": 6, "temperature": 0})
        alone = raw["choices"][0]["text"]
        prompt_tokens += raw["usage"]["prompt_tokens"]
        check(texts[2 * index] == texts[2 * index + 1] == alone,
              "greedy choices of %r equal the prompt alone: %r vs %r" %
              (prompt, texts[2 * index:2 * index + 2], alone))
    usage = batch.usage
    check(usage.prompt_tokens == prompt_tokens and
          0 < usage.completion_tokens <= 4 * 6 and
          usage.total_tokens == usage.prompt_tokens + usage.completion_tokens,
          "completions usage counts each prompt once: %r" % usage)

    # A stop string cuts the text where it first occurs; the client sees
    # finish_reason "stop".
    whole = texts[0]
    if check(len(whole) >= 4, "a completion long enough to cut: %r" % whole):
        stop = whole[2:4]
        cut = client.completions.create(model=MODEL, prompt=prompts[0],
                                        max_tokens=6, temperature=0,
                                        stop=[stop])
        check(cut.choices[0].text == whole[:whole.find(stop)] and
              cut.choices[0].finish_reason == "stop",
              "stop %r: %r" % (stop, cut.choices[0]))

    # A seed makes sampling repeatable; choices of one request differ in
    # seed (so they may differ in text) but repeat with it.
    def sampled(seed):
        return [choice.text for choice in client.completions.create(
            model=MODEL, prompt=prompts[1], n=3, max_tokens=8,
            temperature=1.0, seed=seed).choices]
    first, second = sampled(7), sampled(7)
    check(first == second, "the same seed samples the same: %r vs %r" %
          (first, second))
    check(len(set(first + sampled(8))) > 1,
          "another seed or choice samples something else: %r" % first)

    # A completions stream through the client.
    streamed = "".join(chunk.choices[0].text
                       for chunk in client.completions.create(
                           model=MODEL, prompt=prompts[0], max_tokens=6,
                           temperature=0, stream=True)
                       if chunk.choices)
    check(streamed == whole, "a completions stream: %r vs %r" %
          (streamed, whole))


def check_errors(client, server):
    def raises(kind, call, what):
        try:
            call()
        except kind as error:
            check(isinstance(error.body, dict) and "message" in error.body,
                  "%s: the client parses the error body: %r" %
                  (what, error.body))
            return
        except Exception as error:  # the wrong class is a failure
            check(False, "%s: %s, wanted %s" % (what, type(error).__name__,
                                               kind.__name__))
            return
        check(False, "%s: no error, wanted %s" % (what, kind.__name__))

    wrong_key = openai.OpenAI(base_url=client.base_url, api_key="wrong",
                              max_retries=0)
    raises(openai.AuthenticationError, lambda: wrong_key.models.list(),
           "wrong key (401)")
    raises(openai.NotFoundError, lambda: client.chat.completions.create(
        model="gpt-4", messages=messages("x"), max_tokens=2),
        "unknown model (404)")
    raises(openai.BadRequestError, lambda: client.chat.completions.create(
        model=MODEL, messages=messages("x"), max_tokens=100000),
        "max_tokens over the limit (400)")
    raises(openai.BadRequestError, lambda: client.completions.create(
        model=MODEL, prompt="x", max_tokens=4, temperature=5),
        "temperature out of range (400)")


def main(spanc, model):
    print("openai %s from %s" % (openai.__version__, openai.__file__))
    server = Server(spanc, model, "--api-key", KEY, "--max-tokens-limit",
                    "1500", "--batch-invariant")
    client = openai.OpenAI(
        base_url="http://127.0.0.1:%d/v1" % server.port, api_key=KEY,
        max_retries=0, timeout=120)
    check_models(client)
    whole, reason, usage = check_chat(client, server)
    check_chat_stream(client, whole, reason, usage)
    check_completions(client, server)
    check_errors(client, server)
    check(server.stop() == 0, "SIGTERM: exit 0")


if __name__ == "__main__":
    sys.exit(run(main))
