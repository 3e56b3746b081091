#!/usr/bin/env bash
# bench/rag/run.sh — a thin wrapper over `spanc bench rag` (the logic lives
# in bench/rag/RagBench.cpp): builds spanc and runs the RAG microbenchmark,
# writing bench/results/rag.{md,tsv,png}. Arguments go to `spanc bench rag`:
#   bench/rag/run.sh --quick
#   bench/rag/run.sh -r 3 --set docs=1,4,8 --set relocations=rope-in-kernel
# BAZEL_OUTPUT_BASE / BAZEL_SYMLINK_PREFIX: your own Bazel output base and
# symlink prefix. (bench/results/kv.md, issue 5's rows, came from the
# binary this replaced; its rows stay as they were measured.)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
startup=()
build=()
if [[ -n ${BAZEL_OUTPUT_BASE:-} ]]; then startup+=("--output_base=$BAZEL_OUTPUT_BASE"); fi
if [[ -n ${BAZEL_SYMLINK_PREFIX:-} ]]; then build+=("--symlink_prefix=$BAZEL_SYMLINK_PREFIX"); fi
bazel "${startup[@]}" build "${build[@]}" //tools/spanc
spanc="$(bazel "${startup[@]}" info "${build[@]}" bazel-bin 2>/dev/null)/tools/spanc/spanc"
# Passive waiting: on a shared 2-core machine spinning OpenMP threads
# slow every call several-fold when another process holds a core.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
SPANC_ROOT="$root" exec "$spanc" bench rag "$@"
