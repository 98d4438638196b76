"""PyTorch helpers: a torch.nn.Module's dense parameters living in a
ShadowSync group, so that optimizer.step() writes the replica the shadow
pool syncs.

    model = DLRM(...)
    group = shadowsync.pytorch.share_module(trainer, model, "dlrm")
    opt = torch.optim.Adam(model.parameters())   # after share_module
    ... loss.backward(); opt.step(); trainer.step()
"""
import os
import warnings

import torch

_EMBEDDINGS = (torch.nn.Embedding, torch.nn.EmbeddingBag)


def dense_parameters(module):
    """(name, parameter) of every parameter outside nn.Embedding and
    nn.EmbeddingBag: the dense part a ShadowSync group holds (embedding
    tables are synced row by row: use shadowsync.Table for them, or keep
    them local)."""
    skip = set()
    for m in module.modules():
        if isinstance(m, _EMBEDDINGS):
            skip.update(id(p) for p in m.parameters(recurse=False))
    return [(n, p) for n, p in module.named_parameters() if id(p) not in skip]


def share_module(trainer, module, name="model", parameters=None):
    """Moves the module's dense parameters (or the given (name, parameter)
    list) into one dense group named `name`: their values become the
    group's initial value and each parameter becomes a view of the group's
    memory (host memory, or for a module on a CUDA device a device group on
    that GPU). Create the optimizer afterwards (or it holds the old tensors'
    state). Every trainer must share the same module shape under the same
    name. When the trainer closes (close() or the end of its `with`), each
    parameter gets a copy of its last values in memory of its own, so the
    module stays usable after (the group's memory is freed then). Returns
    the DenseGroup."""
    params = dense_parameters(module) if parameters is None else list(parameters)
    if not params:
        raise ValueError(f"share_module: {type(module).__name__} has no dense parameters")
    device = params[0][1].device
    for n, p in params:
        if p.dtype != torch.float32 or p.device != device or device.type not in ("cpu", "cuda"):
            raise ValueError(f"share_module: parameter {n} is {p.dtype} on {p.device}; "
                             f"ShadowSync groups hold float32, all on one device ({device}: "
                             "host memory, or one CUDA device: a device group)")
    with torch.no_grad():
        init = torch.cat([p.detach().reshape(-1) for _, p in params]).cpu().numpy()
    # A CUDA module's parameters go into a device group on their GPU
    # (docs/gpu.md): the shadow pool syncs it without touching the
    # training's streams.
    cuda = device.type == "cuda"
    group = trainer.add_dense(name, init=init,
                              device=(device.index or 0) if cuda else None)
    flat = group.torch()
    offset = 0
    with torch.no_grad():
        for _, p in params:
            n = p.numel()
            p.data = flat[offset:offset + n].view_as(p)
            offset += n

    def own_copies():
        with torch.no_grad():
            for _, p in params:
                p.data = p.data.clone()

    trainer._before_close.append(own_copies)
    return group


def shard_indices(n, rank=None, world_size=None):
    """This rank's rows of a data set of n: every world_size-th row from
    row `rank` (a tensor of indices), rank and world size from the
    arguments, else torchrun's environment (RANK, WORLD_SIZE), else one
    process (every row). Every rank gets a disjoint share, together all
    rows, in sizes that differ by at most one."""
    rank, world_size, _ = _torchrun(rank, world_size)
    return torch.arange(rank, n, world_size)


def _torchrun(rank, world_size):
    """rank, world size and local rank: the arguments, else torchrun's
    environment (RANK, WORLD_SIZE, LOCAL_RANK), else one process."""
    env = os.environ
    rank = int(env.get("RANK", 0)) if rank is None else rank
    world_size = int(env.get("WORLD_SIZE", 1)) if world_size is None else world_size
    local_rank = int(env.get("LOCAL_RANK", rank))
    if not 0 <= rank < world_size:
        raise ValueError(f"ShadowSync: rank {rank} is not in [0, world_size {world_size})")
    return rank, world_size, local_rank


