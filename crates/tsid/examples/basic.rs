//! Series ids, synthetic ids and event fingerprints for a few documents.
//!
//! Run with `cargo run -p tidemark-tsid --example basic`.

use std::num::NonZeroU32;

use serde_json::json;
use tidemark_tsid::{
    FingerprintBuilder, FingerprintMethod, IdEncoding, SyntheticId, TimestampPrefix, TsidBuilder,
    uuid_v4, uuid_v7,
};

/// Shards to spread series over in this example.
const SHARDS: NonZeroU32 = match NonZeroU32::new(4) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};

fn main() -> Result<(), tidemark_tsid::Error> {
    let mut tsids = TsidBuilder::new()
        .dimensions(["host.name", "region"])
        .ip_dimension("host.ip")
        .build()?;

    // Two retries of one data point (different key order and nesting) and
    // a second metric of the same series at the same instant.
    let docs = [
        json!({"@timestamp": 1_700_000_000_000_i64, "host": {"name": "web-1", "ip": "10.0.0.1"},
               "region": "eu-west-1", "cpu": 0.42}),
        json!({"cpu": 0.42, "region": "eu-west-1", "host.ip": "10.0.0.1", "host.name": "web-1",
               "@timestamp": 1_700_000_000_000_i64}),
        json!({"@timestamp": 1_700_000_000_000_i64, "host": {"name": "web-1", "ip": "10.0.0.1"},
               "region": "eu-west-1", "mem": 2048}),
    ];
    println!("series ids and synthetic ids:");
    for doc in &docs {
        let ts = doc["@timestamp"].as_i64().unwrap_or(0);
        let id = tsids.synthetic_id(doc, ts)?;
        println!(
            "  tsid {}  _id {}  shard {}/{SHARDS}",
            id.tsid(),
            id,
            id.shard(SHARDS)
        );
    }
    let first = tsids.synthetic_id(&docs[0], 1_700_000_000_000)?;
    let parsed = SyntheticId::parse(&first.to_string())?;
    println!(
        "parsed back: tsid {} at {} ms",
        parsed.tsid(),
        parsed.ts_millis()
    );

    // Batch: the output Vec is reused; nothing is allocated per document.
    let mut out = Vec::with_capacity(docs.len());
    tsids.tsid_batch(&docs, &mut out)?;
    println!("batch: {} tsids, {} distinct", out.len(), {
        let mut d = out.clone();
        d.dedup();
        d.len()
    });

    // Bad input is an error naming the field.
    if let Err(e) = tsids.tsid(&json!({"host": {"name": ["a", "b"]}})) {
        println!("rejected: {e}");
    }

    // Events with no natural key: a time-prefixed fingerprint.
    let event = json!({"message": "user alice logged in", "user": {"name": "alice"}});
    println!("event ids:");
    for method in FingerprintMethod::ALL {
        let mut fp = FingerprintBuilder::new(method)
            .fields(["message", "user.name"])
            .encoding(IdEncoding::Base64Url)
            .timestamp_prefix(TimestampPrefix::Seconds)
            .build()?;
        println!(
            "  {:<16} {}",
            method.name(),
            fp.fingerprint(&event, 1_700_000_000_123)?
        );
    }
    println!("  {:<16} {}", "uuid v4", uuid_v4());
    println!("  {:<16} {}", "uuid v7", uuid_v7());
    Ok(())
}
