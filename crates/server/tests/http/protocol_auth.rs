//! Credentials on the metrics protocols, as their clients send them: InfluxDB 1.x `u`/`p`
//! query parameters and Basic auth on `/write`, InfluxDB 2.x `Authorization: Token` on
//! `/api/v2/write`, Prometheus Basic or Bearer on `/api/v1/write`, Bearer on `/v1/metrics`;
//! a `401` in each protocol's error shape, nothing stored, the liveness probes open.

use base64::Engine as _;
use serde_json::{Value, json};
use tidemark_server::metrics::remote_write::{Label, Sample, TimeSeries, WriteRequest};

use crate::metrics::{otlp_payloads, rw_headers};
use crate::support::{TestServer, send, send_raw};

const T0: i64 = 1_764_460_800_000;

fn b64(t: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(t)
}

fn secured(dir: &std::path::Path) -> TestServer {
    let cfg = dir.join("server.toml");
    std::fs::write(
        &cfg,
        "[[users]]\nname = \"alice\"\npassword = \"pw-a\"\nindices = [\"m*\"]\n\
         [[api_keys]]\nid = \"kb\"\nkey = \"sec-b\"\nindices = [\"m*\"]\n",
    )
    .unwrap();
    TestServer::start(dir, &["--config", cfg.to_str().unwrap()])
}

fn count(s: &TestServer, index: &str) -> u64 {
    let basic = format!("Basic {}", b64("alice:pw-a"));
    let (status, v) = send(
        "POST",
        &s.url(&format!("/{index}/_count")),
        Some(b"{}"),
        &[
            ("content-type", "application/json"),
            ("authorization", &basic),
        ],
    );
    if status == 404 {
        return 0;
    }
    assert_eq!(status, 200, "{v}");
    v["count"].as_u64().unwrap()
}

fn rw_body(value: f64) -> Vec<u8> {
    let req = WriteRequest {
        timeseries: vec![TimeSeries {
            labels: vec![
                Label {
                    name: "__name__".into(),
                    value: "up".into(),
                },
                Label {
                    name: "job".into(),
                    value: "auth".into(),
                },
            ],
            samples: vec![
                Sample {
                    value,
                    timestamp: T0,
                },
                Sample {
                    value,
                    timestamp: T0 + 1000,
                },
            ],
            ..TimeSeries::default()
        }],
        ..WriteRequest::default()
    };
    snap::raw::Encoder::new()
        .compress_vec(&prost::Message::encode_to_vec(&req))
        .unwrap()
}

