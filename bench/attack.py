#!/usr/bin/python3
"""The resource attacks against a real shadowsync-ps, measured.

A hostile local client written against rpc/dense/dense_sync.proto and rpc/emb/embedding.proto only (Debian's
python3-grpcio, as tests/test_blackbox_ps.py), each attack one line:

  door      8 token-less 250 MiB requests: the PS's peak RSS over idle
            (bound: 64 MiB)
  lookups   16 Lookups of 65,536 new ids each, with the token: resident
            rows and RSS (bound: 0 rows)
  readers   an authorized S-EASGD member's exchange latency, p50/p99, alone
            and while 6 authorized Lookup loops (another process) pull
            64 MiB replies (bound: p99 within 2x), from this Python client,
            from the C library's client (shadowsync-bench-rpc) and as the
            PS's own histogram sees it (arrival to reply, bucket bounds);
            readers_niced: the same with the attacking process at
            SCHED_IDLE (the PS's and kernel's isolation, apart from the
            attacker's CPU on a 2-core machine)
  budget    --max-total-floats 32M (128 MiB of floats): groups joined until
            refused, each synced by S-EASGD and S-MA, then a checkpoint:
            peak RSS (bound: the budget plus the idle PS plus 64 MiB)
  rows      --emb-max-live-rows 5000 (dim 64): 50,000 new ids pushed by
            two writers at once, then a 200,000-id burst, while a reader
            samples the table's live rows (Stats) and the PS's RSS: peak
            rows / the budget, and peak RSS / the peak RSS of the same
            requests on rows already held (the baseline, first: no row
            made) (bound: 1.1 at every sample, both)
  http      64 idle connections, then a 70-connection slowloris, from
            127.0.0.2: /healthz latency from 127.0.0.1 (bound: 1 s)
  bulk_*    the bulk port's attacks (bench/attack_bulk.py): dripped
            tickets, slots held, EMFILE, stalled frames, hoarded tickets

usage: attack.py SHADOWSYNC_PS RPC_DIR [ATTACK...]
(SS_ATTACK_PS_FLAGS: more shadowsync-ps flags for the readers' attack,
e.g. "--threads 4".)
"""
import gzip
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc

PS_BIN, RPC_DIR = sys.argv[1], sys.argv[2]
CHOSEN = sys.argv[3:] or ["door", "lookups", "readers", "readers_niced", "budget", "rows",
                          "http", "bulk_drip", "bulk_slots", "bulk_emfile", "bulk_stall",
                          "bulk_hoard"]
WORK = tempfile.mkdtemp(prefix="ss-attack-")
GEN = os.path.join(WORK, "gen")
os.makedirs(GEN)
subprocess.run(["protoc", "-I", os.path.join(RPC_DIR, "dense"), "-I",
                os.path.join(RPC_DIR, "emb"), "-I", os.path.join(RPC_DIR, "bulk"),
                "--python_out", GEN, "dense_sync.proto", "embedding.proto", "bulk.proto"],
               check=True)
sys.path.insert(0, GEN)
import bulk_pb2 as bulk  # noqa: E402
import dense_sync_pb2 as dense  # noqa: E402
import embedding_pb2 as emb  # noqa: E402

TOKEN = "attack-bench-token-0123456789"
READERS_EXTRA = os.environ.get("SS_ATTACK_PS_FLAGS", "").split()
MiB = 1 << 20


def rss(pid, field="VmRSS"):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


