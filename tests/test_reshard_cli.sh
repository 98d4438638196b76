#!/usr/bin/env bash
# shadowsync-ctl reshard as an operator runs it: a 2-shard cluster trains
# (ctr-train --ps with its embeddings on the shards), stops, is resharded
# into 3 shards and back into 2; PS processes start on the outputs and
# restore them; the round trip's checksum is the first one's; a store in
# use is refused.
#   test_reshard_cli.sh BIN_DIR DATA_FILE
set -euo pipefail
bin=$1 data=$2
tmp=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "test_reshard_cli: $*" >&2; exit 1; }

start_ps() { # name emb-db checkpoint-dir -> sets addr
  "$bin/shadowsync-ps" --listen 127.0.0.1:0 --http "" --insecure-loopback --emb-db "$2" \
    --checkpoint-dir "$3" >"$tmp/$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q 'listening on' "$tmp/$1.log" && break; sleep 0.1; done
  addr=$(grep -o 'listening on [0-9.:]*' "$tmp/$1.log" | awk '{print $3}')
  [ -n "$addr" ] || fail "$1 did not start: $(cat "$tmp/$1.log")"
}

stop_all() {
  kill -TERM "${pids[@]}"
  wait "${pids[@]}" 2>/dev/null || true
  pids=()
}

start_ps a "$tmp/db-a" "$tmp/ck-a"
a=$addr
start_ps b "$tmp/db-b" "$tmp/ck-b"
b=$addr
"$bin/ctr-train" --train "$data" --max-rows 2000 --test "$data" --max-test-rows 200 --epochs 1 \
  --ps "$a,$b" --emb remote --progress 0 >"$tmp/train.log" 2>&1 || fail "training: $(tail -3 "$tmp/train.log")"

# a store in use is refused
rc=0
"$bin/shadowsync-ctl" reshard --in-emb-db "$tmp/db-a,$tmp/db-b" --out-emb-db "$tmp/x" \
  >"$tmp/busy.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q 'still running' "$tmp/busy.out" || fail "a store in use: exit $rc, $(cat "$tmp/busy.out")"
stop_all

"$bin/shadowsync-ctl" reshard --in-emb-db "$tmp/db-a,$tmp/db-b" \
  --out-emb-db "$tmp/db-0,$tmp/db-1,$tmp/db-2" --in-checkpoint-dir "$tmp/ck-a,$tmp/ck-b" \
  --out-checkpoint-dir "$tmp/ck-0,$tmp/ck-1,$tmp/ck-2" >"$tmp/r1.out" 2>&1 || fail "2 -> 3: $(cat "$tmp/r1.out")"
"$bin/shadowsync-ctl" reshard --in-emb-db "$tmp/db-0,$tmp/db-1,$tmp/db-2" \
  --out-emb-db "$tmp/db-c,$tmp/db-d" --in-checkpoint-dir "$tmp/ck-0,$tmp/ck-1,$tmp/ck-2" \
  --out-checkpoint-dir "$tmp/ck-c,$tmp/ck-d" >"$tmp/r2.out" 2>&1 || fail "3 -> 2: $(cat "$tmp/r2.out")"
sum1=$(grep -o 'checksum=[0-9a-f]*' "$tmp/r1.out")
sum2=$(grep -o 'checksum=[0-9a-f]*' "$tmp/r2.out")
rows=$(grep -o ' rows=[0-9]*' "$tmp/r1.out" | cut -d= -f2)
[ "$sum1" = "$sum2" ] && [ "${rows:-0}" -gt 1000 ] || fail "round trip: $(cat "$tmp/r1.out" "$tmp/r2.out")"
grep -q 'groups=1 ' "$tmp/r1.out" || fail "dense: $(cat "$tmp/r1.out")"
# the round trip's dense checkpoints are the originals, byte for byte
cmp -s "$tmp/ck-a/dense.ckpt" "$tmp/ck-c/dense.ckpt" && cmp -s "$tmp/ck-b/dense.ckpt" "$tmp/ck-d/dense.ckpt" ||
  fail "the dense checkpoints differ after 2 -> 3 -> 2"

# PS processes start on the outputs as they are
for k in 0 1 2; do
  start_ps "o$k" "$tmp/db-$k" "$tmp/ck-$k"
  grep -q 'restored [1-9][0-9]* groups' "$tmp/o$k.log" || fail "o$k restored nothing: $(cat "$tmp/o$k.log")"
done
stop_all
echo "reshard CLI test: 2 -> 3 -> 2 shards, $rows rows, $sum1 both ways, dense byte-identical; a store in use refused"
