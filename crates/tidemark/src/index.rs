//! An index: a directory holding the mapping, the engine's files and a write lock.

mod attach;
mod samples;

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use tidemark_dedup::{
    AppendBatch, ColumnKind, ColumnRef, EngineConfig, EventIds, Mode, Op, Outcome, PartitionConfig,
    PartitionedEngine, Rejection, SeriesRef,
};
use tidemark_segment::{Extra, MetricValue, Point};
use tidemark_tsid::SyntheticId;

use crate::bulk::{Action, BulkItem, ItemResult, ItemStatus};
use crate::counters::Counters;
use crate::doc::{DocParser, point_to_doc};
use crate::error::{Error, Result};
use crate::mapping::{IndexMode, Mapping};
use crate::row::{Row, decode_dims};

/// The mapping file in an index directory (the mapping as given, pretty-printed).
pub const MAPPING_FILE: &str = "mapping.json";
/// The lock file in an index directory: one process at a time holds an OS lock on it.
pub const LOCK_FILE: &str = "LOCK";
/// Cumulative ingest and dedup counters, saved after each write call.
pub const COUNTERS_FILE: &str = "counters.json";

/// A prepared item: the document read through the mapping (on any thread), ready for the
/// writer.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) line: u64,
    pub(crate) action: Action,
    pub(crate) id: Option<String>,
    pub(crate) ignored: u64,
    pub(crate) work: Work,
    /// Whether the result carries the `_id` text (formatting it is a tenth of a
    /// label-keyed sample's cost, and the metrics protocols never answer it).
    pub(crate) id_text: bool,
}

#[derive(Debug)]
pub(crate) enum Work {
    Store(Row),
    Delete,
    Update(Point),
    Failed(String),
}

impl Prepared {
    /// Reads `item` through `parser`.
    pub(crate) fn of_item(parser: &mut DocParser, item: BulkItem) -> Prepared {
        let work_of = |parser: &mut DocParser, doc: Option<&Value>| -> (Work, u64) {
            match (item.action, doc) {
                (Action::Delete, _) => (Work::Delete, 0),
                (_, None) => (Work::Failed("missing document".to_owned()), 0),
                (Action::Update, Some(d)) => {
                    let inner = match d {
                        Value::Object(o) => o.get("doc"),
                        _ => None,
                    };
                    match inner {
                        None => (
                            Work::Failed(
                                "an update needs {\"doc\": {...}} (scripts are not supported)"
                                    .to_owned(),
                            ),
                            0,
                        ),
                        Some(inner) => match parser.parse_partial(inner) {
                            Ok((p, ignored)) => (Work::Update(p), ignored),
                            Err(e) => (Work::Failed(e.to_string()), 0),
                        },
                    }
                }
                (_, Some(d)) => match parser.parse_value(d) {
                    Ok(parsed) => (Work::Store(parsed.row), parsed.ignored_fields),
                    Err(e) => (Work::Failed(e.to_string()), 0),
                },
            }
        };
        let (work, ignored) = work_of(parser, item.doc.as_ref());
        Prepared {
            line: item.line,
            action: item.action,
            id: item.id,
            ignored,
            work,
            id_text: true,
        }
    }

    /// Reads one NDJSON document line; `id_text`: whether its result carries the `_id`.
    pub(crate) fn of_line(
        parser: &mut DocParser,
        line: u64,
        action: Action,
        text: &[u8],
        id_text: bool,
    ) -> Prepared {
        let work = match std::str::from_utf8(text) {
            Err(e) => (Work::Failed(format!("not valid UTF-8: {e}")), 0),
            Ok(s) => match parser.parse_line(s) {
                Ok(parsed) => (Work::Store(parsed.row), parsed.ignored_fields),
                Err(e) => (Work::Failed(e.to_string()), 0),
            },
        };
        Prepared {
            line,
            action,
            id: None,
            ignored: work.1,
            work: work.0,
            id_text,
        }
    }

    pub(crate) fn failed(line: u64, action: Action, reason: String) -> Prepared {
        Prepared {
            line,
            action,
            id: None,
            ignored: 0,
            work: Work::Failed(reason),
            id_text: true,
        }
    }
}

/// Per field of a mapping, the engine's column for its values, once known.
type FieldColumns = Vec<Option<(ColumnRef, ColumnKind)>>;
/// One document's metric values by column ref.
type RefValues = Vec<(ColumnRef, MetricValue)>;
/// One document's extras by column ref.
type RefExtras = Vec<(ColumnRef, Extra)>;

/// The stores and deletes of [`Index::apply`] not yet sent to the engine: appends by
/// ref or operations (one of the two is empty), and per item its line, action and
/// ignored-field count.
struct Run {
    ops: Vec<Op>,
    appends: AppendBatch,
    /// Per item sent to the engine: line, action, ignored fields, whether to format `_id`.
    pending: Vec<(u64, Action, u64, bool)>,
}

