#!/usr/bin/python3
"""Deltas out of a training PS and a serving follower, black-box over gRPC.

A training shadowsync-ps publishes a delta every second into --delta-dir; a
second one started with --follow serves its state. Written against the
.proto files (protoc + Debian's python3-grpcio), as an inference client
would. Checks: what a client pushed and put in a dense centre is served by
the follower within two delta periods, bit for bit; every write to the
follower is refused, saying why; a corrupted delta is refused (the follower
keeps its last good state) and the next base brings it back in step; a
SIGKILL mid-stream leaves only whole deltas; the training PS's delta
directory keeps the newest bases only.

usage: test_follower.py SHADOWSYNC_PS RPC_DIR
"""
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import grpc

import ps_testlib
import importlib.util
import numpy as np

# shadowsync.deltas is pure Python: loaded from its file, without the package
# (whose __init__ loads libshadowsync).
_spec = importlib.util.spec_from_file_location(
    "deltas", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python",
                           "shadowsync", "deltas.py"))
deltas = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(deltas)

PS_BIN, RPC_DIR = sys.argv[1], sys.argv[2]
WORK = tempfile.mkdtemp(prefix="ss-follower-")
dense, emb = ps_testlib.protos(RPC_DIR, WORK)

DIM = 4
DELTAS = os.path.join(WORK, "deltas")


def start_ps(name, extra):
    """A shadowsync-ps without a token on 127.0.0.1: (process, grpc address, http address)."""
    ps, log, addr, http = ps_testlib.start_ps(PS_BIN, WORK, name, ["--insecure-loopback"] + extra)
    log.close()
    return ps, addr, http


def call(addr, service, name, reply_cls, req):
    with grpc.insecure_channel(addr) as ch:
        return ps_testlib.method(ch, service, name, reply_cls)(req, timeout=10)


def metric(http, name):
    """A series' value; of a labelled one, the sum over its labels (None: absent)."""
    text = urllib.request.urlopen("http://%s/metrics" % http, timeout=5).read().decode()
    values = re.findall(r"^%s(?:\{[^}]*\})? (\S+)$" % re.escape(name), text, re.M)
    return sum(float(v) for v in values) if values else None


def metric_stopped_safe(http, name):
    """A training PS's metric (the follower may be stopped meanwhile)."""
    return metric(http, name) or 0


def ids_bytes(ids):
    return struct.pack("<%dQ" % len(ids), *ids)


def lookup(addr, ids):
    rows = call(addr, "Embedding", "Lookup", emb.LookupReply,
                emb.LookupRequest(table="t", ids=ids_bytes(ids))).rows
    return rows


def entries():
    return sorted(e for e in os.listdir(DELTAS) if not e.startswith("."))


