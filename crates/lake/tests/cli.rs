//! The `tidemark-export` binary (what `tidemark export` runs): the report, the JSON
//! report, a second run that skips, and clear errors for bad input (exit code 2, a
//! message, never a panic).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use assert_cmd::Command;
use serde_json::{Value, json};
use tidemark::{BulkItem, Index, Mapping};

mod support;
use support::{DAY, serial};

fn mapping() -> Mapping {
    Mapping::from_value(json!({"mappings": {"properties": {
        "host": {"type": "keyword", "time_series_dimension": true},
        "cpu": {"type": "double", "time_series_metric": "gauge"}}}}))
    .unwrap()
}

/// Two sealed days, 200 rows each; the index is closed (its lock released).
fn index(dir: &std::path::Path) {
    let mut index = support::host_cpu_index(dir);
    let docs = (0..2)
        .flat_map(|d| {
            (0..200).map(move |i| {
                BulkItem::create(json!({"@timestamp": d * DAY + i * 1000, "host": "a", "cpu": 1.5}))
            })
        })
        .collect();
    index.bulk(docs).unwrap();
    index.seal(0).unwrap();
    index.seal(DAY).unwrap();
    index.close().unwrap();
}

fn export_cmd() -> Command {
    Command::cargo_bin("tidemark-export").unwrap()
}

#[test]
fn prints_a_report_and_skips_on_the_second_run() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (idx, lake) = (dir.path().join("idx"), dir.path().join("lake"));
    index(&idx);
    let out = export_cmd()
        .args([
            "--index",
            idx.to_str().unwrap(),
            "--to",
            lake.to_str().unwrap(),
        ])
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(text.contains("1970-01-01T00:00:00.000Z"), "{text}");
    assert!(text.contains("exported 2 partitions (0 skipped"), "{text}");
    assert!(text.contains("400 rows, 2 files"), "{text}");
    assert!(text.contains("rows/s"), "{text}");
    let stderr = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(
        stderr.contains("partition 2/2 1970-01-02T00:00:00.000Z: 200/200 rows"),
        "{stderr}"
    );

    let out = export_cmd()
        .args([
            "--index",
            idx.to_str().unwrap(),
            "--to",
            lake.to_str().unwrap(),
            "--json",
        ])
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(
        (v["committed"].as_u64(), v["skipped"].as_u64()),
        (Some(0), Some(2))
    );
}

#[test]
fn bad_input_fails_with_a_message() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (idx, lake) = (dir.path().join("idx"), dir.path().join("lake"));
    let lake = lake.to_str().unwrap();
    let expect_error = |args: &[&str], needle: &str| {
        let out = export_cmd().args(args).assert().code(2);
        let stderr = String::from_utf8(out.get_output().stderr.clone()).unwrap();
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    };
    expect_error(
        &["--index", idx.to_str().unwrap(), "--to", lake],
        "no index",
    );
    index(&idx);
    let i = idx.to_str().unwrap();
    expect_error(
        &["--index", i, "--to", lake, "--partition", "yesterday"],
        "invalid time",
    );
    expect_error(
        &[
            "--index",
            i,
            "--to",
            lake,
            "--partition",
            "2025-01-01T00:00:00Z",
        ],
        "no sealed partition starts at 2025-01-01T00:00:00.000Z: sealed partitions start at 1970-01-01T00:00:00.000Z, 1970-01-02T00:00:00.000Z",
    );
    expect_error(
        &["--index", i, "--to", lake, "--row-group-rows", "0"],
        "row_group_rows",
    );
    expect_error(
        &["--index", i, "--to", lake, "--id-bloom-fpr", "1.5"],
        "id_bloom_fpr",
    );
    let single = dir.path().join("single");
    Index::create(&single, mapping()).unwrap().close().unwrap();
    expect_error(
        &["--index", single.to_str().unwrap(), "--to", lake],
        "not a time-partitioned index",
    );
    // A lake whose log is not Delta JSON.
    let broken = dir.path().join("broken");
    std::fs::create_dir_all(broken.join("_delta_log")).unwrap();
    std::fs::write(
        broken.join("_delta_log/00000000000000000000.json"),
        "{not json\n",
    )
    .unwrap();
    expect_error(
        &["--index", i, "--to", broken.to_str().unwrap()],
        "a line is not JSON",
    );
}