/// A Tidemark index: a directory with the mapping (`mapping.json`), the engine's files
/// (write-ahead log, segments, manifest), cumulative counters and a lock file. One
/// process at a time may open it: the lock is an OS file lock, released by the kernel
/// when the process dies, so a killed process never blocks the next open.
///
/// ```
/// use serde_json::json;
/// use tidemark::{Index, Mapping, BulkItem};
///
/// let dir = tempfile::tempdir()?;
/// let mapping = Mapping::from_value(json!({"mappings": {"properties": {
///     "host": {"type": "keyword", "time_series_dimension": true},
///     "cpu": {"type": "double", "time_series_metric": "gauge"}}}}))?;
/// let mut index = Index::create(dir.path(), mapping)?;
/// let doc = json!({"@timestamp": "2025-11-30T00:00:00Z", "host": "a", "cpu": 0.5});
/// let first = index.bulk(vec![BulkItem::create(doc.clone())])?;
/// let again = index.bulk(vec![BulkItem::create(doc)])?;
/// assert_eq!(first[0].http_status(), 201);
/// assert_eq!(again[0].http_status(), 409); // a duplicate, not an error
/// let stored = index.get(first[0].id.as_deref().unwrap_or_default())?;
/// assert_eq!(stored.unwrap()["cpu"], json!(0.5));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Index {
    dir: PathBuf,
    mapping: Arc<Mapping>,
    parser: DocParser,
    /// Time partitions, or (an index made before them) one engine at the root.
    engine: PartitionedEngine,
    /// Counters saved before this session, and this session's.
    counters: Counters,
    /// The engine's column refs of the fields of each mapping documents were read
    /// through (normally only this index's), filled as fields first occur.
    columns: Vec<(Arc<Mapping>, FieldColumns)>,
    /// Whether documents go in as appends by series ref (time series) rather than as
    /// points (events: their ids are fingerprints of the whole document).
    by_ref: bool,
    /// Scratch for one document's values by ref.
    scratch: (RefValues, RefExtras),
    /// `max_new_series_per_hour`: the limit, the clock hour counted, the series
    /// created in it ([`limit_new_series_per_hour`](Self::limit_new_series_per_hour)).
    new_series: Option<(u64, i64, u64)>,
    /// This open index's id, unique in the process: label series remember their ref
    /// per index id (see `append_samples`), so a ref is never used in another index or
    /// after a reopen.
    id: u32,
    /// The refs of the label-keyed value columns (`value`, `value_long`, `value_bool`,
    /// `value_keyword`), filled on first use.
    value_columns: [Option<ColumnRef>; 4],
    /// Memory `append_samples` keeps between calls.
    samples_scratch: samples::SampleScratch,
    /// Held for the life of the index: the OS lock.
    _lock: File,
    /// The directories and OS locks of the indexes attached read-only
    /// ([`attach_read_only`](Self::attach_read_only)).
    attached: Vec<(PathBuf, File)>,
}

/// The next [`Index`] id (0 is never given: it means "not resolved").
static NEXT_INDEX_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

impl Index {
    /// Creates an index in `dir` (created if needed) with `mapping`.
    ///
    /// # Errors
    /// [`Error::AlreadyExists`], [`Error::Locked`], I/O and engine errors.
    pub fn create(dir: impl AsRef<Path>, mapping: Mapping) -> Result<Index> {
        Index::create_with_config(dir, mapping, EngineConfig::new())
    }

    /// [`create`](Self::create) with an engine configuration (strategy, durability,
    /// refresh size); the mapping decides the mode.
    ///
    /// # Errors
    /// As [`create`](Self::create).
    pub fn create_with_config(
        dir: impl AsRef<Path>,
        mapping: Mapping,
        config: EngineConfig,
    ) -> Result<Index> {
        Index::create_inner(dir.as_ref(), mapping, config, None)
    }

    /// Creates a time-partitioned index: each document goes to the partition of its own
    /// timestamp (so a retry meets its original whenever it arrives), partitions are
    /// sealed with their rollups, dropped whole by retention (see docs/partitions.md).
    ///
    /// # Errors
    /// As [`create`](Self::create); [`Error::Engine`] for invalid partition settings.
    pub fn create_partitioned(
        dir: impl AsRef<Path>,
        mapping: Mapping,
        config: EngineConfig,
        partitions: PartitionConfig,
    ) -> Result<Index> {
        Index::create_inner(dir.as_ref(), mapping, config, Some(partitions))
    }

