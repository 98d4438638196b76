#!/usr/bin/env bash
# What does syncing cost the workers? Runs ctr-train with --sync none,
# shadow, and foreground at K=1 and K=10 in one run, REPS times each in
# interleaved order, and prints the median examples/s of each as a ratio
# to `none` (measured in the same run), with the sync gap.
#
# Each sync mode runs twice: over the in-process transport at memory speed,
# and with the in-process transport emulating a network link (LINK_US
# one-way latency, LINK_GBPS bandwidth, slept not spun), which is the regime
# ShadowSync is built for: a round that costs something.
#
# Default: 1 trainer with 1 worker, so on a 2-core machine the shadow
# thread has the other core to itself.
#   bash bench/sync-overhead.sh
#   ALGO=ma TRAINERS=2 REPS=3 bash bench/sync-overhead.sh
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-1000000}
USE_ROWS=${USE_ROWS:-500000}
REPS=${REPS:-5}
ALGO=${ALGO:-easgd}
TRAINERS=${TRAINERS:-1}
WORKERS=${WORKERS:-1}
LINK_US=${LINK_US:-50}
LINK_GBPS=${LINK_GBPS:-10}
make_data "$ROWS"

LINK=(--link-latency-us "$LINK_US" --link-gbps "$LINK_GBPS")
MODES=(none shadow shadow-gap1 foreground-1 foreground-10 link:shadow link:shadow-gap1 link:foreground-1 link:foreground-10)
declare -A RATE RATIO GAP P50 P99 MAX
for rep in $(seq "$REPS"); do
  for mode in "${MODES[@]}"; do
    args=()
    m=$mode
    if [[ $m == link:* ]]; then
      args+=("${LINK[@]}")
      m=${m#link:}
    fi
    case $m in
      none) args+=(--sync none) ;;
      shadow) args+=(--sync shadow --min-round-gap 4) ;; # the library default
      shadow-gap1) args+=(--sync shadow --min-round-gap 1) ;;
      foreground-*) args+=(--sync foreground --sync-every "${m#foreground-}") ;;
    esac
    out=$(./build/bin/ctr-train --train "out/train-$ROWS.tsv" --max-rows "$USE_ROWS" \
      --test out/test.tsv --max-test-rows 1000 --trainers "$TRAINERS" --workers "$WORKERS" \
      --algo "$ALGO" --final-rounds 0 --progress 0 "${args[@]}")
    record_run "$mode" "$out"
  done
done

echo
echo "sync overhead: rows=$USE_ROWS trainers=$TRAINERS workers=$WORKERS algo=$ALGO reps=$REPS"
echo "medians over reps; ratio = median of (mode / none of the same rep)"
echo "link: = in-process transport emulating ${LINK_US}us one-way latency, ${LINK_GBPS} Gbit/s"
printf '%-22s %12s %10s %14s %13s\n' mode examples/s ratio sync_gap_mean sync_gap_p99
for mode in "${MODES[@]}"; do
  r=$(med "${RATE[$mode]}")
  printf '%-22s %12.0f %10.3f %14s %13s\n' "$mode" "$r" "$(med "${RATIO[$mode]}")" \
    "$(med "${GAP[$mode]}")" "$(med "${P99[$mode]}")"
done
