#!/usr/bin/env bash
# The fault soak's smoke run (bench/fault-soak.sh), small: 2 PS hosts, 2
# trainer hosts x 1 trainer with agents, the embedding writer, 1% loss on
# one link, two SIGKILL + restarts (seed 1: ps1, then h1t0... as RANDOM
# gives) and a 3 s partition, 24 s in all. Every trainer process must end
# well, no acknowledged embedding row may be lost, the replicas must agree
# after the final rounds, and nothing may be left behind. Needs root and
# nft (nftables): fails otherwise.
#   test_fault_soak.sh BIN_DIR SOURCE_DIR
set -euo pipefail
export SS_BIN=$1
script=$2/bench/fault-soak.sh
[ "$(id -u)" = 0 ] || { echo "fault-soak-test: needs root (network namespaces)" >&2; exit 1; }
field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2}'; }

# In the background, to know its PID: its namespaces are se<PID>-*, its
# files /tmp/ss-emu-se<PID>-*; other tests may run clusters meanwhile.
bash "$script" --ps 2 --hosts 2 --per-host 1 --dense-floats 65536 --seconds 24 --every 8 \
  --partition 3 --seed 1 --map-every 10 >"${TMPDIR:-/tmp}/fault-soak-test.$$" &
pid=$!
wait $pid || { cat "${TMPDIR:-/tmp}/fault-soak-test.$$"; rm -f "${TMPDIR:-/tmp}/fault-soak-test.$$"; exit 1; }
out=$(cat "${TMPDIR:-/tmp}/fault-soak-test.$$")
rm -f "${TMPDIR:-/tmp}/fault-soak-test.$$"
echo "$out"
sum=$(grep '^fault-soak: algo=' <<<"$out")
[ "$(field "$sum" events)" = 4 ] || { echo "want 2 kills, a partition and a map change" >&2; exit 1; }
[ "$(field "$sum" failed)" = 0 ] || { echo "a trainer or the writer failed" >&2; exit 1; }
[ "$(field "$sum" emb_acked)" -gt 0 ] || { echo "no embedding push was acknowledged" >&2; exit 1; }
[ "$(field "$sum" emb_lost)" = 0 ] || { echo "acknowledged embedding rows were lost" >&2; exit 1; }
awk -v d="$(field "$sum" replica_rel_dist)" 'BEGIN { exit !(d + 0 < 1e-3) }' ||
  { echo "the replicas do not agree after the final rounds" >&2; exit 1; }
# every trainer that ran to the end trained: a stall shorter than the run
awk -v s="$(field "$sum" longest_stall_ms)" 'BEGIN { exit !(s + 0 > 0 && s + 0 < 24000) }' ||
  { echo "no trainer reported its steps" >&2; exit 1; }
! ip netns list | grep -q "^se$pid-" || { echo "namespaces left behind" >&2; exit 1; }
! pgrep -f "ss-emu-se$pid-" >/dev/null || { echo "processes left behind" >&2; pgrep -fa "ss-emu-se$pid-" >&2; exit 1; }
echo "fault-soak test: kills, loss and a partition; nothing acknowledged was lost, replicas agree"
