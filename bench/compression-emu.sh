#!/usr/bin/env bash
# Compressed sync on the emulated multi-host cluster (bench/emu-cluster.sh,
# run as root): where the link is what limits a round, the sync gap should
# shrink with the bytes. For each algorithm and encoding: S PS hosts, H
# trainer hosts x k trainers (each a dense group of D floats, compute
# emulated, an agent per host), every link shaped to RATE. Prints total
# examples/s, the sync gap (median of the trainers' p50, largest p99) and
# rounds per trainer-second, and the gap as a ratio to float32's.
#   bash bench/compression-emu.sh    # PS=1 HOSTS=4 PER_HOST=2 DENSE=4194304 RATE=1gbit SECS=15
set -euo pipefail
source "$(dirname "$0")/help.sh"
bench_flags "$@"
set -- ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}
cd "$(dirname "$0")/.."
PS=${PS:-1} HOSTS=${HOSTS:-4} PER_HOST=${PER_HOST:-2} DENSE=${DENSE:-4194304}
RATE=${RATE:-1gbit} SECS=${SECS:-15} ALGOS=${ALGOS:-easgd ma}
[ "$(id -u)" = 0 ] || { echo "compression-emu: needs root (network namespaces)" >&2; exit 1; }
[ -x build/bin/shadowsync-emu-trainer ] || { echo "compression-emu: build first (cmake --build build)" >&2; exit 1; }

field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2}'; }

echo "compressed sync, emulated: $PS PS, $HOSTS hosts x $PER_HOST trainers, dense $DENSE floats," \
  "links $RATE, $SECS s per run"
printf '%-6s %-5s %12s %8s %8s %14s %10s\n' algo enc examples/s gap_p50 gap_p99 rounds/trainer/s "gap÷f32"
for algo in $ALGOS; do
  base=""
  for enc in f32 fp16 bf16 int8; do
    out=$(bash bench/emu-cluster.sh --ps "$PS" --hosts "$HOSTS" --per-host "$PER_HOST" \
      --dense-floats "$DENSE" --rate "$RATE" --seconds "$SECS" --algo "$algo" --encoding "$enc" \
      --quiet)
    sum=$(grep '^emu-cluster: ps=' <<<"$out")
    echo "$sum" >&2
    n=$(field "$sum" trainers)
    p50=$(field "$sum" gap_p50)
    [ -n "$base" ] || base=$p50
    printf '%-6s %-5s %12s %8s %8s %14.2f %10.3f\n' "$algo" "$enc" "$(field "$sum" examples/s)" "$p50" \
      "$(field "$sum" gap_p99)" "$(awk -v r="$(field "$sum" rounds)" -v n="$n" -v s="$SECS" 'BEGIN {print r / n / s}')" \
      "$(awk -v a="$p50" -v b="$base" 'BEGIN {print (b > 0 ? a / b : 0)}')"
  done
done
