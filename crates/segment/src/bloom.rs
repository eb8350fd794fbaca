//! The bloom section's filter: a Parquet-layout split-block filter hashed with XXH3 in
//! segments written since format version 3 (the layout `tidemark-bloom` probes fastest,
//! and one a Parquet writer can copy), or the cache-blocked filter of older segments.

use tidemark_bloom::{
    BlockedBloomFilter, BlockedBloomFilterRef, SplitBlockBloomFilter, SplitBlockBloomFilterRef,
};

use crate::error::Result;

/// An owned bloom filter of a segment's ids: built by writers, OR-ed by merges.
#[derive(Debug, Clone)]
pub enum SegmentBloom {
    /// Split-block (Parquet layout, XXH3): what writers build.
    SplitBlock(SplitBlockBloomFilter),
    /// Cache-blocked, 512-bit blocks (SipHash): segments written before.
    Blocked(BlockedBloomFilter),
}

impl SegmentBloom {
    /// The filter a writer builds for `capacity` ids at rate `fpr`.
    ///
    /// # Errors
    /// Bloom sizing errors (a rate outside (0, 1)).
    pub fn with_capacity(capacity: u64, fpr: f64) -> Result<SegmentBloom> {
        Ok(SegmentBloom::SplitBlock(SplitBlockBloomFilter::with_rate(
            capacity, fpr,
        )?))
    }

    /// Decodes a bloom section (either layout).
    ///
    /// # Errors
    /// Bloom format errors.
    pub fn from_bytes(bytes: &[u8]) -> Result<SegmentBloom> {
        match SplitBlockBloomFilter::from_bytes(bytes) {
            Ok(f) => Ok(SegmentBloom::SplitBlock(f)),
            Err(tidemark_bloom::Error::WrongKind { .. }) => Ok(SegmentBloom::Blocked(
                BlockedBloomFilter::from_bytes(bytes)?,
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// Adds an id.
    pub fn insert(&mut self, id: &[u8]) {
        match self {
            SegmentBloom::SplitBlock(f) => {
                f.insert(id);
            }
            SegmentBloom::Blocked(f) => {
                f.insert(id);
            }
        }
    }

    /// ORs `other` into `self`.
    ///
    /// # Errors
    /// Filters of different layouts or shapes.
    pub fn union(&mut self, other: &SegmentBloom) -> Result<()> {
        match (self, other) {
            (SegmentBloom::SplitBlock(a), SegmentBloom::SplitBlock(b)) => Ok(a.union(b)?),
            (SegmentBloom::Blocked(a), SegmentBloom::Blocked(b)) => Ok(a.union(b)?),
            _ => Err(tidemark_bloom::Error::WrongKind {
                expected: "a bloom filter of the same layout",
                found: 0,
            }
            .into()),
        }
    }

    /// The false-positive rate its fill implies.
    pub fn estimated_fpr(&self) -> f64 {
        match self {
            SegmentBloom::SplitBlock(f) => f.estimated_fpr(),
            SegmentBloom::Blocked(f) => f.estimated_fpr(),
        }
    }

    /// The encoded filter (the bloom section's bytes).
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            SegmentBloom::SplitBlock(f) => f.to_bytes(),
            SegmentBloom::Blocked(f) => f.to_bytes(),
        }
    }
}

/// A segment's bloom filter read in place.
#[derive(Debug, Clone, Copy)]
pub enum SegmentBloomRef<'a> {
    /// Split-block (Parquet layout, XXH3).
    SplitBlock(SplitBlockBloomFilterRef<'a>),
    /// Cache-blocked (older segments).
    Blocked(BlockedBloomFilterRef<'a>),
}

impl<'a> SegmentBloomRef<'a> {
    /// A view of a bloom section, checked (`verify_crc`) or not (the segment checked the
    /// section's CRC on open).
    ///
    /// # Errors
    /// Bloom format errors.
    pub fn new(bytes: &'a [u8], verify_crc: bool) -> Result<SegmentBloomRef<'a>> {
        let split = if verify_crc {
            SplitBlockBloomFilterRef::new(bytes)
        } else {
            SplitBlockBloomFilterRef::new_without_checksum(bytes)
        };
        match split {
            Ok(f) => Ok(SegmentBloomRef::SplitBlock(f)),
            Err(tidemark_bloom::Error::WrongKind { .. }) => {
                let blocked = if verify_crc {
                    BlockedBloomFilterRef::new(bytes)?
                } else {
                    BlockedBloomFilterRef::new_without_checksum(bytes)?
                };
                Ok(SegmentBloomRef::Blocked(blocked))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Rescans the filter's own checksum.
    ///
    /// # Errors
    /// A checksum mismatch.
    pub fn verify(&self) -> Result<()> {
        match self {
            SegmentBloomRef::SplitBlock(f) => Ok(f.verify()?),
            SegmentBloomRef::Blocked(f) => Ok(f.verify()?),
        }
    }

    /// Whether `id` may be in the segment.
    pub fn contains(&self, id: &[u8]) -> bool {
        match self {
            SegmentBloomRef::SplitBlock(f) => f.contains(id),
            SegmentBloomRef::Blocked(f) => f.contains(id),
        }
    }

    /// `"split-block"` or `"blocked"`.
    pub fn layout(&self) -> &'static str {
        match self {
            SegmentBloomRef::SplitBlock(_) => "split-block",
            SegmentBloomRef::Blocked(_) => "blocked",
        }
    }

    /// Bits in the filter.
    pub fn num_bits(&self) -> u64 {
        match self {
            SegmentBloomRef::SplitBlock(f) => f.num_bits(),
            SegmentBloomRef::Blocked(f) => f.num_bits(),
        }
    }

    /// Bits set per id.
    pub fn num_hashes(&self) -> u32 {
        match self {
            SegmentBloomRef::SplitBlock(_) => 8,
            SegmentBloomRef::Blocked(f) => f.num_hashes(),
        }
    }

    /// Ids inserted.
    pub fn len(&self) -> u64 {
        match self {
            SegmentBloomRef::SplitBlock(f) => f.len(),
            SegmentBloomRef::Blocked(f) => f.len(),
        }
    }

    /// Whether no id was inserted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fraction of bits set.
    pub fn fill_ratio(&self) -> f64 {
        match self {
            SegmentBloomRef::SplitBlock(f) => f.fill_ratio(),
            SegmentBloomRef::Blocked(f) => f.fill_ratio(),
        }
    }

    /// Encoded size in bytes.
    pub fn size_bytes(&self) -> u64 {
        match self {
            SegmentBloomRef::SplitBlock(f) => f.size_bytes(),
            SegmentBloomRef::Blocked(f) => f.size_bytes(),
        }
    }

    /// The false-positive rate its fill implies.
    pub fn estimated_fpr(&self) -> f64 {
        match self {
            SegmentBloomRef::SplitBlock(f) => f.estimated_fpr(),
            SegmentBloomRef::Blocked(f) => f.estimated_fpr(),
        }
    }
}
