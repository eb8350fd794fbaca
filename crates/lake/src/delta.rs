//! A Delta Lake table written by the protocol's JSON log (Delta transaction protocol,
//! reader version 1, writer version 2): `_delta_log/<version:020>.json`, one action per
//! line, in a [`LakeStore`], with a Parquet checkpoint every few commits
//! (`<version>.checkpoint.parquet` and `_last_checkpoint`, see `checkpoint.rs`). This
//! writer reads the log back from the latest checkpoint and the commits after it, and
//! commits by creating
//! the next version's file only if it does not exist (put-if-absent: a hard link of a
//! synced file on a local filesystem, a conditional put on S3), so two writers never
//! both commit a version.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::error::{Error, Result};
use crate::schema::{ColumnType, SHARD_COLUMN, parse_delta_schema};
use crate::store::LakeStore;

/// The log directory of a table.
pub const LOG_DIR: &str = "_delta_log";
/// The log entry naming the latest checkpoint.
pub const LAST_CHECKPOINT: &str = "_last_checkpoint";
/// Tombstones (`remove` actions) a checkpoint keeps: a week, Delta's default
/// `delta.deletedFileRetentionDuration`.
pub const TOMBSTONE_RETENTION_MS: i64 = 7 * 86_400_000;

/// The state of a table after replaying its log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableState {
    /// The last committed version (`None`: no table yet).
    pub version: Option<u64>,
    /// The checkpoint the state was read from (`None`: the log was replayed from
    /// version 0).
    pub checkpoint: Option<u64>,
    /// The table's protocol: reader and writer versions.
    pub protocol: (i32, i32),
    /// The table's id (`metaData.id`).
    pub id: Option<String>,
    /// The latest `metaData.schemaString`.
    pub schema_string: Option<String>,
    /// The latest `metaData.createdTime`.
    pub created_time: Option<i64>,
    /// The table's columns, from its latest `metaData`.
    pub columns: Vec<(String, ColumnType)>,
    /// The table's `metaData.configuration`.
    pub configuration: BTreeMap<String, String>,
    /// The table's partition columns (`metaData.partitionColumns`).
    pub partition_columns: Vec<String>,
    /// Live data files: path (relative to the table) → what its `add` action says.
    pub files: BTreeMap<String, LiveFile>,
    /// Removed data files (tombstones): path → when the commit removing it was made
    /// (milliseconds since the epoch). A vacuum deletes them once older than its
    /// retention.
    pub removed: BTreeMap<String, i64>,
    /// The latest transaction version of each application id (`txn` actions).
    pub txns: BTreeMap<String, i64>,
}

/// A live data file of a table, as its `add` action records it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveFile {
    /// Bytes.
    pub size: u64,
    /// Its partition columns' values (`partitionValues`).
    pub partition_values: BTreeMap<String, String>,
    /// When it was added (milliseconds since the epoch).
    pub modification_time: i64,
    /// Its statistics (`stats`, a JSON string), if recorded.
    pub stats: Option<String>,
}

/// One data file to add in a commit.
#[derive(Debug, Clone, PartialEq)]
pub struct AddFile {
    /// Path relative to the table root (only `[A-Za-z0-9._/-]`: no URL escaping needed).
    pub path: String,
    /// Bytes.
    pub size: u64,
    /// Rows.
    pub rows: u64,
    /// Its partition columns' values (`partitionValues`: column → value as text).
    pub partition_values: BTreeMap<String, String>,
    /// The timestamp column's name and its smallest and largest value (milliseconds),
    /// for data skipping.
    pub ts_stats: Option<(String, i64, i64)>,
    /// The smallest and largest `shard` of its rows, for data skipping by shard.
    pub shard_stats: Option<(u32, u32)>,
}

