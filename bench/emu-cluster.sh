#!/usr/bin/env bash
# An emulated multi-host ShadowSync cluster on one machine (run as root).
#
# Every host is a network namespace with one veth link to a bridge in a
# "switch" namespace; both directions of every link are shaped with tc
# (--rate; --delay with netem, or with shadowsync-emu-delay where the
# kernel has no netem; --loss with netem or nftables). S PS
# hosts run shadowsync-ps; H trainer hosts run a shadowsync-agent and k
# shadowsync-emu-trainer processes each (compute emulated per step, a dense
# group of --dense-floats), so that 64 trainers fit on 2 cores and what is
# measured is the sync system. Hosts get addresses in 198.18.0.0/16 (the
# benchmark range) on their veth only; no namespace has a route out, and
# everything (processes, namespaces, files) is removed at exit.
#
# --trainer ctr runs real ctr-train processes instead (one model each, its
# share of --rows rows of --train once, scored on --test): a quality line
# with the held-out NE, for sync setups compared on shaped links.
#
# Prints one line per trainer and a summary line:
#   emu-cluster: ps=S hosts=H trainers=N mode=M algo=A encoding=E peers=0|1 schedule=S slow_hosts=K:R k=K dense=D rate=R ps_rate=R delay=D
#     examples/s=TOTAL per_trainer=MEAN min_trainer=MIN gap_p50=.. gap_p99=..
#     gap_max=.. rounds=.. failed=.. steps=.. trainer_cpu_s=.. ps_cpu_s=..
#     agent_cpu_s=..
# (gap: steps between two completed rounds of a trainer; p50 is the median
# over trainers of their p50, p99 and max the largest over trainers; CPU
# seconds while training, of all trainers, all PS and all agents: the
# simulator's calibration, bench/sim-calibrate.sh).
#
#   bench/emu-cluster.sh --ps 1 --hosts 2 --per-host 2 --seconds 5
#   bench/emu-cluster.sh --help
set -euo pipefail

PS=1 HOSTS=2 PER_HOST=2 DENSE=1048576 SECS=10 RATE=10gbit DELAY=0 LOSS=0
MODE=background ALGO=easgd K=10 STEP_US=10000 BATCH=1024 AGENT=1 TOUCH=4096 NICE=0 COMPUTE=paced
ENCODING=f32 PEERS=0 PS_RATE= SCHEDULE=ring SLOW_HOSTS=0 SLOW_RATE= BULK=1
TRAINER=emu TRAIN= TEST= ROWS=100000
BIN=${SS_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build/bin}
QUIET=0

usage() {
  cat <<EOF
Usage: bench/emu-cluster.sh [flags]   (root: it creates network namespaces)

  --ps S            PS hosts (each one shadowsync-ps shard)          [$PS]
  --hosts H         trainer hosts                                   [$HOSTS]
  --per-host k      trainers per trainer host                       [$PER_HOST]
  --dense-floats D  floats in each trainer's dense group            [$DENSE]
  --seconds T       training time of every trainer                  [$SECS]
  --step-us U       emulated compute per step                       [$STEP_US]
  --compute C       paced | sleep | spin (shadowsync-emu-trainer    [$COMPUTE]
                    --help: paced = the trainer's own cores)
  --batch B         examples per step                               [$BATCH]
  --mode M          background | foreground | none                  [$MODE]
  --algo A          easgd | ma | bmuf                               [$ALGO]
  --sync-every K    foreground: a round every K steps               [$K]
  --encoding E      compressed sync with the PS: f32 | fp16 | bf16  [$ENCODING]
                    | int8 (the agents' --encoding, or the trainers'
                    SHADOWSYNC_ENCODING without agents)
  --agent 0|1       background: sync through one agent per host     [$AGENT]
  --bulk 0|1        dense chunks on the PS's bulk stream, the       [$BULK]
                    defaults (0: --bulk-listen "" and bulk false)
  --peers 0|1       decentralized averaging between the trainers,   [$PEERS]
                    no PS on the dense path (--algo ma; no agents)
  --peer-schedule S --peers 1: ring | random (pull one peer a round) [$SCHEDULE]
                    | tree (aggregation trees over the links, from a
                    topology file this script writes)
  --rate R          every link, each direction (tc units)           [$RATE]
  --ps-rate R       the PS hosts' links instead (heterogeneous       [same]
                    bandwidth: a slower PS uplink)
  --slow-hosts K    the last K trainer hosts' links at --slow-rate   [$SLOW_HOSTS]
  --slow-rate R     (heterogeneous bandwidth between trainers)
  --delay D         one-way latency per link: 50us, 2ms (netem, or  [$DELAY]
                    shadowsync-emu-delay without it; host to host
                    crosses two links: 2 x D one way)
  --loss P          packet loss per link, percent (netem or nft)   [$LOSS]
  --sync-nice N     run PS and agents at this nice level            [$NICE]
                    (all hosts share this machine's cores: at 10 the
                    sync system yields to the trainers' steps, as PS
                    hosts on their own machines and a background pool
                    would; 0 = same priority)
  --trainer T       emu (shadowsync-emu-trainer) | ctr (ctr-train:  [$TRAINER]
                    a real model; --seconds, --step-us, --batch,
                    --dense-floats and --compute do not apply)
  --train F         --trainer ctr: training rows (TSV)
  --test F          --trainer ctr: held-out rows (first 20,000 used)
  --rows N          --trainer ctr: rows of --train shared by all    [$ROWS]
                    trainers, each its 1/N once
  --quiet           only the summary line
  --help            this text
Binaries from \$SS_BIN (default: build/bin next to this script).
EOF
}

