#!/usr/bin/env bash
# The image as Kubernetes runs it, built and run here with podman (skipped,
# exit 77, where podman cannot run): `deploy/container/build.sh --offline`
# builds it (the debian:12 base made with mmdebstrap when there is none);
# the PS and the agent run in it with the manifests' securityContext (uid
# and gid 10001, a read-only root, every capability dropped, no new
# privileges), each reading its token from a Secret-like file (root-owned,
# mode 0440, group 10001, as fsGroup makes it). The PS's state volume is
# changed between two starts the way kubelet's fsGroup changes it
# (group 10001, group-writable, setgid directories): the second start
# serves. A trainer outside, as another uid in group 10001, syncs through
# the agent's socket (SHADOWSYNC_SOCKET_GROUP); /healthz answers on both.
# Prints its wall time.
#   test_image.sh SOURCE_DIR BIN_DIR
set -euo pipefail
src=$1 bin=$2
NAME=test_image
t0=$(date +%s)
skip() { echo "test_image: skipped: $*"; exit 77; }
command -v podman >/dev/null || skip "no podman (apt-get install podman buildah mmdebstrap runc)"
podman info >/dev/null 2>&1 || skip "podman does not run here: $(podman info 2>&1 | tail -1)"
[ "$(id -u)" = 0 ] || skip "needs root (the volume's owner and the trainer's uid are set by hand)"
source "$(dirname "$0")/cli_lib.sh"
chmod 0755 "$tmp" # the containers' uid 10001 reaches the volumes under it
names=()
cleanup() {
  for n in "${names[@]}"; do podman rm -f "$n" >/dev/null 2>&1 || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
version=$(sed -n 's/^project(shadowsync VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
bash "$src/deploy/container/build.sh" --offline >"$tmp/build.log" 2>&1 || {
  tail -20 "$tmp/build.log" >&2
  fail "the image did not build"
}
image=shadowsync:$version
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ps_port=$(free_port) ps_http=$(free_port) agent_http=$(free_port)

# the Secret: root's, 0440, group 10001 (defaultMode 0440 under fsGroup)
mkdir -p "$tmp/secret"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/secret/token"
chown -R 0:10001 "$tmp/secret" && chmod 0750 "$tmp/secret" && chmod 0440 "$tmp/secret/token"
# the PS's volume: made by the PS at its first start, then changed as
# kubelet's fsGroup does on every mount
mkdir -p "$tmp/state" && chown 10001:10001 "$tmp/state" && chmod 0700 "$tmp/state"
fsgroup() {
  chgrp -R 10001 "$1"
  chmod -R g+rwX "$1"
  find "$1" -type d -exec chmod g+s {} +
}
pod=(--runtime runc --network host --ulimit nofile=4096:4096 --ulimit nproc=4096:4096
  --user 10001:10001 --read-only --cap-drop ALL
  --security-opt no-new-privileges -v "$tmp/secret:/etc/shadowsync:ro"
  -e SHADOWSYNC_AUTH_TOKEN_FILE=/etc/shadowsync/token -e SHADOWSYNC_LOG_FORMAT=json)
run_ps() {
  names+=(ss-test-ps-$$)
  podman run -d --name "ss-test-ps-$$" "${pod[@]}" -v "$tmp/state:/var/lib/shadowsync/state" \
    "$image" shadowsync-ps --listen "127.0.0.1:$ps_port" --http "127.0.0.1:$ps_http" \
    --emb-db /var/lib/shadowsync/state/rows --checkpoint-dir /var/lib/shadowsync/state/ckpt >/dev/null
}
healthy() { # URL: answers /healthz within 30 s
  for _ in $(seq 150); do curl -sf "$1/healthz" >/dev/null && return 0; sleep 0.2; done
  return 1
}
run_ps
healthy "http://127.0.0.1:$ps_http" || fail "the PS did not start: $(podman logs "ss-test-ps-$$" 2>&1 | tail -5)"
podman stop -t 10 "ss-test-ps-$$" >/dev/null
podman rm "ss-test-ps-$$" >/dev/null
fsgroup "$tmp/state"
[ "$(stat -c %a "$tmp/state/rows")" = 2770 ] || fail "fsGroup did not change the volume: $(stat -c %a "$tmp/state/rows")"
run_ps
healthy "http://127.0.0.1:$ps_http" || fail "the PS did not start again on a volume fsGroup changed: $(podman logs "ss-test-ps-$$" 2>&1 | tail -3)"

# the agent: its socket group 10001 lets a trainer pod of that group in;
# the node's socket directory is 10001's, 0750 (deploy/k8s/node-tmpfiles.conf)
mkdir -p "$tmp/run" && chown 10001:10001 "$tmp/run" && chmod 0750 "$tmp/run"
names+=(ss-test-agent-$$)
podman run -d --name "ss-test-agent-$$" "${pod[@]}" -v "$tmp/run:/run/shadowsync" \
  -e SHADOWSYNC_SOCKET_GROUP=10001 "$image" shadowsync-agent --ps "127.0.0.1:$ps_port" \
  --socket /run/shadowsync/agent.sock --http "127.0.0.1:$agent_http" >/dev/null
healthy "http://127.0.0.1:$agent_http" || fail "the agent did not start: $(podman logs "ss-test-agent-$$" 2>&1 | tail -5)"
[ "$(stat -c '%a %g' "$tmp/run/agent.sock")" = "660 10001" ] ||
  fail "the agent's socket is $(stat -c '%a %u:%g' "$tmp/run/agent.sock"), not 0660 group 10001"
# a trainer as uid 20000 in group 10001 (a trainer pod's fsGroup), this build's
setpriv --reuid 20000 --regid 10001 --clear-groups env SHADOWSYNC_AGENT="$tmp/run/agent.sock" SHADOWSYNC_AGENT_UID=10001 \
  timeout 120 "$bin/minimal-trainer" --mode shadow --steps 4000 --step-us 500 >"$tmp/trainer.log" 2>&1 ||
  fail "the trainer through the agent: $(tail -5 "$tmp/trainer.log")"
grep -q 'rounds=[1-9]' "$tmp/trainer.log" || fail "the trainer synced no round: $(tail -3 "$tmp/trainer.log")"
podman logs "ss-test-ps-$$" 2>&1 | /usr/bin/python3 -c '
import json, sys
for line in sys.stdin:
    json.loads(line)' || fail "a PS line in the image is not JSON"
echo "test_image: ok: $image built and run (uid 10001, read-only, no capabilities), the PS restarted on a volume fsGroup changed, tokens 0440, a trainer of group 10001 synced through the agent; $(($(date +%s) - t0)) s"
