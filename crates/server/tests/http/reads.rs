//! `_search`, `_count`, `_mget`: the query DSL subset, answers in Elasticsearch's shape,
//! and a 400 naming anything unsupported.

use serde_json::{Value, json};

use crate::support::{TestServer, k8s_bulk, k8s_mapping, send, send_raw};

const T0: i64 = 1_764_460_800_000;

/// 600 documents: 6 pods (namespaces ns-0..ns-2), one sample per pod every 10 s.
fn loaded(dir: &std::path::Path) -> (TestServer, Vec<String>) {
    let s = TestServer::start(dir, &[]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    let (_, resp) = s.bulk("/k8s/_bulk", &k8s_bulk(600, 6, T0, None));
    assert_eq!(resp["errors"], false);
    let ids = resp["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["create"]["_id"].as_str().unwrap().to_owned())
        .collect();
    (s, ids)
}

fn search(s: &TestServer, body: Value) -> (u16, Value) {
    s.post_json("/k8s/_search", &body)
}

#[test]
fn filters_count_and_page() {
    let dir = tempfile::tempdir().unwrap();
    let (s, ids) = loaded(dir.path());
    assert_eq!(s.get("/k8s/_count").1["count"], 600);
    let count = |q: Value| {
        s.post_json("/k8s/_count", &json!({"query": q})).1["count"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(count(json!({"match_all": {}})), 600);
    assert_eq!(count(json!({"term": {"k8s.pod.name": "pod-1"}})), 100);
    assert_eq!(
        count(json!({"terms": {"k8s.pod.name": ["pod-1", "pod-2"]}})),
        200
    );
    assert_eq!(count(json!({"term": {"k8s.pod.ip": "10.0.0.3"}})), 100);
    // 10 s steps: [T0, T0 + 100 s) holds 10 samples per pod.
    assert_eq!(
        count(json!({"range": {"@timestamp": {"gte": T0, "lt": T0 + 100_000}}})),
        60
    );
    assert_eq!(
        count(
            json!({"range": {"@timestamp": {"gte": "2025-11-30T00:00:00Z", "lte": "2025-11-30T00:01:40Z"}}})
        ),
        66
    );
    assert_eq!(
        count(json!({"range": {"@timestamp": {"gte": "now-1h"}}})),
        0
    );
    assert_eq!(
        count(json!({"range": {"@timestamp": {"lte": "now", "gt": "2025-11-29"}}})),
        600
    );
    assert_eq!(
        count(
            json!({"bool": {"filter": [{"term": {"k8s.namespace.name": "ns-0"}}], "must_not": [{"term": {"k8s.pod.name": "pod-0"}}]}})
        ),
        100
    );
    assert_eq!(
        count(
            json!({"bool": {"should": [{"term": {"k8s.pod.name": "pod-0"}}, {"term": {"k8s.pod.name": "pod-5"}}]}})
        ),
        200
    );
    assert_eq!(
        count(json!({"ids": {"values": [ids[0], ids[7], "nope"]}})),
        2
    );
    assert_eq!(count(json!({"prefix": {"_id": &ids[0][..26]}})), 100);
    // Prefix, regexp and wildcard on a keyword dimension (through its dimension index).
    assert_eq!(count(json!({"prefix": {"k8s.pod.name": "pod-1"}})), 100);
    assert_eq!(
        count(json!({"prefix": {"k8s.pod.name": {"value": "pod-"}}})),
        600
    );
    assert_eq!(count(json!({"regexp": {"k8s.pod.name": "pod-[12]"}})), 200);
    assert_eq!(
        count(json!({"regexp": {"k8s.pod.name": {"value": "pod", "flags": "ALL"}}})),
        0
    );
    assert_eq!(count(json!({"wildcard": {"k8s.pod.name": "pod-?"}})), 600);
    assert_eq!(
        count(json!({"wildcard": {"k8s.pod.name": {"value": "*-5"}}})),
        100
    );
    assert_eq!(
        count(
            json!({"bool": {"must": [{"wildcard": {"k8s.namespace.name": "ns-*"}}], "must_not": [{"regexp": {"k8s.pod.name": "pod-[0-3]"}}, {"prefix": {"k8s.namespace.name": "ns-2"}}]}})
        ),
        100
    );
    assert_eq!(
        count(json!({"exists": {"field": "k8s.pod.cpu.utilization"}})),
        600
    );
    assert_eq!(count(json!({"exists": {"field": "k8s.pod.unmapped"}})), 0);

    let (status, resp) = search(
        &s,
        json!({"size": 3, "from": 2, "sort": [{"@timestamp": {"order": "desc"}}], "_source": ["k8s.pod.name"], "query": {"term": {"k8s.pod.name": "pod-4"}}}),
    );
    assert_eq!(status, 200);
    assert_eq!(
        resp["hits"]["total"],
        json!({"value": 100, "relation": "eq"})
    );
    let hits = resp["hits"]["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 3);
    let last = T0 + 99 * 10_000;
    assert_eq!(hits[0]["sort"], json!([last - 20_000]));
    assert_eq!(
        hits[0]["_source"],
        json!({"k8s": {"pod": {"name": "pod-4"}}})
    );
    assert_eq!(hits[0]["_index"], "k8s");
    let (_, resp) = s.get("/k8s/_search?size=1&rest_total_hits_as_int=true");
    assert_eq!(resp["hits"]["total"], 600);

    let (status, resp) = s.post_json("/_mget", &json!({"docs": [{"_index": "k8s", "_id": ids[1]}, {"_index": "k8s", "_id": "lcgj-not-there"}]}));
    assert_eq!(status, 200);
    assert_eq!(resp["docs"][0]["found"], true);
    assert_eq!(resp["docs"][0]["_source"]["k8s"]["pod"]["name"], "pod-1");
    assert_eq!(resp["docs"][1]["found"], false);
    let (_, resp) = s.post_json("/k8s/_mget", &json!({"ids": [ids[2]]}));
    assert_eq!(resp["docs"][0]["_id"], ids[2].as_str());
}

#[test]
fn aggregations_have_elasticsearch_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = loaded(dir.path());
    let (status, resp) = search(
        &s,
        json!({"size": 0,
        "query": {"range": {"@timestamp": {"gte": T0, "lt": T0 + 120_000}}},
        "aggs": {
            "per_min": {"date_histogram": {"field": "@timestamp", "fixed_interval": "1m", "min_doc_count": 0,
                "extended_bounds": {"min": T0 - 120_000, "max": T0 + 60_000}},
                "aggs": {"cpu": {"avg": {"field": "k8s.pod.cpu.utilization"}}, "mx": {"max": {"field": "k8s.pod.memory.usage_bytes"}},
                         "pods": {"cardinality": {"field": "k8s.pod.name"}}, "n": {"value_count": {"field": "k8s.pod.cpu.utilization"}}}},
            "ns": {"terms": {"field": "k8s.namespace.name", "size": 2},
                "aggs": {"hourly": {"date_histogram": {"field": "@timestamp", "calendar_interval": "hour"},
                    "aggs": {"s": {"sum": {"field": "k8s.pod.memory.usage_bytes"}}, "lo": {"min": {"field": "k8s.pod.cpu.utilization"}}}}}}
        }}),
    );
    assert_eq!(status, 200, "{resp}");
    assert_eq!(resp["hits"]["total"]["value"], 72);
    let b = resp["aggregations"]["per_min"]["buckets"]
        .as_array()
        .unwrap();
    // Two empty buckets before the data from extended_bounds, then two full minutes.
    assert_eq!(b.len(), 4);
    assert_eq!(b[0]["doc_count"], 0);
    assert_eq!(b[0]["cpu"]["value"], Value::Null);
    assert_eq!(b[2]["key"], T0);
    assert_eq!(b[2]["key_as_string"], "2025-11-30T00:00:00.000Z");
    assert_eq!(b[2]["doc_count"], 36);
    assert_eq!(b[2]["pods"]["value"], 6.0);
    assert_eq!(b[2]["n"]["value"], 36.0);
    // Documents i = 0..36 have cpu (i % 100) / 100: mean 0.175.
    assert!((b[2]["cpu"]["value"].as_f64().unwrap() - 0.175).abs() < 1e-9);
    assert_eq!(b[2]["mx"]["value"], 1_000_035.0);
    let ns = &resp["aggregations"]["ns"];
    assert_eq!(ns["buckets"].as_array().unwrap().len(), 2);
    assert_eq!(ns["sum_other_doc_count"], 24);
    assert_eq!(ns["buckets"][0]["key"], "ns-0");
    assert_eq!(ns["buckets"][0]["doc_count"], 24);
    assert_eq!(ns["buckets"][0]["hourly"]["buckets"][0]["key"], T0);
    assert_eq!(ns["buckets"][0]["hourly"]["buckets"][0]["lo"]["value"], 0.0);
}

#[test]
fn unsupported_clauses_are_400s_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = loaded(dir.path());
    for (body, needle) in [
        (
            json!({"query": {"fuzzy": {"k8s.pod.name": "pod"}}}),
            "[fuzzy]",
        ),
        (
            json!({"query": {"range": {"k8s.pod.cpu.utilization": {"gte": 0.5}}}}),
            "[range] on [k8s.pod.cpu.utilization]",
        ),
        (
            json!({"query": {"regexp": {"k8s.pod.name": {"value": "po.*", "flags": "INTERSECTION"}}}}),
            "[regexp.flags]",
        ),
        (
            json!({"query": {"wildcard": {"_id": "x*"}}}),
            "[wildcard] on [_id]",
        ),
        (
            json!({"query": {"prefix": {"k8s.pod.cpu.utilization": "1"}}}),
            "not a dimension",
        ),
        (json!({"rollup": "1h"}), "no rollup"),
        (
            json!({"query": {"term": {"k8s.pod.status": "Running"}}}),
            "not a dimension",
        ),
        (
            json!({"sort": [{"k8s.pod.cpu.utilization": "desc"}]}),
            "[sort] by",
        ),
        (
            json!({"aggs": {"p": {"percentiles": {"field": "k8s.pod.cpu.utilization"}}}}),
            "[percentiles]",
        ),
        (
            json!({"aggs": {"h": {"date_histogram": {"field": "@timestamp", "fixed_interval": "1m", "time_zone": "Europe/Paris"}}}}),
            "time_zone",
        ),
        (
            json!({"aggs": {"t": {"terms": {"field": "k8s.pod.name", "order": {"m": "desc"}}, "aggs": {"m": {"max": {"field": "k8s.pod.cpu.utilization"}}}}}}),
            "order",
        ),
        (json!({"highlight": {}}), "[highlight]"),
        (
            json!({"query": {"bool": {"filter": [], "should": [{"match_all": {}}, {"match_all": {}}], "minimum_should_match": 2}}}),
            "minimum_should_match",
        ),
    ] {
        let (status, resp) = search(&s, body.clone());
        assert_eq!(status, 400, "{body} -> {resp}");
        let reason = resp["error"]["reason"].as_str().unwrap();
        assert!(reason.contains(needle), "{body}: {reason}");
    }
    let (status, resp) = send(
        "POST",
        &s.url("/k8s/_search"),
        Some(b"{oops"),
        &[("content-type", "application/json")],
    );
    assert_eq!(
        (status, resp["error"]["type"].as_str()),
        (400, Some("parse_exception"))
    );
    assert_eq!(s.get("/k8s/_search?q=pod").0, 400);
    assert_eq!(s.get("/missing/_search").0, 404);
}

/// A time-partitioned index (made by the library, then served): `_search` with
/// `"rollup"` returns rollup documents, and a `date_histogram` answer equals the raw one.
#[test]
fn rollup_documents_and_histograms_of_a_partitioned_index() {
    use tidemark::dedup::{EngineConfig, PartitionConfig};
    let dir = tempfile::tempdir().unwrap();
    let ix = dir
        .path()
        .join("data")
        .join(tidemark_server::INDICES_DIR)
        .join("px");
    let parts = PartitionConfig::new()
        .with_width_ms(3_600_000)
        .with_rollups(vec![60_000]);
    let mapping = tidemark::Mapping::from_value(k8s_mapping()).unwrap();
    tidemark::Index::create_partitioned(&ix, mapping, EngineConfig::new(), parts)
        .unwrap()
        .close()
        .unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let (_, resp) = s.bulk("/px/_bulk", &k8s_bulk(600, 6, T0, None));
    assert_eq!(resp["errors"], false, "{}", resp["items"][0]);
    // 100 samples of pod-1, 10 s apart from a whole minute: 17 one-minute documents.
    let (status, resp) = s.post_json(
        "/px/_search?rollup=1m",
        &json!({"size": 2, "query": {"term": {"k8s.pod.name": "pod-1"}}}),
    );
    assert_eq!(status, 200, "{resp}");
    assert_eq!(resp["hits"]["total"]["value"], 17);
    let first = &resp["hits"]["hits"][0]["_source"];
    assert_eq!(first["_doc_count"], 6);
    assert_eq!(first["k8s"]["pod"]["name"], "pod-1");
    assert_eq!(first["k8s"]["pod"]["cpu"]["utilization"]["value_count"], 6);
    assert_eq!(resp["hits"]["hits"][1]["sort"], json!([T0 + 60_000]));
    let (_, body_form) = s.post_json(
        "/px/_search",
        &json!({"rollup": "1m", "size": 0, "query": {"term": {"k8s.pod.name": "pod-1"}}}),
    );
    assert_eq!(body_form["hits"]["total"]["value"], 17);
    let hist = json!({"size": 0, "aggs": {"m": {"date_histogram": {"field": "@timestamp", "fixed_interval": "2m"},
        "aggs": {"avg": {"avg": {"field": "k8s.pod.cpu.utilization"}}}}}});
    let (status, resp) = s.post_json("/px/_search", &hist);
    assert_eq!(status, 200, "{resp}");
    let buckets = resp["aggregations"]["m"]["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 9);
    assert_eq!(buckets[0]["doc_count"], 72);
    assert!(resp.get("tidemark_expired").is_none());
}

/// `PUT /<index>` with `settings.index.tidemark.partitions` creates a partitioned index;
/// bad settings are 400s that leave no index behind.
#[test]
fn create_index_takes_partition_settings() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let mut body = k8s_mapping();
    body["settings"]["index"]["tidemark"] = json!({"partitions": {
        "width": "1h", "retention": "2h", "rollups": ["1m", "10m"],
        "rollup_retention": {"10m": "30d"}, "seal_grace": "5m"}});
    let (status, resp) = s.put_json("/pz", &body);
    assert_eq!(status, 200, "{resp}");
    let (_, resp) = s.bulk("/pz/_bulk", &k8s_bulk(600, 6, T0, None));
    assert_eq!(resp["errors"], false);
    let (status, resp) = s.post_json("/pz/_search?rollup=10m", &json!({"size": 0}));
    assert_eq!(status, 200, "{resp}");
    // 1000 s of 6 pods: two 10-minute buckets each.
    assert_eq!(resp["hits"]["total"]["value"], 12);
    for (settings, needle) in [
        (json!({"width": "1h", "rollups": ["7m"]}), "rollups"),
        (json!({"retention": "1d"}), "needs [width]"),
        (
            json!({"width": "1h", "colour": "red"}),
            "unknown setting [colour]",
        ),
        (
            json!({"width": "1h", "rollups": ["1m"], "rollup_retention": {"1m": "1d"}}),
            "rollup_retention",
        ),
    ] {
        let mut body = k8s_mapping();
        body["settings"]["index.tidemark.partitions"] = settings.clone();
        let (status, resp) = s.put_json("/bad", &body);
        assert_eq!(status, 400, "{settings} -> {resp}");
        let reason = resp["error"]["reason"].as_str().unwrap();
        assert!(reason.contains(needle), "{settings}: {reason}");
        assert_eq!(s.get("/bad/_count").0, 404);
    }
}

#[test]
fn a_page_past_the_result_window_is_400_never_a_cut_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _) = loaded(dir.path());
    let (status, v) = search(&s, json!({"size": 10_000}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["hits"]["hits"].as_array().unwrap().len(), 600);
    for body in [json!({"size": 10_001}), json!({"from": 9_990, "size": 11})] {
        let (status, v) = search(&s, body);
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["type"], "illegal_argument_exception");
        assert!(
            v["error"]["reason"]
                .as_str()
                .unwrap()
                .contains("less than or equal to: [10000] but was [10001]"),
            "{v}"
        );
    }
    let (status, _, text) = send_raw("GET", &s.url("/k8s/_search?size=20000"), None, &[]);
    assert_eq!(status, 400, "{text}");
}
