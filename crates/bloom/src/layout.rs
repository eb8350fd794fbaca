//! Where an item's probes land: the classic layout over the whole bit array, and the
//! cache-blocked layout that keeps all probes of an item in one 64-byte block.
//!
//! Both take the item's 128-bit hash `h`, with `lo = h as u64` and `hi = (h >> 64) as u64`.
//!
//! * [`Standard`]: probe `i` (0-based) is bit `fast_range(lo + i·(hi | 1), num_bits)`
//!   (Kirsch–Mitzenmacher double hashing, wrapping 64-bit arithmetic, then Lemire's
//!   multiply-shift range reduction, so any `num_bits` up to 2^40 works, not only powers
//!   of two).
//! * [`Blocked`]: the block is `fast_range(lo, num_blocks)`; probe `i` is bit
//!   `(hi · SALT[i]) >> 55` of that block, where `SALT` are the odd 64-bit constants of
//!   [`BLOCK_SALTS`]. The block choice uses only `lo` and the in-block bits only `hi`, so
//!   items sharing a block do not share probe patterns.
//!
//! Bit `b` of the array is bit `b % 64` of word `b / 64`.

use std::sync::atomic::Ordering;

use crate::error::Result;
use crate::hash::fast_range;
use crate::math::{self, BLOCK_BITS, MAX_BLOCK_HASHES, MAX_NUM_HASHES};
use crate::words::{AtomicBits, Words};

/// The odd multipliers that spread a blocked filter's probes within a block:
/// SplitMix64 outputs 1..=32 (state starting at 0, increment `0x9E37_79B9_7F4A_7C15`),
/// with the lowest bit forced to 1. Part of the byte format.
pub const BLOCK_SALTS: [u64; MAX_BLOCK_HASHES as usize] = block_salts();

const fn block_salts() -> [u64; MAX_BLOCK_HASHES as usize] {
    let mut out = [0u64; MAX_BLOCK_HASHES as usize];
    let mut state: u64 = 0;
    let mut i = 0;
    while i < out.len() {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out[i] = z | 1;
        i += 1;
    }
    out
}

pub(crate) mod sealed {
    use super::*;

    /// The layout's internals; sealed so that the byte format has exactly two layouts.
    pub trait Sealed: Copy + Send + Sync + 'static {
        /// Kind code in the byte format.
        const KIND: u8;
        /// Human name for messages and dumps.
        const NAME: &'static str;
        /// `num_bits` is always a multiple of this.
        const GRANULE: u64;
        /// Largest hash count.
        const MAX_HASHES: u32;

        /// Shape `(num_bits, num_hashes)` for a capacity and rate.
        fn shape(capacity: u64, fpr: f64) -> Result<(u64, u32)>;
        /// Whether every probe bit of `hash` is set.
        fn contains<W: Words + ?Sized>(words: &W, num_bits: u64, k: u32, hash: u128) -> bool;
        /// Sets the probe bits; true when at least one was clear.
        fn insert(words: &mut [u64], num_bits: u64, k: u32, hash: u128) -> bool;
        /// Sets the probe bits with atomic OR; true when at least one was clear.
        fn insert_atomic(words: &AtomicBits, num_bits: u64, k: u32, hash: u128) -> bool;
        /// Modelled rate at `items` items.
        fn model_fpr(num_bits: u64, k: u32, items: u64) -> f64;
        /// Cardinality estimate from the set-bit count.
        fn estimated_len(num_bits: u64, k: u32, ones: u64) -> u64;
        /// Rate estimated from the actual bits.
        fn estimated_fpr<W: Words + ?Sized>(words: &W, num_bits: u64, k: u32) -> f64;
    }
}

/// The bit layout of a filter: [`Standard`] or [`Blocked`].
///
/// Sealed: these two are the layouts the byte format knows.
pub trait Layout: sealed::Sealed + std::fmt::Debug {}

