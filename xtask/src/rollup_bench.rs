//! `cargo xtask rollup-bench`: an `avg` per hour over 30 days of k8s-shaped data at 10 s
//! (generated on the fly, no files), answered from rollups and from raw rows by the
//! façade's `Index::aggregate`, in one run. Checks the answers are identical, reports the
//! medians, the speed-up and the bytes of the rollups per raw point.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use tidemark::dedup::{Durability, EngineConfig, Op, Outcome, PartitionConfig, PartitionedEngine};
use tidemark::{AggQuery, AggResult, Index, Mapping};
use tidemark_datagen::{Dataset, Options};
use tidemark_tsid::Tsid;

use crate::storage_compare::{median, metric_point, utc_date};

const DAY: i64 = 86_400_000;
const HOUR: i64 = 3_600_000;

struct Args {
    days: u64,
    series: u32,
    reps: usize,
    metric: String,
    out: PathBuf,
    markdown: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Args> {
    let mut a = Args {
        days: 30,
        series: 50,
        reps: 5,
        metric: "k8s.pod.memory.usage_bytes".into(),
        out: crate::project_root().join("target/xtask/rollup-bench"),
        markdown: None,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--days" => a.days = value()?.parse().context("--days")?,
            "--series" => a.series = value()?.parse().context("--series")?,
            "--reps" => a.reps = value()?.parse().context("--reps")?,
            "--metric" => a.metric = value()?.clone(),
            "--out" => a.out = PathBuf::from(value()?),
            "--markdown" => a.markdown = Some(PathBuf::from(value()?)),
            other => bail!("unknown rollup-bench option {other:?} (see `cargo xtask help`)"),
        }
    }
    ensure!(
        a.days > 1 && a.series > 0 && a.reps > 0,
        "--days > 1, --series and --reps > 0"
    );
    Ok(a)
}

/// Times `reps` runs of `f`, returning the median seconds and the last answer.
fn timed(reps: usize, mut f: impl FnMut() -> Result<AggResult>) -> Result<(f64, AggResult)> {
    let mut times = Vec::with_capacity(reps);
    let mut last = None;
    for _ in 0..reps {
        let t = Instant::now();
        let r = f()?;
        times.push(t.elapsed().as_secs_f64());
        last = Some(r);
    }
    Ok((median(times), last.context("no run")?))
}

/// The largest relative difference of the sums (and averages) of two answers; an error
/// if their buckets, counts, minima or maxima differ at all.
fn compare(a: &AggResult, b: &AggResult) -> Result<f64> {
    ensure!(a.buckets.len() == b.buckets.len(), "bucket counts differ");
    ensure!(a.series.len() == b.series.len(), "series counts differ");
    let mut worst = 0f64;
    let pairs = a.buckets.iter().zip(&b.buckets).chain(
        a.series
            .iter()
            .zip(&b.series)
            .flat_map(|(s, t)| s.buckets.iter().zip(&t.buckets)),
    );
    for (x, y) in pairs {
        ensure!(
            (x.key, x.count, x.min.to_bits(), x.max.to_bits())
                == (y.key, y.count, y.min.to_bits(), y.max.to_bits()),
            "bucket {} differs: {x:?} vs {y:?}",
            x.key
        );
        if x.sum != y.sum {
            worst = worst.max((x.sum - y.sum).abs() / x.sum.abs().max(y.sum.abs()));
        }
    }
    Ok(worst)
}

