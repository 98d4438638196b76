#!/usr/bin/env bash
# The GPU checks and figures (BENCHMARKS.md) in one go, on a CUDA GPU:
# the device, the GPU tests (test_device's real-backend cases, also under
# compute-sanitizer; the Python binding and the PyTorch wrapper with a CUDA
# PyTorch), the kernels'
# bandwidth and the GPU trainer's examples/s (bench/gpu-kernels.sh,
# bench/gpu-train.sh). Logs go to $LOGS (default out/gpu-suite). On a machine without our Debian
# packages, pack the build first (tools/device-bundle.sh) and source
# .devbundle/env.sh there.
#   SECONDS_PER_RUN=10 REPS=3 bash bench/gpu-suite.sh
set -uo pipefail
source "$(dirname "$0")/help.sh"
bench_flags "$@"
cd "$(dirname "$0")/.."
LOGS=${LOGS:-out/gpu-suite}
mkdir -p "$LOGS"
export SS_BENCH_REBUILD=${SS_BENCH_REBUILD:-0}
status=0
step() {
  local name=$1
  shift
  echo "== $name: $*"
  local t0=$SECONDS
  if "$@" >"$LOGS/$name.log" 2>&1; then
    echo "   ok ($((SECONDS - t0)) s)"
  else
    echo "   FAILED rc=$? ($((SECONDS - t0)) s); last lines:"
    status=1
  fi
  tail -n "${TAIL:-15}" "$LOGS/$name.log" | sed 's/^/   /'
}
step device nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv
# test_device starts real PS processes on 127.0.0.1 as ctest runs it:
# without a token (tests/CMakeLists.txt sets the same for every test).
export SHADOWSYNC_INSECURE_LOOPBACK=1
step test_device env CK_VERBOSITY=verbose build/bin/test_device
step python sh -c 'cd python/tests && SHADOWSYNC_PS_BIN="$0/build/bin/shadowsync-ps" \
  PYTHONPATH="$0/python" python3 -m unittest -v test_binding test_torch' "$PWD"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$sanitizer" ] && [ "${MEMCHECK:-1}" = 1 ]; then
  step memcheck "$sanitizer" --tool memcheck --target-processes all --error-exitcode 99 \
    build/bin/test_device
fi
step gpu_kernels bash bench/gpu-kernels.sh
step gpu_train bash bench/gpu-train.sh
exit $status
