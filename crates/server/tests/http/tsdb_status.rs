//! `GET /api/v1/status/tsdb`: series counts by metric name, label and label pair, each
//! series once however many segments hold it, limited, filtered by `match[]`, and only
//! over the caller's indices.

use crate::support::{TestServer, send};

#[test]
fn status_tsdb_counts_series_by_metric_label_and_pair() {
    let tmp = tempfile::tempdir().unwrap();
    let server = TestServer::start(tmp.path(), &[]);
    // up: 3 jobs x 2 instances; cpu: 2 hosts; in two requests, refreshed between, and
    // resent (the same series in two segments and the buffer).
    let mut lines = String::new();
    for job in ["a", "b", "c"] {
        for inst in ["i1", "i2"] {
            lines.push_str(&format!(
                "up,job={job},instance={inst} value=1 1764460800000\n"
            ));
        }
    }
    lines.push_str("cpu,host=h1 usage=1 1764460800000\ncpu,host=h2 usage=1 1764460800000\n");
    let write = |body: &str| {
        let (status, v) = send(
            "POST",
            &server.url("/write?db=metrics&precision=ms"),
            Some(body.as_bytes()),
            &[],
        );
        assert_eq!(status, 204, "{v}");
    };
    write(&lines);
    let (status, _) = send("POST", &server.url("/metrics/_refresh"), None, &[]);
    assert_eq!(status, 200);
    write(&lines.replace("1764460800000", "1764460860000"));
    let (status, v) = send("GET", &server.url("/api/v1/status/tsdb"), None, &[]);
    assert_eq!(status, 200, "{v}");
    let d = &v["data"];
    assert_eq!(d["headStats"]["numSeries"], 8, "{v}");
    assert_eq!(d["seriesCountByMetricName"][0]["name"], "up_value", "{v}");
    assert_eq!(d["seriesCountByMetricName"][0]["value"], 6, "{v}");
    assert_eq!(d["seriesCountByMetricName"][1]["value"], 2, "{v}");
    let by_label = |name: &str| {
        d["labelValueCountByLabelName"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].as_u64().unwrap())
    };
    assert_eq!(by_label("job"), Some(3));
    assert_eq!(by_label("instance"), Some(2));
    assert_eq!(by_label("host"), Some(2));
    // limit, and match[].
    let (_, v) = send("GET", &server.url("/api/v1/status/tsdb?limit=1"), None, &[]);
    assert_eq!(
        v["data"]["seriesCountByMetricName"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let (_, v) = send(
        "GET",
        &server.url("/api/v1/status/tsdb?match[]=%7Bjob%3D%22a%22%7D"),
        None,
        &[],
    );
    assert_eq!(v["data"]["headStats"]["numSeries"], 2, "{v}");
    let (status, _) = send("GET", &server.url("/api/v1/status/tsdb?limit=0"), None, &[]);
    assert_eq!(status, 400);
}

#[test]
fn label_apis_answer_past_the_series_limit_from_the_dimension_index() {
    let tmp = tempfile::tempdir().unwrap();
    let server = TestServer::start(tmp.path(), &[]);
    // 100,001 series: one more than the series path lists (in two requests: one may
    // hold 100,000).
    for range in [0..50_000, 50_000..100_001] {
        let mut body = String::with_capacity(2 << 20);
        for i in range {
            body.push_str(&format!("req,pod=p{i} n=1 1764460800000\n"));
        }
        let (status, v) = send(
            "POST",
            &server.url("/write?db=metrics&precision=ms"),
            Some(body.as_bytes()),
            &[],
        );
        assert_eq!(status, 204, "{v}");
    }
    let (status, v) = send("GET", &server.url("/api/v1/labels"), None, &[]);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"], serde_json::json!(["__name__", "pod"]), "{v}");
    let (status, v) = send(
        "GET",
        &server.url("/api/v1/label/__name__/values"),
        None,
        &[],
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"], serde_json::json!(["req_n"]), "{v}");
    let (status, v) = send(
        "GET",
        &server.url("/api/v1/label/pod/values?limit=3"),
        None,
        &[],
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"], serde_json::json!(["p0", "p1", "p10"]), "{v}");
    let (status, v) = send("GET", &server.url("/api/v1/label/pod/values"), None, &[]);
    assert_eq!(status, 200);
    assert_eq!(v["data"].as_array().unwrap().len(), 100_001);
    // Outside the data's time: nothing.
    let (_, v) = send("GET", &server.url("/api/v1/labels?end=1000"), None, &[]);
    assert_eq!(v["data"], serde_json::json!([]), "{v}");
    // With match[], the series path (and its limit) answers.
    let (status, _) = send(
        "GET",
        &server.url("/api/v1/label/pod/values?match[]=req_n"),
        None,
        &[],
    );
    assert_eq!(status, 422);
    let (status, v) = send("GET", &server.url("/api/v1/labels?limit=x"), None, &[]);
    assert_eq!(status, 400, "{v}");
}

/// A `prometheus.MetricMetadata` message, from its field numbers.
fn metadata(kind: u8, family: &str, help: &str, unit: &str) -> Vec<u8> {
    let mut out = vec![0x08, kind];
    for (tag, text) in [(0x12u8, family), (0x22, help), (0x2a, unit)] {
        out.push(tag);
        out.push(u8::try_from(text.len()).unwrap());
        out.extend_from_slice(text.as_bytes());
    }
    out
}

#[test]
fn metadata_sent_with_remote_write_is_kept_and_answered() {
    use tidemark_server::metrics::remote_write::{self, WriteRequest};
    let tmp = tempfile::tempdir().unwrap();
    let server = TestServer::start(tmp.path(), &[]);
    let req = |meta: Vec<Vec<u8>>| {
        remote_write::encode(&WriteRequest {
            timeseries: vec![crate::metrics::series(
                "req_total",
                "api",
                &[(1_764_460_800_000, 1.0)],
            )],
            metadata: meta,
        })
    };
    let headers = [
        ("content-type", "application/x-protobuf"),
        ("content-encoding", "snappy"),
        ("x-prometheus-remote-write-version", "0.1.0"),
    ];
    let post = |body: &[u8]| {
        let (status, v) = send("POST", &server.url("/api/v1/write"), Some(body), &headers);
        assert_eq!(status, 204, "{v}");
    };
    // The first request creates the index; the next carries metadata (Prometheus sends
    // it every minute).
    post(&req(Vec::new()));
    post(&req(vec![
        metadata(1, "req_total", "Requests served.", ""),
        metadata(2, "temp", "Temperature.", "celsius"),
    ]));
    let (status, v) = send("GET", &server.url("/api/v1/metadata"), None, &[]);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["data"]["req_total"],
        serde_json::json!([{"type": "counter", "help": "Requests served.", "unit": ""}]),
        "{v}"
    );
    assert_eq!(v["data"]["temp"][0]["unit"], "celsius", "{v}");
    let (_, v) = send(
        "GET",
        &server.url("/api/v1/metadata?metric=temp"),
        None,
        &[],
    );
    assert_eq!(v["data"].as_object().unwrap().len(), 1, "{v}");
    // Kept across a restart.
    drop(server);
    let server = TestServer::start(tmp.path(), &[]);
    let (_, v) = send("GET", &server.url("/api/v1/metadata"), None, &[]);
    assert_eq!(v["data"]["req_total"][0]["type"], "counter", "{v}");
}
