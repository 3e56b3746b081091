#!/usr/bin/env python3
"""Runs spanc bench engine and llama-bench alternately; writes NAME.md/.png.

Each round runs llama-bench (pp512 + tg128, --reps repetitions after its
own warm-up) and then `spanc bench engine` (same sizes, same threads); with
--pp=512,4096,8192 the long prompts follow in --long-rounds rounds of
--long-reps, and a table puts each prefill's time per FLOP beside the
first size's (issue 26 point 3). Each tool runs as a child process whose
peak RSS is read from wait4(). Throughput samples (tokens/s) from all
rounds are pooled: the table shows median, standard
deviation, min and max per engine and test, and the ratio of medians.
With --single-thread-rounds N > 0 the same comparison follows with one
thread each (a second table), and `spanc bench engine --profile` runs once
per thread count for the "where the time goes" section. Load averages are
recorded before and after.
"""
import argparse, datetime, json, os, platform, statistics, subprocess, sys


def run_measured(command):
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.devnull, os.O_WRONLY)
        out_path = f"/tmp/engine-bench-{os.getpid()}.out"
        out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out_fd, 1)
        os.dup2(fd, 2)
        os.execv(command[0], command)
    _, status, usage = os.wait4(pid, 0)
    out_path = f"/tmp/engine-bench-{pid}.out"
    with open(out_path) as f:
        out = f.read()
    os.unlink(out_path)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"compare.py: {' '.join(command)} failed")
    return out, usage.ru_maxrss * 1024


def depth_test(gen, depth):
    """llama-bench's name of a generation test: "tg128", or "tg128 @ d4096"
    when it starts from `depth` tokens of context."""
    return f"tg{gen}" + (f" @ d{depth}" if depth else "")


def llama_samples(out):
    """Samples (tokens/s) by test name ("pp512", "tg128") from llama-bench
    -o json, and the build information."""
    results = json.loads(out)
    samples, info = {}, {}
    for entry in results:
        values = entry.get("samples_ts") or [entry["avg_ts"]]
        if entry.get("n_prompt", 0) > 0 and entry.get("n_gen", 0) == 0:
            samples.setdefault(f"pp{entry['n_prompt']}", []).extend(values)
        elif entry.get("n_gen", 0) > 0 and entry.get("n_prompt", 0) == 0:
            samples.setdefault(depth_test(entry["n_gen"],
                                          entry.get("n_depth", 0)),
                               []).extend(values)
        info = {"build": entry.get("build_commit", ""),
                "cpu": entry.get("cpu_info", ""),
                "type": entry.get("model_type", ""),
                "backends": entry.get("backends", "")}
    return samples, info


def summary(samples):
    if not samples:
        return None
    return {"median": statistics.median(samples),
            "stdev": statistics.stdev(samples) if len(samples) > 1 else 0.0,
            "min": min(samples), "max": max(samples), "n": len(samples)}


def run_pair(args, threads, prompts, gen, reps, samples, rss, flops):
    """One llama-bench call and one spanc call per prompt size (spanc's
    bench engine takes one size a call), pooling samples by test name."""
    command = [args.llama_bench, "-m", args.model, "-t", str(threads),
               "-p", ",".join(map(str, prompts)), "-n", str(gen),
               "-r", str(reps), "-o", "json"]
    out, peak = run_measured(command)
    found, llama_info = llama_samples(out)
    for test, values in found.items():
        samples.setdefault(("llama.cpp", test), []).extend(values)
    rss["llama.cpp"] = max(rss["llama.cpp"], peak)
    spanc_info = {}
    for index, prompt in enumerate(prompts):
        out, peak = run_measured([
            args.spanc, "bench", "engine", "-m", args.model, "-t",
            str(threads), "--prompt-tokens", str(prompt),
            "--gen-tokens", str(gen if index == 0 else 0), "-r", str(reps),
            "--json"])
        spanc_info = json.loads(out.strip().splitlines()[-1])
        samples.setdefault(("spanc", f"pp{prompt}"), []).extend(
            spanc_info["pp_samples"])
        flops[f"pp{prompt}"] = spanc_info["pp_flops"]
        if index == 0 and gen > 0:
            samples.setdefault(("spanc", f"tg{gen}"), []).extend(
                spanc_info["tg_samples"])
        rss["spanc"] = max(rss["spanc"], peak)
    return llama_info, spanc_info


