//! `tidemark demo`: the store in one command. Serves a data directory in this process,
//! sends a generated Kubernetes dataset twice — once as InfluxDB line protocol, then the
//! same samples as Prometheus remote write, as a shipper that retries through another
//! protocol would — reads back from the server what it kept, and prints where to look.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tidemark_datagen::exposition::{escape_tag, field_name, labels};
use tidemark_datagen::{Dataset, MetricVal, Options, Record};
use tidemark_server::metrics::remote_write::{Label, Sample, TimeSeries, WriteRequest, encode};
use tidemark_server::{Config, Server};

/// Arguments of `tidemark demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// The data directory (created if needed; kept afterwards).
    #[arg(long, default_value = "tidemark-demo")]
    pub data: PathBuf,
    /// The address to listen on (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:9200")]
    pub listen: SocketAddr,
    /// Series of the generated dataset.
    #[arg(long, default_value_t = 200)]
    pub series: u32,
    /// Unique documents of the generated dataset (each holds several metrics).
    #[arg(long, default_value_t = 72_000)]
    pub points: u64,
    /// Stop after loading and reporting instead of serving until Ctrl-C.
    #[arg(long)]
    pub exit: bool,
}

/// The line-protocol measurement, and so the metric name prefix (`k8s_…`).
const MEASUREMENT: &str = "k8s";
/// The label-keyed index both protocols write (the server's default `metrics_index`).
const INDEX: &str = "metrics";
/// Documents per request.
const BATCH_DOCS: usize = 2_000;

/// Runs the demo: serve, load twice, report, then serve until Ctrl-C (or stop with
/// `--exit`).
pub fn run(args: &DemoArgs) -> Result<()> {
    std::fs::create_dir_all(&args.data)
        .with_context(|| format!("creating {}", args.data.display()))?;
    let config = Config {
        data: args.data.clone(),
        listen: args.listen,
        metrics_index: INDEX.to_owned(),
        ..Config::default()
    };
    config.check()?;
    // Request logs would bury the report: warnings only, unless TIDEMARK_LOG says more.
    tidemark_server::cli::init_logging("warn");
    let rt = tidemark_server::cli::runtime(&config)?;
    let server = rt
        .block_on(Server::bind(config))
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = server.local_addr();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = rt.spawn(server.run(async move {
        tokio::select! {
            _ = stop_rx => {}
            () = tidemark_server::cli::shutdown_signal() => {}
        }
    }));
    println!("tidemark: serving {} on http://{addr}", args.data.display());
    let loaded = load(args, addr);
    if args.exit || loaded.is_err() {
        let _ = stop_tx.send(());
    } else {
        println!("\nServing until Ctrl-C.");
    }
    let served = rt.block_on(serving).context("the server task")?;
    loaded?;
    served?;
    Ok(())
}

/// What the server counted for the demo's index (`/metrics`).
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    created: u64,
    duplicate: u64,
}

fn load(args: &DemoArgs, addr: SocketAddr) -> Result<()> {
    let base = format!("http://{addr}");
    let ds = Dataset::k8s(Options::default().series(args.series).points(args.points));
    let before = counts(&base)?;
    let t = Instant::now();
    let (lp, (start, end)) = send_line_protocol(&base, &ds)?;
    let lp_s = t.elapsed().as_secs_f64();
    let after_lp = counts(&base)?;
    let t = Instant::now();
    let rw = send_remote_write(&base, &ds)?;
    let rw_s = t.elapsed().as_secs_f64();
    let after_rw = counts(&base)?;
    let created = after_rw.created - before.created;
    let duplicates = after_rw.duplicate - before.duplicate;
    println!(
        "\nGenerated {} series of Kubernetes pod metrics ({} documents, {} samples), sent twice:",
        ds.series_count(),
        ds.unique_docs(),
        lp
    );
    println!(
        "  InfluxDB line protocol  POST /write?db={INDEX}   {lp:>9} samples in {lp_s:.2} s: {} stored, {} duplicates",
        after_lp.created - before.created,
        after_lp.duplicate - before.duplicate
    );
    println!(
        "  Prometheus remote write POST /api/v1/write     {rw:>9} samples in {rw_s:.2} s: {} stored, {} duplicates",
        after_rw.created - after_lp.created,
        after_rw.duplicate - after_lp.duplicate
    );
    println!(
        "  index `{INDEX}`: {created} samples stored once, {duplicates} retries recognised as duplicates"
    );
    if created + duplicates != lp + rw {
        bail!(
            "the server counted {created} stored + {duplicates} duplicates for {} samples sent",
            lp + rw
        );
    }
    let query = "sum by (k8s_namespace_name) (rate(k8s_pod_cpu_usage_ns[5m]))";
    println!("\nWhere to look:");
    println!(
        "  {base}/?range=data&query={}   in a browser: indices, this query charted, _search, storage",
        query
            .replace('%', "%25")
            .replace(' ', "%20")
            .replace('(', "%28")
            .replace(')', "%29")
            .replace('[', "%5B")
            .replace(']', "%5D")
    );
    println!("  curl -s '{base}/metrics'     the server's own metrics (Prometheus text)");
    println!(
        "  curl -s '{base}/api/v1/query_range' --data-urlencode 'query={query}' -d start={} -d end={} -d step=60",
        start / 1000,
        end / 1000
    );
    println!("  curl -s '{base}/api/v1/labels'");
    println!("  curl -s '{base}/{INDEX}/_count'");
    println!(
        "  curl -s '{base}/api/v1/export' -d 'match[]=k8s_pod_cpu_usage_ns' | head -c 300   # VictoriaMetrics JSON lines"
    );
    Ok(())
}

