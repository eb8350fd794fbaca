//! The footer: row, series and block counts, the time range, flags, each section's
//! offset, length and CRC, the CRC of the data before it and the trailing magic. Readers
//! start here.

use super::{
    FORMAT_VERSION, HEADER_LEN, MAGIC, MAX_BLOCK_ROWS, MAX_COLUMNS, MAX_ROWS, MIN_FORMAT_VERSION,
};
use crate::error::{Error, Place, Result};
use crate::le::{Reader, put_i64, put_u32, put_u64};

/// Length of the fixed-size footer, magic included.
pub const FOOTER_LEN: usize = 164;

/// Footer flag: a bloom section is present.
pub const FLAG_BLOOM: u32 = 1;
/// Footer flag: an id index (FST) section is present.
pub const FLAG_ID_INDEX: u32 = 2;
/// Footer flag: an event segment (rows of a series may share a timestamp; rows ordered by
/// (tsid, timestamp, row id); the id sections hold the rows' own ids).
pub const FLAG_EVENTS: u32 = 4;

/// Number of section descriptors in the footer.
pub const SECTION_COUNT: usize = 5;

/// Section names in footer order.
pub const SECTION_NAMES: [&str; SECTION_COUNT] =
    ["meta", "series", "directory", "bloom", "id_index"];

/// Section places in footer order.
pub const SECTION_PLACES: [Place; SECTION_COUNT] = [
    Place::Meta,
    Place::SeriesTable,
    Place::Directory,
    Place::Bloom,
    Place::IdIndex,
];

/// Offset, length and CRC32 of one section.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SectionRef {
    /// Offset from the start of the file.
    pub offset: u64,
    /// Length in bytes (0: absent).
    pub len: u64,
    /// CRC32 of the section's bytes.
    pub crc: u32,
}

/// The decoded footer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Footer {
    /// Rows in the segment.
    pub row_count: u64,
    /// Series in the segment.
    pub series_count: u64,
    /// Smallest timestamp (0 when empty).
    pub min_ts: i64,
    /// Largest timestamp (0 when empty).
    pub max_ts: i64,
    /// Rows per block.
    pub block_rows: u32,
    /// Number of row blocks.
    pub block_count: u32,
    /// Number of metric columns.
    pub column_count: u32,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// Meta, series, directory, bloom and id-index sections.
    pub sections: [SectionRef; SECTION_COUNT],
    /// CRC32 of every byte before the footer.
    pub data_crc: u32,
    /// The format version.
    pub version: u32,
}

