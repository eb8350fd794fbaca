//! The one binary: `tidemark demo` serves, loads a dataset through two protocols and
//! reports what the server counted; `tidemark serve` runs the server in-process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn tm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tidemark"))
}

/// The number before `label` on the line holding `line_has`.
fn number_before(text: &str, line_has: &str, label: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.contains(line_has))
        .unwrap_or_else(|| panic!("no line with {line_has:?} in\n{text}"));
    let at = line
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in {line:?}"));
    line[..at]
        .split_whitespace()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number before {label:?} in {line:?}"))
}

#[test]
fn demo_sends_a_dataset_twice_and_the_second_copy_is_all_duplicates() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let out = tm()
        .args(["demo", "--data", data.to_str().unwrap()])
        .args([
            "--listen",
            "127.0.0.1:0",
            "--series",
            "20",
            "--points",
            "2000",
        ])
        .arg("--exit")
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // 2,000 documents of 8 metrics each, sent twice.
    let lp_stored = number_before(&stdout, "line protocol", "stored");
    let lp_dups = number_before(&stdout, "line protocol", "duplicates");
    let rw_stored = number_before(&stdout, "remote write", "stored");
    let rw_dups = number_before(&stdout, "remote write", "duplicates");
    assert_eq!((lp_stored, lp_dups), (16_000, 0), "{stdout}");
    assert_eq!((rw_stored, rw_dups), (0, 16_000), "{stdout}");
    assert!(stdout.contains("/api/v1/query_range"), "{stdout}");
    assert!(stdout.contains("/metrics"), "{stdout}");
    // The samples are in the directory it names: a second run stores nothing new.
    let out = tm()
        .args(["demo", "--data", data.to_str().unwrap()])
        .args([
            "--listen",
            "127.0.0.1:0",
            "--series",
            "20",
            "--points",
            "2000",
        ])
        .arg("--exit")
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}");
    assert_eq!(number_before(&stdout, "line protocol", "stored"), 0);
    assert_eq!(
        number_before(&stdout, "line protocol", "duplicates"),
        16_000
    );
}

#[test]
fn serve_runs_in_process_and_stops_on_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let port_file = tmp.path().join("port");
    let mut child = tm()
        .args(["serve", "--data", tmp.path().join("data").to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--port-file"])
        .arg(&port_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let addr = loop {
        if let Ok(a) = std::fs::read_to_string(&port_file)
            && !a.trim().is_empty()
        {
            break a.trim().to_owned();
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no port file");
        std::thread::sleep(Duration::from_millis(50));
    };
    let ready = ureq::get(&format!("http://{addr}/-/ready")).call().unwrap();
    assert_eq!(ready.status(), 200);
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let code = child.wait().unwrap();
    assert!(code.success(), "{code:?}");
}
