"""Routing span queries over real spanc replicas (issue 27, point 4): the
measured counterpart of simulate.py, at the 2-3 replicas these cores run.

Each policy gets fresh replicas (`spanc serve -t 1 --kv-events`, a cache
that holds about half the corpus) and the same requests: the shared-
document RAG of `bench serve` as span queries (a system prompt, k of the
documents in a shuffled order as the spans of a plus, a question;
max_tokens 1, so a request's latency is its time to first token), sent
by `--clients` concurrent clients. The routing runs in this driver, on
what a router has: the replicas' KV events (each replica's live block
hashes, from a subscriber that replays from 0) and the request's blocks,
as `spanc compile --emit=plan` lays them out (the hashes spanc's cache
uses; their low 64 bits are the events' ids):

  round-robin   in turn;
  prefix        Dynamo's view: blocks credited in prompt order while each
                chains from the one before (a span in the middle breaks
                the chain), minus the prompt tokens queued on the replica;
  span-aware    every block of the request the replica holds, wherever
                it sits, minus the same load.

sglang-router and Dynamo's frontend cannot carry span queries (neither
forwards /v1/query), so they are measured on chats only
(//test/e2e:*_router_test). Output: a table on stdout, and with --out the
bench/results/cluster-measured-N.md.

    .venv/bin/python3 bench/cluster/run.py --spanc bazel-bin/tools/spanc/spanc
"""

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import msgpack
import zmq

DOCUMENTS = [
    "The kitchen dishwasher runs every evening at six o'clock, and the "
    "fridge is cleared out every Friday afternoon before the weekend.",
    "Visitors park on level two of the garage, which opens at seven in the "
    "morning; bicycles are locked in the yard behind the main entrance.",
    "Badges are worn at all times inside the building, the server room "
    "stays closed, and the alarm code changes at the start of each quarter.",
    "Holiday requests go to the team lead two weeks ahead; the office "
    "closes between Christmas and New Year, and unused days carry over.",
    "The colour printer is on the second floor, the black one by the "
    "kitchen; toner is kept in the cupboard next to the lift on each floor.",
    "Meeting rooms are booked in the shared calendar; a booking left unused "
    "for ten minutes is released, and the large room seats twenty people.",
    "Lunch is served from noon to two in the canteen on the ground floor; "
    "the salad bar closes at half past one and coffee is free all day.",
    "The fire assembly point is the car park across the street; fire "
    "drills happen twice a year and wardens wear yellow vests during them.",
    "Laptops are replaced every four years; a broken one goes to the IT "
    "desk on the third floor, which lends a spare until the repair is done.",
    "The library on the fourth floor lends books for three weeks; journals "
    "stay in the reading room and the quiet area has no phone calls at all.",
    "Post arrives at ten and three; parcels wait at the front desk, which "
    "signs for them and sends an email to the person they are addressed to.",
    "The gym in the basement opens at six; towels are provided, lockers are "
    "emptied every night, and classes are booked through the intranet page.",
]
SYSTEM = "Answer in one short sentence from the documents."


def program(documents, question):
    fragments = " ".join('user "%s"' % DOCUMENTS[d] for d in documents)
    return """query q {
  gen(max_tokens = 1, temperature = 0) {
    system "%s"
    plus { %s }
    user "%s"
  }
}
""" % (SYSTEM, fragments, question)


def workload(count, k, seed):
    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) ** 0.8 for rank in range(len(DOCUMENTS))]
    requests = []
    for number in range(count):
        picked = []
        while len(picked) < k:
            d = rng.choices(range(len(DOCUMENTS)), weights)[0]
            if d not in picked:
                picked.append(d)
        requests.append(program(picked, "Question %d: what does it say?"
                                % number))
    return requests


BLOCK_LINE = re.compile(r"^\s+block \d+ @(\d+).* tokens (\d+).* hash "
                        r"([0-9a-f]{32})")
SEGMENT_LINE = re.compile(r"^\s+(\w+) tokens \d+ .* parent ([0-9a-f]{32})")


