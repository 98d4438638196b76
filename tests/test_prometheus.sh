#!/usr/bin/env bash
# A real Prometheus server (Debian's prometheus package) on loopback with
# the scrape config of deploy/prometheus/ (unchanged; only its target files
# are written) scrapes a shadowsync-agent and a shadowsync-ps while a
# trainer syncs through the agent; a query through Prometheus' HTTP API
# must return a growing shadowsync_sync_rounds_total, and both jobs must
# be up.
# Usage: test_prometheus.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
# shellcheck source=tests/ports.sh
. "$src/tests/ports.sh"
for tool in prometheus promtool curl; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool not installed (deploy/install-deps.sh)"; exit 1; }
done
tmp=$(mktemp -d /tmp/ss-prom-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# Waits for a line in a log and prints the address after "$2 ".
addr_after() {
  for _ in $(seq 200); do
    if grep -q "$2 " "$1"; then
      grep -o "$2 [0-9.:]*" "$1" | head -1 | awk '{print $NF}'
      return 0
    fi
    sleep 0.1
  done
  echo "FAIL: no '$2' in $1:" >&2
  cat "$1" >&2
  return 1
}

"$build/bin/shadowsync-ps" --listen 127.0.0.1:0 --http 127.0.0.1:0 >"$tmp/ps.log" 2>&1 &
pids+=($!)
ps_grpc=$(addr_after "$tmp/ps.log" "listening on")
ps_http=$(addr_after "$tmp/ps.log" "http on")
"$build/bin/shadowsync-agent" --socket "$tmp/run/agent.sock" --ps "$ps_grpc" \
  --http 127.0.0.1:0 >"$tmp/agent.log" 2>&1 &
pids+=($!)
agent_http=$(addr_after "$tmp/agent.log" "http on")
SHADOWSYNC_AGENT="$tmp/run/agent.sock" "$build/bin/minimal-trainer" \
  --steps 1000000 --step-us 100 >"$tmp/trainer.log" 2>&1 &
pids+=($!)

cp -r "$src/deploy/prometheus" "$tmp/prom"
echo "[{\"targets\": [\"$agent_http\"], \"labels\": {\"cluster\": \"test\"}}]" >"$tmp/prom/targets/agents.json"
echo "[{\"targets\": [\"$ps_http\"], \"labels\": {\"cluster\": \"test\"}}]" >"$tmp/prom/targets/ps.json"
promtool check config "$tmp/prom/prometheus.yml"

# Prometheus cannot report a port it picked: a reserved one (tests/ports.sh).
reserve_port
prom_port=""
prometheus --config.file="$tmp/prom/prometheus.yml" \
  --web.listen-address="127.0.0.1:$RESERVED_PORT" \
  --storage.tsdb.path="$tmp/data" --log.level=warn >"$tmp/prometheus.log" 2>&1 &
pid=$!
pids+=("$pid")
for _ in $(seq 300); do
  if curl -sf "http://127.0.0.1:$RESERVED_PORT/-/ready" >/dev/null 2>&1; then
    prom_port=$RESERVED_PORT
    break
  fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$prom_port" ] || { echo "FAIL: prometheus did not start"; cat "$tmp/prometheus.log"; exit 1; }
echo "prometheus on 127.0.0.1:$prom_port scraping agent $agent_http and ps $ps_http"

# The value of an instant query's first result ("" when none).
query() {
  curl -sf --get "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1" |
    grep -o '"value":\[[0-9.]*,"[0-9.e+-]*"' | head -1 | sed 's/.*,"\(.*\)"/\1/' || true
}

first=""
for _ in $(seq 60); do
  first=$(query 'sum(shadowsync_sync_rounds_total)')
  [ -n "$first" ] && [ "${first%%.*}" -gt 0 ] && break
  sleep 1
done
[ -n "$first" ] || { echo "FAIL: no shadowsync_sync_rounds_total in Prometheus"; exit 1; }
echo "sum(shadowsync_sync_rounds_total) = $first"
second=$first
for _ in $(seq 60); do
  second=$(query 'sum(shadowsync_sync_rounds_total)')
  awk -v a="$first" -v b="$second" 'BEGIN { exit !(b > a) }' && break
  sleep 1
done
echo "sum(shadowsync_sync_rounds_total) = $second a few scrapes later"
awk -v a="$first" -v b="$second" 'BEGIN { exit !(b > a) }' ||
  { echo "FAIL: shadowsync_sync_rounds_total did not grow"; exit 1; }
for job in shadowsync-agent shadowsync-ps; do
  up=$(query "up{job=\"$job\"}")
  echo "up{job=\"$job\"} = $up"
  [ "$up" = "1" ] || { echo "FAIL: $job not scraped"; exit 1; }
done
ps_rounds=$(query 'sum(shadowsync_ps_rounds_total)')
echo "sum(shadowsync_ps_rounds_total) = $ps_rounds (the PS side of the same rounds)"
[ -n "$ps_rounds" ] || { echo "FAIL: no PS series in Prometheus"; exit 1; }
# Which build serves: shadowsync_build_info{version} on both daemons, the
# version their --version prints.
version=$("$build/bin/shadowsync-ps" --version | awk '{print $NF}')
for job in shadowsync-agent shadowsync-ps; do
  info=$(query "shadowsync_build_info{job=\"$job\",version=\"$version\"}")
  echo "shadowsync_build_info{job=\"$job\",version=\"$version\"} = $info"
  [ "$info" = "1" ] || { echo "FAIL: $job has no shadowsync_build_info for $version"; exit 1; }
done
echo "prometheus-test: OK"
