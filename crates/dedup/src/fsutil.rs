//! Durable-file helpers: the workspace's one atomic write ([`tidemark_segment::AtomicFile`],
//! defined in `tidemark-bloom`) and directory fsync, with this crate's errors.

use std::path::Path;

use crate::error::{Error, Result};

/// Fsyncs a directory so that entries created, renamed or removed in it are durable.
/// A no-op where directories cannot be opened as files (Windows).
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    tidemark_segment::sync_dir(dir).map_err(Error::io(dir))
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, fsync,
/// rename over `path`, fsync of the directory; the temporary file is removed on error.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    tidemark_segment::AtomicFile::write_all_to(path, bytes).map_err(Error::io(path))
}
