//! The crate's error type.

use std::fmt;
use std::path::PathBuf;

/// A `Result` whose error is this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Where in a segment file something went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Place {
    /// The 16-byte header.
    Header,
    /// The fixed-size footer at the end of the file.
    Footer,
    /// The meta section (column and dimension-name dictionaries, bloom parameters).
    Meta,
    /// The series table.
    SeriesTable,
    /// The block directory.
    Directory,
    /// The bloom filter section.
    Bloom,
    /// The id term index (FST) section.
    IdIndex,
    /// One block of one column (column 0 is the timestamps).
    Block {
        /// Column number: 0 for timestamps, `1 + i` for metric column `i`.
        column: u32,
        /// Row-block number.
        block: u32,
    },
    /// The whole file before the footer (checked by `verify`).
    Data,
    /// A tombstone file.
    Tombstones,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Header => f.write_str("header"),
            Place::Footer => f.write_str("footer"),
            Place::Meta => f.write_str("meta section"),
            Place::SeriesTable => f.write_str("series table"),
            Place::Directory => f.write_str("block directory"),
            Place::Bloom => f.write_str("bloom section"),
            Place::IdIndex => f.write_str("id index section"),
            Place::Block { column: 0, block } => write!(f, "timestamp block {block}"),
            Place::Block { column, block } => {
                write!(f, "block {block} of metric column {}", column - 1)
            }
            Place::Data => f.write_str("data before the footer"),
            Place::Tombstones => f.write_str("tombstone file"),
        }
    }
}

/// Everything that can go wrong while writing or reading a segment.
///
/// Variants carry the evidence: the place in the file (section, column and block),
/// the expected and found values. [`Error::InFile`] adds the path of the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error while reading the named file.
    #[error("{path}: {source}")]
    InFile {
        /// The file.
        path: PathBuf,
        /// What went wrong in it.
        source: Box<Error>,
    },
    /// An I/O error.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The magic bytes are not those of a segment (or tombstone) file.
    #[error("{place}: bad magic: expected {expected:?}, found {found:?}")]
    BadMagic {
        /// Where the magic was read.
        place: Place,
        /// The expected magic.
        expected: [u8; 4],
        /// The bytes found.
        found: [u8; 4],
    },
    /// The format version is outside the range this build reads.
    #[error("{place}: unsupported format version {found}, this build reads {min}..={max}")]
    UnsupportedVersion {
        /// Where the version was read.
        place: Place,
        /// The version found.
        found: u32,
        /// Oldest version read.
        min: u32,
        /// Newest version read.
        max: u32,
    },
    /// The input ended before a field.
    #[error("{place}: truncated: needed {needed} bytes, {available} available")]
    Truncated {
        /// Where.
        place: Place,
        /// Bytes the field needs.
        needed: u64,
        /// Bytes left.
        available: u64,
    },
    /// An offset or length points outside the file or its allowed region.
    #[error("{place}: range {offset}+{len} is outside the allowed {start}..{end}")]
    OutOfBounds {
        /// Which section or block.
        place: Place,
        /// Offset found.
        offset: u64,
        /// Length found.
        len: u64,
        /// Start of the allowed region.
        start: u64,
        /// End of the allowed region.
        end: u64,
    },
    /// A CRC32 does not match the bytes.
    #[error("{place}: checksum mismatch: expected {expected:#010x}, computed {got:#010x}")]
    ChecksumMismatch {
        /// Which section or block.
        place: Place,
        /// Stored checksum.
        expected: u32,
        /// Checksum of the bytes.
        got: u32,
    },
    /// A field holds a value that the format does not allow.
    #[error("{place}: corrupt: {detail}")]
    Corrupt {
        /// Which section or block.
        place: Place,
        /// What is wrong, with the value found.
        detail: String,
    },
    /// A nested bloom filter could not be decoded.
    #[error("bloom section: {0}")]
    Bloom(#[from] tidemark_bloom::Error),
    /// The nested FST could not be decoded or built.
    #[error("id index section: {0}")]
    Fst(#[from] fst::Error),
    /// Two points with the same tsid and timestamp were given to a writer.
    #[error("duplicate point: tsid {tsid} at {ts_millis} ms was given twice")]
    DuplicatePoint {
        /// The series.
        tsid: String,
        /// The timestamp.
        ts_millis: i64,
    },
    /// A metric was given once as a gauge and once as a counter.
    #[error("metric `{name}` is a {expected} but a {found} value was given")]
    MetricKindConflict {
        /// The metric.
        name: String,
        /// The kind seen first.
        expected: &'static str,
        /// The kind given now.
        found: &'static str,
    },
    /// A point carries the same metric twice.
    #[error("metric `{name}` given twice in one point")]
    DuplicateMetric {
        /// The metric.
        name: String,
    },
    /// A point carries the same dimension twice.
    #[error("dimension `{name}` given twice in one point")]
    DuplicateDimension {
        /// The dimension.
        name: String,
    },
    /// Two points of one tsid carry different dimensions.
    #[error("series {tsid}: dimensions differ between points of the same tsid")]
    InconsistentDimensions {
        /// The series.
        tsid: String,
    },
    /// A writer option is outside its allowed range.
    #[error("invalid option `{name}`: {detail}")]
    InvalidOption {
        /// The option.
        name: &'static str,
        /// Allowed range and the value found.
        detail: String,
    },
    /// A count exceeds what the format can hold.
    #[error("too many {what}: {found}, the format allows {max}")]
    TooLarge {
        /// What is counted.
        what: &'static str,
        /// The count.
        found: u64,
        /// The limit.
        max: u64,
    },
    /// Rows or series given to a streaming writer out of (tsid, timestamp) order.
    #[error("out of order: {detail}")]
    OutOfOrder {
        /// What came after what.
        detail: String,
    },
    /// A row id beyond the segment.
    #[error("row {row} is out of range: the segment has {row_count} rows")]
    RowOutOfRange {
        /// The row asked for.
        row: u64,
        /// Rows in the segment.
        row_count: u64,
    },
}

impl Error {
    /// Wraps `self` with the file it came from.
    pub fn in_file(self, path: impl Into<PathBuf>) -> Error {
        Error::InFile {
            path: path.into(),
            source: Box::new(self),
        }
    }

    pub(crate) fn corrupt(place: Place, detail: impl Into<String>) -> Error {
        Error::Corrupt {
            place,
            detail: detail.into(),
        }
    }

    /// `Ok` when `bytes` have the CRC32 `expected`, else [`Error::ChecksumMismatch`].
    pub(crate) fn check_crc(place: Place, bytes: &[u8], expected: u32) -> Result<()> {
        let got = crc32fast::hash(bytes);
        if got == expected {
            Ok(())
        } else {
            Err(Error::ChecksumMismatch {
                place,
                expected,
                got,
            })
        }
    }
}
