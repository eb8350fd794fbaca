//! [`SegmentStreamWriter`]: writes rows that arrive sorted by (tsid, timestamp) as a
//! segment, block by block, in memory bounded by the open blocks and the series table.
//!
//! Each column's current block is encoded and written as soon as the rows pass its end,
//! so the blocks of a file are interleaved by row range (format version 3); the block
//! directory, written at the end, is the index of where each block is. The series table
//! and directory are held until the end: O(series + blocks), never O(rows) (the bloom
//! filter is the one structure proportional to the rows, by design).

use std::io::{self, Write};
use std::sync::Arc;

use tidemark_tsid::{SyntheticId, Tsid};

use crate::bloom::SegmentBloom;
use crate::codec::BlockCompressor;
use crate::error::{Error, Result};
use crate::format::blocks::{self, extra_body, metric_candidates, timestamp_candidates};
use crate::format::directory::{BlockRef, DirectoryWriter, EMPTY_ENTRY};
use crate::format::meta::{self, ColumnInfo, ExtraInfo};
use crate::format::series::{self, Presence, SeriesOut, WrittenSeries};
use crate::format::{
    FLAG_BLOOM, FLAG_EVENTS, FLAG_ID_INDEX, FORMAT_VERSION, Footer, MAX_BLOCK_ROWS, MAX_COLUMNS,
    MAX_ROWS, SECTION_COUNT, SectionRef, encode_header, len_u32,
};
use crate::intern::SharedDims;
use crate::options::{BLOOM_HEADROOM_DEN, BLOOM_HEADROOM_NUM, SegmentOptions};
use crate::point::{Extra, MetricKind, MetricValue};
use crate::slots::{MAX_SLOT_ROWS, TimeSlots};
use crate::validate::{MAX_NAME_LEN, dim_len};

/// The columns of a streamed segment, declared before the first row: metric columns and
/// extra columns, each sorted by name (names unique across both), with the span shift of
/// their blocks (a block of a column with shift `s` covers `block_rows << s` rows; see
/// [`span_shift`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamSchema {
    /// Metric columns, by name.
    pub columns: Vec<ColumnInfo>,
    /// Extra (keyword/boolean) columns, by name.
    pub extras: Vec<ExtraInfo>,
}

impl StreamSchema {
    fn check(&self, block_rows: u32) -> Result<()> {
        let max_shift = max_shift(block_rows);
        let all = self.columns.len() + self.extras.len();
        if all > MAX_COLUMNS as usize {
            return Err(Error::TooLarge {
                what: "columns",
                found: all as u64,
                max: u64::from(MAX_COLUMNS),
            });
        }
        let bad = |detail: String| Error::InvalidOption {
            name: "schema",
            detail,
        };
        for w in self.columns.windows(2) {
            if w[0].name >= w[1].name {
                return Err(bad(format!(
                    "metric columns not sorted and unique: `{}` then `{}`",
                    w[0].name, w[1].name
                )));
            }
        }
        for w in self.extras.windows(2) {
            if w[0].name >= w[1].name {
                return Err(bad(format!(
                    "extra columns not sorted and unique: `{}` then `{}`",
                    w[0].name, w[1].name
                )));
            }
        }
        for e in &self.extras {
            if self
                .columns
                .binary_search_by(|c| c.name.as_str().cmp(&e.name))
                .is_ok()
            {
                return Err(bad(format!("`{}` is both a metric and an extra", e.name)));
            }
        }
        let shifts = self
            .columns
            .iter()
            .map(|c| (&c.name, c.span_shift))
            .chain(self.extras.iter().map(|e| (&e.name, e.span_shift)));
        for (name, shift) in shifts {
            if u32::from(shift) > max_shift {
                return Err(bad(format!(
                    "column `{name}`: span shift {shift}, at most {max_shift} for blocks of \
                     {block_rows} rows"
                )));
            }
            if name.len() > MAX_NAME_LEN {
                return Err(Error::TooLarge {
                    what: "name bytes",
                    found: name.len() as u64,
                    max: MAX_NAME_LEN as u64,
                });
            }
        }
        Ok(())
    }
}

fn max_shift(block_rows: u32) -> u32 {
    (MAX_BLOCK_ROWS / block_rows.max(1))
        .checked_ilog2()
        .unwrap_or(0)
}

/// The span shift the writers give a column present in `present` of `rows` rows: a column
/// present in 1/k of the rows gets blocks of `block_rows << floor(log2 k)` rows (at most
/// [`MAX_BLOCK_ROWS`]), so that each of its blocks holds about `block_rows` values.
pub fn span_shift(rows: u64, present: u64, block_rows: u32) -> u8 {
    let k = rows / present.max(1);
    k.max(1).ilog2().min(max_shift(block_rows)) as u8
}

/// Position of the directory in the footer's sections (meta, series, directory, bloom,
/// id index).
const DIRECTORY_SECTION: usize = 2;

/// A `Write` that counts the bytes it forwards and computes their CRC32.
struct Counting<W> {
    inner: W,
    pos: u64,
    crc: crc32fast::Hasher,
}

impl<W: Write> Counting<W> {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_all(bytes)?;
        self.crc.update(bytes);
        self.pos += bytes.len() as u64;
        Ok(())
    }
}

