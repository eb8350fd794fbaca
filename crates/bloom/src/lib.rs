#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// The workspace forbids unsafe code; this crate's one exception is `simd.rs`, AVX2 split-
// block probing behind run-time detection (the only module allowed to use it).
#![deny(unsafe_code)]

mod atomic;
mod atomic_file;
mod dump;
mod error;
pub mod faults;
mod filter;
mod format;
mod hash;
mod layout;
pub mod le;
pub mod math;
mod scalable;
mod simd;
mod split;
mod words;

pub use atomic::{AtomicBlockedBloomFilter, AtomicBloomFilter, AtomicFilter};
pub use atomic_file::{AtomicFile, is_temp_name, sync_dir};
pub use dump::dump;
pub use error::{Error, Result};
pub use filter::{BATCH, BlockedBloomFilter, BloomFilter, Filter};
pub use format::{
    BlockedBloomFilterRef, BloomFilterRef, FORMAT_VERSION, FilterRef, MAGIC, MAX_LAYERS,
    MIN_FORMAT_VERSION, ScalableBloomFilterRef, ScalableLayout,
};
pub use hash::{Hash64, Seed, hash128};
pub use layout::{BLOCK_SALTS, Blocked, Layout, Standard};
pub use math::{
    BLOCK_BITS, MAX_BLOCK_HASHES, MAX_NUM_BITS, MAX_NUM_HASHES, MAX_SPLIT_BLOCKS, SPLIT_BLOCK_BITS,
    SPLIT_BLOCK_HASHES,
};
pub use scalable::{
    DEFAULT_EXPANSION, LAYER_SIZING_FACTOR, LayerInfo, SPLIT_BLOCK_TIGHTENING_RATIO,
    ScalableBloomFilter, ScalableBuilder, TIGHTENING_RATIO,
};
pub use split::{PARQUET_SALTS, SplitBlockBloomFilter, SplitBlockBloomFilterRef};
