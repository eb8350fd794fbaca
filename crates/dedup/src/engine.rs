//! The engine: WAL, live version map, segments, tombstones and the dedup check.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tidemark_segment::{
    AtomicFile, Dim, DimsInterner, Extra, MetricValue, Point, RowId, Segment, Tombstones,
    WrittenSeries,
};
use tidemark_tsid::{SyntheticId, Tsid};

use crate::buffer::{
    Buffer, ColumnId, ColumnKind, ColumnRef, ColumnTable, Key, SeriesRef, SeriesTable,
    write_segment,
};

use crate::config::{EngineConfig, Strategy};
use crate::error::{Error, Result};
use crate::events::{EventKeyer, Mode};
use crate::manifest::{MANIFEST_NAME, Manifest, SegmentEntry};
use crate::record::{self, Record};
use crate::stats::{DedupStats, MergeStats};
use crate::wal::{Wal, parse_wal_name, wal_path};

mod check;
mod merging;
mod ops;
mod query;
pub(crate) mod read;
mod recovery;
mod refresh;
mod samples;

use check::find_row;
pub(crate) use merging::ored_bloom;
pub use merging::{MergeJob, MergedSegment};
pub(crate) use recovery::keyer_of;
pub use refresh::{RefreshJob, RefreshedSegment};
pub use samples::{SampleCell, Samples, Tally};

/// The longest name or keyword a segment can store (its strings are u16-length-prefixed):
/// the segment format's [`tidemark_segment::MAX_NAME_LEN`].
pub const MAX_STRING_LEN: usize = tidemark_segment::MAX_NAME_LEN;

/// The most metric columns a segment (hence the buffer) may have.
pub const MAX_COLUMNS: usize = 65_535;

/// One operation of a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Store the point unless its synthetic id is already stored (then: [`Outcome::Conflict`]).
    Create(Point),
    /// Store the point, replacing a stored point with the same synthetic id.
    Index(Point),
    /// Delete the point with this id.
    Delete(SyntheticId),
    /// Read the point with this id.
    Get(SyntheticId),
}

/// A batch of appends by ref for [`Engine::append`], held as columns so that a batch of
/// points of known series costs no allocation per point: each append names a
/// [`SeriesRef`] (from [`Engine::series`]), a timestamp, metric values and extra values
/// by [`ColumnRef`] (from [`Engine::column`]), and whether it is a `create` (a duplicate
/// is a [`Outcome::Conflict`]) or an `index` (a duplicate is replaced).
///
/// ```
/// use tidemark_dedup::{AppendBatch, ColumnKind, Engine, EngineConfig, Outcome};
/// use tidemark_segment::MetricValue;
/// use tidemark_tsid::Tsid;
///
/// let dir = tempfile::tempdir()?;
/// let mut engine = Engine::create(dir.path(), EngineConfig::new())?;
/// let s = engine.series(Tsid::from_bytes([1; 20]), vec![("host".into(), "a".into())])?;
/// let cpu = engine.column("cpu", ColumnKind::Gauge)?;
/// let mut batch = AppendBatch::new();
/// batch.create(s, 1_000, &[(cpu, MetricValue::Gauge(0.5))]);
/// batch.create(s, 1_000, &[(cpu, MetricValue::Gauge(0.5))]);
/// let out = engine.append(&batch)?;
/// assert!(matches!(out[0], Outcome::Created { .. }));
/// assert!(matches!(out[1], Outcome::Conflict { .. }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct AppendBatch {
    create: Vec<bool>,
    series: Vec<SeriesRef>,
    ts: Vec<i64>,
    value_end: Vec<u32>,
    values: Vec<(ColumnRef, MetricValue)>,
    extra_end: Vec<u32>,
    extras: Vec<(ColumnRef, Extra)>,
}

/// One append of an [`AppendBatch`].
#[derive(Debug)]
pub(crate) struct AppendItem<'a> {
    pub(crate) create: bool,
    pub(crate) series: SeriesRef,
    pub(crate) ts: i64,
    pub(crate) values: &'a [(ColumnRef, MetricValue)],
    pub(crate) extras: &'a [(ColumnRef, Extra)],
}

