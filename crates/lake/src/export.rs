//! The export: each sealed partition of an index written as Parquet files under
//! `partition=<start_ms>/` (one file for a small partition; a large one is split at
//! shard range boundaries into files of about [`WriteOptions::file_rows`] rows), rows
//! ordered by virtual shard, and committed to the lake's Delta table in one commit,
//! exactly once.
//!
//! A partition's export is one commit holding a transaction action (`txn`) whose
//! application id names the partition (`tidemark-partition-<start_ms>`) and whose
//! version is the partition's generation (the id of its merged segment). An export finds
//! the table's latest version for that id by replaying the log: the same generation
//! already committed is skipped (a retried or crashed-after-commit export leaves one
//! copy); a newer generation (a late write re-sealed the partition) removes the
//! partition's files and adds the new ones in the same commit. A crash before the commit
//! leaves at most unreferenced files, which the next export overwrites and commits.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Instant;

use parquet::file::metadata::KeyValue;
use tidemark::Index;
use tidemark::dedup::SealedPartition;
use tidemark::segment::Segment;

use crate::VIRTUAL_SHARDS;
use crate::delta::{AddFile, Commit, DeltaTable, LiveFile, TableState, VacuumReport};
use crate::error::{Error, Result};
use crate::schema::{ID_COLUMN, LakeSchema, PARTITION_COLUMN, PARTITION_COLUMNS};
use crate::store::LakeStore;
use crate::writer::{FileRows, FileStats, Source, WriteOptions, write_partition};

/// Commits between two checkpoints of a table, by default (Delta's own default
/// `delta.checkpointInterval`).
pub const DEFAULT_CHECKPOINT_INTERVAL: u64 = 10;

/// What to export and how.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportOptions {
    /// How files are written.
    pub write: WriteOptions,
    /// Only the sealed partitions starting at these times (milliseconds); `None`: all.
    pub partitions: Option<Vec<i64>>,
    /// A checkpoint is written after each commit whose version + 1 is a multiple of
    /// this (0: never), so readers replay at most this many JSON commits.
    pub checkpoint_interval: u64,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            write: WriteOptions::default(),
            partitions: None,
            checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
        }
    }
}

/// What happened to one partition.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionReport {
    /// First millisecond of the partition.
    pub start_ms: i64,
    /// `None` for the raw rows' table, the resolution (milliseconds) for a rollup table.
    pub rollup_ms: Option<i64>,
    /// Its generation (see [`SealedPartition::generation`]).
    pub generation: u64,
    /// Rows written (0 when skipped).
    pub rows: u64,
    /// Bytes of the files written (0 when skipped).
    pub bytes: u64,
    /// Row groups written.
    pub row_groups: u64,
    /// The files added (none when skipped or empty), by shard.
    pub files: Vec<FileReport>,
    /// Files of an older generation the commit removed.
    pub replaced: usize,
    /// The table version committed (`None`: skipped, already in the lake).
    pub version: Option<u64>,
    /// Whether a checkpoint of the table was written after the commit.
    pub checkpoint: bool,
    /// Seconds spent writing and committing.
    pub seconds: f64,
}

/// One data file an export added.
#[derive(Debug, Clone, PartialEq)]
pub struct FileReport {
    /// Its path relative to the table: `partition=<start_ms>/part-….parquet`.
    pub path: String,
    /// The virtual shards of its rows' series and their rows, ascending.
    pub shards: Vec<(u32, u64)>,
    /// Rows.
    pub rows: u64,
    /// Row groups.
    pub row_groups: u64,
    /// Bytes.
    pub bytes: u64,
}

/// What an export did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExportReport {
    /// Per table (raw rows first, then the rollups by resolution) and sealed partition
    /// considered, oldest first.
    pub partitions: Vec<PartitionReport>,
    /// Seconds in all.
    pub seconds: f64,
}

