#!/usr/bin/env bash
# (Issue 56) The reference-shaped DLRM (examples/pytorch/train_dlrm.py: 26
# nn.EmbeddingBag of Criteo's cardinalities) on the Criteo sample, PROCS
# processes under torchrun, each its own shard of the rows: examples/s of
# all of them and rank 0's held-out NE/AUC for
#   (a) ShadowSync, embeddings per process (--emb local)
#   (b) ShadowSync, the 26 tables shared through the PS, cached
#   (c) the same, remote
#   (d) PyTorch DDP (gloo)
# each divided by one plain PyTorch process and by (a), measured in the
# same run (medians of REPS, rep k with seed k: the model's and the
# tables' initial values differ by rep); then the same three ShadowSync
# modes in one process, divided by local. Run it on a quiet machine.
#   bash bench/pytorch-dlrm.sh                 # PROCS=4 EPOCHS=3 REPS=3
source "$(dirname "$0")/common.sh"
PROCS=${PROCS:-4}
EPOCHS=${EPOCHS:-3}
REPS=${REPS:-3}
export PYTHONPATH=$PWD/python SHADOWSYNC_LIBRARY=$PWD/build/trainer-hooks/libshadowsync.so
export SHADOWSYNC_PS_BIN=$PWD/build/bin/shadowsync-ps SHADOWSYNC_LOG_LEVEL=warn
exec /usr/bin/python3 - "$PROCS" "$EPOCHS" "$REPS" <<'PY'
import json, os, socket, statistics, subprocess, sys

procs, epochs, reps = (int(a) for a in sys.argv[1:])
data = "data/criteo-kaggle-head-8000.tsv"


def run(n, *flags):
    cmd = [sys.executable, "examples/pytorch/train_dlrm.py", "--train", data,
           "--epochs", str(epochs), *flags]
    if n > 1:
        with socket.socket() as s:  # a free port for torchrun's store
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = ["torchrun", "--redirects", "2", "--tee", "2", "--nproc_per_node", str(n),
               "--master_port", str(port)] + cmd[1:]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    # each rank's result, where the ranks' output lines may run together
    lines = [json.JSONDecoder().raw_decode(p)[0] for p in
             ("{\"rank\"" + part for part in out.stdout.split("{\"rank\"")[1:])]
    if out.returncode or len(lines) != n:
        sys.exit(f"pytorch-dlrm: {' '.join(cmd)} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    r0 = next(r for r in lines if r["rank"] == 0)
    return (sum(r["examples"] for r in lines) / max(r["seconds"] for r in lines), r0["ne"],
            r0["auc"])


setups = [("one plain PyTorch process", 1, ["--sync", "none"]),
          ("(a) ShadowSync, embeddings per process", procs, ["--sync", "shadowsync", "--emb", "local"]),
          ("(b) ShadowSync, 26 shared tables, cached", procs, ["--sync", "shadowsync", "--emb", "cached"]),
          ("(c) ShadowSync, 26 shared tables, remote", procs, ["--sync", "shadowsync", "--emb", "remote"]),
          ("(d) PyTorch DDP (gloo)", procs, ["--sync", "ddp"]),
          ("1 process: ShadowSync, local tables", 1, ["--sync", "shadowsync", "--emb", "local"]),
          ("1 process: ShadowSync, cached tables", 1, ["--sync", "shadowsync", "--emb", "cached"]),
          ("1 process: ShadowSync, remote tables", 1, ["--sync", "shadowsync", "--emb", "remote"])]
got = {name: [] for name, _, _ in setups}
for rep in range(reps):  # interleaved: a slow moment of the machine hits every setup alike
    for name, n, flags in setups:
        got[name].append(run(n, *flags, "--seed", str(rep + 1)))
        print(f"rep {rep + 1}/{reps}: {name}: {got[name][-1][0]:.0f} examples/s", file=sys.stderr,
              flush=True)
med = {k: tuple(statistics.median(x[i] for x in v) for i in range(3)) for k, v in got.items()}
single, per_proc, local1 = (med[setups[i][0]][0] for i in (0, 1, 5))
print(f"DLRM, 26 nn.EmbeddingBag, {data}, {epochs} epochs, medians of {reps} (seeds 1-{reps}); "
      f"{procs} processes under torchrun")
print("| setup | examples/s | ÷ one process | ÷ (a) | ÷ 1-process local | NE | AUC |")
print("|---|---|---|---|---|---|---|")
for name, n, _ in setups:
    eps, ne, auc = med[name]
    one = f"{eps / local1:.2f}" if n == 1 and "ShadowSync" in name else "-"
    print(f"| {name} | {eps:.0f} | {eps / single:.2f} | "
          f"{eps / per_proc:.2f} | {one} | {ne:.4f} | {auc:.4f} |")
PY
