//! The CLI's query shapes, lowered onto the one filter model ([`crate::filter`]): a
//! search of documents ([`Query`], run as a [`SearchRequest`]), a metric aggregation
//! per series and interval ([`AggQuery`]: counters' increase and rate, group-by),
//! rollup documents, and label listings.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use tidemark_dedup::{Piece, RollupStats, counter_step};
use tidemark_segment::{Dim, MetricValue, Point};
use tidemark_tsid::{SyntheticId, Tsid};

use crate::doc::dim_json;
use crate::error::{Error, Result};
use crate::filter::{Compiled, Filter, TimeRange, compile, dimension_field};
use crate::index::Index;
use crate::mapping::{FieldRole, Mapping};
use crate::query::SearchRequest;
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
    /// Further filters, all of which must match: PromQL-style matchers on dimensions
    /// ([`Filter::parse_matcher`]: terms, prefix, regex, negations), answered through
    /// each segment's dimension index, or any other [`Filter`].
    pub matchers: Vec<Filter>,
    /// An `_id` text prefix.
    pub id_prefix: Option<String>,
    /// At most this many documents.
    pub limit: Option<usize>,
    /// Sort order.
    pub order: Order,
}

impl Query {
    /// The query's conditions as one [`Filter`]: its time range (half-open here,
    /// converted once to the inclusive [`TimeRange`]), term filters, matchers and `_id`
    /// prefix, all of which must hold.
    pub fn filter(&self) -> Filter {
        let mut all = conditions(self.from, self.to, &self.filters, &self.matchers);
        if let Some(p) = &self.id_prefix {
            all.push(Filter::IdPrefix(p.clone()));
        }
        Filter::And(all)
    }
}

/// The conditions shared by [`Query`] and [`AggQuery`] as filters.
fn conditions(
    from: Option<i64>,
    to: Option<i64>,
    filters: &[(String, String)],
    matchers: &[Filter],
) -> Vec<Filter> {
    let mut all = Vec::new();
    if from.is_some() || to.is_some() {
        let r = TimeRange::half_open(from, to);
        all.push(Filter::Time {
            min: r.first_ms,
            max: r.last_ms,
        });
    }
    all.extend(filters.iter().map(|(field, value)| Filter::Terms {
        field: field.clone(),
        values: vec![value.clone()],
    }));
    all.extend(matchers.iter().cloned());
    all
}

/// A metric aggregation over `[from, to)`: `min`, `max`, `sum`, `count` and `avg` per
/// `interval` bucket (date histogram), and for counters the reset-aware `increase` and
/// `rate`, overall and per series, or per group of series sharing the values of the
/// `group_by` dimensions.
///
/// A time-partitioned index with rollups answers from the coarsest rollup whose
/// resolution divides the interval, over the buckets of sealed partitions the range
/// covers whole, and from raw rows elsewhere: the answer equals the raw computation
/// (set `raw_only` to compare).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
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
    /// Further filters on dimensions (see [`Query::matchers`]); a filter on anything
    /// else (ids, rows' fields) is an [`Error::Query`].
    pub matchers: Vec<Filter>,
    /// Dimensions to group series by (PromQL's `by`); empty: one entry per series.
    pub group_by: Vec<String>,
    /// Read raw rows only, never rollups.
    pub raw_only: bool,
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
    /// Counters: the increase over the bucket (from the last value before it, a drop
    /// counting as a reset to zero); `None` for gauges.
    pub increase: Option<i64>,
    /// Bucket width in milliseconds (for [`rate`](Self::rate)).
    pub width_millis: i64,
}

impl AggQuery {
    /// The aggregation's conditions as one [`Filter`] (see [`Query::filter`]).
    pub fn filter(&self) -> Filter {
        Filter::And(conditions(
            self.from,
            self.to,
            &self.filters,
            &self.matchers,
        ))
    }
}

impl AggBucket {
    fn new(key: i64, width_millis: i64) -> AggBucket {
        AggBucket {
            key,
            count: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            sum: 0.0,
            increase: None,
            width_millis,
        }
    }

    fn add(&mut self, v: f64) {
        self.count += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += v;
    }