impl ExportReport {
    /// Rows written.
    pub fn rows(&self) -> u64 {
        self.partitions.iter().map(|p| p.rows).sum()
    }

    /// Bytes written.
    pub fn bytes(&self) -> u64 {
        self.partitions.iter().map(|p| p.bytes).sum()
    }

    /// Files written.
    pub fn files(&self) -> usize {
        self.partitions.iter().map(|p| p.files.len()).sum()
    }

    /// Partitions exported (committed).
    pub fn committed(&self) -> usize {
        self.partitions
            .iter()
            .filter(|p| p.version.is_some())
            .count()
    }

    /// Partitions skipped: already in the lake at this generation.
    pub fn skipped(&self) -> usize {
        self.partitions.len() - self.committed()
    }

    /// Rows written a second (0 when no time passed).
    pub fn rows_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.rows() as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// The report as JSON, as `tidemark export --json` prints it and the server's
    /// `POST /<index>/_tidemark/export` answers it: per partition its table (`.` for the
    /// raw rows, `_rollups/<resolution>`), `start` (RFC 3339) and `start_ms`,
    /// `generation`, `rows`, `bytes`, `row_groups`, `files` (per file added: `path`
    /// relative to the table, `shards` (shard number → rows), `rows`, `row_groups`,
    /// `bytes`), `replaced`, `version` and
    /// `skipped`, then the totals (`committed`, `skipped`, `rows`, `files`, `bytes`,
    /// `seconds`, `rows_per_second`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "partitions": self.partitions.iter().map(|p| serde_json::json!({
                "table": p.rollup_ms.map_or_else(|| ".".to_owned(), rollup_table_dir),
                "rollup_ms": p.rollup_ms,
                "start": tidemark::format_time(p.start_ms),
                "start_ms": p.start_ms,
                "generation": p.generation,
                "rows": p.rows,
                "bytes": p.bytes,
                "row_groups": p.row_groups,
                "files": p.files.iter().map(|f| serde_json::json!({
                    "path": f.path,
                    "shards": f.shards.iter()
                        .map(|(s, n)| (s.to_string(), serde_json::json!(n)))
                        .collect::<serde_json::Map<String, serde_json::Value>>(),
                    "rows": f.rows,
                    "row_groups": f.row_groups,
                    "bytes": f.bytes,
                })).collect::<Vec<_>>(),
                "replaced": p.replaced,
                "version": p.version,
                "checkpoint": p.checkpoint,
                "skipped": p.version.is_none(),
                "seconds": p.seconds,
            })).collect::<Vec<_>>(),
            "committed": self.committed(),
            "skipped": self.skipped(),
            "rows": self.rows(),
            "files": self.files(),
            "bytes": self.bytes(),
            "seconds": self.seconds,
            "rows_per_second": self.rows_per_second(),
        })
    }
}

/// Progress of an export, for a progress line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExportProgress {
    /// The partition being written.
    pub start_ms: i64,
    /// `None` for the raw rows' table, the resolution for a rollup table.
    pub rollup_ms: Option<i64>,
    /// Its position among the partitions to write to this table (0-based) and their
    /// count.
    pub partition: (usize, usize),
    /// Rows of it written so far, and its rows.
    pub rows: (u64, u64),
}

/// The transaction application id of a partition's exports to the raw rows' table.
pub fn txn_app_id(start_ms: i64) -> String {
    format!("tidemark-partition-{start_ms}")
}

/// The transaction application id of a partition's exports to a rollup table.
pub fn rollup_txn_app_id(resolution_ms: i64, start_ms: i64) -> String {
    format!("tidemark-rollup-{resolution_ms}ms-partition-{start_ms}")
}

