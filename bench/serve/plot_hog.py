#!/usr/bin/env python3
"""Plot of `spanc bench serve`'s hog cell: a short request's time to first
token on an idle server and beside a hog, per server binary.

Usage: plot_hog.py SERVE-HOG.tsv SERVE-HOG.png
"""
import csv
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "common"))
from plotting import quantile  # noqa: E402

PHASES = [("idle", "idle server"), ("hog", "beside the hog")]


def main():
    tsv, png = sys.argv[1], sys.argv[2]
    ttft = defaultdict(list)
    servers = []
    with open(tsv) as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            if row["server"] not in servers:
                servers.append(row["server"])
            ttft[(row["server"], row["phase"])].append(float(row["ttft_ms"]))
    fig, axis = plt.subplots(figsize=(7, 4.2))
    width = 0.8 / max(1, len(servers))
    for index, server in enumerate(servers):
        positions = [phase + index * width for phase in range(len(PHASES))]
        p50 = [quantile(ttft[(server, key)], 0.5) for key, _ in PHASES]
        p99 = [quantile(ttft[(server, key)], 0.99) for key, _ in PHASES]
        bars = axis.bar(positions, p50, width * 0.9, label=server + " p50")
        axis.scatter(positions, p99, marker="^", color=bars[0].get_facecolor(),
                     zorder=3, label=server + " p99")
    axis.set_xticks([phase + width * (len(servers) - 1) / 2
                     for phase in range(len(PHASES))])
    axis.set_xticklabels([label for _, label in PHASES])
    axis.set_yscale("log")
    axis.set_ylabel("short request TTFT (ms, client-side)")
    axis.set_title("A short chat's time to first token beside a hog")
    axis.grid(True, axis="y", which="both", alpha=0.3)
    axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
