#!/usr/bin/env python3
"""Trains dlrm_bags.DLRM (26 nn.EmbeddingBag of Criteo's cardinalities) on
Criteo-format TSV, as plain PyTorch or converted to ShadowSync with three
lines (see CONVERSION below), in one process or one per torchrun rank,
each rank on its own shard of the rows.

  --sync none        plain PyTorch: every process alone (one process: the
                     reference script)
  --sync ddp         PyTorch DistributedDataParallel over gloo (sparse
                     embedding gradients allreduced every step)
  --sync shadowsync  the dense MLPs in a ShadowSync group averaged in the
                     background (S-EASGD, --algo), the 26 tables in one
                     shadowsync.pytorch.EmbeddingBagCollection:
                     --emb cached (a local cache synced with the PS),
                     --emb remote (rows on the PS), --emb local (each
                     process its own tables, never synced)

    python3 examples/pytorch/train_dlrm.py --train data/criteo-kaggle-head-8000.tsv
    torchrun --redirects 2 --tee 2 --nproc_per_node 4 examples/pytorch/train_dlrm.py \\
        --sync shadowsync --emb cached --train data/criteo-kaggle-head-8000.tsv

Debian 12's torchrun (torch 1.13 on Python 3.11) fails with its default
--redirects 0 --tee 0 ("0" no longer parses there): pass --redirects 2
--tee 2 as above. Without --ps, rank 0 starts a shadowsync-ps on
127.0.0.1 ($SHADOWSYNC_PS_BIN, else on PATH, else build/bin) and hands its
address and token to the others. Every --progress steps each rank prints
a line (examples/s; with ShadowSync the rounds and the sync gap); at the
end one JSON line per rank: examples/s, and rank 0's NE and AUC on the
held-out rows (the last --test-rows of the file).
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dlrm import read_criteo_fields, scores  # noqa: E402
from dlrm_bags import DLRM, sparse_inputs, table_rows  # noqa: E402
from train import torchrun_ps  # noqa: E402


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--train", required=True, help="Criteo-format TSV")
    ap.add_argument("--test-rows", type=int, default=1600,
                    help="the file's last N rows are held out for NE/AUC")
    ap.add_argument("--max-lines", type=int, default=0, help="read at most this many rows")
    ap.add_argument("--sync", choices=["none", "ddp", "shadowsync"], default="none")
    ap.add_argument("--emb", choices=["cached", "remote", "local"], default="cached",
                    help="--sync shadowsync: where the 26 tables' rows live")
    ap.add_argument("--algo", choices=["easgd", "ma", "bmuf"], default="easgd")
    ap.add_argument("--ps", help="shadowsync-ps shards host:port,... (default: rank 0 starts one)")
    ap.add_argument("--max-table-rows", type=int, default=100000,
                    help="tables larger than this are hashed down to it (0: Criteo's own sizes)")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.1, help="SGD, every parameter and table")
    ap.add_argument("--emb-lr", type=float,
                    help="--emb cached|remote: the shared tables' SGD lr (default: --lr)")
    ap.add_argument("--decay-to", type=float, default=0.2,
                    help="the lr falls linearly to this fraction of --lr by the last step")
    ap.add_argument("--progress", type=int, default=0,
                    help="a progress line every N steps (0: none)")
    ap.add_argument("--seed", type=int, default=1)
    return ap.parse_args()


def progress(rank, step, examples, seconds, model):
    line = f"rank {rank}: step {step}, {examples / seconds:.0f} examples/s"
    group = getattr(model, "group", None)
    if group is not None:
        s = group.stats()
        line += f", rounds {s['rounds']}, sync gap p50 {s['gap_p50']} steps"
    print(line, flush=True)


def train(args, rank, world, ps):
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)  # the same initial model in every process
    rows = table_rows(args.max_table_rows)
    xd, xc, y = read_criteo_fields(args.train, rows, args.max_lines)
    n = len(y) - args.test_rows
    test, train_ctr = (xd[n:], xc[n:], y[n:]), float(y[:n].mean())
    mine = shard_indices(n, rank, world)
    xd, xc, y = xd[mine], xc[mine], y[mine]

    model = DLRM(rows, args.dim)
    if args.sync == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    if args.sync == "shadowsync":  # CONVERSION: these three lines
        model = ShadowSync(model, ps=ps, algo=args.algo, rank=rank, world_size=world)
        if args.emb != "local":
            model.module.emb_l = EmbeddingBagCollection.from_embedding_bags(
                model.module.emb_l, model.trainer, mode=args.emb, lr=args.emb_lr or args.lr,
                names=[f"emb{k}.seed{args.seed}" for k in range(len(model.module.emb_l))])
        if os.environ.get("SHADOWSYNC_HTTP_LISTEN"):  # each rank's own /metrics, for Prometheus
            print(f"rank {rank}: metrics at http://{model.trainer.http_address()}/metrics",
                  flush=True)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    inner = model.module if args.sync != "none" else model
    steps = args.epochs * ((len(y) + args.batch - 1) // args.batch)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 1 - (1 - args.decay_to) * min(s, steps) / max(steps, 1))
    if hasattr(inner.emb_l, "follow_lr"):
        inner.emb_l.follow_lr(opt)  # the tables' lr follows the schedule too
    lossf = torch.nn.BCEWithLogitsLoss()
    batches = [b for epoch in range(args.epochs) for b in torch.split(
        torch.randperm(len(y), generator=torch.Generator().manual_seed(epoch + rank)), args.batch)]
    ahead = getattr(inner.emb_l, "prefetch", None)
    examples, step, t0 = 0, 0, time.time()
    for j, i in enumerate(batches):
        indices, offsets = sparse_inputs(xc[i])
        opt.zero_grad()
        loss = lossf(model(xd[i], indices, offsets), y[i])
        if ahead and j + 1 < len(batches):  # optional: the next batch's rows on their way
            ahead(sparse_inputs(xc[batches[j + 1]])[0])
        loss.backward()
        opt.step()
        sched.step()
        examples, step = examples + len(i), step + 1
        if args.progress and step % args.progress == 0:
            progress(rank, step, examples, time.time() - t0, model)
    seconds = time.time() - t0
    if args.sync == "shadowsync":
        model.finish()  # the final rounds: the replicas meet the consensus
    result = {"rank": rank, "sync": args.sync + (f" emb={args.emb}" if args.sync ==
                                                  "shadowsync" else ""),
              "examples": examples, "seconds": round(seconds, 3),
              "examples_per_s": round(examples / seconds)}
    if rank == 0:
        inner.eval()
        with torch.no_grad():
            indices, offsets = sparse_inputs(test[1])
            p = torch.sigmoid(inner(test[0], indices, offsets)).numpy()
        result.update({k: round(v, 5) for k, v in scores(p, test[2].numpy(), train_ctr).items()})
    if args.sync == "shadowsync":
        model.close()
    return result


def main():
    global ShadowSync, EmbeddingBagCollection, shard_indices
    args = parse()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if args.sync == "ddp":
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=rank, world_size=world)
    if args.sync == "shadowsync":
        from shadowsync.pytorch import EmbeddingBagCollection, ShadowSync, shard_indices
    else:
        def shard_indices(n, rank, world):
            return torch.arange(rank, n, world)
    with torchrun_ps(rank, world, args.sync == "shadowsync" and not args.ps) as ps:
        print(json.dumps(train(args, rank, world, ps or args.ps)), flush=True)
    if args.sync == "ddp":
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
