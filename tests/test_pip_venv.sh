#!/usr/bin/env bash
# The Python package as a PyTorch user installs it: `pip install ./python`
# into a fresh venv (offline: --no-build-isolation --no-index, setuptools
# and numpy from the system), then `import shadowsync` from that venv's
# Python finds the library just built and trains a step; `pip show`
# knows the package at CMakeLists.txt's version (the one source).
#   test_pip_venv.sh SOURCE_DIR LIBRARY PROJECT_VERSION
set -euo pipefail
src=$1 lib=$2 version=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_pip_venv: $*" >&2; exit 1; }
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
cp -r "$src/python" "$tmp/python" # pip builds in place: not in the source tree
"$tmp/venv/bin/pip" install --quiet --no-build-isolation --no-index --no-deps "$tmp/python" \
  >"$tmp/pip.log" 2>&1 || fail "pip install: $(tail -5 "$tmp/pip.log")"
shown=$("$tmp/venv/bin/pip" show shadowsync | awk '/^Version:/ {print $2}')
[ "$shown" = "$version" ] || fail "pip show says $shown, CMakeLists.txt $version"
cd "$tmp" # not the source tree: the installed package is imported
out=$(SHADOWSYNC_LIBRARY=$lib "$tmp/venv/bin/python" - <<'PY'
import numpy as np, shadowsync
assert shadowsync.__file__.startswith(__import__("sys").prefix), shadowsync.__file__
with shadowsync.Trainer(sync="none") as t:
    g = t.add_dense("w", init=np.ones(4, np.float32))
    g.numpy()[:] -= 0.5
    t.step()
    print("ok", shadowsync.version(), g.stats()["iterations"])
PY
) || fail "import from the venv: $out"
[ "$out" = "ok $version 1" ] || fail "the venv's shadowsync: $out"
# without the library anywhere it can look, the error says what it tried
err=$(SHADOWSYNC_LIBRARY=/nonexistent/libshadowsync.so "$tmp/venv/bin/python" -c "import shadowsync" 2>&1) &&
  fail "import without the library succeeded"
grep -q '/nonexistent/libshadowsync.so' <<<"$err" || fail "the ImportError does not say where it looked: $err"
echo "pip venv test: pip install ./python in a venv, shadowsync $version imported from it, a step trained"
