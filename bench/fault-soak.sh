#!/usr/bin/env bash
# The fault soak on the emulated cluster (run as root; bench/emu-lib.sh).
#
# S PS hosts (shadowsync-ps --sync-writes with a RocksDB embedding store
# and a checkpoint directory), H trainer hosts with an agent and k
# trainers each (shadowsync-emu-trainer, background S-MA by default, every
# trainer pulled toward a value of its own, so the replicas agree only if
# the sync holds them together), and one embedding writer
# (shadowsync-emu-emb) that pushes new rows and logs the acknowledged ones.
# One trainer host's link drops --loss percent of its packets throughout.
# Every --every seconds a random trainer, agent or PS is SIGKILLed and
# started again; halfway through, one trainer host is cut off for
# --partition seconds (every packet on its link dropped). With --map-every,
# the fleet's shard map changes every that many seconds, the last PS
# leaving it and coming back in turn: its rows move while the writer
# writes (ps/row_moves.h), and the agents cut their dense groups again
# (rpc/dense/recut_transport.h); both route by the map.
#
# At the end every trainer stops at the same time, runs its final rounds
# and writes its replica; the writer's log is read back. Prints one line per
# event and a summary:
#   fault-soak: events=E longest_stall_ms=L (the longest time any running
#     trainer went without finishing a step: 0 examples/s) emb_acked=A
#     emb_lost=X resume_p50_s=.. resume_p99_s=.. resume_max_s=.. (per event: until every
#     trainer finished two more rounds) resume_cut_short=N (events whose
#     slowest trainer was killed before it resumed: their figure is the time
#     until that kill, a lower bound) replica_rel_dist=D (largest
#     |x_i - mean| / |mean| over the final replicas) examples/s=..
#
#   bench/fault-soak.sh                       # 10 minutes, as BENCHMARKS.md
#   bench/fault-soak.sh --seconds 60 --every 10 --partition 5
set -euo pipefail

PS=2 HOSTS=3 PER_HOST=2 DENSE=1048576 SECS=600 EVERY=20 PART=10 LOSS_ONE=1 ALGO=ma MAPEVERY=0
STEP_US=10000 RATE=10gbit DELAY=0 LOSS=0 SEED=$$ QUIET=0 KEEP=
BIN=${SS_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build/bin}

usage() {
  cat <<EOF
Usage: bench/fault-soak.sh [flags]   (root: it creates network namespaces)

  --ps S            PS hosts                                        [$PS]
  --hosts H         trainer hosts                                   [$HOSTS]
  --per-host k      trainers per trainer host                       [$PER_HOST]
  --dense-floats D  floats in each trainer's dense group            [$DENSE]
  --algo A          ma | easgd | bmuf (background, through agents)  [$ALGO]
  --seconds T       how long the soak runs                          [$SECS]
  --every E         a SIGKILL + restart every E seconds             [$EVERY]
  --partition P     seconds one trainer host is cut off, halfway    [$PART]
                    (0 = none)
  --loss L          percent of packets dropped on one trainer       [$LOSS_ONE]
                    host's link, throughout
  --map-every M     the shard map changes every M seconds           [$MAPEVERY]
                    (the last PS out, then back in; 0 = never)
  --step-us U       emulated compute per step                       [$STEP_US]
  --rate R          every link, each direction (tc units)           [$RATE]
  --seed N          the random choice of victims                    [\$\$]
  --logs DIR        copy every process's log and the events here
  --quiet           only the summary line
  --help            this text
Binaries from \$SS_BIN (default: build/bin next to this script). Needs ip,
tc (iproute2) and nft (nftables).
EOF
}

# shellcheck source=bench/help.sh
source "$(dirname "$0")/help.sh"
bench_named_flags "
  ps:PS hosts:HOSTS per-host:PER_HOST dense-floats:DENSE algo:ALGO
  seconds:SECS every:EVERY partition:PART loss:LOSS_ONE step-us:STEP_US map-every:MAPEVERY
  rate:RATE seed:SEED logs:KEEP quiet:QUIET!" "$@"

EMU=fault-soak
source "$(dirname "$0")/emu-lib.sh"
[ "$(id -u)" = 0 ] || die "needs root: it creates network namespaces and veth links"
for b in shadowsync-ps shadowsync-agent shadowsync-emu-trainer shadowsync-emu-emb; do
  [ -x "$BIN/$b" ] || die "no $BIN/$b (build first, or set SS_BIN)"
