//! [`SplitBlockBloomFilter`]: Parquet's split-block bloom filter (SBBF), with its byte
//! encoding (kind 4 of format version 2) and the zero-copy [`SplitBlockBloomFilterRef`].
//!
//! The layout is Parquet's, bit for bit: the filter is an array of 256-bit blocks of eight
//! little-endian `u32` words. A key's 64-bit hash `h` picks block
//! `((h >> 32) · num_blocks) >> 32` and, with `key = h mod 2^32`, sets bit
//! `(key · SALT[i] mod 2^32) >> 27` of word `i` for each `i` in `0..8`, where `SALT` are
//! Parquet's eight odd constants ([`PARQUET_SALTS`]). So the blocks of a filter hashed
//! with XXH64 (seed 0, [`Hash64::PARQUET`]) are a valid Parquet bloom filter bitset.
//!
//! Probing is branch-free: the eight masks are computed lane by lane and tested with one
//! and-not/or reduction. On x86-64 with AVX2 (detected at run time) that is four
//! instructions of `simd.rs`, the crate's one module with `unsafe`; elsewhere the
//! portable code.

use crate::error::{Error, Result};
use crate::format::{self, corrupt};
use crate::hash::Hash64;
use crate::le::Reader;
use crate::math::{self, MAX_SPLIT_BLOCKS, SPLIT_BLOCK_BITS, SPLIT_BLOCK_HASHES};
use crate::simd;

/// Parquet's eight salts (`BloomFilter.md`, "Technical Approach"): probe `i` of a key
/// sets bit `(key · SALT[i]) >> 27` of word `i` of the key's block.
pub const PARQUET_SALTS: [u32; 8] = [
    0x47b6_137b,
    0x4497_4d91,
    0x8824_ad5b,
    0xa2b7_289d,
    0x7054_95c7,
    0x2df1_424b,
    0x9efc_4947,
    0x5c6b_fb31,
];

/// Bytes of one block.
pub(crate) const BLOCK_BYTES: usize = 32;

/// Items hashed ahead of their probes by the batch lookups.
const BATCH: usize = 32;

/// One 256-bit block, 32-byte aligned so that a block never straddles two cache lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(32))]
pub(crate) struct Block(pub(crate) [u32; 8]);

/// The block a hash selects among `num_blocks` (Parquet's multiply-shift of the upper
/// half). `num_blocks ≤ 2^32`, so the product fits in 64 bits.
#[inline(always)]
pub(crate) fn block_index(hash: u64, num_blocks: u64) -> usize {
    (((hash >> 32).wrapping_mul(num_blocks)) >> 32) as usize
}

/// The eight one-bit masks of a hash's lower half.
#[inline(always)]
pub(crate) fn block_masks(hash: u64) -> [u32; 8] {
    let key = hash as u32;
    let mut masks = [0u32; 8];
    for (m, salt) in masks.iter_mut().zip(PARQUET_SALTS) {
        *m = 1u32 << (key.wrapping_mul(salt) >> 27);
    }
    masks
}

/// Block `index` of a little-endian bitset, `None` past the end.
#[inline(always)]
fn le_block(bitset: &[u8], index: usize) -> Option<[u32; 8]> {
    let start = index.checked_mul(BLOCK_BYTES)?;
    let bytes: &[u8; BLOCK_BYTES] = bitset
        .get(start..start.checked_add(BLOCK_BYTES)?)?
        .try_into()
        .ok()?;
    let mut words = [0u32; 8];
    for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(4)) {
        let mut le = [0u8; 4];
        le.copy_from_slice(chunk);
        *w = u32::from_le_bytes(le);
    }
    Some(words)
}

/// Whether the key of `hash` is possibly in the little-endian bitset of `num_blocks`
/// blocks.
#[inline(always)]
pub(crate) fn bitset_contains(
    probe: simd::Probe,
    bitset: &[u8],
    num_blocks: u64,
    hash: u64,
) -> bool {
    le_block(bitset, block_index(hash, num_blocks)).is_some_and(|b| probe.contains(&Block(b), hash))
}

fn check_num_blocks(num_blocks: u64) -> Result<()> {
    if num_blocks == 0 {
        return Err(Error::InvalidNumBits {
            found: 0,
            granule: SPLIT_BLOCK_BITS,
        });
    }
    if num_blocks > MAX_SPLIT_BLOCKS {
        return Err(Error::TooLarge {
            needed_bits: u128::from(num_blocks) * u128::from(SPLIT_BLOCK_BITS),
            max_bits: math::MAX_NUM_BITS,
        });
    }
    Ok(())
}

