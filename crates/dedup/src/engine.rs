//! The engine: WAL, live version map, segments, tombstones and the dedup check.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tidemark_segment::{
    AtomicFile, Dim, DimsInterner, Extra, MetricValue, Point, RowId, Segment, Tombstones,
    write_batch,
};
use tidemark_tsid::{SyntheticId, Tsid};

use crate::buffer::{
    Buffer, BufferView, ColumnId, ColumnKind, ColumnRef, ColumnTable, Key, SeriesRef, SeriesTable,
};

use crate::config::{EngineConfig, Strategy};
use crate::error::{Error, Result};
use crate::events::{EventKeyer, Mode};
use crate::manifest::{MANIFEST_NAME, Manifest, SegmentEntry};
use crate::record::{self, Record};
use crate::stats::DedupStats;
use crate::wal::{Wal, parse_wal_name, wal_path};

mod query;

/// The longest name or keyword a segment can store (its strings are u16-length-prefixed).
pub const MAX_STRING_LEN: usize = u16::MAX as usize;

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
struct AppendItem<'a> {
    create: bool,
    series: SeriesRef,
    ts: i64,
    values: &'a [(ColumnRef, MetricValue)],
    extras: &'a [(ColumnRef, Extra)],
}

impl AppendBatch {
    /// An empty batch.
    pub fn new() -> AppendBatch {
        AppendBatch::default()
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

    fn get(&self, i: usize) -> Option<AppendItem<'_>> {
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
        let segment = Arc::new(Segment::open_interned(&path, interner)?);
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

/// The OR of the bloom filters of `inputs` when they all have one, of one shape, and the
/// OR's estimated false-positive rate is at most `fpr`; `None` means "rebuild". Returns
/// the filter and the sum of the inputs' capacities.
pub(crate) fn ored_bloom<'a>(
    inputs: impl IntoIterator<Item = &'a Segment>,
    fpr: f64,
) -> Result<Option<(tidemark_segment::SegmentBloom, u64)>> {
    let mut acc: Option<(tidemark_segment::SegmentBloom, u64)> = None;
    for seg in inputs {
        let (Some(filter), Some((_, capacity))) = (
            seg.bloom_filter().map_err(|e| seg.name_error(e))?,
            seg.bloom_params(),
        ) else {
            return Ok(None);
        };
        acc = match acc {
            None => Some((filter, capacity)),
            Some((mut a, c)) => {
                if a.union(&filter).is_err() {
                    return Ok(None);
                }
                Some((a, c.saturating_add(capacity)))
            }
        };
    }
    Ok(acc.filter(|(f, _)| f.estimated_fpr() <= fpr))
}

/// A merge prepared by [`Engine::plan_merge`], to run on any thread with
/// [`run`](Self::run) while the engine keeps ingesting, then installed with
/// [`Engine::install_merge`].
#[derive(Debug)]
pub struct MergeJob {
    ids: Vec<u64>,
    inputs: Vec<(Arc<Segment>, Tombstones)>,
    new_id: u64,
    path: PathBuf,
    options: tidemark_segment::SegmentOptions,
    keyer: Option<Arc<EventKeyer>>,
    /// Target rate of the strategy's bloom filter, if it uses one.
    bloom_fpr: Option<f64>,
}

/// A merged segment written by [`MergeJob::run`], not yet installed.
#[derive(Debug)]
pub struct MergedSegment {
    ids: Vec<u64>,
    snapshots: Vec<Tombstones>,
    new_id: u64,
    path: PathBuf,
    rows: u64,
    /// Whether its bloom filter is the OR of the inputs' (`None`: no bloom strategy).
    bloom_ored: Option<bool>,
}

impl MergeJob {
    /// Segments merged.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the job merges nothing.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Writes the merged segment (the live rows of the inputs as of
    /// [`Engine::plan_merge`]). It is not part of the engine until installed.
    ///
    /// # Errors
    /// Segment read and write errors (the partial file is removed).
    pub fn run(self) -> Result<MergedSegment> {
        let merged = crate::merge::merge_segments(
            &self.inputs,
            &self.path,
            self.options,
            self.keyer.as_deref(),
            self.bloom_fpr,
        )?;
        Ok(MergedSegment {
            ids: self.ids,
            snapshots: self.inputs.into_iter().map(|(_, t)| t).collect(),
            new_id: self.new_id,
            path: self.path,
            rows: merged.rows,
            bloom_ored: merged.bloom_ored,
        })
    }
}

/// Where a live point is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Location {
    Buffer(Key),
    Segment { slot: usize, row: RowId },
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
/// Writes go to a write-ahead log and to an in-memory buffer, the *live version map*
/// (synthetic id → buffered point). [`refresh`](Self::refresh) writes the buffer as an
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
    /// Points not yet in a segment, as columns, and the live version map.
    buffer: Buffer,
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
    warnings: Vec<Warning>,
    poisoned: bool,
    background_merges: bool,
    /// Events mode: computes event ids.
    keyer: Option<Arc<EventKeyer>>,
}

impl Engine {
    /// Creates an engine in `dir` (created if needed), which must not hold one already.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`], [`Error::AlreadyExists`], I/O errors.
    pub fn create(dir: impl AsRef<Path>, config: EngineConfig) -> Result<Engine> {
        config.check()?;
        let keyer = keyer_of(&config)?;
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
        if dir.join(MANIFEST_NAME).exists() {
            return Err(Error::AlreadyExists { path: dir });
        }
        // A log left by an interrupted `create` is not named by any manifest.
        let stale = wal_path(&dir, 1);
        if stale.exists() {
            std::fs::remove_file(&stale).map_err(Error::io(&stale))?;
        }
        let wal = Wal::create(&dir, 1)?;
        Manifest {
            next_segment: 1,
            wal_generation: 1,
            segments: Vec::new(),
        }
        .write(&dir)?;
        Ok(Engine::assemble(
            dir,
            config,
            Vec::new(),
            wal,
            1,
            keyer,
            DimsInterner::new(),
        ))
    }

