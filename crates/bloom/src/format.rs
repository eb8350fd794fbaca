//! The stable byte format of every filter type, and zero-copy views over it.
//!
//! The layout is specified in `docs/bloom-format.md`. In short (all integers
//! little-endian):
//!
//! ```text
//! header   magic "TMBL" | version u32 | kind u8 | hash u8 | flags u16 | reserved u32
//!          | seed k0 u64 | seed k1 u64                                    (32 bytes)
//! kind 1/2 num_bits u64 | num_hashes u32 | reserved u32 | len u64 | words (num_bits/8)
//! kind 3   capacity u64 | error f64 | expansion u32 | layer count u32
//!          | count × (capacity u64 | error f64 | len u64 | num_bits u64 | num_hashes u32
//!          | reserved u32) | the layers' words, back to back
//! trailer  crc32 u32 (of every byte before it) | magic "TMBL"
//! ```
//!
//! Readers check the magic at both ends, the version, the kind, every size against the
//! buffer (with checked arithmetic, before any allocation) and the checksum.

use std::marker::PhantomData;

use crate::error::{Error, Result};
use crate::filter::check_shape;
use crate::hash::{Hash64, Seed};
use crate::layout::sealed::Sealed as _;
use crate::layout::{Blocked, Layout, Standard};
use crate::le::Reader;
use crate::math::MAX_NUM_BITS;
use crate::words::{LeWords, Words};

/// First and last four bytes of every encoded filter.
pub const MAGIC: [u8; 4] = *b"TMBL";

/// The newest version this build writes: 2, the version of the split-block kinds (4 and
/// 5). The kinds of version 1 (standard, blocked, scalable) keep their version-1 layout
/// and are still written as version 1, byte for byte as before, so that files holding
/// them (segments) do not change.
pub const FORMAT_VERSION: u32 = 2;

/// The oldest version this build reads.
pub const MIN_FORMAT_VERSION: u32 = 1;

/// The version of kinds 1–3 (SipHash-1-3-128, 64-bit words).
pub(crate) const VERSION_1: u32 = 1;

/// The version of kinds 4 and 5 (split blocks, 64-bit key hashes).
pub(crate) const VERSION_SPLIT_BLOCK: u32 = 2;

/// Hash algorithm code of SipHash-1-3 with 128-bit output.
pub const HASH_SIPHASH13_128: u8 = 1;

/// Kind code of a scalable filter.
pub const KIND_SCALABLE: u8 = 3;

/// Kind code of a split-block filter (version 2).
pub const KIND_SPLIT_BLOCK: u8 = 4;

/// Kind code of a scalable filter of split-block layers (version 2).
pub const KIND_SCALABLE_SPLIT_BLOCK: u8 = 5;

/// Flag bit of a non-scaling scalable filter.
pub const FLAG_NONSCALING: u16 = 1;

/// The most layers a scalable filter holds.
pub const MAX_LAYERS: usize = 1024;

pub(crate) const HEADER_LEN: usize = 32;
pub(crate) const FILTER_BODY_LEN: usize = 24;
pub(crate) const SCALABLE_BODY_LEN: usize = 24;
pub(crate) const SCALABLE_SPLIT_BODY_LEN: usize = 40;
pub(crate) const LAYER_RECORD_LEN: usize = 40;
pub(crate) const TRAILER_LEN: usize = 8;

fn put_header(out: &mut Vec<u8>, kind: u8, flags: u16, seed: Seed) {
    put_header_v(out, VERSION_1, kind, HASH_SIPHASH13_128, flags, seed);
}

/// Writes the 32-byte header of any version.
pub(crate) fn put_header_v(
    out: &mut Vec<u8>,
    version: u32,
    kind: u8,
    hash: u8,
    flags: u16,
    seed: Seed,
) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.push(kind);
    out.push(hash);
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&seed.k0.to_le_bytes());
    out.extend_from_slice(&seed.k1.to_le_bytes());
}

fn put_words(out: &mut Vec<u8>, words: &[u64]) {
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
}

fn put_trailer(out: &mut Vec<u8>) {
    put_trailer_from(out, 0);
}

/// Appends the trailer of the encoding that starts at `out[start]`.
pub(crate) fn put_trailer_from(out: &mut Vec<u8>, start: usize) {
    let crc = crc32fast::hash(out.get(start..).unwrap_or_default());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&MAGIC);
}

