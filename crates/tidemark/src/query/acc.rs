//! Running aggregations: one accumulator per named aggregation, fed raw points,
//! whole series' columns or stored rollup rows, and the bucket budget that refuses an
//! answer too large before it is built.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;
use tidemark_dedup::RollupStats;
use tidemark_segment::{Dim, MetricValue, Point};

use super::{Agg, AggOutput, Bucket, BucketKey, Interval, MetricKind, SearchRequest};
use crate::doc::dim_json;
use crate::error::{Error, Result};
use crate::filter::query_error;
use crate::mapping::{FieldRole, Mapping};

/// Where a metric leaf reads its values.
#[derive(Clone, Copy)]
pub(super) enum Source {
    Metric,
    Dim,
    Timestamp,
}

/// A running aggregation.
pub(super) enum Acc {
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

pub(super) fn check_agg(agg: &Agg, m: &Mapping) -> Result<()> {
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
pub(super) fn metric_fields<'a>(agg: &'a Agg, m: &Mapping, out: &mut Vec<&'a str>) {
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

pub(super) fn dim_number(d: &Dim) -> Option<f64> {
    match d {
        Dim::Int(i) => Some(*i as f64),
        Dim::UInt(u) => Some(*u as f64),
        _ => None,
    }
}

pub(super) fn bucket(
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
pub(super) fn finish_all(
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
pub(super) fn fill_range<T>(
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
pub(super) struct Budget {
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

pub(super) fn too_many_buckets(limit: u64, requested: u128) -> Error {
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
pub(super) struct Aggs<'r> {
    aggs: &'r [(String, Agg)],
    accs: Vec<Acc>,
    limit: u64,
    created: u64,
    next_check: u64,
}

impl<'r> Aggs<'r> {
    /// The aggregations of `req`, failing at once when the filled `extended_bounds`
    /// alone exceed the limit.
    pub(super) fn new(req: &'r SearchRequest, m: &Mapping) -> Result<Aggs<'r>> {
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

    pub(super) fn add(&mut self, p: &Point, m: &Mapping) -> Result<()> {
        let created = self.accs.iter_mut().map(|a| a.add(p, m)).sum();
        self.grew(created)
    }

    pub(super) fn add_series(
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

    pub(super) fn add_rollup(
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

    pub(super) fn grew(&mut self, created: u64) -> Result<()> {
        self.created = self.created.saturating_add(created);
        if self.created < self.next_check {
            return Ok(());
        }
        self.next_check = self.created.saturating_mul(2);
        self.check()
    }

    pub(super) fn check(&self) -> Result<()> {
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

    pub(super) fn finish(self) -> Result<Vec<(String, AggOutput)>> {
        finish_all(self.aggs, self.accs, &mut Budget::new(self.limit))
    }
}
