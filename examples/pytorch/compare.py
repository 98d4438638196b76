#!/usr/bin/env python3
"""The peer table: the same DLRM, data and number of processes kept
together by PyTorch DDP (an allreduce every step), PyTorch post-local SGD
(PeriodicModelAverager every K steps, in the training loop), ShadowSync in
the background (S-EASGD, S-MA, S-BMUF; embeddings in a cached ShadowSync
table), and nothing. One run of train.py each, on 127.0.0.1; prints a
markdown table: examples/s (all processes) and its ratio to no sync, NE (by
the training set's CTR) and AUC of rank 0's model on the held-out rows.

    python3 examples/pytorch/compare.py --train data/criteo-kaggle-head-8000.tsv \\
        --test-rows-from-end 1600
    python3 examples/pytorch/compare.py --train out/train-200000.tsv --test out/test.tsv \\
        --max-rows 100000 --max-test-rows 20000
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

PEERS = [
    ("none (no sync)", ["--mode", "none"]),
    ("PyTorch DDP (gloo, allreduce every step)", ["--mode", "ddp"]),
    ("PyTorch PeriodicModelAverager, K=10", ["--mode", "localsgd", "--period", "10"]),
    ("ShadowSync S-EASGD (background)", ["--mode", "shadowsync", "--algo", "easgd"]),
    ("ShadowSync S-MA (background)", ["--mode", "shadowsync", "--algo", "ma"]),
    ("ShadowSync S-BMUF (background)", ["--mode", "shadowsync", "--algo", "bmuf"]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--procs", type=int, default=4, help="trainer processes of every run")
    ap.add_argument("--only", help="comma-separated modes to run (none,ddp,localsgd,shadowsync)")
    if "-h" in sys.argv[1:] or "--help" in sys.argv[1:]:
        ap.print_help()
        forwarded = subprocess.run([sys.executable, os.path.join(HERE, "train.py"), "--help"],
                                   capture_output=True, text=True).stdout
        options = forwarded.split("options:", 1)[-1].split("\n\n", 1)[0]
        print("\nEvery other flag goes to each train.py run (train.py --help):" + options)
        return
    args, passthrough = ap.parse_known_args()
    print(f"| peer ({args.procs} processes) | examples/s | ÷ no sync | NE | AUC | mean prediction |")
    print("|---|---|---|---|---|---|")
    base = None
    for name, flags in PEERS:
        if args.only and flags[1] not in args.only.split(","):
            continue
        cmd = [sys.executable, os.path.join(HERE, "train.py"), "--procs", str(args.procs),
               *flags, *passthrough]
        out = subprocess.run(cmd, capture_output=True, text=True)
        lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
        if out.returncode != 0 or not lines:
            sys.exit(f"compare.py: {' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
        r = json.loads(lines[-1])
        if flags[1] == "none":
            base = r["examples_per_s"]
        ratio = f"{r['examples_per_s'] / base:.2f}" if base else "-"
        print(f"| {name} | {r['examples_per_s']} | {ratio} | {r['ne']:.4f} | {r['auc']:.4f} | "
              f"{r['mean_prediction']:.4f} |", flush=True)


if __name__ == "__main__":
    main()
