//! Time partitions: routing by a point's own timestamp (retries meet their originals
//! whenever they arrive), sealing with rollups equal to the raw computation, late
//! points, the late window, and retention that drops whole partitions atomically (a
//! child process aborts at each failpoint).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use tempfile::TempDir;

use tidemark_dedup::{
    AppendBatch, ColumnKind, ColumnRef, EngineConfig, FAILPOINT_ENV, Op, Outcome, PartitionConfig,
    PartitionedEngine, Piece, Rejection, RollupStats, SampleCell, Samples, SeriesRef, Tally,
    counter_step,
};
use tidemark_segment::{MetricValue, Point};
use tidemark_tsid::{SyntheticId, Tsid};

mod support;
use support::{DAY, HOUR, pod_point, tsid};

fn point(s: u8, ts: i64) -> Point {
    // Deterministic values with counter resets every 7 points.
    let k = ts / 10_000;
    pod_point(tsid(s), ts, s)
        .gauge("cpu", (k % 13) as f64 * 0.25 + f64::from(s))
        .counter("bytes", (k % 7) * 100 + i64::from(s))
}

fn config() -> PartitionConfig {
    PartitionConfig::new()
        .with_width_ms(DAY)
        .with_rollups(vec![5 * 60_000, HOUR])
}

fn engine_config() -> EngineConfig {
    EngineConfig::new().with_refresh_rows(500)
}

/// Per (tsid, bucket): the raw stats of a metric, computed from the live rows.
fn raw_stats(
    store: &PartitionedEngine,
    metric: &str,
    from: i64,
    to: i64,
    res: i64,
) -> BTreeMap<(Tsid, i64), RollupStats> {
    let mut rows: Vec<Point> = Vec::new();
    store
        .search(from, to)
        .rows(|_, _| true, |p, _| rows.push(p))
        .unwrap();
    rows.sort_by_key(|p| (p.tsid, p.ts_millis));
    let mut out: BTreeMap<(Tsid, i64), RollupStats> = BTreeMap::new();
    for p in rows {
        let Some((_, v)) = p.metrics.iter().find(|(n, _)| n == metric) else {
            continue;
        };
        let key = (p.tsid, p.ts_millis.div_euclid(res) * res);
        let (f, c) = match *v {
            MetricValue::Gauge(f) => (f, None),
            MetricValue::Counter(i) => (i as f64, Some(i)),
        };
        match out.get_mut(&key) {
            None => {
                out.insert(
                    key,
                    RollupStats {
                        count: 1,
                        min: f,
                        max: f,
                        sum: f,
                        counter: c.map(|i| tidemark_dedup::CounterStats {
                            first: i,
                            last: i,
                            increase: 0,
                        }),
                        first_point: Some((p.ts_millis, f)),
                    },
                );
            }
            Some(s) => {
                s.count += 1;
                s.min = s.min.min(f);
                s.max = s.max.max(f);
                s.sum += f;
                if let (Some(cs), Some(i)) = (&mut s.counter, c) {
                    cs.increase += counter_step(cs.last, i);
                    cs.last = i;
                }
            }
        }
    }
    out
}

fn rollup_stats(
    store: &PartitionedEngine,
    metric: &str,
    partition: i64,
    res: i64,
) -> BTreeMap<(Tsid, i64), RollupStats> {
    let mut out = BTreeMap::new();
    let piece = Piece::Rollup {
        partition,
        resolution_ms: res,
        from: partition,
        to: partition + DAY - 1,
    };
    store
        .search(partition, partition + DAY - 1)
        .rollup_stats(
            &piece,
            metric,
            |_, _| true,
            |t, _, b, s| {
                out.insert((*t, b), s);
            },
        )
        .unwrap();
    out
}

fn ingest_day(store: &mut PartitionedEngine, day: i64, series: u8) {
    let mut ops = Vec::new();
    for s in 1..=series {
        for k in 0..(DAY / 60_000) {
            ops.push(Op::Create(point(s, day * DAY + k * 60_000)));
        }
    }
    for chunk in ops.chunks(2000) {
        let out = store.batch(chunk.to_vec()).unwrap();
        assert!(out.iter().all(|o| matches!(o, Outcome::Created { .. })));
    }
}

#[test]
fn retries_meet_their_originals_after_seal_and_newer_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = PartitionedEngine::create(dir.path(), engine_config(), config()).unwrap();
    ingest_day(&mut store, 0, 3);
    store.seal(0).unwrap();
    ingest_day(&mut store, 1, 3);
    ingest_day(&mut store, 2, 3);
    assert_eq!(store.partitions().len(), 3);
    assert!(store.partitions()[0].sealed);
    let before = store.live_count();
    let rollup_before = rollup_stats(&store, "cpu", 0, HOUR);
    let bytes_before = rollup_stats(&store, "bytes", 0, 5 * 60_000);
    // Retries of day 0 (sealed, with newer partitions), as create and as index.
    let retries: Vec<Op> = (0..200)
        .map(|k| Op::Create(point(1 + (k % 3) as u8, k * 7 * 60_000)))
        .collect();
    let out = store.batch(retries).unwrap();
    assert!(
        out.iter().all(|o| matches!(o, Outcome::Conflict { .. })),
        "{out:?}"
    );
    assert_eq!(store.live_count(), before);
    assert_eq!(rollup_stats(&store, "cpu", 0, HOUR), rollup_before);
    assert_eq!(rollup_stats(&store, "bytes", 0, 5 * 60_000), bytes_before);
    assert_eq!(store.partition_stats().rollup_rebuilds, 0);
    // After a reopen too.
    store.close().unwrap();
    let mut store = PartitionedEngine::open(dir.path(), engine_config()).unwrap();
    let out = store.batch(vec![Op::Create(point(2, 3 * 60_000))]).unwrap();
    assert!(matches!(out[0], Outcome::Conflict { .. }));
    assert_eq!(store.live_count(), before);
    assert_eq!(rollup_stats(&store, "cpu", 0, HOUR), rollup_before);
    // Every rollup equals the raw computation.
    for (metric, res) in [("cpu", HOUR), ("bytes", 5 * 60_000), ("bytes", HOUR)] {
        assert_eq!(
            rollup_stats(&store, metric, 0, res),
            raw_stats(&store, metric, 0, DAY - 1, res),
            "{metric} at {res}"
        );
    }
}