impl AppendBatch {
    /// An empty batch.
    pub fn new() -> AppendBatch {
        AppendBatch::default()
    }

    /// An empty batch with room for `appends` appends holding `values` metric values in
    /// all (extras grow as they come): a writer that refills one batch of a known size
    /// allocates once, and the allocator never sees its buffers double and move.
    pub fn with_capacity(appends: usize, values: usize) -> AppendBatch {
        AppendBatch {
            create: Vec::with_capacity(appends),
            series: Vec::with_capacity(appends),
            ts: Vec::with_capacity(appends),
            value_end: Vec::with_capacity(appends),
            values: Vec::with_capacity(values),
            extra_end: Vec::with_capacity(appends),
            extras: Vec::new(),
        }
    }

    /// Adds a `create` of a point of `series` at `ts_millis` with metric `values`.
    pub fn create(
        &mut self,
        series: SeriesRef,
        ts_millis: i64,
        values: &[(ColumnRef, MetricValue)],
    ) {
        self.push(true, series, ts_millis, values, &[]);
    }

    /// Adds an `index` (store, replacing a duplicate) of a point.
    pub fn index(
        &mut self,
        series: SeriesRef,
        ts_millis: i64,
        values: &[(ColumnRef, MetricValue)],
    ) {
        self.push(false, series, ts_millis, values, &[]);
    }

    /// Adds a `create` (`create = true`) or `index` of a point with metric values and
    /// extra (keyword/boolean) values.
    pub fn push(
        &mut self,
        create: bool,
        series: SeriesRef,
        ts_millis: i64,
        values: &[(ColumnRef, MetricValue)],
        extras: &[(ColumnRef, Extra)],
    ) {
        self.create.push(create);
        self.series.push(series);
        self.ts.push(ts_millis);
        self.values.extend_from_slice(values);
        self.value_end.push(self.values.len() as u32);
        self.extras.extend(extras.iter().cloned());
        self.extra_end.push(self.extras.len() as u32);
    }

    /// Appends in the batch.
    pub fn len(&self) -> usize {
        self.ts.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.ts.is_empty()
    }

    /// Empties the batch, keeping its memory.
    pub fn clear(&mut self) {
        self.create.clear();
        self.series.clear();
        self.ts.clear();
        self.value_end.clear();
        self.values.clear();
        self.extra_end.clear();
        self.extras.clear();
    }

    pub(crate) fn get(&self, i: usize) -> Option<AppendItem<'_>> {
        let span = |ends: &[u32]| {
            let hi = *ends.get(i)? as usize;
            let lo = match i.checked_sub(1) {
                Some(j) => *ends.get(j)? as usize,
                None => 0,
            };
            Some(lo..hi.max(lo))
        };
        Some(AppendItem {
            create: *self.create.get(i)?,
            series: *self.series.get(i)?,
            ts: *self.ts.get(i)?,
            values: self.values.get(span(&self.value_end)?)?,
            extras: self.extras.get(span(&self.extra_end)?)?,
        })
    }
}

/// What one operation did. A batch returns one per operation, in order.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Outcome {
    /// `create` stored a new point.
    Created {
        /// Its synthetic id.
        id: SyntheticId,
    },
    /// `create` found the point already stored and did nothing: an idempotent no-op that a
    /// retrying shipper can count as success.
    Conflict {
        /// The synthetic id already stored.
        id: SyntheticId,
    },
    /// `index` stored the point.
    Indexed {
        /// Its synthetic id.
        id: SyntheticId,
        /// Whether a stored point with that id was replaced (tombstoned).
        replaced: bool,
    },
    /// `delete` removed the point.
    Deleted {
        /// Its synthetic id.
        id: SyntheticId,
    },
    /// `delete` or `get` found no such point.
    NotFound {
        /// The id looked up.
        id: SyntheticId,
    },
    /// `get` found the point (dimensions and metrics sorted by name).
    Found(Point),
    /// The point is invalid and was not stored.
    Rejected {
        /// Its synthetic id.
        id: SyntheticId,
        /// Why.
        reason: Rejection,
    },
}

