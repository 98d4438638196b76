#!/usr/bin/env bash
# Decentralized averaging (rpc/peer/gossip_transport.c: pull one peer a round,
# ring schedule) and aggregation trees (rpc/tree/tree_transport.c: every peer,
# summed up a forest packed over the links) against the PS path.
#
# (a) Model quality on 127.0.0.1: TRAINERS ctr-train processes, each its
#     share of USE_ROWS rows once: no sync, S-EASGD and S-MA through one
#     shadowsync-ps, S-MA between peers by ring gossip and by trees (no
#     PS). Held-out NE of each process's replica, averaged; examples/s
#     summed.
# (b) On the emulated cluster (root; bench/emu-cluster.sh): HOSTS x
#     PER_HOST trainers with dense groups of DENSE floats, for each shape in
#     SHAPES (TRAINER_LINKS:PS_LINK:SLOW_HOSTS[:DELAY]: uniform fast,
#     uniform slow, a slow PS uplink, SLOW_HOSTS trainer hosts on
#     SLOW_RATE links, and high latency: DELAY one way per link, so
#     2 x DELAY host to host; bench/emu-lib.sh):
#     S-EASGD and S-MA through a PS host (an agent per host), S-MA by ring
#     gossip and by trees. Total examples/s, the sync gap (median p50,
#     largest p99) and rounds per trainer-second.
# (c) NE on the same emulated shapes (root): TRAINERS real ctr-train
#     processes, one per host, each its share of USE_ROWS rows once (as in
#     (a), but every process on its own shaped link; emu-cluster.sh
#     --trainer ctr): no sync, S-EASGD and S-MA through a PS host, S-MA by
#     ring gossip and by trees. Held-out NE averaged over the processes,
#     total examples/s, the sync gap. GAP_SHAPES and QUALITY_SHAPES (default
#     SHAPES) choose the shapes of (b) and (c); "" skips one.
#   bash bench/decentralized.sh      # TRAINERS=4 USE_ROWS=400000 HOSTS=4 PER_HOST=2 DENSE=4194304
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-1000000}
USE_ROWS=${USE_ROWS:-400000}
TRAINERS=${TRAINERS:-4}
HOSTS=${HOSTS:-4} PER_HOST=${PER_HOST:-2} DENSE=${DENSE:-4194304} SECS=${SECS:-15}
SHAPES=${SHAPES:-10gbit:10gbit:0 1gbit:1gbit:0 10gbit:1gbit:0 10gbit:10gbit:2 10gbit:10gbit:0:2ms}
SLOW_RATE=${SLOW_RATE:-1gbit}
SETUPS_A=${SETUPS_A:-none ps-easgd ps-ma peers-ma peers-tree}  # also: ps-bmuf peers-tree-bmuf
GAP_SHAPES=${GAP_SHAPES-$SHAPES} QUALITY_SHAPES=${QUALITY_SHAPES-$SHAPES} # (b)'s and (c)'s; "" skips
make_data "$ROWS"
B=./build/bin
BASE_PORT=${BASE_PORT:-27300}

ps_pid=""
cleanup() {
  [ -z "$ps_pid" ] || kill "$ps_pid" 2>/dev/null || true
}
trap cleanup EXIT

run_procs() { # setup -> prints "ne examples_per_s failed_rounds"
  local r peers="" extra=()
  for r in $(seq 0 $((TRAINERS - 1))); do peers+="${peers:+,}127.0.0.1:$((BASE_PORT + r))"; done
  case $1 in
    none) extra=(--ps 127.0.0.1:1 --sync none) ;;
    ps-easgd) extra=(--ps "$addr" --algo easgd) ;;
    ps-ma) extra=(--ps "$addr" --algo ma) ;;
    peers-ma) extra=(--peers "$peers" --algo ma) ;;
    peers-tree) extra=(--peers "$peers" --algo ma --peer-schedule tree) ;;
    ps-bmuf) extra=(--ps "$addr" --algo bmuf) ;;
    peers-tree-bmuf) extra=(--peers "$peers" --algo bmuf --peer-schedule tree) ;;
  esac
  bench_trainers out/bench-dec "${extra[@]}"
}

