//! The xtask reports at a small size, as CI runs them: each fails unless its own checks
//! pass (storage-compare: every strategy finds the generator's duplicates and
//! series-range is smaller than the inverted baseline; rollup-bench: the answers from
//! rollups equal those from raw rows). Being integration tests, they also make `cargo
//! test` build the `xtask` binary with the workspace's features, so CI runs `fuzz` from
//! it without a second build.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

fn run(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "xtask {args:?}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn storage_compare_small_finds_every_duplicate() {
    let tmp = tempfile::tempdir().unwrap();
    run(&[
        "storage-compare",
        "--small",
        "--out",
        tmp.path().to_str().unwrap(),
    ]);
    assert!(tmp.path().join("storage.md").is_file());
}

#[test]
fn rollup_bench_small_answers_equal_raw() {
    let tmp = tempfile::tempdir().unwrap();
    run(&[
        "rollup-bench",
        "--days",
        "3",
        "--series",
        "10",
        "--reps",
        "1",
        "--out",
        tmp.path().to_str().unwrap(),
    ]);
}
