"""ShadowSync for Python: trainers whose dense replicas a shadow thread pool
syncs in the background (S-EASGD, S-MA, S-BMUF), and embedding tables
(local, remote on the parameter servers, or cached), over libshadowsync.

    import numpy as np, shadowsync
    with shadowsync.Trainer(ps="127.0.0.1:7070", sync="shadow", algo="easgd") as t:
        w = t.add_dense("mlp", init=np.zeros(1000, np.float32))
        x = w.numpy()            # the replica itself (zero-copy); w.torch() likewise
        for batch in data:
            x -= 0.01 * grad(x, batch)
            t.step()             # never waits in shadow mode
        t.finish()               # final rounds; x stays readable until close

Settings are the library's keys (docs/configuration.md): Trainer(alpha=0.3,
rpc_timeout_ms=2000, ...); SHADOWSYNC_* variables are read first (env=True).
Every failure raises ShadowSyncError with the library's message, which names
the setting or argument that is wrong. Calls release the GIL.
"""
import ctypes

import numpy as np

from ._lib import DenseStats, TableStats, c_float_p, c_uint64_p, lib

__all__ = ["ShadowSyncError", "Trainer", "DenseGroup", "Table", "Fetch", "version",
           "device_count"]

_OK = 0
_TOO_LARGE = 15


def version():
    """The library's version, "MAJOR.MINOR.PATCH"."""
    return lib.ss_version().decode()


__version__ = version()


def device_count():
    """CUDA devices the library can use (0 when it was built without CUDA,
    or there is no driver or GPU: device_count_why() says which)."""
    return lib.ss_device_count()


def device_count_why():
    """Why device_count() is 0 ("" when it is not)."""
    return lib.ss_last_error().decode() if lib.ss_device_count() == 0 else ""


class ShadowSyncError(Exception):
    """A call of libshadowsync failed. status is the ss_status code, name its
    stable name ("invalid_argument"), message what the library said."""

    def __init__(self, status, message):
        self.status = status
        self.name = lib.ss_status_name(status).decode()
        self.message = message
        super().__init__(f"{message} [{self.name}]")


def _check(status):
    if status != _OK:
        msg = lib.ss_last_error().decode(errors="replace") or lib.ss_strerror(status).decode()
        raise ShadowSyncError(status, msg)


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class _Config:
    """A heap config and the bytes its strings point at (kept alive)."""

    def __init__(self, handle, setter, destroy):
        self.handle, self._setter, self._destroy = handle, setter, destroy
        self._keep = []

    def set(self, key, value):
        k, v = key.encode(), _text(value).encode()
        self._keep += [k, v]
        _check(self._setter(self.handle, k, v))

    def close(self):
        if self.handle:
            self._destroy(self.handle)
            self.handle = None


