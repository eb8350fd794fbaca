//! [`AtomicFilter`]: the concurrent form of [`Filter`], inserting through `&self`.

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Result;
use crate::filter::{Filter, check_compatible};
use crate::hash::Seed;
use crate::layout::{Blocked, Layout, Standard};
use crate::words::{AtomicBits, Words};

/// A bloom filter that many threads insert into at once, through `&self`.
///
/// Every insert sets its bits with an atomic OR, so the bit array after any interleaving
/// of inserts is exactly the one the sequential [`Filter`] builds from the same items, and
/// converting between the two forms is lossless. Lookups racing with inserts may miss an
/// item whose insert has not returned yet, never one whose insert has.
///
/// Use it through [`AtomicBloomFilter`] and [`AtomicBlockedBloomFilter`].
///
/// ```
/// # fn main() -> Result<(), tidemark_bloom::Error> {
/// use tidemark_bloom::AtomicBlockedBloomFilter;
/// let filter = AtomicBlockedBloomFilter::with_capacity(10_000, 0.01)?;
/// std::thread::scope(|s| {
///     for t in 0..4u32 {
///         let filter = &filter;
///         s.spawn(move || {
///             for i in 0..1_000u32 {
///                 filter.insert(&(t * 1_000 + i).to_le_bytes());
///             }
///         });
///     }
/// });
/// assert!(filter.contains(&3_999u32.to_le_bytes()));
/// # Ok(()) }
/// ```
pub struct AtomicFilter<L: Layout> {
    words: AtomicBits,
    num_bits: u64,
    num_hashes: u32,
    seed: Seed,
    len: AtomicU64,
    layout: PhantomData<L>,
}

/// Concurrent form of [`crate::BloomFilter`].
pub type AtomicBloomFilter = AtomicFilter<Standard>;

/// Concurrent form of [`crate::BlockedBloomFilter`].
pub type AtomicBlockedBloomFilter = AtomicFilter<Blocked>;

impl<L: Layout> AtomicFilter<L> {
    /// A filter for `capacity` items at rate `fpr`, sized as [`Filter::with_capacity`].
    ///
    /// # Errors
    /// As [`Filter::with_capacity`].
    pub fn with_capacity(capacity: u64, fpr: f64) -> Result<Self> {
        Filter::<L>::with_capacity(capacity, fpr)?.try_into()
    }

    /// A filter of an explicit shape, as [`Filter::with_shape`].
    ///
    /// # Errors
    /// As [`Filter::with_shape`].
    pub fn with_shape(num_bits: u64, num_hashes: u32) -> Result<Self> {
        Filter::<L>::with_shape(num_bits, num_hashes)?.try_into()
    }

    /// Inserts `item`; true when it was not already (possibly) present. When threads
    /// insert the same new item at the same moment, more than one may answer true.
    #[inline]
    pub fn insert(&self, item: &[u8]) -> bool {
        self.insert_hash(self.seed.hash(item))
    }

    /// Inserts by a caller's 128-bit hash; true when new.
    #[inline]
    pub fn insert_hash(&self, hash: u128) -> bool {
        let new = L::insert_atomic(&self.words, self.num_bits, self.num_hashes, hash);
        if new {
            self.len.fetch_add(1, Ordering::Relaxed);
        }
        new
    }

    /// Whether `item` is possibly present.
    #[inline]
    pub fn contains(&self, item: &[u8]) -> bool {
        self.contains_hash(self.seed.hash(item))
    }

    /// Whether the item with this hash is possibly present.
    #[inline]
    pub fn contains_hash(&self, hash: u128) -> bool {
        L::contains(&self.words, self.num_bits, self.num_hashes, hash)
    }

    /// Number of inserts that answered true.
    pub fn len(&self) -> u64 {
        self.len.load(Ordering::Relaxed)
    }

    /// True when nothing was inserted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    /// Adds every item of `other` with atomic ORs. Afterwards [`len`](Self::len) is the
    /// cardinality estimate of the combined bits, as for [`Filter::union`].
    ///
    /// # Errors
    /// [`crate::Error::IncompatibleFilters`] when the shapes or seeds differ.
    pub fn union(&self, other: &Filter<L>) -> Result<()> {
        check_compatible(
            (self.num_bits, self.num_hashes, self.seed),
            (other.num_bits(), other.num_hashes(), other.seed()),
        )?;
        for (i, b) in other.as_words().iter().enumerate() {
            if let Some(a) = self.words.get(i) {
                a.fetch_or(*b, Ordering::Relaxed);
            }
        }
        let mine = self.len();
        let estimate = self
            .estimated_len()
            .clamp(mine.max(other.len()), mine.saturating_add(other.len()));
        self.len.store(estimate, Ordering::Relaxed);
        Ok(())
    }

    /// A sequential copy of the current bits.
    ///
    /// # Errors
    /// [`crate::Error::Allocation`] when the copy cannot be allocated.
    pub fn to_filter(&self) -> Result<Filter<L>> {
        Ok(Filter::from_parts(
            self.words.to_bits()?,
            self.num_bits,
            self.num_hashes,
            self.seed,
            self.len(),
        ))
    }

    /// The filter in the stable byte format; identical to the sequential filter's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let words: Vec<u64> = (0..self.words.num_words())
            .map(|i| self.words.word(i))
            .collect();
        crate::format::encode_filter::<L>(
            self.num_bits,
            self.num_hashes,
            self.seed,
            self.len(),
            &words,
        )
    }
}

impl<L: Layout> TryFrom<Filter<L>> for AtomicFilter<L> {
    type Error = crate::Error;

    /// The concurrent form of a filter (its bits copied into atomic words).
    fn try_from(filter: Filter<L>) -> Result<Self> {
        Ok(AtomicFilter {
            words: AtomicBits::copied_from(filter.as_words())?,
            num_bits: filter.num_bits(),
            num_hashes: filter.num_hashes(),
            seed: filter.seed(),
            len: AtomicU64::new(filter.len()),
            layout: PhantomData,
        })
    }
}

impl<L: Layout> fmt::Debug for AtomicFilter<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AtomicFilter")
            .field("layout", &L::NAME)
            .field("num_bits", &self.num_bits)
            .field("num_hashes", &self.num_hashes)
            .field("seed", &self.seed)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}
