//! Search (time range, term filters on dimensions, `_id` prefix) and a small metric
//! aggregation (per series and per interval).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use tidemark_segment::{Dim, MetricValue, Point};
use tidemark_tsid::{SyntheticId, Tsid};

use crate::doc::{dim_json, dim_text, ip_text, point_to_doc};
use crate::error::{Error, Result};
use crate::index::Index;
use crate::mapping::{FieldRole, FieldType, IndexMode, Mapping};
use crate::time::format_time;

/// Sort order by timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Oldest first.
    #[default]
    Asc,
    /// Newest first.
    Desc,
}

/// A search: documents whose timestamp is in `[from, to)`, whose dimensions equal every
/// filter and whose `_id` starts with `id_prefix`, sorted by timestamp (then `_id`),
/// at most `limit`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// Inclusive lower bound, epoch milliseconds.
    pub from: Option<i64>,
    /// Exclusive upper bound, epoch milliseconds.
    pub to: Option<i64>,
    /// `(dimension, value)` term filters, all of which must match.
    pub filters: Vec<(String, String)>,
    /// An `_id` text prefix.
    pub id_prefix: Option<String>,
    /// At most this many documents.
    pub limit: Option<usize>,
    /// Sort order.
    pub order: Order,
}

/// A metric aggregation over `[from, to)`: `min`, `max`, `sum`, `count` and `avg` per
/// `interval` bucket (date histogram), overall and per series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggQuery {
    /// The metric (or numeric) field.
    pub metric: String,
    /// Bucket width in milliseconds.
    pub interval_millis: i64,
    /// Inclusive lower bound.
    pub from: Option<i64>,
    /// Exclusive upper bound.
    pub to: Option<i64>,
    /// `(dimension, value)` term filters.
    pub filters: Vec<(String, String)>,
}

/// One bucket of an aggregation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AggBucket {
    /// Bucket start, epoch milliseconds (a multiple of the interval).
    pub key: i64,
    /// Values.
    pub count: u64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Sum of the values.
    pub sum: f64,
}

impl AggBucket {
    fn new(key: i64) -> AggBucket {
        AggBucket {
            key,
            count: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            sum: 0.0,
        }
    }

    fn add(&mut self, v: f64) {
        self.count += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += v;
    }

    /// Mean of the values.
    pub fn avg(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }

    /// The bucket as JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "key": self.key,
            "key_as_string": format_time(self.key),
            "count": self.count,
            "min": self.min,
            "max": self.max,
            "sum": self.sum,
            "avg": self.avg(),
        })
    }
}

/// The buckets of one series.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesAgg {
    /// The series id.
    pub tsid: Tsid,
    /// Its dimensions.
    pub dims: Vec<(String, Dim)>,
    /// Its buckets, by key.
    pub buckets: Vec<AggBucket>,
}

/// The result of an [`AggQuery`].
#[derive(Debug, Clone, PartialEq)]
pub struct AggResult {
    /// The metric.
    pub metric: String,
    /// Bucket width.
    pub interval_millis: i64,
    /// Buckets over all matching series, by key.
    pub buckets: Vec<AggBucket>,
    /// Buckets per series, by tsid.
    pub series: Vec<SeriesAgg>,
}

impl AggResult {
    /// The result as JSON: `{"metric", "interval_ms", "buckets": [...], "series": [{"_tsid",
    /// "dimensions", "buckets"}]}`.
    pub fn to_json(&self) -> Value {
        json!({
            "metric": self.metric,
            "interval_ms": self.interval_millis,
            "buckets": self.buckets.iter().map(AggBucket::to_json).collect::<Vec<_>>(),
            "series": self.series.iter().map(|s| {
                let mut dims = Map::new();
                for (n, d) in &s.dims {
                    crate::doc::insert_path(&mut dims, n, dim_json(d));
                }
                json!({
                    "_tsid": s.tsid.to_string(),
                    "dimensions": dims,
                    "buckets": s.buckets.iter().map(AggBucket::to_json).collect::<Vec<_>>(),
                })
            }).collect::<Vec<_>>(),
        })
    }
}

/// Term filters checked against a series' dimensions, values normalised by type.
struct Filters(Vec<(String, String)>);

impl Filters {
    fn new(mapping: &Mapping, filters: &[(String, String)]) -> Result<Filters> {
        let mut out = Vec::new();
        for (name, value) in filters {
            let Some(f) = mapping.field(name) else {
                return Err(Error::Query {
                    reason: format!("unknown field `{name}` in a filter"),
                });
            };
            if f.role != FieldRole::Dimension {
                return Err(Error::Query {
                    reason: format!("`{name}` is not a dimension: filters apply to dimensions"),
                });
            }
            let normalized = if f.ty == FieldType::Ip {
                match value.parse::<std::net::IpAddr>() {
                    Ok(std::net::IpAddr::V4(v4)) => v4.to_string(),
                    Ok(std::net::IpAddr::V6(v6)) => ip_text(&v6),
                    Err(_) => {
                        return Err(Error::Query {
                            reason: format!(
                                "`{name}` is an ip field: `{value}` is not an IP address"
                            ),
                        });
                    }
                }
            } else {
                value.clone()
            };
            out.push((name.clone(), normalized));
        }
        Ok(Filters(out))
    }

