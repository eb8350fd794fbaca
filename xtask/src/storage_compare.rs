//! `cargo xtask storage-compare`: the same documents through the engine under each dedup
//! strategy (`inverted`, the baseline, then `bloom` and `series-range`), merged to one
//! segment, and what each costs on disk and at ingest.
//!
//! For each dataset: generate it (with retries and late documents), build the typed
//! points once, then for each repetition and strategy (strategies rotated from one
//! repetition to the next, so none always runs first) ingest them into a fresh engine in
//! a temporary directory in batches of `create` operations, refresh (timed: the ingest),
//! then `merge_all` (timed apart) and measure the segment files. Every strategy gets the
//! same configuration but the strategy: `EngineConfig::default()`, a refresh every
//! quarter of the dataset's unique documents (2,000 to 50,000; `--refresh-rows`) so that
//! there are several segments and retries and late points also reach them, and WAL fsync at most every 100 ms (as the ingest
//! bench), so that the figures compare engine work, not the disk's fsync latency.
//!
//! Fails (non-zero exit) when a strategy finds another number of duplicates than the
//! generator sent, when a document is rejected or lost, or when `series-range` is not
//! smaller than `inverted`.
//!
//! JSON output (`--json FILE`), version 1. Top level: `version`, `date` (UTC,
//! `YYYY-MM-DD`), `command`, `config` {`reps`, `batch`, `dup_rate`, `late_rate`, `disorder`, `seed`,
//! `wal_fsync_interval_ms`}, `datasets` (array), `checks_passed` (bool).
//! Each dataset: `name`, `series`, `unique_docs`, `total_docs`, `expected_duplicates`,
//! `refresh_rows`,
//! `strategies` (array) and, with `--with-tantivy`, `tantivy`. Each strategy:
//! `strategy`, `documents` (live after the merge), `segments`, `total_bytes` (segment
//! files), `bytes_per_doc`, `id_bytes` and `id_bytes_per_doc` (its id/dedup structure:
//! the FST id index for `inverted`, the bloom filter for `bloom`, the series table's
//! min/max columns for `series-range`, as encoded before the series table's
//! compression), `components` (bytes by
//! component: `series_table`, `timestamps`, `metrics`, `extras`, `directory`, `bloom`,
//! `id_index`, `other`), `reduction_vs_inverted_pct`, `ingest_seconds` (each
//! repetition), `ingest_docs_per_s` (documents sent, retries included, per second, at
//! the median), `ingest_ratio_vs_inverted` (median over repetitions of the baseline's
//! time over this strategy's time in the same repetition), `merge_seconds` (median),
//! `duplicates_found`, `duplicates_ok`, `false_positive_verifications` (verifications
//! that found nothing: a bloom filter's false positives, or a series range holding the
//! timestamp of a new point) and `stats` (the engine's dedup counters).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use tidemark_datagen::{Dataset, Dim as GenDim, MetricVal, Options, Record};
use tidemark_dedup::{Durability, Engine, EngineConfig, Op, Outcome, Strategy};
use tidemark_segment::Point;
use tidemark_tsid::Tsid;

/// The strategies compared, the baseline first.
const STRATEGIES: [Strategy; 3] = [Strategy::Inverted, Strategy::Bloom, Strategy::SeriesRange];

/// Size of one dataset in a run.
#[derive(Debug, Clone, Copy)]
struct Size {
    series: u32,
    points: u64,
}

/// Default sizes: about a minute for the whole run (3 datasets x 3 strategies x 3
/// repetitions) on a 2-core machine, with enough points per series (4 hours) that the
/// per-series ranges are amortized as in a real index.
fn default_size(name: &str, small: bool) -> Size {
    match (name, small) {
        ("k8s", false) => Size {
            series: 500,
            points: 500 * 360,
        },
        ("otel", false) => Size {
            series: 2_100,
            points: 2_100 * 240,
        },
        ("events", false) => Size {
            series: 100,
            points: 200_000,
        },
        ("k8s", true) => Size {
            series: 100,
            points: 100 * 120,
        },
        ("otel", true) => Size {
            series: 350,
            points: 350 * 60,
        },
        (_, _) => Size {
            series: 10,
            points: 6_000,
        },
    }
}

