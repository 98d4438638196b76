#!/usr/bin/env python3
"""A DLRM trained by several PyTorch processes on Criteo-format TSV, kept
together one of five ways (the same model, data and processes for each):

  --mode shadowsync   ShadowSync in the background: the dense parameters in a
                      ShadowSync group (shadowsync.pytorch.share_module), synced
                      by the in-process shadow pool (or the host's agent, --agent)
                      with S-EASGD, S-MA or S-BMUF (--algo); the embeddings in a
                      ShadowSync table (--emb cached|remote) or local (--emb local:
                      each process its own, never synced)
  --mode ddp          PyTorch DistributedDataParallel over gloo: an allreduce of
                      every gradient, embeddings included, at every step
  --mode localsgd     PyTorch post-local SGD: torch.distributed's
                      PeriodicModelAverager averages every parameter every K steps
                      (--period), in the training loop
  --mode none         every process alone (the throughput baseline)

    python3 examples/pytorch/train.py --mode shadowsync --procs 4 \\
        --train data/criteo-kaggle-head-8000.tsv --test data/criteo-kaggle-head-8000.tsv
    torchrun --redirects 2 --tee 2 --nproc_per_node 4 examples/pytorch/train.py \\
        --mode shadowsync --train data/criteo-kaggle-head-8000.tsv --test-rows-from-end 1600

(Debian 12's torchrun, torch 1.13 on Python 3.11, fails with its default
--redirects 0 --tee 0: "0" no longer parses there; pass 2 as above.)

Prints one JSON line: mode, processes, examples, seconds, examples/s (all
processes), and rank 0's model's NE (by the training set's CTR) and AUC on
--test. Under torchrun (RANK and WORLD_SIZE set, no --rank) each rank is a
process of its own and prints its line. Without --ps, shadowsync mode starts a shadowsync-ps on 127.0.0.1
itself ($SHADOWSYNC_PS_BIN, else shadowsync-ps on PATH, else build/bin).
"""
import argparse
import atexit
import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dlrm import DLRM, NUM_CAT, read_criteo, scores  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(args, rank, world):
    xd, xc, y = read_criteo(args.train, args.table_rows, args.max_rows)
    if args.test_rows_from_end:  # a time split of one file: the last rows are the test set
        n = len(y) - args.test_rows_from_end
        test = (xd[n:], xc[n:], y[n:])
        xd, xc, y = xd[:n], xc[:n], y[:n]
    else:
        test = read_criteo(args.test, args.table_rows, args.max_test_rows)
    train_ctr = float(y.mean())
    return (xd[rank::world], xc[rank::world], y[rank::world]), test, train_ctr


def worker(rank, world, args, master, results):
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)  # the same initial model in every process
    (xd, xc, y), (td, tc, ty), train_ctr = load(args, rank, world)
    tables = args.mode == "shadowsync" and args.emb != "local"
    model = DLRM(args.table_rows, args.dim, embeddings=not tables)
    trainer = table = averager = None
    if args.mode in ("ddp", "localsgd"):
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://{master}" if master else "env://",
                                rank=rank, world_size=world)
        if args.mode == "ddp":
            model = torch.nn.parallel.DistributedDataParallel(model)
        else:
            from torch.distributed.algorithms.model_averaging.averagers import \
                PeriodicModelAverager
            averager = PeriodicModelAverager(period=args.period, warmup_steps=0)
    elif args.mode == "shadowsync":
        from shadowsync.pytorch import Embedding, ShadowSync
        # Like DDP: the wrapper's dense parameters are synced (in the
        # background) and each training forward pass counts a step.
        model = ShadowSync(model, ps=args.ps, agent=args.agent, sync="shadow", algo=args.algo,
                           name=args.name, rank=rank, world_size=world, trainer_name=f"py{rank}",
                           final_rounds=10, min_round_gap=args.min_round_gap, env=False)
        trainer = model.trainer
        if tables:
            table = trainer.table(args.name + ".emb", args.dim, mode=args.emb, ps=args.ps,
                                  optimizer="adagrad", lr=args.emb_lr, init_scale=0.05)
            emb = Embedding(table)  # rows with autograd: backward pushes their gradients
    inner = model.module if args.mode in ("ddp", "shadowsync") else model
    emb_params = [inner.emb.weight] if inner.emb is not None else []
    dense_params = [p for p in model.parameters() if all(p is not e for e in emb_params)]
    opts = [torch.optim.Adam(dense_params, lr=args.lr)]
    if emb_params:
        opts.append(torch.optim.SparseAdam(emb_params, lr=args.lr))
    lossf = torch.nn.BCEWithLogitsLoss()
    n = len(y)
    examples, steps = 0, 0
    t0 = time.time()
    for epoch in range(args.epochs):
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed + epoch + rank))
        batches = [perm[s:s + args.batch] for s in range(0, n, args.batch)]
        warmed_to = 1  # batches before this one have been warmed
        for j, i in enumerate(batches):
            for o in opts:
                o.zero_grad()
            # The rows of batches ahead load in the background while these
            # train (a cached table's hint; others ignore it): kept between
            # warm_batches and 2 x warm_batches ahead, so that a warm-up has
            # that many steps to come back before its rows are looked up,
            # and a lookup waits for the PS only for rows it has not brought.
            while table is not None and args.warm_batches and warmed_to < min(
                    j + 1 + 2 * args.warm_batches, len(batches)):
                ahead = batches[warmed_to:warmed_to + args.warm_batches]
                table.warm(xc[torch.cat(ahead)].numpy().reshape(-1))
                warmed_to += len(ahead)
            if table is not None:
                rows = emb(xc[i].reshape(-1)).view(len(i), NUM_CAT, args.dim)
                lossf(model(xd[i], rows=rows), y[i]).backward()
            else:
                lossf(model(xd[i], xc[i]), y[i]).backward()
            for o in opts:
                o.step()
            if averager is not None:
                averager.average_parameters(model.parameters())
            examples += len(i)
            steps += 1
    seconds = time.time() - t0
    if averager is not None and steps % args.period:  # the last partial period
        import torch.distributed as dist
        for p in model.parameters():
            dist.all_reduce(p.data)
            p.data /= world
    if trainer is not None:
        trainer.finish()  # the final rounds: the replicas meet the consensus
    result = {"rank": rank, "examples": examples, "seconds": seconds}
    if rank == 0:
        m = inner
        with torch.no_grad():
            if table is not None:
                rows = torch.from_numpy(table.lookup(tc.numpy().reshape(-1))).view(
                    len(ty), NUM_CAT, args.dim)
                p = torch.sigmoid(m(td, rows=rows)).numpy()
            else:
                p = torch.sigmoid(m(td, tc)).numpy()
        result.update(scores(p, ty.numpy(), train_ctr))
        result["mean_prediction"] = float(p.mean())
    if trainer is not None:
        model.close()
    if args.mode in ("ddp", "localsgd"):
        import torch.distributed as dist
        dist.destroy_process_group()
    results.put(result)


