//! Reading back what retention removed: a search, an aggregation or a PromQL query over
//! time that a time-partitioned index no longer holds (its partitions dropped by
//! retention) reads the lake's copy of those partitions, `lake_dir/<index>`, as the
//! index answered before the eviction.
//!
//! Each such partition is restored once ([`tidemark_lake::restore`]) into its own small
//! index of the same mapping under the data directory, `lake-cache/<index>/<start>`
//! (sealed: one merged segment and its rollups), then attached read-only to the index
//! ([`tidemark::Index::attach_read_only`]), so every query path reads it unchanged and
//! no write ever meets it (the index refuses writes there as past its retention). A
//! `RESTORED` file written last marks a finished copy with the lake generation it
//! holds: a restart reattaches it without reading the lake again, a crash mid-restore
//! leaves no marker and the copy is made again. The copies are bounded by
//! `lake_cache_bytes`: past it, whole partitions least recently read are detached and
//! removed (never one the current query reads).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tidemark::dedup::{EngineConfig, PartitionConfig};
use tidemark::{Index, Mapping};
use tidemark_lake::{LakePartition, LakeStore};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::registry::{IndexHandle, Registry};

/// The directory of the copies, under the data directory.
pub(crate) const CACHE_DIR: &str = "lake-cache";
/// The file a finished copy holds: `{"generation": …, "rows": …}`.
const MARKER: &str = "RESTORED";
/// How long a lake's listing of partitions is reused before its log is read again.
const LISTING_TTL: Duration = Duration::from_secs(5);
/// The most removed partitions one query reads back (more is a `400` asking for a
/// narrower range: one request does not restore a whole lake).
pub(crate) const MAX_PARTITIONS_PER_QUERY: usize = 64;

/// The copies of lake partitions the server's indices read, and their budget.
#[derive(Debug)]
pub(crate) struct LakeCache {
    /// `lake_dir`: an index's lake is `lake_dir/<index>`.
    lakes: PathBuf,
    /// `data/lake-cache`.
    dir: PathBuf,
    /// `lake_cache_bytes`.
    budget: u64,
    state: Mutex<CacheState>,
    /// Counters for `GET /metrics`.
    pub(crate) stats: CacheStats,
}

/// What reading back did since the server started.
#[derive(Debug, Default)]
pub(crate) struct CacheStats {
    /// Partitions restored from a lake.
    pub(crate) restored: AtomicU64,
    /// Rows they held.
    pub(crate) restored_rows: AtomicU64,
    /// Finished copies attached again without reading the lake (after a restart).
    pub(crate) reattached: AtomicU64,
    /// Copies removed to stay within the budget.
    pub(crate) evicted: AtomicU64,
    /// Read-backs that failed (the query answered an error).
    pub(crate) failures: AtomicU64,
}

#[derive(Debug, Default)]
struct CacheState {
    /// Per index: when its lake was listed, and what it held.
    listings: HashMap<String, (Instant, Arc<Vec<LakePartition>>)>,
    /// Per (index, partition start): the copy's bytes and when it was last read.
    held: HashMap<(String, i64), Held>,
    /// A counter standing for time in `Held::used`.
    tick: u64,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    bytes: u64,
    used: u64,
}

impl LakeCache {
    /// The cache of a server with a `lake_dir` and a positive `lake_cache_bytes`.
    pub(crate) fn new(config: &Config) -> Option<LakeCache> {
        let lakes = config.lake_dir.clone()?;
        (config.lake_cache_bytes > 0).then(|| LakeCache {
            lakes,
            dir: config.data.join(CACHE_DIR),
            budget: config.lake_cache_bytes,
            state: Mutex::default(),
            stats: CacheStats::default(),
        })
    }

