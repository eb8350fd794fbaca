//! OTLP/HTTP metrics: the protobuf messages of `opentelemetry.proto.collector.metrics.v1`
//! and `opentelemetry.proto.metrics.v1` (prost derives written from the field numbers of
//! the OpenTelemetry protocol specification; the tests encode with the
//! `opentelemetry-proto` crate's own types), OTLP/JSON read into the same messages, and
//! the translation of data points into labelled samples, Prometheus-style: gauges and
//! sums as one series each (monotonic sums get `_total`), histograms as `_bucket{le}`
//! (cumulative), `_count` and `_sum`, summaries as `{quantile}`, `_count` and `_sum`.
//! Testable without a socket.

use serde_json::Value;

/// `ExportMetricsServiceRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportMetricsServiceRequest {
    /// Field 1.
    #[prost(message, repeated, tag = "1")]
    pub resource_metrics: Vec<ResourceMetrics>,
}

/// `ExportMetricsServiceResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportMetricsServiceResponse {
    /// Field 1.
    #[prost(message, optional, tag = "1")]
    pub partial_success: Option<ExportMetricsPartialSuccess>,
}

/// `ExportMetricsPartialSuccess`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportMetricsPartialSuccess {
    /// Field 1: data points refused.
    #[prost(int64, tag = "1")]
    pub rejected_data_points: i64,
    /// Field 2: why.
    #[prost(string, tag = "2")]
    pub error_message: String,
}

/// `google.rpc.Status`, the body of an OTLP/HTTP error.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    /// Field 1: a `google.rpc.Code` (3 = INVALID_ARGUMENT, 14 = UNAVAILABLE).
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// Field 2.
    #[prost(string, tag = "2")]
    pub message: String,
}

/// `ResourceMetrics`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceMetrics {
    /// Field 1.
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    /// Field 2.
    #[prost(message, repeated, tag = "2")]
    pub scope_metrics: Vec<ScopeMetrics>,
}

/// `Resource`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Resource {
    /// Field 1.
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

/// `ScopeMetrics`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ScopeMetrics {
    /// Field 1.
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    /// Field 2.
    #[prost(message, repeated, tag = "2")]
    pub metrics: Vec<Metric>,
}

/// `InstrumentationScope`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InstrumentationScope {
    /// Field 1.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Field 2.
    #[prost(string, tag = "2")]
    pub version: String,
}

/// `Metric` (the `data` oneof as optional fields: at most one is set).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    /// Field 1.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Field 3.
    #[prost(string, tag = "3")]
    pub unit: String,
    /// Field 5.
    #[prost(message, optional, tag = "5")]
    pub gauge: Option<Gauge>,
    /// Field 7.
    #[prost(message, optional, tag = "7")]
    pub sum: Option<Sum>,
    /// Field 9.
    #[prost(message, optional, tag = "9")]
    pub histogram: Option<Histogram>,
    /// Field 10: exponential histograms (not stored: their points are reported rejected).
    #[prost(message, optional, tag = "10")]
    pub exponential_histogram: Option<Histogram>,
    /// Field 11.
    #[prost(message, optional, tag = "11")]
    pub summary: Option<Summary>,
}

/// `Gauge`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Gauge {
    /// Field 1.
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
}

/// `Sum`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sum {
    /// Field 1.
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
    /// Field 2: 1 = delta, 2 = cumulative.
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
    /// Field 3.
    #[prost(bool, tag = "3")]
    pub is_monotonic: bool,
}

/// `Histogram`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    /// Field 1.
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<HistogramDataPoint>,
    /// Field 2.
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
}

/// `Summary`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    /// Field 1.
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<SummaryDataPoint>,
}

/// `NumberDataPoint` (the `value` oneof as two optional fields).
#[derive(Clone, PartialEq, prost::Message)]
pub struct NumberDataPoint {
    /// Field 7.
    #[prost(message, repeated, tag = "7")]
    pub attributes: Vec<KeyValue>,
    /// Field 3.
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    /// Field 4.
    #[prost(double, optional, tag = "4")]
    pub as_double: Option<f64>,
    /// Field 6.
    #[prost(sfixed64, optional, tag = "6")]
    pub as_int: Option<i64>,
    /// Field 8: bit 0 = no recorded value.
    #[prost(uint32, tag = "8")]
    pub flags: u32,
}

