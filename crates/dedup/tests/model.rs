//! Property test: random interleavings of create/index/delete/get/batch/refresh/merge/
//! reopen, and of refreshes off the write path (freeze, write, install, each a step, with
//! writes, inline refreshes and crashes between them), against a `BTreeMap` model give
//! identical outcomes and identical contents, for each dedup strategy.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use tidemark_dedup::{Engine, Op, Outcome, Strategy as DedupStrategy};
use tidemark_segment::Point;
use tidemark_tsid::{SyntheticId, Tsid};

mod support;
use support::{assert_all_conflicts, model_config};

#[derive(Debug, Clone)]
enum Item {
    Create(u8, i64, i64),
    Index(u8, i64, i64),
    Delete(u8, i64),
    Get(u8, i64),
}

#[derive(Debug, Clone)]
enum Step {
    One(Item),
    Batch(Vec<Item>),
    Refresh,
    /// Merge the segments whose positions (oldest first) have their bit set.
    Merge(u8),
    MergeAll,
    /// Plan a background merge (up to two in flight, as a shared engine's two merge
    /// threads run them); `FinishMerge(i)` runs and installs one of them, not
    /// necessarily the oldest.
    PlanMerge,
    FinishMerge(u8),
    /// Freeze the buffer for a background refresh (one in flight at most).
    PlanRefresh,
    /// Write the frozen buffer's segment (not yet installed).
    RunRefresh,
    /// Install the written segment (writing it first if needed).
    InstallRefresh,
    Reopen,
}

fn tsid(series: u8) -> Tsid {
    let mut b = [series.wrapping_mul(37); 20];
    b[0] = series;
    Tsid::from_bytes(b)
}

fn point(series: u8, ts: i64, v: i64) -> Point {
    let p = Point::new(tsid(series), ts * 1000)
        .dim("host", format!("h{series}"))
        .dim("dc", "eu")
        .gauge("v", v as f64 * 0.5);
    if v % 2 == 0 { p.counter("c", v) } else { p }
}

fn id(series: u8, ts: i64) -> SyntheticId {
    SyntheticId::new(tsid(series), ts * 1000)
}

fn item() -> impl Strategy<Value = Item> {
    let s = 0u8..4;
    let ts = 0i64..24;
    let v = 0i64..6;
    prop_oneof![
        4 => (s.clone(), ts.clone(), v.clone()).prop_map(|(s, t, v)| Item::Create(s, t, v)),
        2 => (s.clone(), ts.clone(), v).prop_map(|(s, t, v)| Item::Index(s, t, v)),
        2 => (s.clone(), ts.clone()).prop_map(|(s, t)| Item::Delete(s, t)),
        1 => (s, ts).prop_map(|(s, t)| Item::Get(s, t)),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        10 => item().prop_map(Step::One),
        3 => proptest::collection::vec(item(), 1..6).prop_map(Step::Batch),
        2 => Just(Step::Refresh),
        1 => any::<u8>().prop_map(Step::Merge),
        1 => Just(Step::MergeAll),
        2 => Just(Step::PlanMerge),
        2 => any::<u8>().prop_map(Step::FinishMerge),
        2 => Just(Step::PlanRefresh),
        1 => Just(Step::RunRefresh),
        2 => Just(Step::InstallRefresh),
        1 => Just(Step::Reopen),
    ]
}

type Model = BTreeMap<(u8, i64), Point>;

fn to_op(item: &Item) -> Op {
    match *item {
        Item::Create(s, t, v) => Op::Create(point(s, t, v)),
        Item::Index(s, t, v) => Op::Index(point(s, t, v)),
        Item::Delete(s, t) => Op::Delete(id(s, t)),
        Item::Get(s, t) => Op::Get(id(s, t)),
    }
}

fn expect(model: &mut Model, item: &Item) -> Outcome {
    match *item {
        Item::Create(s, t, v) => match model.entry((s, t)) {
            std::collections::btree_map::Entry::Occupied(_) => Outcome::Conflict { id: id(s, t) },
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(point(s, t, v).normalized());
                Outcome::Created { id: id(s, t) }
            }
        },
        Item::Index(s, t, v) => {
            let replaced = model.insert((s, t), point(s, t, v).normalized()).is_some();
            Outcome::Indexed {
                id: id(s, t),
                replaced,
            }
        }
        Item::Delete(s, t) => match model.remove(&(s, t)) {
            Some(_) => Outcome::Deleted { id: id(s, t) },
            None => Outcome::NotFound { id: id(s, t) },
        },
        Item::Get(s, t) => match model.get(&(s, t)) {
            Some(p) => Outcome::Found(p.clone()),
            None => Outcome::NotFound { id: id(s, t) },
        },
    }
}

