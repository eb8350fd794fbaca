#!/usr/bin/env python3
"""OTLP/HTTP with a real client: the Python OpenTelemetry SDK's OTLP/HTTP metric
exporter (protobuf) sends a counter, a histogram and a gauge to tidemark-server; the
values read back through the Elasticsearch API are the ones recorded. Loopback only,
a few seconds.

Usage: otlp_python.py TIDEMARK_SERVER_BINARY
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource


def search(base, index, body):
    req = urllib.request.Request(
        f"{base}/{index}/_search",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def main():
    binary = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="tidemark-otlp-")
    port_file = os.path.join(tmp, "port")
    server = subprocess.Popen(
        [binary, "--data", os.path.join(tmp, "data"), "--listen", "127.0.0.1:0",
         "--port-file", port_file],
        env={**os.environ, "TIDEMARK_LOG": "warn"},
    )
    try:
        for _ in range(300):
            if os.path.exists(port_file) and open(port_file).read().endswith("\n"):
                break
            time.sleep(0.1)
        base = "http://" + open(port_file).read().strip()
        exporter = OTLPMetricExporter(endpoint=f"{base}/v1/metrics", compression=None)
        reader = PeriodicExportingMetricReader(exporter, export_interval_millis=60_000)
        provider = MeterProvider(
            resource=Resource.create({"service.name": "checkout"}), metric_readers=[reader]
        )
        meter = provider.get_meter("shop")
        counter = meter.create_counter("orders", unit="1")
        hist = meter.create_histogram("order.amount", unit="EUR")
        for i in range(10):
            counter.add(1, {"region": "eu"})
            hist.record(5.0 * (i + 1), {"region": "eu"})
        counter.add(3, {"region": "us"})
        assert provider.force_flush(timeout_millis=10_000), "export failed"
        provider.shutdown()

        def only(query):
            got = search(base, "metrics", {"size": 100, "query": {"bool": {"filter": query}}})
            return [h["_source"] for h in got["hits"]["hits"]]

        eu = only([{"term": {"__name__": "orders_total"}}, {"term": {"region": "eu"}}])
        assert eu and eu[-1]["value_long"] == 10, eu
        assert eu[-1]["service_name"] == "checkout", eu
        assert eu[-1]["otel_scope_name"] == "shop", eu
        us = only([{"term": {"__name__": "orders_total"}}, {"term": {"region": "us"}}])
        assert us and us[-1]["value_long"] == 3, us
        count = only([{"term": {"__name__": "order_amount_count"}}])
        assert count and count[-1]["value_long"] == 10, count
        total = only([{"term": {"__name__": "order_amount_sum"}}])
        assert total and total[-1]["value"] == 275.0, total
        inf = only([{"term": {"__name__": "order_amount_bucket"}}, {"term": {"le": "+Inf"}}])
        assert inf and inf[-1]["value_long"] == 10, inf
        print(f"OK: the OpenTelemetry Python SDK's OTLP/HTTP exporter: counter, histogram "
              f"({len(eu) + len(us) + len(count) + len(total)} points checked)")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