/// A commit: the actions of one table version.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Commit {
    /// A new `metaData` (schema) when the table is new or its schema grows.
    pub schema_string: Option<String>,
    /// The table's configuration, written with the metaData.
    pub configuration: BTreeMap<String, String>,
    /// The table's partition columns, written with the metaData.
    pub partition_columns: Vec<String>,
    /// The transaction (`txn`): application id and version.
    pub txn: Option<(String, i64)>,
    /// Files to remove (paths relative to the table).
    pub remove: Vec<String>,
    /// Files to add.
    pub add: Vec<AddFile>,
    /// Operation parameters recorded in `commitInfo`.
    pub parameters: BTreeMap<String, String>,
}

/// A Delta table in a [`LakeStore`] (a local directory or a bucket prefix).
#[derive(Debug, Clone)]
pub struct DeltaTable {
    store: LakeStore,
}

impl DeltaTable {
    /// The table at the root of `store` (which may hold nothing yet).
    pub fn new(store: LakeStore) -> DeltaTable {
        DeltaTable { store }
    }

    /// The table in the local directory `dir` (which may not exist yet).
    ///
    /// # Errors
    /// As [`LakeStore::local`].
    pub fn local(dir: &Path) -> Result<DeltaTable> {
        Ok(DeltaTable::new(LakeStore::local(dir)?))
    }

    /// The store holding the table (its root is the table's).
    pub fn store(&self) -> &LakeStore {
        &self.store
    }

    /// A log entry's path relative to the table.
    fn log_path(name: &str) -> String {
        format!("{LOG_DIR}/{name}")
    }

