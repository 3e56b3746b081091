#!/usr/bin/env bash
# Runs one group of test/e2e/e2e.py from the runfiles root: e2e_test.sh SPANC GROUP.
set -euo pipefail
exec python3 test/e2e/e2e.py "$@"
