//! The crate's error type, each variant mapped to a Prometheus API `errorType`.

/// A PromQL parse, evaluation or storage error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The query does not parse, or a parameter (time, step, duration) is invalid.
    #[error("{0}")]
    BadData(String),
    /// The query uses a PromQL feature this engine does not implement; it names it.
    #[error("unsupported PromQL feature: {0}")]
    Unsupported(String),
    /// Evaluation failed (e.g. many-to-many matching, duplicate output series).
    #[error("{0}")]
    Execution(String),
    /// The query selected more series than allowed.
    #[error("query selects more than {limit} series (max series per query)")]
    TooManySeries {
        /// The limit.
        limit: usize,
    },
    /// The query loaded or produced more points than allowed.
    #[error("query needs more than {limit} points (max points per query)")]
    TooManyPoints {
        /// The limit.
        limit: usize,
    },
    /// The query ran past its timeout.
    #[error("query timed out after {millis} ms")]
    Timeout {
        /// The timeout in milliseconds.
        millis: u128,
    },
    /// Reading the storage failed.
    #[error("storage: {0}")]
    Storage(String),
    /// Part of the storage cannot be reached now (a cluster's shard without a live
    /// owner); a retry may succeed.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl Error {
    /// The Prometheus HTTP API `errorType` of this error: `bad_data`, `execution`,
    /// `timeout` or `unavailable`.
    pub fn error_type(&self) -> &'static str {
        match self {
            Error::BadData(_) | Error::Unsupported(_) => "bad_data",
            Error::Timeout { .. } => "timeout",
            Error::Unavailable(_) => "unavailable",
            Error::Execution(_)
            | Error::TooManySeries { .. }
            | Error::TooManyPoints { .. }
            | Error::Storage(_) => "execution",
        }
    }

    /// The HTTP status Prometheus answers with for this error: 400 for `bad_data`,
    /// 422 for `execution`, 503 for `timeout` and `unavailable`, 500 for a storage
    /// failure.
    pub fn http_status(&self) -> u16 {
        match self {
            Error::BadData(_) | Error::Unsupported(_) => 400,
            Error::Timeout { .. } | Error::Unavailable(_) => 503,
            Error::Storage(_) => 500,
            _ => 422,
        }
    }
}

/// A `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
