#!/usr/bin/env bash
# The simulator against the emulated cluster: for every row of a scaling
# TSV (bench/scaling.sh), runs shadowsync-sim with the same trainers, PS,
# mode and dense size on one machine of this many cores (--shared-cores,
# as the emulated cluster is), calibrated by bench/sim-calibrate.sh, and
# prints measured and simulated examples/s and sync gap (p50) side by side
# with the relative error of each, then the mean and largest error.
#   bash bench/sim-validate.sh                          # the defaults below
#   bash bench/sim-validate.sh bench/results/scaling-paced.tsv bench/results/sim-calibration.txt
source "$(dirname "$0")/common.sh"
TSV=${1:-bench/results/scaling-paced.tsv}
CAL=${2:-bench/results/sim-calibration.txt}
DENSE=${SS_VALIDATE_DENSE:-1048576}
CORES=${SS_VALIDATE_CORES:-$(nproc)}
SIM=$(mktemp)
trap 'rm -f "$SIM" "$SIM.rows"' EXIT
printf 'ps\tn\tmode\texamples_s\tper_trainer\tmin_trainer\tgap_p50\tgap_p99\tgap_max\trounds\tfailed\n' >"$SIM"
for ps in $(awk -F'\t' 'NR > 1 { print $1 }' "$TSV" | sort -un); do
  for mode in $(awk -F'\t' -v ps="$ps" 'NR > 1 && $1 == ps { print $3 }' "$TSV" | awk '!seen[$0]++'); do
    ns=$(awk -F'\t' -v ps="$ps" -v m="$mode" 'NR > 1 && $1 == ps && $3 == m { print $2 }' "$TSV" | sort -un | paste -sd,)
    ./build/bin/shadowsync-sim --ps "$ps" --trainers "$ns" --modes "$mode" --dense-floats "$DENSE" \
      --shared-cores "$CORES" --calibration "$CAL" --tsv "$SIM.rows" >/dev/null
    tail -n +2 "$SIM.rows" >>"$SIM"
  done
done
echo "sim-validate: $TSV against shadowsync-sim --shared-cores $CORES --calibration $CAL"
awk -F'\t' '
  FNR == 1 { file++; next }
  file == 1 { key = $1 " " $2 " " $3; mx[key] = $4; mg[key] = $7; order[++n] = key }
  file == 2 { key = $1 " " $2 " " $3; sx[key] = $4; sg[key] = $7 }
  function err(s, m) { return m > 0 ? (s - m) / m : 0 }
  function abs(v) { return v < 0 ? -v : v }
  END {
    print "| PS | N | mode | examples/s measured | simulated | error | gap p50 measured | simulated | error |"
    print "|---|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) {
      k = order[i]; split(k, f, " ")
      ex = err(sx[k], mx[k]); eg = err(sg[k], mg[k])
      printf "| %s | %s | %s | %.0f | %.0f | %+.1f%% | %s | %s | %s |\n", f[1], f[2], f[3], mx[k], sx[k], 100 * ex, mg[k], sg[k], (mg[k] > 0 ? sprintf("%+.1f%%", 100 * eg) : "-")
      tx += abs(ex); if (abs(ex) > mxx) mxx = abs(ex)
      if (mg[k] > 0) { ng++; tg += abs(eg); if (abs(eg) > mxg) mxg = abs(eg); if (abs(eg) <= 0.15) okg++ }
    }
    printf "sim-validate: rows=%d examples_err_mean=%.1f%% examples_err_max=%.1f%% gap_p50_err_mean=%.1f%% gap_p50_err_max=%.1f%% gap_rows_within_15%%=%d/%d\n",
      n, 100 * tx / n, 100 * mxx, ng ? 100 * tg / ng : 0, 100 * mxg, okg, ng
  }' "$TSV" "$SIM"
