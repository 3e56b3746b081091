"""spanc serve --kv-events (issue 27), subscribed to as a KV-aware router
does: pyzmq and msgpack, vLLM's wire format.

Checks that the events replay the cache exactly: after a load of chats and
span queries over shared documents in a cache small enough to evict, the
blocks stored minus the blocks removed are the server's cached blocks
(spanc:kv_cached_blocks on /metrics, which is the block pool's hash index),
for a subscriber that was there from the start and for one that joins
late and catches up through the replay socket; the messages are [topic,
8-byte big-endian sequence, msgpack [ts, events, dp_rank]] with sequences
0, 1, 2, ... and BlockStored chains whose blocks are full but the last;
span blocks are tagged. Then the error paths: a queue bound that drops
(AllBlocksCleared follows, the subscriber's state stays a subset of the
cache, the drops are counted), a replay buffer bound, and addresses that
are refused before the model loads (not loopback, malformed, busy).

Run: serve_client_test.sh serve_kv_events.py SPANC TINY_MODEL (the .venv
of tools/setup.sh has pyzmq and msgpack).
"""

import os
import random
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_harness import (SAMPLE_DOCUMENTS, Server, check,  # noqa: E402
                           metric, run)

try:
    import msgpack
    import zmq
except ImportError as error:
    sys.exit("error: %s: run tools/setup.sh (pyzmq and msgpack are pinned "
             "in tools/python-requirements.txt)" % error)

MODEL = "tiny-llama-synthetic"
BLOCK_SIZE = 16
DOCUMENTS = SAMPLE_DOCUMENTS[:6]
END = (-1).to_bytes(8, "big", signed=True)


class Subscriber:
    """A SUB socket that keeps every batch by sequence number, and the
    replay request vLLM's subscribers send to catch up."""

    def __init__(self, endpoint, replay_endpoint, topic=b""):
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.SUB)
        self.socket.setsockopt(zmq.SUBSCRIBE, topic)
        self.socket.connect(endpoint)
        self.replay_endpoint = replay_endpoint
        self.batches = {}
        self.topics = set()
        self.lock = threading.Lock()
        self.running = True
        self.thread = threading.Thread(target=self._listen, daemon=True)
        self.thread.start()

    def _listen(self):
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        while self.running:
            if not poller.poll(50):
                continue
            frames = self.socket.recv_multipart()
            check(len(frames) == 3, "an event message has 3 frames")
            topic, sequence, payload = frames
            check(len(sequence) == 8, "the sequence is 8 bytes")
            with self.lock:
                self.topics.add(topic)
                self.batches[int.from_bytes(sequence, "big")] = payload

    def replay(self, start=0):
        """Asks for every buffered batch from `start`; returns the
        sequences answered."""
        socket = self.context.socket(zmq.DEALER)
        socket.connect(self.replay_endpoint)
        socket.send_multipart([b"", start.to_bytes(8, "big")])
        answered = []
        deadline = time.time() + 30
        while time.time() < deadline:
            if not socket.poll(1000):
                continue
            frames = socket.recv_multipart()
            check(len(frames) == 3 and frames[0] == b"",
                  "a replay answer is [empty, sequence, payload]")
            if frames[1] == END:
                check(frames[2] == b"", "the end marker has no payload")
                break
            sequence = int.from_bytes(frames[1], "big")
            answered.append(sequence)
            with self.lock:
                self.batches.setdefault(sequence, frames[2])
        else:
            check(False, "the replay ended with sequence -1")
        socket.close(0)
        return answered

    def close(self):
        self.running = False
        self.thread.join()
        self.socket.close(0)
        self.context.term()

    def state(self, require_from_zero=True):
        """Applies the batches in order: (live hashes, decoded events).
        With require_from_zero, the sequences must be 0, 1, 2, ..."""
        with self.lock:
            sequences = sorted(self.batches)
            payloads = [self.batches[s] for s in sequences]
        if require_from_zero:
            check(sequences == list(range(len(sequences))),
                  "sequences are 0, 1, 2, ... without a gap: %s..." %
                  sequences[:8])
        live, events = set(), []
        for payload in payloads:
            batch = msgpack.unpackb(payload, raw=False)
            check(isinstance(batch, list) and len(batch) == 3,
                  "a batch is [ts, events, dp_rank]")
            ts, batch_events, rank = batch
            check(isinstance(ts, float) and rank == 0,
                  "ts is a float, dp_rank 0")
            for event in batch_events:
                events.append(event)
                kind = event[0]
                if kind == "AllBlocksCleared":
                    live.clear()
                elif kind == "BlockStored":
                    live.update(event[1])
                elif kind == "BlockRemoved":
                    live.difference_update(event[1])
                else:
                    check(False, "unknown event %r" % kind)
        return live, events


