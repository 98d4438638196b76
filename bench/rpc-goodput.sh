#!/usr/bin/env bash
# (a) One S-EASGD round of a 1M-float and a 10M-float group through one
# shadowsync-ps on loopback, as goodput (snapshot up + delta down per
# second) and as a ratio to iperf3 TCP on loopback measured in the same
# run. iperf3 is Debian's package (installed here if missing). iperf3 runs
# one stream each way at once (--bidir), the same traffic shape as a round.
# The rounds go the default way (a PS and a client on their defaults:
# the PS's bulk stream beside gRPC) and over gRPC only (the client's bulk
# false: what a .proto client gets). Beside each round: the same chunk
# calls to a gRPC echo server (no PS work: shadowsync-bench-rpc --echo),
# gRPC's own ceiling, and the same chunks echoed on one plain socket
# (--tcp-echo), the floor of any path: default_tcp_echo is the default
# path's goodput over that floor's. Each path runs --alternate times
# (default 3), interleaved, and its median counts.
# --tls 1: the PS serves mutual TLS (a throwaway CA, openssl) on gRPC and
# on its bulk stream, and both rounds go over TLS; iperf3 and the echoes
# stay plain, so their ratios say what the encryption costs.
#   bash bench/rpc-goodput.sh
#   bash bench/rpc-goodput.sh --tls 1
#   bash bench/rpc-goodput.sh --shard-map 1   # the PS and the client route by a shard map
#   BENCH_ARGS="--window 2" bash bench/rpc-goodput.sh   # flags of shadowsync-bench-rpc
source "$(dirname "$0")/common.sh"
REPS=${REPS:-20}
TLS=${TLS:-0}
SHARD_MAP=${SHARD_MAP:-0}
if ! command -v iperf3 >/dev/null; then
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get install -y iperf3 >/dev/null
fi
PORT=${PORT:-5299}
# iperf3 moves 20-27 Gbit/s from one run to the next on a shared machine:
# it runs right before and right after each size, and that size's ratio
# is to the mean of the two.
iperf_once() {
  iperf3 -s -1 -p "$PORT" >/dev/null 2>&1 &
  sleep 0.5
  iperf3 -c 127.0.0.1 -p "$PORT" -t 2 --bidir -J | python3 -c '
import json, sys
d = json.load(sys.stdin)["end"]
print((d["sum_sent"]["bits_per_second"] + d["sum_sent_bidir_reverse"]["bits_per_second"]) / 1e9)'
  wait
}
tcp=$(iperf_once)
ps_tls=() bench_tls=()
if [ "$TLS" = 1 ]; then
  mkdir -p out/bench-tls
  bash tests/make_certs.sh out/bench-tls
  c=out/bench-tls
  ps_tls=(--tls-cert $c/server.pem --tls-key $c/server.key --tls-ca $c/ca.pem)
  bench_tls=(--tls-ca $c/ca.pem --tls-cert $c/client.pem --tls-key $c/client.key)
  echo "gRPC and bulk over mutual TLS ($(openssl version | cut -d' ' -f1-2)); iperf3 and the echoes plain"
fi
PS_PORT=0 ps_map=() bench_map=()
if [ "$SHARD_MAP" = 1 ]; then # the map names the PS: its port is picked first
  PS_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  printf 'epoch 1\nps 127.0.0.1:%s\n' "$PS_PORT" >out/bench-rpc.map
  ps_map=(--shard-map out/bench-rpc.map)
  bench_map=(--shard-map out/bench-rpc.map)
  echo "the PS and the client route by a shard map (out/bench-rpc.map, epoch 1)"
fi
./build/bin/shadowsync-ps --listen "127.0.0.1:$PS_PORT" --threads 2 "${ps_tls[@]}" "${ps_map[@]}" >out/bench-ps.log 2>&1 &
ps=$!
trap 'kill $ps 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q listening out/bench-ps.log && break; sleep 0.1; done
addr=$(grep -o 'listening on [0-9.:]*' out/bench-ps.log | awk '{print $3}')
# field VALUE LINE: a key's value in a shadowsync-bench-rpc line
field() { grep -o "$1=[0-9.]*" <<<"$2" | cut -d= -f2; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
echo "iperf3 TCP loopback, both directions at once (--bidir), before and after each size;"
echo "default: the PS and the client on their defaults (the bulk stream); grpc: the client's"
echo "bulk false; echo: a gRPC echo server; tcp_echo: the same chunks echoed on one plain socket"
echo "(the floor of any path)"
printf '%-10s %10s %8s %8s %8s %13s %12s %12s %16s %13s %14s\n' floats default_ms grpc_ms \
  echo_ms tcp_ms default_ratio grpc_ratio echo_ratio default_tcp_echo grpc_tcp_echo iperf3_gbit_s
# median_of CMD...: of ALTERNATE runs of CMD, the line of the median goodput
# (each path runs ALTERNATE times, interleaved with the others, so that the
# machine's drift from one second to the next falls on all of them alike)
ALTERNATE=${ALTERNATE:-3}
median_line() { sort -t= -k2 -n <<<"$1" | sed -n "$(((ALTERNATE + 1) / 2))p"; }
for n in 1048576 10485760; do
  bulk_lines= lines= echo_lines= tcp_lines=
  for _ in $(seq "$ALTERNATE"); do
    b=$(./build/bin/shadowsync-bench-rpc --ps "$addr" --floats "$n" --reps "$REPS" "${bench_tls[@]}" "${bench_map[@]}" ${BENCH_ARGS:-})
    g=$(./build/bin/shadowsync-bench-rpc --ps "$addr" --floats "$n" --reps "$REPS" --bulk false "${bench_tls[@]}" "${bench_map[@]}" ${BENCH_ARGS:-})
    e=$(./build/bin/shadowsync-bench-rpc --echo --floats "$n" --reps "$REPS" ${BENCH_ARGS:-})
    t=$(./build/bin/shadowsync-bench-rpc --tcp-echo --floats "$n" --reps "$REPS")
    bulk_lines+="goodput=$(field goodput_gbit_s "$b") $b"$'\n'
    lines+="goodput=$(field goodput_gbit_s "$g") $g"$'\n'
    echo_lines+="goodput=$(field goodput_gbit_s "$e") $e"$'\n'
    tcp_lines+="goodput=$(field goodput_gbit_s "$t") $t"$'\n'
  done
  bulk_line=$(median_line "${bulk_lines%$'\n'}") line=$(median_line "${lines%$'\n'}")
  echo_line=$(median_line "${echo_lines%$'\n'}") tcp_line=$(median_line "${tcp_lines%$'\n'}")
  after=$(iperf_once)
  mean=$(awk -v a="$tcp" -v b="$after" 'BEGIN {printf "%.2f", (a + b) / 2}')
  gb=$(field goodput_gbit_s "$line") bgb=$(field goodput_gbit_s "$bulk_line")
  egb=$(field goodput_gbit_s "$echo_line") tgb=$(field goodput_gbit_s "$tcp_line")
  printf '%-10s %10s %8s %8s %8s %13s %12s %12s %16s %13s %14s\n' "$n" \
    "$(field round_ms "$bulk_line")" "$(field round_ms "$line")" "$(field round_ms "$echo_line")" \
    "$(field round_ms "$tcp_line")" "$(ratio "$bgb" "$mean")" "$(ratio "$gb" "$mean")" \
    "$(ratio "$egb" "$mean")" "$(ratio "$bgb" "$tgb")" "$(ratio "$gb" "$tgb")" "$mean"
  tcp=$after
done
