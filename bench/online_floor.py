#!/usr/bin/env python3
"""The floor of online training: ctr-train's progressive NE against an online
logistic regression on hashed features (scikit-learn's SGDClassifier with
log loss, partial_fit), on the same stream with the same protocol: every
chunk of CHUNK rows is scored before it is trained on, in stream order.

Streams: a drifting ctr-gen stream (--drift), the bundled Criteo rows, and a
categorical-only drifting stream (--shape categorical). The regression's
settings (alpha, learning rate) are chosen on a development stream (other
rows: another data seed, or the Criteo file's first quarter), never on the
rows scored; ctr-train runs with its defaults (--wide-lr auto: chosen on the
dev streams). The regression is seeded (random_state 0). 95% intervals: a paired block
bootstrap over chunks (the same resamples for both models), for each model's
NE and for the difference ctr-train - LR (below 0: ctr-train is better).

    python3 bench/online_floor.py --rows 1000000
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
from sklearn.feature_extraction import FeatureHasher
from sklearn.linear_model import SGDClassifier

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("SS_BIN", os.path.join(ROOT, "build", "bin"))


def tokens(line):
    f = line.rstrip("\n").split("\t")
    toks = []
    for j, v in enumerate(f[1:14]):
        if v:
            x = int(v)
            toks.append("i%d=%d" % (j, int(math.log2(x + 1)) if x > 0 else -1 if x < 0 else 0))
    for j, v in enumerate(f[14:40]):
        if v:
            toks.append("c%d=%s" % (j, v))
    return int(f[0]), toks


def chunks(path, chunk):
    with open(path) as fh:
        ys, xs = [], []
        for line in fh:
            y, t = tokens(line)
            ys.append(y)
            xs.append(t)
            if len(ys) == chunk:
                yield np.array(ys), xs
                ys, xs = [], []
        if ys:
            yield np.array(ys), xs


def lr_progressive(path, chunk, alpha, eta0):
    """(rows, clicks, logloss_sum) per chunk of the online LR."""
    hasher = FeatureHasher(n_features=1 << 20, input_type="string", alternate_sign=False)
    model = SGDClassifier(loss="log_loss", alpha=alpha, random_state=0,
                          learning_rate="constant" if eta0 else
                          "optimal", eta0=eta0 or 0.0)
    out, fitted, prior = [], False, None
    for y, toks in chunks(path, chunk):
        x = hasher.transform(toks)
        if fitted:
            p = model.predict_proba(x)[:, 1]
        else:
            p = np.full(len(y), 0.25 if prior is None else prior)
        p = np.clip(p, 1e-7, 1 - 1e-7)
        loss = -(y * np.log(p) + (1 - y) * np.log1p(-p)).sum()
        out.append((len(y), float(y.sum()), float(loss)))
        model.partial_fit(x, y, classes=[0, 1])
        fitted = True
    return np.array(out)


def ctr_train_progressive(path, chunk, work, emb, wide_lr):
    out = os.path.join(work, "prog.txt")
    with open(path) as fin:
        r = subprocess.run([os.path.join(BIN, "ctr-train"), "--train", "-", "--progress", "0",
                            "--stream-chunk-rows", str(chunk), "--progressive-out", out,
                            "--emb", emb, "--wide-lr", wide_lr],
                           stdin=fin, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("ctr-train failed: " + r.stderr[-2000:])
    return np.loadtxt(out, ndmin=2)


def ne(sums):
    n, c, l = sums[..., 0], sums[..., 1], sums[..., 2]
    ctr = c / n
    return (l / n) / -(ctr * np.log(ctr) + (1 - ctr) * np.log(1 - ctr))


def bootstrap(a, b, reps, seed=7):
    """95% intervals of NE(a), NE(b), NE(a) - NE(b): paired over chunks."""
    rng = np.random.default_rng(seed)
    k = len(a)
    idx = rng.integers(0, k, size=(reps, k))
    na, nb = ne(a[idx].sum(axis=1)), ne(b[idx].sum(axis=1))
    q = lambda v: (np.quantile(v, 0.025), np.quantile(v, 0.975))
    return q(na), q(nb), q(na - nb)


def pick_lr(dev, chunk):
    best = None
    for alpha in (1e-6, 1e-5, 1e-4):
        for eta0 in (0.0, 0.02, 0.05):
            v = ne(lr_progressive(dev, chunk, alpha, eta0).sum(axis=0))
            if best is None or v < best[0]:
                best = (v, alpha, eta0)
    return best[1], best[2]


def gen(work, name, rows, seed, extra):
    path = os.path.join(work, name)
    subprocess.run([os.path.join(BIN, "ctr-gen"), "--rows", str(rows), "--data-seed", str(seed),
                    "--out", path, "--quiet"] + extra, check=True, capture_output=True)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1000000, help="rows of each synthetic stream")
    ap.add_argument("--dev-rows", type=int, default=200000, help="rows of each development stream")
    ap.add_argument("--chunk", type=int, default=16384, help="rows scored, then trained, at a time")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples")
    ap.add_argument("--emb", default="array", help="ctr-train's --emb: array or local (a table)")
    ap.add_argument("--wide-lr", default="auto", help="ctr-train's --wide-lr")
    ap.add_argument("--criteo", default=os.path.join(ROOT, "data", "criteo-kaggle-head-8000.tsv"))
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ss-floor-")
    streams = []
    for name, extra in (("drift", ["--drift"]), ("categorical", ["--drift", "--shape", "categorical"])):
        streams.append((name, gen(work, name, a.rows, 1, extra),
                        gen(work, name + "-dev", a.dev_rows, 2, extra), a.chunk))
    with open(a.criteo) as f:
        lines = f.readlines()
    q = len(lines) // 4
    dev, scored = os.path.join(work, "criteo-dev"), os.path.join(work, "criteo")
    open(dev, "w").writelines(lines[:q])
    open(scored, "w").writelines(lines[q:])
    streams.append(("criteo", scored, dev, 256))  # 6,000 rows: smaller chunks
    print("ctr-train --emb %s --wide-lr %s" % (a.emb, a.wide_lr))
    print("the floor: progressive NE, ctr-train (defaults) vs online LR (hashed, SGD log loss; "
          "settings from a dev stream); 95%% paired block bootstrap (%d)" % a.bootstrap)
    print("%-12s %8s %8s %26s %26s %30s %s" % ("stream", "rows", "chunk", "ctr-train NE [95%]",
                                               "LR NE [95%]", "difference [95%]", "LR settings"))
    for name, path, dev, chunk in streams:
        alpha, eta0 = pick_lr(dev, chunk)
        lr = lr_progressive(path, chunk, alpha, eta0)
        ct = ctr_train_progressive(path, chunk, work, a.emb, a.wide_lr)
        k = min(len(lr), len(ct))
        lr, ct = lr[:k], ct[:k]
        assert (lr[:, 0] == ct[:, 0]).all(), "chunks differ"
        ia, ib, idf = bootstrap(ct, lr, a.bootstrap)
        nct, nlr = ne(ct.sum(axis=0)), ne(lr.sum(axis=0))
        print("%-12s %8d %8d %8.4f [%.4f, %.4f] %8.4f [%.4f, %.4f] %+9.4f [%+.4f, %+.4f] "
              "alpha=%g eta0=%s" % (name, int(ct[:, 0].sum()), chunk, nct, ia[0], ia[1], nlr,
                                    ib[0], ib[1], nct - nlr, idf[0], idf[1], alpha,
                                    eta0 or "optimal"))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