    fn create_inner(
        dir: &Path,
        mapping: Mapping,
        config: EngineConfig,
        partitions: Option<PartitionConfig>,
    ) -> Result<Index> {
        let dir = dir.to_path_buf();
        std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
        let lock = lock(&dir)?;
        let mapping_path = dir.join(MAPPING_FILE);
        if mapping_path.exists()
            || dir.join(tidemark_dedup::MANIFEST_NAME).exists()
            || dir.join(tidemark_dedup::PARTITIONS_NAME).exists()
        {
            return Err(Error::AlreadyExists { path: dir });
        }
        let text = serde_json::to_string_pretty(mapping.source()).map_err(Error::Json)?;
        write_atomic(&mapping_path, format!("{text}\n").as_bytes())?;
        let mapping = Arc::new(mapping);
        let config = engine_config(&mapping, config);
        let engine = match partitions {
            Some(p) => PartitionedEngine::create(&dir, config, p)?,
            None => PartitionedEngine::create_single(&dir, config)?,
        };
        Index::assemble(dir, mapping, engine, lock)
    }

    /// Opens the index in `dir`.
    ///
    /// # Errors
    /// [`Error::NoIndex`], [`Error::Locked`], [`Error::Mapping`] for a damaged mapping
    /// file, engine errors (naming the damaged file).
    pub fn open(dir: impl AsRef<Path>) -> Result<Index> {
        Index::open_with_config(dir, EngineConfig::new())
    }

