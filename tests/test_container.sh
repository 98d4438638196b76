#!/usr/bin/env bash
# The image's install steps, checked here without building the image
# (no container engine or registry needed): deploy/container/Containerfile
# runs as a non-root uid and installs the runtime set of
# deploy/install-deps.sh; `cmake --install` of this build gives every
# installed program and library only libraries that set brings (with the
# base system's apt and what it all depends on); and the installed daemons
# start from the install (--version) and the library loads. Also: the
# Kubernetes image tag is the project's version.
#   test_container.sh BUILD_DIR SOURCE_DIR VERSION
set -euo pipefail
build=$1
src=$2
version=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_container: $*" >&2; exit 1; }
cf="$src/deploy/container/Containerfile"

# 1. The Containerfile: runtime set, the install copied in, a non-root user last.
grep -q 'install-deps.sh --set runtime' "$cf" || fail "the runtime stage does not install the runtime set"
grep -q 'cmake --install' "$cf" || fail "the build stage does not cmake --install"
last_user=$(grep -E '^USER ' "$cf" | tail -1 | awk '{print $2}')
[[ ${last_user%%:*} =~ ^[0-9]+$ && ${last_user%%:*} != 0 ]] || fail "the image's USER is '$last_user', not a non-root uid"
tag=$(sed -n 's/^ *newTag: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$src/deploy/k8s/kustomization.yaml")
[ "$tag" = "$version" ] || fail "deploy/k8s/kustomization.yaml tags the image '$tag', the project is $version"

# 2. What the runtime stage brings: the runtime set, apt (in every Debian
# base image) and everything they depend on.
runtime=$(bash "$src/deploy/install-deps.sh" --set runtime --list)
# shellcheck disable=SC2086
apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
  --no-replaces --no-enhances apt $runtime 2>/dev/null | grep -v '^ ' | tr -d '<>' | sort -u >"$tmp/closure"
[ "$(wc -l <"$tmp/closure")" -gt 20 ] || fail "apt-cache depends gave $(wc -l <"$tmp/closure") packages"

# 3. The install, and the packages of every library its ELF files need.
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
ldconfig -p >"$tmp/ldcache"
# The package of a library the install needs, once per library: the ELF
# files share most of them, and each dpkg -S reads every file list (a
# quarter second; the test ran past ctest's limit on a loaded machine).
declare -A pkg_of
package_of() { # lib -> pkg_of[lib] ("" when no package has it)
  [ -z "${pkg_of[$1]+set}" ] || return 0
  local path real pkg
  path=$(awk -v l="$1" '$1 == l && /x86-64|x86_64/ {print $NF; exit}' "$tmp/ldcache")
  [ -n "$path" ] || fail "$elf needs $1, which this system does not have"
  real=$(readlink -f "$path")
  pkg=$(dpkg -S "$real" 2>/dev/null || dpkg -S "/usr$real" 2>/dev/null || dpkg -S "$path" 2>/dev/null ||
    dpkg -S "/usr$path" 2>/dev/null || true)
  pkg_of[$1]=${pkg%%:*}
  [ -n "${pkg_of[$1]}" ] || fail "$elf needs $1 ($real), which no Debian package provides (the image would lack it)"
}
checked=0
while IFS= read -r elf; do
  readelf -h "$elf" >/dev/null 2>&1 || continue
  checked=$((checked + 1))
  for lib in $(readelf -d "$elf" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [ -e "$tmp/prefix/lib/$lib" ] || [ -n "$(find "$tmp/prefix" -name "$lib" -print -quit)" ] && continue
    package_of "$lib"
    grep -qx "${pkg_of[$lib]}" "$tmp/closure" ||
      fail "$(basename "$elf") needs $lib from ${pkg_of[$lib]}, which the image's runtime set does not bring: add it to RUNTIME in deploy/install-deps.sh"
  done
done < <(find "$tmp/prefix/bin" "$tmp/prefix/lib" -type f)
[ $checked -ge 4 ] || fail "only $checked ELF files in the install"

# 4. The man pages (help2man, from --help) are installed with the programs.
for p in shadowsync-ps shadowsync-agent shadowsync-ctl ctr-train; do
  page="$tmp/prefix/share/man/man1/$p.1"
  [ -f "$page" ] && grep -q "^\.TH ${p^^} " "$page" || fail "no man page $page"
done

# 5. The daemons start from the install; the library loads.
for p in shadowsync-ps shadowsync-agent shadowsync-ctl; do
  LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/prefix/bin/$p" --version >/dev/null ||
    fail "installed $p --version failed"
done
lib=$(find "$tmp/prefix/lib" -name 'libshadowsync.so.0' -print -quit)
[ -n "$lib" ] || fail "no libshadowsync.so.0 in the install"
/usr/bin/python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1]).ss_version" "$lib" ||
  fail "$lib does not load"
echo "container test: $checked installed ELF files need only what the runtime set brings; the image runs as uid ${last_user%%:*}"
