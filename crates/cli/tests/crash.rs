//! The `tidemark` binary SIGKILLed while ingesting: the index opens at once (the lock
//! died with the process), loses nothing it had shown, and a re-ingest of the same
//! file adds exactly the missing documents, without a duplicate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tidemark_datagen::{Dataset, Options};

fn tm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tidemark"))
}

fn stats(dir: &str) -> Value {
    let out = tm().args(["stats", dir, "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "stats after a kill: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn sigkill_at_any_moment_keeps_documents_and_reingest_adds_no_duplicate() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = Dataset::k8s(Options::default().points(60_000).series(500));
    let unique = ds.unique_docs();
    let file = tmp.path().join("k8s.ndjson");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&file).unwrap());
    for line in ds.ndjson() {
        writeln!(w, "{line}").unwrap();
    }
    w.flush().unwrap();
    drop(w);
    let dir = tmp.path().join("ix");
    let dir = dir.to_str().unwrap();
    let mapping = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/tidemark/k8s-datagen.mapping.json");
    let status = tm()
        .args(["create", dir, "--mapping", mapping.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());

    let mut seen = 0u64;
    // Kill at growing delays: before the first batch, mid-log, mid-refresh, mid-merge.
    for delay_ms in [5u64, 50, 100, 150, 200, 300, 450] {
        let mut child = tm()
            .args([
                "ingest",
                dir,
                file.to_str().unwrap(),
                "--threads",
                "1",
                "--refresh-rows",
                "7000",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill().unwrap(); // SIGKILL
        let _ = child.wait().unwrap();
        let s = stats(dir);
        let docs = s["documents"].as_u64().unwrap();
        assert!(
            docs >= seen,
            "after a kill at {delay_ms} ms: {docs} documents, {seen} before"
        );
        assert!(docs <= unique);
        eprintln!("kill at {delay_ms} ms: {docs} documents");
        seen = docs;
    }

    // The whole file again: exactly the missing documents are created.
    let out = tm()
        .args(["ingest", dir, file.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        summary["created"].as_u64().unwrap(),
        unique - seen,
        "{summary}"
    );
    assert_eq!(summary["duplicates"].as_u64().unwrap(), seen, "{summary}");
    assert_eq!(summary["errors"].as_u64().unwrap(), 0);
    let s = stats(dir);
    assert_eq!(s["documents"].as_u64().unwrap(), unique);
    // And once more: all duplicates.
    let out = tm()
        .args(["ingest", dir, file.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["created"].as_u64().unwrap(), 0);
    assert_eq!(summary["duplicates"].as_u64().unwrap(), unique);
}
