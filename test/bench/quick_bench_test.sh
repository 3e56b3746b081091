#!/usr/bin/env bash
# Smoke test of one benchmark: `spanc bench NAME --quick` writes
# NAME.md, NAME.tsv and NAME.png, and their rows agree with each other.
#   quick_bench_test.sh SPANC NAME
# Skips (passes, saying so) when the model is absent and tools/setup.sh
# never ran; once it ran (it links .venv last), a missing model is a broken
# set-up and fails.
set -euo pipefail
spanc="$1"
name="$2"
root="${SPANC_ROOT:-.}"
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [[ ! -e $model ]]; then
  if [[ -e $root/.venv ]]; then
    echo "FAIL: model not found at $model, although tools/setup.sh ran ($root/.venv exists); run it again"
    exit 1
  fi
  echo "SKIPPED: model not found at $model"
  exit 0
fi
out="${TEST_TMPDIR:-$(mktemp -d)}/results"
# One thread: on a loaded machine two threads spend most of a step at
# OpenMP barriers (see bench/results/engine.md).
"$spanc" bench "$name" --quick -t 1 --model "$model" --results "$out" >"$out.log" 2>&1 || {
  cat "$out.log"
  echo "FAIL: spanc bench $name --quick exited with an error"
  exit 1
}
fail() {
  echo "FAIL: $*"
  exit 1
}
for ext in md tsv png; do
  [[ -s $out/$name.$ext ]] || fail "$out/$name.$ext missing or empty"
done
[[ "$(head -c 8 "$out/$name.png" | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a ]] ||
  fail "$name.png is not a PNG"
grep -q "Headline" "$out/$name.md" || fail "$name.md has no headline"
grep -q "load average" "$out/$name.md" || fail "$name.md has no load line"

case $name in
needle)
  # --quick: 4 fragments of 32 tokens, 6 haystacks, flat and tree.
  rows=$(tail -n +2 "$out/needle.tsv" | wc -l)
  [[ $rows == 12 ]] || fail "needle.tsv has $rows rows, want 12"
  for mode in flat tree-reduce-k2; do
    grep -qE "^\| 4 \| 128 \| $mode \| 6 \| [0-6] \|" "$out/needle.md" ||
      fail "needle.md lacks the 4-fragment $mode row"
  done
  # full_recall = (found == needles), and a found needle is in the answer.
  awk -F'\t' 'NR > 1 {
      if (($6 == $5) != ($7 == 1)) { print "row " NR ": full_recall disagrees"; bad = 1 }
      if ($6 == 1 && $5 == 1 && index(tolower($8), tolower($9)) == 0) {
        print "row " NR ": counted a needle the answer lacks"; bad = 1 }
    } END { exit bad }' "$out/needle.tsv" || fail "needle.tsv is inconsistent"
  ;;
