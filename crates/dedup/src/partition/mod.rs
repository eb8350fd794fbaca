//! Time partitions above the single-directory [`Engine`]: a [`PartitionedEngine`] routes
//! each point by its own timestamp to the engine of its partition, so a retry or a late
//! point always meets its original whenever it arrives. Partitions are sealed (merged,
//! rollups built), dropped whole by retention, and listed in a manifest switched
//! atomically (`PARTITIONS`, see docs/partitions.md).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tidemark_segment::{Dim, Point, RowId, Segment};
use tidemark_tsid::{SyntheticId, Tsid};

use crate::config::EngineConfig;
use crate::engine::{Engine, Op, Outcome, Rejection};
use crate::error::{Error, Result};
use crate::manifest::MANIFEST_NAME;
use crate::stats::DedupStats;

mod append;
mod manifest;
mod merging;
mod postings;
mod rollup;
mod sealed;

pub use manifest::{PARTITIONS_MAGIC, PARTITIONS_NAME, PARTITIONS_VERSION};
pub use merging::{PartMergeJob, PartMerged};
pub use postings::{Postings, dim_value_text};
pub use rollup::{CounterStats, DOC_COUNT_COLUMN, RollupStats, counter_step};
pub use sealed::SealedPartition;

use manifest::{PartManifest, PartState};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// The environment variable naming a failpoint at which the process aborts (crash
/// tests; see [`PartitionedEngine::enforce_retention`]). Unset in normal runs.
pub const FAILPOINT_ENV: &str = "TIDEMARK_FAILPOINT";

/// Aborts the process (no unwinding, no destructors: as a crash) when the failpoint
/// environment variable names `name`.
fn failpoint(name: &str) {
    if std::env::var_os(FAILPOINT_ENV).is_some_and(|v| v == name) {
        std::process::abort();
    }
}

/// Settings of a partitioned store, fixed at creation and kept in its manifest.
///
/// Time in these rules is *event time*: the store's clock is the newest timestamp it has
/// accepted (its high-water mark), so replaying old data behaves as live data did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionConfig {
    width_ms: i64,
    retention_ms: Option<i64>,
    late_window_ms: Option<i64>,
    seal_grace_ms: i64,
    rollups: Vec<i64>,
    /// `(resolution, retention)`: rollups kept longer than the raw rows.
    rollup_retention: Vec<(i64, i64)>,
}

impl Default for PartitionConfig {
    fn default() -> Self {
        PartitionConfig {
            width_ms: DAY_MS,
            retention_ms: None,
            late_window_ms: None,
            seal_grace_ms: HOUR_MS,
            rollups: Vec::new(),
            rollup_retention: Vec::new(),
        }
    }
}

impl PartitionConfig {
    /// Defaults: partitions of one day, no retention, no late window, sealed one hour
    /// (of event time) after their end, no rollups.
    pub fn new() -> PartitionConfig {
        PartitionConfig::default()
    }

    /// Partition width (1 hour to 7 days); partitions start at multiples of it since the
    /// Unix epoch.
    pub fn with_width_ms(mut self, ms: i64) -> PartitionConfig {
        self.width_ms = ms;
        self
    }

    /// Drop partitions that end this long before the high-water mark.
    pub fn with_retention_ms(mut self, ms: Option<i64>) -> PartitionConfig {
        self.retention_ms = ms;
        self
    }

    /// Reject points older than the high-water mark minus this.
    pub fn with_late_window_ms(mut self, ms: Option<i64>) -> PartitionConfig {
        self.late_window_ms = ms;
        self
    }

    /// Seal a partition once the high-water mark is this far past its end.
    pub fn with_seal_grace_ms(mut self, ms: i64) -> PartitionConfig {
        self.seal_grace_ms = ms;
        self
    }

    /// Rollup resolutions; each must divide the partition width.
    pub fn with_rollups(mut self, mut resolutions_ms: Vec<i64>) -> PartitionConfig {
        resolutions_ms.sort_unstable();
        resolutions_ms.dedup();
        self.rollups = resolutions_ms;
        self
    }

    /// Keeps the rollup at `resolution_ms` for `retention_ms` (longer than the raw
    /// retention): a partition past the raw retention but within this one keeps that
    /// rollup and loses its raw rows and the rollups not kept as long. Setting a
    /// resolution again replaces its retention.
    pub fn with_rollup_retention_ms(
        mut self,
        resolution_ms: i64,
        retention_ms: i64,
    ) -> PartitionConfig {
        self.rollup_retention.retain(|(r, _)| *r != resolution_ms);
        self.rollup_retention.push((resolution_ms, retention_ms));
        self.rollup_retention.sort_unstable();
        self
    }

    /// How long the rollup at `resolution_ms` is kept when longer than the raw rows.
    pub fn rollup_retention_ms(&self, resolution_ms: i64) -> Option<i64> {
        self.rollup_retention
            .iter()
            .find(|(r, _)| *r == resolution_ms)
            .map(|(_, ms)| *ms)
    }

    /// Partition width in milliseconds.
    pub fn width_ms(&self) -> i64 {
        self.width_ms
    }

    /// Retention in milliseconds, if any.
    pub fn retention_ms(&self) -> Option<i64> {
        self.retention_ms
    }

    /// Late window in milliseconds, if any.
    pub fn late_window_ms(&self) -> Option<i64> {
        self.late_window_ms
    }

    /// Seal grace in milliseconds.
    pub fn seal_grace_ms(&self) -> i64 {
        self.seal_grace_ms
    }

    /// Rollup resolutions in milliseconds, ascending.
    pub fn rollups(&self) -> &[i64] {
        &self.rollups
    }