/// `created` and `duplicate` of `tidemark_index_items_total` for the demo's index.
fn counts(base: &str) -> Result<Counts> {
    let text = ureq::get(&format!("{base}/metrics"))
        .call()
        .context("GET /metrics")?
        .into_string()
        .context("reading /metrics")?;
    let mut c = Counts::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("tidemark_index_items_total{") else {
            continue;
        };
        if !rest.contains(&format!("index=\"{INDEX}\"")) {
            continue;
        }
        let value = rest
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0) as u64;
        if rest.contains("result=\"created\"") {
            c.created = value;
        } else if rest.contains("result=\"duplicate\"") {
            c.duplicate = value;
        }
    }
    Ok(c)
}

fn metric_f64(v: MetricVal) -> f64 {
    match v {
        MetricVal::Gauge(g) => g,
        MetricVal::Counter(c) => c as f64,
    }
}

/// One line of line protocol: `k8s,label=value,… field=value,… timestamp_ms`.
fn line(r: &Record, out: &mut String) {
    out.push_str(MEASUREMENT);
    for (k, v) in labels(r) {
        out.push(',');
        out.push_str(&k);
        out.push('=');
        escape_tag(&v, out);
    }
    let mut sep = ' ';
    for (path, v) in &r.metrics {
        out.push(sep);
        sep = ',';
        out.push_str(&field_name(path));
        match v {
            MetricVal::Gauge(g) => {
                let _ = write!(out, "={g:?}");
            }
            // Counters as integer fields (`…i`), as Telegraf sends them; remote write
            // sends the same samples as floats, and the index takes them as one.
            MetricVal::Counter(c) => {
                let _ = write!(out, "={c}i");
            }
        }
    }
    let _ = writeln!(out, " {}", r.ts_millis);
}

/// Posts `body` and fails unless the answer is a 2xx.
fn post(url: &str, content_type: &str, encoding: Option<&str>, body: &[u8]) -> Result<()> {
    let mut req = ureq::post(url)
        .set("Content-Type", content_type)
        .timeout(Duration::from_secs(60));
    if let Some(e) = encoding {
        req = req.set("Content-Encoding", e);
    }
    match req.send_bytes(body) {
        Ok(_) => Ok(()),
        Err(ureq::Error::Status(code, resp)) => {
            let text = resp.into_string().unwrap_or_default();
            bail!("POST {url}: {code} {text}")
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("POST {url}"))),
    }
}

/// Sends every document as line protocol; returns the samples sent and the first and
/// last timestamps (milliseconds).
fn send_line_protocol(base: &str, ds: &Dataset) -> Result<(u64, (i64, i64))> {
    let url = format!("{base}/write?db={INDEX}&precision=ms");
    let mut body = String::new();
    let (mut in_batch, mut samples) = (0usize, 0u64);
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    for r in ds.records() {
        first = first.min(r.ts_millis);
        last = last.max(r.ts_millis);
        line(&r, &mut body);
        samples += r.metrics.len() as u64;
        in_batch += 1;
        if in_batch == BATCH_DOCS {
            post(&url, "text/plain", None, body.as_bytes())?;
            body.clear();
            in_batch = 0;
        }
    }
    if in_batch > 0 {
        post(&url, "text/plain", None, body.as_bytes())?;
    }
    Ok((samples, (first, last)))
}

/// Sends every sample again as remote write (one series per metric and label set);
/// returns the samples sent.
fn send_remote_write(base: &str, ds: &Dataset) -> Result<u64> {
    let url = format!("{base}/api/v1/write");
    let mut req = WriteRequest::default();
    let (mut in_batch, mut samples) = (0usize, 0u64);
    let flush = |req: &mut WriteRequest| -> Result<()> {
        let body = encode(req);
        req.timeseries.clear();
        post(&url, "application/x-protobuf", Some("snappy"), &body)
    };
    for r in ds.records() {
        let labels = labels(&r);
        for (path, v) in &r.metrics {
            let mut l = Vec::with_capacity(labels.len() + 1);
            l.push(Label {
                name: "__name__".to_owned(),
                value: format!("{MEASUREMENT}_{}", field_name(path)),
            });
            l.extend(labels.iter().map(|(name, value)| Label {
                name: name.clone(),
                value: value.clone(),
            }));
            req.timeseries.push(TimeSeries {
                labels: l,
                samples: vec![Sample {
                    value: metric_f64(*v),
                    timestamp: r.ts_millis,
                }],
                ..TimeSeries::default()
            });
            samples += 1;
        }
        in_batch += 1;
        if in_batch == BATCH_DOCS {
            flush(&mut req)?;
            in_batch = 0;
        }
    }
    if in_batch > 0 {
        flush(&mut req)?;
    }
    Ok(samples)
}
