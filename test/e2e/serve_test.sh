#!/usr/bin/env bash
# Runs a spanc serve test script from the runfiles root on the system
# python3 (plain http.client, no packages): serve_test.sh SCRIPT SPANC
# TINY_MODEL.
set -euo pipefail
script="$1"
shift
exec python3 "$script" "$@"
