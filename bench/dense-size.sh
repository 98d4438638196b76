#!/usr/bin/env bash
# One trainer on the emulated cluster's shaped link (root; 10 Gbit/s, 1 PS
# host, 1 trainer host with its agent), a dense group of 1M and of 16M
# floats: examples/s with background S-EASGD (shadow), foreground K = 1
# and K = 10, each as a ratio to no sync in the same sweep, and the gap.
#   bash bench/dense-size.sh
#   SS_DENSE_SIZES="1048576" SS_DENSE_SECONDS=5 bash bench/dense-size.sh
source "$(dirname "$0")/common.sh"
SIZES=${SS_DENSE_SIZES:-1048576 16777216}
SECS=${SS_DENSE_SECONDS:-10}
field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2}'; }
echo "| dense floats | mode | examples/s | ÷ none | gap p50 | gap p99 | rounds |"
echo "|---|---|---|---|---|---|---|"
for d in $SIZES; do
  for mode in none shadow fg1 fg10; do
    case $mode in
    none) args=(--mode none) ;;
    shadow) args=(--mode background --algo easgd) ;;
    fg*) args=(--mode foreground --algo easgd --sync-every "${mode#fg}") ;;
    esac
    out=$(bash bench/emu-cluster.sh --quiet --ps 1 --hosts 1 --per-host 1 --dense-floats "$d" \
      --seconds "$SECS" "${args[@]}")
    echo "$out" >&2
    rate=$(field "$out" examples/s)
    [ "$mode" != none ] || base=$rate
    printf '| %s | %s | %s | %.3f | %s | %s | %s |\n' "$d" "$mode" "$rate" \
      "$(awk -v a="$rate" -v b="$base" 'BEGIN { print a / b }')" "$(field "$out" gap_p50)" \
      "$(field "$out" gap_p99)" "$(field "$out" rounds)"
  done
done
