#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time from its seed corpus (read
# only: new inputs go to a temporary directory), then prints its totals.
# A crash, leak, UBSan report or timeout fails the test; the input that
# did it is saved in $SS_FUZZ_ARTIFACTS (default: the build directory).
#   run-target.sh TARGET SEED_CORPUS SECONDS
set -euo pipefail
target=$1 seeds=$2 secs=$3
name=$(basename "$target")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
art=${SS_FUZZ_ARTIFACTS:-$PWD}/
log=$work/log
rc=0
"$target" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$art$name-" "$work" "$seeds" >"$log" 2>&1 || rc=$?
grep -E "^(INFO: seed corpus|#[0-9]+ *DONE|stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==ERROR|SUMMARY)" "$log" || true
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
echo "$name: ${execs:-?} executions in ${secs} s, exit $rc"
if [ "$rc" -ne 0 ]; then
  tail -40 "$log"
fi
exit "$rc"
