#!/usr/bin/env python3
"""The web UI in a real browser: headless Chromium (Debian's `chromium`, installed when
missing) loads the page of a tidemark-server holding three series written twice with
curl (line protocol), with a PromQL query in the address, and the DOM it built is
checked: one chart line per series, the legend's labels as text (a label value holding
markup is shown, not parsed), the index listed with its documents, series and
duplicates, the `_search` answer shown, the storage breakdown filled, no error shown. A broken query shows the API's
error message; with a user configured, credentials given in the address reach every API
call the page makes. A screenshot (1280x900) is written to SCREENSHOT (default: a temp
directory). Loopback only, ~15 s.

Usage: ui_chromium.py TIDEMARK_SERVER_BINARY [SCREENSHOT]
(CHROMIUM names another Chromium binary; `chromium` by default.)
"""

import html.parser
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

T0 = 1764460800  # 2025-11-30T00:00:00Z
MINUTES = 60
HOSTS = ["web-1", "web-2", "<b>db</b>"]
BROWSER_TIMEOUT_S = 90
BROWSER = os.environ.get("CHROMIUM", "chromium")


def ensure_tools():
    missing = [p for p, c in [("chromium", BROWSER), ("curl", "curl")] if not shutil.which(c)]
    if not missing:
        return
    sudo = [] if os.geteuid() == 0 or not shutil.which("sudo") else ["sudo"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", *missing], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def start_server(binary, tmp, config=None):
    port_file = os.path.join(tmp, "port")
    args = [binary, "--data", os.path.join(tmp, "data"), "--listen", "127.0.0.1:0",
            "--port-file", port_file]
    if config:
        path = os.path.join(tmp, "server.toml")
        with open(path, "w") as f:
            f.write(config)
        args += ["--config", path]
    log = open(os.path.join(tmp, "server.log"), "w")
    server = subprocess.Popen(args, env={**os.environ, "TIDEMARK_LOG": "warn"},
                              stdout=log, stderr=log)
    for _ in range(300):
        if os.path.exists(port_file) and open(port_file).read().endswith("\n"):
            return server, open(port_file).read().strip()
        if server.poll() is not None:
            break
        time.sleep(0.1)
    server.kill()
    sys.exit(f"FAIL: the server did not start: {open(os.path.join(tmp, 'server.log')).read()}")


def load_samples(addr, user=None):
    """Three series, one sample a minute for an hour, sent twice (the second time all
    duplicates), then refreshed into a segment."""
    lines = []
    for i, host in enumerate(HOSTS):
        for m in range(MINUTES):
            value = 30 + 20 * i + 8 * math.sin(2 * math.pi * m / (20 + 10 * i) + i)
            lines.append(f"cpu,host={host} usage={value:.2f} {T0 + 60 * m}")
    body = "\n".join(lines) + "\n"
    auth = ["-u", user] if user else []
    for _ in range(2):
        out = subprocess.run(
            ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", *auth,
             "--data-binary", "@-", f"http://{addr}/write?db=metrics&precision=s"],
            input=body.encode(), capture_output=True, timeout=30, check=True)
        if out.stdout != b"204":
            sys.exit(f"FAIL: line protocol write answered {out.stdout!r} {out.stderr!r}")
    # Into a segment, so that the storage breakdown has columns to show.
    subprocess.run(["curl", "-sSf", "-o", "/dev/null", *auth, "-X", "POST",
                    f"http://{addr}/metrics/_refresh"], timeout=30, check=True)


def chromium(tmp, url, *extra):
    """Runs headless Chromium on `url` with the page's scripts given virtual time to
    finish; returns its stdout."""
    args = [BROWSER, "--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--disable-sync",
            "--disable-background-networking", "--disable-component-update",
            "--disable-default-apps", "--lang=en-US",
            f"--user-data-dir={os.path.join(tmp, 'profile')}",
            "--virtual-time-budget=15000", "--window-size=1280,900", *extra, url]
    if os.geteuid() == 0:
        args.insert(1, "--no-sandbox")
    out = subprocess.run(args, capture_output=True, timeout=BROWSER_TIMEOUT_S,
                         env={**os.environ, "TZ": "UTC"})
    if out.returncode != 0:
        sys.exit(f"FAIL: chromium exited {out.returncode}: {out.stderr.decode()[-2000:]}")
    return out.stdout.decode()


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
        "source", "track", "wbr"}


class Dom(html.parser.HTMLParser):
    """What the checks need of a dumped DOM: elements by id with their attributes and
    text, the chart's series paths, the legend's items, the indices table's cells."""

    def __init__(self, text):
        super().__init__()
        self.raw = text
        self.stack = []  # [tag, attrs, text parts, cells]
        self.by_id = {}
        self.series = []
        self.legend = []
        self.rows = []
        self.tags = set()
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.add(tag)
        in_chart = any(a.get("id") == "chart" for _, a, _, _ in self.stack)
        if tag == "path" and in_chart and "series" in (attrs.get("class") or "").split():
            self.series.append(attrs)
        self.stack.append([tag, attrs, [], []])
        if tag in VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag):
        if not any(t == tag for t, _, _, _ in self.stack):
            return
        while self.stack:
            t, attrs, parts, cells = self.stack.pop()
            text = "".join(parts)
            if self.stack:
                self.stack[-1][2].append(text)
            if attrs.get("id"):
                self.by_id[attrs["id"]] = (attrs, text)
            parent = self.stack[-1] if self.stack else None
            if parent and t == "li" and parent[1].get("id") == "legend":
                self.legend.append(text)
            if parent and t == "td" and parent[0] == "tr":
                parent[3].append(text.strip())
            if parent and t == "tr" and parent[1].get("id") == "indices-body":
                self.rows.append(cells)
            if t == tag:
                break

    def handle_data(self, data):
        if self.stack:
            self.stack[-1][2].append(data)

    def text(self, id_):
        return self.by_id.get(id_, ({}, ""))[1].strip()


