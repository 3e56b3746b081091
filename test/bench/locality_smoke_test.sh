#!/usr/bin/env bash
# Smoke test of one cache-locality benchmark (rag, nested or bulk):
#   locality_smoke_test.sh SPANC NAME
# runs `spanc bench NAME --quick --results $TEST_TMPDIR` on SmolLM2 and
# checks NAME.md / NAME.tsv (and NAME.png where matplotlib is present)
# with check_locality_results.py. Skips, passing, without the model (and,
# for bulk, without Debian's python3.11-doc corpus).
set -euo pipefail
spanc="$1"
name="$2"
root="${SPANC_ROOT:-}"
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [[ -z $root || ! -e $model ]]; then
  echo "SKIPPED: no model at '$model' (run tools/setup.sh)"
  exit 0
fi
if [[ $name == bulk && ! -d /usr/share/doc/python3.11/html/_sources/tutorial ]]; then
  echo "SKIPPED: no corpus (Debian's python3.11-doc; tools/setup.sh installs it)"
  exit 0
fi
results="${TEST_TMPDIR:-$(mktemp -d)}/$name"
mkdir -p "$results"
# Passive waiting: spinning OpenMP threads crawl when the cores are shared.
OMP_WAIT_POLICY=passive "$spanc" bench "$name" --quick -t 2 --model "$model" \
  --results "$results" >"$results/stdout.txt"
exec python3 test/bench/check_locality_results.py "$name" "$results"