/// Classic layout: each probe may land anywhere in the bit array. Smallest for a rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standard {}

/// Cache-blocked layout: all probes of an item land in one 512-bit block, so a lookup
/// touches one cache line. Fastest; a little larger for the same rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocked {}

impl Layout for Standard {}
impl Layout for Blocked {}

#[inline(always)]
fn standard_probe(hash: u128, num_bits: u64, i: u64) -> (usize, u64) {
    let lo = hash as u64;
    let step = ((hash >> 64) as u64) | 1;
    let bit = fast_range(lo.wrapping_add(i.wrapping_mul(step)), num_bits);
    ((bit >> 6) as usize, 1u64 << (bit & 63))
}

impl sealed::Sealed for Standard {
    const KIND: u8 = 1;
    const NAME: &'static str = "standard";
    const GRANULE: u64 = 64;
    const MAX_HASHES: u32 = MAX_NUM_HASHES;

    fn shape(capacity: u64, fpr: f64) -> Result<(u64, u32)> {
        math::standard_shape(capacity, fpr)
    }

    #[inline]
    fn contains<W: Words + ?Sized>(words: &W, num_bits: u64, k: u32, hash: u128) -> bool {
        // Stops at the first clear bit: each probe is its own cache line, so for absent
        // items the early exit saves memory traffic.
        (0..u64::from(k)).all(|i| {
            let (w, mask) = standard_probe(hash, num_bits, i);
            words.word(w) & mask != 0
        })
    }

    #[inline]
    fn insert(words: &mut [u64], num_bits: u64, k: u32, hash: u128) -> bool {
        let mut new = false;
        for i in 0..u64::from(k) {
            let (w, mask) = standard_probe(hash, num_bits, i);
            if let Some(word) = words.get_mut(w) {
                new |= *word & mask == 0;
                *word |= mask;
            }
        }
        new
    }

    #[inline]
    fn insert_atomic(words: &AtomicBits, num_bits: u64, k: u32, hash: u128) -> bool {
        let mut new = false;
        for i in 0..u64::from(k) {
            let (w, mask) = standard_probe(hash, num_bits, i);
            if let Some(word) = words.get(w) {
                new |= word.fetch_or(mask, Ordering::Relaxed) & mask == 0;
            }
        }
        new
    }

    fn model_fpr(num_bits: u64, k: u32, items: u64) -> f64 {
        math::standard_fpr(num_bits, k, items)
    }

    fn estimated_len(num_bits: u64, k: u32, ones: u64) -> u64 {
        math::standard_estimated_len(num_bits, k, ones)
    }

    fn estimated_fpr<W: Words + ?Sized>(words: &W, num_bits: u64, k: u32) -> f64 {
        if num_bits == 0 {
            return 1.0;
        }
        (words.count_ones() as f64 / num_bits as f64).powf(f64::from(k))
    }
}

/// The first word of an item's block, and the 64 bits its in-block positions come from.
#[inline(always)]
fn block_base(hash: u128, num_bits: u64) -> (usize, u64) {
    let lo = hash as u64;
    let hi = (hash >> 64) as u64;
    // The block comes from the half SipHash finishes first, so the load can start while
    // the other half is still being computed.
    let block = fast_range(lo, num_bits / BLOCK_BITS) as usize;
    (block * 8, hi)
}

/// Bit `0..512` of probe `salt` within the block.
#[inline(always)]
fn block_bit(hi: u64, salt: u64) -> u64 {
    hi.wrapping_mul(salt) >> 55
}

/// The eight per-word masks of an item's probes (for the read-modify-write paths).
#[inline(always)]
fn block_masks(hi: u64, k: u32) -> [u64; 8] {
    let mut masks = [0u64; 8];
    for salt in BLOCK_SALTS.iter().take(k as usize) {
        let bit = block_bit(hi, *salt);
        masks[(bit >> 6) as usize & 7] |= 1u64 << (bit & 63);
    }
    masks
}

