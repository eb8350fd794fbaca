//! Searches over several indices, as Elasticsearch answers them: each index is queried
//! with the same request (parsed against its own mapping), the hits merged in the
//! request's sort order with `from`/`size` applied after the merge, and the
//! aggregations merged exactly.
//!
//! Exactness is bought per index: `terms` are asked for every term (then summed by
//! key, re-sorted and cut to `size` here), `avg` for its sum and count, and histogram
//! and terms `min_doc_count` are applied after the merge. A `cardinality` cannot be
//! merged from per-index counts, so a request over several indices naming one is a
//! `400`. A field an index does not map matches nothing there (a term, prefix,
//! wildcard, regexp or exists query), and its aggregations are empty there, as in
//! Elasticsearch.
//!
//! The same plan serves one index whose `terms` order by `_key` or ascending count,
//! which the façade does not sort itself.

use std::collections::BTreeMap;

use serde_json::Value;
use tidemark::{Agg, AggOutput, Bucket, BucketKey, Filter, Interval, Mapping, MetricKind};

use crate::error::{Error, Result};

/// The order of `terms` buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermsOrder {
    /// By document count, most first (ties by key): Elasticsearch's default.
    CountDesc,
    /// By document count, fewest first (ties by key).
    CountAsc,
    /// By key, ascending.
    KeyAsc,
    /// By key, descending.
    KeyDesc,
}

impl TermsOrder {
    /// A `terms` aggregation's `order` (`{"_count": "desc"}`, `{"_key": "asc"}`, or a
    /// list of one such object; `_term` is the old name of `_key`).
    ///
    /// # Errors
    /// `400 parsing_exception` for any other order.
    pub fn parse(v: Option<&Value>) -> Result<TermsOrder> {
        let Some(v) = v else {
            return Ok(TermsOrder::CountDesc);
        };
        let one = match v {
            Value::Array(a) if a.len() == 1 => a.first().unwrap_or(v),
            other => other,
        };
        let refused = || {
            Error::bad(
                "parsing_exception",
                format!("[terms] order {v} is not supported by Tidemark (only by _count or _key)"),
            )
        };
        let Value::Object(o) = one else {
            return Err(refused());
        };
        let mut it = o.iter();
        let (Some((k, d)), None) = (it.next(), it.next()) else {
            return Err(refused());
        };
        Ok(match (k.as_str(), d.as_str()) {
            ("_count", Some("desc")) => TermsOrder::CountDesc,
            ("_count", Some("asc")) => TermsOrder::CountAsc,
            ("_key" | "_term", Some("asc")) => TermsOrder::KeyAsc,
            ("_key" | "_term", Some("desc")) => TermsOrder::KeyDesc,
            _ => return Err(refused()),
        })
    }
}

/// What an aggregation's merged answer needs: its request, as the caller asked it.
#[derive(Debug, Clone)]
pub enum Spec {
    /// A `date_histogram`.
    Hist {
        /// The bucket width.
        interval: Interval,
        /// Buckets with fewer documents are left out; 0 fills the gaps.
        min_doc_count: u64,
        /// The sub-aggregations.
        subs: Vec<(String, Spec)>,
    },
    /// A `terms` aggregation.
    Terms {
        /// The dimension.
        field: String,
        /// Buckets answered.
        size: usize,
        /// Buckets with fewer documents are left out (at least 1).
        min_doc_count: u64,
        /// Their order.
        order: TermsOrder,
        /// The sub-aggregations.
        subs: Vec<(String, Spec)>,
    },
    /// A metric.
    Metric {
        /// Which.
        kind: MetricKind,
        /// Of which field.
        field: String,
    },
}

fn sub_json<'a>(json: Option<&'a Value>, name: &str) -> Option<&'a Value> {
    json.and_then(|j| j.get(name))
        .and_then(|d| d.get("aggs").or_else(|| d.get("aggregations")))
}

