#!/usr/bin/env bash
# Embedding shards growing and shrinking while training runs: ctr-gen
# --drift piped into ctr-train, its embeddings on shadowsync-ps shards
# routed by a shard map (--emb remote --emb-shard-map), beside a writer
# that logs every row whose push was acknowledged (shadowsync-emu-emb), on
# 3 PS processes on 127.0.0.1. The map goes from 2 shards to 3 at GROW_S
# seconds and back to 2 at SHRINK_S; the same stream runs once more
# without changes (the baseline, same run). Each change is made by
# `shadowsync-ctl scale` as an operator makes it. Prints per run:
# examples/s, progressive NE, and for each change the rows moved /
# expected (a third of the rows at the grow, every row of the third shard
# at the shrink), the seconds until scale said done, and the training's dip (its
# slowest progress interval during the move / its median one before);
# once the third PS has given all its rows away it is stopped;
# then the writer's rows lost (verified against the last map).
#   bash bench/elastic.sh                     # ROWS=4000000 GROW_S=8 SHRINK_S=20
#   bash bench/elastic.sh --rows 8000000 --grow-s 15 --shrink-s 40
# --emulated 1 (root) puts every PS, the trainer and the writer on hosts of
# their own (network namespaces, one veth link each at --rate, --delay per
# link; bench/emu-lib.sh) instead of 127.0.0.1.
#   bash bench/elastic.sh --emulated 1 --rate 10gbit
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-4000000}
GROW_S=${GROW_S:-8}
SHRINK_S=${SHRINK_S:-20}
EMULATED=${EMULATED:-0}
RATE=${RATE:-10gbit}
DELAY=${DELAY:-0}
MAP=$PWD/out/bench-elastic.map
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

write_map() { bench_write_map "$MAP" "$@"; }


# scale M: shadowsync-ctl scale to M of the 3 PS (run on the trainer's
# host, which reaches every PS); sets done_s and ratio from its last line
# (seconds to done; rows moved / expected: a third of the rows at the
# grow, every row of the third shard at the shrink).
scale() {
  local out=out/bench-elastic-scale$1.log
  bench_on t ./build/bin/shadowsync-ctl scale --map "$MAP" --replicas "$1" --fleet "$three" \
    --http-urls "$urls" --interval-ms 100 --timeout-s 600 >"$out" 2>&1 || {
    cat "$out" >&2
    exit 1
  }
  done_s=$(grep -o '^scale: done in [0-9.]*' "$out" | awk '{print $4}')
  ratio=$(grep -o '([0-9.]* of the' "$out" | tr -d '(' | awk '{print $1}')
}

dip() { bench_dip "$@"; }

run() { # moves|none -> a result line
  local mode=$1 k log=out/bench-elastic-$1.log
  https=() addrs=()
  write_map 1 127.0.0.1:1 # a placeholder until the ports are known
  for k in 0 1 2; do
    rm -rf "out/bench-elastic-db$k"
    BENCH_HOST=p$k bench_ps_start "out/bench-elastic-ps$k.log" --shard-map "$MAP" --emb-db "out/bench-elastic-db$k"
    pids+=("$ps_pid")
    https[k]=$ps_http addrs[k]=$addr
  done
  local two="${addrs[0]},${addrs[1]}"
  three="${addrs[0]},${addrs[1]},${addrs[2]}" urls="http://${https[0]},http://${https[1]},http://${https[2]}"
  write_map 2 "$two"
  sleep 1.5 # every PS serves epoch 2
  rm -f out/bench-elastic-acked.log
  bench_on w ./build/bin/shadowsync-emu-emb --shard-map "$MAP" --log out/bench-elastic-acked.log \
    --seconds $((SHRINK_S + 8)) --interval-ms 100 >out/bench-elastic-writer.log 2>&1 &
  local writer=$!
  local t0
  t0=$(date +%s.%N)
  bench_on t ./build/bin/ctr-gen --drift --rows "$ROWS" --out - --quiet 2>/dev/null |
    bench_on t ./build/bin/ctr-train --train - --emb remote --emb-shard-map "$MAP" --progress 1 >"$log" 2>&1 &
  local trainer=$! grow="-" shrink="-" ratio_g="-" ratio_s="-" dip_g="-" dip_s="-" g s
  if [ "$mode" = moves ]; then
    sleep "$GROW_S"
    local tg ts
    tg=$(date +%s.%N)
    scale 3
    grow=$done_s ratio_g=$ratio
    sleep "$(awk -v a="$SHRINK_S" -v b="$(date +%s.%N)" -v t="$t0" 'BEGIN {d = a - (b - t); print (d > 0 ? d : 0)}')"
    ts=$(date +%s.%N)
    scale 2
    shrink=$done_s ratio_s=$ratio
    kill "${pids[2]}" # drained: stopped, as kubectl scale removes it
    g=$(awk -v a="$tg" -v t="$t0" 'BEGIN {print a - t}')
    s=$(awk -v a="$ts" -v t="$t0" 'BEGIN {print a - t}')
  fi
  wait "$trainer"
  if [ "$mode" = moves ]; then # the progress lines after each move are in now
    dip_g=$(dip "$log" "$g" "$(awk -v a="$g" -v d="$grow" 'BEGIN {print a + d}')")
    dip_s=$(dip "$log" "$s" "$(awk -v a="$s" -v d="$shrink" 'BEGIN {print a + d}')")
  fi
  wait "$writer" || true
  local verify
  verify=$(bench_on w ./build/bin/shadowsync-emu-emb --shard-map "$MAP" --verify out/bench-elastic-acked.log 2>&1 | grep '^emu-emb-verify:' || true)
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  pids=()
  printf '%-6s %10s %9s   %5s %6s %6s   %5s %6s %6s   %s\n' "$mode" \
    "$(summary_field "$(cat "$log")" examples/s)" \
    "$(grep '^summary-online:' "$log" | grep -o 'progressive_ne=[0-9.na]*' | cut -d= -f2)" \
    "$ratio_g" "$grow" "$dip_g" "$ratio_s" "$shrink" "$dip_s" "${verify#emu-emb-verify: }"
}

bench_hosts p0 p1 p2 t w
where="3 shadowsync-ps on 127.0.0.1"
[ "$EMULATED" = 0 ] || where="5 emulated hosts (3 shadowsync-ps, the trainer, the writer; links $RATE, delay $DELAY)"
echo "elastic embedding shards: ctr-gen --drift, $ROWS rows piped into ctr-train (--emb remote" \
  "--emb-shard-map) and shadowsync-emu-emb's acknowledged rows, $where;" \
  "moves: 2 -> 3 shards at ${GROW_S} s, 3 -> 2 at ${SHRINK_S} s"
printf '%-6s %10s %9s   %-20s   %-20s   %s\n' run examples/s prog_ne "grow: moved/exp s dip" \
  "shrink: moved/exp s dip" "writer (rows acknowledged, lost)"
run none
run moves
