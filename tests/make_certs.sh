#!/usr/bin/env bash
# A throwaway CA and the certificates the TLS tests and benchmarks use,
# made in DIR with openssl, each NAME.pem and NAME.key signed by ca.pem and
# valid for a day: server (localhost, 127.0.0.1), client (a trainer,
# trainer.shadowsync.test), reader (a dashboard, dashboard.shadowsync.test).
#   make_certs.sh DIR
set -euo pipefail
cd "$1"
q() { "$@" >/dev/null 2>&1; }
q openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test-ca -keyout ca.key -out ca.pem
for who in server client reader; do
  q openssl req -newkey rsa:2048 -nodes -subj "/CN=$who" -keyout $who.key -out $who.csr
  case $who in
  server) printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >ext.cnf ;;
  client) printf 'subjectAltName=DNS:trainer.shadowsync.test\n' >ext.cnf ;;
  reader) printf 'subjectAltName=DNS:dashboard.shadowsync.test\n' >ext.cnf ;;
  esac
  q openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
    -extfile ext.cnf -out $who.pem
done