def page_url(addr, query, creds=""):
    q = urllib.parse.urlencode({"query": query, "start": T0, "end": T0 + 3600,
                                "search": "metrics", "disk": "metrics"})
    return f"http://{creds}{addr}/?{q}"


def check_chart(dom, what):
    assert 'data-ready="true"' in dom.raw, f"{what}: the page's script did not finish"
    errors = {i: dom.text(i) for i in ("indices-error", "promql-error", "search-error",
                                       "disk-error") if dom.text(i)}
    assert not errors, f"{what}: errors shown: {errors}"
    assert len(dom.series) == len(HOSTS), f"{what}: {len(dom.series)} chart lines: {dom.series}"
    for p in dom.series:
        assert p.get("d", "").count("L") >= MINUTES - 1, f"{what}: a short line: {p}"
    want = sorted(f'cpu_usage{{host="{h}"}}' for h in HOSTS)
    assert sorted(dom.legend) == want, f"{what}: legend {dom.legend}, expected {want}"
    # The label value `<b>db</b>` is text: escaped in the serialized DOM, no <b> element.
    assert "b" not in dom.tags and "&lt;b&gt;db&lt;/b&gt;" in dom.raw, f"{what}: markup from data"
    assert dom.text("promql-status").startswith("3 series"), dom.text("promql-status")
    rows = [r for r in dom.rows if r and r[0] == "metrics"]
    assert rows, f"{what}: the index is not listed: {dom.rows}"
    # index, status, documents, series, bytes, bytes/doc, partitions, segments, created,
    # duplicates, replaced: the second write was all duplicates.
    n = str(len(HOSTS) * MINUTES)
    assert rows[0][2:4] == [n, str(len(HOSTS))] and rows[0][8:10] == [n, n], f"{what}: {rows[0]}"
    return rows[0]


def main():
    binary = sys.argv[1]
    ensure_tools()
    shot = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        tempfile.mkdtemp(prefix="tidemark-ui-shot-"), "ui.png")
    tmp = tempfile.mkdtemp(prefix="tidemark-ui-")
    servers = []
    try:
        # A server without users: the page with a query in its address.
        os.makedirs(os.path.join(tmp, "open"))
        server, addr = start_server(binary, os.path.join(tmp, "open"))
        servers.append(server)
        load_samples(addr)
        dom = Dom(chromium(tmp, page_url(addr, "cpu_usage"), "--dump-dom"))
        row = check_chart(dom, "open server")
        found = json.loads(dom.text("search-result"))
        hits = found["hits"]["hits"]
        assert found["hits"]["total"]["value"] == len(HOSTS) * MINUTES and len(hits) == 10, found
        assert hits[0]["_source"]["@timestamp"] == "2025-11-30T00:59:00.000Z", hits[0]
        disk = dom.text("disk-result")
        assert "segment columns" in disk and "@timestamp" in disk and "value" in disk, disk
        print(f"OK: the page drew {len(dom.series)} lines, legend {dom.legend}; index row {row}")

        # A broken query: the API's message, no line.
        dom = Dom(chromium(tmp, page_url(addr, "cpu_usage("), "--dump-dom"))
        err = dom.text("promql-error")
        assert "bad_data" in err and "unclosed left parenthesis" in err, f"error shown: {err!r}"
        assert not dom.series, dom.series
        print(f"OK: a broken query shows {err!r}")

        # The screenshot.
        shot = os.path.abspath(shot)
        os.makedirs(os.path.dirname(shot), exist_ok=True)
        chromium(tmp, page_url(addr, "cpu_usage"), f"--screenshot={shot}")
        with open(shot, "rb") as f:
            png = f.read()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000, f"screenshot: {len(png)} B"
        print(f"OK: screenshot {shot} ({len(png)} bytes)")

        # A server with a user: the credentials in the address reach every API call.
        os.makedirs(os.path.join(tmp, "sec"))
        server, addr = start_server(binary, os.path.join(tmp, "sec"),
                                    '[[users]]\nname = "viewer"\npassword = "pw-ui"\nindices = ["*"]\n')
        servers.append(server)
        load_samples(addr, "viewer:pw-ui")
        dom = Dom(chromium(tmp, page_url(addr, "cpu_usage", "viewer:pw-ui@"), "--dump-dom"))
        check_chart(dom, "server with a user")
        print("OK: with Basic credentials the page drew the same lines")
    finally:
        for s in servers:
            s.kill()
            s.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
