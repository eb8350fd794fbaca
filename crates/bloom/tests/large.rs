//! Filters over 4 billion bits: 64-bit indexing reaches the whole array and the rate
//! matches the model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tidemark_bloom::{BlockedBloomFilter, BloomFilter, Filter, Layout};

const NUM_BITS: u64 = 5 << 30; // 5 Gib = 640 MiB, past the 32-bit range
const ITEMS: u64 = 10_000_000;
const ABSENT: u64 = 1_000_000;

fn check<L: Layout>(mut f: Filter<L>) {
    for i in 0..ITEMS {
        f.insert(&i.to_le_bytes());
    }
    // Bits past 2^32 are set in proportion to their share of the array.
    let high_words = &f.as_words()[(1usize << 32) / 64..];
    let high: u64 = high_words.iter().map(|w| u64::from(w.count_ones())).sum();
    let share = high as f64 / f.count_ones() as f64;
    let expected = (NUM_BITS - (1 << 32)) as f64 / NUM_BITS as f64;
    assert!(
        (share / expected - 1.0).abs() < 0.02,
        "{share} vs {expected}"
    );
    for i in (0..ITEMS).step_by(997) {
        assert!(f.contains(&i.to_le_bytes()));
    }
    let hits = (ITEMS..ITEMS + ABSENT)
        .filter(|i| f.contains(&i.to_le_bytes()))
        .count();
    let rate = hits as f64 / ABSENT as f64;
    let model = f.model_fpr(ITEMS);
    assert!(
        (rate / model - 1.0).abs() < 0.1,
        "measured {rate}, model {model}"
    );
}

#[test]
fn standard_filter_over_four_billion_bits_keeps_its_rate() {
    check(BloomFilter::with_shape(NUM_BITS, 1).unwrap());
}

#[test]
fn blocked_filter_over_four_billion_bits_keeps_its_rate() {
    check(BlockedBloomFilter::with_shape(NUM_BITS, 1).unwrap());
}