/// `HistogramDataPoint`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HistogramDataPoint {
    /// Field 9.
    #[prost(message, repeated, tag = "9")]
    pub attributes: Vec<KeyValue>,
    /// Field 3.
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    /// Field 4.
    #[prost(fixed64, tag = "4")]
    pub count: u64,
    /// Field 5.
    #[prost(double, optional, tag = "5")]
    pub sum: Option<f64>,
    /// Field 6: per-bucket (not cumulative) counts.
    #[prost(fixed64, repeated, tag = "6")]
    pub bucket_counts: Vec<u64>,
    /// Field 7: upper bounds (one fewer than the buckets).
    #[prost(double, repeated, tag = "7")]
    pub explicit_bounds: Vec<f64>,
    /// Field 10.
    #[prost(uint32, tag = "10")]
    pub flags: u32,
}

/// `SummaryDataPoint`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryDataPoint {
    /// Field 7.
    #[prost(message, repeated, tag = "7")]
    pub attributes: Vec<KeyValue>,
    /// Field 3.
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    /// Field 4.
    #[prost(fixed64, tag = "4")]
    pub count: u64,
    /// Field 5.
    #[prost(double, tag = "5")]
    pub sum: f64,
    /// Field 6.
    #[prost(message, repeated, tag = "6")]
    pub quantile_values: Vec<ValueAtQuantile>,
    /// Field 8.
    #[prost(uint32, tag = "8")]
    pub flags: u32,
}

/// `SummaryDataPoint.ValueAtQuantile`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueAtQuantile {
    /// Field 1.
    #[prost(double, tag = "1")]
    pub quantile: f64,
    /// Field 2.
    #[prost(double, tag = "2")]
    pub value: f64,
}

/// `KeyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    /// Field 1.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Field 2.
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

/// `AnyValue` (the oneof as optional fields; arrays and key-value lists kept as bytes
/// and rendered as text).
#[derive(Clone, PartialEq, prost::Message)]
pub struct AnyValue {
    /// Field 1.
    #[prost(string, optional, tag = "1")]
    pub string_value: Option<String>,
    /// Field 2.
    #[prost(bool, optional, tag = "2")]
    pub bool_value: Option<bool>,
    /// Field 3.
    #[prost(int64, optional, tag = "3")]
    pub int_value: Option<i64>,
    /// Field 4.
    #[prost(double, optional, tag = "4")]
    pub double_value: Option<f64>,
    /// Field 5 (`ArrayValue`), kept encoded.
    #[prost(bytes = "vec", optional, tag = "5")]
    pub array_value: Option<Vec<u8>>,
    /// Field 6 (`KeyValueList`), kept encoded.
    #[prost(bytes = "vec", optional, tag = "6")]
    pub kvlist_value: Option<Vec<u8>>,
    /// Field 7.
    #[prost(bytes = "vec", optional, tag = "7")]
    pub bytes_value: Option<Vec<u8>>,
}

impl AnyValue {
    /// The value as label text (`None` for an empty value).
    pub fn text(&self) -> Option<String> {
        if let Some(s) = &self.string_value {
            return Some(s.clone());
        }
        if let Some(b) = self.bool_value {
            return Some(b.to_string());
        }
        if let Some(i) = self.int_value {
            return Some(i.to_string());
        }
        if let Some(d) = self.double_value {
            return Some(d.to_string());
        }
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        self.bytes_value
            .as_deref()
            .or(self.array_value.as_deref())
            .or(self.kvlist_value.as_deref())
            .map(hex)
    }
}

/// The stale-marker NaN Prometheus uses; a point flagged "no recorded value" is stored
/// as one.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// A Prometheus-style name: characters other than `[a-zA-Z0-9_]` (and `:` in metric
/// names) become `_`, and a leading digit is prefixed with `_`.
pub fn sanitize(name: &str, metric: bool) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || (metric && c == ':') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// One sample of a data point.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpSample {
    /// The labels (`__name__` first), sanitized.
    pub labels: Vec<(String, String)>,
    /// Milliseconds since the epoch.
    pub ts_millis: i64,
    /// The value.
    pub value: tidemark::SampleValue,
}

