#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// The workspace forbids unsafe code; this crate needs exactly one `unsafe` call, the
// memory map in `mmap.rs`, which is the only module allowed to use it.
#![deny(unsafe_code)]

mod batch;
mod bitmap;
mod bloom;
mod codec;
mod dump;
mod error;
mod format;
mod hash;
mod intern;
mod le;
mod mmap;
mod options;
mod plan;
mod point;
mod reader;
pub mod report;
mod slots;
mod stream;
mod tombstone;
mod v1;
mod validate;
mod writer;

pub use batch::{write_batch, write_batch_with_series};
pub use bloom::{SegmentBloom, SegmentBloomRef};
pub use codec::gauge_codec;
pub use dump::dump;
pub use error::{Error, Place, Result};
pub use format::directory::BlockRef;
pub use format::meta::{ColumnInfo, ExtraInfo};
pub use format::series::{Presence, Series, WrittenSeries};
pub use format::{
    DEFAULT_BLOCK_ROWS, DIR_ENTRY_LEN, FOOTER_LEN, FORMAT_VERSION, Footer, HEADER_LEN, MAGIC,
    MAX_BLOCK_ROWS, MIN_FORMAT_VERSION, SectionRef,
};
pub use hash::{FoldBuildHasher, FoldHasher};
pub use intern::{DimsInterner, SharedDims};
pub use options::{SegmentOptions, is_zstd_level};
pub use plan::{ColumnPlan, RowBatch, SeriesPresence};
pub use point::{Dim, Extra, ExtraKind, MetricKind, MetricValue, Point, RowId};
pub use reader::{
    ColumnRead, ColumnSamples, RowCursor, RowView, Segment, SeriesCursor, SizeBreakdown,
};
pub use slots::TimeSlots;
pub use stream::{SegmentMeta, SegmentStreamWriter, StreamSchema, span_shift};
/// The workspace's one atomic-write helper, defined in `tidemark-bloom` (the crate with no
/// internal dependencies) and re-exported here for the crates above.
pub use tidemark_bloom::{AtomicFile, is_temp_name, sync_dir};
pub use tombstone::{TOMBSTONE_MAGIC, Tombstones};
pub use validate::{MAX_NAME_LEN, PointViolation, validate_point};
pub use writer::SegmentWriter;
