//! `cargo xtask peers`: the same generated dataset written through each system's own
//! protocol on loopback into `tidemark-server`, VictoriaMetrics, Prometheus and InfluxDB
//! 1.x, then ingest samples/s, bytes per sample on disk after each system's compaction,
//! the server's peak RSS and what the duplicates did to the stored count and sums, side
//! by side.
//!
//! Every system gets the same bodies (built before the clock starts), the same number of
//! connections and the same batches: Influx line protocol for Tidemark, VictoriaMetrics
//! and InfluxDB, Prometheus remote write (snappy + protobuf, by the server crate's
//! encoder, `tidemark_server::metrics::remote_write`) for Prometheus and, as `tidemark:rw` /
//! `victoria-metrics:rw`, for the others too. A sample is one (series, metric,
//! timestamp); a line-protocol field `m` of measurement `ds` is the metric `ds_m`, as
//! VictoriaMetrics and Tidemark name it and as the remote-write bodies name it.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use tidemark_datagen::exposition::{escape_tag, field_name, labels, sanitize};
use tidemark_datagen::{Dataset, MetricVal, Options, Record};
use tidemark_server::metrics::remote_write::{self, Label, Sample, TimeSeries, WriteRequest};

use crate::harness::{
    Process, agent, dir_bytes, ensure_installed, free_port, get_text, loadavg, package_version,
    post_text, tidemark_server_bin, vm_hwm_kib, wait_stable,
};

/// Command-line options.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Args {
    dataset: String,
    points: u64,
    series: u32,
    seed: u64,
    dup_rate: f64,
    late_rate: f64,
    changed_rate: f64,
    clients: usize,
    batch: usize,
    systems: Vec<SystemSpec>,
    json: Option<PathBuf>,
    markdown: Option<PathBuf>,
    tidemark_bin: Option<PathBuf>,
    /// Copy each system's data directory, after compaction, under this directory.
    keep_data: Option<PathBuf>,
    /// Rounds over the systems on the one dataset (its bodies built once); even rounds
    /// run the systems in reverse order, and the report leads with the medians.
    rounds: u32,
}

/// Which protocol a system is written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Influx,
    RemoteWrite,
}

impl Proto {
    fn name(self) -> &'static str {
        match self {
            Proto::Influx => "line protocol",
            Proto::RemoteWrite => "remote write",
        }
    }
}

/// A system and the protocol it is written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tidemark,
    Victoria,
    Prometheus,
    Influxdb,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SystemSpec {
    kind: Kind,
    proto: Proto,
    /// VictoriaMetrics only: `-dedup.minScrapeInterval=1ms` (on unless
    /// `victoria-metrics-nodedup`).
    dedup: bool,
}

impl SystemSpec {
    fn label(self) -> String {
        let name = match self.kind {
            Kind::Tidemark => "tidemark",
            Kind::Victoria if self.dedup => "victoria-metrics",
            Kind::Victoria => "victoria-metrics-nodedup",
            Kind::Prometheus => "prometheus",
            Kind::Influxdb => "influxdb",
        };
        match (self.kind, self.proto) {
            (Kind::Tidemark | Kind::Victoria, Proto::RemoteWrite) => format!("{name}:rw"),
            _ => name.to_owned(),
        }
    }
}

fn parse_system(s: &str) -> Result<SystemSpec> {
    let (name, proto) = match s.split_once(':') {
        Some((n, "rw")) => (n, Some(Proto::RemoteWrite)),
        Some((n, "influx" | "lp")) => (n, Some(Proto::Influx)),
        Some((_, p)) => bail!("unknown protocol {p:?} in {s:?} (rw or influx)"),
        None => (s, None),
    };
    let kind = match name {
        "tidemark" => Kind::Tidemark,
        "victoria-metrics" | "vm" | "victoria-metrics-nodedup" => Kind::Victoria,
        "prometheus" => Kind::Prometheus,
        "influxdb" => Kind::Influxdb,
        other => {
            bail!("unknown system {other:?} (tidemark, victoria-metrics, prometheus, influxdb)")
        }
    };
    let proto = match (kind, proto) {
        (Kind::Prometheus, None | Some(Proto::RemoteWrite)) => Proto::RemoteWrite,
        (Kind::Prometheus, Some(_)) => bail!("prometheus takes remote write only"),
        (Kind::Influxdb, None | Some(Proto::Influx)) => Proto::Influx,
        (Kind::Influxdb, Some(_)) => bail!("influxdb takes line protocol only"),
        (_, p) => p.unwrap_or(Proto::Influx),
    };
    let dedup = name != "victoria-metrics-nodedup";
    Ok(SystemSpec { kind, proto, dedup })
}

pub(crate) fn parse_args(args: &[String]) -> Result<Args> {
    let mut a = Args {
        dataset: "k8s".into(),
        points: 180_000,
        series: 500,
        seed: 42,
        dup_rate: 0.1,
        late_rate: 0.05,
        changed_rate: 0.25,
        clients: 2,
        batch: 4000,
        systems: "tidemark,tidemark:rw,victoria-metrics,victoria-metrics:rw,victoria-metrics-nodedup,prometheus,influxdb"
            .split(',')
            .map(parse_system)
            .collect::<Result<_>>()?,
        json: None,
        markdown: None,
        tidemark_bin: None,
        keep_data: None,
        rounds: 1,
    };
    let mut points = None;
    let mut series = None;
    let mut small = false;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| anyhow!("{flag} needs a value"));
        match flag.as_str() {
            "--dataset" => a.dataset = value()?.clone(),
            "--points" => points = Some(value()?.parse().context("--points")?),
            "--series" => series = Some(value()?.parse().context("--series")?),
            "--seed" => a.seed = value()?.parse().context("--seed")?,
            "--dup-rate" => a.dup_rate = value()?.parse().context("--dup-rate")?,
            "--late-rate" => a.late_rate = value()?.parse().context("--late-rate")?,
            "--changed-rate" => a.changed_rate = value()?.parse().context("--changed-rate")?,
            "--clients" => a.clients = value()?.parse().context("--clients")?,
            "--batch" => a.batch = value()?.parse().context("--batch")?,
            "--systems" => {
                a.systems = value()?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(parse_system)
                    .collect::<Result<_>>()?
            }
            "--json" => a.json = Some(PathBuf::from(value()?)),
            "--markdown" => a.markdown = Some(PathBuf::from(value()?)),
            "--tidemark-bin" => a.tidemark_bin = Some(PathBuf::from(value()?)),
            "--keep-data" => a.keep_data = Some(PathBuf::from(value()?)),
            "--rounds" => a.rounds = value()?.parse().context("--rounds")?,
            "--small" => small = true,
            other => bail!("unknown option {other:?}"),
        }
    }
    if !matches!(a.dataset.as_str(), "k8s" | "otel" | "host") {
        bail!("--dataset is k8s, otel or host");
    }
    let (dp, ds) = match (a.dataset.as_str(), small) {
        (_, true) => (3_000, 50),
        ("otel", false) => (504_000, 2_100),
        _ => (180_000, 500),
    };
    a.points = points.unwrap_or(dp);
    a.series = series.unwrap_or(ds);
    if a.points == 0 || a.series == 0 || a.clients == 0 || a.batch == 0 || a.rounds == 0 {
        bail!("--points, --series, --clients, --batch and --rounds must be positive");
    }
    for (name, r) in [
        ("--dup-rate", a.dup_rate),
        ("--late-rate", a.late_rate),
        ("--changed-rate", a.changed_rate),
    ] {
        if !(0.0..=1.0).contains(&r) {
            bail!("{name} is a fraction in [0, 1]");
        }
    }
    if a.systems.is_empty() {
        bail!("--systems names at least one system");
    }
    Ok(a)
}

