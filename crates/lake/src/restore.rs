//! Reading back what was exported: a partition's raw rows read from the lake's live
//! Parquet files and rebuilt, through an index's ordinary ingest, into ordinary
//! Tidemark segments (an index of the same mapping, e.g. a local cache of partitions
//! that retention removed), so every query path reads them unchanged.
//!
//! Each row becomes the document it was: the timestamp, each dimension, metric and
//! extra column under its mapping name, in the JSON types the mapping parses. The
//! document's synthetic `_id` as the index computes it must equal the file's `_id`
//! (or `_tsid` and timestamp): a lake written with another mapping fails instead of
//! rebuilding other series. Files are read by row batches (one row group's pages at a
//! time), documents indexed in bounded batches, so memory does not grow with the
//! partition; a file in an object store is first streamed to a temporary file beside
//! the index.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Map, Number, Value};
use tidemark::tsid::SyntheticId;
use tidemark::{BulkItem, FieldRole, FieldType, Index, Mapping};

use crate::delta::DeltaTable;
use crate::error::{Error, Result};
use crate::schema::{ID_COLUMN, PARTITION_COLUMN, SHARD_COLUMN, TSID_COLUMN};
use crate::store::LakeStore;

/// Rows read per Arrow batch.
const READ_BATCH_ROWS: usize = 8192;
/// Documents indexed per bulk call.
const BULK_DOCS: usize = 8192;

/// One partition of a lake's raw rows' table, as its log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LakePartition {
    /// First millisecond of the partition.
    pub start_ms: i64,
    /// The generation exported (the `txn` version of the partition), if recorded.
    pub generation: Option<i64>,
    /// Its live data files (paths relative to the table).
    pub files: Vec<String>,
    /// Rows, from the files' `numRecords` statistics.
    pub rows: u64,
}

/// The partitions the raw rows' table of the lake at `lake` holds, oldest first (empty
/// for a lake with no table yet).
///
/// # Errors
/// Store and log errors.
pub fn lake_partitions(lake: &LakeStore) -> Result<Vec<LakePartition>> {
    let state = DeltaTable::new(lake.clone()).state()?;
    let mut out: BTreeMap<i64, LakePartition> = BTreeMap::new();
    for (path, live) in &state.files {
        let Some(start_ms) = live
            .partition_values
            .get(PARTITION_COLUMN)
            .and_then(|v| v.parse::<i64>().ok())
        else {
            return Err(Error::DeltaLog {
                path: PathBuf::from(lake.location()).join(crate::LOG_DIR),
                detail: format!("the file {path} has no {PARTITION_COLUMN} value"),
            });
        };
        let rows = live
            .stats
            .as_deref()
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
            .and_then(|s| s.get("numRecords").and_then(Value::as_u64))
            .unwrap_or(0);
        let p = out.entry(start_ms).or_insert_with(|| LakePartition {
            start_ms,
            generation: state
                .txns
                .get(&crate::export::txn_app_id(start_ms))
                .copied(),
            files: Vec::new(),
            rows: 0,
        });
        p.files.push(path.clone());
        p.rows += rows;
    }
    Ok(out.into_values().collect())
}

/// What a restore did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RestoreReport {
    /// Per partition restored: its start and the rows read from the lake.
    pub partitions: Vec<(i64, u64)>,
    /// Documents the index created.
    pub created: u64,
    /// Documents the index held already (a restore run again).
    pub duplicates: u64,
    /// Seconds in all.
    pub seconds: f64,
}

