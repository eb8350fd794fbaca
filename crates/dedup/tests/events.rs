//! Events mode: ids are content fingerprints with a timestamp; many events of a stream
//! share timestamps. A property test against a `BTreeMap` model (create/index/delete/get,
//! refresh, merges, reopen) for every strategy, and the id text form.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use tidemark_dedup::{
    Engine, EngineConfig, EventIds, Mode, Op, Outcome, Strategy as DedupStrategy,
};
use tidemark_segment::Point;
use tidemark_tsid::{FingerprintMethod, Tsid};

mod support;
use support::{assert_all_conflicts, model_config};

/// (stream, ts, message, value)
#[derive(Debug, Clone)]
enum Item {
    Create(u8, i64, u8, i64),
    Index(u8, i64, u8, i64),
    Delete(i64, u8),
    Get(i64, u8),
}

#[derive(Debug, Clone)]
enum Step {
    One(Item),
    Batch(Vec<Item>),
    Refresh,
    MergeAll,
    PlanMerge,
    FinishMerge,
    /// Freeze the buffer for a background refresh (one in flight at most).
    PlanRefresh,
    /// Write and install it.
    InstallRefresh,
    Reopen,
}

fn stream(s: u8) -> Tsid {
    Tsid::from_bytes([s.wrapping_mul(41).wrapping_add(1); 20])
}

/// An event: its id hashes only `message` (so `index` can replace a value, and one
/// message at one time in two streams is one event).
fn event(s: u8, ts: i64, msg: u8, v: i64) -> Point {
    let p = Point::new(stream(s), ts * 1000)
        .dim("host", format!("h{s}"))
        .keyword("message", format!("login failed for user u{msg}"))
        .keyword("source.ip", format!("10.0.0.{msg}"))
        .counter("attempts", v);
    if v % 2 == 0 {
        p.flag("blocked", true)
    } else {
        p
    }
}

fn config(strategy: DedupStrategy, rows: usize) -> EngineConfig {
    model_config(strategy, rows, 3).with_mode(Mode::Events(
        EventIds::new(FingerprintMethod::Murmur3x64_128).fields(["message"]),
    ))
}

fn item() -> impl Strategy<Value = Item> {
    let s = 0u8..3;
    let ts = 0i64..8;
    let m = 0u8..6;
    let v = 0i64..4;
    prop_oneof![
        4 => (s.clone(), ts.clone(), m.clone(), v.clone()).prop_map(|(s, t, m, v)| Item::Create(s, t, m, v)),
        2 => (s, ts.clone(), m.clone(), v).prop_map(|(s, t, m, v)| Item::Index(s, t, m, v)),
        2 => (ts.clone(), m.clone()).prop_map(|(t, m)| Item::Delete(t, m)),
        1 => (ts, m).prop_map(|(t, m)| Item::Get(t, m)),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        10 => item().prop_map(Step::One),
        3 => proptest::collection::vec(item(), 1..6).prop_map(Step::Batch),
        2 => Just(Step::Refresh),
        1 => Just(Step::MergeAll),
        2 => Just(Step::PlanMerge),
        2 => Just(Step::FinishMerge),
        2 => Just(Step::PlanRefresh),
        2 => Just(Step::InstallRefresh),
        1 => Just(Step::Reopen),
    ]
}

type Model = BTreeMap<(i64, u8), Point>;

fn to_op(engine: &Engine, item: &Item) -> Op {
    match *item {
        Item::Create(s, t, m, v) => Op::Create(event(s, t, m, v)),
        Item::Index(s, t, m, v) => Op::Index(event(s, t, m, v)),
        Item::Delete(t, m) => Op::Delete(engine.id_of(&event(0, t, m, 0)).unwrap()),
        Item::Get(t, m) => Op::Get(engine.id_of(&event(0, t, m, 0)).unwrap()),
    }
}

fn expect(engine: &Engine, model: &mut Model, item: &Item) -> Outcome {
    match *item {
        Item::Create(s, t, m, v) => {
            let id = engine.id_of(&event(s, t, m, v)).unwrap();
            match model.entry((t, m)) {
                std::collections::btree_map::Entry::Occupied(_) => Outcome::Conflict { id },
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(event(s, t, m, v).normalized());
                    Outcome::Created { id }
                }
            }
        }
        Item::Index(s, t, m, v) => {
            let id = engine.id_of(&event(s, t, m, v)).unwrap();
            let replaced = model
                .insert((t, m), event(s, t, m, v).normalized())
                .is_some();
            Outcome::Indexed { id, replaced }
        }
        Item::Delete(t, m) => {
            let id = engine.id_of(&event(0, t, m, 0)).unwrap();
            match model.remove(&(t, m)) {
                Some(_) => Outcome::Deleted { id },
                None => Outcome::NotFound { id },
            }
        }
        Item::Get(t, m) => match model.get(&(t, m)) {
            Some(p) => Outcome::Found(p.clone()),
            None => Outcome::NotFound {
                id: engine.id_of(&event(0, t, m, 0)).unwrap(),
            },
        },
    }
}

fn sorted(mut v: Vec<Point>) -> Vec<Point> {
    v.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    v
}

fn check_contents(engine: &Engine, model: &Model) {
    let want = sorted(model.values().cloned().collect());
    assert_eq!(sorted(engine.points().unwrap()), want);
    assert_eq!(engine.live_count(), model.len() as u64);
}

