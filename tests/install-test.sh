#!/usr/bin/env bash
# cmake --install into a temporary prefix, then build the example trainer
# against it the three ways a user would: pkg-config (shared), the static
# archive, and CMake's find_package (shared and static). Each binary runs.
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name shadowsync.pc)
libdir=$(dirname "$(dirname "$pc")")
export PKG_CONFIG_PATH=$(dirname "$pc")
example="$tmp/prefix/share/doc/shadowsync/examples/minimal_trainer.c"
test -f "$example"
test -f "$tmp/prefix/include/shadowsync/shadowsync.h"

run() { # binary: must train 10 steps in mode none
  out=$("$@" --mode none --steps 10)
  echo "$out"
  grep -q "steps=10 " <<<"$out"
}

cc -std=c11 -Wall -Wextra -Werror "$example" $(pkg-config --cflags --libs shadowsync) \
  -Wl,-rpath,"$libdir" -o "$tmp/pc-shared"
run "$tmp/pc-shared"
cc -std=c11 -Wall -Wextra -Werror "$example" $(pkg-config --cflags shadowsync) \
  "$libdir/libshadowsync.a" $(pkg-config --libs grpc gpr libprotobuf-c) -lpthread -lm \
  -o "$tmp/pc-static"
run "$tmp/pc-static"
# A C++ program uses the public headers and links (extern "C" everywhere).
if command -v c++ >/dev/null; then
  cat >"$tmp/consumer.cpp" <<'CPP'
#include <cstdio>
#include <shadowsync/shadowsync.h>
int main() {
    ss_trainer_config cfg;
    ss_trainer_config_init(&cfg);
    cfg.mode = SS_SYNC_NONE;
    ss_trainer *t = nullptr;
    ss_status st = ss_trainer_open(&cfg, &t);
    std::printf("C++ consumer: ShadowSync %s, open: %s (%s)\n", ss_version(), ss_status_name(st),
                ss_strerror(st));
    return st == SS_OK && ss_trainer_close(t) == SS_OK ? 0 : 1;
}
CPP
  c++ -std=c++11 -Wall -Wextra -Werror "$tmp/consumer.cpp" $(pkg-config --cflags --libs shadowsync) \
    -Wl,-rpath,"$libdir" -o "$tmp/cxx-consumer"
  "$tmp/cxx-consumer"
fi
# The static archive: the functions under the public prefix ss_ are
# exactly those the installed headers declare (internal ones are ss__).
declared=$(grep -ohE '\bss_[a-z0-9_]+\(' "$tmp/prefix/include/shadowsync/"*.h | tr -d '(' | sort -u)
defined=$(nm -g --defined-only "$libdir/libshadowsync.a" | awk '$3 ~ /^ss_[a-z0-9]/ {print $3}' | sort -u)
if [ "$declared" != "$defined" ]; then
  echo "libshadowsync.a: ss_ symbols differ from the public headers:" >&2
  diff <(echo "$declared") <(echo "$defined") >&2 || true
  exit 1
fi
# The installed include directory holds only the public API.
installed=$(cd "$tmp/prefix/include" && find . -type f | sort | tr '\n' ' ')
if [ "$installed" != "./shadowsync/shadowsync.h ./shadowsync/status.h " ]; then
  echo "installed headers are not the public API alone: $installed" >&2
  exit 1
fi
# Only the public API leaves the shared library.
if nm -D --defined-only "$libdir/libshadowsync.so" | grep -v -E ' (ss_trainer_|ss_dense_|ss_table_|ss_strerror|ss_status_name|ss_version|SHADOWSYNC_0)' | grep -q ' T '; then
  echo "libshadowsync.so exports internal symbols" >&2
  exit 1
fi

mkdir -p "$tmp/consumer"
cp "$example" "$tmp/consumer/"
cat >"$tmp/consumer/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(shadowsync 0.1 REQUIRED)
add_executable(shared-trainer minimal_trainer.c)
target_link_libraries(shared-trainer PRIVATE shadowsync::shadowsync)
add_executable(static-trainer minimal_trainer.c)
target_link_libraries(static-trainer PRIVATE shadowsync::shadowsync_static)
CMAKE
cmake -S "$tmp/consumer" -B "$tmp/consumer/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_RPATH="$libdir" >/dev/null
cmake --build "$tmp/consumer/build" >/dev/null
run "$tmp/consumer/build/shared-trainer"
run "$tmp/consumer/build/static-trainer"
echo "install test: pkg-config shared/static and CMake shared/static consumers built and ran"