/// The open block of one metric or extra column.
struct ColumnBuf<V> {
    span: u64,
    /// Index of the open block.
    block: u64,
    /// Block-relative rows with a value, ascending.
    rows: Vec<u32>,
    values: Vec<V>,
    /// A series declared partial for this column has rows in the open block.
    partial: bool,
}

impl<V> ColumnBuf<V> {
    /// The open block's rows, values and partial flag when its span ends at `rows` (or,
    /// with `all`, when it holds any row), moving on to the next block.
    fn take_due(&mut self, rows: u64, all: bool) -> Option<(Vec<u32>, Vec<V>, bool)> {
        let due = if all {
            rows > self.block * self.span
        } else {
            rows % self.span == 0
        };
        if !due {
            return None;
        }
        self.block += 1;
        Some((
            std::mem::take(&mut self.rows),
            std::mem::take(&mut self.values),
            std::mem::replace(&mut self.partial, false),
        ))
    }

    /// Records a written block and takes its buffers back, emptied, for the next one.
    fn finish_block(&mut self, mut rows: Vec<u32>, mut values: Vec<V>) {
        rows.clear();
        values.clear();
        self.rows = rows;
        self.values = values;
    }

    fn new(span: u64) -> Self {
        ColumnBuf {
            span,
            block: 0,
            rows: Vec::new(),
            values: Vec::new(),
            partial: false,
        }
    }
}

/// What a writer wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentMeta {
    /// Rows (points).
    pub row_count: u64,
    /// Series.
    pub series_count: u64,
    /// Metric columns.
    pub column_count: u32,
    /// Smallest timestamp (0 when empty).
    pub min_ts: i64,
    /// Largest timestamp (0 when empty).
    pub max_ts: i64,
    /// Size of the file in bytes.
    pub len_bytes: u64,
}

/// Writes a segment from rows sorted by (tsid, timestamp) — (tsid, timestamp, id) in an
/// event segment — streaming each block to `W` as it fills.
///
/// Declare the columns up front ([`StreamSchema`]), then for each series in tsid order
/// call [`begin_series`](Self::begin_series) with its dimensions and the presence of each
/// column in its rows, then [`push_row`](Self::push_row) for each of its rows. A declared
/// [`Presence::Full`] column must have a value in every row, an undeclared one in none; a
/// [`Presence::Partial`] one may have any (declaring partial when unsure is always safe:
/// the blocks then carry presence bitmaps). [`finish`](Self::finish) writes the series
/// table, directory, id sections and footer, and returns `W`.
///
/// ```
/// use tidemark_segment::{
///     ColumnInfo, MetricKind, MetricValue, Presence, Segment, SegmentOptions,
///     SegmentStreamWriter, StreamSchema,
/// };
/// use tidemark_tsid::Tsid;
///
/// let schema = StreamSchema {
///     columns: vec![ColumnInfo { name: "cpu".into(), kind: MetricKind::Gauge, span_shift: 0 }],
///     extras: vec![],
/// };
/// let mut w = SegmentStreamWriter::new(Vec::new(), SegmentOptions::new(), schema, 2)?;
/// w.begin_series(Tsid::from_bytes([7; 20]), vec![("host".into(), "a".into())], &[(0, Presence::Full)])?;
/// w.push_row(1_000, &[(0, MetricValue::Gauge(0.25))], &[], None)?;
/// w.push_row(2_000, &[(0, MetricValue::Gauge(0.5))], &[], None)?;
/// let (bytes, meta) = w.finish()?;
/// assert_eq!(meta.row_count, 2);
/// let segment = Segment::from_vec(bytes)?;
/// assert_eq!(segment.find(&Tsid::from_bytes([7; 20]), 2_000)?, Some(1));
/// # Ok::<(), tidemark_segment::Error>(())
/// ```
pub struct SegmentStreamWriter<W: Write> {
    out: Counting<W>,
    options: SegmentOptions,
    schema: StreamSchema,
    comp: BlockCompressor,
    block_rows: u64,
    rows: u64,
    series: Vec<SeriesOut>,
    /// Rows of the current series have been marked in the open blocks' partial flags.
    run_marked: bool,
    prev_ts: i64,
    prev_id: Option<[u8; 28]>,
    /// Timestamps of the current series (at most [`MAX_SLOT_ROWS`]), for its slot map.
    series_ts: Vec<i64>,
    /// The current series has more rows than [`MAX_SLOT_ROWS`]: no slot map.
    series_ts_overflow: bool,
    min_ts: i64,
    max_ts: i64,
    ts_block: Vec<i64>,
    ts_runs: Vec<usize>,
    /// Directory entries: timestamps (column 0), metric columns, extra columns.
    dir: DirectoryWriter,
    metrics: Vec<ColumnBuf<MetricValue>>,
    extras: Vec<ColumnBuf<Extra>>,
    bloom: Option<SegmentBloom>,
    bloom_capacity: u64,
    bloom_given: bool,
    /// Time series: ids arrive in order and stream into the FST builder.
    fst: Option<fst::MapBuilder<Vec<u8>>>,
    /// Events: ids do not follow row order; sorted at the end.
    event_ids: Vec<([u8; 28], u64)>,
    /// Scratch buffers for block encoding.
    raw: Vec<u8>,
}

impl<W: Write> std::fmt::Debug for SegmentStreamWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentStreamWriter")
            .field("rows", &self.rows)
            .field("series", &self.series.len())
            .field("columns", &self.schema.columns.len())
            .field("extras", &self.schema.extras.len())
            .finish_non_exhaustive()
    }
}

