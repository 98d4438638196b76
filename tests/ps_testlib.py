"""What the black-box Python tests of shadowsync-ps share: message classes
generated with protoc from the project's .proto files (no project client
code involved), a shadowsync-ps started on free ports, and unary calls."""
import os
import re
import subprocess
import sys
import time

import grpc


def protos(rpc_dir, work):
    """(dense_sync_pb2, embedding_pb2), generated into work/gen."""
    gen = os.path.join(work, "gen")
    os.makedirs(gen, exist_ok=True)
    subprocess.run(["protoc", "-I", os.path.join(rpc_dir, "dense"), "-I",
                    os.path.join(rpc_dir, "emb"), "--python_out", gen, "dense_sync.proto",
                    "embedding.proto"], check=True)
    sys.path.insert(0, gen)
    import dense_sync_pb2
    import embedding_pb2
    return dense_sync_pb2, embedding_pb2


def start_ps(ps_bin, work, name, extra):
    """A shadowsync-ps on 127.0.0.1 with free ports, its output in
    work/name.log: (process, log file, gRPC address, http address)."""
    log = open(os.path.join(work, name + ".log"), "w+")  # noqa: SIM115 (the PS writes it)
    env = dict(os.environ)
    if "--auth-token-file" in extra:  # the PS refuses SHADOWSYNC_INSECURE_LOOPBACK beside it
        env.pop("SHADOWSYNC_INSECURE_LOOPBACK", None)
    ps = subprocess.Popen([ps_bin, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"] + extra,
                          stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    deadline = time.time() + 30
    m = None
    while time.time() < deadline and not m:
        time.sleep(0.05)
        log.seek(0)
        m = re.search(r"listening on (\S+), http on (\S+)", log.read())
        if ps.poll() is not None:
            break
    if not m:
        log.seek(0)
        raise AssertionError("shadowsync-ps %s did not start: %s" % (name, log.read()))
    return ps, log, m.group(1), m.group(2)


def method(channel, service, name, reply_cls):
    return channel.unary_unary("/shadowsync.v1.%s/%s" % (service, name),
                               request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=reply_cls.FromString)
