#!/usr/bin/env bash
# S-BMUF's stable range: 4 trainers in the background, S-EASGD as the
# baseline of the same run, then S-BMUF over block momentum eta and block
# learning rate zeta, classic and Nesterov. Prints held-out NE (median of
# REPS runs), its ratio to S-EASGD's, and whether every run ended.
#   bash bench/bmuf-stability.sh            # ROWS=200000 REPS=3
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-200000}
REPS=${REPS:-3}
make_data "$ROWS"

# ne_of ARGS...: median NE over REPS runs ("timeout" when one did not end).
ne_of() {
  local nes="" out
  for rep in $(seq "$REPS"); do
    if ! out=$(timeout 600 ./build/bin/ctr-train --train "out/train-$ROWS.tsv" --test out/test.tsv \
      --trainers 4 --sync shadow --progress 0 "$@"); then
      echo timeout
      return
    fi
    nes+="$(summary_field "$out" test_ne_train_ctr) "
  done
  med "$nes"
}

base=$(ne_of --algo easgd)
echo "4 trainers, background sync, rows=$ROWS, median of $REPS runs"
printf '%-40s %9s %9s\n' setup ne ne/easgd
printf '%-40s %9s %9s\n' "easgd alpha=0.5" "$base" 1
for setup in "0.9 1" "0.875 1" "0.75 1" "0.9 0.1" "0.875 0.125" "0.75 0.25" "0.5 0.5"; do
  set -- $setup
  for nesterov in false true; do
    ne=$(ne_of --algo bmuf --bmuf-eta "$1" --bmuf-zeta "$2" --bmuf-nesterov="$nesterov")
    ratio=$(awk -v a="$ne" -v b="$base" 'BEGIN {print (a + 0 > 0) ? a / b : "-"}')
    printf '%-40s %9s %9s\n' "bmuf eta=$1 zeta=$2 nesterov=$nesterov" "$ne" "$ratio"
  done
done
