//! General queries: hits sorted by timestamp with paging, and nested bucket
//! aggregations (date histograms with fixed or calendar intervals, terms on a
//! dimension) with metric leaves (min, max, avg, sum, value_count, cardinality), over
//! the one filter model of [`crate::filter`]. Protocol layers (the HTTP server's query
//! DSL, the CLI's `search`) translate into these types.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;
use tidemark_dedup::{Piece, RollupStats};
use tidemark_segment::{Dim, MetricValue, Point};

use crate::doc::{dim_json, point_to_doc};
use crate::error::{Error, Result};
use crate::filter::{Compiled, Filter, TimeRange, compile, query_error};
use crate::index::Index;
use crate::mapping::{FieldRole, IndexMode, Mapping};
use crate::read::rollup_step;
use crate::search::Order;
use crate::time::{civil_from_days, days_from_civil};

/// A date-histogram interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    /// A fixed width in milliseconds.
    Fixed(i64),
    /// A calendar unit, in UTC.
    Calendar(CalendarUnit),
}

/// Calendar units of a `calendar_interval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CalendarUnit {
    /// A minute.
    Minute,
    /// An hour.
    Hour,
    /// A day (UTC).
    Day,
    /// An ISO week, starting on Monday.
    Week,
    /// A calendar month.
    Month,
    /// A quarter (January, April, July, October).
    Quarter,
    /// A calendar year.
    Year,
}

impl Interval {
    /// The start of the bucket holding `ts` (saturated at `i64::MIN` for a start before
    /// it).
    pub fn bucket_start(self, ts: i64) -> i64 {
        const DAY: i64 = 86_400_000;
        match self {
            Interval::Calendar(
                CalendarUnit::Month | CalendarUnit::Quarter | CalendarUnit::Year,
            ) => {
                let months = self.index(ts);
                let step = self.months().unwrap_or(1);
                let total = months.saturating_mul(step);
                days_from_civil(total.div_euclid(12), total.rem_euclid(12) + 1, 1)
                    .saturating_mul(DAY)
            }
            _ => self
                .index(ts)
                .saturating_mul(self.width_millis().unwrap_or(1))
                .saturating_add(self.offset_millis()),
        }
    }

    /// The start of the bucket after the one starting at `start` (saturated at
    /// `i64::MAX` for a start after it).
    pub fn next_start(self, start: i64) -> i64 {
        const DAY: i64 = 86_400_000;
        let next = self.index(start).saturating_add(1);
        match self.months() {
            Some(step) => {
                let total = next.saturating_mul(step);
                days_from_civil(total.div_euclid(12), total.rem_euclid(12) + 1, 1)
                    .saturating_mul(DAY)
            }
            None => next
                .saturating_mul(self.width_millis().unwrap_or(1))
                .saturating_add(self.offset_millis()),
        }
    }

    /// How many buckets the range from the bucket holding `lo` to the one holding `hi`
    /// spans (0 when `hi < lo`): what an empty-bucket walk would create, computed
    /// without walking.
    fn buckets_between(self, lo: i64, hi: i64) -> u128 {
        if hi < lo {
            return 0;
        }
        // Bucket numbers grow with time; in i128, the difference of two cannot overflow.
        let (a, b) = (i128::from(self.index(lo)), i128::from(self.index(hi)));
        u128::try_from(b - a + 1).unwrap_or(0)
    }

    /// The number of the bucket holding `ts`, counted from the one starting at the epoch
    /// (for weeks, at the first Monday after it; for months, quarters and years, at
    /// year 0).
    fn index(self, ts: i64) -> i64 {
        const DAY: i64 = 86_400_000;
        match self.months() {
            Some(step) => {
                let (y, m, _) = civil_from_days(ts.div_euclid(DAY));
                y.saturating_mul(12).saturating_add(m - 1).div_euclid(step)
            }
            None => ts
                .saturating_sub(self.offset_millis())
                .div_euclid(self.width_millis().unwrap_or(1)),
        }
    }

    /// The width of a bucket that has one.
    fn width_millis(self) -> Option<i64> {
        Some(match self {
            Interval::Fixed(w) => w.max(1),
            Interval::Calendar(CalendarUnit::Minute) => 60_000,
            Interval::Calendar(CalendarUnit::Hour) => 3_600_000,
            Interval::Calendar(CalendarUnit::Day) => 86_400_000,
            Interval::Calendar(CalendarUnit::Week) => 7 * 86_400_000,
            Interval::Calendar(_) => return None,
        })
    }

    /// Where fixed-width buckets start: weeks on Mondays (1970-01-01 was a Thursday,
    /// so Mondays are 4 days later modulo 7), everything else on the epoch.
    fn offset_millis(self) -> i64 {
        match self {
            Interval::Calendar(CalendarUnit::Week) => 4 * 86_400_000,
            _ => 0,
        }
    }

    /// The months in a calendar-month, quarter or year bucket.
    fn months(self) -> Option<i64> {
        match self {
            Interval::Calendar(CalendarUnit::Month) => Some(1),
            Interval::Calendar(CalendarUnit::Quarter) => Some(3),
            Interval::Calendar(CalendarUnit::Year) => Some(12),
            _ => None,
        }
    }
}

/// A metric aggregation kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Smallest value.
    Min,
    /// Largest value.
    Max,
    /// Mean.
    Avg,
    /// Sum.
    Sum,
    /// Number of values.
    ValueCount,
    /// Number of distinct values (exact).
    Cardinality,
}

/// An aggregation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Agg {
    /// Buckets by timestamp.
    DateHistogram {
        /// The bucket width.
        interval: Interval,
        /// Buckets with fewer documents are left out; 0 fills the gaps (and the
        /// `extended_bounds`) with empty buckets.
        min_doc_count: u64,
        /// Buckets to show at least from `min` to `max` (with `min_doc_count` 0).
        extended_bounds: Option<(i64, i64)>,
        /// Sub-aggregations per bucket.
        aggs: Vec<(String, Agg)>,
    },
    /// Buckets by the value of a dimension, largest first.
    Terms {
        /// The dimension.
        field: String,
        /// At most this many buckets.
        size: usize,
        /// Buckets with fewer documents are left out.
        min_doc_count: u64,
        /// Sub-aggregations per bucket.
        aggs: Vec<(String, Agg)>,
    },
    /// One value over the documents.
    Metric {
        /// What to compute.
        kind: MetricKind,
        /// The metric or numeric field (any field for `cardinality` and `value_count`).
        field: String,
    },
}

/// A bucket key.
#[derive(Debug, Clone, PartialEq)]
pub enum BucketKey {
    /// A date-histogram bucket start (epoch milliseconds).
    Time(i64),
    /// A dimension value, as JSON (string, number or boolean).
    Term(Value),
}

