#!/usr/bin/env bash
# The PS returns freed memory to the kernel when it is idle: linked with
# jemalloc, it must run jemalloc's background thread (common/malloc_tune.h,
# SS_JEMALLOC_CONF). Without it a refused burst of token-less requests
# stayed resident for good (bench/attack.sh door measures the RSS).
# Builds where jemalloc is not the PS's malloc (sanitizers) skip.
#   test_ps_allocator.sh PS_BIN
set -euo pipefail
ps_bin=$1
libs=$(ldd "$ps_bin")
if [[ $libs != *libjemalloc* || $libs == *libasan* || $libs == *libtsan* ]]; then
  echo "ps-allocator test: skipped (jemalloc is not the PS's allocator in this build)"
  exit 0
fi
work=$(mktemp -d)
"$ps_bin" --listen 127.0.0.1:0 --insecure-loopback >"$work/ps.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do grep -q listening "$work/ps.log" && break; sleep 0.1; done
grep -q listening "$work/ps.log" || { cat "$work/ps.log" >&2; exit 1; }
# jemalloc starts the thread after the program's first pthread_create, on
# its own schedule: look for it for up to 10 s.
# (grep -q would leave cat a broken pipe, which pipefail counts.)
has_thread() { cat /proc/$pid/task/*/comm 2>/dev/null | grep -x jemalloc_bg_thd >/dev/null; }
for _ in $(seq 100); do
  has_thread && break
  sleep 0.1
done
if ! has_thread; then
  echo "shadowsync-ps runs no jemalloc background thread: freed memory stays resident" >&2
  exit 1
fi
echo "ps-allocator test: the PS runs jemalloc's background thread"
