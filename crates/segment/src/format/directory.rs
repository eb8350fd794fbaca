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

/// Bytes of one encoded directory entry.
pub(crate) const ENTRY_LEN: usize = 20;

/// Appends `e` encoded (`offset u64 | len u32 | raw_len u32 | crc u32`): a writer keeps
/// each column's entries this way, 20 bytes a block, and writes them as they are.
pub(crate) fn put_entry(out: &mut Vec<u8>, e: &BlockRef) {
    put_u64(out, e.offset);
    put_u32(out, e.len);
    put_u32(out, e.raw_len);
    put_u32(out, e.crc);
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
