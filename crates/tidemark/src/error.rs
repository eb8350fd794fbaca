//! The façade's error type.

use std::path::PathBuf;

/// Errors of the façade: mappings, documents, queries, index directories and the
/// lower crates' errors (wrapped, keeping their `source()`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The mapping is invalid; `field` names the offending field (or section).
    #[error("invalid mapping: `{field}`: {reason}")]
    Mapping {
        /// The field path or mapping section.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A document does not fit the mapping; `field` names the offending field.
    #[error("field `{field}`: {reason}")]
    Document {
        /// The field path (`@timestamp`, `k8s.pod.name`, ...), or `_source` for the whole document.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A line is not valid JSON.
    #[error("malformed JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A `_bulk` action line is invalid.
    #[error("invalid bulk action: {reason}")]
    BulkAction {
        /// What is wrong.
        reason: String,
    },
    /// An `_id` that does not parse.
    #[error("invalid _id `{id}`: {reason}")]
    InvalidId {
        /// The text given.
        id: String,
        /// Why it does not parse.
        reason: String,
    },
    /// A time that is neither RFC 3339 nor epoch milliseconds.
    #[error(
        "invalid time `{input}`: expected RFC 3339 (2025-11-30T00:00:00Z) or epoch milliseconds"
    )]
    InvalidTime {
        /// The text given.
        input: String,
    },
    /// A query is invalid (unknown field, bad interval, ...).
    #[error("invalid query: {reason}")]
    Query {
        /// What is wrong.
        reason: String,
    },
    /// An aggregation answer would hold more buckets than the request allows
    /// ([`SearchRequest::max_buckets`](crate::SearchRequest::max_buckets), Elasticsearch's
    /// `search.max_buckets`; [`DEFAULT_MAX_BUCKETS`](crate::DEFAULT_MAX_BUCKETS) unless
    /// set). Nothing is answered rather than a shortened answer.
    #[error("trying to create too many buckets: {requested} > search.max_buckets [{limit}]")]
    TooManyBuckets {
        /// The limit.
        limit: u64,
        /// The buckets counted when the limit was crossed (the whole answer may hold
        /// more: counting stops there).
        requested: u64,
    },
    /// The directory holds no index.
    #[error("no index in {}: create one with `tidemark create {} --mapping <FILE>`", path.display(), path.display())]
    NoIndex {
        /// The directory.
        path: PathBuf,
    },
    /// The directory already holds an index.
    #[error("{} already holds an index", path.display())]
    AlreadyExists {
        /// The directory.
        path: PathBuf,
    },
    /// Another process holds the index's write lock.
    #[error("index {} is locked by another process{holder}: one process at a time may open an index", path.display())]
    Locked {
        /// The directory.
        path: PathBuf,
        /// `" (pid N)"` when the holder wrote its pid, else empty.
        holder: String,
    },
    /// An I/O error on a file of the index.
    #[error("i/o error on {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An I/O error reading input.
    #[error("i/o error reading input: {0}")]
    Input(#[source] std::io::Error),
    /// A thread of an ingest stopped before its work was done (it panicked).
    #[error("the ingest's {0} thread stopped before its work was done")]
    ThreadStopped(&'static str),
    /// An engine error.
    #[error(transparent)]
    Engine(#[from] tidemark_dedup::Error),
    /// A segment error.
    #[error(transparent)]
    Segment(#[from] tidemark_segment::Error),
    /// A tsid error.
    #[error(transparent)]
    Tsid(#[from] tidemark_tsid::Error),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }

    pub(crate) fn doc(field: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::Document {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn mapping(field: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::Mapping {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// The façade's result type.
pub type Result<T> = std::result::Result<T, Error>;
