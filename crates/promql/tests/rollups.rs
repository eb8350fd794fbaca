//! `count/sum/avg/min/max_over_time` read from the partitions' rollups: the rollup path
//! is taken (the read stats show buckets read and far fewer raw samples) and the
//! answers equal the raw evaluation (the same samples in a `MemStorage`) on points at
//! bucket boundaries, staleness markers, late points, windows crossing partitions and
//! an active partition; past the raw retention the kept rollup answers or the query
//! fails, never a partial answer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tidemark::dedup::{EngineConfig, PartitionConfig};
use tidemark::{Action, Index, ItemStatus, LabelPoints, PreparedItem, SampleValue};
use tidemark_promql::{
    Error, IndexStorage, MemStorage, QueryOptions, QueryValue, STALE_NAN_BITS, range_query,
};

const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;
const WIDTH: i64 = 6 * HOUR;

type Sample = (Vec<(&'static str, String)>, i64, f64);

/// `g{host, site}` every 15 s over 24 h (points on every bucket boundary), values with
/// fractions; `h3` stops for two hours; `s{host}` with a staleness marker in hour 2
/// and at 13:00 exactly (a bucket boundary).
fn samples(hours: i64) -> Vec<Sample> {
    let mut out = Vec::new();
    for h in 0..4i64 {
        let site = if h % 2 == 0 { "eu" } else { "us" };
        for i in 0..(hours * HOUR / 15_000) {
            let ts = i * 15_000;
            if h == 3 && (7 * HOUR..9 * HOUR).contains(&ts) {
                continue;
            }
            let v = ((i * 7919 + h * 104_729) % 1000) as f64 / 7.0 - 40.0;
            out.push((
                vec![
                    ("__name__", "g".to_owned()),
                    ("host", format!("h{h}")),
                    ("site", site.to_owned()),
                ],
                ts,
                v,
            ));
        }
    }
    for i in 0..(hours * HOUR / 30_000) {
        let ts = i * 30_000;
        let v = if ts == 2 * HOUR + 90_000 || ts == 13 * HOUR {
            f64::from_bits(STALE_NAN_BITS)
        } else {
            (i % 17) as f64 * 0.25
        };
        out.push((
            vec![("__name__", "s".to_owned()), ("host", "h0".to_owned())],
            ts,
            v,
        ));
    }
    out
}

fn write(index: &mut Index, samples: &[Sample]) {
    let mut points = LabelPoints::new().unwrap();
    let mut items = Vec::new();
    // Time-major, as scrapes arrive (a retention rejects what is older than it).
    let mut samples: Vec<&Sample> = samples.iter().collect();
    samples.sort_by_key(|s| s.1);
    for (labels, ts, v) in samples {
        let l: Vec<(&str, &str)> = labels.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let doc = points.doc(&l, *ts, SampleValue::F64(*v)).unwrap();
        items.push(PreparedItem::store(
            items.len() as u64,
            Action::Create,
            None,
            doc,
        ));
    }
    let n = items.len();
    let out = index.apply_prepared(items).unwrap();
    assert_eq!(out.len(), n);
    assert!(out.iter().all(|r| r.status == ItemStatus::Created));
}

fn mem(samples: &[Sample]) -> MemStorage {
    let mut m = MemStorage::new();
    for (labels, ts, v) in samples {
        let l = labels
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect();
        m.add(l, [(*ts, *v)]);
    }
    m
}

fn create(dir: &std::path::Path, parts: PartitionConfig) -> Index {
    Index::create_partitioned(
        dir,
        tidemark::label_mapping().unwrap(),
        EngineConfig::new().with_refresh_rows(5000),
        parts,
    )
    .unwrap()
}

/// A matrix answer's series: labels and points, sorted by labels.
type Rows = Vec<(Vec<(String, String)>, Vec<(i64, f64)>)>;

fn matrix(v: QueryValue) -> Rows {
    let mut out: Vec<_> = match v {
        QueryValue::Matrix(s) => s.into_iter().map(|s| (s.labels, s.points)).collect(),
        other => panic!("expected a matrix, got {other:?}"),
    };
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Same series and timestamps; count/min/max equal, sums within 1e-9 relative.
fn assert_same(q: &str, a: QueryValue, b: QueryValue) {
    let (a, b) = (matrix(a), matrix(b));
    assert_eq!(a.len(), b.len(), "{q}: series differ");
    assert!(!a.is_empty(), "{q}: empty");
    for ((la, pa), (lb, pb)) in a.iter().zip(&b) {
        assert_eq!(la, lb, "{q}");
        assert_eq!(pa.len(), pb.len(), "{q} {la:?}: steps differ");
        for (x, y) in pa.iter().zip(pb) {
            assert_eq!(x.0, y.0, "{q}");
            let exact = q.contains("count") || q.contains("min") || q.contains("max");
            let ok = if exact {
                x.1 == y.1
            } else {
                x.1 == y.1 || (x.1 - y.1).abs() <= 1e-9 * x.1.abs().max(y.1.abs())
            };
            assert!(ok, "{q} {la:?} at {}: {} vs {}", x.0, x.1, y.1);
        }
    }
}

const QUERIES: [&str; 7] = [
    "count_over_time(g[1h])",
    "sum_over_time(g[1h])",
    "avg_over_time(g[2h])",
    "min_over_time(g[1h])",
    "max_over_time(g[3h])",
    "sum by (site) (sum_over_time(g[1h]))",
    "count_over_time(s[1h])",
];

#[test]
fn window_aggregates_read_rollups_and_equal_the_raw_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let parts = PartitionConfig::new()
        .with_width_ms(WIDTH)
        .with_late_window_ms(Some(30 * 24 * HOUR))
        .with_rollups(vec![5 * MIN, HOUR]);
    let mut index = create(tmp.path(), parts);
    let mut all = samples(24);
    write(&mut index, &all);
    index.refresh().unwrap();
    // The first three partitions sealed (rollups built); the last stays active (raw).
    for p in 0..3 {
        index.seal(p * WIDTH).unwrap();
    }
    // Read the rollups once (their dimension indexes are cached), then a late point into
    // a sealed partition, off the 15 s grid, one at a bucket boundary in h3's gap, and a
    // new series: the rollups are rebuilt in place and the new series must be seen.
    let opts = QueryOptions::default();
    let early = IndexStorage::new(&index);
    range_query(
        &early,
        "count_over_time(g[1h])",
        HOUR,
        17 * HOUR,
        HOUR,
        &opts,
    )
    .unwrap();
    assert!(early.read_stats().rollup_buckets > 0);
    let late: Vec<Sample> = vec![
        (
            vec![
                ("__name__", "g".to_owned()),
                ("host", "h9".to_owned()),
                ("site", "eu".to_owned()),
            ],
            3 * HOUR,
            5.5,
        ),
        (
            vec![
                ("__name__", "g".to_owned()),
                ("host", "h0".to_owned()),
                ("site", "eu".to_owned()),
            ],
            2 * HOUR + 7_001,
            1234.5,
        ),
        (
            vec![
                ("__name__", "g".to_owned()),
                ("host", "h3".to_owned()),
                ("site", "us".to_owned()),
            ],
            8 * HOUR,
            -99.25,
        ),
    ];
    write(&mut index, &late);
    index.refresh().unwrap();
    for p in 0..3 {
        index.seal(p * WIDTH).unwrap();
    }
    all.extend(late);
    let reference = mem(&all);
    // Hour-aligned steps (1 h and 5 min) over windows crossing partitions and reaching
    // into the active partition; a 5-minute step with an offset; an unaligned step.
    let cases: [(i64, i64, i64, &str); 4] = [
        (HOUR, 24 * HOUR, HOUR, ""),
        (3 * HOUR, 20 * HOUR, 5 * MIN, ""),
        (2 * HOUR, 20 * HOUR, 5 * MIN, " offset 10m"),
        (HOUR + 7_000, 20 * HOUR, 7 * MIN, ""),
    ];
    for (start, end, step, modifier) in cases {
        for q in QUERIES {
            let q = q.replacen(']', &format!("]{modifier}"), 1);
            let storage = IndexStorage::new(&index);
            let got = range_query(&storage, &q, start, end, step, &opts).unwrap();
            let want = range_query(&reference, &q, start, end, step, &opts).unwrap();
            assert_same(&q, got, want);
            let stats = storage.read_stats();
            if step % (5 * MIN) == 0 {
                // Rollups answered most windows; raw rows were read only for the active
                // partition and for windows the buckets cannot answer exactly.
                assert!(stats.rollup_buckets > 0, "{q}: {stats:?}");
                assert!(stats.rollup_windows > 0, "{q}: {stats:?}");
            } else {
                assert_eq!(stats.rollup_buckets, 0, "{q}: {stats:?}");
            }
        }
    }
    // The hour query reads one row per series and hour where a sealed rollup has it,
    // not every sample: compare with the same query on the raw path.
    let storage = IndexStorage::new(&index);
    range_query(
        &storage,
        "sum_over_time(g[1h])",
        HOUR,
        17 * HOUR,
        HOUR,
        &opts,
    )
    .unwrap();
    let rollup = storage.read_stats();
    let storage = IndexStorage::new(&index);
    range_query(
        &storage,
        "sum_over_time(g[1h])",
        HOUR + 1,
        17 * HOUR + 1,
        HOUR,
        &opts,
    )
    .unwrap();
    let raw = storage.read_stats();
    assert_eq!(raw.rollup_buckets, 0);
    // 17 hours of 4 series at 15 s (less h3's 2-hour gap) = 15,840 raw samples; the rollup path reads the 1 h
    // buckets of hours 0-17 and no raw sample (all in sealed partitions).
    assert!(raw.raw_samples >= 15_000, "{raw:?}");
    assert_eq!(rollup.raw_samples, 0, "{rollup:?}");
    assert!(rollup.rollup_buckets <= 4 * 18, "{rollup:?}");
    // `s` holds staleness markers: its windows over them (and only those) are read raw.
    let storage = IndexStorage::new(&index);
    range_query(
        &storage,
        "count_over_time(s[1h])",
        HOUR,
        17 * HOUR,
        HOUR,
        &opts,
    )
    .unwrap();
    let s = storage.read_stats();
    assert_eq!(s.fallback_windows, 3, "{s:?}");
}

#[test]
fn past_the_raw_retention_the_kept_rollup_answers_or_the_query_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let parts = PartitionConfig::new()
        .with_width_ms(WIDTH)
        .with_retention_ms(Some(2 * WIDTH))
        .with_rollups(vec![5 * MIN, HOUR])
        .with_rollup_retention_ms(HOUR, 100 * WIDTH);
    let mut index = create(tmp.path(), parts);
    let all = samples(24);
    write(&mut index, &all);
    index.refresh().unwrap();
    let reference = mem(&all);
    let opts = QueryOptions::default();
    let before = range_query(
        &reference,
        "sum by (site) (sum_over_time(g[1h]))",
        HOUR,
        12 * HOUR,
        HOUR,
        &opts,
    )
    .unwrap();
    // A point a day later moves the clock: partitions 0-3 (hours 0-24) are past the raw
    // retention; the 1 h rollup is kept, the 5 min one dropped.
    let future: Vec<Sample> = vec![(
        vec![("__name__", "x".to_owned())],
        24 * HOUR + 3 * WIDTH,
        1.0,
    )];
    write(&mut index, &future);
    let report = index.maintain().unwrap();
    assert!(report.raw_expired >= 2, "{report:?}");
    assert!(index.engine().partitions()[0].raw_expired);

    let storage = IndexStorage::new(&index);
    let got = range_query(
        &storage,
        "sum by (site) (sum_over_time(g[1h]))",
        HOUR,
        12 * HOUR,
        HOUR,
        &opts,
    )
    .unwrap();
    assert_same("sum by (site) (sum_over_time(g[1h]))", got, before);
    assert!(storage.read_stats().rollup_buckets > 0);
    assert_eq!(storage.read_stats().raw_samples, 0);
    // What no kept rollup answers fails, naming the dropped time: a 30-minute range
    // (the 5-minute rollup is gone), `rate`, and windows over a staleness marker (a
    // NaN in a bucket: raw rows needed).
    for (q, step) in [
        ("sum_over_time(g[30m])", HOUR),
        ("rate(g[5m])", HOUR),
        ("count_over_time(s[1h])", HOUR),
    ] {
        let storage = IndexStorage::new(&index);
        match range_query(&storage, q, HOUR, 12 * HOUR, step, &opts) {
            Err(Error::Execution(msg)) => {
                assert!(msg.contains("retention"), "{q}: {msg}")
            }
            other => panic!("{q}: expected an execution error, got {other:?}"),
        }
    }
}
