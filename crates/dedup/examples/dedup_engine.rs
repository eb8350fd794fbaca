//! Ingests a stream of points with 30% retried duplicates under each dedup strategy,
//! refreshing every 20,000 points, and prints the dedup counters.
//!
//! `cargo run --release -p tidemark-dedup --example dedup_engine`

use std::time::{Duration, Instant};

use tidemark_dedup::{Durability, Engine, EngineConfig, Op, Outcome, Strategy};
use tidemark_segment::Point;
use tidemark_tsid::Tsid;

const SERIES: u64 = 200;
const POINTS: u64 = 200_000;

fn point(i: u64) -> Point {
    let series = i % SERIES;
    let mut bytes = [0u8; 20];
    bytes[..8].copy_from_slice(&series.to_be_bytes());
    bytes[8..16].copy_from_slice(&series.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
    let ts = 1_700_000_000_000 + (i / SERIES) as i64 * 10_000;
    Point::new(Tsid::from_bytes(bytes), ts)
        .dim("pod", format!("pod-{series}"))
        .gauge("cpu", (i % 97) as f64 / 97.0)
        .counter("bytes", i as i64)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for strategy in Strategy::ALL {
        let dir = tempfile::tempdir()?;
        let config = EngineConfig::new()
            .with_strategy(strategy)
            .with_refresh_rows(20_000)
            .with_durability(Durability::Interval(Duration::from_millis(200)));
        let mut engine = Engine::create(dir.path(), config)?;
        let start = Instant::now();
        let (mut created, mut conflicts) = (0u64, 0u64);
        let mut batch = Vec::with_capacity(1000);
        for i in 0..POINTS {
            batch.push(Op::Create(point(i)));
            // A shipper retries 30% of points, some time later.
            if i % 10 < 3 && i >= 5_000 {
                batch.push(Op::Create(point(i - 5_000)));
            }
            if batch.len() >= 1000 {
                for o in engine.batch(batch.drain(..))? {
                    match o {
                        Outcome::Created { .. } => created += 1,
                        Outcome::Conflict { .. } => conflicts += 1,
                        other => return Err(format!("unexpected {other:?}").into()),
                    }
                }
            }
        }
        for o in engine.batch(batch.drain(..))? {
            match o {
                Outcome::Created { .. } => created += 1,
                _ => conflicts += 1,
            }
        }
        engine.refresh()?;
        let elapsed = start.elapsed();
        let s = engine.stats();
        println!(
            "{:>12}: {created} created, {conflicts} conflicts, {} segments, {:.0} ops/s",
            strategy.name(),
            engine.segment_count(),
            (created + conflicts) as f64 / elapsed.as_secs_f64()
        );
        println!(
            "{:>12}  checks {} live-map hits {} pruned by time {} series-range negatives {} \
             bloom negatives {} false positives {} true duplicates {} verifications {} ({} µs)",
            "",
            s.checks,
            s.live_map_hits,
            s.segments_pruned_by_time,
            s.series_range_negatives,
            s.bloom_negatives,
            s.false_positives,
            s.true_duplicates,
            s.verifications,
            s.verification_nanos / 1000
        );
        assert_eq!(engine.live_count(), POINTS);
    }
    Ok(())
}
