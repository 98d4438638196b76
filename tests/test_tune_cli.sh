#!/usr/bin/env bash
# shadowsync-tune from the command line: predictions for every candidate,
# a pick that moves away from the PS when its uplink is slow, trials run
# through a stand-in for the emulated cluster (measured figures parsed, the
# measured best picked and written as SHADOWSYNC_* lines), bad input
# refused with exit 2 and a reason.
#   test_tune_cli.sh BIN_DIR
set -euo pipefail
tune=$1/shadowsync-tune
NAME=test_tune_cli
source "$(dirname "$0")/cli_lib.sh"

# Predictions only: 24 PS candidates (2 algorithms x 3 shard counts x 2
# encodings x 2 gaps) and 4 decentralized ones.
out=$("$tune" --trials 0)
echo "$out"
[ "$(grep -c -E '^(easgd|ma) ' <<<"$out")" = 28 ] || fail "want 28 candidates"
grep -q '^pick (predicted only' <<<"$out" || fail "no pick line"
# A 1 Gbit/s PS uplink: the PS path's float32 rounds take ~115 steps
# (the simulator, as measured on the emulated cluster); the pick leaves it.
out=$("$tune" --trials 0 --ps-link-gbit 1)
pick=$(grep '^pick' <<<"$out")
echo "$pick"
! grep -q 'easgd ps=1 f32' <<<"$pick" || fail "slow PS uplink, still the default picked"

# Trials through a stand-in: trees measure gap 5, everything else 30, all
# at the same examples/s; it records what it was asked to run.
cat >"$tmp/emu.sh" <<'SH'
echo "$*" >>"$(dirname "$0")/asked"
gap=30
case "$*" in *"--peer-schedule tree"*) gap=5 ;; esac
echo "emu-cluster: ps=1 hosts=4 trainers=8 mode=background examples/s=800000 gap_p50=$gap gap_p99=9"
SH
out=$("$tune" --sweep --emu "$tmp/emu.sh" --env-out "$tmp/pick.env" --trial-seconds 2)
echo "$out"
[ "$(wc -l <"$tmp/asked")" = 28 ] || fail "--sweep: want 28 trials"
grep -q -- '--algo easgd --encoding f32' "$tmp/asked" || fail "no trial of the defaults"
grep -q '^pick: ma tree f32' <<<"$out" || fail "the measured best (trees) not picked"
grep -q 'defaults (easgd ps=1 f32 gap=4) measured 800000 examples/s gap 30.0' <<<"$out" ||
  fail "no defaults' measured figures"
grep -qx 'SHADOWSYNC_PEER_SCHEDULE=tree' "$tmp/pick.env" || fail "env file: no peer schedule"
grep -qx 'SHADOWSYNC_ALGO=ma' "$tmp/pick.env" || fail "env file: no algo"
# Without --sweep: the best 3 predicted and the defaults ...
rm "$tmp/asked"
"$tune" --trials 3 --max-trials 3 --emu "$tmp/emu.sh" >/dev/null
[ "$(wc -l <"$tmp/asked")" -le 4 ] || fail "--trials 3 ran more than 3 + the defaults"
# ... and every candidate the model cannot tell apart, up to --max-trials:
# on this shape (8 trainers' rounds bound by 2 shared cores) most of them
# are predicted within 10% of the best.
rm "$tmp/asked"
"$tune" --trials 3 --emu "$tmp/emu.sh" >/dev/null
trials=$(wc -l <"$tmp/asked")
[ "$trials" -gt 4 ] && [ "$trials" -le 13 ] || fail "close predictions: $trials trials, want 5..13"

refused() { expect_refusal "$1" "$tune" --trials 0 "${@:2}"; }
refused "not a multiple of --per-host" --trainers 7 --per-host 2
refused "slow-hosts 9 of 4 hosts" --slow-hosts 9
refused "link-gbit" --link-gbit 0
echo "tune-cli-test: ok"
