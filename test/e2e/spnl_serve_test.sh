#!/usr/bin/env bash
# Runs test/e2e/spnl_serve.py from the runfiles root:
# spnl_serve_test.sh SPANC TINY_MODEL.
set -euo pipefail
exec python3 test/e2e/spnl_serve.py "$@"
