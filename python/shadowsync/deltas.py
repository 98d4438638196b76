"""Read a training PS's deltas into numpy, for serving code.

A shadowsync-ps started with --delta-dir DIR publishes, every --delta-every-s,
a directory DIR/<seq>-base or DIR/<seq>-delta holding emb.delta (embedding
rows changed and deleted since the previous one; a base holds every row) and
dense.ckpt (the dense groups' centres that changed since the previous one; a
base: every group). load(DIR) applies the newest base
and the deltas after it, in sequence, exactly as a `--follow` PS does:

    from shadowsync import deltas
    snap = deltas.load("/var/lib/shadowsync/deltas")
    rows, found = snap.lookup("ctr_emb", [17, 42])   # (2, dim) float32, [True, False]
    w = snap.dense["dense"]                           # the S-EASGD centre (or the last round's)

Pure Python and numpy (no libshadowsync needed). Every file is checked whole
(its FNV-1a checksum, every record) before it is used: a damaged delta raises
DeltaError naming the file and why; load() then stops at the last good state
unless strict=True. The formats: embedding-store/delta_file.h and
shadow/dense_checkpoint.h.
"""
import os
import re
import struct

import zlib

import numpy as np

__all__ = ["DeltaError", "Snapshot", "load", "read_emb_delta", "read_dense_ckpt", "join_chunks"]

_NAME = re.compile(r"^(\d{20})-(base|delta)$")
_CHUNK = re.compile(r"^(.+)\[(\d+):(\d+)\)$")
_FNV_OFFSET, _FNV_PRIME, _MASK = 14695981039346656037, 1099511628211, (1 << 64) - 1


class DeltaError(Exception):
    """A delta file that is torn, truncated, corrupted or not a delta."""


def _fnv1a(data):
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & _MASK
    return h


def _checked(path, magic, crc):
    """The file's bytes before its checksum: a CRC-32 (u32) for deltas, an
    FNV-1a (u64) for dense checkpoints."""
    with open(path, "rb") as f:
        data = f.read()
    tail = 4 if crc else 8
    if len(data) < len(magic) + tail or not data.startswith(magic):
        raise DeltaError("%s: not a %s file, or truncated" % (path, magic.decode()))
    body = data[:-tail]
    ok = (zlib.crc32(body) == struct.unpack_from("<I", data, len(body))[0] if crc
          else _fnv1a(body) == struct.unpack_from("<Q", data, len(body))[0])
    if not ok:
        raise DeltaError("%s: checksum mismatch: torn or corrupted" % path)
    return body


def read_emb_delta(path):
    """(info, tables): info = dict(seq, base, written_ms); tables = list of
    (spec dict, [(kind, ids, rows)]) in file order, kind "D" (rows None) or "R"
    (rows: n x (dim + state floats))."""
    body = _checked(path, b"SSEMBD01", crc=True)
    seq, base, written = struct.unpack_from("<QBQ", body, 8)
    pos, tables = 25, []
    try:
        while True:
            kind = body[pos:pos + 1]
            pos += 1
            if kind == b"Z":
                break
            if kind == b"S":
                (nlen,) = struct.unpack_from("<I", body, pos)
                name = body[pos + 4:pos + 4 + nlen].decode()
                pos += 4 + nlen
                dim, opt, lr, eps, init = struct.unpack_from("<IIfff", body, pos)
                pos += 20
                spec = dict(name=name, dim=dim, optimizer="adagrad" if opt else "sgd", lr=lr,
                            eps=eps, init_scale=init)
                spec["row_floats"] = dim + (1 if opt else 0)
                tables.append((spec, []))
            elif kind in (b"R", b"D") and tables:
                (n,) = struct.unpack_from("<I", body, pos)
                pos += 4
                ids = np.frombuffer(body, "<u8", n, pos).copy()
                pos += 8 * n
                rows = None
                if kind == b"R":
                    rf = tables[-1][0]["row_floats"]
                    rows = np.frombuffer(body, "<f4", n * rf, pos).reshape(n, rf).copy()
                    pos += 4 * n * rf
                tables[-1][1].append((kind.decode(), ids, rows))
            else:
                raise DeltaError("%s: a record of no known kind at byte %d" % (path, pos - 1))
    except (struct.error, ValueError) as e:
        raise DeltaError("%s: a record runs past the end: %s" % (path, e)) from None
    if pos != len(body):
        raise DeltaError("%s: bytes after the end record" % path)
    return dict(seq=seq, base=bool(base), written_ms=written), tables


