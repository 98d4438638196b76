#!/usr/bin/env bash
# Deltas out of a training PS and a --follow PS serving them (root not
# needed; everything on 127.0.0.1):
#  1. size: a table of ROWS rows (dim DIM, Adagrad), then 1% and 10% of
#     its rows pushed between two deltas: each delta's bytes / the base's
#     (the full copy a checkpoint would write);
#  2. freshness: PROBES pushes of a fresh value, each timed from the PS's
#     acknowledgement to the first Lookup on the follower that returns it
#     (--delta-every-s PERIOD, the follower polling every 50 ms): p50, p99
#     and the bound 2 x PERIOD + 1 s;
#  3. cost: ctr-train (--emb remote, a drifting stream of TRAIN_ROWS rows
#     piped in) against a PS without deltas (the baseline, same run) and one
#     writing deltas with a follower attached, REPS times alternating:
#     examples/s and the ratio, medians (the follower shares the 2 cores
#     here; a serving replica normally runs on its own host).
#   bash bench/deltas.sh                  # ROWS=1000000 DIM=16 PERIOD=1
source "$(dirname "$0")/common.sh"
ROWS=${ROWS:-1000000}
DIM=${DIM:-16}
PERIOD=${PERIOD:-1}
PROBES=${PROBES:-60}
TRAIN_ROWS=${TRAIN_ROWS:-600000}
REPS=${REPS:-5}
bench_ps_trap
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

start() { # name flags... -> sets <name>_pid <name>_addr <name>_http
  local name=$1 log=$work/$1.log
  shift
  ./build/bin/shadowsync-ps --listen 127.0.0.1:0 --http 127.0.0.1:0 "$@" >"$log" 2>&1 &
  printf -v "${name}_pid" %s $!
  for _ in $(seq 200); do grep -q "http on" "$log" && break; sleep 0.05; done
  printf -v "${name}_addr" %s "$(grep -o 'listening on [0-9.:]*' "$log" | awk '{print $3}')"
  printf -v "${name}_http" %s "$(grep -o 'http on [0-9.:]*' "$log" | awk '{print $3}')"
}

start train --delta-dir "$work/deltas" --delta-every-s "$PERIOD" --delta-base-every 1000
start follow --follow "$work/deltas" --follow-poll-ms 50
echo "deltas: one training PS (--delta-every-s $PERIOD) and one --follow PS on 127.0.0.1;" \
  "a table of $ROWS rows, dim $DIM, Adagrad"
/usr/bin/python3 - "$train_addr" "$train_http" "$follow_addr" "$work" "$ROWS" "$DIM" "$PERIOD" \
  "$PROBES" "$PWD/rpc" <<'PY'
import os, re, struct, subprocess, sys, time, urllib.request
import grpc
train, train_http, follow, work, rows, dim, period, probes, rpc = sys.argv[1:]
rows, dim, period, probes = int(rows), int(dim), float(period), int(probes)
gen = os.path.join(work, "gen"); os.makedirs(gen)
subprocess.run(["protoc", "-I", rpc + "/emb", "--python_out", gen, "embedding.proto"], check=True)
sys.path.insert(0, gen)
import embedding_pb2 as emb
token = open(os.environ["SHADOWSYNC_AUTH_TOKEN_FILE"]).read().strip()
meta = [("authorization", "Bearer " + token)]
def call(addr, name, reply, req):
    with grpc.insecure_channel(addr, options=[("grpc.max_receive_message_length", 1 << 28),
                                              ("grpc.max_send_message_length", 1 << 28)]) as ch:
        return ch.unary_unary("/shadowsync.v1.Embedding/" + name,
                              request_serializer=lambda m: m.SerializeToString(),
                              response_deserializer=reply.FromString)(req, timeout=60,
                                                                      metadata=meta)
def seq():
    t = urllib.request.urlopen("http://%s/metrics" % train_http).read().decode()
    return int(float(re.search(r"^shadowsync_delta_seq (\S+)$", t, re.M).group(1)))