/// Restores the raw rows of the lake's partitions starting at `starts` into `index`,
/// which must have the mapping the lake was written with (its files carry it as
/// `tidemark.mapping`) and time partitions: each row is indexed as the document it was
/// (`create`: a row already there is a duplicate, not an error), then each partition
/// is sealed, so it is one merged segment with its rollups, as it was before
/// retention removed it.
///
/// # Errors
/// [`Error::NoSuchPartition`] for a start the lake does not hold; store, log, Parquet
/// and index errors; [`Error::RestoreMismatch`] when a rebuilt document's `_id` is not
/// the row's (another mapping) or a value cannot be a JSON document's (a NaN gauge).
pub fn restore(
    lake: &LakeStore,
    starts: &[i64],
    index: &mut Index,
    progress: &mut dyn FnMut(i64, u64),
) -> Result<RestoreReport> {
    let started = Instant::now();
    if !index.engine().is_partitioned() {
        return Err(Error::NotPartitioned {
            path: index.dir().to_path_buf(),
        });
    }
    let held = lake_partitions(lake)?;
    let mut report = RestoreReport::default();
    for start in starts {
        let Some(part) = held.iter().find(|p| p.start_ms == *start) else {
            let available: Vec<String> = held
                .iter()
                .map(|p| tidemark::format_time(p.start_ms))
                .collect();
            return Err(Error::NoSuchPartition {
                start: tidemark::format_time(*start),
                available: if available.is_empty() {
                    "none".to_owned()
                } else {
                    available.join(", ")
                },
            });
        };
        let mut rows = 0u64;
        for rel in &part.files {
            let fetched = Fetched::get(lake, rel, index.dir())?;
            rows += restore_file(fetched.path(), index, &mut report, &mut |n| {
                progress(part.start_ms, rows + n);
            })?;
        }
        index.seal(part.start_ms)?;
        report.partitions.push((part.start_ms, rows));
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// A data file as a local path: the lake's own file when the lake is a local
/// directory, else a temporary copy beside the index, removed when dropped.
struct Fetched {
    path: PathBuf,
    temporary: bool,
}

impl Fetched {
    fn get(lake: &LakeStore, rel: &str, beside: &Path) -> Result<Fetched> {
        if let Some(path) = lake.local_path(rel) {
            return Ok(Fetched {
                path,
                temporary: false,
            });
        }
        let name = rel.rsplit('/').next().unwrap_or(rel);
        let path = beside.join(format!(".lake-fetch-{name}"));
        lake.download(rel, &path)?;
        Ok(Fetched {
            path,
            temporary: true,
        })
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Fetched {
    fn drop(&mut self) {
        if self.temporary {
            // Best effort: a leftover temporary copy is overwritten by the next fetch.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// How one column of a file becomes a document field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// The document's timestamp.
    Timestamp,
    /// A field of the mapping, of this type.
    Field(FieldType),
    /// `_tsid`, `_id`, `shard`: checked or left out.
    Skip,
}

fn targets(mapping: &Mapping, batch: &RecordBatch) -> Result<Vec<Target>> {
    let ts = mapping.timestamp_field();
    batch
        .schema()
        .fields()
        .iter()
        .map(|f| {
            let name = f.name().as_str();
            if name == ts {
                return Ok(Target::Timestamp);
            }
            if [TSID_COLUMN, ID_COLUMN, SHARD_COLUMN, PARTITION_COLUMN].contains(&name) {
                return Ok(Target::Skip);
            }
            match mapping.field(name) {
                Some(field) if field.role != FieldRole::Timestamp => Ok(Target::Field(field.ty)),
                _ => Err(Error::RestoreMismatch {
                    detail: format!(
                        "column `{name}` is not a field of the index's mapping: restore into an index with the lake's mapping (the files' tidemark.mapping)"
                    ),
                }),
            }
        })
        .collect()
}

/// Indexes the rows of one Parquet file; returns the rows read.
fn restore_file(
    path: &Path,
    index: &mut Index,
    report: &mut RestoreReport,
    progress: &mut dyn FnMut(u64),
) -> Result<u64> {
    let file = std::fs::File::open(path).map_err(Error::io(path))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)?
        .with_batch_size(READ_BATCH_ROWS)
        .build()?;
    let mapping = index.mapping().clone();
    let mut rows = 0u64;
    let mut docs: Vec<BulkItem> = Vec::with_capacity(BULK_DOCS);
    let mut ids: Vec<SyntheticId> = Vec::with_capacity(BULK_DOCS);
    let mut plan: Option<Vec<Target>> = None;
    for batch in reader {
        let batch = batch?;
        let plan = match &plan {
            Some(p) => p,
            None => plan.insert(targets(&mapping, &batch)?),
        };
        for r in 0..batch.num_rows() {
            let (doc, id) = row_document(&batch, plan, r)?;
            docs.push(BulkItem::create(Value::Object(doc)));
            ids.push(id);
            if docs.len() >= BULK_DOCS {
                index_docs(index, &mut docs, &mut ids, report)?;
            }
        }
        rows += batch.num_rows() as u64;
        progress(rows);
    }
    index_docs(index, &mut docs, &mut ids, report)?;
    Ok(rows)
}

/// The document of row `r` and the synthetic id the lake stored for it.
fn row_document(
    batch: &RecordBatch,
    plan: &[Target],
    r: usize,
) -> Result<(Map<String, Value>, SyntheticId)> {
    let mut doc = Map::new();
    let mut ts: Option<i64> = None;
    let mut tsid: Option<&[u8]> = None;
    for ((field, column), target) in batch
        .schema_ref()
        .fields()
        .iter()
        .zip(batch.columns())
        .zip(plan)
    {
        let name = field.name();
        if name == TSID_COLUMN {
            tsid = binary_at(column, r);
            continue;
        }
        match target {
            Target::Skip => {}
            Target::Timestamp => {
                let Some(t) = column
                    .as_primitive_opt::<TimestampMillisecondType>()
                    .filter(|c| c.is_valid(r))
                    .map(|c| c.value(r))
                else {
                    return Err(mismatch(format!("row {r}: no timestamp in `{name}`")));
                };
                ts = Some(t);
                doc.insert(name.clone(), Value::from(t));
            }
            Target::Field(ty) => {
                if let Some(v) = json_value(column, r, *ty, name)? {
                    doc.insert(name.clone(), v);
                }
            }
        }
    }
    let (Some(ts), Some(tsid)) = (ts, tsid) else {
        return Err(mismatch(format!(
            "row {r}: a lake file needs the timestamp and `{TSID_COLUMN}`"
        )));
    };
    let tsid = tidemark::tsid::Tsid::try_from_slice(tsid)
        .map_err(|e| mismatch(format!("row {r}: `{TSID_COLUMN}`: {e}")))?;
    Ok((doc, SyntheticId::new(tsid, ts)))
}

fn mismatch(detail: String) -> Error {
    Error::RestoreMismatch { detail }
}

fn binary_at(column: &ArrayRef, r: usize) -> Option<&[u8]> {
    column
        .as_binary_opt::<i32>()
        .filter(|c| c.is_valid(r))
        .map(|c| c.value(r))
}

/// The JSON value of row `r` of `column` for a field of type `ty` (`None`: null).
fn json_value(column: &ArrayRef, r: usize, ty: FieldType, name: &str) -> Result<Option<Value>> {
    if !column.is_valid(r) {
        return Ok(None);
    }
    let value = match column.data_type() {
        DataType::Dictionary(_, _) => {
            let dict = column
                .as_dictionary_opt::<Int32Type>()
                .ok_or_else(|| mismatch(format!("column `{name}`: not an Int32 dictionary")))?;
            let key = usize::try_from(dict.keys().value(r))
                .map_err(|_| mismatch(format!("column `{name}`: a negative dictionary key")))?;
            let values = dict
                .values()
                .as_string_opt::<i32>()
                .ok_or_else(|| mismatch(format!("column `{name}`: not a string dictionary")))?;
            if key >= values.len() {
                return Err(mismatch(format!(
                    "column `{name}`: dictionary key {key} past its {} values",
                    values.len()
                )));
            }
            text_value(values.value(key), ty)
        }
        DataType::Utf8 => text_value(column.as_string::<i32>().value(r), ty),
        DataType::Int64 => Value::from(column.as_primitive::<Int64Type>().value(r)),
        DataType::Int32 => Value::from(column.as_primitive::<Int32Type>().value(r)),
        DataType::Float64 => {
            let v = column.as_primitive::<Float64Type>().value(r);
            Value::Number(Number::from_f64(v).ok_or_else(|| {
                mismatch(format!(
                    "column `{name}`: {v} cannot be a JSON document's value"
                ))
            })?)
        }
        DataType::Boolean => Value::Bool(column.as_boolean().value(r)),
        other => {
            return Err(mismatch(format!(
                "column `{name}`: type {other} is not one the lake writes"
            )));
        }
    };
    Ok(Some(value))
}

/// A text cell as the mapping parses it: numbers of integer fields (dimensions of mixed
/// kinds are exported as text) back as numbers.
fn text_value(text: &str, ty: FieldType) -> Value {
    match ty {
        FieldType::Long => text
            .parse::<i64>()
            .map_or_else(|_| text.into(), Value::from),
        FieldType::UnsignedLong => text
            .parse::<u64>()
            .map_or_else(|_| text.into(), Value::from),
        _ => Value::String(text.to_owned()),
    }
}

/// Indexes the gathered documents and checks each one's `_id` is the lake's.
fn index_docs(
    index: &mut Index,
    docs: &mut Vec<BulkItem>,
    ids: &mut Vec<SyntheticId>,
    report: &mut RestoreReport,
) -> Result<()> {
    if docs.is_empty() {
        return Ok(());
    }
    let results = index.bulk(std::mem::take(docs))?;
    for (result, expected) in results.iter().zip(ids.iter()) {
        match result.http_status() {
            201 => report.created += 1,
            409 => report.duplicates += 1,
            _ => {
                return Err(mismatch(format!(
                    "the row with _id {} was refused: {}",
                    expected.to_text(),
                    result.to_json()
                )));
            }
        }
        let same = result
            .id
            .as_deref()
            .and_then(|t| SyntheticId::parse(t).ok())
            .is_some_and(|got| got == *expected);
        if !same {
            return Err(mismatch(format!(
                "the row with _id {} rebuilt as {:?}: the index's mapping is not the lake's",
                expected.to_text(),
                result.id
            )));
        }
    }
    ids.clear();
    Ok(())
}
