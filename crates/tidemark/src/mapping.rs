//! Elasticsearch-style mappings: which fields are the timestamp, dimensions, metrics
//! and other values, with their types, and the index settings (mode, fingerprints).

use std::collections::HashMap;

use serde_json::{Map, Value};
use tidemark_tsid::FingerprintMethod;

use crate::error::{Error, Result};

/// The default timestamp field.
pub const DEFAULT_TIMESTAMP_FIELD: &str = "@timestamp";

/// A field's declared type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FieldType {
    /// `date`: RFC 3339 text or epoch milliseconds.
    Date,
    /// `keyword`: a string.
    Keyword,
    /// `long`: a signed 64-bit integer.
    Long,
    /// `unsigned_long`: an unsigned 64-bit integer.
    UnsignedLong,
    /// `double`: a 64-bit float.
    Double,
    /// `boolean`.
    Boolean,
    /// `ip`: an IPv4 or IPv6 address.
    Ip,
}

impl FieldType {
    /// The Elasticsearch type name.
    pub fn name(self) -> &'static str {
        match self {
            FieldType::Date => "date",
            FieldType::Keyword => "keyword",
            FieldType::Long => "long",
            FieldType::UnsignedLong => "unsigned_long",
            FieldType::Double => "double",
            FieldType::Boolean => "boolean",
            FieldType::Ip => "ip",
        }
    }

    fn parse(name: &str) -> Option<FieldType> {
        Some(match name {
            "date" => FieldType::Date,
            "keyword" => FieldType::Keyword,
            "long" | "integer" | "short" | "byte" => FieldType::Long,
            "unsigned_long" => FieldType::UnsignedLong,
            "double" | "float" | "half_float" | "scaled_float" => FieldType::Double,
            "boolean" => FieldType::Boolean,
            "ip" => FieldType::Ip,
            _ => return None,
        })
    }
}

/// `time_series_metric`: how a metric's values behave (aggregations use it only for
/// display; the storage column follows the numeric type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricType {
    /// A value that goes up and down.
    Gauge,
    /// A monotonically increasing value.
    Counter,
}

impl MetricType {
    /// `"gauge"` or `"counter"`.
    pub fn name(self) -> &'static str {
        match self {
            MetricType::Gauge => "gauge",
            MetricType::Counter => "counter",
        }
    }
}

/// What a field is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FieldRole {
    /// The document timestamp.
    Timestamp,
    /// A `time_series_dimension`: part of the series id (`_tsid`), stored once per series.
    Dimension,
    /// A `time_series_metric`: stored in a metric column; its name joins the series identity.
    Metric(MetricType),
    /// A numeric or date field that is neither a dimension nor a metric: stored in a metric
    /// column (`double` as a gauge column, integers and dates as counter columns) but not
    /// part of the series identity.
    Value,
    /// A `keyword` or `boolean` field that is neither a dimension nor a metric: stored per
    /// row in an extra column.
    Extra,
}

/// One mapped field.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The dotted path (`k8s.pod.name`), whether declared nested or dotted.
    pub path: String,
    /// The declared type.
    pub ty: FieldType,
    /// What the field is for.
    pub role: FieldRole,
    /// For dates: written back as epoch milliseconds (`"format": "epoch_millis"`) rather
    /// than RFC 3339 text.
    pub epoch_millis: bool,
}

/// What happens to fields the mapping does not declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dynamic {
    /// They are dropped and counted (the default).
    #[default]
    Ignore,
    /// A document holding one is rejected.
    Strict,
}

/// Event-mode settings: how the engine computes an event's `_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSettings {
    /// The fields whose values make the fingerprint (empty: every stored field).
    pub fields: Vec<String>,
    /// The fingerprint hash.
    pub method: FingerprintMethod,
    /// An optional key (HMAC key, or the seed bytes of MurmurHash3 / SipHash).
    pub key: Option<Vec<u8>>,
}

/// The index mode.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum IndexMode {
    /// One document per (series, timestamp): `_id` = `_tsid` ‖ timestamp.
    #[default]
    TimeSeries,
    /// Many documents may share (stream, timestamp): `_id` = timestamp ‖ fingerprint.
    Events(EventSettings),
}

