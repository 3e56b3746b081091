#!/usr/bin/python3
"""The accuracy / speed trade-off of the span modes (issue 14 item 4).

Joins what `spanc bench accuracy` wrote per mode (accuracy-modes.tsv) with
the hit TTFT per mode of `spanc bench rag` (rag.tsv) and draws accuracy (y)
against hit TTFT at N documents (x, log scale), one panel per task and
document length, the Pareto front joined by a line; writes a markdown table
beside it.

Usage: pareto.py [--accuracy FILE]... [--rag FILE] [--docs N] [--out PREFIX]
Defaults: bench/results/accuracy-modes.tsv, bench/results/rag.tsv, 8
documents, bench/results/accuracy-pareto (.png and .md). --accuracy may be
given more than once (say, the 32- and 256-token runs written to two
results folders); a later file's rows replace an earlier one's.

A mode's hit TTFT is the median of the rag rows `span-hit-MODE` at N
documents (the default mode, prefix+end1, is the `span-hit-rope-in-kernel`
rows when rag ran it under that name); `full` is stock prefix caching on
a shuffled repeat (`prefix-warm-shuffled`): what full attention costs when
the same documents come back in another order.
"""
import argparse
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "common"))
from plotting import read_tsv_or_exit  # noqa: E402


def fail(message):
    print(f"pareto.py: {message}", file=sys.stderr)
    sys.exit(1)


def read_tsv(path, what):
    return read_tsv_or_exit(path, what, "pareto.py")


def hit_ttft(rag_rows, docs, path):
    """mode -> median hit TTFT (ms) at `docs` documents."""
    samples = defaultdict(list)
    for row in rag_rows:
        if int(row["docs"]) == docs:
            samples[row["config"]].append(float(row["ttft_ms"]))
    if not samples:
        have = sorted({int(row["docs"]) for row in rag_rows})
        fail(f"{path} has no rows at {docs} documents (it has {have}); "
             "pass --docs")
    ttft = {}
    for config, values in samples.items():
        if config.startswith("span-hit-"):
            ttft[config[len("span-hit-"):]] = statistics.median(values)
    # The default span mode (spanc's --span-context=prefix
    # --span-recompute-end=1) runs as the rope-in-kernel relocation rows.
    if "prefix+end1" not in ttft and "rope-in-kernel" in ttft:
        ttft["prefix+end1"] = ttft["rope-in-kernel"]
    if "prefix-warm-shuffled" in samples:
        ttft["full"] = statistics.median(samples["prefix-warm-shuffled"])
    return ttft


