#!/usr/bin/env bash
# Every script in bench/ (the sourced libraries aside) answers --help with
# exit 0 and a text, and refuses an unknown flag with exit 2, at once:
# before it builds or runs anything. A script that reads settings from the
# environment (${NAME:-default}) takes them as flags too: its --help lists
# them.
#   test_bench_help.sh SOURCE_DIR
set -euo pipefail
src=$1
n=0
for s in "$src"/bench/*.sh; do
  name=$(basename "$s")
  case $name in common.sh | emu-lib.sh | help.sh) continue ;; esac
  out=$(cd "$src" && timeout 10 bash "bench/$name" --help) || { echo "$name --help: exit $?" >&2; exit 1; }
  [ "$(wc -l <<<"$out")" -ge 2 ] || { echo "$name --help says too little: $out" >&2; exit 1; }
  rc=0
  (cd "$src" && timeout 10 bash "bench/$name" --no-such-flag 1 >/dev/null 2>&1) || rc=$?
  [ "$rc" = 2 ] || { echo "$name --no-such-flag 1: exit $rc, not 2" >&2; exit 1; }
  if grep -q '\${[A-Z][A-Z0-9_]*:-' "$s" && ! grep -q 'case \$1 in' "$s" &&
    ! grep -q "^bench_named_flags" "$s" &&
    ! grep -q '^Flags' <<<"$out"; then
    echo "$name reads settings from the environment but --help lists no flags" >&2
    exit 1
  fi
  n=$((n + 1))
done
echo "bench-help test: $n bench scripts answer --help"