pub(crate) fn encode_filter<L: Layout>(
    num_bits: u64,
    num_hashes: u32,
    seed: Seed,
    len: u64,
    words: &[u64],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + FILTER_BODY_LEN + words.len() * 8 + TRAILER_LEN);
    put_header(&mut out, L::KIND, 0, seed);
    out.extend_from_slice(&num_bits.to_le_bytes());
    out.extend_from_slice(&num_hashes.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    put_words(&mut out, words);
    put_trailer(&mut out);
    out
}

/// One layer of a scalable filter as the encoder sees it.
pub(crate) struct LayerParts<'a> {
    pub capacity: u64,
    pub error: f64,
    pub len: u64,
    pub num_bits: u64,
    pub num_hashes: u32,
    pub words: LayerWords<'a>,
}

/// A layer's bit array: 64-bit words (standard layers) or Parquet's 32-bit words
/// (split-block layers); both are written little-endian.
pub(crate) enum LayerWords<'a> {
    U64(&'a [u64]),
    U32(&'a [u32]),
}

impl LayerWords<'_> {
    fn len_bytes(&self) -> usize {
        match self {
            LayerWords::U64(w) => w.len() * 8,
            LayerWords::U32(w) => w.len() * 4,
        }
    }

    fn put(&self, out: &mut Vec<u8>) {
        match self {
            LayerWords::U64(w) => put_words(out, w),
            LayerWords::U32(w) => {
                for x in *w {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
    }
}

/// How a scalable filter's layers are laid out and hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalableLayout {
    /// Standard layers hashed with SipHash-1-3-128 (kind 3, version 1).
    Standard,
    /// Split-block layers sharing one 64-bit hash per key (kind 5, version 2).
    SplitBlock(Hash64),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct ScalableParams {
    pub capacity: u64,
    pub error: f64,
    pub expansion: u32,
    pub nonscaling: bool,
    pub seed: Seed,
    pub layout: ScalableLayout,
    pub tightening: f64,
}

pub(crate) fn encode_scalable(params: &ScalableParams, layers: &[LayerParts<'_>]) -> Vec<u8> {
    let words: usize = layers.iter().map(|l| l.words.len_bytes()).sum();
    let mut out = Vec::with_capacity(
        HEADER_LEN
            + SCALABLE_SPLIT_BODY_LEN
            + layers.len() * LAYER_RECORD_LEN
            + words
            + TRAILER_LEN,
    );
    let flags = if params.nonscaling {
        FLAG_NONSCALING
    } else {
        0
    };
    match params.layout {
        ScalableLayout::Standard => put_header(&mut out, KIND_SCALABLE, flags, params.seed),
        ScalableLayout::SplitBlock(hasher) => {
            let (code, seed) = hasher.to_parts();
            put_header_v(
                &mut out,
                VERSION_SPLIT_BLOCK,
                KIND_SCALABLE_SPLIT_BLOCK,
                code,
                flags,
                seed,
            );
        }
    }
    out.extend_from_slice(&params.capacity.to_le_bytes());
    out.extend_from_slice(&params.error.to_bits().to_le_bytes());
    out.extend_from_slice(&params.expansion.to_le_bytes());
    out.extend_from_slice(&(layers.len() as u32).to_le_bytes());
    if let ScalableLayout::SplitBlock(_) = params.layout {
        out.extend_from_slice(&params.tightening.to_bits().to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
    }
    for l in layers {
        out.extend_from_slice(&l.capacity.to_le_bytes());
        out.extend_from_slice(&l.error.to_bits().to_le_bytes());
        out.extend_from_slice(&l.len.to_le_bytes());
        out.extend_from_slice(&l.num_bits.to_le_bytes());
        out.extend_from_slice(&l.num_hashes.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
    }
    for l in layers {
        l.words.put(&mut out);
    }
    put_trailer(&mut out);
    out
}

/// The decoded common header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    pub version: u32,
    pub kind: u8,
    pub hash: u8,
    pub flags: u16,
    pub seed: Seed,
}

impl Header {
    /// The 64-bit key hash of a version-2 header.
    pub(crate) fn hash64(&self) -> Result<Hash64> {
        Hash64::from_parts(self.hash, self.seed).ok_or_else(|| {
            corrupt(
                "hash algorithm",
                format!(
                    "code {} with seed words {:#x}, {:#x}",
                    self.hash, self.seed.k0, self.seed.k1
                ),
            )
        })
    }
}

pub(crate) fn corrupt(field: &'static str, detail: impl Into<String>) -> Error {
    Error::Corrupt {
        field,
        detail: detail.into(),
    }
}

/// Checks both magics, then reads the header. Returns the reader positioned after it.
pub(crate) fn read_header(bytes: &[u8]) -> Result<(Header, Reader<'_>)> {
    let min = HEADER_LEN + TRAILER_LEN;
    if bytes.len() < min {
        return Err(Error::Truncated {
            section: "header and trailer",
            needed: min as u64,
            available: bytes.len() as u64,
        });
    }
    let mut r = Reader::new(bytes);
    let magic = r.magic("magic")?;
    if magic != MAGIC {
        return Err(Error::BadMagic { found: magic });
    }
    let mut tail = Reader::new(&bytes[bytes.len() - 4..]);
    let end_magic = tail.magic("trailing magic")?;
    if end_magic != MAGIC {
        return Err(Error::BadMagic { found: end_magic });
    }
    let version = r.u32("version")?;
    if !(MIN_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(Error::UnsupportedVersion {
            found: version,
            min: MIN_FORMAT_VERSION,
            max: FORMAT_VERSION,
        });
    }
    let kind = r.u8("kind")?;
    let hash = r.u8("hash algorithm")?;
    // Each version has its own kinds and hashes: version 1 the SipHash-128 kinds 1–3,
    // version 2 the split-block kinds 4–5 with a 64-bit hash.
    let (kinds, hashes) = if version == VERSION_1 {
        (1..=KIND_SCALABLE, HASH_SIPHASH13_128..=HASH_SIPHASH13_128)
    } else {
        (KIND_SPLIT_BLOCK..=KIND_SCALABLE_SPLIT_BLOCK, 2..=4)
    };
    if !kinds.contains(&kind) {
        return Err(corrupt("kind", format!("code {kind} in version {version}")));
    }
    if !hashes.contains(&hash) {
        return Err(corrupt(
            "hash algorithm",
            format!("unknown code {hash} in version {version}"),
        ));
    }
    let flags = r.u16("flags")?;
    let reserved = r.u32("reserved")?;
    if reserved != 0 {
        return Err(corrupt("reserved", format!("{reserved:#x}, expected 0")));
    }
    let seed = Seed::new(r.u64("seed k0")?, r.u64("seed k1")?);
    Ok((
        Header {
            version,
            kind,
            hash,
            flags,
            seed,
        },
        r,
    ))
}

/// Verifies the trailer's CRC32 over every byte before it.
pub(crate) fn check_crc(bytes: &[u8]) -> Result<()> {
    let body_end = bytes.len().saturating_sub(TRAILER_LEN);
    let mut r = Reader::new(&bytes[body_end..]);
    let expected = r.u32("checksum")?;
    let got = crc32fast::hash(&bytes[..body_end]);
    if expected != got {
        return Err(Error::ChecksumMismatch { expected, got });
    }
    Ok(())
}

/// Reads `num_bits / 8` bytes of words, checking that they fit.
fn take_words<'a>(r: &mut Reader<'a>, num_bits: u64) -> Result<LeWords<'a>> {
    let n = usize::try_from(num_bits / 8).map_err(|_| Error::TooLarge {
        needed_bits: u128::from(num_bits),
        max_bits: MAX_NUM_BITS,
    })?;
    Ok(LeWords(r.take(n, "bit array")?))
}

pub(crate) fn expect_end(r: &Reader<'_>, bytes: &[u8]) -> Result<()> {
    let end = bytes.len() - TRAILER_LEN;
    if r.position() != end {
        return Err(corrupt(
            "length",
            format!(
                "{} bytes between the fields and the trailer",
                end.saturating_sub(r.position())
            ),
        ));
    }
    Ok(())
}

/// A read-only filter over encoded bytes (a buffer or a memory map), without copying.
///
/// Use it through [`BloomFilterRef`] and [`BlockedBloomFilterRef`]. Lookups read the bit
/// array in place, so opening a multi-gigabyte memory-mapped filter costs only the
/// header checks (and one checksum pass, unless opened with
/// [`new_without_checksum`](Self::new_without_checksum)).
#[derive(Debug, Clone, Copy)]
pub struct FilterRef<'a, L: Layout> {
    bytes: &'a [u8],
    words: LeWords<'a>,
    num_bits: u64,
    num_hashes: u32,
    seed: Seed,
    len: u64,
    layout: PhantomData<L>,
}

/// Zero-copy view of an encoded [`crate::BloomFilter`].
pub type BloomFilterRef<'a> = FilterRef<'a, Standard>;

/// Zero-copy view of an encoded [`crate::BlockedBloomFilter`].
pub type BlockedBloomFilterRef<'a> = FilterRef<'a, Blocked>;

impl<'a, L: Layout> FilterRef<'a, L> {
    /// Opens encoded bytes after checking the structure and the checksum.
    ///
    /// # Errors
    /// [`Error::BadMagic`], [`Error::UnsupportedVersion`], [`Error::WrongKind`],
    /// [`Error::Truncated`], [`Error::Corrupt`] or [`Error::ChecksumMismatch`].
    pub fn new(bytes: &'a [u8]) -> Result<Self> {
        let view = Self::new_without_checksum(bytes)?;
        check_crc(bytes)?;
        Ok(view)
    }

    /// Opens encoded bytes checking the structure only (magics, version, kind, sizes),
    /// not the checksum: O(1) for a huge memory-mapped filter. Call
    /// [`verify`](Self::verify) when the bytes may have been damaged.
    ///
    /// # Errors
    /// As [`new`](Self::new), except [`Error::ChecksumMismatch`].
    pub fn new_without_checksum(bytes: &'a [u8]) -> Result<Self> {
        let (header, mut r) = read_header(bytes)?;
        if header.kind != L::KIND {
            return Err(Error::WrongKind {
                expected: L::NAME,
                found: header.kind,
            });
        }
        if header.flags != 0 {
            return Err(corrupt("flags", format!("{:#x}, expected 0", header.flags)));
        }
        let num_bits = r.u64("num_bits")?;
        let num_hashes = r.u32("num_hashes")?;
        let reserved = r.u32("reserved")?;
        let len = r.u64("len")?;
        check_shape::<L>(num_bits, num_hashes)?;
        if reserved != 0 {
            return Err(corrupt("reserved", format!("{reserved:#x}, expected 0")));
        }
        let words = take_words(&mut r, num_bits)?;
        expect_end(&r, bytes)?;
        Ok(FilterRef {
            bytes,
            words,
            num_bits,
            num_hashes,
            seed: header.seed,
            len,
            layout: PhantomData,
        })
    }

    /// Rescans the checksum of the bytes this view was opened on.
    ///
    /// # Errors
    /// [`Error::ChecksumMismatch`].
    pub fn verify(&self) -> Result<()> {
        check_crc(self.bytes)
    }

    /// Whether `item` is possibly present.
    #[inline]
    pub fn contains(&self, item: &[u8]) -> bool {
        self.contains_hash(self.seed.hash(item))
    }

    /// Whether the item with this 128-bit hash is possibly present.
    #[inline]
    pub fn contains_hash(&self, hash: u128) -> bool {
        L::contains(&self.words, self.num_bits, self.num_hashes, hash)
    }

    pub(crate) fn words(&self) -> LeWords<'a> {
        self.words
    }

    /// Number of items recorded by the writer.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when the writer recorded no item.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bits in the array.
    pub fn num_bits(&self) -> u64 {
        self.num_bits
    }

    /// Probes per item.
    pub fn num_hashes(&self) -> u32 {
        self.num_hashes
    }

    /// The hash seed.
    pub fn seed(&self) -> Seed {
        self.seed
    }

    /// Bytes of the bit array.
    pub fn size_bytes(&self) -> u64 {
        self.num_bits / 8
    }

    /// Fraction of bits set.
    pub fn fill_ratio(&self) -> f64 {
        self.words.count_ones() as f64 / self.num_bits as f64
    }

    /// Number of distinct items estimated from the fill.
    pub fn estimated_len(&self) -> u64 {
        L::estimated_len(self.num_bits, self.num_hashes, self.words.count_ones())
    }

    /// False-positive rate estimated from the bits.
    pub fn estimated_fpr(&self) -> f64 {
        L::estimated_fpr(&self.words, self.num_bits, self.num_hashes)
    }
}

/// One decoded layer of an encoded scalable filter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayerRef<'a> {
    pub capacity: u64,
    pub error: f64,
    pub len: u64,
    pub num_bits: u64,
    pub num_hashes: u32,
    pub words: LeWords<'a>,
}

