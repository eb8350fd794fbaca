//! `cargo xtask promql-bench`: `sum by (site) (rate(x[5m]))` as a `query_range` with a
//! 1-minute step over counters generated on the fly (default 10,000 series, one day at
//! 10 s), written through Prometheus remote write into `tidemark-server` and
//! VictoriaMetrics (each on a free 127.0.0.1 port, its own temp dir, stopped after), then
//! timed on each (medians of --reps after one warm-up). Also: the answers compared
//! (same sites and steps; VictoriaMetrics' `rate` does not extrapolate as Prometheus'
//! does, so values are compared as a ratio), and Tidemark's peak memory (VmHWM) for
//! the query over ranges of growing length, each in a freshly restarted server over
//! the same data directory.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use tidemark_server::metrics::remote_write::{self, Label, Sample, TimeSeries, WriteRequest};

use crate::harness::{
    Process, agent, ensure_installed, free_port, get_text, loadavg, package_version, post_text,
    status_kib, tidemark_server_bin, vm_hwm_kib,
};

/// How long a stopped server has to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(20);

struct Args {
    series: u64,
    hours: u64,
    interval_s: u64,
    sites: u64,
    step_s: u64,
    reps: usize,
    clients: usize,
    batch_series: u64,
    chunk_points: u64,
    tidemark_bin: Option<PathBuf>,
    json: Option<PathBuf>,
    skip_memory: bool,
    rollups: bool,
    keep: Option<PathBuf>,
    buckets: Option<u64>,
    queries: bool,
}

fn parse_args(args: &[String]) -> Result<Args> {
    let mut a = Args {
        series: 10_000,
        hours: 24,
        interval_s: 10,
        sites: 10,
        step_s: 60,
        reps: 5,
        clients: 2,
        batch_series: 500,
        chunk_points: 60,
        tidemark_bin: None,
        json: None,
        skip_memory: false,
        rollups: false,
        keep: None,
        buckets: None,
        queries: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| anyhow!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--series" => a.series = val()?.parse()?,
            "--hours" => a.hours = val()?.parse()?,
            "--interval-secs" => a.interval_s = val()?.parse()?,
            "--sites" => a.sites = val()?.parse()?,
            "--step-secs" => a.step_s = val()?.parse()?,
            "--reps" => a.reps = val()?.parse()?,
            "--clients" => a.clients = val()?.parse()?,
            "--batch-series" => a.batch_series = val()?.parse()?,
            "--tidemark-bin" => a.tidemark_bin = Some(PathBuf::from(val()?)),
            "--json" => a.json = Some(PathBuf::from(val()?)),
            "--skip-memory" => a.skip_memory = true,
            "--rollups" => a.rollups = true,
            "--keep" => a.keep = Some(PathBuf::from(val()?)),
            "--buckets" => a.buckets = Some(val()?.parse()?),
            "--queries" => a.queries = true,
            other => bail!("unknown option {other:?}"),
        }
    }
    if a.series == 0 || a.hours == 0 || a.interval_s == 0 || a.sites == 0 || a.reps == 0 {
        bail!("--series, --hours, --interval-secs, --sites and --reps must be positive");
    }
    Ok(a)
}

/// The counter value of series `i` at point `k`: increments of 1..=5 per sample, a
/// reset every 2,000 samples for one series in seven (so `rate` corrects resets).
fn value(i: u64, k: u64) -> f64 {
    let period = if i % 7 == 0 { 2000 } else { u64::MAX };
    let k = k % period;
    (k * 3 + (k * (i + 1)) % 5) as f64
}

/// The histogram buckets' upper bounds (`le`), `+Inf` last.
const LES: [&str; 10] = [
    "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "25", "50", "+Inf",
];

/// The cumulative count of bucket series `b` (histogram `b / 10`, bucket `b % 10`) at
/// point `k`: each bucket's own count grows by 1..=3 per sample, so the cumulative
/// counts grow with `le` and with time.
fn bucket_value(b: u64, k: u64) -> f64 {
    let (h, j) = (b / LES.len() as u64, b % LES.len() as u64);
    ((0..=j).map(|m| 1 + (m + h) % 3).sum::<u64>() * k) as f64
}

/// The series count including the histogram's buckets.
fn total_series(a: &Args) -> u64 {
    a.series + a.buckets.unwrap_or(0)
}

