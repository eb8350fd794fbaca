//! `max_series_per_request`: a metrics write of more distinct series than allowed is
//! refused naming the limit (remote write: whole, before its points are built; line
//! protocol: the lines past it, as a partial write; OTLP: the points past it, as a
//! partial success), and a request of a million series costs the server its decoded
//! body, not a million series; label count and length limits name themselves.

use serde_json::json;
use tidemark_server::metrics::remote_write::{self, TimeSeries, WriteRequest};

use crate::body_limits::vm_hwm_kib;
use crate::metrics::{count, series, write};
use crate::support::{TestServer, send_raw};

const T0: i64 = 1_764_460_800_000;

fn request(series_list: Vec<TimeSeries>) -> Vec<u8> {
    remote_write::encode(&WriteRequest {
        timeseries: series_list,
        ..WriteRequest::default()
    })
}

#[test]
fn each_protocol_refuses_series_past_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &["--max-series-per-request", "1000"]);

    // Remote write: 1,001 series refused whole, nothing stored; 1,000 stored.
    let over: Vec<_> = (0..1001)
        .map(|i| series("up", &format!("j{i}"), &[(T0, 1.0)]))
        .collect();
    let (status, created, _, text) = write(&s, "/api/v1/write?index=rw", &request(over));
    assert_eq!((status, created), (400, 0), "{text}");
    assert!(
        text.contains("more than 1000 distinct series (max_series_per_request)"),
        "{text}"
    );
    let (status, _, _) = send_raw("GET", &s.url("/rw/_count"), None, &[]);
    assert_eq!(status, 404, "nothing was stored, not even the index");
    let at: Vec<_> = (0..1000)
        .map(|i| series("up", &format!("j{i}"), &[(T0, 1.0)]))
        .collect();
    let (status, created, _, text) = write(&s, "/api/v1/write?index=rw", &request(at));
    assert_eq!((status, created), (204, 1000), "{text}");
    // Many entries of few series are few series: 2,000 entries, 2 series.
    let split: Vec<_> = (0..2000)
        .map(|i| {
            series(
                "split",
                &format!("j{}", i % 2),
                &[(T0 + i as i64 * 1000, 1.0)],
            )
        })
        .collect();
    let (status, created, _, text) = write(&s, "/api/v1/write?index=rw", &request(split));
    assert_eq!((status, created), (204, 2000), "{text}");

    // Line protocol: the lines past the limit are a partial write naming it.
    let lines: String = (0..1001)
        .map(|i| format!("cpu,host=h{i} value=1 {}\n", T0 * 1_000_000))
        .collect();
    let (status, _, text) = send_raw(
        "POST",
        &s.url("/write?db=lp"),
        Some(lines.as_bytes()),
        &[("content-type", "text/plain")],
    );
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("partial write") && text.contains("max_series_per_request"),
        "{text}"
    );
    assert_eq!(count(&s, "lp", json!({"match_all": {}})), 1000);

    // OTLP: the points past the limit are reported rejected.
    let points: Vec<_> = (0..1001)
        .map(|i| {
            json!({"timeUnixNano": (T0 * 1_000_000).to_string(), "asDouble": 1.0,
                   "attributes": [{"key": "host", "value": {"stringValue": format!("h{i}")}}]})
        })
        .collect();
    let body = json!({"resourceMetrics": [{"scopeMetrics": [{"metrics": [
        {"name": "g", "gauge": {"dataPoints": points}}]}]}]});
    let (status, _, text) = send_raw(
        "POST",
        &s.url("/v1/metrics?index=otlp"),
        Some(body.to_string().as_bytes()),
        &[("content-type", "application/json")],
    );
    assert_eq!(status, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["partialSuccess"]["rejectedDataPoints"], "1", "{text}");
    assert!(text.contains("max_series_per_request"), "{text}");
    assert_eq!(count(&s, "otlp", json!({"match_all": {}})), 1000);
}

