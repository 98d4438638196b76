#!/usr/bin/env python3
"""The systemd units of deploy/systemd, checked without a running systemd:

- deploy/systemd/shadowsync.sysusers.conf creates the user and group the
  units run as (systemd-sysusers into a scratch root);
- each unit passes `systemd-analyze verify` (ExecStart pointed at this
  build) and `systemd-analyze security --offline` rates it below 4;
- the daemons' system calls fit each unit's SystemCallFilter= (and its
  RestrictAddressFamilies=): shadowsync-ps and shadowsync-agent run under
  strace through a real workload (a trainer through the agent, embedding
  pushes, POST /checkpoint, a scrape, SIGTERM with its final checkpoint
  and flush), and every system call they made must be one the filter
  allows. A call outside it would be refused with EPERM under systemd.

Usage: test_systemd_units.py BUILD_BIN_DIR DEPLOY_SYSTEMD_DIR
Fails (never skips) when a tool it needs is missing.
"""
import grp
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

BIN, UNITS = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
EXPOSURE_LIMIT = 4.0


def tool(name):
    path = shutil.which(name)
    if not path:
        raise AssertionError(f"{name} is not installed (deploy/install-deps.sh installs it)")
    return path


def unit_files():
    return {
        "shadowsync-ps@0.service": os.path.join(UNITS, "shadowsync-ps@.service"),
        "shadowsync-agent.service": os.path.join(UNITS, "shadowsync-agent.service"),
    }


def unit_settings(path, key):
    """Every value of key= in the unit's [Service] section, in order."""
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith(key + "="):
                out.append(line[len(key) + 1:])
    return out


def syscall_groups():
    """@group -> set of entries (system calls and nested @groups)."""
    text = subprocess.run([tool("systemd-analyze"), "syscall-filter", "--no-pager"],
                          capture_output=True, text=True, check=True).stdout
    groups, current = {}, None
    for line in text.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), set())
        elif current is not None and line.strip() and not line.strip().startswith("#"):
            current.add(line.strip())
    return groups


def expand(entry, groups):
    if not entry.startswith("@"):
        return {entry}
    out = set()
    for e in groups[entry]:
        out |= expand(e, groups)
    return out


def allowed_syscalls(unit_path, groups):
    """What SystemCallFilter= lines allow, as systemd reads them: the first
    line, an allow-list, sets it; later "~" lines take away, later plain
    lines add back. @default is always allowed."""
    allowed = None
    for value in unit_settings(unit_path, "SystemCallFilter"):
        deny = value.startswith("~")
        names = set()
        for e in value.lstrip("~").split():
            names |= expand(e, groups)
        if allowed is None:
            assert not deny, "the first SystemCallFilter= must be an allow-list"
            allowed = names
        elif deny:
            allowed -= names
        else:
            allowed |= names
    assert allowed is not None, f"{unit_path} has no SystemCallFilter="
    return allowed | expand("@default", groups)


def traced_syscalls(trace_dir):
    """Names of the system calls in strace -ff output files."""
    names = set()
    for name in os.listdir(trace_dir):
        with open(os.path.join(trace_dir, name), errors="replace") as f:
            for line in f:
                m = re.match(r"\s*(?:\d+\s+)?([a-z_0-9]+)\(", line)
                if m:
                    names.add(m.group(1))
                # A call cut by a thread switch resumes as "<... name resumed>"
                m = re.match(r"\s*(?:\d+\s+)?<\.\.\. ([a-z_0-9]+) resumed>", line)
                if m:
                    names.add(m.group(1))
    return names


def socket_families(trace_dir):
    fams = set()
    for name in os.listdir(trace_dir):
        fams |= set(re.findall(r"socket\((AF_[A-Z0-9]+)", read(os.path.join(trace_dir, name))))
    return fams


def traced_pid(strace_proc):
    """The daemon strace started (its child): signals go to it, not strace."""
    with open(f"/proc/{strace_proc.pid}/task/{strace_proc.pid}/children") as f:
        return int(f.read().split()[0])


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def wait_for(path, pattern, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path):
            m = re.search(pattern, read(path))
            if m:
                return m
        time.sleep(0.05)
    raise AssertionError(f"no {pattern!r} in {path} after {timeout} s:\n" +
                         (read(path) if os.path.exists(path) else "(no file)"))


