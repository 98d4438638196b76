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
import weakref

import numpy as np

from ._lib import DenseStats, TableStats, c_float_p, c_size_p, c_uint64_p, lib

__all__ = ["ShadowSyncError", "Trainer", "DenseGroup", "Table", "TableGroup", "Fetch", "version",
           "device_count"]

_OK = 0
_TOO_LARGE = 15
_STATE = 7  # SS_ERR_STATE


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


class _TrainerMemory:
    """The C trainer (ss_trainer) and the memory of its groups. It is freed
    (ss_trainer_close) when nothing holds it any more: the Trainer until
    close(), and every array or tensor handed out of a group's memory
    (numpy(), torch()), so that none of them ever reads freed memory."""

    def __init__(self, handle):
        self.handle = handle

    def __del__(self):
        if self.handle:
            h, self.handle = self.handle, None
            lib.ss_trainer_close(h)


class _View:
    """One group's floats as numpy sees them (__array_interface__), holding
    the trainer's memory alive for as long as an array or tensor uses it."""

    def __init__(self, memory, address, size):
        self._memory = memory
        self.__array_interface__ = {"shape": (size,), "typestr": "<f4",
                                    "data": (address, False), "version": 3}


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
            opened = ctypes.c_void_p()
            _check(lib.ss_trainer_open(handle, ctypes.byref(opened)))
        finally:
            cfg.close()
        self._memory = _TrainerMemory(opened)
        self._handle = opened
        self._groups = {}
        self._tables = []
        # Run by close() before the library frees the groups' memory (a
        # module shared by shadowsync.pytorch gets its parameters back).
        self._before_close = []

    def _live(self, what=None):
        if not self._handle:
            said = f"{what}: its trainer is closed" if what else "the trainer is closed"
            raise ShadowSyncError(_STATE, said + " (Trainer.close(), or the end of its with "
                                                 "block)")
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
        """finish() if not done, stops the tables, and frees the groups'
        memory once no array or tensor from DenseGroup.numpy()/torch()
        uses it any more (those keep it alive, and stay readable). Every
        call on the trainer, its groups and tables raises after."""
        if not self._handle:
            return
        for fn in self._before_close:
            fn()
        self._before_close = []
        for t in self._tables:
            t._drop_fetches()
        h, self._handle = self._handle, None
        memory, self._memory = self._memory, None
        try:
            _check(lib.ss_trainer_finish(h))
        finally:
            del memory  # freed now, unless a handed-out array still holds it

    def metrics(self):
        """The trainer's metrics, Prometheus text format."""
        need = ctypes.c_size_t()
        st = lib.ss_trainer_metrics(self._live("metrics()"), None, 0, ctypes.byref(need))
        if st not in (_OK, _TOO_LARGE):
            _check(st)
        buf = ctypes.create_string_buffer(need.value + 1)
        _check(lib.ss_trainer_metrics(self._handle, buf, len(buf), None))
        return buf.value.decode()

    def http_address(self):
        """"host:port" of this trainer's own /metrics, /status and /healthz
        (its http_listen setting: Trainer(http_listen="127.0.0.1:0") picks a
        port)."""
        buf = ctypes.create_string_buffer(300)
        _check(lib.ss_trainer_http_address(self._live("http_address()"), buf, len(buf)))
        return buf.value.decode()

    def table(self, name, dim, mode="local", **settings):
        """An embedding table of this trainer (see Table)."""
        self._live(f"table {name}")
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

    def _live(self):
        self.trainer._live(f"group {self.name}")
        return self._handle

    def numpy(self):
        """The replica as a float32 numpy array, zero-copy. The array keeps
        the group's memory alive: it stays readable after the trainer's
        close() (no longer synced). A device group has none: read() copies
        it."""
        if self.device is not None:
            raise ShadowSyncError(16, f"group {self.name} lives on CUDA device {self.device}: "
                                      "use read() for a host copy, or torch()")
        address = ctypes.cast(lib.ss_dense_data(self._live()), ctypes.c_void_p).value
        return np.asarray(_View(self.trainer._memory, address, self.size))

    def read(self):
        """A host copy of the replica (either kind of group)."""
        out = np.empty(self.size, np.float32)
        _check(lib.ss_dense_read(self._live(), out.ctypes.data_as(c_float_p)))
        return out

    def read_central(self):
        """The central model as the parameter servers hold it (the S-EASGD
        centre, or the last S-MA/S-BMUF round's result): the averaged
        model, to evaluate or save. A trainer with no PS of its own (an
        agent, peers, sync "none") has none: ShadowSyncError."""
        out = np.empty(self.size, np.float32)
        _check(lib.ss_dense_read_central(self._live(), out.ctypes.data_as(c_float_p)))
        return out

    @property
    def __cuda_array_interface__(self):
        """A device group's memory for CUDA consumers (PyTorch, CuPy, Numba),
        zero-copy: version 3 of the interface, no stream to wait for (the
        shadow pool's rounds run on their own stream, Hogwild as on the
        host)."""
        if self.device is None:
            raise AttributeError(f"group {self.name} is in host memory: use numpy()")
        return _DeviceView(self.trainer._memory, lib.ss_dense_device_data(self._live()),
                           self.size).__cuda_array_interface__

    def torch(self):
        """The replica as a float32 torch tensor, zero-copy: a CPU tensor,
        or for a device group a CUDA tensor on its device. The tensor keeps
        the group's memory alive, as numpy()'s array does."""
        import torch

        if self.device is not None:
            view = _DeviceView(self.trainer._memory, lib.ss_dense_device_data(self._live()),
                               self.size)
            return torch.as_tensor(view, device=f"cuda:{self.device}")
        return torch.from_numpy(self.numpy())

    def stats(self):
        """Steps, rounds, failed rounds, rejoins, sync gap and divergence."""
        s = DenseStats()
        _check(lib.ss_dense_get_stats(self._live(), ctypes.byref(s)))
        return {name: getattr(s, name) for name, _ in DenseStats._fields_}


