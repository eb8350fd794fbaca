//! `_bulk`, `_doc` and `_create`: exactly-once over HTTP, the response shape, malformed
//! input, gzip, `filter_path`, templates, limits and security.

use std::io::Write;

use serde_json::{Value, json};

use crate::support::{TestServer, fixture, k8s_bulk, k8s_mapping, scrape, send, statuses};

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[test]
fn bulk_twice_gives_409s_the_second_time() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    let body = k8s_bulk(500, 50, 1_764_460_800_000, None);
    let (status, first) = s.bulk("/k8s/_bulk", &body);
    assert_eq!(status, 200);
    assert_eq!(first["errors"], false);
    assert!(first["took"].is_u64());
    assert!(statuses(&first).iter().all(|&st| st == 201));
    let item = &first["items"][0]["create"];
    assert_eq!(item["_index"], "k8s");
    assert_eq!(item["result"], "created");
    assert_eq!(item["_version"], 1);
    let (status, second) = s.bulk("/k8s/_bulk", &body);
    assert_eq!(status, 200);
    assert_eq!(second["errors"], true);
    assert!(statuses(&second).iter().all(|&st| st == 409));
    let id = first["items"][0]["create"]["_id"].as_str().unwrap();
    let err = &second["items"][0]["create"]["error"];
    assert_eq!(err["type"], "version_conflict_engine_exception");
    assert_eq!(
        err["reason"],
        format!("[{id}]: version conflict, document already exists (current version [1])")
    );
    assert_eq!(second["items"][0]["create"]["_id"], id);
    // The document is there, once.
    let (status, doc) = s.get(&format!("/k8s/_doc/{id}"));
    assert_eq!(status, 200);
    assert_eq!(doc["found"], true);
    assert_eq!(doc["_source"]["k8s"]["pod"]["name"], "pod-0");
    assert!(doc["_source"].get("_id").is_none());
    let (_, stats) = s.get("/k8s/_stats");
    assert_eq!(stats["indices"]["k8s"]["primaries"]["docs"]["count"], 500);
}

#[test]
fn the_fixture_bulk_gives_elasticsearch_item_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    let body = std::fs::read(fixture("k8s.bulk")).unwrap();
    // No `_index` and no index in the path: every item fails alone.
    let (status, resp) = s.bulk(
        "/_bulk?filter_path=errors,items.*.status,items.*.error.type",
        &body,
    );
    assert_eq!(status, 200);
    assert!(statuses(&resp).iter().all(|&st| st == 400), "{resp}");
    let (status, resp) = s.bulk("/k8s/_bulk", &body);
    assert_eq!(status, 200);
    let actions: Vec<&str> = resp["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_object().unwrap().keys().next().unwrap().as_str())
        .collect();
    assert!(
        actions.contains(&"update") && actions.contains(&"delete") && actions.contains(&"index")
    );
    for item in resp["items"].as_array().unwrap() {
        let inner = item.as_object().unwrap().values().next().unwrap();
        let status = inner["status"].as_u64().unwrap();
        if inner["result"] == "not_found" {
            // A delete of an absent document: 404 without an error, as in Elasticsearch.
            assert_eq!(status, 404);
        } else if status >= 300 {
            assert!(inner["error"]["type"].is_string(), "{inner}");
        } else {
            assert!(
                inner["result"].is_string() && inner["_version"] == 1,
                "{inner}"
            );
        }
    }
}