class PS:
    def __init__(self, *extra):
        tok = os.path.join(WORK, "token")
        with open(tok, "w") as f:
            f.write(TOKEN)
        os.chmod(tok, 0o600)
        self.log = open(os.path.join(WORK, "ps.log"), "w+")
        self.proc = subprocess.Popen(
            [PS_BIN, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--auth-token-file", tok]
            + list(extra), stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=getattr(self, "preexec", None),
            env={k: v for k, v in os.environ.items() if k != "SHADOWSYNC_INSECURE_LOOPBACK"})
        m = None
        for _ in range(600):
            self.log.seek(0)
            m = re.search(r"listening on (\S+), http on ([^\s,]+)", self.log.read())
            if m or self.proc.poll() is not None:
                break
            time.sleep(0.05)
        assert m, "shadowsync-ps did not start"
        self.target, self.http = m.group(1), m.group(2)
        opts = [("grpc.max_receive_message_length", 1 << 30),
                ("grpc.max_send_message_length", 1 << 30)]
        self.channel = grpc.insecure_channel(self.target, options=opts)
        grpc.channel_ready_future(self.channel).result(timeout=30)
        time.sleep(0.3)
        self.idle = rss(self.proc.pid)

    def channel_new(self):
        return grpc.insecure_channel(self.target, options=[
            ("grpc.max_receive_message_length", 1 << 30),
            ("grpc.max_send_message_length", 1 << 30)])

    def call(self, service, name, reply_cls, request, channel=None, token=True, timeout=60):
        m = (channel or self.channel).unary_unary(
            "/shadowsync.v1.%s/%s" % (service, name),
            request_serializer=lambda x: x.SerializeToString(),
            response_deserializer=reply_cls.FromString)
        md = [("authorization", "Bearer " + TOKEN)] if token else None
        return m(request, timeout=timeout, metadata=md)

    def stop(self):
        self.channel.close()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        self.log.close()


def mb(x):
    return x / MiB


def line(name, before, after, bound, ok):
    print("%-8s %-44s %-44s bound %-26s %s" % (name, before, after, bound,
                                                 "ok" if ok else "OVER"), flush=True)


def attack_door():
    ps = PS()
    body = dense.EasgdRequest(group="g", member=1, alpha=0.5, size=64 << 20,
                              snapshot=b"\0" * (250 * MiB))
    codes = []

    def one():
        ch = ps.channel_new()
        try:
            ps.call("DenseSync", "EasgdExchange", dense.EasgdReply, body, token=False, channel=ch)
        except grpc.RpcError as e:
            codes.append(e.code().name)
        finally:
            ch.close()  # the attack is over: its connections go
    th = [threading.Thread(target=one) for _ in range(8)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    peak = rss(ps.proc.pid, "VmHWM")
    time.sleep(1)
    after = rss(ps.proc.pid)
    ps.stop()
    refused = sum(c == "PERMISSION_DENIED" for c in codes)
    line("door", "idle RSS %.0f MiB" % mb(ps.idle),
         "after %.0f MiB (+%.0f; peak +%.0f), %d/8 refused" % (
             mb(after), mb(after - ps.idle), mb(peak - ps.idle), refused),
         "after +64 MiB", after - ps.idle <= 64 * MiB and refused == 8)


def attack_lookups():
    ps = PS()
    spec = emb.TableSpec(name="t", dim=64, optimizer=0, lr=0.1, eps=1e-8, init_scale=0.01)
    ps.call("Embedding", "OpenTable", emb.OpenTableReply, emb.OpenTableRequest(spec=spec))
    for k in range(16):
        ids = struct.pack("<65536Q", *range(1 + k * 65536, 1 + (k + 1) * 65536))
        ps.call("Embedding", "Lookup", emb.LookupReply, emb.LookupRequest(table="t", ids=ids))
    rows = ps.call("Embedding", "Stats", emb.TableStatsReply,
                   emb.TableStatsRequest(table="t")).resident_rows
    after = rss(ps.proc.pid)
    ps.stop()
    line("lookups", "rows 0, RSS %.0f MiB" % mb(ps.idle),
         "rows %d, RSS %.0f MiB after 1,048,576 new ids" % (rows, mb(after)), "0 rows", rows == 0)


def exchange_latencies(ps, member, n):
    snap = struct.pack("<131072f", *([0.5] * 131072))
    req = dense.EasgdRequest(group="w", member=member, alpha=0.5, size=131072, snapshot=snap)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        ps.call("DenseSync", "EasgdExchange", dense.EasgdReply, req)
        out.append(time.perf_counter() - t0)
    out.sort()
    return out[len(out) // 2] * 1e3, out[int(len(out) * 0.99)] * 1e3


def member_latencies(ps, n):
    """The same exchanges from the C library's client (a trainer's shadow
    thread): p50 and p99 in ms, from shadowsync-bench-rpc."""
    env = dict(os.environ, SHADOWSYNC_AUTH_TOKEN_FILE=os.path.join(WORK, "token"))
    out = subprocess.run([os.path.join(os.path.dirname(PS_BIN), "shadowsync-bench-rpc"), "--ps",
                          ps.target, "--floats", "131072", "--window", "1", "--reps", str(n)],
                         env=env, capture_output=True, text=True, check=True).stdout
    got = dict(kv.split("=") for kv in out.split() if "=" in kv)
    return float(got["round_p50_ms"]), float(got["round_p99_ms"])


def read_loops(target, n, seconds):
    """n threads of Lookups of 64 MiB replies, with the token, for seconds
    (run in a process of their own: the measured writer is not held by
    this process's interpreter lock)."""
    stop = time.time() + seconds
    ids = struct.pack("<65536Q", *range(1, 65537))
    done = [0]

    def loop():
        ch = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 1 << 30)])
        m = ch.unary_unary("/shadowsync.v1.Embedding/Lookup",
                           request_serializer=lambda x: x.SerializeToString(),
                           response_deserializer=emb.LookupReply.FromString)
        while time.time() < stop:
            try:
                m(emb.LookupRequest(table="wide", ids=ids), timeout=60,
                  metadata=[("authorization", "Bearer " + TOKEN)])
                done[0] += 1
            except grpc.RpcError:
                time.sleep(0.01)
        ch.close()
    th = [threading.Thread(target=loop) for _ in range(n)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    print(done[0])


def server_p99_ms(ps, method="EasgdExchange"):
    """The PS's own histogram of a method's handling (arrival to reply):
    cumulative counts by upper bound in ms."""
    with urllib.request.urlopen("http://%s/metrics" % ps.http, timeout=10) as r:
        text = r.read().decode()
    got = re.findall(r'shadowsync_rpc_server_seconds_bucket\{[^}]*%s[^}]*le="([^"]+)"\} (\S+)'
                     % method, text)
    return [(float(le) * 1e3, float(n)) for le, n in got]


def p99_bound(before, after):
    """The bucket bound holding 99% of the calls between two scrapes."""
    total = after[-1][1] - before[-1][1]
    for (le, a), (_, b) in zip(after, before):
        if a - b >= 0.99 * total:
            return le
    return float("inf")


def kernel_scheduling():
    """The kernel's preemption model and tick: on PREEMPT_NONE a thread woken
    while both cores run bulk work waits for the running one's next
    preemption point, at worst a tick."""
    lines = None
    for path, opener in (("/proc/config.gz", gzip.open), ("/boot/config-" + os.uname().release,
                                                           open)):
        try:
            with opener(path, "rt") as f:
                lines = f.read().splitlines()
            break
        except OSError:
            pass
    if lines is None:
        return "kernel config not found (/proc/config.gz, /boot/config-%s)" % os.uname().release
    cfg = dict(l.split("=", 1) for l in lines if l.startswith("CONFIG_") and "=" in l)
    model = next((m for m in ("PREEMPT_NONE", "PREEMPT_VOLUNTARY", "PREEMPT", "PREEMPT_LAZY")
                  if cfg.get("CONFIG_" + m) == "y"), "?")
    hz = int(cfg.get("CONFIG_HZ", "0"))
    return "kernel %s, %s, HZ=%d (a tick is %.0f ms), %d cores" % (
        os.uname().release, model, hz, 1e3 / hz if hz else 0, os.cpu_count())


def attack_readers(niced=False):
    if not niced or "readers" not in CHOSEN:
        print("  (%s)" % kernel_scheduling(), flush=True)
    ps = PS("--max-reply-mb", "64", *READERS_EXTRA)
    member = ps.call("DenseSync", "Join", dense.JoinReply,
                     dense.JoinRequest(group="w", size=131072)).member
    spec = emb.TableSpec(name="wide", dim=256, optimizer=0, lr=0.1, eps=1e-8, init_scale=0.01)
    ps.call("Embedding", "OpenTable", emb.OpenTableReply, emb.OpenTableRequest(spec=spec))
    h0 = server_p99_ms(ps)
    p50a, p99a = exchange_latencies(ps, member, 2000)
    h1 = server_p99_ms(ps)
    c50a, c99a = member_latencies(ps, 2000)
    idle = (lambda: os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))) if niced else None
    readers = subprocess.Popen([sys.executable, __file__, PS_BIN, RPC_DIR, "--read-loops",
                                ps.target], stdout=subprocess.PIPE, text=True, preexec_fn=idle)
    time.sleep(2)
    h2 = server_p99_ms(ps)
    p50b, p99b = exchange_latencies(ps, member, 2000)
    h3 = server_p99_ms(ps)
    c50b, c99b = member_latencies(ps, 2000)
    reads = int(readers.communicate()[0].split()[-1])
    ps.stop()
    name = "readers" if not niced else "readers-i"
    line(name, "writer p50 %.1f ms, p99 %.1f ms" % (p50a, p99a),
         "p50 %.1f, p99 %.1f ms (x%.2f); %d reads" % (p50b, p99b, p99b / p99a, reads),
         "p99 x2", p99b <= 2 * p99a)
    line("  C", "member p50 %.1f ms, p99 %.1f ms" % (c50a, c99a),
         "p50 %.1f, p99 %.1f ms (x%.2f)" % (c50b, c99b, c99b / c99a), "p99 x2", c99b <= 2 * c99a)
    line("  PS", "handled 99%% within %g ms" % p99_bound(h0, h1),
         "99%% within %g ms" % p99_bound(h2, h3), "p99 x2",
         p99_bound(h2, h3) <= 2 * p99_bound(h0, h1))


