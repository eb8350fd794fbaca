//! Rollups through the façade and the binary: rollup retention (a partition past the
//! raw retention answers from its kept rollup, and says plainly where nothing can
//! answer), rollup documents (`search_rollup`, `SearchRequest::rollup`, `search
//! --rollup`) equal whichever path computes them, `query` aggregations answered from
//! rollups equal to raw, and every dimension filter of `query` selecting series
//! through the dimension index.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use assert_cmd::Command;
use serde_json::{Value, json};
use tidemark::dedup::{EngineConfig, PartitionConfig};
use tidemark::{
    Agg, AggOutput, AggQuery, BulkItem, CalendarUnit, Filter, Index, Interval, ItemStatus, Mapping,
    MetricKind, Query, SearchRequest, TimeRange,
};

const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;
const DAY: i64 = 24 * HOUR;

fn mapping_json() -> Value {
    json!({"mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "region": {"type": "keyword", "time_series_dimension": true},
        "cpu": {"type": "double", "time_series_metric": "gauge"},
        "bytes": {"type": "long", "time_series_metric": "counter"}}}})
}

fn doc(host: u32, ts: i64) -> Value {
    let k = ts / MIN;
    json!({
        "@timestamp": ts,
        "host": format!("h{host}"),
        "region": if host.is_multiple_of(2) { "eu" } else { "us" },
        "cpu": ((k * 7 + i64::from(host)) % 101) as f64 / 10.0 + 0.1,
        // Resets every 50 minutes.
        "bytes": (k % 50) * 1000 + i64::from(host),
    })
}

/// Every 3 minutes of `days`, for `hosts` hosts.
fn docs(days: std::ops::Range<i64>, hosts: u32) -> Vec<BulkItem> {
    let mut out = Vec::new();
    for d in days {
        for h in 0..hosts {
            for m in (0..DAY / MIN).step_by(3) {
                out.push(BulkItem::create(doc(h, d * DAY + m * MIN)));
            }
        }
    }
    out
}

fn create(dir: &std::path::Path, parts: PartitionConfig) -> Index {
    Index::create_partitioned(
        dir,
        Mapping::from_value(mapping_json()).unwrap(),
        EngineConfig::new().with_refresh_rows(3000),
        parts,
    )
    .unwrap()
}

fn bulk(index: &mut Index, items: Vec<BulkItem>) {
    let out = index.bulk(items).unwrap();
    assert!(out.iter().all(|r| r.status == ItemStatus::Created));
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// Bucket key, count, min, max, increase: equal; sums within 1e-9 relative.
fn assert_buckets_equal(a: &[tidemark::AggBucket], b: &[tidemark::AggBucket]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(
            (x.key, x.count, x.min, x.max, x.increase),
            (y.key, y.count, y.min, y.max, y.increase)
        );
        assert!(close(x.sum, y.sum), "{} vs {}", x.sum, y.sum);
    }
}

fn agg(index: &Index, metric: &str, interval: i64, from: Option<i64>) -> tidemark::AggResult {
    index
        .aggregate(&AggQuery {
            metric: metric.into(),
            interval_millis: interval,
            from,
            ..AggQuery::default()
        })
        .unwrap()
}