/// FNV-1a: field paths are short and not attacker-chosen hash-flooding material worth
/// SipHash on the hot path (one lookup per document key).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

type PathMap<V> = HashMap<String, V, std::hash::BuildHasherDefault<Fnv>>;

/// A parsed mapping.
#[derive(Debug, Clone)]
pub struct Mapping {
    fields: Vec<Field>,
    by_path: PathMap<usize>,
    /// Object paths that lead to fields (`k8s`, `k8s.pod`).
    objects: PathMap<()>,
    timestamp: usize,
    dynamic: Dynamic,
    mode: IndexMode,
    source: Value,
    /// The field paths as a tree of name segments, node 0 the root: documents are read
    /// by walking it, one short hash per key segment.
    nodes: Vec<Node>,
    /// Label-keyed (`"mode": "labels"`, see `crate::labels`): every undeclared path is a
    /// keyword dimension, answered by this template.
    label_dim: Option<Field>,
}

/// A node of the path tree: an object (children) or a field.
#[derive(Debug, Clone, Default)]
struct Node {
    /// `(segment, node)`: a short list compared linearly beats hashing the key.
    children: Vec<(Box<str>, usize)>,
    field: Option<usize>,
    path: String,
}

impl Mapping {
    /// Parses a mapping from JSON text.
    ///
    /// # Errors
    /// [`Error::Mapping`] naming the field or section; [`Error::Json`].
    pub fn from_json_str(text: &str) -> Result<Mapping> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| Error::mapping("(mapping file)", format!("not valid JSON: {e}")))?;
        Mapping::from_value(value)
    }

    /// Parses a mapping: `{"mappings": {"dynamic": ..., "properties": {...}},
    /// "settings": {"index": {"mode": ..., ...}}}` (the `index` section may also stand at
    /// the top level).
    ///
    /// # Errors
    /// [`Error::Mapping`] naming the field or section.
    pub fn from_value(source: Value) -> Result<Mapping> {
        let Value::Object(root) = &source else {
            return Err(Error::mapping("(mapping)", "expected a JSON object"));
        };
        for key in root.keys() {
            if !matches!(key.as_str(), "mappings" | "settings" | "index") {
                return Err(Error::mapping(
                    key,
                    "unknown section: expected `mappings`, `settings` or `index`",
                ));
            }
        }
        let mappings = match root.get("mappings") {
            Some(Value::Object(m)) => m,
            Some(_) => return Err(Error::mapping("mappings", "expected an object")),
            None => return Err(Error::mapping("mappings", "missing")),
        };
        let index = match (root.get("settings"), root.get("index")) {
            (_, Some(i)) => Some(i),
            (Some(Value::Object(s)), None) => s.get("index"),
            (Some(_), None) => return Err(Error::mapping("settings", "expected an object")),
            (None, None) => None,
        };
        let index = match index {
            None => Map::new(),
            Some(Value::Object(i)) => i.clone(),
            Some(_) => return Err(Error::mapping("settings.index", "expected an object")),
        };
        let dynamic = match mappings.get("dynamic") {
            None => Dynamic::Ignore,
            Some(Value::String(s)) if s == "strict" => Dynamic::Strict,
            Some(Value::String(s)) if s == "ignore" || s == "false" => Dynamic::Ignore,
            Some(Value::Bool(false)) => Dynamic::Ignore,
            Some(other) => {
                return Err(Error::mapping(
                    "mappings.dynamic",
                    format!(
                        "expected \"strict\" or \"ignore\" (or false), found {other}: new fields are never added to a mapping"
                    ),
                ));
            }
        };
        for key in mappings.keys() {
            if !matches!(key.as_str(), "dynamic" | "properties" | "_source" | "_meta") {
                return Err(Error::mapping(
                    format!("mappings.{key}"),
                    "unknown mapping option",
                ));
            }
        }
        let timestamp_field = match index.get("timestamp_field") {
            None => DEFAULT_TIMESTAMP_FIELD.to_owned(),
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(_) => {
                return Err(Error::mapping(
                    "settings.index.timestamp_field",
                    "expected a field name",
                ));
            }
        };
        let mut fields = Vec::new();
        match mappings.get("properties") {
            Some(Value::Object(props)) => {
                collect(props, "", &timestamp_field, &mut fields)?;
            }
            Some(_) => {
                return Err(Error::mapping("mappings.properties", "expected an object"));
            }
            None => {}
        }
        let mut by_path = PathMap::default();
        for (i, f) in fields.iter().enumerate() {
            if by_path.insert(f.path.clone(), i).is_some() {
                return Err(Error::mapping(
                    &f.path,
                    "declared twice (nested and dotted)",
                ));
            }
        }
        let timestamp = match by_path.get(&timestamp_field) {
            Some(&i) => i,
            None => {
                fields.push(Field {
                    path: timestamp_field.clone(),
                    ty: FieldType::Date,
                    role: FieldRole::Timestamp,
                    epoch_millis: false,
                });
                by_path.insert(timestamp_field.clone(), fields.len() - 1);
                fields.len() - 1
            }
        };
        let mut objects = PathMap::default();
        for f in &fields {
            let mut at = 0;
            while let Some(dot) = f.path.get(at..).and_then(|r| r.find('.')) {
                let prefix = f.path.get(..at + dot).unwrap_or_default();
                objects.insert(prefix.to_owned(), ());
                at += dot + 1;
            }
        }
        for f in &fields {
            if objects.contains_key(&f.path) {
                return Err(Error::mapping(
                    &f.path,
                    "is both a field and an object holding other fields",
                ));
            }
        }
        // A label-keyed index is a time-series index whose dimensions are not declared.
        let labels = index.get("mode").and_then(Value::as_str) == Some(crate::labels::LABELS_MODE);
        let mode = if labels {
            let mut ts = index.clone();
            ts.insert("mode".into(), Value::from("time_series"));
            parse_mode(&ts, &by_path, &fields)?
        } else {
            parse_mode(&index, &by_path, &fields)?
        };
        let label_dim = labels.then(|| Field {
            path: crate::labels::LABEL_FIELD_PATH.to_owned(),
            ty: FieldType::Keyword,
            role: FieldRole::Dimension,
            epoch_millis: false,
        });
        if !labels
            && mode == IndexMode::TimeSeries
            && !fields.iter().any(|f| f.role == FieldRole::Dimension)
        {
            return Err(Error::mapping(
                "mappings.properties",
                "time_series mode needs at least one field with \"time_series_dimension\": true",
            ));
        }
        let mut nodes = vec![Node::default()];
        for (i, f) in fields.iter().enumerate() {
            let mut at = 0;
            for seg in f.path.split('.') {
                let next = nodes.len();
                let Some(node) = nodes.get_mut(at) else { break };
                at = match node.children.iter().find(|(name, _)| &**name == seg) {
                    Some(&(_, child)) => child,
                    None => {
                        node.children.push((seg.into(), next));
                        let path = if node.path.is_empty() {
                            seg.to_owned()
                        } else {
                            format!("{}.{seg}", node.path)
                        };
                        nodes.push(Node {
                            path,
                            ..Node::default()
                        });
                        next
                    }
                };
            }
            if let Some(node) = nodes.get_mut(at) {
                node.field = Some(i);
            }
        }
        Ok(Mapping {
            fields,
            by_path,
            objects,
            timestamp,
            dynamic,
            mode,
            source,
            nodes,
            label_dim,
        })
    }

    /// The fields, in declaration order (the timestamp last if it was implicit).
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// The field at `path`. In a label-keyed index every undeclared path is a keyword
    /// dimension (the returned template's `path` is then
    /// [`LABEL_FIELD_PATH`](crate::LABEL_FIELD_PATH), not `path`).
    pub fn field(&self, path: &str) -> Option<&Field> {
        match self.by_path.get(path) {
            Some(&i) => self.fields.get(i),
            None if path.is_empty() => None,
            None => self.label_dim.as_ref(),
        }
    }

    /// Whether the index is label-keyed (`"mode": "labels"`): no declared dimensions,
    /// every label a keyword dimension (see [`LabelPoints`](crate::LabelPoints)).
    pub fn is_label_keyed(&self) -> bool {
        self.label_dim.is_some()
    }

    /// The index of the field at `path` in [`fields`](Self::fields).
    pub fn field_index(&self, path: &str) -> Option<usize> {
        self.by_path.get(path).copied()
    }

    /// Whether `path` is an object holding mapped fields.
    pub fn is_object(&self, path: &str) -> bool {
        self.objects.contains_key(path)
    }

    /// The timestamp field.
    pub fn timestamp_field(&self) -> &str {
        self.fields
            .get(self.timestamp)
            .map_or(DEFAULT_TIMESTAMP_FIELD, |f| f.path.as_str())
    }

    /// Index of the timestamp field in [`fields`](Self::fields).
    pub fn timestamp_index(&self) -> usize {
        self.timestamp
    }

    /// What happens to undeclared fields.
    pub fn dynamic(&self) -> Dynamic {
        self.dynamic
    }

    /// The index mode.
    pub fn mode(&self) -> &IndexMode {
        &self.mode
    }

    /// The dimension fields, in declaration order.
    pub fn dimensions(&self) -> impl Iterator<Item = &Field> {
        self.fields
            .iter()
            .filter(|f| f.role == FieldRole::Dimension)
    }

    /// The node reached from `node` by the dotted `key` (node 0 is the root).
    pub(crate) fn child(&self, node: usize, key: &str) -> Option<usize> {
        let find = |at: usize, seg: &str| {
            self.nodes
                .get(at)?
                .children
                .iter()
                .find(|(name, _)| {
                    // Length and first byte first: most siblings differ there, and the
                    // full comparison is a call.
                    name.len() == seg.len()
                        && name.as_bytes().first() == seg.as_bytes().first()
                        && &**name == seg
                })
                .map(|&(_, child)| child)
        };
        // Children are single path segments: a key with a dot never names one, so the
        // direct lookup comes first and only a miss looks for dots.
        if let Some(child) = find(node, key) {
            return Some(child);
        }
        if !key.contains('.') {
            return None;
        }
        let mut at = node;
        for seg in key.split('.') {
            at = find(at, seg)?;
        }
        Some(at)
    }

    /// The field at `node`, if it is a field (else it is an object).
    pub(crate) fn node_field(&self, node: usize) -> Option<usize> {
        self.nodes.get(node).and_then(|n| n.field)
    }

    /// The dotted path of `node`.
    pub(crate) fn node_path(&self, node: usize) -> &str {
        self.nodes.get(node).map_or("", |n| n.path.as_str())
    }

    /// The mapping as given.
    pub fn source(&self) -> &Value {
        &self.source
    }
}