// ---------------------------------------------------------------------------------------
// The dataset, its bodies and its truth.

/// Whether a retry is sent with another value (deterministic in the seed and the point).
fn changed(seed: u64, start_millis: i64, r: &Record, rate: f64) -> bool {
    if !r.duplicate || rate <= 0.0 {
        return false;
    }
    let mut h = seed ^ 0x9e37_79b9_7f4a_7c15;
    for x in [u64::from(r.series), (r.ts_millis - start_millis) as u64] {
        h = (h ^ x).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
    }
    (h >> 11) as f64 / (1u64 << 53) as f64 <= rate
}

/// The value a changed retry carries: far enough from the original that a sum tells
/// which one a system kept.
fn changed_value(v: f64) -> f64 {
    v + v.abs() * 0.5 + 1.0
}

/// Per metric: unique samples, sums if the first or the last copy of a point is kept.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct MetricTruth {
    unique: u64,
    sum_first: f64,
    sum_last: f64,
}

/// What the generator sent.
#[derive(Debug, Clone, Default)]
pub(crate) struct Truth {
    metrics: BTreeMap<String, MetricTruth>,
    sent_samples: u64,
    duplicate_samples: u64,
    changed_samples: u64,
    late_points: u64,
    min_ts: i64,
    max_ts: i64,
}

impl Truth {
    fn unique(&self) -> u64 {
        self.metrics.values().map(|m| m.unique).sum()
    }
}

/// Request bodies of one protocol with their sample counts.
struct Bodies {
    bodies: Vec<(Vec<u8>, u64)>,
}

struct Prepared {
    truth: Truth,
    influx: Option<Arc<Bodies>>,
    rw: Option<Arc<Bodies>>,
}

fn metric_f64(m: MetricVal) -> f64 {
    match m {
        MetricVal::Gauge(g) => g,
        MetricVal::Counter(c) => c as f64,
    }
}

fn dataset(a: &Args, start_millis: i64) -> Result<Dataset> {
    let opts = Options::default()
        .points(a.points)
        .series(a.series)
        .seed(a.seed)
        .dup_rate(a.dup_rate)
        .late_rate(a.late_rate)
        .start_millis(start_millis);
    Dataset::by_name(&a.dataset, opts).ok_or_else(|| anyhow!("unknown dataset {}", a.dataset))
}

/// One line of Influx line protocol (millisecond timestamps).
fn influx_line(ds: &str, r: &Record, values: &[(String, MetricVal)], out: &mut String) {
    out.push_str(ds);
    for (k, v) in labels(r) {
        out.push(',');
        out.push_str(&k);
        out.push('=');
        escape_tag(&v, out);
    }
    let mut sep = ' ';
    for (name, v) in values {
        out.push(sep);
        sep = ',';
        out.push_str(name);
        out.push('=');
        match v {
            MetricVal::Gauge(g) => out.push_str(&format!("{g:?}")),
            MetricVal::Counter(c) => out.push_str(&format!("{c}i")),
        }
    }
    out.push_str(&format!(" {}\n", r.ts_millis));
}

/// The remote-write series of one sample: the point's labels and `__name__`, sorted by
/// name as Prometheus sends them.
fn rw_series(name: &str, labels: &[(String, String)], ts: i64, v: f64) -> TimeSeries {
    let mut all: Vec<Label> = labels
        .iter()
        .map(|(k, v)| Label {
            name: k.clone(),
            value: v.clone(),
        })
        .chain([Label {
            name: "__name__".into(),
            value: name.into(),
        }])
        .collect();
    all.sort_by(|x, y| (&x.name, &x.value).cmp(&(&y.name, &y.value)));
    TimeSeries {
        labels: all,
        samples: vec![Sample {
            value: v,
            timestamp: ts,
        }],
        ..TimeSeries::default()
    }
}

/// Generate the dataset once: its truth, and the bodies of each protocol needed, in
/// batches of about `batch` samples (whole points per batch), in emission order.
fn prepare(a: &Args, ds: &Dataset, start_millis: i64, influx: bool, rw: bool) -> Result<Prepared> {
    let mut truth = Truth {
        min_ts: i64::MAX,
        max_ts: i64::MIN,
        ..Truth::default()
    };
    let mut lp_bodies = Vec::new();
    let mut rw_bodies = Vec::new();
    let mut lp = String::new();
    let mut series = Vec::new();
    let mut in_batch = 0u64;
    let name = a.dataset.as_str();
    let mut flush = |lp: &mut String, series: &mut Vec<TimeSeries>, n: &mut u64| {
        if *n == 0 {
            return;
        }
        if influx {
            lp_bodies.push((std::mem::take(lp).into_bytes(), *n));
        }
        if rw {
            let req = WriteRequest {
                timeseries: std::mem::take(series),
                ..WriteRequest::default()
            };
            rw_bodies.push((remote_write::encode(&req), *n));
        }
        *n = 0;
    };
    let mut seen: std::collections::HashMap<(u32, i64), Box<[f64]>> = Default::default();
    for r in ds.records() {
        let change = changed(a.seed, start_millis, &r, a.changed_rate);
        let values: Vec<(String, MetricVal)> = r
            .metrics
            .iter()
            .map(|(p, m)| {
                let v = match (*m, change) {
                    (m, false) => m,
                    (MetricVal::Gauge(g), true) => MetricVal::Gauge(changed_value(g)),
                    (MetricVal::Counter(c), true) => {
                        MetricVal::Counter(changed_value(c as f64) as i64)
                    }
                };
                (field_name(p), v)
            })
            .collect();
        truth.min_ts = truth.min_ts.min(r.ts_millis);
        truth.max_ts = truth.max_ts.max(r.ts_millis);
        truth.late_points += u64::from(r.late);
        // First and last copy in emission order: a late original can come after its
        // retry, so the generator's `duplicate` flag is not "second copy".
        let sent: Vec<f64> = values.iter().map(|(_, v)| metric_f64(*v)).collect();
        let first_copy = match seen.entry((r.series, r.ts_millis)) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(sent.clone().into_boxed_slice());
                true
            }
            std::collections::hash_map::Entry::Occupied(mut e) => {
                let prev = e.insert(sent.clone().into_boxed_slice());
                for ((field, _), (v, p)) in values.iter().zip(sent.iter().zip(prev.iter())) {
                    let t = truth.metrics.entry(format!("{name}_{field}")).or_default();
                    t.sum_last += v - p;
                }
                false
            }
        };
        for ((field, _), v) in values.iter().zip(&sent) {
            let t = truth.metrics.entry(format!("{name}_{field}")).or_default();
            truth.sent_samples += 1;
            if first_copy {
                t.unique += 1;
                t.sum_first += v;
                t.sum_last += v;
            } else {
                truth.duplicate_samples += 1;
                truth.changed_samples += u64::from(change);
            }
        }
        if influx {
            influx_line(name, &r, &values, &mut lp);
        }
        if rw {
            let l = labels(&r);
            for (field, v) in &values {
                series.push(rw_series(
                    &format!("{name}_{field}"),
                    &l,
                    r.ts_millis,
                    metric_f64(*v),
                ));
            }
        }
        in_batch += values.len() as u64;
        if in_batch >= a.batch as u64 {
            flush(&mut lp, &mut series, &mut in_batch);
        }
    }
    flush(&mut lp, &mut series, &mut in_batch);
    Ok(Prepared {
        truth,
        influx: influx.then(|| Arc::new(Bodies { bodies: lp_bodies })),
        rw: rw.then(|| Arc::new(Bodies { bodies: rw_bodies })),
    })
}

