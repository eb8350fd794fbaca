//! The metrics protocols over a real socket: remote write into a label-keyed index,
//! exactly once, queried through the Elasticsearch API; bad input refused with nothing
//! stored.

use serde_json::{Value, json};
use tidemark_server::metrics::remote_write::{self, Label, Sample, TimeSeries, WriteRequest};

use crate::support::{TestServer, send, send_raw};

const T0: i64 = 1_764_460_800_000;

pub fn series(name: &str, job: &str, samples: &[(i64, f64)]) -> TimeSeries {
    TimeSeries {
        labels: vec![
            Label {
                name: "__name__".into(),
                value: name.into(),
            },
            Label {
                name: "job".into(),
                value: job.into(),
            },
        ],
        samples: samples
            .iter()
            .map(|&(timestamp, value)| Sample { value, timestamp })
            .collect(),
        ..TimeSeries::default()
    }
}

pub fn rw_headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("content-type", "application/x-protobuf"),
        ("content-encoding", "snappy"),
        ("x-prometheus-remote-write-version", "0.1.0"),
    ]
}

/// POSTs a remote-write body; returns the status, the created and duplicate counts, the body.
pub fn write(s: &TestServer, path: &str, body: &[u8]) -> (u16, u64, u64, String) {
    let agent = ureq::AgentBuilder::new().build();
    let mut req = agent.post(&s.url(path));
    for (k, v) in rw_headers() {
        req = req.set(k, v);
    }
    let resp = match req.send_bytes(body) {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{e}"),
    };
    let n = |h: &str| resp.header(h).and_then(|v| v.parse().ok()).unwrap_or(0);
    let (created, dup) = (
        n("x-tidemark-samples-created"),
        n("x-tidemark-samples-duplicate"),
    );
    (resp.status(), created, dup, resp.into_string().unwrap())
}

pub fn count(s: &TestServer, index: &str, query: Value) -> u64 {
    let (status, v) = s.post_json(&format!("/{index}/_count"), &json!({ "query": query }));
    assert_eq!(status, 200, "{v}");
    v["count"].as_u64().unwrap()
}

#[test]
fn remote_write_stores_every_sample_once_and_is_searchable() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let stale = f64::from_bits(0x7ff0_0000_0000_0002);
    let req = WriteRequest {
        timeseries: vec![
            series(
                "up",
                "a",
                &[(T0, 1.0), (T0 + 1000, 1.0), (T0 + 2000, stale)],
            ),
            series("up", "b", &[(T0, 0.0)]),
            series("http_requests_total", "a", &[(T0, 10.0), (T0 + 1000, 12.5)]),
        ],
        ..WriteRequest::default()
    };
    let body = remote_write::encode(&req);
    assert_eq!(
        write(&s, "/api/v1/write", &body),
        (204, 6, 0, String::new())
    );
    // A retry (Prometheus resends after a timeout): 204 again, every sample a duplicate.
    assert_eq!(
        write(&s, "/api/v1/write", &body),
        (204, 0, 6, String::new())
    );
    // The same (series, timestamp) with another value: the first value is kept.
    let changed = remote_write::encode(&WriteRequest {
        timeseries: vec![series("up", "b", &[(T0, 5.0)])],
        ..WriteRequest::default()
    });
    assert_eq!(
        write(&s, "/api/v1/write", &changed),
        (204, 0, 1, String::new())
    );

    assert_eq!(count(&s, "metrics", json!({"match_all": {}})), 6);
    assert_eq!(count(&s, "metrics", json!({"term": {"__name__": "up"}})), 4);
    assert_eq!(
        count(
            &s,
            "metrics",
            json!({"bool": {"filter": [{"term": {"job": "a"}}, {"term": {"__name__": "up"}}]}})
        ),
        3
    );
    let (status, v) = s.post_json(
        "/metrics/_search",
        &json!({"size": 0, "query": {"term": {"job": "b"}},
                "aggs": {"names": {"terms": {"field": "__name__"},
                                   "aggs": {"v": {"max": {"field": "value"}}}}}}),
    );
    assert_eq!(status, 200, "{v}");
    let b = &v["aggregations"]["names"]["buckets"][0];
    assert_eq!(b["key"], "up");
    assert_eq!(b["v"]["value"], 0.0, "the first value was kept: {v}");
    let (status, v) = s.post_json(
        "/metrics/_search",
        &json!({"size": 10, "query": {"term": {"__name__": "http_requests_total"}}, "sort": [{"@timestamp": "asc"}]}),
    );
    assert_eq!(status, 200);
    assert_eq!(v["hits"]["hits"][1]["_source"]["value"], 12.5);
    assert_eq!(v["hits"]["hits"][1]["_source"]["job"], "a");

    // Per tenant: the header names another label-keyed index.
    let agent = ureq::AgentBuilder::new().build();
    let mut r = agent.post(&s.url("/api/v1/write"));
    for (k, v) in rw_headers() {
        r = r.set(k, v);
    }
    let resp = r
        .set("x-tidemark-index", "tenant-a")
        .send_bytes(&body)
        .unwrap();
    assert_eq!(resp.status(), 204);
    assert_eq!(count(&s, "tenant-a", json!({"match_all": {}})), 6);
}