#[test]
fn a_late_point_rebuilds_its_rollup_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = PartitionedEngine::create(dir.path(), engine_config(), config()).unwrap();
    ingest_day(&mut store, 0, 2);
    ingest_day(&mut store, 1, 2);
    store.seal(0).unwrap();
    let before = rollup_stats(&store, "cpu", 0, HOUR);
    // Late points between the minutes, and a new series, in day 0.
    let late = vec![
        Op::Create(point(1, 5 * HOUR + 30_000)),
        Op::Create(point(2, 5 * HOUR + 90_000)),
        Op::Create(point(9, 17 * HOUR + 10_000)),
        Op::Index(
            Point::new(tsid(1), 7 * HOUR)
                .dim("pod", "p1")
                .gauge("cpu", 1000.0)
                .counter("bytes", 0),
        ),
        Op::Delete(SyntheticId::new(tsid(2), 9 * HOUR)),
    ];
    let out = store.batch(late).unwrap();
    assert!(matches!(out[0], Outcome::Created { .. }));
    assert!(matches!(out[3], Outcome::Indexed { replaced: true, .. }));
    assert!(matches!(out[4], Outcome::Deleted { .. }));
    assert_eq!(store.partition_stats().rollup_rebuilds, 1);
    let after = rollup_stats(&store, "cpu", 0, HOUR);
    assert_ne!(after, before);
    for (metric, res) in [("cpu", HOUR), ("cpu", 5 * 60_000), ("bytes", HOUR)] {
        assert_eq!(
            rollup_stats(&store, metric, 0, res),
            raw_stats(&store, metric, 0, DAY - 1, res),
            "{metric} at {res}"
        );
    }
    assert_eq!(after.get(&(tsid(1), 7 * HOUR)).unwrap().max, 1000.0);
    assert!(after.contains_key(&(tsid(9), 17 * HOUR)));
    // Untouched buckets are the same.
    assert_eq!(
        after.get(&(tsid(1), 2 * HOUR)),
        before.get(&(tsid(1), 2 * HOUR))
    );
}

#[test]
fn a_crash_during_a_rollup_rebuild_rebuilds_on_open() {
    // The state goes Dirty on disk before the write: simulated by a reopen of a store
    // whose manifest says Dirty (a kill between the write and the rebuild).
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "late_write_child", "--nocapture"])
        .env("TIDEMARK_PARTITION_CHILD", dir.path())
        .env(FAILPOINT_ENV, "late-write-before-rebuild")
        .status()
        .unwrap();
    assert!(!status.success(), "the child should have aborted");
    let store = PartitionedEngine::open(dir.path(), engine_config()).unwrap();
    assert!(store.partitions()[0].sealed);
    assert_eq!(
        rollup_stats(&store, "cpu", 0, HOUR),
        raw_stats(&store, "cpu", 0, DAY - 1, HOUR)
    );
    // The late point is in, and in the rollup.
    let r = rollup_stats(&store, "cpu", 0, HOUR);
    assert_eq!(r.get(&(tsid(1), 3 * HOUR)).unwrap().count, 61);
}

#[test]
fn late_write_child() {
    let Some(dir) = std::env::var_os("TIDEMARK_PARTITION_CHILD") else {
        return;
    };
    let dir = Path::new(&dir);
    let mut store = PartitionedEngine::create(dir, engine_config(), config()).unwrap();
    ingest_day(&mut store, 0, 1);
    store.seal(0).unwrap();
    // Aborts at the failpoint, after the point reached the log.
    let _ = store.batch(vec![Op::Create(point(1, 3 * HOUR + 30_000))]);
}

#[test]
fn points_older_than_the_late_window_are_rejected_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config().with_late_window_ms(Some(2 * HOUR));
    let mut store = PartitionedEngine::create(dir.path(), engine_config(), cfg).unwrap();
    let out = store
        .batch(vec![
            Op::Create(point(1, 10 * HOUR)),
            Op::Create(point(1, 7 * HOUR)),
        ])
        .unwrap();
    assert!(matches!(out[0], Outcome::Created { .. }));
    match &out[1] {
        Outcome::Rejected {
            reason:
                r @ Rejection::TooOld {
                    ts_millis,
                    oldest_millis,
                    rule,
                },
            ..
        } => {
            assert_eq!(
                (*ts_millis, *oldest_millis, *rule),
                (7 * HOUR, 8 * HOUR, "late_window")
            );
            assert!(r.to_string().contains("too old"), "{r}");
        }
        other => panic!("{other:?}"),
    }
    // Within the window: accepted.
    let out = store.batch(vec![Op::Create(point(1, 9 * HOUR))]).unwrap();
    assert!(matches!(out[0], Outcome::Created { .. }));
    assert_eq!(store.partition_stats().rejected_too_old, 1);
}

#[test]
fn partitions_route_by_timestamp_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = PartitionConfig::new().with_width_ms(HOUR);
    let mut store = PartitionedEngine::create(dir.path(), engine_config(), cfg).unwrap();
    let ops: Vec<Op> = (0..50)
        .map(|k| Op::Create(point(1, k * 20 * 60_000)))
        .collect();
    store.batch(ops).unwrap();
    let parts = store.partitions();
    assert_eq!(parts.len(), 17);
    assert!(parts.iter().all(|p| p.end_ms - p.start_ms == HOUR));
    assert_eq!(parts.iter().map(|p| p.rows).sum::<u64>(), 50);
    // Negative timestamps get their own partitions.
    store.batch(vec![Op::Create(point(1, -1))]).unwrap();
    assert_eq!(store.partitions()[0].start_ms, -HOUR);
    store.close().unwrap();
    let store = PartitionedEngine::open(dir.path(), engine_config()).unwrap();
    assert_eq!(store.partitions().len(), 18);
    assert_eq!(store.live_count(), 51);
    let id = SyntheticId::new(tsid(1), 40 * 60_000);
    assert_eq!(store.get(&id).unwrap().unwrap().ts_millis, 40 * 60_000);
    // A width outside 1h..7d is refused.
    let bad = tempfile::tempdir().unwrap();
    let cfg = PartitionConfig::new().with_width_ms(60_000);
    assert!(PartitionedEngine::create(bad.path(), engine_config(), cfg).is_err());
    let cfg = PartitionConfig::new().with_rollups(vec![7 * 60_000]);
    assert!(PartitionedEngine::create(bad.path(), engine_config(), cfg).is_err());
}

