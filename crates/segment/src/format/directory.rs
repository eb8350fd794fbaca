//! The block directory: one fixed-size entry per block, column by column (timestamps,
//! then metric columns, then extra columns), each column with as many entries as its
//! span cuts the rows into.

use super::footer::Footer;
use super::meta::Meta;
use crate::error::{Error, Place, Result};
use crate::le::{Reader, put_u32, put_u64};

/// Length of one block directory entry: offset u64, len u32, raw_len u32, crc32 u32.
pub const DIR_ENTRY_LEN: usize = 20;

/// One entry of the block directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRef {
    /// Offset of the block in the file.
    pub offset: u64,
    /// Stored length (0: the column has no value in this block).
    pub len: u32,
    /// Decoded length.
    pub raw_len: u32,
    /// CRC32 of the stored bytes.
    pub crc: u32,
}

/// The directory entry of a column block with no value. Its offset is 0: the reader
/// never reads an empty block's bytes.
pub(crate) const EMPTY_ENTRY: BlockRef = BlockRef {
    offset: 0,
    len: 0,
    raw_len: 0,
    crc: 0,
};

/// Where a column's entries are in the directory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ColumnLayout {
    /// Index of its first entry.
    pub first_entry: u64,
    /// Number of blocks (entries).
    pub blocks: u32,
    /// Rows spanned by each block.
    pub span: u64,
}

/// Appends `e` encoded (`offset u64 | len u32 | raw_len u32 | crc u32`).
pub(crate) fn put_entry(out: &mut Vec<u8>, e: &BlockRef) {
    put_u64(out, e.offset);
    put_u32(out, e.len);
    put_u32(out, e.raw_len);
    put_u32(out, e.crc);
}

/// Directory bytes a [`DirectoryWriter`] holds in memory before it moves them to its
/// spill file.
pub(crate) const SPILL_BYTES: usize = 1 << 20;

/// A streaming writer's directory, built while the blocks are written and written out
/// after them, column by column. Entries are kept encoded; once more than
/// [`SPILL_BYTES`] are held they move, one piece per column, to an anonymous temporary
/// file (gone when the writer is), so that a writer's memory does not grow with the
/// blocks it writes (a 50M-row k8s merge has about 10 MB of directory). Small segments
/// (every refresh) never spill.
#[derive(Debug)]
pub(crate) struct DirectoryWriter {
    /// Per column (timestamps first): entries held, and pieces in the spill file.
    columns: Vec<ColumnEntries>,
    held: usize,
    spill: Option<std::fs::File>,
    spill_len: u64,
}

#[derive(Debug, Default)]
struct ColumnEntries {
    held: Vec<u8>,
    /// (offset, length) of each spilled piece, in order.
    pieces: Vec<(u64, usize)>,
    count: u64,
}

impl DirectoryWriter {
    /// A directory of `columns` columns (timestamps included).
    pub(crate) fn new(columns: usize) -> DirectoryWriter {
        DirectoryWriter {
            columns: (0..columns).map(|_| ColumnEntries::default()).collect(),
            held: 0,
            spill: None,
            spill_len: 0,
        }
    }

    /// Appends the entry of column `column`'s next block.
    ///
    /// # Errors
    /// I/O errors of the spill file; [`Error::InvalidOption`] for a column out of range
    /// (a writer's bug).
    pub(crate) fn push(&mut self, column: usize, e: &BlockRef) -> Result<()> {
        let Some(c) = self.columns.get_mut(column) else {
            return Err(Error::InvalidOption {
                name: "directory",
                detail: format!("no column {column}"),
            });
        };
        put_entry(&mut c.held, e);
        c.count += 1;
        self.held += DIR_ENTRY_LEN;
        if self.held >= SPILL_BYTES {
            self.spill()?;
        }
        Ok(())
    }

    /// Moves every column's held entries to the spill file.
    fn spill(&mut self) -> Result<()> {
        use std::io::Write;
        let file = match &mut self.spill {
            Some(f) => f,
            None => self.spill.insert(tempfile::tempfile()?),
        };
        for c in &mut self.columns {
            if c.held.is_empty() {
                continue;
            }
            file.write_all(&c.held)?;
            c.pieces.push((self.spill_len, c.held.len()));
            self.spill_len += c.held.len() as u64;
            c.held.clear();
        }
        self.held = 0;
        Ok(())
    }