# shellcheck source=bench/help.sh
source "$(dirname "$0")/help.sh"
bench_named_flags "
  ps:PS hosts:HOSTS per-host:PER_HOST dense-floats:DENSE seconds:SECS
  step-us:STEP_US compute:COMPUTE batch:BATCH mode:MODE algo:ALGO
  encoding:ENCODING sync-every:K agent:AGENT peers:PEERS bulk:BULK
  peer-schedule:SCHEDULE slow-hosts:SLOW_HOSTS slow-rate:SLOW_RATE rate:RATE
  ps-rate:PS_RATE delay:DELAY loss:LOSS sync-nice:NICE trainer:TRAINER
  train:TRAIN test:TEST rows:ROWS quiet:QUIET!" "$@"

EMU=emu-cluster
source "$(dirname "$0")/emu-lib.sh"
[ "$(id -u)" = 0 ] || die "needs root: it creates network namespaces and veth links"
case $TRAINER in
emu) trainer_bin=shadowsync-emu-trainer ;;
ctr)
  trainer_bin=ctr-train
  [ -r "$TRAIN" ] || die "--trainer ctr needs --train FILE (readable), not \"$TRAIN\""
  [ -r "$TEST" ] || die "--trainer ctr needs --test FILE (readable), not \"$TEST\""
  [[ $ROWS =~ ^[1-9][0-9]*$ ]] || die "--rows must be a positive count, not $ROWS"
  ;;
*) die "--trainer must be emu or ctr, not $TRAINER" ;;
esac
for b in shadowsync-ps shadowsync-agent $trainer_bin; do
  [ -x "$BIN/$b" ] || die "no $BIN/$b (build first, or set SS_BIN)"
done
case $MODE in background | foreground | none) ;; *) die "--mode must be background, foreground or none" ;; esac
case $ALGO in easgd | ma | bmuf) ;; *) die "--algo must be easgd, ma or bmuf" ;; esac
[ "$PS" -ge 1 ] && [ "$PS" -le 200 ] || die "--ps must be 1..200"
[ "$HOSTS" -ge 1 ] && [ "$HOSTS" -le 200 ] || die "--hosts must be 1..200"
[ "$PER_HOST" -ge 1 ] || die "--per-host must be >= 1"
[ "$MODE" = background ] || AGENT=0 # the agent syncs in the background only
if [ "$PEERS" = 1 ]; then
  [ "$ALGO" = ma ] || { [ "$ALGO" = bmuf ] && [ "$SCHEDULE" = tree ]; } ||
    die "--peers 1 needs --algo ma (or bmuf with --peer-schedule tree)"
  [ $((HOSTS * PER_HOST)) -ge 2 ] || die "--peers 1 needs at least 2 trainers"
  AGENT=0 # each trainer serves its own snapshots