#[test]
fn an_unpartitioned_engine_directory_opens_as_one_partition() {
    let dir = tempfile::tempdir().unwrap();
    let mut engine = tidemark_dedup::Engine::create(dir.path(), engine_config()).unwrap();
    engine
        .batch([Op::Create(point(1, 5)), Op::Create(point(1, 10 * DAY))])
        .unwrap();
    engine.close().unwrap();
    let mut store = PartitionedEngine::open(dir.path(), engine_config()).unwrap();
    assert!(!store.is_partitioned());
    assert_eq!(store.live_count(), 2);
    let out = store.batch(vec![Op::Create(point(1, 5))]).unwrap();
    assert!(matches!(out[0], Outcome::Conflict { .. }));
    assert!(store.seal(0).is_err());
}

/// The retention child: three days, then a point that moves the clock past the
/// retention of the first two; `enforce_retention` aborts at the failpoint named in the
/// environment.
#[test]
fn retention_child() {
    let Some(dir) = std::env::var_os("TIDEMARK_RETENTION_CHILD") else {
        return;
    };
    let dir = Path::new(&dir);
    let mut store = PartitionedEngine::open(dir, engine_config()).unwrap();
    let out = store.batch(vec![Op::Create(point(1, 5 * DAY))]).unwrap();
    assert!(matches!(out[0], Outcome::Created { .. }));
    store.enforce_retention().unwrap();
}

fn retention_store(dir: &Path) -> u64 {
    let cfg = config().with_retention_ms(Some(3 * DAY));
    let mut store = PartitionedEngine::create(dir, engine_config(), cfg).unwrap();
    for day in 0..3 {
        let ops: Vec<Op> = (0..300)
            .map(|k| Op::Create(point(1, day * DAY + k * 60_000)))
            .collect();
        store.batch(ops).unwrap();
    }
    store.seal(0).unwrap();
    let live = store.live_count();
    store.close().unwrap();
    live
}

#[test]
fn retention_drops_whole_partitions_atomically_across_crashes() {
    for (failpoint, dropped) in [
        ("retention-before-manifest", false),
        ("retention-after-manifest", true),
        ("retention-mid-remove", true),
        ("", true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let live = retention_store(dir.path());
        let status = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "retention_child", "--nocapture"])
            .env("TIDEMARK_RETENTION_CHILD", dir.path())
            .env(FAILPOINT_ENV, failpoint)
            .status()
            .unwrap();
        assert_eq!(status.success(), failpoint.is_empty(), "{failpoint}");
        let mut store = PartitionedEngine::open(dir.path(), engine_config()).unwrap();
        let starts: Vec<i64> = store.partitions().iter().map(|p| p.start_ms).collect();
        // The point at day 5 went to the log before the crash: present either way. Days 0
        // and 1 end at least 3 days before it: both dropped or both kept, never one.
        if dropped {
            assert_eq!(starts, vec![2 * DAY, 5 * DAY], "{failpoint}");
            assert_eq!(store.live_count(), 301, "{failpoint}");
            assert_eq!(store.partition_stats().dropped_partitions, 2);
            assert_eq!(store.partition_stats().dropped_rows, 600);
            // Nothing of them is left on disk.
            let left: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("p-"))
                .collect();
            assert_eq!(left.len(), 2, "{left:?}");
        } else {
            assert_eq!(starts, vec![0, DAY, 2 * DAY, 5 * DAY], "{failpoint}");
            assert_eq!(store.live_count(), live + 1);
            // Retention completes on the next run.
            assert_eq!(store.enforce_retention().unwrap(), (2, 600));
        }
        // A point of a dropped partition is refused, not stored again.
        let out = store
            .batch(vec![Op::Create(point(1, DAY + 60_000))])
            .unwrap();
        assert!(
            matches!(
                out[0],
                Outcome::Rejected {
                    reason: Rejection::TooOld {
                        rule: "retention",
                        ..
                    },
                    ..
                }
            ),
            "{out:?}"
        );
        // Queries see all of a partition or none of it.
        let mut days = BTreeMap::new();
        store
            .search(i64::MIN, i64::MAX)
            .rows(
                |_, _| true,
                |p, _| {
                    *days.entry(p.ts_millis / DAY).or_insert(0u64) += 1;
                },
            )
            .unwrap();
        assert_eq!(days, BTreeMap::from([(2, 300), (5, 1)]), "{failpoint}");
    }
}

#[test]
fn plans_use_the_coarsest_dividing_rollup_and_raw_edges() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = PartitionedEngine::create(dir.path(), engine_config(), config()).unwrap();
    ingest_day(&mut store, 0, 1);
    ingest_day(&mut store, 1, 1);
    store.seal(0).unwrap();
    // 2h buckets over day 0 from 00:30 and all of day 1 (active): the hour rollup for
    // whole hours of day 0, raw for the first half hour and for day 1.
    let plan = store.search(30 * 60_000, 2 * DAY - 1).plan(2 * HOUR);
    assert_eq!(
        plan,
        vec![
            Piece::Raw {
                from: 30 * 60_000,
                to: HOUR - 1
            },
            Piece::Rollup {
                partition: 0,
                resolution_ms: HOUR,
                from: HOUR,
                to: DAY - 1
            },
            Piece::Raw {
                from: DAY,
                to: 2 * DAY - 1
            },
        ]
    );
    // 10-minute buckets: the 5-minute rollup.
    let plan = store.search(0, DAY - 1).plan(10 * 60_000);
    assert_eq!(
        plan,
        vec![Piece::Rollup {
            partition: 0,
            resolution_ms: 5 * 60_000,
            from: 0,
            to: DAY - 1
        }]
    );
    // 7-minute buckets: nothing divides; raw.
    assert_eq!(
        store.search(0, DAY - 1).plan(7 * 60_000),
        vec![Piece::Raw {
            from: 0,
            to: DAY - 1
        }]
    );
}

