//! Searches over several indices, and a replay of what Grafana's Elasticsearch data
//! source sends for a time-series panel and a terms template variable over an index
//! pattern matching two indices. The requests are written from Grafana's documented
//! query shapes (`_msearch` with a header naming the pattern and
//! `ignore_unavailable`, a `range` in `epoch_millis`, a `date_histogram` with
//! `fixed_interval`, `min_doc_count: 0` and `extended_bounds`, a nested metric; a
//! `terms` aggregation of `size` 500 ordered by `_key`); the expected answers are
//! computed by hand from the data below.

use serde_json::{Value, json};

use crate::support::*;

const T0: i64 = 1_764_460_800_000;

/// Two indices under `k8s-*` and one (`hosts`) with another mapping.
///
/// `k8s-1`: 30 documents, pods 0–2, one per pod every 10 s from `T0` (`T0`..`T0+90s`),
/// cpu `i/100` for document `i`. `k8s-2`: 20 documents, pods 0–3, from `T0+60s`
/// (`T0+60s`..`T0+100s`), cpu `i/100`.
fn start(dir: &std::path::Path) -> TestServer {
    let s = TestServer::start(dir, &[]);
    for name in ["k8s-1", "k8s-2"] {
        assert_eq!(s.put_json(&format!("/{name}"), &k8s_mapping()).0, 200);
    }
    let (st, v) = s.bulk("/k8s-1/_bulk", &k8s_bulk(30, 3, T0, None));
    assert_eq!(st, 200, "{v}");
    let (st, v) = s.bulk("/k8s-2/_bulk", &k8s_bulk(20, 4, T0 + 60_000, None));
    assert_eq!(st, 200, "{v}");
    let hosts = json!({
        "settings": {"index": {"mode": "time_series"}},
        "mappings": {"properties": {
            "@timestamp": {"type": "date"},
            "host": {"type": "keyword", "time_series_dimension": true},
            "load": {"type": "double", "time_series_metric": "gauge"}
        }}
    });
    assert_eq!(s.put_json("/hosts", &hosts).0, 200);
    let body = format!(
        "{{\"create\":{{}}}}\n{{\"@timestamp\":{T0},\"host\":\"h1\",\"load\":2.5}}\n\
         {{\"create\":{{}}}}\n{{\"@timestamp\":{},\"host\":\"h2\",\"load\":0.5}}\n",
        T0 + 5_000
    );
    let (st, v) = s.bulk("/hosts/_bulk", body.as_bytes());
    assert_eq!(st, 200, "{v}");
    s
}

fn msearch(s: &TestServer, header: &Value, body: &Value) -> Value {
    let text = format!("{header}\n{body}\n");
    let (status, v) = send(
        "POST",
        &s.url("/_msearch"),
        Some(text.as_bytes()),
        &[("content-type", "application/x-ndjson")],
    );
    assert_eq!(status, 200, "{v}");
    let r = v["responses"].as_array().unwrap();
    assert_eq!(r.len(), 1, "{v}");
    assert_eq!(r[0]["status"], 200, "{v}");
    r[0].clone()
}

fn close(got: &Value, want: f64) {
    let g = got.as_f64().unwrap_or(f64::NAN);
    assert!((g - want).abs() < 1e-12, "got {got}, want {want}");
}