    /// [`open`](Self::open) with an engine configuration.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with_config(dir: impl AsRef<Path>, config: EngineConfig) -> Result<Index> {
        let dir = dir.as_ref().to_path_buf();
        let mapping_path = dir.join(MAPPING_FILE);
        if !dir.is_dir() || !mapping_path.is_file() {
            return Err(Error::NoIndex { path: dir });
        }
        let lock = lock(&dir)?;
        let text = std::fs::read_to_string(&mapping_path).map_err(Error::io(&mapping_path))?;
        let mapping = Arc::new(Mapping::from_json_str(&text)?);
        // A crash between writing the mapping and creating the engine leaves no manifest.
        let engine =
            PartitionedEngine::open_or_create_single(&dir, engine_config(&mapping, config))?;
        Index::assemble(dir, mapping, engine, lock)
    }

    fn assemble(
        dir: PathBuf,
        mapping: Arc<Mapping>,
        engine: PartitionedEngine,
        lock: File,
    ) -> Result<Index> {
        let counters = Counters::load(&dir.join(COUNTERS_FILE))?;
        Ok(Index {
            parser: DocParser::new(mapping.clone())?,
            by_ref: !matches!(mapping.mode(), IndexMode::Events(_)),
            dir,
            mapping,
            engine,
            counters,
            columns: Vec::new(),
            scratch: (Vec::new(), Vec::new()),
            new_series: None,
            id: NEXT_INDEX_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            value_columns: [None; 4],
            samples_scratch: Default::default(),
            _lock: lock,
            attached: Vec::new(),
        })
    }

    /// Refuses documents of series new to this index past `limit` per clock hour (as
    /// VictoriaMetrics' `-storage.maxHourlySeries`, counted from this open on): such a
    /// document fails as an item naming the limit, while series already known go on.
    /// `None` (the default) is no limit.
    pub fn limit_new_series_per_hour(&mut self, limit: Option<u64>) {
        self.new_series = limit.map(|n| (n, i64::MIN, 0));
    }

    /// Counts one new series against the hourly limit; `Err` naming it when spent.
    fn take_new_series(&mut self) -> std::result::Result<(), String> {
        let Some((limit, hour, created)) = self.new_series.as_mut() else {
            return Ok(());
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
            / 3600;
        if *hour != now {
            *hour = now;
            *created = 0;
        }
        if *created >= *limit {
            return Err(format!(
                "this index took {limit} new series this hour (max_new_series_per_hour): documents of new series are refused until the next hour"
            ));
        }
        *created += 1;
        Ok(())
    }

    /// The index directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The mapping.
    pub fn mapping(&self) -> &Mapping {
        &self.mapping
    }

    /// The store (its partitions' engines, or the one engine of an unpartitioned
    /// index), for what the façade does not wrap.
    pub fn engine(&self) -> &PartitionedEngine {
        &self.engine
    }

    /// Seals partitions the newest timestamp is past by the seal grace, and those it is
    /// past that have had no write for the seal grace of wall-clock time (merging them and
    /// building their rollups), and applies retention: partitions past it are dropped,
    /// or keep only their rollups where a rollup retention says so. Also run after every
    /// ingest call, and every 10 s by the server. A no-op for an unpartitioned index.
    ///
    /// # Errors
    /// Engine errors.
    pub fn maintain(&mut self) -> Result<tidemark_dedup::MaintainReport> {
        Ok(self.engine.maintain()?)
    }

    /// Seals the partition starting at `start_ms` now (see [`maintain`](Self::maintain)).
    ///
    /// # Errors
    /// Engine errors.
    pub fn seal(&mut self, start_ms: i64) -> Result<()> {
        Ok(self.engine.seal(start_ms)?)
    }

    /// A document parser for this index's mapping (one per thread).
    pub fn parser(&self) -> DocParser {
        self.parser.clone()
    }

    /// The cumulative counters (saved ones plus this session's).
    pub fn counters(&self) -> Counters {
        self.counters.with_dedup(&self.engine.stats())
    }

    /// The `_id` text of a stored id.
    pub fn format_id(&self, id: &SyntheticId) -> String {
        self.engine.format_id(id)
    }

    /// Parses an `_id` text.
    ///
    /// # Errors
    /// [`Error::InvalidId`].
    pub fn parse_id(&self, text: &str) -> Result<SyntheticId> {
        self.engine.parse_id(text).map_err(|e| Error::InvalidId {
            id: text.to_owned(),
            reason: e.to_string(),
        })
    }

    /// The `_id` a point gets when stored.
    ///
    /// # Errors
    /// Engine errors (event fingerprints).
    pub fn id_of(&self, point: &Point) -> Result<SyntheticId> {
        Ok(self.engine.id_of(point)?)
    }

    /// Runs `_bulk` items in order and returns one result per item.
    ///
    /// # Errors
    /// Engine errors (I/O on the write-ahead log, a damaged segment); per-item problems
    /// are results, not errors.
    pub fn bulk(&mut self, items: Vec<BulkItem>) -> Result<Vec<ItemResult>> {
        let mut parser = self.parser.clone();
        let prepared: Vec<Prepared> = items
            .into_iter()
            .map(|item| Prepared::of_item(&mut parser, item))
            .collect();
        let mut out = Vec::with_capacity(prepared.len());
        self.apply(prepared, &mut |r| out.push(r))?;
        self.save_counters()?;
        Ok(out)
    }

    /// Applies prepared items in order, reporting each result to `sink`. Runs of stores
    /// go to the engine as one batch of appends by series ref (time series) or of points
    /// (events); deletes as one batch of operations; a failed item or an update ends the
    /// run before it, so results come in input order.
    pub(crate) fn apply(
        &mut self,
        items: Vec<Prepared>,
        sink: &mut dyn FnMut(ItemResult),
    ) -> Result<()> {
        // Sized once: a server applies groups of thousands of items, and growing these
        // buffers by doubling costs fresh pages on every call.
        let mut run = Run {
            ops: Vec::with_capacity(items.len()),
            appends: AppendBatch::new(),
            pending: Vec::with_capacity(items.len()),
        };
        for item in items {
            match item.work {
                Work::Failed(reason) => {
                    self.refuse(&mut run, sink, item.line, item.action, item.id, reason)?;
                }
                Work::Store(row) => {
                    if let Some(given) = &item.id {
                        let computed = match self.id_of_row(&row) {
                            Ok(id) => self.format_id(&id),
                            Err(e) => e.to_string(),
                        };
                        if *given != computed {
                            let reason = format!(
                                "the _id given ({given}) differs from the document's _id ({computed}), which is computed from its dimensions and timestamp"
                            );
                            self.refuse(&mut run, sink, item.line, item.action, item.id, reason)?;
                            continue;
                        }
                    }
                    let create = item.action != Action::Index;
                    if self.by_ref {
                        if !run.ops.is_empty() {
                            self.flush(&mut run, sink)?;
                        }
                        match self.push_append(&mut run.appends, create, &row)? {
                            Ok(()) => run.pending.push((
                                item.line,
                                item.action,
                                item.ignored,
                                item.id_text,
                            )),
                            Err(reason) => {
                                self.refuse(
                                    &mut run,
                                    sink,
                                    item.line,
                                    item.action,
                                    item.id,
                                    reason,
                                )?;
                            }
                        }
                    } else {
                        if !run.appends.is_empty() {
                            self.flush(&mut run, sink)?;
                        }
                        let point = row.to_point()?;
                        run.ops.push(if create {
                            Op::Create(point)
                        } else {
                            Op::Index(point)
                        });
                        run.pending
                            .push((item.line, item.action, item.ignored, item.id_text));
                    }
                }
                Work::Delete => {
                    let text = item.id.unwrap_or_default();
                    match self.parse_id(&text) {
                        Ok(id) => {
                            if !run.appends.is_empty() {
                                self.flush(&mut run, sink)?;
                            }
                            run.ops.push(Op::Delete(id));
                            run.pending.push((item.line, item.action, 0, item.id_text));
                        }
                        Err(e) => {
                            self.refuse(
                                &mut run,
                                sink,
                                item.line,
                                item.action,
                                Some(text),
                                e.to_string(),
                            )?;
                        }
                    }
                }
                Work::Update(partial) => {
                    // An update reads the stored document: everything before it must be applied.
                    self.flush(&mut run, sink)?;
                    let text = item.id.unwrap_or_default();
                    let status = self.update(&text, partial)?;
                    if status == ItemStatus::Updated {
                        self.counters.items.ignored_fields += item.ignored;
                    }
                    self.emit(sink, item.line, item.action, Some(text), status);
                }
            }
        }
        self.flush(&mut run, sink)
    }

    /// Ends the run (so results stay in input order) and reports an item that failed
    /// before reaching the engine.
    #[allow(clippy::too_many_arguments)]
    fn refuse(
        &mut self,
        run: &mut Run,
        sink: &mut dyn FnMut(ItemResult),
        line: u64,
        action: Action,
        id: Option<String>,
        reason: String,
    ) -> Result<()> {
        self.flush(run, sink)?;
        self.emit(sink, line, action, id, ItemStatus::Error(reason));
        Ok(())
    }

    /// The `_id` of a parsed document.
    fn id_of_row(&self, row: &Row) -> Result<SyntheticId> {
        if self.by_ref {
            Ok(SyntheticId::new(row.tsid, row.ts_millis))
        } else {
            self.id_of(&row.to_point()?)
        }
    }

    /// Adds `row` to `batch` by the engine's refs: its series (registered the first time
    /// the index sees it, from the row's encoded dimensions) and its fields' columns;
    /// `Err(reason)` when the engine refuses the series or a column.
    fn push_append(
        &mut self,
        batch: &mut AppendBatch,
        create: bool,
        row: &Row,
    ) -> Result<std::result::Result<(), String>> {
        let series = match self.series_of(row)? {
            Ok(s) => s,
            Err(reason) => return Ok(Err(reason)),
        };
        let (mut values, mut extras) = std::mem::take(&mut self.scratch);
        values.clear();
        extras.clear();
        let refs = self.fill_refs(row, &mut values, &mut extras);
        if let Ok(Ok(())) = &refs {
            batch.push(create, series, row.ts_millis, &values, &extras);
        }
        self.scratch = (values, extras);
        refs
    }

    fn series_of(&mut self, row: &Row) -> Result<std::result::Result<SeriesRef, String>> {
        if let Some(s) = self.engine.series_by_tsid(&row.tsid) {
            return Ok(Ok(s));
        }
        if let Err(reason) = self.take_new_series() {
            return Ok(Err(reason));
        }
        let dims = decode_dims(&row.dims)?;
        match self.engine.series(row.tsid, dims) {
            Ok(s) => Ok(Ok(s)),
            Err(tidemark_dedup::Error::Rejected { reason }) => Ok(Err(rejection_text(&reason))),
            Err(e) => Err(e.into()),
        }
    }

    fn fill_refs(
        &mut self,
        row: &Row,
        values: &mut RefValues,
        extras: &mut RefExtras,
    ) -> Result<std::result::Result<(), String>> {
        // By pointer first (rows of this index's parsers), then by content (a parser made
        // from an equal mapping elsewhere): one entry per distinct field list.
        let found = self
            .columns
            .iter()
            .position(|(m, _)| Arc::ptr_eq(m, &row.schema))
            .or_else(|| {
                self.columns
                    .iter()
                    .position(|(m, _)| m.fields() == row.schema.fields())
            });
        let at = match found {
            Some(at) => at,
            None => {
                self.columns.push((
                    Arc::clone(&row.schema),
                    vec![None; row.schema.fields().len()],
                ));
                self.columns.len() - 1
            }
        };
        for (f, v) in &row.values {
            let kind = match v {
                MetricValue::Gauge(_) => ColumnKind::Gauge,
                MetricValue::Counter(_) => ColumnKind::Counter,
            };
            match self.column_of(at, row, *f, kind)? {
                Ok(c) => values.push((c, *v)),
                Err(reason) => return Ok(Err(reason)),
            }
        }
        for (f, e) in &row.extras {
            let kind = match e {
                Extra::Keyword(_) => ColumnKind::Keyword,
                Extra::Bool(_) => ColumnKind::Bool,
            };
            match self.column_of(at, row, *f, kind)? {
                Ok(c) => extras.push((c, e.clone())),
                Err(reason) => return Ok(Err(reason)),
            }
        }
        Ok(Ok(()))
    }

    /// The engine's column of field `f` of the row's mapping (at `at` in `columns`) for
    /// values of `kind`.
    fn column_of(
        &mut self,
        at: usize,
        row: &Row,
        f: u32,
        kind: ColumnKind,
    ) -> Result<std::result::Result<ColumnRef, String>> {
        let cached = self
            .columns
            .get(at)
            .and_then(|(_, refs)| refs.get(f as usize).copied().flatten());
        if let Some((c, k)) = cached
            && k == kind
        {
            return Ok(Ok(c));
        }
        let c = match self.engine.column(row.field_name(f)?, kind) {
            Ok(c) => c,
            Err(tidemark_dedup::Error::Rejected { reason }) => {
                return Ok(Err(rejection_text(&reason)));
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(slot) = self
            .columns
            .get_mut(at)
            .and_then(|(_, refs)| refs.get_mut(f as usize))
        {
            *slot = Some((c, kind));
        }
        Ok(Ok(c))
    }

    fn update(&mut self, text: &str, partial: Point) -> Result<ItemStatus> {
        let id = match self.parse_id(text) {
            Ok(id) => id,
            Err(e) => return Ok(ItemStatus::Error(e.to_string())),
        };
        let Some(mut stored) = self.engine.get(&id)? else {
            return Ok(ItemStatus::NotFound);
        };
        for (name, v) in &partial.metrics {
            match stored.metrics.iter_mut().find(|(n, _)| n == name) {
                Some(slot) => slot.1 = *v,
                None => stored.metrics.push((name.clone(), *v)),
            }
        }
        crate::extras::merge_extras(&mut stored, &partial);
        // An event's _id is a fingerprint of its fields: an update of a fingerprinted
        // field would make another event, not update this one.
        match self.id_of(&stored) {
            Ok(new_id) if new_id == id => {}
            Ok(_) => {
                return Ok(ItemStatus::Error(
                    "the update changes a field of the event's fingerprint, hence its _id: delete and create instead".to_owned(),
                ));
            }
            Err(e) => return Ok(ItemStatus::Error(e.to_string())),
        }
        let out = self.engine.batch(vec![Op::Index(stored)])?;
        Ok(match out.into_iter().next() {
            Some(Outcome::Indexed { .. }) => ItemStatus::Updated,
            Some(Outcome::Rejected { reason, .. }) => ItemStatus::Error(rejection_text(&reason)),
            Some(other) => ItemStatus::Error(format!("unexpected outcome {other:?}")),
            None => ItemStatus::Error("no outcome".to_owned()),
        })
    }

    /// Sends the run's batch to the engine and reports each item's result.
    fn flush(&mut self, run: &mut Run, sink: &mut dyn FnMut(ItemResult)) -> Result<()> {
        let outcomes = if !run.appends.is_empty() {
            let out = self.engine.append(&run.appends)?;
            run.appends.clear();
            out
        } else if !run.ops.is_empty() {
            self.engine.batch(std::mem::take(&mut run.ops))?
        } else {
            return Ok(());
        };
        for ((line, action, ignored, id_text), outcome) in run.pending.drain(..).zip(outcomes) {
            let (id, status) = match outcome {
                Outcome::Created { id } => (id, ItemStatus::Created),
                Outcome::Conflict { id } => (id, ItemStatus::Duplicate),
                Outcome::Indexed { id, replaced } => (id, ItemStatus::Indexed { replaced }),
                Outcome::Deleted { id } => (id, ItemStatus::Deleted),
                Outcome::NotFound { id } => (id, ItemStatus::NotFound),
                Outcome::Rejected { id, reason } => {
                    (id, ItemStatus::Error(rejection_text(&reason)))
                }
                Outcome::Found(p) => (
                    self.id_of(&p)?,
                    ItemStatus::Error("unexpected get".to_owned()),
                ),
                other => {
                    return Err(Error::Query {
                        reason: format!("unexpected engine outcome {other:?}"),
                    });
                }
            };
            // Fields are ignored only where a document was stored.
            if matches!(status, ItemStatus::Created | ItemStatus::Indexed { .. }) {
                self.counters.items.ignored_fields += ignored;
            }
            let id = id_text.then(|| self.format_id(&id));
            self.emit(sink, line, action, id, status);
        }
        Ok(())
    }

    fn emit(
        &mut self,
        sink: &mut dyn FnMut(ItemResult),
        line: u64,
        action: Action,
        id: Option<String>,
        status: ItemStatus,
    ) {
        self.counters.count(&status);
        sink(ItemResult {
            line,
            action,
            id,
            status,
        });
    }

    /// The document `id` rebuilt from the columns (nested by field path, with `_id`,
    /// `_tsid` and the timestamp), or `None`.
    ///
    /// # Errors
    /// [`Error::InvalidId`]; segment read errors.
    pub fn get(&self, id: &str) -> Result<Option<Value>> {
        let sid = self.parse_id(id)?;
        Ok(self
            .engine
            .get(&sid)?
            .map(|p| point_to_doc(&self.mapping, &p, &self.format_id(&sid))))
    }

    /// Deletes the document `id`; returns whether it existed.
    ///
    /// # Errors
    /// [`Error::InvalidId`]; engine errors.
    pub fn delete(&mut self, id: &str) -> Result<bool> {
        let out = self.bulk(vec![BulkItem::delete(id)])?;
        match out.into_iter().next().map(|r| r.status) {
            Some(ItemStatus::Deleted) => Ok(true),
            Some(ItemStatus::NotFound) => Ok(false),
            Some(ItemStatus::Error(reason)) => Err(Error::InvalidId {
                id: id.to_owned(),
                reason,
            }),
            _ => Ok(false),
        }
    }

    /// Writes the buffer as a segment (see `Engine::refresh`).
    ///
    /// # Errors
    /// Engine errors.
    pub fn refresh(&mut self) -> Result<()> {
        self.engine.refresh()?;
        self.save_counters()
    }

    /// Whether merges run off the write path (see
    /// [`PartitionedEngine::set_background_merges`]): on, the caller's merge thread runs
    /// them with [`plan_merge`](Self::plan_merge), [`PartMergeJob::run`] (without the
    /// index) and [`install_merge`](Self::install_merge). The server turns it on.
    ///
    /// [`PartMergeJob::run`]: tidemark_dedup::PartMergeJob::run
    pub fn set_background_merges(&mut self, on: bool) {
        self.engine.set_background_merges(on);
    }

    /// Merges the tiered policy wants that no job runs yet.
    pub fn waiting_merges(&self) -> usize {
        self.engine.waiting_merges()
    }

    /// Plans the next merge the tiered policy wants (see
    /// [`PartitionedEngine::plan_merge`]), or `None`.
    pub fn plan_merge(&mut self) -> Option<tidemark_dedup::PartMergeJob> {
        self.engine.plan_merge()
    }

    /// Installs a merge run off the index (see [`PartitionedEngine::install_merge`]).
    ///
    /// # Errors
    /// The merge's own error (its inputs stay live); engine errors of the install.
    pub fn install_merge(&mut self, merged: tidemark_dedup::PartMerged) -> Result<()> {
        Ok(self.engine.install_merge(merged)?)
    }

    /// Whether refreshes run off the write path (see
    /// [`PartitionedEngine::set_background_refresh`]): on, the caller's refresh thread
    /// runs them with [`plan_refresh`](Self::plan_refresh), [`PartRefreshJob::run`]
    /// (without the index) and [`install_refresh`](Self::install_refresh), and a writer
    /// waits while [`refresh_backlog`](Self::refresh_backlog). The server turns it on.
    ///
    /// [`PartRefreshJob::run`]: tidemark_dedup::PartRefreshJob::run
    pub fn set_background_refresh(&mut self, on: bool) {
        self.engine.set_background_refresh(on);
    }

    /// Whether refreshes run off the write path ([`set_background_refresh`](Self::set_background_refresh)).
    pub fn background_refresh(&self) -> bool {
        self.engine.background_refresh()
    }

    /// Freezes the buffer of the partition due a refresh and returns the job that writes
    /// it (see [`PartitionedEngine::plan_refresh`]), or `None`.
    ///
    /// # Errors
    /// Engine errors of the freeze.
    pub fn plan_refresh(&mut self) -> Result<Option<tidemark_dedup::PartRefreshJob>> {
        Ok(self.engine.plan_refresh()?)
    }

    /// Installs a refresh run off the index (see [`PartitionedEngine::install_refresh`]).
    ///
    /// # Errors
    /// The job's own error (its points stay frozen); engine errors of the install.
    pub fn install_refresh(&mut self, done: tidemark_dedup::PartRefreshed) -> Result<()> {
        Ok(self.engine.install_refresh(done)?)
    }

    /// Whether the buffers hold more than the refresh thread keeps up with (see
    /// [`PartitionedEngine::refresh_backlog`]).
    pub fn refresh_backlog(&self) -> bool {
        self.engine.refresh_backlog()
    }

    /// Refreshes, then merges all segments into one.
    ///
    /// # Errors
    /// Engine errors.
    pub fn merge(&mut self) -> Result<()> {
        self.engine.refresh()?;
        self.engine.merge_all()?;
        self.save_counters()
    }

    /// Saves the cumulative counters (also done after every write call).
    ///
    /// # Errors
    /// I/O errors.
    pub fn save_counters(&self) -> Result<()> {
        self.counters().save(&self.dir.join(COUNTERS_FILE))
    }

    /// Closes the index: saves the counters, syncs the log and releases the lock.
    ///
    /// # Errors
    /// I/O errors.
    pub fn close(self) -> Result<()> {
        self.save_counters()?;
        self.engine.close()?;
        Ok(())
    }
}

fn engine_config(mapping: &Mapping, config: EngineConfig) -> EngineConfig {
    // Every tsid (or event stream) is computed here from the document's dimensions.
    let config = config.with_derived_tsids(true);
    match mapping.mode() {
        IndexMode::TimeSeries => config.with_mode(Mode::TimeSeries),
        IndexMode::Events(e) => {
            let mut ids = EventIds::new(e.method).fields(e.fields.iter().cloned());
            if let Some(k) = &e.key {
                ids = ids.key(k.clone());
            }
            config.with_mode(Mode::Events(ids))
        }
    }
}

/// A readable reason for an engine rejection.
pub(crate) fn rejection_text(r: &Rejection) -> String {
    match r {
        // The façade computes tsids from the dimensions: another set means a collision.
        Rejection::InconsistentDimensions { tsid } => {
            format!("series {tsid} was stored with other dimensions (tsid collision)")
        }
        Rejection::KindConflict {
            name,
            expected,
            found,
        } => format!("field `{name}` holds {expected} values, this document gives a {found}"),
        other => other.to_string(),
    }
}

/// Takes the index's OS lock, writing our pid for the error message of the next comer.
fn lock(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(Error::io(&path))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let holder = match text.trim().parse::<u32>() {
                Ok(pid) => format!(" (pid {pid})"),
                Err(_) => String::new(),
            };
            return Err(Error::Locked {
                path: dir.to_path_buf(),
                holder,
            });
        }
        Err(TryLockError::Error(e)) => return Err(Error::io(&path)(e)),
    }
    file.set_len(0).map_err(Error::io(&path))?;
    write!(file, "{}", std::process::id()).map_err(Error::io(&path))?;
    Ok(file)
}

