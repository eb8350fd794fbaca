//! Paging past 10,000 hits: a point in time (`POST /<index>/_pit`) read with
//! `search_after` sees exactly the data acknowledged when it was opened, whatever is
//! written, late or deleted meanwhile, every hit once and in order; `scroll` pages the
//! same way; the ids are useless to another tenant, expire, are freed, and are bounded
//! in number.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::support::{TestServer, k8s_bulk, k8s_mapping, send};

const T0: i64 = 1_764_460_800_000;

/// Every file below `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn post(server: &TestServer, path: &str, body: &Value) -> (u16, Value) {
    send(
        "POST",
        &server.url(path),
        Some(body.to_string().as_bytes()),
        &[("content-type", "application/json")],
    )
}

fn delete(server: &TestServer, path: &str, body: &Value) -> (u16, Value) {
    send(
        "DELETE",
        &server.url(path),
        Some(body.to_string().as_bytes()),
        &[("content-type", "application/json")],
    )
}

/// Pages through `pit` with `search_after`, `size` a page; the `(sort, _id)` of every
/// hit in the order answered, and the totals each page reported.
fn page_through(
    server: &TestServer,
    pit: &str,
    size: u64,
    order: &str,
) -> (Vec<(i64, String)>, HashSet<u64>) {
    let mut out = Vec::new();
    let mut totals = HashSet::new();
    let mut after: Option<Value> = None;
    loop {
        let mut body = json!({
            "size": size,
            "pit": {"id": pit, "keep_alive": "1m"},
            "sort": [{"@timestamp": order}],
        });
        if let Some(a) = &after {
            body["search_after"] = a.clone();
        }
        let (status, v) = post(server, "/_search", &body);
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["pit_id"], pit);
        totals.insert(v["hits"]["total"]["value"].as_u64().unwrap());
        let hits = v["hits"]["hits"].as_array().unwrap();
        let Some(last) = hits.last() else { break };
        for h in hits {
            let sort = h["sort"].as_array().unwrap();
            assert_eq!(sort.len(), 2, "{h}");
            assert_eq!(
                sort[1].as_str().unwrap(),
                format!("k8s/{}", h["_id"].as_str().unwrap())
            );
            out.push((
                sort[0].as_i64().unwrap(),
                h["_id"].as_str().unwrap().to_owned(),
            ));
        }
        after = Some(last["sort"].clone());
    }
    (out, totals)
}