impl<W: Write> SegmentStreamWriter<W> {
    /// A writer to `out`. `expected_rows` sizes the bloom filter (when the options ask for
    /// one and none is given with [`set_bloom_filter`](Self::set_bloom_filter)): give the
    /// row count, or an upper bound (a merge: the inputs' live rows).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for bad options or an unsorted schema, I/O errors writing
    /// the header.
    pub fn new(
        out: W,
        options: SegmentOptions,
        schema: StreamSchema,
        expected_rows: u64,
    ) -> Result<SegmentStreamWriter<W>> {
        options.check()?;
        let block_rows = options.block_rows();
        schema.check(block_rows)?;
        let span = |shift: u8| u64::from(block_rows) << shift;
        let ncolumns = schema.columns.len() + schema.extras.len();
        let metrics = schema
            .columns
            .iter()
            .map(|c| ColumnBuf::new(span(c.span_shift)))
            .collect();
        let extras = schema
            .extras
            .iter()
            .map(|e| ColumnBuf::new(span(e.span_shift)))
            .collect();
        let bloom_capacity = expected_rows.max(1) * BLOOM_HEADROOM_NUM / BLOOM_HEADROOM_DEN;
        let bloom = match options.bloom_rate() {
            Some(fpr) => Some(SegmentBloom::with_capacity(bloom_capacity, fpr)?),
            None => None,
        };
        let fst = (options.id_index() && !options.events()).then(fst::MapBuilder::memory);
        let mut w = SegmentStreamWriter {
            out: Counting {
                inner: out,
                pos: 0,
                crc: crc32fast::Hasher::new(),
            },
            comp: BlockCompressor::new(options.zstd_level())?,
            options,
            schema,
            block_rows: u64::from(block_rows),
            rows: 0,
            series: Vec::new(),
            run_marked: false,
            prev_ts: i64::MIN,
            prev_id: None,
            series_ts: Vec::new(),
            series_ts_overflow: false,
            min_ts: i64::MAX,
            max_ts: i64::MIN,
            ts_block: Vec::with_capacity(block_rows as usize),
            ts_runs: Vec::new(),
            dir: DirectoryWriter::new(1 + ncolumns),
            metrics,
            extras,
            bloom,
            bloom_capacity,
            bloom_given: false,
            fst,
            event_ids: Vec::new(),
            raw: Vec::new(),
        };
        w.out.put(&encode_header())?;
        Ok(w)
    }

    /// Writes `filter` as the bloom section (when the options ask for one) instead of
    /// building one from the rows, recording `capacity` as the items it was sized for.
    /// The caller guarantees that it holds every row's id: e.g. the OR of the filters of
    /// the segments being merged (which may also hold ids of rows since deleted: more
    /// false positives, never a false negative).
    pub fn set_bloom_filter(&mut self, filter: SegmentBloom, capacity: u64) {
        if self.options.bloom_rate().is_some() {
            self.bloom = Some(filter);
            self.bloom_capacity = capacity;
            self.bloom_given = true;
        }
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Starts series `tsid`, whose tsid must sort after the previous series'. `dims` are
    /// its dimensions, sorted by name; `presence` lists, sorted by column index (metric
    /// columns `0..C`, then extra columns `C..C+E`), the columns its rows have values in.
    /// A series that ends with no rows is left out of the segment.
    ///
    /// # Errors
    /// [`Error::OutOfOrder`] for a tsid not after the previous one,
    /// [`Error::DuplicateDimension`] and [`Error::InvalidOption`] for unsorted dimensions or
    /// presence, [`Error::TooLarge`] for names or keywords over 65,535 bytes.
    pub fn begin_series(
        &mut self,
        tsid: Tsid,
        dims: impl Into<SharedDims>,
        presence: &[(u32, Presence)],
    ) -> Result<()> {
        let dims: SharedDims = dims.into();
        if self.series.last().is_some_and(|s| s.row_count == 0) {
            self.series.pop();
        }
        if let Some(prev) = self.series.last() {
            if prev.tsid >= tsid {
                return Err(Error::OutOfOrder {
                    detail: format!("series {tsid} after series {}", prev.tsid),
                });
            }
        }
        for w in dims.windows(2) {
            match w[0].0.cmp(&w[1].0) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => {
                    return Err(Error::DuplicateDimension {
                        name: w[0].0.clone(),
                    });
                }
                std::cmp::Ordering::Greater => {
                    return Err(Error::OutOfOrder {
                        detail: format!("dimension `{}` before `{}`", w[0].0, w[1].0),
                    });
                }
            }
        }
        for (name, value) in dims.iter() {
            let long = dim_len(name, value);
            if long > MAX_NAME_LEN {
                return Err(Error::TooLarge {
                    what: "name bytes",
                    found: long as u64,
                    max: MAX_NAME_LEN as u64,
                });
            }
        }
        let ncols = (self.schema.columns.len() + self.schema.extras.len()) as u32;
        let sorted = presence.windows(2).all(|w| w[0].0 < w[1].0);
        if !sorted || presence.last().is_some_and(|&(c, _)| c >= ncols) {
            return Err(Error::InvalidOption {
                name: "presence",
                detail: format!(
                    "series {tsid}: column indexes must be ascending and below {ncols}"
                ),
            });
        }
        self.close_series_slots();
        let declared = match self.series.last() {
            Some(prev) if prev.declared[..] == *presence => Arc::clone(&prev.declared),
            _ => Arc::from(presence),
        };
        let counts = if presence.iter().all(|&(_, p)| p == Presence::Full) {
            Vec::new()
        } else {
            vec![0; presence.len()]
        };
        self.series.push(SeriesOut {
            tsid,
            dims,
            row_count: 0,
            min_ts: 0,
            max_ts: 0,
            declared,
            counts,
            slots: None,
        });
        self.run_marked = false;
        self.prev_ts = i64::MIN;
        self.prev_id = None;
        Ok(())
    }