impl sealed::Sealed for Blocked {
    const KIND: u8 = 2;
    const NAME: &'static str = "blocked";
    const GRANULE: u64 = BLOCK_BITS;
    const MAX_HASHES: u32 = MAX_BLOCK_HASHES;

    fn shape(capacity: u64, fpr: f64) -> Result<(u64, u32)> {
        math::blocked_shape(capacity, fpr)
    }

    #[inline]
    fn contains<W: Words + ?Sized>(words: &W, num_bits: u64, k: u32, hash: u128) -> bool {
        let (base, hi) = block_base(hash, num_bits);
        // Independent single-bit tests: no read-modify-write chain through a mask array,
        // so the k loads (one cache line) issue in parallel.
        let mut all = 1u64;
        for salt in BLOCK_SALTS.iter().take(k as usize) {
            let bit = block_bit(hi, *salt);
            all &= words.word(base + (bit >> 6) as usize) >> (bit & 63);
        }
        all & 1 == 1
    }

    #[inline]
    fn insert(words: &mut [u64], num_bits: u64, k: u32, hash: u128) -> bool {
        let (base, hi) = block_base(hash, num_bits);
        let Some(block) = words.get_mut(base..base + 8) else {
            return false;
        };
        // Test with independent loads first, then set: setting through a mask array
        // would chain every probe through a store-to-load forward.
        let mut all = 1u64;
        for salt in BLOCK_SALTS.iter().take(k as usize) {
            let bit = block_bit(hi, *salt);
            all &= block[(bit >> 6) as usize & 7] >> (bit & 63);
        }
        for salt in BLOCK_SALTS.iter().take(k as usize) {
            let bit = block_bit(hi, *salt);
            block[(bit >> 6) as usize & 7] |= 1u64 << (bit & 63);
        }
        all & 1 == 0
    }

    #[inline]
    fn insert_atomic(words: &AtomicBits, num_bits: u64, k: u32, hash: u128) -> bool {
        let (base, hi) = block_base(hash, num_bits);
        let masks = block_masks(hi, k);
        let mut missing = 0u64;
        for (j, mask) in masks.iter().enumerate() {
            if *mask != 0
                && let Some(word) = words.get(base + j)
            {
                missing |= !word.fetch_or(*mask, Ordering::Relaxed) & mask;
            }
        }
        missing != 0
    }

    fn model_fpr(num_bits: u64, k: u32, items: u64) -> f64 {
        math::blocked_fpr(num_bits / BLOCK_BITS, k, items)
    }

    fn estimated_len(num_bits: u64, k: u32, ones: u64) -> u64 {
        math::blocked_estimated_len(num_bits / BLOCK_BITS, k, ones)
    }

    fn estimated_fpr<W: Words + ?Sized>(words: &W, num_bits: u64, k: u32) -> f64 {
        // The mean over blocks of (block fill)^k: exact for the bits as they are.
        let num_blocks = (num_bits / BLOCK_BITS) as usize;
        if num_blocks == 0 {
            return 1.0;
        }
        let k = f64::from(k);
        let total: f64 = (0..num_blocks)
            .map(|b| {
                let ones: u32 = (0..8).map(|j| words.word(b * 8 + j).count_ones()).sum();
                (f64::from(ones) / BLOCK_BITS as f64).powf(k)
            })
            .sum();
        total / num_blocks as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salts_are_odd_and_distinct() {
        for (i, a) in BLOCK_SALTS.iter().enumerate() {
            assert_eq!(a & 1, 1);
            for b in &BLOCK_SALTS[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // First SplitMix64 output from state 0 (a published test vector), made odd.
        assert_eq!(BLOCK_SALTS[0], 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn standard_probes_reach_past_four_billion_bits() {
        let num_bits = 1u64 << 34;
        let (w, _) = standard_probe(u128::MAX, num_bits, 0);
        assert!(w as u64 * 64 >= 1 << 33);
    }
}
