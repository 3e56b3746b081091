"""deploy/router/kv_subscriber.py against a fake replica's sockets (a PUB
and vLLM's ROUTER replay socket, on loopback): a subscriber that joins
late gets the buffered batches from the replay, then the live ones, each
once and in sequence order (a batch that arrives early waits for the one
before it); a gap is skipped and counted after gap_seconds; a stream that
starts again at 0 resets. Needs pyzmq and msgpack (.venv).

    kv_subscriber.py   (no arguments)
"""

import os
import sys
import threading
import time

import msgpack
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
for root in (os.path.join(HERE, "..", ".."), os.environ.get("SPANC_ROOT", "")):
    if os.path.exists(os.path.join(root, "deploy", "router",
                                   "kv_subscriber.py")):
        sys.path.insert(0, os.path.join(root, "deploy", "router"))
        break
from kv_subscriber import KvEventSubscriber  # noqa: E402

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL: " + message, flush=True)


def batch(number):
    return msgpack.packb([time.time(), [["BlockStored", [number], None, [],
                                         16, None, "GPU", None]], 0])


def main():
    context = zmq.Context()
    publisher = context.socket(zmq.PUB)
    events_port = publisher.bind_to_random_port("tcp://127.0.0.1")
    router = context.socket(zmq.ROUTER)
    replay_port = router.bind_to_random_port("tcp://127.0.0.1")
    buffered = {n: batch(n) for n in range(5)}

    def answer_replays():
        while not stop.is_set():
            if not router.poll(50):
                continue
            identity, _, start = router.recv_multipart()
            first = int.from_bytes(start, "big")
            for number in sorted(buffered):
                if number >= first:
                    router.send_multipart([identity, b"",
                                           number.to_bytes(8, "big"),
                                           buffered[number]])
            router.send_multipart([identity, b"", (-1).to_bytes(
                8, "big", signed=True), b""])

    stop = threading.Event()
    replays = threading.Thread(target=answer_replays, daemon=True)
    replays.start()
    applied, resets = [], []
    subscriber = KvEventSubscriber(
        "tcp://127.0.0.1:%d" % events_port,
        "tcp://127.0.0.1:%d" % replay_port,
        lambda events: applied.append(events[0][1][0]),
        lambda: resets.append(len(applied)), gap_seconds=0.5)

    def publish(number):
        publisher.send_multipart([b"", number.to_bytes(8, "big"),
                                  batch(number)])

    def settle(count, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline and len(applied) < count:
            time.sleep(0.02)

    settle(5)
    check(applied == [0, 1, 2, 3, 4], "the replay brings the buffered "
          "batches in order: %s" % applied)
    time.sleep(0.3)  # the live socket has joined
    for number in (5, 6, 8, 7, 4):
        publish(number)
    settle(9)
    check(applied == list(range(9)), "live batches apply once each, in "
          "order, an early one after the one before it: %s" % applied)
    publish(10)  # 9 never comes
    settle(10, timeout=5)
    check(applied[-1] == 10 and subscriber.gaps == 1,
          "a gap is skipped and counted (%s, gaps %d)" % (
              applied[-3:], subscriber.gaps))
    publish(0)  # the replica started again
    settle(11)
    check(resets == [10] and applied[-1] == 0,
          "a stream from 0 again resets first (%s, %s)" % (resets,
                                                           applied[-2:]))
    stats = subscriber.stats()
    check(stats["replayed"] == 5 and stats["caught_up"], "stats: %s" % stats)
    subscriber.close()
    stop.set()
    replays.join()
    publisher.close(0)
    router.close(0)
    context.term()
    print("%d check(s) failed" % len(failures) if failures else "PASSED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
