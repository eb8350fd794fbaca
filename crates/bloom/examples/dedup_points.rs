//! Deduplicate a stream of time-series points with a blocked bloom filter, persist the
//! filter, and read it back without copying.
//!
//! `cargo run --release -p tidemark-bloom --example dedup_points`

use tidemark_bloom::{BlockedBloomFilter, BlockedBloomFilterRef, ScalableBloomFilter};

/// The synthetic id of a point: 8-byte series hash, then the big-endian timestamp.
fn point_id(series: u64, ts_millis: i64) -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&series.to_le_bytes());
    id[8..].copy_from_slice(&ts_millis.to_be_bytes());
    id
}

fn main() -> Result<(), tidemark_bloom::Error> {
    // 1,000 series, 100 points each, and a shipper that retried every 10th point.
    let mut filter = BlockedBloomFilter::with_capacity(100_000, 0.001)?;
    let (mut new, mut retried) = (0u32, 0u32);
    for series in 0..1_000u64 {
        for i in 0..100i64 {
            let ts = 1_700_000_000_000 + i * 10_000;
            let sends = if i % 10 == 0 { 2 } else { 1 };
            for _ in 0..sends {
                if filter.insert(&point_id(series, ts)) {
                    new += 1;
                } else {
                    retried += 1;
                }
            }
        }
    }
    // "Maybe seen" counts the 10,000 retries plus the few false positives that a store
    // then verifies against its data (a bloom filter never misses a real retry).
    println!("new: {new}, maybe seen: {retried} (10000 retries + false positives)");
    println!(
        "filter: {} bytes, {:.2} bits/item, {} hashes, fill {:.1}%, estimated {} items, estimated rate {:.4}%",
        filter.size_bytes(),
        filter.num_bits() as f64 / f64::from(new),
        filter.num_hashes(),
        100.0 * filter.fill_ratio(),
        filter.estimated_len(),
        100.0 * filter.estimated_fpr()
    );

    // Persist it; a reader opens the bytes in place (a memory map works the same way).
    let bytes = filter.to_bytes();
    let view = BlockedBloomFilterRef::new(&bytes)?;
    assert!(view.contains(&point_id(7, 1_700_000_000_000)));
    println!("encoded: {} bytes, reopened without copying", bytes.len());

    // When the number of items is unknown: a scalable filter with BF.ADD semantics.
    let mut sbf = ScalableBloomFilter::new(1_000, 0.01)?;
    for i in 0..50_000u32 {
        sbf.add(&i.to_be_bytes())?;
    }
    for layer in sbf.layers() {
        println!(
            "layer: capacity {:>6}, items {:>6}, error {:.6}, {} bytes, {} hashes",
            layer.capacity, layer.items, layer.error_rate, layer.size_bytes, layer.num_hashes
        );
    }
    Ok(())
}
