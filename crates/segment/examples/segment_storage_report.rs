//! Writes the k8s and otel datasets of `tidemark-datagen` as segments and prints the
//! storage report (bytes per document and per metric value, per component, against the
//! naive reference) and the id/dedup section sizes.
//!
//! `cargo run --release -p tidemark-segment --example segment_storage_report [-- STEPS]`
//! STEPS (default: the datasets' default hour) sets points = series × STEPS.

use std::time::Instant;

use tidemark_datagen::{Dataset, Dim as GenDim, MetricVal, Options};
use tidemark_segment::report::storage_report;
use tidemark_segment::{Dim, MetricValue, Point, Segment, SegmentOptions, SegmentWriter};

fn to_point(r: &tidemark_datagen::Record, tsid: tidemark_tsid::Tsid) -> Point {
    Point {
        tsid,
        dims: r
            .dims
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    GenDim::Keyword(s) => Dim::Keyword(s.clone()),
                    GenDim::Int(i) => Dim::Int(*i),
                };
                ((*k).to_owned(), v)
            })
            .collect(),
        ts_millis: r.ts_millis,
        metrics: r
            .metrics
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    MetricVal::Gauge(g) => MetricValue::Gauge(*g),
                    MetricVal::Counter(c) => MetricValue::Counter(*c),
                };
                ((*k).to_owned(), v)
            })
            .collect(),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let steps: Option<u64> = std::env::args().nth(1).map(|s| s.parse()).transpose()?;
    for name in ["k8s", "otel"] {
        let base = Dataset::by_name(name, Options::default()).ok_or("dataset")?;
        let opts = match steps {
            Some(s) => Options::default().points(u64::from(base.series_count()) * s),
            None => Options::default(),
        };
        let ds = Dataset::by_name(name, opts).ok_or("dataset")?;
        let mut tsids = ds.tsid_computer()?;
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
        let mut tsid_cache = Vec::new();
        for r in ds.records() {
            if r.duplicate {
                continue;
            }
            let i = r.series as usize;
            if tsid_cache.len() <= i {
                tsid_cache.resize(i + 1, None);
            }
            let tsid = match tsid_cache.get(i).copied().flatten() {
                Some(t) => t,
                None => {
                    let t = r.tsid(&mut tsids)?;
                    if let Some(slot) = tsid_cache.get_mut(i) {
                        *slot = Some(t);
                    }
                    t
                }
            };
            writer.push(to_point(&r, tsid))?;
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
