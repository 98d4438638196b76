#!/usr/bin/env bash
# What does syncing cost the workers? Runs ctr-train with --sync none,
# shadow, and foreground at K=1 and K=10 in one run, REPS times each in
# interleaved order, and prints the median examples/s of each as a ratio
# to `none`, with the sync gap. Default: 1 trainer with 1 worker, so on a
# 2-core machine the shadow thread has the other core to itself.
#   bash bench/sync-overhead.sh
#   ALGO=ma TRAINERS=2 REPS=5 bash bench/sync-overhead.sh
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-1000000}
REPS=${REPS:-3}
ALGO=${ALGO:-easgd}
TRAINERS=${TRAINERS:-1}
WORKERS=${WORKERS:-1}
make_data "$ROWS"

declare -A RATE GAP P99 NE
MODES=("none" "shadow" "foreground-1" "foreground-10")
for rep in $(seq "$REPS"); do
  for mode in "${MODES[@]}"; do
    case $mode in
      none) args=(--sync none) ;;
      shadow) args=(--sync shadow) ;;
      foreground-*) args=(--sync foreground --sync-every "${mode#foreground-}") ;;
    esac
    out=$(./build/tools/ctr-train --train "out/train-$ROWS.tsv" --test out/test.tsv \
      --max-test-rows 20000 --trainers "$TRAINERS" --workers "$WORKERS" --algo "$ALGO" \
      --final-rounds 0 --progress 0 "${args[@]}")
    RATE[$mode]+="$(summary_field "$out" examples/s) "
    GAP[$mode]+="$(summary_field "$out" sync_gap_mean) "
    P99[$mode]+="$(summary_field "$out" sync_gap_p99) "
    NE[$mode]+="$(summary_field "$out" ne) "
    echo "rep $rep $mode: examples/s=$(summary_field "$out" examples/s)" >&2
  done
done

base=$(tr ' ' '\n' <<<"${RATE[none]}" | grep . | median)
echo
echo "sync overhead: rows=$ROWS trainers=$TRAINERS workers=$WORKERS algo=$ALGO reps=$REPS (medians)"
printf '%-16s %12s %10s %14s %13s %8s\n' mode examples/s ratio sync_gap_mean sync_gap_p99 ne
for mode in "${MODES[@]}"; do
  r=$(tr ' ' '\n' <<<"${RATE[$mode]}" | grep . | median)
  g=$(tr ' ' '\n' <<<"${GAP[$mode]}" | grep . | median)
  p=$(tr ' ' '\n' <<<"${P99[$mode]}" | grep . | median)
  n=$(tr ' ' '\n' <<<"${NE[$mode]}" | grep . | median)
  printf '%-16s %12.0f %10.3f %14s %13s %8s\n' "$mode" "$r" "$(awk -v a="$r" -v b="$base" 'BEGIN {print a / b}')" "$g" "$p" "$n"
done