#[test]
fn malformed_documents_fail_alone_and_a_malformed_action_refuses_the_request() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    let good = k8s_bulk(2, 2, 1_764_460_800_000, None);
    let mut body = Vec::new();
    body.extend_from_slice(b"{\"create\":{}}\n{\"@timestamp\": 1, \"k8s\": {oops\n");
    body.extend_from_slice(
        b"{\"create\":{}}\n{\"@timestamp\": \"never\", \"k8s\": {\"pod\": {\"name\": \"x\"}}}\n",
    );
    body.extend_from_slice(&good);
    let (status, resp) = s.bulk("/k8s/_bulk", &body);
    assert_eq!(status, 200);
    assert_eq!(resp["errors"], true);
    assert_eq!(statuses(&resp), vec![400, 400, 201, 201]);
    assert_eq!(
        resp["items"][0]["create"]["error"]["type"],
        "document_parsing_exception"
    );
    assert_eq!(
        resp["items"][1]["create"]["error"]["type"],
        "document_parsing_exception"
    );
    // A malformed action line refuses the whole request, as in Elasticsearch: nothing
    // of it is stored, and the answer names the line.
    let count = |s: &TestServer| s.get("/k8s/_count").1["count"].as_u64().unwrap();
    assert_eq!(count(&s), 2);
    let fresh = k8s_bulk(2, 2, 1_764_470_800_000, None);
    for (bad, line, kind) in [
        (
            &b"{\"explode\":{}}\n{\"a\":1}\n"[..],
            5,
            "illegal_argument_exception",
        ),
        (
            b"\x00\x01garbage\n\xff\xfe\n",
            5,
            "illegal_argument_exception",
        ),
        (
            b"{\"delete\":{}}\n",
            5,
            "action_request_validation_exception",
        ),
    ] {
        let mut body = fresh.clone();
        body.extend_from_slice(bad);
        let (status, resp) = s.bulk("/k8s/_bulk", &body);
        assert_eq!(status, 400, "{resp}");
        assert_eq!(resp["error"]["type"], kind, "{resp}");
        assert_eq!(resp["error"]["root_cause"][0]["type"], kind, "{resp}");
        let reason = resp["error"]["reason"].as_str().unwrap();
        assert!(
            reason.contains(&format!("line {line}")) || reason.contains(&format!("line [{line}]")),
            "{reason}"
        );
    }
    assert_eq!(count(&s), 2, "a refused request stored nothing");
    // Malformed JSON bodies elsewhere are 400s.
    let (status, resp) = send(
        "PUT",
        &s.url("/other"),
        Some(b"{nope"),
        &[("content-type", "application/json")],
    );
    assert_eq!(
        (status, resp["error"]["type"].as_str()),
        (400, Some("parse_exception"))
    );
}

#[test]
fn gzip_bodies_and_filter_path() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    let body = k8s_bulk(300, 30, 1_764_460_800_000, Some("k8s"));
    let packed = gzip(&body);
    let headers = [
        ("content-type", "application/x-ndjson"),
        ("content-encoding", "gzip"),
    ];
    let (status, resp) = send(
        "POST",
        &s.url("/_bulk?filter_path=errors,items.*.error,items.*.status"),
        Some(&packed),
        &headers,
    );
    assert_eq!(status, 200);
    assert_eq!(resp["errors"], false);
    assert!(resp.get("took").is_none());
    assert_eq!(resp["items"][0], json!({"create": {"status": 201}}));
    let (_, resp) = send(
        "POST",
        &s.url("/_bulk?filter_path=errors,items.*.error,items.*.status"),
        Some(&packed),
        &headers,
    );
    assert_eq!(resp["items"][0]["create"]["status"], 409);
    assert_eq!(
        resp["items"][0]["create"]["error"]["type"],
        "version_conflict_engine_exception"
    );
    let (status, resp) = send("POST", &s.url("/_bulk"), Some(b"not gzip"), &headers);
    assert_eq!(
        (status, resp["error"]["type"].as_str()),
        (400, Some("parse_exception"))
    );
}

