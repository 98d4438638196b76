#!/usr/bin/env bash
# SHADOWSYNC_LOG_FORMAT=json (what the Kubernetes manifests set): every line
# a shadowsync-ps and a shadowsync-agent write, stdout and stderr, from
# start to stop (checkpoint restore, embedding store, auth mode, listening,
# a trainer's session, stopping, stopped), parses as one JSON object with
# ts, level and component.
#   test_json_logs.sh BUILD_DIR
set -euo pipefail
bin=$1/bin
tmp=$(mktemp -d /tmp/ss-jsonlog-XXXXXX)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
export SHADOWSYNC_LOG_FORMAT=json SHADOWSYNC_LOG_LEVEL=info SHADOWSYNC_INSECURE_LOOPBACK=1
"$bin/shadowsync-ps" --listen 127.0.0.1:0 --http 127.0.0.1:0 --checkpoint-dir "$tmp/ck" \
  --emb-db "$tmp/rows" >"$tmp/ps.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "listening on" "$tmp/ps.log" && break; sleep 0.1; done
ps_addr=$(grep -o 'listening on [0-9.:]*' "$tmp/ps.log" | awk '{print $3}')
[ -n "$ps_addr" ] || { cat "$tmp/ps.log" >&2; exit 1; }
"$bin/shadowsync-agent" --ps "$ps_addr" --socket "$tmp/agent.sock" --http 127.0.0.1:0 \
  >"$tmp/agent.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "listening on" "$tmp/agent.log" && break; sleep 0.1; done
SHADOWSYNC_AGENT="$tmp/agent.sock" timeout 60 "$bin/minimal-trainer" --mode shadow --steps 200 \
  --step-us 500 >"$tmp/trainer.log" 2>&1
kill -TERM "${pids[@]}"
wait "${pids[@]}" || true
pids=()
/usr/bin/python3 - "$tmp/ps.log" "$tmp/agent.log" <<'PY'
import json, sys
for path in sys.argv[1:]:
    lines = open(path).read().splitlines()
    assert lines, f"{path}: nothing written"
    for n, line in enumerate(lines, 1):
        try:
            o = json.loads(line)
        except ValueError:
            sys.exit(f"FAIL: {path}:{n} is not JSON: {line}")
        assert isinstance(o, dict) and {"ts", "level", "component"} <= o.keys(), (path, n, line)
    text = "\n".join(lines)
    for said in ("listening on", "stopped"):
        assert said in text, f"{path}: no {said!r} line"
    print(f"{path.rsplit('/', 1)[-1]}: {len(lines)} lines, every one JSON")
PY
# a refusal at start is a JSON line of level error too, on stderr
rc=0
"$bin/shadowsync-ps" --listen 127.0.0.1:0 --http "" --sync-writes true >/dev/null 2>"$tmp/refused-ps.log" || rc=$?
[ $rc = 2 ] || { echo "FAIL: the PS's refusal exited $rc" >&2; exit 1; }
rc=0
"$bin/shadowsync-agent" --ps 127.0.0.1:1 --socket "$tmp/x/y/z.sock" --http "" >/dev/null \
  2>"$tmp/refused-agent.log" || rc=$?
[ $rc != 0 ] || { echo "FAIL: the agent started on a socket it cannot make" >&2; exit 1; }
/usr/bin/python3 - "$tmp/refused-ps.log" "$tmp/refused-agent.log" <<'PY'
import json, sys
for path in sys.argv[1:]:
    lines = open(path).read().splitlines()
    assert lines, f"{path}: nothing written"
    for line in lines:
        try:
            o = json.loads(line)
        except ValueError:
            sys.exit(f"FAIL: {path}: a refusal that is not JSON: {line}")
        assert o.get("level") == "error", (path, line)
    print(f"{path.rsplit('/', 1)[-1]}: {lines[-1]}")
PY
echo "json-logs test: every line of the PS and the agent parses as JSON, refusals too"