#[derive(Debug)]
struct Args {
    datasets: Vec<String>,
    strategies: Vec<Strategy>,
    points: Option<u64>,
    series: Option<u32>,
    small: bool,
    reps: usize,
    batch: usize,
    refresh_rows: usize,
    seed: u64,
    dup_rate: f64,
    late_rate: f64,
    disorder: f64,
    out: PathBuf,
    json: Option<PathBuf>,
    markdown: Option<PathBuf>,
    svg: Option<PathBuf>,
    with_tantivy: bool,
}

fn parse(args: &[String]) -> Result<Args> {
    let mut a = Args {
        datasets: Vec::new(),
        strategies: STRATEGIES.to_vec(),
        points: None,
        series: None,
        small: false,
        reps: 3,
        batch: 1_000,
        refresh_rows: 0,
        seed: 42,
        dup_rate: 0.1,
        late_rate: 0.05,
        disorder: 0.0,
        out: crate::project_root().join("target/xtask/storage-compare"),
        json: None,
        markdown: None,
        svg: None,
        with_tantivy: false,
    };
    let mut reps_set = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .with_context(|| format!("{flag} needs a value"))
                .cloned()
        };
        match arg.as_str() {
            "--datasets" => {
                a.datasets = value(arg)?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect();
            }
            "--strategies" => {
                a.strategies = value(arg)?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| s.parse::<Strategy>().map_err(anyhow::Error::from))
                    .collect::<Result<_>>()?;
                ensure!(!a.strategies.is_empty(), "--strategies needs at least one");
            }
            "--points" => a.points = Some(value(arg)?.parse().context("--points")?),
            "--series" => a.series = Some(value(arg)?.parse().context("--series")?),
            "--small" => a.small = true,
            "--reps" => {
                a.reps = value(arg)?.parse().context("--reps")?;
                reps_set = true;
            }
            "--batch" => a.batch = value(arg)?.parse().context("--batch")?,
            "--refresh-rows" => {
                a.refresh_rows = value(arg)?.parse().context("--refresh-rows")?;
                ensure!(a.refresh_rows >= 1, "--refresh-rows must be at least 1");
            }
            "--seed" => a.seed = value(arg)?.parse().context("--seed")?,
            "--dup-rate" => a.dup_rate = value(arg)?.parse().context("--dup-rate")?,
            "--late-rate" => a.late_rate = value(arg)?.parse().context("--late-rate")?,
            "--disorder" => a.disorder = value(arg)?.parse().context("--disorder")?,
            "--out" => a.out = PathBuf::from(value(arg)?),
            "--json" => a.json = Some(PathBuf::from(value(arg)?)),
            "--markdown" => a.markdown = Some(PathBuf::from(value(arg)?)),
            "--svg" => a.svg = Some(PathBuf::from(value(arg)?)),
            "--with-tantivy" => a.with_tantivy = true,
            other => bail!("unknown option {other:?} (see `cargo xtask help`)"),
        }
    }
    if a.datasets.is_empty() {
        a.datasets = supported_datasets();
    }
    for name in &a.datasets {
        ensure!(
            supported_datasets().contains(name),
            "unknown dataset {name:?} (known: {})",
            supported_datasets().join(", ")
        );
    }
    if a.small && !reps_set {
        a.reps = 1;
    }
    ensure!(a.reps >= 1, "--reps must be at least 1");
    ensure!(a.batch >= 1, "--batch must be at least 1");
    for (flag, v) in [
        ("--dup-rate", a.dup_rate),
        ("--late-rate", a.late_rate),
        ("--disorder", a.disorder),
    ] {
        ensure!(
            (0.0..=1.0).contains(&v),
            "{flag} must be in [0, 1], found {v}"
        );
    }
    if a.with_tantivy && !cfg!(feature = "tantivy") {
        bail!(
            "--with-tantivy needs xtask's `tantivy` feature: \
             cargo run -p xtask --release --features tantivy -- storage-compare --with-tantivy"
        );
    }
    Ok(a)
}

