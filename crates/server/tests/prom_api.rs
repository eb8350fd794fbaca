//! The Prometheus query API of the `tidemark-server` binary over a real socket:
//! Grafana's calls replayed (health check `1+1`, buildinfo, `query_range` with a step
//! and `$__rate_interval`-style ranges, label and series lookups), form POSTs, the
//! `/prometheus` prefix, and the error format.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::zombie_processes
)]

#[allow(dead_code)]
#[path = "http/support.rs"]
mod support;

use std::io::Write;

use serde_json::{Value, json};
use support::{TestServer, send};

/// 2025-12-01T00:00:00Z.
const T0: i64 = 1_764_547_200_000;
/// Counter increments per 10 s sample of hosts h1, h2 (site eu) and h3 (site us).
const INCS: [(&str, &str, i64); 3] = [("h1", "eu", 10), ("h2", "eu", 20), ("h3", "us", 40)];

fn start_with_data(dir: &std::path::Path) -> TestServer {
    let s = TestServer::start(dir, &[]);
    let mapping = json!({"mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "site": {"type": "keyword", "time_series_dimension": true},
        "requests": {"type": "long", "time_series_metric": "counter"},
        "temp": {"type": "double", "time_series_metric": "gauge"}
    }}});
    assert_eq!(s.put_json("/metrics", &mapping).0, 200);
    let mut body = Vec::new();
    for i in 0..=60i64 {
        for (host, site, inc) in INCS {
            writeln!(body, "{{\"create\":{{}}}}").unwrap();
            writeln!(
                body,
                "{{\"@timestamp\":{},\"host\":\"{host}\",\"site\":\"{site}\",\"requests\":{},\"temp\":{}}}",
                T0 + i * 10_000,
                i * inc,
                20.0 + i as f64 / 4.0
            )
            .unwrap();
        }
    }
    let (status, resp) = s.bulk("/metrics/_bulk?refresh=true", &body);
    assert_eq!(status, 200, "{resp}");
    assert_eq!(resp["errors"], false, "{resp}");
    s
}

fn form(s: &TestServer, path: &str, pairs: &[(&str, &str)]) -> (u16, Value) {
    let body: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish();
    send(
        "POST",
        &s.url(path),
        Some(body.as_bytes()),
        &[("content-type", "application/x-www-form-urlencoded")],
    )
}

fn get(s: &TestServer, path: &str, pairs: &[(&str, &str)]) -> (u16, Value) {
    let q: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish();
    s.get(&format!("{path}?{q}"))
}

fn secs(ms: i64) -> String {
    format!("{}", ms as f64 / 1000.0)
}

