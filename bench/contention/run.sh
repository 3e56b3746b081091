#!/usr/bin/env bash
# Decode speed with a core taken by another process (issue #15): `spanc
# generate` at 1 and 2 threads, quiet and beside a busy loop pinned to CPU
# 0, with the thread count fixed (--fixed-threads, the old behaviour) and
# adaptive (the default). Prints a markdown table of median decode tok/s
# (min-max) over REPEATS runs of each cell, interleaved so that drifting
# load hits every cell alike.
#
#   bench/contention/run.sh [SPANC] [MODEL] [REPEATS]
#   NICE=-10 bench/contention/run.sh ...   # as root, on a shared machine
#
# Needs 2 cores; other load on the machine shows in every cell, so compare
# the columns of one run. With NICE set, spanc and the busy loop both run
# at that niceness: on a machine others keep busy, a negative value makes
# "quiet" nearly quiet while the busy loop stays an equal competitor.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
spanc="${1:-$root/bazel-bin/tools/spanc/spanc}"
model="${2:-$HOME/.cache/spanc/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
repeats="${3:-5}"
prompt="Write a story about a cat."
results="$(mktemp)"
launch=(nice -n "${NICE:-0}")
busy=""
trap 'rm -f "$results"; [[ -n "$busy" ]] && kill "$busy" 2>/dev/null' EXIT

measure() { # LOAD THREADS MODE
  local flags=(-t "$2")
  [[ "$3" == fixed ]] && flags+=(--fixed-threads)
  local rate
  rate=$("${launch[@]}" "$spanc" generate "$prompt" --chat -m "$model" -n 128 "${flags[@]}" \
           2>&1 >/dev/null | grep -o 'decode [0-9.]* tok/s' | grep -o '[0-9.]*')
  echo "$1 $2 $3 $rate" >>"$results"
}

for ((run = 0; run < repeats; ++run)); do
  for load in quiet busy; do
    if [[ "$load" == busy ]]; then
      "${launch[@]}" taskset -c 0 sh -c 'while :; do :; done' &
      busy=$!
      sleep 0.2
    fi
    for threads in 1 2; do
      for mode in fixed adaptive; do
        measure "$load" "$threads" "$mode"
      done
    done
    if [[ -n "$busy" ]]; then kill "$busy"; wait "$busy" 2>/dev/null || true; busy=""; fi
  done
done

echo "decode tok/s, median (min-max) of $repeats; $(nproc) cores," \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
  "niceness ${NICE:-0}; load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| load | threads | fixed | adaptive |"
echo "| --- | --- | --- | --- |"
for load in quiet busy; do
  for threads in 1 2; do
    row="| $load | $threads |"
    for mode in fixed adaptive; do
      row+=" $(awk -v l="$load" -v t="$threads" -v m="$mode" \
        '$1 == l && $2 == t && $3 == m { print $4 }' "$results" | sort -n |
        awk '{ v[NR] = $1 } END { printf "%.0f (%.0f-%.0f)", v[int((NR + 1) / 2)], v[1], v[NR] }') |"
    done
    echo "$row"
  done
done