/// One bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// The key.
    pub key: BucketKey,
    /// Documents in the bucket.
    pub doc_count: u64,
    /// The sub-aggregations, in request order.
    pub aggs: Vec<(String, AggOutput)>,
}

/// The result of an [`Agg`].
#[derive(Debug, Clone, PartialEq)]
pub enum AggOutput {
    /// Buckets (date histogram, terms), with the documents in buckets left out by `size`.
    Buckets {
        /// The buckets.
        buckets: Vec<Bucket>,
        /// Documents in terms buckets beyond `size`.
        sum_other_doc_count: u64,
    },
    /// A metric value; `None` for min/max/avg over no value.
    Value(Option<f64>),
}

/// The most buckets an aggregation answer may hold unless a request sets its own
/// ([`SearchRequest::max_buckets`]): Elasticsearch's `search.max_buckets` default.
///
/// Every bucket of the answer counts, at every level of nesting: the empty buckets a
/// `date_histogram` with `min_doc_count` 0 fills in (between the data and to its
/// `extended_bounds`), the buckets with enough documents otherwise, and the kept
/// `terms` buckets (at most `size`). A request whose answer would hold more fails with
/// [`Error::TooManyBuckets`] before those buckets are built; the width of a filled
/// range comes from the arithmetic (range / interval), so a doomed answer costs no
/// memory. The answer is never cut short.
pub const DEFAULT_MAX_BUCKETS: u64 = 65_536;

/// A query: filter, paging and sort of hits, aggregations.
///
/// On a time-partitioned index with rollups, a request for aggregations only (`size`
/// 0) of date histograms with `min`, `max`, `avg`, `sum` and `value_count` of metrics,
/// filtered on dimensions and time, reads the coarsest rollup whose resolution fits
/// every histogram bucket where one exists (sealed partitions, buckets the range covers
/// whole) and raw rows elsewhere: doc counts, counts, minima and maxima equal the raw
/// answer, sums within floating-point rounding (set `raw_only` to compare).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchRequest {
    /// Which documents.
    pub filter: Filter,
    /// Hits to return (0: count and aggregate only).
    pub size: usize,
    /// Hits to skip.
    pub from: usize,
    /// Hit order by timestamp (then `_id`).
    pub order: Order,
    /// Aggregations, in request order.
    pub aggs: Vec<(String, Agg)>,
    /// Hits are the rollup documents of this resolution (milliseconds; see
    /// [`Index::search_rollup`]) instead of raw documents; `total` counts them. The
    /// filter may then look at dimensions and the time range only.
    pub rollup: Option<i64>,
    /// Aggregate raw rows only, never rollups (to compare).
    pub raw_only: bool,
    /// The most buckets the aggregations' answer may hold (see [`DEFAULT_MAX_BUCKETS`],
    /// the default); more is [`Error::TooManyBuckets`], never a shortened answer.
    pub max_buckets: u64,
    /// Hits start after this position in the hit order (Elasticsearch's
    /// `search_after`); `total` and the aggregations still cover every match.
    pub search_after: Option<SearchAfter>,
}

/// A position in the hit order, `(timestamp, _id)` ascending or descending: the hits
/// of a [`SearchRequest`] with `search_after` are those strictly after it. With `id`
/// `None` the position is before every hit at `ts_millis`, so all of them come after
/// it. Since `(timestamp, _id)` is unique, paging with the last hit of each page as the
/// next cursor neither skips nor repeats a hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchAfter {
    /// The timestamp of the position.
    pub ts_millis: i64,
    /// The `_id` at that timestamp (`None`: before every hit there).
    pub id: Option<String>,
}

impl SearchAfter {
    /// Whether a hit at `(ts, id)` comes after this position in `order`.
    pub fn admits(&self, order: Order, ts: i64, id: &str) -> bool {
        match order {
            Order::Asc => {
                ts > self.ts_millis
                    || (ts == self.ts_millis && self.id.as_deref().is_none_or(|c| id > c))
            }
            Order::Desc => {
                ts < self.ts_millis
                    || (ts == self.ts_millis && self.id.as_deref().is_none_or(|c| id < c))
            }
        }
    }
}

impl Default for SearchRequest {
    fn default() -> Self {
        SearchRequest {
            filter: Filter::All,
            size: 10,
            from: 0,
            order: Order::Asc,
            aggs: Vec::new(),
            rollup: None,
            raw_only: false,
            max_buckets: DEFAULT_MAX_BUCKETS,
            search_after: None,
        }
    }
}

/// One hit.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The `_id`.
    pub id: String,
    /// The timestamp.
    pub ts_millis: i64,
    /// The document, rebuilt as by [`Index::get`].
    pub doc: Value,
}

/// The answer to a [`SearchRequest`].
#[derive(Debug, Clone, PartialEq)]
pub struct SearchResult {
    /// Matching documents (exact).
    pub total: u64,
    /// The requested page of hits.
    pub hits: Vec<Hit>,
    /// The aggregations, in request order.
    pub aggs: Vec<(String, AggOutput)>,
    /// Raw rows read: those of the series the filter's dimension terms select through
    /// each segment's dimension index (all rows in the time range when it has none).
    pub rows_scanned: u64,
    /// Rollup rows read (aggregations answered from rollups).
    pub rollup_rows: u64,
    /// Time ranges `[from, to]` (inclusive) the answer leaves out: their raw rows were
    /// dropped by retention and no kept rollup answers there.
    pub expired: Vec<(i64, i64)>,
}

/// Where a metric leaf reads its values.
#[derive(Clone, Copy)]
enum Source {
    Metric,
    Dim,
    Timestamp,
}

/// A running aggregation.
enum Acc {
    Hist {
        interval: Interval,
        min_doc_count: u64,
        bounds: Option<(i64, i64)>,
        subs: Vec<(String, Agg)>,
        buckets: BTreeMap<i64, (u64, Vec<Acc>)>,
    },
    Terms {
        field: String,
        size: usize,
        min_doc_count: u64,
        subs: Vec<(String, Agg)>,
        buckets: HashMap<String, (Value, u64, Vec<Acc>)>,
    },
    Metric {
        kind: MetricKind,
        field: String,
        source: Source,
        count: u64,
        sum: f64,
        min: f64,
        max: f64,
        distinct: HashSet<String>,
    },
}

