#!/usr/bin/python3
"""Table and plot of a `spanc bench accuracy` run from its progress log.

A run prints one line per (cell, mode) as it goes ("accuracy: codes 4 docs
MODE  K/N correct, top-answer share S, ..."); the markdown, TSV and PNG
are written only at its end. This turns the lines of a run that was
stopped early (a shared machine) into the same per-mode table, Wilson
95% intervals and difference to full attention, plus a bar plot.

Usage: blend_table.py LOG OUT_PREFIX
(writes OUT_PREFIX-table.md, OUT_PREFIX.tsv and OUT_PREFIX.png)
"""
import math
import re
import sys


def wilson(correct, trials, z=1.959963984540054):
    p = correct / trials
    denominator = 1 + z * z / trials
    center = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials +
                         z * z / (4 * trials * trials)) / denominator
    return max(0.0, center - half), min(1.0, center + half)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows, task, tokens = [], None, None
    for line in open(sys.argv[1]):
        header = re.match(r"accuracy: (codes|prose), (\d+|prose \(~87\)) tokens",
                          line)
        if header:
            task = header.group(1)
            tokens = header.group(2).replace("prose ", "")
            continue
        cell = re.match(r"accuracy: (\w+) (\d+) docs (\S+)\s+(\d+)/(\d+) "
                        r"correct, top-answer share ([\d.]+)", line)
        if cell:
            rows.append((task, tokens, int(cell.group(2)), cell.group(3),
                         int(cell.group(4)), int(cell.group(5)),
                         float(cell.group(6))))
    full = {(r[0], r[1], r[2]): r[4] / r[5] for r in rows if r[3] == "full"}
    md = ["| task | doc tokens | documents | mode | questions | correct | "
          "rate [95% CI] | − full (points) | top share |",
          "|---|---|---:|---|---:|---:|---|---:|---:|"]
    tsv = ["task\tdoc_tokens\tdocs\tmode\tquestions\tcorrect\taccuracy\t"
           "ci_low\tci_high\tdiff_full_points\ttop_answer_share"]
    for task, tokens, docs, mode, correct, trials, share in rows:
        low, high = wilson(correct, trials)
        rate = correct / trials
        diff = 100 * (rate - full[(task, tokens, docs)])
        md.append(f"| {task} | {tokens} | {docs} | {mode} | {trials} | "
                  f"{correct} | {rate:.3f} [{low:.3f}, {high:.3f}] | "
                  f"{'—' if mode == 'full' else f'{diff:+.1f}'} | {share:.2f} |")
        tsv.append(f"{task}\t{tokens}\t{docs}\t{mode}\t{trials}\t{correct}\t"
                   f"{rate:.4f}\t{low:.4f}\t{high:.4f}\t{diff:.2f}\t{share:.4f}")
    prefix = sys.argv[2]
    open(prefix + ".tsv", "w").write("\n".join(tsv) + "\n")
    open(prefix + "-table.md", "w").write("\n".join(md) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("blend_table.py: no matplotlib, no plot", file=sys.stderr)
        return
    cells = sorted({(r[0], r[1], r[2]) for r in rows},
                   key=lambda c: (c[0], c[1], c[2]))
    modes = list(dict.fromkeys(r[3] for r in rows))
    figure, axis = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(modes)
    for index, mode in enumerate(modes):
        values, errors = [], [[], []]
        for cell in cells:
            match = [r for r in rows if (r[0], r[1], r[2]) == cell and
                     r[3] == mode]
            if not match:
                values.append(0)
                errors[0].append(0)
                errors[1].append(0)
                continue
            _, _, _, _, correct, trials, _ = match[0]
            low, high = wilson(correct, trials)
            values.append(correct / trials)
            errors[0].append(correct / trials - low)
            errors[1].append(high - correct / trials)
        axis.bar([c + index * width for c in range(len(cells))], values, width,
                 yerr=errors, capsize=2, label=mode)
    axis.set_xticks([c + 0.4 - width / 2 for c in range(len(cells))])
    axis.set_xticklabels([f"{t} {k}\n{d} docs" for t, k, d in cells],
                         fontsize=8)
    axis.set_ylabel("correct (95% CI)")
    axis.set_title("Span blend (selective recompute) vs full attention and "
                   "the default span mode")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(prefix + ".png", dpi=110)


if __name__ == "__main__":
    main()
