//! Tenant isolation on every route: two users and two API keys, each pair scoped to its
//! own index pattern. Alice writes through every protocol (`_bulk`, line protocol v1 and
//! v2, remote write, OTLP, OpenTSDB's `/api/put`, a document, an index template); then Bob, as a user and as an
//! API key, calls every route the server's router serves (enumerated from
//! `tidemark_server::routes::route_paths`, so a new route is covered without editing this
//! test) with every method and with index expressions that name Alice's indices,
//! wildcards, `_all` and his own. No answer may contain Alice's metric names, label
//! values, documents, index names or counts, and none of Bob's calls may change Alice's
//! data.

use base64::Engine as _;
use serde_json::{Value, json};
use tidemark_server::metrics::remote_write::{Label, Sample, TimeSeries, WriteRequest};

use crate::metrics::{otlp_payloads, rw_headers};
use crate::support::{TestServer, k8s_bulk, k8s_mapping, send, send_raw};

const T0: i64 = 1_764_460_800_000;

/// Words that occur only in Alice's data and in names Bob never sends: any answer to Bob
/// that holds one leaks.
const SECRETS: &[&str] = &[
    "zqsecret",
    "alphasecret",
    "alice-hidden",
    "alice-tplpat",
    "alicesvc",
    "room_temperature",
    "room.temperature",
    "http_requests",
    // The k8s mapping's fields, in Alice's `alice-hidden` only.
    "k8s",
];

fn b64(t: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(t)
}

fn basic(user: &str, pw: &str) -> String {
    format!("Basic {}", b64(&format!("{user}:{pw}")))
}

fn api_key(id: &str, key: &str) -> String {
    format!("ApiKey {}", b64(&format!("{id}:{key}")))
}

fn start(dir: &std::path::Path) -> TestServer {
    let cfg = dir.join("server.toml");
    std::fs::write(
        &cfg,
        "[[users]]\nname = \"alice\"\npassword = \"pw-a\"\nindices = [\"alice-*\"]\n\
         [[users]]\nname = \"bob\"\npassword = \"pw-b\"\nindices = [\"bob-*\"]\n\
         [[api_keys]]\nid = \"ka\"\nkey = \"key-a\"\nindices = [\"alice-*\"]\n\
         [[api_keys]]\nid = \"kb\"\nkey = \"key-b\"\nindices = [\"bob-*\"]\n",
    )
    .unwrap();
    TestServer::start(dir, &["--config", cfg.to_str().unwrap()])
}

fn rw_body(metric: &str, host: &str) -> Vec<u8> {
    let req = WriteRequest {
        timeseries: vec![TimeSeries {
            labels: vec![
                Label {
                    name: "__name__".into(),
                    value: metric.into(),
                },
                Label {
                    name: "host".into(),
                    value: host.into(),
                },
            ],
            samples: vec![Sample {
                value: 42.0,
                timestamp: T0,
            }],
            ..TimeSeries::default()
        }],
        ..WriteRequest::default()
    };
    snap::raw::Encoder::new()
        .compress_vec(&prost::Message::encode_to_vec(&req))
        .unwrap()
}

/// Sends as `auth`; any status is an answer.
fn call(
    s: &TestServer,
    auth: &str,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    extra: &[(&str, &str)],
) -> (u16, String) {
    let mut headers = vec![("authorization", auth)];
    headers.extend_from_slice(extra);
    let (status, _, text) = send_raw(method, &s.url(path), body, &headers);
    (status, text)
}

