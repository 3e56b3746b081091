#!/usr/bin/env bash
# Runs a spanc serve test that drives the server with real Python clients:
#   serve_client_test.sh SCRIPT SPANC TINY_MODEL
# under the virtual environment tools/setup.sh builds (the pinned `openai`
# package of tools/python-requirements.txt): $SPANC_PYTHON, else the
# clone's .venv (the Bazel wrapper passes $SPANC_ROOT). Without it the test
# fails and says how to get it: it never skips.
set -euo pipefail
python="${SPANC_PYTHON:-${SPANC_ROOT:-}/.venv/bin/python3}"
if [[ ! -x $python ]] || ! "$python" -c 'import openai' 2>/dev/null; then
  echo "error: no Python with the openai package at '$python'; run" \
    "tools/setup.sh (tools/test.sh does), or set SPANC_PYTHON" >&2
  exit 1
fi
script="$1"
shift
exec "$python" "$script" "$@"
