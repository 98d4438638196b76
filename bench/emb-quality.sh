#!/usr/bin/env bash
# Model quality of ctr-train with its embeddings in one table of the
# public API: --emb local (in-process), remote (rows on a shadowsync-ps,
# server-side SGD) and cached (local cache, background elastic row sync),
# each on a fresh PS, as NE ratios to local; the shared array is shown for
# reference. One trainer, 1 worker, synthetic data (1M rows).
#   bash bench/emb-quality.sh
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-1000000}
make_data "$ROWS"
echo "test set: $(grep -o 'bayes_ne=[0-9.]*' out/test.gen.txt) (the best any model can do)"
declare -A NE
printf '%-7s %9s %8s %8s %12s\n' emb ne auc ratio examples/s
for mode in array local remote cached; do
  ps=
  extra=()
  if [ "$mode" = remote ] || [ "$mode" = cached ]; then
    ./build/bin/shadowsync-ps --listen 127.0.0.1:0 >out/bench-ps.log 2>&1 &
    ps=$!
    for _ in $(seq 50); do grep -q listening out/bench-ps.log && break; sleep 0.1; done
    extra=(--emb-ps "$(grep -o 'listening on [0-9.:]*' out/bench-ps.log | awk '{print $3}')")
  fi
  out=$(./build/bin/ctr-train --train "out/train-$ROWS.tsv" --test out/test.tsv --sync none \
    --progress 0 --emb "$mode" "${extra[@]}")
  [ -z "$ps" ] || { kill "$ps"; wait "$ps" 2>/dev/null || true; }
  NE[$mode]=$(summary_field "$out" test_ne_train_ctr)
  ratio=$(awk -v a="${NE[$mode]}" -v b="${NE[local]:-${NE[$mode]}}" 'BEGIN {print a / b}')
  printf '%-7s %9s %8s %8.4f %12s\n' "$mode" "${NE[$mode]}" "$(summary_field "$out" test_auc)" \
    "$ratio" "$(summary_field "$out" examples/s)"
  grep '^embeddings:' <<<"$out" || true
done
