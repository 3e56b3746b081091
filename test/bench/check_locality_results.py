"""Checks what `spanc bench rag|nested|bulk --quick` wrote.

Usage: check_locality_results.py NAME RESULTS_DIR. Beyond the files and
their rows, it asserts the cache facts each benchmark rests on (token
counts, which do not depend on timing): a span hit reuses the documents
that a shuffled prefix-cache repeat recomputes; the judge reuses the
generators' spans; every bulk configuration saw the same prompts.
"""

import csv
import os
import subprocess
import sys

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL: " + message, flush=True)


def rows_of(path):
    with open(path) as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def check_rag(rows, md):
    configs = {row["config"] for row in rows}
    for config in ("prefix-cold", "prefix-warm-shuffled", "span-miss-rope-in-kernel",
                   "span-hit-rope-in-kernel", "span-miss-rerope", "span-hit-rerope",
                   "span-miss-isolated", "span-hit-isolated",
                   "span-miss-prefix+recompute1", "span-hit-prefix+recompute1",
                   "span-miss-isolated+recompute1", "span-hit-isolated+recompute1"):
        check(config in configs, f"rag.tsv has no {config} row")
    for docs in ("1", "4"):
        check(any(row["docs"] == docs for row in rows), f"rag.tsv has no {docs}-document row")
        check(f"\n| {docs} | " in md, f"rag.md has no table row for {docs} documents")
    for row in rows:
        prompt, reused, computed = int(row["prompt"]), int(row["reused"]), int(row["computed"])
        check(reused + computed == prompt, f"rag: reused + computed != prompt in {row}")
        check(float(row["ttft_ms"]) > 0, f"rag: no TTFT in {row}")
        if row["docs"] != "4":
            continue
        # 4 documents of 128 tokens: the hit computes at most the question's
        # block(s); the shuffled prefix repeat recomputes every document.
        if row["config"].startswith("span-hit"):
            # Boundary recompute adds N blocks of 16 tokens per document.
            recompute = row["config"].rpartition("+recompute")[2]
            extra = int(recompute) * 16 * 4 if "+recompute" in row["config"] else 0
            check(computed <= 32 + extra, f"rag: a span hit computed {computed} tokens")
            if extra:
                check(computed > 32, f"rag: {row['config']} recomputed nothing")
        if row["config"] == "prefix-warm-shuffled":
            check(computed >= 4 * 100, f"rag: stock on a shuffle computed only {computed}")
        if row["config"] == "span-hit-rerope":
            check(int(row["relocated"]) > 0, "rag: rerope relocated nothing on a shuffle")
    check("## Headline ratios" in md and "stock / hit" in md, "rag.md has no ratio table")
    # The work ratio: stock recomputes every document, the hit a block or
    # two, so stock's layers do many times the hit's FLOPs.
    lines = md.splitlines()
    at = next((index for index, line in enumerate(lines)
               if "stock / hit in FLOPs (rope-in-kernel)" in line), None)
    check(at is not None, "rag.md's ratio table has no FLOP ratio column")
    if at is not None:
        column = [cell.strip() for cell in lines[at].split("|")].index(
            "stock / hit in FLOPs (rope-in-kernel)")
        row4 = next((line for line in lines[at:] if line.startswith("| 4 |")), "")
        cells = [cell.strip() for cell in row4.split("|")]
        work = cells[column].rstrip("×") if column < len(cells) else ""
        check(work.replace(".", "", 1).isdigit() and float(work) > 4,
              f"rag.md: stock / hit in FLOPs at 4 docs is {work!r}")
    check("attention GFLOP/s" in md and "GEMM GFLOP/s" in md,
          "rag.md's breakdown has no FLOP rates")
    check("## Span accuracy modes" in md and
          "| docs | mode | miss | hit | stock / hit |" in md and
          "| 4 | isolated |" in md and "| 4 | prefix+end1 |" in md,
          "rag.md has no per-mode table (with the default's row)")
    check(all("repaired" in row and "probe_ms" in row for row in rows),
          "rag.tsv has no repaired / probe_ms columns")


def check_nested(rows, md):
    configs = {row["config"] for row in rows}
    for config in ("stock", "span-rope-in-kernel", "span-rerope"):
        check(config in configs, f"nested.tsv has no {config} row")
    points = {(row["fan_out"], row["temperature"]) for row in rows}
    for fan_out in ("1", "4"):
        for temperature in ("0.00", "1.00"):
            check((fan_out, temperature) in points,
                  f"nested.tsv has no fan-out {fan_out} at T {temperature}")
    for row in rows:
        prompt, reused, computed = int(row["prompt"]), int(row["reused"]), int(row["computed"])
        check(reused + computed == prompt, f"nested: reused + computed != prompt in {row}")
        if row["config"].startswith("span"):
            # plus-distribute: every candidate span is a hit; only the judge's
            # own messages can be computed.
            check(computed < prompt / 2, f"nested: the span judge computed {computed} of {prompt}")
        if row["fan_out"] == "4" and row["temperature"] == "1.00":
            # Four sampled candidates: five calls (four generators + judge).
            check(row["calls"] == "5", f"nested: fan-out 4 at T 1 ran {row['calls']} calls")
        if row["fan_out"] == "4" and row["temperature"] == "0.00":
            # Greedy samples are one call read four times.
            check(row["calls"] == "2", f"nested: fan-out 4 at T 0 ran {row['calls']} calls")
    check("## Judge TTFT" in md and "| 1.0 | 4 |" in md, "nested.md has no table row")


def check_bulk(rows, md):
    by_bulk = {}
    for row in rows:
        by_bulk.setdefault(row["bulk"], {})[row["config"]] = row
    check(set(by_bulk) == {"1", "8"}, f"bulk.tsv bulks are {sorted(by_bulk)}, not 1 and 8")
    for bulk, configs in by_bulk.items():
        check(set(configs) == {"stock", "span-fifo", "span-bulk-order"},
              f"bulk {bulk}: configurations {sorted(configs)}")
        prompts = {row["prompt"] for row in configs.values()}
        check(len(prompts) == 1, f"bulk {bulk}: the configurations saw different prompts {prompts}")
        for row in configs.values():
            check(int(row["reused"]) + int(row["computed"]) == int(row["prompt"]),
                  f"bulk: reused + computed != prompt in {row}")
            check(float(row["mean_ttft_ms"]) > 0, f"bulk: no TTFT in {row}")
    check("| 8 (8) |" in md and "Mean TTFT over the bulk" in md, "bulk.md has no table row")


def main():
    name, results = sys.argv[1], sys.argv[2]
    md_path = os.path.join(results, name + ".md")
    tsv_path = os.path.join(results, name + ".tsv")
    for path in (md_path, tsv_path):
        check(os.path.exists(path), f"{path} was not written")
    if failures:
        return 1
    md = open(md_path).read()
    rows = rows_of(tsv_path)
    check(len(rows) > 0, f"{tsv_path} has no rows")
    check("Machine:" in md and "Load:" in md, f"{name}.md lacks the machine or load line")
    {"rag": check_rag, "nested": check_nested, "bulk": check_bulk}[name](rows, md)
    # spanc draws with Debian's /usr/bin/python3 first (bench/common/Report.h).
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"
    if subprocess.run([python, "-c", "import matplotlib"], capture_output=True).returncode == 0:
        check(os.path.exists(os.path.join(results, name + ".png")), f"{name}.png was not drawn")
    else:
        print(f"note: no matplotlib for {python}, {name}.png not checked")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print(f"{name}: {len(rows)} rows checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