    fn add_increase(&mut self, inc: i64) {
        self.increase = Some(self.increase.unwrap_or(0).saturating_add(inc));
    }

    /// Folds another bucket (same key) in.
    fn absorb(&mut self, o: &AggBucket) {
        self.count += o.count;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.sum += o.sum;
        if let Some(i) = o.increase {
            self.add_increase(i);
        }
    }

    /// Counters: the increase per second over the bucket (no extrapolation).
    pub fn rate(&self) -> Option<f64> {
        self.increase
            .map(|i| i as f64 * 1000.0 / self.width_millis.max(1) as f64)
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
        let mut v = json!({
            "key": self.key,
            "key_as_string": format_time(self.key),
            "count": self.count,
            "min": self.min,
            "max": self.max,
            "sum": self.sum,
            "avg": self.avg(),
        });
        if let (Some(inc), Some(rate), Value::Object(o)) = (self.increase, self.rate(), &mut v) {
            o.insert("increase".into(), json!(inc));
            o.insert("rate".into(), json!(rate));
        }
        v
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

/// The buckets of one group of series (see [`AggQuery::group_by`]).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupAgg {
    /// The value of each `group_by` dimension, in request order (`None`: the series
    /// lack it).
    pub key: Vec<(String, Option<Dim>)>,
    /// Series in the group.
    pub series: u64,
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
    /// Buckets per series, by tsid (empty when grouped).
    pub series: Vec<SeriesAgg>,
    /// Buckets per group, by key (empty unless grouped).
    pub groups: Vec<GroupAgg>,
    /// Raw rows read.
    pub raw_rows: u64,
    /// Rollup rows (one series, one bucket of a rollup) read.
    pub rollup_rows: u64,
    /// Time ranges `[from, to]` (inclusive) the answer leaves out: their raw rows were
    /// dropped by retention and no kept rollup answers the interval there (it is not a
    /// multiple of a kept resolution, or the range cuts a bucket). Empty when the answer
    /// covers the whole range asked.
    pub expired: Vec<(i64, i64)>,
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
            "groups": self.groups.iter().map(|g| {
                let mut key = Map::new();
                for (n, d) in &g.key {
                    key.insert(n.clone(), d.as_ref().map_or(Value::Null, dim_json));
                }
                json!({
                    "key": key,
                    "series": g.series,
                    "buckets": g.buckets.iter().map(AggBucket::to_json).collect::<Vec<_>>(),
                })
            }).collect::<Vec<_>>(),
            "read": {"raw_rows": self.raw_rows, "rollup_rows": self.rollup_rows},
            "expired": self.expired.iter().map(|(from, to)| json!({
                "from": format_time(*from),
                "to": format_time(*to),
                "from_ms": from,
                "to_ms": to,
                "reason": "raw data there has expired (retention) and no kept rollup answers this interval: left out",
            })).collect::<Vec<_>>(),
        })
    }
}

/// Rollup documents: per series and bucket of one resolution, as Elasticsearch's
/// downsampled indices hold them (see [`Index::search_rollup`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RollupSearch {
    /// The resolution, milliseconds.
    pub resolution_ms: i64,
    /// The documents, by bucket start (then `_tsid`), at most the limit.
    pub docs: Vec<Value>,
    /// Matching documents before the limit.
    pub total: u64,
    /// Time ranges `[from, to]` (inclusive) left out: their raw rows were dropped by
    /// retention and no kept rollup is as fine as the resolution there.
    pub expired: Vec<(i64, i64)>,
}

/// One rollup document being gathered: dimensions, raw rows, stats by metric.
type RollupAcc = (
    Vec<(String, Dim)>,
    Option<u64>,
    BTreeMap<String, RollupStats>,
);

/// Raw rows of one (bucket, series): dimensions, rows, `(ts, metric, value)`.
type RawBucket = (Vec<(String, Dim)>, u64, Vec<(i64, String, MetricValue)>);

/// A series' dimensions, its buckets by key, and its last counter value so far.
struct SeriesBuckets {
    dims: Vec<(String, Dim)>,
    buckets: BTreeMap<i64, AggBucket>,
    last: Option<i64>,
}

