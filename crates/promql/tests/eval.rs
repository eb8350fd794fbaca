//! The evaluator through the public API: Prometheus semantics, unsupported features,
//! limits, the JSON shapes, and the adapter over a mapped `tidemark::Index`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serde_json::json;
use tidemark::{BulkItem, Index, Mapping};
use tidemark_promql::{
    Error, IndexStorage, MemStorage, QueryOptions, QueryValue, STALE_NAN_BITS, api, instant_query,
    range_query,
};

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn vector(v: QueryValue) -> Vec<(Vec<(String, String)>, f64)> {
    match v {
        QueryValue::Vector(s) => s.into_iter().map(|s| (s.labels, s.v)).collect(),
        other => panic!("expected a vector, got {other:?}"),
    }
}

/// A counter `c{job}` rising by `per_15s` every 15 s from 0 to 10 minutes.
fn counters() -> MemStorage {
    let mut s = MemStorage::new();
    for (job, per) in [("a", 10.0), ("b", 5.0)] {
        s.add(
            labels(&[("__name__", "c"), ("job", job)]),
            (0..=40).map(|i| (i * 15_000, i as f64 * per)),
        );
    }
    s
}

#[test]
fn rate_extrapolates_and_sums_by_label() {
    let s = counters();
    let opts = QueryOptions::default();
    let v = vector(instant_query(&s, "sum by (job) (rate(c[1m]))", 300_000, &opts).unwrap());
    let mut v = v;
    v.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(v.len(), 2);
    assert!((v[0].1 - 10.0 / 15.0).abs() < 1e-12, "{v:?}");
    assert!((v[1].1 - 5.0 / 15.0).abs() < 1e-12, "{v:?}");
    // increase over 1 m of samples every 15 s: 4 gaps of 10, extrapolated to 60 s.
    let inc = vector(instant_query(&s, "increase(c{job=\"a\"}[1m])", 300_000, &opts).unwrap());
    assert!((inc[0].1 - 40.0).abs() < 1e-9, "{inc:?}");
    assert_eq!(inc[0].0, labels(&[("job", "a")]), "the name is dropped");
}

#[test]
fn counter_resets_are_corrected() {
    let mut s = MemStorage::new();
    s.add(
        labels(&[("__name__", "r")]),
        [(0, 5.0), (10_000, 10.0), (20_000, 2.0), (30_000, 7.0)],
    );
    let opts = QueryOptions::default();
    let v = vector(instant_query(&s, "resets(r[1m])", 30_000, &opts).unwrap());
    assert_eq!(v[0].1, 1.0);
    // The last two samples: 2 then 7.
    let d = vector(instant_query(&s, "idelta(r[1m])", 30_000, &opts).unwrap());
    assert_eq!(d[0].1, 5.0);
    let ir = vector(instant_query(&s, "irate(r[1m])", 30_000, &opts).unwrap());
    assert!((ir[0].1 - 0.5).abs() < 1e-12);
}

#[test]
fn lookback_and_staleness_end_a_series() {
    let mut s = MemStorage::new();
    s.add(
        labels(&[("__name__", "g")]),
        [
            (0, 1.0),
            (60_000, 2.0),
            (120_000, f64::from_bits(STALE_NAN_BITS)),
        ],
    );
    let opts = QueryOptions::default();
    // Within 5 minutes of the last sample, the value holds...
    assert_eq!(
        vector(instant_query(&s, "g", 100_000, &opts).unwrap())[0].1,
        2.0
    );
    // ...until the staleness marker,
    assert!(vector(instant_query(&s, "g", 130_000, &opts).unwrap()).is_empty());
    // and without one, until 5 minutes have passed.
    let mut t = MemStorage::new();
    t.add(labels(&[("__name__", "g")]), [(0, 1.0)]);
    assert_eq!(
        vector(instant_query(&t, "g", 299_999, &opts).unwrap()).len(),
        1
    );
    assert!(vector(instant_query(&t, "g", 300_000, &opts).unwrap()).is_empty());
}

