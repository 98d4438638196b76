#!/usr/bin/env bash
# ctr-train online, as a user runs it: a drifting stream piped in (every
# row read once, progressive NE reported), SIGTERM mid-stream (a clean end
# with the report), a followed directory ended by _DONE, and the refusals.
#   test_online_cli.sh BIN_DIR
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
pids=()
fail() { echo "test_online_cli: $*" >&2; exit 1; }
field() { grep '^summary-online:' "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k {print $2}'; }

# 1. A pipe: every row once, progressive NE of a model that learns.
"$bin/ctr-gen" --drift --rows 50000 --out - --quiet 2>"$tmp/gen.txt" |
  "$bin/ctr-train" --train - --progressive-window 20000 --progress 0 >"$tmp/pipe.out" 2>&1 ||
  fail "piped run failed: $(tail -3 "$tmp/pipe.out")"
[ "$(field "$tmp/pipe.out" stream_rows)" = 50000 ] || fail "stream_rows: $(grep summary-online "$tmp/pipe.out")"
awk -v ne="$(field "$tmp/pipe.out" progressive_ne)" 'BEGIN {exit !(ne > 0.5 && ne < 1.0)}' ||
  fail "progressive_ne out of (0.5, 1): $(grep summary-online "$tmp/pipe.out")"
grep -q 'bayes_ne=' "$tmp/gen.txt" || fail "ctr-gen --out - reports on stderr: $(cat "$tmp/gen.txt")"
# a stream with --emb array has first-order weights by default (--wide-lr auto)
grep -q ' wide_lr=0.005 ' "$tmp/pipe.out" || fail "--wide-lr auto on a stream: $(grep '^ctr-train: trainers' "$tmp/pipe.out")"
# a table holds them when asked for: the same stream through --emb local
"$bin/ctr-gen" --drift --rows 50000 --out - --quiet 2>/dev/null |
  "$bin/ctr-train" --train - --emb local --wide-lr 0.005 --progress 0 >"$tmp/table.out" 2>&1 ||
  fail "--emb local --wide-lr failed: $(tail -3 "$tmp/table.out")"
grep -q ' wide_lr=0.005 ' "$tmp/table.out" || fail "--emb local --wide-lr: $(grep '^ctr-train: trainers' "$tmp/table.out")"
awk -v ne="$(field "$tmp/table.out" progressive_ne)" 'BEGIN {exit !(ne > 0.5 && ne < 1.0)}' ||
  fail "--emb local --wide-lr: progressive_ne out of (0.5, 1): $(grep summary-online "$tmp/table.out")"

# 1b. ctr-gen makes the same rows (and probabilities) on any number of
# threads: one thread draws every row's random numbers in order, the others
# make the rows in blocks and the first writes the blocks in order.
for t in 1 3; do
  "$bin/ctr-gen" --drift --shape categorical --rows 10000 --threads "$t" --out "$tmp/t$t.tsv" \
    --probs "$tmp/t$t.p" --quiet >/dev/null
done
cmp -s "$tmp/t1.tsv" "$tmp/t3.tsv" || fail "ctr-gen --threads 1 and 3 wrote other rows"
cmp -s "$tmp/t1.p" "$tmp/t3.p" || fail "ctr-gen --threads 1 and 3 wrote other probabilities"
[ "$(wc -l <"$tmp/t3.tsv")" = 10000 ] || fail "ctr-gen --threads 3 wrote $(wc -l <"$tmp/t3.tsv") rows"

# 2. SIGTERM mid-stream: the rows read so far are trained and reported.
mkfifo "$tmp/fifo"
"$bin/ctr-gen" --drift --rows 100000000 --out - --quiet >"$tmp/fifo" 2>/dev/null &
pids+=($!)
"$bin/ctr-train" --train - --progress 0.2 <"$tmp/fifo" >"$tmp/term.out" 2>&1 &
train=$!
for _ in $(seq 100); do grep -q '^progress:' "$tmp/term.out" && break; sleep 0.1; done
kill -TERM "$train"
rc=0
wait "$train" || rc=$?
[ "$rc" = 0 ] || fail "SIGTERM: exit $rc: $(tail -3 "$tmp/term.out")"
[ "$(field "$tmp/term.out" stopped_by_signal)" = 1 ] || fail "SIGTERM not reported: $(tail -2 "$tmp/term.out")"
[ "$(field "$tmp/term.out" stream_rows)" -gt 0 ] || fail "SIGTERM: no rows"

# 3. A followed directory: files published by rename, then _DONE.
mkdir "$tmp/in"
"$bin/ctr-train" --train-follow "$tmp/in" --progress 0 >"$tmp/follow.out" 2>&1 &
train=$!
for k in 1 2; do
  "$bin/ctr-gen" --drift --rows 20000 --data-seed "$k" --out "$tmp/in/.part-$k.tmp" --quiet >/dev/null
  mv "$tmp/in/.part-$k.tmp" "$tmp/in/part-$k.tsv"
  sleep 0.3
done
touch "$tmp/in/_DONE"
wait "$train" || fail "follow run failed: $(tail -3 "$tmp/follow.out")"
[ "$(field "$tmp/follow.out" files)" = 2 ] || fail "files: $(grep summary-online "$tmp/follow.out")"
[ "$(field "$tmp/follow.out" stream_rows)" = 40000 ] || fail "follow rows: $(grep summary-online "$tmp/follow.out")"

# 4. Refusals, each saying why.
refused() { # expected-exit pattern command...
  local want=$1 pattern=$2 rc=0
  shift 2
  "$@" </dev/null >"$tmp/refused.out" 2>&1 || rc=$?
  [ "$rc" = "$want" ] || fail "$*: exit $rc, not $want"
  grep -q -- "$pattern" "$tmp/refused.out" || fail "$*: says $(cat "$tmp/refused.out")"
}
refused 2 'one of --train and --train-follow' "$bin/ctr-train" --train - --train-follow "$tmp/in"
refused 2 '--max-rows does not apply' "$bin/ctr-train" --train - --max-rows 10
refused 1 'cannot read' "$bin/ctr-train" --train-follow "$tmp/no-such-dir"
refused 1 'ended before its first' "$bin/ctr-train" --train -
refused 2 'rate in \[0, 1\] or auto' "$bin/ctr-train" --train - --wide-lr 0.01x
refused 2 'drift-turnover' "$bin/ctr-gen" --drift --drift-turnover -1 --out -
refused 2 'threads.*outside' "$bin/ctr-gen" --drift --threads 65 --out -
echo "online CLI test: pipe, SIGTERM, follow and 7 refusals as expected"
