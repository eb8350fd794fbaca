#!/usr/bin/env python3
"""Migrations between VictoriaMetrics and Tidemark, both ways, with the real VictoriaMetrics
(Debian's `victoria-metrics`; installed with apt-get when missing).

1. A generated dataset (counters and gauges) is loaded into VictoriaMetrics A through its
   /api/v1/import.
2. A's /api/v1/export (gzip, as VictoriaMetrics sends it) is streamed into tidemark-server's
   /api/v1/import with a chunked, gzip request body (curl -T -), then once more: every
   sample of the second import is a duplicate.
3. tidemark-server's /api/v1/export is streamed into a fresh VictoriaMetrics B.
4. One metric goes through CSV too: A's /api/v1/export/csv into Tidemark's
   /api/v1/import/csv (into another index).
Each side's export must give the dataset's series with equal sample counts and sums.
Loopback only; about 10 s.

Usage: victoria_metrics.py TIDEMARK_SERVER_BINARY
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

T0 = (int(time.time()) // 3600 - 3) * 3600 * 1000  # three hours ago, on the hour
SERIES = 2000
SAMPLES = 120


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def ensure_victoria_metrics():
    if shutil.which("victoria-metrics"):
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "victoria-metrics"], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, deadline=30):
    end = time.time() + deadline
    while time.time() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status < 500:
                    return
        except Exception:
            time.sleep(0.1)
    fail(f"{url} did not answer")


def start_vm(tmp, name):
    port = free_port()
    log = open(os.path.join(tmp, f"{name}.log"), "w")
    proc = subprocess.Popen(
        ["victoria-metrics", f"-storageDataPath={tmp}/{name}", f"-httpListenAddr=127.0.0.1:{port}",
         "-retentionPeriod=100y", "-loggerLevel=ERROR"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health")
    return proc, url


def start_tidemark(binary, tmp):
    port_file = os.path.join(tmp, "tm.port")
    log = open(os.path.join(tmp, "tm.log"), "w")
    proc = subprocess.Popen([binary, "--data", f"{tmp}/tm", "--listen", "127.0.0.1:0", "--port-file", port_file],
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, TIDEMARK_LOG="warn"))
    for _ in range(300):
        if os.path.exists(port_file) and open(port_file).read().endswith("\n"):
            break
        time.sleep(0.1)
    else:
        fail("tidemark-server did not start")
    return proc, "http://" + open(port_file).read().strip()


def dataset():
    """{labels tuple: [(ts, value)]}: counters and gauges whose values are exact binary
    fractions, so that sums compare exactly."""
    out = {}
    for i in range(SERIES):
        counter = i % 2 == 0
        labels = (("__name__", "mig_requests_total" if counter else "mig_temperature"),
                  ("instance", f"host-{i}:9100"), ("job", f"job-{i % 5}"))
        v, samples = float(i * 100), []
        for k in range(SAMPLES):
            v = v + (k % 13) + 0.25 if counter else 20 + ((i + k) % 100) / 8 - 3.5
            samples.append((T0 + k * 15_000, v))
        out[labels] = samples
    return out


def json_lines(data, per_line):
    lines = []
    for labels, samples in data.items():
        for s in range(0, len(samples), per_line):
            chunk = samples[s:s + per_line]
            lines.append(json.dumps({"metric": dict(labels), "values": [v for _, v in chunk],
                                     "timestamps": [t for t, _ in chunk]}))
    return ("\n".join(lines) + "\n").encode()


def parse_export(text):
    """An export's lines gathered by series: {labels tuple: {ts: value}}."""
    out = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            fail(f"export line is not JSON ({e}): {line[:200]}")
        labels = tuple(sorted(obj["metric"].items()))
        if len(obj["values"]) != len(obj["timestamps"]):
            fail(f"values and timestamps differ in length: {line[:200]}")
        series = out.setdefault(labels, {})
        for t, v in zip(obj["timestamps"], obj["values"]):
            if t in series:
                fail(f"timestamp {t} twice in {labels}")
            series[t] = float(v)
    return out


def summary(data):
    """{labels: (count, exact sum)}"""
    return {tuple(sorted(l)): (len(s), math.fsum(v for _, v in (s.items() if isinstance(s, dict) else s)))
            for l, s in data.items()}


def compare(what, got, want):
    g, w = summary(got), summary(want)
    if set(g) != set(w):
        missing, extra = set(w) - set(g), set(g) - set(w)
        fail(f"{what}: {len(missing)} series missing (e.g. {sorted(missing)[:2]}), {len(extra)} extra (e.g. {sorted(extra)[:2]})")
    bad = [(l, g[l], w[l]) for l in w if g[l] != w[l]]
    if bad:
        fail(f"{what}: {len(bad)} series differ (count, sum) got vs want, e.g. {bad[:3]}")
    print(f"  {what}: {len(g)} series, {sum(c for c, _ in g.values())} samples, counts and sums equal")


