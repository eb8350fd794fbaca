//! What users of Prometheus and Elasticsearch expect on day one: health probes, and
//! requests Tidemark cannot honour refused with a reason instead of acknowledged and
//! ignored (a `scroll` that never pages, an ILM delete phase that never deletes).

use serde_json::{Value, json};

use crate::support::*;

#[test]
fn health_probes_answer_without_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tidemark.toml");
    std::fs::write(
        &cfg,
        "[[users]]\nname = \"u\"\npassword = \"p\"\nindices = [\"*\"]\n",
    )
    .unwrap();
    let s = TestServer::start(dir.path(), &["--config", cfg.to_str().unwrap()]);
    for (path, text) in [
        ("/-/healthy", "Tidemark is Healthy.\n"),
        ("/-/ready", "Tidemark is Ready.\n"),
    ] {
        let (status, _, body) = send_raw("GET", &s.url(path), None, &[]);
        assert_eq!((status, body.as_str()), (200, text), "{path}");
    }
    // Everything else still needs the credentials.
    assert_eq!(send("GET", &s.url("/_cat/indices"), None, &[]).0, 401);
}

#[test]
fn an_ilm_policy_that_deletes_is_refused_one_that_rolls_over_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    // What Metricbeat installs: rollover only, accepted (a partitioned store has no use
    // for rollover).
    let beats =
        json!({"policy": {"phases": {"hot": {"actions": {"rollover": {"max_age": "30d"}}}}}});
    assert_eq!(s.put_json("/_ilm/policy/metricbeat", &beats).0, 200);
    for policy in [
        json!({"policy": {"phases": {"hot": {"actions": {}}, "delete": {"min_age": "30d", "actions": {"delete": {}}}}}}),
        json!({"policy": {"phases": {"warm": {"actions": {"delete": {}}}}}}),
    ] {
        let (status, v) = s.put_json("/_ilm/policy/p1", &policy);
        assert_eq!(status, 400, "{v}");
        let reason = v.pointer("/error/reason").and_then(Value::as_str).unwrap();
        assert!(
            reason.contains("delete phase") && reason.contains("retention"),
            "{reason}"
        );
    }
}

/// What Grafana's Elasticsearch data source reads: the fields (`GET /<index>/_mapping`)
/// and panels through `_msearch` (a header line naming the index, then the search; the
/// shapes follow Elasticsearch's `_msearch` API documentation).
#[test]
fn msearch_mapping_and_stats_answer_in_elasticsearch_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    assert_eq!(
        s.bulk("/k8s/_bulk", &k8s_bulk(30, 3, 1_764_460_800_000, None))
            .0,
        200
    );
    // A date-histogram panel and a terms variable, then a search of a missing index.
    let body = concat!(
        r#"{"index":"k8s","ignore_unavailable":true}"#,
        "\n",
        r#"{"size":0,"query":{"bool":{"filter":[{"range":{"@timestamp":{"gte":1764460800000,"lte":1764464400000,"format":"epoch_millis"}}}]}},"aggs":{"2":{"date_histogram":{"field":"@timestamp","fixed_interval":"10s","min_doc_count":0,"extended_bounds":{"min":1764460800000,"max":1764460830000}}}}}"#,
        "\n",
        r#"{"index":["k8s"]}"#,
        "\n",
        r#"{"size":0,"aggs":{"1":{"terms":{"field":"k8s.pod.name","size":500}}}}"#,
        "\n",
        r#"{"index":"nope"}"#,
        "\n",
        r#"{"size":1}"#,
        "\n",
    );
    let (status, v) = send(
        "POST",
        &s.url("/_msearch"),
        Some(body.as_bytes()),
        &[("content-type", "application/x-ndjson")],
    );
    assert_eq!(status, 200, "{v}");
    let r = v["responses"].as_array().unwrap();
    assert_eq!(r.len(), 3, "{v}");
    assert_eq!(r[0]["status"], 200);
    assert_eq!(r[0]["hits"]["total"]["value"], 30);
    let buckets = r[0]["aggregations"]["2"]["buckets"].as_array().unwrap();
    let counted: u64 = buckets
        .iter()
        .map(|b| b["doc_count"].as_u64().unwrap())
        .sum();
    assert_eq!(counted, 30, "{buckets:?}");
    let pods = r[1]["aggregations"]["1"]["buckets"].as_array().unwrap();
    assert_eq!(pods.len(), 3, "{pods:?}");
    assert_eq!(r[2]["status"], 404, "{}", r[2]);
    assert_eq!(r[2]["error"]["type"], "index_not_found_exception");

    let (status, m) = s.get("/k8s/_mapping");
    assert_eq!(status, 200, "{m}");
    assert_eq!(
        m["k8s"]["mappings"]["properties"]["@timestamp"]["type"], "date",
        "{m}"
    );
    let (status, all) = s.get("/_mapping");
    assert_eq!(status, 200);
    assert!(all.get("k8s").is_some(), "{all}");
    let (status, st) = s.get("/_stats");
    assert_eq!(status, 200, "{st}");
    assert_eq!(st["_all"]["primaries"]["docs"]["count"], 30, "{st}");
    assert!(st["indices"].get("k8s").is_some(), "{st}");
}

