#!/usr/bin/env bash
# Dense groups cut again while training runs: ctr-gen --drift piped into
# ctr-train, its dense model synced by S-EASGD through shadowsync-ps
# shards named by a shard map (--shard-map), 2 PS processes on 127.0.0.1.
# The map goes from 1 PS to 2 at GROW_S seconds and back to 1 at SHRINK_S;
# the same stream runs once more without changes (the baseline, same run).
# Prints per run: examples/s, progressive NE, the trainer's failed rounds,
# and for each change the floats the PS it moves to holds after it /
# expected (half the model at the grow, all of it on the first PS at the
# shrink), the seconds until the trainer synced on the new cut (the new
# PS has its member at the grow; the second PS none at the shrink, which is
# then stopped), and the training's dip (its slowest progress interval
# during the change / its median one before).
#   bash bench/elastic-dense.sh                      # ROWS=4000000 GROW_S=10 SHRINK_S=25
#   bash bench/elastic-dense.sh --rows 8000000 --grow-s 15 --shrink-s 40
# --emulated 1 (root) puts each PS and the trainer on hosts of their own
# (network namespaces, one veth link each at --rate, --delay per link;
# bench/emu-lib.sh) instead of 127.0.0.1.
#   bash bench/elastic-dense.sh --emulated 1 --rate 10gbit
# --bulk 1 (the default): the PS serve bulk streams and the trainer sends its
# dense chunks on them, a stream per shard map epoch; --bulk 0: gRPC only.
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-4000000}
GROW_S=${GROW_S:-10}
SHRINK_S=${SHRINK_S:-25}
EMULATED=${EMULATED:-0}
RATE=${RATE:-10gbit}
DELAY=${DELAY:-0}
BULK=${BULK:-1}
MAP=$PWD/out/bench-elastic-dense.map
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

metric() { bench_metric_sum "${https[$1]}" "$2"; } # k regex: PS k's series summed
floats() { metric "$1" '^shadowsync_ps_dense_floats '; }
members() { metric "$1" '^shadowsync_ps_members[{]'; }

# Seconds (to 0.1 s) from t0 until PS k's members are (op) n; "never"
# after 60 s (the run goes on).
wait_members() { # t0 k op n
  local tries=600
  while ! awk -v m="$(members "$2")" -v n="$4" -v op="$3" \
    'BEGIN {exit !(op == "gt" ? m > n : m == n)}'; do
    tries=$((tries - 1))
    [ "$tries" -gt 0 ] || { echo never; return; }
    sleep 0.1
  done
  awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}'
}

since() { awk -v a="$1" -v t="$2" 'BEGIN {print a - t}'; } # a - t

run() { # moves|none -> a result line
  local mode=$1 k log=out/bench-elastic-dense-$1.log
  https=() addrs=()
  bench_write_map "$MAP" 1 127.0.0.1:1 # a placeholder until the ports are known
  for k in 0 1; do
    local bulk=()
    [ "$BULK" = 1 ] && bulk=(--bulk-listen "$([ "$EMULATED" = 1 ] && echo "${BENCH_IP[p$k]}" || echo 127.0.0.1):0") || bulk=(--bulk-listen "")
    BENCH_HOST=p$k bench_ps_start "out/bench-elastic-dense-ps$k.log" --shard-map "$MAP" "${bulk[@]}"
    pids+=("$ps_pid")
    https[k]=$ps_http addrs[k]=$addr
  done
  local one="${addrs[0]}" two="${addrs[0]},${addrs[1]}"
  bench_write_map "$MAP" 2 "$one"
  sleep 1 # every PS serves epoch 2
  local t0
  t0=$(date +%s.%N)
  bench_on t ./build/bin/ctr-gen --drift --rows "$ROWS" --out - --quiet 2>/dev/null |
    bench_on t ./build/bin/ctr-train --train - --shard-map "$MAP" --progress 1 \
      --bulk "$([ "$BULK" = 1 ] && echo true || echo false)" >"$log" 2>&1 &
  local trainer=$! grow="-" shrink="-" ratio_g="-" ratio_s="-" dip_g="-" dip_s="-" g s
  if [ "$mode" = moves ]; then
    sleep "$GROW_S"
    local model tg ts
    model=$(floats 0)
    tg=$(date +%s.%N)
    bench_write_map "$MAP" 3 "$two" "$one"
    grow=$(wait_members "$tg" 1 gt 0)
    sleep 1 # the PS's metrics refresh
    ratio_g=$(awk -v f="$(floats 1)" -v m="$model" 'BEGIN {printf "%.3f", f / (m / 2)}')
    sleep "$(awk -v a="$SHRINK_S" -v b="$(date +%s.%N)" -v t="$t0" 'BEGIN {d = a - (b - t); print (d > 0 ? d : 0)}')"
    ts=$(date +%s.%N)
    bench_write_map "$MAP" 4 "$one" "$two"
    shrink=$(wait_members "$ts" 1 eq 0)
    [ "$shrink" != never ] || bench_on p1 curl -s "http://${https[1]}/metrics" >out/bench-elastic-dense-ps1.metrics
    sleep 1
    ratio_s=$(awk -v f="$(floats 0)" -v m="$model" 'BEGIN {printf "%.3f", f / m}')
    kill "${pids[1]}" # drained: stopped, as deploy/README.md scales the fleet down
    g=$(since "$tg" "$t0") s=$(since "$ts" "$t0")
  fi
  wait "$trainer"
  if [ "$mode" = moves ]; then
    dip_g=$(bench_dip "$log" "$g" "$(awk -v a="$g" -v d="$grow" 'BEGIN {print a + d}')")
    dip_s=$(bench_dip "$log" "$s" "$(awk -v a="$s" -v d="$shrink" 'BEGIN {print a + d}')")
  fi
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  pids=()
  local summary
  summary=$(grep '^summary:' "$log")
  printf '%-6s %10s %9s %6s   %5s %5s %6s   %5s %5s %6s\n' "$mode" \
    "$(summary_field "$summary" examples/s)" \
    "$(grep '^summary-online:' "$log" | grep -o 'progressive_ne=[0-9.na]*' | cut -d= -f2)" \
    "$(summary_field "$summary" failed_rounds_sum)" \
    "$ratio_g" "$grow" "$dip_g" "$ratio_s" "$shrink" "$dip_s"
}

bench_hosts p0 p1 t
where="2 shadowsync-ps on 127.0.0.1"
[ "$EMULATED" = 0 ] || where="3 emulated hosts (2 shadowsync-ps, the trainer; links $RATE, delay $DELAY)"
echo "elastic dense groups: ctr-gen --drift, $ROWS rows piped into ctr-train (S-EASGD through" \
  "--shard-map, bulk $BULK), $where; moves: 1 -> 2 PS at ${GROW_S} s, 2 -> 1 at ${SHRINK_S} s"
printf '%-6s %10s %9s %6s   %-18s   %-18s\n' run examples/s prog_ne failed "grow: floats/exp s dip" \
  "shrink: floats/exp s dip"
run none
run moves
