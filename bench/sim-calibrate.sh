#!/usr/bin/env bash
# Measures the costs the simulator (shadowsync-sim) is calibrated with, on
# the emulated cluster (root, bench/emu-cluster.sh), and writes them as a
# calibration file (shadowsync-sim --calibration FILE):
#   step_cpu_us          CPU of one trainer step (no sync, 8 trainers)
#   M.client_ns_per_float  agent CPU per float of a round, for M = easgd,
#   M.ps_ns_per_float      ma, bmuf; PS CPU per float of a round
#                          (8 trainers through one agent, 1 PS)
#   fg.client_ns_per_float the trainer's own CPU per float of a foreground
#   fg.ps_ns_per_float     round (K = 1, 8 trainers), and the PS's
#   rpc_fixed_us         one round of 16 floats (shadowsync-bench-rpc on
#                        loopback): the software cost of an RPC
# CPU is each process's utime + stime while the trainers train. 8 trainers
# load the 2 cores fully: the costs include what contention adds (cache
# misses, switches), which one trainer alone would not show.
#   bash bench/sim-calibrate.sh                # bench/results/sim-calibration.txt
#   bash bench/sim-calibrate.sh out/my.txt
source "$(dirname "$0")/common.sh"
OUT=${1:-bench/results/sim-calibration.txt}
DENSE=${SS_CALIBRATE_DENSE:-1048576}
SECS=${SS_CALIBRATE_SECONDS:-10}
field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2}'; }
run() { bash bench/emu-cluster.sh --quiet --ps 1 --dense-floats "$DENSE" --seconds "$SECS" "$@"; }

none=$(run --hosts 1 --per-host 8 --mode none)
echo "$none" >&2
step_cpu_us=$(awk -v c="$(field "$none" trainer_cpu_s)" -v s="$(field "$none" steps)" 'BEGIN { printf "%.1f", c / s * 1e6 }')
{
  echo "# shadowsync-sim calibration: bash bench/sim-calibrate.sh ($(date -u +%Y-%m-%d), $(nproc) cores, $DENSE floats)"
  echo "step_cpu_us $step_cpu_us"
} >"$OUT.tmp"
for m in easgd ma bmuf; do
  r=$(run --hosts 1 --per-host 8 --mode background --algo "$m")
  echo "$r" >&2
  awk -v m="$m" -v a="$(field "$r" agent_cpu_s)" -v p="$(field "$r" ps_cpu_s)" \
    -v n="$(field "$r" rounds)" -v d="$DENSE" 'BEGIN {
      printf "%s.client_ns_per_float %.3f\n%s.ps_ns_per_float %.3f\n", m, a / (n * d) * 1e9, m, p / (n * d) * 1e9 }' >>"$OUT.tmp"
done
fg=$(run --hosts 1 --per-host 8 --mode foreground --algo easgd --sync-every 1)
echo "$fg" >&2
awk -v c="$(field "$fg" trainer_cpu_s)" -v s="$(field "$fg" steps)" -v step="$step_cpu_us" \
  -v p="$(field "$fg" ps_cpu_s)" -v n="$(field "$fg" rounds)" -v d="$DENSE" 'BEGIN {
    client = (c - s * step * 1e-6) / (n * d) * 1e9
    printf "fg.client_ns_per_float %.3f\nfg.ps_ns_per_float %.3f\n", (client > 0 ? client : 0), p / (n * d) * 1e9 }' >>"$OUT.tmp"

# The fixed cost of one RPC: rounds of 16 floats on loopback.
./build/bin/shadowsync-ps --listen 127.0.0.1:0 --http "" >out/calibrate-ps.log 2>&1 &
ps=$!
trap 'kill $ps 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q listening out/calibrate-ps.log && break; sleep 0.1; done
addr=$(grep -o 'listening on [0-9.:]*' out/calibrate-ps.log | awk '{print $3}')
small=$(./build/bin/shadowsync-bench-rpc --ps "$addr" --floats 16 --reps 2000 --warmup 100)
echo "$small" >&2
echo "rpc_fixed_us $(awk -v ms="$(field "$small" round_ms)" 'BEGIN { printf "%.1f", ms * 1000 }')" >>"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
cat "$OUT"
