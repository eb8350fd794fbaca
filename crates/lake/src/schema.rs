//! The lake's table schema: which columns a file holds, their Arrow, Parquet and Delta
//! types, and how the index's dimensions, metrics and extra fields map onto them.
//!
//! Columns, in this order: the timestamp (`@timestamp`, INT64 milliseconds, UTC),
//! the dimensions by name, the metric columns by name, the extra (keyword, boolean)
//! columns by name, then `_tsid`, `_id`, `shard` and `partition`. `shard` (the series'
//! virtual shard) is in the files, which hold their rows ordered by it, so that its
//! row group statistics let a reader of some shards skip the rest; `partition` is the
//! table's Delta partition column: its value is in each file's path
//! (`partition=<start_ms>/`) and its `add` action's `partitionValues`, not in the
//! Parquet files, as Delta writers do. A table's schema only grows: a
//! column of the table that an export does not hold is written as nulls, and a new
//! column is added to the table by the commit that brings it (Delta schema evolution
//! by a `metaData` action; older files read it as null).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, TimeUnit};
use tidemark::segment::{Dim, ExtraKind, MetricKind, Segment};

use crate::error::{Error, Result};

/// The `_tsid` column: the series id bytes (`BYTE_ARRAY`).
pub const TSID_COLUMN: &str = "_tsid";
/// The `_id` column: the synthetic id bytes, `_tsid` ‖ big-endian timestamp with the
/// sign bit flipped (`BYTE_ARRAY`, `DELTA_BYTE_ARRAY` encoding, a split-block bloom
/// filter per row group).
pub const ID_COLUMN: &str = "_id";
/// The `shard` column: the series' virtual shard (see [`shard_of`](crate::shard_of)), an
/// INT32 column of the files (rows are ordered by it, so its row group statistics are
/// tight).
pub const SHARD_COLUMN: &str = "shard";
/// The `partition` column: the first millisecond (UTC) of the row's time partition, a
/// Delta partition column.
pub const PARTITION_COLUMN: &str = "partition";
/// The table's Delta partition columns, in path order: `partition=<start_ms>/`.
pub const PARTITION_COLUMNS: [&str; 1] = [PARTITION_COLUMN];

/// The type of a lake column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// INT64 milliseconds since the epoch, UTC (Arrow `Timestamp(ms, "UTC")`, Delta
    /// `timestamp`).
    TimestampMillis,
    /// A dictionary-encoded UTF-8 string (Delta `string`).
    Text,
    /// A signed 64-bit integer (Delta `long`).
    Long,
    /// A 64-bit float (Delta `double`).
    Double,
    /// A boolean (Delta `boolean`).
    Boolean,
    /// Bytes (Delta `binary`).
    Binary,
    /// A signed 32-bit integer (Delta `integer`).
    Int,
}

impl ColumnType {
    /// The Delta Lake primitive type name.
    pub fn delta_name(self) -> &'static str {
        match self {
            ColumnType::TimestampMillis => "timestamp",
            ColumnType::Text => "string",
            ColumnType::Long => "long",
            ColumnType::Double => "double",
            ColumnType::Boolean => "boolean",
            ColumnType::Binary => "binary",
            ColumnType::Int => "integer",
        }
    }

    /// The type of a Delta primitive type name, if this writer knows it.
    pub fn from_delta_name(name: &str) -> Option<ColumnType> {
        Some(match name {
            "timestamp" => ColumnType::TimestampMillis,
            "string" => ColumnType::Text,
            "long" => ColumnType::Long,
            "double" => ColumnType::Double,
            "boolean" => ColumnType::Boolean,
            "binary" => ColumnType::Binary,
            "integer" => ColumnType::Int,
            _ => return None,
        })
    }

    /// The Arrow type the writer builds.
    pub fn arrow(self) -> DataType {
        match self {
            ColumnType::TimestampMillis => {
                DataType::Timestamp(TimeUnit::Millisecond, Some(Arc::from("UTC")))
            }
            ColumnType::Text => {
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
            }
            ColumnType::Long => DataType::Int64,
            ColumnType::Double => DataType::Float64,
            ColumnType::Boolean => DataType::Boolean,
            ColumnType::Binary => DataType::Binary,
            ColumnType::Int => DataType::Int32,
        }
    }
}

/// Where a column's values come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// The row's timestamp.
    Timestamp,
    /// A dimension of the row's series.
    Dimension,
    /// A metric column of the index.
    Metric,
    /// An extra (keyword or boolean) field of the row.
    Extra,
    /// The series id.
    Tsid,
    /// The synthetic id.
    Id,
    /// The series' virtual shard.
    Shard,
    /// The time partition's start (a partition column: in the path, not the file).
    Partition,
    /// A column of the table that the exported partitions do not hold: nulls.
    Absent,
}

/// One column of the lake's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// The name (the mapping's field path for mapped fields).
    pub name: String,
    /// Its type.
    pub ty: ColumnType,
    /// Where its values come from.
    pub role: Role,
}

