#!/usr/bin/env bash
# Runs test/e2e/serve.py from the runfiles root: serve_test.sh SPANC TINY_MODEL.
set -euo pipefail
exec python3 test/e2e/serve.py "$@"