def http(method, url, body=None, headers=None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def pipe(src_url, dst_url, src_headers=(), dst_headers=()):
    """Streams src's answer into a POST to dst (curl -T -: a chunked request body);
    returns dst's status line, headers and body."""
    get = ["curl", "-sS", "--fail", src_url] + [a for h in src_headers for a in ("-H", h)]
    post = ["curl", "-sS", "-D", "-", "-X", "POST", "-T", "-", dst_url] + [a for h in dst_headers for a in ("-H", h)]
    src = subprocess.Popen(get, stdout=subprocess.PIPE)
    dst = subprocess.run(post, stdin=src.stdout, capture_output=True, timeout=60)
    src.stdout.close()
    if src.wait(timeout=60) != 0:
        fail(f"GET {src_url} failed")
    out = dst.stdout.decode(errors="replace")
    # curl -D - prints each interim answer ("100 Continue") before the final one.
    while out.startswith("HTTP/1.1 100"):
        out = out.split("\r\n\r\n", 1)[-1]
    return out


def vm_export(url):
    http("GET", url + "/internal/force_flush")
    st, _, body = http("GET", url + "/api/v1/export?match[]=%7B__name__!%3D%22%22%7D&start=0")
    if st != 200:
        fail(f"VictoriaMetrics export: {st} {body[:300]}")
    return body.decode()


def main():
    if len(sys.argv) != 2:
        fail(__doc__)
    binary = sys.argv[1]
    ensure_victoria_metrics()
    if not shutil.which("curl"):
        fail("curl is not installed")
    tmp = tempfile.mkdtemp()
    procs = []
    try:
        start = time.time()
        vm_a, a = start_vm(tmp, "vm-a")
        procs.append(vm_a)
        tm_proc, tm = start_tidemark(binary, tmp)
        procs.append(tm_proc)
        data = dataset()
        total = SERIES * SAMPLES

        st, _, body = http("POST", a + "/api/v1/import", json_lines(data, 50))
        if st not in (200, 204):
            fail(f"VictoriaMetrics import: {st} {body[:300]}")
        compare("VictoriaMetrics A after its import", parse_export(vm_export(a)), data)

        # VictoriaMetrics -> Tidemark, gzip both ways as a migration would send it.
        export_all = a + "/api/v1/export?match[]=%7B__name__!%3D%22%22%7D&start=0"
        for round_ in (1, 2):
            out = pipe(export_all, tm + "/api/v1/import?index=migrated",
                       src_headers=["Accept-Encoding: gzip"], dst_headers=["Content-Encoding: gzip"])
            status = out.split("\r\n", 1)[0]
            if " 204" not in status:
                fail(f"Tidemark import round {round_}: {out[:500]}")
            hdr = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in out.split("\r\n")[1:] if ":" in l}
            created = int(hdr.get("x-tidemark-samples-created", -1))
            dup = int(hdr.get("x-tidemark-samples-duplicate", -1))
            want = (total, 0) if round_ == 1 else (0, total)
            if (created, dup) != want:
                fail(f"Tidemark import round {round_}: created {created}, duplicates {dup}, want {want}")
            print(f"  VictoriaMetrics A -> Tidemark, round {round_}: {created} created, {dup} duplicates")
        st, _, body = http("GET", tm + "/api/v1/export?match[]=%7B__name__!%3D%22%22%7D&index=migrated")
        if st != 200:
            fail(f"Tidemark export: {st} {body[:300]}")
        compare("Tidemark after importing A's export", parse_export(body.decode()), data)

        # Tidemark -> a fresh VictoriaMetrics.
        vm_b, b = start_vm(tmp, "vm-b")
        procs.append(vm_b)
        out = pipe(tm + "/api/v1/export?match[]=%7B__name__!%3D%22%22%7D&index=migrated&max_rows_per_line=1000",
                   b + "/api/v1/import")
        if " 204" not in out.split("\r\n", 1)[0]:
            fail(f"VictoriaMetrics B import: {out[:500]}")
        compare("VictoriaMetrics B after importing Tidemark's export", parse_export(vm_export(b)), data)

        # One metric through CSV: A's /api/v1/export/csv into Tidemark's /api/v1/import/csv.
        csv_in = "format=1:time:unix_ms,2:metric:mig_temperature,3:label:job,4:label:instance"
        out = pipe(a + "/api/v1/export/csv?format=__timestamp__:unix_ms,__value__,job,instance"
                   "&match[]=mig_temperature&start=0",
                   tm + "/api/v1/import/csv?index=migrated-csv&" + csv_in)
        if " 204" not in out.split("\r\n", 1)[0]:
            fail(f"Tidemark CSV import: {out[:500]}")
        st, _, body = http("GET", tm + "/api/v1/export?match[]=mig_temperature&index=migrated-csv")
        want = {l: s for l, s in data.items() if dict(l)["__name__"] == "mig_temperature"}
        compare("Tidemark after importing A's CSV export", parse_export(body.decode()), want)

        print(f"OK: VictoriaMetrics -> Tidemark -> VictoriaMetrics, {SERIES} series x {SAMPLES} samples, "
              f"counts and sums equal both ways ({time.time() - start:.1f} s)")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
