//! `POST /api/v1/admin/tsdb/delete_series`: removes exactly the selected samples (one
//! series, part of its time), and the delete holds after a restart and a merge.

use serde_json::Value;

use crate::support::{TestServer, send};

const T0: i64 = 1_764_460_800_000;

/// `count_over_time` of `selector` over everything written, summed.
fn count(server: &TestServer, selector: &str) -> u64 {
    let q = format!("sum(count_over_time({selector}[3h]))");
    let url = server.url(&format!(
        "/api/v1/query?query={}&time={}",
        form_urlencoded::byte_serialize(q.as_bytes()).collect::<String>(),
        (T0 + 7_200_000) / 1000
    ));
    let (status, v) = send("GET", &url, None, &[]);
    assert_eq!(status, 200, "{v}");
    match &v["data"]["result"][0]["value"][1] {
        Value::String(s) => s.parse().unwrap(),
        _ => 0,
    }
}

#[test]
fn delete_series_removes_exactly_the_selected_samples_and_survives_restart_and_merge() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = TestServer::start(tmp.path(), &[]);
    // Three hosts, 100 samples each, one a minute.
    let mut lines = String::new();
    for host in ["a", "b", "c"] {
        for i in 0..100 {
            lines.push_str(&format!(
                "cpu,host={host} usage={i}.5 {}\n",
                T0 + i * 60_000
            ));
        }
    }
    let (status, v) = send(
        "POST",
        &server.url("/write?db=metrics&precision=ms"),
        Some(lines.as_bytes()),
        &[],
    );
    assert_eq!(status, 204, "{v}");
    // host b, minutes 20 to 59.
    let url = server.url(&format!(
        "/api/v1/admin/tsdb/delete_series?match[]={}&start={}&end={}",
        form_urlencoded::byte_serialize(br#"cpu_usage{host="b"}"#).collect::<String>(),
        (T0 + 20 * 60_000) / 1000,
        (T0 + 59 * 60_000) / 1000
    ));
    let (status, _, _) = crate::support::send_raw("POST", &url, None, &[]);
    assert_eq!(status, 204);
    let expect = |server: &TestServer| {
        assert_eq!(count(server, r#"cpu_usage{host="a"}"#), 100);
        assert_eq!(count(server, r#"cpu_usage{host="b"}"#), 60);
        assert_eq!(count(server, r#"cpu_usage{host="c"}"#), 100);
    };
    expect(&server);
    // The same delete again finds nothing more.
    let (status, _, _) = crate::support::send_raw("POST", &url, None, &[]);
    assert_eq!(status, 204);
    expect(&server);
    // A bad selector is a 400 naming it; no match[] is a 400.
    let (status, v) = send(
        "POST",
        &server.url("/api/v1/admin/tsdb/delete_series?match[]=cpu{"),
        None,
        &[],
    );
    assert_eq!(status, 400, "{v}");
    let (status, _) = send(
        "POST",
        &server.url("/api/v1/admin/tsdb/delete_series"),
        None,
        &[],
    );
    assert_eq!(status, 400);
    // Survives a SIGKILL (the tombstones are in the fsynced log), then a merge.
    server.kill();
    let server = TestServer::start(tmp.path(), &[]);
    expect(&server);
    let (status, v) = send("POST", &server.url("/metrics/_refresh"), None, &[]);
    assert_eq!(status, 200, "{v}");
    let (status, v) = send("POST", &server.url("/metrics/_forcemerge"), None, &[]);
    assert_eq!(status, 200, "{v}");
    expect(&server);
    drop(server);
    let server = TestServer::start(tmp.path(), &[]);
    expect(&server);
}

#[test]
fn delete_by_query_deletes_the_matching_documents_and_they_stay_deleted() {
    use crate::support::{k8s_bulk, k8s_mapping};
    let tmp = tempfile::tempdir().unwrap();
    let mut server = TestServer::start(tmp.path(), &[]);
    let json_post = |s: &TestServer, path: &str, body: &serde_json::Value| {
        send(
            "POST",
            &s.url(path),
            Some(body.to_string().as_bytes()),
            &[("content-type", "application/json")],
        )
    };
    let (status, v) = send(
        "PUT",
        &server.url("/k8s"),
        Some(k8s_mapping().to_string().as_bytes()),
        &[("content-type", "application/json")],
    );
    assert_eq!(status, 200, "{v}");
    // 20 pods x 10 timestamps (10 s apart).
    let (status, v) = server.bulk("/k8s/_bulk", &k8s_bulk(200, 20, T0, None));
    assert_eq!(status, 200, "{v}");
    let pod3_late = serde_json::json!({"query": {"bool": {"filter": [
        {"term": {"k8s.pod.name": "pod-3"}},
        {"range": {"@timestamp": {"gte": T0 + 50_000}}}]}}});
    let count = |s: &TestServer, q: &serde_json::Value| -> u64 {
        let (status, v) = json_post(s, "/k8s/_count", q);
        assert_eq!(status, 200, "{v}");
        v["count"].as_u64().unwrap()
    };
    let all = serde_json::json!({"query": {"match_all": {}}});
    assert_eq!(count(&server, &pod3_late), 5);
    let (status, v) = json_post(&server, "/k8s/_delete_by_query", &pod3_late);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["total"].as_u64(), v["deleted"].as_u64()),
        (Some(5), Some(5)),
        "{v}"
    );
    assert_eq!(count(&server, &pod3_late), 0);
    assert_eq!(count(&server, &all), 195);
    // max_docs bounds it; no query is a 400.
    let pod4 = serde_json::json!({"query": {"term": {"k8s.pod.name": "pod-4"}}, "max_docs": 3});
    let (_, v) = json_post(&server, "/k8s/_delete_by_query", &pod4);
    assert_eq!(v["deleted"].as_u64(), Some(3), "{v}");
    let (status, _) = json_post(&server, "/k8s/_delete_by_query", &serde_json::json!({}));
    assert_eq!(status, 400);
    server.kill();
    let server = TestServer::start(tmp.path(), &[]);
    assert_eq!(count(&server, &all), 192);
    let (status, v) = json_post(&server, "/k8s/_forcemerge", &serde_json::json!({}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(count(&server, &all), 192);
    assert_eq!(count(&server, &pod3_late), 0);
}
