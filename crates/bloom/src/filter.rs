//! [`Filter`]: a bloom filter over one bit array, generic over its [`Layout`]; used as
//! [`BloomFilter`] (classic) and [`BlockedBloomFilter`] (cache-blocked).

use std::fmt;
use std::marker::PhantomData;

use crate::error::{Error, Result};
use crate::format;
use crate::hash::Seed;
use crate::layout::{Blocked, Layout, Standard};
use crate::math::MAX_NUM_BITS;
use crate::words::{Bits, Words};

/// A bloom filter over one bit array, with the probe layout `L`.
///
/// Use it through its two aliases, [`BloomFilter`] and [`BlockedBloomFilter`]. Both
/// answer "possibly present" or "certainly absent"; an item that was inserted is always
/// reported present (no false negatives), including after [`union`](Self::union) and a
/// byte round trip.
#[derive(Clone, PartialEq, Eq)]
pub struct Filter<L: Layout> {
    words: Bits,
    num_bits: u64,
    num_hashes: u32,
    seed: Seed,
    len: u64,
    layout: PhantomData<L>,
}

/// The classic bloom filter: smallest for a given rate (`1.44·log2(1/p)` bits per item).
///
/// ```
/// # fn main() -> Result<(), tidemark_bloom::Error> {
/// let mut filter = tidemark_bloom::BloomFilter::with_capacity(1_000, 0.01)?;
/// assert!(filter.insert(b"series-1@1700000000000"));
/// assert!(filter.contains(b"series-1@1700000000000"));
/// assert!(!filter.insert(b"series-1@1700000000000"));
/// # Ok(()) }
/// ```
pub type BloomFilter = Filter<Standard>;

/// The cache-blocked bloom filter: one cache line per lookup, sized with the blocked
/// correction so that its rate at capacity stays at the target.
///
/// ```
/// # fn main() -> Result<(), tidemark_bloom::Error> {
/// let mut filter = tidemark_bloom::BlockedBloomFilter::with_capacity(1_000, 0.01)?;
/// filter.insert(b"a");
/// assert!(filter.contains(b"a"));
/// # Ok(()) }
/// ```
pub type BlockedBloomFilter = Filter<Blocked>;

/// Group size of the batch lookups ([`Filter::contains_batch`]).
pub const BATCH: usize = 16;

/// Checks an explicit shape against the layout's rules.
pub(crate) fn check_shape<L: Layout>(num_bits: u64, num_hashes: u32) -> Result<()> {
    if num_bits == 0 || num_bits % L::GRANULE != 0 {
        return Err(Error::InvalidNumBits {
            found: num_bits,
            granule: L::GRANULE,
        });
    }
    if num_bits > MAX_NUM_BITS {
        return Err(Error::TooLarge {
            needed_bits: u128::from(num_bits),
            max_bits: MAX_NUM_BITS,
        });
    }
    if num_hashes == 0 || num_hashes > L::MAX_HASHES {
        return Err(Error::InvalidNumHashes {
            found: num_hashes,
            max: L::MAX_HASHES,
        });
    }
    Ok(())
}

impl<L: Layout> Filter<L> {
    /// A filter for `capacity` items at false-positive rate `fpr`, with the default seed.
    ///
    /// The standard layout takes the optimal `-n·ln p/(ln 2)²` bits rounded up to whole
    /// 64-bit words and the best integer hash count; the blocked layout takes the fewest
    /// 512-bit blocks whose modelled rate (block loads included) reaches `fpr`.
    ///
    /// # Errors
    /// [`Error::ZeroCapacity`], [`Error::InvalidFalsePositiveRate`] for `fpr` outside
    /// (0, 1) or NaN, [`Error::TooLarge`] above [`MAX_NUM_BITS`], [`Error::Allocation`].
    pub fn with_capacity(capacity: u64, fpr: f64) -> Result<Self> {
        let (num_bits, num_hashes) = L::shape(capacity, fpr)?;
        Self::with_shape(num_bits, num_hashes)
    }