accuracy)
  # --quick: the three tasks, 4 contexts of 4 documents (codes, multihop:
  # 32 tokens), a question per document, 7 modes: 3 x 16 x 7 rows.
  rows=$(tail -n +2 "$out/accuracy.tsv" | wc -l)
  [[ $rows == 336 ]] || fail "accuracy.tsv has $rows rows, want 336"
  for mode in full isolated prefix 'isolated\+recompute1' 'prefix\+recompute1' \
    'prefix\+end1' 'prefix\+recompute1\+end1'; do
    grep -qE "^\| codes \| 32 \| 4 \| $mode \| 16 \| [0-9]+ \| [01]\.[0-9]{3} " "$out/accuracy.md" ||
      fail "accuracy.md lacks the codes row of $mode"
    grep -qE "^\| prose \| prose \(~[0-9]+\) \| 4 \| $mode \| 16 \| " "$out/accuracy.md" ||
      fail "accuracy.md lacks the prose row of $mode"
    grep -qE "^\| multihop \| 32 \| 4 \| $mode \| 16 \| " "$out/accuracy.md" ||
      fail "accuracy.md lacks the multihop row of $mode"
  done
  for position in 0 1 2 3; do
    grep -qE "^\| codes \| 32 \| 4 \| $position \| [01]\.[0-9]{2} \|" "$out/accuracy.md" ||
      fail "accuracy.md lacks position $position"
  done
  # codes: correct = the answer holds the code; every mode answers every
  # question of both tasks.
  awk -F'\t' 'NR > 1 {
      if ($1 == "codes" && (index($10, $9) > 0) != ($7 == 1)) { print "row " NR ": correct disagrees"; bad = 1 }
      if ($1 == "multihop") {
        n = split($9, want, " & ")
        both = n == 2 && index($10, want[1]) > 0 && index($10, want[2]) > 0
        if (both != ($7 == 1)) { print "row " NR ": multihop correct disagrees"; bad = 1 }
      }
      if ($7 == 1 && $8 == 1) { print "row " NR ": correct and other"; bad = 1 }
      seen[$1 " " $6]++
    } END {
      for (key in seen) if (seen[key] != 16) { print key ": " seen[key] " rows"; bad = 1 }
      if (length(seen) != 21) bad = 1
      exit bad }' "$out/accuracy.tsv" || fail "accuracy.tsv is inconsistent"
  # accuracy-modes.tsv: a row per (task, mode) for pareto.py.
  modes=$(tail -n +2 "$out/accuracy-modes.tsv" | wc -l)
  [[ $modes == 21 ]] || fail "accuracy-modes.tsv has $modes rows, want 21"
  ;;
serve)
  # --quick: 8 requests per cell at 1 and 4 clients, span and prefix (and
  # llama-server when the peer is built): every request answered once.
  for server in span prefix; do
    rows=$(awk -F'\t' -v s=$server '$1 == s' "$out/serve.tsv" | wc -l)
    [[ $rows == 16 ]] || fail "serve.tsv has $rows $server rows, want 16"
    for clients in 1 4; do
      grep -qE "^\| $clients \| $server \| [0-9.]+ \| " "$out/serve.md" ||
        fail "serve.md lacks the $server row at $clients clients"
    done
  done
  awk -F'\t' 'NR > 1 {
      if ($4 < 0 || $4 > $5) { print "row " NR ": TTFT outside 0..e2e"; bad = 1 }
      if ($6 <= 0 || $7 > $6 || $8 < 1) { print "row " NR ": token counts"; bad = 1 }
      seen[$1 " " $2 " " $3]++
    } END { for (key in seen) if (seen[key] != 1) bad = 1; exit bad }' \
    "$out/serve.tsv" || fail "serve.tsv is inconsistent"
  ;;
cluster)
  # --quick: round-robin and span-aware span_router over 2 real replicas
  # (8 span queries, 2 of them warm-up), and the simulation at 2 and 16
  # replicas (4 routers each).
  for router in round-robin span; do
    awk -F'\t' -v r=$router '$1 == "measured" && $2 == 2 && $3 == r' \
      "$out/cluster.tsv" | grep -q . || fail "cluster.tsv lacks the measured $router row"
  done
  sims=$(awk -F'\t' '$1 == "simulated"' "$out/cluster.tsv" | wc -l)
  [[ $sims == 8 ]] || fail "cluster.tsv has $sims simulated rows, want 8"
  awk -F'\t' 'NR > 1 {
      if ($5 <= 0 || $6 < $5 || $7 < 0 || $7 > 1) { print "row " NR ": TTFT or share out of range"; bad = 1 }
    } END { exit bad }' "$out/cluster.tsv" || fail "cluster.tsv is inconsistent"
  grep -qE "^\| span-aware \(span_router\) \| span queries \| " "$out/cluster.md" ||
    fail "cluster.md lacks the span-aware row"
  ;;
*) fail "unknown benchmark $name" ;;
esac
echo "PASS: spanc bench $name --quick"