/// Alice's writes, one per protocol and principal kind; each must be acknowledged.
fn alice_writes(s: &TestServer) {
    let alice = basic("alice", "pw-a");
    let ka = api_key("ka", "key-a");
    let json_ct = [("content-type", "application/json")];
    // An index created by hand and written with `_bulk`, and one document by id.
    let (st, v) = send(
        "PUT",
        &s.url("/alice-hidden"),
        Some(k8s_mapping().to_string().as_bytes()),
        &[("authorization", &alice), json_ct[0]],
    );
    assert_eq!(st, 200, "{v}");
    let (st, text) = call(
        s,
        &alice,
        "POST",
        "/_bulk",
        Some(&k8s_bulk(37, 5, T0, Some("alice-hidden"))),
        &[("content-type", "application/x-ndjson")],
    );
    assert_eq!(st, 200, "{text}");
    assert!(text.contains(r#""errors":false"#), "{text}");
    // An index template a tenant may own (its patterns inside her own).
    let tmpl = json!({"index_patterns": ["alice-tplpat-*"], "template": {"mappings": k8s_mapping()["mappings"]}});
    let (st, text) = call(
        s,
        &ka,
        "PUT",
        "/_index_template/alice-tpl",
        Some(tmpl.to_string().as_bytes()),
        &json_ct,
    );
    assert_eq!(st, 200, "{text}");
    // Line protocol v1 (user) and v2 (API key as a token).
    let (st, text) = call(
        s,
        &alice,
        "POST",
        "/write?db=alice-lp",
        Some(b"zqsecret_cpu,host=alphasecrethost value=42 1764460800000000000\n"),
        &[],
    );
    assert_eq!(st, 204, "{text}");
    let (st, text) = call(
        s,
        "Token ka:key-a",
        "POST",
        "/api/v2/write?bucket=alice-lp2&precision=ms",
        Some(b"zqsecret_mem,host=alphasecrethost used=7 1764460800000\n"),
        &[],
    );
    assert_eq!(st, 204, "{text}");
    // Remote write.
    let (st, text) = call(
        s,
        &alice,
        "POST",
        "/api/v1/write?index=alice-rw",
        Some(&rw_body("zqsecret_rw", "alphasecrethost")),
        &rw_headers(),
    );
    assert_eq!(st, 204, "{text}");
    // OTLP, protobuf, with an API key as a bearer token.
    let otlp = prost::Message::encode_to_vec(&otlp_payloads::request("alicesvc", 0));
    let (st, text) = call(
        s,
        "Bearer ka:key-a",
        "POST",
        "/v1/metrics?index=alice-otlp",
        Some(&otlp),
        &[("content-type", "application/x-protobuf")],
    );
    assert_eq!(st, 200, "{text}");
    // OpenTSDB's `/api/put`.
    let (st, text) = call(
        s,
        &alice,
        "POST",
        "/api/put?index=alice-tsdb",
        Some(
            br#"{"metric":"zqsecret.tsdb","timestamp":1764460800,"value":42,"tags":{"host":"alphasecrethost"}}"#,
        ),
        &[("content-type", "application/json")],
    );
    assert_eq!(st, 204, "{text}");
}

/// What Alice can see of her own data: the counts of her indices and her template.
fn alice_view(s: &TestServer) -> Value {
    let alice = basic("alice", "pw-a");
    let (st, text) = call(s, &alice, "GET", "/_cat/indices?format=json", None, &[]);
    assert_eq!(st, 200, "{text}");
    let mut rows: Vec<Value> = serde_json::from_str(&text).unwrap();
    for r in &mut rows {
        // Sizes change with refreshes and merges; names and counts may not.
        r.as_object_mut()
            .unwrap()
            .retain(|k, _| k == "index" || k == "docs.count");
    }
    let (_, tmpl) = call(s, &alice, "GET", "/_index_template/alice-tpl", None, &[]);
    let (_, q) = call(
        s,
        &alice,
        "GET",
        "/api/v1/query?query=zqsecret_cpu_value&time=1764460800",
        None,
        &[],
    );
    // Her remote-write index as VictoriaMetrics' JSON lines.
    let (st, export) = call(
        s,
        &alice,
        "GET",
        "/api/v1/export?match[]=%7B__name__!%3D%22%22%7D&index=alice-rw",
        None,
        &[],
    );
    assert_eq!(st, 200, "{export}");
    json!({"indices": rows, "template": serde_json::from_str::<Value>(&tmpl).unwrap(), "query": serde_json::from_str::<Value>(&q).unwrap(), "export": export})
}

/// Bob's own data, so that his answers are not empty by accident.
fn bob_writes(s: &TestServer) {
    let (st, text) = call(
        s,
        &basic("bob", "pw-b"),
        "POST",
        "/write?db=bob-lp",
        Some(b"bobcpu,host=bobhost value=1 1764460800000000000\n"),
        &[],
    );
    assert_eq!(st, 204, "{text}");
}

/// Values for a route's path parameters, as Bob would try them.
fn fill(path: &str, safe: bool) -> Vec<String> {
    let index: &[&str] = if safe {
        &["alice-lp", "alice-*", "alice-lp,bob-lp", "nosuch-x"]
    } else {
        &[
            "alice-lp",
            "alice-*",
            "*",
            "_all",
            "*,alice-*",
            "alice-lp,bob-lp",
            "bob-lp",
            "bob-*",
            "a*",
        ]
    };
    let mut out = vec![path.to_owned()];
    for (key, values) in [
        ("{index}", index),
        ("{pattern}", index),
        ("{id}", &["x", "AAAAAAAAAAAAAAAAAAAAAAAAAAA"][..]),
        ("{name}", &["alice-tpl", "host", "__name__", "*"][..]),
    ] {
        if out.iter().any(|p| p.contains(key)) {
            out = out
                .iter()
                .flat_map(|p| values.iter().map(move |v| p.replace(key, v)))
                .collect();
        }
    }
    out
}

const QUERY: &str = "query=%7B__name__%3D~%22.%2B%22%7D&time=1764460800&start=1764457200&end=1764464400&step=60&match[]=%7B__name__%3D~%22.%2B%22%7D&match[]=%7Bhost%3D~%22.%2B%22%7D&format=json&v=true";

fn leaked(text: &str) -> Option<&'static str> {
    SECRETS.iter().copied().find(|w| text.contains(w))
}

/// Bob's sweep over every route as `auth`; returns how many requests were sent.
fn sweep(s: &TestServer, auth: &str) -> usize {
    let bodies: [&[u8]; 3] = [
        b"{}",
        br#"{"query":{"match_all":{}},"size":100,"aggs":{"t":{"terms":{"field":"host"}}}}"#,
        br#"{"docs":[{"_index":"alice-lp","_id":"x"}],"ids":["x"]}"#,
    ];
    let mut sent = 0;
    let paths = tidemark_server::routes::route_paths();
    assert!(paths.len() > 40, "{paths:?}");
    for path in &paths {
        for method in ["GET", "HEAD", "POST", "PUT", "DELETE"] {
            // Writes and deletes are tried on Alice's indices and on names that do not
            // exist: a wildcard delete of Bob's own indices would only empty his view.
            let safe = matches!(method, "PUT" | "DELETE");
            for p in fill(path, safe) {
                let url = if p.contains('?') {
                    format!("{p}&{QUERY}")
                } else {
                    format!("{p}?{QUERY}")
                };
                let with_body: Vec<Option<&[u8]>> = if method == "GET" || method == "POST" {
                    bodies.iter().map(|b| Some(*b)).collect()
                } else {
                    vec![None]
                };
                for body in with_body {
                    let ctypes: &[&str] = if method == "POST" {
                        &["application/json", "application/x-www-form-urlencoded"]
                    } else {
                        &["application/json"]
                    };
                    for &ctype in ctypes {
                        let form_body = QUERY.as_bytes();
                        let b = if ctype.starts_with("application/x-www") {
                            body.map(|_| form_body)
                        } else {
                            body
                        };
                        let (status, text) =
                            call(s, auth, method, &url, b, &[("content-type", ctype)]);
                        sent += 1;
                        assert!(
                            leaked(&text).is_none(),
                            "{method} {url} ({ctype}) answered {status} with {:?}: {text}",
                            leaked(&text)
                        );
                        if p.contains("alice-lp")
                            && !p.contains(',')
                            && status < 300
                            && method != "HEAD"
                        {
                            // An explicit foreign name is refused, or names no data.
                            // A bulk answers per item (Elasticsearch's shape): each item
                            // names the index it was sent for, with its error.
                            let ok = !text.contains("alice-lp\"")
                                || text.contains("security_exception")
                                || text.contains(r#""errors":true"#);
                            assert!(ok, "{method} {url} answered {status}: {text}");
                        }
                    }
                }
            }
        }
    }
    sent
}

#[test]
fn no_tenant_sees_another_tenants_data_on_any_route() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());
    alice_writes(&s);
    bob_writes(&s);
    let before = alice_view(&s);
    // Alice sees her own data (the test would prove nothing otherwise).
    let text = before.to_string();
    for w in [
        "zqsecret_cpu",
        "alphasecrethost",
        "alice-hidden",
        "alice-otlp",
        "alice-rw",
        "zqsecret_rw",
        "alice-tsdb",
    ] {
        assert!(text.contains(w), "alice does not see {w}: {text}");
    }
    assert!(text.contains(r#""docs.count":"37""#), "{text}");

    for auth in [basic("bob", "pw-b"), api_key("kb", "key-b")] {
        // The queries the issue tried, answered empty.
        for path in [
            "/api/v1/query?query=zqsecret_cpu_value&time=1764460800",
            "/api/v1/query_range?query=zqsecret_cpu_value&start=1764457200&end=1764464400&step=60",
        ] {
            let (st, text) = call(&s, &auth, "GET", path, None, &[]);
            assert_eq!(st, 200, "{text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["data"]["result"], json!([]), "{path}: {text}");
        }
        // Bob's own data is there; the counts are his alone.
        let (_, text) = call(&s, &auth, "GET", "/_cat/indices?format=json", None, &[]);
        let rows: Vec<Value> = serde_json::from_str(&text).unwrap();
        let names: Vec<&str> = rows.iter().map(|r| r["index"].as_str().unwrap()).collect();
        assert_eq!(names, ["bob-lp"], "{text}");
        let (_, text) = call(&s, &auth, "GET", "/_cluster/health", None, &[]);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["active_primary_shards"], 1, "{text}");
        let (st, text) = call(
            &s,
            &auth,
            "POST",
            "/*/_count",
            Some(b"{}"),
            &[("content-type", "application/json")],
        );
        assert_eq!(st, 200, "{text}");
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap()["count"],
            1,
            "{text}"
        );
        let (_, text) = call(&s, &auth, "GET", "/api/v1/label/__name__/values", None, &[]);
        assert!(text.contains("bobcpu"), "{text}");
        // An explicit foreign name is 403, whether it exists or not.
        for name in ["alice-lp", "alice-nosuch"] {
            let (st, text) = call(&s, &auth, "GET", &format!("/{name}/_search"), None, &[]);
            assert_eq!(st, 403, "{name}: {text}");
            // An export is refused before anything else is looked at.
            let export = format!("/{name}/_tidemark/export");
            let (st, text) = call(&s, &auth, "POST", &export, Some(b"{}"), &[]);
            assert_eq!(st, 403, "{name}: {text}");
        }
        // Writes to Alice's indices are refused on every protocol.
        let (st, text) = call(
            &s,
            &auth,
            "POST",
            "/write?db=alice-lp",
            Some(b"x,host=h value=1\n"),
            &[],
        );
        assert_eq!(st, 403, "{text}");
        let (st, text) = call(
            &s,
            &auth,
            "POST",
            "/api/v1/write?index=alice-rw",
            Some(&rw_body("bobinto", "h")),
            &rw_headers(),
        );
        assert_eq!(st, 403, "{text}");
        // VictoriaMetrics' imports and export name the index as remote write does.
        for (path, body) in [
            ("/api/v1/import?index=alice-rw", &b"{\"metric\":{\"__name__\":\"bobinto\"},\"values\":[1],\"timestamps\":[1764460800000]}\n"[..]),
            ("/api/v1/import/prometheus?index=alice-rw", b"bobinto 1 1764460800000\n"),
            ("/api/v1/import/csv?index=alice-rw&format=1:metric:bobinto", b"1\n"),
            ("/prometheus/api/v1/import?index=alice-rw", b"{}\n"),
        ] {
            let (st, text) = call(&s, &auth, "POST", path, Some(body), &[]);
            assert_eq!(st, 403, "{path}: {text}");
        }
        for (path, header) in [
            (
                "/api/v1/export?match[]=%7B__name__!%3D%22%22%7D&index=alice-rw",
                None,
            ),
            (
                "/api/v1/export?match[]=%7B__name__!%3D%22%22%7D",
                Some("alice-rw"),
            ),
        ] {
            let extra: Vec<(&str, &str)> = header
                .map(|h| ("x-tidemark-index", h))
                .into_iter()
                .collect();
            let (st, text) = call(&s, &auth, "GET", path, None, &extra);
            assert_eq!(st, 403, "{path}: {text}");
            assert!(leaked(&text).is_none(), "{text}");
        }
        let (st, text) = call(
            &s,
            &auth,
            "POST",
            "/api/put?index=alice-tsdb",
            Some(br#"{"metric":"bobinto","timestamp":1764460800,"value":1,"tags":{"h":"x"}}"#),
            &[("content-type", "application/json")],
        );
        assert_eq!(st, 403, "{text}");
        let (st, text) = call(
            &s,
            &auth,
            "POST",
            "/_bulk",
            Some(&k8s_bulk(2, 1, T0 + 60_000, Some("alice-hidden"))),
            &[("content-type", "application/x-ndjson")],
        );
        assert!(st == 200 && text.contains("security_exception"), "{text}");
        // A template over every index, or over Alice's, is refused.
        for (name, pat) in [("bob-all", "*"), ("alice-tpl", "bob-*"), ("x", "alice-*")] {
            let body = json!({"index_patterns": [pat]}).to_string();
            let (st, text) = call(
                &s,
                &auth,
                "PUT",
                &format!("/_index_template/{name}"),
                Some(body.as_bytes()),
                &[("content-type", "application/json")],
            );
            assert_eq!(st, 403, "{name} {pat}: {text}");
        }

        let sent = sweep(&s, &auth);
        assert!(sent > 1000, "{sent} requests");
    }
    // Nothing Bob sent changed Alice's data.
    assert_eq!(alice_view(&s), before);
}