/// POSTs a remote-read body; the status and the raw answer.
fn read(s: &TestServer, body: &[u8]) -> (u16, Vec<u8>) {
    let agent = ureq::AgentBuilder::new().build();
    let req = agent
        .post(&s.url("/api/v1/read"))
        .set("content-type", "application/x-protobuf")
        .set("content-encoding", "snappy")
        .set("x-prometheus-remote-read-version", "0.1.0");
    let resp = match req.send_bytes(body) {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{e}"),
    };
    let status = resp.status();
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut resp.into_reader(), &mut out).unwrap();
    (status, out)
}

#[test]
fn remote_read_answers_the_stored_samples_per_query_and_refuses_bad_requests() {
    use tidemark_promql::selector_matchers;
    use tidemark_server::prom::remote_read::{
        LabelMatcher, Query, ReadRequest, decode_response, encode_request,
    };
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let stale = f64::from_bits(0x7ff0_0000_0000_0002);
    let req = WriteRequest {
        timeseries: vec![
            series(
                "up",
                "a",
                &[(T0, 1.0), (T0 + 1000, 0.5), (T0 + 2000, stale)],
            ),
            series("up", "b", &[(T0, 0.0)]),
            series("http_requests_total", "a", &[(T0, 10.0), (T0 + 1000, 12.5)]),
        ],
        ..WriteRequest::default()
    };
    assert_eq!(
        write(&s, "/api/v1/write", &remote_write::encode(&req)).0,
        204
    );
    let up = selector_matchers("up").unwrap();
    let job_a = selector_matchers(r#"{__name__=~"up|http_.*", job="a"}"#).unwrap();
    let body = encode_request(&[
        (&up, T0, T0 + 5000),
        (&job_a, T0 + 1000, T0 + 1000),
        (&selector_matchers("nothing_here").unwrap(), T0, T0 + 5000),
    ]);
    let (status, answer) = read(&s, &body);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let results = decode_response(&answer, 1 << 20).unwrap();
    assert_eq!(results.len(), 3);
    // Query 1: both `up` series, every sample, the stale marker bit for bit.
    let mut q1 = results[0].clone();
    q1.sort_by(|a, b| a.labels.cmp(&b.labels));
    assert_eq!(q1.len(), 2);
    assert_eq!(
        q1[0].labels,
        vec![
            ("__name__".to_owned(), "up".to_owned()),
            ("job".to_owned(), "a".to_owned())
        ]
    );
    assert_eq!(q1[0].samples[..2], [(T0, 1.0), (T0 + 1000, 0.5)]);
    assert_eq!(q1[0].samples[2].1.to_bits(), stale.to_bits());
    assert_eq!(q1[1].samples, vec![(T0, 0.0)]);
    // Query 2: a regex and an equality, one millisecond (inclusive).
    let mut q2: Vec<_> = results[1]
        .iter()
        .map(|s| (s.labels[0].1.clone(), s.samples.clone()))
        .collect();
    q2.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        q2,
        vec![
            ("http_requests_total".to_owned(), vec![(T0 + 1000, 12.5)]),
            ("up".to_owned(), vec![(T0 + 1000, 0.5)]),
        ]
    );
    assert!(results[2].is_empty());

    // Refused with 400: not snappy, not a ReadRequest, only the chunked response type,
    // a bad regex, an unknown matcher type.
    let raw = |r: &ReadRequest| {
        snap::raw::Encoder::new()
            .compress_vec(&prost::Message::encode_to_vec(r))
            .unwrap()
    };
    let q = |t: i32, v: &str| Query {
        start_timestamp_ms: T0,
        end_timestamp_ms: T0 + 1,
        matchers: vec![LabelMatcher {
            r#type: t,
            name: "__name__".into(),
            value: v.into(),
        }],
        hints: None,
    };
    let chunked_only = ReadRequest {
        queries: vec![q(0, "up")],
        accepted_response_types: vec![1],
    };
    for (what, body) in [
        ("not snappy", b"plain bytes".to_vec()),
        (
            "not a ReadRequest",
            snap::raw::Encoder::new().compress_vec(&[0xff; 9]).unwrap(),
        ),
        ("chunked only", raw(&chunked_only)),
        (
            "bad regex",
            raw(&ReadRequest {
                queries: vec![q(2, "(")],
                accepted_response_types: vec![],
            }),
        ),
        (
            "matcher type 9",
            raw(&ReadRequest {
                queries: vec![q(9, "up")],
                accepted_response_types: vec![],
            }),
        ),
    ] {
        let (status, answer) = read(&s, &body);
        assert_eq!(status, 400, "{what}: {}", String::from_utf8_lossy(&answer));
    }
    // Both response types accepted: samples.
    let both = ReadRequest {
        queries: vec![q(0, "up")],
        accepted_response_types: vec![1, 0],
    };
    let (status, answer) = read(&s, &raw(&both));
    assert_eq!(status, 200);
    assert_eq!(decode_response(&answer, 1 << 20).unwrap()[0].len(), 2);
}

