#!/usr/bin/env bash
# tidemark-server driven with curl, as the shippers' setup steps and a shell user do:
# the Metricbeat flow (GET /, GET /_license, PUT /_index_template, POST /_bulk with
# filter_path to metrics-foo-default), the same bulk again (409s), gzip bodies,
# malformed lines, an oversized body (413), a spent body budget (429), wrong credentials
# (401) and another tenant's index (403). Servers listen on 127.0.0.1 only.
# Usage: curl.sh TIDEMARK_SERVER_BINARY
set -euo pipefail
bin=$1
root=$(cd "$(dirname "$0")/../../.." && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
passed=0
ok() { passed=$((passed + 1)); }
fail() { echo "FAILED: $*" >&2; exit 1; }

start() { # name, extra args...
  local name=$1; shift
  TIDEMARK_LOG=warn "$bin" --data "$tmp/$name" --listen 127.0.0.1:0 --port-file "$tmp/$name.port" "$@" \
    >"$tmp/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 300); do [ -s "$tmp/$name.port" ] && break; sleep 0.05; done
  addr=$(cat "$tmp/$name.port")
}

start main --max-content-length 200000
u="http://$addr"
# Handshake and the product header.
curl -sfi "$u/" | grep -qi '^x-elastic-product: Elasticsearch' && ok || fail "product header"
curl -sf "$u/_license" | grep -q '"status":"active"' && ok || fail "license"
curl -sf "$u/-/healthy" | grep -q "Tidemark is Healthy" && ok || fail "healthy probe"
# grep reads to the end: `grep -q` stops at the first match and curl, still writing the
# rest of the 8 KB exposition, fails with EPIPE (exit 23), which pipefail reports.
curl -sf "$u/metrics" | grep "^tidemark_build_info" >/dev/null && ok || fail "/metrics exposition"
# An unknown Prometheus API path: a 404 in the Prometheus error shape.
[ "$(curl -s -o /tmp/curl-prom404.$$ -w '%{http_code}' "$u/api/v1/targets")" = 404 ] \
  && grep -q '"errorType":"not_found"' /tmp/curl-prom404.$$ && ok || fail "Prometheus-shaped 404"
rm -f /tmp/curl-prom404.$$
curl -sf "$u/api/v1/status/buildinfo" | grep -q '"version":"3.0.0"' && ok || fail "buildinfo version"
# Template, then the first write creates the data stream.
tmpl=$(python3 -c "import json;m=json.load(open('$root/fixtures/tidemark/k8s.mapping.json'));print(json.dumps({'index_patterns':['metrics-*-*'],'data_stream':{},'priority':200,'template':m}))")
curl -sf -XPUT "$u/_index_template/metrics-foo" -H 'content-type: application/json' -d "$tmpl" | grep -q '"acknowledged":true' && ok || fail "template"
bulk="$tmp/bulk.ndjson"
python3 - "$bulk" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(300):
        f.write(json.dumps({"create": {"_index": "metrics-foo-default"}}) + "\n")
        f.write(json.dumps({"@timestamp": 1764460800000 + i * 1000, "k8s": {"cluster": {"name": "c"}, "namespace": {"name": "n"},
                            "pod": {"name": f"p{i % 3}", "ip": "10.0.0.1", "cpu": {"utilization": 0.5}}}}) + "\n")
PY
fp='filter_path=errors,items.*.error,items.*.status'
r=$(curl -sf -XPOST "$u/_bulk?$fp" -H 'content-type: application/x-ndjson' --data-binary @"$bulk")
echo "$r" | grep -q '^{"errors":false' && ok || fail "first bulk: $r"
[ "$(echo "$r" | grep -o '"status":201' | wc -l)" -eq 300 ] && ok || fail "300 created"
r=$(curl -sf -XPOST "$u/_bulk?$fp" -H 'content-type: application/x-ndjson' --data-binary @"$bulk")
[ "$(echo "$r" | grep -o '"status":409' | wc -l)" -eq 300 ] && ok || fail "300 conflicts: $r"
echo "$r" | grep -q 'version_conflict_engine_exception' && ok || fail "conflict type"
# gzip: the same documents once more, compressed: still 409s.
gzip -c "$bulk" > "$bulk.gz"
r=$(curl -sf -XPOST "$u/_bulk?$fp" -H 'content-type: application/x-ndjson' -H 'content-encoding: gzip' --data-binary @"$bulk.gz")
[ "$(echo "$r" | grep -o '"status":409' | wc -l)" -eq 300 ] && ok || fail "gzip bulk"
# Two gzip members (as `cat a.gz b.gz` makes): every item of both is answered.
cat "$bulk.gz" "$bulk.gz" > "$bulk.2.gz"
r=$(curl -sf -XPOST "$u/_bulk?$fp" -H 'content-type: application/x-ndjson' -H 'content-encoding: gzip' --data-binary @"$bulk.2.gz")
[ "$(echo "$r" | grep -o '"status":409' | wc -l)" -eq 600 ] && ok || fail "two-member gzip bulk"
# A truncated gzip body: 400 naming it, nothing applied.
head -c 200 "$bulk.gz" > "$bulk.cut.gz"
r=$(curl -s -w ' %{http_code}' -XPOST "$u/_bulk" -H 'content-type: application/x-ndjson' -H 'content-encoding: gzip' --data-binary @"$bulk.cut.gz")
case "$r" in *"malformed gzip body"*" 400") ok ;; *) fail "truncated gzip: $r" ;; esac
curl -sf "$u/metrics-foo-default/_count" | grep -q '"count":300' && ok || fail "count 300"
# Malformed lines fail alone.
printf '{"create":{}}\n{broken\n{"create":{}}\n{"@timestamp":1764460900000,"k8s":{"cluster":{"name":"c"},"namespace":{"name":"n"},"pod":{"name":"z","ip":"10.0.0.9"}}}\n' > "$tmp/bad.ndjson"
r=$(curl -sf -XPOST "$u/metrics-foo-default/_bulk?filter_path=items.*.status" -H 'content-type: application/x-ndjson' --data-binary @"$tmp/bad.ndjson")
[ "$r" = '{"items":[{"create":{"status":400}},{"create":{"status":201}}]}' ] && ok || fail "malformed: $r"
# 413: a body over the limit.
python3 -c "import sys; sys.stdout.write('{\"create\":{}}\n' + '{\"a\":\"' + 'x' * 300000 + '\"}\n')" > "$tmp/big.ndjson"
code=$(curl -s -o /dev/null -w '%{http_code}' -XPOST "$u/metrics-foo-default/_bulk" -H 'content-type: application/x-ndjson' --data-binary @"$tmp/big.ndjson")
[ "$code" = 413 ] && ok || fail "413: $code"

