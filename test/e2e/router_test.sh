#!/usr/bin/env bash
# Runs an e2e test of spanc replicas behind a router that tools/setup.sh
# installs only on request:
#   router_test.sh ENV SETUP_FLAG SCRIPT SPANC
# ENV is the environment's link in the clone (.venv-dynamo), SETUP_FLAG
# the setup option that makes it (--with-dynamo). Without it the test
# passes with a SKIPPED notice saying how to get it; with it, anything
# broken fails. The model is SmolLM2 from $SPANC_ROOT/models (the routers
# need its real vocabulary and chat template).
set -euo pipefail
environment="$1" flag="$2" script="$3" spanc="$4"
root="${SPANC_ROOT:-}"
if [[ -z $root || ! -e $root/$environment ]]; then
  echo "SKIPPED: $environment is not set up in '${root:-SPANC_ROOT unset}';" \
    "run tools/setup.sh $flag to test this router"
  exit 0
fi
python="$root/$environment/bin/python3"
if [[ ! -x $python ]]; then
  echo "error: $root/$environment is set up but has no python3;" \
    "run tools/setup.sh $flag again" >&2
  exit 1
fi
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [[ ! -f $model ]]; then
  echo "error: no $model; run tools/setup.sh" >&2
  exit 1
fi
exec "$python" "$script" "$spanc" "$model"
