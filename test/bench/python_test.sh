#!/usr/bin/env bash
# Runs a standard-library Python test from the runfiles root on the system
# python3: python_test.sh SCRIPT [ARGS...].
set -euo pipefail
script="$1"
shift
exec python3 "$script" "$@"
