//! The crate's one `unsafe` operation: memory-mapping a segment file.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;

use memmap2::Mmap;

/// Maps `file` read-only.
pub(crate) fn map(file: &File) -> io::Result<Mmap> {
    // SAFETY: `Mmap::map` is unsafe because another process could truncate or modify the
    // file while it is mapped, which would change bytes behind a `&[u8]`. Segment files
    // are immutable by design: writers create them under a temporary name and rename
    // them into place once complete, and nothing in Tidemark writes to a segment after
    // that (deletes go to a separate tombstone file). Readers still bounds-check every
    // offset and checksum every section, so altered contents give an error, not UB in
    // our code; truncation by a foreign process remains the caller's promise not to make.
    unsafe { Mmap::map(file) }
}
