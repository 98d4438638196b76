#!/usr/bin/env bash
# A PS 200 ms away (one link's packets held 200 ms by shadowsync-emu-delay
# through NFQUEUE, in two network namespaces this test makes): a trainer
# reaches it and syncs. gRPC core gives a connection attempt at least its
# "min reconnect backoff"; when that was 100 ms, every attempt was cut
# before TCP and HTTP/2 had answered, and the trainer never connected
# (deadline exceeded). Root, as the emulated-cluster tests: fails otherwise.
#   test_long_rtt.sh BIN_DIR
set -euo pipefail
bin=$1
[ "$(id -u)" = 0 ] || { echo "test_long_rtt: needs root (network namespaces)" >&2; exit 1; }
a=ssrtt$$a b=ssrtt$$b tmp=$(mktemp -d)
pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  ip netns del "$a" 2>/dev/null || true
  ip netns del "$b" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$a"
ip netns add "$b"
ip link add "v$a" type veth peer name "v$b"
ip link set "v$a" netns "$a"
ip link set "v$b" netns "$b"
ip -n "$a" addr add 198.18.9.1/24 dev "v$a"
ip -n "$b" addr add 198.18.9.2/24 dev "v$b"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "v$a" up
ip -n "$b" link set "v$b" up
ip netns exec "$b" iptables -t raw -A PREROUTING -i "v$b" -j NFQUEUE --queue-num 0
ip netns exec "$b" "$bin/shadowsync-emu-delay" --delay-us 200000 --queue 0 >"$tmp/delay.log" 2>&1 &
pids+=($!)
(umask 077 && od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$tmp/token")
ip netns exec "$a" env -u SHADOWSYNC_INSECURE_LOOPBACK "$bin/shadowsync-ps" --listen 198.18.9.1:7070 --http "" \
  --auth-token-file "$tmp/token" >"$tmp/ps.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  grep -qs ready "$tmp/delay.log" && grep -qs "listening on" "$tmp/ps.log" && break
  sleep 0.1
done
grep -q "listening on" "$tmp/ps.log" || { cat "$tmp/ps.log" >&2; exit 1; }
grep -q ready "$tmp/delay.log" || { cat "$tmp/delay.log" >&2; exit 1; }
t0=$(date +%s%N)
if ! out=$(SHADOWSYNC_AUTH_TOKEN_FILE=$tmp/token SHADOWSYNC_PS=198.18.9.1:7070 \
  SHADOWSYNC_SYNC=foreground SHADOWSYNC_RPC_TIMEOUT_MS=8000 \
  ip netns exec "$b" "$bin/minimal-trainer" --steps 20 2>&1); then
  echo "test_long_rtt: the trainer did not sync with a PS 200 ms away: $out" >&2
  exit 1
fi
grep -q "rounds=2 " <<<"$out" || { echo "test_long_rtt: $out" >&2; exit 1; }
echo "test_long_rtt: a PS 200 ms away synced in $((($(date +%s%N) - t0) / 1000000)) ms: $out"