/// One remote-write 1.0 `WriteRequest` (the server crate's encoder): series `lo..hi`,
/// points `k0..k1` of each, snappy-compressed.
fn write_request(a: &Args, start_ms: i64, lo: u64, hi: u64, k0: u64, k1: u64) -> Vec<u8> {
    let timeseries = (lo..hi)
        .map(|i| {
            // Series past `series` are the histogram's buckets (`--buckets`).
            let bucket = i.checked_sub(a.series);
            let labels: Vec<(&str, String)> = match bucket {
                None => vec![
                    ("__name__", "x".into()),
                    ("host", format!("h{i}")),
                    ("job", "bench".into()),
                    ("site", format!("s{}", i % a.sites)),
                ],
                Some(b) => vec![
                    ("__name__", "lat_bucket".into()),
                    ("host", format!("h{}", b / LES.len() as u64)),
                    ("job", "bench".into()),
                    ("le", LES[(b % LES.len() as u64) as usize].into()),
                    ("site", format!("s{}", (b / LES.len() as u64) % a.sites)),
                ],
            };
            let samples = (k0..k1)
                .map(|k| Sample {
                    value: match bucket {
                        None => value(i, k),
                        Some(b) => bucket_value(b, k),
                    },
                    timestamp: start_ms + (k * a.interval_s * 1000) as i64,
                })
                .collect();
            TimeSeries {
                labels: labels
                    .into_iter()
                    .map(|(name, value)| Label {
                        name: name.into(),
                        value,
                    })
                    .collect(),
                samples,
                ..TimeSeries::default()
            }
        })
        .collect();
    remote_write::encode(&WriteRequest {
        timeseries,
        ..WriteRequest::default()
    })
}

struct Server {
    process: Process,
    base: String,
    _dir: Option<tempfile::TempDir>,
}

fn start_tidemark(
    bin: &PathBuf,
    data: &std::path::Path,
    dir: Option<tempfile::TempDir>,
) -> Result<Server> {
    let port = free_port()?;
    let base = format!("http://127.0.0.1:{port}");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(data.with_extension("log"))?;
    let mut cmd = Command::new(bin);
    cmd.arg("--data")
        .arg(data)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("TIDEMARK_LOG", "warn");
    let mut process = Process::spawn(&mut cmd, log, STOP_GRACE)
        .with_context(|| format!("starting {}", bin.display()))?;
    process.wait_ready(&format!("{base}/"))?;
    Ok(Server {
        process,
        base,
        _dir: dir,
    })
}

fn start_vm(data: &std::path::Path, dir: Option<tempfile::TempDir>) -> Result<Server> {
    let bin = ensure_installed("victoria-metrics", "victoria-metrics")?;
    let port = free_port()?;
    let base = format!("http://127.0.0.1:{port}");
    std::fs::create_dir_all(data)?;
    let log = std::fs::File::create(data.with_extension("log"))?;
    let mut cmd = Command::new(bin);
    cmd.arg(format!("-storageDataPath={}", data.display()))
        .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
        .arg("-retentionPeriod=100y");
    let mut process =
        Process::spawn(&mut cmd, log, STOP_GRACE).context("starting victoria-metrics")?;
    process.wait_ready(&format!("{base}/health"))?;
    Ok(Server {
        process,
        base,
        _dir: dir,
    })
}