done
command -v nft >/dev/null || die "needs nft (apt-get install nftables) for the loss and the partition"
case $ALGO in easgd | ma | bmuf) ;; *) die "--algo must be easgd, ma or bmuf" ;; esac
for v in PS HOSTS PER_HOST SECS EVERY PART MAPEVERY; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "--${v,,} must be a whole number, not ${!v}"
done
[ "$PS" -ge 1 ] && [ "$HOSTS" -ge 1 ] && [ "$PER_HOST" -ge 1 ] || die "--ps, --hosts and --per-host must be >= 1"
[ "$EVERY" -ge 2 ] || die "--every must be >= 2 seconds"
[ "$MAPEVERY" = 0 ] || [ "$PS" -ge 2 ] || die "--map-every needs --ps 2 or more (one leaves the map)"
[ "$SECS" -ge $((2 * EVERY)) ] || die "--seconds must be at least 2 x --every"
tc_rate_bits "$RATE" >/dev/null
RANDOM=$SEED

emu_init
now_ms() { date +%s%3N; }
# The processes by role and index; a restart replaces the entry.
declare -A PID
EVENTS=$TMP/events.tsv # t_ms kind victim heal_ms

start_ps() { # i
  local i=$1 addr=198.18.1.$(($1 + 1))
  mkdir -p "$TMP/ps$i"
  ip netns exec "$ID-p$i" env -u SHADOWSYNC_INSECURE_LOOPBACK "$BIN/shadowsync-ps" --listen "$addr:7070" --http "" \
    --auth-token-file "$TMP/token" --checkpoint-dir "$TMP/ps$i" --emb-db "$TMP/ps$i/emb" \
    --shard-map "$TMP/fleet.map" --sync-writes >>"$TMP/ps$i.log" 2>&1 &
  PID[ps$i]=$!
  PIDS+=($!)
  wait_line "$TMP/ps$i.log" "listening on" $!
}

start_agent() { # j
  local j=$1
  ip netns exec "$ID-t$j" "$BIN/shadowsync-agent" --shard-map "$TMP/fleet.map" \
    --socket "$TMP/h$j/agent.sock" --http "" >>"$TMP/agent$j.log" 2>&1 &
  PID[agent$j]=$!
  PIDS+=($!)
  wait_line "$TMP/agent$j.log" "listening on" $!
}

NSTARTS=0
start_trainer() { # j i
  local j=$1 i=$2 name=h$1t$2
  NSTARTS=$((NSTARTS + 1))
  # Each trainer pulls toward its own value: apart without sync.
  env SHADOWSYNC_PS="$PS_LIST" SHADOWSYNC_SYNC=shadow SHADOWSYNC_ALGO="$ALGO" \
    SHADOWSYNC_TRAINER_NAME="$name" SHADOWSYNC_AGENT="$TMP/h$j/agent.sock" \
    ip netns exec "$ID-t$j" "$BIN/shadowsync-emu-trainer" --dense-floats "$DENSE" \
    --until-ms "$END_MS" --step-us "$STEP_US" --progress-ms 200 \
    --drift "$((j * PER_HOST + i))" --dump "$TMP/$name.f32" >"$TMP/$name.$NSTARTS.log" 2>&1 &
  PID[$name]=$!
  PIDS+=($!)
}

PS_LIST=
for i in $(seq 0 $((PS - 1))); do
  add_host "$ID-p$i" "198.18.1.$((i + 1))"
  PS_LIST+="${PS_LIST:+,}198.18.1.$((i + 1)):7070"
done
# The fleet's shard map: the writer routes its rows by it, the agents
# their dense groups (cut again when it changes).
write_map() { # epoch ps [from]
  { echo "epoch $1"; echo "ps $2"; [ -z "${3:-}" ] || echo "from $3"; } >"$TMP/fleet.map.tmp"
  mv "$TMP/fleet.map.tmp" "$TMP/fleet.map"
}
write_map 1 "$PS_LIST"
for i in $(seq 0 $((PS - 1))); do start_ps "$i"; done
for j in $(seq 0 $((HOSTS - 1))); do
  add_host "$ID-t$j" "198.18.2.$((j + 1))"
  start_agent "$j"
done
LOSSY=$ID-t0
emu_loss "$LOSSY" "$LOSS_ONE"
START_MS=$(now_ms)
END_MS=$((START_MS + SECS * 1000))
for j in $(seq 0 $((HOSTS - 1))); do
  for i in $(seq 0 $((PER_HOST - 1))); do start_trainer "$j" "$i"; done
done
# The embedding writer sits on the last trainer host, straight to the PS.
W=$((HOSTS - 1))
ip netns exec "$ID-t$W" "$BIN/shadowsync-emu-emb" --shard-map "$TMP/fleet.map" --until-ms "$END_MS" \
  --log "$TMP/emb-acked.log" >"$TMP/emb.log" 2>&1 &