#[test]
fn a_partition_past_the_raw_retention_answers_from_its_kept_rollup() {
    let tmp = tempfile::tempdir().unwrap();
    let parts = PartitionConfig::new()
        .with_width_ms(DAY)
        .with_retention_ms(Some(2 * DAY))
        .with_rollups(vec![5 * MIN, HOUR])
        .with_rollup_retention_ms(HOUR, 30 * DAY);
    let mut index = create(tmp.path(), parts);
    bulk(&mut index, docs(0..3, 3));
    index.refresh().unwrap();
    // The answers with every raw row, before retention.
    let before_hour = agg(&index, "cpu", HOUR, None);
    let before_bytes = agg(&index, "bytes", 2 * HOUR, None);
    let before_docs = index.search_rollup(&Query::default(), HOUR).unwrap().docs;
    assert_eq!(before_docs.len(), 3 * 3 * 24);
    // A point on day 4 moves the clock: days 0 and 1 are past the 2-day raw retention,
    // within the hour rollup's 30 days.
    bulk(&mut index, vec![BulkItem::create(doc(0, 4 * DAY))]);
    let report = index.maintain().unwrap();
    assert_eq!((report.raw_expired, report.dropped), (2, 0));
    let parts = index.engine().partitions();
    assert_eq!(
        parts
            .iter()
            .map(|p| (p.start_ms, p.raw_expired, p.rows))
            .collect::<Vec<_>>(),
        vec![
            (0, true, 0),
            (DAY, true, 0),
            (2 * DAY, false, 480 * 3),
            (4 * DAY, false, 1)
        ]
    );
    assert!(parts[0].rollups.iter().all(|r| r.0 == HOUR));
    let stats = index.stats().unwrap();
    assert_eq!(stats.partition_stats.expired_partitions, 2);
    assert_eq!(stats.partition_stats.expired_rows, 2 * 480 * 3);

    // Hourly (and 2-hourly) buckets: the kept rollup answers days 0 and 1 exactly as
    // the raw rows did; nothing is left out.
    let after = agg(&index, "cpu", HOUR, None);
    assert!(after.expired.is_empty(), "{:?}", after.expired);
    assert_buckets_equal(&after.buckets[..72], &before_hour.buckets);
    let after = agg(&index, "bytes", 2 * HOUR, None);
    assert!(after.expired.is_empty());
    assert_buckets_equal(&after.buckets[..36], &before_bytes.buckets);
    // 10-minute buckets cannot be answered there: said plainly, and left out.
    let fine = agg(&index, "cpu", 10 * MIN, None);
    assert_eq!(fine.expired, vec![(0, 2 * DAY - 1)]);
    assert!(fine.buckets.iter().all(|b| b.key >= 2 * DAY));
    // Nor can a bucket the range cuts; the whole ones still come from the rollup.
    let cut = agg(&index, "cpu", HOUR, Some(30 * MIN));
    assert_eq!(cut.expired, vec![(30 * MIN, HOUR - 1)]);
    assert_eq!(cut.buckets[0].key, HOUR);
    assert_buckets_equal(&cut.buckets[..71], &before_hour.buckets[1..]);
    // Raw only: the expired days are reported as such, not silently empty.
    let raw = index
        .aggregate(&AggQuery {
            metric: "cpu".into(),
            interval_millis: HOUR,
            raw_only: true,
            ..AggQuery::default()
        })
        .unwrap();
    assert_eq!(raw.expired, vec![(0, 2 * DAY - 1)]);
    assert_eq!(index.expired_ranges(TimeRange::ALL), vec![(0, 2 * DAY - 1)]);
    // Rollup documents of the kept resolution are unchanged; of the other, reported.
    let after_docs = index.search_rollup(&Query::default(), HOUR).unwrap();
    assert!(after_docs.expired.is_empty());
    assert_eq!(after_docs.docs[..3 * 3 * 24], before_docs[..]);
    let five = index.search_rollup(&Query::default(), 5 * MIN).unwrap();
    assert_eq!(five.expired, vec![(0, 2 * DAY - 1)]);
    // Dimension names and values of the expired days come from the kept rollup.
    assert_eq!(
        index
            .labels(TimeRange::half_open(Some(0), Some(2 * DAY)))
            .unwrap(),
        vec!["host", "region"]
    );
    assert_eq!(
        index
            .label_values("host", TimeRange::half_open(Some(DAY), Some(2 * DAY)))
            .unwrap(),
        vec![
            ("h0".to_owned(), 1),
            ("h1".to_owned(), 1),
            ("h2".to_owned(), 1)
        ]
    );
    // `query` (the `_search` path) too.
    let hist = |interval: Interval| SearchRequest {
        size: 0,
        aggs: vec![(
            "h".into(),
            Agg::DateHistogram {
                interval,
                min_doc_count: 1,
                extended_bounds: None,
                aggs: vec![(
                    "avg".into(),
                    Agg::Metric {
                        kind: MetricKind::Avg,
                        field: "cpu".into(),
                    },
                )],
            },
        )],
        ..SearchRequest::default()
    };
    let r = index.query(&hist(Interval::Fixed(HOUR))).unwrap();
    assert!(r.expired.is_empty());
    assert_eq!(r.total, 3 * 480 * 3 + 1);
    let r = index.query(&hist(Interval::Fixed(10 * MIN))).unwrap();
    assert_eq!(r.expired, vec![(0, 2 * DAY - 1)]);
    index.close().unwrap();

    // The binary lists the state and counts it.
    let dir = tmp.path().to_str().unwrap();
    let text = run(&["partitions", dir], 0);
    assert_eq!(text.matches("rollups-only").count(), 2, "{text}");
    assert!(
        text.contains("raw rows expired (rollups kept): 2 partitions, 2880 rows"),
        "{text}"
    );
    let out = tm()
        .args(["agg", dir, "--metric", "cpu", "--interval", "10m"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("has expired"), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["expired"][0]["to_ms"], json!(2 * DAY - 1));
}

#[test]
fn rollup_documents_are_the_same_from_raw_rows_and_from_rollups() {
    let tmp = tempfile::tempdir().unwrap();
    let parts = PartitionConfig::new()
        .with_width_ms(DAY)
        .with_rollups(vec![5 * MIN, HOUR]);
    let mut index = create(tmp.path(), parts);
    bulk(&mut index, docs(0..2, 3));
    let q = Query::default();
    // Active partitions: computed from raw rows.
    let from_raw = index.search_rollup(&q, HOUR).unwrap();
    index.refresh().unwrap();
    index.seal(0).unwrap();
    index.seal(DAY).unwrap();
    let from_rollups = index.search_rollup(&q, HOUR).unwrap();
    assert_eq!(from_raw, from_rollups);
    assert_eq!(from_rollups.total, 3 * 48);
    let d = &from_rollups.docs[0];
    assert_eq!(d["@timestamp"], json!("1970-01-01T00:00:00.000Z"));
    assert_eq!(d["_doc_count"], json!(20));
    assert_eq!(d["cpu"]["value_count"], json!(20));
    assert!(d["cpu"]["min"].is_number() && d["cpu"]["sum"].is_number());
    assert!(d["bytes"]["first"].is_i64() && d["bytes"]["last"].is_i64());
    assert!(d["bytes"].get("sum").is_none());
    assert!(d["bytes"]["increase"].as_i64().unwrap() > 0);
    assert!(d["host"].is_string());
    // The documents agree with the raw aggregation of the same bucket.
    let raw = agg(&index, "cpu", HOUR, None);
    let s0 = raw
        .series
        .iter()
        .find(|s| s.tsid.to_string() == d["_tsid"])
        .unwrap();
    let b0 = &s0.buckets[0];
    assert_eq!(d["cpu"]["min"], json!(b0.min));
    assert_eq!(d["cpu"]["max"], json!(b0.max));
    assert!(close(d["cpu"]["sum"].as_f64().unwrap(), b0.sum));
    // Filters through the rollups' dimension index; time by bucket start; order, limit.
    let m = |t: &str| tidemark::Filter::parse_matcher(t).unwrap();
    let one = index
        .search_rollup(
            &Query {
                matchers: vec![m("host=h1")],
                from: Some(DAY - 2 * HOUR),
                to: Some(DAY + HOUR + 1),
                order: tidemark::Order::Desc,
                limit: Some(2),
                ..Query::default()
            },
            HOUR,
        )
        .unwrap();
    assert_eq!(one.total, 4);
    assert_eq!(one.docs.len(), 2);
    assert_eq!(one.docs[0]["host"], json!("h1"));
    assert_eq!(one.docs[0]["@timestamp"], json!("1970-01-02T01:00:00.000Z"));
    // The finer resolution: one document per series and 5 minutes.
    let five = index.search_rollup(&q, 5 * MIN).unwrap();
    assert_eq!(five.total, 3 * 2 * 288);
    // The `_search` path: hits are rollup documents.
    let r = index
        .query(&SearchRequest {
            rollup: Some(HOUR),
            size: 5,
            filter: Filter::Terms {
                field: "region".into(),
                values: vec!["us".into()],
            },
            ..SearchRequest::default()
        })
        .unwrap();
    assert_eq!(r.total, 48);
    assert_eq!(r.hits.len(), 5);
    assert_eq!(r.hits[1].ts_millis, HOUR);
    assert_eq!(r.hits[0].doc["host"], json!("h1"));
    // Errors: a resolution the index has not, an `_id` prefix, a non-dimension filter.
    assert!(index.search_rollup(&q, 2 * HOUR).is_err());
    assert!(
        index
            .search_rollup(
                &Query {
                    id_prefix: Some("x".into()),
                    ..Query::default()
                },
                HOUR
            )
            .is_err()
    );
    assert!(
        index
            .query(&SearchRequest {
                rollup: Some(HOUR),
                filter: Filter::Exists("cpu".into()),
                ..SearchRequest::default()
            })
            .is_err()
    );
    index.close().unwrap();
    // The binary.
    let dir = tmp.path().to_str().unwrap();
    let text = run(
        &[
            "search", dir, "--rollup", "1h", "--match", "host=h2", "--limit", "3",
        ],
        0,
    );
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["_doc_count"], json!(20));
    assert_eq!(lines[2]["@timestamp"], json!("1970-01-01T02:00:00.000Z"));
}