/// Appends `ops` (creates and indexes only) by the store's refs.
fn append_points(store: &mut PartitionedEngine, ops: &[Op]) -> Vec<Outcome> {
    let mut batch = AppendBatch::new();
    for op in ops {
        let (create, p) = match op {
            Op::Create(p) => (true, p),
            Op::Index(p) => (false, p),
            other => panic!("not an append: {other:?}"),
        };
        let s = store.series(p.tsid, p.dims.clone()).unwrap();
        let values: Vec<(ColumnRef, MetricValue)> = p
            .metrics
            .iter()
            .map(|(name, v)| {
                let kind = match v {
                    MetricValue::Gauge(_) => ColumnKind::Gauge,
                    MetricValue::Counter(_) => ColumnKind::Counter,
                };
                (store.column(name, kind).unwrap(), *v)
            })
            .collect();
        batch.push(create, s, p.ts_millis, &values, &[]);
    }
    store.append(&batch).unwrap()
}

/// Two stores with a late window of two days, in their own directories.
fn store_pair() -> (TempDir, TempDir, PartitionedEngine, PartitionedEngine) {
    let config = config().with_late_window_ms(Some(2 * DAY));
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let first = PartitionedEngine::create(a.path(), engine_config(), config.clone()).unwrap();
    let second = PartitionedEngine::create(b.path(), engine_config(), config).unwrap();
    (a, b, first, second)
}

/// Three rounds of creates and indexes of points made by `point`: two days of series 1 and 2,
/// then day 1 with retries of day 0 among it, then late, replacing, clock-moving, too-old and
/// retried writes; day 0 is to be sealed before the third round.
fn late_rounds(point: fn(u8, i64) -> Point) -> Vec<Vec<Op>> {
    let day = |d: i64, s: u8| -> Vec<Op> {
        (0..(DAY / 600_000))
            .map(|k| Op::Create(point(s, d * DAY + k * 600_000)))
            .collect()
    };
    vec![
        [day(0, 1), day(0, 2)].concat(),
        [day(1, 1), day(1, 2), day(0, 1)].concat(), // retries of day 0 among day 1
        vec![
            Op::Create(point(3, 5 * HOUR + 30_000)), // late, into day 0 (sealed)
            Op::Index(point(1, 7 * HOUR)),           // replaces in day 0
            Op::Index(point(1, 7 * HOUR + 1)),       // index of a new point
            Op::Create(point(2, 4 * DAY)),           // moves the clock
            Op::Create(point(2, DAY + 600_000)),     // too old now: rejected
            Op::Create(point(2, 4 * DAY)),           // a retry in the same batch
        ],
    ]
}

/// Runs `rounds` into both stores by `check`, sealing partition 0 of each before the third,
/// then asserts the two agree on live counts, partition stats and the rollups of `metrics`
/// (and that the rollups equal the raw data).
fn run_late_rounds(
    first: &mut PartitionedEngine,
    second: &mut PartitionedEngine,
    rounds: &[Vec<Op>],
    metrics: &[&str],
    mut check: impl FnMut(usize, &mut PartitionedEngine, &mut PartitionedEngine, &[Op]),
) {
    for (r, ops) in rounds.iter().enumerate() {
        if r == 2 {
            first.seal(0).unwrap();
            second.seal(0).unwrap();
        }
        check(r, first, second, ops);
    }
    assert_eq!(second.live_count(), first.live_count());
    assert_eq!(second.partition_stats(), first.partition_stats());
    assert_eq!(second.partition_stats().rollup_rebuilds, 1);
    assert_eq!(second.partition_stats().rejected_too_old, 1);
    for metric in metrics {
        for res in [HOUR, 5 * 60_000] {
            assert_eq!(
                rollup_stats(second, metric, 0, res),
                rollup_stats(first, metric, 0, res)
            );
            assert_eq!(
                rollup_stats(second, metric, 0, res),
                raw_stats(second, metric, 0, DAY - 1, res)
            );
        }
    }
}

#[test]
fn appends_by_ref_route_reject_and_rebuild_as_points_do() {
    let (_a, b, mut by_point, mut by_ref) = store_pair();
    let rounds = late_rounds(point);
    run_late_rounds(
        &mut by_point,
        &mut by_ref,
        &rounds,
        &["cpu", "bytes"],
        |r, by_point, by_ref, ops| {
            let want = by_point.batch(ops.to_vec()).unwrap();
            let got = append_points(by_ref, ops);
            assert_eq!(got, want, "round {r}");
        },
    );
    assert!(matches!(
        by_ref
            .batch(vec![Op::Get(SyntheticId::new(tsid(3), 5 * HOUR + 30_000))])
            .unwrap()[0],
        Outcome::Found(_)
    ));
    // Refs stay valid after a reopen of nothing but the store's own tables: a new session
    // names its series again and finds the stored points.
    by_ref.close().unwrap();
    let mut by_ref = PartitionedEngine::open(b.path(), engine_config()).unwrap();
    let out = append_points(&mut by_ref, &[Op::Create(point(2, 4 * DAY))]);
    assert!(
        out.iter().all(|o| matches!(o, Outcome::Conflict { .. })),
        "{out:?}"
    );
}

/// A one-metric point (`cpu` gauge) of series `s`: one sample.
fn sample_point(s: u8, ts: i64) -> Point {
    let k = ts / 10_000;
    pod_point(tsid(s), ts, s).gauge("cpu", (k % 13) as f64 * 0.25 + f64::from(s))
}

