//! The values a segment stores: points, dimension values and metric values.

use std::net::Ipv6Addr;

use tidemark_tsid::{DimValue, Tsid};

/// A dimension value, owned. Dimensions are stored once per series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    /// A keyword (UTF-8 string).
    Keyword(String),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer above `i64::MAX` (smaller ones should use [`Dim::Int`]).
    UInt(u64),
    /// A boolean.
    Bool(bool),
    /// An IP address, IPv4 mapped into IPv6.
    Ip(Ipv6Addr),
}

impl Dim {
    /// The borrowed [`DimValue`] of `tidemark-tsid`, to compute a tsid from stored dimensions.
    pub fn as_dim_value(&self) -> DimValue<'_> {
        match self {
            Dim::Keyword(s) => DimValue::Keyword(s),
            Dim::Int(v) => DimValue::I64(*v),
            Dim::UInt(v) => DimValue::U64(*v),
            Dim::Bool(v) => DimValue::Bool(*v),
            Dim::Ip(ip) => DimValue::Ip(std::net::IpAddr::V6(*ip)),
        }
    }

    /// The value as text, as term filters and label matchers compare it: an IPv4 address
    /// mapped into IPv6 is written as IPv4.
    pub fn text(&self) -> String {
        match self {
            Dim::Keyword(s) => s.clone(),
            Dim::Int(i) => i.to_string(),
            Dim::UInt(u) => u.to_string(),
            Dim::Bool(b) => b.to_string(),
            Dim::Ip(ip) => match ip.to_ipv4_mapped() {
                Some(v4) => v4.to_string(),
                None => ip.to_string(),
            },
        }
    }
}

impl From<&str> for Dim {
    fn from(v: &str) -> Self {
        Dim::Keyword(v.to_owned())
    }
}

impl From<String> for Dim {
    fn from(v: String) -> Self {
        Dim::Keyword(v)
    }
}

impl From<i64> for Dim {
    fn from(v: i64) -> Self {
        Dim::Int(v)
    }
}

impl From<bool> for Dim {
    fn from(v: bool) -> Self {
        Dim::Bool(v)
    }
}

/// How a metric column is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricKind {
    /// An `f64` gauge: XOR-with-previous, integer delta or raw, whichever is smaller per block.
    Gauge,
    /// An `i64` counter: delta or delta-of-delta, whichever is smaller per block.
    Counter,
}

impl MetricKind {
    /// `"gauge"` or `"counter"`.
    pub fn name(self) -> &'static str {
        match self {
            MetricKind::Gauge => "gauge",
            MetricKind::Counter => "counter",
        }
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            MetricKind::Gauge => 1,
            MetricKind::Counter => 2,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<MetricKind> {
        match code {
            1 => Some(MetricKind::Gauge),
            2 => Some(MetricKind::Counter),
            _ => None,
        }
    }
}

/// One metric value. Equality compares gauges bit for bit, so `NaN == NaN` and
/// `0.0 != -0.0`: a segment returns exactly the bits it was given.
#[derive(Debug, Clone, Copy)]
pub enum MetricValue {
    /// A gauge reading.
    Gauge(f64),
    /// A counter reading.
    Counter(i64),
}

impl MetricValue {
    /// The column kind this value belongs to.
    pub fn kind(&self) -> MetricKind {
        match self {
            MetricValue::Gauge(_) => MetricKind::Gauge,
            MetricValue::Counter(_) => MetricKind::Counter,
        }
    }

    /// The raw 8 bytes (f64 bits or i64 two's complement), as the naive reference stores them.
    pub fn to_bits(&self) -> u64 {
        match self {
            MetricValue::Gauge(v) => v.to_bits(),
            MetricValue::Counter(v) => *v as u64,
        }
    }
}

impl PartialEq for MetricValue {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (MetricValue::Gauge(a), MetricValue::Gauge(b)) => a.to_bits() == b.to_bits(),
            (MetricValue::Counter(a), MetricValue::Counter(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for MetricValue {}

/// Kind of an extra (non-dimension, non-metric) column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtraKind {
    /// UTF-8 strings, dictionary-encoded per block.
    Keyword,
    /// Booleans, bit-packed.
    Bool,
}

impl ExtraKind {
    /// `"keyword"` or `"bool"`.
    pub fn name(self) -> &'static str {
        match self {
            ExtraKind::Keyword => "keyword",
            ExtraKind::Bool => "bool",
        }
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            ExtraKind::Keyword => 3,
            ExtraKind::Bool => 4,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<ExtraKind> {
        match code {
            3 => Some(ExtraKind::Keyword),
            4 => Some(ExtraKind::Bool),
            _ => None,
        }
    }
}

/// A value of an extra column: a field that is neither a dimension nor a metric (a
/// status keyword, a flag), stored per row.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Extra {
    /// A keyword.
    Keyword(String),
    /// A boolean.
    Bool(bool),
}

impl Extra {
    /// The column kind this value belongs to.
    pub fn kind(&self) -> ExtraKind {
        match self {
            Extra::Keyword(_) => ExtraKind::Keyword,
            Extra::Bool(_) => ExtraKind::Bool,
        }
    }
}

/// A data point: the series (tsid and its dimensions), a timestamp and named metrics.
///
/// Rows read back from a segment come as points too, with dimensions sorted by name
/// and metrics in the segment's column order (by name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// The series id.
    pub tsid: Tsid,
    /// The series' dimensions, `(name, value)`.
    pub dims: Vec<(String, Dim)>,
    /// Timestamp in milliseconds.
    pub ts_millis: i64,
    /// Metric values, `(name, value)`; a metric a point lacks is simply absent.
    pub metrics: Vec<(String, MetricValue)>,
    /// Extra per-row fields, `(name, value)`: keywords and booleans that are neither
    /// dimensions nor metrics (a log message, a user name, a flag).
    pub extras: Vec<(String, Extra)>,
}

impl Point {
    /// A point with no dimensions nor metrics yet.
    pub fn new(tsid: Tsid, ts_millis: i64) -> Point {
        Point {
            tsid,
            dims: Vec::new(),
            ts_millis,
            metrics: Vec::new(),
            extras: Vec::new(),
        }
    }

    /// Adds a dimension.
    pub fn dim(mut self, name: impl Into<String>, value: impl Into<Dim>) -> Point {
        self.dims.push((name.into(), value.into()));
        self
    }

    /// Adds a gauge value.
    pub fn gauge(mut self, name: impl Into<String>, value: f64) -> Point {
        self.metrics.push((name.into(), MetricValue::Gauge(value)));
        self
    }

    /// Adds a counter value.
    pub fn counter(mut self, name: impl Into<String>, value: i64) -> Point {
        self.metrics
            .push((name.into(), MetricValue::Counter(value)));
        self
    }

    /// Adds an extra keyword field.
    pub fn keyword(mut self, name: impl Into<String>, value: impl Into<String>) -> Point {
        self.extras
            .push((name.into(), Extra::Keyword(value.into())));
        self
    }

    /// Adds an extra boolean field.
    pub fn flag(mut self, name: impl Into<String>, value: bool) -> Point {
        self.extras.push((name.into(), Extra::Bool(value)));
        self
    }

    /// The same point with dimensions, metrics and extras sorted by name, as a segment
    /// returns it.
    pub fn normalized(mut self) -> Point {
        self.dims.sort_by(|a, b| a.0.cmp(&b.0));
        self.metrics.sort_by(|a, b| a.0.cmp(&b.0));
        self.extras.sort_by(|a, b| a.0.cmp(&b.0));
        self
    }
}

/// A row number within a segment, in (tsid, timestamp) order.
pub type RowId = u64;
