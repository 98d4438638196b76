#!/usr/bin/env bash
# Builds the ShadowSync image from this tree (deploy/container/Containerfile)
# with a container engine that works here (podman, else docker: a CLI
# whose daemon does not answer is passed over), tagged
# shadowsync:<version> (CMakeLists.txt's).
#   bash deploy/container/build.sh [--offline] [--push registry.example.com/ml]
# --offline: no container registry is reached. The debian:12 base is made
# from Debian's package archive with mmdebstrap (--variant=minbase
# bookworm, `podman import`) when the engine does not hold one yet.
# --push REGISTRY also tags and pushes REGISTRY/shadowsync:<version>, the
# name to put in deploy/k8s/kustomization.yaml. Under podman the build's
# RUN steps use BUILDAH_ISOLATION=chroot unless it is set (the default
# isolation needs user namespaces a container or a CI runner may lack).
set -euo pipefail
cd "$(dirname "$0")/../.."
push="" offline=0
while [ $# -gt 0 ]; do
  case $1 in
  --push) push=${2:?--push needs a registry}; shift 2 ;;
  --offline) offline=1; shift ;;
  -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "build.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
engine=""
for e in podman docker; do
  if command -v "$e" >/dev/null && "$e" info >/dev/null 2>&1; then engine=$e; break; fi
done
[ -n "$engine" ] || { echo "build.sh: no working container engine (podman or docker whose 'info' answers; apt-get install podman)" >&2; exit 1; }
version=$(sed -n 's/^project(shadowsync VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[ -n "$version" ] || { echo "build.sh: no version in CMakeLists.txt" >&2; exit 1; }
if [ "$offline" = 1 ] && ! "$engine" image exists debian:12 2>/dev/null && ! "$engine" image inspect debian:12 >/dev/null 2>&1; then
  command -v mmdebstrap >/dev/null || { echo "build.sh: --offline needs mmdebstrap (apt-get install mmdebstrap)" >&2; exit 1; }
  echo "build.sh: making the debian:12 base with mmdebstrap"
  mmdebstrap --quiet --variant=minbase bookworm - | "$engine" import - debian:12 >/dev/null
fi
[ "$engine" != podman ] || export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}
pull=()
[ "$offline" = 0 ] || pull=(--pull=never)
"$engine" build "${pull[@]}" -f deploy/container/Containerfile -t "shadowsync:$version" .
echo "build.sh: built shadowsync:$version with $engine"
if [ -n "$push" ]; then
  "$engine" tag "shadowsync:$version" "$push/shadowsync:$version"
  "$engine" push "$push/shadowsync:$version"
fi