/// What a request becomes: samples grouped by data point (a data point is stored or
/// rejected whole), and the points rejected while translating, with the first reason.
#[derive(Debug, Default)]
pub struct Translated {
    /// The samples of each accepted data point.
    pub points: Vec<Vec<OtlpSample>>,
    /// Data points rejected.
    pub rejected: i64,
    /// The first reason.
    pub first_error: Option<String>,
}

impl Translated {
    fn reject(&mut self, reason: String) {
        self.rejected += 1;
        self.first_error.get_or_insert(reason);
    }
}

fn push_attrs(out: &mut Vec<(String, String)>, attrs: &[KeyValue]) {
    // Point attributes override resource and scope attributes of one name. A few labels
    // are found by a linear search; many (a forged point with thousands of attributes)
    // through a map, so that the cost stays linear in the attributes.
    let mut index: Option<std::collections::HashMap<String, usize>> = None;
    for kv in attrs {
        if let Some(v) = kv.value.as_ref().and_then(AnyValue::text) {
            let key = sanitize(&kv.key, false);
            let slot = if out.len() < 16 {
                out.iter().position(|(k, _)| *k == key)
            } else {
                let index = index.get_or_insert_with(|| {
                    out.iter()
                        .enumerate()
                        .map(|(i, (k, _))| (k.clone(), i))
                        .collect()
                });
                let slot = index.get(&key).copied();
                if slot.is_none() {
                    index.insert(key.clone(), out.len());
                }
                slot
            };
            match slot.and_then(|i| out.get_mut(i)) {
                Some(slot) => slot.1 = v,
                None => out.push((key, v)),
            }
        }
    }
}

fn millis(nanos: u64) -> Result<i64, String> {
    if nanos == 0 {
        return Err("a data point without time_unix_nano".to_owned());
    }
    i64::try_from(nanos / 1_000_000).map_err(|_| format!("time_unix_nano {nanos} is out of range"))
}

