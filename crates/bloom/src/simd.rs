//! The one module of this crate allowed `unsafe`: AVX2 probing of split blocks, chosen at
//! run time, with the portable code of `split.rs` as the fallback.
//!
//! Why it exists: on x86-64 without AVX2 in the compile target (the default `x86-64`
//! baseline), the portable probe cannot be vectorized (SSE2 has neither a 32-bit lane
//! multiply nor a per-lane shift), so it runs as 8 scalar multiply-shift-shift chains:
//! `benches/benches/split_block.rs` measured it at 3.3× sbbf-rs-safe's AVX2 lookups.
//! With AVX2 the eight masks are one `vpmulld`, one `vpsrld` and one `vpsllvd`, and the
//! test is one `vptest`.
//!
//! Safety: the `unsafe` is only the call into `#[target_feature(enable = "avx2")]`
//! functions, each behind `is_x86_feature_detected!("avx2")`. Their bodies use no raw
//! pointers (32-byte-aligned blocks are cast with `bytemuck`), so they are safe code
//! that merely needs the instructions to exist. The property test
//! `avx2_equals_portable` compares both paths on random hashes and blocks.
#![allow(unsafe_code)]

use crate::split::Block;

/// The AVX2 implementation, compiled on x86-64 only.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::{
        __m256i, _mm256_and_si256, _mm256_cmpeq_epi32, _mm256_movemask_epi8, _mm256_mullo_epi32,
        _mm256_or_si256, _mm256_set1_epi32, _mm256_setr_epi32, _mm256_sllv_epi32,
        _mm256_srli_epi32, _mm256_testc_si256,
    };

    use crate::split::{Block, PARQUET_SALTS};

    #[target_feature(enable = "avx2")]
    #[inline]
    fn masks(hash: u64) -> __m256i {
        let s = PARQUET_SALTS.map(|x| x as i32);
        let salts = _mm256_setr_epi32(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]);
        let key = _mm256_set1_epi32(hash as u32 as i32);
        let bits = _mm256_srli_epi32::<27>(_mm256_mullo_epi32(key, salts));
        _mm256_sllv_epi32(_mm256_set1_epi32(1), bits)
    }

    /// Whether every probe bit of `hash` is set in `block`.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(super) fn contains(block: &Block, hash: u64) -> bool {
        // Same size and alignment (32): a reference cast, no copy through the stack.
        let b: &__m256i = bytemuck::cast_ref(block);
        _mm256_testc_si256(*b, masks(hash)) != 0
    }

    /// Sets the probe bits of `hash`; true when at least one was clear.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(super) fn insert(block: &mut Block, hash: u64) -> bool {
        let b: &mut __m256i = bytemuck::cast_mut(block);
        let m = masks(hash);
        let had_all = _mm256_testc_si256(*b, m) != 0;
        *b = _mm256_or_si256(*b, m);
        !had_all
    }

    /// Answers for a group of hashes over a slice of blocks (the batch path: one call
    /// for many probes, so the probes inline into one loop).
    #[target_feature(enable = "avx2")]
    pub(super) fn contains_many(
        blocks: &[Block],
        num_blocks: u64,
        hashes: &[u64],
        out: &mut Vec<bool>,
    ) {
        out.extend(hashes.iter().map(|&h| {
            blocks
                .get(crate::split::block_index(h, num_blocks))
                .is_some_and(|b| {
                    let b: &__m256i = bytemuck::cast_ref(b);
                    let b = *b;
                    let m = masks(h);
                    // testc without the flag dependency chain: (b & m) == m lane-wise.
                    let eq = _mm256_cmpeq_epi32(_mm256_and_si256(b, m), m);
                    _mm256_movemask_epi8(eq) == -1
                })
        }));
    }
}

/// Whether the CPU has AVX2 (std caches the detection).
#[inline(always)]
fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The probe implementation this CPU runs, detected once per filter so that a lookup
/// tests one flag of the filter instead of std's global feature cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Probe {
    /// True only when `is_x86_feature_detected!("avx2")` said so: the field is private
    /// and [`Probe::detect`] is the only constructor, which the `SAFETY` comments below
    /// rely on.
    avx2: bool,
}

impl Probe {
    /// Detects the CPU's features.
    pub(crate) fn detect() -> Self {
        Probe { avx2: has_avx2() }
    }

    /// Whether every probe bit of `hash` is set in `block`: AVX2 when available, else
    /// the portable reduction.
    #[inline(always)]
    pub(crate) fn contains(self, block: &Block, hash: u64) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is true only when the CPU was detected to support AVX2
            // (`Probe::detect`), which is all that calling an `avx2`-target-feature
            // function requires; its body is safe code.
            return unsafe { avx2::contains(block, hash) };
        }
        portable_contains(&block.0, hash)
    }

    /// Sets the probe bits of `hash` in `block`; true when at least one was clear.
    #[inline(always)]
    pub(crate) fn insert(self, block: &mut Block, hash: u64) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: as in `contains`: AVX2 was detected on this CPU.
            return unsafe { avx2::insert(block, hash) };
        }
        portable_insert(&mut block.0, hash)
    }
}

/// Appends the answers for `hashes` over `blocks` to `out`.
pub(crate) fn contains_many(
    blocks: &[Block],
    num_blocks: u64,
    hashes: &[u64],
    out: &mut Vec<bool>,
) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: as in `contains`: AVX2 was detected on this CPU.
        unsafe { avx2::contains_many(blocks, num_blocks, hashes, out) };
        return;
    }
    out.extend(hashes.iter().map(|&h| {
        blocks
            .get(crate::split::block_index(h, num_blocks))
            .is_some_and(|b| portable_contains(&b.0, h))
    }));
}

/// The portable probe: eight masks and one and-not/or reduction, no branch.
#[inline(always)]
pub(crate) fn portable_contains(block: &[u32; 8], hash: u64) -> bool {
    let masks = crate::split::block_masks(hash);
    let mut missing = 0u32;
    for (w, m) in block.iter().zip(masks) {
        missing |= m & !w;
    }
    missing == 0
}

/// The portable insert.
#[inline(always)]
pub(crate) fn portable_insert(block: &mut [u32; 8], hash: u64) -> bool {
    let masks = crate::split::block_masks(hash);
    let mut missing = 0u32;
    for (w, m) in block.iter_mut().zip(masks) {
        missing |= m & !*w;
        *w |= m;
    }
    missing != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn avx2_equals_portable(block in proptest::array::uniform8(any::<u32>()), hash in any::<u64>(), dense in any::<bool>()) {
            // Dense blocks make "all bits present" common enough to test both answers.
            let block = Block(if dense { block.map(|w| w | 0xfff7_ffff) } else { block });
            prop_assert_eq!(Probe::detect().contains(&block, hash), portable_contains(&block.0, hash));
            let (mut a, mut b) = (block, block.0);
            prop_assert_eq!(Probe::detect().insert(&mut a, hash), portable_insert(&mut b, hash));
            prop_assert_eq!(a.0, b);
            prop_assert!(Probe::detect().contains(&a, hash));
            let blocks = [block, a];
            let mut out = Vec::new();
            contains_many(&blocks, 2, &[hash, hash ^ (1 << 63)], &mut out);
            let want: Vec<bool> = [hash, hash ^ (1 << 63)]
                .iter()
                .map(|&h| portable_contains(&blocks[crate::split::block_index(h, 2)].0, h))
                .collect();
            prop_assert_eq!(out, want);
        }
    }
}