#[test]
fn single_document_writes() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    let doc = json!({"@timestamp": "2025-11-30T00:00:00Z", "k8s": {"cluster": {"name": "c"}, "namespace": {"name": "n"}, "pod": {"name": "p", "ip": "10.1.1.1", "cpu": {"utilization": 0.25}}}});
    let (status, created) = s.post_json("/k8s/_doc?op_type=create", &doc);
    assert_eq!(status, 201, "{created}");
    let id = created["_id"].as_str().unwrap().to_owned();
    assert_eq!(created["result"], "created");
    let (status, again) = s.put_json(&format!("/k8s/_create/{id}"), &doc);
    assert_eq!(status, 409);
    assert_eq!(again["error"]["type"], "version_conflict_engine_exception");
    let (status, wrong) = s.put_json("/k8s/_create/not-this-id", &doc);
    assert_eq!(status, 400, "{wrong}");
    let (status, replaced) = s.post_json("/k8s/_doc", &doc);
    assert_eq!(
        (status, replaced["result"].as_str()),
        (200, Some("updated"))
    );
    let (status, deleted) = send("DELETE", &s.url(&format!("/k8s/_doc/{id}")), None, &[]);
    assert_eq!((status, deleted["result"].as_str()), (200, Some("deleted")));
    assert_eq!(s.get(&format!("/k8s/_doc/{id}")).0, 404);
    let (status, _) = send("DELETE", &s.url(&format!("/k8s/_doc/{id}")), None, &[]);
    assert_eq!(status, 404);
}

#[test]
fn metricbeat_flow_creates_the_data_stream_from_a_template() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    assert_eq!(s.get("/").0, 200);
    assert_eq!(s.get("/_license").0, 200);
    let mut template = json!({"index_patterns": ["metrics-*-*"], "data_stream": {}, "priority": 200, "template": k8s_mapping()});
    template["template"]["mappings"]["properties"]["message"] = json!({"type": "text"});
    let (status, resp) = s.put_json("/_index_template/metrics-foo", &template);
    assert_eq!(status, 200, "{resp}");
    assert_eq!(
        s.get("/_index_template/metrics-foo").1["index_templates"][0]["name"],
        "metrics-foo"
    );
    let body = k8s_bulk(20, 5, 1_764_460_800_000, Some("metrics-foo-default"));
    let (status, resp) = s.bulk(
        "/_bulk?filter_path=errors,items.*.error,items.*.status",
        &body,
    );
    assert_eq!(status, 200);
    assert_eq!(resp["errors"], false, "{resp}");
    assert_eq!(s.get("/metrics-foo-default").0, 200);
    // No template for this name: a per-item 404, not an invented mapping.
    let body = k8s_bulk(2, 2, 1_764_460_800_000, Some("logs-x"));
    let (_, resp) = s.bulk("/_bulk", &body);
    assert_eq!(resp["items"][0]["create"]["status"], 404);
    assert_eq!(
        resp["items"][0]["create"]["error"]["type"],
        "index_not_found_exception"
    );
    // Templates survive a restart.
    drop(s);
    let s = TestServer::start(dir.path(), &[]);
    let body = k8s_bulk(3, 3, 1_764_460_800_000, Some("metrics-bar-default"));
    let (_, resp) = s.bulk("/_bulk", &body);
    assert_eq!(resp["errors"], false, "{resp}");
}

#[test]
fn oversized_bodies_are_413() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &["--max-content-length", "10000"]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    let body = k8s_bulk(200, 20, 1_764_460_800_000, None);
    assert!(body.len() > 10_000);
    let (status, resp) = s.bulk("/k8s/_bulk", &body);
    assert_eq!(status, 413, "{resp}");
    // Also when the compressed body is small: the limit holds for the decoded size.
    let packed = gzip(&body);
    assert!(packed.len() < 10_000);
    let headers = [
        ("content-type", "application/x-ndjson"),
        ("content-encoding", "gzip"),
    ];
    assert_eq!(
        send("POST", &s.url("/k8s/_bulk"), Some(&packed), &headers).0,
        413
    );
    let small = k8s_bulk(5, 5, 1_764_460_800_000, None);
    assert_eq!(s.bulk("/k8s/_bulk", &small).0, 200);
}

