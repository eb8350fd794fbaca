//! [`SegmentWriter`]: collects points in any order, sorts them by (tsid, timestamp) and
//! encodes a segment.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use tidemark_tsid::{SyntheticId, Tsid};

use crate::bloom::SegmentBloom;
use crate::error::{Error, Result};
use crate::format::meta::{ColumnInfo, ExtraInfo};
use crate::format::series::{Presence, WrittenSeries};
use crate::format::{MAX_COLUMNS, MAX_ROWS};
use crate::hash::FoldBuildHasher;
use crate::intern::SharedDims;
use crate::options::SegmentOptions;
use crate::point::{Dim, Extra, ExtraKind, MetricKind, MetricValue, Point};
use crate::stream::{SegmentMeta, SegmentStreamWriter, StreamSchema, span_shift};
use crate::validate::{MAX_NAME_LEN, first_duplicate};
use tidemark_bloom::AtomicFile;

#[derive(Debug)]
struct SeriesBuf {
    tsid: Tsid,
    dims: Vec<(String, Dim)>,
}

#[derive(Debug, Clone, Copy)]
struct RowBuf {
    series: u32,
    ts: i64,
    start: u32,
    len: u32,
    extra_start: u32,
    extra_len: u32,
}

type FastHash = FoldBuildHasher;

/// Collects points in any order and writes them as one segment.
///
/// Memory use is bounded by the batch: every point is held until
/// [`finish`](Self::finish), [`to_vec`](Self::to_vec) or [`write_file`](Self::write_file),
/// with dimensions stored once per series, then sorted and streamed out block by block
/// (see [`write_batch`]). Rows already in (tsid, timestamp) order can go straight to a
/// [`SegmentStreamWriter`] instead, in memory independent of the row count.
///
/// ```
/// use tidemark_segment::{Point, Segment, SegmentOptions, SegmentWriter};
/// use tidemark_tsid::Tsid;
///
/// let tsid = Tsid::from_bytes([7; 20]);
/// let mut writer = SegmentWriter::new(SegmentOptions::new().with_bloom(0.01))?;
/// writer.push(Point::new(tsid, 2_000).dim("host", "a").gauge("cpu", 0.5))?;
/// writer.push(Point::new(tsid, 1_000).dim("host", "a").gauge("cpu", 0.25))?;
/// let (bytes, meta) = writer.to_vec()?;
/// assert_eq!(meta.row_count, 2);
/// let segment = Segment::from_vec(bytes)?;
/// assert_eq!(segment.find(&tsid, 2_000)?, Some(1));
/// # Ok::<(), tidemark_segment::Error>(())
/// ```
#[derive(Debug)]
pub struct SegmentWriter {
    options: SegmentOptions,
    series_index: HashMap<Tsid, u32, FastHash>,
    series: Vec<SeriesBuf>,
    column_index: HashMap<String, u32, FastHash>,
    columns: Vec<(String, MetricKind)>,
    rows: Vec<RowBuf>,
    values: Vec<(u32, MetricValue)>,
    extra_index: HashMap<String, u32, FastHash>,
    extra_columns: Vec<(String, ExtraKind)>,
    extra_values: Vec<(u32, Extra)>,
    /// Row ids of an event segment, one per row (empty otherwise).
    ids: Vec<SyntheticId>,
    /// A bloom filter given by the caller, written instead of one built from the rows.
    bloom: Option<(SegmentBloom, u64)>,
}

impl SegmentWriter {
    /// A writer with the given options.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for block rows outside 1..=65536, a zstd level outside
    /// 1..=22 or a bloom false-positive rate outside (0, 1).
    pub fn new(options: SegmentOptions) -> Result<SegmentWriter> {
        options.check()?;
        Ok(SegmentWriter {
            options,
            series_index: HashMap::default(),
            series: Vec::new(),
            column_index: HashMap::default(),
            columns: Vec::new(),
            rows: Vec::new(),
            values: Vec::new(),
            extra_index: HashMap::default(),
            extra_columns: Vec::new(),
            extra_values: Vec::new(),
            ids: Vec::new(),
            bloom: None,
        })
    }

    /// Points added so far.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no point was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Adds a point. Points may come in any order; dimensions of a tsid seen before must
    /// equal the first ones (in any order).
    ///
    /// # Errors
    /// [`Error::DuplicateDimension`], [`Error::DuplicateMetric`],
    /// [`Error::InconsistentDimensions`], [`Error::MetricKindConflict`] and
    /// [`Error::TooLarge`]. A duplicate (tsid, timestamp) is reported when writing.
    pub fn push(&mut self, point: Point) -> Result<()> {
        self.push_with_extras(point, Vec::new())
    }