// ---------------------------------------------------------------------------------------
// Running a system.

struct Running {
    process: Process,
    base: String,
    dir: tempfile::TempDir,
    version: String,
}

impl Running {
    /// SIGTERM, up to 15 s to exit, then SIGKILL; the temporary directory goes with it
    /// (fields drop in order: the process first).
    fn stop(self) {
        drop(self);
    }
}

const INDEX: &str = "peers";

fn start(spec: SystemSpec, a: &Args, span_secs: i64) -> Result<Running> {
    let dir = tempfile::Builder::new().prefix("xtask-peers-").tempdir()?;
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let base = format!("http://{addr}");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data)?;
    let log = std::fs::File::create(dir.path().join("server.log"))?;
    let (mut cmd, ready, version) = match spec.kind {
        Kind::Tidemark => {
            let bin = tidemark_server_bin(a.tidemark_bin.as_deref())?;
            let mut c = Command::new(&bin);
            c.arg("--data").arg(&data).args(["--listen", &addr]);
            let v = format!("tidemark-server {}", env!("CARGO_PKG_VERSION"));
            (c, format!("{base}/"), v)
        }
        Kind::Victoria => {
            let bin = ensure_installed("victoria-metrics", "victoria-metrics")?;
            let mut c = Command::new(&bin);
            c.arg(format!("-storageDataPath={}", data.display()))
                .arg(format!("-httpListenAddr={addr}"))
                .arg("-retentionPeriod=100y");
            if spec.dedup {
                c.arg("-dedup.minScrapeInterval=1ms");
            }
            let v = package_version("victoria-metrics");
            (c, format!("{base}/health"), v)
        }
        Kind::Prometheus => {
            let bin = ensure_installed("prometheus", "prometheus")?;
            let cfg = dir.path().join("prometheus.yml");
            // Out-of-order window: the whole dataset and then some.
            std::fs::write(
                &cfg,
                format!(
                    "global: {{}}\nstorage:\n  tsdb:\n    out_of_order_time_window: {}s\n",
                    span_secs + 3600
                ),
            )?;
            let mut c = Command::new(&bin);
            c.arg(format!("--config.file={}", cfg.display()))
                .arg(format!("--storage.tsdb.path={}", data.display()))
                .arg(format!("--web.listen-address={addr}"))
                .arg("--web.enable-remote-write-receiver")
                .arg("--web.enable-admin-api")
                .arg("--storage.tsdb.retention.time=100y");
            let v = package_version("prometheus");
            (c, format!("{base}/-/ready"), v)
        }
        Kind::Influxdb => {
            let bin = ensure_installed("influxd", "influxdb")?;
            let cfg = dir.path().join("influxdb.conf");
            let rpc = free_port()?;
            std::fs::write(
                &cfg,
                format!(
                    "reporting-disabled = true\nbind-address = \"127.0.0.1:{rpc}\"\n\
                     [meta]\n  dir = \"{d}/meta\"\n\
                     [data]\n  dir = \"{d}/data\"\n  wal-dir = \"{d}/wal\"\n  \
                     query-log-enabled = false\n  cache-snapshot-write-cold-duration = \"1s\"\n  \
                     compact-full-write-cold-duration = \"1s\"\n\
                     [monitor]\n  store-enabled = false\n\
                     [http]\n  bind-address = \"{addr}\"\n  log-enabled = false\n\
                     [continuous_queries]\n  enabled = false\n",
                    d = data.display()
                ),
            )?;
            let mut c = Command::new(&bin);
            c.arg("-config").arg(&cfg);
            let v = package_version("influxdb");
            (c, format!("{base}/ping"), v)
        }
    };
    let mut process = Process::spawn(&mut cmd, log, Duration::from_secs(15))
        .with_context(|| format!("starting {}", spec.label()))?;
    if let Err(e) = process.wait_ready(&ready) {
        process.kill();
        let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(10).collect();
        bail!("{}: {e}; log tail: {:?}", spec.label(), tail);
    }
    if spec.kind == Kind::Influxdb {
        post_text(
            &format!("{base}/query"),
            &format!("q=CREATE DATABASE {INDEX}"),
            "application/x-www-form-urlencoded",
        )?;
    }
    Ok(Running {
        process,
        base,
        dir,
        version,
    })
}

/// What one ingest run did.
#[derive(Debug, Default)]
struct Ingest {
    secs: f64,
    requests: u64,
    ok_samples: u64,
    rejected_requests: u64,
    rejected_samples: u64,
    first_error: Option<String>,
}

