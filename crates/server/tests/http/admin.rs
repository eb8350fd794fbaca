//! Handshake and index administration.

use serde_json::json;

use crate::support::{TestServer, k8s_mapping, send, send_raw};

#[test]
fn handshake_answers_as_elasticsearch_does() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let (status, product, text) = send_raw("GET", &s.url("/"), None, &[]);
    assert_eq!(status, 200);
    assert_eq!(product.as_deref(), Some("Elasticsearch"));
    let info: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(info["version"]["number"], "9.1.0");
    assert_eq!(info["version"]["build_flavor"], "default");
    assert_eq!(info["tagline"], "You Know, for Search");
    assert_eq!(info["cluster_name"], "tidemark");
    let uuid = info["cluster_uuid"].as_str().unwrap().to_owned();
    assert_eq!(uuid.len(), 22);
    let (status, product, text) = send_raw("HEAD", &s.url("/"), None, &[]);
    assert_eq!(
        (status, product.as_deref(), text.as_str()),
        (200, Some("Elasticsearch"), "")
    );
    assert_eq!(s.get("/_license").1["license"]["status"], "active");
    assert_eq!(s.get("/_cluster/health").1["status"], "green");
    assert_eq!(s.get("/_xpack").0, 200);
    assert_eq!(
        s.put_json("/_ilm/policy/metrics", &json!({"policy": {}})).0,
        200
    );
    assert_eq!(s.get("/_ilm/policy/metrics").0, 200);
    assert_eq!(
        s.put_json("/_component_template/c1", &json!({"template": {}}))
            .0,
        200
    );
    assert_eq!(s.get("/_component_template/c1").0, 200);
    // An unknown endpoint is a 400 naming it, still with the product header.
    let (status, product, text) = send_raw("GET", &s.url("/_nope/x"), None, &[]);
    assert_eq!((status, product.as_deref()), (400, Some("Elasticsearch")));
    assert!(text.contains("/_nope/x"), "{text}");
    // The same cluster id after a restart.
    drop(s);
    let s = TestServer::start(dir.path(), &["--write-queue", "8"]);
    assert_eq!(s.get("/").1["cluster_uuid"], uuid.as_str());
}

#[test]
fn configured_version_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("server.toml");
    std::fs::write(&cfg, "version = \"8.17.2\"\ncluster_name = \"edge\"\n").unwrap();
    let s = TestServer::start(dir.path(), &["--config", cfg.to_str().unwrap()]);
    let info = s.get("/").1;
    assert_eq!(info["version"]["number"], "8.17.2");
    assert_eq!(info["cluster_name"], "edge");
}

#[test]
fn indices_are_created_listed_read_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let (status, body) = s.put_json("/k8s", &k8s_mapping());
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"acknowledged": true, "shards_acknowledged": true, "index": "k8s"})
    );
    let (status, body) = s.put_json("/k8s", &k8s_mapping());
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "resource_already_exists_exception");
    let (status, body) = s.put_json("/Bad", &k8s_mapping());
    assert_eq!(
        (status, body["error"]["type"].as_str()),
        (400, Some("invalid_index_name_exception"))
    );
    let (status, body) = s.put_json(
        "/nodims",
        &json!({"mappings": {"properties": {"a": {"type": "keyword"}}}}),
    );
    assert_eq!(
        (status, body["error"]["type"].as_str()),
        (400, Some("mapper_parsing_exception")),
        "{body}"
    );
    let events = json!({"settings": {"index": {"mode": "events"}}, "mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "message": {"type": "keyword"}}}});
    assert_eq!(s.put_json("/events-1", &events).0, 200);

    let (status, body) = s.get("/k8s");
    assert_eq!(status, 200);
    assert_eq!(body["k8s"]["settings"]["index"]["mode"], "time_series");
    assert_eq!(
        body["k8s"]["mappings"]["properties"]["k8s"]["properties"]["pod"]["properties"]["name"]["type"],
        "keyword"
    );
    assert_eq!(send("HEAD", &s.url("/k8s"), None, &[]).0, 200);
    assert_eq!(send("HEAD", &s.url("/missing"), None, &[]).0, 404);
    let (_, text) = s.get("/_cat/indices");
    let text = text.as_str().unwrap().to_owned();
    assert!(
        text.contains(" k8s ") && text.contains(" events-1 "),
        "{text}"
    );
    let (_, list) = s.get("/_cat/indices?format=json");
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["index"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["events-1", "k8s"]);

    // One data directory holds both; they survive a restart.
    drop(s);
    let s = TestServer::start(dir.path(), &[]);
    assert_eq!(s.get("/events-1").0, 200);
    assert_eq!(send("DELETE", &s.url("/events-1"), None, &[]).0, 200);
    assert_eq!(s.get("/events-1").0, 404);
    assert!(!dir.path().join("data/indices/events-1").exists());
    assert_eq!(send("DELETE", &s.url("/events-1"), None, &[]).0, 404);
}

#[test]
fn refresh_forcemerge_stats_and_disk_usage() {
    use crate::support::k8s_bulk;
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    for start in [0, 1_000_000] {
        let body = k8s_bulk(200, 10, 1_764_460_800_000 + start, None);
        assert_eq!(s.bulk("/k8s/_bulk", &body).1["errors"], false);
        let (status, r) = s.post_json("/k8s/_refresh", &json!({}));
        assert_eq!(
            (status, r["_shards"]["successful"].as_u64()),
            (200, Some(1))
        );
    }
    let (_, stats) = s.get("/k8s/_stats");
    assert_eq!(stats["indices"]["k8s"]["primaries"]["segments"]["count"], 2);
    assert_eq!(s.post_json("/k8s/_forcemerge", &json!({})).0, 200);
    let (_, stats) = s.get("/k8s/_stats");
    assert_eq!(stats["indices"]["k8s"]["primaries"]["segments"]["count"], 1);
    assert_eq!(stats["_all"]["primaries"]["docs"]["count"], 400);
    let (status, _) = s.post_json("/k8s/_disk_usage", &json!({}));
    assert_eq!(
        status, 400,
        "run_expensive_tasks=true is required, as in Elasticsearch"
    );
    let (status, du) = s.post_json("/k8s/_disk_usage?run_expensive_tasks=true", &json!({}));
    assert_eq!(status, 200);
    assert!(du["k8s"]["store_size_in_bytes"].as_u64().unwrap() > 0);
    assert!(
        du["k8s"]["fields"]["@timestamp"]["total_in_bytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        du["k8s"]["tidemark"]["components_in_bytes"]["timestamps"]
            .as_u64()
            .unwrap()
            > 0
    );
}

#[test]
fn a_client_that_stalls_mid_body_gets_408() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("server.toml");
    std::fs::write(&cfg, "client_timeout_secs = 1\n").unwrap();
    let s = TestServer::start(dir.path(), &["--config", cfg.to_str().unwrap()]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    let mut slow = std::net::TcpStream::connect(&s.addr).unwrap();
    slow.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    write!(
        slow,
        "POST /k8s/_bulk HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{{\"create\":{{}}}}\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    let _ = slow.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("timeout_exception"), "{text}");
    // The writer was not held: the next request goes through.
    assert_eq!(s.get("/k8s/_count").1["count"], 0);
}
