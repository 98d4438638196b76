"""PyTorch helpers: a torch.nn.Module's dense parameters living in a
ShadowSync group, so that optimizer.step() writes the replica the shadow
pool syncs.

    model = DLRM(...)
    group = shadowsync.pytorch.share_module(trainer, model, "dlrm")
    opt = torch.optim.Adam(model.parameters())   # after share_module
    ... loss.backward(); opt.step(); trainer.step()
"""
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
    memory. Create the optimizer afterwards (or it holds the old tensors'
    state). Every trainer must share the same module shape under the same
    name. When the trainer closes (close() or the end of its `with`), each
    parameter gets a copy of its last values in memory of its own, so the
    module stays usable after (the group's memory is freed then). Returns
    the DenseGroup."""
    params = dense_parameters(module) if parameters is None else list(parameters)
    if not params:
        raise ValueError(f"share_module: {type(module).__name__} has no dense parameters")
    for n, p in params:
        if p.dtype != torch.float32 or p.device.type != "cpu":
            raise ValueError(f"share_module: parameter {n} is {p.dtype} on {p.device}; "
                             "ShadowSync groups hold float32 in host memory")
    with torch.no_grad():
        init = torch.cat([p.detach().reshape(-1) for _, p in params]).numpy()
    group = trainer.add_dense(name, init=init)
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