    /// Makes the partitions of `handle`'s index that `[first_ms, last_ms]` (inclusive)
    /// touches, that retention removed and that its lake holds, readable by the index:
    /// attached from a finished copy, or restored first. Runs on a blocking thread. A
    /// range reaching no removed partition returns at once (one read of the index's
    /// clock), so queries over kept time never wait for a restore.
    ///
    /// # Errors
    /// Lake, restore and index errors, naming the partition: the query fails rather
    /// than answer without time the lake holds.
    pub(crate) fn ensure(
        &self,
        registry: &Registry,
        handle: &IndexHandle,
        first_ms: i64,
        last_ms: i64,
    ) -> Result<()> {
        // A range with no start (a search without a lower time bound) reads what the
        // index holds: reading back is asked for by naming removed time.
        if first_ms > last_ms || first_ms == i64::MIN {
            return Ok(());
        }
        let config = handle.read(|i| Ok(i.engine().partition_config()))?;
        let Some(config) = config else {
            return Ok(());
        };
        let width = config.width_ms();
        let first_start = first_ms.div_euclid(width).saturating_mul(width);
        // Partitions past the raw retention are the oldest: if the first one the range
        // touches is not, none is.
        if config.retention_ms().is_none()
            || !handle.read(|i| Ok(i.engine().is_past_raw_retention(first_start)))?
        {
            return Ok(());
        }
        let lake = self.lakes.join(handle.name());
        if !lake.join(tidemark_lake::LOG_DIR).is_dir() {
            return Ok(());
        }
        let result = self.ensure_locked(registry, handle, &config, &lake, first_ms, last_ms);
        if result.is_err() {
            self.stats.failures.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn ensure_locked(
        &self,
        registry: &Registry,
        handle: &IndexHandle,
        config: &PartitionConfig,
        lake: &Path,
        first_ms: i64,
        last_ms: i64,
    ) -> Result<()> {
        let name = handle.name().to_owned();
        let width = config.width_ms();
        let mut state = self
            .state
            .lock()
            .map_err(|_| Error::status(500, "exception", "lake cache lock poisoned"))?;
        let listing = state.listing(&name, lake)?;
        let touched: Vec<&LakePartition> = listing
            .iter()
            .filter(|p| p.start_ms <= last_ms && p.start_ms.saturating_add(width) > first_ms)
            .collect();
        if touched.is_empty() {
            return Ok(());
        }
        let starts: Vec<i64> = touched.iter().map(|p| p.start_ms).collect();
        // Per touched partition: whether the index refuses it as past its retention
        // (else it is the index's own, or will be), and whether a copy is attached.
        let (past, attached) = handle.read(|i| {
            let e = i.engine();
            Ok((
                starts
                    .iter()
                    .map(|s| e.is_past_raw_retention(*s))
                    .collect::<Vec<bool>>(),
                i.attached_partitions(),
            ))
        })?;
        // Copies of an index deleted and made again are not this index's.
        state
            .held
            .retain(|(n, s), _| *n != name || attached.contains(s));
        let removed: Vec<&LakePartition> = touched
            .into_iter()
            .zip(past)
            .filter_map(|(part, past)| past.then_some(part))
            .collect();
        if removed.len() > MAX_PARTITIONS_PER_QUERY {
            return Err(Error::bad(
                "illegal_argument_exception",
                format!(
                    "the query's time range reaches {} partitions of [{name}] that retention removed; at most {MAX_PARTITIONS_PER_QUERY} are read back from its lake per query: narrow the range",
                    removed.len()
                ),
            ));
        }
        let mut wanted = Vec::new();
        for part in removed {
            wanted.push(part.start_ms);
            state.tick += 1;
            let tick = state.tick;
            if attached.contains(&part.start_ms) {
                if let Some(h) = state.held.get_mut(&(name.clone(), part.start_ms)) {
                    h.used = tick;
                }
                continue;
            }
            let bytes = self.attach(handle, config, lake, part)?;
            state
                .held
                .insert((name.clone(), part.start_ms), Held { bytes, used: tick });
        }
        self.evict(&mut state, registry, &name, &wanted)
    }

    /// Attaches the copy of `part` to `handle`'s index, restoring it first unless a
    /// finished copy of the lake's generation is there; answers the copy's bytes.
    fn attach(
        &self,
        handle: &IndexHandle,
        config: &PartitionConfig,
        lake: &Path,
        part: &LakePartition,
    ) -> Result<u64> {
        let dir = self.dir.join(handle.name()).join(part.start_ms.to_string());
        let cached = match read_marker(&dir) {
            Some(generation) if generation == part.generation => Some(Index::open(&dir)?),
            _ => None,
        };
        let index = match cached {
            Some(index) => {
                self.stats.reattached.fetch_add(1, Ordering::Relaxed);
                index
            }
            None => self.restore(handle, config, lake, part, &dir)?,
        };
        handle.exclusive(|i| Ok(i.attach_read_only(index)?))?;
        tracing::info!(
            index = %handle.name(),
            partition = %tidemark::format_time(part.start_ms),
            rows = part.rows,
            "read back from the lake"
        );
        dir_bytes(&dir)
    }

    /// Restores `part` from the lake into a new index at `dir` (whatever an unfinished
    /// copy left there removed first), then marks it finished.
    fn restore(
        &self,
        handle: &IndexHandle,
        config: &PartitionConfig,
        lake: &Path,
        part: &LakePartition,
        dir: &Path,
    ) -> Result<Index> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(Error::io(dir))?;
        }
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).map_err(Error::io(parent))?;
        }
        // The index's mapping, partitions and rollups, without its retention: the copy
        // holds time past it by definition.
        let partitions = PartitionConfig::new()
            .with_width_ms(config.width_ms())
            .with_rollups(config.rollups().to_vec());
        let mapping = Mapping::from_value(handle.mapping().source().clone())?;
        let mut index = Index::create_partitioned(dir, mapping, EngineConfig::new(), partitions)?;
        let store = LakeStore::local(lake)?;
        let report = tidemark_lake::restore(&store, &[part.start_ms], &mut index, &mut |_, _| {})?;
        let rows: u64 = report.partitions.iter().map(|(_, r)| r).sum();
        index.save_counters()?;
        write_marker(dir, part.generation, rows)?;
        self.stats.restored.fetch_add(1, Ordering::Relaxed);
        self.stats.restored_rows.fetch_add(rows, Ordering::Relaxed);
        Ok(index)
    }

    /// Detaches and removes copies, least recently read first, until the copies fit the
    /// budget; the partitions `keep` of index `name` (the query's) stay.
    fn evict(
        &self,
        state: &mut CacheState,
        registry: &Registry,
        name: &str,
        keep: &[i64],
    ) -> Result<()> {
        loop {
            let total: u64 = state.held.values().map(|h| h.bytes).sum();
            if total <= self.budget {
                return Ok(());
            }
            let victim = state
                .held
                .iter()
                .filter(|((n, s), _)| !(n == name && keep.contains(s)))
                .min_by_key(|(_, h)| h.used)
                .map(|(k, _)| k.clone());
            let Some((index, start)) = victim else {
                // What this query reads alone passes the budget: it stays until the
                // next query reads elsewhere.
                return Ok(());
            };
            state.held.remove(&(index.clone(), start));
            let dir = match registry.get(&index) {
                Some(h) => h.exclusive(|i| Ok(i.detach(start)?))?,
                None => None,
            }
            .unwrap_or_else(|| self.dir.join(&index).join(start.to_string()));
            std::fs::remove_dir_all(&dir).map_err(Error::io(&dir))?;
            self.stats.evicted.fetch_add(1, Ordering::Relaxed);
            tracing::info!(%index, partition = %tidemark::format_time(start), "lake copy evicted");
        }
    }
}

