#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod checkpoint;
#[cfg(feature = "cli")]
pub mod cli;
mod delta;
mod error;
mod export;
mod restore;
mod schema;
mod store;
mod writer;

use std::num::NonZeroU32;

pub use delta::{
    AddFile, Commit, DeltaTable, LAST_CHECKPOINT, LOG_DIR, LiveFile, TOMBSTONE_RETENTION_MS,
    TableState, UNTRACKED_MIN_AGE_MS, VacuumReport,
};
pub use error::{Error, Result};
pub use export::{
    DEFAULT_CHECKPOINT_INTERVAL, ExportOptions, ExportProgress, ExportReport, FileReport,
    IndexSnapshot, PartitionReport, export, export_snapshot, export_to, rollup_table_dir,
    rollup_txn_app_id, txn_app_id, vacuum,
};
pub use restore::{LakePartition, RestoreReport, lake_partitions, restore};
pub use schema::{
    Column, ColumnType, ID_COLUMN, LakeSchema, PARTITION_COLUMN, PARTITION_COLUMNS, Role,
    SHARD_COLUMN, TSID_COLUMN,
};
pub use store::{LakeStore, StoredObject};
pub use writer::{
    DEFAULT_FILE_ROWS, DEFAULT_ID_BLOOM_FPR, DEFAULT_ROW_GROUP_ROWS, DEFAULT_SHARD_RANGE_BITS,
    FileRows, FileStats, Source, WriteOptions, write_partition,
};

/// Virtual shards of the `shard` column: the lake and the future cluster route a series
/// to `Tsid::shard(VIRTUAL_SHARDS)`. A power of two, so a cluster of `2^k ≤ 256` shards
/// finds its shard as `shard >> (8 - k)` (multiply-shift of the same 32 bits).
pub const VIRTUAL_SHARDS: u32 = 256;

/// The virtual shard of a series, the lake's `shard` partition column:
/// [`Tsid::shard`](tidemark::tsid::Tsid::shard)`(VIRTUAL_SHARDS)`, the one routing
/// function of Tidemark (the lake and the scale-out routing both call it). It is the
/// high 32 bits of [`Tsid::routing_hash`](tidemark::tsid::Tsid::routing_hash) (the
/// first 8 bytes of the tsid's 128-bit hash part, big-endian) times 256, shifted right
/// by 32: with 256 shards, simply byte 4 of the 20-byte tsid (the first byte after the
/// 4-byte prefix), which any reader can check. Uniform over series and pinned across
/// versions by a golden test; every point of a series has the same shard.
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

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use tidemark::tsid::Tsid;

    use super::shard_of;

    /// The shard is persisted (paths, partition values): its function must not change.
    #[test]
    fn shard_of_is_pinned_and_coarsens_by_shifting() {
        let mut bytes = [0u8; 20];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37).wrapping_add(11);
        }
        let t = Tsid::from_bytes(bytes);
        assert_eq!(t.routing_hash(), 0x9fc4_e90e_3358_7da2);
        assert_eq!(shard_of(&t), 0x9f);
        for s in 0..=255u8 {
            bytes[4] = s;
            let t = Tsid::from_bytes(bytes);
            assert_eq!(shard_of(&t), u32::from(s));
            // A cluster of 2^k shards routes to the virtual shard's top k bits.
            for k in 0..=8u32 {
                let n = NonZeroU32::new(1 << k).unwrap();
                assert_eq!(t.shard(n), shard_of(&t) >> (8 - k));
            }
        }
    }
}
