//! Several writer threads on one engine (through `SharedEngine`) give the same final
//! contents as one thread, and no duplicate slips in between two threads writing the
//! same point at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tidemark_dedup::{Durability, Engine, EngineConfig, Op, Outcome, SharedEngine, Strategy};
use tidemark_segment::Point;
use tidemark_tsid::Tsid;

const POINTS: u64 = 4_000;
const THREADS: u64 = 4;

fn point(i: u64) -> Point {
    let s = i % 13;
    Point::new(Tsid::from_bytes([s as u8 + 1; 20]), (i / 13) as i64 * 1000)
        .dim("pod", format!("p{s}"))
        .gauge("v", i as f64)
}

/// Thread `t`'s order of the whole stream: every thread writes every point.
fn order(t: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..POINTS).collect();
    let mut x = t * 0x9E37_79B9 + 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

fn config(strategy: Strategy) -> EngineConfig {
    EngineConfig::new()
        .with_strategy(strategy)
        .with_refresh_rows(150)
        .with_merge_factor(3)
        .with_durability(Durability::PerRequest)
}

#[test]
fn threads_writing_the_same_points_store_each_once() {
    for strategy in Strategy::ALL {
        let dir = tempfile::tempdir().unwrap();
        let shared = SharedEngine::new(Engine::create(dir.path(), config(strategy)).unwrap());
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let w = shared.writer();
                std::thread::spawn(move || {
                    let mut created = 0u64;
                    for chunk in order(t).chunks(50) {
                        let ops = chunk.iter().map(|&i| Op::Create(point(i))).collect();
                        for o in w.batch(ops).unwrap() {
                            match o {
                                Outcome::Created { .. } => created += 1,
                                Outcome::Conflict { .. } => {}
                                other => panic!("{other:?}"),
                            }
                        }
                    }
                    created
                })
            })
            .collect();
        let created: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(created, POINTS, "{strategy:?}");
        let engine = shared.into_inner().unwrap();
        // 4,000 points in refreshes of 150: background merges kept the count down.
        assert!(engine.segment_count() < 12, "{:?}", engine.segment_rows());
        let concurrent = engine.points().unwrap();
        drop(engine);

        let single_dir = tempfile::tempdir().unwrap();
        let mut single = Engine::create(single_dir.path(), config(strategy)).unwrap();
        single
            .batch((0..POINTS).map(|i| Op::Create(point(i))))
            .unwrap();
        assert_eq!(concurrent, single.points().unwrap(), "{strategy:?}");

        // And after a restart.
        let engine = Engine::open(dir.path(), config(strategy)).unwrap();
        assert_eq!(engine.points().unwrap(), concurrent);
    }
}

#[test]
fn refresh_runs_on_the_engine_thread_and_into_inner_returns_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let shared = SharedEngine::new(Engine::create(dir.path(), EngineConfig::new()).unwrap());
    let w = shared.writer();
    w.batch(vec![Op::Create(point(1))]).unwrap();
    w.refresh().unwrap();
    drop(w);
    let engine = shared.into_inner().unwrap();
    assert_eq!((engine.live_count(), engine.segment_count()), (1, 1));
}

#[test]
fn an_idle_shared_engine_with_interval_durability_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig::new()
        .with_durability(Durability::Interval(std::time::Duration::from_millis(2)));
    let shared = SharedEngine::new(Engine::create(dir.path(), cfg.clone()).unwrap());
    let w = shared.writer();
    w.batch(vec![Op::Create(point(1))]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20)); // idle ticks sync the log
    w.batch(vec![Op::Create(point(2))]).unwrap();
    drop(shared);
    assert!(
        w.batch(vec![Op::Create(point(3))]).is_err(),
        "the engine stopped"
    );
    let engine = Engine::open(dir.path(), cfg).unwrap();
    assert_eq!(engine.live_count(), 2);
}
