#!/usr/bin/env bash
# Smoke test of one cache-locality benchmark (rag, nested or bulk):
#   locality_smoke_test.sh SPANC NAME
# runs `spanc bench NAME --quick --results $TEST_TMPDIR` on SmolLM2 and
# checks NAME.md / NAME.tsv (and NAME.png where matplotlib is present)
# with check_locality_results.py. Skips, passing, without the model (and,
# for bulk, without Debian's python3.11-doc corpus) where tools/setup.sh
# never ran; once it ran (it links .venv last), either missing is a broken
# set-up and fails.
set -euo pipefail
spanc="$1"
name="$2"
root="${SPANC_ROOT:-}"
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
missing() {
  if [[ -n $root && -e $root/.venv ]]; then
    echo "FAIL: $1, although tools/setup.sh ran ($root/.venv exists); run it again"
    exit 1
  fi
  echo "SKIPPED: $1 (run tools/setup.sh)"
  exit 0
}
[[ -n $root && -e $model ]] || missing "no model at '$model'"
if [[ $name == bulk && ! -d /usr/share/doc/python3.11/html/_sources/tutorial ]]; then
  missing "no corpus (Debian's python3.11-doc)"
fi
results="${TEST_TMPDIR:-$(mktemp -d)}/$name"
mkdir -p "$results"
# Passive waiting: spinning OpenMP threads crawl when the cores are shared.
OMP_WAIT_POLICY=passive "$spanc" bench "$name" --quick -t 2 --model "$model" \
  --results "$results" >"$results/stdout.txt"
exec python3 test/bench/check_locality_results.py "$name" "$results"
