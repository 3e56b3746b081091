#!/usr/bin/python3
"""Draws accuracy.png from accuracy.tsv (see AccuracyBench.cpp): answer
accuracy per position of the fact's document, prefix (causal) vs span
attention, one panel per document count, with Wilson 95% intervals."""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "common"))
from plotting import wilson  # noqa: E402

source = sys.argv[1] if len(sys.argv) > 1 else "bench/results/accuracy.tsv"
target = sys.argv[2] if len(sys.argv) > 2 else "bench/results/accuracy.png"
points = {}
with open(source) as f:
    for row in csv.DictReader(f, delimiter="\t"):
        key = (int(row["docs"]), row["mode"], int(row["position"]))
        n, k = points.get(key, (0, 0))
        points[key] = (n + 1, k + int(row["correct"]))


doc_counts = sorted({d for d, _, _ in points})
fig, axes = plt.subplots(1, len(doc_counts), figsize=(5 * len(doc_counts), 4),
                         squeeze=False)
for ax, docs in zip(axes[0], doc_counts):
    for mode, marker in (("prefix", "o"), ("span", "s")):
        xs = sorted(p for d, m, p in points if d == docs and m == mode)
        rates, lows, highs = [], [], []
        for x in xs:
            n, k = points[(docs, mode, x)]
            low, high = wilson(k, n)
            rates.append(k / n)
            # max(0, ...): at 0 or n rounding can leave a hair below zero.
            lows.append(max(0.0, k / n - low))
            highs.append(max(0.0, high - k / n))
        label = "prefix (causal)" if mode == "prefix" else "span"
        ax.errorbar(xs, rates, yerr=[lows, highs], marker=marker, capsize=3,
                    label=label)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("position of the fact's document")
    ax.set_ylabel("answer accuracy")
    ax.set_title(f"{docs} documents")
    ax.legend()
fig.suptitle("planted-fact QA: causal vs span attention (Wilson 95% CI)")
fig.tight_layout()
fig.savefig(target, dpi=120)
