#!/usr/bin/env bash
# Compressed sync (shadow/codec.h): bytes on the wire per round and model
# quality of each encoding against float32, at equal examples.
#
# For each algorithm and encoding, REPS times: a fresh shadowsync-ps on
# 127.0.0.1 and TRAINERS ctr-train processes syncing through it (--ps, one
# pass over USE_ROWS rows, each process its share; 10 final rounds). Bytes
# per round: the PS's DenseSync request + reply bytes (its /metrics) over
# the exchanges and rounds it served, so gRPC's and protobuf's framing is
# in it. NE: held-out NE of every process's replica, averaged; the ratio is
# to float32's in the same rep.
#   bash bench/compression.sh            # REPS=3 USE_ROWS=400000 TRAINERS=4
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-1000000}
USE_ROWS=${USE_ROWS:-400000}
TRAINERS=${TRAINERS:-4}
REPS=${REPS:-3}
ALGOS=${ALGOS:-easgd ma bmuf}
ENCODINGS=(f32 fp16 bf16 int8)
make_data "$ROWS"

bench_ps_trap

# bytes per served exchange or round, request + reply
ps_bytes_per_round() {
  local m='shadowsync.v1.DenseSync/(EasgdExchange|RoundMean)"'
  local b n
  b=$(bench_metric_sum "$ps_http" "^shadowsync_rpc_(received|sent)_bytes_total[{]method=\"/$m")
  n=$(bench_metric_sum "$ps_http" "^shadowsync_rpc_requests_total[{]method=\"/$m,result=\"ok\"")
  awk -v b="$b" -v n="$n" 'BEGIN {printf "%.0f %d\n", n ? b / n : 0, n}'
}

run_cluster() { # encoding (of $algo) -> prints "ne examples_per_s failed_rounds"
  bench_trainers out/bench-comp --ps "$addr" --algo "$algo" --encoding "$1"
}

echo "compressed sync: $TRAINERS ctr-train processes, one shadowsync-ps on 127.0.0.1," \
  "$USE_ROWS rows once, $REPS reps (medians)"
printf '%-6s %-5s %14s %10s %10s %10s %12s\n' algo enc bytes/round ratio NE "NE ratio" examples/s
for algo in $ALGOS; do
  declare -A BYTES=() NE=() NER=() RATE=()
  for rep in $(seq "$REPS"); do
    bench_encoding_rep out/bench-comp-ps.log run_cluster ps_bytes_per_round "rep $rep $algo"
  done
  bench_encoding_table '%-6s %-5s %14.0f %10.3f %10.5f %10.4f %12.0f\n' "$algo"
done
