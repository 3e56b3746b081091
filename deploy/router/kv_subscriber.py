"""A subscriber to one `spanc serve --kv-events` stream, as a KV-aware
router keeps one per replica (deploy/router/span_router.py).

vLLM's wire format (server/KvEventPublisher.h): a PUB socket sends
[topic, 8-byte big-endian sequence, msgpack [ts, events, dp_rank]]; the
optional replay socket (ROUTER, `--kv-events-replay`) answers a DEALER's
[b"", start sequence] with every buffered batch from there, each as
[b"", sequence, payload], then [b"", -1, b""]. The subscriber connects to
the live stream first, then asks for a replay from 0, so a router started
after its replicas (or restarted) catches up on what they already hold;
batches reach `on_batch(events)` once each and in sequence order (a batch
that arrives early waits for the ones before it, at most `gap_seconds`,
after which the gap is counted and skipped). A stream that starts again
at 0 (the replica restarted) calls `on_reset()` first.

Needs pyzmq and msgpack (tools/python-requirements.txt).
"""

import threading
import time

import msgpack
import zmq

END = -1


class KvEventSubscriber:
    """Follows one replica's events on a thread of its own."""

    def __init__(self, endpoint, replay_endpoint, on_batch, on_reset=None,
                 gap_seconds=1.0):
        self.endpoint, self.replay_endpoint = endpoint, replay_endpoint
        self.on_batch, self.on_reset = on_batch, on_reset
        self.gap_seconds = gap_seconds
        self.batches = 0       # applied
        self.gaps = 0          # sequences never received, skipped
        self.replayed = 0      # batches the replay answered
        self.replay_done = replay_endpoint is None
        self.next = None       # the sequence to apply next
        self.pending = {}      # sequence -> payload, waiting for `next`
        self.waiting_since = None
        self.replay_deadline = None
        self.running = True
        self.context = zmq.Context()
        self.thread = threading.Thread(target=self._follow, daemon=True,
                                       name="kv-events " + endpoint)
        self.thread.start()

    def stats(self):
        return {"endpoint": self.endpoint, "replay": self.replay_endpoint,
                "batches": self.batches, "gaps": self.gaps,
                "replayed": self.replayed, "caught_up": self.replay_done}

    def close(self):
        self.running = False
        self.thread.join(5)
        self.context.term()

    def _follow(self):
        live = self.context.socket(zmq.SUB)
        live.setsockopt(zmq.SUBSCRIBE, b"")
        live.setsockopt(zmq.LINGER, 0)
        live.connect(self.endpoint)
        poller = zmq.Poller()
        poller.register(live, zmq.POLLIN)
        replay = None
        if self.replay_endpoint is not None:
            replay = self._ask_replay(poller)
        try:
            while self.running:
                for socket, _ in poller.poll(50):
                    if socket is live:
                        frames = live.recv_multipart()
                        if len(frames) == 3:
                            self._receive(frames[1], frames[2], replayed=False)
                    else:
                        frames = replay.recv_multipart()
                        if len(frames) == 3:
                            self._receive(frames[1], frames[2], replayed=True)
                self._drain()
        finally:
            live.close(0)
            if replay is not None:
                replay.close(0)

    def _ask_replay(self, poller):
        # ZeroMQ's slow joiner: what the live socket misses while it joins
        # is in the replay anyway.
        replay = self.context.socket(zmq.DEALER)
        replay.setsockopt(zmq.LINGER, 0)
        replay.connect(self.replay_endpoint)
        replay.send_multipart([b"", (0).to_bytes(8, "big")])
        # A replica that never answers (no replay socket after all) holds
        # the live batches back this long, no longer.
        self.replay_deadline = time.monotonic() + 5.0
        poller.register(replay, zmq.POLLIN)
        return replay

    def _receive(self, sequence_bytes, payload, replayed):
        sequence = int.from_bytes(sequence_bytes, "big", signed=True)
        if replayed and sequence == END:
            self.replay_done = True
            return
        if replayed:
            self.replayed += 1
        if self.next is not None and sequence < self.next:
            if sequence == 0 and not replayed and self.next > 1:
                # The replica started again: a new stream from 0.
                self.pending.clear()
                self.next = 0
                if self.on_reset is not None:
                    self.on_reset()
            else:
                return  # applied already (replay and live overlap)
        self.pending.setdefault(sequence, payload)

    def _drain(self):
        if not self.pending:
            self.waiting_since = None
            return
        if self.next is None:
            if not self.replay_done and time.monotonic() < (
                    self.replay_deadline or 0):
                return  # the replay may still bring earlier batches
            self.replay_done = True
            self.next = min(self.pending)
        while self.next in self.pending:
            payload = self.pending.pop(self.next)
            self.next += 1
            self.waiting_since = None
            try:
                _, events, _ = msgpack.unpackb(payload, raw=False)
            except Exception:  # noqa: BLE001 (msgpack raises several kinds)
                self.gaps += 1  # a batch that does not decode is lost
                continue
            self.batches += 1
            self.on_batch(events)
        if not self.pending:
            return
        now = time.monotonic()
        if self.waiting_since is None:
            self.waiting_since = now
        elif now - self.waiting_since > self.gap_seconds:
            first = min(self.pending)
            self.gaps += first - self.next
            self.next = first
            self.waiting_since = None
            self._drain()