/// The directory, relative to the lake, of the rollup table at `resolution_ms`:
/// `_rollups/<resolution>` (`5m`, `1h`, `1d`; milliseconds when no unit divides it). The
/// leading underscore keeps it out of what Spark and Hive-style readers list as the raw
/// table's files.
pub fn rollup_table_dir(resolution_ms: i64) -> String {
    let units = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1000, "s"),
    ];
    let text = units
        .iter()
        .find(|(u, _)| resolution_ms % u == 0)
        .map_or_else(
            || format!("{resolution_ms}ms"),
            |(u, name)| format!("{}{name}", resolution_ms / u),
        );
    format!("_rollups/{text}")
}

/// Exports the sealed partitions of `index` to the lake at `lake`: their raw rows to the
/// Delta table at `lake`, and each rollup resolution to its own Delta table at
/// `lake/_rollups/<resolution>` (created if needed). Each partition not yet in a table at
/// its generation becomes its Parquet files and one commit there. `progress` is called
/// as rows are written.
///
/// # Errors
/// [`Error::NotPartitioned`] for an index without time partitions,
/// [`Error::NoSuchPartition`] for a partition asked for that is not sealed, schema
/// conflicts with a table, I/O, Parquet and log errors.
pub fn export(
    index: &Index,
    lake: &Path,
    options: &ExportOptions,
    progress: &mut dyn FnMut(&ExportProgress),
) -> Result<ExportReport> {
    export_to(index, &LakeStore::local(lake)?, options, progress)
}

/// As [`export`], to the lake at the root of `lake`: a local directory
/// ([`LakeStore::local`]) or an object store ([`LakeStore::open`], e.g.
/// `s3://bucket/prefix` with the `s3` feature).
///
/// # Errors
/// As [`export`]; [`Error::Store`] for what the object store refuses.
pub fn export_to(
    index: &Index,
    lake: &LakeStore,
    options: &ExportOptions,
    progress: &mut dyn FnMut(&ExportProgress),
) -> Result<ExportReport> {
    export_snapshot(&IndexSnapshot::of(index)?, lake, options, progress)
}

/// What an export reads of an index, taken in a moment under the index's lock and then
/// read without it: the mapping and the sealed partitions, whose segments are shared
/// immutable files (see [`SealedPartition`]). A server takes it under its read lock and
/// exports with the lock released, so the index's writer never waits for an export; a
/// late write or retention meanwhile changes the index, not the snapshot (the next
/// export sees the new generation).
#[derive(Debug, Clone)]
pub struct IndexSnapshot {
    timestamp: String,
    mapping: String,
    sealed: Vec<SealedPartition>,
}

impl IndexSnapshot {
    /// The snapshot of `index`'s sealed partitions.
    ///
    /// # Errors
    /// [`Error::NotPartitioned`] for an index without time partitions; a sealed
    /// partition that is not one merged segment.
    pub fn of(index: &Index) -> Result<IndexSnapshot> {
        if !index.engine().is_partitioned() {
            return Err(Error::NotPartitioned {
                path: index.dir().to_path_buf(),
            });
        }
        Ok(IndexSnapshot {
            timestamp: index.mapping().timestamp_field().to_owned(),
            mapping: index.mapping().source().to_string(),
            sealed: index.sealed_partitions()?,
        })
    }

    /// The sealed partitions, oldest first.
    pub fn sealed(&self) -> &[SealedPartition] {
        &self.sealed
    }
}

