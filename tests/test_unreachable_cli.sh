#!/usr/bin/env bash
# A trainer whose sync partner is not there says so, and fails:
#  1. nothing listens at --ps: the exact message, within seconds (not a
#     call's deadline);
#  2. the --agent socket is not there: training goes on alone, then
#     ctr-train exits 1 saying no sync round completed.
#   test_unreachable_cli.sh BIN_DIR DATA_TSV
set -euo pipefail
bin=$1
data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_unreachable_cli: $*" >&2; exit 1; }
head -2000 "$data" >"$tmp/small.tsv"
train=("$bin/ctr-train" --train "$tmp/small.tsv" --test "$tmp/small.tsv" --epochs 1 --progress 0)

# 1. Nothing listens at the PS's address.
start=$SECONDS
rc=0
"${train[@]}" --ps 127.0.0.1:1 >"$tmp/ps.out" 2>"$tmp/ps.err" || rc=$?
[ $rc = 1 ] || fail "--ps 127.0.0.1:1: exit $rc, want 1"
want="ctr-train: training failed: group dense: joining the PS: cannot reach the PS at 127.0.0.1:1 (connection refused)"
grep -qxF "$want" "$tmp/ps.err" || fail "--ps 127.0.0.1:1 said: $(cat "$tmp/ps.err")"
[ $((SECONDS - start)) -lt 8 ] || fail "--ps 127.0.0.1:1 took $((SECONDS - start)) s to say so"

# 2. No agent: trained alone, and told so by the exit status.
rc=0
"${train[@]}" --agent "$tmp/no-agent.sock" --rpc-timeout-ms 1000 >"$tmp/agent.out" 2>"$tmp/agent.err" || rc=$?
[ $rc = 1 ] || fail "--agent with no agent: exit $rc, want 1"
want="ctr-train: --sync shadow was asked for, but no sync round completed: the model was trained alone (the warnings above say what could not be reached)"
grep -qxF "$want" "$tmp/agent.err" || fail "--agent with no agent said: $(cat "$tmp/agent.err")"
grep -q '^summary:.* sync_rounds_sum=0 ' "$tmp/agent.out" || fail "no summary: $(cat "$tmp/agent.out")"
echo "unreachable-cli test: an unreachable PS is named at once; a trainer that never synced exits 1"