class _DeviceView:
    """A device group's memory for CUDA consumers, holding the trainer's
    memory alive as _View does (PyTorch keeps the object it read
    __cuda_array_interface__ from)."""

    def __init__(self, memory, address, size):
        self._memory = memory
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "<f4",
                                         "descr": [("", "<f4")], "data": (address, False),
                                         "strides": None, "version": 3}


def _ids(ids, what="ids"):
    """ids as contiguous uint64: integers (not floats, not bools), none
    negative."""
    a = np.asarray(ids)
    if a.dtype.kind not in "iu":
        if a.size == 0:
            return np.zeros(0, np.uint64)
        raise ShadowSyncError(1, f"{what}: row ids are integers, not {a.dtype}")
    if a.dtype.kind == "i" and a.size and a.min() < 0:
        raise ShadowSyncError(1, f"{what}: row ids are not negative (found {a.min()})")
    return np.ascontiguousarray(a, dtype=np.uint64).reshape(-1)


class Table:
    """An embedding table (ss_table): mode "local" (in this process),
    "remote" (rows on the parameter servers) or "cached" (a local cache
    synced with them in the background). Settings are the table keys of
    docs/configuration.md, with or without their emb_ prefix: lr=0.05,
    optimizer="adagrad", ps="host:port,...". Without a trainer the table
    stands alone and close() closes it. Every call raises once the table
    (or its trainer) is closed."""

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
            owner = trainer._live(f"table {name}") if trainer is not None else None
            _check(lib.ss_table_open(owner, handle, ctypes.byref(self._handle)))
        finally:
            cfg.close()
        self.name, self.dim, self.mode, self._trainer = name, dim, mode, trainer
        self.settings = dict(settings)
        self._fetches = weakref.WeakSet()  # waited for (and dropped) at close
        self._groups = weakref.WeakSet()  # TableGroups with this table: theirs too

    def _live(self):
        if self._trainer is not None:
            self._trainer._live(f"table {self.name}")
        if not self._handle:
            raise ShadowSyncError(_STATE, f"table {self.name} is closed")
        return self._handle

    def lookup(self, ids):
        """Rows of ids: a float32 array of shape (len(ids), dim)."""
        ids = _ids(ids)
        rows = np.empty((ids.size, self.dim), np.float32)
        _check(lib.ss_table_lookup(self._live(), ids.ctypes.data_as(c_uint64_p), ids.size,
                                   rows.ctypes.data_as(c_float_p)))
        return rows

    def push(self, ids, grads):
        """Gradients of rows (len(ids) x dim); repeated ids add up."""
        ids = _ids(ids)
        grads = _grads(grads, ids.size, self.dim, f"table {self.name}")
        _check(lib.ss_table_push(self._live(), ids.ctypes.data_as(c_uint64_p), ids.size,
                                 grads.ctypes.data_as(c_float_p)))

    def prefetch(self, ids):
        """Starts fetching rows of ids in the background (the next batch)."""
        ids = _ids(ids)
        f = ctypes.c_void_p()
        _check(lib.ss_table_prefetch(self._live(), ids.ctypes.data_as(c_uint64_p), ids.size,
                                     ctypes.byref(f)))
        fetch = Fetch(f, ids.size * self.dim, (ids.size, self.dim), lib.ss_table_fetch_wait, self)
        self._fetches.add(fetch)
        return fetch

    def warm(self, ids):
        """Cached: loads the rows of ids it does not hold (batches coming up)
        in the background, in one call; a hint, other modes ignore it."""
        ids = _ids(ids)
        _check(lib.ss_table_warm(self._live(), ids.ctypes.data_as(c_uint64_p), ids.size))

    def flush(self):
        """Remote: every queued push sent and applied; cached: rows synced."""
        _check(lib.ss_table_flush(self._live()))

    def stats(self):
        s = TableStats()
        _check(lib.ss_table_get_stats(self._live(), ctypes.byref(s)))
        return {name: getattr(s, name) for name, _ in TableStats._fields_}

    def _drop_fetches(self):
        for f in list(self._fetches):
            f._drop()
        for g in list(self._groups):
            g._drop_fetches()

    def close(self):
        """A standalone table: flush and free (a trainer's closes with it)."""
        if self._trainer is None and self._handle:
            self._drop_fetches()
            h, self._handle = self._handle, None
            _check(lib.ss_table_close(h))