/// Translates a request into samples.
///
/// A data point whose labels (its name, attributes, resource and scope attributes, and
/// `le` or `quantile`) would number more than `max_labels` is rejected here, before its
/// samples are made: a histogram's labels are copied once per bucket, and a point with
/// thousands of attributes and buckets would otherwise cost their product.
pub fn translate(req: &ExportMetricsServiceRequest, max_labels: usize) -> Translated {
    use tidemark::SampleValue::{F64, I64};
    let mut out = Translated::default();
    for rm in &req.resource_metrics {
        let mut base = Vec::new();
        if let Some(r) = &rm.resource {
            push_attrs(&mut base, &r.attributes);
        }
        for sm in &rm.scope_metrics {
            let mut scope = base.clone();
            if let Some(s) = &sm.scope
                && !s.name.is_empty()
            {
                scope.push(("otel_scope_name".to_owned(), s.name.clone()));
                if !s.version.is_empty() {
                    scope.push(("otel_scope_version".to_owned(), s.version.clone()));
                }
            }
            for m in &sm.metrics {
                let name = sanitize(&m.name, true);
                if name.is_empty() {
                    out.reject("a metric without a name".to_owned());
                    continue;
                }
                // A point's labels without its name, or the reason it is rejected.
                let attributes = |attrs: &[KeyValue], extra: usize| {
                    let mut l = scope.clone();
                    push_attrs(&mut l, attrs);
                    let count = l.len() + 1 + extra;
                    if count > max_labels {
                        return Err(format!(
                            "metric {name}: {count} labels, more than {max_labels} (max_labels_per_series)"
                        ));
                    }
                    Ok(l)
                };
                let labels_of =
                    |attrs: &[(String, String)], metric: &str, extra: Option<(&str, String)>| {
                        let mut l = Vec::with_capacity(attrs.len() + 2);
                        l.push((tidemark::METRIC_NAME_LABEL.to_owned(), metric.to_owned()));
                        l.extend(attrs.iter().cloned());
                        if let Some((k, v)) = extra {
                            l.push((k.to_owned(), v));
                        }
                        l
                    };
                let numbers = |out: &mut Translated, points: &[NumberDataPoint], metric: &str| {
                    for p in points {
                        let ts = match millis(p.time_unix_nano) {
                            Ok(t) => t,
                            Err(e) => {
                                out.reject(format!("metric {metric}: {e}"));
                                continue;
                            }
                        };
                        let value = if p.flags & 1 == 1 {
                            F64(f64::from_bits(STALE_NAN_BITS))
                        } else if let Some(d) = p.as_double {
                            F64(d)
                        } else if let Some(i) = p.as_int {
                            I64(i)
                        } else {
                            out.reject(format!("metric {metric}: a data point without a value"));
                            continue;
                        };
                        let attrs = match attributes(&p.attributes, 0) {
                            Ok(a) => a,
                            Err(e) => {
                                out.reject(e);
                                continue;
                            }
                        };
                        out.points.push(vec![OtlpSample {
                            labels: labels_of(&attrs, metric, None),
                            ts_millis: ts,
                            value,
                        }]);
                    }
                };
                if let Some(g) = &m.gauge {
                    numbers(&mut out, &g.data_points, &name);
                } else if let Some(s) = &m.sum {
                    let metric = if s.is_monotonic && !name.ends_with("_total") {
                        format!("{name}_total")
                    } else {
                        name.clone()
                    };
                    numbers(&mut out, &s.data_points, &metric);
                } else if let Some(h) = &m.histogram {
                    for p in &h.data_points {
                        let ts = match millis(p.time_unix_nano) {
                            Ok(t) => t,
                            Err(e) => {
                                out.reject(format!("metric {name}: {e}"));
                                continue;
                            }
                        };
                        if !p.bucket_counts.is_empty()
                            && p.bucket_counts.len() != p.explicit_bounds.len() + 1
                        {
                            out.reject(format!(
                                "metric {name}: {} bucket counts for {} bounds (expected one more)",
                                p.bucket_counts.len(),
                                p.explicit_bounds.len()
                            ));
                            continue;
                        }
                        let attrs = match attributes(&p.attributes, 1) {
                            Ok(a) => a,
                            Err(e) => {
                                out.reject(e);
                                continue;
                            }
                        };
                        let count = |v: u64| I64(i64::try_from(v).unwrap_or(i64::MAX));
                        let mut samples = Vec::new();
                        let mut cumulative: u64 = 0;
                        let bucket = format!("{name}_bucket");
                        for (i, c) in p.bucket_counts.iter().enumerate() {
                            cumulative = cumulative.saturating_add(*c);
                            let le = p
                                .explicit_bounds
                                .get(i)
                                .map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
                            samples.push(OtlpSample {
                                labels: labels_of(&attrs, &bucket, Some(("le", le))),
                                ts_millis: ts,
                                value: count(cumulative),
                            });
                        }
                        samples.push(OtlpSample {
                            labels: labels_of(&attrs, &format!("{name}_count"), None),
                            ts_millis: ts,
                            value: count(p.count),
                        });
                        if let Some(sum) = p.sum {
                            samples.push(OtlpSample {
                                labels: labels_of(&attrs, &format!("{name}_sum"), None),
                                ts_millis: ts,
                                value: F64(sum),
                            });
                        }
                        out.points.push(samples);
                    }
                } else if let Some(s) = &m.summary {
                    for p in &s.data_points {
                        let ts = match millis(p.time_unix_nano) {
                            Ok(t) => t,
                            Err(e) => {
                                out.reject(format!("metric {name}: {e}"));
                                continue;
                            }
                        };
                        let attrs = match attributes(&p.attributes, 1) {
                            Ok(a) => a,
                            Err(e) => {
                                out.reject(e);
                                continue;
                            }
                        };
                        let mut samples: Vec<OtlpSample> = p
                            .quantile_values
                            .iter()
                            .map(|q| OtlpSample {
                                labels: labels_of(
                                    &attrs,
                                    &name,
                                    Some(("quantile", q.quantile.to_string())),
                                ),
                                ts_millis: ts,
                                value: F64(q.value),
                            })
                            .collect();
                        samples.push(OtlpSample {
                            labels: labels_of(&attrs, &format!("{name}_count"), None),
                            ts_millis: ts,
                            value: I64(i64::try_from(p.count).unwrap_or(i64::MAX)),
                        });
                        samples.push(OtlpSample {
                            labels: labels_of(&attrs, &format!("{name}_sum"), None),
                            ts_millis: ts,
                            value: F64(p.sum),
                        });
                        out.points.push(samples);
                    }
                } else if let Some(e) = &m.exponential_histogram {
                    for _ in &e.data_points {
                        out.reject(format!(
                            "metric {name}: exponential histograms are not stored"
                        ));
                    }
                } else {
                    out.reject(format!(
                        "metric {name} has no data (gauge, sum, histogram or summary)"
                    ));
                }
            }
        }
    }
    out
}

