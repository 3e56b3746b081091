#!/usr/bin/env python3
"""Plot of `spanc bench rag`: median TTFT per document count and config.

Usage: plot.py RAG.tsv RAG.png
"""
import csv
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    tsv, png = sys.argv[1], sys.argv[2]
    samples = defaultdict(list)
    with open(tsv) as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            samples[(row["config"], int(row["docs"]))].append(float(row["ttft_ms"]))
    configs = sorted({config for config, _ in samples},
                     key=lambda c: (not c.startswith("prefix"), not c.startswith("span-miss"), c))
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for config in configs:
        docs = sorted(d for c, d in samples if c == config)
        medians = [statistics.median(samples[(config, d)]) for d in docs]
        lows = [m - min(samples[(config, d)]) for m, d in zip(medians, docs)]
        highs = [max(samples[(config, d)]) - m for m, d in zip(medians, docs)]
        style = "--" if config.startswith("prefix") else ":" if config.startswith("llama") else "-"
        ax.errorbar(docs, medians, yerr=[lows, highs], linestyle=style, marker="o",
                    capsize=3, label=config)
    ax.set_yscale("log")
    ax.set_xlabel("documents (512 tokens each)")
    ax.set_ylabel("TTFT (ms, median, min-max bars)")
    ax.set_title("RAG TTFT: stock prefix cache vs span cache")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
