//! [`ScalableBloomFilter`]: a chain of filters (standard, or Parquet split-block) that
//! grows with its content, with the semantics of RedisBloom's and TairBloom's `BF.*`
//! filters.

use crate::error::{Error, Result};
use crate::filter::BloomFilter;
use crate::format::{
    self, LayerParts, LayerWords, MAX_LAYERS, ScalableBloomFilterRef, ScalableLayout,
    ScalableParams,
};
use crate::hash::{Hash64, Seed};
use crate::split::SplitBlockBloomFilter;
use crate::words::Bits;

/// Default growth factor: each new layer holds twice the previous one's capacity.
pub const DEFAULT_EXPANSION: u32 = 2;

/// Each layer's error rate is the previous one's times this; the first layer of a
/// scaling filter gets `error_rate × TIGHTENING_RATIO`, so the rates sum to at most the
/// requested one however far the filter grows.
pub const TIGHTENING_RATIO: f64 = 0.5;

/// The tightening ratio of split-block layers. A split-block filter sets one bit per
/// word, so its cost per item grows fast as the rate falls (10.5 bits at 1%, 26 at
/// 0.01%, 41 at 0.001%); halving each layer's rate would take a filter grown from 100 to
/// 10M items to 164 MB. With 0.9 the rates past the first layer still sum to the half
/// budget left after it, and that filter takes 43 MB (see `docs/results/bloom.md`).
pub const SPLIT_BLOCK_TIGHTENING_RATIO: f64 = 0.9;

/// Each layer's bit array is sized for this fraction of its error budget. The rate of a
/// small layer varies with the luck of its fill (a 100-item layer by ±20%); sizing with
/// a 10% margin keeps the measured overall rate under the requested one for every seed
/// tried (see `tests/rates.rs`), for +0.22 bits per item.
pub const LAYER_SIZING_FACTOR: f64 = 0.9;

/// One layer of a scalable filter, as `BF.INFO`/`BF.DEBUG` report it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerInfo {
    /// Items the layer was sized for.
    pub capacity: u64,
    /// The layer's own error rate (the ratio `BF.DEBUG` prints).
    pub error_rate: f64,
    /// Items inserted into this layer.
    pub items: u64,
    /// Bits of the layer's array.
    pub num_bits: u64,
    /// Probes per item.
    pub num_hashes: u32,
    /// Bytes of the layer's array.
    pub size_bytes: u64,
}

/// The bit array of one layer: all layers of a filter have the same kind.
#[derive(Debug, Clone, PartialEq)]
enum LayerFilter {
    Standard(BloomFilter),
    Split(SplitBlockBloomFilter),
}

impl LayerFilter {
    fn len(&self) -> u64 {
        match self {
            LayerFilter::Standard(f) => f.len(),
            LayerFilter::Split(f) => f.len(),
        }
    }

    fn num_bits(&self) -> u64 {
        match self {
            LayerFilter::Standard(f) => f.num_bits(),
            LayerFilter::Split(f) => f.num_bits(),
        }
    }

    fn num_hashes(&self) -> u32 {
        match self {
            LayerFilter::Standard(f) => f.num_hashes(),
            LayerFilter::Split(_) => crate::math::SPLIT_BLOCK_HASHES,
        }
    }

    fn size_bytes(&self) -> u64 {
        self.num_bits() / 8
    }

    fn estimated_fpr(&self) -> f64 {
        match self {
            LayerFilter::Standard(f) => f.estimated_fpr(),
            LayerFilter::Split(f) => f.estimated_fpr(),
        }
    }

    /// Probes with the filter's key hash; split-block layers use its low 64 bits.
    #[inline(always)]
    fn contains_hash(&self, hash: u128) -> bool {
        match self {
            LayerFilter::Standard(f) => f.contains_hash(hash),
            LayerFilter::Split(f) => f.contains_hash(hash as u64),
        }
    }

