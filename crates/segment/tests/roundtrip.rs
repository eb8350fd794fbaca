#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Every point written is read back identical.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;

use proptest::prelude::*;
use tidemark_segment::{
    Dim, Error, Extra, MetricValue, Point, Segment, SegmentOptions, SegmentWriter, Tombstones,
};
use tidemark_tsid::{SyntheticId, Tsid};

fn tsid(i: u8) -> Tsid {
    let mut b = [0u8; 20];
    b[0] = i;
    b[19] = i.wrapping_mul(31);
    Tsid::from_bytes(b)
}

type Extras = Vec<(String, Extra)>;

/// Writes `points` and checks every row, find, contains_id, scans and the id sections.
fn check_round_trip(points: &[Point], options: SegmentOptions) -> Segment {
    check_round_trip_with(points, &[], options)
}

/// As [`check_round_trip`], with extra fields per point (`extras` is empty or parallel
/// to `points`).
fn check_round_trip_with(points: &[Point], extras: &[Extras], options: SegmentOptions) -> Segment {
    let mut w = SegmentWriter::new(options).unwrap();
    let mut expected_extras = BTreeMap::new();
    for (i, p) in points.iter().enumerate() {
        let x = extras.get(i).cloned().unwrap_or_default();
        let mut sorted = x.clone();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        expected_extras.insert((p.tsid, p.ts_millis), sorted);
        w.push_with_extras(p.clone(), x).unwrap();
    }
    let (bytes, meta) = w.to_vec().unwrap();
    assert_eq!(meta.row_count, points.len() as u64);
    let seg = Segment::from_vec(bytes).unwrap();
    seg.verify().unwrap();
    let mut expected: Vec<Point> = points
        .iter()
        .cloned()
        .map(|mut p| {
            p.extras
                .extend(expected_extras[&(p.tsid, p.ts_millis)].clone());
            p.normalized()
        })
        .collect();
    expected.sort_by_key(|p| (p.tsid, p.ts_millis));
    assert_eq!(seg.points(0..seg.row_count(), |_| true).unwrap(), expected);
    for (row, p) in expected.iter().enumerate() {
        let got = seg.row(row as u64).unwrap();
        assert_eq!(&got, p, "row {row}");
        assert_eq!(
            seg.row_extras(row as u64).unwrap(),
            expected_extras[&(p.tsid, p.ts_millis)],
            "extras of row {row}"
        );
        assert_eq!(seg.find(&p.tsid, p.ts_millis).unwrap(), Some(row as u64));
        let id = SyntheticId::new(p.tsid, p.ts_millis);
        assert!(seg.contains_id(&id).unwrap());
        assert!(seg.may_contain_id(&id).unwrap());
        if seg.id_index().unwrap().is_some() {
            assert_eq!(seg.lookup_id(&id).unwrap(), Some(row as u64));
        }
    }
    let mut scanned = Vec::new();
    seg.scan_rows(0..seg.row_count(), |r| {
        let metrics = seg
            .columns()
            .iter()
            .zip(r.metrics)
            .filter_map(|(c, v)| v.map(|v| (c.name.clone(), v)))
            .collect();
        scanned.push(Point {
            tsid: r.series.tsid,
            dims: r.series.dims.to_vec(),
            ts_millis: r.ts_millis,
            metrics,
            // A scan's row view carries no extras.
            extras: expected_extras[&(r.series.tsid, r.ts_millis)].clone(),
        });
    })
    .unwrap();
    assert_eq!(scanned, expected);
    if let (Some(min), Some(max)) = (seg.min_timestamp(), seg.max_timestamp()) {
        assert_eq!(min, expected.iter().map(|p| p.ts_millis).min().unwrap());
        assert_eq!(max, expected.iter().map(|p| p.ts_millis).max().unwrap());
    }
    seg
}

fn keyword(name: &str, v: &str) -> (String, Extra) {
    (name.to_owned(), Extra::Keyword(v.to_owned()))
}

fn flag(name: &str, v: bool) -> (String, Extra) {
    (name.to_owned(), Extra::Bool(v))
}

#[test]
fn round_trips_special_floats_and_integer_extremes() {
    let specials = [
        0.0,
        -0.0,
        f64::NAN,
        f64::from_bits(0x7ff8_dead_beef_0001),
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MIN,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
        1.0,
        -1e300,
    ];
    let counters = [i64::MIN, i64::MAX, 0, -1, 1, i64::MAX, i64::MIN + 1];
    let mut points = Vec::new();
    for (i, g) in specials.iter().enumerate() {
        points.push(
            Point::new(tsid(1), i as i64 * 1000)
                .dim("host", "a")
                .gauge("g", *g)
                .counter("c", counters[i % counters.len()]),
        );
    }
    for ts in [i64::MIN, i64::MAX, -1, 0] {
        points.push(Point::new(tsid(2), ts).dim("host", "b").counter("c", ts));
    }
    let seg = check_round_trip(&points, SegmentOptions::new().with_block_rows(5));
    assert_eq!(seg.min_timestamp(), Some(i64::MIN));
    assert_eq!(seg.max_timestamp(), Some(i64::MAX));
}