#[test]
fn remote_write_refuses_bad_input_storing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &["--max-content-length", "1000000"]);
    let good = remote_write::encode(&WriteRequest {
        timeseries: vec![series("up", "a", &[(T0, 1.0)])],
        ..WriteRequest::default()
    });
    assert_eq!(write(&s, "/api/v1/write", &good).0, 204);

    let raw = prost::Message::encode_to_vec(&WriteRequest {
        timeseries: vec![series("up", "z", &[(T0, 1.0)])],
        ..WriteRequest::default()
    });
    let mut bad_utf8 = raw.clone();
    let at = bad_utf8.windows(2).position(|w| w == b"up").unwrap();
    bad_utf8[at] = 0xff;
    let snappy = |b: &[u8]| snap::raw::Encoder::new().compress_vec(b).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    // A valid series and a bad one in one request: the request is refused whole.
    let mixed = |bad: TimeSeries| {
        remote_write::encode(&WriteRequest {
            timeseries: vec![series("up", "new", &[(T0, 1.0)]), bad],
            ..WriteRequest::default()
        })
    };
    let mut bad_label = series("up", "x", &[(T0, 1.0)]);
    bad_label.labels[1].name = "bad-label".into();
    let mut no_name = series("up", "x", &[(T0, 1.0)]);
    no_name.labels.remove(0);
    // A protobuf of another message: a `_bulk`-like JSON would be caught by snappy; this
    // is an OTLP-shaped message (field 1 holding a message whose field 1 is a message).
    let other = snappy(&[0x0a, 0x06, 0x0a, 0x04, 0x0a, 0x02, 0x08, 0x01]);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "truncated snappy",
            good[..good.len() - 3].to_vec(),
            "snappy",
        ),
        ("not snappy", raw.clone(), "snappy"),
        ("another message", other, "__name__"),
        ("invalid UTF-8", snappy(&bad_utf8), "UTF-8"),
        ("bad label name", mixed(bad_label), "bad-label"),
        ("no metric name", mixed(no_name), "__name__"),
        (
            "far future",
            mixed(series("up", "f", &[(now + 86_400_000, 1.0)])),
            "ahead of the server's clock",
        ),
    ];
    for (what, body, needle) in cases {
        let (status, _, _, text) = write(&s, "/api/v1/write", &body);
        assert_eq!(status, 400, "{what}: {text}");
        assert!(text.contains(needle), "{what}: {text} lacks {needle}");
    }
    // Remote write 2.0 is refused as the specification asks.
    let (status, _, text) = send_raw(
        "POST",
        &s.url("/api/v1/write"),
        Some(&good),
        &[
            (
                "content-type",
                "application/x-protobuf;proto=io.prometheus.write.v2.Request",
            ),
            ("content-encoding", "snappy"),
            ("x-prometheus-remote-write-version", "2.0.0"),
        ],
    );
    assert_eq!(status, 415, "{text}");
    // A body over the limit, and a small body claiming a huge decompressed size.
    let (status, _, _, _) = write(&s, "/api/v1/write", &vec![0u8; 2_000_000]);
    assert_eq!(status, 413);
    let (status, _, _, text) = write(&s, "/api/v1/write", &[0xff, 0xff, 0xff, 0x7f, 0x00]);
    assert_eq!(status, 413, "{text}");
    // The same limit on the other metrics endpoints (plain and gzip-expanded).
    let big = vec![b'x'; 2_000_000];
    for (path, ctype) in [
        ("/write?db=big", "text/plain"),
        ("/api/v2/write?bucket=big", "text/plain"),
        ("/v1/metrics", "application/x-protobuf"),
    ] {
        let (status, _, text) =
            send_raw("POST", &s.url(path), Some(&big), &[("content-type", ctype)]);
        assert_eq!(status, 413, "{path}: {text}");
        let (status, _, text) = send_raw(
            "POST",
            &s.url(path),
            Some(&gzip(&big)),
            &[("content-type", ctype), ("content-encoding", "gzip")],
        );
        assert_eq!(status, 413, "{path} gzip: {text}");
    }
    // NaN and ±Inf are valid Prometheus values.
    let special = remote_write::encode(&WriteRequest {
        timeseries: vec![series(
            "special",
            "a",
            &[
                (T0, f64::NAN),
                (T0 + 1, f64::INFINITY),
                (T0 + 2, f64::NEG_INFINITY),
            ],
        )],
        ..WriteRequest::default()
    });
    assert_eq!(write(&s, "/api/v1/write", &special).0, 204);
    // Nothing of the refused requests was stored; the server still answers.
    assert_eq!(count(&s, "metrics", json!({"match_all": {}})), 4);
    assert_eq!(send("GET", &s.url("/"), None, &[]).0, 200);

    // An index with a declared mapping does not take labelled samples.
    assert_eq!(
        s.put_json(
            "/mapped",
            &json!({"mappings": {"properties": {"h": {"type": "keyword", "time_series_dimension": true}}}})
        )
        .0,
        200
    );
    let (status, _, _, text) = write(&s, "/api/v1/write?index=mapped", &good);
    assert_eq!(status, 400);
    assert!(text.contains("label-keyed"), "{text}");
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[test]
fn line_protocol_v1_and_v2_exactly_once_bad_lines_named() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let (status, _, _) = send_raw("GET", &s.url("/ping"), None, &[]);
    assert_eq!(status, 204);
    assert_eq!(s.get("/health").1["status"], "pass");
    let body = "# a comment\n\
        cpu,host=a,region=eu usage=1.5,n=3i,up=t,state=\"ok\" 1764460800000000000\n\
        cpu,host=b usage=2 1764460800000000000\n\
        \n\
        mem,host=a used=7u 1764460801000000000\n";
    let (status, _, text) = send_raw(
        "POST",
        &s.url("/write?db=telegraf&precision=ns&rp=autogen"),
        Some(body.as_bytes()),
        &[],
    );
    assert_eq!(status, 204, "{text}");
    // Sent again (gzip this time): stored once.
    let (status, _, _) = send_raw(
        "POST",
        &s.url("/write?db=telegraf"),
        Some(&gzip(body.as_bytes())),
        &[("content-encoding", "gzip")],
    );
    assert_eq!(status, 204);
    assert_eq!(count(&s, "telegraf", json!({"match_all": {}})), 6);
    assert_eq!(
        count(&s, "telegraf", json!({"term": {"__name__": "cpu_usage"}})),
        2
    );
    let (_, v) = s.post_json(
        "/telegraf/_search",
        &json!({"query": {"bool": {"filter": [{"term": {"host": "a"}}, {"term": {"region": "eu"}}]}}, "size": 10}),
    );
    let names: std::collections::BTreeMap<String, Value> = v["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["_source"]["__name__"].as_str().unwrap().to_owned(),
                h["_source"].clone(),
            )
        })
        .collect();
    assert_eq!(names["cpu_usage"]["value"], 1.5);
    assert_eq!(names["cpu_n"]["value_long"], 3);
    assert_eq!(names["cpu_up"]["value_bool"], true);
    assert_eq!(names["cpu_state"]["value_keyword"], "ok");

    // v2, seconds precision; a bad line in the middle: 400 naming it, the others stored.
    let body = "disk,host=a free=1 1764460800\ndisk,host=b free=abc 1764460800\ndisk,host=c free=3 1764460800\n";
    let (status, _, text) = send_raw(
        "POST",
        &s.url("/api/v2/write?org=o&bucket=b2&precision=s"),
        Some(body.as_bytes()),
        &[],
    );
    assert_eq!(status, 400);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["code"], "invalid");
    let msg = v["message"].as_str().unwrap();
    assert!(
        msg.contains("line 2") && msg.contains("free=abc") && msg.contains("invalid number"),
        "{msg}"
    );
    assert_eq!(count(&s, "b2", json!({"match_all": {}})), 2);
    let (_, v) = s.post_json("/b2/_search", &json!({"size": 1}));
    assert_eq!(
        v["hits"]["hits"][0]["_source"]["@timestamp"],
        "2025-11-30T00:00:00.000Z"
    );

    // Bad input everywhere: no db, bad precision, invalid UTF-8, NaN, far future,
    // broken gzip; each a 400 naming the problem, nothing stored.
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let future = format!("x v=1 {}\n", now_ns + 86_400_000_000_000);
    type Case<'a> = (&'a str, Vec<u8>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case<'_>> = vec![
        ("/write", b"x v=1".to_vec(), vec![], "database is required"),
        (
            "/write?db=bad&precision=y",
            b"x v=1".to_vec(),
            vec![],
            "precision",
        ),
        ("/write?db=bad", b"x,h=\xff v=1".to_vec(), vec![], "UTF-8"),
        (
            "/write?db=bad",
            b"x v=NaN".to_vec(),
            vec![],
            "invalid number",
        ),
        (
            "/write?db=bad",
            b"x v=-Inf".to_vec(),
            vec![],
            "invalid number",
        ),
        (
            "/write?db=bad",
            future.into_bytes(),
            vec![],
            "ahead of the server's clock",
        ),
        (
            "/write?db=bad",
            b"x,value=a v=1".to_vec(),
            vec![],
            "reserved",
        ),
        (
            "/write?db=bad",
            b"not gzip".to_vec(),
            vec![("content-encoding", "gzip")],
            "gzip",
        ),
    ];
    for (path, body, headers, needle) in cases {
        let (status, _, text) = send_raw("POST", &s.url(path), Some(&body), &headers);
        assert_eq!(status, 400, "{path}: {text}");
        assert!(text.contains(needle), "{path}: {text} lacks {needle}");
    }
    assert_eq!(
        s.get("/bad/_count").0,
        404,
        "nothing stored, not even an index"
    );
}

