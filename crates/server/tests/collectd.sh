#!/usr/bin/env bash
# Graphite plaintext and OpenTSDB put with the real sender: Debian's collectd (installed
# when missing) runs in the foreground with the cpu, memory and load plugins every
# second, writing with write_graphite (one node plain, one node with Graphite 1.1 tags)
# to tidemark-server's Graphite port and with write_tsdb to its OpenTSDB port, all on
# 127.0.0.1. A third write_graphite node and a second write_tsdb node send the same
# lines to a capture socket, the record of what collectd sent.
#
# Checks, through tidemark's Prometheus API: every series collectd sent arrived by each
# protocol, with one sample a second (plausible counts for the run), and the samples per
# protocol equal the distinct (series, timestamp) lines in the capture; the captured
# lines sent again are all duplicates (nothing new stored); a second collectd run adds
# its new samples only. Loopback only, about 25 s.
# Usage: collectd.sh TIDEMARK_SERVER_BINARY [SECONDS]
set -euo pipefail
BIN=${1:?usage: collectd.sh TIDEMARK_SERVER_BINARY [SECONDS]}
SECS=${2:-12}
if ! command -v collectd >/dev/null 2>&1 && ! [ -x /usr/sbin/collectd ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  # collectd-core: the daemon and its plugins, without the service Debian's `collectd`
  # package would start.
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends collectd-core >/dev/null
fi
COLLECTD=$(command -v collectd || echo /usr/sbin/collectd)
TMP=$(mktemp -d)
SERVER_PID=""; CAPTURE_PID=""; COLLECTD_PID=""
cleanup() {
  for p in $COLLECTD_PID $CAPTURE_PID $SERVER_PID; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; tail -20 "$TMP/server.log" >&2; tail -20 "$TMP/collectd.log" >&2 || true; exit 1; }

TIDEMARK_LOG=warn "$BIN" --data "$TMP/data" --listen 127.0.0.1:0 --port-file "$TMP/port" \
  --graphite-listen 127.0.0.1:0 --opentsdb-listen 127.0.0.1:0 >"$TMP/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 300); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || fail "the server did not start"
HTTP=$(cat "$TMP/port"); GRAPHITE=$(cat "$TMP/port.graphite"); TSDB=$(cat "$TMP/port.opentsdb")

cat >"$TMP/check.py" <<'EOF'
"""collectd.sh's helper: `capture` records what collectd sends to two ports; `check`
compares tidemark with the capture; `replay` sends the capture again."""
import json, os, socket, sys, threading, time, urllib.parse, urllib.request

TMP = os.environ["TMP"]
HTTP = os.environ["HTTP"]

def capture():
    # One port per protocol; every connection's bytes appended to its file.
    for proto in ("graphite", "tsdb"):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        with open(f"{TMP}/capture.{proto}.port", "w") as f:
            f.write(str(s.getsockname()[1]))
        threading.Thread(target=accept, args=(s, f"{TMP}/capture.{proto}"), daemon=True).start()
    while True:
        time.sleep(3600)

def accept(s, path):
    while True:
        c, _ = s.accept()
        threading.Thread(target=drain, args=(c, path), daemon=True).start()

def drain(c, path):
    with open(path, "ab") as f:
        while True:
            d = c.recv(65536)
            if not d:
                return
            f.write(d)
            f.flush()

def captured(proto):
    """Distinct (series, timestamp) pairs, and samples per series, of the capture."""
    pairs = set()
    try:
        text = open(f"{TMP}/capture.{proto}", "rb").read().decode()
    except FileNotFoundError:
        text = ""
    for line in text.splitlines():
        w = line.split()
        if proto == "graphite" and len(w) == 3:
            pairs.add((w[0], w[2]))
        elif proto == "tsdb" and len(w) >= 5 and w[0] == "put":
            pairs.add((w[1] + " " + " ".join(sorted(w[4:])), w[2]))
    per_series = {}
    for series, _ in pairs:
        per_series[series] = per_series.get(series, 0) + 1
    return pairs, per_series

def query(q):
    url = f"http://{HTTP}/api/v1/query?" + urllib.parse.urlencode({"query": q, "time": time.time()})
    v = json.load(urllib.request.urlopen(url))
    assert v["status"] == "success", v
    return v["data"]["result"]

def counts(selector):
    """Samples per series of the selector over the last 10 minutes: the raw samples of
    a range selector (count_over_time would drop the names, and series that differ only
    by name would clash)."""
    return {json.dumps(r["metric"], sort_keys=True): len(r["values"])
            for r in query(f"{selector}[10m]")}

def counters():
    text = urllib.request.urlopen(f"http://{HTTP}/metrics").read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("tidemark_tcp_"):
            k, v = line.rsplit(" ", 1)
            out[k] = int(float(v))
    return out

# What each protocol's lines became in tidemark: (selector, capture file, series prefix
# in the capture).
SETS = [
    ("graphite plain", '{__name__=~"collectd_.+"}', "graphite", "collectd."),
    ("graphite tagged", '{__name__=~"tagged_.+",host="tidemark-ci"}', "graphite", "tagged."),
    ("opentsdb", '{source="collectd",fqdn="tidemark-ci"}', "tsdb", ""),
]

def check(secs):
    secs = int(secs)
    deadline = time.time() + 20
    while True:
        problems, report = [], []
        for name, selector, proto, prefix in SETS:
            pairs, per_series = captured(proto)
            want_series = {k: n for k, n in per_series.items() if k.startswith(prefix)}
            want = sum(want_series.values())
            got_series = counts(selector)
            got = sum(got_series.values())
            report.append(f"{name}: {len(got_series)} series, {got} samples (capture: {len(want_series)} series, {want} lines)")
            if got != want or len(got_series) != len(want_series):
                problems.append(name)
                continue
            # One sample a second: no series has more than the run allows.
            low, high = min(got_series.values()), max(got_series.values())
            if high > secs + 2 or low < 1:
                problems.append(f"{name}: samples per series from {low} to {high} for a {secs} s run")
            loads = [n for k, n in got_series.items() if "load" in k and "shortterm" in k]
            if not loads or loads[0] < secs - 5:
                problems.append(f"{name}: load shortterm has {loads} samples for a {secs} s run")
        if not problems:
            print("\n".join(report))
            return
        if time.time() > deadline:
            print("\n".join(report), file=sys.stderr)
            sys.exit(f"mismatch: {problems}")
        time.sleep(0.5)

def replay():
    before = counters()
    lines = {}
    for proto, port_file in (("graphite", "port.graphite"), ("tsdb", "port.opentsdb")):
        data = open(f"{TMP}/capture.{proto}", "rb").read()
        lines[proto] = sum(1 for l in data.splitlines() if l.strip())
        host, port = open(f"{TMP}/{port_file}").read().strip().rsplit(":", 1)
        with socket.create_connection((host, int(port))) as c:
            c.sendall(data)
            c.shutdown(socket.SHUT_WR)
            while c.recv(65536):
                pass
    deadline = time.time() + 20
    key = lambda p, r: f'tidemark_tcp_samples_total{{protocol="{p}",result="{r}"}}'
    while True:
        after = counters()
        created = {p: after[key(p, "created")] - before[key(p, "created")] for p in ("graphite", "opentsdb")}
        dups = {p: after[key(p, "duplicate")] - before[key(p, "duplicate")] for p in ("graphite", "opentsdb")}
        if dups["graphite"] >= lines["graphite"] and dups["opentsdb"] >= lines["tsdb"]:
            break
        if time.time() > deadline:
            sys.exit(f"replay: duplicates {dups}, created {created}, of {lines} lines")
        time.sleep(0.2)
    if any(created.values()):
        sys.exit(f"replay stored new samples: {created}")
    print(f"replayed {lines['graphite']} graphite and {lines['tsdb']} opentsdb lines: all duplicates, nothing new")

{"capture": capture, "check": check, "replay": replay}[sys.argv[1]](*sys.argv[2:])
EOF
export TMP HTTP
python3 "$TMP/check.py" capture &
CAPTURE_PID=$!
for _ in $(seq 1 100); do [ -s "$TMP/capture.tsdb.port" ] && break; sleep 0.1; done
CG=$(cat "$TMP/capture.graphite.port"); CT=$(cat "$TMP/capture.tsdb.port")

cat >"$TMP/collectd.conf" <<EOF
Hostname "tidemark-ci"
FQDNLookup false
Interval 1
BaseDir "$TMP"
PIDFile "$TMP/collectd.pid"
PluginDir "/usr/lib/collectd"
TypesDB "/usr/share/collectd/types.db"
LoadPlugin logfile
<Plugin logfile>
  LogLevel info
  File STDOUT
</Plugin>
LoadPlugin cpu
LoadPlugin memory
LoadPlugin load
LoadPlugin write_graphite
LoadPlugin write_tsdb
<Plugin write_graphite>
  <Node "tidemark">
    Host "127.0.0.1"
    Port "${GRAPHITE##*:}"
    Prefix "collectd."
  </Node>
  <Node "tidemark-tagged">
    Host "127.0.0.1"
    Port "${GRAPHITE##*:}"
    Prefix "tagged."
    UseTags true
  </Node>
  <Node "capture">
    Host "127.0.0.1"
    Port "$CG"
    Prefix "collectd."
  </Node>
  <Node "capture-tagged">
    Host "127.0.0.1"
    Port "$CG"
    Prefix "tagged."
    UseTags true
  </Node>
</Plugin>
<Plugin write_tsdb>
  <Node "tidemark">
    Host "127.0.0.1"
    Port "${TSDB##*:}"
    HostTags "source=collectd"
  </Node>
  <Node "capture">
    Host "127.0.0.1"
    Port "$CT"
    HostTags "source=collectd"
  </Node>
</Plugin>
EOF

run_collectd() {
  "$COLLECTD" -f -C "$TMP/collectd.conf" >>"$TMP/collectd.log" 2>&1 &
  COLLECTD_PID=$!
  sleep "$1"
  kill -TERM "$COLLECTD_PID"
  wait "$COLLECTD_PID" || true
  COLLECTD_PID=""
}

run_collectd "$SECS"
python3 "$TMP/check.py" check "$SECS" || fail "after the first run"
python3 "$TMP/check.py" replay || fail "the captured lines sent again"
python3 "$TMP/check.py" check "$SECS" || fail "after the replay"
# collectd restarted: its new samples only.
run_collectd 4
python3 "$TMP/check.py" check "$((SECS + 4))" || fail "after collectd's restart"
grep -iE "error|fail" "$TMP/collectd.log" | head -5 || true
curl -sf "http://$HTTP/metrics" | grep '^tidemark_tcp_\(lines\|samples\)_total' | grep -v ' 0$'
echo "OK: collectd's write_graphite (plain and tagged) and write_tsdb stored every sample once, a replay and a restart added no duplicate"