    /// Adds a row of the current series: its timestamp, its metric values as
    /// `(column index, value)` and its extra values as `(extra column index, value)`, both
    /// ascending, and, in an event segment, its id (a time-series row's id is
    /// (tsid, timestamp)).
    ///
    /// # Errors
    /// [`Error::DuplicatePoint`] for a row equal to the previous one,
    /// [`Error::OutOfOrder`] for a row before it, [`Error::InvalidOption`] for values
    /// that contradict the series' declared presence or the schema, no current series, or
    /// an event row without an id; [`Error::TooLarge`]; I/O errors.
    pub fn push_row(
        &mut self,
        ts_millis: i64,
        metrics: &[(u32, MetricValue)],
        extras: &[(u32, &Extra)],
        id: Option<&SyntheticId>,
    ) -> Result<()> {
        let id_bytes = self.check_order(ts_millis, id)?;
        self.check_values(metrics, extras)?;
        self.open_blocks()?;
        let row = self.rows;
        self.push_timestamp(ts_millis);
        self.push_metrics(row, metrics);
        self.push_extras(row, extras);
        self.record_id(id_bytes, row)?;
        self.record_row(ts_millis, id_bytes);
        Ok(())
    }

    /// Adds `ts.len()` rows of the current series at once, as [`push_row`](Self::push_row)
    /// would one by one, for a time-series segment whose rows all have a value in the
    /// same metric columns and no extras: `ts` ascending, and for each metric column in
    /// ascending index order its values, one per row (`(column index, values)`). The
    /// checks are [`push_row`](Self::push_row)'s, made once per column instead of once
    /// per value where they can be; the file written is the same byte for byte.
    ///
    /// # Errors
    /// As [`push_row`](Self::push_row), and [`Error::InvalidOption`] in an event segment
    /// or for a column whose values are not one per row.
    pub fn push_rows<C: AsRef<[MetricValue]>>(
        &mut self,
        ts: &[i64],
        values: &[(u32, C)],
    ) -> Result<()> {
        self.check_run(ts, values)?;
        let n = ts.len();
        let mut done = 0usize;
        while done < n {
            self.open_blocks()?;
            let room = (self.block_rows - self.rows % self.block_rows) as usize;
            let take = room.min(n - done);
            let (chunk, row) = (done..done + take, self.rows);
            let chunk_ts = ts.get(chunk.clone()).unwrap_or(&[]);
            if let Some(run) = self.ts_runs.last_mut() {
                *run += take;
            }
            self.ts_block.extend_from_slice(chunk_ts);
            for (c, vals) in values {
                let vals = vals.as_ref();
                if let Some(col) = self.metrics.get_mut(*c as usize) {
                    let first = (row - col.block * col.span) as u32;
                    col.rows.extend(first..first + take as u32);
                    col.values
                        .extend_from_slice(vals.get(chunk.clone()).unwrap_or(&[]));
                }
            }
            // Ids only where a section needs them: a bloom filter built from the rows, or
            // the id index.
            let needs_ids = (self.bloom.is_some() && !self.bloom_given) || self.fst.is_some();
            if let Some(tsid) = self.series.last().map(|s| s.tsid).filter(|_| needs_ids) {
                for (k, &t) in chunk_ts.iter().enumerate() {
                    self.record_id(SyntheticId::new(tsid, t).to_bytes(), row + k as u64)?;
                }
            }
            self.record_rows(chunk_ts);
            done += take;
        }
        Ok(())
    }

    /// The checks of [`push_rows`](Self::push_rows): order, room, kinds, lengths and
    /// the series' declared presence (counted for the rows).
    fn check_run<C: AsRef<[MetricValue]>>(
        &mut self,
        ts: &[i64],
        values: &[(u32, C)],
    ) -> Result<()> {
        let bad = |detail: String| Error::InvalidOption {
            name: "rows",
            detail,
        };
        if self.options.events() {
            return Err(bad("an event segment takes rows one by one".into()));
        }
        if ts.is_empty() {
            return Ok(());
        }
        if self.rows + ts.len() as u64 > MAX_ROWS {
            return Err(Error::TooLarge {
                what: "rows",
                found: self.rows + ts.len() as u64,
                max: MAX_ROWS,
            });
        }
        let Some(series) = self.series.last() else {
            return Err(bad("a row before any series".into()));
        };
        let tsid = series.tsid;
        let mut before = (series.row_count > 0).then_some(self.prev_ts);
        for &t in ts {
            if let Some(p) = before {
                if let Some(e) = order_error(t.cmp(&p), tsid, t, p) {
                    return Err(e);
                }
            }
            before = Some(t);
        }
        if !values.windows(2).all(|w| w[0].0 < w[1].0) {
            return Err(bad("column indexes must be ascending".into()));
        }
        for (c, vals) in values {
            let (c, vals) = (*c, vals.as_ref());
            let info = self.schema.columns.get(c as usize);
            let Some(info) = info else {
                return Err(bad(format!("no metric column {c} in the schema")));
            };
            if vals.len() != ts.len() {
                return Err(bad(format!(
                    "column `{}`: {} values for {} rows",
                    info.name,
                    vals.len(),
                    ts.len()
                )));
            }
            if let Some(v) = vals.iter().find(|v| v.kind() != info.kind) {
                return Err(kind_error(
                    Some((info.name.as_str(), info.kind.name())),
                    v.kind().name(),
                    "metric",
                    c,
                ));
            }
        }
        // Every row has exactly the listed columns.
        self.check_presence(values.iter().map(|(c, _)| *c), ts.len() as u64)
    }

