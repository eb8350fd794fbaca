//! VictoriaMetrics' bulk formats over a socket: `/api/v1/export` (JSON lines, streamed)
//! and `/api/v1/import`, `/api/v1/import/prometheus`, `/api/v1/import/csv`, written
//! through the same exactly-once path as remote write.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

use serde_json::Value;

use crate::support::TestServer;

const T0: i64 = 1_764_460_800_000;

/// A series' samples by its labels (sorted `name=value` pairs).
type Dataset = BTreeMap<Vec<(String, String)>, Vec<(i64, f64)>>;

struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    fn tally(&self) -> (u64, u64) {
        let n = |h: &str| self.header(h).unwrap_or("0").parse::<u64>().unwrap();
        (
            n("x-tidemark-samples-created"),
            n("x-tidemark-samples-duplicate"),
        )
    }
}

fn request(method: &str, url: &str, body: Option<&[u8]>, headers: &[(&str, &str)]) -> Answer {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(120))
        .build();
    let mut req = agent.request(method, url);
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let result = match body {
        Some(b) => req.send_bytes(b),
        None => req.call(),
    };
    let resp = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let status = resp.status();
    let headers = resp
        .headers_names()
        .into_iter()
        .filter_map(|n| {
            resp.header(&n)
                .map(|v| (n.to_ascii_lowercase(), v.to_owned()))
        })
        .collect();
    let body = resp.into_string().unwrap_or_default();
    Answer {
        status,
        headers,
        body,
    }
}

fn import(s: &TestServer, path: &str, body: &[u8]) -> Answer {
    request("POST", &s.url(path), Some(body), &[])
}

fn export(s: &TestServer, query: &str) -> Answer {
    let a = request("GET", &s.url(&format!("/api/v1/export?{query}")), None, &[]);
    assert_eq!(a.status, 200, "{}", a.body);
    a
}

const ALL: &str = "match[]=%7B__name__!%3D%22%22%7D";

/// The JSON lines of an export, gathered by series (a series may span lines).
fn parse_export(text: &str) -> Dataset {
    let mut out = Dataset::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        // VictoriaMetrics writes ±Inf and NaN as bare words; this test's data has none.
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let mut labels: Vec<(String, String)> = v["metric"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
            .collect();
        labels.sort();
        let values = v["values"].as_array().unwrap();
        let ts = v["timestamps"].as_array().unwrap();
        assert_eq!(values.len(), ts.len(), "{line}");
        let e = out.entry(labels).or_default();
        for (t, x) in ts.iter().zip(values) {
            e.push((t.as_i64().unwrap(), x.as_f64().unwrap()));
        }
    }
    for samples in out.values_mut() {
        samples.sort_by_key(|s| s.0);
    }
    out
}

/// `series` counters and gauges, `samples` each, 15 s apart, as JSON lines of at most
/// `per_line` samples.
fn dataset(series: usize, samples: usize) -> Dataset {
    let mut out = Dataset::new();
    for i in 0..series {
        let kind = if i % 2 == 0 {
            "requests_total"
        } else {
            "temperature"
        };
        let labels = vec![
            ("__name__".to_owned(), kind.to_owned()),
            ("instance".to_owned(), format!("host-{i}:9100")),
            ("job".to_owned(), format!("job-{}", i % 7)),
        ];
        let mut v = (i * 1000) as f64;
        let samples: Vec<(i64, f64)> = (0..samples)
            .map(|k| {
                v = if i % 2 == 0 {
                    v + (k % 13) as f64 + 0.25
                } else {
                    20.0 + ((i + k) % 100) as f64 / 8.0 - 3.3
                };
                (T0 + k as i64 * 15_000, v)
            })
            .collect();
        out.insert(labels, samples);
    }
    out
}