    /// Adds a point of an event segment with its id: the id orders rows of equal
    /// (tsid, timestamp) and goes into the bloom filter and id index. In a time-series
    /// segment the id is ignored (the (tsid, timestamp) synthetic id is the row's id).
    ///
    /// # Errors
    /// As [`push`](Self::push); in an event segment two rows with the same id are
    /// [`Error::DuplicatePoint`] when writing.
    pub fn push_with_id(&mut self, point: Point, id: SyntheticId) -> Result<()> {
        self.push_row(point, Vec::new(), Some(id), false)
    }

    /// As [`push_with_id`](Self::push_with_id) (or [`push`](Self::push) with
    /// `id: None`), but for a tsid already added the point's dimensions are not compared
    /// with the series': for callers that keep one dimension set per tsid themselves
    /// (the dedup engine checks each point against its buffered series). Dimensions
    /// that differ are then silently replaced by the series' first ones.
    ///
    /// # Errors
    /// As [`push`](Self::push), without [`Error::InconsistentDimensions`].
    pub fn push_trusted(&mut self, point: Point, id: Option<SyntheticId>) -> Result<()> {
        self.push_row(point, Vec::new(), id, true)
    }

    /// Adds a point with extra keyword/boolean fields (neither dimensions nor metrics),
    /// stored in their own columns and read back with [`Segment::row_extras`].
    ///
    /// [`Segment::row_extras`]: crate::Segment::row_extras
    ///
    /// # Errors
    /// As [`push`](Self::push); [`Error::MetricKindConflict`] when a name is used both
    /// as a metric and as an extra, or with two kinds; [`Error::DuplicateMetric`] for a
    /// name given twice.
    pub fn push_with_extras(&mut self, point: Point, extras: Vec<(String, Extra)>) -> Result<()> {
        self.push_row(point, extras, None, false)
    }

    fn push_row(
        &mut self,
        point: Point,
        extras: Vec<(String, Extra)>,
        id: Option<SyntheticId>,
        trusted: bool,
    ) -> Result<()> {
        let default_id = SyntheticId::new(point.tsid, point.ts_millis);
        let marks = (
            self.series.len(),
            self.columns.len(),
            self.extra_columns.len(),
            self.values.len(),
            self.extra_values.len(),
        );
        let result = self.push_inner(point, extras, trusted);
        if result.is_ok() && self.options.events() {
            self.ids.push(id.unwrap_or(default_id));
        }
        if result.is_err() {
            // Leave no trace of a refused point: no row-less series, no empty column.
            let (series, columns, extras, values, extra_values) = marks;
            for b in self.series.drain(series..) {
                self.series_index.remove(&b.tsid);
            }
            for (name, _) in self.columns.drain(columns..) {
                self.column_index.remove(&name);
            }
            for (name, _) in self.extra_columns.drain(extras..) {
                self.extra_index.remove(&name);
            }
            self.values.truncate(values);
            self.extra_values.truncate(extra_values);
        }
        result
    }