fn zeroed_blocks(num_blocks: u64) -> Result<Vec<Block>> {
    check_num_blocks(num_blocks)?;
    let bytes = num_blocks.saturating_mul(BLOCK_BYTES as u64);
    let n = usize::try_from(num_blocks).map_err(|_| Error::Allocation { bytes })?;
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| Error::Allocation { bytes })?;
    v.resize(n, Block::default());
    Ok(v)
}

/// Parquet's split-block bloom filter: one 32-byte block per key, eight bits set, one
/// hash per key.
///
/// * Sized exactly: [`with_rate`](Self::with_rate) takes the fewest blocks whose modelled
///   rate (block loads included, [`math::split_block_fpr`]) reaches the target, about
///   10.5 bits per item at 1%.
/// * Hashed once: [`Hash64`] (XXH3-64 by default; XXH64 for Parquet; keyed SipHash for
///   adversarial keys). `insert_hash`/`contains_hash` take a caller's 64-bit hash.
/// * No false negatives, including after [`union`](Self::union) and a byte round trip.
///
/// ```
/// # fn main() -> Result<(), tidemark_bloom::Error> {
/// use tidemark_bloom::{SplitBlockBloomFilter, SplitBlockBloomFilterRef};
/// let mut filter = SplitBlockBloomFilter::with_rate(1_000, 0.01)?;
/// assert!(filter.insert(b"series-1@1700000000000"));
/// assert!(filter.contains(b"series-1@1700000000000"));
/// let bytes = filter.to_bytes();
/// let view = SplitBlockBloomFilterRef::new(&bytes)?;
/// assert!(view.contains(b"series-1@1700000000000"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitBlockBloomFilter {
    blocks: Vec<Block>,
    num_blocks: u64,
    hasher: Hash64,
    len: u64,
    probe: simd::Probe,
}

impl SplitBlockBloomFilter {
    /// A filter for `expected_items` at false-positive rate `fpr`, hashed with XXH3-64.
    ///
    /// # Errors
    /// [`Error::ZeroCapacity`], [`Error::InvalidFalsePositiveRate`] for `fpr` outside
    /// (0, 1) or NaN, [`Error::TooLarge`] past 2^32 blocks, [`Error::Allocation`].
    pub fn with_rate(expected_items: u64, fpr: f64) -> Result<Self> {
        Self::with_num_blocks(math::split_block_shape(expected_items, fpr)?)
    }

    /// A filter of exactly `num_blocks` 256-bit blocks, hashed with XXH3-64.
    ///
    /// # Errors
    /// [`Error::InvalidNumBits`] for 0 blocks, [`Error::TooLarge`] past 2^32,
    /// [`Error::Allocation`].
    pub fn with_num_blocks(num_blocks: u64) -> Result<Self> {
        Ok(SplitBlockBloomFilter {
            blocks: zeroed_blocks(num_blocks)?,
            num_blocks,
            hasher: Hash64::XXH3,
            len: 0,
            probe: simd::Probe::detect(),
        })
    }

    /// Replaces the key hash. Call it before inserting: the filter is cleared, since keys
    /// hashed another way could no longer be found.
    #[must_use]
    pub fn with_hasher(mut self, hasher: Hash64) -> Self {
        self.hasher = hasher;
        self.clear();
        self
    }

    /// The key hash.
    pub fn hasher(&self) -> Hash64 {
        self.hasher
    }

    /// The 64-bit hash this filter probes `item` with.
    #[inline]
    pub fn hash(&self, item: &[u8]) -> u64 {
        self.hasher.hash(item)
    }

    /// Inserts `item`; true when it was not already (possibly) present.
    #[inline]
    pub fn insert(&mut self, item: &[u8]) -> bool {
        self.insert_hash(self.hasher.hash(item))
    }

    /// Inserts by a caller's 64-bit hash (uniform over all 64 bits, as XXH3, XXH64,
    /// SipHash or a tsid are); true when new. Probe the filter with the same hashes.
    #[inline]
    pub fn insert_hash(&mut self, hash: u64) -> bool {
        let index = block_index(hash, self.num_blocks);
        let new = self
            .blocks
            .get_mut(index)
            .is_some_and(|b| self.probe.insert(b, hash));
        self.len += u64::from(new);
        new
    }

    /// Whether `item` is possibly present (false means certainly absent).
    #[inline]
    pub fn contains(&self, item: &[u8]) -> bool {
        self.contains_hash(self.hasher.hash(item))
    }

