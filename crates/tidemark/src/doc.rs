//! Documents ↔ points: a JSON document is read through the mapping into a
//! [`Point`], and a stored point is written back as a nested JSON document.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use serde_json::{Map, Number, Value};
use tidemark_segment::{Dim, Extra, MetricValue, Point};
use tidemark_tsid::{DimKind, DimValue, MetricNames, Tsid, TsidBuilder, TsidComputer};

use crate::error::{Error, Result};
use crate::mapping::{Dynamic, FieldRole, FieldType, IndexMode, Mapping};
use crate::row::{DimRef, DimsWriter, Row};
use crate::scan::ScanScratch;
use crate::series_memo::SeriesMemo;
use crate::time::{format_time, parse_time};

/// A document read through the mapping: its series, timestamp and values, ready for the
/// index that owns the mapping (see [`PreparedItem::store`](crate::PreparedItem::store)).
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedDoc {
    pub(crate) row: Row,
    /// Undeclared fields dropped (`"dynamic": "ignore"`).
    pub ignored_fields: u64,
}

impl ParsedDoc {
    /// The series id computed from the dimensions (and metric names).
    pub fn tsid(&self) -> Tsid {
        self.row.tsid
    }

    /// The timestamp, in milliseconds since the epoch.
    pub fn ts_millis(&self) -> i64 {
        self.row.ts_millis
    }

    /// The document as a [`Point`]: dimensions, metrics and extras by name.
    ///
    /// # Errors
    /// None for a document this crate parsed ([`Error::Query`] would be a bug).
    pub fn to_point(&self) -> Result<Point> {
        self.row.to_point()
    }
}

/// Reads JSON documents into points through a [`Mapping`]. Holds reusable buffers, so
/// use one per thread (it is `Clone` and `Send`).
#[derive(Debug, Clone)]
pub struct DocParser {
    mapping: Arc<Mapping>,
    tsids: TsidComputer,
    /// Field indices of the dimensions, in declaration order (the tsid computer's order).
    dims: Vec<usize>,
    events: bool,
    /// Scratch for the encoded dimensions of the document being built.
    dims_out: DimsWriter,
    /// The fast scanner's scratch: its check of repeated keys, the last shape read.
    scan: ScanScratch,
    /// The series of recent documents.
    memo: SeriesMemo,
}

impl DocParser {
    /// A parser for `mapping`.
    ///
    /// # Errors
    /// [`Error::Tsid`] if the dimension paths do not make a valid tsid configuration.
    pub fn new(mapping: Arc<Mapping>) -> Result<DocParser> {
        let events = matches!(mapping.mode(), IndexMode::Events(_));
        let mut builder = TsidBuilder::new();
        let mut dims = Vec::new();
        for (i, f) in mapping.fields().iter().enumerate() {
            if f.role == FieldRole::Dimension {
                let kind = if f.ty == FieldType::Ip {
                    DimKind::Ip
                } else {
                    DimKind::Auto
                };
                builder = builder.dimension_of_kind(f.path.clone(), kind);
                dims.push(i);
            }
        }
        // Time series: the names of the metrics a document holds join its series identity,
        // so `{"cpu": 1}` and `{"mem": 2}` sent apart at one instant are two points, not a
        // point and its duplicate. Events: the stream is the dimensions alone.
        let metric_names = if events {
            MetricNames::Off
        } else {
            MetricNames::Listed(Vec::new())
        };
        let tsids = builder.metric_names(metric_names).build()?;
        Ok(DocParser {
            mapping,
            tsids,
            dims,
            events,
            dims_out: DimsWriter::default(),
            scan: ScanScratch::default(),
            memo: SeriesMemo::default(),
        })
    }

    /// The mapping.
    pub fn mapping(&self) -> &Arc<Mapping> {
        &self.mapping
    }

