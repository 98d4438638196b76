#!/usr/bin/env bash
# TLS and mutual TLS between trainers and shadowsync-ps: a throwaway CA
# signs a server, a trainer ("client") and a dashboard ("reader")
# certificate (openssl); a PS that demands client certificates serves a
# trainer that has one, and refuses a trainer without one and a plain-TCP
# trainer. A PS with --tls-writers lets the trainer's identity change
# state and keeps the dashboard's read-only (a Python gRPC client makes
# the raw calls), counting each refusal.
#   test_tls.sh PS_BINARY TRAINER_BINARY
set -euo pipefail
ps_bin=$1
trainer=$2
tmp=$(mktemp -d)
pid=
pid2=
pid3=
trap 'for p in $pid $pid2 $pid3; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
# A step that fails says which, with the last output and the PS's logs
# (the ASan run once failed here with no word).
out=
trap 'echo "test_tls: failed at line $LINENO: $BASH_COMMAND" >&2; echo "last output: $out" >&2;
      cat ps.log ps2.log ps3.log 2>/dev/null | tail -20 >&2' ERR
# Every program run to its end gets 60 s, so a hang fails at its line,
# with the ERR trap's word, instead of at ctest's timeout with none (the
# ASan run once timed out here: a trainer's exit raced gRPC's clean-up,
# rpc/library.c). A refusal must be a refusal, not a program killed.
bounded() { timeout -k 5 60 "$@"; }
# A program that must be refused: it exits with status want (1: a trainer
# the PS turned away, or a PS that cannot read a file; 2: a PS refusing
# its flags) and says pattern; not crashed (an abort is 134) and not
# killed at its bound.
must_refuse() { # want pattern what command...
  local want=$1 pattern=$2 what=$3 rc=0
  shift 3
  out=$(bounded "$@" 2>&1) || rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "test_tls: $what: exit status $rc (want $want) saying: $out" >&2
    exit 1
  fi
  echo "$what: refused ($(grep -m1 -- "$pattern" <<<"$out"))"
}
bash "$(dirname "$0")/make_certs.sh" "$tmp"
cd "$tmp"

"$ps_bin" --listen 127.0.0.1:0 --http "" --tls-cert server.pem --tls-key server.key --tls-ca ca.pem >ps.log 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q listening ps.log && break; sleep 0.1; done
grep -q "(mutual TLS)" ps.log
port=$(grep -o 'listening on [0-9.]*:[0-9]*' ps.log | cut -d: -f2)
export SHADOWSYNC_PS=localhost:$port SHADOWSYNC_RPC_TIMEOUT_MS=3000 SHADOWSYNC_SYNC=foreground

out=$(SHADOWSYNC_TLS_CA=ca.pem SHADOWSYNC_TLS_CERT=client.pem SHADOWSYNC_TLS_KEY=client.key \
  bounded "$trainer" --steps 200 2>&1)
echo "with a client certificate: $out"
grep -q "rounds=20 " <<<"$out"

SHADOWSYNC_TLS_CA=ca.pem must_refuse 1 "TCP connects, but no gRPC connection" "without a client certificate" "$trainer" --steps 200
must_refuse 1 "TCP connects, but no gRPC connection" "plain TCP" "$trainer" --steps 200
# A missing PEM file is a clear error at start, not a silent plain server;
# --tls-writers without mutual TLS, or a bad list: refused at start.
must_refuse 1 "cannot read the PEM file nope.pem" "a PS with a missing certificate" \
  "$ps_bin" --listen 127.0.0.1:0 --tls-cert nope.pem --tls-key server.key
must_refuse 2 "needs mutual TLS" "a PS with --tls-writers and no --tls-ca" \
  "$ps_bin" --listen 127.0.0.1:0 --tls-writers a
must_refuse 2 "empty identity" "a PS with an empty writer identity" \
  "$ps_bin" --listen 127.0.0.1:0 --tls-cert server.pem --tls-key server.key --tls-ca ca.pem \
  --tls-writers 'a,,b'

# Writers by certificate identity: the trainer's SAN may write, the
# dashboard's certificate (same CA) may only read.
"$ps_bin" --listen 127.0.0.1:0 --http 127.0.0.1:0 --tls-cert server.pem --tls-key server.key \
  --tls-ca ca.pem --tls-writers nobody.test,trainer.shadowsync.test >ps2.log 2>&1 &