/// The plan of parsed aggregations, with the `terms` orders read from their JSON.
///
/// # Errors
/// `400` for a `terms` order outside [`TermsOrder`].
pub fn plan(aggs: &[(String, Agg)], json: Option<&Value>) -> Result<Vec<(String, Spec)>> {
    aggs.iter()
        .map(|(name, agg)| {
            let spec = match agg {
                Agg::DateHistogram {
                    interval,
                    min_doc_count,
                    aggs,
                    ..
                } => Spec::Hist {
                    interval: *interval,
                    min_doc_count: *min_doc_count,
                    subs: plan(aggs, sub_json(json, name))?,
                },
                Agg::Terms {
                    field,
                    size,
                    min_doc_count,
                    aggs,
                } => Spec::Terms {
                    field: field.clone(),
                    size: *size,
                    min_doc_count: (*min_doc_count).max(1),
                    order: TermsOrder::parse(
                        json.and_then(|j| j.get(name))
                            .and_then(|d| d.get("terms"))
                            .and_then(|t| t.get("order")),
                    )?,
                    subs: plan(aggs, sub_json(json, name))?,
                },
                Agg::Metric { kind, field } => Spec::Metric {
                    kind: *kind,
                    field: field.clone(),
                },
                other => return Err(unmergeable(other)),
            };
            Ok((name.clone(), spec))
        })
        .collect()
}

/// Whether the plan needs the merge even over one index (a `terms` order the façade
/// does not sort by).
pub fn needs_merge(plan: &[(String, Spec)]) -> bool {
    plan.iter().any(|(_, s)| match s {
        Spec::Hist { subs, .. } => needs_merge(subs),
        Spec::Terms { order, subs, .. } => *order != TermsOrder::CountDesc || needs_merge(subs),
        Spec::Metric { .. } => false,
    })
}

fn unmergeable(agg: &Agg) -> Error {
    Error::bad(
        "illegal_argument_exception",
        format!("the aggregation {agg:?} cannot be merged over several indices by Tidemark"),
    )
}

const SUM: &str = "\u{0}sum";
const COUNT: &str = "\u{0}count";

/// The aggregations asked of one index: every term, avg as sum and count, counts
/// filtered after the merge; with `several`, a field `mapping` lacks is left out (its
/// answer is empty) and a `cardinality` is refused.
///
/// # Errors
/// `400` naming a `cardinality` over several indices.
pub fn widen(
    aggs: &[(String, Agg)],
    mapping: &Mapping,
    several: bool,
) -> Result<Vec<(String, Agg)>> {
    let mut out = Vec::with_capacity(aggs.len());
    for (name, agg) in aggs {
        match agg {
            Agg::DateHistogram {
                interval,
                min_doc_count,
                extended_bounds,
                aggs,
            } => out.push((
                name.clone(),
                Agg::DateHistogram {
                    interval: *interval,
                    min_doc_count: (*min_doc_count).min(1),
                    extended_bounds: *extended_bounds,
                    aggs: widen(aggs, mapping, several)?,
                },
            )),
            Agg::Terms { field, aggs, .. } => {
                let subs = widen(aggs, mapping, several)?;
                if several && mapping.field(field).is_none() {
                    continue;
                }
                out.push((
                    name.clone(),
                    Agg::Terms {
                        field: field.clone(),
                        size: usize::MAX,
                        min_doc_count: 1,
                        aggs: subs,
                    },
                ));
            }
            Agg::Metric { kind, field } => {
                if several && *kind == MetricKind::Cardinality {
                    return Err(Error::bad(
                        "illegal_argument_exception",
                        format!(
                            "the [cardinality] aggregation [{name}] cannot be merged exactly over several indices by Tidemark: search one index at a time"
                        ),
                    ));
                }
                if several && mapping.field(field).is_none() {
                    continue;
                }
                if *kind == MetricKind::Avg {
                    for (suffix, kind) in [(SUM, MetricKind::Sum), (COUNT, MetricKind::ValueCount)]
                    {
                        out.push((
                            format!("{name}{suffix}"),
                            Agg::Metric {
                                kind,
                                field: field.clone(),
                            },
                        ));
                    }
                } else {
                    out.push((name.clone(), agg.clone()));
                }
            }
            other => return Err(unmergeable(other)),
        }
    }
    Ok(out)
}