impl SeriesBuckets {
    /// The entry of series `tsid` (made with `dims()` the first time).
    fn of(
        per_series: &mut BTreeMap<Tsid, SeriesBuckets>,
        tsid: Tsid,
        dims: impl FnOnce() -> Vec<(String, Dim)>,
    ) -> &mut SeriesBuckets {
        per_series.entry(tsid).or_insert_with(|| SeriesBuckets {
            dims: dims(),
            buckets: BTreeMap::new(),
            last: None,
        })
    }

    /// Its bucket starting at `key` (made empty the first time).
    fn bucket(&mut self, key: i64, interval: i64) -> &mut AggBucket {
        self.buckets
            .entry(key)
            .or_insert_with(|| AggBucket::new(key, interval))
    }
}

impl Index {
    /// Runs a search; documents come rebuilt as by [`get`](Self::get).
    ///
    /// # Errors
    /// [`Error::Query`] for a filter on an unknown or non-dimension field; segment read
    /// errors.
    pub fn search(&self, query: &Query) -> Result<Vec<Value>> {
        let req = SearchRequest {
            filter: query.filter(),
            size: query.limit.unwrap_or(usize::MAX),
            order: query.order,
            ..SearchRequest::default()
        };
        Ok(self.query(&req)?.hits.into_iter().map(|h| h.doc).collect())
    }

    /// Runs a metric aggregation (see [`AggQuery`]).
    ///
    /// # Errors
    /// [`Error::Query`] for an unknown or non-numeric field, a bad interval, filter or
    /// group-by dimension; segment read errors.
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
        for g in &query.group_by {
            if self.mapping().field(g).map(|f| f.role) != Some(FieldRole::Dimension) {
                return Err(Error::Query {
                    reason: format!("`{g}` is not a dimension: group-by applies to dimensions"),
                });
            }
        }
        let filter = compile(&query.filter(), self.mapping())?;
        if !filter.on_time_and_dims() {
            return Err(Error::Query {
                reason: "an aggregation filters on dimensions and the time range only".to_owned(),
            });
        }
        let range = filter.time_bounds();
        let interval = query.interval_millis;
        let bucket_of = |ts: i64| ts.div_euclid(interval) * interval;
        let store = self.engine();
        // No interval is a multiple of 0: raw rows everywhere, and what has none.
        let step = if query.raw_only { 0 } else { interval };
        let pieces = self.read_plan(range.first_ms, range.last_ms, step);
        let mut per_series: BTreeMap<Tsid, SeriesBuckets> = BTreeMap::new();
        let (mut raw_rows, mut rollup_rows) = (0u64, 0u64);
        let mut expired = Vec::new();
        for piece in &pieces {
            match *piece {
                Piece::Expired { from, to } => expired.push((from, to)),
                Piece::Raw { from, to } => {
                    // A counter's increase needs each series' values in time order; a
                    // partition's rows come so only once it is merged: sorted here.
                    let mut counters: Vec<(Tsid, i64, i64)> = Vec::new();
                    self.scan_compiled(&filter, from, to, &mut |p, _| {
                        let Some((_, v)) = p.metrics.iter().find(|(n, _)| *n == query.metric)
                        else {
                            return;
                        };
                        raw_rows += 1;
                        let v = *v;
                        let tsid = p.tsid;
                        let series = SeriesBuckets::of(&mut per_series, tsid, || p.dims);
                        let b = series.bucket(bucket_of(p.ts_millis), interval);
                        match v {
                            MetricValue::Gauge(f) => b.add(f),
                            MetricValue::Counter(i) => {
                                b.add(i as f64);
                                counters.push((tsid, p.ts_millis, i));
                            }
                        }
                    })?;
                    counters.sort_unstable_by_key(|c| (c.0, c.1));
                    for (tsid, ts, v) in counters {
                        if let Some(s) = per_series.get_mut(&tsid) {
                            let inc = s.last.map_or(0, |prev| counter_step(prev, v));
                            s.last = Some(v);
                            if let Some(b) = s.buckets.get_mut(&bucket_of(ts)) {
                                b.add_increase(inc);
                            }
                        }
                    }
                }
                Piece::Rollup { from, to, .. } => {
                    store.search(from, to).rollup_stats(
                        piece,
                        &query.metric,
                        |_, dims| filter.may_match(dims),
                        |tsid, dims, start, st| {
                            rollup_rows += 1;
                            let series =
                                SeriesBuckets::of(&mut per_series, *tsid, || dims.to_vec());
                            let edge = st.counter.map(|c| {
                                let edge =
                                    series.last.map_or(0, |prev| counter_step(prev, c.first));
                                series.last = Some(c.last);
                                edge.saturating_add(c.increase)
                            });
                            let b = series.bucket(bucket_of(start), interval);
                            b.count += st.count;
                            b.min = b.min.min(st.min);
                            b.max = b.max.max(st.max);
                            b.sum += st.sum;
                            if let Some(inc) = edge {
                                b.add_increase(inc);
                            }
                        },
                    )?;
                }
            }
        }
        // Totals and groups fold the series in tsid order, whichever pieces were read,
        // so that rollups and raw rows give the same sums.
        let mut total: BTreeMap<i64, AggBucket> = BTreeMap::new();
        let mut groups: BTreeMap<Vec<Option<String>>, GroupAgg> = BTreeMap::new();
        for s in per_series.values() {
            for b in s.buckets.values() {
                total
                    .entry(b.key)
                    .or_insert_with(|| AggBucket::new(b.key, interval))
                    .absorb(b);
            }
            if !query.group_by.is_empty() {
                let key: Vec<Option<&Dim>> = query
                    .group_by
                    .iter()
                    .map(|g| s.dims.iter().find(|(n, _)| n == g).map(|(_, d)| d))
                    .collect();
                let text: Vec<Option<String>> = key.iter().map(|d| d.map(Dim::text)).collect();
                let g = groups.entry(text).or_insert_with(|| GroupAgg {
                    key: query
                        .group_by
                        .iter()
                        .cloned()
                        .zip(key.iter().map(|d| d.cloned()))
                        .collect(),
                    series: 0,
                    buckets: Vec::new(),
                });
                g.series += 1;
                merge_buckets(&mut g.buckets, s.buckets.values(), interval);
            }
        }
        let grouped = !query.group_by.is_empty();
        Ok(AggResult {
            metric: query.metric.clone(),
            interval_millis: interval,
            buckets: total.into_values().collect(),
            series: if grouped {
                Vec::new()
            } else {
                per_series
                    .into_iter()
                    .map(|(tsid, s)| SeriesAgg {
                        tsid,
                        dims: s.dims,
                        buckets: s.buckets.into_values().collect(),
                    })
                    .collect()
            },
            groups: groups.into_values().collect(),
            raw_rows,
            rollup_rows,
            expired,
        })
    }
}