def query_source(documents, question):
    fragments = " ".join('fragment "%s"' % DOCUMENTS[d] for d in documents)
    return """query q {
  gen(max_tokens = 8, temperature = 0) {
    system "Answer from the documents."
    plus { %s }
    user "%s"
  }
}
""" % (fragments, question)


def load(server, count, seed):
    """Span queries and chats over the shared documents, shuffled."""
    rng = random.Random(seed)
    for index in range(count):
        documents = rng.sample(range(len(DOCUMENTS)), 3)
        question = "Question %d: which document says it?" % index
        if index % 2:
            status, _, _ = server.json(
                "POST", "/v1/query", body=query_source(documents, question),
                headers={"Content-Type": "text/plain"}, timeout=120)
        else:
            messages = [{"role": "user", "content": DOCUMENTS[d]}
                        for d in documents]
            messages.append({"role": "user", "content": question})
            status, _, _ = server.json("POST", "/v1/chat/completions", {
                "model": MODEL, "messages": messages, "max_tokens": 8 + index,
                "temperature": 0}, timeout=120)
        check(status == 200, "load request %d answers 200 (%d)" %
              (index, status))


def endpoints(server):
    text = "".join(server.stderr)
    found = re.search(r"KV events on (tcp://127\.0\.0\.1:\d+)"
                      r"(?:, replay on (tcp://127\.0\.0\.1:\d+))?", text)
    check(found is not None, "the server prints its KV event endpoints")
    return found.group(1), found.group(2)


def settled(server, subscriber, agrees=None):
    """Waits until every batch the server counts has reached the
    subscriber and, given `agrees`, until agrees(/metrics values) holds
    (a report the engine queued may not be published yet: the publisher's
    thread can be starved on a busy machine); returns the values then.
    Past 30 s it returns anyway and the caller's checks say what is off."""
    deadline = time.time() + 30
    while time.time() < deadline:
        _, values = server.metrics()
        batches = metric(values, "spanc:kv_event_batches_total")
        with subscriber.lock:
            last = max(subscriber.batches, default=-1)
        if batches is not None and last + 1 >= batches:
            time.sleep(0.1)
            _, again = server.metrics()
            if metric(again, "spanc:kv_event_batches_total") == batches and \
                    (agrees is None or agrees(again)):
                return again
        time.sleep(0.05)
    if agrees is None:
        check(False, "the subscriber received every batch published")
    return server.metrics()[1]


def matches_cache(subscriber):
    """Whether the subscriber's state has as many blocks as the cache."""
    def agrees(values):
        live, _ = subscriber.state(require_from_zero=False)
        return len(live) == metric(values, "spanc:kv_cached_blocks")
    return agrees