/// Appends `ops` (creates and indexes of one-metric points) as samples, one owner per op,
/// and answers each op's tally.
fn append_as_samples(store: &mut PartitionedEngine, ops: &[Op]) -> Vec<Tally> {
    let mut samples = Samples::new();
    for op in ops {
        let (create, p) = match op {
            Op::Create(p) => (true, p),
            Op::Index(p) => (false, p),
            other => panic!("not an append: {other:?}"),
        };
        let owner = samples.owner(create);
        let s = store.series(p.tsid, p.dims.clone()).unwrap();
        for (name, v) in &p.metrics {
            let kind = match v {
                MetricValue::Gauge(_) => ColumnKind::Gauge,
                MetricValue::Counter(_) => ColumnKind::Counter,
            };
            let c = store.column(name, kind).unwrap();
            samples.push(owner, s, p.ts_millis, c, SampleCell::Metric(*v));
        }
    }
    store.append_samples(&samples).unwrap()
}

/// What a tally of one sample says of it, as the outcome of the same append would.
fn tally_matches(t: &Tally, o: &Outcome) -> bool {
    let counts = (t.created, t.replaced, t.duplicates, t.rejected);
    match o {
        Outcome::Created { .. }
        | Outcome::Indexed {
            replaced: false, ..
        } => counts == (1, 0, 0, 0),
        Outcome::Indexed { replaced: true, .. } => counts == (0, 1, 0, 0),
        Outcome::Conflict { .. } => counts == (0, 0, 1, 0),
        Outcome::Rejected { reason, .. } => {
            counts == (0, 0, 0, 1) && t.first_rejection.as_ref() == Some(reason)
        }
        _ => false,
    }
}

#[test]
fn samples_route_reject_and_rebuild_as_appends_do() {
    let (_a, b, mut by_append, mut by_sample) = store_pair();
    let rounds = late_rounds(sample_point);
    run_late_rounds(
        &mut by_append,
        &mut by_sample,
        &rounds,
        &["cpu"],
        |r, by_append, by_sample, ops| {
            let want = append_points(by_append, ops);
            let got = append_as_samples(by_sample, ops);
            assert_eq!(got.len(), want.len());
            for (i, (t, o)) in got.iter().zip(&want).enumerate() {
                assert!(tally_matches(t, o), "round {r}, op {i}: {t:?} for {o:?}");
            }
        },
    );
    // Durable: a reopen replays the log, and the retry is a duplicate.
    by_sample.close().unwrap();
    let mut by_sample = PartitionedEngine::open(b.path(), engine_config()).unwrap();
    assert_eq!(by_sample.live_count(), by_append.live_count());
    let t = append_as_samples(&mut by_sample, &[Op::Create(sample_point(2, 4 * DAY))]);
    assert_eq!(t[0].duplicates, 1, "{t:?}");
}

/// Stores a point of series 7 (`pod=seven`) by the point API, then names series 7 with
/// other dimensions (`bad`) and series 8 (`good`) by the ref API: their refs and `cpu`'s.
fn stored_seven_and_refs(store: &mut PartitionedEngine) -> (SeriesRef, SeriesRef, ColumnRef) {
    store
        .batch(vec![Op::Create(
            Point::new(tsid(7), 1_000)
                .dim("pod", "seven")
                .gauge("cpu", 1.0),
        )])
        .unwrap();
    let bad = store
        .series(tsid(7), vec![("pod".into(), "not-seven".into())])
        .unwrap();
    let good = store
        .series(tsid(8), vec![("pod".into(), "eight".into())])
        .unwrap();
    let cpu = store.column("cpu", ColumnKind::Gauge).unwrap();
    (bad, good, cpu)
}

#[test]
fn samples_reject_bad_refs_and_kinds_per_owner_and_store_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = PartitionedEngine::create(dir.path(), engine_config(), config()).unwrap();
    // A point stored by the point API with a tsid the ref API then names with other
    // dimensions: the partition refuses its samples.
    let (bad, good, cpu) = stored_seven_and_refs(&mut store);
    let up = store.column("up", ColumnKind::Bool).unwrap();
    let mut samples = Samples::new();
    let first = samples.owner(true);
    let second = samples.owner(true);
    samples.push(
        first,
        bad,
        2_000,
        cpu,
        SampleCell::Metric(MetricValue::Gauge(2.0)),
    );
    samples.push(
        first,
        good,
        2_000,
        cpu,
        SampleCell::Metric(MetricValue::Gauge(3.0)),
    );
    // A counter value for a gauge column, a gauge for a boolean column: refused.
    samples.push(
        second,
        good,
        3_000,
        cpu,
        SampleCell::Metric(MetricValue::Counter(3)),
    );
    samples.push(
        second,
        good,
        4_000,
        up,
        SampleCell::Metric(MetricValue::Gauge(1.0)),
    );
    samples.push(
        second,
        good,
        5_000,
        up,
        SampleCell::Extra(tidemark_segment::Extra::Bool(true)),
    );
    // An owner the batch never added.
    samples.push(
        9,
        good,
        6_000,
        cpu,
        SampleCell::Metric(MetricValue::Gauge(1.0)),
    );
    let t = store.append_samples(&samples).unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!((t[0].created, t[0].rejected), (1, 1), "{t:?}");
    assert!(matches!(
        t[0].first_rejection,
        Some(Rejection::InconsistentDimensions { .. })
    ));
    assert_eq!((t[1].created, t[1].rejected), (1, 2), "{t:?}");
    assert!(matches!(
        t[1].first_rejection,
        Some(Rejection::KindConflict { .. })
    ));
    assert_eq!(store.live_count(), 3);
}

#[test]
fn append_rejects_what_a_partition_refuses_and_applies_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = PartitionedEngine::create(dir.path(), engine_config(), config()).unwrap();
    // The same tsid with other dimensions: refused at registration.
    store
        .series(tsid(1), vec![("pod".into(), "p1".into())])
        .unwrap();
    let err = store
        .series(tsid(1), vec![("pod".into(), "other".into())])
        .unwrap_err();
    assert!(matches!(
        err,
        tidemark_dedup::Error::Rejected {
            reason: Rejection::InconsistentDimensions { .. }
        }
    ));
    // A column known with another kind.
    store.column("cpu", ColumnKind::Gauge).unwrap();
    assert!(store.column("cpu", ColumnKind::Counter).is_err());
    // A point stored by the point API with a tsid the ref API then names with other
    // dimensions: the partition refuses that item, the others are stored.
    let (bad, good, cpu) = stored_seven_and_refs(&mut store);
    let mut batch = AppendBatch::new();
    batch.create(bad, 2_000, &[(cpu, MetricValue::Gauge(2.0))]);
    batch.create(good, 2_000, &[(cpu, MetricValue::Gauge(3.0))]);
    let out = store.append(&batch).unwrap();
    assert!(
        matches!(
            out[0],
            Outcome::Rejected {
                reason: Rejection::InconsistentDimensions { .. },
                ..
            }
        ),
        "{out:?}"
    );
    assert!(matches!(out[1], Outcome::Created { .. }));
    assert_eq!(store.live_count(), 2);
}