echo "(a) quality: $TRAINERS ctr-train processes on 127.0.0.1, $USE_ROWS rows once"
printf '%-10s %10s %12s %14s\n' setup NE examples/s failed_rounds
# A fresh PS for every setup: a PS group keeps its state (the S-EASGD
# centre, S-BMUF's block state) and the kind of its rounds for good, so a
# setup after another on the same PS would start from the last one's model,
# or have every round refused (S-BMUF after S-MA).
for setup in $SETUPS_A; do
  $B/shadowsync-ps --listen 127.0.0.1:0 --http "" >out/bench-dec-ps.log 2>&1 &
  ps_pid=$!
  for _ in $(seq 100); do grep -q "listening on" out/bench-dec-ps.log && break; sleep 0.05; done
  addr=$(grep -o 'listening on [0-9.:]*' out/bench-dec-ps.log | awk '{print $3}')
  read -r ne rate failed < <(run_procs "$setup")
  printf '%-10s %10s %12s %14s\n' "$setup" "$ne" "$rate" "$failed"
  kill "$ps_pid"
  wait "$ps_pid" 2>/dev/null || true
  ps_pid=""
done

[ "$(id -u)" = 0 ] || { echo "(b) skipped: the emulated cluster needs root"; exit 0; }
field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2}'; }
echo
echo "(b) emulated: $HOSTS hosts x $PER_HOST trainers, dense $DENSE floats, $SECS s per run"
printf '%-20s %-10s %12s %8s %8s %16s\n' links:ps:slow:delay setup examples/s gap_p50 gap_p99 rounds/trainer/s
for shape in $GAP_SHAPES; do
  IFS=: read -r trainer_rate ps_rate slow delay <<<"$shape"
  for setup in "ps-easgd --algo easgd" "ps-ma --algo ma" "peers-ma --algo ma --peers 1" \
    "peers-tree --algo ma --peers 1 --peer-schedule tree"; do
    set -- $setup
    label=$1
    shift
    sum=$(bash bench/emu-cluster.sh --ps 1 --hosts "$HOSTS" --per-host "$PER_HOST" \
      --dense-floats "$DENSE" --rate "$trainer_rate" --ps-rate "$ps_rate" --seconds "$SECS" \
      --slow-hosts "${slow:-0}" --slow-rate "$SLOW_RATE" --delay "${delay:-0}" --quiet "$@" | grep '^emu-cluster: ps=')
    echo "$sum" >&2
    printf '%-20s %-10s %12s %8s %8s %16.2f\n' "$shape" "$label" "$(field "$sum" examples/s)" \
      "$(field "$sum" gap_p50)" "$(field "$sum" gap_p99)" \
      "$(awk -v r="$(field "$sum" rounds)" -v n="$(field "$sum" trainers)" -v s="$SECS" 'BEGIN {print r / n / s}')"
  done
done

[ -n "$QUALITY_SHAPES" ] || exit 0
echo
echo "(c) NE on the emulated shapes: $TRAINERS ctr-train processes, one per host, $USE_ROWS rows once"
printf '%-20s %-10s %10s %12s %8s %8s %8s\n' links:ps:slow:delay setup NE examples/s gap_p50 gap_p99 failed
for shape in $QUALITY_SHAPES; do
  IFS=: read -r trainer_rate ps_rate slow delay <<<"$shape"
  for setup in "none --mode none" "ps-easgd --algo easgd" "ps-ma --algo ma" "peers-ma --algo ma --peers 1" \
    "peers-tree --algo ma --peers 1 --peer-schedule tree"; do
    set -- $setup
    label=$1
    shift
    sum=$(bash bench/emu-cluster.sh --trainer ctr --train "out/train-$ROWS.tsv" --test out/test.tsv \
      --rows "$USE_ROWS" --ps 1 --hosts "$TRAINERS" --per-host 1 --agent 0 --rate "$trainer_rate" \
      --ps-rate "$ps_rate" --slow-hosts "${slow:-0}" --slow-rate "$SLOW_RATE" --delay "${delay:-0}" \
      --quiet "$@" | grep '^emu-cluster: ps=')
    echo "$sum" >&2
    printf '%-20s %-10s %10s %12s %8s %8s %8s\n' "$shape" "$label" "$(field "$sum" ne)" \
      "$(field "$sum" examples/s)" "$(field "$sum" gap_p50)" "$(field "$sum" gap_p99)" "$(field "$sum" failed)"
  done
done
