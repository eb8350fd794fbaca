//! [`SegmentStreamWriter`]: writes rows that arrive sorted by (tsid, timestamp) as a
//! segment, block by block, in memory bounded by the open blocks and the series table.
//!
//! Each column's current block is encoded and written as soon as the rows pass its end,
//! so the blocks of a file are interleaved by row range (format version 3); the block
//! directory, written at the end, is the index of where each block is. The series table
//! and directory are held until the end: O(series + blocks), never O(rows) (the bloom
//! filter is the one structure proportional to the rows, by design).
//!
//! One concept per file: `schema` (the declared columns), `checks` (input checks),
//! `blocks` (open blocks and their writing), `finish` (sections and footer); this file
//! holds the writer and the rows' way in.

mod blocks;
mod checks;
mod finish;
mod schema;

pub use schema::{StreamSchema, span_shift};

use std::io::Write;
use std::sync::Arc;

use tidemark_tsid::{SyntheticId, Tsid};

use crate::bloom::SegmentBloom;
use crate::codec::BlockCompressor;
use crate::error::{Error, Result};
use crate::format::directory::DirectoryWriter;
use crate::format::encode_header;
use crate::format::series::{Presence, SeriesOut};
use crate::intern::SharedDims;
use crate::options::{BLOOM_HEADROOM_DEN, BLOOM_HEADROOM_NUM, SegmentOptions};
use crate::point::{Extra, MetricValue};
use crate::slots::{MAX_SLOT_ROWS, TimeSlots};
use crate::validate::{MAX_NAME_LEN, dim_len};
use blocks::{ColumnBuf, Counting};

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

    /// Builds the current series' slot map from its timestamps, now that its last row is
    /// in, and starts the next series' timestamps afresh.
    pub(super) fn close_series_slots(&mut self) {
        if let Some(s) = self.series.last_mut() {
            if !self.series_ts_overflow {
                s.slots = TimeSlots::build(&self.series_ts).map(Box::new);
            }
        }
        self.series_ts.clear();
        self.series_ts_overflow = false;
    }
}