    /// Reads the table's state: from its latest checkpoint (named by
    /// `_delta_log/_last_checkpoint`, or the newest `<v>.checkpoint.parquet` listed)
    /// and the JSON commits after it, or by replaying every commit from version 0.
    ///
    /// # Errors
    /// Store errors, [`Error::DeltaLog`] for a gap in the versions, a malformed line or
    /// checkpoint, a multi-part or V2 checkpoint, or a schema this writer does not write.
    pub fn state(&self) -> Result<TableState> {
        let mut state = TableState::default();
        let mut versions = Vec::new();
        let mut checkpoints = Vec::new();
        for object in self.store.list(LOG_DIR)? {
            let name = object.path.rsplit('/').next().unwrap_or_default();
            if name.starts_with('.') || name == LAST_CHECKPOINT {
                continue;
            }
            if let Some(v) = name
                .strip_suffix(".checkpoint.parquet")
                .and_then(|v| v.parse::<u64>().ok())
            {
                checkpoints.push(v);
            } else if name.contains(".checkpoint.") {
                return Err(Error::DeltaLog {
                    path: self.log_location(name),
                    detail: "a multi-part or V2 checkpoint, which this writer does not read"
                        .to_owned(),
                });
            } else if let Some(v) = name
                .strip_suffix(".json")
                .and_then(|v| v.parse::<u64>().ok())
            {
                versions.push(v);
            }
        }
        let named = self.last_checkpoint()?;
        let from = named.or_else(|| checkpoints.iter().max().copied());
        if let Some(c) = from {
            let name = checkpoint_name(c);
            let bytes = self
                .store
                .get(&Self::log_path(&name))?
                .ok_or_else(|| Error::DeltaLog {
                    path: self.log_location(&name),
                    detail: "_last_checkpoint names a checkpoint that is not there".to_owned(),
                })?;
            crate::checkpoint::read(bytes::Bytes::from(bytes), &mut state).map_err(|detail| {
                Error::DeltaLog {
                    path: self.log_location(&name),
                    detail,
                }
            })?;
            state.version = Some(c);
            state.checkpoint = Some(c);
        }
        let first = from.map_or(0, |c| c + 1);
        versions.retain(|v| *v >= first);
        versions.sort_unstable();
        for (i, v) in versions.iter().enumerate() {
            if *v != first + i as u64 {
                return Err(Error::DeltaLog {
                    path: self.log_location(""),
                    detail: format!(
                        "versions are not contiguous from {first}: found {v} at position {i}"
                    ),
                });
            }
            let name = version_name(*v);
            let bytes = self
                .store
                .get(&Self::log_path(&name))?
                .ok_or_else(|| Error::DeltaLog {
                    path: self.log_location(&name),
                    detail: "listed, then gone".to_owned(),
                })?;
            let text = String::from_utf8(bytes).map_err(|_| Error::DeltaLog {
                path: self.log_location(&name),
                detail: "a commit is not UTF-8".to_owned(),
            })?;
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                apply(&mut state, line).map_err(|detail| Error::DeltaLog {
                    path: self.log_location(&name),
                    detail,
                })?;
            }
            state.version = Some(*v);
        }
        Ok(state)
    }

    /// The version `_delta_log/_last_checkpoint` names, if there is one.
    fn last_checkpoint(&self) -> Result<Option<u64>> {
        let Some(bytes) = self.store.get(&Self::log_path(LAST_CHECKPOINT))? else {
            return Ok(None);
        };
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| Error::DeltaLog {
            path: self.log_location(LAST_CHECKPOINT),
            detail: format!("not JSON: {e}"),
        })?;
        v.get("version")
            .and_then(Value::as_u64)
            .map(Some)
            .ok_or_else(|| Error::DeltaLog {
                path: self.log_location(LAST_CHECKPOINT),
                detail: "no version".to_owned(),
            })
    }

    /// Writes a checkpoint of `state` (the table at `state.version`):
    /// `_delta_log/<version>.checkpoint.parquet`, then `_last_checkpoint` naming it.
    /// Tombstones older than [`TOMBSTONE_RETENTION_MS`] before `now_ms` are left out.
    /// Rewriting a checkpoint is harmless (same version, same actions), so a crash
    /// between the two puts only leaves readers on the previous checkpoint.
    ///
    /// # Errors
    /// Store and Parquet errors; [`Error::DeltaLog`] for a table with no version.
    pub fn checkpoint(&self, state: &TableState, now_ms: i64) -> Result<()> {
        let Some(version) = state.version else {
            return Err(Error::DeltaLog {
                path: self.log_location(""),
                detail: "no commit to checkpoint".to_owned(),
            });
        };
        let (bytes, actions) =
            crate::checkpoint::write(state, now_ms, now_ms.saturating_sub(TOMBSTONE_RETENTION_MS))?;
        let size_in_bytes = bytes.len();
        self.store
            .put(&Self::log_path(&checkpoint_name(version)), bytes)?;
        let last = json!({
            "version": version,
            "size": actions,
            "sizeInBytes": size_in_bytes,
            "numOfAddFiles": state.files.len(),
        });
        self.store.put(
            &Self::log_path(LAST_CHECKPOINT),
            last.to_string().into_bytes(),
        )
    }

    /// A log entry's location, for messages.
    fn log_location(&self, name: &str) -> PathBuf {
        PathBuf::from(self.store.location())
            .join(LOG_DIR)
            .join(name)
    }

    /// Writes `commit` as version `version`, only if no commit of that version exists
    /// (put-if-absent: a hard link of a synced file on a local filesystem, a
    /// conditional put on S3).
    ///
    /// # Errors
    /// Store errors; [`Error::CommitConflict`] when the version exists (another
    /// writer).
    pub fn commit(&self, version: u64, commit: &Commit, now_ms: i64) -> Result<()> {
        let mut text = String::new();
        for action in actions(version, commit, now_ms) {
            text.push_str(&action.to_string());
            text.push('\n');
        }
        let path = Self::log_path(&version_name(version));
        if self.store.put_if_absent(&path, text.into_bytes())? {
            Ok(())
        } else {
            Err(Error::CommitConflict { version })
        }
    }
}

/// What a vacuum deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VacuumReport {
    /// The data files deleted, relative to the table.
    pub deleted: Vec<String>,
    /// Their bytes.
    pub bytes: u64,
}