fn hist_request(filter: Filter, interval: Interval, raw_only: bool) -> SearchRequest {
    let metric = |kind, field: &str| Agg::Metric {
        kind,
        field: field.into(),
    };
    SearchRequest {
        filter,
        size: 0,
        raw_only,
        aggs: vec![(
            "h".into(),
            Agg::DateHistogram {
                interval,
                min_doc_count: 0,
                extended_bounds: None,
                aggs: vec![
                    ("avg".into(), metric(MetricKind::Avg, "cpu")),
                    ("min".into(), metric(MetricKind::Min, "cpu")),
                    ("max".into(), metric(MetricKind::Max, "bytes")),
                    ("sum".into(), metric(MetricKind::Sum, "bytes")),
                    ("n".into(), metric(MetricKind::ValueCount, "cpu")),
                ],
            },
        )],
        ..SearchRequest::default()
    }
}

fn assert_aggs_equal(a: &[(String, AggOutput)], b: &[(String, AggOutput)]) {
    assert_eq!(a.len(), b.len());
    for ((na, x), (nb, y)) in a.iter().zip(b) {
        assert_eq!(na, nb);
        match (x, y) {
            (AggOutput::Value(x), AggOutput::Value(y)) => match (x, y) {
                (Some(x), Some(y)) => assert!(close(*x, *y), "{na}: {x} vs {y}"),
                _ => assert_eq!(x, y, "{na}"),
            },
            (AggOutput::Buckets { buckets: x, .. }, AggOutput::Buckets { buckets: y, .. }) => {
                assert_eq!(x.len(), y.len(), "{na}");
                for (p, q) in x.iter().zip(y) {
                    assert_eq!((&p.key, p.doc_count), (&q.key, q.doc_count), "{na}");
                    assert_aggs_equal(&p.aggs, &q.aggs);
                }
            }
            _ => panic!("{na}: different shapes"),
        }
    }
}

