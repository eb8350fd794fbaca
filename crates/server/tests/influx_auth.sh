#!/usr/bin/env bash
# Influx credentials with the real client: Debian's `influx` CLI (influxdb-client) imports
# a line-protocol file into a tidemark-server that has a user configured. Without
# credentials and with a wrong password the import is refused (401) and nothing is stored;
# with `-username/-password` every line is stored, once. Loopback only, a few seconds.
# Usage: influx_auth.sh TIDEMARK_SERVER_BINARY
set -euo pipefail
BIN=${1:?usage: influx_auth.sh TIDEMARK_SERVER_BINARY}
command -v influx >/dev/null || { echo "influx (influxdb-client) is not installed" >&2; exit 1; }
TMP=$(mktemp -d)
SERVER_PID=""
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

cat >"$TMP/server.toml" <<'TOML'
[[users]]
name = "writer"
password = "s3cret pw"
indices = ["authdb*"]
TOML
TIDEMARK_LOG=warn "$BIN" --data "$TMP/data" --listen 127.0.0.1:0 --port-file "$TMP/port" \
  --config "$TMP/server.toml" >"$TMP/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 300); do [ -s "$TMP/port" ] && break; sleep 0.1; done
ADDR=$(cat "$TMP/port"); PORT=${ADDR##*:}

{
  echo "# DML"
  echo "# CONTEXT-DATABASE: authdb"
  for i in $(seq 0 99); do
    echo "power,meter=m$((i % 4)) watts=$((i * 3)).25 $((1764460800 + i))000000000"
  done
} >"$TMP/data.lp"

fail() { echo "FAIL: $*" >&2; cat "$TMP/server.log" >&2; exit 1; }
count() {
  curl -s -u 'writer:s3cret pw' "http://$ADDR/authdb/_count" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin).get("count", 0))'
}

influx -host 127.0.0.1 -port "$PORT" -import -path "$TMP/data.lp" -precision ns >"$TMP/none.out" 2>&1 || true
grep -E "error|ERROR|Failed|Processed" "$TMP/none.out" | cut -c1-300 | head -3
grep -qi "unable to authenticate\|401\|unauthorized" "$TMP/none.out" || fail "an import without credentials was not refused"
[ "$(count)" = 0 ] || fail "an unauthenticated import stored $(count) points"

influx -host 127.0.0.1 -port "$PORT" -username writer -password wrong -import -path "$TMP/data.lp" -precision ns >"$TMP/wrong.out" 2>&1 || true
grep -qi "unable to authenticate\|401\|unauthorized" "$TMP/wrong.out" || fail "a wrong password was not refused"
[ "$(count)" = 0 ] || fail "a wrong password stored $(count) points"

influx -host 127.0.0.1 -port "$PORT" -username writer -password 's3cret pw' -import -path "$TMP/data.lp" -precision ns >"$TMP/ok.out" 2>&1 || true
grep -E "Processed|Failed" "$TMP/ok.out" | cut -c1-300
grep -q "Processed 100 inserts" "$TMP/ok.out" && grep -q "Failed 0 inserts" "$TMP/ok.out" || fail "the authenticated import did not report 100 lines"
[ "$(count)" = 100 ] || fail "expected 100 points after the authenticated import, found $(count)"
echo "OK: influx -import refused without credentials and with a wrong password, stored 100 points with -username/-password"
