#!/usr/bin/env bash
# The floor of online training: ctr-train's progressive NE against an online
# logistic regression (scikit-learn SGDClassifier, log loss, partial_fit on
# hashed features) on the same streams, same protocol (each chunk scored
# before it is trained on); settings of the regression from a development
# stream; paired block-bootstrap intervals. Streams: ctr-gen --drift, the
# bundled Criteo rows, ctr-gen --shape categorical --drift.
#   bash bench/online-floor.sh                 # ROWS=1000000
#   bash bench/online-floor.sh --rows 200000 --bootstrap 200
#   bash bench/online-floor.sh --emb local --wide-lr 0.005   # through a table
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-1000000}
BOOTSTRAP=${BOOTSTRAP:-1000}
EMB=${EMB:-array}
WIDE_LR=${WIDE_LR:-auto}
SS_BIN=$PWD/build/bin /usr/bin/python3 bench/online_floor.py --rows "$ROWS" --bootstrap "$BOOTSTRAP" \
  --emb "$EMB" --wide-lr "$WIDE_LR"