#[test]
fn round_trips_sparse_metrics_and_all_dimension_types() {
    let mut points = Vec::new();
    let mut extras = Vec::new();
    for s in 0..7u8 {
        for t in 0..300i64 {
            let mut p = Point::new(tsid(s), 1_700_000_000_000 + t * 10_000 + i64::from(s))
                .dim("name", format!("series-{s}"))
                .dim("n", Dim::Int(-i64::from(s)))
                .dim("u", Dim::UInt(u64::MAX - u64::from(s)))
                .dim("b", s % 2 == 0)
                .dim(
                    "ip",
                    Dim::Ip(Ipv6Addr::from([
                        0,
                        0,
                        0,
                        0,
                        0,
                        0xffff,
                        0x0a00,
                        u16::from(s),
                    ])),
                );
            // Metric a: every row of even series; b: every third row; c: one series only.
            if s % 2 == 0 {
                p = p.gauge("a", t as f64 * 0.5);
            }
            if t % 3 == 0 {
                p = p.counter("b", t * 7);
            }
            if s == 3 {
                p = p.gauge("c", (t as f64).sin());
            }
            // Extras: a keyword on every row, a flag on some rows.
            let mut x = vec![keyword(
                "status",
                ["ok", "degraded", "ok", "failed"][(t % 4) as usize],
            )];
            if t % 5 == 0 {
                x.push(flag("sampled", t % 10 == 0));
            }
            points.push(p);
            extras.push(x);
        }
    }
    // Any input order.
    points.reverse();
    points.swap(5, 900);
    extras.reverse();
    extras.swap(5, 900);
    let seg = check_round_trip_with(
        &points,
        &extras,
        SegmentOptions::new()
            .with_block_rows(128)
            .with_bloom(0.01)
            .with_id_index(true),
    );
    assert_eq!(seg.series_count(), 7);
    assert_eq!(seg.columns().len(), 3);
    assert_eq!(seg.extra_columns().len(), 2);
    let bloom = seg.bloom().unwrap().unwrap();
    assert!(bloom.fill_ratio() < 0.5, "fill {}", bloom.fill_ratio());
    // Absent points.
    assert_eq!(seg.find(&tsid(1), 1_700_000_000_000).unwrap(), None);
    assert_eq!(seg.find(&tsid(1), 1_700_000_000_001 + 5).unwrap(), None);
    assert_eq!(seg.find(&tsid(99), 1_700_000_000_000).unwrap(), None);
    assert!(!seg.contains_id(&SyntheticId::new(tsid(9), 0)).unwrap());
    assert_eq!(seg.lookup_id(&SyntheticId::new(tsid(9), 0)).unwrap(), None);
}

#[test]
fn scans_by_time_range_and_series() {
    let mut points = Vec::new();
    for s in 0..5u8 {
        for t in 0..100i64 {
            points.push(
                Point::new(tsid(s), t * 10)
                    .dim("s", i64::from(s))
                    .gauge("v", t as f64),
            );
        }
    }
    let seg = check_round_trip(&points, SegmentOptions::new().with_block_rows(64));
    let mut n = 0;
    seg.scan_time_range(200, 299, |r| {
        assert!((200..=299).contains(&r.ts_millis));
        n += 1;
    })
    .unwrap();
    assert_eq!(n, 5 * 10);
    let mut got = Vec::new();
    seg.scan_series(&tsid(3), 505, 1_000_000, |r| got.push(r.ts_millis))
        .unwrap();
    assert_eq!(got, (51..100).map(|t| t * 10).collect::<Vec<_>>());
    assert_eq!(seg.series().len(), 5);
    assert_eq!(seg.series()[3].first_row, 300);
}

#[test]
fn finds_nothing_between_points_across_block_boundaries() {
    let points: Vec<Point> = (0..40)
        .map(|t| Point::new(tsid(1), t * 10).dim("s", "x").counter("c", t))
        .collect();
    let seg = check_round_trip(&points, SegmentOptions::new().with_block_rows(4));
    for t in 0..40 {
        assert_eq!(seg.find(&tsid(1), t * 10).unwrap(), Some(t as u64));
        for d in [1, 5, 9] {
            assert_eq!(
                seg.find(&tsid(1), t * 10 + d).unwrap(),
                None,
                "{}",
                t * 10 + d
            );
        }
    }
}

