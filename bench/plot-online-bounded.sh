#!/usr/bin/env bash
# Plots out/online-bounded.tsv (bench/online-bounded.sh) with gnuplot
# (Debian: gnuplot-nox): docs/online-bounded.png, the PS's live rows and
# RSS against the examples trained, unbounded and bounded.
set -euo pipefail
source "$(dirname "$0")/help.sh"
bench_flags "$@"
set -- ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}
cd "$(dirname "$0")/.."
command -v gnuplot >/dev/null || { echo "plot-online-bounded: needs gnuplot (apt-get install gnuplot-nox)" >&2; exit 1; }
TSV=${1:-out/online-bounded.tsv}
[ -s "$TSV" ] || { echo "plot-online-bounded: no $TSV (run bench/online-bounded.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for m in unbounded bounded; do
  awk -F'\t' -v m="$m" 'NR > 1 && $1 == m && $5 > 0 {print $5 / 1e6, $4, $3}' "$TSV" >"$tmp/$m.dat"
done
gnuplot <<GP
set terminal pngcairo size 1100,450 noenhanced
set output 'docs/online-bounded.png'
set multiplot layout 1,2 title 'A drifting stream through the PS shards, unbounded and bounded tables: bench/online-bounded.sh'
set xlabel 'examples trained (millions)'
set ylabel 'live embedding rows'
set key top left
plot '$tmp/unbounded.dat' using 1:2 with lines title 'unbounded', '$tmp/bounded.dat' using 1:2 with lines title 'bounded'
set ylabel 'PS RSS (MiB)'
plot '$tmp/unbounded.dat' using 1:3 with lines title 'unbounded', '$tmp/bounded.dat' using 1:3 with lines title 'bounded'
unset multiplot
GP
echo "plot-online-bounded: docs/online-bounded.png"
