#!/usr/bin/python3
"""Draws needle.png from needle.tsv (see NeedleBench.cpp): the fraction of
runs with full recall against hay tokens, flat vs tree-reduce, with Wilson
95% intervals."""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "common"))
from plotting import wilson  # noqa: E402

source = sys.argv[1] if len(sys.argv) > 1 else "bench/results/needle.tsv"
target = sys.argv[2] if len(sys.argv) > 2 else "bench/results/needle.png"
points = {}
with open(source) as f:
    for row in csv.DictReader(f, delimiter="\t"):
        key = (row["mode"], int(row["hay_tokens"]))
        runs, full = points.get(key, (0, 0))
        points[key] = (runs + 1, full + int(row["full_recall"]))


fig, ax = plt.subplots(figsize=(6, 4))
for mode, marker in (("flat", "o"), ("tree-reduce-k2", "s")):
    xs = sorted(x for m, x in points if m == mode)
    if not xs:
        continue
    rates, lows, highs = [], [], []
    for x in xs:
        n, k = points[(mode, x)]
        low, high = wilson(k, n)
        rates.append(k / n)
        # max(0, ...): at 0 or n rounding can leave a hair below zero.
        lows.append(max(0.0, k / n - low))
        highs.append(max(0.0, high - k / n))
    ax.errorbar(xs, rates, yerr=[lows, highs], marker=marker, capsize=3,
                label=mode)
ax.set_xscale("log", base=2)
ax.set_ylim(-0.02, 1.02)
ax.set_xlabel("hay tokens")
ax.set_ylabel("fraction of runs with full recall")
ax.set_title("needle in a haystack (Wilson 95% CI)")
ax.legend()
fig.tight_layout()
fig.savefig(target, dpi=120)
