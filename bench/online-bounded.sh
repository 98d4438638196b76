#!/usr/bin/env bash
# Online training with bounded embedding tables on a drifting stream: the
# same stream (ctr-gen --drift, piped) through ctr-train with its
# embeddings on one shadowsync-ps (--emb remote), once with unbounded
# tables (the baseline, same run) and once with admission, expiry and a
# row budget (BOUNDS). Samples the PS's RSS and live rows every second.
# Prints per mode: progressive NE (overall and last window), examples/s,
# the PS's peak RSS and live rows, rows expired/dropped/not admitted; then
# the ratios bounded / unbounded.
#   bash bench/online-bounded.sh                      # ROWS=2000000
#   bash bench/online-bounded.sh --rows 50000000 --bounds "--emb-admit-count 2 --emb-ttl-s 60 --emb-max-live-rows 500000"
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-2000000}
WINDOW=${WINDOW:-200000}
BOUNDS=${BOUNDS:---emb-admit-count 2 --emb-ttl-s 30 --emb-max-live-rows 150000}
TURNOVER=${TURNOVER:-2}
bench_ps_trap

sample() { # pid metrics-address -> "rss_mb live_rows" once a second until pid ends, the peaks
  local peak_rss=0 peak_rows=0 rss rows
  while kill -0 "$1" 2>/dev/null; do
    rss=$(awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$ps_pid/status" 2>/dev/null || echo 0)
    rows=$(bench_metric_sum "$2" '^shadowsync_emb_resident_rows ')
    [ "$rss" -gt "$peak_rss" ] && peak_rss=$rss
    [ "${rows:-0}" -gt "$peak_rows" ] && peak_rows=$rows
    sleep 1
  done
  echo "$peak_rss $peak_rows"
}

run_mode() { # name ps-flags... -> a result line
  local name=$1
  shift
  bench_ps_start "out/bench-online-ps-$name.log" "$@"
  ./build/bin/ctr-gen --drift --drift-turnover "$TURNOVER" --rows "$ROWS" --out - --quiet 2>/dev/null |
    ./build/bin/ctr-train --train - --emb remote --emb-ps "$addr" --progressive-window "$WINDOW" \
      --progress 10 >"out/bench-online-$name.log" 2>&1 &
  local trainer=$!
  read -r peak_rss peak_rows < <(sample "$trainer" "$ps_http")
  wait "$trainer"
  local out=out/bench-online-$name.log
  local ne nw rate gone
  ne=$(grep '^summary-online:' "$out" | grep -o 'progressive_ne=[0-9.na]*' | cut -d= -f2)
  nw=$(grep '^summary-online:' "$out" | grep -o 'progressive_ne_window=[0-9.na]*' | cut -d= -f2)
  rate=$(summary_field "$(cat "$out")" examples/s)
  gone="$(bench_metric_sum "$ps_http" '^shadowsync_emb_expired_rows_total')/$(bench_metric_sum "$ps_http" '^shadowsync_emb_dropped_rows_total')/$(bench_metric_sum "$ps_http" '^shadowsync_emb_not_admitted_total')"
  bench_ps_stop
  printf '%-10s %12s %12s %12s %10s %12s %s\n' "$name" "$ne" "$nw" "$rate" "$peak_rss" "$peak_rows" "$gone"
}

echo "online, bounded tables: ctr-gen --drift --drift-turnover $TURNOVER, $ROWS rows piped into one" \
  "ctr-train (--emb remote, one shadowsync-ps on 127.0.0.1); bounds: $BOUNDS"
printf '%-10s %12s %12s %12s %10s %12s %s\n' mode prog_ne "ne_last_${WINDOW}" examples/s ps_rss_mb live_rows \
  expired/dropped/not_admitted
unb=$(run_mode unbounded)
echo "$unb"
# shellcheck disable=SC2086 # BOUNDS is a list of flags
bnd=$(run_mode bounded $BOUNDS)
echo "$bnd"
awk -v a="$unb" -v b="$bnd" 'BEGIN {
  split(a, u, " +"); split(b, x, " +")
  printf "ratio bounded/unbounded: prog_ne=%.4f ne_last=%.4f examples/s=%.3f ps_rss=%.3f live_rows=%.3f\n",
    x[2] / u[2], x[3] / u[3], x[4] / u[4], x[5] / u[5], x[6] / u[6] }'
