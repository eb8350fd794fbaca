//! Every fuzz target on all its seeds, on truncations of them, and on every input saved
//! under `regressions/<target>/` (crashes found by `cargo xtask fuzz`, kept as tests).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

fn regressions(name: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("regressions")
        .join(name);
    let mut out: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.file_name().is_none_or(|n| n != ".gitkeep"))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_target_survives_its_seeds_and_regressions() {
    let mut failures = Vec::new();
    for (name, target) in tidemark_fuzz::TARGETS {
        let seeds = tidemark_fuzz::seeds(name);
        assert!(!seeds.is_empty(), "target {name} has no seeds");
        let mut inputs: Vec<(String, Vec<u8>)> = Vec::new();
        for (i, seed) in seeds.iter().enumerate() {
            inputs.push((format!("seed {i}"), seed.clone()));
            for cut in [seed.len() / 2, seed.len().saturating_sub(1)] {
                inputs.push((format!("seed {i} cut at {cut}"), seed[..cut].to_vec()));
            }
        }
        for (path, bytes) in regressions(name) {
            inputs.push((path.display().to_string(), bytes));
        }
        for (what, bytes) in inputs {
            if catch_unwind(AssertUnwindSafe(|| target(&bytes))).is_err() {
                failures.push(format!("{name}: {what}"));
            }
        }
    }
    assert!(failures.is_empty(), "targets panicked on: {failures:#?}");
}

#[test]
fn every_target_has_a_libfuzzer_binary_and_a_regressions_dir() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let bins = manifest.matches("[[bin]]").count();
    assert_eq!(bins, tidemark_fuzz::TARGETS.len(), "one [[bin]] per target");
    for (name, _) in tidemark_fuzz::TARGETS {
        let path = format!("fuzz_targets/{name}.rs");
        assert!(root.join(&path).is_file(), "{path} is missing");
        assert!(
            manifest.contains(&format!("name = \"{name}\"\npath = \"{path}\"")),
            "Cargo.toml lacks the [[bin]] of {name}"
        );
        let source = std::fs::read_to_string(root.join(&path)).unwrap();
        assert!(
            source.contains(&format!("tidemark_fuzz::{name}(data)")),
            "{path} does not call tidemark_fuzz::{name}"
        );
        assert!(root.join("regressions").join(name).is_dir());
    }
}
