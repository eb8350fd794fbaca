//! `cargo xtask partition-soak`: memory as time partitions accumulate and retention drops
//! them. Generates k8s points on the fly (retries and late points included), ingests them
//! through a `PartitionedEngine` (1 h partitions by default, 5 m rollups, a retention of
//! 6 h), runs `maintain` (seal, rollups, retention) every `--every` points and records the
//! peak and current resident set, partitions alive and dropped. Fails if a point is lost or
//! a retry stored.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use tidemark_datagen::{Dataset, Options};
use tidemark_dedup::{
    Durability, EngineConfig, Op, Outcome, PartitionConfig, PartitionedEngine, Rejection,
};
use tidemark_tsid::Tsid;

use crate::soak::rss_parts;
use crate::storage_compare::metric_point;

const MIN: i64 = 60_000;

pub fn run(args: &[String]) -> Result<()> {
    let mut points = 5_000_000u64;
    let mut every = 1_000_000u64;
    let mut width = 60 * MIN;
    let mut retention = 6 * 60 * MIN;
    let mut series = 200u32;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--points" => points = value()?.parse().context("--points")?,
            "--series" => series = value()?.parse().context("--series")?,
            "--every" => every = value()?.parse().context("--every")?,
            "--width-min" => width = value()?.parse::<i64>().context("--width-min")? * MIN,
            "--retention-min" => {
                retention = value()?.parse::<i64>().context("--retention-min")? * MIN
            }
            other => bail!("unknown partition-soak option {other:?}"),
        }
    }
    ensure!(
        points > 0 && every > 0,
        "--points and --every must be positive"
    );
    let ds = Dataset::k8s(
        Options::default()
            .series(series)
            .points(points)
            .dup_rate(0.02)
            .late_rate(0.01),
    );
    let out = crate::project_root().join("target/xtask/partition-soak");
    std::fs::create_dir_all(&out)?;
    let tmp = tempfile::tempdir_in(&out)?;
    let config = EngineConfig::new()
        .with_derived_tsids(true)
        .with_durability(Durability::Interval(Duration::from_secs(1)));
    let parts = PartitionConfig::new()
        .with_width_ms(width)
        .with_retention_ms(Some(retention))
        .with_seal_grace_ms(10 * MIN)
        .with_rollups(vec![5 * MIN]);
    let mut store = PartitionedEngine::create(tmp.path(), config, parts)?;
    let mut computer = ds.tsid_computer().context("tsid computer")?;
    let mut tsids: Vec<Option<Tsid>> = vec![None; ds.series_count() as usize];
    let total = ds.total_docs();
    eprintln!(
        "partition-soak: {total} k8s points ({} retries), {} min partitions, {} min retention",
        total - ds.unique_docs(),
        width / MIN,
        retention / MIN
    );
    let (mut created, mut dups, mut too_old) = (0u64, 0u64, 0u64);
    let mut ops = Vec::with_capacity(10_000);
    let mut rows = Vec::new();
    let start = Instant::now();
    let mut last = Instant::now();
    let mut flush = |ops: &mut Vec<Op>, store: &mut PartitionedEngine| -> Result<()> {
        for o in store.batch(std::mem::take(ops))? {
            match o {
                Outcome::Created { .. } => created += 1,
                Outcome::Conflict { .. } => dups += 1,
                Outcome::Rejected {
                    reason: Rejection::TooOld { .. },
                    ..
                } => too_old += 1,
                other => bail!("unexpected outcome {other:?}"),
            }
        }
        Ok(())
    };
    for (k, r) in ds.records().enumerate() {
        let slot = tsids.get_mut(r.series as usize).context("series number")?;
        let tsid = match slot {
            Some(t) => *t,
            None => *slot.insert(r.tsid(&mut computer).context("record tsid")?),
        };
        ops.push(Op::Create(metric_point(&r, tsid)));
        let sent = k as u64 + 1;
        if ops.len() == 10_000 || sent % every == 0 || sent == total {
            flush(&mut ops, &mut store)?;
        }
        if sent % every == 0 || sent == total {
            store.maintain()?;
            let (hwm, rss, anon, file) = rss_parts()?;
            let s = store.partition_stats();
            let secs = last.elapsed().as_secs_f64().max(1e-9);
            last = Instant::now();
            rows.push(format!(
                "{sent:>11} {:>10.1} {:>8.1} ({:>6.1} + {:>6.1}) {:>10} {:>8} {:>9.0}",
                hwm as f64 / 1048576.0,
                rss as f64 / 1048576.0,
                anon as f64 / 1048576.0,
                file as f64 / 1048576.0,
                store.partitions().len(),
                s.dropped_partitions,
                (every.min(sent)) as f64 / secs
            ));
        }
    }
    flush(&mut ops, &mut store)?;
    store.refresh()?;
    let s = store.partition_stats();
    let live = store.live_count();
    ensure!(
        created + dups + too_old == total,
        "{created} created + {dups} duplicates + {too_old} too old != {total} sent"
    );
    ensure!(
        live == created - s.dropped_rows,
        "{live} live, expected {created} created - {} dropped",
        s.dropped_rows
    );
    println!("     points peak RSS MB   RSS MB (heap + files) partitions  dropped  points/s");
    for r in &rows {
        println!("{r}");
    }
    println!(
        "{total} points in {:.1} s: {created} created, {dups} duplicates, {too_old} refused as \
         too old; {} partitions dropped by retention ({} rows); {live} live",
        start.elapsed().as_secs_f64(),
        s.dropped_partitions,
        s.dropped_rows
    );
    store.close()?;
    Ok(())
}