fn check_agg(agg: &Agg, m: &Mapping) -> Result<()> {
    match agg {
        Agg::DateHistogram { interval, aggs, .. } => {
            if let Interval::Fixed(w) = interval
                && *w <= 0
            {
                return Err(query_error(
                    "the date_histogram interval must be positive".into(),
                ));
            }
            aggs.iter().try_for_each(|(_, a)| check_agg(a, m))
        }
        Agg::Terms { field, aggs, .. } => {
            match m.field(field).map(|f| f.role) {
                Some(FieldRole::Dimension) => {}
                Some(_) => {
                    return Err(query_error(format!(
                        "terms aggregations apply to dimensions; [{field}] is not a dimension"
                    )));
                }
                None => {
                    return Err(query_error(format!(
                        "unknown field [{field}] in a terms aggregation"
                    )));
                }
            }
            aggs.iter().try_for_each(|(_, a)| check_agg(a, m))
        }
        Agg::Metric { kind, field } => {
            let role = m.field(field).map(|f| f.role);
            match (kind, role) {
                (_, Some(FieldRole::Metric(_) | FieldRole::Value | FieldRole::Timestamp)) => Ok(()),
                (MetricKind::Cardinality | MetricKind::ValueCount, Some(FieldRole::Dimension)) => {
                    Ok(())
                }
                (_, None) => Err(query_error(format!(
                    "unknown field [{field}] in a metric aggregation"
                ))),
                (_, Some(_)) => Err(query_error(format!(
                    "a {kind:?} aggregation on [{field}] is not supported: it needs a metric or numeric field"
                ))),
            }
        }
    }
}

impl Acc {
    fn new(agg: &Agg, m: &Mapping) -> Acc {
        Acc::build(agg, false, |field| match m.field(field).map(|f| f.role) {
            Some(FieldRole::Dimension) => Source::Dim,
            Some(FieldRole::Timestamp) => Source::Timestamp,
            _ => Source::Metric,
        })
    }

    /// An accumulator with nothing added (for empty histogram buckets).
    fn empty(agg: &Agg) -> Acc {
        Acc::build(agg, true, |_| Source::Metric)
    }

    /// The accumulator of `agg`, its metric leaves reading from `source`; an `empty`
    /// histogram fills no buckets of its own (nothing lies inside an empty bucket).
    fn build(agg: &Agg, empty: bool, source: impl Fn(&str) -> Source) -> Acc {
        match agg {
            Agg::DateHistogram {
                interval,
                min_doc_count,
                extended_bounds,
                aggs,
            } => Acc::Hist {
                interval: *interval,
                min_doc_count: if empty { 1 } else { *min_doc_count },
                bounds: *extended_bounds,
                subs: aggs.clone(),
                buckets: BTreeMap::new(),
            },
            Agg::Terms {
                field,
                size,
                min_doc_count,
                aggs,
            } => Acc::Terms {
                field: field.clone(),
                size: *size,
                min_doc_count: *min_doc_count,
                subs: aggs.clone(),
                buckets: HashMap::new(),
            },
            Agg::Metric { kind, field } => Acc::Metric {
                kind: *kind,
                field: field.clone(),
                source: source(field),
                count: 0,
                sum: 0.0,
                min: f64::INFINITY,
                max: f64::NEG_INFINITY,
                distinct: HashSet::new(),
            },
        }
    }

    /// Adds a document; returns the buckets it created, at every level: the document as
    /// a series of one row ([`add_series`](Self::add_series), the one implementation).
    fn add(&mut self, p: &Point, m: &Mapping) -> u64 {
        let cols: Vec<(&str, tidemark_segment::ColumnSamples)> = p
            .metrics
            .iter()
            .map(|(n, v)| {
                let mut c = tidemark_segment::ColumnSamples::default();
                c.push(
                    p.ts_millis,
                    match *v {
                        MetricValue::Gauge(f) => f,
                        MetricValue::Counter(i) => i as f64,
                    },
                );
                (n.as_str(), c)
            })
            .collect();
        let named: Vec<(&str, &tidemark_segment::ColumnSamples)> =
            cols.iter().map(|(n, c)| (*n, c)).collect();
        self.add_series(&p.dims, &[p.ts_millis], &named, m)
    }

    /// Adds the documents of one series at once, as the column reads give them: `rows`
    /// their timestamps (ascending), `cols` the metric columns the leaves read (each a
    /// subset of the rows, by timestamp), `dims` the series' dimensions. The same
    /// counts, buckets and per-bucket value sequence as adding each document with
    /// [`add`](Self::add) in timestamp order, with one bucket lookup per run of
    /// documents instead of one per document. Returns the buckets it created.
    fn add_series(
        &mut self,
        dims: &[(String, Dim)],
        rows: &[i64],
        cols: &[(&str, &tidemark_segment::ColumnSamples)],
        m: &Mapping,
    ) -> u64 {
        let (Some(&lo), Some(&hi)) = (rows.first(), rows.last()) else {
            return 0;
        };
        match self {
            Acc::Hist {
                interval,
                subs,
                buckets,
                ..
            } => {
                let mut created = 0;
                let mut i = 0usize;
                while let Some(&t) = rows.get(i) {
                    let key = interval.bucket_start(t);
                    let next = interval.next_start(key);
                    let rest = rows.get(i..).unwrap_or(&[]);
                    let j = i + rest.partition_point(|&x| x < next).max(1);
                    let run = rows.get(i..j).unwrap_or(&[]);
                    let slot = buckets.entry(key).or_insert_with(|| {
                        created += 1;
                        (0, subs.iter().map(|(_, a)| Acc::new(a, m)).collect())
                    });
                    slot.0 += run.len() as u64;
                    created += slot
                        .1
                        .iter_mut()
                        .map(|a| a.add_series(dims, run, cols, m))
                        .sum::<u64>();
                    i = j;
                }
                created
            }
            Acc::Terms {
                field,
                subs,
                buckets,
                ..
            } => {
                let Some((_, d)) = dims.iter().find(|(n, _)| n == field) else {
                    return 0;
                };
                let mut created = 0;
                let slot = buckets.entry(d.text()).or_insert_with(|| {
                    created = 1;
                    (
                        dim_json(d),
                        0,
                        subs.iter().map(|(_, a)| Acc::new(a, m)).collect(),
                    )
                });
                slot.1 += rows.len() as u64;
                created
                    + slot
                        .2
                        .iter_mut()
                        .map(|a| a.add_series(dims, rows, cols, m))
                        .sum::<u64>()
            }
            Acc::Metric {
                kind,
                field,
                source,
                count,
                sum,
                min,
                max,
                distinct,
            } => {
                let mut add = |v: f64, text: Option<String>| {
                    *count += 1;
                    if *kind == MetricKind::Cardinality {
                        distinct.insert(text.unwrap_or_else(|| v.to_bits().to_string()));
                    }
                    *sum += v;
                    *min = min.min(v);
                    *max = max.max(v);
                };
                match source {
                    Source::Timestamp => rows.iter().for_each(|&t| add(t as f64, None)),
                    Source::Dim => {
                        let Some((_, d)) = dims.iter().find(|(n, _)| n == field) else {
                            return 0;
                        };
                        let text = d.text();
                        match dim_number(d) {
                            Some(v) => rows.iter().for_each(|_| add(v, Some(text.clone()))),
                            // A keyword: counted (and distinct), no number.
                            None => {
                                *count += rows.len() as u64;
                                if *kind == MetricKind::Cardinality {
                                    distinct.insert(text);
                                }
                            }
                        }
                    }
                    Source::Metric => {
                        let Some((_, c)) = cols.iter().find(|(n, _)| *n == field.as_str()) else {
                            return 0;
                        };
                        let a = c.ts.partition_point(|&t| t < lo);
                        let b = c.ts.partition_point(|&t| t <= hi);
                        for &v in c.values.get(a..b).unwrap_or(&[]) {
                            add(v, None);
                        }
                    }
                }
                0
            }
        }
    }

