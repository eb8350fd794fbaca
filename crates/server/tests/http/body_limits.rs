//! The request body limit on every write endpoint (`/_bulk`, `/api/v1/write`, `/write`,
//! `/api/v2/write`, `/v1/metrics`): a literal body of 100 MiB + 1 byte against the default
//! `max_content_length` answers `413` naming the limit, in each protocol's shape, with
//! nothing stored and the server's peak RSS (`VmHWM`) not growing by the body (a declared
//! `Content-Length` over the limit is never buffered); a chunked body is cut at the limit;
//! a body just under a (smaller) limit is accepted whole.

use serde_json::Value;
use tidemark_server::metrics::remote_write::{Label, Sample, TimeSeries, WriteRequest};

use crate::metrics::{otlp_payloads, rw_headers};
use crate::support::{TestServer, k8s_bulk, k8s_mapping, send, send_raw};

const T0: i64 = 1_764_460_800_000;
const MIB: u64 = 1024 * 1024;

/// The server's peak resident set (`VmHWM`), KiB.
pub fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn count(s: &TestServer, index: &str) -> u64 {
    let (status, v) = send(
        "POST",
        &s.url(&format!("/{index}/_count")),
        Some(b"{}"),
        &[("content-type", "application/json")],
    );
    if status == 404 {
        return 0;
    }
    assert_eq!(status, 200, "{v}");
    v["count"].as_u64().unwrap()
}

fn rw_request(n: usize, pad: usize) -> Vec<u8> {
    let req = WriteRequest {
        timeseries: vec![TimeSeries {
            labels: vec![
                Label {
                    name: "__name__".into(),
                    value: "big".into(),
                },
                Label {
                    name: "job".into(),
                    value: "limits".into(),
                },
            ],
            samples: (0..n)
                .map(|i| Sample {
                    value: i as f64,
                    timestamp: T0 + i as i64 * 1000,
                })
                .collect(),
            ..TimeSeries::default()
        }],
        ..WriteRequest::default()
    };
    let mut proto = prost::Message::encode_to_vec(&req);
    if pad > 0 {
        // An unknown field (15, length-delimited) of incompressible bytes: receivers skip
        // it, and it makes the snappy body as large as wanted.
        proto.push(15 << 3 | 2);
        let mut n = pad as u64;
        while n >= 0x80 {
            proto.push((n as u8) | 0x80);
            n >>= 7;
        }
        proto.push(n as u8);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        proto.extend((0..pad).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        }));
    }
    snap::raw::Encoder::new().compress_vec(&proto).unwrap()
}

/// A remote-write body of `n` samples whose snappy size and decoded size are at most
/// `size`, the larger of the two within [`SLACK`] bytes of it.
fn rw_body_of(size: usize, n: usize) -> Vec<u8> {
    let sizes = |pad: usize| {
        let b = rw_request(n, pad);
        let raw = snap::raw::decompress_len(&b).unwrap();
        let big = b.len().max(raw);
        (b, big)
    };
    let mut pad = size.saturating_sub(sizes(0).1 + SLACK);
    loop {
        let (b, big) = sizes(pad);
        if big <= size && big + SLACK >= size {
            return b;
        }
        pad = if big > size {
            pad - (big - size).max(1)
        } else {
            pad + (size - big) / 2
        };
    }
}

/// How far under the limit "just under" may be (remote write's body cannot be sized to
/// the byte: its snappy and decoded sizes differ).
const SLACK: usize = 64;

/// A body of exactly `size` bytes for endpoint `i` that would store something were it
/// accepted (remote write: a valid body just under, then zero bytes).
fn over_body(i: usize, size: usize) -> Vec<u8> {
    let mut b = body_of(i, size).0;
    b.resize(size, 0);
    b
}

/// `prefix`, then `fill` bytes up to exactly `size` bytes.
fn padded(prefix: &[u8], fill: u8, size: usize) -> Vec<u8> {
    assert!(prefix.len() < size);
    let mut b = Vec::with_capacity(size);
    b.extend_from_slice(prefix);
    b.resize(size, fill);
    b
}