    /// Step 1 of [`push_row`](Self::push_row): checks that there is a current series and
    /// room for a row, and that the row (timestamp, and id in an event segment) sorts
    /// after the series' previous one; returns the row's id bytes.
    fn check_order(&self, ts_millis: i64, id: Option<&SyntheticId>) -> Result<[u8; 28]> {
        let events = self.options.events();
        let Some(series) = self.series.last() else {
            return Err(Error::InvalidOption {
                name: "row",
                detail: "a row before any series".into(),
            });
        };
        let tsid = series.tsid;
        if self.rows >= MAX_ROWS {
            return Err(Error::TooLarge {
                what: "rows",
                found: self.rows + 1,
                max: MAX_ROWS,
            });
        }
        let id_bytes = match (events, id) {
            (false, _) => SyntheticId::new(tsid, ts_millis).to_bytes(),
            (true, Some(id)) => id.to_bytes(),
            (true, None) => {
                return Err(Error::InvalidOption {
                    name: "row",
                    detail: "an event row needs its id".into(),
                });
            }
        };
        let order = if series.row_count == 0 {
            std::cmp::Ordering::Greater
        } else if events {
            (ts_millis, Some(id_bytes)).cmp(&(self.prev_ts, self.prev_id))
        } else {
            ts_millis.cmp(&self.prev_ts)
        };
        match order_error(order, tsid, ts_millis, self.prev_ts) {
            Some(e) => Err(e),
            None => Ok(id_bytes),
        }
    }

    /// Step 2: checks the row's values against the schema (ascending column indexes,
    /// kinds, keyword lengths) and the series' declared presence, counting them.
    fn check_values(
        &mut self,
        metrics: &[(u32, MetricValue)],
        extras: &[(u32, &Extra)],
    ) -> Result<()> {
        let sorted = metrics.windows(2).all(|w| w[0].0 < w[1].0)
            && extras.windows(2).all(|w| w[0].0 < w[1].0);
        if !sorted {
            return Err(Error::InvalidOption {
                name: "row",
                detail: "column indexes must be ascending".into(),
            });
        }
        for &(c, v) in metrics {
            match self.schema.columns.get(c as usize) {
                Some(i) if i.kind == v.kind() => {}
                info => {
                    return Err(kind_error(
                        info.map(|i| (i.name.as_str(), i.kind.name())),
                        v.kind().name(),
                        "metric",
                        c,
                    ));
                }
            }
        }
        for &(e, v) in extras {
            match self.schema.extras.get(e as usize) {
                Some(i) if i.kind == v.kind() => {}
                info => {
                    return Err(kind_error(
                        info.map(|i| (i.name.as_str(), i.kind.name())),
                        v.kind().name(),
                        "extra",
                        e,
                    ));
                }
            }
            if let Extra::Keyword(k) = v {
                if k.len() > MAX_NAME_LEN {
                    return Err(Error::TooLarge {
                        what: "extra keyword bytes",
                        found: k.len() as u64,
                        max: MAX_NAME_LEN as u64,
                    });
                }
            }
        }
        let ncols = self.schema.columns.len() as u32;
        let present = metrics
            .iter()
            .map(|&(c, _)| c)
            .chain(extras.iter().map(|&(e, _)| ncols + e));
        self.check_presence(present, 1)
    }

    /// Step 3: at a block boundary, writes the timestamp block and the column blocks whose
    /// span ends there; on the first row of a series in a timestamp block, starts its run
    /// and marks its partial columns in the open blocks.
    fn open_blocks(&mut self) -> Result<()> {
        if self.rows > 0 && self.rows % self.block_rows == 0 {
            self.flush_ts_block()?;
            self.flush_column_blocks(false)?;
            self.run_marked = false;
        }
        if !self.run_marked {
            self.ts_runs.push(0);
            self.mark_partial();
            self.run_marked = true;
        }
        Ok(())
    }

    /// Step 4: adds the timestamp to the open timestamp block and the series' run in it.
    fn push_timestamp(&mut self, ts_millis: i64) {
        if let Some(run) = self.ts_runs.last_mut() {
            *run += 1;
        }
        self.ts_block.push(ts_millis);
    }

    /// Step 5: adds the metric values of row `row` to their columns' open blocks.
    fn push_metrics(&mut self, row: u64, metrics: &[(u32, MetricValue)]) {
        for &(c, v) in metrics {
            if let Some(col) = self.metrics.get_mut(c as usize) {
                col.rows.push((row - col.block * col.span) as u32);
                col.values.push(v);
            }
        }
    }

