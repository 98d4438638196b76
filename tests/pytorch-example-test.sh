#!/usr/bin/env bash
# examples/pytorch as a user runs it: 4 PyTorch trainer processes of the
# DLRM synced by ShadowSync in the background (a real shadowsync-ps started
# by the example, the embeddings in a cached ShadowSync table), then the same
# with PyTorch's PeriodicModelAverager, on the Criteo sample. Each must
# train every row once and learn (NE below 1, AUC above 0.6).
#   pytorch-example-test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
export PYTHONPATH="$src/python" SHADOWSYNC_LIBRARY="$build/trainer-hooks/libshadowsync.so"
export SHADOWSYNC_PS_BIN="$build/bin/shadowsync-ps"
for mode in "--mode shadowsync --algo easgd" "--mode localsgd"; do
  # shellcheck disable=SC2086
  out=$(timeout 240 /usr/bin/python3 "$src/examples/pytorch/train.py" $mode --procs 4 \
    --train "$src/data/criteo-kaggle-head-8000.tsv" --max-rows 4000 --test-rows-from-end 1000)
  echo "$out"
  /usr/bin/python3 - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1].strip().splitlines()[-1])
assert r["procs"] == 4, r
assert r["examples"] == 3000, r  # 4000 rows, the last 1000 held out, each trained once
assert 0 < r["ne"] < 1.0 and r["auc"] > 0.6, r
PY
done
echo "pytorch example: 4 processes trained and learned with ShadowSync and with the PyTorch peer"