/// A query for one index: clauses on a field its mapping lacks match nothing.
pub fn prune(filter: Filter, mapping: &Mapping) -> Filter {
    let none = || Filter::Not(Box::new(Filter::All));
    match filter {
        Filter::Terms { ref field, .. }
        | Filter::Prefix { ref field, .. }
        | Filter::Regex { ref field, .. }
        | Filter::Wildcard { ref field, .. }
        | Filter::Exists(ref field)
            if mapping.field(field).is_none() =>
        {
            none()
        }
        Filter::And(fs) => Filter::And(fs.into_iter().map(|f| prune(f, mapping)).collect()),
        Filter::Or(fs) => Filter::Or(fs.into_iter().map(|f| prune(f, mapping)).collect()),
        Filter::Not(f) => Filter::Not(Box::new(prune(*f, mapping))),
        other => other,
    }
}

/// Histogram buckets by key: documents, sub-aggregations.
type HistMap = BTreeMap<i64, (u64, Vec<Part>)>;
/// Terms buckets by the key's text: the key, documents, sub-aggregations.
type TermsMap = BTreeMap<String, (Value, u64, Vec<Part>)>;

/// One aggregation's merged state.
#[derive(Debug, Clone)]
enum Part {
    Hist(HistMap),
    /// By the key's text (the façade's tie order), its JSON value kept.
    Terms(TermsMap),
    Value(Option<f64>),
    Avg {
        sum: f64,
        count: f64,
    },
}

fn empty(plan: &[(String, Spec)]) -> Vec<Part> {
    plan.iter()
        .map(|(_, s)| match s {
            Spec::Hist { .. } => Part::Hist(BTreeMap::new()),
            Spec::Terms { .. } => Part::Terms(BTreeMap::new()),
            Spec::Metric {
                kind: MetricKind::Avg,
                ..
            } => Part::Avg {
                sum: 0.0,
                count: 0.0,
            },
            Spec::Metric {
                kind: MetricKind::Sum | MetricKind::ValueCount | MetricKind::Cardinality,
                ..
            } => Part::Value(Some(0.0)),
            Spec::Metric { .. } => Part::Value(None),
        })
        .collect()
}

fn find<'a>(outs: &'a [(String, AggOutput)], name: &str) -> Option<&'a AggOutput> {
    outs.iter().find(|(n, _)| n == name).map(|(_, o)| o)
}

fn value_of(o: Option<&AggOutput>) -> Option<f64> {
    match o {
        Some(AggOutput::Value(v)) => *v,
        _ => None,
    }
}

fn key_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn absorb_buckets(
    subs: &[(String, Spec)],
    buckets: &[Bucket],
    hist: Option<&mut HistMap>,
    terms: Option<&mut TermsMap>,
) {
    match (hist, terms) {
        (Some(map), _) => {
            for b in buckets {
                if let BucketKey::Time(t) = b.key {
                    let e = map.entry(t).or_insert_with(|| (0, empty(subs)));
                    e.0 += b.doc_count;
                    absorb(subs, &b.aggs, &mut e.1);
                }
            }
        }
        (None, Some(map)) => {
            for b in buckets {
                if let BucketKey::Term(v) = &b.key {
                    let e = map
                        .entry(key_text(v))
                        .or_insert_with(|| (v.clone(), 0, empty(subs)));
                    e.1 += b.doc_count;
                    absorb(subs, &b.aggs, &mut e.2);
                }
            }
        }
        (None, None) => {}
    }
}