#[test]
fn round_trips_long_extra_keywords() {
    let points: Vec<Point> = (0..50)
        .map(|t| Point::new(tsid(1), t).dim("s", "x").counter("c", t))
        .collect();
    let extras: Vec<Extras> = (0..50)
        .map(|t| vec![keyword("note", &format!("{t}-{}", "é".repeat(2_000)))])
        .collect();
    check_round_trip_with(&points, &extras, SegmentOptions::new().with_block_rows(16));
    let mut w = SegmentWriter::new(SegmentOptions::new()).unwrap();
    let huge = keyword("note", &"x".repeat(70_000));
    assert!(matches!(
        w.push_with_extras(points[0].clone(), vec![huge]),
        Err(Error::TooLarge { .. })
    ));
}

#[test]
fn empty_segment_round_trips() {
    let seg = check_round_trip(
        &[],
        SegmentOptions::new().with_bloom(0.01).with_id_index(true),
    );
    assert_eq!(seg.row_count(), 0);
    assert_eq!(seg.min_timestamp(), None);
    assert!(matches!(seg.row(0), Err(Error::RowOutOfRange { .. })));
}

#[test]
fn writer_rejects_bad_input() {
    let mut w = SegmentWriter::new(SegmentOptions::new()).unwrap();
    w.push(Point::new(tsid(1), 5).dim("a", "x").gauge("m", 1.0))
        .unwrap();
    w.push(Point::new(tsid(1), 5).dim("a", "x").gauge("m", 2.0))
        .unwrap();
    assert!(matches!(
        w.to_vec(),
        Err(Error::DuplicatePoint { ts_millis: 5, .. })
    ));

    let mut w = SegmentWriter::new(SegmentOptions::new()).unwrap();
    w.push(Point::new(tsid(1), 5).dim("a", "x").gauge("m", 1.0))
        .unwrap();
    assert!(matches!(
        w.push(Point::new(tsid(1), 6).dim("a", "x").counter("m", 1)),
        Err(Error::MetricKindConflict { .. })
    ));
    assert!(matches!(
        w.push(Point::new(tsid(1), 6).dim("a", "y")),
        Err(Error::InconsistentDimensions { .. })
    ));
    assert!(matches!(
        w.push(Point::new(tsid(2), 6).dim("a", "y").dim("a", "z")),
        Err(Error::DuplicateDimension { .. })
    ));
    assert!(matches!(
        w.push(
            Point::new(tsid(1), 7)
                .dim("a", "x")
                .gauge("m", 1.0)
                .gauge("m", 2.0)
        ),
        Err(Error::DuplicateMetric { .. })
    ));
    assert!(matches!(
        w.push_with_extras(
            Point::new(tsid(1), 8).dim("a", "x"),
            vec![keyword("m", "metric name taken")]
        ),
        Err(Error::MetricKindConflict { .. })
    ));
    assert!(matches!(
        w.push_with_extras(
            Point::new(tsid(1), 8).dim("a", "x"),
            vec![keyword("k", "a"), keyword("k", "b")]
        ),
        Err(Error::DuplicateMetric { .. })
    ));
    assert!(matches!(
        SegmentWriter::new(SegmentOptions::new().with_block_rows(0)),
        Err(Error::InvalidOption { .. })
    ));
    assert!(matches!(
        SegmentWriter::new(SegmentOptions::new().with_bloom(1.5)),
        Err(Error::InvalidOption { .. })
    ));
    // A refused point of a new series with a new column leaves nothing behind.
    assert!(matches!(
        w.push(
            Point::new(tsid(9), 1)
                .dim("a", "new")
                .gauge("fresh", 1.0)
                .gauge("fresh", 2.0)
        ),
        Err(Error::DuplicateMetric { .. })
    ));
    // The failed pushes left nothing behind.
    assert_eq!(w.len(), 1);
    let (bytes, meta) = w.to_vec().unwrap();
    assert_eq!(
        (meta.row_count, meta.series_count, meta.column_count),
        (1, 1, 1)
    );
    let seg = Segment::from_vec(bytes).unwrap();
    assert!(seg.extra_columns().is_empty());
}

#[test]
fn writes_atomically_and_opens_memory_mapped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seg-000001.tms");
    let mut w = SegmentWriter::new(SegmentOptions::new()).unwrap();
    for t in 0..1000 {
        w.push(Point::new(tsid(1), t).dim("a", "x").counter("c", t * 2))
            .unwrap();
    }
    let meta = w.write_file(&path).unwrap();
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
    let seg = Segment::open(&path).unwrap();
    assert_eq!(seg.row_count(), 1000);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), meta.len_bytes);
    assert_eq!(
        seg.row(999).unwrap().metrics,
        vec![("c".to_owned(), MetricValue::Counter(1998))]
    );
    seg.verify().unwrap();

    // Errors name the file.
    let bad = dir.path().join("bad.tms");
    std::fs::write(&bad, b"not a segment at all, but long enough to have a footer........................................................................................................................................................").unwrap();
    let err = Segment::open(&bad).unwrap_err().to_string();
    assert!(err.contains("bad.tms"), "{err}");

    // Tombstones live beside the segment, one file per generation.
    let mut t = Tombstones::new(seg.row_count());
    t.delete(3).unwrap();
    let t = t.next_generation();
    let tpath = t.write_beside(&path).unwrap();
    assert!(tpath.to_string_lossy().ends_with(".del.00000001"));
    let back = Tombstones::read_file(&tpath).unwrap();
    assert_eq!(back, t);
    assert!(back.is_deleted(3));
    assert!(matches!(
        Tombstones::new(5).delete(5),
        Err(Error::RowOutOfRange { .. })
    ));
}