#[test]
fn range_query_steps_and_vector_matching() {
    let s = counters();
    let opts = QueryOptions::default();
    let m = range_query(
        &s,
        "c{job=\"a\"} / ignoring(job) c{job=\"b\"}",
        15_000,
        45_000,
        15_000,
        &opts,
    );
    // Label sets differ only in `job`, ignored: one-to-one match, ratio 2.
    let QueryValue::Matrix(series) = m.unwrap() else {
        panic!()
    };
    assert_eq!(series.len(), 1);
    assert_eq!(
        series[0].points,
        vec![(15_000, 2.0), (30_000, 2.0), (45_000, 2.0)]
    );
    let data = api::data_json(&range_query(&s, "c > bool 99", 0, 300_000, 150_000, &opts).unwrap());
    assert_eq!(data["resultType"], "matrix");
    assert_eq!(data["result"][0]["values"][1], json!([150, "1"]));
}

#[test]
fn unsupported_features_are_named() {
    let s = counters();
    let opts = QueryOptions::default();
    for (q, what) in [
        ("sort_by_label(c, \"job\")", "sort_by_label"),
        ("limitk(1, c)", "limitk"),
        ("mad_over_time(c[5m])", "mad_over_time"),
    ] {
        let err = instant_query(&s, q, 0, &opts).unwrap_err();
        assert!(matches!(err, Error::Unsupported(_)), "{q}: {err}");
        assert_eq!(err.error_type(), "bad_data");
        assert!(err.to_string().contains(what), "{q}: {err}");
    }
    let err = instant_query(&s, "sum(", 0, &opts).unwrap_err();
    assert_eq!(api::error_json(&err)["errorType"], "bad_data");
}

#[test]
fn limits_fail_with_clear_errors() {
    let s = counters();
    let few_series = QueryOptions {
        max_series: 1,
        ..QueryOptions::default()
    };
    let err = instant_query(&s, "c", 300_000, &few_series).unwrap_err();
    assert!(matches!(err, Error::TooManySeries { limit: 1 }), "{err}");
    assert_eq!(err.error_type(), "execution");
    let few_points = QueryOptions {
        max_points: 10,
        ..QueryOptions::default()
    };
    let err = instant_query(&s, "c", 300_000, &few_points).unwrap_err();
    assert!(matches!(err, Error::TooManyPoints { limit: 10 }), "{err}");
    let no_time = QueryOptions {
        timeout: Duration::ZERO,
        ..QueryOptions::default()
    };
    std::thread::sleep(Duration::from_millis(2));
    let err = instant_query(&s, "sum(c)", 300_000, &no_time).unwrap_err();
    assert_eq!(err.error_type(), "timeout");
    let err = range_query(&s, "c", 0, 100_000_000, 1_000, &QueryOptions::default()).unwrap_err();
    assert!(err.to_string().contains("11,000"), "{err}");
}

#[test]
fn scalars_strings_and_json_shapes() {
    let s = MemStorage::new();
    let opts = QueryOptions::default();
    let v = instant_query(&s, "1+1", 1_500, &opts).unwrap();
    assert_eq!(
        api::success_json(api::data_json(&v)),
        json!({"status": "success", "data": {"resultType": "scalar", "result": [1.5, "2"]}})
    );
    let v = instant_query(&s, "\"hi\"", 2_000, &opts).unwrap();
    assert_eq!(api::data_json(&v)["result"], json!([2, "hi"]));
    let v = instant_query(&s, "vector(1) / 0", 0, &opts).unwrap();
    assert_eq!(api::data_json(&v)["result"][0]["value"][1], "+Inf");
}

