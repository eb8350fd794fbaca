//! A Parquet-compatible split-block filter over time-series keys: sizing, one hash per
//! key, the zero-copy view, and the Parquet bitset.
//!
//! `cargo run --release -p tidemark-bloom --example split_block`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tidemark_bloom::{Hash64, SplitBlockBloomFilter, SplitBlockBloomFilterRef};

fn main() -> Result<(), tidemark_bloom::Error> {
    let n = 200_000u64;
    // XXH64 seed 0 is Parquet's hash: the bitset below can go into a Parquet file.
    let mut filter = SplitBlockBloomFilter::with_rate(n, 0.01)?.with_hasher(Hash64::PARQUET);
    let key = |series: u64, ts: i64| {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&series.to_le_bytes());
        k[8..].copy_from_slice(&ts.to_be_bytes());
        k
    };
    for i in 0..n {
        filter.insert(&key(i % 1_000, 1_700_000_000_000 + i as i64));
    }
    let absent = (0..100_000u64)
        .filter(|&i| filter.contains(&key(5_000 + i, 0)))
        .count();
    println!(
        "{} blocks, {:.2} bits/key, fill {:.3}, estimated {} items, measured rate {:.3}%",
        filter.num_blocks(),
        filter.num_bits() as f64 / n as f64,
        filter.fill_ratio(),
        filter.estimated_len(),
        absent as f64 / 1_000.0
    );

    // Stable bytes, probed in place (as a segment reader would over a memory map).
    let bytes = filter.to_bytes();
    let view = SplitBlockBloomFilterRef::new(&bytes)?;
    assert!(view.contains(&key(7, 1_700_000_000_007)));
    let mut answers = Vec::new();
    view.contains_batch(&[key(7, 1_700_000_000_007), key(9_999, 0)], &mut answers);
    println!("batch answers: {answers:?}");

    // Parquet's bitset, and back.
    let bitset = view.bitset_bytes();
    let back = SplitBlockBloomFilter::from_bitset_bytes(bitset, Hash64::PARQUET)?;
    assert!(back.contains(&key(7, 1_700_000_000_007)));
    println!(
        "{} bytes encoded, {} of them the Parquet bitset",
        bytes.len(),
        bitset.len()
    );
    Ok(())
}
