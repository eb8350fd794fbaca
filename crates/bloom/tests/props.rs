//! Property tests: no false negatives, ever; the fast probe code equals a plain model of
//! the documented layout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use tidemark_bloom::{
    AtomicBlockedBloomFilter, AtomicBloomFilter, BLOCK_SALTS, BlockedBloomFilter,
    BlockedBloomFilterRef, BloomFilter, BloomFilterRef, ScalableBloomFilter,
    ScalableBloomFilterRef, hash128,
};

fn items() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..24), 0..300)
}

fn rate() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.5), Just(0.1), Just(0.01), Just(0.001), 1e-6..0.9f64]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn standard_has_no_false_negatives(a in items(), b in items(), cap in 1u64..500, p in rate()) {
        let mut fa = BloomFilter::with_capacity(cap, p).unwrap();
        let mut fb = BloomFilter::with_capacity(cap, p).unwrap();
        fa.insert_all(&a);
        fb.insert_all(&b);
        for x in &a { prop_assert!(fa.contains(x)); }
        let bytes = fa.to_bytes();
        let view = BloomFilterRef::new(&bytes).unwrap();
        let back = BloomFilter::from_bytes(&bytes).unwrap();
        for x in &a { prop_assert!(view.contains(x) && back.contains(x)); }
        fa.union(&fb).unwrap();
        for x in a.iter().chain(&b) { prop_assert!(fa.contains(x)); }
        let back = BloomFilter::from_bytes(&fa.to_bytes()).unwrap();
        for x in a.iter().chain(&b) { prop_assert!(back.contains(x)); }
    }

    #[test]
    fn batch_lookups_equal_single_lookups(a in items(), probe in items(), cap in 1u64..500) {
        let mut std_f = BloomFilter::with_capacity(cap, 0.05).unwrap();
        let mut blk_f = BlockedBloomFilter::with_capacity(cap, 0.05).unwrap();
        std_f.insert_all(&a);
        blk_f.insert_all(&a);
        let all: Vec<&Vec<u8>> = a.iter().chain(&probe).collect();
        let mut out = vec![true; 3];
        std_f.contains_batch(&all, &mut out);
        prop_assert_eq!(out.len(), all.len());
        for (x, got) in all.iter().zip(&out) { prop_assert_eq!(*got, std_f.contains(x)); }
        blk_f.contains_batch(&all, &mut out);
        for (x, got) in all.iter().zip(&out) { prop_assert_eq!(*got, blk_f.contains(x)); }
    }

    #[test]
    fn blocked_has_no_false_negatives(a in items(), b in items(), cap in 1u64..500, p in rate()) {
        let mut fa = BlockedBloomFilter::with_capacity(cap, p).unwrap();
        let mut fb = BlockedBloomFilter::with_capacity(cap, p).unwrap();
        fa.insert_all(&a);
        fb.insert_all(&b);
        for x in &a { prop_assert!(fa.contains(x)); }
        let bytes = fa.to_bytes();
        let view = BlockedBloomFilterRef::new(&bytes).unwrap();
        for x in &a { prop_assert!(view.contains(x)); }
        fa.union(&fb).unwrap();
        let back = BlockedBloomFilter::from_bytes(&fa.to_bytes()).unwrap();
        for x in a.iter().chain(&b) { prop_assert!(fa.contains(x) && back.contains(x)); }
    }

    #[test]
    fn atomic_forms_have_no_false_negatives(a in items(), b in items(), cap in 1u64..500) {
        let fa = AtomicBloomFilter::with_capacity(cap, 0.01).unwrap();
        let fb = AtomicBlockedBloomFilter::with_capacity(cap, 0.01).unwrap();
        for x in &a { fa.insert(x); fb.insert(x); }
        let mut other = BloomFilter::with_capacity(cap, 0.01).unwrap();
        other.insert_all(&b);
        fa.union(&other).unwrap();
        let back = BloomFilter::from_bytes(&fa.to_bytes()).unwrap();
        for x in a.iter().chain(&b) { prop_assert!(fa.contains(x) && back.contains(x)); }
        let back = BlockedBloomFilter::from_bytes(&fb.to_bytes()).unwrap();
        for x in &a { prop_assert!(fb.contains(x) && back.contains(x)); }
    }

    #[test]
    fn scalable_has_no_false_negatives(
        a in items(), b in items(), cap in 1u64..40, p in 0.001..0.5f64, expansion in 2u32..5,
    ) {
        let build = || ScalableBloomFilter::builder(cap, p).expansion(expansion).build().unwrap();
        let (mut fa, mut fb) = (build(), build());
        for x in &a { fa.add(x).unwrap(); }
        for x in &b { fb.add(x).unwrap(); }
        for x in &a { prop_assert!(fa.contains(x)); }
        prop_assert!(fa.len() <= a.len() as u64);
        let bytes = fa.to_bytes();
        let view = ScalableBloomFilterRef::new(&bytes).unwrap();
        for x in &a { prop_assert!(view.contains(x)); }
        fa.union(&fb).unwrap();
        for x in a.iter().chain(&b) { prop_assert!(fa.contains(x)); }
        let back = ScalableBloomFilter::from_bytes(&fa.to_bytes()).unwrap();
        for x in a.iter().chain(&b) { prop_assert!(back.contains(x)); }
        // Adding after a union still never loses anything.
        for x in &b { back.clone().add(x).unwrap(); }
    }

    #[test]
    fn nonscaling_refuses_only_new_items_when_full(a in items(), cap in 1u64..30) {
        let mut f = ScalableBloomFilter::builder(cap, 0.01).nonscaling(true).build().unwrap();
        let mut kept = Vec::new();
        for x in &a {
            match f.add(x) {
                Ok(_) => kept.push(x),
                Err(tidemark_bloom::Error::Full { capacity }) => {
                    prop_assert_eq!(capacity, cap);
                    prop_assert!(f.is_full());
                }
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
        }
        prop_assert!(f.len() <= cap);
        prop_assert_eq!(f.num_layers(), 1);
        for x in kept { prop_assert!(f.contains(x)); }
    }

    /// The optimised probe code sets exactly the bits the documented layout names.
    #[test]
    fn probe_code_equals_the_documented_layout(a in items(), cap in 1u64..2_000) {
        let mut fast = BloomFilter::with_capacity(cap, 0.01).unwrap();
        fast.insert_all(&a);
        let m = fast.num_bits();
        let mut model = vec![0u64; (m / 64) as usize];
        for x in &a {
            let h = hash128(x);
            let (lo, step) = (h as u64, ((h >> 64) as u64) | 1);
            for i in 0..u64::from(fast.num_hashes()) {
                let g = lo.wrapping_add(i.wrapping_mul(step));
                let bit = ((u128::from(g) * u128::from(m)) >> 64) as u64;
                model[(bit / 64) as usize] |= 1 << (bit % 64);
            }
        }
        prop_assert_eq!(fast.as_words(), &model[..]);

        let mut fast = BlockedBloomFilter::with_capacity(cap, 0.01).unwrap();
        fast.insert_all(&a);
        let blocks = fast.num_bits() / 512;
        let mut model = vec![0u64; (fast.num_bits() / 64) as usize];
        for x in &a {
            let h = hash128(x);
            let (lo, hi) = (h as u64, (h >> 64) as u64);
            let block = ((u128::from(lo) * u128::from(blocks)) >> 64) as u64;
            for salt in &BLOCK_SALTS[..fast.num_hashes() as usize] {
                let bit = block * 512 + (hi.wrapping_mul(*salt) >> 55);
                model[(bit / 64) as usize] |= 1 << (bit % 64);
            }
        }
        prop_assert_eq!(fast.as_words(), &model[..]);
    }
}
