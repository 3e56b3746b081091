"""Trace-driven simulation of spanc replicas behind four routers (issue 27,
point 4), for replica counts these cores cannot run.

The workload is `bench serve`'s shared-document RAG at scale: a system
prompt, k documents drawn from a Zipf-popular corpus in a shuffled order
(each a span of a plus, so spanc reuses it at any position), a question.
Each simulated replica is spanc's cache reduced to its blocks: an LRU of
`--cache-blocks` blocks, the system prompt's prefix chain, each document's
span chain (reused wherever it sits; the last block of every span after
the first recomputed, as the default mode `prefix+end1` does), the tail
computed. It emits the KV events spanc serve publishes (BlockStored with
parent and tokens, span blocks tagged, BlockRemoved on eviction), applied
to the routers' view when the request's prefill ends. A replica serves
FIFO: time to first token is its queue wait plus the prefill of what it
does not reuse, at the per-token costs given (defaults: SmolLM2-135M at
-t 1 on this 2-core host, bench/results/engine.md).

Routers, all fed only what a real one sees (the request's token ids; the
events; the load):
  round-robin       in turn;
  sglang-like       sglang-router's cache_aware, approximated on tokens:
                    the longest prefix match with requests it routed to a
                    worker if over half the prompt, else the worker with the
                    least routed, shortest queue when imbalanced;
  prefix (Dynamo)   Dynamo's stock KV router: reused prefix-chain tokens
                    minus queued tokens (deploy/router/span_scorer.py with
                    spans off);
  span-aware        the same plus the span blocks a replica holds anywhere
                    in the prompt (span_scorer.py).

    python3 bench/cluster/simulate.py --out bench/results   # cluster-sim.{md,png}

`spanc bench cluster` (run.py) runs it too, beside the measured routers.
"""

import argparse
import heapq
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "deploy", "router"))
from span_scorer import ClusterIndex, choose, chain_key  # noqa: E402

BLOCK = 16
SPAN_TAG = [["spanc:span"]]


