//! Builds a small partitioned index (two days of three hosts, a point a minute), seals
//! both days and exports them to a lake; then exports again, which skips both.
//!
//! `cargo run -p tidemark-lake --example export [LAKE_DIR]` (default: a temporary
//! directory). Point DuckDB or DataFusion at the files it lists.

use serde_json::json;
use tidemark::dedup::{EngineConfig, PartitionConfig};
use tidemark::{BulkItem, Index, Mapping};
use tidemark_lake::{ExportOptions, export};

const DAY: i64 = 86_400_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let lake = std::env::args_os()
        .nth(1)
        .map_or_else(|| tmp.path().join("lake"), Into::into);
    let mapping = Mapping::from_value(json!({"mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "cpu": {"type": "double", "time_series_metric": "gauge"},
        "requests": {"type": "long", "time_series_metric": "counter"}}}}))?;
    let parts = PartitionConfig::new().with_width_ms(DAY);
    let mut index = Index::create_partitioned(
        tmp.path().join("index"),
        mapping,
        EngineConfig::new(),
        parts,
    )?;
    let mut docs = Vec::new();
    for minute in 0..2 * 24 * 60 {
        for host in ["a", "b", "c"] {
            docs.push(BulkItem::create(json!({
                "@timestamp": minute * 60_000,
                "host": host,
                "cpu": (minute % 100) as f64 / 100.0,
                "requests": minute * 10,
            })));
        }
    }
    index.bulk(docs)?;
    index.seal(0)?;
    index.seal(DAY)?;

    let report = export(&index, &lake, &ExportOptions::default(), &mut |_| {})?;
    for p in &report.partitions {
        println!(
            "partition {}: {} rows, {} bytes, {} files",
            tidemark::format_time(p.start_ms),
            p.rows,
            p.bytes,
            p.files.len()
        );
        for f in &p.files {
            println!(
                "  {}: {} rows of {} shards, {} row groups",
                f.path,
                f.rows,
                f.shards.len(),
                f.row_groups
            );
        }
    }
    let again = export(&index, &lake, &ExportOptions::default(), &mut |_| {})?;
    println!(
        "again: {} partitions skipped, {} rows written",
        again.skipped(),
        again.rows()
    );
    println!("lake: {}", lake.display());
    Ok(())
}
