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

# Which kernel paths (bazel/isa.bzl) each per-path test ran, and which it
# skipped because this CPU lacks them: the list CI prints.
report_kernel_paths() {
  [[ -x $spanc ]] || return 0
  echo "== kernel paths: this CPU runs: $("$spanc" cpu --paths);" \
    "lacks: $("$spanc" cpu --missing)"
  local level ran skipped test_log
  for level in $(all_levels); do
    ran=0 skipped=0
    while IFS= read -r test_log; do
      # A sharded target: count it once, by its first shard.
      [[ $test_log == */shard_* && $test_log != */shard_1_of_* ]] && continue
      if grep -qE "^spanc-isa: ran $level( |$)" "$test_log"; then
        ran=$((ran + 1))
      elif grep -qE "^spanc-isa: skipped $level:" "$test_log"; then
        skipped=$((skipped + 1))
      fi
    done < <(find -L "$root/bazel-testlogs/" -path "*_$level/*" -name test.log)
    printf '   %-11s %3d test targets ran, %3d skipped (no such hardware)\n' \
      "$level" "$ran" "$skipped"
    skipped_paths=$((skipped_paths + skipped))
  done
}
skipped_paths=0
spanc="$root/bazel-bin/tools/spanc/spanc"

# Every kernel path, lowest first: those this CPU runs, then those it lacks.
all_levels() { echo "$("$spanc" cpu --paths) $("$spanc" cpu --missing)"; }

run_suite //...
report_kernel_paths
if [[ ${CI:-} == true || ${SPANC_SANITIZE:-} == 1 ]]; then
  # Heavy per-path tests (a model on every path) run under ASan on the
  # host's own path only: each takes several times as long there.
  host_path="$("$spanc" cpu --paths | awk '{print $NF}')"
  filters="-no_asan"
  for level in $(all_levels); do
    [[ $level == "$host_path" ]] || filters+=",-isa_heavy_$level"
  done
  run_suite --config=asan --test_tag_filters="$filters" \
    --build_tag_filters="$filters" //test/...
fi

passed=$(grep -cE '^//\S+\s+.*(PASSED|\(cached\) PASSED)' "$log" || true)
failed=$(grep -cE '^//\S+\s+.*(FAILED|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY)' "$log" || true)
if ((status != 0 && failed == 0)); then
  failed=1 # the build itself failed before any test could report
fi
# A path this CPU lacks passes without running: count it as skipped.
passed=$((passed - skipped_paths))
echo "tests: $passed passed, $failed failed, $skipped_paths skipped"
((status == 0 && failed == 0))