impl Column {
    /// Whether every row has a value: the timestamp, `_tsid`, `_id`, `partition` and
    /// `shard` do.
    pub fn required(&self) -> bool {
        matches!(
            self.role,
            Role::Timestamp | Role::Tsid | Role::Id | Role::Shard | Role::Partition
        )
    }

    /// Whether this is a Delta partition column (its value is in the file's path and
    /// `partitionValues`, not in the file).
    pub fn is_partition_column(&self) -> bool {
        matches!(self.role, Role::Partition)
    }
}

/// The columns of the files an export writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LakeSchema {
    columns: Vec<Column>,
}

/// Kinds of dimension values seen under one name.
#[derive(Debug, Default, Clone, Copy)]
struct DimKinds {
    int: bool,
    boolean: bool,
    other: bool,
}

impl LakeSchema {
    /// The schema of the rows of `segments` (the sealed partitions to export), whose
    /// timestamps are named `timestamp`: a dimension whose values are all signed
    /// integers is a `Long` column, all booleans a `Boolean` column, anything else
    /// (keywords, IPs, unsigned values past `i64::MAX`, mixed kinds) `Text` in the form
    /// the index's filters compare (`dim_value_text`); gauges are `Double`, counters
    /// `Long`, keyword extras `Text`, boolean extras `Boolean`.
    ///
    /// # Errors
    /// [`Error::ColumnConflict`] when one name is two things (a metric and a dimension,
    /// a gauge in one partition and a counter in another, a reserved name).
    pub fn from_segments<'a>(
        timestamp: &str,
        segments: impl IntoIterator<Item = &'a Segment>,
    ) -> Result<LakeSchema> {
        let mut dims: BTreeMap<String, DimKinds> = BTreeMap::new();
        let mut metrics: BTreeMap<String, ColumnType> = BTreeMap::new();
        let mut extras: BTreeMap<String, ColumnType> = BTreeMap::new();
        for seg in segments {
            for s in seg.series() {
                for (name, d) in s.dims.iter() {
                    let k = dims.entry(name.clone()).or_default();
                    match d {
                        Dim::Int(_) => k.int = true,
                        Dim::Bool(_) => k.boolean = true,
                        Dim::Keyword(_) | Dim::UInt(_) | Dim::Ip(_) => k.other = true,
                    }
                }
            }
            for c in seg.columns() {
                let ty = match c.kind {
                    MetricKind::Gauge => ColumnType::Double,
                    MetricKind::Counter => ColumnType::Long,
                };
                same_type(&mut metrics, &c.name, ty)?;
            }
            for e in seg.extra_columns() {
                let ty = match e.kind {
                    ExtraKind::Keyword => ColumnType::Text,
                    ExtraKind::Bool => ColumnType::Boolean,
                };
                same_type(&mut extras, &e.name, ty)?;
            }
        }
        let mut columns = vec![Column {
            name: timestamp.to_owned(),
            ty: ColumnType::TimestampMillis,
            role: Role::Timestamp,
        }];
        for (name, k) in dims {
            let ty = match (k.int, k.boolean, k.other) {
                (true, false, false) => ColumnType::Long,
                (false, true, false) => ColumnType::Boolean,
                _ => ColumnType::Text,
            };
            columns.push(Column {
                name,
                ty,
                role: Role::Dimension,
            });
        }
        for (name, ty) in metrics {
            columns.push(Column {
                name,
                ty,
                role: Role::Metric,
            });
        }
        for (name, ty) in extras {
            columns.push(Column {
                name,
                ty,
                role: Role::Extra,
            });
        }
        for (name, ty, role) in [
            (TSID_COLUMN, ColumnType::Binary, Role::Tsid),
            (ID_COLUMN, ColumnType::Binary, Role::Id),
            (SHARD_COLUMN, ColumnType::Int, Role::Shard),
            (PARTITION_COLUMN, ColumnType::Long, Role::Partition),
        ] {
            columns.push(Column {
                name: name.to_owned(),
                ty,
                role,
            });
        }
        let schema = LakeSchema { columns };
        schema.check_unique()?;
        Ok(schema)
    }

    /// This schema widened by a table's existing columns (`(name, type)`): a table
    /// column these rows lack is kept, as nulls ([`Role::Absent`]), so the table's
    /// schema never shrinks.
    ///
    /// # Errors
    /// [`Error::ColumnConflict`] when a column has another type in the table.
    pub fn with_table_columns(mut self, table: &[(String, ColumnType)]) -> Result<LakeSchema> {
        for (name, ty) in table {
            match self.columns.iter().find(|c| &c.name == name) {
                Some(c) if c.ty == *ty => {}
                Some(c) => {
                    return Err(Error::ColumnConflict {
                        name: name.clone(),
                        expected: format!("{} (the lake table's type)", ty.delta_name()),
                        found: c.ty.delta_name().to_owned(),
                    });
                }
                None => self.columns.push(Column {
                    name: name.clone(),
                    ty: *ty,
                    role: Role::Absent,
                }),
            }
        }
        Ok(self)
    }

    /// This schema without the column `name` (e.g. `_id`, to measure what it costs).
    pub fn without(mut self, name: &str) -> LakeSchema {
        self.columns.retain(|c| c.name != name);
        self
    }

    /// The table's columns, the partition columns included.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// The columns a data file holds, in file order: every column but the partition
    /// columns.
    pub fn file_schema(&self) -> LakeSchema {
        LakeSchema {
            columns: self
                .columns
                .iter()
                .filter(|c| !c.is_partition_column())
                .cloned()
                .collect(),
        }
    }

    /// The Arrow schema of these columns (every column nullable except the timestamp,
    /// `_tsid`, `_id` and the partition columns).
    pub fn arrow_schema(&self) -> Arc<Schema> {
        let fields: Vec<Field> = self
            .columns
            .iter()
            .map(|c| {
                let required = c.required();
                Field::new(&c.name, c.ty.arrow(), !required)
            })
            .collect();
        Arc::new(Schema::new(fields))
    }

    /// The Delta `schemaString`: a JSON struct type of the columns.
    pub fn delta_schema_string(&self) -> String {
        let fields: Vec<serde_json::Value> = self
            .columns
            .iter()
            .map(|c| {
                let required = c.required();
                serde_json::json!({
                    "name": c.name,
                    "type": c.ty.delta_name(),
                    "nullable": !required,
                    "metadata": {},
                })
            })
            .collect();
        serde_json::json!({"type": "struct", "fields": fields}).to_string()
    }

    fn check_unique(&self) -> Result<()> {
        let mut seen: BTreeMap<&str, &Column> = BTreeMap::new();
        for c in &self.columns {
            if let Some(first) = seen.insert(&c.name, c) {
                return Err(Error::ColumnConflict {
                    name: c.name.clone(),
                    expected: format!("one column ({:?})", first.role).to_lowercase(),
                    found: format!("also a {:?} column", c.role).to_lowercase(),
                });
            }
        }
        Ok(())
    }
}

