//! Engine ingest through the series-ref API (`Engine::series`, `Engine::column`,
//! `Engine::append`) with the system allocator: in-order k8s-shaped points (2,000 pods,
//! 8 metrics: 4 gauges, 4 counters, every 10 s) and OTel-shaped points (21,000 series,
//! one gauge, every 60 s), batches of 1,000 `create`s, a refresh every 100,000 points,
//! WAL fsync at most every 100 ms, and a final refresh; `series-range` against `none`
//! (no dedup check: the physical limit) and the other strategies.
//!
//! `cargo bench -p tidemark-dedup --bench append`; results in `docs/results/dedup.md`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput};
use tidemark_dedup::{
    AppendBatch, ColumnKind, ColumnRef, Durability, Engine, EngineConfig, SeriesRef, Strategy,
};
use tidemark_segment::{Dim, MetricValue};
use tidemark_tsid::Tsid;

const BATCH: usize = 1_000;

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    series: u64,
    points: u64,
    interval_ms: i64,
    gauges: usize,
    counters: usize,
}

const K8S: Shape = Shape {
    name: "k8s-8-metrics",
    series: 2_000,
    points: 400_000,
    interval_ms: 10_000,
    gauges: 4,
    counters: 4,
};

const OTEL: Shape = Shape {
    name: "otel-1-metric",
    series: 21_000,
    points: 420_000,
    interval_ms: 60_000,
    gauges: 1,
    counters: 0,
};

fn tsid(s: u64) -> Tsid {
    let mut b = [0u8; 20];
    b[..4].copy_from_slice(&((s / 100) as u32).to_be_bytes());
    b[4..12].copy_from_slice(&mix(s).to_le_bytes());
    b[12..20].copy_from_slice(&mix(s + 1).to_le_bytes());
    Tsid::from_bytes(b)
}

fn config(strategy: Strategy) -> EngineConfig {
    EngineConfig::new()
        .with_strategy(strategy)
        .with_durability(Durability::Interval(Duration::from_millis(100)))
        .with_derived_tsids(true)
}

/// Registers the shape's series and columns, then appends every point in order.
fn ingest(e: &mut Engine, shape: Shape) {
    let series: Vec<SeriesRef> = (0..shape.series)
        .map(|s| {
            let dims: Vec<(String, Dim)> = vec![
                ("k8s.pod.name".into(), format!("pod-{s}").into()),
                ("k8s.namespace.name".into(), format!("ns-{}", s % 20).into()),
                ("k8s.node.name".into(), format!("node-{}", s % 50).into()),
            ];
            e.series(tsid(s), dims).unwrap()
        })
        .collect();
    let mut columns: Vec<(ColumnRef, bool)> = Vec::new();
    for g in 0..shape.gauges {
        columns.push((
            e.column(&format!("gauge.{g}"), ColumnKind::Gauge).unwrap(),
            true,
        ));
    }
    for c in 0..shape.counters {
        let name = format!("counter.{c}");
        columns.push((e.column(&name, ColumnKind::Counter).unwrap(), false));
    }
    let mut batch = AppendBatch::new();
    let mut values = Vec::with_capacity(columns.len());
    for i in 0..shape.points {
        let s = i % shape.series;
        let step = (i / shape.series) as i64;
        values.clear();
        for (k, &(c, gauge)) in columns.iter().enumerate() {
            let v = if gauge {
                MetricValue::Gauge((mix(i ^ k as u64) % 10_000) as f64 / 100.0)
            } else {
                MetricValue::Counter(step * 1_000 + (mix(s ^ k as u64) % 1_000) as i64)
            };
            values.push((c, v));
        }
        let Some(&sr) = series.get(s as usize) else {
            continue;
        };
        batch.create(sr, 1_700_000_000_000 + step * shape.interval_ms, &values);
        if batch.len() == BATCH {
            black_box(e.append(&batch).unwrap());
            batch.clear();
        }
    }
    if !batch.is_empty() {
        black_box(e.append(&batch).unwrap());
    }
    e.refresh().unwrap();
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("append");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8));
    for shape in [K8S, OTEL] {
        group.throughput(Throughput::Elements(shape.points));
        for strategy in [
            Strategy::None,
            Strategy::SeriesRange,
            Strategy::Bloom,
            Strategy::Inverted,
        ] {
            group.bench_function(BenchmarkId::new(shape.name, strategy.name()), |b| {
                b.iter_batched(
                    || {
                        let dir = tempfile::tempdir().unwrap();
                        let e = Engine::create(dir.path(), config(strategy)).unwrap();
                        (dir, e)
                    },
                    |(dir, mut e)| {
                        ingest(&mut e, shape);
                        (dir, e)
                    },
                    BatchSize::PerIteration,
                );
            });
        }
    }
    group.finish();
}

criterion::criterion_group!(benches, bench);
criterion::criterion_main!(benches);
