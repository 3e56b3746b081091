#!/usr/bin/env python3
"""Writes bench/results/kv-relocation.{md,png} from relocation_bench output.

Usage: plot_relocation.py WORKDIR OUTPUT_STEM
WORKDIR holds cold.tsv/cold.txt and warm.tsv/warm.txt (run_relocation_bench.sh).
"""
import csv
import os
import platform
import subprocess
import sys


def read_rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def machine():
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return platform.processor()
    fields = {}
    for line in lscpu.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    flags = fields.get("Flags", "").split()
    simd = " ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags)
    return (f"{fields.get('Model name', '?')}, {fields.get('CPU(s)', '?')} CPUs, "
            f"L2 {fields.get('L2 cache', '?')}, L3 {fields.get('L3 cache', '?')}; {simd}")


# Bytes of K per token for the SmolLM2 shape: 30 layers x 3 heads x 64 x f32.
KEY_BYTES_PER_TOKEN = 30 * 3 * 64 * 4


def pick(rows, workload, path, threads, requests):
    for row in rows:
        if (row["workload"], row["path"], row["threads"], row["requests"]) == (
                workload, path, str(threads), str(requests)):
            return row
    return None


def analysis(cold, warm, hot):
    """A few sentences with the figures that matter, computed from the rows."""
    lines = []
    cpu = [float(r["cpu_tokens_per_ms"]) for r in cold
           if r["workload"] == "distinct" and r["path"] == "avx512" and r["threads"] == "1"]
    hot_row = pick(hot, "distinct", "avx512", 1, 1)
    scalar = pick(cold, "distinct", "scalar", 1, 4)
    vector = pick(cold, "distinct", "avx512", 1, 4)
    if cpu:
        best = max(cpu)
        gbps = best * KEY_BYTES_PER_TOKEN * 2 / 1e6
        lines.append(
            f"- In-place relocation moves {KEY_BYTES_PER_TOKEN // 1024} KiB of f32 K per "
            f"token in and out. From memory one core relocates up to {best:.0f} "
            f"tokens/ms of CPU time ({gbps:.1f} GB/s of K read + written): the kernel "
            "is bound by memory bandwidth, and a duplicate (copy + turn) costs about "
            "twice an in-place turn because V is copied and the copy is written fresh.")
    if hot_row:
        lines.append(
            f"- With the blocks in L2 the same kernel reaches "
            f"{float(hot_row['cpu_tokens_per_ms']):.0f} tokens/ms of CPU time "
            f"({float(hot_row['tokens_per_ms']):.0f} wall): the arithmetic is not "
            "the limit.")
    if scalar and vector:
        lines.append(
            f"- AVX-512 vs scalar (cold, 4 requests, CPU time): "
            f"{float(vector['cpu_tokens_per_ms']):.0f} vs "
            f"{float(scalar['cpu_tokens_per_ms']):.0f} tokens/ms.")
    plan = [float(r["plan_ms"]) for r in cold + warm]
    if plan:
        lines.append(
            f"- CIDRA planning (KvCacheManager::planStep) takes {min(plan):.3f}-"
            f"{max(plan):.3f} ms per step, up to 16 requests and 480 duplicates: "
            "negligible beside the kernel.")
    lines.append(
        "- Wall-clock figures on this machine are dominated by other work: the "
        "load average above is several times the 2 CPUs, so a single-threaded run "
        "gets a fraction of a core and 2-thread runs lose most of their time in "
        "OpenMP barriers waiting for a descheduled thread. Re-run on an idle "
        "machine for wall-clock scaling; the CPU-time column is the kernel's cost. "
        "(Relocations of fewer than 8 blocks run on one thread whatever the "
        "thread count: the 2-thread rows of the hot table are single-threaded.)")
    lines.append(
        "- Goal of the issue: >= 1 000 tokens/ms. Not reached from memory with f32 K "
        "on one core of this machine; in L2 it is. What would reach it: K stored in "
        "16 bits (halves the traffic), both cores idle, or `rope-in-kernel`, which "
        "needs no relocation at all.")
    return lines


