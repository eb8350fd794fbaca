#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(feature = "cli")]
pub mod cli;
mod delta;
mod error;
mod export;
mod schema;
mod writer;

use std::num::NonZeroU32;

pub use delta::{AddFile, Commit, DeltaTable, LOG_DIR, TableState};
pub use error::{Error, Result};
pub use export::{
    ExportOptions, ExportProgress, ExportReport, PartitionReport, export, rollup_table_dir,
    rollup_txn_app_id, txn_app_id,
};
pub use schema::{Column, ColumnType, ID_COLUMN, LakeSchema, Role, SHARD_COLUMN, TSID_COLUMN};
pub use writer::{
    DEFAULT_ID_BLOOM_FPR, DEFAULT_ROW_GROUP_ROWS, FileStats, Source, WriteOptions, write_partition,
};

/// Virtual shards of the `shard` column: the lake and the future cluster route a series
/// to `Tsid::shard(VIRTUAL_SHARDS)`. A power of two, so a cluster of `2^k ≤ 256` shards
/// finds its shard as `shard >> (8 - k)` (multiply-shift of the same 32 bits).
pub const VIRTUAL_SHARDS: u32 = 256;

/// The virtual shard of a series: `Tsid::shard(VIRTUAL_SHARDS)`, the high 32 bits of
/// [`Tsid::routing_hash`](tidemark::tsid::Tsid::routing_hash) (the first 8 bytes of the
/// tsid's 128-bit hash part, big-endian) times 256, shifted right by 32. Uniform over
/// series and stable across versions; every point of a series has the same shard.
pub fn shard_of(tsid: &tidemark::tsid::Tsid) -> u32 {
    NonZeroU32::new(VIRTUAL_SHARDS).map_or(0, |n| tsid.shard(n))
}

/// Aborts the process (as a crash) when `TIDEMARK_FAILPOINT` names `name` (crash tests
/// of the export: `export-before-commit`, `export-after-commit`).
fn failpoint(name: &str) {
    if std::env::var_os(tidemark::dedup::FAILPOINT_ENV).is_some_and(|v| v == name) {
        std::process::abort();
    }
}