    /// Adds a rollup row: `doc_count` raw documents of one series in the rollup bucket
    /// starting at `bucket` (which lies inside one histogram bucket), with the stats of
    /// each metric. Returns the buckets it created, at every level.
    fn add_rollup(&mut self, bucket: i64, doc_count: u64, stats: &[(String, RollupStats)]) -> u64 {
        match self {
            Acc::Hist {
                interval,
                subs,
                buckets,
                ..
            } => {
                let key = interval.bucket_start(bucket);
                let mut created = 0;
                let slot = buckets.entry(key).or_insert_with(|| {
                    created = 1;
                    (0, subs.iter().map(|(_, a)| Acc::empty(a)).collect())
                });
                slot.0 += doc_count;
                created
                    + slot
                        .1
                        .iter_mut()
                        .map(|a| a.add_rollup(bucket, doc_count, stats))
                        .sum::<u64>()
            }
            Acc::Metric {
                field,
                count,
                sum,
                min,
                max,
                ..
            } => {
                if let Some((_, st)) = stats.iter().find(|(n, _)| n == field) {
                    *count += st.count;
                    *sum += st.sum;
                    *min = min.min(st.min);
                    *max = max.max(st.max);
                }
                0
            }
            // Not planned on rollups (see `rollup_alignment`).
            Acc::Terms { .. } => 0,
        }
    }

    /// A lower bound of the buckets [`finish`](Self::finish) will build, at every
    /// level, from what was added so far (adding more never lowers it): the filled
    /// width of a `min_doc_count` 0 histogram, buckets that already have
    /// `min_doc_count` documents, kept terms. Checked while collecting, so that a
    /// doomed answer stops growing.
    fn lower_bound(&self) -> u128 {
        let subs = |accs: &[Acc]| {
            accs.iter()
                .map(Acc::lower_bound)
                .fold(0, u128::saturating_add)
        };
        match self {
            Acc::Hist {
                interval,
                min_doc_count,
                bounds,
                buckets,
                ..
            } => {
                let kept = buckets.values().filter(|(c, _)| *c >= *min_doc_count);
                let (n, nested) = kept.fold((0u128, 0u128), |(n, nested), (_, accs)| {
                    (n + 1, nested.saturating_add(subs(accs)))
                });
                let n = if *min_doc_count == 0 {
                    fill_range(*interval, buckets, *bounds)
                        .map_or(0, |(lo, hi)| interval.buckets_between(lo, hi))
                } else {
                    n
                };
                n.saturating_add(nested)
            }
            Acc::Terms {
                size,
                min_doc_count,
                buckets,
                ..
            } => {
                let kept = buckets
                    .values()
                    .filter(|(_, c, _)| *c >= (*min_doc_count).max(1));
                let (n, nested) = kept.fold((0u128, 0u128), |(n, nested), (_, _, accs)| {
                    (n + 1, nested.saturating_add(subs(accs)))
                });
                let size = u128::try_from(*size).unwrap_or(u128::MAX);
                // Beyond `size`, which terms are kept (and so whose sub-buckets count)
                // is known only at the end.
                if n <= size {
                    n.saturating_add(nested)
                } else {
                    size
                }
            }
            Acc::Metric { .. } => 0,
        }
    }

    /// The answer, each level's buckets taken from `budget` before they are built.
    fn finish(self, budget: &mut Budget) -> Result<AggOutput> {
        Ok(match self {
            Acc::Hist {
                interval,
                min_doc_count,
                bounds,
                subs,
                mut buckets,
            } => {
                let mut out = Vec::new();
                if min_doc_count == 0 {
                    if let Some((lo, hi)) = fill_range(interval, &buckets, bounds) {
                        // Every bucket from the first to the last, empty ones filled in:
                        // counted first, so that a doomed walk never starts.
                        let n = interval.buckets_between(lo, hi);
                        budget.take(n)?;
                        let mut k = lo;
                        for i in 0..n {
                            let (count, accs) = buckets.remove(&k).unwrap_or_else(|| {
                                (0, subs.iter().map(|(_, a)| Acc::empty(a)).collect())
                            });
                            out.push(bucket(BucketKey::Time(k), count, &subs, accs, budget)?);
                            if i + 1 < n {
                                k = interval.next_start(k);
                            }
                        }
                    }
                    debug_assert!(buckets.is_empty(), "every data bucket lies on the walk");
                } else {
                    buckets.retain(|_, (count, _)| *count >= min_doc_count);
                    budget.take(buckets.len() as u128)?;
                    for (k, (count, accs)) in buckets {
                        out.push(bucket(BucketKey::Time(k), count, &subs, accs, budget)?);
                    }
                }
                AggOutput::Buckets {
                    buckets: out,
                    sum_other_doc_count: 0,
                }
            }
            Acc::Terms {
                size,
                min_doc_count,
                subs,
                buckets,
                ..
            } => {
                let mut all: Vec<(String, Value, u64, Vec<Acc>)> = buckets
                    .into_iter()
                    .filter(|(_, (_, c, _))| *c >= min_doc_count.max(1))
                    .map(|(k, (v, c, a))| (k, v, c, a))
                    .collect();
                all.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
                // `size` is the request's own cut: the documents of the terms beyond it
                // are reported in `sum_other_doc_count`.
                let other: u64 = all.iter().skip(size).map(|b| b.2).sum();
                all.truncate(size);
                budget.take(all.len() as u128)?;
                let out = all
                    .into_iter()
                    .map(|(_, v, c, a)| bucket(BucketKey::Term(v), c, &subs, a, budget))
                    .collect::<Result<_>>()?;
                AggOutput::Buckets {
                    buckets: out,
                    sum_other_doc_count: other,
                }
            }
            Acc::Metric {
                kind,
                count,
                sum,
                min,
                max,
                distinct,
                ..
            } => AggOutput::Value(match kind {
                MetricKind::Min => (count > 0).then_some(min),
                MetricKind::Max => (count > 0).then_some(max),
                MetricKind::Avg => (count > 0).then(|| sum / count as f64),
                MetricKind::Sum => Some(sum),
                MetricKind::ValueCount => Some(count as f64),
                MetricKind::Cardinality => Some(distinct.len() as f64),
            }),
        })
    }
}