    /// Parses one NDJSON line into a point, streaming: the JSON goes straight into the
    /// mapped fields, without building a `serde_json::Value`.
    ///
    /// # Errors
    /// [`Error::Json`] for malformed JSON; the errors of [`parse_value`](Self::parse_value).
    pub fn parse_line(&mut self, line: &str) -> Result<ParsedDoc> {
        let mut found: Vec<Option<Scalar<'_>>> = vec![None; self.mapping.fields().len()];
        let mut ignored = 0u64;
        if crate::scan::scan_doc(
            &self.mapping,
            line,
            &mut found,
            &mut ignored,
            &mut self.scan,
        )
        .is_some()
        {
            return self.build(&found, ignored);
        }
        // Not a plain document: serde_json decides (the result, or the error).
        found.iter_mut().for_each(|f| *f = None);
        ignored = 0;
        self.parse_line_serde(line, found, ignored)
    }

    /// [`parse_line`](Self::parse_line) through serde_json only.
    pub(crate) fn parse_line_serde<'a>(
        &mut self,
        line: &'a str,
        mut found: Vec<Option<Scalar<'a>>>,
        mut ignored: u64,
    ) -> Result<ParsedDoc> {
        let mut failure: Option<Error> = None;
        let mut de = serde_json::Deserializer::from_str(line);
        let seed = stream::ObjectSeed {
            mapping: &self.mapping,
            node: 0,
            found: &mut found,
            ignored: &mut ignored,
            failure: &mut failure,
            top: true,
        };
        let parsed = serde::de::DeserializeSeed::deserialize(seed, &mut de).and_then(|()| de.end());
        if let Some(e) = failure {
            return Err(e);
        }
        parsed?;
        self.build(&found, ignored)
    }

    /// Reads a document into a point: the `_tsid` from the dimensions (whatever the key
    /// order or the nesting), the timestamp, and typed values.
    ///
    /// # Errors
    /// [`Error::Document`] naming the field: a missing timestamp or dimension, a value of
    /// the wrong type, an undeclared field under `"dynamic": "strict"`, a field given
    /// both nested and dotted, an array.
    pub fn parse_value(&mut self, doc: &Value) -> Result<ParsedDoc> {
        let Value::Object(obj) = doc else {
            return Err(Error::doc(
                "_source",
                format!("expected a JSON object, found {}", type_name(doc)),
            ));
        };
        let mut found: Vec<Option<Scalar<'_>>> = vec![None; self.mapping.fields().len()];
        let mut ignored = 0u64;
        let mut path = String::new();
        walk(&self.mapping, obj, &mut path, &mut found, &mut ignored)?;
        self.build(&found, ignored)
    }

    /// Reads the fields of a partial document (an `update`'s `doc`): metrics, values and
    /// extras only.
    ///
    /// # Errors
    /// As [`parse_value`](Self::parse_value), and for a dimension or the timestamp, which
    /// an update cannot change.
    pub(crate) fn parse_partial(&self, doc: &Value) -> Result<(Point, u64)> {
        let Value::Object(obj) = doc else {
            return Err(Error::doc(
                "doc",
                format!("expected a JSON object, found {}", type_name(doc)),
            ));
        };
        let mut found: Vec<Option<Scalar<'_>>> = vec![None; self.mapping.fields().len()];
        let mut ignored = 0u64;
        let mut path = String::new();
        walk(&self.mapping, obj, &mut path, &mut found, &mut ignored)?;
        let mut point = Point::new(Tsid::from_bytes([0; 20]), 0);
        for (f, v) in self.mapping.fields().iter().zip(&found) {
            let Some(v) = v else { continue };
            match f.role {
                FieldRole::Timestamp | FieldRole::Dimension => {
                    return Err(Error::doc(
                        &f.path,
                        "an update cannot change the timestamp or a dimension (they make the _id)",
                    ));
                }
                _ => push_value(&mut point, f.path.as_str(), f.ty, f.role, v)?,
            }
        }
        Ok((point, ignored))
    }

    fn build(&mut self, found: &[Option<Scalar<'_>>], ignored: u64) -> Result<ParsedDoc> {
        let mapping = Arc::clone(&self.mapping);
        let fields = mapping.fields();
        let ts_field = mapping.timestamp_index();
        let ts_name = mapping.timestamp_field();
        let ts_millis = match found.get(ts_field).and_then(Option::as_ref) {
            Some(v) => scalar_time(ts_name, v)?,
            None => {
                return Err(Error::doc(
                    ts_name,
                    "missing: every document needs a timestamp",
                ));
            }
        };
        // The series: remembered from an earlier document with the same dimension values
        // and metric names, or computed (and remembered).
        self.memo.begin();
        let mut memoisable = true;
        for &i in &self.dims {
            if !self.memo.push_dim(found.get(i).and_then(Option::as_ref)) {
                memoisable = false;
                break;
            }
        }
        let mut n_metrics = 0;
        if !self.events {
            for (i, (f, v)) in fields.iter().zip(found).enumerate() {
                if v.is_some() && matches!(f.role, FieldRole::Metric(_)) {
                    n_metrics += 1;
                    self.memo.push_metric(i as u32);
                }
            }
        }
        let remembered = if memoisable { self.memo.get() } else { None };
        let (tsid, dims) = match remembered {
            Some(series) => series,
            None => {
                let series = self.series_of(found)?;
                if memoisable {
                    self.memo.put(series.0, &series.1);
                }
                series
            }
        };
        let mut row = Row {
            schema: Arc::clone(&mapping),
            tsid,
            ts_millis,
            dims,
            values: Vec::with_capacity(n_metrics),
            extras: Vec::new(),
        };
        for (i, (f, v)) in fields.iter().zip(found).enumerate() {
            let Some(v) = v else { continue };
            if matches!(
                f.role,
                FieldRole::Metric(_) | FieldRole::Value | FieldRole::Extra
            ) {
                push_row_value(&mut row, i as u32, &f.path, f.ty, f.role, v)?;
            }
        }
        Ok(ParsedDoc {
            row,
            ignored_fields: ignored,
        })
    }

    /// A document's tsid and encoded dimensions, computed from its dimension values (and
    /// metric names, for time series).
    fn series_of(&mut self, found: &[Option<Scalar<'_>>]) -> Result<(Tsid, Arc<[u8]>)> {
        let fields = self.mapping.fields();
        let mut values: Vec<Option<DimValue<'_>>> = Vec::with_capacity(self.dims.len());
        self.dims_out.clear();
        let mut any_dim = false;
        for &i in &self.dims {
            let (Some(f), Some(v)) = (fields.get(i), found.get(i).and_then(Option::as_ref)) else {
                values.push(None);
                continue;
            };
            let (dv, dim) = dim_value(&f.path, f.ty, v)?;
            values.push(Some(dv));
            self.dims_out.push(&f.path, dim);
            any_dim = true;
        }
        let mut metric_names: Vec<&str> = Vec::new();
        if !self.events {
            for (f, v) in fields.iter().zip(found) {
                if v.is_some() && matches!(f.role, FieldRole::Metric(_)) {
                    metric_names.push(&f.path);
                }
            }
        }
        let tsid = if !any_dim {
            if self.events {
                Tsid::from_bytes([0; 20])
            } else {
                let names: Vec<&str> = self.mapping.dimensions().map(|f| f.path.as_str()).collect();
                return Err(Error::doc(
                    names.first().copied().unwrap_or("_tsid"),
                    format!(
                        "no dimension present: expected at least one of {}",
                        names.join(", ")
                    ),
                ));
            }
        } else {
            self.tsids
                .tsid_from_values(&values, &metric_names)
                .map_err(|e| Error::doc("_tsid", e.to_string()))?
        };
        Ok((tsid, self.dims_out.finish()))
    }
}

/// Adds field `i`'s value to `row`: a metric value, or an extra.
fn push_row_value(
    row: &mut Row,
    i: u32,
    path: &str,
    ty: FieldType,
    role: FieldRole,
    v: &Scalar<'_>,
) -> Result<()> {
    if role == FieldRole::Extra {
        row.extras.push((i, extra_value(path, ty, v)?));
        return Ok(());
    }
    row.values.push((i, metric_value(path, ty, v)?));
    Ok(())
}

/// An extra field's value: a keyword's string, or a boolean.
fn extra_value(path: &str, ty: FieldType, v: &Scalar<'_>) -> Result<Extra> {
    match (ty, v) {
        (FieldType::Keyword, Scalar::Str(s)) => Ok(Extra::Keyword(s.as_ref().to_owned())),
        (FieldType::Keyword, other) => Err(wrong_type(path, "a string (keyword)", other)),
        (_, Scalar::Bool(b)) => Ok(Extra::Bool(*b)),
        (_, other) => Err(wrong_type(path, "a boolean", other)),
    }
}

fn push_value(
    point: &mut Point,
    path: &str,
    ty: FieldType,
    role: FieldRole,
    v: &Scalar<'_>,
) -> Result<()> {
    if role == FieldRole::Extra {
        point
            .extras
            .push((path.to_owned(), extra_value(path, ty, v)?));
        return Ok(());
    }
    let value = metric_value(path, ty, v)?;
    point.metrics.push((path.to_owned(), value));
    Ok(())
}

/// A JSON leaf value, borrowed from the input where it holds no escapes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar<'a> {
    Str(Cow<'a, str>),
    I64(i64),
    U64(u64),
    F64(f64),
    Bool(bool),
}

impl Scalar<'_> {
    fn of_value(v: &Value) -> Option<Scalar<'_>> {
        Some(match v {
            Value::String(s) => Scalar::Str(Cow::Borrowed(s)),
            Value::Bool(b) => Scalar::Bool(*b),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Scalar::I64(i)
                } else if let Some(u) = n.as_u64() {
                    Scalar::U64(u)
                } else {
                    Scalar::F64(n.as_f64()?)
                }
            }
            _ => return None,
        })
    }

    fn as_i64(&self) -> Option<i64> {
        match self {
            Scalar::I64(i) => Some(*i),
            Scalar::U64(u) => i64::try_from(*u).ok(),
            _ => None,
        }
    }

    fn as_u64(&self) -> Option<u64> {
        match self {
            Scalar::I64(i) => u64::try_from(*i).ok(),
            Scalar::U64(u) => Some(*u),
            _ => None,
        }
    }

    fn as_f64(&self) -> Option<f64> {
        match self {
            Scalar::I64(i) => Some(*i as f64),
            Scalar::U64(u) => Some(*u as f64),
            Scalar::F64(f) => Some(*f),
            _ => None,
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            Scalar::Str(_) => "a string",
            Scalar::I64(_) | Scalar::U64(_) => "an integer",
            Scalar::F64(_) => "a float",
            Scalar::Bool(_) => "a boolean",
        }
    }
}

