//! `cargo xtask server-soak`: the server under a mixed load on loopback for a bounded
//! time: `_bulk`, line-protocol, remote-write and OTLP/JSON writers (each batch of
//! distinct points, re-sent until acknowledged), PromQL `query_range` and `_search`
//! readers, and SIGKILLs of the server at even intervals (restarted on the same data
//! directory and port). Samples the server's RSS and peak RSS, records latencies per
//! endpoint, and at the end checks that every acknowledged point is stored once and that
//! re-sending every batch stores nothing new.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use tidemark_server::metrics::remote_write::{self, Label, Sample, TimeSeries, WriteRequest};

use crate::harness::{Process, agent, free_port, status_kib, vm_hwm_kib};

/// Points per batch: 50 series × 10 timestamps.
const SERIES: usize = 50;
const STEPS: usize = 10;
const PER_BATCH: u64 = (SERIES * STEPS) as u64;

const PROTOCOLS: [&str; 4] = ["bulk", "lp", "rw", "otlp"];

struct Args {
    minutes: f64,
    kills: u32,
    bin: PathBuf,
    pause_ms: u64,
    markdown: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Args> {
    let default_bin = [
        "target/release/tidemark-server",
        "target/debug/tidemark-server",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
    .unwrap_or_else(|| PathBuf::from("target/release/tidemark-server"));
    let mut a = Args {
        minutes: 30.0,
        kills: 2,
        bin: default_bin,
        pause_ms: 100,
        markdown: None,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| anyhow!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--minutes" => a.minutes = value()?.parse().context("--minutes")?,
            "--kills" => a.kills = value()?.parse().context("--kills")?,
            "--tidemark-bin" => a.bin = PathBuf::from(value()?),
            "--pause-ms" => a.pause_ms = value()?.parse().context("--pause-ms")?,
            "--markdown" => a.markdown = Some(PathBuf::from(value()?)),
            other => bail!("unknown flag {other}"),
        }
    }
    if !(a.minutes > 0.0 && a.minutes <= 180.0) {
        bail!("--minutes must be in (0, 180]");
    }
    if !a.bin.is_file() {
        bail!(
            "{} not found: cargo build --release -p tidemark-server",
            a.bin.display()
        );
    }
    Ok(a)
}

/// The server process, restartable on the same directory and port.
struct Server {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    process: Option<Process>,
}

impl Server {
    fn start(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data.with_extension("log"))?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--data")
            .arg(&self.data)
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .env("TIDEMARK_LOG", "warn");
        // Dropped (SIGTERM, then SIGKILL after 20 s) at the end of the run.
        let mut process = Process::spawn(&mut cmd, log, Duration::from_secs(20))
            .with_context(|| format!("starting {}", self.bin.display()))?;
        process.wait_ready(&format!("http://127.0.0.1:{}/", self.port))?;
        self.process = Some(process);
        Ok(())
    }

    fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Process::id)
    }

    fn kill(&mut self) {
        if let Some(p) = self.process.take() {
            p.kill();
        }
    }
}

/// The first timestamp: two days ago on the hour, so a 30-minute run at the default
/// pace stays in the past.
fn t0() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    (now - 2 * 86_400_000) / 3_600_000 * 3_600_000
}

/// Point `k` (0..PER_BATCH) of batch `b`: (series, timestamp ms, value).
fn point(t0: i64, b: u64, k: usize) -> (usize, i64, f64) {
    let series = k % SERIES;
    let step = (b as usize * STEPS + k / SERIES) as i64;
    (series, t0 + step * 1000, (b * PER_BATCH + k as u64) as f64)
}