class ShadowSync(torch.nn.Module):
    """Wraps a module the way DistributedDataParallel does, without its
    allreduce: the module's dense parameters live in a ShadowSync group
    that a shadow thread pool averages with the other processes' in the
    background (S-EASGD, S-MA or S-BMUF through the parameter servers, or
    the host's agent), and training never waits for it.

        model = ShadowSync(DLRM(...), ps="ps-0:7070,ps-1:7070")  # before the optimizer
        opt = torch.optim.Adam(model.parameters())
        for x, y in loader:
            opt.zero_grad(); loss(model(x), y).backward(); opt.step()
        model.finish()                      # final rounds
        torch.save(model.central_state_dict(), "model.pt")   # the averaged model
        model.close()

    rank and world_size come from torchrun's environment (RANK, WORLD_SIZE)
    when not given; the trainer is named rank<R> in metrics and logs. ps
    or agent (or SHADOWSYNC_PS / SHADOWSYNC_AGENT) says where the others'
    replicas meet; sync="none" trains alone. Each forward pass in training
    mode counts one step (sync="foreground" runs its round there every
    sync_every steps); step_on_forward=False leaves it to step(). The
    other settings are the library's keys (Trainer). With trainer= an open
    Trainer is used (and left open by close())."""

    def __init__(self, module, ps=None, agent=None, sync="shadow", algo="easgd", name="model",
                 rank=None, world_size=None, trainer=None, step_on_forward=True, env=True,
                 **settings):
        super().__init__()
        from . import Trainer

        self.module = module
        self.rank, self.world_size, self.local_rank = _torchrun(rank, world_size)
        self._owns_trainer = trainer is None
        if trainer is None:
            if agent is not None:
                settings["agent"] = agent
            settings.setdefault("trainer_name", f"rank{self.rank}")
            trainer = Trainer(ps=ps, sync=sync, algo=algo, env=env, **settings)
        self.trainer = trainer
        self._params = dense_parameters(module)
        try:
            self.group = share_module(trainer, module, name, self._params)
        except Exception:
            if self._owns_trainer:
                trainer.close()
            raise
        # Where each parameter's values live: a module moved or cast
        # after wrapping (.double(), .to(), .cuda()) gets tensors of its
        # own, which the group no longer sees.
        self._homes = [(n, p, p.data_ptr(), p.dtype, p.device) for n, p in self._params]
        self._hook = (module.register_forward_pre_hook(self._count_step)
                      if step_on_forward else None)

    def _check_homes(self):
        for n, p, ptr, dtype, device in self._homes:
            if p.data_ptr() != ptr or p.dtype != dtype or p.device != device:
                raise RuntimeError(
                    f"ShadowSync: parameter {n} was moved or cast after wrapping (it is "
                    f"{p.dtype} on {p.device}, the synced group {dtype} on {device}): its values "
                    "no longer live in the group, so nothing would sync them. Move or cast the "
                    "module before wrapping it, as with DistributedDataParallel")

    def _count_step(self, module, inputs):
        if module.training and torch.is_grad_enabled():
            self._check_homes()
            self.trainer.step()

    def forward(self, *args, **kwargs):
        if self._hook is None and self.trainer is not None:
            self._check_homes()
        return self.module(*args, **kwargs)

    def step(self):
        """One training step (with step_on_forward=False)."""
        self._check_homes()
        self.trainer.step()

    def finish(self):
        """The final rounds: every replica as close to the others as the
        algorithm brings it (call before reading or saving the model)."""
        self.trainer.finish()

    def central_state_dict(self):
        """The module's state_dict with every dense parameter's value as the
        parameter servers hold it (the averaged model; embedding tables and
        buffers as this process has them): during training, and after
        finish() the centre the final rounds left (kept by finish). Before
        the first round the PS holds none: then this process's own values,
        with a warning that says so. Needs a trainer with a PS."""
        from . import ShadowSyncError

        if self.trainer is None:
            raise RuntimeError("ShadowSync: central_state_dict() after close(): call it before "
                               "close() (after finish() it gives the final centre)")
        try:
            flat = torch.from_numpy(self.group.read_central())
        except ShadowSyncError as e:
            if e.name != "state" or "no round has completed" not in e.message:
                raise
            warnings.warn(f"ShadowSync: {e.message}; central_state_dict() gives this process's "
                          "own values instead", RuntimeWarning, stacklevel=2)
            flat = torch.from_numpy(self.group.read())
        return _with_dense_values(self.module, self._params, flat)

    def close(self):
        """Stops syncing; the module keeps its parameters (copies of their
        last values). The trainer closes too unless it was given."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._owns_trainer and self.trainer is not None:
            self.trainer.close()
        self.trainer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _with_dense_values(module, params, flat):
    """module.state_dict() with the dense parameters' values taken, in
    order, from the flat float32 tensor."""
    state = module.state_dict()
    names = {id(p): n for n, p in module.named_parameters()}
    offset = 0
    for _, p in params:
        n = p.numel()
        state[names[id(p)]] = flat[offset:offset + n].view_as(p).clone()
        offset += n
    if offset != flat.numel():
        raise ValueError(f"the group holds {flat.numel()} floats, the module's dense parameters "
                         f"{offset}: not this module's group")
    return state


def load_dense_checkpoint(module, paths, name="model"):
    """The module's state_dict with its dense parameters as the PS
    checkpoints (--checkpoint-dir/dense.ckpt of every shard: one path or
    a list) hold group `name` (its central variable, else its last round's
    result): to evaluate or serve the averaged model without a PS.
    load_state_dict() it into the module."""
    from .deltas import join_chunks, read_dense_ckpt

    chunks = {}
    for path in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        chunks.update(read_dense_ckpt(path))
    groups = join_chunks(chunks)
    if name not in groups:
        raise KeyError(f"{paths}: no group {name!r} (groups: {', '.join(sorted(groups)) or 'none'})")
    return _with_dense_values(module, dense_parameters(module), torch.from_numpy(groups[name]))


class TableSpec:
    """One table of an EmbeddingBagCollection: its name (the same in every
    process), rows (num_embeddings: ids must be in [0, rows)), dim, and
    optionally its own lr, init_scale (rows start uniform in
    [-init_scale, init_scale]), optimizer ("sgd" or "adagrad") and pooling
    ("sum" or "mean"); unset ones take the collection's."""

    def __init__(self, name, rows, dim, lr=None, init_scale=None, optimizer=None, pooling=None):
        if rows < 1 or dim < 1:
            raise ValueError(f"TableSpec {name}: rows {rows} and dim {dim} must be at least 1")
        if pooling not in (None, "sum", "mean"):
            raise ValueError(f"TableSpec {name}: pooling {pooling!r} is not sum or mean")
        self.name, self.rows, self.dim = name, int(rows), int(dim)
        self.lr, self.init_scale, self.optimizer, self.pooling = lr, init_scale, optimizer, pooling

    def __repr__(self):
        return f"TableSpec({self.name!r}, rows={self.rows}, dim={self.dim})"