    fn push_inner(
        &mut self,
        point: Point,
        extras: Vec<(String, Extra)>,
        trusted: bool,
    ) -> Result<()> {
        if self.rows.len() as u64 >= MAX_ROWS {
            return Err(Error::TooLarge {
                what: "rows",
                found: self.rows.len() as u64 + 1,
                max: MAX_ROWS,
            });
        }
        let Point {
            tsid,
            mut dims,
            ts_millis,
            metrics,
            extras: mut own_extras,
        } = point;
        own_extras.extend(extras);
        let extras = own_extras;
        let series = match self.series_index.get(&tsid) {
            Some(&s) => {
                let known = self.series.get(s as usize).map(|b| &b.dims);
                // Stored dimensions are sorted: equal slices are the common case.
                let same = trusted
                    || known.is_some_and(|k| {
                        k.as_slice() == dims.as_slice()
                            || (k.len() == dims.len()
                                && dims.iter().all(|d| k.binary_search(d).is_ok()))
                    });
                if !same {
                    return Err(Error::InconsistentDimensions {
                        tsid: tsid.to_string(),
                    });
                }
                s
            }
            None => {
                dims.sort();
                if let Some(name) = first_duplicate(&dims) {
                    return Err(Error::DuplicateDimension { name: name.into() });
                }
                let s = u32::try_from(self.series.len()).map_err(|_| Error::TooLarge {
                    what: "series",
                    found: self.series.len() as u64,
                    max: u64::from(u32::MAX),
                })?;
                self.series.push(SeriesBuf { tsid, dims });
                self.series_index.insert(tsid, s);
                s
            }
        };
        let start = self.values.len();
        for (name, value) in metrics {
            if let Some(&e) = self.extra_index.get(&name) {
                self.values.truncate(start);
                return Err(Error::MetricKindConflict {
                    expected: self
                        .extra_columns
                        .get(e as usize)
                        .map_or("?", |(_, k)| k.name()),
                    found: value.kind().name(),
                    name,
                });
            }
            let column = match self.column_index.get(&name) {
                Some(&c) => {
                    let kind = self.columns.get(c as usize).map(|(_, k)| *k);
                    if kind != Some(value.kind()) {
                        self.values.truncate(start);
                        return Err(Error::MetricKindConflict {
                            name,
                            expected: kind.map_or("?", MetricKind::name),
                            found: value.kind().name(),
                        });
                    }
                    c
                }
                None => {
                    // Metric and extra columns share one limit (as the engine counts).
                    let all = self.columns.len() + self.extra_columns.len();
                    if all >= MAX_COLUMNS as usize {
                        self.values.truncate(start);
                        return Err(Error::TooLarge {
                            what: "columns",
                            found: all as u64 + 1,
                            max: u64::from(MAX_COLUMNS),
                        });
                    }
                    let c = self.columns.len() as u32;
                    self.columns.push((name.clone(), value.kind()));
                    self.column_index.insert(name, c);
                    c
                }
            };
            self.values.push((column, value));
        }
        let added = self.values.get_mut(start..).unwrap_or(&mut []);
        added.sort_by_key(|(c, _)| *c);
        if let Some(w) = added.windows(2).find(|w| w[0].0 == w[1].0) {
            let name = self
                .columns
                .get(w[0].0 as usize)
                .map(|(n, _)| n.clone())
                .unwrap_or_default();
            self.values.truncate(start);
            return Err(Error::DuplicateMetric { name });
        }
        let len = self.values.len() - start;
        let extra_start = self.extra_values.len();
        if let Err(e) = self.push_extras(extras) {
            self.values.truncate(start);
            self.extra_values.truncate(extra_start);
            return Err(e);
        }
        let extra_len = self.extra_values.len() - extra_start;
        self.rows.push(RowBuf {
            series,
            ts: ts_millis,
            start: u32::try_from(start).map_err(|_| Error::TooLarge {
                what: "metric values",
                found: start as u64,
                max: u64::from(u32::MAX),
            })?,
            len: len as u32,
            extra_start: u32::try_from(extra_start).map_err(|_| Error::TooLarge {
                what: "extra values",
                found: extra_start as u64,
                max: u64::from(u32::MAX),
            })?,
            extra_len: extra_len as u32,
        });
        Ok(())
    }

    fn push_extras(&mut self, extras: Vec<(String, Extra)>) -> Result<()> {
        let start = self.extra_values.len();
        for (name, value) in extras {
            if let Extra::Keyword(k) = &value {
                if k.len() > MAX_NAME_LEN {
                    return Err(Error::TooLarge {
                        what: "extra keyword bytes",
                        found: k.len() as u64,
                        max: MAX_NAME_LEN as u64,
                    });
                }
            }
            if let Some(&c) = self.column_index.get(&name) {
                return Err(Error::MetricKindConflict {
                    expected: self.columns.get(c as usize).map_or("?", |(_, k)| k.name()),
                    found: value.kind().name(),
                    name,
                });
            }
            let column = match self.extra_index.get(&name) {
                Some(&c) => {
                    let kind = self.extra_columns.get(c as usize).map(|(_, k)| *k);
                    if kind != Some(value.kind()) {
                        return Err(Error::MetricKindConflict {
                            name,
                            expected: kind.map_or("?", ExtraKind::name),
                            found: value.kind().name(),
                        });
                    }
                    c
                }
                None => {
                    if self.columns.len() + self.extra_columns.len() >= MAX_COLUMNS as usize {
                        return Err(Error::TooLarge {
                            what: "columns",
                            found: (self.columns.len() + self.extra_columns.len()) as u64 + 1,
                            max: u64::from(MAX_COLUMNS),
                        });
                    }
                    let c = self.extra_columns.len() as u32;
                    self.extra_columns.push((name.clone(), value.kind()));
                    self.extra_index.insert(name, c);
                    c
                }
            };
            self.extra_values.push((column, value));
        }
        let added = self.extra_values.get_mut(start..).unwrap_or(&mut []);
        added.sort_by_key(|(c, _)| *c);
        if let Some(w) = added.windows(2).find(|w| w[0].0 == w[1].0) {
            let name = self
                .extra_columns
                .get(w[0].0 as usize)
                .map(|(n, _)| n.clone())
                .unwrap_or_default();
            return Err(Error::DuplicateMetric { name });
        }
        Ok(())
    }

