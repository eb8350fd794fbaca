#!/usr/bin/env python3
"""PromQL answers of tidemark-server compared with Prometheus' own, both read by promtool.

Usage: promql_reference.py TIDEMARK_SERVER_BINARY

The same generated samples (a counter with resets and a gauge, 6 series over 2 labels,
every 15 s for 1 hour) go into Prometheus 2.42 (as an OpenMetrics file turned into
TSDB blocks by `promtool tsdb create-blocks-from openmetrics`, then served by
`prometheus` on 127.0.0.1) and into tidemark-server (a mapped index through `_bulk`).
Then every query of QUERIES runs with `promtool query instant` and `promtool query
range` against both servers at the same times; the answers must hold the same series
with values within 1e-9 relative. Query times lie off the sample grid, where Prometheus
2.42's closed windows and Prometheus 3's left-open ones (which Tidemark follows) agree. Prints 'N passed, N failed' at the end; exits non-zero
on any failure. Needs `prometheus` and `promtool` (Debian package prometheus).
"""

import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

T0 = 1_764_547_200  # 2025-12-01T00:00:00Z, seconds
STEP = 15
POINTS = 241  # one hour
HOSTS = [("h1", "eu"), ("h2", "eu"), ("h3", "us"), ("h4", "us"), ("h5", "ap"), ("h6", "ap")]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from promql_queries import BASE_QUERIES, queries  # noqa: E402

# The shared table (every supported function and operator), `@` inside the hour.
QUERIES = queries(BASE_QUERIES, "1764549007")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def counter(i, j):
    """A counter rising by (j + 1) per sample, reset every 100 samples."""
    return float((i % 100) * (j + 1))


def gauge(i, j):
    return 20.0 + ((i * 7 + j * 3) % 17) / 4.0


def write_openmetrics(path):
    with open(path, "w") as f:
        for name, fn in (("requests", counter), ("temp", gauge)):
            f.write(f"# TYPE {name} gauge\n")
            for j, (host, site) in enumerate(HOSTS):
                for i in range(POINTS):
                    f.write(f'{name}{{host="{host}",site="{site}"}} {fn(i, j)} {T0 + i * STEP}\n')
        f.write("# EOF\n")


def wait_http(url, deadline_s=60):
    deadline = time.time() + deadline_s
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.2)
    sys.exit(f"{url} did not come up")


def start_prometheus(tmp):
    om = os.path.join(tmp, "data.om")
    write_openmetrics(om)
    tsdb = os.path.join(tmp, "prom")
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", om, tsdb],
                   check=True, stdout=subprocess.DEVNULL)
    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1h\n")
    port = free_port()
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tsdb}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100y"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/-/ready")
    return proc, url


def start_tidemark(server_bin, tmp):
    port_file = os.path.join(tmp, "port")
    proc = subprocess.Popen(
        [server_bin, "--data", os.path.join(tmp, "tm"), "--listen", "127.0.0.1:0", "--port-file", port_file],
        env={**os.environ, "TIDEMARK_LOG": "warn"})
    deadline = time.time() + 30
    while time.time() < deadline:
        if os.path.exists(port_file) and open(port_file).read().endswith("\n"):
            break
        time.sleep(0.05)
    else:
        proc.kill()
        sys.exit("tidemark-server did not start")
    url = "http://" + open(port_file).read().strip()

    def req(method, path, body, ctype):
        r = urllib.request.Request(url + path, data=body, method=method, headers={"content-type": ctype})
        with urllib.request.urlopen(r, timeout=60) as resp:
            return json.loads(resp.read())

    mapping = {"mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": True},
        "site": {"type": "keyword", "time_series_dimension": True},
        "requests": {"type": "double", "time_series_metric": "counter"},
        "temp": {"type": "double", "time_series_metric": "gauge"},
    }}}
    req("PUT", "/metrics", json.dumps(mapping).encode(), "application/json")
    lines = []
    for j, (host, site) in enumerate(HOSTS):
        for i in range(POINTS):
            lines.append('{"create":{}}')
            lines.append(json.dumps({"@timestamp": (T0 + i * STEP) * 1000, "host": host, "site": site,
                                     "requests": counter(i, j), "temp": gauge(i, j)}))
    resp = req("POST", "/metrics/_bulk?refresh=true", ("\n".join(lines) + "\n").encode(), "application/x-ndjson")
    if resp.get("errors"):
        sys.exit("bulk failed")
    return proc, url


def promtool(url, kind, query, t):
    if kind == "instant":
        args = ["promtool", "query", "instant", "-o", "json", f"--time={t}", url, query]
    else:
        args = ["promtool", "query", "range", "-o", "json", f"--start={t - 1800}", f"--end={t}",
                "--step=60s", url, query]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return ("error", out.stderr.strip())
    return ("ok", json.loads(out.stdout))


def normalize(answer):
    """{labels: [(t, v), ...]} or a scalar [(t, v)]."""
    status, body = answer
    if status != "ok":
        return answer
    if isinstance(body, dict):  # a scalar: {"type"?..} promtool prints [t, "v"]
        body = [body]
    if isinstance(body, list) and len(body) == 2 and not isinstance(body[0], dict):
        return {"__scalar__": [(float(body[0]), float(body[1]))]}
    out = {}
    for s in body:
        key = json.dumps(s.get("metric", {}), sort_keys=True)
        if "values" in s:
            out[key] = [(float(t), float(v)) for t, v in s["values"]]
        else:
            t, v = s["value"]
            out[key] = [(float(t), float(v))]
    return out


def close(a, b):
    if math.isnan(a) and math.isnan(b):
        return True
    if a == b:
        return True
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def same(x, y):
    if isinstance(x, tuple) or isinstance(y, tuple):
        return x == y
    if x.keys() != y.keys():
        return False
    for k in x:
        if len(x[k]) != len(y[k]):
            return False
        for (t1, v1), (t2, v2) in zip(x[k], y[k]):
            if t1 != t2 or not close(v1, v2):
                return False
    return True


def main():
    server_bin = sys.argv[1]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        prom, prom_url = start_prometheus(tmp)
        tm, tm_url = start_tidemark(server_bin, tmp)
        try:
            # 50 minutes in, off the 15 s sample grid: Prometheus 2.42's windows are
            # closed ([t - r, t]), Prometheus 3's (and Tidemark's) left-open; away from
            # sample timestamps both give the same answers.
            t = T0 + 3007
            for q in QUERIES:
                for kind in ("instant", "range"):
                    want = normalize(promtool(prom_url, kind, q, t))
                    got = normalize(promtool(tm_url, kind, q, t))
                    if same(want, got):
                        passed += 1
                    else:
                        failed += 1
                        print(f"MISMATCH {kind} {q}\n  prometheus: {str(want)[:600]}\n  tidemark:   {str(got)[:600]}")
        finally:
            prom.terminate()
            tm.terminate()
            prom.wait(timeout=30)
            tm.wait(timeout=30)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
