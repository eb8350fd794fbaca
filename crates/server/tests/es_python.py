#!/usr/bin/env python3
"""tidemark-server driven by the official Elasticsearch Python client (9.x), unmodified.

Usage: es_python.py TIDEMARK_SERVER_BINARY TIDEMARK_CLI_BINARY

Starts the server on 127.0.0.1 (a free port) over a temporary data directory, then:
info(); indices.create with a time-series mapping; helpers.bulk and
helpers.streaming_bulk of a few thousand documents, each sent twice (the second time
every item is a 409); count; search with a date_histogram + avg and a terms
aggregation, compared with `tidemark agg` on the same index; get by _id; delete.
Exits non-zero on the first mismatch; prints 'N passed, 0 failed' at the end.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from elasticsearch import Elasticsearch, helpers

T0 = 1_764_460_800_000  # 2025-11-30T00:00:00Z
PODS = 20
CHECKS = 0


def check(cond, what):
    global CHECKS
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    CHECKS += 1


def start(server_bin, data):
    port_file = os.path.join(data, "port")
    if os.path.exists(port_file):
        os.remove(port_file)
    proc = subprocess.Popen(
        [server_bin, "--data", os.path.join(data, "data"), "--listen", "127.0.0.1:0", "--port-file", port_file],
        env={**os.environ, "TIDEMARK_LOG": "warn"},
    )
    deadline = time.time() + 30
    while time.time() < deadline:
        if os.path.exists(port_file):
            text = open(port_file).read()
            if text.endswith("\n"):
                return proc, "http://" + text.strip()
        time.sleep(0.05)
    proc.kill()
    sys.exit("server did not start")


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    check(proc.wait(timeout=60) == 0, "SIGTERM exits cleanly")


def docs(start_i, n, index):
    for i in range(start_i, start_i + n):
        pod = i % PODS
        yield {
            "_op_type": "create",
            "_index": index,
            "_source": {
                "@timestamp": T0 + (i // PODS) * 10_000,
                "k8s": {
                    "cluster": {"name": "prod"},
                    "namespace": {"name": f"ns-{pod % 4}"},
                    "pod": {
                        "name": f"pod-{pod:02}",
                        "ip": f"10.0.0.{pod}",
                        "status": "Running",
                        "cpu": {"utilization": (i * 7 % 100) / 100.0},
                        "memory": {"usage_bytes": 1_000_000 + i},
                        "restarts": 0,
                    },
                },
            },
        }


def main():
    server_bin, cli_bin = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    mapping = json.load(open(os.path.join(here, "../../../fixtures/tidemark/k8s.mapping.json")))
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start(server_bin, tmp)
        try:
            es = Elasticsearch(url, request_timeout=120)
            info = es.info()
            check(info["version"]["number"].startswith("9."), f"info() version: {info['version']}")
            check(info["tagline"] == "You Know, for Search", "info() tagline")

            r = es.indices.create(index="k8s", settings=mapping["settings"], mappings=mapping["mappings"])
            check(r["acknowledged"] and r["index"] == "k8s", f"indices.create: {r}")
            check(es.indices.exists(index="k8s"), "indices.exists")

            # helpers.bulk: 2,000 documents, twice.
            ok, errors = helpers.bulk(es, docs(0, 2000, "k8s"), chunk_size=500, raise_on_error=False)
            check(ok == 2000 and not errors, f"helpers.bulk first: {ok} ok, {len(errors)} errors")
            ok, errors = helpers.bulk(es, docs(0, 2000, "k8s"), chunk_size=500, raise_on_error=False)
            statuses = {e["create"]["status"] for e in errors}
            types = {e["create"]["error"]["type"] for e in errors}
            check(ok == 0 and len(errors) == 2000 and statuses == {409}, f"helpers.bulk again: {ok} ok, statuses {statuses}")
            check(types == {"version_conflict_engine_exception"}, f"409 types {types}")

            # helpers.streaming_bulk: 2,000 more, twice.
            first = [item for ok, item in helpers.streaming_bulk(es, docs(2000, 2000, "k8s"), chunk_size=1000, raise_on_error=False)]
            check(len(first) == 2000 and all(i["create"]["status"] == 201 for i in first), "streaming_bulk first: all 201")
            again = [item for ok, item in helpers.streaming_bulk(es, docs(2000, 2000, "k8s"), chunk_size=1000, raise_on_error=False)]
            check(all(i["create"]["status"] == 409 for i in again), "streaming_bulk again: all 409")
            ids = [i["create"]["_id"] for i in first]
            check([i["create"]["_id"] for i in again] == ids, "retries name the same _ids")

            total = 4000
            check(es.count(index="k8s")["count"] == total, "count")
            check(es.count(index="k8s", query={"term": {"k8s.pod.name": "pod-03"}})["count"] == total // PODS, "count with a term")

            resp = es.search(
                index="k8s",
                size=0,
                aggs={
                    "per_min": {
                        "date_histogram": {"field": "@timestamp", "fixed_interval": "1m"},
                        "aggs": {"cpu": {"avg": {"field": "k8s.pod.cpu.utilization"}}},
                    },
                    "pods": {
                        "terms": {"field": "k8s.pod.name", "size": 100},
                        "aggs": {"cpu": {"avg": {"field": "k8s.pod.cpu.utilization"}}},
                    },
                },
            )
            check(resp["hits"]["total"]["value"] == total, "search total")
            hist = resp["aggregations"]["per_min"]["buckets"]
            pods = resp["aggregations"]["pods"]["buckets"]
            check(len(pods) == PODS, f"{len(pods)} pod buckets")

            hit = es.search(index="k8s", size=1, sort=[{"@timestamp": "desc"}], query={"term": {"k8s.pod.name": "pod-07"}})
            check(hit["hits"]["hits"][0]["_source"]["k8s"]["pod"]["name"] == "pod-07", "search hit")

            # What dashboards and scripts call: msearch (one search per header), the
            # mapping, field capabilities.
            m = es.msearch(searches=[
                {"index": "k8s"}, {"size": 0, "query": {"match_all": {}}},
                {"index": "nope"}, {"size": 0},
            ])
            check(m["responses"][0]["hits"]["total"]["value"] == total, f"msearch total: {m['responses'][0]}")
            check(m["responses"][1]["status"] == 404, f"msearch missing index: {m['responses'][1]}")
            mp = es.indices.get_mapping(index="k8s")
            check(mp["k8s"]["mappings"]["properties"]["@timestamp"]["type"] == "date", f"get_mapping: {mp}")
            fc = es.field_caps(index="k8s", fields="k8s.pod.*")
            check(fc["fields"]["k8s.pod.name"]["keyword"]["time_series_dimension"] is True, f"field_caps: {fc}")
            # Paging past the result window: helpers.scan (scroll, then clear_scroll)
            # and a point in time with search_after, each hit once.
            scanned = [h["_id"] for h in helpers.scan(es, index="k8s", query={"query": {"match_all": {}}}, size=700)]
            check(len(scanned) == total and len(set(scanned)) == total, f"helpers.scan: {len(scanned)} hits, {len(set(scanned))} distinct")
            pit = es.open_point_in_time(index="k8s", keep_alive="1m")["id"]
            es.bulk(operations=[{"create": {"_index": "k8s"}}, next(docs(total + 50_000, 1, "k8s"))["_source"]])
            seen, after = [], None
            while True:
                page = es.search(size=900, pit={"id": pit, "keep_alive": "1m"}, sort=[{"@timestamp": "asc"}], search_after=after)
                hits = page["hits"]["hits"]
                if not hits:
                    break
                seen += [h["_id"] for h in hits]
                after = hits[-1]["sort"]
            check(len(seen) == total and len(set(seen)) == total, f"pit + search_after: {len(seen)} hits, {len(set(seen))} distinct (a write after the pit is not seen)")
            check(es.close_point_in_time(id=pit)["num_freed"] == 1, "close_point_in_time")
            check(es.count(index="k8s")["count"] == total + 1, "the live index has the write")
            es.delete(index="k8s", id=es.search(index="k8s", size=1, sort=[{"@timestamp": "desc"}])["hits"]["hits"][0]["_id"])
        finally:
            stop(proc)

        # The CLI's agg on the same index (the server released its lock on SIGTERM).
        out = subprocess.run(
            [cli_bin, "agg", os.path.join(tmp, "data", "indices", "k8s"), "--metric", "k8s.pod.cpu.utilization", "--interval", "1m"],
            check=True, capture_output=True, text=True,
        ).stdout
        cli = json.loads(out)
        check([b["key"] for b in cli["buckets"]] == [b["key"] for b in hist], "histogram keys equal the CLI's")
        for mine, theirs in zip(hist, cli["buckets"]):
            check(mine["doc_count"] == theirs["count"], f"bucket {mine['key']} count")
            check(abs(mine["cpu"]["value"] - theirs["avg"]) < 1e-9, f"bucket {mine['key']} avg {mine['cpu']['value']} vs {theirs['avg']}")
        per_pod = {}
        for s in cli["series"]:
            name = s["dimensions"]["k8s"]["pod"]["name"]
            count = sum(b["count"] for b in s["buckets"])
            total_sum = sum(b["sum"] for b in s["buckets"])
            per_pod[name] = (count, total_sum / count)
        for b in pods:
            count, avg = per_pod[b["key"]]
            check(b["doc_count"] == count, f"terms bucket {b['key']} count")
            check(abs(b["cpu"]["value"] - avg) < 1e-9, f"terms bucket {b['key']} avg")

        proc, url = start(server_bin, tmp)
        try:
            es = Elasticsearch(url, request_timeout=120)
            check(es.count(index="k8s")["count"] == total, "count after restart")
            doc = es.get(index="k8s", id=ids[5])
            check(doc["found"] and doc["_source"]["k8s"]["pod"]["name"] == "pod-05", f"get: {doc}")
            r = es.delete(index="k8s", id=ids[5])
            check(r["result"] == "deleted", f"delete: {r}")
            check(not es.exists(index="k8s", id=ids[5]), "gone after delete")
            check(es.count(index="k8s")["count"] == total - 1, "count after delete")
            r = es.indices.delete(index="k8s")
            check(r["acknowledged"], "indices.delete")
            check(not es.indices.exists(index="k8s"), "index gone")
        finally:
            stop(proc)
    print(f"es_python: {CHECKS} passed, 0 failed")


if __name__ == "__main__":
    main()
