//! Documents ↔ points: a JSON document is read through the mapping into a
//! [`Point`], and a stored point is written back as a nested JSON document.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use serde_json::{Map, Number, Value};
use tidemark_segment::{Dim, MetricValue, Point};
use tidemark_tsid::{DimKind, DimValue, MetricNames, Tsid, TsidBuilder, TsidComputer};

use crate::error::{Error, Result};
use crate::mapping::{Dynamic, FieldRole, FieldType, IndexMode, Mapping};
use crate::time::{format_time, parse_time};

/// A document read through the mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedDoc {
    /// The point to store.
    pub point: Point,
    /// Undeclared fields dropped (`"dynamic": "ignore"`).
    pub ignored_fields: u64,
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
        })
    }

    /// The mapping.
    pub fn mapping(&self) -> &Arc<Mapping> {
        &self.mapping
    }

    /// Parses one NDJSON line into a point.
    ///
    /// # Errors
    /// [`Error::Json`] for malformed JSON; the errors of [`parse_value`](Self::parse_value).
    pub fn parse_line(&mut self, line: &str) -> Result<ParsedDoc> {
        let value: Value = serde_json::from_str(line)?;
        self.parse_value(&value)
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
        let mut found: Vec<Option<&Value>> = vec![None; self.mapping.fields().len()];
        let mut ignored = 0u64;
        let mut path = String::new();
        walk(&self.mapping, obj, &mut path, &mut found, &mut ignored)?;
        self.build(&found, ignored)
    }

    /// Reads the fields of a partial document (an `update`'s `doc`): metrics, values and
    /// extras only, as `(field index, value)`.
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
        let mut found: Vec<Option<&Value>> = vec![None; self.mapping.fields().len()];
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
                _ => self.push_value(&mut point, f.path.as_str(), f.ty, f.role, v)?,
            }
        }
        Ok((point, ignored))
    }

    fn build(&mut self, found: &[Option<&Value>], ignored: u64) -> Result<ParsedDoc> {
        let fields = self.mapping.fields();
        let ts_field = self.mapping.timestamp_index();
        let ts_name = self.mapping.timestamp_field();
        let ts_millis = match found.get(ts_field).copied().flatten() {
            Some(v) => json_time(ts_name, v)?,
            None => {
                return Err(Error::doc(
                    ts_name,
                    "missing: every document needs a timestamp",
                ));
            }
        };
        let mut values: Vec<Option<DimValue<'_>>> = Vec::with_capacity(self.dims.len());
        let mut dims = Vec::with_capacity(self.dims.len());
        for &i in &self.dims {
            let (Some(f), Some(v)) = (fields.get(i), found.get(i).copied().flatten()) else {
                values.push(None);
                continue;
            };
            let (dv, dim) = dim_value(&f.path, f.ty, v)?;
            values.push(Some(dv));
            dims.push((f.path.clone(), dim));
        }
        let mut metric_names: Vec<&str> = Vec::new();
        if !self.events {
            for (f, v) in fields.iter().zip(found) {
                if v.is_some() && matches!(f.role, FieldRole::Metric(_)) {
                    metric_names.push(&f.path);
                }
            }
        }
        let tsid = if dims.is_empty() {
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
        drop(values);
        let mut point = Point::new(tsid, ts_millis);
        point.dims = dims;
        for (f, v) in fields.iter().zip(found) {
            let Some(v) = v else { continue };
            if matches!(
                f.role,
                FieldRole::Metric(_) | FieldRole::Value | FieldRole::Extra
            ) {
                self.push_value(&mut point, &f.path, f.ty, f.role, v)?;
            }
        }
        Ok(ParsedDoc {
            point,
            ignored_fields: ignored,
        })
    }

    fn push_value(
        &self,
        point: &mut Point,
        path: &str,
        ty: FieldType,
        role: FieldRole,
        v: &Value,
    ) -> Result<()> {
        if role == FieldRole::Extra {
            return match ty {
                FieldType::Keyword => match v {
                    Value::String(s) => {
                        crate::extras::push_keyword(point, path, s);
                        Ok(())
                    }
                    other => Err(wrong_type(path, "a string (keyword)", other)),
                },
                _ => match v {
                    Value::Bool(b) => {
                        crate::extras::push_flag(point, path, *b);
                        Ok(())
                    }
                    other => Err(wrong_type(path, "a boolean", other)),
                },
            };
        }
        let value = metric_value(path, ty, v)?;
        point.metrics.push((path.to_owned(), value));
        Ok(())
    }
}