fn body(proto: &str, t0: i64, b: u64) -> (Vec<u8>, &'static str, &'static str) {
    match proto {
        "bulk" => {
            let mut s = String::new();
            for k in 0..PER_BATCH as usize {
                let (h, ts, v) = point(t0, b, k);
                s.push_str("{\"create\":{}}\n");
                s.push_str(&format!(
                    "{{\"@timestamp\":{ts},\"host\":\"h{h}\",\"cpu\":{v}}}\n"
                ));
            }
            (s.into_bytes(), "/soak-bulk/_bulk", "application/x-ndjson")
        }
        "lp" => {
            let mut s = String::new();
            for k in 0..PER_BATCH as usize {
                let (h, ts, v) = point(t0, b, k);
                s.push_str(&format!("soak_lp,host=h{h} value={v} {ts}\n"));
            }
            (
                s.into_bytes(),
                "/write?db=soak-lp&precision=ms",
                "text/plain",
            )
        }
        "rw" => {
            let timeseries = (0..PER_BATCH as usize)
                .map(|k| {
                    let (h, ts, v) = point(t0, b, k);
                    TimeSeries {
                        labels: vec![
                            Label {
                                name: "__name__".into(),
                                value: "soak_rw".into(),
                            },
                            Label {
                                name: "host".into(),
                                value: format!("h{h}"),
                            },
                        ],
                        samples: vec![Sample {
                            value: v,
                            timestamp: ts,
                        }],
                        ..TimeSeries::default()
                    }
                })
                .collect();
            let body = remote_write::encode(&WriteRequest {
                timeseries,
                ..WriteRequest::default()
            });
            (
                body,
                "/api/v1/write?index=soak-rw",
                "application/x-protobuf",
            )
        }
        _ => {
            let points: Vec<Value> = (0..PER_BATCH as usize)
                .map(|k| {
                    let (h, ts, v) = point(t0, b, k);
                    json!({"timeUnixNano": (ts * 1_000_000).to_string(), "asDouble": v,
                        "attributes": [{"key": "host", "value": {"stringValue": format!("h{h}")}}]})
                })
                .collect();
            let body = json!({"resourceMetrics": [{"scopeMetrics": [{"metrics": [
                {"name": "soak_otlp", "gauge": {"dataPoints": points}}]}]}]});
            (
                body.to_string().into_bytes(),
                "/v1/metrics?index=soak-otlp",
                "application/json",
            )
        }
    }
}

/// What one send answered: acknowledged, refused to retry, or no server.
enum Sent {
    Acked,
    Retry,
    Down,
}

fn send(base: &str, proto: &str, t0: i64, b: u64) -> Result<Sent> {
    let (bytes, path, ctype) = body(proto, t0, b);
    let agent = agent(60);
    let mut req = agent
        .post(&format!("{base}{path}"))
        .set("content-type", ctype);
    if proto == "rw" {
        req = req
            .set("content-encoding", "snappy")
            .set("x-prometheus-remote-write-version", "0.1.0");
    }
    match req.send_bytes(&bytes) {
        Ok(r) => {
            if proto == "bulk" {
                let v: Value = serde_json::from_str(&r.into_string()?)?;
                if v["errors"] == true {
                    // Items are created or duplicates (409) of an earlier try.
                    let bad = v["items"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|i| !matches!(i["create"]["status"].as_u64(), Some(201 | 409)))
                        .count();
                    if bad > 0 {
                        bail!("bulk batch {b}: {bad} items failed: {v}");
                    }
                }
            }
            Ok(Sent::Acked)
        }
        Err(ureq::Error::Status(429 | 503, _)) => Ok(Sent::Retry),
        Err(ureq::Error::Status(code, r)) => bail!(
            "{proto} batch {b}: {code} {}",
            r.into_string().unwrap_or_default()
        ),
        Err(ureq::Error::Transport(_)) => Ok(Sent::Down),
    }
}

#[derive(Default)]
struct Latencies(Mutex<Vec<(String, Duration)>>);

impl Latencies {
    fn add(&self, what: &str, d: Duration) {
        if let Ok(mut v) = self.0.lock() {
            v.push((what.to_owned(), d));
        }
    }
}

