//! `cargo xtask soak`: memory and throughput as data grows. Generates points on the fly
//! (no files), ingests them as the server ingests an index (a `PartitionedEngine` with
//! merges on merge threads and inline past a backlog, see crates/server/src/registry.rs;
//! retries and late points included), and every million points records the peak resident set
//! (VmHWM from /proc/self/status), the current one, points/s, bytes per point on disk and
//! the segment count. At the end, every segment is merged into one with the peak reset
//! first, so the merge's own peak is reported. Prints a table; writes CSV and an SVG chart.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use plotters::prelude::*;
use tidemark_datagen::{Dataset, Options};
use tidemark_datagen::{MetricVal, Record};
use tidemark_dedup::{
    AppendBatch, ColumnKind, ColumnRef, Durability, Engine, EngineConfig, Op, Outcome,
    PartitionedEngine, SeriesRef, Strategy,
};
use tidemark_segment::MetricValue;
use tidemark_tsid::Tsid;

use crate::harness::status_field_kib;
use crate::storage_compare::metric_point;

/// How the soak hands points to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    /// Series refs ([`PartitionedEngine::series`] once per series, then
    /// [`PartitionedEngine::append`] of
    /// timestamps and values): the engine's fast path, and what a pipeline that knows its
    /// series (the servers' series caches) uses.
    Refs,
    /// A [`Op::Create`] of a whole point (dimensions and metric names) per point.
    Points,
}

impl Api {
    fn name(self) -> &'static str {
        match self {
            Api::Refs => "series refs",
            Api::Points => "points",
        }
    }
}

struct Args {
    dataset: String,
    points: u64,
    options: Options,
    strategy: Strategy,
    batch: usize,
    refresh_rows: Option<usize>,
    merge_threads: usize,
    /// Waiting merges past which the writer merges inline (`None`: never).
    merge_stall: Option<usize>,
    out: PathBuf,
    data: Option<PathBuf>,
    every: u64,
    api: Api,
}

fn parse(args: &[String]) -> Result<Args> {
    let mut a = Args {
        dataset: "k8s".into(),
        points: 10_000_000,
        // Retries and late points by default: a soak without them proves little.
        options: Options::default().dup_rate(0.02).late_rate(0.01),
        strategy: Strategy::default(),
        batch: 10_000,
        refresh_rows: None,
        merge_threads: 1,
        merge_stall: Some(MAX_WAITING_MERGES),
        out: crate::project_root().join("target/xtask/soak"),
        data: None,
        every: 1_000_000,
        api: Api::Refs,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--dataset" => a.dataset = value()?.clone(),
            "--points" => a.points = value()?.parse().context("--points")?,
            "--series" => a.options = a.options.series(value()?.parse().context("--series")?),
            "--seed" => a.options = a.options.seed(value()?.parse().context("--seed")?),
            "--dup-rate" => a.options = a.options.dup_rate(value()?.parse().context("--dup-rate")?),
            "--late-rate" => {
                a.options = a
                    .options
                    .late_rate(value()?.parse().context("--late-rate")?)
            }
            "--disorder" => a.options = a.options.disorder(value()?.parse().context("--disorder")?),
            "--strategy" => a.strategy = value()?.parse().context("--strategy")?,
            "--batch" => a.batch = value()?.parse().context("--batch")?,
            "--refresh-rows" => a.refresh_rows = Some(value()?.parse().context("--refresh-rows")?),
            "--merge-threads" => a.merge_threads = value()?.parse().context("--merge-threads")?,
            "--merge-stall" => {
                let v = value()?;
                a.merge_stall = match v.as_str() {
                    "off" => None,
                    n => Some(n.parse().context("--merge-stall: a count or `off`")?),
                }
            }
            "--every" => a.every = value()?.parse().context("--every")?,
            "--api" => {
                a.api = match value()?.as_str() {
                    "refs" => Api::Refs,
                    "points" => Api::Points,
                    other => bail!("--api: refs or points, not {other:?}"),
                }
            }
            "--out" => a.out = PathBuf::from(value()?),
            "--data" => a.data = Some(PathBuf::from(value()?)),
            other => bail!("unknown soak option {other:?} (see `cargo xtask help`)"),
        }
    }
    ensure!(a.points > 0, "--points must be positive");
    ensure!(a.batch > 0, "--batch must be positive");
    ensure!(a.every > 0, "--every must be positive");
    ensure!(a.merge_threads > 0, "--merge-threads must be positive");
    a.options = a.options.points(a.points);
    Ok(a)
}