#[test]
fn search_aggregations_read_the_coarsest_fitting_rollup_and_equal_raw() {
    let tmp = tempfile::tempdir().unwrap();
    let parts = PartitionConfig::new()
        .with_width_ms(DAY)
        .with_rollups(vec![5 * MIN, HOUR]);
    let mut index = create(tmp.path(), parts);
    bulk(&mut index, docs(0..3, 4));
    index.refresh().unwrap();
    index.seal(0).unwrap();
    index.seal(DAY).unwrap();
    let eu = Filter::Terms {
        field: "region".into(),
        values: vec!["eu".into()],
    };
    let ranged = |f: Filter| {
        Filter::And(vec![
            Filter::Time {
                min: 50 * MIN,
                max: 2 * DAY + 7 * HOUR,
            },
            f,
        ])
    };
    let not_h0 = Filter::Not(Box::new(Filter::Terms {
        field: "host".into(),
        values: vec!["h0".into()],
    }));
    for (filter, interval, rollup_rows) in [
        (Filter::All, Interval::Fixed(HOUR), true),
        (eu.clone(), Interval::Fixed(2 * HOUR), true),
        (ranged(eu.clone()), Interval::Fixed(10 * MIN), true),
        (
            ranged(not_h0.clone()),
            Interval::Calendar(CalendarUnit::Day),
            true,
        ),
        (
            not_h0.clone(),
            Interval::Calendar(CalendarUnit::Month),
            true,
        ),
        // 7 minutes: no rollup fits; raw everywhere.
        (Filter::All, Interval::Fixed(7 * MIN), false),
        // A row-level filter: raw.
        (Filter::Exists("cpu".into()), Interval::Fixed(HOUR), false),
    ] {
        let rolled = index
            .query(&hist_request(filter.clone(), interval, false))
            .unwrap();
        let raw = index
            .query(&hist_request(filter.clone(), interval, true))
            .unwrap();
        assert_eq!(
            rolled.rollup_rows > 0,
            rollup_rows,
            "{filter:?} {interval:?}"
        );
        assert_eq!(raw.rollup_rows, 0);
        assert_eq!(rolled.total, raw.total, "{filter:?} {interval:?}");
        assert_aggs_equal(&rolled.aggs, &raw.aggs);
        if rollup_rows {
            assert!(rolled.rows_scanned < raw.rows_scanned / 2);
        }
    }
}