#[test]
fn a_point_in_time_pages_exactly_the_data_it_saw() {
    let tmp = tempfile::tempdir().unwrap();
    let server = TestServer::start(tmp.path(), &[]);
    assert_eq!(server.put_json("/k8s", &k8s_mapping()).0, 200);
    // 1,200 documents: 40 pods at each of 30 timestamps (ties the _id breaks).
    let (status, v) = server.bulk("/k8s/_bulk", &k8s_bulk(1_200, 40, T0, None));
    assert_eq!((status, v["errors"].as_bool()), (200, Some(false)), "{v}");
    let (status, v) = send("POST", &server.url("/k8s/_pit?keep_alive=1m"), None, &[]);
    assert_eq!(status, 200, "{v}");
    let pit = v["id"].as_str().unwrap().to_owned();
    // The index was refreshed before the copy: the copy's write-ahead logs hold no
    // record, so opening it put no write buffer in memory.
    let copy = tmp.path().join("data/pit").join(&pit).join("k8s");
    let wal_bytes = walk(&copy)
        .into_iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("wal-") && name.ends_with(".log")
        })
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum::<u64>();
    assert!(wal_bytes < 4_096, "{wal_bytes} bytes of log in the copy");

    // After it opened: new documents, late documents inside its range (other pods at
    // its timestamps), a delete, a merge.
    let (status, _) = server.bulk("/k8s/_bulk", &k8s_bulk(400, 40, T0 + 300_000, None));
    assert_eq!(status, 200);
    // Pods 40..80 at the point in time's own timestamps (pods 0..40 there are 409s).
    let (status, v) = server.bulk("/k8s/_bulk", &k8s_bulk(2_400, 80, T0, None));
    assert_eq!(status, 200, "{v}");
    let (status, v) = post(
        &server,
        "/k8s/_delete_by_query",
        &json!({"query": {"term": {"k8s.pod.name": "pod-7"}}}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(post(&server, "/k8s/_forcemerge", &json!({})).0, 200);
    let live = server.get("/k8s/_count").1["count"].as_u64().unwrap();
    assert_ne!(live, 1_200, "the live index changed");

    for (size, order) in [(7, "asc"), (100, "desc"), (5_000, "asc")] {
        let (hits, totals) = page_through(&server, &pit, size, order);
        assert_eq!(
            totals,
            HashSet::from([1_200]),
            "every page counts what the point in time saw"
        );
        assert_eq!(hits.len(), 1_200, "size {size} {order}");
        let ids: HashSet<&String> = hits.iter().map(|(_, id)| id).collect();
        assert_eq!(ids.len(), 1_200, "no hit twice");
        assert!(hits.iter().all(|(ts, _)| (T0..T0 + 300_000).contains(ts)));
        let mut sorted = hits.clone();
        sorted.sort();
        if order == "desc" {
            sorted.reverse();
        }
        assert_eq!(hits, sorted, "in (timestamp, _id) order");
    }

    // search_after on the live index pages what is there now.
    let mut after: Option<Value> = None;
    let mut seen = 0u64;
    loop {
        let mut body = json!({"size": 333, "sort": ["@timestamp"]});
        if let Some(a) = &after {
            body["search_after"] = a.clone();
        }
        let (status, v) = post(&server, "/k8s/_search", &body);
        assert_eq!(status, 200, "{v}");
        let hits = v["hits"]["hits"].as_array().unwrap();
        let Some(last) = hits.last() else { break };
        seen += hits.len() as u64;
        after = Some(last["sort"].clone());
        if after.as_ref().unwrap().as_array().unwrap().len() == 1 {
            // Without a point in time or search_after, hits carry the timestamp only;
            // the second page asks with both values.
            let id = last["_id"].as_str().unwrap();
            after = Some(json!([last["sort"][0], format!("k8s/{id}")]));
        }
    }
    assert_eq!(seen, live);

    // Mistakes are 400s naming the fix, never a silent skip.
    let (status, v) = post(&server, "/k8s/_search", &json!({"search_after": [T0]}));
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("<index>/<_id>"),
        "{v}"
    );
    let (status, v) = post(
        &server,
        "/k8s/_search",
        &json!({"from": 10, "search_after": [T0, "k8s/x"]}),
    );
    assert_eq!(status, 400, "{v}");
    let (status, v) = post(&server, "/k8s/_search", &json!({"pit": {"id": pit}}));
    assert_eq!(
        status, 400,
        "an index in the path with a point in time: {v}"
    );

    // Freed: gone, and its copy with it.
    assert_eq!(tmp.path().join("data/pit").read_dir().unwrap().count(), 1);
    let (status, v) = delete(&server, "/_pit", &json!({"id": pit}));
    assert_eq!((status, v["num_freed"].as_u64()), (200, Some(1)), "{v}");
    let (status, v) = post(&server, "/_search", &json!({"pit": {"id": pit}}));
    assert_eq!(status, 404, "{v}");
    assert_eq!(v["error"]["type"], "search_context_missing_exception");
    assert_eq!(tmp.path().join("data/pit").read_dir().unwrap().count(), 0);
    let (status, v) = delete(&server, "/_pit", &json!({"id": pit}));
    assert_eq!((status, v["num_freed"].as_u64()), (404, Some(0)), "{v}");

    // A SIGKILL with a point in time open: the next start removes its copy, its id
    // answers 404, and the index holds what was acknowledged.
    let (status, v) = send("POST", &server.url("/k8s/_pit?keep_alive=1m"), None, &[]);
    assert_eq!(status, 200, "{v}");
    let open = v["id"].as_str().unwrap().to_owned();
    let mut server = server;
    server.kill();
    assert_eq!(tmp.path().join("data/pit").read_dir().unwrap().count(), 1);
    let server = TestServer::start(tmp.path(), &[]);
    assert!(!tmp.path().join("data/pit").exists());
    let (status, _) = post(&server, "/_search", &json!({"pit": {"id": open}}));
    assert_eq!(status, 404);
    assert_eq!(server.get("/k8s/_count").1["count"].as_u64(), Some(live));
}

