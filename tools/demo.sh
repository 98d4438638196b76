#!/usr/bin/env bash
# The main job: installs dependencies, builds, generates synthetic click
# data with a known truth, and starts a local cluster on 127.0.0.1: 2
# shadowsync-ps shards, a shadowsync-agent and 3 trainer processes of the
# reference CTR model; the agent syncs every trainer's dense replica in the
# background (S-EASGD) on shared memory, the trainers only train, their
# embeddings in a local cache that a background thread syncs with the
# shards (--emb cached). Prints progress, then
# per-trainer and total examples/s, sync gap, NE and AUC, next to the
# Bayes-optimal NE of the test set.
#   bash tools/demo.sh [extra ctr-train flags, e.g. --algo ma]
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc 2>/dev/null || echo 2)
ROWS=${SHADOWSYNC_DEMO_ROWS:-1000000}

bash deploy/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$JOBS"
# The library, its headers, the daemons, the tools and the Python package
# under /usr/local (the paths deploy/systemd runs), for programs of your own.
if [ "$(id -u)" -eq 0 ]; then
  cmake --install build >/dev/null && ldconfig
  echo "installed under /usr/local: libshadowsync, shadowsync-ps, shadowsync-agent, the tools," \
    "the shadowsync Python package"
else
  echo "not root: skipping cmake --install build (run it with sudo for the library and Python package)"
fi

mkdir -p out
if [ ! -s "out/train-$ROWS.tsv" ]; then
  ./build/bin/ctr-gen --rows "$ROWS" --model-seed 42 --data-seed 1 --out "out/train-$ROWS.tsv"
fi
if [ ! -s out/test.tsv ]; then
  ./build/bin/ctr-gen --rows 100000 --model-seed 42 --data-seed 2 --out out/test.tsv \
    --probs out/test.probs | tee out/test.gen.txt
fi
echo "test set: $(grep -o 'bayes_ne=[0-9.]*' out/test.gen.txt) (the best any model can do)"
bash tools/cluster.sh --ps 2 --trainers 3 --agent --train "out/train-$ROWS.tsv" --test out/test.tsv \
  -- --sync shadow --algo easgd --emb cached --epochs 2 "$@"