WRITER=$!
PIDS+=($!)
# Map changes (--map-every): the last PS leaves the map, then comes back.
map_changes() {
  local epoch=1 all=$PS_LIST fewer=${PS_LIST%,*} t0
  while sleep "$MAPEVERY" && [ "$(now_ms)" -lt $((END_MS - 5000)) ]; do
    epoch=$((epoch + 1))
    t0=$(now_ms)
    if [ $((epoch % 2)) = 0 ]; then write_map "$epoch" "$fewer" "$all"; else write_map "$epoch" "$all" "$fewer"; fi
    printf '%s\tmap\tepoch%s\t%s\n' "$t0" "$epoch" "$t0" >>"$EVENTS"
    say "$(((t0 - START_MS) / 1000)) s: shard map epoch $epoch ($([ $((epoch % 2)) = 0 ] && echo "the last PS out" || echo "back in"))"
  done
}
MAPPER=
if [ "$MAPEVERY" -gt 0 ]; then
  map_changes &
  MAPPER=$!
fi
say "$PS PS, $HOSTS hosts x $PER_HOST trainers ($ALGO, $DENSE floats), $LOSS_ONE% loss on $LOSSY, a kill every ${EVERY} s, a ${PART} s partition, ${SECS} s"

# The events: kills on a fixed beat, the partition halfway between two.
VICTIMS=()
for i in $(seq 0 $((PS - 1))); do VICTIMS+=("ps$i"); done
for j in $(seq 0 $((HOSTS - 1))); do
  VICTIMS+=("agent$j")
  for i in $(seq 0 $((PER_HOST - 1))); do VICTIMS+=("h${j}t$i"); done