/// A decoded scalable filter: parameters plus borrowed layers.
#[derive(Debug, Clone)]
pub(crate) struct ScalableParts<'a> {
    pub params: ScalableParams,
    pub layers: Vec<LayerRef<'a>>,
}

fn check_rate(field: &'static str, error: f64) -> Result<()> {
    if !(error > 0.0 && error < 1.0) {
        return Err(corrupt(field, format!("{error} is outside (0, 1)")));
    }
    Ok(())
}

/// Decodes an encoded scalable filter without copying its bits. With `checksum`, the CRC
/// is verified too.
pub(crate) fn decode_scalable(bytes: &[u8], checksum: bool) -> Result<ScalableParts<'_>> {
    let (header, mut r) = read_header(bytes)?;
    let layout = match header.kind {
        KIND_SCALABLE => ScalableLayout::Standard,
        KIND_SCALABLE_SPLIT_BLOCK => ScalableLayout::SplitBlock(header.hash64()?),
        found => {
            return Err(Error::WrongKind {
                expected: "scalable",
                found,
            });
        }
    };
    if header.flags & !FLAG_NONSCALING != 0 {
        return Err(corrupt(
            "flags",
            format!("unknown bits {:#x}", header.flags),
        ));
    }
    let capacity = r.u64("capacity")?;
    let error = r.f64("error rate")?;
    let expansion = r.u32("expansion")?;
    let count = r.u32("layer count")? as usize;
    let tightening = match layout {
        ScalableLayout::Standard => crate::scalable::TIGHTENING_RATIO,
        ScalableLayout::SplitBlock(_) => {
            let ratio = r.f64("tightening ratio")?;
            check_rate("tightening ratio", ratio)?;
            let reserved = r.u64("reserved")?;
            if reserved != 0 {
                return Err(corrupt("reserved", format!("{reserved:#x}, expected 0")));
            }
            ratio
        }
    };
    let nonscaling = header.flags & FLAG_NONSCALING != 0;
    if capacity == 0 {
        return Err(corrupt("capacity", "0"));
    }
    check_rate("error rate", error)?;
    if expansion == 0 && !nonscaling {
        return Err(corrupt("expansion", "0 in a scaling filter"));
    }
    if count == 0 || count > MAX_LAYERS || (nonscaling && count != 1) {
        return Err(corrupt(
            "layer count",
            format!("{count} (allowed 1..={MAX_LAYERS}, 1 when non-scaling)"),
        ));
    }
    let mut records = Vec::with_capacity(count);
    let mut total_bits: u64 = 0;
    for _ in 0..count {
        let cap = r.u64("layer capacity")?;
        let err = r.f64("layer error")?;
        let len = r.u64("layer len")?;
        let num_bits = r.u64("layer num_bits")?;
        let num_hashes = r.u32("layer num_hashes")?;
        let reserved = r.u32("layer reserved")?;
        if cap == 0 {
            return Err(corrupt("layer capacity", "0"));
        }
        check_rate("layer error", err)?;
        match layout {
            ScalableLayout::Standard => check_shape::<Standard>(num_bits, num_hashes)?,
            ScalableLayout::SplitBlock(_) => {
                crate::split::check_encoded_shape(num_bits, num_hashes)?;
            }
        }
        if reserved != 0 {
            return Err(corrupt("layer reserved", format!("{reserved:#x}")));
        }
        total_bits = total_bits.saturating_add(num_bits);
        if total_bits > MAX_NUM_BITS {
            return Err(Error::TooLarge {
                needed_bits: u128::from(total_bits),
                max_bits: MAX_NUM_BITS,
            });
        }
        records.push((cap, err, len, num_bits, num_hashes));
    }
    let mut layers = Vec::with_capacity(count);
    for (capacity, error, len, num_bits, num_hashes) in records {
        layers.push(LayerRef {
            capacity,
            error,
            len,
            num_bits,
            num_hashes,
            words: take_words(&mut r, num_bits)?,
        });
    }
    expect_end(&r, bytes)?;
    if checksum {
        check_crc(bytes)?;
    }
    Ok(ScalableParts {
        params: ScalableParams {
            capacity,
            error,
            expansion,
            nonscaling,
            seed: header.seed,
            layout,
            tightening,
        },
        layers,
    })
}

