#!/usr/bin/env bash
# shadowsync-sim from the command line: a small run prints one line per
# (trainers, mode) and the TSV; bad input is refused with exit 2 and a
# reason naming the flag, the file and line, or the key.
#   test_sim_cli.sh BIN_DIR
set -euo pipefail
sim=$1/shadowsync-sim
NAME=test_sim_cli
source "$(dirname "$0")/cli_lib.sh"

out=$("$sim" --trainers 1,2 --modes easgd,fg10 --seconds 1 --tsv "$tmp/rows.tsv")
echo "$out"
[ "$(grep -c '^sim: ' <<<"$out")" = 4 ] || fail "want 4 lines"
grep -q 'n=2 mode=fg10 ' <<<"$out" || fail "no fg10 line for 2 trainers"
[ "$(wc -l <"$tmp/rows.tsv")" = 5 ] || fail "want a header and 4 rows in the TSV"

# refused(EXPECTED_TEXT, ARGS...): exit 2, the reason on stderr
refused() { expect_refusal "$1" "$sim" --seconds 0.1 "${@:2}"; }
refused "unknown mode sgd" --modes sgd
refused "unknown mode fgx" --modes fgx
refused "is not a number of trainers" --trainers 4,x
refused "is not a number of trainers" --trainers 0
refused "No such file" --calibration "$tmp/none.txt"
printf 'step_cpu_us 10\nps_ns_per_float\n' >"$tmp/short.txt"
refused "short.txt:2" --calibration "$tmp/short.txt"
printf 'ma.warp_factor 9\n' >"$tmp/key.txt"
refused "unknown key ma.warp_factor" --calibration "$tmp/key.txt" --modes ma
printf 'step_cpu_us -1\n' >"$tmp/neg.txt"
refused "value >= 0" --calibration "$tmp/neg.txt"
refused "ps-threads" --ps-threads 0
# a mode-specific key applies to that mode only: easgd runs on
printf 'ma.ps_ns_per_float 1e6\n' >"$tmp/ma.txt"
"$sim" --seconds 0.5 --modes easgd --calibration "$tmp/ma.txt" | grep -q 'rounds=[1-9]' ||
  fail "an ma.* key changed easgd"
echo "sim-cli-test: runs, TSV and bad input as expected"