#[test]
fn mapped_index_reads_as_prometheus_series() {
    let dir = tempfile::tempdir().unwrap();
    let mapping = Mapping::from_value(json!({"mappings": {"properties": {
        "host.name": {"type": "keyword", "time_series_dimension": true},
        "site": {"type": "keyword", "time_series_dimension": true},
        "cpu": {"type": "double", "time_series_metric": "gauge"},
        "requests": {"type": "long", "time_series_metric": "counter"}
    }}}))
    .unwrap();
    let mut index = Index::create(dir.path().join("ix"), mapping).unwrap();
    let mut items = Vec::new();
    for (host, site) in [("h1", "eu"), ("h2", "eu"), ("h3", "us")] {
        for i in 0..=20i64 {
            items.push(BulkItem::create(json!({
                "@timestamp": i * 10_000, "host": {"name": host}, "site": site,
                "cpu": i as f64 / 10.0, "requests": i * 100
            })));
        }
    }
    // Half to segments, half in the buffer: both are read.
    let (a, b) = items.split_at(30);
    index.bulk(a.to_vec()).unwrap();
    index.refresh().unwrap();
    index.bulk(b.to_vec()).unwrap();
    let storage = IndexStorage::new(&index);
    let opts = QueryOptions::default();
    let mut v = vector(
        instant_query(
            &storage,
            "sum by (site) (rate(requests[1m]))",
            200_000,
            &opts,
        )
        .unwrap(),
    );
    v.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(v.len(), 2);
    assert_eq!(v[0].0, labels(&[("site", "eu")]));
    assert!((v[0].1 - 20.0).abs() < 1e-9, "{v:?}");
    assert!((v[1].1 - 10.0).abs() < 1e-9, "{v:?}");
    let v = vector(
        instant_query(
            &storage,
            "cpu{host_name=~\"h[12]\", site!=\"us\"}",
            200_000,
            &opts,
        )
        .unwrap(),
    );
    assert_eq!(v.len(), 2);
    assert!(
        v.iter()
            .all(|(l, x)| l.iter().any(|(n, _)| n == "__name__") && (*x - 2.0).abs() < 1e-12)
    );
    let v = vector(
        instant_query(
            &storage,
            "{__name__=~\"cpu|requests\", host_name=\"h3\"}",
            200_000,
            &opts,
        )
        .unwrap(),
    );
    assert_eq!(v.len(), 2);
    // Series metadata without samples: every (series, metric) pair, filtered.
    let all = tidemark_promql::series(&storage, &[], i64::MIN / 2, i64::MAX / 2, 100).unwrap();
    assert_eq!(all.len(), 6);
    let sel = vec![tidemark_promql::selector_matchers("cpu{site=\"eu\"}").unwrap()];
    let hosts =
        tidemark_promql::label_values(&storage, "host_name", &sel, 0, 200_000, 100).unwrap();
    assert_eq!(hosts, vec!["h1", "h2"]);
    let none = tidemark_promql::series(&storage, &sel, 500_000, 600_000, 100).unwrap();
    assert!(none.is_empty(), "no samples in that range");
    // The adapter's own cap stops gathering samples during the scan.
    let capped = IndexStorage::new(&index).with_max_points(50);
    let err = instant_query(&capped, "sum(rate(requests[1h]))", 200_000, &opts).unwrap_err();
    assert!(matches!(err, Error::TooManyPoints { limit: 50 }), "{err}");
}

#[test]
fn extreme_times_are_errors_or_answers_never_panics() {
    let s = counters();
    let opts = QueryOptions::default();
    for (start, end) in [
        (i64::MIN / 2, i64::MAX / 2),
        (-9_200_000_000_000_000_000, 9_200_000_000_000_000_000),
    ] {
        assert!(range_query(&s, "rate(c[5m] offset -1h)", start, end, 1_000, &opts).is_err());
        let _ = instant_query(&s, "c @ 9200000000000000 offset 1y", end, &opts);
        let _ = instant_query(&s, "rate(c[5m]) offset -5m", start, &opts);
    }
}

#[test]
fn label_keyed_index_reads_its_own_labels() {
    let dir = tempfile::tempdir().unwrap();
    let mut index =
        Index::create(dir.path().join("lk"), tidemark::label_mapping().unwrap()).unwrap();
    // Written as the metrics protocols write: one point per labelled sample.
    let mut points = tidemark::LabelPoints::new().unwrap();
    let mut items = Vec::new();
    for i in 0..=12i64 {
        for job in ["a", "b"] {
            let doc = points
                .doc(
                    &[("__name__", "up_total"), ("job", job)],
                    i * 15_000,
                    tidemark::SampleValue::F64((i * 3) as f64),
                )
                .unwrap();
            items.push(tidemark::PreparedItem::store(
                items.len() as u64,
                tidemark::Action::Create,
                None,
                doc,
            ));
        }
    }
    assert_eq!(index.apply_prepared(items).unwrap().len(), 26);
    let storage = IndexStorage::new(&index);
    let opts = QueryOptions::default();
    let mut v = vector(instant_query(&storage, "up_total", 180_000, &opts).unwrap());
    v.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        v,
        vec![
            (labels(&[("__name__", "up_total"), ("job", "a")]), 36.0),
            (labels(&[("__name__", "up_total"), ("job", "b")]), 36.0),
        ]
    );
    let r = vector(instant_query(&storage, "sum(rate(up_total[1m]))", 180_000, &opts).unwrap());
    assert!((r[0].1 - 0.4).abs() < 1e-12, "{r:?}");
    let names = tidemark_promql::label_values(&storage, "__name__", &[], 0, 200_000, 10).unwrap();
    assert_eq!(names, vec!["up_total"]);
}

