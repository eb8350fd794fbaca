//! The crate's error type.

use std::io;
use std::path::PathBuf;

use tidemark_tsid::SyntheticId;

/// A `Result` whose error is this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong while opening or running an [`Engine`](crate::Engine).
///
/// Per-item problems of a batch (a duplicate, an invalid point) are not errors: they are
/// [`Outcome`](crate::Outcome)s. An `Error` means the engine could not do its job.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error on a file or directory of the engine.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A segment or tombstone error; segment errors opened from a file name the file.
    #[error(transparent)]
    Segment(#[from] tidemark_segment::Error),
    /// An id text that is not an id of this engine's mode (see
    /// [`Engine::parse_id`](crate::Engine::parse_id)).
    #[error("bad id {text:?}: {detail}")]
    BadId {
        /// The text.
        text: String,
        /// What is wrong with it.
        detail: String,
    },
    /// An event's id could not be computed (see [`Mode::Events`](crate::Mode::Events)).
    #[error("event id: {detail}")]
    EventId {
        /// Why.
        detail: String,
    },
    /// The directory holds no engine (no `MANIFEST`).
    #[error("{path} holds no engine: no MANIFEST")]
    NoManifest {
        /// The directory.
        path: PathBuf,
    },
    /// [`Engine::create`](crate::Engine::create) on a directory that already holds one.
    #[error("{path} already holds an engine (MANIFEST exists)")]
    AlreadyExists {
        /// The directory.
        path: PathBuf,
    },
    /// A file starts or ends with the wrong magic bytes.
    #[error("bad magic in {path}: expected {expected:?}, found {found:?}")]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The magic this crate writes.
        expected: [u8; 4],
        /// What the file holds.
        found: [u8; 4],
    },
    /// A file of a format version this build cannot read.
    #[error("unsupported format version in {path}: expected {expected}, found {found}")]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version this build reads.
        expected: u32,
        /// The version found.
        found: u32,
    },
    /// A stored checksum does not match the bytes (the manifest; WAL records are framed
    /// and a bad one ends the log instead).
    #[error("checksum mismatch in {path}: expected {expected:#010x}, got {got:#010x}")]
    ChecksumMismatch {
        /// The file.
        path: PathBuf,
        /// The stored CRC32.
        expected: u32,
        /// The CRC32 of the bytes.
        got: u32,
    },
    /// A file is shorter than its structure says.
    #[error("truncated {path}: needed {needed} bytes at offset {offset}, {available} available")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Where the read started.
        offset: u64,
        /// Bytes needed.
        needed: u64,
        /// Bytes left.
        available: u64,
    },
    /// A structurally invalid file whose checksum nevertheless matched.
    #[error("corrupt {path} at offset {offset}: {detail}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset of the problem.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// A series or column given to [`Engine::series`](crate::Engine::series) or
    /// [`Engine::column`](crate::Engine::column) was refused.
    #[error("refused: {reason}")]
    Rejected {
        /// Why.
        reason: crate::engine::Rejection,
    },
    /// The write-ahead log named by the manifest is missing.
    #[error("write-ahead log {path} named by the manifest is missing")]
    MissingWal {
        /// The expected log file.
        path: PathBuf,
    },
    /// A segment's row count differs from the manifest's.
    #[error("segment {path} has {found} rows, the manifest says {expected}")]
    RowCountMismatch {
        /// The segment file.
        path: PathBuf,
        /// Rows according to the manifest.
        expected: u64,
        /// Rows in the file.
        found: u64,
    },
    /// An invalid [`EngineConfig`](crate::EngineConfig) value.
    #[error("invalid configuration {name}: {detail}")]
    InvalidConfig {
        /// The setting.
        name: &'static str,
        /// Expected vs found.
        detail: String,
    },
    /// A tombstone names a row its segment does not have (an internal inconsistency).
    #[error("cannot delete {id}: row {row} is outside its segment")]
    BadRow {
        /// The point.
        id: SyntheticId,
        /// The row.
        row: u64,
    },
    /// A merge run off the store panicked (a bug); its inputs stay live.
    #[error("a merge panicked (a bug); its segments stay as they were")]
    MergePanicked,
    /// A refresh run off the store panicked (a bug); its points stay buffered and logged.
    #[error("a refresh panicked (a bug); its points stay buffered and logged")]
    RefreshPanicked,
    /// An earlier write-ahead log failure left memory ahead of the disk; writes are refused
    /// until the engine is reopened (which replays what reached the log).
    #[error("engine poisoned by an earlier write-ahead log failure; reopen it")]
    Poisoned,
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}
