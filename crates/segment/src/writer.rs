//! [`SegmentWriter`]: collects points in any order, then writes them as one segment
//! through [`write_batch`].

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use tidemark_tsid::{SyntheticId, Tsid};

use crate::batch::write_batch;
use crate::bloom::SegmentBloom;
use crate::error::{Error, Result};
use crate::format::{MAX_COLUMNS, MAX_ROWS};
use crate::hash::FoldBuildHasher;
use crate::options::SegmentOptions;
use crate::plan::RowBatch;
use crate::point::{Dim, Extra, ExtraKind, MetricKind, MetricValue, Point};
use crate::stream::SegmentMeta;
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
/// [`SegmentStreamWriter`]: crate::SegmentStreamWriter
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