class _LookupMany(torch.autograd.Function):
    """Every table's rows of a batch in one call (flat); backward pushes
    every row's gradient in one call, or with the next batch's fetch when
    the collection was told it (prefetch)."""

    @staticmethod
    def forward(ctx, anchor, ebc, ids, counts):
        ctx.ebc, ctx.ids, ctx.counts = ebc, ids, counts
        return torch.from_numpy(ebc._rows_of(ids, counts))

    @staticmethod
    def backward(ctx, grad):
        ctx.ebc._push(ctx.ids, ctx.counts, grad)
        return None, None, None, None


class EmbeddingBagCollection(torch.nn.Module):
    """Many embedding tables as one module: what a DLRM's list of
    nn.EmbeddingBag (one per sparse feature) becomes with ShadowSync. The
    rows live in ShadowSync tables (mode "cached": a local cache synced
    with the parameter servers in the background; "remote": on them;
    "local": in this process only), and a batch of every feature costs one
    lookup and one push into the library, not one per table.

        ebc = EmbeddingBagCollection.from_embedding_bags(model.emb_l, trainer)
        pooled = ebc(indices, offsets)          # a list: [batch, dim] per table
        ebc.follow_lr(optimizer)                # the rows' lr follows its schedule

    forward(indices, offsets, per_sample_weights=None) takes, per table,
    the ids of the batch and the offsets of its bags (as
    nn.EmbeddingBag(ids, offsets) does; offsets may be None: one id a
    bag), and gives each table's pooled rows. Ids are checked: integers in
    [0, rows). The backward pass pushes the rows' gradients to the tables,
    whose optimizer (per table: sgd or row-wise adagrad) applies them:
    leave the collection out of the torch optimizer. CPU float32."""

    def __init__(self, tables, trainer, mode="cached", lr=0.05, optimizer="sgd", pooling="sum",
                 prefix="", **settings):
        super().__init__()
        import shadowsync

        self.specs = list(tables)
        if not self.specs:
            raise ValueError("EmbeddingBagCollection: no tables")
        self.trainer, self.mode = trainer, mode
        self.tables = []
        for spec in self.specs:
            cfg = dict(settings, lr=spec.lr if spec.lr is not None else lr,
                       optimizer=spec.optimizer or optimizer)
            if spec.init_scale is not None:
                cfg["init_scale"] = spec.init_scale
            self.tables.append(trainer.table(prefix + spec.name, spec.dim, mode=mode, **cfg))
        self.group = shadowsync.TableGroup(self.tables)
        self.pooling = [spec.pooling or pooling for spec in self.specs]
        self._rows = torch.tensor([s.rows for s in self.specs], dtype=torch.int64)
        self._dims = [s.dim for s in self.specs]
        self._base_lr = [float(t.settings["lr"]) for t in self.tables]
        self._sgd = [t.settings["optimizer"] == "sgd" for t in self.tables]
        self._lr_scale = 1.0
        self._follow = None
        self._next = None  # (ids, counts) of the next batch, told by prefetch()
        self._fetch = None  # (ids, counts, Fetch) of rows on their way
        self._anchor = torch.zeros((), requires_grad=True)

    @classmethod
    def from_embedding_bags(cls, bags, trainer, mode="cached", lr=0.05, names=None, **settings):
        """A collection with the shape of a list of nn.EmbeddingBag (or
        nn.Embedding): each one's rows, dim and pooling mode, and its init
        range read from its weights (their largest magnitude, which is the
        bound of a uniform init). Table k is named names[k], else
        "emb<k>"."""
        specs = []
        for k, bag in enumerate(bags):
            w = bag.weight
            pooling = getattr(bag, "mode", "sum")
            if pooling not in ("sum", "mean"):
                raise ValueError(f"from_embedding_bags: table {k} pools by {pooling!r}: "
                                 "ShadowSync tables pool by sum or mean")
            scale = float(w.detach().abs().max()) if w.numel() else 0.0
            name = names[k] if names else f"emb{k}"
            specs.append(TableSpec(name, w.shape[0], w.shape[1], init_scale=scale or None,
                                   pooling=pooling))
        return cls(specs, trainer, mode=mode, lr=lr, **settings)

    def follow_lr(self, optimizer):
        """From now on the tables' learning rates follow the optimizer's
        schedule: each table's lr times (the optimizer's lr now / its lr
        at this call), read at every backward pass. For sgd tables (the
        scaled gradient is the scaled step); an adagrad table keeps the
        lr it was opened with (row-wise Adagrad sets its own step size)."""
        base = float(optimizer.param_groups[0]["lr"])
        if base <= 0:
            raise ValueError(f"follow_lr: the optimizer's lr is {base}; it must be positive")
        self._follow = (optimizer, base)

    def set_lr_scale(self, scale):
        """Every sgd table's lr times scale from now on (a schedule by
        hand: set it each step)."""
        if not scale >= 0:
            raise ValueError(f"set_lr_scale: {scale} is not a non-negative number")
        self._lr_scale = float(scale)

    def _checked(self, indices, offsets, per_sample_weights):
        n = len(self.specs)
        if len(indices) != n or (offsets is not None and len(offsets) != n):
            raise ValueError(f"EmbeddingBagCollection: {n} tables, given {len(indices)} id "
                             f"tensors and {len(offsets) if offsets is not None else 0} offsets")
        ids = [torch.as_tensor(i).reshape(-1) for i in indices]
        for k, i in enumerate(ids):
            if i.dtype.is_floating_point or i.dtype.is_complex or i.dtype == torch.bool:
                raise ValueError(f"table {self.specs[k].name}: ids are integers, not {i.dtype}")
        counts = torch.tensor([i.numel() for i in ids], dtype=torch.int64)
        flat = torch.cat([i.to(torch.int64) for i in ids]) if ids else torch.zeros(0)
        bad = (flat < 0) | (flat >= torch.repeat_interleave(self._rows, counts))
        if bad.any():
            at = int(bad.nonzero()[0])
            k = int(torch.searchsorted(torch.cumsum(counts, 0), at, right=True))
            raise ValueError(f"table {self.specs[k].name}: id {int(flat[at])} is not in "
                             f"[0, {self.specs[k].rows})")
        return flat, counts

    def prefetch(self, indices):
        """The next batch's ids (per table, as forward takes them): remote
        tables fetch its rows with this batch's push, cached tables load
        the ones they miss in the background. Call it between this batch's
        forward and backward."""
        flat, counts = self._checked(indices, None, None)
        if self.mode == "cached":
            self.group.warm(flat.numpy(), counts.numpy())
        elif self.mode == "remote":
            self._next = (flat, counts)

    def _rows_of(self, flat, counts):
        if self._fetch is not None:
            ids, c, fetch = self._fetch
            self._fetch = None
            if torch.equal(ids, flat) and torch.equal(c, counts):
                return fetch.wait()
            fetch._drop()
        return self.group.lookup(flat.numpy(), counts.numpy())

    def _push(self, flat, counts, grad):
        grad = grad.contiguous()
        scale = self._lr_scale
        if self._follow is not None:
            opt, base = self._follow
            scale *= float(opt.param_groups[0]["lr"]) / base
        if scale != 1.0 and any(self._sgd):
            factors = torch.tensor([scale if sgd else 1.0 for sgd in self._sgd])
            per_float = torch.repeat_interleave(factors, counts * torch.tensor(self._dims))
            grad = grad * per_float
        if self._next is not None:
            nflat, ncounts = self._next
            self._next = None
            fetch = self.group.push_prefetch(flat.numpy(), counts.numpy(), grad.numpy(),
                                             nflat.numpy(), ncounts.numpy())
            self._fetch = (nflat, ncounts, fetch)
        else:
            self.group.push(flat.numpy(), counts.numpy(), grad.numpy())

    def forward(self, indices, offsets=None, per_sample_weights=None):
        flat, counts = self._checked(indices, offsets, per_sample_weights)
        rows = _LookupMany.apply(self._anchor, self, flat, counts)
        offs = [None if offsets is None or o is None else
                torch.as_tensor(o, dtype=torch.int64).reshape(-1)
                for o in (offsets if offsets is not None else [None] * len(self.specs))]
        if per_sample_weights is None and len(set(self._dims)) == 1:
            pooled = self._pool_alike(rows, counts, offs)
            if pooled is not None:
                return pooled
        out, at = [], 0
        for k, spec in enumerate(self.specs):
            n = int(counts[k])
            r = rows[at:at + n * spec.dim].view(n, spec.dim)
            psw = None if per_sample_weights is None else per_sample_weights[k]
            out.append(_pool(r, offs[k], self.pooling[k], psw, spec.name))
            at += n * spec.dim
        return out

    def _pool_alike(self, rows, counts, offs):
        """Tables of one dim pooled together: one id a bag everywhere (a
        Criteo-style batch) is the rows themselves; else one
        F.embedding_bag over every table's bags when they pool alike.
        None: neither fits (pooled table by table)."""
        dim = self._dims[0]
        rows = rows.view(-1, dim)
        n = counts.tolist()
        single = all(o is None or (o.numel() == c and (c == 0 or int(o[-1]) == c - 1)
                                   and (c < 2 or int(torch.diff(o).min()) == 1))
                     for o, c in zip(offs, n))
        if single:
            return list(torch.split(rows, n))
        if len(set(self.pooling)) != 1 or any(o is None for o in offs):
            return None
        for o, c, spec in zip(offs, n, self.specs):
            _check_offsets(o, c, spec.name)
        base = torch.repeat_interleave(torch.cumsum(counts, 0) - counts,
                                       torch.tensor([o.numel() for o in offs]))
        pooled = torch.nn.functional.embedding_bag(torch.arange(rows.shape[0]), rows,
                                                   torch.cat(offs) + base, mode=self.pooling[0])
        return list(torch.split(pooled, [o.numel() for o in offs]))

    def flush(self):
        """Every table's pushes applied (remote) or rows synced (cached)."""
        for t in self.tables:
            t.flush()