    fn insert_hash(&mut self, hash: u128) -> bool {
        match self {
            LayerFilter::Standard(f) => f.insert_hash(hash),
            LayerFilter::Split(f) => f.insert_hash(hash as u64),
        }
    }

    fn union_estimated_len(&self, other: &Self) -> Result<u64> {
        match (self, other) {
            (LayerFilter::Standard(a), LayerFilter::Standard(b)) => a.union_estimated_len(b),
            (LayerFilter::Split(a), LayerFilter::Split(b)) => a.union_estimated_len(b),
            _ => Err(mixed_layers()),
        }
    }

    fn union(&mut self, other: &Self) -> Result<()> {
        match (self, other) {
            (LayerFilter::Standard(a), LayerFilter::Standard(b)) => a.union(b),
            (LayerFilter::Split(a), LayerFilter::Split(b)) => a.union(b),
            _ => Err(mixed_layers()),
        }
    }

    fn words(&self) -> LayerWords<'_> {
        match self {
            LayerFilter::Standard(f) => LayerWords::U64(f.as_words()),
            LayerFilter::Split(f) => LayerWords::U32(f.as_words()),
        }
    }
}

fn mixed_layers() -> Error {
    Error::IncompatibleFilters {
        reason: "standard vs split-block layers".to_string(),
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Layer {
    filter: LayerFilter,
    capacity: u64,
    error: f64,
}

impl Layer {
    fn info(&self) -> LayerInfo {
        LayerInfo {
            capacity: self.capacity,
            error_rate: self.error,
            items: self.filter.len(),
            num_bits: self.filter.num_bits(),
            num_hashes: self.filter.num_hashes(),
            size_bytes: self.filter.size_bytes(),
        }
    }

    fn is_full(&self) -> bool {
        self.filter.len() >= self.capacity
    }
}

/// A bloom filter that adds layers as it fills, keeping its overall false-positive rate at
/// or under the requested one (RedisBloom/TairBloom semantics).
///
/// * Layer 1 holds `capacity` items at `error_rate / 2` (`error_rate` when non-scaling);
///   layer `i+1` holds `expansion ×` layer `i`'s capacity. Layer 2 gets
///   `error_rate / 2 × (1 - r)` and each later layer `r ×` the previous one's rate, with
///   the tightening ratio `r` = [`TIGHTENING_RATIO`] (½, RedisBloom's: every layer at
///   half the previous one's rate) for standard layers and
///   [`SPLIT_BLOCK_TIGHTENING_RATIO`] for split-block ones; the rates sum to at most
///   `error_rate` however far the filter grows.
/// * Layers are standard filters hashed with SipHash-1-3-128, or, with
///   [`ScalableBuilder::split_block`], Parquet split-block filters that share one 64-bit
///   hash per key ([`Hash64`]): a lookup hashes once and probes one 32-byte block per
///   layer, newest first.
/// * [`add`](Self::add) checks every layer, newest first, and inserts into the newest
///   only when the item is absent everywhere, growing first if that layer is full.
/// * A non-scaling filter refuses new items once full with [`Error::Full`].
///
/// ```
/// # fn main() -> Result<(), tidemark_bloom::Error> {
/// use tidemark_bloom::ScalableBloomFilter;
/// let mut filter = ScalableBloomFilter::new(100, 0.01)?;
/// for i in 0..1_000u32 {
///     filter.add(&i.to_le_bytes())?;
/// }
/// assert!(filter.num_layers() > 1);
/// assert!(filter.contains(&7u32.to_le_bytes()));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ScalableBloomFilter {
    capacity: u64,
    error_rate: f64,
    expansion: u32,
    nonscaling: bool,
    seed: Seed,
    layout: ScalableLayout,
    tightening: f64,
    layers: Vec<Layer>,
}

/// Options of a [`ScalableBloomFilter`]; from [`ScalableBloomFilter::builder`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalableBuilder {
    capacity: u64,
    error_rate: f64,
    expansion: u32,
    nonscaling: bool,
    seed: Seed,
    layout: ScalableLayout,
}

