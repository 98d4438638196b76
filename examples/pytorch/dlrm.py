"""The DLRM of the examples: ctr-train's model in PyTorch, and the Criteo
TSV reader. 26 hashed embedding tables, bottom MLP over the 13 integer
features (log1p), pairwise dot interaction of the 27 vectors, top MLP.

The embeddings are either an nn.Embedding of this module (held by every
process, synced the way the peer being compared syncs parameters) or rows
given to forward() from elsewhere (a ShadowSync table)."""
import math
import zlib

import numpy as np
import torch

NUM_DENSE, NUM_CAT = 13, 26


def read_criteo_fields(path, rows, max_rows=0):
    """(dense float32 [n, 13], ids int64 [n, 26], labels float32 [n]):
    field f's id is in [0, rows[f]), its value hashed; id 0 is its missing
    value. Lines that are not Criteo rows are skipped."""
    dense, ids, labels = [], [], []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 1 + NUM_DENSE + NUM_CAT or parts[0] not in ("0", "1"):
                continue
            labels.append(float(parts[0]))
            dense.append([math.log1p(float(v)) if v and not v.startswith("-") else 0.0
                          for v in parts[1:1 + NUM_DENSE]])
            ids.append([0 if not v else 1 + zlib.crc32(f"{j}:{v}".encode()) % (rows[j] - 1)
                        for j, v in enumerate(parts[1 + NUM_DENSE:])])
            if max_rows and len(labels) == max_rows:
                break
    return (torch.tensor(dense, dtype=torch.float32), torch.tensor(ids, dtype=torch.int64),
            torch.tensor(labels, dtype=torch.float32))


def read_criteo(path, table_rows, max_rows=0):
    """read_criteo_fields with table_rows rows a field, as global row ids of
    one table: field f's rows are f * table_rows + [0, table_rows)."""
    dense, ids, labels = read_criteo_fields(path, [table_rows] * NUM_CAT, max_rows)
    return dense, ids + torch.arange(NUM_CAT) * table_rows, labels


class DLRM(torch.nn.Module):
    def __init__(self, table_rows=4096, dim=8, bottom=32, top=64, embeddings=True, sparse=True):
        super().__init__()
        self.dim = dim
        self.emb = None
        if embeddings:
            # sparse: a step touches only the batch's rows (SparseAdam), as a
            # PyTorch CTR trainer would, not all 26 x table_rows of them
            self.emb = torch.nn.Embedding(NUM_CAT * table_rows, dim, sparse=sparse)
            torch.nn.init.uniform_(self.emb.weight, -0.05, 0.05)
        self.bottom = torch.nn.Sequential(torch.nn.Linear(NUM_DENSE, bottom), torch.nn.ReLU(),
                                          torch.nn.Linear(bottom, dim), torch.nn.ReLU())
        n = NUM_CAT + 1
        self.register_buffer("iu", torch.triu_indices(n, n, 1), persistent=False)
        self.top = torch.nn.Sequential(torch.nn.Linear(dim + n * (n - 1) // 2, top),
                                       torch.nn.ReLU(), torch.nn.Linear(top, 1))

    def forward(self, dense, ids=None, rows=None):
        """Logits. rows [B, 26, dim] when the embeddings live elsewhere."""
        b = self.bottom(dense)
        e = self.emb(ids) if rows is None else rows
        v = torch.cat([b.unsqueeze(1), e], 1)
        z = torch.bmm(v, v.transpose(1, 2))[:, self.iu[0], self.iu[1]]
        return self.top(torch.cat([b, z], 1)).squeeze(1)


def auc(p, y):
    """Area under the ROC curve, tied scores counted half (mean ranks)."""
    p = np.asarray(p, np.float64)
    y = np.asarray(y, np.float64)
    order = np.argsort(p, kind="mergesort")
    ranks = np.empty(len(p))
    ranks[order] = np.arange(1, len(p) + 1)
    # ties share their mean rank
    _, inv, counts = np.unique(p, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=ranks)
    ranks = sums[inv] / counts[inv]
    npos = y.sum()
    return (ranks[y == 1].sum() - npos * (npos + 1) / 2) / (npos * (len(y) - npos))


def scores(p, y, train_ctr):
    """NE (by the training set's CTR, He et al. 2014) and AUC."""
    p = np.clip(np.asarray(p, np.float64), 1e-7, 1 - 1e-7)
    y = np.asarray(y, np.float64)
    ll = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    h = -(train_ctr * math.log(train_ctr) + (1 - train_ctr) * math.log(1 - train_ctr))
    return {"ne": ll / h, "auc": auc(p, y), "logloss": ll}
