//! `GET /metrics`: the Prometheus text format, figures that follow what the server did,
//! and per-index families only for the indices the caller may read.

use crate::support::*;

#[test]
fn metrics_follow_writes_duplicates_and_requests() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    let body = k8s_bulk(20, 4, 1_764_460_800_000, None);
    assert_eq!(s.bulk("/k8s/_bulk", &body).0, 200);
    // The same documents again: 20 idempotent duplicates.
    assert_eq!(s.bulk("/k8s/_bulk", &body).0, 200);
    let lp = b"cpu,host=a usage=1 1764460800000000000\ncpu,host=b usage=2 1764460800000000000\n";
    let (status, _, _) = send_raw("POST", &s.url("/write?db=lp"), Some(lp), &[]);
    assert_eq!(status, 204);

    let (status, kind, m) = scrape(&s, &[]);
    assert_eq!(status, 200);
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    let get = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no {k} in {m:?}"));
    assert_eq!(get(r#"tidemark_index_documents{index="k8s"}"#), 20.0);
    assert_eq!(get(r#"tidemark_index_documents{index="lp"}"#), 2.0);
    assert_eq!(
        get(r#"tidemark_index_items_total{index="k8s",result="created"}"#),
        20.0
    );
    assert_eq!(
        get(r#"tidemark_index_items_total{index="k8s",result="duplicate"}"#),
        20.0
    );
    assert_eq!(
        get(r#"tidemark_index_writable{index="k8s",state="open"}"#),
        1.0
    );
    assert!(get(r#"tidemark_dedup_checks_total{index="k8s"}"#) >= 40.0);
    assert_eq!(
        get(r#"tidemark_requests_total{route="/{index}/_bulk",method="POST",code="200"}"#),
        2.0
    );
    assert_eq!(
        get(r#"tidemark_requests_total{route="/write",method="POST",code="204"}"#),
        1.0
    );
    assert_eq!(
        get(r#"tidemark_request_duration_seconds_count{route="/{index}/_bulk",method="POST"}"#),
        2.0
    );
    assert_eq!(
        get(
            r#"tidemark_request_duration_seconds_bucket{route="/{index}/_bulk",method="POST",le="+Inf"}"#
        ),
        2.0
    );
    assert!(get("process_resident_memory_bytes") > 1e6);
    assert!(
        get("tidemark_process_peak_resident_memory_bytes") >= get("process_resident_memory_bytes")
    );
    assert!(get("process_open_fds") > 3.0);
    // Under one clock tick (10 ms) of CPU time reads 0: present and not negative.
    assert!(get("process_cpu_seconds_total") >= 0.0);
    assert!(get("process_start_time_seconds") > 1.7e9);
    assert!(get("tidemark_data_disk_total_bytes") > 0.0);
    // Route templates, never paths: no label holds an index name outside `index=`.
    assert!(!m.keys().any(|k| k.contains("route=\"/k8s")), "{m:?}");
    // A request to an unknown path is counted under one label, not its path.
    let _ = send("GET", &s.url("/no/such/thing"), None, &[]);
    let (_, _, m) = scrape(&s, &[]);
    assert!(m.keys().any(|k| k.contains("route=\"unmatched\"")), "{m:?}");
    assert!(!m.keys().any(|k| k.contains("no/such")), "{m:?}");
}

#[test]
fn a_tenant_scrapes_only_its_own_indices() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tidemark.toml");
    std::fs::write(
        &cfg,
        "[[users]]\nname = \"alice\"\npassword = \"pw-a\"\nindices = [\"alice-*\"]\n\
         [[api_keys]]\nid = \"kb\"\nkey = \"key-b\"\nindices = [\"bob-*\"]\n",
    )
    .unwrap();
    let s = TestServer::start(dir.path(), &["--config", cfg.to_str().unwrap()]);
    let alice = ("Authorization", "Basic YWxpY2U6cHctYQ==");
    let bob = ("Authorization", "ApiKey a2I6a2V5LWI=");
    let lp = b"secretmetric,host=alphahost v=1 1764460800000000000\n";
    let (status, _, text) = send_raw("POST", &s.url("/write?db=alice-lp"), Some(lp), &[alice]);
    assert_eq!(status, 204, "{text}");
    let (status, _, text) = send_raw("POST", &s.url("/write?db=bob-lp"), Some(lp), &[bob]);
    assert_eq!(status, 204, "{text}");
    assert_eq!(scrape(&s, &[]).0, 401);
    let (status, _, a) = scrape(&s, &[alice]);
    assert_eq!(status, 200);
    assert_eq!(a[r#"tidemark_index_documents{index="alice-lp"}"#], 1.0);
    assert!(!a.keys().any(|k| k.contains("bob-")), "{a:?}");
    let (_, _, b) = scrape(&s, &[bob]);
    assert_eq!(b[r#"tidemark_index_documents{index="bob-lp"}"#], 1.0);
    assert!(!b.keys().any(|k| k.contains("alice-")), "{b:?}");
}

#[test]
fn nodes_stats_answers_the_one_node_in_elasticsearch_shape() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    let body = k8s_bulk(30, 3, 1_764_460_800_000, None);
    assert_eq!(s.bulk("/k8s/_bulk", &body).0, 200);
    assert_eq!(s.bulk("/k8s/_bulk", &body).0, 200);
    let (status, v) = s.get("/_nodes/stats");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["_nodes"]["total"], 1);
    let nodes = v["nodes"].as_object().unwrap();
    assert_eq!(nodes.len(), 1);
    let node = nodes.values().next().unwrap();
    assert_eq!(node["indices"]["docs"]["count"], 30, "{node}");
    assert_eq!(node["indices"]["indexing"]["index_total"], 30, "{node}");
    assert!(node["indices"]["store"]["size_in_bytes"].as_u64().unwrap() > 0);
    assert!(
        node["process"]["mem"]["resident_in_bytes"]
            .as_u64()
            .unwrap()
            > 1 << 20
    );
    assert!(node["process"]["open_file_descriptors"].as_u64().unwrap() > 0);
    let (status, v) = s.get("/_nodes");
    assert_eq!(status, 200, "{v}");
    let node = v["nodes"].as_object().unwrap().values().next().unwrap();
    assert!(node["http"]["publish_address"].is_string(), "{node}");
    assert_eq!(node["name"], "tidemark");
}

#[test]
fn nodes_stats_counts_only_the_callers_indices() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("server.toml");
    std::fs::write(
        &cfg,
        "[[users]]\nname = \"alice\"\npassword = \"pw-a\"\nindices = [\"alice-*\"]\n\
         [[users]]\nname = \"bob\"\npassword = \"pw-b\"\nindices = [\"bob-*\"]\n",
    )
    .unwrap();
    let s = TestServer::start(dir.path(), &["--config", cfg.to_str().unwrap()]);
    let alice = [
        ("authorization", "Basic YWxpY2U6cHctYQ=="),
        ("content-type", "application/json"),
    ];
    let bob = [("authorization", "Basic Ym9iOnB3LWI=")];
    let mapping = k8s_mapping().to_string();
    let (status, _, _) = send_raw(
        "PUT",
        &s.url("/alice-k8s"),
        Some(mapping.as_bytes()),
        &alice,
    );
    assert_eq!(status, 200);
    let body = k8s_bulk(12, 3, 1_764_460_800_000, None);
    let (status, _, _) = send_raw(
        "POST",
        &s.url("/alice-k8s/_bulk"),
        Some(&body),
        &[alice[0], ("content-type", "application/x-ndjson")],
    );
    assert_eq!(status, 200);
    let docs = |headers: &[(&str, &str)]| {
        let (status, _, text) = send_raw("GET", &s.url("/_nodes/stats"), None, headers);
        assert_eq!(status, 200, "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let node = v["nodes"]
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap()
            .clone();
        node["indices"]["docs"]["count"].as_u64().unwrap()
    };
    assert_eq!(docs(&alice), 12);
    assert_eq!(docs(&bob), 0, "bob sees none of alice's documents");
}
