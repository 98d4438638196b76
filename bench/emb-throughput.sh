#!/usr/bin/env bash
# Batched embedding lookups/s and gradient pushes/s (batch 4096, dim 64,
# 1M rows) through one shadowsync-ps shard the default way (the PS and
# the client on their defaults: its bulk stream) and over gRPC only, as
# ratios to the same
# operations on the in-process store (the limit), to the same store behind a
# plain loopback TCP socket (one request and reply at a time: the floor of
# any serial remote lookup here) and to a Redis server on
# loopback holding the same rows (MGET / MSET), all in one run; plus the
# memory per million rows (in-process store, the PS process, Redis).
# The line to read: "ratio default/inproc: lookups X pushes Y".
# --tls 1: the PS serves mutual TLS (a throwaway CA) and both paths go
# over it; --shard-map 1: the PS and the client route by a shard map.
# redis-server is Debian's package (installed here if missing).
#   bash bench/emb-throughput.sh
source "$(dirname "$0")/common.sh"
REPS=${REPS:-200}
ROWS=${ROWS:-1000000}
if ! command -v redis-server >/dev/null; then
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get install -y redis-server >/dev/null
fi
RPORT=${RPORT:-6399}
redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no >out/bench-redis.log 2>&1 &
redis=$!
TLS=${TLS:-0}
SHARD_MAP=${SHARD_MAP:-0}
ps_flags=() emb_flags=()
if [ "$TLS" = 1 ]; then
  mkdir -p out/bench-tls
  bash tests/make_certs.sh out/bench-tls
  c=out/bench-tls
  ps_flags+=(--tls-cert $c/server.pem --tls-key $c/server.key --tls-ca $c/ca.pem)
  emb_flags+=(--tls-ca $c/ca.pem --tls-cert $c/client.pem --tls-key $c/client.key)
fi
PS_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if [ "$SHARD_MAP" = 1 ]; then
  printf 'epoch 1\nps 127.0.0.1:%s\n' "$PS_PORT" >out/bench-emb.map
  ps_flags+=(--shard-map out/bench-emb.map)
  emb_flags+=(--shard-map out/bench-emb.map)
fi
./build/bin/shadowsync-ps --listen "127.0.0.1:$PS_PORT" --threads 2 "${ps_flags[@]}" >out/bench-ps.log 2>&1 &
ps=$!
trap 'kill $ps $redis 2>/dev/null; wait $ps $redis 2>/dev/null || true' EXIT # the next run binds the same port
for _ in $(seq 50); do grep -q listening out/bench-ps.log && break; sleep 0.1; done
addr=$(grep -o 'listening on [0-9.:]*' out/bench-ps.log | awk '{print $3}')
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
ps0=$(rss $ps)
./build/bin/shadowsync-bench-emb --ps "$addr" --redis "127.0.0.1:$RPORT" --rows "$ROWS" \
  --batch 4096 --dim 64 --reps "$REPS" "${emb_flags[@]}"
ps1=$(rss $ps)
rused=$(redis-cli -p "$RPORT" info memory | awk -F: '/^used_memory:/ {print $2}' | tr -d '\r')
awk -v a="$ps0" -v b="$ps1" -v r="$ROWS" 'BEGIN {
  printf "memory: shadowsync-ps process RSS +%.1f MiB for %d rows = %.1f B/row (raw 256 B/row: x%.2f)\n",
         (b - a) / 1024, r, (b - a) * 1024 / r, (b - a) * 1024 / r / 256 }'
awk -v u="$rused" -v r="$ROWS" 'BEGIN {
  printf "memory: redis used_memory %.1f MiB for %d rows = %.1f B/row (x%.2f)\n",
         u / 1048576, r, u / r, u / r / 256 }'