impl std::fmt::Display for Scalar<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scalar::Str(s) => write!(f, "{:?}", s.as_ref()),
            Scalar::I64(i) => write!(f, "{i}"),
            Scalar::U64(u) => write!(f, "{u}"),
            Scalar::F64(x) => write!(f, "{x}"),
            Scalar::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// Visits `obj`, recording each mapped field's value in `found`.
fn walk<'a>(
    mapping: &Mapping,
    obj: &'a Map<String, Value>,
    path: &mut String,
    found: &mut [Option<Scalar<'a>>],
    ignored: &mut u64,
) -> Result<()> {
    for (key, value) in obj {
        let len = path.len();
        if len > 0 {
            path.push('.');
        }
        path.push_str(key);
        if let Some(i) = mapping.field_index(path) {
            match value {
                Value::Null => {}
                Value::Array(_) => return Err(array_error(path)),
                Value::Object(_) => return Err(object_error(path)),
                v => match found.get_mut(i) {
                    Some(slot @ None) => *slot = Scalar::of_value(v),
                    Some(Some(_)) => return Err(twice_error(path)),
                    None => {}
                },
            }
        } else if let (Value::Object(inner), true) = (value, mapping.is_object(path)) {
            walk(mapping, inner, path, found, ignored)?;
        } else if !value.is_null() {
            match mapping.dynamic() {
                Dynamic::Strict => return Err(strict_error(path)),
                Dynamic::Ignore => *ignored += count_leaves(value),
            }
        }
        path.truncate(len);
    }
    Ok(())
}