fn ingest(spec: SystemSpec, base: &str, bodies: &Arc<Bodies>, clients: usize) -> Ingest {
    let url = match (spec.kind, spec.proto) {
        (Kind::Tidemark, Proto::Influx) => format!("{base}/write?db={INDEX}&precision=ms"),
        (Kind::Tidemark, Proto::RemoteWrite) => format!("{base}/api/v1/write?index={INDEX}"),
        (Kind::Victoria, Proto::Influx) => format!("{base}/write?precision=ms"),
        (Kind::Influxdb, _) => format!("{base}/write?db={INDEX}&precision=ms"),
        (_, Proto::RemoteWrite) => format!("{base}/api/v1/write"),
        (Kind::Prometheus, Proto::Influx) => unreachable!("parse_system refuses it"),
    };
    let next = Arc::new(AtomicUsize::new(0));
    let ok = Arc::new(AtomicU64::new(0));
    let rejected = Arc::new(AtomicU64::new(0));
    let rejected_samples = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let start = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (bodies, next, ok, rejected, rejected_samples, first_error, url) = (
                Arc::clone(bodies),
                Arc::clone(&next),
                Arc::clone(&ok),
                Arc::clone(&rejected),
                Arc::clone(&rejected_samples),
                Arc::clone(&first_error),
                url.clone(),
            );
            std::thread::spawn(move || {
                let agent = agent(300);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((body, n)) = bodies.bodies.get(i) else {
                        break;
                    };
                    // Senders retry 429 and 5xx, not 4xx: so do we (3 attempts).
                    let mut attempt = 0;
                    let outcome = loop {
                        attempt += 1;
                        let mut req = agent.post(&url);
                        req = match spec.proto {
                            Proto::RemoteWrite => req
                                .set("content-type", "application/x-protobuf")
                                .set("content-encoding", "snappy")
                                .set("x-prometheus-remote-write-version", "0.1.0"),
                            Proto::Influx => req.set("content-type", "text/plain"),
                        };
                        match req.send_bytes(body) {
                            Ok(_) => break Ok(()),
                            Err(ureq::Error::Status(code, r))
                                if (code == 429 || code >= 500) && attempt < 3 =>
                            {
                                drop(r);
                                std::thread::sleep(Duration::from_millis(200));
                            }
                            Err(ureq::Error::Status(code, r)) => {
                                break Err(format!(
                                    "{code} {}",
                                    r.into_string()
                                        .unwrap_or_default()
                                        .chars()
                                        .take(300)
                                        .collect::<String>()
                                ));
                            }
                            Err(e) => break Err(e.to_string()),
                        }
                    };
                    match outcome {
                        Ok(()) => {
                            ok.fetch_add(*n, Ordering::Relaxed);
                        }
                        Err(e) => {
                            rejected.fetch_add(1, Ordering::Relaxed);
                            rejected_samples.fetch_add(*n, Ordering::Relaxed);
                            if let Ok(mut f) = first_error.lock() {
                                f.get_or_insert(e);
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    let first_error = first_error.lock().ok().and_then(|f| f.clone());
    Ingest {
        secs: start.elapsed().as_secs_f64(),
        requests: bodies.bodies.len() as u64,
        ok_samples: ok.load(Ordering::Relaxed),
        rejected_requests: rejected.load(Ordering::Relaxed),
        rejected_samples: rejected_samples.load(Ordering::Relaxed),
        first_error,
    }
}

/// Rows VictoriaMetrics holds in its parts (`vm_rows{type="storage/..."}` of its
/// `/metrics`) and still pending (`vm_pending_rows{type="storage"}`).
fn vm_rows(base: &str) -> Option<(u64, u64)> {
    let text = get_text(&format!("{base}/metrics")).ok()?;
    let (mut parts, mut pending) = (0u64, 0u64);
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(name), Some(v)) = (it.next(), it.next()) else {
            continue;
        };
        let v = v.parse::<f64>().unwrap_or(0.0) as u64;
        if name.starts_with("vm_rows{type=\"storage/") {
            parts += v;
        } else if name == "vm_pending_rows{type=\"storage\"}" {
            pending += v;
        }
    }
    Some((parts, pending))
}

/// `force_flush` until no row is pending and the parts hold at least the dataset's
/// `unique` samples (with dedup, parts hold the retries too until merged), at most
/// `max`; whether that happened.
fn wait_vm_rows(base: &str, unique: u64, max: Duration) -> bool {
    let until = Instant::now() + max;
    loop {
        let _ = get_text(&format!("{base}/internal/force_flush"));
        std::thread::sleep(Duration::from_millis(500));
        match vm_rows(base) {
            Some((parts, 0)) if parts >= unique => return true,
            _ if Instant::now() >= until => return false,
            _ => {}
        }
    }
}

/// Compact the way each system does, then measure its bytes on disk.
fn compact_and_measure(spec: SystemSpec, r: &Running, unique: u64) -> Result<(u64, String)> {
    let data = r.dir.path().join("data");
    match spec.kind {
        Kind::Tidemark => {
            post_text(
                &format!("{}/{INDEX}/_forcemerge", r.base),
                "",
                "application/json",
            )?;
            let bytes = dir_bytes(&data);
            Ok((bytes, "data dir after `_forcemerge`".into()))
        }
        Kind::Victoria => {
            // Every accepted row in a part on disk before the merge: `force_flush` does
            // not wait for rows still in the ingestion buffers, and a merge started
            // before they land leaves them in memory, where the directory does not count
            // them (seen once: a part of 64,478 rows of 504,000 measured).
            let on_disk = wait_vm_rows(&r.base, unique, Duration::from_secs(60));
            get_text(&format!("{}/internal/force_merge", r.base))?;
            let bytes = wait_stable(
                || dir_bytes(&data),
                Duration::from_secs(5),
                Duration::from_secs(90),
            );
            Ok((
                bytes,
                format!(
                    "storageDataPath after `/internal/force_merge`{}",
                    if on_disk {
                        ""
                    } else {
                        " (WARNING: the parts did not hold every sample after 60 s)"
                    }
                ),
            ))
        }
        Kind::Prometheus => {
            let v: Value = serde_json::from_str(&post_text(
                &format!("{}/api/v1/admin/tsdb/snapshot", r.base),
                "",
                "application/json",
            )?)?;
            let name = v
                .pointer("/data/name")
                .and_then(Value::as_str)
                .ok_or_else(|| anyhow!("snapshot answer without a name: {v}"))?;
            let bytes = dir_bytes(&data.join("snapshots").join(name));
            Ok((
                bytes,
                format!(
                    "the head written as a block by the snapshot API (TSDB dir incl. WAL: {} bytes)",
                    dir_bytes(&data) - bytes
                ),
            ))
        }
        Kind::Influxdb => {
            let wal = data.join("wal");
            let tsm = data.join("data");
            // The cache is snapshotted to TSM after 1 s without writes and fully compacted
            // after 1 s cold (the config above): wait until the TSM and WAL sizes settle.
            wait_stable(
                || {
                    dir_bytes(&tsm)
                        .wrapping_mul(31)
                        .wrapping_add(dir_bytes(&wal))
                },
                Duration::from_secs(6),
                Duration::from_secs(120),
            );
            // `_series` holds the series file, preallocated in segments of megabytes
            // whatever the series count: reported apart, not counted.
            let series = dir_bytes(&tsm.join(INDEX).join("_series"));
            let (t, w) = (dir_bytes(&tsm) - series, dir_bytes(&wal));
            Ok((
                t + w,
                format!(
                    "TSM data dir after its full compaction ({t} bytes) + WAL ({w} bytes); \
                     not counted: the preallocated series file `_series` ({series} bytes)"
                ),
            ))
        }
    }
}

/// Stored samples and sum per metric, as each system's query API answers.
fn query_metric(spec: SystemSpec, base: &str, metric: &str, truth: &Truth) -> Result<(u64, f64)> {
    match spec.kind {
        Kind::Victoria | Kind::Prometheus => {
            let range = (truth.max_ts - truth.min_ts) / 1000 + 120;
            let at = truth.max_ts / 1000 + 60;
            let q = |f: &str| -> Result<f64> {
                let url = format!("{base}/api/v1/query");
                let body = format!("query=sum({f}({metric}[{range}s]))&time={at}&nocache=1");
                let v: Value = serde_json::from_str(&post_text(
                    &url,
                    &body,
                    "application/x-www-form-urlencoded",
                )?)?;
                Ok(v.pointer("/data/result/0/value/1")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0.0))
            };
            Ok((q("count_over_time")? as u64, q("sum_over_time")?))
        }
        Kind::Influxdb => {
            let field = metric
                .strip_prefix(&format!("{}_", measurement(metric)))
                .unwrap_or(metric);
            let q = format!(
                "q=SELECT count(\"{field}\"), sum(\"{field}\") FROM \"{}\"&db={INDEX}",
                measurement(metric)
            );
            let v: Value = serde_json::from_str(&post_text(
                &format!("{base}/query"),
                &q,
                "application/x-www-form-urlencoded",
            )?)?;
            let row = v
                .pointer("/results/0/series/0/values/0")
                .and_then(Value::as_array);
            let at = |i: usize| {
                row.and_then(|r| r.get(i))
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0)
            };
            Ok((at(1) as u64, at(2)))
        }
        Kind::Tidemark => unreachable!("tidemark is queried in one request"),
    }
}

fn measurement(metric: &str) -> &str {
    metric.split('_').next().unwrap_or(metric)
}

/// Tidemark: one `_search` with a `terms` aggregation on `__name__`.
fn query_tidemark(base: &str, n: usize) -> Result<BTreeMap<String, (u64, f64)>> {
    let body = json!({"size": 0, "aggs": {"m": {"terms": {"field": "__name__", "size": n + 10},
        "aggs": {"v": {"sum": {"field": "value"}}, "l": {"sum": {"field": "value_long"}}}}}});
    let v: Value = serde_json::from_str(&post_text(
        &format!("{base}/{INDEX}/_search"),
        &body.to_string(),
        "application/json",
    )?)?;
    let mut out = BTreeMap::new();
    for b in v
        .pointer("/aggregations/m/buckets")
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow!("no buckets in {v}"))?
    {
        let key = b["key"].as_str().unwrap_or_default().to_owned();
        let count = b["doc_count"].as_u64().unwrap_or(0);
        let sum = b["v"]["value"].as_f64().unwrap_or(0.0) + b["l"]["value"].as_f64().unwrap_or(0.0);
        out.insert(key, (count, sum));
    }
    Ok(out)
}