/// A read-only scalable filter over encoded bytes, without copying its bit arrays.
#[derive(Debug, Clone)]
pub struct ScalableBloomFilterRef<'a> {
    bytes: &'a [u8],
    parts: ScalableParts<'a>,
}

impl<'a> ScalableBloomFilterRef<'a> {
    /// Opens encoded bytes after checking the structure and the checksum.
    ///
    /// # Errors
    /// Any decoding error of [`Error`].
    pub fn new(bytes: &'a [u8]) -> Result<Self> {
        Ok(ScalableBloomFilterRef {
            bytes,
            parts: decode_scalable(bytes, true)?,
        })
    }

    /// Opens encoded bytes checking the structure only, not the checksum.
    ///
    /// # Errors
    /// As [`new`](Self::new), except [`Error::ChecksumMismatch`].
    pub fn new_without_checksum(bytes: &'a [u8]) -> Result<Self> {
        Ok(ScalableBloomFilterRef {
            bytes,
            parts: decode_scalable(bytes, false)?,
        })
    }

    /// Rescans the checksum of the bytes this view was opened on.
    ///
    /// # Errors
    /// [`Error::ChecksumMismatch`].
    pub fn verify(&self) -> Result<()> {
        check_crc(self.bytes)
    }

    pub(crate) fn params(&self) -> ScalableParams {
        self.parts.params
    }

