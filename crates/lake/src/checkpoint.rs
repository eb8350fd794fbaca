//! Delta checkpoints: a table's state at one version as one Parquet file,
//! `_delta_log/<version:020>.checkpoint.parquet`, named by `_delta_log/_last_checkpoint`,
//! so a reader replays the commits after it instead of every commit since the first.
//!
//! The file follows the protocol's checkpoint schema: one row per action, with one
//! struct column per action kind (`txn`, `add`, `remove`, `metaData`, `protocol`) of
//! which each row sets exactly one. Every field is nullable, as Spark writes them; maps
//! (`partitionValues`, `configuration`, `format.options`) are Parquet `MAP`s of
//! strings. Tombstones (`remove`) are kept while younger than the retention (so a
//! vacuum still knows those files were removed), as Delta's
//! `deletedFileRetentionDuration` keeps them.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Int32Builder, Int64Builder, ListBuilder, MapBuilder, MapFieldNames,
    StringBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, ArrayRef, BooleanArray, MapArray, RecordBatch, StructArray};
use arrow_schema::{DataType, Field, Fields, Schema};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::delta::{LiveFile, TableState};
use crate::error::Result;
use crate::schema::parse_delta_schema;

/// One action of a checkpoint.
enum Action<'a> {
    Protocol(i32, i32),
    MetaData(&'a TableState),
    Txn(&'a str, i64),
    Add(&'a str, &'a LiveFile),
    Remove(&'a str, i64),
}

/// The checkpoint of `state` (Parquet bytes) and its number of actions. Tombstones
/// older than `tombstones_after_ms` are left out.
pub(crate) fn write(
    state: &TableState,
    now_ms: i64,
    tombstones_after_ms: i64,
) -> Result<(Vec<u8>, u64)> {
    let mut actions = vec![
        Action::Protocol(state.protocol.0, state.protocol.1),
        Action::MetaData(state),
    ];
    actions.extend(state.txns.iter().map(|(a, v)| Action::Txn(a, *v)));
    actions.extend(state.files.iter().map(|(p, f)| Action::Add(p, f)));
    actions.extend(
        state
            .removed
            .iter()
            .filter(|(_, t)| **t >= tombstones_after_ms)
            .map(|(p, t)| Action::Remove(p, *t)),
    );
    let columns: Vec<(Field, ArrayRef)> = vec![
        txn_column(&actions, now_ms)?,
        add_column(&actions)?,
        remove_column(&actions)?,
        meta_column(&actions)?,
        protocol_column(&actions)?,
    ];
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = columns.into_iter().unzip();
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?;
    let mut out = Vec::new();
    let mut w = ArrowWriter::try_new(&mut out, batch.schema(), None)?;
    w.write(&batch)?;
    w.close()?;
    Ok((out, actions.len() as u64))
}

/// The validity of a struct column: set on the rows of one action kind. (A Boolean
/// array's null buffer, so that no buffer type needs naming.)
fn validity<'a>(actions: &[Action<'a>], is: impl Fn(&Action<'a>) -> bool) -> BooleanArray {
    actions
        .iter()
        .map(|a| is(a).then_some(true))
        .collect::<BooleanArray>()
}

fn struct_column(
    name: &str,
    children: Vec<(Field, ArrayRef)>,
    valid: &BooleanArray,
) -> Result<(Field, ArrayRef)> {
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = children.into_iter().unzip();
    let fields = Fields::from(fields);
    let array = StructArray::try_new(fields.clone(), arrays, valid.nulls().cloned())?;
    Ok((
        Field::new(name, DataType::Struct(fields), true),
        Arc::new(array),
    ))
}

fn strings<'a>(values: impl Iterator<Item = Option<&'a str>>) -> ArrayRef {
    let mut b = StringBuilder::new();
    for v in values {
        b.append_option(v);
    }
    Arc::new(b.finish())
}

fn longs(values: impl Iterator<Item = Option<i64>>) -> ArrayRef {
    let mut b = Int64Builder::new();
    for v in values {
        b.append_option(v);
    }
    Arc::new(b.finish())
}

fn map_field_names() -> MapFieldNames {
    MapFieldNames {
        entry: "key_value".to_owned(),
        key: "key".to_owned(),
        value: "value".to_owned(),
    }
}