    fn matches(&self, dims: &[(String, Dim)]) -> bool {
        self.0
            .iter()
            .all(|(name, value)| dims.iter().any(|(n, d)| n == name && dim_text(d) == *value))
    }
}

/// A series' dimensions and its buckets by key.
type SeriesBuckets = (Vec<(String, Dim)>, BTreeMap<i64, AggBucket>);

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

fn range(from: Option<i64>, to: Option<i64>) -> (i64, i64) {
    (
        from.unwrap_or(i64::MIN),
        to.map_or(i64::MAX, |t| t.saturating_sub(1)),
    )
}

impl Index {
    /// Runs a search; documents come rebuilt as by [`get`](Self::get).
    ///
    /// # Errors
    /// [`Error::Query`] for a filter on an unknown or non-dimension field; segment read
    /// errors.
    pub fn search(&self, query: &Query) -> Result<Vec<Value>> {
        let filters = Filters::new(self.mapping(), &query.filters)?;
        let (mut from, mut to) = range(query.from, query.to);
        let prefix = query.id_prefix.as_deref().unwrap_or("");
        // An `_id` prefix narrows the scan before any row is read: for time series the
        // first 26 characters of an `_id` encode only the tsid (series pruned); for
        // events the first 16 are the timestamp (time range narrowed).
        let series_prefix = match self.mapping().mode() {
            IndexMode::TimeSeries => prefix.get(..prefix.len().min(26)).unwrap_or(""),
            _ => {
                if let Some((lo, hi)) = event_prefix_range(prefix) {
                    from = from.max(lo);
                    to = to.min(hi);
                }
                ""
            }
        };
        let mut hits: Vec<(i64, String, Point)> = Vec::new();
        let mut failure = None;
        self.engine().scan_live(
            from,
            to,
            |tsid, dims| {
                (series_prefix.is_empty()
                    || SyntheticId::new(*tsid, 0)
                        .to_string()
                        .starts_with(series_prefix))
                    && filters.matches(dims)
            },
            |mut p, stored| {
                if let Some((segment, row)) = stored
                    && !segment.extra_columns().is_empty()
                {
                    match segment.row_extras(row) {
                        Ok(extras) => crate::extras::set_extras(&mut p, extras),
                        Err(e) => {
                            failure.get_or_insert(e.into());
                            return;
                        }
                    }
                }
                let id = match self.id_of(&p) {
                    Ok(id) => self.format_id(&id),
                    Err(e) => {
                        failure.get_or_insert(e);
                        return;
                    }
                };
                if query
                    .id_prefix
                    .as_ref()
                    .is_some_and(|pre| !id.starts_with(pre.as_str()))
                {
                    return;
                }
                hits.push((p.ts_millis, id, p));
            },
        )?;
        if let Some(e) = failure {
            return Err(e);
        }
        match query.order {
            Order::Asc => hits.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1))),
            Order::Desc => hits.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1))),
        }
        if let Some(limit) = query.limit {
            hits.truncate(limit);
        }
        Ok(hits
            .iter()
            .map(|(_, id, p)| point_to_doc(self.mapping(), p, id))
            .collect())
    }

    /// Runs a metric aggregation.
    ///
    /// # Errors
    /// [`Error::Query`] for an unknown or non-numeric field, a bad interval or filter;
    /// segment read errors.
    pub fn aggregate(&self, query: &AggQuery) -> Result<AggResult> {
        let Some(field) = self.mapping().field(&query.metric) else {
            return Err(Error::Query {
                reason: format!("unknown field `{}`", query.metric),
            });
        };
        if !matches!(field.role, FieldRole::Metric(_) | FieldRole::Value) {
            return Err(Error::Query {
                reason: format!("`{}` is not a metric or numeric field", query.metric),
            });
        }
        if query.interval_millis <= 0 {
            return Err(Error::Query {
                reason: "the interval must be positive".to_owned(),
            });
        }
        let filters = Filters::new(self.mapping(), &query.filters)?;
        let (from, to) = range(query.from, query.to);
        let interval = query.interval_millis;
        let mut total: BTreeMap<i64, AggBucket> = BTreeMap::new();
        let mut per_series: BTreeMap<Tsid, SeriesBuckets> = BTreeMap::new();
        self.engine().scan_live(
            from,
            to,
            |_, dims| filters.matches(dims),
            |p, _| {
                let Some(v) = p
                    .metrics
                    .iter()
                    .find(|(n, _)| *n == query.metric)
                    .map(|(_, v)| match v {
                        MetricValue::Gauge(f) => *f,
                        MetricValue::Counter(i) => *i as f64,
                    })
                else {
                    return;
                };
                let key = p.ts_millis.div_euclid(interval) * interval;
                total
                    .entry(key)
                    .or_insert_with(|| AggBucket::new(key))
                    .add(v);
                let series = per_series
                    .entry(p.tsid)
                    .or_insert_with(|| (p.dims.clone(), BTreeMap::new()));
                series
                    .1
                    .entry(key)
                    .or_insert_with(|| AggBucket::new(key))
                    .add(v);
            },
        )?;
        Ok(AggResult {
            metric: query.metric.clone(),
            interval_millis: interval,
            buckets: total.into_values().collect(),
            series: per_series
                .into_iter()
                .map(|(tsid, (dims, b))| SeriesAgg {
                    tsid,
                    dims,
                    buckets: b.into_values().collect(),
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::event_prefix_range;

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
}
