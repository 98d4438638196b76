#!/usr/bin/env bash
# TLS and mutual TLS between trainers and shadowsync-ps: a throwaway CA
# signs a server and a client certificate (openssl); a PS that demands
# client certificates serves a trainer that has one, and refuses a trainer
# without one and a plain-TCP trainer.
#   tls-test.sh PS_BINARY TRAINER_BINARY
set -euo pipefail
ps_bin=$1
trainer=$2
tmp=$(mktemp -d)
pid=
trap '[ -z "$pid" ] || kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
cd "$tmp"
q() { "$@" >/dev/null 2>&1; }
q openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test-ca -keyout ca.key -out ca.pem
for who in server client; do
  q openssl req -newkey rsa:2048 -nodes -subj "/CN=$who" -keyout $who.key -out $who.csr
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >ext.cnf
  q openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
    -extfile ext.cnf -out $who.pem
done

"$ps_bin" --listen 127.0.0.1:0 --tls-cert server.pem --tls-key server.key --tls-ca ca.pem >ps.log 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q listening ps.log && break; sleep 0.1; done
grep -q "(mutual TLS)" ps.log
port=$(grep -o 'listening on [0-9.]*:[0-9]*' ps.log | cut -d: -f2)
export SHADOWSYNC_PS=localhost:$port SHADOWSYNC_TIMEOUT_MS=3000 SHADOWSYNC_MODE=foreground

out=$(SHADOWSYNC_TLS_CA=ca.pem SHADOWSYNC_TLS_CERT=client.pem SHADOWSYNC_TLS_KEY=client.key \
  "$trainer" --steps 200 2>&1)
echo "with a client certificate: $out"
grep -q "rounds=20 " <<<"$out"

if out=$(SHADOWSYNC_TLS_CA=ca.pem "$trainer" --steps 200 2>&1); then
  echo "a trainer without a client certificate was served: $out" >&2
  exit 1
fi
echo "without a client certificate: refused ($(tail -1 <<<"$out"))"
if out=$("$trainer" --steps 200 2>&1); then
  echo "a plain-TCP trainer was served: $out" >&2
  exit 1
fi
echo "plain TCP: refused ($(tail -1 <<<"$out"))"
# A missing PEM file is a clear error at start, not a silent plain server.
if "$ps_bin" --listen 127.0.0.1:0 --tls-cert nope.pem --tls-key server.key >bad.log 2>&1; then
  echo "a PS with a missing certificate started" >&2
  exit 1
fi
grep -q "cannot serve" bad.log
echo "tls test: mutual TLS served, missing client certificate and plain TCP refused"
