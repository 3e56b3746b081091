#!/usr/bin/env bash
# `spanc bench engine` on the synthetic model (seconds): the prefill, the
# decode and the decode after a context (--gen-depth, llama-bench's -d)
# each report their samples, in the table and in --json; a depth past the
# model's context is refused up front, naming the options.
#   bench_engine_test.sh SPANC MODEL
set -euo pipefail
spanc="$1"
model="$2"
fail() {
  echo "FAIL: $*"
  exit 1
}
run=("$spanc" bench engine -m "$model" -t 2 --prompt-tokens 64
  --gen-tokens 8 --gen-depth 200 -r 1)
table="$("${run[@]}")" || fail "bench engine exited with an error"
echo "$table"
grep -qE '^\| pp64 \| [0-9.]+ \|' <<<"$table" || fail "no pp64 row"
grep -qE '^\| tg8 @ d200 \| [0-9.]+ \|' <<<"$table" || fail "no tg8 @ d200 row"
json="$("${run[@]}" --json | tail -n 1)"
echo "$json"
grep -q '"tg_depth": 200' <<<"$json" || fail "--json lacks tg_depth 200"
grep -qE '"tg_samples": \[[0-9]' <<<"$json" || fail "--json lacks tg samples"
if err="$("$spanc" bench engine -m "$model" -t 2 --prompt-tokens 0 \
  --gen-tokens 8 --gen-depth 4090 -r 1 2>&1)"; then
  fail "a depth past the context was accepted"
fi
grep -q "gen-depth 4090 + --gen-tokens 8 exceed the model's context (4096 tokens)" \
  <<<"$err" || fail "unexpected error: $err"
echo "PASS"