    /// Step 6: adds the extra values of row `row` to their columns' open blocks.
    fn push_extras(&mut self, row: u64, extras: &[(u32, &Extra)]) {
        for &(e, v) in extras {
            if let Some(col) = self.extras.get_mut(e as usize) {
                col.rows.push((row - col.block * col.span) as u32);
                col.values.push(v.clone());
            }
        }
    }

    /// Step 7: adds the row's id to the bloom filter (unless one was given) and to the id
    /// index (streamed into the FST for time series, kept for sorting for events).
    fn record_id(&mut self, id_bytes: [u8; 28], row: u64) -> Result<()> {
        if !self.bloom_given {
            if let Some(b) = &mut self.bloom {
                b.insert(&id_bytes[..]);
            }
        }
        if let Some(f) = &mut self.fst {
            f.insert(id_bytes, row)?;
        } else if self.options.events() && self.options.id_index() {
            self.event_ids.push((id_bytes, row));
        }
        Ok(())
    }

    /// Step 8: counts the row in its series (row count, time range, slot-map timestamps)
    /// and the segment (time range, previous row, rows).
    fn record_row(&mut self, ts_millis: i64, id_bytes: [u8; 28]) {
        if let Some(s) = self.series.last_mut() {
            if s.row_count == 0 {
                s.min_ts = ts_millis;
            }
            s.row_count += 1;
            s.max_ts = ts_millis;
        }
        if self.series_ts.len() < MAX_SLOT_ROWS {
            self.series_ts.push(ts_millis);
        } else {
            self.series_ts_overflow = true;
        }
        self.min_ts = self.min_ts.min(ts_millis);
        self.max_ts = self.max_ts.max(ts_millis);
        self.prev_ts = ts_millis;
        self.prev_id = self.options.events().then_some(id_bytes);
        self.rows += 1;
    }

    /// [`record_row`](Self::record_row) for rows of the current series with timestamps
    /// `ts` (ascending, a time-series segment).
    fn record_rows(&mut self, ts: &[i64]) {
        let (Some(&first), Some(&last)) = (ts.first(), ts.last()) else {
            return;
        };
        if let Some(s) = self.series.last_mut() {
            if s.row_count == 0 {
                s.min_ts = first;
            }
            s.row_count += ts.len() as u64;
            s.max_ts = last;
        }
        let room = MAX_SLOT_ROWS.saturating_sub(self.series_ts.len());
        if ts.len() > room {
            self.series_ts_overflow = true;
        }
        self.series_ts
            .extend_from_slice(ts.get(..room.min(ts.len())).unwrap_or(&[]));
        self.min_ts = self.min_ts.min(first);
        self.max_ts = self.max_ts.max(last);
        self.prev_ts = last;
        self.prev_id = None;
        self.rows += ts.len() as u64;
    }

    /// Checks the columns (metric columns `0..C`, then extra columns `C..`) that `rows`
    /// rows all have values in against their series' declared presence, and counts them.
    fn check_presence(&mut self, present: impl Iterator<Item = u32>, rows: u64) -> Result<()> {
        let ncols = self.schema.columns.len() as u32;
        let Some(s) = self.series.last_mut() else {
            return Ok(());
        };
        let mut j = 0usize;
        let name = |schema: &StreamSchema, c: u32| -> String {
            if c < ncols {
                schema.columns.get(c as usize).map(|i| i.name.clone())
            } else {
                schema
                    .extras
                    .get((c - ncols) as usize)
                    .map(|i| i.name.clone())
            }
            .unwrap_or_default()
        };
        for c in present {
            while s.declared.get(j).is_some_and(|&(d, _)| d < c) {
                if let Some(&(d, Presence::Full)) = s.declared.get(j) {
                    return Err(Error::InvalidOption {
                        name: "row",
                        detail: format!(
                            "series {}: column `{}` declared full has no value",
                            s.tsid,
                            name(&self.schema, d)
                        ),
                    });
                }
                j += 1;
            }
            match s.declared.get(j) {
                Some(&(d, _)) if d == c => {
                    if let Some(n) = s.counts.get_mut(j) {
                        *n += rows;
                    }
                    j += 1;
                }
                _ => {
                    return Err(Error::InvalidOption {
                        name: "row",
                        detail: format!(
                            "series {}: column `{}` not declared for it has a value",
                            s.tsid,
                            name(&self.schema, c)
                        ),
                    });
                }
            }
        }
        if let Some(&(d, _)) = s
            .declared
            .get(j..)
            .unwrap_or(&[])
            .iter()
            .find(|(_, p)| *p == Presence::Full)
        {
            return Err(Error::InvalidOption {
                name: "row",
                detail: format!(
                    "series {}: column `{}` declared full has no value",
                    s.tsid,
                    name(&self.schema, d)
                ),
            });
        }
        Ok(())
    }

    /// The current series' partial columns get presence bitmaps in their open blocks.
    fn mark_partial(&mut self) {
        let Some(s) = self.series.last() else {
            return;
        };
        let ncols = self.metrics.len() as u32;
        for &(c, p) in s.declared.iter() {
            if p != Presence::Partial {
                continue;
            }
            if c < ncols {
                if let Some(col) = self.metrics.get_mut(c as usize) {
                    col.partial = true;
                }
            } else if let Some(col) = self.extras.get_mut((c - ncols) as usize) {
                col.partial = true;
            }
        }
    }