/// Waiting merges past which the writer merges inline, as the server's
/// `MAX_WAITING_MERGES` (crates/server/src/registry.rs).
const MAX_WAITING_MERGES: usize = 4;
/// A merge thread looks for due merges at least this often without being woken.
const MERGE_POLL: Duration = Duration::from_secs(1);

/// The store as the server runs an index: one writer applies batches under the lock;
/// merge threads plan a merge under it, write the merged segment without it and install
/// it under it; when more merges wait than the stall bound, the writer merges inline
/// after its batch (a write stall, counted here).
struct Store {
    engine: Arc<Mutex<PartitionedEngine>>,
    stall: Option<usize>,
    wake: Vec<SyncSender<()>>,
    threads: Vec<JoinHandle<()>>,
    write_stalls: u64,
    stall_time: Duration,
}

impl Store {
    fn new(mut engine: PartitionedEngine, merge_threads: usize, stall: Option<usize>) -> Store {
        engine.set_background_merges(true);
        let engine = Arc::new(Mutex::new(engine));
        let mut wake = Vec::new();
        let mut threads = Vec::new();
        for i in 0..merge_threads {
            let (tx, rx) = mpsc::sync_channel(1);
            let engine = Arc::clone(&engine);
            let spawned = std::thread::Builder::new()
                .name(format!("soak-merge-{i}"))
                .spawn(move || merge_loop(&engine, &rx));
            if let Ok(t) = spawned {
                wake.push(tx);
                threads.push(t);
            }
        }
        Store {
            engine,
            stall,
            wake,
            threads,
            write_stalls: 0,
            stall_time: Duration::ZERO,
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, PartitionedEngine>> {
        self.engine
            .lock()
            .map_err(|_| anyhow::anyhow!("a merge thread panicked"))
    }

    fn series(&self, tsid: Tsid, dims: Vec<(String, tidemark_segment::Dim)>) -> Result<SeriesRef> {
        Ok(self.lock()?.series(tsid, dims)?)
    }

    fn column(&self, name: &str, kind: ColumnKind) -> Result<ColumnRef> {
        Ok(self.lock()?.column(name, kind)?)
    }

    /// Applies one batch (points or appends), then merges inline while the backlog is
    /// past the stall bound, then wakes the merge threads.
    fn write(&mut self, ops: Vec<Op>, appends: &AppendBatch) -> Result<Vec<Outcome>> {
        let mut engine = self
            .engine
            .lock()
            .map_err(|_| anyhow::anyhow!("a merge thread panicked"))?;
        let outcomes = if ops.is_empty() {
            engine.append(appends)?
        } else {
            engine.batch(ops)?
        };
        if let Some(bound) = self.stall
            && engine.waiting_merges() > bound
        {
            let start = Instant::now();
            while engine.waiting_merges() > bound {
                let Some(job) = engine.plan_merge() else {
                    break;
                };
                engine.install_merge(job.run())?;
            }
            self.write_stalls += 1;
            self.stall_time += start.elapsed();
        }
        drop(engine);
        for w in &self.wake {
            let _ = w.try_send(());
        }
        Ok(outcomes)
    }

    /// Merges done and peak live segments (the engines' counters), and this store's
    /// write stalls.
    fn merge_stats(&self) -> Result<MergeCounts> {
        Ok(MergeCounts::of(
            &*self.lock()?,
            self.write_stalls,
            self.stall_time,
        ))
    }

    /// Stops the merge threads (each after the merges due, as the server's does) and
    /// returns the store with the final merge counters.
    fn into_inner(mut self) -> Result<(PartitionedEngine, MergeCounts)> {
        self.wake.clear();
        for t in self.threads.drain(..) {
            t.join()
                .map_err(|_| anyhow::anyhow!("a merge thread panicked"))?;
        }
        let engine = Arc::try_unwrap(self.engine)
            .map_err(|_| anyhow::anyhow!("the store is still shared"))?
            .into_inner()
            .map_err(|_| anyhow::anyhow!("a merge thread panicked"))?;
        let counts = MergeCounts::of(&engine, self.write_stalls, self.stall_time);
        Ok((engine, counts))
    }
}

/// What [`Store::merge_stats`] reports.
#[derive(Debug, Clone, Copy)]
struct MergeCounts {
    merges: u64,
    peak_segments: u64,
    /// Batches after which the writer merged inline, and the time it spent there.
    write_stalls: u64,
    stall_secs: f64,
}

impl MergeCounts {
    /// The engines' merge counters with the writer's stalls.
    fn of(engine: &PartitionedEngine, write_stalls: u64, stall_time: Duration) -> MergeCounts {
        let mut counts = MergeCounts {
            merges: 0,
            peak_segments: 0,
            write_stalls,
            stall_secs: stall_time.as_secs_f64(),
        };
        for e in engine.engines() {
            let m = e.merge_stats();
            counts.merges += m.merges;
            counts.peak_segments = counts.peak_segments.max(m.peak_segments);
        }
        counts
    }
}

/// A merge thread: the server's `merge_loop`, the lock held only to plan and install.
fn merge_loop(engine: &Mutex<PartitionedEngine>, woken: &Receiver<()>) {
    loop {
        match woken.recv_timeout(MERGE_POLL) {
            Ok(()) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        loop {
            let job = match engine.lock() {
                Ok(mut e) => e.plan_merge(),
                Err(_) => return,
            };
            let Some(job) = job else { break };
            let merged = job.run();
            let installed = match engine.lock() {
                Ok(mut e) => e.install_merge(merged),
                Err(_) => return,
            };
            if let Err(e) = installed {
                eprintln!("soak: background merge failed, its segments stay: {e}");
                break;
            }
        }
    }
}

/// The soak's side of ingest: records in, batches out, outcomes counted.
struct Feed<'w> {
    writer: &'w mut Store,
    api: Api,
    ops: Vec<Op>,
    batch: AppendBatch,
    /// Series refs by series number.
    refs: Vec<Option<SeriesRef>>,
    /// Column refs by metric name (a handful: a linear search).
    columns: Vec<(&'static str, ColumnRef)>,
    values: Vec<(ColumnRef, MetricValue)>,
    created: u64,
    duplicates: u64,
}

impl<'w> Feed<'w> {
    /// A feed of batches of `batch` points of `metrics` values, of `series` series.
    fn new(
        writer: &'w mut Store,
        api: Api,
        batch: usize,
        series: usize,
        metrics: usize,
    ) -> Feed<'w> {
        Feed {
            writer,
            api,
            ops: Vec::with_capacity(if api == Api::Points { batch } else { 0 }),
            // Sized once: the soak measures the engine, not its own buffers doubling.
            batch: if api == Api::Refs {
                AppendBatch::with_capacity(batch, batch * metrics)
            } else {
                AppendBatch::new()
            },
            refs: vec![None; series],
            columns: Vec::new(),
            values: Vec::new(),
            created: 0,
            duplicates: 0,
        }
    }

    /// Points (or appends) waiting for [`flush`](Self::flush).
    fn len(&self) -> usize {
        self.ops.len() + self.batch.len()
    }

    fn push(&mut self, r: &Record, tsid: Tsid) -> Result<()> {
        if self.api == Api::Points {
            self.ops.push(Op::Create(metric_point(r, tsid)));
            return Ok(());
        }
        let slot = self
            .refs
            .get_mut(r.series as usize)
            .context("series number past the series count")?;
        let series = match slot {
            Some(s) => *s,
            // Once per series: the point's conversion of the dimensions serves.
            None => *slot.insert(self.writer.series(tsid, metric_point(r, tsid).dims)?),
        };
        self.values.clear();
        for &(name, v) in &r.metrics {
            let (kind, value) = match v {
                MetricVal::Gauge(g) => (ColumnKind::Gauge, MetricValue::Gauge(g)),
                MetricVal::Counter(c) => (ColumnKind::Counter, MetricValue::Counter(c)),
            };
            let column = match self.columns.iter().find(|(n, _)| *n == name) {
                Some(&(_, c)) => c,
                None => {
                    let c = self.writer.column(name, kind)?;
                    self.columns.push((name, c));
                    c
                }
            };
            self.values.push((column, value));
        }
        self.batch.create(series, r.ts_millis, &self.values);
        Ok(())
    }

    /// Sends what is waiting and counts the outcomes.
    fn flush(&mut self) -> Result<()> {
        if self.len() == 0 {
            return Ok(());
        }
        let outcomes = self
            .writer
            .write(std::mem::take(&mut self.ops), &self.batch)?;
        self.batch.clear();
        for o in outcomes {
            match o {
                Outcome::Created { .. } => self.created += 1,
                Outcome::Conflict { .. } => self.duplicates += 1,
                other => bail!("unexpected outcome {other:?}"),
            }
        }
        Ok(())
    }
}

/// One row of the report.
struct Sample {
    points: u64,
    peak_rss: u64,
    rss: u64,
    anon: u64,
    file: u64,
    points_per_sec: f64,
    bytes_on_disk: u64,
    segment_bytes: u64,
    segments: usize,
    write_stalls: u64,
    stall_secs: f64,
}

/// `VmHWM` and `VmRSS` of this process, in bytes.
fn rss() -> Result<(u64, u64)> {
    let (hwm, now, _, _) = rss_parts()?;
    Ok((hwm, now))
}

/// `VmHWM`, `VmRSS`, `RssAnon` (heap) and `RssFile` (mapped file pages), in bytes.
pub(crate) fn rss_parts() -> Result<(u64, u64, u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").context("/proc/self/status")?;
    let field = |name: &str| status_field_kib(&status, name).map(|kib| kib * 1024);
    Ok((
        field("VmHWM:").context("no VmHWM in /proc/self/status")?,
        field("VmRSS:").context("no VmRSS in /proc/self/status")?,
        field("RssAnon:").unwrap_or(0),
        field("RssFile:").unwrap_or(0),
    ))
}

/// `cargo xtask soak-merge DIR` (run by `soak` as a child process): opens the engine
/// in DIR, merges every segment into one, and prints its peak RSS in bytes.
pub fn merge_only(args: &[String]) -> Result<()> {
    let dir = args
        .first()
        .context("soak-merge needs the engine directory")?;
    let mut engine = Engine::open(dir, EngineConfig::new().with_derived_tsids(true))?;
    engine.merge_all()?;
    drop(engine);
    println!("{}", rss()?.0);
    Ok(())
}

/// Bytes of every file, bytes of the segment files, and the segment count.
fn dir_stats(dir: &Path) -> Result<(u64, u64, usize)> {
    let mut bytes = 0;
    let mut seg_bytes = 0;
    let mut segments = 0;
    for e in std::fs::read_dir(dir).with_context(|| dir.display().to_string())? {
        let e = e?;
        // Files vanish while merges install: skip what is gone.
        let Ok(meta) = e.metadata() else { continue };
        bytes += meta.len();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("seg-") && name.ends_with(".tms") {
            segments += 1;
            seg_bytes += meta.len();
        }
    }
    Ok((bytes, seg_bytes, segments))
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

pub fn run(args: &[String]) -> Result<()> {
    let a = parse(args)?;
    let ds = Dataset::by_name(&a.dataset, a.options.clone())
        .with_context(|| format!("unknown dataset {:?} (k8s or otel)", a.dataset))?;
    ensure!(
        a.dataset != "events",
        "soak runs the time-series datasets (k8s, otel)"
    );
    std::fs::create_dir_all(&a.out).with_context(|| a.out.display().to_string())?;
    let tmp;
    let data = match &a.data {
        Some(d) => {
            if d.exists() {
                std::fs::remove_dir_all(d).with_context(|| d.display().to_string())?;
            }
            d.clone()
        }
        None => {
            tmp = tempfile::tempdir_in(&a.out)?;
            tmp.path().join("engine")
        }
    };
    let mut config = EngineConfig::new()
        .with_strategy(a.strategy)
        .with_durability(Durability::Interval(Duration::from_secs(1)))
        .with_derived_tsids(true);
    if let Some(rows) = a.refresh_rows {
        config = config.with_refresh_rows(rows);
    }
    let (threads, stall) = (a.merge_threads, a.merge_stall);
    let engine = PartitionedEngine::create_single(&data, config).context("creating the engine")?;
    let mut store = Store::new(engine, threads, stall);

    let stall_text = match stall {
        Some(n) => format!("the writer merges inline when more than {n} merges wait"),
        None => "no write stall".to_owned(),
    };
    eprintln!(
        "soak: {} {} points (of which {} retries) by {}, strategy {}, {threads} merge \
         threads, {stall_text}, into {}",
        ds.total_docs(),
        a.dataset,
        ds.total_docs() - ds.unique_docs(),
        a.api.name(),
        a.strategy.name(),
        data.display()
    );
    let mut computer = ds.tsid_computer().context("tsid computer")?;
    let mut tsids: Vec<Option<Tsid>> = vec![None; ds.series_count() as usize];
    let mut samples = Vec::new();
    let mut feed = Feed::new(
        &mut store,
        a.api,
        a.batch,
        ds.series_count() as usize,
        ds.schema().metrics.len(),
    );
    let start = Instant::now();
    let mut last = (0u64, Instant::now());
    let total = ds.total_docs();
    let terminal = std::io::stderr().is_terminal();
    let mut sent = 0u64;
    for r in ds.records() {
        let slot = tsids
            .get_mut(r.series as usize)
            .context("series number past the series count")?;
        let tsid = match slot {
            Some(t) => *t,
            None => *slot.insert(r.tsid(&mut computer).context("record tsid")?),
        };
        feed.push(&r, tsid)?;
        sent += 1;
        if feed.len() >= a.batch {
            feed.flush()?;
        }
        if sent % a.every == 0 || sent == total {
            feed.flush()?;
            let (peak_rss, now_rss, anon, file) = rss_parts()?;
            let (bytes_on_disk, segment_bytes, segments) = dir_stats(&data)?;
            let secs = last.1.elapsed().as_secs_f64().max(1e-9);
            let merge_stats = feed.writer.merge_stats()?;
            samples.push(Sample {
                points: sent,
                peak_rss,
                rss: now_rss,
                anon,
                file,
                points_per_sec: (sent - last.0) as f64 / secs,
                bytes_on_disk,
                segment_bytes,
                segments,
                write_stalls: merge_stats.write_stalls,
                stall_secs: merge_stats.stall_secs,
            });
            last = (sent, Instant::now());
            if terminal {
                eprint!(
                    "\r{sent}/{total} points, peak RSS {:.0} MB   ",
                    mb(peak_rss)
                );
            }
        }
    }
    feed.flush()?;
    let (created, duplicates) = (feed.created, feed.duplicates);
    drop(feed);
    let ingest_secs = start.elapsed().as_secs_f64();
    if terminal {
        eprintln!();
    }
    let ingest_peak = rss()?.0;
    let (mut engine, merge_stats) = store.into_inner().context("stopping the merge threads")?;
    engine.refresh()?;
    let live = engine.live_count();
    engine.close()?;
    let before_merge = dir_stats(&data)?;
    // The final merge runs in a fresh process, so that its peak is its own and not the
    // heap the ingest left behind.
    let merge_start = Instant::now();
    let child = std::process::Command::new(std::env::current_exe()?)
        .arg("soak-merge")
        .arg(&data)
        .output()
        .context("running the final merge")?;
    ensure!(
        child.status.success(),
        "final merge failed: {}",
        String::from_utf8_lossy(&child.stderr)
    );
    let merge_secs = merge_start.elapsed().as_secs_f64();
    let merge_peak: u64 = String::from_utf8_lossy(&child.stdout)
        .trim()
        .parse()
        .context("the merge's peak RSS")?;
    let after = dir_stats(&data)?;

    ensure!(
        created == ds.unique_docs() && duplicates == total - ds.unique_docs(),
        "dedup miscounted: {created} created and {duplicates} duplicates, the generator \
         sent {} unique points and {} retries",
        ds.unique_docs(),
        total - ds.unique_docs()
    );
    ensure!(
        live == ds.unique_docs(),
        "{live} points stored, {} expected",
        ds.unique_docs()
    );

    // Report.
    let mut table = String::new();
    table.push_str(
        "     points   peak RSS MB   RSS MB (heap + files)   points/s   bytes/point: all files  segments  segments  stalls (s)\n",
    );
    for s in &samples {
        table.push_str(&format!(
            "{:>11}   {:>11.1}   {:>6.1} ({:>5.1} + {:>5.1})   {:>8.0}   {:>16.2} {:>10.2}  {:>8}  {:>6} ({:.1})\n",
            s.points,
            mb(s.peak_rss),
            mb(s.rss),
            mb(s.anon),
            mb(s.file),
            s.points_per_sec,
            s.bytes_on_disk as f64 / s.points as f64,
            s.segment_bytes as f64 / s.points as f64,
            s.segments,
            s.write_stalls,
            s.stall_secs
        ));
    }
    let summary = format!(
        "{} points ({} unique, {} retries found) in {:.1} s: {:.0} points/s, peak RSS {:.1} MB \
         during ingest; final merge of {} segments ({:.1} MB) into {} ({:.1} MB, {:.2} bytes/point) \
         in {:.1} s, peak RSS {:.1} MB during the merge; {threads} merge threads, {stall_text}: \
         {} background merges, at most {} live segments, {} write stalls ({:.1} s)",
        total,
        created,
        duplicates,
        ingest_secs,
        total as f64 / ingest_secs,
        mb(ingest_peak),
        before_merge.2,
        mb(before_merge.1),
        after.2,
        mb(after.1),
        after.1 as f64 / ds.unique_docs().max(1) as f64,
        merge_secs,
        mb(merge_peak),
        merge_stats.merges,
        merge_stats.peak_segments,
        merge_stats.write_stalls,
        merge_stats.stall_secs
    );
    print!("{table}");
    println!("{summary}");
    let stem = format!("soak-{}-{}", a.dataset, a.points);
    let csv_path = a.out.join(format!("{stem}.csv"));
    let mut csv = std::fs::File::create(&csv_path).context("csv")?;
    writeln!(
        csv,
        "points,peak_rss_bytes,rss_bytes,rss_anon_bytes,rss_file_bytes,points_per_sec,bytes_on_disk,segment_bytes,segments,write_stalls,write_stall_secs"
    )?;
    for s in &samples {
        writeln!(
            csv,
            "{},{},{},{},{},{:.0},{},{},{},{},{:.3}",
            s.points,
            s.peak_rss,
            s.rss,
            s.anon,
            s.file,
            s.points_per_sec,
            s.bytes_on_disk,
            s.segment_bytes,
            s.segments,
            s.write_stalls,
            s.stall_secs
        )?;
    }
    writeln!(csv, "# {summary}")?;
    let svg_path = a.out.join(format!("{stem}.svg"));
    std::fs::write(&svg_path, chart(&samples, &a.dataset)?).context("svg")?;
    eprintln!("wrote {} and {}", csv_path.display(), svg_path.display());
    Ok(())
}

/// Peak RSS (MB) and throughput (points/s) against points ingested, two panels.
fn chart(samples: &[Sample], dataset: &str) -> Result<String> {
    let err = |e: &dyn std::fmt::Debug| anyhow::anyhow!("drawing the chart: {e:?}");
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 620)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let (top, bottom) = root.split_vertically(310);
        let max_x = samples.last().map_or(1, |s| s.points).max(1) as f64 / 1e6;
        let max_rss = samples.iter().map(|s| mb(s.peak_rss)).fold(1.0, f64::max) * 1.15;
        let mut c = ChartBuilder::on(&top)
            .caption(
                format!("cargo xtask soak ({dataset}): resident memory"),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..max_x, 0.0..max_rss)
            .map_err(|e| err(&e))?;
        c.configure_mesh()
            .x_desc("million points ingested")
            .y_desc("MB")
            .draw()
            .map_err(|e| err(&e))?;
        let peak: Vec<(f64, f64)> = samples
            .iter()
            .map(|s| (s.points as f64 / 1e6, mb(s.peak_rss)))
            .collect();
        let now: Vec<(f64, f64)> = samples
            .iter()
            .map(|s| (s.points as f64 / 1e6, mb(s.rss)))
            .collect();
        c.draw_series(LineSeries::new(peak, &RED))
            .map_err(|e| err(&e))?
            .label("peak RSS (VmHWM)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
        c.draw_series(LineSeries::new(now, &BLUE))
            .map_err(|e| err(&e))?
            .label("RSS")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
        c.configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(|e| err(&e))?;
        let max_tp = samples
            .iter()
            .map(|s| s.points_per_sec / 1e3)
            .fold(1.0, f64::max)
            * 1.15;
        let mut c = ChartBuilder::on(&bottom)
            .caption("ingest throughput", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..max_x, 0.0..max_tp)
            .map_err(|e| err(&e))?;
        c.configure_mesh()
            .x_desc("million points ingested")
            .y_desc("thousand points/s")
            .draw()
            .map_err(|e| err(&e))?;
        let tp: Vec<(f64, f64)> = samples
            .iter()
            .map(|s| (s.points as f64 / 1e6, s.points_per_sec / 1e3))
            .collect();
        c.draw_series(LineSeries::new(tp, &GREEN))
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ways of feeding the engine store every unique point once and find every
    /// retry, and leave the same points behind.
    #[test]
    fn refs_and_points_feed_the_same_points() {
        let options = Options::default()
            .series(50)
            .points(20_000)
            .dup_rate(0.05)
            .late_rate(0.02);
        let ds = Dataset::by_name("k8s", options).unwrap();
        let mut stored = Vec::new();
        for api in [Api::Refs, Api::Points] {
            let dir = tempfile::tempdir().unwrap();
            let config = EngineConfig::new()
                .with_derived_tsids(true)
                .with_refresh_rows(3_000);
            let engine = PartitionedEngine::create_single(dir.path(), config).unwrap();
            let mut store = Store::new(engine, 1, Some(MAX_WAITING_MERGES));
            let mut feed = Feed::new(&mut store, api, 700, ds.series_count() as usize, 8);
            let mut computer = ds.tsid_computer().unwrap();
            for r in ds.records() {
                let tsid = r.tsid(&mut computer).unwrap();
                feed.push(&r, tsid).unwrap();
                if feed.len() >= 700 {
                    feed.flush().unwrap();
                }
            }
            feed.flush().unwrap();
            assert_eq!(feed.created, ds.unique_docs(), "{api:?}");
            assert_eq!(
                feed.duplicates,
                ds.total_docs() - ds.unique_docs(),
                "{api:?}"
            );
            assert!(feed.duplicates > 0);
            drop(feed);
            let (engine, _) = store.into_inner().unwrap();
            assert_eq!(engine.live_count(), ds.unique_docs());
            let mut points = Vec::new();
            engine
                .search(i64::MIN, i64::MAX)
                .rows(|_, _| true, |p, _| points.push(p))
                .unwrap();
            points.sort_by_key(|p| (p.tsid, p.ts_millis));
            stored.push(points);
        }
        assert_eq!(stored[0], stored[1]);
    }
}
