//! The lake through `object_store`: a `file://` URL and a plain directory name the same
//! local store, an unknown scheme is a clear error, and (feature `s3`, only when
//! `TIDEMARK_LAKE_S3_URL` names a bucket prefix, with `AWS_ENDPOINT`, credentials and
//! `AWS_ALLOW_HTTP` as needed in the environment) an export to S3 reads back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use serde_json::json;
use tidemark::{BulkItem, Index};
use tidemark_lake::{DeltaTable, ExportOptions, LakeStore, export_to};

mod support;
use support::DAY;

/// Two sealed days of three series.
fn index(dir: &Path) -> Index {
    let mut index = support::host_cpu_index(dir);
    let docs = (0..2)
        .flat_map(|d| {
            (0..300).map(move |i| {
                BulkItem::create(json!({
                    "@timestamp": d * DAY + (i / 3) * 1000,
                    "host": format!("h{}", i % 3),
                    "cpu": 0.5,
                }))
            })
        })
        .collect();
    index.bulk(docs).unwrap();
    index.seal(0).unwrap();
    index.seal(DAY).unwrap();
    index
}

/// Exports to `lake` twice (the second skips everything) and returns the table's
/// state as read back through the same store.
fn export_twice(index: &Index, lake: &LakeStore) -> tidemark_lake::TableState {
    let first = export_to(index, lake, &ExportOptions::default(), &mut |_| {}).unwrap();
    assert_eq!((first.committed(), first.rows()), (2, 600));
    let again = export_to(index, lake, &ExportOptions::default(), &mut |_| {}).unwrap();
    assert_eq!((again.committed(), again.skipped()), (0, 2));
    let state = DeltaTable::new(lake.clone()).state().unwrap();
    assert_eq!(state.version, Some(1));
    assert_eq!(state.files.len(), first.files());
    state
}

#[test]
fn a_file_url_writes_the_local_directory_through_object_store() {
    let dir = tempfile::tempdir().unwrap();
    let index = index(&dir.path().join("idx"));
    let lake_dir = dir.path().join("lake");
    let url = format!("file://{}", lake_dir.display());
    let store = LakeStore::open(&url).unwrap();
    assert_eq!(store.location(), lake_dir.display().to_string());
    let state = export_twice(&index, &store);
    // The same files, seen as a plain directory: complete Parquet files, no staging
    // leftovers of the multipart uploads.
    for (rel, live) in &state.files {
        let bytes = std::fs::read(lake_dir.join(rel)).unwrap();
        assert_eq!(bytes.len() as u64, live.size, "{rel}");
        assert!(
            bytes.starts_with(b"PAR1") && bytes.ends_with(b"PAR1"),
            "{rel}"
        );
    }
    let mut names = Vec::new();
    for day in ["partition=0", &format!("partition={DAY}")] {
        for f in std::fs::read_dir(lake_dir.join(day)).unwrap() {
            names.push(f.unwrap().file_name().into_string().unwrap());
        }
    }
    assert_eq!(names.len(), state.files.len(), "{names:?}");
    assert!(names.iter().all(|n| n.ends_with(".parquet")), "{names:?}");
    // A plain path opens the same table.
    let same = DeltaTable::local(&lake_dir).unwrap().state().unwrap();
    assert_eq!(same, state);
}

#[test]
fn an_unknown_scheme_is_a_clear_error() {
    let e = LakeStore::open("gs://bucket/lake").unwrap_err().to_string();
    assert!(
        e.contains("`gs://` is not a store this build writes"),
        "{e}"
    );
    if !cfg!(feature = "s3") {
        let e = LakeStore::open("s3://bucket/lake").unwrap_err().to_string();
        assert!(e.contains("`s3` feature"), "{e}");
    }
}

/// Runs only with `TIDEMARK_LAKE_S3_URL=s3://bucket/prefix` (and the `AWS_*` variables
/// of the endpoint, e.g. a MinIO on 127.0.0.1 with `AWS_ALLOW_HTTP=true`): a fresh prefix
/// under it per run.
#[cfg(feature = "s3")]
#[test]
fn exports_to_an_s3_compatible_store_when_one_is_configured() {
    let Ok(base) = std::env::var("TIDEMARK_LAKE_S3_URL") else {
        eprintln!("TIDEMARK_LAKE_S3_URL is not set: the S3 export is not tested");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let index = index(&dir.path().join("idx"));
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let url = format!("{}/tidemark-test-{run}", base.trim_end_matches('/'));
    let store = LakeStore::open(&url).unwrap();
    let state = export_twice(&index, &store);
    assert_eq!(state.partition_columns, ["partition"]);
}
