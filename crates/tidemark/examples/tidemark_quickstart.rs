//! Create an index from a mapping, ingest documents twice (the second time, every one is
//! a duplicate), query them and print the disk usage.
//!
//! `cargo run -p tidemark --example tidemark_quickstart`

use serde_json::json;
use tidemark::{Action, AggQuery, Index, Mapping, Query};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mapping = Mapping::from_value(json!({
        "settings": {"index": {"mode": "time_series"}},
        "mappings": {"properties": {
            "@timestamp": {"type": "date"},
            "host": {"properties": {"name": {"type": "keyword", "time_series_dimension": true}}},
            "cpu": {"type": "double", "time_series_metric": "gauge"},
            "status": {"type": "keyword"}
        }}
    }))?;
    let mut index = Index::create(dir.path().join("metrics"), mapping)?;

    // Three hosts, six readings each, 10 s apart: NDJSON as a shipper would send it.
    let mut ndjson = String::new();
    for step in 0..6i64 {
        for (h, host) in ["web-1", "web-2", "db-1"].iter().enumerate() {
            let doc = json!({"@timestamp": 1_764_460_800_000 + step * 10_000,
                             "host": {"name": host}, "cpu": (h as f64 + 1.0) * 0.1 * step as f64,
                             "status": "ok"});
            ndjson.push_str(&doc.to_string());
            ndjson.push('\n');
        }
    }
    let first = index.ingest_ndjson(ndjson.as_bytes(), Action::Create)?;
    println!(
        "first ingest:  {} created, {} duplicates",
        first.counts.created, first.counts.duplicates
    );
    // A retrying shipper sends everything again: nothing is stored twice.
    let second = index.ingest_ndjson(ndjson.as_bytes(), Action::Create)?;
    println!(
        "second ingest: {} created, {} duplicates",
        second.counts.created, second.counts.duplicates
    );

    let hits = index.search(&Query {
        filters: vec![("host.name".into(), "db-1".into())],
        limit: Some(2),
        ..Query::default()
    })?;
    for hit in &hits {
        println!("{hit}");
    }
    let agg = index.aggregate(&AggQuery {
        metric: "cpu".into(),
        interval_millis: 60_000,
        from: None,
        to: None,
        filters: Vec::new(),
        ..AggQuery::default()
    })?;
    for b in &agg.buckets {
        // Had the retries been stored, count would be 36 and every series counted twice.
        println!(
            "{}: count {} avg {:.3} max {:.3}",
            tidemark::format_time(b.key),
            b.count,
            b.avg(),
            b.max
        );
    }

    index.refresh()?;
    let usage = index.disk_usage()?;
    println!(
        "{} documents, {} bytes on disk, {:.1} bytes per document",
        usage.documents,
        usage.total_bytes,
        usage.bytes_per_document()
    );
    index.close()?;
    Ok(())
}