/// A write endpoint: path, headers, a body of exactly `size` bytes that would store
/// something were it accepted, the index it writes and how many samples that body holds.
struct Endpoint {
    path: &'static str,
    headers: Vec<(&'static str, &'static str)>,
    index: &'static str,
}

fn endpoints() -> Vec<Endpoint> {
    let lp = vec![("content-type", "text/plain")];
    vec![
        Endpoint {
            path: "/k8s/_bulk",
            headers: vec![("content-type", "application/x-ndjson")],
            index: "k8s",
        },
        Endpoint {
            path: "/api/v1/write?index=mrw",
            headers: rw_headers(),
            index: "mrw",
        },
        Endpoint {
            path: "/write?db=mv1",
            headers: lp.clone(),
            index: "mv1",
        },
        Endpoint {
            path: "/api/v2/write?org=o&bucket=mv2&precision=ms",
            headers: lp,
            index: "mv2",
        },
        Endpoint {
            path: "/v1/metrics?index=motlp",
            headers: vec![("content-type", "application/json")],
            index: "motlp",
        },
    ]
}

/// A valid body of exactly (remote write: just under) `size` bytes for endpoint `i`, and
/// the samples or documents it stores.
fn body_of(i: usize, size: usize) -> (Vec<u8>, u64) {
    let lines = |precision_ms: bool| {
        let mut t = String::new();
        for k in 0..100 {
            let ts = T0 + k * 1000;
            let ts = if precision_ms { ts } else { ts * 1_000_000 };
            t.push_str(&format!("limits,host=h{} v={k}.5 {ts}\n", k % 7));
        }
        t.push('#');
        t
    };
    match i {
        0 => {
            let mut b = k8s_bulk(50, 5, T0, None);
            // Trailing JSON whitespace on the last document's line, then its newline.
            b.pop();
            let mut b = padded(&b, b' ', size - 1);
            b.push(b'\n');
            (b, 50)
        }
        1 => (rw_body_of(size, 100), 100),
        2 => (padded(lines(false).as_bytes(), b' ', size), 100),
        3 => (padded(lines(true).as_bytes(), b' ', size), 100),
        _ => {
            let text = serde_json::to_string(&otlp_payloads::request("limits", 0)).unwrap();
            (padded(text.as_bytes(), b' ', size), 8)
        }
    }
}

/// Checks a `413` answer names the limit in the endpoint's shape.
fn assert_413(path: &str, status: u16, body: &str, limit: u64) {
    assert_eq!(status, 413, "{path}: {}", &body[..body.len().min(300)]);
    let named = format!("[{limit} bytes]");
    assert!(body.contains(&named), "{path}: {body}");
    if path.starts_with("/write") {
        let v: Value = serde_json::from_str(body).unwrap();
        assert!(v["error"].is_string(), "{body}");
    } else if path.starts_with("/api/v2/write") {
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["code"], "request too large", "{body}");
    } else if path.starts_with("/v1/metrics") {
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["code"], 3, "{body}");
    } else {
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["status"], 413, "{body}");
    }
}

fn healthy(s: &TestServer) {
    assert_eq!(send("GET", &s.url("/ping"), None, &[]).0, 204);
    assert_eq!(send("GET", &s.url("/_cluster/health"), None, &[]).0, 200);
}

