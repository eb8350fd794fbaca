#!/usr/bin/env bash
# Remote-write credentials with the real sender: Prometheus 2.42 scrapes itself every
# second and remote-writes to a tidemark-server that has an API key configured, through
# two queues: one with `authorization: {credentials: base64(id:key)}` (sent as Bearer),
# one without. The first queue's samples are stored; the second is refused with 401,
# which Prometheus logs as non-recoverable (it does not retry it), and stores nothing.
# Loopback only, at most ~40 s.
# Usage: prometheus_auth.sh TIDEMARK_SERVER_BINARY
set -euo pipefail
BIN=${1:?usage: prometheus_auth.sh TIDEMARK_SERVER_BINARY}
command -v prometheus >/dev/null || { echo "prometheus is not installed" >&2; exit 1; }
TMP=$(mktemp -d)
SERVER_PID=""; PROM_PID=""
cleanup() {
  [ -n "$PROM_PID" ] && kill "$PROM_PID" 2>/dev/null
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null
  wait 2>/dev/null; rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; tail -20 "$TMP/prom.log" >&2; cat "$TMP/server.log" >&2; exit 1; }

cat >"$TMP/server.toml" <<'TOML'
[[api_keys]]
id = "prom"
key = "k3y"
indices = ["metrics-*"]
TOML
TIDEMARK_LOG=warn "$BIN" --data "$TMP/data" --listen 127.0.0.1:0 --port-file "$TMP/port" \
  --config "$TMP/server.toml" >"$TMP/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 300); do [ -s "$TMP/port" ] && break; sleep 0.1; done
ADDR=$(cat "$TMP/port")
PROM_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
TOKEN=$(printf 'prom:k3y' | base64)
cat >"$TMP/prometheus.yml" <<YML
global: {scrape_interval: 1s}
scrape_configs:
  - job_name: self
    static_configs: [{targets: ["127.0.0.1:$PROM_PORT"]}]
remote_write:
  - url: http://$ADDR/api/v1/write?index=metrics-auth
    authorization: {credentials: "$TOKEN"}
    queue_config: {batch_send_deadline: 1s}
  - url: http://$ADDR/api/v1/write?index=metrics-noauth
    queue_config: {batch_send_deadline: 1s}
YML
prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$TMP/prom.log" 2>&1 &
PROM_PID=$!

count() {
  curl -s -H "authorization: ApiKey $TOKEN" "http://$ADDR/$1/_count" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin).get("count", 0))'
}
stored=0
for _ in $(seq 1 60); do
  sleep 0.5
  stored=$(count metrics-auth)
  if [ "$stored" -gt 1000 ] && grep -q 'metrics-noauth.*non-recoverable.*401' "$TMP/prom.log"; then break; fi
done
[ "$stored" -gt 1000 ] || fail "the authenticated queue stored only $stored samples"
grep -q 'metrics-noauth.*non-recoverable.*401 Unauthorized: unable to authenticate' "$TMP/prom.log" \
  || fail "Prometheus did not log the unauthenticated queue's 401"
[ "$(count metrics-noauth)" = 0 ] || fail "the unauthenticated queue stored samples"
echo "OK: Prometheus remote write with a bearer API key stored $stored samples; without credentials 401 (non-recoverable), nothing stored"
