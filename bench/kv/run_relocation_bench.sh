#!/usr/bin/env bash
# bench/kv/run_relocation_bench.sh — builds and runs the ReRoPE relocation
# benchmark (SmolLM2 KV shape), cold and warm caches, and writes
# bench/results/kv-relocation.md and kv-relocation.png (+ the raw .tsv rows).
# Usage: bench/kv/run_relocation_bench.sh [--reps=N]
# BAZEL_FLAGS may carry e.g. --output_base/--symlink_prefix (see PEERS/README).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
reps="${1:---reps=9}"
startup=()
build=()
if [[ -n ${BAZEL_OUTPUT_BASE:-} ]]; then startup+=("--output_base=$BAZEL_OUTPUT_BASE"); fi
if [[ -n ${BAZEL_SYMLINK_PREFIX:-} ]]; then build+=("--symlink_prefix=$BAZEL_SYMLINK_PREFIX"); fi
bazel "${startup[@]}" build "${build[@]}" //bench/kv:relocation_bench
bin="$(bazel "${startup[@]}" info "${build[@]}" bazel-bin 2>/dev/null)/bench/kv/relocation_bench"
work="$(mktemp -d)"
echo "start $(date +%T): $(uptime)" >"$work/load.txt"
"$bin" "$reps" --tsv="$work/cold.tsv" | tee "$work/cold.txt"
"$bin" "$reps" --warm --tsv="$work/warm.tsv" | tee "$work/warm.txt"
# Upper bound of the kernel: one 64-token span (4 blocks, 1.4 MiB of K) that
# stays in the L2 cache.
"$bin" "$reps" --warm --span-tokens=64 --requests=1 --tsv="$work/hot.tsv" |
  tee "$work/hot.txt"
echo "end $(date +%T): $(uptime)" >>"$work/load.txt"
mkdir -p bench/results
# Debian's python3 has matplotlib (python3-matplotlib); a pyenv python may not.
python=/usr/bin/python3
[[ -x $python ]] || python=python3
"$python" bench/kv/plot_relocation.py "$work" bench/results/kv-relocation
cp "$work/cold.tsv" bench/results/kv-relocation-cold.tsv
cp "$work/warm.tsv" bench/results/kv-relocation-warm.tsv
cp "$work/hot.tsv" bench/results/kv-relocation-hot.tsv
rm -rf "$work"
