#!/usr/bin/env bash
# Starts a local ShadowSync cluster on 127.0.0.1 and trains on it: S
# shadowsync-ps shards and N ctr-train trainer processes (one per trainer);
# with --agent, a shadowsync-agent syncs every trainer's dense replica (the
# trainers only train), else each trainer runs its own shadow pool. Prints
# each trainer's result line and a total line, then stops everything.
#   tools/cluster.sh --train F --test F [--ps S] [--trainers N] [--agent]
#                    [--out DIR] [-- extra ctr-train flags, e.g. --algo ma]
# Expects a build in build/ (tools/demo.sh builds it).
set -euo pipefail
cd "$(dirname "$0")/.."
PS_COUNT=2 TRAINERS=3 OUT=out/cluster TRAIN= TEST=
AGENT=0
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --ps) PS_COUNT=$2; shift 2 ;;
    --trainers) TRAINERS=$2; shift 2 ;;
    --agent) AGENT=1; shift ;;
    --train) TRAIN=$2; shift 2 ;;
    --test) TEST=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --help|-h) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "cluster.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
[ -n "$TRAIN" ] && [ -n "$TEST" ] || { echo "cluster.sh: --train and --test are required" >&2; exit 2; }
B=build/bin
mkdir -p "$OUT"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# Every call carries a token (no listener is open to the host's other
# users): one made for this run, 0600, read by the PS, the agent and the
# trainers through SHADOWSYNC_AUTH_TOKEN_FILE.
export SHADOWSYNC_AUTH_TOKEN_FILE="$OUT/token"
(umask 077 && od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$SHADOWSYNC_AUTH_TOKEN_FILE")

targets=
for s in $(seq 0 $((PS_COUNT - 1))); do
  env -u SHADOWSYNC_INSECURE_LOOPBACK "$B/shadowsync-ps" --listen 127.0.0.1:0 >"$OUT/ps$s.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q "listening on" "$OUT/ps$s.log" && break; sleep 0.1; done
  addr=$(grep -o 'listening on [0-9.:]*' "$OUT/ps$s.log" | awk '{print $3}')
  [ -n "$addr" ] || { echo "cluster.sh: shadowsync-ps $s did not start:" >&2; cat "$OUT/ps$s.log" >&2; exit 1; }
  targets=${targets:+$targets,}$addr
  echo "cluster: ps $s on $addr"
done

sync_flags=()
if [ "$AGENT" = 1 ]; then
  "$B/shadowsync-agent" --socket "$OUT/agent.sock" --ps "$targets" --http 127.0.0.1:0 \
    >"$OUT/agent.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q "http on" "$OUT/agent.log" && break; sleep 0.1; done
  agent_http=$(grep -o 'http on [0-9.:]*' "$OUT/agent.log" | awk '{print $3}')
  [ -n "$agent_http" ] || { echo "cluster.sh: shadowsync-agent did not start:" >&2; cat "$OUT/agent.log" >&2; exit 1; }
  echo "cluster: agent on $OUT/agent.sock, metrics on http://$agent_http/metrics"
  echo "         (live view: build/bin/shadowsync-ctl watch --url http://$agent_http)"
  sync_flags=(--agent "$OUT/agent.sock")
fi

tpids=()
for r in $(seq 0 $((TRAINERS - 1))); do
  "$B/ctr-train" --ps "$targets" "${sync_flags[@]}" --rank "$r" --world "$TRAINERS" --train "$TRAIN" --test "$TEST" \
    --progress 2 --eval-each "$@" >"$OUT/trainer$r.log" 2>&1 &
  tpids+=($!)
done
echo "cluster: $TRAINERS trainer processes syncing through ${AGENT/1/the agent and }$targets (logs in $OUT/)"
# Trainer 0's progress on screen while the cluster trains.
tail -n +1 -f "$OUT/trainer0.log" --pid "${tpids[0]}" | grep --line-buffered '^progress' | sed 's/^/trainer 0 /' &
watcher=$!
failed=0
for p in "${tpids[@]}"; do wait "$p" || failed=1; done
wait "$watcher" 2>/dev/null || true
for r in $(seq 0 $((TRAINERS - 1))); do
  grep -h '^trainer ' "$OUT/trainer$r.log" || { echo "trainer $r failed:" >&2; tail -5 "$OUT/trainer$r.log" >&2; }
done
[ "$failed" = 0 ] || { echo "cluster: a trainer failed" >&2; exit 1; }
if [ "$AGENT" = 1 ]; then
  echo "agent: $("$B/shadowsync-ctl" status --url "http://$agent_http" | grep -o '"rounds_total": *[0-9]*' | tr -d '" ' | tr : =) (all trainers' rounds, run by the agent)"
fi
cat "$OUT"/trainer*.log | grep '^summary:' | awk '
  { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    n++; ex += v["examples"]; eps += v["examples/s"]; ne += v["test_ne_train_ctr"]; auc += v["test_auc"];
    gap += v["sync_gap_mean_trainers"]; if (v["sync_gap_p99_worst"] + 0 > p99) p99 = v["sync_gap_p99_worst"] + 0
    rounds += v["sync_rounds_sum"] }
  END { printf "total: trainers=%d examples=%d examples/s=%.0f sync_rounds_sum=%d sync_gap_mean_trainers=%.2f sync_gap_p99_worst=%d test_ne_mean=%.4f test_auc_mean=%.4f\n",
        n, ex, eps, rounds, gap / n, p99, ne / n, auc / n }'