/// Files a vacuum deletes though no `remove` names them (left by an export that
/// crashed before its commit, or whose tombstone has aged out of the checkpoints) must
/// be at least this old, whatever the retention: an export under way has written files
/// it has not committed yet.
pub const UNTRACKED_MIN_AGE_MS: i64 = 3_600_000;

impl DeltaTable {
    /// Deletes the data files the table no longer references: those its commits
    /// removed (a late write's re-export replaced them) at least `retention_ms` before
    /// `now_ms`, and files no commit ever added or whose tombstone expired, last
    /// written at least `max(retention_ms, UNTRACKED_MIN_AGE_MS)` before. Live files,
    /// the log and paths starting with `_` or `.` (`_delta_log`, `_rollups`) are never
    /// touched. Readers of a table version older than the retention may then miss
    /// files, as with Delta's `VACUUM`: keep the retention above the longest query.
    ///
    /// # Errors
    /// Store errors, and the log's (see [`state`](Self::state)).
    pub fn vacuum(&self, retention_ms: i64, now_ms: i64) -> Result<VacuumReport> {
        let state = self.state()?;
        let removed_before = now_ms.saturating_sub(retention_ms.max(0));
        let untracked_before = now_ms.saturating_sub(retention_ms.max(UNTRACKED_MIN_AGE_MS));
        let mut report = VacuumReport::default();
        for object in self.store.list("")? {
            let hidden = object
                .path
                .split('/')
                .any(|p| p.starts_with('_') || p.starts_with('.'));
            if hidden || state.files.contains_key(&object.path) {
                continue;
            }
            let expired = match state.removed.get(&object.path) {
                Some(at) => *at <= removed_before,
                None => object.last_modified_ms <= untracked_before,
            };
            if expired {
                self.store.delete(&object.path)?;
                report.bytes += object.size;
                report.deleted.push(object.path);
            }
        }
        Ok(report)
    }
}

/// `00000000000000000007.checkpoint.parquet`.
fn checkpoint_name(v: u64) -> String {
    format!("{v:020}.checkpoint.parquet")
}

/// `00000000000000000007.json`.
fn version_name(v: u64) -> String {
    format!("{v:020}.json")
}

/// Applies one log line to the state.
fn apply(state: &mut TableState, line: &str) -> std::result::Result<(), String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("a line is not JSON: {e}"))?;
    if let Some(add) = v.get("add") {
        let path = str_field(add, "path")?;
        let file = LiveFile {
            size: add.get("size").and_then(Value::as_u64).unwrap_or(0),
            partition_values: string_map(add.get("partitionValues")),
            modification_time: add
                .get("modificationTime")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            stats: add.get("stats").and_then(Value::as_str).map(str::to_owned),
        };
        state.removed.remove(&path);
        state.files.insert(path, file);
    } else if let Some(remove) = v.get("remove") {
        let path = str_field(remove, "path")?;
        let at = remove
            .get("deletionTimestamp")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        state.files.remove(&path);
        state.removed.insert(path, at);
    } else if let Some(txn) = v.get("txn") {
        let app = str_field(txn, "appId")?;
        let version = txn
            .get("version")
            .and_then(Value::as_i64)
            .ok_or("a txn action has no version")?;
        state.txns.insert(app, version);
    } else if let Some(meta) = v.get("metaData") {
        state.id = meta.get("id").and_then(Value::as_str).map(str::to_owned);
        let schema = str_field(meta, "schemaString")?;
        state.columns = parse_delta_schema(&schema)?;
        state.schema_string = Some(schema);
        state.created_time = meta.get("createdTime").and_then(Value::as_i64);
        state.partition_columns = meta
            .get("partitionColumns")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        state.configuration = string_map(meta.get("configuration"));
    } else if let Some(p) = v.get("protocol") {
        let reader = p
            .get("minReaderVersion")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if reader > 1 {
            return Err(format!(
                "the table needs reader version {reader}; this writer knows version 1"
            ));
        }
        let writer = p
            .get("minWriterVersion")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        state.protocol = (
            i32::try_from(reader).unwrap_or(i32::MAX),
            i32::try_from(writer).unwrap_or(i32::MAX),
        );
    }
    Ok(())
}

