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

/// README's `cargo xtask bloom-demo`, at a small size: every filter is measured, and
/// its false-positive rate over 20,000 absent items is near its 1% target (within
/// half to 1.5 times: about 200 expected, so this is many standard deviations wide).
#[test]
fn bloom_demo_small_measures_every_filter() {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["bloom-demo", "--items", "20000", "--absent", "20000"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for filter in ["BloomFilter", "BlockedBloomFilter", "Scalable"] {
        assert!(stdout.contains(filter), "{stdout}");
    }
    let ratios: Vec<f64> = stdout
        .lines()
        .filter_map(|l| l.split_whitespace().last()?.strip_suffix('x')?.parse().ok())
        .collect();
    assert_eq!(ratios.len(), 4, "{stdout}");
    assert!(ratios.iter().all(|r| (0.5..1.5).contains(r)), "{stdout}");
}