fn collect(props: &Map<String, Value>, prefix: &str, ts: &str, out: &mut Vec<Field>) -> Result<()> {
    for (name, def) in props {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        if name.is_empty() || name.split('.').any(str::is_empty) {
            return Err(Error::mapping(&path, "empty name or path segment"));
        }
        let Value::Object(def) = def else {
            return Err(Error::mapping(&path, "expected an object with a `type`"));
        };
        let ty = def.get("type").and_then(Value::as_str);
        if let Some(sub) = def.get("properties") {
            if ty.is_some_and(|t| t != "object") {
                return Err(Error::mapping(
                    &path,
                    "has both `properties` and a non-object `type`",
                ));
            }
            let Value::Object(sub) = sub else {
                return Err(Error::mapping(&path, "`properties` must be an object"));
            };
            collect(sub, &path, ts, out)?;
            continue;
        }
        let ty = match ty {
            Some(t) => FieldType::parse(t).ok_or_else(|| {
                Error::mapping(
                    &path,
                    format!("unsupported type `{t}`: expected date, keyword, long, unsigned_long, double, boolean or ip"),
                )
            })?,
            None => return Err(Error::mapping(&path, "missing `type`")),
        };
        let dimension = match def.get("time_series_dimension") {
            None | Some(Value::Bool(false)) => false,
            Some(Value::Bool(true)) => true,
            Some(_) => {
                return Err(Error::mapping(
                    &path,
                    "`time_series_dimension` must be true or false",
                ));
            }
        };
        let metric = match def.get("time_series_metric") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s == "gauge" => Some(MetricType::Gauge),
            Some(Value::String(s)) if s == "counter" => Some(MetricType::Counter),
            Some(other) => {
                return Err(Error::mapping(
                    &path,
                    format!("`time_series_metric` must be \"gauge\" or \"counter\", found {other}"),
                ));
            }
        };
        let epoch_millis = def
            .get("format")
            .and_then(Value::as_str)
            .is_some_and(|f| f.split("||").next() == Some("epoch_millis"));
        let role = if path == ts {
            if ty != FieldType::Date {
                return Err(Error::mapping(
                    &path,
                    format!(
                        "the timestamp field must be of type date, found {}",
                        ty.name()
                    ),
                ));
            }
            if dimension || metric.is_some() {
                return Err(Error::mapping(
                    &path,
                    "the timestamp field cannot be a dimension or a metric",
                ));
            }
            FieldRole::Timestamp
        } else if dimension {
            if metric.is_some() {
                return Err(Error::mapping(
                    &path,
                    "cannot be both a dimension and a metric",
                ));
            }
            if matches!(ty, FieldType::Double | FieldType::Date) {
                return Err(Error::mapping(
                    &path,
                    format!(
                        "a dimension cannot be of type {}: expected keyword, long, unsigned_long, boolean or ip",
                        ty.name()
                    ),
                ));
            }
            FieldRole::Dimension
        } else if let Some(m) = metric {
            if !matches!(
                ty,
                FieldType::Long | FieldType::UnsignedLong | FieldType::Double
            ) {
                return Err(Error::mapping(
                    &path,
                    format!(
                        "a metric must be long, unsigned_long or double, found {}",
                        ty.name()
                    ),
                ));
            }
            FieldRole::Metric(m)
        } else {
            match ty {
                FieldType::Keyword | FieldType::Boolean => FieldRole::Extra,
                FieldType::Ip => {
                    return Err(Error::mapping(
                        &path,
                        "an ip field must be a dimension (per-row ip values are not stored)",
                    ));
                }
                _ => FieldRole::Value,
            }
        };
        out.push(Field {
            path,
            ty,
            role,
            epoch_millis,
        });
    }
    Ok(())
}

