#!/usr/bin/env bash
# Every script in bench/ (the sourced libraries aside) answers --help with
# exit 0 and a text, at once: before it builds or runs anything.
#   test_bench_help.sh SOURCE_DIR
set -euo pipefail
src=$1
n=0
for s in "$src"/bench/*.sh; do
  name=$(basename "$s")
  case $name in common.sh | emu-lib.sh | help.sh) continue ;; esac
  out=$(cd "$src" && timeout 10 bash "bench/$name" --help) || { echo "$name --help: exit $?" >&2; exit 1; }
  [ "$(wc -l <<<"$out")" -ge 2 ] || { echo "$name --help says too little: $out" >&2; exit 1; }
  n=$((n + 1))
done
echo "bench-help test: $n bench scripts answer --help"
