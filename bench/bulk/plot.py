#!/usr/bin/env python3
"""Plot of `spanc bench bulk`: mean TTFT speedup over stock by bulk size,
bulk-order on and off.

Usage: plot.py BULK.tsv BULK.png
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
    sizes = {}
    with open(tsv) as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            samples[(row["bulk"], row["config"])].append(float(row["mean_ttft_ms"]))
            sizes[row["bulk"]] = int(row["size"])
    bulks = sorted(sizes, key=lambda b: sizes[b])
    fig, ax = plt.subplots(figsize=(6.5, 4))
    width = 0.38
    for offset, config in ((-width / 2, "span-fifo"), (width / 2, "span-bulk-order")):
        speedups = []
        for bulk in bulks:
            stock = statistics.median(samples[(bulk, "stock")])
            mine = statistics.median(samples[(bulk, config)])
            speedups.append(stock / mine if mine > 0 else 0)
        ax.bar([i + offset for i in range(len(bulks))], speedups, width, label=config)
    ax.axhline(1.0, color="gray", linewidth=1)
    ax.set_xticks(range(len(bulks)))
    ax.set_xticklabels([f"{b}\n({sizes[b]} queries)" for b in bulks])
    ax.set_ylabel("mean TTFT speedup over stock (x)")
    ax.set_title("Bulk temporal locality (Python docs corpus)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