impl ScalableBuilder {
    /// Capacity factor between consecutive layers (default [`DEFAULT_EXPANSION`]).
    #[must_use]
    pub fn expansion(mut self, expansion: u32) -> Self {
        self.expansion = expansion;
        self
    }

    /// A non-scaling filter keeps one layer at the full error rate and refuses new items
    /// once it holds `capacity` of them.
    #[must_use]
    pub fn nonscaling(mut self, nonscaling: bool) -> Self {
        self.nonscaling = nonscaling;
        self
    }

    /// The SipHash-1-3-128 keys of standard layers (default [`Seed::DEFAULT`]).
    #[must_use]
    pub fn seed(mut self, seed: Seed) -> Self {
        self.seed = seed;
        self
    }

    /// Parquet split-block layers hashed with `hasher`, one 64-bit hash per key shared by
    /// all layers (written as kind 5 of format version 2). Lookups cost one hash and one
    /// 32-byte block per layer; see [`Hash64`] for choosing the hash.
    #[must_use]
    pub fn split_block(mut self, hasher: Hash64) -> Self {
        self.layout = ScalableLayout::SplitBlock(hasher);
        self
    }

    /// Builds the filter and its first layer.
    ///
    /// # Errors
    /// [`Error::ZeroCapacity`], [`Error::InvalidFalsePositiveRate`],
    /// [`Error::InvalidExpansion`] (0 without non-scaling), [`Error::TooLarge`],
    /// [`Error::Allocation`].
    pub fn build(self) -> Result<ScalableBloomFilter> {
        crate::math::check_capacity_and_rate(self.capacity, self.error_rate)?;
        if self.expansion == 0 && !self.nonscaling {
            return Err(Error::InvalidExpansion(0));
        }
        let first_error = if self.nonscaling {
            self.error_rate
        } else {
            self.error_rate * TIGHTENING_RATIO
        };
        let (seed, tightening) = match self.layout {
            ScalableLayout::Standard => (self.seed, TIGHTENING_RATIO),
            ScalableLayout::SplitBlock(h) => (h.to_parts().1, SPLIT_BLOCK_TIGHTENING_RATIO),
        };
        let mut filter = ScalableBloomFilter {
            capacity: self.capacity,
            error_rate: self.error_rate,
            expansion: self.expansion,
            nonscaling: self.nonscaling,
            seed,
            layout: self.layout,
            tightening,
            layers: Vec::new(),
        };
        filter.push_layer(self.capacity, first_error)?;
        Ok(filter)
    }
}

impl ScalableBloomFilter {
    /// A scaling filter with expansion 2 and the default seed.
    ///
    /// # Errors
    /// As [`ScalableBuilder::build`].
    pub fn new(capacity: u64, error_rate: f64) -> Result<Self> {
        Self::builder(capacity, error_rate).build()
    }

    /// Options for a filter whose first layer holds `capacity` items and whose overall
    /// rate stays at or under `error_rate`.
    pub fn builder(capacity: u64, error_rate: f64) -> ScalableBuilder {
        ScalableBuilder {
            capacity,
            error_rate,
            expansion: DEFAULT_EXPANSION,
            nonscaling: false,
            seed: Seed::DEFAULT,
            layout: ScalableLayout::Standard,
        }
    }

    fn push_layer(&mut self, capacity: u64, error: f64) -> Result<()> {
        if self.layers.len() >= MAX_LAYERS {
            return Err(Error::CannotGrow {
                layers: self.layers.len(),
            });
        }
        let sized_for = error * LAYER_SIZING_FACTOR;
        let filter = match self.layout {
            ScalableLayout::Standard => LayerFilter::Standard(
                BloomFilter::with_capacity(capacity, sized_for)?.with_seed(self.seed),
            ),
            ScalableLayout::SplitBlock(h) => LayerFilter::Split(
                SplitBlockBloomFilter::with_rate(capacity, sized_for)?.with_hasher(h),
            ),
        };
        self.layers.push(Layer {
            filter,
            capacity,
            error,
        });
        Ok(())
    }

