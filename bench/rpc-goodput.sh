#!/usr/bin/env bash
# (a) One S-EASGD round of a 1M-float and a 10M-float group through one
# shadowsync-ps on loopback, as goodput (snapshot up + delta down per
# second) and as a ratio to iperf3 TCP on loopback measured in the same
# run. iperf3 is Debian's package (installed here if missing). iperf3 runs
# one stream each way at once (--bidir), the same traffic shape as a round.
# Beside each round: the same chunk calls to a gRPC echo server (no PS
# work: shadowsync-bench-rpc --echo), gRPC's own ceiling, and the same
# chunks echoed on one plain socket (--tcp-echo), the floor of any path.
#   bash bench/rpc-goodput.sh
#   BENCH_ARGS="--window 2" bash bench/rpc-goodput.sh   # flags of shadowsync-bench-rpc
source "$(dirname "$0")/common.sh"
REPS=${REPS:-20}
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
./build/bin/shadowsync-ps --listen 127.0.0.1:0 --threads 2 >out/bench-ps.log 2>&1 &
ps=$!
trap 'kill $ps 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q listening out/bench-ps.log && break; sleep 0.1; done
addr=$(grep -o 'listening on [0-9.:]*' out/bench-ps.log | awk '{print $3}')
echo "iperf3 TCP loopback, both directions at once (--bidir), before and after each size"
printf '%-10s %10s %16s %14s %12s %14s %12s %16s %12s\n' floats round_ms goodput_gbit_s iperf3_gbit_s ratio_tcp echo_round_ms echo_ratio tcp_echo_round_ms ps_tcp_echo
for n in 1048576 10485760; do
  line=$(./build/bin/shadowsync-bench-rpc --ps "$addr" --floats "$n" --reps "$REPS" ${BENCH_ARGS:-})
  echo_line=$(./build/bin/shadowsync-bench-rpc --echo --floats "$n" --reps "$REPS" ${BENCH_ARGS:-})
  tcp_line=$(./build/bin/shadowsync-bench-rpc --tcp-echo --floats "$n" --reps "$REPS")
  after=$(iperf_once)
  ms=$(grep -o 'round_ms=[0-9.]*' <<<"$line" | cut -d= -f2)
  gb=$(grep -o 'goodput_gbit_s=[0-9.]*' <<<"$line" | cut -d= -f2)
  mean=$(awk -v a="$tcp" -v b="$after" 'BEGIN {printf "%.2f", (a + b) / 2}')
  ems=$(grep -o 'round_ms=[0-9.]*' <<<"$echo_line" | cut -d= -f2)
  egb=$(grep -o 'goodput_gbit_s=[0-9.]*' <<<"$echo_line" | cut -d= -f2)
  tms=$(grep -o 'round_ms=[0-9.]*' <<<"$tcp_line" | cut -d= -f2)
  tgb=$(grep -o 'goodput_gbit_s=[0-9.]*' <<<"$tcp_line" | cut -d= -f2)
  printf '%-10s %10s %16s %14s %12.3f %14s %12.3f %16s %12.3f\n' "$n" "$ms" "$gb" "$mean" \
    "$(awk -v a="$gb" -v b="$mean" 'BEGIN {print a / b}')" "$ems" "$(awk -v a="$egb" -v b="$mean" 'BEGIN {print a / b}')" \
    "$tms" "$(awk -v a="$gb" -v b="$tgb" 'BEGIN {print a / b}')"
  tcp=$after
done
