#!/usr/bin/env bash
# bench/run_all.sh — runs every benchmark behind `spanc bench NAME` and
# then the engine comparison with llama.cpp; each writes
# bench/results/NAME.{md,tsv,png}.
#
#   bench/run_all.sh                 # the default sizes (< 45 min, 2 cores)
#   bench/run_all.sh --quick         # smoke-test sizes (a few minutes)
#   bench/run_all.sh --results DIR   # anywhere else; other options are
#                                    # passed to every `spanc bench` call
#   ONLY="rag nested" bench/run_all.sh   # a subset
#
# BAZEL_OUTPUT_BASE / BAZEL_SYMLINK_PREFIX: your own Bazel output base and
# symlink prefix, if you keep one.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
startup=()
build=()
if [[ -n ${BAZEL_OUTPUT_BASE:-} ]]; then startup+=("--output_base=$BAZEL_OUTPUT_BASE"); fi
if [[ -n ${BAZEL_SYMLINK_PREFIX:-} ]]; then build+=("--symlink_prefix=$BAZEL_SYMLINK_PREFIX"); fi
bazel "${startup[@]}" build "${build[@]}" //tools/spanc
spanc="$(bazel "${startup[@]}" info "${build[@]}" bazel-bin 2>/dev/null)/tools/spanc/spanc"

quick=0
for arg in "$@"; do [[ $arg == --quick ]] && quick=1; done
# `spanc bench --list` prints the benchmarks, a blank line, then each one's
# settings under a "NAME settings" header: take the first block only.
names="${ONLY:-$("$spanc" bench --list | awk 'NF == 0 {exit} $1 ~ /^[a-z-]+$/ && $1 != "engine" {print $1}')}"
export SPANC_ROOT="$root"
# Idle OpenMP threads sleep instead of spinning: on a shared 2-core machine
# spinning threads steal the core the other benchmark thread needs (bulk
# --quick: 62 s spinning, 10 s passive). libgomp reads it at start-up.
# The engine comparison below runs alone and keeps the caller's policy.
caller_wait_policy="${OMP_WAIT_POLICY-}"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
status=0
summary=()
for name in $names; do
  [[ $name == engine ]] && continue
  start=$(date +%s)
  echo "== spanc bench $name $* ($(date +%T), load $(cut -d' ' -f1 /proc/loadavg))" >&2
  if "$spanc" bench "$name" "$@"; then
    summary+=("$name: ok, $(($(date +%s) - start)) s")
  else
    summary+=("$name: FAILED after $(($(date +%s) - start)) s")
    status=1
  fi
done
# The engine comparison runs llama-bench beside spanc and always writes
# bench/results/engine.md, so a --quick smoke run leaves it out.
if ((quick)); then
  summary+=("engine: skipped (--quick; run bench/engine/run.sh)")
elif [[ -z ${ONLY:-} || " $ONLY " == *" engine "* ]]; then
  start=$(date +%s)
  echo "== bench/engine/run.sh ($(date +%T))" >&2
  if [[ -n $caller_wait_policy ]]; then
    engine_env=(env OMP_WAIT_POLICY="$caller_wait_policy")
  else
    engine_env=(env -u OMP_WAIT_POLICY)
  fi
  if "${engine_env[@]}" bench/engine/run.sh; then
    summary+=("engine: ok, $(($(date +%s) - start)) s")
  else
    summary+=("engine: FAILED after $(($(date +%s) - start)) s")
    status=1
  fi
fi
printf '%s\n' "${summary[@]}" >&2
exit $status