#[test]
fn grafana_panel_and_terms_variable_over_an_index_pattern() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());
    let header =
        json!({"search_type": "query_then_fetch", "ignore_unavailable": true, "index": "k8s-*"});
    let (from, to) = (T0, T0 + 119_999);
    let range =
        json!({"range": {"@timestamp": {"gte": from, "lte": to, "format": "epoch_millis"}}});

    // The time-series panel: avg of cpu in 30 s buckets.
    let panel = json!({
        "size": 0,
        "query": {"bool": {"filter": [range]}},
        "aggs": {"2": {
            "date_histogram": {
                "field": "@timestamp",
                "fixed_interval": "30s",
                "min_doc_count": 0,
                "extended_bounds": {"min": from, "max": to},
                "format": "epoch_millis"
            },
            "aggs": {"1": {"avg": {"field": "k8s.pod.cpu.utilization"}}}
        }}
    });
    let r = msearch(&s, &header, &panel);
    assert_eq!(r["hits"]["total"]["value"], 50, "{r}");
    assert_eq!(r["_shards"]["total"], 2, "{r}");
    let buckets = r["aggregations"]["2"]["buckets"].as_array().unwrap();
    // (key offset, doc count, sum of cpu) per bucket, by hand: k8s-1 fills 9, 9, 9, 3
    // (documents 0–8, 9–17, 18–26, 27–29), k8s-2 fills the last two with 12 and 8
    // (documents 0–11, 12–19).
    let want = [
        (0, 9, 0.36),
        (30_000, 9, 1.17),
        (60_000, 21, 1.98 + 0.66),
        (90_000, 11, 0.84 + 1.24),
    ];
    assert_eq!(buckets.len(), want.len(), "{buckets:?}");
    for (b, (off, n, sum)) in buckets.iter().zip(want) {
        assert_eq!(b["key"], json!(T0 + off), "{b}");
        assert_eq!(b["doc_count"], json!(n), "{b}");
        assert!(b["key_as_string"].is_string(), "{b}");
        close(&b["1"]["value"], sum / n as f64);
    }

    // The template variable: the pod names, by key.
    let variable = json!({
        "size": 0,
        "query": {"bool": {"filter": [range]}},
        "aggs": {"1": {"terms": {"field": "k8s.pod.name", "size": 500, "order": {"_key": "asc"}}}}
    });
    let r = msearch(&s, &header, &variable);
    let got: Vec<(String, u64)> = r["aggregations"]["1"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["key"].as_str().unwrap().to_owned(),
                b["doc_count"].as_u64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, u64)> = [("pod-0", 15), ("pod-1", 15), ("pod-2", 15), ("pod-3", 5)]
        .iter()
        .map(|(k, n)| ((*k).to_owned(), *n))
        .collect();
    assert_eq!(got, want, "{r}");
    assert_eq!(r["aggregations"]["1"]["sum_other_doc_count"], 0, "{r}");

    // A pattern that matches nothing, with ignore_unavailable: an empty answer.
    let r = msearch(
        &s,
        &json!({"index": "nothing-*,gone", "ignore_unavailable": true}),
        &variable,
    );
    assert_eq!(r["hits"]["total"]["value"], 0, "{r}");
    assert_eq!(r["aggregations"]["1"]["buckets"], json!([]), "{r}");
}