fn check_contents(engine: &Engine, model: &Model) {
    let mut want: Vec<Point> = model.values().cloned().collect();
    want.sort_by_key(|p| (p.tsid, p.ts_millis));
    assert_eq!(engine.points().unwrap(), want);
    assert_eq!(engine.live_count(), model.len() as u64);
}

fn run(strategy: DedupStrategy, refresh_rows: usize, merge_factor: usize, steps: &[Step]) {
    let dir = tempfile::tempdir().unwrap();
    let config = model_config(strategy, refresh_rows, merge_factor);
    let mut engine = Engine::create(dir.path(), config.clone()).unwrap();
    let mut model = Model::new();
    let mut jobs = Vec::new();
    let mut refresh: Option<tidemark_dedup::RefreshJob> = None;
    let mut written: Option<tidemark_dedup::RefreshedSegment> = None;
    for step in steps {
        match step {
            Step::One(item) => {
                let got = engine.batch([to_op(item)]).unwrap();
                assert_eq!(got, vec![expect(&mut model, item)], "{item:?}");
            }
            Step::Batch(items) => {
                let got = engine.batch(items.iter().map(to_op)).unwrap();
                let want: Vec<Outcome> = items.iter().map(|i| expect(&mut model, i)).collect();
                assert_eq!(got, want, "{items:?}");
            }
            Step::Refresh => engine.refresh().unwrap(),
            Step::Merge(mask) => {
                let positions: Vec<usize> = (0..8).filter(|b| mask & (1 << b) != 0).collect();
                engine.merge(&positions).unwrap();
                check_contents(&engine, &model);
            }
            Step::MergeAll => {
                engine.merge_all().unwrap();
                assert!(engine.segment_count() <= 1);
                check_contents(&engine, &model);
            }
            Step::PlanMerge => {
                if jobs.len() < 2 {
                    jobs.extend(engine.plan_merge());
                }
            }
            Step::FinishMerge(i) => {
                if !jobs.is_empty() {
                    let j = jobs.remove(usize::from(*i) % jobs.len());
                    let merged = tidemark_dedup::MergeJob::run(j);
                    engine.install_merge(merged).unwrap();
                    check_contents(&engine, &model);
                }
            }
            Step::PlanRefresh => {
                if refresh.is_none() && written.is_none() {
                    refresh = engine.plan_refresh(true).unwrap();
                    check_contents(&engine, &model);
                }
            }
            Step::RunRefresh => {
                if let Some(job) = refresh.take() {
                    written = Some(job.run());
                }
            }
            Step::InstallRefresh => {
                if let Some(job) = refresh.take() {
                    written = Some(job.run());
                }
                if let Some(done) = written.take() {
                    engine.install_refresh(done).unwrap();
                    check_contents(&engine, &model);
                }
            }
            Step::Reopen => {
                jobs.clear();
                // A crash with a refresh in flight: its segment, if written, is an
                // orphan; its points are in the logs.
                let orphan = written.take().is_some();
                refresh = None;
                drop(engine);
                engine = Engine::open(dir.path(), config.clone()).unwrap();
                let unexpected: Vec<_> = engine
                    .warnings()
                    .iter()
                    .filter(|w| {
                        !(orphan && matches!(w, tidemark_dedup::Warning::RemovedOrphan { .. }))
                    })
                    .collect();
                assert!(unexpected.is_empty(), "{unexpected:?}");
                check_contents(&engine, &model);
            }
        }
    }
    check_contents(&engine, &model);
    // Re-ingesting everything the model holds adds nothing.
    let again: Vec<Op> = model.values().cloned().map(Op::Create).collect();
    assert_all_conflicts(engine.batch(again).unwrap());
    drop(engine);
    let engine = Engine::open(dir.path(), config).unwrap();
    check_contents(&engine, &model);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn inverted_matches_a_btreemap(rows in 2usize..40, factor in 2usize..5, steps in proptest::collection::vec(step(), 1..60)) {
        run(DedupStrategy::Inverted, rows, factor, &steps);
    }

    #[test]
    fn bloom_matches_a_btreemap(rows in 2usize..40, factor in 2usize..5, steps in proptest::collection::vec(step(), 1..60)) {
        run(DedupStrategy::Bloom, rows, factor, &steps);
    }

    #[test]
    fn series_range_bloom_matches_a_btreemap(rows in 2usize..40, factor in 2usize..5, steps in proptest::collection::vec(step(), 1..60)) {
        run(DedupStrategy::SeriesRangeBloom, rows, factor, &steps);
    }

    #[test]
    fn series_range_matches_a_btreemap(rows in 2usize..40, factor in 2usize..5, steps in proptest::collection::vec(step(), 1..60)) {
        run(DedupStrategy::SeriesRange, rows, factor, &steps);
    }
}