    /// Whether the key with this 64-bit hash is possibly present.
    #[inline]
    pub fn contains_hash(&self, hash: u64) -> bool {
        self.blocks
            .get(block_index(hash, self.num_blocks))
            .is_some_and(|b| self.probe.contains(b, hash))
    }

    /// Looks up many items, one answer per item into `out` (cleared first). Items are
    /// hashed in groups of 32 before any block is read, so that the group's memory reads
    /// overlap instead of waiting on each other's hashing.
    pub fn contains_batch<T: AsRef<[u8]>>(&self, items: &[T], out: &mut Vec<bool>) {
        out.clear();
        out.reserve(items.len());
        let mut hashes = [0u64; BATCH];
        for group in items.chunks(BATCH) {
            for (h, item) in hashes.iter_mut().zip(group) {
                *h = self.hasher.hash(item.as_ref());
            }
            simd::contains_many(&self.blocks, self.num_blocks, &hashes[..group.len()], out);
        }
    }

    /// Looks up many precomputed hashes, one answer per hash into `out` (cleared first).
    pub fn contains_hash_batch(&self, hashes: &[u64], out: &mut Vec<bool>) {
        out.clear();
        simd::contains_many(&self.blocks, self.num_blocks, hashes, out);
    }

    /// Inserts every item; returns how many were new.
    pub fn insert_all<I, T>(&mut self, items: I) -> u64
    where
        I: IntoIterator<Item = T>,
        T: AsRef<[u8]>,
    {
        items
            .into_iter()
            .map(|item| u64::from(self.insert(item.as_ref())))
            .sum()
    }

    /// Inserts that reported a new item; after a [`union`](Self::union), the cardinality
    /// estimate of the combined bits.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when nothing was inserted.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of 256-bit blocks.
    pub fn num_blocks(&self) -> u64 {
        self.num_blocks
    }

    /// Bits in the array (`256 · num_blocks`).
    pub fn num_bits(&self) -> u64 {
        self.num_blocks * SPLIT_BLOCK_BITS
    }

    /// Bytes of the bit array (`32 · num_blocks`).
    pub fn size_bytes(&self) -> u64 {
        self.num_blocks * BLOCK_BYTES as u64
    }

    /// The bit array as Parquet's `u32` words (word `8·b + i` is word `i` of block `b`).
    pub fn as_words(&self) -> &[u32] {
        bytemuck::cast_slice(&self.blocks)
    }

