#!/usr/bin/python3
"""A hostile client of shadowsync-ps written against the .proto files only.

It generates its message classes with protoc from rpc/dense/dense_sync.proto
and rpc/emb/embedding.proto and
talks gRPC with Debian's python3-grpcio: none of the project's C client code
is involved. It starts a real shadowsync-ps on 127.0.0.1 and checks that a
client can no longer
  - checkpoint outside the server's directory,
  - get a reply far larger than the request limits allow,
  - guess a neighbour's member id (Leave as it),
  - make /status invalid JSON.

usage: test_blackbox_ps.py SHADOWSYNC_PS RPC_DIR
"""
import json
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

PS_BIN, RPC_DIR = sys.argv[1], sys.argv[2]
WORK = tempfile.mkdtemp(prefix="ss-blackbox-")
dense, emb = ps_testlib.protos(RPC_DIR, WORK)
method = ps_testlib.method


def start_ps(name, extra):
    """A shadowsync-ps on 127.0.0.1 with free ports: (process, log, grpc, http)."""
    return ps_testlib.start_ps(PS_BIN, WORK, name, extra)


class WithPS(unittest.TestCase):
    """A test class with one PS (cls.ps, cls.log) and a channel to it."""

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.ps.send_signal(signal.SIGTERM)
        cls.ps.wait(timeout=30)
        cls.log.close()