#[test]
fn grafana_calls_are_answered() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_with_data(dir.path());

    // The datasource health check: an instant `1+1` at "now" (float seconds).
    let (status, resp) = get(
        &s,
        "/api/v1/query",
        &[("query", "1+1"), ("time", "1764547200.123")],
    );
    assert_eq!(status, 200, "{resp}");
    assert_eq!(
        resp,
        json!({"status": "success", "data": {"resultType": "scalar", "result": [1764547200.123, "2"]}})
    );
    let (status, resp) = s.get("/api/v1/status/buildinfo");
    assert_eq!(status, 200);
    assert_eq!(resp["status"], "success");
    // The semantics followed: Prometheus 3 (left-open windows, its extrapolation).
    assert!(resp["data"]["version"].as_str().unwrap().starts_with("3."));
    assert!(
        resp["data"]["revision"]
            .as_str()
            .unwrap()
            .contains("PromQL as Prometheus 3")
    );

    // A panel: form POST, as Grafana sends it, with `$__rate_interval` expanded.
    for (prefix, range) in [("", "1m"), ("/prometheus", "1m30s")] {
        let q = format!("sum by (site) (rate(requests[{range}]))");
        let (status, resp) = form(
            &s,
            &format!("{prefix}/api/v1/query_range"),
            &[
                ("query", &q),
                ("start", &secs(T0 + 120_000)),
                ("end", &secs(T0 + 600_000)),
                ("step", "60"),
            ],
        );
        assert_eq!(status, 200, "{resp}");
        assert_eq!(resp["data"]["resultType"], "matrix");
        let result = resp["data"]["result"].as_array().unwrap();
        assert_eq!(result.len(), 2, "{resp}");
        assert_eq!(result[0]["metric"], json!({"site": "eu"}));
        assert_eq!(result[1]["metric"], json!({"site": "us"}));
        for (series, want) in result.iter().zip([3.0, 4.0]) {
            let values = series["values"].as_array().unwrap();
            assert_eq!(values.len(), 9, "{series}");
            assert_eq!(values[0][0], json!((T0 + 120_000) / 1000));
            for v in values {
                let got: f64 = v[1].as_str().unwrap().parse().unwrap();
                assert!(
                    (got - want).abs() <= 1e-9 * want,
                    "{range}: {got} vs {want}"
                );
            }
        }
    }

    // The query editor: metric names, label names and values, series.
    let (_, resp) = s.get("/api/v1/label/__name__/values");
    assert_eq!(resp["data"], json!(["requests", "temp"]));
    let (_, resp) = get(&s, "/api/v1/labels", &[("match[]", "temp")]);
    assert_eq!(resp["data"], json!(["__name__", "host", "site"]));
    let (_, resp) = get(
        &s,
        "/prometheus/api/v1/label/host/values",
        &[
            ("match[]", "requests{site=\"eu\"}"),
            ("start", &secs(T0)),
            ("end", &secs(T0 + 600_000)),
        ],
    );
    assert_eq!(resp["data"], json!(["h1", "h2"]));
    let (_, resp) = form(
        &s,
        "/api/v1/series",
        &[("match[]", "requests{host=~\"h[13]\"}")],
    );
    assert_eq!(
        resp["data"],
        json!([
            {"__name__": "requests", "host": "h1", "site": "eu"},
            {"__name__": "requests", "host": "h3", "site": "us"}
        ])
    );
    let (_, resp) = s.get("/api/v1/metadata");
    assert_eq!(resp["data"]["requests"][0]["type"], "counter");
    assert_eq!(resp["data"]["temp"][0]["type"], "gauge");
    let (_, resp) = get(&s, "/api/v1/query_exemplars", &[("query", "requests")]);
    assert_eq!(resp, json!({"status": "success", "data": []}));

    // An instant vector with RFC 3339 time and the 5-minute lookback.
    let (_, resp) = get(
        &s,
        "/api/v1/query",
        &[
            ("query", "temp{host=\"h1\"}"),
            ("time", "2025-12-01T00:12:00Z"),
        ],
    );
    assert_eq!(resp["data"]["resultType"], "vector");
    assert_eq!(
        resp["data"]["result"][0]["value"],
        json!([1_764_547_920, "35"])
    );
    let (_, resp) = get(
        &s,
        "/api/v1/query",
        &[("query", "temp"), ("time", &secs(T0 + 600_000 + 300_000))],
    );
    assert_eq!(
        resp["data"]["result"],
        json!([]),
        "past the lookback: no sample"
    );
}

#[test]
fn errors_use_the_prometheus_format() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_with_data(dir.path());
    let (status, resp) = get(&s, "/api/v1/query", &[("query", "sum(")]);
    assert_eq!(status, 400);
    assert_eq!(resp["status"], "error");
    assert_eq!(resp["errorType"], "bad_data");
    let (status, resp) = get(
        &s,
        "/api/v1/query",
        &[("query", "mad_over_time(requests[5m])")],
    );
    assert_eq!(status, 400);
    assert!(
        resp["error"].as_str().unwrap().contains("mad_over_time"),
        "{resp}"
    );
    let (status, resp) = get(
        &s,
        "/api/v1/query_range",
        &[("query", "requests"), ("start", "0"), ("end", "60")],
    );
    assert_eq!(status, 400);
    assert!(resp["error"].as_str().unwrap().contains("step"), "{resp}");
    let (status, resp) = get(
        &s,
        "/api/v1/query",
        &[("query", "requests"), ("time", "yesterday")],
    );
    assert_eq!(status, 400, "{resp}");
    let (status, resp) = get(&s, "/api/v1/series", &[]);
    assert_eq!(
        (status, resp["errorType"].clone()),
        (400, json!("bad_data"))
    );
    // Many-to-many matching is an execution error (422).
    let (status, resp) = get(
        &s,
        "/api/v1/query",
        &[
            ("query", "requests + on(site) temp"),
            ("time", &secs(T0 + 600_000)),
        ],
    );
    assert_eq!(status, 422, "{resp}");
    assert_eq!(resp["errorType"], "execution");
}

