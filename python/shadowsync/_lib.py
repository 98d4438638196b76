"""Loads libshadowsync and declares the C functions (ctypes). Internal.

The library is found, in order: $SHADOWSYNC_LIBRARY (a path to
libshadowsync.so), the library installed beside this package (cmake
--install puts both under one prefix), then the system's library path."""
import ctypes
import ctypes.util
import os

from . import _paths

c_size_p = ctypes.POINTER(ctypes.c_size_t)
c_float_p = ctypes.POINTER(ctypes.c_float)
c_uint64_p = ctypes.POINTER(ctypes.c_uint64)


class DenseStats(ctypes.Structure):
    """ss_dense_stats (include/shadowsync/shadowsync.h)."""
    _fields_ = [("iterations", ctypes.c_uint64), ("rounds", ctypes.c_uint64),
                ("failed_rounds", ctypes.c_uint64), ("rejoins", ctypes.c_uint64),
                ("gap_mean", ctypes.c_double), ("gap_p50", ctypes.c_uint64),
                ("gap_p99", ctypes.c_uint64), ("gap_max", ctypes.c_uint64),
                ("divergence", ctypes.c_double)]


class TableStats(ctypes.Structure):
    """ss_table_stats (include/shadowsync/shadowsync.h)."""
    _fields_ = [(name, ctypes.c_uint64) for name in
                ("lookups", "pushes", "remote_rows", "cache_hits", "synced_rows", "sync_passes",
                 "failed_calls", "push_waits", "resident_rows", "evictions")]


def _candidates():
    env = os.environ.get("SHADOWSYNC_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    found = [os.path.normpath(os.path.join(here, _paths.LIBRARY_FROM_PACKAGE))]
    system = ctypes.util.find_library("shadowsync")
    if system:
        found.append(system)
    found.append("libshadowsync.so.0")
    return found


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError("shadowsync: cannot load libshadowsync (build it and run "
                      "`cmake --install build`, or set SHADOWSYNC_LIBRARY to its path): " +
                      "; ".join(errors))


lib = _load()

_P = ctypes.c_void_p
_S = ctypes.c_int  # ss_status
_STR = ctypes.c_char_p

_DECLS = {
    "ss_version": (_STR, []),
    "ss_strerror": (_STR, [_S]),
    "ss_status_name": (_STR, [_S]),
    "ss_last_error": (_STR, []),
    "ss_trainer_config_create": (_S, [ctypes.POINTER(_P)]),
    "ss_trainer_config_destroy": (None, [_P]),
    "ss_trainer_config_set": (_S, [_P, _STR, _STR]),
    "ss_trainer_config_from_env": (_S, [_P]),
    "ss_trainer_open": (_S, [_P, ctypes.POINTER(_P)]),
    "ss_trainer_add_dense": (_S, [_P, _STR, ctypes.c_size_t, c_float_p, ctypes.POINTER(_P)]),
    "ss_dense_data": (c_float_p, [_P]),
    "ss_dense_size": (ctypes.c_size_t, [_P]),
    "ss_dense_get_stats": (_S, [_P, ctypes.POINTER(DenseStats)]),
    "ss_dense_read": (_S, [_P, c_float_p]),
    "ss_dense_read_central": (_S, [_P, c_float_p]),
    "ss_device_count": (ctypes.c_int, []),
    "ss_trainer_add_dense_device": (
        _S, [_P, _STR, ctypes.c_size_t, ctypes.c_int, c_float_p, ctypes.POINTER(_P)]),
    "ss_dense_device_data": (_P, [_P]),
    "ss_dense_device": (ctypes.c_int, [_P]),
    "ss_trainer_metrics": (_S, [_P, ctypes.c_char_p, ctypes.c_size_t, c_size_p]),
    "ss_trainer_http_address": (_S, [_P, ctypes.c_char_p, ctypes.c_size_t]),
    "ss_trainer_step": (_S, [_P]),
    "ss_trainer_finish": (_S, [_P]),
    "ss_trainer_close": (_S, [_P]),
    "ss_table_config_create": (_S, [_STR, ctypes.c_uint32, ctypes.POINTER(_P)]),
    "ss_table_config_destroy": (None, [_P]),
    "ss_table_config_set": (_S, [_P, _STR, _STR]),
    "ss_table_config_from_env": (_S, [_P]),
    "ss_table_open": (_S, [_P, _P, ctypes.POINTER(_P)]),
    "ss_table_close": (_S, [_P]),
    "ss_table_lookup": (_S, [_P, c_uint64_p, ctypes.c_size_t, c_float_p]),
    "ss_table_push": (_S, [_P, c_uint64_p, ctypes.c_size_t, c_float_p]),
    "ss_table_prefetch": (_S, [_P, c_uint64_p, ctypes.c_size_t, ctypes.POINTER(_P)]),
    "ss_table_fetch_wait": (_S, [_P, c_float_p]),
    "ss_table_warm": (_S, [_P, c_uint64_p, ctypes.c_size_t]),
    "ss_table_flush": (_S, [_P]),
    "ss_table_get_stats": (_S, [_P, ctypes.POINTER(TableStats)]),
    "ss_table_lookup_many": (_S, [_P, ctypes.c_size_t, c_uint64_p, c_size_p, c_float_p]),
    "ss_table_push_many": (_S, [_P, ctypes.c_size_t, c_uint64_p, c_size_p, c_float_p]),
    "ss_table_push_prefetch_many": (_S, [_P, ctypes.c_size_t, c_uint64_p, c_size_p, c_float_p,
                                         c_uint64_p, c_size_p, ctypes.POINTER(_P)]),
    "ss_table_fetch_many_wait": (_S, [_P, c_float_p]),
    "ss_table_warm_many": (_S, [_P, ctypes.c_size_t, c_uint64_p, c_size_p]),
}

for _name, (_res, _args) in _DECLS.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args
