//! The bucket limit of `Index::query` (`SearchRequest::max_buckets`, Elasticsearch's
//! `search.max_buckets`): an aggregation answer that would hold more buckets fails with
//! `Error::TooManyBuckets` naming the limit, never a shortened answer; one that fits is
//! whole (its bucket counts add up to `hits.total`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::json;
use tidemark::{
    Agg, AggOutput, Bucket, BucketKey, BulkItem, CalendarUnit, DEFAULT_MAX_BUCKETS, Error, Filter,
    Index, Interval, Mapping, MetricKind, SearchRequest, parse_time,
};

const MIN: i64 = 60_000;
const DAY: i64 = 24 * 60 * MIN;

fn index(dir: &std::path::Path, docs: &[(&str, i64)]) -> Index {
    let mapping = Mapping::from_value(json!({"mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "cpu": {"type": "double", "time_series_metric": "gauge"}}}}))
    .unwrap();
    let mut index = Index::create(dir, mapping).unwrap();
    let items = docs
        .iter()
        .map(|(host, ts)| BulkItem::create(json!({"@timestamp": ts, "host": host, "cpu": 1.0})))
        .collect();
    index.bulk(items).unwrap();
    index.refresh().unwrap();
    index
}

fn t(text: &str) -> i64 {
    parse_time(text).unwrap()
}

/// Two documents two years apart (2025-01-01 and 2027-01-01: 730 days).
fn two_years(dir: &std::path::Path) -> Index {
    index(
        dir,
        &[
            ("a", t("2025-01-01T00:00:00Z")),
            ("a", t("2027-01-01T00:00:00Z")),
        ],
    )
}

fn hist(interval: Interval, min_doc_count: u64) -> Agg {
    Agg::DateHistogram {
        interval,
        min_doc_count,
        extended_bounds: None,
        aggs: vec![(
            "avg".into(),
            Agg::Metric {
                kind: MetricKind::Avg,
                field: "cpu".into(),
            },
        )],
    }
}

fn request(agg: Agg) -> SearchRequest {
    SearchRequest {
        size: 0,
        aggs: vec![("h".into(), agg)],
        ..SearchRequest::default()
    }
}

fn buckets(out: &AggOutput) -> &[Bucket] {
    match out {
        AggOutput::Buckets { buckets, .. } => buckets,
        AggOutput::Value(v) => panic!("buckets expected, got the value {v:?}"),
    }
}

fn time_key(b: &Bucket) -> i64 {
    match b.key {
        BucketKey::Time(k) => k,
        ref other => panic!("a time key expected, got {other:?}"),
    }
}

fn too_many(e: &Error) -> (u64, u64) {
    match e {
        Error::TooManyBuckets { limit, requested } => (*limit, *requested),
        other => panic!("TooManyBuckets expected, got {other}"),
    }
}

#[test]
fn minute_histogram_two_years_wide_fails_naming_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let index = two_years(dir.path());
    let e = index
        .query(&request(hist(Interval::Fixed(MIN), 0)))
        .unwrap_err();
    // 730 days of minutes, both ends included.
    assert_eq!(too_many(&e), (DEFAULT_MAX_BUCKETS, 730 * 1440 + 1));
    assert_eq!(
        e.to_string(),
        "trying to create too many buckets: 1051201 > search.max_buckets [65536]"
    );
    // Calendar minutes are counted the same way.
    let e = index
        .query(&request(hist(Interval::Calendar(CalendarUnit::Minute), 0)))
        .unwrap_err();
    assert_eq!(too_many(&e), (DEFAULT_MAX_BUCKETS, 1_051_201));
}

#[test]
fn daily_histogram_two_years_wide_fills_every_day_and_counts_every_document() {
    let dir = tempfile::tempdir().unwrap();
    let index = two_years(dir.path());
    for interval in [Interval::Fixed(DAY), Interval::Calendar(CalendarUnit::Day)] {
        let r = index.query(&request(hist(interval, 0))).unwrap();
        assert_eq!(r.total, 2);
        let b = buckets(&r.aggs[0].1);
        assert_eq!(b.len(), 731, "{interval:?}");
        assert_eq!(time_key(&b[0]), t("2025-01-01T00:00:00Z"));
        assert_eq!(time_key(&b[730]), t("2027-01-01T00:00:00Z"));
        assert!(
            b.windows(2)
                .all(|w| time_key(&w[1]) - time_key(&w[0]) == DAY)
        );
        assert_eq!(b.iter().map(|b| b.doc_count).sum::<u64>(), r.total);
        assert_eq!(b.iter().filter(|b| b.doc_count > 0).count(), 2);
    }
}

#[test]
fn calendar_months_two_years_wide_fill_every_month() {
    let dir = tempfile::tempdir().unwrap();
    let index = two_years(dir.path());
    let r = index
        .query(&request(hist(Interval::Calendar(CalendarUnit::Month), 0)))
        .unwrap();
    let b = buckets(&r.aggs[0].1);
    // January 2025 to January 2027.
    assert_eq!(b.len(), 25);
    assert_eq!(time_key(&b[1]), t("2025-02-01T00:00:00Z"));
    assert_eq!(time_key(&b[24]), t("2027-01-01T00:00:00Z"));
    assert_eq!(b.iter().map(|b| b.doc_count).sum::<u64>(), r.total);
}

#[test]
fn histogram_at_the_limit_is_answered_whole_and_one_bucket_more_fails() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = t("2025-01-01T00:00:00Z");
    let last = t0 + 65_535 * MIN;
    let index = index(dir.path(), &[("a", t0), ("a", last), ("b", last + MIN)]);
    let only_a = |interval| SearchRequest {
        filter: Filter::Terms {
            field: "host".into(),
            values: vec!["a".into()],
        },
        ..request(hist(interval, 0))
    };
    let r = index.query(&only_a(Interval::Fixed(MIN))).unwrap();
    let b = buckets(&r.aggs[0].1);
    assert_eq!(b.len() as u64, DEFAULT_MAX_BUCKETS);
    assert_eq!((time_key(&b[0]), time_key(&b[65_535])), (t0, last));
    assert_eq!(b.iter().map(|b| b.doc_count).sum::<u64>(), r.total);
    // The next minute's document makes it one bucket too many.
    let e = index
        .query(&request(hist(Interval::Fixed(MIN), 0)))
        .unwrap_err();
    assert_eq!(too_many(&e), (DEFAULT_MAX_BUCKETS, DEFAULT_MAX_BUCKETS + 1));
    // A request may raise its own limit.
    let r = index
        .query(&SearchRequest {
            max_buckets: DEFAULT_MAX_BUCKETS + 1,
            ..request(hist(Interval::Fixed(MIN), 0))
        })
        .unwrap();
    assert_eq!(buckets(&r.aggs[0].1).len() as u64, DEFAULT_MAX_BUCKETS + 1);
}

#[test]
fn min_doc_count_one_counts_only_buckets_with_documents() {
    let dir = tempfile::tempdir().unwrap();
    let index = two_years(dir.path());
    let r = index
        .query(&request(hist(Interval::Fixed(MIN), 1)))
        .unwrap();
    let b = buckets(&r.aggs[0].1);
    assert_eq!(
        b.iter().map(time_key).collect::<Vec<_>>(),
        [t("2025-01-01T00:00:00Z"), t("2027-01-01T00:00:00Z")]
    );
    assert_eq!(b.iter().map(|b| b.doc_count).sum::<u64>(), r.total);
    // Two buckets need a limit of two, not of the range's width.
    let e = index
        .query(&SearchRequest {
            max_buckets: 1,
            ..request(hist(Interval::Fixed(MIN), 1))
        })
        .unwrap_err();
    assert_eq!(too_many(&e), (1, 2));
}

#[test]
fn extended_bounds_beyond_the_limit_fail_without_any_document() {
    let dir = tempfile::tempdir().unwrap();
    let index = two_years(dir.path());
    let wide = Agg::DateHistogram {
        interval: Interval::Fixed(MIN),
        min_doc_count: 0,
        extended_bounds: Some((t("2025-01-01T00:00:00Z"), t("2027-01-01T00:00:00Z"))),
        aggs: Vec::new(),
    };
    let nothing = Filter::Terms {
        field: "host".into(),
        values: vec!["none".into()],
    };
    // An empty time range answers without reading rows: the bounds still count.
    let empty_range = Filter::Time { min: 10, max: 0 };
    for filter in [nothing, empty_range] {
        let e = index
            .query(&SearchRequest {
                filter: filter.clone(),
                ..request(wide.clone())
            })
            .unwrap_err();
        assert_eq!(too_many(&e), (DEFAULT_MAX_BUCKETS, 1_051_201), "{filter:?}");
    }
}

#[test]
fn extended_bounds_at_the_ends_of_time_fail_instead_of_walking() {
    let dir = tempfile::tempdir().unwrap();
    let index = two_years(dir.path());
    for interval in [
        Interval::Fixed(1),
        Interval::Fixed(3),
        Interval::Calendar(CalendarUnit::Week),
        Interval::Calendar(CalendarUnit::Year),
    ] {
        let e = index
            .query(&request(Agg::DateHistogram {
                interval,
                min_doc_count: 0,
                extended_bounds: Some((i64::MIN, i64::MAX)),
                aggs: Vec::new(),
            }))
            .unwrap_err();
        let (limit, requested) = too_many(&e);
        assert_eq!(limit, DEFAULT_MAX_BUCKETS);
        assert!(requested > limit, "{interval:?}: {requested}");
    }
    // Bounds at the end of time that fit are answered, up to the last representable
    // bucket (the time filter leaves the documents of 2025 out).
    let r = index
        .query(&SearchRequest {
            filter: Filter::Time {
                min: i64::MAX - 10,
                max: i64::MAX,
            },
            ..request(Agg::DateHistogram {
                interval: Interval::Fixed(1),
                min_doc_count: 0,
                extended_bounds: Some((i64::MAX - 4, i64::MAX)),
                aggs: Vec::new(),
            })
        })
        .unwrap();
    let b = buckets(&r.aggs[0].1);
    assert_eq!(
        b.iter().map(time_key).collect::<Vec<_>>(),
        (i64::MAX - 4..=i64::MAX).collect::<Vec<_>>()
    );
}

#[test]
fn terms_beyond_the_limit_fail_and_a_size_within_it_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = t("2025-01-01T00:00:00Z");
    let docs: Vec<(&str, i64)> = ["a", "b", "c", "d", "e", "f"]
        .iter()
        .enumerate()
        .map(|(i, h)| (*h, t0 + i as i64 * MIN))
        .collect();
    let index = index(dir.path(), &docs);
    let terms = |size| SearchRequest {
        max_buckets: 5,
        ..request(Agg::Terms {
            field: "host".into(),
            size,
            min_doc_count: 1,
            aggs: Vec::new(),
        })
    };
    let e = index.query(&terms(usize::MAX)).unwrap_err();
    assert_eq!(too_many(&e), (5, 6));
    // `size` is the request's own cut: the rest is in `sum_other_doc_count`.
    let r = index.query(&terms(5)).unwrap();
    match &r.aggs[0].1 {
        AggOutput::Buckets {
            buckets,
            sum_other_doc_count,
        } => {
            assert_eq!(buckets.len(), 5);
            let counted: u64 = buckets.iter().map(|b| b.doc_count).sum();
            assert_eq!(counted + sum_other_doc_count, r.total);
        }
        other => panic!("buckets expected, got {other:?}"),
    }
}

