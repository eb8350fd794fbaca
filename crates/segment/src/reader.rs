//! [`Segment`]: a read-only view of a segment file, memory-mapped or in memory.

mod columns;

pub use columns::{ColumnRead, ColumnSamples, SeriesCursor};

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use roaring::RoaringBitmap;
use tidemark_tsid::{SyntheticId, Tsid};

use crate::bloom::{SegmentBloom, SegmentBloomRef};
use crate::error::{Error, Place, Result};
use crate::format::blocks::{self, BlockAt, DecodedBlock};
use crate::format::directory::{self, BlockRef, ColumnLayout};
use crate::format::meta::{self, ColumnInfo, ExtraInfo, Meta};
use crate::format::series::{self, Series, WrittenSeries};
use crate::format::{
    FLAG_BLOOM, FLAG_EVENTS, FLAG_ID_INDEX, FOOTER_LEN, Footer, HEADER_LEN, MAGIC, SECTION_PLACES,
    check_header, section, section_bytes,
};
use crate::intern::DimsInterner;
use crate::le::Reader;
use crate::point::{Extra, ExtraKind, MetricKind, MetricValue, Point, RowId};

enum Backing {
    Vec(Vec<u8>),
    Mmap(memmap2::Mmap),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Vec(v) => v,
            Backing::Mmap(m) => m,
        }
    }
}

impl std::fmt::Debug for Backing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backing::Vec(v) => write!(f, "Vec({} bytes)", v.len()),
            Backing::Mmap(m) => write!(f, "Mmap({} bytes)", m.len()),
        }
    }
}

/// Bytes of each component of a segment, for disk-usage reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SizeBreakdown {
    /// Header (16 bytes).
    pub header: u64,
    /// Meta section: dictionaries of dimension names and metric columns.
    pub meta: u64,
    /// Series table: tsids, dimensions, row counts, time ranges, presence.
    pub series_table: u64,
    /// Timestamp blocks.
    pub timestamps: u64,
    /// Each metric column's blocks, by name, in column order.
    pub metrics: Vec<(String, u64)>,
    /// Each extra column's blocks, by name, in column order.
    pub extras: Vec<(String, u64)>,
    /// Block directory (20 bytes per column per block).
    pub directory: u64,
    /// Bloom filter section (0 when absent).
    pub bloom: u64,
    /// Id term index section (0 when absent).
    pub id_index: u64,
    /// Footer.
    pub footer: u64,
    /// The whole file.
    pub total: u64,
}

impl SizeBreakdown {
    /// Everything but the id/dedup structures (bloom and id index).
    pub fn data_bytes(&self) -> u64 {
        self.total - self.bloom - self.id_index
    }
}

/// A row as seen during a scan: borrowed, no allocation per row.
#[derive(Debug, Clone, Copy)]
pub struct RowView<'a> {
    /// Row number.
    pub row: RowId,
    /// The row's series.
    pub series: &'a Series,
    /// Timestamp in milliseconds.
    pub ts_millis: i64,
    /// One entry per metric column (see [`Segment::columns`]), `None` where absent.
    pub metrics: &'a [Option<MetricValue>],
}

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

/// Where [`Segment::new`] takes the series table from.
enum SeriesSource<'a> {
    /// Decoded from the file, dimension lists shared through the interner.
    Decode(&'a mut DimsInterner),
    /// Handed over by the writer that just wrote the file.
    Written(Vec<Series>),
}

/// Memory-maps the file at `path`, refusing one too short for a header and footer.
fn map_file(path: &Path) -> Result<memmap2::Mmap> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    if len < (HEADER_LEN + FOOTER_LEN) as u64 {
        return Err(Error::Truncated {
            place: Place::Footer,
            needed: (HEADER_LEN + FOOTER_LEN) as u64,
            available: len,
        });
    }
    Ok(crate::mmap::map(&file)?)
}