/// Adds one index's answer (to the [`widen`]ed request) into `parts`.
fn absorb(plan: &[(String, Spec)], outs: &[(String, AggOutput)], parts: &mut [Part]) {
    for ((name, spec), part) in plan.iter().zip(parts.iter_mut()) {
        match (spec, part) {
            (Spec::Hist { subs, .. }, Part::Hist(map)) => {
                if let Some(AggOutput::Buckets { buckets, .. }) = find(outs, name) {
                    absorb_buckets(subs, buckets, Some(map), None);
                }
            }
            (Spec::Terms { subs, .. }, Part::Terms(map)) => {
                if let Some(AggOutput::Buckets { buckets, .. }) = find(outs, name) {
                    absorb_buckets(subs, buckets, None, Some(map));
                }
            }
            (Spec::Metric { .. }, Part::Avg { sum, count }) => {
                *sum += value_of(find(outs, &format!("{name}{SUM}"))).unwrap_or(0.0);
                *count += value_of(find(outs, &format!("{name}{COUNT}"))).unwrap_or(0.0);
            }
            (Spec::Metric { kind, .. }, Part::Value(acc)) => {
                let Some(v) = value_of(find(outs, name)) else {
                    continue;
                };
                *acc = Some(match (kind, *acc) {
                    (_, None) => v,
                    (MetricKind::Min, Some(a)) => a.min(v),
                    (MetricKind::Max, Some(a)) => a.max(v),
                    // Sum and value_count add up; a cardinality is of one index only.
                    (_, Some(a)) => a + v,
                });
            }
            _ => {}
        }
    }
}

/// Buckets built so far against `search.max_buckets`.
struct Budget(u64);

impl Budget {
    fn take(&mut self, n: u64) -> Result<()> {
        self.check(n)?;
        self.0 = self.0.saturating_add(n);
        Ok(())
    }

    /// Fails when `n` more buckets would pass the limit.
    fn check(&self, n: u64) -> Result<()> {
        if self.0.saturating_add(n) > tidemark::DEFAULT_MAX_BUCKETS {
            return Err(Error::bad(
                "too_many_buckets_exception",
                format!(
                    "Trying to create too many buckets. Must be less than or equal to: [{}]. This limit can be set by changing the [search.max_buckets] cluster level setting.",
                    tidemark::DEFAULT_MAX_BUCKETS
                ),
            ));
        }
        Ok(())
    }
}

fn finish(
    plan: &[(String, Spec)],
    parts: Vec<Part>,
    budget: &mut Budget,
) -> Result<Vec<(String, AggOutput)>> {
    let mut out = Vec::with_capacity(plan.len());
    for ((name, spec), part) in plan.iter().zip(parts) {
        let answer = match (spec, part) {
            (
                Spec::Hist {
                    interval,
                    min_doc_count,
                    subs,
                },
                Part::Hist(mut map),
            ) => {
                if *min_doc_count == 0 {
                    // The indices filled their own ranges: fill the gaps between them.
                    if let (Some(&lo), Some(&hi)) = (map.keys().next(), map.keys().next_back()) {
                        let mut k = lo;
                        while k < hi {
                            k = next_key(*interval, k)?;
                            if let std::collections::btree_map::Entry::Vacant(e) = map.entry(k) {
                                e.insert((0, empty(subs)));
                                // Checked while filling, so a doomed walk stops early.
                                budget.check(map.len() as u64)?;
                            }
                        }
                    }
                } else {
                    map.retain(|_, (c, _)| *c >= *min_doc_count);
                }
                budget.take(map.len() as u64)?;
                let mut buckets = Vec::with_capacity(map.len());
                for (k, (doc_count, parts)) in map {
                    buckets.push(Bucket {
                        key: BucketKey::Time(k),
                        doc_count,
                        aggs: finish(subs, parts, budget)?,
                    });
                }
                AggOutput::Buckets {
                    buckets,
                    sum_other_doc_count: 0,
                }
            }
            (
                Spec::Terms {
                    size,
                    min_doc_count,
                    order,
                    subs,
                    ..
                },
                Part::Terms(map),
            ) => {
                let mut all: Vec<(String, Value, u64, Vec<Part>)> = map
                    .into_iter()
                    .filter(|(_, (_, c, _))| *c >= *min_doc_count)
                    .map(|(k, (v, c, p))| (k, v, c, p))
                    .collect();
                match order {
                    TermsOrder::CountDesc => {
                        all.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
                    }
                    TermsOrder::CountAsc => {
                        all.sort_by(|a, b| a.2.cmp(&b.2).then_with(|| a.0.cmp(&b.0)));
                    }
                    // The map is in key order already.
                    TermsOrder::KeyAsc => {}
                    TermsOrder::KeyDesc => all.reverse(),
                }
                let other: u64 = all.iter().skip(*size).map(|b| b.2).sum();
                all.truncate(*size);
                budget.take(all.len() as u64)?;
                let mut buckets = Vec::with_capacity(all.len());
                for (_, v, doc_count, parts) in all {
                    buckets.push(Bucket {
                        key: BucketKey::Term(v),
                        doc_count,
                        aggs: finish(subs, parts, budget)?,
                    });
                }
                AggOutput::Buckets {
                    buckets,
                    sum_other_doc_count: other,
                }
            }
            (_, Part::Avg { sum, count }) => AggOutput::Value((count > 0.0).then(|| sum / count)),
            (_, Part::Value(v)) => AggOutput::Value(v),
            (_, _) => AggOutput::Value(None),
        };
        out.push((name.clone(), answer));
    }
    Ok(out)
}