impl Index {
    /// Searches the rollup documents of resolution `resolution_ms` (one of the index's
    /// rollups): one document per series and bucket whose start is in the query's time
    /// range, with the series' dimensions, the timestamp field set to the bucket start,
    /// `_tsid`, `_doc_count` (raw documents in the bucket) and per metric an object:
    /// `min`, `max`, `sum`, `value_count` for gauges; `first`, `last`, `increase`
    /// (reset-aware) and `value_count` for counters. Sealed partitions answer from their
    /// rollup at that resolution, partitions past the raw retention from a kept rollup
    /// as fine or finer (folded), active partitions from their raw rows (computed the
    /// same way): the documents are the same whichever answers. Filters and matchers
    /// select series through the rollups' dimension indexes; `id_prefix` does not
    /// apply.
    ///
    /// # Errors
    /// [`Error::Query`] for an index without that rollup, an `_id` prefix, bad filters;
    /// segment read errors.
    pub fn search_rollup(&self, query: &Query, resolution_ms: i64) -> Result<RollupSearch> {
        if query.id_prefix.is_some() {
            return Err(Error::Query {
                reason: "an `_id` prefix does not apply to rollup documents".to_owned(),
            });
        }
        let filter = compile(&query.filter(), self.mapping())?;
        let (found, _) = self.rollup_docs(
            filter.time_bounds(),
            resolution_ms,
            &filter,
            query.order,
            query.limit,
        )?;
        Ok(found)
    }