    /// Writes `filter` as the bloom section (when the options ask for one) instead of
    /// building a filter from the rows, and records `capacity` as the items it was sized
    /// for. The caller guarantees that it holds every row's id: e.g. the OR of the filters
    /// of the segments being merged, which may also hold ids of rows since deleted (more
    /// false positives, never a false negative).
    pub fn set_bloom_filter(&mut self, filter: SegmentBloom, capacity: u64) {
        self.bloom = Some((filter, capacity));
    }

    /// Adds every point of an iterator.
    ///
    /// # Errors
    /// As [`push`](Self::push).
    pub fn extend<I: IntoIterator<Item = Point>>(&mut self, points: I) -> Result<()> {
        for p in points {
            self.push(p)?;
        }
        Ok(())
    }

    /// Encodes the segment and writes it to `w`, returning `w`.
    ///
    /// # Errors
    /// [`Error::DuplicatePoint`] when two points share tsid and timestamp; I/O errors.
    pub fn finish<W: Write>(self, w: W) -> Result<(W, SegmentMeta)> {
        encode(self, w)
    }

    /// Encodes the segment into memory.
    ///
    /// # Errors
    /// [`Error::DuplicatePoint`] when two points share tsid and timestamp.
    pub fn to_vec(self) -> Result<(Vec<u8>, SegmentMeta)> {
        encode(self, Vec::new())
    }

    /// Writes the segment to `path` atomically (see [`AtomicFile`]): a temporary file in
    /// the same directory, fsync, rename over `path`, fsync of the directory.
    ///
    /// # Errors
    /// As [`to_vec`](Self::to_vec), and I/O errors naming the file.
    pub fn write_file(self, path: impl AsRef<Path>) -> Result<SegmentMeta> {
        let path = path.as_ref();
        let in_file = |e: Error| e.in_file(path);
        let file = AtomicFile::create(path).map_err(|e| in_file(e.into()))?;
        let (file, meta) = encode(self, file).map_err(in_file)?;
        file.commit().map_err(|e| in_file(e.into()))?;
        Ok(meta)
    }
}

/// Rows to be written as one segment, in any order: what [`write_batch`] sorts and
/// streams. Rows are numbered `0..rows()`, series `0..series_count()`, metric and extra
/// columns by their positions in [`columns`](Self::columns) and
/// [`extra_columns`](Self::extra_columns) (a column no written row has a value in is left
/// out of the segment). Implemented by [`SegmentWriter`] and by the dedup engine's
/// columnar buffer.
pub trait RowBatch {
    /// Metric columns: name and kind.
    fn columns(&self) -> &[(String, MetricKind)];
    /// Extra columns: name and kind.
    fn extra_columns(&self) -> &[(String, ExtraKind)];
    /// Number of series.
    fn series_count(&self) -> usize;
    /// Series `s`: its tsid and dimensions, sorted by name.
    fn series(&self, s: u32) -> Option<(Tsid, &[(String, Dim)])>;
    /// Series `s`'s dimensions as a shared list, for the segment's series table: a copy
    /// of [`series`](Self::series)' by default; a batch that holds them shared (interned)
    /// hands out its own.
    fn shared_dims(&self, s: u32) -> Option<SharedDims> {
        self.series(s).map(|(_, dims)| SharedDims::from(dims))
    }
    /// Number of rows (including any that [`include`](Self::include) leaves out).
    fn rows(&self) -> usize;
    /// Whether row `row` is written.
    fn include(&self, row: u32) -> bool;
    /// Series of row `row`.
    fn row_series(&self, row: u32) -> u32;
    /// Timestamp of row `row`.
    fn row_ts(&self, row: u32) -> i64;
    /// Metric values of row `row`: `(column, value)`, ascending by column, each column at
    /// most once (other orders make [`write_batch`] fail).
    fn row_metrics(&self, row: u32) -> &[(u32, MetricValue)];
    /// Extra values of row `row`: `(extra column, value)`, each column at most once.
    fn row_extras(&self, row: u32) -> &[(u32, Extra)];
    /// An event segment's row id (ignored in a time-series segment).
    fn row_id(&self, row: u32) -> Option<&SyntheticId>;
}

