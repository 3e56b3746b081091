"""The driver of `spanc bench cluster` (issue 27, point 4): real routers in
front of 2-3 real `spanc serve -t 1` replicas, then the simulation of
16-256 (simulate.py), as one table.

Each router gets fresh replicas (a KV cache of --kv-cache tokens: 768,
48 blocks, holds most of the 12 documents beside the requests in flight;
less makes the replicas split the corpus) and the same requests: the
shared-document RAG of `bench serve` with shuffled document orders (a
system prompt, k of the 12
documents, a question; max_tokens 1, so a request's latency is its time to
first token), sent by --clients concurrent clients through the router.
The span-query routers (routers.py: deploy/router/span_router.py as
round-robin, span-aware and prefix-only) carry them as span queries (the
documents as the spans of a plus); sglang-router's cache_aware and
Dynamo's stock KV router, which cannot forward /v1/query, carry the same
documents in the same order as chat messages. Measured per router, after
--warmup requests: client-side TTFT p50/p99, and the cached share of
prompt tokens from the replicas' own counters (vllm:prefix_cache_hits_total
over vllm:prefix_cache_queries_total, summed); medians over --repeats
interleaved repeats (each repeat runs every router on its own requests).

Writes --tsv (one row per measured router and per simulated point) and
--markdown (the tables and notes, for `spanc bench cluster` to put in
bench/results/cluster.md). Runs under the tools venv (.venv):

    .venv/bin/python3 bench/cluster/run.py --spanc bazel-bin/tools/spanc/spanc \\
        --model models/SmolLM2-135M-Instruct.Q4_1.gguf --tsv /tmp/c.tsv \\
        --markdown /tmp/c.md
"""

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import routers  # noqa: E402
import simulate  # noqa: E402

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
LABELS = {"round-robin": "round-robin (span_router)",
          "span": "span-aware (span_router)",
          "prefix": "prefix-only (span_router, Dynamo's view)",
          "sglang": "sglang-router cache_aware",
          "dynamo": "Dynamo 1.6.1 KV router"}


def span_query(documents, question):
    fragments = " ".join('user "%s"' % DOCUMENTS[d] for d in documents)
    return """query q {
  gen(max_tokens = 1, temperature = 0) {
    system "%s"
    plus { %s }
    user "%s"
  }
}
""" % (SYSTEM, fragments, question)


def chat(documents, question):
    messages = [{"role": "system", "content": SYSTEM}]
    messages += [{"role": "user", "content": DOCUMENTS[d]} for d in documents]
    messages.append({"role": "user", "content": question})
    return {"model": routers.NAME, "messages": messages, "max_tokens": 1,
            "temperature": 0}


def workload(count, k, seed):
    """[(documents in order, question)]: Zipf-popular documents."""
    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) ** 0.8 for rank in range(len(DOCUMENTS))]
    requests = []
    for number in range(count):
        picked = []
        while len(picked) < k:
            d = rng.choices(range(len(DOCUMENTS)), weights)[0]
            if d not in picked:
                picked.append(d)
        requests.append((picked, "Question %d: what does it say?" % number))
    return requests


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def send(port, router, request, timeout):
    """(seconds, status)."""
    documents, question = request
    if router.carries == "span queries":
        path, data, kind = "/v1/query", span_query(documents, question) \
            .encode(), "text/plain"
    else:
        path, data, kind = "/v1/chat/completions", json.dumps(
            chat(documents, question)).encode(), "application/json"
    started = time.time()
    try:
        with urllib.request.urlopen(urllib.request.Request(
                "http://127.0.0.1:%d%s" % (port, path), data=data,
                headers={"Content-Type": kind}), timeout=timeout) as answer:
            answer.read()
            status = answer.status
    except urllib.error.HTTPError as error:
        error.read()
        status = error.code
    except (urllib.error.URLError, OSError):
        status = 0
    return time.time() - started, status


def drive(port, router, requests, clients, timeout):
    """Sends the requests in order from `clients` threads; returns
    [(number, seconds, status)]."""
    pending, results, lock = list(range(len(requests))), [], threading.Lock()

    def client():
        while True:
            with lock:
                if not pending:
                    return
                number = pending.pop(0)
            seconds, status = send(port, router, requests[number], timeout)
            with lock:
                results.append((number, seconds, status))

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def run_router(args, name, requests, work):
    """One router on fresh replicas: its measured numbers."""
    replicas = [routers.Replica(args.spanc, args.model, args.kv_cache)
                for _ in range(args.replicas)]
    router = None
    try:
        router = routers.start_router(name, args.root, args.spanc, args.model,
                                      replicas, work, free_port)
        warm = drive(router.port, router, requests[:args.warmup],
                     args.clients, args.timeout)
        before = [r.counters() for r in replicas]
        measured = drive(router.port, router, requests[args.warmup:],
                         args.clients, args.timeout)
        after = [r.counters() for r in replicas]
        stats = router.stats() if hasattr(router, "stats") else None
    finally:
        if router is not None:
            router.stop()
        for replica in replicas:
            replica.stop()
    failed = [r for r in warm + measured if r[2] != 200]
    if failed:
        raise RuntimeError("%s: %d of %d requests failed (statuses %s)" % (
            name, len(failed), len(warm + measured),
            sorted({r[2] for r in failed})))
    latencies = sorted(r[1] for r in measured)
    queried = sum(a[0] - b[0] for a, b in zip(after, before))
    hits = sum(a[1] - b[1] for a, b in zip(after, before))
    result = {"p50": statistics.median(latencies),
              "p99": latencies[min(len(latencies) - 1,
                                   int(0.99 * len(latencies)))],
              "cached": hits / queried if queried else 0.0,
              "spread": [int(a[2] - b[2]) for a, b in zip(after, before)]}
    if stats is not None and stats.get("planner"):
        result["plan_p50"] = stats["planner"]["seconds_p50"]
    return result