def run_depth_pair(args, threads, samples, rss):
    """Decoding --tg tokens after --depth tokens of context (prefilled
    untimed), llama-bench then spanc."""
    test = depth_test(args.tg, args.depth)
    out, peak = run_measured([
        args.llama_bench, "-m", args.model, "-t", str(threads), "-p", "0",
        "-n", str(args.tg), "-d", str(args.depth), "-r", str(args.long_reps),
        "-o", "json"])
    found, _ = llama_samples(out)
    samples.setdefault(("llama.cpp", test), []).extend(found.get(test, []))
    rss["llama.cpp"] = max(rss["llama.cpp"], peak)
    out, peak = run_measured([
        args.spanc, "bench", "engine", "-m", args.model, "-t", str(threads),
        "--prompt-tokens", "0", "--gen-tokens", str(args.tg), "--gen-depth",
        str(args.depth), "-r", str(args.long_reps), "--json"])
    info = json.loads(out.strip().splitlines()[-1])
    samples.setdefault(("spanc", test), []).extend(info["tg_samples"])
    rss["spanc"] = max(rss["spanc"], peak)
    return test


def measure(args, threads, rounds, long_rounds):
    """Alternating rounds of llama-bench and spanc bench engine: the short
    tests (--pp's first size and tg) every round, the long prompts in
    long_rounds rounds of --long-reps repetitions."""
    samples, flops = {}, {}
    rss = {"llama.cpp": 0, "spanc": 0}
    long_rss = {"llama.cpp": 0, "spanc": 0}
    llama_info, spanc_info = {}, {}
    for round_index in range(rounds):
        llama_info, spanc_info = run_pair(args, threads, args.pp[:1], args.tg,
                                          args.reps, samples, rss, flops)
        short = [f"pp{args.pp[0]}", f"tg{args.tg}"]
        print(f"{threads} threads, round {round_index + 1}/{rounds}: " +
              "; ".join(f"{engine} " + " ".join(
                  f"{test} {statistics.median(samples[(engine, test)]):.1f}"
                  for test in short) for engine in ("llama.cpp", "spanc")) +
              f" tok/s (load {os.getloadavg()[0]:.1f})", flush=True)
    for round_index in range(long_rounds if len(args.pp) > 1 else 0):
        run_pair(args, threads, args.pp[1:], 0, args.long_reps, samples,
                 long_rss, flops)
        print(f"{threads} threads, long round {round_index + 1}/"
              f"{long_rounds}: " + "; ".join(
                  f"{engine} " + " ".join(
                      f"pp{size} {statistics.median(samples[(engine, f'pp{size}')]):.1f}"
                      for size in args.pp[1:])
                  for engine in ("llama.cpp", "spanc")) +
              f" tok/s (load {os.getloadavg()[0]:.1f})", flush=True)
    for round_index in range(long_rounds if args.depth > 0 else 0):
        test = run_depth_pair(args, threads, samples, long_rss)
        print(f"{threads} threads, depth round {round_index + 1}/"
              f"{long_rounds}: " + "; ".join(
                  f"{engine} {test} "
                  f"{statistics.median(samples[(engine, test)]):.1f}"
                  for engine in ("llama.cpp", "spanc")) +
              f" tok/s (load {os.getloadavg()[0]:.1f})", flush=True)
    stats = {key: summary(value) for key, value in samples.items()}
    rss["long"] = long_rss
    return samples, stats, rss, llama_info, spanc_info, flops


def tests(args):
    return [f"pp{size}" for size in args.pp] + [f"tg{args.tg}"] + (
        [depth_test(args.tg, args.depth)] if args.depth > 0 else [])