/// A JSON object of strings as a map (other values left out); empty for anything else.
fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

fn str_field(v: &Value, name: &str) -> std::result::Result<String, String> {
    v.get(name)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("an action has no string `{name}`"))
}

/// The actions of a commit, in the order the protocol recommends.
fn actions(version: u64, c: &Commit, now_ms: i64) -> Vec<Value> {
    let mut out = vec![json!({"commitInfo": {
        "timestamp": now_ms,
        "operation": "WRITE",
        "operationParameters": c.parameters,
        "engineInfo": concat!("tidemark-lake/", env!("CARGO_PKG_VERSION")),
        "isBlindAppend": c.remove.is_empty(),
    }})];
    if version == 0 {
        out.push(json!({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}));
    }
    if let Some(schema) = &c.schema_string {
        out.push(json!({"metaData": {
            "id": table_id(now_ms),
            "format": {"provider": "parquet", "options": {}},
            "schemaString": schema,
            "partitionColumns": c.partition_columns,
            "configuration": c.configuration,
            "createdTime": now_ms,
        }}));
    }
    if let Some((app, v)) = &c.txn {
        out.push(json!({"txn": {"appId": app, "version": v, "lastUpdated": now_ms}}));
    }
    for path in &c.remove {
        out.push(json!({"remove": {
            "path": path,
            "deletionTimestamp": now_ms,
            "dataChange": true,
        }}));
    }
    for a in &c.add {
        let mut stats = json!({"numRecords": a.rows});
        if let (Some((name, lo, hi)), Value::Object(o)) = (&a.ts_stats, &mut stats) {
            // Delta writes timestamp statistics as RFC 3339 with milliseconds, UTC.
            let (lo, hi) = (tidemark::format_time(*lo), tidemark::format_time(*hi));
            let (mut min, mut max, mut nulls) = (Map::new(), Map::new(), Map::new());
            min.insert(name.clone(), json!(lo));
            max.insert(name.clone(), json!(hi));
            nulls.insert(name.clone(), json!(0));
            if let Some((lo, hi)) = a.shard_stats {
                min.insert(SHARD_COLUMN.to_owned(), json!(lo));
                max.insert(SHARD_COLUMN.to_owned(), json!(hi));
                nulls.insert(SHARD_COLUMN.to_owned(), json!(0));
            }
            o.insert("minValues".into(), Value::Object(min));
            o.insert("maxValues".into(), Value::Object(max));
            o.insert("nullCount".into(), Value::Object(nulls));
        }
        out.push(json!({"add": {
            "path": a.path,
            "partitionValues": a.partition_values,
            "size": a.size,
            "modificationTime": now_ms,
            "dataChange": true,
            "stats": stats.to_string(),
        }}));
    }
    out
}

