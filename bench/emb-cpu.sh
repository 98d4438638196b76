#!/usr/bin/env bash
# (Issue 13, item 4) CPU per 1,000 examples of each process for the
# embedding modes: one ctr-train process (1 worker, no dense sync, so the
# embeddings are what differs) against one shadowsync-ps shard holding the
# table (remote, cached), or no PS (local). CPU = user + system seconds of
# each process from /usr/bin/time; the ratio is to --emb local in the same
# run.
#   bash bench/emb-cpu.sh            # ROWS=200000 REPS=5 BATCH=32 (ctr-train's default)
#   BATCH=256 bash bench/emb-cpu.sh
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-200000}
REPS=${REPS:-5}
BATCH=${BATCH:-32}
make_data "$ROWS"
T=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
cpu_of() { tail -1 "$1" | awk '{print $1 + $2}'; } # "user sys": /usr/bin/time -f, last line
echo "emb-cpu: $ROWS rows, batch $BATCH, $REPS reps"
printf '%-8s %4s %10s %12s %12s %14s %8s\n' mode rep examples trainer_cpu_s ps_cpu_s cpu_ms_per_1k ratio
declare -A SUM RATIOS
for rep in $(seq "$REPS"); do
  for mode in local remote cached; do
    ps_cpu=0 ps_args=()
    if [ "$mode" != local ]; then
      /usr/bin/time -f "%U %S" -o "$T/ps.time" ./build/bin/shadowsync-ps --listen 127.0.0.1:0 \
        --http "" >"$T/ps.log" 2>&1 &
      pspid=$!
      for _ in $(seq 100); do grep -q "listening on" "$T/ps.log" && break; sleep 0.1; done
      addr=$(grep -o 'listening on [0-9.:]*' "$T/ps.log" | awk '{print $3}')
      ps_args=(--ps "$addr" --emb-ps "$addr")
    fi
    out=$(/usr/bin/time -f "%U %S" -o "$T/tr.time" ./build/bin/ctr-train --train "out/train-$ROWS.tsv" \
      --test out/test.tsv --sync none --emb "$mode" --batch "$BATCH" --progress 0 "${ps_args[@]}" 2>&1)
    if [ "$mode" != local ]; then
      pkill -TERM -P "$pspid" # the PS, not /usr/bin/time
      wait "$pspid" || true
      ps_cpu=$(cpu_of "$T/ps.time")
    fi
    ex=$(summary_field "$out" examples)
    tr_cpu=$(cpu_of "$T/tr.time")
    per=$(awk -v a="$tr_cpu" -v b="$ps_cpu" -v e="$ex" 'BEGIN {printf "%.3f", (a + b) * 1e6 / e}')
    [ "$mode" != local ] || base=$per
    ratio=$(awk -v a="$per" -v b="$base" 'BEGIN {printf "%.3f", a / b}')
    printf '%-8s %4s %10s %12s %12s %14s %8.2f\n' "$mode" "$rep" "$ex" "$tr_cpu" "$ps_cpu" "$per" "$ratio"
    SUM[$mode]=$(awk -v a="${SUM[$mode]:-0}" -v b="$per" 'BEGIN {print a + b}')
    RATIOS[$mode]="${RATIOS[$mode]:-} $ratio"
  done
done
# Single reps vary by 10-20% on a shared machine (local alone moved 4.1-5.3 s
# for the same work); the summary is the ratio of the sums over all reps and
# the median of the per-rep ratios.
for mode in remote cached; do
  med=$(tr ' ' '\n' <<<"${RATIOS[$mode]}" | grep . | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
  printf 'summary: %s / local: %.2f (sum over %s reps), median of reps %.2f\n' "$mode" \
    "$(awk -v a="${SUM[$mode]}" -v b="${SUM[local]}" 'BEGIN {print a / b}')" "$REPS" "$med"
done