def _grads(grads, rows, dim, who):
    grads = np.asarray(grads)
    if grads.dtype.kind not in "fiu":
        raise ShadowSyncError(1, f"{who}: gradients are numbers, not {grads.dtype}")
    if grads.ndim == 2 and grads.shape != (rows, dim):
        raise ShadowSyncError(9, f"{who}: gradients of shape {grads.shape} for {rows} ids of "
                                 f"dim {dim}: ({rows}, {dim}) (transposed?)")
    grads = np.ascontiguousarray(grads, dtype=np.float32)
    if grads.size != rows * dim:
        raise ShadowSyncError(9, f"{who}: {rows} ids need {rows * dim} gradient floats, "
                                 f"not {grads.size}")
    return grads


class Fetch:
    """Rows being fetched; wait() gives them (once). A fetch still waiting
    when its table closes is dropped then (wait() raises)."""

    def __init__(self, handle, floats, shape, wait, owner):
        self._handle, self._floats, self._shape, self._wait = handle, floats, shape, wait
        self._owner = owner

    def wait(self):
        if not self._handle:
            raise ShadowSyncError(_STATE, "this fetch was already waited for, or its tables "
                                          "closed")
        self._owner._live()
        rows = np.empty(self._floats, np.float32)
        h, self._handle = self._handle, None
        _check(self._wait(h, rows.ctypes.data_as(c_float_p)))
        return rows.reshape(self._shape)

    def _drop(self):
        if self._handle:
            h, self._handle = self._handle, None
            self._wait(h, None)