def table(args, stats):
    lines = [
        "| test | engine | median tok/s | stdev | min | max | samples | ratio spanc/llama.cpp |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for test in tests(args):
        peer = stats.get(("llama.cpp", test))
        ours = stats.get(("spanc", test))
        for engine in ("llama.cpp", "spanc"):
            s = stats.get((engine, test))
            if not s:
                continue
            ratio = (f"{ours['median'] / peer['median']:.2f}x"
                     if engine == "spanc" and peer and ours else "")
            lines.append(
                f"| {test} | {engine} | {s['median']:.1f} | "
                f"{s['stdev']:.1f} | {s['min']:.1f} | {s['max']:.1f} | "
                f"{s['n']} | {ratio} |")
    return lines


def pace_table(args, stats, flops):
    """Time per FLOP of each prefill against the first size's, per engine:
    1.00x means a long prompt runs at the short one's pace."""
    base = f"pp{args.pp[0]}"
    lines = [
        f"| test | GFLOP a pass | engine | GFLOP/s | time per FLOP vs {base} |",
        "|---|---:|---|---:|---:|",
    ]
    for size in args.pp:
        test = f"pp{size}"
        for engine in ("llama.cpp", "spanc"):
            s, first = stats.get((engine, test)), stats.get((engine, base))
            if not s or not first or test not in flops:
                continue
            rate = flops[test] / (size / s["median"])
            base_rate = flops[base] / (args.pp[0] / first["median"])
            lines.append(f"| {test} | {flops[test] / 1e9:.1f} | {engine} | "
                         f"{rate / 1e9:.1f} | {base_rate / rate:.2f}x |")
    return lines


def profile(args, threads):
    out = subprocess.run(
        [args.spanc, "bench", "engine", "-m", args.model, "-t", str(threads),
         "--prompt-tokens", str(args.pp[0]), "--gen-tokens", str(args.tg), "-r",
         "2", "--profile"], capture_output=True, text=True, check=True)
    text = out.stdout + out.stderr
    return [line for line in text.splitlines()
            if line.startswith(("prefill profile", "decode profile", "  "))]


def weights_table(args, threads, rounds):
    """spanc's AMX prompt GEMMs on the borrowed 4/8-bit weights (the
    default) beside a bf16 copy (--gemm-weights=copy), alternating in
    `rounds` rounds at the first prompt size and tg: tok/s and peak RSS."""
    samples, rss = {}, {"borrowed": 0, "copy": 0}
    for _ in range(rounds):
        for weights in ("borrowed", "copy"):
            out, peak = run_measured([
                args.spanc, "bench", "engine", "-m", args.model, "-t",
                str(threads), "--prompt-tokens", str(args.pp[0]),
                "--gen-tokens", str(args.tg), "-r", str(args.reps),
                "--gemm-weights", weights, "--json"])
            info = json.loads(out.strip().splitlines()[-1])
            samples.setdefault((weights, "pp"), []).extend(info["pp_samples"])
            samples.setdefault((weights, "tg"), []).extend(info["tg_samples"])
            rss[weights] = max(rss[weights], peak)
    stats = {key: summary(value) for key, value in samples.items()}
    lines = [f"| weights | pp{args.pp[0]} tok/s | stdev | tg{args.tg} tok/s "
             "| stdev | peak RSS MiB |", "|---|---:|---:|---:|---:|---:|"]
    for weights in ("borrowed", "copy"):
        pp, tg = stats[(weights, "pp")], stats[(weights, "tg")]
        lines.append(f"| {weights} | {pp['median']:.1f} | {pp['stdev']:.1f} "
                     f"| {tg['median']:.1f} | {tg['stdev']:.1f} | "
                     f"{rss[weights] / 2**20:.0f} |")
    ratio = (stats[("borrowed", "pp")]["median"] /
             stats[("copy", "pp")]["median"])
    lines += ["", f"borrowed / copy prefill: {ratio:.2f}x; peak RSS "
              f"{(rss['copy'] - rss['borrowed']) / 2**20:.0f} MiB less."]
    return lines


def main():
    parser = argparse.ArgumentParser()
    for name in ("spanc", "llama-bench", "model", "out", "peer-dir"):
        parser.add_argument("--" + name, required=True)
    parser.add_argument("--peer-isa", default="native",
                        help="what llama.cpp was built for (native, or "
                        "avx2 / avx512 beside spanc under that SPANC_ISA)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--pp", type=lambda text: [int(size) for size in text.split(",")],
        default=[512], help="prompt sizes, comma-separated; the first is "
        "measured every round beside tg, the others in --long-rounds")
    parser.add_argument("--long-rounds", type=int, default=2)
    parser.add_argument("--long-reps", type=int, default=1)
    parser.add_argument("--tg", type=int, default=128)
    parser.add_argument("--depth", type=int, default=4096,
                        help="context the tg test also starts from in "
                        "--long-rounds (llama-bench -d; 0: none)")
    parser.add_argument("--single-thread-rounds", type=int, default=0)
    parser.add_argument("--weights-rounds", type=int, default=3,
                        help="rounds of borrowed vs copied AMX GEMM weights "
                        "(AMX hosts; 0: none)")
    args = parser.parse_args()

    load_before = os.getloadavg()
    samples, stats, rss, llama_info, spanc_info, flops = measure(
        args, args.threads, args.rounds, args.long_rounds)
    single = None
    if args.single_thread_rounds > 0:
        single = measure(args, 1, args.single_thread_rounds, 0)
    with open("/proc/cpuinfo") as f:
        cpuinfo = f.read().splitlines()
    flags = next((line for line in cpuinfo if line.startswith("flags")), "")
    # The kernel spanc's prompt GEMMs ran (its path may be capped below the
    # CPU's: SPANC_ISA).
    gemm = spanc_info.get("gemm", "")
    has_amx = gemm == "amx"
    # spanc's bf16 panel GEMMs: AMX tiles, else AVX-512 BF16 (Gemm.h).
    has_panels = gemm in ("amx", "avx512bf16")
    weights = (weights_table(args, args.threads, args.weights_rounds)
               if has_panels and args.weights_rounds > 0 else None)
    profiles = [(threads, profile(args, threads))
                for threads in sorted({args.threads, 1} if single else
                                      {args.threads}, reverse=True)]
    load_after = os.getloadavg()

    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo
                if line.startswith("model name")), platform.processor())
    # The panel GEMMs unpack the 4/8-bit decode weights per call
    # (--gemm-weights=borrowed, the default), not a bf16 copy.
    prefill_gemms = {
        "amx": "spanc's AMX tiles on the borrowed Q4_1/Q8_0 weights",
        "avx512bf16": "spanc's AVX-512 BF16 kernel on the borrowed Q4_1/Q8_0 "
                      "weights",
        "f32": "spanc's f32 kernel on the borrowed Q4_1/Q8_0 weights",
    }.get(gemm, "oneDNN")
    prefill = (f"{spanc_info.get('precision')} GEMMs for prefill "
               f"({prefill_gemms})")
    isa = spanc_info.get("isa", "")
    if spanc_info.get("prompt_int8"):
        prefill = ("int8 prompt rows on the 4/8-bit tiles, as decode's "
                   + ("(spanc's AVX2 kernel, four rows at a time"
                      if isa == "avx2" else "(VNNI")
                   + "; `--prompt-int8=auto`)")
    decode_gemv = ("AVX2" if isa == "avx2" else
                   "portable" if isa == "scalar" else "VNNI")
    fix_note = ""
    source_mmq = os.path.join(os.path.dirname(args.peer_dir), "ggml", "src",
                              "ggml-cpu", "amx", "mmq.cpp")
    # The barrier matters only where llama.cpp's AMX path runs.
    for path in (source_mmq,) if has_amx else ():
        if os.path.exists(path) and "spanc: AMX tile config barrier" in open(
                path, errors="replace").read():
            fix_note = ("llama.cpp was built with the AMX tile-config compiler "
                        "barrier (upstream PR #26954; see shared/PEERS.md) so "
                        "its AMX path runs instead of crashing.")
    lines = [
        "# CPU engine: spanc vs llama.cpp",
        "",
        f"Measured {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} by "
        "`bench/engine/run.sh` on one machine, in one run, the two engines "
        f"alternating over {args.rounds} rounds of {args.reps} repetitions "
        f"each (after each tool's own warm-up)"
        + (f", prompts of {', '.join(map(str, args.pp[1:]))} tokens in "
           f"{args.long_rounds} rounds of {args.long_reps}"
           if len(args.pp) > 1 else "") +
        f": {cpu}, {os.cpu_count()} cores, {args.threads} threads each.",
        f"Model: `{os.path.basename(args.model)}`. llama.cpp: llama-bench "
        f"(build {llama_info.get('build', '?')}, {llama_info.get('backends', '')}"
        + ({"avx2": "; built for AVX2 only: `LLAMA_CPP_ISA=avx2 "
                    "bench/peers/build_llama_cpp.sh`",
            "avx512": "; built for AVX-512 with VNNI, no BF16 or AMX: "
                      "`LLAMA_CPP_ISA=avx512 bench/peers/build_llama_cpp.sh`",
            }.get(args.peer_isa, "")) +
        f"); spanc: `spanc bench engine` ({prefill}, "
        f"{decode_gemv} int8 Q4_1/Q8_0 GEMV for decode; kernel path "
        f"`{isa}`, CPU features: {spanc_info.get('cpu')}).",
        "",
    ]
    lines += table(args, stats)
    lines += [
        "",
        f"Peak RSS (whole process, max over rounds): llama.cpp "
        f"{rss['llama.cpp'] / 2**20:.0f} MiB, spanc {rss['spanc'] / 2**20:.0f} MiB"
        f" (pp{args.pp[0]} + tg{args.tg})" + (
            f"; with the long prompts: llama.cpp "
            f"{rss['long']['llama.cpp'] / 2**20:.0f} MiB, spanc "
            f"{rss['long']['spanc'] / 2**20:.0f} MiB. Both prefill a long "
            "prompt in passes of 512 tokens (llama-bench's default "
            "micro-batch, `spanc bench engine --prefill-chunk`), so neither "
            "holds a whole prompt's activations." if len(args.pp) > 1
            else "."),
        "",
    ]
    if len(args.pp) > 1:
        lines += ["## Long prompts at the pace of their FLOPs", "",
                  "FLOPs of a pass: the GEMMs per token, causal attention's "
                  "QK^T and PV (growing with the square of the length) and "
                  "the last token's output head, the last layer past its "
                  "QKV projection for the last token alone (neither engine "
                  "computes the rows no logits are read from there; "
                  "`spanc bench engine`'s count, the same for both "
                  "engines).", ""]
        lines += pace_table(args, stats, flops) + [""]
    if fix_note:
        lines += [fix_note, ""]
    lines += [f"Load average (1 min) when the run started: "
              f"{load_before[0]:.1f}, when it ended: {load_after[0]:.1f} "
              f"(the machine is shared; numbers under load are noisy).", ""]
    if single:
        lines += [f"## One thread each ({args.single_thread_rounds} rounds "
                  f"of {args.reps} repetitions, same sizes)", ""]
        lines += table(args, single[1])
        lines += [""]
    if weights:
        lines += ["## The bf16 prompt GEMMs' weights: borrowed 4/8-bit or a "
                  "bf16 copy", "",
                  f"`spanc bench engine --gemm-weights=borrowed|copy`, "
                  f"alternating, {args.weights_rounds} rounds of {args.reps} "
                  f"repetitions, {args.threads} threads (the same bits "
                  f"either way; docs/ARCHITECTURE.md, \"Memory\").", ""]
        lines += weights + [""]
    lines += ["## Profile: `spanc bench engine --profile` (per-op wall time, "
              "2 measured repetitions)", ""]
    for threads, rows in profiles:
        lines += [f"{threads} thread{'s' if threads > 1 else ''}:", "", "```"]
        lines += rows + ["```", ""]
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    shown = [test for test in tests(args)
             if all((engine, test) in stats for engine in ("llama.cpp",
                                                           "spanc"))]
    figure, axes = plt.subplots(1, len(shown), figsize=(3.2 * len(shown), 4))
    for axis, test in zip(axes, shown):
        engines = ["llama.cpp", "spanc"]
        medians = [stats[(e, test)]["median"] for e in engines]
        errors = [stats[(e, test)]["stdev"] for e in engines]
        axis.bar(engines, medians, yerr=errors, capsize=6,
                 color=["#888888", "#2a6fdb"])
        for index, engine in enumerate(engines):
            axis.plot([index] * len(samples[(engine, test)]),
                      samples[(engine, test)], "k.", alpha=0.5)
        axis.set_title(f"{test} ({args.threads} threads)")
        axis.set_ylabel("tokens/s")
    figure.suptitle(os.path.basename(args.model))
    figure.tight_layout()
    figure.savefig(args.out + ".png", dpi=110)


if __name__ == "__main__":
    main()
