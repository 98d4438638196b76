#!/usr/bin/env bash
# Builds the ShadowSync image from this tree (deploy/container/Containerfile)
# with podman, else docker, tagged shadowsync:<version> (CMakeLists.txt's);
# --push REGISTRY also tags and pushes REGISTRY/shadowsync:<version>, the
# name to put in deploy/k8s/kustomization.yaml.
#   bash deploy/container/build.sh [--push registry.example.com/ml]
set -euo pipefail
cd "$(dirname "$0")/../.."
push=""
case ${1:-} in
--push) push=${2:?--push needs a registry}; shift 2 ;;
-h | --help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
"") ;;
*) echo "build.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
esac
engine=$(command -v podman || command -v docker || true)
[ -n "$engine" ] || { echo "build.sh: neither podman nor docker is installed (apt-get install podman)" >&2; exit 1; }
version=$(sed -n 's/^project(shadowsync VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[ -n "$version" ] || { echo "build.sh: no version in CMakeLists.txt" >&2; exit 1; }
"$engine" build -f deploy/container/Containerfile -t "shadowsync:$version" .
echo "build.sh: built shadowsync:$version with $(basename "$engine")"
if [ -n "$push" ]; then
  "$engine" tag "shadowsync:$version" "$push/shadowsync:$version"
  "$engine" push "$push/shadowsync:$version"
fi
