#!/usr/bin/env bash
# (a) What does a trainer pay for syncing through the host's agent, against
# syncing in its own process and against no sync? One ctr-train process
# (1 Hogwild worker) against one shadowsync-ps over loopback: --sync none,
# in-process shadow pool (--ps), agent (--agent: the shadow pool runs in
# shadowsync-agent on the trainer's shared-memory replica). REPS interleaved
# reps; median examples/s and the median of the paired ratios to `none`.
# (b) PS traffic for 2 trainers on one host through one agent, with and
# without --host-average: bytes/s received + sent by the PS (its
# shadowsync_rpc_*_bytes_total over the run), rounds and NE.
#   bash bench/agent-overhead.sh
#   REPS=5 USE_ROWS=300000 bash bench/agent-overhead.sh
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-1000000}
USE_ROWS=${USE_ROWS:-200000}
REPS=${REPS:-3}
make_data "$ROWS"
B=build/tools
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

$B/shadowsync-ps --listen 127.0.0.1:0 --http 127.0.0.1:0 >out/bench-ps.log 2>&1 &
pids+=($!)
for _ in $(seq 50); do grep -q "http on" out/bench-ps.log && break; sleep 0.1; done
addr=$(grep -o 'listening on [0-9.:]*' out/bench-ps.log | awk '{print $3}')
ps_http=$(grep -o 'http on [0-9.:]*' out/bench-ps.log | awk '{print $3}')

# start_agent [flags]: an agent on out/bench-agent.sock against the PS.
start_agent() {
  $B/shadowsync-agent --socket out/bench-agent.sock --ps "$addr" --http 127.0.0.1:0 "$@" \
    >out/bench-agent.log 2>&1 &
  agent=$!
  for _ in $(seq 50); do grep -q "http on" out/bench-agent.log && break; sleep 0.1; done
}
stop_agent() { kill "$agent"; wait "$agent" 2>/dev/null || true; }

train() {
  $B/ctr-train --train "out/train-$ROWS.tsv" --max-rows "$USE_ROWS" --test out/test.tsv \
    --max-test-rows 20000 --final-rounds 0 --progress 0 "$@"
}

echo "(a) one trainer, 1 worker: examples/s, $REPS interleaved reps"
MODES=(none in-process agent)
declare -A RATE RATIO GAP
start_agent
for rep in $(seq "$REPS"); do
  for mode in "${MODES[@]}"; do
    case $mode in
      none) out=$(train --ps "$addr" --sync none) ;;
      in-process) out=$(train --ps "$addr" --sync shadow) ;;
      agent) out=$(train --agent out/bench-agent.sock --sync shadow) ;;
    esac
    rate=$(summary_field "$out" examples/s)
    [ "$mode" != none ] || none_rate=$rate
    RATE[$mode]+="$rate "
    RATIO[$mode]+="$(awk -v a="$rate" -v b="$none_rate" 'BEGIN {print a / b}') "
    GAP[$mode]+="$(summary_field "$out" sync_gap_mean_trainers) "
  done
done
stop_agent
printf "%-12s %12s %16s %14s\n" mode examples/s "ratio to none" sync_gap_mean
for mode in "${MODES[@]}"; do
  printf "%-12s %12.0f %16.3f %14s\n" "$mode" \
    "$(tr ' ' '\n' <<<"${RATE[$mode]}" | grep . | median)" \
    "$(tr ' ' '\n' <<<"${RATIO[$mode]}" | grep . | median)" \
    "$([ "$mode" = none ] && echo - || tr ' ' '\n' <<<"${GAP[$mode]}" | grep . | median)"
done

ps_bytes() {
  bench_metric_sum "$ps_http" '^shadowsync_rpc_(received|sent)_bytes_total[{]method="/shadowsync.v1.DenseSync/'
}

echo
echo "(b) two trainers on one host through one agent: PS traffic"
printf "%-14s %14s %10s %12s %10s\n" agent "PS bytes/s" seconds sync_rounds ne_mean
for variant in per-trainer host-average; do
  flags=()
  [ "$variant" = host-average ] && flags=(--host-average)
  start_agent "${flags[@]}"
  before=$(ps_bytes)
  t0=$(date +%s.%N)
  for r in 0 1; do
    train --agent out/bench-agent.sock --sync shadow --rank "$r" --world 2 >"out/bench-agent-t$r.log" &
    tp[$r]=$!
  done
  wait "${tp[0]}" "${tp[1]}"
  t1=$(date +%s.%N)
  after=$(ps_bytes)
  stop_agent
  rounds=0 ne=0
  for r in 0 1; do
    out=$(cat "out/bench-agent-t$r.log")
    rounds=$((rounds + $(summary_field "$out" sync_rounds_sum)))
    ne=$(awk -v a="$ne" -v b="$(summary_field "$out" test_ne_train_ctr)" 'BEGIN {print a + b / 2}')
  done
  rate=$(awk -v a="$before" -v b="$after" -v s="$t0" -v e="$t1" 'BEGIN {printf "%.0f", (b - a) / (e - s)}')
  eval "bytes_${variant//-/_}=\$rate"
  printf "%-14s %14s %10.1f %12s %10.4f\n" "$variant" "$rate" "$(awk -v s="$t0" -v e="$t1" 'BEGIN {print e - s}')" "$rounds" "$ne"
done
awk -v a="${bytes_host_average:-0}" -v b="${bytes_per_trainer:-1}" \
  'BEGIN {printf "PS bytes/s with host averaging / without: %.3f\n", a / b}'