impl Segment {
    /// Memory-maps and opens the segment at `path`.
    ///
    /// # Errors
    /// I/O errors and every format error of [`from_vec`](Self::from_vec), wrapped in
    /// [`Error::InFile`] naming the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Segment> {
        Segment::open_interned(path, &mut DimsInterner::new())
    }

    /// As [`open`](Self::open), sharing each series' dimensions with the other segments
    /// opened through `interner` (a store with many segments then holds them once).
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_interned(path: impl AsRef<Path>, interner: &mut DimsInterner) -> Result<Segment> {
        let path = path.as_ref();
        let mut inner = || -> Result<Segment> {
            let map = map_file(path)?;
            Segment::new(
                Backing::Mmap(map),
                Some(path.to_path_buf()),
                SeriesSource::Decode(interner),
            )
        };
        inner().map_err(|e| e.in_file(path))
    }

    /// Memory-maps and opens the segment at `path` that was just written, taking its
    /// series table from the writer ([`SegmentStreamWriter::finish_with_series`]
    /// (crate::SegmentStreamWriter::finish_with_series)) instead of decoding it: every
    /// other section is read and checked as [`open`](Self::open) does, and the table's
    /// length must equal the footer's series count. (Debug builds also decode the table
    /// and require it to equal the one handed in.)
    ///
    /// # Errors
    /// As [`open`](Self::open), and [`Error::Corrupt`] when `series` does not fit the
    /// footer.
    pub fn open_written(path: impl AsRef<Path>, series: WrittenSeries) -> Result<Segment> {
        let path = path.as_ref();
        let inner = || -> Result<Segment> {
            let map = map_file(path)?;
            Segment::new(
                Backing::Mmap(map),
                Some(path.to_path_buf()),
                SeriesSource::Written(series.series),
            )
        };
        inner().map_err(|e| e.in_file(path))
    }

    /// Opens a segment held in memory.
    ///
    /// # Errors
    /// [`Error::BadMagic`], [`Error::UnsupportedVersion`], [`Error::Truncated`],
    /// [`Error::OutOfBounds`], [`Error::ChecksumMismatch`] and [`Error::Corrupt`].
    pub fn from_vec(bytes: Vec<u8>) -> Result<Segment> {
        Segment::new(
            Backing::Vec(bytes),
            None,
            SeriesSource::Decode(&mut DimsInterner::new()),
        )
    }

    fn new(data: Backing, path: Option<PathBuf>, source: SeriesSource<'_>) -> Result<Segment> {
        let bytes = data.bytes();
        // The header's magic is checked before the footer, its version after.
        let magic = Reader::new(bytes, Place::Header).magic()?;
        if magic != MAGIC {
            return Err(Error::BadMagic {
                place: Place::Header,
                expected: MAGIC,
                found: magic,
            });
        }
        let footer = Footer::decode(bytes)?;
        check_header(bytes, &footer)?;
        let meta_bytes = section(bytes, &footer, 0)?;
        let meta = meta::decode(meta_bytes, &footer)?;
        let series_bytes = section(bytes, &footer, 1)?;
        let series = match source {
            SeriesSource::Decode(interner) => {
                series::decode(series_bytes, &footer, &meta, interner)?
            }
            SeriesSource::Written(series) => {
                if series.len() as u64 != footer.series_count {
                    return Err(Error::corrupt(
                        Place::SeriesTable,
                        format!(
                            "{} series written, footer says {}",
                            series.len(),
                            footer.series_count
                        ),
                    ));
                }
                debug_assert_eq!(
                    series::decode(series_bytes, &footer, &meta, &mut DimsInterner::new()).ok(),
                    Some(series.clone()),
                    "the writer's series table differs from the file's"
                );
                series
            }
        };
        let layout = directory::layout(&footer, &meta, section(bytes, &footer, 2)?.len())?;
        if footer.flags & FLAG_BLOOM != 0 {
            SegmentBloomRef::new(section(bytes, &footer, 3)?, true)?;
        }
        if footer.flags & FLAG_ID_INDEX != 0 {
            fst::Map::new(section(bytes, &footer, 4)?)?;
        }
        Ok(Segment {
            data,
            path,
            footer,
            meta,
            series,
            layout,
        })
    }

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

    /// The series with this tsid.
    pub fn series_by_tsid(&self, tsid: &Tsid) -> Option<&Series> {
        let i = self.series.binary_search_by(|s| s.tsid.cmp(tsid)).ok()?;
        self.series.get(i)
    }

    /// The series holding `row`.
    pub fn series_of_row(&self, row: RowId) -> Option<&Series> {
        if row >= self.footer.row_count {
            return None;
        }
        let i = self.series.partition_point(|s| s.first_row <= row);
        self.series.get(i.checked_sub(1)?)
    }

    /// Target false-positive rate and capacity the bloom filter was sized for.
    pub fn bloom_params(&self) -> Option<(f64, u64)> {
        (self.footer.flags & FLAG_BLOOM != 0)
            .then_some((self.meta.bloom_fpr, self.meta.bloom_capacity))
    }

    /// The bloom filter of the synthetic ids, read in place, when the segment has one.
    ///
    /// # Errors
    /// Bloom format errors (its checksum was verified on open).
    pub fn bloom(&self) -> Result<Option<SegmentBloomRef<'_>>> {
        if self.footer.flags & FLAG_BLOOM == 0 {
            return Ok(None);
        }
        let bytes = section_bytes(self.bytes(), &self.footer, 3)?;
        Ok(Some(SegmentBloomRef::new(bytes, false)?))
    }

    /// Bytes of the series table's `min_ts` and `span` columns and its time slot maps,
    /// before the table's compression: what the per-series [min, max] timestamps and the
    /// holes in them (the `series-range` dedup strategy's only structures) cost in this
    /// file's format version.
    pub fn series_range_bytes(&self) -> u64 {
        use crate::slots::varint_len;
        fn zigzag(v: i64) -> u64 {
            ((v << 1) ^ (v >> 63)) as u64
        }
        let (mut prev_min, mut prev_span, mut total) = (0i64, 0u64, 0u64);
        for s in &self.series {
            total += varint_len(zigzag(s.min_ts.wrapping_sub(prev_min)));
            let span = s.max_ts.wrapping_sub(s.min_ts) as u64;
            total += if self.footer.version >= 2 {
                varint_len(zigzag(span.wrapping_sub(prev_span) as i64))
            } else {
                varint_len(span)
            };
            prev_min = s.min_ts;
            prev_span = span;
        }
        if self.footer.version >= 4 {
            let mut maps = 0u64;
            let mut prev = 0usize;
            for (i, s) in self.series.iter().enumerate() {
                if let Some(m) = &s.slots {
                    maps += 1;
                    total += varint_len((i - prev) as u64) + m.encoded_len();
                    prev = i;
                }
            }
            total += varint_len(maps);
        }
        total
    }

    /// An owned copy of the bloom filter, when the segment has one (to OR filters of
    /// merged segments).
    ///
    /// # Errors
    /// Bloom format errors.
    pub fn bloom_filter(&self) -> Result<Option<SegmentBloom>> {
        if self.footer.flags & FLAG_BLOOM == 0 {
            return Ok(None);
        }
        let bytes = section_bytes(self.bytes(), &self.footer, 3)?;
        Ok(Some(SegmentBloom::from_bytes(bytes)?))
    }

    /// The id term index (synthetic id bytes → row), when the segment has one.
    ///
    /// # Errors
    /// FST format errors.
    pub fn id_index(&self) -> Result<Option<fst::Map<&[u8]>>> {
        if self.footer.flags & FLAG_ID_INDEX == 0 {
            return Ok(None);
        }
        let bytes = section_bytes(self.bytes(), &self.footer, 4)?;
        Ok(Some(fst::Map::new(bytes)?))
    }

    /// Whether the bloom filter may hold `id` (`true` when there is no filter).
    ///
    /// # Errors
    /// As [`bloom`](Self::bloom).
    pub fn may_contain_id(&self, id: &SyntheticId) -> Result<bool> {
        Ok(match self.bloom()? {
            Some(b) => b.contains(&id.to_bytes()),
            None => true,
        })
    }

    /// The row of `id` through the id term index; `None` when absent or without index.
    ///
    /// # Errors
    /// As [`id_index`](Self::id_index).
    pub fn lookup_id(&self, id: &SyntheticId) -> Result<Option<RowId>> {
        let Some(map) = self.id_index()? else {
            return Ok(None);
        };
        let key = id.to_bytes();
        guard_fst(|| map.get(key))
    }

    /// Whether the segment holds the point `id` (exact: series table, then timestamps).
    ///
    /// # Errors
    /// As [`find`](Self::find).
    pub fn contains_id(&self, id: &SyntheticId) -> Result<bool> {
        Ok(self.find(&id.tsid(), id.ts_millis())?.is_some())
    }

    /// The row of (`tsid`, `ts_millis`): a binary search in the series table, then in the
    /// series' timestamps, decoding one block (rarely two).
    ///
    /// # Errors
    /// Format errors of the timestamp block read.
    pub fn find(&self, tsid: &Tsid, ts_millis: i64) -> Result<Option<RowId>> {
        self.find_inner(tsid, ts_millis)
            .map_err(|e| self.name_error(e))
    }

    fn find_inner(&self, tsid: &Tsid, ts_millis: i64) -> Result<Option<RowId>> {
        let Ok(index) = self.series.binary_search_by(|s| s.tsid.cmp(tsid)) else {
            return Ok(None);
        };
        let Some(s) = self.series.get(index) else {
            return Ok(None);
        };
        if ts_millis < s.min_ts || ts_millis > s.max_ts {
            return Ok(None);
        }
        let br = u64::from(self.footer.block_rows);
        let last = s.first_row + s.row_count - 1;
        let (first_block, last_block) = (s.first_row / br, last / br);
        // Guess the block by interpolation: series are mostly regular.
        let span = u128::from(s.max_ts.wrapping_sub(s.min_ts) as u64);
        let into = u128::from(ts_millis.wrapping_sub(s.min_ts) as u64);
        let guess = (into * u128::from(s.row_count - 1))
            .checked_div(span)
            .map_or(s.first_row, |off| s.first_row + off as u64);
        let mut block = (guess / br).clamp(first_block, last_block);
        let mut moved_left = false;
        let mut moved_right = false;
        let mut body = Vec::new();
        let mut part = Vec::new();
        loop {
            part.clear();
            self.decode_ts_run(block as u32, index, &mut body, &mut part)?;
            let lo = s.first_row.max(block * br);
            match (part.first(), part.last()) {
                (Some(&f), _) if ts_millis < f => {
                    // Between this part and the previous block's: absent.
                    if block == first_block || moved_right {
                        return Ok(None);
                    }
                    block -= 1;
                    moved_left = true;
                }
                (_, Some(&l)) if ts_millis > l => {
                    if block == last_block || moved_left {
                        return Ok(None);
                    }
                    block += 1;
                    moved_right = true;
                }
                (Some(_), Some(_)) => {
                    return Ok(part.binary_search(&ts_millis).ok().map(|i| lo + i as u64));
                }
                _ => return Ok(None),
            }
        }
    }

    /// The point at `row`: tsid, dimensions (by name), timestamp and metrics (by name).
    ///
    /// # Errors
    /// [`Error::RowOutOfRange`]; format errors of the blocks read.
    pub fn row(&self, row: RowId) -> Result<Point> {
        self.row_inner(row).map_err(|e| self.name_error(e))
    }

    fn row_inner(&self, row: RowId) -> Result<Point> {
        let series = self.series_of_row(row).ok_or(Error::RowOutOfRange {
            row,
            row_count: self.footer.row_count,
        })?;
        let mut block = DecodedBlock::default();
        let b = (row / u64::from(self.footer.block_rows)) as u32;
        self.decode_block(b, &mut block)?;
        let i = (row % u64::from(self.footer.block_rows)) as usize;
        let ncols = self.meta.columns.len();
        let ts_millis = block.ts.get(i).copied().ok_or_else(|| {
            Error::corrupt(
                Place::Block {
                    column: 0,
                    block: b,
                },
                "row missing from block",
            )
        })?;
        let values = block.metrics.get(i * ncols..(i + 1) * ncols).unwrap_or(&[]);
        let metrics = self
            .meta
            .columns
            .iter()
            .zip(values)
            .filter_map(|(c, v)| v.map(|v| (c.name.clone(), v)))
            .collect();
        let extras = if self.meta.extras.is_empty() {
            Vec::new()
        } else {
            self.row_extras_inner(row)?
        };
        Ok(Point {
            tsid: series.tsid,
            dims: series.dims.to_vec(),
            ts_millis,
            metrics,
            extras,
        })
    }

    /// Every row in `rows` (clamped to the segment) as a [`Point`], extras included, in
    /// row order; `keep` chooses the rows (e.g. not deleted). Each block is decoded once.
    ///
    /// # Errors
    /// Format errors of the blocks read.
    pub fn points(&self, rows: Range<RowId>, keep: impl Fn(RowId) -> bool) -> Result<Vec<Point>> {
        self.points_inner(rows, keep)
            .map_err(|e| self.name_error(e))
    }

    fn points_inner(&self, rows: Range<RowId>, keep: impl Fn(RowId) -> bool) -> Result<Vec<Point>> {
        let mut out: Vec<(RowId, Point)> = Vec::new();
        let mut block = DecodedBlock::default();
        let end = rows.end.min(self.footer.row_count);
        let start = rows.start.min(end);
        self.scan_filtered(start..end, i64::MIN, i64::MAX, &mut block, &mut |rv| {
            if !keep(rv.row) {
                return;
            }
            let mut p = Point::new(rv.series.tsid, rv.ts_millis);
            p.dims = rv.series.dims.to_vec();
            p.metrics = self
                .meta
                .columns
                .iter()
                .zip(rv.metrics)
                .filter_map(|(c, v)| v.map(|v| (c.name.clone(), v)))
                .collect();
            out.push((rv.row, p));
        })?;
        // Extra columns, one column block at a time.
        let base = self.meta.columns.len() as u32 + 1;
        for (e, info) in self.meta.extras.iter().enumerate() {
            let span = self.column_span_rows(base + e as u32).unwrap_or(1).max(1);
            let mut cached: Option<(u64, Vec<Option<Extra>>)> = None;
            for k in 0..out.len() {
                let Some(&(row, _)) = out.get(k) else { break };
                let cb = row / span;
                if cached.as_ref().is_none_or(|(b, _)| *b != cb) {
                    // Rows of `out` in this column block are contiguous (row order).
                    let last = out
                        .get(k..)
                        .unwrap_or(&[])
                        .iter()
                        .take_while(|(r, _)| *r / span == cb)
                        .last()
                        .map_or(row, |(r, _)| *r);
                    let want = (row - cb * span) as usize..(last - cb * span) as usize + 1;
                    cached = Some((cb, self.decode_extra_block(e as u32, cb as u32, want)?));
                }
                let Some((row, p)) = out.get_mut(k) else {
                    break;
                };
                let value = cached
                    .as_ref()
                    .and_then(|(_, vals)| vals.get((*row - cb * span) as usize))
                    .and_then(Option::as_ref);
                if let Some(v) = value {
                    p.extras.push((info.name.clone(), v.clone()));
                }
            }
        }
        Ok(out.into_iter().map(|(_, p)| p).collect())
    }

    /// Whether this is an event segment: rows of a series may share a timestamp, and the
    /// id sections hold each row's own id.
    pub fn is_events(&self) -> bool {
        self.footer.flags & FLAG_EVENTS != 0
    }

    /// The rows of series `tsid` whose timestamp is `ts_millis`: at most one row in a
    /// time-series segment, possibly several in an event segment.
    ///
    /// # Errors
    /// Format errors of the timestamp blocks read.
    pub fn find_all(&self, tsid: &Tsid, ts_millis: i64) -> Result<Range<RowId>> {
        self.find_all_inner(tsid, ts_millis)
            .map_err(|e| self.name_error(e))
    }

    fn find_all_inner(&self, tsid: &Tsid, ts_millis: i64) -> Result<Range<RowId>> {
        let Some(hit) = self.find_inner(tsid, ts_millis)? else {
            return Ok(0..0);
        };
        if !self.is_events() {
            return Ok(hit..hit + 1);
        }
        let Some(s) = self.series_by_tsid(tsid) else {
            return Ok(hit..hit + 1);
        };
        let (first, end) = (s.first_row, s.first_row + s.row_count);
        let br = u64::from(self.footer.block_rows);
        let mut ts = Vec::new();
        let mut cached: Option<u64> = None;
        let mut ts_at = |row: RowId, ts: &mut Vec<i64>| -> Result<Option<i64>> {
            let b = row / br;
            if cached != Some(b) {
                cached = None;
                ts.clear();
                self.decode_ts_block(b as u32, ts)?;
                cached = Some(b);
            }
            Ok(ts.get((row - b * br) as usize).copied())
        };
        let mut lo = hit;
        while lo > first && ts_at(lo - 1, &mut ts)? == Some(ts_millis) {
            lo -= 1;
        }
        let mut hi = hit + 1;
        while hi < end && ts_at(hi, &mut ts)? == Some(ts_millis) {
            hi += 1;
        }
        Ok(lo..hi)
    }

    /// Calls `f` for every row in `rows` (clamped to the segment), in row order.
    ///
    /// # Errors
    /// Format errors of the blocks read.
    pub fn scan_rows(&self, rows: Range<RowId>, mut f: impl FnMut(RowView<'_>)) -> Result<()> {
        let mut block = DecodedBlock::default();
        self.scan_filtered(rows, i64::MIN, i64::MAX, &mut block, &mut f)
            .map_err(|e| self.name_error(e))
    }

    /// Calls `f` for every row whose timestamp is in `from..=to`, in row order.
    ///
    /// # Errors
    /// Format errors of the blocks read.
    pub fn scan_time_range(&self, from: i64, to: i64, f: impl FnMut(RowView<'_>)) -> Result<()> {
        self.scan_time_range_inner(from, to, f)
            .map_err(|e| self.name_error(e))
    }

    fn scan_time_range_inner(
        &self,
        from: i64,
        to: i64,
        mut f: impl FnMut(RowView<'_>),
    ) -> Result<()> {
        let mut block = DecodedBlock::default();
        if self.row_count() == 0 || to < self.footer.min_ts || from > self.footer.max_ts {
            return Ok(());
        }
        for s in &self.series {
            if s.max_ts < from || s.min_ts > to {
                continue;
            }
            let rows = s.first_row..s.first_row + s.row_count;
            self.scan_filtered(rows, from, to, &mut block, &mut f)?;
        }
        Ok(())
    }

    /// Calls `f` for every row of series `tsid` whose timestamp is in `from..=to`.
    ///
    /// # Errors
    /// Format errors of the blocks read.
    pub fn scan_series(
        &self,
        tsid: &Tsid,
        from: i64,
        to: i64,
        f: impl FnMut(RowView<'_>),
    ) -> Result<()> {
        self.scan_series_inner(tsid, from, to, f)
            .map_err(|e| self.name_error(e))
    }

    /// As [`scan_series`](Self::scan_series) for several series, given by their indices
    /// in [`series`](Self::series) (ascending for best effect): one decoded block is kept
    /// across them, so neighbouring series that share a row block decode it once
    /// instead of once each. Indices out of range are skipped.
    ///
    /// # Errors
    /// As [`scan_series`](Self::scan_series).
    pub fn scan_series_many(
        &self,
        indices: impl IntoIterator<Item = usize>,
        from: i64,
        to: i64,
        mut f: impl FnMut(RowView<'_>),
    ) -> Result<()> {
        let mut block = DecodedBlock::default();
        for i in indices {
            let Some(s) = self.series.get(i) else {
                continue;
            };
            if s.max_ts < from || s.min_ts > to {
                continue;
            }
            self.scan_filtered(
                s.first_row..s.first_row + s.row_count,
                from,
                to,
                &mut block,
                &mut f,
            )
            .map_err(|e| self.name_error(e))?;
        }
        Ok(())
    }

    fn scan_series_inner(
        &self,
        tsid: &Tsid,
        from: i64,
        to: i64,
        mut f: impl FnMut(RowView<'_>),
    ) -> Result<()> {
        let Some(s) = self.series_by_tsid(tsid) else {
            return Ok(());
        };
        if s.max_ts < from || s.min_ts > to {
            return Ok(());
        }
        let mut block = DecodedBlock::default();
        self.scan_filtered(
            s.first_row..s.first_row + s.row_count,
            from,
            to,
            &mut block,
            &mut f,
        )
    }

    /// Visits rows of `rows` whose timestamp is in `from..=to`. Blocks whose rows all fall
    /// outside the range are skipped after decoding their timestamps only. When `rows` is
    /// one series (timestamps ascending), the scan stops past `to`.
    fn scan_filtered(
        &self,
        rows: Range<RowId>,
        from: i64,
        to: i64,
        block: &mut DecodedBlock,
        f: &mut impl FnMut(RowView<'_>),
    ) -> Result<()> {
        let end = rows.end.min(self.footer.row_count);
        let br = u64::from(self.footer.block_rows);
        let ncols = self.meta.columns.len();
        let one_series = self
            .series_of_row(rows.start)
            .map(|s| s.first_row + s.row_count)
            >= Some(end);
        let mut row = rows.start;
        while row < end {
            let b = row / br;
            if block.block != Some(b as u32) {
                block.fill_timestamps(b as u32, |ts| self.decode_ts_block(b as u32, ts))?;
            }
            let block_end = ((b + 1) * br).min(end);
            let local = (row - b * br) as usize..(block_end - b * br) as usize;
            let in_block = block.ts.get(local).unwrap_or(&[]);
            if one_series && in_block.first().is_some_and(|&t| t > to) {
                return Ok(());
            }
            if !in_block.iter().any(|&t| t >= from && t <= to) {
                row = block_end;
                continue;
            }
            if block.metrics_block != Some(b as u32) {
                self.decode_block_metrics(b as u32, block)?;
            }
            let mut series = self.series_of_row(row);
            while row < block_end {
                let i = (row - b * br) as usize;
                let (Some(&ts), Some(s)) = (block.ts.get(i), series) else {
                    break;
                };
                if row >= s.first_row + s.row_count {
                    series = self.series_of_row(row);
                    continue;
                }
                if ts >= from && ts <= to {
                    let metrics = block.metrics.get(i * ncols..(i + 1) * ncols).unwrap_or(&[]);
                    f(RowView {
                        row,
                        series: s,
                        ts_millis: ts,
                        metrics,
                    });
                }
                row += 1;
            }
            row = row.max(block_end);
        }
        Ok(())
    }

    /// The directory entry of `column` (0 = timestamps) in row block `block`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for a column or block beyond the segment.
    pub fn block_ref(&self, column: u32, block: u32) -> Result<BlockRef> {
        let place = Place::Block { column, block };
        let Some(l) = self
            .layout
            .get(column as usize)
            .filter(|l| block < l.blocks)
        else {
            return Err(Error::OutOfBounds {
                place,
                offset: u64::from(block),
                len: 1,
                start: 0,
                end: self.column_block_count(column).map_or(0, u64::from),
            });
        };
        let dir = section_bytes(self.bytes(), &self.footer, 2)?;
        directory::entry(dir, l.first_entry + u64::from(block))
    }

    /// Number of blocks of column number `column` (0 = timestamps).
    pub fn column_block_count(&self, column: u32) -> Option<u32> {
        self.layout.get(column as usize).map(|l| l.blocks)
    }

    /// Rows spanned by each block of column number `column` (0 = timestamps).
    pub fn column_span_rows(&self, column: u32) -> Option<u64> {
        self.layout.get(column as usize).map(|l| l.span)
    }

    /// Rows `lo..hi` of block `block` of column number `column`.
    fn block_rows_range(&self, column: u32, block: u32) -> (u64, u64) {
        let span = self
            .layout
            .get(column as usize)
            .map_or(u64::from(self.footer.block_rows), |l| l.span);
        let lo = u64::from(block).saturating_mul(span);
        (
            lo.min(self.footer.row_count),
            self.footer.row_count.min(lo.saturating_add(span)),
        )
    }

    fn rows_in(&self, column: u32, block: u32) -> usize {
        let (lo, hi) = self.block_rows_range(column, block);
        (hi - lo) as usize
    }

    /// Block `block` of column number `column`, located for the decoders of
    /// [`blocks`]: its directory entry and the rows it covers.
    fn block_at(&self, column: u32, block: u32) -> Result<BlockAt<'_>> {
        let (lo, hi) = self.block_rows_range(column, block);
        Ok(BlockAt {
            file: self.bytes(),
            entry: self.block_ref(column, block)?,
            place: Place::Block { column, block },
            lo,
            hi,
            series: &self.series,
        })
    }

    /// Appends the timestamps of row block `block` to `out`.
    fn decode_ts_block(&self, block: u32, out: &mut Vec<i64>) -> Result<()> {
        blocks::timestamps(&self.block_at(0, block)?, out)
    }

    /// Decodes the timestamps of series `series` (index) within `block`.
    fn decode_ts_run(
        &self,
        block: u32,
        series: usize,
        body: &mut Vec<u8>,
        out: &mut Vec<i64>,
    ) -> Result<()> {
        blocks::series_timestamps(&self.block_at(0, block)?, series, body, out)
    }

    /// Decodes metric column `column` (0-based) of `block` into `out`, one entry per row.
    fn decode_metric_block(
        &self,
        column: u32,
        block: u32,
        out: &mut Vec<Option<MetricValue>>,
    ) -> Result<()> {
        let kind = self
            .meta
            .columns
            .get(column as usize)
            .map_or(MetricKind::Gauge, |c| c.kind);
        blocks::metric_values(&self.block_at(column + 1, block)?, column, kind, out)
    }

    /// Decodes extra column `extra` (0-based) of its block `block`, one entry per row;
    /// only rows in `rows` (relative to the block) get their values, though every value
    /// is checked.
    fn decode_extra_block(
        &self,
        extra: u32,
        block: u32,
        rows: std::ops::Range<usize>,
    ) -> Result<Vec<Option<Extra>>> {
        let index = self.meta.columns.len() as u32 + extra;
        let kind = self
            .meta
            .extras
            .get(extra as usize)
            .map_or(ExtraKind::Keyword, |e| e.kind);
        blocks::extra_values(&self.block_at(index + 1, block)?, index, kind, rows)
    }

    /// The extra (keyword/boolean) fields of `row`, by name; empty when the segment has
    /// no extra column.
    ///
    /// # Errors
    /// Format errors of the blocks read.
    pub fn row_extras(&self, row: RowId) -> Result<Vec<(String, Extra)>> {
        self.row_extras_inner(row).map_err(|e| self.name_error(e))
    }

    fn row_extras_inner(&self, row: RowId) -> Result<Vec<(String, Extra)>> {
        let mut out = Vec::new();
        let base = self.meta.columns.len() as u32 + 1;
        for (e, info) in self.meta.extras.iter().enumerate() {
            let span = self.column_span_rows(base + e as u32).unwrap_or(1).max(1);
            let block = (row / span) as u32;
            let i = (row - u64::from(block) * span) as usize;
            let values = self.decode_extra_block(e as u32, block, i..i + 1)?;
            if let Some(Some(v)) = values.get(i) {
                out.push((info.name.clone(), v.clone()));
            }
        }
        Ok(out)
    }

    /// Decodes row block `block` (timestamps and metrics) into `out`.
    fn decode_block(&self, block: u32, out: &mut DecodedBlock) -> Result<()> {
        out.fill_timestamps(block, |ts| self.decode_ts_block(block, ts))?;
        self.decode_block_metrics(block, out)
    }

    /// Decodes the metric columns of row block `block` (whose timestamps are in `out.ts`).
    fn decode_block_metrics(&self, block: u32, out: &mut DecodedBlock) -> Result<()> {
        let block_rows = u64::from(self.footer.block_rows);
        let span = |c: usize| self.layout.get(c + 1).map_or(block_rows, |l| l.span);
        out.fill_metrics(
            block,
            u64::from(block) * block_rows,
            self.meta.columns.len(),
            span,
            |c, cb, values| self.decode_metric_block(c, cb, values),
        )
    }

    /// Bytes of each component.
    pub fn size_breakdown(&self) -> SizeBreakdown {
        let s = &self.footer.sections;
        let mut timestamps = 0;
        let mut metrics: Vec<(String, u64)> = self
            .meta
            .columns
            .iter()
            .map(|c| (c.name.clone(), 0))
            .chain(self.meta.extras.iter().map(|e| (e.name.clone(), 0)))
            .collect();
        for column in 0..self.layout.len() as u32 {
            let mut sum = 0u64;
            for block in 0..self.column_block_count(column).unwrap_or(0) {
                if let Ok(e) = self.block_ref(column, block) {
                    sum += u64::from(e.len);
                }
            }
            match column.checked_sub(1) {
                None => timestamps = sum,
                Some(c) => {
                    if let Some(m) = metrics.get_mut(c as usize) {
                        m.1 = sum;
                    }
                }
            }
        }
        SizeBreakdown {
            extras: metrics.split_off(self.meta.columns.len().min(metrics.len())),
            header: HEADER_LEN as u64,
            meta: s[0].len,
            series_table: s[1].len,
            timestamps,
            metrics,
            directory: s[2].len,
            bloom: s[3].len,
            id_index: s[4].len,
            footer: FOOTER_LEN as u64,
            total: self.bytes().len() as u64,
        }
    }

    /// Full check: the CRC of every byte before the footer, every section, every block
    /// (checksum and decoding), the bloom filter's own checksum and the FST.
    ///
    /// # Errors
    /// The first problem found.
    pub fn verify(&self) -> Result<()> {
        self.verify_inner().map_err(|e| self.name_error(e))
    }

    fn verify_inner(&self) -> Result<()> {
        let bytes = self.bytes();
        let data = bytes.get(..bytes.len() - FOOTER_LEN).unwrap_or(&[]);
        Error::check_crc(Place::Data, data, self.footer.data_crc)?;
        for i in 0..SECTION_PLACES.len() {
            section(bytes, &self.footer, i)?;
        }
        let mut block = DecodedBlock::default();
        for b in 0..self.footer.block_count {
            self.decode_block(b, &mut block)?;
        }
        let base = self.meta.columns.len() as u32 + 1;
        for e in 0..self.meta.extras.len() as u32 {
            for b in 0..self.column_block_count(base + e).unwrap_or(0) {
                self.decode_extra_block(e, b, 0..usize::MAX)?;
            }
        }
        if let Some(bloom) = self.bloom()? {
            bloom.verify()?;
        }
        if let Some(map) = self.id_index()? {
            if map.len() as u64 != self.footer.row_count {
                return Err(Error::corrupt(
                    Place::IdIndex,
                    "key count differs from row count",
                ));
            }
            // The walk reaches every node of the FST (under the guard), and each key
            // must name a row of its own.
            let rows = self.footer.row_count;
            guard_fst(|| {
                use fst::Streamer;
                let mut stream = map.stream();
                let mut seen = RoaringBitmap::new();
                while let Some((_, row)) = stream.next() {
                    let fresh = u32::try_from(row).is_ok_and(|r| row < rows && seen.insert(r));
                    if !fresh {
                        return Err(Error::corrupt(
                            Place::IdIndex,
                            format!("a key names row {row}: past the {rows} rows or named twice"),
                        ));
                    }
                }
                Ok(())
            })??;
        }
        Ok(())
    }

    /// Wraps an error with this segment's path, when it has one.
    pub fn name_error(&self, e: Error) -> Error {
        match &self.path {
            Some(_) if matches!(e, Error::InFile { .. }) => e,
            Some(p) => e.in_file(p),
            None => e,
        }
    }
}

/// A cursor over a segment's rows in row order — (tsid, timestamp) order — skipping the
/// rows of a tombstone set. Each block is decoded once as the cursor enters it, and a
/// block whose rows are all dead is skipped undecoded, so a pass over a segment holds one
/// block per column in memory. Made by [`Segment::cursor`]; drives streaming merges.
#[derive(Debug)]
pub struct RowCursor<'a> {
    seg: &'a Segment,
    dead: Option<&'a RoaringBitmap>,
    /// The current row (`row_count` once exhausted).
    row: u64,
    started: bool,
    block: DecodedBlock,
    /// Per extra column, its decoded column block.
    extras: Vec<(Option<u32>, Vec<Option<Extra>>)>,
    /// Index of the series holding `row`.
    series: usize,
}

impl Segment {
    /// Drops every resident page of a memory-mapped segment from this process's resident
    /// set (they stay in the page cache, and come back on the next access). Lookups touch
    /// pages all over a segment, and with blocks in row order a timestamp block shares its
    /// pages with metric blocks: a store calls this now and then (the dedup engine does at
    /// each refresh) so that its resident set holds what it touched lately, not every
    /// page it ever touched. A no-op for a segment held in memory.
    pub fn release_resident(&self) {
        if let Backing::Mmap(m) = &self.data {
            crate::mmap::release_before(m, m.len());
        }
    }

    /// Drops the resident pages of the file's bytes before `offset` (a memory-mapped
    /// segment of format version 3 or later, where the blocks of earlier rows lie before
    /// those of later rows): what a streaming pass is done with leaves the resident set.
    fn release_before(&self, offset: u64) {
        if let Backing::Mmap(m) = &self.data {
            if self.footer.version >= 3 {
                crate::mmap::release_before(m, offset as usize);
            }
        }
    }

    /// A cursor over the rows not in `dead` (row numbers of this segment), in row order.
    /// Call [`RowCursor::advance`] to reach the first row.
    pub fn cursor<'a>(&'a self, dead: Option<&'a RoaringBitmap>) -> RowCursor<'a> {
        RowCursor {
            seg: self,
            dead,
            row: 0,
            started: false,
            block: DecodedBlock::default(),
            extras: Vec::new(),
            series: 0,
        }
    }
}

impl<'a> RowCursor<'a> {
    /// Moves to the next live row (the first on the first call); `false` at the end.
    ///
    /// # Errors
    /// Format errors of the blocks read, naming the segment.
    pub fn advance(&mut self) -> Result<bool> {
        self.advance_inner().map_err(|e| self.seg.name_error(e))
    }

    fn advance_inner(&mut self) -> Result<bool> {
        let seg = self.seg;
        let n = seg.footer.row_count;
        let br = u64::from(seg.footer.block_rows).max(1);
        let mut next = if self.started {
            self.row.saturating_add(1)
        } else {
            0
        };
        self.started = true;
        loop {
            if next >= n {
                self.row = n;
                return Ok(false);
            }
            let b = next / br;
            if self.block.block != Some(b as u32) {
                let (lo, hi) = (next, ((b + 1) * br).min(n));
                if let (Some(dead), Ok(l), Ok(h)) =
                    (self.dead, u32::try_from(lo), u32::try_from(hi))
                {
                    if dead.range_cardinality(l..h) == hi - lo {
                        next = hi;
                        continue;
                    }
                }
                // Format 3 lays blocks out in row order: every block before this
                // one's timestamps covers earlier rows only, and is done with.
                if let Ok(r) = seg.block_ref(0, b as u32) {
                    seg.release_before(r.offset);
                }
                seg.decode_block(b as u32, &mut self.block)?;
            }
            if self
                .dead
                .is_some_and(|d| next <= u64::from(u32::MAX) && d.contains(next as u32))
            {
                next += 1;
                continue;
            }
            break;
        }
        self.row = next;
        while seg
            .series
            .get(self.series)
            .is_some_and(|s| s.first_row + s.row_count <= next)
        {
            self.series += 1;
        }
        if self.series >= seg.series.len() {
            return Err(Error::corrupt(
                Place::SeriesTable,
                format!("row {next} belongs to no series"),
            ));
        }
        // Extra columns: the block holding this row, decoded once.
        let base = seg.meta.columns.len() as u32 + 1;
        self.extras
            .resize_with(seg.meta.extras.len(), || (None, Vec::new()));
        for (e, (cached, values)) in self.extras.iter_mut().enumerate() {
            let span = seg.column_span_rows(base + e as u32).unwrap_or(1).max(1);
            let cb = (next / span) as u32;
            if *cached != Some(cb) {
                *cached = None;
                let rows = seg.rows_in(base + e as u32, cb);
                *values = seg.decode_extra_block(e as u32, cb, 0..rows)?;
                *cached = Some(cb);
            }
        }
        Ok(true)
    }

    /// The current row's number.
    pub fn row(&self) -> RowId {
        self.row
    }

    /// Index (in [`Segment::series`]) of the current row's series.
    pub fn series_index(&self) -> usize {
        self.series
    }

    /// The current row's series.
    pub fn series(&self) -> Option<&'a Series> {
        self.seg.series.get(self.series)
    }

    /// The current row's timestamp.
    pub fn ts_millis(&self) -> i64 {
        let br = u64::from(self.seg.footer.block_rows).max(1);
        let i = (self.row % br) as usize;
        self.block.ts.get(i).copied().unwrap_or(0)
    }

    /// The current row's metric values, one per column of [`Segment::columns`].
    pub fn metrics(&self) -> &[Option<MetricValue>] {
        let br = u64::from(self.seg.footer.block_rows).max(1);
        let ncols = self.seg.meta.columns.len();
        let i = (self.row % br) as usize;
        self.block
            .metrics
            .get(i * ncols..(i + 1) * ncols)
            .unwrap_or(&[])
    }

    /// The current row's value of extra column `extra` (index in
    /// [`Segment::extra_columns`]).
    pub fn extra(&self, extra: usize) -> Option<&Extra> {
        let base = self.seg.meta.columns.len() as u32 + 1;
        let span = self
            .seg
            .column_span_rows(base + extra as u32)
            .unwrap_or(1)
            .max(1);
        let (_, values) = self.extras.get(extra)?;
        values.get((self.row % span) as usize)?.as_ref()
    }
}

/// Runs an `fst` read. `fst` 0.4 trusts the structure of the bytes it is given, and a
/// malformed FST that passes the section CRC (a file forged with its checksums
/// recomputed, found by `cargo xtask fuzz`) makes it index out of bounds: that panic is
/// caught here and becomes [`Error::Corrupt`] for the id index.
fn guard_fst<T>(read: impl FnOnce() -> T) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read))
        .map_err(|_| Error::corrupt(Place::IdIndex, "the id index is not a well-formed FST"))
}
