#!/usr/bin/env bash
# (b) What does syncing through a real shadowsync-ps cost a trainer? One
# ctr-train process (--ps, the public hooks, gRPC over loopback) with
# --sync none, shadow (background), foreground K=1 and K=10, REPS times
# each in interleaved order; median examples/s as a ratio to `none` of the
# same rep. (c) The sync-gap distribution of the shadow runs (steps between
# two completed rounds: mean, p50, p99, max).
#   bash bench/ps-sync-overhead.sh
#   ALGO=ma REPS=3 bash bench/ps-sync-overhead.sh
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-1000000}
USE_ROWS=${USE_ROWS:-300000}
REPS=${REPS:-3}
ALGO=${ALGO:-easgd}
make_data "$ROWS"
./build/bin/shadowsync-ps --listen 127.0.0.1:0 >out/bench-ps.log 2>&1 &
ps=$!
trap 'kill $ps 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q listening out/bench-ps.log && break; sleep 0.1; done
addr=$(grep -o 'listening on [0-9.:]*' out/bench-ps.log | awk '{print $3}')

MODES=(none shadow foreground-1 foreground-10)
declare -A RATE RATIO GAP P50 P99 MAX
for rep in $(seq "$REPS"); do
  for mode in "${MODES[@]}"; do
    case $mode in
      none) args=(--sync none) ;;
      shadow) args=(--sync shadow) ;;
      foreground-*) args=(--sync foreground --sync-every "${mode#foreground-}") ;;
    esac
    out=$(./build/bin/ctr-train --ps "$addr" --train "out/train-$ROWS.tsv" --max-rows "$USE_ROWS" \
      --test out/test.tsv --max-test-rows 1000 --algo "$ALGO" --final-rounds 0 --progress 0 \
      "${args[@]}")
    record_run "$mode" "$out"
  done
done
echo
echo "sync through shadowsync-ps on loopback: rows=$USE_ROWS algo=$ALGO reps=$REPS, 1 trainer x 1 worker"
echo "medians over reps; ratio = median of (mode / none of the same rep)"
printf '%-15s %11s %7s %9s %8s %8s %8s\n' mode examples/s ratio gap_mean gap_p50 gap_p99 gap_max
for mode in "${MODES[@]}"; do
  printf '%-15s %11.0f %7.3f %9s %8s %8s %8s\n' "$mode" "$(med "${RATE[$mode]}")" \
    "$(med "${RATIO[$mode]}")" "$(med "${GAP[$mode]}")" "$(med "${P50[$mode]}")" \
    "$(med "${P99[$mode]}")" "$(med "${MAX[$mode]}")"
done