impl Outcome {
    /// Whether the operation can be acknowledged as done: everything but a rejection
    /// (a conflict means "already stored", a not-found delete means "already gone").
    pub fn is_success(&self) -> bool {
        !matches!(self, Outcome::Rejected { .. })
    }
}

/// Why a point was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// Two dimensions share a name.
    DuplicateDimension {
        /// The name.
        name: String,
    },
    /// Two metrics share a name.
    DuplicateMetric {
        /// The name.
        name: String,
    },
    /// A buffered point of the same tsid has other dimensions (a tsid must identify its
    /// dimension set).
    InconsistentDimensions {
        /// The tsid.
        tsid: Tsid,
    },
    /// A buffered point (or this one) has a metric or extra field of that name with
    /// another kind (`"gauge"`, `"counter"`, `"keyword"` or `"bool"`).
    KindConflict {
        /// The column.
        name: String,
        /// Kind of the buffered values.
        expected: &'static str,
        /// Kind of this point's value.
        found: &'static str,
    },
    /// The buffer would need more than [`MAX_COLUMNS`] metric columns.
    TooManyColumns,
    /// A name or keyword longer than [`MAX_STRING_LEN`] bytes.
    TooLong {
        /// Its length in bytes.
        len_bytes: usize,
    },
    /// Two extra fields share a name.
    DuplicateExtra {
        /// The name.
        name: String,
    },
    /// Events mode: the event's fingerprint could not be computed.
    EventId {
        /// Why.
        detail: String,
    },
    /// An append named a series or column ref this engine did not give out (or a metric
    /// ref where an extra belongs, or the reverse).
    UnknownRef {
        /// `"series"`, `"metric column"` or `"extra column"`.
        what: &'static str,
    },
    /// A partitioned store refused a point older than it keeps (as Prometheus and
    /// VictoriaMetrics refuse too-old samples).
    TooOld {
        /// The point's timestamp.
        ts_millis: i64,
        /// The oldest timestamp accepted.
        oldest_millis: i64,
        /// The rule: `"late_window"` or `"retention"`.
        rule: &'static str,
    },
}

impl From<tidemark_segment::PointViolation> for Rejection {
    /// The rejection of a point that breaks the segment format's rules.
    fn from(v: tidemark_segment::PointViolation) -> Rejection {
        use tidemark_segment::PointViolation as V;
        match v {
            V::TooLong { len_bytes } => Rejection::TooLong { len_bytes },
            V::DuplicateDimension { name } => Rejection::DuplicateDimension { name },
            V::DuplicateMetric { name } => Rejection::DuplicateMetric { name },
            V::DuplicateExtra { name } => Rejection::DuplicateExtra { name },
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejection::DuplicateDimension { name } => write!(f, "dimension `{name}` given twice"),
            Rejection::DuplicateMetric { name } => write!(f, "metric `{name}` given twice"),
            Rejection::DuplicateExtra { name } => write!(f, "field `{name}` given twice"),
            Rejection::InconsistentDimensions { tsid } => write!(
                f,
                "series {tsid} is stored with other dimensions (a tsid must identify its \
                 dimension set)"
            ),
            Rejection::KindConflict {
                name,
                expected,
                found,
            } => write!(
                f,
                "field `{name}` holds {expected} values, this point gives a {found}"
            ),
            Rejection::TooManyColumns => write!(f, "more than {MAX_COLUMNS} columns"),
            Rejection::TooLong { len_bytes } => write!(
                f,
                "a name or keyword of {len_bytes} bytes (at most {MAX_STRING_LEN})"
            ),
            Rejection::EventId { detail } => write!(f, "no event id: {detail}"),
            Rejection::UnknownRef { what } => write!(f, "unknown {what} ref"),
            Rejection::TooOld {
                ts_millis,
                oldest_millis,
                rule,
            } => write!(
                f,
                "timestamp {ts_millis} is too old: the {rule} keeps timestamps from {oldest_millis} on"
            ),
        }
    }
}

