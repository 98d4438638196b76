#!/usr/bin/env bash
# shadowsync-tune's pick against the best of an exhaustive sweep and
# against the defaults, on emulated cluster shapes (as root): for each
# shape, the tuner as a user runs it (--trials TRIALS: the best predicted
# and the defaults), then every candidate (--sweep). The figure compared is
# the sync gap at full examples/s (lower is better).
#   bash bench/tune.sh    # TRIALS=3 SECS=6; SHAPES="link:ps_link:slow_hosts[:latency_us] ..."
# (Gbit/s; latency_us: one way between two hosts, 0 unless given; the
# trials emulate it, half on each host's link.)
#   REUSE_SWEEP=1 bash bench/tune.sh   # the tuner again against the last run's sweeps
source "$(dirname "$0")/common.sh"
[ "$(id -u)" = 0 ] || { echo "tune: the emulated cluster needs root"; exit 0; }
TRIALS=${TRIALS:-3}
SECS=${SECS:-6}
SHAPES=${SHAPES:-10:10:0 1:1:0 10:1:0 10:10:2 10:10:0:4000}
T=./build/bin/shadowsync-tune
gap_of() { sed -n "s/^$1 .* \([0-9.]*\)$/\1/p" | head -1; }
printf '%-12s %-26s %8s %-26s %8s %12s %10s\n' shape pick pick_gap best_of_sweep best_gap defaults_gap pick/best
for shape in $SHAPES; do
  IFS=: read -r link ps slow latency <<<"$shape"
  args=(--link-gbit "$link" --ps-link-gbit "$ps" --slow-hosts "$slow" --slow-gbit 1
    --latency-us "${latency:-0}"
    --trial-seconds "$SECS")
  tuned=$($T "${args[@]}" --trials "$TRIALS")
  if [ "${REUSE_SWEEP:-0}" = 1 ] && [ -s "out/bench-tune-$shape-sweep.txt" ]; then
    swept=$(cat "out/bench-tune-$shape-sweep.txt") # an earlier run's sweep (REUSE_SWEEP=1)
  else
    swept=$($T "${args[@]}" --sweep)
  fi
  echo "$tuned" >"out/bench-tune-$shape-pick.txt"
  echo "$swept" >"out/bench-tune-$shape-sweep.txt"
  # pick: "pick: DESC  predicted ... ; measured R examples/s gap G; defaults ... gap D"
  pl=$(grep '^pick: ' <<<"$tuned")
  pick=$(sed 's/^pick: \(.*\)  predicted.*/\1/' <<<"$pl")
  pick_gap=$(sed 's/.*; measured [0-9]* examples\/s gap \([0-9.]*\).*/\1/' <<<"$pl")
  def_gap=$(sed -n 's/.*defaults (easgd ps=1 f32 gap=4) measured [0-9]* examples\/s gap \([0-9.]*\).*/\1/p' <<<"$pl")
  bl=$(grep '^pick: ' <<<"$swept")
  best=$(sed 's/^pick: \(.*\)  predicted.*/\1/' <<<"$bl")
  best_gap=$(sed 's/.*; measured [0-9]* examples\/s gap \([0-9.]*\).*/\1/' <<<"$bl")
  printf '%-12s %-26s %8s %-26s %8s %12s %10.2f\n' "$shape" "$pick" "$pick_gap" "$best" "$best_gap" \
    "${def_gap:--}" "$(awk -v a="$pick_gap" -v b="$best_gap" 'BEGIN {print a / b}')"
done