def _check_offsets(offsets, n, name):
    if offsets.numel() and (offsets[0] != 0 or (torch.diff(offsets) < 0).any()
                            or offsets[-1] > n):
        raise ValueError(f"table {name}: offsets must start at 0, not decrease and stay within "
                         f"the {n} ids")


def _pool(rows, offsets, mode, per_sample_weights, name):
    """Rows pooled per bag as nn.EmbeddingBag does (its own kernel:
    F.embedding_bag over the rows, so gradients flow back to them);
    offsets None: one row a bag."""
    n = rows.shape[0]
    if offsets is None:
        if per_sample_weights is not None:
            return rows * torch.as_tensor(per_sample_weights, dtype=rows.dtype).reshape(-1, 1)
        return rows
    _check_offsets(offsets, n, name)
    if per_sample_weights is not None:
        if mode != "sum":
            raise ValueError(f"table {name}: per_sample_weights pool by sum only (as "
                             "nn.EmbeddingBag)")
        per_sample_weights = torch.as_tensor(per_sample_weights, dtype=rows.dtype).reshape(-1)
        if per_sample_weights.numel() != n:
            raise ValueError(f"table {name}: {per_sample_weights.numel()} per_sample_weights "
                             f"for {n} ids")
    return torch.nn.functional.embedding_bag(torch.arange(n), rows, offsets, mode=mode,
                                             per_sample_weights=per_sample_weights)


