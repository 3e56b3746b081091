#!/usr/bin/env python3
"""Plot of `spanc bench serve`: throughput and TTFT per client count and
server.

Usage: plot.py SERVE.tsv SERVE.png
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

ORDER = ["span", "prefix", "llama-server"]
STYLE = {"span": "-", "prefix": "--", "llama-server": ":"}


def main():
    tsv, png = sys.argv[1], sys.argv[2]
    ttft = defaultdict(list)
    wall = {}
    with open(tsv) as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            key = (row["server"], int(row["clients"]))
            ttft[key].append(float(row["ttft_ms"]))
            wall[key] = float(row["cell_wall_s"])
    servers = sorted({server for server, _ in ttft},
                     key=lambda s: ORDER.index(s) if s in ORDER else 99)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    for server in servers:
        clients = sorted(c for s, c in ttft if s == server)
        throughput = [len(ttft[(server, c)]) / wall[(server, c)]
                      for c in clients]
        left.plot(clients, throughput, STYLE.get(server, "-"), marker="o",
                  label=server)
        p50 = [quantile(ttft[(server, c)], 0.5) for c in clients]
        p99 = [quantile(ttft[(server, c)], 0.99) for c in clients]
        line, = right.plot(clients, p50, STYLE.get(server, "-"), marker="o",
                           label=server + " p50")
        right.plot(clients, p99, STYLE.get(server, "-"), marker="^",
                   color=line.get_color(), alpha=0.5, label=server + " p99")
    ticks = sorted({clients for _, clients in ttft})
    for axis in (left, right):
        axis.set_xscale("log", base=2)
        axis.set_xticks(ticks)
        axis.set_xticklabels([str(tick) for tick in ticks])
        axis.minorticks_off()
        axis.set_xlabel("concurrent clients")
        axis.grid(True, which="both", alpha=0.3)
    left.set_ylabel("requests per second")
    left.set_title("Throughput")
    right.set_yscale("log")
    right.minorticks_on()
    right.set_ylabel("TTFT (ms, client-side)")
    right.set_title("Time to first token, p50 and p99")
    left.legend(fontsize=8)
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