    /// Opens the engine in `dir`: reads the manifest, opens its segments and tombstones,
    /// removes files an interrupted refresh left behind, and replays the write-ahead log.
    /// A torn log tail is truncated and reported in [`warnings`](Self::warnings).
    ///
    /// # Errors
    /// [`Error::NoManifest`], manifest and log format errors, segment errors naming the
    /// segment file, I/O errors.
    pub fn open(dir: impl AsRef<Path>, config: EngineConfig) -> Result<Engine> {
        config.check()?;
        let keyer = keyer_of(&config)?;
        let dir = dir.as_ref().to_path_buf();
        let manifest = Manifest::read(&dir)?;
        let mut interner = DimsInterner::new();
        let slots = manifest
            .segments
            .iter()
            .map(|e| Slot::open(&dir, e, &mut interner))
            .collect::<Result<Vec<_>>>()?;
        if let Some(s) = slots
            .iter()
            .find(|s| s.segment.is_events() != keyer.is_some())
        {
            let (held, mode) = if keyer.is_some() {
                ("time-series points", "events")
            } else {
                ("events", "time series")
            };
            return Err(Error::InvalidConfig {
                name: "mode",
                detail: format!(
                    "{} holds {held} but the engine is configured for {mode}",
                    s.path.display()
                ),
            });
        }
        let removed = remove_orphans(&dir, &manifest)?;
        let mut records = Vec::new();
        let (wal, torn) = Wal::open(&dir, manifest.wal_generation, |payload, offset, path| {
            records.push((record::decode(payload, offset, path)?, offset));
            Ok(())
        })?;
        let mut engine = Engine::assemble(
            dir,
            config,
            slots,
            wal,
            manifest.next_segment,
            keyer,
            interner,
        );
        for slot in &engine.slots {
            let kinds = slot
                .segment
                .columns()
                .iter()
                .map(|c| {
                    let kind = match c.kind {
                        tidemark_segment::MetricKind::Gauge => ColumnKind::Gauge,
                        tidemark_segment::MetricKind::Counter => ColumnKind::Counter,
                    };
                    (c.name.as_str(), kind)
                })
                .chain(slot.segment.extra_columns().iter().map(|e| {
                    let kind = match e.kind {
                        tidemark_segment::ExtraKind::Keyword => ColumnKind::Keyword,
                        tidemark_segment::ExtraKind::Bool => ColumnKind::Bool,
                    };
                    (e.name.as_str(), kind)
                }));
            for (name, kind) in kinds {
                if engine.columns.get(name).is_none() {
                    engine.columns.insert(name, kind);
                }
            }
        }
        engine.warnings.extend(removed);
        engine.warnings.extend(torn);
        engine.replay(records)?;
        // Replay is not ingest: count only what happens from now on.
        engine.stats = DedupStats::new(engine.config.strategy);
        Ok(engine)
    }

    /// Opens the engine in `dir`, or creates one if `dir` holds none.
    ///
    /// # Errors
    /// As [`open`](Self::open) and [`create`](Self::create).
    pub fn open_or_create(dir: impl AsRef<Path>, config: EngineConfig) -> Result<Engine> {
        match Engine::open(dir.as_ref(), config.clone()) {
            Err(Error::NoManifest { .. }) => Engine::create(dir, config),
            other => other,
        }
    }

    fn assemble(
        dir: PathBuf,
        config: EngineConfig,
        slots: Vec<Slot>,
        wal: Wal,
        next_segment: u64,
        keyer: Option<Arc<EventKeyer>>,
        interner: DimsInterner,
    ) -> Engine {
        let buffer_rows = config.refresh_rows.min(1 << 18);
        Engine {
            dir,
            stats: DedupStats::new(config.strategy),
            config,
            slots,
            // Sized for a refresh's worth up front (capped): growing by rehashing moved
            // every buffered point again and again (memmove was 11% of in-order ingest).
            buffer: Buffer::with_capacity(buffer_rows),
            series: SeriesTable::default(),
            columns: ColumnTable::default(),
            scratch: (Vec::new(), Vec::new()),
            interner,
            wal,
            wal_records: 0,
            next_segment,
            warnings: Vec::new(),
            poisoned: false,
            background_merges: false,
            keyer,
        }
    }

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

    /// What was recovered from while opening.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// Live segments.
    pub fn segment_count(&self) -> usize {
        self.slots.len()
    }

    /// Points in the buffer (not yet in a segment).
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// Live points: buffered plus segment rows not tombstoned.
    pub fn live_count(&self) -> u64 {
        let stored: u64 = self
            .slots
            .iter()
            .map(|s| s.segment.row_count().saturating_sub(s.tombstones.len()))
            .sum();
        stored + self.buffer.len() as u64
    }

    /// Runs `ops` in order and returns one outcome per operation. Their log records are
    /// written with one `write` (and fsynced per the durability policy) before returning;
    /// then, if the buffer reached the refresh size, a refresh runs.
    ///
    /// # Errors
    /// [`Error::Poisoned`] after an earlier log failure; I/O errors of the log (which
    /// poison the engine); segment read errors naming the segment (the operations before
    /// the failing one are applied and logged).
    pub fn batch(&mut self, ops: impl IntoIterator<Item = Op>) -> Result<Vec<Outcome>> {
        self.check_poisoned()?;
        let applied = self.apply_all(ops);
        self.commit()?;
        let out = applied?;
        self.after_commit()?;
        Ok(out)
    }

    /// Group commit: applies several batches in order, then writes all their log records
    /// with one `write` (and at most one fsync), then refreshes if due. One result per
    /// batch. An error shared by the whole group goes to the first batch as is and to the
    /// others as [`Error::Shared`].
    pub(crate) fn group(&mut self, batches: Vec<Vec<Op>>) -> Vec<Result<Vec<Outcome>>> {
        let n = batches.len();
        let shared = |first: Error| -> Vec<Result<Vec<Outcome>>> {
            let detail = first.to_string();
            let mut v = vec![Err(first)];
            v.extend((1..n).map(|_| {
                Err(Error::Shared {
                    detail: detail.clone(),
                })
            }));
            v
        };
        if let Err(e) = self.check_poisoned() {
            return shared(e);
        }
        let results: Vec<Result<Vec<Outcome>>> =
            batches.into_iter().map(|b| self.apply_all(b)).collect();
        if let Err(e) = self.commit() {
            return shared(e);
        }
        if let Err(e) = self.after_commit() {
            return shared(e);
        }
        results
    }

    fn apply_all(&mut self, ops: impl IntoIterator<Item = Op>) -> Result<Vec<Outcome>> {
        let mut out = Vec::new();
        for op in ops {
            out.push(self.apply(op, true)?);
        }
        Ok(out)
    }

    fn commit(&mut self) -> Result<()> {
        let durability = self.config.durability;
        self.wal
            .commit(durability)
            .inspect_err(|_| self.poisoned = true)
    }

    fn after_commit(&mut self) -> Result<()> {
        if self.buffer.rows() >= self.config.refresh_rows {
            self.refresh()?;
            if self.config.auto_merge && !self.background_merges {
                self.maybe_merge()?;
            }
        }
        Ok(())
    }

    /// Whether merges are left to the caller (a [`SharedEngine`](crate::SharedEngine)
    /// runs them on a merge thread) instead of running after a refresh.
    pub(crate) fn set_background_merges(&mut self, on: bool) {
        self.background_merges = on;
    }

    /// `create` of one point: see [`batch`](Self::batch).
    ///
    /// # Errors
    /// As [`batch`](Self::batch).
    pub fn create_point(&mut self, point: Point) -> Result<Outcome> {
        self.one(Op::Create(point))
    }

    /// `index` of one point: see [`batch`](Self::batch).
    ///
    /// # Errors
    /// As [`batch`](Self::batch).
    pub fn index_point(&mut self, point: Point) -> Result<Outcome> {
        self.one(Op::Index(point))
    }