/// As [`export_to`], from a snapshot taken with [`IndexSnapshot::of`] (no lock held).
///
/// # Errors
/// As [`export_to`].
pub fn export_snapshot(
    snapshot: &IndexSnapshot,
    lake: &LakeStore,
    options: &ExportOptions,
    progress: &mut dyn FnMut(&ExportProgress),
) -> Result<ExportReport> {
    let started = Instant::now();
    options.write.check()?;
    let sealed = &snapshot.sealed;
    let chosen = choose(sealed, options.partitions.as_deref())?;
    let ctx = Context {
        timestamp: snapshot.timestamp.clone(),
        mapping: snapshot.mapping.clone(),
        options,
    };
    let mut report = ExportReport::default();
    // The schemas come from every sealed partition (not only those written now) and the
    // tables, so that they change as rarely as the index's own columns do.
    let raw = LakeSchema::from_segments(
        &ctx.timestamp,
        sealed.iter().filter_map(SealedPartition::segment),
    )?;
    let jobs = chosen.iter().map(|p| (*p, Source::raw(p))).collect();
    export_table(
        &DeltaTable::new(lake.clone()),
        None,
        raw,
        jobs,
        &ctx,
        &mut report,
        progress,
    )?;
    let resolutions: BTreeSet<i64> = sealed
        .iter()
        .flat_map(|p| p.rollups().iter().map(|(r, _)| *r))
        .collect();
    for r in resolutions {
        let schema = LakeSchema::from_segments(
            &ctx.timestamp,
            sealed.iter().filter_map(|p| rollup_of(p, r)),
        )?;
        let jobs = chosen
            .iter()
            .filter_map(|p| rollup_of(p, r).map(|s| (*p, Source::rollup(p, s))))
            .collect();
        let table = DeltaTable::new(lake.child(&rollup_table_dir(r)));
        export_table(&table, Some(r), schema, jobs, &ctx, &mut report, progress)?;
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// A partition's rollup segment at `resolution_ms`, if it has one.
fn rollup_of(p: &SealedPartition, resolution_ms: i64) -> Option<&Segment> {
    p.rollups()
        .iter()
        .find(|(r, _)| *r == resolution_ms)
        .map(|(_, s)| s.as_ref())
}

/// What every table of one export shares.
struct Context<'a> {
    timestamp: String,
    mapping: String,
    options: &'a ExportOptions,
}

/// Exports `jobs` (partitions and the rows to write for each) to one table: the raw
/// rows' table (`rollup_ms` `None`) or a rollup table.
fn export_table(
    table: &DeltaTable,
    rollup_ms: Option<i64>,
    schema: LakeSchema,
    jobs: Vec<(&SealedPartition, Source<'_>)>,
    ctx: &Context<'_>,
    report: &mut ExportReport,
    progress: &mut dyn FnMut(&ExportProgress),
) -> Result<()> {
    let mut state = table.state()?;
    check_layout(table, &state)?;
    let mut schema = schema.with_table_columns(&state.columns)?;
    if !ctx.options.write.write_id {
        schema = schema.without(ID_COLUMN);
    }
    let total = jobs.len();
    for (i, (part, source)) in jobs.into_iter().enumerate() {
        let t = Instant::now();
        let app = match rollup_ms {
            None => txn_app_id(part.start_ms),
            Some(r) => rollup_txn_app_id(r, part.start_ms),
        };
        let generation = i64::try_from(part.generation).unwrap_or(i64::MAX);
        let mut entry = PartitionReport {
            start_ms: part.start_ms,
            rollup_ms,
            generation: part.generation,
            rows: 0,
            bytes: 0,
            row_groups: 0,
            files: Vec::new(),
            replaced: 0,
            version: None,
            checkpoint: false,
            seconds: 0.0,
        };
        if state.txns.get(&app).is_some_and(|v| *v >= generation) {
            entry.seconds = t.elapsed().as_secs_f64();
            report.partitions.push(entry);
            continue;
        }
        let rows_total = source.rows();
        let mut add = Vec::new();
        let mut done = 0u64;
        let options = &ctx.options.write;
        for file in FileRows::plan(source.split_by_shard(shards())?, options) {
            let Some((first, last)) = file.shard_bounds() else {
                continue;
            };
            let mut on_rows = |rows: u64| {
                progress(&ExportProgress {
                    start_ms: part.start_ms,
                    rollup_ms,
                    partition: (i, total),
                    rows: (done + rows, rows_total),
                });
            };
            let rel = data_file_path(part.start_ms, (first, last), part.generation);
            let meta = file_metadata(&ctx.mapping, part, (first, last), rollup_ms, options);
            let shards: Vec<(u32, u64)> = file.shards().collect();
            let file_rows = file.rows();
            let stats = write_file(
                table.store(),
                &rel,
                file,
                &schema,
                options,
                meta,
                &mut on_rows,
            )?;
            done += file_rows;
            entry.rows += stats.rows;
            entry.bytes += stats.bytes;
            entry.row_groups += stats.row_groups;
            entry.files.push(FileReport {
                path: rel.clone(),
                shards,
                rows: stats.rows,
                row_groups: stats.row_groups,
                bytes: stats.bytes,
            });
            add.push(AddFile {
                path: rel,
                size: stats.bytes,
                rows: stats.rows,
                partition_values: partition_values(part.start_ms),
                ts_stats: Some((ctx.timestamp.clone(), stats.min_ts, stats.max_ts)),
                shard_stats: Some((stats.min_shard, stats.max_shard)),
            });
        }
        // Every data file is complete under its name: one sync of what the export wrote
        // (a no-op where each upload is durable by itself) before the commit names them.
        let written: Vec<&str> = add.iter().map(|a| a.path.as_str()).collect();
        table.store().sync_written(&written)?;
        if done != rows_total {
            return Err(Error::RowCountMismatch {
                start_ms: part.start_ms,
                written: done,
                expected: rows_total,
            });
        }
        let prefix = partition_dir(part.start_ms);
        let remove: Vec<String> = state
            .files
            .keys()
            .filter(|p| p.starts_with(&prefix))
            .cloned()
            .collect();
        let version = state.version.map_or(0, |v| v + 1);
        let mut parameters: BTreeMap<String, String> = [
            ("mode".to_owned(), "Append".to_owned()),
            ("tidemark.partition".to_owned(), part.start_ms.to_string()),
            (
                "tidemark.generation".to_owned(),
                part.generation.to_string(),
            ),
        ]
        .into_iter()
        .collect();
        if let Some(r) = rollup_ms {
            parameters.insert("tidemark.rollup_ms".to_owned(), r.to_string());
        }
        let commit = Commit {
            schema_string: schema_change(&state, &schema),
            configuration: table_configuration(rollup_ms),
            partition_columns: PARTITION_COLUMNS.iter().map(|c| (*c).to_owned()).collect(),
            txn: Some((app, generation)),
            remove: remove.clone(),
            add,
            parameters,
        };
        crate::failpoint("export-before-commit");
        let now = now_ms();
        table.commit(version, &commit, now)?;
        crate::failpoint("export-after-commit");
        apply_commit(&mut state, version, &commit, &schema, now);
        let interval = ctx.options.checkpoint_interval;
        if interval > 0 && (version + 1) % interval == 0 {
            // From the log itself, so the checkpoint is exactly what the log says.
            let logged = table.state()?;
            table.checkpoint(&logged, now)?;
            entry.checkpoint = true;
        }
        entry.replaced = remove.len();
        entry.version = Some(version);
        entry.seconds = t.elapsed().as_secs_f64();
        report.partitions.push(entry);
    }
    Ok(())
}

/// The virtual shard count as the non-zero count `Tsid::shard` takes.
fn shards() -> NonZeroU32 {
    NonZeroU32::new(VIRTUAL_SHARDS).unwrap_or(NonZeroU32::MIN)
}

/// The directory of a partition's files, relative to the table: `partition=<start_ms>/`
/// (Hive-style, as Spark and DuckDB read partition values from paths).
fn partition_dir(start_ms: i64) -> String {
    format!("{PARTITION_COLUMN}={start_ms}/")
}

/// A data file's path relative to the table:
/// `partition=<start_ms>/part-<start_ms>-s<first>-<last>-g<generation>.parquet`, `first`
/// and `last` its first and last virtual shard. Names are unique in the table and fixed
/// per generation and options, so a retried export writes the same names again.
fn data_file_path(start_ms: i64, (first, last): (u32, u32), generation: u64) -> String {
    format!(
        "{dir}part-{start_ms}-s{first:03}-{last:03}-g{generation:020}.parquet",
        dir = partition_dir(start_ms)
    )
}

/// A data file's `partitionValues`.
fn partition_values(start_ms: i64) -> BTreeMap<String, String> {
    [(PARTITION_COLUMN.to_owned(), start_ms.to_string())]
        .into_iter()
        .collect()
}

/// Refuses a table partitioned otherwise than `partition`, `shard` (one written by an
/// older version of this crate, unpartitioned, or by another writer): Delta cannot
/// change a table's partition columns.
fn check_layout(table: &DeltaTable, state: &TableState) -> Result<()> {
    if state.version.is_none() || state.partition_columns == PARTITION_COLUMNS {
        return Ok(());
    }
    Err(Error::DeltaLog {
        path: PathBuf::from(table.store().location()).join(crate::LOG_DIR),
        detail: format!(
            "the table is partitioned by [{}], this writer partitions by [{}] (a lake written by an older version, with shard=… directories?): export to a new directory",
            state.partition_columns.join(", "),
            PARTITION_COLUMNS.join(", ")
        ),
    })
}

/// Vacuums every table of the lake at `lake` (the raw rows' table and each rollup
/// table under `_rollups/`): see [`DeltaTable::vacuum`]. Returns, per table (`.` or
/// `_rollups/<resolution>`), what it deleted.
///
/// # Errors
/// Store and log errors.
pub fn vacuum(lake: &LakeStore, retention_ms: i64) -> Result<Vec<(String, VacuumReport)>> {
    let now = now_ms();
    let mut out = vec![(
        ".".to_owned(),
        DeltaTable::new(lake.clone()).vacuum(retention_ms, now)?,
    )];
    let rollups: BTreeSet<String> = lake
        .list("_rollups")?
        .into_iter()
        .filter_map(|o| {
            let mut parts = o.path.split('/');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("_rollups"), Some(r), Some(crate::LOG_DIR)) => Some(r.to_owned()),
                _ => None,
            }
        })
        .collect();
    for r in rollups {
        let dir = format!("_rollups/{r}");
        let report = DeltaTable::new(lake.child(&dir)).vacuum(retention_ms, now)?;
        out.push((dir, report));
    }
    Ok(out)
}

