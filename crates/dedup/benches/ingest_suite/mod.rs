//! The engine-level ingest suite shared by the `ingest` (system allocator) and
//! `ingest_mimalloc` benches: typed points (no JSON) for the dedup strategies on three
//! streams: in-order, 30% retried duplicates, 10% late out-of-order points, and a
//! disordered stream (30% retried, a third of the retries before their originals). Batches of
//! 1,000 operations; a refresh every 50,000 buffered points; WAL fsync at most every
//! 100 ms.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput};
use tidemark_dedup::{Durability, Engine, EngineConfig, Op, Strategy};
use tidemark_segment::Point;
use tidemark_tsid::Tsid;

const SERIES: u64 = 1_000;
const POINTS: u64 = 200_000;
const BATCH: usize = 1_000;

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Point `i` of an in-order stream: series `i % SERIES`, one point per series every 10 s.
fn point(i: u64) -> Point {
    let s = i % SERIES;
    let mut b = [0u8; 20];
    b[..4].copy_from_slice(&((s / 100) as u32).to_be_bytes());
    b[4..12].copy_from_slice(&mix(s).to_le_bytes());
    b[12..20].copy_from_slice(&mix(s + 1).to_le_bytes());
    Point::new(
        Tsid::from_bytes(b),
        1_700_000_000_000 + (i / SERIES) as i64 * 10_000,
    )
    .dim("pod", format!("pod-{s}"))
    .dim("ns", "default")
    .gauge("cpu", (mix(i) % 1000) as f64 / 1000.0)
    .counter("bytes", i as i64 * 17)
}

#[derive(Clone, Copy, Debug)]
enum Stream {
    InOrder,
    Retries30,
    Late10,
    Disordered,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::InOrder => "in-order",
            Stream::Retries30 => "30%-retries",
            Stream::Late10 => "10%-late",
            Stream::Disordered => "disordered",
        }
    }

    /// The operations, in arrival order.
    fn ops(self) -> Vec<Op> {
        let mut out = Vec::new();
        match self {
            Stream::InOrder => out.extend((0..POINTS).map(|i| Op::Create(point(i)))),
            Stream::Retries30 => {
                for i in 0..POINTS {
                    out.push(Op::Create(point(i)));
                    // 30% of points are sent again, 1 to 20,000 points later (a retry
                    // may reach a refreshed segment).
                    if mix(i) % 10 < 3 {
                        let lag = 1 + mix(i ^ 0xabc) % 20_000;
                        if let Some(j) = i.checked_sub(lag) {
                            out.push(Op::Create(point(j)));
                        }
                    }
                }
            }
            Stream::Late10 => {
                // 10% of points arrive 1 to 20,000 points late.
                let mut late: Vec<(u64, u64)> = Vec::new();
                for i in 0..POINTS {
                    if mix(i) % 10 == 0 {
                        late.push((i + 1 + mix(i ^ 0x5eed) % 20_000, i));
                    } else {
                        out.push(Op::Create(point(i)));
                    }
                    late.retain(|&(due, j)| {
                        if due <= i {
                            out.push(Op::Create(point(j)));
                            false
                        } else {
                            true
                        }
                    });
                }
                late.sort_unstable();
                out.extend(late.into_iter().map(|(_, j)| Op::Create(point(j))));
            }
            Stream::Disordered => {
                // 30% of points retried, a third of the retries (10% of points) sent
                // 1 to 20,000 points *before* their original: a series' range in a
                // refreshed segment then reaches past points still to come.
                let mut arrivals: Vec<(u64, u64, u64)> = Vec::new();
                for i in 0..POINTS {
                    arrivals.push((i, 1, i));
                    if mix(i) % 10 < 3 {
                        let lag = 1 + mix(i ^ 0xabc) % 20_000;
                        let at = if mix(i ^ 0xd15) % 3 == 0 {
                            i.saturating_sub(lag)
                        } else {
                            i + lag
                        };
                        arrivals.push((at, 0, i));
                    }
                }
                arrivals.sort_unstable();
                out.extend(arrivals.into_iter().map(|(_, _, j)| Op::Create(point(j))));
            }
        }
        out
    }
}

fn config(strategy: Strategy) -> EngineConfig {
    EngineConfig::new()
        .with_strategy(strategy)
        .with_refresh_rows(50_000)
        .with_durability(Durability::Interval(Duration::from_millis(100)))
}

fn ingest(engine: &mut Engine, ops: Vec<Op>) {
    let mut ops = ops.into_iter();
    loop {
        let batch: Vec<Op> = ops.by_ref().take(BATCH).collect();
        if batch.is_empty() {
            break;
        }
        black_box(engine.batch(batch).unwrap());
    }
    engine.refresh().unwrap();
}

/// Runs the suite as criterion group `group`; prints the dedup counters first when
/// `counters` is set.
pub fn bench(c: &mut Criterion, group: &str, counters: bool) {
    let mut group = c.benchmark_group(group);
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8));
    for stream in [
        Stream::InOrder,
        Stream::Retries30,
        Stream::Late10,
        Stream::Disordered,
    ] {
        let ops = stream.ops();
        group.throughput(Throughput::Elements(ops.len() as u64));
        for strategy in [
            Strategy::SeriesRange,
            Strategy::Bloom,
            Strategy::Inverted,
            Strategy::SeriesRangeBloom,
        ] {
            if counters {
                let dir = tempfile::tempdir().unwrap();
                let mut e = Engine::create(dir.path(), config(strategy)).unwrap();
                ingest(&mut e, ops.clone());
                let s = e.stats();
                println!(
                    "{} {}: ops {} live {} segments {} | checks {} live-map hits {} \
                     newest negatives {} pruned-by-time {} series-range negatives {} slot negatives {} bloom negatives {} \
                     false positives {} ({:.4}% of checks) true duplicates {} \
                     verifications {} ({} µs)",
                    stream.name(),
                    strategy.name(),
                    ops.len(),
                    e.live_count(),
                    e.segment_count(),
                    s.checks,
                    s.live_map_hits,
                    s.newest_negatives,
                    s.segments_pruned_by_time,
                    s.series_range_negatives,
                    s.slot_negatives,
                    s.bloom_negatives,
                    s.false_positives,
                    100.0 * s.false_positive_rate(),
                    s.true_duplicates,
                    s.verifications,
                    s.verification_nanos / 1000,
                );
            }
            group.bench_function(BenchmarkId::new(stream.name(), strategy.name()), |b| {
                b.iter_batched(
                    || {
                        let dir = tempfile::tempdir().unwrap();
                        let e = Engine::create(dir.path(), config(strategy)).unwrap();
                        (dir, e, ops.clone())
                    },
                    |(dir, mut e, ops)| {
                        ingest(&mut e, ops);
                        (dir, e)
                    },
                    BatchSize::PerIteration,
                );
            });
        }
    }
    group.finish();
}