    pub(crate) fn layer_refs(&self) -> &[LayerRef<'a>] {
        &self.parts.layers
    }

    /// Whether `item` is possibly present in some layer (hashed once, newest first).
    #[inline]
    pub fn contains(&self, item: &[u8]) -> bool {
        self.contains_hash(self.hash(item))
    }

    /// The key hash this filter probes `item` with: SipHash-1-3-128 for standard layers,
    /// the 64-bit [`Hash64`] (zero-extended) for split-block layers.
    #[inline]
    pub fn hash(&self, item: &[u8]) -> u128 {
        match self.parts.params.layout {
            ScalableLayout::Standard => self.parts.params.seed.hash(item),
            ScalableLayout::SplitBlock(h) => u128::from(h.hash(item)),
        }
    }

    /// Whether the item with this hash (see [`hash`](Self::hash)) is possibly present in
    /// some layer.
    pub fn contains_hash(&self, hash: u128) -> bool {
        let layers = self.parts.layers.iter().rev();
        match self.parts.params.layout {
            ScalableLayout::Standard => layers
                .into_iter()
                .any(|l| Standard::contains(&l.words, l.num_bits, l.num_hashes, hash)),
            ScalableLayout::SplitBlock(_) => {
                let h = hash as u64;
                let probe = crate::simd::Probe::detect();
                layers.into_iter().any(|l| {
                    crate::split::bitset_contains(
                        probe,
                        l.words.0,
                        l.num_bits / crate::math::SPLIT_BLOCK_BITS,
                        h,
                    )
                })
            }
        }
    }