class BlackBox(WithPS):
    @classmethod
    def setUpClass(cls):
        cls.ckpt = os.path.join(WORK, "ckpt")
        cls.ps, cls.log, cls.target, cls.http = start_ps(
            "ps", ["--checkpoint-dir", cls.ckpt, "--emb-db", os.path.join(WORK, "db")])
        cls.channel = grpc.insecure_channel(
            cls.target, options=[("grpc.max_receive_message_length", 1 << 30)])
        grpc.channel_ready_future(cls.channel).result(timeout=30)

    def call(self, service, name, reply_cls, request):
        return method(self.channel, service, name, reply_cls)(request, timeout=20)

    def expect_error(self, code, service, name, reply_cls, request):
        with self.assertRaises(grpc.RpcError) as e:
            self.call(service, name, reply_cls, request)
        self.assertEqual(e.exception.code(), code, e.exception.details())
        return e.exception.details()

    def test_checkpoint_stays_in_the_server_directory(self):
        outside = os.path.join(WORK, "outside")
        for name in [outside, "../../outside", "a/b", "..", "/tmp/ss-blackbox-abs"]:
            why = self.expect_error(grpc.StatusCode.INVALID_ARGUMENT, "Embedding", "Checkpoint",
                                    emb.EmbCheckpointReply, emb.EmbCheckpointRequest(name=name))
            self.assertIn("name", why)
        self.assertFalse(os.path.exists(outside))
        self.assertFalse(os.path.exists("/tmp/ss-blackbox-abs"))
        r = self.call("Embedding", "Checkpoint", emb.EmbCheckpointReply,
                      emb.EmbCheckpointRequest(name="mine"))
        self.assertEqual(r.path, os.path.join(self.ckpt, "emb", "mine"))
        self.assertTrue(os.path.isfile(os.path.join(r.path, "CURRENT")))

    def test_small_request_cannot_get_a_huge_reply(self):
        spec = emb.TableSpec(name="wide", dim=4096, optimizer=0, lr=0.1, eps=1e-8,
                             init_scale=0.01)
        self.call("Embedding", "OpenTable", emb.OpenTableReply, emb.OpenTableRequest(spec=spec))
        ids = struct.pack("<65536Q", *range(1, 65537))  # 512 KiB asking for 1 GiB
        why = self.expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "Embedding", "Lookup",
                                emb.LookupReply, emb.LookupRequest(table="wide", ids=ids))
        self.assertIn("--max-reply-mb", why)
        stats = self.call("Embedding", "Stats", emb.TableStatsReply,
                          emb.TableStatsRequest(table="wide"))
        self.assertEqual(stats.resident_rows, 0)  # nothing was made for it
        # Within the limit it is served, and the reply is what was asked.
        r = self.call("Embedding", "Lookup", emb.LookupReply,
                      emb.LookupRequest(table="wide", ids=struct.pack("<16Q", *range(1, 17))))
        self.assertEqual(len(r.rows), 16 * 4096 * 4)

    def test_finite_numbers_cannot_make_inf(self):
        join = lambda g, n: self.call("DenseSync", "Join", dense.JoinReply,
                                      dense.JoinRequest(group=g, size=n)).member
        floats = lambda *x: struct.pack("<%df" % len(x), *x)
        me = join("poison", 2)
        easgd = lambda snap: dense.EasgdRequest(group="poison", member=me, alpha=0.5,
                                                snapshot=snap, size=2)
        self.call("DenseSync", "EasgdExchange", dense.EasgdReply, easgd(floats(-3e38, 1.0)))
        why = self.expect_error(grpc.StatusCode.INVALID_ARGUMENT, "DenseSync", "EasgdExchange",
                                dense.EasgdReply, easgd(floats(3e38, 1.0)))
        self.assertIn("overflowed", why)
        centre = self.call("DenseSync", "ReadCentral", dense.ReadCentralReply,
                           dense.ReadCentralRequest(group="poison", size=2)).central
        self.assertEqual(struct.unpack("<2f", centre), struct.unpack("<2f", floats(-3e38, 1.0)))
        # An honest member after the attack gets a finite delta.
        d = self.call("DenseSync", "EasgdExchange", dense.EasgdReply, easgd(floats(0.0, 1.0))).delta
        self.assertTrue(all(abs(x) < 3.5e38 for x in struct.unpack("<2f", d)))
        # An S-MA round of two members at 3e38: the sum overflows, both are told.
        a, b = join("poison-ma", 1), join("poison-ma", 1)
        rnd = method(self.channel, "DenseSync", "RoundMean", dense.RoundReply)
        futures = [rnd.future(dense.RoundRequest(group="poison-ma", member=m,
                                                 snapshot=floats(3e38), size=1), timeout=20)
                   for m in (a, b)]
        for f in futures:
            with self.assertRaises(grpc.RpcError) as e:
                f.result()
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("overflowed", e.exception.details())
        # S-BMUF with zeta past 1 / (1 - eta) is refused.
        self.expect_error(grpc.StatusCode.INVALID_ARGUMENT, "DenseSync", "RoundMean", dense.RoundReply,
                          dense.RoundRequest(group="poison-ma", member=a, snapshot=floats(1.0),
                                             size=1, bmuf=True, bmuf_eta=0.0, bmuf_zeta=1e38))

    def test_embedding_updates_cannot_make_inf(self):
        spec = emb.TableSpec(name="poison", dim=2, optimizer=0, lr=1.0, eps=1e-8, init_scale=0.0)
        self.call("Embedding", "OpenTable", emb.OpenTableReply, emb.OpenTableRequest(spec=spec))
        ids = struct.pack("<Q", 7)
        push = lambda g: emb.PushRequest(table="poison", ids=ids, grads=struct.pack("<2f", *g))
        self.call("Embedding", "Push", emb.PushReply, push((-3e38, 1.0)))
        why = self.expect_error(grpc.StatusCode.INVALID_ARGUMENT, "Embedding", "Push",
                                emb.PushReply, push((-3e38, 1.0)))
        self.assertIn("overflowed", why)
        el = emb.ElasticRequest(table="poison", ids=ids, rows=struct.pack("<2f", -3e38, 0.0),
                                alpha=0.5)
        why = self.expect_error(grpc.StatusCode.INVALID_ARGUMENT, "Embedding", "Elastic",
                                emb.ElasticReply, el)
        self.assertIn("overflowed", why)
        row = self.call("Embedding", "Lookup", emb.LookupReply,
                        emb.LookupRequest(table="poison", ids=ids)).rows
        self.assertEqual(struct.unpack("<2f", row), struct.unpack("<2f", struct.pack("<2f", 3e38, -1.0)))

    def test_lookups_cannot_grow_the_store(self):
        spec = emb.TableSpec(name="readonly", dim=4, optimizer=1, lr=0.1, eps=1e-8,
                             init_scale=0.05)
        self.call("Embedding", "OpenTable", emb.OpenTableReply, emb.OpenTableRequest(spec=spec))
        stats = lambda: self.call("Embedding", "Stats", emb.TableStatsReply,
                                  emb.TableStatsRequest(table="readonly"))
        lookup = lambda ids: self.call("Embedding", "Lookup", emb.LookupReply,
                                       emb.LookupRequest(table="readonly", ids=ids)).rows
        first = None
        for k in range(4):  # bench/attack.py's rows attack, smaller: new ids every time
            ids = struct.pack("<65536Q", *range(1 + k * 65536, 1 + (k + 1) * 65536))
            rows = lookup(ids)
            self.assertEqual(len(rows), 65536 * 4 * 4)
            first = first or rows
        self.assertEqual(stats().resident_rows, 0)
        # The initial rows are deterministic: the same again, and not zero.
        again = lookup(struct.pack("<65536Q", *range(1, 65537)))
        self.assertEqual(again, first)
        self.assertTrue(any(struct.unpack("<4f", first[:16])))
        # A push makes the row; the lookup then reads it.
        grads = struct.pack("<4f", 1.0, 1.0, 1.0, 1.0)
        self.call("Embedding", "Push", emb.PushReply,
                  emb.PushRequest(table="readonly", ids=struct.pack("<Q", 1), grads=grads))
        self.assertEqual(stats().resident_rows, 1)
        after = lookup(struct.pack("<Q", 1))
        self.assertNotEqual(after, first[:16])

    def test_member_ids_cannot_be_guessed(self):
        ids = [self.call("DenseSync", "Join", dense.JoinReply,
                         dense.JoinRequest(group="shared", size=4)).member for _ in range(4)]
        self.assertEqual(len(set(ids)), 4)
        for mine in ids:
            for delta in (-2, -1, 1, 2):
                guess = (mine + delta) % (1 << 64)
                if guess in ids:
                    self.fail("member id %d is %d from another member's" % (mine, delta))
                self.expect_error(grpc.StatusCode.NOT_FOUND, "DenseSync", "Leave",
                                  dense.LeaveReply, dense.LeaveRequest(group="shared", member=guess))
        for mine in ids:  # everybody is still in
            self.call("DenseSync", "Heartbeat", dense.HeartbeatReply,
                      dense.HeartbeatRequest(group="shared", member=mine))

    def test_status_stays_json(self):
        for name in ['q"uote', "back\\slash", "new\nline", "</script>", "a" * 300]:
            self.expect_error(grpc.StatusCode.INVALID_ARGUMENT, "DenseSync", "Join",
                              dense.JoinReply, dense.JoinRequest(group=name, size=2))
            spec = emb.TableSpec(name=name, dim=2, optimizer=0, lr=0.1, eps=1e-8, init_scale=0.0)
            self.expect_error(grpc.StatusCode.INVALID_ARGUMENT, "Embedding", "OpenTable",
                              emb.OpenTableReply, emb.OpenTableRequest(spec=spec))
        self.call("DenseSync", "Join", dense.JoinReply, dense.JoinRequest(group="ok.name", size=2))
        with urllib.request.urlopen("http://%s/status" % self.http, timeout=20) as r:
            doc = json.loads(r.read().decode())
        self.assertEqual(doc["role"], "ps")
        self.assertIn("ok.name", [g["group"] for g in doc["groups"]])