def plan_blocks(spanc, model, source):
    """[(position, tokens, low 64 bits of the hash, of its parent)]."""
    with tempfile.NamedTemporaryFile("w", suffix=".span") as file:
        file.write(source)
        file.flush()
        text = subprocess.run(
            [spanc, "compile", file.name, "--emit=plan", "--model", model],
            capture_output=True, text=True, check=True).stdout
    blocks, parent = [], None
    for line in text.splitlines():
        segment = SEGMENT_LINE.match(line)
        if segment:
            parent = int(segment.group(2)[16:], 16)
            continue
        block = BLOCK_LINE.match(line)
        if block:
            own = int(block.group(3)[16:], 16)
            blocks.append((int(block.group(1)), int(block.group(2)), own,
                           parent))
            parent = own
    return blocks


class Replica:
    def __init__(self, spanc, model, cache):
        self.process = subprocess.Popen(
            [spanc, "serve", "--model", model, "--port", "0", "-t", "1",
             "--fixed-threads", "--kv-cache", str(cache),
             "--kv-events", "tcp://127.0.0.1:0",
             "--kv-events-replay", "tcp://127.0.0.1:0"],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        events = replay = None
        while True:
            line = self.process.stderr.readline()
            if not line:
                raise RuntimeError("spanc serve did not start")
            found = re.search(r"KV events on (\S+), replay on (\S+)", line)
            if found:
                events, replay = found.group(1), found.group(2)
            found = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
            if found:
                self.port = int(found.group(1))
                break
        threading.Thread(target=lambda: [None for _ in self.process.stderr],
                         daemon=True).start()
        self.live, self.lock = set(), threading.Lock()
        self.running = True
        self.context = zmq.Context()
        self.thread = threading.Thread(target=self._follow,
                                       args=(events, replay), daemon=True)
        self.thread.start()

    def _apply(self, payload):
        _, events, _ = msgpack.unpackb(payload, raw=False)
        with self.lock:
            for event in events:
                if event[0] == "BlockStored":
                    self.live.update(event[1])
                elif event[0] == "BlockRemoved":
                    self.live.difference_update(event[1])
                elif event[0] == "AllBlocksCleared":
                    self.live.clear()

    def _follow(self, events, replay):
        subscriber = self.context.socket(zmq.SUB)
        subscriber.setsockopt(zmq.SUBSCRIBE, b"")
        subscriber.connect(events)
        time.sleep(0.2)
        seen = set()
        dealer = self.context.socket(zmq.DEALER)
        dealer.connect(replay)
        dealer.send_multipart([b"", (0).to_bytes(8, "big")])
        while self.running:
            if dealer.poll(0):
                _, sequence, payload = dealer.recv_multipart()
                number = int.from_bytes(sequence, "big", signed=True)
                if number >= 0 and number not in seen:
                    seen.add(number)
                    self._apply(payload)
            if subscriber.poll(20):
                _, sequence, payload = subscriber.recv_multipart()
                number = int.from_bytes(sequence, "big")
                if number not in seen:
                    seen.add(number)
                    self._apply(payload)
        subscriber.close(0)
        dealer.close(0)

    def credit(self, blocks, chain):
        """Prompt tokens the replica holds: every block, or (chain) the
        blocks in prompt order while each chains from the one before."""
        with self.lock:
            if not chain:
                return sum(t for _, t, own, _ in blocks if own in self.live)
            total, expected = 0, blocks[0][3] if blocks else None
            for _, tokens, own, parent in sorted(blocks):
                if parent != expected or own not in self.live:
                    break
                total += tokens
                expected = own
            return total

    def stop(self):
        self.running = False
        self.thread.join(5)
        self.process.terminate()
        self.process.wait(30)
        self.context.term()


def run_policy(args, policy, requests, plans):
    replicas = [Replica(args.spanc, args.model, args.kv_cache)
                for _ in range(args.replicas)]
    queued = [0] * len(replicas)  # prompt tokens in flight per replica
    lock = threading.Lock()
    results, turn = [], [0]
    pending = list(range(len(requests)))

    def client():
        while True:
            with lock:
                if not pending:
                    return
                number = pending.pop(0)
                blocks = plans[number]
                prompt = sum(t for _, t, _, _ in blocks)
                if policy == "round-robin":
                    choice = turn[0] % len(replicas)
                    turn[0] += 1
                else:
                    scores = [r.credit(blocks, chain=policy == "prefix") -
                              queued[i] for i, r in enumerate(replicas)]
                    choice = max(range(len(replicas)),
                                 key=lambda i: (scores[i], -queued[i], -i))
                queued[choice] += prompt
            replica = replicas[choice]
            started = time.time()
            request = urllib.request.Request(
                "http://127.0.0.1:%d/v1/query" % replica.port,
                data=requests[number].encode(),
                headers={"Content-Type": "text/plain"})
            with urllib.request.urlopen(request, timeout=600) as response:
                answer = json.loads(response.read())
            latency = time.time() - started
            with lock:
                queued[choice] -= prompt
                call = answer["calls"][0]
                results.append((number, choice, latency,
                                call["prompt_tokens"], call["reused_tokens"]))

    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for replica in replicas:
        replica.stop()
    # The first --warmup requests fill the caches; the rest are measured.
    measured = [r for r in results if r[0] >= args.warmup]
    latencies = sorted(r[2] for r in measured)
    return {
        "p50": statistics.median(latencies),
        "p99": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "cached": sum(r[4] for r in measured) / sum(r[3] for r in measured),
        "spread": [sum(1 for r in results if r[1] == i)
                   for i in range(args.replicas)],
    }


POLICIES = ("round-robin", "prefix", "span-aware")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spanc", required=True)
    parser.add_argument("--model",
                        default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--kv-cache", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    rows = []
    runs = {policy: [] for policy in POLICIES}
    for repeat in range(args.repeats):
        # Interleaved: a repeat runs every policy on the same requests, so
        # a busy spell on this shared machine hits them alike.
        requests = workload(args.requests, args.k, args.seed + repeat)
        plans = [plan_blocks(args.spanc, args.model, r) for r in requests]
        for policy in POLICIES:
            result = run_policy(args, policy, requests, plans)
            runs[policy].append(result)
            print("repeat %d  %-12s TTFT p50 %6.2f s  p99 %6.2f s  cached "
                  "%5.1f %%  requests per replica %s" % (
                      repeat, policy, result["p50"], result["p99"],
                      100 * result["cached"], result["spread"]), flush=True)
    for policy in POLICIES:
        rows.append((policy, {
            key: statistics.median(r[key] for r in runs[policy])
            for key in ("p50", "p99", "cached")}
            | {"spread": runs[policy][-1]["spread"],
               "p50s": [r["p50"] for r in runs[policy]]}))
    if args.out:
        lines = ["| router | TTFT p50 | TTFT p99 | cached share | p50 per "
                 "repeat | requests per replica (last) |",
                 "|---|---:|---:|---:|---|---|"]
        for policy, r in rows:
            lines.append("| %s | %.2f s | %.2f s | %.1f %% | %s | %s |" % (
                policy, r["p50"], r["p99"], 100 * r["cached"],
                " ".join("%.2f" % p for p in r["p50s"]), r["spread"]))
        settings = ", ".join("%s=%s" % (k, v) for k, v in
                             sorted(vars(args).items()) if k != "out")
        name = "cluster-measured-%d.md" % args.replicas
        with open(os.path.join(args.out, name), "w") as out:
            out.write("# Routing span queries over %d real replicas "
                      "(bench/cluster/run.py)\n\nMeasured on this host "
                      "(2 shared cores, SmolLM2-135M, -t 1 per replica); "
                      "client-side TTFT of max_tokens = 1 span queries "
                      "after %d warm-up requests; medians of %d interleaved "
                      "repeats.\n\n%s\n\nSettings: %s\n"
                      % (args.replicas, args.warmup, args.repeats,
                         "\n".join(lines), settings))


if __name__ == "__main__":
    sys.exit(main())
