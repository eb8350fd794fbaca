//! A bounded loopback load test for the metrics protocols: N clients send an IoT-shaped
//! dataset (devices × 4 metrics, one point every 10 s) as Prometheus remote-write
//! requests, Influx line-protocol bodies or, for comparison, `_bulk` documents of a
//! mapped time-series index (4 metrics per document) (each batch once), then report samples per
//! second, the p50/p99 request latency, and the bytes per sample on disk after a
//! force-merge.
//!
//! ```text
//! cargo run --release -p tidemark-server --example metrics_load -- \
//!     --addr 127.0.0.1:9200 --protocol rw|influx|bulk [--devices 1000] [--points 150] \
//!     [--clients 4] [--batch 4000] [--index NAME]
//! ```
//!
//! Bodies are built (and snappy-compressed) before the clock starts, as a sender's
//! queue would hold them. Only loopback addresses are accepted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tidemark_server::metrics::remote_write::{self, Label, Sample, TimeSeries, WriteRequest};

const METRICS: [&str; 4] = ["temperature", "humidity", "pressure", "battery"];
const T0: i64 = 1_764_460_800_000;

struct Args {
    addr: String,
    protocol: String,
    devices: usize,
    points: usize,
    clients: usize,
    batch: usize,
    index: String,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        addr: "127.0.0.1:9200".into(),
        protocol: "rw".into(),
        devices: 1000,
        points: 150,
        clients: 4,
        batch: 4000,
        index: String::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |v: String, f: &str| v.parse::<usize>().map_err(|e| format!("{f}: {e}"));
        match flag.as_str() {
            "--addr" => a.addr = value()?,
            "--protocol" => a.protocol = value()?,
            "--devices" => a.devices = num(value()?, "--devices")?,
            "--points" => a.points = num(value()?, "--points")?,
            "--clients" => a.clients = num(value()?, "--clients")?,
            "--batch" => a.batch = num(value()?, "--batch")?,
            "--index" => a.index = value()?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let ip: std::net::SocketAddr = a.addr.parse().map_err(|e| format!("--addr: {e}"))?;
    if !ip.ip().is_loopback() {
        return Err("--addr must be a loopback address".into());
    }
    if !matches!(a.protocol.as_str(), "rw" | "influx" | "bulk") {
        return Err("--protocol is rw, influx or bulk".into());
    }
    if a.clients == 0 || a.batch < 4 || a.devices == 0 || a.points == 0 {
        return Err("--clients, --devices, --points must be positive, --batch at least 4".into());
    }
    if a.index.is_empty() {
        a.index = format!("load-{}", a.protocol);
    }
    Ok(a)
}

/// A reading with one decimal, drifting slowly: the shape of real sensor data.
fn value(device: usize, metric: usize, point: usize) -> f64 {
    let base = [20.0, 55.0, 1013.0, 90.0][metric];
    let wobble = ((device * 7 + point * 3 + metric) % 41) as f64 / 10.0;
    base + wobble - (point / 50) as f64 * 0.1
}

/// Bodies of about `batch` samples each, time-major (as scrapes arrive).
fn bodies(a: &Args) -> Vec<(Vec<u8>, usize)> {
    let per_batch = (a.batch / METRICS.len()).max(1);
    let mut out = Vec::new();
    let mut rows: Vec<(usize, usize)> = Vec::new();
    let flush = |rows: &mut Vec<(usize, usize)>, out: &mut Vec<(Vec<u8>, usize)>| {
        if rows.is_empty() {
            return;
        }
        let n = rows.len() * METRICS.len();
        let body = if a.protocol == "rw" {
            let mut req = WriteRequest::default();
            for &(d, p) in rows.iter() {
                for (m, name) in METRICS.iter().enumerate() {
                    req.timeseries.push(TimeSeries {
                        labels: vec![
                            Label {
                                name: "__name__".into(),
                                value: format!("iot_{name}"),
                            },
                            Label {
                                name: "device".into(),
                                value: format!("dev-{d}"),
                            },
                            Label {
                                name: "region".into(),
                                value: format!("r{}", d % 4),
                            },
                            Label {
                                name: "site".into(),
                                value: format!("site-{}", d / 10),
                            },
                        ],
                        samples: vec![Sample {
                            value: value(d, m, p),
                            timestamp: T0 + p as i64 * 10_000,
                        }],
                        ..TimeSeries::default()
                    });
                }
            }
            remote_write::encode(&req)
        } else if a.protocol == "bulk" {
            let mut text = String::new();
            for &(d, p) in rows.iter() {
                text.push_str("{\"create\":{}}\n");
                text.push_str(&format!(
                    "{{\"@timestamp\":{},\"device\":\"dev-{d}\",\"region\":\"r{}\",\"site\":\"site-{}\",\"temperature\":{},\"humidity\":{},\"pressure\":{},\"battery\":{}}}\n",
                    T0 + p as i64 * 10_000,
                    d % 4,
                    d / 10,
                    value(d, 0, p),
                    value(d, 1, p),
                    value(d, 2, p),
                    value(d, 3, p),
                ));
            }
            text.into_bytes()
        } else {
            let mut text = String::new();
            for &(d, p) in rows.iter() {
                text.push_str(&format!(
                    "iot,device=dev-{d},region=r{},site=site-{} temperature={},humidity={},pressure={},battery={} {}\n",
                    d % 4,
                    d / 10,
                    value(d, 0, p),
                    value(d, 1, p),
                    value(d, 2, p),
                    value(d, 3, p),
                    T0 + p as i64 * 10_000
                ));
            }
            text.into_bytes()
        };
        out.push((body, n));
        rows.clear();
    };
    for p in 0..a.points {
        for d in 0..a.devices {
            rows.push((d, p));
            if rows.len() == per_batch {
                flush(&mut rows, &mut out);
            }
        }
    }
    flush(&mut rows, &mut out);
    out
}

fn main() {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("metrics_load: {e}");
            std::process::exit(2);
        }
    };
    let bodies = Arc::new(bodies(&a));
    let total: usize = bodies.iter().map(|b| b.1).sum();
    let path = if a.protocol == "rw" {
        format!("/api/v1/write?index={}", a.index)
    } else if a.protocol == "bulk" {
        let mapping = serde_json::json!({"mappings": {"properties": {
            "device": {"type": "keyword", "time_series_dimension": true},
            "region": {"type": "keyword", "time_series_dimension": true},
            "site": {"type": "keyword", "time_series_dimension": true},
            "temperature": {"type": "double", "time_series_metric": "gauge"},
            "humidity": {"type": "double", "time_series_metric": "gauge"},
            "pressure": {"type": "double", "time_series_metric": "gauge"},
            "battery": {"type": "double", "time_series_metric": "gauge"}}}});
        let _ = ureq::put(&format!("http://{}/{}", a.addr, a.index))
            .set("content-type", "application/json")
            .send_string(&mapping.to_string());
        format!("/{}/_bulk", a.index)
    } else {
        format!("/write?db={}&precision=ms", a.index)
    };
    let next = Arc::new(AtomicUsize::new(0));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let mut threads = Vec::new();
    for _ in 0..a.clients {
        let (bodies, next, latencies) = (
            Arc::clone(&bodies),
            Arc::clone(&next),
            Arc::clone(&latencies),
        );
        let url = format!("http://{}{path}", a.addr);
        let (rw, bulk) = (a.protocol == "rw", a.protocol == "bulk");
        threads.push(std::thread::spawn(move || {
            let agent = ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(120))
                .build();
            let mut mine = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((body, _)) = bodies.get(i) else {
                    break;
                };
                let mut req = agent.post(&url);
                if rw {
                    req = req
                        .set("content-type", "application/x-protobuf")
                        .set("content-encoding", "snappy")
                        .set("x-prometheus-remote-write-version", "0.1.0");
                }
                let t = Instant::now();
                if bulk {
                    req = req.set("content-type", "application/x-ndjson");
                }
                match req.send_bytes(body) {
                    Ok(r) if r.status() == 204 || (bulk && r.status() == 200) => {}
                    Ok(r) => eprintln!("status {}", r.status()),
                    Err(e) => eprintln!("request failed: {e}"),
                }
                mine.push(t.elapsed());
            }
            if let Ok(mut l) = latencies.lock() {
                l.extend(mine);
            }
        }));
    }
    for t in threads {
        let _ = t.join();
    }
    let secs = start.elapsed().as_secs_f64();
    let mut l = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    l.sort();
    let pct = |q: f64| {
        l.get(((l.len() as f64 - 1.0) * q) as usize)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "{}: {total} samples in {} requests by {} clients in {secs:.2} s: {:.0} samples/s; latency p50 {:.1} ms, p99 {:.1} ms",
        a.protocol,
        bodies.len(),
        a.clients,
        total as f64 / secs,
        pct(0.5),
        pct(0.99)
    );
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(600))
        .build();
    let base = format!("http://{}/{}", a.addr, a.index);
    let _ = agent.post(&format!("{base}/_forcemerge")).call();
    if let Ok(r) = agent.get(&format!("{base}/_stats")).call()
        && let Ok(text) = r.into_string()
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
    {
        let docs = v
            .pointer("/_all/primaries/docs/count")
            .and_then(|x| x.as_u64())
            .unwrap_or(0);
        let bytes = v
            .pointer("/_all/primaries/store/size_in_bytes")
            .and_then(|x| x.as_u64())
            .unwrap_or(0);
        // A `_bulk` document holds the 4 metrics of one device and instant.
        let samples = if a.protocol == "bulk" { docs * 4 } else { docs };
        if samples > 0 {
            println!(
                "stored {samples} samples ({docs} documents) in {bytes} bytes after force-merge: {:.2} bytes/sample",
                bytes as f64 / samples as f64
            );
        }
    }
}