/// `*_over_time` over a partitioned index with rollups: once the partitions are sealed
/// (the server's maintenance, a minute of grace), `stats=all` shows the rollup buckets
/// read, and the answer equals the one read from raw samples only
/// (`tidemark_rollups=false`).
#[test]
fn window_aggregates_read_rollups_through_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let body = json!({
        "settings": {"index": {"tidemark": {"partitions": {
            "width": "1h", "seal_grace": "1m", "rollups": ["5m", "1h"]
        }}}},
        "mappings": {"properties": {
            "host": {"type": "keyword", "time_series_dimension": true},
            "site": {"type": "keyword", "time_series_dimension": true},
            "temp": {"type": "double", "time_series_metric": "gauge"}
        }}
    });
    let (status, resp) = s.put_json("/rolled", &body);
    assert_eq!(status, 200, "{resp}");
    let mut bulk = Vec::new();
    // Three hours every 10 s (points on every bucket boundary), then one point at 5 h
    // that moves the clock past the first three partitions.
    let mut times: Vec<i64> = (0..3 * 360).map(|i| T0 + i * 10_000).collect();
    times.push(T0 + 5 * 3_600_000);
    for t in times {
        for (host, site, inc) in INCS {
            writeln!(bulk, "{{\"create\":{{}}}}").unwrap();
            writeln!(
                bulk,
                "{{\"@timestamp\":{t},\"host\":\"{host}\",\"site\":\"{site}\",\"temp\":{}}}",
                ((t - T0) / 10_000 * inc % 97) as f64 / 8.0
            )
            .unwrap();
        }
    }
    let (status, resp) = s.bulk("/rolled/_bulk?refresh=true", &bulk);
    assert_eq!(status, 200, "{resp}");
    assert_eq!(resp["errors"], false, "{resp}");
    let q = "sum by (site) (sum_over_time(temp[1h]))";
    let params = |extra: &[(&'static str, &'static str)]| {
        let mut p: Vec<(&str, String)> = vec![
            ("query", q.to_owned()),
            ("start", secs(T0 + 3_600_000)),
            ("end", secs(T0 + 3 * 3_600_000)),
            ("step", "3600".to_owned()),
            ("stats", "all".to_owned()),
        ];
        p.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
        p
    };
    let run = |extra: &[(&'static str, &'static str)]| {
        let p = params(extra);
        let pairs: Vec<(&str, &str)> = p.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (status, v) = get(&s, "/api/v1/query_range", &pairs);
        assert_eq!(status, 200, "{v}");
        v
    };
    // Sealing runs in the write thread's maintenance (every 10 s).
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let rolled = loop {
        let v = run(&[]);
        if v["data"]["stats"]["tidemark"]["rollupBuckets"].as_u64() > Some(0) {
            break v;
        }
        assert!(std::time::Instant::now() < until, "never sealed: {v}");
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let raw = run(&[("tidemark_rollups", "false")]);
    let (rs, ws) = (
        &rolled["data"]["stats"]["tidemark"],
        &raw["data"]["stats"]["tidemark"],
    );
    assert_eq!(ws["rollupBuckets"], 0, "{ws}");
    assert!(ws["rawSamples"].as_u64() > Some(3000), "{ws}");
    // Three hosts x three hours of 1 h buckets at most; raw samples only at 3:00.
    assert!(rs["rollupBuckets"].as_u64() <= Some(9), "{rs}");
    assert!(rs["rawSamples"].as_u64() <= Some(3), "{rs}");
    let series = |v: &Value| -> Vec<(Value, Vec<(f64, f64)>)> {
        let mut out: Vec<_> = v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let pts = s["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| {
                        (
                            p[0].as_f64().unwrap(),
                            p[1].as_str().unwrap().parse().unwrap(),
                        )
                    })
                    .collect();
                (s["metric"].clone(), pts)
            })
            .collect();
        out.sort_by_key(|s| s.0.to_string());
        out
    };
    let (a, b) = (series(&rolled), series(&raw));
    assert_eq!(a.len(), 2, "{rolled}");
    assert_eq!(a.len(), b.len());
    for ((la, pa), (lb, pb)) in a.iter().zip(&b) {
        assert_eq!(la, lb);
        assert_eq!(pa.len(), 3, "{rolled}");
        assert_eq!(pa.len(), pb.len());
        for (x, y) in pa.iter().zip(pb) {
            assert_eq!(x.0, y.0);
            assert!(
                (x.1 - y.1).abs() <= 1e-9 * x.1.abs().max(y.1.abs()),
                "{x:?} {y:?}"
            );
        }
    }
}