def ps_binary():
    for cand in (os.environ.get("SHADOWSYNC_PS_BIN"), shutil.which("shadowsync-ps"),
                 os.path.join(ROOT, "build", "bin", "shadowsync-ps")):
        if cand and os.access(cand, os.X_OK):
            return cand
    sys.exit("train.py: no shadowsync-ps (set SHADOWSYNC_PS_BIN or give --ps)")


def make_token(token=None):
    """Every call to a PS carries a token (no listener is open to the host's
    other users): one for this run (or the given one), 0600, that the PS and
    every trainer read through SHADOWSYNC_AUTH_TOKEN_FILE."""
    if os.environ.get("SHADOWSYNC_AUTH_TOKEN_FILE"):
        return
    fd, path = tempfile.mkstemp(prefix="shadowsync-token-")
    os.write(fd, token or secrets.token_hex(16).encode())
    os.close(fd)
    os.environ["SHADOWSYNC_AUTH_TOKEN_FILE"] = path
    atexit.register(lambda: os.path.exists(path) and os.unlink(path))


def start_ps():
    make_token()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", prefix="shadowsync-ps-")
    # The PS refuses SHADOWSYNC_INSECURE_LOOPBACK beside the token.
    env = {k: v for k, v in os.environ.items() if k != "SHADOWSYNC_INSECURE_LOOPBACK"}
    proc = subprocess.Popen([ps_binary(), "--listen", "127.0.0.1:0", "--http", ""],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    for _ in range(200):
        log.seek(0)
        for word in log.read().split():
            if word.startswith("127.0.0.1:") and word[10:].rstrip(",").isdigit():
                return proc, log, word.rstrip(",")
        time.sleep(0.05)
    proc.kill()
    sys.exit("train.py: shadowsync-ps did not start")


def torchrun_main(args):
    """One rank per process as torchrun starts them (RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT in the environment): ddp and localsgd join
    by env://; shadowsync without --ps or --agent has rank 0 start a PS
    and hands its address and token to the others through a store at
    MASTER_ADDR:MASTER_PORT (a run's own store: for a cluster, give --ps
    and SHADOWSYNC_AUTH_TOKEN_FILE instead). Each rank prints its line."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    run_ps = args.mode == "shadowsync" and not args.ps and not args.agent

    class Out:
        def put(self, r):
            print(json.dumps(r), flush=True)
    with torchrun_ps(rank, world, run_ps) as ps:
        args.ps = ps or args.ps
        worker(rank, world, args, None, Out())


@contextlib.contextmanager
def torchrun_ps(rank, world, run):
    """Under torchrun, when run: rank 0 starts a shadowsync-ps on 127.0.0.1
    and hands its address and token to the other ranks through a store at
    MASTER_ADDR:MASTER_PORT; yields the address (None when not run). The
    PS stays until every rank is done."""
    if not run:
        yield None
        return
    if world == 1 and "MASTER_ADDR" not in os.environ:  # one process, not under torchrun
        ps_proc, ps_log, address = start_ps()
        try:
            yield address
        finally:
            ps_proc.terminate()
            ps_proc.wait(timeout=30)
            ps_log.close()
        return
    from datetime import timedelta

    from torch.distributed import TCPStore
    # torchrun's agent serves the store itself (TORCHELASTIC_USE_AGENT_STORE);
    # a launcher that does not leaves it to rank 0.
    serve = rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, serve,
                     timedelta(seconds=120))
    ps_proc = None
    try:
        if rank == 0:
            ps_proc, ps_log, address = start_ps()
            with open(os.environ["SHADOWSYNC_AUTH_TOKEN_FILE"], "rb") as f:
                store.set("shadowsync_token", f.read())
            store.set("shadowsync_ps", address)
        else:
            address = store.get("shadowsync_ps").decode()
            make_token(store.get("shadowsync_token"))
        yield address
    finally:
        store.add("shadowsync_done", 1)
        while rank == 0 and store.add("shadowsync_done", 0) < world:
            time.sleep(0.1)
        if ps_proc:
            ps_proc.terminate()
            ps_proc.wait(timeout=30)
            ps_log.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--mode", choices=["shadowsync", "ddp", "localsgd", "none"],
                    default="shadowsync")
    ap.add_argument("--procs", type=int, default=4, help="trainer processes")
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", help="held-out rows (or --test-rows-from-end)")
    ap.add_argument("--test-rows-from-end", type=int, default=0,
                    help="use the last N rows of --train as the test set instead")
    ap.add_argument("--max-rows", type=int, default=0)
    ap.add_argument("--max-test-rows", type=int, default=0)
    ap.add_argument("--algo", choices=["easgd", "ma", "bmuf"], default="easgd")
    ap.add_argument("--emb", choices=["cached", "remote", "local"], default="cached",
                    help="shadowsync mode: the embeddings' home")
    ap.add_argument("--warm-batches", type=int, default=4,
                    help="cached tables: load the rows of this many batches ahead in the "
                    "background (0: off)")
    ap.add_argument("--ps", help="shadowsync-ps shards host:port,... (default: start one)")
    ap.add_argument("--agent", help="shadowsync mode: the host agent's unix socket")
    ap.add_argument("--period", type=int, default=10, help="localsgd: average every K steps")
    ap.add_argument("--min-round-gap", type=int, default=10,
                    help="shadowsync: steps of a process between two of its rounds (at most as "
                         "often as localsgd's --period; 0: back to back)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.002, help="Adam, the dense part")
    ap.add_argument("--emb-lr", type=float, default=0.03,
                    help="row-wise Adagrad of a ShadowSync table")
    ap.add_argument("--table-rows", type=int, default=4096, help="rows per field's table")
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rank", type=int, help="run only this rank in this process (the other "
                    "ranks run elsewhere, e.g. other hosts); prints its own JSON line")
    ap.add_argument("--master", help="with --rank: rank 0's host:port for torch.distributed")
    ap.add_argument("--name", default="dlrm",
                    help="shadowsync: the dense group's name (the table's: NAME.emb); runs that "
                         "share a PS need names of their own")
    args = ap.parse_args()
    if not args.test and not args.test_rows_from_end:
        ap.error("give --test or --test-rows-from-end")
    if args.rank is None and "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        torchrun_main(args)  # started by torchrun: one rank here, no rank flags
        return
    if args.rank is not None:  # one rank of a run spread over hosts
        if args.mode in ("ddp", "localsgd") and not args.master:
            ap.error("--rank with --mode ddp|localsgd needs --master host:port")
        if args.mode == "shadowsync" and not args.ps and not args.agent:
            ap.error("--rank with --mode shadowsync needs --ps or --agent")

        class Out:
            def put(self, r):
                print(json.dumps(r), flush=True)
        worker(args.rank, args.procs, args, args.master, Out())
        return
    ps_proc = ps_log = None
    if args.mode == "shadowsync" and not args.ps and not args.agent:
        ps_proc, ps_log, args.ps = start_ps()
    try:
        ctx = torch.multiprocessing.get_context("spawn")
        results = ctx.SimpleQueue()
        torch.multiprocessing.spawn(
            worker, args=(args.procs, args, f"127.0.0.1:{free_port()}", results),
            nprocs=args.procs)
        rs = [results.get() for _ in range(args.procs)]
    finally:
        if ps_proc:
            ps_proc.terminate()
            ps_proc.wait(timeout=30)
            ps_log.close()
    r0 = next(r for r in rs if r["rank"] == 0)
    examples = sum(r["examples"] for r in rs)
    seconds = max(r["seconds"] for r in rs)
    mode = args.mode + (f" {args.algo} emb={args.emb}" if args.mode == "shadowsync" else "") + (
        f" K={args.period}" if args.mode == "localsgd" else "")
    print(json.dumps({"mode": mode, "procs": args.procs, "examples": examples,
                      "seconds": round(seconds, 3), "examples_per_s": round(examples / seconds),
                      "ne": round(r0["ne"], 5), "auc": round(r0["auc"], 5),
                      "mean_prediction": round(r0["mean_prediction"], 4)}))


if __name__ == "__main__":
    main()