#[test]
fn field_caps_lists_mapped_fields_with_their_types_and_roles() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    let (status, v) = s.get("/k8s/_field_caps?fields=k8s.pod.*,@timestamp");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["indices"], json!(["k8s"]));
    assert_eq!(v["fields"]["@timestamp"]["date"]["type"], "date");
    let name = &v["fields"]["k8s.pod.name"]["keyword"];
    assert_eq!(name["time_series_dimension"], true, "{v}");
    assert_eq!(
        v["fields"]["k8s.pod.cpu.utilization"]["double"]["time_series_metric"], "gauge",
        "{v}"
    );
    assert!(v["fields"].get("k8s.cluster.name").is_none(), "{v}");
    let (status, all) = send("POST", &s.url("/_field_caps"), None, &[]);
    assert_eq!(status, 200, "{all}");
    assert!(all["fields"].get("k8s.cluster.name").is_some(), "{all}");
}

/// `--retention` (VictoriaMetrics' `-retentionPeriod`): the indices the metrics
/// protocols create are partitioned by time and keep that long; a sample older than the
/// retention is refused naming the rule, never stored to be dropped later.
#[test]
fn indices_created_by_the_metrics_protocols_take_the_server_retention() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(
        dir.path(),
        &["--retention", "3d", "--partition-width", "1d"],
    );
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let hour = 3_600_000_000_000i64;
    let recent = format!("cpu,host=a v=1 {}\n", now_ns - hour);
    let (status, _, text) = send_raw(
        "POST",
        &s.url("/write?db=kept"),
        Some(recent.as_bytes()),
        &[],
    );
    assert_eq!(status, 204, "{text}");
    let old = format!("cpu,host=a v=2 {}\n", now_ns - 10 * 24 * hour);
    let (status, _, text) = send_raw("POST", &s.url("/write?db=kept"), Some(old.as_bytes()), &[]);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("retention"), "{text}");
    let (status, st) = s.get("/kept/_stats");
    assert_eq!(status, 200, "{st}");
    assert_eq!(st["_all"]["primaries"]["docs"]["count"], 1, "{st}");
    // The partitioned store counted the refusal as too old for its retention.
    assert_eq!(
        st["indices"]["kept"]["tidemark"]["rejected_too_old"], 1,
        "{st}"
    );
    // An index created with its own mapping keeps its own settings (none here: no
    // partitions, nothing refused by age).
    assert_eq!(s.put_json("/own", &k8s_mapping()).0, 200);
    let doc = format!(
        "{{\"create\":{{}}}}\n{{\"@timestamp\":{},\"k8s\":{{\"pod\":{{\"name\":\"p\"}}}}}}\n",
        now_ns / 1_000_000 - 10 * 24 * 3_600_000
    );
    let (status, v) = s.bulk("/own/_bulk", doc.as_bytes());
    assert_eq!((status, v["errors"].as_bool()), (200, Some(false)), "{v}");
}

/// An `/api/v1/*` path Tidemark does not serve is a 404 in the Prometheus API's shape
/// (what its clients parse), not an Elasticsearch error; other unknown paths keep
/// Elasticsearch's.
#[test]
fn unknown_prometheus_api_paths_are_prometheus_404s() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    for path in ["/api/v1/status/walreplay", "/prometheus/api/v1/targets"] {
        let (status, v) = s.get(path);
        assert_eq!(status, 404, "{path}: {v}");
        assert_eq!(v["status"], "error", "{v}");
        assert_eq!(v["errorType"], "not_found", "{v}");
        assert!(v["error"].as_str().unwrap_or("").contains(path), "{v}");
    }
    let (status, v) = s.get("/_nosuch_endpoint");
    assert_eq!(status, 404, "{v}");
    assert_eq!(v["error"]["type"], "index_not_found_exception", "{v}");
    // Errors of served endpoints were already in that shape.
    let (status, v) = s.get("/api/v1/query");
    assert_eq!(
        (status, &v["status"], &v["errorType"]),
        (400, &json!("error"), &json!("bad_data")),
        "{v}"
    );
}
