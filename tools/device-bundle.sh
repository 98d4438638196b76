#!/usr/bin/env bash
# Packs this build for a machine that has a GPU but none of the Debian
# packages it links (a lent GPU machine with another distribution): the
# stripped binaries and libshadowsync under .devbundle/, with every shared
# library they load from Debian except glibc's, libstdc++/libgcc (the
# other machine's are newer) and CUDA's own (the other machine's driver
# and toolkit serve them). On the other machine, in the repository root:
#   source .devbundle/env.sh      # build/bin and LD_LIBRARY_PATH set up
# then run the bench scripts with SS_BENCH_REBUILD=0 as usual.
#   bash tools/device-bundle.sh [BUILD_DIR]
set -euo pipefail
case ${1:-} in
-h | --help)
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
  ;;
esac
cd "$(dirname "$0")/.."
build=${1:-build}
[ -x "$build/bin/shadowsync-gpu-train" ] || {
  echo "device-bundle: $build/bin/shadowsync-gpu-train is missing: build with CUDA first" >&2
  exit 1
}
rm -rf .devbundle
mkdir -p .devbundle/bin .devbundle/lib
grep -qx '/.devbundle/' .git/info/exclude 2>/dev/null || echo '/.devbundle/' >>.git/info/exclude
for f in "$build"/bin/*; do
  strip -o ".devbundle/bin/$(basename "$f")" "$f"
done
for f in "$build"/trainer-hooks/libshadowsync.so.*.*.*; do
  strip -o ".devbundle/lib/libshadowsync.so.0" "$f"
done
ln -s libshadowsync.so.0 .devbundle/lib/libshadowsync.so
[ ! -e "$build/tests/libss_sync_recorder.so" ] ||
  strip -o .devbundle/lib/libss_sync_recorder.so "$build/tests/libss_sync_recorder.so"
# The libraries every binary loads, less the base system's and CUDA's.
for f in .devbundle/bin/* "$build"/trainer-hooks/libshadowsync.so; do
  ldd "$f" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux* | \
      libgcc_s.so.* | libstdc++.so.* | libcuda.so.* | libcublas* | libcudart* | libnccl*) ;;
    *) cp -L "$lib" .devbundle/lib/ ;;
  esac
done
cat >.devbundle/env.sh <<'ENV'
# Sourced in the repository root on the GPU machine (tools/device-bundle.sh).
mkdir -p build/trainer-hooks
rm -rf build/bin && cp -r .devbundle/bin build/bin
cp -P .devbundle/lib/libshadowsync.so* build/trainer-hooks/
cuda_libs=
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
  $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in ("cublas", "cu13", "nccl", "cuda_runtime")))' 2>/dev/null); do
  [ -d "$d" ] && cuda_libs=$cuda_libs:$d
done
export LD_LIBRARY_PATH=$PWD/.devbundle/lib$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export SHADOWSYNC_LIBRARY=$PWD/.devbundle/lib/libshadowsync.so.0
export SS_BENCH_REBUILD=0
ENV
du -sh .devbundle