    fn grow(&mut self) -> Result<()> {
        let layers = self.layers.len();
        let Some(last) = self.layers.last() else {
            return Err(Error::CannotGrow { layers });
        };
        let capacity = last
            .capacity
            .checked_mul(u64::from(self.expansion))
            .ok_or(Error::CannotGrow { layers })?;
        // Layer 2 takes (1 - r) of the half budget the first layer leaves; later layers
        // r times their predecessor's rate. With r = ½ that is "half the previous rate".
        let error = if layers == 1 {
            last.error * (1.0 - self.tightening)
        } else {
            last.error * self.tightening
        };
        self.push_layer(capacity, error)
    }

    /// Adds `item`; `Ok(true)` when it was new (the `BF.ADD` reply), `Ok(false)` when some
    /// layer already (possibly) holds it.
    ///
    /// # Errors
    /// [`Error::Full`] for a new item in a full non-scaling filter; [`Error::CannotGrow`],
    /// [`Error::TooLarge`] or [`Error::Allocation`] when a new layer cannot be made.
    pub fn add(&mut self, item: &[u8]) -> Result<bool> {
        self.add_hash(self.hash(item))
    }

    /// The key hash this filter adds and probes `item` with, computed once for all
    /// layers: SipHash-1-3-128 under [`seed`](Self::seed) for standard layers, the
    /// 64-bit [`Hash64`] zero-extended for split-block layers.
    #[inline]
    pub fn hash(&self, item: &[u8]) -> u128 {
        match self.layout {
            ScalableLayout::Standard => self.seed.hash(item),
            ScalableLayout::SplitBlock(h) => u128::from(h.hash(item)),
        }
    }

    /// The layers' layout and hash.
    pub fn layout(&self) -> ScalableLayout {
        self.layout
    }

    /// The tightening ratio between layers' rates.
    pub fn tightening_ratio(&self) -> f64 {
        self.tightening
    }

    /// Adds by a precomputed hash (see [`hash`](Self::hash)).
    ///
    /// # Errors
    /// As [`add`](Self::add).
    pub fn add_hash(&mut self, hash: u128) -> Result<bool> {
        if self.contains_hash(hash) {
            return Ok(false);
        }
        if self.layers.last().is_none_or(Layer::is_full) {
            if self.nonscaling {
                return Err(Error::Full {
                    capacity: self.capacity,
                });
            }
            self.grow()?;
        }
        let layers = self.layers.len();
        let newest = self.layers.last_mut().ok_or(Error::CannotGrow { layers })?;
        newest.filter.insert_hash(hash);
        Ok(true)
    }

    /// Whether `item` is possibly present in some layer.
    #[inline]
    pub fn contains(&self, item: &[u8]) -> bool {
        self.contains_hash(self.hash(item))
    }

    /// Looks up many items, one answer per item into `out` (cleared first): each group
    /// of items is hashed before any layer is probed.
    pub fn contains_batch<T: AsRef<[u8]>>(&self, items: &[T], out: &mut Vec<bool>) {
        out.clear();
        out.reserve(items.len());
        let mut hashes = [0u128; 32];
        for group in items.chunks(hashes.len()) {
            for (h, item) in hashes.iter_mut().zip(group) {
                *h = self.hash(item.as_ref());
            }
            out.extend(hashes[..group.len()].iter().map(|&h| self.contains_hash(h)));
        }
    }

    /// Whether the item with this hash (see [`hash`](Self::hash)) is possibly present in
    /// some layer (newest first).
    #[inline]
    pub fn contains_hash(&self, hash: u128) -> bool {
        self.layers
            .iter()
            .rev()
            .any(|layer| layer.filter.contains_hash(hash))
    }

