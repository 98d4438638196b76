#!/usr/bin/env bash
# The operators' files read series that exist: deploy/prometheus/alerts.yml
# passes promtool, its unit tests (alerts_test.yml: promtool test rules)
# pass and fire every alert once at least, every shadowsync_* series named
# there or in the Grafana dashboard is one the code registers (a renamed
# series fails here, not silently on a dashboard), and every panel follows
# the dashboard's job variable.
#   test_alert_rules.sh SOURCE_DIR
set -euo pipefail
src=$1
fail() { echo "test_alert_rules: $*" >&2; exit 1; }
if command -v promtool >/dev/null; then
  promtool check rules "$src/deploy/prometheus/alerts.yml" >/dev/null || fail "promtool refuses alerts.yml"
  promtool check config "$src/deploy/prometheus/prometheus.yml" >/dev/null || fail "promtool refuses prometheus.yml"
  # Each alert fires on the series that should fire it, and only then.
  promtool test rules "$src/deploy/prometheus/alerts_test.yml" >"${TMPDIR:-/tmp}/alerts-test.$$" 2>&1 ||
    { cat "${TMPDIR:-/tmp}/alerts-test.$$" >&2; rm -f "${TMPDIR:-/tmp}/alerts-test.$$"; fail "promtool test rules failed"; }
  rm -f "${TMPDIR:-/tmp}/alerts-test.$$"
fi
registered=$(grep -rhoE '"shadowsync_[a-z_]+"' "$src"/{common,shadow,agent,ps,embedding-store,rpc,trainer-hooks} |
  tr -d '"' | sort -u)
n=0
for f in deploy/prometheus/alerts.yml deploy/grafana/shadowsync-dashboard.json; do
  for s in $(grep -oE 'shadowsync_[a-z_]+' "$src/$f" | sed -E 's/_(bucket|sum|count)$//' | sort -u); do
    grep -qx "$s" <<<"$registered" || fail "$f reads $s, which no daemon or library registers"
    n=$((n + 1))
  done
done
# Every alert has a unit test in which it fires.
/usr/bin/python3 - "$src/deploy/prometheus" <<'PY' || fail "alerts without a test"
import sys, yaml
d = sys.argv[1]
alerts = {r["alert"] for g in yaml.safe_load(open(f"{d}/alerts.yml"))["groups"]
          for r in g["rules"] if "alert" in r}
fired = {t["alertname"] for case in yaml.safe_load(open(f"{d}/alerts_test.yml"))["tests"]
         for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
if alerts - fired:
    sys.exit("never fired by alerts_test.yml: " + ", ".join(sorted(alerts - fired)))
print(f"{len(alerts)} alerts, each fired by a unit test")
PY
# Every panel follows the dashboard's job variable, and a panel that plots
# a count beside seconds gives it a unit of its own.
/usr/bin/python3 - "$src/deploy/grafana/shadowsync-dashboard.json" <<'PY' || fail "the dashboard's panels"
import json, sys
d = json.load(open(sys.argv[1]))
bad = []
for p in d["panels"]:
    exprs = [t["expr"] for t in p.get("targets", [])]
    if any('job=~"$job"' not in e for e in exprs):
        bad.append(f"panel {p['id']} ({p['title']}) ignores $job")
    unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
    counts = [t["refId"] for t in p.get("targets", [])
              if unit == "s" and "_seconds" not in t["expr"] and "_age" not in t["expr"]]
    overridden = {o["matcher"].get("options") for o in p.get("fieldConfig", {}).get("overrides", [])}
    if set(counts) - overridden:
        bad.append(f"panel {p['id']} ({p['title']}) plots {counts} in seconds")
if bad:
    sys.exit("\n".join(bad))
PY
echo "alert rules test: alerts.yml checked and unit-tested by promtool; $n series named by the alerts and the dashboard all registered"
