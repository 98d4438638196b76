#!/usr/bin/env bash
# Plots the PS paths against ring gossip and aggregation trees on the
# emulated shapes with gnuplot (Debian: gnuplot-nox): docs/decentralized.png,
# the median sync gap (bench/decentralized.sh part (b)) and the held-out NE
# (part (c), the mean of its runs, "none" as a line) per shape and setup.
#   bash bench/plot-decentralized.sh [bench/results/decentralized-shapes.tsv]
# The TSV: shape, setup, gap_p50, gap_p99, then one NE column per run.
set -euo pipefail
source "$(dirname "$0")/help.sh"
bench_flags "$@"
set -- ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}
cd "$(dirname "$0")/.."
command -v gnuplot >/dev/null || { echo "plot-decentralized: needs gnuplot (apt-get install gnuplot-nox)" >&2; exit 1; }
TSV=${1:-bench/results/decentralized-shapes.tsv}
[ -s "$TSV" ] || { echo "plot-decentralized: no $TSV" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
SETUPS="ps-easgd ps-ma peers-ma peers-tree"
# One row per shape, one column per setup: the gap, and the NE's mean.
pivot() { # COLUMN-EXPRESSION (awk, on the TSV's fields) -> stdout
  awk -F'\t' -v setups="$SETUPS" "
    /^#/ { next }
    { if (!(\$1 in seen)) { seen[\$1] = 1; order[++n] = \$1 }
      v[\$1, \$2] = $1 }
    END { k = split(setups, s, \" \")
          for (i = 1; i <= n; i++) { line = order[i]
            for (j = 1; j <= k; j++) line = line \"\\t\" v[order[i], s[j]]
            print line } }" "$TSV"
}
pivot '$3' >"$tmp/gap.dat"
pivot '($5 + $6) / 2' >"$tmp/ne.dat"
none=$(awk -F'\t' '!/^#/ && $2 == "none" {print ($5 + $6) / 2; exit}' "$TSV")
# The first setup's bars carry the shapes' names on the x axis.
bars=
i=2
for s in $SETUPS; do
  x=
  [ $i != 2 ] || x=':xtic(1)'
  bars+="${bars:+, }'DATA' using $i$x title '$s'"
  i=$((i + 1))
done
gnuplot <<GP
set terminal pngcairo size 1200,500 noenhanced
set output 'docs/decentralized.png'
set multiplot layout 1,2 title 'PS against ring gossip and trees on emulated shapes (bench/decentralized.sh)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set key top center horizontal outside
set yrange [0:*]
set grid ytics
set xtics rotate by -20
set ylabel 'sync gap p50 (steps), 8 trainers of 4M floats'
plot ${bars//DATA/$tmp/gap.dat}
set ylabel 'held-out NE (lower is better), 4 ctr-train processes'
set yrange [0.900:0.920]
plot ${bars//DATA/$tmp/ne.dat}, $none with lines dashtype 2 lw 2 lc rgb 'black' title 'no sync'
unset multiplot
GP
echo "plot-decentralized: docs/decentralized.png"
