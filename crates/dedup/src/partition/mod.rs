//! Time partitions above the single-directory [`Engine`]: a [`PartitionedEngine`] routes
//! each point by its own timestamp to the engine of its partition, so a retry or a late
//! point always meets its original whenever it arrives. Partitions are sealed (merged,
//! rollups built), dropped whole by retention, and listed in a manifest switched
//! atomically (`PARTITIONS`, see docs/partitions.md).
//!
//! This file holds the store's type; each concept has its own file:
//!
//! | file | what it holds |
//! |---|---|
//! | `config.rs` | [`PartitionConfig`]: settings and their checks |
//! | `manifest.rs` | the `PARTITIONS` manifest: byte layout, read, atomic write |
//! | `open.rs` | create, open (recovery of what a crash left), refresh, sync, close |
//! | `routing.rs` | which partition a timestamp goes to, ids, the write path (`batch`, `get`) |
//! | `append.rs` | appends by store-wide series and column refs |
//! | `attach.rs` | other stores' sealed partitions attached read-only (a lake's cache) |
//! | `clock.rs` | the event-time clock (high-water mark) and the wall clock |
//! | `budget.rs` | one buffer budget across partitions |
//! | `seal.rs` | sealing (merge + rollups), `maintain` |
//! | `retention.rs` | dropping partitions, keeping rollups past the raw retention |
//! | `merging.rs` | merges off the write path |
//! | `refreshing.rs` | refreshes off the write path |
//! | `info.rs` | listings and counters |
//! | `search.rs` | the read side as a type, [`PartitionSearch`]: raw scans, series, label queries, rollup rows |
//! | `plan.rs` | the read plan of a [`PartitionSearch`]: raw rows or rollups, piece by piece |
//! | `rollup.rs` | rollup segments: build, rebuild, columns |
//! | `postings.rs` | a segment's dimension index |
//! | `sealed.rs` | sealed partitions as whole units (exports) |
//! | `failpoint.rs` | crash-test failpoints |

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tidemark_segment::Segment;

use crate::config::EngineConfig;
use crate::engine::Engine;
use crate::stats::DedupStats;

mod append;
mod attach;
mod budget;
mod clock;
mod config;
mod failpoint;
mod info;
mod manifest;
mod merging;
mod open;
mod plan;
mod postings;
mod refreshing;
mod retention;
mod rollup;
mod routing;
mod samples;
mod seal;
mod sealed;
mod search;

pub use config::PartitionConfig;
pub use failpoint::FAILPOINT_ENV;
pub use info::{PartitionInfo, PartitionStats};
pub use manifest::{PARTITIONS_MAGIC, PARTITIONS_NAME, PARTITIONS_VERSION};
pub use merging::{PartMergeJob, PartMerged};
pub use plan::Piece;
pub use postings::{Postings, dim_value_text};
pub use refreshing::{PartRefreshJob, PartRefreshed};
pub use rollup::{CounterStats, DOC_COUNT_COLUMN, RollupStats, counter_step};
pub use seal::MaintainReport;
pub use sealed::SealedPartition;
pub use search::{PartitionSearch, RollupRow};

use clock::WriteMark;
use manifest::{PartManifest, PartState};

/// One live partition: its engine and, once sealed, its rollups.
struct Part {
    start: i64,
    end: i64,
    dir: PathBuf,
    engine: Engine,
    state: PartState,
    /// Rollup segments by resolution.
    rollups: Vec<RollupSlot>,
    /// The store's series and column refs translated to this engine's.
    refs: append::PartRefs,
}

/// A partition past the raw retention: only some rollups remain.
#[derive(Debug)]
struct ExpiredPart {
    start: i64,
    end: i64,
    dir: PathBuf,
    /// The kept rollups by resolution.
    rollups: Vec<RollupSlot>,
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
    /// Refreshes are left to the caller ([`PartitionedEngine::plan_refresh`]).
    background_refresh: bool,
    /// Stores whose sealed partitions reads also see
    /// ([`attach_read_only`](PartitionedEngine::attach_read_only)).
    attached: Vec<PartitionedEngine>,
}

/// An id formatter independent of any partition.
#[derive(Debug)]
struct Engine0(Option<Arc<crate::events::EventKeyer>>);

impl PartitionedEngine {
    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the store is partitioned (else a single engine holds all time).
    pub fn is_partitioned(&self) -> bool {
        self.manifest.is_some()
    }

    /// The engine configuration every partition is opened with.
    pub fn engine_config(&self) -> &EngineConfig {
        &self.engine_config
    }

    /// The engines, oldest partition first.
    pub fn engines(&self) -> impl Iterator<Item = &Engine> {
        self.parts.values().map(|p| &p.engine)
    }
}

/// A partition's rollup at one resolution (`None`: built, empty).
type RollupSlot = (i64, Option<Arc<Segment>>);

/// Name of the directory of the partition starting at `start`.
fn part_dir_name(start: i64) -> String {
    format!("p-{start}")
}