#[test]
fn influx_v1_query_user_and_basic_v2_token() {
    let dir = tempfile::tempdir().unwrap();
    let s = secured(dir.path());
    let line = format!("cpu,host=a usage=1.5 {}\n", T0 * 1_000_000);
    let line2 = format!("cpu,host=b usage=2.5 {}\n", T0 * 1_000_000);

    // The liveness probes answer without credentials, as InfluxDB's do.
    assert_eq!(send("GET", &s.url("/ping"), None, &[]).0, 204);
    assert_eq!(send("HEAD", &s.url("/ping"), None, &[]).0, 204);
    assert_eq!(send("GET", &s.url("/health"), None, &[]).0, 200);

    // v1: no credentials, a wrong password: 401 {"error": ...}, nothing stored.
    for q in [
        "/write?db=m1",
        "/write?db=m1&u=alice&p=nope",
        "/write?db=m1&u=alice",
    ] {
        let (status, v) = send("POST", &s.url(q), Some(line.as_bytes()), &[]);
        assert_eq!(status, 401, "{q}: {v}");
        assert!(
            v["error"]
                .as_str()
                .is_some_and(|e| e.contains("unable to authenticate")),
            "{q}: {v}"
        );
    }
    assert_eq!(count(&s, "m1"), 0);
    // v1: u/p query parameters, then Basic auth (the same point: a duplicate).
    let (status, v) = send(
        "POST",
        &s.url("/write?db=m1&u=alice&p=pw-a"),
        Some(line.as_bytes()),
        &[],
    );
    assert_eq!(status, 204, "{v}");
    let basic = format!("Basic {}", b64("alice:pw-a"));
    let (status, v) = send(
        "POST",
        &s.url("/write?db=m1"),
        Some(format!("{line}{line2}").as_bytes()),
        &[("authorization", &basic)],
    );
    assert_eq!(status, 204, "{v}");
    assert_eq!(count(&s, "m1"), 2);
    // An index outside alice's patterns: 403 in the v1 shape.
    let (status, v) = send(
        "POST",
        &s.url("/write?db=other&u=alice&p=pw-a"),
        Some(line.as_bytes()),
        &[],
    );
    assert_eq!(status, 403, "{v}");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("unauthorized for user [alice]"))
    );

    // v2: `Authorization: Token`, as user:password or as an API key.
    let v2 = "/api/v2/write?org=o&bucket=m2&precision=ns";
    for h in [
        None,
        Some("Token alice:nope".to_owned()),
        Some("Token nobody".to_owned()),
    ] {
        let headers: Vec<(&str, &str)> = h.iter().map(|h| ("authorization", h.as_str())).collect();
        let (status, v) = send("POST", &s.url(v2), Some(line.as_bytes()), &headers);
        assert_eq!(status, 401, "{h:?}: {v}");
        assert_eq!(v["code"], "unauthorized", "{v}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    }
    assert_eq!(count(&s, "m2"), 0);
    let (status, v) = send(
        "POST",
        &s.url(v2),
        Some(line.as_bytes()),
        &[("authorization", "Token alice:pw-a")],
    );
    assert_eq!(status, 204, "{v}");
    let (status, v) = send(
        "POST",
        &s.url(v2),
        Some(line2.as_bytes()),
        &[("authorization", "Token kb:sec-b")],
    );
    assert_eq!(status, 204, "{v}");
    assert_eq!(count(&s, "m2"), 2);
}

#[test]
fn remote_write_and_otlp_take_basic_or_bearer() {
    let dir = tempfile::tempdir().unwrap();
    let s = secured(dir.path());
    let rw = rw_headers();
    let post_rw = |auth: Option<&str>, body: &[u8]| {
        let mut h = rw.clone();
        if let Some(a) = auth {
            h.push(("authorization", a));
        }
        send_raw("POST", &s.url("/api/v1/write?index=m3"), Some(body), &h)
    };
    // No credentials, a wrong bearer token: 401 with a text reason, nothing stored.
    for auth in [None, Some("Bearer kb:wrong"), Some("Bearer")] {
        let (status, _, text) = post_rw(auth, &rw_body(1.0));
        assert_eq!(status, 401, "{auth:?}: {text}");
        assert!(text.starts_with("unable to authenticate"), "{text}");
    }
    assert_eq!(count(&s, "m3"), 0);
    // Prometheus `authorization: {credentials: <encoded API key>}` and `basic_auth`.
    let bearer = format!("Bearer {}", b64("kb:sec-b"));
    let (status, _, text) = post_rw(Some(&bearer), &rw_body(1.0));
    assert_eq!(status, 204, "{text}");
    let basic = format!("Basic {}", b64("alice:pw-a"));
    let (status, _, text) = post_rw(Some(&basic), &rw_body(1.0));
    assert_eq!(status, 204, "{text}");
    assert_eq!(count(&s, "m3"), 2);

    // OTLP: JSON and protobuf refusals are `google.rpc.Status` with code 16.
    let proto = prost::Message::encode_to_vec(&otlp_payloads::request("api", 0));
    let text = serde_json::to_string(&otlp_payloads::request("web", 0)).unwrap();
    let (status, _, body) = send_raw(
        "POST",
        &s.url("/v1/metrics?index=m4"),
        Some(text.as_bytes()),
        &[("content-type", "application/json")],
    );
    assert_eq!(status, 401, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["code"], json!(16), "{v}");
    let agent = ureq::AgentBuilder::new().build();
    let resp = match agent
        .post(&s.url("/v1/metrics?index=m4"))
        .set("content-type", "application/x-protobuf")
        .send_bytes(&proto)
    {
        Err(ureq::Error::Status(401, r)) => r,
        other => panic!("expected a 401, got {other:?}"),
    };
    assert_eq!(resp.header("content-type"), Some("application/x-protobuf"));
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut resp.into_reader(), &mut bytes).unwrap();
    let status: tidemark_server::metrics::otlp::Status =
        prost::Message::decode(bytes.as_slice()).unwrap();
    assert_eq!(status.code, 16);
    assert_eq!(count(&s, "m4"), 0);
    // With a bearer token both are stored.
    let (status, _, body) = send_raw(
        "POST",
        &s.url("/v1/metrics?index=m4"),
        Some(&proto),
        &[
            ("content-type", "application/x-protobuf"),
            ("authorization", "Bearer alice:pw-a"),
        ],
    );
    assert_eq!(status, 200, "{body}");
    let stored = count(&s, "m4");
    assert!(stored > 0);
    let (status, _, body) = send_raw(
        "POST",
        &s.url("/v1/metrics?index=m4"),
        Some(text.as_bytes()),
        &[
            ("content-type", "application/json"),
            ("authorization", &bearer),
        ],
    );
    assert_eq!(status, 200, "{body}");
    assert!(count(&s, "m4") > stored);
}