/// A table id: a UUID-shaped string derived from the creation time and process (the
/// protocol asks for a unique id, not for a random one).
fn table_id(now_ms: i64) -> String {
    let h = tidemark_bloom::Hash64::PARQUET.hash(
        format!(
            "{now_ms}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        )
        .as_bytes(),
    );
    let l = tidemark_bloom::Hash64::XXH3.hash(&h.to_le_bytes());
    let b = [h.to_be_bytes(), l.to_be_bytes()].concat();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(path: &str) -> AddFile {
        AddFile {
            path: path.to_owned(),
            size: 10,
            rows: 2,
            partition_values: BTreeMap::new(),
            ts_stats: Some(("@timestamp".to_owned(), 0, 1000)),
            shard_stats: Some((3, 9)),
        }
    }

    fn commit(txn: (&str, i64), remove: &[&str], adds: &[&str]) -> Commit {
        Commit {
            schema_string: Some(r#"{"type":"struct","fields":[{"name":"@timestamp","type":"timestamp","nullable":false,"metadata":{}}]}"#.to_owned()),
            txn: Some((txn.0.to_owned(), txn.1)),
            remove: remove.iter().map(|p| (*p).to_owned()).collect(),
            add: adds.iter().map(|p| add(p)).collect(),
            ..Commit::default()
        }
    }

    #[test]
    fn replays_adds_removes_txns_and_the_schema() {
        let dir = tempfile::tempdir().unwrap();
        let t = DeltaTable::local(dir.path()).unwrap();
        assert_eq!(t.state().unwrap(), TableState::default());
        t.commit(0, &commit(("a", 3), &[], &["p-0/x.parquet"]), 1)
            .unwrap();
        t.commit(1, &commit(("b", 1), &[], &["p-1/y.parquet"]), 2)
            .unwrap();
        t.commit(
            2,
            &commit(("a", 5), &["p-0/x.parquet"], &["p-0/z.parquet"]),
            3,
        )
        .unwrap();
        let s = t.state().unwrap();
        assert_eq!(s.version, Some(2));
        assert_eq!(
            s.files.keys().collect::<Vec<_>>(),
            ["p-0/z.parquet", "p-1/y.parquet"]
        );
        assert_eq!((s.txns["a"], s.txns["b"]), (5, 1));
        assert_eq!(
            s.columns,
            [("@timestamp".to_owned(), ColumnType::TimestampMillis)]
        );
        // The add's statistics are a JSON string, as the protocol wants.
        let log = std::fs::read_to_string(dir.path().join(LOG_DIR).join(version_name(0))).unwrap();
        let add_line: Value = log
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|v| v.get("add").is_some())
            .unwrap();
        let stats: Value =
            serde_json::from_str(add_line["add"]["stats"].as_str().unwrap()).unwrap();
        assert_eq!(stats["numRecords"], 2);
        assert_eq!(stats["maxValues"]["@timestamp"], "1970-01-01T00:00:01.000Z");
        assert_eq!(
            (&stats["minValues"]["shard"], &stats["maxValues"]["shard"]),
            (&json!(3), &json!(9))
        );
    }

    #[test]
    fn a_version_is_committed_once() {
        let dir = tempfile::tempdir().unwrap();
        let t = DeltaTable::local(dir.path()).unwrap();
        t.commit(0, &commit(("a", 1), &[], &["p-0/x.parquet"]), 1)
            .unwrap();
        let again = t.commit(0, &commit(("a", 2), &[], &["p-0/y.parquet"]), 2);
        assert!(matches!(again, Err(Error::CommitConflict { version: 0 })));
        // The first commit stands, and no temporary file is left.
        assert_eq!(t.state().unwrap().txns["a"], 1);
        assert_eq!(
            std::fs::read_dir(dir.path().join(LOG_DIR)).unwrap().count(),
            1
        );
    }

    #[test]
    fn refuses_logs_it_does_not_read() {
        let write = |name: &str, text: &str| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(dir.path().join(LOG_DIR)).unwrap();
            std::fs::write(dir.path().join(LOG_DIR).join(name), text).unwrap();
            let e = DeltaTable::local(dir.path()).unwrap().state().unwrap_err();
            e.to_string()
        };
        assert!(
            write(
                "00000000000000000000.checkpoint.0000000001.0000000002.parquet",
                ""
            )
            .contains("multi-part")
        );
        assert!(write("00000000000000000000.checkpoint.parquet", "").contains("not Parquet"));
        assert!(write("00000000000000000001.json", "{}").contains("not contiguous"));
        assert!(write("00000000000000000000.json", "{nope").contains("not JSON"));
        assert!(
            write(
                "00000000000000000000.json",
                r#"{"protocol":{"minReaderVersion":3,"minWriterVersion":7}}"#
            )
            .contains("reader version 3")
        );
        assert!(
            write("00000000000000000000.json", r#"{"add":{"size":1}}"#)
                .contains("no string `path`")
        );
    }
}