#[test]
fn slow_uploads_hold_no_write_slot() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &["--write-queue", "64"]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    // 64 clients send their headers and a first byte of a `_bulk`, remote write or line
    // protocol body, then trickle: once they held all 64 write slots for up to a minute.
    let paths = ["/k8s/_bulk", "/api/v1/write", "/write?db=slow"];
    let mut slow: Vec<std::net::TcpStream> = (0..64)
        .map(|i| {
            let mut c = std::net::TcpStream::connect(&s.addr).unwrap();
            write!(
                c,
                "POST {} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: 100000\r\n\r\n{{",
                paths[i % paths.len()]
            )
            .unwrap();
            c.flush().unwrap();
            c
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(500));
    // A fast client's writes all go through meanwhile, one after another, each at once.
    let body = k8s_bulk(5, 5, 1_764_460_800_000, None);
    for i in 0..20 {
        let t = std::time::Instant::now();
        let (status, resp) = s.bulk("/k8s/_bulk", &body);
        assert_eq!(status, 200, "write {i}: {resp}");
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "write {i} waited {:?}",
            t.elapsed()
        );
        for c in &mut slow {
            // One more byte each: they are still sending.
            let _ = c.write_all(b" ");
        }
    }
    let (status, _) = send(
        "POST",
        &s.url("/write?db=fast"),
        Some(b"cpu,host=a value=1 1764460800000000000\n"),
        &[],
    );
    assert_eq!(status, 204);
}

#[test]
fn a_full_write_queue_is_429() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &["--write-queue", "1"]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    // With one slot, held by a request only while it is parsed and written, concurrent
    // writers soon meet it taken. Bounded: 8 threads for at most 60 s.
    let body = k8s_bulk(2_000, 50, 1_764_460_800_000, None);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None::<serde_json::Value>));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    std::thread::scope(|scope| {
        for _ in 0..8 {
            let (s, body, seen) = (&s, &body, std::sync::Arc::clone(&seen));
            scope.spawn(move || {
                // The same documents each time: after the first, duplicates (409 items),
                // still parsed and checked under the slot.
                while std::time::Instant::now() < deadline && seen.lock().unwrap().is_none() {
                    let (status, resp) = s.bulk("/k8s/_bulk", body);
                    if status == 429 {
                        *seen.lock().unwrap() = Some(resp);
                    } else {
                        assert_eq!(status, 200, "{resp}");
                    }
                }
            });
        }
    });
    let resp = seen
        .lock()
        .unwrap()
        .take()
        .expect("a 429 while the slot is held");
    assert_eq!(resp["error"]["type"], "es_rejected_execution_exception");
    // The slot comes back once the other requests are done.
    let small = k8s_bulk(5, 5, 1_764_470_800_000, None);
    assert_eq!(s.bulk("/k8s/_bulk", &small).0, 200);
}