class Trainer:
    """One trainer process (ss_trainer). sync: "none", "shadow" (background
    rounds, step() never waits) or "foreground" (a round every sync_every
    steps, in step()). agent="/run/shadowsync/agent.sock" hands the syncing
    to the host's shadowsync-agent."""

    def __init__(self, ps=None, sync=None, env=True, **settings):
        handle = ctypes.c_void_p()
        _check(lib.ss_trainer_config_create(ctypes.byref(handle)))
        cfg = _Config(handle, lib.ss_trainer_config_set, lib.ss_trainer_config_destroy)
        try:
            if env:
                _check(lib.ss_trainer_config_from_env(handle))
            if ps is not None:
                cfg.set("ps", ps)
            if sync is not None:
                cfg.set("sync", sync)
            for key, value in settings.items():
                cfg.set(key, value)
            self._handle = ctypes.c_void_p()
            _check(lib.ss_trainer_open(handle, ctypes.byref(self._handle)))
        finally:
            cfg.close()
        self._groups = {}
        self._tables = []
        # Run by close() before the library frees the groups' memory (a
        # module shared by shadowsync.pytorch gets its parameters back).
        self._before_close = []

    def _live(self):
        if not self._handle:
            raise ShadowSyncError(7, "the trainer is closed")  # SS_ERR_STATE
        return self._handle

    def add_dense(self, name, size=None, init=None, device=None):
        """A dense group of `size` floats (or of init's, copied in), owned by
        the library and synced by the shadow pool. device=N puts it in the
        memory of CUDA device N (docs/gpu.md): then group.torch() is a CUDA
        tensor (with a CUDA build of PyTorch) and the group has
        __cuda_array_interface__."""
        if init is not None:
            init = np.ascontiguousarray(init, dtype=np.float32).reshape(-1)
            if size is not None and size != init.size:
                raise ShadowSyncError(9, f"group {name}: size {size} but init holds {init.size}")
            size = init.size
        if size is None:
            raise ShadowSyncError(1, f"group {name}: give size or init")
        g = ctypes.c_void_p()
        ptr = init.ctypes.data_as(c_float_p) if init is not None else None
        if device is None:
            _check(lib.ss_trainer_add_dense(self._live(), name.encode(), size, ptr,
                                            ctypes.byref(g)))
        else:
            _check(lib.ss_trainer_add_dense_device(self._live(), name.encode(), size, device, ptr,
                                                   ctypes.byref(g)))
        group = DenseGroup(self, name, g)
        self._groups[name] = group
        return group

    def step(self):
        """One training step done (thread-safe)."""
        _check(lib.ss_trainer_step(self._live()))

    def finish(self):
        """Final rounds and leave; the groups stay readable until close()."""
        _check(lib.ss_trainer_finish(self._live()))

    def close(self):
        """finish() if not done, then frees the groups' memory: arrays and
        tensors from DenseGroup.numpy()/torch() must not be used after."""
        if self._handle:
            for fn in self._before_close:
                fn()
            self._before_close = []
            h, self._handle = self._handle, None
            _check(lib.ss_trainer_close(h))

    def metrics(self):
        """The trainer's metrics, Prometheus text format."""
        need = ctypes.c_size_t()
        st = lib.ss_trainer_metrics(self._live(), None, 0, ctypes.byref(need))
        if st not in (_OK, _TOO_LARGE):
            _check(st)
        buf = ctypes.create_string_buffer(need.value + 1)
        _check(lib.ss_trainer_metrics(self._handle, buf, len(buf), None))
        return buf.value.decode()

    def table(self, name, dim, mode="local", **settings):
        """An embedding table of this trainer (see Table)."""
        t = Table(name, dim, mode=mode, trainer=self, **settings)
        self._tables.append(t)
        return t

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class DenseGroup:
    """A dense group: its floats are the replica the shadow pool syncs."""

    def __init__(self, trainer, name, handle):
        self.trainer, self.name, self._handle = trainer, name, handle
        self.size = lib.ss_dense_size(handle)
        dev = lib.ss_dense_device(handle)
        self.device = dev if dev >= 0 else None  # a CUDA device ordinal, or None

    def numpy(self):
        """The replica as a float32 numpy array, zero-copy (valid until the
        trainer's close()). A device group has none: read() copies it."""
        if self.device is not None:
            raise ShadowSyncError(16, f"group {self.name} lives on CUDA device {self.device}: "
                                      "use read() for a host copy, or torch()")
        ptr = lib.ss_dense_data(self._handle)
        return np.ctypeslib.as_array(ptr, shape=(self.size,))

    def read(self):
        """A host copy of the replica (either kind of group)."""
        out = np.empty(self.size, np.float32)
        _check(lib.ss_dense_read(self._handle, out.ctypes.data_as(c_float_p)))
        return out

    def read_central(self):
        """The central model as the parameter servers hold it (the S-EASGD
        centre, or the last S-MA/S-BMUF round's result): the averaged
        model, to evaluate or save. A trainer with no PS of its own (an
        agent, peers, sync "none") has none: ShadowSyncError."""
        out = np.empty(self.size, np.float32)
        _check(lib.ss_dense_read_central(self._handle, out.ctypes.data_as(c_float_p)))
        return out

    @property
    def __cuda_array_interface__(self):
        """A device group's memory for CUDA consumers (PyTorch, CuPy, Numba),
        zero-copy: version 3 of the interface, no stream to wait for (the
        shadow pool's rounds run on their own stream, Hogwild as on the
        host)."""
        if self.device is None:
            raise AttributeError(f"group {self.name} is in host memory: use numpy()")
        return {"shape": (self.size,), "typestr": "<f4", "descr": [("", "<f4")],
                "data": (lib.ss_dense_device_data(self._handle), False), "strides": None,
                "version": 3}

    def torch(self):
        """The replica as a float32 torch tensor, zero-copy: a CPU tensor,
        or for a device group a CUDA tensor on its device."""
        import torch

        if self.device is not None:
            return torch.as_tensor(self, device=f"cuda:{self.device}")
        return torch.from_numpy(self.numpy())

    def stats(self):
        """Steps, rounds, failed rounds, rejoins, sync gap and divergence."""
        s = DenseStats()
        _check(lib.ss_dense_get_stats(self._handle, ctypes.byref(s)))
        return {name: getattr(s, name) for name, _ in DenseStats._fields_}


