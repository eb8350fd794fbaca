//! Inputs that used to overflow a worker's stack, and the deepest JSON bodies: each is
//! answered with a 4xx naming what is wrong, and the server keeps serving.

use serde_json::{Value, json};

use crate::support::{TestServer, k8s_bulk, k8s_mapping, send, send_raw};

const T0: i64 = 1_764_460_800_000;

fn form(s: &TestServer, path: &str, pairs: &[(&str, &str)]) -> (u16, String) {
    let body: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish();
    let (status, _, text) = send_raw(
        "POST",
        &s.url(path),
        Some(body.as_bytes()),
        &[("content-type", "application/x-www-form-urlencoded")],
    );
    (status, text)
}

fn alive(s: &TestServer, after: &str) {
    let (status, v) = s.get("/");
    assert_eq!(
        status, 200,
        "the server stopped answering after {after}: {v}"
    );
}

/// `{"bool":{"must":[ … ]}}` nested `n` deep around a `match_all`.
fn nested_bool(n: usize) -> String {
    let mut q = String::from(r#"{"match_all":{}}"#);
    q.insert_str(0, &r#"{"bool":{"must":["#.repeat(n));
    q.push_str(&"]}}".repeat(n));
    format!(r#"{{"query":{q}}}"#)
}

/// Sub-aggregations nested `n` deep.
fn nested_aggs(n: usize) -> String {
    let open = r#"{"a":{"terms":{"field":"k8s.pod.name"},"aggs":"#.repeat(n);
    format!(r#"{{"size":0,"aggs":{open}{{}}{}}}"#, "}}".repeat(n))
}

#[test]
fn deep_promql_and_json_are_4xx_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    let (_, resp) = s.bulk("/k8s/_bulk", &k8s_bulk(60, 6, T0, None));
    assert_eq!(resp["errors"], false);

    // PromQL: the three queries that aborted the process, on every query endpoint.
    let chain = vec!["1"; 5_000].join("+");
    let parens = "(".repeat(60_000);
    let abs = format!("{}up{}", "abs(".repeat(10_000), ")".repeat(10_000));
    for (q, limit) in [
        (&chain, "max operators per query"),
        (&parens, "max nesting depth"),
        (&abs, "max nesting depth"),
    ] {
        for (path, extra) in [
            ("/api/v1/query", vec![("time", "1764460800")]),
            (
                "/api/v1/query_range",
                vec![
                    ("start", "1764460800"),
                    ("end", "1764464400"),
                    ("step", "60"),
                ],
            ),
        ] {
            let mut pairs = vec![("query", q.as_str())];
            pairs.extend(extra);
            let (status, text) = form(&s, path, &pairs);
            assert_eq!(status, 400, "{path}: {text}");
            assert!(
                text.contains("bad_data") && text.contains(limit),
                "{path}: {text}"
            );
            alive(&s, path);
        }
        let (status, text) = form(&s, "/api/v1/series", &[("match[]", q.as_str())]);
        assert_eq!(status, 400, "series: {text}");
        alive(&s, "/api/v1/series");
    }
    // The largest accepted chain is answered.
    let ok = vec!["1"; 2_001].join("+");
    let (status, text) = form(
        &s,
        "/api/v1/query",
        &[("query", &ok), ("time", "1764460800")],
    );
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"2001\""), "{text}");

    // The query DSL and aggregations nested past JSON's depth limit, and just inside it.
    for (what, body) in [
        ("bool 10,000 deep", nested_bool(10_000)),
        ("aggs 10,000 deep", nested_aggs(10_000)),
        ("bool 60 deep", nested_bool(60)),
        ("aggs 60 deep", nested_aggs(60)),
    ] {
        let (status, v) = send(
            "POST",
            &s.url("/k8s/_search"),
            Some(body.as_bytes()),
            &[("content-type", "application/json")],
        );
        if what.contains("10,000") {
            assert!((400..500).contains(&status), "{what}: {status} {v}");
        } else {
            assert!(
                status == 200 || (400..500).contains(&status),
                "{what}: {status} {v}"
            );
        }
        alive(&s, what);
    }

    // A document nested 10,000 deep in a bulk, a mapping nested 10,000 deep.
    let deep_doc = format!(
        "{{\"create\":{{}}}}\n{{\"@timestamp\":{T0},\"x\":{}1{}}}\n",
        r#"{"a":"#.repeat(10_000),
        "}".repeat(10_000)
    );
    let (status, v) = s.bulk("/k8s/_bulk", deep_doc.as_bytes());
    let refused = (400..500).contains(&status)
        || (status == 200 && v["errors"] == true && v["items"][0]["create"]["status"] == 400);
    assert!(refused, "deep document: {status} {v}");
    alive(&s, "a deep document");
    let deep_mapping = format!(
        r#"{{"mappings":{}{{}}{}}}"#,
        r#"{"properties":{"a":"#.repeat(10_000),
        "}}".repeat(10_000)
    );
    let (status, v) = send(
        "PUT",
        &s.url("/deep"),
        Some(deep_mapping.as_bytes()),
        &[("content-type", "application/json")],
    );
    assert!((400..500).contains(&status), "deep mapping: {status} {v}");
    alive(&s, "a deep mapping");

    // Everything stored before is still there and searchable.
    let (status, v) = s.post_json("/k8s/_count", &json!({"query": {"match_all": {}}}));
    assert_eq!((status, v["count"].clone()), (200, Value::from(60)));
}