impl RowBatch for SegmentWriter {
    fn columns(&self) -> &[(String, MetricKind)] {
        &self.columns
    }
    fn extra_columns(&self) -> &[(String, ExtraKind)] {
        &self.extra_columns
    }
    fn series_count(&self) -> usize {
        self.series.len()
    }
    fn series(&self, s: u32) -> Option<(Tsid, &[(String, Dim)])> {
        self.series
            .get(s as usize)
            .map(|b| (b.tsid, b.dims.as_slice()))
    }
    fn rows(&self) -> usize {
        self.rows.len()
    }
    fn include(&self, _row: u32) -> bool {
        true
    }
    // `write_batch` asks only for rows below `rows()`, and each row's ranges were taken
    // from the value buffers as they were pushed: plain indexing, no silent default.
    fn row_series(&self, row: u32) -> u32 {
        debug_assert!((row as usize) < self.rows.len());
        self.rows[row as usize].series
    }
    fn row_ts(&self, row: u32) -> i64 {
        debug_assert!((row as usize) < self.rows.len());
        self.rows[row as usize].ts
    }
    fn row_metrics(&self, row: u32) -> &[(u32, MetricValue)] {
        let r = &self.rows[row as usize];
        debug_assert!(((r.start + r.len) as usize) <= self.values.len());
        &self.values[r.start as usize..(r.start + r.len) as usize]
    }
    fn row_extras(&self, row: u32) -> &[(u32, Extra)] {
        let r = &self.rows[row as usize];
        debug_assert!(((r.extra_start + r.extra_len) as usize) <= self.extra_values.len());
        &self.extra_values[r.extra_start as usize..(r.extra_start + r.extra_len) as usize]
    }
    fn row_id(&self, row: u32) -> Option<&SyntheticId> {
        self.ids.get(row as usize)
    }
}

fn encode<W: Write>(mut w: SegmentWriter, out: W) -> Result<(W, SegmentMeta)> {
    let options = w.options.clone();
    let bloom = w.bloom.take();
    write_batch(&w, options, bloom, out)
}

/// `rows` in (series rank, timestamp) order: a counting sort by rank (stable, so each
/// series keeps its arrival order), then a sort of each series' run only where its rows
/// arrived out of order — linear time for in-order data, where a comparison sort of the
/// whole buffer was a tenth of a refresh.
fn group_by_series(
    rows: &[u32],
    series: usize,
    rank: impl Fn(u32) -> u32,
    ts: impl Fn(u32) -> i64,
) -> Vec<u32> {
    let mut starts = vec![0usize; series + 1];
    for &i in rows {
        if let Some(n) = starts.get_mut(rank(i) as usize + 1) {
            *n += 1;
        }
    }
    for k in 1..starts.len() {
        starts[k] += starts[k - 1];
    }
    let mut next = starts.clone();
    let mut out = vec![0u32; rows.len()];
    for &i in rows {
        if let Some(at) = next.get_mut(rank(i) as usize) {
            if let Some(slot) = out.get_mut(*at) {
                *slot = i;
            }
            *at += 1;
        }
    }
    for w in starts.windows(2) {
        if let Some(run) = out.get_mut(w[0]..w[1]) {
            if !run.windows(2).all(|p| ts(p[0]) < ts(p[1])) {
                run.sort_unstable_by_key(|&i| ts(i));
            }
        }
    }
    out
}

/// Sorts the rows of `batch` and streams them through a [`SegmentStreamWriter`] to
/// `out`: columns in name order (those with no value left out), series in tsid order,
/// rows in (tsid, timestamp[, id]) order, each series' column presence counted exactly
/// before its rows go out. `bloom` is a filter to write instead of one built from the
/// rows, with the capacity it was sized for. Memory: the sort order (4 bytes a row) and
/// the writer's open blocks, beside the batch itself.
///
/// # Errors
/// [`Error::DuplicatePoint`] when two rows share tsid and timestamp (and id, in an event
/// segment); [`Error::InvalidOption`] for bad options; I/O errors.
pub fn write_batch<B: RowBatch + ?Sized, W: Write>(
    batch: &B,
    options: SegmentOptions,
    bloom: Option<(SegmentBloom, u64)>,
    out: W,
) -> Result<(W, SegmentMeta)> {
    stream_batch(batch, options, bloom, out)?.finish()
}

/// As [`write_batch`], also returning the series table as a reader would decode it, so
/// that the caller can open the file with [`Segment::open_written`](crate::Segment::open_written)
/// without decoding it again (the engine's refresh does).
///
/// # Errors
/// As [`write_batch`].
pub fn write_batch_with_series<B: RowBatch + ?Sized, W: Write>(
    batch: &B,
    options: SegmentOptions,
    bloom: Option<(SegmentBloom, u64)>,
    out: W,
) -> Result<(W, SegmentMeta, WrittenSeries)> {
    stream_batch(batch, options, bloom, out)?.finish_with_series()
}