# 429: a client that stalls after its headers and part of its body holds no write slot
# (the one slot still serves a fast client), but the bytes it sent count against the
# budget of bodies being received: with that budget spent, the next body is 429.
start queue --write-queue 1 --max-content-length 4000 --body-bytes-in-flight 4000
b=$addr
curl -sf -XPUT "http://$b/k8s" -H 'content-type: application/json' --data-binary @"$root/fixtures/tidemark/k8s.mapping.json" >/dev/null
python3 -c "
import socket, time
h, p = '$b'.rsplit(':', 1)
s = socket.create_connection((h, int(p)))
s.sendall(b'POST /k8s/_bulk HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: 3999\r\n\r\n' + b' ' * 3000)
time.sleep(20)
" &
stall=$!
got=""
for _ in $(seq 300); do
  got=$(curl -s -w ' %{http_code}' -XPOST "http://$b/k8s/_bulk" -H 'content-type: application/x-ndjson' --data-binary @"$root/fixtures/tidemark/k8s.bulk")
  case "$got" in *" 429") break ;; esac
  sleep 0.05
done
case "$got" in *body_bytes_in_flight*" 429") ok ;; *) fail "429: $got" ;; esac
# A small body still fits beside the stalled one, through the one write slot.
code=$(printf '{"create":{}}\n{"@timestamp":1764460900000,"k8s":{"cluster":{"name":"c"},"namespace":{"name":"n"},"pod":{"name":"q","ip":"10.0.0.9"}}}\n' \
  | curl -s -o /dev/null -w '%{http_code}' -XPOST "http://$b/k8s/_bulk" -H 'content-type: application/x-ndjson' --data-binary @-)
[ "$code" = 200 ] && ok || fail "small body beside a stalled one: $code"
kill "$stall" 2>/dev/null || true

# 401 and 403 with a config file.
cat > "$tmp/sec.toml" <<'TOML'
[[users]]
name = "alice"
password = "pw-a"
indices = ["a-*"]
[[api_keys]]
id = "kb"
key = "sec-b"
indices = ["b-*"]
TOML
start sec --config "$tmp/sec.toml"
c=$addr
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$c/")
[ "$code" = 401 ] && ok || fail "401 without credentials: $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -u alice:wrong "http://$c/")
[ "$code" = 401 ] && ok || fail "401 wrong password: $code"
key=$(printf 'kb:sec-b' | base64)
curl -sf -XPUT "http://$c/b-1" -H "Authorization: ApiKey $key" -H 'content-type: application/json' --data-binary @"$root/fixtures/tidemark/k8s.mapping.json" >/dev/null && ok || fail "api key create"
r=$(curl -s -w ' %{http_code}' -u alice:pw-a "http://$c/b-1/_search")
case "$r" in *security_exception*" 403") ok ;; *) fail "403: $r" ;; esac
r=$(curl -s -w ' %{http_code}' -H "Authorization: ApiKey $key" "http://$c/b-1/_count")
case "$r" in *'"count":0'*" 200") ok ;; *) fail "api key read: $r" ;; esac
echo "curl: $passed passed, 0 failed"