/// The datasets this build can compare.
fn supported_datasets() -> Vec<String> {
    crate::storage_points::DATASETS
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// One dataset, ready to ingest.
struct Prepared {
    name: String,
    ds: Dataset,
    /// Every document sent, in emission order (retries included), as points.
    points: Vec<Point>,
    expected_duplicates: u64,
    refresh_rows: usize,
}

fn prepare(name: &str, args: &Args) -> Result<Prepared> {
    let size = default_size(name, args.small);
    let series = args.series.unwrap_or(size.series);
    let points = args.points.unwrap_or(if args.series.is_some() {
        u64::from(series) * size.points / u64::from(size.series.max(1))
    } else {
        size.points
    });
    let options = Options::default()
        .series(series)
        .points(points)
        .seed(args.seed)
        .dup_rate(args.dup_rate)
        .late_rate(args.late_rate)
        .disorder(args.disorder);
    let ds = Dataset::by_name(name, options).with_context(|| format!("dataset {name}"))?;
    let started = Instant::now();
    let points = crate::storage_points::points(&ds)?;
    ensure!(
        points.len() as u64 == ds.total_docs(),
        "{name}: {} points built, the generator announced {}",
        points.len(),
        ds.total_docs()
    );
    eprintln!(
        "[{name}] {} documents ({} unique, {} series) built in {:.1} s",
        points.len(),
        ds.unique_docs(),
        ds.series_count(),
        started.elapsed().as_secs_f64()
    );
    let refresh_rows = if args.refresh_rows > 0 {
        args.refresh_rows
    } else {
        (ds.unique_docs() / 4).clamp(2_000, 50_000) as usize
    };
    Ok(Prepared {
        name: name.to_owned(),
        refresh_rows,
        expected_duplicates: ds.total_docs() - ds.unique_docs(),
        ds,
        points,
    })
}

/// The engine configuration of a run: identical for every strategy but the strategy.
fn config(ds: &Dataset, strategy: Strategy, refresh_rows: usize) -> EngineConfig {
    let config = EngineConfig::default()
        .with_strategy(strategy)
        .with_refresh_rows(refresh_rows)
        .with_durability(Durability::Interval(FSYNC_INTERVAL));
    crate::storage_points::with_mode(ds, config)
}

const FSYNC_INTERVAL: Duration = Duration::from_millis(100);

/// What one ingest of one strategy measured.
#[derive(Debug, Clone)]
struct Run {
    ingest: Duration,
    merge: Duration,
    duplicates: u64,
    storage: Option<Storage>,
    stats: tidemark_dedup::DedupStats,
}

/// Bytes on disk after the merge.
#[derive(Debug, Clone, Default)]
struct Storage {
    documents: u64,
    segments: usize,
    total: u64,
    components: Vec<(&'static str, u64)>,
    bloom: u64,
    id_index: u64,
    /// Bytes of the series table's min_ts and span columns before its compression
    /// (`Segment::series_range_bytes`).
    ranges: u64,
}

fn measure(engine: &Engine) -> Result<Storage> {
    let mut s = Storage {
        documents: engine.live_count(),
        ..Storage::default()
    };
    let mut parts = [0u64; 8];
    for (path, seg, _deleted) in engine.segments() {
        s.segments += 1;
        let file_len = std::fs::metadata(path)
            .with_context(|| format!("size of {}", path.display()))?
            .len();
        let b = seg.size_breakdown();
        ensure!(
            b.total == file_len,
            "{}: breakdown {} != file {}",
            path.display(),
            b.total,
            file_len
        );
        s.total += file_len;
        let metrics: u64 = b.metrics.iter().map(|m| m.1).sum();
        let extras: u64 = b.extras.iter().map(|m| m.1).sum();
        let series = b.series_table + b.meta;
        parts[0] += series;
        parts[1] += b.timestamps;
        parts[2] += metrics;
        parts[3] += extras;
        parts[4] += b.directory;
        parts[5] += b.bloom;
        parts[6] += b.id_index;
        parts[7] +=
            b.total - series - b.timestamps - metrics - extras - b.directory - b.bloom - b.id_index;
        s.bloom += b.bloom;
        s.id_index += b.id_index;
        // As the file's format version encodes them (the segment crate knows how).
        s.ranges += seg.series_range_bytes();
    }
    s.components = COMPONENTS.iter().copied().zip(parts).collect();
    Ok(s)
}

/// Component names, in the order of the chart's stacks.
const COMPONENTS: [&str; 8] = [
    "series_table",
    "timestamps",
    "metrics",
    "extras",
    "directory",
    "bloom",
    "id_index",
    "other",
];

fn ingest(p: &Prepared, strategy: Strategy, args: &Args, keep: bool) -> Result<Run> {
    let scratch = tempfile::Builder::new()
        .prefix("tidemark-storage-compare-")
        .tempdir()
        .context("creating a temporary engine directory")?;
    let mut engine = Engine::create(scratch.path(), config(&p.ds, strategy, p.refresh_rows))
        .with_context(|| format!("creating the {} engine", strategy.name()))?;
    // The points are cloned into batches before the clock starts: every strategy is timed
    // on the same engine work only.
    let batches: Vec<Vec<Op>> = p
        .points
        .chunks(args.batch)
        .map(|c| c.iter().cloned().map(Op::Create).collect())
        .collect();
    let mut duplicates = 0u64;
    let mut rejected = 0u64;
    let started = Instant::now();
    for ops in batches {
        for outcome in engine.batch(ops)? {
            match outcome {
                Outcome::Conflict { .. } => duplicates += 1,
                Outcome::Created { .. } => {}
                _ => rejected += 1,
            }
        }
    }
    engine.refresh()?;
    let ingest = started.elapsed();
    let started = Instant::now();
    engine.merge_all()?;
    let merge = started.elapsed();
    ensure!(
        rejected == 0,
        "{}/{}: {rejected} documents were not created nor conflicts",
        p.name,
        strategy.name()
    );
    let storage = if keep { Some(measure(&engine)?) } else { None };
    let stats = *engine.stats();
    engine.close()?;
    Ok(Run {
        ingest,
        merge,
        duplicates,
        storage,
        stats,
    })
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Results of one strategy on one dataset.
#[derive(Debug, Clone)]
struct StrategyResult {
    strategy: Strategy,
    runs: Vec<Run>,
    storage: Storage,
    ingest_ratio: f64,
}

impl StrategyResult {
    fn ingest_secs(&self) -> Vec<f64> {
        self.runs.iter().map(|r| r.ingest.as_secs_f64()).collect()
    }

    fn id_bytes(&self) -> u64 {
        match self.strategy {
            Strategy::Inverted => self.storage.id_index,
            Strategy::Bloom => self.storage.bloom,
            _ => self.storage.ranges + self.storage.bloom + self.storage.id_index,
        }
    }

    fn duplicates(&self) -> u64 {
        self.runs.first().map_or(0, |r| r.duplicates)
    }
}

/// Results of one dataset.
struct DatasetResult {
    name: String,
    series: u32,
    unique: u64,
    total: u64,
    expected_duplicates: u64,
    refresh_rows: usize,
    strategies: Vec<StrategyResult>,
    tantivy: Option<Value>,
}

impl DatasetResult {
    fn baseline(&self) -> Option<&StrategyResult> {
        self.strategies
            .iter()
            .find(|s| s.strategy == Strategy::Inverted)
    }

    fn reduction_pct(&self, s: &StrategyResult) -> f64 {
        self.baseline().map_or(0.0, |b| {
            100.0 * (1.0 - s.storage.total as f64 / b.storage.total.max(1) as f64)
        })
    }

    fn per_doc(&self, bytes: u64) -> f64 {
        bytes as f64 / self.unique.max(1) as f64
    }

    fn docs_per_s(&self, s: &StrategyResult) -> f64 {
        self.total as f64 / median(s.ingest_secs()).max(1e-9)
    }
}

fn compare(p: &Prepared, args: &Args) -> Result<DatasetResult> {
    let list = &args.strategies;
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); list.len()];
    for rep in 0..args.reps {
        for k in 0..list.len() {
            let i = (k + rep) % list.len();
            let strategy = list[i];
            let run = ingest(p, strategy, args, rep == 0)?;
            eprintln!(
                "[{}] rep {}/{} {:<12} ingest {:.2} s ({:.0} docs/s), merge {:.2} s, {} duplicates",
                p.name,
                rep + 1,
                args.reps,
                strategy.name(),
                run.ingest.as_secs_f64(),
                p.points.len() as f64 / run.ingest.as_secs_f64().max(1e-9),
                run.merge.as_secs_f64(),
                run.duplicates
            );
            runs[i].push(run);
        }
    }
    // Without the baseline (--strategies for profiling) ratios are against nothing: NaN.
    let base: Vec<f64> = match list.iter().position(|s| *s == Strategy::Inverted) {
        Some(b) => runs[b].iter().map(|r| r.ingest.as_secs_f64()).collect(),
        None => vec![f64::NAN; args.reps],
    };
    let mut strategies = Vec::new();
    for (strategy, runs) in list.iter().copied().zip(runs) {
        let storage = runs
            .first()
            .and_then(|r| r.storage.clone())
            .context("no measured run")?;
        let ratios: Vec<f64> = runs
            .iter()
            .zip(&base)
            .map(|(r, b)| b / r.ingest.as_secs_f64().max(1e-9))
            .collect();
        strategies.push(StrategyResult {
            strategy,
            runs,
            storage,
            ingest_ratio: median(ratios),
        });
    }
    #[cfg(feature = "tantivy")]
    let tantivy = if args.with_tantivy {
        eprintln!("[{}] tantivy: indexing with and without _id", p.name);
        Some(crate::storage_tantivy::measure(&p.ds, &p.name)?)
    } else {
        None
    };
    #[cfg(not(feature = "tantivy"))]
    let tantivy = None;
    Ok(DatasetResult {
        name: p.name.clone(),
        series: p.ds.series_count(),
        unique: p.ds.unique_docs(),
        total: p.ds.total_docs(),
        expected_duplicates: p.expected_duplicates,
        refresh_rows: p.refresh_rows,
        strategies,
        tantivy,
    })
}

/// The checks the task fails on; an empty list means all passed.
fn failures(results: &[DatasetResult]) -> Vec<String> {
    let mut out = Vec::new();
    for d in results {
        for s in &d.strategies {
            for (rep, r) in s.runs.iter().enumerate() {
                if r.duplicates != d.expected_duplicates {
                    out.push(format!(
                        "{}/{} (rep {}): found {} duplicates, the generator sent {}",
                        d.name,
                        s.strategy.name(),
                        rep + 1,
                        r.duplicates,
                        d.expected_duplicates
                    ));
                }
            }
            if s.storage.documents != d.unique {
                out.push(format!(
                    "{}/{}: {} documents stored, {} unique sent",
                    d.name,
                    s.strategy.name(),
                    s.storage.documents,
                    d.unique
                ));
            }
        }
        let find = |st: Strategy| d.strategies.iter().find(|s| s.strategy == st);
        if let (Some(sr), Some(inv)) = (find(Strategy::SeriesRange), find(Strategy::Inverted)) {
            if sr.storage.total >= inv.storage.total {
                out.push(format!(
                    "{}: series-range ({} bytes) is not smaller than inverted ({} bytes)",
                    d.name, sr.storage.total, inv.storage.total
                ));
            }
        }
    }
    out
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn rate(docs_per_s: f64) -> String {
    if docs_per_s >= 1e6 {
        format!("{:.2}M/s", docs_per_s / 1e6)
    } else {
        format!("{:.0}k/s", docs_per_s / 1e3)
    }
}

fn terminal_table(results: &[DatasetResult]) -> String {
    let mut o = String::new();
    for d in results {
        let _ = writeln!(
            o,
            "\n{}: {} unique documents ({} sent, {} duplicates), {} series",
            d.name,
            thousands(d.unique),
            thousands(d.total),
            thousands(d.expected_duplicates),
            thousands(u64::from(d.series))
        );
        let _ = writeln!(
            o,
            "{:<18} {:>11} {:>12} {:>7} {:>9} {:>12} {:>10} {:>8} {:>10} {:>9}",
            "strategy",
            "documents",
            "total bytes",
            "B/doc",
            "id B/doc",
            "vs inverted",
            "ingest",
            "vs inv.",
            "dups",
            "vain ver."
        );
        let has_baseline = d
            .strategies
            .iter()
            .any(|s| s.strategy == Strategy::Inverted);
        for s in &d.strategies {
            let vs = if s.strategy == Strategy::Inverted || !has_baseline {
                "—".to_owned()
            } else {
                format!("{:+.1}%", -d.reduction_pct(s))
            };
            let ratio = if has_baseline {
                format!("{:.2}x", s.ingest_ratio)
            } else {
                "—".to_owned()
            };
            let ok = if s.duplicates() == d.expected_duplicates {
                "ok"
            } else {
                "WRONG"
            };
            let _ = writeln!(
                o,
                "{:<18} {:>11} {:>12} {:>7.2} {:>9.3} {:>12} {:>10} {:>8} {:>7} {:<2} {:>9}",
                s.strategy.name(),
                thousands(s.storage.documents),
                thousands(s.storage.total),
                d.per_doc(s.storage.total),
                d.per_doc(s.id_bytes()),
                vs,
                rate(d.docs_per_s(s)),
                ratio,
                s.duplicates(),
                ok,
                s.runs.first().map_or(0, |r| r.stats.false_positives)
            );
        }
        if let Some(t) = &d.tantivy {
            let _ = writeln!(
                o,
                "tantivy: {:.2} B/doc without _id, {:.2} B/doc with, _id costs {:.2} B/doc",
                t["bytes_per_doc_without_id"].as_f64().unwrap_or(0.0),
                t["bytes_per_doc_with_id"].as_f64().unwrap_or(0.0),
                t["id_bytes_per_doc"].as_f64().unwrap_or(0.0)
            );
        }
    }
    o
}

/// One Markdown table of every dataset and strategy.
fn markdown(results: &[DatasetResult], args: &Args, date: &str, command: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Measured {date} with `{command}` ({} repetitions, batches of {}, a refresh every \
         {} buffered points, dup-rate {}, late-rate {}, disorder {}, seed {}).\n",
        args.reps,
        args.batch,
        results
            .iter()
            .map(|d| format!("{} ({})", thousands(d.refresh_rows as u64), d.name))
            .collect::<Vec<_>>()
            .join(", "),
        args.dup_rate,
        args.late_rate,
        args.disorder,
        args.seed
    );
    let _ = writeln!(
        o,
        "| dataset | strategy | documents | total bytes | bytes/doc | id/dedup bytes/doc | storage vs inverted | ingest docs/s | ingest vs inverted | merge s | duplicates found / sent | vain verifications |"
    );
    let _ = writeln!(
        o,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for d in results {
        for s in &d.strategies {
            let red = d.reduction_pct(s);
            let vs = if s.strategy == Strategy::Inverted {
                "—".to_owned()
            } else {
                format!("{:+.1}%", -red)
            };
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {:.2} | {:.3} | {} | {} | {:.2}× | {:.2} | {} / {} | {} |",
                d.name,
                s.strategy.name(),
                thousands(s.storage.documents),
                thousands(s.storage.total),
                d.per_doc(s.storage.total),
                d.per_doc(s.id_bytes()),
                vs,
                rate(d.docs_per_s(s)),
                s.ingest_ratio,
                median(s.runs.iter().map(|r| r.merge.as_secs_f64()).collect()),
                thousands(s.duplicates()),
                thousands(d.expected_duplicates),
                thousands(s.runs.first().map_or(0, |r| r.stats.false_positives))
            );
        }
    }
    let tantivy: Vec<&DatasetResult> = results.iter().filter(|d| d.tantivy.is_some()).collect();
    if !tantivy.is_empty() {
        let _ = writeln!(
            o,
            "\n| dataset | tantivy bytes/doc without `_id` | with `_id` | `_id` bytes/doc |\n|---|---:|---:|---:|"
        );
        for d in tantivy {
            if let Some(t) = &d.tantivy {
                let _ = writeln!(
                    o,
                    "| {} | {:.2} | {:.2} | {:.2} |",
                    d.name,
                    t["bytes_per_doc_without_id"].as_f64().unwrap_or(0.0),
                    t["bytes_per_doc_with_id"].as_f64().unwrap_or(0.0),
                    t["id_bytes_per_doc"].as_f64().unwrap_or(0.0)
                );
            }
        }
    }
    o
}

fn to_json(results: &[DatasetResult], args: &Args, date: &str, command: &str, ok: bool) -> Value {
    let datasets: Vec<Value> = results
        .iter()
        .map(|d| {
            let strategies: Vec<Value> = d
                .strategies
                .iter()
                .map(|s| {
                    let stats = s.runs.first().map(|r| r.stats).unwrap_or_default();
                    let components: serde_json::Map<String, Value> = s
                        .storage
                        .components
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), json!(v)))
                        .collect();
                    json!({
                        "strategy": s.strategy.name(),
                        "documents": s.storage.documents,
                        "segments": s.storage.segments,
                        "total_bytes": s.storage.total,
                        "bytes_per_doc": d.per_doc(s.storage.total),
                        "id_bytes": s.id_bytes(),
                        "id_bytes_per_doc": d.per_doc(s.id_bytes()),
                        "components": components,
                        "reduction_vs_inverted_pct": d.reduction_pct(s),
                        "ingest_seconds": s.ingest_secs(),
                        "ingest_docs_per_s": d.docs_per_s(s),
                        "ingest_ratio_vs_inverted": s.ingest_ratio,
                        "merge_seconds": median(s.runs.iter().map(|r| r.merge.as_secs_f64()).collect()),
                        "duplicates_found": s.duplicates(),
                        "duplicates_ok": s.runs.iter().all(|r| r.duplicates == d.expected_duplicates),
                        "false_positive_verifications": stats.false_positives,
                        "stats": {
                            "checks": stats.checks,
                            "live_map_hits": stats.live_map_hits,
                            "newest_negatives": stats.newest_negatives,
                            "segments_pruned_by_time": stats.segments_pruned_by_time,
                            "series_range_negatives": stats.series_range_negatives,
                            "slot_negatives": stats.slot_negatives,
                            "bloom_negatives": stats.bloom_negatives,
                            "false_positives": stats.false_positives,
                            "verifications": stats.verifications,
                            "true_duplicates": stats.true_duplicates,
                            "verification_nanos": stats.verification_nanos,
                        },
                    })
                })
                .collect();
            let mut v = json!({
                "name": d.name,
                "series": d.series,
                "unique_docs": d.unique,
                "total_docs": d.total,
                "expected_duplicates": d.expected_duplicates,
                "refresh_rows": d.refresh_rows,
                "strategies": strategies,
            });
            if let (Some(t), Value::Object(m)) = (&d.tantivy, &mut v) {
                m.insert("tantivy".into(), t.clone());
            }
            v
        })
        .collect();
    json!({
        "version": 1,
        "date": date,
        "command": command,
        "config": {
            "reps": args.reps,
            "batch": args.batch,
            "dup_rate": args.dup_rate,
            "late_rate": args.late_rate,
            "disorder": args.disorder,
            "seed": args.seed,
            "wal_fsync_interval_ms": FSYNC_INTERVAL.as_millis() as u64,
        },
        "datasets": datasets,
        "checks_passed": ok,
    })
}