fn parse_mode(
    index: &Map<String, Value>,
    by_path: &PathMap<usize>,
    fields: &[Field],
) -> Result<IndexMode> {
    for key in index.keys() {
        if !matches!(
            key.as_str(),
            "mode"
                | "timestamp_field"
                | "fingerprint"
                | "routing_path"
                | "number_of_shards"
                | "number_of_replicas"
        ) {
            return Err(Error::mapping(
                format!("settings.index.{key}"),
                "unknown setting",
            ));
        }
    }
    match index.get("mode").map(|m| (m, m.as_str())) {
        None | Some((_, Some("time_series"))) => {
            if index.contains_key("fingerprint") {
                return Err(Error::mapping(
                    "settings.index.fingerprint",
                    "only in \"events\" mode",
                ));
            }
            Ok(IndexMode::TimeSeries)
        }
        Some((_, Some("events"))) => {
            let fp = match index.get("fingerprint") {
                None => Map::new(),
                Some(Value::Object(f)) => f.clone(),
                Some(_) => {
                    return Err(Error::mapping(
                        "settings.index.fingerprint",
                        "expected an object",
                    ));
                }
            };
            let method = match fp.get("method") {
                None => FingerprintMethod::Sha256,
                Some(Value::String(name)) => FingerprintMethod::ALL
                    .into_iter()
                    .find(|m| m.name() == name)
                    .ok_or_else(|| {
                        let names: Vec<&str> =
                            FingerprintMethod::ALL.iter().map(|m| m.name()).collect();
                        Error::mapping(
                            "settings.index.fingerprint.method",
                            format!(
                                "unknown method `{name}`: expected one of {}",
                                names.join(", ")
                            ),
                        )
                    })?,
                Some(_) => {
                    return Err(Error::mapping(
                        "settings.index.fingerprint.method",
                        "expected a string",
                    ));
                }
            };
            let mut names = Vec::new();
            match fp.get("fields") {
                None => {}
                Some(Value::Array(list)) => {
                    for v in list {
                        let Some(name) = v.as_str() else {
                            return Err(Error::mapping(
                                "settings.index.fingerprint.fields",
                                "expected field names",
                            ));
                        };
                        let Some(&i) = by_path.get(name) else {
                            return Err(Error::mapping(
                                format!("settings.index.fingerprint.fields: {name}"),
                                "not a mapped field",
                            ));
                        };
                        if fields
                            .get(i)
                            .is_some_and(|f| f.role == FieldRole::Timestamp)
                        {
                            return Err(Error::mapping(
                                format!("settings.index.fingerprint.fields: {name}"),
                                "the timestamp is always part of an event id",
                            ));
                        }
                        names.push(name.to_owned());
                    }
                }
                Some(_) => {
                    return Err(Error::mapping(
                        "settings.index.fingerprint.fields",
                        "expected an array",
                    ));
                }
            }
            let key = match fp.get("key") {
                None => None,
                Some(Value::String(k)) => Some(k.as_bytes().to_vec()),
                Some(_) => {
                    return Err(Error::mapping(
                        "settings.index.fingerprint.key",
                        "expected a string",
                    ));
                }
            };
            if let (Some(k), Some(len)) = (&key, method.key_len())
                && k.len() != len
            {
                return Err(Error::mapping(
                    "settings.index.fingerprint.key",
                    format!(
                        "{} needs a key of {len} bytes, found {}",
                        method.name(),
                        k.len()
                    ),
                ));
            }
            Ok(IndexMode::Events(EventSettings {
                fields: names,
                method,
                key,
            }))
        }
        Some((other, _)) => Err(Error::mapping(
            "settings.index.mode",
            format!("expected \"time_series\" or \"events\", found {other}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_nested_and_dotted_fields() {
        let m = Mapping::from_value(json!({"mappings": {"properties": {
            "host": {"properties": {"name": {"type": "keyword", "time_series_dimension": true}}},
            "host.ip": {"type": "ip", "time_series_dimension": true},
            "cpu": {"type": "double", "time_series_metric": "gauge"},
            "status": {"type": "keyword"}
        }}}))
        .unwrap();
        assert_eq!(m.field("host.name").unwrap().role, FieldRole::Dimension);
        assert_eq!(m.field("host.ip").unwrap().ty, FieldType::Ip);
        assert_eq!(
            m.field("cpu").unwrap().role,
            FieldRole::Metric(MetricType::Gauge)
        );
        assert_eq!(m.field("status").unwrap().role, FieldRole::Extra);
        assert_eq!(m.timestamp_field(), "@timestamp");
        assert!(m.is_object("host"));
    }

    #[test]
    fn rejects_bad_mappings_naming_the_field() {
        let bad = [
            (
                json!({"mappings": {"properties": {"a": {"type": "text", "time_series_dimension": true}}}}),
                "`a`",
            ),
            (
                json!({"mappings": {"properties": {"a": {"type": "keyword", "time_series_dimension": true}, "m": {"type": "keyword", "time_series_metric": "gauge"}}}}),
                "`m`",
            ),
            (
                json!({"mappings": {"properties": {"a": {"type": "double", "time_series_dimension": true}}}}),
                "`a`",
            ),
            (
                json!({"mappings": {"properties": {"a": {"type": "keyword", "time_series_dimension": true}, "m": {"type": "double", "time_series_metric": "rate"}}}}),
                "`m`",
            ),
            (
                json!({"mappings": {"properties": {"a": {"type": "keyword"}}}}),
                "time_series_dimension",
            ),
            (
                json!({"mappings": {"properties": {"a.b": {"type": "keyword", "time_series_dimension": true}, "a": {"properties": {"b": {"type": "long"}}}}}}),
                "`a.b`",
            ),
        ];
        for (mapping, needle) in bad {
            let e = Mapping::from_value(mapping.clone())
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{e} lacks {needle} for {mapping}");
        }
    }
}
