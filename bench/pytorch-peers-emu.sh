#!/usr/bin/env bash
# The PyTorch peer table (examples/pytorch/compare.py) on the emulated
# network (root): every trainer process on a host of its own (a network
# namespace, one shaped link to the switch, bench/emu-lib.sh) and the
# shadowsync-ps on another, so DDP's allreduce, PeriodicModelAverager's
# averages and ShadowSync's rounds all cross shaped links. Prints the same
# markdown table as compare.py.
#   bench/pytorch-peers-emu.sh [--rate 1gbit] [--delay 1ms] [--procs 4] [-- train.py flags]
# (--delay: one-way latency per link, so 2 x that host to host; emu-lib.sh)
#   bench/pytorch-peers-emu.sh -- --train out/train-200000.tsv --test out/test.tsv --max-rows 100000
set -euo pipefail
EMU=pytorch-peers-emu QUIET=0 RATE=1gbit DELAY=0 LOSS=0 PROCS=4
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=${SS_BIN:-$SRC/build/bin}
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
# shellcheck source=bench/help.sh
source "$SRC/bench/help.sh"
bench_named_flags "rate:RATE delay:DELAY procs:PROCS" "$@"
set -- "${BENCH_ARGS[@]}"
[ "$(id -u)" = 0 ] || { echo "$EMU: run as root (it creates network namespaces)" >&2; exit 1; }
TRAIN_FLAGS=("$@")
[ ${#TRAIN_FLAGS[@]} -gt 0 ] ||
  TRAIN_FLAGS=(--train "$SRC/data/criteo-kaggle-head-8000.tsv" --test-rows-from-end 1600)
# shellcheck source=bench/emu-lib.sh
source "$SRC/bench/emu-lib.sh"
emu_init

add_host "$ID-p0" 198.18.1.1
ip netns exec "$ID-p0" env -u SHADOWSYNC_INSECURE_LOOPBACK "$BIN/shadowsync-ps" --listen 198.18.1.1:7070 --http "" \
  --auth-token-file "$TMP/token" >"$TMP/ps.log" 2>&1 &
PIDS+=($!)
wait_line "$TMP/ps.log" "listening on" $!
for j in $(seq 0 $((PROCS - 1))); do
  add_host "$ID-t$j" "198.18.2.$((j + 1))"
done
say "$PROCS trainer hosts and a PS host, every link $RATE each way, delay $DELAY per link"

export PYTHONPATH="$SRC/python" SHADOWSYNC_LIBRARY=${SHADOWSYNC_LIBRARY:-$BIN/../trainer-hooks/libshadowsync.so}
export GLOO_SOCKET_IFNAME=eth0
base=""
run_peer() { # NAME FLAGS...
  local name=$1
  shift
  local pids=() port=$((29500 + RANDOM % 1000))
  for j in $(seq 0 $((PROCS - 1))); do
    ip netns exec "$ID-t$j" timeout 600 /usr/bin/python3 "$SRC/examples/pytorch/train.py" "$@" \
      --procs "$PROCS" --rank "$j" --master "198.18.2.1:$port" --ps 198.18.1.1:7070 \
      "${TRAIN_FLAGS[@]}" >"$TMP/r$j.json" 2>"$TMP/r$j.err" &
    pids+=($!)
    PIDS+=($!)
  done
  for j in "${!pids[@]}"; do
    wait "${pids[$j]}" || { cat "$TMP/r$j.err" >&2; die "$name: rank $j failed"; }
  done
  /usr/bin/python3 - "$name" "$base" "$TMP"/r*.json <<'PY'
import json, sys
name, base, files = sys.argv[1], sys.argv[2], sys.argv[3:]
rs = [json.loads([l for l in open(f) if l.startswith("{")][-1]) for f in files]
r0 = next(r for r in rs if r["rank"] == 0)
eps = sum(r["examples"] for r in rs) / max(r["seconds"] for r in rs)
ratio = f"{eps / float(base):.2f}" if base else "1.00"
print(f"| {name} | {eps:.0f} | {ratio} | {r0['ne']:.4f} | {r0['auc']:.4f} | "
      f"{r0['mean_prediction']:.4f} |", flush=True)
open(files[0] + ".eps", "w").write(f"{eps}")
PY
  [ -n "$base" ] || base=$(cat "$TMP/r0.json.eps")
}

echo "| peer ($PROCS processes, one per host, links $RATE$([ "$DELAY" != 0 ] && echo ", $DELAY per link")) | examples/s | ÷ no sync | NE | AUC | mean prediction |"
echo "|---|---|---|---|---|---|"
run_peer "none (no sync)" --mode none
run_peer "PyTorch DDP (gloo, allreduce every step)" --mode ddp
run_peer "PyTorch PeriodicModelAverager, K=10" --mode localsgd --period 10
# One PS for the three: each run its own group and table (--name).
run_peer "ShadowSync S-EASGD (background)" --mode shadowsync --algo easgd --name "dlrm-easgd-$$"
run_peer "ShadowSync S-MA (background)" --mode shadowsync --algo ma --name "dlrm-ma-$$"
run_peer "ShadowSync S-BMUF (background)" --mode shadowsync --algo bmuf --name "dlrm-bmuf-$$"
