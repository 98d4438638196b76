"""A DLRM shaped like the reference one (facebookresearch/dlrm): one
nn.EmbeddingBag per sparse feature (26, of Criteo Kaggle's very different
cardinalities), a bottom MLP over the 13 integer features, pairwise dot
interaction, a top MLP; and a batch's ids as the reference script feeds
nn.EmbeddingBag: a list of id tensors and a list of offsets (one id a
bag). dlrm.read_criteo_fields reads the rows, each feature its own ids.

Plain PyTorch: nothing of ShadowSync here. train_dlrm.py converts it."""
import math

import torch

from dlrm import NUM_DENSE

# Criteo Kaggle's distinct values per categorical feature (the reference
# DLRM's day_fea_count), from 3 to 10 million.
CRITEO_KAGGLE_ROWS = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683,
                      8351593, 3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15,
                      286181, 105, 142572]


def table_rows(max_rows):
    """Rows of each feature's table: Criteo Kaggle's counts, the large
    ones hashed down to max_rows (0: not at all)."""
    return [min(n, max_rows) if max_rows else n for n in CRITEO_KAGGLE_ROWS]


def sparse_inputs(ids):
    """A batch's ids [B, 26] as the reference DLRM feeds its tables: per
    feature, its B ids and offsets 0..B-1 (one id a bag)."""
    offsets = torch.arange(ids.shape[0])
    return [ids[:, f].contiguous() for f in range(ids.shape[1])], [offsets] * ids.shape[1]


def mlp(sizes):
    layers = []
    for i in range(len(sizes) - 1):
        lin = torch.nn.Linear(sizes[i], sizes[i + 1])
        # the reference DLRM's init: normal with a fan-based deviation
        lin.weight.data.normal_(0.0, math.sqrt(2 / (sizes[i] + sizes[i + 1])))
        lin.bias.data.normal_(0.0, math.sqrt(1 / sizes[i + 1]))
        layers += [lin, torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


class DLRM(torch.nn.Module):
    def __init__(self, rows, dim=16, bottom=(64, 32), top=(64, 32)):
        super().__init__()
        # One table per feature, initialised as the reference DLRM does:
        # uniform in +-sqrt(1/rows), so each table has its own range.
        self.emb_l = torch.nn.ModuleList()
        for n in rows:
            bag = torch.nn.EmbeddingBag(n, dim, mode="sum", sparse=True)
            bound = math.sqrt(1 / n)
            bag.weight.data.uniform_(-bound, bound)
            self.emb_l.append(bag)
        self.bot_l = torch.nn.Sequential(mlp([NUM_DENSE, *bottom, dim]), torch.nn.ReLU())
        n = len(rows) + 1
        self.register_buffer("iu", torch.triu_indices(n, n, 1), persistent=False)
        self.top_l = mlp([dim + n * (n - 1) // 2, *top, 1])

    def apply_emb(self, indices, offsets):
        """Each feature's pooled rows. A ShadowSync collection in place of
        the list looks every table up in one call."""
        if isinstance(self.emb_l, torch.nn.ModuleList):
            return [e(i, o, per_sample_weights=None)
                    for e, i, o in zip(self.emb_l, indices, offsets)]
        return self.emb_l(indices, offsets)

    def forward(self, dense, indices, offsets):
        x = self.bot_l(dense)
        v = torch.stack([x, *self.apply_emb(indices, offsets)], 1)
        z = torch.bmm(v, v.transpose(1, 2))[:, self.iu[0], self.iu[1]]
        return self.top_l(torch.cat([x, z], 1)).squeeze(1)