#[test]
fn literal_100_mib_bodies_are_413_with_nothing_stored_and_not_buffered() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let limit = 100 * MIB;
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    healthy(&s);
    let hwm_before = vm_hwm_kib(s.pid());
    let over = usize::try_from(limit + 1).unwrap();
    for (i, e) in endpoints().iter().enumerate() {
        // The body's head is valid data of that protocol: accepted, it would store.
        let body = over_body(i, over);
        assert_eq!(body.len() as u64, limit + 1);
        let (status, _, text) = send_raw("POST", &s.url(e.path), Some(&body), &e.headers);
        assert_413(e.path, status, &text, limit);
        healthy(&s);
        assert_eq!(count(&s, e.index), 0, "{}", e.path);
    }
    let hwm_declared = vm_hwm_kib(s.pid());
    // A chunked body (no Content-Length) is read up to the limit, then refused.
    let chunked = body_of(2, over).0;
    let resp = ureq::AgentBuilder::new()
        .build()
        .post(&s.url("/write?db=mv1"))
        .set("content-type", "text/plain")
        .send(std::io::Cursor::new(chunked));
    let (status, text) = match resp {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(c, r)) => (c, r.into_string().unwrap()),
        Err(e) => panic!("{e}"),
    };
    assert_413("/write", status, &text, limit);
    healthy(&s);
    assert_eq!(count(&s, "mv1"), 0);
    let hwm_chunked = vm_hwm_kib(s.pid());
    // A gzip body whose decoded size is over the limit (a 100 KiB "zip bomb").
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, &body_of(2, over).0).unwrap();
    let gz = gz.finish().unwrap();
    assert!(gz.len() < MIB as usize);
    let (status, _, text) = send_raw(
        "POST",
        &s.url("/write?db=mv1"),
        Some(&gz),
        &[("content-type", "text/plain"), ("content-encoding", "gzip")],
    );
    assert_413("/write", status, &text, limit);
    assert_eq!(count(&s, "mv1"), 0);
    eprintln!(
        "VmHWM of the server: {hwm_before} KiB before, {hwm_declared} KiB after five declared \
         100 MiB + 1 bodies, {hwm_chunked} KiB after a chunked one, {} KiB after a gzip one",
        vm_hwm_kib(s.pid())
    );
    // Declared-length bodies over the limit are drained, never buffered.
    assert!(
        hwm_declared < hwm_before + 32 * 1024,
        "{hwm_before} -> {hwm_declared} KiB"
    );
    // A chunked body is buffered at most to the limit.
    assert!(
        hwm_chunked < hwm_before + (limit / 1024) + 64 * 1024,
        "{hwm_before} -> {hwm_chunked} KiB"
    );
    // And the server still takes writes on every endpoint.
    for (i, e) in endpoints().iter().enumerate() {
        let (body, n) = body_of(i, 20_000);
        let (status, _, text) = send_raw("POST", &s.url(e.path), Some(&body), &e.headers);
        assert!(
            status == 200 || status == 204,
            "{}: {status} {text}",
            e.path
        );
        assert_eq!(count(&s, e.index), n, "{}", e.path);
    }
}

#[test]
fn bodies_at_the_limit_are_stored_one_byte_over_refused() {
    let dir = tempfile::tempdir().unwrap();
    let limit: u64 = 1_000_000;
    let s = TestServer::start(dir.path(), &["--max-content-length", &limit.to_string()]);
    assert_eq!(s.put_json("/k8s", &k8s_mapping()).0, 200);
    let size = usize::try_from(limit).unwrap();
    for (i, e) in endpoints().iter().enumerate() {
        let over = over_body(i, size + 1);
        let (status, _, text) = send_raw("POST", &s.url(e.path), Some(&over), &e.headers);
        assert_413(e.path, status, &text, limit);
        assert_eq!(count(&s, e.index), 0, "{}", e.path);
        let (body, n) = body_of(i, size);
        if i == 1 {
            // Remote write: the larger of the snappy and decoded sizes is just under.
            let raw = snap::raw::decompress_len(&body).unwrap();
            assert!(body.len().max(raw) <= size && body.len().max(raw) + SLACK >= size);
        } else {
            assert_eq!(body.len(), size);
        }
        let (status, _, text) = send_raw("POST", &s.url(e.path), Some(&body), &e.headers);
        assert!(
            status == 200 || status == 204,
            "{}: {status} {text}",
            e.path
        );
        assert_eq!(count(&s, e.index), n, "{}", e.path);
        // Sent again: every sample a duplicate, the count unchanged.
        let (status, _, _) = send_raw("POST", &s.url(e.path), Some(&body), &e.headers);
        assert!(status == 200 || status == 204);
        assert_eq!(count(&s, e.index), n, "{}", e.path);
    }
}