    /// The rollup documents of `resolution_ms` with bucket starts in `range` of the
    /// series `filter` (on dimensions and time) accepts, and each document's bucket
    /// start and `_id`.
    pub(crate) fn rollup_docs(
        &self,
        range: TimeRange,
        resolution_ms: i64,
        filter: &Compiled,
        order: Order,
        limit: Option<usize>,
    ) -> Result<(RollupSearch, Vec<(i64, String)>)> {
        if !filter.on_time_and_dims() {
            return Err(Error::Query {
                reason:
                    "a search of rollup documents filters on dimensions and the time range only"
                        .to_owned(),
            });
        }
        let res = resolution_ms;
        let store = self.engine();
        let configured = store
            .partition_config()
            .map(|c| c.rollups().to_vec())
            .unwrap_or_default();
        if !configured.contains(&res) {
            return Err(Error::Query {
                reason: format!(
                    "no rollup at {res} ms: the index's rollups are {:?} ms{}",
                    configured,
                    if store.is_partitioned() {
                        ""
                    } else {
                        " (it is not partitioned)"
                    }
                ),
            });
        }
        let mut out = RollupSearch {
            resolution_ms: res,
            docs: Vec::new(),
            total: 0,
            expired: Vec::new(),
        };
        // Buckets starting in [from, to].
        // In i128: the bucket before i64::MIN does not fit an i64.
        let r = i128::from(res);
        let ceil = (i128::from(range.first_ms) + r - 1).div_euclid(r) * r;
        let first = i64::try_from(ceil).unwrap_or(i64::MAX);
        let last = i64::try_from(i128::from(range.last_ms).div_euclid(r) * r).unwrap_or(i64::MIN);
        if first > last {
            return Ok((out, Vec::new()));
        }
        let mut docs: BTreeMap<(i64, Tsid), RollupAcc> = BTreeMap::new();
        let mut raw: BTreeMap<(i64, Tsid), RawBucket> = BTreeMap::new();
        for piece in self.read_plan(first, last.saturating_add(res - 1), res) {
            match piece {
                Piece::Expired { from, to } => out.expired.push((from, to)),
                Piece::Rollup { .. } => self.read_rollup(
                    &piece,
                    |_, dims| filter.may_match(dims),
                    |p| filter.select(p),
                    |row| {
                        // A finer kept rollup folds into the resolution, in time order.
                        let key = (row.bucket_ms.div_euclid(res) * res, *row.tsid);
                        let slot = docs
                            .entry(key)
                            .or_insert_with(|| (row.dims.to_vec(), Some(0), BTreeMap::new()));
                        slot.1 = match (slot.1, row.doc_count) {
                            (Some(a), Some(b)) => Some(a + b),
                            _ => None,
                        };
                        for (m, st) in row.metrics {
                            match slot.2.get_mut(&m) {
                                Some(s) => s.then(&st),
                                None => {
                                    slot.2.insert(m, st);
                                }
                            }
                        }
                    },
                )?,
                Piece::Raw { from, to } => {
                    let mut on_row = |p: Point, _: Option<(&tidemark_segment::Segment, _)>| {
                        let key = (p.ts_millis.div_euclid(res) * res, p.tsid);
                        let slot = raw.entry(key).or_insert_with(|| (p.dims, 0, Vec::new()));
                        let ts = p.ts_millis;
                        slot.1 += 1;
                        slot.2
                            .extend(p.metrics.into_iter().map(|(m, v)| (ts, m, v)));
                    };
                    self.scan_compiled(filter, from, to, &mut on_row)?;
                }
            }
        }
        // Raw buckets: values in timestamp order, as a rollup is built.
        for (key, (dims, rows, mut values)) in raw {
            values.sort_by_key(|v| v.0);
            let mut stats: BTreeMap<String, RollupStats> = BTreeMap::new();
            for (_, m, v) in values {
                match stats.get_mut(&m) {
                    Some(s) => s.add(v),
                    None => {
                        stats.insert(m, RollupStats::of(v));
                    }
                }
            }
            docs.insert(key, (dims, Some(rows), stats));
        }
        out.total = docs.len() as u64;
        let keep = limit.unwrap_or(usize::MAX);
        let mapping = self.mapping();
        let mut keys = Vec::new();
        let mut doc_of = |(bucket, tsid): &(i64, Tsid), acc: &RollupAcc| -> Value {
            // The `_id` of a rollup document: its series and bucket start.
            let id = SyntheticId::new(*tsid, *bucket).to_string();
            let doc = rollup_doc(mapping, *bucket, tsid, &id, res, acc);
            keys.push((*bucket, id));
            doc
        };
        out.docs = match order {
            Order::Asc => docs.iter().take(keep).map(|(k, a)| doc_of(k, a)).collect(),
            Order::Desc => docs
                .iter()
                .rev()
                .take(keep)
                .map(|(k, a)| doc_of(k, a))
                .collect(),
        };
        Ok((out, keys))
    }

