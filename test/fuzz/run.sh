#!/usr/bin/env bash
# Runs one fuzz target for a while and merges what it found, minimized,
# into the kept corpus:
#
#   test/fuzz/run.sh span|json [SECONDS] [BUILD]   # default 600 s, /tmp/spanc-fuzz
#
# The fuzzer works on a scratch copy of the kept corpus (plus, for span, the
# lit and example programs as seeds); `-merge=1` then adds to
# test/fuzz/TARGET_corpus only the inputs that reach new coverage. Crashes
# are written as crash-* beside the scratch corpus (and are git-ignored
# under test/fuzz/).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
target="$1"
seconds="${2:-600}"
build="${3:-/tmp/spanc-fuzz}"
scratch="$build/run-$target"
kept="$root/test/fuzz/${target}_corpus"
mkdir -p "$scratch/corpus" "$kept"
cp -n "$kept"/* "$scratch/corpus/" 2>/dev/null || true
if [[ "$target" == span ]]; then
  find "$root/test/lit" "$root/examples" -name '*.span' -not -path '*/Inputs/*' |
    while read -r file; do
      cp -n "$file" "$scratch/corpus/seed-$(echo "${file#"$root"/}" | tr / _)"
    done
else
  find "$root/test/lit" -name '*.json' | while read -r file; do
    cp -n "$file" "$scratch/corpus/seed-$(echo "${file#"$root"/}" | tr / _)"
  done
fi
cd "$scratch"
extra=()
if [[ "${FORK:-0}" == 1 ]]; then extra=(-fork=1 -ignore_crashes=1); fi
"$build/${target}_fuzzer" corpus "${extra[@]}" -dict="$root/test/fuzz/$target.dict" \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
  -print_final_stats=1 2>&1 | tail -25
"$build/${target}_fuzzer" -merge=1 -max_len=4096 "$kept" corpus 2>&1 | tail -2
echo "kept corpus: $(ls "$kept" | wc -l) files, $(du -sh "$kept" | cut -f1)"
