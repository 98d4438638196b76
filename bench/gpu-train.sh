#!/usr/bin/env bash
# A GPU trainer's examples/s with background sync (the shadow pool on its
# own low-priority stream) as a ratio to no sync, with foreground K=1 and
# K=10 beside it, for a 1M-float and a 16M-float dense group synced by
# S-EASGD through a shadowsync-ps on loopback; and the time a round
# spends in copies (docs/gpu.md). Needs a CUDA GPU: elsewhere it says why
# and exits 0.
#   SECONDS_PER_RUN=10 REPS=3 bash bench/gpu-train.sh
source "$(dirname "$0")/common.sh"
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
REPS=${REPS:-3}
train=./build/bin/shadowsync-gpu-train
if [ ! -x "$train" ]; then
  echo "gpu-train: skipped: this build has no CUDA (no nvcc found)"
  exit 0
fi
if ! why=$("$train" --seconds 0.01 2>&1 >/dev/null </dev/null) && grep -q "no CUDA device" <<<"$why"; then
  echo "gpu-train: skipped: $why"
  exit 0
fi

# One PS per group size: a group's chunks are named by their ranges, so
# the 16M-float group must not meet the 1M-float one's on the same PS.
ps=
trap 'kill $ps 2>/dev/null || true' EXIT
start_ps() {
  [ -z "$ps" ] || { kill "$ps"; wait "$ps" 2>/dev/null || true; }
  ./build/bin/shadowsync-ps --listen 127.0.0.1:0 --http "" >out/gpu-ps.log 2>&1 &
  ps=$!
  for _ in $(seq 50); do grep -q listening out/gpu-ps.log && break; sleep 0.1; done
  addr=$(grep -o 'listening on [0-9.:]*' out/gpu-ps.log | awk '{print $3}')
}

field() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k {print $2}'; }

echo "gpu-train: ${SECONDS_PER_RUN}s runs, $REPS reps, S-EASGD through one PS on loopback"
printf '%-10s %-11s %12s %9s %8s %10s %8s\n' floats mode examples/s ratio rounds copy_ms loss
for shape in "1024 1024" "4096 4096"; do
  set -- $shape
  start_ps
  declare -A RATE=() ROUNDS=() COPY=() LOSS=()
  for rep in $(seq "$REPS"); do
    for mode in none shadow fg1 fg10; do
      case $mode in
        none) env=(SHADOWSYNC_SYNC=none) ;;
        shadow) env=(SHADOWSYNC_SYNC=shadow SHADOWSYNC_PS=$addr) ;;
        fg1) env=(SHADOWSYNC_SYNC=foreground SHADOWSYNC_SYNC_EVERY=1 SHADOWSYNC_PS=$addr) ;;
        fg10) env=(SHADOWSYNC_SYNC=foreground SHADOWSYNC_SYNC_EVERY=10 SHADOWSYNC_PS=$addr) ;;
      esac
      out=$(env "${env[@]}" SHADOWSYNC_ALGO=easgd SHADOWSYNC_TRAINER_NAME="gpu-$mode-$rep" \
        SHADOWSYNC_FINAL_ROUNDS=1 "$train" --input "$1" --hidden "$2" \
        --seconds "$SECONDS_PER_RUN" | grep '^gpu-train: device=')
      echo "rep $rep $mode: $out" >&2
      RATE[$mode]+="$(field "$out" examples/s) "
      ROUNDS[$mode]+="$(field "$out" rounds) "
      COPY[$mode]+="$(field "$out" copy_ms_per_round) "
      LOSS[$mode]+="$(field "$out" loss) "
    done
  done
  floats=$(($1 * $2 + 2 * $2 + 1))
  base=$(med "${RATE[none]}")
  for mode in none shadow fg1 fg10; do
    r=$(med "${RATE[$mode]}")
    printf '%-10s %-11s %12.0f %9.3f %8s %10s %8s\n' "$floats" "$mode" "$r" \
      "$(awk -v a="$r" -v b="$base" 'BEGIN {print a / b}')" "$(med "${ROUNDS[$mode]}")" \
      "$(med "${COPY[$mode]}")" "$(med "${LOSS[$mode]}")"
  done
  unset RATE ROUNDS COPY LOSS
done