fi
tc_rate_bits "$RATE" >/dev/null     # a bad --rate stops here
[ -z "$PS_RATE" ] || tc_rate_bits "$PS_RATE" >/dev/null
case $SCHEDULE in ring | random | tree) ;; *) die "--peer-schedule must be ring, random or tree" ;; esac
[ "$SLOW_HOSTS" -ge 0 ] && [ "$SLOW_HOSTS" -le "$HOSTS" ] || die "--slow-hosts must be 0..--hosts"
[ "$SLOW_HOSTS" = 0 ] || [ -n "$SLOW_RATE" ] || die "--slow-hosts needs --slow-rate"
[ -z "$SLOW_RATE" ] || tc_rate_bits "$SLOW_RATE" >/dev/null

emu_init


SYNC_PIDS=() # role:pid of the PS and agents, for their CPU time
PS_LIST=
for i in $(seq 0 $((PS - 1))); do
  addr=198.18.1.$((i + 1))
  HOST_RATE=$PS_RATE add_host "$ID-p$i" "$addr"
  if [ "$MODE" != none ] && [ "$PEERS" != 1 ]; then
    bulk_listen=()
    [ "$BULK" = 1 ] && bulk_listen=(--bulk-listen "$addr:7071") || bulk_listen=(--bulk-listen "")
    ip netns exec "$ID-p$i" env -u SHADOWSYNC_INSECURE_LOOPBACK nice -n "$NICE" "$BIN/shadowsync-ps" --listen "$addr:7070" --http "" \
      --auth-token-file "$TMP/token" "${bulk_listen[@]}" >"$TMP/ps$i.log" 2>&1 &
    PIDS+=($!)
    wait_line "$TMP/ps$i.log" "listening on" $!
    SYNC_PIDS+=(ps:$!)
  fi
  PS_LIST+="${PS_LIST:+,}$addr:7070"
done

TRAINERS=()
for j in $(seq 0 $((HOSTS - 1))); do
  ns=$ID-t$j
  host_rate=$RATE
  [ "$j" -lt $((HOSTS - SLOW_HOSTS)) ] || host_rate=$SLOW_RATE
  HOST_RATE=$host_rate add_host "$ns" "198.18.2.$((j + 1))"
  sock=
  if [ "$AGENT" = 1 ]; then
    sock=$TMP/h$j/agent.sock
    ip netns exec "$ns" nice -n "$NICE" "$BIN/shadowsync-agent" --ps "$PS_LIST" --socket "$sock" --http "" --encoding "$ENCODING" --bulk "$([ "$BULK" = 1 ] && echo true || echo false)" \
      >"$TMP/agent$j.log" 2>&1 &
    PIDS+=($!)
    wait_line "$TMP/agent$j.log" "listening on" $!
    SYNC_PIDS+=(agent:$!)
  fi
done
what="dense $DENSE floats, ${SECS} s"
[ "$TRAINER" = emu ] || what="ctr-train, $ROWS rows of $TRAIN once"
say "$PS PS host(s), $HOSTS trainer host(s) x $PER_HOST trainer(s), links $RATE$([ -n "$PS_RATE" ] && echo " (PS hosts $PS_RATE)")$([ "$DELAY_US" != 0 ] && echo " delay $DELAY") loss $LOSS%, mode $MODE algo $ALGO encoding $ENCODING$([ "$PEERS" = 1 ] && echo ", decentralized (no PS)"), $what"

# Decentralized: every trainer's address, in rank order (host-major).
PEER_LIST=
for j in $(seq 0 $((HOSTS - 1))); do
  for i in $(seq 0 $((PER_HOST - 1))); do
    PEER_LIST+="${PEER_LIST:+,}198.18.2.$((j + 1)):$((7100 + i))"
  done
done
# The links as the trees' packer sees them (rpc/tree/tree_transport.h): every
# host's own link at its rate; two hosts meet through the bridge, so at
# the slower of the two.
gbit() { awk -v b="$(tc_rate_bits "$1")" 'BEGIN { printf "%g", b / 1e9 }'; }
{
  echo "# written by bench/emu-cluster.sh"
  echo "default $(gbit "$RATE")"
  for j in $(seq $((HOSTS - SLOW_HOSTS)) $((HOSTS - 1))); do
    echo "nic 198.18.2.$((j + 1)) $(gbit "$SLOW_RATE")"
    for k in $(seq 0 $((HOSTS - 1))); do
      [ "$k" = "$j" ] || echo "link 198.18.2.$((j + 1)) 198.18.2.$((k + 1)) $(gbit "$SLOW_RATE")"
    done
  done
} >"$TMP/topology"

# median_of KEY LINES: the median over the lines of their KEY=number.
median_of() {
  sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$2" | sort -g |
    awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}