#[test]
fn a_million_series_request_is_refused_within_its_decoded_size() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let million: Vec<_> = (0..1_000_000)
        .map(|i| series("m", &format!("job-{i}"), &[(T0, 1.0)]))
        .collect();
    let raw_len = prost::Message::encode_to_vec(&WriteRequest {
        timeseries: million.clone(),
        ..WriteRequest::default()
    })
    .len() as u64;
    let body = request(million);
    let before = vm_hwm_kib(s.pid());
    let (status, created, _, text) = write(&s, "/api/v1/write?index=big", &body);
    assert_eq!((status, created), (400, 0), "{text}");
    assert!(text.contains("more than 100000 distinct series"), "{text}");
    let grew = vm_hwm_kib(s.pid()).saturating_sub(before) * 1024;
    // The body, its decoded bytes and 8 bytes per series hashed, with room for the
    // allocator; a million series written cost ~3 GB before the limit.
    let bound = body.len() as u64 + raw_len + 16 * 1_000_000 + 64 * 1024 * 1024;
    assert!(
        grew <= bound,
        "peak RSS grew {grew} bytes, over {bound} (body {}, decoded {raw_len})",
        body.len()
    );
    assert_eq!(send_raw("GET", &s.url("/big/_count"), None, &[]).0, 404);
    assert_eq!(s.get("/").0, 200);
}

#[test]
fn label_count_and_length_limits_are_400_naming_them() {
    use tidemark_server::metrics::remote_write::{Label, Sample};
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let with_labels = |n: usize, value_len: usize| TimeSeries {
        labels: std::iter::once(Label {
            name: "__name__".into(),
            value: "m".into(),
        })
        .chain((1..n).map(|i| Label {
            name: format!("l{i:03}"),
            value: "v".repeat(value_len),
        }))
        .collect(),
        samples: vec![Sample {
            value: 1.0,
            timestamp: T0,
        }],
        ..TimeSeries::default()
    };
    // At the limits: 64 labels, values of 1,024 bytes.
    let (status, created, _, text) = write(
        &s,
        "/api/v1/write?index=labels",
        &request(vec![with_labels(64, 1024)]),
    );
    assert_eq!((status, created), (204, 1), "{text}");
    for (series, limit) in [
        (with_labels(65, 1), "more than 64 (max_labels_per_series)"),
        (
            with_labels(2, 1025),
            "more than 1024 (max_label_value_bytes)",
        ),
    ] {
        let (status, created, _, text) =
            write(&s, "/api/v1/write?index=labels", &request(vec![series]));
        assert_eq!((status, created), (400, 0), "{text}");
        assert!(text.contains(limit), "{text}");
    }
    let long_name = format!("m,{}=v value=1 {}\n", "k".repeat(257), T0 * 1_000_000);
    let (status, _, text) = send_raw(
        "POST",
        &s.url("/write?db=labels-lp"),
        Some(long_name.as_bytes()),
        &[],
    );
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("max_label_name_bytes"), "{text}");
}

#[test]
fn new_series_past_the_hourly_limit_are_refused_while_known_series_go_on() {
    // The budget is per clock hour: a run straddling an hour's end would see it renewed
    // between the two writes, so a run in an hour's last minute waits for the next.
    let into_hour = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        % 3600;
    if into_hour >= 3540 {
        std::thread::sleep(std::time::Duration::from_secs(3601 - into_hour));
    }
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &["--max-new-series-per-hour", "100"]);
    let at = |from: usize, to: usize, t: i64| -> Vec<TimeSeries> {
        (from..to)
            .map(|i| series("up", &format!("j{i}"), &[(t, 1.0)]))
            .collect()
    };
    let (status, created, _, text) = write(&s, "/api/v1/write?index=h", &request(at(0, 100, T0)));
    assert_eq!((status, created), (204, 100), "{text}");
    // 10 known series and 50 new ones: the known are stored, the new refused by name.
    let mut mixed = at(90, 100, T0 + 1000);
    mixed.extend(at(100, 150, T0 + 1000));
    let (status, _, _, text) = write(&s, "/api/v1/write?index=h", &request(mixed));
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("50 samples rejected (the other 10 stored")
            && text.contains("max_new_series_per_hour"),
        "{text}"
    );
    assert_eq!(count(&s, "h", json!({"match_all": {}})), 110);
}
