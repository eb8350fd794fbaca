//! Appends in-order points of known series through the series-ref API and prints what
//! happened: a small, deterministic workload for instruction counts under
//! `valgrind --tool=callgrind`, where a shared machine's load does not move the figures.
//!
//! ```text
//! cargo run --release -p tidemark-dedup --example append_ingest -- [STRATEGY] [SERIES] [POINTS] [METRICS] [REFRESH_ZSTD_LEVEL]
//! ```
//! Defaults: `series-range`, 2,000 series, 200,000 points, 8 metrics (4 gauges, 4 counters),
//! the engine's refresh zstd level.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tidemark_dedup::{AppendBatch, ColumnKind, Engine, EngineConfig, Outcome, Strategy};
use tidemark_segment::{Dim, MetricValue};
use tidemark_tsid::Tsid;

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let strategy: Strategy = args
        .first()
        .map_or("series-range", String::as_str)
        .parse()?;
    let series: u64 = args.get(1).map_or(Ok(2_000), |s| s.parse())?;
    let points: u64 = args.get(2).map_or(Ok(200_000), |s| s.parse())?;
    let metrics: usize = args.get(3).map_or(Ok(8), |s| s.parse())?;
    // The refresh zstd level; the engine's default when not given.
    let refresh_level: Option<i32> = args.get(4).map(|s| s.parse()).transpose()?;
    let dir = tempfile::tempdir()?;
    let mut config = EngineConfig::new()
        .with_strategy(strategy)
        .with_durability(tidemark_dedup::Durability::Interval(
            std::time::Duration::from_secs(1),
        ))
        .with_derived_tsids(true);
    if let Some(level) = refresh_level {
        config = config.with_zstd_levels(level, 3);
    }
    let mut e = Engine::create(dir.path(), config)?;
    let mut refs = Vec::new();
    for s in 0..series {
        let mut b = [0u8; 20];
        b[..4].copy_from_slice(&((s / 100) as u32).to_be_bytes());
        b[4..12].copy_from_slice(&mix(s).to_le_bytes());
        b[12..20].copy_from_slice(&mix(s + 1).to_le_bytes());
        let dims: Vec<(String, Dim)> = vec![
            ("pod".into(), format!("pod-{s}").into()),
            ("ns".into(), format!("ns-{}", s % 20).into()),
        ];
        refs.push(e.series(Tsid::from_bytes(b), dims)?);
    }
    let mut columns = Vec::new();
    for m in 0..metrics {
        let gauge = m % 2 == 0;
        let kind = if gauge {
            ColumnKind::Gauge
        } else {
            ColumnKind::Counter
        };
        columns.push((e.column(&format!("m{m}"), kind)?, gauge));
    }
    let mut batch = AppendBatch::new();
    let mut values = Vec::new();
    let (mut created, mut other) = (0u64, 0u64);
    for i in 0..points {
        let s = i % series;
        let step = (i / series) as i64;
        values.clear();
        for (k, &(c, gauge)) in columns.iter().enumerate() {
            values.push((
                c,
                if gauge {
                    MetricValue::Gauge((mix(i ^ k as u64) % 10_000) as f64 / 100.0)
                } else {
                    MetricValue::Counter(step * 1_000 + (mix(s ^ k as u64) % 1_000) as i64)
                },
            ));
        }
        batch.create(refs[s as usize], 1_700_000_000_000 + step * 10_000, &values);
        if batch.len() == 1_000 || i + 1 == points {
            for o in e.append(&batch)? {
                match o {
                    Outcome::Created { .. } => created += 1,
                    _ => other += 1,
                }
            }
            batch.clear();
        }
    }
    e.refresh()?;
    let bytes: u64 = e
        .segments()
        .iter()
        .map(|(p, _, _)| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    println!(
        "{}: {points} points of {series} series, {metrics} metrics: {created} created, {other} other; {} checks, {} segments, {bytes} bytes",
        strategy.name(),
        e.stats().checks,
        e.segment_count()
    );
    Ok(())
}
