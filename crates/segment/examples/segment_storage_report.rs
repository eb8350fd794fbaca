//! Writes the k8s, otel and host datasets of `tidemark-datagen` as segments and prints the
//! storage report (bytes per document and per metric value, per component, against the
//! naive reference) and the id/dedup section sizes.
//!
//! `cargo run --release -p tidemark-segment --example segment_storage_report [-- STEPS]`
//! STEPS (default: the datasets' default hour) sets points = series × STEPS.

use std::time::Instant;

#[path = "../tests/support/datagen_points.rs"]
mod datagen_points;

use datagen_points::TsidCache;
use tidemark_datagen::{Dataset, Options};
use tidemark_segment::report::storage_report;
use tidemark_segment::{Segment, SegmentOptions, SegmentWriter};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let steps: Option<u64> = std::env::args().nth(1).map(|s| s.parse()).transpose()?;
    for name in ["k8s", "otel", "host"] {
        let base = Dataset::by_name(name, Options::default()).ok_or("dataset")?;
        let opts = match steps {
            Some(s) => Options::default().points(u64::from(base.series_count()) * s),
            None => Options::default(),
        };
        let ds = Dataset::by_name(name, opts).ok_or("dataset")?;
        let mut tsids = TsidCache::new(&ds)?;
        let block_rows: u32 = std::env::var("BLOCK_ROWS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1024);
        let mut writer = SegmentWriter::new(
            SegmentOptions::new()
                .with_block_rows(block_rows)
                .with_zstd_level(
                    std::env::var("ZSTD_LEVEL")
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(3),
                )
                .with_bloom(0.01)
                .with_id_index(true),
        )?;
        let t0 = Instant::now();
        for r in ds.records() {
            if r.duplicate {
                continue;
            }
            writer.push(tsids.point(&r)?)?;
        }
        let (bytes, meta) = writer.to_vec()?;
        let write_s = t0.elapsed().as_secs_f64();
        let seg = Segment::from_vec(bytes)?;
        let report = storage_report(&seg)?;
        println!(
            "## {name}: {} docs, {} series ({} metric values), written in {write_s:.2} s\n",
            meta.row_count, meta.series_count, report.metric_values
        );
        println!("{}", report.to_markdown());
    }
    Ok(())
}