#[test]
fn scroll_pages_past_the_result_window() {
    let tmp = tempfile::tempdir().unwrap();
    let server = TestServer::start(tmp.path(), &[]);
    assert_eq!(server.put_json("/k8s", &k8s_mapping()).0, 200);
    let (status, _) = server.bulk("/k8s/_bulk", &k8s_bulk(12_000, 100, T0, None));
    assert_eq!(status, 200);
    let (status, v) = post(
        &server,
        "/k8s/_search?scroll=1m",
        &json!({"size": 1_000, "aggs": {"pods": {"cardinality": {"field": "k8s.pod.name"}}}}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["aggregations"]["pods"]["value"].as_f64(), Some(100.0));
    let id = v["_scroll_id"].as_str().unwrap().to_owned();
    let mut ids: HashSet<String> = HashSet::new();
    let mut page = v;
    let mut pages = 0;
    loop {
        let hits = page["hits"]["hits"].as_array().unwrap().clone();
        if hits.is_empty() {
            break;
        }
        pages += 1;
        assert_eq!(page["hits"]["total"]["value"], 12_000);
        for h in hits {
            assert!(ids.insert(h["_id"].as_str().unwrap().to_owned()), "{h}");
        }
        // Writes meanwhile are not in the scroll.
        if pages == 3 {
            let (status, _) = server.bulk("/k8s/_bulk", &k8s_bulk(50, 5, T0 + 86_400_000, None));
            assert_eq!(status, 200);
        }
        let (status, v) = post(
            &server,
            "/_search/scroll",
            &json!({"scroll": "1m", "scroll_id": id}),
        );
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["_scroll_id"], id.as_str());
        assert!(
            v.get("aggregations").is_none(),
            "aggregations come with the first page only"
        );
        page = v;
    }
    assert_eq!((pages, ids.len()), (12, 12_000));
    let (status, v) = delete(&server, "/_search/scroll", &json!({"scroll_id": [id]}));
    assert_eq!((status, v["num_freed"].as_u64()), (200, Some(1)), "{v}");
    let (status, _) = post(
        &server,
        "/_search/scroll",
        &json!({"scroll": "1m", "scroll_id": id}),
    );
    assert_eq!(status, 404);
    // A scroll does not take `from`, `search_after` or a bad keep-alive.
    for body in [json!({"from": 5}), json!({"search_after": [T0, "k8s/x"]})] {
        let (status, v) = post(&server, "/k8s/_search?scroll=1m", &body);
        assert_eq!(status, 400, "{v}");
    }
    let (status, _) = post(&server, "/k8s/_search?scroll=2d", &json!({}));
    assert_eq!(status, 400);
}

