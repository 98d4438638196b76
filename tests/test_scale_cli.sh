#!/usr/bin/env bash
# shadowsync-ctl scale as an operator runs it: 3 shadowsync-ps processes
# watch one shard map (2 of them named in it); a trainer (ctr-gen |
# ctr-train, --emb remote routed by the map) and a writer that logs every
# row whose push was acknowledged (shadowsync-emu-emb) run while the fleet
# goes 2 -> 3 -> 2. Each scale waits until the moves are done (and, when
# shrinking, the leaving PS is empty); the third PS is then stopped, as
# `kubectl scale` would, and every acknowledged row is still there. Bad
# input is refused with exit 2, a PS that does not answer with exit 1,
# and a scale to the map's own size does nothing.
#   test_scale_cli.sh BIN_DIR
set -euo pipefail
bin=$1
NAME=test_scale_cli
source "$(dirname "$0")/cli_lib.sh"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
map=$tmp/fleet.map
printf 'epoch 1\nps 127.0.0.1:1\n' >"$map" # a placeholder until the ports are known

addrs=() https=()
for k in 0 1 2; do
  "$bin/shadowsync-ps" --listen 127.0.0.1:0 --http 127.0.0.1:0 --insecure-loopback \
    --shard-map "$map" --emb-db "$tmp/db$k" >"$tmp/ps$k.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q 'listening on' "$tmp/ps$k.log" && break; sleep 0.1; done
  line=$(grep -o 'listening on [0-9.:]*, http on [0-9.:]*' "$tmp/ps$k.log") || fail "ps$k did not start: $(cat "$tmp/ps$k.log")"
  addrs[k]=$(awk '{print $3}' <<<"${line%,*}") https[k]=http://$(awk '{print $NF}' <<<"$line")
done
fleet="${addrs[0]},${addrs[1]},${addrs[2]}" urls="${https[0]},${https[1]},${https[2]}"
printf 'epoch 2\nps %s,%s\n' "${addrs[0]}" "${addrs[1]}" >"$map.tmp" && mv "$map.tmp" "$map"
ctl() { "$bin/shadowsync-ctl" scale --map "$map" --fleet "$fleet" --http-urls "$urls" "$@"; }

expect_refusal "--map is needed" "$bin/shadowsync-ctl" scale --replicas 3
expect_refusal "--replicas (1 or more) is needed" "$bin/shadowsync-ctl" scale --map "$map"
expect_refusal "names 2 PS; the change needs 3" ctl --replicas 3 --fleet "${addrs[0]},${addrs[1]}"
expect_refusal "the map's list must be the fleet's first 2" ctl --replicas 3 \
  --fleet "${addrs[1]},${addrs[0]},${addrs[2]}"
expect_refusal "none.map: No such file" "$bin/shadowsync-ctl" scale --map "$tmp/none.map" --replicas 3
rc=0
ctl --replicas 3 --http-urls "${https[0]},${https[1]},http://127.0.0.1:1" >"$tmp/down.out" 2>&1 || rc=$?
[ $rc = 1 ] && grep -q "does not answer" "$tmp/down.out" || fail "a PS down: exit $rc, $(cat "$tmp/down.out")"
grep -q '^epoch 2$' "$map" || fail "a refused scale wrote the map: $(cat "$map")"
ctl --replicas 2 >"$tmp/same.out" || fail "a scale to its own size: $(cat "$tmp/same.out")"
grep -q "nothing to do" "$tmp/same.out" || fail "$(cat "$tmp/same.out")"

sleep 1 # every PS serves epoch 2
"$bin/shadowsync-emu-emb" --shard-map "$map" --log "$tmp/acked.log" --seconds 12 \
  --interval-ms 50 >"$tmp/writer.log" 2>&1 &
writer=$!
"$bin/ctr-gen" --drift --rows 2000000 --out - --quiet 2>/dev/null |
  "$bin/ctr-train" --train - --emb remote --emb-shard-map "$map" --table-rows 4096 --progress 0 \
    >"$tmp/train.log" 2>&1 &
trainer=$!
pids+=("$writer" "$trainer")
sleep 2
ctl --replicas 3 --interval-ms 200 --timeout-s 60 >"$tmp/grow.out" 2>&1 || fail "2 -> 3: $(cat "$tmp/grow.out")"
grep -q "^scale: done in .* 3/3 PS on epoch 3, 0 tables' moves pending, [1-9][0-9]* rows moved" "$tmp/grow.out" ||
  fail "2 -> 3 moved nothing: $(cat "$tmp/grow.out")"
sleep 2
ctl --replicas 2 --interval-ms 200 --timeout-s 60 >"$tmp/shrink.out" 2>&1 || fail "3 -> 2: $(cat "$tmp/shrink.out")"
grep -q "^scale: done in .* [1-9][0-9]* rows moved, leaving PS hold 0 rows and 0 members" "$tmp/shrink.out" ||
  fail "3 -> 2: $(cat "$tmp/shrink.out")"
grep -q 'kubectl scale statefulset ps --replicas 2' "$tmp/shrink.out" || fail "$(cat "$tmp/shrink.out")"
printf 'epoch 4\nps %s,%s\nfrom %s\n' "${addrs[0]}" "${addrs[1]}" "$fleet" | cmp - <(grep -v '^#' "$map") ||
  fail "the map: $(cat "$map")"
kill "${pids[2]}" # drained: removed, as kubectl scale would
wait "$writer" || fail "the writer: $(tail -3 "$tmp/writer.log")"
kill "$trainer" 2>/dev/null || true
verify=$("$bin/shadowsync-emu-emb" --shard-map "$map" --verify "$tmp/acked.log" 2>&1) || fail "verify: $verify"
grep -q 'lost=0' <<<"$verify" || fail "rows lost: $verify"
grep -q 'acked=[1-9]' <<<"$verify" || fail "nothing acknowledged: $verify"
grep -h "^scale: done" "$tmp/grow.out" "$tmp/shrink.out"
echo "test_scale_cli: ok: $(grep -o 'done in [0-9.]* s' "$tmp/grow.out"), $(grep -o 'done in [0-9.]* s' "$tmp/shrink.out"); ${verify#emu-emb-verify: }"