def check_events_shape(events):
    stored = [e for e in events if e[0] == "BlockStored"]
    check(len(stored) > 0, "blocks were stored")
    check(any(e[0] == "BlockRemoved" for e in events),
          "a cache this small evicted blocks (BlockRemoved)")
    check(events[0] == ["AllBlocksCleared"],
          "the first event is AllBlocksCleared")
    for event in stored:
        check(len(event) in (8, 9), "BlockStored has 8 fields (9 tagged)")
        _, hashes, parent, tokens, block_size, lora, medium, lora_name = \
            event[:8]
        check(block_size == BLOCK_SIZE, "block_size is the server's")
        check(all(isinstance(h, int) and 0 <= h < 2 ** 64 for h in hashes),
              "block hashes are unsigned 64-bit integers")
        check(parent is None or isinstance(parent, int),
              "parent_block_hash is an integer or nil")
        check((len(hashes) - 1) * BLOCK_SIZE < len(tokens)
              <= len(hashes) * BLOCK_SIZE,
              "every block of a BlockStored is full but the last")
        check(lora is None and lora_name is None and medium == "GPU",
              "lora_id and lora_name nil, medium GPU")
        if len(event) == 9:
            check(event[8] == [["spanc:span"]] * len(hashes),
                  "a span's blocks are tagged in extra_keys")
    check(any(len(e) == 9 for e in stored), "span blocks were stored")
    check(any(len(e) == 8 for e in stored), "prefix blocks were stored")


def check_replays_cache(spanc, model):
    server = Server(spanc, model, "--kv-cache", "768",
                    "--kv-events", "tcp://127.0.0.1:0",
                    "--kv-events-replay", "tcp://127.0.0.1:0")
    endpoint, replay_endpoint = endpoints(server)
    early = Subscriber(endpoint, replay_endpoint)
    time.sleep(0.3)  # ZeroMQ's slow joiner; the replay covers it anyway
    early.replay(0)
    load(server, 40, seed=1)
    values = settled(server, early, matches_cache(early))
    cached = metric(values, "spanc:kv_cached_blocks")
    live, events = early.state()
    check(early.topics == {b""}, "the topic frame is empty (vLLM's)")
    check(len(live) == cached,
          "stored minus removed = the cache: %d events say %d blocks, "
          "/metrics %s" % (len(events), len(live), cached))
    check(metric(values, "spanc:kv_events_dropped_total") == 0,
          "nothing dropped at the default queue bound")
    check_events_shape(events)
    check(metric(values, "spanc:blocks_evicted_total") > 0,
          "the load evicted blocks")

    # A token-id prompt (what Dynamo's frontend sends): its full blocks are
    # stored as a chain from the root with exactly those tokens, as a
    # router hashing the request's tokens expects. The chain may come in
    # one BlockStored or several (the publisher batches what is queued).
    prompt = [(7 * i + 3) % 200 + 1 for i in range(40)]
    status, _, _ = server.json("POST", "/v1/completions", {
        "model": MODEL, "prompt": prompt, "max_tokens": 1,
        "temperature": 0})
    check(status == 200, "a token-id prompt answers 200")

    def prompt_stored(_):
        _, events = early.state(require_from_zero=False)
        children = {}  # (parent, tokens of the block) -> block hash
        for event in events:
            if event[0] != "BlockStored":
                continue
            parent = event[2]
            for index, block in enumerate(event[1]):
                piece = tuple(event[3][index * BLOCK_SIZE:
                                       (index + 1) * BLOCK_SIZE])
                children[(parent, piece)] = block
                parent = block
        parent = None
        for start in (0, BLOCK_SIZE):
            piece = tuple(prompt[start:start + BLOCK_SIZE])
            if (parent, piece) not in children:
                return False
            parent = children[(parent, piece)]
        return True
    values = settled(server, early, prompt_stored)
    check(prompt_stored(values), "the token-id prompt's blocks are stored "
          "as a chain from the root with its tokens")
    live, events = early.state()

    # A subscriber joining now: nothing live arrives, so it asks the
    # replay socket for everything and must reach the same state.
    late = Subscriber(endpoint, replay_endpoint)
    answered = late.replay(0)
    check(answered == list(range(len(answered))) and answered,
          "the replay answers every batch from 0 in order")
    late_live, _ = late.state()
    check(late_live == live,
          "the late subscriber's state equals the early one's (%d vs %d)"
          % (len(late_live), len(live)))
    # More load: both follow it live.
    load(server, 10, seed=2)
    values = settled(server, early, matches_cache(early))
    settled(server, late, matches_cache(late))
    live, _ = early.state()
    late_live, _ = late.state()
    cached = metric(values, "spanc:kv_cached_blocks")
    check(len(live) == cached and late_live == live,
          "after more load both subscribers hold the cache's %s blocks "
          "(%d, %d)" % (cached, len(live), len(late_live)))
    check(metric(values, "spanc:kv_event_replays_total") == 2,
          "two replays answered")
    early.close()
    late.close()
    check(server.stop() == 0, "the server exits 0 on SIGTERM")


