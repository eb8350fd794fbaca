//! Hashing: SipHash-1-3 with 128-bit output and fixed, documented keys for the filters of
//! format version 1, and [`Hash64`], the one 64-bit hash per key of the split-block
//! filters (XXH3-64, XXH64 as Parquet specifies, or keyed SipHash-1-3 for keys chosen by
//! an adversary).
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

/// The 64-bit hash a split-block filter hashes each key with, once per key.
///
/// Stored in the filter's bytes (hash code and seed), so a decoded filter hashes as its
/// writer did. Choose by who picks the keys:
///
/// * [`Hash64::Xxh3`] (the default, seed 0): XXH3-64, the fastest (about 2 ns for a
///   16-byte key here, against 11 ns for SipHash-1-3-128). Unkeyed: anyone who knows the
///   seed can compute which keys collide.
/// * [`Hash64::Xxh64`]: XXH64, what Parquet's split-block bloom filter specifies (with
///   seed 0, [`Hash64::PARQUET`]), so the filter's blocks can be written into a Parquet
///   file and probed by any Parquet reader.
/// * [`Hash64::Sip13`]: SipHash-1-3 with 64-bit output under a secret 128-bit key. Use it
///   when keys come from untrusted clients: without the key, an attacker cannot aim keys
///   at one block or at another client's items (forcing false positives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hash64 {
    /// XXH3-64 (`xxhash_rust::xxh3::xxh3_64_with_seed`).
    Xxh3 {
        /// The XXH3 seed.
        seed: u64,
    },
    /// XXH64 (`xxhash_rust::xxh64::xxh64`).
    Xxh64 {
        /// The XXH64 seed; Parquet uses 0.
        seed: u64,
    },
    /// SipHash-1-3 with 64-bit output (`siphasher::sip::SipHasher13`).
    Sip13 {
        /// The 128-bit key.
        key: Seed,
    },
}

/// Hash code of XXH64 in the byte format.
pub(crate) const CODE_XXH64: u8 = 2;
/// Hash code of XXH3-64 in the byte format.
pub(crate) const CODE_XXH3: u8 = 3;
/// Hash code of SipHash-1-3-64 in the byte format.
pub(crate) const CODE_SIP13_64: u8 = 4;

impl Hash64 {
    /// XXH3-64 with seed 0: the default of new split-block filters.
    pub const XXH3: Hash64 = Hash64::Xxh3 { seed: 0 };

    /// XXH64 with seed 0, the hash of Parquet's split-block bloom filter.
    pub const PARQUET: Hash64 = Hash64::Xxh64 { seed: 0 };

    /// Hashes `item`.
    #[inline(always)]
    pub fn hash(&self, item: &[u8]) -> u64 {
        // The default hash inlines into the probe; the other two stay calls, so that
        // their bodies do not keep the whole match from inlining (measured: 2 ns a key).
        match *self {
            // Seed 0 is XXH3's default: the same output, and the secret folds to constants.
            Hash64::Xxh3 { seed: 0 } => xxhash_rust::xxh3::xxh3_64(item),
            Hash64::Xxh3 { seed } => xxhash_rust::xxh3::xxh3_64_with_seed(item, seed),
            Hash64::Xxh64 { seed } => xxh64(item, seed),
            Hash64::Sip13 { key } => sip13_64(item, key),
        }
    }

    /// The algorithm's code and its two seed words, as the byte format stores them.
    pub(crate) fn to_parts(self) -> (u8, Seed) {
        match self {
            Hash64::Xxh3 { seed } => (CODE_XXH3, Seed::new(seed, 0)),
            Hash64::Xxh64 { seed } => (CODE_XXH64, Seed::new(seed, 0)),
            Hash64::Sip13 { key } => (CODE_SIP13_64, key),
        }
    }

    /// The hash of a code and seed words read from bytes; `None` for an unknown code or a
    /// non-zero second word under an XXH hash (which has one seed word).
    pub(crate) fn from_parts(code: u8, seed: Seed) -> Option<Hash64> {
        match code {
            CODE_XXH3 if seed.k1 == 0 => Some(Hash64::Xxh3 { seed: seed.k0 }),
            CODE_XXH64 if seed.k1 == 0 => Some(Hash64::Xxh64 { seed: seed.k0 }),
            CODE_SIP13_64 => Some(Hash64::Sip13 { key: seed }),
            _ => None,
        }
    }

    /// A short name for messages and dumps.
    pub fn name(&self) -> &'static str {
        match self {
            Hash64::Xxh3 { .. } => "XXH3-64",
            Hash64::Xxh64 { .. } => "XXH64",
            Hash64::Sip13 { .. } => "SipHash-1-3-64",
        }
    }
}

#[inline(never)]
fn xxh64(item: &[u8], seed: u64) -> u64 {
    xxhash_rust::xxh64::xxh64(item, seed)
}

#[inline(never)]
fn sip13_64(item: &[u8], key: Seed) -> u64 {
    siphasher::sip::SipHasher13::new_with_keys(key.k0, key.k1).hash(item)
}

impl Default for Hash64 {
    fn default() -> Self {
        Hash64::XXH3
    }
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
    fn hash64_is_pinned() {
        // Published test vectors: XXH64("", 0) and XXH3-64("", 0) from the xxHash sources.
        assert_eq!(Hash64::PARQUET.hash(b""), 0xef46_db37_51d8_e999);
        assert_eq!(Hash64::XXH3.hash(b""), 0x2d06_8005_38d3_94c2);
        for len in [0usize, 3, 16, 40, 300] {
            let item = vec![7u8; len];
            assert_eq!(
                Hash64::XXH3.hash(&item),
                xxhash_rust::xxh3::xxh3_64_with_seed(&item, 0)
            );
        }
        // SipHash-1-3-64 with the default keys: golden, a change breaks persisted filters.
        let sip = Hash64::Sip13 { key: Seed::DEFAULT };
        assert_eq!(sip.hash(b"tidemark"), 0xf85a_1dd2_9492_e5a6);
        for h in [Hash64::XXH3, Hash64::PARQUET, sip, Hash64::Xxh3 { seed: 7 }] {
            let (code, seed) = h.to_parts();
            assert_eq!(Hash64::from_parts(code, seed), Some(h));
        }
        assert_eq!(Hash64::from_parts(CODE_XXH3, Seed::new(0, 1)), None);
        assert_eq!(Hash64::from_parts(1, Seed::DEFAULT), None);
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