def _ids(ids):
    return np.ascontiguousarray(ids, dtype=np.uint64).reshape(-1)


class Table:
    """An embedding table (ss_table): mode "local" (in this process),
    "remote" (rows on the parameter servers) or "cached" (a local cache
    synced with them in the background). Settings are the table keys of
    docs/configuration.md, with or without their emb_ prefix: lr=0.05,
    optimizer="adagrad", ps="host:port,...". Without a trainer the table
    stands alone and close() closes it."""

    def __init__(self, name, dim, mode="local", trainer=None, env=True, **settings):
        handle = ctypes.c_void_p()
        self._name = name.encode()
        _check(lib.ss_table_config_create(self._name, dim, ctypes.byref(handle)))
        cfg = _Config(handle, lib.ss_table_config_set, lib.ss_table_config_destroy)
        try:
            if env:
                _check(lib.ss_table_config_from_env(handle))
            cfg.set("emb", mode)
            for key, value in settings.items():
                cfg.set(key if key.startswith("emb") else "emb_" + key, value)
            self._handle = ctypes.c_void_p()
            owner = trainer._live() if trainer is not None else None
            _check(lib.ss_table_open(owner, handle, ctypes.byref(self._handle)))
        finally:
            cfg.close()
        self.name, self.dim, self.mode, self._trainer = name, dim, mode, trainer

    def lookup(self, ids):
        """Rows of ids: a float32 array of shape (len(ids), dim)."""
        ids = _ids(ids)
        rows = np.empty((ids.size, self.dim), np.float32)
        _check(lib.ss_table_lookup(self._handle, ids.ctypes.data_as(c_uint64_p), ids.size,
                                   rows.ctypes.data_as(c_float_p)))
        return rows

    def push(self, ids, grads):
        """Gradients of rows (len(ids) x dim); repeated ids add up."""
        ids = _ids(ids)
        grads = np.ascontiguousarray(grads, dtype=np.float32)
        if grads.size != ids.size * self.dim:
            raise ShadowSyncError(9, f"table {self.name}: {ids.size} ids need "
                                  f"{ids.size * self.dim} gradient floats, not {grads.size}")
        _check(lib.ss_table_push(self._handle, ids.ctypes.data_as(c_uint64_p), ids.size,
                                 grads.ctypes.data_as(c_float_p)))

    def prefetch(self, ids):
        """Starts fetching rows of ids in the background (the next batch)."""
        ids = _ids(ids)
        f = ctypes.c_void_p()
        _check(lib.ss_table_prefetch(self._handle, ids.ctypes.data_as(c_uint64_p), ids.size,
                                     ctypes.byref(f)))
        return Fetch(f, ids.size, self.dim)

    def warm(self, ids):
        """Cached: loads the rows of ids it does not hold (batches coming up)
        in the background, in one call; a hint, other modes ignore it."""
        ids = _ids(ids)
        _check(lib.ss_table_warm(self._handle, ids.ctypes.data_as(c_uint64_p), ids.size))

    def flush(self):
        """Remote: every queued push sent and applied; cached: rows synced."""
        _check(lib.ss_table_flush(self._handle))

    def stats(self):
        s = TableStats()
        _check(lib.ss_table_get_stats(self._handle, ctypes.byref(s)))
        return {name: getattr(s, name) for name, _ in TableStats._fields_}

    def close(self):
        """A standalone table: flush and free (a trainer's closes with it)."""
        if self._trainer is None and self._handle:
            h, self._handle = self._handle, None
            _check(lib.ss_table_close(h))


class Fetch:
    """Rows being fetched; wait() gives them (once)."""

    def __init__(self, handle, n, dim):
        self._handle, self._shape = handle, (n, dim)

    def wait(self):
        rows = np.empty(self._shape, np.float32)
        h, self._handle = self._handle, None
        if not h:
            raise ShadowSyncError(7, "this fetch was already waited for")
        _check(lib.ss_table_fetch_wait(h, rows.ctypes.data_as(c_float_p)))
        return rows