/// A `map<string, string>` column: `None` rows are null.
fn string_maps<'a>(
    values: impl Iterator<Item = Option<&'a BTreeMap<String, String>>>,
) -> Result<MapArray> {
    let mut b = MapBuilder::new(
        Some(map_field_names()),
        StringBuilder::new(),
        StringBuilder::new(),
    );
    for v in values {
        if let Some(m) = v {
            for (k, v) in m {
                b.keys().append_value(k);
                b.values().append_value(v);
            }
        }
        b.append(v.is_some())?;
    }
    Ok(b.finish())
}

fn map_child(name: &str, values: MapArray) -> (Field, ArrayRef) {
    (
        Field::new(name, values.data_type().clone(), true),
        Arc::new(values),
    )
}

fn utf8(name: &str, a: ArrayRef) -> (Field, ArrayRef) {
    (Field::new(name, DataType::Utf8, true), a)
}

fn int64(name: &str, a: ArrayRef) -> (Field, ArrayRef) {
    (Field::new(name, DataType::Int64, true), a)
}

fn txn_column<'a>(actions: &[Action<'a>], now_ms: i64) -> Result<(Field, ArrayRef)> {
    let get = |a: &Action<'a>| match a {
        Action::Txn(app, v) => Some((*app, *v)),
        _ => None,
    };
    struct_column(
        "txn",
        vec![
            utf8(
                "appId",
                strings(actions.iter().map(|a| get(a).map(|t| t.0))),
            ),
            int64(
                "version",
                longs(actions.iter().map(|a| get(a).map(|t| t.1))),
            ),
            int64(
                "lastUpdated",
                longs(actions.iter().map(|a| get(a).map(|_| now_ms))),
            ),
        ],
        &validity(actions, |a| get(a).is_some()),
    )
}

fn add_column<'a>(actions: &[Action<'a>]) -> Result<(Field, ArrayRef)> {
    let get = |a: &Action<'a>| match a {
        Action::Add(p, f) => Some((*p, *f)),
        _ => None,
    };
    let mut data_change = BooleanBuilder::new();
    for a in actions {
        data_change.append_option(get(a).map(|_| false));
    }
    struct_column(
        "add",
        vec![
            utf8("path", strings(actions.iter().map(|a| get(a).map(|t| t.0)))),
            map_child(
                "partitionValues",
                string_maps(
                    actions
                        .iter()
                        .map(|a| get(a).map(|t| &t.1.partition_values)),
                )?,
            ),
            int64(
                "size",
                longs(actions.iter().map(|a| get(a).map(|t| t.1.size as i64))),
            ),
            int64(
                "modificationTime",
                longs(
                    actions
                        .iter()
                        .map(|a| get(a).map(|t| t.1.modification_time)),
                ),
            ),
            (
                Field::new("dataChange", DataType::Boolean, true),
                Arc::new(data_change.finish()),
            ),
            utf8(
                "stats",
                strings(
                    actions
                        .iter()
                        .map(|a| get(a).and_then(|t| t.1.stats.as_deref())),
                ),
            ),
        ],
        &validity(actions, |a| get(a).is_some()),
    )
}

fn remove_column<'a>(actions: &[Action<'a>]) -> Result<(Field, ArrayRef)> {
    let get = |a: &Action<'a>| match a {
        Action::Remove(p, t) => Some((*p, *t)),
        _ => None,
    };
    let mut data_change = BooleanBuilder::new();
    for a in actions {
        data_change.append_option(get(a).map(|_| true));
    }
    struct_column(
        "remove",
        vec![
            utf8("path", strings(actions.iter().map(|a| get(a).map(|t| t.0)))),
            int64(
                "deletionTimestamp",
                longs(actions.iter().map(|a| get(a).map(|t| t.1))),
            ),
            (
                Field::new("dataChange", DataType::Boolean, true),
                Arc::new(data_change.finish()),
            ),
        ],
        &validity(actions, |a| get(a).is_some()),
    )
}

