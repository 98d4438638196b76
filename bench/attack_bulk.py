"""The bulk port's attacks for bench/attack.py, which runs them
(`bash bench/attack.sh bulk_drip ...`): each from 127.0.0.2 and up, black
box, with no token for the connections that show no ticket, and each line
says what stayed true during it: the worst of /healthz, a gRPC Join and an
honest writer's S-EASGD exchange on a new stream (bound: 1 s each), and
the attack's own bound:

  bulk_drip    20 connections dripping a ticket's bytes, one a second:
               all closed within 7 s (the 5 s a connection has in all)
  bulk_slots   1,040 silent connections from 130 addresses
  bulk_emfile  520 connections dripping against RLIMIT_NOFILE 1024: the
               PS's CPU below half a core, its fds below the limit
  bulk_stall   4 ticket holders announce 256 MiB EasgdExchange frames,
               send 4 KiB and stall (the in-flight budget is 1 GiB)
  bulk_hoard   one writer takes 300 tickets (256 can be out)
"""
import os
import re
import resource
import socket
import struct
import time

import __main__ as base  # bench/attack.py: its PS, protobuf modules and line()
import grpc

MAGIC = 0x32425353  # "SSB2"
EASGD = b"/shadowsync.v1.DenseSync/EasgdExchange"


def frame_head(length, method=EASGD):
    """A request frame's head and its method's path, for length bytes."""
    return struct.pack("<IIQ", MAGIC, len(method), length) + method


class Bulk(base.PS):
    """A PS with a bulk port and an honest writer's group."""

    def __init__(self, preexec=None):
        self.preexec = preexec
        super().__init__("--bulk-listen", "127.0.0.1:0", "--max-group-floats", str(64 << 20))
        for _ in range(100):  # its line comes right after "listening on"
            self.log.seek(0)
            m = re.search(r"bulk on \S+:(\d+)", self.log.read())
            if m:
                break
            time.sleep(0.05)
        self.bulk_port = int(m.group(1))
        self.join()
        self.base_ms = self.serving()

    def join(self):
        self.member = self.call("DenseSync", "Join", base.dense.JoinReply,
                                base.dense.JoinRequest(group="honest", size=4),
                                timeout=10).member

    def ticket(self, channel=None):
        return self.call("Bulk", "Ticket", base.bulk.BulkTicketReply,
                         base.bulk.BulkTicketRequest(), channel=channel).ticket

    def stream(self, src="127.0.0.1", ticket=None):
        s = socket.socket()
        s.bind((src, 0))
        s.settimeout(10)
        s.connect(("127.0.0.1", self.bulk_port))
        if ticket is not None:
            s.sendall(ticket)
        return s

    def honest_ms(self):
        """An exchange of 4 floats on a new stream: ms (10 s: it failed)."""
        body = base.dense.EasgdRequest(group="honest", member=self.member, alpha=0.5, size=4,
                                       snapshot=struct.pack("<4f", 1, 2, 3, 4))
        body = body.SerializeToString()
        t0 = time.perf_counter()
        try:
            s = self.stream(ticket=self.ticket())
            opened = read_exactly(s, 4)  # the server took the ticket (rpc/bulk/bulk.h)
            if opened is None or struct.unpack("<I", opened)[0] != MAGIC:
                return 10000.0
            s.sendall(frame_head(len(body)) + body)
            head = read_exactly(s, 20)
            s.close()
        except (OSError, grpc.RpcError):
            return 10000.0
        if head is None:
            return 10000.0
        magic, status = struct.unpack("<II", head[:8])
        ok = magic == MAGIC and status == 0
        return (time.perf_counter() - t0) * 1e3 if ok else 10000.0

    def serving(self):
        """The worst of /healthz, a gRPC Join and the honest stream, ms."""
        t0 = time.perf_counter()
        try:
            self.join()
            grpc_ms = (time.perf_counter() - t0) * 1e3
        except grpc.RpcError:
            grpc_ms = 10000.0
        return max(base.healthz_ms(self.http), grpc_ms, self.honest_ms())

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.proc.pid))

    def cpu_s(self):
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_exactly(s, n):
    """n bytes from s, or None when it closes first."""
    got = b""
    while len(got) < n:
        more = s.recv(n - len(got))
        if not more:
            return None
        got += more
    return got


def report(name, ps, what, worst_ms, ok=True):
    base.line(name, "serving %.1f ms" % ps.base_ms, "%s, serving %.1f ms" % (what, worst_ms),
              "serving 1000 ms", ok and worst_ms < 1000)


def connections_from(ps, n, per_source):
    """n connections, per_source from each of 127.0.0.2 and up."""
    socks = []
    for i in range(n):
        k = i // per_source
        try:
            socks.append(ps.stream("127.0.%d.%d" % (k // 250, 2 + k % 250)))
        except OSError:
            pass
    return socks


def drip(socks):
    """A byte on each; the ones the PS closed are taken out."""
    for s in list(socks):
        try:
            s.send(b"\x16")
            s.setblocking(False)
            if s.recv(1) == b"":
                raise ConnectionResetError
        except BlockingIOError:
            pass
        except OSError:
            socks.remove(s)
        s.setblocking(True)


def attack_bulk_drip():
    ps = Bulk()
    socks = [ps.stream("127.0.0.2") for _ in range(20)]
    t0, worst, closed_at = time.time(), 0.0, 0.0
    while socks and time.time() - t0 < 12:
        drip(socks)
        closed_at = time.time() - t0
        worst = max(worst, ps.serving())
        time.sleep(1)
    left = len(socks)
    ps.stop()
    report("bdrip", ps, "20 dripped tickets, closed by %.0f s (%d open at 12 s)"
           % (closed_at, left), worst, left == 0 and closed_at <= 7)


def attack_bulk_slots():
    ps = Bulk()
    socks = connections_from(ps, 1040, 8)
    time.sleep(0.5)
    worst, fds = ps.serving(), ps.fds()
    for s in socks:
        s.close()
    ps.stop()
    report("bslots", ps, "1040 silent (%d connected), PS fds %d" % (len(socks), fds), worst)


def low_nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def attack_bulk_emfile():
    ps = Bulk(preexec=low_nofile)
    socks = connections_from(ps, 520, 4)
    drip(socks)
    cpu0 = ps.cpu_s()
    time.sleep(3)
    cpu = (ps.cpu_s() - cpu0) / 3
    worst, fds = ps.serving(), ps.fds()
    for s in socks:
        s.close()
    ps.stop()
    report("bemfile", ps, "520 dripping, NOFILE 1024: PS fds %d, CPU %.2f core" % (fds, cpu),
           worst, cpu < 0.5 and fds < 1024)


def attack_bulk_stall():
    ps = Bulk()
    socks = []
    for _ in range(4):
        s = ps.stream("127.0.0.2", ps.ticket())
        s.sendall(frame_head(256 * base.MiB - 4096) + b"\0" * 4096)
        socks.append(s)
    time.sleep(0.5)
    worst = max(ps.serving() for _ in range(3))
    for s in socks:
        s.close()
    ps.stop()
    report("bstall", ps, "4 x 256 MiB announced, 4 KiB sent", worst)


def attack_bulk_hoard():
    ps = Bulk()
    ch = ps.channel_new()
    for _ in range(300):
        ps.ticket(ch)
    worst = ps.serving()
    ch.close()
    ps.stop()
    report("bhoard", ps, "300 tickets to one writer", worst)

