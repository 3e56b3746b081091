#!/usr/bin/env python3
"""Plot of `spanc bench nested`: median judge TTFT by fan-out, one panel
per generator temperature, stock vs span.

Usage: plot.py NESTED.tsv NESTED.png
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
            key = (float(row["temperature"]), row["config"], int(row["fan_out"]))
            samples[key].append(float(row["judge_ttft_ms"]))
    temperatures = sorted({t for t, _, _ in samples})
    configs = sorted({c for _, c, _ in samples}, key=lambda c: (c != "stock", c))
    fig, axes = plt.subplots(1, len(temperatures), figsize=(4 * len(temperatures), 3.8),
                             sharey=True, squeeze=False)
    for ax, temperature in zip(axes[0], temperatures):
        for config in configs:
            fan_outs = sorted(n for t, c, n in samples if t == temperature and c == config)
            values = [samples[(temperature, config, n)] for n in fan_outs]
            medians = [statistics.median(v) for v in values]
            lows = [m - min(v) for m, v in zip(medians, values)]
            highs = [max(v) - m for m, v in zip(medians, values)]
            ax.errorbar(fan_outs, medians, yerr=[lows, highs], marker="o", capsize=3,
                        linestyle="--" if config == "stock" else "-", label=config)
        ax.set_title(f"generator temperature {temperature:g}")
        ax.set_xlabel("fan-out (generators)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("judge TTFT (ms, median, min-max)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
