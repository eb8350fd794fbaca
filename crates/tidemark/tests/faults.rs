//! Fault injection at every write site of the engine, the partition catalog and the
//! façade's counters (`tidemark_bloom::faults`, enabled for these tests): each site is
//! made to fail once (ENOSPC, EIO, a short write, a failed fsync) during the operation
//! that reaches it. Each time: the failed operation reports an error (never an
//! acknowledgement of what was not kept); a write after it is either refused or kept;
//! after a reopen every acknowledged document is there exactly once (a refused one may
//! be too, when it reached the log before the failure), and re-sending everything
//! stores only what is missing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use serde_json::json;
use tidemark::dedup::{EngineConfig, PartitionConfig};
use tidemark::{BulkItem, Index, ItemStatus, Mapping};
use tidemark_bloom::faults::{self, Fault, Op, Rule};

const DAY: i64 = 86_400_000;
const T0: i64 = 1_764_460_800_000;

fn mapping() -> Mapping {
    Mapping::from_value(json!({"mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "cpu": {"type": "double", "time_series_metric": "gauge"}}}}))
    .unwrap()
}

/// Batch `b`: 200 distinct documents (10 hosts), `day` days after T0.
fn batch(b: i64, day: i64) -> Vec<BulkItem> {
    (0..200)
        .map(|i| {
            BulkItem::create(json!({
                "@timestamp": T0 + day * DAY + (b * 200 + i) / 10 * 1000,
                "host": format!("h{}", i % 10),
                "cpu": i as f64,
            }))
        })
        .collect()
}

/// Applies a batch: `Some(created)` when acknowledged, `None` when the call failed.
fn apply(ix: &mut Index, items: Vec<BulkItem>) -> Option<usize> {
    let results = ix.bulk(items).ok()?;
    for r in &results {
        assert!(
            matches!(r.status, ItemStatus::Created | ItemStatus::Duplicate),
            "an acknowledged batch has an item error: {:?}",
            r.status
        );
    }
    Some(
        results
            .iter()
            .filter(|r| matches!(r.status, ItemStatus::Created))
            .count(),
    )
}

#[derive(Clone, Copy, Debug)]
enum Action {
    /// A bulk write (the log).
    Write,
    /// A refresh (segment, manifest, log rotation, directory sync).
    Refresh,
    /// A refresh off the write path: freeze, segment written without the index,
    /// install (an index with a small buffer budget).
    BackgroundRefresh,
    /// A merge of the refreshed segments.
    Merge,
    /// Saving the counters file.
    Counters,
    /// A write into a new partition (the partition catalog).
    NewPartition,
}

struct Site {
    name: &'static str,
    file: &'static str,
    op: Op,
    fault: Fault,
    action: Action,
    partitioned: bool,
}

const fn site(
    name: &'static str,
    file: &'static str,
    op: Op,
    fault: Fault,
    action: Action,
) -> Site {
    Site {
        name,
        file,
        op,
        fault,
        action,
        partitioned: false,
    }
}

/// Every write site, by the file it writes and the operation (docs/faults.md lists them).
fn sites() -> Vec<Site> {
    use Action::*;
    use Fault::*;
    let mut v = vec![
        site("log append, disk full", "/wal-", Op::Write, NoSpace, Write),
        site(
            "log append, short write",
            "/wal-",
            Op::Write,
            ShortWrite,
            Write,
        ),
        site("log append, EIO", "/wal-", Op::Write, Io, Write),
        site("log fsync, EIO", "/wal-", Op::Sync, Io, Write),
        site(
            "log rotation: create",
            "/wal-",
            Op::Create,
            NoSpace,
            Refresh,
        ),
        site("segment create", "/seg-", Op::Create, NoSpace, Refresh),
        site(
            "segment write, disk full",
            "/seg-",
            Op::Write,
            NoSpace,
            Refresh,
        ),
        site(
            "segment write, short",
            "/seg-",
            Op::Write,
            ShortWrite,
            Refresh,
        ),
        site("segment fsync, EIO", "/seg-", Op::Sync, Io, Refresh),
        site("segment rename", "/seg-", Op::Rename, Io, Refresh),
        site("manifest write", "/MANIFEST", Op::Write, NoSpace, Refresh),
        site("manifest fsync", "/MANIFEST", Op::Sync, Io, Refresh),
        site("directory fsync", "", Op::SyncDir, Io, Refresh),
        site("merge output create", "/seg-", Op::Create, NoSpace, Merge),
        site("merge output write", "/seg-", Op::Write, NoSpace, Merge),
        site("merge output fsync", "/seg-", Op::Sync, Io, Merge),
        site(
            "counters write",
            "/counters.json",
            Op::Write,
            NoSpace,
            Counters,
        ),
        site("counters fsync", "/counters.json", Op::Sync, Io, Counters),
    ];
    for (name, file, op, fault) in [
        ("background: log rotation", "/wal-", Op::Create, NoSpace),
        ("background: segment create", "/seg-", Op::Create, NoSpace),
        ("background: segment write", "/seg-", Op::Write, ShortWrite),
        ("background: segment fsync", "/seg-", Op::Sync, Io),
        ("background: segment rename", "/seg-", Op::Rename, Io),
        (
            "background: manifest write",
            "/MANIFEST",
            Op::Write,
            NoSpace,
        ),
        ("background: manifest fsync", "/MANIFEST", Op::Sync, Io),
    ] {
        v.push(Site {
            name,
            file,
            op,
            fault,
            action: BackgroundRefresh,
            partitioned: false,
        });
    }
    for (name, op, fault) in [
        ("partition catalog write", Op::Write, NoSpace),
        ("partition catalog fsync", Op::Sync, Io),
        ("partition catalog rename", Op::Rename, Io),
    ] {
        v.push(Site {
            name,
            file: "/PARTITIONS",
            op,
            fault,
            action: NewPartition,
            partitioned: true,
        });
    }
    v
}

fn create(dir: &Path, partitioned: bool, refresh_rows: usize) -> Index {
    if partitioned {
        Index::create_partitioned(
            dir,
            mapping(),
            EngineConfig::new().with_refresh_rows(refresh_rows),
            PartitionConfig::new().with_width_ms(DAY),
        )
        .unwrap()
    } else {
        let config = EngineConfig::new().with_refresh_rows(refresh_rows);
        Index::create_with_config(dir, mapping(), config).unwrap()
    }
}

fn live(ix: &Index) -> u64 {
    ix.engine().live_count()
}

#[test]
fn every_write_site_fails_without_losing_an_acknowledged_document() {
    const { assert!(faults::ENABLED, "the fault-injection feature is off") };
    let mut report = Vec::new();
    for s in sites() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ix");
        let key = dir.to_string_lossy().into_owned();
        let background = matches!(s.action, Action::BackgroundRefresh);
        let refresh_rows = if background { 150 } else { 100_000 };
        let mut ix = create(&dir, s.partitioned, refresh_rows);
        // Two acknowledged batches, refreshed into two segments (a merge has input).
        let mut acked = vec![0i64, 1];
        for b in [0, 1] {
            assert_eq!(apply(&mut ix, batch(b, 0)), Some(200), "{}", s.name);
            ix.refresh().unwrap();
        }
        let before = live(&ix);
        assert_eq!(before, 400);

        if let Action::Refresh | Action::BackgroundRefresh = s.action {
            ix.set_background_refresh(background);
            assert_eq!(apply(&mut ix, batch(2, 0)), Some(200), "{}", s.name);
            acked.push(2);
        }
        faults::inject(Rule::new(s.op, s.fault, format!("{key}{}", s.file)).times(1));
        let (failed, batch_day) = match s.action {
            Action::Write => {
                let ok = apply(&mut ix, batch(2, 0));
                if ok.is_some() {
                    acked.push(2);
                }
                (ok.is_none(), 0)
            }
            Action::Refresh => (ix.refresh().is_err(), 0),
            Action::BackgroundRefresh => {
                let failed = match ix.plan_refresh() {
                    Err(_) => true,
                    Ok(None) => panic!("{}: 200 points over a budget of 150 freeze", s.name),
                    Ok(Some(job)) => ix.install_refresh(job.run()).is_err(),
                };
                (failed, 0)
            }
            Action::Merge => (ix.merge().is_err(), 0),
            Action::Counters => (ix.save_counters().is_err(), 0),
            Action::NewPartition => {
                let ok = apply(&mut ix, batch(2, 3));
                if ok.is_some() {
                    acked.push(2);
                }
                (ok.is_none(), 3)
            }
        };
        let hits = faults::clear(&key);
        assert_eq!(hits, 1, "{}: the site was not reached", s.name);
        assert!(failed, "{}: the failure was not reported", s.name);

        // A write after the failure: refused, or kept.
        let after = apply(&mut ix, batch(3, 0));
        if after.is_some() {
            acked.push(3);
        }
        if background && after.is_some() {
            // The failed refresh is planned again, and this time it installs.
            let job = ix
                .plan_refresh()
                .unwrap()
                .expect("the frozen buffer is planned again");
            ix.install_refresh(job.run()).unwrap();
            let job = ix.plan_refresh().unwrap();
            if let Some(job) = job {
                ix.install_refresh(job.run()).unwrap();
            }
            assert_eq!(
                live(&ix),
                200 * acked.len() as u64,
                "{}: after the retry",
                s.name
            );
        }
        let _ = ix.close();

        // Reopened: every acknowledged batch is there once.
        let mut ix = Index::open(&dir).unwrap();
        let mut expected = 0u64;
        for &b in &acked {
            let day = if b == 2 { batch_day } else { 0 };
            assert_eq!(
                apply(&mut ix, batch(b, day)),
                Some(0),
                "{}: acknowledged batch {b} was not all kept",
                s.name
            );
            expected += 200;
        }
        // What was refused may have reached the log before the failure (a failed
        // fsync): replayed, it is kept, and its re-send is then a duplicate.
        let kept = live(&ix);
        assert!(
            (expected..=800).contains(&kept),
            "{}: {kept} documents after reopening, {expected} acknowledged",
            s.name
        );
        // Re-sending everything stores only what was never acknowledged.
        for b in 0..4 {
            let day = if b == 2 { batch_day } else { 0 };
            apply(&mut ix, batch(b, day)).unwrap();
        }
        assert_eq!(live(&ix), 800, "{}: re-sending everything", s.name);
        report.push(format!(
            "{:<28} {:?} {:?}: failed; next write {}; reopened with {} unacknowledged documents kept",
            s.name,
            s.op,
            s.fault,
            if after.is_some() { "kept" } else { "refused" },
            kept - expected
        ));
        ix.close().unwrap();
    }
    eprintln!("{}", report.join("\n"));
}
