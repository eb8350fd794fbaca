//! The one query model of the façade: a time range ([`TimeRange`], both ends
//! inclusive), a filter tree ([`Filter`]: time, terms, prefixes, regular expressions,
//! wildcards, ids, `_id` prefix, exists, and/or/not; PromQL-style matchers parse into
//! it, [`Filter::parse_matcher`]) and the compiled form every query runs
//! (`Compiled`): checked against the mapping once, then evaluated on a segment's
//! dimension index (which series to read), on a series' dimensions and tsid (which
//! series may match) and on rows. The Elasticsearch DSL, the CLI's `search` and `agg`
//! and the rollup searches all run through it.
//!
//! **One time convention.** A range is `[first, last]` in epoch milliseconds, both ends
//! inclusive, as the engine's reads (`scan_live`, read plans and their pieces, series
//! readers, segment pruning by min/max timestamp), PromQL's storage and the DSL's
//! `gte`/`lte` are: it holds every `i64` timestamp (an unbounded end needs no special
//! value) and an empty range is `first > last`. Half-open inputs (the CLI's
//! `--from`/`--to`, [`Query`](crate::Query)'s `from`/`to`, the DSL's `lt`) convert at the
//! edge, once ([`TimeRange::half_open`]).

use std::collections::HashSet;

use roaring::RoaringBitmap;
use tidemark_dedup::Postings;
use tidemark_segment::{Dim, Point};
use tidemark_tsid::{SyntheticId, Tsid};

use crate::doc::ip_text;
use crate::error::{Error, Result};
use crate::mapping::{FieldRole, FieldType, IndexMode, Mapping};

/// A time range `[first_ms, last_ms]`, epoch milliseconds, both ends inclusive (empty
/// when `first_ms > last_ms`): the one convention of the façade's queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimeRange {
    /// The first millisecond in the range.
    pub first_ms: i64,
    /// The last millisecond in the range (inclusive).
    pub last_ms: i64,
}

impl TimeRange {
    /// All of time.
    pub const ALL: TimeRange = TimeRange {
        first_ms: i64::MIN,
        last_ms: i64::MAX,
    };

    /// `[first_ms, last_ms]`, both inclusive.
    pub fn new(first_ms: i64, last_ms: i64) -> TimeRange {
        TimeRange { first_ms, last_ms }
    }

    /// The range of a half-open `[from, to)` whose ends may be open (`None`: unbounded),
    /// as the CLI's `--from`/`--to` and [`Query`](crate::Query) give it.
    pub fn half_open(from: Option<i64>, to: Option<i64>) -> TimeRange {
        TimeRange {
            first_ms: from.unwrap_or(i64::MIN),
            last_ms: to.map_or(i64::MAX, |t| t.saturating_sub(1)),
        }
    }

    /// Whether no millisecond is in the range.
    pub fn is_empty(self) -> bool {
        self.first_ms > self.last_ms
    }

    /// Whether `ts_millis` is in the range.
    pub fn contains(self, ts_millis: i64) -> bool {
        self.first_ms <= ts_millis && ts_millis <= self.last_ms
    }

    /// The milliseconds in both ranges.
    pub fn intersect(self, other: TimeRange) -> TimeRange {
        TimeRange {
            first_ms: self.first_ms.max(other.first_ms),
            last_ms: self.last_ms.min(other.last_ms),
        }
    }
}

/// A document filter.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Filter {
    /// Every document.
    All,
    /// Timestamp within `[min, max]` (inclusive, epoch milliseconds).
    Time {
        /// Lowest timestamp kept.
        min: i64,
        /// Highest timestamp kept.
        max: i64,
    },
    /// A dimension equal to one of `values` (compared as text; IPs normalized).
    Terms {
        /// The dimension path.
        field: String,
        /// Accepted values.
        values: Vec<String>,
    },
    /// A dimension whose value (as text) starts with `prefix`.
    Prefix {
        /// The dimension path.
        field: String,
        /// The prefix.
        prefix: String,
    },
    /// A dimension whose whole value (as text) matches a regular expression (Rust
    /// `regex` syntax, anchored at both ends as Elasticsearch's `regexp` is).
    Regex {
        /// The dimension path.
        field: String,
        /// The pattern.
        pattern: String,
    },
    /// A dimension whose whole value matches a wildcard pattern: `*` any run of
    /// characters, `?` one character, `\` escapes the next (Elasticsearch's `wildcard`).
    Wildcard {
        /// The dimension path.
        field: String,
        /// The pattern.
        pattern: String,
    },
    /// An `_id` among these.
    Ids(Vec<String>),
    /// An `_id` starting with this.
    IdPrefix(String),
    /// The document has a value for this dimension, metric or numeric field, or the
    /// timestamp.
    Exists(String),
    /// All of these.
    And(Vec<Filter>),
    /// Any of these.
    Or(Vec<Filter>),
    /// Not this.
    Not(Box<Filter>),
}