class Workload:
    def __init__(self, args, num_replicas, seed):
        rng = random.Random(seed)
        self.rng = rng
        self.num_documents = args.documents_per_replica * num_replicas
        # Token ids: disjoint ranges per document, so no two blocks of
        # different documents share tokens by chance.
        self.system = list(range(1, args.system_tokens + 1))
        self.documents = []
        for d in range(self.num_documents):
            length = rng.randint(args.doc_tokens // 2, args.doc_tokens * 3 // 2)
            base = 100000 + d * 4096
            self.documents.append([base + t for t in range(length)])
        weights = [1.0 / (rank + 1) ** args.zipf
                   for rank in range(self.num_documents)]
        total = sum(weights)
        self.cumulative = []
        running = 0.0
        for weight in weights:
            running += weight / total
            self.cumulative.append(running)
        self.k = args.k
        self.question_tokens = args.question_tokens

    def request(self, number):
        picked = set()
        while len(picked) < self.k:
            u = self.rng.random()
            lo, hi = 0, self.num_documents - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if self.cumulative[mid] < u:
                    lo = mid + 1
                else:
                    hi = mid
            picked.add(lo)
        order = list(picked)
        self.rng.shuffle(order)
        question = [900000000 + number * 64 + t
                    for t in range(self.question_tokens)]
        tokens = list(self.system)
        for d in order:
            tokens += self.documents[d]
        return order, tokens + question


class Replica:
    """spanc's cache reduced to blocks, and a FIFO server."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.lru = {}  # external hash -> None, oldest first
        self.busy_until = 0.0

    def run(self, workload, order, tokens, costs):
        """(reused tokens, computed tokens, events)."""
        events, reused, stored = [], 0, []
        system = workload.system
        # The prefix chain of the system prompt (full blocks).
        parent = None
        chain_hashes, chain_tokens = [], []
        for start in range(0, len(system) - BLOCK + 1, BLOCK):
            key = ("p", start)
            if key in self.lru:
                self.lru[key] = self.lru.pop(key)
                reused += BLOCK
            else:
                chain_hashes.append(key)
                chain_tokens += system[start:start + BLOCK]
                stored.append(key)
        if chain_hashes:
            first = chain_hashes[0][1] // BLOCK
            prior = ("p", (first - 1) * BLOCK) if first else None
            events.append(["BlockStored", chain_hashes, prior, chain_tokens,
                           BLOCK, None, "GPU", None])
        context = ("p", (len(system) // BLOCK - 1) * BLOCK)
        for position, d in enumerate(order):
            document = workload.documents[d]
            hashes, span_tokens = [], []
            for start in range(0, len(document), BLOCK):
                key = ("s", d, start)
                last = start + BLOCK >= len(document)
                hit = key in self.lru
                if hit:
                    self.lru[key] = self.lru.pop(key)
                    # prefix+end1: a later span's last block is recomputed.
                    if not (last and position > 0):
                        reused += min(BLOCK, len(document) - start)
                else:
                    hashes.append(key)
                    span_tokens += document[start:start + BLOCK]
                    stored.append(key)
            if hashes:
                events.append(["BlockStored", hashes, context, span_tokens,
                               BLOCK, None, "GPU", None,
                               SPAN_TAG * len(hashes)])
        computed = len(tokens) - reused
        # Room for what was stored: evict least recently used.
        for key in stored:
            self.lru[key] = None
        removed = []
        while len(self.lru) > self.capacity:
            oldest = next(iter(self.lru))
            del self.lru[oldest]
            removed.append(oldest)
        if removed:
            events.append(["BlockRemoved", removed, "GPU"])
        return reused, computed, events


class SglangLike:
    """sglang-router's cache_aware on block-aligned token prefixes."""

    def __init__(self, num_replicas, threshold=0.5, balance_abs=32,
                 balance_rel=1.5):
        self.trees = [set() for _ in range(num_replicas)]
        self.sizes = [0] * num_replicas
        self.threshold, self.balance_abs = threshold, balance_abs
        self.balance_rel = balance_rel

    def choose(self, tokens, queued):
        most, least = max(queued), min(queued)
        if most - least > self.balance_abs and most > least * self.balance_rel:
            choice = queued.index(least)
        else:
            matches = []
            for tree in self.trees:
                key, match = None, 0
                for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
                    key = chain_key(key, tokens[start:start + BLOCK])
                    if key not in tree:
                        break
                    match += BLOCK
                matches.append(match)
            best = max(range(len(matches)), key=lambda r: matches[r])
            if matches[best] > self.threshold * len(tokens):
                choice = best
            else:
                choice = min(range(len(self.sizes)),
                             key=lambda r: self.sizes[r])
        key = None
        for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
            key = chain_key(key, tokens[start:start + BLOCK])
            if key not in self.trees[choice]:
                self.trees[choice].add(key)
                self.sizes[choice] += BLOCK
        return choice


def simulate(args, num_replicas, router, seed):
    workload = Workload(args, num_replicas, seed)
    replicas = [Replica(args.cache_blocks) for _ in range(num_replicas)]
    index = ClusterIndex(num_replicas, BLOCK)
    sglang = SglangLike(num_replicas)
    pending = []  # (time, sequence, replica, events)
    arrivals = random.Random(seed + 1)
    # Arrival rate: --load of the cluster's capacity for cold requests.
    cold = (args.system_tokens + args.k * args.doc_tokens +
            args.question_tokens) * args.prefill_seconds + \
        args.decode_tokens * args.decode_seconds
    rate = args.load * num_replicas / cold
    now, sequence = 0.0, 0
    ttfts, reused_total, prompt_total = [], 0, 0
    for number in range(args.requests_per_replica * num_replicas):
        now += arrivals.expovariate(rate)
        while pending and pending[0][0] <= now:
            _, _, replica, events = heapq.heappop(pending)
            for event in events:
                index.apply(replica, event)
        order, tokens = workload.request(number)
        queued = [max(0.0, r.busy_until - now) / args.prefill_seconds
                  for r in replicas]
        if router == "round-robin":
            choice = number % num_replicas
        elif router == "sglang-like":
            choice = sglang.choose(tokens, queued)
        else:
            choice = choose(index, tokens, queued,
                            spans=router == "span-aware")
        replica = replicas[choice]
        reused, computed, events = replica.run(workload, order, tokens, args)
        start = max(now, replica.busy_until)
        prefill = computed * args.prefill_seconds + \
            reused * args.reuse_seconds
        first_token = start + prefill
        replica.busy_until = first_token + \
            args.decode_tokens * args.decode_seconds
        sequence += 1
        heapq.heappush(pending, (first_token, sequence, choice, events))
        ttfts.append(first_token - now)
        reused_total += reused
        prompt_total += len(tokens)
    ttfts.sort()
    return {
        "p50": statistics.median(ttfts),
        "p99": ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))],
        "cached": reused_total / prompt_total,
    }