/// Writes `bytes` to `path` atomically with the workspace's one helper
/// ([`tidemark_segment::AtomicFile`]: temporary file, fsync, rename, directory fsync).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    tidemark_segment::AtomicFile::write_all_to(path, bytes).map_err(Error::io(path))
}

/// An item read through the mapping on any thread (parsing and tsid hashing are the
/// costly part of a write), to be applied later by the index's single writer with
/// [`Index::apply_prepared`]. Servers parse requests on every core this way and keep one
/// writer per index.
///
/// ```
/// use serde_json::json;
/// use tidemark::{Action, Index, Mapping, PreparedItem};
///
/// let dir = tempfile::tempdir()?;
/// let mapping = Mapping::from_value(json!({"mappings": {"properties": {
///     "host": {"type": "keyword", "time_series_dimension": true},
///     "cpu": {"type": "double", "time_series_metric": "gauge"}}}}))?;
/// let mut index = Index::create(dir.path(), mapping)?;
/// let mut parser = index.parser(); // one per thread
/// let doc = parser.parse_line(r#"{"@timestamp": 0, "host": "a", "cpu": 0.5}"#)?;
/// let items = vec![PreparedItem::store(1, Action::Create, None, doc)];
/// let results = index.apply_prepared(items)?;
/// assert_eq!(results[0].http_status(), 201);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct PreparedItem(pub(crate) Prepared);