/// Rollups 5m (kept 3 days) and 1h (kept 4 days), raw rows kept 2 days.
fn rollup_retention_config() -> PartitionConfig {
    config()
        .with_retention_ms(Some(2 * DAY))
        .with_rollup_retention_ms(5 * 60_000, 3 * DAY)
        .with_rollup_retention_ms(HOUR, 4 * DAY)
}

/// Days 0, 1 and 2 (300 points each), day 0 sealed; returns the rollup stats of days 0
/// and 1 at both resolutions, as they were with every raw row there.
fn rollup_retention_store(dir: &Path) -> Vec<BTreeMap<(Tsid, i64), RollupStats>> {
    let mut store =
        PartitionedEngine::create(dir, engine_config(), rollup_retention_config()).unwrap();
    for day in 0..3 {
        let ops: Vec<Op> = (0..300)
            .map(|k| Op::Create(point(1, day * DAY + k * 60_000)))
            .collect();
        store.batch(ops).unwrap();
    }
    store.seal(0).unwrap();
    store.seal(DAY).unwrap();
    let mut before = Vec::new();
    for day in [0, DAY] {
        for res in [5 * 60_000, HOUR] {
            before.push(rollup_stats(&store, "cpu", day, res));
        }
    }
    store.close().unwrap();
    before
}

/// The rollup-retention child: a point on day 4 moves the clock past the raw retention of
/// days 0 and 1; `enforce_retention` aborts at the failpoint named in the environment.
#[test]
fn rollup_retention_child() {
    let Some(dir) = std::env::var_os("TIDEMARK_ROLLUP_RETENTION_CHILD") else {
        return;
    };
    let mut store = PartitionedEngine::open(Path::new(&dir), engine_config()).unwrap();
    let out = store
        .batch(vec![Op::Create(point(1, 4 * DAY + 60_000))])
        .unwrap();
    assert!(matches!(out[0], Outcome::Created { .. }));
    store.enforce_retention().unwrap();
}

fn listed_dirs(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("p-") {
            continue;
        }
        let mut inner: Vec<String> = std::fs::read_dir(e.path())
            .unwrap()
            .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        inner.sort();
        out.push(format!("{name}: {}", inner.join(" ")));
    }
    out.sort();
    out
}