/// Reads an OTLP/JSON request (lowerCamelCase or snake_case keys; 64-bit integers as
/// numbers or strings; doubles as numbers or `"NaN"`/`"Infinity"`/`"-Infinity"`).
///
/// Unknown fields are ignored, as the OTLP specification asks, except at the top: a
/// body that is not an object carrying `resourceMetrics` is refused, so that another
/// JSON sent here by mistake (collectd's `write_http`, a Prometheus JSON export) is an
/// error its sender sees, not a `200` that stored nothing. `{"resourceMetrics": []}`
/// is an empty export.
///
/// # Errors
/// The reason, naming the JSON path.
pub fn from_json(v: &Value) -> Result<ExportMetricsServiceRequest, String> {
    let kind = match v {
        Value::Object(_) => None,
        Value::Array(_) => Some("an array"),
        Value::String(_) => Some("a string"),
        Value::Number(_) => Some("a number"),
        Value::Bool(_) => Some("a boolean"),
        Value::Null => Some("null"),
    };
    if let Some(kind) = kind {
        return Err(format!(
            "the body is {kind}, not an object with resourceMetrics"
        ));
    }
    if field(v, "resourceMetrics").is_none() {
        return Err("the body has no resourceMetrics field".into());
    }
    let mut req = ExportMetricsServiceRequest::default();
    for (i, rm) in arr(v, "resourceMetrics", "$")?.iter().enumerate() {
        let path = format!("resourceMetrics[{i}]");
        let mut out = ResourceMetrics::default();
        if let Some(r) = field(rm, "resource") {
            out.resource = Some(Resource {
                attributes: attrs(r, &format!("{path}.resource"))?,
            });
        }
        for (j, sm) in arr(rm, "scopeMetrics", &path)?.iter().enumerate() {
            let path = format!("{path}.scopeMetrics[{j}]");
            let mut s = ScopeMetrics::default();
            if let Some(sc) = field(sm, "scope") {
                s.scope = Some(InstrumentationScope {
                    name: string(sc, "name", &path)?,
                    version: string(sc, "version", &path)?,
                });
            }
            for (k, m) in arr(sm, "metrics", &path)?.iter().enumerate() {
                s.metrics
                    .push(metric_json(m, &format!("{path}.metrics[{k}]"))?);
            }
            out.scope_metrics.push(s);
        }
        req.resource_metrics.push(out);
    }
    Ok(req)
}

fn snake(key: &str) -> String {
    let mut out = String::new();
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn field<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key)
        .or_else(|| v.get(snake(key)))
        .filter(|x| !x.is_null())
}

fn arr<'a>(v: &'a Value, key: &str, path: &str) -> Result<&'a [Value], String> {
    match field(v, key) {
        None => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(format!("{path}.{key}: expected an array")),
    }
}

fn string(v: &Value, key: &str, path: &str) -> Result<String, String> {
    match field(v, key) {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("{path}.{key}: expected a string")),
    }
}

fn u64_of(v: &Value, key: &str, path: &str) -> Result<u64, String> {
    match field(v, key) {
        None => Ok(0),
        Some(Value::Number(n)) => n
            .as_u64()
            .ok_or_else(|| format!("{path}.{key}: expected an unsigned integer, found {n}")),
        Some(Value::String(s)) => s
            .parse()
            .map_err(|_| format!("{path}.{key}: expected an unsigned integer, found {s:?}")),
        Some(_) => Err(format!("{path}.{key}: expected an integer")),
    }
}

fn i64_of(v: &Value, key: &str, path: &str) -> Result<Option<i64>, String> {
    match field(v, key) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| format!("{path}.{key}: expected an integer, found {n}")),
        Some(Value::String(s)) => s
            .parse()
            .map(Some)
            .map_err(|_| format!("{path}.{key}: expected an integer, found {s:?}")),
        Some(_) => Err(format!("{path}.{key}: expected an integer")),
    }
}