def measure(args):
    """{router: [result per repeat]} and {router: why skipped}."""
    runs = {name: [] for name in args.routers}
    skipped = {}
    with tempfile.TemporaryDirectory(prefix="spanc-cluster-") as work:
        for repeat in range(args.repeats):
            requests = workload(args.requests, args.k, args.seed + repeat)
            for name in args.routers:
                if name in skipped:
                    continue
                folder = os.path.join(work, "%s-%d" % (name, repeat))
                os.makedirs(folder)
                try:
                    result = run_router(args, name, requests, folder)
                except routers.Unavailable as why:
                    skipped[name] = str(why)
                    print("cluster: %s skipped: %s" % (name, why),
                          flush=True)
                    continue
                except (RuntimeError, OSError,
                        subprocess.SubprocessError) as why:
                    if name not in routers.CHAT_ROUTERS:
                        raise
                    # Another project's router that would not run here:
                    # said in the results, the others still measured.
                    skipped[name] = "failed here: %s (logs: %s)" % (
                        why, folder)
                    print("cluster: %s failed: %s" % (name, why), flush=True)
                    continue
                runs[name].append(result)
                print("cluster: repeat %d  %-12s TTFT p50 %6.2f s  p99 %6.2f "
                      "s  cached %5.1f %%  requests per replica %s" % (
                          repeat, name, result["p50"], result["p99"],
                          100 * result["cached"], result["spread"]),
                      flush=True)
    return {n: r for n, r in runs.items() if r}, skipped


def simulated(args):
    """{(replicas, router): result} from simulate.py at its defaults."""
    settings = simulate.parser().parse_args(
        ["--replicas", args.sim_replicas, "--seeds", str(args.sim_seeds),
         "--requests-per-replica", str(args.sim_requests)])
    counts = [int(c) for c in settings.replicas.split(",")]
    results = {}
    for count in counts:
        for router in simulate.ROUTERS:
            runs = [simulate.simulate(settings, count, router, seed)
                    for seed in range(settings.seeds)]
            results[(count, router)] = {
                key: statistics.median(r[key] for r in runs)
                for key in ("p50", "p99", "cached")}
    return counts, results, settings


def write_tsv(path, args, runs, counts, sim):
    rows = ["kind\treplicas\trouter\tcarries\tttft_p50_s\tttft_p99_s\t"
            "cached_share\trequests_per_replica\trepeats"]
    for name, results in runs.items():
        carries = "chats" if name in routers.CHAT_ROUTERS else "span queries"
        rows.append("measured\t%d\t%s\t%s\t%.4f\t%.4f\t%.4f\t%s\t%d" % (
            args.replicas, name, carries,
            statistics.median(r["p50"] for r in results),
            statistics.median(r["p99"] for r in results),
            statistics.median(r["cached"] for r in results),
            "/".join(str(n) for n in results[-1]["spread"]), len(results)))
    for count in counts:
        for router in simulate.ROUTERS:
            r = sim[(count, router)]
            rows.append("simulated\t%d\t%s\t%s\t%.4f\t%.4f\t%.4f\t-\t%d" % (
                count, router, "token ids", r["p50"], r["p99"], r["cached"],
                args.sim_seeds))
    with open(path, "w") as out:
        out.write("\n".join(rows) + "\n")


def headline(runs):
    if "span" not in runs or "round-robin" not in runs:
        return "Not enough routers measured for a comparison."
    p50 = {n: statistics.median(r["p50"] for r in rs)
           for n, rs in runs.items()}
    cached = {n: statistics.median(r["cached"] for r in rs)
              for n, rs in runs.items()}
    best = min(p50, key=p50.get)
    return ("Lowest measured TTFT p50: %s (%.2f s; round-robin %.2f s, "
            "span-aware %.2f s); cached share span-aware %.0f %% against "
            "round-robin %.0f %%. Per-repeat p50s below say whether the "
            "difference is larger than this machine's noise." % (
                LABELS[best], p50[best], p50["round-robin"], p50["span"],
                100 * cached["span"], 100 * cached["round-robin"]))


