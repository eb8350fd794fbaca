#!/usr/bin/env bash
# GET /metrics scraped by the real Prometheus 2.42: a tidemark-server with an API key
# scoped to `lp-*` takes line protocol (two points, then the same two again: duplicates),
# Prometheus scrapes it every second with that key as a bearer token, and its own query
# API then answers the server's figures: the target up, 2 documents and 2 duplicates in
# `lp-a`, request counts and a latency histogram Prometheus can take a quantile of.
# Loopback only, at most ~40 s.
# Usage: prometheus_scrape.sh TIDEMARK_SERVER_BINARY
set -euo pipefail
BIN=${1:?usage: prometheus_scrape.sh TIDEMARK_SERVER_BINARY}
command -v prometheus >/dev/null || { echo "prometheus is not installed" >&2; exit 1; }
TMP=$(mktemp -d)
SERVER_PID=""; PROM_PID=""
cleanup() {
  [ -n "$PROM_PID" ] && kill "$PROM_PID" 2>/dev/null
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null
  wait 2>/dev/null; rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; tail -20 "$TMP/prom.log" >&2; tail -20 "$TMP/server.log" >&2; exit 1; }

cat >"$TMP/server.toml" <<'TOML'
[[api_keys]]
id = "scraper"
key = "s3cret"
indices = ["lp-*"]
TOML
TIDEMARK_LOG=warn "$BIN" --data "$TMP/data" --listen 127.0.0.1:0 --port-file "$TMP/port" \
  --config "$TMP/server.toml" >"$TMP/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 300); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || fail "the server did not start"
ADDR=$(cat "$TMP/port")
TOKEN=$(printf 'scraper:s3cret' | base64)
for _ in 1 2; do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "authorization: Bearer $TOKEN" \
    --data-binary $'cpu,host=a usage=1 1764460800000000000\ncpu,host=b usage=2 1764460800000000000\n' \
    "http://$ADDR/write?db=lp-a")
  [ "$code" = 204 ] || fail "line protocol write answered $code"
done
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$ADDR/metrics")" = 401 ] \
  || fail "/metrics answered without credentials"

PROM_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$TMP/prometheus.yml" <<YML
global: {scrape_interval: 1s, scrape_timeout: 1s}
scrape_configs:
  - job_name: tidemark
    authorization: {credentials: "$TOKEN"}
    static_configs: [{targets: ["$ADDR"]}]
YML
prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$TMP/prom.log" 2>&1 &
PROM_PID=$!

# The value of an instant query's first sample, or empty.
query() {
  curl -s --get "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" \
    | python3 -c 'import json,sys
r = json.load(sys.stdin).get("data", {}).get("result", [])
print(r[0]["value"][1] if r else "")' 2>/dev/null || true
}
up=""
for _ in $(seq 1 60); do
  sleep 0.5
  up=$(query 'up{job="tidemark"}')
  [ "$up" = 1 ] && [ -n "$(query 'tidemark_index_documents{index="lp-a"}')" ] && break
done
[ "$up" = 1 ] || fail "the scrape target is not up (up=$up)"
docs=$(query 'tidemark_index_documents{index="lp-a"}')
dups=$(query 'tidemark_index_items_total{index="lp-a",result="duplicate"}')
writes=$(query 'sum(tidemark_requests_total{route="/write",code="204"})')
p99=$(query 'histogram_quantile(0.99, sum by (le) (tidemark_request_duration_seconds_bucket{route="/write"}))')
rss=$(query 'process_resident_memory_bytes{job="tidemark"}')
[ "$docs" = 2 ] || fail "tidemark_index_documents is $docs, expected 2"
[ "$dups" = 2 ] || fail "duplicates are $dups, expected 2"
[ "$writes" = 2 ] || fail "requests to /write are $writes, expected 2"
python3 -c "import sys; sys.exit(0 if 0 < float('$p99') <= 5 else 1)" || fail "p99 of /write is $p99"
python3 -c "import sys; sys.exit(0 if float('$rss') > 1e6 else 1)" || fail "RSS is $rss"
# Prometheus found no fault with the exposition (a parse error marks the scrape failed).
grep -qi 'error.*scrape' "$TMP/prom.log" && fail "Prometheus logged a scrape error"
echo "OK: Prometheus scraped /metrics with a bearer API key: up=1, documents=$docs, duplicates=$dups, /write requests=$writes, p99 ${p99}s, RSS $rss bytes"