    /// Deletes the point `id`: see [`batch`](Self::batch).
    ///
    /// # Errors
    /// As [`batch`](Self::batch).
    pub fn delete(&mut self, id: SyntheticId) -> Result<Outcome> {
        self.one(Op::Delete(id))
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

    /// Where `id` is live, if anywhere: the buffer, then the segments (see
    /// [`locate_in_segments`]).
    fn locate(
        &self,
        stats: &mut DedupStats,
        id: &SyntheticId,
        stream: Option<&Tsid>,
    ) -> Result<Option<Location>> {
        if let Some(key) = self.buffer_key(id) {
            if self.buffer.lookup(&key).is_some() {
                stats.live_map_hits += 1;
                return Ok(Some(Location::Buffer(key)));
            }
        }
        locate_in_segments(
            &self.slots,
            self.config.strategy,
            stats,
            id,
            self.keyer.as_deref(),
            stream,
        )
    }

    /// The live map key of `id`, if its series is known.
    fn buffer_key(&self, id: &SyntheticId) -> Option<Key> {
        match self.keyer {
            Some(_) => Some(Key::Event(*id)),
            None => self
                .series
                .get(&id.tsid())
                .map(|s| Key::Point(s, id.ts_millis())),
        }
    }

    fn one(&mut self, op: Op) -> Result<Outcome> {
        let mut v = self.batch([op])?;
        v.pop().ok_or(Error::Poisoned)
    }

    fn read(&self, loc: Option<Location>) -> Result<Option<Point>> {
        match loc {
            None => Ok(None),
            Some(Location::Buffer(key)) => Ok(self
                .buffer
                .lookup(&key)
                .and_then(|i| self.buffer.point(i, &self.series, &self.columns))),
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

    /// Runs the tiered merge policy until no tier holds
    /// [`merge_factor`](EngineConfig::with_merge_factor) segments, and returns the number
    /// of merges done. A segment's tier is ⌊log_factor(live rows)⌋; when a tier holds
    /// `factor` segments, its `factor` oldest are merged into one.
    ///
    /// # Errors
    /// As [`merge`](Self::merge).
    pub fn maybe_merge(&mut self) -> Result<usize> {
        let mut merges = 0;
        while let Some(group) = self.merge_candidates() {
            self.merge(&group)?;
            merges += 1;
        }
        Ok(merges)
    }

    fn merge_candidates(&self) -> Option<Vec<usize>> {
        let factor = self.config.merge_factor;
        let mut tiers: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
        for (i, s) in self.slots.iter().enumerate().filter(|(_, s)| !s.merging) {
            let live = s.segment.row_count().saturating_sub(s.tombstones.len());
            tiers
                .entry(live.max(1).ilog(factor as u64))
                .or_default()
                .push(i);
        }
        tiers
            .into_values()
            .find(|v| v.len() >= factor)
            .map(|v| v.into_iter().take(factor).collect())
    }

    /// Picks segments for a merge by the tiered policy (ignoring segments already in a
    /// merge) and prepares a [`MergeJob`] to run on another thread, or `None`.
    pub fn plan_merge(&mut self) -> Option<MergeJob> {
        let positions = self.merge_candidates()?;
        self.plan_positions(&positions)
    }

    /// A merge job for the segments at `positions` (sorted, deduplicated, those past the
    /// end ignored), or `None` when that leaves none.
    fn plan_positions(&mut self, positions: &[usize]) -> Option<MergeJob> {
        let mut positions: Vec<usize> = positions
            .iter()
            .copied()
            .filter(|&i| i < self.slots.len())
            .collect();
        positions.sort_unstable();
        positions.dedup();
        if positions.is_empty() {
            return None;
        }
        let id = self.next_segment;
        self.next_segment = id.saturating_add(1);
        let mut ids = Vec::new();
        let mut inputs = Vec::new();
        for &i in &positions {
            if let Some(s) = self.slots.get_mut(i) {
                s.merging = true;
                ids.push(s.id);
                inputs.push((Arc::clone(&s.segment), s.tombstones.clone()));
            }
        }
        Some(MergeJob {
            ids,
            inputs,
            new_id: id,
            path: segment_path(&self.dir, id),
            options: self.config.segment_options(true),
            keyer: self.keyer.clone(),
            bloom_fpr: self.config.bloom_strategy_fpr(),
        })
    }

    /// Installs a merged segment in place of its inputs: rows deleted since the job was
    /// planned are tombstoned in it (and written at once, as the log may no longer hold
    /// those deletes), then the manifest switches atomically and the inputs' files go. A
    /// merge whose inputs were merged away meanwhile is discarded; so is a failed one.
    ///
    /// # Errors
    /// The error of a failed merge (its inputs stay); segment and I/O errors.
    pub fn install_merge(&mut self, merged: Result<MergedSegment>) -> Result<()> {
        let m = match merged {
            Ok(m) => m,
            Err(e) => {
                self.slots.iter_mut().for_each(|s| s.merging = false);
                return Err(e);
            }
        };
        let result = self.install_inner(&m);
        if matches!(result, Ok(true)) {
            self.count_bloom_merge(m.bloom_ored);
        }
        for s in &mut self.slots {
            if m.ids.contains(&s.id) {
                s.merging = false;
            }
        }
        if !matches!(result, Ok(true)) {
            let _ = std::fs::remove_file(&m.path);
            let _ = std::fs::remove_file(Tombstones::path_for(&m.path, 1));
        }
        result.map(|_| ())
    }

    /// `Ok(false)` when discarded.
    fn install_inner(&mut self, m: &MergedSegment) -> Result<bool> {
        self.check_poisoned()?;
        let mut positions = Vec::new();
        for id in &m.ids {
            match self.slots.iter().position(|s| s.id == *id) {
                Some(i) => positions.push(i),
                None => return Ok(false),
            }
        }
        let mut new_slot = None;
        if m.rows > 0 {
            let entry = SegmentEntry {
                id: m.new_id,
                rows: m.rows,
                tombstones: None,
            };
            let mut slot = Slot::open(&self.dir, &entry, &mut self.interner)?;
            // Deletes that happened while the merge ran.
            for (&i, snapshot) in positions.iter().zip(&m.snapshots) {
                let Some(old) = self.slots.get(i) else {
                    continue;
                };
                for row in old.tombstones.dead().iter() {
                    let row = u64::from(row);
                    if snapshot.is_deleted(row) {
                        continue;
                    }
                    let p = old.segment.row(row).map_err(|e| old.err(e))?;
                    let id = self.id_of(&p)?;
                    let found = find_row(&slot, &id, self.keyer.as_deref(), Some(&p.tsid))?;
                    if let Some(r) = found {
                        slot.tombstones
                            .delete(r)
                            .map_err(|_| Error::BadRow { id, row: r })?;
                    }
                }
            }
            if !slot.tombstones.is_empty() {
                let next = slot.tombstones.next_generation();
                next.write_beside(&slot.path)?;
                slot.tomb_generation = Some(next.generation());
                slot.tombstones = next;
            }
            new_slot = Some(slot);
        }
        positions.sort_unstable();
        let first = positions.first().copied().unwrap_or(0);
        let mut segments = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            if i == first {
                segments.extend(new_slot.as_ref().map(Slot::entry));
            }
            if positions.binary_search(&i).is_err() {
                segments.push(s.entry());
            }
        }
        Manifest {
            next_segment: self.next_segment,
            wal_generation: self.wal.generation(),
            segments,
        }
        .write(&self.dir)?;
        let old: Vec<Slot> = positions
            .iter()
            .rev()
            .map(|&i| self.slots.remove(i))
            .collect();
        if let Some(slot) = new_slot {
            self.slots.insert(first.min(self.slots.len()), slot);
        }
        for s in old {
            remove_slot_files(s);
        }
        // Series only the merged-away segments held are gone from memory too.
        self.interner.prune();
        Ok(true)
    }

    /// Merges every live segment into one (a no-op with fewer than two, unless one has
    /// dead rows to drop).
    ///
    /// # Errors
    /// As [`merge`](Self::merge).
    pub fn merge_all(&mut self) -> Result<()> {
        let all: Vec<usize> = (0..self.slots.len()).collect();
        let single_clean =
            all.len() == 1 && self.slots.first().is_some_and(|s| s.tombstones.is_empty());
        if all.is_empty() || single_clean {
            return Ok(());
        }
        self.merge(&all)
    }

    /// Merges the segments at `positions` (indexes into the live list, oldest first;
    /// positions past its end are ignored) into
    /// one new segment holding their live rows, written with the current strategy's
    /// sections (the bloom filter or id index is rebuilt), placed where the oldest of
    /// them was. The manifest then names it instead of them, atomically; their files and
    /// tombstones are deleted. Tombstones not yet persisted are applied by leaving the
    /// dead rows out; the write-ahead log is kept, since replaying it over the merged
    /// segment gives the same state.
    ///
    /// On error nothing changes. Ingest refuses points that would make segments
    /// unmergeable (a tsid with other dimensions than a stored series, a column name
    /// with another kind than a stored column): such segments come only from files
    /// written elsewhere, and merging them is an [`Error::Segment`].
    ///
    /// # Errors
    /// [`Error::Poisoned`]; segment read and write errors; I/O errors.
    pub fn merge(&mut self, positions: &[usize]) -> Result<()> {
        self.check_poisoned()?;
        let Some(job) = self.plan_positions(positions) else {
            return Ok(());
        };
        let merged = job.run();
        self.install_merge(merged)
    }

    fn count_bloom_merge(&mut self, ored: Option<bool>) {
        match ored {
            Some(true) => self.stats.bloom_filters_ored += 1,
            Some(false) => self.stats.bloom_filters_rebuilt += 1,
            None => {}
        }
    }

    /// Fsyncs the write-ahead log.
    ///
    /// # Errors
    /// I/O errors (which poison the engine).
    pub fn sync(&mut self) -> Result<()> {
        self.check_poisoned()?;
        self.wal.sync().inspect_err(|_| self.poisoned = true)
    }

    /// Syncs the log and closes the engine. Dropping it does the same, ignoring errors.
    ///
    /// # Errors
    /// As [`sync`](Self::sync).
    pub fn close(mut self) -> Result<()> {
        self.sync()
    }

    fn check_poisoned(&self) -> Result<()> {
        if self.poisoned {
            Err(Error::Poisoned)
        } else {
            Ok(())
        }
    }

    /// Checks a normalized point against itself: name and keyword lengths, names given
    /// twice.
    fn validate(p: &Point) -> Option<Rejection> {
        for (name, value) in &p.dims {
            let long = match value {
                Dim::Keyword(s) => s.len().max(name.len()),
                _ => name.len(),
            };
            if long > MAX_STRING_LEN {
                return Some(Rejection::TooLong { len_bytes: long });
            }
        }
        if let Some((name, _)) = p.metrics.iter().find(|(n, _)| n.len() > MAX_STRING_LEN) {
            return Some(Rejection::TooLong {
                len_bytes: name.len(),
            });
        }
        for (name, value) in &p.extras {
            let long = match value {
                Extra::Keyword(s) => s.len().max(name.len()),
                Extra::Bool(_) => name.len(),
            };
            if long > MAX_STRING_LEN {
                return Some(Rejection::TooLong { len_bytes: long });
            }
        }
        if let Some(w) = p.extras.windows(2).find(|w| w[0].0 == w[1].0) {
            return Some(Rejection::DuplicateExtra {
                name: w[0].0.clone(),
            });
        }
        if let Some(w) = p.dims.windows(2).find(|w| w[0].0 == w[1].0) {
            return Some(Rejection::DuplicateDimension {
                name: w[0].0.clone(),
            });
        }
        if let Some(w) = p.metrics.windows(2).find(|w| w[0].0 == w[1].0) {
            return Some(Rejection::DuplicateMetric {
                name: w[0].0.clone(),
            });
        }
        None
    }

    /// The series of `tsid` with dimensions `dims` (sorted, checked): known, or
    /// registered now. A tsid must name one dimension set, here and in the segments (or
    /// the segments could never be merged); with derived tsids a known tsid's dimensions
    /// are not compared again.
    fn series_ref(
        &mut self,
        tsid: Tsid,
        dims: &[(String, Dim)],
    ) -> std::result::Result<u32, Rejection> {
        if let Some(s) = self.series.get(&tsid) {
            let same =
                self.config.derived_tsids || self.series.entry(s).is_some_and(|e| *e.dims == *dims);
            return if same {
                Ok(s)
            } else {
                Err(Rejection::InconsistentDimensions { tsid })
            };
        }
        let stored = self
            .slots
            .iter()
            .rev()
            .find_map(|s| s.segment.series_by_tsid(&tsid));
        if stored.is_some_and(|s| *s.dims != *dims) {
            return Err(Rejection::InconsistentDimensions { tsid });
        }
        let shared = self.interner.intern(tsid, dims.to_vec());
        Ok(self.series.insert(tsid, shared))
    }

    /// The column `name` of `kind`: known, or registered now.
    fn column_id(
        &mut self,
        name: &str,
        kind: ColumnKind,
    ) -> std::result::Result<ColumnId, Rejection> {
        match self.columns.get(name) {
            Some(id) => match self.columns.kind(id) {
                Some(k) if k == kind => Ok(id),
                k => Err(Rejection::KindConflict {
                    name: name.to_owned(),
                    expected: k.map_or("?", ColumnKind::name),
                    found: kind.name(),
                }),
            },
            None => {
                if name.len() > MAX_STRING_LEN {
                    return Err(Rejection::TooLong {
                        len_bytes: name.len(),
                    });
                }
                if self.columns.len() >= MAX_COLUMNS {
                    return Err(Rejection::TooManyColumns);
                }
                Ok(self.columns.insert(name, kind))
            }
        }
    }

    /// Registers series `tsid` with dimensions `dims` (in any order) and returns its ref,
    /// for [`append`](Self::append): the dimensions are checked and stored once, then
    /// every append names the series by its ref, as Prometheus' `Appender` does. Asking
    /// again for a known series returns the same ref.
    ///
    /// # Errors
    /// [`Error::Rejected`] for dimensions given twice or too long, or a tsid known with
    /// other dimensions (here or in a segment).
    pub fn series(&mut self, tsid: Tsid, mut dims: Vec<(String, Dim)>) -> Result<SeriesRef> {
        dims.sort_by(|a, b| a.0.cmp(&b.0));
        let probe = Point {
            tsid,
            dims,
            ts_millis: 0,
            metrics: Vec::new(),
            extras: Vec::new(),
        };
        if let Some(reason) = Engine::validate(&probe) {
            return Err(Error::Rejected { reason });
        }
        self.series_ref(tsid, &probe.dims)
            .map(SeriesRef)
            .map_err(|reason| Error::Rejected { reason })
    }

    /// The ref of a series already registered (by [`series`](Self::series) or by a
    /// point), without its dimensions.
    pub fn series_by_tsid(&self, tsid: &Tsid) -> Option<SeriesRef> {
        self.series.get(tsid).map(SeriesRef)
    }

    /// Registers the metric or extra column `name` holding `kind` values and returns its
    /// ref, for [`append`](Self::append).
    ///
    /// # Errors
    /// [`Error::Rejected`] for a name known with another kind, too long, or past
    /// [`MAX_COLUMNS`].
    pub fn column(&mut self, name: &str, kind: ColumnKind) -> Result<ColumnRef> {
        self.column_id(name, kind)
            .map(ColumnRef)
            .map_err(|reason| Error::Rejected { reason })
    }

    /// Runs a batch of appends by ref (see [`AppendBatch`]) with `create` or `index`
    /// semantics per item, and returns one outcome per append, exactly as
    /// [`batch`](Self::batch) does for points: logged with one `write` (and fsynced per
    /// the durability policy) before returning, then a refresh if due.
    ///
    /// # Errors
    /// As [`batch`](Self::batch); a ref of another engine is rejected per item.
    pub fn append(&mut self, batch: &AppendBatch) -> Result<Vec<Outcome>> {
        self.check_poisoned()?;
        let applied = self.append_all(batch);
        self.commit()?;
        let out = applied?;
        self.after_commit()?;
        Ok(out)
    }

    fn append_all(&mut self, batch: &AppendBatch) -> Result<Vec<Outcome>> {
        let mut out = Vec::with_capacity(batch.len());
        let mut values = std::mem::take(&mut self.scratch.0);
        let mut extras = std::mem::take(&mut self.scratch.1);
        let result = (|| {
            for i in 0..batch.len() {
                let Some(item) = batch.get(i) else { break };
                out.push(self.append_one(&item, &mut values, &mut extras, true)?);
            }
            Ok(())
        })();
        self.scratch = (values, extras);
        result.map(|()| out)
    }

    /// Checks one append's refs and values, then inserts it.
    fn append_one(
        &mut self,
        item: &AppendItem<'_>,
        values: &mut Vec<(u32, MetricValue)>,
        extras: &mut Vec<(u32, Extra)>,
        log: bool,
    ) -> Result<Outcome> {
        let SeriesRef(s) = item.series;
        let Some(tsid) = self.series.entry(s).map(|e| e.tsid) else {
            let id = SyntheticId::new(Tsid::from_bytes([0; tidemark_tsid::TSID_LEN]), item.ts);
            let reason = Rejection::UnknownRef { what: "series" };
            return Ok(Outcome::Rejected { id, reason });
        };
        let reject = |reason| {
            Ok(Outcome::Rejected {
                id: SyntheticId::new(tsid, item.ts),
                reason,
            })
        };
        values.clear();
        for &(ColumnRef(c), v) in item.values {
            let ColumnId::Metric(m) = c else {
                return reject(Rejection::UnknownRef {
                    what: "metric column",
                });
            };
            match self.columns.kind(c) {
                Some(k) if k == ColumnKind::of_metric(&v) => values.push((m, v)),
                Some(k) => {
                    return reject(Rejection::KindConflict {
                        name: self.columns.name(c).unwrap_or("?").to_owned(),
                        expected: k.name(),
                        found: ColumnKind::of_metric(&v).name(),
                    });
                }
                None => {
                    return reject(Rejection::UnknownRef {
                        what: "metric column",
                    });
                }
            }
        }
        extras.clear();
        for (ColumnRef(c), v) in item.extras {
            let ColumnId::Extra(e) = *c else {
                return reject(Rejection::UnknownRef {
                    what: "extra column",
                });
            };
            if let Extra::Keyword(k) = v {
                if k.len() > MAX_STRING_LEN {
                    return reject(Rejection::TooLong { len_bytes: k.len() });
                }
            }
            match self.columns.kind(*c) {
                Some(k) if k == ColumnKind::of_extra(v) => extras.push((e, v.clone())),
                Some(k) => {
                    return reject(Rejection::KindConflict {
                        name: self.columns.name(*c).unwrap_or("?").to_owned(),
                        expected: k.name(),
                        found: ColumnKind::of_extra(v).name(),
                    });
                }
                None => {
                    return reject(Rejection::UnknownRef {
                        what: "extra column",
                    });
                }
            }
        }
        if let Some(name) = self.sort_refs(values, extras) {
            return reject(Rejection::DuplicateMetric { name });
        }
        self.insert(item.create, s, item.ts, values, extras, None, log)
    }

    /// Sorts a point's values by column ref; the name of a column given twice.
    fn sort_refs(
        &self,
        values: &mut [(u32, MetricValue)],
        extras: &mut [(u32, Extra)],
    ) -> Option<String> {
        if !values.windows(2).all(|w| w[0].0 < w[1].0) {
            values.sort_unstable_by_key(|(c, _)| *c);
            if let Some(w) = values.windows(2).find(|w| w[0].0 == w[1].0) {
                return Some(self.columns.name(ColumnId::Metric(w[0].0))?.to_owned());
            }
        }
        if !extras.windows(2).all(|w| w[0].0 < w[1].0) {
            extras.sort_unstable_by_key(|(c, _)| *c);
            if let Some(w) = extras.windows(2).find(|w| w[0].0 == w[1].0) {
                return Some(self.columns.name(ColumnId::Extra(w[0].0))?.to_owned());
            }
        }
        None
    }

    /// A `create` or `index` of a point: validated, resolved to refs, then inserted.
    fn insert_point(&mut self, create: bool, p: Point, log: bool) -> Result<Outcome> {
        let p = p.normalized();
        let fallback_id = SyntheticId::new(p.tsid, p.ts_millis);
        let reject = |reason| {
            Ok(Outcome::Rejected {
                id: fallback_id,
                reason,
            })
        };
        if let Some(reason) = Engine::validate(&p) {
            return reject(reason);
        }
        let s = match self.series_ref(p.tsid, &p.dims) {
            Ok(s) => s,
            Err(reason) => return reject(reason),
        };
        let mut values = std::mem::take(&mut self.scratch.0);
        let mut extras = std::mem::take(&mut self.scratch.1);
        values.clear();
        extras.clear();
        let mut rejection = None;
        for (name, v) in &p.metrics {
            match self.column_id(name, ColumnKind::of_metric(v)) {
                Ok(ColumnId::Metric(c)) => values.push((c, *v)),
                Ok(ColumnId::Extra(_)) => {}
                Err(r) => {
                    rejection = Some(r);
                    break;
                }
            }
        }
        if rejection.is_none() {
            for (name, v) in &p.extras {
                match self.column_id(name, ColumnKind::of_extra(v)) {
                    Ok(ColumnId::Extra(c)) => extras.push((c, v.clone())),
                    Ok(ColumnId::Metric(_)) => {}
                    Err(r) => {
                        rejection = Some(r);
                        break;
                    }
                }
            }
        }
        let result = match rejection {
            Some(reason) => reject(reason),
            None => {
                values.sort_unstable_by_key(|(c, _)| *c);
                extras.sort_unstable_by_key(|(c, _)| *c);
                self.insert(create, s, p.ts_millis, &values, &extras, Some(&p), log)
            }
        };
        self.scratch = (values, extras);
        result
    }

    /// The dedup check and the insert of a point by refs (values sorted by column ref):
    /// its id, where that id is live, then the outcome of `create` (conflict or store) or
    /// `index` (replace or store). `point` is the same point, when the caller has it
    /// (events need one for the fingerprint).
    #[allow(clippy::too_many_arguments)]
    fn insert(
        &mut self,
        create: bool,
        s: u32,
        ts: i64,
        values: &[(u32, MetricValue)],
        extras: &[(u32, Extra)],
        point: Option<&Point>,
        log: bool,
    ) -> Result<Outcome> {
        let Some(tsid) = self.series.entry(s).map(|e| e.tsid) else {
            return Err(Error::Poisoned);
        };
        let (id, key, hint) = match self.keyer.as_deref() {
            None => (SyntheticId::new(tsid, ts), Key::Point(s, ts), None),
            Some(k) => {
                let built;
                let p = match point {
                    Some(p) => p,
                    None => {
                        built = self.point_of(s, ts, values, extras);
                        &built
                    }
                };
                match k.id_of(p) {
                    Ok(id) => (id, Key::Event(id), k.covers_dims(p).then_some(tsid)),
                    Err(detail) => {
                        return Ok(Outcome::Rejected {
                            id: SyntheticId::new(tsid, ts),
                            reason: Rejection::EventId { detail },
                        });
                    }
                }
            }
        };
        let loc = if self.config.strategy == Strategy::None {
            None
        } else {
            self.stats.checks += 1;
            let mut stats = std::mem::take(&mut self.stats);
            let loc = if self.buffer.lookup(&key).is_some() {
                stats.live_map_hits += 1;
                Ok(Some(Location::Buffer(key)))
            } else {
                locate_in_segments(
                    &self.slots,
                    self.config.strategy,
                    &mut stats,
                    &id,
                    self.keyer.as_deref(),
                    hint.as_ref(),
                )
            };
            self.stats = stats;
            loc?
        };
        if create && loc.is_some() {
            return Ok(Outcome::Conflict { id });
        }
        if log {
            self.log_definitions(s, values, extras);
            self.wal
                .append_with(|out| record::encode_append(out, create, s, ts, values, extras));
        }
        self.wal_records += 1;
        if let Some(l) = loc {
            self.kill(id, l)?;
        }
        self.buffer.push(key, s, ts, values, extras);
        Ok(if create {
            Outcome::Created { id }
        } else {
            Outcome::Indexed {
                id,
                replaced: loc.is_some(),
            }
        })
    }

    /// Logs the definitions of a point's series and columns not yet defined in the
    /// current log file.
    fn log_definitions(&mut self, s: u32, values: &[(u32, MetricValue)], extras: &[(u32, Extra)]) {
        let generation = self.wal.generation();
        let Engine {
            series,
            columns,
            wal,
            ..
        } = self;
        if let Some(e) = series.entry_mut(s) {
            if e.logged != generation {
                wal.append_with(|out| record::encode_series(out, s, &e.tsid, &e.dims));
                e.logged = generation;
            }
        }
        let ids = values
            .iter()
            .map(|(c, _)| ColumnId::Metric(*c))
            .chain(extras.iter().map(|(c, _)| ColumnId::Extra(*c)));
        for id in ids {
            if columns.logged(id) == generation {
                continue;
            }
            let (Some(kind), Some(name)) = (columns.kind(id), columns.name(id)) else {
                continue;
            };
            let logged_ref = match id {
                ColumnId::Metric(c) => c,
                ColumnId::Extra(c) => c | record::EXTRA_REF_BIT,
            };
            wal.append_with(|out| record::encode_column(out, logged_ref, kind, name));
            columns.set_logged(id, generation);
        }
    }

    /// A point built from refs (events: the fingerprint needs names and values).
    fn point_of(
        &self,
        s: u32,
        ts: i64,
        values: &[(u32, MetricValue)],
        extras: &[(u32, Extra)],
    ) -> Point {
        let mut p = match self.series.entry(s) {
            Some(e) => {
                let mut p = Point::new(e.tsid, ts);
                p.dims = e.dims.to_vec();
                p
            }
            None => Point::new(Tsid::from_bytes([0; tidemark_tsid::TSID_LEN]), ts),
        };
        for (c, v) in values {
            if let Some(name) = self.columns.name(ColumnId::Metric(*c)) {
                p.metrics.push((name.to_owned(), *v));
            }
        }
        for (c, v) in extras {
            if let Some(name) = self.columns.name(ColumnId::Extra(*c)) {
                p.extras.push((name.to_owned(), v.clone()));
            }
        }
        p.normalized()
    }

    /// Replays the log's records on open: points by value and by ref (refs mapped
    /// through the definitions before them), deletes.
    fn replay(&mut self, records: Vec<(Record, u64)>) -> Result<()> {
        let mut series_map: HashMap<u32, u32> = HashMap::new();
        let mut column_map: HashMap<u32, ColumnId> = HashMap::new();
        let path = self.wal.path().to_path_buf();
        let corrupt = |offset: u64, detail: String| Error::Corrupt {
            path: path.clone(),
            offset,
            detail,
        };
        let mut values = Vec::new();
        let mut extras = Vec::new();
        for (r, offset) in records {
            match r {
                Record::Create(p) => {
                    self.insert_point(true, p, false)?;
                }
                Record::Index(p) => {
                    self.insert_point(false, p, false)?;
                }
                Record::Delete(id) => {
                    self.apply(Op::Delete(id), false)?;
                }
                Record::Series { series, tsid, dims } => {
                    let s = match self.series.get(&tsid) {
                        Some(s) => s,
                        None => {
                            let shared = self.interner.intern(tsid, dims);
                            self.series.insert(tsid, shared)
                        }
                    };
                    series_map.insert(series, s);
                }
                Record::Column { column, kind, name } => {
                    let id = self
                        .column_id(&name, kind)
                        .map_err(|r| corrupt(offset, format!("column `{name}`: {r}")))?;
                    column_map.insert(column, id);
                }
                Record::Append {
                    create,
                    series,
                    ts_millis,
                    metrics,
                    extras: logged_extras,
                } => {
                    let s = *series_map
                        .get(&series)
                        .ok_or_else(|| corrupt(offset, format!("undefined series ref {series}")))?;
                    values.clear();
                    for (c, v) in metrics {
                        match column_map.get(&c) {
                            Some(ColumnId::Metric(m)) => values.push((*m, v)),
                            _ => return Err(corrupt(offset, format!("undefined column ref {c}"))),
                        }
                    }
                    extras.clear();
                    for (c, v) in logged_extras {
                        match column_map.get(&(c | record::EXTRA_REF_BIT)) {
                            Some(ColumnId::Extra(e)) => extras.push((*e, v)),
                            _ => return Err(corrupt(offset, format!("undefined column ref {c}"))),
                        }
                    }
                    values.sort_unstable_by_key(|(c, _)| *c);
                    extras.sort_unstable_by_key(|(c, _)| *c);
                    self.insert(create, s, ts_millis, &values, &extras, None, false)?;
                }
            }
        }
        // The refs logged from here on are this process's: define them again.
        self.series.unlog();
        self.columns.unlog();
        Ok(())
    }

    fn kill(&mut self, id: SyntheticId, loc: Location) -> Result<()> {
        match loc {
            Location::Buffer(key) => {
                self.buffer.kill(&key);
            }
            Location::Segment { slot, row } => {
                let s = self.slots.get_mut(slot).ok_or(Error::BadRow { id, row })?;
                s.tombstones
                    .delete(row)
                    .map_err(|_| Error::BadRow { id, row })?;
                s.dirty = true;
            }
        }
        Ok(())
    }

    /// Applies one operation; `log` appends its record to the pending log batch.
    fn apply(&mut self, op: Op, log: bool) -> Result<Outcome> {
        match op {
            Op::Create(p) => self.insert_point(true, p, log),
            Op::Index(p) => self.insert_point(false, p, log),
            Op::Delete(id) => {
                let mut scratch = DedupStats::default();
                let Some(l) = self.locate(&mut scratch, &id, None)? else {
                    return Ok(Outcome::NotFound { id });
                };
                if log {
                    self.wal.append_with(|out| record::encode_delete(out, &id));
                }
                self.wal_records += 1;
                self.kill(id, l)?;
                Ok(Outcome::Deleted { id })
            }
            Op::Get(id) => Ok(match self.get(&id)? {
                Some(p) => Outcome::Found(p),
                None => Outcome::NotFound { id },
            }),
        }
    }

    /// Writes the buffer as a new segment, persists changed tombstones, starts a new
    /// write-ahead log generation and switches the manifest to name them, then deletes
    /// the old log and tombstone files. Does nothing when there is nothing to persist.
    ///
    /// On error the files written so far are removed and the old manifest and log still
    /// describe the engine; an error after the buffer went to the segment writer poisons
    /// the engine ([`Error::Poisoned`] until reopened, which replays the log).
    ///
    /// # Errors
    /// [`Error::Poisoned`]; segment write errors; I/O errors.
    pub fn refresh(&mut self) -> Result<()> {
        self.check_poisoned()?;
        let dirty = self.slots.iter().any(|s| s.dirty);
        if self.buffer.is_empty() && !dirty && self.wal_records == 0 {
            return Ok(());
        }
        let mut created = Vec::new();
        let result = self.refresh_inner(&mut created);
        if result.is_err() {
            // The buffer and the log are untouched: the engine stays as it was.
            for path in created {
                let _ = std::fs::remove_file(path);
            }
        }
        result
    }

    fn refresh_inner(&mut self, created: &mut Vec<PathBuf>) -> Result<()> {
        // 1. The new segment.
        let mut new_slot = None;
        let mut next_segment = self.next_segment;
        if !self.buffer.is_empty() {
            let id = self.next_segment;
            let path = segment_path(&self.dir, id);
            let view = BufferView {
                buffer: &self.buffer,
                series: &self.series,
                columns: &self.columns,
            };
            let file = AtomicFile::create(&path).map_err(Error::io(&path))?;
            let (file, meta) = write_batch(&view, self.config.segment_options(false), None, file)
                .map_err(|e| Error::Segment(e.in_file(&path)))?;
            created.push(path.clone());
            file.commit().map_err(Error::io(&path))?;
            let entry = SegmentEntry {
                id,
                rows: meta.row_count,
                tombstones: None,
            };
            new_slot = Some(Slot::open(&self.dir, &entry, &mut self.interner)?);
            next_segment = id.saturating_add(1);
        }
        // 2. Changed tombstones, as their next generation.
        let mut new_tombs = Vec::new();
        for (i, s) in self.slots.iter().enumerate().filter(|(_, s)| s.dirty) {
            let next = s.tombstones.next_generation();
            let written = next.write_beside(&s.path)?;
            created.push(written);
            new_tombs.push((i, next));
        }
        // 3. The next log generation.
        let wal_gen = self.wal.generation().saturating_add(1);
        let stale = wal_path(&self.dir, wal_gen);
        if stale.exists() {
            std::fs::remove_file(&stale).map_err(Error::io(&stale))?;
        }
        created.push(stale);
        let wal = Wal::create(&self.dir, wal_gen)?;
        // 4. The manifest switch: from here on the new files are the engine.
        let mut segments: Vec<SegmentEntry> = self.slots.iter().map(Slot::entry).collect();
        for (i, t) in &new_tombs {
            if let Some(e) = segments.get_mut(*i) {
                e.tombstones = Some(t.generation());
            }
        }
        segments.extend(new_slot.as_ref().map(Slot::entry));
        Manifest {
            next_segment,
            wal_generation: wal_gen,
            segments,
        }
        .write(&self.dir)?;
        created.clear();
        // 5. Memory follows; then the old files go (best effort: open removes orphans).
        let mut obsolete = vec![self.wal.path().to_path_buf()];
        for (i, t) in new_tombs {
            if let Some(s) = self.slots.get_mut(i) {
                if let Some(g) = s.tomb_generation {
                    obsolete.push(Tombstones::path_for(&s.path, g));
                }
                s.tomb_generation = Some(t.generation());
                s.tombstones = t;
                s.dirty = false;
            }
        }
        self.slots.extend(new_slot);
        self.next_segment = next_segment;
        self.wal = wal;
        self.wal_records = 0;
        self.buffer.clear();
        for path in obsolete {
            let _ = std::fs::remove_file(path);
        }
        Ok(())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if !self.poisoned {
            let _ = self.wal.sync();
        }
    }
}

/// Deletes a replaced segment's files (best effort: open removes orphans). Readers of a
/// background merge may still map it; on Unix the mapping outlives the name.
fn remove_slot_files(s: Slot) {
    let path = s.path.clone();
    let tombs = s.tomb_generation;
    drop(s);
    let _ = std::fs::remove_file(&path);
    if let Some(g) = tombs {
        let _ = std::fs::remove_file(Tombstones::path_for(&path, g));
    }
}

/// The dedup check in the segments: where `id` is live there, if anywhere, newest
/// segment first. Counts into `stats` (callers pass a scratch value for lookups that are
/// not dedup checks).
fn locate_in_segments(
    slots: &[Slot],
    strategy: Strategy,
    stats: &mut DedupStats,
    id: &SyntheticId,
    keyer: Option<&EventKeyer>,
    stream: Option<&Tsid>,
) -> Result<Option<Location>> {
    let tsid = id.tsid();
    let ts = id.ts_millis();
    for (i, slot) in slots.iter().enumerate().rev() {
        if ts < slot.min_ts || ts > slot.max_ts {
            stats.segments_pruned_by_time += 1;
            continue;
        }
        let seg = &slot.segment;
        let row = match strategy {
            Strategy::Inverted if slot.has_id_index => {
                let start = Instant::now();
                let row = seg.lookup_id(id).map_err(|e| slot.err(e))?;
                stats.verifications += 1;
                stats.verification_nanos += start.elapsed().as_nanos() as u64;
                row
            }
            Strategy::Bloom if slot.has_bloom => {
                if !seg.may_contain_id(id).map_err(|e| slot.err(e))? {
                    stats.bloom_negatives += 1;
                    continue;
                }
                let row = verify(slot, stats, id, keyer, stream)?;
                if row.is_none() {
                    stats.false_positives += 1;
                }
                row
            }
            Strategy::SeriesRange | Strategy::SeriesRangeBloom => {
                let in_range = |s: &tidemark_segment::Series| (s.min_ts..=s.max_ts).contains(&ts);
                let maybe = match (keyer, stream) {
                    // An event id does not name its stream: any stream covering ts,
                    // unless the caller knows it.
                    (Some(_), None) => seg.series().iter().any(in_range),
                    (Some(_), Some(t)) => seg.series_by_tsid(t).is_some_and(in_range),
                    (None, _) => seg.series_by_tsid(&tsid).is_some_and(in_range),
                };
                if !maybe {
                    stats.series_range_negatives += 1;
                    continue;
                }
                if strategy == Strategy::SeriesRangeBloom
                    && slot.has_bloom
                    && !seg.may_contain_id(id).map_err(|e| slot.err(e))?
                {
                    stats.bloom_negatives += 1;
                    continue;
                }
                let row = verify(slot, stats, id, keyer, stream)?;
                if row.is_none() {
                    stats.false_positives += 1;
                }
                row
            }
            // A segment written under another strategy lacks the section: verify.
            _ => verify(slot, stats, id, keyer, stream)?,
        };
        if let Some(row) = row {
            if slot.tombstones.is_deleted(row) {
                // At most one copy of an id is live, and this one is dead; an older
                // segment may only hold dead copies, but looking costs little.
                continue;
            }
            stats.true_duplicates += 1;
            return Ok(Some(Location::Segment { slot: i, row }));
        }
    }
    Ok(None)
}

fn verify(
    slot: &Slot,
    stats: &mut DedupStats,
    id: &SyntheticId,
    keyer: Option<&EventKeyer>,
    stream: Option<&Tsid>,
) -> Result<Option<RowId>> {
    let start = Instant::now();
    let row = find_row(slot, id, keyer, stream)?;
    stats.verifications += 1;
    stats.verification_nanos += start.elapsed().as_nanos() as u64;
    Ok(row)
}

/// The row of `id` in the slot's columns: a time-series id names its series and
/// timestamp; an event id is matched by recomputing the fingerprints of the rows of its
/// timestamp, in its stream when known (`stream`), else in every stream covering it.
fn find_row(
    slot: &Slot,
    id: &SyntheticId,
    keyer: Option<&EventKeyer>,
    stream: Option<&Tsid>,
) -> Result<Option<RowId>> {
    let seg = &slot.segment;
    let Some(k) = keyer else {
        return seg
            .find(&id.tsid(), id.ts_millis())
            .map_err(|e| slot.err(e));
    };
    let ts = id.ts_millis();
    let candidates: Vec<&tidemark_segment::Series> = match stream {
        Some(t) => seg.series_by_tsid(t).into_iter().collect(),
        None => seg.series().iter().collect(),
    };
    for s in candidates {
        if ts < s.min_ts || ts > s.max_ts {
            continue;
        }
        let rows = seg.find_all(&s.tsid, ts).map_err(|e| slot.err(e))?;
        if rows.is_empty() {
            continue;
        }
        // The run's rows decoded together: each block once. (Keeping decoded blocks
        // per segment did not pay: 32 blocks per segment thrash across 100 streams.)
        let points = seg.points(rows.clone(), |_| true)?;
        for (row, p) in rows.zip(points) {
            // Decoded points come normalized (names in column order).
            if k.id_of(&p).as_ref() == Ok(id) {
                return Ok(Some(row));
            }
        }
    }
    Ok(None)
}

/// The event-id keyer of an events-mode config.
fn keyer_of(config: &EngineConfig) -> Result<Option<Arc<EventKeyer>>> {
    match config.mode() {
        Mode::TimeSeries => Ok(None),
        Mode::Events(ids) => Ok(Some(Arc::new(ids.keyer()?))),
    }
}

/// Removes files of this engine's naming patterns that the manifest does not name: a
/// segment, tombstone or log written by a refresh that did not reach its manifest
/// switch, the manifest's temporary file, and writers' temporary files.
fn remove_orphans(dir: &Path, manifest: &Manifest) -> Result<Vec<Warning>> {
    let live_segments: HashSet<u64> = manifest.segments.iter().map(|s| s.id).collect();
    let live_tombs: HashSet<(u64, u64)> = manifest
        .segments
        .iter()
        .filter_map(|s| s.tombstones.map(|g| (s.id, g)))
        .collect();
    let mut removed = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(Error::io(dir))?;
    for entry in entries {
        let entry = entry.map_err(Error::io(dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let temporary =
            name == "MANIFEST.tmp" || (name.starts_with(".seg-") && name.contains(".tmp-"));
        let orphan = if temporary {
            true
        } else if let Some(g) = parse_wal_name(name) {
            g != manifest.wal_generation
        } else if let Some(id) = parse_segment_name(name) {
            !live_segments.contains(&id)
        } else if let Some((seg, g)) = name.split_once(".del.") {
            match (parse_segment_name(seg), g.parse::<u64>()) {
                (Some(id), Ok(g)) => !live_tombs.contains(&(id, g)),
                _ => false,
            }
        } else {
            false
        };
        if orphan {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(Error::io(&path))?;
            removed.push(Warning::RemovedOrphan { path });
        }
    }
    if !removed.is_empty() {
        crate::fsutil::sync_dir(dir)?;
    }
    Ok(removed)
}
