#!/usr/bin/env bash
# Model quality of background sync: 1 replica without sync against 4
# replicas (each reading 1/4 of the same data in one pass) with no sync,
# S-EASGD, S-MA and S-BMUF in the background. Prints held-out NE and AUC,
# and NE as a ratio to the single replica's.
#   bash bench/quality.sh
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-1000000}
make_data "$ROWS"
echo "test set: $(grep -o 'bayes_ne=[0-9.]*' out/test.gen.txt)"

run() {
  ./build/bin/ctr-train --train "out/train-$ROWS.tsv" --test out/test.tsv --progress 0 "$@"
}
printf '%-42s %8s %8s %10s %12s %14s\n' setup ne auc ne_ratio examples/s sync_gap_mean
base_ne=""
for setup in "1 none easgd" "4 none easgd" "4 shadow easgd" "4 shadow ma" "4 shadow bmuf" \
             "4 foreground easgd" "4 foreground ma"; do
  set -- $setup
  out=$(run --trainers "$1" --sync "$2" --algo "$3" --sync-every 10)
  ne=$(summary_field "$out" test_ne_train_ctr)
  [ -n "$base_ne" ] || base_ne=$ne
  label="trainers=$1 sync=$2"
  [ "$2" = none ] || label+=" algo=$3"
  [ "$2" != foreground ] || label+=" K=10"
  printf '%-42s %8s %8s %10.4f %12s %14s\n' "$label" "$ne" "$(summary_field "$out" test_auc)" \
    "$(awk -v a="$ne" -v b="$base_ne" 'BEGIN {print a / b}')" \
    "$(summary_field "$out" examples/s)" "$(summary_field "$out" sync_gap_mean_trainers)"
done