class TokenBlackBox(WithPS):
    """A PS with a token: only the exact header passes. Each near miss a
    broken comparison could let through is tried on the wire (mutation
    testing found a prefix-accepting comparison survived the suite)."""
    TOKEN = "0123456789abcdef-right-token"

    @classmethod
    def setUpClass(cls):
        path = os.path.join(WORK, "token")
        with open(path, "w") as f:
            f.write(cls.TOKEN + "\n")
        os.chmod(path, 0o600)
        cls.ps, cls.log, cls.target, cls.http = start_ps("token-ps", ["--auth-token-file", path])
        cls.channel = grpc.insecure_channel(cls.target)
        grpc.channel_ready_future(cls.channel).result(timeout=30)

    def join(self, header):
        md = None if header is None else [("authorization", header)]
        return method(self.channel, "DenseSync", "Join", dense.JoinReply)(
            dense.JoinRequest(group="guarded", size=2), timeout=20, metadata=md)

    def test_only_the_exact_token_passes(self):
        right = "Bearer " + self.TOKEN
        misses = [None, "", "Bearer", "Bearer ", right[:-1], right[:8], right + "x",
                  right + " ", "Basic " + self.TOKEN, "bearer " + self.TOKEN, self.TOKEN,
                  "Bearer " + self.TOKEN[:-1] + "X", "Bearer  " + self.TOKEN]
        for header in misses:
            with self.assertRaises(grpc.RpcError, msg=repr(header)) as e:
                self.join(header)
            self.assertEqual(e.exception.code(), grpc.StatusCode.PERMISSION_DENIED, repr(header))
        self.assertGreater(self.join(right).member, 0)

    def test_status_names_groups_only_with_the_token(self):
        """/status without the token: counts only (what gRPC reads refuse, the
        group names and sizes, is not given to anyone who reaches the port)."""
        self.assertGreater(self.join("Bearer " + self.TOKEN).member, 0)
        url = "http://%s/status" % self.http
        plain = json.loads(urllib.request.urlopen(url, timeout=10).read().decode())
        self.assertNotIn("groups", plain)
        self.assertGreaterEqual(plain["group_count"], 1)
        self.assertNotIn("guarded", json.dumps(plain))
        req = urllib.request.Request(url, headers={"Authorization": "Bearer " + self.TOKEN})
        full = json.loads(urllib.request.urlopen(req, timeout=10).read().decode())
        self.assertIn("guarded", [g["group"] for g in full["groups"]])
        self.assertEqual([g["floats"] for g in full["groups"] if g["group"] == "guarded"], [2])