    /// The bit array as Parquet stores it: each word little-endian, blocks in order.
    pub fn to_bitset_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.blocks.len() * BLOCK_BYTES);
        put_words(&mut out, self.as_words());
        out
    }

    /// Number of set bits.
    pub fn count_ones(&self) -> u64 {
        self.as_words()
            .iter()
            .map(|w| u64::from(w.count_ones()))
            .sum()
    }

    /// Fraction of bits set, in [0, 1].
    pub fn fill_ratio(&self) -> f64 {
        self.count_ones() as f64 / self.num_bits() as f64
    }

    /// Number of distinct items estimated from the fill.
    pub fn estimated_len(&self) -> u64 {
        math::split_block_estimated_len(self.num_blocks, self.count_ones())
    }

    /// False-positive rate estimated from the bits as they are: the mean over blocks of
    /// the product of the eight words' fills.
    pub fn estimated_fpr(&self) -> f64 {
        estimated_fpr(self.blocks.iter().map(|b| b.0), self.num_blocks)
    }

    /// Rate the sizing model predicts at `items` items.
    pub fn model_fpr(&self, items: u64) -> f64 {
        math::split_block_fpr(self.num_blocks, items)
    }

    /// Adds every item of `other` (bitwise OR). Afterwards [`len`](Self::len) is the
    /// cardinality estimate of the combined bits, kept between the larger of the two
    /// counts and their sum.
    ///
    /// # Errors
    /// [`Error::IncompatibleFilters`] when the block counts or hashes differ.
    pub fn union(&mut self, other: &Self) -> Result<()> {
        self.check_compatible(other)?;
        for (a, b) in self.blocks.iter_mut().zip(&other.blocks) {
            for (x, y) in a.0.iter_mut().zip(b.0) {
                *x |= y;
            }
        }
        let low = self.len.max(other.len);
        let high = self.len.saturating_add(other.len);
        self.len = self.estimated_len().clamp(low, high);
        Ok(())
    }

    /// Number of distinct items the union with `other` would hold, estimated from the OR
    /// of the two bit arrays without building it.
    ///
    /// # Errors
    /// [`Error::IncompatibleFilters`] when the block counts or hashes differ.
    pub fn union_estimated_len(&self, other: &Self) -> Result<u64> {
        self.check_compatible(other)?;
        let ones: u64 = self
            .as_words()
            .iter()
            .zip(other.as_words())
            .map(|(a, b)| u64::from((a | b).count_ones()))
            .sum();
        Ok(math::split_block_estimated_len(self.num_blocks, ones))
    }

    fn check_compatible(&self, other: &Self) -> Result<()> {
        let reason = if self.num_blocks != other.num_blocks {
            format!("num_blocks {} vs {}", self.num_blocks, other.num_blocks)
        } else if self.hasher != other.hasher {
            format!("hash {:?} vs {:?}", self.hasher, other.hasher)
        } else {
            return Ok(());
        };
        Err(Error::IncompatibleFilters { reason })
    }

    /// Removes every item, keeping the shape and hash.
    pub fn clear(&mut self) {
        self.blocks.fill(Block::default());
        self.len = 0;
    }

    /// The filter in the stable byte format (kind 4 of version 2, `docs/bloom-format.md`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            format::HEADER_LEN
                + SPLIT_BODY_LEN
                + self.blocks.len() * BLOCK_BYTES
                + format::TRAILER_LEN,
        );
        self.encode_into(&mut out);
        out
    }

    /// Appends the encoding of [`to_bytes`](Self::to_bytes) to `out` (a reused buffer).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let (code, seed) = self.hasher.to_parts();
        format::put_header_v(
            out,
            format::VERSION_SPLIT_BLOCK,
            format::KIND_SPLIT_BLOCK,
            code,
            0,
            seed,
        );
        out.extend_from_slice(&self.num_bits().to_le_bytes());
        out.extend_from_slice(&SPLIT_BLOCK_HASHES.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        put_words(out, self.as_words());
        format::put_trailer_from(out, start);
    }

    /// Decodes a filter written by [`to_bytes`](Self::to_bytes), checksum included.
    ///
    /// # Errors
    /// [`Error::BadMagic`], [`Error::UnsupportedVersion`], [`Error::WrongKind`],
    /// [`Error::Truncated`], [`Error::Corrupt`], [`Error::ChecksumMismatch`] or
    /// [`Error::Allocation`]; never a panic, whatever the bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        SplitBlockBloomFilterRef::new(bytes)?.to_owned()
    }

    /// A filter over a Parquet bitset (`32 · num_blocks` bytes, words little-endian)
    /// whose keys were hashed with `hasher` (Parquet: [`Hash64::PARQUET`]). The item
    /// count is the estimate from the fill.
    ///
    /// # Errors
    /// [`Error::InvalidNumBits`] unless the length is a positive multiple of 32,
    /// [`Error::TooLarge`], [`Error::Allocation`].
    pub fn from_bitset_bytes(bitset: &[u8], hasher: Hash64) -> Result<Self> {
        if bitset.is_empty() || bitset.len() % BLOCK_BYTES != 0 {
            return Err(Error::InvalidNumBits {
                found: (bitset.len() as u64).saturating_mul(8),
                granule: SPLIT_BLOCK_BITS,
            });
        }
        let mut filter = Self::from_bitset_parts(bitset, hasher, 0)?;
        filter.len = filter.estimated_len();
        Ok(filter)
    }

    /// A filter over a little-endian bitset whose length the caller checked (a positive
    /// multiple of 32 bytes), with a recorded item count.
    pub(crate) fn from_bitset_parts(bitset: &[u8], hasher: Hash64, len: u64) -> Result<Self> {
        let num_blocks = (bitset.len() / BLOCK_BYTES) as u64;
        let mut filter = Self::with_num_blocks(num_blocks)?.with_hasher(hasher);
        for (i, block) in filter.blocks.iter_mut().enumerate() {
            if let Some(words) = le_block(bitset, i) {
                block.0 = words;
            }
        }
        filter.len = len;
        Ok(filter)
    }
}

impl<'a> Extend<&'a [u8]> for SplitBlockBloomFilter {
    fn extend<I: IntoIterator<Item = &'a [u8]>>(&mut self, items: I) {
        self.insert_all(items);
    }
}

fn put_words(out: &mut Vec<u8>, words: &[u32]) {
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
}

