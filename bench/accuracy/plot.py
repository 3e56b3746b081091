#!/usr/bin/python3
"""Draws accuracy.png from accuracy.tsv (see AccuracyBench.cpp): answer
accuracy per document count for every mode (full attention and the span
modes), one panel per task and document length, with Wilson 95% intervals."""
import csv
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "common"))
from plotting import wilson  # noqa: E402

source = sys.argv[1] if len(sys.argv) > 1 else "bench/results/accuracy.tsv"
target = sys.argv[2] if len(sys.argv) > 2 else "bench/results/accuracy.png"
points = defaultdict(lambda: [0, 0])  # (task, tokens, mode, docs) -> [n, k]
modes = []
with open(source) as f:
    for row in csv.DictReader(f, delimiter="\t"):
        key = (row["task"], int(row["doc_tokens"]), row["mode"], int(row["docs"]))
        points[key][0] += 1
        points[key][1] += int(row["correct"])
        if row["mode"] not in modes:
            modes.append(row["mode"])

panels = sorted({(t, n) for t, n, _, _ in points})
fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4),
                         squeeze=False)
for ax, (task, tokens) in zip(axes[0], panels):
    for index, mode in enumerate(modes):
        xs = sorted(d for t, n, m, d in points if (t, n, m) == (task, tokens, mode))
        rates, lows, highs = [], [], []
        for x in xs:
            n, k = points[(task, tokens, mode, x)]
            low, high = wilson(k, n)
            rates.append(k / n)
            # max(0, ...): at 0 or n rounding can leave a hair below zero.
            lows.append(max(0.0, k / n - low))
            highs.append(max(0.0, high - k / n))
        # A small offset per mode keeps the intervals apart.
        shifted = [x * (1 + 0.03 * (index - len(modes) / 2)) for x in xs]
        ax.errorbar(shifted, rates, yerr=[lows, highs], marker="o", capsize=3,
                    linestyle="--" if mode == "full" else "-", label=mode)
    ax.set_xscale("log", base=2)
    counts = sorted({d for t, n, _, d in points if (t, n) == (task, tokens)})
    ax.set_xticks(counts)
    ax.set_xticklabels([str(d) for d in counts])
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("documents per context")
    ax.set_ylabel("answer accuracy")
    ax.set_title(f"{task}, {tokens} tokens" if task == "codes" else f"{task}")
    ax.legend(fontsize=8)
fig.suptitle("QA accuracy: full attention vs span modes (Wilson 95% CI)")
fig.tight_layout()
fig.savefig(target, dpi=120)