    fn write_block(&mut self, block: &[u8], raw_len: usize) -> Result<BlockRef> {
        let entry = BlockRef {
            offset: self.out.pos,
            len: len_u32(block.len(), "block bytes")?,
            raw_len: len_u32(raw_len, "decoded block bytes")?,
            crc: crc32fast::hash(block),
        };
        self.out.put(block)?;
        Ok(entry)
    }

    /// Writes the smallest compressed block of `header` and a candidate body (see
    /// [`blocks::best`]); the empty entry without candidates.
    fn write_best(&mut self, header: &[u8], candidates: Vec<Vec<u8>>) -> Result<BlockRef> {
        let fast = self.options.fast_encoding();
        match blocks::best(header, candidates, fast, &mut self.comp, &mut self.raw)? {
            Some((block, raw_len)) => self.write_block(&block, raw_len),
            None => Ok(EMPTY_ENTRY),
        }
    }

    fn flush_ts_block(&mut self) -> Result<()> {
        if self.ts_block.is_empty() {
            return Ok(());
        }
        let candidates = timestamp_candidates(&self.ts_block, &self.ts_runs);
        let entry = self.write_best(&[], candidates)?;
        self.dir.push(0, &entry)?;
        self.ts_block.clear();
        self.ts_runs.clear();
        Ok(())
    }

    /// Writes the open block of every column whose span ends at the current row count
    /// (all of them when `all`, at the end).
    fn flush_column_blocks(&mut self, all: bool) -> Result<()> {
        let rows = self.rows;
        for c in 0..self.metrics.len() {
            let Some((block_rows, values, partial)) = self
                .metrics
                .get_mut(c)
                .and_then(|col| col.take_due(rows, all))
            else {
                continue;
            };
            // One open block per schema column, built from the schema.
            debug_assert_eq!(self.metrics.len(), self.schema.columns.len());
            let kind = self.schema.columns[c].kind;
            let entry = self.encode_metric_block(kind, &block_rows, &values, partial)?;
            self.dir.push(1 + c, &entry)?;
            if let Some(col) = self.metrics.get_mut(c) {
                col.finish_block(block_rows, values);
            }
        }
        for e in 0..self.extras.len() {
            let Some((block_rows, values, partial)) = self
                .extras
                .get_mut(e)
                .and_then(|col| col.take_due(rows, all))
            else {
                continue;
            };
            debug_assert_eq!(self.extras.len(), self.schema.extras.len());
            let kind = self.schema.extras[e].kind;
            let entry = if block_rows.is_empty() {
                EMPTY_ENTRY
            } else {
                let raw = extra_body(kind, &block_rows, &values, partial)?;
                self.write_best(&[], vec![raw])?
            };
            self.dir.push(1 + self.metrics.len() + e, &entry)?;
            if let Some(col) = self.extras.get_mut(e) {
                col.finish_block(block_rows, values);
            }
        }
        Ok(())
    }

    fn encode_metric_block(
        &mut self,
        kind: MetricKind,
        rows: &[u32],
        values: &[MetricValue],
        partial: bool,
    ) -> Result<BlockRef> {
        if rows.is_empty() {
            return Ok(EMPTY_ENTRY);
        }
        let mut header = Vec::new();
        blocks::presence_header(partial, rows, &mut header)?;
        let fast = self.options.fast_encoding();
        let candidates = metric_candidates(kind, values, fast, &mut self.comp)?;
        self.write_best(&header, candidates)
    }

    /// Writes the last blocks, the meta section, series table, directory, id sections and
    /// footer, and returns the writer and what was written.
    ///
    /// # Errors
    /// I/O errors; [`Error::TooLarge`] for counts the format cannot hold.
    pub fn finish(self) -> Result<(W, SegmentMeta)> {
        self.finish_sections().map(|(out, meta, _)| (out, meta))
    }

    /// As [`finish`](Self::finish), also returning the series table as a reader would
    /// decode it from the file, for [`Segment::open_written`](crate::Segment::open_written).
    ///
    /// # Errors
    /// As [`finish`](Self::finish).
    pub fn finish_with_series(self) -> Result<(W, SegmentMeta, WrittenSeries)> {
        self.finish_sections()
            .map(|(out, meta, series)| (out, meta, WrittenSeries::from_out(series)))
    }

    /// The steps of [`finish`](Self::finish); returns the series written.
    fn finish_sections(mut self) -> Result<(W, SegmentMeta, Vec<SeriesOut>)> {
        self.write_last_blocks()?;
        let sections = self.encode_sections()?;
        let refs = self.write_sections(&sections)?;
        self.write_footer(refs)
    }

    /// Step 1 of [`finish`](Self::finish): closes the last series and writes every
    /// column's open block.
    fn write_last_blocks(&mut self) -> Result<()> {
        self.close_series_slots();
        if self.series.last().is_some_and(|s| s.row_count == 0) {
            self.series.pop();
        }
        self.flush_ts_block()?;
        self.flush_column_blocks(true)?;
        debug_assert_eq!(self.dir.count(0), self.rows.div_ceil(self.block_rows));
        Ok(())
    }