/// A label-keyed index with 40 series spread over three segments and the buffer, read
/// through the dimension index and in groups of 3 series (or 50 samples): every
/// selector answers as the same samples held in memory do.
#[test]
fn streaming_groups_and_postings_answer_as_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut index =
        Index::create(dir.path().join("lk"), tidemark::label_mapping().unwrap()).unwrap();
    let mut mem = MemStorage::new();
    let mut points = tidemark::LabelPoints::new().unwrap();
    for part in 0..4i64 {
        let mut items = Vec::new();
        for s in 0..40i64 {
            let host = format!("h{s}");
            let site = ["eu", "us", "ap"][(s % 3) as usize];
            let mut ls = vec![
                ("__name__", "req_total"),
                ("host", host.as_str()),
                ("site", site),
            ];
            if s % 4 == 0 {
                ls.push(("zone", "z1"));
            }
            let mut samples = Vec::new();
            for i in part * 10..part * 10 + 10 {
                let (t, v) = (i * 15_000, (i * (s + 1)) as f64);
                samples.push((t, v));
                let doc = points.doc(&ls, t, tidemark::SampleValue::F64(v)).unwrap();
                items.push(tidemark::PreparedItem::store(
                    items.len() as u64,
                    tidemark::Action::Create,
                    None,
                    doc,
                ));
            }
            mem.add(labels(&ls), samples);
        }
        index.apply_prepared(items).unwrap();
        if part < 3 {
            index.refresh().unwrap();
        }
    }
    let grouped = IndexStorage::new(&index).with_group_limits(3, 50);
    let whole = IndexStorage::new(&index);
    let opts = QueryOptions::default();
    for q in [
        "req_total",
        "req_total{site=\"eu\"}",
        "req_total{site!=\"eu\"}",
        "req_total{host=~\"h1.*\"}",
        "req_total{host!~\"h[0-2]\", site=~\"us|ap\"}",
        "req_total{zone=\"\"}",
        "req_total{zone!=\"\"}",
        "req_total{zone=~\"z.*|\"}",
        "{__name__=~\"req.*\", nothere=\"\"}",
        "req_total{nothere=\"x\"}",
        "sum by (site) (rate(req_total[2m]))",
        "max without (host) (req_total)",
        "count(req_total)",
        "rate(req_total[1m])",
    ] {
        let want = range_query(&mem, q, 0, 600_000, 30_000, &opts).unwrap();
        for storage in [&grouped, &whole] {
            let got = range_query(storage, q, 0, 600_000, 30_000, &opts).unwrap();
            assert_eq!(got, want, "{q}");
        }
    }
    let v =
        vector(instant_query(&grouped, "count(req_total{zone!=\"\"})", 300_000, &opts).unwrap());
    assert_eq!(v, vec![(vec![], 10.0)]);
    let all = tidemark_promql::series(&grouped, &[], 0, 600_000, 1000).unwrap();
    assert_eq!(all.len(), 40);
}

/// `topk`/`bottomk` over a selector or a range function stream (best k per group and
/// step as the series come); over any other expression they sort the materialized
/// vector. Both give the same answer, ties (many equal values) and NaN included, by
/// group, in range and instant queries.
#[test]
fn streamed_topk_equals_the_materialized_one() {
    let mut s = MemStorage::new();
    let mut x = 3u64;
    let mut next = |n: u64| {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (x >> 33) % n
    };
    for i in 0..40 {
        let grp = format!("g{}", i % 3);
        let host = format!("h{i}");
        let mut samples: Vec<(i64, f64)> = Vec::new();
        for k in 0..60i64 {
            if next(8) == 0 {
                continue;
            }
            let v = match next(12) {
                0 => f64::NAN,
                // Few distinct values: ties at most steps.
                _ => (next(4) * 10) as f64 + (k / 20) as f64,
            };
            samples.push((k * 15_000, v));
        }
        s.add(
            labels(&[("__name__", "m"), ("grp", &grp), ("host", &host)]),
            samples,
        );
    }
    let opts = QueryOptions::default();
    let pairs = [
        ("topk(3, rate(m[1m]))", "topk(3, rate(m[1m]) * 1)"),
        ("bottomk(2, rate(m[1m]))", "bottomk(2, rate(m[1m]) * 1)"),
        (
            "topk by (grp) (2, max_over_time(m[2m]))",
            "topk by (grp) (2, max_over_time(m[2m]) * 1)",
        ),
        (
            "bottomk by (grp) (4, min_over_time(m[1m]))",
            "bottomk by (grp) (4, -(-min_over_time(m[1m])))",
        ),
    ];
    for (streamed, materialized) in pairs {
        let a = range_query(&s, streamed, 0, 900_000, 30_000, &opts).unwrap();
        let b = range_query(&s, materialized, 0, 900_000, 30_000, &opts).unwrap();
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "{streamed}");
        for t in [300_000, 600_000, 885_000] {
            let a = instant_query(&s, streamed, t, &opts).unwrap();
            let b = instant_query(&s, materialized, t, &opts).unwrap();
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{streamed} at {t}");
        }
    }
}

