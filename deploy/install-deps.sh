#!/usr/bin/env bash
# Installs every Debian package ShadowSync needs to build and test.
# Idempotent: does nothing when all packages are present.
set -euo pipefail

PACKAGES=(
  build-essential   # gcc 12, make
  cmake             # >= 3.20
  pkg-config
  check             # unit test framework
  libsubunit-dev    # check's pkg-config file links it
  clang-format      # the format test (tests/check-format.sh)
  git               # the format test lists tracked files
  libgrpc-dev       # gRPC core C API (rpc/)
  libprotobuf-c-dev # protobuf-c runtime
  protobuf-c-compiler  # protoc-c, generates rpc/proto/*.pb-c.[ch]
  openssl              # the TLS test makes its certificates
  librocksdb-dev       # embedding rows on disk (embedding-store/)
  libjemalloc-dev      # one jemalloc arena per embedding table
  libhiredis-dev       # the embedding benchmark's Redis client (bench/emb_bench.c)
  libmicrohttpd-dev    # /metrics, /healthz, /status of agent and PS (rpc/http.c)
  libcurl4-openssl-dev # shadowsync-ctl and the tests' HTTP client
  prometheus           # promtool (metrics lint) and the scrape test's server
  curl                 # the Prometheus test queries its HTTP API
  libjson-c-dev        # /status is written and read with json-c (agent, PS, shadowsync-ctl)
  clang                # the fuzz targets (tests/fuzz/) are built with -fsanitize=fuzzer
  libfuzzer-14-dev     # libFuzzer's driver for clang 14
  protobuf-compiler    # protoc: the black-box test generates its client from rpc/proto
  python3-grpcio       # the black-box test's gRPC client (not the project's)
  python3-protobuf
  systemd              # systemd-analyze and systemd-sysusers check deploy/systemd (not started)
  strace               # the systemd test traces the daemons' system calls against the filters
  iproute2             # ip and tc: the emulated cluster (bench/emu-cluster.sh) and its test
  nftables             # nft: packet loss and partitions on the emulated cluster (bench/fault-soak.sh)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