fn f64_of(v: &Value, key: &str, path: &str) -> Result<Option<f64>, String> {
    match field(v, key) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("{path}.{key}: expected a number")),
        Some(Value::String(s)) => match s.as_str() {
            "NaN" => Ok(Some(f64::NAN)),
            "Infinity" => Ok(Some(f64::INFINITY)),
            "-Infinity" => Ok(Some(f64::NEG_INFINITY)),
            other => other
                .parse()
                .map(Some)
                .map_err(|_| format!("{path}.{key}: expected a number, found {s:?}")),
        },
        Some(_) => Err(format!("{path}.{key}: expected a number")),
    }
}

fn attrs(v: &Value, path: &str) -> Result<Vec<KeyValue>, String> {
    let mut out = Vec::new();
    for (i, kv) in arr(v, "attributes", path)?.iter().enumerate() {
        let path = format!("{path}.attributes[{i}]");
        let key = string(kv, "key", &path)?;
        let value = match field(kv, "value") {
            None => None,
            Some(av) => {
                let mut a = AnyValue::default();
                if let Some(s) = field(av, "stringValue") {
                    a.string_value = Some(
                        s.as_str()
                            .ok_or_else(|| format!("{path}.value.stringValue: expected a string"))?
                            .to_owned(),
                    );
                } else if let Some(b) = field(av, "boolValue") {
                    a.bool_value =
                        Some(b.as_bool().ok_or_else(|| {
                            format!("{path}.value.boolValue: expected a boolean")
                        })?);
                } else if field(av, "intValue").is_some() {
                    a.int_value = i64_of(av, "intValue", &format!("{path}.value"))?;
                } else if field(av, "doubleValue").is_some() {
                    a.double_value = f64_of(av, "doubleValue", &format!("{path}.value"))?;
                } else if let Some(other) = field(av, "arrayValue")
                    .or_else(|| field(av, "kvlistValue"))
                    .or_else(|| field(av, "bytesValue"))
                {
                    a.string_value = Some(other.to_string());
                }
                Some(a)
            }
        };
        out.push(KeyValue { key, value });
    }
    Ok(out)
}

fn number_points(v: &Value, path: &str) -> Result<Vec<NumberDataPoint>, String> {
    let mut out = Vec::new();
    for (i, p) in arr(v, "dataPoints", path)?.iter().enumerate() {
        let path = format!("{path}.dataPoints[{i}]");
        out.push(NumberDataPoint {
            attributes: attrs(p, &path)?,
            time_unix_nano: u64_of(p, "timeUnixNano", &path)?,
            as_double: f64_of(p, "asDouble", &path)?,
            as_int: i64_of(p, "asInt", &path)?,
            flags: u32::try_from(u64_of(p, "flags", &path)?).unwrap_or(0),
        });
    }
    Ok(out)
}