/// Where a stored sum lies between "every first copy kept" (0) and "every last copy
/// kept" (1); `None` when no retry of this metric changed a value.
fn kept_fraction(stored: f64, t: &MetricTruth) -> Option<f64> {
    let d = t.sum_last - t.sum_first;
    (d.abs() > 1e-9 * t.sum_first.abs().max(1.0)).then(|| (stored - t.sum_first) / d)
}

/// The verdict of a kept fraction: `first`, `last`, or the fraction; `exact` when the
/// sum equals the truth and no retry changed a value.
fn verdict(stored: f64, t: &MetricTruth) -> String {
    match kept_fraction(stored, t) {
        Some(f) if f.abs() < 1e-3 => "first".into(),
        Some(f) if (f - 1.0).abs() < 1e-3 => "last".into(),
        Some(f) => format!("{f:.3}"),
        None if (stored - t.sum_first).abs() <= 1e-9 * t.sum_first.abs().max(1.0) => "exact".into(),
        None => "sum off".into(),
    }
}

/// One system's row of the report.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Row {
    /// Which round of `--rounds` (from 1).
    round: u32,
    /// The load average when the system's run ended.
    load: String,
    system: String,
    protocol: String,
    version: String,
    error: Option<String>,
    samples_per_sec: f64,
    ingest_secs: f64,
    requests: u64,
    accepted_samples: u64,
    rejected_requests: u64,
    rejected_samples: u64,
    first_rejection: Option<String>,
    stored: u64,
    bytes: u64,
    bytes_note: String,
    bytes_per_sample: f64,
    peak_rss_kib: u64,
    kept: String,
    per_metric: Vec<(String, u64, f64, String)>,
}

