#!/usr/bin/env python3
"""Prometheus (Debian's 2.42) scraping itself every second and remote-writing to
tidemark-server, which is SIGKILLed and restarted once in the middle (Prometheus
retries). Afterwards every sample in Prometheus' own TSDB for the range is in Tidemark
exactly once, with the same value (NaN compared as NaN).

Prometheus' raw samples are read with an instant query of a range selector
(`{__name__=~".+"}[90s]`): `/api/v1/query_range` evaluates at steps with a lookback, so
it repeats and skips samples and cannot prove "exactly once". Tidemark's are read with
`_search` over the Elasticsearch API.

Usage: prometheus_rw.py TIDEMARK_SERVER_BINARY [SECONDS]  (loopback only, bounded time)
"""

import datetime
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url, body=None, timeout=30):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    if data:
        req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_http(url, deadline_s=30):
    end = time.time() + deadline_s
    while time.time() < end:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except Exception:
            time.sleep(0.1)
    raise SystemExit(f"FAIL: {url} did not come up")


def start_tidemark(binary, data, port, log):
    return subprocess.Popen(
        [binary, "--data", data, "--listen", f"127.0.0.1:{port}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "TIDEMARK_LOG": "warn"},
    )


def ms_of(text):
    dt = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return round(dt.timestamp() * 1000)


def main():
    binary = sys.argv[1]
    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    tmp = tempfile.mkdtemp(prefix="tidemark-prom-")
    tport, pport = free_port(), free_port()
    tlog = open(os.path.join(tmp, "tidemark.log"), "w")
    plog = open(os.path.join(tmp, "prometheus.log"), "w")
    data = os.path.join(tmp, "data")
    config = os.path.join(tmp, "prometheus.yml")
    with open(config, "w") as f:
        f.write(
            f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ["127.0.0.1:{pport}"]
remote_write:
  - url: http://127.0.0.1:{tport}/api/v1/write
    remote_timeout: 5s
    queue_config:
      batch_send_deadline: 1s
      min_backoff: 100ms
      max_backoff: 1s
"""
        )
    tidemark = start_tidemark(binary, data, tport, tlog)
    wait_http(f"http://127.0.0.1:{tport}/")
    prom = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
            f"--web.listen-address=127.0.0.1:{pport}",
        ],
        stdout=plog,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_http(f"http://127.0.0.1:{pport}/-/ready")
        started = time.time()
        time.sleep(seconds / 2)
        tidemark.send_signal(signal.SIGKILL)
        tidemark.wait()
        print(f"tidemark-server SIGKILLed after {time.time() - started:.1f} s")
        time.sleep(3)
        tidemark = start_tidemark(binary, data, tport, tlog)
        wait_http(f"http://127.0.0.1:{tport}/")
        print("tidemark-server restarted")
        time.sleep(max(0, seconds - (time.time() - started)))
        end_ms = int(time.time() * 1000) - 3000

        # Prometheus' raw samples up to end_ms.
        window = seconds + 60
        q = urllib.parse.urlencode(
            {"query": '{__name__=~".+"}[%ds]' % window, "time": f"{end_ms / 1000:.3f}"}
        )
        res = get_json(f"http://127.0.0.1:{pport}/api/v1/query?{q}")
        assert res["status"] == "success", res
        prom_samples = {}
        for series in res["data"]["result"]:
            key = tuple(sorted(series["metric"].items()))
            for ts, value in series["values"]:
                prom_samples[(key, round(float(ts) * 1000))] = value
        lo = min(ts for _, ts in prom_samples)
        print(f"prometheus: {len(prom_samples)} samples in {len(res['data']['result'])} series")

        # Tidemark's, once remote write has caught up (bounded wait).
        # Paged by 5-second slices of @timestamp: a search page holds at most 10,000 hits
        # (index.max_result_window), and a cut answer would be an error, not a short one.
        def tidemark_hits():
            out, t = [], lo
            while t <= end_ms:
                body = {
                    "size": 10_000,
                    "query": {"range": {"@timestamp": {"gte": t, "lt": min(t + 5000, end_ms + 1)}}},
                }
                page = get_json(f"http://127.0.0.1:{tport}/metrics/_search", body, timeout=120)
                page = page["hits"]["hits"]
                assert len(page) < 10_000, "a 5 s slice filled the result window"
                out.extend(page)
                t += 5000
            return out

        deadline = time.time() + 60
        while True:
            hits = tidemark_hits()
            if len(hits) >= len(prom_samples) or time.time() > deadline:
                break
            time.sleep(1)
        tidemark_samples = {}
        stale = 0
        for h in hits:
            src = h["_source"]
            ts = ms_of(src["@timestamp"])
            labels = tuple(
                sorted(
                    (k, v)
                    for k, v in src.items()
                    if k not in ("@timestamp", "value", "_id", "_tsid")
                )
            )
            key = (labels, ts)
            if key in tidemark_samples:
                raise SystemExit(f"FAIL: {key} stored twice")
            tidemark_samples[key] = src.get("value")
        missing = [k for k in prom_samples if k not in tidemark_samples]
        wrong = []
        for k, v in prom_samples.items():
            if k not in tidemark_samples:
                continue
            t = tidemark_samples[k]
            pv = float(v)
            if math.isnan(pv):
                if t is not None:
                    wrong.append((k, v, t))
            elif t is None or float(t) != pv:
                wrong.append((k, v, t))
        extra = [k for k in tidemark_samples if k not in prom_samples]
        for k in extra:
            # Stale markers (NaN, null in JSON) are sent by remote write but hidden from
            # Prometheus' query results; anything else extra is a failure.
            if tidemark_samples[k] is None:
                stale += 1
        stats = get_json(f"http://127.0.0.1:{tport}/metrics/_stats")
        print(
            f"tidemark: {len(tidemark_samples)} samples ({stale} stale markers); "
            f"missing {len(missing)}, wrong {len(wrong)}, extra non-stale {len(extra) - stale}"
        )
        print("tidemark _stats:", json.dumps(stats.get("_all", stats))[:400])
        if missing or wrong or len(extra) != stale:
            print("missing:", missing[:5], "wrong:", wrong[:5], "extra:", extra[:5])
            raise SystemExit("FAIL: Tidemark differs from Prometheus' TSDB")
        if len(prom_samples) < seconds * 100:
            raise SystemExit(f"FAIL: too few samples scraped ({len(prom_samples)})")
        print("OK: every Prometheus sample is in Tidemark exactly once, across a SIGKILL")
    finally:
        prom.terminate()
        try:
            prom.wait(timeout=20)
        except subprocess.TimeoutExpired:
            prom.kill()
        tidemark.terminate()
        try:
            tidemark.wait(timeout=30)
        except subprocess.TimeoutExpired:
            tidemark.kill()


if __name__ == "__main__":
    main()
