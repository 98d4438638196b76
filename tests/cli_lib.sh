# Sourced by the command-line tests (test_*_cli.sh): a scratch folder
# removed on exit, fail, and the check that bad input is refused.
# The sourcing script sets NAME (its messages' prefix) first.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "$NAME: $*" >&2; exit 1; }

# expect_refusal EXPECTED_TEXT CMD...: CMD exits 2 with EXPECTED_TEXT on
# standard error (shown when it is not there).
expect_refusal() {
  local want=$1 rc=0
  shift
  "$@" >/dev/null 2>"$tmp/err" || rc=$?
  [ $rc = 2 ] || fail "${*:2} exited $rc, want 2"
  grep -q -- "$want" "$tmp/err" || { cat "$tmp/err" >&2; fail "${*:2}: no \"$want\" in the error"; }
}