class Follower(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.train, cls.train_addr, cls.train_http = start_ps(
            "train", ["--delta-dir", DELTAS, "--delta-every-s", "1", "--delta-base-every", "3",
                      "--delta-keep-bases", "2"])
        spec = emb.TableSpec(name="t", dim=DIM, optimizer=1, lr=0.1, eps=1e-8, init_scale=0.01)
        call(cls.train_addr, "Embedding", "OpenTable", emb.OpenTableReply,
             emb.OpenTableRequest(spec=spec))
        cls.member = call(cls.train_addr, "DenseSync", "Join", dense.JoinReply,
                          dense.JoinRequest(group="dense", size=3)).member
        cls.push(list(range(1, 41)), 0.5)
        cls.exchange([1.0, 2.0, 3.0])
        time.sleep(2.5)  # a base is out
        cls.follow, cls.follow_addr, cls.follow_http = start_ps(
            "follow", ["--follow", DELTAS, "--follow-poll-ms", "50"])
        # The same over the network: the training PS's Deltas service.
        cls.net, cls.net_addr, cls.net_http = start_ps(
            "follow-net", ["--follow", cls.train_addr, "--follow-poll-ms", "50"])

    @classmethod
    def tearDownClass(cls):
        for p in (cls.train, cls.follow, cls.net):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=30)
        if os.environ.get("KEEP") is None:
            shutil.rmtree(WORK, ignore_errors=True)

    @classmethod
    def push(cls, ids, g):
        grads = struct.pack("<%df" % (len(ids) * DIM), *([g] * len(ids) * DIM))
        call(cls.train_addr, "Embedding", "Push", emb.PushReply,
             emb.PushRequest(table="t", ids=ids_bytes(ids), grads=grads))

    @classmethod
    def exchange(cls, snap):
        call(cls.train_addr, "DenseSync", "EasgdExchange", dense.EasgdReply,
             dense.EasgdRequest(group="dense", member=cls.member, alpha=0.5,
                                snapshot=struct.pack("<3f", *snap), size=3))

    def wait_same(self, ids, seconds=5.0):
        """Until the follower serves the training PS's rows for ids; how long it took."""
        t0 = time.time()
        want = lookup(self.train_addr, ids)
        while time.time() - t0 < seconds:
            if lookup(self.follow_addr, ids) == want:
                return time.time() - t0
            time.sleep(0.05)
        self.fail("the follower did not catch up in %.0f s" % seconds)

    def test_1_serves_the_training_state(self):
        self.wait_same(list(range(1, 41)))
        central = lambda a: call(a, "DenseSync", "ReadCentral", dense.ReadCentralReply,
                                 dense.ReadCentralRequest(group="dense", size=3)).central
        self.assertEqual(central(self.follow_addr), central(self.train_addr))
        # a push shows on the follower within two delta periods (+ the poll)
        self.push([5, 77], 1.0)
        took = self.wait_same([5, 77], seconds=4.0)
        self.assertLess(took, 3.0)
        self.assertGreaterEqual(metric(self.follow_http, "shadowsync_follower_applied_seq"), 2)

    def test_15_follows_over_the_network(self):
        # --follow host:port: the same state as the training PS, bit for bit,
        # fetched through its Deltas service; a push shows up as in a directory.
        ids = list(range(1, 41))
        want = lookup(self.train_addr, ids)
        deadline = time.time() + 5
        while time.time() < deadline and lookup(self.net_addr, ids) != want:
            time.sleep(0.05)
        self.assertEqual(lookup(self.net_addr, ids), want)
        central = lambda a: call(a, "DenseSync", "ReadCentral", dense.ReadCentralReply,
                                 dense.ReadCentralRequest(group="dense", size=3)).central
        self.assertEqual(central(self.net_addr), central(self.train_addr))
        self.push([6, 78], 1.5)
        want = lookup(self.train_addr, [6, 78])
        deadline = time.time() + 5
        while time.time() < deadline and lookup(self.net_addr, [6, 78]) != want:
            time.sleep(0.05)
        self.assertEqual(lookup(self.net_addr, [6, 78]), want)
        self.assertEqual(metric(self.net_http, "shadowsync_follower_refused_total"), 0)

    def test_16_deltas_service_bad_input(self):
        # Each refused with why: seq 0, an unknown file, a part too large, an
        # entry that is not there; the index past the newest is empty.
        for req, code, why in [
                (emb.DeltaReadRequest(seq=0, file=0, max_bytes=1), "INVALID_ARGUMENT", "seq >= 1"),
                (emb.DeltaReadRequest(seq=1, file=2, max_bytes=1), "INVALID_ARGUMENT", "file 0"),
                (emb.DeltaReadRequest(seq=1, file=0, max_bytes=(4 << 20) + 1), "INVALID_ARGUMENT",
                 "max_bytes"),
                (emb.DeltaReadRequest(seq=10 ** 12, is_base=True, file=0, max_bytes=16), "NOT_FOUND",
                 "pruned, or not yet published")]:
            with self.assertRaises(grpc.RpcError) as e:
                call(self.train_addr, "Deltas", "Read", emb.DeltaReadReply, req)
            self.assertEqual(e.exception.code().name, code, req)
            self.assertIn(why, e.exception.details())
        ix = call(self.train_addr, "Deltas", "Index", emb.DeltaIndexReply,
                  emb.DeltaIndexRequest(after=10 ** 12))
        self.assertEqual(ix.next, 0)
        self.assertGreater(ix.newest_base, 0)
        # A part past the end is empty, with the file's size.
        r = call(self.train_addr, "Deltas", "Read", emb.DeltaReadReply,
                 emb.DeltaReadRequest(seq=ix.newest_base, is_base=True, file=1, offset=1 << 40,
                                      max_bytes=16))
        self.assertEqual((len(r.data), r.size > 0), (0, True))

    def test_2_refuses_writes(self):
        for service, name, reply, req in [
                ("Embedding", "Push", emb.PushReply,
                 emb.PushRequest(table="t", ids=ids_bytes([1]), grads=b"\0" * 4 * DIM)),
                ("Embedding", "Elastic", emb.ElasticReply,
                 emb.ElasticRequest(table="t", ids=ids_bytes([1]), rows=b"\0" * 4 * DIM,
                                    alpha=0.5)),
                ("DenseSync", "Join", dense.JoinReply, dense.JoinRequest(group="g", size=3)),
                ("Embedding", "OpenTable", emb.OpenTableReply,
                 emb.OpenTableRequest(spec=emb.TableSpec(name="new", dim=2, lr=0.1, eps=1e-8,
                                                         init_scale=0.01)))]:
            with self.assertRaises(grpc.RpcError) as e:
                call(self.follow_addr, service, name, reply, req)
            self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION, name)
            self.assertIn("read-only follower", e.exception.details(), name)

    def test_3_corrupted_delta_refused_then_rebased(self):
        refused = metric(self.follow_http, "shadowsync_follower_refused_total")
        rebases = metric(self.follow_http, "shadowsync_follower_rebases_total")
        self.follow.send_signal(signal.SIGSTOP)  # it reads nothing while a delta is damaged
        try:
            applied = int(metric_stopped_safe(self.train_http, "shadowsync_delta_seq"))
            self.push([9], 2.0)
            deadline = time.time() + 5
            nxt = None
            while time.time() < deadline and not nxt:
                names = [n for n in entries() if int(n.split("-")[0]) > applied
                         and n.endswith("-delta")]
                nxt = names[0] if names else None
                time.sleep(0.05)
            self.assertIsNotNone(nxt, "no delta was published")
            path = os.path.join(DELTAS, nxt, "emb.delta")
            with open(path, "rb") as f:
                data = bytearray(f.read())
            data[len(data) // 2] ^= 0x40
            with open(path, "wb") as f:
                f.write(data)
        finally:
            self.follow.send_signal(signal.SIGCONT)
        # Refused, still serving. The deltas after it cannot apply: a row
        # pushed now comes only with the next base.
        self.push([11], 3.0)
        self.wait_same([9, 11], seconds=8.0)
        self.assertGreater(metric(self.follow_http, "shadowsync_follower_refused_total"), refused)
        text = urllib.request.urlopen("http://%s/metrics" % self.follow_http).read().decode()
        self.assertGreater(metric(self.follow_http, "shadowsync_follower_rebases_total"), rebases,
                           "\n".join(l for l in text.splitlines() if "follower" in l))

    def test_4_keeps_newest_bases(self):
        time.sleep(3)
        names = entries()
        bases = [n for n in names if n.endswith("-base")]
        self.assertLessEqual(len(bases), 2, names)
        self.assertTrue(names[0].endswith("-base"), names)  # nothing before the oldest base

    def test_45_python_reader(self):
        """shadowsync.deltas.load gives what the training PS serves, bit for bit."""
        self.push([3, 500], 0.75)
        seq = metric(self.train_http, "shadowsync_delta_seq")
        while metric(self.train_http, "shadowsync_delta_seq") < seq + 2:  # one after the push
            time.sleep(0.1)
        snap = deltas.load(DELTAS)
        ids = [1, 3, 5, 9, 11, 500, 12345]
        rows, found = snap.lookup("t", ids)
        want = np.frombuffer(lookup(self.train_addr, ids), "<f4").reshape(len(ids), DIM)
        for k, i in enumerate(ids):
            if found[k]:
                self.assertEqual(rows[k].tobytes(), want[k].tobytes(), i)
        self.assertEqual(list(found), [True] * 6 + [False])
        central = call(self.train_addr, "DenseSync", "ReadCentral", dense.ReadCentralReply,
                       dense.ReadCentralRequest(group="dense", size=3)).central
        self.assertEqual(snap.dense["dense"].tobytes(), central)
        # a damaged copy raises, naming the file and why
        bad = os.path.join(WORK, "bad")
        shutil.copytree(DELTAS, bad)
        newest_base = max(n for n in os.listdir(bad) if n.endswith("-base"))
        with open(os.path.join(bad, newest_base, "emb.delta"), "r+b") as f:
            f.seek(30)
            f.write(b"\xff")
        with self.assertRaises(deltas.DeltaError) as e:
            deltas.load(bad)
        self.assertIn("checksum", str(e.exception))

    def test_5_sigkill_leaves_whole_deltas(self):
        self.push(list(range(100, 140)), 0.25)
        time.sleep(1.2)
        self.train.send_signal(signal.SIGKILL)
        self.train.wait(timeout=10)
        for name in entries():
            self.assertTrue(re.fullmatch(r"\d{20}-(base|delta)", name), name)
            self.assertTrue(os.path.exists(os.path.join(DELTAS, name, "emb.delta")), name)
            self.assertTrue(os.path.exists(os.path.join(DELTAS, name, "dense.ckpt")), name)
        # the follower still serves
        self.assertEqual(len(lookup(self.follow_addr, [1, 2])), 2 * DIM * 4)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