    /// Items added (adds that answered true; `BF.CARD`).
    pub fn len(&self) -> u64 {
        // Saturating: a filter read from bytes carries their counts.
        self.layers
            .iter()
            .fold(0, |sum, l| sum.saturating_add(l.filter.len()))
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sum of the layers' capacities (`BF.INFO CAPACITY`).
    pub fn capacity(&self) -> u64 {
        self.layers
            .iter()
            .fold(0, |sum, l| sum.saturating_add(l.capacity))
    }

    /// The first layer's capacity, as requested.
    pub fn initial_capacity(&self) -> u64 {
        self.capacity
    }

    /// The requested overall error rate.
    pub fn error_rate(&self) -> f64 {
        self.error_rate
    }

    /// Capacity factor between layers.
    pub fn expansion(&self) -> u32 {
        self.expansion
    }

    /// True for a non-scaling filter.
    pub fn is_nonscaling(&self) -> bool {
        self.nonscaling
    }

    /// True when a non-scaling filter can take no new item.
    pub fn is_full(&self) -> bool {
        self.nonscaling && self.layers.last().is_none_or(Layer::is_full)
    }

    /// The hash seed.
    pub fn seed(&self) -> Seed {
        self.seed
    }

    /// Number of layers (`BF.INFO FILTERS`).
    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Each layer's figures, oldest first.
    pub fn layers(&self) -> Vec<LayerInfo> {
        self.layers.iter().map(Layer::info).collect()
    }

    /// The bit array of standard layer `index` (oldest is 0); `None` past the end and
    /// for split-block layers (see [`split_layer`](Self::split_layer)).
    pub fn layer_words(&self, index: usize) -> Option<&[u64]> {
        match self.layers.get(index).map(|l| &l.filter) {
            Some(LayerFilter::Standard(f)) => Some(f.as_words()),
            _ => None,
        }
    }

    /// Split-block layer `index` (oldest is 0); `None` past the end and for standard
    /// layers.
    pub fn split_layer(&self, index: usize) -> Option<&SplitBlockBloomFilter> {
        match self.layers.get(index).map(|l| &l.filter) {
            Some(LayerFilter::Split(f)) => Some(f),
            _ => None,
        }
    }

    /// Bytes of all bit arrays.
    pub fn size_bytes(&self) -> u64 {
        self.layers.iter().map(|l| l.filter.size_bytes()).sum()
    }

    /// The overall rate estimated from the bits: `1 - Π(1 - rate of layer i)`.
    pub fn estimated_fpr(&self) -> f64 {
        1.0 - self
            .layers
            .iter()
            .map(|l| 1.0 - l.filter.estimated_fpr())
            .product::<f64>()
    }

    /// Adds every item of `other`, a filter built with the same capacity, error rate,
    /// expansion, scaling mode and seed (`BF.MERGE`).
    ///
    /// Layer `i` of both filters is OR-ed when the combined bits hold no more than the
    /// layer's capacity (estimated from the OR's fill), which costs no rate. Otherwise —
    /// two full layers of different items — both are kept side by side, since OR-ing
    /// them would put twice the capacity in one bit array and multiply its rate. No item
    /// of either filter is ever lost, and the union's rate is at most the sum of the two
    /// filters' rates (so under 2× the target even for two full, disjoint filters).
    /// Non-scaling filters keep their single layer: it is always OR-ed, and a union past
    /// the capacity leaves the filter full.
    ///
    /// # Errors
    /// [`Error::IncompatibleFilters`] when a parameter differs, [`Error::CannotGrow`]
    /// when the union would hold more than [`MAX_LAYERS`] layers; `self` is unchanged
    /// on error.
    pub fn union(&mut self, other: &Self) -> Result<()> {
        let mismatch = if self.capacity != other.capacity {
            Some(format!("capacity {} vs {}", self.capacity, other.capacity))
        } else if self.error_rate.to_bits() != other.error_rate.to_bits() {
            Some(format!(
                "error rate {} vs {}",
                self.error_rate, other.error_rate
            ))
        } else if self.expansion != other.expansion {
            Some(format!(
                "expansion {} vs {}",
                self.expansion, other.expansion
            ))
        } else if self.nonscaling != other.nonscaling {
            Some("scaling vs non-scaling".to_string())
        } else if self.layout != other.layout {
            Some(format!("layout {:?} vs {:?}", self.layout, other.layout))
        } else if self.seed != other.seed {
            Some(format!("seed {:?} vs {:?}", self.seed, other.seed))
        } else {
            None
        };
        if let Some(reason) = mismatch {
            return Err(Error::IncompatibleFilters { reason });
        }
        let depth = self.layers.len().max(other.layers.len());
        let mut merged: Vec<Layer> = Vec::with_capacity(depth);
        for i in 0..depth {
            match (self.layers.get(i), other.layers.get(i)) {
                (Some(a), Some(b)) => {
                    // A non-scaling filter has exactly one layer: always OR, and let
                    // the combined count make it full.
                    if self.nonscaling || a.filter.union_estimated_len(&b.filter)? <= a.capacity {
                        let mut layer = a.clone();
                        layer.filter.union(&b.filter)?;
                        merged.push(layer);
                    } else {
                        merged.push(a.clone());
                        merged.push(b.clone());
                    }
                }
                (Some(only), None) | (None, Some(only)) => merged.push(only.clone()),
                (None, None) => {}
            }
        }
        if merged.len() > MAX_LAYERS {
            return Err(Error::CannotGrow {
                layers: merged.len(),
            });
        }
        self.layers = merged;
        Ok(())
    }

    /// The filter in the stable byte format (`docs/bloom-format.md`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let layers: Vec<LayerParts<'_>> = self
            .layers
            .iter()
            .map(|l| LayerParts {
                capacity: l.capacity,
                error: l.error,
                len: l.filter.len(),
                num_bits: l.filter.num_bits(),
                num_hashes: l.filter.num_hashes(),
                words: l.filter.words(),
            })
            .collect();
        format::encode_scalable(&self.params(), &layers)
    }