impl CacheState {
    /// The partitions the lake at `lake` holds, listed at most every [`LISTING_TTL`].
    fn listing(&mut self, name: &str, lake: &Path) -> Result<Arc<Vec<LakePartition>>> {
        if let Some((at, list)) = self.listings.get(name)
            && at.elapsed() < LISTING_TTL
        {
            return Ok(Arc::clone(list));
        }
        let store = LakeStore::local(lake)?;
        let list = Arc::new(tidemark_lake::lake_partitions(&store)?);
        self.listings
            .insert(name.to_owned(), (Instant::now(), Arc::clone(&list)));
        Ok(list)
    }
}

/// The generation a finished copy at `dir` holds (`Some(None)`: none was recorded);
/// `None` when there is no finished copy.
fn read_marker(dir: &Path) -> Option<Option<i64>> {
    let text = std::fs::read_to_string(dir.join(MARKER)).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    Some(v.get("generation").and_then(Value::as_i64))
}

/// Marks the copy at `dir` finished (the workspace's one atomic write).
fn write_marker(dir: &Path, generation: Option<i64>, rows: u64) -> Result<()> {
    let body = json!({"generation": generation, "rows": rows}).to_string();
    let path = dir.join(MARKER);
    tidemark::segment::AtomicFile::write_all_to(&path, body.as_bytes()).map_err(Error::io(&path))
}

/// The bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(Error::io(&d))? {
            let entry = entry.map_err(Error::io(&d))?;
            let meta = entry.metadata().map_err(Error::io(entry.path()))?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    Ok(total)
}