/// Something recovered from while opening, that the caller should log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Warning {
    /// The write-ahead log ended with an incomplete or corrupt record (a write torn by a
    /// crash); it was truncated at `offset`.
    TornWalTail {
        /// The log file.
        path: PathBuf,
        /// Where the log now ends.
        offset: u64,
        /// Bytes dropped.
        dropped_bytes: u64,
    },
    /// A file left by an interrupted refresh (not named by the manifest) was removed.
    RemovedOrphan {
        /// The file.
        path: PathBuf,
    },
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Warning::TornWalTail {
                path,
                offset,
                dropped_bytes,
            } => write!(
                f,
                "torn write-ahead log tail: {} truncated at offset {offset} ({dropped_bytes} bytes dropped)",
                path.display()
            ),
            Warning::RemovedOrphan { path } => {
                write!(f, "removed orphan file {}", path.display())
            }
        }
    }
}

/// A live segment and its tombstones.
#[derive(Debug)]
struct Slot {
    id: u64,
    path: PathBuf,
    segment: Arc<Segment>,
    /// Part of a background merge in flight: the policy leaves it alone.
    merging: bool,
    min_ts: i64,
    max_ts: i64,
    has_bloom: bool,
    has_id_index: bool,
    tombstones: Tombstones,
    /// Generation of the tombstone file on disk, if any.
    tomb_generation: Option<u64>,
    /// Tombstones changed since they were written.
    dirty: bool,
}

impl Slot {
    fn open(dir: &Path, entry: &SegmentEntry, interner: &mut DimsInterner) -> Result<Slot> {
        let path = segment_path(dir, entry.id);
        let segment = Segment::open_interned(&path, interner)?;
        Slot::with_segment(path, entry, segment)
    }

    /// The slot of a segment just written, its series table as the writer left it.
    fn open_written(dir: &Path, entry: &SegmentEntry, series: WrittenSeries) -> Result<Slot> {
        let path = segment_path(dir, entry.id);
        let segment = Segment::open_written(&path, series)?;
        Slot::with_segment(path, entry, segment)
    }

    fn with_segment(path: PathBuf, entry: &SegmentEntry, segment: Segment) -> Result<Slot> {
        let segment = Arc::new(segment);
        if segment.row_count() != entry.rows {
            return Err(Error::RowCountMismatch {
                path,
                expected: entry.rows,
                found: segment.row_count(),
            });
        }
        let tombstones = match entry.tombstones {
            Some(g) => Tombstones::read_file(&Tombstones::path_for(&path, g))?,
            None => Tombstones::new(entry.rows),
        };
        let has_id_index = segment
            .id_index()
            .map_err(|e| segment.name_error(e))?
            .is_some();
        Ok(Slot {
            id: entry.id,
            min_ts: segment.min_timestamp().unwrap_or(i64::MAX),
            max_ts: segment.max_timestamp().unwrap_or(i64::MIN),
            has_bloom: segment.bloom_params().is_some(),
            has_id_index,
            path,
            segment,
            tombstones,
            tomb_generation: entry.tombstones,
            dirty: false,
            merging: false,
        })
    }

    fn entry(&self) -> SegmentEntry {
        SegmentEntry {
            id: self.id,
            rows: self.segment.row_count(),
            tombstones: self.tomb_generation,
        }
    }

    /// Appends the rows not tombstoned (in memory) to `out`, normalized.
    fn live_points(&self, out: &mut Vec<Point>) -> Result<()> {
        live_points(&self.segment, &self.tombstones, out)
    }

    fn err(&self, e: tidemark_segment::Error) -> Error {
        Error::Segment(self.segment.name_error(e))
    }
}

/// Appends the rows of `segment` not in `dead` to `out` (extras included), normalized.
fn live_points(segment: &Segment, dead: &Tombstones, out: &mut Vec<Point>) -> Result<()> {
    let points = segment.points(0..segment.row_count(), |row| !dead.is_deleted(row))?;
    out.extend(points.into_iter().map(Point::normalized));
    Ok(())
}

