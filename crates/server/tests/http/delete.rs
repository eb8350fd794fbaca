//! `POST /api/v1/admin/tsdb/delete_series`: removes exactly the selected samples (one
//! series, part of its time), and the delete holds after a restart and a merge.

use serde_json::Value;

use crate::support::{TestServer, send};

const T0: i64 = 1_764_460_800_000;

/// `count_over_time` of `selector` over everything written, summed.
fn count(server: &TestServer, selector: &str) -> u64 {
    let q = format!("sum(count_over_time({selector}[3h]))");
    let url = server.url(&format!(
        "/api/v1/query?query={}&time={}",
        form_urlencoded::byte_serialize(q.as_bytes()).collect::<String>(),
        (T0 + 7_200_000) / 1000
    ));
    let (status, v) = send("GET", &url, None, &[]);
    assert_eq!(status, 200, "{v}");
    match &v["data"]["result"][0]["value"][1] {
        Value::String(s) => s.parse().unwrap(),
        _ => 0,
    }
}

#[test]
fn delete_series_removes_exactly_the_selected_samples_and_survives_restart_and_merge() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = TestServer::start(tmp.path(), &[]);
    // Three hosts, 100 samples each, one a minute.
    let mut lines = String::new();
    for host in ["a", "b", "c"] {
        for i in 0..100 {
            lines.push_str(&format!(
                "cpu,host={host} usage={i}.5 {}\n",
                T0 + i * 60_000
            ));
        }
    }
    let (status, v) = send(
        "POST",
        &server.url("/write?db=metrics&precision=ms"),
        Some(lines.as_bytes()),
        &[],
    );
    assert_eq!(status, 204, "{v}");
    // host b, minutes 20 to 59.
    let url = server.url(&format!(
        "/api/v1/admin/tsdb/delete_series?match[]={}&start={}&end={}",
        form_urlencoded::byte_serialize(br#"cpu_usage{host="b"}"#).collect::<String>(),
        (T0 + 20 * 60_000) / 1000,
        (T0 + 59 * 60_000) / 1000
    ));
    let (status, _, _) = crate::support::send_raw("POST", &url, None, &[]);
    assert_eq!(status, 204);
    let expect = |server: &TestServer| {
        assert_eq!(count(server, r#"cpu_usage{host="a"}"#), 100);
        assert_eq!(count(server, r#"cpu_usage{host="b"}"#), 60);
        assert_eq!(count(server, r#"cpu_usage{host="c"}"#), 100);
    };
    expect(&server);
    // The same delete again finds nothing more.
    let (status, _, _) = crate::support::send_raw("POST", &url, None, &[]);
    assert_eq!(status, 204);
    expect(&server);
    // A bad selector is a 400 naming it; no match[] is a 400.
    let (status, v) = send(
        "POST",
        &server.url("/api/v1/admin/tsdb/delete_series?match[]=cpu{"),
        None,
        &[],
    );
    assert_eq!(status, 400, "{v}");
    let (status, _) = send(
        "POST",
        &server.url("/api/v1/admin/tsdb/delete_series"),
        None,
        &[],
    );
    assert_eq!(status, 400);
    // Survives a SIGKILL (the tombstones are in the fsynced log), then a merge.
    server.kill();
    let server = TestServer::start(tmp.path(), &[]);
    expect(&server);
    let (status, v) = send("POST", &server.url("/metrics/_refresh"), None, &[]);
    assert_eq!(status, 200, "{v}");
    let (status, v) = send("POST", &server.url("/metrics/_forcemerge"), None, &[]);
    assert_eq!(status, 200, "{v}");
    expect(&server);
    drop(server);
    let server = TestServer::start(tmp.path(), &[]);
    expect(&server);
}