done
NKILL=$(((SECS - 5) / EVERY))
PART_AT=$(((NKILL / 2) * EVERY + EVERY / 2))
sleep_until_ms() { local d=$(($1 - $(now_ms))); [ $d -le 0 ] || sleep "$(awk -v d=$d 'BEGIN{print d/1000}')"; }
parted=0
for e in $(seq 1 "$NKILL"); do
  at=$((START_MS + e * EVERY * 1000))
  if [ "$PART" -gt 0 ] && [ $parted = 0 ] && [ $((START_MS + PART_AT * 1000)) -lt "$at" ]; then
    parted=1
    sleep_until_ms $((START_MS + PART_AT * 1000))
    host=$((RANDOM % HOSTS))
    t0=$(now_ms)
    emu_cut "$ID-t$host"
    say "partition of host t$host for ${PART} s"
    sleep "$PART"
    emu_heal "$ID-t$host"
    printf '%s\tpartition\tt%s\t%s\n' "$t0" "$host" "$(now_ms)" >>"$EVENTS"
  fi
  sleep_until_ms "$at"
  v=${VICTIMS[$((RANDOM % ${#VICTIMS[@]}))]}
  t0=$(now_ms)
  kill -KILL "${PID[$v]}" 2>/dev/null || true
  wait "${PID[$v]}" 2>/dev/null || true
  case $v in
  ps*) start_ps "${v#ps}" ;;
  agent*) start_agent "${v#agent}" ;;
  h*) j=${v#h}; start_trainer "${j%t*}" "${v#*t}" ;;
  esac
  printf '%s\tkill\t%s\t%s\n' "$t0" "$v" "$(now_ms)" >>"$EVENTS"
  say "$(((t0 - START_MS) / 1000)) s: SIGKILL $v, started again"
done

# The end: every trainer stops at END_MS, runs its final rounds, dumps.
failed=0
for v in "${VICTIMS[@]}"; do
  case $v in h*) wait "${PID[$v]}" || failed=$((failed + 1)) ;; esac
done
wait "$WRITER" || failed=$((failed + 1))
[ -z "$MAPPER" ] || wait "$MAPPER" || true
verify=$(ip netns exec "$ID-t$W" "$BIN/shadowsync-emu-emb" --shard-map "$TMP/fleet.map" --verify "$TMP/emb-acked.log" 2>"$TMP/verify.err" || true)
[ "$QUIET" = 1 ] || { cat "$TMP"/h*t*.*.log | grep '^emu-trainer:' || true; cat "$TMP/emb.log"; echo "$verify"; cat "$TMP/verify.err"; }

[ -z "$KEEP" ] || { mkdir -p "$KEEP" && cp "$TMP"/*.log "$TMP"/*.tsv "$KEEP"/; }

# Resume per event: for every trainer process running after the event
# (or, for a partition, after it healed) and started before the next one
# (the victim's new process included), the time until its completed
# rounds grew by two over their count then; the event's figure is the
# largest over trainers (a trainer that never resumed: until the end; one
# killed by a later event before it resumed: until it was killed, and the
# event is counted as cut short: a lower bound).
resume=$(for f in "$TMP"/h*t*.*.log; do grep '^emu-progress:' "$f" | sed "s|^|$(basename "$f") |"; done |
  awk -v events="$EVENTS" -v end_ms="$END_MS" '
  BEGIN {
    while ((getline l < events) > 0) { split(l, f, "\t"); ne++; at[ne] = f[1] + 0; ev[ne] = f[4] + 0; kind[ne] = f[2] " " f[3] }
    at[ne + 1] = end_ms + 0
  }
  { split($3, a, "="); split($5, r, "="); n[$1]++; t[$1, n[$1]] = a[2] + 0; k[$1, n[$1]] = r[2] + 0 }
  END {
    for (e = 1; e <= ne; e++) {
      worst = 0; short = 0
      for (lg in n) {
        if (t[lg, n[lg]] < ev[e]) continue   # ended before the event
        if (t[lg, 1] > at[e + 1]) continue   # started by a later event
        base = 0; got = -1; cut = 0
        for (i = 1; i <= n[lg]; i++) {
          if (t[lg, i] <= ev[e]) { base = k[lg, i]; continue }
          if (k[lg, i] >= base + 2) { got = t[lg, i] - ev[e]; break }
        }
        if (got < 0 && t[lg, n[lg]] < end_ms - 1000) { got = t[lg, n[lg]] - ev[e]; cut = 1 }
        if (got < 0) got = end_ms - ev[e]
        if (got > worst) { worst = got; short = cut }
      }
      printf "%s %.1f %d\n", kind[e], worst / 1000, short
    }
  }')
[ "$QUIET" = 1 ] || echo "$resume" | sed 's/^/fault-soak: event /; s/ \([0-9.]*\) 0$/ resume_s=\1/; s/ \([0-9.]*\) 1$/ resume_s>=\1 (killed before it resumed)/'

dist=$(/usr/bin/python3 - "$TMP"/h*t*.f32 <<'PY'
import array, math, sys
reps = []
for p in sys.argv[1:]:
    a = array.array("f")
    with open(p, "rb") as f:
        a.frombytes(f.read())
    reps.append(a)
if not reps or any(len(r) != len(reps[0]) for r in reps):
    print("nan"); sys.exit()
n = len(reps)
mean = [sum(v) / n for v in zip(*reps)]
norm = math.sqrt(sum(m * m for m in mean)) or 1.0
print("%.3g" % max(math.sqrt(sum((x - m) ** 2 for x, m in zip(r, mean))) / norm for r in reps))
PY
)
# Steps: a log's final line, or its last progress line if it was killed.
steps=$(for f in "$TMP"/h*t*.*.log; do
  sed -n 's/^emu-\(trainer\|progress\):.* steps=\([0-9]*\).*/\2/p' "$f" | tail -n 1
done | awk '{ s += $1 } END { print s + 0 }')
stall=$(sed -n 's/^emu-trainer:.* stall_max_ms=\([0-9.]*\).*/\1/p' "$TMP"/h*t*.*.log | sort -g | tail -n 1)
rs=$(awk '{ print $(NF - 1) }' <<<"$resume" | sort -g)
cut_short=$(awk '$NF == 1' <<<"$resume" | grep -c . || true)
nr=$(grep -c . <<<"$rs" || true)
field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2}'; }
lost=unknown # the check itself failed (its error is above)
[ -z "$(field "$verify" lost)" ] || lost=$(($(field "$verify" lost) + $(field "$verify" unreadable)))
printf 'fault-soak: algo=%s seconds=%s events=%s longest_stall_ms=%s emb_acked=%s emb_lost=%s resume_p50_s=%s resume_p99_s=%s resume_max_s=%s resume_cut_short=%s replica_rel_dist=%s examples/s=%s failed=%s\n' \
  "$ALGO" "$SECS" "$(grep -c . "$EVENTS")" "${stall:-none}" "$(field "$verify" acked)" \
  "$lost" \
  "$(sed -n "$(((nr + 1) / 2))p" <<<"$rs")" "$(sed -n "$(((nr * 99 + 99) / 100))p" <<<"$rs")" \
  "$(tail -n 1 <<<"$rs")" "$cut_short" "$dist" \
  "$((steps * 1024 / SECS))" "$failed"