/// The mean over blocks of the product of the eight words' fills.
pub(crate) fn estimated_fpr(blocks: impl Iterator<Item = [u32; 8]>, num_blocks: u64) -> f64 {
    if num_blocks == 0 {
        return 1.0;
    }
    let total: f64 = blocks
        .map(|b| {
            b.iter()
                .map(|w| f64::from(w.count_ones()) / 32.0)
                .product::<f64>()
        })
        .sum();
    total / num_blocks as f64
}

/// Bytes of the kind-4 body: num_bits u64, num_hashes u32, reserved u32, len u64,
/// reserved u64. With the 32-byte header, the bitset starts at offset 64.
pub(crate) const SPLIT_BODY_LEN: usize = 32;

/// Checks a split-block shape read from bytes: a positive multiple of 256 bits, at most
/// 2^32 blocks, and 8 hashes. Returns the block count.
pub(crate) fn check_encoded_shape(num_bits: u64, num_hashes: u32) -> Result<u64> {
    if num_bits == 0 || num_bits % SPLIT_BLOCK_BITS != 0 {
        return Err(Error::InvalidNumBits {
            found: num_bits,
            granule: SPLIT_BLOCK_BITS,
        });
    }
    let num_blocks = num_bits / SPLIT_BLOCK_BITS;
    check_num_blocks(num_blocks)?;
    if num_hashes != SPLIT_BLOCK_HASHES {
        return Err(Error::InvalidNumHashes {
            found: num_hashes,
            max: SPLIT_BLOCK_HASHES,
        });
    }
    Ok(num_blocks)
}

/// A read-only split-block filter over encoded bytes (a buffer or a memory map), probed
/// in place without copying.
#[derive(Debug, Clone, Copy)]
pub struct SplitBlockBloomFilterRef<'a> {
    bytes: &'a [u8],
    bitset: &'a [u8],
    num_blocks: u64,
    hasher: Hash64,
    len: u64,
    probe: simd::Probe,
}

impl<'a> SplitBlockBloomFilterRef<'a> {
    /// Opens encoded bytes after checking the structure and the checksum.
    ///
    /// # Errors
    /// [`Error::BadMagic`], [`Error::UnsupportedVersion`], [`Error::WrongKind`],
    /// [`Error::Truncated`], [`Error::Corrupt`] or [`Error::ChecksumMismatch`].
    pub fn new(bytes: &'a [u8]) -> Result<Self> {
        let view = Self::new_without_checksum(bytes)?;
        format::check_crc(bytes)?;
        Ok(view)
    }

    /// Opens encoded bytes checking the structure only (O(1)); see
    /// [`verify`](Self::verify).
    ///
    /// # Errors
    /// As [`new`](Self::new), except [`Error::ChecksumMismatch`].
    pub fn new_without_checksum(bytes: &'a [u8]) -> Result<Self> {
        let (header, mut r) = format::read_header(bytes)?;
        if header.kind != format::KIND_SPLIT_BLOCK {
            return Err(Error::WrongKind {
                expected: "split-block",
                found: header.kind,
            });
        }
        if header.flags != 0 {
            return Err(corrupt("flags", format!("{:#x}, expected 0", header.flags)));
        }
        let hasher = header.hash64()?;
        let num_bits = r.u64("num_bits")?;
        let num_hashes = r.u32("num_hashes")?;
        let reserved = r.u32("reserved")?;
        let len = r.u64("len")?;
        let reserved2 = r.u64("reserved")?;
        let num_blocks = check_encoded_shape(num_bits, num_hashes)?;
        if reserved != 0 || reserved2 != 0 {
            return Err(corrupt("reserved", "non-zero"));
        }
        let bitset = take_bitset(&mut r, num_blocks)?;
        format::expect_end(&r, bytes)?;
        Ok(SplitBlockBloomFilterRef {
            bytes,
            bitset,
            num_blocks,
            hasher,
            len,
            probe: simd::Probe::detect(),
        })
    }

    /// Rescans the checksum of the bytes this view was opened on.
    ///
    /// # Errors
    /// [`Error::ChecksumMismatch`].
    pub fn verify(&self) -> Result<()> {
        format::check_crc(self.bytes)
    }

    /// Whether `item` is possibly present.
    #[inline]
    pub fn contains(&self, item: &[u8]) -> bool {
        self.contains_hash(self.hasher.hash(item))
    }

    /// Whether the key with this 64-bit hash is possibly present.
    #[inline]
    pub fn contains_hash(&self, hash: u64) -> bool {
        bitset_contains(self.probe, self.bitset, self.num_blocks, hash)
    }