    /// Checks the configuration as opening a partitioned store does, so that a caller
    /// holding one for later (a server's default for the indices it creates) can refuse
    /// it at startup.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the setting: a width outside 1 h–7 d, a rollup
    /// resolution that does not divide it, a retention or late window that is not
    /// positive, a negative seal grace, too many rollups.
    pub fn check(&self) -> Result<()> {
        let bad = |name, detail: String| Err(Error::InvalidConfig { name, detail });
        if !(HOUR_MS..=7 * DAY_MS).contains(&self.width_ms) {
            return bad(
                "partition",
                format!("the width must be 1h to 7d, found {} ms", self.width_ms),
            );
        }
        for r in &self.rollups {
            if *r <= 0 || self.width_ms % r != 0 {
                return bad(
                    "rollups",
                    format!(
                        "a resolution must divide the partition width {} ms, found {r} ms",
                        self.width_ms
                    ),
                );
            }
        }
        for (name, v) in [
            ("retention", self.retention_ms),
            ("late_window", self.late_window_ms),
        ] {
            if v.is_some_and(|v| v <= 0) {
                return bad(name, "must be positive".to_owned());
            }
        }
        if self.seal_grace_ms < 0 {
            return bad("seal_grace", "must not be negative".to_owned());
        }
        if self.rollups.len() > manifest::MAX_ROLLUPS {
            return bad(
                "rollups",
                format!(
                    "at most {} resolutions, found {}",
                    manifest::MAX_ROLLUPS,
                    self.rollups.len()
                ),
            );
        }
        for (r, ms) in &self.rollup_retention {
            if !self.rollups.contains(r) {
                return bad(
                    "rollup_retention",
                    format!(
                        "{r} ms is not one of the rollup resolutions {:?}",
                        self.rollups
                    ),
                );
            }
            match self.retention_ms {
                None => {
                    return bad(
                        "rollup_retention",
                        "needs a retention for the raw rows (rollups outlive it)".to_owned(),
                    );
                }
                Some(raw) if *ms <= raw => {
                    return bad(
                        "rollup_retention",
                        format!(
                            "the rollup at {r} ms must be kept longer than the raw rows ({raw} ms), found {ms} ms"
                        ),
                    );
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// One partition, as listed by [`PartitionedEngine::partitions`].
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionInfo {
    /// First millisecond of the partition.
    pub start_ms: i64,
    /// First millisecond after it.
    pub end_ms: i64,
    /// Live rows (buffered included).
    pub rows: u64,
    /// Segments.
    pub segments: usize,
    /// Bytes of its segments and rollups on disk.
    pub bytes: u64,
    /// Whether it is sealed (merged, rollups built).
    pub sealed: bool,
    /// Whether retention dropped its raw rows and other rollups, keeping `rollups`.
    pub raw_expired: bool,
    /// Its rollups: `(resolution_ms, rows, bytes)`.
    pub rollups: Vec<(i64, u64, u64)>,
}

/// What [`PartitionedEngine::maintain`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaintainReport {
    /// Partitions sealed.
    pub sealed: usize,
    /// Partitions dropped by retention.
    pub dropped: usize,
    /// Rows they held.
    pub dropped_rows: u64,
    /// Partitions whose raw rows were dropped, a rollup kept.
    pub raw_expired: usize,
}

/// Counters of a partitioned store: cumulative ones from the manifest and this session's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionStats {
    /// Partitions dropped by retention, ever.
    pub dropped_partitions: u64,
    /// Rows they held.
    pub dropped_rows: u64,
    /// Partitions whose raw rows retention dropped while keeping a rollup, ever.
    pub expired_partitions: u64,
    /// Raw rows those held.
    pub expired_rows: u64,
    /// Points rejected this session as older than the late window or the retention.
    pub rejected_too_old: u64,
    /// Late writes that changed a sealed partition (its rollups rebuilt) this session.
    pub rollup_rebuilds: u64,
}

/// A time slice of a query plan: read raw rows, or a partition's rollup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// Raw rows with timestamps in `[from, to]`.
    Raw {
        /// First millisecond.
        from: i64,
        /// Last millisecond (inclusive).
        to: i64,
    },
    /// The rollup at `resolution_ms` of the partition starting at `partition`, buckets
    /// starting in `[from, to]`.
    Rollup {
        /// The partition's start.
        partition: i64,
        /// The resolution.
        resolution_ms: i64,
        /// First bucket start.
        from: i64,
        /// Last millisecond covered (inclusive).
        to: i64,
    },
    /// `[from, to]` lies in partitions whose raw rows retention dropped, and no kept
    /// rollup answers it (the interval is not a multiple of one, or a bucket is cut by
    /// the range): nothing there can be read.
    Expired {
        /// First millisecond.
        from: i64,
        /// Last millisecond (inclusive).
        to: i64,
    },
}

struct Part {
    start: i64,
    end: i64,
    dir: PathBuf,
    engine: Engine,
    state: PartState,
    /// Rollup segments by resolution (`None`: built, empty).
    rollups: Vec<(i64, Option<Arc<Segment>>)>,
    /// The store's series and column refs translated to this engine's.
    refs: append::PartRefs,
}

/// A partition past the raw retention: only some rollups remain.
#[derive(Debug)]
struct ExpiredPart {
    start: i64,
    end: i64,
    dir: PathBuf,
    /// The kept rollups by resolution (`None`: built, empty).
    rollups: Vec<(i64, Option<Arc<Segment>>)>,
    /// Mask over the manifest's resolutions.
    kept: u32,
}

impl std::fmt::Debug for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Part")
            .field("start", &self.start)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// A store of time partitions, each an [`Engine`] in its own directory, or (for a
/// directory made before partitions existed) one engine at the root holding all time.
///
/// ```
/// use tidemark_dedup::{EngineConfig, Op, Outcome, PartitionConfig, PartitionedEngine};
/// use tidemark_segment::Point;
/// use tidemark_tsid::Tsid;
///
/// let dir = tempfile::tempdir()?;
/// let parts = PartitionConfig::new().with_width_ms(3_600_000);
/// let mut store = PartitionedEngine::create(dir.path(), EngineConfig::new(), parts)?;
/// let p = |ts| Point::new(Tsid::from_bytes([1; 20]), ts).dim("host", "a").gauge("cpu", 0.5);
/// store.batch(vec![Op::Create(p(1_000)), Op::Create(p(7_200_000))])?;
/// // A retry of the first point after a newer partition exists meets its original.
/// let again = store.batch(vec![Op::Create(p(1_000))])?;
/// assert!(matches!(again[0], Outcome::Conflict { .. }));
/// assert_eq!(store.partitions().len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct PartitionedEngine {
    dir: PathBuf,
    engine_config: EngineConfig,
    /// `None`: the single-engine layout.
    manifest: Option<PartManifest>,
    parts: BTreeMap<i64, Part>,
    /// Partitions past the raw retention that keep rollups (never also in `parts`).
    expired: BTreeMap<i64, ExpiredPart>,
    /// Per partition: the write fingerprint the last `maintain` saw and the wall-clock
    /// time it first saw it (for sealing after a period without writes).
    idle: HashMap<i64, (WriteMark, i64)>,
    /// Stats of partitions dropped this session.
    retired: DedupStats,
    rejected_too_old: u64,
    rollup_rebuilds: u64,
    /// The high-water mark moved since the manifest was written.
    clock_unsaved: bool,
    /// Dimension indexes of segments, by segment file (built on first use; segment
    /// files are immutable).
    postings: std::sync::Mutex<HashMap<PathBuf, Arc<Postings>>>,
    /// Formats and parses ids when no partition exists yet.
    keyer: Engine0,
    /// The series and columns of [`append`](Self::append)'s refs.
    catalog: append::Catalog,
    append_scratch: append::AppendScratch,
    /// Merges are left to the caller ([`PartitionedEngine::plan_merge`]).
    background_merges: bool,
}

/// An id formatter independent of any partition.
#[derive(Debug)]
struct Engine0(Option<Arc<crate::events::EventKeyer>>);

impl PartitionedEngine {
    /// Creates a partitioned store in `dir` (created if needed).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`], [`Error::AlreadyExists`], I/O errors.
    pub fn create(
        dir: impl AsRef<Path>,
        engine_config: EngineConfig,
        config: PartitionConfig,
    ) -> Result<PartitionedEngine> {
        config.check()?;
        engine_config.check()?;
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
        if dir.join(MANIFEST_NAME).exists() || dir.join(PARTITIONS_NAME).exists() {
            return Err(Error::AlreadyExists { path: dir });
        }
        let manifest = PartManifest {
            width_ms: config.width_ms,
            retention_ms: config.retention_ms,
            late_window_ms: config.late_window_ms,
            seal_grace_ms: config.seal_grace_ms,
            high_water_ms: i64::MIN,
            dropped_partitions: 0,
            dropped_rows: 0,
            expired_partitions: 0,
            expired_rows: 0,
            rollup_retention_ms: config
                .rollups
                .iter()
                .map(|r| config.rollup_retention_ms(*r))
                .collect(),
            rollups: config.rollups,
            partitions: Vec::new(),
        };
        manifest.write(&dir)?;
        Ok(PartitionedEngine {
            keyer: Engine0(crate::engine::keyer_of(&engine_config)?),
            dir,
            engine_config,
            manifest: Some(manifest),
            parts: BTreeMap::new(),
            expired: BTreeMap::new(),
            idle: HashMap::new(),
            retired: DedupStats::default(),
            rejected_too_old: 0,
            rollup_rebuilds: 0,
            clock_unsaved: false,
            postings: std::sync::Mutex::default(),
            catalog: append::Catalog::default(),
            append_scratch: append::AppendScratch::default(),
            background_merges: false,
        })
    }

    /// Creates a single-engine store (one [`Engine`] at `dir`, no partitions).
    ///
    /// # Errors
    /// As [`Engine::create`].
    pub fn create_single(dir: impl AsRef<Path>, engine_config: EngineConfig) -> Result<Self> {
        let engine = Engine::create(dir, engine_config)?;
        Ok(PartitionedEngine::single(engine))
    }

    fn single(engine: Engine) -> PartitionedEngine {
        let dir = engine.dir().to_path_buf();
        let engine_config = engine.config().clone();
        let keyer = Engine0(crate::engine::keyer_of(&engine_config).ok().flatten());
        let mut parts = BTreeMap::new();
        parts.insert(
            i64::MIN,
            Part {
                start: i64::MIN,
                end: i64::MAX,
                dir: dir.clone(),
                engine,
                state: PartState::Active,
                rollups: Vec::new(),
                refs: append::PartRefs::default(),
            },
        );
        PartitionedEngine {
            dir,
            engine_config,
            manifest: None,
            parts,
            expired: BTreeMap::new(),
            idle: HashMap::new(),
            retired: DedupStats::default(),
            rejected_too_old: 0,
            rollup_rebuilds: 0,
            clock_unsaved: false,
            postings: std::sync::Mutex::default(),
            keyer,
            catalog: append::Catalog::default(),
            append_scratch: append::AppendScratch::default(),
            background_merges: false,
        }
    }