fn metric_json(m: &Value, path: &str) -> Result<Metric, String> {
    let mut out = Metric {
        name: string(m, "name", path)?,
        unit: string(m, "unit", path)?,
        ..Metric::default()
    };
    if let Some(g) = field(m, "gauge") {
        out.gauge = Some(Gauge {
            data_points: number_points(g, &format!("{path}.gauge"))?,
        });
    } else if let Some(s) = field(m, "sum") {
        let p = format!("{path}.sum");
        out.sum = Some(Sum {
            data_points: number_points(s, &p)?,
            aggregation_temporality: temporality(s, &p)?,
            is_monotonic: field(s, "isMonotonic")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        });
    } else if let Some(h) = field(m, "histogram") {
        let p = format!("{path}.histogram");
        let mut points = Vec::new();
        for (i, d) in arr(h, "dataPoints", &p)?.iter().enumerate() {
            let path = format!("{p}.dataPoints[{i}]");
            let mut counts = Vec::new();
            for (j, c) in arr(d, "bucketCounts", &path)?.iter().enumerate() {
                let wrapped = serde_json::json!({ "c": c });
                counts.push(u64_of(&wrapped, "c", &format!("{path}.bucketCounts[{j}]"))?);
            }
            let mut bounds = Vec::new();
            for (j, b) in arr(d, "explicitBounds", &path)?.iter().enumerate() {
                let wrapped = serde_json::json!({ "b": b });
                bounds.push(
                    f64_of(&wrapped, "b", &format!("{path}.explicitBounds[{j}]"))?.unwrap_or(0.0),
                );
            }
            points.push(HistogramDataPoint {
                attributes: attrs(d, &path)?,
                time_unix_nano: u64_of(d, "timeUnixNano", &path)?,
                count: u64_of(d, "count", &path)?,
                sum: f64_of(d, "sum", &path)?,
                bucket_counts: counts,
                explicit_bounds: bounds,
                flags: u32::try_from(u64_of(d, "flags", &path)?).unwrap_or(0),
            });
        }
        out.histogram = Some(Histogram {
            data_points: points,
            aggregation_temporality: temporality(h, &p)?,
        });
    } else if let Some(s) = field(m, "summary") {
        let p = format!("{path}.summary");
        let mut points = Vec::new();
        for (i, d) in arr(s, "dataPoints", &p)?.iter().enumerate() {
            let path = format!("{p}.dataPoints[{i}]");
            let mut qs = Vec::new();
            for q in arr(d, "quantileValues", &path)? {
                qs.push(ValueAtQuantile {
                    quantile: f64_of(q, "quantile", &path)?.unwrap_or(0.0),
                    value: f64_of(q, "value", &path)?.unwrap_or(0.0),
                });
            }
            points.push(SummaryDataPoint {
                attributes: attrs(d, &path)?,
                time_unix_nano: u64_of(d, "timeUnixNano", &path)?,
                count: u64_of(d, "count", &path)?,
                sum: f64_of(d, "sum", &path)?.unwrap_or(0.0),
                quantile_values: qs,
                flags: u32::try_from(u64_of(d, "flags", &path)?).unwrap_or(0),
            });
        }
        out.summary = Some(Summary {
            data_points: points,
        });
    } else if let Some(e) = field(m, "exponentialHistogram") {
        let n = arr(e, "dataPoints", path)?.len();
        out.exponential_histogram = Some(Histogram {
            data_points: vec![HistogramDataPoint::default(); n],
            aggregation_temporality: 0,
        });
    }
    Ok(out)
}