    /// The time ranges `[from, to]` (inclusive) within `range` whose raw rows retention
    /// has dropped (partitions that keep only rollups): raw documents there are gone,
    /// so a search of them answers without those ranges.
    pub fn expired_ranges(&self, range: TimeRange) -> Vec<(i64, i64)> {
        self.expired_in(range.first_ms, range.last_ms)
    }

    /// The dimension names of the series with data in `range` (what a query UI lists
    /// in its drop-downs), from each segment's dimension index.
    ///
    /// # Errors
    /// Segment read errors.
    pub fn labels(&self, range: TimeRange) -> Result<Vec<String>> {
        Ok(self
            .engine()
            .search(range.first_ms, range.last_ms)
            .label_names()?
            .into_iter()
            .collect())
    }

    /// The values of dimension `name` in `range`, sorted, each with the number of
    /// series that have it (summed over segments: a series stored in several segments
    /// or partitions counts in each).
    ///
    /// # Errors
    /// [`Error::Query`] when `name` is not a dimension; segment read errors.
    pub fn label_values(&self, name: &str, range: TimeRange) -> Result<Vec<(String, u64)>> {
        dimension_field(self.mapping(), name, "label")?;
        Ok(self
            .engine()
            .search(range.first_ms, range.last_ms)
            .label_values(name)?
            .into_iter()
            .collect())
    }
}

/// A rollup document (see [`Index::search_rollup`]).
fn rollup_doc(
    mapping: &Mapping,
    bucket: i64,
    tsid: &Tsid,
    id: &str,
    res: i64,
    acc: &RollupAcc,
) -> Value {
    let (dims, rows, stats) = acc;
    let mut root = Map::new();
    root.insert("_id".to_owned(), Value::String(id.to_owned()));
    root.insert("_tsid".to_owned(), Value::String(tsid.to_string()));
    let ts_field = mapping.timestamp_field();
    let ts = if mapping.field(ts_field).is_some_and(|f| f.epoch_millis) {
        Value::from(bucket)
    } else {
        Value::String(format_time(bucket))
    };
    crate::doc::insert_path(&mut root, ts_field, ts);
    root.insert("_rollup_interval_ms".to_owned(), json!(res));
    if let Some(n) = rows {
        root.insert("_doc_count".to_owned(), json!(n));
    }
    for (n, d) in dims {
        crate::doc::insert_path(&mut root, n, dim_json(d));
    }
    for (m, s) in stats {
        let v = match s.counter {
            Some(c) => json!({
                "first": c.first,
                "last": c.last,
                "increase": c.increase,
                "value_count": s.count,
            }),
            None => json!({
                "min": s.min,
                "max": s.max,
                "sum": s.sum,
                "value_count": s.count,
            }),
        };
        crate::doc::insert_path(&mut root, m, v);
    }
    Value::Object(root)
}

/// Folds `add` (sorted by key) into `into` (sorted by key).
fn merge_buckets<'a>(
    into: &mut Vec<AggBucket>,
    add: impl Iterator<Item = &'a AggBucket>,
    interval: i64,
) {
    let mut map: BTreeMap<i64, AggBucket> = into.drain(..).map(|b| (b.key, b)).collect();
    for b in add {
        map.entry(b.key)
            .or_insert_with(|| AggBucket::new(b.key, interval))
            .absorb(b);
    }
    into.extend(map.into_values());
}
