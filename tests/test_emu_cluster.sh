#!/usr/bin/env bash
# The emulated cluster's smoke run (bench/emu-cluster.sh): 1 PS host and
# 2 trainer hosts x 2 trainers in network namespaces, a few seconds, in
# background mode through the agents (float32 and int8 compressed sync)
# and in foreground mode; every trainer
# trains and syncs. Link latency (--delay: netem, or shadowsync-emu-delay
# where the kernel has none): a foreground round every step cannot be
# shorter than the round trip (4 x the delay: two links each way), so
# the steps done bound it from below. Real ctr-train trainers
# (--trainer ctr): two hosts average through the PS host and score a
# model. Then a run stopped by SIGTERM
# midway: nothing it made (namespaces, links, processes) is left. Needs
# root: fails otherwise.
#   test_emu_cluster.sh BIN_DIR SOURCE_DIR
set -euo pipefail
export SS_BIN=$1
script=$2/bench/emu-cluster.sh
[ "$(id -u)" = 0 ] || { echo "emu-cluster-test: needs root (network namespaces)" >&2; exit 1; }

field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2}'; }

for run in background:f32 foreground:f32 background:int8; do
  mode=${run%:*}
  out=$(bash "$script" --ps 1 --hosts 2 --per-host 2 --dense-floats 65536 --seconds 3 \
    --step-us 5000 --mode "$mode" --sync-every 5 --rate 1gbit --encoding "${run#*:}")
  echo "$out"
  sum=$(grep '^emu-cluster: ps=' <<<"$out")
  [ "$(field "$sum" trainers)" = 4 ]
  [ "$(field "$sum" failed)" = 0 ]
  # every trainer stepped and completed rounds
  while read -r line; do
    [ "$(field "$line" steps)" -gt 10 ]
    [ "$(field "$line" rounds)" -gt 0 ]
  done < <(grep '^emu-trainer:' <<<"$out")
done

# Latency: 5 ms per link is a 20 ms round trip between two hosts, so a
# trainer syncing every step (1 ms of compute) does at most
# seconds / 21 ms steps. A lower bound on time: a busy machine only makes
# it slower, never faster. Without the delay the same run does hundreds.
out=$(bash "$script" --ps 1 --hosts 1 --per-host 1 --dense-floats 4096 --seconds 3 \
  --step-us 1000 --mode foreground --sync-every 1 --delay 5ms 2>&1)
echo "$out"
line=$(grep '^emu-trainer:' <<<"$out")
steps=$(field "$line" steps) secs=$(field "$line" seconds)
[ "$(field "$line" rounds)" -gt 10 ] || { echo "no rounds across the delayed link" >&2; exit 1; }
awk -v s="$steps" -v t="$secs" 'BEGIN { exit !(s * 0.021 <= t) }' ||
  { echo "$steps steps in $secs s: faster than a 20 ms round trip allows; the delay was not applied" >&2; exit 1; }
echo "delay 5ms per link: $steps steps in $secs s (at most $(awk -v t="$secs" 'BEGIN { printf "%d", t / 0.021 }') with a 20 ms round trip)"

# Real ctr-train processes, S-MA through the PS host: both train, rounds
# close, and the model beats predicting the click rate (NE < 1).
criteo=$2/data/criteo-kaggle-head-8000.tsv
out=$(bash "$script" --trainer ctr --train "$criteo" --test "$criteo" --rows 6400 --ps 1 \
  --hosts 2 --per-host 1 --agent 0 --algo ma --rate 1gbit --quiet)
echo "$out"
sum=$(grep '^emu-cluster: ps=' <<<"$out")
[ "$(field "$sum" trainers)" = 2 ] && [ "$(field "$sum" failed)" = 0 ]
[ "$(field "$sum" rounds)" -gt 0 ] || { echo "ctr-train trainers completed no round" >&2; exit 1; }
awk -v ne="$(field "$sum" ne)" 'BEGIN { exit !(ne > 0 && ne < 1) }' ||
  { echo "ctr-train trainers: NE $(field "$sum" ne), not in (0, 1)" >&2; exit 1; }
if err=$(bash "$script" --trainer ctr --hosts 1 --per-host 1 --quiet 2>&1); then
  echo "--trainer ctr without --train was accepted" >&2
  exit 1
fi
grep -q "needs --train FILE" <<<"$err" || { echo "--trainer ctr without --train: $err" >&2; exit 1; }

# A delay without a unit is refused, saying how to write one.
if err=$(bash "$script" --hosts 1 --per-host 1 --seconds 1 --delay 5 --quiet 2>&1); then
  echo "--delay 5 was accepted" >&2
  exit 1
fi
grep -q "use NNus, NNms or 0, not 5" <<<"$err" || { echo "--delay 5: $err" >&2; exit 1; }

# SIGTERM midway: the trap removes everything.
bash "$script" --ps 1 --hosts 2 --per-host 1 --dense-floats 65536 --seconds 30 --quiet \
  >/dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do
  [ "$(ip netns list | grep -c "^se$pid-")" -ge 4 ] && break
  sleep 0.1
done
[ "$(ip netns list | grep -c "^se$pid-")" -ge 4 ] || { echo "the cluster did not come up" >&2; exit 1; }
sleep 1
kill -TERM $pid
wait $pid || true
# Only this run's: other tests may run clusters of their own meanwhile.
# Its links live in its namespaces, so none left means no link left.
! ip netns list | grep "^se$pid-" >&2 || { echo "namespaces left behind" >&2; exit 1; }
! pgrep -f "ss-emu-se$pid-" >/dev/null || { echo "processes left behind" >&2; pgrep -fa "ss-emu-se$pid-" >&2; exit 1; }
echo "emu-cluster test: background and foreground runs trained and synced; SIGTERM left nothing behind"
