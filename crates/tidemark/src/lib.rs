#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod bulk;
mod counters;
mod doc;
mod error;
mod extras;
mod filter;
mod index;
mod ingest;
mod labels;
mod mapping;
mod query;
mod read;
mod row;
mod scan;
mod search;
mod series_memo;
mod snapshot;
mod stats;
mod time;

pub use bulk::{
    Action, ActionError, ActionLine, BulkItem, ItemResult, ItemStatus, looks_like_action,
    parse_action, read_action,
};
pub use counters::{Counters, ItemCounts};
pub use doc::{DocParser, ParsedDoc, point_to_doc};
pub use error::{Error, Result};
pub use filter::{Filter, TimeRange};
pub use index::{COUNTERS_FILE, Index, LOCK_FILE, MAPPING_FILE, PreparedItem};
pub use ingest::{IngestOptions, IngestSummary, InputFormat, Progress};
pub use labels::{
    LABEL_FIELD_PATH, LABELS_MODE, LABELS_TIMESTAMP_FIELD, LabelPoints, LabelSeries,
    METRIC_NAME_LABEL, SampleBatch, SampleMark, SampleTally, SampleValue, VALUE_BOOL_FIELD,
    VALUE_FIELD, VALUE_KEYWORD_FIELD, VALUE_LONG_FIELD, label_mapping,
};
pub use mapping::{
    DEFAULT_TIMESTAMP_FIELD, Dynamic, EventSettings, Field, FieldRole, FieldType, IndexMode,
    Mapping, MetricType,
};
pub use query::{
    Agg, AggOutput, Bucket, BucketKey, CalendarUnit, DEFAULT_MAX_BUCKETS, Hit, Interval,
    MetricKind, SearchAfter, SearchRequest, SearchResult,
};
pub use read::{SeriesHit, expired_pieces, rollup_step};
pub use search::{AggBucket, AggQuery, AggResult, GroupAgg, Order, Query, RollupSearch, SeriesAgg};
pub use snapshot::{SnapshotStats, copy_tree};
pub use stats::{ComponentUsage, DiskUsage, IndexStats};
pub use time::{format_time, parse_interval, parse_time};

/// The bloom filters (`tidemark-bloom`).
pub use tidemark_bloom as bloom;
/// The exactly-once engine (`tidemark-dedup`).
pub use tidemark_dedup as dedup;
/// The columnar segment format (`tidemark-segment`).
pub use tidemark_segment as segment;
/// Series ids, synthetic ids and event fingerprints (`tidemark-tsid`).
pub use tidemark_tsid as tsid;
