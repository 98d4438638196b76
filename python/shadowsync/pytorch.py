"""PyTorch helpers: a torch.nn.Module's dense parameters living in a
ShadowSync group, so that optimizer.step() writes the replica the shadow
pool syncs.

    model = DLRM(...)
    group = shadowsync.pytorch.share_module(trainer, model, "dlrm")
    opt = torch.optim.Adam(model.parameters())   # after share_module
    ... loss.backward(); opt.step(); trainer.step()
"""
import os

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
        self._hook = (module.register_forward_pre_hook(self._count_step)
                      if step_on_forward else None)

    def _count_step(self, module, inputs):
        if module.training and torch.is_grad_enabled():
            self.trainer.step()

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def step(self):
        """One training step (with step_on_forward=False)."""
        self.trainer.step()

    def finish(self):
        """The final rounds: every replica as close to the others as the
        algorithm brings it (call before reading or saving the model)."""
        self.trainer.finish()

    def central_state_dict(self):
        """The module's state_dict with every dense parameter's value as the
        parameter servers hold it (the averaged model; embedding tables and
        buffers as this process has them). Needs a trainer with a PS."""
        flat = torch.from_numpy(self.group.read_central())
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


class _Lookup(torch.autograd.Function):
    """Rows of a ShadowSync table, pooled per bag; backward pushes each
    id's gradient to the table (whose optimizer applies it)."""

    @staticmethod
    def forward(ctx, anchor, table, ids, offsets, mode):
        rows = torch.from_numpy(table.lookup(ids.numpy()))
        ctx.table, ctx.ids, ctx.offsets, ctx.mode = table, ids, offsets, mode
        if offsets is None:
            return rows
        return _pool(rows, offsets, mode)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        if ctx.offsets is not None:
            lengths = torch.diff(ctx.offsets, append=torch.tensor([ctx.ids.numel()]))
            grad = grad.repeat_interleave(lengths, dim=0)
            if ctx.mode == "mean":
                grad = grad / lengths.clamp(min=1).repeat_interleave(lengths).unsqueeze(1)
        ctx.table.push(ctx.ids.numpy(), grad.numpy())
        return None, None, None, None, None


def _pool(rows, offsets, mode):
    bags = offsets.numel()
    lengths = torch.diff(offsets, append=torch.tensor([rows.shape[0]]))
    index = torch.repeat_interleave(torch.arange(bags), lengths)
    out = torch.zeros(bags, rows.shape[1]).index_add_(0, index, rows)
    if mode == "mean":
        out = out / lengths.clamp(min=1).unsqueeze(1).to(out.dtype)
    return out


class Embedding(torch.nn.Module):
    """A ShadowSync table (shadowsync.Table, any mode) as a module with
    autograd: forward(ids) gives the rows (len(ids) x dim); with offsets,
    EmbeddingBag-style: bag i is ids[offsets[i]:offsets[i+1]] (the last to
    the end), pooled by mode "sum" or "mean" (an empty bag is zeros). The
    backward pass pushes each id's gradient to the table, whose optimizer
    (emb_optimizer, emb_lr) applies it there: leave these rows out of the
    torch optimizer. CPU float32."""

    def __init__(self, table, mode="sum"):
        super().__init__()
        if mode not in ("sum", "mean"):
            raise ValueError(f"Embedding: mode {mode!r} is not sum or mean")
        self.table, self.mode = table, mode
        # Gives autograd a leaf to reach the table through (the rows are
        # not parameters of this process).
        self._anchor = torch.zeros((), requires_grad=True)

    def forward(self, ids, offsets=None):
        ids = torch.as_tensor(ids, dtype=torch.int64).reshape(-1)
        if offsets is not None:
            offsets = torch.as_tensor(offsets, dtype=torch.int64).reshape(-1)
            if offsets.numel() and (offsets[0] != 0 or (torch.diff(offsets) < 0).any()
                                    or offsets[-1] > ids.numel()):
                raise ValueError("Embedding: offsets must start at 0, not decrease and stay "
                                 f"within the {ids.numel()} ids")
        return _Lookup.apply(self._anchor, self.table, ids, offsets, self.mode)
