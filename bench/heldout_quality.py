#!/usr/bin/env python3
"""Held-out model quality on real Criteo rows: ctr-train with its default
flags against a logistic regression on hashed features (scikit-learn) and
a same-shape DLRM in PyTorch (Adam), all trained on the same rows and
scored on the same held-out rows; then 4 ctr-train trainers with S-EASGD,
S-MA and S-BMUF against one.

The split is by time: the file's last --test-fraction of rows are the test
set, never seen by any model (not for early stopping, not for tuning).
Each model carves its validation rows (early stopping, the LR's C) from the
end of its training rows the same way ctr-train does (--val-fraction 0.1).
NE is printed both ways: normalized by the training set's CTR (He et al.
2014) and by the test set's. The 95% intervals are a paired bootstrap over
test rows (the same resamples for every model): each model's interval and
the interval of its difference from ctr-train's.

    python3 bench/heldout_quality.py                 # data/criteo-kaggle-head-8000.tsv
    python3 bench/heldout_quality.py --data FILE --bootstrap 2000
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The PyTorch example's model, reader hashing and AUC: one copy of each.
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
from dlrm import DLRM, auc  # noqa: E402
NUM_DENSE, NUM_CAT = 13, 26


def read_rows(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 1 + NUM_DENSE + NUM_CAT and parts[0] in ("0", "1"):
                rows.append(parts)
    return rows


def write_rows(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write("\t".join(r) + "\n")


def dense_of(rows):
    x = np.zeros((len(rows), NUM_DENSE), np.float32)
    for i, r in enumerate(rows):
        for j in range(NUM_DENSE):
            v = r[1 + j]
            if v and not v.startswith("-"):
                x[i, j] = math.log1p(float(v))
    return x


def labels_of(rows):
    return np.array([float(r[0]) for r in rows], np.float32)


# ---- metrics ----

def logloss(p, y):
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))


def entropy(ctr):
    return -(ctr * math.log(ctr) + (1 - ctr) * math.log(1 - ctr))


def scores(p, y, train_ctr):
    ll = logloss(p, y)
    return {"ne": ll / entropy(train_ctr), "ne_test_ctr": ll / entropy(float(y.mean())),
            "auc": auc(p, y), "logloss": ll, "mean_p": float(p.mean())}


# ---- the models ----

def run_ctr_train(binary, train_path, test_path, preds_path, extra=()):
    cmd = [binary, "--train", train_path, "--test", test_path, "--predictions-out", preds_path,
           "--progress", "0", *extra]
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"heldout_quality: {' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    summary = [l for l in out.stdout.splitlines() if l.startswith("summary:")][-1]
    fields = dict(kv.split("=", 1) for kv in summary.split()[1:] if "=" in kv)
    return np.loadtxt(preds_path, dtype=np.float64), fields, time.time() - t0


def hashed_tokens(rows):
    """Categorical values and bucketized integer features as tokens."""
    docs = []
    for r in rows:
        toks = [f"c{j}={r[1 + NUM_DENSE + j]}" for j in range(NUM_CAT)]
        for j in range(NUM_DENSE):
            v = r[1 + j]
            b = "na" if v == "" else (str(int(math.log1p(max(float(v), 0)) ** 2)) if
                                      float(v) > 2 else v)
            toks.append(f"i{j}={b}")
        docs.append(toks)
    return docs


def logistic_regression(train_rows, test_rows, val_fraction):
    from sklearn.feature_extraction import FeatureHasher
    from sklearn.linear_model import LogisticRegression

    hasher = FeatureHasher(n_features=1 << 20, input_type="string", alternate_sign=False)
    xtr, xte = hasher.transform(hashed_tokens(train_rows)), hasher.transform(
        hashed_tokens(test_rows))
    ytr = labels_of(train_rows)
    nval = int(len(train_rows) * val_fraction)
    best = None
    for c in (0.01, 0.03, 0.1, 0.3, 1.0):  # C chosen on the validation rows only
        m = LogisticRegression(C=c, solver="liblinear", max_iter=1000)
        m.fit(xtr[:-nval], ytr[:-nval])
        ll = logloss(m.predict_proba(xtr[-nval:])[:, 1], ytr[-nval:])
        if best is None or ll < best[0]:
            best = (ll, c)
    m = LogisticRegression(C=best[1], solver="liblinear", max_iter=1000).fit(xtr, ytr)
    return m.predict_proba(xte)[:, 1], f"C={best[1]}"


def dlrm_pytorch(train_rows, test_rows, val_fraction, seed, table_rows=32768, dim=8,
                 bottom=32, top=64, batch=32, lr=1e-3, max_epochs=10, patience=1):
    """ctr-train's model in PyTorch: 26 hashed tables, bottom MLP 13->32->8,
    dot interaction of the 27 vectors, top MLP 359->64->1; Adam; epochs
    with early stopping on the validation rows, the best epoch kept."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)

    def cats(rows):
        idx = np.zeros((len(rows), NUM_CAT), np.int64)
        for i, r in enumerate(rows):
            for j in range(NUM_CAT):
                v = r[1 + NUM_DENSE + j]
                idx[i, j] = 0 if v == "" else 1 + zlib.crc32(f"{j}:{v}".encode()) % (table_rows - 1)
        return torch.from_numpy(idx + np.arange(NUM_CAT) * table_rows)

    nval = int(len(train_rows) * val_fraction)
    fit, val = train_rows[:-nval], train_rows[-nval:]
    xd, xc, y = torch.from_numpy(dense_of(fit)), cats(fit), torch.from_numpy(labels_of(fit))
    vd, vc, vy = torch.from_numpy(dense_of(val)), cats(val), labels_of(val)
    # dense embeddings and one Adam over everything, as a plain PyTorch DLRM
    model = DLRM(table_rows, dim, bottom, top, sparse=False)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    lossf = torch.nn.BCEWithLogitsLoss()
    best, best_state, bad = None, None, 0
    for epoch in range(max_epochs):
        perm = torch.randperm(len(y))
        model.train()
        for s in range(0, len(y), batch):
            i = perm[s:s + batch]
            opt.zero_grad()
            lossf(model(xd[i], xc[i]), y[i]).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            ll = logloss(torch.sigmoid(model(vd, vc)).numpy(), vy)
        if best is None or ll < best:
            best, best_state, bad = ll, {k: t.clone() for k, t in model.state_dict().items()}, 0
        else:
            bad += 1
            if bad >= patience:
                break
    model.load_state_dict(best_state)
    with torch.no_grad():
        p = torch.sigmoid(model(torch.from_numpy(dense_of(test_rows)), cats(test_rows))).numpy()
    return p.astype(np.float64), f"epochs={epoch + 1}"


