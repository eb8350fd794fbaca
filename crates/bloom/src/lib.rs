#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod atomic;
mod dump;
mod error;
mod filter;
mod format;
mod hash;
mod layout;
mod le;
pub mod math;
mod scalable;
mod words;

pub use atomic::{AtomicBlockedBloomFilter, AtomicBloomFilter, AtomicFilter};
pub use dump::dump;
pub use error::{Error, Result};
pub use filter::{BATCH, BlockedBloomFilter, BloomFilter, Filter};
pub use format::{
    BlockedBloomFilterRef, BloomFilterRef, FORMAT_VERSION, FilterRef, MAGIC, MAX_LAYERS,
    MIN_FORMAT_VERSION, ScalableBloomFilterRef,
};
pub use hash::{Seed, hash128};
pub use layout::{BLOCK_SALTS, Blocked, Layout, Standard};
pub use math::{BLOCK_BITS, MAX_BLOCK_HASHES, MAX_NUM_BITS, MAX_NUM_HASHES};
pub use scalable::{
    DEFAULT_EXPANSION, LAYER_SIZING_FACTOR, LayerInfo, ScalableBloomFilter, ScalableBuilder,
    TIGHTENING_RATIO,
};