def read_dense_ckpt(path):
    """{group: centre} from a dense.ckpt (the S-EASGD centre, else the last
    round's result)."""
    body = _checked(path, b"SSDENSE2", crc=False)
    (count,) = struct.unpack_from("<I", body, 8)
    pos, groups = 12, {}
    try:
        for _ in range(count):
            (nlen,) = struct.unpack_from("<I", body, pos)
            name = body[pos + 4:pos + 4 + nlen].decode()
            pos += 4 + nlen
            n, has_central, has_mean, _round, has_bmuf = struct.unpack_from("<QBBQB", body, pos)
            pos += 19
            if has_bmuf:
                pos += 9 + 8 * n  # eta, zeta, nesterov, w, m
            central = mean = None
            if has_central:
                central = np.frombuffer(body, "<f4", n, pos).copy()
                pos += 4 * n
            if has_mean:
                mean = np.frombuffer(body, "<f4", n, pos).copy()
                pos += 4 * n
            groups[name] = central if central is not None else mean
    except (struct.error, ValueError) as e:
        raise DeltaError("%s: truncated: %s" % (path, e)) from None
    return groups


def join_chunks(groups):
    """{group: floats} from the PS's {chunk: floats}: a trainer's group
    travels in chunks named "<group>[lo:hi)" (chunk_floats each, spread
    over the shards), joined here in order. Pass the union of every
    shard's checkpoint; a group with a chunk missing, or chunks that
    overlap, raises DeltaError. Names without a range stay as they are."""
    parts, out = {}, {}
    for name, floats in groups.items():
        m = _CHUNK.match(name)
        if m:
            parts.setdefault(m.group(1), []).append((int(m.group(2)), int(m.group(3)), floats))
        else:
            out[name] = floats
    for base, chunks in parts.items():
        chunks.sort(key=lambda c: c[0])
        at = 0
        for lo, hi, floats in chunks:
            if lo != at or hi - lo != len(floats):
                raise DeltaError("group %s: chunk [%d:%d) where [%d:...) was expected (a shard's "
                                 "checkpoint missing?)" % (base, lo, hi, at))
            at = hi
        out[base] = np.concatenate([c[2] for c in chunks])
    return out


class Snapshot:
    """The state of a delta directory at seq: tables (name -> {id: row}),
    specs (name -> spec dict), dense (group -> centre)."""

    def __init__(self):
        self.seq, self.written_ms = 0, 0
        self.tables, self.specs, self.dense = {}, {}, {}

    def apply(self, directory):
        """Applies one <seq>-base or <seq>-delta directory (both files checked
        first: a DeltaError leaves the snapshot as it was)."""
        info, tables = read_emb_delta(os.path.join(directory, "emb.delta"))
        dense = read_dense_ckpt(os.path.join(directory, "dense.ckpt"))
        for spec, records in tables:
            rows = self.tables.setdefault(spec["name"], {})
            if info["base"]:
                rows.clear()
            self.specs[spec["name"]] = spec
            for kind, ids, data in records:
                if kind == "D":
                    for i in ids.tolist():
                        rows.pop(i, None)
                else:
                    for i, r in zip(ids.tolist(), data):
                        rows[i] = r
        self.dense.update(dense)
        self.seq, self.written_ms = info["seq"], info["written_ms"]

    def lookup(self, table, ids):
        """(rows, found): the data part (dim floats) of each id's row, zeros
        and found False for an id the table does not hold."""
        spec, held = self.specs[table], self.tables[table]
        out = np.zeros((len(ids), spec["dim"]), np.float32)
        found = np.zeros(len(ids), bool)
        for k, i in enumerate(ids):
            r = held.get(int(i))
            if r is not None:
                out[k], found[k] = r[:spec["dim"]], True
        return out, found


def load(directory, strict=False):
    """The newest base in directory and every delta after it, in sequence:
    a Snapshot. A gap or a damaged delta stops it at the last good state
    (strict=True raises DeltaError instead)."""
    entries = {}
    for name in os.listdir(directory):
        m = _NAME.match(name)
        if m:
            entries[int(m.group(1))] = m.group(2)
    bases = sorted(s for s, kind in entries.items() if kind == "base")
    if not bases:
        raise DeltaError("%s: no base yet" % directory)
    snap = Snapshot()
    seq = bases[-1]
    while seq in entries:
        try:
            snap.apply(os.path.join(directory, "%020d-%s" % (seq, entries[seq])))
        except DeltaError:
            if strict or seq == bases[-1]:
                raise
            break
        seq += 1
    return snap