/// Where a live point is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Location {
    Buffer(Key),
    /// In the frozen buffer of a refresh in flight.
    Frozen(Key),
    Segment {
        slot: usize,
        row: RowId,
    },
}

/// File name of segment `id`.
fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("seg-{id:020}.tms"))
}

fn parse_segment_name(name: &str) -> Option<u64> {
    name.strip_prefix("seg-")?
        .strip_suffix(".tms")?
        .parse()
        .ok()
}

/// Reused buffers for a point's metric and extra values by column ref.
type Scratch = (Vec<(u32, MetricValue)>, Vec<(u32, Extra)>);

/// An exactly-once ingest engine over one directory.
///
/// Writes go to a write-ahead log and to an in-memory, columnar buffer whose *live
/// version map* keys buffered points on (series ref, timestamp) — on the event id in
/// events mode. [`refresh`](Self::refresh) writes the buffer as an
/// immutable segment, persists changed tombstones, starts a new log and switches the
/// manifest atomically. Every `create` and `index` runs the dedup check of the configured
/// [`Strategy`]. The engine is single-writer: methods take `&mut self`.
///
/// Directory layout: `MANIFEST`; `seg-<id>.tms` segments; `seg-<id>.tms.del.<gen>`
/// tombstones; `wal-<generation>.log`, the current log.
#[derive(Debug)]
pub struct Engine {
    dir: PathBuf,
    config: EngineConfig,
    /// Oldest first.
    slots: Vec<Slot>,
    /// Points not yet in a segment nor frozen, as columns, and the live version map.
    buffer: Buffer,
    /// The buffer of a refresh in flight (see `refresh.rs`): older than `buffer`, newer
    /// than the segments.
    frozen: Option<refresh::Frozen>,
    /// A frozen buffer's memory once installed, for the next freeze.
    spare: Option<Buffer>,
    /// Whether refreshes are left to the caller ([`Engine::plan_refresh`]).
    background_refresh: bool,
    /// The last refresh job handed out.
    refresh_epoch: u64,
    /// The oldest log generation whose records are not all in segments: what the
    /// manifest names (replay starts there), while `wal` may be newer.
    wal_base: u64,
    /// Every series seen since the engine opened: each one's dimensions once.
    series: SeriesTable,
    /// Every metric and extra column of the buffer and of the segments (a column has one
    /// kind in a segment, so in all the segments a merge may join). Never shrinks: a
    /// name keeps its kind even once its rows are gone.
    columns: ColumnTable,
    /// Scratch: a point's values by column ref.
    scratch: Scratch,
    /// One copy of each series' dimensions, shared by the segments and the series table.
    interner: DimsInterner,
    wal: Wal,
    /// Records in the current log.
    wal_records: u64,
    next_segment: u64,
    stats: DedupStats,
    merge_stats: MergeStats,
    warnings: Vec<Warning>,
    poisoned: bool,
    background_merges: bool,
    /// Events mode: computes event ids.
    keyer: Option<Arc<EventKeyer>>,
}

impl Engine {
    /// The id of `point`: `(tsid, timestamp)` for time series, the fingerprint of its
    /// fields and its timestamp for events.
    ///
    /// # Errors
    /// [`Error::EventId`] when an event's fingerprint cannot be computed.
    pub fn id_of(&self, point: &Point) -> Result<SyntheticId> {
        match &self.keyer {
            None => Ok(SyntheticId::new(point.tsid, point.ts_millis)),
            Some(k) => k.id_of(point).map_err(|detail| Error::EventId { detail }),
        }
    }

    /// The `_id` text of `id`: the synthetic id's base64url text for time series; for
    /// events the timestamp prefix then the fingerprint in hex (see [`Mode::Events`]).
    pub fn format_id(&self, id: &SyntheticId) -> String {
        match &self.keyer {
            None => id.to_string(),
            Some(k) => k.format(id),
        }
    }

    /// Parses an `_id` text of this engine's mode (see [`format_id`](Self::format_id)).
    ///
    /// # Errors
    /// [`Error::BadId`].
    pub fn parse_id(&self, text: &str) -> Result<SyntheticId> {
        match &self.keyer {
            None => SyntheticId::parse(text).map_err(|e| Error::BadId {
                text: text.to_owned(),
                detail: e.to_string(),
            }),
            Some(k) => k.parse(text),
        }
    }