    /// A filter of exactly `num_bits` bits probed `num_hashes` times per item.
    ///
    /// # Errors
    /// [`Error::InvalidNumBits`] unless `num_bits` is a positive multiple of 64 (standard)
    /// or 512 (blocked), [`Error::InvalidNumHashes`] outside `1..=MAX`,
    /// [`Error::TooLarge`], [`Error::Allocation`].
    pub fn with_shape(num_bits: u64, num_hashes: u32) -> Result<Self> {
        check_shape::<L>(num_bits, num_hashes)?;
        Ok(Filter {
            words: Bits::zeroed(num_bits / 64)?,
            num_bits,
            num_hashes,
            seed: Seed::DEFAULT,
            len: 0,
            layout: PhantomData,
        })
    }

    /// Replaces the hash seed. Call it before inserting: the filter is cleared, since
    /// items hashed with the old seed could no longer be found.
    #[must_use]
    pub fn with_seed(mut self, seed: Seed) -> Self {
        if seed != self.seed {
            self.clear();
            self.seed = seed;
        }
        self
    }

    /// Rebuilds a filter from its parts (used by the decoder and the atomic form).
    pub(crate) fn from_parts(
        words: Bits,
        num_bits: u64,
        num_hashes: u32,
        seed: Seed,
        len: u64,
    ) -> Self {
        debug_assert_eq!(words.as_slice().len() as u64 * 64, num_bits);
        Filter {
            words,
            num_bits,
            num_hashes,
            seed,
            len,
            layout: PhantomData,
        }
    }

    /// The 128-bit hash this filter probes `item` with (its seed applied).
    #[inline]
    pub fn hash(&self, item: &[u8]) -> u128 {
        self.seed.hash(item)
    }

    /// Inserts `item`; true when it was not already (possibly) present.
    #[inline]
    pub fn insert(&mut self, item: &[u8]) -> bool {
        self.insert_hash(self.seed.hash(item))
    }

    /// Inserts by a caller's 128-bit hash (it must be uniformly distributed over all 128
    /// bits, as SipHash, xxh3-128 or a truncated SHA-2 is); true when new.
    #[inline]
    pub fn insert_hash(&mut self, hash: u128) -> bool {
        let new = L::insert(
            self.words.as_mut_slice(),
            self.num_bits,
            self.num_hashes,
            hash,
        );
        self.len += u64::from(new);
        new
    }

    /// Whether `item` is possibly present (false means certainly absent).
    #[inline]
    pub fn contains(&self, item: &[u8]) -> bool {
        self.contains_hash(self.seed.hash(item))
    }

    /// Whether the item with this 128-bit hash is possibly present.
    #[inline]
    pub fn contains_hash(&self, hash: u128) -> bool {
        L::contains(self.words.as_slice(), self.num_bits, self.num_hashes, hash)
    }