fn temporality(v: &Value, path: &str) -> Result<i32, String> {
    match field(v, "aggregationTemporality") {
        None => Ok(0),
        Some(Value::Number(n)) => Ok(n.as_i64().and_then(|x| i32::try_from(x).ok()).unwrap_or(0)),
        Some(Value::String(s)) => Ok(match s.as_str() {
            "AGGREGATION_TEMPORALITY_DELTA" => 1,
            "AGGREGATION_TEMPORALITY_CUMULATIVE" => 2,
            _ => 0,
        }),
        Some(_) => Err(format!(
            "{path}.aggregationTemporality: expected an integer"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn translates_gauges_sums_histograms() {
        let req = from_json(&json!({"resourceMetrics": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}}]},
            "scopeMetrics": [{"scope": {"name": "lib"}, "metrics": [
                {"name": "temp", "gauge": {"dataPoints": [{"timeUnixNano": "1764460800000000000", "asDouble": 21.5,
                    "attributes": [{"key": "room", "value": {"stringValue": "a"}}]}]}},
                {"name": "requests", "sum": {"isMonotonic": true, "aggregationTemporality": 2,
                    "dataPoints": [{"timeUnixNano": 1764460800000000000u64, "asInt": "42"}]}},
                {"name": "latency", "histogram": {"dataPoints": [{"timeUnixNano": "1764460800000000000",
                    "count": "3", "sum": 0.6, "bucketCounts": ["1", "2", "0"], "explicitBounds": [0.1, 0.5]}]}},
                {"name": "nope", "exponentialHistogram": {"dataPoints": [{}]}}
            ]}]}]}))
        .unwrap();
        let t = translate(&req, 64);
        assert_eq!(t.rejected, 1);
        assert!(t.first_error.unwrap().contains("exponential"));
        assert_eq!(t.points.len(), 3);
        let g = &t.points[0][0];
        assert!(g.labels.contains(&("service_name".into(), "api".into())));
        assert!(g.labels.contains(&("otel_scope_name".into(), "lib".into())));
        assert_eq!(g.ts_millis, 1_764_460_800_000);
        assert_eq!(t.points[1][0].labels[0].1, "requests_total");
        assert_eq!(t.points[1][0].value, tidemark::SampleValue::I64(42));
        let h = &t.points[2];
        assert_eq!(h.len(), 5);
        assert_eq!(
            h[1].value,
            tidemark::SampleValue::I64(3),
            "cumulative buckets"
        );
        assert!(h[2].labels.contains(&("le".into(), "+Inf".into())));
    }

    #[test]
    fn a_point_with_too_many_labels_is_rejected_before_its_buckets_are_made() {
        // 2,000 attributes × 2,000 buckets once built 4,006,001 labels in 10.7 s
        // (docs/results/fuzz.md); now the point is refused by its label count.
        let attrs: Vec<_> = (0..2_000)
            .map(|i| json!({"key": format!("a{i}"), "value": {"stringValue": "v"}}))
            .collect();
        let point = |attributes: &[serde_json::Value]| {
            json!({"timeUnixNano": "1764460800000000000", "count": "0", "attributes": attributes,
                "bucketCounts": vec!["0"; 2_000], "explicitBounds": (0..1_999).collect::<Vec<_>>()})
        };
        let req = from_json(&json!({"resourceMetrics": [{"scopeMetrics": [{"metrics": [
            {"name": "wide", "histogram": {"dataPoints": [point(&attrs), point(&attrs[..3])]}},
            {"name": "g", "gauge": {"dataPoints": [{"timeUnixNano": "1764460800000000000",
                "asDouble": 1.0, "attributes": attrs}]}}
        ]}]}]}))
        .unwrap();
        let t = translate(&req, 64);
        assert_eq!(t.rejected, 2);
        let e = t.first_error.unwrap();
        assert!(
            e.contains("metric wide: 2002 labels, more than 64 (max_labels_per_series)"),
            "{e}"
        );
        // The narrow point is kept whole: 2,000 buckets, count; its 3 attributes each.
        assert_eq!(t.points.len(), 1);
        assert_eq!(t.points[0].len(), 2_001);
        assert_eq!(t.points[0][0].labels.len(), 5);
        // At the limit exactly: name, 62 attributes, `le`.
        let t = translate(
            &from_json(&json!({"resourceMetrics": [{"scopeMetrics": [{"metrics": [
                {"name": "w", "histogram": {"dataPoints": [point(&attrs[..62])]}}]}]}]}))
            .unwrap(),
            64,
        );
        assert_eq!((t.rejected, t.points.len()), (0, 1));
    }

    #[test]
    fn later_attributes_of_one_name_replace_earlier_ones_among_many() {
        let mut attrs: Vec<_> = (0..40)
            .map(|i| json!({"key": format!("a{i}"), "value": {"stringValue": "first"}}))
            .collect();
        attrs.push(json!({"key": "a7", "value": {"stringValue": "last"}}));
        let req = from_json(&json!({"resourceMetrics": [{
            "resource": {"attributes": [{"key": "a3", "value": {"stringValue": "resource"}}]},
            "scopeMetrics": [{"metrics": [
            {"name": "g", "gauge": {"dataPoints": [{"timeUnixNano": "1764460800000000000",
                "asDouble": 1.0, "attributes": attrs}]}}]}]}]}))
        .unwrap();
        let t = translate(&req, 64);
        let labels = &t.points[0][0].labels;
        assert_eq!(labels.len(), 41);
        assert!(labels.contains(&("a7".into(), "last".into())));
        assert!(labels.contains(&("a3".into(), "first".into())));
    }

    #[test]
    fn json_errors_name_the_path() {
        let e = from_json(&json!({"resourceMetrics": [{"scopeMetrics": [{"metrics": [
            {"name": "x", "gauge": {"dataPoints": [{"timeUnixNano": "soon"}]}}]}]}]}))
        .unwrap_err();
        assert!(
            e.contains(
                "resourceMetrics[0].scopeMetrics[0].metrics[0].gauge.dataPoints[0].timeUnixNano"
            ),
            "{e}"
        );
        assert!(from_json(&json!({"resourceMetrics": 3})).is_err());
        for body in [
            json!({"foo": 1}),
            json!([{"values": [1]}]),
            json!({}),
            json!(null),
        ] {
            let e = from_json(&body).unwrap_err();
            assert!(e.contains("resourceMetrics"), "{body}: {e}");
        }
        let empty = from_json(&json!({"resourceMetrics": []})).unwrap();
        assert!(empty.resource_metrics.is_empty());
    }
}
