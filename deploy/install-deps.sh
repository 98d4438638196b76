#!/usr/bin/env bash
# Installs the Debian packages ShadowSync needs, by set:
#   runtime  what the installed library and daemons run with (a host that
#            runs trainers, agents or parameter servers)
#   build    runtime + compilers and -dev packages (cmake --build)
#   python   the Python package, the PyTorch examples and their baselines
#   test     build + python + everything the test suite and benchmarks use
#            (Check, Prometheus, clang/libFuzzer, iproute2, nftables, ...)
#   all      test (the default: what tools/demo.sh and tools/test.sh use)
#   bash deploy/install-deps.sh [--set runtime|build|python|test|all] [--list]
# Idempotent: installs only what is missing.
set -euo pipefail

RUNTIME=(
  libgrpc29 libprotobuf-c1 # gRPC core and protobuf-c (the wire)
  librocksdb7.8            # embedding rows on disk (shadowsync-ps)
  libjemalloc2             # one jemalloc arena per embedding table (shadowsync-ps)
  libmicrohttpd12          # /metrics, /healthz, /status of agent and PS
  libcurl4                 # shadowsync-ctl
  libjson-c5               # /status (agent, PS, shadowsync-ctl)
)
BUILD=(
  build-essential     # gcc 12, g++ (the C++ consumer of the install test), make
  cmake               # >= 3.20
  pkg-config
  libgrpc-dev         # gRPC core C API (rpc/)
  libprotobuf-c-dev   # protobuf-c runtime
  protobuf-c-compiler # protoc-c, generates rpc/<protocol>/*.pb-c.[ch]
  librocksdb-dev
  zlib1g-dev          # CRC-32 of delta files (embedding-store/delta_file.c)
  help2man            # the programs' man pages, from their --help
  libjemalloc-dev
  libmicrohttpd-dev
  libcurl4-openssl-dev
  libssl-dev          # TLS on the bulk stream (rpc/bulk/bulk_conn.c), as gRPC's own
  libjson-c-dev
  libhiredis-dev # the embedding benchmark's Redis client (bench/emb_bench.c)
  libnetfilter-queue-dev # link latency on the emulated cluster without netem (bench/emu_delay.c)
  check          # the unit test framework (the tests are built by default)
  libsubunit-dev # check's pkg-config file links it
)
PYTHON=(
  python3-numpy   # the binding's zero-copy arrays
  python3-venv    # pip install ./python into a venv (tests/test_pip_venv.sh)
  python3-setuptools # builds the package from python/pyproject.toml
  python3-torch   # torch tensors over ShadowSync groups, examples/pytorch
  python3-sklearn # the logistic-regression baseline of the quality table
)
TEST=(
  clang-format        # the format test (tests/repo/test_format.sh)
  git                 # the format test lists tracked files
  openssl             # the TLS test makes its certificates
  prometheus          # promtool (metrics lint) and the scrape test's server
  curl                # the Prometheus test queries its HTTP API
  clang               # the fuzz targets (tests/fuzz/) are built with -fsanitize=fuzzer
  libfuzzer-14-dev    # libFuzzer's driver for clang 14
  protobuf-compiler   # protoc: the black-box test generates its client from rpc/dense, rpc/emb
  python3-grpcio      # the black-box test's gRPC client (not the project's)
  python3-protobuf
  python3-yaml        # the Kubernetes manifests test parses deploy/k8s (tests/test_k8s_manifests.py)
  systemd             # systemd-analyze and systemd-sysusers check deploy/systemd (not started)
  strace              # the systemd test traces the daemons' system calls against the filters
  iproute2            # ip and tc: the emulated cluster (bench/emu-cluster.sh) and its test
  nftables            # nft: packet loss and partitions on the emulated cluster (bench/fault-soak.sh)
  iptables            # NFQUEUE rules feeding the emulated cluster's latency line (bench/emu-lib.sh)
  podman              # the image test builds and runs deploy/container's image (tests/test_image.sh)
  runc                # ... with runc, as a kubelet's runtime would
  mmdebstrap          # ... its debian:12 base made from Debian's archive (build.sh --offline)
  uidmap
)

set_name=all list=false
while [ $# -gt 0 ]; do
  case $1 in
  --set) set_name=${2:-}; shift 2 ;;
  --set=*) set_name=${1#--set=}; shift ;;
  --list) list=true; shift ;;
  -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "install-deps: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
case $set_name in
runtime) PACKAGES=("${RUNTIME[@]}") ;;
build) PACKAGES=("${RUNTIME[@]}" "${BUILD[@]}") ;;
python) PACKAGES=("${PYTHON[@]}") ;;
test | all) PACKAGES=("${RUNTIME[@]}" "${BUILD[@]}" "${PYTHON[@]}" "${TEST[@]}") ;;
*) echo "install-deps: --set must be runtime, build, python, test or all, not '$set_name'" >&2; exit 2 ;;
esac
if $list; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages of set '$set_name' present"
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