/// The sealed partitions asked for, or all of them.
fn choose<'s>(
    sealed: &'s [SealedPartition],
    starts: Option<&[i64]>,
) -> Result<Vec<&'s SealedPartition>> {
    let Some(starts) = starts else {
        return Ok(sealed.iter().collect());
    };
    let mut out = Vec::new();
    for s in starts {
        match sealed.iter().find(|p| p.start_ms == *s) {
            Some(p) => out.push(p),
            None => {
                let available: Vec<String> = sealed
                    .iter()
                    .map(|p| tidemark::format_time(p.start_ms))
                    .collect();
                return Err(Error::NoSuchPartition {
                    start: tidemark::format_time(*s),
                    available: if available.is_empty() {
                        "none".to_owned()
                    } else {
                        available.join(", ")
                    },
                });
            }
        }
    }
    out.sort_by_key(|p| p.start_ms);
    out.dedup_by_key(|p| p.start_ms);
    Ok(out)
}

/// Writes one data file at `rel` in `store`, streamed as a multipart upload that
/// appears at its path only once complete (locally: a staged file renamed; made durable
/// by [`LakeStore::sync_written`] before the commit).
fn write_file(
    store: &LakeStore,
    rel: &str,
    source: FileRows<'_>,
    schema: &LakeSchema,
    options: &WriteOptions,
    meta: Vec<KeyValue>,
    progress: &mut dyn FnMut(u64),
) -> Result<FileStats> {
    let out = store.upload(rel)?;
    let (out, stats) = write_partition(out, source, schema, options, meta, progress)?;
    out.finish()?;
    Ok(stats)
}