#[test]
fn search_aggregations_from_rollups_keep_the_bucket_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let parts = PartitionConfig::new()
        .with_width_ms(DAY)
        .with_rollups(vec![HOUR]);
    let mut index = create(tmp.path(), parts);
    bulk(&mut index, docs(0..2, 1));
    index.refresh().unwrap();
    index.seal(0).unwrap();
    // Two days of hours: 48 buckets.
    let limited = |max_buckets, raw_only| SearchRequest {
        max_buckets,
        ..hist_request(Filter::All, Interval::Fixed(HOUR), raw_only)
    };
    let rolled = index.query(&limited(48, false)).unwrap();
    assert!(rolled.rollup_rows > 0);
    let raw = index.query(&limited(48, true)).unwrap();
    assert_aggs_equal(&rolled.aggs, &raw.aggs);
    for raw_only in [false, true] {
        let e = index.query(&limited(47, raw_only)).unwrap_err();
        assert!(
            matches!(
                e,
                tidemark::Error::TooManyBuckets {
                    limit: 47,
                    requested: 48
                }
            ),
            "{e}"
        );
    }
}

#[test]
fn query_filters_select_series_through_the_dimension_index() {
    let tmp = tempfile::tempdir().unwrap();
    let parts = PartitionConfig::new().with_width_ms(DAY);
    let mut index = create(tmp.path(), parts);
    // 300 hosts, one document each on two days; day 0 in a segment, day 1 buffered.
    let day = |d: i64| -> Vec<BulkItem> {
        (0..300u32)
            .map(|h| BulkItem::create(doc(h, d * DAY + i64::from(h) * 1000)))
            .collect()
    };
    bulk(&mut index, day(0));
    index.refresh().unwrap();
    bulk(&mut index, day(1));
    let terms = |field: &str, v: &[&str]| Filter::Terms {
        field: field.into(),
        values: v.iter().map(|s| (*s).to_owned()).collect(),
    };
    let not = |f: Filter| Filter::Not(Box::new(f));
    let host_is = |h: u32, pred: &dyn Fn(&str) -> bool| pred(&format!("h{h}"));
    // (filter, which hosts match, whether rows are selected by series alone)
    type Pred = Box<dyn Fn(u32) -> bool>;
    let cases: Vec<(Filter, Pred, bool)> = vec![
        (terms("host", &["h17"]), Box::new(|h| h == 17), true),
        (
            terms("host", &["h1", "h2", "nope"]),
            Box::new(|h| h == 1 || h == 2),
            true,
        ),
        (
            Filter::Prefix {
                field: "host".into(),
                prefix: "h1".into(),
            },
            Box::new(move |h| host_is(h, &|s| s.starts_with("h1"))),
            true,
        ),
        (
            Filter::Regex {
                field: "host".into(),
                pattern: "h2[0-9]".into(),
            },
            Box::new(|h| (20..30).contains(&h)),
            true,
        ),
        (
            Filter::Wildcard {
                field: "host".into(),
                pattern: "h?5".into(),
            },
            Box::new(|h| (10..100).contains(&h) && h % 10 == 5),
            true,
        ),
        (
            Filter::And(vec![
                Filter::Wildcard {
                    field: "host".into(),
                    pattern: "h29*".into(),
                },
                not(terms("region", &["eu"])),
            ]),
            Box::new(|h| (h == 29 || (290..300).contains(&h)) && h % 2 == 1),
            true,
        ),
        (
            Filter::Or(vec![terms("host", &["h3"]), terms("host", &["h4"])]),
            Box::new(|h| h == 3 || h == 4),
            true,
        ),
        (
            not(Filter::Or(vec![
                terms("region", &["eu"]),
                Filter::Prefix {
                    field: "host".into(),
                    prefix: "h1".into(),
                },
            ])),
            Box::new(move |h| h % 2 == 1 && !host_is(h, &|s| s.starts_with("h1"))),
            true,
        ),
        (Filter::Exists("region".into()), Box::new(|_| true), true),
        // A negated time range is not a series property: the host term selects the
        // series, the time is checked row by row.
        (
            Filter::And(vec![
                terms("host", &["h5"]),
                not(Filter::Time {
                    min: DAY,
                    max: i64::MAX,
                }),
            ]),
            Box::new(|h| h == 5),
            false,
        ),
    ];
    for (filter, pred, exact) in cases {
        let matching = (0..300u32).filter(|h| pred(*h)).count() as u64;
        let r = index
            .query(&SearchRequest {
                filter: filter.clone(),
                size: 1000,
                ..SearchRequest::default()
            })
            .unwrap();
        let day_factor = if exact { 2 } else { 1 };
        assert_eq!(r.total, matching * day_factor, "{filter:?}");
        assert_eq!(r.hits.len() as u64, r.total);
        if exact {
            // Only the chosen series' rows were read.
            assert_eq!(r.rows_scanned, matching * 2, "{filter:?}");
        } else {
            assert!(r.rows_scanned <= 2 * 2, "{filter:?}: {}", r.rows_scanned);
        }
    }
    // Errors name the problem.
    for bad in [
        Filter::Regex {
            field: "host".into(),
            pattern: "(".into(),
        },
        Filter::Prefix {
            field: "cpu".into(),
            prefix: "1".into(),
        },
        Filter::Wildcard {
            field: "nope".into(),
            pattern: "*".into(),
        },
    ] {
        let e = index
            .query(&SearchRequest {
                filter: bad,
                ..SearchRequest::default()
            })
            .unwrap_err();
        assert!(matches!(e, tidemark::Error::Query { .. }), "{e}");
    }
}

fn tm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tidemark"))
}

fn run(args: &[&str], code: i32) -> String {
    let out = tm().args(args).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "tidemark {args:?}\n{stdout}\n{stderr}"
    );
    stdout
}
