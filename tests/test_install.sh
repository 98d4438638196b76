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
# The archive, then what pkg-config --static says it needs (gRPC core,
# protobuf-c, and the CUDA runtime where CUDA was built), less the shared
# library itself.
static_libs=$(pkg-config --static --libs shadowsync | sed 's/ -lshadowsync\b//')
cc -std=c11 -Wall -Wextra -Werror "$example" $(pkg-config --cflags shadowsync) \
  "$libdir/libshadowsync.a" $static_libs -o "$tmp/pc-static"
run "$tmp/pc-static"
# The daemons and tools are installed too (the paths deploy/systemd runs),
# and the license files; a library-only install has no programs.
for f in bin/shadowsync-ps bin/shadowsync-agent bin/shadowsync-ctl bin/ctr-train \
  share/doc/shadowsync/LICENSE share/doc/shadowsync/NOTICE share/doc/shadowsync/CHANGELOG.md; do
  test -e "$tmp/prefix/$f" || { echo "cmake --install did not install $f" >&2; exit 1; }
done
cmake --install "$build" --prefix "$tmp/libonly" --component lib >/dev/null
if [ -d "$tmp/libonly/bin" ] || [ -d "$tmp/libonly/include" ]; then
  echo "--component lib installed more than the library: $(cd "$tmp/libonly" && find . -type f)" >&2
  exit 1
fi
# A C++ program, built as a user would against the installed library,
# opens a trainer, syncs a group with the installed shadowsync-ps and
# prints the library's version (extern "C" everywhere).
"$tmp/prefix/bin/shadowsync-ps" --listen 127.0.0.1:0 --http "" >"$tmp/ps.log" 2>&1 &
ps_pid=$!
trap 'kill $ps_pid 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do grep -q "listening on" "$tmp/ps.log" && break; sleep 0.1; done
ps_addr=$(grep -o 'listening on [0-9.:]*' "$tmp/ps.log" | awk '{print $3}')
cat >"$tmp/consumer.cpp" <<'CPP'
#include <cstdio>
#include <shadowsync/shadowsync.h>
#include <vector>
static int fail(const char *what) {
    std::fprintf(stderr, "C++ consumer: %s: %s\n", what, ss_last_error());
    return 1;
}
int main(int argc, char **argv) {
    ss_trainer_config cfg;
    ss_trainer_config_init(&cfg);
    if (ss_trainer_config_set(&cfg, "ps", argc > 1 ? argv[1] : "") != SS_OK ||
        ss_trainer_config_set(&cfg, "sync", "foreground") != SS_OK ||
        ss_trainer_config_set(&cfg, "sync_every", "1") != SS_OK)
        return fail("config");
    ss_trainer *t = nullptr;
    if (ss_trainer_open(&cfg, &t) != SS_OK)
        return fail("open");
    std::vector<float> init(1000, 1.0f);
    ss_dense *w = nullptr;
    if (ss_trainer_add_dense(t, "cxx", init.size(), init.data(), &w) != SS_OK)
        return fail("add_dense");
    for (int i = 0; i < 5; i++)
        if (ss_trainer_step(t) != SS_OK)
            return fail("step");
    ss_dense_stats s;
    ss_dense_get_stats(w, &s);
    std::printf("C++ consumer: ShadowSync %s, %llu rounds of group cxx\n", ss_version(),
                (unsigned long long)s.rounds);
    if (ss_trainer_close(t) != SS_OK)
        return fail("close");
    return s.rounds == 5 ? 0 : 1;
}
CPP
c++ -std=c++11 -Wall -Wextra -Werror "$tmp/consumer.cpp" $(pkg-config --cflags --libs shadowsync) \
  -Wl,-rpath,"$libdir" -o "$tmp/cxx-consumer"
"$tmp/cxx-consumer" "$ps_addr"
# Misconfigured: the program is told which setting is wrong.
if "$tmp/cxx-consumer" "" 2>"$tmp/cxx.err"; then
  echo "the C++ consumer opened a trainer with no PS" >&2
  exit 1
fi
grep -q "ps: no parameter servers" "$tmp/cxx.err" || { cat "$tmp/cxx.err" >&2; exit 1; }
# A Python program does the same with the installed package, which finds
# the installed library by itself (no SHADOWSYNC_LIBRARY).
pkg=$(find "$tmp/prefix" -path '*/shadowsync/_paths.py' | head -1)
if [ -n "$pkg" ] && [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  cat >"$tmp/consumer.py" <<'PY'
import sys
import numpy as np
import shadowsync
with shadowsync.Trainer(ps=sys.argv[1], sync="foreground", sync_every=1, env=False) as t:
    w = t.add_dense("py", init=np.ones(1000, np.float32))
    for _ in range(5):
        t.step()
    rounds = w.stats()["rounds"]
    print(f"Python consumer: ShadowSync {shadowsync.version()}, {rounds} rounds of group py")
sys.exit(0 if rounds == 5 else 1)
PY
  env -u SHADOWSYNC_LIBRARY PYTHONPATH="$(dirname "$(dirname "$pkg")")" /usr/bin/python3 \
    "$tmp/consumer.py" "$ps_addr"
else
  echo "install test: no python3 with numpy, or no package installed: Python consumer skipped" >&2
  exit 1
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
# Only the public API leaves the shared library: exactly what the headers
# declare.
exported=$(nm -D --defined-only "$libdir/libshadowsync.so" | awk '$2 == "T" {print $3}' | sed 's/@.*//' | sort -u)
if [ "$declared" != "$exported" ]; then
  echo "libshadowsync.so: exported functions differ from the public headers:" >&2
  diff <(echo "$declared") <(echo "$exported") >&2 || true
  exit 1
fi

mkdir -p "$tmp/consumer"
cp "$example" "$tmp/consumer/"
# The project's MAJOR.MINOR (packages are compatible within a minor
# version), asked of this install only: an older one elsewhere (say
# /usr/local, from tools/demo.sh) must not stand in for it.
want=$(sed -n 's/^project(shadowsync VERSION \([0-9]*\.[0-9]*\).*/\1/p' "$src/CMakeLists.txt")
[ -n "$want" ] || { echo "no version in $src/CMakeLists.txt" >&2; exit 1; }
cat >"$tmp/consumer/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(shadowsync $want REQUIRED)
add_executable(shared-trainer minimal_trainer.c)
target_link_libraries(shared-trainer PRIVATE shadowsync::shadowsync)
add_executable(static-trainer minimal_trainer.c)
target_link_libraries(static-trainer PRIVATE shadowsync::shadowsync_static)
CMAKE
cmake -S "$tmp/consumer" -B "$tmp/consumer/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -Dshadowsync_DIR="$(dirname "$(find "$tmp/prefix" -name shadowsyncConfig.cmake -print -quit)")" \
  -DCMAKE_BUILD_RPATH="$libdir" >/dev/null
cmake --build "$tmp/consumer/build" >/dev/null
run "$tmp/consumer/build/shared-trainer"
run "$tmp/consumer/build/static-trainer"
echo "install test: pkg-config shared/static and CMake shared/static consumers built and ran"