fn meta_column<'a>(actions: &[Action<'a>]) -> Result<(Field, ArrayRef)> {
    let get = |a: &Action<'a>| match a {
        Action::MetaData(s) => Some(*s),
        _ => None,
    };
    let valid = validity(actions, |a| get(a).is_some());
    let empty = BTreeMap::new();
    let format = struct_column(
        "format",
        vec![
            utf8(
                "provider",
                strings(actions.iter().map(|a| get(a).map(|_| "parquet"))),
            ),
            map_child(
                "options",
                string_maps(actions.iter().map(|a| get(a).map(|_| &empty)))?,
            ),
        ],
        &valid,
    )?;
    let mut partition_columns = ListBuilder::new(StringBuilder::new());
    for a in actions {
        match get(a) {
            Some(s) => {
                for c in &s.partition_columns {
                    partition_columns.values().append_value(c);
                }
                partition_columns.append(true);
            }
            None => partition_columns.append(false),
        }
    }
    let partition_columns = partition_columns.finish();
    struct_column(
        "metaData",
        vec![
            utf8(
                "id",
                strings(actions.iter().map(|a| get(a).and_then(|s| s.id.as_deref()))),
            ),
            utf8("name", strings(actions.iter().map(|_| None))),
            utf8("description", strings(actions.iter().map(|_| None))),
            format,
            utf8(
                "schemaString",
                strings(
                    actions
                        .iter()
                        .map(|a| get(a).and_then(|s| s.schema_string.as_deref())),
                ),
            ),
            (
                Field::new(
                    "partitionColumns",
                    partition_columns.data_type().clone(),
                    true,
                ),
                Arc::new(partition_columns),
            ),
            map_child(
                "configuration",
                string_maps(actions.iter().map(|a| get(a).map(|s| &s.configuration)))?,
            ),
            int64(
                "createdTime",
                longs(actions.iter().map(|a| get(a).and_then(|s| s.created_time))),
            ),
        ],
        &valid,
    )
}

fn protocol_column<'a>(actions: &[Action<'a>]) -> Result<(Field, ArrayRef)> {
    let get = |a: &Action<'_>| match a {
        Action::Protocol(r, w) => Some((*r, *w)),
        _ => None,
    };
    let ints = |f: &dyn Fn((i32, i32)) -> i32| {
        let mut b = Int32Builder::new();
        for a in actions {
            b.append_option(get(a).map(f));
        }
        Arc::new(b.finish()) as ArrayRef
    };
    struct_column(
        "protocol",
        vec![
            (
                Field::new("minReaderVersion", DataType::Int32, true),
                ints(&|p| p.0),
            ),
            (
                Field::new("minWriterVersion", DataType::Int32, true),
                ints(&|p| p.1),
            ),
        ],
        &validity(actions, |a| get(a).is_some()),
    )
}

/// Reads a checkpoint's actions into `state` (which should be empty).
///
/// # Errors
/// A message for a file that is not a checkpoint this reader understands.
pub(crate) fn read(bytes: bytes::Bytes, state: &mut TableState) -> std::result::Result<(), String> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map_err(|e| format!("the checkpoint is not Parquet: {e}"))?;
    for batch in reader {
        let batch = batch.map_err(|e| format!("the checkpoint cannot be read: {e}"))?;
        read_batch(&batch, state)?;
    }
    Ok(())
}

/// A struct column's child by name.
fn child<'a>(s: &'a StructArray, name: &str) -> std::result::Result<&'a ArrayRef, String> {
    s.column_by_name(name)
        .ok_or_else(|| format!("the checkpoint has no field `{name}`"))
}

fn string_at(
    s: &StructArray,
    name: &str,
    row: usize,
) -> std::result::Result<Option<String>, String> {
    let a = child(s, name)?;
    let strings = a.as_string_opt::<i32>().ok_or_else(|| {
        format!(
            "checkpoint field `{name}` is {}, not a string",
            a.data_type()
        )
    })?;
    Ok((!strings.is_null(row)).then(|| strings.value(row).to_owned()))
}

fn long_at(s: &StructArray, name: &str, row: usize) -> std::result::Result<Option<i64>, String> {
    let a = child(s, name)?;
    if let Some(v) = a.as_primitive_opt::<Int64Type>() {
        return Ok((!v.is_null(row)).then(|| v.value(row)));
    }
    if let Some(v) = a.as_primitive_opt::<Int32Type>() {
        return Ok((!v.is_null(row)).then(|| i64::from(v.value(row))));
    }
    Err(format!(
        "checkpoint field `{name}` is {}, not an integer",
        a.data_type()
    ))
}