/// The value of the single sample of an instant query (a vector of one or a scalar).
fn one(s: &MemStorage, q: &str, t: i64) -> (Vec<(String, String)>, f64) {
    let v = vector(instant_query(s, q, t, &QueryOptions::default()).unwrap());
    assert_eq!(v.len(), 1, "{q}: {v:?}");
    v.into_iter().next().unwrap()
}

#[test]
fn date_functions_read_sample_values_as_utc_unix_seconds() {
    let s = MemStorage::new();
    // 2006-01-02 22:04:05 UTC, a Monday.
    for (f, want) in [
        ("year", 2006.0),
        ("month", 1.0),
        ("day_of_month", 2.0),
        ("day_of_year", 2.0),
        ("day_of_week", 1.0),
        ("hour", 22.0),
        ("minute", 4.0),
        ("days_in_month", 31.0),
    ] {
        let q = format!("{f}(vector(1136239445))");
        assert_eq!(one(&s, &q, 0), (vec![], want), "{q}");
    }
    for (q, want) in [
        // 2016-02-29 23:59:59 and 2016-03-01 00:00:00 (a leap year).
        ("days_in_month(vector(1456790399))", 29.0),
        ("day_of_year(vector(1456790399))", 60.0),
        ("month(vector(1456790400))", 3.0),
        ("days_in_month(vector(1485907200))", 28.0),
        ("day_of_year(vector(1483191420))", 366.0),
        // Before 1970: 1969-12-31 23:59:59, a Wednesday.
        ("year(vector(-1))", 1969.0),
        ("day_of_week(vector(-1))", 3.0),
        ("day_of_year(vector(-1))", 365.0),
        ("minute(vector(-1))", 59.0),
        // Fractions truncate toward zero (Go's int64): -0.5 is 1970-01-01, a Thursday.
        ("day_of_week(vector(-0.5))", 4.0),
        ("hour(vector(3599.9))", 0.0),
        // NaN and ±Inf are Go's int64 "indefinite" (math.MinInt64), which Go's
        // time.Unix(..).UTC() reads as 292277026596-12-04 15:30:08, a Sunday.
        ("year(vector(NaN))", 292_277_026_596.0),
        ("month(vector(Inf))", 12.0),
        ("day_of_month(vector(-Inf))", 4.0),
        ("day_of_year(vector(NaN))", 339.0),
        ("day_of_week(vector(NaN))", 0.0),
        ("hour(vector(NaN))", 15.0),
        ("minute(vector(1e300))", 30.0),
        ("days_in_month(vector(NaN))", 31.0),
    ] {
        assert_eq!(one(&s, q, 0), (vec![], want), "{q}");
    }
}

#[test]
fn date_functions_drop_the_name_and_default_to_the_step_time() {
    let mut s = MemStorage::new();
    s.add(
        labels(&[("__name__", "boot_time"), ("job", "a")]),
        [(0, 1_136_239_445.0)],
    );
    let opts = QueryOptions::default();
    assert_eq!(
        one(&s, "hour(boot_time)", 60_000),
        (labels(&[("job", "a")]), 22.0)
    );
    // Without an argument: `vector(time())`, in whole seconds truncated toward zero.
    assert_eq!(one(&s, "year()", 0), (vec![], 1970.0));
    assert_eq!(one(&s, "day_of_week()", 0), (vec![], 4.0));
    assert_eq!(one(&s, "minute()", -1_500), (vec![], 59.0));
    assert_eq!(one(&s, "minute()", 119_999), (vec![], 1.0));
    let m = api::data_json(&range_query(&s, "hour()", 0, 7_200_000, 3_600_000, &opts).unwrap());
    assert_eq!(m["result"][0]["metric"], json!({}));
    assert_eq!(
        m["result"][0]["values"],
        json!([[0, "0"], [3600, "1"], [7200, "2"]])
    );
    // Delayed name removal: the name goes, so two metrics of equal labels collide.
    s.add(
        labels(&[("__name__", "start_time"), ("job", "a")]),
        [(0, 0.0)],
    );
    let err = instant_query(&s, "year({job=\"a\"})", 60_000, &opts).unwrap_err();
    assert!(err.to_string().contains("same labelset"), "{err}");
}