#[test]
fn rollup_retention_keeps_rollups_and_drops_raw_rows_atomically_across_crashes() {
    let five = 5 * 60_000;
    for (failpoint, switched) in [
        ("retention-before-manifest", false),
        ("retention-after-manifest", true),
        ("retention-mid-remove", true),
        ("", true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let before = rollup_retention_store(dir.path());
        let status = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "rollup_retention_child", "--nocapture"])
            .env("TIDEMARK_ROLLUP_RETENTION_CHILD", dir.path())
            .env(FAILPOINT_ENV, failpoint)
            .status()
            .unwrap();
        assert_eq!(status.success(), failpoint.is_empty(), "{failpoint}");
        let mut store = PartitionedEngine::open(dir.path(), engine_config()).unwrap();
        if !switched {
            // All as it was: every raw row of days 0 and 1 still there.
            assert!(store.partitions().iter().all(|p| !p.raw_expired));
            assert_eq!(store.live_count(), 3 * 300 + 1, "{failpoint}");
            assert_eq!(store.enforce_retention().unwrap(), (0, 0));
        }
        // Day 0 keeps its 1h rollup only (past the 5m rollup's 3 days), day 1 both;
        // neither has raw rows; days 2 and 4 are whole.
        let parts = store.partitions();
        let shape: Vec<(i64, bool, Vec<i64>, u64)> = parts
            .iter()
            .map(|p| {
                (
                    p.start_ms,
                    p.raw_expired,
                    p.rollups.iter().map(|r| r.0).collect(),
                    p.rows,
                )
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                (0, true, vec![HOUR], 0),
                (DAY, true, vec![five, HOUR], 0),
                (2 * DAY, false, vec![], 300),
                (4 * DAY, false, vec![], 1),
            ],
            "{failpoint}"
        );
        assert_eq!(store.live_count(), 301);
        let s = store.partition_stats();
        assert_eq!((s.expired_partitions, s.expired_rows), (2, 600));
        assert_eq!((s.dropped_partitions, s.dropped_rows), (0, 0));
        // On disk: no raw engine and no unkept rollup file is left, even after a crash
        // in the middle of removing them.
        assert_eq!(
            listed_dirs(dir.path()),
            {
                let mut v = vec![
                    "p-0: rollup-3600000ms.tms".to_owned(),
                    format!("p-{DAY}: rollup-300000ms.tms rollup-3600000ms.tms"),
                    format!("p-{}: engine", 2 * DAY),
                    format!("p-{}: engine", 4 * DAY),
                ];
                v.sort();
                v
            },
            "{failpoint}"
        );
        // The kept rollups are unchanged.
        assert_eq!(rollup_stats(&store, "cpu", 0, HOUR), before[1]);
        assert_eq!(rollup_stats(&store, "cpu", DAY, five), before[2]);
        assert_eq!(rollup_stats(&store, "cpu", DAY, HOUR), before[3]);
        // Plans: hours of day 0 from its rollup; 10-minute buckets there have no answer.
        assert_eq!(
            store.search(0, DAY - 1).plan(2 * HOUR),
            vec![Piece::Rollup {
                partition: 0,
                resolution_ms: HOUR,
                from: 0,
                to: DAY - 1
            }]
        );
        assert_eq!(
            store.search(30 * 60_000, 2 * DAY - 1).plan(10 * 60_000),
            vec![
                Piece::Expired {
                    from: 30 * 60_000,
                    to: DAY - 1
                },
                Piece::Rollup {
                    partition: DAY,
                    resolution_ms: five,
                    from: DAY,
                    to: 2 * DAY - 1
                },
            ]
        );
        // A bucket the range cuts cannot be answered either.
        assert_eq!(
            store.search(30 * 60_000, HOUR * 3 - 1).plan(HOUR)[0],
            Piece::Expired {
                from: 30 * 60_000,
                to: HOUR - 1
            }
        );
        // Writes there are refused as past the retention; raw reads find nothing.
        let out = store
            .batch(vec![Op::Create(point(1, DAY + 60_000))])
            .unwrap();
        assert!(
            matches!(
                out[0],
                Outcome::Rejected {
                    reason: Rejection::TooOld {
                        rule: "retention",
                        ..
                    },
                    ..
                }
            ),
            "{out:?}"
        );
        let mut n = 0;
        store
            .search(0, 2 * DAY - 1)
            .rows(|_, _| true, |_, _| n += 1)
            .unwrap();
        assert_eq!(n, 0);
        store.close().unwrap();

        // A day later: day 0 is past its last rollup's retention (dropped whole), day 1
        // past the 5m one's (shrinks to 1h), day 2 past the raw retention (sealed, then
        // keeps both rollups).
        let mut store = PartitionedEngine::open(dir.path(), engine_config()).unwrap();
        store
            .batch(vec![Op::Create(point(1, 5 * DAY + 60_000))])
            .unwrap();
        let report = store.maintain_at(0).unwrap();
        assert_eq!(
            (report.dropped, report.dropped_rows, report.raw_expired),
            (1, 0, 1)
        );
        let shape: Vec<(i64, bool, Vec<i64>)> = store
            .partitions()
            .iter()
            .map(|p| {
                (
                    p.start_ms,
                    p.raw_expired,
                    p.rollups.iter().map(|r| r.0).collect(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                (DAY, true, vec![HOUR]),
                (2 * DAY, true, vec![five, HOUR]),
                (4 * DAY, false, vec![]),
                (5 * DAY, false, vec![]),
            ]
        );
        let s = store.partition_stats();
        assert_eq!((s.expired_partitions, s.expired_rows), (3, 900));
        assert_eq!((s.dropped_partitions, s.dropped_rows), (1, 0));
        assert_eq!(rollup_stats(&store, "cpu", DAY, HOUR), before[3]);
        assert!(!dir.path().join("p-0").exists());
        assert!(
            !dir.path()
                .join(format!("p-{DAY}"))
                .join("rollup-300000ms.tms")
                .exists()
        );
    }
}

#[test]
fn rollup_retention_needs_a_longer_raw_retention_and_a_configured_resolution() {
    let dir = tempfile::tempdir().unwrap();
    let bad = [
        config().with_rollup_retention_ms(HOUR, 10 * DAY),
        config()
            .with_retention_ms(Some(30 * DAY))
            .with_rollup_retention_ms(HOUR, 10 * DAY),
        config()
            .with_retention_ms(Some(DAY))
            .with_rollup_retention_ms(2 * HOUR, 10 * DAY),
    ];
    for cfg in bad {
        let err = PartitionedEngine::create(dir.path(), engine_config(), cfg).unwrap_err();
        assert!(err.to_string().contains("rollup_retention"), "{err}");
    }
}

#[test]
fn a_partition_without_writes_for_the_seal_grace_is_sealed_by_the_wall_clock() {
    let dir = tempfile::tempdir().unwrap();
    // Sealing by event time would wait for a point 1 day past day 0's end.
    let cfg = config().with_seal_grace_ms(DAY);
    let mut store = PartitionedEngine::create(dir.path(), engine_config(), cfg).unwrap();
    let t0 = 1_000_000_000_000;
    store
        .batch((0..100).map(|k| Op::Create(point(1, k * 60_000))).collect())
        .unwrap();
    // The newest partition is never sealed by the wall clock, however idle.
    assert_eq!(store.maintain_at(t0).unwrap().sealed, 0);
    assert_eq!(store.maintain_at(t0 + 2 * DAY).unwrap().sealed, 0);
    // A late write to day 0, then a point in day 1: day 0 is now behind the high-water
    // mark, and its idle time starts at the first call after its last write.
    store
        .batch(vec![Op::Create(point(1, 200 * 60_000))])
        .unwrap();
    store.batch(vec![Op::Create(point(1, DAY + 5))]).unwrap();
    assert_eq!(store.maintain_at(t0 + 2 * DAY + 1).unwrap().sealed, 0);
    assert_eq!(store.maintain_at(t0 + 3 * DAY).unwrap().sealed, 0);
    // A grace after that call: sealed, with its rollups.
    let report = store.maintain_at(t0 + 3 * DAY + 1).unwrap();
    assert_eq!(report.sealed, 1);
    let parts = store.partitions();
    assert!(parts[0].sealed && !parts[1].sealed, "{parts:?}");
    assert_eq!(parts[0].rollups.len(), 2);
    assert_eq!(parts[0].rows, 101);
    // A retry meets its original in the sealed partition.
    let out = store.batch(vec![Op::Create(point(1, 60_000))]).unwrap();
    assert!(matches!(out[0], Outcome::Conflict { .. }), "{out:?}");
}

#[test]
fn background_merges_run_off_the_write_path_and_keep_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let config4 = engine_config().with_merge_factor(4);
    let mut store = PartitionedEngine::create(dir.path(), config4.clone(), config()).unwrap();
    store.set_background_merges(true);
    for day in 0..2 {
        let ops: Vec<Op> = (1..=2u8)
            .flat_map(|s| {
                (0..DAY / 60_000).map(move |k| Op::Create(point(s, day * DAY + k * 60_000)))
            })
            .collect();
        for chunk in ops.chunks(250) {
            store.batch(chunk.to_vec()).unwrap();
        }
    }
    // 2 × 1,440 points a day, a refresh every 500 rows: 5 refresh segments a day, none
    // merged on the write path.
    let unmerged = store.segment_count();
    assert!(unmerged >= 10, "{unmerged} segments");
    assert!(store.waiting_merges() >= 2);
    let before = store.live_count();
    let rows_before = raw_stats(&store, "cpu", 0, 2 * DAY - 1, HOUR);
    // Two jobs planned at once (as two merge threads would), run off the store, one
    // installed after a write that refreshed again: both install.
    let a = store.plan_merge().unwrap();
    let b = store.plan_merge().unwrap();
    assert_eq!((a.len(), b.len()), (4, 4));
    let (a, b) = (a.run(), b.run());
    let out = store
        .batch(
            (0..600)
                .map(|k| Op::Create(point(3, DAY + k * 60_000)))
                .collect(),
        )
        .unwrap();
    assert!(out.iter().all(|o| matches!(o, Outcome::Created { .. })));
    store.install_merge(a).unwrap();
    store.install_merge(b).unwrap();
    while let Some(job) = store.plan_merge() {
        store.install_merge(job.run()).unwrap();
    }
    assert_eq!(store.waiting_merges(), 0);
    assert!(
        store.segment_count() < unmerged,
        "{}",
        store.segment_count()
    );
    assert_eq!(store.live_count(), before + 600);
    // Retries still meet their originals in merged segments.
    let out = store
        .batch((0..100).map(|k| Op::Create(point(1, k * 60_000))).collect())
        .unwrap();
    assert!(out.iter().all(|o| matches!(o, Outcome::Conflict { .. })));
    let mut rows_after = raw_stats(&store, "cpu", 0, 2 * DAY - 1, HOUR);
    rows_after.retain(|(t, _), _| *t != tsid(3));
    assert_eq!(rows_after, rows_before);
}