impl Filter {
    /// The time range the filter's time conditions allow: a [`Filter::Time`], or the
    /// intersection of those an [`Filter::And`] holds; all of time otherwise (what a
    /// query may read at most, e.g. to fetch the partitions it needs first).
    pub fn time_range(&self) -> TimeRange {
        match self {
            Filter::Time { min, max } => TimeRange::new(*min, *max),
            Filter::And(v) => v
                .iter()
                .fold(TimeRange::ALL, |r, f| r.intersect(f.time_range())),
            _ => TimeRange::ALL,
        }
    }

    /// Parses a PromQL-style matcher on a dimension's value (as text; IPs normalized)
    /// into the filter it means: `name=value` ([`Filter::Terms`]), `name!=value` and
    /// `name!~regex` (a [`Filter::Not`], which on a dimension also accepts series that
    /// lack it), `name=~regex` ([`Filter::Regex`], anchored) or `name^=prefix`
    /// ([`Filter::Prefix`]).
    ///
    /// # Errors
    /// [`Error::Query`] for anything else.
    pub fn parse_matcher(text: &str) -> Result<Filter> {
        let ops = ["!=", "=~", "!~", "^=", "="];
        let found = ops
            .iter()
            .filter_map(|op| text.find(op).map(|i| (i, *op)))
            .min_by_key(|(i, op)| (*i, std::cmp::Reverse(op.len())));
        let Some((i, op)) = found.filter(|(i, _)| *i > 0) else {
            return Err(Error::Query {
                reason: format!(
                    "invalid matcher `{text}`: expected name=value, name!=value, name=~regex, name!~regex or name^=prefix"
                ),
            });
        };
        let field = text[..i].to_owned();
        let value = text[i + op.len()..].to_owned();
        let terms = |field, value| Filter::Terms {
            field,
            values: vec![value],
        };
        Ok(match op {
            "=" => terms(field, value),
            "!=" => Filter::Not(Box::new(terms(field, value))),
            "=~" => Filter::Regex {
                field,
                pattern: value,
            },
            "!~" => Filter::Not(Box::new(Filter::Regex {
                field,
                pattern: value,
            })),
            _ => Filter::Prefix {
                field,
                prefix: value,
            },
        })
    }
}

/// A filter checked against the mapping, ready to evaluate: the one compiled form of
/// every query of the façade.
pub(crate) enum Compiled {
    All,
    Time(TimeRange),
    Dim(String, HashSet<String>),
    DimPrefix(String, String),
    DimRegex(String, regex::Regex),
    Ids(HashSet<String>),
    IdPrefix(IdPrefix),
    HasDim(String),
    HasMetric(String),
    And(Vec<Compiled>),
    Or(Vec<Compiled>),
    Not(Box<Compiled>),
}

pub(crate) fn query_error(reason: String) -> Error {
    Error::Query { reason }
}

/// Checks that `field` is a dimension, for a filter of `kind`.
pub(crate) fn dimension_field(m: &Mapping, field: &str, kind: &str) -> Result<()> {
    match m.field(field).map(|d| d.role) {
        Some(FieldRole::Dimension) => Ok(()),
        Some(_) => Err(query_error(format!(
            "{kind} filters apply to dimensions; [{field}] is not a dimension"
        ))),
        None => Err(query_error(format!(
            "unknown field [{field}] in a {kind} filter"
        ))),
    }
}

/// A wildcard pattern (`*`, `?`, `\` escapes) as an anchored regular expression.
fn wildcard_regex(pattern: &str) -> String {
    let mut out = String::from("^(?s:");
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' => out.push_str(".*"),
            '?' => out.push('.'),
            '\\' => {
                if let Some(n) = chars.next() {
                    out.push_str(&regex::escape(&n.to_string()));
                }
            }
            c => out.push_str(&regex::escape(&c.to_string())),
        }
    }
    out.push_str(")$");
    out
}

/// An `_id` prefix, with what it says about the series and the time of the documents
/// it can match: for time series the first 26 characters of an `_id` encode only the
/// tsid (series are pruned before a row is read); for events the first 16 are the
/// timestamp (the time range narrows).
pub(crate) struct IdPrefix {
    prefix: String,
    /// The part of the prefix a series' own `_id` prefix must start with ("" for
    /// events).
    series: String,
    /// The timestamps it can hold.
    time: TimeRange,
}