pub fn run(args: &[String]) -> Result<()> {
    let a = parse(args)?;
    std::fs::create_dir_all(&a.out).with_context(|| a.out.display().to_string())?;
    let tmp = tempfile::tempdir_in(&a.out)?;
    let dir = tmp.path().join("index");
    let per_series = a.days * (DAY as u64 / 10_000);
    let start = 1_764_460_800_000; // 2025-11-30T00:00:00Z, a day boundary
    let ds = Dataset::k8s(
        Options::default()
            .series(a.series)
            .points(u64::from(a.series) * per_series)
            .start_millis(start),
    );
    let mapping_path = crate::project_root().join("fixtures/tidemark/k8s-datagen.mapping.json");
    let mapping = Mapping::from_json_str(
        &std::fs::read_to_string(&mapping_path).context("the k8s-datagen mapping")?,
    )?;
    let parts = PartitionConfig::new()
        .with_width_ms(DAY)
        .with_rollups(vec![5 * 60_000, HOUR]);
    Index::create_partitioned(&dir, mapping, EngineConfig::new(), parts)?.close()?;

    // Ingest through the partitioned engine (the façade's store), as `tidemark ingest`
    // does after parsing, sealing partitions as the stream moves past them.
    let config = EngineConfig::new()
        .with_derived_tsids(true)
        .with_durability(Durability::Interval(Duration::from_secs(1)));
    let mut store = PartitionedEngine::open(&dir, config)?;
    let mut computer = ds.tsid_computer().context("tsid computer")?;
    let mut tsids: Vec<Option<Tsid>> = vec![None; ds.series_count() as usize];
    let total = ds.total_docs();
    eprintln!(
        "rollup-bench: {total} k8s points ({} series x {} days at 10 s) into {}",
        a.series,
        a.days,
        dir.display()
    );
    let t0 = Instant::now();
    let mut ops = Vec::with_capacity(10_000);
    let mut created = 0u64;
    let mut flush = |ops: &mut Vec<Op>, store: &mut PartitionedEngine| -> Result<()> {
        for o in store.batch(std::mem::take(ops))? {
            match o {
                Outcome::Created { .. } => created += 1,
                other => bail!("unexpected outcome {other:?}"),
            }
        }
        Ok(())
    };
    for (k, r) in ds.records().enumerate() {
        let slot = tsids
            .get_mut(r.series as usize)
            .context("series number past the series count")?;
        let tsid = match slot {
            Some(t) => *t,
            None => *slot.insert(r.tsid(&mut computer).context("record tsid")?),
        };
        ops.push(Op::Create(metric_point(&r, tsid)));
        if ops.len() == 10_000 {
            flush(&mut ops, &mut store)?;
            if k % 1_000_000 < 10_000 {
                store.maintain()?;
            }
        }
    }
    flush(&mut ops, &mut store)?;
    store.refresh()?;
    store.maintain()?;
    let ingest_secs = t0.elapsed().as_secs_f64();
    let newest = store
        .partitions()
        .last()
        .map(|p| p.start_ms)
        .context("no partition")?;
    let raw_points = store.live_count();
    ensure!(raw_points == total, "stored {raw_points} of {total} points");
    store.close()?;

    let query = AggQuery {
        metric: a.metric.clone(),
        interval_millis: HOUR,
        ..AggQuery::default()
    };
    let raw_query = AggQuery {
        raw_only: true,
        ..query.clone()
    };
    let mut rows = Vec::new();
    for phase in ["newest partition active", "all partitions sealed"] {
        let mut index = Index::open(&dir)?;
        if phase == "all partitions sealed" {
            index.seal(newest)?;
        }
        let (raw_s, raw) = timed(a.reps, || Ok(index.aggregate(&raw_query)?))?;
        let (roll_s, rolled) = timed(a.reps, || Ok(index.aggregate(&query)?))?;
        let worst = compare(&rolled, &raw)?;
        ensure!(worst <= 1e-9, "{phase}: sums differ by {worst:e} relative");
        let (raw_bytes, rollup_bytes): (u64, Vec<(i64, u64)>) = {
            let parts = index.engine().partitions();
            let segs: u64 = index
                .engine()
                .segments()
                .iter()
                .map(|(p, _, _)| std::fs::metadata(p).map_or(0, |m| m.len()))
                .sum();
            let mut by_res: Vec<(i64, u64)> = Vec::new();
            for p in &parts {
                for (r, _, b) in &p.rollups {
                    match by_res.iter_mut().find(|x| x.0 == *r) {
                        Some(x) => x.1 += b,
                        None => by_res.push((*r, *b)),
                    }
                }
            }
            (segs, by_res)
        };
        eprintln!(
            "{phase}: raw {:.1} ms ({} rows read), rollups {:.2} ms ({} rollup rows, {} raw rows), {:.0}x, max relative sum difference {worst:e}",
            raw_s * 1e3,
            raw.raw_rows,
            roll_s * 1e3,
            rolled.rollup_rows,
            rolled.raw_rows,
            raw_s / roll_s
        );
        rows.push((
            phase,
            raw_s,
            roll_s,
            raw.raw_rows,
            rolled.rollup_rows,
            rolled.raw_rows,
            worst,
            raw_bytes,
            rollup_bytes,
        ));
        index.close()?;
    }

    let mut md = String::new();
    md.push_str(&format!(
        "# Rollups: an hourly average over {} days from rollups vs raw rows\n\n",
        a.days
    ));
    md.push_str(&format!(
        "Measured {} with `cargo xtask rollup-bench --days {} --series {} --reps {}` \
         ({} build, {} cores): {} k8s-shaped points ({} pod series, one point every \
         10 s, {} days, generated on the fly), ingested into a partitioned index \
         (`--partition 1d --rollups 5m,1h`) in {:.1} s, partitions sealed as the stream moved \
         past them. The query is `Index::aggregate` of `{}` (`avg`, `min`, `max`, `sum`, \
         `count` per hour, overall and per series) over the whole range, run {} times each \
         way in the same process; medians.\n\n",
        utc_date(),
        a.days,
        a.series,
        a.reps,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        total,
        a.series,
        a.days,
        ingest_secs,
        a.metric,
        a.reps
    ));
    md.push_str("| state | raw rows (median) | rollups (median) | speed-up | rows read raw | rollup rows read (+ raw rows) | answers |\n|---|---:|---:|---:|---:|---:|---|\n");
    for (phase, raw_s, roll_s, raw_rows, rollup_rows, rest, worst, _, _) in &rows {
        md.push_str(&format!(
            "| {phase} | {:.1} ms | {:.2} ms | {:.0}× | {raw_rows} | {rollup_rows} (+ {rest}) | {} |\n",
            raw_s * 1e3,
            roll_s * 1e3,
            raw_s / roll_s,
            if *worst == 0.0 {
                "identical (every bucket, every series, bit for bit)".to_owned()
            } else {
                format!("counts/min/max identical, sums within {worst:.1e} relative")
            }
        ));
    }
    if let Some((_, _, _, _, _, _, _, raw_bytes, by_res)) = rows.last() {
        md.push_str(&format!(
            "\nBytes on disk: raw segments {} bytes ({:.2} per point)",
            raw_bytes,
            *raw_bytes as f64 / raw_points as f64
        ));
        for (r, b) in by_res {
            md.push_str(&format!(
                "; rollup {} {} bytes ({:.3} per raw point)",
                if r % HOUR == 0 {
                    format!("{}h", r / HOUR)
                } else {
                    format!("{}m", r / 60_000)
                },
                b,
                *b as f64 / raw_points as f64
            ));
        }
        md.push_str(".\n");
    }
    md.push_str(
        "\nThe hourly query reads the 1 h rollup (the coarsest resolution dividing the interval) \
         of every sealed partition; an active partition is read raw, so with the newest day \
         active the speed-up is bounded by that day's share of the rows. Rollups hold, per \
         series and bucket, count/min/max/sum of every metric (and first/last/increase of \
         counters), computed from the deduplicated, merged rows of the partition in timestamp \
         order — so the per-series hourly sums are the same additions in the same order as the \
         raw scan, and the totals fold the series in tsid order on both paths.\n",
    );
    print!("{md}");
    if let Some(path) = &a.markdown {
        std::fs::write(path, &md).with_context(|| path.display().to_string())?;
    }
    Ok(())
}
