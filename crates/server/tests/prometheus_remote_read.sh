#!/usr/bin/env bash
# Remote read by the real Prometheus 2.42: a tidemark-server with an API key scoped to
# `metrics` takes two line-protocol points; Prometheus, configured with `remote_read` to
# the server (the key as a bearer token, `read_recent: true`) and nothing in its own
# TSDB, answers instant queries over them through its own query API: the two series
# with their values, `count`, a regex selector and an absent metric. Without the key
# the server refuses the read (401). Loopback only, at most ~40 s.
# Usage: prometheus_remote_read.sh TIDEMARK_SERVER_BINARY
set -euo pipefail
BIN=${1:?usage: prometheus_remote_read.sh TIDEMARK_SERVER_BINARY}
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
id = "reader"
key = "s3cret"
indices = ["metrics"]
TOML
TIDEMARK_LOG=warn "$BIN" --data "$TMP/data" --listen 127.0.0.1:0 --port-file "$TMP/port" \
  --config "$TMP/server.toml" >"$TMP/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 300); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || fail "the server did not start"
ADDR=$(cat "$TMP/port")
TOKEN=$(printf 'reader:s3cret' | base64)
NOW_S=$(date +%s)
TS_NS=$(( (NOW_S - 30) * 1000000000 ))
code=$(curl -s -o /dev/null -w '%{http_code}' -H "authorization: Bearer $TOKEN" \
  --data-binary "cpu,host=a usage=1.5 $TS_NS
cpu,host=b usage=2.25 $TS_NS
" "http://$ADDR/write?db=metrics")
[ "$code" = 204 ] || fail "line protocol write answered $code"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'content-type: application/x-protobuf' \
  --data-binary 'x' "http://$ADDR/api/v1/read")" = 401 ] || fail "/api/v1/read answered without credentials"

PROM_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$TMP/prometheus.yml" <<YML
global: {scrape_interval: 1m}
remote_read:
  - url: http://$ADDR/api/v1/read
    read_recent: true
    authorization: {credentials: "$TOKEN"}
YML
prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$TMP/prom.log" 2>&1 &
PROM_PID=$!
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$PROM_PORT/-/ready" >/dev/null && break; sleep 0.1
done

# An instant query's result as sorted "labels=value" lines (warnings fail the check).
query() {
  curl -s --get "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" \
    --data-urlencode "time=$NOW_S" | python3 -c 'import json,sys
v = json.load(sys.stdin)
if v.get("status") != "success" or v.get("warnings"):
    print("ERROR", v); sys.exit(0)
out = []
for r in v["data"]["result"]:
    m = ",".join(f"{k}={x}" for k, x in sorted(r["metric"].items()))
    out.append(m + "=" + r["value"][1])
print(" ".join(sorted(out)))'
}
check() { # query expected
  local got; got=$(query "$1")
  [ "$got" = "$2" ] || fail "$1: got [$got], want [$2]"
  echo "ok: $1 -> ${2:-(empty)}"
}
check 'cpu_usage' '__name__=cpu_usage,host=a=1.5 __name__=cpu_usage,host=b=2.25'
check 'count(cpu_usage)' '=2'
check '{__name__=~"cpu_.*", host="b"}' '__name__=cpu_usage,host=b=2.25'
check 'sum(cpu_usage) * 2' '=7.5'
check 'absent_here' ''
echo "prometheus remote read: ok"