impl IdPrefix {
    fn new(prefix: &str, mode: &IndexMode) -> IdPrefix {
        let (series, time) = match mode {
            IndexMode::TimeSeries => (
                prefix.get(..prefix.len().min(26)).unwrap_or("").to_owned(),
                TimeRange::ALL,
            ),
            IndexMode::Events(_) => (
                String::new(),
                event_prefix_range(prefix).map_or(TimeRange::ALL, |(a, b)| TimeRange::new(a, b)),
            ),
        };
        IdPrefix {
            prefix: prefix.to_owned(),
            series,
            time,
        }
    }
}

/// The timestamps an event `_id` prefix can hold: its first 16 hex digits are the
/// timestamp XOR 2^63 (so they sort as the timestamps do). `None` when the prefix says
/// nothing about time (empty, or not hex).
fn event_prefix_range(prefix: &str) -> Option<(i64, i64)> {
    let hex = prefix.get(..prefix.len().min(16))?;
    if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let value = u64::from_str_radix(hex, 16).ok()?;
    let shift = 4 * (16 - hex.len() as u32);
    let lo = value.checked_shl(shift).unwrap_or(0);
    let hi = lo | u64::MAX.checked_shr(64 - shift).unwrap_or(0);
    let unbias = |b: u64| (b ^ (1 << 63)) as i64;
    Some((unbias(lo), unbias(hi)))
}

/// Checks `f` against the mapping: the one compiler of the façade's filters.
pub(crate) fn compile(f: &Filter, m: &Mapping) -> Result<Compiled> {
    Ok(match f {
        Filter::All => Compiled::All,
        Filter::Time { min, max } => Compiled::Time(TimeRange::new(*min, *max)),
        Filter::Terms { field, values } => {
            let Some(def) = m.field(field) else {
                return Err(query_error(format!(
                    "unknown field [{field}] in a term filter"
                )));
            };
            if def.role != FieldRole::Dimension {
                return Err(query_error(format!(
                    "term filters apply to dimensions; [{field}] is not a dimension"
                )));
            }
            let mut set = HashSet::new();
            for v in values {
                let normalized = if def.ty == FieldType::Ip {
                    match v.parse::<std::net::IpAddr>() {
                        Ok(std::net::IpAddr::V4(a)) => a.to_string(),
                        Ok(std::net::IpAddr::V6(a)) => ip_text(&a),
                        Err(_) => {
                            return Err(query_error(format!(
                                "[{field}] is an ip field: [{v}] is not an IP address"
                            )));
                        }
                    }
                } else {
                    v.clone()
                };
                set.insert(normalized);
            }
            Compiled::Dim(field.clone(), set)
        }
        Filter::Prefix { field, prefix } => {
            dimension_field(m, field, "prefix")?;
            Compiled::DimPrefix(field.clone(), prefix.clone())
        }
        Filter::Regex { field, pattern } => {
            dimension_field(m, field, "regexp")?;
            let re = regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
                query_error(format!("invalid regexp [{pattern}] on [{field}]: {e}"))
            })?;
            Compiled::DimRegex(field.clone(), re)
        }
        Filter::Wildcard { field, pattern } => {
            dimension_field(m, field, "wildcard")?;
            let re = regex::Regex::new(&wildcard_regex(pattern)).map_err(|e| {
                query_error(format!("invalid wildcard [{pattern}] on [{field}]: {e}"))
            })?;
            Compiled::DimRegex(field.clone(), re)
        }
        Filter::Ids(ids) => Compiled::Ids(ids.iter().cloned().collect()),
        Filter::IdPrefix(p) => Compiled::IdPrefix(IdPrefix::new(p, m.mode())),
        Filter::Exists(field) => match m.field(field).map(|d| d.role) {
            Some(FieldRole::Timestamp) => Compiled::All,
            Some(FieldRole::Dimension) => Compiled::HasDim(field.clone()),
            Some(FieldRole::Metric(_) | FieldRole::Value) => Compiled::HasMetric(field.clone()),
            Some(FieldRole::Extra) => {
                return Err(query_error(format!(
                    "exists on [{field}] is not supported: it is neither a dimension, a metric nor a numeric field"
                )));
            }
            None if m.is_object(field) => {
                return Err(query_error(format!(
                    "exists on the object [{field}] is not supported: name a field"
                )));
            }
            // An unmapped field exists in no document (as in Elasticsearch).
            None => Compiled::Not(Box::new(Compiled::All)),
        },
        Filter::And(v) => Compiled::And(v.iter().map(|f| compile(f, m)).collect::<Result<_>>()?),
        Filter::Or(v) => Compiled::Or(v.iter().map(|f| compile(f, m)).collect::<Result<_>>()?),
        Filter::Not(f) => Compiled::Not(Box::new(compile(f, m)?)),
    })
}

