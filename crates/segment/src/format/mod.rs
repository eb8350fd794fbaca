//! The segment format (see `docs/format.md`): one module per section, each holding its
//! tags, its encoder and its decoder — [`footer`], [`meta`], [`series`] (the series
//! table), [`directory`] (the block directory) and [`blocks`] (column blocks; their value
//! encodings are in `crate::codec`); slot maps are in `crate::slots`, the rule only
//! version 1 files follow in `crate::v1`. This module holds the header and the limits.

use crate::error::{Error, Place, Result};
use crate::le::{Reader, put_u32};

pub(crate) mod blocks;
pub(crate) mod directory;
pub(crate) mod footer;
pub(crate) mod meta;
pub(crate) mod series;

pub use directory::DIR_ENTRY_LEN;
pub use footer::{
    FLAG_BLOOM, FLAG_EVENTS, FLAG_ID_INDEX, FOOTER_LEN, Footer, SECTION_COUNT, SECTION_NAMES,
    SECTION_PLACES, SectionRef,
};
pub(crate) use footer::{section, section_bytes};

/// First four bytes of a segment file, and its last four.
pub const MAGIC: [u8; 4] = *b"TMSG";

/// The format version this build writes.
pub const FORMAT_VERSION: u32 = 5;

/// The oldest format version this build reads.
pub const MIN_FORMAT_VERSION: u32 = 1;

/// Length of the header: magic, version, flags, reserved.
pub const HEADER_LEN: usize = 16;

/// Default rows per block.
pub const DEFAULT_BLOCK_ROWS: u32 = 1024;

/// Largest allowed rows per block (block-relative rows must fit a `u16` range for roaring).
pub const MAX_BLOCK_ROWS: u32 = 65_536;

/// Most metric columns in a segment.
pub const MAX_COLUMNS: u32 = 65_535;

/// Most rows in a segment (row ids are stored as `u32` inside blocks and the FST).
pub const MAX_ROWS: u64 = u32::MAX as u64;

/// Largest decoded size of the meta or series section.
pub const MAX_SECTION_RAW: u64 = 1 << 30;

/// The header: magic, version, flags (0) and a reserved word (0).
pub(crate) fn encode_header() -> Vec<u8> {
    let mut header = Vec::with_capacity(HEADER_LEN);
    header.extend_from_slice(&MAGIC);
    put_u32(&mut header, FORMAT_VERSION);
    put_u32(&mut header, 0);
    put_u32(&mut header, 0);
    debug_assert_eq!(header.len(), HEADER_LEN);
    header
}

/// Checks the header of `file` against its decoded footer: magic, the same version,
/// zero flags and reserved word.
pub(crate) fn check_header(file: &[u8], footer: &Footer) -> Result<()> {
    let mut h = Reader::new(file, Place::Header);
    let magic = h.magic()?;
    if magic != MAGIC {
        return Err(Error::BadMagic {
            place: Place::Header,
            expected: MAGIC,
            found: magic,
        });
    }
    let version = h.u32()?;
    if version != footer.version {
        return Err(Error::corrupt(
            Place::Header,
            format!("version {version}, footer says {}", footer.version),
        ));
    }
    let (flags, reserved) = (h.u32()?, h.u32()?);
    if flags != 0 || reserved != 0 {
        return Err(Error::corrupt(
            Place::Header,
            format!("flags {flags:#x} and reserved {reserved:#x}, expected 0"),
        ));
    }
    Ok(())
}

/// `len` as a `u32` count of `what`, or [`Error::TooLarge`].
pub(crate) fn len_u32(len: usize, what: &'static str) -> Result<u32> {
    u32::try_from(len).map_err(|_| Error::TooLarge {
        what,
        found: len as u64,
        max: u64::from(u32::MAX),
    })
}