fn array_error(path: &str) -> Error {
    Error::doc(path, "arrays are not supported: expected one value")
}

fn object_error(path: &str) -> Error {
    Error::doc(path, "expected a value, found an object")
}

fn twice_error(path: &str) -> Error {
    Error::doc(path, "given twice (nested and dotted)")
}

/// Why a document with a key given twice in one object is refused, as Elasticsearch
/// refuses it: a `serde_json::Value` would keep the last and the streaming parser
/// could merge both, so the same text could give two series ids.
fn repeated_key_message(key: &str) -> String {
    format!("the key `{key}` is given twice in one object (JSON keys must be unique)")
}

fn repeated_key_error(path: &str) -> Error {
    Error::doc(path, "given twice in one object (JSON keys must be unique)")
}

/// Parses `text` as JSON into a `Value`, refusing a key given twice in any object
/// (`serde_json::from_str` keeps the last silently), so that a document read whole
/// and one streamed by [`DocParser::parse_line`] are refused alike.
///
/// # Errors
/// Malformed JSON, trailing characters, or a repeated key.
pub(crate) fn strict_value(text: &str) -> serde_json::Result<Value> {
    let mut de = serde_json::Deserializer::from_str(text);
    let v = serde::de::DeserializeSeed::deserialize(strict::StrictValue, &mut de)?;
    de.end()?;
    Ok(v)
}