/// Today's UTC date, `YYYY-MM-DD`.
pub(crate) fn utc_date() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = crate::bloom_report::civil_date((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

pub fn run(raw: &[String]) -> Result<()> {
    let args = parse(raw)?;
    let command = std::iter::once("cargo xtask storage-compare".to_owned())
        .chain(raw.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");
    let date = utc_date();
    let mut results = Vec::new();
    for name in &args.datasets {
        let prepared = prepare(name, &args)?;
        results.push(compare(&prepared, &args)?);
    }
    let problems = failures(&results);
    print!("{}", terminal_table(&results));
    let md = markdown(&results, &args, &date, &command);
    let json = to_json(&results, &args, &date, &command, problems.is_empty());
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let svg_path = args
        .svg
        .clone()
        .unwrap_or_else(|| args.out.join("storage.svg"));
    let chart = crate::storage_chart::ChartData::from_results(
        results
            .iter()
            .map(|d| {
                (
                    d.name.clone(),
                    d.strategies
                        .iter()
                        .map(|s| {
                            (
                                s.strategy.name().to_owned(),
                                s.storage
                                    .components
                                    .iter()
                                    .map(|(c, b)| ((*c).to_owned(), d.per_doc(*b)))
                                    .collect(),
                            )
                        })
                        .collect(),
                )
            })
            .collect(),
    );
    write(&svg_path, &chart.render(&date)?)?;
    let json_text = serde_json::to_string_pretty(&json)? + "\n";
    write(&args.out.join("storage.json"), &json_text)?;
    write(&args.out.join("storage.md"), &md)?;
    if let Some(p) = &args.json {
        write(p, &json_text)?;
    }
    if let Some(p) = &args.markdown {
        write(p, &md)?;
    }
    println!(
        "\nwritten: {} (chart), {} and {}{}",
        svg_path.display(),
        args.out.join("storage.json").display(),
        args.out.join("storage.md").display(),
        [&args.json, &args.markdown]
            .into_iter()
            .flatten()
            .map(|p| format!(", {}", p.display()))
            .collect::<String>()
    );
    if !problems.is_empty() {
        bail!(
            "storage-compare checks failed:\n  {}",
            problems.join("\n  ")
        );
    }
    Ok(())
}

/// The record's dimensions and metrics as a point of the given tsid.
pub(crate) fn metric_point(r: &Record, tsid: Tsid) -> Point {
    let mut p = Point::new(tsid, r.ts_millis);
    for (name, v) in r.dims.iter() {
        p = match v {
            GenDim::Keyword(s) => p.dim(*name, s.as_str()),
            GenDim::Int(i) => p.dim(*name, *i),
        };
    }
    for (name, v) in &r.metrics {
        p = match v {
            MetricVal::Gauge(g) => p.gauge(*name, *g),
            MetricVal::Counter(c) => p.counter(*name, *c),
        };
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_dates() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(utc_date().len(), 10);
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(12), "12");
    }

    #[test]
    fn small_run_finds_every_duplicate_and_series_range_is_smaller() {
        let args = parse(&[
            "--small".into(),
            "--datasets".into(),
            "k8s".into(),
            "--points".into(),
            "3000".into(),
        ])
        .unwrap();
        let p = prepare("k8s", &args).unwrap();
        let mut r = compare(&p, &args).unwrap();
        assert!(failures(std::slice::from_ref(&r)).is_empty());
        assert!(parse(&["--datasets".into(), "nope".into()]).is_err());

        // The checks that make the task fail: a duplicate count off by one, and
        // series-range no smaller than inverted.
        r.expected_duplicates += 1;
        let f = failures(std::slice::from_ref(&r));
        assert_eq!(f.len(), 3, "{f:?}");
        assert!(f[0].contains("duplicates"), "{f:?}");
        r.expected_duplicates -= 1;
        let inverted = r.baseline().unwrap().storage.total;
        for s in &mut r.strategies {
            if s.strategy == Strategy::SeriesRange {
                s.storage.total = inverted;
            }
        }
        let f = failures(&[r]);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].contains("not smaller"), "{f:?}");
    }

    #[test]
    fn events_run_in_events_mode_and_find_every_duplicate() {
        let args = parse(&[
            "--small".into(),
            "--datasets".into(),
            "events".into(),
            "--points".into(),
            "3000".into(),
            "--refresh-rows".into(),
            "1000".into(),
        ])
        .unwrap();
        let p = prepare("events", &args).unwrap();
        assert!(p.points.iter().all(|pt| !pt.extras.is_empty()));
        let r = compare(&p, &args).unwrap();
        assert!(r.expected_duplicates > 0);
        assert!(failures(&[r]).is_empty());
    }
}
