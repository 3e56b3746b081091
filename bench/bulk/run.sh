#!/usr/bin/env bash
# bench/bulk/run.sh — bulk-order against FIFO on the same bulk, side by side
# in one run: cache hit rate and mean TTFT of bench/bulk/interleaved.span
# under a KV cache that holds about one query's fragments. Writes
# bench/results/bulk-order.{md,png}.
#   bench/bulk/run.sh [REPETITIONS] [KV_CACHE_TOKENS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
repetitions="${1:-3}"
kv="${2:-400}"
bazel build //tools/spanc >/dev/null 2>&1
spanc="$root/bazel-bin/tools/spanc/spanc"
out="$(mktemp -d)"
for ((i = 0; i < repetitions; ++i)); do
  for mode in bulk-order fifo; do
    extra=()
    [[ $mode == fifo ]] && extra=(--skip-pass bulk-order)
    # The corpus lies outside the program's folder: allowed explicitly.
    OMP_WAIT_POLICY=passive "$spanc" run bench/bulk/interleaved.span --json \
      --allow-read examples/corpus --kv-cache "$kv" -t 2 "${extra[@]}" \
      >"$out/$mode-$i.json"
  done
done
/usr/bin/python3 - "$out" "$repetitions" "$kv" <<'PY'
import json, statistics, sys, subprocess, os
out, reps, kv = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = {}
for mode in ("bulk-order", "fifo"):
    hits, ttfts, orders = [], [], None
    for i in range(reps):
        run = json.load(open(f"{out}/{mode}-{i}.json"))["runs"][0]
        calls = run["calls"]
        prompt = sum(c["prompt_tokens"] for c in calls)
        hits.append(100.0 * sum(c["reused_tokens"] for c in calls) / prompt)
        ttfts.append(1000 * statistics.mean(c["ttft_seconds"] for c in calls))
        orders = [c["query"] for c in calls]
    rows[mode] = (hits, ttfts, orders)
cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("Model name")), "?")
load = open("/proc/loadavg").read().split()[0]
md = ["# bulk-order vs FIFO", "",
      f"Bulk: `bench/bulk/interleaved.span` (6 RAG questions over `examples/corpus`, topics interleaved in the file).",
      f"Model SmolLM2-135M-Instruct Q4_1, `--kv-cache {kv}` tokens, 2 threads, {reps} repetitions, machine: {model}, load average {load}.",
      "Hit rate: prompt tokens reused from the cache / prompt tokens. TTFT: mean over the six calls, median over repetitions (min–max).", "",
      "| order | query order | hit rate | mean TTFT ms |", "|---|---|---|---|"]
for mode, (hits, ttfts, orders) in rows.items():
    md.append(f"| {mode} | {' '.join(orders)} | {statistics.median(hits):.1f}% | {statistics.median(ttfts):.0f} ({min(ttfts):.0f}–{max(ttfts):.0f}) |")
ratio = statistics.median(rows["fifo"][1]) / statistics.median(rows["bulk-order"][1])
md += ["", f"Mean TTFT, FIFO / bulk-order: **{ratio:.2f}×**.", ""]
os.makedirs("bench/results", exist_ok=True)
open("bench/results/bulk-order.md", "w").write("\n".join(md))
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
modes = list(rows)
axes[0].bar(modes, [statistics.median(rows[m][0]) for m in modes], color=["tab:green", "tab:gray"])
axes[0].set_ylabel("prompt tokens reused (%)")
axes[1].bar(modes, [statistics.median(rows[m][1]) for m in modes], color=["tab:green", "tab:gray"])
axes[1].set_ylabel("mean TTFT (ms)")
fig.suptitle(f"bulk-order vs FIFO, --kv-cache {kv}")
fig.tight_layout()
fig.savefig("bench/results/bulk-order.png", dpi=120)
print("\n".join(md))
PY