# ---- the report ----

def bootstrap(preds, y, train_ctr, n, seed):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(y), size=(n, len(y)))
    out = {name: {"ne": [], "auc": []} for name in preds}
    for k in range(n):
        yk = y[idx[k]]
        if yk.min() == yk.max():
            continue
        for name, p in preds.items():
            s = scores(p[idx[k]], yk, train_ctr)
            out[name]["ne"].append(s["ne"])
            out[name]["auc"].append(s["auc"])
    return {name: {m: np.array(v) for m, v in d.items()} for name, d in out.items()}


def ci(a):
    return f"[{np.percentile(a, 2.5):.4f}, {np.percentile(a, 97.5):.4f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "criteo-kaggle-head-8000.tsv"))
    ap.add_argument("--ctr-train", default=os.path.join(ROOT, "build", "bin", "ctr-train"))
    ap.add_argument("--test-fraction", type=float, default=0.2)
    ap.add_argument("--val-fraction", type=float, default=0.1,
                    help="the baselines' validation rows (ctr-train's default)")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--skip-sync", action="store_true", help="only the one-trainer comparison")
    ap.add_argument("--seeds", type=int, default=10,
                    help="ctr-train runs per configuration (seeds 1..N; Hogwild threads make "
                         "even one seed vary): the table's row is seed 1's, the spread column "
                         "all of them")
    a = ap.parse_args()

    rows = read_rows(a.data)
    ntest = int(len(rows) * a.test_fraction)
    train_rows, test_rows = rows[:-ntest], rows[-ntest:]
    y = labels_of(test_rows).astype(np.float64)
    train_ctr = float(labels_of(train_rows).mean())
    print(f"data: {a.data}: {len(train_rows)} training rows (CTR {train_ctr:.4f}), "
          f"{len(test_rows)} held-out test rows (CTR {y.mean():.4f}, the file's last "
          f"{a.test_fraction:.0%})")
    tmp = tempfile.mkdtemp(prefix="heldout-")
    trp, tep = os.path.join(tmp, "train.tsv"), os.path.join(tmp, "test.tsv")
    write_rows(trp, train_rows)
    write_rows(tep, test_rows)

    preds, notes, spread = {}, {}, {}

    def ctr_train_config(name, extra=()):
        runs = []
        for seed in range(1, a.seeds + 1):
            p, fields, secs = run_ctr_train(a.ctr_train, trp, tep, os.path.join(tmp, f"p{seed}"),
                                            [*extra, "--seed", str(seed)])
            runs.append(scores(p, y, train_ctr))
            if seed == 1:
                preds[name] = p
                notes[name] = (f"{secs:.1f} s, epochs={fields.get('epochs', '?')} "
                               f"best={fields.get('best_epoch', '?')}")
        ne = [r["ne"] for r in runs]
        auc_ = [r["auc"] for r in runs]
        sd = np.std(ne, ddof=1) if len(ne) > 1 else 0.0
        spread[name] = (f"NE {np.mean(ne):.4f} [{min(ne):.4f}, {max(ne):.4f}] sd {sd:.4f}  "
                        f"AUC {np.mean(auc_):.4f} [{min(auc_):.4f}, {max(auc_):.4f}]")

    ctr_train_config("ctr-train (defaults)")
    t0 = time.time()
    p, note = logistic_regression(train_rows, test_rows, a.val_fraction)
    preds["logistic regression (sklearn)"] = p
    notes["logistic regression (sklearn)"] = f"{time.time() - t0:.1f} s, {note}"
    t0 = time.time()
    p, note = dlrm_pytorch(train_rows, test_rows, a.val_fraction, a.seed)
    preds["DLRM (PyTorch, Adam)"] = p
    notes["DLRM (PyTorch, Adam)"] = f"{time.time() - t0:.1f} s, {note}"
    if not a.skip_sync:
        for algo in ("easgd", "ma", "bmuf"):
            ctr_train_config(f"ctr-train 4 trainers, {algo}",
                             ["--trainers", "4", "--sync", "shadow", "--algo", algo])

    boot = bootstrap(preds, y, train_ctr, a.bootstrap, a.seed)
    base = "ctr-train (defaults)"
    print(f"\n{'model':34} {'NE':>7} {'95% CI':>18} {'NE-ctr':>8} {'95% CI':>18} {'AUC':>7} "
          f"{'95% CI':>18} {'AUC-ctr':>8} {'95% CI':>18} {'NE_test':>8} {'mean_p':>7}  notes")
    for name, p in preds.items():
        s = scores(p, y, train_ctr)
        d_ne = boot[name]["ne"] - boot[base]["ne"]
        d_auc = boot[name]["auc"] - boot[base]["auc"]
        print(f"{name:34} {s['ne']:7.4f} {ci(boot[name]['ne']):>18} "
              f"{s['ne'] - scores(preds[base], y, train_ctr)['ne']:+8.4f} {ci(d_ne):>18} "
              f"{s['auc']:7.4f} {ci(boot[name]['auc']):>18} "
              f"{s['auc'] - scores(preds[base], y, train_ctr)['auc']:+8.4f} {ci(d_auc):>18} "
              f"{s['ne_test_ctr']:8.4f} {s['mean_p']:7.4f}  {notes[name]}")
    print(f"\nctr-train over seeds 1-{a.seeds} (mean [min, max], sample sd):")
    for name, text in spread.items():
        print(f"  {name:34} {text}")
    print("\nNE: log loss / entropy of the training set's CTR (He et al. 2014); NE_test: / the "
          "test set's. X-ctr: the model's minus ctr-train's, with the paired bootstrap's 95% "
          f"interval ({a.bootstrap} resamples of the {len(y)} test rows). Lower NE, higher AUC "
          "are better.")


if __name__ == "__main__":
    main()