/// Sends every sample, time-major (chunks of `chunk_points` points of every series, as
/// a scraper's remote write does), `clients` requests in flight. Returns seconds taken.
fn load(a: &Args, url: &str, start_ms: i64, points: u64) -> Result<f64> {
    let chunks: Vec<(u64, u64, u64, u64)> = (0..points)
        .step_by(a.chunk_points as usize)
        .flat_map(|k0| {
            let k1 = (k0 + a.chunk_points).min(points);
            (0..total_series(a))
                .step_by(a.batch_series as usize)
                .map(move |lo| (lo, (lo + a.batch_series).min(total_series(a)), k0, k1))
        })
        .collect();
    let next = AtomicUsize::new(0);
    let sent = AtomicU64::new(0);
    let err: Mutex<Option<String>> = Mutex::new(None);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..a.clients.max(1) {
            s.spawn(|| {
                let ag = agent(300);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(lo, hi, k0, k1)) = chunks.get(i) else {
                        return;
                    };
                    if err.lock().map(|e| e.is_some()).unwrap_or(true) {
                        return;
                    }
                    let body = write_request(a, start_ms, lo, hi, k0, k1);
                    let result = ag
                        .post(url)
                        .set("content-type", "application/x-protobuf")
                        .set("content-encoding", "snappy")
                        .set("x-prometheus-remote-write-version", "0.1.0")
                        .send_bytes(&body)
                        .map_err(|e| anyhow!("{e}"));
                    match result {
                        Ok(_) => {
                            sent.fetch_add((hi - lo) * (k1 - k0), Ordering::Relaxed);
                        }
                        Err(e) => {
                            if let Ok(mut slot) = err.lock() {
                                slot.get_or_insert(e.to_string());
                            }
                            return;
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = err.into_inner().ok().flatten() {
        bail!("remote write to {url}: {e}");
    }
    Ok(t0.elapsed().as_secs_f64())
}

fn query_range(
    base: &str,
    q: &str,
    start_s: i64,
    end_s: i64,
    step_s: u64,
    extra: &str,
) -> Result<(f64, Value)> {
    let url = format!(
        "{base}/api/v1/query_range?query={}&start={start_s}&end={end_s}&step={step_s}{extra}",
        encode(q)
    );
    let t0 = Instant::now();
    let body = get_text(&url)?;
    let secs = t0.elapsed().as_secs_f64();
    let v: Value = serde_json::from_str(&body)?;
    if v["status"] != "success" {
        bail!("{url}: {body:.400}");
    }
    Ok((secs, v))
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

/// site → [(t, v)] of a matrix answer.
fn by_site(v: &Value) -> std::collections::BTreeMap<String, Vec<(f64, f64)>> {
    let mut out = std::collections::BTreeMap::new();
    for s in v["data"]["result"].as_array().into_iter().flatten() {
        let site = s["metric"]["site"].as_str().unwrap_or("").to_owned();
        let pts = s["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some((
                    p.get(0)?.as_f64()?,
                    p.get(1)?.as_str()?.parse::<f64>().ok()?,
                ))
            })
            .collect();
        out.insert(site, pts);
    }
    out
}

fn time_query(
    base: &str,
    q: &str,
    start_s: i64,
    end_s: i64,
    step_s: u64,
    reps: usize,
    extra: &str,
) -> Result<(f64, Vec<f64>, Value)> {
    let (_, first) = query_range(base, q, start_s, end_s, step_s, extra)?;
    let mut times = Vec::new();
    for _ in 0..reps {
        times.push(query_range(base, q, start_s, end_s, step_s, extra)?.0);
    }
    Ok((median(times.clone()), times, first))
}

/// `data.stats.tidemark` of an answer asked with `stats=all`.
fn read_stats(v: &Value) -> Value {
    v["data"]["stats"]["tidemark"].clone()
}

/// `--rollups`: the window aggregates over the same data, read from the partitions'
/// rollups and, with `tidemark_rollups=false`, from raw samples only. The `metrics`
/// index is created partitioned (1 h partitions, rollups at 5 m and 1 h, sealed 30 min
/// after their end) before the load; the queries run over whole hours with a 1 h step
/// once the partitions are sealed, and the two paths' answers are compared.
/// Loads the bench's samples into `tm` by remote write, reports the rate and refreshes
/// the index; the load's seconds.
fn load_tidemark(a: &Args, tm: &Server, start_ms: i64, points: u64, samples: u64) -> Result<f64> {
    let secs = load(a, &format!("{}/api/v1/write", tm.base), start_ms, points)?;
    eprintln!(
        "tidemark: loaded in {secs:.1} s ({:.0} samples/s)",
        samples as f64 / secs
    );
    let _ = post_text(
        &format!("{}/metrics/_refresh", tm.base),
        "",
        "application/json",
    );
    Ok(secs)
}

fn run_rollups(a: &Args, bin: &PathBuf) -> Result<()> {
    let now_s = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() as i64;
    let end_s = (now_s - 600) / 60 * 60;
    let span_s = (a.hours * 3600) as i64;
    let start_s = end_s - span_s;
    let points = span_s as u64 / a.interval_s;
    let samples = points * a.series;
    let start_ms = start_s * 1000 + 1;
    eprintln!(
        "promql-bench --rollups: {} series x {points} points ({samples} samples), load {}",
        a.series,
        loadavg()
    );
    let tdir = tempfile::Builder::new()
        .prefix("xtask-promql-bench-rollups-")
        .tempdir()?;
    let tdata = tdir.path().join("data");
    let tm = start_tidemark(bin, &tdata, None)?;
    let body = json!({
        "settings": {"index": {"mode": "labels", "tidemark": {"partitions": {
            "width": "1h", "seal_grace": "30m", "rollups": ["5m", "1h"],
        }}}},
        "mappings": {"properties": {
            "@timestamp": {"type": "date"},
            "value": {"type": "double", "time_series_metric": "gauge"},
            "value_long": {"type": "long", "time_series_metric": "counter"},
            "value_bool": {"type": "boolean"},
            "value_keyword": {"type": "keyword"},
        }},
    });
    match ureq::put(&format!("{}/metrics", tm.base))
        .set("content-type", "application/json")
        .send_string(&body.to_string())
    {
        Ok(_) => {}
        Err(ureq::Error::Status(code, r)) => {
            bail!(
                "PUT /metrics: {code} {}",
                r.into_string().unwrap_or_default()
            )
        }
        Err(e) => return Err(e.into()),
    }
    let load_s = load_tidemark(a, &tm, start_ms, points, samples)?;
    // Whole hours: windows (t - 1h, t] on the 1 h buckets.
    let q_end = end_s / 3600 * 3600;
    let q_start = q_end - (a.hours as i64 - 1) * 3600;
    let queries = [
        "sum by (site) (sum_over_time(x[1h]))",
        "sum by (site) (avg_over_time(x[1h]))",
        "max by (site) (max_over_time(x[1h]))",
    ];
    // Sealing (merge and rollup build) runs in the server's maintenance; wait until the
    // first query reads buckets for all but the last two hours.
    let want = a.series * a.hours.saturating_sub(2);
    let until = Instant::now() + Duration::from_secs(900);
    loop {
        let (_, v) = query_range(&tm.base, queries[0], q_start, q_end, 3600, "&stats=all")?;
        let got = read_stats(&v)["rollupBuckets"].as_u64().unwrap_or(0);
        if got >= want {
            break;
        }
        if Instant::now() > until {
            bail!("partitions not sealed after 900 s: {got} rollup buckets read, want {want}");
        }
        std::thread::sleep(Duration::from_secs(5));
    }
    let mut rows = Vec::new();
    for q in queries {
        let (r_med, r_times, r_ans) =
            time_query(&tm.base, q, q_start, q_end, 3600, a.reps, "&stats=all")?;
        let (w_med, w_times, w_ans) = time_query(
            &tm.base,
            q,
            q_start,
            q_end,
            3600,
            a.reps,
            "&stats=all&tidemark_rollups=false",
        )?;
        let (r, w) = (by_site(&r_ans), by_site(&w_ans));
        let mut worst = 0.0f64;
        let mut same = r.keys().eq(w.keys());
        for (site, pts) in &r {
            let other = w.get(site).map(Vec::as_slice).unwrap_or(&[]);
            same &= pts.len() == other.len();
            for (x, y) in pts.iter().zip(other) {
                same &= x.0 == y.0;
                let rel = (x.1 - y.1).abs() / x.1.abs().max(y.1.abs()).max(f64::MIN_POSITIVE);
                worst = worst.max(rel);
            }
        }
        let steps: usize = r.values().map(Vec::len).max().unwrap_or(0);
        eprintln!(
            "{q}: rollups median {r_med:.3} s {r_times:?} ({}), raw median {w_med:.3} s {w_times:?} ({}); {} sites x {steps} steps, same series and steps: {same}, max relative difference {worst:e}",
            read_stats(&r_ans),
            read_stats(&w_ans),
            r.len()
        );
        if !same || worst > 1e-9 {
            bail!("{q}: the rollup answer differs from the raw one");
        }
        rows.push(json!({
            "query": q, "start": q_start, "end": q_end, "step_s": 3600,
            "rollups_median_s": r_med, "rollups_runs_s": r_times, "rollups_stats": read_stats(&r_ans),
            "raw_median_s": w_med, "raw_runs_s": w_times, "raw_stats": read_stats(&w_ans),
            "max_relative_difference": worst,
        }));
    }
    drop(tm);
    drop(tdir);
    let report = json!({
        "series": a.series, "hours": a.hours, "interval_s": a.interval_s,
        "samples": samples, "load_s": load_s, "queries": rows, "load": loadavg(),
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let a = parse_args(args)?;
    let bin = tidemark_server_bin(a.tidemark_bin.as_deref())?;
    if a.rollups {
        return run_rollups(&a, &bin);
    }
    // With --keep, the data directories of an earlier run of the same size are reused
    // (their time span recorded beside them), so a changed binary is timed on the same
    // data without loading it again.
    let kept = match &a.keep {
        Some(k) => Kept::open(k, &a)?,
        None => None,
    };
    let now_s = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() as i64;
    // Data ends 10 minutes ago on a whole minute; the query covers the whole span.
    let end_s = kept.as_ref().map_or((now_s - 600) / 60 * 60, |k| k.end_s);
    let span_s = (a.hours * 3600) as i64;
    let start_s = end_s - span_s;
    let points = span_s as u64 / a.interval_s;
    let samples = points * total_series(&a);
    let start_ms = start_s * 1000 + 1;
    let q = "sum by (site) (rate(x[5m]))";
    eprintln!(
        "promql-bench: {} series x {points} points ({samples} samples, {} h at {} s), load {}",
        a.series,
        a.hours,
        a.interval_s,
        loadavg()
    );

    // Tidemark.
    let (tdir, tdata) = match &a.keep {
        Some(k) => (None, k.join("tidemark")),
        None => {
            let d = tempfile::Builder::new()
                .prefix("xtask-promql-bench-tm-")
                .tempdir()?;
            let data = d.path().join("data");
            (Some(d), data)
        }
    };
    let tm = start_tidemark(&bin, &tdata, None)?;
    let tm_load = match &kept {
        Some(k) => k.tidemark_load_s,
        None => {
            let secs = load_tidemark(&a, &tm, start_ms, points, samples)?;
            let _ = post_text(
                &format!("{}/metrics/_forcemerge", tm.base),
                "",
                "application/json",
            );
            secs
        }
    };
    let (_, count) = query_range(&tm.base, "count(x)", end_s, end_s, 60, "")?;
    let tm_series = count["data"]["result"][0]["values"][0][1]
        .as_str()
        .unwrap_or("0")
        .to_owned();
    let (tm_med, tm_times, tm_answer) =
        time_query(&tm.base, q, start_s, end_s, a.step_s, a.reps, "")?;
    let tm_hwm_after_load = vm_hwm_kib(tm.process.id());
    eprintln!("tidemark: {tm_series} series; query median {tm_med:.3} s {tm_times:?}");
    let tm_queries = if a.queries {
        run_queries(&a, &tm.base, "", start_s, end_s, Some(tm.process.id()))?
    } else {
        Vec::new()
    };

    // Peak memory of the query alone, in a fresh server per range.
    let mut memory = Vec::new();
    if !a.skip_memory {
        drop(tm);
        for hours in [1u64, 6, a.hours.max(1)] {
            let hours = hours.min(a.hours);
            if memory.iter().any(|m: &Value| m["hours"] == json!(hours)) {
                continue;
            }
            let s = start_tidemark(&bin, &tdata, None)?;
            let pid = s.process.id();
            let before = vm_hwm_kib(pid).unwrap_or(0);
            let (secs, ans) = query_range(
                &s.base,
                q,
                end_s - (hours * 3600) as i64,
                end_s,
                a.step_s,
                "",
            )?;
            let after = vm_hwm_kib(pid).unwrap_or(0);
            let rss = status_kib(pid, "VmRSS:").unwrap_or(0);
            let steps: usize = by_site(&ans).values().map(Vec::len).max().unwrap_or(0);
            eprintln!(
                "tidemark fresh server, {hours} h range: VmHWM {before} KiB at start, {after} KiB after the query ({secs:.2} s, {steps} steps)"
            );
            memory.push(json!({
                "hours": hours, "samples_in_range": (hours * 3600 / a.interval_s) * a.series,
                "vmhwm_start_kib": before, "vmhwm_after_kib": after, "vmrss_after_kib": rss,
                "secs": secs,
            }));
        }
    } else {
        drop(tm);
    }
    drop(tdir);

    // VictoriaMetrics.
    let vm = match &a.keep {
        Some(k) => start_vm(&k.join("vm"), None)?,
        None => {
            let d = tempfile::Builder::new()
                .prefix("xtask-promql-bench-vm-")
                .tempdir()?;
            let data = d.path().join("data");
            start_vm(&data, Some(d))?
        }
    };
    let vm_load = match &kept {
        Some(k) => k.vm_load_s,
        None => {
            let secs = load(&a, &format!("{}/api/v1/write", vm.base), start_ms, points)?;
            eprintln!(
                "victoria-metrics: loaded in {secs:.1} s ({:.0} samples/s)",
                samples as f64 / secs
            );
            let _ = get_text(&format!("{}/internal/force_flush", vm.base));
            let _ = get_text(&format!("{}/internal/force_merge", vm.base));
            std::thread::sleep(Duration::from_secs(5));
            secs
        }
    };
    if let (Some(k), None) = (&a.keep, &kept) {
        Kept::save(k, &a, end_s, tm_load, vm_load)?;
    }
    let (_, vcount) = query_range(&vm.base, "count(x)", end_s, end_s, 60, "&nocache=1")?;
    let vm_series = vcount["data"]["result"][0]["values"][0][1]
        .as_str()
        .unwrap_or("0")
        .to_owned();
    let (vm_med, vm_times, vm_answer) =
        time_query(&vm.base, q, start_s, end_s, a.step_s, a.reps, "&nocache=1")?;
    let (vm_cached, _, _) = time_query(&vm.base, q, start_s, end_s, a.step_s, a.reps, "")?;
    let vm_queries = if a.queries {
        run_queries(&a, &vm.base, "&nocache=1", start_s, end_s, None)?
    } else {
        Vec::new()
    };
    let vm_hwm = vm_hwm_kib(vm.process.id());
    eprintln!(
        "victoria-metrics: {vm_series} series; query median {vm_med:.3} s {vm_times:?} (cache on: {vm_cached:.3} s)"
    );
    drop(vm);

    // The answers: same sites and steps; values as a ratio (VictoriaMetrics' rate does
    // not extrapolate to the window's edges, Prometheus' (and Tidemark's) does).
    let (t, v) = (by_site(&tm_answer), by_site(&vm_answer));
    let same_sites = t.keys().eq(v.keys());
    let mut ratios = Vec::new();
    for (site, pts) in &t {
        let Some(vp) = v.get(site) else { continue };
        let vmap: std::collections::HashMap<i64, f64> =
            vp.iter().map(|(ts, x)| (*ts as i64, *x)).collect();
        for (ts, x) in pts {
            if let Some(y) = vmap.get(&(*ts as i64))
                && *y != 0.0
            {
                ratios.push(x / y);
            }
        }
    }
    let steps_tm: usize = t.values().map(Vec::len).sum();
    let steps_vm: usize = v.values().map(Vec::len).sum();
    ratios.sort_by(f64::total_cmp);
    let r_med = median(ratios.clone());
    let (r_min, r_max) = (
        ratios.first().copied().unwrap_or(f64::NAN),
        ratios.last().copied().unwrap_or(f64::NAN),
    );
    println!(
        "## promql-bench ({}; load {})",
        package_version("victoria-metrics"),
        loadavg()
    );
    println!();
    println!(
        "`{q}`, query_range over {} h, step {} s ({} steps); {} series x {points} points at {} s = {samples} samples, loaded through remote write ({} clients)",
        a.hours,
        a.step_s,
        span_s as u64 / a.step_s + 1,
        a.series,
        a.interval_s,
        a.clients
    );
    println!();
    println!(
        "| system | series seen | load s (samples/s) | query median s | runs s | peak RSS MiB |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| tidemark-server | {tm_series} | {tm_load:.1} ({:.0}) | {tm_med:.3} | {} | {} |",
        samples as f64 / tm_load,
        fmt_times(&tm_times),
        tm_hwm_after_load.map_or("-".into(), |k| format!("{:.0}", k as f64 / 1024.0))
    );
    println!(
        "| victoria-metrics (nocache=1) | {vm_series} | {vm_load:.1} ({:.0}) | {vm_med:.3} | {} | {} |",
        samples as f64 / vm_load,
        fmt_times(&vm_times),
        vm_hwm.map_or("-".into(), |k| format!("{:.0}", k as f64 / 1024.0))
    );
    println!("| victoria-metrics (cache on) | | | {vm_cached:.3} | | |");
    println!();
    println!(
        "answers: same sites {same_sites}; points tidemark {steps_tm}, victoria-metrics {steps_vm}; tidemark/vm value ratio median {r_med:.4} (min {r_min:.4}, max {r_max:.4})"
    );
    if !memory.is_empty() {
        println!();
        println!(
            "| range h | samples in range | VmHWM at start MiB | VmHWM after query MiB | query s |"
        );
        println!("|---|---|---|---|---|");
        for m in &memory {
            println!(
                "| {} | {} | {:.1} | {:.1} | {:.2} |",
                m["hours"],
                m["samples_in_range"],
                m["vmhwm_start_kib"].as_f64().unwrap_or(0.0) / 1024.0,
                m["vmhwm_after_kib"].as_f64().unwrap_or(0.0) / 1024.0,
                m["secs"].as_f64().unwrap_or(0.0)
            );
        }
    }
    let mut query_rows = Vec::new();
    if !tm_queries.is_empty() {
        println!();
        println!(
            "| query | kind | tidemark median s | victoria-metrics nocache median s | tidemark / vm time | tidemark peak RSS MiB | series tm / vm | points tm / vm | value ratio median (min, max) |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
        for (t, v) in tm_queries.iter().zip(&vm_queries) {
            let cmp = compare_answers(&t.answer, &v.answer);
            println!(
                "| `{}` | {} | {:.3} | {:.3} | {:.2} | {} | {} / {} | {} / {} | {:.4} ({:.4}, {:.4}) |",
                t.query,
                if t.instant { "instant" } else { "range" },
                t.median,
                v.median,
                t.median / v.median,
                t.hwm_kib
                    .map_or("-".into(), |k| format!("{:.0}", k as f64 / 1024.0)),
                cmp.series.0,
                cmp.series.1,
                cmp.points.0,
                cmp.points.1,
                cmp.ratio.0,
                cmp.ratio.1,
                cmp.ratio.2
            );
            query_rows.push(json!({
                "query": t.query, "instant": t.instant,
                "tidemark_median_s": t.median, "tidemark_runs_s": t.runs, "tidemark_vmhwm_kib": t.hwm_kib,
                "vm_median_s": v.median, "vm_runs_s": v.runs,
                "series": [cmp.series.0, cmp.series.1], "points": [cmp.points.0, cmp.points.1],
                "ratio_median": cmp.ratio.0, "ratio_min": cmp.ratio.1, "ratio_max": cmp.ratio.2,
            }));
            if cmp.series.0 != cmp.series.1 || cmp.points.0 == 0 {
                eprintln!(
                    "warning: `{}`: the answers differ in their series or are empty",
                    t.query
                );
            }
        }
    }
    if let Some(path) = &a.json {
        let report = json!({
            "queries": query_rows,
            "query": q, "series": a.series, "hours": a.hours, "interval_s": a.interval_s,
            "step_s": a.step_s, "samples": samples,
            "tidemark": {"load_s": tm_load, "series": tm_series, "median_s": tm_med, "runs_s": tm_times, "vmhwm_kib": tm_hwm_after_load},
            "victoria_metrics": {"version": package_version("victoria-metrics"), "load_s": vm_load, "series": vm_series,
                "median_nocache_s": vm_med, "runs_nocache_s": vm_times, "median_cached_s": vm_cached, "vmhwm_kib": vm_hwm},
            "answers": {"same_sites": same_sites, "points_tidemark": steps_tm, "points_vm": steps_vm,
                "ratio_median": r_med, "ratio_min": r_min, "ratio_max": r_max},
            "tidemark_memory": memory,
        });
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    if !same_sites || steps_tm == 0 {
        bail!(
            "the answers differ in their series (tidemark {:?}, vm {:?})",
            t.keys().collect::<Vec<_>>(),
            v.keys().collect::<Vec<_>>()
        );
    }
    Ok(())
}

/// The queries of `--queries`: the list (range queries over the whole span at
/// the step, instant queries at its end); the histogram's only with `--buckets`.
fn bench_queries(a: &Args) -> Vec<(&'static str, bool)> {
    let mut q = vec![
        ("sum by (site) (rate(x[5m]))", false),
        ("sum by (site) (avg_over_time(x[5m]))", false),
        ("max by (site) (x)", false),
        ("topk(5, rate(x[5m]))", false),
    ];
    if a.buckets.unwrap_or(0) > 0 {
        q.push((
            "histogram_quantile(0.9, sum by (le, site) (rate(lat_bucket[5m])))",
            false,
        ));
    }
    q.push(("sum by (site) (rate(x[5m]))", true));
    q.push(("count(x)", true));
    q
}

/// One query's timings on one system.
struct Timed {
    query: &'static str,
    instant: bool,
    median: f64,
    runs: Vec<f64>,
    answer: Value,
    /// The server's VmHWM after the query's runs (Tidemark).
    hwm_kib: Option<u64>,
}

/// Times each of [`bench_queries`] on the server at `base`: one warm-up, then `reps`.
fn run_queries(
    a: &Args,
    base: &str,
    extra: &str,
    start_s: i64,
    end_s: i64,
    pid: Option<u32>,
) -> Result<Vec<Timed>> {
    let mut out = Vec::new();
    for (q, instant) in bench_queries(a) {
        let run = || -> Result<(f64, Value)> {
            if instant {
                let url = format!(
                    "{base}/api/v1/query?query={}&time={end_s}{extra}",
                    encode(q)
                );
                let t0 = Instant::now();
                let body = get_text(&url)?;
                let secs = t0.elapsed().as_secs_f64();
                let v: Value = serde_json::from_str(&body)?;
                if v["status"] != "success" {
                    bail!("{url}: {body:.400}");
                }
                Ok((secs, v))
            } else {
                query_range(base, q, start_s, end_s, a.step_s, extra)
            }
        };
        let (_, answer) = run()?;
        let mut runs = Vec::new();
        for _ in 0..a.reps {
            runs.push(run()?.0);
        }
        let median = median(runs.clone());
        eprintln!(
            "{base}: `{q}` ({}) median {median:.3} s {runs:?}",
            if instant { "instant" } else { "range" }
        );
        out.push(Timed {
            query: q,
            instant,
            median,
            runs,
            answer,
            hwm_kib: pid.and_then(vm_hwm_kib),
        });
    }
    Ok(out)
}

/// Series and points of two answers and the ratios of the values they share.
struct Compared {
    series: (usize, usize),
    points: (usize, usize),
    ratio: (f64, f64, f64),
}

/// Compares two answers (matrix or vector) series by series (by their labels) and
/// point by point (by time).
fn compare_answers(t: &Value, v: &Value) -> Compared {
    let points = |a: &Value| -> std::collections::HashMap<(String, i64), f64> {
        let mut out = std::collections::HashMap::new();
        for s in a["data"]["result"].as_array().into_iter().flatten() {
            let key = s["metric"].to_string();
            let pts: Vec<&Value> = match s["values"].as_array() {
                Some(vs) => vs.iter().collect(),
                None => vec![&s["value"]],
            };
            for p in pts {
                let (Some(ts), Some(x)) = (
                    p.get(0).and_then(Value::as_f64),
                    p.get(1)
                        .and_then(Value::as_str)
                        .and_then(|x| x.parse::<f64>().ok()),
                ) else {
                    continue;
                };
                out.insert((key.clone(), (ts * 1000.0).round() as i64), x);
            }
        }
        out
    };
    let count = |a: &Value| a["data"]["result"].as_array().map_or(0, Vec::len);
    let (pt, pv) = (points(t), points(v));
    let mut ratios: Vec<f64> = pt
        .iter()
        .filter_map(|(k, x)| pv.get(k).filter(|y| **y != 0.0).map(|y| x / y))
        .collect();
    ratios.sort_by(f64::total_cmp);
    Compared {
        series: (count(t), count(v)),
        points: (pt.len(), pv.len()),
        ratio: (
            median(ratios.clone()),
            ratios.first().copied().unwrap_or(f64::NAN),
            ratios.last().copied().unwrap_or(f64::NAN),
        ),
    }
}

/// What `--keep DIR` records in `DIR/bench.json` once both systems are loaded.
struct Kept {
    end_s: i64,
    tidemark_load_s: f64,
    vm_load_s: f64,
}

impl Kept {
    /// The recorded run in `dir` if it has this run's size; otherwise `dir` is cleared
    /// for a fresh load.
    fn open(dir: &std::path::Path, a: &Args) -> Result<Option<Kept>> {
        let meta = dir.join("bench.json");
        if let Ok(text) = std::fs::read_to_string(&meta) {
            let v: Value = serde_json::from_str(&text)
                .with_context(|| format!("reading {}", meta.display()))?;
            let same = ["series", "hours", "interval_s", "sites", "buckets"]
                .iter()
                .all(|k| {
                    v["size"][k].as_u64().unwrap_or(0) == Self::size(a)[k].as_u64().unwrap_or(0)
                });
            if same {
                eprintln!("promql-bench: reusing the data in {}", dir.display());
                return Ok(Some(Kept {
                    end_s: v["end_s"].as_i64().unwrap_or(0),
                    tidemark_load_s: v["tidemark_load_s"].as_f64().unwrap_or(f64::NAN),
                    vm_load_s: v["vm_load_s"].as_f64().unwrap_or(f64::NAN),
                }));
            }
        }
        for sub in ["tidemark", "vm", "bench.json"] {
            let p = dir.join(sub);
            if p.is_dir() {
                std::fs::remove_dir_all(&p)?;
            } else if p.exists() {
                std::fs::remove_file(&p)?;
            }
        }
        std::fs::create_dir_all(dir)?;
        Ok(None)
    }

    fn size(a: &Args) -> Value {
        json!({"series": a.series, "hours": a.hours, "interval_s": a.interval_s, "sites": a.sites,
            "buckets": a.buckets.unwrap_or(0)})
    }

    fn save(dir: &std::path::Path, a: &Args, end_s: i64, tm: f64, vm: f64) -> Result<()> {
        let v =
            json!({"size": Self::size(a), "end_s": end_s, "tidemark_load_s": tm, "vm_load_s": vm});
        std::fs::write(dir.join("bench.json"), v.to_string())?;
        Ok(())
    }
}

fn fmt_times(xs: &[f64]) -> String {
    xs.iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}
