#!/usr/bin/env bash
# Builds the fuzz targets with clang in build-fuzz/ and runs each for
# SECONDS (default 20) from its seed corpus, through ctest.
#   bash tests/fuzz/run.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-20}
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSS_FUZZ=ON \
  -DSS_BUILD_TESTS=OFF -DSS_FUZZ_SECONDS="$secs" >/dev/null
cmake --build build-fuzz -j "$(nproc 2>/dev/null || echo 2)" --target fuzz_targets
(cd build-fuzz && ctest -V -L fuzz)