ROUTERS = ["round-robin", "sglang-like", "prefix (Dynamo)", "span-aware"]


def parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replicas", default="2,3,16,32,64,128,256")
    parser.add_argument("--requests-per-replica", type=int, default=30)
    parser.add_argument("--documents-per-replica", type=int, default=16)
    parser.add_argument("--doc-tokens", type=int, default=256)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--zipf", type=float, default=0.8)
    parser.add_argument("--system-tokens", type=int, default=48)
    parser.add_argument("--question-tokens", type=int, default=16)
    parser.add_argument("--decode-tokens", type=int, default=16)
    parser.add_argument("--cache-blocks", type=int, default=1024)
    parser.add_argument("--prefill-seconds", type=float, default=1 / 80.0)
    parser.add_argument("--reuse-seconds", type=float, default=1 / 5000.0)
    parser.add_argument("--decode-seconds", type=float, default=1 / 40.0)
    parser.add_argument("--load", type=float, default=0.7)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", help="folder for cluster-sim.md and "
                        "cluster-sim.png")
    return parser


def main():
    args = parser().parse_args()
    counts = [int(c) for c in args.replicas.split(",")]
    results = {}
    for count in counts:
        for router in ROUTERS:
            runs = [simulate(args, count, router, seed)
                    for seed in range(args.seeds)]
            results[(count, router)] = {
                key: statistics.median(run[key] for run in runs)
                for key in ("p50", "p99", "cached")}
            r = results[(count, router)]
            print("%4d replicas  %-16s TTFT p50 %7.2f s  p99 %7.2f s  "
                  "cached %5.1f %%" % (count, router, r["p50"], r["p99"],
                                       100 * r["cached"]), flush=True)
    if args.out:
        write_results(args, counts, results)


def write_results(args, counts, results):
    lines = ["| replicas | " + " | ".join(ROUTERS) + " |",
             "|---:|" + "---|" * len(ROUTERS)]
    for count in counts:
        cells = []
        for router in ROUTERS:
            r = results[(count, router)]
            cells.append("%.2f / %.2f s, %.0f %%" % (
                r["p50"], r["p99"], 100 * r["cached"]))
        lines.append("| %d | %s |" % (count, " | ".join(cells)))
    table = "\n".join(lines)
    settings = ", ".join("%s=%s" % (k, v) for k, v in sorted(vars(args).items())
                         if k != "out")
    with open(os.path.join(args.out, "cluster-sim.md"), "w") as out:
        out.write("# Routers at scale: SIMULATED (issue 27, point 4)\n\n"
                  "Trace-driven simulation, not a measurement "
                  "(bench/cluster/simulate.py: the model and its limits are "
                  "in its docstring). TTFT p50 / p99 and the cached share "
                  "of prompt tokens per router, medians of %d seeds. The "
                  "real run of 2-3 replicas is `spanc bench cluster` "
                  "(cluster.md).\n\n%s\n\nSettings: %s\n" % (
                      args.seeds, table, settings))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot")
        return
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for router in ROUTERS:
        left.plot(counts, [results[(c, router)]["p50"] for c in counts],
                  marker="o", label=router)
        right.plot(counts, [100 * results[(c, router)]["cached"]
                            for c in counts], marker="o", label=router)
    for axis, title in ((left, "TTFT p50 (s)"), (right, "cached prompt %")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("replicas (simulated)")
        axis.set_title(title)
        axis.grid(alpha=0.3)
    left.legend()
    figure.suptitle("Shared-document RAG, shuffled orders: routers at scale")
    figure.tight_layout()
    figure.savefig(os.path.join(args.out, "cluster-sim.png"), dpi=110)


if __name__ == "__main__":
    main()