/// The live rows of `[from, to]`, sorted.
fn rows_of(store: &PartitionedEngine, from: i64, to: i64) -> Vec<(Tsid, i64)> {
    let mut out = Vec::new();
    store
        .search(from, to)
        .rows(|_, _| true, |p, _| out.push((p.tsid, p.ts_millis)))
        .unwrap();
    out.sort();
    out
}

#[test]
fn attached_partitions_are_read_only_where_retention_removed_the_stores_own() {
    let dir = tempfile::tempdir().unwrap();
    let day_ops = |d: i64| -> Vec<Op> {
        (0..24)
            .flat_map(|h| [1u8, 2].map(|s| Op::Create(point(s, d * DAY + h * HOUR))))
            .collect()
    };
    let mut store = PartitionedEngine::create(
        dir.path().join("store"),
        engine_config(),
        config().with_retention_ms(Some(2 * DAY)),
    )
    .unwrap();
    for d in 0..3 {
        store.batch(day_ops(d)).unwrap();
    }
    store.seal(0).unwrap();
    let before = rows_of(&store, 0, DAY - 1);
    assert_eq!(before.len(), 48);

    // A copy of day 0 in a store of its own, as a lake's restore makes it.
    let mut copy =
        PartitionedEngine::create(dir.path().join("copy"), engine_config(), config()).unwrap();
    copy.batch(day_ops(0)).unwrap();
    // Refused while a partition is not sealed, or for another width.
    let mut unsealed =
        PartitionedEngine::create(dir.path().join("unsealed"), engine_config(), config()).unwrap();
    unsealed.batch(day_ops(0)).unwrap();
    let e = store.attach_read_only(unsealed).unwrap_err();
    assert!(e.to_string().contains("not sealed"), "{e}");
    copy.seal(0).unwrap();
    let mut hourly = PartitionedEngine::create(
        dir.path().join("hourly"),
        engine_config(),
        PartitionConfig::new().with_width_ms(HOUR),
    )
    .unwrap();
    hourly.batch(vec![Op::Create(point(1, 0))]).unwrap();
    hourly.seal(0).unwrap();
    assert!(store.attach_read_only(hourly).is_err());

    // Attached while the store still holds day 0 itself: nothing is read twice.
    assert_eq!(store.attach_read_only(copy).unwrap(), [0]);
    assert_eq!(store.attached_partitions(), [0]);
    assert!(store.attached_readable().is_empty());
    assert_eq!(rows_of(&store, 0, DAY - 1), before);

    // A point on day 4 moves the high-water mark: retention removes days 0 and 1, and
    // the copy answers for day 0 (raw rows, point reads, its rollups).
    store
        .batch(vec![Op::Create(point(1, 4 * DAY + HOUR))])
        .unwrap();
    assert_eq!(store.enforce_retention().unwrap().0, 2);
    assert_eq!(store.attached_readable(), [0]);
    assert_eq!(rows_of(&store, 0, DAY - 1), before);
    assert!(
        rows_of(&store, DAY, 2 * DAY - 1).is_empty(),
        "day 1 is gone"
    );
    assert!(
        store
            .get(&SyntheticId::new(tsid(2), 5 * HOUR))
            .unwrap()
            .is_some()
    );
    assert_eq!(
        store.search(0, DAY - 1).plan(HOUR),
        [Piece::Rollup {
            partition: 0,
            resolution_ms: HOUR,
            from: 0,
            to: DAY - 1
        }]
    );
    let mut buckets = 0;
    store
        .search(0, DAY - 1)
        .rollup_rows(
            &store.search(0, DAY - 1).plan(HOUR)[0],
            |_, _| true,
            |p| p.all(),
            |_| buckets += 1,
        )
        .unwrap();
    assert_eq!(buckets, 48);
    // Writes there are refused as before: the copy is never written.
    let out = store.batch(vec![Op::Create(point(3, HOUR))]).unwrap();
    assert!(
        matches!(
            out[0],
            Outcome::Rejected {
                reason: Rejection::TooOld {
                    rule: "retention",
                    ..
                },
                ..
            }
        ),
        "{out:?}"
    );
    assert_eq!(rows_of(&store, 0, DAY - 1), before);
    // Detached, it is read no more; it closes as a store of its own.
    let back = store.detach(0).unwrap();
    assert!(store.detach(0).is_none());
    assert!(rows_of(&store, 0, DAY - 1).is_empty());
    back.close().unwrap();
    store.close().unwrap();
}