fn run(strategy: DedupStrategy, rows: usize, steps: &[Step]) {
    let dir = tempfile::tempdir().unwrap();
    let config = config(strategy, rows);
    let mut engine = Engine::create(dir.path(), config.clone()).unwrap();
    let mut model = Model::new();
    let mut job = None;
    let mut refresh: Option<tidemark_dedup::RefreshJob> = None;
    for step in steps {
        match step {
            Step::One(item) => {
                let got = engine.batch([to_op(&engine, item)]).unwrap();
                assert_eq!(got, vec![expect(&engine, &mut model, item)], "{item:?}");
            }
            Step::Batch(items) => {
                let ops: Vec<Op> = items.iter().map(|i| to_op(&engine, i)).collect();
                let got = engine.batch(ops).unwrap();
                let want: Vec<Outcome> = items
                    .iter()
                    .map(|i| expect(&engine, &mut model, i))
                    .collect();
                assert_eq!(got, want, "{items:?}");
            }
            Step::Refresh => engine.refresh().unwrap(),
            Step::MergeAll => {
                engine.merge_all().unwrap();
                check_contents(&engine, &model);
            }
            Step::PlanMerge => {
                if job.is_none() {
                    job = engine.plan_merge();
                }
            }
            Step::FinishMerge => {
                if let Some(j) = job.take() {
                    let merged = tidemark_dedup::MergeJob::run(j);
                    engine.install_merge(merged).unwrap();
                    check_contents(&engine, &model);
                }
            }
            Step::PlanRefresh => {
                if refresh.is_none() {
                    refresh = engine.plan_refresh(true).unwrap();
                    check_contents(&engine, &model);
                }
            }
            Step::InstallRefresh => {
                if let Some(r) = refresh.take() {
                    engine.install_refresh(r.run()).unwrap();
                    check_contents(&engine, &model);
                }
            }
            Step::Reopen => {
                job = None;
                refresh = None;
                drop(engine);
                engine = Engine::open(dir.path(), config.clone()).unwrap();
                check_contents(&engine, &model);
            }
        }
    }
    check_contents(&engine, &model);
    let again: Vec<Op> = model.values().cloned().map(Op::Create).collect();
    assert_all_conflicts(engine.batch(again).unwrap());
    drop(engine);
    let engine = Engine::open(dir.path(), config).unwrap();
    check_contents(&engine, &model);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn events_inverted_match_a_btreemap(rows in 2usize..30, steps in proptest::collection::vec(step(), 1..50)) {
        run(DedupStrategy::Inverted, rows, &steps);
    }

    #[test]
    fn events_bloom_match_a_btreemap(rows in 2usize..30, steps in proptest::collection::vec(step(), 1..50)) {
        run(DedupStrategy::Bloom, rows, &steps);
    }

    #[test]
    fn events_series_range_match_a_btreemap(rows in 2usize..30, steps in proptest::collection::vec(step(), 1..50)) {
        run(DedupStrategy::SeriesRange, rows, &steps);
    }
}

#[test]
fn many_events_at_one_timestamp_are_kept_and_retries_are_conflicts() {
    for strategy in [
        DedupStrategy::SeriesRange,
        DedupStrategy::Bloom,
        DedupStrategy::Inverted,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = EngineConfig::new()
            .with_mode(Mode::Events(EventIds::new(FingerprintMethod::Sha256)))
            .with_strategy(strategy)
            .with_refresh_rows(100);
        let mut engine = Engine::create(dir.path(), config.clone()).unwrap();
        let events: Vec<Point> = (0..1000)
            .map(|i| {
                Point::new(stream(0), 1_700_000_000_000 + (i / 50) * 1000)
                    .keyword("message", format!("event {i}"))
                    .keyword("user", format!("u{}", i % 13))
            })
            .collect();
        let out = engine
            .batch(events.iter().cloned().map(Op::Create))
            .unwrap();
        assert!(out.iter().all(|o| matches!(o, Outcome::Created { .. })));
        engine.merge_all().unwrap();
        drop(engine);
        let mut engine = Engine::open(dir.path(), config).unwrap();
        assert_eq!(engine.live_count(), 1000);
        let out = engine
            .batch(events.iter().cloned().map(Op::Create))
            .unwrap();
        assert!(
            out.iter().all(|o| matches!(o, Outcome::Conflict { .. })),
            "{strategy:?}"
        );
        assert_eq!(engine.stats().true_duplicates, 1000);
        // Ids as text: timestamp prefix, then the fingerprint; they parse back.
        let id = engine.id_of(&events[120]).unwrap();
        let text = engine.format_id(&id);
        assert_eq!(text.len(), 16 + 40);
        assert_eq!(engine.parse_id(&text).unwrap(), id);
        assert!(engine.parse_id("not an id").is_err());
        assert_eq!(
            engine.get(&id).unwrap(),
            Some(events[120].clone().normalized())
        );
        assert!(matches!(
            engine.delete(id).unwrap(),
            Outcome::Deleted { .. }
        ));
        assert_eq!(engine.get(&id).unwrap(), None);
    }
}

#[test]
fn opening_with_the_other_mode_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(DedupStrategy::SeriesRange, 10);
    let mut engine = Engine::create(dir.path(), config).unwrap();
    engine.create_point(event(0, 1, 1, 1)).unwrap();
    engine.refresh().unwrap();
    drop(engine);
    let err = Engine::open(dir.path(), EngineConfig::new()).unwrap_err();
    assert!(err.to_string().contains("holds events"), "{err}");
}