#[test]
fn absent_over_time_answers_where_no_series_has_samples_in_the_window() {
    let mut s = MemStorage::new();
    // Samples every minute from 0 to 10 m, then nothing.
    for path in ["/foo", "/bar"] {
        s.add(
            labels(&[("__name__", "req"), ("path", path), ("instance", "i1")]),
            (0..=10).map(|i| (i * 60_000, i as f64)),
        );
    }
    let opts = QueryOptions::default();
    let at = |q: &str, t: i64| vector(instant_query(&s, q, t, &opts).unwrap());
    assert_eq!(at("absent_over_time(req[5m])", 5 * 60_000), vec![]);
    // At 15 m the window (10 m, 15 m] is empty (left-open: the sample at 10 m is out).
    assert_eq!(
        at("absent_over_time(req[5m])", 15 * 60_000),
        vec![(vec![], 1.0)]
    );
    assert_eq!(at("absent_over_time(req[6m])", 15 * 60_000), vec![]);
    // Labels from the equality matchers only, a label matched twice left out.
    assert_eq!(
        at("absent_over_time(nope{job=\"x\", path!=\"/\"}[1m])", 0),
        vec![(labels(&[("job", "x")]), 1.0)]
    );
    assert_eq!(
        at(
            "absent_over_time(nope{h=\"a\", h=\"b\", instance=\"i9\"}[1m])",
            0
        ),
        vec![(labels(&[("instance", "i9")]), 1.0)]
    );
    assert_eq!(
        at("absent_over_time({instance=\"i1\"}[5m])", 21 * 60_000),
        vec![(labels(&[("instance", "i1")]), 1.0)]
    );
    // A range query: 1 only at the steps whose window is empty.
    let m = api::data_json(
        &range_query(
            &s,
            "absent_over_time(req{path=\"/foo\"}[2m])",
            600_000,
            900_000,
            60_000,
            &opts,
        )
        .unwrap(),
    );
    assert_eq!(m["result"][0]["metric"], json!({"path": "/foo"}));
    assert_eq!(
        m["result"][0]["values"],
        json!([[720, "1"], [780, "1"], [840, "1"], [900, "1"]])
    );
    // Stale markers are not samples.
    let mut st = MemStorage::new();
    st.add(
        labels(&[("__name__", "g")]),
        [(0, 1.0), (60_000, f64::from_bits(STALE_NAN_BITS))],
    );
    let v = vector(instant_query(&st, "absent_over_time(g[1m])", 90_000, &opts).unwrap());
    assert_eq!(v, vec![(vec![], 1.0)]);
}

#[test]
fn predict_linear_predicts_from_the_evaluation_time_not_the_at_time() {
    let mut s = MemStorage::new();
    // x = t in seconds, one sample a minute: slope 1 per second.
    s.add(
        labels(&[("__name__", "x")]),
        (0..=20).map(|i| (i * 60_000, (i * 60) as f64)),
    );
    // The regression reads (0 s, 600 s]; the line is extended to 1200 s + 60 s.
    let (_, v) = one(&s, "predict_linear(x[10m] @ 600, 60)", 1_200_000);
    assert!((v - 1260.0).abs() < 1e-9, "{v}");
    let (_, v) = one(&s, "predict_linear(x[10m] offset 10m, 60)", 1_200_000);
    assert!((v - 1260.0).abs() < 1e-9, "{v}");
}