/// The file's key-value metadata: Tidemark's version, the index mapping, the partition,
/// the shards and how `_id`, its filter and `shard` are made.
fn file_metadata(
    mapping: &str,
    part: &SealedPartition,
    (first, last): (u32, u32),
    rollup_ms: Option<i64>,
    options: &WriteOptions,
) -> Vec<KeyValue> {
    let kv = |k: &str, v: String| KeyValue::new(k.to_owned(), v);
    let mut out = vec![
        kv("tidemark.version", env!("CARGO_PKG_VERSION").to_owned()),
        kv("tidemark.mapping", mapping.to_owned()),
        kv("tidemark.partition.start_ms", part.start_ms.to_string()),
        kv("tidemark.partition.end_ms", part.end_ms.to_string()),
        kv("tidemark.partition.generation", part.generation.to_string()),
        kv("tidemark.partition.shards", format!("{first}-{last}")),
        kv(
            "tidemark.id",
            "_id = _tsid (20 bytes) ++ big-endian u64 of the timestamp with the sign bit flipped"
                .to_owned(),
        ),
        kv(
            "tidemark.id_bloom",
            format!(
                "split-block (Parquet layout), XXH64 seed 0, sized per row group for fpr {}",
                options.id_bloom_fpr
            ),
        ),
        kv(
            "tidemark.shard",
            format!(
                "shard = Tsid::shard({VIRTUAL_SHARDS}): high 32 bits of Tsid::routing_hash times {VIRTUAL_SHARDS}, shifted right 32; rows ordered by shard, then _tsid and the timestamp; a row group holds one range of {} consecutive shards at most",
                VIRTUAL_SHARDS
                    .checked_shr(options.shard_range_bits)
                    .unwrap_or(1)
            ),
        ),
    ];
    if let Some(r) = rollup_ms {
        out.push(kv("tidemark.rollup_ms", r.to_string()));
    }
    out
}