class TableGroup:
    """Several tables used together (an embedding model's features): one
    call into the library a batch for all of them (ss_table_*_many). ids
    are every table's ids one after the other (table 0's first), counts
    how many each has; rows and gradients are laid out the same way,
    counts[k] x dim of table k floats each (a flat float32 array). The
    remote tables' calls travel together."""

    def __init__(self, tables):
        self.tables = list(tables)
        if not self.tables:
            raise ShadowSyncError(1, "TableGroup: no tables")
        self._array = (ctypes.c_void_p * len(self.tables))(*[t._handle for t in self.tables])
        self.dims = np.array([t.dim for t in self.tables], np.int64)
        self._fetches = weakref.WeakSet()
        for t in self.tables:  # a table's close drops this group's fetches too
            t._groups.add(self)

    def _live(self):
        for t in self.tables:
            t._live()
        return self._array

    def _counts(self, counts, ids):
        c = np.ascontiguousarray(counts, dtype=np.uint64).reshape(-1)
        if c.size != len(self.tables):
            raise ShadowSyncError(1, f"TableGroup: {c.size} counts for {len(self.tables)} tables")
        if int(c.sum()) != ids.size:
            raise ShadowSyncError(1, f"TableGroup: counts add up to {int(c.sum())}, "
                                     f"not the {ids.size} ids")
        return c, int((c.astype(np.int64) * self.dims).sum())

    def lookup(self, ids, counts):
        """Every table's rows of its ids: a flat float32 array."""
        ids = _ids(ids)
        c, floats = self._counts(counts, ids)
        rows = np.empty(floats, np.float32)
        _check(lib.ss_table_lookup_many(self._live(), len(self.tables),
                                        ids.ctypes.data_as(c_uint64_p),
                                        c.ctypes.data_as(c_size_p),
                                        rows.ctypes.data_as(c_float_p)))
        return rows

    def push(self, ids, counts, grads):
        """Every table's gradients (all or nothing: none is taken when one
        is NaN or Inf)."""
        ids = _ids(ids)
        c, floats = self._counts(counts, ids)
        grads = np.ascontiguousarray(grads, dtype=np.float32).reshape(-1)
        if grads.size != floats:
            raise ShadowSyncError(9, f"TableGroup: the ids need {floats} gradient floats, "
                                     f"not {grads.size}")
        _check(lib.ss_table_push_many(self._live(), len(self.tables),
                                      ids.ctypes.data_as(c_uint64_p),
                                      c.ctypes.data_as(c_size_p),
                                      grads.ctypes.data_as(c_float_p)))

    def push_prefetch(self, push_ids, push_counts, grads, ids, counts):
        """This batch's push and the next batch's fetch (a Fetch: wait()
        gives the flat rows)."""
        push_ids, ids = _ids(push_ids), _ids(ids)
        pc, pfloats = self._counts(push_counts, push_ids)
        c, floats = self._counts(counts, ids)
        grads = np.ascontiguousarray(grads, dtype=np.float32).reshape(-1)
        if grads.size != pfloats:
            raise ShadowSyncError(9, f"TableGroup: the ids need {pfloats} gradient floats, "
                                     f"not {grads.size}")
        f = ctypes.c_void_p()
        _check(lib.ss_table_push_prefetch_many(
            self._live(), len(self.tables), push_ids.ctypes.data_as(c_uint64_p),
            pc.ctypes.data_as(c_size_p), grads.ctypes.data_as(c_float_p),
            ids.ctypes.data_as(c_uint64_p), c.ctypes.data_as(c_size_p), ctypes.byref(f)))
        fetch = Fetch(f, floats, (floats,), lib.ss_table_fetch_many_wait, self)
        self._fetches.add(fetch)
        return fetch

    def warm(self, ids, counts):
        """Cached tables load the rows of ids they do not hold, in the
        background (a hint)."""
        ids = _ids(ids)
        c, _ = self._counts(counts, ids)
        _check(lib.ss_table_warm_many(self._live(), len(self.tables),
                                      ids.ctypes.data_as(c_uint64_p), c.ctypes.data_as(c_size_p)))

    def _drop_fetches(self):
        for f in list(self._fetches):
            f._drop()

