#!/usr/bin/env bash
# Compressed row sync of cached embedding tables (emb_encoding): bytes on
# the wire per synced row, and model quality, of each encoding against
# float32, at equal examples.
#
# For each encoding, REPS times: a fresh shadowsync-ps on 127.0.0.1 and
# TRAINERS ctr-train processes (--emb cached, dense S-EASGD in float32
# through the same PS; one pass over USE_ROWS rows, each process its
# share). Bytes per row: the PS's Embedding/Elastic request + reply bytes
# (its /metrics, gRPC's and protobuf's framing in it) over the rows those
# calls synced (shadowsync_emb_updates_total{kind="elastic"}). NE: held-out
# NE of every process, averaged; the ratio is to float32's in the same rep.
#   bash bench/emb-compression.sh        # REPS=3 USE_ROWS=200000 TRAINERS=4 EMB_DIM=8
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-1000000}
USE_ROWS=${USE_ROWS:-200000}
TRAINERS=${TRAINERS:-4}
REPS=${REPS:-3}
EMB_DIM=${EMB_DIM:-8} # ctr-train's default; the row's bytes grow with it, the ids' do not
ENCODINGS=(f32 fp16 bf16 int8)
make_data "$ROWS"

bench_ps_trap

# bytes per synced row (request + reply), and the rows
ps_bytes_per_row() {
  local b n
  b=$(bench_metric_sum "$ps_http" '^shadowsync_rpc_(received|sent)_bytes_total[{]method="/shadowsync.v1.Embedding/Elastic"')
  n=$(bench_metric_sum "$ps_http" '^shadowsync_emb_updates_total[{].*kind="elastic"')
  awk -v b="$b" -v n="$n" 'BEGIN {printf "%.1f %d\n", n ? b / n : 0, n}'
}

run_cluster() { # encoding -> prints "ne examples_per_s failed_rounds"
  bench_trainers out/bench-embc --ps "$addr" --algo easgd --emb cached --emb-dim "$EMB_DIM" --emb-encoding "$1"
}

echo "compressed row sync: $TRAINERS ctr-train processes (--emb cached, dim $EMB_DIM), one" \
  "shadowsync-ps on 127.0.0.1, $USE_ROWS rows once, $REPS reps (medians)"
printf '%-5s %12s %8s %10s %10s %12s\n' enc bytes/row ratio NE "NE ratio" examples/s
declare -A BYTES=() NE=() NER=() RATE=()
for rep in $(seq "$REPS"); do
  bench_encoding_rep out/bench-embc-ps.log run_cluster ps_bytes_per_row "rep $rep"
done
bench_encoding_table '%-5s %12.1f %8.3f %10.5f %10.4f %12.0f\n'