class Embedding(torch.nn.Module):
    """A ShadowSync table (shadowsync.Table, any mode) as a module with
    autograd, in place of nn.Embedding or nn.EmbeddingBag: forward(ids)
    gives the rows (len(ids) x dim); with offsets, EmbeddingBag-style: bag
    i is ids[offsets[i]:offsets[i+1]] (the last to the end), pooled by
    mode "sum" or "mean" (an empty bag is zeros), per_sample_weights as
    nn.EmbeddingBag takes them. rows: the table's number of rows (ids
    outside [0, rows) are refused; None: any id). The backward pass pushes
    each id's gradient to the table, whose optimizer (emb_optimizer,
    emb_lr) applies it there: leave these rows out of the torch optimizer.
    For many tables, EmbeddingBagCollection does one call for all. CPU
    float32."""

    def __init__(self, table, mode="sum", rows=None):
        super().__init__()
        import shadowsync

        if mode not in ("sum", "mean"):
            raise ValueError(f"Embedding: mode {mode!r} is not sum or mean")
        self.table, self.mode, self.rows = table, mode, rows
        self._group = shadowsync.TableGroup([table])
        # Gives autograd a leaf to reach the table through (the rows are
        # not parameters of this process).
        self._anchor = torch.zeros((), requires_grad=True)

    def forward(self, ids, offsets=None, per_sample_weights=None):
        ids = torch.as_tensor(ids)
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise ValueError(f"table {self.table.name}: ids are integers, not {ids.dtype}")
        ids = ids.to(torch.int64).reshape(-1)
        if ids.numel() and (int(ids.min()) < 0 or (self.rows is not None
                                                   and int(ids.max()) >= self.rows)):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise ValueError(f"table {self.table.name}: id {bad} is not in "
                             f"[0, {self.rows if self.rows is not None else '2^64'})")
        counts = torch.tensor([ids.numel()])
        rows = _LookupMany.apply(self._anchor, self, ids, counts).view(-1, self.table.dim)
        if offsets is not None:
            offsets = torch.as_tensor(offsets, dtype=torch.int64).reshape(-1)
        return _pool(rows, offsets, self.mode, per_sample_weights, self.table.name)

    def _rows_of(self, flat, counts):
        return self._group.lookup(flat.numpy(), counts.numpy())

    def _push(self, flat, counts, grad):
        self._group.push(flat.numpy(), counts.numpy(), grad.contiguous().numpy())
