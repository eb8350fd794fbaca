//! [`SegmentWriter`]: collects points in any order, sorts them by (tsid, timestamp) and
//! encodes a segment.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use roaring::RoaringBitmap;
use tidemark_bloom::BlockedBloomFilter;
use tidemark_tsid::{SyntheticId, TSID_LEN, Tsid};

use crate::codec::{
    BlockCompressor, counter_candidates, encode_extras, encode_presence, encode_timestamps,
    encode_timestamps_grid, gauge_candidates,
};
use crate::error::{Error, Result};
use crate::format::{
    DEFAULT_BLOCK_ROWS, FLAG_BLOOM, FLAG_EVENTS, FLAG_ID_INDEX, FOOTER_LEN, FORMAT_VERSION, Footer,
    HEADER_LEN, MAGIC, MAX_BLOCK_ROWS, MAX_COLUMNS, MAX_ROWS, SECTION_COUNT, SectionRef,
};
use crate::le::{put_u16, put_u32, put_u64, put_varint, put_zigzag};
use crate::point::{Dim, Extra, ExtraKind, MetricKind, MetricValue, Point};

/// Longest extra keyword value, in bytes.
pub const MAX_EXTRA_KEYWORD_LEN: usize = 65_535;

/// Presence of a metric in all rows of a series.
pub(crate) const STATE_FULL: u8 = 1;
/// Presence of a metric in some rows of a series (a block bitmap tells which).
pub(crate) const STATE_PARTIAL: u8 = 2;

/// Dimension value tags in the series table.
pub(crate) const TAG_KEYWORD: u8 = 1;
pub(crate) const TAG_INT: u8 = 2;
pub(crate) const TAG_UINT: u8 = 3;
pub(crate) const TAG_BOOL: u8 = 4;
pub(crate) const TAG_IP: u8 = 5;

/// Sizing headroom of the bloom filter: it is built for `rows × 5 / 4` items so that its
/// bit set stays under half full, which lets merges OR bit sets of equal shape.
pub const BLOOM_HEADROOM_NUM: u64 = 5;
/// Denominator of [`BLOOM_HEADROOM_NUM`].
pub const BLOOM_HEADROOM_DEN: u64 = 4;

/// How a segment is written.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentOptions {
    block_rows: u32,
    zstd_level: i32,
    bloom_fpr: Option<f64>,
    id_index: bool,
    events: bool,
}

impl Default for SegmentOptions {
    fn default() -> Self {
        SegmentOptions {
            block_rows: DEFAULT_BLOCK_ROWS,
            zstd_level: 3,
            bloom_fpr: None,
            id_index: false,
            events: false,
        }
    }
}

impl SegmentOptions {
    /// Default options: 1024 rows per block, zstd level 3, no id sections.
    pub fn new() -> SegmentOptions {
        SegmentOptions::default()
    }

    /// Rows per block (1..=65536): finding one row decodes one block of this many rows.
    pub fn with_block_rows(mut self, rows: u32) -> SegmentOptions {
        self.block_rows = rows;
        self
    }

    /// zstd level of every block (1..=22).
    pub fn with_zstd_level(mut self, level: i32) -> SegmentOptions {
        self.zstd_level = level;
        self
    }

    /// Adds a bloom filter of the synthetic ids with the given target false-positive rate.
    pub fn with_bloom(mut self, fpr: f64) -> SegmentOptions {
        self.bloom_fpr = Some(fpr);
        self
    }

    /// Adds (or not) the id term index: an FST from synthetic id bytes to row.
    pub fn with_id_index(mut self, on: bool) -> SegmentOptions {
        self.id_index = on;
        self
    }

    /// Makes (or not) an *event segment*: rows of a series may share a timestamp, each
    /// row has its own id (given with [`SegmentWriter::push_with_id`]; a plain push uses
    /// the (tsid, timestamp) synthetic id), rows are ordered by (tsid, timestamp, id) and
    /// the bloom filter and id index hold these ids.
    pub fn with_events(mut self, on: bool) -> SegmentOptions {
        self.events = on;
        self
    }

    /// Whether this writes an event segment (see [`with_events`](Self::with_events)).
    pub fn events(&self) -> bool {
        self.events
    }