/// The table's configuration, written with each metaData.
fn table_configuration(rollup_ms: Option<i64>) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = [
        (
            "tidemark.version".to_owned(),
            env!("CARGO_PKG_VERSION").to_owned(),
        ),
        ("tidemark.shards".to_owned(), VIRTUAL_SHARDS.to_string()),
    ]
    .into_iter()
    .collect();
    if let Some(r) = rollup_ms {
        out.insert("tidemark.rollup_ms".to_owned(), r.to_string());
    }
    out
}

/// The new schema string when the table is new or its columns change.
fn schema_change(state: &TableState, schema: &LakeSchema) -> Option<String> {
    let same = state.columns.len() == schema.columns().len()
        && schema.columns().iter().all(|c| {
            state
                .columns
                .iter()
                .any(|(n, t)| *n == c.name && *t == c.ty)
        });
    if state.version.is_some() && same {
        None
    } else {
        Some(schema.delta_schema_string())
    }
}

/// The state after `commit`, without reading the log again.
fn apply_commit(
    state: &mut TableState,
    version: u64,
    commit: &Commit,
    schema: &LakeSchema,
    now_ms: i64,
) {
    state.version = Some(version);
    if commit.schema_string.is_some() {
        state.columns = schema
            .columns()
            .iter()
            .map(|c| (c.name.clone(), c.ty))
            .collect();
        state.partition_columns = commit.partition_columns.clone();
    }
    if let Some((app, v)) = &commit.txn {
        state.txns.insert(app.clone(), *v);
    }
    for r in &commit.remove {
        state.files.remove(r);
        state.removed.insert(r.clone(), now_ms);
    }
    for a in &commit.add {
        state.files.insert(
            a.path.clone(),
            LiveFile {
                size: a.size,
                partition_values: a.partition_values.clone(),
                modification_time: now_ms,
                stats: None,
            },
        );
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