/// The rows of `batch` streamed to a new writer over `out`, which is left to finish.
fn stream_batch<B: RowBatch + ?Sized, W: Write>(
    batch: &B,
    options: SegmentOptions,
    bloom: Option<(SegmentBloom, u64)>,
    out: W,
) -> Result<SegmentStreamWriter<W>> {
    let events = options.events();
    let rows: Vec<u32> = (0..batch.rows() as u32)
        .filter(|&r| batch.include(r))
        .collect();
    let n = rows.len() as u64;
    let present = count_present(batch, &rows);
    let (plan, schema) = plan_columns(batch, &present, n, options.block_rows());
    let order = order_rows(batch, rows, events);
    let mut writer = SegmentStreamWriter::new(out, options, schema, n)?;
    if let Some((filter, capacity)) = bloom {
        writer.set_bloom_filter(filter, capacity);
    }
    write_rows(batch, &order, &plan, events, &mut writer)?;
    Ok(writer)
}

/// Values per source column (metrics, then extras) in `rows`: for the span of each
/// column's blocks and to leave out columns no row uses.
fn count_present<B: RowBatch + ?Sized>(batch: &B, rows: &[u32]) -> Vec<u64> {
    let ncols = batch.columns().len();
    let mut present = vec![0u64; ncols + batch.extra_columns().len()];
    for &r in rows {
        for &(c, _) in batch.row_metrics(r) {
            if let Some(p) = present.get_mut(c as usize) {
                *p += 1;
            }
        }
        for (e, _) in batch.row_extras(r) {
            if let Some(p) = present.get_mut(ncols + *e as usize) {
                *p += 1;
            }
        }
    }
    present
}

/// Where each source column goes in the output: its rank among the used columns in
/// name order, `None` when unused.
struct ColumnPlan {
    metric_rank: Vec<Option<u32>>,
    extra_rank: Vec<Option<u32>>,
    /// Used metric columns: extra column `r` is column number `metrics + r`.
    metrics: u32,
    /// Source metric order is name order: the ranks keep a row's values sorted.
    metrics_monotonic: bool,
    /// Every source metric column is used, in name order: output numbering is the
    /// source's, so rows' values go out as they are.
    metrics_identity: bool,
}

/// A segment's columns planned from how many values each holds: see [`plan_schema`].
#[derive(Debug, Clone)]
pub struct PlannedSchema {
    /// The used columns, metrics and extras each in name order, with their span shifts.
    pub schema: StreamSchema,
    /// Each source metric column's output column (`None`: unused).
    pub metric_rank: Vec<Option<u32>>,
    /// Each source extra column's output extra column (`None`: unused).
    pub extra_rank: Vec<Option<u32>>,
}

/// The schema the writers give a batch of `rows` rows whose source columns are
/// `columns` and `extras` (name and kind, in the caller's order) holding `present[i]`
/// values each (metrics, then extras): the used ones in name order, each with the span
/// shift its share of the rows calls for ([`span_shift`](crate::span_shift)), and where
/// each source column goes.
pub fn plan_schema(
    columns: &[(String, MetricKind)],
    extras: &[(String, ExtraKind)],
    present: &[u64],
    rows: u64,
    block_rows: u32,
) -> PlannedSchema {
    let used = |i: usize| present.get(i).is_some_and(|&p| p > 0);
    let (metric_rank, sorted_columns) = rank_by_name(columns, used);
    let (extra_rank, sorted_extras) = rank_by_name(extras, |e| used(columns.len() + e));
    let shift = |i: usize| span_shift(rows, present.get(i).copied().unwrap_or(0), block_rows);
    let schema = StreamSchema {
        columns: sorted_columns
            .iter()
            .map(|&(src, (name, kind))| ColumnInfo {
                name: name.clone(),
                kind: *kind,
                span_shift: shift(src),
            })
            .collect(),
        extras: sorted_extras
            .iter()
            .map(|&(src, (name, kind))| ExtraInfo {
                name: name.clone(),
                kind: *kind,
                span_shift: shift(columns.len() + src),
            })
            .collect(),
    };
    PlannedSchema {
        schema,
        metric_rank,
        extra_rank,
    }
}

/// The output columns of `batch`: the used ones in name order, with the span shift
/// their share of the `n` rows calls for.
fn plan_columns<B: RowBatch + ?Sized>(
    batch: &B,
    present: &[u64],
    n: u64,
    block_rows: u32,
) -> (ColumnPlan, StreamSchema) {
    // `present` has one count per source column, metrics then extras.
    debug_assert_eq!(
        present.len(),
        batch.columns().len() + batch.extra_columns().len()
    );
    let PlannedSchema {
        schema,
        metric_rank,
        extra_rank,
    } = plan_schema(
        batch.columns(),
        batch.extra_columns(),
        present,
        n,
        block_rows,
    );
    let metrics_monotonic = metric_rank
        .iter()
        .flatten()
        .collect::<Vec<_>>()
        .windows(2)
        .all(|w| w[0] < w[1]);
    let metrics_identity = metric_rank
        .iter()
        .enumerate()
        .all(|(c, r)| *r == Some(c as u32));
    let plan = ColumnPlan {
        metric_rank,
        extra_rank,
        metrics: schema.columns.len() as u32,
        metrics_monotonic,
        metrics_identity,
    };
    (plan, schema)
}