    /// Looks up many items at once, writing one answer per item into `out` (cleared
    /// first). Items are hashed in groups of [`BATCH`] before their bits are read, so the
    /// memory reads of a group overlap instead of waiting one after another: the faster
    /// path when the filter is larger than the CPU caches.
    pub fn contains_batch<T: AsRef<[u8]>>(&self, items: &[T], out: &mut Vec<bool>) {
        out.clear();
        out.reserve(items.len());
        let mut hashes = [0u128; BATCH];
        for group in items.chunks(BATCH) {
            for (h, item) in hashes.iter_mut().zip(group) {
                *h = self.seed.hash(item.as_ref());
            }
            out.extend(hashes[..group.len()].iter().map(|&h| self.contains_hash(h)));
        }
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

    /// Number of inserts that reported a new item (what `BF.CARD` counts). After a
    /// [`union`](Self::union) it is the cardinality estimate of the combined bits.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when nothing was inserted.
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

    /// Bytes of the bit array (`num_bits / 8`).
    pub fn size_bytes(&self) -> u64 {
        self.num_bits / 8
    }

    /// The bit array as words (bit `b` is bit `b % 64` of word `b / 64`), starting on a
    /// 64-byte boundary.
    pub fn as_words(&self) -> &[u64] {
        self.words.as_slice()
    }

    /// Number of set bits.
    pub fn count_ones(&self) -> u64 {
        self.words.as_slice().count_ones()
    }

    /// Fraction of bits set, in [0, 1].
    pub fn fill_ratio(&self) -> f64 {
        self.count_ones() as f64 / self.num_bits as f64
    }

    /// Number of distinct items estimated from the fill (Swamidass & Baldi for the
    /// standard layout, its Poisson block-load form for the blocked one).
    pub fn estimated_len(&self) -> u64 {
        L::estimated_len(self.num_bits, self.num_hashes, self.count_ones())
    }

    /// False-positive rate estimated from the bits as they are now.
    pub fn estimated_fpr(&self) -> f64 {
        L::estimated_fpr(self.words.as_slice(), self.num_bits, self.num_hashes)
    }

    /// Rate the sizing model predicts at `items` items (for reports next to the measured
    /// rate).
    pub fn model_fpr(&self, items: u64) -> f64 {
        L::model_fpr(self.num_bits, self.num_hashes, items)
    }

    /// Adds every item of `other` (bitwise OR). Afterwards [`len`](Self::len) is the
    /// cardinality estimate of the combined bits, kept between the larger of the two
    /// counts and their sum.
    ///
    /// # Errors
    /// [`Error::IncompatibleFilters`] when the bit counts, hash counts or seeds differ.
    pub fn union(&mut self, other: &Self) -> Result<()> {
        check_compatible(
            (self.num_bits, self.num_hashes, self.seed),
            (other.num_bits, other.num_hashes, other.seed),
        )?;
        for (a, b) in self.words.as_mut_slice().iter_mut().zip(other.as_words()) {
            *a |= b;
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
    /// [`Error::IncompatibleFilters`] when the bit counts, hash counts or seeds differ.
    pub fn union_estimated_len(&self, other: &Self) -> Result<u64> {
        check_compatible(
            (self.num_bits, self.num_hashes, self.seed),
            (other.num_bits, other.num_hashes, other.seed),
        )?;
        let ones: u64 = self
            .as_words()
            .iter()
            .zip(other.as_words())
            .map(|(a, b)| u64::from((a | b).count_ones()))
            .sum();
        Ok(L::estimated_len(self.num_bits, self.num_hashes, ones))
    }

    /// Removes every item, keeping the shape and seed.
    pub fn clear(&mut self) {
        self.words.as_mut_slice().fill(0);
        self.len = 0;
    }

    /// The filter in the stable byte format (`docs/bloom-format.md`).
    pub fn to_bytes(&self) -> Vec<u8> {
        format::encode_filter::<L>(
            self.num_bits,
            self.num_hashes,
            self.seed,
            self.len,
            self.words.as_slice(),
        )
    }

    /// Decodes a filter written by [`to_bytes`](Self::to_bytes), checksum included.
    ///
    /// # Errors
    /// [`Error::BadMagic`], [`Error::UnsupportedVersion`], [`Error::WrongKind`],
    /// [`Error::Truncated`], [`Error::Corrupt`], [`Error::ChecksumMismatch`] or
    /// [`Error::Allocation`]; never a panic, whatever the bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let view = format::FilterRef::<L>::new(bytes)?;
        Ok(Filter::from_parts(
            Bits::copied_from(&view.words())?,
            view.num_bits(),
            view.num_hashes(),
            view.seed(),
            view.len(),
        ))
    }
}

impl<L: Layout> fmt::Debug for Filter<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filter")
            .field("layout", &L::NAME)
            .field("num_bits", &self.num_bits)
            .field("num_hashes", &self.num_hashes)
            .field("seed", &self.seed)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl<'a, L: Layout> Extend<&'a [u8]> for Filter<L> {
    fn extend<I: IntoIterator<Item = &'a [u8]>>(&mut self, items: I) {
        self.insert_all(items);
    }
}

/// The error for two filters that differ in (bits, hashes, seed), naming what differs.
pub(crate) fn check_compatible(a: (u64, u32, Seed), b: (u64, u32, Seed)) -> Result<()> {
    let reason = if a.0 != b.0 {
        format!("num_bits {} vs {}", a.0, b.0)
    } else if a.1 != b.1 {
        format!("num_hashes {} vs {}", a.1, b.1)
    } else if a.2 != b.2 {
        format!("seed {:?} vs {:?}", a.2, b.2)
    } else {
        return Ok(());
    };
    Err(Error::IncompatibleFilters { reason })
}