#[test]
fn points_in_time_expire_are_bounded_and_stay_with_their_tenant() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("server.toml");
    std::fs::write(
        &cfg,
        "[[users]]\nname = \"alice\"\npassword = \"pw-a\"\nindices = [\"alice-*\"]\n\
         [[users]]\nname = \"bob\"\npassword = \"pw-b\"\nindices = [\"bob-*\"]\n",
    )
    .unwrap();
    let server = TestServer::start(tmp.path(), &["--config", cfg.to_str().unwrap()]);
    let alice = [
        ("authorization", "Basic YWxpY2U6cHctYQ=="),
        ("content-type", "application/json"),
    ];
    let bob = [
        ("authorization", "Basic Ym9iOnB3LWI="),
        ("content-type", "application/json"),
    ];
    let mapping = k8s_mapping().to_string();
    let (status, _) = send(
        "PUT",
        &server.url("/alice-k8s"),
        Some(mapping.as_bytes()),
        &alice,
    );
    assert_eq!(status, 200);
    let body = k8s_bulk(20, 5, T0, None);
    let (status, _) = send(
        "POST",
        &server.url("/alice-k8s/_bulk"),
        Some(&body),
        &[alice[0], ("content-type", "application/x-ndjson")],
    );
    assert_eq!(status, 200);
    let (status, v) = send(
        "POST",
        &server.url("/alice-k8s/_pit?keep_alive=1m"),
        None,
        &alice,
    );
    assert_eq!(status, 200, "{v}");
    let pit = v["id"].as_str().unwrap().to_owned();
    let search = json!({"pit": {"id": pit}}).to_string();
    let (status, v) = send(
        "POST",
        &server.url("/_search"),
        Some(search.as_bytes()),
        &alice,
    );
    assert_eq!(
        (status, v["hits"]["total"]["value"].as_u64()),
        (200, Some(20)),
        "{v}"
    );
    // Bob holds the id and still reads nothing, nor frees it.
    let (status, v) = send(
        "POST",
        &server.url("/_search"),
        Some(search.as_bytes()),
        &bob,
    );
    assert_eq!(status, 403, "{v}");
    let free = json!({"id": pit}).to_string();
    let (status, _) = send("DELETE", &server.url("/_pit"), Some(free.as_bytes()), &bob);
    assert_eq!(status, 403);
    let (status, _) = send(
        "POST",
        &server.url("/bob-x/_pit?keep_alive=1m"),
        None,
        &alice,
    );
    assert_eq!(status, 403);

    // A keep-alive passes: gone.
    let (status, v) = send(
        "POST",
        &server.url("/alice-k8s/_pit?keep_alive=1s"),
        None,
        &alice,
    );
    assert_eq!(status, 200, "{v}");
    let short = v["id"].as_str().unwrap().to_owned();
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    let body = json!({"pit": {"id": short}}).to_string();
    let (status, v) = send(
        "POST",
        &server.url("/_search"),
        Some(body.as_bytes()),
        &alice,
    );
    assert_eq!(status, 404, "{v}");
    // No keep-alive, or one over a day: 400.
    for q in ["", "?keep_alive=25h", "?keep_alive=soon"] {
        let (status, _) = send(
            "POST",
            &server.url(&format!("/alice-k8s/_pit{q}")),
            None,
            &alice,
        );
        assert_eq!(status, 400, "{q}");
    }
    // Bounded: 64 open at once, then 429 until one is freed.
    let mut ids = vec![pit];
    loop {
        let (status, v) = send(
            "POST",
            &server.url("/alice-k8s/_pit?keep_alive=1m"),
            None,
            &alice,
        );
        if status == 429 {
            assert_eq!(v["error"]["type"], "es_rejected_execution_exception", "{v}");
            break;
        }
        assert_eq!(status, 200, "{v}");
        ids.push(v["id"].as_str().unwrap().to_owned());
        assert!(ids.len() <= 64, "more than 64 open");
    }
    assert_eq!(ids.len(), 64);
    let free = json!({"id": ids[0]}).to_string();
    let (status, _) = send(
        "DELETE",
        &server.url("/_pit"),
        Some(free.as_bytes()),
        &alice,
    );
    assert_eq!(status, 200);
    let (status, _) = send(
        "POST",
        &server.url("/alice-k8s/_pit?keep_alive=1m"),
        None,
        &alice,
    );
    assert_eq!(status, 200);
}
