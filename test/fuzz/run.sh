#!/usr/bin/env bash
# Runs one fuzz target for a while, merges what it found, minimized, into
# the kept corpus and appends the run's figures to test/fuzz/LOG.md:
#
#   test/fuzz/run.sh span|json|ir|gguf|model|http [SECONDS] [BUILD]
#                                  # default 600 s, /tmp/spanc-fuzz
#
# Build the targets first (test/fuzz/build.sh). The fuzzer works on a
# scratch copy of the kept corpus (plus, for the frontends, the lit and
# example programs as seeds); `-merge=1` then adds to the kept corpus only
# the inputs that reach new coverage. Crashes are written as crash-* into
# BUILD/run-TARGET/ (outside the tree). The machine is shared: run one
# target at a time, under `nice -n 19`; the timeout per input is generous
# (300 s of wall time) because a niced fuzzer on a busy machine gets a few
# percent of a core: inputs that replay in 0.2 s timed out at 60 s. A
# timeout is a finding only if it reproduces alone (run the fuzzer binary
# on the file).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
target="$1"
seconds="${2:-600}"
build="${3:-/tmp/spanc-fuzz}"
scratch="$build/run-$target"
max_len=4096
case "$target" in
span | json | ir | http) kept="$root/test/fuzz/${target}_corpus" ;;
gguf) kept="$root/test/fuzz/gguf/corpus" ;;
# Seeds are whole (tiny) models of 5-30 KB.
model) kept="$root/test/fuzz/gguf/model_corpus" max_len=32768 ;;
*) echo "unknown target '$target'" >&2; exit 2 ;;
esac
mkdir -p "$scratch/corpus" "$kept"
cp -n "$kept"/* "$scratch/corpus/" 2>/dev/null || true
seed() { # PATTERN FOLDERS...: copies matching files in as seeds
  local pattern="$1"
  shift
  find "$@" -name "$pattern" -not -path '*/Inputs/*' | while read -r file; do
    cp -n "$file" "$scratch/corpus/seed-$(echo "${file#"$root"/}" | tr / _)"
  done
}
case "$target" in
span) seed '*.span' "$root/test/lit" "$root/examples" ;;
json) seed '*.json' "$root/test/lit" "$root/examples" ;;
ir) seed '*.ir' "$root/test/lit" ;;
esac
extra=()
if [[ "${FORK:-0}" == 1 ]]; then extra=(-fork=1 -ignore_crashes=1); fi
dict="$root/test/fuzz/$target.dict"
if [[ -f "$dict" ]]; then extra+=(-dict="$dict"); fi
cd "$scratch"
log="$scratch/last-run.log"
start=$(date +%s)
set +e
"$build/${target}_fuzzer" corpus "${extra[@]}" -max_total_time="$seconds" \
  -timeout=300 -rss_limit_mb=2048 -max_len="$max_len" -print_final_stats=1 \
  -artifact_prefix="$scratch/" >"$log" 2>&1
status=$?
set -e
elapsed=$(($(date +%s) - start))
tail -25 "$log"
before=$(ls "$kept" | wc -l)
"$build/${target}_fuzzer" -merge=1 -max_len="$max_len" "$kept" corpus 2>&1 | tail -2
after=$(ls "$kept" | wc -l)
echo "kept corpus: $after files, $(du -sh "$kept" | cut -f1)"

executions=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" |
             grep -o '[0-9]*$' | tail -1)
if [[ -z "$executions" ]]; then
  # A crash ends the run before the final stats: take the last status line.
  executions=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
fi
findings=$(grep -cE '^==[0-9]+==ERROR|^SUMMARY: |deadly signal|ERROR: libFuzzer' \
  "$log" || true)
# (No match is the good case: under pipefail it must not end the script.)
artifacts=$( (grep -o 'Test unit written to [^ ]*' "$log" || true) |
            sed 's/.* //' | xargs -r -n1 basename | paste -sd, -)
printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$(date -u +%F)" "$target" \
  "$elapsed" "${executions:-0}" "$((after - before))" "$status" \
  "${artifacts:-none}" >>"$root/test/fuzz/LOG.md"
echo "logged: $target ${elapsed}s ${executions:-0} executions, exit $status," \
  "findings: ${artifacts:-none} ($findings error lines)"
