//! The README's CLI quick start, run as written: every `tm …` line of its block runs
//! with this build's binary (the block's `cargo run` wrapper and `/tmp` directory
//! swapped for the binary and a temporary directory) and must succeed, and the counts
//! its comments promise (`# 12 created`, `# 0 created, 12 duplicates`) must be printed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

/// A port free on 127.0.0.1 now (the server binds it a moment later).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The lines of the fenced block that follows `heading` in README.md.
fn block_after(heading: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let at = readme
        .find(heading)
        .unwrap_or_else(|| panic!("README.md has no {heading:?}"));
    let rest = &readme[at..];
    let start = rest.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let end = rest[start..].find("```").expect("the block's end");
    rest[start..start + end]
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_readme_cli_quick_start_runs_as_written() {
    let lines = block_after("## Quick start: the tidemark CLI");
    assert!(
        lines
            .first()
            .is_some_and(|l| l.starts_with("tm() { cargo run -q --release -p tidemark-cli")),
        "the block's first line defines tm: {lines:?}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tidemark-k8s");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut ran = 0;
    for line in &lines {
        let Some(rest) = line.strip_prefix("tm ") else {
            continue;
        };
        let (command, promise) = match rest.split_once('#') {
            Some((c, p)) => (c.trim(), Some(p.trim())),
            None => (rest.trim(), None),
        };
        let args: Vec<String> = command
            .split_whitespace()
            .map(|a| a.replace("/tmp/tidemark-k8s", dir.to_str().unwrap()))
            .collect();
        let out = Command::new(env!("CARGO_BIN_EXE_tidemark"))
            .args(&args)
            .current_dir(&root)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "README line `{line}` failed:\n{stdout}\n{stderr}"
        );
        if let Some(p) = promise {
            assert!(
                stdout.contains(p) || stderr.contains(p),
                "README line `{line}` promises {p:?}:\n{stdout}\n{stderr}"
            );
        }
        ran += 1;
    }
    assert_eq!(ran, 8, "the block's tm lines");
}

#[test]
fn the_readme_serve_quick_start_runs_as_written() {
    let lines = block_after("## Quick start: `tidemark serve`");
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let bin = env!("CARGO_BIN_EXE_tidemark");
    let script: String = lines
        .iter()
        // The build line is what this test's build already did.
        .filter(|l| !l.starts_with("cargo build"))
        .map(|l| {
            let l = l
                .replace("target/release/tidemark", bin)
                .replace("/tmp/tm-data", tmp.path().join("data").to_str().unwrap())
                .replace("9200", &port.to_string());
            // The server's default address is 127.0.0.1:9200; here, the free port.
            let l = if l.contains(" serve ") {
                l.replacen(" serve ", &format!(" serve --listen 127.0.0.1:{port} "), 1)
            } else {
                l
            };
            l + "\n"
        })
        .collect();
    assert!(script.contains(" serve "), "{script}");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Bounded: the block waits for the server with an unbounded loop.
    let out = Command::new("timeout")
        .args([
            "120",
            "bash",
            "-e",
            "-c",
            &format!("set -o pipefail\n{script}wait\n"),
        ])
        .current_dir(&root)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script}\n{stdout}\n{stderr}");
    // The second bulk: every create of the first is a 409.
    assert!(stdout.contains("409"), "{stdout}");
    assert!(stdout.contains("\"count\":"), "{stdout}");
    assert!(stdout.contains("per_min"), "{stdout}");
}

/// The metrics-protocols block, against a server of this build on a free port: each
/// `curl` runs as written, the second write answers the `400` naming line 2 its
/// comment promises, line protocol sent again is stored once, and the search finds
/// both hosts' samples.
#[test]
fn the_readme_metrics_protocols_block_runs_as_written() {
    let lines = block_after("### Metrics protocols");
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut server = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data"])
        .arg(tmp.path().join("data"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let script: String = lines
        .iter()
        .map(|l| l.replace("9200", &port.to_string()) + "\n")
        .collect();
    assert!(script.matches("curl").count() >= 3, "{script}");
    // The first write again, exactly as written (its `\` continuation included), then
    // the count.
    let at = lines
        .iter()
        .position(|l| l.contains("/write?db="))
        .expect("a line protocol write");
    let again: String = lines[at..=at + 1]
        .iter()
        .map(|l| l.replace("9200", &port.to_string()) + "\n")
        .collect();
    let full = format!(
        "until curl -sf localhost:{port}/-/ready >/dev/null; do sleep 0.2; done\n\
         {script}echo\n{again}echo\ncurl -s localhost:{port}/telegraf/_count\n"
    );
    let out = Command::new("timeout")
        .args([
            "60",
            "bash",
            "-e",
            "-c",
            &format!("set -o pipefail\n{full}"),
        ])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{full}\n{stdout}\n{stderr}");
    assert!(stdout.contains("line 2"), "the 400 names line 2: {stdout}");
    assert!(
        stdout.contains(r#""key":"a""#) && stdout.contains(r#""key":"b""#),
        "both hosts found: {stdout}"
    );
    // host a: usage and n; host b: usage. Sent twice, stored once.
    assert!(stdout.contains(r#""count":3}"#), "{stdout}");
}
