#!/usr/bin/env bash
# bench/kv/run_attention_bench.sh — builds and runs //bench/kv:attention_bench
# (paged attention of the SmolLM2 shape: rope-in-kernel vs rotated K, f16 vs
# f32 K/V, prefill/hit/decode; and the K/V write) with 1 and 2 threads, and
# writes bench/results/kv-attention.md with the load average around the run.
# Usage: bench/kv/run_attention_bench.sh [--reps=N]
# BAZEL_OUTPUT_BASE / BAZEL_SYMLINK_PREFIX: your own Bazel output base and
# symlink prefix.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
reps="${1:---reps=15}"
startup=()
build=()
if [[ -n ${BAZEL_OUTPUT_BASE:-} ]]; then startup+=("--output_base=$BAZEL_OUTPUT_BASE"); fi
if [[ -n ${BAZEL_SYMLINK_PREFIX:-} ]]; then build+=("--symlink_prefix=$BAZEL_SYMLINK_PREFIX"); fi
bazel "${startup[@]}" build "${build[@]}" //bench/kv:attention_bench
bin="$(bazel "${startup[@]}" info "${build[@]}" bazel-bin 2>/dev/null)/bench/kv/attention_bench"
out=bench/results/kv-attention.md
work="$(mktemp -d)"
echo "start $(date +%T): $(uptime)" >"$work/load.txt"
"$bin" "$reps" --threads=1 | tee "$work/one.txt"
"$bin" "$reps" --threads=2 | tee "$work/two.txt"
echo "end $(date +%T): $(uptime)" >>"$work/load.txt"
{
  echo "# Paged attention: rope-in-kernel vs rotated K, f16 vs f32 K/V"
  echo
  echo "Produced by \`bench/kv/run_attention_bench.sh\` (binary \`//bench/kv:attention_bench\`, source \`bench/kv/AttentionBench.cpp\`): the attention kernel alone, one layer, interleaved per repetition so each ratio is taken under the same load. *rotated K* is what \`--relocation=rerope\` stores (attention only reads it); *rope-in-kernel* (the default) stores K unrotated and rotates every key it reads."
  echo
  echo "Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs (shared with other engineers' jobs)."
  echo
  echo '```'
  cat "$work/load.txt"
  echo '```'
  echo
  echo "## 1 thread"
  echo
  cat "$work/one.txt"
  echo
  echo "## 2 threads"
  echo
  cat "$work/two.txt"
} >"$out"
rm -rf "$work"
echo "wrote $out"