def attack_readers_niced():
    """The same with the attacking process at SCHED_IDLE (the lowest
    priority): what the PS and the kernel let through, apart from the
    attacker's own CPU on this machine."""
    attack_readers(niced=True)


def attack_budget():
    budget = 32 << 20
    ps = PS("--max-total-floats", str(budget), "--checkpoint-dir", os.path.join(WORK, "ckpt"))
    n, groups = 1 << 20, 0
    snap = struct.pack("<%df" % n, *([0.25] * n))
    while True:
        try:
            g = "g%d" % groups
            m = ps.call("DenseSync", "Join", dense.JoinReply, dense.JoinRequest(group=g, size=n))
        except grpc.RpcError:
            break
        ps.call("DenseSync", "EasgdExchange", dense.EasgdReply,
                dense.EasgdRequest(group=g, member=m.member, alpha=0.5, size=n, snapshot=snap))
        ps.call("DenseSync", "RoundMean", dense.RoundReply,
                dense.RoundRequest(group=g, member=m.member, size=n, snapshot=snap))
        groups += 1
    ps.call("DenseSync", "Checkpoint", dense.CheckpointReply, dense.CheckpointRequest())
    peak = rss(ps.proc.pid, "VmHWM")
    ps.stop()
    bound = budget * 4 + ps.idle + 64 * MiB
    line("budget", "budget %d MiB, idle %.0f MiB" % (budget * 4 // MiB, mb(ps.idle)),
         "%d groups of 1M floats, peak %.0f MiB" % (groups, mb(peak)),
         "%.0f MiB" % mb(bound), peak <= bound)


ROW_BUDGET = 5000


def push_ids(ps, first, count, per_call, wrap=0):
    """Pushes count ids from first, per_call at a time (zero gradients);
    wrap: ids taken modulo it (the same rows pushed again)."""
    ch = ps.channel_new()
    grads = b"\0" * (per_call * 64 * 4)
    for at in range(first, first + count, per_call):
        ids = [i % wrap if wrap else i for i in range(at, at + per_call)]
        ps.call("Embedding", "Push", emb.PushReply,
                emb.PushRequest(table="t", ids=struct.pack("<%dQ" % per_call, *ids), grads=grads),
                channel=ch)
    ch.close()


def flood_of(ps, first, wrap):
    """The flood: 50,000 ids by two writers at once, then a 200,000-id burst."""
    writers = [threading.Thread(target=push_ids, args=(ps, first + k * 25000, 25000, 2500, wrap))
               for k in range(2)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    push_ids(ps, first + 50000, 200000, 5000, wrap)


def attack_rows():
    ps = PS("--emb-max-live-rows", str(ROW_BUDGET))
    spec = emb.TableSpec(name="t", dim=64, optimizer=0, lr=0.1, eps=1e-8, init_scale=0.01)
    ps.call("Embedding", "OpenTable", emb.OpenTableReply, emb.OpenTableRequest(spec=spec))
    push_ids(ps, 0, ROW_BUDGET, 1000)  # the budget filled: ids 0..4999
    peak = {"rows": 0, "rss": 0, "samples": 0}
    done = threading.Event()

    def watch():
        ch = ps.channel_new()
        while not done.is_set():
            rows = ps.call("Embedding", "Stats", emb.TableStatsReply,
                           emb.TableStatsRequest(table="t"), channel=ch).resident_rows
            peak["rows"] = max(peak["rows"], rows)
            peak["rss"] = max(peak["rss"], rss(ps.proc.pid))
            peak["samples"] += 1
        ch.close()

    def phase(first, wrap):
        peak.update(rows=0, rss=0)
        done.clear()
        watcher = threading.Thread(target=watch)
        watcher.start()
        flood_of(ps, first, wrap)
        done.set()
        watcher.join()
        return dict(peak)
    # The baseline: the same requests on the rows held (no row made).
    known = phase(0, ROW_BUDGET)
    t0 = time.perf_counter()
    new = phase(1 << 40, 0)
    flood_s = time.perf_counter() - t0
    ps.stop()
    rows_ratio, rss_ratio = new["rows"] / ROW_BUDGET, new["rss"] / known["rss"]
    line("rows", "budget %d rows; RSS %.0f MiB under the same flood of held ids" % (
        ROW_BUDGET, mb(known["rss"])),
         "peak %d rows (%.2fx), RSS %.0f MiB (%.2fx) under 250,000 new ids (%.1f s, %d samples)"
         % (new["rows"], rows_ratio, mb(new["rss"]), rss_ratio, flood_s, new["samples"]),
         "1.1x rows and RSS", rows_ratio <= 1.1 and rss_ratio <= 1.1)


def healthz_ms(http):
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen("http://%s/healthz" % http, timeout=10) as r:
            r.read()
    except Exception:
        return 10000.0
    return (time.perf_counter() - t0) * 1e3


def flood(port, n, trickle):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.2", 0))
        s.connect(("127.0.0.1", port))
        if trickle:
            s.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    return socks


def attack_http():
    ps = PS()
    port = int(ps.http.rsplit(":", 1)[1])
    base = max(healthz_ms(ps.http) for _ in range(5))
    idle = flood(port, 64, False)
    time.sleep(0.5)
    worst_idle = max(healthz_ms(ps.http) for _ in range(5))
    for s in idle:
        s.close()
    slow = flood(port, 70, True)
    stop = threading.Event()

    def drip():
        while not stop.is_set():
            for s in slow:
                try:
                    s.send(b"X")
                except OSError:
                    pass
            time.sleep(0.3)
    t = threading.Thread(target=drip)
    t.start()
    time.sleep(0.5)
    worst_slow = max(healthz_ms(ps.http) for _ in range(5))
    stop.set()
    t.join()
    for s in slow:
        s.close()
    ps.stop()
    line("http", "/healthz %.1f ms" % base,
         "%.1f ms (64 idle), %.1f ms (70 slowloris)" % (worst_idle, worst_slow), "1000 ms",
         max(worst_idle, worst_slow) < 1000)


def main():
    if any(name.startswith("bulk_") for name in CHOSEN):
        import attack_bulk  # noqa: E402 (its attacks need this module's PS)
        globals().update({k: v for k, v in vars(attack_bulk).items()
                          if k.startswith("attack_")})
    if CHOSEN[0] == "--read-loops":
        read_loops(CHOSEN[1], 6, 12)
        shutil.rmtree(WORK, ignore_errors=True)
        return
    print("attack   before                                       after (during the attack)"
          "                    bound")
    for name in CHOSEN:
        globals()["attack_" + name]()
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