/// The metric fields the metric leaves of `agg` read (each once).
fn metric_fields<'a>(agg: &'a Agg, m: &Mapping, out: &mut Vec<&'a str>) {
    match agg {
        Agg::DateHistogram { aggs, .. } | Agg::Terms { aggs, .. } => {
            for (_, a) in aggs {
                metric_fields(a, m, out);
            }
        }
        Agg::Metric { field, .. } => {
            let is_metric = !matches!(
                m.field(field).map(|f| f.role),
                Some(FieldRole::Dimension | FieldRole::Timestamp)
            );
            if is_metric && !out.contains(&field.as_str()) {
                out.push(field);
            }
        }
    }
}

fn dim_number(d: &Dim) -> Option<f64> {
    match d {
        Dim::Int(i) => Some(*i as f64),
        Dim::UInt(u) => Some(*u as f64),
        _ => None,
    }
}

fn bucket(
    key: BucketKey,
    doc_count: u64,
    subs: &[(String, Agg)],
    accs: Vec<Acc>,
    budget: &mut Budget,
) -> Result<Bucket> {
    Ok(Bucket {
        key,
        doc_count,
        aggs: finish_all(subs, accs, budget)?,
    })
}

/// The answers of `accs`, named after `aggs` (in request order).
fn finish_all(
    aggs: &[(String, Agg)],
    accs: Vec<Acc>,
    budget: &mut Budget,
) -> Result<Vec<(String, AggOutput)>> {
    aggs.iter()
        .zip(accs)
        .map(|((n, _), a)| Ok((n.clone(), a.finish(budget)?)))
        .collect()
}

/// The first and last bucket a `min_doc_count` 0 histogram shows: those of its data,
/// widened to its `extended_bounds`.
fn fill_range<T>(
    interval: Interval,
    buckets: &BTreeMap<i64, T>,
    bounds: Option<(i64, i64)>,
) -> Option<(i64, i64)> {
    let data = buckets
        .keys()
        .next()
        .copied()
        .zip(buckets.keys().next_back().copied());
    let bounds = bounds.map(|(lo, hi)| (interval.bucket_start(lo), interval.bucket_start(hi)));
    match (data, bounds) {
        (Some((l, h)), Some((bl, bh))) => Some((l.min(bl), h.max(bh))),
        (d, b) => d.or(b),
    }
}

/// The buckets an answer may still hold ([`SearchRequest::max_buckets`]).
struct Budget {
    limit: u64,
    used: u64,
}

impl Budget {
    fn new(limit: u64) -> Budget {
        Budget { limit, used: 0 }
    }

    /// Takes `n` buckets, or fails naming the limit when they are not left.
    fn take(&mut self, n: u128) -> Result<()> {
        let requested = u128::from(self.used).saturating_add(n);
        self.used = u64::try_from(requested)
            .ok()
            .filter(|r| *r <= self.limit)
            .ok_or_else(|| too_many_buckets(self.limit, requested))?;
        Ok(())
    }
}

fn too_many_buckets(limit: u64, requested: u128) -> Error {
    Error::TooManyBuckets {
        limit,
        requested: u64::try_from(requested).unwrap_or(u64::MAX),
    }
}

/// The running aggregations of a request, checked against its bucket limit as they
/// grow: each time the buckets created (at every level) double, the answer's
/// [`lower_bound`](Acc::lower_bound) must fit, so a doomed answer stops early at a
/// bounded size (the 2nd document of a histogram two years wide, not its millionth
/// bucket); [`finish`](Self::finish) then counts exactly, each level before building it.
struct Aggs<'r> {
    aggs: &'r [(String, Agg)],
    accs: Vec<Acc>,
    limit: u64,
    created: u64,
    next_check: u64,
}

impl<'r> Aggs<'r> {
    /// The aggregations of `req`, failing at once when the filled `extended_bounds`
    /// alone exceed the limit.
    fn new(req: &'r SearchRequest, m: &Mapping) -> Result<Aggs<'r>> {
        let aggs = Aggs {
            aggs: &req.aggs,
            accs: req.aggs.iter().map(|(_, a)| Acc::new(a, m)).collect(),
            limit: req.max_buckets,
            created: 0,
            next_check: 1,
        };
        aggs.check()?;
        Ok(aggs)
    }

    fn add(&mut self, p: &Point, m: &Mapping) -> Result<()> {
        let created = self.accs.iter_mut().map(|a| a.add(p, m)).sum();
        self.grew(created)
    }

    fn add_series(
        &mut self,
        dims: &[(String, Dim)],
        rows: &[i64],
        cols: &[(&str, &tidemark_segment::ColumnSamples)],
        m: &Mapping,
    ) -> Result<()> {
        let created = self
            .accs
            .iter_mut()
            .map(|a| a.add_series(dims, rows, cols, m))
            .sum();
        self.grew(created)
    }

    fn add_rollup(
        &mut self,
        bucket: i64,
        doc_count: u64,
        stats: &[(String, RollupStats)],
    ) -> Result<()> {
        let created = self
            .accs
            .iter_mut()
            .map(|a| a.add_rollup(bucket, doc_count, stats))
            .sum();
        self.grew(created)
    }

    fn grew(&mut self, created: u64) -> Result<()> {
        self.created = self.created.saturating_add(created);
        if self.created < self.next_check {
            return Ok(());
        }
        self.next_check = self.created.saturating_mul(2);
        self.check()
    }

    fn check(&self) -> Result<()> {
        let lower = self
            .accs
            .iter()
            .map(Acc::lower_bound)
            .fold(0, u128::saturating_add);
        if lower > u128::from(self.limit) {
            return Err(too_many_buckets(self.limit, lower));
        }
        Ok(())
    }

    fn finish(self) -> Result<Vec<(String, AggOutput)>> {
        finish_all(self.aggs, self.accs, &mut Budget::new(self.limit))
    }
}

impl Index {
    /// Runs a [`SearchRequest`]: the exact number of matches, a page of hits sorted by
    /// timestamp (then `_id`), and the aggregations.
    ///
    /// ```
    /// use serde_json::json;
    /// use tidemark::{Agg, BulkItem, Filter, Index, Interval, Mapping, MetricKind, SearchRequest};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let mapping = Mapping::from_value(json!({"mappings": {"properties": {
    ///     "host": {"type": "keyword", "time_series_dimension": true},
    ///     "cpu": {"type": "double", "time_series_metric": "gauge"}}}}))?;
    /// let mut index = Index::create(dir.path(), mapping)?;
    /// index.bulk(vec![
    ///     BulkItem::create(json!({"@timestamp": 0, "host": "a", "cpu": 1.0})),
    ///     BulkItem::create(json!({"@timestamp": 60_000, "host": "a", "cpu": 3.0})),
    ///     BulkItem::create(json!({"@timestamp": 0, "host": "b", "cpu": 5.0})),
    /// ])?;
    /// let avg = Agg::Metric { kind: MetricKind::Avg, field: "cpu".into() };
    /// let result = index.query(&SearchRequest {
    ///     filter: Filter::Terms { field: "host".into(), values: vec!["a".into()] },
    ///     size: 0,
    ///     aggs: vec![("per_minute".into(), Agg::DateHistogram {
    ///         interval: Interval::Fixed(60_000), min_doc_count: 1, extended_bounds: None,
    ///         aggs: vec![("avg".into(), avg)],
    ///     })],
    ///     ..SearchRequest::default()
    /// })?;
    /// assert_eq!(result.total, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Query`] for a filter or aggregation on a field it cannot apply to;
    /// [`Error::TooManyBuckets`] when the aggregations' answer would hold more than
    /// [`SearchRequest::max_buckets`] buckets; segment read errors.
    pub fn query(&self, req: &SearchRequest) -> Result<SearchResult> {
        if let Some(after) = &req.search_after {
            return self.query_after(req, after);
        }
        let mapping = self.mapping();
        let filter = compile(&req.filter, mapping)?;
        for (_, a) in &req.aggs {
            check_agg(a, mapping)?;
        }
        let range = filter.time_bounds();
        let (from, to) = (range.first_ms, range.last_ms);
        if range.is_empty() {
            return Ok(SearchResult {
                total: 0,
                hits: Vec::new(),
                aggs: Aggs::new(req, mapping)?.finish()?,
                rows_scanned: 0,
                rollup_rows: 0,
                expired: Vec::new(),
            });
        }
        if let Some(res) = req.rollup {
            return self.query_rollup_docs(req, &filter, res, from, to);
        }
        if let Some(align) = rollup_alignment(req, &filter, mapping) {
            let pieces = self.read_plan(from, to, align);
            if pieces.iter().any(|p| matches!(p, Piece::Rollup { .. })) {
                return self.query_pieces(req, &filter, pieces);
            }
        }
        let want_hits = req.size > 0;
        if !want_hits && !filter.needs_id() && filter.on_time_and_dims() {
            return self.query_columns(req, &filter, from, to);
        }
        self.query_rows(req, &filter, from, to, None)
    }

