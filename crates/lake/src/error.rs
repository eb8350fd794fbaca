//! The crate's error type.

use std::path::PathBuf;

/// A `Result` whose error is this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// What can go wrong while exporting an index to a lake.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error on a file or directory of the lake.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The object store refused an operation (a put, get, list or delete of the lake).
    #[error("object store, {location}: {source}")]
    Store {
        /// The object (or the lake's root).
        location: String,
        /// The store's error.
        #[source]
        source: object_store::Error,
    },
    /// The index could not be opened or read (façade and engine errors).
    #[error(transparent)]
    Index(#[from] tidemark::Error),
    /// A segment of the index could not be read.
    #[error(transparent)]
    Segment(#[from] tidemark::segment::Error),
    /// The Parquet writer refused a file (arrow-rs).
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// An Arrow array could not be built.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    /// A split-block bloom filter could not be sized.
    #[error(transparent)]
    Bloom(#[from] tidemark_bloom::Error),
    /// The index has no time partitions: only sealed partitions are exported.
    #[error(
        "{path} is not a time-partitioned index: only sealed time partitions are exported (create it with --partition)"
    )]
    NotPartitioned {
        /// The index directory.
        path: PathBuf,
    },
    /// A partition asked for is not a sealed partition of the index.
    #[error("no sealed partition starts at {start}: sealed partitions start at {available}")]
    NoSuchPartition {
        /// The start asked for (RFC 3339).
        start: String,
        /// The sealed partitions' starts, comma-separated (or `none`).
        available: String,
    },
    /// A column would have two types: in the index (a dimension and a metric of one
    /// name) or between the index and the table already in the lake.
    #[error("column `{name}`: expected {expected}, found {found}")]
    ColumnConflict {
        /// The column.
        name: String,
        /// The type the table (or the first use) has.
        expected: String,
        /// The other type.
        found: String,
    },
    /// An option is out of range.
    #[error("invalid option {name}: {detail}")]
    InvalidOption {
        /// The option.
        name: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// The Delta transaction log holds something this writer does not read.
    #[error("delta log {path}: {detail}")]
    DeltaLog {
        /// The log file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// Another writer committed the same table version first.
    #[error(
        "delta log version {version} was committed by another writer meanwhile: run the export again"
    )]
    CommitConflict {
        /// The version both wanted.
        version: u64,
    },
    /// The row count written differs from the partition's live rows (a bug, never a
    /// silently short file).
    #[error("partition {start_ms}: wrote {written} rows, the partition holds {expected}")]
    RowCountMismatch {
        /// The partition.
        start_ms: i64,
        /// Rows written.
        written: u64,
        /// Live rows of the partition.
        expected: u64,
    },
    /// A lake row that does not rebuild into the index it is restored into (another
    /// mapping, a value no document can hold, a column of an unknown type).
    #[error("restore: {detail}")]
    RestoreMismatch {
        /// What did not match.
        detail: String,
    },
}

impl Error {
    /// A closure wrapping an I/O error with its path, for `map_err`.
    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
        move |source| Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