fn run_system(spec: SystemSpec, a: &Args, p: &Prepared, span_secs: i64) -> Result<Row> {
    let bodies = match spec.proto {
        Proto::Influx => p.influx.as_ref(),
        Proto::RemoteWrite => p.rw.as_ref(),
    }
    .ok_or_else(|| anyhow!("no bodies for {}", spec.proto.name()))?;
    let bodies = Arc::clone(bodies);
    let running = start(spec, a, span_secs)?;
    let result = (|| -> Result<Row> {
        let ing = ingest(spec, &running.base, &bodies, a.clients);
        let (bytes, bytes_note) = compact_and_measure(spec, &running, p.truth.unique())?;
        if let Some(keep) = &a.keep_data {
            keep_data(
                &running.dir.path().join("data"),
                &keep.join(sanitize(&spec.label())),
            )?;
        }
        if spec.kind == Kind::Victoria {
            // Let the flushed parts become searchable.
            std::thread::sleep(Duration::from_secs(2));
        }
        let mut per_metric = Vec::new();
        let stored_map = if spec.kind == Kind::Tidemark {
            query_tidemark(&running.base, p.truth.metrics.len())?
        } else {
            let mut m = BTreeMap::new();
            for name in p.truth.metrics.keys() {
                m.insert(
                    name.clone(),
                    query_metric(spec, &running.base, name, &p.truth)?,
                );
            }
            m
        };
        let mut kinds = std::collections::BTreeSet::new();
        for (name, t) in &p.truth.metrics {
            let (count, sum) = stored_map.get(name).copied().unwrap_or((0, 0.0));
            let v = verdict(sum, t);
            kinds.insert(v.clone());
            per_metric.push((name.clone(), count, sum, v));
        }
        let stored: u64 = per_metric.iter().map(|m| m.1).sum();
        // Over all metrics: the kept fraction of the summed differences.
        let (num, den) = p
            .truth
            .metrics
            .values()
            .zip(&per_metric)
            .fold((0.0, 0.0), |(n, d), (t, m)| {
                (n + (m.2 - t.sum_first), d + (t.sum_last - t.sum_first))
            });
        let kept = match kinds.iter().collect::<Vec<_>>().as_slice() {
            _ if stored != p.truth.unique() => "n/a (stored count off)".to_owned(),
            [one] => (*one).clone(),
            _ if den != 0.0 => format!("mixed, {:.3} of the way to last", num / den),
            many => format!(
                "mixed ({})",
                many.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let peak_rss_kib = vm_hwm_kib(running.process.id()).unwrap_or(0);
        Ok(Row {
            round: 0,
            load: String::new(),
            system: spec.label(),
            protocol: spec.proto.name().into(),
            version: running.version.clone(),
            error: None,
            samples_per_sec: p.truth.sent_samples as f64 / ing.secs,
            ingest_secs: ing.secs,
            requests: ing.requests,
            accepted_samples: ing.ok_samples,
            rejected_requests: ing.rejected_requests,
            rejected_samples: ing.rejected_samples,
            first_rejection: ing.first_error,
            stored,
            bytes,
            bytes_note,
            bytes_per_sample: bytes as f64 / p.truth.unique().max(1) as f64,
            peak_rss_kib,
            kept,
            per_metric,
        })
    })();
    running.stop();
    result
}

/// Copy a data directory (after compaction) for inspection: `cp -a`, replacing `to`.
fn keep_data(from: &Path, to: &Path) -> Result<()> {
    if to.exists() {
        std::fs::remove_dir_all(to).with_context(|| format!("removing {}", to.display()))?;
    }
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let status = Command::new("cp").arg("-a").arg(from).arg(to).status()?;
    if !status.success() {
        bail!("cp -a {} {}: {status}", from.display(), to.display());
    }
    Ok(())
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let a = parse_args(args)?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    // The dataset ends ten minutes ago (retention windows and "too far in the future"
    // checks of every system are then satisfied); its length depends on the options.
    let probe = dataset(&a, 0)?;
    let interval = probe.schema().interval_millis;
    let span_ms = (a.points / u64::from(a.series) + 3) as i64 * interval;
    let start_ms = (now_ms - span_ms - 600_000) / 1000 * 1000;
    let ds = dataset(&a, start_ms)?;
    let need_lp = a.systems.iter().any(|s| s.proto == Proto::Influx);
    let need_rw = a.systems.iter().any(|s| s.proto == Proto::RemoteWrite);
    let t = Instant::now();
    let prepared = prepare(&a, &ds, start_ms, need_lp, need_rw)?;
    let truth = &prepared.truth;
    eprintln!(
        "peers: {} dataset, {} points ({} series), {} samples sent ({} unique, {} retried, {} of them with another value, {} late points) in {} / {} bodies, built in {:.1} s",
        a.dataset,
        a.points,
        a.series,
        truth.sent_samples,
        truth.unique(),
        truth.duplicate_samples,
        truth.changed_samples,
        truth.late_points,
        prepared.influx.as_ref().map_or(0, |b| b.bodies.len()),
        prepared.rw.as_ref().map_or(0, |b| b.bodies.len()),
        t.elapsed().as_secs_f64()
    );
    let load_before = loadavg();
    let mut rows = Vec::new();
    for round in 1..=a.rounds {
        let mut order: Vec<SystemSpec> = a.systems.clone();
        if round % 2 == 0 {
            order.reverse();
        }
        for spec in &order {
            eprintln!(
                "peers: round {round}/{}: {} ({}) ...",
                a.rounds,
                spec.label(),
                spec.proto.name()
            );
            let mut row = run_system(*spec, &a, &prepared, span_ms / 1000).unwrap_or_else(|e| {
                eprintln!("peers: {} skipped: {e:#}", spec.label());
                Row {
                    system: spec.label(),
                    protocol: spec.proto.name().into(),
                    error: Some(format!("{e:#}")),
                    ..Row::default()
                }
            });
            row.round = round;
            row.load = loadavg();
            rows.push(row);
        }
    }
    let load_after = loadavg();
    let report = Report {
        date: chrono_like_now(),
        command: format!("cargo xtask peers {}", args.join(" ")),
        machine: format!(
            "{} cores, load average {load_before} before, {load_after} after (shared with other builds)",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        ),
        args: a.clone(),
        truth: prepared.truth.clone(),
        rows,
    };
    let md = report.markdown();
    println!("{md}");
    if let Some(p) = &a.markdown {
        std::fs::write(p, &md).with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &a.json {
        let mut f =
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
        writeln!(f, "{}", serde_json::to_string_pretty(&report.json())?)?;
    }
    Ok(())
}

/// The median of `v` (the mean of the middle two for an even count), `None` if empty.
fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn chrono_like_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// The whole run.
pub(crate) struct Report {
    date: String,
    command: String,
    machine: String,
    args: Args,
    truth: Truth,
    rows: Vec<Row>,
}

impl Report {
    /// The `--json` document. Fields: `date`, `command`, `machine`, `dataset` (name,
    /// points, series, seed, dup_rate, late_rate, changed_rate, clients, batch), `truth`
    /// (`sent_samples`, `unique_samples`, `duplicate_samples`, `changed_samples`,
    /// `late_points`, per metric `unique`/`sum_first`/`sum_last`), and `systems`: per
    /// system and round (`round`, from 1, and `load_after`, the load average when its run
    /// ended) `system`, `protocol`, `version`, `error` (why it was skipped, or null),
    /// `samples_per_sec` (samples sent, duplicates included, over the ingest wall time),
    /// `ingest_secs`, `requests`, `accepted_samples` (in 2xx answers), `rejected_requests`/`rejected_samples` (answers other than 2xx after
    /// retries of 429/5xx) and `first_rejection`, `stored_samples` (sum of the stored
    /// counts the system's query API reports), `bytes` and `bytes_note` (what was
    /// measured), `bytes_per_sample` (bytes over the unique samples), `peak_rss_kib`
    /// (VmHWM of the server process at the end), `kept` (`first`, `last`, `exact` when no
    /// retry changed a value, `neither`, or `mixed (...)` across metrics: which copy of a
    /// retried point the stored sums match) and `per_metric` (`metric`, `stored`, `sum`,
    /// `kept`).
    fn json(&self) -> Value {
        let a = &self.args;
        json!({
            "date": self.date,
            "command": self.command,
            "machine": self.machine,
            "dataset": {"name": a.dataset, "points": a.points, "series": a.series, "seed": a.seed,
                "dup_rate": a.dup_rate, "late_rate": a.late_rate, "changed_rate": a.changed_rate,
                "clients": a.clients, "batch": a.batch},
            "truth": {
                "sent_samples": self.truth.sent_samples,
                "unique_samples": self.truth.unique(),
                "duplicate_samples": self.truth.duplicate_samples,
                "changed_samples": self.truth.changed_samples,
                "late_points": self.truth.late_points,
                "per_metric": self.truth.metrics.iter().map(|(k, m)| json!({
                    "metric": k, "unique": m.unique, "sum_first": m.sum_first, "sum_last": m.sum_last,
                })).collect::<Vec<_>>(),
            },
            "rounds": a.rounds,
            "systems": self.rows.iter().map(|r| json!({
                "round": r.round, "load_after": r.load,
                "system": r.system, "protocol": r.protocol, "version": r.version, "error": r.error,
                "samples_per_sec": r.samples_per_sec, "ingest_secs": r.ingest_secs,
                "requests": r.requests, "accepted_samples": r.accepted_samples,
                "rejected_requests": r.rejected_requests, "rejected_samples": r.rejected_samples,
                "first_rejection": r.first_rejection,
                "stored_samples": r.stored, "bytes": r.bytes, "bytes_note": r.bytes_note,
                "bytes_per_sample": r.bytes_per_sample, "peak_rss_kib": r.peak_rss_kib,
                "kept": r.kept,
                "per_metric": r.per_metric.iter().map(|(m, c, s, k)| json!({
                    "metric": m, "stored": c, "sum": s, "kept": k,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }

    /// The Markdown section for docs/results/peers.md.
    fn markdown(&self) -> String {
        let t = &self.truth;
        let mut s = String::new();
        s.push_str(&format!(
            "### `{}` dataset — {}\n\n`{}`\n\nMachine: {}. Dataset: {} points × {} series, {} samples sent, {} unique, {} retried ({} of them with another value), {} late points; {} connection(s), batches of ~{} samples.\n\n",
            self.args.dataset, self.date, self.command, self.machine, self.args.points, self.args.series,
            t.sent_samples, t.unique(), t.duplicate_samples, t.changed_samples, t.late_points,
            self.args.clients, self.args.batch
        ));
        if self.args.rounds > 1 {
            self.medians(&mut s);
        }
        for round in 1..=self.args.rounds.max(1) {
            let rows: Vec<&Row> = self
                .rows
                .iter()
                .filter(|r| r.round == round || self.args.rounds <= 1)
                .collect();
            if self.args.rounds > 1 {
                s.push_str(&format!("Round {round}:\n\n"));
            }
            self.table(&mut s, &rows);
        }
        s.push_str(
            "\n\"Retried point kept\": where the stored sums lie between every first copy kept \
             (`first`, 0) and every last copy kept (`last`, 1), per metric, over the retries sent \
             with another value; with more than one connection, copies in batches sent at the \
             same time may arrive in either order.\n\n",
        );
        for r in &self.rows {
            match &r.error {
                Some(e) => s.push_str(&format!("- {}: skipped: {e}\n", r.system)),
                None => {
                    if self.args.rounds > 1 {
                        s.push_str(&format!("- round {}:", r.round));
                    } else {
                        s.push('-');
                    }
                    s.push_str(&format!(
                        " {} ({}): bytes = {}",
                        r.system, r.version, r.bytes_note
                    ));
                    if let Some(e) = &r.first_rejection {
                        s.push_str(&format!(
                            "; first rejection: `{}`",
                            e.replace('`', "'").replace('\n', " ")
                        ));
                    }
                    s.push('\n');
                }
            }
        }
        s
    }

    /// One round's table: a column per system that ran.
    fn table(&self, s: &mut String, rows: &[&Row]) {
        let t = &self.truth;
        let ok: Vec<&Row> = rows.iter().copied().filter(|r| r.error.is_none()).collect();
        s.push_str("| |");
        for r in &ok {
            s.push_str(&format!(" {} ({}) |", r.system, r.protocol));
        }
        s.push_str("\n|---|");
        for _ in &ok {
            s.push_str("---:|");
        }
        s.push('\n');
        let mut line = |name: &str, f: &dyn Fn(&Row) -> String| {
            s.push_str(&format!("| {name} |"));
            for r in &ok {
                s.push_str(&format!(" {} |", f(r)));
            }
            s.push('\n');
        };
        line("ingest samples/s", &|r| format!("{:.0}", r.samples_per_sec));
        line("rejected requests (samples)", &|r| {
            format!("{} ({})", r.rejected_requests, r.rejected_samples)
        });
        line(&format!("stored samples (unique: {})", t.unique()), &|r| {
            format!("{} ({:+})", r.stored, r.stored as i64 - t.unique() as i64)
        });
        line("retried point kept (sums)", &|r| r.kept.clone());
        line("bytes/sample (unique samples)", &|r| {
            format!("{:.2}", r.bytes_per_sample)
        });
        line("bytes/stored sample", &|r| {
            format!("{:.2}", r.bytes as f64 / r.stored.max(1) as f64)
        });
        line("peak RSS MiB", &|r| {
            format!("{:.0}", r.peak_rss_kib as f64 / 1024.0)
        });
        s.push('\n');
    }

    /// Samples/s per round and their median for each system, and each Tidemark median
    /// over VictoriaMetrics' (with dedup) on the same protocol.
    fn medians(&self, s: &mut String) {
        s.push_str("| system (protocol) |");
        for round in 1..=self.args.rounds {
            s.push_str(&format!(" round {round} |"));
        }
        s.push_str(" **median** | load after each |\n|---|");
        for _ in 0..=self.args.rounds {
            s.push_str("---:|");
        }
        s.push_str("---|\n");
        let mut medians: Vec<(SystemSpec, f64)> = Vec::new();
        for spec in &self.args.systems {
            let label = spec.label();
            let mine: Vec<&Row> = self
                .rows
                .iter()
                .filter(|r| r.system == label && r.protocol == spec.proto.name())
                .collect();
            let mut rates: Vec<f64> = mine
                .iter()
                .filter(|r| r.error.is_none())
                .map(|r| r.samples_per_sec)
                .collect();
            s.push_str(&format!("| {label} ({}) |", spec.proto.name()));
            for round in 1..=self.args.rounds {
                match mine.iter().find(|r| r.round == round) {
                    Some(r) if r.error.is_none() => {
                        s.push_str(&format!(" {:.0} |", r.samples_per_sec))
                    }
                    _ => s.push_str(" skipped |"),
                }
            }
            let m = median(&mut rates);
            match m {
                Some(m) => {
                    s.push_str(&format!(" **{m:.0}** |"));
                    medians.push((*spec, m));
                }
                None => s.push_str(" — |"),
            }
            let loads: Vec<&str> = mine.iter().map(|r| r.load.as_str()).collect();
            s.push_str(&format!(" {} |\n", loads.join("; ")));
        }
        s.push('\n');
        for (spec, m) in &medians {
            if spec.kind != Kind::Tidemark {
                continue;
            }
            let peer = medians
                .iter()
                .find(|(p, _)| p.kind == Kind::Victoria && p.dedup && p.proto == spec.proto);
            if let Some((_, v)) = peer {
                s.push_str(&format!(
                    "- {} ({}): {:.2}× VictoriaMetrics' median\n",
                    spec.label(),
                    spec.proto.name(),
                    m / v
                ));
            }
        }
        s.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use tidemark_server::metrics::line_protocol;

    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    fn report(args: Args, truth: Truth, rows: Vec<Row>) -> Report {
        Report {
            date: "d".into(),
            command: "c".into(),
            machine: "m".into(),
            args,
            truth,
            rows,
        }
    }

    #[test]
    fn parses_systems_and_sizes() {
        let a = parse_args(&args(
            "--small --dataset otel --systems tidemark:rw,vm,prometheus",
        ))
        .unwrap();
        assert_eq!((a.points, a.series), (3_000, 50));
        assert_eq!(
            a.systems,
            vec![
                SystemSpec {
                    kind: Kind::Tidemark,
                    proto: Proto::RemoteWrite,
                    dedup: true,
                },
                SystemSpec {
                    kind: Kind::Victoria,
                    proto: Proto::Influx,
                    dedup: true,
                },
                SystemSpec {
                    kind: Kind::Prometheus,
                    proto: Proto::RemoteWrite,
                    dedup: true,
                },
            ]
        );
        let d = parse_args(&[]).unwrap();
        assert_eq!((d.points, d.series, d.systems.len()), (180_000, 500, 7));
        let nd = parse_args(&args("--systems victoria-metrics-nodedup:rw")).unwrap();
        assert!(!nd.systems[0].dedup && nd.systems[0].proto == Proto::RemoteWrite);
        assert_eq!(nd.systems[0].label(), "victoria-metrics-nodedup:rw");
        assert!(parse_args(&args("--systems prometheus:influx")).is_err());
        assert!(parse_args(&args("--systems influxdb:rw")).is_err());
        assert!(parse_args(&args("--dataset events")).is_err());
        assert!(parse_args(&args("--dup-rate 2")).is_err());
        assert!(parse_args(&args("--points")).is_err());
    }

    /// The flag-based truth equals one computed from every (series, metric, timestamp)
    /// as sent, first and last copy; the bodies carry exactly the samples sent.
    #[test]
    fn truth_matches_the_stream_and_bodies() {
        let a = parse_args(&args("--small --batch 500")).unwrap();
        let start = 1_764_460_800_000;
        let ds = dataset(&a, start).unwrap();
        let p = prepare(&a, &ds, start, true, true).unwrap();
        let mut seen: std::collections::HashMap<(u32, i64, String), (f64, f64)> =
            Default::default();
        for r in ds.records() {
            let change = changed(a.seed, start, &r, a.changed_rate);
            for (path, m) in &r.metrics {
                let v = if change {
                    changed_value(metric_f64(*m))
                } else {
                    metric_f64(*m)
                };
                let v = if matches!(m, MetricVal::Counter(_)) {
                    v.trunc()
                } else {
                    v
                };
                let e = seen
                    .entry((r.series, r.ts_millis, sanitize(path)))
                    .or_insert((v, v));
                e.1 = v;
            }
        }
        let t = &p.truth;
        assert_eq!(t.unique(), seen.len() as u64);
        assert!(t.changed_samples > 0 && t.duplicate_samples > t.changed_samples);
        for (name, m) in &t.metrics {
            assert!(name.starts_with("k8s_pod_") || name == "k8s_container_restarts");
            let field = name;
            let (f, l) = seen
                .iter()
                .filter(|(k, _)| &k.2 == field)
                .fold((0.0, 0.0), |acc, (_, v)| (acc.0 + v.0, acc.1 + v.1));
            assert!((f - m.sum_first).abs() <= 1e-9 * f.abs().max(1.0), "{name}");
            assert!((l - m.sum_last).abs() <= 1e-9 * l.abs().max(1.0), "{name}");
            if kept_fraction(m.sum_first, m).is_some() {
                assert_eq!(verdict(m.sum_first, m), "first");
                assert_eq!(verdict(m.sum_last, m), "last");
            }
        }
        let lp = p.influx.unwrap();
        let lines: usize = lp
            .bodies
            .iter()
            .map(|(b, _)| std::str::from_utf8(b).unwrap().lines().count())
            .sum();
        assert_eq!(lines as u64, ds.total_docs());
        let rw_samples: u64 = p.rw.unwrap().bodies.iter().map(|b| b.1).sum();
        assert_eq!(rw_samples, t.sent_samples);
        // A remote-write body is snappy of a protobuf whose first field is a series.
        let first = &lp.bodies[0].0;
        assert!(std::str::from_utf8(first).unwrap().starts_with("k8s,"));
    }

    #[test]
    fn verdicts_and_markdown() {
        let m = MetricTruth {
            unique: 10,
            sum_first: 100.0,
            sum_last: 130.0,
        };
        assert_eq!(verdict(100.0, &m), "first");
        assert_eq!(verdict(130.0, &m), "last");
        assert_eq!(verdict(115.0, &m), "0.500");
        let same = MetricTruth {
            unique: 1,
            sum_first: 5.0,
            sum_last: 5.0,
        };
        assert_eq!(verdict(5.0, &same), "exact");
        assert_eq!(verdict(6.0, &same), "sum off");
        let a = parse_args(&args("--small")).unwrap();
        let mut truth = Truth::default();
        truth.metrics.insert("k8s_cpu".into(), m);
        truth.sent_samples = 12;
        let rows = vec![
            Row {
                system: "tidemark".into(),
                protocol: "line protocol".into(),
                samples_per_sec: 1234.4,
                stored: 10,
                bytes: 25,
                bytes_per_sample: 2.5,
                peak_rss_kib: 2048,
                kept: "first".into(),
                ..Row::default()
            },
            Row {
                system: "influxdb".into(),
                error: Some("influxd not found".into()),
                ..Row::default()
            },
        ];
        let r = report(a, truth, rows);
        let md = r.markdown();
        assert!(md.contains("| ingest samples/s | 1234 |"), "{md}");
        assert!(
            md.contains("| bytes/sample (unique samples) | 2.50 |"),
            "{md}"
        );
        assert!(md.contains("| bytes/stored sample | 2.50 |"), "{md}");
        assert!(md.contains("| peak RSS MiB | 2 |"), "{md}");
        assert!(
            md.contains("| stored samples (unique: 10) | 10 (+0) |"),
            "{md}"
        );
        assert!(
            md.contains("- influxdb: skipped: influxd not found"),
            "{md}"
        );
        let j = r.json();
        assert_eq!(j["systems"][0]["bytes_per_sample"], 2.5);
        assert_eq!(j["truth"]["unique_samples"], 10);
        assert!(j["systems"][1]["error"].is_string());
    }

    #[test]
    fn rounds_report_each_round_and_the_medians() {
        let a = parse_args(&args("--small --rounds 3 --systems tidemark,vm,vm:rw")).unwrap();
        assert_eq!(a.rounds, 3);
        assert!(parse_args(&args("--rounds 0")).is_err());
        let mut truth = Truth::default();
        truth
            .metrics
            .insert("k8s_cpu".into(), MetricTruth::default());
        let row = |round: u32, system: &str, protocol: &str, rate: f64| Row {
            round,
            load: format!("0.{round}"),
            system: system.into(),
            protocol: protocol.into(),
            samples_per_sec: rate,
            ..Row::default()
        };
        let mut rows = Vec::new();
        for (round, t, v) in [(1, 300.0, 100.0), (2, 100.0, 200.0), (3, 200.0, 400.0)] {
            rows.push(row(round, "tidemark", "line protocol", t));
            rows.push(row(round, "victoria-metrics", "line protocol", v));
        }
        // A peer that failed in one round: its median is of the rounds it ran.
        rows.push(Row {
            error: Some("down".into()),
            ..row(1, "victoria-metrics:rw", "remote write", 0.0)
        });
        rows.push(row(2, "victoria-metrics:rw", "remote write", 10.0));
        rows.push(row(3, "victoria-metrics:rw", "remote write", 30.0));
        let r = report(a, truth, rows);
        let md = r.markdown();
        assert!(
            md.contains("| tidemark (line protocol) | 300 | 100 | 200 | **200** | 0.1; 0.2; 0.3 |"),
            "{md}"
        );
        assert!(
            md.contains("| victoria-metrics:rw (remote write) | skipped | 10 | 30 | **20** |"),
            "{md}"
        );
        assert!(
            md.contains("- tidemark (line protocol): 1.00× VictoriaMetrics' median"),
            "{md}"
        );
        assert!(md.contains("Round 3:"), "{md}");
        assert_eq!(r.json()["systems"][5]["round"], 3);
        assert_eq!(median(&mut [4.0, 1.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
    }

    fn decode(body: &[u8]) -> WriteRequest {
        let raw = remote_write::decompress(body, 1 << 30).unwrap();
        <WriteRequest as prost::Message>::decode(raw.as_slice()).unwrap()
    }

    /// Both protocols' bodies carry the same samples in the same order: each line-protocol
    /// field (parsed by the server's reader) is the next remote-write series (decoded by
    /// prost), with the line's tags and `__name__` as labels, sorted by name.
    #[test]
    fn remote_write_and_line_protocol_bodies_agree() {
        let a = parse_args(&args("--small --batch 500")).unwrap();
        let start = 1_764_460_800_000;
        let ds = dataset(&a, start).unwrap();
        let p = prepare(&a, &ds, start, true, true).unwrap();
        let rw: Vec<TimeSeries> =
            p.rw.unwrap()
                .bodies
                .iter()
                .flat_map(|(b, _)| decode(b).timeseries)
                .collect();
        let mut from_lp = Vec::new();
        for (body, _) in &p.influx.unwrap().bodies {
            for line in std::str::from_utf8(body).unwrap().lines() {
                let l = line_protocol::parse_line(line.as_bytes()).unwrap();
                for (field, v) in &l.fields {
                    let value = match v {
                        line_protocol::FieldValue::Float(f) => *f,
                        line_protocol::FieldValue::Int(i) => *i as f64,
                        other => panic!("{other:?}"),
                    };
                    let tags: Vec<(String, String)> = l
                        .tags
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect();
                    let name = format!("{}_{field}", l.measurement);
                    from_lp.push(rw_series(&name, &tags, l.timestamp.unwrap(), value));
                }
            }
        }
        assert_eq!(rw.len() as u64, p.truth.sent_samples);
        assert_eq!(rw, from_lp);
        assert!(rw[0].labels.windows(2).all(|w| w[0].name < w[1].name));
        assert!(rw[0].labels.iter().any(|l| l.name == "__name__"));
    }
}