mod strict {
    use std::fmt;

    use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Value};

    use super::repeated_key_message;

    /// A `serde_json::Value` whose objects have unique keys.
    pub(super) struct StrictValue;

    impl<'de> DeserializeSeed<'de> for StrictValue {
        type Value = Value;

        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for StrictValue {
        type Value = Value;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }

        fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }

        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
            Ok(Value::Bool(v))
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
            Ok(Value::from(v))
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
            Ok(Value::from(v))
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
            Ok(Value::from(v))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
            Ok(Value::String(v.to_owned()))
        }

        fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
            Ok(Value::String(v))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
            let mut out = Vec::new();
            while let Some(v) = seq.next_element_seed(StrictValue)? {
                out.push(v);
            }
            Ok(Value::Array(out))
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
            let mut out = Map::new();
            while let Some(key) = map.next_key::<String>()? {
                if out.contains_key(&key) {
                    return Err(de::Error::custom(repeated_key_message(&key)));
                }
                let v = map.next_value_seed(StrictValue)?;
                out.insert(key, v);
            }
            Ok(Value::Object(out))
        }
    }
}

fn strict_error(path: &str) -> Error {
    Error::doc(path, "not in the mapping, which is \"dynamic\": \"strict\"")
}

fn count_leaves(v: &Value) -> u64 {
    match v {
        Value::Object(m) => m.values().map(count_leaves).sum(),
        Value::Null => 0,
        _ => 1,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a float",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn wrong_type(path: &str, expected: &str, found: &Scalar<'_>) -> Error {
    Error::doc(
        path,
        format!("expected {expected}, found {} ({found})", found.type_name()),
    )
}

fn scalar_time(path: &str, v: &Scalar<'_>) -> Result<i64> {
    match v {
        Scalar::I64(i) => Ok(*i),
        Scalar::F64(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(*f as i64),
        Scalar::Str(s) => parse_time(s).map_err(|e| Error::doc(path, e.to_string())),
        other => Err(wrong_type(
            path,
            "a date (RFC 3339 text or epoch milliseconds)",
            other,
        )),
    }
}

fn dim_value<'v>(
    path: &str,
    ty: FieldType,
    v: &'v Scalar<'_>,
) -> Result<(DimValue<'v>, DimRef<'v>)> {
    Ok(match ty {
        FieldType::Keyword => match v {
            Scalar::Str(s) => (DimValue::Keyword(s), DimRef::Keyword(s)),
            other => return Err(wrong_type(path, "a string (keyword)", other)),
        },
        FieldType::Long => match v.as_i64() {
            Some(i) => (DimValue::I64(i), DimRef::Int(i)),
            None => return Err(wrong_type(path, "an integer (long)", v)),
        },
        FieldType::UnsignedLong => match v.as_u64() {
            Some(u) => (
                DimValue::U64(u),
                i64::try_from(u).map_or(DimRef::UInt(u), DimRef::Int),
            ),
            None => {
                return Err(wrong_type(
                    path,
                    "a non-negative integer (unsigned_long)",
                    v,
                ));
            }
        },
        FieldType::Boolean => match v {
            Scalar::Bool(b) => (DimValue::Bool(*b), DimRef::Bool(*b)),
            other => return Err(wrong_type(path, "a boolean", other)),
        },
        FieldType::Ip => match v {
            Scalar::Str(s) => {
                let ip: IpAddr = s.parse().map_err(|_| {
                    Error::doc(
                        path,
                        format!("expected an IP address, found {:?}", s.as_ref()),
                    )
                })?;
                let v6 = match ip {
                    IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                    IpAddr::V6(v6) => v6,
                };
                (DimValue::Ip(ip), DimRef::Ip(v6))
            }
            other => return Err(wrong_type(path, "an IP address string", other)),
        },
        FieldType::Double | FieldType::Date => {
            return Err(Error::doc(path, "not a valid dimension type"));
        }
    })
}

fn metric_value(path: &str, ty: FieldType, v: &Scalar<'_>) -> Result<MetricValue> {
    Ok(match ty {
        FieldType::Double => match v.as_f64() {
            Some(f) => MetricValue::Gauge(f),
            None => return Err(wrong_type(path, "a number (double)", v)),
        },
        FieldType::Long => match v.as_i64() {
            Some(i) => MetricValue::Counter(i),
            None => return Err(wrong_type(path, "an integer (long)", v)),
        },
        FieldType::UnsignedLong => match v {
            Scalar::U64(u) if *u > i64::MAX as u64 => {
                return Err(Error::doc(
                    path,
                    format!(
                        "{u} is above the largest storable unsigned_long metric ({})",
                        i64::MAX
                    ),
                ));
            }
            _ => match v.as_u64() {
                Some(u) => MetricValue::Counter(u as i64),
                None => {
                    return Err(wrong_type(
                        path,
                        "a non-negative integer (unsigned_long)",
                        v,
                    ));
                }
            },
        },
        FieldType::Date => MetricValue::Counter(scalar_time(path, v)?),
        FieldType::Keyword | FieldType::Boolean | FieldType::Ip => {
            return Err(Error::doc(path, "not a numeric field"));
        }
    })
}

/// Streaming deserialisation of a document straight into the mapped fields.
mod stream {
    use std::borrow::Cow;
    use std::collections::HashSet;
    use std::fmt;

    use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

    use super::{
        Scalar, array_error, object_error, repeated_key_error, repeated_key_message, strict_error,
        twice_error,
    };
    use crate::error::Error;
    use crate::mapping::{Dynamic, Mapping};

    /// Records `e` (the first one) and returns a serde error to unwind with.
    fn fail<E: de::Error>(failure: &mut Option<Error>, e: Error) -> E {
        let msg = e.to_string();
        failure.get_or_insert(e);
        E::custom(msg)
    }

    /// An object at `path` (empty: the document).
    pub(super) struct ObjectSeed<'s, 'de> {
        pub(super) mapping: &'s Mapping,
        pub(super) node: usize,
        pub(super) found: &'s mut Vec<Option<Scalar<'de>>>,
        pub(super) ignored: &'s mut u64,
        pub(super) failure: &'s mut Option<Error>,
        pub(super) top: bool,
    }

    impl<'de> DeserializeSeed<'de> for ObjectSeed<'_, 'de> {
        type Value = ();

        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for ObjectSeed<'_, 'de> {
        type Value = ();

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = HashSet::new();
            while let Some(key) = map.next_key_seed(KeySeed)? {
                if !seen.insert(key.clone()) {
                    let path = match self.mapping.node_path(self.node) {
                        "" => key.into_owned(),
                        p => format!("{p}.{key}"),
                    };
                    return Err(fail(self.failure, repeated_key_error(&path)));
                }
                let Some(node) = self.mapping.child(self.node, &key) else {
                    let leaves = map.next_value_seed(LeafCount)?;
                    if leaves > 0 {
                        match self.mapping.dynamic() {
                            Dynamic::Strict => {
                                let path = match self.mapping.node_path(self.node) {
                                    "" => key.into_owned(),
                                    p => format!("{p}.{key}"),
                                };
                                return Err(fail(self.failure, strict_error(&path)));
                            }
                            Dynamic::Ignore => *self.ignored += leaves,
                        }
                    }
                    continue;
                };
                if let Some(i) = self.mapping.node_field(node) {
                    let path = || self.mapping.node_path(node);
                    match map.next_value_seed(ScalarSeed)? {
                        Leaf::Null => {}
                        Leaf::Array => return Err(fail(self.failure, array_error(path()))),
                        Leaf::Object => return Err(fail(self.failure, object_error(path()))),
                        Leaf::Value(s) => match self.found.get_mut(i) {
                            Some(slot @ None) => *slot = Some(s),
                            Some(Some(_)) => return Err(fail(self.failure, twice_error(path()))),
                            None => {}
                        },
                    }
                } else {
                    map.next_value_seed(ObjectSeed {
                        mapping: self.mapping,
                        node,
                        found: &mut *self.found,
                        ignored: &mut *self.ignored,
                        failure: &mut *self.failure,
                        top: false,
                    })?;
                }
            }
            Ok(())
        }

        // A mapped object path holding a scalar is an undeclared field there.
        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            self.other(0, "null")
        }

        fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
            self.other(1, "a boolean")
        }

        fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
            self.other(1, "an integer")
        }

        fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
            self.other(1, "an integer")
        }

        fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
            self.other(1, "a float")
        }

        fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
            self.other(1, "a string")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            self.other(1, "an array")
        }
    }

    impl ObjectSeed<'_, '_> {
        fn other<E: de::Error>(self, leaves: u64, found: &str) -> Result<(), E> {
            if self.top {
                return Err(fail(
                    self.failure,
                    Error::doc("_source", format!("expected a JSON object, found {found}")),
                ));
            }
            if leaves == 0 {
                return Ok(());
            }
            match self.mapping.dynamic() {
                Dynamic::Strict => Err(fail(
                    self.failure,
                    strict_error(self.mapping.node_path(self.node)),
                )),
                Dynamic::Ignore => {
                    *self.ignored += leaves;
                    Ok(())
                }
            }
        }
    }

    /// A key, borrowed where it holds no escapes.
    struct KeySeed;

    impl<'de> DeserializeSeed<'de> for KeySeed {
        type Value = Cow<'de, str>;

        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(self)
        }
    }

    impl<'de> Visitor<'de> for KeySeed {
        type Value = Cow<'de, str>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }

        fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Cow::Borrowed(v))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Cow::Owned(v.to_owned()))
        }
    }

    /// What a mapped field holds.
    enum Leaf<'de> {
        Null,
        Array,
        Object,
        Value(Scalar<'de>),
    }

    struct ScalarSeed;

    impl<'de> DeserializeSeed<'de> for ScalarSeed {
        type Value = Leaf<'de>;

        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for ScalarSeed {
        type Value = Leaf<'de>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Leaf::Null)
        }

        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Ok(Leaf::Value(Scalar::Bool(v)))
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Leaf::Value(Scalar::I64(v)))
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Leaf::Value(match i64::try_from(v) {
                Ok(i) => Scalar::I64(i),
                Err(_) => Scalar::U64(v),
            }))
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok(Leaf::Value(Scalar::F64(v)))
        }

        fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Leaf::Value(Scalar::Str(Cow::Borrowed(v))))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Leaf::Value(Scalar::Str(Cow::Owned(v.to_owned()))))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Leaf::Array)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(Leaf::Object)
        }
    }

    /// Skips a value, counting its leaves (non-null scalars and arrays).
    struct LeafCount;

    impl<'de> DeserializeSeed<'de> for LeafCount {
        type Value = u64;

        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for LeafCount {
        type Value = u64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }

        fn visit_unit<E: de::Error>(self) -> Result<u64, E> {
            Ok(0)
        }

        fn visit_bool<E: de::Error>(self, _: bool) -> Result<u64, E> {
            Ok(1)
        }

        fn visit_i64<E: de::Error>(self, _: i64) -> Result<u64, E> {
            Ok(1)
        }

        fn visit_u64<E: de::Error>(self, _: u64) -> Result<u64, E> {
            Ok(1)
        }

        fn visit_f64<E: de::Error>(self, _: f64) -> Result<u64, E> {
            Ok(1)
        }

        fn visit_str<E: de::Error>(self, _: &str) -> Result<u64, E> {
            Ok(1)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
            // An array is one leaf; its objects are still checked for repeated keys.
            while seq.next_element_seed(LeafCount)?.is_some() {}
            Ok(1)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
            let mut n = 0;
            let mut seen = HashSet::new();
            while let Some(key) = map.next_key_seed(KeySeed)? {
                if !seen.insert(key.clone()) {
                    return Err(de::Error::custom(repeated_key_message(&key)));
                }
                n += map.next_value_seed(LeafCount)?;
            }
            Ok(n)
        }
    }
}

