//! Graphite plaintext and OpenTSDB over real sockets: lines written to the TCP
//! listeners of the `tidemark-server` binary (tagged and untagged Graphite, OpenTSDB
//! `put`, lines cut across packets, malformed and over-long lines counted), `POST
//! /api/put` as OpenTSDB answers it, every sample stored once (a resent batch is all
//! duplicates), read back through the Prometheus query API.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{TestServer, send_raw};

/// 2025-11-30T00:00:00Z, in seconds.
const T0: i64 = 1_764_460_800;

/// Starts a server with both listeners on free ports; `extra_config` is added to its
/// config file. Returns the server and the Graphite and OpenTSDB addresses.
fn start(dir: &Path, extra_config: &str) -> (TestServer, String, String) {
    let cfg = dir.join("server.toml");
    let flush = if extra_config.contains("tcp_flush_interval_ms") {
        ""
    } else {
        "tcp_flush_interval_ms = 200\n"
    };
    std::fs::write(
        &cfg,
        format!(
            "graphite_listen = \"127.0.0.1:0\"\nopentsdb_listen = \"127.0.0.1:0\"\n{flush}{extra_config}"
        ),
    )
    .unwrap();
    let s = TestServer::start(dir, &["--config", cfg.to_str().unwrap()]);
    let port_file = dir.join(format!("port-{}", std::process::id()));
    let read = |ext: &str| {
        std::fs::read_to_string(format!("{}.{ext}", port_file.display()))
            .unwrap()
            .trim()
            .to_owned()
    };
    let (g, t) = (read("graphite"), read("opentsdb"));
    (s, g, t)
}

/// Sends `chunks` over one connection, pausing between them, then closes it.
fn send_tcp(addr: &str, chunks: &[&[u8]]) {
    let mut c = TcpStream::connect(addr).unwrap();
    for (i, chunk) in chunks.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(30));
        }
        c.write_all(chunk).unwrap();
    }
    c.shutdown(std::net::Shutdown::Write).unwrap();
    // Wait for the server to close its side: it has read everything.
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
}

/// A counter of `GET /metrics`, `name{labels}` as written there.
fn counter(s: &TestServer, series: &str) -> u64 {
    let (status, _, text) = send_raw("GET", &s.url("/metrics"), None, &[]);
    assert_eq!(status, 200, "{text}");
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
}

fn tcp(protocol: &str, what: &str, result: &str) -> String {
    format!("tidemark_tcp_{what}_total{{protocol=\"{protocol}\",result=\"{result}\"}}")
}