fn count(base: &str, index: &str) -> Result<u64> {
    let r = ureq::post(&format!("{base}/{index}/_count"))
        .set("content-type", "application/json")
        .send_string("{}")?;
    let v: Value = serde_json::from_str(&r.into_string()?)?;
    v["count"].as_u64().ok_or_else(|| anyhow!("no count: {v}"))
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let a = parse(args)?;
    let dir = tempfile::Builder::new()
        .prefix("xtask-server-soak-")
        .tempdir()?;
    let mut server = Server {
        bin: a.bin.clone(),
        data: dir.path().join("data"),
        port: free_port()?,
        process: None,
    };
    server.start()?;
    let base = format!("http://127.0.0.1:{}", server.port);
    let mapping = json!({"settings": {"index": {"mode": "time_series"}}, "mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "cpu": {"type": "double", "time_series_metric": "gauge"}}}});
    let r = ureq::put(&format!("{base}/soak-bulk"))
        .set("content-type", "application/json")
        .send_string(&mapping.to_string());
    if let Err(e) = r {
        bail!("creating soak-bulk: {e}");
    }

    let t0 = t0();
    let stop = Arc::new(AtomicBool::new(false));
    let lat = Arc::new(Latencies::default());
    let retries = Arc::new(AtomicU64::new(0));
    let downs = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let total = Duration::from_secs_f64(a.minutes * 60.0);
    println!(
        "server-soak: {} for {:.1} min, {} SIGKILLs, {} points per batch",
        a.bin.display(),
        a.minutes,
        a.kills,
        PER_BATCH
    );

    let mut writers = Vec::new();
    for proto in PROTOCOLS {
        let (stop, lat, retries, downs, base) = (
            Arc::clone(&stop),
            Arc::clone(&lat),
            Arc::clone(&retries),
            Arc::clone(&downs),
            base.clone(),
        );
        let pause = Duration::from_millis(a.pause_ms);
        writers.push(std::thread::spawn(move || -> Result<u64> {
            let mut b = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Re-send batch b until it is acknowledged: a retry is a duplicate.
                loop {
                    let t = Instant::now();
                    match send(&base, proto, t0, b)? {
                        Sent::Acked => {
                            lat.add(proto, t.elapsed());
                            break;
                        }
                        Sent::Retry => {
                            retries.fetch_add(1, Ordering::Relaxed);
                        }
                        Sent::Down => {
                            downs.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                b += 1;
                std::thread::sleep(pause);
            }
            Ok(b)
        }));
    }
    let mut readers = Vec::new();
    for what in ["promql", "search"] {
        let (stop, lat, base) = (Arc::clone(&stop), Arc::clone(&lat), base.clone());
        readers.push(std::thread::spawn(move || {
            let agent = agent(60);
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let ok = if what == "promql" {
                    let start_s = t0 / 1000;
                    agent
                        .get(&format!("{base}/api/v1/query_range"))
                        .query("query", "sum by (host) (soak_rw)")
                        .query("start", &start_s.to_string())
                        .query("end", &(start_s + 3600).to_string())
                        .query("step", "60")
                        .call()
                        .is_ok()
                } else {
                    let q = json!({"size": 0, "aggs": {"h": {"date_histogram":
                        {"field": "@timestamp", "fixed_interval": "1m"},
                        "aggs": {"c": {"avg": {"field": "cpu"}}}}},
                        "query": {"range": {"@timestamp": {"gte": t0, "lt": t0 + 3_600_000}}}});
                    agent
                        .post(&format!("{base}/soak-bulk/_search"))
                        .set("content-type", "application/json")
                        .send_string(&q.to_string())
                        .is_ok()
                };
                if ok {
                    lat.add(what, t.elapsed());
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }));
    }

    // RSS samples per server life, and the SIGKILLs.
    let mut lives: Vec<(u64, u64)> = Vec::new(); // (peak VmHWM KiB, last VmRSS KiB)
    let mut life = (0u64, 0u64);
    let kill_every = total / (a.kills + 1);
    let mut next_kill = kill_every;
    let mut kills = 0;
    let mut last_print = Instant::now();
    while start.elapsed() < total {
        std::thread::sleep(Duration::from_secs(2));
        if let Some(pid) = server.pid() {
            let hwm = vm_hwm_kib(pid).unwrap_or(0);
            let rss = status_kib(pid, "VmRSS:").unwrap_or(0);
            life = (life.0.max(hwm), rss);
        }
        if kills < a.kills && start.elapsed() >= next_kill {
            println!(
                "  {:>6.1} min: SIGKILL (peak RSS this life {} MiB)",
                start.elapsed().as_secs_f64() / 60.0,
                life.0 / 1024
            );
            server.kill();
            lives.push(life);
            life = (0, 0);
            server.start()?;
            kills += 1;
            next_kill += kill_every;
        }
        if last_print.elapsed() >= Duration::from_secs(60) {
            last_print = Instant::now();
            let n = lat.0.lock().map_or(0, |v| v.len());
            println!(
                "  {:>6.1} min: {n} requests acknowledged, RSS {} MiB, peak {} MiB, {} retries, {} while down",
                start.elapsed().as_secs_f64() / 60.0,
                life.1 / 1024,
                life.0 / 1024,
                retries.load(Ordering::Relaxed),
                downs.load(Ordering::Relaxed)
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut batches = Vec::new();
    for w in writers {
        batches.push(w.join().map_err(|_| anyhow!("a writer panicked"))??);
    }
    for r in readers {
        r.join().map_err(|_| anyhow!("a reader panicked"))?;
    }
    lives.push(life);

    // Every acknowledged point once; re-sending every batch stores nothing new.
    let indices = ["soak-bulk", "soak-lp", "soak-rw", "soak-otlp"];
    let mut rows = Vec::new();
    for ((proto, index), &n) in PROTOCOLS.iter().zip(indices).zip(&batches) {
        let want = n * PER_BATCH;
        let got = count(&base, index)?;
        for b in 0..n {
            match send(&base, proto, t0, b)? {
                Sent::Acked => {}
                _ => bail!("re-sending {proto} batch {b} was refused"),
            }
        }
        let again = count(&base, index)?;
        rows.push((proto.to_string(), n, want, got, again));
    }

    let mut lat = lat.0.lock().map_err(|_| anyhow!("latencies"))?.clone();
    lat.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let pct = |what: &str, p: f64| {
        let v: Vec<Duration> = lat.iter().filter(|x| x.0 == what).map(|x| x.1).collect();
        if v.is_empty() {
            return (0, 0.0);
        }
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        (v.len(), v[i].as_secs_f64() * 1000.0)
    };
    let mut md = String::new();
    md.push_str(&format!(
        "`cargo xtask server-soak --minutes {} --kills {}` ({}), {} SIGKILLs, {} retries answered 429/503, {} sends while the server was down\n\n",
        a.minutes,
        a.kills,
        a.bin.display(),
        kills,
        retries.load(Ordering::Relaxed),
        downs.load(Ordering::Relaxed)
    ));
    md.push_str("| protocol | batches acknowledged | points expected | stored | after re-sending all |\n|---|---|---|---|---|\n");
    let mut exact = true;
    for (p, n, want, got, again) in &rows {
        exact &= got == want && again == want;
        md.push_str(&format!("| {p} | {n} | {want} | {got} | {again} |\n"));
    }
    md.push_str("\n| endpoint | requests | p50 ms | p99 ms |\n|---|---|---|---|\n");
    for what in ["bulk", "lp", "rw", "otlp", "promql", "search"] {
        let (n, p50) = pct(what, 0.5);
        let (_, p99) = pct(what, 0.99);
        md.push_str(&format!("| {what} | {n} | {p50:.1} | {p99:.1} |\n"));
    }
    md.push_str("\n| server life | peak RSS (VmHWM) MiB | RSS at end MiB |\n|---|---|---|\n");
    for (i, (hwm, rss)) in lives.iter().enumerate() {
        md.push_str(&format!(
            "| {} | {} | {} |\n",
            i + 1,
            hwm / 1024,
            rss / 1024
        ));
    }
    println!("\n{md}");
    if let Some(p) = &a.markdown {
        std::fs::write(p, &md).with_context(|| format!("writing {}", p.display()))?;
    }
    if !exact {
        bail!("a point was lost or stored twice (table above)");
    }
    Ok(())
}