impl Footer {
    /// Encodes the footer, its CRC and the trailing magic.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FOOTER_LEN);
        put_u64(&mut out, self.row_count);
        put_u64(&mut out, self.series_count);
        put_i64(&mut out, self.min_ts);
        put_i64(&mut out, self.max_ts);
        put_u32(&mut out, self.block_rows);
        put_u32(&mut out, self.block_count);
        put_u32(&mut out, self.column_count);
        put_u32(&mut out, self.flags);
        for s in &self.sections {
            put_u64(&mut out, s.offset);
            put_u64(&mut out, s.len);
            put_u32(&mut out, s.crc);
        }
        put_u32(&mut out, self.data_crc);
        put_u32(&mut out, self.version);
        let crc = crc32fast::hash(&out);
        put_u32(&mut out, crc);
        out.extend_from_slice(&MAGIC);
        debug_assert_eq!(out.len(), FOOTER_LEN);
        out
    }

    /// Decodes and checks the last [`FOOTER_LEN`] bytes of `file`: magic, CRC, version and
    /// every section range against the file size.
    pub fn decode(file: &[u8]) -> Result<Footer> {
        let file_len = file.len() as u64;
        if file.len() < HEADER_LEN + FOOTER_LEN {
            return Err(Error::Truncated {
                place: Place::Footer,
                needed: (HEADER_LEN + FOOTER_LEN) as u64,
                available: file_len,
            });
        }
        let start = file.len() - FOOTER_LEN;
        let bytes = file.get(start..).unwrap_or(&[]);
        let mut tail = Reader::new(bytes.get(FOOTER_LEN - 8..).unwrap_or(&[]), Place::Footer);
        let stored_crc = tail.u32()?;
        let magic = tail.magic()?;
        if magic != MAGIC {
            return Err(Error::BadMagic {
                place: Place::Footer,
                expected: MAGIC,
                found: magic,
            });
        }
        let body = bytes.get(..FOOTER_LEN - 8).unwrap_or(&[]);
        Error::check_crc(Place::Footer, body, stored_crc)?;
        let mut r = Reader::new(body, Place::Footer);
        let row_count = r.u64()?;
        let series_count = r.u64()?;
        let min_ts = r.i64()?;
        let max_ts = r.i64()?;
        let block_rows = r.u32()?;
        let block_count = r.u32()?;
        let column_count = r.u32()?;
        let flags = r.u32()?;
        let mut sections = [SectionRef::default(); SECTION_COUNT];
        for s in &mut sections {
            s.offset = r.u64()?;
            s.len = r.u64()?;
            s.crc = r.u32()?;
        }
        let data_crc = r.u32()?;
        let version = r.u32()?;
        if !(MIN_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                place: Place::Footer,
                found: version,
                min: MIN_FORMAT_VERSION,
                max: FORMAT_VERSION,
            });
        }
        let footer = Footer {
            row_count,
            series_count,
            min_ts,
            max_ts,
            block_rows,
            block_count,
            column_count,
            flags,
            sections,
            data_crc,
            version,
        };
        footer.check(start as u64)?;
        Ok(footer)
    }

    fn check(&self, footer_start: u64) -> Result<()> {
        let bad = |detail: String| Err(Error::corrupt(Place::Footer, detail));
        if self.row_count > MAX_ROWS {
            return bad(format!("row count {} exceeds {MAX_ROWS}", self.row_count));
        }
        if self.series_count > self.row_count {
            return bad(format!(
                "series count {} exceeds row count {}",
                self.series_count, self.row_count
            ));
        }
        if self.block_rows == 0 || self.block_rows > MAX_BLOCK_ROWS {
            return bad(format!(
                "block rows {} not in 1..={MAX_BLOCK_ROWS}",
                self.block_rows
            ));
        }
        if u64::from(self.block_count) != self.row_count.div_ceil(u64::from(self.block_rows)) {
            return bad(format!(
                "block count {} does not match {} rows of {} per block",
                self.block_count, self.row_count, self.block_rows
            ));
        }
        if self.column_count > MAX_COLUMNS {
            return bad(format!(
                "column count {} exceeds {MAX_COLUMNS}",
                self.column_count
            ));
        }
        if self.flags & !(FLAG_BLOOM | FLAG_ID_INDEX | FLAG_EVENTS) != 0 {
            return bad(format!("unknown flags {:#x}", self.flags));
        }
        if self.row_count > 0 && self.min_ts > self.max_ts {
            return bad(format!(
                "min timestamp {} > max {}",
                self.min_ts, self.max_ts
            ));
        }
        for (i, (s, place)) in self.sections.iter().zip(SECTION_PLACES).enumerate() {
            let end = s.offset.checked_add(s.len);
            if s.len > 0 && (s.offset < HEADER_LEN as u64 || end.is_none_or(|e| e > footer_start)) {
                return Err(Error::OutOfBounds {
                    place,
                    offset: s.offset,
                    len: s.len,
                    start: HEADER_LEN as u64,
                    end: footer_start,
                });
            }
            let optional = match i {
                3 => Some(FLAG_BLOOM),
                4 => Some(FLAG_ID_INDEX),
                _ => None,
            };
            if let Some(flag) = optional {
                if (self.flags & flag != 0) != (s.len > 0) {
                    return bad(format!(
                        "{} section length {} disagrees with flags",
                        SECTION_NAMES[i], s.len
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The bytes of section `i` after checking its range (its CRC was checked on open).
pub(crate) fn section_bytes<'a>(bytes: &'a [u8], footer: &Footer, i: usize) -> Result<&'a [u8]> {
    let place = SECTION_PLACES.get(i).copied().unwrap_or(Place::Footer);
    let s: SectionRef = footer.sections.get(i).copied().unwrap_or_default();
    if s.len == 0 {
        return Ok(&[]);
    }
    let range = usize::try_from(s.offset).ok().zip(
        s.offset
            .checked_add(s.len)
            .and_then(|e| usize::try_from(e).ok()),
    );
    range
        .and_then(|(a, b)| bytes.get(a..b))
        .ok_or(Error::OutOfBounds {
            place,
            offset: s.offset,
            len: s.len,
            start: HEADER_LEN as u64,
            end: bytes.len() as u64,
        })
}

/// The bytes of section `i` after checking its range and CRC.
pub(crate) fn section<'a>(bytes: &'a [u8], footer: &Footer, i: usize) -> Result<&'a [u8]> {
    let place = SECTION_PLACES.get(i).copied().unwrap_or(Place::Footer);
    let s: SectionRef = footer.sections.get(i).copied().unwrap_or_default();
    let out = section_bytes(bytes, footer, i)?;
    if s.len == 0 {
        return Ok(out);
    }
    Error::check_crc(place, out, s.crc)?;
    Ok(out)
}