fn map_at(
    s: &StructArray,
    name: &str,
    row: usize,
) -> std::result::Result<BTreeMap<String, String>, String> {
    let Some(a) = s.column_by_name(name) else {
        return Ok(BTreeMap::new());
    };
    let map = a
        .as_map_opt()
        .ok_or_else(|| format!("checkpoint field `{name}` is {}, not a map", a.data_type()))?;
    if map.is_null(row) {
        return Ok(BTreeMap::new());
    }
    let entries = map.value(row);
    let (Some(keys), Some(values)) = (
        entries.column(0).as_string_opt::<i32>(),
        entries.column(1).as_string_opt::<i32>(),
    ) else {
        return Err(format!("checkpoint map `{name}` is not of strings"));
    };
    Ok((0..entries.len())
        .filter(|i| !values.is_null(*i))
        .map(|i| (keys.value(i).to_owned(), values.value(i).to_owned()))
        .collect())
}

/// The struct column `name` of a checkpoint batch, if it has one.
fn action<'a>(
    batch: &'a RecordBatch,
    name: &str,
) -> std::result::Result<Option<&'a StructArray>, String> {
    batch
        .column_by_name(name)
        .map(|c| {
            c.as_struct_opt()
                .ok_or_else(|| format!("checkpoint column `{name}` is not a struct"))
        })
        .transpose()
}

fn read_batch(batch: &RecordBatch, state: &mut TableState) -> std::result::Result<(), String> {
    let missing = |what: &str| format!("a checkpoint {what} action has no {what} field");
    for row in 0..batch.num_rows() {
        if let Some(p) = action(batch, "protocol")?.filter(|s| !s.is_null(row)) {
            let reader = long_at(p, "minReaderVersion", row)?.unwrap_or(0);
            let writer = long_at(p, "minWriterVersion", row)?.unwrap_or(0);
            if reader > 1 {
                return Err(format!(
                    "the table needs reader version {reader}; this writer knows version 1"
                ));
            }
            state.protocol = (reader as i32, writer as i32);
        }
        if let Some(m) = action(batch, "metaData")?.filter(|s| !s.is_null(row)) {
            state.id = string_at(m, "id", row)?;
            let schema =
                string_at(m, "schemaString", row)?.ok_or_else(|| missing("schemaString"))?;
            state.columns = parse_delta_schema(&schema)?;
            state.schema_string = Some(schema);
            state.configuration = map_at(m, "configuration", row)?;
            state.created_time = long_at(m, "createdTime", row)?;
            let list = child(m, "partitionColumns")?;
            let list = list
                .as_list_opt::<i32>()
                .ok_or("checkpoint field `partitionColumns` is not a list")?;
            state.partition_columns = if list.is_null(row) {
                Vec::new()
            } else {
                let v = list.value(row);
                let names = v
                    .as_string_opt::<i32>()
                    .ok_or("checkpoint `partitionColumns` are not strings")?;
                names.iter().flatten().map(str::to_owned).collect()
            };
        }
        if let Some(t) = action(batch, "txn")?.filter(|s| !s.is_null(row)) {
            let app = string_at(t, "appId", row)?.ok_or_else(|| missing("appId"))?;
            let version = long_at(t, "version", row)?.ok_or_else(|| missing("version"))?;
            state.txns.insert(app, version);
        }
        if let Some(a) = action(batch, "add")?.filter(|s| !s.is_null(row)) {
            let path = string_at(a, "path", row)?.ok_or_else(|| missing("path"))?;
            let file = LiveFile {
                size: long_at(a, "size", row)?.unwrap_or(0).max(0) as u64,
                partition_values: map_at(a, "partitionValues", row)?,
                modification_time: long_at(a, "modificationTime", row)?.unwrap_or(0),
                stats: string_at(a, "stats", row)?,
            };
            state.removed.remove(&path);
            state.files.insert(path, file);
        }
        if let Some(r) = action(batch, "remove")?.filter(|s| !s.is_null(row)) {
            let path = string_at(r, "path", row)?.ok_or_else(|| missing("path"))?;
            let at = long_at(r, "deletionTimestamp", row)?.unwrap_or(0);
            state.files.remove(&path);
            state.removed.insert(path, at);
        }
    }
    Ok(())
}