class MapBlackBox(WithPS):
    """A PS that serves shard map epoch 3: a call routed by another epoch
    is refused at the door, blocking ones too (an S-MA round, whose only
    check this is, and a checkpoint); routed by epoch 3 it is served."""

    @classmethod
    def setUpClass(cls):
        cls.map = os.path.join(WORK, "fleet.map")
        with open(cls.map, "w") as f:
            f.write("epoch 3\nps 127.0.0.1:1\n")
        cls.ps, cls.log, cls.target, _ = start_ps("map-ps", ["--shard-map", cls.map])
        cls.channel = grpc.insecure_channel(cls.target)
        grpc.channel_ready_future(cls.channel).result(timeout=30)

    def routed(self, epoch, service, name, reply_cls, request):
        return method(self.channel, service, name, reply_cls)(
            request, timeout=20, metadata=[("x-shadowsync-epoch", str(epoch))])

    def test_a_stale_router_is_refused_at_the_door(self):
        member = self.routed(3, "DenseSync", "Join", dense.JoinReply,
                             dense.JoinRequest(group="ma", size=2)).member
        rnd = dense.RoundRequest(group="ma", member=member, size=2,
                                 snapshot=struct.pack("<2f", 1.0, 2.0))
        for epoch in (2, 4):
            for name, reply, req in (("RoundMean", dense.RoundReply, rnd),
                                     ("Checkpoint", dense.CheckpointReply,
                                      dense.CheckpointRequest())):
                with self.assertRaises(grpc.RpcError) as e:
                    self.routed(epoch, "DenseSync", name, reply, req)
                self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION, name)
                self.assertIn("epoch %d" % epoch, e.exception.details())
                self.assertIn("serves epoch 3", e.exception.details())
        reply = self.routed(3, "DenseSync", "RoundMean", dense.RoundReply, rnd)
        self.assertEqual(struct.unpack("<2f", reply.mean), (1.0, 2.0))