fn arb_metric() -> impl Strategy<Value = Option<MetricValue>> {
    prop_oneof![
        Just(None),
        any::<u64>().prop_map(|b| Some(MetricValue::Gauge(f64::from_bits(b)))),
        (-1000i64..1000).prop_map(|v| Some(MetricValue::Gauge(v as f64))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_points_round_trip(
        rows in proptest::collection::btree_map(
            (0u8..6, -50i64..50),
            (arb_metric(), proptest::option::of(any::<i64>()), proptest::option::of(0u8..4)),
            0..300,
        ),
        block_rows in 1u32..70,
    ) {
        let rows: BTreeMap<(u8, i64), _> = rows;
        let mut extras = Vec::new();
        let points: Vec<Point> = rows
            .into_iter()
            .map(|((s, t), (g, c, x))| {
                let mut p = Point::new(tsid(s), t * 1000 + i64::from(s)).dim("s", i64::from(s));
                if let Some(g) = g {
                    p.metrics.push(("g".to_owned(), g));
                }
                if let Some(c) = c {
                    p = p.counter("c", c);
                }
                extras.push(match x {
                    Some(0) => vec![flag("x", true)],
                    Some(1) => vec![flag("x", false)],
                    Some(k) => vec![keyword("y", ["", "zürich"][usize::from(k - 2)])],
                    None => vec![],
                });
                p
            })
            .collect();
        let seg = check_round_trip_with(&points, &extras, SegmentOptions::new().with_block_rows(block_rows).with_id_index(true));
        // Timestamps between two points of a series are absent, also across blocks.
        for p in &points {
            prop_assert_eq!(seg.find(&p.tsid, p.ts_millis + 1).unwrap(), None);
            prop_assert_eq!(seg.find(&p.tsid, p.ts_millis - 1).unwrap(), None);
        }
    }
}

/// A gauge reading as the ALP encodings see it: mostly decimals `i / 10^k` (k ≤ 4, at
/// most 11 significant digits), now and then a special value whose bits must survive.
fn arb_decimal_gauge() -> impl Strategy<Value = f64> {
    prop_oneof![
        12 => (-10_000_000i64..10_000_000, 0i32..=4).prop_map(|(i, k)| i as f64 / 10f64.powi(k)),
        1 => prop::sample::select(vec![
            f64::NAN,
            -f64::NAN,
            f64::from_bits(0x7ff0_0000_0000_0002), // the Prometheus stale marker
            f64::from_bits(0x7ff8_0000_dead_beef),
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ]),
        1 => any::<u64>().prop_map(f64::from_bits),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Decimal gauges with special values mixed in come back bit for bit through a
    /// segment, with every candidate encoding tried or with the fast ones only.
    #[test]
    fn decimal_gauges_round_trip_bit_for_bit(
        values in proptest::collection::vec(arb_decimal_gauge(), 1..800),
        block_rows in 1u32..300,
        fast in any::<bool>(),
    ) {
        let points: Vec<Point> = values
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                // Series of 100 points each, a sample every 10 s.
                Point::new(tsid((i / 100) as u8), (i % 100) as i64 * 10_000).gauge("g", v)
            })
            .collect();
        let mut w = SegmentWriter::new(
            SegmentOptions::new().with_block_rows(block_rows).with_fast_encoding(fast),
        )
        .unwrap();
        for p in &points {
            w.push(p.clone()).unwrap();
        }
        let seg = Segment::from_vec(w.to_vec().unwrap().0).unwrap();
        let read: Vec<u64> = seg
            .points(0..seg.row_count(), |_| true)
            .unwrap()
            .iter()
            .map(|p| match p.metrics.as_slice() {
                [(_, MetricValue::Gauge(g))] => g.to_bits(),
                other => panic!("unexpected metrics {other:?}"),
            })
            .collect();
        // Points were pushed in (series, time) order, which is the segment's row order.
        let sent: Vec<u64> = values.iter().map(|v| v.to_bits()).collect();
        prop_assert_eq!(read, sent);
    }
}