    /// A `search_after` page: `total` and the aggregations from the whole query (read
    /// as a query without hits, by column where it can), the hits from the part of the
    /// time range at and beyond the cursor only, so paging through a range reads each
    /// row about once for its hits.
    fn query_after(&self, req: &SearchRequest, after: &SearchAfter) -> Result<SearchResult> {
        if req.rollup.is_some() {
            return Err(Error::Query {
                reason: "search_after pages raw documents: page rollup hits with from and size"
                    .into(),
            });
        }
        let head = SearchRequest {
            size: 0,
            from: 0,
            search_after: None,
            ..req.clone()
        };
        let mut out = self.query(&head)?;
        if req.size == 0 {
            return Ok(out);
        }
        let filter = compile(&req.filter, self.mapping())?;
        let range = filter.time_bounds();
        let (mut from, mut to) = (range.first_ms, range.last_ms);
        match req.order {
            Order::Asc => from = from.max(after.ts_millis),
            Order::Desc => to = to.min(after.ts_millis),
        }
        if from <= to {
            let tail = SearchRequest {
                aggs: Vec::new(),
                search_after: None,
                ..req.clone()
            };
            let page = self.query_rows(&tail, &filter, from, to, Some(after))?;
            out.hits = page.hits;
            out.rows_scanned = out.rows_scanned.saturating_add(page.rows_scanned);
        }
        Ok(out)
    }

