//! The server's error type, and how each error answers over HTTP.

use std::path::PathBuf;

/// Errors of the server: configuration, index administration, requests and the façade's
/// errors (wrapped, keeping their `source()`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration (flags or file) is invalid.
    #[error("invalid configuration: {field}: {reason}")]
    Config {
        /// The setting.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// An I/O error on a file or directory of the server.
    #[error("i/o error on {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A network error (binding, accepting).
    #[error("network error: {0}")]
    Net(#[source] std::io::Error),
    /// A request is invalid: `kind` is the Elasticsearch error type, `status` the HTTP
    /// status (400 unless said otherwise).
    #[error("{kind}: {reason}")]
    Request {
        /// HTTP status.
        status: u16,
        /// Elasticsearch error type (`parse_exception`, `illegal_argument_exception`, ...).
        kind: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// Writes to an index are refused for now (its disk is over the flood stage, or a
    /// failed write is being recovered by reopening it): a retry later succeeds, and
    /// nothing of the request was acknowledged. Answered `status` (`429
    /// cluster_block_exception` to Elasticsearch clients, `503` to the metrics
    /// protocols) with `Retry-After`.
    #[error("index [{index}] blocked by: [{reason}]")]
    Blocked {
        /// The index.
        index: String,
        /// Why, and what clears it.
        reason: String,
        /// HTTP status.
        status: u16,
    },
    /// The façade failed.
    #[error(transparent)]
    Tidemark(#[from] tidemark::Error),
    /// An export to the Parquet lake failed.
    #[error(transparent)]
    Lake(#[from] tidemark_lake::Error),
}

/// Seconds a client is told to wait (`Retry-After`) before retrying a write refused by
/// a blocked index: the writer re-checks the disk and retries a reopen at least this
/// often.
pub const RETRY_AFTER_SECS: u64 = 5;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }

    pub(crate) fn config(field: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::Config {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// A `400` with Elasticsearch error type `kind`.
    pub(crate) fn bad(kind: &'static str, reason: impl Into<String>) -> Error {
        Error::Request {
            status: 400,
            kind,
            reason: reason.into(),
        }
    }

    /// An error with any status.
    pub(crate) fn status(status: u16, kind: &'static str, reason: impl Into<String>) -> Error {
        Error::Request {
            status,
            kind,
            reason: reason.into(),
        }
    }

    /// `404 index_not_found_exception`.
    pub(crate) fn no_index(name: &str) -> Error {
        Error::status(
            404,
            "index_not_found_exception",
            format!("no such index [{name}]"),
        )
    }

    /// This error as the metrics protocols answer it: a blocked index is `503` (what
    /// Prometheus, Telegraf and OTLP senders retry), anything else unchanged.
    pub(crate) fn for_metrics(self) -> Error {
        match self {
            Error::Blocked { index, reason, .. } => Error::Blocked {
                index,
                reason,
                status: 503,
            },
            other => other,
        }
    }

    /// `Retry-After` seconds for an error a retry later fixes.
    pub fn retry_after(&self) -> Option<u64> {
        matches!(self, Error::Blocked { .. }).then_some(RETRY_AFTER_SECS)
    }

    /// The HTTP status and Elasticsearch error type of this error.
    pub fn status_and_kind(&self) -> (u16, &'static str) {
        match self {
            Error::Request { status, kind, .. } => (*status, kind),
            Error::Blocked { status, .. } => (*status, "cluster_block_exception"),
            Error::Config { .. } => (400, "illegal_argument_exception"),
            Error::Tidemark(e) => match e {
                tidemark::Error::Mapping { .. } => (400, "mapper_parsing_exception"),
                tidemark::Error::Document { .. } | tidemark::Error::Json(_) => {
                    (400, "document_parsing_exception")
                }
                tidemark::Error::Query { .. } | tidemark::Error::InvalidTime { .. } => {
                    (400, "parse_exception")
                }
                tidemark::Error::InvalidId { .. } | tidemark::Error::BulkAction { .. } => {
                    (400, "illegal_argument_exception")
                }
                // Elasticsearch's answer to an aggregation over `search.max_buckets`.
                tidemark::Error::TooManyBuckets { .. } => (400, "too_many_buckets_exception"),
                tidemark::Error::AlreadyExists { .. } => (400, "resource_already_exists_exception"),
                tidemark::Error::NoIndex { .. } => (404, "index_not_found_exception"),
                tidemark::Error::Engine(tidemark::dedup::Error::InvalidConfig { .. }) => {
                    (400, "illegal_argument_exception")
                }
                _ => (500, "exception"),
            },
            Error::Lake(e) => match e {
                tidemark_lake::Error::NotPartitioned { .. }
                | tidemark_lake::Error::NoSuchPartition { .. }
                | tidemark_lake::Error::InvalidOption { .. } => (400, "illegal_argument_exception"),
                tidemark_lake::Error::ColumnConflict { .. }
                | tidemark_lake::Error::CommitConflict { .. } => {
                    (409, "version_conflict_engine_exception")
                }
                _ => (500, "exception"),
            },
            Error::Io { .. } | Error::Net(_) => (500, "exception"),
        }
    }

    /// The reason text sent to clients.
    pub fn reason(&self) -> String {
        match self {
            Error::Request { reason, .. } => reason.clone(),
            other => other.to_string(),
        }
    }
}

/// The server's result type.
pub type Result<T> = std::result::Result<T, Error>;