#[test]
fn subqueries_evaluate_at_multiples_of_their_step() {
    // c{job="a"} = 10 per 15 s: 180 at 270 s, 200 at 300 s.
    let s = counters();
    let opts = QueryOptions::default();
    let v = |q: &str, t: i64| one(&s, q, t).1;
    // At 310 s, [1m:30s] reads the steps in (250 s, 310 s] that are multiples of 30 s.
    assert_eq!(v("count_over_time(c{job=\"a\"}[1m:30s])", 310_000), 2.0);
    assert_eq!(v("min_over_time(c{job=\"a\"}[1m:30s])", 310_000), 180.0);
    assert_eq!(v("max_over_time(c{job=\"a\"}[1m:30s])", 310_000), 200.0);
    // The window is left-open: at 300 s, 240 s is out, 255..300 s in.
    assert_eq!(v("count_over_time(c{job=\"a\"}[1m:15s])", 300_000), 4.0);
    // rate over 170, 180, 190, 200 at 255..300 s, extrapolated to 60 s: 40 / 60.
    assert!((v("rate(c{job=\"a\"}[1m:15s])", 300_000) - 2.0 / 3.0).abs() < 1e-12);
    // Without a step: 1 minute (60..300 s).
    assert_eq!(v("count_over_time(c{job=\"a\"}[5m:])", 300_000), 5.0);
    // offset moves the windows: (190 s, 250 s] holds 210 s and 240 s.
    assert_eq!(
        v("max_over_time(c{job=\"a\"}[1m:30s] offset 1m)", 310_000),
        160.0
    );
    // Nested: the max over 2 minutes of a constant rate.
    let (l, x) = one(&s, "max_over_time(rate(c{job=\"a\"}[1m])[2m:1m])", 300_000);
    assert!((x - 2.0 / 3.0).abs() < 1e-12, "{x}");
    assert_eq!(l, labels(&[("job", "a")]), "rate dropped the name");
    // absent_over_time of a subquery: no labels.
    assert_eq!(
        vector(instant_query(&s, "absent_over_time(nope{job=\"a\"}[1m:])", 0, &opts).unwrap()),
        vec![(vec![], 1.0)]
    );
    // @ fixes the subquery's time; last_over_time keeps the name.
    let m = api::data_json(
        &range_query(
            &s,
            "last_over_time(c{job=\"a\"}[1m:30s] @ 120)",
            0,
            600_000,
            300_000,
            &opts,
        )
        .unwrap(),
    );
    assert_eq!(
        m["result"][0]["metric"],
        json!({"__name__": "c", "job": "a"})
    );
    assert_eq!(
        m["result"][0]["values"],
        json!([[0, "80"], [300, "80"], [600, "80"]])
    );
    // `@ start()` inside a subquery is the query's start, not the subquery's.
    let m = api::data_json(
        &range_query(
            &s,
            "max_over_time((c{job=\"a\"} @ start())[1m:30s])",
            300_000,
            600_000,
            300_000,
            &opts,
        )
        .unwrap(),
    );
    assert_eq!(
        m["result"][0]["values"],
        json!([[300, "200"], [600, "200"]])
    );
}

#[test]
fn subqueries_as_results_and_their_limits() {
    let s = counters();
    let opts = QueryOptions::default();
    // An instant query of a subquery answers its samples in the window.
    match instant_query(&s, "c{job=\"a\"}[1m:30s]", 310_000, &opts).unwrap() {
        QueryValue::Matrix(m) => {
            assert_eq!(m.len(), 1);
            assert_eq!(m[0].labels, labels(&[("__name__", "c"), ("job", "a")]));
            assert_eq!(m[0].points, vec![(270_000, 180.0), (300_000, 200.0)]);
        }
        other => panic!("expected a matrix, got {other:?}"),
    }
    let err = range_query(&s, "c[1m:30s]", 0, 60_000, 30_000, &opts).unwrap_err();
    assert_eq!(err.error_type(), "bad_data", "{err}");
    // Too many inner steps is the points limit, before anything is evaluated.
    let err = instant_query(&s, "count_over_time(c[1000d:1ms])", 0, &opts).unwrap_err();
    assert!(matches!(err, Error::TooManyPoints { .. }), "{err}");
    // Extreme ranges, steps and times answer or fail, never panic.
    for q in [
        "count_over_time(c[100000w:1ms])",
        "count_over_time(c[100000w:100000w])",
        "count_over_time(c[1ms:100000w] offset -100000w)",
        "count_over_time(c[100000w:1ms] @ 9999999999)",
    ] {
        for t in [i64::MIN / 2, -1, 0, i64::MAX / 2] {
            let _ = instant_query(&s, q, t, &opts);
        }
    }
}