def check_bounds(spanc, model):
    """A queue of one report drops (and says so), a buffer of two batches
    replays two."""
    server = Server(spanc, model, "--kv-cache", "768",
                    "--kv-events", "tcp://127.0.0.1:0",
                    "--kv-events-replay", "tcp://127.0.0.1:0",
                    "--kv-events-queue", "1", "--kv-events-buffer", "2")
    endpoint, replay_endpoint = endpoints(server)
    subscriber = Subscriber(endpoint, replay_endpoint)
    time.sleep(0.3)
    load(server, 12, seed=3)
    values = settled(server, subscriber)
    dropped = metric(values, "spanc:kv_events_dropped_total")
    check(dropped > 0, "a queue of 1 drops reports (%s dropped)" % dropped)
    live, events = subscriber.state(require_from_zero=False)
    check(events.count(["AllBlocksCleared"]) >= 2,
          "a drop is followed by AllBlocksCleared")
    # What the subscriber holds is still true: a subset of the cache.
    check(len(live) <= metric(values, "spanc:kv_cached_blocks"),
          "after drops the subscriber holds no block the cache lost")
    late = Subscriber(endpoint, replay_endpoint)
    answered = late.replay(0)
    check(1 <= len(answered) <= 2,
          "a buffer of 2 replays at most 2 batches (%d)" % len(answered))
    check(not answered or answered[0] > 0,
          "the oldest batches left the buffer")
    subscriber.close()
    late.close()
    check(server.stop() == 0, "the bounded server exits 0")


def check_refused(spanc, model):
    def refused(arguments, message):
        result = subprocess.run(
            [spanc, "serve", "--model", model, "--port", "0"] + arguments,
            capture_output=True, text=True, timeout=60)
        check(result.returncode != 0 and message in result.stderr,
              "%s is refused with %r: %d %s" % (
                  arguments, message, result.returncode, result.stderr[-300:]))

    refused(["--kv-events", "tcp://10.1.2.3:5557"], "not a loopback address")
    refused(["--kv-events", "tcp://0.0.0.0:5557"], "not a loopback address")
    refused(["--kv-events", "udp://127.0.0.1:5557"],
            "expected tcp://127.0.0.1:PORT")
    refused(["--kv-events", "tcp://127.0.0.1:99999"], "PORT in [0, 65535]")
    refused(["--kv-events-replay", "tcp://127.0.0.1:0"],
            "--kv-events-replay needs --kv-events")
    refused(["--kv-events", "tcp://127.0.0.1:0", "--kv-events-queue", "0"],
            "--kv-events-queue")
    # A busy port: the server stops instead of publishing nowhere.
    context = zmq.Context()
    holder = context.socket(zmq.PUB)
    port = holder.bind_to_random_port("tcp://127.0.0.1")
    refused(["--kv-events", "tcp://127.0.0.1:%d" % port], "cannot bind")
    holder.close(0)
    context.term()


def main(spanc, model):
    check_refused(spanc, model)
    check_replays_cache(spanc, model)
    check_bounds(spanc, model)


if __name__ == "__main__":
    sys.exit(run(main))