/// Visits `obj`, recording each mapped field's value in `found`.
fn walk<'a>(
    mapping: &Mapping,
    obj: &'a Map<String, Value>,
    path: &mut String,
    found: &mut [Option<&'a Value>],
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
                Value::Array(_) => {
                    return Err(Error::doc(
                        path.as_str(),
                        "arrays are not supported: expected one value",
                    ));
                }
                Value::Object(_) => {
                    return Err(Error::doc(
                        path.as_str(),
                        "expected a value, found an object",
                    ));
                }
                v => match found.get_mut(i) {
                    Some(slot @ None) => *slot = Some(v),
                    Some(Some(_)) => {
                        return Err(Error::doc(path.as_str(), "given twice (nested and dotted)"));
                    }
                    None => {}
                },
            }
        } else if let (Value::Object(inner), true) = (value, mapping.is_object(path)) {
            walk(mapping, inner, path, found, ignored)?;
        } else if !value.is_null() {
            match mapping.dynamic() {
                Dynamic::Strict => {
                    return Err(Error::doc(
                        path.as_str(),
                        "not in the mapping, which is \"dynamic\": \"strict\"",
                    ));
                }
                Dynamic::Ignore => *ignored += count_leaves(value),
            }
        }
        path.truncate(len);
    }
    Ok(())
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

fn wrong_type(path: &str, expected: &str, found: &Value) -> Error {
    Error::doc(
        path,
        format!("expected {expected}, found {} ({found})", type_name(found)),
    )
}

fn json_time(path: &str, v: &Value) -> Result<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                    .map(|f| f as i64)
            })
            .ok_or_else(|| Error::doc(path, format!("expected epoch milliseconds, found {n}"))),
        Value::String(s) => parse_time(s).map_err(|e| Error::doc(path, e.to_string())),
        other => Err(wrong_type(
            path,
            "a date (RFC 3339 text or epoch milliseconds)",
            other,
        )),
    }
}

fn dim_value<'v>(path: &str, ty: FieldType, v: &'v Value) -> Result<(DimValue<'v>, Dim)> {
    Ok(match ty {
        FieldType::Keyword => match v {
            Value::String(s) => (DimValue::Keyword(s), Dim::Keyword(s.clone())),
            other => return Err(wrong_type(path, "a string (keyword)", other)),
        },
        FieldType::Long => match v.as_i64() {
            Some(i) => (DimValue::I64(i), Dim::Int(i)),
            None => return Err(wrong_type(path, "an integer (long)", v)),
        },
        FieldType::UnsignedLong => match v.as_u64() {
            Some(u) => (
                DimValue::U64(u),
                i64::try_from(u).map_or(Dim::UInt(u), Dim::Int),
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
            Value::Bool(b) => (DimValue::Bool(*b), Dim::Bool(*b)),
            other => return Err(wrong_type(path, "a boolean", other)),
        },
        FieldType::Ip => match v {
            Value::String(s) => {
                let ip: IpAddr = s.parse().map_err(|_| {
                    Error::doc(path, format!("expected an IP address, found {s:?}"))
                })?;
                let v6 = match ip {
                    IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                    IpAddr::V6(v6) => v6,
                };
                (DimValue::Ip(ip), Dim::Ip(v6))
            }
            other => return Err(wrong_type(path, "an IP address string", other)),
        },
        FieldType::Double | FieldType::Date => {
            return Err(Error::doc(path, "not a valid dimension type"));
        }
    })
}

fn metric_value(path: &str, ty: FieldType, v: &Value) -> Result<MetricValue> {
    Ok(match ty {
        FieldType::Double => match v.as_f64() {
            Some(f) => MetricValue::Gauge(f),
            None => return Err(wrong_type(path, "a number (double)", v)),
        },
        FieldType::Long => match v.as_i64() {
            Some(i) => MetricValue::Counter(i),
            None => return Err(wrong_type(path, "an integer (long)", v)),
        },
        FieldType::UnsignedLong => match v.as_u64() {
            Some(u) => match i64::try_from(u) {
                Ok(i) => MetricValue::Counter(i),
                Err(_) => {
                    return Err(Error::doc(
                        path,
                        format!(
                            "{u} is above the largest storable unsigned_long metric ({})",
                            i64::MAX
                        ),
                    ));
                }
            },
            None => {
                return Err(wrong_type(
                    path,
                    "a non-negative integer (unsigned_long)",
                    v,
                ));
            }
        },
        FieldType::Date => MetricValue::Counter(json_time(path, v)?),
        FieldType::Keyword | FieldType::Boolean | FieldType::Ip => {
            return Err(Error::doc(path, "not a numeric field"));
        }
    })
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

/// Text of a dimension value, as term filters compare it.
pub(crate) fn dim_text(d: &Dim) -> String {
    match d {
        Dim::Keyword(s) => s.clone(),
        Dim::Int(i) => i.to_string(),
        Dim::UInt(u) => u.to_string(),
        Dim::Bool(b) => b.to_string(),
        Dim::Ip(ip) => ip_text(ip),
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