#[test]
fn nested_buckets_count_toward_the_limit_at_every_level() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = t("2025-01-01T00:00:00Z");
    // Three hosts, each with data ten minutes apart: 11 minute buckets each.
    let docs: Vec<(&str, i64)> = ["a", "b", "c"]
        .iter()
        .flat_map(|h| [(*h, t0), (*h, t0 + 10 * MIN)])
        .collect();
    let index = index(dir.path(), &docs);
    let nested = |max_buckets| SearchRequest {
        max_buckets,
        ..request(Agg::Terms {
            field: "host".into(),
            size: 10,
            min_doc_count: 1,
            aggs: vec![("per_minute".into(), hist(Interval::Fixed(MIN), 0))],
        })
    };
    let r = index.query(&nested(3 + 3 * 11)).unwrap();
    let hosts = buckets(&r.aggs[0].1);
    assert_eq!(hosts.len(), 3);
    let mut counted = 0;
    for host in hosts {
        let minutes = buckets(&host.aggs[0].1);
        assert_eq!(minutes.len(), 11);
        counted += minutes.iter().map(|b| b.doc_count).sum::<u64>();
    }
    assert_eq!(counted, r.total);
    let e = index.query(&nested(3 + 3 * 11 - 1)).unwrap_err();
    assert_eq!(too_many(&e).0, 35);
}