    /// Opens the store in `dir`: partitioned when it holds a `PARTITIONS` manifest, else
    /// the single engine at `dir` (`create_single` = true creates one if there is none).
    /// Partition directories the manifest does not list (left by a crash while one was
    /// created or dropped) are removed; a partition whose rollups a crash may have left
    /// behind is rebuilt.
    ///
    /// # Errors
    /// [`Error::NoManifest`], manifest errors, engine errors naming the file.
    pub fn open(dir: impl AsRef<Path>, engine_config: EngineConfig) -> Result<PartitionedEngine> {
        PartitionedEngine::open_inner(dir.as_ref(), engine_config, false)
    }

    /// As [`open`](Self::open), creating a single-engine store where `dir` holds none.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_or_create_single(
        dir: impl AsRef<Path>,
        engine_config: EngineConfig,
    ) -> Result<PartitionedEngine> {
        PartitionedEngine::open_inner(dir.as_ref(), engine_config, true)
    }

    fn open_inner(dir: &Path, engine_config: EngineConfig, create: bool) -> Result<Self> {
        let Some(manifest) = PartManifest::read(dir)? else {
            let engine = if create {
                Engine::open_or_create(dir, engine_config)?
            } else {
                Engine::open(dir, engine_config)?
            };
            return Ok(PartitionedEngine::single(engine));
        };
        engine_config.check()?;
        let listed: HashSet<String> = manifest
            .partitions
            .iter()
            .map(|(s, _)| part_dir_name(*s))
            .collect();
        // Orphans: created but never listed, or dropped but not yet removed.
        for entry in std::fs::read_dir(dir).map_err(Error::io(dir))? {
            let entry = entry.map_err(Error::io(dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with("p-") && !listed.contains(name) {
                let path = entry.path();
                std::fs::remove_dir_all(&path).map_err(Error::io(&path))?;
            }
        }
        let mut store = PartitionedEngine {
            keyer: Engine0(crate::engine::keyer_of(&engine_config)?),
            dir: dir.to_path_buf(),
            engine_config,
            manifest: Some(manifest.clone()),
            parts: BTreeMap::new(),
            expired: BTreeMap::new(),
            idle: HashMap::new(),
            retired: DedupStats::default(),
            rejected_too_old: 0,
            rollup_rebuilds: 0,
            clock_unsaved: false,
            postings: std::sync::Mutex::default(),
            catalog: append::Catalog::default(),
            append_scratch: append::AppendScratch::default(),
            background_merges: false,
        };
        let mut dirty = Vec::new();
        for (start, state) in &manifest.partitions {
            let pdir = dir.join(part_dir_name(*start));
            if let PartState::RawExpired { kept } = *state {
                let part = store.open_expired(&manifest, *start, pdir, kept)?;
                store.expired.insert(*start, part);
                continue;
            }
            let engine = Engine::open(pdir.join("engine"), store.engine_config.clone())?;
            let mut rollups = Vec::new();
            if *state == PartState::Sealed {
                for r in &manifest.rollups {
                    let path = rollup::rollup_path(&pdir, *r);
                    let seg = if path.exists() {
                        Some(Arc::new(Segment::open(&path)?))
                    } else {
                        None
                    };
                    rollups.push((*r, seg));
                }
            }
            if *state == PartState::Dirty {
                dirty.push(*start);
            }
            store.parts.insert(
                *start,
                Part {
                    start: *start,
                    end: start.saturating_add(manifest.width_ms),
                    dir: pdir,
                    engine,
                    state: *state,
                    rollups,
                    refs: append::PartRefs::default(),
                },
            );
        }
        for start in dirty {
            store.seal(start)?;
        }
        Ok(store)
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the store is partitioned (else a single engine holds all time).
    pub fn is_partitioned(&self) -> bool {
        self.manifest.is_some()
    }

    /// The partition settings (`None` for a single-engine store).
    pub fn partition_config(&self) -> Option<PartitionConfig> {
        self.manifest.as_ref().map(|m| PartitionConfig {
            width_ms: m.width_ms,
            retention_ms: m.retention_ms,
            late_window_ms: m.late_window_ms,
            seal_grace_ms: m.seal_grace_ms,
            rollups: m.rollups.clone(),
            rollup_retention: m
                .rollups
                .iter()
                .zip(&m.rollup_retention_ms)
                .filter_map(|(r, k)| k.map(|k| (*r, k)))
                .collect(),
        })
    }

    /// The engine configuration every partition is opened with.
    pub fn engine_config(&self) -> &EngineConfig {
        &self.engine_config
    }

    /// The newest timestamp accepted (`None` before the first, or for a single engine).
    pub fn high_water_ms(&self) -> Option<i64> {
        self.manifest
            .as_ref()
            .map(|m| m.high_water_ms)
            .filter(|h| *h != i64::MIN)
    }

    /// Partition counters.
    pub fn partition_stats(&self) -> PartitionStats {
        PartitionStats {
            dropped_partitions: self.manifest.as_ref().map_or(0, |m| m.dropped_partitions),
            dropped_rows: self.manifest.as_ref().map_or(0, |m| m.dropped_rows),
            expired_partitions: self.manifest.as_ref().map_or(0, |m| m.expired_partitions),
            expired_rows: self.manifest.as_ref().map_or(0, |m| m.expired_rows),
            rejected_too_old: self.rejected_too_old,
            rollup_rebuilds: self.rollup_rebuilds,
        }
    }

    /// The engines, oldest partition first.
    pub fn engines(&self) -> impl Iterator<Item = &Engine> {
        self.parts.values().map(|p| &p.engine)
    }

    /// The id of `point` (see [`Engine::id_of`]).
    ///
    /// # Errors
    /// [`Error::EventId`].
    pub fn id_of(&self, point: &Point) -> Result<SyntheticId> {
        match &self.keyer.0 {
            None => Ok(SyntheticId::new(point.tsid, point.ts_millis)),
            Some(k) => k.id_of(point).map_err(|detail| Error::EventId { detail }),
        }
    }

    /// The `_id` text of `id` (see [`Engine::format_id`]).
    pub fn format_id(&self, id: &SyntheticId) -> String {
        match &self.keyer.0 {
            None => id.to_string(),
            Some(k) => k.format(id),
        }
    }

    /// Parses an `_id` text (see [`Engine::parse_id`]).
    ///
    /// # Errors
    /// [`Error::BadId`].
    pub fn parse_id(&self, text: &str) -> Result<SyntheticId> {
        match &self.keyer.0 {
            None => SyntheticId::parse(text).map_err(|e| Error::BadId {
                text: text.to_owned(),
                detail: e.to_string(),
            }),
            Some(k) => k.parse(text),
        }
    }

    fn part_start(&self, ts: i64) -> i64 {
        match &self.manifest {
            None => i64::MIN,
            Some(m) => ts.div_euclid(m.width_ms) * m.width_ms,
        }
    }

    /// Why a point at `ts` is refused, if it is: older than the late window, or in a
    /// partition retention has dropped or would drop.
    fn too_old(&self, ts: i64, high_water_ms: i64) -> Option<Rejection> {
        let m = self.manifest.as_ref()?;
        if high_water_ms == i64::MIN {
            return None;
        }
        if let Some(w) = m.late_window_ms {
            let oldest = high_water_ms.saturating_sub(w);
            if ts < oldest {
                return Some(Rejection::TooOld {
                    ts_millis: ts,
                    oldest_millis: oldest,
                    rule: "late_window",
                });
            }
        }
        if let Some(r) = m.retention_ms {
            // Partitions ending at or before the cutoff are dropped; the first one kept
            // is the one holding the cutoff.
            let cutoff = high_water_ms.saturating_sub(r);
            let oldest = self.part_start(cutoff);
            if self.part_start(ts).saturating_add(m.width_ms) <= cutoff {
                return Some(Rejection::TooOld {
                    ts_millis: ts,
                    oldest_millis: oldest,
                    rule: "retention",
                });
            }
        }
        None
    }

    fn ensure_part(&mut self, start: i64) -> Result<()> {
        if self.parts.contains_key(&start) {
            return Ok(());
        }
        let Some(m) = &mut self.manifest else {
            return Ok(());
        };
        let pdir = self.dir.join(part_dir_name(start));
        // An orphan of a crash before its listing: start over.
        if pdir.exists() {
            std::fs::remove_dir_all(&pdir).map_err(Error::io(&pdir))?;
        }
        let mut engine = Engine::create(pdir.join("engine"), self.engine_config.clone())?;
        engine.set_background_merges(self.background_merges);
        crate::fsutil::sync_dir(&pdir)?;
        crate::fsutil::sync_dir(&self.dir)?;
        let mut next = m.clone();
        next.partitions.push((start, PartState::Active));
        next.partitions.sort_by_key(|(s, _)| *s);
        next.write(&self.dir)?;
        self.clock_unsaved = false;
        *m = next;
        self.parts.insert(
            start,
            Part {
                start,
                end: start.saturating_add(m.width_ms),
                dir: pdir,
                engine,
                state: PartState::Active,
                rollups: Vec::new(),
                refs: append::PartRefs::default(),
            },
        );
        Ok(())
    }

    fn set_state(&mut self, start: i64, state: PartState) -> Result<()> {
        let Some(m) = &mut self.manifest else {
            return Ok(());
        };
        let mut next = m.clone();
        for (s, st) in &mut next.partitions {
            if *s == start {
                *st = state;
            }
        }
        next.write(&self.dir)?;
        self.clock_unsaved = false;
        *m = next;
        if let Some(p) = self.parts.get_mut(&start) {
            p.state = state;
        }
        Ok(())
    }

    /// Runs a batch: each operation goes to the partition of its timestamp (a point's,
    /// or the one in the id of a `get`/`delete`); one outcome per operation, in order.
    /// A point older than the late window or the retention is [`Outcome::Rejected`]
    /// with [`Rejection::TooOld`]. A write that changes a sealed partition rebuilds the
    /// rollup buckets it touched before the call returns.
    ///
    /// # Errors
    /// Engine and I/O errors.
    pub fn batch(&mut self, ops: Vec<Op>) -> Result<Vec<Outcome>> {
        let n = ops.len();
        let mut out: Vec<Option<Outcome>> = vec![None; n];
        // Operations by partition, keeping their order within each.
        let mut groups: BTreeMap<i64, (Vec<usize>, Vec<Op>)> = BTreeMap::new();
        let mut high = self.high_water();
        for (i, op) in ops.into_iter().enumerate() {
            let ts = match &op {
                Op::Create(p) | Op::Index(p) => {
                    // The clock moves within the batch too: a point is judged against
                    // the newest one before it.
                    if let Some(reason) = self.too_old(p.ts_millis, high) {
                        self.rejected_too_old += 1;
                        let id = self
                            .id_of(p)
                            .unwrap_or(SyntheticId::new(p.tsid, p.ts_millis));
                        out[i] = Some(Outcome::Rejected { id, reason });
                        continue;
                    }
                    high = high.max(p.ts_millis);
                    p.ts_millis
                }
                Op::Delete(id) | Op::Get(id) => {
                    let start = self.part_start(id.ts_millis());
                    if !self.parts.contains_key(&start) {
                        out[i] = Some(Outcome::NotFound { id: *id });
                        continue;
                    }
                    id.ts_millis()
                }
            };
            let g = groups.entry(self.part_start(ts)).or_default();
            g.0.push(i);
            g.1.push(op);
        }
        self.advance_clock(high);
        for (start, (idx, ops)) in groups {
            self.ensure_part(start)?;
            // Points a write may change, for the rollup rebuild.
            let keys: Vec<Option<(Tsid, i64)>> = ops
                .iter()
                .map(|op| match op {
                    Op::Create(p) | Op::Index(p) => Some((p.tsid, p.ts_millis)),
                    Op::Delete(id) => Some((id.tsid(), id.ts_millis())),
                    Op::Get(_) => None,
                })
                .collect();
            let outcomes = self.write_part(start, keys, |engine| engine.batch(ops))?;
            for (i, o) in idx.iter().zip(outcomes) {
                if let Some(slot) = out.get_mut(*i) {
                    *slot = Some(o);
                }
            }
        }
        self.keep_buffer_budget()?;
        Ok(out
            .into_iter()
            .zip(0..)
            .map(|(o, _)| {
                o.unwrap_or(Outcome::Rejected {
                    id: SyntheticId::new(Tsid::from_bytes([0; 20]), 0),
                    reason: Rejection::UnknownRef { what: "partition" },
                })
            })
            .collect())
    }

    /// The store's clock: the newest timestamp accepted (`i64::MIN` before any, and for
    /// the single-engine layout).
    fn high_water(&self) -> i64 {
        self.manifest.as_ref().map_or(i64::MIN, |m| m.high_water_ms)
    }

    /// Moves the clock to `high` if that is later. The clock is kept in memory and
    /// persisted with the next manifest switch (a new partition, a seal, retention) or by
    /// refresh and close: a crash may set it back to then, which only widens the late
    /// window for a moment.
    fn advance_clock(&mut self, high: i64) {
        if let Some(m) = &mut self.manifest
            && high > m.high_water_ms
        {
            m.high_water_ms = high;
            self.clock_unsaved = true;
        }
    }

    /// Runs `write` on the engine of the (existing) partition at `start`. `keys` names
    /// the point each operation may change, in order; a write that changes a sealed
    /// partition marks it Dirty first (a crash before the rebuild rebuilds on open),
    /// then rebuilds the rollup buckets of the points changed and seals it again.
    fn write_part(
        &mut self,
        start: i64,
        keys: Vec<Option<(Tsid, i64)>>,
        write: impl FnOnce(&mut Engine) -> Result<Vec<Outcome>>,
    ) -> Result<Vec<Outcome>> {
        let sealed = self
            .parts
            .get(&start)
            .is_some_and(|p| p.state == PartState::Sealed);
        if sealed {
            self.set_state(start, PartState::Dirty)?;
        }
        let Some(part) = self.parts.get_mut(&start) else {
            return Ok(Vec::new());
        };
        let outcomes = write(&mut part.engine)?;
        if sealed {
            let touched: Vec<(Tsid, i64)> = outcomes
                .iter()
                .zip(keys.iter().chain(std::iter::repeat(&None)))
                .filter(|(o, _)| {
                    matches!(
                        o,
                        Outcome::Created { .. } | Outcome::Indexed { .. } | Outcome::Deleted { .. }
                    )
                })
                .filter_map(|(_, k)| *k)
                .collect();
            if !touched.is_empty() {
                failpoint("late-write-before-rebuild");
                self.rebuild_rollups(start, &touched)?;
                self.rollup_rebuilds += 1;
            }
            self.set_state(start, PartState::Sealed)?;
        }
        Ok(outcomes)
    }

    /// One refresh budget for all partitions, not one per partition: while more than
    /// `refresh_rows` points are buffered across them, the partition buffering the most is
    /// refreshed, and a partition other than the newest gives its buffer's memory back.
    /// (Each partition's engine refreshes itself at `refresh_rows` too, but seven
    /// partitions each short of it held seven buffers' worth, and kept their capacity.)
    fn keep_buffer_budget(&mut self) -> Result<()> {
        let budget = self.engine_config.refresh_rows;
        let newest = self.parts.keys().next_back().copied();
        while self.buffered() > budget {
            let Some(start) = self
                .parts
                .iter()
                .filter(|(_, p)| p.engine.buffered() > 0)
                .max_by_key(|(_, p)| p.engine.buffered())
                .map(|(s, _)| *s)
            else {
                break;
            };
            let Some(part) = self.parts.get_mut(&start) else {
                break;
            };
            part.engine.refresh()?;
            if Some(start) != newest {
                part.engine.release_buffer();
            }
        }
        Ok(())
    }

    fn rebuild_rollups(&mut self, start: i64, touched: &[(Tsid, i64)]) -> Result<()> {
        let Some(part) = self.parts.get_mut(&start) else {
            return Ok(());
        };
        part.engine.refresh()?;
        part.engine.merge_all()?;
        let mut next = Vec::new();
        for (r, old) in &part.rollups {
            let pairs: HashSet<(Tsid, i64)> = touched
                .iter()
                .map(|(t, ts)| (*t, ts.div_euclid(*r) * r))
                .collect();
            let seg = rollup::rebuild(
                &part.engine,
                *r,
                old.as_deref(),
                &pairs,
                &rollup::rollup_path(&part.dir, *r),
            )?;
            next.push((*r, seg));
        }
        part.rollups = next;
        let dir = part.dir.clone();
        self.forget_rollup_postings(&dir);
        Ok(())
    }

    /// Drops the cached dimension indexes of the rollups of partition directory `dir`:
    /// a rollup file is rewritten in place (same path) when it is rebuilt, unlike
    /// segment files, so its cached index would describe the old series table.
    fn forget_rollup_postings(&self, dir: &Path) {
        let mut cache = match self.postings.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        cache.retain(|p, _| p.parent() != Some(dir));
    }

    /// Seals the partition starting at `start`: refresh, merge into one segment, build
    /// its rollups, mark it sealed in the manifest. Sealing again rebuilds the rollups.
    ///
    /// # Errors
    /// Engine and I/O errors; [`Error::InvalidConfig`] for a single-engine store.
    pub fn seal(&mut self, start: i64) -> Result<()> {
        let Some(m) = &self.manifest else {
            return Err(Error::InvalidConfig {
                name: "partition",
                detail: "a single-engine store has no partitions to seal".to_owned(),
            });
        };
        let resolutions = m.rollups.clone();
        let Some(part) = self.parts.get_mut(&start) else {
            return Ok(());
        };
        part.engine.refresh()?;
        part.engine.merge_all()?;
        part.engine.release_buffer();
        let mut rollups = Vec::new();
        for r in resolutions {
            let seg = rollup::build(&part.engine, r, &rollup::rollup_path(&part.dir, r))?;
            rollups.push((r, seg));
        }
        part.rollups = rollups;
        let dir = part.dir.clone();
        self.forget_rollup_postings(&dir);
        self.set_state(start, PartState::Sealed)
    }

    /// Seals every active partition the high-water mark is past by the seal grace, or
    /// that the high-water mark is past and that has had no write for the seal grace of
    /// wall-clock time (see [`maintain_at`](Self::maintain_at)), and applies retention.
    ///
    /// # Errors
    /// As [`seal`](Self::seal) and [`enforce_retention`](Self::enforce_retention).
    pub fn maintain(&mut self) -> Result<MaintainReport> {
        self.maintain_at(wall_clock_ms())
    }

    /// [`maintain`](Self::maintain) with the wall-clock time given (epoch milliseconds;
    /// tests inject it). A partition counts as without writes from the first call that
    /// saw its current write fingerprint (rows, checks, deletes): so the wall-clock rule
    /// seals it one seal grace after the first call that followed its last write, at the
    /// granularity of the calls (the server calls this every few seconds).
    ///
    /// # Errors
    /// As [`maintain`](Self::maintain).
    pub fn maintain_at(&mut self, now_ms: i64) -> Result<MaintainReport> {
        let Some(m) = &self.manifest else {
            return Ok(MaintainReport::default());
        };
        let high = m.high_water_ms;
        let grace = m.seal_grace_ms;
        let mut due = Vec::new();
        let mut idle = HashMap::new();
        for p in self.parts.values() {
            if p.state != PartState::Active {
                continue;
            }
            let mark = WriteMark::of(&p.engine);
            let since = match self.idle.get(&p.start) {
                Some((m, t)) if *m == mark => *t,
                _ => now_ms,
            };
            idle.insert(p.start, (mark, since));
            let by_event_time = p.end.saturating_add(grace) <= high;
            let by_wall_clock = p.end <= high && now_ms.saturating_sub(since) >= grace;
            if by_event_time || by_wall_clock {
                due.push(p.start);
            }
        }
        self.idle = idle;
        let report = self.retention_pass()?;
        let mut sealed = 0;
        for start in due {
            if self.parts.contains_key(&start) {
                self.seal(start)?;
                self.idle.remove(&start);
                sealed += 1;
            }
        }
        Ok(MaintainReport { sealed, ..report })
    }

    /// Applies retention, in **one** manifest switch: drops every partition that ends at
    /// least the retention before the high-water mark, except that a partition within
    /// a rollup's own retention (see [`PartitionConfig::with_rollup_retention_ms`])
    /// keeps those rollups and loses its raw rows and other rollups instead (sealed
    /// first if it was not), and a partition so kept is dropped once past every kept
    /// rollup's retention. A crash before the switch keeps everything as it was, a crash
    /// after it leaves the new state (files no longer listed are removed on open).
    /// Returns the partitions dropped whole and the raw rows they held.
    ///
    /// Failpoints (see [`FAILPOINT_ENV`]): `retention-before-manifest`,
    /// `retention-after-manifest`, `retention-mid-remove` (here; and
    /// `late-write-before-rebuild` in [`batch`](Self::batch)).
    ///
    /// # Errors
    /// I/O errors; seal errors.
    pub fn enforce_retention(&mut self) -> Result<(usize, u64)> {
        let r = self.retention_pass()?;
        Ok((r.dropped, r.dropped_rows))
    }

    /// The mask of the rollups (over the manifest's resolutions) a partition ending at
    /// `end` keeps when past the raw cutoff.
    fn kept_mask(m: &PartManifest, end: i64) -> u32 {
        let mut mask = 0u32;
        for (i, keep) in m.rollup_retention_ms.iter().enumerate().take(32) {
            if let Some(k) = keep
                && end > m.high_water_ms.saturating_sub(*k)
            {
                mask |= 1 << i;
            }
        }
        mask
    }

    fn retention_pass(&mut self) -> Result<MaintainReport> {
        let mut report = MaintainReport::default();
        let Some(m) = &self.manifest else {
            return Ok(report);
        };
        let Some(r) = m.retention_ms else {
            return Ok(report);
        };
        if m.high_water_ms == i64::MIN {
            return Ok(report);
        }
        let cutoff = m.high_water_ms.saturating_sub(r);
        let mut doomed: Vec<i64> = Vec::new();
        let mut expiring: Vec<(i64, u32)> = Vec::new();
        for p in self.parts.values().filter(|p| p.end <= cutoff) {
            match Self::kept_mask(m, p.end) {
                0 => doomed.push(p.start),
                mask => expiring.push((p.start, mask)),
            }
        }
        let mut doomed_expired: Vec<i64> = Vec::new();
        let mut shrinking: Vec<(i64, u32)> = Vec::new();
        for p in self.expired.values() {
            match Self::kept_mask(m, p.end) & p.kept {
                0 => doomed_expired.push(p.start),
                mask if mask != p.kept => shrinking.push((p.start, mask)),
                _ => {}
            }
        }
        if doomed.is_empty()
            && expiring.is_empty()
            && doomed_expired.is_empty()
            && shrinking.is_empty()
        {
            return Ok(report);
        }
        // A partition that keeps rollups has them built first (its own manifest switch:
        // a crash after it leaves a sealed partition, still past the retention).
        // Rollups written before they counted their rows are rebuilt too, as nothing
        // could count them once the raw rows are gone.
        for (start, _) in &expiring {
            let stale = self.parts.get(start).is_some_and(|p| {
                p.state != PartState::Sealed
                    || p.rollups.iter().any(|(_, s)| {
                        s.as_ref().is_some_and(|s| {
                            !s.columns().iter().any(|c| c.name == DOC_COUNT_COLUMN)
                        })
                    })
            });
            if stale {
                self.seal(*start)?;
            }
        }
        let Some(m) = &self.manifest else {
            return Ok(report);
        };
        let rows_of = |starts: &mut dyn Iterator<Item = &i64>| -> u64 {
            starts
                .filter_map(|s| self.parts.get(s))
                .map(|p| p.engine.live_count())
                .sum()
        };
        let dropped_rows = rows_of(&mut doomed.iter());
        let expired_rows = rows_of(&mut expiring.iter().map(|(s, _)| s));
        let mut next = m.clone();
        next.partitions
            .retain(|(s, _)| !doomed.contains(s) && !doomed_expired.contains(s));
        for (s, st) in &mut next.partitions {
            if let Some((_, kept)) = expiring.iter().chain(&shrinking).find(|(x, _)| x == s) {
                *st = PartState::RawExpired { kept: *kept };
            }
        }
        next.dropped_partitions += (doomed.len() + doomed_expired.len()) as u64;
        next.dropped_rows += dropped_rows;
        next.expired_partitions += expiring.len() as u64;
        next.expired_rows += expired_rows;
        failpoint("retention-before-manifest");
        next.write(&self.dir)?;
        self.clock_unsaved = false;
        self.manifest = Some(next.clone());
        failpoint("retention-after-manifest");
        let mut first = true;
        for start in &doomed {
            if let Some(part) = self.parts.remove(start) {
                absorb(&mut self.retired, part.engine.stats());
                let dir = part.dir.clone();
                part.engine.close()?;
                if std::mem::take(&mut first) {
                    // Half of one partition's files gone: still invisible, still dropped.
                    remove_some(&dir.join("engine"))?;
                    failpoint("retention-mid-remove");
                }
                std::fs::remove_dir_all(&dir).map_err(Error::io(&dir))?;
            }
        }
        for (start, kept) in &expiring {
            if let Some(part) = self.parts.remove(start) {
                absorb(&mut self.retired, part.engine.stats());
                let Part { dir, engine, .. } = part;
                engine.close()?;
                if std::mem::take(&mut first) {
                    remove_some(&dir.join("engine"))?;
                    failpoint("retention-mid-remove");
                }
                let expired = self.open_expired(&next, *start, dir, *kept)?;
                self.expired.insert(*start, expired);
            }
        }
        for start in &doomed_expired {
            if let Some(part) = self.expired.remove(start) {
                std::fs::remove_dir_all(&part.dir).map_err(Error::io(&part.dir))?;
            }
        }
        for (start, kept) in &shrinking {
            if let Some(part) = self.expired.remove(start) {
                let expired = self.open_expired(&next, *start, part.dir, *kept)?;
                self.expired.insert(*start, expired);
            }
        }
        crate::fsutil::sync_dir(&self.dir)?;
        report.dropped = doomed.len() + doomed_expired.len();
        report.dropped_rows = dropped_rows;
        report.raw_expired = expiring.len();
        Ok(report)
    }

    /// Opens a partition past the raw retention that keeps the rollups in `kept`,
    /// finishing what a crash after its manifest switch left: its raw engine and the
    /// rollup files it does not keep are removed.
    fn open_expired(
        &self,
        m: &PartManifest,
        start: i64,
        dir: PathBuf,
        kept: u32,
    ) -> Result<ExpiredPart> {
        let engine_dir = dir.join("engine");
        if engine_dir.exists() {
            std::fs::remove_dir_all(&engine_dir).map_err(Error::io(&engine_dir))?;
        }
        let mut rollups = Vec::new();
        for (i, r) in m.rollups.iter().enumerate() {
            let path = rollup::rollup_path(&dir, *r);
            let keep = i < 32 && kept & (1 << i) != 0;
            if keep {
                let seg = if path.exists() {
                    Some(Arc::new(Segment::open(&path)?))
                } else {
                    None
                };
                rollups.push((*r, seg));
            } else if path.exists() {
                std::fs::remove_file(&path).map_err(Error::io(&path))?;
            }
        }
        crate::fsutil::sync_dir(&dir)?;
        Ok(ExpiredPart {
            start,
            end: start.saturating_add(m.width_ms),
            dir,
            rollups,
            kept,
        })
    }

    /// The partitions, oldest first.
    pub fn partitions(&self) -> Vec<PartitionInfo> {
        let mut list = self
            .parts
            .values()
            .map(|p| {
                let seg_bytes: u64 = p
                    .engine
                    .segments()
                    .iter()
                    .map(|(path, _, _)| std::fs::metadata(path).map_or(0, |m| m.len()))
                    .sum();
                let rollups = rollup_infos(&p.dir, &p.rollups);
                PartitionInfo {
                    start_ms: p.start,
                    end_ms: p.end,
                    rows: p.engine.live_count(),
                    segments: p.engine.segment_count(),
                    bytes: seg_bytes + rollups.iter().map(|r| r.2).sum::<u64>(),
                    sealed: p.state == PartState::Sealed,
                    raw_expired: false,
                    rollups,
                }
            })
            .chain(self.expired.values().map(|p| {
                let rollups = rollup_infos(&p.dir, &p.rollups);
                PartitionInfo {
                    start_ms: p.start,
                    end_ms: p.end,
                    rows: 0,
                    segments: 0,
                    bytes: rollups.iter().map(|r| r.2).sum(),
                    sealed: true,
                    raw_expired: true,
                    rollups,
                }
            }))
            .collect::<Vec<PartitionInfo>>();
        list.sort_by_key(|p| p.start_ms);
        list
    }

    /// The stored point `id`.
    ///
    /// # Errors
    /// Segment read errors.
    pub fn get(&self, id: &SyntheticId) -> Result<Option<Point>> {
        match self.parts.get(&self.part_start(id.ts_millis())) {
            Some(p) => p.engine.get(id),
            None => Ok(None),
        }
    }

    /// Writes every partition's buffer as a segment.
    ///
    /// # Errors
    /// Engine errors.
    pub fn refresh(&mut self) -> Result<()> {
        self.parts
            .values_mut()
            .try_for_each(|p| p.engine.refresh())?;
        self.save_clock()
    }

    fn save_clock(&mut self) -> Result<()> {
        if let Some(m) = &self.manifest
            && self.clock_unsaved
        {
            m.write(&self.dir)?;
            self.clock_unsaved = false;
        }
        Ok(())
    }

    /// Merges each partition into one segment.
    ///
    /// # Errors
    /// Engine errors.
    pub fn merge_all(&mut self) -> Result<()> {
        self.parts.values_mut().try_for_each(|p| {
            p.engine.refresh()?;
            p.engine.merge_all()
        })
    }

    /// Syncs every partition's log.
    ///
    /// # Errors
    /// I/O errors.
    pub fn sync(&mut self) -> Result<()> {
        self.parts.values_mut().try_for_each(|p| p.engine.sync())
    }

    /// Closes every partition.
    ///
    /// # Errors
    /// I/O errors.
    pub fn close(mut self) -> Result<()> {
        self.save_clock()?;
        for p in self.parts.into_values() {
            p.engine.close()?;
        }
        Ok(())
    }

    /// Dedup counters summed over the partitions (and those dropped this session).
    pub fn stats(&self) -> DedupStats {
        let mut s = self.retired;
        s.strategy = self.engine_config.strategy();
        for p in self.parts.values() {
            absorb(&mut s, p.engine.stats());
        }
        s
    }

    /// Live points in all partitions.
    pub fn live_count(&self) -> u64 {
        self.parts.values().map(|p| p.engine.live_count()).sum()
    }

    /// Segments in all partitions.
    pub fn segment_count(&self) -> usize {
        self.parts.values().map(|p| p.engine.segment_count()).sum()
    }

    /// Buffered points in all partitions.
    pub fn buffered(&self) -> usize {
        self.parts.values().map(|p| p.engine.buffered()).sum()
    }

    /// Deleted rows in all partitions.
    pub fn deleted_rows(&self) -> u64 {
        self.parts.values().map(|p| p.engine.deleted_rows()).sum()
    }

    /// Distinct series over all partitions.
    pub fn series_count(&self) -> u64 {
        if self.parts.len() == 1 {
            return self.parts.values().map(|p| p.engine.series_count()).sum();
        }
        let mut seen: HashSet<Tsid> = HashSet::new();
        for p in self.parts.values() {
            for (_, seg, _) in p.engine.segments() {
                seen.extend(seg.series().iter().map(|s| s.tsid));
            }
            if p.engine.buffered() > 0 {
                // Asked once per buffered point (and per series and segment): collects
                // the buffered series without reading a row.
                let _ = p.engine.scan_live(
                    i64::MIN,
                    i64::MAX,
                    |t, _| {
                        seen.insert(*t);
                        false
                    },
                    |_, _| {},
                );
            }
        }
        seen.len() as u64
    }

    /// Live segments of all partitions, oldest partition first (see [`Engine::segments`]).
    pub fn segments(&self) -> Vec<(&Path, &Segment, u64)> {
        self.parts
            .values()
            .flat_map(|p| p.engine.segments())
            .collect()
    }

    /// Rollup files of all partitions, with their segments.
    pub fn rollup_segments(&self) -> Vec<(i64, i64, &Segment)> {
        let mut out: Vec<(i64, i64, &Segment)> = self
            .parts
            .values()
            .map(|p| (p.start, &p.rollups))
            .chain(self.expired.values().map(|p| (p.start, &p.rollups)))
            .flat_map(|(start, rollups)| {
                rollups
                    .iter()
                    .filter_map(move |(r, s)| s.as_deref().map(|s| (start, *r, s)))
            })
            .collect();
        out.sort_by_key(|(start, r, _)| (*start, *r));
        out
    }

    /// The rollup segment at `resolution_ms` of the partition starting at `partition`
    /// (sealed, or past the raw retention and keeping it), with its file.
    pub fn rollup_of(&self, partition: i64, resolution_ms: i64) -> Option<(PathBuf, &Segment)> {
        let (dir, rollups) = match self.parts.get(&partition) {
            Some(p) if p.state == PartState::Sealed => (&p.dir, &p.rollups),
            Some(_) => return None,
            None => {
                let p = self.expired.get(&partition)?;
                (&p.dir, &p.rollups)
            }
        };
        let (_, seg) = rollups.iter().find(|(r, _)| *r == resolution_ms)?;
        seg.as_deref()
            .map(|s| (rollup::rollup_path(dir, resolution_ms), s))
    }

    /// The rollup segment a [`Piece::Rollup`] reads, with its path and the piece's time
    /// range; `None` for another piece or a rollup no longer there.
    fn rollup_piece(&self, piece: &Piece) -> Option<(PathBuf, &Segment, i64, i64)> {
        let Piece::Rollup {
            partition,
            resolution_ms,
            from,
            to,
        } = *piece
        else {
            return None;
        };
        let (path, seg) = self.rollup_of(partition, resolution_ms)?;
        Some((path, seg, from, to))
    }

    /// [`Engine::scan_live`] over the partitions overlapping `[from, to]`, oldest first.
    ///
    /// # Errors
    /// Segment read errors naming the segment.
    pub fn scan_live(
        &self,
        from: i64,
        to: i64,
        mut keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        mut f: impl FnMut(Point, Option<(&Segment, RowId)>),
    ) -> Result<()> {
        for p in self.parts.values() {
            if p.end <= from || p.start > to {
                continue;
            }
            p.engine.scan_live(from, to, &mut keep_series, &mut f)?;
        }
        Ok(())
    }

    /// The engines of the live partitions overlapping `[from, to]`, oldest first.
    pub(crate) fn engines_overlapping(&self, from: i64, to: i64) -> impl Iterator<Item = &Engine> {
        self.parts
            .values()
            .filter(move |p| p.end > from && p.start <= to)
            .map(|p| &p.engine)
    }

    /// The dimension index of a live segment (cached).
    pub fn postings(&self, path: &Path, segment: &Segment) -> Arc<Postings> {
        let mut cache = match self.postings.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(p) = cache.get(path) {
            return p.clone();
        }
        // Segments replaced by merges or dropped by retention leave the cache here.
        if cache.len() > 4 * self.segment_count().max(16) {
            let live: HashSet<&Path> = self.segments().iter().map(|(p, _, _)| *p).collect();
            cache.retain(|p, _| live.contains(p.as_path()));
        }
        let p = Arc::new(Postings::build(segment));
        cache.insert(path.to_path_buf(), p.clone());
        p
    }

    /// As [`scan_live`](Self::scan_live), with each segment's series chosen through its
    /// dimension index by `select` (only their rows are read); buffered points are
    /// chosen by `keep_series`, which must agree with `select`.
    ///
    /// # Errors
    /// Segment read errors naming the segment.
    pub fn scan_live_indexed(
        &self,
        from: i64,
        to: i64,
        mut keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        mut select: impl FnMut(&Postings) -> roaring::RoaringBitmap,
        mut f: impl FnMut(Point, Option<(&Segment, RowId)>),
    ) -> Result<()> {
        for p in self.parts.values() {
            if p.end <= from || p.start > to {
                continue;
            }
            p.engine.scan_live_selected(
                from,
                to,
                &mut keep_series,
                |path, seg| Some(select(&self.postings(path, seg))),
                &mut f,
            )?;
        }
        Ok(())
    }

    /// As [`scan_live_indexed`](Self::scan_live_indexed), with `select` also given the
    /// segment, whose series table (in tsid order) maps the chosen ordinals to tsids
    /// and series time ranges: a caller can choose series by tsid as well as by
    /// dimension (a bounded group of series per call, so a long range is read one group
    /// at a time), or only note the selected series and return an empty bitmap (then no
    /// row is read). Buffered points are chosen by `keep_series`, which must agree.
    ///
    /// # Errors
    /// Segment read errors naming the segment.
    pub fn scan_live_indexed_segments(
        &self,
        from: i64,
        to: i64,
        mut keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        mut select: impl FnMut(&Postings, &Segment) -> roaring::RoaringBitmap,
        mut f: impl FnMut(Point, Option<(&Segment, RowId)>),
    ) -> Result<()> {
        for p in self.parts.values() {
            if p.end <= from || p.start > to {
                continue;
            }
            p.engine.scan_live_selected(
                from,
                to,
                &mut keep_series,
                |path, seg| Some(select(&self.postings(path, seg), seg)),
                &mut f,
            )?;
        }
        Ok(())
    }

    /// The dimension names of the series with data in `[from, to]` (segments through
    /// their dimension indexes, buffered points directly).
    ///
    /// # Errors
    /// Segment read errors.
    pub fn label_names(&self, from: i64, to: i64) -> Result<BTreeSet<String>> {
        let mut out = BTreeSet::new();
        let mut buffered = BTreeSet::new();
        self.each_label(
            from,
            to,
            &mut |p| out.extend(p.names().map(str::to_owned)),
            &mut |dims| buffered.extend(dims.iter().map(|(n, _)| n.clone())),
        )?;
        out.append(&mut buffered);
        Ok(out)
    }

    /// The values of dimension `name` in `[from, to]`, each with the number of series
    /// (per segment, summed) that have it.
    ///
    /// # Errors
    /// Segment read errors.
    pub fn label_values(&self, name: &str, from: i64, to: i64) -> Result<BTreeMap<String, u64>> {
        let mut out: BTreeMap<String, u64> = BTreeMap::new();
        let mut buffered: HashSet<Tsid> = HashSet::new();
        let mut seg = |p: &Postings| {
            for (v, n) in p.values(name) {
                *out.entry(v.to_owned()).or_insert(0) += n;
            }
        };
        let mut buf_values: Vec<String> = Vec::new();
        let mut buf = |dims: &[(String, Dim)]| {
            if let Some((_, d)) = dims.iter().find(|(n, _)| n == name) {
                buf_values.push(dim_value_text(d));
            }
        };
        self.each_label_series(from, to, &mut seg, &mut buf, &mut buffered)?;
        for v in buf_values {
            *out.entry(v).or_insert(0) += 1;
        }
        Ok(out)
    }

    fn each_label(
        &self,
        from: i64,
        to: i64,
        seg: &mut dyn FnMut(&Postings),
        buf: DimsSink<'_>,
    ) -> Result<()> {
        let mut seen = HashSet::new();
        self.each_label_series(from, to, seg, buf, &mut seen)
    }

    /// Calls `seg` for the index of each live segment overlapping `[from, to]` and `buf`
    /// once per buffered series with points in the range.
    fn each_label_series(
        &self,
        from: i64,
        to: i64,
        seg: &mut dyn FnMut(&Postings),
        buf: DimsSink<'_>,
        seen: &mut HashSet<Tsid>,
    ) -> Result<()> {
        for p in self.parts.values() {
            if p.end <= from || p.start > to {
                continue;
            }
            for (path, segment, _) in p.engine.segments() {
                let overlaps = segment.min_timestamp().is_some_and(|lo| lo <= to)
                    && segment.max_timestamp().is_some_and(|hi| hi >= from);
                if overlaps {
                    seg(&self.postings(path, segment));
                }
            }
            if p.engine.buffered() > 0 {
                // Segments answer `None`: nothing of them is read twice (the buffered
                // series are listed once).
                p.engine.scan_live_selected(
                    from,
                    to,
                    |t, dims| {
                        if seen.insert(*t) {
                            buf(dims);
                        }
                        false
                    },
                    |_, _| Some(roaring::RoaringBitmap::new()),
                    |_, _| {},
                )?;
            }
        }
        // Past the raw retention, the series are those of a kept rollup (the same
        // dimensions, one row per series and bucket).
        for p in self.expired.values() {
            if p.end <= from || p.start > to {
                continue;
            }
            let finest = p
                .rollups
                .iter()
                .find_map(|(r, s)| s.as_ref().map(|s| (*r, s)));
            if let Some((r, segment)) = finest {
                let lo = from.div_euclid(r) * r;
                let overlaps = segment.min_timestamp().is_some_and(|a| a <= to)
                    && segment.max_timestamp().is_some_and(|b| b >= lo);
                if overlaps {
                    seg(&self.postings(&rollup::rollup_path(&p.dir, r), segment));
                }
            }
        }
        Ok(())
    }

    /// Plans a scan of `[from, to]` for buckets of `interval_ms`: each sealed partition
    /// reads its coarsest rollup whose resolution divides the interval, over the buckets
    /// the range covers whole; everything else (active partitions, edges, no dividing
    /// rollup) reads raw rows. A partition past the raw retention reads its kept rollups
    /// the same way, and what they cannot answer is a [`Piece::Expired`]. Pieces come in
    /// time order.
    pub fn plan(&self, from: i64, to: i64, interval_ms: i64) -> Vec<Piece> {
        let mut out = Vec::new();
        if from > to {
            return out;
        }
        let raw = |out: &mut Vec<Piece>, a: i64, b: i64| {
            if a > b {
                return;
            }
            match out.last_mut() {
                Some(Piece::Raw { to, .. }) if to.checked_add(1) == Some(a) => *to = b,
                _ => out.push(Piece::Raw { from: a, to: b }),
            }
        };
        let mut cursor = from;
        // Live and expired partitions, in time order: (start, end, kept rollups or the
        // sealed ones, whether raw rows remain).
        let mut spans: Vec<(i64, i64, &[RollupSlot], bool)> = self
            .parts
            .values()
            .map(|p| {
                let rollups: &[RollupSlot] = if p.state == PartState::Sealed {
                    &p.rollups
                } else {
                    &[]
                };
                (p.start, p.end, rollups, true)
            })
            .chain(
                self.expired
                    .values()
                    .map(|p| (p.start, p.end, p.rollups.as_slice(), false)),
            )
            .collect();
        spans.sort_by_key(|s| s.0);
        for (start, end, rollups, has_raw) in spans {
            if end <= from || start > to {
                continue;
            }
            let lo = from.max(start);
            let hi = to.min(end.saturating_sub(1));
            // Time between partitions holds no rows: planned raw (empty) to stay whole.
            raw(&mut out, cursor, lo.saturating_sub(1));
            cursor = hi.saturating_add(1);
            // What reads what a rollup cannot: raw rows, or nothing (expired).
            let rest = |out: &mut Vec<Piece>, a: i64, b: i64| {
                if has_raw {
                    raw(out, a, b);
                } else if a <= b {
                    match out.last_mut() {
                        Some(Piece::Expired { to, .. }) if to.checked_add(1) == Some(a) => *to = b,
                        _ => out.push(Piece::Expired { from: a, to: b }),
                    }
                }
            };
            let res = rollups
                .iter()
                .map(|(r, _)| *r)
                .filter(|r| interval_ms > 0 && interval_ms % r == 0)
                .max();
            match res {
                Some(r) => {
                    let a = lo.div_euclid(r) * r + if lo.rem_euclid(r) == 0 { 0 } else { r };
                    let b = (hi.saturating_add(1)).div_euclid(r) * r; // exclusive
                    if a < b {
                        rest(&mut out, lo, a - 1);
                        out.push(Piece::Rollup {
                            partition: start,
                            resolution_ms: r,
                            from: a,
                            to: b - 1,
                        });
                        rest(&mut out, b, hi);
                    } else {
                        rest(&mut out, lo, hi);
                    }
                }
                None => rest(&mut out, lo, hi),
            }
        }
        raw(&mut out, cursor, to);
        out
    }

    /// Reads whole rollup rows of a [`Piece::Rollup`] (every metric, and the row count):
    /// `f` per series and bucket, in (tsid, bucket) order, for the series `select`
    /// picks through the rollup segment's dimension index and `keep_series` accepts. A
    /// piece whose partition or rollup is gone reads nothing.
    ///
    /// # Errors
    /// Segment read errors.
    pub fn scan_rollup_rows(
        &self,
        piece: &Piece,
        mut keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        select: impl FnOnce(&Postings) -> roaring::RoaringBitmap,
        mut f: impl FnMut(RollupRow<'_>),
    ) -> Result<()> {
        let Some((path, seg, from, to)) = self.rollup_piece(piece) else {
            return Ok(());
        };
        let chosen = select(&self.postings(&path, seg));
        let cols = rollup::RowColumns::of(seg);
        let series = seg.series();
        let kept: Vec<usize> = chosen
            .iter()
            .map(|ord| ord as usize)
            .filter(|&i| {
                series.get(i).is_some_and(|s| {
                    s.max_ts >= from && s.min_ts <= to && keep_series(&s.tsid, &s.dims)
                })
            })
            .collect();
        // One decoded block kept across series (neighbours share blocks).
        seg.scan_series_many(kept, from, to, |rv| {
            let (doc_count, metrics) = cols.read(rv.metrics);
            f(RollupRow {
                tsid: &rv.series.tsid,
                dims: &rv.series.dims,
                bucket_ms: rv.ts_millis,
                doc_count,
                metrics,
            });
        })?;
        Ok(())
    }

    /// Reads the rollup rows of a [`Piece::Rollup`] for `metric`: `f(tsid, dims, bucket
    /// start, stats)` per series and bucket, in (tsid, bucket) order, for the series
    /// `keep_series` accepts. A piece whose partition or rollup is gone reads nothing.
    ///
    /// # Errors
    /// Segment read errors.
    pub fn scan_rollup(
        &self,
        piece: &Piece,
        metric: &str,
        mut keep_series: impl FnMut(&Tsid, &[(String, Dim)]) -> bool,
        mut f: impl FnMut(&Tsid, &[(String, Dim)], i64, RollupStats),
    ) -> Result<()> {
        let Some((_, seg, from, to)) = self.rollup_piece(piece) else {
            return Ok(());
        };
        let cols = rollup::StatColumns::of(seg, metric);
        let mut verdict: Option<(u64, bool)> = None;
        seg.scan_time_range(from, to, |rv| {
            let keep = match verdict {
                Some((first, k)) if first == rv.series.first_row => k,
                _ => {
                    let k = keep_series(&rv.series.tsid, &rv.series.dims);
                    verdict = Some((rv.series.first_row, k));
                    k
                }
            };
            if keep && let Some(s) = cols.read(rv.metrics) {
                f(&rv.series.tsid, &rv.series.dims, rv.ts_millis, s);
            }
        })?;
        Ok(())
    }
}

/// What tells whether a partition was written to between two `maintain` calls: any
/// write (create, index, delete) moves one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WriteMark {
    checks: u64,
    live: u64,
    deleted: u64,
    buffered: usize,
}

impl WriteMark {
    fn of(e: &Engine) -> WriteMark {
        WriteMark {
            checks: e.stats().checks,
            live: e.live_count(),
            deleted: e.deleted_rows(),
            buffered: e.buffered(),
        }
    }
}

/// The wall-clock time, epoch milliseconds (0 if the clock is before the epoch).
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// One row of a rollup (a series and bucket), as
/// [`PartitionedEngine::scan_rollup_rows`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct RollupRow<'a> {
    /// The series.
    pub tsid: &'a Tsid,
    /// Its dimensions.
    pub dims: &'a [(String, Dim)],
    /// The bucket start.
    pub bucket_ms: i64,
    /// Raw rows in the bucket (`None`: a rollup built before this count was kept).
    pub doc_count: Option<u64>,
    /// The stats of each metric with values in the bucket, by name.
    pub metrics: Vec<(String, RollupStats)>,
}

/// A partition's rollup at one resolution (`None`: built, empty).
type RollupSlot = (i64, Option<Arc<Segment>>);

/// A callback given a series' dimensions.
type DimsSink<'a> = &'a mut dyn FnMut(&[(String, Dim)]);

/// Name of the directory of the partition starting at `start`.
fn part_dir_name(start: i64) -> String {
    format!("p-{start}")
}

/// Removes about half of the files of `dir` (the retention crash test's "half-deleted
/// partition").
fn remove_some(dir: &Path) -> Result<()> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(Error::io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    names.sort();
    for path in names.iter().step_by(2) {
        std::fs::remove_file(path).map_err(Error::io(path))?;
    }
    Ok(())
}

fn absorb(into: &mut DedupStats, s: &DedupStats) {
    into.checks += s.checks;
    into.live_map_hits += s.live_map_hits;
    into.segments_pruned_by_time += s.segments_pruned_by_time;
    into.series_range_negatives += s.series_range_negatives;
    into.bloom_negatives += s.bloom_negatives;
    into.false_positives += s.false_positives;
    into.verifications += s.verifications;
    into.true_duplicates += s.true_duplicates;
    into.verification_nanos += s.verification_nanos;
    into.bloom_filters_ored += s.bloom_filters_ored;
    into.bloom_filters_rebuilt += s.bloom_filters_rebuilt;
}

/// `(resolution_ms, rows, bytes)` of each rollup of the partition in `dir`.
fn rollup_infos(dir: &Path, rollups: &[(i64, Option<Arc<Segment>>)]) -> Vec<(i64, u64, u64)> {
    rollups
        .iter()
        .map(|(r, seg)| match seg {
            Some(s) => (
                *r,
                s.row_count(),
                std::fs::metadata(rollup::rollup_path(dir, *r)).map_or(0, |m| m.len()),
            ),
            None => (*r, 0, 0),
        })
        .collect()
}