/// Renders a dimension value as JSON.
pub(crate) fn dim_json(d: &Dim) -> Value {
    match d {
        Dim::Keyword(s) => Value::String(s.clone()),
        Dim::Int(i) => Value::from(*i),
        Dim::UInt(u) => Value::from(*u),
        Dim::Bool(b) => Value::Bool(*b),
        Dim::Ip(ip) => Value::String(ip_text(ip)),
    }
}

pub(crate) fn ip_text(ip: &Ipv6Addr) -> String {
    match ip.to_ipv4_mapped() {
        Some(v4) => v4.to_string(),
        None => ip.to_string(),
    }
}

fn metric_json(ty: Option<(FieldType, bool)>, v: &MetricValue) -> Value {
    match (ty, v) {
        (_, MetricValue::Gauge(f)) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
        (Some((FieldType::UnsignedLong, _)), MetricValue::Counter(i)) => Value::from(*i as u64),
        (Some((FieldType::Date, false)), MetricValue::Counter(i)) => Value::String(format_time(*i)),
        (_, MetricValue::Counter(i)) => Value::from(*i),
    }
}

/// Writes `value` at dotted `path` in `root`, creating objects on the way.
pub(crate) fn insert_path(root: &mut Map<String, Value>, path: &str, value: Value) {
    let mut node = root;
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            node.insert(part.to_owned(), value);
            return;
        }
        let entry = node
            .entry(part.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        let Value::Object(next) = entry else { return };
        node = next;
    }
}

/// The JSON document of a stored point: `_id`, `_tsid`, the timestamp and every stored
/// field, nested by its dotted path.
pub fn point_to_doc(mapping: &Mapping, point: &Point, id: &str) -> Value {
    let mut root = Map::new();
    root.insert("_id".to_owned(), Value::String(id.to_owned()));
    root.insert("_tsid".to_owned(), Value::String(point.tsid.to_string()));
    let ts_field = mapping.field(mapping.timestamp_field());
    let ts = if ts_field.is_some_and(|f| f.epoch_millis) {
        Value::from(point.ts_millis)
    } else {
        Value::String(format_time(point.ts_millis))
    };
    insert_path(&mut root, mapping.timestamp_field(), ts);
    for (name, d) in &point.dims {
        insert_path(&mut root, name, dim_json(d));
    }
    for (name, v) in &point.metrics {
        let ty = mapping.field(name).map(|f| (f.ty, f.epoch_millis));
        insert_path(&mut root, name, metric_json(ty, v));
    }
    crate::extras::insert_extras(&mut root, point);
    Value::Object(root)
}