fn json_lines(data: &Dataset, per_line: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for (labels, samples) in data {
        for chunk in samples.chunks(per_line) {
            let metric: serde_json::Map<String, Value> = labels
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            let line = serde_json::json!({
                "metric": metric,
                "values": chunk.iter().map(|s| s.1).collect::<Vec<_>>(),
                "timestamps": chunk.iter().map(|s| s.0).collect::<Vec<_>>(),
            });
            writeln!(out, "{line}").unwrap();
        }
    }
    out
}

fn total(data: &Dataset) -> usize {
    data.values().map(Vec::len).sum()
}

#[test]
fn export_then_import_into_another_index_gives_equal_series() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let data = dataset(300, 40);
    let a = import(&s, "/api/v1/import?index=vm-src", &json_lines(&data, 17));
    assert_eq!(a.status, 204, "{}", a.body);
    assert_eq!(a.tally(), (total(&data) as u64, 0));
    // Lines of at most 7 samples: each series spans several lines.
    let first = export(&s, &format!("{ALL}&index=vm-src&max_rows_per_line=7"));
    assert!(
        first.body.lines().all(|l| l.matches(',').count() < 40),
        "long line"
    );
    assert_eq!(parse_export(&first.body), data);
    let a = import(&s, "/api/v1/import?index=vm-dst", first.body.as_bytes());
    assert_eq!(a.status, 204, "{}", a.body);
    assert_eq!(a.tally(), (total(&data) as u64, 0));
    let second = export(&s, &format!("{ALL}&index=vm-dst"));
    assert_eq!(parse_export(&second.body), data);
    // Selectors, time bounds (RFC 3339 and unix seconds) and the /prometheus prefix.
    let a = request(
        "POST",
        &s.url("/prometheus/api/v1/export"),
        Some(
            format!(
                "match[]=requests_total{{job=\"job-3\"}}&index=vm-dst&start={}&end=2025-11-30T00:01:00Z",
                T0 / 1000 + 30
            )
            .as_bytes(),
        ),
        &[("content-type", "application/x-www-form-urlencoded")],
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let got = parse_export(&a.body);
    let want: Dataset = data
        .iter()
        .filter(|(l, _)| l[0].1 == "requests_total" && l[2].1 == "job-3")
        .map(|(l, s)| {
            let kept = s
                .iter()
                .copied()
                .filter(|x| x.0 >= T0 + 30_000 && x.0 <= T0 + 60_000)
                .collect();
            (l.clone(), kept)
        })
        .collect();
    assert!(!want.is_empty());
    assert_eq!(got, want);
}

#[test]
fn importing_twice_stores_once_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let data = dataset(20, 30);
    let body = json_lines(&data, 10);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&body).unwrap();
    let gz = gz.finish().unwrap();
    let prom = format!(
        "# HELP up whether up\n# TYPE up gauge\nup{{job=\"a\",instance=\"x\"}} 1 {T0}\nup{{job=\"b\"}} 0 {}\nup{{job=\"c\"}} 1\n",
        T0 + 1000
    );
    let csv = format!("{},h1,0.5,100\n{},h2,0.75,\n", T0 / 1000, T0 / 1000 + 10);
    let csv_path = "/api/v1/import/csv?index=vm-twice&format=1:time:unix_s,2:label:host,3:metric:cpu,4:metric:mem";
    let prom_path = format!(
        "/api/v1/import/prometheus?index=vm-twice&timestamp={}",
        T0 + 5000
    );
    for round in 0..2u64 {
        let a = import(&s, "/api/v1/import?index=vm-twice", &body);
        assert_eq!(a.status, 204, "{}", a.body);
        let n = total(&data) as u64;
        assert_eq!(a.tally(), if round == 0 { (n, 0) } else { (0, n) });
        let a = request(
            "POST",
            &s.url("/api/v1/import?index=vm-twice"),
            Some(&gz),
            &[("content-encoding", "gzip")],
        );
        assert_eq!(a.status, 204, "{}", a.body);
        assert_eq!(a.tally(), (0, n), "gzip: the same samples again");
        let a = import(&s, &prom_path, prom.as_bytes());
        assert_eq!(a.status, 204, "{}", a.body);
        assert_eq!(a.tally(), if round == 0 { (3, 0) } else { (0, 3) });
        let a = import(&s, csv_path, csv.as_bytes());
        assert_eq!(a.status, 204, "{}", a.body);
        assert_eq!(a.tally(), if round == 0 { (3, 0) } else { (0, 3) });
    }
    let got = parse_export(&export(&s, &format!("{ALL}&index=vm-twice")).body);
    assert_eq!(total(&got), total(&data) + 6);
    let up_c = vec![
        ("__name__".to_owned(), "up".to_owned()),
        ("job".to_owned(), "c".to_owned()),
    ];
    assert_eq!(
        got[&up_c],
        vec![(T0 + 5000, 1.0)],
        "the timestamp query arg"
    );
    let mem = vec![
        ("__name__".to_owned(), "mem".to_owned()),
        ("host".to_owned(), "h1".to_owned()),
    ];
    assert_eq!(got[&mem], vec![(T0, 100.0)]);
    // The samples are in PromQL too, through the same index.
    let (st, v) = s.get(&format!(
        "/api/v1/query?query=count(count_over_time(%7B__name__%3D~%22requests_total%7Ctemperature%22%7D%5B1d%5D))&time={}",
        T0 / 1000 + 3600
    ));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["data"]["result"][0]["value"][1], "20", "{v}");
}