    /// The row-by-row query over `[from, to]`: every matching row counted and
    /// aggregated, the page of hits kept (those after `cursor` only, when given).
    fn query_rows(
        &self,
        req: &SearchRequest,
        filter: &Compiled,
        from: i64,
        to: i64,
        cursor: Option<&SearchAfter>,
    ) -> Result<SearchResult> {
        let mapping = self.mapping();
        let want_hits = req.size > 0;
        let keep = req.from.saturating_add(req.size);
        let needs_id = filter.needs_id() || want_hits;
        // An event's `_id` is a fingerprint of all its fields, extras included: they are
        // read before the id is; otherwise only for the hits kept.
        let extras_first = needs_id && matches!(mapping.mode(), IndexMode::Events(_));
        let mut aggs = Aggs::new(req, mapping)?;
        let mut total = 0u64;
        let mut hits: Vec<(i64, String, Point)> = Vec::new();
        let mut failure: Option<Error> = None;
        let sort = |hits: &mut Vec<(i64, String, Point)>, order: Order| match order {
            Order::Asc => hits.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1))),
            Order::Desc => hits.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1))),
        };
        let mut rows_scanned = 0u64;
        let mut on_row =
            |mut p: Point,
             stored: Option<(&tidemark_segment::Segment, tidemark_segment::RowId)>| {
                if failure.is_some() {
                    return;
                }
                rows_scanned += 1;
                if extras_first && let Err(e) = load_extras(&mut p, stored) {
                    failure = Some(e);
                    return;
                }
                let id = if needs_id {
                    match self.id_of(&p) {
                        Ok(id) => self.format_id(&id),
                        Err(e) => {
                            failure = Some(e);
                            return;
                        }
                    }
                } else {
                    String::new()
                };
                if !filter.matches(&p, &id) {
                    return;
                }
                total += 1;
                if let Err(e) = aggs.add(&p, mapping) {
                    failure = Some(e);
                    return;
                }
                if want_hits && cursor.is_none_or(|c| c.admits(req.order, p.ts_millis, &id)) {
                    if !extras_first && let Err(e) = load_extras(&mut p, stored) {
                        failure = Some(e);
                        return;
                    }
                    hits.push((p.ts_millis, id, p));
                    // Keep memory bounded by the page, not the matches.
                    if hits.len() >= keep.saturating_mul(2).max(1024) {
                        sort(&mut hits, req.order);
                        hits.truncate(keep);
                    }
                }
            };
        self.scan_compiled(filter, from, to, &mut on_row)?;
        if let Some(e) = failure {
            return Err(e);
        }
        sort(&mut hits, req.order);
        hits.truncate(keep);
        let hits = hits
            .into_iter()
            .skip(req.from)
            .map(|(ts, id, p)| Hit {
                doc: point_to_doc(mapping, &p, &id),
                id,
                ts_millis: ts,
            })
            .collect();
        Ok(SearchResult {
            total,
            hits,
            aggs: aggs.finish()?,
            rows_scanned,
            rollup_rows: 0,
            expired: self.expired_in(from, to),
        })
    }

    /// Aggregations (no hits) under a filter on time and dimensions only, read by
    /// column: the matching series are chosen through each segment's dimension index
    /// (no row read), then each series' documents and the metric columns the
    /// aggregations use are read as slices ([`Index::series_reader`] with rows) and
    /// added a series at a time ([`Acc::add_series`]), not as one `Point` per document.
    fn query_columns(
        &self,
        req: &SearchRequest,
        filter: &Compiled,
        from: i64,
        to: i64,
    ) -> Result<SearchResult> {
        let mapping = self.mapping();
        let mut fields: Vec<&str> = Vec::new();
        for (_, a) in &req.aggs {
            metric_fields(a, mapping, &mut fields);
        }
        let series = self.matching_series(filter, from, to)?;
        let mut aggs = Aggs::new(req, mapping)?;
        let mut reader = self
            .engine()
            .search(from, to)
            .series_reader_with_rows(&fields);
        let mut out = Vec::new();
        let mut total = 0u64;
        for (tsid, dims) in &series {
            reader.read(tsid, &mut out)?;
            let Some((rows, cols)) = out.split_last() else {
                continue;
            };
            if rows.is_empty() {
                continue;
            }
            total += rows.len() as u64;
            let named: Vec<(&str, &tidemark_segment::ColumnSamples)> =
                fields.iter().copied().zip(cols).collect();
            aggs.add_series(dims, &rows.ts, &named, mapping)?;
        }
        Ok(SearchResult {
            total,
            hits: Vec::new(),
            aggs: aggs.finish()?,
            rows_scanned: reader.rows_read(),
            rollup_rows: 0,
            expired: self.expired_in(from, to),
        })
    }

    /// The series with documents in `[from, to]` whose dimensions `filter` accepts
    /// (a filter on dimensions and time), in tsid order, with their dimensions: from
    /// each live segment's dimension index and series table, and the buffered series.
    fn matching_series(
        &self,
        filter: &Compiled,
        from: i64,
        to: i64,
    ) -> Result<BTreeMap<tidemark_tsid::Tsid, Vec<(String, Dim)>>> {
        let mut chosen = BTreeMap::new();
        self.select_series(
            from,
            to,
            |p| filter.select(p),
            |hit| {
                if !chosen.contains_key(hit.tsid) && filter.may_match(hit.dims) {
                    chosen.insert(*hit.tsid, hit.dims.to_vec());
                }
            },
        )?;
        Ok(chosen)
    }

    /// Scans raw rows in `[from, to]` (narrowed to what the filter's `_id` prefixes
    /// allow): the series are chosen through each segment's dimension index (only their
    /// rows read), unless nothing filters by dimension, and by what `_id` prefixes say
    /// about them.
    pub(crate) fn scan_compiled(
        &self,
        filter: &Compiled,
        from: i64,
        to: i64,
        on_row: RowSink<'_>,
    ) -> Result<()> {
        let range = TimeRange::new(from, to).intersect(filter.row_bounds());
        if range.is_empty() {
            return Ok(());
        }
        let (from, to) = (range.first_ms, range.last_ms);
        if filter.narrows() {
            self.engine().search(from, to).rows_indexed(
                |tsid, dims| filter.may_match(dims) && filter.may_match_series(tsid),
                |p| filter.select(p),
                on_row,
            )?;
        } else {
            self.engine()
                .search(from, to)
                .rows(|tsid, _| filter.may_match_series(tsid), on_row)?;
        }
        Ok(())
    }

    /// Aggregations (no hits) over planned pieces: rollup rows where a rollup answers,
    /// raw rows elsewhere (see [`rollup_alignment`]).
    fn query_pieces(
        &self,
        req: &SearchRequest,
        filter: &Compiled,
        pieces: Vec<Piece>,
    ) -> Result<SearchResult> {
        let mapping = self.mapping();
        let mut aggs = Aggs::new(req, mapping)?;
        let (mut total, mut rows_scanned, mut rollup_rows) = (0u64, 0u64, 0u64);
        let mut expired = Vec::new();
        let mut failure: Option<Error> = None;
        for piece in pieces {
            // A rollup built before rollups counted their rows cannot give doc counts:
            // its partition's raw rows answer instead (retention rebuilds such rollups
            // before it drops the raw rows; an empty rollup has nothing to count).
            let piece = match piece {
                Piece::Rollup { from, to, .. } if !self.rollup_counts_rows(&piece) => {
                    Piece::Raw { from, to }
                }
                other => other,
            };
            match piece {
                Piece::Raw { from, to } => {
                    self.scan_compiled(filter, from, to, &mut |p, _| {
                        if failure.is_some() {
                            return;
                        }
                        rows_scanned += 1;
                        if filter.matches(&p, "") {
                            total += 1;
                            if let Err(e) = aggs.add(&p, mapping) {
                                failure = Some(e);
                            }
                        }
                    })?;
                }
                Piece::Rollup { .. } => {
                    self.read_rollup(
                        &piece,
                        |_, dims| filter.may_match(dims),
                        |p| filter.select(p),
                        |row| {
                            if failure.is_some() {
                                return;
                            }
                            rollup_rows += 1;
                            let n = row.doc_count.unwrap_or(0);
                            total += n;
                            if let Err(e) = aggs.add_rollup(row.bucket_ms, n, &row.metrics) {
                                failure = Some(e);
                            }
                        },
                    )?;
                }
                Piece::Expired { from, to } => expired.push((from, to)),
            }
            if let Some(e) = failure {
                return Err(e);
            }
        }
        Ok(SearchResult {
            total,
            hits: Vec::new(),
            aggs: aggs.finish()?,
            rows_scanned,
            rollup_rows,
            expired,
        })
    }

    /// A search whose hits are rollup documents (see [`SearchRequest::rollup`]).
    fn query_rollup_docs(
        &self,
        req: &SearchRequest,
        filter: &Compiled,
        res: i64,
        from: i64,
        to: i64,
    ) -> Result<SearchResult> {
        let (found, keys) = self.rollup_docs(
            TimeRange::new(from, to),
            res,
            filter,
            req.order,
            Some(req.from.saturating_add(req.size)),
        )?;
        let aggs = if req.aggs.is_empty() {
            SearchResult {
                total: 0,
                hits: Vec::new(),
                aggs: Vec::new(),
                rows_scanned: 0,
                rollup_rows: 0,
                expired: Vec::new(),
            }
        } else {
            self.query(&SearchRequest {
                rollup: None,
                size: 0,
                from: 0,
                ..req.clone()
            })?
        };
        let hits = found
            .docs
            .into_iter()
            .zip(keys)
            .skip(req.from)
            .map(|(doc, (ts_millis, id))| Hit { id, ts_millis, doc })
            .collect();
        Ok(SearchResult {
            total: found.total,
            hits,
            aggs: aggs.aggs,
            rows_scanned: aggs.rows_scanned,
            rollup_rows: aggs.rollup_rows,
            expired: found.expired,
        })
    }
}

