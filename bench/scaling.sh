#!/usr/bin/env bash
# The scaling curve on the emulated cluster (bench/emu-cluster.sh, root):
# total examples/s and the sync gap against N trainers, for a fixed number
# of PS hosts, for each sync mode. Trainers sit 8 to a host (fewer when
# N < 8). Writes out/scaling.tsv (one row per run) and prints a table with
# each run's scaling efficiency: total examples/s / (N x one trainer's
# examples/s without sync, measured in the same sweep).
#   bash bench/scaling.sh                       # N = 1..64, PS = 1 and 4
#   SS_SCALING_N="1 4" SS_SCALING_PS=1 SS_SCALING_SECONDS=5 bash bench/scaling.sh
# (also SS_SCALING_MODES, SS_SCALING_DENSE, SS_SCALING_STEP_US,
# SS_SCALING_NICE: PS and agents' nice level, SS_SCALING_COMPUTE: paced,
# sleep or spin (see shadowsync-emu-trainer --help), SS_SCALING_TSV, and
# SS_SCALING_APPEND=1 to add rows to an existing TSV)
# Then: bash bench/plot-scaling.sh (PNG plots into docs/).
source "$(dirname "$0")/common.sh"
NS=${SS_SCALING_N:-1 2 4 8 16 32 64}
PSS=${SS_SCALING_PS:-1 4}
SECS=${SS_SCALING_SECONDS:-10}
DENSE=${SS_SCALING_DENSE:-1048576}
STEP_US=${SS_SCALING_STEP_US:-10000}
MODES=${SS_SCALING_MODES:-none easgd ma bmuf fg1 fg10}
TSV=${SS_SCALING_TSV:-out/scaling.tsv}
NICE=${SS_SCALING_NICE:-0}
COMPUTE=${SS_SCALING_COMPUTE:-paced}
[ "${SS_SCALING_APPEND:-0}" = 1 ] && [ -s "$TSV" ] || printf 'ps\tn\tmode\texamples_s\tper_trainer\tmin_trainer\tgap_p50\tgap_p99\tgap_max\trounds\tfailed\n' >"$TSV"
echo "scaling: N in {$NS}, PS in {$PSS}, modes {$MODES}, dense $DENSE floats, step $STEP_US us, $SECS s each" >&2
field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2}'; }
for ps in $PSS; do
  for n in $NS; do
    per=$((n < 8 ? n : 8))
    hosts=$(((n + per - 1) / per))
    for mode in $MODES; do
      case $mode in
      none) args=(--mode none) ;;
      easgd | ma | bmuf) args=(--mode background --algo "$mode") ;;
      fg*) args=(--mode foreground --algo easgd --sync-every "${mode#fg}") ;;
      esac
      out=$(bash bench/emu-cluster.sh --quiet --ps "$ps" --hosts "$hosts" --per-host "$per" \
        --dense-floats "$DENSE" --seconds "$SECS" --step-us "$STEP_US" --sync-nice "$NICE" --compute "$COMPUTE" \
        "${args[@]}")
      echo "$out" >&2
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$ps" "$n" "$mode" \
        "$(field "$out" examples/s)" "$(field "$out" per_trainer)" "$(field "$out" min_trainer)" \
        "$(field "$out" gap_p50)" "$(field "$out" gap_p99)" "$(field "$out" gap_max)" \
        "$(field "$out" rounds)" "$(field "$out" failed)" >>"$TSV"
    done
  done
done
# Efficiency against N x the 1-trainer, no-sync rate of the same PS count.
awk -F'\t' 'NR == 1 { next }
  $3 == "none" && $2 == 1 { base[$1] = $4 }
  { row[NR] = $0 }
  END {
    print "| PS | N | mode | examples/s | per trainer | efficiency | gap p50 | gap p99 | gap max |"
    print "|---|---|---|---|---|---|---|---|---|"
    for (i = 2; i <= NR; i++) {
      split(row[i], f, "\t")
      eff = base[f[1]] ? f[4] / (f[2] * base[f[1]]) : 0
      printf "| %s | %s | %s | %.0f | %.0f | %.3f | %s | %s | %s |\n", f[1], f[2], f[3], f[4], f[5], eff, f[7], f[8], f[9]
    }
  }' "$TSV"
echo "scaling: rows in $TSV" >&2