    /// Entries of column `column` so far.
    pub(crate) fn count(&self, column: usize) -> u64 {
        self.columns.get(column).map_or(0, |c| c.count)
    }

    /// Bytes of the whole directory.
    pub(crate) fn len(&self) -> u64 {
        self.columns.iter().map(|c| c.count).sum::<u64>() * DIR_ENTRY_LEN as u64
    }

    /// Hands the directory's bytes, in file order, to `put`.
    ///
    /// # Errors
    /// I/O errors reading the spill file back, and `put`'s.
    pub(crate) fn write_to(
        &mut self,
        mut put: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        let mut piece = Vec::new();
        for c in &self.columns {
            for &(offset, len) in &c.pieces {
                let Some(file) = self.spill.as_mut() else {
                    return Err(Error::InvalidOption {
                        name: "directory",
                        detail: "a spilled piece without a spill file".into(),
                    });
                };
                piece.resize(len, 0);
                file.seek(SeekFrom::Start(offset))?;
                file.read_exact(&mut piece)?;
                put(&piece)?;
            }
            put(&c.held)?;
        }
        Ok(())
    }
}

/// Each column's place in the directory (timestamps first), from the footer's row count
/// and the meta section's span shifts; checks that `dir_len` is exactly the size of
/// those entries.
pub(crate) fn layout(footer: &Footer, meta: &Meta, dir_len: usize) -> Result<Vec<ColumnLayout>> {
    let mut layout = Vec::with_capacity(meta.columns.len() + 1);
    let mut entries = 0u64;
    let spans = std::iter::once(0u8)
        .chain(meta.columns.iter().map(|c| c.span_shift))
        .chain(meta.extras.iter().map(|e| e.span_shift));
    for shift in spans {
        let span = u64::from(footer.block_rows) << shift;
        let blocks = u32::try_from(footer.row_count.div_ceil(span))
            .map_err(|_| Error::corrupt(Place::Meta, "too many blocks"))?;
        layout.push(ColumnLayout {
            first_entry: entries,
            blocks,
            span,
        });
        entries += u64::from(blocks);
    }
    let expected = entries * DIR_ENTRY_LEN as u64;
    if dir_len as u64 != expected {
        return Err(Error::corrupt(
            Place::Directory,
            format!("{dir_len} bytes, expected {expected}"),
        ));
    }
    Ok(layout)
}

/// Decodes entry number `index` of directory `dir`.
pub(crate) fn entry(dir: &[u8], index: u64) -> Result<BlockRef> {
    let at = index * DIR_ENTRY_LEN as u64;
    let bytes = dir
        .get(at as usize..at as usize + DIR_ENTRY_LEN)
        .ok_or(Error::Truncated {
            place: Place::Directory,
            needed: at + DIR_ENTRY_LEN as u64,
            available: dir.len() as u64,
        })?;
    let mut r = Reader::new(bytes, Place::Directory);
    Ok(BlockRef {
        offset: r.u64()?,
        len: r.u32()?,
        raw_len: r.u32()?,
        crc: r.u32()?,
    })
}

#[cfg(test)]
mod spill_tests {
    use super::*;

    #[test]
    fn a_spilled_directory_writes_the_bytes_a_held_one_would() {
        let entry = |c: usize, i: u64| BlockRef {
            offset: i * 7 + c as u64,
            len: i as u32,
            raw_len: c as u32,
            crc: (i ^ 0xabcd) as u32,
        };
        let counts = [60_000u64, 30_000, 70_000];
        let mut dir = DirectoryWriter::new(counts.len());
        let mut expected: Vec<Vec<u8>> = vec![Vec::new(); counts.len()];
        // Interleaved as a writer pushes them, past SPILL_BYTES three times.
        for i in 0..70_000u64 {
            for (c, &n) in counts.iter().enumerate() {
                if i < n {
                    dir.push(c, &entry(c, i)).unwrap();
                    put_entry(&mut expected[c], &entry(c, i));
                }
            }
        }
        assert!(dir.spill.is_some() && dir.columns.iter().all(|c| c.pieces.len() >= 2));
        assert_eq!(dir.count(1), 30_000);
        let mut out = Vec::new();
        dir.write_to(|b| {
            out.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        assert_eq!(out.len() as u64, dir.len());
        assert!(out == expected.concat());
        assert!(dir.push(3, &entry(0, 0)).is_err());
    }
}