    /// The layout and hash of the layers.
    pub fn layout(&self) -> ScalableLayout {
        self.parts.params.layout
    }

    /// Items added.
    pub fn len(&self) -> u64 {
        // Saturating: the layers' figures come from the bytes.
        self.parts
            .layers
            .iter()
            .fold(0, |sum, l| sum.saturating_add(l.len))
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sum of the layers' capacities.
    pub fn capacity(&self) -> u64 {
        // Saturating: the layers' figures come from the bytes.
        self.parts
            .layers
            .iter()
            .fold(0, |sum, l| sum.saturating_add(l.capacity))
    }

    /// Number of layers.
    pub fn num_layers(&self) -> usize {
        self.parts.layers.len()
    }

    /// Each layer's figures, oldest first.
    pub fn layers(&self) -> Vec<crate::LayerInfo> {
        self.parts
            .layers
            .iter()
            .map(|l| crate::LayerInfo {
                capacity: l.capacity,
                error_rate: l.error,
                items: l.len,
                num_bits: l.num_bits,
                num_hashes: l.num_hashes,
                size_bytes: l.num_bits / 8,
            })
            .collect()
    }

    /// The requested overall error rate.
    pub fn error_rate(&self) -> f64 {
        self.parts.params.error
    }

    /// Capacity factor between layers.
    pub fn expansion(&self) -> u32 {
        self.parts.params.expansion
    }

    /// True for a non-scaling filter.
    pub fn is_nonscaling(&self) -> bool {
        self.parts.params.nonscaling
    }

    /// The hash seed.
    pub fn seed(&self) -> Seed {
        self.parts.params.seed
    }

    /// Bytes of all bit arrays.
    pub fn size_bytes(&self) -> u64 {
        self.parts.layers.iter().map(|l| l.num_bits / 8).sum()
    }
}
