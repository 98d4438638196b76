#!/usr/bin/env bash
# One S-EASGD round of a 1M-float and a 10M-float group through one
# shadowsync-ps across a shaped link of the emulated cluster (root;
# bench/emu-lib.sh): a PS host and a client host, each a network namespace
# with a veth link to the switch, shaped both ways with tc at RATE
# (default 10gbit). Prints goodput (snapshot up + delta down per second)
# as a ratio to iperf3 --bidir between the same two namespaces in the same
# run, and to the link's nominal rate both ways (2 x RATE).
#   bash bench/rpc-goodput-shaped.sh
#   RATE=1gbit REPS=10 bash bench/rpc-goodput-shaped.sh
#   BENCH_ARGS="--window 2 --chunk-floats 131072" bash bench/rpc-goodput-shaped.sh
#   DELAY=2ms bash bench/rpc-goodput-shaped.sh    # latency per link (emu-lib.sh)
# (window: chunk calls in flight per shard at the end; adapted unless
# --window is given.)
source "$(dirname "$0")/common.sh"
REPS=${REPS:-10}
RATE=${RATE:-10gbit} DELAY=${DELAY:-0} LOSS=0 QUIET=1
EMU=rpc-goodput-shaped
source bench/emu-lib.sh
[ "$(id -u)" = 0 ] || die "needs root: it creates network namespaces"
command -v iperf3 >/dev/null || apt-get install -y iperf3 >/dev/null
BIN=$PWD/build/bin
emu_init
add_host "$ID-p0" 198.18.1.1
add_host "$ID-c0" 198.18.2.1
# iperf3 between the two namespaces, right before and right after each
# size; that size's ratio is to the mean of the two (it moves from run to
# run on a shared machine).
iperf_once() {
  ip netns exec "$ID-p0" iperf3 -s -1 -p 5299 >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  ip netns exec "$ID-c0" iperf3 -c 198.18.1.1 -p 5299 -t 2 --bidir -J | python3 -c '
import json, sys
d = json.load(sys.stdin)["end"]
print((d["sum_sent"]["bits_per_second"] + d["sum_sent_bidir_reverse"]["bits_per_second"]) / 1e9)'
  wait "$srv" 2>/dev/null || true
}
tcp=$(iperf_once)
ip netns exec "$ID-p0" env -u SHADOWSYNC_INSECURE_LOOPBACK "$BIN/shadowsync-ps" --listen 198.18.1.1:7070 --http "" --threads 2 \
  --auth-token-file "$TMP/token" >"$TMP/ps.log" 2>&1 &
PIDS+=($!)
wait_line "$TMP/ps.log" "listening on" $!
nominal=$(awk -v b="$(tc_rate_bits "$RATE")" 'BEGIN { print 2 * b / 1e9 }')
echo "link $RATE each way (nominal both ways: $nominal Gbit/s); iperf3 --bidir across it before and after each size"
printf '%-10s %10s %16s %14s %12s %14s %7s\n' floats round_ms goodput_gbit_s iperf3_gbit_s ratio_iperf3 ratio_nominal window
for n in 1048576 10485760; do
  line=$(ip netns exec "$ID-c0" "$BIN/shadowsync-bench-rpc" --ps 198.18.1.1:7070 --floats "$n" --reps "$REPS" ${BENCH_ARGS:-})
  after=$(iperf_once)
  ms=$(grep -o 'round_ms=[0-9.]*' <<<"$line" | cut -d= -f2)
  gb=$(grep -o 'goodput_gbit_s=[0-9.]*' <<<"$line" | cut -d= -f2)
  mean=$(awk -v a="$tcp" -v b="$after" 'BEGIN {printf "%.2f", (a + b) / 2}')
  printf '%-10s %10s %16s %14s %12.3f %14.3f %7s\n' "$n" "$ms" "$gb" "$mean" "$(awk -v a="$gb" -v b="$mean" 'BEGIN {print a / b}')" \
    "$(awk -v a="$gb" -v b="$nominal" 'BEGIN {print a / b}')" "$(grep -o 'window=[0-9]*' <<<"$line" | cut -d= -f2)"
  tcp=$after
done
