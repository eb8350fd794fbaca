#!/usr/bin/env bash
# Influx line protocol with the real client: Debian's `influx` CLI (influxdb-client)
# imports a line-protocol file into tidemark-server twice. The first import stores
# every good line and the server names the malformed one; the second stores nothing
# new (every point a duplicate). Loopback only, a few seconds.
# Usage: influx_import.sh TIDEMARK_SERVER_BINARY
set -euo pipefail
BIN=${1:?usage: influx_import.sh TIDEMARK_SERVER_BINARY}
command -v influx >/dev/null || { echo "influx (influxdb-client) is not installed" >&2; exit 1; }
TMP=$(mktemp -d)
SERVER_PID=""
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

TIDEMARK_LOG=warn "$BIN" --data "$TMP/data" --listen 127.0.0.1:0 --port-file "$TMP/port" >"$TMP/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 300); do [ -s "$TMP/port" ] && break; sleep 0.1; done
ADDR=$(cat "$TMP/port"); PORT=${ADDR##*:}

# 300 lines, two fields each (600 points), and one malformed line in the middle.
{
  echo "# DML"
  echo "# CONTEXT-DATABASE: importdb"
  for i in $(seq 0 299); do
    echo "weather,station=s$((i % 10)),site=north temp=$((i % 37)).5,hum=$((i % 90))i $((1764460800 + i))000000000"
    if [ "$i" = 150 ]; then echo "weather,station=broken temp=not-a-number 1764460800000000000"; fi
  done
} >"$TMP/data.lp"

count() {
  curl -sf "http://$ADDR/importdb/_count" | python3 -c 'import json,sys; print(json.load(sys.stdin)["count"])'
}

fail() { echo "FAIL: $*" >&2; cat "$TMP/server.log" >&2; exit 1; }

influx -host 127.0.0.1 -port "$PORT" -import -path "$TMP/data.lp" -precision ns >"$TMP/first.out" 2>&1 || true
grep -E "error writing batch|Processed|Failed|ERROR" "$TMP/first.out" | cut -c1-400
grep -q "unable to parse 'weather,station=broken temp=not-a-number" "$TMP/first.out" \
  || fail "the malformed line is not reported"
[ "$(count)" = 600 ] || fail "expected 600 points after the first import, found $(count)"

influx -host 127.0.0.1 -port "$PORT" -import -path "$TMP/data.lp" -precision ns >"$TMP/second.out" 2>&1 || true
grep -E "error writing batch|Processed|Failed|ERROR" "$TMP/second.out" | cut -c1-400
grep -q "0 points stored (300 duplicates)\|points stored (600 duplicates)" "$TMP/second.out" \
  || fail "the second import's answer does not count the duplicates"
[ "$(count)" = 600 ] || fail "the second import changed the count: $(count)"

# The values are the file's: station s3's temperatures sum as the file says.
want=$(python3 -c 'print(sum((i % 37) + 0.5 for i in range(300) if i % 10 == 3))')
got=$(curl -sf -H 'content-type: application/json' "http://$ADDR/importdb/_search" -d '{"size":0,"query":{"bool":{"filter":[{"term":{"station":"s3"}},{"term":{"__name__":"weather_temp"}}]}},"aggs":{"s":{"sum":{"field":"value"}}}}' \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["aggregations"]["s"]["value"])')
[ "$got" = "$want" ] || fail "sum of s3 temperatures: want $want, got $got"
echo "OK: influx -import twice stored 600 points once, the malformed line reported"