impl Compiled {
    /// Whether the filter reads a document's `_id`.
    pub(crate) fn needs_id(&self) -> bool {
        match self {
            Compiled::Ids(_) | Compiled::IdPrefix(_) => true,
            Compiled::And(v) | Compiled::Or(v) => v.iter().any(Compiled::needs_id),
            Compiled::Not(f) => f.needs_id(),
            _ => false,
        }
    }

    /// The time range the filter's time conditions allow (for pruning partitions and
    /// segments, and for the read plan).
    pub(crate) fn time_bounds(&self) -> TimeRange {
        match self {
            Compiled::Time(r) => *r,
            Compiled::And(v) => v
                .iter()
                .fold(TimeRange::ALL, |r, f| r.intersect(f.time_bounds())),
            _ => TimeRange::ALL,
        }
    }

    /// [`time_bounds`](Self::time_bounds) narrowed by what `_id` prefixes say about
    /// time (events): the rows a scan must read.
    pub(crate) fn row_bounds(&self) -> TimeRange {
        match self {
            Compiled::Time(r) => *r,
            Compiled::IdPrefix(p) => p.time,
            Compiled::And(v) => v
                .iter()
                .fold(TimeRange::ALL, |r, f| r.intersect(f.row_bounds())),
            _ => TimeRange::ALL,
        }
    }

    /// Whether the series `tsid` may hold matching documents, as far as its `_id`
    /// prefix tells (time series: an `_id` starts with its series' part).
    pub(crate) fn may_match_series(&self, tsid: &Tsid) -> bool {
        match self {
            Compiled::IdPrefix(p) => {
                p.series.is_empty()
                    || SyntheticId::new(*tsid, 0)
                        .to_string()
                        .starts_with(p.series.as_str())
            }
            Compiled::And(v) => v.iter().all(|f| f.may_match_series(tsid)),
            Compiled::Or(v) => v.iter().any(|f| f.may_match_series(tsid)),
            _ => true,
        }
    }

    /// Whether the filter depends on a document's dimensions only (so a series either
    /// matches with all its documents or with none).
    pub(crate) fn on_dims_only(&self) -> bool {
        match self {
            Compiled::All
            | Compiled::Dim(..)
            | Compiled::DimPrefix(..)
            | Compiled::DimRegex(..)
            | Compiled::HasDim(_) => true,
            Compiled::Time(..)
            | Compiled::Ids(_)
            | Compiled::IdPrefix(_)
            | Compiled::HasMetric(_) => false,
            Compiled::And(v) | Compiled::Or(v) => v.iter().all(Compiled::on_dims_only),
            Compiled::Not(f) => f.on_dims_only(),
        }
    }

    /// Whether the filter is a conjunction of time ranges and filters on dimensions only
    /// (a rollup bucket inside the range then matches whole or not at all).
    pub(crate) fn on_time_and_dims(&self) -> bool {
        match self {
            Compiled::Time(..) => true,
            Compiled::And(v) => v
                .iter()
                .all(|f| matches!(f, Compiled::Time(..)) || f.on_time_and_dims()),
            other => other.on_dims_only(),
        }
    }

    /// Whether [`select`](Self::select) can leave series out.
    pub(crate) fn narrows(&self) -> bool {
        match self {
            Compiled::Dim(..)
            | Compiled::DimPrefix(..)
            | Compiled::DimRegex(..)
            | Compiled::HasDim(_) => true,
            Compiled::And(v) => v.iter().any(Compiled::narrows),
            Compiled::Or(v) => !v.is_empty() && v.iter().all(Compiled::narrows),
            Compiled::Not(f) => f.on_dims_only(),
            _ => false,
        }
    }