impl PreparedItem {
    /// Reads a whole [`BulkItem`] (any action) through `parser`; a document that does not
    /// fit the mapping becomes a failed item.
    pub fn from_item(parser: &mut DocParser, item: BulkItem) -> PreparedItem {
        PreparedItem(Prepared::of_item(parser, item))
    }

    /// A parsed document to store with `action` ([`Action::Index`] replaces a stored
    /// document; any other action stores it as [`Action::Create`] does). `id`, when
    /// given, must be the document's computed `_id`, or the item fails.
    pub fn store(line: u64, action: Action, id: Option<String>, doc: crate::ParsedDoc) -> Self {
        PreparedItem(Prepared {
            line,
            action,
            id,
            ignored: doc.ignored_fields,
            work: Work::Store(doc.row),
            id_text: true,
        })
    }

    /// A delete of `id`.
    pub fn delete(line: u64, id: String) -> PreparedItem {
        PreparedItem(Prepared {
            line,
            action: Action::Delete,
            id: Some(id),
            ignored: 0,
            work: Work::Delete,
            id_text: true,
        })
    }

    /// A partial update of `id` with the fields of `doc` (the `doc` of an `update`).
    ///
    /// # Errors
    /// [`Error::Document`] when `doc` sets a dimension or the timestamp, or does not fit
    /// the mapping.
    pub fn update(parser: &DocParser, line: u64, id: String, doc: &Value) -> Result<Self> {
        let (point, ignored) = parser.parse_partial(doc)?;
        Ok(PreparedItem(Prepared {
            line,
            action: Action::Update,
            id: Some(id),
            ignored,
            work: Work::Update(point),
            id_text: true,
        }))
    }

