//! A Delta Lake table written by the protocol's JSON log (Delta transaction protocol,
//! reader version 1, writer version 2): `_delta_log/<version:020>.json`, one action per
//! line, in a [`LakeStore`]. This writer reads the log back by replaying every commit
//! (it writes no checkpoints and refuses a table that has some), and commits by creating
//! the next version's file only if it does not exist (put-if-absent: a hard link of a
//! synced file on a local filesystem, a conditional put on S3), so two writers never
//! both commit a version.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::schema::{ColumnType, parse_delta_schema};
use crate::store::LakeStore;

/// The log directory of a table.
pub const LOG_DIR: &str = "_delta_log";

/// The state of a table after replaying its log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableState {
    /// The last committed version (`None`: no table yet).
    pub version: Option<u64>,
    /// The table's id (`metaData.id`).
    pub id: Option<String>,
    /// The table's columns, from its latest `metaData`.
    pub columns: Vec<(String, ColumnType)>,
    /// The table's `metaData.configuration`.
    pub configuration: BTreeMap<String, String>,
    /// The table's partition columns (`metaData.partitionColumns`).
    pub partition_columns: Vec<String>,
    /// Live data files: path (relative to the table) → what its `add` action says.
    pub files: BTreeMap<String, LiveFile>,
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

    /// Replays the log.
    ///
    /// # Errors
    /// Store errors, [`Error::DeltaLog`] for a log with checkpoints, a gap in its
    /// versions, a malformed line or a schema this writer does not write.
    pub fn state(&self) -> Result<TableState> {
        let mut state = TableState::default();
        let mut versions = Vec::new();
        for object in self.store.list(LOG_DIR)? {
            let name = object.path.rsplit('/').next().unwrap_or_default();
            if name.starts_with('.') {
                continue;
            }
            if name.contains("checkpoint") {
                return Err(Error::DeltaLog {
                    path: self.log_location(name),
                    detail: "the table has checkpoints, which this writer does not read yet"
                        .to_owned(),
                });
            }
            if let Some(v) = name
                .strip_suffix(".json")
                .and_then(|v| v.parse::<u64>().ok())
            {
                versions.push(v);
            }
        }
        versions.sort_unstable();
        for (i, v) in versions.iter().enumerate() {
            if *v != i as u64 {
                return Err(Error::DeltaLog {
                    path: self.log_location(""),
                    detail: format!(
                        "versions are not contiguous from 0: found {v} at position {i}"
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
        state.files.insert(path, file);
    } else if let Some(remove) = v.get("remove") {
        state.files.remove(&str_field(remove, "path")?);
    } else if let Some(txn) = v.get("txn") {
        let app = str_field(txn, "appId")?;
        let version = txn
            .get("version")
            .and_then(Value::as_i64)
            .ok_or("a txn action has no version")?;
        state.txns.insert(app, version);
    } else if let Some(meta) = v.get("metaData") {
        state.id = meta.get("id").and_then(Value::as_str).map(str::to_owned);
        state.columns = parse_delta_schema(&str_field(meta, "schemaString")?)?;
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
            o.insert("minValues".into(), json!({ name.as_str(): lo }));
            o.insert("maxValues".into(), json!({ name.as_str(): hi }));
            o.insert("nullCount".into(), json!({ name.as_str(): 0 }));
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
        assert!(write("00000000000000000000.checkpoint.parquet", "").contains("checkpoints"));
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