impl ColumnPlan {
    fn metric(&self, c: u32) -> Option<u32> {
        self.metric_rank.get(c as usize).copied().flatten()
    }

    fn extra(&self, e: u32) -> Option<u32> {
        self.extra_rank.get(e as usize).copied().flatten()
    }
}

/// `rows` in output order: (series in tsid order, timestamp), and the row id after
/// them in an event segment.
fn order_rows<B: RowBatch + ?Sized>(batch: &B, mut rows: Vec<u32>, events: bool) -> Vec<u32> {
    let series_count = batch.series_count();
    // Sorted once by a key read once per series.
    let mut series_order: Vec<(Option<(u128, u32)>, u32)> = (0..series_count as u32)
        .map(|s| (batch.series(s).map(|(t, _)| t.sort_key()), s))
        .collect();
    series_order.sort_unstable();
    let mut series_rank = vec![0u32; series_count];
    for (rank, &(_, s)) in series_order.iter().enumerate() {
        series_rank[s as usize] = rank as u32;
    }
    // A row's series is one of the batch's series.
    let rank_of = |s: u32| {
        debug_assert!(
            (s as usize) < series_count,
            "row of series {s} of {series_count}"
        );
        series_rank[s as usize]
    };
    if events {
        rows.sort_unstable_by_key(|&i| {
            (
                rank_of(batch.row_series(i)),
                batch.row_ts(i),
                batch.row_id(i).map(SyntheticId::to_bytes),
            )
        });
        rows
    } else {
        group_by_series(
            &rows,
            series_count,
            |i| rank_of(batch.row_series(i)),
            |i| batch.row_ts(i),
        )
    }
}

/// Streams the rows in `order` to `writer`, one series run at a time: the run's column
/// presence counted exactly first, then its rows with their values renumbered to the
/// output columns.
fn write_rows<B: RowBatch + ?Sized, W: Write>(
    batch: &B,
    order: &[u32],
    plan: &ColumnPlan,
    events: bool,
    writer: &mut SegmentStreamWriter<W>,
) -> Result<()> {
    let mut metrics: Vec<(u32, MetricValue)> = Vec::new();
    let mut extras: Vec<(u32, &Extra)> = Vec::new();
    let mut presence = SeriesPresence::new(plan.metric_rank.len() + plan.extra_rank.len());
    let mut dense_run = DenseRun::default();
    let mut at = 0usize;
    while let Some(&first) = order.get(at) {
        let s = batch.row_series(first);
        let end = at
            + order
                .get(at..)
                .unwrap_or(&[])
                .iter()
                .take_while(|&&i| batch.row_series(i) == s)
                .count();
        let run = order.get(at..end).unwrap_or(&[]);
        let Some((tsid, dims)) = batch.series(s) else {
            // Every row's series is in the batch; a miss is a bug in the batch, never a
            // file missing rows.
            debug_assert!(false, "row of series {s} missing from the batch");
            return Err(Error::InvalidOption {
                name: "batch",
                detail: format!("row of series {s} missing from the batch"),
            });
        };
        let dims = batch
            .shared_dims(s)
            .unwrap_or_else(|| SharedDims::from(dims));
        let declared = presence.of_run(batch, run, plan);
        let dense = !events
            && plan.metrics_monotonic
            && declared
                .iter()
                .all(|&(c, p)| p == Presence::Full && c < plan.metrics);
        writer.begin_series(tsid, dims, declared)?;
        if dense && dense_run.gather(batch, run, plan) {
            writer.push_rows(&dense_run.ts, dense_run.columns())?;
            at = end;
            continue;
        }
        for &i in run {
            let row_metrics = if plan.metrics_identity {
                batch.row_metrics(i)
            } else {
                metrics.clear();
                metrics.extend(
                    batch
                        .row_metrics(i)
                        .iter()
                        .filter_map(|&(c, v)| plan.metric(c).map(|r| (r, v))),
                );
                if !plan.metrics_monotonic {
                    metrics.sort_unstable_by_key(|(c, _)| *c);
                }
                &metrics[..]
            };
            extras.clear();
            let row_extras = batch.row_extras(i);
            if !row_extras.is_empty() {
                extras.extend(
                    row_extras
                        .iter()
                        .filter_map(|(e, v)| plan.extra(*e).map(|r| (r, v))),
                );
                extras.sort_unstable_by_key(|(c, _)| *c);
            }
            let id = if events { batch.row_id(i) } else { None };
            writer.push_row(batch.row_ts(i), row_metrics, &extras, id)?;
        }
        at = end;
    }
    Ok(())
}