    /// Looks up many items, one answer per item into `out` (cleared first); hashes a
    /// group before probing it, as [`SplitBlockBloomFilter::contains_batch`].
    pub fn contains_batch<T: AsRef<[u8]>>(&self, items: &[T], out: &mut Vec<bool>) {
        out.clear();
        out.reserve(items.len());
        let mut hashes = [0u64; BATCH];
        for group in items.chunks(BATCH) {
            for (h, item) in hashes.iter_mut().zip(group) {
                *h = self.hasher.hash(item.as_ref());
            }
            out.extend(hashes[..group.len()].iter().map(|&h| self.contains_hash(h)));
        }
    }

    /// A copy that can be modified.
    ///
    /// # Errors
    /// [`Error::Allocation`].
    pub fn to_owned(&self) -> Result<SplitBlockBloomFilter> {
        SplitBlockBloomFilter::from_bitset_parts(self.bitset, self.hasher, self.len)
    }

    /// The Parquet bitset in place: `32 · num_blocks` bytes, words little-endian.
    pub fn bitset_bytes(&self) -> &'a [u8] {
        self.bitset
    }

    /// The key hash.
    pub fn hasher(&self) -> Hash64 {
        self.hasher
    }

    /// Number of items recorded by the writer.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when the writer recorded no item.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of 256-bit blocks.
    pub fn num_blocks(&self) -> u64 {
        self.num_blocks
    }

    /// Bits in the array.
    pub fn num_bits(&self) -> u64 {
        self.num_blocks * SPLIT_BLOCK_BITS
    }

    /// Bytes of the bit array.
    pub fn size_bytes(&self) -> u64 {
        self.bitset.len() as u64
    }

    /// Fraction of bits set.
    pub fn fill_ratio(&self) -> f64 {
        self.count_ones() as f64 / self.num_bits() as f64
    }

    fn count_ones(&self) -> u64 {
        self.bitset.iter().map(|b| u64::from(b.count_ones())).sum()
    }

    /// Number of distinct items estimated from the fill.
    pub fn estimated_len(&self) -> u64 {
        math::split_block_estimated_len(self.num_blocks, self.count_ones())
    }

    /// False-positive rate estimated from the bits.
    pub fn estimated_fpr(&self) -> f64 {
        let blocks = (0..self.num_blocks as usize).filter_map(|i| le_block(self.bitset, i));
        estimated_fpr(blocks, self.num_blocks)
    }
}

/// Reads the bitset of `num_blocks` blocks, checking that it fits.
pub(crate) fn take_bitset<'a>(r: &mut Reader<'a>, num_blocks: u64) -> Result<&'a [u8]> {
    let n = usize::try_from(num_blocks.saturating_mul(BLOCK_BYTES as u64)).map_err(|_| {
        Error::TooLarge {
            needed_bits: u128::from(num_blocks) * u128::from(SPLIT_BLOCK_BITS),
            max_bits: math::MAX_NUM_BITS,
        }
    })?;
    r.take(n, "bitset")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parquet's reference algorithm, written out with branches and plain indexing.
    fn parquet_probe(num_blocks: u64, hash: u64) -> (usize, [u32; 8]) {
        let block = ((hash >> 32) * num_blocks) >> 32;
        let key = hash as u32;
        let mut mask = [0u32; 8];
        for i in 0..8 {
            let y = key.wrapping_mul(PARQUET_SALTS[i]);
            mask[i] = 1 << (y >> 27);
        }
        (block as usize, mask)
    }

    #[test]
    fn probes_equal_parquets_algorithm() {
        let mut h = 0x1234_5678_9abc_def0u64;
        for num_blocks in [1u64, 2, 3, 1000, 1 << 20, MAX_SPLIT_BLOCKS] {
            for _ in 0..1000 {
                h = h.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) ^ 0xdead_beef;
                let (b, m) = parquet_probe(num_blocks, h);
                assert_eq!(block_index(h, num_blocks), b);
                assert!((b as u64) < num_blocks);
                assert_eq!(block_masks(h), m);
            }
        }
        assert_eq!(
            block_index(u64::MAX, MAX_SPLIT_BLOCKS),
            (MAX_SPLIT_BLOCKS - 1) as usize
        );
    }

    #[test]
    fn blocks_are_32_byte_aligned() {
        let f = SplitBlockBloomFilter::with_num_blocks(5).unwrap();
        assert_eq!(f.as_words().as_ptr() as usize % 32, 0);
        assert_eq!(f.as_words().len(), 40);
    }
}
