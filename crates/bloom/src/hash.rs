//! Hashing: SipHash-1-3 with 128-bit output and fixed, documented keys.
//!
//! Hash output is part of the byte format: the bit positions of a filter written today
//! must be found again by every later version on every platform. The keys are therefore
//! constants of the format (see `docs/bloom-format.md`), never `RandomState`.

use siphasher::sip128::SipHasher13;

/// The two 64-bit SipHash keys a filter hashes its items with.
///
/// The default, [`Seed::DEFAULT`], is the ASCII of `"tidemark"` and `"bloom-v1"` read as
/// little-endian `u64`s. Filters with different seeds cannot be combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Seed {
    /// First SipHash key.
    pub k0: u64,
    /// Second SipHash key.
    pub k1: u64,
}

impl Seed {
    /// The documented default keys: `u64::from_le_bytes(*b"tidemark")` and
    /// `u64::from_le_bytes(*b"bloom-v1")`.
    pub const DEFAULT: Seed = Seed {
        k0: u64::from_le_bytes(*b"tidemark"),
        k1: u64::from_le_bytes(*b"bloom-v1"),
    };

    /// A seed from two explicit keys.
    pub const fn new(k0: u64, k1: u64) -> Self {
        Seed { k0, k1 }
    }

    /// Hashes `item` to the 128-bit value the filters probe with.
    ///
    /// The result equals `SipHash-1-3-128(k0, k1, item)` with the high half taken from the
    /// second output word, i.e. `(h2 << 64) | h1`; pass it to `insert_hash`/`contains_hash`
    /// to hash once and probe several filters.
    #[inline]
    pub fn hash(&self, item: &[u8]) -> u128 {
        // The one-shot form skips the streaming buffer; same output as write + finish128
        // (pinned by `hash_is_pinned` and `one_shot_equals_streaming`). The two words
        // are combined by value, not through `Hash128::as_u128`, which byte-swaps them on
        // big-endian targets: bit positions must not depend on the platform.
        let h = SipHasher13::new_with_keys(self.k0, self.k1).hash(item);
        u128::from(h.h1) | (u128::from(h.h2) << 64)
    }
}

impl Default for Seed {
    fn default() -> Self {
        Seed::DEFAULT
    }
}

/// Hashes `item` with the default seed. See [`Seed::hash`].
#[inline]
pub fn hash128(item: &[u8]) -> u128 {
    Seed::DEFAULT.hash(item)
}

/// Maps a uniform 64-bit value onto `0..n` without a division (Lemire's fast range).
#[inline(always)]
pub(crate) fn fast_range(x: u64, n: u64) -> u64 {
    ((u128::from(x) * u128::from(n)) >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_keys_are_the_documented_ascii() {
        assert_eq!(Seed::DEFAULT.k0, 0x6b72_616d_6564_6974);
        assert_eq!(Seed::DEFAULT.k1, 0x3176_2d6d_6f6f_6c62);
    }

    #[test]
    fn hash_is_pinned() {
        // Golden values: a change here breaks every persisted filter.
        assert_eq!(hash128(b""), 0xf1dd_b856_decd_1464_d6a3_9fc7_f960_3454);
        assert_eq!(
            hash128(b"tidemark"),
            0x2bc2_7729_ae95_324b_47d4_bbb0_5263_1a40
        );
    }

    #[test]
    fn one_shot_equals_streaming() {
        use siphasher::sip128::Hasher128;
        use std::hash::Hasher;
        for len in 0..40usize {
            let item: Vec<u8> = (0..len as u8).collect();
            let mut h = SipHasher13::new_with_keys(Seed::DEFAULT.k0, Seed::DEFAULT.k1);
            h.write(&item);
            let words = h.finish128();
            assert_eq!(
                hash128(&item),
                u128::from(words.h1) | (u128::from(words.h2) << 64)
            );
        }
    }

    #[test]
    fn fast_range_stays_in_range() {
        for n in [1u64, 2, 3, 1000, u64::MAX] {
            for x in [0u64, 1, u64::MAX / 2, u64::MAX] {
                assert!(fast_range(x, n) < n);
            }
        }
    }
}