    fn params(&self) -> ScalableParams {
        ScalableParams {
            capacity: self.capacity,
            error: self.error_rate,
            expansion: self.expansion,
            nonscaling: self.nonscaling,
            seed: self.seed,
            layout: self.layout,
            tightening: self.tightening,
        }
    }

    /// Decodes a filter written by [`to_bytes`](Self::to_bytes), checksum included.
    ///
    /// # Errors
    /// Any decoding error of [`Error`]; never a panic, whatever the bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let view = ScalableBloomFilterRef::new(bytes)?;
        let params = view.params();
        let mut layers = Vec::with_capacity(view.layer_refs().len());
        for l in view.layer_refs() {
            let filter = match params.layout {
                ScalableLayout::Standard => LayerFilter::Standard(BloomFilter::from_parts(
                    Bits::copied_from(&l.words)?,
                    l.num_bits,
                    l.num_hashes,
                    params.seed,
                    l.len,
                )),
                ScalableLayout::SplitBlock(h) => LayerFilter::Split(
                    SplitBlockBloomFilter::from_bitset_parts(l.words.0, h, l.len)?,
                ),
            };
            layers.push(Layer {
                filter,
                capacity: l.capacity,
                error: l.error,
            });
        }
        Ok(ScalableBloomFilter {
            capacity: params.capacity,
            error_rate: params.error,
            expansion: params.expansion,
            nonscaling: params.nonscaling,
            seed: params.seed,
            layout: params.layout,
            tightening: params.tightening,
            layers,
        })
    }
}