# --trainer ctr: real ctr-train processes, each its share of the rows once;
# the NE of each one's replica on the held-out rows, averaged.
if [ "$TRAINER" = ctr ]; then
  case $MODE in background) sync=shadow ;; *) sync=$MODE ;; esac
  world=$((HOSTS * PER_HOST))
  for j in $(seq 0 $((HOSTS - 1))); do
    for i in $(seq 0 $((PER_HOST - 1))); do
      rank=$((j * PER_HOST + i))
      where=(--ps "$PS_LIST")
      if [ "$AGENT" = 1 ]; then
        where=(--agent "$TMP/h$j/agent.sock")
      elif [ "$PEERS" = 1 ]; then
        where=(--peers "$PEER_LIST" --peer-schedule "$SCHEDULE" --topology "$TMP/topology")
      fi
      [ "$MODE" != none ] || where=(--ps "$PS_LIST")
      timeout --kill-after=10 600 ip netns exec "$ID-t$j" "$BIN/ctr-train" --rank "$rank" \
        --world "$world" "${where[@]}" --sync "$sync" --algo "$ALGO" --sync-every "$K" \
        --epochs 1 --train "$TRAIN" --max-rows "$ROWS" --test "$TEST" --max-test-rows 20000 \
        --progress 0 --trainer-name "h${j}t$i" >"$TMP/h${j}t$i.log" 2>&1 &
      TRAINERS+=($!)
      PIDS+=($!)
    done
  done
  failed=0
  for p in "${TRAINERS[@]}"; do wait "$p" || failed=$((failed + 1)); done
  lines=$(grep -h '^summary:' "$TMP"/h*t*.log || true)
  [ "$QUIET" = 1 ] || echo "$lines"
  if [ "$failed" -gt 0 ] || [ "$(grep -c . <<<"$lines")" != "$world" ]; then
    for f in "$TMP"/h*t*.log; do grep -q '^summary:' "$f" || { echo "--- $f" >&2; tail -5 "$f" >&2; }; done
    die "$failed of $world trainers failed"
  fi
  med=$(median_of sync_gap_p50_worst "$lines")
  awk -v ps="$PS" -v hosts="$HOSTS" -v mode="$MODE" -v algo="$ALGO" -v peers="$PEERS" -v schedule="$SCHEDULE" -v med="$med" \
    -v slow="$SLOW_HOSTS:${SLOW_RATE:--}" -v rate="$RATE" -v ps_rate="${PS_RATE:-$RATE}" -v delay="$DELAY" -v rows="$ROWS" '
    { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      n++; ne += v["test_ne_train_ctr"]; auc += v["test_auc"]; total += v["examples/s"]
      rounds += v["sync_rounds_sum"]; failed += v["failed_rounds_sum"]
      if (v["sync_gap_p99_worst"] + 0 > p99) p99 = v["sync_gap_p99_worst"] + 0 }
    END {
      printf "emu-cluster: ps=%d hosts=%d trainers=%d trainer=ctr mode=%s algo=%s peers=%s schedule=%s slow_hosts=%s rate=%s ps_rate=%s delay=%s rows=%s " \
             "ne=%.5f auc=%.5f examples/s=%.0f gap_p50=%s gap_p99=%d rounds=%d failed=%d\n", ps, hosts, n, mode, algo, \
             peers, schedule, slow, rate, ps_rate, delay, rows, ne / n, auc / n, total, med, p99, rounds, failed }' <<<"$lines"
  exit 0
fi

for j in $(seq 0 $((HOSTS - 1))); do
  for i in $(seq 0 $((PER_HOST - 1))); do
    name=h${j}t$i
    via_agent=()
    if [ "$AGENT" = 1 ]; then
      via_agent=("SHADOWSYNC_AGENT=$TMP/h$j/agent.sock")
    elif [ "$PEERS" = 1 ]; then
      via_agent=("SHADOWSYNC_PS=" "SHADOWSYNC_PEERS=$PEER_LIST"
        "SHADOWSYNC_PEER_RANK=$((j * PER_HOST + i))" "SHADOWSYNC_PEER_SCHEDULE=$SCHEDULE"
        "SHADOWSYNC_TOPOLOGY=$TMP/topology")
    else
      via_agent=("SHADOWSYNC_ENCODING=$ENCODING" "SHADOWSYNC_BULK=$BULK")
    fi
    env SHADOWSYNC_PS="$PS_LIST" SHADOWSYNC_SYNC="$MODE" SHADOWSYNC_ALGO="$ALGO" \
      SHADOWSYNC_SYNC_EVERY="$K" SHADOWSYNC_TRAINER_NAME="$name" "${via_agent[@]}" \
      timeout --kill-after=10 $((${SECS%.*} + 120)) \
      ip netns exec "$ID-t$j" "$BIN/shadowsync-emu-trainer" --dense-floats "$DENSE" \
      --seconds "$SECS" --step-us "$STEP_US" --batch "$BATCH" --touch "$TOUCH" --compute "$COMPUTE" \
      >"$TMP/$name.log" 2>&1 &
    TRAINERS+=($!)
    PIDS+=($!)
  done