#[test]
fn hits_counts_and_aggregations_merge_across_indices() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());

    // Hits: merged by timestamp, `from`/`size` after the merge, `_index` per hit.
    let (st, r) = s.post_json(
        "/k8s-1,k8s-2/_search",
        &json!({"size": 6, "sort": [{"@timestamp": "desc"}], "_source": false}),
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["hits"]["total"]["value"], 50);
    let hits = r["hits"]["hits"].as_array().unwrap();
    let got: Vec<(&str, i64)> = hits
        .iter()
        .map(|h| {
            (
                h["_index"].as_str().unwrap(),
                h["sort"][0].as_i64().unwrap(),
            )
        })
        .collect();
    let mut want = vec![("k8s-2", T0 + 100_000); 4];
    want.extend([("k8s-2", T0 + 90_000); 2]);
    assert_eq!(got, want, "{r}");
    let (_, r) = s.post_json("/k8s-*/_search", &json!({"from": 28, "size": 4}));
    let got: Vec<(&str, i64)> = r["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["_index"].as_str().unwrap(),
                h["sort"][0].as_i64().unwrap(),
            )
        })
        .collect();
    // Ascending: 18 documents of k8s-1 before T0+60s; at T0+60s k8s-1's 3, then k8s-2's 4;
    // 28 = 18 + 3 + 4 + 3 (k8s-1 at T0+70s), so the page is k8s-2 at T0+70s.
    assert_eq!(got, vec![("k8s-2", T0 + 70_000); 4], "{r}");

    // The index-less routes: every index.
    let (st, r) = s.post_json("/_count", &json!({}));
    assert_eq!((st, r["count"].as_u64()), (200, Some(52)), "{r}");
    assert_eq!(r["_shards"]["total"], 3, "{r}");
    let (st, r) = s.get("/_search?size=0");
    assert_eq!(
        (st, r["hits"]["total"]["value"].as_u64()),
        (200, Some(52)),
        "{r}"
    );

    // A field one index lacks matches nothing there; its aggregations are empty there.
    let q = json!({"query": {"term": {"host": "h1"}}});
    let (_, r) = s.post_json("/_count", &q);
    assert_eq!(r["count"], 1, "{r}");
    let (st, r) = s.post_json(
        "/_all/_search",
        &json!({"size": 0, "aggs": {
            "hosts": {"terms": {"field": "host"}},
            "pods": {"terms": {"field": "k8s.pod.name", "size": 2}},
            "max_load": {"max": {"field": "load"}},
            "load_sum": {"sum": {"field": "load"}},
            "cpu_n": {"value_count": {"field": "k8s.pod.cpu.utilization"}},
            "cpu_min": {"min": {"field": "k8s.pod.cpu.utilization"}},
            "cpu_max": {"max": {"field": "k8s.pod.cpu.utilization"}}
        }}),
    );
    assert_eq!(st, 200, "{r}");
    let a = &r["aggregations"];
    assert_eq!(
        a["hosts"]["buckets"],
        json!([{"key": "h1", "doc_count": 1}, {"key": "h2", "doc_count": 1}]),
        "{r}"
    );
    // By count, ties by key, cut to 2; the rest in sum_other_doc_count.
    assert_eq!(
        a["pods"]["buckets"],
        json!([{"key": "pod-0", "doc_count": 15}, {"key": "pod-1", "doc_count": 15}]),
        "{r}"
    );
    assert_eq!(a["pods"]["sum_other_doc_count"], 20, "{r}");
    close(&a["max_load"]["value"], 2.5);
    close(&a["load_sum"]["value"], 3.0);
    close(&a["cpu_n"]["value"], 50.0);
    close(&a["cpu_min"]["value"], 0.0);
    close(&a["cpu_max"]["value"], 0.29);

    // A cardinality cannot be merged exactly: refused over several indices, answered
    // over one.
    let card = json!({"size": 0, "aggs": {"c": {"cardinality": {"field": "k8s.pod.name"}}}});
    let (st, r) = s.post_json("/k8s-*/_search", &card);
    assert_eq!(st, 400, "{r}");
    assert!(
        r["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("cardinality"),
        "{r}"
    );
    let (st, r) = s.post_json("/k8s-2/_search", &card);
    assert_eq!(
        (st, r["aggregations"]["c"]["value"].as_f64()),
        (200, Some(4.0)),
        "{r}"
    );

    // One index whose terms order by key or ascending count: sorted the same way.
    let (st, r) = s.post_json(
        "/k8s-2/_search",
        &json!({"size": 0, "aggs": {
            "by_key": {"terms": {"field": "k8s.pod.name", "size": 3, "order": {"_key": "desc"}}},
            "few": {"terms": {"field": "k8s.namespace.name", "order": [{"_count": "asc"}]}}
        }}),
    );
    assert_eq!(st, 200, "{r}");
    let a = &r["aggregations"];
    assert_eq!(
        a["by_key"]["buckets"],
        json!([{"key": "pod-3", "doc_count": 5}, {"key": "pod-2", "doc_count": 5}, {"key": "pod-1", "doc_count": 5}]),
        "{r}"
    );
    assert_eq!(a["by_key"]["sum_other_doc_count"], 5, "{r}");
    // Pods 0 and 3 are in ns-0, pod 1 in ns-1, pod 2 in ns-2.
    assert_eq!(
        a["few"]["buckets"],
        json!([{"key": "ns-1", "doc_count": 5}, {"key": "ns-2", "doc_count": 5}, {"key": "ns-0", "doc_count": 10}]),
        "{r}"
    );

    // _resolve/index.
    let (st, r) = s.get("/_resolve/index/k8s-*");
    assert_eq!(st, 200, "{r}");
    assert_eq!(
        r,
        json!({"indices": [{"name": "k8s-1", "attributes": ["open"]}, {"name": "k8s-2", "attributes": ["open"]}], "aliases": [], "data_streams": []})
    );
    // An explicit missing name is still a 404.
    assert_eq!(s.get("/k8s-1,nope/_search").0, 404);
}