def write_markdown(path, args, runs, skipped, counts, sim, settings):
    lines = ["## Headline", "", headline(runs), "",
             "## Measured: %d real replicas" % args.replicas, "",
             "`spanc serve -t 1 --kv-cache %d` per replica, fresh replicas "
             "per router; %d requests of %d shuffled documents out of %d, "
             "the first %d of them warm-up; %d concurrent clients; "
             "client-side TTFT of max_tokens = 1 requests; cached share = "
             "the replicas' prefix-cache hits over queries during the "
             "measured requests; medians of %d interleaved repeats." % (
                 args.kv_cache, args.requests, args.k, len(DOCUMENTS),
                 args.warmup, args.clients, args.repeats), "",
             "| router | carries | TTFT p50 | TTFT p99 | cached share | "
             "p50 per repeat | requests per replica (last) |",
             "|---|---|---:|---:|---:|---|---|"]
    for name, results in runs.items():
        carries = "chats" if name in routers.CHAT_ROUTERS else "span queries"
        lines.append("| %s | %s | %.2f s | %.2f s | %.1f %% | %s | %s |" % (
            LABELS[name], carries,
            statistics.median(r["p50"] for r in results),
            statistics.median(r["p99"] for r in results),
            100 * statistics.median(r["cached"] for r in results),
            " ".join("%.2f" % r["p50"] for r in results),
            "/".join(str(n) for n in results[-1]["spread"])))
    lines.append("")
    lines.append("sglang-router and Dynamo's frontend cannot forward "
                 "`/v1/query`: they carry the same documents, in the same "
                 "shuffled order, as chat messages, so spanc can reuse only "
                 "their prefix. The span_router rows carry span queries.")
    for name, why in sorted(skipped.items()):
        lines.append("")
        lines.append("- %s: not measured: %s." % (LABELS[name], why))
    plans = [r["plan_p50"] for n in ("span", "prefix") for r in
             runs.get(n, []) if r.get("plan_p50") is not None]
    if plans:
        lines += ["", "The span and prefix routers lay each new request "
                  "out by asking a replica (`POST /v1/query/plan`, "
                  "deploy/router/request_plan.py): %.0f ms per plan "
                  "(median of the repeats' medians), on the same cores as "
                  "the replicas, inside the TTFT above; round-robin plans "
                  "nothing." % (1000 * statistics.median(plans))]
    lines += ["", "## Simulated: %s replicas" % ", ".join(
        str(c) for c in counts), "",
        "SIMULATED, not measured (bench/cluster/simulate.py: spanc's cache "
        "reduced to blocks and its KV events, FIFO replicas at SmolLM2 "
        "`-t 1` per-token costs; the model's limits are in its docstring). "
        "TTFT p50 / p99, cached share; medians of %d seeds." % args.sim_seeds,
        "", "| replicas | " + " | ".join(simulate.ROUTERS) + " |",
        "|---:|" + "---|" * len(simulate.ROUTERS)]
    for count in counts:
        cells = ["%.2f / %.2f s, %.0f %%" % (
            sim[(count, r)]["p50"], sim[(count, r)]["p99"],
            100 * sim[(count, r)]["cached"]) for r in simulate.ROUTERS]
        lines.append("| %d | %s |" % (count, " | ".join(cells)))
    lines += ["", "Simulation settings: " + ", ".join(
        "%s=%s" % item for item in sorted(vars(settings).items())
        if item[0] != "out")]
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add = parser.add_argument
    add("--spanc", required=True, help="the spanc binary (replicas, plans)")
    add("--model", required=True, help="the replicas' GGUF")
    add("--root", default=os.path.join(HERE, "..", ".."),
        help="the clone (deploy/, .venv-sglang, .venv-dynamo)")
    add("--routers", default="round-robin,span,prefix,sglang,dynamo")
    add("--replicas", type=int, default=2)
    add("--requests", type=int, default=40)
    add("--warmup", type=int, default=8)
    add("--clients", type=int, default=2)
    add("--k", type=int, default=3)
    add("--kv-cache", type=int, default=768,
        help="KV cache tokens per replica (spanc serve --kv-cache)")
    add("--seed", type=int, default=1)
    add("--repeats", type=int, default=3)
    add("--timeout", type=float, default=300.0)
    add("--sim-replicas", default="2,3,16,64,256")
    add("--sim-seeds", type=int, default=3)
    add("--sim-requests", type=int, default=30,
        help="simulated requests per replica")
    add("--tsv", required=True)
    add("--markdown", required=True)
    args = parser.parse_args(argv)
    args.root = os.path.abspath(args.root)
    args.routers = [r for r in args.routers.split(",") if r]
    for name in args.routers:
        if name not in LABELS:
            parser.error("unknown router %r (%s)" % (name, ", ".join(LABELS)))
    if not 1 <= args.warmup < args.requests:
        parser.error("--warmup must be in [1, --requests)")
    runs, skipped = measure(args)
    counts, sim, settings = simulated(args)
    write_tsv(args.tsv, args, runs, counts, sim)
    write_markdown(args.markdown, args, runs, skipped, counts, sim, settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
