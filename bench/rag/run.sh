#!/usr/bin/env bash
# bench/rag/run.sh — builds //bench/rag:rag_bench, runs the RAG TTFT and
# rope-in-kernel vs rerope benchmark on SmolLM2 (OMP_NUM_THREADS=2) and
# writes bench/results/kv.md, kv.tsv and kv-rag.png.
# Usage: bench/rag/run.sh [rag_bench options, e.g. --docs=1,2,4 --reps=3]
# BAZEL_OUTPUT_BASE / BAZEL_SYMLINK_PREFIX: your own Bazel output base and
# symlink prefix (see the preamble: never share another engineer's server).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
startup=()
build=()
if [[ -n ${BAZEL_OUTPUT_BASE:-} ]]; then startup+=("--output_base=$BAZEL_OUTPUT_BASE"); fi
if [[ -n ${BAZEL_SYMLINK_PREFIX:-} ]]; then build+=("--symlink_prefix=$BAZEL_SYMLINK_PREFIX"); fi
bazel "${startup[@]}" build "${build[@]}" //bench/rag:rag_bench
bin="$(bazel "${startup[@]}" info "${build[@]}" bazel-bin 2>/dev/null)/bench/rag/rag_bench"
model="${SPANC_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
work="$(mktemp -d)"
lscpu | grep -E '^(Model name|CPU\(s\)|Thread|L2|L3)' >"$work/machine.txt"
echo "start $(date +%T): $(uptime)" >"$work/load.txt"
# Sample the load once a minute while the benchmark runs.
(while sleep 60; do echo "$(date +%T) loadavg $(cut -d' ' -f1-3 /proc/loadavg)"; done) >>"$work/load.txt" &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true' EXIT
OMP_NUM_THREADS=2 "$bin" --model="$model" --tsv="$work/kv.tsv" "$@" | tee "$work/run.log"
echo "end $(date +%T): $(uptime)" >>"$work/load.txt"
mkdir -p bench/results
cp "$work/kv.tsv" bench/results/kv.tsv
# Debian's python3 has matplotlib (python3-matplotlib); a pyenv python may not.
python=/usr/bin/python3
[[ -x $python ]] || python=python3
"$python" bench/rag/report.py bench/results/kv.tsv bench/results/kv \
  --machine="$work/machine.txt" --load="$work/load.txt"
rm -rf "$work"