def push(ids, g):
    for k in range(0, len(ids), 65536):
        part = ids[k:k + 65536]
        call(train, "Push", emb.PushReply, emb.PushRequest(
            table="t", ids=struct.pack("<%dQ" % len(part), *part),
            grads=struct.pack("<f", g) * (len(part) * dim)))
def sizes_since(s):
    """The emb.delta bytes of every delta (or base) after seq s."""
    d = work + "/deltas"
    return sum(os.path.getsize(os.path.join(d, n, "emb.delta")) for n in os.listdir(d)
               if re.match(r"\d{20}-(base|delta)$", n) and int(n[:20]) > s)
def settled_since(s):
    """Once two more deltas are out (the second took everything pushed
    before the first began): the bytes of the deltas after s."""
    now = seq()
    while seq() < now + 2:
        time.sleep(0.05)
    return sizes_since(s)
spec = emb.TableSpec(name="t", dim=dim, optimizer=1, lr=0.05, eps=1e-8, init_scale=0.01)
call(train, "OpenTable", emb.OpenTableReply, emb.OpenTableRequest(spec=spec))
s0 = seq()
push(list(range(rows)), 0.1)
base = settled_since(s0)          # every row once, across the deltas that took them: a full copy
print("%-22s %14s %10s" % ("delta", "bytes", "/ base"))
for frac in (0.01, 0.10):
    s0 = seq()
    push(list(range(0, rows, int(1 / frac))), 0.2)
    size = settled_since(s0)
    print("%-22s %14d %10.4f" % ("%.0f%% rows pushed" % (100 * frac), size, size / base))
print("%-22s %14d %10.4f" % ("every row (a base)", base, 1.0))
lat = []
for p in range(probes):
    i = rows + p
    g = -float(p + 1)
    time.sleep((p % 7) * period / 7)  # spread over the period
    push([i], g)
    t0 = time.time()
    want = call(train, "Lookup", emb.LookupReply,
                emb.LookupRequest(table="t", ids=struct.pack("<Q", i))).rows
    while call(follow, "Lookup", emb.LookupReply,
               emb.LookupRequest(table="t", ids=struct.pack("<Q", i))).rows != want:
        time.sleep(0.01)
    lat.append(time.time() - t0)
lat.sort()
q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))]
print("freshness: probes=%d p50=%.3fs p99=%.3fs max=%.3fs bound=%.1fs (2 x period + 1 s)"
      % (len(lat), q(0.5), q(0.99), lat[-1], 2 * period + 1))
PY
kill "$train_pid" "$follow_pid"
wait "$train_pid" "$follow_pid" 2>/dev/null || true

rate() { # flags... -> examples/s of one ctr-train over a fresh PS started with flags
  start cost "$@"
  local f=""
  [ $# -gt 0 ] && { start cfollow --follow "$work/cdeltas" --follow-poll-ms 50; f=$cfollow_pid; }
  ./build/bin/ctr-gen --drift --rows "$TRAIN_ROWS" --out - --quiet 2>/dev/null |
    ./build/bin/ctr-train --train - --emb remote --emb-ps "$cost_addr" --progress 0 >"$work/cost.out" 2>&1
  kill "$cost_pid" $f
  wait "$cost_pid" $f 2>/dev/null || true
  summary_field "$(cat "$work/cost.out")" examples/s
}
rates_base="" rates_delta="" ratios=""
for rep in $(seq "$REPS"); do # alternating, so that drift in the machine's speed hits both
  b=$(rate)
  d=$(rate --delta-dir "$work/cdeltas" --delta-every-s "$PERIOD")
  rm -rf "$work/cdeltas"
  rates_base+="$b " rates_delta+="$d "
  ratios+="$(awk -v a="$d" -v b="$b" 'BEGIN {printf "%.3f", a / b}') "
  echo "rep $rep: examples/s no deltas $b, deltas + a follower $d" >&2
done
echo "training examples/s (ctr-train --emb remote, $TRAIN_ROWS drifting rows, $REPS reps, medians):" \
  "no deltas $(med "$rates_base"), deltas + a follower $(med "$rates_delta"), ratio $(med "$ratios")" \
  "(each rep: $ratios)"