#[test]
fn malformed_lines_answer_400_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let good = |i: usize| {
        format!(
            "{{\"metric\":{{\"__name__\":\"m\",\"i\":\"{i}\"}},\"values\":[1],\"timestamps\":[{T0}]}}\n"
        )
    };
    let body = format!(
        "{}{}{{\"metric\":{{\"__name__\":\"m\"}},\"values\":[1,2],\"timestamps\":[{T0}]}}\n{}{{\"metric\":{{\"__name__\":\"m\",\"i\":\"x\"}},\"values\":[1],\"tim",
        good(1),
        good(2),
        good(4)
    );
    let a = import(&s, "/api/v1/import?index=vm-bad", body.as_bytes());
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body.contains("line 3"), "{}", a.body);
    assert!(a.body.contains("pair up"), "{}", a.body);
    assert!(a.body.contains("2 bad lines skipped"), "{}", a.body);
    assert_eq!(a.tally(), (3, 0), "the good lines are stored");
    let got = parse_export(&export(&s, &format!("{ALL}&index=vm-bad")).body);
    assert_eq!(got.len(), 3);
    // The truncated last line is named too.
    let a = import(
        &s,
        "/api/v1/import?index=vm-bad",
        format!(
            "{}{{\"metric\":{{\"__name__\":\"m\"}},\"values\":[1],\"timestamps\":[1",
            good(1)
        )
        .as_bytes(),
    );
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body.contains("line 2"), "{}", a.body);
    // Prometheus text and CSV lines, and the CSV format itself.
    let a = import(
        &s,
        "/api/v1/import/prometheus?index=vm-bad",
        format!("ok 1 {T0}\n\nbad{{a=\"1\" 2\n").as_bytes(),
    );
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body.contains("line 3"), "{}", a.body);
    let a = import(
        &s,
        "/api/v1/import/csv?index=vm-bad&format=1:metric:x,2:time:unix_ms",
        format!("1,{T0}\nabc,{T0}\n").as_bytes(),
    );
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(
        a.body.contains("line 2") && a.body.contains("column 1 (x)"),
        "{}",
        a.body
    );
    for (format, named) in [
        ("1:metric:x,2:time:custom:2006-01-02", "custom:2006-01-02"),
        ("1:metric:x,2:tag:y", "\\\"tag\\\""),
        ("", "format query arg is required"),
    ] {
        let a = import(
            &s,
            &format!("/api/v1/import/csv?index=vm-bad&format={format}"),
            b"1,2\n",
        );
        assert_eq!(a.status, 400, "{}", a.body);
        assert!(a.body.contains(named), "{format}: {}", a.body);
    }
    // A line over the length limit is refused by number, the next one stored.
    let mut long = vec![b'x'; (10 << 20) + 1];
    long.push(b'\n');
    long.extend_from_slice(good(9).as_bytes());
    let a = import(&s, "/api/v1/import?index=vm-bad", &long);
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(
        a.body.contains("line 1") && a.body.contains("longer than"),
        "{}",
        a.body
    );
    assert_eq!(a.tally(), (1, 0));
    // A broken gzip body, invalid UTF-8, an extra label that is not name=value.
    let a = request(
        "POST",
        &s.url("/api/v1/import?index=vm-bad"),
        Some(b"\x1f\x8b\x08\x00garbage"),
        &[("content-encoding", "gzip")],
    );
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body.contains("gzip"), "{}", a.body);
    let a = import(&s, "/api/v1/import?index=vm-bad", b"\xff\xfe\n");
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body.contains("UTF-8"), "{}", a.body);
    let a = import(
        &s,
        "/api/v1/import?index=vm-bad&extra_label=nolabel",
        good(1).as_bytes(),
    );
    assert_eq!(a.status, 400, "{}", a.body);
    // Export arguments.
    for q in [
        "",
        "match[]=up{",
        "match[]=up&start=abc",
        "match[]=up&max_rows_per_line=-1",
    ] {
        let a = request("GET", &s.url(&format!("/api/v1/export?{q}")), None, &[]);
        assert_eq!(a.status, 400, "{q}: {}", a.body);
    }
}

