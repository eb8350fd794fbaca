//! Crashes around the table commit: `tidemark-export` aborted (as by a kill) at the
//! failpoints `export-before-commit` and `export-after-commit`, then run again. Each
//! partition ends up in the lake exactly once, whatever the crash left behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use assert_cmd::Command;
use serde_json::json;
use tidemark::BulkItem;
use tidemark::dedup::FAILPOINT_ENV;
use tidemark_lake::{DeltaTable, txn_app_id};

mod support;
use support::{DAY, serial};
const ROWS_PER_DAY: i64 = 300;

/// Three sealed days of one series; the index is closed (its lock released).
fn index(dir: &Path) {
    let mut index = support::host_cpu_index(dir);
    let docs = (0..3)
        .flat_map(|d| {
            (0..ROWS_PER_DAY).map(move |i| {
                BulkItem::create(
                    json!({"@timestamp": d * DAY + i * 1000, "host": "a", "cpu": 0.25}),
                )
            })
        })
        .collect();
    index.bulk(docs).unwrap();
    for d in 0..3 {
        index.seal(d * DAY).unwrap();
    }
    index.close().unwrap();
}

fn export(idx: &Path, lake: &Path, failpoint: Option<&str>) -> std::process::Output {
    let mut cmd = Command::cargo_bin("tidemark-export").unwrap();
    cmd.args([
        "--index",
        idx.to_str().unwrap(),
        "--to",
        lake.to_str().unwrap(),
    ]);
    if let Some(f) = failpoint {
        cmd.env(FAILPOINT_ENV, f);
    }
    cmd.output().unwrap()
}

/// The export was ended by its failpoint (no exit code: a signal), not by an error.
fn aborted(out: &std::process::Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code().is_none() && !stderr.contains("error:"),
        "{:?}: {stderr}",
        out.status
    );
}

/// Live rows of the table: the sum of its add actions' numRecords is what readers see;
/// here each live file is read back by row count from its Parquet footer.
fn live_rows(lake: &Path) -> u64 {
    let state = DeltaTable::local(lake).unwrap().state().unwrap();
    state
        .files
        .keys()
        .map(|p| {
            let f = std::fs::File::open(lake.join(p)).unwrap();
            let r = parquet::file::serialized_reader::SerializedFileReader::new(f).unwrap();
            use parquet::file::reader::FileReader;
            r.metadata().file_metadata().num_rows() as u64
        })
        .sum()
}

#[test]
fn a_crash_before_the_commit_leaves_nothing_live_and_the_retry_commits_once() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (idx, lake) = (dir.path().join("idx"), dir.path().join("lake"));
    index(&idx);
    let out = export(&idx, &lake, Some("export-before-commit"));
    aborted(&out);
    // The first partition's file is on disk, but no commit names it.
    let state = DeltaTable::local(&lake).unwrap().state().unwrap();
    assert_eq!((state.version, state.files.len()), (None, 0));
    assert!(lake.join("partition=0").read_dir().unwrap().count() >= 1);

    assert!(export(&idx, &lake, None).status.success());
    let state = DeltaTable::local(&lake).unwrap().state().unwrap();
    assert_eq!((state.version, state.files.len()), (Some(2), 3));
    assert_eq!(live_rows(&lake), 3 * ROWS_PER_DAY as u64);
    assert!(export(&idx, &lake, None).status.success());
    assert_eq!(
        DeltaTable::local(&lake).unwrap().state().unwrap().version,
        Some(2)
    );
}

#[test]
fn a_crash_after_the_commit_is_not_exported_twice() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (idx, lake) = (dir.path().join("idx"), dir.path().join("lake"));
    index(&idx);
    let out = export(&idx, &lake, Some("export-after-commit"));
    aborted(&out);
    // The first partition was committed before the crash.
    let state = DeltaTable::local(&lake).unwrap().state().unwrap();
    assert_eq!((state.version, state.files.len()), (Some(0), 1));
    assert!(state.txns.contains_key(&txn_app_id(0)));

    let out = export(&idx, &lake, None);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("exported 2 partitions (1 skipped"), "{text}");
    let state = DeltaTable::local(&lake).unwrap().state().unwrap();
    assert_eq!(
        (state.version, state.files.len(), state.txns.len()),
        (Some(2), 3, 3)
    );
    assert_eq!(live_rows(&lake), 3 * ROWS_PER_DAY as u64);
}