    /// The series of a segment that may have matching documents, from its dimension
    /// index: exactly the matching ones where the filter is on dimensions only, a
    /// superset where it also looks at rows (those are then checked row by row).
    pub(crate) fn select(&self, p: &Postings) -> RoaringBitmap {
        match self {
            Compiled::Dim(field, set) => {
                let mut out = RoaringBitmap::new();
                for v in set {
                    out |= p.term(field, v);
                }
                out
            }
            Compiled::DimPrefix(field, pre) => p.prefix(field, pre),
            Compiled::DimRegex(field, re) => p.matching(field, |v| re.is_match(v)),
            Compiled::HasDim(field) => p.has(field),
            Compiled::And(v) => {
                let mut it = v.iter();
                let mut out = match it.next() {
                    Some(f) => f.select(p),
                    None => return p.all(),
                };
                for f in it {
                    if out.is_empty() {
                        break;
                    }
                    out &= f.select(p);
                }
                out
            }
            Compiled::Or(v) => {
                let mut out = RoaringBitmap::new();
                for f in v {
                    out |= f.select(p);
                }
                out
            }
            // The complement of an exact set is exact; of a superset, nothing is known.
            Compiled::Not(f) if f.on_dims_only() => p.all() - f.select(p),
            _ => p.all(),
        }
    }

    /// [`select`](Self::select) for one series (its dimensions): whether it may have
    /// matching documents.
    pub(crate) fn may_match(&self, dims: &[(String, Dim)]) -> bool {
        let value = |field: &str| dims.iter().find(|(n, _)| n == field).map(|(_, d)| d.text());
        match self {
            Compiled::Dim(field, set) => value(field).is_some_and(|v| set.contains(&v)),
            Compiled::DimPrefix(field, pre) => {
                value(field).is_some_and(|v| v.starts_with(pre.as_str()))
            }
            Compiled::DimRegex(field, re) => value(field).is_some_and(|v| re.is_match(&v)),
            Compiled::HasDim(field) => dims.iter().any(|(n, _)| n == field),
            Compiled::And(v) => v.iter().all(|f| f.may_match(dims)),
            Compiled::Or(v) => v.iter().any(|f| f.may_match(dims)),
            Compiled::Not(f) if f.on_dims_only() => !f.may_match(dims),
            _ => true,
        }
    }

    pub(crate) fn matches(&self, p: &Point, id: &str) -> bool {
        match self {
            Compiled::All => true,
            Compiled::Time(r) => r.contains(p.ts_millis),
            Compiled::Dim(field, set) => p
                .dims
                .iter()
                .any(|(n, d)| n == field && set.contains(&d.text())),
            Compiled::DimPrefix(field, pre) => p
                .dims
                .iter()
                .any(|(n, d)| n == field && d.text().starts_with(pre.as_str())),
            Compiled::DimRegex(field, re) => p
                .dims
                .iter()
                .any(|(n, d)| n == field && re.is_match(&d.text())),
            Compiled::Ids(set) => set.contains(id),
            Compiled::IdPrefix(pre) => id.starts_with(pre.prefix.as_str()),
            Compiled::HasDim(field) => p.dims.iter().any(|(n, _)| n == field),
            Compiled::HasMetric(field) => p.metrics.iter().any(|(n, _)| n == field),
            Compiled::And(v) => v.iter().all(|f| f.matches(p, id)),
            Compiled::Or(v) => v.iter().any(|f| f.matches(p, id)),
            Compiled::Not(f) => !f.matches(p, id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{TimeRange, event_prefix_range};

    #[test]
    fn event_prefixes_give_time_ranges() {
        // 1764460800000 XOR 2^63 = 0x8000019ad20f2800.
        let ts = 1_764_460_800_000_i64;
        assert_eq!(event_prefix_range("8000019ad20f2800"), Some((ts, ts)));
        assert_eq!(event_prefix_range("8000019ad20f2800ab"), Some((ts, ts)));
        let (lo, hi) = event_prefix_range("8000019ad20f28").unwrap();
        assert_eq!((lo, hi), (ts, ts + 255));
        assert_eq!(event_prefix_range("8"), Some((0, (1 << 60) - 1)));
        assert_eq!(event_prefix_range("7"), Some((-(1 << 60), -1)));
        assert_eq!(event_prefix_range(""), None);
        assert_eq!(event_prefix_range("zz"), None);
    }

    #[test]
    fn half_open_ranges_convert_once() {
        assert_eq!(TimeRange::half_open(None, None), TimeRange::ALL);
        let r = TimeRange::half_open(Some(10), Some(20));
        assert_eq!(r, TimeRange::new(10, 19));
        assert!(r.contains(10) && r.contains(19) && !r.contains(20) && !r.contains(9));
        assert!(TimeRange::half_open(Some(5), Some(5)).is_empty());
        assert!(TimeRange::ALL.contains(i64::MAX) && TimeRange::ALL.contains(i64::MIN));
        assert_eq!(
            TimeRange::new(0, 10).intersect(TimeRange::new(5, 20)),
            TimeRange::new(5, 10)
        );
    }
}
