#!/usr/bin/env bash
# Online training with bounded embedding tables on a drifting stream: the
# same stream (ctr-gen --drift, piped) through ctr-train with its
# embeddings on PS_COUNT shadowsync-ps shards (--emb remote), once with
# unbounded tables (the baseline, same run) and once with admission,
# expiry and a row budget (BOUNDS, per shard). Samples the shards' RSS and
# live rows every second into SAMPLES (bench/plot-online-bounded.sh plots
# it). Prints per mode: progressive NE (overall and last window),
# examples/s, peak RSS and live rows, rows expired/dropped/not admitted;
# then the ratios bounded / unbounded. MODES: "unbounded bounded" (the
# default), or one of them alone (a long run's other half from before).
#   bash bench/online-bounded.sh                      # ROWS=2000000 PS_COUNT=1
#   bash bench/online-bounded.sh --rows 50000000 --ps-count 2 --bounds "--emb-admit-count 2 --emb-ttl-s 60 --emb-max-live-rows 500000"
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-2000000}
WINDOW=${WINDOW:-200000}
BOUNDS=${BOUNDS:---emb-admit-count 2 --emb-ttl-s 30 --emb-max-live-rows 150000}
MODES=${MODES:-unbounded bounded}
TURNOVER=${TURNOVER:-2}
PS_COUNT=${PS_COUNT:-1} # embedding shards (the budget is per table and shard)
SAMPLES=${SAMPLES:-out/online-bounded.tsv} # the time series (bench/plot-online-bounded.sh)
printf 'mode\tseconds\trss_mb\tlive_rows\texamples\n' >"$SAMPLES"
bench_ps_trap
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

# The PS shards of a mode: PS_COUNT processes on 127.0.0.1; sets pids,
# addrs (comma-separated) and https (space-separated).
start_shards() { # name ps-flags...
  local name=$1 k
  shift
  pids=() addrs="" https=""
  for k in $(seq "$PS_COUNT"); do
    bench_ps_start "out/bench-online-ps-$name-$k.log" "$@"
    pids+=("$ps_pid")
    addrs+="${addrs:+,}$addr"
    https+=" $ps_http"
  done
}

stop_shards() {
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  ps_pid=""
}

sum_metric() { # regex -> the sum over the shards
  local h t=0
  for h in $https; do t=$((t + $(bench_metric_sum "$h" "$1"))); done
  echo "$t"
}

# Once a second until pid ends: the shards' RSS and live rows (summed),
# appended to SAMPLES as "mode seconds rss_mb live_rows examples"; prints
# the peaks.
sample() { # pid mode trainer-log
  local peak_rss=0 peak_rows=0 rss rows t0=$SECONDS ex p
  while kill -0 "$1" 2>/dev/null; do
    rss=0
    for p in "${pids[@]}"; do
      rss=$((rss + $(awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$p/status" 2>/dev/null || echo 0)))
    done
    rows=$(sum_metric '^shadowsync_emb_resident_rows ')
    ex=$(grep -o 'examples=[0-9]*' "$3" 2>/dev/null | tail -1 | cut -d= -f2)
    printf '%s\t%d\t%d\t%d\t%d\n' "$2" $((SECONDS - t0)) "$rss" "$rows" "${ex:-0}" >>"$SAMPLES"
    [ "$rss" -gt "$peak_rss" ] && peak_rss=$rss
    [ "$rows" -gt "$peak_rows" ] && peak_rows=$rows
    sleep 1
  done
  echo "$peak_rss $peak_rows"
}

run_mode() { # name ps-flags... -> a result line
  local name=$1 out=out/bench-online-$1.log
  shift
  start_shards "$name" "$@"
  ./build/bin/ctr-gen --drift --drift-turnover "$TURNOVER" --rows "$ROWS" --out - --quiet 2>/dev/null |
    ./build/bin/ctr-train --train - --emb remote --emb-ps "$addrs" --progressive-window "$WINDOW" \
      --progress 1 >"$out" 2>&1 &
  local trainer=$!
  read -r peak_rss peak_rows < <(sample "$trainer" "$name" "$out")
  wait "$trainer"
  local ne nw rate gone
  ne=$(grep '^summary-online:' "$out" | grep -o 'progressive_ne=[0-9.na]*' | cut -d= -f2)
  nw=$(grep '^summary-online:' "$out" | grep -o 'progressive_ne_window=[0-9.na]*' | cut -d= -f2)
  rate=$(summary_field "$(cat "$out")" examples/s)
  gone="$(sum_metric '^shadowsync_emb_expired_rows_total')/$(sum_metric '^shadowsync_emb_dropped_rows_total')/$(sum_metric '^shadowsync_emb_not_admitted_total')"
  stop_shards
  printf '%-10s %12s %12s %12s %10s %12s %s\n' "$name" "$ne" "$nw" "$rate" "$peak_rss" "$peak_rows" "$gone"
}

echo "online, bounded tables: ctr-gen --drift --drift-turnover $TURNOVER, $ROWS rows piped into one" \
  "ctr-train (--emb remote, $PS_COUNT shadowsync-ps on 127.0.0.1); bounds: $BOUNDS"
printf '%-10s %12s %12s %12s %10s %12s %s\n' mode prog_ne "ne_last_${WINDOW}" examples/s ps_rss_mb live_rows \
  expired/dropped/not_admitted
unb= bnd=
if [[ " $MODES " == *" unbounded "* ]]; then
  unb=$(run_mode unbounded)
  echo "$unb"
fi
if [[ " $MODES " == *" bounded "* ]]; then
  # shellcheck disable=SC2086 # BOUNDS is a list of flags
  bnd=$(run_mode bounded $BOUNDS)
  echo "$bnd"
fi
[ -n "$unb" ] && [ -n "$bnd" ] || exit 0
awk -v a="$unb" -v b="$bnd" 'BEGIN {
  split(a, u, " +"); split(b, x, " +")
  printf "ratio bounded/unbounded: prog_ne=%.4f ne_last=%.4f examples/s=%.3f ps_rss=%.3f live_rows=%.3f\n",
    x[2] / u[2], x[3] / u[3], x[4] / u[4], x[5] / u[5], x[6] / u[6] }'