    fn check(&self) -> Result<()> {
        if self.block_rows == 0 || self.block_rows > MAX_BLOCK_ROWS {
            return Err(Error::InvalidOption {
                name: "block_rows",
                detail: format!("expected 1..={MAX_BLOCK_ROWS}, found {}", self.block_rows),
            });
        }
        if !(1..=22).contains(&self.zstd_level) {
            return Err(Error::InvalidOption {
                name: "zstd_level",
                detail: format!("expected 1..=22, found {}", self.zstd_level),
            });
        }
        if let Some(fpr) = self.bloom_fpr {
            if !(fpr > 0.0 && fpr < 1.0) {
                return Err(Error::InvalidOption {
                    name: "bloom_fpr",
                    detail: format!("expected a rate in (0, 1), found {fpr}"),
                });
            }
        }
        Ok(())
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

/// A multiply-fold hasher for maps keyed by tsids or synthetic ids (already hash
/// output) and column names (few, not attacker-chosen): SipHash cost ~3% of ingest.
/// Not DoS-resistant: do not key it with untrusted, adversarial input.
#[derive(Debug, Default, Clone, Copy)]
pub struct FoldHasher(u64);

impl std::hash::Hasher for FoldHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in chunks.by_ref() {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
        // Byte by byte: a variable-length copy would call memmove for every string.
        let rest = chunks.remainder();
        let tail = rest
            .iter()
            .rev()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        self.write_u64(tail ^ ((rest.len() as u64) << 59));
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(23) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_i64(&mut self, v: i64) {
        self.write_u64(v as u64);
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// `BuildHasher` of [`FoldHasher`].
pub type FoldBuildHasher = std::hash::BuildHasherDefault<FoldHasher>;

type FastHash = FoldBuildHasher;

/// Collects points in any order and writes them as one segment.
///
/// Memory use is bounded by the batch: every point is held until
/// [`finish`](Self::finish), [`to_vec`](Self::to_vec) or [`write_file`](Self::write_file),
/// with dimensions stored once per series.
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
    bloom: Option<(BlockedBloomFilter, u64)>,
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
        if result.is_ok() && self.options.events {
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
                if let Some(w) = dims.windows(2).find(|w| w[0].0 == w[1].0) {
                    return Err(Error::DuplicateDimension {
                        name: w[0].0.clone(),
                    });
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
                if k.len() > MAX_EXTRA_KEYWORD_LEN {
                    return Err(Error::TooLarge {
                        what: "extra keyword bytes",
                        found: k.len() as u64,
                        max: MAX_EXTRA_KEYWORD_LEN as u64,
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
    pub fn set_bloom_filter(&mut self, filter: BlockedBloomFilter, capacity: u64) {
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
    pub fn finish<W: Write>(self, mut w: W) -> Result<(W, SegmentMeta)> {
        let (bytes, meta) = self.to_vec()?;
        w.write_all(&bytes)?;
        w.flush()?;
        Ok((w, meta))
    }

    /// Encodes the segment into memory.
    ///
    /// # Errors
    /// [`Error::DuplicatePoint`] when two points share tsid and timestamp.
    pub fn to_vec(self) -> Result<(Vec<u8>, SegmentMeta)> {
        encode(self)
    }

    /// Writes the segment to `path` atomically: a temporary file in the same directory,
    /// fsync, rename over `path`, fsync of the directory.
    ///
    /// # Errors
    /// As [`to_vec`](Self::to_vec), and I/O errors naming the file.
    pub fn write_file(self, path: impl AsRef<Path>) -> Result<SegmentMeta> {
        let path = path.as_ref();
        let (bytes, meta) = self.to_vec()?;
        write_atomic(path, &bytes).map_err(|e| Error::from(e).in_file(path))?;
        Ok(meta)
    }
}

/// Writes `bytes` to `path` through a temporary file, fsync and rename, then fsyncs the
/// directory so that the rename itself is durable.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => Path::new(".").to_path_buf(),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        // Directories can be opened and synced on Unix; elsewhere this is best effort.
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

struct Blocks {
    out: Vec<u8>,
    dir: Vec<u8>,
    comp: BlockCompressor,
}

impl Blocks {
    fn push_compressed(&mut self, block: &[u8], raw_len: usize) -> Result<()> {
        let offset = self.out.len() as u64;
        put_u64(&mut self.dir, offset);
        put_u32(&mut self.dir, len_u32(block.len(), "block bytes")?);
        put_u32(&mut self.dir, len_u32(raw_len, "decoded block bytes")?);
        put_u32(&mut self.dir, crc32fast::hash(block));
        self.out.extend_from_slice(block);
        Ok(())
    }

    fn push_empty(&mut self) {
        put_u64(&mut self.dir, self.out.len() as u64);
        put_u32(&mut self.dir, 0);
        put_u32(&mut self.dir, 0);
        put_u32(&mut self.dir, 0);
    }
}

fn len_u32(len: usize, what: &'static str) -> Result<u32> {
    u32::try_from(len).map_err(|_| Error::TooLarge {
        what,
        found: len as u64,
        max: u64::from(u32::MAX),
    })
}

/// Picks the candidate whose compressed block is smallest.
fn push_best(blocks: &mut Blocks, header: &[u8], candidates: Vec<Vec<u8>>) -> Result<()> {
    let mut best: Option<(Vec<u8>, usize)> = None;
    let mut raw = Vec::new();
    for cand in candidates {
        raw.clear();
        raw.extend_from_slice(header);
        raw.extend_from_slice(&cand);
        let block = blocks.comp.compress_block(&raw)?;
        if best.as_ref().is_none_or(|(b, _)| block.len() < b.len()) {
            best = Some((block, raw.len()));
        }
    }
    if let Some((block, raw_len)) = best {
        blocks.push_compressed(&block, raw_len)?;
    }
    Ok(())
}

fn put_str(out: &mut Vec<u8>, s: &str) -> Result<()> {
    let len = u16::try_from(s.len()).map_err(|_| Error::TooLarge {
        what: "name bytes",
        found: s.len() as u64,
        max: u64::from(u16::MAX),
    })?;
    put_u16(out, len);
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn encode(w: SegmentWriter) -> Result<(Vec<u8>, SegmentMeta)> {
    let SegmentWriter {
        options,
        series,
        columns,
        rows,
        values,
        extra_columns,
        extra_values,
        ids: event_ids,
        bloom: given_bloom,
        ..
    } = w;
    let events = options.events;
    let level = options.zstd_level;
    let block_rows = options.block_rows as usize;

    // Columns in name order, series in tsid order, rows in (tsid, ts) order.
    let mut col_order: Vec<u32> = (0..columns.len() as u32).collect();
    col_order.sort_by(|&a, &b| {
        let name = |c: u32| columns.get(c as usize).map(|(n, _)| n.as_str());
        name(a).cmp(&name(b))
    });
    let mut col_rank = vec![0u32; columns.len()];
    for (rank, &c) in col_order.iter().enumerate() {
        if let Some(slot) = col_rank.get_mut(c as usize) {
            *slot = rank as u32;
        }
    }
    let sorted_columns: Vec<(String, MetricKind)> = col_order
        .iter()
        .filter_map(|&c| columns.get(c as usize).cloned())
        .collect();

    let mut series_order: Vec<u32> = (0..series.len() as u32).collect();
    series_order.sort_by_key(|&s| series.get(s as usize).map(|b| b.tsid));
    let mut series_rank = vec![0u32; series.len()];
    for (rank, &s) in series_order.iter().enumerate() {
        if let Some(slot) = series_rank.get_mut(s as usize) {
            *slot = rank as u32;
        }
    }
    let rank_of = |s: u32| series_rank.get(s as usize).copied().unwrap_or(0);

    let mut order: Vec<u32> = (0..rows.len() as u32).collect();
    let event_key = |i: u32| event_ids.get(i as usize).map(SyntheticId::to_bytes);
    if events {
        order.sort_unstable_by_key(|&i| {
            let (s, t) = rows
                .get(i as usize)
                .map_or((0, 0), |r| (rank_of(r.series), r.ts));
            (s, t, event_key(i))
        });
    } else {
        order.sort_unstable_by_key(|&i| {
            rows.get(i as usize)
                .map_or((0, 0), |r| (rank_of(r.series), r.ts))
        });
    }

    // Extra columns in name order too, numbered after the metric columns.
    let mut extra_order: Vec<u32> = (0..extra_columns.len() as u32).collect();
    extra_order.sort_by(|&a, &b| {
        let name = |c: u32| extra_columns.get(c as usize).map(|(n, _)| n.as_str());
        name(a).cmp(&name(b))
    });
    let mut extra_rank = vec![0u32; extra_columns.len()];
    for (rank, &c) in extra_order.iter().enumerate() {
        if let Some(slot) = extra_rank.get_mut(c as usize) {
            *slot = rank as u32;
        }
    }
    let sorted_extras: Vec<(String, ExtraKind)> = extra_order
        .iter()
        .filter_map(|&c| extra_columns.get(c as usize).cloned())
        .collect();
    let mut ext_values: Vec<Vec<(u32, &Extra)>> = vec![Vec::new(); extra_columns.len()];

    let n = rows.len();
    let mut ts = Vec::with_capacity(n);
    let mut row_series = Vec::with_capacity(n);
    // Per metric column, its (row, value) pairs in row order.
    let mut col_values: Vec<Vec<(u32, MetricValue)>> = vec![Vec::new(); columns.len()];
    let mut prev: Option<u32> = None;
    for (row, &i) in order.iter().enumerate() {
        let Some(r) = rows.get(i as usize) else {
            continue;
        };
        let s = rank_of(r.series);
        let same_key = !events || prev.is_some_and(|p| event_key(p) == event_key(i));
        prev = Some(i);
        if let (Some(&pt), Some(&ps)) = (ts.last(), row_series.last()) {
            if ps == s && pt == r.ts && same_key {
                let tsid = series.get(r.series as usize).map(|b| b.tsid.to_string());
                return Err(Error::DuplicatePoint {
                    tsid: tsid.unwrap_or_default(),
                    ts_millis: r.ts,
                });
            }
        }
        ts.push(r.ts);
        row_series.push(s);
        let vals = values
            .get(r.start as usize..(r.start + r.len) as usize)
            .unwrap_or(&[]);
        for &(c, v) in vals {
            let c = col_rank.get(c as usize).copied().unwrap_or(0);
            if let Some(col) = col_values.get_mut(c as usize) {
                col.push((row as u32, v));
            }
        }
        let extras = extra_values
            .get(r.extra_start as usize..(r.extra_start + r.extra_len) as usize)
            .unwrap_or(&[]);
        for (c, v) in extras {
            let c = extra_rank.get(*c as usize).copied().unwrap_or(0);
            if let Some(col) = ext_values.get_mut(c as usize) {
                col.push((row as u32, v));
            }
        }
    }

    // Series table facts.
    let series_count = series.len();
    let mut first_row = vec![0u64; series_count];
    let mut row_count = vec![0u64; series_count];
    let mut min_ts = vec![0i64; series_count];
    let mut max_ts = vec![0i64; series_count];
    for (row, (&s, &t)) in row_series.iter().zip(&ts).enumerate() {
        let s = s as usize;
        if let (Some(fr), Some(rc), Some(mn), Some(mx)) = (
            first_row.get_mut(s),
            row_count.get_mut(s),
            min_ts.get_mut(s),
            max_ts.get_mut(s),
        ) {
            if *rc == 0 {
                *fr = row as u64;
                *mn = t;
            }
            *rc += 1;
            *mx = t;
        }
    }
    // Per series, (column, present count) in column order.
    // Column indexes: metric columns 0..C, then extra columns C..C+E.
    let ncols = col_values.len();
    let column_rows: Vec<Vec<u32>> = col_values
        .iter()
        .map(|c| c.iter().map(|(r, _)| *r).collect())
        .chain(
            ext_values
                .iter()
                .map(|c| c.iter().map(|(r, _)| *r).collect()),
        )
        .collect();
    let mut presence: Vec<Vec<(u32, u64)>> = vec![Vec::new(); series_count];
    for (c, col) in column_rows.iter().enumerate() {
        for &row in col {
            let s = row_series.get(row as usize).copied().unwrap_or(0) as usize;
            if let Some(p) = presence.get_mut(s) {
                match p.last_mut() {
                    Some((lc, cnt)) if *lc == c as u32 => *cnt += 1,
                    _ => p.push((c as u32, 1)),
                }
            }
        }
    }
    let state = |s: u32, c: u32| -> u8 {
        let s = s as usize;
        let entry = presence.get(s).and_then(|p| {
            p.binary_search_by_key(&c, |(pc, _)| *pc)
                .ok()
                .and_then(|i| p.get(i))
        });
        match entry {
            Some(&(_, cnt)) if Some(&cnt) == row_count.get(s) => STATE_FULL,
            Some(_) => STATE_PARTIAL,
            None => 0,
        }
    };

    // Sparse columns get longer blocks: a column present in 1/k of the rows spans
    // block_rows << floor(log2 k) rows (at most MAX_BLOCK_ROWS), so that each of its
    // blocks holds about block_rows values.
    let max_shift = (MAX_BLOCK_ROWS / options.block_rows)
        .checked_ilog2()
        .unwrap_or(0);
    let spans: Vec<u32> = column_rows
        .iter()
        .map(|col| {
            let k = n / col.len().max(1);
            (k.max(1).ilog2()).min(max_shift)
        })
        .collect();

    // Blocks, column-major: timestamps first, then each metric column.
    let block_count = n.div_ceil(block_rows);
    let mut blocks = Blocks {
        out: Vec::new(),
        dir: Vec::new(),
        comp: BlockCompressor::new(level)?,
    };
    blocks.out.extend_from_slice(&MAGIC);
    put_u32(&mut blocks.out, FORMAT_VERSION);
    put_u32(&mut blocks.out, 0);
    put_u32(&mut blocks.out, 0);
    debug_assert_eq!(blocks.out.len(), HEADER_LEN);

    let runs_of = |lo: usize, hi: usize| -> Vec<(u32, usize)> {
        let mut runs: Vec<(u32, usize)> = Vec::new();
        for &s in row_series.get(lo..hi).unwrap_or(&[]) {
            match runs.last_mut() {
                Some((ls, len)) if *ls == s => *len += 1,
                _ => runs.push((s, 1)),
            }
        }
        runs
    };
    let block_runs: Vec<Vec<(u32, usize)>> = (0..block_count)
        .map(|b| runs_of(b * block_rows, ((b + 1) * block_rows).min(n)))
        .collect();

    for (b, runs) in block_runs.iter().enumerate() {
        let lo = b * block_rows;
        let hi = (lo + block_rows).min(n);
        let lens: Vec<usize> = runs.iter().map(|(_, l)| *l).collect();
        let block_ts = ts.get(lo..hi).unwrap_or(&[]);
        let mut dod = Vec::new();
        encode_timestamps(block_ts, &lens, &mut dod);
        let mut grid = Vec::new();
        encode_timestamps_grid(block_ts, &lens, &mut grid);
        push_best(&mut blocks, &[], vec![dod, grid])?;
    }
    for (c, col) in col_values.iter().enumerate() {
        let kind = sorted_columns.get(c).map_or(MetricKind::Gauge, |(_, k)| *k);
        let span = block_rows << spans.get(c).copied().unwrap_or(0);
        let mut at = 0usize;
        for cb in 0..n.div_ceil(span) {
            let lo = cb * span;
            let hi = ((cb + 1) * span).min(n);
            let start = at;
            while col.get(at).is_some_and(|(row, _)| (*row as usize) < hi) {
                at += 1;
            }
            let in_block = col.get(start..at).unwrap_or(&[]);
            if in_block.is_empty() {
                blocks.push_empty();
                continue;
            }
            let partial = runs_of(lo, hi)
                .iter()
                .any(|&(s, _)| state(s, c as u32) == STATE_PARTIAL);
            let mut header = Vec::new();
            if partial {
                let bitmap: RoaringBitmap =
                    in_block.iter().map(|(row, _)| row - lo as u32).collect();
                encode_presence(Some(&bitmap), &mut header)?;
            } else {
                encode_presence(None, &mut header)?;
            }
            let candidates = match kind {
                MetricKind::Gauge => {
                    let v: Vec<f64> = in_block
                        .iter()
                        .map(|(_, v)| match v {
                            MetricValue::Gauge(g) => *g,
                            MetricValue::Counter(c) => *c as f64,
                        })
                        .collect();
                    gauge_candidates(&v, &mut blocks.comp)?
                }
                MetricKind::Counter => {
                    let v: Vec<i64> = in_block
                        .iter()
                        .map(|(_, v)| match v {
                            MetricValue::Counter(c) => *c,
                            MetricValue::Gauge(g) => *g as i64,
                        })
                        .collect();
                    counter_candidates(&v, &mut blocks.comp)?
                }
            };
            push_best(&mut blocks, &header, candidates)?;
        }
    }
    for (e, col) in ext_values.iter().enumerate() {
        let span = block_rows << spans.get(ncols + e).copied().unwrap_or(0);
        let kind = sorted_extras.get(e).map_or(ExtraKind::Keyword, |(_, k)| *k);
        let mut at = 0usize;
        for cb in 0..n.div_ceil(span) {
            let lo = cb * span;
            let hi = ((cb + 1) * span).min(n);
            let start = at;
            while col.get(at).is_some_and(|(row, _)| (*row as usize) < hi) {
                at += 1;
            }
            let in_block = col.get(start..at).unwrap_or(&[]);
            if in_block.is_empty() {
                blocks.push_empty();
                continue;
            }
            let partial = runs_of(lo, hi)
                .iter()
                .any(|&(s, _)| state(s, (ncols + e) as u32) == STATE_PARTIAL);
            let mut raw = Vec::new();
            if partial {
                let bitmap: RoaringBitmap =
                    in_block.iter().map(|(row, _)| row - lo as u32).collect();
                encode_presence(Some(&bitmap), &mut raw)?;
            } else {
                encode_presence(None, &mut raw)?;
            }
            encode_extras(kind, in_block.iter().map(|(_, v)| *v), &mut raw);
            push_best(&mut blocks, &[], vec![raw])?;
        }
    }
    let Blocks {
        mut out,
        dir,
        mut comp,
    } = blocks;

    // Meta section.
    let bloom_capacity = match &given_bloom {
        Some((_, capacity)) => *capacity,
        None => (n as u64).max(1) * BLOOM_HEADROOM_NUM / BLOOM_HEADROOM_DEN,
    };
    let mut meta = Vec::new();
    out_f64(&mut meta, options.bloom_fpr.unwrap_or(0.0));
    put_u64(
        &mut meta,
        if options.bloom_fpr.is_some() {
            bloom_capacity
        } else {
            0
        },
    );
    let mut dim_names: Vec<&str> = series
        .iter()
        .flat_map(|s| s.dims.iter().map(|(name, _)| name.as_str()))
        .collect();
    dim_names.sort_unstable();
    dim_names.dedup();
    put_u32(&mut meta, len_u32(dim_names.len(), "dimension names")?);
    for name in &dim_names {
        put_str(&mut meta, name)?;
    }
    put_u32(&mut meta, len_u32(sorted_columns.len(), "metric columns")?);
    for ((name, kind), shift) in sorted_columns.iter().zip(&spans) {
        meta.push(kind.code());
        meta.push(*shift as u8);
        put_str(&mut meta, name)?;
    }
    put_u32(&mut meta, len_u32(sorted_extras.len(), "extra columns")?);
    for ((name, kind), shift) in sorted_extras.iter().zip(spans.get(ncols..).unwrap_or(&[])) {
        meta.push(kind.code());
        meta.push(*shift as u8);
        put_str(&mut meta, name)?;
    }

    // Series table, column-wise inside one compressed frame.
    let mut st = Vec::new();
    for &s in &series_order {
        if let Some(b) = series.get(s as usize) {
            st.extend_from_slice(b.tsid.as_bytes());
        }
    }
    debug_assert_eq!(st.len(), series_count * TSID_LEN);
    for &c in &row_count {
        put_varint(&mut st, c);
    }
    let mut prev = 0i64;
    for &m in &min_ts {
        put_zigzag(&mut st, m.wrapping_sub(prev));
        prev = m;
    }
    let mut prev_span = 0u64;
    for (&mn, &mx) in min_ts.iter().zip(&max_ts) {
        let span = mx.wrapping_sub(mn) as u64;
        put_zigzag(&mut st, span.wrapping_sub(prev_span) as i64);
        prev_span = span;
    }
    for &s in &series_order {
        let Some(b) = series.get(s as usize) else {
            continue;
        };
        put_varint(&mut st, b.dims.len() as u64);
        for (name, value) in &b.dims {
            let id = dim_names.binary_search(&name.as_str()).unwrap_or(0);
            put_varint(&mut st, id as u64);
            match value {
                Dim::Keyword(k) => {
                    st.push(TAG_KEYWORD);
                    put_varint(&mut st, k.len() as u64);
                    st.extend_from_slice(k.as_bytes());
                }
                Dim::Int(v) => {
                    st.push(TAG_INT);
                    put_zigzag(&mut st, *v);
                }
                Dim::UInt(v) => {
                    st.push(TAG_UINT);
                    put_varint(&mut st, *v);
                }
                Dim::Bool(v) => {
                    st.push(TAG_BOOL);
                    st.push(u8::from(*v));
                }
                Dim::Ip(ip) => {
                    st.push(TAG_IP);
                    st.extend_from_slice(&ip.octets());
                }
            }
        }
    }
    for (s, p) in presence.iter().enumerate() {
        put_varint(&mut st, p.len() as u64);
        for &(c, _) in p {
            put_varint(&mut st, u64::from(c));
            st.push(state(s as u32, c));
        }
    }
    let mut series_section = Vec::new();
    put_u64(&mut series_section, st.len() as u64);
    series_section.extend_from_slice(&comp.compress_block(&st)?);

    // Optional id sections.
    // Row ids in row order: the given ids of an event segment, else (tsid, ts).
    let row_ids: Vec<[u8; 28]> = if events {
        order.iter().filter_map(|&i| event_key(i)).collect()
    } else {
        row_series
            .iter()
            .zip(&ts)
            .map(|(&s, &t)| {
                let tsid = series_order
                    .get(s as usize)
                    .and_then(|&orig| series.get(orig as usize))
                    .map_or(Tsid::from_bytes([0; TSID_LEN]), |b| b.tsid);
                SyntheticId::new(tsid, t).to_bytes()
            })
            .collect()
    };
    let ids = || row_ids.iter();
    let bloom_section = match (options.bloom_fpr, given_bloom) {
        (Some(_), Some((filter, _))) => filter.to_bytes(),
        (Some(fpr), None) => {
            let mut filter = BlockedBloomFilter::with_capacity(bloom_capacity, fpr)?;
            for id in ids() {
                filter.insert(&id[..]);
            }
            filter.to_bytes()
        }
        (None, _) => Vec::new(),
    };
    let id_section = if options.id_index {
        let mut b = fst::MapBuilder::memory();
        let mut keyed: Vec<(&[u8; 28], u64)> = ids()
            .enumerate()
            .map(|(row, id)| (id, row as u64))
            .collect();
        if events {
            // Event ids do not follow row order.
            keyed.sort_unstable();
        }
        for (id, row) in keyed {
            b.insert(id, row)?;
        }
        b.into_inner()?
    } else {
        Vec::new()
    };

    let mut sections = [SectionRef::default(); SECTION_COUNT];
    for (slot, bytes) in
        sections
            .iter_mut()
            .zip([&meta, &series_section, &dir, &bloom_section, &id_section])
    {
        *slot = SectionRef {
            offset: if bytes.is_empty() {
                0
            } else {
                out.len() as u64
            },
            len: bytes.len() as u64,
            crc: if bytes.is_empty() {
                0
            } else {
                crc32fast::hash(bytes)
            },
        };
        out.extend_from_slice(bytes);
    }
    let mut flags = 0;
    if options.bloom_fpr.is_some() {
        flags |= FLAG_BLOOM;
    }
    if options.id_index {
        flags |= FLAG_ID_INDEX;
    }
    if events {
        flags |= FLAG_EVENTS;
    }
    let footer = Footer {
        row_count: n as u64,
        series_count: series_count as u64,
        min_ts: ts.iter().copied().min().unwrap_or(0),
        max_ts: ts.iter().copied().max().unwrap_or(0),
        block_rows: options.block_rows,
        block_count: len_u32(block_count, "blocks")?,
        column_count: len_u32(sorted_columns.len(), "metric columns")?,
        flags,
        sections,
        data_crc: crc32fast::hash(&out),
        version: FORMAT_VERSION,
    };
    out.extend_from_slice(&footer.encode());
    let meta = SegmentMeta {
        row_count: footer.row_count,
        series_count: footer.series_count,
        column_count: footer.column_count,
        min_ts: footer.min_ts,
        max_ts: footer.max_ts,
        len_bytes: out.len() as u64,
    };
    debug_assert!(out.len() >= HEADER_LEN + FOOTER_LEN);
    Ok((out, meta))
}

fn out_f64(out: &mut Vec<u8>, v: f64) {
    out.extend_from_slice(&v.to_bits().to_le_bytes());
}
