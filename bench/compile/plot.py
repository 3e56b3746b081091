#!/usr/bin/python3
"""Draws bench/results/compile.png from compile.tsv (see CompileBench.cpp)."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

source = sys.argv[1] if len(sys.argv) > 1 else "bench/results/compile.tsv"
target = sys.argv[2] if len(sys.argv) > 2 else "bench/results/compile.png"
with open(source) as f:
    rows = list(csv.DictReader(f, delimiter="\t"))
ops = [int(r["ops"]) for r in rows]
total = [float(r["total_ms"]) for r in rows]
low = [total[i] - float(r["total_lo"]) for i, r in enumerate(rows)]
high = [float(r["total_hi"]) - total[i] for i, r in enumerate(rows)]
frontend = [float(r["frontend_ms"]) for r in rows]
pipeline = [float(r["pipeline_ms"]) for r in rows]
rss = [float(r["peak_rss_mb"]) for r in rows]

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
left.errorbar(ops, total, yerr=[low, high], marker="o", capsize=3,
              label="total (median, p10-p90)")
left.plot(ops, frontend, marker="s", linestyle="--", label="parse + lower + verify")
left.plot(ops, pipeline, marker="^", linestyle="--", label="default pipeline")
left.axhline(1000, color="grey", linewidth=0.8, linestyle=":")
left.set_xscale("log")
left.set_yscale("log")
left.set_xlabel("IR ops")
left.set_ylabel("CPU ms")
left.set_title("spanc compile --emit=ir-opt")
left.legend(fontsize=8)
right.plot(ops, rss, marker="o")
right.set_xscale("log")
right.set_xlabel("IR ops")
right.set_ylabel("peak RSS (MiB)")
right.set_title("memory")
fig.tight_layout()
fig.savefig(target, dpi=120)
print("wrote", target)