pid2=$!
for _ in $(seq 100); do grep -q listening ps2.log && break; sleep 0.1; done
grep -q "(mutual TLS; writers nobody.test,trainer.shadowsync.test)" ps2.log
port2=$(grep -o 'listening on [0-9.]*:[0-9]*' ps2.log | cut -d: -f2)
http2=$(grep -o 'http on [0-9.]*:[0-9]*' ps2.log | cut -d' ' -f3)
out=$(SHADOWSYNC_PS=localhost:$port2 SHADOWSYNC_TLS_CA=ca.pem SHADOWSYNC_TLS_CERT=client.pem \
  SHADOWSYNC_TLS_KEY=client.key bounded "$trainer" --steps 200 2>&1)
echo "writer certificate: $out"
grep -q "rounds=20 " <<<"$out"
SHADOWSYNC_PS=localhost:$port2 SHADOWSYNC_TLS_CA=ca.pem SHADOWSYNC_TLS_CERT=reader.pem \
  SHADOWSYNC_TLS_KEY=reader.key must_refuse 1 "may only read" "read-only certificate, trainer" "$trainer" --steps 200
# Raw calls, as another client would make them: the reader may call
# ReadCentral (answered, not PERMISSION_DENIED), not Join; the writer may.
/usr/bin/python3 - "$port2" <<'PY'
import sys, grpc
port = sys.argv[1]
def code(cert, method):
    creds = grpc.ssl_channel_credentials(open("ca.pem", "rb").read(), open(cert + ".key", "rb").read(),
                                         open(cert + ".pem", "rb").read())
    with grpc.secure_channel(f"localhost:{port}", creds) as ch:
        try:
            ch.unary_unary(f"/shadowsync.v1.DenseSync/{method}")(b"", timeout=10)
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            return e.code(), e.details()
got = {(c, m): code(c, m) for c in ("reader", "client") for m in ("ReadCentral", "Join")}
for k, v in got.items():
    print(f"  {k[0]} {k[1]}: {v[0].name} {v[1]}")
assert got[("reader", "Join")][0] == grpc.StatusCode.PERMISSION_DENIED, got
assert "may only read" in got[("reader", "Join")][1], got
assert got[("reader", "ReadCentral")][0] != grpc.StatusCode.PERMISSION_DENIED, got
assert got[("client", "Join")][0] != grpc.StatusCode.PERMISSION_DENIED, got
PY
refused=$(curl -s --max-time 10 "http://$http2/metrics" | awk '/^shadowsync_rpc_unauthorized_total/ {print $2}')
echo "read-only certificate refusals counted: $refused"
[ "${refused:-0}" -ge 2 ]

# The bulk stream under TLS, on the defaults: a PS with mutual TLS (its bulk
# port beside --listen) gives a trainer (bulk on) a ticket over gRPC and
# serves its dense chunks on a TLS stream (the same certificates); a
# plain-TCP stream to that port is closed at the handshake, before a ticket
# is read.
SHADOWSYNC_LOG_LEVEL=info "$ps_bin" --listen 127.0.0.1:0 --http "" --tls-cert server.pem \
  --tls-key server.key --tls-ca ca.pem >ps3.log 2>&1 &
pid3=$!
for _ in $(seq 100); do grep -q "bulk on" ps3.log && break; sleep 0.1; done
port3=$(grep -o 'listening on [0-9.]*:[0-9]*' ps3.log | cut -d: -f2)
bulk3=$(grep -o 'bulk on [0-9.]*:[0-9]*' ps3.log | cut -d: -f2)
out=$(SHADOWSYNC_PS=localhost:$port3 SHADOWSYNC_TLS_CA=ca.pem \
  SHADOWSYNC_TLS_CERT=client.pem SHADOWSYNC_TLS_KEY=client.key bounded "$trainer" --steps 200 2>&1)
echo "bulk over TLS: $out"
grep -q "rounds=20 " <<<"$out"
grep -q "event=stream_opened epoch=0 tls=1" ps3.log
/usr/bin/python3 - "$bulk3" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(bytes(16) + bytes(16))  # a "ticket" and a frame head, no handshake
s.settimeout(10)
got = b""
while True:  # at most a TLS alert record (0x15), then the end (or a reset)
    try:
        b = s.recv(100)
    except ConnectionResetError:
        break
    if not b:
        break
    got += b
assert got == b"" or got[0] == 0x15, f"a plain-TCP stream to a TLS bulk port got {got!r}"
PY
for _ in $(seq 50); do grep -q "event=stream_refused reason=tls" ps3.log && break; sleep 0.1; done
grep -q "event=stream_refused reason=tls" ps3.log
kill "$pid3"
echo "tls test: mutual TLS served, missing client certificate and plain TCP refused, writers by certificate identity, the bulk stream over TLS"
