#!/usr/bin/env bash
# Runs one directory of lit tests from Bazel's runfiles: run_lit.sh SPANC DIR.
set -euo pipefail
spanc="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
export SPANC_BIN="$spanc"
export PATH="/usr/lib/llvm-14/bin:$PATH"
lit="/usr/lib/llvm-14/build/utils/lit/lit.py"
exec python3 "$lit" -sv "$2"
