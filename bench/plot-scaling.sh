#!/usr/bin/env bash
# Plots out/scaling.tsv (bench/scaling.sh) with gnuplot (Debian: gnuplot-nox):
# docs/<NAME>-ps<S>.png (NAME: second argument, default scaling), total examples/s and median sync gap against N
# trainers for each mode, one file per PS count.
set -euo pipefail
source "$(dirname "$0")/help.sh"
bench_flags "$@"
set -- ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}
cd "$(dirname "$0")/.."
command -v gnuplot >/dev/null || { echo "plot-scaling: needs gnuplot (apt-get install gnuplot-nox)" >&2; exit 1; }
TSV=${1:-out/scaling.tsv}
NAME=${2:-scaling} # docs/<NAME>-ps<S>.png
[ -s "$TSV" ] || { echo "plot-scaling: no $TSV (run bench/scaling.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ps in $(awk -F'\t' 'NR > 1 {print $1}' "$TSV" | sort -un); do
  modes=$(awk -F'\t' -v ps="$ps" 'NR > 1 && $1 == ps {print $3}' "$TSV" | awk '!seen[$0]++')
  plots= gaps=
  for m in $modes; do
    awk -F'\t' -v ps="$ps" -v m="$m" 'NR > 1 && $1 == ps && $3 == m {print $2, $4, $7}' "$TSV" >"$tmp/$m.dat"
    plots+="${plots:+, }'$tmp/$m.dat' using 1:2 with linespoints title '$m'"
    [ "$m" = none ] || gaps+="${gaps:+, }'$tmp/$m.dat' using 1:(\$3 > 0 ? \$3 : 1/0) with linespoints title '$m'"
  done
  base=$(awk -F'\t' -v ps="$ps" 'NR > 1 && $1 == ps && $3 == "none" && $2 == 1 {print $4}' "$TSV")
  [ -z "$base" ] || plots+=", x * $base with lines dashtype 2 title 'linear (N x 1 trainer, no sync)'"
  gnuplot <<GP
set terminal pngcairo size 1100,450 noenhanced
set output 'docs/$NAME-ps$ps.png'
set multiplot layout 1,2 title 'Emulated cluster, $ps PS host(s), $(basename "$TSV"): bench/scaling.sh'
set logscale x 2
set logscale y
set key top left
set grid
set xlabel 'trainers (N)'
set ylabel 'total examples/s'
plot $plots
set ylabel 'sync gap p50 (steps between rounds)'
plot $gaps
unset multiplot
GP
  echo "plot-scaling: docs/$NAME-ps$ps.png"
done