fn next_key(interval: Interval, k: i64) -> Result<i64> {
    let next = interval.next_start(k);
    if next <= k {
        return Err(Error::bad(
            "illegal_argument_exception",
            "the date_histogram interval must be positive",
        ));
    }
    Ok(next)
}

/// The merged aggregations of the indices' answers (each to its [`widen`]ed request),
/// as the caller asked them.
///
/// # Errors
/// `400 too_many_buckets_exception` past `search.max_buckets`.
pub fn merge(
    plan: &[(String, Spec)],
    answers: &[Vec<(String, AggOutput)>],
) -> Result<Vec<(String, AggOutput)>> {
    let mut parts = empty(plan);
    for outs in answers {
        absorb(plan, outs, &mut parts);
    }
    finish(plan, parts, &mut Budget(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn term(k: &str, n: u64, aggs: Vec<(String, AggOutput)>) -> Bucket {
        Bucket {
            key: BucketKey::Term(json!(k)),
            doc_count: n,
            aggs,
        }
    }

    #[test]
    fn terms_and_avg_merge_exactly() {
        let plan = vec![(
            "t".to_owned(),
            Spec::Terms {
                field: "host".into(),
                size: 2,
                min_doc_count: 1,
                order: TermsOrder::CountDesc,
                subs: vec![(
                    "a".to_owned(),
                    Spec::Metric {
                        kind: MetricKind::Avg,
                        field: "cpu".into(),
                    },
                )],
            },
        )];
        let avg = |s: f64, c: f64| {
            vec![
                (format!("a{SUM}"), AggOutput::Value(Some(s))),
                (format!("a{COUNT}"), AggOutput::Value(Some(c))),
            ]
        };
        let one = vec![(
            "t".to_owned(),
            AggOutput::Buckets {
                buckets: vec![term("x", 3, avg(3.0, 3.0)), term("y", 1, avg(10.0, 1.0))],
                sum_other_doc_count: 0,
            },
        )];
        let two = vec![(
            "t".to_owned(),
            AggOutput::Buckets {
                buckets: vec![term("y", 3, avg(2.0, 3.0)), term("z", 2, avg(4.0, 2.0))],
                sum_other_doc_count: 0,
            },
        )];
        let merged = merge(&plan, &[one, two]).unwrap();
        let AggOutput::Buckets {
            buckets,
            sum_other_doc_count,
        } = &merged[0].1
        else {
            panic!("buckets expected");
        };
        assert_eq!(*sum_other_doc_count, 2);
        assert_eq!(buckets.len(), 2);
        assert_eq!(buckets[0].key, BucketKey::Term(json!("y")));
        assert_eq!(buckets[0].doc_count, 4);
        assert_eq!(buckets[0].aggs[0].1, AggOutput::Value(Some(3.0)));
        assert_eq!(buckets[1].key, BucketKey::Term(json!("x")));
    }

    #[test]
    fn terms_orders_parse() {
        assert_eq!(
            TermsOrder::parse(Some(&json!({"_key": "asc"}))).unwrap(),
            TermsOrder::KeyAsc
        );
        assert_eq!(
            TermsOrder::parse(Some(&json!([{"_count": "asc"}]))).unwrap(),
            TermsOrder::CountAsc
        );
        assert!(TermsOrder::parse(Some(&json!({"avg": "asc"}))).is_err());
    }
}
