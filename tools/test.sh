#!/usr/bin/env bash
# tools/test.sh — the whole test suite: set-up (quiet when all is in place),
# then every Bazel test (GoogleTest, lit + FileCheck) and, under CI=true,
# the lit and unit suites again under ASan/UBSan. Ends with one summary line.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
"$root/tools/setup.sh" || exit 1

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0

run_suite() {
  echo "== bazel test $*"
  bazel test --test_summary=short "$@" 2>&1 | tee -a "$log"
  local code=${PIPESTATUS[0]}
  # Exit code 4: the patterns matched no test (not a failure of a test).
  ((code == 0 || code == 4)) || status=1
}

run_suite //...
if [[ ${CI:-} == true || ${SPANC_SANITIZE:-} == 1 ]]; then
  run_suite --config=asan //test/...
fi

passed=$(grep -cE '^//\S+\s+.*(PASSED|\(cached\) PASSED)' "$log" || true)
failed=$(grep -cE '^//\S+\s+.*(FAILED|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY)' "$log" || true)
if ((status != 0 && failed == 0)); then
  failed=1 # the build itself failed before any test could report
fi
echo "tests: $passed passed, $failed failed"
((status == 0 && failed == 0))
