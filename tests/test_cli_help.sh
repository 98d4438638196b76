#!/usr/bin/env bash
# Every program in BIN_DIR (the tests themselves aside) answers --help on
# stdout with exit 0 and a Usage line naming itself, and --version with
# exactly "NAME (ShadowSync) X.Y.Z"; an unknown flag exits 2 with a reason
# on stderr.
#   test_cli_help.sh BIN_DIR
set -euo pipefail
bin=$1
n=0
for p in "$bin"/*; do
  name=$(basename "$p")
  [ -x "$p" ] && [ -f "$p" ] || continue
  case $name in test_* | fuzz_*) continue ;; esac
  help=$(timeout 10 "$p" --help) || { echo "$name --help: exit $?" >&2; exit 1; }
  grep -q "$name" <<<"$help" || { echo "$name --help does not name it" >&2; exit 1; }
  usages=$(grep -ci '^usage' <<<"$help" || true)
  [ "$usages" = 1 ] || { echo "$name --help says Usage $usages times, not once" >&2; exit 1; }
  ver=$(timeout 10 "$p" --version) || { echo "$name --version: exit $?" >&2; exit 1; }
  [[ $ver =~ ^$name\ \(ShadowSync\)\ [0-9]+\.[0-9]+\.[0-9]+$ ]] ||
    { echo "$name --version says: $ver" >&2; exit 1; }
  rc=0
  timeout 10 "$p" --no-such-flag >/dev/null 2>"${TMPDIR:-/tmp}/cli-help.$$" || rc=$?
  [ $rc = 2 ] && [ -s "${TMPDIR:-/tmp}/cli-help.$$" ] ||
    { echo "$name --no-such-flag: exit $rc, want 2 and a reason" >&2; rm -f "${TMPDIR:-/tmp}/cli-help.$$"; exit 1; }
  rm -f "${TMPDIR:-/tmp}/cli-help.$$"
  n=$((n + 1))
done
[ $n -ge 10 ] || { echo "only $n programs in $bin" >&2; exit 1; }
echo "cli-help test: $n programs answer --help, --version and refuse an unknown flag"