pub mod otlp_payloads {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::metrics::v1::{
        AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
        ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;

    fn kv(k: &str, v: &str) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(v.into())),
            }),
            ..KeyValue::default()
        }
    }

    fn number(ts: u64, v: number_data_point::Value, attrs: Vec<KeyValue>) -> NumberDataPoint {
        NumberDataPoint {
            attributes: attrs,
            time_unix_nano: ts,
            value: Some(v),
            ..NumberDataPoint::default()
        }
    }

    /// A gauge (2 points), a monotonic cumulative sum (1), a histogram (1: 3 buckets,
    /// count, sum) and a gauge point with a far-future time (rejected).
    pub fn request(service: &str, future_ns: u64) -> ExportMetricsServiceRequest {
        let t0 = 1_764_460_800_000_000_000u64;
        let metrics = vec![
            Metric {
                name: "room.temperature".into(),
                unit: "Cel".into(),
                data: Some(metric::Data::Gauge(Gauge {
                    data_points: vec![
                        number(
                            t0,
                            number_data_point::Value::AsDouble(21.5),
                            vec![kv("room", "a")],
                        ),
                        number(
                            t0,
                            number_data_point::Value::AsDouble(19.0),
                            vec![kv("room", "b")],
                        ),
                        number(
                            future_ns,
                            number_data_point::Value::AsDouble(1.0),
                            vec![kv("room", "c")],
                        ),
                    ],
                })),
                ..Metric::default()
            },
            Metric {
                name: "http.requests".into(),
                data: Some(metric::Data::Sum(Sum {
                    data_points: vec![number(t0, number_data_point::Value::AsInt(42), vec![])],
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    is_monotonic: true,
                })),
                ..Metric::default()
            },
            Metric {
                name: "latency".into(),
                data: Some(metric::Data::Histogram(Histogram {
                    data_points: vec![HistogramDataPoint {
                        time_unix_nano: t0,
                        count: 3,
                        sum: Some(0.6),
                        bucket_counts: vec![1, 2, 0],
                        explicit_bounds: vec![0.1, 0.5],
                        ..HistogramDataPoint::default()
                    }],
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                })),
                ..Metric::default()
            },
        ];
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", service)],
                    ..Resource::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics,
                    ..ScopeMetrics::default()
                }],
                ..ResourceMetrics::default()
            }],
        }
    }
}

