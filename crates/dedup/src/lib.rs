#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod buffer;
mod config;
mod engine;
mod error;
mod events;
mod fsutil;
mod le;
mod manifest;
mod merge;
mod partition;
mod read;
mod record;
mod stats;
mod wal;

pub use buffer::{ColumnKind, ColumnRef, SeriesRef};
pub use config::{Durability, EngineConfig, Strategy};
pub use engine::{
    AppendBatch, Engine, MAX_COLUMNS, MAX_STRING_LEN, MergeJob, MergedSegment, Op, Outcome,
    RefreshJob, RefreshedSegment, Rejection, SampleCell, Samples, Tally, Warning,
};
pub use error::{Error, Result};
pub use events::{EventIds, Mode};
pub use manifest::{MANIFEST_MAGIC, MANIFEST_NAME, MANIFEST_VERSION};
pub use partition::{
    CounterStats, DOC_COUNT_COLUMN, FAILPOINT_ENV, MaintainReport, PARTITIONS_MAGIC,
    PARTITIONS_NAME, PARTITIONS_VERSION, PartMergeJob, PartMerged, PartRefreshJob, PartRefreshed,
    PartitionConfig, PartitionInfo, PartitionSearch, PartitionStats, PartitionedEngine, Piece,
    Postings, RollupRow, RollupStats, SealedPartition, counter_step, dim_value_text,
};
pub use read::SeriesReader;
pub use stats::{DedupStats, MergeStats};
pub use wal::{MAX_RECORD_LEN, WAL_HEADER_LEN, WAL_MAGIC, WAL_VERSION};