/// Records `name` as `ty`, or fails if it was recorded as another type.
fn same_type(map: &mut BTreeMap<String, ColumnType>, name: &str, ty: ColumnType) -> Result<()> {
    match map.get(name) {
        Some(t) if *t != ty => Err(Error::ColumnConflict {
            name: name.to_owned(),
            expected: t.delta_name().to_owned(),
            found: ty.delta_name().to_owned(),
        }),
        Some(_) => Ok(()),
        None => {
            map.insert(name.to_owned(), ty);
            Ok(())
        }
    }
}

/// Parses a Delta `schemaString` into `(name, type)` pairs.
///
/// # Errors
/// A message for a schema this writer did not write (nested or unknown types).
pub(crate) fn parse_delta_schema(
    text: &str,
) -> std::result::Result<Vec<(String, ColumnType)>, String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("schemaString is not JSON: {e}"))?;
    let fields = v
        .get("fields")
        .and_then(|f| f.as_array())
        .ok_or("schemaString has no fields")?;
    fields
        .iter()
        .map(|f| {
            let name = f
                .get("name")
                .and_then(|n| n.as_str())
                .ok_or("a field has no name")?;
            let ty = f
                .get("type")
                .and_then(|t| t.as_str())
                .and_then(ColumnType::from_delta_name)
                .ok_or_else(|| format!("field `{name}` has a type this writer does not write"))?;
            Ok((name.to_owned(), ty))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_column_is_kept_as_nulls_and_a_type_change_is_refused() {
        let base = LakeSchema::from_segments("@timestamp", []).unwrap();
        let names: Vec<&str> = base.columns().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["@timestamp", "_tsid", "_id", "shard", "partition"]);
        let file: Vec<String> = base
            .file_schema()
            .columns()
            .iter()
            .map(|c| c.name.clone())
            .collect();
        assert_eq!(file, ["@timestamp", "_tsid", "_id", "shard"]);
        let wide = base
            .clone()
            .with_table_columns(&[("host".to_owned(), ColumnType::Text)])
            .unwrap();
        let host = wide.columns().iter().find(|c| c.name == "host").unwrap();
        assert_eq!((host.ty, &host.role), (ColumnType::Text, &Role::Absent));
        let e = base
            .with_table_columns(&[("_id".to_owned(), ColumnType::Long)])
            .unwrap_err();
        assert!(e.to_string().contains("column `_id`"), "{e}");
    }

    #[test]
    fn the_delta_schema_string_reads_back() {
        let s = LakeSchema::from_segments("ts", [])
            .unwrap()
            .with_table_columns(&[
                ("cpu".to_owned(), ColumnType::Double),
                ("up".to_owned(), ColumnType::Boolean),
            ])
            .unwrap();
        let back = parse_delta_schema(&s.delta_schema_string()).unwrap();
        let expected: Vec<(String, ColumnType)> =
            s.columns().iter().map(|c| (c.name.clone(), c.ty)).collect();
        assert_eq!(back, expected);
        assert!(parse_delta_schema(r#"{"fields":[{"name":"m","type":{"type":"map"}}]}"#).is_err());
    }
}
