//! The crate's error type.

use std::path::PathBuf;

/// What can stop the server from starting, saving or loading.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or socket operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path or address.
        context: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A snapshot or append-only file does not decode; the server refuses to start rather
    /// than silently drop data.
    #[error("corrupt {kind} file {path}: {detail} (move it away or repair it to start)")]
    CorruptFile {
        /// `snapshot` or `append-only`.
        kind: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong, with the offset where known.
        detail: String,
    },
    /// A configuration value is invalid.
    #[error("bad configuration: {0}")]
    Config(String),
    /// A filter could not be built or decoded.
    #[error(transparent)]
    Bloom(#[from] tidemark_bloom::Error),
}

impl Error {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
