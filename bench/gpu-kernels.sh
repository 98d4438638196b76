#!/usr/bin/env bash
# The shadow pool's CUDA kernels as a ratio to the device's own copy
# bandwidth (aim: 0.8), and one round's copies for a 1M- and a 16M-float
# device group against pinned copies of the same bytes (docs/gpu.md).
# Needs a CUDA GPU: elsewhere it says why and exits 0.
#   bash bench/gpu-kernels.sh
source "$(dirname "$0")/common.sh"
bench=./build/bin/shadowsync-bench-gpu-kernels
if [ ! -x "$bench" ]; then
  echo "gpu-kernels: skipped: this build has no CUDA (no nvcc found)"
  exit 0
fi
set +e
out=$("$bench" --group-floats 1048576 2>&1)
rc=$?
set -e
if [ $rc = 2 ]; then
  echo "gpu-kernels: skipped: $out"
  exit 0
fi
[ $rc = 0 ] || { echo "$out" >&2; exit $rc; }
echo "$out"
"$bench" --floats 1024 --reps 3 --group-floats 16777216 | grep '^round:'
