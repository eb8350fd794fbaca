//! [`Segment`]: a read-only view of a segment file, memory-mapped or in memory.
//!
//! One concept per file: `open` (the bytes behind a segment, the checks on open and
//! `verify`), `lookup` (series, points and ids found), `points` (rows read back as
//! owned points), `scan` (rows handed to a callback), `columns` (one series' rows as
//! per-column slices), `cursor` (the merge cursor), `blocks` (the directory and block
//! decoding every read goes through), `sizes` (size reports).

mod blocks;
mod columns;
mod cursor;
mod lookup;
mod open;
mod points;
mod scan;
mod sizes;

pub use columns::{ColumnRead, ColumnSamples, SeriesCursor};
pub use cursor::RowCursor;
pub use scan::RowView;
pub use sizes::SizeBreakdown;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::directory::ColumnLayout;
use crate::format::meta::{ColumnInfo, ExtraInfo, Meta};
use crate::format::series::Series;
use crate::format::{FLAG_EVENTS, Footer};
use open::Backing;

/// A segment opened for reading. Opening checks the header, the footer (magic, CRC,
/// version, ranges), and decodes the meta section and series table after checking their
/// CRCs; each block's CRC is checked when the block is used.
///
/// ```
/// use tidemark_segment::{Point, Segment, SegmentOptions, SegmentWriter};
/// use tidemark_tsid::{SyntheticId, Tsid};
///
/// let tsid = Tsid::from_bytes([1; 20]);
/// let mut writer = SegmentWriter::new(SegmentOptions::new())?;
/// for i in 0..100 {
///     writer.push(Point::new(tsid, i * 10_000).dim("pod", "a").counter("restarts", i / 50))?;
/// }
/// let (bytes, _) = writer.to_vec()?;
/// let segment = Segment::from_vec(bytes)?;
/// assert!(segment.contains_id(&SyntheticId::new(tsid, 50_000))?);
/// assert_eq!(segment.row(5)?.ts_millis, 50_000);
/// # Ok::<(), tidemark_segment::Error>(())
/// ```
#[derive(Debug)]
pub struct Segment {
    data: Backing,
    path: Option<PathBuf>,
    footer: Footer,
    meta: Meta,
    series: Vec<Series>,
    /// Per column number (0 = timestamps): directory position, block count, rows per block.
    layout: Vec<ColumnLayout>,
}

impl Segment {
    fn bytes(&self) -> &[u8] {
        self.data.bytes()
    }

    /// The path this segment was opened from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The decoded footer.
    pub fn footer(&self) -> &Footer {
        &self.footer
    }

    /// Rows in the segment.
    pub fn row_count(&self) -> u64 {
        self.footer.row_count
    }

    /// Series in the segment.
    pub fn series_count(&self) -> u64 {
        self.footer.series_count
    }

    /// Smallest timestamp, `None` for an empty segment.
    pub fn min_timestamp(&self) -> Option<i64> {
        (self.footer.row_count > 0).then_some(self.footer.min_ts)
    }

    /// Largest timestamp, `None` for an empty segment.
    pub fn max_timestamp(&self) -> Option<i64> {
        (self.footer.row_count > 0).then_some(self.footer.max_ts)
    }

    /// The series table, in tsid order.
    pub fn series(&self) -> &[Series] {
        &self.series
    }

    /// The metric columns, in name order.
    pub fn columns(&self) -> &[ColumnInfo] {
        &self.meta.columns
    }

    /// The extra (keyword/boolean) columns, in name order. Their column numbers follow
    /// the metric columns': extra `i` is column number `1 + columns().len() + i`.
    pub fn extra_columns(&self) -> &[ExtraInfo] {
        &self.meta.extras
    }

    /// Whether this is an event segment: rows of a series may share a timestamp, and the
    /// id sections hold each row's own id.
    pub fn is_events(&self) -> bool {
        self.footer.flags & FLAG_EVENTS != 0
    }

    /// Wraps an error with this segment's path, when it has one.
    pub fn name_error(&self, e: Error) -> Error {
        match &self.path {
            Some(_) if matches!(e, Error::InFile { .. }) => e,
            Some(p) => e.in_file(p),
            None => e,
        }
    }

    /// Runs `read`, naming this segment's file in its error ([`name_error`](Self::name_error):
    /// once, an error that names a file already is left as it is). Every public read goes
    /// through it, so one that calls another names the file once.
    fn named<T>(&self, read: impl FnOnce() -> Result<T>) -> Result<T> {
        read().map_err(|e| self.name_error(e))
    }
}