class DirectoryBlackBox(unittest.TestCase):
    """A PS refuses directories another user could change: one made first
    by another uid in a shared /tmp, one writable by group or others, a
    link. Each refusal names the flag and how to fix it; nothing starts."""

    def refused(self, flag, path, want):
        p = subprocess.run([PS_BIN, "--listen", "127.0.0.1:0", flag, path],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertIn(flag, p.stderr)
        self.assertIn(want, p.stderr)

    def test_directories_must_be_private(self):
        for flag in ("--checkpoint-dir", "--emb-db"):
            d = os.path.join(WORK, "open" + flag)
            os.mkdir(d)
            os.chmod(d, 0o777)
            self.refused(flag, d, "chmod go-w")
            link = d + "-link"
            os.chmod(d, 0o700)
            os.symlink(d, link)
            self.refused(flag, link, "symbolic link")
            if os.geteuid() == 0:  # another user's directory, as in a shared /tmp
                theirs = os.path.join(WORK, "theirs" + flag)
                os.mkdir(theirs, 0o755)
                os.chown(theirs, 65534, 65534)
                self.refused(flag, theirs, "belongs to uid 65534")


class DefaultsBlackBox(unittest.TestCase):
    """No listener is open by default: a PS without a token (or mutual TLS)
    refuses to start, loopback included, unless told --insecure-loopback."""

    def test_a_token_is_needed_by_default(self):
        env = {k: v for k, v in os.environ.items()
               if k not in ("SHADOWSYNC_INSECURE_LOOPBACK", "SHADOWSYNC_AUTH_TOKEN_FILE")}
        run = lambda *args: subprocess.run([PS_BIN, "--http", ""] + list(args), env=env,
                                           stdin=subprocess.DEVNULL, capture_output=True,
                                           text=True, timeout=30)
        for listen, hint in (("127.0.0.1:0", "--insecure-loopback"),
                             ("0.0.0.0:0", "not loopback")):
            p = run("--listen", listen)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertIn("--auth-token-file", p.stderr)
            self.assertIn(hint, p.stderr)
        # Off loopback the flag does not open it, on any listener.
        p = run("--listen", "0.0.0.0:0", "--insecure-loopback")
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        p = run("--listen", "127.0.0.1:0", "--insecure-loopback", "--bulk-listen", "0.0.0.0:0")
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("--bulk-listen 0.0.0.0:0 is not loopback", p.stderr)

    def test_insecure_loopback_beside_a_token_is_refused(self):
        """A token in the environment and --insecure-loopback: neither is
        dropped in silence; the PS says which two and exits."""
        tok = os.path.join(WORK, "env-token")
        with open(tok, "w") as f:
            f.write("0123456789abcdef0123456789abcdef\n")
        os.chmod(tok, 0o600)
        env = {k: v for k, v in os.environ.items() if k != "SHADOWSYNC_INSECURE_LOOPBACK"}
        env["SHADOWSYNC_AUTH_TOKEN_FILE"] = tok
        p = subprocess.run([PS_BIN, "--http", "", "--listen", "127.0.0.1:0",
                            "--insecure-loopback"], env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertEqual(
            p.stderr.strip(),
            "shadowsync-ps: --insecure-loopback (SHADOWSYNC_INSECURE_LOOPBACK) and a token "
            f"(--auth-token-file {tok}, or SHADOWSYNC_AUTH_TOKEN_FILE) are both set: every call "
            "would need the token, so drop one of them")

    def test_the_auth_mode_is_logged(self):
        """Each start says which door it keeps."""
        tok = os.path.join(WORK, "mode-token")
        with open(tok, "w") as f:
            f.write("0123456789abcdef0123456789abcdef\n")
        os.chmod(tok, 0o600)
        for extra, mode in ((["--insecure-loopback"], "mode=insecure_loopback peer_token=no"),
                            (["--auth-token-file", tok], "mode=token peer_token=no")):
            ps, log, _, _ = start_ps("mode" + str(len(extra)), extra)
            try:
                log.seek(0)
                self.assertIn("shadowsync-ps: auth " + mode, log.read())
            finally:
                ps.terminate()
                ps.wait(timeout=30)
                log.close()


if __name__ == "__main__":
    try:
        unittest.main(argv=[sys.argv[0], "-v"])
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
