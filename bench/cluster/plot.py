#!/usr/bin/env python3
"""Plot of `spanc bench cluster`: the measured routers' TTFT and cached
share, and the simulated routers' TTFT p50 and cached share per replica
count.

Usage: plot.py CLUSTER.tsv CLUSTER.png
"""
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "common"))
from plotting import read_tsv_or_exit  # noqa: E402


def main():
    tsv, png = sys.argv[1], sys.argv[2]
    rows = read_tsv_or_exit(tsv, "spanc bench cluster", "plot.py")
    measured = [r for r in rows if r["kind"] == "measured"]
    simulated = [r for r in rows if r["kind"] == "simulated"]
    figure, (bars, ttft, cached) = plt.subplots(1, 3, figsize=(15, 4.2))
    if measured:
        names = [r["router"] for r in measured]
        p50 = [float(r["ttft_p50_s"]) for r in measured]
        p99 = [float(r["ttft_p99_s"]) for r in measured]
        share = [100 * float(r["cached_share"]) for r in measured]
        colors = ["tab:orange" if r["carries"] == "chats" else "tab:blue"
                  for r in measured]
        positions = range(len(names))
        bars.bar(positions, p50, color=colors, label="TTFT p50")
        bars.scatter(positions, p99, color="black", marker="_", s=400,
                     label="TTFT p99")
        for x, value, top in zip(positions, share, p99):
            bars.annotate("%.0f %%\ncached" % value, (x, top), ha="center",
                          va="bottom", fontsize=8, xytext=(0, 4),
                          textcoords="offset points")
        bars.set_ylim(0, 1.25 * max(p99))
        bars.set_xticks(list(positions))
        bars.set_xticklabels(names, rotation=20)
        bars.set_ylabel("seconds")
        bars.set_title("measured, %s replicas (orange: chats)"
                       % measured[0]["replicas"])
        bars.legend(fontsize=8, loc="upper left")
    routers = []
    for r in simulated:
        if r["router"] not in routers:
            routers.append(r["router"])
    for router in routers:
        points = [r for r in simulated if r["router"] == router]
        counts = [int(r["replicas"]) for r in points]
        ttft.plot(counts, [float(r["ttft_p50_s"]) for r in points],
                  marker="o", label=router)
        cached.plot(counts, [100 * float(r["cached_share"]) for r in points],
                    marker="o", label=router)
    for axis, title in ((ttft, "SIMULATED TTFT p50 (s)"),
                        (cached, "SIMULATED cached prompt %")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("replicas")
        axis.set_title(title)
        axis.grid(alpha=0.3)
    ttft.legend(fontsize=8)
    figure.suptitle("Routing spanc replicas: shared-document RAG, shuffled "
                    "document orders")
    figure.tight_layout()
    figure.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