#[test]
fn extra_labels_are_added_to_every_series() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    let a = import(
        &s,
        "/api/v1/import/prometheus?index=vm-extra&extra_label=dc=eu&extra_label=job=new",
        format!("x{{job=\"old\"}} 1 {T0}\n").as_bytes(),
    );
    assert_eq!(a.status, 204, "{}", a.body);
    let got = parse_export(&export(&s, &format!("{ALL}&index=vm-extra")).body);
    let want = vec![
        ("__name__".to_owned(), "x".to_owned()),
        ("dc".to_owned(), "eu".to_owned()),
        ("job".to_owned(), "new".to_owned()),
    ];
    assert_eq!(got.keys().collect::<Vec<_>>(), vec![&want]);
}

/// The raw HTTP/1.1 answer to a GET: status line and headers, and the body's chunks as
/// they were framed (`Transfer-Encoding: chunked`).
fn chunked_get(s: &TestServer, path: &str) -> (String, Vec<Vec<u8>>) {
    let mut conn = std::net::TcpStream::connect(&s.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        s.addr
    )
    .unwrap();
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut rest = &raw[split + 4..];
    let mut chunks = Vec::new();
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap().trim(), 16).unwrap();
        rest = &rest[eol + 2..];
        if size == 0 {
            break;
        }
        chunks.push(rest[..size].to_vec());
        rest = &rest[size + 2..];
    }
    (head, chunks)
}

#[test]
fn the_export_streams_in_bounded_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), &[]);
    // 3,000 series of 60 samples: more series and samples than one read group holds.
    let data = dataset(3000, 60);
    let a = import(&s, "/api/v1/import?index=vm-big", &json_lines(&data, 60));
    assert_eq!(a.status, 204, "{}", a.body);
    let (head, chunks) = chunked_get(&s, &format!("/api/v1/export?{ALL}&index=vm-big"));
    let head = head.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert!(!head.contains("content-length"), "{head}");
    let sizes: Vec<usize> = chunks.iter().map(Vec::len).collect();
    let body_len: usize = sizes.iter().sum();
    assert!(chunks.len() >= 4, "{sizes:?}");
    assert!(sizes.iter().all(|&n| n <= 256 << 10), "{sizes:?}");
    assert!(body_len > 4 << 20, "{body_len}");
    let text = String::from_utf8(chunks.concat()).unwrap();
    assert_eq!(parse_export(&text), data);
}
