#!/usr/bin/env bash
# Aggregation trees when a member dies: TRAINERS ctr-train processes on
# 127.0.0.1 average over trees (--peers, --peer-schedule tree, S-MA); rank
# TRAINERS-1 is killed (SIGKILL: it says nothing) KILL_AFTER seconds in.
# Each survivor's summary says how many rounds it completed and how many
# failed: the round that waited for the dead member fails at its deadline
# (--rpc-timeout-ms), the members probe it, leave it out, and go on.
#   bash bench/tree-member-death.sh    # TRAINERS=4 USE_ROWS=1000000 KILL_AFTER=2 TIMEOUT_MS=1000
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-1000000}
USE_ROWS=${USE_ROWS:-1000000}
TRAINERS=${TRAINERS:-4}
KILL_AFTER=${KILL_AFTER:-2}
TIMEOUT_MS=${TIMEOUT_MS:-1000}
BASE_PORT=${BASE_PORT:-27400}
make_data "$ROWS"
peers=""
for r in $(seq 0 $((TRAINERS - 1))); do peers+="${peers:+,}127.0.0.1:$((BASE_PORT + r))"; done
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for r in $(seq 0 $((TRAINERS - 1))); do
  timeout 600 ./build/bin/ctr-train --peers "$peers" --peer-schedule tree --algo ma \
    --rank "$r" --world "$TRAINERS" --rpc-timeout-ms "$TIMEOUT_MS" --train "out/train-$ROWS.tsv" \
    --max-rows "$USE_ROWS" --test out/test.tsv --max-test-rows 20000 --progress 0 \
    --trainer-name "t$r" >"out/bench-treedeath-t$r.log" 2>&1 &
  pids+=($!)
done
sleep "$KILL_AFTER"
victim=${pids[$((TRAINERS - 1))]}
kill -KILL "$(pgrep -P "$victim" ctr-train || echo "$victim")" 2>/dev/null || true
wait "$victim" 2>/dev/null || true
echo "killed rank $((TRAINERS - 1)) after ${KILL_AFTER}s; rpc_timeout_ms=$TIMEOUT_MS"
for r in $(seq 0 $((TRAINERS - 2))); do wait "${pids[$r]}" || true; done
printf '%-5s %10s %8s %12s %8s\n' rank rounds failed examples/s NE
for r in $(seq 0 $((TRAINERS - 2))); do
  o=$(cat "out/bench-treedeath-t$r.log")
  printf '%-5s %10s %8s %12s %8s\n' "$r" "$(summary_field "$o" sync_rounds_sum)" \
    "$(summary_field "$o" failed_rounds_sum)" "$(summary_field "$o" examples/s)" \
    "$(summary_field "$o" test_ne_train_ctr)"
done
grep -h "member_gone\|member_back" out/bench-treedeath-t*.log | head -6 || true
