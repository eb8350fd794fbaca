//! The split-block filter and the scalable filter of split-block layers: no false
//! negatives for every hash (also after union, growth and a byte round trip), batch
//! lookups equal single ones, measured rates with fixed seeds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use tidemark_bloom::{
    Error, Hash64, ScalableBloomFilter, ScalableBloomFilterRef, ScalableLayout, Seed,
    SplitBlockBloomFilter, SplitBlockBloomFilterRef,
};

fn items() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..24), 0..300)
}

fn rate() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.5), Just(0.1), Just(0.01), Just(0.001), 1e-6..0.9f64]
}

fn hasher() -> impl Strategy<Value = Hash64> {
    prop_oneof![
        any::<u64>().prop_map(|seed| Hash64::Xxh3 { seed }),
        any::<u64>().prop_map(|seed| Hash64::Xxh64 { seed }),
        (any::<u64>(), any::<u64>()).prop_map(|(k0, k1)| Hash64::Sip13 {
            key: Seed::new(k0, k1)
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn split_block_has_no_false_negatives(
        a in items(), b in items(), cap in 1u64..500, p in rate(), h in hasher()
    ) {
        let mut fa = SplitBlockBloomFilter::with_rate(cap, p).unwrap().with_hasher(h);
        let mut fb = SplitBlockBloomFilter::with_rate(cap, p).unwrap().with_hasher(h);
        fa.insert_all(&a);
        fb.insert_all(&b);
        for x in &a { prop_assert!(fa.contains(x)); }
        let bytes = fa.to_bytes();
        let view = SplitBlockBloomFilterRef::new(&bytes).unwrap();
        let back = SplitBlockBloomFilter::from_bytes(&bytes).unwrap();
        prop_assert_eq!(&back, &fa);
        let parquet = SplitBlockBloomFilter::from_bitset_bytes(view.bitset_bytes(), h).unwrap();
        for x in &a {
            prop_assert!(view.contains(x) && back.contains(x) && parquet.contains(x));
        }
        fa.union(&fb).unwrap();
        for x in a.iter().chain(&b) { prop_assert!(fa.contains(x)); }
        let back = SplitBlockBloomFilter::from_bytes(&fa.to_bytes()).unwrap();
        for x in a.iter().chain(&b) { prop_assert!(back.contains(x)); }
    }

    #[test]
    fn split_block_batches_equal_single_lookups(a in items(), probe in items(), cap in 1u64..500) {
        let mut f = SplitBlockBloomFilter::with_rate(cap, 0.05).unwrap();
        f.insert_all(&a);
        let all: Vec<&Vec<u8>> = a.iter().chain(&probe).collect();
        let mut out = vec![true; 3];
        f.contains_batch(&all, &mut out);
        prop_assert_eq!(out.len(), all.len());
        for (x, got) in all.iter().zip(&out) { prop_assert_eq!(*got, f.contains(x)); }
        let bytes = f.to_bytes();
        let view = SplitBlockBloomFilterRef::new(&bytes).unwrap();
        let mut from_view = Vec::new();
        view.contains_batch(&all, &mut from_view);
        prop_assert_eq!(&from_view, &out);
        let hashes: Vec<u64> = all.iter().map(|x| f.hash(x)).collect();
        f.contains_hash_batch(&hashes, &mut from_view);
        prop_assert_eq!(&from_view, &out);
    }

    #[test]
    fn insert_answers_whether_the_key_was_new(a in items()) {
        let mut f = SplitBlockBloomFilter::with_num_blocks(64).unwrap();
        for x in &a {
            let before = f.contains(x);
            prop_assert_eq!(f.insert(x), !before);
            prop_assert!(!f.insert(x));
        }
    }

    #[test]
    fn scalable_split_block_has_no_false_negatives(
        a in items(), b in items(), cap in 1u64..50, p in rate(), h in hasher(),
        expansion in 1u32..4
    ) {
        let build = || ScalableBloomFilter::builder(cap, p)
            .expansion(expansion)
            .split_block(h)
            .build()
            .unwrap();
        let (mut fa, mut fb) = (build(), build());
        for x in &a { fa.add(x).unwrap(); }
        for x in &b { fb.add(x).unwrap(); }
        prop_assert_eq!(fa.layout(), ScalableLayout::SplitBlock(h));
        for x in &a { prop_assert!(fa.contains(x)); }
        let bytes = fa.to_bytes();
        let view = ScalableBloomFilterRef::new(&bytes).unwrap();
        let back = ScalableBloomFilter::from_bytes(&bytes).unwrap();
        prop_assert_eq!(&back, &fa);
        for x in &a { prop_assert!(view.contains(x) && back.contains(x)); }
        fa.union(&fb).unwrap();
        for x in a.iter().chain(&b) { prop_assert!(fa.contains(x)); }
        let mut out = Vec::new();
        fa.contains_batch(&b, &mut out);
        prop_assert!(out.iter().all(|&x| x));
        let back = ScalableBloomFilter::from_bytes(&fa.to_bytes()).unwrap();
        for x in a.iter().chain(&b) { prop_assert!(back.contains(x)); }
    }
}

#[test]
fn rejects_bad_shapes_and_mismatched_unions() {
    assert_eq!(
        SplitBlockBloomFilter::with_rate(0, 0.01),
        Err(Error::ZeroCapacity)
    );
    for p in [0.0, 1.0, f64::NAN, -1.0] {
        assert!(matches!(
            SplitBlockBloomFilter::with_rate(10, p),
            Err(Error::InvalidFalsePositiveRate(_))
        ));
    }
    assert!(matches!(
        SplitBlockBloomFilter::with_num_blocks(0),
        Err(Error::InvalidNumBits { .. })
    ));
    assert!(matches!(
        SplitBlockBloomFilter::with_num_blocks((1 << 32) + 1),
        Err(Error::TooLarge { .. })
    ));
    let mut a = SplitBlockBloomFilter::with_num_blocks(4).unwrap();
    let b = SplitBlockBloomFilter::with_num_blocks(8).unwrap();
    assert!(matches!(
        a.union(&b),
        Err(Error::IncompatibleFilters { .. })
    ));
    let c = SplitBlockBloomFilter::with_num_blocks(4)
        .unwrap()
        .with_hasher(Hash64::PARQUET);
    assert!(matches!(
        a.union(&c),
        Err(Error::IncompatibleFilters { .. })
    ));
    assert!(matches!(
        SplitBlockBloomFilter::from_bitset_bytes(&[0; 33], Hash64::PARQUET),
        Err(Error::InvalidNumBits { .. })
    ));
    let mut std_layers = ScalableBloomFilter::new(10, 0.01).unwrap();
    let split_layers = ScalableBloomFilter::builder(10, 0.01)
        .split_block(Hash64::XXH3)
        .build()
        .unwrap();
    assert!(matches!(
        std_layers.union(&split_layers),
        Err(Error::IncompatibleFilters { .. })
    ));
}

/// SplitMix64: a fixed, seedable stream of time-series shaped keys.
struct Keys(u64);

impl Keys {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn key(&mut self) -> [u8; 16] {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&self.next_u64().to_le_bytes());
        let ts = 1_700_000_000_000i64 + (self.next_u64() % 86_400_000) as i64;
        k[8..].copy_from_slice(&ts.to_be_bytes());
        k
    }
}

fn absent_rate(contains: impl Fn(&[u8]) -> bool) -> f64 {
    let mut absent = Keys(2);
    let hits = (0..1_000_000).filter(|_| contains(&absent.key())).count();
    hits as f64 / 1e6
}

#[test]
fn split_block_rate_at_capacity_is_the_target() {
    for hasher in [
        Hash64::XXH3,
        Hash64::PARQUET,
        Hash64::Sip13 { key: Seed::DEFAULT },
    ] {
        for (n, p) in [(1_000_000u64, 0.01), (100_000, 0.001)] {
            let mut f = SplitBlockBloomFilter::with_rate(n, p)
                .unwrap()
                .with_hasher(hasher);
            let mut present = Keys(1);
            for _ in 0..n {
                f.insert(&present.key());
            }
            let mut present = Keys(1);
            assert!((0..n).all(|_| f.contains(&present.key())), "false negative");
            let rate = absent_rate(|k| f.contains(k));
            assert!(rate <= 1.1 * p, "{hasher:?} n={n} p={p}: measured {rate}");
            assert!(rate >= 0.8 * p, "{hasher:?} n={n} p={p}: measured {rate}");
            let bits = f.num_bits() as f64 / n as f64;
            if p == 0.01 {
                assert!(bits <= 10.6, "{bits} bits per key");
            }
            let est = f.estimated_len() as f64 / n as f64;
            assert!((est - 1.0).abs() < 0.03, "estimated_len ratio {est}");
            assert!((f.estimated_fpr() / f.model_fpr(n) - 1.0).abs() < 0.15);
        }
    }
}

#[test]
fn scalable_split_block_grown_from_100_keeps_its_rate() {
    let mut f = ScalableBloomFilter::builder(100, 0.01)
        .split_block(Hash64::XXH3)
        .build()
        .unwrap();
    let mut present = Keys(1);
    for _ in 0..1_000_000 {
        f.add(&present.key()).unwrap();
    }
    let mut present = Keys(1);
    assert!((0..1_000_000).all(|_| f.contains(&present.key())));
    let rate = absent_rate(|k| f.contains(k));
    assert!(rate <= 0.01, "measured {rate}");
    assert!(f.num_layers() >= 13, "{} layers", f.num_layers());
    // 1M keys grown from 100 end just past a layer boundary (layer 14 of 1.6M is 1/4
    // full): 5.05 MB. The 10M case (43 MB) is measured in docs/results/bloom.md.
    assert!(f.size_bytes() < 5_200_000, "{} bytes", f.size_bytes());
    assert!(f.estimated_fpr() <= 0.01);
    let layers = f.layers();
    assert!((layers[1].error_rate / (0.005 * 0.1) - 1.0).abs() < 1e-9);
    assert!((layers[2].error_rate / layers[1].error_rate - 0.9).abs() < 1e-9);
}