    /// The same item, its result without the `_id` text ([`ItemResult::id`] is `None`
    /// where the item reaches the engine): for protocols whose answers never show it.
    pub fn without_id_text(mut self) -> PreparedItem {
        self.0.id_text = false;
        self
    }

    /// An item that failed before reaching the writer (a malformed line), reported as
    /// an error result with `reason` in its place.
    pub fn failed(line: u64, action: Action, id: Option<String>, reason: String) -> Self {
        let mut p = Prepared::failed(line, action, reason);
        p.id = id;
        PreparedItem(p)
    }
}

impl Index {
    /// Applies prepared items in order, one engine batch (one write-ahead log write and,
    /// under the default durability, one fsync) for a run of stores and deletes; returns
    /// one result per item, in order. Unlike [`bulk`](Self::bulk) it does not save the
    /// counters file (a server calls [`save_counters`](Self::save_counters) now and then
    /// instead of paying a second fsync per request).
    ///
    /// # Errors
    /// Engine errors (I/O on the write-ahead log, a damaged segment): none of the results
    /// are reported then, and the items not yet written are not applied.
    pub fn apply_prepared(&mut self, items: Vec<PreparedItem>) -> Result<Vec<ItemResult>> {
        let mut out = Vec::with_capacity(items.len());
        self.apply(items.into_iter().map(|p| p.0).collect(), &mut |r| {
            out.push(r)
        })?;
        Ok(out)
    }
}