    /// The engine directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Dedup counters since the engine was opened (replay excluded).
    pub fn stats(&self) -> &DedupStats {
        &self.stats
    }

    /// Merge and write-stall counters since the engine was opened.
    pub fn merge_stats(&self) -> &MergeStats {
        &self.merge_stats
    }

    /// Records the live segment count in the peak.
    fn note_segments(&mut self) {
        let n = self.slots.len() as u64;
        self.merge_stats.peak_segments = self.merge_stats.peak_segments.max(n);
    }

    /// What was recovered from while opening.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// Live segments.
    pub fn segment_count(&self) -> usize {
        self.slots.len()
    }

    /// Points in the buffer (not yet in a segment), a refresh in flight's included.
    pub fn buffered(&self) -> usize {
        self.buffer.len() + self.frozen.as_ref().map_or(0, refresh::Frozen::len)
    }

    /// Gives the memory of an empty buffer back (a refresh keeps it for the next points):
    /// for an engine that is not written to for a while, as a time partition past its
    /// hour or day.
    pub(crate) fn release_buffer(&mut self) {
        if self.buffer.is_empty() {
            self.buffer = Buffer::default();
        }
        self.spare = None;
    }

    /// Live points: buffered plus segment rows not tombstoned.
    pub fn live_count(&self) -> u64 {
        let stored: u64 = self
            .slots
            .iter()
            .map(|s| s.segment.row_count().saturating_sub(s.tombstones.len()))
            .sum();
        stored + self.buffered() as u64
    }

    /// The point `id`, if stored.
    ///
    /// # Errors
    /// Segment read errors naming the segment.
    pub fn get(&self, id: &SyntheticId) -> Result<Option<Point>> {
        let mut scratch = DedupStats::default();
        let loc = self.locate(&mut scratch, id, None)?;
        self.read(loc)
    }

    fn read(&self, loc: Option<Location>) -> Result<Option<Point>> {
        match loc {
            None => Ok(None),
            Some(Location::Buffer(key)) => Ok(self
                .buffer
                .lookup(&key)
                .and_then(|i| self.buffer.point(i, &self.series, &self.columns))),
            Some(Location::Frozen(key)) => Ok(self.frozen.as_ref().and_then(|f| {
                f.lookup(&key)
                    .and_then(|i| f.buffer.point(i, &self.series, &self.columns))
            })),
            Some(Location::Segment { slot, row }) => match self.slots.get(slot) {
                Some(s) => Ok(Some(s.segment.row(row).map_err(|e| s.err(e))?.normalized())),
                None => Ok(None),
            },
        }
    }

    /// Every live point, sorted by synthetic id (tsid, then timestamp), dimensions and
    /// metrics sorted by name.
    ///
    /// # Errors
    /// Segment read errors naming the segment.
    pub fn points(&self) -> Result<Vec<Point>> {
        let mut out: Vec<Point> = self
            .buffer
            .live()
            .filter_map(|i| self.buffer.point(i, &self.series, &self.columns))
            .collect();
        if let Some(f) = &self.frozen {
            out.extend(
                f.live()
                    .filter_map(|i| f.buffer.point(i, &self.series, &self.columns)),
            );
        }
        for slot in &self.slots {
            slot.live_points(&mut out)?;
        }
        out.sort_by_key(|p| (p.tsid, p.ts_millis));
        Ok(out)
    }

    /// Row counts of the live segments, oldest first: `(rows, dead rows)`.
    pub fn segment_rows(&self) -> Vec<(u64, u64)> {
        self.slots
            .iter()
            .map(|s| (s.segment.row_count(), s.tombstones.len()))
            .collect()
    }

    fn check_poisoned(&self) -> Result<()> {
        if self.poisoned {
            Err(Error::Poisoned)
        } else {
            Ok(())
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if !self.poisoned {
            let _ = self.wal.sync();
        }
    }
}
