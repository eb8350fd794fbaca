//! `SeriesReader`: a series' samples read column by column across partitions, segments
//! (tombstones applied) and the buffer equal the live points, whatever mix of creates,
//! replacing indexes, deletes, refreshes and merges produced them, in and out of order;
//! and readers on several threads read one store at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use tidemark_dedup::{EngineConfig, Op, PartitionConfig, PartitionedEngine};
use tidemark_segment::{ColumnSamples, Point};
use tidemark_tsid::Tsid;

mod support;
use support::{DAY, pod_point};

fn tsid(s: u8) -> Tsid {
    let mut b = [s; 20];
    b[0] = 1;
    Tsid::from_bytes(b)
}

/// A deterministic generator (64-bit LCG, high bits).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// series → ts → (cpu, bytes): what the store must hold.
type Model = BTreeMap<u8, BTreeMap<i64, (f64, Option<i64>)>>;

fn point(s: u8, ts: i64, cpu: f64, bytes: Option<i64>) -> Point {
    let p = pod_point(tsid(s), ts, s).gauge("cpu", cpu);
    match bytes {
        Some(b) => p.counter("bytes", b),
        None => p,
    }
}

fn check(store: &PartitionedEngine, model: &Model, rng: &mut Lcg) {
    for _ in 0..8 {
        let from = rng.next(3 * DAY as u64) as i64 - DAY / 2;
        let to = from + rng.next(2 * DAY as u64) as i64;
        let mut reader = store
            .search(from, to)
            .series_reader_with_rows(&["bytes", "cpu", "missing"]);
        let mut out = Vec::new();
        for s in 0u8..8 {
            reader.read(&tsid(s), &mut out).unwrap();
            let rows = model
                .get(&s)
                .map(|m| m.range(from..=to).collect::<Vec<_>>());
            let rows = rows.unwrap_or_default();
            let mut cpu = ColumnSamples::default();
            let mut bytes = ColumnSamples::default();
            let mut all = ColumnSamples::default();
            for (&t, &(c, b)) in rows {
                all.push(t, 0.0);
                cpu.push(t, c);
                if let Some(b) = b {
                    bytes.push(t, b as f64);
                }
            }
            assert_eq!(out.len(), 4);
            assert_eq!(out[3], all, "rows of series {s} in {from}..={to}");
            assert_eq!(out[0], bytes, "bytes of series {s} in {from}..={to}");
            assert_eq!(out[1], cpu, "cpu of series {s} in {from}..={to}");
            assert!(out[2].is_empty());
        }
    }
}

/// A store of day partitions refreshing every 300 points.
fn day_store(dir: &std::path::Path) -> PartitionedEngine {
    let config = EngineConfig::new().with_refresh_rows(300);
    PartitionedEngine::create(dir, config, PartitionConfig::new().with_width_ms(DAY)).unwrap()
}

/// `n` random writes (mostly in order per series, some late, some retried, some
/// replacing, some deleting), applied to `next` as the store will apply them.
fn random_ops(store: &PartitionedEngine, rng: &mut Lcg, next: &mut Model, n: usize) -> Vec<Op> {
    let mut ops = Vec::new();
    for _ in 0..n {
        let s = rng.next(6) as u8;
        let ts = (rng.next(2 * DAY as u64 / 10_000) * 10_000) as i64;
        let cpu = rng.next(1000) as f64 / 8.0;
        let bytes = (rng.next(4) > 0).then(|| rng.next(1 << 40) as i64);
        let known = next.get(&s).is_some_and(|m| m.contains_key(&ts));
        match rng.next(10) {
            0 if known => {
                let id = store.id_of(&point(s, ts, 0.0, None)).unwrap();
                ops.push(Op::Delete(id));
                next.entry(s).or_default().remove(&ts);
            }
            1 | 2 => {
                ops.push(Op::Index(point(s, ts, cpu, bytes)));
                next.entry(s).or_default().insert(ts, (cpu, bytes));
            }
            _ => {
                ops.push(Op::Create(point(s, ts, cpu, bytes)));
                next.entry(s).or_default().entry(ts).or_insert((cpu, bytes));
            }
        }
    }
    ops
}

#[test]
fn reads_see_a_frozen_buffer_and_its_deletes_while_its_refresh_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = day_store(dir.path());
    store.set_background_refresh(true);
    let mut rng = Lcg(11);
    let mut model: Model = BTreeMap::new();
    let mut frozen_deletes = 0;
    for _ in 0..6 {
        let mut next = model.clone();
        for op in random_ops(&store, &mut rng, &mut next, 400) {
            store.batch(vec![op]).unwrap();
        }
        model = next;
        // Freeze; the writes after it replace and delete frozen points.
        let mut jobs = Vec::new();
        while let Some(job) = store.plan_refresh().unwrap() {
            jobs.push(job);
        }
        assert!(
            !jobs.is_empty(),
            "400 points over the budget of 300 freeze a buffer"
        );
        let before = store.deleted_rows();
        let mut next = model.clone();
        for op in random_ops(&store, &mut rng, &mut next, 300) {
            store.batch(vec![op]).unwrap();
        }
        model = next;
        check(&store, &model, &mut rng);
        for job in jobs {
            store.install_refresh(job.run()).unwrap();
        }
        frozen_deletes += store.deleted_rows().saturating_sub(before);
        check(&store, &model, &mut rng);
    }
    assert!(frozen_deletes > 0, "writes killed frozen points");
    drop(store);
    let store =
        PartitionedEngine::open(dir.path(), EngineConfig::new().with_refresh_rows(300)).unwrap();
    check(&store, &model, &mut rng);
}

#[test]
fn reads_equal_the_live_points_through_every_kind_of_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = day_store(dir.path());
    let mut rng = Lcg(7);
    let mut model: Model = BTreeMap::new();
    for round in 0..6 {
        let mut next: Model = model.clone();
        let ops = random_ops(&store, &mut rng, &mut next, 700);
        // One batch per op keeps the model's order exactly the store's.
        for op in ops {
            store.batch(vec![op]).unwrap();
        }
        model = next;
        check(&store, &model, &mut rng);
        match round % 3 {
            0 => store.refresh().unwrap(),
            1 => store.merge_all().unwrap(),
            _ => {}
        }
        check(&store, &model, &mut rng);
    }
    assert!(store.segment_count() > 1, "the reads crossed segments");
    assert!(store.deleted_rows() > 0, "the reads crossed tombstones");

    // Readers on two threads at once, each over its own series.
    let store = &store;
    let model = &model;
    std::thread::scope(|sc| {
        for half in [0u8..3, 3..8] {
            sc.spawn(move || {
                let mut reader = store.search(i64::MIN, i64::MAX).series_reader(&["cpu"]);
                let mut out = Vec::new();
                for s in half {
                    reader.read(&tsid(s), &mut out).unwrap();
                    let want = model.get(&s).map_or(0, BTreeMap::len);
                    assert_eq!(out[0].len(), want);
                }
            });
        }
    });
}
