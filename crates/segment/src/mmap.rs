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

/// Drops the resident pages of bytes `0..end` of a read-only file mapping (a streaming
/// merge is past them): they leave the process's resident set, and are read back from
/// the file if touched again. Best effort: an error leaves the pages resident.
pub(crate) fn release_before(map: &Mmap, end: usize) {
    let len = end.min(map.len());
    if len == 0 {
        return;
    }
    // SAFETY: `MADV_DONTNEED` is unchecked advice because on an anonymous or private
    // written mapping it discards data. This mapping is read-only, shared and backed by
    // an immutable segment file (see `map`), so no page holds data the file does not:
    // the next access faults the same bytes back in, and every `&[u8]` into the mapping
    // stays valid and unchanged. The range lies within the mapping (checked above and
    // by memmap2).
    #[cfg(unix)]
    let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, 0, len) };
}
