//! Presence headers: which rows of a block hold a value of a sparse column.

use crate::error::{Error, Result};
use crate::le::{Reader, put_u32};

/// Presence: implied by the series table (absent or full per series).
pub const PRESENCE_SERIES: u8 = 0;
/// Presence: a roaring bitmap of block-relative row offsets follows.
pub const PRESENCE_ROARING: u8 = 1;

/// Writes a presence header: series-implied, or a roaring bitmap of block-relative rows.
pub fn encode_presence(bitmap: Option<&roaring::RoaringBitmap>, out: &mut Vec<u8>) -> Result<()> {
    match bitmap {
        None => out.push(PRESENCE_SERIES),
        Some(b) => {
            out.push(PRESENCE_ROARING);
            let len = u32::try_from(b.serialized_size()).map_err(|_| Error::TooLarge {
                what: "presence bitmap bytes",
                found: b.serialized_size() as u64,
                max: u64::from(u32::MAX),
            })?;
            put_u32(out, len);
            b.serialize_into(&mut *out)?;
        }
    }
    Ok(())
}

/// Reads a presence header; returns the bitmap when one is stored.
pub fn decode_presence(
    r: &mut Reader<'_>,
    block_rows: u32,
) -> Result<Option<roaring::RoaringBitmap>> {
    match r.u8()? {
        PRESENCE_SERIES => Ok(None),
        PRESENCE_ROARING => {
            let len = r.u32()? as usize;
            let bytes = r.take(len)?;
            let bitmap = crate::bitmap::read_bitmap(bytes)
                .map_err(|e| Error::corrupt(r.place(), format!("presence bitmap: {e}")))?;
            if let Some(max) = bitmap.max() {
                if max >= block_rows {
                    return Err(Error::corrupt(
                        r.place(),
                        format!("presence bit {max} beyond the block's {block_rows} rows"),
                    ));
                }
            }
            Ok(Some(bitmap))
        }
        other => Err(Error::corrupt(
            r.place(),
            format!("unknown presence kind {other}"),
        )),
    }
}