done

# CPU seconds of the PS and the agents while the trainers train (their
# final rounds after): /proc/PID/stat utime + stime, at start and end.
sync_cpu() { # ROLE -> clock ticks, summed
  local t=0 e
  for e in "${SYNC_PIDS[@]}"; do
    [ "${e%%:*}" = "$1" ] || continue
    t=$((t + $(awk '{ print $14 + $15 }' "/proc/${e#*:}/stat" 2>/dev/null || echo 0)))
  done
  echo $t
}
ps0=$(sync_cpu ps) agent0=$(sync_cpu agent)
sleep "$SECS"
HZ=$(getconf CLK_TCK)
ps_cpu=$(awk -v a="$ps0" -v b="$(sync_cpu ps)" -v hz="$HZ" 'BEGIN { printf "%.2f", (b - a) / hz }')
agent_cpu=$(awk -v a="$agent0" -v b="$(sync_cpu agent)" -v hz="$HZ" 'BEGIN { printf "%.2f", (b - a) / hz }')
failed=0
for p in "${TRAINERS[@]}"; do wait "$p" || failed=$((failed + 1)); done
lines=$(cat "$TMP"/h*t*.log | grep '^emu-trainer:' || true)
[ "$QUIET" = 1 ] || echo "$lines"
n=$(grep -c . <<<"$lines" || true)
if [ "$failed" -gt 0 ] || [ "$n" != "${#TRAINERS[@]}" ]; then
  for f in "$TMP"/h*t*.log; do grep -q '^emu-trainer:' "$f" && grep -q 'close=OK' "$f" || { echo "--- $f" >&2; tail -5 "$f" >&2; }; done
  die "$failed of ${#TRAINERS[@]} trainers failed"
fi
p50=$(median_of gap_p50 "$lines")
awk -v ps="$PS" -v hosts="$HOSTS" -v mode="$MODE" -v algo="$ALGO" -v encoding="$ENCODING" -v peers="$PEERS" -v schedule="$SCHEDULE" -v slow="$SLOW_HOSTS:${SLOW_RATE:--}" -v ps_rate="${PS_RATE:-$RATE}" -v k="$K" -v dense="$DENSE" \
  -v rate="$RATE" -v delay="$DELAY" -v med="$p50" -v ps_cpu="$ps_cpu" -v agent_cpu="$agent_cpu" '
  { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    n++; total += v["examples/s"]; rounds += v["rounds"]; failed += v["failed"]
    steps += v["steps"]; cpu += v["cpu_s"]
    if (n == 1 || v["examples/s"] + 0 < min) min = v["examples/s"] + 0
    if (v["gap_p99"] + 0 > p99) p99 = v["gap_p99"] + 0
    if (v["gap_max"] + 0 > gmax) gmax = v["gap_max"] + 0 }
  END {
    printf "emu-cluster: ps=%d hosts=%d trainers=%d mode=%s algo=%s encoding=%s peers=%s schedule=%s slow_hosts=%s k=%s dense=%s rate=%s ps_rate=%s delay=%s " \
           "examples/s=%.0f per_trainer=%.0f min_trainer=%.0f gap_p50=%s gap_p99=%d gap_max=%d " \
           "rounds=%d failed=%d steps=%d trainer_cpu_s=%.2f ps_cpu_s=%s agent_cpu_s=%s\n", ps, hosts, \
           n, mode, algo, encoding, peers, schedule, slow, k, dense, rate, ps_rate, delay, total, total / n, min, med, p99, gmax, rounds, failed, \
           steps, cpu, ps_cpu, agent_cpu }' <<<"$lines"