/// Waits until `protocol`'s listener has counted `lines` lines (ok and bad) and written
/// the samples of the ok ones (created, duplicate or replaced).
fn wait_written(s: &TestServer, protocol: &str, lines: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ok = counter(s, &tcp(protocol, "lines", "ok"));
        let bad = counter(s, &tcp(protocol, "lines", "bad"));
        let written: u64 = ["created", "duplicate", "replaced", "rejected", "dropped"]
            .iter()
            .map(|r| counter(s, &tcp(protocol, "samples", r)))
            .sum();
        if ok + bad >= lines && written >= ok {
            assert_eq!(ok + bad, lines, "more lines counted than sent");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{protocol}: {ok} ok + {bad} bad lines, {written} samples written, of {lines} lines"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `GET /api/v1/<path>` with the given parameters; the `data` of a success.
fn prom(s: &TestServer, path: &str, params: &[(&str, &str)]) -> Value {
    let q: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish();
    let (status, _, text) = send_raw("GET", &s.url(&format!("/api/v1/{path}?{q}")), None, &[]);
    assert_eq!(status, 200, "{path} {params:?}: {text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["status"], "success", "{text}");
    v["data"].clone()
}

/// The samples per series of `selector` in the hour before `T0 + 60`, by the series'
/// labels as `name=value` pairs in name order (`count_over_time` drops `__name__`).
fn counts(s: &TestServer, selector: &str) -> Vec<(String, f64)> {
    let time = (T0 + 60).to_string();
    let data = prom(
        s,
        "query",
        &[
            ("query", &format!("count_over_time({selector}[1h])")),
            ("time", &time),
        ],
    );
    let mut out: Vec<(String, f64)> = data["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let labels: std::collections::BTreeMap<&String, &Value> =
                r["metric"].as_object().unwrap().iter().collect();
            let labels: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
                .collect();
            (
                labels.join(","),
                r["value"][1].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The value of `query` at `time` (seconds), one series expected.
fn value_at(s: &TestServer, query: &str, time: i64) -> f64 {
    let data = prom(s, "query", &[("query", query), ("time", &time.to_string())]);
    let result = data["result"].as_array().unwrap();
    assert_eq!(result.len(), 1, "{query}: {data}");
    result[0]["value"][1].as_str().unwrap().parse().unwrap()
}

#[test]
fn graphite_lines_tagged_and_untagged_are_stored_once_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let (s, graphite, _) = start(dir.path(), "");
    let long = format!("app.long {} {T0}\n", "9".repeat(70_000));
    let batch = format!(
        "app.requests.count 10 {T0}\n\
         app.requests.count 11 {t1}\r\n\
         disk.used;host=web-1;mount.point=/var 42.5 {T0}\n\
         disk.used;host=web-2;mount.point=/var 7 {T0}.250\n\
         \n\
         this line is bad\n\
         app.requests.count eleven {T0}\n\
         app.tagged;host 1 {T0}\n\
         app.requests.count 12 {t2}",
        t1 = T0 + 10,
        t2 = T0 + 20,
    );
    // A line cut across writes, an over-long line between two good ones, and a last
    // line without its newline.
    let (head, tail) = batch.as_bytes().split_at(20);
    send_tcp(&graphite, &[head, tail]);
    send_tcp(
        &graphite,
        &[
            format!("app.before 1 {T0}\n").as_bytes(),
            &long.as_bytes()[..40_000],
            &long.as_bytes()[40_000..],
            format!("app.after 2 {T0}\n").as_bytes(),
        ],
    );
    // 7 good lines, 4 bad (three malformed, one too long).
    wait_written(&s, "graphite", 11);
    assert_eq!(counter(&s, &tcp("graphite", "lines", "bad")), 4);
    assert_eq!(counter(&s, &tcp("graphite", "samples", "created")), 7);

    assert_eq!(value_at(&s, "app_requests_count", T0 + 10), 11.0);
    assert_eq!(value_at(&s, "app_after", T0), 2.0);
    assert_eq!(counts(&s, "app_requests_count"), [(String::new(), 3.0)]);
    let series = prom(&s, "series", &[("match[]", "disk_used")]);
    let mut hosts: Vec<String> = series
        .as_array()
        .unwrap()
        .iter()
        .map(|m| format!("{}:{}", m["host"], m["mount_point"]))
        .collect();
    hosts.sort();
    assert_eq!(hosts, [r#""web-1":"/var""#, r#""web-2":"/var""#]);
    // The fractional timestamp kept its milliseconds: the sample is not there 1 ms
    // before, and is at .250.
    let at = |t: &str| {
        prom(
            &s,
            "query",
            &[("query", "disk_used{host=\"web-2\"}[1s]"), ("time", t)],
        )["result"][0]["values"][0][0]
            .clone()
    };
    assert_eq!(at(&format!("{T0}.250")), json!(T0 as f64 + 0.25));
    assert_eq!(at(&format!("{T0}.249")), Value::Null);

    // The same lines again, over a new connection: all duplicates, nothing new.
    send_tcp(&graphite, &[batch.as_bytes()]);
    wait_written(&s, "graphite", 19);
    assert_eq!(counter(&s, &tcp("graphite", "samples", "created")), 7);
    assert_eq!(counter(&s, &tcp("graphite", "samples", "duplicate")), 5);
    assert_eq!(counts(&s, "app_requests_count"), [(String::new(), 3.0)]);
    assert_eq!(counts(&s, "disk_used").len(), 2);
    assert!(
        counts(&s, "disk_used").iter().all(|(_, n)| *n == 1.0),
        "{:?}",
        counts(&s, "disk_used")
    );
}

#[test]
fn opentsdb_put_lines_answer_errors_and_version_and_are_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _, tsdb) = start(dir.path(), "opentsdb_index = \"tsdb\"\n");
    let mut c = TcpStream::connect(&tsdb).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let lines = format!(
        "put sys.cpu.user {T0} 42 host=web01  cpu=0\n\
         put sys.cpu.user {ms} 43.5 host=web01 cpu=0\r\n\
         put sys.cpu.user {T0}.250 44 host=web02 cpu=0\n\
         put sys.cpu.user {T0} 1\n\
         put sys.cpu.user {T0} NaN host=web01\n\
         get sys.cpu.user\n\
         version\n",
        ms = T0 * 1000 + 1500,
    );
    c.write_all(lines.as_bytes()).unwrap();
    // OpenTSDB's answers: one `put:` line per bad line, the version line.
    let mut got = String::new();
    let mut buf = [0u8; 4096];
    while got.lines().count() < 4 {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {got:?}");
        got.push_str(std::str::from_utf8(&buf[..n]).unwrap());
    }
    let answers: Vec<&str> = got.lines().collect();
    assert!(
        answers[0].starts_with("put: Need at least one tag"),
        "{got}"
    );
    assert!(answers[1].contains("NaN or Infinite"), "{got}");
    assert!(answers[2].contains("unknown command"), "{got}");
    assert!(answers[3].starts_with("tidemark "), "{got}");
    // `exit` closes the connection.
    c.write_all(b"exit\n").unwrap();
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    wait_written(&s, "opentsdb", 6);
    assert_eq!(counter(&s, &tcp("opentsdb", "samples", "created")), 3);

    // Into `opentsdb_index`.
    let (_, _, text) = send_raw("GET", &s.url("/tsdb/_count"), None, &[]);
    assert!(text.contains(r#""count":3"#), "{text}");
    assert_eq!(
        value_at(&s, "sys_cpu_user{host=\"web01\"}", T0 + 2),
        43.5,
        "the millisecond timestamp"
    );
    assert_eq!(
        counts(&s, "sys_cpu_user"),
        [
            ("cpu=0,host=web01".to_owned(), 2.0),
            ("cpu=0,host=web02".to_owned(), 1.0)
        ]
    );
    // Resent: duplicates.
    send_tcp(&tsdb, &[lines.as_bytes()]);
    wait_written(&s, "opentsdb", 12);
    assert_eq!(counter(&s, &tcp("opentsdb", "samples", "duplicate")), 3);
    assert_eq!(counts(&s, "sys_cpu_user")[0].1, 2.0);
}

fn put(s: &TestServer, query: &str, body: &str) -> (u16, Value, Option<u64>) {
    let agent = ureq::AgentBuilder::new().build();
    let resp = match agent
        .post(&s.url(&format!("/api/put{query}")))
        .set("content-type", "application/json")
        .send_string(body)
    {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{e}"),
    };
    let dup = resp
        .header("x-tidemark-samples-duplicate")
        .and_then(|v| v.parse().ok());
    let status = resp.status();
    let text = resp.into_string().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        dup,
    )
}

#[test]
fn api_put_answers_as_opentsdb_and_stores_each_point_once() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _, _) = start(dir.path(), "");
    let points = json!([
        {"metric": "sys.mem.free", "timestamp": T0, "value": 1024, "tags": {"host": "web01"}},
        {"metric": "sys.mem.free", "timestamp": (T0 + 10) * 1000, "value": "2048.5", "tags": {"host": "web01"}},
    ])
    .to_string();
    assert_eq!(put(&s, "", &points).0, 204);
    // A retry: 204 again, both points duplicates.
    let (status, _, dup) = put(&s, "", &points);
    assert_eq!((status, dup), (204, Some(2)));
    assert_eq!(counts(&s, "sys_mem_free"), [("host=web01".to_owned(), 2.0)]);
    assert_eq!(value_at(&s, "sys_mem_free", T0 + 10), 2048.5);

    // One object; ?summary.
    let one =
        json!({"metric": "sys.mem.used", "timestamp": T0, "value": 5, "tags": {"host": "web01"}});
    let (status, body, _) = put(&s, "?summary", &one.to_string());
    assert_eq!((status, body), (200, json!({"failed": 0, "success": 1})));
    // ?details with a bad point: 400, the others stored, each failure named.
    let mixed = json!([
        {"metric": "sys.mem.used", "timestamp": T0 + 1, "value": 6, "tags": {"host": "web01"}},
        {"metric": "sys.mem.used", "timestamp": T0 + 2, "value": "six", "tags": {"host": "web01"}},
        {"timestamp": T0 + 3, "value": 7, "tags": {"host": "web01"}},
    ]);
    let (status, body, _) = put(&s, "?details", &mixed.to_string());
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        (body["failed"].clone(), body["success"].clone()),
        (json!(2), json!(1))
    );
    assert_eq!(body["errors"][0]["datapoint"], mixed[1]);
    assert!(
        body["errors"][0]["error"]
            .as_str()
            .unwrap()
            .contains("Unable to parse value"),
        "{body}"
    );
    assert!(
        body["errors"][1]["error"]
            .as_str()
            .unwrap()
            .contains("Missing metric"),
        "{body}"
    );
    // Without ?details a failure is a 400 still naming each bad point.
    let (status, body, _) = put(&s, "", &mixed.to_string());
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["error"]["errors"].as_array().unwrap().len(),
        2,
        "{body}"
    );
    assert_eq!(counts(&s, "sys_mem_used")[0].1, 2.0);

    // A body that is not JSON, or cut: 400, nothing stored.
    for bad in [
        "put sys.x 1 1 a=b",
        r#"[{"metric":"sys.cut","timestamp":1764460800,"value":1,"tags":{"a":"b"}},"#,
    ] {
        let (status, body, _) = put(&s, "", bad);
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not OpenTSDB data points"),
            "{body}"
        );
    }
    assert!(counts(&s, "sys_cut").is_empty());
    // ?index= chooses the index.
    assert_eq!(put(&s, "?index=other", &one.to_string()).0, 204);
    let (_, _, text) = send_raw("GET", &s.url("/other/_count"), None, &[]);
    assert!(text.contains(r#""count":1"#), "{text}");
}

#[test]
fn sigterm_writes_the_lines_a_connection_holds() {
    let dir = tempfile::tempdir().unwrap();
    // Lines would wait a minute before being written.
    let cfg = "tcp_flush_interval_ms = 60000\n";
    let (mut s, graphite, _) = start(dir.path(), cfg);
    let mut c = TcpStream::connect(&graphite).unwrap();
    c.write_all(format!("held.a 1 {T0}\nheld.b 2 {T0}\n").as_bytes())
        .unwrap();
    c.flush().unwrap();
    // The server has read them (nothing to see until the interval passes).
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(counter(&s, &tcp("graphite", "lines", "ok")), 0);
    assert!(s.terminate().success());
    drop(c);
    let (s, _, _) = start(dir.path(), cfg);
    assert_eq!(value_at(&s, "held_a", T0), 1.0);
    assert_eq!(value_at(&s, "held_b", T0), 2.0);
}

#[test]
fn with_security_the_listeners_write_only_their_index() {
    let dir = tempfile::tempdir().unwrap();
    let users = "graphite_index = \"carbon\"\n\
                 [[users]]\nname = \"ops\"\npassword = \"pw-o\"\nindices = [\"carbon\"]\n\
                 [[users]]\nname = \"bob\"\npassword = \"pw-b\"\nindices = [\"bob-*\"]\n";
    let (s, graphite, _) = start(dir.path(), users);
    send_tcp(&graphite, &[format!("secured.metric 5 {T0}\n").as_bytes()]);
    let auth = |user: &str, pw: &str| {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pw}"));
        format!("Basic {b64}")
    };
    let query = format!("/api/v1/query?query=secured_metric&time={T0}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, _, text) = send_raw(
            "GET",
            &s.url(&query),
            None,
            &[("authorization", &auth("ops", "pw-o"))],
        );
        if text.contains(r#""value":[1764460800,"5"]"#) {
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_, _, text) = send_raw(
        "GET",
        &s.url(&query),
        None,
        &[("authorization", &auth("bob", "pw-b"))],
    );
    assert!(text.contains(r#""result":[]"#), "{text}");
    // Without credentials the HTTP API stays closed, `/api/put` included.
    let (status, _, text) = send_raw("POST", &s.url("/api/put"), Some(b"{}"), &[]);
    assert_eq!(status, 401, "{text}");
    assert!(
        text.contains(r#""code":401"#),
        "OpenTSDB's error shape: {text}"
    );
}

#[test]
fn idle_and_trickling_connections_are_closed_and_free_their_slots() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let cfg = "tcp_idle_timeout_secs = 1\ntcp_max_connections = 2\n";
    let (s, graphite, _) = start(dir.path(), cfg);
    // One sends a line then goes quiet; one trickles bytes that never end a line.
    let mut quiet = TcpStream::connect(&graphite).unwrap();
    quiet
        .write_all(format!("quiet.one 1 {T0}\n").as_bytes())
        .unwrap();
    let mut trickle = TcpStream::connect(&graphite).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // Both slots are taken: a third connection is closed at once.
    let mut third = TcpStream::connect(&graphite).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(third.read(&mut [0u8; 8]).unwrap_or(0), 0);
    let start_trickle = Instant::now();
    let mut closed = false;
    while start_trickle.elapsed() < Duration::from_secs(10) {
        if trickle.write_all(b"x").is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(closed, "a trickle that ends no line is closed");
    assert!(start_trickle.elapsed() < Duration::from_secs(5));
    quiet
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(
        quiet.read(&mut [0u8; 8]).unwrap_or(0),
        0,
        "the quiet one is closed"
    );
    // Its complete line was written, and the slots are free again.
    assert_eq!(value_at(&s, "quiet_one", T0), 1.0);
    assert_eq!(
        counter(&s, &tcp("graphite", "connections", "idle_closed")),
        2
    );
    send_tcp(&graphite, &[format!("after.idle 2 {T0}\n").as_bytes()]);
    // Two lines and the trickle's cut one, counted bad.
    wait_written(&s, "graphite", 3);
    assert_eq!(counter(&s, &tcp("graphite", "lines", "bad")), 1);
    assert_eq!(value_at(&s, "after_idle", T0), 2.0);
}