/// A callback given each raw row read (and where it is stored).
pub(crate) type RowSink<'a> =
    &'a mut dyn FnMut(Point, Option<(&tidemark_segment::Segment, tidemark_segment::RowId)>);

/// Sets a stored row's extra fields (keyword and boolean extras) on its point.
fn load_extras(
    p: &mut Point,
    stored: Option<(&tidemark_segment::Segment, tidemark_segment::RowId)>,
) -> Result<()> {
    if let Some((segment, row)) = stored
        && !segment.extra_columns().is_empty()
    {
        crate::extras::set_extras(p, segment.row_extras(row)?);
    }
    Ok(())
}

/// When rollups can answer a request: no hits wanted, a filter on dimensions and the
/// time range only, and aggregations that are all date histograms of min, max, avg, sum
/// and value_count of metrics. Returns the span every rollup bucket must fit in whole
/// (so that it lies inside one histogram bucket): the gcd of the fixed intervals, a day
/// for calendar days, weeks, months, quarters and years (they start at midnight UTC).
fn rollup_alignment(req: &SearchRequest, filter: &Compiled, m: &Mapping) -> Option<i64> {
    if req.raw_only || req.size > 0 || req.aggs.is_empty() || !filter.on_time_and_dims() {
        return None;
    }
    let mut widths = Vec::with_capacity(req.aggs.len());
    for (_, a) in &req.aggs {
        let Agg::DateHistogram { interval, aggs, .. } = a else {
            return None;
        };
        let w = match interval {
            Interval::Fixed(w) => *w,
            Interval::Calendar(CalendarUnit::Minute) => 60_000,
            Interval::Calendar(CalendarUnit::Hour) => 3_600_000,
            Interval::Calendar(_) => 86_400_000,
        };
        for (_, sub) in aggs {
            let Agg::Metric { kind, field } = sub else {
                return None;
            };
            let metric = matches!(
                m.field(field).map(|f| f.role),
                Some(FieldRole::Metric(_) | FieldRole::Value)
            );
            let kind_ok = matches!(
                kind,
                MetricKind::Min
                    | MetricKind::Max
                    | MetricKind::Avg
                    | MetricKind::Sum
                    | MetricKind::ValueCount
            );
            if !metric || !kind_ok {
                return None;
            }
        }
        widths.push(w);
    }
    rollup_step(widths)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000;

    #[test]
    fn calendar_buckets_start_on_unit_boundaries() {
        // 2025-11-30T13:45:00Z is a Sunday.
        let ts = 1_764_510_300_000;
        let cal = |u| Interval::Calendar(u);
        assert_eq!(cal(CalendarUnit::Hour).bucket_start(ts), 1_764_507_600_000);
        assert_eq!(cal(CalendarUnit::Day).bucket_start(ts), 1_764_460_800_000);
        // The Monday before: 2025-11-24.
        assert_eq!(
            cal(CalendarUnit::Week).bucket_start(ts),
            1_764_460_800_000 - 6 * DAY
        );
        assert_eq!(
            cal(CalendarUnit::Month).bucket_start(ts),
            days_from_civil(2025, 11, 1) * DAY
        );
        assert_eq!(
            cal(CalendarUnit::Quarter).bucket_start(ts),
            days_from_civil(2025, 10, 1) * DAY
        );
        assert_eq!(
            cal(CalendarUnit::Year).bucket_start(ts),
            days_from_civil(2025, 1, 1) * DAY
        );
        let dec = days_from_civil(2025, 12, 1) * DAY;
        assert_eq!(
            cal(CalendarUnit::Month).next_start(dec),
            days_from_civil(2026, 1, 1) * DAY
        );
        assert_eq!(Interval::Fixed(60_000).bucket_start(-1), -60_000);
    }

    /// Walks from the bucket of `lo` to the bucket of `hi` as an empty-bucket fill does.
    fn walk(interval: Interval, lo: i64, hi: i64) -> Vec<i64> {
        let (mut k, hi) = (interval.bucket_start(lo), interval.bucket_start(hi));
        let mut out = Vec::new();
        while k <= hi {
            out.push(k);
            k = interval.next_start(k);
        }
        out
    }

    #[test]
    fn bucket_counts_equal_the_walk_for_every_interval() {
        let cal = Interval::Calendar;
        let intervals = [
            Interval::Fixed(1),
            Interval::Fixed(7_000),
            Interval::Fixed(DAY),
            cal(CalendarUnit::Minute),
            cal(CalendarUnit::Hour),
            cal(CalendarUnit::Day),
            cal(CalendarUnit::Week),
            cal(CalendarUnit::Month),
            cal(CalendarUnit::Quarter),
            cal(CalendarUnit::Year),
        ];
        // 2025-11-30T13:45:00Z, and ranges around it, before the epoch and across it.
        let ts = 1_764_510_300_000;
        let ranges = [
            (ts, ts),
            (ts, ts + 1),
            (ts - 3 * DAY, ts + 40 * DAY),
            (ts - 800 * DAY, ts + 30 * DAY + 5),
            (-400 * DAY - 1, 30 * DAY),
            (-1, 0),
            (ts, ts - 1),
        ];
        for interval in intervals {
            for (lo, hi) in ranges {
                if matches!(interval, Interval::Fixed(1)) && hi - lo > 10_000_000 {
                    continue;
                }
                let walked = walk(interval, lo, hi);
                let (a, b) = (interval.bucket_start(lo), interval.bucket_start(hi));
                assert_eq!(
                    interval.buckets_between(a, b),
                    walked.len() as u128,
                    "{interval:?} {lo}..={hi}"
                );
                // Each walked start is the start of its own bucket.
                assert!(walked.iter().all(|k| interval.bucket_start(*k) == *k));
            }
        }
    }

    #[test]
    fn bucket_arithmetic_saturates_at_the_ends_of_time() {
        let cal = Interval::Calendar;
        for interval in [
            Interval::Fixed(3),
            Interval::Fixed(i64::MAX),
            cal(CalendarUnit::Week),
            cal(CalendarUnit::Month),
            cal(CalendarUnit::Year),
        ] {
            let lo = interval.bucket_start(i64::MIN);
            let hi = interval.bucket_start(i64::MAX);
            assert!(lo <= hi, "{interval:?}");
            assert!(interval.next_start(hi) >= hi, "{interval:?}");
            assert!(interval.next_start(lo) > lo, "{interval:?}");
            assert!(interval.buckets_between(lo, hi) >= 1, "{interval:?}");
        }
        assert_eq!(
            Interval::Fixed(1).buckets_between(i64::MIN, i64::MAX),
            1 << 64
        );
    }
}
