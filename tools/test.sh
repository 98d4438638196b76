#!/usr/bin/env bash
# Installs dependencies, builds, and runs the test suite three times:
# a release build (then the image, built and run with podman: minutes);
# a ThreadSanitizer build (unit tests + a small Hogwild
# run, races allowed only inside the kernels named in tests/tsan.supp);
# an AddressSanitizer + UndefinedBehaviorSanitizer build of the whole
# suite. Between the last two, every libFuzzer target (tests/fuzz/) runs
# for SS_FUZZ_SECONDS (20) from its seed corpus. Ends with ctest's summary
# of the ASan+UBSan run.
#   bash tools/test.sh            # all three
#   bash tools/test.sh --fast     # release build only
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc 2>/dev/null || echo 2)

bash deploy/install-deps.sh

echo "== release build (build/) =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$JOBS"
(cd build && ctest --output-on-failure -j "$JOBS" -LE image)

if [ "${1:-}" = "--fast" ]; then
  exit 0
fi

echo "== the image (tests/test_image.sh): built and run with podman =="
(cd build && ctest --output-on-failure -L image)

echo "== ThreadSanitizer build (build-tsan/) =="
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSS_TSAN=ON >/dev/null
cmake --build build-tsan -j "$JOBS"
(cd build-tsan && ctest --output-on-failure -j "$JOBS")

echo "== fuzz targets (build-fuzz/): libFuzzer + ASan + UBSan, ${SS_FUZZ_SECONDS:-20} s each =="
bash tests/fuzz/run.sh "${SS_FUZZ_SECONDS:-20}"

echo "== sanitizer build (build-asan/): ASan + UBSan =="
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSS_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$JOBS"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j "$JOBS" -LE image)