def pareto_front(points):
    """The (ttft, accuracy, mode) points no other point beats on both."""
    front = []
    for point in points:
        dominated = any(o[0] <= point[0] and o[1] >= point[1] and
                        (o[0] < point[0] or o[1] > point[1]) for o in points)
        if not dominated:
            front.append(point)
    return sorted(front)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--accuracy", action="append")
    parser.add_argument("--rag", default="bench/results/rag.tsv")
    parser.add_argument("--docs", type=int, default=8)
    parser.add_argument("--out", default="bench/results/accuracy-pareto")
    args = parser.parse_args()

    accuracy_files = args.accuracy or ["bench/results/accuracy-modes.tsv"]
    accuracy_rows = []
    for path in accuracy_files:
        accuracy_rows += read_tsv(path, "run `spanc bench accuracy`")
    rag_rows = read_tsv(args.rag, "run `spanc bench rag`")
    ttft = hit_ttft(rag_rows, args.docs, args.rag)

    # (task, doc_tokens) -> mode -> row at `docs` documents.
    panels = defaultdict(dict)
    modes = []
    for row in accuracy_rows:
        if int(row["docs"]) != args.docs:
            continue
        panels[(row["task"], int(row["doc_tokens"]))][row["mode"]] = row
        if row["mode"] not in modes:
            modes.append(row["mode"])
    if not panels:
        have = sorted({int(row["docs"]) for row in accuracy_rows})
        fail(f"{', '.join(accuracy_files)} has no rows at {args.docs} documents "
             f"(it has {have}); pass --docs")
    missing = [mode for mode in modes if mode not in ttft]
    if len(missing) == len(modes):
        fail(f"{args.rag} has no hit TTFT for any of {modes}; run "
             "`spanc bench rag --set modes=...`")

    def label(panel):
        task, tokens = panel
        return f"{task}, {tokens} tokens" if task == "codes" else task

    # --- accuracy-pareto.md ------------------------------------------------
    lines = [
        f"# Span modes: accuracy vs hit TTFT at {args.docs} documents", "",
        "Accuracy: " + ", ".join(f"`{p}`" for p in accuracy_files) +
        f" ({args.docs} documents per context); "
        f"hit TTFT: median of `{args.rag}` at {args.docs} documents "
        "(`full` = stock prefix caching on a shuffled repeat, "
        "`prefix-warm-shuffled`). On the front: no other mode is both "
        "faster and more accurate in that panel.", "",
        "| mode | hit TTFT (ms) | stock / hit |" +
        "".join(f" {label(p)}: accuracy [95% CI] | − full | front |"
                for p in sorted(panels)),
        "|---|---:|---:|" + "---|---:|---|" * len(panels),
    ]
    fronts = {}
    for panel in sorted(panels):
        points = [(ttft[m], float(r["accuracy"]), m)
                  for m, r in panels[panel].items() if m in ttft]
        fronts[panel] = {m for _, _, m in pareto_front(points)}
    stock = ttft.get("full")
    for mode in modes:
        hit = ttft.get(mode)
        cells = [mode, f"{hit:.1f}" if hit else "—",
                 f"{stock / hit:.1f}×" if hit and stock else "—"]
        for panel in sorted(panels):
            row = panels[panel].get(mode)
            if row is None:
                cells += ["—", "—", ""]
                continue
            cells += [f"{float(row['accuracy']):.3f} [{float(row['ci_low']):.3f}, "
                      f"{float(row['ci_high']):.3f}]",
                      "—" if mode == "full" else f"{float(row['diff_full_points']):+.1f}",
                      "yes" if mode in fronts[panel] else ""]
        lines.append("| " + " | ".join(cells) + " |")
    if missing:
        lines += ["", "No rag rows (left out of the plot) for: " +
                  ", ".join(missing) + "."]
    markdown = "\n".join(lines) + "\n"
    with open(args.out + ".md", "w") as handle:
        handle.write(markdown)

    # --- accuracy-pareto.png ----------------------------------------------
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ordered = sorted(panels)
    fig, axes = plt.subplots(1, len(ordered), figsize=(5 * len(ordered), 4.2),
                             squeeze=False)
    for ax, panel in zip(axes[0], ordered):
        points = []
        for index, mode in enumerate(modes):
            row = panels[panel].get(mode)
            if row is None or mode not in ttft:
                continue
            rate = float(row["accuracy"])
            low, high = float(row["ci_low"]), float(row["ci_high"])
            ax.errorbar([ttft[mode]], [rate],
                        yerr=[[max(0.0, rate - low)], [max(0.0, high - rate)]],
                        marker="s" if mode == "full" else "o", capsize=3,
                        color=f"C{index}", label=mode)
            points.append((ttft[mode], rate, mode))
        front = pareto_front(points)
        ax.plot([p[0] for p in front], [p[1] for p in front], color="grey",
                linestyle=":", zorder=0, label="Pareto front")
        ax.set_xscale("log")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel(f"hit TTFT at {args.docs} documents (ms, log)")
        ax.set_ylabel(f"accuracy at {args.docs} documents")
        ax.set_title(label(panel))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle("Span modes: accuracy vs hit TTFT (Wilson 95% CI)")
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=110)
    print(markdown, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