class SystemdUnits(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ss-units-")
        cls.units = {}
        for name, src in unit_files().items():
            text = read(src).replace("/usr/local/bin/", BIN.rstrip("/") + "/")
            dst = os.path.join(cls.tmp, name)
            with open(dst, "w") as f:
                f.write(text)
            cls.units[name] = dst

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_sysusers_creates_the_user_and_group(self):
        root = os.path.join(self.tmp, "root")
        os.makedirs(os.path.join(root, "etc"))
        conf = os.path.abspath(os.path.join(UNITS, "shadowsync.sysusers.conf"))
        subprocess.run([tool("systemd-sysusers"), f"--root={root}", conf], check=True,
                       capture_output=True)
        passwd = read(os.path.join(root, "etc/passwd"))
        group = read(os.path.join(root, "etc/group"))
        self.assertRegex(passwd, r"(?m)^shadowsync:x:\d+:\d+:[^:]*:/var/lib/shadowsync:/usr/sbin/nologin$")
        self.assertRegex(group, r"(?m)^shadowsync:x:\d+:")
        for path in self.units.values():  # the name the units run as
            self.assertEqual(unit_settings(path, "User"), ["shadowsync"])
            self.assertEqual(unit_settings(path, "Group"), ["shadowsync"])

    def test_units_verify(self):
        for name, path in self.units.items():
            r = subprocess.run([tool("systemd-analyze"), "verify", path], capture_output=True,
                               text=True)
            problems = [l for l in r.stderr.splitlines() if "shadowsync" in l and
                        "Unknown" not in l and "user" not in l.lower()]
            self.assertEqual(r.returncode, 0, f"{name}: {r.stderr}")
            self.assertEqual(problems, [], f"{name}: {r.stderr}")

    def test_exposure_below_4(self):
        for name, path in self.units.items():
            r = subprocess.run([tool("systemd-analyze"), "security", "--offline=true", "--no-pager",
                                path], capture_output=True, text=True)
            m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout)
            self.assertIsNotNone(m, f"{name}: no exposure level in:\n{r.stdout}{r.stderr}")
            level = float(m.group(1))
            print(f"{name}: systemd-analyze security exposure {level}")
            self.assertLess(level, EXPOSURE_LIMIT, r.stdout)

    def test_daemons_fit_their_syscall_filters(self):
        strace, groups = tool("strace"), syscall_groups()
        work = os.path.join(self.tmp, "run")
        os.makedirs(work)
        trace = {d: os.path.join(work, "trace-" + d) for d in ("ps", "agent")}
        for d in trace.values():
            os.makedirs(d)
        env = dict(os.environ, SHADOWSYNC_LOG_LEVEL="info")
        ps_log, agent_log = os.path.join(work, "ps.log"), os.path.join(work, "agent.log")
        ps_out, agent_out = open(ps_log, "w"), open(agent_log, "w")
        self.addCleanup(ps_out.close)
        self.addCleanup(agent_out.close)
        ps = subprocess.Popen(
            [strace, "-f", "-ff", "-qq", "-o", os.path.join(trace["ps"], "t"),
             os.path.join(BIN, "shadowsync-ps"), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
             "--emb-db", os.path.join(work, "rows"), "--checkpoint-dir", os.path.join(work, "dense")],
            stdout=ps_out, stderr=subprocess.STDOUT, env=env)
        procs = [ps]
        try:
            m = wait_for(ps_log, r"listening on (\S+), http on (\S+)")
            target, ps_http = m.group(1), m.group(2)
            sock = os.path.join(work, "agent", "agent.sock")
            agent = subprocess.Popen(
                [strace, "-f", "-ff", "-qq", "-o", os.path.join(trace["agent"], "t"),
                 os.path.join(BIN, "shadowsync-agent"), "--ps", target, "--socket", sock,
                 "--http", "127.0.0.1:0", "--checkpoint-dir", os.path.join(work, "agent-ckpt"),
                 "--socket-group", grp.getgrgid(os.getgid()).gr_name],
                stdout=agent_out, stderr=subprocess.STDOUT, env=env)
            procs.append(agent)
            agent_http = wait_for(agent_log, r"http on (\S+?),")
            agent_http = agent_http.group(1)
            trainer = subprocess.run(
                [os.path.join(BIN, "minimal-trainer"), "--steps", "3000", "--mode", "background",
                 "--step-us", "200"],
                env=dict(env, SHADOWSYNC_AGENT=sock), capture_output=True, text=True, timeout=120)
            self.assertEqual(trainer.returncode, 0, trainer.stdout + trainer.stderr)
            bench = subprocess.run(
                [os.path.join(BIN, "shadowsync-bench-emb"), "--ps", target, "--rows", "20000",
                 "--batch", "512", "--dim", "8", "--reps", "10"],
                env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(bench.returncode, 0, bench.stdout + bench.stderr)
            for http in (ps_http, agent_http):
                urllib.request.urlopen(f"http://{http}/metrics", timeout=10).read()
                req = urllib.request.Request(f"http://{http}/checkpoint", data=b"", method="POST")
                urllib.request.urlopen(req, timeout=60).read()
            for p in reversed(procs):  # SIGTERM: the final checkpoint and flush
                os.kill(traced_pid(p), signal.SIGTERM)
                self.assertEqual(p.wait(timeout=60), 0)
        finally:
            for p in procs:  # the daemon first: killing strace alone leaves it running
                if p.poll() is None:
                    try:
                        os.kill(traced_pid(p), signal.SIGKILL)
                    except (OSError, IndexError, ValueError):
                        pass
                    p.kill()
                    p.wait()
        for daemon, unit in (("ps", "shadowsync-ps@0.service"),
                             ("agent", "shadowsync-agent.service")):
            used = traced_syscalls(trace[daemon])
            self.assertGreater(len(used), 20, f"strace saw too little of {daemon}")
            outside = sorted(used - allowed_syscalls(self.units[unit], groups) - {"execve"})
            print(f"{daemon}: {len(used)} distinct system calls, outside {unit}'s filter: "
                  f"{outside or 'none'}")
            self.assertEqual(outside, [], f"{daemon} calls what {unit} would refuse")
            fams = socket_families(trace[daemon])
            allowed_fams = set(" ".join(unit_settings(self.units[unit],
                                                      "RestrictAddressFamilies")).split())
            self.assertLessEqual(fams, allowed_fams, f"{daemon} opens sockets of {fams}")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