def main():
    work, stem = sys.argv[1], sys.argv[2]
    cold = read_rows(os.path.join(work, "cold.tsv"))
    warm = read_rows(os.path.join(work, "warm.tsv"))
    with open(os.path.join(work, "cold.txt")) as handle:
        cold_text = handle.read()
    with open(os.path.join(work, "warm.txt")) as handle:
        warm_text = handle.read()
    hot = read_rows(os.path.join(work, "hot.tsv"))
    with open(os.path.join(work, "hot.txt")) as handle:
        hot_text = handle.read()
    try:
        load = open("/proc/loadavg").read().split()[:3]
    except OSError:
        load = ["?"]
    lines = [
        "# KV relocation (ReRoPE + CIDRA) throughput",
        "",
        "Produced by `bench/kv/run_relocation_bench.sh` (binary "
        "`//bench/kv:relocation_bench`, source `bench/kv/RelocationBench.cpp`).",
        "",
        f"Machine: {machine()}. Load average while writing: {' '.join(load)}.",
        "",
        "One scheduler step: R requests each reuse a cached 512-token span at a new "
        "offset; `KvCacheManager::planStep` builds the CIDRA plan (plan ms) and "
        "`RelocationExecutor` applies it (kernel ms). *distinct*: R different spans, "
        "each turned in place. *shared*: all R requests want the same span at R "
        "offsets in one step: one turned in place, R-1 duplicated (copy + turn, "
        "K and V written). Tokens/ms = relocated tokens / (plan + kernel) wall time, "
        "median over repetitions with [min, max]; the CPU-time column divides by "
        "process CPU time instead (single thread only), which discounts time the "
        "process spent preempted on a shared machine.",
        "",
        "## Cold: L3 flushed before each repetition",
        "",
        cold_text.strip(),
        "",
        "## Warm: blocks left in the caches",
        "",
        warm_text.strip(),
        "",
        "## Hot: one 64-token span that stays in the L2 cache",
        "",
        hot_text.strip(),
        "",
        "## Reading",
        "",
    ] + analysis(cold, warm, hot) + [""]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        lines.append("(matplotlib missing: no plot; install python3-matplotlib)")
        plt = None
    if plt is not None:
        figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
        for axis, rows, title in ((axes[0], cold, "cold (L3 flushed)"),
                                  (axes[1], warm, "warm caches")):
            series = (("distinct", "avx512", "1", "o-", "tokens_per_ms"),
                      ("distinct", "avx512", "2", "o--", "tokens_per_ms"),
                      ("distinct", "avx512", "1", "o:", "cpu_tokens_per_ms"),
                      ("shared", "avx512", "1", "s-", "tokens_per_ms"),
                      ("shared", "avx512", "2", "s--", "tokens_per_ms"),
                      ("shared", "avx512", "1", "s:", "cpu_tokens_per_ms"),
                      ("distinct", "scalar", "1", "x-.", "tokens_per_ms"))
            for workload, path, threads, style, column in series:
                points = [r for r in rows if r["workload"] == workload and
                          r["path"] == path and r["threads"] == threads]
                if not points:
                    continue
                xs = [int(r["requests"]) for r in points]
                ys = [float(r[column]) for r in points]
                if column == "tokens_per_ms":
                    low = [y - float(r["tokens_per_ms_min"]) for y, r in zip(ys, points)]
                    high = [float(r["tokens_per_ms_max"]) - y for y, r in zip(ys, points)]
                    label = f"{workload}, {path}, {threads} thread(s), wall"
                    axis.errorbar(xs, ys, yerr=[low, high], fmt=style, capsize=3,
                                  label=label)
                else:
                    axis.plot(xs, ys, style,
                              label=f"{workload}, {path}, 1 thread, CPU time")
            axis.axhline(1000, color="grey", linewidth=0.8, linestyle=":")
            axis.set_xscale("log", base=2)
            axis.set_xlabel("concurrent relocation requests per step")
            axis.set_title(title)
            axis.grid(True, alpha=0.3)
        axes[0].set_ylabel("relocated tokens / ms")
        axes[1].legend(fontsize=7)
        figure.suptitle("ReRoPE relocation, SmolLM2 KV shape (30 x 3 x 64, block 16, f32)")
        figure.tight_layout()
        figure.savefig(stem + ".png", dpi=110)
        lines.append(f"![relocation throughput]({os.path.basename(stem)}.png)")
        lines.append("")
    with open(stem + ".md", "w") as handle:
        handle.write("\n".join(lines))
    print(f"wrote {stem}.md" + (" and .png" if plt is not None else ""))


if __name__ == "__main__":
    main()