#[test]
fn otlp_protobuf_and_json_with_partial_success() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let future = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64)
        + 86_400 * 1_000_000_000;
    let proto = prost::Message::encode_to_vec(&otlp_payloads::request("api", future));
    let post = |body: &[u8], ctype: &str, extra: &[(&str, &str)]| {
        let mut h = vec![("content-type", ctype)];
        h.extend_from_slice(extra);
        let agent = ureq::AgentBuilder::new().build();
        let mut req = agent.post(&s.url("/v1/metrics"));
        for (k, v) in &h {
            req = req.set(k, v);
        }
        let resp = match req.send_bytes(body) {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{e}"),
        };
        let status = resp.status();
        let created: u64 = resp
            .header("x-tidemark-samples-created")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut resp.into_reader(), &mut bytes).unwrap();
        (status, created, bytes)
    };
    // Protobuf: 2 gauge samples + 1 sum + 5 histogram samples; the future point rejected.
    let (status, created, body) = post(&proto, "application/x-protobuf", &[]);
    assert_eq!(status, 200);
    assert_eq!(created, 8);
    let answer: opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse =
        prost::Message::decode(body.as_slice()).unwrap();
    let partial = answer.partial_success.unwrap();
    assert_eq!(partial.rejected_data_points, 1);
    assert!(
        partial
            .error_message
            .contains("ahead of the server's clock"),
        "{}",
        partial.error_message
    );
    // Again, gzip: all duplicates.
    let (status, created, _) = post(
        &gzip(&proto),
        "application/x-protobuf",
        &[("content-encoding", "gzip")],
    );
    assert_eq!((status, created), (200, 0));
    assert_eq!(count(&s, "metrics", json!({"match_all": {}})), 8);
    assert_eq!(
        count(
            &s,
            "metrics",
            json!({"term": {"__name__": "room_temperature"}})
        ),
        2
    );
    assert_eq!(
        count(
            &s,
            "metrics",
            json!({"term": {"__name__": "http_requests_total"}})
        ),
        1
    );
    assert_eq!(count(&s, "metrics", json!({"term": {"le": "+Inf"}})), 1);
    let (_, v) = s.post_json(
        "/metrics/_search",
        &json!({"query": {"bool": {"filter": [{"term": {"__name__": "latency_bucket"}}, {"term": {"le": "0.5"}}]}}}),
    );
    assert_eq!(
        v["hits"]["hits"][0]["_source"]["value_long"], 3,
        "cumulative: {v}"
    );
    assert_eq!(v["hits"]["hits"][0]["_source"]["service_name"], "api");

    // OTLP/JSON from the official types' serde (another service: new series).
    let text = serde_json::to_string(&otlp_payloads::request("web", future)).unwrap();
    assert!(
        text.contains("\"timeUnixNano\":\"1764460800000000000\""),
        "{text}"
    );
    let (status, created, body) = post(text.as_bytes(), "application/json", &[]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(created, 8);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["partialSuccess"]["rejectedDataPoints"], "1");
    assert_eq!(
        count(&s, "metrics", json!({"term": {"service_name": "web"}})),
        8
    );

    // Bad input: not protobuf, protobuf of another message, broken JSON, wrong type.
    let rw = remote_write::encode(&WriteRequest {
        timeseries: vec![series("up", "a", &[(T0, 1.0)])],
        ..WriteRequest::default()
    });
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (b"\xff\xff\xff".to_vec(), "application/x-protobuf", "not a valid OTLP"),
        (rw, "application/x-protobuf", "OTLP"),
        (b"{\"resourceMetrics\": [".to_vec(), "application/json", "not valid JSON"),
        (br#"{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "x", "gauge": {"dataPoints": [{"timeUnixNano": "soon"}]}}]}]}]}"#.to_vec(), "application/json", "timeUnixNano"),
        (b"x".to_vec(), "text/plain", "Content-Type"),
        // Another JSON sent to the wrong place (collectd's write_http is an array of
        // value lists): a 400 naming what is missing, never a 200 that stored nothing.
        (br#"{"foo":1}"#.to_vec(), "application/json", "no resourceMetrics"),
        (br#"[{"values":[1],"dstypes":["gauge"]}]"#.to_vec(), "application/json", "resourceMetrics"),
        // Protobuf of unknown fields only (field 5, varint 1) decodes as nothing.
        (b"\x28\x01".to_vec(), "application/x-protobuf", "resource_metrics (field 1)"),
    ];
    for (body, ctype, needle) in cases {
        let (status, _, text) = post(&body, ctype, &[]);
        let text = String::from_utf8_lossy(&text).to_string();
        assert!(
            (400..500).contains(&status),
            "{ctype} {needle}: {status} {text}"
        );
        assert!(text.contains(needle), "{text} lacks {needle}");
    }
    assert_eq!(count(&s, "metrics", json!({"match_all": {}})), 16);
    // An empty export is not an error.
    let (status, created, _) = post(br#"{"resourceMetrics":[]}"#, "application/json", &[]);
    assert_eq!((status, created), (200, 0));
}