    /// Step 2: the meta, series, directory, bloom and id-index sections, in footer order.
    fn encode_sections(&mut self) -> Result<[Vec<u8>; SECTION_COUNT]> {
        let dim_names = series::dim_names(&self.series);
        let bloom = self.options.bloom_rate().map(|f| (f, self.bloom_capacity));
        let meta = meta::encode(bloom, &dim_names, &self.schema.columns, &self.schema.extras)?;
        let series_section = series::encode(&self.series, &dim_names, &mut self.comp)?;
        // The directory is written from the columns' entries as they are (see
        // `write_sections`): no second copy of it is built.
        let dir = Vec::new();
        let bloom_section = match &self.bloom {
            Some(b) => b.to_bytes(),
            None => Vec::new(),
        };
        let id_section = self.encode_id_index()?;
        let sections = [meta, series_section, dir, bloom_section, id_section];
        debug_assert!(sections.get(DIRECTORY_SECTION).is_some_and(Vec::is_empty));
        Ok(sections)
    }

    /// The id-index section: the FST of synthetic ids to rows (time series stream their
    /// ids in; an event segment's are sorted here), empty without one.
    fn encode_id_index(&mut self) -> Result<Vec<u8>> {
        Ok(match self.fst.take() {
            Some(b) => b.into_inner()?,
            None if self.options.id_index() => {
                let mut ids = std::mem::take(&mut self.event_ids);
                ids.sort_unstable();
                let mut b = fst::MapBuilder::memory();
                for (id, row) in ids {
                    b.insert(id, row)?;
                }
                b.into_inner()?
            }
            None => Vec::new(),
        })
    }

    /// Step 3: writes the sections after the blocks; returns where each one is.
    fn write_sections(
        &mut self,
        sections: &[Vec<u8>; SECTION_COUNT],
    ) -> Result<[SectionRef; SECTION_COUNT]> {
        let mut refs = [SectionRef::default(); SECTION_COUNT];
        for (i, (slot, bytes)) in refs.iter_mut().zip(sections).enumerate() {
            let mut crc = crc32fast::Hasher::new();
            let offset = self.out.pos;
            let out = &mut self.out;
            let mut put = |b: &[u8]| {
                crc.update(b);
                out.put(b)
            };
            let len = if i == DIRECTORY_SECTION {
                self.dir.write_to(&mut put)?;
                self.dir.len()
            } else {
                put(bytes)?;
                bytes.len() as u64
            };
            *slot = SectionRef {
                offset: if len == 0 { 0 } else { offset },
                len,
                crc: if len == 0 { 0 } else { crc.finalize() },
            };
        }
        Ok(refs)
    }

    /// Step 4: writes the footer, flushes, and returns the output and what was written.
    fn write_footer(
        mut self,
        sections: [SectionRef; SECTION_COUNT],
    ) -> Result<(W, SegmentMeta, Vec<SeriesOut>)> {
        let n = self.rows;
        let mut flags = 0;
        if self.options.bloom_rate().is_some() {
            flags |= FLAG_BLOOM;
        }
        if self.options.id_index() {
            flags |= FLAG_ID_INDEX;
        }
        if self.options.events() {
            flags |= FLAG_EVENTS;
        }
        let empty = n == 0;
        let footer = Footer {
            row_count: n,
            series_count: self.series.len() as u64,
            min_ts: if empty { 0 } else { self.min_ts },
            max_ts: if empty { 0 } else { self.max_ts },
            block_rows: self.block_rows as u32,
            block_count: len_u32(n.div_ceil(self.block_rows) as usize, "blocks")?,
            column_count: len_u32(self.schema.columns.len(), "metric columns")?,
            flags,
            sections,
            data_crc: self.out.crc.clone().finalize(),
            version: FORMAT_VERSION,
        };
        self.out.put(&footer.encode())?;
        self.out.inner.flush()?;
        let meta = SegmentMeta {
            row_count: footer.row_count,
            series_count: footer.series_count,
            column_count: footer.column_count,
            min_ts: footer.min_ts,
            max_ts: footer.max_ts,
            len_bytes: self.out.pos,
        };
        Ok((self.out.inner, meta, self.series))
    }

    /// Builds the current series' slot map from its timestamps, now that its last row is
    /// in, and starts the next series' timestamps afresh.
    fn close_series_slots(&mut self) {
        if let Some(s) = self.series.last_mut() {
            if !self.series_ts_overflow {
                s.slots = TimeSlots::build(&self.series_ts).map(Box::new);
            }
        }
        self.series_ts.clear();
        self.series_ts_overflow = false;
    }
}

/// The error of a row's value that its schema column (`(name, kind name)`, if any) does
/// not take.
/// The error for a row at `ts_millis` of series `tsid` that compares to the previous
/// row (at `prev_ts`) as `order`; `None` when it comes after it.
fn order_error(
    order: std::cmp::Ordering,
    tsid: Tsid,
    ts_millis: i64,
    prev_ts: i64,
) -> Option<Error> {
    match order {
        std::cmp::Ordering::Greater => None,
        std::cmp::Ordering::Equal => Some(Error::DuplicatePoint {
            tsid: tsid.to_string(),
            ts_millis,
        }),
        std::cmp::Ordering::Less => Some(Error::OutOfOrder {
            detail: format!("series {tsid}: row at {ts_millis} ms after one at {prev_ts} ms"),
        }),
    }
}

fn kind_error(
    column: Option<(&str, &'static str)>,
    found: &'static str,
    what: &str,
    index: u32,
) -> Error {
    match column {
        Some((name, expected)) => Error::MetricKindConflict {
            name: name.to_owned(),
            expected,
            found,
        },
        None => Error::InvalidOption {
            name: "row",
            detail: format!("{what} column {index} is not in the schema"),
        },
    }
}