#[test]
fn a_spent_body_budget_is_429_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(
        dir.path(),
        &[
            "--max-content-length",
            "4000",
            "--body-bytes-in-flight",
            "4000",
        ],
    );
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    // A stalled upload has sent 3,000 bytes: they count against the budget until it ends.
    let mut slow = std::net::TcpStream::connect(&s.addr).unwrap();
    write!(
        slow,
        "POST /k8s/_bulk HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: 3999\r\n\r\n{}",
        " ".repeat(3000)
    )
    .unwrap();
    slow.flush().unwrap();
    // The server takes the stalled bytes from the budget when its handler reads them;
    // a bulk sent before that would take its own share first and make the stalled
    // upload the one refused. Wait until the gauge shows them held.
    let held = (0..500).any(|_| {
        let (_, _, m) = scrape(&s, &[]);
        if m.get("tidemark_body_bytes_available")
            .is_some_and(|&a| a <= 1000.0)
        {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        false
    });
    assert!(held, "the stalled upload's bytes are held by the budget");
    let body = k8s_bulk(10, 5, 1_764_460_800_000, None);
    assert!(body.len() > 1000 && body.len() < 4000);
    let mut refused = None;
    for _ in 0..250 {
        let (status, resp) = s.bulk("/k8s/_bulk", &body);
        if status == 429 {
            refused = Some(resp);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let resp = refused.expect("a 429 while the stalled body holds the budget");
    assert_eq!(resp["error"]["type"], "es_rejected_execution_exception");
    assert!(
        resp["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("body_bytes_in_flight")
    );
    drop(slow);
    let mut ok = false;
    for _ in 0..250 {
        if s.bulk("/k8s/_bulk", &body).0 == 200 {
            ok = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(ok, "the budget came back");
}

#[test]
fn users_and_api_keys_are_scoped_to_index_patterns() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("server.toml");
    std::fs::write(
        &cfg,
        "[[users]]\nname = \"alice\"\npassword = \"pw-a\"\nindices = [\"a-*\"]\n[[api_keys]]\nid = \"kb\"\nkey = \"sec-b\"\nindices = [\"b-*\"]\n",
    )
    .unwrap();
    let s = TestServer::start(dir.path(), &["--config", cfg.to_str().unwrap()]);
    let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
    let alice = format!("Basic {}", b64("alice:pw-a"));
    let key_b = format!("ApiKey {}", b64("kb:sec-b"));
    let json_h = ("content-type", "application/json");
    let mapping = k8s_mapping().to_string();

    let (status, resp) = send("GET", &s.url("/"), None, &[]);
    assert_eq!(
        (status, resp["error"]["type"].as_str()),
        (401, Some("security_exception"))
    );
    let wrong = format!("Basic {}", b64("alice:nope"));
    assert_eq!(
        send("GET", &s.url("/"), None, &[("authorization", &wrong)]).0,
        401
    );
    assert_eq!(
        send("GET", &s.url("/"), None, &[("authorization", &alice)]).0,
        200
    );

    assert_eq!(
        send(
            "PUT",
            &s.url("/a-1"),
            Some(mapping.as_bytes()),
            &[json_h, ("authorization", &alice)]
        )
        .0,
        200
    );
    assert_eq!(
        send(
            "PUT",
            &s.url("/b-1"),
            Some(mapping.as_bytes()),
            &[json_h, ("authorization", &key_b)]
        )
        .0,
        200
    );
    let (status, resp) = send(
        "PUT",
        &s.url("/b-2"),
        Some(mapping.as_bytes()),
        &[json_h, ("authorization", &alice)],
    );
    assert_eq!(
        (status, resp["error"]["type"].as_str()),
        (403, Some("security_exception"))
    );
    let body = k8s_bulk(4, 2, 1_764_460_800_000, None);
    let nd = ("content-type", "application/x-ndjson");
    assert_eq!(
        send(
            "POST",
            &s.url("/a-1/_bulk"),
            Some(&body),
            &[nd, ("authorization", &alice)]
        )
        .1["errors"],
        false
    );
    // Another tenant's index: 403 on the index path, per item in a mixed bulk.
    let (status, _) = send(
        "POST",
        &s.url("/b-1/_bulk"),
        Some(&body),
        &[nd, ("authorization", &alice)],
    );
    assert_eq!(status, 200);
    let (status, resp) = send(
        "GET",
        &s.url("/b-1/_stats"),
        None,
        &[("authorization", &alice)],
    );
    assert_eq!(
        (status, resp["error"]["type"].as_str()),
        (403, Some("security_exception"))
    );
    let (_, resp) = send(
        "POST",
        &s.url("/b-1/_bulk"),
        Some(&body),
        &[nd, ("authorization", &alice)],
    );
    assert_eq!(resp["items"][0]["create"]["status"], 403);
    assert_eq!(
        resp["items"][0]["create"]["error"]["type"],
        "security_exception"
    );
    let (_, resp) = send(
        "GET",
        &s.url("/b-1/_stats"),
        None,
        &[("authorization", &key_b)],
    );
    assert_eq!(
        resp["indices"]["b-1"]["primaries"]["docs"]["count"], 0,
        "alice wrote nothing into b-1"
    );
    let listed = send(
        "GET",
        &s.url("/_cat/indices?format=json"),
        None,
        &[("authorization", &alice)],
    )
    .1;
    let names: Vec<Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["index"].clone())
        .collect();
    assert_eq!(names, vec![json!("a-1")]);
}