/// A series run whose rows all have values in the same metric columns and no extras,
/// gathered into columns for [`SegmentStreamWriter::push_rows`]: one pass over the
/// run's rows, each read once for all its columns, instead of a writer call per row.
/// Buffers are reused across runs.
#[derive(Default)]
struct DenseRun {
    ts: Vec<i64>,
    /// The first `width` hold the run: each gathered column's output column and values.
    columns: Vec<(u32, Vec<MetricValue>)>,
    width: usize,
}

impl DenseRun {
    /// Gathers `run`; false (nothing to push) when a row's columns differ from the
    /// first row's or it has extras, which the caller's presence check rules out.
    fn gather<B: RowBatch + ?Sized>(&mut self, batch: &B, run: &[u32], plan: &ColumnPlan) -> bool {
        let Some(&first) = run.first() else {
            return false;
        };
        let source = batch.row_metrics(first);
        let k = source.len();
        if self.columns.len() < k {
            self.columns.resize_with(k, || (0, Vec::new()));
        }
        self.width = 0;
        for (&(c, _), (out, values)) in source.iter().zip(self.columns.iter_mut()) {
            let Some(r) = plan.metric(c) else {
                return false;
            };
            *out = r;
            values.clear();
        }
        self.ts.clear();
        for &i in run {
            let row = batch.row_metrics(i);
            if row.len() != k || !batch.row_extras(i).is_empty() {
                return false;
            }
            for ((&(c, v), &(c0, _)), (_, out)) in
                row.iter().zip(source).zip(self.columns.iter_mut())
            {
                if c != c0 {
                    return false;
                }
                out.push(v);
            }
            self.ts.push(batch.row_ts(i));
        }
        self.width = k;
        true
    }

    /// The gathered columns as [`SegmentStreamWriter::push_rows`] takes them.
    fn columns(&self) -> &[(u32, Vec<MetricValue>)] {
        self.columns.get(..self.width).unwrap_or(&[])
    }
}

/// Counts a series run's values per output column, reusing its buffers across runs.
struct SeriesPresence {
    counts: Vec<u64>,
    touched: Vec<u32>,
    presence: Vec<(u32, Presence)>,
}

impl SeriesPresence {
    fn new(columns: usize) -> SeriesPresence {
        SeriesPresence {
            counts: vec![0; columns],
            touched: Vec::new(),
            presence: Vec::new(),
        }
    }

    /// The presence of each output column in `run` (output column numbering, sorted).
    fn of_run<B: RowBatch + ?Sized>(
        &mut self,
        batch: &B,
        run: &[u32],
        plan: &ColumnPlan,
    ) -> &[(u32, Presence)] {
        for &i in run {
            let cols = batch
                .row_metrics(i)
                .iter()
                .filter_map(|&(c, _)| plan.metric(c))
                .chain(
                    batch
                        .row_extras(i)
                        .iter()
                        .filter_map(|(e, _)| plan.extra(*e).map(|r| plan.metrics + r)),
                );
            for c in cols {
                if let Some(k) = self.counts.get_mut(c as usize) {
                    if *k == 0 {
                        self.touched.push(c);
                    }
                    *k += 1;
                }
            }
        }
        self.touched.sort_unstable();
        self.presence.clear();
        for &c in &self.touched {
            if let Some(k) = self.counts.get_mut(c as usize) {
                let p = if *k == run.len() as u64 {
                    Presence::Full
                } else {
                    Presence::Partial
                };
                self.presence.push((c, p));
                *k = 0;
            }
        }
        self.touched.clear();
        &self.presence
    }
}

/// Used columns sorted by name, each with its source position.
type SortedColumns<'a, K> = Vec<(usize, &'a (String, K))>;

/// Each used column's rank in name order (`None` for unused ones), indexed by source
/// position, and the used columns sorted by name with their source positions.
fn rank_by_name<K>(
    columns: &[(String, K)],
    used: impl Fn(usize) -> bool,
) -> (Vec<Option<u32>>, SortedColumns<'_, K>) {
    let mut sorted: Vec<(usize, &(String, K))> = columns
        .iter()
        .enumerate()
        .filter(|(i, _)| used(*i))
        .collect();
    sorted.sort_by(|a, b| a.1.0.cmp(&b.1.0));
    let mut rank = vec![None; columns.len()];
    for (r, &(src, _)) in sorted.iter().enumerate() {
        if let Some(slot) = rank.get_mut(src) {
            *slot = Some(r as u32);
        }
    }
    (rank, sorted)
}
